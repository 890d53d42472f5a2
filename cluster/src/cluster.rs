//! The cluster extension of an actor system: start it, join, leave, down,
//! read the state and subscribe to events.

use crate::core::{self, ClusterCore, GetState, GetStats, GossipStats, Subscribe, UserAction};
use crate::events::{ClusterEvent, CurrentClusterState};
use crate::member::UniqueAddress;
use crate::settings::{ClusterSettings, DowningStrategy};
use std::fmt;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;
use troupe_core::prelude::*;
use troupe_core::remote::Address;

/// Why the cluster extension could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterError(pub String);

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClusterError {}

/// A node's membership in a cluster.
///
/// ```no_run
/// use troupe_cluster::{Cluster, ClusterSettings};
/// use troupe_core::prelude::*;
/// use troupe_core::remote::RemoteSettings;
///
/// troupe_core::rt::block_on(async {
///     let system = ActorSystem::builder("shop")
///         .remote(RemoteSettings::new("127.0.0.1:2552").with_secret("s3cret"))
///         .build()
///         .unwrap();
///     let mut settings = ClusterSettings::default();
///     settings.seed_nodes = vec!["troupe://shop@127.0.0.1:2552".parse().unwrap()];
///     let cluster = Cluster::start(&system, settings).unwrap();
///     let (snapshot, events) = cluster.subscribe().await.unwrap();
///     println!("members now: {:?}", snapshot.members);
///     while let Ok(event) = events.recv().await {
///         println!("{event:?}");
///     }
/// });
/// ```
#[derive(Clone)]
pub struct Cluster {
    core: ActorRef<ClusterCore>,
    self_node: UniqueAddress,
    /// Local work that must finish before this node confirms Exiting.
    exit_blockers: Arc<AtomicUsize>,
    down_removal_margin: Option<Duration>,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("self_node", &self.self_node)
            .finish()
    }
}

impl Cluster {
    /// Starts the cluster extension on `system`, which must have remoting.
    /// With seed nodes in `settings`, it starts joining them at once.
    pub fn start(system: &ActorSystem, settings: ClusterSettings) -> Result<Cluster, ClusterError> {
        settings
            .validate()
            .map_err(|e| ClusterError(e.to_string()))?;
        let remoting = system.remoting().ok_or_else(|| {
            ClusterError("the cluster needs remoting enabled on the actor system".into())
        })?;
        let self_node = UniqueAddress::new(remoting.address().clone(), remoting.uid());
        match &settings.downing.strategy {
            DowningStrategy::None => tracing::warn!(
                "no downing strategy: unreachable members stay until someone downs them; this is unsafe \
                 for cluster singletons and sharding (configure a split brain resolver strategy)"
            ),
            DowningStrategy::AutoDownUnsafe { after } => tracing::warn!(
                "AUTO-DOWNING IS ON (after {after:?}): a network partition will split this cluster into \
                 two clusters. Never use it in production; use keep-majority or another split brain \
                 resolver strategy"
            ),
            _ => {}
        }
        core::register(system)
            .map_err(|e| ClusterError(format!("cannot register the cluster protocol: {e}")))?;
        let down_removal_margin = settings.down_removal_margin;
        let exit_blockers = Arc::new(AtomicUsize::new(0));
        let core = system
            .spawn_system_actor(ClusterCore::props(
                settings,
                self_node.clone(),
                exit_blockers.clone(),
            ))
            .map_err(|e| ClusterError(format!("cannot start the cluster core: {e}")))?;
        Ok(Cluster {
            core,
            self_node,
            exit_blockers,
            down_removal_margin,
        })
    }

    /// The count of local tasks that hold back this node's Exiting
    /// confirmation (each singleton hosted here adds one).
    pub(crate) fn exit_blockers(&self) -> &Arc<AtomicUsize> {
        &self.exit_blockers
    }

    /// How long after a downed member's removal its singletons may start
    /// elsewhere (`ClusterSettings::down_removal_margin`).
    pub(crate) fn down_removal_margin(&self) -> Option<Duration> {
        self.down_removal_margin
    }

    /// This node.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// This node's address.
    pub fn self_address(&self) -> &Address {
        &self.self_node.address
    }

    /// Joins the cluster of `address` (which may be this node's own
    /// address, to form a new cluster).
    pub fn join(&self, address: &Address) {
        self.join_seed_nodes(vec![address.clone()]);
    }

    /// Joins through these seed nodes (the first forms a new cluster if no
    /// other answers within `seed_node_timeout`).
    pub fn join_seed_nodes(&self, seeds: Vec<Address>) {
        let _ = self.core.tell(UserAction::JoinSeeds(seeds));
    }

    /// Asks the member at `address` to leave gracefully.
    pub fn leave(&self, address: &Address) {
        let _ = self.core.tell(UserAction::Leave(address.clone()));
    }

    /// Marks the member at `address` as Down.
    pub fn down(&self, address: &Address) {
        let _ = self.core.tell(UserAction::Down(address.clone()));
    }

    /// The current state as this node sees it.
    pub async fn state(&self) -> Result<CurrentClusterState, troupe_core::AskError> {
        self.core
            .ask_timeout(GetState, Duration::from_secs(10))
            .await
    }

    /// How much gossip this node has sent so far.
    pub async fn gossip_stats(&self) -> Result<GossipStats, troupe_core::AskError> {
        self.core
            .ask_timeout(GetStats, Duration::from_secs(10))
            .await
    }

    /// Subscribes to cluster events: the current state, then every change.
    pub async fn subscribe(
        &self,
    ) -> Result<(CurrentClusterState, async_channel::Receiver<ClusterEvent>), troupe_core::AskError>
    {
        let (tx, rx) = async_channel::unbounded();
        let snapshot = self
            .core
            .ask_timeout(Subscribe(tx), Duration::from_secs(10))
            .await?;
        Ok((snapshot, rx))
    }
}
