//! Replies to asks that came from another node.

use crate::codec::EncodedReply;
use crate::error::AskError;
use crate::remote::association::Association;
use crate::remote::wire::{self, ReplyBody};
use crate::replier::Replier;
use std::sync::Arc;

/// Where an encoded reply goes: back over the wire to the asker's node
/// (with the ask's id), or to a local reply channel of encoded replies
/// (`ActorSystem::deliver_encoded`).
pub(crate) enum ReplySink {
    /// To a remote asker.
    Wire { assoc: Arc<Association>, ask: u64 },
    /// To a local channel (boxed: a `Replier` may itself hold a sink).
    Encoded(Box<Replier<EncodedReply>>),
}

impl ReplySink {
    pub(crate) fn send(self, body: ReplyBody<'_>) {
        match self {
            ReplySink::Wire { assoc, ask } => send_over_wire(&assoc, ask, body),
            ReplySink::Encoded(replier) => match body {
                ReplyBody::Ok(bytes) => replier.send(EncodedReply(bytes.to_vec())),
                ReplyBody::Err(why) => replier.fail(AskError::Remote(why)),
            },
        }
    }
}

fn send_over_wire(assoc: &Arc<Association>, ask: u64, body: ReplyBody<'_>) {
    {
        let mut frame = wire::encode_reply(ask, &body);
        let max = assoc.remoting().settings.max_frame_size;
        if frame.len() - 4 > max {
            let why = format!(
                "the reply of {} bytes is larger than max_frame_size ({max} bytes)",
                frame.len() - 4
            );
            tracing::error!("cannot answer a remote ask from {}: {why}", assoc.address);
            frame = wire::encode_reply(ask, &ReplyBody::Err(why));
        }
        assoc.send_reply_frame(frame);
    }
}

/// The reply channel of a remote ask: encodes the reply and sends it back;
/// dropped without a reply (the actor stopped or failed), it tells the
/// asker so instead of letting it wait for its timeout.
pub(crate) struct RemoteReply<R> {
    sink: Option<ReplySink>,
    encode: fn(&R, &mut Vec<u8>) -> Result<(), String>,
}

impl<R> RemoteReply<R> {
    pub(crate) fn new(sink: ReplySink, encode: fn(&R, &mut Vec<u8>) -> Result<(), String>) -> Self {
        RemoteReply {
            sink: Some(sink),
            encode,
        }
    }

    pub(crate) fn send(mut self, r: R) {
        let Some(sink) = self.sink.take() else { return };
        let mut buf = Vec::new();
        match (self.encode)(&r, &mut buf) {
            Ok(()) => sink.send(ReplyBody::Ok(&buf)),
            Err(e) => {
                tracing::error!(
                    "the reply of type `{}` to a remote ask could not be encoded: {e}",
                    std::any::type_name::<R>()
                );
                sink.send(ReplyBody::Err(format!(
                    "the reply could not be encoded: {e}"
                )));
            }
        }
    }
}

impl<R> RemoteReply<R> {
    /// Tells the remote asker why there is no reply, in these words.
    pub(crate) fn refuse(mut self, why: String) {
        if let Some(sink) = self.sink.take() {
            sink.send(ReplyBody::Err(why));
        }
    }

    /// Tells the remote asker why there is no reply.
    pub(crate) fn fail(mut self, error: &AskError) {
        if let Some(sink) = self.sink.take() {
            sink.send(ReplyBody::Err(error.to_string()));
        }
    }
}

impl<R> Drop for RemoteReply<R> {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            sink.send(ReplyBody::Err("the actor stopped before replying".into()));
        }
    }
}
