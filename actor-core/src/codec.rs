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
//!
//! An extension with an envelope of its own can also keep its messages
//! encoded end to end: [`ActorSystem::send_encoded`] writes the bytes
//! straight into the frame for a remote actor, and
//! [`ActorSystem::register_receiver`] hands them, still encoded, to a
//! function that runs on the receiving connection's reader, in place of
//! the recipient's mailbox (sharding routes an entity's message from there
//! to the entity, without a hop through its region actor).

use crate::actor::Actor;
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::message::Message;
use crate::remote::registry::{Codec, DispatchError, Inbound, MakeReceiver, TypedDispatch};
use crate::remote::remote_ref::SendError;
use crate::remote::reply::ReplySink;
use crate::remote::serde_context;
use crate::replier::Replier;
use crate::system::ActorSystem;
use serde::{Deserialize, Serialize};
use std::any::TypeId;
use std::fmt;
use std::sync::Arc;

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

/// A message as it arrived from the network, for a receiver registered
/// with [`ActorSystem::register_receiver`].
#[derive(Debug)]
pub struct InboundMessage<'a> {
    /// The recipient (an actor of the type the receiver was registered
    /// for).
    pub to: &'a AnyActorRef,
    /// The message's bytes, in its manifest's wire form.
    pub bytes: &'a [u8],
    /// For an ask: where the reply goes, already encoded (in the wire form
    /// the asker decodes). Dropped unanswered, it fails the ask.
    pub reply: Option<Replier<EncodedReply>>,
    /// The sender, if it gave one.
    pub sender: Option<AnyActorRef>,
}

/// How messages of one manifest reach actors of one type still encoded
/// ([`ActorSystem::encoded_delivery`]): what
/// [`deliver_encoded`](ActorSystem::deliver_encoded) looks up on every call.
pub struct EncodedDelivery<A: Actor> {
    system: ActorSystem,
    how: How<A>,
}

/// Decoded and queued, or given to a receiver.
enum How<A: Actor> {
    Decode(TypedDispatch<A>),
    /// A receiver is made for each delivery (those made for connections
    /// are each kept by one reader).
    Receive(MakeReceiver),
}

impl<A: Actor> Clone for EncodedDelivery<A> {
    fn clone(&self) -> Self {
        EncodedDelivery {
            system: self.system.clone(),
            how: match &self.how {
                How::Decode(d) => How::Decode(*d),
                How::Receive(r) => How::Receive(r.clone()),
            },
        }
    }
}

impl<A: Actor> fmt::Debug for EncodedDelivery<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EncodedDelivery<{}>", std::any::type_name::<A>())
    }
}

impl<A: Actor> EncodedDelivery<A> {
    /// Decodes `bytes` and queues the message for `to` with `sender`, or
    /// hands them to the receiver registered for `A`, as
    /// [`ActorSystem::deliver_encoded`] does.
    pub fn deliver(
        &self,
        to: &ActorRef<A>,
        bytes: &[u8],
        reply: Option<Replier<EncodedReply>>,
        sender: Option<AnyActorRef>,
    ) -> Result<(), DeliverError> {
        serde_context::with_system(self.system.shared(), || match &self.how {
            How::Decode(dispatch) => {
                let sink = reply.map(|r| ReplySink::Encoded(Box::new(r)));
                (dispatch.decode)(to, bytes, sink, sender).map_err(delivery_error)
            }
            How::Receive(make) => make()(InboundMessage {
                to: &to.to_any(),
                bytes,
                reply,
                sender,
            }),
        })
    }

    /// As [`deliver`](Self::deliver), but the message is queued still
    /// encoded and the actor decodes it when it comes to handle it, on
    /// the thread that runs it (a worker, or for an ask to an idle actor
    /// possibly the caller's thread, as asks run inline): for code that
    /// delivers many messages from one thread to many actors (a
    /// connection's reader, say), the work is spread over the workers, and
    /// each message's memory is allocated and freed on one thread. The
    /// bytes of a message of up to 152 bytes travel inside the letter;
    /// larger ones are copied into an allocation of their own.
    ///
    /// For a local actor that takes the bytes this way, a message that
    /// does not decode is not an error here: the actor drops it with a
    /// rate-limited log line (counted in
    /// [`Remoting::bad_input_count`](crate::remote::Remoting::bad_input_count)
    /// when the system has remoting), and an asker is failed with
    /// [`AskError::Remote`](crate::AskError::Remote). A remote `to`, or a
    /// receiver registered for `A`, gets the message as from `deliver`,
    /// with `deliver`'s errors.
    #[inline]
    pub fn queue_undecoded(
        &self,
        to: &ActorRef<A>,
        bytes: &[u8],
        reply: Option<Replier<EncodedReply>>,
        sender: Option<AnyActorRef>,
    ) -> Result<(), DeliverError> {
        match &self.how {
            How::Decode(dispatch) if !to.is_remote() => {
                let sink = reply.map(|r| ReplySink::Encoded(Box::new(r)));
                (dispatch.queue_undecoded)(to, bytes, sink, sender).map_err(delivery_error)
            }
            How::Decode(_) | How::Receive(_) => self.deliver(to, bytes, reply, sender),
        }
    }
}

/// The caller's view of why a message was not queued.
fn delivery_error(e: DispatchError) -> DeliverError {
    match e {
        DispatchError::Undecodable(why) => DeliverError::Undecodable(why),
        DispatchError::Stopped => DeliverError::Stopped,
        DispatchError::MailboxFull => DeliverError::MailboxFull,
    }
}

/// Why [`ActorSystem::send_encoded`] could not send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendEncodedError {
    /// The queue to the recipient's node is full (the sender may retry
    /// later, for instance once `ActorRef::wait_for_room` returns).
    Full,
    /// It cannot be sent: `write` failed, the frame is larger than
    /// `max_frame_size`, or this system's remoting is shut down.
    NotSendable(String),
    /// A local recipient refused it.
    Refused(DeliverError),
}

impl fmt::Display for SendEncodedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendEncodedError::Full => f.write_str("the queue to the recipient's node is full"),
            SendEncodedError::NotSendable(why) => write!(f, "not sendable: {why}"),
            SendEncodedError::Refused(e) => write!(f, "refused: {e}"),
        }
    }
}

impl std::error::Error for SendEncodedError {}

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
        let mut bytes = Vec::new();
        let manifest = self.encode_message_into(msg, &mut bytes)?;
        Ok(EncodedMessage { manifest, bytes })
    }

    /// Encodes `msg` (whose type must be registered on this node) at the
    /// end of `buf`, and gives its manifest: for an envelope that carries
    /// the message inside its own bytes without a copy. On an error `buf`
    /// may hold part of the message: discard it.
    pub fn encode_message_into<M: Message>(
        &self,
        msg: &M,
        buf: &mut Vec<u8>,
    ) -> Result<&'static str, CodecError> {
        let codec = self.registered_codec::<M>()?;
        (codec.encode)(msg, buf).map_err(CodecError::Encode)?;
        Ok(codec.manifest)
    }

    /// The codec of message type `M`, or why there is none.
    fn registered_codec<M: Message>(&self) -> Result<Codec, CodecError> {
        self.shared()
            .registry
            .codec_of::<M>()
            .ok_or(CodecError::NotRegistered(std::any::type_name::<M>()))
    }

    /// Decodes the encoded reply to a message of type `M` (registered on
    /// this node). Actor references inside it are rebuilt for this system.
    pub fn decode_reply<M: Message>(&self, bytes: &[u8]) -> Result<M::Reply, CodecError> {
        let codec = self.registered_codec::<M>()?;
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
        let delivery = match self.encoded_delivery::<A>(manifest) {
            Ok(d) => d,
            Err(err) => {
                if let Some(r) = reply {
                    r.fail(crate::AskError::NotSendable(err.to_string()));
                }
                return Err(err);
            }
        };
        delivery.deliver(to, bytes, reply, sender)
    }

    /// How messages of `manifest` reach actors of type `A` still encoded,
    /// looked up once: for code that delivers many (a router of encoded
    /// messages keeps one per manifest). Fails with
    /// [`DeliverError::UnknownManifest`] if no message type with that
    /// manifest is registered for `A`.
    pub fn encoded_delivery<A: Actor>(
        &self,
        manifest: &str,
    ) -> Result<EncodedDelivery<A>, DeliverError> {
        let inbound = self
            .shared()
            .registry
            .dispatcher(manifest, TypeId::of::<A>())
            .map_err(|_| DeliverError::UnknownManifest(manifest.to_string()))?;
        let how = match inbound {
            Inbound::Decode(_, typed) => match typed.downcast_ref::<TypedDispatch<A>>() {
                Some(d) => How::Decode(*d),
                None => unreachable!("the typed dispatch is registered under its actor type"),
            },
            Inbound::Receive(r) => How::Receive(r),
        };
        Ok(EncodedDelivery {
            system: self.clone(),
            how,
        })
    }

    /// Has `receive` take every message of `manifest` that arrives from
    /// the network for an actor of type `A` (`InboundMessage::to`), still
    /// encoded, in place of `A`'s mailbox. It runs on the connection's
    /// reader (keep it short and never block): it may deliver the bytes
    /// wherever they belong (with [`deliver_encoded`](Self::deliver_encoded),
    /// say) or queue them for the actor as a message of its own. Its error
    /// is logged (rate-limited) as bad input from that node, except
    /// `DeliverError::Stopped`.
    ///
    /// `manifest` may be one of its own, with no Rust type behind it (its
    /// bytes are sent with [`send_encoded`](Self::send_encoded)), or that
    /// of a registered message type. [`deliver_encoded`](Self::deliver_encoded)
    /// to an `A` goes through `receive` too.
    ///
    /// Register it before the first such message can arrive (when the
    /// actor type is set up): each connection looks up how a manifest is
    /// delivered once and keeps the answer, and so does an
    /// [`EncodedDelivery`]. A receiver that keeps state of its own per
    /// connection is registered with
    /// [`register_receiver_per_connection`](Self::register_receiver_per_connection).
    ///
    /// ```
    /// use troupe_core::prelude::*;
    /// use troupe_core::{EncodedReply, InboundMessage, Replier};
    /// use std::time::Duration;
    ///
    /// struct Echo;
    /// impl Actor for Echo {}
    ///
    /// troupe_core::rt::block_on(async {
    ///     let system = ActorSystem::new("doc").unwrap();
    ///     // Answers every `doc.raw` ask with its own bytes, on the reader.
    ///     system.register_receiver::<Echo>("doc.raw", |m: InboundMessage<'_>| {
    ///         if let Some(r) = m.reply {
    ///             r.send(EncodedReply(m.bytes.to_vec()));
    ///         }
    ///         Ok(())
    ///     });
    ///     let echo = system.spawn(Echo);
    ///     let (replier, reply) = Replier::channel(Duration::from_secs(5));
    ///     system
    ///         .send_encoded(&echo, "doc.raw", |buf| Ok(buf.extend_from_slice(b"hi")), Some(replier))
    ///         .unwrap();
    ///     assert_eq!(reply.await.unwrap().0, b"hi");
    ///     system.shutdown().await;
    /// });
    /// ```
    pub fn register_receiver<A: Actor>(
        &self,
        manifest: &'static str,
        receive: impl Fn(InboundMessage<'_>) -> Result<(), DeliverError> + Send + Sync + 'static,
    ) -> &Self {
        let receive = Arc::new(receive);
        self.register_receiver_per_connection::<A, _>(manifest, move || {
            let receive = receive.clone();
            move |m: InboundMessage<'_>| receive(m)
        })
    }

    /// As [`register_receiver`](Self::register_receiver), but each
    /// connection's reader calls `make` for a receiver of its own (when the
    /// first message of `manifest` for an `A` arrives on it) and keeps it
    /// until the connection closes. What the receiver holds is used by one
    /// thread at a time and needs no lock: a cache of lookups that are
    /// otherwise made under a shared lock for every message, or a strong
    /// reference taken once (rather than a weak one upgraded for every
    /// message). A local [`deliver_encoded`](Self::deliver_encoded) to an
    /// `A`, or an [`EncodedDelivery`]'s, makes a receiver for that one
    /// message.
    ///
    /// What a receiver holds lives as long as its connection (until the
    /// peer leaves or this system shuts down), so it must not keep an
    /// actor or a table alive that should go sooner; it can hold a weak
    /// reference to those and check it.
    ///
    /// ```
    /// use troupe_core::prelude::*;
    /// use troupe_core::{EncodedReply, InboundMessage, Replier};
    /// use std::time::Duration;
    ///
    /// struct Tally;
    /// impl Actor for Tally {}
    ///
    /// troupe_core::rt::block_on(async {
    ///     let system = ActorSystem::new("doc").unwrap();
    ///     // Each receiver counts the messages it took; no lock needed.
    ///     system.register_receiver_per_connection::<Tally, _>("doc.count", || {
    ///         let mut taken = 0u64;
    ///         move |m: InboundMessage<'_>| {
    ///             taken += 1;
    ///             if let Some(r) = m.reply {
    ///                 r.send(EncodedReply(taken.to_be_bytes().to_vec()));
    ///             }
    ///             Ok(())
    ///         }
    ///     });
    ///     let tally = system.spawn(Tally);
    ///     let (replier, reply) = Replier::channel(Duration::from_secs(5));
    ///     system
    ///         .send_encoded(&tally, "doc.count", |_| Ok(()), Some(replier))
    ///         .unwrap();
    ///     // A local delivery had a receiver made for it alone.
    ///     assert_eq!(reply.await.unwrap().0, 1u64.to_be_bytes());
    ///     system.shutdown().await;
    /// });
    /// ```
    pub fn register_receiver_per_connection<A: Actor, R>(
        &self,
        manifest: &'static str,
        make: impl Fn() -> R + Send + Sync + 'static,
    ) -> &Self
    where
        R: FnMut(InboundMessage<'_>) -> Result<(), DeliverError> + Send + 'static,
    {
        self.shared().registry.register_receiver::<A>(
            manifest,
            Arc::new(move || Box::new(make()) as crate::remote::registry::ReceiveFn),
        );
        self
    }

    /// Sends `to` a message of `manifest` whose bytes `write` puts in place
    /// (already in that manifest's wire form, which the recipient's node
    /// must know for `to`'s actor type): for a remote actor straight into
    /// the frame, on the ordinary connection; for a local one, delivered
    /// as [`deliver_encoded`](Self::deliver_encoded) would. The reply of an
    /// ask reaches `reply` still encoded.
    ///
    /// On failure the error says why, and `reply` (if any) is failed with
    /// the reason. A send that the full queue to the node refuses is not
    /// recorded as a dead letter: the caller still has the message.
    #[inline]
    pub fn send_encoded<A: Actor>(
        &self,
        to: &ActorRef<A>,
        manifest: &'static str,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
        reply: Option<Replier<EncodedReply>>,
    ) -> Result<(), SendEncodedError> {
        self.send_encoded_via(to, manifest, write, reply, true)
    }

    /// As [`send_encoded`](Self::send_encoded), but a frame for a remote
    /// actor always goes through the connection's queue, to be written by
    /// its writer with the frames queued beside it. `send_encoded` writes
    /// a frame straight to the socket from the calling thread when the
    /// connection is idle, which saves a lone ask a hand-off to the writer
    /// but costs a sender of many messages in a row a clock reading for
    /// each and a system call for each whenever the writer keeps up with
    /// it: use this one for such a sender (a stream of tells with
    /// back-pressure, a buffer flushed). The order of the two kinds of
    /// sends to one node is kept.
    #[inline]
    pub fn send_encoded_queued<A: Actor>(
        &self,
        to: &ActorRef<A>,
        manifest: &'static str,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
        reply: Option<Replier<EncodedReply>>,
    ) -> Result<(), SendEncodedError> {
        self.send_encoded_via(to, manifest, write, reply, false)
    }

    #[inline]
    fn send_encoded_via<A: Actor>(
        &self,
        to: &ActorRef<A>,
        manifest: &'static str,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
        reply: Option<Replier<EncodedReply>>,
        direct: bool,
    ) -> Result<(), SendEncodedError> {
        if let Some(remote) = to.remote_target() {
            return remote
                .send_encoded(manifest, write, reply, direct)
                .map_err(|e| match e {
                    SendError::Full => SendEncodedError::Full,
                    SendError::NotSendable(why) => SendEncodedError::NotSendable(why),
                });
        }
        let mut bytes = Vec::new();
        if let Err(why) = write(&mut bytes) {
            let why = format!("`{manifest}` did not encode: {why}");
            if let Some(r) = reply {
                r.fail(crate::AskError::NotSendable(why.clone()));
            }
            return Err(SendEncodedError::NotSendable(why));
        }
        self.deliver_encoded(to, manifest, &bytes, reply, None)
            .map_err(SendEncodedError::Refused)
    }

    /// True if message type `M` is registered on this node.
    pub fn is_registered<M: Message>(&self) -> bool {
        self.shared().registry.codec_of::<M>().is_some()
    }
}
