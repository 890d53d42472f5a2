//! Cluster events: what subscribers are told when the membership changes,
//! computed as the difference between two states (as Akka's
//! `ClusterEvent.diff*` functions do).

use crate::member::{Member, MemberStatus, UniqueAddress};
use crate::membership::MembershipState;
use crate::reachability::ReachabilityStatus;
use std::collections::{BTreeMap, BTreeSet};
use troupe_core::Message;

/// A change of the cluster's membership, seen from one node. A message,
/// so that an actor can subscribe to them
/// ([`Cluster::subscribe_actor`](crate::Cluster::subscribe_actor)).
#[derive(Debug, Clone, PartialEq, Message)]
#[message(name = "troupe.cluster.ClusterEvent")]
pub enum ClusterEvent {
    /// A node asked to join.
    MemberJoined(Member),
    /// A joining member was moved to WeaklyUp.
    MemberWeaklyUp(Member),
    /// A member was moved Up.
    MemberUp(Member),
    /// A member asked to leave (Leaving).
    MemberLeft(Member),
    /// A leaving member was moved to Exiting.
    MemberExited(Member),
    /// A member was marked Down.
    MemberDowned(Member),
    /// A member was removed; with its status before removal.
    MemberRemoved(Member, MemberStatus),
    /// A member is unreachable from some observer.
    UnreachableMember(Member),
    /// A member is reachable again from every observer.
    ReachableMember(Member),
    /// The leader changed (`None`: no member can lead).
    LeaderChanged(Option<UniqueAddress>),
    /// The leader of a role changed.
    RoleLeaderChanged(String, Option<UniqueAddress>),
}

/// The snapshot a new subscriber starts with (also a message: an actor
/// subscriber gets it first).
#[derive(Debug, Clone, PartialEq, Message)]
#[message(name = "troupe.cluster.CurrentClusterState")]
pub struct CurrentClusterState {
    /// Members, ordered by address.
    pub members: Vec<Member>,
    /// Members unreachable from some observer.
    pub unreachable: Vec<Member>,
    /// Nodes that have seen the current version.
    pub seen_by: BTreeSet<UniqueAddress>,
    /// The leader.
    pub leader: Option<UniqueAddress>,
    /// The leader of each role.
    pub role_leaders: Vec<(String, Option<UniqueAddress>)>,
    /// Each member in `unreachable`, with the observers that report it
    /// unreachable (or terminated), in address order.
    pub unreachable_observed_by: Vec<(UniqueAddress, Vec<UniqueAddress>)>,
    /// The oldest Up or Leaving member, if any (see
    /// [`member::oldest`](crate::member::oldest) and
    /// [`OldestAmong::UpOrLeaving`](crate::member::OldestAmong::UpOrLeaving)).
    pub oldest: Option<UniqueAddress>,
    /// For each role, the oldest Up or Leaving member with that role.
    pub oldest_per_role: Vec<(String, Option<UniqueAddress>)>,
}

impl CurrentClusterState {
    /// The snapshot of `state`.
    pub fn of(state: &MembershipState) -> Self {
        let g = &state.gossip;
        let unreachable = g
            .reachability
            .all_unreachable_or_terminated()
            .into_iter()
            // As Akka: a node is never unreachable in its own view.
            .filter(|n| *n != state.self_node)
            .filter_map(|n| g.member(&n).cloned())
            .collect::<Vec<Member>>();
        let mut observed_by: BTreeMap<UniqueAddress, BTreeSet<UniqueAddress>> = BTreeMap::new();
        for r in g.reachability.records() {
            if r.status != ReachabilityStatus::Reachable {
                observed_by
                    .entry(r.subject.clone())
                    .or_default()
                    .insert(r.observer.clone());
            }
        }
        let unreachable_observed_by = unreachable
            .iter()
            .map(|m| {
                let observers = observed_by
                    .remove(&m.node)
                    .unwrap_or_default()
                    .into_iter()
                    .collect();
                (m.node.clone(), observers)
            })
            .collect();
        let roles = state.roles();
        CurrentClusterState {
            members: g.members.iter().cloned().collect(),
            unreachable,
            seen_by: g.seen.clone(),
            leader: state.leader(),
            role_leaders: roles
                .iter()
                .map(|r| (r.clone(), state.role_leader(r)))
                .collect(),
            unreachable_observed_by,
            oldest: state.oldest(None).map(|m| m.node.clone()),
            oldest_per_role: roles
                .iter()
                .map(|r| (r.clone(), state.oldest(Some(r)).map(|m| m.node.clone())))
                .collect(),
        }
    }
}

fn status_event(m: &Member) -> Option<ClusterEvent> {
    Some(match m.status {
        MemberStatus::Joining => ClusterEvent::MemberJoined(m.clone()),
        MemberStatus::WeaklyUp => ClusterEvent::MemberWeaklyUp(m.clone()),
        MemberStatus::Up => ClusterEvent::MemberUp(m.clone()),
        MemberStatus::Leaving => ClusterEvent::MemberLeft(m.clone()),
        MemberStatus::Exiting => ClusterEvent::MemberExited(m.clone()),
        MemberStatus::Down => ClusterEvent::MemberDowned(m.clone()),
        MemberStatus::Removed => return None,
    })
}

/// The events that lead from `old` to `new`, in Akka's order: member
/// status changes, removals, unreachable, reachable, leader, role leaders.
pub fn diff(old: &MembershipState, new: &MembershipState) -> Vec<ClusterEvent> {
    let mut events = Vec::new();
    let (og, ng) = (&old.gossip, &new.gossip);
    for m in &ng.members {
        let changed = match og.member(&m.node) {
            None => true,
            Some(prev) => prev.status != m.status,
        };
        if changed {
            events.extend(status_event(m));
        }
    }
    for m in &og.members {
        if !ng.has_member(&m.node) {
            events.push(ClusterEvent::MemberRemoved(
                m.with_status(MemberStatus::Removed),
                m.status,
            ));
        }
    }
    // As Akka, a node does not report itself unreachable (others' view of
    // it reaches it only through an indirect connection).
    let mut old_unreachable = og.reachability.all_unreachable_or_terminated();
    let mut new_unreachable = ng.reachability.all_unreachable_or_terminated();
    old_unreachable.remove(&old.self_node);
    new_unreachable.remove(&new.self_node);
    for n in new_unreachable.difference(&old_unreachable) {
        if let Some(m) = ng.member(n) {
            events.push(ClusterEvent::UnreachableMember(m.clone()));
        }
    }
    for n in old_unreachable.difference(&new_unreachable) {
        if let Some(m) = ng.member(n) {
            events.push(ClusterEvent::ReachableMember(m.clone()));
        }
    }
    let leader = new.leader();
    if leader != old.leader() {
        events.push(ClusterEvent::LeaderChanged(leader));
    }
    for role in old.roles().union(&new.roles()) {
        let l = new.role_leader(role);
        if l != old.role_leader(role) {
            events.push(ClusterEvent::RoleLeaderChanged(role.clone(), l));
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::Gossip;
    use troupe_core::remote::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "127.0.0.1", port), port as u64)
    }

    #[test]
    fn snapshot_has_observers_and_oldest_members() {
        let role = |r: &str| [r.to_string()].into_iter().collect::<BTreeSet<_>>();
        let members = [
            Member::joining(node(1), role("a")).up(2),
            Member::joining(node(2), role("b")).up(1),
            Member::joining(node(3), role("b")),
            Member::joining(node(4), role("c")),
        ];
        let mut g = Gossip::with_members(members);
        g.reachability = g
            .reachability
            .unreachable(&node(1), &node(3))
            .unreachable(&node(2), &node(3))
            .terminated(&node(1), &node(4));
        let s = CurrentClusterState::of(&MembershipState::new(g, node(1)));
        assert_eq!(
            s.unreachable_observed_by,
            vec![(node(3), vec![node(1), node(2)]), (node(4), vec![node(1)])]
        );
        assert_eq!(s.oldest, Some(node(2)));
        assert_eq!(
            s.oldest_per_role,
            vec![
                ("a".to_string(), Some(node(1))),
                ("b".to_string(), Some(node(2))),
                ("c".to_string(), None)
            ]
        );
    }

    #[test]
    fn status_changes_removals_and_leader() {
        let j = Member::joining(node(1), ["a".to_string()].into_iter().collect());
        let old = MembershipState::new(Gossip::with_members([j.clone()]), node(1));
        let new = MembershipState::new(Gossip::with_members([j.up(1)]), node(1));
        let ev = diff(&old, &new);
        assert_eq!(ev[0], ClusterEvent::MemberUp(j.up(1)));
        assert!(
            ev.contains(&ClusterEvent::LeaderChanged(Some(node(1))))
                || old.leader() == new.leader()
        );
        let gone = MembershipState::new(Gossip::default(), node(1));
        let ev = diff(&new, &gone);
        assert_eq!(
            ev[0],
            ClusterEvent::MemberRemoved(
                j.up(1).with_status(MemberStatus::Removed),
                MemberStatus::Up
            )
        );
        assert!(ev.contains(&ClusterEvent::LeaderChanged(None)));
        assert!(ev.contains(&ClusterEvent::RoleLeaderChanged("a".into(), None)));
    }
}
