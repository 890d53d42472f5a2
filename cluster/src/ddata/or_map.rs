//! An observed-remove map whose values are replicated data themselves.

use super::crdt::{pairs, ReplicatedData};
use super::or_set::ORSet;
use crate::member::UniqueAddress;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// An observed-remove map (OR-Map): the keys are an [`ORSet`], so a
/// concurrent update wins over a remove, and the values are
/// [`ReplicatedData`] merged key by key, so concurrent updates of one key
/// are combined rather than one of them lost.
///
/// As in Akka, a removed key's value is dropped without a tombstone. If a
/// key is removed on one replica while another replica updates it
/// concurrently, the key survives with the *merge* of the two values, so
/// for counters the old count comes back (Akka's `ORMap` has the same
/// anomaly; clear the value before removing the key where that matters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize, V: Serialize",
    deserialize = "K: Deserialize<'de> + Ord, V: Deserialize<'de>"
))]
pub struct ORMap<K, V> {
    /// The keys present.
    keys: ORSet<K>,
    /// The value of each key in `keys`, and of no other.
    #[serde(with = "pairs")]
    values: BTreeMap<K, V>,
}

impl<K, V> Default for ORMap<K, V> {
    fn default() -> Self {
        ORMap {
            keys: ORSet::default(),
            values: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone, V> ORMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        ORMap::default()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.values.get(key)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.values.contains_key(key)
    }

    /// All the entries, in key order.
    pub fn entries(&self) -> &BTreeMap<K, V> {
        &self.values
    }

    /// The entries, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.values.iter()
    }

    /// The keys, as the OR-set that tracks them.
    pub fn key_set(&self) -> &ORSet<K> {
        &self.keys
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Changes the value of `key` as `node` (the local node): `modify` is
    /// applied to the current value, or to `initial` if the key is absent.
    ///
    /// `modify` should change the value only through its own operations
    /// (increment, add, set, …) so that the change merges with concurrent
    /// ones; replacing the value wholesale loses history (Akka forbids
    /// replacing an `ORSet` value for this reason).
    pub fn update(&mut self, node: &UniqueAddress, key: K, initial: V, modify: impl FnOnce(&mut V)) {
        // Re-adding the key gives it a fresh dot, so this update wins over
        // a concurrent remove elsewhere.
        self.keys.add(node, key.clone());
        modify(self.values.entry(key).or_insert(initial));
    }

    /// Removes `key` as `node` (the local node) and returns its value, if it
    /// was present. A concurrent update elsewhere wins over the removal.
    pub fn remove(&mut self, node: &UniqueAddress, key: &K) -> Option<V> {
        self.keys.remove(node, key);
        self.values.remove(key)
    }
}

impl<K, V> ReplicatedData for ORMap<K, V>
where
    K: Ord + Clone + Send + Sync + 'static,
    V: ReplicatedData,
{
    fn merge(&self, other: &Self) -> Self {
        let keys = self.keys.merge(&other.keys);
        let mut values = BTreeMap::new();
        for key in keys.iter() {
            let value = match (self.values.get(key), other.values.get(key)) {
                (Some(ours), Some(theirs)) => ours.merge(theirs),
                (Some(only), None) | (None, Some(only)) => only.clone(),
                // Only possible in a state that was deserialised broken;
                // the key stays (it is in the set) but has no value.
                (None, None) => continue,
            };
            values.insert(key.clone(), value);
        }
        ORMap { keys, values }
    }

    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress> {
        let mut nodes = self.keys.modified_by_nodes();
        for value in self.values.values() {
            nodes.extend(value.modified_by_nodes());
        }
        nodes
    }

    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool {
        self.keys.need_pruning_from(removed)
            || self.values.values().any(|v| v.need_pruning_from(removed))
    }

    fn prune(&mut self, removed: &UniqueAddress, into: &UniqueAddress) {
        self.keys.prune(removed, into);
        for value in self.values.values_mut() {
            if value.need_pruning_from(removed) {
                value.prune(removed, into);
            }
        }
    }

    fn pruning_cleanup(&mut self, removed: &UniqueAddress) {
        self.keys.pruning_cleanup(removed);
        // Keys whose dot named only the removed node left the key set; keep
        // the values in step with it (the pruned state brings them back).
        let keys = &self.keys;
        self.values.retain(|k, _| keys.contains(k));
        for value in self.values.values_mut() {
            if value.need_pruning_from(removed) {
                value.pruning_cleanup(removed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddata::crdt::testing::{check_laws, node, run, steps};
    use crate::ddata::{GCounter, PNCounter};
    use proptest::prelude::*;

    #[test]
    fn update_get_remove() {
        let a = node(1);
        let mut m: ORMap<String, GCounter> = ORMap::new();
        assert!(m.is_empty());
        m.update(&a, "x".into(), GCounter::new(), |c| c.increment(&a, 2));
        m.update(&a, "x".into(), GCounter::new(), |c| c.increment(&a, 3));
        m.update(&a, "y".into(), GCounter::new(), |_| {});
        assert_eq!(m.get(&"x".to_string()).map(GCounter::value), Some(5));
        assert_eq!(m.len(), 2);
        assert!(m.contains_key(&"y".to_string()));
        assert_eq!(m.remove(&a, &"y".to_string()).map(|c| c.value()), Some(0));
        assert_eq!(m.remove(&a, &"y".to_string()), None);
        assert_eq!(m.entries().keys().collect::<Vec<_>>(), vec!["x"]);
        assert_eq!(m.key_set().len(), 1);
        assert_eq!(m.iter().count(), 1);
    }

    #[test]
    fn concurrent_updates_of_one_key_merge() {
        let (a, b) = (node(1), node(2));
        let mut x: ORMap<u8, PNCounter> = ORMap::new();
        let mut y = ORMap::new();
        x.update(&a, 1, PNCounter::new(), |c| c.increment(&a, 5));
        y.update(&b, 1, PNCounter::new(), |c| c.decrement(&b, 2));
        let m = x.merge(&y);
        assert_eq!(m.get(&1).map(PNCounter::value), Some(3));
        assert_eq!(y.merge(&x), m);
    }

    #[test]
    fn concurrent_update_wins_over_remove() {
        let (a, b) = (node(1), node(2));
        let mut x: ORMap<u8, GCounter> = ORMap::new();
        x.update(&a, 1, GCounter::new(), |c| c.increment(&a, 1));
        let mut y = x.clone();
        x.remove(&a, &1);
        y.update(&b, 1, GCounter::new(), |c| c.increment(&b, 1));
        let m = x.merge(&y);
        // The key survives, with the merged value (the removal's anomaly:
        // `a`'s old count is still there).
        assert_eq!(m.get(&1).map(GCounter::value), Some(2));
        assert_eq!(y.merge(&x), m);
    }

    #[test]
    fn seen_remove_sticks_and_re_added_value_starts_afresh() {
        let (a, b) = (node(1), node(2));
        let mut x: ORMap<u8, ORSet<u8>> = ORMap::new();
        x.update(&a, 1, ORSet::new(), |s| s.add(&a, 10));
        let y = x.clone();
        x.remove(&a, &1);
        assert!(!x.merge(&y).contains_key(&1));
        // Re-add with a fresh value; `b` then changes the old copy of it.
        x.update(&a, 1, ORSet::new(), |s| s.add(&a, 20));
        let mut z = y.clone();
        z.update(&b, 1, ORSet::new(), |s| s.add(&b, 30));
        let m = x.merge(&z);
        assert_eq!(m, z.merge(&x));
        let set = m.get(&1).unwrap();
        // 10 was removed with the key on `x`, which `z` had seen; 20 and 30
        // are unseen adds on either side.
        assert!(!set.contains(&10));
        assert!(set.contains(&20));
        assert!(set.contains(&30));
    }

    #[test]
    fn prune_reaches_keys_and_values() {
        let (a, b, gone) = (node(1), node(2), node(3));
        let mut m: ORMap<u8, GCounter> = ORMap::new();
        m.update(&gone, 1, GCounter::new(), |c| c.increment(&gone, 4));
        m.update(&a, 2, GCounter::new(), |c| c.increment(&gone, 1));
        let stale = m.clone();
        assert!(m.need_pruning_from(&gone));
        assert!(m.modified_by_nodes().contains(&gone));
        m.prune(&gone, &b);
        assert!(!m.need_pruning_from(&gone));
        assert_eq!(m.get(&1).map(GCounter::value), Some(4));
        assert_eq!(m.get(&2).map(|c| c.count_of(&b)), Some(1));
        let mut cleaned = stale;
        cleaned.pruning_cleanup(&gone);
        assert!(!cleaned.need_pruning_from(&gone));
        let merged = cleaned.merge(&m);
        assert_eq!(merged, m.merge(&cleaned));
        assert_eq!(merged.get(&1).map(GCounter::value), Some(4));
        assert_eq!(merged.get(&2).map(GCounter::value), Some(1));
    }

    #[test]
    fn serde_round_trip() {
        let a = node(1);
        let mut m: ORMap<(u8, u8), PNCounter> = ORMap::new();
        m.update(&a, (1, 2), PNCounter::new(), |c| c.decrement(&a, 3));
        m.update(&a, (3, 4), PNCounter::new(), |c| c.increment(&a, 1));
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<ORMap<(u8, u8), PNCounter>>(&json).unwrap(), m);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8, u8),
        Remove(u8),
        Count(u8, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0..3u8, 0..4u8).prop_map(|(k, e)| Op::Add(k, e)),
            2 => (0..3u8).prop_map(Op::Remove),
            3 => (0..3u8, 1..4u64).prop_map(|(k, n)| Op::Count(k, n)),
        ]
    }

    /// Maps of sets and maps of counters, driven by the same steps.
    type Sets = ORMap<u8, ORSet<u8>>;
    type Counters = ORMap<u8, GCounter>;

    proptest! {
        #[test]
        fn merge_laws_for_maps_of_sets(s in steps(op())) {
            let replicas = run::<Sets, Op>(
                &s,
                |m, n, op| match op {
                    Op::Add(k, e) => m.update(n, *k, ORSet::new(), |s| s.add(n, *e)),
                    Op::Count(k, _) => m.update(n, *k, ORSet::new(), |s| s.clear(n)),
                    Op::Remove(k) => {
                        m.remove(n, k);
                    }
                },
                |before, incoming, after| {
                    // The keys follow the key set, values or not.
                    prop_assert_eq!(
                        after.entries().keys().collect::<Vec<_>>(),
                        after.key_set().iter().collect::<Vec<_>>()
                    );
                    for k in after.key_set().iter() {
                        prop_assert!(before.contains_key(k) || incoming.contains_key(k));
                    }
                    Ok(())
                },
            )?;
            let [a, b, c] = &replicas;
            check_laws(a, b, c)?;
        }

        #[test]
        fn merge_laws_and_monotonic_for_maps_of_counters(s in steps(op())) {
            let replicas = run::<Counters, Op>(
                &s,
                |m, n, op| match op {
                    Op::Add(k, e) => m.update(n, *k, GCounter::new(), |c| c.increment(n, *e as u64)),
                    Op::Count(k, x) => m.update(n, *k, GCounter::new(), |c| c.increment(n, *x)),
                    Op::Remove(k) => {
                        m.remove(n, k);
                    }
                },
                |before, incoming, after| {
                    // Keys merge as an OR-set (add wins), and a surviving
                    // key's count never drops below either side's.
                    prop_assert_eq!(after.key_set(), &before.key_set().merge(incoming.key_set()));
                    for (k, v) in after.iter() {
                        for side in [before, incoming] {
                            if let Some(w) = side.get(k) {
                                prop_assert!(v.value() >= w.value());
                            }
                        }
                    }
                    Ok(())
                },
            )?;
            let [a, b, c] = &replicas;
            check_laws(a, b, c)?;
        }
    }
}
