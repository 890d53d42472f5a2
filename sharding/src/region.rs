//! The shard region: one per entity type per node. It knows where each
//! shard lives, hosts the local shards, buffers messages for shards whose
//! home is unknown or being handed off, and talks to the coordinator.
//!
//! The hot path does not go through the region actor. The region
//! publishes each shard's home in a `ShardRoute` that senders read
//! without contention (read locks, written only when the home changes): a
//! message for an active local entity is queued straight into its mailbox
//! under one read lock (the shard's table of active entities, open while
//! the shard is here), and one for a remote shard is encoded once and sent
//! to that node's region. Only messages for shards that are unknown, being
//! allocated or handed off, or for entities that are not running, go
//! through the region (and the shard) actors.
//!
//! Order per sender is kept across the two paths by a count of messages in
//! flight through the actors per shard: while it is not zero, senders take
//! the actor path too, so a direct message can never overtake one that
//! went the slow way.

use crate::active_entities::{ActiveEntities, Missed};
use crate::allocation::RegionId;
use crate::coordinator::ShardCoordinator;
use crate::delivery::{deliver_bytes, Deliveries, Delivery, Encoded, Typed, Via};
use crate::entity::Entity;
use crate::extractor::{EntityId, ShardId, ShardIdExtractor};
use crate::protocol::*;
use crate::queries::{
    CurrentShardRegionState, GetRegionState, GetRegionStats, ShardRegionStats, ShardState,
};
use crate::remember::RememberedEntitiesStore;
use crate::settings::ShardingSettings;
use crate::shard::{self, Shard, ShardHandOff, ShardStart, ShardsUpdated};
use crate::shard_envelope;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Instant;
use troupe_cluster::ddata::Replicator;
use troupe_cluster::singleton::SingletonProxy;
use troupe_cluster::{Cluster, ClusterEvent, CurrentClusterState};
use troupe_core::prelude::*;
use troupe_core::{
    rt, AskError, DeferActivations, DeliverError, InboundMessage, LogLimit, Props, Replier,
    TellError,
};

/// The region actor's name under `/system`.
pub(crate) fn region_name(type_name: &str) -> String {
    format!("sharding-{type_name}")
}

/// Where one shard lives, as senders see it.
pub(crate) struct ShardRoute<E: Entity> {
    pub(crate) shard: ShardId,
    home: RwLock<Home<E>>,
    /// The kind of `home` (`KIND_*`), read without the lock to choose a
    /// path; each path then checks under its own lock.
    kind: AtomicU8,
    /// The shard's active entities when it is hosted here (open only
    /// then), for the route's whole life.
    pub(crate) local: Arc<ActiveEntities<E>>,
    /// Messages of this shard travelling through the region actor; while
    /// not zero, senders send through it too (they would overtake them).
    via_region: AtomicUsize,
    /// Messages of this shard travelling through the local shard actor;
    /// while not zero (or `via_region` is not), senders do not send to
    /// entities directly.
    via_shard: AtomicUsize,
}

/// A shard's home.
pub(crate) enum Home<E: Entity> {
    /// Not known, being allocated, or being handed off: buffer.
    Unknown,
    /// Here, in this shard actor (its entities in the route's table).
    Local(ActorRef<Shard<E>>),
    /// In the region of another node.
    Remote(ActorRef<Region<E>>),
}

const KIND_UNKNOWN: u8 = 0;
const KIND_LOCAL: u8 = 1;
const KIND_REMOTE: u8 = 2;

impl<E: Entity> ShardRoute<E> {
    fn new(shard: ShardId, record_touches: bool) -> Self {
        ShardRoute {
            shard,
            home: RwLock::new(Home::Unknown),
            kind: AtomicU8::new(KIND_UNKNOWN),
            local: Arc::new(ActiveEntities::new(record_touches)),
            via_region: AtomicUsize::new(0),
            via_shard: AtomicUsize::new(0),
        }
    }

    fn counter(&self, via: Via) -> &AtomicUsize {
        match via {
            Via::Region => &self.via_region,
            Via::Shard => &self.via_shard,
        }
    }

    pub(crate) fn enter(&self, via: Via) {
        self.counter(via).fetch_add(1, Ordering::AcqRel);
    }

    pub(crate) fn leave(&self, via: Via) {
        self.counter(via).fetch_sub(1, Ordering::AcqRel);
    }

    /// Nothing of this shard travels through the actors: a sender may
    /// send to an entity directly.
    fn quiet(&self) -> bool {
        self.via_region.load(Ordering::Acquire) == 0 && self.via_shard.load(Ordering::Acquire) == 0
    }

    /// Changes the home. Takes the write locks (of the table when the
    /// shard leaves, and of the home), so every direct send that read the
    /// old home has finished queueing when this returns. One lock at a
    /// time: a handler run inline by a send under one of them may need the
    /// other. In between, senders take the path through the shard actor,
    /// which is right for both homes.
    fn set_home(&self, home: Home<E>) {
        let kind = match &home {
            Home::Unknown => KIND_UNKNOWN,
            Home::Local(_) => KIND_LOCAL,
            Home::Remote(_) => KIND_REMOTE,
        };
        let local = matches!(home, Home::Local(_));
        if !local {
            self.local.close();
        }
        *self.home.write().unwrap_or_else(|e| e.into_inner()) = home;
        if local {
            self.local.open();
        }
        self.kind.store(kind, Ordering::Release);
    }

    fn read_home(&self) -> std::sync::RwLockReadGuard<'_, Home<E>> {
        self.home.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The region of the node that hosts the shard, if that is another
    /// node.
    pub(crate) fn remote_home(&self) -> Option<ActorRef<Region<E>>> {
        match &*self.read_home() {
            Home::Remote(region) => Some(region.clone()),
            Home::Local(_) | Home::Unknown => None,
        }
    }
}

/// Why a message did not take the direct path.
pub(crate) enum Direct<M: Message> {
    /// It must go through the region (with its reply channel).
    Slow(M, Option<Replier<M::Reply>>),
    /// It was refused (a tell to a node whose queue is full, say).
    Refused(crate::error::ShardingTellError<M>),
}

/// What the senders of one entity type on this node share with its region.
pub(crate) struct RegionShared<E: Entity> {
    pub(crate) system: ActorSystem,
    pub(crate) extractor: Arc<dyn ShardIdExtractor>,
    pub(crate) settings: ShardingSettings,
    /// Where remembered entities are kept.
    pub(crate) replicator: Replicator,
    routes: RwLock<HashMap<ShardId, Arc<ShardRoute<E>>, foldhash::fast::RandomState>>,
    pub(crate) region: OnceLock<ActorRef<Region<E>>>,
    /// How each of the entity type's messages reaches an entity still
    /// encoded (looked up once, read without a lock).
    pub(crate) deliveries: Deliveries<E>,
    /// Messages in the region's buffers (checked by senders against
    /// `buffer_size`).
    buffered: AtomicUsize,
    /// Notified when the region frees places in its buffer (for
    /// `EntityRef::send`, which waits for room).
    buffer_room: event_listener::Event,
    /// Messages refused because the buffer was full.
    pub(crate) dropped: AtomicU64,
    /// Messages sent through the region actor (not the direct path).
    pub(crate) via_region: AtomicU64,
    /// Messages sent to a local shard actor without the region.
    pub(crate) via_shard: AtomicU64,
    /// Times a message, hand-off acknowledgement or flush marker found the
    /// queue to its node full and waited in the region.
    pub(crate) queue_full_waits: AtomicU64,
    /// Rate limit of the buffer-full log line.
    drop_log: LogLimit,
}

/// What a connection's reader has looked up for this entity type, kept by
/// the reader: shard routes (never removed from the region's table, so
/// none goes stale), by their ids' bytes as they come from the network,
/// and the last route and manifest it used (a stream of messages to one
/// shard, or of one message type, then costs a comparison, not a hash).
pub(crate) struct ReaderCache<E: Entity> {
    /// Where each shard's route is in `routes`.
    index: HashMap<Box<[u8]>, usize, foldhash::fast::RandomState>,
    routes: Vec<Arc<ShardRoute<E>>>,
    last_route: usize,
    /// The last manifest's place in the region's `Deliveries`.
    last_manifest: usize,
}

impl<E: Entity> Default for ReaderCache<E> {
    fn default() -> Self {
        ReaderCache {
            index: HashMap::default(),
            routes: Vec::new(),
            last_route: 0,
            last_manifest: 0,
        }
    }
}

/// Why the region refused a message.
pub(crate) enum Refused {
    BufferFull,
    RegionStopped,
}

impl<E: Entity> RegionShared<E> {
    pub(crate) fn new(
        system: ActorSystem,
        extractor: Arc<dyn ShardIdExtractor>,
        settings: ShardingSettings,
        replicator: Replicator,
    ) -> Self {
        RegionShared {
            system,
            extractor,
            settings,
            replicator,
            routes: RwLock::new(HashMap::default()),
            region: OnceLock::new(),
            deliveries: Deliveries::default(),
            buffered: AtomicUsize::new(0),
            buffer_room: event_listener::Event::new(),
            dropped: AtomicU64::new(0),
            via_region: AtomicU64::new(0),
            via_shard: AtomicU64::new(0),
            queue_full_waits: AtomicU64::new(0),
            drop_log: LogLimit::per_second(),
        }
    }

    /// The route of `shard` (created on first use; routes are never
    /// removed: there are at most as many as shards).
    pub(crate) fn route(&self, shard: &str) -> Arc<ShardRoute<E>> {
        if let Some(r) = self
            .routes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(shard)
        {
            return r.clone();
        }
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = routes.get(shard) {
            return r.clone();
        }
        let shard = ShardId::from(shard);
        let record_touches = shard::active_entity_limit(&self.settings).is_some();
        let route = Arc::new(ShardRoute::new(shard.clone(), record_touches));
        routes.insert(shard, route.clone());
        route
    }

    /// The route of `shard` (its id's bytes, from the network) through a
    /// connection's own cache (no lock, no reference count written, once
    /// the shard was seen on it); an error if a shard id new to the cache
    /// is not UTF-8.
    #[inline]
    fn cached_route<'c>(
        &self,
        cache: &'c mut ReaderCache<E>,
        shard: &[u8],
    ) -> Result<&'c Arc<ShardRoute<E>>, String> {
        let last = cache.last_route;
        if cache
            .routes
            .get(last)
            .is_some_and(|r| r.shard.as_bytes() == shard)
        {
            return Ok(&cache.routes[last]);
        }
        let at = match cache.index.get(shard) {
            Some(&at) => at,
            None => {
                let route = self.route(shard_envelope::text(shard, "shard id")?);
                cache.index.insert(shard.into(), cache.routes.len());
                cache.routes.push(route);
                cache.routes.len() - 1
            }
        };
        cache.last_route = at;
        Ok(&cache.routes[at])
    }

    /// The route of the entity's shard.
    pub(crate) fn route_of(&self, entity: &str) -> Arc<ShardRoute<E>> {
        self.route(&self.extractor.shard_id(entity))
    }

    /// Sends a typed message to an entity directly when its home is known
    /// and nothing of its shard is in flight through the actors; hands the
    /// message back when it must go through the region. No allocation on
    /// this path for a local entity. `queued`: a remote home's frame goes
    /// through the connection's queue always (`EntityRef::send`).
    pub(crate) fn try_direct<M>(
        &self,
        route: &ShardRoute<E>,
        entity: &EntityId,
        msg: M,
        reply: Option<Replier<M::Reply>>,
        queued: bool,
    ) -> Result<(), Direct<M>>
    where
        E: Handler<M>,
        M: Message + serde::Serialize + serde::de::DeserializeOwned,
        M::Reply: serde::Serialize + serde::de::DeserializeOwned,
    {
        if !route.quiet() {
            return Err(Direct::Slow(msg, reply));
        }
        let (msg, reply) = match route.kind.load(Ordering::Acquire) {
            KIND_LOCAL => {
                // An ask may run the entity on this thread: only after the
                // table's lock is released (its handler may send to the
                // shard too).
                let _batch = reply.as_ref().and_then(|_| DeferActivations::begin());
                let sent = route
                    .local
                    .send(&**entity, (msg, reply), |actor, (msg, reply)| {
                        // An error: it stopped by itself; the shard restarts it.
                        actor
                            .forward(msg, reply, None)
                            .map_err(|e| (e.error.into_message(), e.reply))
                    });
                match sent {
                    Ok(()) => return Ok(()),
                    Err(Missed::Inactive((msg, reply))) => return Err(Direct::Slow(msg, reply)),
                    // The shard is leaving, or left and went elsewhere.
                    Err(Missed::Closed(item)) => item,
                }
            }
            KIND_REMOTE => (msg, reply),
            _ => return Err(Direct::Slow(msg, reply)),
        };
        match &*route.read_home() {
            Home::Remote(region) => Typed { msg, reply }
                .send_remote(&self.system, entity, &route.shard, region, queued)
                .map_err(Direct::Refused),
            Home::Local(_) | Home::Unknown => Err(Direct::Slow(msg, reply)),
        }
    }

    /// Sends a message through the region (which buffers it while the
    /// shard's home is unknown).
    /// `from_remote`: it came from another node (see `Route`).
    pub(crate) fn send_slow(
        &self,
        route: &Arc<ShardRoute<E>>,
        mut delivery: Delivery<E>,
        from_remote: bool,
    ) -> Result<(), (Refused, Delivery<E>)> {
        // A message for a shard whose home is unknown will be buffered:
        // it takes its place in the buffer now, before it reaches the
        // region actor. (Checking only the region's count let a burst of
        // sends all pass before the region had counted any of them, so
        // `buffer-size` was not a limit.) The region gives the place back
        // when it takes the message from its mailbox.
        // A local shard: straight to the shard actor (the region actor,
        // one for every shard, is not in the way), unless messages of the
        // shard are in flight through the region (this one would overtake
        // them).
        {
            let home = route.read_home();
            if let Home::Local(shard) = &*home {
                if route.via_region.load(Ordering::Acquire) == 0 {
                    delivery.count_in(route, Via::Shard);
                    match shard.tell(crate::shard::Deliver(delivery)) {
                        Ok(()) => {
                            self.via_shard.fetch_add(1, Ordering::Relaxed);
                            return Ok(());
                        }
                        // It stopped (a hand-off ended): the region
                        // knows the shard's next home.
                        Err(e) => delivery = e.into_message().0,
                    }
                }
            }
        }
        // A local sender's message takes its place now whatever the home:
        // one for a known home also waits in the region while the shard's
        // earlier messages are in flight or held for a full queue, and a
        // burst of them all passed a check without a place. A message from
        // another node was accepted there already: it is never refused
        // here (the buffer may go over its size for it).
        let reserved = !from_remote || matches!(&*route.read_home(), Home::Unknown);
        let full = reserved && {
            let before = self.buffered.fetch_add(1, Ordering::AcqRel);
            let full = before >= self.settings.buffer_size && !from_remote;
            if full {
                self.buffered.fetch_sub(1, Ordering::AcqRel);
            }
            full
        };
        if full {
            self.note_overflow();
            return Err((Refused::BufferFull, delivery));
        }
        let Some(region) = self.region.get() else {
            if reserved {
                self.buffered.fetch_sub(1, Ordering::AcqRel);
            }
            return Err((Refused::RegionStopped, delivery));
        };
        delivery.count_in(route, Via::Region);
        self.via_region.fetch_add(1, Ordering::Relaxed);
        region
            .tell(Route {
                route: route.clone(),
                delivery,
                reserved,
                from_remote,
            })
            .map_err(|e| {
                if reserved {
                    self.buffered.fetch_sub(1, Ordering::AcqRel);
                }
                (Refused::RegionStopped, e.into_message().delivery)
            })
    }

    /// An entity's message from another node, read on the connection's
    /// reader: straight to its entity when the entity runs here and
    /// nothing of its shard is in flight through the actors (as a local
    /// sender's message would go), else through the region (the shard may
    /// have moved again, or the entity must be started).
    /// `cache` is the reader's own (see `ClusterSharding::start_region`).
    pub(crate) fn receive_remote(
        &self,
        m: InboundMessage<'_>,
        cache: &mut ReaderCache<E>,
    ) -> Result<(), DeliverError> {
        let InboundMessage {
            bytes, mut reply, ..
        } = m;
        let undecodable = |reply: Option<Replier<troupe_core::EncodedReply>>, why: String| {
            if let Some(r) = reply {
                r.fail(AskError::Remote(format!(
                    "the message did not decode: {why}"
                )));
            }
            Err(DeliverError::Undecodable(why))
        };
        let env = match shard_envelope::read(bytes) {
            Ok(env) => env,
            Err(why) => return undecodable(reply, why),
        };
        // The manifest as text: a registered one's own string, else
        // validated.
        let (manifest, delivery) = match self.deliveries.position(env.manifest, cache.last_manifest)
        {
            Some(at) => {
                cache.last_manifest = at;
                let (m, d) = self.deliveries.at(at);
                (m, Some(d))
            }
            None => match shard_envelope::text(env.manifest, "manifest") {
                Ok(m) => (m, None),
                Err(why) => return undecodable(reply, why),
            },
        };
        let route = match self.cached_route(cache, env.shard) {
            Ok(route) => route,
            Err(why) => return undecodable(reply, why),
        };
        if route.quiet() && route.kind.load(Ordering::Acquire) == KIND_LOCAL {
            // The reader has a batch open already; `begin` only checks.
            // (The route is the reader's own, not used under the table's
            // lock: decoding a message may look up routes, for an
            // `EntityRef` inside it.)
            let _batch = DeferActivations::begin();
            let system = &self.system;
            let sent = route.local.send(env.entity, reply, |actor, reply| {
                deliver_bytes(system, delivery, actor, manifest, env.payload, reply)
            });
            match sent {
                Ok(()) => return Ok(()),
                Err(Missed::Closed(r) | Missed::Inactive(r)) => reply = r,
            }
        }
        let entity = match shard_envelope::text(env.entity, "entity id") {
            Ok(entity) => entity,
            Err(why) => return undecodable(reply, why),
        };
        let delivery = Delivery::new(
            EntityId::from(entity),
            Box::new(Encoded {
                manifest: manifest.to_string(),
                payload: env.payload.to_vec(),
                reply,
            }),
        );
        if let Err((why, d)) = self.send_slow(route, delivery, true) {
            // A full buffer is logged and counted by `send_slow`.
            d.fail(match why {
                Refused::BufferFull => AskError::MailboxFull,
                Refused::RegionStopped => AskError::Stopped,
            });
        }
        Ok(())
    }

    /// Gives back `n` places in the buffer (the region took messages out
    /// of it), and wakes the senders waiting for room.
    fn release_places(&self, n: usize) {
        if n > 0 {
            self.buffered.fetch_sub(n, Ordering::AcqRel);
            self.buffer_room.notify(usize::MAX);
        }
    }

    /// Waits until the buffer has room for a local sender's message (it
    /// may be taken by another sender first: try, and wait again).
    pub(crate) async fn buffer_room(&self) {
        let has_room = || self.buffered.load(Ordering::Acquire) < self.settings.buffer_size;
        if has_room() {
            return;
        }
        // Listen first, then look again: a place freed in between is not
        // missed.
        let room = self.buffer_room.listen();
        if has_room() {
            return;
        }
        room.await;
    }

    /// Counts a refused message and logs it (at most once a second).
    pub(crate) fn note_overflow(&self) {
        let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if self.drop_log.allow() {
            tracing::warn!(
                "sharding: the region of `{}` has {} messages buffered (buffer-size {}); \
                 {n} messages refused so far",
                E::TYPE_NAME,
                self.buffered.load(Ordering::Relaxed),
                self.settings.buffer_size
            );
        }
    }
}

/// A message that could not take the direct path (local, never on the
/// wire); with whether it holds a place in the buffer (see
/// `RegionShared::send`).
#[derive(Message)]
pub(crate) struct Route<E: Entity> {
    pub(crate) route: Arc<ShardRoute<E>>,
    pub(crate) delivery: Delivery<E>,
    /// It holds a place in the buffer.
    pub(crate) reserved: bool,
    /// It came from another node: while a shard that moved here waits for
    /// the messages its old home held (which come from there), those go
    /// to the shard ahead of the local senders' that wait here.
    pub(crate) from_remote: bool,
}

/// The retry timer: register, and ask again for unanswered shard homes.
#[derive(Message, Clone)]
pub(crate) struct Retry;

/// A local shard finished its hand-off; with the messages it still held.
#[derive(Message)]
pub(crate) struct ShardTerminated<E: Entity> {
    pub(crate) shard: ShardId,
    pub(crate) leftovers: Vec<Delivery<E>>,
}

/// A shard that is handing off returns a message to the region.
#[derive(Message)]
pub(crate) struct Rebuffer<E: Entity>(pub(crate) ShardId, pub(crate) Delivery<E>);

/// Hand off every shard of this region, then stop (the region's phase of
/// the coordinated shutdown). Replies when the region has stopped.
#[derive(Message)]
pub(crate) struct GracefulShutdown;

/// Whether the region has registered with the coordinator.
#[derive(Message)]
#[message(reply = bool)]
pub(crate) struct IsRegistered;

/// The shard region of entity type `E` on this node.
pub struct Region<E: Entity> {
    shared: Arc<RegionShared<E>>,
    cluster: Cluster,
    me: RegionId,
    coordinator: SingletonProxy<ShardCoordinator<E>>,
    proxy_only: bool,
    registered: bool,
    factory: crate::sharding::EntityFactory<E>,
    buffers: HashMap<ShardId, VecDeque<Delivery<E>>>,
    /// Shards hosted here, by their actor (their entities are in their
    /// routes' tables).
    shards: HashMap<ShardId, ActorRef<Shard<E>>>,
    /// Shards whose hand-off has begun and whose new home is not known.
    handing_off: HashSet<ShardId>,
    /// Shards hosted here that were told `HandOff`, with its attempt (for
    /// the `ShardStopped` that answers once the shard has stopped).
    hand_off_attempts: HashMap<ShardId, u64>,
    /// Shards hosted here whose previous home is passing on the messages
    /// it held for them: those go to the shard as they come, the messages
    /// of local senders wait in the buffer behind them until
    /// `ShardFlushed` (with the old home, and since when).
    awaiting_flush: HashMap<ShardId, (RegionId, Instant)>,
    /// Rate limit of the "queue to a node is full" line.
    queue_full_log: LogLimit,
    /// Shards whose messages wait in the buffer for room in the queue to
    /// their home's node (see `ResendHeld`).
    held: HashSet<ShardId>,
    /// A `ResendHeld` timer is running (no congested node to wait on).
    resend_pending: bool,
    /// Regions whose node's queue refused something and that no task
    /// waits on yet (see `resend_held_soon`).
    congested: HashSet<ActorRef<Region<E>>>,
    /// Regions whose node's queue a task waits on, for room: one task per
    /// node at a time, each ending in a `ResendHeld` that names it.
    room_waiters: HashSet<AnyActorRef>,
    /// The message being routed holds a place in the buffer already (see
    /// `on_route`).
    place_taken: bool,
    /// `ShardFlushed` markers for the new homes of shards whose held
    /// messages have not all gone yet: each goes behind the last of them.
    flush_markers: HashMap<ShardId, ActorRef<Region<E>>>,
    /// Hand-off acknowledgements that the full queue to the old home did
    /// not take: they must go through it, behind what it queued before.
    held_acks: Vec<(ActorRef<Region<E>>, BeginHandOffAck)>,
    /// Shards whose home was asked for (and when).
    requested: HashMap<ShardId, Instant>,
    /// The home of each shard hosted by another region.
    remote_homes: HashMap<ShardId, RegionId>,
    /// Members removed from the cluster: never a home again (a restarted
    /// node is a new member, with a new uid).
    removed: HashSet<RegionId>,
    /// Waiting for the graceful shutdown to complete.
    shutting_down: Option<Vec<Replier<()>>>,
    /// The passivation limit of active entities in this region's shards
    /// (changeable at run time).
    active_entity_limit: Option<usize>,
    /// The shares of the limit are about to be sent again.
    share_pending: bool,
}

/// Time to send again the messages held for a full queue to a node: the
/// queue to the region named has room (or the wait for it timed out), or,
/// with none, the fallback timer fired.
#[derive(Message, Clone)]
struct ResendHeld(Option<AnyActorRef>);

/// How soon held messages are sent again when no congested node is known
/// to wait on: the queue to a node drains at the speed of the link, so
/// soon, but not in a busy loop.
const RESEND_HELD_AFTER: std::time::Duration = std::time::Duration::from_millis(10);

/// The longest wait for room in the queue to a congested node before the
/// held messages are tried again anyway (room that never comes: a node
/// whose link stays cut until it is removed). `EntityRef::send` looks
/// again as often.
pub(crate) const ROOM_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(1);

/// Time to send the hosted shards their shares of the limit.
#[derive(Message, Clone)]
struct ShareLimit;

/// How long shard changes gather before the shares are sent again.
const SHARE_LIMIT_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// Changes the active-entity limit of a region (Pekko's
/// `SetActiveEntityLimit`).
#[derive(Message)]
pub(crate) struct SetActiveEntityLimit(pub(crate) usize);

impl<E: Entity> Actor for Region<E> {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.start_periodic_timer("retry", Retry, self.shared.settings.retry_interval);
        self.register();
        // Homes on members that are removed (downed after a crash) must be
        // forgotten, else messages for their shards keep going to a dead
        // node and are lost (Pekko's region watches the regions it routes
        // to, and a watch ends when the member is removed).
        if let Err(e) = self.cluster.subscribe_actor(ctx.myself()) {
            tracing::error!(
                "sharding: the region of `{}` cannot follow the membership: {e}",
                E::TYPE_NAME
            );
        }
    }

    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        for (_, buffer) in self.buffers.drain() {
            for d in buffer {
                d.fail(AskError::Stopped);
            }
        }
        self.shared.buffered.store(0, Ordering::Relaxed);
        // Senders waiting for room find the region stopped.
        self.shared.buffer_room.notify(usize::MAX);
    }
}

impl<E: Entity> Region<E> {
    pub(crate) fn new(
        shared: Arc<RegionShared<E>>,
        cluster: Cluster,
        coordinator: SingletonProxy<ShardCoordinator<E>>,
        proxy_only: bool,
        factory: crate::sharding::EntityFactory<E>,
    ) -> Self {
        let shared_settings = shared.settings.clone();
        Region {
            shared,
            me: cluster.self_node().clone(),
            cluster,
            coordinator,
            proxy_only,
            registered: false,
            factory,
            buffers: HashMap::new(),
            shards: HashMap::new(),
            handing_off: HashSet::new(),
            hand_off_attempts: HashMap::new(),
            awaiting_flush: HashMap::new(),
            queue_full_log: LogLimit::per_second(),
            held: HashSet::new(),
            resend_pending: false,
            congested: HashSet::new(),
            room_waiters: HashSet::new(),
            place_taken: false,
            flush_markers: HashMap::new(),
            held_acks: Vec::new(),
            requested: HashMap::new(),
            remote_homes: HashMap::new(),
            removed: HashSet::new(),
            active_entity_limit: shard::active_entity_limit(&shared_settings),
            share_pending: false,
            shutting_down: None,
        }
    }

    fn register(&self) {
        let region = self.me.clone();
        let sent = if self.proxy_only {
            self.coordinator.tell(RegisterProxy { region })
        } else {
            self.coordinator.tell(Register { region })
        };
        if sent.is_err() {
            tracing::debug!(
                "sharding: the coordinator proxy of `{}` has stopped",
                E::TYPE_NAME
            );
        }
    }

    fn request_home(&mut self, shard: &ShardId) {
        let now = Instant::now();
        let due = self
            .requested
            .get(shard)
            .is_none_or(|at| now.duration_since(*at) >= self.shared.settings.retry_interval);
        if due && self.registered {
            self.requested.insert(shard.clone(), now);
            let _ = self.coordinator.tell(GetShardHome {
                shard: shard.clone(),
                region: self.me.clone(),
            });
        }
    }

    /// Gives each hosted shard its share of the active-entity limit again
    /// (the limit is per region, divided over its shards, as in Pekko).
    fn share_limit(&self) {
        let Some(limit) = self.active_entity_limit else {
            return;
        };
        let per_shard = (limit / self.shards.len().max(1)).max(1);
        for actor in self.shards.values() {
            let _ = actor.tell(ShardsUpdated { per_shard });
        }
    }

    /// The hosted shards changed: their shares of the limit are sent
    /// again shortly, once for a burst of changes (a region that starts a
    /// thousand shards tells each shard a few times, not a thousand).
    fn shards_updated(&mut self, ctx: &mut Context<Self>) {
        if self.active_entity_limit.is_none() || self.share_pending {
            return;
        }
        self.share_pending = true;
        ctx.start_single_timer("share-limit", ShareLimit, SHARE_LIMIT_AFTER);
    }

    /// Routes one message that came through the actor.
    fn route(&mut self, route: &Arc<ShardRoute<E>>, mut delivery: Delivery<E>) {
        let shard = &route.shard;
        if self.handing_off.contains(shard) || self.buffers.contains_key(shard) {
            return self.buffer(route, delivery);
        }
        // An ask delivered below runs its entity here only after the
        // locks are released (declared first: dropped last).
        let _batch = DeferActivations::begin();
        let home = route.read_home();
        match &*home {
            Home::Local(_) => {
                // Straight to a running entity when nothing else is in
                // flight (this message itself counts when it came the slow
                // way).
                let own = |via| usize::from(delivery.counted_via() == Some(via));
                if route.via_region.load(Ordering::Acquire) == own(Via::Region)
                    && route.via_shard.load(Ordering::Acquire) == own(Via::Shard)
                {
                    let id = delivery.entity.clone();
                    let system = &self.shared.system;
                    let sent = route
                        .local
                        .send_open(&id, delivery, |actor, d| d.deliver_local(system, actor));
                    match sent {
                        Ok(()) => return,
                        Err(d) => delivery = d,
                    }
                }
                drop(home);
                match self.shards.get(shard) {
                    Some(actor) => {
                        let actor = actor.clone();
                        self.hand_to_shard(route, &actor, delivery);
                    }
                    None => self.buffer(route, delivery),
                }
            }
            Home::Remote(region) => {
                if let Err(d) = delivery.send_remote(&self.shared.system, shard, region) {
                    // The queue to that node is full: it waits here, and
                    // the messages behind it too, for `ResendHeld`.
                    let region = region.clone();
                    drop(home);
                    self.hold(route, region, d);
                }
            }
            Home::Unknown => {
                drop(home);
                self.buffer(route, delivery);
            }
        }
    }

    /// Queues a message at the local shard actor; buffers it if the shard
    /// has stopped (its hand-off finished).
    fn hand_to_shard(
        &mut self,
        route: &Arc<ShardRoute<E>>,
        shard: &ActorRef<Shard<E>>,
        mut delivery: Delivery<E>,
    ) {
        // Counted as travelling through the region until it is queued at
        // the shard.
        let through_region = delivery.recount(route, Via::Shard);
        if let Err(e) = shard.tell(crate::shard::Deliver(delivery)) {
            let crate::shard::Deliver(d) = e.into_message();
            self.buffer(route, d);
        }
        drop(through_region);
    }

    fn buffer(&mut self, route: &Arc<ShardRoute<E>>, mut delivery: Delivery<E>) {
        let total = self.shared.buffered.load(Ordering::Relaxed);
        if total >= self.shared.settings.buffer_size && !delivery.is_counted() {
            self.shared.note_overflow();
            delivery.fail(AskError::MailboxFull);
            return;
        }
        delivery.count_in(route, Via::Region);
        // A message that took its place when it was sent keeps it.
        if !std::mem::take(&mut self.place_taken) {
            self.shared.buffered.fetch_add(1, Ordering::Relaxed);
        }
        self.buffers
            .entry(route.shard.clone())
            .or_default()
            .push_back(delivery);
        // A shard held for a full queue has a home (the retry tick still
        // asks, in case that home goes away).
        if !self.handing_off.contains(&route.shard) && !self.held.contains(&route.shard) {
            self.request_home(&route.shard.clone());
        }
    }

    /// Sends the messages buffered for `shard` to its home in another
    /// node's region, in order, as far as the queue to that node has room;
    /// the rest wait for `ResendHeld`.
    fn send_buffer_to(
        &mut self,
        shard: &ShardId,
        route: &Arc<ShardRoute<E>>,
        remote: &ActorRef<Region<E>>,
        ctx: &mut Context<Self>,
    ) {
        let mut waiting = self.take_buffer(shard);
        while let Some(d) = waiting.pop_front() {
            if let Err(d) = d.send_remote(&self.shared.system, shard, remote) {
                // This one and those behind it wait, in order.
                self.hold(route, remote.clone(), d);
                for d in waiting.drain(..) {
                    self.buffer(route, d);
                }
            }
        }
        self.resend_held_soon(ctx);
    }

    /// Tells each new home whose messages from here have all gone that
    /// they have (`ShardFlushed`); a marker the full queue does not take
    /// waits for the next `ResendHeld`.
    fn send_flush_markers(&mut self, ctx: &mut Context<Self>) {
        let ready: Vec<ShardId> = self
            .flush_markers
            .keys()
            .filter(|s| !self.buffers.contains_key(*s))
            .cloned()
            .collect();
        for shard in ready {
            let Some(new_home) = self.flush_markers.remove(&shard) else {
                continue;
            };
            let flushed = ShardFlushed {
                shard: shard.clone(),
                region: self.me.clone(),
            };
            match new_home.tell(flushed) {
                Ok(()) => {}
                Err(TellError::MailboxFull(_)) => {
                    self.note_queue_full(&new_home);
                    self.flush_markers.insert(shard, new_home);
                }
                Err(e) => tracing::warn!(
                    "sharding: cannot tell the new home of shard {shard} of `{}` that its \
                     messages were sent: {e}",
                    E::TYPE_NAME
                ),
            }
        }
        self.resend_held_soon(ctx);
    }

    /// Sends the hand-off acknowledgements that wait to go through their
    /// old homes; one that the full queue to its old home refuses waits
    /// for `ResendHeld` (it must not overtake what is queued there), and
    /// one whose old home cannot be reached at all goes to the coordinator.
    fn send_held_acks(&mut self, ctx: &mut Context<Self>) {
        for (old, ack) in std::mem::take(&mut self.held_acks) {
            match old.tell(ack) {
                Ok(()) => {}
                Err(TellError::MailboxFull(ack)) => {
                    self.note_queue_full(&old);
                    self.held_acks.push((old, ack));
                }
                Err(e) => {
                    let _ = self.coordinator.tell(e.into_message());
                }
            }
        }
        self.resend_held_soon(ctx);
    }

    /// Arranges for held messages to be sent again, if some wait: as soon
    /// as the queue to a node that refused one has room (one task per
    /// congested node waits for it, at most `ROOM_WAIT_MAX`), else, with
    /// no node to wait on, after `RESEND_HELD_AFTER`. Called as often as
    /// anything is held: a node that a task waits on already gets no other.
    fn resend_held_soon(&mut self, ctx: &mut Context<Self>) {
        let waiting =
            !self.held.is_empty() || !self.flush_markers.is_empty() || !self.held_acks.is_empty();
        if !waiting {
            self.congested.clear();
            return;
        }
        for node in self.congested.drain() {
            let key = node.to_any();
            if !self.room_waiters.insert(key.clone()) {
                continue;
            }
            let me = ctx.myself().clone();
            drop(rt::spawn(async move {
                let _ = rt::timeout(ROOM_WAIT_MAX, node.wait_for_room()).await;
                if !me.is_terminated() {
                    let _ = me.tell(ResendHeld(Some(key)));
                }
            }));
        }
        if self.room_waiters.is_empty() && !self.resend_pending {
            self.resend_pending = true;
            ctx.start_single_timer("resend-held", ResendHeld(None), RESEND_HELD_AFTER);
        }
    }

    /// Counts a message, acknowledgement or marker that the full queue to
    /// `node`'s node refused, and marks that node for a wait for room (see
    /// `resend_held_soon`).
    fn note_queue_full(&mut self, node: &ActorRef<Region<E>>) {
        self.shared.queue_full_waits.fetch_add(1, Ordering::Relaxed);
        self.congested.insert(node.clone());
    }

    /// Buffers a message that the full queue to its shard's home node
    /// (that of `home`) refused, marks the shard as held (see
    /// `ResendHeld`), and logs it (at most once a second).
    fn hold(
        &mut self,
        route: &Arc<ShardRoute<E>>,
        home: ActorRef<Region<E>>,
        delivery: Delivery<E>,
    ) {
        let shard = &route.shard;
        self.note_queue_full(&home);
        self.held.insert(shard.clone());
        if self.queue_full_log.allow() {
            tracing::warn!(
                "sharding: the queue to the node hosting shard {shard} of `{}` is full; its \
                 messages wait in this region's buffer and are sent again in order",
                E::TYPE_NAME
            );
        }
        self.buffer(route, delivery);
    }

    fn take_buffer(&mut self, shard: &ShardId) -> VecDeque<Delivery<E>> {
        let b = self.buffers.remove(shard).unwrap_or_default();
        self.shared.release_places(b.len());
        b
    }

    /// Starts hosting `shard` (if not already) and returns its actor.
    fn start_shard(
        &mut self,
        shard: &ShardId,
        ctx: &mut Context<Self>,
    ) -> Option<ActorRef<Shard<E>>> {
        if let Some(actor) = self.shards.get(shard) {
            return Some(actor.clone());
        }
        if self.proxy_only {
            tracing::error!(
                "sharding: proxy-only region of `{}` was asked to host shard {shard}",
                E::TYPE_NAME
            );
            return None;
        }
        // Its share until the next update, counting itself.
        let initial_limit = self
            .active_entity_limit
            .map(|l| (l / (self.shards.len() + 1)).max(1));
        let props = Props::new(Shard::new(ShardStart {
            initial_limit,
            shard: shard.clone(),
            // The route's table (closed until the home is published).
            local: self.shared.route(shard).local.clone(),
            region: ctx.myself().clone(),
            system: self.shared.system.clone(),
            factory: self.factory.clone(),
            settings: self.shared.settings.clone(),
            extractor: self.shared.extractor.clone(),
            remember: self.shared.settings.remember_entities.then(|| {
                RememberedEntitiesStore::new(
                    self.shared.replicator.clone(),
                    self.me.clone(),
                    E::TYPE_NAME,
                    shard,
                    &self.shared.settings,
                )
            }),
        }));
        match ctx.spawn_props(props) {
            Ok(actor) => {
                self.shards.insert(shard.clone(), actor.clone());
                self.shards_updated(ctx);
                Some(actor)
            }
            Err(e) => {
                tracing::error!(
                    "sharding: cannot start shard {shard} of `{}`: {e}",
                    E::TYPE_NAME
                );
                None
            }
        }
    }

    /// The home of `shard` is `region`: publish it and deliver what was
    /// buffered, in order.
    fn home_known(&mut self, shard: ShardId, region: RegionId, ctx: &mut Context<Self>) {
        self.publish_home(shard, region, ctx);
        self.finish_shutdown_if_done(ctx);
    }

    /// [`home_known`](Self::home_known) but for the end of a graceful
    /// shutdown. Returns the home's region actor if the home is another
    /// region (and the buffer went there).
    fn publish_home(
        &mut self,
        shard: ShardId,
        region: RegionId,
        ctx: &mut Context<Self>,
    ) -> Option<ActorRef<Region<E>>> {
        if self.removed.contains(&region) {
            // The coordinator has not yet seen the removal: keep the
            // messages and ask again on the next retry.
            tracing::debug!(
                "sharding: shard {shard} of `{}` is said to be on removed member {region}; asking again",
                E::TYPE_NAME
            );
            return None;
        }
        self.awaiting_flush.remove(&shard);
        self.requested.remove(&shard);
        self.handing_off.remove(&shard);
        self.remote_homes.remove(&shard);
        let route = self.shared.route(&shard);
        if region == self.me {
            let actor = self.start_shard(&shard, ctx)?;
            route.set_home(Home::Local(actor.clone()));
            for d in self.take_buffer(&shard) {
                self.hand_to_shard(&route, &actor, d);
            }
            None
        } else {
            if self.shards.contains_key(&shard) {
                tracing::warn!(
                    "sharding: shard {shard} of `{}` is hosted here but the coordinator says {region}",
                    E::TYPE_NAME
                );
            }
            let path = format!("{}/system/{}", region.address, region_name(E::TYPE_NAME));
            let remote = match self.shared.system.resolve::<Region<E>>(&path) {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("sharding: cannot reach region {path}: {e}");
                    return None;
                }
            };
            route.set_home(Home::Remote(remote.clone()));
            self.remote_homes.insert(shard.clone(), region);
            self.send_buffer_to(&shard, &route, &remote, ctx);
            Some(remote)
        }
    }

    /// Stops the region once a graceful shutdown has handed off every
    /// shard and every buffered message has gone to its shard's new home
    /// (as Pekko: messages that reached this region while its shards were
    /// handed off wait here for the new homes; stopping earlier would drop
    /// them).
    fn finish_shutdown_if_done(&mut self, ctx: &mut Context<Self>) {
        if self.shutting_down.is_some()
            && self.shards.is_empty()
            && self.buffers.is_empty()
            && self.flush_markers.is_empty()
        {
            let _ = self.coordinator.tell(RegionStopped {
                region: self.me.clone(),
            });
            for r in self.shutting_down.take().unwrap_or_default() {
                r.send(());
            }
            ctx.stop();
        }
    }
}

#[handlers]
impl<E: Entity> Region<E> {
    async fn on_route(&mut self, msg: Route<E>, ctx: &mut Context<Self>) {
        let Route {
            route,
            delivery,
            reserved,
            from_remote,
        } = msg;
        // A place in the buffer it took when it was sent: `buffer` keeps
        // it if it is buffered; otherwise it is given back below. (Giving
        // it back first and taking it again let a sender slip past the
        // limit in between.)
        self.place_taken = reserved;
        // The old home passing on what it held, while this region waits for
        // it: to the shard, ahead of the local senders' messages held here.
        let to_shard = if from_remote && self.awaiting_flush.contains_key(&route.shard) {
            self.shards.get(&route.shard).cloned()
        } else {
            None
        };
        match to_shard {
            Some(actor) => self.hand_to_shard(&route, &actor, delivery),
            None => self.route(&route, delivery),
        }
        if std::mem::take(&mut self.place_taken) {
            self.shared.release_places(1);
        }
        self.resend_held_soon(ctx);
    }

    async fn on_resend_held(&mut self, msg: ResendHeld, ctx: &mut Context<Self>) {
        match msg.0 {
            Some(node) => {
                self.room_waiters.remove(&node);
            }
            None => self.resend_pending = false,
        }
        for shard in std::mem::take(&mut self.held) {
            if !self.buffers.contains_key(&shard) {
                continue;
            }
            let route = self.shared.route(&shard);
            let remote = match &*route.read_home() {
                Home::Remote(r) => Some(r.clone()),
                // Moved meanwhile: the buffer goes with the new home.
                _ => None,
            };
            if let Some(remote) = remote {
                self.send_buffer_to(&shard, &route, &remote, ctx);
            }
        }
        self.send_held_acks(ctx);
        self.send_flush_markers(ctx);
        self.finish_shutdown_if_done(ctx);
    }

    async fn on_retry(&mut self, _msg: Retry, ctx: &mut Context<Self>) {
        if !self.registered {
            self.register();
        }
        // The old home's messages did not come (it failed, or the
        // coordinator that was to ask for them did): stop waiting.
        let timeout = self.shared.settings.handoff_timeout;
        let late: Vec<ShardId> = self
            .awaiting_flush
            .iter()
            .filter(|(_, (_, since))| since.elapsed() >= timeout)
            .map(|(s, _)| s.clone())
            .collect();
        for shard in late {
            tracing::warn!(
                "sharding: the messages that the old home of shard {shard} of `{}` held did not \
                 come within handoff-timeout; delivering those sent here since",
                E::TYPE_NAME
            );
            let me = self.me.clone();
            self.home_known(shard, me, ctx);
        }
        // Shards being handed off too (as Pekko): the coordinator does not
        // answer while the hand-off runs, but one that ended without a new
        // home (the strategy had none) is allocated only when asked again.
        let waiting: Vec<ShardId> = self.buffers.keys().cloned().collect();
        for s in waiting {
            self.request_home(&s);
        }
    }

    async fn on_register_ack(&mut self, msg: RegisterAck, ctx: &mut Context<Self>) {
        if !self.registered {
            tracing::info!(
                "sharding: region of `{}` on {} registered with the coordinator",
                E::TYPE_NAME,
                self.me
            );
        }
        self.registered = true;
        for (shard, region) in msg.homes {
            // A home that this region does not host yet is started only
            // when the coordinator says HostShard (or a message needs it).
            if region == self.me && !self.shards.contains_key(&shard) {
                continue;
            }
            self.home_known(shard, region, ctx);
        }
        let waiting: Vec<ShardId> = self.buffers.keys().cloned().collect();
        for s in waiting {
            self.requested.remove(&s);
            self.request_home(&s);
        }
    }

    async fn on_shard_home(&mut self, msg: ShardHome, ctx: &mut Context<Self>) {
        self.home_known(msg.shard, msg.region, ctx);
    }

    async fn on_host_shard(&mut self, msg: HostShard, ctx: &mut Context<Self>) {
        let HostShard { shard, flush_from } = msg;
        if self.start_shard(&shard, ctx).is_some() {
            let me = self.me.clone();
            match flush_from {
                // Local senders' messages wait for the old home's (the
                // route stays unknown, so they come to this actor).
                Some(from) if from != me && !self.removed.contains(&from) => {
                    self.awaiting_flush
                        .entry(shard.clone())
                        .or_insert_with(|| (from, Instant::now()));
                }
                _ => self.home_known(shard.clone(), me.clone(), ctx),
            }
            let _ = self.coordinator.tell(ShardStarted { shard, region: me });
        }
    }

    /// The coordinator asks this region, the old home of `shard`, to send
    /// the messages it holds for it to its new home.
    async fn on_flush_shard(&mut self, msg: FlushShard, ctx: &mut Context<Self>) {
        let FlushShard { shard, home } = msg;
        if let Some(new_home) = self.publish_home(shard.clone(), home, ctx) {
            // Behind the messages, on the same link: once the last of
            // them has gone (some may wait for room in the queue).
            self.flush_markers.insert(shard, new_home);
            self.send_flush_markers(ctx);
        }
        self.finish_shutdown_if_done(ctx);
    }

    /// From the old home of a shard hosted here, behind the messages it
    /// held: local senders' messages may follow them now.
    async fn on_shard_flushed(&mut self, msg: ShardFlushed, ctx: &mut Context<Self>) {
        if self
            .awaiting_flush
            .get(&msg.shard)
            .is_some_and(|(from, _)| *from == msg.region)
        {
            let me = self.me.clone();
            self.home_known(msg.shard.clone(), me, ctx);
        }
        let _ = self.coordinator.tell(msg);
    }

    async fn on_begin_hand_off(&mut self, msg: BeginHandOff, ctx: &mut Context<Self>) {
        let shard = msg.shard;
        let ack = BeginHandOffAck {
            shard: shard.clone(),
            region: self.me.clone(),
            attempt: msg.attempt,
        };
        if self.shards.contains_key(&shard) {
            // The shard is here: messages for it are still delivered to
            // it until `HandOff` (after which the shard returns what
            // reaches it, to be forwarded to the new home).
            let _ = self.coordinator.tell(ack);
            return;
        }
        let route = self.shared.route(&shard);
        let home = match &*route.read_home() {
            Home::Remote(r) => Some(r.clone()),
            _ => None,
        };
        // From here on, messages for the shard wait here for its new home
        // (the write lock: every direct send to the old home is queued).
        route.set_home(Home::Unknown);
        self.requested.remove(&shard);
        self.remote_homes.remove(&shard);
        self.handing_off.insert(shard.clone());
        // The acknowledgement goes to the coordinator through the old home,
        // behind every message sent there before: once the coordinator has
        // all of them and sends `HandOff`, the old home has received every
        // message sent to it before the hand-off, and its entities get them
        // before they stop. Messages that wait at the old home instead, to
        // be forwarded later, could be overtaken at the new home by those
        // that waited here (per-sender order lost).
        match home {
            Some(old) => {
                self.held_acks.push((old, ack));
                self.send_held_acks(ctx);
            }
            None => {
                let _ = self.coordinator.tell(ack);
            }
        }
    }

    /// Another region's acknowledgement of a hand-off of a shard hosted
    /// here, behind the messages it sent here before (see
    /// `on_begin_hand_off`): on to the coordinator.
    async fn on_hand_off_ack(&mut self, msg: BeginHandOffAck) {
        let _ = self.coordinator.tell(msg);
    }

    async fn on_hand_off(&mut self, msg: HandOff, ctx: &mut Context<Self>) {
        let HandOff { shard, attempt } = msg;
        self.handing_off.insert(shard.clone());
        self.awaiting_flush.remove(&shard);
        self.shared.route(&shard).set_home(Home::Unknown);
        let stopped = match self.shards.get(&shard) {
            Some(actor) => actor.tell(ShardHandOff).is_err(),
            None => true,
        };
        if stopped {
            if self.shards.remove(&shard).is_some() {
                self.shards_updated(ctx);
            }
            self.hand_off_attempts.remove(&shard);
            let holding = self.buffers.contains_key(&shard);
            let _ = self.coordinator.tell(ShardStopped {
                shard,
                region: self.me.clone(),
                holding,
                attempt,
            });
        } else {
            self.hand_off_attempts.insert(shard, attempt);
        }
    }

    async fn on_shard_terminated(&mut self, msg: ShardTerminated<E>, ctx: &mut Context<Self>) {
        let ShardTerminated { shard, leftovers } = msg;
        self.shards.remove(&shard);
        self.shards_updated(ctx);
        // What the shard still held was sent before anything buffered
        // here since the hand-off began: it goes first.
        let route = self.shared.route(&shard);
        let later = self.take_buffer(&shard);
        for d in leftovers.into_iter().chain(later) {
            self.buffer(&route, d);
        }
        let holding = self.buffers.contains_key(&shard);
        let attempt = self.hand_off_attempts.remove(&shard).unwrap_or(0);
        let _ = self.coordinator.tell(ShardStopped {
            shard,
            region: self.me.clone(),
            holding,
            attempt,
        });
        self.finish_shutdown_if_done(ctx);
    }

    async fn on_set_active_entity_limit(&mut self, msg: SetActiveEntityLimit) {
        if self.active_entity_limit.is_none() {
            tracing::warn!(
                "sharding: the active-entity limit of `{}` cannot be changed: its passivation \
                 strategy has no limit",
                E::TYPE_NAME
            );
            return;
        }
        tracing::info!(
            "sharding: active-entity limit of `{}` on {} is now {}",
            E::TYPE_NAME,
            self.me,
            msg.0
        );
        self.active_entity_limit = Some(msg.0);
        self.share_limit();
    }

    async fn on_share_limit(&mut self, _msg: ShareLimit) {
        self.share_pending = false;
        self.share_limit();
    }

    async fn on_rebuffer(&mut self, msg: Rebuffer<E>) {
        let route = self.shared.route(&msg.0);
        self.buffer(&route, msg.1);
    }

    async fn on_cluster_state(&mut self, _msg: CurrentClusterState) {}

    async fn on_cluster_event(&mut self, msg: ClusterEvent) {
        let ClusterEvent::MemberRemoved(m, _) = msg else {
            return;
        };
        let node = m.node;
        let lost: Vec<ShardId> = self
            .remote_homes
            .iter()
            .filter(|(_, r)| **r == node)
            .map(|(s, _)| s.clone())
            .collect();
        if !lost.is_empty() {
            tracing::info!(
                "sharding: {} shards of `{}` were on removed member {node}; their messages wait \
                 for new homes",
                lost.len(),
                E::TYPE_NAME
            );
        }
        for shard in lost {
            self.remote_homes.remove(&shard);
            // The next message buffers and asks the coordinator.
            self.shared.route(&shard).set_home(Home::Unknown);
        }
        self.removed.insert(node);
    }

    async fn on_is_registered(&mut self, _msg: IsRegistered) -> bool {
        self.registered
    }

    async fn on_stats(&mut self, _msg: GetRegionStats) -> Option<ShardRegionStats> {
        if self.proxy_only {
            return None;
        }
        Some(ShardRegionStats {
            stats: self
                .shards
                .keys()
                .map(|id| (id.to_string(), self.shared.route(id).local.len()))
                .collect(),
        })
    }

    async fn on_state(&mut self, _msg: GetRegionState) -> CurrentShardRegionState {
        let mut shards: Vec<ShardState> = self
            .shards
            .keys()
            .map(|id| {
                let local = &self.shared.route(id).local;
                let mut entity_ids: Vec<String> =
                    local.ids().iter().map(|e| e.to_string()).collect();
                entity_ids.sort();
                ShardState {
                    shard_id: id.to_string(),
                    entity_ids,
                }
            })
            .collect();
        shards.sort_by(|a, b| a.shard_id.cmp(&b.shard_id));
        CurrentShardRegionState { shards }
    }
}

impl<E: Entity> Handler<GracefulShutdown> for Region<E> {
    async fn handle(&mut self, _msg: GracefulShutdown, _ctx: &mut Context<Self>) {}

    async fn handle_with_reply(
        &mut self,
        _msg: GracefulShutdown,
        reply: Option<Replier<()>>,
        ctx: &mut Context<Self>,
    ) {
        let first = self.shutting_down.is_none();
        self.shutting_down
            .get_or_insert_with(Vec::new)
            .extend(reply);
        if first {
            tracing::info!(
                "sharding: region of `{}` on {} hands off its {} shards",
                E::TYPE_NAME,
                self.me,
                self.shards.len()
            );
            if !self.shards.is_empty() {
                let _ = self.coordinator.tell(GracefulShutdownReq {
                    region: self.me.clone(),
                });
            }
        }
        self.finish_shutdown_if_done(ctx);
    }
}
