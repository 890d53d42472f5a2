//! The gossiped membership state: a CRDT of members, seen set,
//! reachability table, vector clock and tombstones of removed nodes.
//! Merging two states is commutative, associative and idempotent in its
//! members, reachability, version and tombstones (the seen set is only
//! meaningful for one version and starts empty after a merge).

use crate::member::{Member, UniqueAddress};
use crate::reachability::Reachability;
use crate::vclock::VectorClock;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The membership state every node gossips.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Gossip {
    /// The members, ordered (and unique) by node.
    pub members: BTreeSet<Member>,
    /// Nodes that have seen this version.
    pub seen: BTreeSet<UniqueAddress>,
    /// Who observes whom as unreachable.
    pub reachability: Reachability,
    /// The version of this state.
    pub version: VectorClock,
    /// Removed nodes (with the removal time in ms since the Unix epoch), so
    /// that an old state gossiped late cannot bring them back.
    pub tombstones: BTreeMap<UniqueAddress, u64>,
}

impl Gossip {
    /// The state with these members and nothing else.
    pub fn with_members(members: impl IntoIterator<Item = Member>) -> Self {
        Gossip {
            members: members.into_iter().collect(),
            ..Gossip::default()
        }
    }

    /// The member for `node`, if any.
    pub fn member(&self, node: &UniqueAddress) -> Option<&Member> {
        // Members compare by node only, so a probe with any status finds it.
        self.members.iter().find(|m| &m.node == node)
    }

    /// True if `node` is a member.
    pub fn has_member(&self, node: &UniqueAddress) -> bool {
        self.member(node).is_some()
    }

    /// True if the only member is `node`.
    pub fn is_singleton(&self) -> bool {
        self.members.len() == 1
    }

    /// Replaces (or adds) these members.
    pub fn update(&mut self, changed: impl IntoIterator<Item = Member>) {
        for m in changed {
            self.members.replace(m);
        }
    }

    /// Removes nodes: from members, seen set, reachability and version, and
    /// tombstones them at `now_ms`.
    pub fn remove_all(&mut self, nodes: &BTreeSet<UniqueAddress>, now_ms: u64) {
        if nodes.is_empty() {
            return;
        }
        self.members.retain(|m| !nodes.contains(&m.node));
        self.seen.retain(|n| !nodes.contains(n));
        self.reachability = self.reachability.remove(nodes.iter().cloned());
        for n in nodes {
            self.version.prune(n);
            self.tombstones.insert(n.clone(), now_ms);
        }
    }

    /// Forgets tombstones older than `before_ms`.
    pub fn prune_tombstones(&mut self, before_ms: u64) {
        self.tombstones.retain(|_, at| *at >= before_ms);
    }

    /// Marks the state as seen by `node`.
    pub fn seen_by(&mut self, node: &UniqueAddress) {
        self.seen.insert(node.clone());
    }

    /// Marks the state as seen by `node` only.
    pub fn only_seen_by(&mut self, node: &UniqueAddress) {
        self.seen.clear();
        self.seen.insert(node.clone());
    }

    /// True if `node` has seen this version.
    pub fn seen_by_node(&self, node: &UniqueAddress) -> bool {
        self.seen.contains(node)
    }

    /// Records a change made by `node`.
    pub fn increment_version(&mut self, node: &UniqueAddress) {
        self.version.increment(node);
    }

    /// Merges two states: members by the highest status precedence
    /// (tombstoned nodes excluded), reachability per observer version,
    /// versions pointwise; nobody has seen the result yet.
    pub fn merge(&self, that: &Gossip) -> Gossip {
        let mut tombstones = self.tombstones.clone();
        for (n, at) in &that.tombstones {
            let e = tombstones.entry(n.clone()).or_insert(*at);
            *e = (*e).max(*at);
        }
        let mut members: BTreeMap<&UniqueAddress, &Member> = BTreeMap::new();
        for m in self.members.iter().chain(that.members.iter()) {
            if tombstones.contains_key(&m.node) {
                continue;
            }
            members
                .entry(&m.node)
                .and_modify(|cur| *cur = Member::highest_priority(cur, m))
                .or_insert(m);
        }
        let members: BTreeSet<Member> = members.into_values().cloned().collect();
        let allowed: BTreeSet<UniqueAddress> = members.iter().map(|m| m.node.clone()).collect();
        let mut version = self.version.merge(&that.version);
        for n in tombstones.keys() {
            version.prune(n);
        }
        Gossip {
            reachability: self.reachability.merge(&allowed, &that.reachability),
            members,
            seen: BTreeSet::new(),
            version,
            tombstones,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::member::MemberStatus;
    use proptest::prelude::*;
    use troupe_core::remote::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "127.0.0.1", port), port as u64 * 7)
    }

    fn member(port: u16, status: MemberStatus) -> Member {
        Member::joining(node(port), BTreeSet::new()).with_status(status)
    }

    #[test]
    fn merge_picks_the_later_status_and_respects_tombstones() {
        let mut a = Gossip::with_members([
            member(1, MemberStatus::Up),
            member(2, MemberStatus::Joining),
        ]);
        a.increment_version(&node(1));
        let mut b = Gossip::with_members([
            member(1, MemberStatus::Leaving),
            member(3, MemberStatus::Joining),
        ]);
        b.increment_version(&node(3));
        b.remove_all(&[node(2)].into_iter().collect(), 1000);
        let m = a.merge(&b);
        assert_eq!(m.member(&node(1)).unwrap().status, MemberStatus::Leaving);
        assert!(!m.has_member(&node(2)), "tombstoned node came back");
        assert!(m.has_member(&node(3)));
        assert!(m.seen.is_empty());
        assert_eq!(m, b.merge(&a));
    }

    fn arb_gossip() -> impl Strategy<Value = Gossip> {
        let statuses = prop::sample::select(vec![
            MemberStatus::Joining,
            MemberStatus::WeaklyUp,
            MemberStatus::Up,
            MemberStatus::Leaving,
            MemberStatus::Exiting,
            MemberStatus::Down,
        ]);
        (
            prop::collection::vec((1u16..6, statuses), 0..5),
            prop::collection::vec(1u16..6, 0..2),
            prop::collection::vec(1u16..6, 0..4),
        )
            .prop_map(|(members, removed, bumps)| {
                let mut g = Gossip::default();
                for (p, s) in members {
                    let m = member(p, s);
                    match g.member(&m.node).cloned() {
                        Some(cur) => {
                            let keep = Member::highest_priority(&cur, &m).clone();
                            g.members.replace(keep);
                        }
                        None => {
                            g.members.insert(m);
                        }
                    }
                }
                for p in bumps {
                    g.increment_version(&node(p));
                }
                g.remove_all(&removed.into_iter().map(node).collect(), 5);
                g
            })
    }

    proptest! {
        #[test]
        fn merge_is_a_semilattice(a in arb_gossip(), b in arb_gossip(), c in arb_gossip()) {
            prop_assert_eq!(a.merge(&b), b.merge(&a));
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
            let aa = a.merge(&a);
            prop_assert_eq!(&aa.members, &a.members);
            prop_assert_eq!(&aa.version, &a.version);
        }
    }
}
