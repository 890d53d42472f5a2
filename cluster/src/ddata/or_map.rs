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
/// Unlike Akka's `ORMap`, a key's value is kept per update that is still
/// live in the key's dot (one per node that updated the key concurrently;
/// usually just one), and the value shown is the merge of those. Akka keeps
/// one merged value per key, which makes a removal anomalous: when a key is
/// removed on one replica while another updates it, whether the removed
/// replica's old contribution comes back depends on the order of the
/// merges, so merge is not associative. Here a removal discards exactly the
/// updates it saw, in any merge order; an update made after seeing a value
/// still carries that value forward, as in Akka.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(
    serialize = "K: Serialize, V: Serialize",
    deserialize = "K: Deserialize<'de> + Ord, V: Deserialize<'de> + ReplicatedData"
))]
pub struct ORMap<K, V> {
    /// The keys present, with the dots of the updates that are live.
    keys: ORSet<K>,
    /// For each key in `keys`, and no other, the values of its live updates.
    #[serde(with = "pairs")]
    values: BTreeMap<K, Slot<V>>,
}

/// The live updates of one key: the value each node wrote in its update
/// whose dot is in the key's dot (so at most one per node), and their merge.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    from = "SlotRepr<V>",
    bound(
        serialize = "V: Serialize",
        deserialize = "V: Deserialize<'de> + ReplicatedData"
    )
)]
struct Slot<V> {
    /// The value of each live update, by the node that made it.
    #[serde(with = "pairs")]
    by_node: BTreeMap<UniqueAddress, V>,
    /// The merge of `by_node`, cached when there is more than one.
    #[serde(skip)]
    merged: Option<V>,
}

/// What a [`Slot`] is serialised as: its cache is rebuilt on the way in.
#[derive(Deserialize)]
#[serde(bound(deserialize = "V: Deserialize<'de>"))]
struct SlotRepr<V> {
    #[serde(with = "pairs")]
    by_node: BTreeMap<UniqueAddress, V>,
}

impl<V: ReplicatedData> From<SlotRepr<V>> for Slot<V> {
    fn from(repr: SlotRepr<V>) -> Self {
        Slot::new(repr.by_node)
    }
}

impl<V> Slot<V> {
    /// The value shown for the key.
    fn view(&self) -> Option<&V> {
        self.merged
            .as_ref()
            .or_else(|| self.by_node.values().next())
    }
}

impl<V: ReplicatedData> Slot<V> {
    fn new(by_node: BTreeMap<UniqueAddress, V>) -> Self {
        let merged = if by_node.len() > 1 {
            let mut values = by_node.values();
            values
                .next()
                .map(|first| values.fold(first.clone(), |acc, v| acc.merge(v)))
        } else {
            None
        };
        Slot { by_node, merged }
    }

    fn single(node: &UniqueAddress, value: V) -> Self {
        Slot::new(BTreeMap::from([(node.clone(), value)]))
    }
}

impl<K, V> Default for ORMap<K, V> {
    fn default() -> Self {
        ORMap {
            keys: ORSet::default(),
            values: BTreeMap::new(),
        }
    }
}

impl<K: Ord + Clone, V: ReplicatedData> ORMap<K, V> {
    /// An empty map.
    pub fn new() -> Self {
        ORMap::default()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.values.get(key).and_then(Slot::view)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &K) -> bool {
        self.values.contains_key(key)
    }

    /// All the entries, in key order.
    pub fn entries(&self) -> BTreeMap<&K, &V> {
        self.iter().collect()
    }

    /// The entries, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        self.values
            .iter()
            .filter_map(|(k, slot)| slot.view().map(|v| (k, v)))
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
    pub fn update(
        &mut self,
        node: &UniqueAddress,
        key: K,
        initial: V,
        modify: impl FnOnce(&mut V),
    ) {
        let mut value = self.get(&key).cloned().unwrap_or(initial);
        modify(&mut value);
        // Re-adding the key gives it a fresh dot naming only this update,
        // which has seen (and carries forward) every update live before it,
        // and wins over a concurrent remove elsewhere.
        self.keys.add(node, key.clone());
        self.values.insert(key, Slot::single(node, value));
    }

    /// Removes `key` as `node` (the local node) and returns its value, if it
    /// was present. A concurrent update elsewhere wins over the removal.
    pub fn remove(&mut self, node: &UniqueAddress, key: &K) -> Option<V> {
        self.keys.remove(node, key);
        let slot = self.values.remove(key)?;
        match slot.merged {
            Some(merged) => Some(merged),
            None => slot.by_node.into_values().next(),
        }
    }

    /// The value of the update `(node, version)` of `key` on this side, if
    /// it is live here.
    fn live_value(&self, key: &K, node: &UniqueAddress, version: u64) -> Option<&V> {
        let dot = self.keys.dot(key)?;
        if dot.version_at(node) == version {
            self.values.get(key)?.by_node.get(node)
        } else {
            None
        }
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
            let Some(dot) = keys.dot(key) else { continue };
            // Each live update's value comes from a side where it is live;
            // an update has one value, so if both have it they agree (merge
            // them anyway rather than trust that).
            let mut by_node = BTreeMap::new();
            for (node, version) in dot.iter() {
                let ours = self.live_value(key, node, version);
                let theirs = other.live_value(key, node, version);
                let value = match (ours, theirs) {
                    (Some(x), Some(y)) => x.merge(y),
                    (Some(only), None) | (None, Some(only)) => only.clone(),
                    // Only in a state deserialised broken.
                    (None, None) => continue,
                };
                by_node.insert(node.clone(), value);
            }
            if !by_node.is_empty() {
                values.insert(key.clone(), Slot::new(by_node));
            }
        }
        ORMap { keys, values }
    }

    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress> {
        let mut nodes = self.keys.modified_by_nodes();
        for slot in self.values.values() {
            for value in slot.by_node.values() {
                nodes.extend(value.modified_by_nodes());
            }
        }
        nodes
    }

    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool {
        self.keys.need_pruning_from(removed)
            || self
                .values
                .values()
                .flat_map(|slot| slot.by_node.values())
                .any(|v| v.need_pruning_from(removed))
    }

    fn prune(&mut self, removed: &UniqueAddress, into: &UniqueAddress) {
        // A key is touched if the removed node is in its dot or in any of
        // its values. Its live updates are collapsed into one new update by
        // `into` holding their merge, pruned as a whole: pruning each value
        // on its own could fold the removed node's share into `into`'s
        // entry in one value while another value's entry for `into` hides
        // it at the next merge.
        let touched: Vec<K> = self
            .keys
            .iter()
            .filter(|k| {
                self.keys
                    .dot(k)
                    .is_some_and(|d| d.need_pruning_from(removed))
                    || self.values.get(k).is_some_and(|slot| {
                        slot.by_node.values().any(|v| v.need_pruning_from(removed))
                    })
            })
            .cloned()
            .collect();
        self.keys.prune(removed, into);
        for key in touched {
            let Some(mut value) = self.get(&key).cloned() else {
                continue;
            };
            if value.need_pruning_from(removed) {
                value.prune(removed, into);
            }
            // The fresh dot names only `into`, matching the single value.
            self.keys.add(into, key.clone());
            self.values.insert(key, Slot::single(into, value));
        }
    }

    fn pruning_cleanup(&mut self, removed: &UniqueAddress) {
        self.keys.pruning_cleanup(removed);
        // Keep the values in step with the key set: the removed node's
        // updates are gone from the dots, and keys only it had updated are
        // gone altogether (the pruned state brings them back under `into`).
        let keys = &self.keys;
        self.values.retain(|k, _| keys.contains(k));
        for slot in self.values.values_mut() {
            let mut by_node = std::mem::take(&mut slot.by_node);
            by_node.remove(removed);
            for value in by_node.values_mut() {
                if value.need_pruning_from(removed) {
                    value.pruning_cleanup(removed);
                }
            }
            *slot = Slot::new(by_node);
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
        assert_eq!(m.entries().into_keys().collect::<Vec<_>>(), vec!["x"]);
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
        // The key survives with `b`'s value, which had seen `a`'s count.
        assert_eq!(m.get(&1).map(GCounter::value), Some(2));
        assert_eq!(y.merge(&x), m);
    }

    #[test]
    fn removal_discards_what_it_saw_in_any_merge_order() {
        // Akka's ORMap fails this: `b` updates, `a` sees it and removes the
        // key, `c` updates concurrently; `c`'s update must survive alone,
        // whichever way round the three states are merged.
        let (a, b, c) = (node(1), node(2), node(3));
        let mut xb: ORMap<u8, GCounter> = ORMap::new();
        xb.update(&b, 1, GCounter::new(), |g| g.increment(&b, 1));
        let mut xa = ORMap::new().merge(&xb);
        xa.remove(&a, &1);
        let mut xc = ORMap::new();
        xc.update(&c, 1, GCounter::new(), |g| g.increment(&c, 1));
        let left = xa.merge(&xb).merge(&xc);
        let right = xa.merge(&xb.merge(&xc));
        assert_eq!(left, right);
        assert_eq!(left.get(&1).map(|g| g.count_of(&c)), Some(1));
        assert_eq!(left.get(&1).map(|g| g.count_of(&b)), Some(0));
        // While both updates are live the value shown is their merge.
        let both = xb.merge(&xc);
        assert_eq!(both.get(&1).map(GCounter::value), Some(2));
        // The next update carries the merge forward as one value.
        let mut next = both.clone();
        next.update(&a, 1, GCounter::new(), |g| g.increment(&a, 1));
        assert_eq!(next.get(&1).map(GCounter::value), Some(3));
        assert_eq!(next.merge(&both), next);
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
        // Two live updates of one key, so that the cached merge is rebuilt.
        let b = node(2);
        let mut other = ORMap::new();
        other.update(&b, (1, 2), PNCounter::new(), |c| c.increment(&b, 10));
        let m = m.merge(&other);
        assert_eq!(m.get(&(1, 2)).map(PNCounter::value), Some(7));
        let json = serde_json::to_string(&m).unwrap();
        let back: ORMap<(u8, u8), PNCounter> = serde_json::from_str(&json).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.get(&(1, 2)).map(PNCounter::value), Some(7));
        let bytes = rmp_serde::to_vec(&m).unwrap();
        let back: ORMap<(u8, u8), PNCounter> = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(back, m);
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
                        after.entries().into_keys().collect::<Vec<_>>(),
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
                    // Keys merge as an OR-set (add wins).
                    prop_assert_eq!(after.key_set(), &before.key_set().merge(incoming.key_set()));
                    for (x, y) in [(before, incoming), (incoming, before)] {
                        let seen = y.key_set().version_vector();
                        for (k, v) in x.iter() {
                            let dot = x.key_set().dot(k).unwrap();
                            // An update the other side has not seen survives.
                            if dot.iter().any(|(n, ver)| seen.version_at(n) < ver) {
                                prop_assert!(after.contains_key(k));
                            }
                            // While a value's updates are all live, it never
                            // goes down (a seen removal may reset it).
                            let merged_dot = after.key_set().dot(k);
                            if dot.iter().all(|(n, ver)| merged_dot.map(|d| d.version_at(n)) == Some(ver)) {
                                prop_assert!(after.get(k).unwrap().value() >= v.value());
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

    fn count(m: &mut Counters, n: &UniqueAddress, op: &Op) {
        match op {
            Op::Add(k, e) => m.update(n, *k, GCounter::new(), |c| c.increment(n, *e as u64)),
            Op::Count(k, x) => m.update(n, *k, GCounter::new(), |c| c.increment(n, *x)),
            Op::Remove(k) => {
                m.remove(n, k);
            }
        }
    }

    fn add(m: &mut Sets, n: &UniqueAddress, op: &Op) {
        match op {
            Op::Add(k, e) => m.update(n, *k, ORSet::new(), |s| s.add(n, *e)),
            Op::Count(k, _) => m.update(n, *k, ORSet::new(), |s| s.clear(n)),
            Op::Remove(k) => {
                m.remove(n, k);
            }
        }
    }

    proptest! {
        #[test]
        fn prune_keeps_the_sets(s in steps(op())) {
            let [a, b, c] = run::<Sets, Op>(&s, add, |_, _, _| Ok(()))?;
            let (gone, into) = (node(0), node(1));
            let mut pruned = b.clone();
            pruned.prune(&gone, &into);
            prop_assert!(!pruned.need_pruning_from(&gone));
            let values = |m: &Sets| {
                m.iter().map(|(k, v)| (*k, v.elements())).collect::<Vec<_>>()
            };
            prop_assert_eq!(values(&pruned), values(&b));
            let mut cleaned = a.clone();
            cleaned.pruning_cleanup(&gone);
            let mut cleaned_c = c.clone();
            cleaned_c.pruning_cleanup(&gone);
            prop_assert!(!cleaned.need_pruning_from(&gone));
            check_laws(&cleaned, &pruned, &cleaned_c)?;
        }

        #[test]
        fn prune_keeps_the_entries(s in steps(op())) {
            let [a, b, c] = run::<Counters, Op>(&s, count, |_, _, _| Ok(()))?;
            let (gone, into) = (node(0), node(1));
            let mut pruned = b.clone();
            pruned.prune(&gone, &into);
            prop_assert!(!pruned.need_pruning_from(&gone));
            let values = |m: &Counters| {
                m.iter().map(|(k, v)| (*k, v.value())).collect::<Vec<_>>()
            };
            prop_assert_eq!(values(&pruned), values(&b));
            let mut cleaned = a.clone();
            cleaned.pruning_cleanup(&gone);
            let m = cleaned.merge(&pruned);
            prop_assert!(!m.need_pruning_from(&gone));
            prop_assert_eq!(&m, &pruned.merge(&cleaned));
            // Once the others have cleaned up, merging is a lattice again.
            let mut cleaned_c = c.clone();
            cleaned_c.pruning_cleanup(&gone);
            check_laws(&cleaned, &pruned, &cleaned_c)?;
        }
    }
}
