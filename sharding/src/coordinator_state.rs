//! The coordinator's state (which region hosts which shard, which regions
//! and proxies are registered) and where it is kept: in distributed data,
//! one LWW-register per entity type, written to a majority of the replicas
//! plus `write-majority-plus` and read from a majority plus
//! `read-majority-plus` (Pekko's `DDataShardCoordinator`), so that a new
//! coordinator after a take-over allocates no shard twice.

use crate::allocation::{RegionId, ShardAllocations};
use crate::extractor::ShardId;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The allocation state of one entity type.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CoordinatorState {
    /// The home of each allocated shard.
    pub(crate) shards: BTreeMap<ShardId, RegionId>,
    /// Each registered region with its shards, oldest allocation first.
    pub(crate) regions: BTreeMap<RegionId, Vec<ShardId>>,
    /// Registered proxy-only regions.
    pub(crate) proxies: BTreeSet<RegionId>,
}

impl CoordinatorState {
    pub(crate) fn add_region(&mut self, region: &RegionId) {
        self.regions.entry(region.clone()).or_default();
    }

    pub(crate) fn remove_region(&mut self, region: &RegionId) -> Vec<ShardId> {
        let shards = self.regions.remove(region).unwrap_or_default();
        for s in &shards {
            self.shards.remove(s);
        }
        self.proxies.remove(region);
        shards
    }

    pub(crate) fn allocate(&mut self, shard: &ShardId, region: &RegionId) {
        self.deallocate(shard);
        self.shards.insert(shard.clone(), region.clone());
        self.regions
            .entry(region.clone())
            .or_default()
            .push(shard.clone());
    }

    pub(crate) fn deallocate(&mut self, shard: &ShardId) {
        if let Some(old) = self.shards.remove(shard) {
            if let Some(list) = self.regions.get_mut(&old) {
                list.retain(|s| s != shard);
            }
        }
    }

    /// The allocations of the given regions, as strategies see them.
    pub(crate) fn allocations(&self, of: impl Fn(&RegionId) -> bool) -> ShardAllocations {
        self.regions
            .iter()
            .filter(|(r, _)| of(r))
            .map(|(r, s)| (r.clone(), s.clone()))
            .collect()
    }

    /// As JSON: the regions with their shards, and the proxies (the
    /// shards' homes are derived from the regions when decoded).
    pub(crate) fn encode(&self) -> String {
        let wire = Wire {
            regions: self
                .regions
                .iter()
                .map(|(r, s)| (r.clone(), s.clone()))
                .collect(),
            proxies: self.proxies.iter().cloned().collect(),
        };
        serde_json::to_string(&wire).expect("the coordinator state always encodes")
    }

    pub(crate) fn decode(text: &str) -> Result<Self, String> {
        let wire: Wire = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut state = CoordinatorState {
            proxies: wire.proxies.into_iter().collect(),
            ..CoordinatorState::default()
        };
        for (region, shards) in wire.regions {
            state.add_region(&region);
            for s in shards {
                state.allocate(&s, &region);
            }
        }
        Ok(state)
    }
}

/// How the state is stored.
#[derive(Serialize, Deserialize)]
struct Wire {
    regions: Vec<(RegionId, Vec<ShardId>)>,
    proxies: Vec<RegionId>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_cluster::UniqueAddress;

    fn region(port: u16) -> RegionId {
        UniqueAddress::new(
            format!("troupe://s@127.0.0.1:{port}").parse().unwrap(),
            port as u64,
        )
    }

    #[test]
    fn allocation_moves_a_shard_between_regions() {
        let mut s = CoordinatorState::default();
        let (a, b) = (region(1), region(2));
        s.add_region(&a);
        s.add_region(&b);
        let x: ShardId = "x".into();
        s.allocate(&x, &a);
        s.allocate(&x, &b);
        assert_eq!(s.shards[&x], b);
        assert!(s.regions[&a].is_empty());
        assert_eq!(s.regions[&b], vec![x.clone()]);
        assert_eq!(s.remove_region(&b), vec![x.clone()]);
        assert!(s.shards.is_empty());
        let back = CoordinatorState::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
    }
}
