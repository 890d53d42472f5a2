//! A message from another node that its recipient decodes: the letter
//! carries the message's bytes, and the actor decodes them when it comes
//! to handle them (see `EncodedDelivery::queue_undecoded`).
//!
//! Decoding where the message is handled takes the work off the
//! connection's reader, which every message from that node passes through
//! one after another, and spreads it over the workers that run the
//! recipients. It also keeps the message's memory on one thread: the actor
//! allocates it and frees it, where a message decoded by the reader is
//! allocated on one thread and freed on another, which glibc's malloc
//! serves from its slow path. The bytes of a small message travel inside
//! the letter itself (one recycled allocation, see `letter_pool`).

use crate::actor::Handler;
use crate::actor_ref::AnyActorRef;
use crate::context::Context;
use crate::letter::{self, HandlerFuture, Hdr, Letter, Node, Opened, UserLetter};
use crate::log_limit::LogLimit;
use crate::message::Message;
use crate::remote::registry::encode_reply;
use crate::remote::reply::{RemoteReply, ReplySink};
use crate::remote::serde_context;
use crate::replier::Replier;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::any::Any;
use std::sync::LazyLock;

/// Payloads up to this size travel inside the letter; the letter then
/// stays within the pooled sizes (see the test below).
pub(crate) const INLINE: usize = 152;
const _: () = assert!(INLINE <= u8::MAX as usize);

/// A message's bytes.
pub(crate) enum Payload {
    /// In the letter.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// Too large for the letter.
    Heap(Box<[u8]>),
}

impl Payload {
    pub(crate) fn copy_of(bytes: &[u8]) -> Self {
        if bytes.len() > INLINE {
            return Payload::Heap(bytes.into());
        }
        let mut inline = [0; INLINE];
        inline[..bytes.len()].copy_from_slice(bytes);
        Payload::Inline {
            // At most `INLINE`, which fits a `u8` (checked below).
            len: bytes.len() as u8,
            bytes: inline,
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Payload::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Payload::Heap(b) => b,
        }
    }
}

/// The body of a letter whose message `M` is still encoded.
pub(crate) struct Undecoded<M: Message> {
    pub(crate) payload: Payload,
    /// Dropped unanswered (the actor stopped first), it tells the asker,
    /// as any letter's reply channel does.
    pub(crate) reply: Option<RemoteReply<M::Reply>>,
    pub(crate) sender: Option<AnyActorRef>,
}

impl<M> Undecoded<M>
where
    M: Message,
    M::Reply: Serialize,
{
    pub(crate) fn new(
        payload: Payload,
        reply: Option<ReplySink>,
        sender: Option<AnyActorRef>,
    ) -> Self {
        Undecoded {
            payload,
            reply: reply.map(|sink| RemoteReply::new(sink, encode_reply::<M::Reply>)),
            sender,
        }
    }
}

impl<A, M> Letter<A> for Node<A, Undecoded<M>>
where
    A: Handler<M>,
    M: Message + DeserializeOwned,
    M::Reply: Serialize,
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

impl<A, M> UserLetter<A> for Node<A, Undecoded<M>>
where
    A: Handler<M>,
    M: Message + DeserializeOwned,
    M::Reply: Serialize,
{
    fn deliver<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> HandlerFuture<'a> {
        let Undecoded {
            payload,
            reply,
            sender,
        } = self.into_body();
        // Decoded inside the handler's future: a `Deserialize` that panics
        // is then a failure of the handler, which supervision handles.
        HandlerFuture::new(async move {
            let Some(cell) = ctx.myself().local_cell() else {
                unreachable!("a context always belongs to a local actor");
            };
            let system = &cell.core.system;
            let decoded = serde_context::with_system(system, || {
                serde_context::decode::<M>(payload.as_slice())
            });
            match decoded {
                Ok(msg) => {
                    let reply = reply.map(Replier::remote);
                    letter::handle(actor, ctx, msg, reply, sender).await
                }
                Err(why) => {
                    let what = format_args!(
                        "dropped a `{}` from another node for {}: it did not decode: {why}",
                        M::manifest(),
                        ctx.myself()
                    );
                    match system.remote.get() {
                        // Counted in `Remoting::bad_input_count`, rate limited.
                        Some(remoting) => remoting.log_bad_input(what),
                        None => {
                            if UNDECODABLE_LOG.allow() {
                                tracing::warn!("{what}");
                            }
                        }
                    }
                    if let Some(r) = reply {
                        r.refuse(format!("the message did not decode: {why}"));
                    }
                }
            }
        })
    }

    fn attach_reply(&mut self, _reply: &mut dyn Any) {
        // Never called: `Context::stash` stashes the decoded message in a
        // letter of its own, and this letter is gone by then.
    }
}

/// The limit of the log line of a message that did not decode, in a
/// system without remoting (bad input must not flood the log).
static UNDECODABLE_LOG: LazyLock<LogLimit> = LazyLock::new(LogLimit::per_second);

#[cfg(test)]
mod tests {
    use super::*;

    struct A;
    impl crate::actor::Actor for A {}
    struct Ping;
    impl Message for Ping {
        type Reply = u64;
        fn manifest() -> &'static str {
            "test.Ping"
        }
    }

    #[test]
    fn a_letter_with_its_bytes_inside_is_a_pooled_size() {
        assert!(std::mem::size_of::<Node<A, Undecoded<Ping>>>() <= 256);
    }

    #[test]
    fn payloads_keep_their_bytes() {
        for n in [0, 1, INLINE - 1, INLINE, INLINE + 1, 300] {
            let bytes: Vec<u8> = (0..n).map(|i| i as u8).collect();
            assert_eq!(Payload::copy_of(&bytes).as_slice(), &bytes[..]);
        }
        assert!(matches!(
            Payload::copy_of(&[0; INLINE]),
            Payload::Inline { .. }
        ));
        assert!(matches!(
            Payload::copy_of(&[0; INLINE + 1]),
            Payload::Heap(_)
        ));
    }
}
