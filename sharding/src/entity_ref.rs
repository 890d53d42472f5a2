//! `EntityRef`: a typed reference to one entity, wherever it lives.

use crate::delivery::{Body, Delivery, Typed};
use crate::entity::Entity;
use crate::error::ShardingTellError;
use crate::extractor::EntityId;
use crate::region::{Direct, Refused, RegionShared, ShardRoute, ROOM_WAIT_MAX};
use crate::sharding::ClusterSharding;
use serde::de::{DeserializeOwned, Error as _};
use serde::ser::SerializeStruct;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use troupe_core::{rt, Ask, AskError, Handler, Message, Replier};

/// A reference to entity `id` of type `E`: send it the messages `E`
/// handles (checked by the compiler), from any node, whether the entity
/// runs, has never run, or is moving.
///
/// Cheap to clone (two reference counts), `Send + Sync`, and it can travel
/// inside a message: on the receiving node it refers to the same entity
/// through that node's sharding (which must have `E` started or proxied).
///
/// ```no_run
/// # use troupe_core::prelude::*;
/// # use serde::{Deserialize, Serialize};
/// # use troupe_sharding::{ClusterSharding, EntityRef};
/// #[derive(Message, Serialize, Deserialize)]
/// #[message(reply = u64)]
/// struct Add { n: u64 }
///
/// #[derive(Default)]
/// struct Counter { value: u64 }
/// impl Actor for Counter {}
///
/// #[troupe_sharding::entity(name = "counter")]
/// impl Counter {
///     async fn add(&mut self, msg: Add) -> u64 {
///         self.value += msg.n;
///         self.value
///     }
/// }
///
/// # async fn demo(sharding: ClusterSharding) {
/// let c: EntityRef<Counter> = sharding.entity_ref("c-42").unwrap();
/// c.tell(Add { n: 1 }).unwrap();
/// let v = c.ask(Add { n: 1 }).await.unwrap();
/// # }
/// ```
pub struct EntityRef<E: Entity> {
    id: EntityId,
    route: Arc<ShardRoute<E>>,
    shared: Arc<RegionShared<E>>,
}

impl<E: Entity> Clone for EntityRef<E> {
    fn clone(&self) -> Self {
        EntityRef {
            id: self.id.clone(),
            route: self.route.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<E: Entity> PartialEq for EntityRef<E> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl<E: Entity> Eq for EntityRef<E> {}

impl<E: Entity> std::hash::Hash for EntityRef<E> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl<E: Entity> fmt::Debug for EntityRef<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "EntityRef({}/{})", E::TYPE_NAME, self.id)
    }
}

impl<E: Entity> fmt::Display for EntityRef<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", E::TYPE_NAME, self.id)
    }
}

impl<E: Entity> EntityRef<E> {
    pub(crate) fn new(id: EntityId, shared: Arc<RegionShared<E>>) -> Self {
        let route = shared.route_of(&id);
        EntityRef { id, route, shared }
    }

    /// The entity's id.
    pub fn entity_id(&self) -> &str {
        &self.id
    }

    /// The id of the entity's shard.
    pub fn shard_id(&self) -> &str {
        &self.route.shard
    }

    /// Sends `msg` without waiting for anything. Refused, with the message
    /// handed back, when the region's buffer is full
    /// ([`BufferFull`](ShardingTellError::BufferFull)), the queue of
    /// messages to the entity's node is full
    /// ([`NodeQueueFull`](ShardingTellError::NodeQueueFull): slow down and
    /// retry, or use [`send`](Self::send)), the message cannot be sent to
    /// that node ([`NotSendable`](ShardingTellError::NotSendable)) or the
    /// region has stopped ([`RegionStopped`](ShardingTellError::RegionStopped)).
    /// Once accepted, it is delivered once, in order with the other
    /// messages from this node, across moves of its shard.
    pub fn tell<M>(&self, msg: M) -> Result<(), ShardingTellError<M>>
    where
        E: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        self.tell_via(msg, false)
    }

    /// `tell`; `queued`: to another node through the connection's queue
    /// always, never written on this thread (for `send`, a sender of many
    /// in a row: see `ActorSystem::send_encoded_queued`).
    fn tell_via<M>(&self, msg: M, queued: bool) -> Result<(), ShardingTellError<M>>
    where
        E: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        let (msg, reply) = match self
            .shared
            .try_direct(&self.route, &self.id, msg, None, queued)
        {
            Ok(()) => return Ok(()),
            Err(Direct::Refused(e)) => return Err(e),
            Err(Direct::Slow(msg, reply)) => (msg, reply),
        };
        let body: Box<dyn Body<E>> = Box::new(Typed { msg, reply });
        match self
            .shared
            .send_slow(&self.route, Delivery::new(self.id.clone(), body), false)
        {
            Ok(()) => Ok(()),
            Err((why, d)) => {
                let msg = d.into_typed::<M>().msg;
                Err(match why {
                    Refused::BufferFull => ShardingTellError::BufferFull(msg),
                    Refused::RegionStopped => ShardingTellError::RegionStopped(msg),
                })
            }
        }
    }

    /// Sends `msg` as [`tell`](Self::tell) does, but while the queue of
    /// messages to the entity's node is full, or the region's buffer is
    /// (`buffer-size`: the region holds messages for shards whose home is
    /// being found or moved, or whose node's queue is full), it waits for
    /// room instead of handing the message back (back-pressure for a
    /// sender that is faster than the network or than the shard's
    /// allocation). It looks at the shard's home again at least once a
    /// second, so a wait on a node that stays unreachable ends when the
    /// shard moves away from it. Refused, with the message handed back,
    /// for `tell`'s other reasons (the region stopped, a message that
    /// cannot be sent).
    ///
    /// The wait is not otherwise bounded: while the node stays unreachable
    /// and hosts the shard, or while no shard home can be allocated (too
    /// few members, no coordinator), it goes on. Bound it with a timeout
    /// where that matters.
    ///
    /// Made for a sender of many messages in a row: a message to another
    /// node always goes through the connection's queue, to be written with
    /// the others (as `ActorRef::send` does), where `tell` may write a lone
    /// message straight to an idle connection.
    ///
    /// ```no_run
    /// # use troupe_core::prelude::*;
    /// # use serde::{Deserialize, Serialize};
    /// # use troupe_sharding::{ClusterSharding, EntityRef};
    /// # #[derive(Message, Serialize, Deserialize)]
    /// # struct Reading { celsius: f64 }
    /// # #[derive(Default)]
    /// # struct Sensor;
    /// # impl Actor for Sensor {}
    /// # #[troupe_sharding::entity(name = "sensor")]
    /// # impl Sensor {
    /// #     async fn reading(&mut self, _msg: Reading) {}
    /// # }
    /// # async fn demo(sharding: ClusterSharding) {
    /// let sensor: EntityRef<Sensor> = sharding.entity_ref("s-7").unwrap();
    /// for celsius in [20.5, 20.7, 21.0] {
    ///     sensor.send(Reading { celsius }).await.unwrap();
    /// }
    /// # }
    /// ```
    pub async fn send<M>(&self, msg: M) -> Result<(), ShardingTellError<M>>
    where
        E: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        let mut msg = msg;
        loop {
            match self.tell_via(msg, true) {
                Err(ShardingTellError::NodeQueueFull(m)) => {
                    msg = m;
                    // A shard that moved meanwhile is tried at its new home
                    // at once; room that does not come (a node cut off
                    // until it is removed) is waited for a second at a
                    // time, then the home is read again.
                    if let Some(region) = self.route.remote_home() {
                        let _ = rt::timeout(ROOM_WAIT_MAX, region.wait_for_room()).await;
                    }
                }
                Err(ShardingTellError::BufferFull(m)) => {
                    msg = m;
                    // Until the region takes messages out of its buffer
                    // (or a second passes: the home is read again).
                    let _ = rt::timeout(ROOM_WAIT_MAX, self.shared.buffer_room()).await;
                }
                other => return other,
            }
        }
    }

    /// Sends `msg` and waits for the reply, for at most the actor system's
    /// default ask timeout.
    pub fn ask<M>(&self, msg: M) -> Ask<M::Reply>
    where
        E: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        let timeout = self.shared.system.settings().ask_timeout;
        self.ask_timeout(msg, timeout)
    }

    /// Sends `msg` and waits for the reply for at most `timeout` (which
    /// includes the time to find or move the entity's shard). The message
    /// is sent at once.
    pub fn ask_timeout<M>(&self, msg: M, timeout: Duration) -> Ask<M::Reply>
    where
        E: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        let (replier, ask) = Replier::channel(timeout);
        let (msg, reply) =
            match self
                .shared
                .try_direct(&self.route, &self.id, msg, Some(replier), false)
            {
                Ok(()) => return ask,
                // An ask's failures travel through its reply channel.
                Err(Direct::Refused(_)) => return ask,
                Err(Direct::Slow(msg, reply)) => (msg, reply),
            };
        let body: Box<dyn Body<E>> = Box::new(Typed { msg, reply });
        match self
            .shared
            .send_slow(&self.route, Delivery::new(self.id.clone(), body), false)
        {
            Ok(()) => ask,
            Err((why, d)) => {
                drop(d.into_typed::<M>());
                Ask::failed(match why {
                    Refused::BufferFull => AskError::MailboxFull,
                    Refused::RegionStopped => AskError::Stopped,
                })
            }
        }
    }
}

impl<E: Entity> Serialize for EntityRef<E> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut st = s.serialize_struct("EntityRef", 2)?;
        st.serialize_field("type", E::TYPE_NAME)?;
        st.serialize_field("id", &*self.id)?;
        st.end()
    }
}

impl<'de, E: Entity> Deserialize<'de> for EntityRef<E> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            #[serde(rename = "type")]
            type_name: String,
            id: String,
        }
        let w = Wire::deserialize(d)?;
        if w.type_name != E::TYPE_NAME {
            return Err(D::Error::custom(format!(
                "an EntityRef of type `{}` where `{}` was expected",
                w.type_name,
                E::TYPE_NAME
            )));
        }
        let system = troupe_core::remote::decoding_system().ok_or_else(|| {
            D::Error::custom("an EntityRef can only be decoded by an actor system")
        })?;
        let sharding = ClusterSharding::get(&system).ok_or_else(|| {
            D::Error::custom("an EntityRef arrived at a node without cluster sharding")
        })?;
        sharding
            .entity_ref::<E>(w.id)
            .map_err(|e| D::Error::custom(e.to_string()))
    }
}
