//! Registration of the message types that cross the wire.
//!
//! A message type is registered once per actor type that handles it
//! (`system.register::<Actor, Message>()`), on every node that sends or
//! receives it. Registration records, under the message's stable manifest,
//! how to encode it, how to decode its reply, and how to hand it to an
//! actor of that type; nothing is looked up by Rust type names at run time.

use crate::actor::{Actor, Handler};
use crate::actor_ref::AnyActorRef;
use crate::codec::{DeliverError, EncodedReply, InboundMessage, RegisterError};
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

/// Decodes a message and queues it for a local actor of type `A` (what
/// `DispatchFn` does after checking the recipient's type).
pub(crate) type TypedDispatchFn<A> = fn(
    &crate::actor_ref::ActorRef<A>,
    &[u8],
    Option<ReplySink>,
    Option<AnyActorRef>,
) -> Result<(), DispatchError>;

/// Hands a message, still encoded, to a receiver registered for its
/// recipient's actor type (`ActorSystem::register_receiver`). One of them
/// is made for each connection, which keeps it.
pub(crate) type ReceiveFn = Box<dyn FnMut(InboundMessage<'_>) -> Result<(), DeliverError> + Send>;

/// Makes a receiver (for a connection, or for one local delivery).
pub(crate) type MakeReceiver = Arc<dyn Fn() -> ReceiveFn + Send + Sync>;

/// How an incoming message reaches an actor of one type.
#[derive(Clone)]
pub(crate) enum Inbound {
    /// Decoded and queued in its mailbox: the erased function, and the
    /// typed one (a `TypedDispatchFn<A>`, for `EncodedDelivery<A>`).
    Decode(DispatchFn, &'static (dyn Any + Send + Sync)),
    /// Given, still encoded, to a receiver made by this.
    Receive(MakeReceiver),
}

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

/// How one message type travels (plain data: copied out of the registry,
/// so that a send takes no reference count).
#[derive(Clone, Copy)]
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
    codec: Codec,
    /// The message type that owns the manifest.
    message_type: TypeId,
    /// Per actor type that handles it, erased and typed.
    dispatch: Map<TypeId, (DispatchFn, &'static (dyn Any + Send + Sync))>,
    /// Per actor type that receives it still encoded (these win over
    /// `dispatch`).
    receivers: Map<TypeId, MakeReceiver>,
}

/// The registry's maps are written at registration only and read on every
/// message sent or received: foldhash, not SipHash (keys from the network
/// are only looked up, never inserted, so they cannot degrade a map).
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The message type recorded for a manifest that only receivers know (no
/// Rust type: its bytes are sent with `send_encoded`).
struct EncodedOnly;

fn encode_refused(_: &dyn Any, _: &mut Vec<u8>) -> Result<(), String> {
    Err("a manifest registered with `register_receiver` is sent with `send_encoded`".into())
}

fn decode_encoded_reply(bytes: &[u8]) -> Result<Box<dyn Any + Send>, String> {
    Ok(Box::new(EncodedReply(bytes.to_vec())))
}

/// Writes an encoded reply as it is (its bytes are the reply's wire form).
pub(crate) fn write_encoded_reply(r: &EncodedReply, buf: &mut Vec<u8>) -> Result<(), String> {
    buf.extend_from_slice(&r.0);
    Ok(())
}

/// The message types of one actor system that can cross the wire.
#[derive(Default)]
pub(crate) struct Registry {
    by_type: RwLock<Map<TypeId, Codec>>,
    by_manifest: RwLock<Map<&'static str, ManifestEntry>>,
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

pub(crate) fn encode_reply<R: Serialize>(r: &R, buf: &mut Vec<u8>) -> Result<(), String> {
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
    // The connection's reader queues the bytes; the actor decodes them.
    queue_undecoded::<A, M>(&actor, payload, reply, sender)
}

fn dispatch_typed<A, M>(
    actor: &crate::actor_ref::ActorRef<A>,
    payload: &[u8],
    reply: Option<ReplySink>,
    sender: Option<AnyActorRef>,
) -> Result<(), DispatchError>
where
    A: Handler<M>,
    M: Message + Serialize + DeserializeOwned,
    M::Reply: Serialize + DeserializeOwned,
{
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

/// The typed dispatch of `M` to `A`, as a static value (a function item
/// coerced to a pointer in a `static` is promoted, so this allocates
/// nothing).
fn typed_dispatch<A, M>() -> &'static (dyn Any + Send + Sync)
where
    A: Handler<M>,
    M: Message + Serialize + DeserializeOwned,
    M::Reply: Serialize + DeserializeOwned,
{
    struct Typed<A, M>(std::marker::PhantomData<fn(A, M)>);
    impl<A, M> Typed<A, M>
    where
        A: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        const FN: TypedDispatch<A> = TypedDispatch {
            decode: dispatch_typed::<A, M>,
            queue_undecoded: queue_undecoded::<A, M>,
        };
    }
    &Typed::<A, M>::FN
}

/// How a message of one type reaches an actor of type `A` (stored in the
/// registry erased, taken out by `EncodedDelivery<A>`).
pub(crate) struct TypedDispatch<A: Actor> {
    /// Decoded here, then queued.
    pub(crate) decode: TypedDispatchFn<A>,
    /// Queued with its bytes; the actor decodes it (see `undecoded`).
    pub(crate) queue_undecoded: TypedDispatchFn<A>,
}

impl<A: Actor> Clone for TypedDispatch<A> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<A: Actor> Copy for TypedDispatch<A> {}

/// Queues a message for the local `actor` still encoded: the actor
/// decodes it when it handles it. (Its callers send to remote actors
/// otherwise: a connection's recipients are local, and
/// `EncodedDelivery::queue_undecoded` delivers to a remote one as
/// `deliver` does.)
fn queue_undecoded<A, M>(
    actor: &crate::actor_ref::ActorRef<A>,
    payload: &[u8],
    reply: Option<ReplySink>,
    sender: Option<AnyActorRef>,
) -> Result<(), DispatchError>
where
    A: Handler<M>,
    M: Message + Serialize + DeserializeOwned,
    M::Reply: Serialize + DeserializeOwned,
{
    actor.send_undecoded::<M>(
        crate::remote::undecoded::Payload::copy_of(payload),
        reply,
        sender,
    )
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
                codec: Codec {
                    manifest,
                    type_name: std::any::type_name::<M>(),
                    encode: encode::<M>,
                    decode_reply: decode_reply::<M::Reply>,
                    control,
                },
                message_type: TypeId::of::<M>(),
                dispatch: Map::default(),
                receivers: Map::default(),
            });
        if entry.message_type != TypeId::of::<M>() {
            return Err(RegisterError::ManifestTaken {
                manifest,
                registered: entry.codec.type_name,
                refused: std::any::type_name::<M>(),
            });
        }
        entry.dispatch.insert(
            TypeId::of::<A>(),
            (dispatch::<A, M>, typed_dispatch::<A, M>()),
        );
        self.by_type
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(TypeId::of::<M>(), entry.codec);
        Ok(())
    }

    /// Registers `receive` for messages of `manifest` to actors of type
    /// `A`: a manifest of its own (no Rust type behind it), or one a
    /// message type already has (the receiver then takes that type's
    /// bytes for `A` instead of its mailbox).
    pub(crate) fn register_receiver<A: Actor>(
        &self,
        manifest: &'static str,
        receive: MakeReceiver,
    ) {
        let mut by_manifest = self.by_manifest.write().unwrap_or_else(|e| e.into_inner());
        let entry = by_manifest
            .entry(manifest)
            .or_insert_with(|| ManifestEntry {
                codec: Codec {
                    manifest,
                    type_name: "(bytes sent with `send_encoded`)",
                    encode: encode_refused,
                    decode_reply: decode_encoded_reply,
                    control: false,
                },
                message_type: TypeId::of::<EncodedOnly>(),
                dispatch: Map::default(),
                receivers: Map::default(),
            });
        entry.receivers.insert(TypeId::of::<A>(), receive);
    }

    /// The codec of message type `M`, if registered.
    pub(crate) fn codec_of<M: 'static>(&self) -> Option<Codec> {
        self.by_type
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&TypeId::of::<M>())
            .copied()
    }

    /// How to hand a message of `manifest` to an actor whose type id is
    /// `actor`: `Err` says why it cannot be.
    pub(crate) fn dispatcher(
        &self,
        manifest: &str,
        actor: TypeId,
    ) -> Result<Inbound, &'static str> {
        let map = self.by_manifest.read().unwrap_or_else(|e| e.into_inner());
        let entry = map
            .get(manifest)
            .ok_or("unknown manifest (not registered on this node)")?;
        if let Some(r) = entry.receivers.get(&actor) {
            return Ok(Inbound::Receive(r.clone()));
        }
        entry
            .dispatch
            .get(&actor)
            .map(|(erased, typed)| Inbound::Decode(*erased, *typed))
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
