//! The public codec API: messages registered for remoting as bytes, for
//! extensions that carry messages inside their own envelopes (cluster
//! sharding sends an entity's message to another node's region, which
//! hands it to the entity).
//!
//! A message is registered once per actor type that handles it
//! ([`ActorSystem::register`]); its manifest names it on the wire.
//! [`ActorSystem::encode_message`] turns a registered message into its
//! manifest and bytes; [`ActorSystem::deliver_encoded`] decodes bytes by
//! manifest and queues the message for a local actor, with a reply channel
//! for the encoded reply; [`ActorSystem::decode_reply`] decodes that reply.

use crate::actor::Actor;
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::message::Message;
use crate::remote::registry::DispatchError;
use crate::remote::reply::ReplySink;
use crate::remote::serde_context;
use crate::replier::Replier;
use crate::system::ActorSystem;
use serde::{Deserialize, Serialize};
use std::any::TypeId;
use std::fmt;

/// A message as bytes, with the manifest that names its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedMessage {
    /// The message type's manifest ([`Message::manifest`]).
    pub manifest: &'static str,
    /// The message, MessagePack-encoded.
    pub bytes: Vec<u8>,
}

/// A reply as bytes (MessagePack), to be decoded with
/// [`ActorSystem::decode_reply`] for the message it answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EncodedReply(#[serde(with = "serde_bytes")] pub Vec<u8>);

/// Why a message type could not be registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterError {
    /// Another message type already uses this manifest.
    ManifestTaken {
        /// The manifest both types claim.
        manifest: &'static str,
        /// The type registered first, which keeps it.
        registered: &'static str,
        /// The type that was refused.
        refused: &'static str,
    },
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::ManifestTaken {
                manifest,
                registered,
                refused,
            } => write!(
                f,
                "message types `{registered}` and `{refused}` share the manifest `{manifest}`: give one \
                 of them another with `#[message(name = \"...\")]`"
            ),
        }
    }
}

impl std::error::Error for RegisterError {}

/// Why a message could not be encoded, or a reply decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodecError {
    /// The message type is not registered on this node.
    NotRegistered(&'static str),
    /// Serialisation failed.
    Encode(String),
    /// The bytes did not decode as the expected type.
    Decode(String),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::NotRegistered(t) => write!(
                f,
                "message type `{t}` is not registered (`system.register::<Actor, Message>()`)"
            ),
            CodecError::Encode(why) => write!(f, "the message did not encode: {why}"),
            CodecError::Decode(why) => write!(f, "the bytes did not decode: {why}"),
        }
    }
}

impl std::error::Error for CodecError {}

/// Why encoded bytes could not be delivered to an actor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliverError {
    /// No message type with this manifest is registered for the actor's
    /// type on this node.
    UnknownManifest(String),
    /// The bytes did not decode as the manifest's type.
    Undecodable(String),
    /// The actor has stopped (recorded as a dead letter).
    Stopped,
    /// The actor's bounded mailbox is full.
    MailboxFull,
}

impl fmt::Display for DeliverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeliverError::UnknownManifest(m) => {
                write!(f, "manifest `{m}` is not registered for this actor type")
            }
            DeliverError::Undecodable(why) => write!(f, "the message did not decode: {why}"),
            DeliverError::Stopped => f.write_str("the actor has stopped"),
            DeliverError::MailboxFull => f.write_str("the actor's bounded mailbox is full"),
        }
    }
}

impl std::error::Error for DeliverError {}

impl ActorSystem {
    /// Encodes `msg`, whose type must be registered on this node.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use troupe_core::prelude::*;
    /// use troupe_core::Replier;
    /// use std::time::Duration;
    ///
    /// #[derive(Message, Serialize, Deserialize)]
    /// #[message(reply = u32, name = "doc.Double")]
    /// struct Double(u32);
    ///
    /// struct Doubler;
    /// impl Actor for Doubler {}
    /// #[handlers]
    /// impl Doubler {
    ///     async fn double(&mut self, m: Double) -> u32 { 2 * m.0 }
    /// }
    ///
    /// troupe_core::rt::block_on(async {
    ///     let system = ActorSystem::new("doc").unwrap();
    ///     system.register::<Doubler, Double>().unwrap();
    ///     let doubler = system.spawn(Doubler);
    ///
    ///     let encoded = system.encode_message(&Double(21)).unwrap();
    ///     assert_eq!(encoded.manifest, "doc.Double");
    ///     let (replier, reply) = Replier::channel(Duration::from_secs(5));
    ///     system
    ///         .deliver_encoded(&doubler, encoded.manifest, &encoded.bytes, Some(replier), None)
    ///         .unwrap();
    ///     let bytes = reply.await.unwrap();
    ///     assert_eq!(system.decode_reply::<Double>(&bytes.0).unwrap(), 42);
    ///     system.shutdown().await;
    /// });
    /// ```
    pub fn encode_message<M: Message>(&self, msg: &M) -> Result<EncodedMessage, CodecError> {
        let codec = self
            .shared()
            .registry
            .codec_of::<M>()
            .ok_or(CodecError::NotRegistered(std::any::type_name::<M>()))?;
        let mut bytes = Vec::new();
        (codec.encode)(msg, &mut bytes).map_err(CodecError::Encode)?;
        Ok(EncodedMessage {
            manifest: codec.manifest,
            bytes,
        })
    }

    /// Decodes the encoded reply to a message of type `M` (registered on
    /// this node). Actor references inside it are rebuilt for this system.
    pub fn decode_reply<M: Message>(&self, bytes: &[u8]) -> Result<M::Reply, CodecError> {
        let codec = self
            .shared()
            .registry
            .codec_of::<M>()
            .ok_or(CodecError::NotRegistered(std::any::type_name::<M>()))?;
        let any = serde_context::with_system(self.shared(), || (codec.decode_reply)(bytes))
            .map_err(CodecError::Decode)?;
        any.downcast::<M::Reply>()
            .map(|b| *b)
            .map_err(|_| CodecError::Decode("bug: reply of the wrong type".into()))
    }

    /// Decodes `bytes` as the message type named `manifest` (registered
    /// for actor type `A`) and queues it for `to` with `sender`; the reply,
    /// encoded, goes to `reply`. A message that does not decode is
    /// refused (and `reply`, if any, is failed with the reason).
    pub fn deliver_encoded<A: Actor>(
        &self,
        to: &ActorRef<A>,
        manifest: &str,
        bytes: &[u8],
        reply: Option<Replier<EncodedReply>>,
        sender: Option<AnyActorRef>,
    ) -> Result<(), DeliverError> {
        let dispatch = match self
            .shared()
            .registry
            .dispatcher(manifest, TypeId::of::<A>())
        {
            Ok(d) => d,
            Err(_) => {
                let err = DeliverError::UnknownManifest(manifest.to_string());
                if let Some(r) = reply {
                    r.fail(crate::AskError::NotSendable(err.to_string()));
                }
                return Err(err);
            }
        };
        let target = to.to_any();
        let sink = reply.map(|r| ReplySink::Encoded(Box::new(r)));
        serde_context::with_system(self.shared(), || dispatch(&target, bytes, sink, sender))
            .map_err(|e| match e {
                DispatchError::Undecodable(why) => DeliverError::Undecodable(why),
                DispatchError::Stopped => DeliverError::Stopped,
                DispatchError::MailboxFull => DeliverError::MailboxFull,
            })
    }

    /// True if message type `M` is registered on this node.
    pub fn is_registered<M: Message>(&self) -> bool {
        self.shared().registry.codec_of::<M>().is_some()
    }
}
