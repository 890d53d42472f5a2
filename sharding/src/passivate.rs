//! Explicit passivation: an entity asks its shard to stop it (Akka's
//! `Passivate`), and messages that reach it meanwhile wait for its next
//! incarnation.

use crate::entity::Entity;
use crate::shard::Shard;
use troupe_core::prelude::*;

/// What a sharded entity can ask of its shard, through its context.
pub trait EntityContext {
    /// Stops this entity gracefully, as Akka's `Passivate`: the shard
    /// stops routing messages to it, sends it its stop message (the
    /// poison pill unless [`EntityConfig::with_stop_message`] says
    /// otherwise), and keeps the messages that arrive meanwhile; they
    /// start the next incarnation once this one has terminated, in the
    /// order they came. Messages already in the entity's mailbox are
    /// handled before the stop message.
    ///
    /// With remembered entities, a passivated entity is forgotten: it is
    /// not restarted until a message comes for it.
    ///
    /// Outside sharding (the actor was not started by a shard) this does
    /// nothing but log a warning.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use troupe_core::prelude::*;
    /// use troupe_sharding::{entity, EntityContext};
    ///
    /// #[derive(Message, Serialize, Deserialize)]
    /// struct Done;
    ///
    /// struct Session;
    ///
    /// impl Actor for Session {}
    ///
    /// #[entity(name = "session")]
    /// impl Session {
    ///     async fn done(&mut self, _msg: Done, ctx: &mut Context<Self>) {
    ///         ctx.passivate();
    ///     }
    /// }
    /// ```
    ///
    /// [`EntityConfig::with_stop_message`]: crate::EntityConfig::with_stop_message
    fn passivate(&mut self);
}

impl<E: Entity> EntityContext for Context<E> {
    fn passivate(&mut self) {
        let entity = self.myself().to_any();
        match self.parent().and_then(|p| p.downcast::<Shard<E>>()) {
            Some(shard) => {
                if shard.tell(Passivate { entity }).is_err() {
                    tracing::debug!(
                        "sharding: {} asked to be passivated but its shard has stopped",
                        self.myself().path()
                    );
                }
            }
            None => tracing::warn!(
                "sharding: {} asked to be passivated but was not started by a shard of `{}`; \
                 ignored",
                self.myself().path(),
                E::TYPE_NAME
            ),
        }
    }
}

/// An entity (by its actor's uid) asks its shard to passivate it.
#[derive(Message)]
pub(crate) struct Passivate {
    /// The incarnation that asked.
    pub(crate) entity: AnyActorRef,
}
