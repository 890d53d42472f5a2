//! The shard: the entities of one shard on this node, started on demand
//! (or, remembered, without a message), watched, passivated, and stopped
//! for a hand-off.
//!
//! Each entity is in one state of its life cycle, as Pekko's `Shard`
//! keeps them (`EntityState`): active (running, reachable directly by
//! senders); passivating (its stop message was sent, for a passivation or
//! a hand-off: messages for it wait here and go to its next incarnation,
//! or back to the region when the shard moves); and, with remembered
//! entities, remembering its start or its stop (the store write is under
//! way; messages wait), remembered but not started yet, and waiting for a
//! restart after it stopped by itself.
//!
//! Automatic passivation runs here too: an idle check on a timer, and a
//! replacement policy that keeps the shard under its share of the
//! region's active-entity limit.

use crate::active_entities::ActiveEntities;
use crate::delivery::{Delivery, StartEntity};
use crate::entity::Entity;
use crate::extractor::{EntityId, ShardId, ShardIdExtractor};
use crate::passivate::Passivate;
use crate::passivation::{self, EntityLimit};
use crate::region::{Rebuffer, Region, ShardTerminated};
use crate::remember::{RememberedEntitiesStore, RETRY_AFTER};
use crate::settings::{EntityRecoveryStrategy, ShardingSettings};
use crate::sharding::EntityFactory;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use troupe_cluster::ddata::DataError;
use troupe_core::prelude::*;
use troupe_core::{ActorPath, AskError, Props};

/// What a shard starts with.
pub(crate) struct ShardStart<E: Entity> {
    /// Its share of the region's active-entity limit, if it has one.
    pub(crate) initial_limit: Option<usize>,
    pub(crate) shard: ShardId,
    pub(crate) local: Arc<ActiveEntities<E>>,
    pub(crate) region: ActorRef<Region<E>>,
    pub(crate) system: ActorSystem,
    pub(crate) factory: EntityFactory<E>,
    pub(crate) settings: ShardingSettings,
    pub(crate) extractor: Arc<dyn ShardIdExtractor>,
    /// The remembered-entities store, when `remember-entities` is on.
    pub(crate) remember: Option<RememberedEntitiesStore>,
}

/// Where one entity is in its life cycle, when it is not active: an active
/// entity (running, reached by senders directly) is one in the shard's
/// published table, `ActiveEntities`, and nowhere else (one entry for
/// the bulk of a shard's entities, not two).
enum EntityState<E: Entity> {
    /// Its stop message was sent (passivation or hand-off); messages wait
    /// for it to terminate.
    Passivating(ActorRef<E>, VecDeque<Delivery<E>>),
    /// Remembered entities: its start is being written; messages wait.
    RememberingStart(VecDeque<Delivery<E>>),
    /// Remembered entities: it was passivated and its stop is being
    /// written; messages that come meanwhile start it again afterwards.
    RememberingStop(VecDeque<Delivery<E>>),
    /// Remembered entities: read from the store, not started yet.
    RememberedButNotCreated,
    /// Remembered entities: it stopped by itself and is restarted after
    /// `entity-restart-backoff` (or by its next message).
    WaitingForRestart,
}

/// Whether a terminated incarnation was active or being stopped.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Liveness {
    Active,
    Passivating,
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

/// Replay the accesses that senders recorded.
#[derive(Message)]
pub(crate) struct DrainTouches;

/// This shard's share of the region's active-entity limit.
#[derive(Message)]
pub(crate) struct ShardsUpdated {
    pub(crate) per_shard: usize,
}

/// Time for the idle check.
#[derive(Message, Clone)]
struct IdleCheck;

/// The remembered entities were read (or could not be).
#[derive(Message)]
struct RememberedLoaded(Result<Vec<EntityId>, DataError>);

/// A batch of remembered starts and stops was written (or not).
#[derive(Message)]
struct RememberWritten {
    started: Vec<EntityId>,
    stopped: Vec<EntityId>,
    result: Result<(), DataError>,
}

/// Try the failed read or write of the remembered entities again.
#[derive(Message, Clone)]
struct RememberRetry;

/// Start the next remembered entities (constant-rate recovery).
#[derive(Message, Clone)]
struct RecoveryTick;

/// Restart an entity that stopped by itself (remembered entities).
#[derive(Message, Clone)]
struct RestartEntity(EntityId);

/// The region's active-entity limit, if its passivation has one.
pub(crate) fn active_entity_limit(settings: &ShardingSettings) -> Option<usize> {
    settings.effective_passivation().active_entity_limit()
}

/// Idle passivation: after how many check epochs without a message an
/// entity is passivated (its last message came at least `idle-timeout`
/// before, and less than `idle-timeout + idle-interval`).
fn idle_epochs(timeout: Duration, interval: Duration) -> u32 {
    let whole = timeout.as_nanos().div_ceil(interval.as_nanos().max(1));
    u32::try_from(whole).unwrap_or(u32::MAX - 1) + 1
}

/// The remembered-entities side of a shard.
struct Remember<E: Entity> {
    store: RememberedEntitiesStore,
    /// The remembered entities are being read: messages wait.
    loading: bool,
    waiting_for_load: VecDeque<Delivery<E>>,
    /// A batch is being written.
    writing: bool,
    to_start: Vec<EntityId>,
    to_stop: Vec<EntityId>,
    /// Remembered entities not started yet (constant-rate recovery).
    recovery: VecDeque<EntityId>,
}

/// A map keyed by entity id (foldhash: several times cheaper than SipHash
/// on short ids, and seeded per map).
pub(crate) type EntityMap<V> = HashMap<EntityId, V, foldhash::fast::RandomState>;

/// The entities of one shard on this node.
pub(crate) struct Shard<E: Entity> {
    start: ShardStart<E>,
    /// The entities that are not active (few: active ones are in
    /// `start.local`).
    entities: EntityMap<EntityState<E>>,
    /// The entities whose actor could not be named by their id (the id is
    /// not a valid actor name), by uid. The others are known by their
    /// actor's name.
    unnamed: HashMap<u64, EntityId>,
    handing_off: bool,
    /// The replacement policy under an active-entity limit.
    limit: Option<Box<dyn EntityLimit>>,
    /// Idle passivation: epochs without a message before passivation.
    idle_epochs: Option<u32>,
    remember: Option<Remember<E>>,
    /// Messages held for the next home during a hand-off.
    leftovers: Vec<Delivery<E>>,
    /// The replacement policy's victims (a buffer kept between entities).
    victims: Vec<EntityId>,
}

impl<E: Entity> Actor for Shard<E> {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        // The route's table is this shard actor's from now on (an earlier
        // one of the same shard may still be stopping).
        self.start.local.attach(ctx.myself().clone());
        // Entities are this shard's only children: one watch for all
        // (a watch per entity would cost each an allocation or three).
        ctx.watch_children();
        // They are unlisted: the active table finds them by path (a reply
        // or a watch from another node addressed to `ctx.myself()` of an
        // entity).
        let local = self.start.local.clone();
        ctx.find_unlisted_children_with(move |name| local.by_actor_name(name).map(|a| a.to_any()));
        let passivation = self.start.settings.effective_passivation();
        if let (Some(timeout), Some(interval)) =
            (passivation.idle_timeout(), passivation.idle_interval())
        {
            self.idle_epochs = Some(idle_epochs(timeout, interval));
            ctx.start_periodic_timer("idle-check", IdleCheck, interval);
        }
        if self.remember.is_some() {
            self.load_remembered(ctx);
        }
    }

    async fn stopping(&mut self, ctx: &mut Context<Self>) {
        // Its entities are unlisted children (see `spawn_entity`): the
        // runtime waits for them to terminate but leaves their stop to
        // the shard. (After a hand-off there are none left. A shard is
        // spawned from a value, so it never restarts: `stopped` has
        // nothing to stop.)
        self.stop_every_entity(ctx);
    }
}

impl<E: Entity> Shard<E> {
    pub(crate) fn new(mut start: ShardStart<E>) -> Self {
        let passivation = start.settings.effective_passivation();
        // Its share; the region sends it again as shards come and go.
        let limit = start
            .initial_limit
            .and_then(|l| passivation::new_entity_limit(&passivation, l));
        let remember = start.remember.take().map(|store| Remember {
            store,
            loading: true,
            waiting_for_load: VecDeque::new(),
            writing: false,
            to_start: Vec::new(),
            to_stop: Vec::new(),
            recovery: VecDeque::new(),
        });
        Shard {
            start,
            entities: EntityMap::default(),
            unnamed: HashMap::new(),
            handing_off: false,
            limit,
            idle_epochs: None,
            remember,
            leftovers: Vec::new(),
            victims: Vec::new(),
        }
    }

    fn spawn_entity(&mut self, id: &EntityId, ctx: &mut Context<Self>) -> Option<ActorRef<E>> {
        // An unlisted child: the shard's tables are its entities'
        // registry, so the runtime keeps none (its names need not be
        // unique: a new incarnation may start while the previous one,
        // which stopped by itself, is still terminating). Named by its id,
        // one factory serves every entity, the cells share what they keep
        // of it, and the name is the id's own allocation.
        let spawned = if ActorPath::is_valid_name(id) {
            let props = Props::from_named_factory(self.start.factory.make.clone());
            ctx.spawn_unlisted(props.with_name(id.clone()))
        } else {
            let make = self.start.factory.make.clone();
            let eid = id.clone();
            ctx.spawn_unlisted(Props::from_factory(move || make.make(&eid)))
                .inspect(|actor| {
                    self.unnamed.insert(actor.uid(), id.clone());
                })
        };
        match spawned {
            Ok(actor) => Some(actor),
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

    /// Stops every incarnation the shard has started and not seen
    /// terminate (the shard itself is stopping).
    fn stop_every_entity(&mut self, ctx: &Context<Self>) {
        for (_, actor) in self.start.local.drain(ctx.myself()) {
            actor.stop();
        }
        self.stop_passivating();
    }

    /// Stops the entities whose stop message was sent and that have not
    /// terminated yet.
    fn stop_passivating(&self) {
        for state in self.entities.values() {
            if let EntityState::Passivating(actor, _) = state {
                actor.stop();
            }
        }
    }

    /// Forgets what the shard knows of an incarnation that ended (or is
    /// done with): its uid if it was unnamed, and its place in the
    /// replacement policy.
    fn forget_incarnation(&mut self, id: &EntityId, uid: u64) {
        if !self.unnamed.is_empty() {
            self.unnamed.remove(&uid);
        }
        if let Some(limit) = &mut self.limit {
            limit.entity_terminated(id);
        }
    }

    /// Starts an incarnation of `id` and gives it `first` (the messages
    /// that waited for it, in order; none for a remembered entity).
    fn start_entity(
        &mut self,
        id: &EntityId,
        first: impl IntoIterator<Item = Delivery<E>>,
        ctx: &mut Context<Self>,
    ) {
        let Some(actor) = self.spawn_entity(id, ctx) else {
            for d in first {
                d.fail(AskError::Stopped);
            }
            return;
        };
        for d in first {
            if let Err(d) = d.deliver_local(&self.start.system, &actor) {
                d.fail(AskError::Stopped);
            }
        }
        // Published after the first messages are queued: a direct sender
        // comes after them.
        self.start.local.insert(id.clone(), actor);
        self.entity_created(id);
    }

    /// Stops an active entity for a passivation: no sender reaches it
    /// from here on, and what reaches the shard for it waits for its next
    /// incarnation.
    fn passivate(&mut self, id: &EntityId) {
        let Some(actor) = self.start.local.remove(id) else {
            return;
        };
        tracing::trace!(
            "sharding: passivating entity `{id}` of `{}` in shard {}",
            E::TYPE_NAME,
            self.start.shard
        );
        (self.start.factory.stop)(&actor);
        if actor.is_terminated() && self.remember.is_none() {
            // It stopped within the call (an idle entity, stopped in
            // place): nothing can have waited for it, so it is done with
            // here, and its `Terminated` will find nothing left to do.
            self.forget_incarnation(id, actor.uid());
            return;
        }
        self.entities
            .insert(id.clone(), EntityState::Passivating(actor, VecDeque::new()));
    }

    fn passivate_all(&mut self, ids: Vec<EntityId>) {
        for id in ids {
            self.passivate(&id);
        }
    }

    /// Replays the accesses that senders recorded into the replacement
    /// policy.
    fn drain_touches(&mut self) {
        let Some(limit) = &mut self.limit else {
            return;
        };
        for id in self.start.local.take_touches() {
            limit.entity_touched(&id);
        }
    }

    /// Lets the replacement policy make room for a new active entity
    /// (possibly by passivating that one, if its admission filter says
    /// so).
    fn entity_created(&mut self, id: &EntityId) {
        if self.limit.is_none() {
            return;
        }
        self.drain_touches();
        if let Some(limit) = &mut self.limit {
            let mut victims = std::mem::take(&mut self.victims);
            limit.entity_created(id, &mut victims);
            for victim in victims.drain(..) {
                self.passivate(&victim);
            }
            // Kept for the next one: no allocation per new entity.
            self.victims = victims;
        }
    }

    /// Keeps a message for the shard's next home (the shard is moving).
    /// Everything the shard holds was sent before what the region buffers
    /// once the hand-off began, so the region puts these first when the
    /// shard terminates.
    fn hold_for_new_home(&mut self, delivery: Delivery<E>) {
        self.leftovers.push(delivery);
    }

    /// Delivers to the entity, starting it if it is not running.
    fn deliver(&mut self, delivery: Delivery<E>, ctx: &mut Context<Self>) {
        if self.handing_off {
            return self.hold_for_new_home(delivery);
        }
        if let Some(r) = &mut self.remember {
            if r.loading {
                r.waiting_for_load.push_back(delivery);
                return;
            }
        }
        let id = delivery.entity.clone();
        let mut delivery = delivery;
        if let Some(actor) = self.start.local.get_for_delivery(&id) {
            match delivery.deliver_local(&self.start.system, &actor) {
                Ok(()) => {
                    if let Some(limit) = &mut self.limit {
                        limit.entity_touched(&id);
                    }
                    return;
                }
                // It stopped by itself; its Terminated is on the way.
                // Start the next incarnation now, in order.
                Err(d) => delivery = d,
            }
            self.unnamed.remove(&actor.uid());
            self.start.local.remove(&id);
            if let Some(limit) = &mut self.limit {
                limit.entity_terminated(&id);
            }
            // Remembered already (if remembering): start it at once.
            return self.start_entity(&id, [delivery], ctx);
        }
        match self.entities.get_mut(&id) {
            Some(
                EntityState::Passivating(_, buffer)
                | EntityState::RememberingStart(buffer)
                | EntityState::RememberingStop(buffer),
            ) => {
                buffer.push_back(delivery);
                return;
            }
            Some(EntityState::RememberedButNotCreated | EntityState::WaitingForRestart) => {
                // Remembered already: start it at once.
                self.entities.remove(&id);
                return self.start_entity(&id, [delivery], ctx);
            }
            None => {}
        }
        if let Some(r) = &mut self.remember {
            // Started only once it is remembered.
            r.to_start.push(id.clone());
            self.entities.insert(
                id,
                EntityState::RememberingStart(VecDeque::from([delivery])),
            );
            return self.flush_remember(ctx);
        }
        self.start_entity(&id, [delivery], ctx);
    }

    /// Reads the remembered entities (again, after a failure).
    fn load_remembered(&mut self, ctx: &mut Context<Self>) {
        let Some(r) = &self.remember else {
            return;
        };
        let store = r.store.clone();
        let me = ctx.myself().clone();
        troupe_core::rt::spawn(async move {
            let result = store.load().await;
            let _ = me.tell(RememberedLoaded(result));
        });
    }

    /// Writes the pending remembered starts and stops as one batch, unless
    /// a batch is being written (then they go in the next one: starting
    /// many entities costs a few writes, not one each).
    fn flush_remember(&mut self, ctx: &mut Context<Self>) {
        let Some(r) = &mut self.remember else {
            return;
        };
        if r.writing || r.loading || (r.to_start.is_empty() && r.to_stop.is_empty()) {
            return;
        }
        r.writing = true;
        let started = std::mem::take(&mut r.to_start);
        let stopped = std::mem::take(&mut r.to_stop);
        let store = r.store.clone();
        let me = ctx.myself().clone();
        troupe_core::rt::spawn(async move {
            let result = store.update(&started, &stopped).await;
            let _ = me.tell(RememberWritten {
                started,
                stopped,
                result,
            });
        });
    }

    /// Starts remembered entities that are not running yet: all of them,
    /// or the next few (constant-rate recovery).
    fn recover(&mut self, count: usize, ctx: &mut Context<Self>) {
        let mut started = 0;
        while started < count {
            let Some(id) = self.remember.as_mut().and_then(|r| r.recovery.pop_front()) else {
                ctx.cancel_timer("recovery");
                return;
            };
            if let Some(EntityState::RememberedButNotCreated) = self.entities.get(&id) {
                self.entities.remove(&id);
                self.start_entity(&id, [], ctx);
                started += 1;
            }
        }
    }

    /// The entity whose current incarnation is `actor` (none for an
    /// incarnation that is gone already).
    fn entity_of(&self, actor: &AnyActorRef) -> Option<(EntityId, Liveness)> {
        let uid = actor.uid();
        let name;
        let id: &str = match self.unnamed.get(&uid) {
            Some(id) => id,
            None => {
                name = actor.name();
                &name
            }
        };
        if let Some((id, active)) = self.start.local.entry(id) {
            return (active.uid() == uid).then_some((id, Liveness::Active));
        }
        match self.entities.get_key_value(id)? {
            (id, EntityState::Passivating(a, _)) if a.uid() == uid => {
                Some((id.clone(), Liveness::Passivating))
            }
            _ => None,
        }
    }

    fn finish_hand_off_if_done(&mut self, ctx: &mut Context<Self>) {
        let stopping = self
            .entities
            .values()
            .any(|e| matches!(e, EntityState::Passivating(..)));
        if self.handing_off && !stopping {
            let _ = self.start.region.tell(ShardTerminated {
                shard: self.start.shard.clone(),
                leftovers: std::mem::take(&mut self.leftovers),
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
        let Some((id, liveness)) = self.entity_of(&msg.actor) else {
            return;
        };
        self.forget_incarnation(&id, msg.actor.uid());
        if liveness == Liveness::Active {
            self.start.local.remove(&id);
            // Stopped by itself without passivating: remembered entities
            // must run, so it comes back; others simply end (the next
            // message starts them again).
            if !self.handing_off && self.remember.is_some() {
                let backoff = self.start.settings.entity_restart_backoff;
                tracing::debug!(
                    "sharding: entity `{id}` of `{}` stopped by itself; restarting it in \
                     {backoff:?}",
                    E::TYPE_NAME
                );
                ctx.start_single_timer(format!("restart-{id}"), RestartEntity(id.clone()), backoff);
                self.entities.insert(id, EntityState::WaitingForRestart);
            }
            return;
        }
        match self.entities.remove(&id) {
            Some(EntityState::Passivating(_, buffered)) => {
                if self.handing_off {
                    for d in buffered {
                        self.hold_for_new_home(d);
                    }
                } else if let Some(r) = &mut self.remember {
                    // Passivated: forgotten, unless messages came meanwhile
                    // (then it starts again once its stop is written).
                    r.to_stop.push(id.clone());
                    self.entities
                        .insert(id, EntityState::RememberingStop(buffered));
                    self.flush_remember(ctx);
                } else if !buffered.is_empty() {
                    // Messages that waited for the old incarnation go to a
                    // new one.
                    self.start_entity(&id, buffered, ctx);
                }
            }
            Some(other) => {
                self.entities.insert(id, other);
            }
            None => {}
        }
        if self.handing_off {
            self.finish_hand_off_if_done(ctx);
        }
    }

    async fn on_hand_off(&mut self, _msg: ShardHandOff, ctx: &mut Context<Self>) {
        if self.handing_off {
            return;
        }
        self.handing_off = true;
        ctx.cancel_timer("recovery");
        // No sender reaches an entity directly from here on: every direct
        // send that read an entity has queued its message when this
        // returns, so the stop message comes after it.
        let active = self.start.local.drain(ctx.myself());
        if let Some(r) = &mut self.remember {
            let waiting = std::mem::take(&mut r.waiting_for_load);
            r.recovery.clear();
            for d in waiting {
                self.hold_for_new_home(d);
            }
        }
        // Entities not running are forgotten here: their messages are held
        // for the new home (as `hold_for_new_home` does), where the
        // entities are remembered or started by them. Those already
        // stopping stay until they have terminated.
        let leftovers = &mut self.leftovers;
        self.entities.retain(|_, state| match state {
            EntityState::Passivating(..) => true,
            EntityState::RememberingStart(buffered) | EntityState::RememberingStop(buffered) => {
                leftovers.extend(buffered.drain(..));
                false
            }
            EntityState::RememberedButNotCreated | EntityState::WaitingForRestart => false,
        });
        let stop = self.start.factory.stop.clone();
        for (id, actor) in active {
            stop(&actor);
            self.entities
                .insert(id, EntityState::Passivating(actor, VecDeque::new()));
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
        self.stop_passivating();
    }

    async fn on_passivate(&mut self, msg: Passivate) {
        let Some((id, liveness)) = self.entity_of(&msg.entity) else {
            return;
        };
        if self.handing_off {
            // Its stop message is already on the way.
            return;
        }
        if liveness == Liveness::Active {
            self.passivate(&id);
        }
    }

    async fn on_drain_touches(&mut self, _msg: DrainTouches) {
        self.drain_touches();
    }

    async fn on_shards_updated(&mut self, msg: ShardsUpdated) {
        self.drain_touches();
        if let Some(limit) = &mut self.limit {
            let victims = limit.set_limit(msg.per_shard);
            self.passivate_all(victims);
        }
    }

    async fn on_idle_check(&mut self, _msg: IdleCheck) {
        let Some(epochs) = self.idle_epochs else {
            return;
        };
        if self.handing_off {
            return;
        }
        let now = self.start.local.advance_epoch();
        let idle = self.start.local.idle_since(now, epochs);
        if !idle.is_empty() {
            tracing::debug!(
                "sharding: passivating {} idle entities of `{}` in shard {}",
                idle.len(),
                E::TYPE_NAME,
                self.start.shard
            );
        }
        self.passivate_all(idle);
    }

    async fn on_remembered_loaded(&mut self, msg: RememberedLoaded, ctx: &mut Context<Self>) {
        let ids = match msg.0 {
            Ok(ids) => ids,
            Err(e) => {
                tracing::warn!(
                    "sharding: shard {} of `{}` could not read its remembered entities ({e}); \
                     retrying in {RETRY_AFTER:?}",
                    self.start.shard,
                    E::TYPE_NAME
                );
                ctx.start_single_timer("remember-retry", RememberRetry, RETRY_AFTER);
                return;
            }
        };
        let Some(r) = &mut self.remember else {
            return;
        };
        if !r.loading {
            return;
        }
        r.loading = false;
        let waiting = std::mem::take(&mut r.waiting_for_load);
        if self.handing_off {
            for d in waiting {
                self.hold_for_new_home(d);
            }
            return;
        }
        // Entities that the shard-id extractor now puts in another shard
        // move there: forgotten here, started (and remembered) there.
        let mut moved = Vec::new();
        let mut here = 0;
        for id in ids {
            if self.start.extractor.shard_id(&id) != self.start.shard {
                moved.push(id);
            } else if !self.entities.contains_key(&id) && !self.start.local.contains(&id) {
                self.entities
                    .insert(id.clone(), EntityState::RememberedButNotCreated);
                r.recovery.push_back(id);
                here += 1;
            }
        }
        tracing::debug!(
            "sharding: shard {} of `{}` remembers {here} entities",
            self.start.shard,
            E::TYPE_NAME
        );
        if !moved.is_empty() {
            tracing::info!(
                "sharding: {} remembered entities of shard {} of `{}` belong to other shards now \
                 (the shard-id extractor changed); moving them",
                moved.len(),
                self.start.shard,
                E::TYPE_NAME
            );
            for id in &moved {
                let shard = self.start.extractor.shard_id(id);
                let _ = self.start.region.tell(Rebuffer(
                    shard,
                    Delivery::new(id.clone(), Box::new(StartEntity)),
                ));
            }
            r.to_stop.extend(moved);
        }
        match self.start.settings.entity_recovery_strategy {
            EntityRecoveryStrategy::All => self.recover(usize::MAX, ctx),
            EntityRecoveryStrategy::Constant {
                frequency,
                number_of_entities,
            } => {
                self.recover(number_of_entities, ctx);
                if self
                    .remember
                    .as_ref()
                    .is_some_and(|r| !r.recovery.is_empty())
                {
                    ctx.start_periodic_timer("recovery", RecoveryTick, frequency);
                }
            }
        }
        for d in waiting {
            self.deliver(d, ctx);
        }
        self.flush_remember(ctx);
    }

    async fn on_remember_written(&mut self, msg: RememberWritten, ctx: &mut Context<Self>) {
        let RememberWritten {
            started,
            stopped,
            result,
        } = msg;
        let Some(r) = &mut self.remember else {
            return;
        };
        r.writing = false;
        if let Err(e) = result {
            tracing::warn!(
                "sharding: shard {} of `{}` could not remember {} started and {} stopped entities \
                 ({e}); retrying in {RETRY_AFTER:?} (their messages wait)",
                self.start.shard,
                E::TYPE_NAME,
                started.len(),
                stopped.len()
            );
            // The same batch first, then what came meanwhile.
            r.to_start.splice(0..0, started);
            r.to_stop.splice(0..0, stopped);
            ctx.start_single_timer("remember-retry", RememberRetry, RETRY_AFTER);
            return;
        }
        for id in started {
            if let Some(EntityState::RememberingStart(buffered)) = self.entities.remove(&id) {
                if self.handing_off {
                    for d in buffered {
                        self.hold_for_new_home(d);
                    }
                } else {
                    self.start_entity(&id, buffered, ctx);
                }
            }
        }
        for id in stopped {
            match self.entities.remove(&id) {
                // Messages came while its stop was written: it starts
                // again, remembered again.
                Some(EntityState::RememberingStop(buffered)) if !buffered.is_empty() => {
                    if self.handing_off {
                        for d in buffered {
                            self.hold_for_new_home(d);
                        }
                    } else {
                        if let Some(r) = &mut self.remember {
                            r.to_start.push(id.clone());
                        }
                        self.entities
                            .insert(id, EntityState::RememberingStart(buffered));
                    }
                }
                Some(EntityState::RememberingStop(_)) | None => {}
                Some(other) => {
                    self.entities.insert(id, other);
                }
            }
        }
        self.flush_remember(ctx);
    }

    async fn on_remember_retry(&mut self, _msg: RememberRetry, ctx: &mut Context<Self>) {
        match &self.remember {
            Some(r) if r.loading => self.load_remembered(ctx),
            Some(_) => self.flush_remember(ctx),
            None => {}
        }
    }

    async fn on_recovery_tick(&mut self, _msg: RecoveryTick, ctx: &mut Context<Self>) {
        if self.handing_off {
            return;
        }
        let count = match self.start.settings.entity_recovery_strategy {
            EntityRecoveryStrategy::Constant {
                number_of_entities, ..
            } => number_of_entities,
            EntityRecoveryStrategy::All => usize::MAX,
        };
        self.recover(count, ctx);
    }

    async fn on_restart_entity(&mut self, msg: RestartEntity, ctx: &mut Context<Self>) {
        if self.handing_off {
            return;
        }
        if let Some(EntityState::WaitingForRestart) = self.entities.get(&msg.0) {
            self.entities.remove(&msg.0);
            self.start_entity(&msg.0, [], ctx);
        }
    }
}
