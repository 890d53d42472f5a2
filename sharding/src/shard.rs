//! The shard: the entities of one shard on this node, started on demand,
//! watched, and stopped for a hand-off.
//!
//! Each entity is in one state of its life cycle, as Pekko's `Shard`
//! keeps them: active (running, reachable directly by senders), or
//! stopping (its stop message was sent for a hand-off or a passivation:
//! messages for it wait here and go to its next incarnation, or back to
//! the region when the shard moves). Passivation and remembered entities
//! add their states to the same enum.

use crate::delivery::Delivery;
use crate::entity::Entity;
use crate::extractor::{EntityId, ShardId};
use crate::region::{LocalShard, Rebuffer, Region, ShardTerminated};
use crate::settings::ShardingSettings;
use crate::sharding::EntityFactory;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use troupe_core::prelude::*;
use troupe_core::{ActorPath, AskError, Props};

/// What a shard starts with.
pub(crate) struct ShardStart<E: Entity> {
    pub(crate) shard: ShardId,
    pub(crate) local: Arc<LocalShard<E>>,
    pub(crate) region: ActorRef<Region<E>>,
    pub(crate) system: ActorSystem,
    pub(crate) factory: EntityFactory<E>,
    pub(crate) settings: ShardingSettings,
}

/// Where one entity is in its life cycle.
enum EntityState<E: Entity> {
    /// Running; senders reach it directly.
    Active(ActorRef<E>),
    /// Its stop message was sent; messages wait for it to terminate.
    Stopping(ActorRef<E>, VecDeque<Delivery<E>>),
}

/// A message for an entity of this shard (local, never on the wire).
#[derive(Message)]
pub(crate) struct Deliver<E: Entity>(pub(crate) Delivery<E>);

/// Stop every entity and report to the region.
#[derive(Message)]
pub(crate) struct ShardHandOff;

/// Entities that ignored their stop message for `handoff-timeout` are
/// stopped.
#[derive(Message, Clone)]
struct HandOffTimeout;

/// The entities of one shard on this node.
pub(crate) struct Shard<E: Entity> {
    start: ShardStart<E>,
    entities: HashMap<EntityId, EntityState<E>>,
    /// Which entity a watched actor is (by uid).
    by_uid: HashMap<u64, EntityId>,
    handing_off: bool,
}

impl<E: Entity> Actor for Shard<E> {}

impl<E: Entity> Shard<E> {
    pub(crate) fn new(start: ShardStart<E>) -> Self {
        Shard {
            start,
            entities: HashMap::new(),
            by_uid: HashMap::new(),
            handing_off: false,
        }
    }

    fn spawn_entity(&mut self, id: &EntityId, ctx: &mut Context<Self>) -> Option<ActorRef<E>> {
        let make = self.start.factory.make.clone();
        let eid = id.clone();
        let mut props = Props::from_factory(move || make(eid.clone()));
        if let Some(name) = actor_name(id) {
            props = props.with_name(name);
        }
        match ctx.spawn_props(props) {
            Ok(actor) => {
                ctx.watch(&actor);
                self.by_uid.insert(actor.uid(), id.clone());
                Some(actor)
            }
            Err(e) => {
                tracing::error!(
                    "sharding: cannot start entity `{id}` of `{}` in shard {}: {e}",
                    E::TYPE_NAME,
                    self.start.shard
                );
                None
            }
        }
    }

    fn publish(&self, id: &EntityId, actor: Option<&ActorRef<E>>) {
        let mut map = self
            .start
            .local
            .entities
            .write()
            .unwrap_or_else(|e| e.into_inner());
        match actor {
            Some(a) => {
                map.insert(id.clone(), a.clone());
            }
            None => {
                map.remove(id);
            }
        }
    }

    /// Delivers to the entity, starting it if it is not running.
    fn deliver(&mut self, delivery: Delivery<E>, ctx: &mut Context<Self>) {
        if self.handing_off {
            let _ = self
                .start
                .region
                .tell(Rebuffer(self.start.shard.clone(), delivery));
            return;
        }
        let id = delivery.entity.clone();
        let mut delivery = delivery;
        match self.entities.get_mut(&id) {
            Some(EntityState::Stopping(_, buffer)) => {
                buffer.push_back(delivery);
                return;
            }
            Some(EntityState::Active(actor)) => {
                match delivery.deliver_local(&self.start.system, actor) {
                    Ok(()) => return,
                    // It stopped by itself; its Terminated is on the way.
                    // Start the next incarnation now, in order.
                    Err(d) => delivery = d,
                }
                let old = actor.uid();
                self.by_uid.remove(&old);
                self.entities.remove(&id);
            }
            None => {}
        }
        let Some(actor) = self.spawn_entity(&id, ctx) else {
            delivery.fail(AskError::Stopped);
            return;
        };
        if let Err(d) = delivery.deliver_local(&self.start.system, &actor) {
            d.fail(AskError::Stopped);
        }
        // Published after the first message is queued: a direct sender
        // comes after it.
        self.publish(&id, Some(&actor));
        self.entities.insert(id, EntityState::Active(actor));
    }

    fn finish_hand_off_if_done(&mut self, ctx: &mut Context<Self>) {
        if self.handing_off && self.entities.is_empty() {
            let leftovers = Vec::new();
            let _ = self.start.region.tell(ShardTerminated {
                shard: self.start.shard.clone(),
                leftovers,
            });
            ctx.stop();
        }
    }
}

#[handlers]
impl<E: Entity> Shard<E> {
    async fn on_deliver(&mut self, msg: Deliver<E>, ctx: &mut Context<Self>) {
        self.deliver(msg.0, ctx);
    }

    async fn on_terminated(&mut self, msg: Terminated, ctx: &mut Context<Self>) {
        let Some(id) = self.by_uid.remove(&msg.actor.uid()) else {
            return;
        };
        let buffered = match self.entities.remove(&id) {
            Some(EntityState::Stopping(_, buffer)) => buffer,
            Some(EntityState::Active(_)) => {
                // Stopped by itself without passivating: it simply ends;
                // the next message starts it again.
                self.publish(&id, None);
                VecDeque::new()
            }
            None => VecDeque::new(),
        };
        if self.handing_off {
            for d in buffered {
                let _ = self
                    .start
                    .region
                    .tell(Rebuffer(self.start.shard.clone(), d));
            }
            self.finish_hand_off_if_done(ctx);
        } else {
            // Messages that waited for the old incarnation go to a new one.
            for d in buffered {
                self.deliver(d, ctx);
            }
        }
    }

    async fn on_hand_off(&mut self, _msg: ShardHandOff, ctx: &mut Context<Self>) {
        if self.handing_off {
            return;
        }
        self.handing_off = true;
        // No sender reaches an entity directly from here on: every direct
        // send that read an entity has queued its message when this
        // returns, so the stop message comes after it.
        self.start
            .local
            .entities
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        let stop = self.start.factory.stop.clone();
        let ids: Vec<EntityId> = self.entities.keys().cloned().collect();
        for id in ids {
            if let Some(EntityState::Active(actor)) = self.entities.remove(&id) {
                stop(&actor);
                self.entities
                    .insert(id, EntityState::Stopping(actor, VecDeque::new()));
            }
        }
        tracing::debug!(
            "sharding: shard {} of `{}` hands off {} entities",
            self.start.shard,
            E::TYPE_NAME,
            self.entities.len()
        );
        ctx.start_single_timer(
            "handoff-timeout",
            HandOffTimeout,
            self.start.settings.handoff_timeout,
        );
        self.finish_hand_off_if_done(ctx);
    }

    async fn on_hand_off_timeout(&mut self, _msg: HandOffTimeout) {
        tracing::warn!(
            "sharding: {} entities of shard {} of `{}` did not stop within handoff-timeout ({:?}); \
             stopping them",
            self.entities.len(),
            self.start.shard,
            E::TYPE_NAME,
            self.start.settings.handoff_timeout
        );
        for state in self.entities.values() {
            match state {
                EntityState::Active(a) | EntityState::Stopping(a, _) => a.stop(),
            }
        }
    }
}

/// The entity's actor name, when its id is a valid one (else a generated
/// name is used; the id is still what routes to it).
fn actor_name(id: &str) -> Option<String> {
    ActorPath::is_valid_name(id).then(|| id.to_string())
}
