//! Queries about sharding's state, for monitoring and tests (Akka's
//! `GetShardRegionState`, `GetShardRegionStats`, `GetClusterShardingStats`,
//! `GetCurrentRegions`). They are not a way to reach entities.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use troupe_core::Message;

/// Asks a region for its shards and their running entities.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(reply = CurrentShardRegionState, name = "troupe.sharding.GetRegionState")]
pub(crate) struct GetRegionState;

/// Asks a region for its running entities per shard, for the cluster-wide
/// statistics; a proxy-only region answers `None` (it is no region in
/// Pekko's sense: the coordinator does not count it).
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(reply = Option<ShardRegionStats>, name = "troupe.sharding.GetRegionStats")]
pub(crate) struct GetRegionStats;

/// The shards of one region and the entities running in each.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentShardRegionState {
    /// The region's shards, ordered by id.
    pub shards: Vec<ShardState>,
}

/// One shard of a region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardState {
    /// The shard's id.
    pub shard_id: String,
    /// Its running entities, ordered.
    pub entity_ids: Vec<String>,
}

impl CurrentShardRegionState {
    /// The number of running entities per shard.
    pub fn stats(&self) -> ShardRegionStats {
        ShardRegionStats {
            stats: self
                .shards
                .iter()
                .map(|s| (s.shard_id.clone(), s.entity_ids.len()))
                .collect(),
        }
    }
}

/// Running entities per shard of one region.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRegionStats {
    /// Shard id -> number of running entities.
    pub stats: BTreeMap<String, usize>,
}

/// Running entities per shard of every region of an entity type, with
/// the regions that did not answer in time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterShardingStats {
    /// Region (its node's address) -> its stats.
    pub regions: BTreeMap<String, ShardRegionStats>,
    /// Regions that did not answer within the query's timeout.
    pub failed: Vec<String>,
}
