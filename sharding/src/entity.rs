//! Entity types: what `#[entity]` declares, and the registration of the
//! messages an entity receives from other nodes.

use crate::error::ShardingError;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::marker::PhantomData;
use troupe_core::{Actor, ActorSystem, Handler, Message};

/// An entity type: an actor that lives in a shard, addressed by an entity
/// id, and reached from any node through an
/// [`EntityRef`](crate::EntityRef).
///
/// Do not implement it by hand: write `#[entity]` (or
/// `#[entity(name = "...")]`) on the impl block of the entity's handlers,
/// in the same form as `#[handlers]`. The macro implements the handlers,
/// the stable type name and the table of messages that may reach the
/// entity from another node (each must be serde-serialisable, as must its
/// reply).
pub trait Entity: Actor {
    /// The entity type's stable name: the same on every node, fixed for the
    /// life of the cluster's data (it names the coordinator state and the
    /// remembered entities). By default the type's name.
    const TYPE_NAME: &'static str;

    /// Registers every message the entity handles for remoting.
    fn register_messages(registrar: &mut EntityRegistrar<'_, Self>) -> Result<(), ShardingError>;
}

/// Collects the messages of an entity type (called by the code that
/// `#[entity]` writes).
pub struct EntityRegistrar<'a, E: Entity> {
    system: &'a ActorSystem,
    /// The manifests registered, for the region's table of deliveries.
    pub(crate) manifests: Vec<&'static str>,
    _entity: PhantomData<fn() -> E>,
}

impl<'a, E: Entity> EntityRegistrar<'a, E> {
    pub(crate) fn new(system: &'a ActorSystem) -> Self {
        EntityRegistrar {
            system,
            manifests: Vec::new(),
            _entity: PhantomData,
        }
    }

    /// Registers message `M` as handled by the entity. Fails if another
    /// message type already uses `M`'s manifest.
    pub fn message<M>(&mut self) -> Result<(), ShardingError>
    where
        E: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        self.system
            .register::<E, M>()
            .map_err(ShardingError::Register)?;
        self.manifests.push(M::manifest());
        Ok(())
    }
}

/// Support for the code that `#[entity]` writes; not a public API.
#[doc(hidden)]
pub mod __private {
    use super::{Entity, EntityRegistrar};
    use crate::error::ShardingError;
    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use troupe_core::{Handler, Message};

    /// A message entity `E` can receive from another node.
    #[diagnostic::on_unimplemented(
        message = "entity `{E}` cannot receive `{Self}` from other nodes: `{Self}` is not serialisable",
        label = "`{Self}` must implement `serde::Serialize` and `serde::Deserialize`",
        note = "an entity can be sent messages from any node, so every message it handles must be serialisable: derive `serde::Serialize` and `serde::Deserialize` for `{Self}`"
    )]
    pub trait EntityMessage<E>: Serialize + DeserializeOwned {}
    impl<E, M: Serialize + DeserializeOwned> EntityMessage<E> for M {}

    /// A reply entity `E` can send back to another node for `M`.
    #[diagnostic::on_unimplemented(
        message = "entity `{E}` cannot answer `{M}` on other nodes: its reply `{Self}` is not serialisable",
        label = "`{Self}` must implement `serde::Serialize` and `serde::Deserialize`",
        note = "an entity can be asked from any node, so every reply must be serialisable: derive `serde::Serialize` and `serde::Deserialize` for `{Self}`"
    )]
    pub trait EntityReply<E, M>: Serialize + DeserializeOwned {}
    impl<E, M, R: Serialize + DeserializeOwned> EntityReply<E, M> for R {}

    /// Registers `M` (with reply `R`) for entity `E`.
    ///
    /// Its only serde bounds are the two traits above (serde's traits are
    /// their supertraits): a serde bound written out here would be
    /// reported in serde's words instead of theirs.
    pub fn register_message<E, M, R>(
        registrar: &mut EntityRegistrar<'_, E>,
    ) -> Result<(), ShardingError>
    where
        E: Entity + Handler<M>,
        M: Message<Reply = R> + EntityMessage<E>,
        R: EntityReply<E, M> + Send + 'static,
    {
        registrar.message::<M>()
    }
}
