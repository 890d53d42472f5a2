//! A grow-only counter.

use super::crdt::{pairs, ReplicatedData};
use crate::member::UniqueAddress;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A grow-only counter (G-Counter): each node counts its own increments,
/// a merge keeps the highest count seen for every node, and the value is the
/// sum of the counts.
///
/// Per-node counts are `u64` (Akka uses big integers); the sum is a `u128`,
/// so it cannot overflow for any realistic number of nodes.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GCounter {
    /// Count per node; never holds a zero count.
    #[serde(with = "pairs")]
    state: BTreeMap<UniqueAddress, u64>,
}

impl GCounter {
    /// An empty counter (value 0).
    pub fn new() -> Self {
        GCounter::default()
    }

    /// The current total: the sum of all nodes' counts.
    pub fn value(&self) -> u128 {
        self.state.values().map(|&n| n as u128).sum()
    }

    /// The count contributed by `node`.
    pub fn count_of(&self, node: &UniqueAddress) -> u64 {
        self.state.get(node).copied().unwrap_or(0)
    }

    /// The per-node counts, in node order.
    pub fn counts(&self) -> impl Iterator<Item = (&UniqueAddress, u64)> + '_ {
        self.state.iter().map(|(node, &n)| (node, n))
    }

    /// Adds `n` to `node`'s count; `node` must be the local node.
    ///
    /// The count saturates at `u64::MAX` rather than wrapping, because
    /// wrapping would look like a decrease and be discarded by merges.
    pub fn increment(&mut self, node: &UniqueAddress, n: u64) {
        // A zero entry would only make two equal counters compare unequal.
        if n == 0 {
            return;
        }
        let count = self.state.entry(node.clone()).or_insert(0);
        *count = count.saturating_add(n);
    }
}

impl ReplicatedData for GCounter {
    fn merge(&self, other: &Self) -> Self {
        let mut state = self.state.clone();
        for (node, &theirs) in &other.state {
            let ours = state.entry(node.clone()).or_insert(0);
            *ours = (*ours).max(theirs);
        }
        GCounter { state }
    }

    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress> {
        self.state.keys().cloned().collect()
    }

    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool {
        self.state.contains_key(removed)
    }

    fn prune(&mut self, removed: &UniqueAddress, into: &UniqueAddress) {
        // The removed node's count becomes part of `into`'s, so the value
        // is unchanged.
        if let Some(n) = self.state.remove(removed) {
            self.increment(into, n);
        }
    }

    fn pruning_cleanup(&mut self, removed: &UniqueAddress) {
        self.state.remove(removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddata::crdt::testing::{check_laws, node, run, steps};
    use proptest::prelude::*;

    #[test]
    fn counts_per_node_and_sums() {
        let (a, b) = (node(1), node(2));
        let mut c = GCounter::new();
        assert_eq!(c.value(), 0);
        c.increment(&a, 3);
        c.increment(&b, 2);
        c.increment(&a, 1);
        assert_eq!(c.value(), 6);
        assert_eq!(c.count_of(&a), 4);
        assert_eq!(c.count_of(&node(9)), 0);
        c.increment(&b, 0);
        assert_eq!(c.counts().count(), 2);
    }

    #[test]
    fn merge_keeps_the_highest_count_per_node() {
        let (a, b) = (node(1), node(2));
        let mut x = GCounter::new();
        x.increment(&a, 5);
        let mut y = x.clone();
        y.increment(&b, 2);
        x.increment(&a, 1);
        let m = x.merge(&y);
        assert_eq!(m.count_of(&a), 6);
        assert_eq!(m.count_of(&b), 2);
        assert_eq!(m.value(), 8);
    }

    #[test]
    fn saturates_instead_of_wrapping() {
        let a = node(1);
        let mut c = GCounter::new();
        c.increment(&a, u64::MAX);
        c.increment(&a, 5);
        assert_eq!(c.count_of(&a), u64::MAX);
        c.increment(&node(2), u64::MAX);
        assert_eq!(c.value(), 2 * u64::MAX as u128);
    }

    #[test]
    fn prune_moves_the_count_and_cleanup_drops_it() {
        let (a, b, gone) = (node(1), node(2), node(3));
        let mut c = GCounter::new();
        c.increment(&a, 1);
        c.increment(&gone, 4);
        let stale = c.clone();
        assert!(c.need_pruning_from(&gone));
        c.prune(&gone, &b);
        assert!(!c.need_pruning_from(&gone));
        assert_eq!(c.value(), 5);
        assert_eq!(c.count_of(&b), 4);
        assert_eq!(c.modified_by_nodes(), [a, b].into_iter().collect());
        let mut cleaned = stale;
        cleaned.pruning_cleanup(&gone);
        assert_eq!(cleaned.merge(&c), c);
    }

    #[test]
    fn serde_round_trip() {
        let mut c = GCounter::new();
        c.increment(&node(1), 7);
        c.increment(&node(2), 1);
        // JSON only allows string map keys: the pairs encoding must cope.
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(serde_json::from_str::<GCounter>(&json).unwrap(), c);
        let bytes = rmp_serde::to_vec(&c).unwrap();
        assert_eq!(rmp_serde::from_slice::<GCounter>(&bytes).unwrap(), c);
    }

    proptest! {
        #[test]
        fn merge_laws_and_monotonic(s in steps(0..5u64)) {
            let replicas = run::<GCounter, u64>(
                &s,
                |c, n, &k| c.increment(n, k),
                |before, incoming, after| {
                    prop_assert!(after.value() >= before.value().max(incoming.value()));
                    for (n, k) in before.counts().chain(incoming.counts()) {
                        prop_assert!(after.count_of(n) >= k);
                    }
                    Ok(())
                },
            )?;
            let [a, b, c] = &replicas;
            check_laws(a, b, c)?;
        }
    }

    proptest! {
        #[test]
        fn prune_keeps_the_value(s in steps(0..5u64)) {
            let [a, b, c] = run::<GCounter, u64>(&s, |c, n, &k| c.increment(n, k), |_, _, _| Ok(()))?;
            let (gone, into) = (node(0), node(1));
            let mut pruned = b.clone();
            pruned.prune(&gone, &into);
            prop_assert!(!pruned.need_pruning_from(&gone));
            prop_assert_eq!(pruned.value(), b.value());
            let mut cleaned = a.clone();
            cleaned.pruning_cleanup(&gone);
            let m = cleaned.merge(&pruned);
            prop_assert!(!m.need_pruning_from(&gone));
            prop_assert_eq!(&m, &pruned.merge(&cleaned));
            // Once the others have cleaned up, merging is a lattice again.
            let mut cleaned_c = c.clone();
            cleaned_c.pruning_cleanup(&gone);
            check_laws(&cleaned, &pruned, &cleaned_c)?;
            prop_assert!(m.value() >= pruned.value());
        }
    }
}
