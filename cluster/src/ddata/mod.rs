//! Replicated data types (CRDTs) for distributed data, modelled on Akka
//! Distributed Data.
//!
//! Every type implements [`ReplicatedData`]: a `merge` that is commutative,
//! associative and idempotent, so replicas that exchange their states in any
//! order, any number of times, converge to the same value. All mutators take
//! the local node's [`UniqueAddress`](crate::member::UniqueAddress), which
//! must be the node that owns the replica being changed.
//!
//! | Type | What it holds | Concurrent changes |
//! |------|---------------|--------------------|
//! | [`GCounter`] | a count that only grows | all increments kept |
//! | [`PNCounter`] | a count that goes up and down | all changes kept |
//! | [`LWWRegister`] | one value | latest timestamp wins, then lowest node |
//! | [`ORSet`] | a set | add wins over remove |
//! | [`ORMap`] | a map to replicated values | update wins over remove; values merged |
//!
//! Replication is **full-state only**: there are no delta-CRDTs (Akka's
//! `DeltaReplicatedData`); a replicator sends and merges whole states.
//!
//! Removed-node pruning follows Akka's `RemovedNodePruning`: the counters,
//! the [`VersionVector`] and the OR-set's dots (and, through them, the
//! OR-map's keys and values) collapse a removed node's contributions into
//! another node with [`ReplicatedData::prune`], and replicas that learn of it
//! drop theirs with [`ReplicatedData::pruning_cleanup`] before merging. The
//! [`Replicator`] runs the protocol (see its settings `pruning_interval`,
//! `max_pruning_dissemination` and `pruning_marker_time_to_live`).
//!
//! Every type is `Serialize`/`Deserialize`; maps keyed by nodes or elements
//! are encoded as sequences of pairs, so self-describing formats that only
//! allow string keys (JSON) work too.

pub mod crdt;
mod durable;
pub mod gcounter;
pub mod lww_register;
pub mod or_map;
pub mod or_set;
pub mod pncounter;
mod pruning;
mod replicator;
mod types;

pub use crdt::ReplicatedData;
pub use durable::{DurableStore, DurableStoreError};
pub use gcounter::GCounter;
pub use lww_register::{default_clock, reverse_clock, LWWRegister};
pub use or_map::ORMap;
pub use or_set::{ORSet, VersionVector};
pub use pncounter::PNCounter;
pub use replicator::{
    DataError, Key, ReadConsistency, Replicator, ReplicatorActor, ReplicatorSettings,
    WriteConsistency,
};
