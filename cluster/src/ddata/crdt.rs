//! The [`ReplicatedData`] trait every replicated data type implements, and
//! the helpers the types share.

use crate::member::UniqueAddress;
use std::collections::BTreeSet;

/// A state-based convergent replicated data type (CvRDT).
///
/// `merge` must be commutative, associative and idempotent, and must never
/// lose an update either side has seen: `a.merge(&b)` is the least state
/// that includes both `a` and `b`. Replicas that have merged the same set of
/// states are therefore equal, whatever the order of the merges.
///
/// The pruning methods support Akka's *removed node pruning*: when a node
/// leaves the cluster for good, the state it contributed is collapsed into
/// another node so that the per-node bookkeeping does not grow forever. The
/// defaults do nothing, which is right for types that keep no per-node state
/// (or, like [`LWWRegister`](super::LWWRegister), only use the node as a
/// tie-break).
pub trait ReplicatedData: Clone + PartialEq + Send + Sync + 'static {
    /// The least upper bound of `self` and `other`.
    fn merge(&self, other: &Self) -> Self;

    /// Whether `other` already includes all of `self`, so that
    /// `self.merge(other)` equals `other`: a replicator then takes `other`
    /// as it is instead of merging (and encoding the result). `false`, the
    /// default, is always correct; `true` must imply that the merge equals
    /// `other`. [`ORSet`](super::ORSet) answers it without building the
    /// merge.
    fn is_covered_by(&self, other: &Self) -> bool {
        let _ = other;
        false
    }

    /// The nodes that have changed this state and would need pruning if
    /// they were removed from the cluster.
    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress> {
        BTreeSet::new()
    }

    /// Whether this state holds changes made by `removed`.
    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool {
        let _ = removed;
        false
    }

    /// Collapses the changes made by `removed` into `into`, so that `removed`
    /// no longer appears in the state. Done once, by one node (`into`), after
    /// `removed` has left the cluster.
    fn prune(&mut self, removed: &UniqueAddress, into: &UniqueAddress) {
        let _ = (removed, into);
    }

    /// Drops whatever `removed` contributed, on a replica that learns that
    /// the pruning has been performed elsewhere. It must be followed by a
    /// merge with the pruned state, which carries the collapsed changes.
    fn pruning_cleanup(&mut self, removed: &UniqueAddress) {
        let _ = removed;
    }
}

/// Serialises a `BTreeMap` as a sequence of `(key, value)` pairs, because
/// the keys here are structs (nodes, user elements) and self-describing
/// formats such as JSON only allow string map keys.
pub(crate) mod pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub(crate) fn serialize<K, V, S>(map: &BTreeMap<K, V>, s: S) -> Result<S::Ok, S::Error>
    where
        K: Serialize,
        V: Serialize,
        S: Serializer,
    {
        s.collect_seq(map.iter())
    }

    pub(crate) fn deserialize<'de, K, V, D>(d: D) -> Result<BTreeMap<K, V>, D::Error>
    where
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        let pairs = Vec::<(K, V)>::deserialize(d)?;
        Ok(pairs.into_iter().collect())
    }
}

/// Helpers shared by the tests of the data types.
#[cfg(test)]
pub(crate) mod testing {
    use super::ReplicatedData;
    use crate::member::UniqueAddress;
    use proptest::prelude::*;
    use std::fmt::Debug;
    use troupe_core::remote::Address;

    /// Node `i` of a test cluster.
    pub(crate) fn node(i: u64) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "127.0.0.1", 2550 + i as u16), 1000 + i)
    }

    /// The three lattice laws on three replica states, and that a merge
    /// includes both of its inputs (merging an input again changes nothing).
    pub(crate) fn check_laws<T: ReplicatedData + Debug>(
        a: &T,
        b: &T,
        c: &T,
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(a.merge(a), a.clone(), "idempotent");
        prop_assert_eq!(a.merge(b), b.merge(a), "commutative");
        prop_assert_eq!(a.merge(b).merge(c), a.merge(&b.merge(c)), "associative");
        let ab = a.merge(b);
        prop_assert_eq!(ab.merge(a), ab.clone(), "a is included in a + b");
        prop_assert_eq!(ab.merge(b), ab.clone(), "b is included in a + b");
        Ok(())
    }

    /// A run of operations on three replicas: each step either changes one
    /// replica (`Op`) or merges one replica's state into another.
    #[derive(Debug, Clone)]
    pub(crate) enum Step<Op> {
        /// Apply an operation on replica `.0`.
        Local(usize, Op),
        /// Merge replica `.1` into replica `.0`.
        Merge(usize, usize),
    }

    /// Random steps over three replicas, using `op` for the local ones.
    pub(crate) fn steps<Op: Debug + Clone>(
        op: impl Strategy<Value = Op>,
    ) -> impl Strategy<Value = Vec<Step<Op>>> {
        let step = prop_oneof![
            3 => (0..3usize, op).prop_map(|(r, o)| Step::Local(r, o)),
            1 => (0..3usize, 0..3usize).prop_map(|(to, from)| Step::Merge(to, from)),
        ];
        proptest::collection::vec(step, 0..40)
    }

    /// Runs `steps` on three replicas starting at `T::default()`; replica
    /// `i` acts as [`node`]`(i)`. `check` sees each merge as
    /// `(before, incoming, after)`, to assert that nothing acknowledged by
    /// either side is lost.
    pub(crate) fn run<T, Op>(
        steps: &[Step<Op>],
        mut apply: impl FnMut(&mut T, &UniqueAddress, &Op),
        mut check: impl FnMut(&T, &T, &T) -> Result<(), TestCaseError>,
    ) -> Result<[T; 3], TestCaseError>
    where
        T: ReplicatedData + Default,
    {
        let mut replicas: [T; 3] = [T::default(), T::default(), T::default()];
        for step in steps {
            match step {
                Step::Local(r, op) => apply(&mut replicas[*r], &node(*r as u64), op),
                Step::Merge(to, from) => {
                    let merged = replicas[*to].merge(&replicas[*from]);
                    check(&replicas[*to], &replicas[*from], &merged)?;
                    replicas[*to] = merged;
                }
            }
        }
        Ok(replicas)
    }
}
