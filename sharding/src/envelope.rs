//! Messages that name their entity themselves: Akka's `ShardingEnvelope`
//! and message extractors, for code that does not hold an `EntityRef`
//! (a router that gets messages from outside, a message that carries its
//! own id).

use crate::entity::Entity;
use crate::error::ShardingTellError;
use crate::extractor::EntityId;
use crate::sharding::ClusterSharding;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use troupe_core::{Ask, AskError, Handler, Message};

/// A message for entity `entity_id` (Akka's `ShardingEnvelope`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardingEnvelope<M> {
    /// The entity the message is for.
    pub entity_id: String,
    /// The message.
    pub message: M,
}

impl<M> ShardingEnvelope<M> {
    /// `message` for entity `entity_id`.
    pub fn new(entity_id: impl Into<String>, message: M) -> Self {
        ShardingEnvelope {
            entity_id: entity_id.into(),
            message,
        }
    }
}

/// A message that carries the id of the entity it is for (Akka's
/// extractor of entity ids from messages).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use troupe_core::prelude::*;
/// use troupe_sharding::EntityMessage;
///
/// #[derive(Message, Serialize, Deserialize)]
/// #[message(reply = u64)]
/// struct Withdraw { account: String, amount: u64 }
///
/// impl EntityMessage for Withdraw {
///     fn entity_id(&self) -> &str { &self.account }
/// }
/// ```
pub trait EntityMessage: Message {
    /// The id of the entity this message is for.
    fn entity_id(&self) -> &str;
}

impl ClusterSharding {
    /// Sends the message of `envelope` to its entity of type `E` (as
    /// `entity_ref(id).tell(message)`).
    pub fn tell_envelope<E, M>(
        &self,
        envelope: ShardingEnvelope<M>,
    ) -> Result<(), ShardingTellError<M>>
    where
        E: Entity + Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        match self.entity_ref::<E>(EntityId::from(envelope.entity_id)) {
            Ok(r) => r.tell(envelope.message),
            Err(_) => Err(ShardingTellError::RegionStopped(envelope.message)),
        }
    }

    /// Sends a message that names its entity to that entity of type `E`.
    pub fn tell_message<E, M>(&self, msg: M) -> Result<(), ShardingTellError<M>>
    where
        E: Entity + Handler<M>,
        M: EntityMessage + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        let id = EntityId::from(msg.entity_id());
        match self.entity_ref::<E>(id) {
            Ok(r) => r.tell(msg),
            Err(_) => Err(ShardingTellError::RegionStopped(msg)),
        }
    }

    /// Asks the entity of type `E` that a message names (with the system's
    /// default ask timeout).
    pub fn ask_message<E, M>(&self, msg: M) -> Ask<M::Reply>
    where
        E: Entity + Handler<M>,
        M: EntityMessage + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        let id = EntityId::from(msg.entity_id());
        match self.entity_ref::<E>(id) {
            Ok(r) => r.ask(msg),
            Err(e) => Ask::failed(AskError::NotSendable(e.to_string())),
        }
    }
}
