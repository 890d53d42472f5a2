//! The reachability table: what each observer's failure detector currently
//! says about the nodes it watches.
//!
//! Only an observer changes its own records, and every change bumps that
//! observer's version, so when two tables are merged the newer set of
//! records of each observer is always known. Every node is reachable by
//! default, so an observer whose records would all say `Reachable` keeps
//! none: in a healthy cluster the table is empty.
//!
//! The aggregated status of a subject is, in this order: `Terminated` if
//! any observer says so, `Unreachable` if any observer says so, otherwise
//! `Reachable`. A node is therefore reachable again only when every
//! observer that saw it unreachable sees it reachable again.
//!
//! Like Akka's, the table is a value: every operation returns a new table
//! and leaves `self` as it was, so a gossip state can be changed by
//! assignment (`g.reachability = g.reachability.unreachable(&me, &n)`).

use crate::member::UniqueAddress;
use serde::{Deserialize, Deserializer, Serialize};
use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

/// What an observer says about a subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ReachabilityStatus {
    /// The subject answers heartbeats.
    Reachable,
    /// The subject stopped answering heartbeats (it may come back).
    Unreachable,
    /// The subject is known to be gone for good (for example it was
    /// downed or its system shut down); this never changes back.
    Terminated,
}

/// One observation: `observer` says `subject` is `status`, as of the
/// observer's change number `version`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Record {
    /// The node whose failure detector made the observation.
    pub observer: UniqueAddress,
    /// The node observed.
    pub subject: UniqueAddress,
    /// What the observer says about the subject.
    pub status: ReachabilityStatus,
    /// The observer's version when this record was written.
    pub version: u64,
}

/// The reachability table: records of observers about subjects, and the
/// version of each observer's latest change.
///
/// Equality is structural and canonical (records are kept sorted), so two
/// tables with the same content compare equal whatever their history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reachability {
    /// Sorted by (observer, subject), one record per pair, so that an
    /// observer's records are a contiguous run found by binary search.
    #[serde(deserialize_with = "sorted_records")]
    records: Vec<Record>,
    /// Observer -> version of its latest change. Kept after the
    /// observer's records are pruned, so that the pruning wins a merge.
    #[serde(with = "version_pairs")]
    versions: BTreeMap<UniqueAddress, u64>,
}

/// Restores the record order on the way in: lookups rely on it, and a
/// peer's bytes should not be able to break them.
fn sorted_records<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Record>, D::Error> {
    Vec::<Record>::deserialize(d).map(normalise)
}

/// Sorts records by (observer, subject) and keeps the newest record of
/// each pair.
fn normalise(mut records: Vec<Record>) -> Vec<Record> {
    records.sort_by(|a, b| {
        a.observer
            .cmp(&b.observer)
            .then_with(|| a.subject.cmp(&b.subject))
            .then_with(|| b.version.cmp(&a.version))
    });
    records.dedup_by(|later, first| {
        later.observer == first.observer && later.subject == first.subject
    });
    records
}

/// The nodes of an argument, owned or borrowed, as a set.
fn node_set<N: Borrow<UniqueAddress>>(
    nodes: impl IntoIterator<Item = N>,
) -> BTreeSet<UniqueAddress> {
    nodes.into_iter().map(|n| n.borrow().clone()).collect()
}

/// `versions` without the entries of `nodes`.
fn without(
    versions: &BTreeMap<UniqueAddress, u64>,
    nodes: &BTreeSet<UniqueAddress>,
) -> BTreeMap<UniqueAddress, u64> {
    versions
        .iter()
        .filter(|(n, _)| !nodes.contains(*n))
        .map(|(n, v)| (n.clone(), *v))
        .collect()
}

/// The versions as a sequence of `(observer, version)` pairs: a map keyed
/// by a struct is not representable in every format (JSON keys must be
/// strings).
mod version_pairs {
    use crate::member::UniqueAddress;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::BTreeMap;

    pub(super) fn serialize<S: Serializer>(
        versions: &BTreeMap<UniqueAddress, u64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(versions)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<UniqueAddress, u64>, D::Error> {
        let pairs = Vec::<(UniqueAddress, u64)>::deserialize(d)?;
        let mut versions = BTreeMap::new();
        for (observer, version) in pairs {
            // A repeated observer keeps its highest version.
            let entry = versions.entry(observer).or_insert(version);
            *entry = (*entry).max(version);
        }
        Ok(versions)
    }
}

impl Reachability {
    /// An empty table: every node reachable.
    pub fn new() -> Self {
        Reachability::default()
    }

    /// A table from its parts (records in any order; of two records for
    /// the same pair the newer is kept). Meant for tests and conversions;
    /// the versions should cover every observer that has records.
    pub fn from_parts(
        records: impl IntoIterator<Item = Record>,
        versions: BTreeMap<UniqueAddress, u64>,
    ) -> Self {
        Reachability {
            records: normalise(records.into_iter().collect()),
            versions,
        }
    }

    /// The table after `observer` saw `subject` become unreachable. Equal
    /// to `self` if the observer already said so, or said terminated.
    #[must_use]
    pub fn unreachable(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> Reachability {
        self.changed(observer, subject, ReachabilityStatus::Unreachable)
    }

    /// The table after `observer` saw `subject` become reachable (again).
    /// Equal to `self` if the observer had nothing against it, or said
    /// terminated.
    #[must_use]
    pub fn reachable(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> Reachability {
        self.changed(observer, subject, ReachabilityStatus::Reachable)
    }

    /// The table after `observer` learnt that `subject` is gone for good.
    /// Equal to `self` if the observer already said so.
    #[must_use]
    pub fn terminated(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> Reachability {
        self.changed(observer, subject, ReachabilityStatus::Terminated)
    }

    /// A copy of the table with one more observation.
    fn changed(
        &self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
        status: ReachabilityStatus,
    ) -> Reachability {
        let mut table = self.clone();
        table.change(observer, subject, status);
        table
    }

    /// Records an observation in place; returns true if anything changed.
    /// Only ever called on the observer's own node.
    fn change(
        &mut self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
        status: ReachabilityStatus,
    ) -> bool {
        use ReachabilityStatus::{Reachable, Terminated};

        let rows = self.observer_range(observer);
        if rows.is_empty() {
            // Reachable is the default: nothing to record.
            if status == Reachable {
                return false;
            }
            let version = self.bump(observer);
            self.records.insert(
                rows.start,
                Record {
                    observer: observer.clone(),
                    subject: subject.clone(),
                    status,
                    version,
                },
            );
            return true;
        }

        let found = self.records[rows.clone()].binary_search_by(|r| r.subject.cmp(subject));
        if let Ok(i) = found {
            let old = self.records[rows.start + i].status;
            // Terminated is final, and a repeated status is no news.
            if old == Terminated || old == status {
                return false;
            }
        }

        let version = self.bump(observer);
        let others_reachable = self.records[rows.clone()]
            .iter()
            .all(|r| r.status == Reachable || r.subject == *subject);
        if status == Reachable && others_reachable {
            // The observer would hold only Reachable records: drop them
            // all. The bumped version makes the pruning win merges.
            self.records.drain(rows);
            return true;
        }

        let record = Record {
            observer: observer.clone(),
            subject: subject.clone(),
            status,
            version,
        };
        match found {
            Ok(i) => self.records[rows.start + i] = record,
            Err(i) => self.records.insert(rows.start + i, record),
        }
        true
    }

    /// Sets the observer's version to the next one and returns it.
    fn bump(&mut self, observer: &UniqueAddress) -> u64 {
        let version = self.versions.entry(observer.clone()).or_insert(0);
        *version += 1;
        *version
    }

    /// The index range of the observer's records.
    fn observer_range(&self, observer: &UniqueAddress) -> Range<usize> {
        let start = self.records.partition_point(|r| r.observer < *observer);
        let len = self.records[start..].partition_point(|r| r.observer == *observer);
        start..start + len
    }

    /// Merges two tables. For each observer in `allowed`, the records of
    /// the table where that observer's version is higher are kept (an
    /// observer always gossips its whole set of records, so the newer set
    /// replaces the older one). Records about subjects outside `allowed`,
    /// and observers outside `allowed`, are dropped; versions are the
    /// maximum of both sides.
    #[must_use]
    pub fn merge(&self, allowed: &BTreeSet<UniqueAddress>, other: &Reachability) -> Reachability {
        let mut records = Vec::with_capacity(self.records.len().max(other.records.len()));
        let mut versions = BTreeMap::new();
        let is_allowed = |r: &&Record| allowed.contains(&r.subject);

        // `allowed` is iterated in order, so the records come out sorted.
        for observer in allowed {
            let mine = self.records_from(observer);
            let theirs = other.records_from(observer);
            match self.version(observer).cmp(&other.version(observer)) {
                Ordering::Greater => records.extend(mine.iter().filter(is_allowed).cloned()),
                Ordering::Less => records.extend(theirs.iter().filter(is_allowed).cloned()),
                // Same version, so normally the same records. They differ
                // only when one side dropped some (remove, filtering); the
                // intersection keeps the drop and makes merge commutative.
                Ordering::Equal => records.extend(
                    mine.iter()
                        .filter(is_allowed)
                        .filter(|r| {
                            theirs
                                .binary_search_by(|t| t.subject.cmp(&r.subject))
                                .is_ok_and(|i| theirs[i] == **r)
                        })
                        .cloned(),
                ),
            }
            // Option order: None < Some, and Some compares the versions.
            if let Some(&v) = self
                .versions
                .get(observer)
                .max(other.versions.get(observer))
            {
                versions.insert(observer.clone(), v);
            }
        }
        Reachability { records, versions }
    }

    /// The table without `nodes`: neither their records as observers or as
    /// subjects, nor their versions (for nodes removed from the cluster).
    /// `nodes` may yield addresses or references to them.
    #[must_use]
    pub fn remove<N>(&self, nodes: impl IntoIterator<Item = N>) -> Reachability
    where
        N: Borrow<UniqueAddress>,
    {
        let nodes = node_set(nodes);
        Reachability {
            versions: without(&self.versions, &nodes),
            ..self.filter_records(|r| !nodes.contains(&r.observer) && !nodes.contains(&r.subject))
        }
    }

    /// The table without what `nodes` observed, nor their versions;
    /// records about them made by other observers stay.
    #[must_use]
    pub fn remove_observers<N>(&self, nodes: impl IntoIterator<Item = N>) -> Reachability
    where
        N: Borrow<UniqueAddress>,
    {
        let nodes = node_set(nodes);
        Reachability {
            versions: without(&self.versions, &nodes),
            ..self.filter_records(|r| !nodes.contains(&r.observer))
        }
    }

    /// A view of the table without the observations made by `nodes` (for
    /// example downed nodes, whose opinion should not block convergence).
    ///
    /// Unlike [`Reachability::remove_observers`] the versions are kept:
    /// the view is for queries, not for gossip.
    #[must_use]
    pub fn exclude_observations_from<N>(&self, nodes: impl IntoIterator<Item = N>) -> Reachability
    where
        N: Borrow<UniqueAddress>,
    {
        let nodes = node_set(nodes);
        self.filter_records(|r| !nodes.contains(&r.observer))
    }

    /// A view with only the records for which `keep` is true (versions are
    /// kept).
    #[must_use]
    pub fn filter_records(&self, mut keep: impl FnMut(&Record) -> bool) -> Reachability {
        Reachability {
            records: self.records.iter().filter(|r| keep(r)).cloned().collect(),
            versions: self.versions.clone(),
        }
    }

    /// The aggregated status of `subject`: `Terminated` if any observer
    /// says so, else `Unreachable` if any observer says so, else
    /// `Reachable`.
    pub fn status(&self, subject: &UniqueAddress) -> ReachabilityStatus {
        let mut status = ReachabilityStatus::Reachable;
        for r in self.records.iter().filter(|r| r.subject == *subject) {
            match r.status {
                ReachabilityStatus::Terminated => return ReachabilityStatus::Terminated,
                ReachabilityStatus::Unreachable => status = ReachabilityStatus::Unreachable,
                ReachabilityStatus::Reachable => {}
            }
        }
        status
    }

    /// What `observer` says about `subject` (`Reachable` without a record).
    pub fn status_of(
        &self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
    ) -> ReachabilityStatus {
        let rows = self.records_from(observer);
        match rows.binary_search_by(|r| r.subject.cmp(subject)) {
            Ok(i) => rows[i].status,
            Err(_) => ReachabilityStatus::Reachable,
        }
    }

    /// True if no observer says `subject` is unreachable or terminated.
    pub fn is_reachable(&self, subject: &UniqueAddress) -> bool {
        self.status(subject) == ReachabilityStatus::Reachable
    }

    /// True if `observer` does not say `subject` is unreachable or
    /// terminated.
    pub fn is_reachable_by(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> bool {
        self.status_of(observer, subject) == ReachabilityStatus::Reachable
    }

    /// True if no record says unreachable or terminated.
    pub fn is_all_reachable(&self) -> bool {
        self.records
            .iter()
            .all(|r| r.status == ReachabilityStatus::Reachable)
    }

    /// The subjects that some observer says are unreachable, leaving out
    /// those that some observer says are terminated.
    pub fn all_unreachable(&self) -> BTreeSet<UniqueAddress> {
        let mut unreachable = BTreeSet::new();
        let mut terminated = BTreeSet::new();
        for r in &self.records {
            match r.status {
                ReachabilityStatus::Unreachable => {
                    unreachable.insert(&r.subject);
                }
                ReachabilityStatus::Terminated => {
                    terminated.insert(&r.subject);
                }
                ReachabilityStatus::Reachable => {}
            }
        }
        unreachable
            .difference(&terminated)
            .map(|&n| n.clone())
            .collect()
    }

    /// The subjects that some observer says are unreachable or terminated.
    pub fn all_unreachable_or_terminated(&self) -> BTreeSet<UniqueAddress> {
        self.records
            .iter()
            .filter(|r| r.status != ReachabilityStatus::Reachable)
            .map(|r| r.subject.clone())
            .collect()
    }

    /// The subjects that `observer` says are unreachable (not those it says
    /// are terminated).
    pub fn all_unreachable_from(&self, observer: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        self.records_from(observer)
            .iter()
            .filter(|r| r.status == ReachabilityStatus::Unreachable)
            .map(|r| r.subject.clone())
            .collect()
    }

    /// Each subject that some observer says is unreachable, with the
    /// observers that say so.
    pub fn observers_grouped_by_unreachable(
        &self,
    ) -> BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> {
        let mut grouped: BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> = BTreeMap::new();
        for r in &self.records {
            if r.status == ReachabilityStatus::Unreachable {
                grouped
                    .entry(r.subject.clone())
                    .or_default()
                    .insert(r.observer.clone());
            }
        }
        grouped
    }

    /// The observers that have records.
    pub fn all_observers(&self) -> BTreeSet<UniqueAddress> {
        self.records.iter().map(|r| r.observer.clone()).collect()
    }

    /// All records, sorted by observer, then subject.
    pub fn records(&self) -> std::slice::Iter<'_, Record> {
        self.records.iter()
    }

    /// The records of `observer`, sorted by subject.
    pub fn records_from(&self, observer: &UniqueAddress) -> &[Record] {
        &self.records[self.observer_range(observer)]
    }

    /// Observer -> version of its latest change.
    pub fn versions(&self) -> &BTreeMap<UniqueAddress, u64> {
        &self.versions
    }

    /// The version of `observer`'s latest change (zero if none).
    pub fn version(&self, observer: &UniqueAddress) -> u64 {
        self.versions.get(observer).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::ReachabilityStatus::{Reachable, Terminated, Unreachable};
    use super::*;
    use proptest::prelude::*;
    use troupe_core::remote::Address;

    fn node(host: &str) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", host, 2552), 1)
    }

    fn nodes(hosts: &[&str]) -> BTreeSet<UniqueAddress> {
        hosts.iter().map(|h| node(h)).collect()
    }

    fn record(observer: &str, subject: &str, status: ReachabilityStatus, version: u64) -> Record {
        Record {
            observer: node(observer),
            subject: node(subject),
            status,
            version,
        }
    }

    /// Applies `(observer, subject, status)` changes in order.
    fn table(changes: &[(&str, &str, ReachabilityStatus)]) -> Reachability {
        let mut r = Reachability::new();
        apply(&mut r, changes);
        r
    }

    fn apply(r: &mut Reachability, changes: &[(&str, &str, ReachabilityStatus)]) {
        for &(o, s, status) in changes {
            *r = match status {
                Reachable => r.reachable(&node(o), &node(s)),
                Unreachable => r.unreachable(&node(o), &node(s)),
                Terminated => r.terminated(&node(o), &node(s)),
            };
        }
    }

    #[test]
    fn empty_table_is_all_reachable() {
        let r = Reachability::new();
        assert!(r.is_all_reachable());
        assert!(r.is_reachable(&node("a")));
        assert!(r.all_unreachable().is_empty());
        // Reachable is the default: saying so records nothing.
        assert_eq!(r.reachable(&node("b"), &node("a")), r);
    }

    #[test]
    fn unreachable_then_reachable_by_same_observer_clears_it() {
        let r = table(&[("b", "a", Unreachable)]);
        assert!(!r.is_reachable(&node("a")));
        assert_eq!(r.status(&node("a")), Unreachable);
        assert!(!r.is_reachable_by(&node("b"), &node("a")));
        assert_eq!(r.all_unreachable(), nodes(&["a"]));
        // The same news again is no change.
        assert_eq!(r.unreachable(&node("b"), &node("a")), r);

        let r = r.reachable(&node("b"), &node("a"));
        assert!(r.is_reachable(&node("a")));
        assert!(r.is_all_reachable());
        assert_eq!(r.records().count(), 0);
        // The pruning bumped the observer's version.
        assert_eq!(r.version(&node("b")), 2);
    }

    #[test]
    fn reachable_again_only_when_all_observers_say_so() {
        let r = table(&[("b", "a", Unreachable), ("c", "a", Unreachable)]);
        let r = r.reachable(&node("b"), &node("a"));
        assert!(!r.is_reachable(&node("a")));
        assert!(r.is_reachable_by(&node("b"), &node("a")));
        assert_eq!(r.all_unreachable_from(&node("c")), nodes(&["a"]));
        let r = r.reachable(&node("c"), &node("a"));
        assert!(r.is_reachable(&node("a")));
        assert!(r.is_all_reachable());

        // A third observer saying reachable does not outvote one that
        // says unreachable.
        let r = table(&[("b", "a", Unreachable), ("d", "a", Reachable)]);
        assert!(!r.is_reachable(&node("a")));
    }

    #[test]
    fn observer_records_are_pruned_only_when_all_reachable() {
        let r = table(&[
            ("b", "a", Unreachable),
            ("b", "c", Unreachable),
            ("d", "c", Unreachable),
            ("b", "a", Reachable),
        ]);
        // b still has c unreachable: its record about a stays, as Reachable.
        assert_eq!(r.status_of(&node("b"), &node("a")), Reachable);
        assert_eq!(r.records_from(&node("b")).len(), 2);

        let r = r.reachable(&node("b"), &node("c"));
        assert!(r.is_reachable(&node("a")));
        assert!(!r.is_reachable(&node("c")));
        assert_eq!(
            r.records().cloned().collect::<Vec<_>>(),
            vec![record("d", "c", Unreachable, 1)]
        );
        assert_eq!(r.version(&node("b")), 4);

        let r = r.unreachable(&node("b"), &node("e"));
        assert_eq!(
            r.records_from(&node("b")),
            &[record("b", "e", Unreachable, 5)][..]
        );
    }

    #[test]
    fn terminated_wins_over_unreachable_and_is_final() {
        let r = table(&[("b", "a", Unreachable), ("c", "a", Terminated)]);
        assert_eq!(r.status(&node("a")), Terminated);
        assert!(!r.is_reachable(&node("a")));
        // all_unreachable leaves out terminated subjects.
        assert!(r.all_unreachable().is_empty());
        assert_eq!(r.all_unreachable_or_terminated(), nodes(&["a"]));
        assert!(r.all_unreachable_from(&node("c")).is_empty());

        assert_eq!(r.reachable(&node("c"), &node("a")), r);
        assert_eq!(r.unreachable(&node("c"), &node("a")), r);

        // Terminated also wins when it is listed first.
        let r = table(&[("b", "a", Terminated), ("c", "a", Unreachable)]);
        assert_eq!(r.status(&node("a")), Terminated);
    }

    #[test]
    fn aggregated_status_from_parts() {
        let r = Reachability::from_parts(
            vec![
                record("d", "b", Terminated, 4),
                record("a", "b", Reachable, 2),
                record("a", "d", Unreachable, 3),
                record("c", "b", Unreachable, 2),
            ],
            [(node("a"), 3), (node("c"), 3), (node("d"), 4)].into(),
        );
        assert_eq!(r.status(&node("a")), Reachable);
        assert_eq!(r.status(&node("b")), Terminated);
        assert_eq!(r.status(&node("d")), Unreachable);
        assert_eq!(r.all_observers(), nodes(&["a", "c", "d"]));
    }

    #[test]
    fn mixed_statuses_and_grouping() {
        let r = table(&[
            ("b", "a", Unreachable),
            ("c", "a", Unreachable),
            ("d", "a", Unreachable),
            ("c", "b", Unreachable),
            ("c", "b", Reachable),
            ("d", "b", Unreachable),
            ("d", "c", Unreachable),
            ("d", "c", Reachable),
            ("e", "d", Reachable),
            ("a", "e", Unreachable),
            ("b", "e", Terminated),
        ]);
        assert_eq!(r.status_of(&node("c"), &node("b")), Reachable);
        assert_eq!(r.status_of(&node("d"), &node("b")), Unreachable);
        assert_eq!(r.status_of(&node("b"), &node("e")), Terminated);
        assert!(r.is_reachable(&node("c")));
        assert!(r.is_reachable(&node("d")));
        assert!(!r.is_reachable(&node("e")));
        assert_eq!(r.all_unreachable(), nodes(&["a", "b"]));
        assert_eq!(r.all_unreachable_from(&node("d")), nodes(&["a", "b"]));

        let expected: BTreeMap<_, _> = [
            (node("a"), nodes(&["b", "c", "d"])),
            (node("b"), nodes(&["d"])),
            (node("e"), nodes(&["a"])),
        ]
        .into();
        assert_eq!(r.observers_grouped_by_unreachable(), expected);
    }

    #[test]
    fn merge_keeps_the_newer_records_of_each_observer() {
        let r1 = table(&[("b", "a", Unreachable), ("c", "d", Unreachable)]);
        let mut r2 = r1.clone();
        apply(
            &mut r2,
            &[
                ("b", "a", Reachable),
                ("d", "e", Unreachable),
                ("c", "a", Unreachable),
            ],
        );
        let all = nodes(&["a", "b", "c", "d", "e"]);
        let merged = r1.merge(&all, &r2);

        assert_eq!(merged.status_of(&node("b"), &node("a")), Reachable);
        assert_eq!(merged.status_of(&node("c"), &node("a")), Unreachable);
        assert_eq!(merged.status_of(&node("c"), &node("d")), Unreachable);
        assert_eq!(merged.status_of(&node("d"), &node("e")), Unreachable);
        assert!(!merged.is_reachable(&node("a")));
        assert!(!merged.is_reachable(&node("e")));
        assert_eq!(merged, r2.merge(&all, &r1));
        assert_eq!(merged, r2);
    }

    #[test]
    fn merge_respects_the_allowed_set() {
        let r1 = table(&[("b", "a", Unreachable), ("c", "d", Unreachable)]);
        let mut r2 = r1.clone();
        apply(
            &mut r2,
            &[
                ("b", "a", Reachable),
                ("d", "e", Unreachable),
                ("c", "a", Unreachable),
            ],
        );
        // d is not allowed: neither its observations nor those about it.
        let allowed = nodes(&["a", "b", "c", "e"]);
        let merged = r1.merge(&allowed, &r2);
        assert_eq!(merged.status_of(&node("c"), &node("d")), Reachable);
        assert_eq!(merged.status_of(&node("d"), &node("e")), Reachable);
        assert_eq!(merged.status_of(&node("c"), &node("a")), Unreachable);
        assert!(merged.is_reachable(&node("d")));
        assert!(merged.is_reachable(&node("e")));
        assert_eq!(
            merged.versions().keys().cloned().collect::<BTreeSet<_>>(),
            nodes(&["b", "c"])
        );
        assert_eq!(merged, r2.merge(&allowed, &r1));
    }

    #[test]
    fn merge_after_pruning_drops_the_pruned_records() {
        let r1 = table(&[("b", "a", Unreachable), ("c", "d", Unreachable)]);
        let r2 = r1.unreachable(&node("a"), &node("e"));
        let r3 = r1.reachable(&node("b"), &node("a"));
        let all = nodes(&["a", "b", "c", "d", "e"]);
        let merged = r2.merge(&all, &r3);
        assert_eq!(
            merged.records().cloned().collect::<Vec<_>>(),
            vec![
                record("a", "e", Unreachable, 1),
                record("c", "d", Unreachable, 1)
            ]
        );
        assert_eq!(merged, r3.merge(&all, &r2));
    }

    #[test]
    fn merge_takes_the_highest_versions() {
        let r1 =
            Reachability::from_parts([], [(node("a"), 3), (node("b"), 5), (node("c"), 7)].into());
        let r2 =
            Reachability::from_parts([], [(node("a"), 6), (node("b"), 2), (node("d"), 1)].into());
        let all = nodes(&["a", "b", "c", "d", "e"]);
        let expected: BTreeMap<_, _> = [
            (node("a"), 6),
            (node("b"), 5),
            (node("c"), 7),
            (node("d"), 1),
        ]
        .into();
        assert_eq!(r1.merge(&all, &r2).versions(), &expected);
        assert_eq!(r2.merge(&all, &r1).versions(), &expected);
    }

    #[test]
    fn remove_forgets_nodes_as_observers_and_subjects() {
        let r = table(&[
            ("b", "a", Unreachable),
            ("c", "d", Unreachable),
            ("b", "c", Unreachable),
            ("b", "e", Unreachable),
            ("c", "a", Unreachable),
        ]);
        let r = r.remove([&node("a"), &node("b")]);
        assert_eq!(r.status_of(&node("b"), &node("c")), Reachable);
        assert_eq!(r.status_of(&node("c"), &node("a")), Reachable);
        assert_eq!(r.status_of(&node("c"), &node("d")), Unreachable);
        assert!(r.is_reachable(&node("a")) && r.is_reachable(&node("e")));
        assert_eq!(r.all_observers(), nodes(&["c"]));
        assert_eq!(
            r.versions().keys().cloned().collect::<BTreeSet<_>>(),
            nodes(&["c"])
        );
    }

    #[test]
    fn remove_observers_keeps_records_about_them() {
        let r = table(&[("b", "a", Unreachable), ("c", "b", Unreachable)]);
        // Owned addresses work as well as references.
        let r = r.remove_observers([node("b")]);
        assert!(r.is_reachable(&node("a")));
        assert!(!r.is_reachable(&node("b")));
        assert_eq!(r.version(&node("b")), 0);
    }

    #[test]
    fn exclude_observations_from_downed_nodes() {
        let r = table(&[
            ("c", "a", Unreachable),
            ("c", "a", Reachable),
            ("c", "b", Unreachable),
            ("b", "a", Unreachable),
            ("b", "c", Unreachable),
        ]);
        assert_eq!(r.all_unreachable_or_terminated(), nodes(&["a", "b", "c"]));

        let view = r.exclude_observations_from(nodes(&["b"]).iter().cloned());
        assert_eq!(view.all_unreachable_or_terminated(), nodes(&["b"]));
        assert_eq!(view.all_observers(), nodes(&["c"]));
        // A view: the versions stay, and the table itself is untouched.
        assert_eq!(view.versions(), r.versions());
        assert_eq!(r.all_unreachable_or_terminated(), nodes(&["a", "b", "c"]));
    }

    #[test]
    fn from_parts_sorts_and_keeps_the_newest_record_per_pair() {
        let r = Reachability::from_parts(
            vec![
                record("b", "a", Unreachable, 1),
                record("a", "c", Unreachable, 1),
                record("b", "a", Terminated, 2),
            ],
            [(node("a"), 1), (node("b"), 2)].into(),
        );
        assert_eq!(
            r.records().cloned().collect::<Vec<_>>(),
            vec![
                record("a", "c", Unreachable, 1),
                record("b", "a", Terminated, 2)
            ]
        );
    }

    const HOSTS: [&str; 4] = ["a", "b", "c", "d"];

    /// Per observer, its own list of `(subject, status)` changes.
    type Histories = Vec<Vec<(usize, ReachabilityStatus)>>;

    fn arb_status() -> impl Strategy<Value = ReachabilityStatus> {
        prop_oneof![
            3 => Just(Unreachable),
            3 => Just(Reachable),
            1 => Just(Terminated),
        ]
    }

    fn arb_histories() -> impl Strategy<Value = Histories> {
        prop::collection::vec(
            prop::collection::vec((0..HOSTS.len(), arb_status()), 0..8),
            HOSTS.len(),
        )
    }

    /// The table of a node that has seen the first `seen[o]` changes of
    /// each observer `o`: since only an observer changes its records, this
    /// is what any gossip state looks like.
    fn replica(histories: &Histories, seen: &[usize]) -> Reachability {
        let mut r = Reachability::new();
        for (o, history) in histories.iter().enumerate() {
            for &(s, status) in history.iter().take(seen[o]) {
                apply(&mut r, &[(HOSTS[o], HOSTS[s], status)]);
            }
        }
        r
    }

    fn arb_seen() -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(0usize..9, HOSTS.len())
    }

    fn arb_allowed() -> impl Strategy<Value = BTreeSet<UniqueAddress>> {
        prop::sample::subsequence(HOSTS.to_vec(), 0..=HOSTS.len()).prop_map(|hosts| nodes(&hosts))
    }

    proptest! {
        #[test]
        fn merge_is_commutative_and_takes_the_newest_history(
            histories in arb_histories(),
            seen1 in arb_seen(),
            seen2 in arb_seen(),
            allowed in arb_allowed(),
        ) {
            let r1 = replica(&histories, &seen1);
            let r2 = replica(&histories, &seen2);
            let merged = r1.merge(&allowed, &r2);
            prop_assert_eq!(&merged, &r2.merge(&allowed, &r1));

            // The node that saw the most of every history, restricted to
            // `allowed`.
            let newest: Vec<usize> = seen1.iter().zip(&seen2).map(|(a, b)| *a.max(b)).collect();
            let mut expected = replica(&histories, &newest)
                .filter_records(|r| allowed.contains(&r.observer) && allowed.contains(&r.subject));
            expected.versions.retain(|n, _| allowed.contains(n));
            prop_assert_eq!(&merged, &expected);
        }

        #[test]
        fn merge_is_idempotent_and_associative(
            histories in arb_histories(),
            seen1 in arb_seen(),
            seen2 in arb_seen(),
            seen3 in arb_seen(),
        ) {
            let all = nodes(&HOSTS);
            let r1 = replica(&histories, &seen1);
            let r2 = replica(&histories, &seen2);
            let r3 = replica(&histories, &seen3);
            prop_assert_eq!(&r1.merge(&all, &r1), &r1);
            prop_assert_eq!(
                r1.merge(&all, &r2).merge(&all, &r3),
                r1.merge(&all, &r2.merge(&all, &r3))
            );
        }
    }
}
