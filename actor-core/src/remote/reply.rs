//! Replies to asks that came from another node.

use crate::remote::association::Association;
use crate::remote::wire::{self, ReplyBody};
use std::sync::Arc;

/// Where a remote ask's reply goes: the asker's node and the ask's id.
pub(crate) struct ReplySink {
    pub(crate) assoc: Arc<Association>,
    pub(crate) ask: u64,
}

impl ReplySink {
    pub(crate) fn send(self, body: ReplyBody<'_>) {
        let mut frame = wire::encode_reply(self.ask, &body);
        let max = self.assoc.remoting().settings.max_frame_size;
        if frame.len() - 4 > max {
            let why = format!(
                "the reply of {} bytes is larger than max_frame_size ({max} bytes)",
                frame.len() - 4
            );
            tracing::error!(
                "cannot answer a remote ask from {}: {why}",
                self.assoc.address
            );
            frame = wire::encode_reply(self.ask, &ReplyBody::Err(why));
        }
        self.assoc.send_reply_frame(frame);
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

impl<R> Drop for RemoteReply<R> {
    fn drop(&mut self) {
        if let Some(sink) = self.sink.take() {
            sink.send(ReplyBody::Err("the actor stopped before replying".into()));
        }
    }
}
