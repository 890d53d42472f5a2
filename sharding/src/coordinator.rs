//! The shard coordinator: a cluster singleton per entity type that decides
//! where shards live (with a pluggable allocation strategy), moves them to
//! rebalance the cluster, and keeps its state in distributed data.
//!
//! Unlike Akka, when a hand-off completes the coordinator allocates the
//! shard at once and tells every region its new home, instead of waiting
//! for the regions to ask again on their next retry (which costs up to
//! `retry-interval` of latency per moved shard); and a round of rebalancing
//! that moved shards is followed at once by the next while the cluster is
//! still unbalanced, so that a new node gets its share in seconds.

use crate::allocation::{ClusterView, RegionId, ShardAllocationStrategy};
use crate::coordinator_state::CoordinatorState;
use crate::entity::Entity;
use crate::extractor::ShardId;
use crate::internal_keys::coordinator_state_key;
use crate::protocol::*;
use crate::rebalance::{HandOffProgress, PendingFlush, RebalanceWorker};
use crate::region::{region_name, Region};
use crate::remember::RememberedShardsStore;
use crate::settings::ShardingSettings;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::marker::PhantomData;
use std::time::Instant;
use troupe_cluster::ddata::{Key, LWWRegister, ReadConsistency, Replicator, WriteConsistency};
use troupe_cluster::{Cluster, ClusterEvent, CurrentClusterState, MemberStatus, UniqueAddress};
use troupe_core::prelude::*;

/// The coordinator's periodic work: rebalance, and repeat unanswered
/// `HostShard`s.
#[derive(Message, Clone)]
pub(crate) struct RebalanceTick;

/// A membership change (forwarded from the cluster's event stream).
#[derive(Message)]
pub(crate) struct MembershipChanged(ClusterEvent);

/// Allocate the shards requested so far (`GetShardHome`s for shards
/// without a home), together: sent to itself by the coordinator after the
/// first such request, so that every request already in its mailbox
/// joins the same batch.
#[derive(Message)]
pub(crate) struct AllocateRequested;

/// The coordinator of entity type `E`.
pub struct ShardCoordinator<E: Entity> {
    system: ActorSystem,
    cluster: Cluster,
    replicator: Replicator,
    settings: ShardingSettings,
    strategy: Box<dyn ShardAllocationStrategy>,
    key: Key<LWWRegister<String>>,
    state: CoordinatorState,
    cluster_state: CurrentClusterState,
    regions: HashMap<RegionId, ActorRef<Region<E>>>,
    /// Shards being handed off.
    rebalancing: HashMap<ShardId, RebalanceWorker>,
    /// Shards whose hand-off was abandoned, and when: the strategy's moves
    /// leave them alone for `handoff-timeout`.
    abandoned: HashMap<ShardId, Instant>,
    /// The number of the last hand-off attempt (the first is random, so
    /// that the attempts of a coordinator that takes over are not its
    /// predecessor's).
    last_attempt: u64,
    /// Shards handed off whose old home holds messages for them: their
    /// new home is announced once those are there.
    flushing: HashMap<ShardId, PendingFlush>,
    /// Regions shutting down gracefully.
    shutting_down: BTreeSet<RegionId>,
    /// `HostShard`s not yet confirmed, and when they were sent.
    unconfirmed: HashMap<ShardId, (RegionId, Instant)>,
    /// Shards without a home that regions asked for, with the regions
    /// that asked, waiting for `AllocateRequested` (one is on its way
    /// whenever this is not empty).
    requested: BTreeMap<ShardId, Vec<RegionId>>,
    /// `min-nr-of-members` was reached once (it is not checked again).
    min_members_reached: bool,
    /// With remembered entities: the shards that have some, which are
    /// allocated without waiting for a message.
    remembered: Option<(RememberedShardsStore, BTreeSet<ShardId>)>,
    _entity: PhantomData<fn() -> E>,
}

impl<E: Entity> ShardCoordinator<E> {
    pub(crate) fn new(
        system: ActorSystem,
        cluster: Cluster,
        replicator: Replicator,
        settings: ShardingSettings,
        strategy: Box<dyn ShardAllocationStrategy>,
    ) -> Self {
        let remembered = settings.remember_entities.then(|| {
            let store = RememberedShardsStore::new(
                replicator.clone(),
                cluster.self_node().clone(),
                E::TYPE_NAME,
                &settings,
            );
            (store, BTreeSet::new())
        });
        ShardCoordinator {
            system,
            cluster,
            replicator,
            settings,
            strategy,
            key: Key::new(coordinator_state_key(E::TYPE_NAME)),
            state: CoordinatorState::default(),
            cluster_state: CurrentClusterState {
                members: Vec::new(),
                unreachable: Vec::new(),
                seen_by: Default::default(),
                leader: None,
                role_leaders: Vec::new(),
                unreachable_observed_by: Vec::new(),
                oldest: None,
                oldest_per_role: Vec::new(),
            },
            regions: HashMap::new(),
            rebalancing: HashMap::new(),
            abandoned: HashMap::new(),
            last_attempt: fastrand::u64(..u64::MAX / 2),
            flushing: HashMap::new(),
            shutting_down: BTreeSet::new(),
            unconfirmed: HashMap::new(),
            requested: BTreeMap::new(),
            min_members_reached: false,
            remembered,
            _entity: PhantomData,
        }
    }

    fn write_consistency(&self) -> WriteConsistency {
        WriteConsistency::MajorityPlus {
            additional: self.settings.write_majority_plus,
            timeout: self.settings.updating_state_timeout,
        }
    }

    /// Writes the state; on failure (no majority in time) the write stays
    /// local and spreads by gossip, which is logged.
    async fn save(&mut self) {
        self.write_state().await
    }

    /// The write of [`save`](Self::save), as a future that holds what it
    /// needs (to run beside another write).
    fn write_state(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let text = self.state.encode();
        let me = self.cluster.self_node().clone();
        let (replicator, key) = (self.replicator.clone(), self.key.clone());
        let consistency = self.write_consistency();
        async move {
            let initial = LWWRegister::new(&me, String::new());
            let result = replicator
                .update(&key, initial, consistency, move |mut r| {
                    r.set(&me, text);
                    r
                })
                .await;
            if let Err(e) = result {
                tracing::warn!(
                    "sharding: the coordinator state of `{}` was not written to a majority in \
                     time ({e}); it spreads by gossip",
                    E::TYPE_NAME
                );
            }
        }
    }

    async fn load(&mut self) {
        let consistency = ReadConsistency::MajorityPlus {
            additional: self.settings.read_majority_plus,
            timeout: self.settings.waiting_for_state_timeout,
        };
        let mut read = self.replicator.get(&self.key, consistency).await;
        if read.is_err() {
            // Not enough replicas answered: use what this node has (Akka
            // retries; the local copy is at least as new as our last write).
            read = self.replicator.get(&self.key, ReadConsistency::Local).await;
        }
        match read {
            Ok(Some(r)) if !r.value().is_empty() => match CoordinatorState::decode(r.value()) {
                Ok(s) => {
                    tracing::info!(
                        "sharding: coordinator of `{}` recovered {} shard homes in {} regions",
                        E::TYPE_NAME,
                        s.shards.len(),
                        s.regions.len()
                    );
                    self.state = s;
                }
                Err(e) => tracing::error!(
                    "sharding: the coordinator state of `{}` does not decode ({e}); starting empty \
                     (remove the sharding data if this persists)",
                    E::TYPE_NAME
                ),
            },
            Ok(_) => {}
            Err(e) => tracing::warn!(
                "sharding: cannot read the coordinator state of `{}`: {e}; starting empty",
                E::TYPE_NAME
            ),
        }
    }

    fn region_ref(&mut self, region: &RegionId) -> Option<ActorRef<Region<E>>> {
        if let Some(r) = self.regions.get(region) {
            return Some(r.clone());
        }
        let path = format!("{}/system/{}", region.address, region_name(E::TYPE_NAME));
        match self.system.resolve::<Region<E>>(&path) {
            Ok(r) => {
                self.regions.insert(region.clone(), r.clone());
                Some(r)
            }
            Err(e) => {
                tracing::warn!("sharding: cannot reach region {path}: {e}");
                None
            }
        }
    }

    fn tell_region<M>(&mut self, region: &RegionId, msg: M)
    where
        M: Message + serde::Serialize + serde::de::DeserializeOwned,
        M::Reply: serde::Serialize + serde::de::DeserializeOwned,
        Region<E>: Handler<M>,
    {
        if let Some(r) = self.region_ref(region) {
            if let Err(e) = r.tell(msg) {
                tracing::debug!("sharding: cannot tell region {region}: {e}");
            }
        }
    }

    /// True if some member sees `node` as unreachable.
    fn is_unreachable(&self, node: &UniqueAddress) -> bool {
        self.cluster_state
            .unreachable
            .iter()
            .any(|m| &m.node == node)
    }

    /// A region or proxy on an unreachable member, if there is one: it
    /// could not acknowledge a hand-off.
    fn unreachable_router(&self) -> Option<RegionId> {
        self.all_routers()
            .into_iter()
            .find(|r| self.is_unreachable(r))
    }

    fn member_status(&self, node: &UniqueAddress) -> Option<MemberStatus> {
        self.cluster_state
            .members
            .iter()
            .find(|m| &m.node == node)
            .map(|m| m.status)
    }

    fn has_role(&self, node: &UniqueAddress) -> bool {
        match &self.settings.role {
            None => true,
            Some(role) => self
                .cluster_state
                .members
                .iter()
                .any(|m| &m.node == node && m.has_role(role)),
        }
    }

    /// Regions that may receive shards: registered, of an Up member, not
    /// shutting down.
    fn may_host(&self, region: &RegionId) -> bool {
        self.state.regions.contains_key(region)
            && self.member_status(region) == Some(MemberStatus::Up)
            && !self.shutting_down.contains(region)
    }

    /// Enough regions to allocate (`min-nr-of-members`), as Pekko: the
    /// regions registered (not merely the members Up, so that a member
    /// that has not started the entity type yet is not counted, and the
    /// first shards are not all put on the first regions), and checked
    /// only until the minimum is first reached: a cluster that later
    /// shrinks below it (a crash) must still allocate the shards of the
    /// lost members. A coordinator that recovers allocated shards takes
    /// the minimum as reached.
    fn allocation_ready(&mut self) -> bool {
        if !self.min_members_reached {
            let regions = self
                .state
                .regions
                .keys()
                .filter(|r| self.member_status(r) == Some(MemberStatus::Up))
                .count();
            self.min_members_reached =
                regions >= self.settings.min_nr_of_members || !self.state.shards.is_empty();
        }
        self.min_members_reached
    }

    /// Every registered region and proxy: those that must hear of
    /// hand-offs and new homes.
    fn all_routers(&self) -> Vec<RegionId> {
        self.state
            .regions
            .keys()
            .chain(self.state.proxies.iter())
            .cloned()
            .collect()
    }

    /// Allocates `shard` (requested by `requester`) if the strategy finds
    /// a home; tells that region to host it and returns the home.
    async fn allocate(&mut self, shard: &ShardId, requester: &RegionId) -> Option<RegionId> {
        let requests = BTreeMap::from([(shard.clone(), requester.clone())]);
        self.allocate_all(requests)
            .await
            .pop()
            .map(|(_, home)| home)
    }

    /// Allocates the shards of `requests` (each asked for by a region)
    /// that the strategy finds a home for, together: one write of the
    /// state and one of the remembered shards for all of them, at once,
    /// and only then is each home told to host its shard (so a home is
    /// written before any region hears of it, and a coordinator that takes
    /// over reads it and allocates no shard twice). Returns the shards
    /// allocated with their homes.
    async fn allocate_all(
        &mut self,
        requests: BTreeMap<ShardId, RegionId>,
    ) -> Vec<(ShardId, RegionId)> {
        if requests.is_empty() || !self.allocation_ready() {
            return Vec::new();
        }
        let mut allocated = Vec::new();
        for (shard, requester) in requests {
            let Some(home) = self.choose_home(&shard, &requester) else {
                continue;
            };
            self.state.allocate(&shard, &home);
            self.flush_to(&shard, &home);
            allocated.push((shard, home));
        }
        if allocated.is_empty() {
            return allocated;
        }
        let shards: Vec<ShardId> = allocated.iter().map(|(s, _)| s.clone()).collect();
        let remember = self.remember_shards(&shards);
        let ((), remembered) = futures_lite::future::zip(self.write_state(), remember).await;
        if let (Some(remembered), Some((_, known))) = (remembered, &mut self.remembered) {
            known.extend(remembered);
        }
        let now = Instant::now();
        for (shard, home) in &allocated {
            tracing::debug!(
                "sharding: shard {shard} of `{}` allocated to {home}",
                E::TYPE_NAME
            );
            self.host(shard, home, now);
        }
        allocated
    }

    /// The home the strategy chooses for `shard` among the regions that
    /// may host it now; `None`: not now.
    fn choose_home(&mut self, shard: &ShardId, requester: &RegionId) -> Option<RegionId> {
        let candidates = self.state.allocations(|r| self.may_host(r));
        if candidates.is_empty() {
            return None;
        }
        let me = self.cluster.self_node().clone();
        let view = ClusterView::new(&self.cluster_state, &me);
        let home = self
            .strategy
            .allocate_shard(requester, shard, &candidates, &view)?;
        if !self.may_host(&home) {
            tracing::warn!(
                "sharding: the allocation strategy of `{}` chose {home}, which cannot host shard \
                 {shard} (not registered, not Up, or shutting down)",
                E::TYPE_NAME
            );
            return None;
        }
        Some(home)
    }

    /// Tells `home` to host `shard` (allocated and written), and waits
    /// for its confirmation.
    fn host(&mut self, shard: &ShardId, home: &RegionId, now: Instant) {
        self.unconfirmed.insert(shard.clone(), (home.clone(), now));
        let flush_from = self.flushing.get(shard).map(|f| f.from.clone());
        self.tell_region(
            home,
            HostShard {
                shard: shard.clone(),
                flush_from,
            },
        );
    }

    /// `shard` was allocated to `home`: if its old home holds messages for
    /// it, they go there first (`FlushShard`, once `home` has started the
    /// shard). If the old home got the shard back, it delivers them itself.
    fn flush_to(&mut self, shard: &ShardId, home: &RegionId) {
        if let Some(f) = self.flushing.get_mut(shard) {
            if f.from == *home {
                self.flushing.remove(shard);
            } else {
                f.home = Some(home.clone());
                f.since = Instant::now();
            }
        }
    }

    /// Remembers newly allocated shards (with remembered entities), in
    /// one write, so that they are allocated again without a message
    /// after a restart of the whole cluster. Resolves to the shards now
    /// remembered, for the caller to add to the known ones (`None`:
    /// nothing written). A failed write is retried on the next tick.
    fn remember_shards(
        &self,
        shards: &[ShardId],
    ) -> impl std::future::Future<Output = Option<Vec<ShardId>>> + Send + 'static {
        let write = self.remembered.as_ref().and_then(|(store, known)| {
            let new: Vec<ShardId> = shards
                .iter()
                .filter(|s| !known.contains(*s))
                .cloned()
                .collect();
            (!new.is_empty()).then(|| (store.clone(), new))
        });
        async move {
            let (store, new) = write?;
            match store.add_all(&new).await {
                Ok(()) => Some(new),
                Err(e) => {
                    tracing::warn!(
                        "sharding: coordinator of `{}` could not remember {} shards ({e}); retrying",
                        E::TYPE_NAME,
                        new.len()
                    );
                    None
                }
            }
        }
    }

    /// Allocates every remembered shard that has no home (after a restart
    /// of the cluster, or when its region is gone), so that its entities
    /// start again without a message. One state write for all of them.
    async fn allocate_remembered(&mut self) {
        let Some((_, known)) = &self.remembered else {
            return;
        };
        let homeless: Vec<ShardId> = known
            .iter()
            .filter(|s| !self.state.shards.contains_key(*s) && !self.rebalancing.contains_key(*s))
            .cloned()
            .collect();
        if homeless.is_empty() || !self.allocation_ready() {
            return;
        }
        let me = self.cluster.self_node().clone();
        let mut allocated = Vec::new();
        for shard in homeless {
            let Some(home) = self.choose_home(&shard, &me) else {
                continue;
            };
            self.state.allocate(&shard, &home);
            self.flush_to(&shard, &home);
            allocated.push((shard, home));
        }
        if allocated.is_empty() {
            return;
        }
        self.save().await;
        tracing::info!(
            "sharding: coordinator of `{}` allocated {} remembered shards",
            E::TYPE_NAME,
            allocated.len()
        );
        let now = Instant::now();
        for (shard, home) in allocated {
            self.host(&shard, &home, now);
            if !self.flushing.contains_key(&shard) {
                self.tell_home_to_all(&shard, &home, false);
            }
        }
    }

    /// Begins a hand-off of `shard`; false if none begins (one runs
    /// already, the shard has no home or is being flushed, or a region
    /// that would have to acknowledge is unreachable).
    fn start_hand_off(&mut self, shard: ShardId, ctx: &mut Context<Self>) -> bool {
        if self.rebalancing.contains_key(&shard) || self.flushing.contains_key(&shard) {
            return false;
        }
        let Some(from) = self.state.shards.get(&shard).cloned() else {
            return false;
        };
        let routers = self.all_routers();
        // A region on an unreachable member cannot acknowledge: the attempt
        // would only hold the shard's messages in the other regions until
        // it is abandoned, so a later tick tries again. A graceful shutdown
        // goes ahead: the regions that can be reached buffer the shard's
        // messages (sent to the leaving node, they could be lost when it
        // goes), and its hand-off waits for the others to come back or be
        // removed (`waits_for_cut_off_regions`).
        if !self.shutting_down.contains(&from) {
            if let Some(cut_off) = self.unreachable_router() {
                tracing::debug!(
                    "sharding: hand-off of shard {shard} of `{}` waits: region {cut_off} is \
                     unreachable",
                    E::TYPE_NAME
                );
                return false;
            }
        }
        // Never 0 (which stands for "not numbered").
        self.last_attempt += 1;
        let attempt = self.last_attempt;
        tracing::debug!(
            "sharding: hand-off of shard {shard} of `{}` from {from} begins (attempt {attempt})",
            E::TYPE_NAME
        );
        let worker = RebalanceWorker::new(shard.clone(), from, attempt, routers.iter().cloned());
        for r in routers {
            self.tell_region(
                &r,
                BeginHandOff {
                    shard: shard.clone(),
                    attempt,
                },
            );
        }
        self.rebalancing.insert(shard, worker);
        self.arm_tick(ctx);
        true
    }

    /// True if hand-off `w` is not to be abandoned although its
    /// acknowledgements are late: its home is shutting down and every
    /// region that has not acknowledged is unreachable (an acknowledgement
    /// comes when it is reachable again, or its removal counts as one).
    fn waits_for_cut_off_regions(&self, w: &RebalanceWorker) -> bool {
        !w.is_stopping()
            && self.shutting_down.contains(w.from())
            && w.unacknowledged().all(|r| self.is_unreachable(r))
    }

    /// Tells `from`, the home of `shard`, to hand it off (the attempt of
    /// the hand-off running for it).
    fn send_hand_off(&mut self, shard: &ShardId, from: &RegionId) {
        let attempt = self.rebalancing.get(shard).map_or(0, |w| w.attempt());
        self.tell_region(
            from,
            HandOff {
                shard: shard.clone(),
                attempt,
            },
        );
    }

    /// Moves the hand-off of `shard` on after an answer.
    async fn advance(
        &mut self,
        shard: &ShardId,
        progress: HandOffProgress,
        holding: bool,
        ctx: &mut Context<Self>,
    ) {
        match progress {
            HandOffProgress::Waiting => {}
            HandOffProgress::SendHandOff(from) => self.send_hand_off(shard, &from),
            HandOffProgress::Done => {
                let Some(worker) = self.rebalancing.remove(shard) else {
                    return;
                };
                self.finish_hand_off(shard, worker.from().clone(), holding)
                    .await;
                if self.rebalancing.is_empty() {
                    // The previous round is over: go on while unbalanced.
                    let _ = ctx.myself().tell(RebalanceTick);
                }
            }
            HandOffProgress::Failed => {
                let Some(worker) = self.rebalancing.remove(shard) else {
                    return;
                };
                let from = worker.from().clone();
                if worker.is_stopping() {
                    tracing::warn!(
                        "sharding: shard {shard} of `{}` was not handed off by {from} in time; it \
                         stays there",
                        E::TYPE_NAME
                    );
                } else {
                    self.abandoned.insert(shard.clone(), Instant::now());
                    let silent: Vec<String> =
                        worker.unacknowledged().map(|r| r.to_string()).collect();
                    tracing::warn!(
                        "sharding: hand-off of shard {shard} of `{}` abandoned: no acknowledgement \
                         from {} within handoff-timeout; it stays on {from} and is moved later",
                        E::TYPE_NAME,
                        silent.join(", ")
                    );
                }
                // The old home too: it buffers the shard's messages since
                // `HandOff` (if it got it) and keeps the shard after all.
                self.tell_home_to_all(shard, &from, true);
            }
        }
    }

    /// The shard left `from`: allocate it at once and tell every region
    /// its new home, rather than waiting for their next request (if no
    /// region can take it now, they ask again and wait). If `from` holds
    /// messages for the shard, the other regions are told only once those
    /// are at the new home.
    async fn finish_hand_off(&mut self, shard: &ShardId, from: RegionId, holding: bool) {
        self.state.deallocate(shard);
        self.unconfirmed.remove(shard);
        if holding && self.state.regions.contains_key(&from) {
            self.flushing.insert(
                shard.clone(),
                PendingFlush {
                    from: from.clone(),
                    home: None,
                    since: Instant::now(),
                },
            );
        }
        match self.allocate(shard, &from).await {
            // The new home learnt it from `HostShard`.
            Some(home) if !self.flushing.contains_key(shard) => {
                self.tell_home_to_all(shard, &home, false)
            }
            Some(_) => {}
            None => self.save().await,
        }
    }

    /// The messages that the old home of `shard` held are at its new home
    /// (or never will be): tell every region where it lives.
    fn flushed(&mut self, shard: &ShardId, including_home: bool) {
        if let Some(PendingFlush {
            home: Some(home), ..
        }) = self.flushing.remove(shard)
        {
            self.tell_home_to_all(shard, &home, including_home);
        }
    }

    fn arm_tick(&mut self, ctx: &mut Context<Self>) {
        ctx.start_periodic_timer("rebalance", RebalanceTick, self.settings.rebalance_interval);
    }

    async fn refresh_cluster_state(&mut self) {
        if let Ok(s) = self.cluster.state().await {
            self.cluster_state = s;
        }
    }

    async fn region_gone(&mut self, region: &RegionId) {
        let had = self.state.regions.contains_key(region) || self.state.proxies.contains(region);
        if !had {
            return;
        }
        let shards = self.state.remove_region(region);
        self.regions.remove(region);
        self.shutting_down.remove(region);
        // Shards on their way here go elsewhere (their old homes flush
        // again to the next home).
        for f in self.flushing.values_mut() {
            if f.home.as_ref() == Some(region) {
                f.home = None;
            }
        }
        tracing::info!(
            "sharding: region {region} of `{}` is gone; its {} shards will be allocated again",
            E::TYPE_NAME,
            shards.len()
        );
        self.save().await;
        // Hand-offs waiting for this region go on without it.
        let waiting: Vec<ShardId> = self.rebalancing.keys().cloned().collect();
        for s in waiting {
            let progress = match self.rebalancing.get_mut(&s) {
                Some(w) => w.region_gone(region),
                None => continue,
            };
            match progress {
                HandOffProgress::SendHandOff(from) => self.send_hand_off(&s, &from),
                HandOffProgress::Done | HandOffProgress::Failed => {
                    // Its home is gone, so are its entities.
                    self.rebalancing.remove(&s);
                    self.finish_hand_off(&s, region.clone(), false).await;
                }
                HandOffProgress::Waiting => {}
            }
        }
        self.allocate_remembered().await;
    }
}

impl<E: Entity> Actor for ShardCoordinator<E> {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        self.load().await;
        match self.cluster.subscribe().await {
            Ok((snapshot, events)) => {
                self.cluster_state = snapshot;
                let me = ctx.myself().clone();
                troupe_core::rt::spawn(async move {
                    while let Ok(e) = events.recv().await {
                        if me.tell(MembershipChanged(e)).is_err() {
                            break;
                        }
                    }
                });
            }
            Err(e) => tracing::error!("sharding: coordinator cannot follow the membership: {e}"),
        }
        // Regions of members that left while no coordinator ran.
        let gone: Vec<RegionId> = self
            .state
            .regions
            .keys()
            .chain(self.state.proxies.iter())
            .filter(|r| self.member_status(r).is_none())
            .cloned()
            .collect();
        for r in gone {
            self.region_gone(&r).await;
        }
        if let Some((store, known)) = &mut self.remembered {
            match store.load().await {
                Ok(shards) => {
                    tracing::info!(
                        "sharding: coordinator of `{}` remembers {} shards",
                        E::TYPE_NAME,
                        shards.len()
                    );
                    known.extend(shards);
                }
                Err(e) => tracing::error!(
                    "sharding: coordinator of `{}` could not read its remembered shards ({e}); \
                     their entities start again only when messages come",
                    E::TYPE_NAME
                ),
            }
        }
        self.allocate_remembered().await;
        self.arm_tick(ctx);
        tracing::info!(
            "sharding: coordinator of `{}` started on {}",
            E::TYPE_NAME,
            self.cluster.self_node()
        );
    }
}

#[handlers]
impl<E: Entity> ShardCoordinator<E> {
    async fn on_register(&mut self, msg: Register) {
        let region = msg.region;
        if !self.has_role(&region) && self.member_status(&region).is_some() {
            tracing::warn!(
                "sharding: region {region} of `{}` registered without the role {:?}",
                E::TYPE_NAME,
                self.settings.role
            );
        }
        if !self.state.regions.contains_key(&region) {
            self.state.add_region(&region);
            self.save().await;
            tracing::info!("sharding: region {region} of `{}` registered", E::TYPE_NAME);
        }
        self.regions.remove(&region);
        let homes = self.homes();
        self.tell_region(&region, RegisterAck { homes });
        self.allocate_remembered().await;
    }

    async fn on_register_proxy(&mut self, msg: RegisterProxy) {
        let region = msg.region;
        if self.state.proxies.insert(region.clone()) {
            self.save().await;
        }
        let homes = self.homes();
        self.tell_region(&region, RegisterAck { homes });
    }

    async fn on_get_shard_home(&mut self, msg: GetShardHome, ctx: &mut Context<Self>) {
        let GetShardHome { shard, region } = msg;
        if self.rebalancing.contains_key(&shard) {
            return; // answered when the hand-off completes
        }
        if self.flushing.get(&shard).is_some_and(|f| f.home.is_some()) {
            return; // answered once the old home's messages are there
        }
        if let Some(home) = self.state.shards.get(&shard).cloned() {
            self.tell_region(
                &region,
                ShardHome {
                    shard,
                    region: home,
                },
            );
            return;
        }
        // Allocated with the other requests already in the mailbox.
        if self.requested.is_empty() {
            let _ = ctx.myself().tell(AllocateRequested);
        }
        let askers = self.requested.entry(shard).or_default();
        if !askers.contains(&region) {
            askers.push(region);
        }
    }

    async fn on_allocate_requested(&mut self, _msg: AllocateRequested) {
        let requested = std::mem::take(&mut self.requested);
        let mut requests = BTreeMap::new();
        for (shard, askers) in &requested {
            // Answered when its hand-off completes.
            if self.rebalancing.contains_key(shard) {
                continue;
            }
            // Answered once the messages held for it are at its home.
            if self.flushing.get(shard).is_some_and(|f| f.home.is_some()) {
                continue;
            }
            if let Some(home) = self.state.shards.get(shard).cloned() {
                for region in askers {
                    self.tell_region(
                        region,
                        ShardHome {
                            shard: shard.clone(),
                            region: home.clone(),
                        },
                    );
                }
                continue;
            }
            requests.insert(shard.clone(), askers[0].clone());
        }
        // Shards no region can host now are asked for again by their
        // regions.
        let allocated = self.allocate_all(requests).await;
        if allocated.len() > 1 {
            tracing::debug!(
                "sharding: coordinator of `{}` allocated {} requested shards together",
                E::TYPE_NAME,
                allocated.len()
            );
        }
        for (shard, home) in allocated {
            if self.flushing.contains_key(&shard) {
                continue;
            }
            for region in &requested[&shard] {
                if *region != home {
                    self.tell_region(
                        region,
                        ShardHome {
                            shard: shard.clone(),
                            region: home.clone(),
                        },
                    );
                }
            }
        }
    }

    async fn on_shard_started(&mut self, msg: ShardStarted) {
        if matches!(self.unconfirmed.get(&msg.shard), Some((r, _)) if *r == msg.region) {
            self.unconfirmed.remove(&msg.shard);
        }
        // The new home runs the shard: the old one may send what it holds
        // (not before, or those messages would wait behind the new home's
        // own).
        if let Some(f) = self.flushing.get(&msg.shard) {
            if f.home.as_ref() == Some(&msg.region) {
                let from = f.from.clone();
                self.tell_region(
                    &from,
                    FlushShard {
                        shard: msg.shard,
                        home: msg.region,
                    },
                );
            }
        }
    }

    /// Comes from the new home, behind the messages the old home held.
    async fn on_shard_flushed(&mut self, msg: ShardFlushed) {
        let done = self.flushing.get(&msg.shard).is_some_and(|f| {
            f.from == msg.region && self.state.shards.get(&msg.shard) == f.home.as_ref()
        });
        if done {
            self.flushed(&msg.shard, false);
        }
    }

    async fn on_begin_hand_off_ack(&mut self, msg: BeginHandOffAck, ctx: &mut Context<Self>) {
        let progress = match self.rebalancing.get_mut(&msg.shard) {
            Some(w) if w.answered_by(msg.attempt) => w.acked(&msg.region),
            // Of an abandoned attempt, or none running.
            _ => return,
        };
        self.advance(&msg.shard, progress, false, ctx).await;
    }

    async fn on_shard_stopped(&mut self, msg: ShardStopped, ctx: &mut Context<Self>) {
        let progress = match self.rebalancing.get_mut(&msg.shard) {
            Some(w) if w.answered_by(msg.attempt) => w.stopped(&msg.region),
            // An answer to an earlier attempt: this one's `HandOff` gets
            // its own.
            Some(_) => return,
            None => {
                // The shard stopped outside a running hand-off (one given
                // up that finished after all, or one a previous coordinator
                // began). Regions were told it stays there and may be
                // sending to it directly: a new attempt makes each of them
                // acknowledge behind what it sent before the shard moves.
                if self.state.shards.get(&msg.shard) == Some(&msg.region)
                    && !self.flushing.contains_key(&msg.shard)
                    && !self.start_hand_off(msg.shard.clone(), ctx)
                {
                    // No attempt now (a region is unreachable): the shard
                    // runs again where every region sends.
                    self.host(&msg.shard, &msg.region, Instant::now());
                }
                return;
            }
        };
        self.advance(&msg.shard, progress, msg.holding, ctx).await;
    }

    async fn on_graceful_shutdown(&mut self, msg: GracefulShutdownReq, ctx: &mut Context<Self>) {
        let region = msg.region;
        let shards = self.state.regions.get(&region).cloned().unwrap_or_default();
        if self.shutting_down.insert(region.clone()) {
            tracing::info!(
                "sharding: region {region} of `{}` shuts down; handing off its {} shards",
                E::TYPE_NAME,
                shards.len()
            );
        }
        for s in shards {
            self.start_hand_off(s, ctx);
        }
    }

    async fn on_region_stopped(&mut self, msg: RegionStopped) {
        self.region_gone(&msg.region).await;
    }

    async fn on_membership(&mut self, msg: MembershipChanged) {
        self.refresh_cluster_state().await;
        if let ClusterEvent::MemberRemoved(m, _) = msg.0 {
            // What a removed member held for shards it handed off is lost
            // with it: their new homes wait no longer. (A region that
            // stopped gracefully sent `ShardFlushed` before it stopped.)
            let lost: Vec<ShardId> = self
                .flushing
                .iter()
                .filter(|(_, f)| f.from == m.node)
                .map(|(s, _)| s.clone())
                .collect();
            for s in lost {
                self.flushed(&s, true);
                self.flushing.remove(&s);
            }
            self.region_gone(&m.node).await;
        }
        // A member Up may complete `min-nr-of-members` for regions that
        // registered before: remembered shards need not wait for a tick.
        self.allocate_remembered().await;
    }

    async fn on_tick(&mut self, _msg: RebalanceTick, ctx: &mut Context<Self>) {
        // Reachability decides whether hand-offs begin: not only from the
        // membership events (a refresh that failed there is made up here).
        self.refresh_cluster_state().await;
        // HostShard not confirmed in time: ask again.
        let now = Instant::now();
        let late: Vec<(ShardId, RegionId)> = self
            .unconfirmed
            .iter()
            .filter(|(_, (_, at))| now.duration_since(*at) >= self.settings.shard_start_timeout)
            .map(|(s, (r, _))| (s.clone(), r.clone()))
            .collect();
        for (shard, region) in late {
            self.host(&shard, &region, now);
        }
        // Hand-offs that failed by now.
        let timeout = self.settings.handoff_timeout;
        let failed: Vec<ShardId> = self
            .rebalancing
            .iter()
            .filter(|(_, w)| w.is_overdue(now, timeout) && !self.waits_for_cut_off_regions(w))
            .map(|(s, _)| s.clone())
            .collect();
        for s in failed {
            self.advance(&s, HandOffProgress::Failed, false, ctx).await;
        }
        self.abandoned
            .retain(|_, at| now.duration_since(*at) < timeout);
        // Flushes that did not complete in time (the old home's messages
        // were lost on the way): the new home stops waiting for them.
        let late: Vec<ShardId> = self
            .flushing
            .iter()
            .filter(|(_, f)| {
                f.home.is_some() && now.duration_since(f.since) >= self.settings.handoff_timeout
            })
            .map(|(s, _)| s.clone())
            .collect();
        for s in late {
            tracing::warn!(
                "sharding: the old home of shard {s} of `{}` did not pass on the messages it held                  within handoff-timeout; its new home is announced without them",
                E::TYPE_NAME
            );
            self.flushed(&s, true);
        }
        // Remembered shards without a home (none could host them before),
        // and allocated shards whose remembering failed.
        self.allocate_remembered().await;
        let unremembered: Vec<ShardId> = match &self.remembered {
            Some((_, known)) => self
                .state
                .shards
                .keys()
                .filter(|s| !known.contains(*s))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        if let Some(remembered) = self.remember_shards(&unremembered).await {
            if let Some((_, known)) = &mut self.remembered {
                known.extend(remembered);
            }
        }
        if !self.rebalancing.is_empty() {
            return;
        }
        // Graceful shutdowns whose shards were allocated meanwhile.
        let leaving: Vec<ShardId> = self
            .shutting_down
            .iter()
            .flat_map(|r| self.state.regions.get(r).cloned().unwrap_or_default())
            .collect();
        for s in leaving {
            self.start_hand_off(s, ctx);
        }
        if !self.rebalancing.is_empty() {
            return;
        }
        // No hand-off could begin (and a strategy's choice would be lost).
        if self.unreachable_router().is_some() {
            return;
        }
        let current = self.state.allocations(|r| self.member_status(r).is_some());
        let me = self.cluster.self_node().clone();
        let view = ClusterView::new(&self.cluster_state, &me);
        let in_progress = BTreeSet::new();
        let mut moves = self.strategy.rebalance(&current, &in_progress, &view);
        // A shard whose hand-off was abandoned lately (a region's link to
        // its home stalled) is left where it is for `handoff-timeout`: each
        // attempt holds its messages in the regions that acknowledged.
        moves.retain(|s| match self.abandoned.get(s) {
            Some(_) => {
                tracing::info!(
                    "sharding: shard {s} of `{}` is not moved this round: its last hand-off was \
                     abandoned less than handoff-timeout ago",
                    E::TYPE_NAME
                );
                false
            }
            None => true,
        });
        if !moves.is_empty() {
            tracing::info!(
                "sharding: rebalancing {} shards of `{}`",
                moves.len(),
                E::TYPE_NAME
            );
        }
        for s in moves {
            self.start_hand_off(s, ctx);
        }
    }
}

impl<E: Entity> ShardCoordinator<E> {
    /// Tells every region and proxy that `shard` lives at `home` (`home`
    /// itself only if `including_home`).
    fn tell_home_to_all(&mut self, shard: &ShardId, home: &RegionId, including_home: bool) {
        for r in self.all_routers() {
            if including_home || r != *home {
                self.tell_region(
                    &r,
                    ShardHome {
                        shard: shard.clone(),
                        region: home.clone(),
                    },
                );
            }
        }
    }

    /// The homes a registering region learns: not those of shards that
    /// are moving (it hears of them when they have moved).
    fn homes(&self) -> Vec<(ShardId, RegionId)> {
        self.state
            .shards
            .iter()
            .filter(|(s, _)| !self.rebalancing.contains_key(*s) && !self.flushing.contains_key(*s))
            .map(|(s, r)| (s.clone(), r.clone()))
            .collect()
    }
}
