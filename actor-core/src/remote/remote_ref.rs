//! References to actors on other nodes, and how every reference travels
//! inside messages: as its full path and uid,
//! `troupe://SYSTEM@HOST:PORT/user/name#uid`.

use crate::actor::Actor;
use crate::actor_ref::{ActorRef, AnyActorRef, ForwardError};
use crate::cell::ActorCell;
use crate::codec::EncodedReply;
use crate::error::{AskError, TellError};
use crate::message::Message;
use crate::remote::address::RemotePath;
use crate::remote::association::Association;
pub(crate) use crate::remote::association::SendError;
use crate::remote::serde_context;
use crate::replier::Replier;
use serde::de::Error as _;
use serde::ser::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;
use std::time::Duration;

/// The target of a reference to a remote actor.
pub(crate) struct RemoteTarget {
    pub(crate) path: RemotePath,
    pub(crate) assoc: Arc<Association>,
}

impl RemoteTarget {
    /// The uid, or for a path-only reference a stable hash of the full path
    /// (so that such references can be watched and compared).
    pub(crate) fn key(&self) -> u64 {
        if self.path.uid != 0 {
            return self.path.uid;
        }
        // FNV-1a: stable across builds, unlike std's hasher.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.path.to_string().bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h | 1
    }

    pub(crate) fn default_ask_timeout(&self) -> Duration {
        self.assoc.remoting().system.settings.ask_timeout
    }

    pub(crate) fn tell<M: Message>(&self, msg: M) -> Result<(), TellError<M>> {
        let sent = self.assoc.send_user(&self.path, "", &msg, 0);
        hand_back(sent, msg)
    }

    /// Sends with a sender the receiver sees as `ctx.sender()`.
    pub(crate) fn tell_from<M: Message>(
        &self,
        msg: M,
        sender: &AnyActorRef,
    ) -> Result<(), TellError<M>> {
        let from = match wire_path(sender) {
            Ok(p) => p,
            Err(why) => return Err(TellError::NotSendable(msg, why)),
        };
        let sent = self.assoc.send_user(&self.path, &from, &msg, 0);
        hand_back(sent, msg)
    }

    /// Waits until the queue of user messages to the node has room (or
    /// is closed).
    pub(crate) async fn wait_for_room(&self) {
        self.assoc.wait_for_room().await;
    }

    /// Sends, waiting for room in the queue to the node.
    pub(crate) async fn send<M: Message>(&self, msg: M) -> Result<(), TellError<M>> {
        let sent = self.assoc.send_user_waiting(&self.path, &msg, 0).await;
        hand_back(sent, msg)
    }

    pub(crate) fn ask<M: Message>(
        &self,
        msg: M,
        timeout: Duration,
    ) -> Result<oneshot::Receiver<Result<M::Reply, AskError>>, AskError> {
        let (tx, rx) = oneshot::channel();
        self.send_ask(&msg, timeout, "", move |reply| {
            let _ = tx.send(reply);
        })
        .map(|()| rx)
        .map_err(AskError::from)
    }

    /// Sends `msg` as an ask whose reply (decoded) or failure is handed to
    /// `complete`. If sending fails, `complete` is dropped uncalled.
    fn send_ask<M: Message>(
        &self,
        msg: &M,
        timeout: Duration,
        from: &str,
        complete: impl FnOnce(Result<M::Reply, AskError>) + Send + 'static,
    ) -> Result<(), SendError> {
        let remoting = self.assoc.remoting();
        let Some(codec) = remoting.system.registry.codec_of::<M>() else {
            return Err(SendError::NotSendable(not_registered::<M>()));
        };
        let decode = codec.decode_reply;
        let system = remoting.system.clone();
        let id = remoting.asks.register(
            self.path.address.clone(),
            timeout,
            Box::new(move |result| {
                let reply = result.and_then(|bytes| {
                    let any = serde_context::with_system(&system, || decode(bytes))
                        .map_err(|e| AskError::Remote(format!("the reply did not decode: {e}")))?;
                    any.downcast::<M::Reply>()
                        .map(|b| *b)
                        .map_err(|_| AskError::Remote("bug: reply of the wrong type".into()))
                });
                complete(reply);
            }),
        );
        let sent = self.assoc.send_user(&self.path, from, msg, id);
        if sent.is_err() {
            remoting.asks.cancel(id);
        }
        sent
    }

    /// Sends a message already in the wire form of `manifest` (written by
    /// `write` straight into the frame); the reply of an ask reaches
    /// `reply` as it came (see `ActorSystem::send_encoded`). On failure
    /// `reply` is failed with the reason.
    #[inline]
    pub(crate) fn send_encoded(
        &self,
        manifest: &'static str,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
        reply: Option<Replier<EncodedReply>>,
        direct: bool,
    ) -> Result<(), SendError> {
        let Some(reply) = reply else {
            return self
                .assoc
                .send_encoded(&self.path, manifest, 0, write, direct);
        };
        let remoting = self.assoc.remoting();
        let id = remoting.asks.register(
            self.path.address.clone(),
            self.default_ask_timeout(),
            Box::new(move |result| {
                reply.complete(result.map(|bytes| EncodedReply(bytes.to_vec())));
            }),
        );
        let sent = self
            .assoc
            .send_encoded(&self.path, manifest, id, write, direct);
        if let Err(e) = &sent {
            if let Some(complete) = remoting.asks.take(id) {
                complete(Err(e.clone().into()));
            }
        }
        sent
    }

    /// Hands `msg` on with its reply channel (see `ActorRef::forward`): a
    /// tell, or an ask whose reply completes `reply`.
    pub(crate) fn forward<M: Message>(
        &self,
        msg: M,
        reply: Option<Replier<M::Reply>>,
        sender: Option<&AnyActorRef>,
    ) -> Result<(), ForwardError<M>> {
        let from = match sender.map(wire_path).transpose() {
            Ok(p) => p.unwrap_or_default(),
            Err(why) => {
                return Err(ForwardError {
                    error: TellError::NotSendable(msg, why),
                    reply,
                })
            }
        };
        let Some(reply) = reply else {
            let sent = self.assoc.send_user(&self.path, &from, &msg, 0);
            return hand_back(sent, msg).map_err(|error| ForwardError { error, reply: None });
        };
        // The reply channel goes into the pending ask; kept in a slot so
        // that it can be handed back if the send fails.
        let slot = Arc::new(std::sync::Mutex::new(Some(reply)));
        let kept = slot.clone();
        let timeout = self.default_ask_timeout();
        let sent = self.send_ask(&msg, timeout, &from, move |r| {
            let taken = slot.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(reply) = taken {
                reply.complete(r);
            }
        });
        hand_back(sent, msg).map_err(|error| ForwardError {
            error,
            reply: kept.lock().unwrap_or_else(|e| e.into_inner()).take(),
        })
    }
}

/// A send's outcome as a tell's, handing the message back on failure.
fn hand_back<M>(sent: Result<(), SendError>, msg: M) -> Result<(), TellError<M>> {
    match sent {
        Ok(()) => Ok(()),
        Err(SendError::Full) => Err(TellError::MailboxFull(msg)),
        Err(SendError::NotSendable(why)) => Err(TellError::NotSendable(msg, why)),
    }
}

pub(crate) fn not_registered<M: Message>() -> String {
    format!(
        "message type `{}` (manifest `{}`) is not registered for remoting: call \
         `system.register::<ActorType, {}>()` on every node that sends or receives it",
        std::any::type_name::<M>(),
        M::manifest(),
        std::any::type_name::<M>()
            .rsplit("::")
            .next()
            .unwrap_or("M"),
    )
}

/// The full path text of a reference, as it travels.
fn wire_path(r: &AnyActorRef) -> Result<String, String> {
    if let Some(remote) = r.remote() {
        return Ok(remote.path.to_string());
    }
    let core = r.core();
    let Some(remoting) = core.system.remote.get() else {
        return Err(format!(
            "cannot send a reference to local actor {} over the network: remoting is not enabled \
             on its actor system",
            core.path()
        ));
    };
    Ok(format!("{}{}#{}", remoting.address, core.path(), core.uid))
}

/// Rebuilds a reference from its path text in the decoding system.
fn from_wire_path(text: &str) -> Result<AnyActorRefOrDead, String> {
    let path = RemotePath::parse(text).map_err(|e| e.to_string())?;
    let system = serde_context::current()
        .ok_or("actor references can only be decoded by Troupe's remoting (no decoding system)")?;
    let remoting = system
        .remote
        .get()
        .ok_or("actor references need remoting enabled on the decoding system")?;
    if path.address == remoting.address {
        let local = crate::system::ActorSystem::from_shared(system.clone())
            .lookup_any(&path.path)
            .filter(|r| path.uid == 0 || r.uid() == path.uid);
        return Ok(match local {
            Some(r) => AnyActorRefOrDead::Live(r),
            None => AnyActorRefOrDead::Dead(system.clone()),
        });
    }
    let assoc = remoting.association(&path.address);
    Ok(AnyActorRefOrDead::Live(AnyActorRef::from_remote(Arc::new(
        RemoteTarget { path, assoc },
    ))))
}

/// The reference named by a full path, in the decoding system (a local
/// actor that is gone becomes a reference whose messages are dead letters).
pub(crate) fn any_ref_from_wire(text: &str) -> Result<AnyActorRef, String> {
    Ok(match from_wire_path(text)? {
        AnyActorRefOrDead::Live(r) => r,
        AnyActorRefOrDead::Dead(system) => {
            ActorCell::<crate::system::Guardian>::stillborn(&system).to_any()
        }
    })
}

/// A decoded reference: live, or to a local actor that is gone.
enum AnyActorRefOrDead {
    Live(AnyActorRef),
    Dead(Arc<crate::system::SystemShared>),
}

impl<A: Actor> Serialize for ActorRef<A> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&wire_path(&self.to_any()).map_err(S::Error::custom)?)
    }
}

impl<'de, A: Actor> Deserialize<'de> for ActorRef<A> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        match from_wire_path(&text).map_err(D::Error::custom)? {
            AnyActorRefOrDead::Live(r) => r.downcast::<A>().ok_or_else(|| {
                D::Error::custom(format!(
                    "actor {text} is not a `{}`",
                    std::any::type_name::<A>()
                ))
            }),
            // Messages to it become dead letters, as for any stopped actor.
            AnyActorRefOrDead::Dead(system) => Ok(ActorCell::stillborn(&system)),
        }
    }
}

impl Serialize for AnyActorRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&wire_path(self).map_err(S::Error::custom)?)
    }
}

impl<'de> Deserialize<'de> for AnyActorRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        match from_wire_path(&text).map_err(D::Error::custom)? {
            AnyActorRefOrDead::Live(r) => Ok(r),
            AnyActorRefOrDead::Dead(system) => {
                Ok(ActorCell::<crate::system::Guardian>::stillborn(&system).to_any())
            }
        }
    }
}
