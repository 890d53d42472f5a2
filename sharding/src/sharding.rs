//! `ClusterSharding`: the extension that starts entity types on a node
//! and hands out [`EntityRef`]s.

use crate::allocation::{LeastShardAllocationStrategy, ShardAllocationStrategy};
use crate::coordinator::ShardCoordinator;
use crate::entity::{Entity, EntityRegistrar};
use crate::entity_ref::EntityRef;
use crate::error::ShardingError;
use crate::extractor::{EntityId, HashShardIdExtractor, ShardIdExtractor};
use crate::protocol::*;
use crate::queries::{
    ClusterShardingStats, CurrentShardRegionState, GetRegionState, GetRegionStats,
};
use crate::region::{
    region_name, GracefulShutdown, IsRegistered, ReaderCache, Region, RegionShared,
    SetActiveEntityLimit,
};
use crate::settings::{PassivationSettings, ShardingSettings};
use crate::shard_envelope;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troupe_cluster::coordinated_shutdown::{Phase, Reason};
use troupe_cluster::ddata::Replicator;
use troupe_cluster::singleton::{self, ClusterSingletonSettings};
use troupe_cluster::Cluster;
use troupe_cluster::MemberStatus;
use troupe_core::prelude::*;
use troupe_core::Props;

/// Makes an entity from its id (the actor's name when the id is a valid
/// one: one factory for every entity of the type, the id shared with the
/// actor's name).
type MakeEntity<E> = troupe_core::NamedFactory<E>;
/// Tells an entity to stop for a hand-off.
type StopEntity<E> = Arc<dyn Fn(&ActorRef<E>) + Send + Sync>;

/// Makes an entity's actor from its id, and stops it for a hand-off.
pub(crate) struct EntityFactory<E: Entity> {
    pub(crate) make: MakeEntity<E>,
    pub(crate) stop: StopEntity<E>,
}

impl<E: Entity> Clone for EntityFactory<E> {
    fn clone(&self) -> Self {
        EntityFactory {
            make: self.make.clone(),
            stop: self.stop.clone(),
        }
    }
}

/// How an entity type is started: how to make an entity from its id, how
/// to stop it for a hand-off, how ids map to shards, and where shards go.
///
/// ```
/// use troupe_sharding::{EntityConfig, HashShardIdExtractor};
/// # use troupe_core::prelude::*;
/// # #[derive(Default)] struct Counter { id: String }
/// # impl Actor for Counter {}
/// # #[troupe_sharding::entity(name = "doc-counter")] impl Counter {}
/// let config = EntityConfig::new(|id| Counter { id: id.to_string() })
///     .with_shard_id_extractor(HashShardIdExtractor::new(100));
/// ```
pub struct EntityConfig<E: Entity> {
    factory: EntityFactory<E>,
    extractor: Option<Arc<dyn ShardIdExtractor>>,
    strategy: Option<Arc<dyn Fn() -> Box<dyn ShardAllocationStrategy> + Send + Sync>>,
}

impl<E: Entity> EntityConfig<E> {
    /// Entities made by `factory` from their id (called again for every
    /// incarnation: after a hand-off, or a restart by supervision).
    pub fn new(factory: impl Fn(EntityId) -> E + Send + Sync + 'static) -> Self {
        EntityConfig {
            factory: EntityFactory {
                make: troupe_core::NamedFactory::new(move |id: &EntityId| factory(id.clone())),
                // An idle entity stops at once, inside the shard's
                // activation, rather than as a task of its own.
                stop: Arc::new(|e: &ActorRef<E>| e.poison_pill_here()),
            },
            extractor: None,
            strategy: None,
        }
    }

    /// The message each entity gets when its shard is handed off, instead
    /// of the default poison pill (which stops it after the messages
    /// already queued). The entity must stop itself when it gets it
    /// (`ctx.stop()`); one that has not stopped after `handoff-timeout` is
    /// stopped.
    pub fn with_stop_message<M>(mut self, msg: M) -> Self
    where
        M: Message + Clone + Sync,
        E: Handler<M>,
    {
        self.factory.stop = Arc::new(move |e: &ActorRef<E>| {
            if e.tell(msg.clone()).is_err() {
                e.stop();
            }
        });
        self
    }

    /// Maps entity ids to shards (default: [`HashShardIdExtractor`] over
    /// `number-of-shards`). It must be the same on every node.
    pub fn with_shard_id_extractor(mut self, extractor: impl ShardIdExtractor) -> Self {
        self.extractor = Some(Arc::new(extractor));
        self
    }

    /// The allocation strategy of the coordinator (default: the least-shard
    /// strategy with the settings' limits). `make` is called each time a
    /// coordinator starts (after a take-over, a fresh strategy).
    pub fn with_allocation_strategy<S: ShardAllocationStrategy>(
        mut self,
        make: impl Fn() -> S + Send + Sync + 'static,
    ) -> Self {
        self.strategy = Some(Arc::new(move || Box::new(make())));
        self
    }
}

/// How this node routed the messages of one entity type (those sent here,
/// and those that came from other nodes for shards hosted here). Messages
/// not counted in `via_region` or `via_shard` went directly to the entity
/// or to its node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoutingStats {
    /// Messages that went through the region actor: for shards whose home
    /// was not known or that were moving, and behind such messages (to
    /// keep their order).
    pub via_region: u64,
    /// Messages that went to the actor of a shard hosted here without the
    /// region: for entities that were not running (the shard starts them)
    /// and behind such messages.
    pub via_shard: u64,
    /// Messages refused because the region's buffer was full.
    pub refused: u64,
    /// Times a message, a hand-off acknowledgement or a flush marker that
    /// the region sends found the queue to its node full, and waited in
    /// the region to be sent again in order (a congested link: nothing is
    /// lost, it is late). Each try counts: one that finds the queue full
    /// again at its next try (when the queue had room again, which others
    /// may have taken) counts again.
    pub queue_full_waits: u64,
}

/// One started entity type on this node.
struct TypeEntry {
    type_id: TypeId,
    /// `Arc<RegionShared<E>>`.
    shared: Arc<dyn Any + Send + Sync>,
    region: AnyActorRef,
    proxy_only: bool,
    /// The type's queries without its type (for management HTTP).
    queries: ErasedQueries,
}

struct Inner {
    system: ActorSystem,
    cluster: Cluster,
    replicator: Replicator,
    types: Mutex<HashMap<&'static str, TypeEntry>>,
}

/// Cluster sharding on one node: start entity types with
/// [`start`](Self::start) (or [`start_proxy`](Self::start_proxy) on nodes
/// that host none), and reach entities anywhere in the cluster with
/// [`entity_ref`](Self::entity_ref).
///
/// One instance per actor system: [`ClusterSharding::new`] returns the
/// same one again.
#[derive(Clone)]
pub struct ClusterSharding {
    inner: Arc<Inner>,
}

impl fmt::Debug for ClusterSharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterSharding")
            .field("node", self.inner.cluster.self_node())
            .finish()
    }
}

impl ClusterSharding {
    /// Cluster sharding of `system` (created on first use). Uses the
    /// system's distributed-data replicator, starting one if there is
    /// none.
    pub fn new(system: &ActorSystem, cluster: &Cluster) -> Result<ClusterSharding, ShardingError> {
        if let Some(s) = system.extension::<ClusterSharding>() {
            return Ok((*s).clone());
        }
        let replicator = Replicator::get_or_start(system, cluster)
            .map_err(|e| ShardingError::Cluster(e.to_string()))?;
        let made = ClusterSharding {
            inner: Arc::new(Inner {
                system: system.clone(),
                cluster: cluster.clone(),
                replicator,
                types: Mutex::new(HashMap::new()),
            }),
        };
        Ok((*system.extension_or_init(|| made)).clone())
    }

    /// The sharding of `system`, if [`new`](Self::new) was called.
    pub fn get(system: &ActorSystem) -> Option<ClusterSharding> {
        system.extension::<ClusterSharding>().map(|s| (*s).clone())
    }

    /// The cluster this sharding belongs to.
    pub fn cluster(&self) -> &Cluster {
        &self.inner.cluster
    }

    /// Starts entity type `E` on this node with entities made by
    /// `factory`: its region (which hosts shards here unless this node
    /// lacks the settings' role, in which case it is a proxy), and the
    /// coordinator's singleton manager.
    pub fn start<E: Entity>(
        &self,
        factory: impl Fn(EntityId) -> E + Send + Sync + 'static,
        settings: ShardingSettings,
    ) -> Result<(), ShardingError> {
        self.start_entity(EntityConfig::new(factory), settings)
    }

    /// As [`start`](Self::start), with a full [`EntityConfig`].
    pub fn start_entity<E: Entity>(
        &self,
        config: EntityConfig<E>,
        settings: ShardingSettings,
    ) -> Result<(), ShardingError> {
        let hosts = match &settings.role {
            None => true,
            Some(role) => self.inner.cluster.self_roles().contains(role),
        };
        self.start_region(config, settings, !hosts)
    }

    /// Starts a proxy-only region of `E`: it hosts nothing and routes
    /// everything (for nodes without the entity type's role, or clients).
    pub fn start_proxy<E: Entity>(&self, settings: ShardingSettings) -> Result<(), ShardingError> {
        let config = EntityConfig::new(|_id: EntityId| -> E {
            unreachable!("a proxy-only region never starts entities")
        });
        self.start_region(config, settings, true)
    }

    fn start_region<E: Entity>(
        &self,
        config: EntityConfig<E>,
        settings: ShardingSettings,
        proxy_only: bool,
    ) -> Result<(), ShardingError> {
        settings.validate()?;
        let inner = &self.inner;
        if settings.remember_entities && !proxy_only {
            check_remember_settings::<E>(&settings, &inner.replicator)?;
        }
        let system = &inner.system;
        let mut types = inner.types.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = types.get(E::TYPE_NAME) {
            return Err(if entry.type_id == TypeId::of::<E>() {
                ShardingError::AlreadyStarted(E::TYPE_NAME)
            } else {
                ShardingError::DuplicateTypeName(E::TYPE_NAME)
            });
        }
        let mut registrar = EntityRegistrar::<E>::new(system);
        E::register_messages(&mut registrar)?;
        register_protocol::<E>(system).map_err(ShardingError::Register)?;

        let coordinator_name = format!("sharding-coordinator-{}", E::TYPE_NAME);
        let singleton_settings = ClusterSingletonSettings {
            role: settings.role.clone(),
            ..ClusterSingletonSettings::default()
        };
        if !proxy_only {
            let (cluster, replicator, s, sys) = (
                inner.cluster.clone(),
                inner.replicator.clone(),
                settings.clone(),
                system.clone(),
            );
            let strategy = config.strategy.clone();
            let (abs, rel) = (
                settings.rebalance_absolute_limit,
                settings.rebalance_relative_limit,
            );
            singleton::start(
                system,
                &inner.cluster,
                &coordinator_name,
                move || {
                    let strategy: Box<dyn ShardAllocationStrategy> = match &strategy {
                        Some(make) => make(),
                        None => Box::new(LeastShardAllocationStrategy::new(abs, rel)),
                    };
                    ShardCoordinator::<E>::new(
                        sys.clone(),
                        cluster.clone(),
                        replicator.clone(),
                        s.clone(),
                        strategy,
                    )
                },
                singleton_settings.clone(),
            )
            .map_err(|e| ShardingError::Cluster(e.to_string()))?;
        }
        let coordinator = singleton::proxy::<ShardCoordinator<E>>(
            system,
            &inner.cluster,
            &coordinator_name,
            singleton_settings,
        )
        .map_err(|e| ShardingError::Cluster(e.to_string()))?;

        let extractor = config
            .extractor
            .unwrap_or_else(|| Arc::new(HashShardIdExtractor::new(settings.number_of_shards)));
        let mut shared = RegionShared::<E>::new(
            system.clone(),
            extractor,
            settings,
            inner.replicator.clone(),
        );
        for manifest in registrar.manifests {
            if let Ok(d) = system.encoded_delivery::<E>(manifest) {
                shared.deliveries.insert(manifest, d);
            }
        }
        let shared = Arc::new(shared);
        let region = Region::new(
            shared.clone(),
            inner.cluster.clone(),
            coordinator,
            proxy_only,
            config.factory,
        );
        let region = system
            .spawn_system_actor(Props::new(region).with_name(region_name(E::TYPE_NAME)))
            .map_err(|e| ShardingError::Spawn(e.to_string()))?;
        // Published before `start` returns: messages sent right away are
        // queued for the region, which is not running yet.
        let _ = shared.region.set(region.clone());
        // Entities' messages from other nodes are routed on the
        // connection's reader, with a receiver of its own: a strong
        // reference taken once (the registry keeps a weak one: it outlives
        // the region) and a cache of routes, so that a message takes no
        // shared lock and writes no reference count on the way to its
        // entity but the entity table's lock.
        let weak = Arc::downgrade(&shared);
        system.register_receiver_per_connection::<Region<E>, _>(
            shard_envelope::MANIFEST,
            move || {
                let shared = weak.upgrade();
                let mut cache = ReaderCache::default();
                move |m: troupe_core::InboundMessage<'_>| match &shared {
                    Some(shared) => shared.receive_remote(m, &mut cache),
                    None => Err(troupe_core::DeliverError::Stopped),
                }
            },
        );
        if !proxy_only {
            // Hand every shard off before the node leaves the cluster.
            let r = region.clone();
            let shutdown = inner.cluster.coordinated_shutdown().clone();
            let cluster = inner.cluster.clone();
            let timeout = shutdown.timeout(Phase::ClusterShardingShutdownRegion);
            let added = inner.cluster.coordinated_shutdown().add_task(
                Phase::ClusterShardingShutdownRegion,
                format!("sharding-region-{}", E::TYPE_NAME),
                move || async move {
                    // A downed node is no longer in the cluster: there is
                    // no one to hand off to (as Pekko's region).
                    if cluster.is_terminated() || shutdown.reason() == Some(Reason::ClusterDowning)
                    {
                        return;
                    }
                    // Also when the shutdown started for another reason
                    // (`ActorSystem::shutdown`, say) just as this node was
                    // downed.
                    let me = cluster.self_node();
                    let downed = cluster.state().await.map_or(true, |s| {
                        s.members
                            .iter()
                            .any(|m| &m.node == me && m.status == MemberStatus::Down)
                    });
                    if downed {
                        return;
                    }
                    let _ = r.ask_timeout(GracefulShutdown, timeout).await;
                },
            );
            if let Err(e) = added {
                tracing::warn!(
                    "sharding: the region of `{}` could not join the coordinated shutdown: {e}",
                    E::TYPE_NAME
                );
            }
        }
        tracing::info!(
            "sharding: entity type `{}` started on {}{}",
            E::TYPE_NAME,
            inner.cluster.self_node(),
            if proxy_only { " (proxy only)" } else { "" }
        );
        types.insert(
            E::TYPE_NAME,
            TypeEntry {
                type_id: TypeId::of::<E>(),
                shared: shared as Arc<dyn Any + Send + Sync>,
                region: region.to_any(),
                proxy_only,
                queries: ErasedQueries::of::<E>(),
            },
        );
        Ok(())
    }

    fn shared<E: Entity>(&self) -> Result<Arc<RegionShared<E>>, ShardingError> {
        let types = self.inner.types.lock().unwrap_or_else(|e| e.into_inner());
        types
            .get(E::TYPE_NAME)
            .filter(|e| e.type_id == TypeId::of::<E>())
            .and_then(|e| e.shared.clone().downcast::<RegionShared<E>>().ok())
            .ok_or_else(|| ShardingError::NotStarted(E::TYPE_NAME.to_string()))
    }

    fn region<E: Entity>(&self) -> Result<ActorRef<Region<E>>, ShardingError> {
        let types = self.inner.types.lock().unwrap_or_else(|e| e.into_inner());
        types
            .get(E::TYPE_NAME)
            .and_then(|e| e.region.downcast::<Region<E>>())
            .ok_or_else(|| ShardingError::NotStarted(E::TYPE_NAME.to_string()))
    }

    /// A reference to entity `id` of type `E`, wherever it lives (`E` must
    /// be started or proxied on this node).
    pub fn entity_ref<E: Entity>(
        &self,
        id: impl Into<EntityId>,
    ) -> Result<EntityRef<E>, ShardingError> {
        let shared = self.shared::<E>()?;
        Ok(EntityRef::new(id.into(), shared))
    }

    /// How this node's messages to `E` were routed so far.
    pub fn routing_stats<E: Entity>(&self) -> Result<RoutingStats, ShardingError> {
        let shared = self.shared::<E>()?;
        Ok(RoutingStats {
            via_region: shared.via_region.load(std::sync::atomic::Ordering::Relaxed),
            via_shard: shared.via_shard.load(std::sync::atomic::Ordering::Relaxed),
            refused: shared.dropped.load(std::sync::atomic::Ordering::Relaxed),
            queue_full_waits: shared
                .queue_full_waits
                .load(std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// The entity types started (or proxied) on this node.
    pub fn entity_type_names(&self) -> Vec<&'static str> {
        let types = self.inner.types.lock().unwrap_or_else(|e| e.into_inner());
        let mut names: Vec<&'static str> = types.keys().copied().collect();
        names.sort_unstable();
        names
    }

    /// True if this node's region of `E` only routes (hosts nothing).
    pub fn is_proxy_only<E: Entity>(&self) -> Result<bool, ShardingError> {
        let types = self.inner.types.lock().unwrap_or_else(|e| e.into_inner());
        types
            .get(E::TYPE_NAME)
            .map(|e| e.proxy_only)
            .ok_or_else(|| ShardingError::NotStarted(E::TYPE_NAME.to_string()))
    }

    /// The shards hosted here and their running entities.
    pub async fn region_state<E: Entity>(&self) -> Result<CurrentShardRegionState, ShardingError> {
        let region = self.region::<E>()?;
        region
            .ask_timeout(GetRegionState, Duration::from_secs(10))
            .await
            .map_err(|_| ShardingError::Timeout)
    }

    /// Changes the active-entity limit of this node's region of `E` at run
    /// time (Akka's `SetActiveEntityLimit`): its shards get their new
    /// shares and passivate what no longer fits. The limit is per region,
    /// so call it on every node that should change. A region whose
    /// passivation strategy has no limit keeps none (and logs a warning).
    pub fn set_active_entity_limit<E: Entity>(&self, limit: usize) -> Result<(), ShardingError> {
        if limit == 0 {
            return Err(ShardingError::Settings(
                "the active-entity limit must be at least 1".to_string(),
            ));
        }
        let region = self.region::<E>()?;
        region
            .tell(SetActiveEntityLimit(limit))
            .map_err(|_| ShardingError::NotStarted(E::TYPE_NAME.to_string()))
    }

    /// True once this node's region of `E` has registered with the
    /// coordinator (Akka's sharding readiness check).
    pub async fn is_registered<E: Entity>(&self) -> Result<bool, ShardingError> {
        let region = self.region::<E>()?;
        region
            .ask_timeout(IsRegistered, Duration::from_secs(10))
            .await
            .map_err(|_| ShardingError::Timeout)
    }

    /// Running entities per shard in every region of `E` in the cluster;
    /// regions that do not answer within `timeout` are listed as failed.
    pub async fn cluster_stats<E: Entity>(
        &self,
        timeout: Duration,
    ) -> Result<ClusterShardingStats, ShardingError> {
        self.region::<E>()?;
        // Only members with the entity type's role host shards; the
        // others run proxies, which are not regions (as Pekko, whose
        // stats list the regions the coordinator knows). A proxy on a
        // member with the role says so in its answer.
        let role = self.shared::<E>()?.settings.role.clone();
        let state = self
            .inner
            .cluster
            .state()
            .await
            .map_err(|e| ShardingError::Cluster(e.to_string()))?;
        let mut stats = ClusterShardingStats::default();
        let asks: Vec<_> = state
            .members
            .iter()
            .filter(|m| {
                matches!(
                    m.status,
                    troupe_cluster::MemberStatus::Up | troupe_cluster::MemberStatus::Leaving
                )
            })
            .filter(|m| role.as_deref().is_none_or(|r| m.has_role(r)))
            .map(|m| {
                let path = format!("{}/system/{}", m.node.address, region_name(E::TYPE_NAME));
                let ask = self
                    .inner
                    .system
                    .resolve::<Region<E>>(&path)
                    .map(|r| r.ask_timeout(GetRegionStats, timeout));
                (m.node.address.to_string(), ask)
            })
            .collect();
        for (node, ask) in asks {
            match ask {
                Ok(ask) => match ask.await {
                    Ok(Some(s)) => {
                        stats.regions.insert(node, s);
                    }
                    Ok(None) => {}
                    Err(_) => stats.failed.push(node),
                },
                Err(_) => stats.failed.push(node),
            }
        }
        Ok(stats)
    }
}

/// Registers what regions and coordinators of `E` send each other.
fn register_protocol<E: Entity>(system: &ActorSystem) -> Result<(), troupe_core::RegisterError> {
    system
        .register::<ShardCoordinator<E>, Register>()?
        .register::<ShardCoordinator<E>, RegisterProxy>()?
        .register::<ShardCoordinator<E>, GetShardHome>()?
        .register::<ShardCoordinator<E>, ShardStarted>()?
        .register::<ShardCoordinator<E>, BeginHandOffAck>()?
        .register::<ShardCoordinator<E>, ShardStopped>()?
        .register::<ShardCoordinator<E>, ShardFlushed>()?
        .register::<ShardCoordinator<E>, GracefulShutdownReq>()?
        .register::<ShardCoordinator<E>, RegionStopped>()?
        .register::<Region<E>, RegisterAck>()?
        .register::<Region<E>, ShardHome>()?
        .register::<Region<E>, HostShard>()?
        .register::<Region<E>, BeginHandOff>()?
        .register::<Region<E>, HandOff>()?
        .register::<Region<E>, BeginHandOffAck>()?
        .register::<Region<E>, FlushShard>()?
        .register::<Region<E>, ShardFlushed>()?
        .register::<Region<E>, GetRegionState>()?
        .register::<Region<E>, GetRegionStats>()?;
    Ok(())
}

// ---------------------------------------------------------------------------
// Queries by type name (for management HTTP, `crate::management`): the
// generic queries above, reached through function pointers kept per type.

/// A boxed query future.
type QueryFuture<T> = Pin<Box<dyn Future<Output = Result<T, ShardingError>> + Send>>;

/// The queries of one entity type, without its type.
#[derive(Clone, Copy)]
struct ErasedQueries {
    region_state: fn(ClusterSharding) -> QueryFuture<CurrentShardRegionState>,
    is_registered: fn(ClusterSharding) -> QueryFuture<bool>,
    cluster_stats: fn(ClusterSharding, Duration) -> QueryFuture<ClusterShardingStats>,
}

impl ErasedQueries {
    fn of<E: Entity>() -> Self {
        ErasedQueries {
            region_state: |s| Box::pin(async move { s.region_state::<E>().await }),
            is_registered: |s| Box::pin(async move { s.is_registered::<E>().await }),
            cluster_stats: |s, timeout| {
                Box::pin(async move { s.cluster_stats::<E>(timeout).await })
            },
        }
    }
}

impl ClusterSharding {
    fn queries_of(&self, type_name: &str) -> Result<ErasedQueries, ShardingError> {
        let types = self.inner.types.lock().unwrap_or_else(|e| e.into_inner());
        types
            .get(type_name)
            .map(|e| e.queries)
            .ok_or_else(|| ShardingError::NotStarted(type_name.to_string()))
    }

    /// As [`region_state`](Self::region_state), for the entity type named
    /// `type_name` (`NotStarted` if it is not started on this node).
    pub async fn region_state_of(
        &self,
        type_name: &str,
    ) -> Result<CurrentShardRegionState, ShardingError> {
        (self.queries_of(type_name)?.region_state)(self.clone()).await
    }

    /// As [`is_registered`](Self::is_registered), for the entity type named
    /// `type_name`.
    pub async fn is_registered_of(&self, type_name: &str) -> Result<bool, ShardingError> {
        (self.queries_of(type_name)?.is_registered)(self.clone()).await
    }

    /// As [`cluster_stats`](Self::cluster_stats), for the entity type named
    /// `type_name`.
    pub async fn cluster_stats_of(
        &self,
        type_name: &str,
        timeout: Duration,
    ) -> Result<ClusterShardingStats, ShardingError> {
        (self.queries_of(type_name)?.cluster_stats)(self.clone(), timeout).await
    }
}

/// Remembered entities: refuses an automatic passivation that was asked
/// for (it would stop entities that must keep running; Akka turns it off
/// quietly), and says when the remembered ids will not survive a restart
/// of the whole cluster.
fn check_remember_settings<E: Entity>(
    settings: &ShardingSettings,
    replicator: &Replicator,
) -> Result<(), ShardingError> {
    // Akka's default (idle entities) is turned off; a strategy that was
    // asked for is an error.
    if settings.passivation != PassivationSettings::default() && settings.passivation.is_enabled() {
        return Err(ShardingError::Settings(format!(
            "`sharding.passivation` ({}) would stop the remembered entities of `{}` \
             (`sharding.remember-entities = true`), which must keep running: set \
             `[sharding.passivation] strategy = \"none\"`, or turn remember-entities off \
             (explicit passivation with `ctx.passivate()` works with both)",
            settings.passivation,
            E::TYPE_NAME
        )));
    }
    let probe = crate::internal_keys::remembered_shards_key(E::TYPE_NAME);
    if !replicator.is_durable(&probe) {
        tracing::warn!(
            "sharding: `{}` remembers its entities in distributed data, but its keys are not \
             durable (add \"shard-*\" to the replicator's durable keys): they survive the loss \
             of a minority of nodes, not a restart of the whole cluster",
            E::TYPE_NAME
        );
    }
    Ok(())
}
