//! Troupe cluster sharding: shard regions, the shard coordinator (a cluster
//! singleton), allocation strategies, passivation and remember-entities.
//!
//! Nothing is implemented here yet; the crate exists so that the workspace
//! has its final shape. It depends on `troupe-cluster` and `troupe-core`.
