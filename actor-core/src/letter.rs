//! Letters: what travels through a mailbox. A letter is one allocation that
//! holds the queue link, the message and (for an ask) the reply channel.

use crate::actor::{Actor, Handler};
use crate::actor_ref::AnyActorRef;
use crate::context::Context;
use crate::letter_pool;
use crate::message::Message;
use crate::replier::Replier;
use crate::system_message::SystemMessage;
use std::alloc::Layout;
use std::any::Any;
use std::ptr::NonNull;

/// A handler future borrowing the actor and its context.
pub(crate) type HandlerFuture<'a> = crate::heap_future::HeapFuture<'a>;

/// Queue link stored at the start of every letter.
pub(crate) struct Hdr<A: 'static> {
    /// Next letter in the chain (towards older letters while on the stack,
    /// towards newer ones once taken into a `Batch`).
    pub(crate) next: *mut Hdr<A>,
    /// The fat pointer of the whole node, so that the thin link can be
    /// turned back into a `Box<dyn Letter<A>>`.
    pub(crate) this: *mut dyn Letter<A>,
}

/// A letter of body `L`. `repr(C)` puts the header first, so a pointer to
/// the node is also a pointer to its header.
#[repr(C)]
pub(crate) struct Node<A: 'static, L> {
    hdr: Hdr<A>,
    pub(crate) body: L,
}

impl<A: 'static, L> Node<A, L> {
    pub(crate) fn hdr_mut(&mut self) -> *mut Hdr<A> {
        &mut self.hdr
    }

    /// A letter in recycled memory when the pool has a block of its
    /// layout (see `letter_pool`).
    pub(crate) fn new(body: L) -> Box<Self> {
        let node = Node {
            hdr: Hdr {
                next: std::ptr::null_mut(),
                this: std::ptr::null_mut::<Node<A, Dummy>>() as *mut dyn Letter<A>,
            },
            body,
        };
        let block = letter_pool::allocate(Layout::new::<Self>()).cast::<Self>();
        // SAFETY: `allocate` returns memory from the global allocator with
        // exactly `Self`'s layout that nobody else owns: writing the node
        // there and owning it as a `Box` is what `Box::new` does.
        unsafe {
            block.as_ptr().write(node);
            Box::from_raw(block.as_ptr())
        }
    }

    /// Takes the body out and gives the letter's memory to the pool, for
    /// the next letter sent from this thread.
    pub(crate) fn into_body(self: Box<Self>) -> L {
        let raw = Box::into_raw(self);
        // SAFETY: `raw` is the unique owner of a live node allocated by the
        // global allocator with `Self`'s layout. The body is moved out
        // once; the header holds only raw pointers (nothing to drop), so
        // after the read the memory is unused and can be released.
        unsafe {
            let body = std::ptr::addr_of!((*raw).body).read();
            letter_pool::release(NonNull::new_unchecked(raw.cast()), Layout::new::<Self>());
            body
        }
    }
}

/// Placeholder type for the null fat pointer of a fresh header.
pub(crate) struct Dummy;
impl<A: 'static> Letter<A> for Node<A, Dummy> {
    fn hdr_ptr(&mut self) -> *mut Hdr<A> {
        &mut self.hdr
    }
    fn open(self: Box<Self>) -> Opened<A> {
        Opened::System(SystemMessage::Ignore)
    }
    fn type_name(&self) -> &'static str {
        "()"
    }
}

// SAFETY (for the raw pointers in `Hdr`): a node is only ever reachable from
// one owner at a time (a producer before it is published, the mailbox, or a
// batch), and its body is `Send`.
unsafe impl<A: 'static, L: Send> Send for Node<A, L> {}

/// What a letter turns into when the actor opens it.
pub(crate) enum Opened<A: 'static> {
    /// A user message: run its handler.
    User(Box<dyn UserLetter<A>>),
    /// A message for the runtime itself.
    System(SystemMessage),
}

/// A letter in a mailbox.
pub(crate) trait Letter<A: 'static>: Send {
    /// Address of this letter's queue header.
    fn hdr_ptr(&mut self) -> *mut Hdr<A>;
    /// Opens the letter for delivery.
    fn open(self: Box<Self>) -> Opened<A>;
    /// The message's type, for dead-letter records.
    fn type_name(&self) -> &'static str;
}

/// A user message with its handler.
pub(crate) trait UserLetter<A: Actor>: Letter<A> {
    /// Runs the handler, replying to the asker if there is one.
    fn deliver<'a>(self: Box<Self>, actor: &'a mut A, ctx: &'a mut Context<A>)
        -> HandlerFuture<'a>;
    /// Hands this letter the reply channel of the message that was stashed
    /// as this letter (see [`Context::stash`]).
    fn attach_reply(&mut self, reply: &mut dyn Any);
}

/// The body of a user message letter: the message and, for an ask, where to
/// send the reply.
pub(crate) struct Envelope<M: Message> {
    pub(crate) msg: M,
    pub(crate) reply: Option<Replier<M::Reply>>,
}

/// Runs `A`'s handler for `msg` (with its sender, if any); the handler
/// replies (see [`Handler::handle_with_reply`]).
pub(crate) async fn handle<A, M>(
    actor: &mut A,
    ctx: &mut Context<A>,
    msg: M,
    reply: Option<Replier<M::Reply>>,
    sender: Option<AnyActorRef>,
) where
    A: Handler<M>,
    M: Message,
{
    ctx.clear_stashed_current();
    ctx.touch();
    let with_sender = sender.is_some();
    if with_sender {
        ctx.set_sender(sender);
    }
    actor.handle_with_reply(msg, reply, ctx).await;
    if with_sender {
        ctx.set_sender(None);
    }
}

impl<A, M> Letter<A> for Node<A, Envelope<M>>
where
    A: Handler<M>,
    M: Message,
{
    fn hdr_ptr(&mut self) -> *mut Hdr<A> {
        &mut self.hdr
    }
    fn open(self: Box<Self>) -> Opened<A> {
        Opened::User(self)
    }
    fn type_name(&self) -> &'static str {
        M::manifest()
    }
}

impl<A, M> UserLetter<A> for Node<A, Envelope<M>>
where
    A: Handler<M>,
    M: Message,
{
    fn deliver<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> HandlerFuture<'a> {
        let Envelope { msg, reply } = self.into_body();
        HandlerFuture::new(handle(actor, ctx, msg, reply, None))
    }

    fn attach_reply(&mut self, reply: &mut dyn Any) {
        if let Some(slot) = reply.downcast_mut::<Option<Replier<M::Reply>>>() {
            self.body.reply = slot.take();
        }
    }
}

/// A user message with its sender (`ActorRef::tell_from`): the handler
/// sees the sender in `Context::sender`. A separate body, so that plain
/// tells carry nothing for it.
pub(crate) struct Sent<M: Message> {
    pub(crate) msg: M,
    pub(crate) reply: Option<Replier<M::Reply>>,
    pub(crate) sender: AnyActorRef,
}

impl<A, M> Letter<A> for Node<A, Sent<M>>
where
    A: Handler<M>,
    M: Message,
{
    fn hdr_ptr(&mut self) -> *mut Hdr<A> {
        self.hdr_mut()
    }
    fn open(self: Box<Self>) -> Opened<A> {
        Opened::User(self)
    }
    fn type_name(&self) -> &'static str {
        M::manifest()
    }
}

impl<A, M> UserLetter<A> for Node<A, Sent<M>>
where
    A: Handler<M>,
    M: Message,
{
    fn deliver<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> HandlerFuture<'a> {
        let Sent { msg, reply, sender } = self.into_body();
        HandlerFuture::new(handle(actor, ctx, msg, reply, Some(sender)))
    }

    fn attach_reply(&mut self, reply: &mut dyn Any) {
        if let Some(slot) = reply.downcast_mut::<Option<Replier<M::Reply>>>() {
            self.body.reply = slot.take();
        }
    }
}

/// The body of a letter for the runtime.
pub(crate) struct SystemLetter(pub(crate) SystemMessage);

impl<A: Actor> Letter<A> for Node<A, SystemLetter> {
    fn hdr_ptr(&mut self) -> *mut Hdr<A> {
        &mut self.hdr
    }
    fn open(self: Box<Self>) -> Opened<A> {
        Opened::System(self.into_body().0)
    }
    fn type_name(&self) -> &'static str {
        self.body.0.name()
    }
}
