//! Cluster bootstrap (Akka Management's Cluster Bootstrap): nodes find
//! each other through [service discovery](crate::discovery) and form
//! exactly one cluster by themselves, or join the existing one.
//!
//! 1. Discover: look the service up (every `interval`, with exponential
//!    backoff on failures) to find the contact points, the management
//!    HTTP endpoints of the nodes.
//! 2. Probe: ask every contact point `GET /bootstrap/seed-nodes` (every
//!    `contact-point.probe-interval`, with jitter); the answer names the
//!    node behind it and the members it knows
//!    ([`SeedNodes`](crate::management::SeedNodes)).
//! 3. Decide ([`decide`]): join the seed nodes any contact point reports;
//!    if none reports any, the node with the lowest remoting address forms
//!    a new cluster, once at least `required-contact-point-nr` contact
//!    points answered, every discovered one answered, the discovered set
//!    has been stable for `stable-margin`, and `new-cluster-enabled`
//!    allows it. The others join it as soon as a contact point reports it
//!    ("epidemic" joining).
//!
//! Precedence: configured seed nodes win (bootstrap then does not run and
//! says so), and so does an explicit [`Cluster::join`] before bootstrap
//! has decided. With `shutdown-after-unsuccessful-join-seed-nodes` set,
//! a node that has neither joined nor formed a cluster in that time runs
//! its coordinated shutdown (reason
//! [`ClusterJoinUnsuccessful`](crate::coordinated_shutdown::Reason::ClusterJoinUnsuccessful)),
//! so that an orchestrator restarts it.
//!
//! The contact point route is part of every
//! [`ManagementServer`](crate::management::ManagementServer); start that
//! first, then bootstrap with its address:
//!
//! ```no_run
//! use troupe_cluster::bootstrap::{BootstrapSettings, ClusterBootstrap};
//! use troupe_cluster::discovery::DiscoverySettings;
//! use troupe_cluster::management::{ManagementServer, ManagementSettings};
//! use troupe_cluster::{Cluster, ClusterSettings};
//! use troupe_core::prelude::*;
//! use troupe_core::remote::RemoteSettings;
//!
//! let system = ActorSystem::builder("shop")
//!     .remote(RemoteSettings::new("0.0.0.0:2552").with_secret("s3cret"))
//!     .build()
//!     .unwrap();
//! let cluster = Cluster::start(&system, ClusterSettings::default()).unwrap();
//! let server = ManagementServer::start(cluster.clone(), ManagementSettings::new("0.0.0.0:8558")).unwrap();
//! let discovery = DiscoverySettings::from_toml("[discovery]\nmethod = \"dns\"").unwrap();
//! let bootstrap = ClusterBootstrap::start(
//!     &cluster,
//!     discovery.build().unwrap(),
//!     BootstrapSettings::default(),
//!     server.local_addr().port(),
//! )
//! .unwrap();
//! ```

mod coordinator;
mod decider;
mod probe;
mod settings;

pub use decider::{decide, JoinDecision, KeepProbing, SeedNodesInformation, SeedNodesObservation};
pub use settings::{BootstrapSettings, ContactPointSettings};

use crate::cluster::Cluster;
use crate::discovery::{Lookup, ServiceDiscovery};
use crate::settings::SettingsError;
use coordinator::Coordinator;
use std::fmt;
use std::sync::{Arc, Mutex};
use troupe_core::remote::Address;
use troupe_core::rt;

/// Where bootstrap stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BootstrapStatus {
    /// Discovering and probing.
    Running,
    /// Not run: seed nodes are configured, and they win.
    SeedNodesConfigured,
    /// This node had the lowest address and formed a new cluster.
    JoinedSelf,
    /// This node joined the cluster of these seed nodes.
    JoinedSeedNodes(Vec<Address>),
    /// An explicit join came first; bootstrap stopped.
    ExplicitJoin,
    /// No cluster joined nor formed within
    /// `shutdown-after-unsuccessful-join-seed-nodes`: the node shuts down.
    GaveUp,
    /// Stopped before it decided.
    Stopped,
}

/// Why bootstrap could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BootstrapError {
    /// A setting is out of range.
    Settings(SettingsError),
    /// The cluster extension has stopped.
    ClusterStopped,
}

impl fmt::Display for BootstrapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BootstrapError::Settings(e) => write!(f, "bootstrap settings: {e}"),
            BootstrapError::ClusterStopped => {
                f.write_str("the cluster extension has stopped; nothing to bootstrap")
            }
        }
    }
}

impl std::error::Error for BootstrapError {}

/// A running cluster bootstrap; it stops by itself once it has decided,
/// or when [stopped](ClusterBootstrap::stop) or dropped.
pub struct ClusterBootstrap {
    status: Arc<Mutex<BootstrapStatus>>,
    /// Dropped to stop the coordinator.
    stop: Option<async_channel::Sender<()>>,
    task: Option<rt::JoinHandle<()>>,
}

impl fmt::Debug for ClusterBootstrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterBootstrap")
            .field("status", &self.status())
            .finish()
    }
}

impl ClusterBootstrap {
    /// Starts bootstrapping `cluster`: looks up the service of
    /// `settings` with `discovery` and probes the contact points found;
    /// `management_port` is this node's management HTTP port, the port of
    /// contact points that discovery finds without one (unless
    /// `contact-point.fallback-port` is set).
    ///
    /// With seed nodes configured it does not run (it logs a warning and
    /// its status is [`BootstrapStatus::SeedNodesConfigured`]).
    pub fn start(
        cluster: &Cluster,
        discovery: Arc<dyn ServiceDiscovery>,
        settings: BootstrapSettings,
        management_port: u16,
    ) -> Result<ClusterBootstrap, BootstrapError> {
        settings.validate().map_err(BootstrapError::Settings)?;
        if cluster.is_terminated() {
            return Err(BootstrapError::ClusterStopped);
        }
        if cluster.has_configured_seed_nodes() {
            tracing::warn!(
                "bootstrap does not run: seed nodes are configured, and they take precedence \
                 (remove seed-nodes to use bootstrap)"
            );
            return Ok(ClusterBootstrap {
                status: Arc::new(Mutex::new(BootstrapStatus::SeedNodesConfigured)),
                stop: None,
                task: None,
            });
        }
        let mut lookup = Lookup::new(settings.effective_name(cluster.self_address().system()));
        lookup.port_name = settings.port_name.clone();
        lookup.protocol = settings.protocol.clone();
        let status = Arc::new(Mutex::new(BootstrapStatus::Running));
        let coordinator = Coordinator {
            cluster: cluster.clone(),
            discovery,
            fallback_port: settings
                .contact_point
                .fallback_port
                .unwrap_or(management_port),
            settings,
            lookup,
            status: status.clone(),
        };
        let (stop, stopped) = async_channel::bounded(1);
        let task = rt::spawn(coordinator.run(stopped));
        Ok(ClusterBootstrap {
            status,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// Where it stands.
    pub fn status(&self) -> BootstrapStatus {
        self.status
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops it (if it has not decided yet) and waits until it has.
    pub async fn stop(mut self) {
        self.stop.take();
        if let Some(task) = self.task.take() {
            task.await;
        }
    }
}
