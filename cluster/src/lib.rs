//! Troupe cluster extension: membership (gossip, vector clocks, phi accrual
//! failure detection, leader actions, split brain resolver), the
//! management HTTP API ([`management`]), and later cluster singleton,
//! distributed data and bootstrap.
//!
//! This first part is the membership model of Akka Cluster, as pure data
//! and functions: [`Member`]s with their life cycle, the gossiped
//! [`Gossip`] state (a CRDT with a [`VectorClock`] and a [`Reachability`]
//! table), what a node concludes from it ([`MembershipState`]: convergence,
//! leader, leader actions), the [`ClusterEvent`]s between two states, and
//! [`ClusterSettings`] with Akka's defaults. [`management`] serves the
//! routes of Akka Management's cluster HTTP management (hyper 1 over the
//! runtime's sockets). [`coordinated_shutdown`] is Akka's ordered shutdown
//! sequence (leave, hand singletons over, stop), which every part of a node
//! can take part in.

pub mod bootstrap;
mod cluster;
pub mod coordinated_shutdown;
mod core;
pub mod ddata;
pub mod discovery;
pub mod downing;
pub mod events;
pub mod gossip;
mod heartbeat;
pub mod management;
pub mod member;
pub mod membership;
mod protocol;
pub mod reachability;
pub mod settings;
pub mod singleton;
pub mod vclock;

pub use cluster::{Cluster, ClusterError, SubscribeError};
pub use coordinated_shutdown::{
    CoordinatedShutdown, CoordinatedShutdownError, CoordinatedShutdownSettings,
};
pub use core::GossipStats;
pub use events::{ClusterEvent, CurrentClusterState};
pub use gossip::Gossip;
pub use management::{ManagementError, ManagementServer, ManagementSettings};
pub use member::{Member, MemberStatus, OldestAmong, UniqueAddress};
pub use membership::{LeaderActions, MembershipState, UpThresholds};
pub use reachability::{Reachability, ReachabilityStatus};
pub use settings::{ClusterSettings, DowningSettings, DowningStrategy, SettingsError};
pub use vclock::{ClockOrdering, VectorClock};
