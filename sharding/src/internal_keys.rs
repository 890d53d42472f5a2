//! The names of sharding's own keys in distributed data, in Pekko's
//! layout: the coordinator's state, the set of shards that have remembered
//! entities (the coordinator's remembered state), and a few OR-set keys
//! per shard holding its remembered entity ids.

use crate::extractor::stable_hash;

/// OR-set keys per shard for its remembered entities (Pekko: 5); an
/// entity's key is chosen by a stable hash of its id. Fixed forever: a
/// store written with another number could not be read.
pub(crate) const REMEMBERED_KEYS_PER_SHARD: u32 = 5;

/// The coordinator's state of entity type `type_name` (shard homes and
/// regions; not durable: it is rebuilt from the regions if lost).
pub(crate) fn coordinator_state_key(type_name: &str) -> String {
    format!("sharding-coordinator-state-{type_name}")
}

/// The shards of `type_name` that have remembered entities (Pekko's
/// `shard-<type>-all`): the coordinator allocates them at start so that
/// their entities come back without any message.
pub(crate) fn remembered_shards_key(type_name: &str) -> String {
    format!("shard-{type_name}-all")
}

/// Key `n` (of [`REMEMBERED_KEYS_PER_SHARD`]) of shard `shard`'s
/// remembered entities (Pekko's `shard-<type>-<shard>-<n>`).
pub(crate) fn remembered_entities_key(type_name: &str, shard: &str, n: u32) -> String {
    format!("shard-{type_name}-{shard}-{n}")
}

/// Which of its shard's keys remembers entity `entity`.
pub(crate) fn remembered_key_index(entity: &str) -> u32 {
    (stable_hash(entity.as_bytes()) % u64::from(REMEMBERED_KEYS_PER_SHARD)) as u32
}
