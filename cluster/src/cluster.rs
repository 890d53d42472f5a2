//! The cluster extension of an actor system: start it, join, leave, down,
//! read the state and subscribe to events.

use crate::coordinated_shutdown::{CoordinatedShutdown, Phase};
use crate::core::{
    self, ClusterCore, Delivery, DeliveryFailure, EventSink, ExitingCompleted, GetState, GetStats,
    GetSubscriptionCount, GossipStats, LeaveSelf, ShutdownCluster, Subscribe, SubscribeActor,
    Unsubscribe, UserAction, WhenExiting,
};
use crate::events::{ClusterEvent, CurrentClusterState};
use crate::member::UniqueAddress;
use crate::settings::{ClusterSettings, DowningStrategy};
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use troupe_core::prelude::*;
use troupe_core::remote::Address;
use troupe_core::rt;

/// Why the cluster extension could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterError(pub String);

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ClusterError {}

/// Why an actor could not subscribe to cluster events.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubscribeError {
    /// The cluster extension has stopped (this node was downed or removed,
    /// or the cluster was shut down): no events will come.
    ClusterStopped,
    /// Only local actors can subscribe (events are not sent over the wire).
    RemoteActor,
}

impl fmt::Display for SubscribeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubscribeError::ClusterStopped => f.write_str("the cluster extension has stopped"),
            SubscribeError::RemoteActor => {
                f.write_str("only a local actor can subscribe to cluster events")
            }
        }
    }
}

impl std::error::Error for SubscribeError {}

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
    down_removal_margin: Option<Duration>,
    shutdown: CoordinatedShutdown,
    /// This node's roles (fixed at start).
    self_roles: Arc<BTreeSet<String>>,
    /// Seed nodes were configured (cluster bootstrap then does not run).
    seed_nodes_configured: bool,
    /// `shutdown_after_unsuccessful_join_seed_nodes`.
    shutdown_after_unsuccessful_join: Option<Duration>,
    /// Someone asked this node to join ([`Cluster::join`],
    /// [`Cluster::join_seed_nodes`], or the management API): a running
    /// cluster bootstrap gives way to it.
    explicit_join: Arc<AtomicBool>,
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
        let self_roles = Arc::new(settings.roles.clone());
        let seed_nodes_configured = !settings.seed_nodes.is_empty();
        let shutdown_after_unsuccessful_join = settings.shutdown_after_unsuccessful_join_seed_nodes;
        let shutdown = CoordinatedShutdown::new(system, settings.coordinated_shutdown.clone());
        let core = system
            .spawn_system_actor(ClusterCore::props(
                remoting.clone(),
                settings,
                self_node.clone(),
                shutdown.clone(),
            ))
            .map_err(|e| ClusterError(format!("cannot start the cluster core: {e}")))?;
        add_shutdown_tasks(&shutdown, &core);
        if shutdown.settings().run_by_actor_system_terminate {
            if let Err(e) = shutdown.run_by_actor_system_shutdown(system) {
                tracing::warn!(
                    "ActorSystem::shutdown will not run the cluster's coordinated shutdown: {e}"
                );
            }
        }
        Ok(Cluster {
            core,
            self_node,
            down_removal_margin,
            shutdown,
            self_roles,
            seed_nodes_configured,
            shutdown_after_unsuccessful_join,
            explicit_join: Arc::new(AtomicBool::new(false)),
        })
    }

    /// True if this node was started with seed nodes
    /// ([`ClusterSettings::seed_nodes`]).
    pub fn has_configured_seed_nodes(&self) -> bool {
        self.seed_nodes_configured
    }

    /// `ClusterSettings::shutdown_after_unsuccessful_join_seed_nodes`.
    pub(crate) fn shutdown_after_unsuccessful_join(&self) -> Option<Duration> {
        self.shutdown_after_unsuccessful_join
    }

    /// True once [`join`](Self::join) or
    /// [`join_seed_nodes`](Self::join_seed_nodes) was called (by the
    /// application or the management API; not by cluster bootstrap).
    pub fn explicit_join_requested(&self) -> bool {
        self.explicit_join.load(Ordering::SeqCst)
    }

    /// Joins through `seeds` on behalf of cluster bootstrap (not an
    /// explicit join).
    pub(crate) fn bootstrap_join(&self, seeds: Vec<Address>) {
        let _ = self.core.tell(UserAction::JoinSeeds(seeds));
    }

    /// The cluster core actor.
    pub(crate) fn core(&self) -> &ActorRef<ClusterCore> {
        &self.core
    }

    /// This node's coordinated shutdown (one per cluster extension; clones
    /// of this handle share it). Run it to leave the cluster gracefully
    /// and stop the actor system; add tasks to it to take part.
    pub fn coordinated_shutdown(&self) -> &CoordinatedShutdown {
        &self.shutdown
    }

    /// True once the cluster extension has stopped on this node (it was
    /// downed or removed, or the cluster shut down): it takes no further
    /// part in the cluster.
    pub fn is_terminated(&self) -> bool {
        self.core.is_terminated()
    }

    /// How long after a downed member's removal its singletons may start
    /// elsewhere (`ClusterSettings::down_removal_margin`).
    pub(crate) fn down_removal_margin(&self) -> Option<Duration> {
        self.down_removal_margin
    }

    /// This node's roles.
    pub fn self_roles(&self) -> &BTreeSet<String> {
        &self.self_roles
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
        self.explicit_join.store(true, Ordering::SeqCst);
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

    /// Subscribes `actor` to cluster events: it is sent the
    /// [`CurrentClusterState`] first, then every [`ClusterEvent`], in
    /// order, until it stops (the subscription then ends by itself) or
    /// [`unsubscribe`](Self::unsubscribe)s. Subscribing again starts over
    /// with a fresh snapshot. An event that finds the actor's bounded
    /// mailbox full is lost (and logged).
    ///
    /// ```no_run
    /// use troupe_cluster::{Cluster, ClusterEvent, CurrentClusterState};
    /// use troupe_core::prelude::*;
    ///
    /// #[derive(Default)]
    /// struct Listener { members: usize }
    /// impl Actor for Listener {}
    ///
    /// #[handlers]
    /// impl Listener {
    ///     async fn snapshot(&mut self, s: CurrentClusterState, _ctx: &mut Context<Self>) {
    ///         self.members = s.members.len();
    ///     }
    ///     async fn event(&mut self, e: ClusterEvent, _ctx: &mut Context<Self>) {
    ///         tracing::info!("{e:?}");
    ///     }
    /// }
    ///
    /// # fn demo(system: &ActorSystem, cluster: &Cluster) {
    /// let listener = system.spawn(Listener::default());
    /// cluster.subscribe_actor(&listener).unwrap();
    /// # }
    /// ```
    pub fn subscribe_actor<A>(&self, actor: &ActorRef<A>) -> Result<(), SubscribeError>
    where
        A: Handler<CurrentClusterState> + Handler<ClusterEvent>,
    {
        if actor.is_remote() {
            return Err(SubscribeError::RemoteActor);
        }
        let target = actor.clone();
        let sink: EventSink = Box::new(move |d| match d {
            Delivery::Snapshot(s) => target.tell(*s).map_err(DeliveryFailure::of),
            Delivery::Event(e) => target.tell(e).map_err(DeliveryFailure::of),
        });
        self.core
            .tell(SubscribeActor {
                actor: actor.to_any(),
                sink,
            })
            .map_err(|_| SubscribeError::ClusterStopped)
    }

    /// Ends `actor`'s subscription (see
    /// [`subscribe_actor`](Self::subscribe_actor)); events already on their
    /// way still arrive.
    pub fn unsubscribe<A: Actor>(&self, actor: &ActorRef<A>) {
        let _ = self.core.tell(Unsubscribe(actor.to_any()));
    }

    /// How many event subscriptions this node's cluster core holds (actors
    /// and channels), for diagnostics. An actor's subscription ends when it
    /// stops; a channel's once its receiver is dropped (found when the next
    /// event is sent, or when the subscriptions are counted).
    pub async fn subscription_count(&self) -> Result<usize, troupe_core::AskError> {
        self.core
            .ask_timeout(GetSubscriptionCount, Duration::from_secs(10))
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

/// The cluster's own tasks of the coordinated shutdown, as Akka's: leave,
/// wait until Exiting, confirm the exit, stop the cluster core.
fn add_shutdown_tasks(shutdown: &CoordinatedShutdown, core: &ActorRef<ClusterCore>) {
    let c = core.clone();
    let leave = move || async move {
        let (done, wait) = oneshot::channel();
        // Done once this node is Leaving (or further along, or no member);
        // also when the core has stopped (the sender is then dropped).
        if c.tell(LeaveSelf(done)).is_ok() {
            let _ = wait.await;
        }
    };
    let c = core.clone();
    let wait_exiting = move || async move {
        let (done, wait) = oneshot::channel();
        if c.tell(WhenExiting(done)).is_ok() {
            let _ = wait.await;
        }
    };
    let c = core.clone();
    let timeout = shutdown.timeout(Phase::ClusterExitingDone);
    let exiting_completed = move || async move {
        if !c.is_terminated() {
            let _ = c.ask_timeout(ExitingCompleted, timeout).await;
        }
    };
    let c = core.clone();
    let timeout = shutdown.timeout(Phase::ClusterShutdown);
    let stop_core = move || async move {
        // An Exiting core waits to learn of its removal; else it stops now.
        let _ = c.tell(ShutdownCluster);
        if rt::timeout(timeout * 3 / 4, c.wait_for_termination())
            .await
            .is_none()
        {
            tracing::info!(
                "the leader did not report this node removed in time; the cluster extension stops"
            );
            c.stop();
            c.wait_for_termination().await;
        }
    };
    let added = [
        shutdown.add_task(Phase::ClusterLeave, "leave", leave),
        shutdown.add_task(Phase::ClusterExiting, "wait-exiting", wait_exiting),
        shutdown.add_task(
            Phase::ClusterExitingDone,
            "exiting-completed",
            exiting_completed,
        ),
        shutdown.add_task(Phase::ClusterShutdown, "wait-shutdown", stop_core),
    ];
    for r in added {
        if let Err(e) = r {
            tracing::warn!("{e}");
        }
    }
}
