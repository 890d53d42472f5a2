//! Vector clocks: the version of a gossip. Comparing two clocks tells
//! whether one gossip supersedes the other or whether they diverged and
//! must be merged.

use crate::member::UniqueAddress;
use serde::{Deserialize, Deserializer, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// How one vector clock relates to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClockOrdering {
    /// `self` happened before the other clock (the other supersedes it).
    Before,
    /// `self` happened after the other clock (it supersedes the other).
    After,
    /// Both clocks record the same history.
    Same,
    /// Neither clock includes the other: the histories diverged.
    Concurrent,
}

impl ClockOrdering {
    /// The same relation seen from the other clock: `Before` and `After`
    /// swap, `Same` and `Concurrent` stay.
    pub fn reverse(self) -> ClockOrdering {
        match self {
            ClockOrdering::Before => ClockOrdering::After,
            ClockOrdering::After => ClockOrdering::Before,
            other => other,
        }
    }
}

/// A vector clock: per node, how many changes that node has made.
///
/// Nodes are keyed by [`UniqueAddress::clock_key`] rather than by the full
/// address, so that a clock costs 16 bytes per node on the wire. A node
/// without an entry counts as zero, and zero entries are never stored, so
/// the derived equality agrees with [`ClockOrdering::Same`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VectorClock {
    /// Clock key of the node -> its counter (always at least 1).
    #[serde(deserialize_with = "non_zero_versions")]
    versions: BTreeMap<u64, u64>,
}

/// Drops zero counters from a received clock: they mean the same as a
/// missing entry, and keeping them would make equal clocks compare unequal.
fn non_zero_versions<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<u64, u64>, D::Error> {
    let mut versions = BTreeMap::<u64, u64>::deserialize(d)?;
    versions.retain(|_, v| *v != 0);
    Ok(versions)
}

impl VectorClock {
    /// An empty clock (before every other clock).
    pub fn new() -> Self {
        VectorClock::default()
    }

    /// Records one more change made by `node`.
    pub fn increment(&mut self, node: &UniqueAddress) {
        *self.versions.entry(node.clock_key()).or_insert(0) += 1;
    }

    /// The counter of `node` (zero if it has none).
    pub fn get(&self, node: &UniqueAddress) -> u64 {
        self.versions.get(&node.clock_key()).copied().unwrap_or(0)
    }

    /// Compares `self` with `other`:
    ///
    /// * `Same` if every counter is equal,
    /// * `Before` if no counter of `self` is greater and at least one is
    ///   smaller,
    /// * `After` if no counter of `self` is smaller and at least one is
    ///   greater,
    /// * `Concurrent` otherwise.
    ///
    /// Walks both sorted maps once (O(n)) and stops as soon as the clocks
    /// are known to be concurrent.
    pub fn compare(&self, other: &VectorClock) -> ClockOrdering {
        let mut mine = self.versions.iter().peekable();
        let mut theirs = other.versions.iter().peekable();
        let mut result = ClockOrdering::Same;
        loop {
            // How self's counter compares with other's at the next key of
            // either map; a missing key counts as zero.
            let step = match (mine.peek().copied(), theirs.peek().copied()) {
                (None, None) => return result,
                (Some((_, &a)), None) => {
                    mine.next();
                    a.cmp(&0)
                }
                (None, Some((_, &b))) => {
                    theirs.next();
                    0.cmp(&b)
                }
                (Some((ka, &a)), Some((kb, &b))) => match ka.cmp(kb) {
                    Ordering::Less => {
                        mine.next();
                        a.cmp(&0)
                    }
                    Ordering::Greater => {
                        theirs.next();
                        0.cmp(&b)
                    }
                    Ordering::Equal => {
                        mine.next();
                        theirs.next();
                        a.cmp(&b)
                    }
                },
            };
            result = match (result, step) {
                (r, Ordering::Equal) => r,
                (ClockOrdering::Same | ClockOrdering::After, Ordering::Greater) => {
                    ClockOrdering::After
                }
                (ClockOrdering::Same | ClockOrdering::Before, Ordering::Less) => {
                    ClockOrdering::Before
                }
                // Ahead on one key and behind on another: nothing the rest
                // of the walk finds can change that.
                _ => return ClockOrdering::Concurrent,
            };
        }
    }

    /// True if `self` happened before `other`.
    pub fn is_before(&self, other: &VectorClock) -> bool {
        self.compare(other) == ClockOrdering::Before
    }

    /// True if `self` happened after `other`.
    pub fn is_after(&self, other: &VectorClock) -> bool {
        self.compare(other) == ClockOrdering::After
    }

    /// True if both clocks record the same history.
    pub fn is_same(&self, other: &VectorClock) -> bool {
        self.compare(other) == ClockOrdering::Same
    }

    /// True if neither clock includes the other.
    pub fn is_concurrent(&self, other: &VectorClock) -> bool {
        self.compare(other) == ClockOrdering::Concurrent
    }

    /// The least clock that includes both histories: the pointwise maximum.
    pub fn merge(&self, other: &VectorClock) -> VectorClock {
        let mut versions = self.versions.clone();
        for (&key, &counter) in &other.versions {
            let entry = versions.entry(key).or_insert(0);
            *entry = (*entry).max(counter);
        }
        VectorClock { versions }
    }

    /// Forgets `node`, which has been removed from the cluster, so that
    /// clocks do not grow with every node that ever joined.
    pub fn prune(&mut self, node: &UniqueAddress) {
        self.versions.remove(&node.clock_key());
    }

    /// The number of nodes with an entry.
    pub fn len(&self) -> usize {
        self.versions.len()
    }

    /// True if no node has an entry.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// The entries as `(clock key, counter)`, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.versions.iter().map(|(&k, &v)| (k, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use troupe_core::remote::Address;

    fn node(host: &str) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", host, 2552), 1)
    }

    fn clock(increments: &[&str]) -> VectorClock {
        let mut c = VectorClock::new();
        for host in increments {
            c.increment(&node(host));
        }
        c
    }

    #[test]
    fn empty_clocks_are_same() {
        let a = VectorClock::new();
        assert!(a.is_empty());
        assert_eq!(a.compare(&VectorClock::new()), ClockOrdering::Same);
    }

    #[test]
    fn increment_moves_forward() {
        let a = clock(&["a"]);
        let mut b = a.clone();
        b.increment(&node("a"));
        assert_eq!(b.get(&node("a")), 2);
        assert_eq!(a.compare(&b), ClockOrdering::Before);
        assert_eq!(b.compare(&a), ClockOrdering::After);
        assert!(a.is_before(&b) && b.is_after(&a));
        assert!(VectorClock::new().is_before(&a));
    }

    #[test]
    fn a_new_node_entry_is_after() {
        let a = clock(&["a", "b"]);
        let mut b = a.clone();
        b.increment(&node("c"));
        assert_eq!(b.compare(&a), ClockOrdering::After);
        assert_eq!(a.compare(&b), ClockOrdering::Before);
    }

    #[test]
    fn same_history_is_same() {
        let a = clock(&["a", "b", "a"]);
        let b = clock(&["b", "a", "a"]);
        assert!(a.is_same(&b));
        assert_eq!(a, b);
    }

    #[test]
    fn divergent_histories_are_concurrent() {
        let base = clock(&["a"]);
        let mut left = base.clone();
        left.increment(&node("b"));
        let mut right = base.clone();
        right.increment(&node("c"));
        assert!(left.is_concurrent(&right));
        assert!(right.is_concurrent(&left));

        // Same keys, counters crossing over.
        let x = clock(&["a", "a", "b"]);
        let y = clock(&["a", "b", "b"]);
        assert_eq!(x.compare(&y), ClockOrdering::Concurrent);

        let merged = left.merge(&right);
        assert!(merged.is_after(&left) && merged.is_after(&right));
    }

    #[test]
    fn prune_forgets_a_node() {
        let mut a = clock(&["a", "b", "b"]);
        a.prune(&node("b"));
        assert_eq!(a.len(), 1);
        assert_eq!(a.get(&node("b")), 0);
        assert_eq!(a, clock(&["a"]));
        // Pruning a node without an entry changes nothing.
        a.prune(&node("z"));
        assert_eq!(a, clock(&["a"]));
    }

    /// The expected relation, from the definition.
    fn reference_compare(a: &VectorClock, b: &VectorClock) -> ClockOrdering {
        let keys: std::collections::BTreeSet<u64> = a
            .versions
            .keys()
            .chain(b.versions.keys())
            .copied()
            .collect();
        let get = |c: &VectorClock, k| c.versions.get(&k).copied().unwrap_or(0);
        let ahead = keys.iter().any(|&k| get(a, k) > get(b, k));
        let behind = keys.iter().any(|&k| get(a, k) < get(b, k));
        match (ahead, behind) {
            (false, false) => ClockOrdering::Same,
            (true, false) => ClockOrdering::After,
            (false, true) => ClockOrdering::Before,
            (true, true) => ClockOrdering::Concurrent,
        }
    }

    fn arb_clock() -> impl Strategy<Value = VectorClock> {
        // Few keys and small counters, so that equal and crossing entries
        // are common.
        prop::collection::btree_map(0u64..6, 1u64..4, 0..6)
            .prop_map(|versions| VectorClock { versions })
    }

    proptest! {
        #[test]
        fn merge_is_commutative(a in arb_clock(), b in arb_clock()) {
            prop_assert_eq!(a.merge(&b), b.merge(&a));
        }

        #[test]
        fn merge_is_associative(a in arb_clock(), b in arb_clock(), c in arb_clock()) {
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
        }

        #[test]
        fn merge_is_idempotent(a in arb_clock(), b in arb_clock()) {
            prop_assert_eq!(a.merge(&a), a.clone());
            let ab = a.merge(&b);
            prop_assert_eq!(ab.merge(&b), ab.clone());
        }

        #[test]
        fn merge_is_an_upper_bound(a in arb_clock(), b in arb_clock()) {
            let m = a.merge(&b);
            prop_assert!(matches!(a.compare(&m), ClockOrdering::Before | ClockOrdering::Same));
            prop_assert!(matches!(b.compare(&m), ClockOrdering::Before | ClockOrdering::Same));
        }

        #[test]
        fn compare_matches_the_definition(a in arb_clock(), b in arb_clock()) {
            let ord = a.compare(&b);
            prop_assert_eq!(ord, reference_compare(&a, &b));
            prop_assert_eq!(b.compare(&a), ord.reverse());
            prop_assert_eq!(ord == ClockOrdering::Same, a == b);
        }
    }
}
