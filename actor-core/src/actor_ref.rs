//! Actor references: typed `ActorRef<A>` and untyped `AnyActorRef`.

use crate::actor::{Actor, Handler};
use crate::ask_timeouts;
use crate::cell::{ActorCell, AnyCell, CellCore};
use crate::context::Context;
use crate::error::{AskError, TellError};
use crate::letter::{Envelope, HandlerFuture, Hdr, Letter, Node, Opened, UserLetter};
use crate::message::Message;
use crate::path::ActorPath;
use crate::system_message::SystemMessage;
use crate::watch::Terminated;
use std::any::Any;
use std::fmt;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

/// A typed reference to an actor: send it the messages `A` handles.
///
/// Cheap to clone (an atomic increment), `Send + Sync`, compared and hashed
/// by identity (one incarnation of one actor), displayed as its path.
///
/// ```
/// use troupe_core::prelude::*;
///
/// #[derive(Message)]
/// #[message(reply = u64)]
/// struct Next;
///
/// #[derive(Default)]
/// struct Seq(u64);
/// impl Actor for Seq {}
///
/// #[handlers]
/// impl Seq {
///     async fn next(&mut self, _: Next, _ctx: &mut Context<Self>) -> u64 {
///         self.0 += 1;
///         self.0
///     }
/// }
///
/// troupe_core::rt::block_on(async {
///     let system = ActorSystem::new("doc").unwrap();
///     let seq = system.spawn(Seq::default());
///     seq.tell(Next).unwrap();
///     assert_eq!(seq.ask(Next).await.unwrap(), 2);
///     system.shutdown().await;
/// });
/// ```
pub struct ActorRef<A: Actor> {
    pub(crate) cell: Arc<ActorCell<A>>,
}

impl<A: Actor> Clone for ActorRef<A> {
    fn clone(&self) -> Self {
        ActorRef {
            cell: self.cell.clone(),
        }
    }
}

impl<A: Actor> PartialEq for ActorRef<A> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.cell, &other.cell)
    }
}
impl<A: Actor> Eq for ActorRef<A> {}

impl<A: Actor> Hash for ActorRef<A> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.cell.core.uid.hash(state);
    }
}

impl<A: Actor> fmt::Display for ActorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.cell.core.path(), f)
    }
}

impl<A: Actor> fmt::Debug for ActorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ActorRef({}#{})",
            self.cell.core.path(),
            self.cell.core.uid
        )
    }
}

impl<A: Actor> ActorRef<A> {
    /// Sends `msg` without waiting for anything. Fails, handing the message
    /// back, if the actor has stopped (the message is also counted as a
    /// dead letter) or its bounded mailbox is full.
    pub fn tell<M>(&self, msg: M) -> Result<(), TellError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        if let Some(b) = &self.cell.bounded {
            if !b.try_reserve() {
                return Err(TellError::MailboxFull(msg));
            }
        }
        match self.cell.enqueue(Node::new(Envelope { msg, reply: None })) {
            Ok(()) => Ok(()),
            Err(node) => Err(TellError::Stopped(self.undeliverable(node))),
        }
    }

    /// Sends `msg`, waiting for room if the bounded mailbox is full
    /// (back-pressure). For an unbounded mailbox it is `tell`.
    pub async fn send<M>(&self, msg: M) -> Result<(), TellError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        let mut msg = msg;
        loop {
            match self.tell(msg) {
                Err(TellError::MailboxFull(m)) => {
                    let b = self.cell.bounded.as_ref().expect("full implies bounded");
                    let listener = b.space.listen();
                    match self.tell(m) {
                        Err(TellError::MailboxFull(m)) => {
                            msg = m;
                            listener.await;
                        }
                        other => return other,
                    }
                }
                other => return other,
            }
        }
    }

    #[allow(clippy::boxed_local)] // the box is what the mailbox hands back
    fn undeliverable<M: Message>(&self, node: Box<Node<A, Envelope<M>>>) -> M
    where
        A: Handler<M>,
    {
        if let Some(b) = &self.cell.bounded {
            b.release();
        }
        self.cell.dead_letter(M::manifest());
        node.body.msg
    }

    /// Sends `msg` and waits for the reply, for at most the system's
    /// default ask timeout.
    pub fn ask<M>(&self, msg: M) -> Ask<M::Reply>
    where
        M: Message,
        A: Handler<M>,
    {
        let timeout = self.cell.core.system.settings.ask_timeout;
        self.ask_timeout(msg, timeout)
    }

    /// Sends `msg` and waits for the reply for at most `timeout`. The
    /// message is sent at once, before the returned future is awaited.
    pub fn ask_timeout<M>(&self, msg: M, timeout: Duration) -> Ask<M::Reply>
    where
        M: Message,
        A: Handler<M>,
    {
        if let Some(b) = &self.cell.bounded {
            if !b.try_reserve() {
                return Ask::failed(AskError::MailboxFull);
            }
        }
        let (tx, rx) = oneshot::channel();
        match self.cell.enqueue(Node::new(Envelope {
            msg,
            reply: Some(tx),
        })) {
            Ok(()) => Ask {
                state: AskState::Waiting {
                    rx,
                    timeout,
                    deadline: None,
                },
            },
            Err(node) => {
                drop(self.undeliverable(node));
                Ask::failed(AskError::Stopped)
            }
        }
    }

    /// Stops the actor before its next message; messages still queued go to
    /// dead letters. Children stop first.
    pub fn stop(&self) {
        self.cell.clone().request_stop();
    }

    /// Stops the actor once it has handled the messages queued before this
    /// call.
    pub fn poison_pill(&self) {
        let _ = self.cell.clone().send_system(SystemMessage::PoisonPill);
    }

    /// The actor's path.
    pub fn path(&self) -> ActorPath {
        self.cell.core.path()
    }

    /// A number unique to this actor within its system.
    pub fn uid(&self) -> u64 {
        self.cell.core.uid
    }

    /// True once the actor has fully stopped.
    pub fn is_terminated(&self) -> bool {
        self.cell.core.is_terminated()
    }

    /// Waits until the actor has fully stopped.
    pub async fn wait_for_termination(&self) {
        self.cell.core.wait_terminated().await
    }

    /// An untyped reference to the same actor.
    pub fn to_any(&self) -> AnyActorRef {
        AnyActorRef {
            cell: self.cell.clone(),
        }
    }

    pub(crate) fn deliver_terminated(&self, t: Terminated)
    where
        A: Handler<Terminated>,
    {
        // A watcher that has stopped no longer cares: no dead letter.
        let _ = self.cell.enqueue(Node::new(TerminatedLetter(t)));
    }
}

/// The letter carrying `Terminated` to a watcher; dropped if the watcher
/// has unwatched meanwhile.
struct TerminatedLetter(Terminated);

impl<A: Handler<Terminated>> Letter<A> for Node<A, TerminatedLetter> {
    fn hdr_ptr(&mut self) -> *mut Hdr<A> {
        self.hdr_mut()
    }
    fn open(self: Box<Self>) -> Opened<A> {
        Opened::User(self)
    }
    fn type_name(&self) -> &'static str {
        Terminated::manifest()
    }
}

impl<A: Handler<Terminated>> UserLetter<A> for Node<A, TerminatedLetter> {
    fn deliver<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> HandlerFuture<'a> {
        let t = self.body.0;
        let wanted = ctx.take_watch(t.actor.uid());
        Box::pin(async move {
            if wanted {
                actor.handle(t, ctx).await;
            }
        })
    }
    fn attach_reply(&mut self, _reply: &mut dyn Any) {}
}

/// The reply to an `ask`: a future of the reply or an [`AskError`].
#[must_use = "an ask does nothing useful unless its reply is awaited"]
pub struct Ask<R> {
    state: AskState<R>,
}

enum AskState<R> {
    Failed(Option<AskError>),
    Waiting {
        rx: oneshot::Receiver<R>,
        timeout: Duration,
        /// Set on the first poll that finds no reply.
        deadline: Option<(Instant, ask_timeouts::Registration)>,
    },
}

impl<R> Ask<R> {
    fn failed(e: AskError) -> Self {
        Ask {
            state: AskState::Failed(Some(e)),
        }
    }
}

impl<R> Future for Ask<R> {
    type Output = Result<R, AskError>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        match &mut this.state {
            AskState::Failed(e) => Poll::Ready(Err(e.take().unwrap_or(AskError::Stopped))),
            AskState::Waiting {
                rx,
                timeout,
                deadline,
            } => {
                match Pin::new(rx).poll(cx) {
                    Poll::Ready(Ok(r)) => return Poll::Ready(Ok(r)),
                    Poll::Ready(Err(_)) => return Poll::Ready(Err(AskError::Stopped)),
                    Poll::Pending => {}
                }
                match deadline {
                    // The deadline is registered only when the reply is not
                    // there at once (see `ask_timeouts`).
                    None => {
                        let at = Instant::now() + *timeout;
                        *deadline = Some((at, ask_timeouts::register(at, cx.waker())));
                        Poll::Pending
                    }
                    Some((at, reg)) => {
                        if Instant::now() >= *at {
                            Poll::Ready(Err(AskError::Timeout(*timeout)))
                        } else {
                            reg.update(cx.waker());
                            Poll::Pending
                        }
                    }
                }
            }
        }
    }
}

/// A reference to an actor of unknown type: it can be stopped, watched,
/// compared and printed, and turned back into a typed [`ActorRef`] with
/// [`downcast`](Self::downcast).
#[derive(Clone)]
pub struct AnyActorRef {
    pub(crate) cell: Arc<dyn AnyCell>,
}

impl AnyActorRef {
    pub(crate) fn core(&self) -> &CellCore {
        self.cell.core()
    }

    pub(crate) fn send_system(&self, msg: SystemMessage) -> Result<(), SystemMessage> {
        self.cell.clone().send_system(msg)
    }

    /// The actor's path.
    pub fn path(&self) -> ActorPath {
        self.core().path()
    }

    /// A number unique to this actor within its system.
    pub fn uid(&self) -> u64 {
        self.core().uid
    }

    /// Stops the actor (see [`ActorRef::stop`]).
    pub fn stop(&self) {
        self.cell.clone().request_stop();
    }

    /// Stops the actor after the messages already queued.
    pub fn poison_pill(&self) {
        let _ = self.send_system(SystemMessage::PoisonPill);
    }

    /// True once the actor has fully stopped.
    pub fn is_terminated(&self) -> bool {
        self.core().is_terminated()
    }

    /// Waits until the actor has fully stopped.
    pub async fn wait_for_termination(&self) {
        self.core().wait_terminated().await
    }

    /// The typed reference, if the actor is an `A`.
    pub fn downcast<A: Actor>(&self) -> Option<ActorRef<A>> {
        self.cell
            .clone()
            .into_any()
            .downcast::<ActorCell<A>>()
            .ok()
            .map(|cell| ActorRef { cell })
    }
}

impl PartialEq for AnyActorRef {
    fn eq(&self, other: &Self) -> bool {
        self.uid() == other.uid()
            && std::ptr::addr_eq(Arc::as_ptr(&self.cell), Arc::as_ptr(&other.cell))
    }
}
impl Eq for AnyActorRef {}

impl Hash for AnyActorRef {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.uid().hash(state);
    }
}

impl fmt::Display for AnyActorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.path(), f)
    }
}

impl fmt::Debug for AnyActorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyActorRef({}#{})", self.path(), self.uid())
    }
}

impl<A: Actor> From<ActorRef<A>> for AnyActorRef {
    fn from(r: ActorRef<A>) -> Self {
        r.to_any()
    }
}
