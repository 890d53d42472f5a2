//! Remembered entities in distributed data (Pekko's
//! `DDataRememberEntitiesShardStore` and `...CoordinatorStore`): the ids
//! of each shard's started entities, spread over a few OR-set keys per
//! shard, and the set of shards that have any, which the coordinator
//! allocates at start so that their entities come back without a message.
//!
//! Writes go to a majority of the replicas and reads come from a
//! majority, so a shard that moves or restarts after a crash sees every
//! entity that was acknowledged as remembered. Make the keys durable
//! (`shard-*` in the replicator's `durable_keys`) to keep them over a
//! restart of the whole cluster.

use crate::extractor::{EntityId, ShardId};
use crate::internal_keys::{
    remembered_entities_key, remembered_key_index, remembered_shards_key, REMEMBERED_KEYS_PER_SHARD,
};
use crate::settings::ShardingSettings;
use std::collections::BTreeMap;
use std::time::Duration;
use troupe_cluster::ddata::{DataError, Key, ORSet, ReadConsistency, Replicator, WriteConsistency};
use troupe_cluster::UniqueAddress;
use troupe_core::rt;

/// Majority writes and reads, with the sharding's state timeouts.
fn consistencies(settings: &ShardingSettings) -> (WriteConsistency, ReadConsistency) {
    (
        WriteConsistency::Majority {
            timeout: settings.updating_state_timeout,
        },
        ReadConsistency::Majority {
            timeout: settings.waiting_for_state_timeout,
        },
    )
}

/// Reads a key with `read`, falling back on the local replica when too
/// few replicas answer (it has every write this node made).
async fn read_set(
    replicator: &Replicator,
    key: &Key<ORSet<String>>,
    read: ReadConsistency,
) -> Result<ORSet<String>, DataError> {
    let got = match replicator.get(key, read).await {
        Ok(v) => v,
        Err(DataError::Stopped) => return Err(DataError::Stopped),
        Err(e) => {
            tracing::warn!(
                "sharding: reading `{}` from a majority failed ({e}); using this node's copy",
                key.name()
            );
            replicator.get(key, ReadConsistency::Local).await?
        }
    };
    Ok(got.unwrap_or_default())
}

/// The remembered entities of one shard.
#[derive(Clone)]
pub(crate) struct RememberedEntitiesStore {
    replicator: Replicator,
    self_node: UniqueAddress,
    keys: Vec<Key<ORSet<String>>>,
    write: WriteConsistency,
    read: ReadConsistency,
}

impl RememberedEntitiesStore {
    pub(crate) fn new(
        replicator: Replicator,
        self_node: UniqueAddress,
        type_name: &str,
        shard: &ShardId,
        settings: &ShardingSettings,
    ) -> Self {
        let (write, read) = consistencies(settings);
        let keys = (0..REMEMBERED_KEYS_PER_SHARD)
            .map(|n| Key::new(remembered_entities_key(type_name, shard, n)))
            .collect();
        RememberedEntitiesStore {
            replicator,
            self_node,
            keys,
            write,
            read,
        }
    }

    /// Every remembered entity of the shard (its keys read at once).
    pub(crate) async fn load(&self) -> Result<Vec<EntityId>, DataError> {
        let reads: Vec<_> = self
            .keys
            .iter()
            .map(|key| {
                let (replicator, key, read) = (self.replicator.clone(), key.clone(), self.read);
                rt::spawn(async move { read_set(&replicator, &key, read).await })
            })
            .collect();
        let mut ids = Vec::new();
        let mut first_error = None;
        for read in reads {
            match read.await {
                Ok(set) => ids.extend(set.iter().map(|id| EntityId::from(id.as_str()))),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(ids), Err)
    }

    /// Remembers `started` and forgets `stopped`: one write per key
    /// touched, the keys written at once, all of it or an error (a retry
    /// writes it all again, which changes nothing for what was written).
    pub(crate) async fn update(
        &self,
        started: &[EntityId],
        stopped: &[EntityId],
    ) -> Result<(), DataError> {
        let mut by_key: BTreeMap<u32, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for id in started {
            by_key
                .entry(remembered_key_index(id))
                .or_default()
                .0
                .push(id.to_string());
        }
        for id in stopped {
            by_key
                .entry(remembered_key_index(id))
                .or_default()
                .1
                .push(id.to_string());
        }
        let writes: Vec<_> = by_key
            .into_iter()
            .map(|(n, (add, remove))| {
                let node = self.self_node.clone();
                let key = self.keys[n as usize].clone();
                let (replicator, write) = (self.replicator.clone(), self.write);
                rt::spawn(async move {
                    replicator
                        .update(&key, ORSet::new(), write, move |mut set| {
                            for id in add {
                                set.add(&node, id);
                            }
                            for id in &remove {
                                set.remove(&node, id);
                            }
                            set
                        })
                        .await
                })
            })
            .collect();
        let mut first_error = None;
        for write in writes {
            if let Err(e) = write.await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The shards of one entity type that have remembered entities.
#[derive(Clone)]
pub(crate) struct RememberedShardsStore {
    replicator: Replicator,
    self_node: UniqueAddress,
    key: Key<ORSet<String>>,
    write: WriteConsistency,
    read: ReadConsistency,
}

impl RememberedShardsStore {
    pub(crate) fn new(
        replicator: Replicator,
        self_node: UniqueAddress,
        type_name: &str,
        settings: &ShardingSettings,
    ) -> Self {
        let (write, read) = consistencies(settings);
        RememberedShardsStore {
            replicator,
            self_node,
            key: Key::new(remembered_shards_key(type_name)),
            write,
            read,
        }
    }

    /// The remembered shards.
    pub(crate) async fn load(&self) -> Result<Vec<ShardId>, DataError> {
        let set = read_set(&self.replicator, &self.key, self.read).await?;
        Ok(set.iter().map(|s| ShardId::from(s.as_str())).collect())
    }

    /// Remembers shards (allocated for the first time), in one write.
    pub(crate) async fn add_all(&self, shards: &[ShardId]) -> Result<(), DataError> {
        let node = self.self_node.clone();
        let shards: Vec<String> = shards.iter().map(|s| s.to_string()).collect();
        self.replicator
            .update(&self.key, ORSet::new(), self.write, move |mut set| {
                for shard in shards {
                    if !set.contains(&shard) {
                        set.add(&node, shard);
                    }
                }
                set
            })
            .await
    }
}

/// How long a failed remember write waits before it is tried again.
pub(crate) const RETRY_AFTER: Duration = Duration::from_millis(500);
