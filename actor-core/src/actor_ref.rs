//! Actor references: typed `ActorRef<A>` and untyped `AnyActorRef`.

use crate::actor::{Actor, Handler};
use crate::ask_timeouts;
use crate::cell::{ActorCell, AnyCell, CellCore};
use crate::context::Context;
use crate::error::{AskError, TellError};
use crate::letter::{Envelope, HandlerFuture, Hdr, Letter, Node, Opened, Sent, UserLetter};
use crate::message::Message;
use crate::path::{ActorPath, Name};
use crate::remote::RemoteTarget;
use crate::replier::Replier;
use crate::system_message::SystemMessage;
use crate::watch::Terminated;
use std::any::Any;
use std::borrow::Cow;
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
    target: Target<A>,
}

/// Where an actor lives.
enum Target<A: Actor> {
    /// In this process: its cell.
    Local(Arc<ActorCell<A>>),
    /// On another node, reached through remoting.
    Remote(Arc<RemoteTarget>),
}

impl<A: Actor> Clone for ActorRef<A> {
    fn clone(&self) -> Self {
        ActorRef {
            target: match &self.target {
                Target::Local(c) => Target::Local(c.clone()),
                Target::Remote(r) => Target::Remote(r.clone()),
            },
        }
    }
}

impl<A: Actor> PartialEq for ActorRef<A> {
    fn eq(&self, other: &Self) -> bool {
        match (&self.target, &other.target) {
            (Target::Local(a), Target::Local(b)) => Arc::ptr_eq(a, b),
            (Target::Remote(a), Target::Remote(b)) => a.path == b.path,
            _ => false,
        }
    }
}
impl<A: Actor> Eq for ActorRef<A> {}

impl<A: Actor> Hash for ActorRef<A> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.uid().hash(state);
    }
}

impl<A: Actor> fmt::Display for ActorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Local(c) => fmt::Display::fmt(&c.core.path(), f),
            Target::Remote(r) => fmt::Display::fmt(&r.path, f),
        }
    }
}

impl<A: Actor> fmt::Debug for ActorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.target {
            Target::Local(c) => write!(f, "ActorRef({}#{})", c.core.path(), c.core.uid),
            Target::Remote(r) => write!(f, "ActorRef({})", r.path),
        }
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
        self.tell_with_reply(msg, None)
    }

    /// Queues `msg` with where its reply goes.
    pub(crate) fn tell_with_reply<M>(
        &self,
        msg: M,
        reply: Option<Replier<M::Reply>>,
    ) -> Result<(), TellError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        self.send_letter(msg, reply, None)
    }

    /// Hands `msg` on with the reply channel of the ask it came with (and
    /// its original sender, if any), without waiting for the reply: the
    /// actor that handles it answers the original asker directly. This is
    /// how a router passes asks on without a task per ask.
    ///
    /// To a remote actor the message is sent as an ask whose reply
    /// completes `reply` when it arrives. On failure the message and the
    /// reply channel are handed back in the error.
    ///
    /// ```
    /// use std::time::Duration;
    /// use troupe_core::prelude::*;
    /// use troupe_core::Replier;
    ///
    /// #[derive(Message)]
    /// #[message(reply = u64)]
    /// struct Square(u64);
    ///
    /// struct Worker;
    /// impl Actor for Worker {}
    /// #[handlers]
    /// impl Worker {
    ///     async fn square(&mut self, m: Square) -> u64 { m.0 * m.0 }
    /// }
    ///
    /// /// Passes every ask on to its worker; the worker answers the asker.
    /// struct Router { worker: ActorRef<Worker> }
    /// impl Actor for Router {}
    /// impl Handler<Square> for Router {
    ///     async fn handle(&mut self, _: Square, _ctx: &mut Context<Self>) -> u64 { 0 }
    ///     async fn handle_with_reply(
    ///         &mut self,
    ///         msg: Square,
    ///         reply: Option<Replier<u64>>,
    ///         _ctx: &mut Context<Self>,
    ///     ) {
    ///         if let Err(e) = self.worker.forward(msg, reply, None) {
    ///             if let Some(r) = e.reply { r.fail(troupe_core::AskError::Stopped) }
    ///         }
    ///     }
    /// }
    ///
    /// troupe_core::rt::block_on(async {
    ///     let system = ActorSystem::new("doc").unwrap();
    ///     let worker = system.spawn(Worker);
    ///     let router = system.spawn(Router { worker });
    ///     assert_eq!(router.ask(Square(12)).await.unwrap(), 144);
    ///     system.shutdown().await;
    /// });
    /// ```
    pub fn forward<M>(
        &self,
        msg: M,
        reply: Option<Replier<M::Reply>>,
        sender: Option<&AnyActorRef>,
    ) -> Result<(), ForwardError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        match &self.target {
            Target::Remote(r) => r.forward(msg, reply, sender),
            Target::Local(cell) => Self::enqueue_local(cell, msg, reply, sender.cloned())
                .map_err(|(error, reply)| ForwardError { error, reply }),
        }
    }

    /// Sends `msg` with a sender: the receiving handler finds it in
    /// [`Context::sender`] (for this message only). Typed actors usually put
    /// a reply-to reference in the message instead; this is for protocols
    /// that answer whoever asked, as Akka's classic `sender()`.
    ///
    /// ```
    /// use troupe_core::prelude::*;
    ///
    /// #[derive(Message)]
    /// struct Hello;
    ///
    /// struct Greeter;
    /// impl Actor for Greeter {}
    ///
    /// #[handlers]
    /// impl Greeter {
    ///     async fn hello(&mut self, _m: Hello, ctx: &mut Context<Self>) {
    ///         if let Some(from) = ctx.sender() {
    ///             tracing::info!("hello from {from}");
    ///         }
    ///     }
    /// }
    ///
    /// troupe_core::rt::block_on(async {
    ///     let system = ActorSystem::new("doc").unwrap();
    ///     let a = system.spawn(Greeter);
    ///     let b = system.spawn(Greeter);
    ///     a.tell_from(Hello, &b.to_any()).unwrap();
    ///     system.shutdown().await;
    /// });
    /// ```
    pub fn tell_from<M>(&self, msg: M, sender: &AnyActorRef) -> Result<(), TellError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        self.send_letter(msg, None, Some(sender.clone()))
    }

    /// Queues `msg` with where its reply goes and who sent it.
    pub(crate) fn send_letter<M>(
        &self,
        msg: M,
        reply: Option<Replier<M::Reply>>,
        sender: Option<AnyActorRef>,
    ) -> Result<(), TellError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        match &self.target {
            Target::Local(cell) => {
                Self::enqueue_local(cell, msg, reply, sender).map_err(|(e, _)| e)
            }
            Target::Remote(r) => match &sender {
                Some(s) => r.tell_from(msg, s),
                None => r.tell(msg),
            },
        }
    }

    /// Queues a letter in a local mailbox; on failure hands back the
    /// message and its reply channel (the message is counted as a dead
    /// letter if the actor has stopped).
    #[allow(clippy::type_complexity)]
    fn enqueue_local<M>(
        cell: &Arc<ActorCell<A>>,
        msg: M,
        reply: Option<Replier<M::Reply>>,
        sender: Option<AnyActorRef>,
    ) -> Result<(), (TellError<M>, Option<Replier<M::Reply>>)>
    where
        M: Message,
        A: Handler<M>,
    {
        if let Some(b) = &cell.bounded {
            if !b.try_reserve() {
                return Err((TellError::MailboxFull(msg), reply));
            }
        }
        // A letter with a reply (a forwarded ask, or one that came over
        // the network, delivered by the connection's reader) takes the
        // ask's fast path: an idle actor handles it on this thread.
        let wants_reply = reply.is_some();
        let Some(sender) = sender else {
            return match cell.enqueue_letter(Node::new(Envelope { msg, reply }), wants_reply) {
                Ok(()) => Ok(()),
                Err(node) => {
                    let Envelope { msg, reply } = Self::undeliverable(cell, node);
                    Err((TellError::Stopped(msg), reply))
                }
            };
        };
        match cell.enqueue_letter(Node::new(Sent { msg, reply, sender }), wants_reply) {
            Ok(()) => Ok(()),
            Err(node) => {
                if let Some(b) = &cell.bounded {
                    b.release();
                }
                cell.dead_letter(M::manifest());
                let Sent { msg, reply, .. } = node.body;
                Err((TellError::Stopped(msg), reply))
            }
        }
    }

    /// Queues a message that is still encoded for this local actor, which
    /// decodes it when it handles it (see `remote::undecoded`). A stopped
    /// actor's message is a dead letter; an asker is told why.
    pub(crate) fn send_undecoded<M>(
        &self,
        payload: crate::remote::undecoded::Payload,
        reply: Option<crate::remote::reply::ReplySink>,
        sender: Option<AnyActorRef>,
    ) -> Result<(), crate::remote::registry::DispatchError>
    where
        M: Message + serde::de::DeserializeOwned,
        M::Reply: serde::Serialize,
        A: Handler<M>,
    {
        use crate::remote::registry::DispatchError;
        use crate::remote::undecoded::Undecoded;
        let Target::Local(cell) = &self.target else {
            unreachable!("only local actors are sent undecoded messages");
        };
        if let Some(b) = &cell.bounded {
            if !b.try_reserve() {
                // (A reply channel dropped here tells the asker.)
                drop(Undecoded::<M>::new(payload, reply, sender));
                return Err(DispatchError::MailboxFull);
            }
        }
        let wants_reply = reply.is_some();
        let node = Node::new(Undecoded::<M>::new(payload, reply, sender));
        match cell.enqueue_letter(node, wants_reply) {
            Ok(()) => Ok(()),
            Err(node) => {
                if let Some(b) = &cell.bounded {
                    b.release();
                }
                cell.dead_letter(M::manifest());
                // Its reply channel tells the asker, as `dispatch_typed`'s.
                drop(node);
                Err(DispatchError::Stopped)
            }
        }
    }

    /// Sends `msg`, waiting for room if the bounded mailbox is full
    /// (back-pressure). For an unbounded mailbox it is `tell`.
    pub async fn send<M>(&self, msg: M) -> Result<(), TellError<M>>
    where
        M: Message,
        A: Handler<M>,
    {
        if let Target::Remote(r) = &self.target {
            return r.send(msg).await;
        }
        let mut msg = msg;
        loop {
            match self.tell(msg) {
                Err(TellError::MailboxFull(m)) => {
                    let Some(listener) = self
                        .local_cell()
                        .and_then(|cell| cell.bounded.as_ref())
                        .map(|b| b.space.listen())
                    else {
                        return Err(TellError::MailboxFull(m));
                    };
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

    /// For a remote actor, waits until the queue of messages to its node
    /// has room (a `tell` that found it full returned
    /// [`TellError::MailboxFull`]), or is closed (this system's remoting is
    /// shut down: it returns at once, and a send fails with
    /// [`TellError::NotSendable`]). The room is not reserved, so a send may
    /// still find the queue full again. It watches the queue of ordinary
    /// messages, not the control queue of types registered with
    /// `register_control`. For a local actor it returns at once (use
    /// [`send`](Self::send) to wait for room in a bounded mailbox).
    ///
    /// For code that keeps the messages a full queue refused and sends them
    /// again itself, in order (a sharding region holding messages for a
    /// congested node), where [`send`](Self::send) would wait with one
    /// message in hand. Wait in a task of its own, not in a handler, and
    /// bound the wait if the node may go away.
    ///
    /// ```
    /// use troupe_core::prelude::*;
    ///
    /// struct Worker;
    /// impl Actor for Worker {}
    ///
    /// troupe_core::rt::block_on(async {
    ///     let system = ActorSystem::new("room").unwrap();
    ///     let worker = system.spawn(Worker);
    ///     // Local: at once.
    ///     worker.wait_for_room().await;
    ///     system.shutdown().await;
    /// });
    /// ```
    pub async fn wait_for_room(&self) {
        if let Target::Remote(r) = &self.target {
            r.wait_for_room().await;
        }
    }

    #[allow(clippy::boxed_local)] // the box is what the mailbox hands back
    fn undeliverable<M: Message>(
        cell: &ActorCell<A>,
        node: Box<Node<A, Envelope<M>>>,
    ) -> Envelope<M>
    where
        A: Handler<M>,
    {
        if let Some(b) = &cell.bounded {
            b.release();
        }
        cell.dead_letter(M::manifest());
        node.body
    }

    /// Sends `msg` and waits for the reply, for at most the system's
    /// default ask timeout. A local idle actor may handle it on the calling
    /// thread (see [`ask_timeout`](Self::ask_timeout)).
    pub fn ask<M>(&self, msg: M) -> Ask<M::Reply>
    where
        M: Message,
        A: Handler<M>,
    {
        let timeout = match &self.target {
            Target::Local(cell) => cell.core.system.settings.ask_timeout,
            Target::Remote(r) => r.default_ask_timeout(),
        };
        self.ask_timeout(msg, timeout)
    }

    /// Sends `msg` and waits for the reply for at most `timeout`. The
    /// message is sent at once, before the returned future is awaited.
    ///
    /// If the actor is local and idle, its handler usually runs right here,
    /// on the calling thread, inside this call (the reply is then ready
    /// when the future is first polled): do not hold a lock across this
    /// call that the handler takes too. A handler that has to wait moves
    /// to a task of the dispatcher at its first wait.
    pub fn ask_timeout<M>(&self, msg: M, timeout: Duration) -> Ask<M::Reply>
    where
        M: Message,
        A: Handler<M>,
    {
        let cell = match &self.target {
            Target::Local(cell) => cell,
            Target::Remote(r) => {
                return match r.ask::<M>(msg, timeout) {
                    Ok(rx) => Ask::waiting(ReplyRx::Remote(rx), timeout),
                    Err(e) => Ask::failed(e),
                }
            }
        };
        if let Some(b) = &cell.bounded {
            if !b.try_reserve() {
                return Ask::failed(AskError::MailboxFull);
            }
        }
        let (tx, rx) = oneshot::channel();
        // An idle actor handles the ask right here (see `enqueue_ask`).
        match cell.enqueue_ask(Node::new(Envelope {
            msg,
            reply: Some(Replier::local(tx)),
        })) {
            Ok(()) => Ask::waiting(ReplyRx::Local(rx), timeout),
            Err(node) => {
                drop(Self::undeliverable(cell, node));
                Ask::failed(AskError::Stopped)
            }
        }
    }

    /// Stops the actor before its next message; messages still queued go to
    /// dead letters. Children stop first.
    pub fn stop(&self) {
        self.to_any().stop();
    }

    /// Stops the actor once it has handled the messages queued before this
    /// call.
    pub fn poison_pill(&self) {
        self.to_any().poison_pill();
    }

    /// As [`poison_pill`](Self::poison_pill), running the stop of an idle
    /// actor on this thread (see [`AnyActorRef::poison_pill_here`]).
    pub fn poison_pill_here(&self) {
        self.to_any().poison_pill_here();
    }

    /// The actor's path within its system (for a remote actor, see
    /// [`Display`](fmt::Display) for the full address).
    pub fn path(&self) -> ActorPath {
        match &self.target {
            Target::Local(c) => c.core.path(),
            Target::Remote(r) => ActorPath::from_string(r.path.path.clone()),
        }
    }

    /// The actor's name: the last element of its path (given at spawn,
    /// or generated). Allocates only for a generated name.
    pub fn name(&self) -> Cow<'_, str> {
        match &self.target {
            Target::Local(c) => c.core.name.as_str(),
            Target::Remote(r) => Cow::Borrowed(last_element(&r.path.path)),
        }
    }

    /// The name given at spawn ([`Props::with_name`](crate::Props::with_name)),
    /// as the very `Arc` that was given: a map of actors keyed by their
    /// names can borrow the key from the actor instead of keeping a copy.
    /// `None` for a generated name and for a remote actor.
    pub fn given_name(&self) -> Option<&Arc<str>> {
        match &self.target {
            Target::Local(c) => match &c.core.name {
                Name::Given(n) => Some(n),
                Name::Generated(_) => None,
            },
            Target::Remote(_) => None,
        }
    }

    /// A number unique to this actor within its system (for a remote ref
    /// resolved by path alone, a hash of its full path).
    pub fn uid(&self) -> u64 {
        match &self.target {
            Target::Local(c) => c.core.uid,
            Target::Remote(r) => r.key(),
        }
    }

    /// True if the actor lives in another actor system, reached over the
    /// network.
    pub fn is_remote(&self) -> bool {
        matches!(self.target, Target::Remote(_))
    }

    /// True once the actor has fully stopped (always false for a remote
    /// actor: watch it to learn that it stopped).
    pub fn is_terminated(&self) -> bool {
        // Not through `to_any`: a clone would write the cell's reference
        // count, which shares its cache line with the busy mailbox state.
        match &self.target {
            Target::Local(c) => c.core.is_terminated(),
            Target::Remote(_) => false,
        }
    }

    /// Waits until the actor has fully stopped (a local actor only; for a
    /// remote one, watch it).
    pub async fn wait_for_termination(&self) {
        if let Target::Local(c) = &self.target {
            c.core.wait_terminated().await
        }
    }

    /// An untyped reference to the same actor.
    pub fn to_any(&self) -> AnyActorRef {
        AnyActorRef {
            target: match &self.target {
                Target::Local(c) => AnyTarget::Local(c.clone()),
                Target::Remote(r) => AnyTarget::Remote(r.clone()),
            },
        }
    }

    /// The remote actor's target, if it is remote.
    pub(crate) fn remote_target(&self) -> Option<&Arc<RemoteTarget>> {
        match &self.target {
            Target::Local(_) => None,
            Target::Remote(r) => Some(r),
        }
    }

    pub(crate) fn from_cell(cell: Arc<ActorCell<A>>) -> Self {
        ActorRef {
            target: Target::Local(cell),
        }
    }

    pub(crate) fn from_remote(r: Arc<RemoteTarget>) -> Self {
        ActorRef {
            target: Target::Remote(r),
        }
    }

    /// The cell of a local actor.
    pub(crate) fn local_cell(&self) -> Option<&Arc<ActorCell<A>>> {
        match &self.target {
            Target::Local(c) => Some(c),
            Target::Remote(_) => None,
        }
    }

    pub(crate) fn deliver_terminated(&self, t: Terminated)
    where
        A: Handler<Terminated>,
    {
        // A watcher that has stopped no longer cares: no dead letter.
        if let Target::Local(cell) = &self.target {
            let _ = cell.enqueue(Node::new(TerminatedLetter(t, false)));
        }
    }

    /// The notice that gives this actor the `Terminated` of each of its
    /// children (see `Context::watch_children`). Holds the actor weakly:
    /// it is kept in the actor's own cell.
    pub(crate) fn child_notice(&self) -> Option<crate::cell::ChildNotice>
    where
        A: Handler<Terminated>,
    {
        let Target::Local(cell) = &self.target else {
            return None;
        };
        let weak = Arc::downgrade(cell);
        Some(Arc::new(move |t: Terminated| {
            if let Some(cell) = weak.upgrade() {
                let _ = cell.enqueue(Node::new(TerminatedLetter(t, true)));
            }
        }))
    }
}

/// The letter carrying `Terminated` to a watcher; dropped if the watcher
/// has unwatched meanwhile. The flag marks a parent's notice of its
/// child (`Context::watch_children`), which is always wanted.
struct TerminatedLetter(Terminated, bool);

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
        let TerminatedLetter(t, child_notice) = self.into_body();
        // A child's notice is always wanted (its parent's watch of it, if
        // any, was not notified: it is reported once) and ends the watch.
        let wanted = ctx.take_watch(t.actor.uid()) || child_notice;
        HandlerFuture::new(async move {
            if wanted {
                actor.handle(t, ctx).await;
            }
        })
    }
    fn attach_reply(&mut self, _reply: &mut dyn Any) {}
}

/// Why [`ActorRef::forward`] could not hand a message on: the error (with
/// the message) and the reply channel, to answer or pass elsewhere.
pub struct ForwardError<M: Message> {
    /// Why, with the message.
    pub error: TellError<M>,
    /// The reply channel that came with the message, unanswered.
    pub reply: Option<Replier<M::Reply>>,
}

impl<M: Message> fmt::Debug for ForwardError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ForwardError({:?})", self.error)
    }
}

impl<M: Message> fmt::Display for ForwardError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<M: Message> std::error::Error for ForwardError<M> {}

/// The reply to an `ask`: a future of the reply or an [`AskError`].
#[must_use = "an ask does nothing useful unless its reply is awaited"]
pub struct Ask<R> {
    state: AskState<R>,
}

enum AskState<R> {
    Failed(Option<AskError>),
    Waiting {
        rx: ReplyRx<R>,
        timeout: Duration,
        /// Set on the first poll that finds no reply.
        deadline: Option<(Instant, ask_timeouts::Registration)>,
    },
}

/// Where the reply comes from.
enum ReplyRx<R> {
    Local(oneshot::Receiver<Result<R, AskError>>),
    /// A remote reply, or why there is none (the node was lost).
    Remote(oneshot::Receiver<Result<R, AskError>>),
}

impl<R> Ask<R> {
    /// An ask that has already failed with `e` (for code that builds its
    /// own asks, such as routers that refuse a message).
    pub fn failed(e: AskError) -> Self {
        Ask {
            state: AskState::Failed(Some(e)),
        }
    }

    pub(crate) fn waiting_local(
        rx: oneshot::Receiver<Result<R, AskError>>,
        timeout: Duration,
    ) -> Self {
        Self::waiting(ReplyRx::Local(rx), timeout)
    }

    fn waiting(rx: ReplyRx<R>, timeout: Duration) -> Self {
        Ask {
            state: AskState::Waiting {
                rx,
                timeout,
                deadline: None,
            },
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
                let ready = match rx {
                    ReplyRx::Local(rx) => match Pin::new(rx).poll(cx) {
                        Poll::Ready(r) => Some(r.unwrap_or(Err(AskError::Stopped))),
                        Poll::Pending => None,
                    },
                    ReplyRx::Remote(rx) => match Pin::new(rx).poll(cx) {
                        Poll::Ready(Ok(r)) => Some(r),
                        Poll::Ready(Err(_)) => Some(Err(AskError::Remote(
                            "the remote node was lost before replying".into(),
                        ))),
                        Poll::Pending => None,
                    },
                };
                if let Some(r) = ready {
                    return Poll::Ready(r);
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
    target: AnyTarget,
}

#[derive(Clone)]
enum AnyTarget {
    Local(Arc<dyn AnyCell>),
    Remote(Arc<RemoteTarget>),
}

impl AnyActorRef {
    /// The cell of a local actor. Parents, children and the actors a
    /// runtime routine works on are always local.
    pub(crate) fn core(&self) -> &CellCore {
        match &self.target {
            AnyTarget::Local(c) => c.core(),
            AnyTarget::Remote(r) => panic!("bug: local-only operation on remote actor {}", r.path),
        }
    }

    pub(crate) fn local(&self) -> Option<&Arc<dyn AnyCell>> {
        match &self.target {
            AnyTarget::Local(c) => Some(c),
            AnyTarget::Remote(_) => None,
        }
    }

    pub(crate) fn remote(&self) -> Option<&Arc<RemoteTarget>> {
        match &self.target {
            AnyTarget::Local(_) => None,
            AnyTarget::Remote(r) => Some(r),
        }
    }

    pub(crate) fn from_local(c: Arc<dyn AnyCell>) -> Self {
        AnyActorRef {
            target: AnyTarget::Local(c),
        }
    }

    pub(crate) fn from_remote(r: Arc<RemoteTarget>) -> Self {
        AnyActorRef {
            target: AnyTarget::Remote(r),
        }
    }

    pub(crate) fn send_system(&self, msg: SystemMessage) -> Result<(), SystemMessage> {
        match &self.target {
            AnyTarget::Local(c) => c.clone().send_system(msg),
            AnyTarget::Remote(_) => Err(msg),
        }
    }

    /// The actor's path within its system.
    pub fn path(&self) -> ActorPath {
        match &self.target {
            AnyTarget::Local(c) => c.core().path(),
            AnyTarget::Remote(r) => ActorPath::from_string(r.path.path.clone()),
        }
    }

    /// The actor's name: the last element of its path (given at spawn,
    /// or generated). Allocates only for a generated name.
    pub fn name(&self) -> Cow<'_, str> {
        match &self.target {
            AnyTarget::Local(c) => c.core().name.as_str(),
            AnyTarget::Remote(r) => Cow::Borrowed(last_element(&r.path.path)),
        }
    }

    /// A number unique to this actor within its system (for a remote ref
    /// resolved by path alone, a hash of its full path).
    pub fn uid(&self) -> u64 {
        match &self.target {
            AnyTarget::Local(c) => c.core().uid,
            AnyTarget::Remote(r) => r.key(),
        }
    }

    /// True if the actor lives in another actor system.
    pub fn is_remote(&self) -> bool {
        matches!(self.target, AnyTarget::Remote(_))
    }

    /// Stops the actor (see [`ActorRef::stop`]). A remote actor cannot be
    /// stopped from here (send it a message that makes it stop); the
    /// attempt is logged.
    pub fn stop(&self) {
        match &self.target {
            AnyTarget::Local(c) => c.clone().request_stop(),
            AnyTarget::Remote(r) => {
                tracing::warn!(
                    "cannot stop remote actor {} from another node; send it a message instead",
                    r.path
                )
            }
        }
    }

    /// Stops the actor after the messages already queued (local actors
    /// only, as [`stop`](Self::stop)).
    pub fn poison_pill(&self) {
        if self.send_system(SystemMessage::PoisonPill).is_err() {
            if let AnyTarget::Remote(r) = &self.target {
                tracing::warn!(
                    "cannot poison remote actor {} from another node; send it a message instead",
                    r.path
                );
            }
        }
    }

    /// As [`poison_pill`](Self::poison_pill), but if the actor is idle its
    /// stop runs at once on this thread (its `stopping` and `stopped`
    /// hooks included, as an ask to an idle actor runs its handler inline)
    /// instead of as a task of its own: the cheap way for a parent to stop
    /// many idle children, such as a shard passivating its entities. A stop
    /// that has to wait continues as a task. Local actors only.
    pub fn poison_pill_here(&self) {
        match &self.target {
            AnyTarget::Local(c) => {
                let _ = c.clone().send_system_here(SystemMessage::PoisonPill);
            }
            AnyTarget::Remote(_) => self.poison_pill(),
        }
    }

    /// True once the actor has fully stopped (always false for a remote
    /// actor: watch it instead).
    pub fn is_terminated(&self) -> bool {
        match &self.target {
            AnyTarget::Local(c) => c.core().is_terminated(),
            AnyTarget::Remote(_) => false,
        }
    }

    /// Waits until the actor has fully stopped (local actors only).
    pub async fn wait_for_termination(&self) {
        if let AnyTarget::Local(c) = &self.target {
            c.core().wait_terminated().await
        }
    }

    /// The typed reference, if the actor is an `A`. A remote actor's type
    /// cannot be checked from here: the typed ref is given, and a message
    /// it does not handle is dropped (and logged) by its node.
    pub fn downcast<A: Actor>(&self) -> Option<ActorRef<A>> {
        match &self.target {
            AnyTarget::Local(c) => c
                .clone()
                .into_any()
                .downcast::<ActorCell<A>>()
                .ok()
                .map(ActorRef::from_cell),
            AnyTarget::Remote(r) => Some(ActorRef::from_remote(r.clone())),
        }
    }
}

impl PartialEq for AnyActorRef {
    fn eq(&self, other: &Self) -> bool {
        match (&self.target, &other.target) {
            (AnyTarget::Local(a), AnyTarget::Local(b)) => {
                a.core().uid == b.core().uid && std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
            }
            (AnyTarget::Remote(a), AnyTarget::Remote(b)) => a.path == b.path,
            _ => false,
        }
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
        match &self.target {
            AnyTarget::Local(c) => fmt::Display::fmt(&c.core().path(), f),
            AnyTarget::Remote(r) => fmt::Display::fmt(&r.path, f),
        }
    }
}

impl fmt::Debug for AnyActorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AnyActorRef({self}#{})", self.uid())
    }
}

impl<A: Actor> From<ActorRef<A>> for AnyActorRef {
    fn from(r: ActorRef<A>) -> Self {
        r.to_any()
    }
}

/// The last element of a path written as text.
fn last_element(path: &str) -> &str {
    path.trim_end_matches('/').rsplit('/').next().unwrap_or("")
}
