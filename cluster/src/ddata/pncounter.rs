//! A counter that can go up and down.

use super::crdt::ReplicatedData;
use super::gcounter::GCounter;
use crate::member::UniqueAddress;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// An increment/decrement counter (PN-Counter): two [`GCounter`]s, one for
/// increments and one for decrements; the value is their difference.
///
/// Both halves only grow, which is what makes concurrent increments and
/// decrements merge without losing any of them.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PNCounter {
    /// The increments.
    increments: GCounter,
    /// The decrements.
    decrements: GCounter,
}

impl PNCounter {
    /// An empty counter (value 0).
    pub fn new() -> Self {
        PNCounter::default()
    }

    /// The current value: all increments minus all decrements.
    pub fn value(&self) -> i128 {
        // Each half is at most (nodes × u64::MAX), far below i128::MAX.
        self.increments.value() as i128 - self.decrements.value() as i128
    }

    /// Adds `n`; `node` must be the local node.
    pub fn increment(&mut self, node: &UniqueAddress, n: u64) {
        self.increments.increment(node, n);
    }

    /// Subtracts `n`; `node` must be the local node.
    pub fn decrement(&mut self, node: &UniqueAddress, n: u64) {
        self.decrements.increment(node, n);
    }

    /// Adds `delta`, which may be negative (Akka's `increment(n)` with a
    /// signed `n`).
    pub fn change(&mut self, node: &UniqueAddress, delta: i64) {
        if delta >= 0 {
            self.increment(node, delta as u64);
        } else {
            self.decrement(node, delta.unsigned_abs());
        }
    }

    /// The grow-only counter of the increments.
    pub fn increments(&self) -> &GCounter {
        &self.increments
    }

    /// The grow-only counter of the decrements.
    pub fn decrements(&self) -> &GCounter {
        &self.decrements
    }
}

impl ReplicatedData for PNCounter {
    fn merge(&self, other: &Self) -> Self {
        PNCounter {
            increments: self.increments.merge(&other.increments),
            decrements: self.decrements.merge(&other.decrements),
        }
    }

    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress> {
        let mut nodes = self.increments.modified_by_nodes();
        nodes.extend(self.decrements.modified_by_nodes());
        nodes
    }

    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool {
        self.increments.need_pruning_from(removed) || self.decrements.need_pruning_from(removed)
    }

    fn prune(&mut self, removed: &UniqueAddress, into: &UniqueAddress) {
        self.increments.prune(removed, into);
        self.decrements.prune(removed, into);
    }

    fn pruning_cleanup(&mut self, removed: &UniqueAddress) {
        self.increments.pruning_cleanup(removed);
        self.decrements.pruning_cleanup(removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddata::crdt::testing::{check_laws, node, run, steps};
    use proptest::prelude::*;

    #[test]
    fn goes_up_and_down() {
        let (a, b) = (node(1), node(2));
        let mut c = PNCounter::new();
        c.increment(&a, 5);
        c.decrement(&b, 7);
        assert_eq!(c.value(), -2);
        c.change(&a, 3);
        c.change(&b, -1);
        c.change(&b, i64::MIN);
        // 8 up, 8 + 2^63 down.
        assert_eq!(c.value(), -(1i128 << 63));
        assert_eq!(c.increments().value(), 8);
    }

    #[test]
    fn concurrent_increment_and_decrement_both_survive() {
        let (a, b) = (node(1), node(2));
        let mut x = PNCounter::new();
        x.increment(&a, 10);
        let mut y = x.clone();
        x.increment(&a, 1);
        y.decrement(&b, 4);
        assert_eq!(x.merge(&y).value(), 7);
        assert_eq!(y.merge(&x).value(), 7);
    }

    #[test]
    fn prune_keeps_the_value() {
        let (a, gone) = (node(1), node(3));
        let mut c = PNCounter::new();
        c.increment(&gone, 4);
        c.decrement(&gone, 9);
        c.increment(&a, 1);
        assert!(c.need_pruning_from(&gone));
        c.prune(&gone, &a);
        assert!(!c.need_pruning_from(&gone));
        assert_eq!(c.value(), -4);
        assert_eq!(c.modified_by_nodes(), [a].into_iter().collect());
    }

    #[test]
    fn serde_round_trip() {
        let mut c = PNCounter::new();
        c.increment(&node(1), 7);
        c.decrement(&node(2), 9);
        let json = serde_json::to_string(&c).unwrap();
        let bytes = rmp_serde::to_vec(&c).unwrap();
        assert_eq!(rmp_serde::from_slice::<PNCounter>(&bytes).unwrap(), c);
        assert_eq!(serde_json::from_str::<PNCounter>(&json).unwrap(), c);
    }

    proptest! {
        #[test]
        fn merge_laws_and_monotonic(s in steps(-5..5i64)) {
            let replicas = run::<PNCounter, i64>(
                &s,
                |c, n, &d| c.change(n, d),
                |before, incoming, after| {
                    // Neither half may shrink for any node.
                    for side in [before, incoming] {
                        for (n, k) in side.increments().counts() {
                            prop_assert!(after.increments().count_of(n) >= k);
                        }
                        for (n, k) in side.decrements().counts() {
                            prop_assert!(after.decrements().count_of(n) >= k);
                        }
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
        fn prune_keeps_the_value_of_any_run(s in steps(-5..5i64)) {
            let [a, b, c] = run::<PNCounter, i64>(&s, |c, n, &d| c.change(n, d), |_, _, _| Ok(()))?;
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
        }
    }
}
