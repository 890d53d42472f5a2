//! Which shard an entity belongs to.
//!
//! The default is a stable hash of the entity id modulo the number of
//! shards. The hash is FNV-1a over the id's UTF-8 bytes: fixed forever, the
//! same on every platform and build (never `std`'s `DefaultHasher`, whose
//! output may change between releases), because every node must map an id
//! to the same shard, and a change would move entities between shards.

use std::sync::Arc;

/// The id of an entity (unique within its entity type).
pub type EntityId = Arc<str>;
/// The id of a shard (a group of entities that move together).
pub type ShardId = Arc<str>;

/// Maps entity ids to shard ids. It must give the same answer for the same
/// id on every node, for the life of the cluster's data: an entity whose
/// shard changes could run twice.
pub trait ShardIdExtractor: Send + Sync + 'static {
    /// The shard of `entity_id`.
    fn shard_id(&self, entity_id: &str) -> ShardId;
}

impl<F> ShardIdExtractor for F
where
    F: Fn(&str) -> ShardId + Send + Sync + 'static,
{
    fn shard_id(&self, entity_id: &str) -> ShardId {
        self(entity_id)
    }
}

/// The default extractor: `fnv1a(entity_id) % number_of_shards`, as a
/// decimal string (Akka's `HashCodeMessageExtractor`, with a hash that does
/// not depend on the platform).
#[derive(Debug, Clone)]
pub struct HashShardIdExtractor {
    number_of_shards: u32,
    names: Arc<[ShardId]>,
}

impl HashShardIdExtractor {
    /// An extractor over `number_of_shards` shards (at least 1).
    pub fn new(number_of_shards: u32) -> Self {
        let n = number_of_shards.max(1);
        HashShardIdExtractor {
            number_of_shards: n,
            names: (0..n).map(|i| ShardId::from(i.to_string())).collect(),
        }
    }

    /// The number of shards.
    pub fn number_of_shards(&self) -> u32 {
        self.number_of_shards
    }
}

impl ShardIdExtractor for HashShardIdExtractor {
    fn shard_id(&self, entity_id: &str) -> ShardId {
        let i = (stable_hash(entity_id.as_bytes()) % u64::from(self.number_of_shards)) as usize;
        self.names[i].clone()
    }
}

/// FNV-1a, 64 bits.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fixed() {
        // Pinned values: changing them would move every entity.
        assert_eq!(stable_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(stable_hash(b"foobar"), 0x8594_4171_f739_67e8);
        let x = HashShardIdExtractor::new(1000);
        assert_eq!(
            &*x.shard_id("foobar"),
            (0x8594_4171_f739_67e8u64 % 1000).to_string()
        );
    }

    #[test]
    fn ids_spread_over_all_shards() {
        let x = HashShardIdExtractor::new(10);
        let mut counts = [0u32; 10];
        for i in 0..10_000 {
            let s: usize = x.shard_id(&format!("entity-{i}")).parse().unwrap();
            counts[s] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
    }
}
