//! # Troupe cluster sharding
//!
//! Many stateful entities, addressed by id, spread over a cluster and
//! moved as it changes. Declare an entity type with `#[entity]` on the
//! impl block of its handlers, start it on every node with
//! [`ClusterSharding::start`], and reach any entity with an
//! [`EntityRef`] from [`ClusterSharding::entity_ref`]: `tell` and `ask`
//! work the same whether the entity runs here, on another node, has never
//! run, or is moving.
//!
//! The parts are Akka's: a [`Region`](region::Region) per entity type per
//! node routes messages and hosts the local shards; each shard owns its
//! entities and starts them on demand; the
//! [`ShardCoordinator`](coordinator::ShardCoordinator), a cluster
//! singleton, decides where shards live with a pluggable
//! [`ShardAllocationStrategy`], moves them to rebalance the cluster, and
//! keeps its state in distributed data. Unlike Akka's, the hot path does
//! not pass through the region actor, and messages that reach a shard
//! while it is handed off are forwarded to its new home in order rather
//! than dropped.

mod active_entities;
pub mod allocation;
pub mod coordinator;
mod coordinator_state;
mod delivery;
mod entity;
mod entity_ref;
mod envelope;
mod error;
mod extractor;
mod internal_keys;
pub mod management;
mod passivate;
pub mod passivation;
mod protocol;
mod queries;
mod rebalance;
pub mod region;
mod remember;
pub mod remove_internal_data;
mod settings;
mod shard;
mod shard_envelope;
mod sharding;

pub use allocation::{
    ClusterView, ConsistentHashingShardAllocationStrategy, LeastShardAllocationStrategy, RegionId,
    ShardAllocationStrategy, ShardAllocations,
};
#[doc(hidden)]
pub use entity::__private;
pub use entity::{Entity, EntityRegistrar};
pub use entity_ref::EntityRef;
pub use envelope::{EntityMessage, ShardingEnvelope};
pub use error::{ShardingError, ShardingTellError};
pub use extractor::{stable_hash, EntityId, HashShardIdExtractor, ShardId, ShardIdExtractor};
pub use passivate::EntityContext;
pub use queries::{ClusterShardingStats, CurrentShardRegionState, ShardRegionStats, ShardState};
pub use remove_internal_data::{remove_internal_sharding_data, RemoveError, RemovedShardingData};
pub use settings::{
    AdmissionWindowSettings, EntityRecoveryStrategy, FrequencySketchSettings, HillClimbingSettings,
    PassivationSettings, PassivationStrategy, ReplacementPolicy, ShardingSettings,
};
pub use sharding::{ClusterSharding, EntityConfig, RoutingStats};
pub use troupe_macros::entity;
