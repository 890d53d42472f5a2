//! Cluster singleton: exactly one instance of an actor in the cluster, on
//! the oldest Up or Leaving member (optionally of a role; see
//! [`member::oldest`](crate::member::oldest)), handed over when that
//! member leaves and taken over when it is downed and removed; and a proxy
//! that finds the instance from any node and buffers messages while it
//! moves. The protocol follows Akka's `ClusterSingletonManager`: once the
//! leaving host is Exiting, the new oldest asks it to hand over
//! (`HandOverToMe`), the previous host stops its instance and answers
//! `HandOverDone`, and only then does the new one start its instance — so
//! there is never an overlap while the cluster is healthy. The leaving
//! host waits for this in the `cluster-exiting` phase of its
//! [coordinated shutdown](crate::coordinated_shutdown), before it confirms
//! its exit. During a network partition, the split brain resolver decides
//! which side keeps the singleton.

mod manager;
mod protocol;
mod proxy;
mod settings;

pub use manager::SingletonManager;
pub use proxy::SingletonProxy;
pub use settings::ClusterSingletonSettings;

use crate::cluster::{Cluster, ClusterError};
use troupe_core::prelude::*;
use troupe_core::Props;

/// Starts the singleton manager for `name` on this node. Start it on every
/// node (of the role) that may host the singleton; `factory` makes the
/// instance whenever this node becomes the host.
///
/// ```no_run
/// # use troupe_core::prelude::*;
/// # use troupe_cluster::{Cluster, singleton::{self, ClusterSingletonSettings}};
/// # #[derive(Default)] struct Tickets { next: u64 }
/// # impl Actor for Tickets {}
/// # fn demo(system: &ActorSystem, cluster: &Cluster) {
/// singleton::start(system, cluster, "tickets", Tickets::default, ClusterSingletonSettings::default()).unwrap();
/// let tickets = singleton::proxy::<Tickets>(system, cluster, "tickets", ClusterSingletonSettings::default()).unwrap();
/// # }
/// ```
pub fn start<A: Actor>(
    system: &ActorSystem,
    cluster: &Cluster,
    name: &str,
    factory: impl FnMut() -> A + Send + 'static,
    settings: ClusterSingletonSettings,
) -> Result<ActorRef<SingletonManager<A>>, ClusterError> {
    protocol::register::<A>(system)
        .map_err(|e| ClusterError(format!("cannot register the singleton protocol: {e}")))?;
    let manager = SingletonManager::new(cluster.clone(), Box::new(factory), settings);
    system
        .spawn_system_actor(Props::new(manager).with_name(manager::manager_name(name)))
        .map_err(|e| ClusterError(format!("cannot start the singleton manager `{name}`: {e}")))
}

/// A proxy to the singleton `name`, usable from any node of the cluster.
pub fn proxy<A: Actor>(
    system: &ActorSystem,
    cluster: &Cluster,
    name: &str,
    settings: ClusterSingletonSettings,
) -> Result<SingletonProxy<A>, ClusterError> {
    protocol::register::<A>(system)
        .map_err(|e| ClusterError(format!("cannot register the singleton protocol: {e}")))?;
    SingletonProxy::start(system, cluster, name, settings)
}
