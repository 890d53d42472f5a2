//! A message on its way to one entity, with its reply channel, whatever
//! its type: what regions buffer and shards hand to entities. Typed when
//! it was sent on this node, encoded when it came from another.

use crate::entity::Entity;
use crate::error::ShardingTellError;
use crate::extractor::{EntityId, ShardId};
use crate::region::{Region, ShardRoute};
use crate::shard_envelope;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use troupe_core::{
    ActorRef, ActorSystem, AskError, DeliverError, EncodedDelivery, EncodedReply, Handler, Message,
    Replier, SendEncodedError,
};

/// A message for entity `entity` of type `E`.
pub(crate) struct Delivery<E: Entity> {
    pub(crate) entity: EntityId,
    pub(crate) body: Box<dyn Body<E>>,
    /// The route whose in-flight count includes this message while it
    /// travels through the region or shard actors (see `ShardRoute`).
    counted: Counted<E>,
}

/// Which actor a counted message is travelling through.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Via {
    /// The region actor (its mailbox or its buffers).
    Region,
    /// The shard actor (its mailbox or the buffers of its entities).
    Shard,
}

/// Leaves the route's in-flight count when the message is delivered or
/// dropped.
pub(crate) struct Counted<E: Entity>(Option<(Arc<ShardRoute<E>>, Via)>);

impl<E: Entity> Drop for Counted<E> {
    fn drop(&mut self) {
        if let Some((route, via)) = self.0.take() {
            route.leave(via);
        }
    }
}

impl<E: Entity> Delivery<E> {
    pub(crate) fn new(entity: EntityId, body: Box<dyn Body<E>>) -> Self {
        Delivery {
            entity,
            body,
            counted: Counted(None),
        }
    }

    /// Counts this message in `route` as travelling through `via` until it
    /// is delivered or dropped (moving its count if it was counted as
    /// travelling through the other actor: it enters the new count before
    /// it leaves the old one, so the route is never seen quiet between).
    pub(crate) fn count_in(&mut self, route: &Arc<ShardRoute<E>>, via: Via) {
        drop(self.recount(route, via));
    }

    /// As [`count_in`](Self::count_in), but the old count is left only
    /// when the returned guard is dropped: the region drops it once it
    /// has queued the message at the shard, so that no sender sees the
    /// region quiet and overtakes the message on its way.
    pub(crate) fn recount(&mut self, route: &Arc<ShardRoute<E>>, via: Via) -> Counted<E> {
        match self.counted.0.take() {
            Some((r, v)) if v == via => {
                self.counted.0 = Some((r, v));
                Counted(None)
            }
            old => {
                route.enter(via);
                self.counted.0 = Some((route.clone(), via));
                Counted(old)
            }
        }
    }

    /// Through which actor this message is counted as travelling, if it
    /// is.
    pub(crate) fn counted_via(&self) -> Option<Via> {
        self.counted.0.as_ref().map(|(_, v)| *v)
    }

    /// True while this message counts in its route's in-flight count.
    pub(crate) fn is_counted(&self) -> bool {
        self.counted.0.is_some()
    }

    /// Queues the message for a local entity; on failure (the entity
    /// stopped meanwhile) hands it back.
    pub(crate) fn deliver_local(self, system: &ActorSystem, to: &ActorRef<E>) -> Result<(), Self> {
        let Delivery {
            entity,
            body,
            counted,
        } = self;
        body.deliver_local(system, to).map_err(|body| Delivery {
            entity,
            body,
            counted,
        })
    }

    /// Sends the message to the region of another node. A tell that the
    /// queue to that node has no room for is handed back (to wait in the
    /// region's buffer and go again: it was accepted); an ask is failed
    /// with the reason instead.
    pub(crate) fn send_remote(
        self,
        system: &ActorSystem,
        shard: &ShardId,
        to: &ActorRef<Region<E>>,
    ) -> Result<(), Self> {
        let Delivery {
            entity,
            body,
            counted,
        } = self;
        body.send_remote(system, &entity, shard, to)
            .map_err(|body| Delivery {
                entity,
                body,
                counted,
            })
    }

    /// Tells the asker (if any) why the message was not delivered.
    pub(crate) fn fail(self, error: AskError) {
        tracing::debug!(
            "sharding: a `{}` for entity `{}` of type `{}` was not delivered: {error}",
            self.body.manifest(),
            self.entity,
            E::TYPE_NAME
        );
        self.body.fail(error);
    }
}

impl<E: Entity> Delivery<E> {
    /// The typed message back (for a refused send from this node).
    pub(crate) fn into_typed<M: Message>(self) -> Typed<M> {
        match self.body.into_any().downcast::<Typed<M>>() {
            Ok(t) => *t,
            Err(_) => unreachable!("a refused local send hands back its own typed message"),
        }
    }
}

/// The message itself, erased over its type.
pub(crate) trait Body<E: Entity>: Send {
    fn deliver_local(
        self: Box<Self>,
        system: &ActorSystem,
        to: &ActorRef<E>,
    ) -> Result<(), Box<dyn Body<E>>>;
    /// Hands back a tell that the queue to the node has no room for.
    fn send_remote(
        self: Box<Self>,
        system: &ActorSystem,
        entity: &str,
        shard: &ShardId,
        to: &ActorRef<Region<E>>,
    ) -> Result<(), Box<dyn Body<E>>>;
    fn fail(self: Box<Self>, error: AskError);
    fn manifest(&self) -> &str;
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
}

/// A message sent on this node, with its type.
pub(crate) struct Typed<M: Message> {
    pub(crate) msg: M,
    pub(crate) reply: Option<Replier<M::Reply>>,
}

impl<E, M> Body<E> for Typed<M>
where
    E: Entity + Handler<M>,
    M: Message + Serialize + DeserializeOwned,
    M::Reply: Serialize + DeserializeOwned,
{
    fn deliver_local(
        self: Box<Self>,
        _system: &ActorSystem,
        to: &ActorRef<E>,
    ) -> Result<(), Box<dyn Body<E>>> {
        let Typed { msg, reply } = *self;
        to.forward(msg, reply, None).map_err(|e| {
            Box::new(Typed {
                msg: e.error.into_message(),
                reply: e.reply,
            }) as Box<dyn Body<E>>
        })
    }

    fn send_remote(
        self: Box<Self>,
        system: &ActorSystem,
        entity: &str,
        shard: &ShardId,
        to: &ActorRef<Region<E>>,
    ) -> Result<(), Box<dyn Body<E>>> {
        // The region sends what it held (a buffer, flushed): a burst.
        match (*self).send_remote(system, entity, shard, to, true) {
            Ok(()) => Ok(()),
            Err(ShardingTellError::NodeQueueFull(msg)) => Err(Box::new(Typed { msg, reply: None })),
            // Forwarded by the region, after the sender was told it was
            // accepted, and it can never be sent (logged where it failed).
            Err(_) => Ok(()),
        }
    }
    fn fail(self: Box<Self>, error: AskError) {
        if let Some(r) = self.reply {
            r.fail(error);
        }
    }

    fn manifest(&self) -> &str {
        M::manifest()
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

impl<M> Typed<M>
where
    M: Message + Serialize + DeserializeOwned,
    M::Reply: Serialize + DeserializeOwned,
{
    /// Sends the message to the region of another node, written once,
    /// straight into the frame inside its envelope; the reply comes back
    /// encoded and is decoded for the asker. An ask that cannot be sent is
    /// failed through its reply channel; a tell is handed back with the
    /// reason.
    /// `queued`: through the connection's queue always (a sender of many
    /// in a row; see `ActorSystem::send_encoded_queued`).
    #[inline]
    pub(crate) fn send_remote<E: Entity>(
        self,
        system: &ActorSystem,
        entity: &str,
        shard: &str,
        to: &ActorRef<Region<E>>,
        queued: bool,
    ) -> Result<(), ShardingTellError<M>> {
        let Typed { msg, reply } = self;
        let reply = reply.map(|reply| {
            let system = system.clone();
            reply.map_from(move |enc: EncodedReply| {
                system
                    .decode_reply::<M>(&enc.0)
                    .map_err(|e| AskError::Remote(e.to_string()))
            })
        });
        let asked = reply.is_some();
        let write = |buf: &mut Vec<u8>| {
            shard_envelope::write(buf, entity, shard, M::manifest(), |b| {
                system
                    .encode_message_into(&msg, b)
                    .map(drop)
                    .map_err(|e| e.to_string())
            })
        };
        let sent = if queued {
            system.send_encoded_queued(to, shard_envelope::MANIFEST, write, reply)
        } else {
            system.send_encoded(to, shard_envelope::MANIFEST, write, reply)
        };
        match sent {
            Ok(()) => Ok(()),
            // The ask was failed with the reason.
            Err(_) if asked => Ok(()),
            Err(SendEncodedError::Full) => {
                // The queue to that node is full: refused, so that the
                // sender can slow down.
                Err(ShardingTellError::NodeQueueFull(msg))
            }
            Err(e) => {
                tracing::error!(
                    "sharding: a `{}` for entity `{entity}` cannot be sent to {to}: {e}",
                    M::manifest()
                );
                Err(ShardingTellError::NotSendable(msg, e.to_string()))
            }
        }
    }
}

/// A message that came from another node, still encoded.
pub(crate) struct Encoded {
    pub(crate) manifest: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) reply: Option<Replier<EncodedReply>>,
}

impl<E: Entity> Body<E> for Encoded {
    fn deliver_local(
        self: Box<Self>,
        system: &ActorSystem,
        to: &ActorRef<E>,
    ) -> Result<(), Box<dyn Body<E>>> {
        let Encoded {
            manifest,
            payload,
            reply,
        } = *self;
        deliver_bytes(system, None, to, &manifest, &payload, reply).map_err(|reply| {
            Box::new(Encoded {
                manifest,
                payload,
                reply,
            }) as Box<dyn Body<E>>
        })
    }

    fn send_remote(
        self: Box<Self>,
        system: &ActorSystem,
        entity: &str,
        shard: &ShardId,
        to: &ActorRef<Region<E>>,
    ) -> Result<(), Box<dyn Body<E>>> {
        let Encoded {
            manifest,
            payload,
            reply,
        } = *self;
        let asked = reply.is_some();
        let write = |buf: &mut Vec<u8>| {
            shard_envelope::write(buf, entity, shard, &manifest, |b| {
                b.extend_from_slice(&payload);
                Ok(())
            })
        };
        // An ask's reply channel is failed with the reason. The region
        // sends what it held (a buffer, flushed): a burst, queued.
        match system.send_encoded_queued(to, shard_envelope::MANIFEST, write, reply) {
            Ok(()) => Ok(()),
            Err(SendEncodedError::Full) if !asked => Err(Box::new(Encoded {
                manifest,
                payload,
                reply: None,
            })),
            Err(e) => {
                tracing::warn!(
                    "sharding: a `{manifest}` for entity `{entity}` was lost on its way to region {to}: {e}"
                );
                Ok(())
            }
        }
    }

    fn fail(self: Box<Self>, error: AskError) {
        if let Some(r) = self.reply {
            r.fail(error);
        }
    }

    fn manifest(&self) -> &str {
        &self.manifest
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// How each message of an entity type reaches an entity still encoded, by
/// manifest (filled when the region starts, then only read).
pub(crate) struct Deliveries<E: Entity> {
    list: Vec<(&'static str, EncodedDelivery<E>)>,
    /// Where each manifest is in `list`, by its bytes (a reader looks a
    /// manifest up as it came from the network).
    index: HashMap<&'static [u8], usize, foldhash::fast::RandomState>,
}

impl<E: Entity> Default for Deliveries<E> {
    fn default() -> Self {
        Deliveries {
            list: Vec::new(),
            index: HashMap::default(),
        }
    }
}

impl<E: Entity> Deliveries<E> {
    /// Adds (or replaces) how `manifest` is delivered.
    pub(crate) fn insert(&mut self, manifest: &'static str, delivery: EncodedDelivery<E>) {
        match self.index.get(manifest.as_bytes()) {
            Some(&at) => self.list[at].1 = delivery,
            None => {
                self.index.insert(manifest.as_bytes(), self.list.len());
                self.list.push((manifest, delivery));
            }
        }
    }

    /// Where `manifest` is, if it is registered; `hint` is tried first
    /// (a reader's last answer: a stream of one message type then costs a
    /// comparison, not a hash).
    #[inline]
    pub(crate) fn position(&self, manifest: &[u8], hint: usize) -> Option<usize> {
        match self.list.get(hint) {
            Some((m, _)) if m.as_bytes() == manifest => Some(hint),
            _ => self.index.get(manifest).copied(),
        }
    }

    /// The manifest at `at` (from `position`) and its delivery.
    #[inline]
    pub(crate) fn at(&self, at: usize) -> (&'static str, &EncodedDelivery<E>) {
        let (m, d) = &self.list[at];
        (m, d)
    }
}

/// Queues a message from another node, still encoded, for a running
/// entity; hands its reply channel back if the entity has stopped (so that
/// the message can go to its next incarnation). A message that cannot be
/// decoded is logged and dropped. `delivery`: how `manifest` reaches the
/// entity, when the region has it (else the system looks it up).
#[inline]
pub(crate) fn deliver_bytes<E: Entity>(
    system: &ActorSystem,
    delivery: Option<&EncodedDelivery<E>>,
    to: &ActorRef<E>,
    manifest: &str,
    payload: &[u8],
    reply: Option<Replier<EncodedReply>>,
) -> Result<(), Option<Replier<EncodedReply>>> {
    if to.is_terminated() {
        return Err(reply);
    }
    if manifest == START_ENTITY_MANIFEST {
        // Its shard started it; there is nothing to hand it.
        return Ok(());
    }
    let delivered = match delivery {
        // Decoded by the entity: see `EncodedDelivery::queue_undecoded`
        // (this runs on the connection's reader, for every message from
        // that node).
        Some(d) => d.queue_undecoded(to, payload, reply, None),
        // Registered for the entity by other code, or not at all.
        None => system.deliver_encoded(to, manifest, payload, reply, None),
    };
    match delivered {
        Ok(()) => {}
        Err(DeliverError::UnknownManifest(m)) => tracing::error!(
            "sharding: entity type `{}` has no handler registered for manifest `{m}` on this \
             node (is the same version running everywhere?); message dropped",
            E::TYPE_NAME
        ),
        Err(DeliverError::Undecodable(why)) => tracing::error!(
            "sharding: a `{manifest}` for entity type `{}` did not decode: {why}; message dropped",
            E::TYPE_NAME
        ),
        // Stopped between the check and the send: the entity stopped by
        // itself (rare). The message and its reply channel are gone with
        // the mailbox.
        Err(e) => tracing::warn!("sharding: a `{manifest}` for {to} was not delivered: {e}"),
    }
    Ok(())
}

/// The manifest of [`StartEntity`] on the wire.
pub(crate) const START_ENTITY_MANIFEST: &str = "troupe.sharding.StartEntity";

/// Starts an entity without giving it a message (Akka's `StartEntity`):
/// used to move a remembered entity to the shard that the shard-id
/// extractor now names. Its shard starts it, remembering it.
pub(crate) struct StartEntity;

impl<E: Entity> Body<E> for StartEntity {
    fn deliver_local(
        self: Box<Self>,
        _system: &ActorSystem,
        to: &ActorRef<E>,
    ) -> Result<(), Box<dyn Body<E>>> {
        if to.is_terminated() {
            return Err(self);
        }
        Ok(())
    }

    fn send_remote(
        self: Box<Self>,
        system: &ActorSystem,
        entity: &str,
        shard: &ShardId,
        to: &ActorRef<Region<E>>,
    ) -> Result<(), Box<dyn Body<E>>> {
        // On the wire it is an encoded message with its own manifest.
        // No body: a MessagePack nil in its place.
        let encoded = Box::new(Encoded {
            manifest: START_ENTITY_MANIFEST.to_string(),
            payload: vec![0xc0],
            reply: None,
        });
        <Encoded as Body<E>>::send_remote(encoded, system, entity, shard, to)
    }

    fn fail(self: Box<Self>, _error: AskError) {}

    fn manifest(&self) -> &str {
        START_ENTITY_MANIFEST
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}
