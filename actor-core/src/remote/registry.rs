//! Registration of the message types that cross the wire.
//!
//! A message type is registered once per actor type that handles it
//! (`system.register::<Actor, Message>()`), on every node that sends or
//! receives it. Registration records, under the message's stable manifest,
//! how to encode it, how to decode its reply, and how to hand it to an
//! actor of that type; nothing is looked up by Rust type names at run time.

use crate::actor::Handler;
use crate::actor_ref::AnyActorRef;
use crate::codec::RegisterError;
use crate::error::TellError;
use crate::message::Message;
use crate::remote::reply::{RemoteReply, ReplySink};
use crate::replier::Replier;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

/// Encodes a message (given as `&dyn Any`) into a buffer.
pub(crate) type EncodeFn = fn(&dyn Any, &mut Vec<u8>) -> Result<(), String>;
/// Decodes a reply into a boxed value of the reply type.
pub(crate) type DecodeReplyFn = fn(&[u8]) -> Result<Box<dyn Any + Send>, String>;
/// Decodes a message and queues it for a local actor.
pub(crate) type DispatchFn =
    fn(&AnyActorRef, &[u8], Option<ReplySink>, Option<AnyActorRef>) -> Result<(), DispatchError>;

/// Why an incoming message could not be handed to its recipient.
#[derive(Debug)]
pub(crate) enum DispatchError {
    /// The payload did not decode as the manifest's type.
    Undecodable(String),
    /// The recipient has stopped (recorded as a dead letter).
    Stopped,
    /// The recipient's bounded mailbox is full.
    MailboxFull,
}

/// How one message type travels.
pub(crate) struct Codec {
    pub(crate) manifest: &'static str,
    /// The Rust type, for error messages.
    pub(crate) type_name: &'static str,
    pub(crate) encode: EncodeFn,
    pub(crate) decode_reply: DecodeReplyFn,
    /// Sent on the control connection (heartbeat-like traffic).
    pub(crate) control: bool,
}

struct ManifestEntry {
    codec: Arc<Codec>,
    /// The message type that owns the manifest.
    message_type: TypeId,
    /// Per actor type that handles it.
    dispatch: HashMap<TypeId, DispatchFn>,
}

/// The message types of one actor system that can cross the wire.
#[derive(Default)]
pub(crate) struct Registry {
    by_type: RwLock<HashMap<TypeId, Arc<Codec>>>,
    by_manifest: RwLock<HashMap<&'static str, ManifestEntry>>,
}

fn encode<M: Serialize + 'static>(msg: &dyn Any, buf: &mut Vec<u8>) -> Result<(), String> {
    let m = msg
        .downcast_ref::<M>()
        .ok_or("bug: codec used for the wrong type")?;
    rmp_serde::encode::write(buf, m).map_err(|e| e.to_string())
}

fn decode_reply<R: DeserializeOwned + Send + 'static>(
    bytes: &[u8],
) -> Result<Box<dyn Any + Send>, String> {
    crate::remote::serde_context::decode::<R>(bytes).map(|r| Box::new(r) as Box<dyn Any + Send>)
}

fn encode_reply<R: Serialize>(r: &R, buf: &mut Vec<u8>) -> Result<(), String> {
    rmp_serde::encode::write(buf, r).map_err(|e| e.to_string())
}

fn dispatch<A, M>(
    target: &AnyActorRef,
    payload: &[u8],
    reply: Option<ReplySink>,
    sender: Option<AnyActorRef>,
) -> Result<(), DispatchError>
where
    A: Handler<M>,
    M: Message + Serialize + DeserializeOwned,
    M::Reply: Serialize + DeserializeOwned,
{
    let Some(actor) = target.downcast::<A>() else {
        return Err(DispatchError::Undecodable(format!(
            "the recipient is not a `{}`",
            std::any::type_name::<A>()
        )));
    };
    let msg: M = match crate::remote::serde_context::decode(payload) {
        Ok(m) => m,
        Err(why) => {
            if let Some(sink) = reply {
                sink.send(crate::remote::wire::ReplyBody::Err(format!(
                    "the message did not decode: {why}"
                )));
            }
            return Err(DispatchError::Undecodable(why));
        }
    };
    let reply = reply.map(|sink| Replier::remote(RemoteReply::new(sink, encode_reply::<M::Reply>)));
    match actor.send_letter(msg, reply, sender) {
        Ok(()) => Ok(()),
        Err(TellError::MailboxFull(_)) => Err(DispatchError::MailboxFull),
        Err(_) => Err(DispatchError::Stopped),
    }
}

impl Registry {
    /// Registers `M` as handled by `A`; refuses a manifest that another
    /// message type already has.
    pub(crate) fn register<A, M>(&self, control: bool) -> Result<(), RegisterError>
    where
        A: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        let manifest = M::manifest();
        let mut by_manifest = self.by_manifest.write().unwrap_or_else(|e| e.into_inner());
        let entry = by_manifest
            .entry(manifest)
            .or_insert_with(|| ManifestEntry {
                codec: Arc::new(Codec {
                    manifest,
                    type_name: std::any::type_name::<M>(),
                    encode: encode::<M>,
                    decode_reply: decode_reply::<M::Reply>,
                    control,
                }),
                message_type: TypeId::of::<M>(),
                dispatch: HashMap::new(),
            });
        if entry.message_type != TypeId::of::<M>() {
            return Err(RegisterError::ManifestTaken {
                manifest,
                registered: entry.codec.type_name,
                refused: std::any::type_name::<M>(),
            });
        }
        entry.dispatch.insert(TypeId::of::<A>(), dispatch::<A, M>);
        self.by_type
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(TypeId::of::<M>(), entry.codec.clone());
        Ok(())
    }

    /// The codec of message type `M`, if registered.
    pub(crate) fn codec_of<M: 'static>(&self) -> Option<Arc<Codec>> {
        self.by_type
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&TypeId::of::<M>())
            .cloned()
    }

    /// How to hand a message of `manifest` to an actor whose type id is
    /// `actor`: `Err` says why it cannot be.
    pub(crate) fn dispatcher(
        &self,
        manifest: &str,
        actor: TypeId,
    ) -> Result<DispatchFn, &'static str> {
        let map = self.by_manifest.read().unwrap_or_else(|e| e.into_inner());
        let entry = map
            .get(manifest)
            .ok_or("unknown manifest (not registered on this node)")?;
        entry
            .dispatch
            .get(&actor)
            .copied()
            .ok_or("the recipient's actor type is not registered for this message")
    }
}

/// The manifest as a `'static` string, if registered (for dead-letter
/// records, which name message types statically).
impl Registry {
    pub(crate) fn static_manifest(&self, manifest: &str) -> Option<&'static str> {
        self.by_manifest
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get_key_value(manifest)
            .map(|(k, _)| *k)
    }
}
