//! What a node concludes from the gossiped state: convergence, the leader
//! (and the leader of each role), the oldest members, and the leader's
//! actions (Joining -> Up, Leaving -> Exiting, removal of Down and Exiting
//! members), following Akka's `MembershipState` and cluster daemon.

use crate::gossip::Gossip;
use crate::member::{Member, MemberStatus, OldestAmong, UniqueAddress};
use std::collections::{BTreeMap, BTreeSet};

/// Statuses whose members must have seen a version for convergence.
fn needed_for_convergence(s: MemberStatus) -> bool {
    matches!(s, MemberStatus::Up | MemberStatus::Leaving)
}

/// Unreachable members with these statuses do not block convergence (and
/// are removed by the leader).
fn removable_when_unreachable(s: MemberStatus) -> bool {
    matches!(s, MemberStatus::Down | MemberStatus::Exiting)
}

/// Statuses that may lead.
fn may_lead(s: MemberStatus) -> bool {
    matches!(s, MemberStatus::Up | MemberStatus::Leaving)
}

/// Preference among members that cannot lead by status, when none can:
/// WeaklyUp, then Joining, then Exiting (Down never leads).
fn fallback_rank(s: MemberStatus) -> u8 {
    match s {
        MemberStatus::Up | MemberStatus::Leaving => 0,
        MemberStatus::WeaklyUp => 1,
        MemberStatus::Joining => 2,
        MemberStatus::Exiting => 3,
        MemberStatus::Down | MemberStatus::Removed => 4,
    }
}

/// Thresholds for moving members up (Akka's `min-nr-of-members`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpThresholds {
    /// Members needed before the leader moves anyone Up.
    pub min_nr_of_members: usize,
    /// The same per role.
    pub min_nr_of_members_per_role: BTreeMap<String, usize>,
}

/// The latest gossip as seen from one node.
#[derive(Debug, Clone, PartialEq)]
pub struct MembershipState {
    /// The state.
    pub gossip: Gossip,
    /// The node looking at it.
    pub self_node: UniqueAddress,
}

/// What the leader changed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeaderActions {
    /// Members with a new status.
    pub changed: Vec<Member>,
    /// Members removed.
    pub removed: Vec<Member>,
}

impl LeaderActions {
    /// True if nothing changed.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.removed.is_empty()
    }
}

impl MembershipState {
    /// The state `gossip` seen from `self_node`.
    pub fn new(gossip: Gossip, self_node: UniqueAddress) -> Self {
        MembershipState { gossip, self_node }
    }

    /// The reachability table without observations made by Down members
    /// (a downed node's opinion no longer counts).
    fn reachability_without_downed_observers(&self) -> crate::reachability::Reachability {
        let downed: BTreeSet<UniqueAddress> = self
            .gossip
            .members
            .iter()
            .filter(|m| m.status == MemberStatus::Down)
            .map(|m| m.node.clone())
            .collect();
        self.gossip
            .reachability
            .exclude_observations_from(downed.iter().cloned())
    }

    /// True if every member that matters has seen the current version and
    /// no member is unreachable, except Down or Exiting ones.
    /// `exiting_confirmed` are Exiting nodes that confirmed they saw it.
    pub fn convergence(&self, exiting_confirmed: &BTreeSet<UniqueAddress>) -> bool {
        let g = &self.gossip;
        let unreachable_blocks = self
            .reachability_without_downed_observers()
            .all_unreachable_or_terminated()
            .into_iter()
            .filter(|n| n != &self.self_node && !exiting_confirmed.contains(n))
            .filter_map(|n| g.member(&n))
            .any(|m| !removable_when_unreachable(m.status));
        if unreachable_blocks {
            return false;
        }
        !g.members.iter().any(|m| {
            needed_for_convergence(m.status)
                && !(g.seen_by_node(&m.node) || exiting_confirmed.contains(&m.node))
        })
    }

    /// The leader among `members`: the first reachable member (in address
    /// order) that is Up or Leaving, else the best of the rest.
    fn leader_of<'a>(&self, members: impl Iterator<Item = &'a Member>) -> Option<UniqueAddress> {
        let reach = &self.gossip.reachability;
        let all_reachable = reach.is_all_reachable();
        let candidates: Vec<&Member> = members
            .filter(|m| m.status != MemberStatus::Down)
            .filter(|m| all_reachable || m.node == self.self_node || reach.is_reachable(&m.node))
            .collect();
        candidates
            .iter()
            .find(|m| may_lead(m.status))
            .or_else(|| {
                candidates.iter().min_by(|a, b| {
                    fallback_rank(a.status)
                        .cmp(&fallback_rank(b.status))
                        .then(a.node.cmp(&b.node))
                })
            })
            .map(|m| m.node.clone())
    }

    /// The leader, if any member can lead.
    pub fn leader(&self) -> Option<UniqueAddress> {
        self.leader_of(self.gossip.members.iter())
    }

    /// The leader among members with `role`.
    pub fn role_leader(&self, role: &str) -> Option<UniqueAddress> {
        self.leader_of(self.gossip.members.iter().filter(|m| m.has_role(role)))
    }

    /// Every role some member has.
    pub fn roles(&self) -> BTreeSet<String> {
        self.gossip
            .members
            .iter()
            .flat_map(|m| m.roles.iter().cloned())
            .collect()
    }

    /// True if this node is the leader.
    pub fn is_leader(&self) -> bool {
        self.leader().as_ref() == Some(&self.self_node)
    }

    /// The oldest Up or Leaving member, optionally with `role`
    /// ([`member::oldest`](crate::member::oldest) with
    /// [`OldestAmong::UpOrLeaving`]).
    pub fn oldest(&self, role: Option<&str>) -> Option<&Member> {
        crate::member::oldest(&self.gossip.members, role, OldestAmong::UpOrLeaving)
    }

    /// True if enough members have joined to move them up.
    pub fn min_nr_fulfilled(&self, t: &UpThresholds) -> bool {
        let members = &self.gossip.members;
        members.len() >= t.min_nr_of_members
            && t.min_nr_of_members_per_role
                .iter()
                .all(|(role, n)| members.iter().filter(|m| m.has_role(role)).count() >= *n)
    }

    /// The leader's actions once there is convergence: Joining and WeaklyUp
    /// members move Up (given enough members), Leaving ones move to
    /// Exiting, and unreachable Down or Exiting members — and Exiting ones
    /// that confirmed — are removed. Applies them to the gossip (version
    /// not yet incremented) and returns what changed.
    pub fn leader_actions_on_convergence(
        &mut self,
        thresholds: &UpThresholds,
        exiting_confirmed: &BTreeSet<UniqueAddress>,
        now_ms: u64,
    ) -> LeaderActions {
        let g = &self.gossip;
        let mut removed: BTreeSet<UniqueAddress> = self
            .gossip
            .reachability
            .all_unreachable_or_terminated()
            .into_iter()
            .filter(|n| {
                g.member(n)
                    .is_some_and(|m| removable_when_unreachable(m.status))
            })
            .collect();
        removed.extend(
            exiting_confirmed
                .iter()
                .filter(|n| {
                    g.member(n)
                        .is_some_and(|m| m.status == MemberStatus::Exiting)
                })
                .cloned(),
        );
        let enough = self.min_nr_fulfilled(thresholds);
        let youngest = g
            .members
            .iter()
            .map(|m| {
                if m.up_number == i32::MAX {
                    0
                } else {
                    m.up_number
                }
            })
            .max()
            .unwrap_or(0);
        let mut next_up = youngest;
        let mut changed = Vec::new();
        for m in &g.members {
            if removed.contains(&m.node) {
                continue;
            }
            match m.status {
                MemberStatus::Joining | MemberStatus::WeaklyUp if enough => {
                    next_up = next_up.saturating_add(1);
                    changed.push(m.up(next_up));
                }
                MemberStatus::Leaving => changed.push(m.with_status(MemberStatus::Exiting)),
                _ => {}
            }
        }
        let removed_members: Vec<Member> = removed
            .iter()
            .filter_map(|n| g.member(n).cloned())
            .collect();
        self.gossip.update(changed.iter().cloned());
        self.gossip.remove_all(&removed, now_ms);
        LeaderActions {
            changed,
            removed: removed_members,
        }
    }

    /// Without convergence, the leader moves reachable Joining members to
    /// WeaklyUp (when allowed, and given enough members).
    pub fn move_joining_to_weakly_up(&mut self, thresholds: &UpThresholds) -> Vec<Member> {
        if !self.min_nr_fulfilled(thresholds) {
            return Vec::new();
        }
        let reach = self.reachability_without_downed_observers();
        let changed: Vec<Member> = self
            .gossip
            .members
            .iter()
            .filter(|m| m.status == MemberStatus::Joining && reach.is_reachable(&m.node))
            .map(|m| m.with_status(MemberStatus::WeaklyUp))
            .collect();
        self.gossip.update(changed.iter().cloned());
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_core::remote::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "127.0.0.1", port), 1000 + port as u64)
    }

    fn member(port: u16, status: MemberStatus) -> Member {
        Member::joining(node(port), BTreeSet::new()).with_status(status)
    }

    fn state(members: Vec<Member>, me: u16) -> MembershipState {
        MembershipState::new(Gossip::with_members(members), node(me))
    }

    fn seen_by_all(s: &mut MembershipState) {
        let all: Vec<UniqueAddress> = s.gossip.members.iter().map(|m| m.node.clone()).collect();
        for n in all {
            s.gossip.seen_by(&n);
        }
    }

    #[test]
    fn leader_is_the_first_up_member_by_address() {
        let s = state(
            vec![
                member(3, MemberStatus::Up),
                member(1, MemberStatus::Joining),
                member(2, MemberStatus::Up),
            ],
            3,
        );
        assert_eq!(s.leader(), Some(node(2)));
        // None can lead by status: the best of the rest.
        let s = state(
            vec![
                member(3, MemberStatus::Joining),
                member(1, MemberStatus::Down),
            ],
            3,
        );
        assert_eq!(s.leader(), Some(node(3)));
    }

    #[test]
    fn an_unreachable_member_does_not_lead() {
        let mut s = state(
            vec![member(1, MemberStatus::Up), member(2, MemberStatus::Up)],
            2,
        );
        s.gossip.reachability = s.gossip.reachability.unreachable(&node(2), &node(1));
        assert_eq!(s.leader(), Some(node(2)));
    }

    #[test]
    fn convergence_needs_up_members_to_have_seen_it_and_no_unreachable() {
        let mut s = state(
            vec![
                member(1, MemberStatus::Up),
                member(2, MemberStatus::Up),
                member(3, MemberStatus::Joining),
            ],
            1,
        );
        s.gossip.seen_by(&node(1));
        assert!(!s.convergence(&BTreeSet::new()));
        s.gossip.seen_by(&node(2));
        // A Joining member need not have seen it.
        assert!(s.convergence(&BTreeSet::new()));
        s.gossip.reachability = s.gossip.reachability.unreachable(&node(1), &node(2));
        assert!(!s.convergence(&BTreeSet::new()));
        // Down unreachable members do not block it.
        s.gossip.update([member(2, MemberStatus::Down)]);
        assert!(s.convergence(&BTreeSet::new()));
    }

    #[test]
    fn leader_actions_move_up_with_increasing_numbers_and_remove_downed() {
        let mut s = state(
            vec![
                member(1, MemberStatus::Up).up(1),
                member(2, MemberStatus::Joining),
                member(3, MemberStatus::Joining),
                member(4, MemberStatus::Up)
                    .up(2)
                    .with_status(MemberStatus::Leaving),
                member(5, MemberStatus::Down),
            ],
            1,
        );
        s.gossip.reachability = s.gossip.reachability.unreachable(&node(1), &node(5));
        seen_by_all(&mut s);
        let actions =
            s.leader_actions_on_convergence(&UpThresholds::default(), &BTreeSet::new(), 7);
        assert_eq!(s.gossip.member(&node(2)).unwrap().up_number, 3);
        assert_eq!(s.gossip.member(&node(3)).unwrap().up_number, 4);
        assert_eq!(
            s.gossip.member(&node(4)).unwrap().status,
            MemberStatus::Exiting
        );
        assert!(!s.gossip.has_member(&node(5)));
        assert_eq!(s.gossip.tombstones.get(&node(5)), Some(&7));
        assert_eq!(actions.changed.len(), 3);
        assert_eq!(actions.removed.len(), 1);
    }

    #[test]
    fn min_nr_of_members_delays_up() {
        let mut s = state(
            vec![
                member(1, MemberStatus::Joining),
                member(2, MemberStatus::Joining),
            ],
            1,
        );
        let t = UpThresholds {
            min_nr_of_members: 3,
            ..UpThresholds::default()
        };
        assert!(s
            .leader_actions_on_convergence(&t, &BTreeSet::new(), 0)
            .is_empty());
        s.gossip.members.insert(member(3, MemberStatus::Joining));
        assert_eq!(
            s.leader_actions_on_convergence(&t, &BTreeSet::new(), 0)
                .changed
                .len(),
            3
        );
        let mut roles = state(vec![member(1, MemberStatus::Joining)], 1);
        let t = UpThresholds {
            min_nr_of_members: 1,
            min_nr_of_members_per_role: [("backend".to_string(), 1)].into_iter().collect(),
        };
        assert!(roles
            .leader_actions_on_convergence(&t, &BTreeSet::new(), 0)
            .is_empty());
    }

    #[test]
    fn oldest_by_up_number() {
        let s = state(
            vec![
                member(1, MemberStatus::Up).up(5),
                member(2, MemberStatus::Up).up(2),
                member(3, MemberStatus::Joining),
            ],
            1,
        );
        assert_eq!(s.oldest(None).unwrap().node, node(2));
    }
}
