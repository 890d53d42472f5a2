//! The split brain resolver's decision (Akka's strategies): given this
//! node's view of the membership and of who cannot reach whom, which
//! members go down. Each side's leader decides for its side; the
//! strategies are built so that both sides of a clean partition reach
//! compatible decisions, and so that a membership change racing with the
//! partition, or a node that is cut off from some members but not from
//! others (indirectly connected), never leaves two clusters running.

use crate::member::{self, Member, MemberStatus, OldestAmong, UniqueAddress};
use crate::membership::MembershipState;
use crate::reachability::{Reachability, ReachabilityStatus};
use crate::settings::DowningStrategy;
use std::collections::BTreeSet;

/// What the resolver does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nothing (no strategy, or nothing to decide).
    None,
    /// Down the members this side cannot reach.
    DownUnreachable,
    /// Down this side (the other side survives).
    DownReachable,
    /// Down everyone.
    DownAll,
    /// Down the members that are cut off from some members but still talk
    /// to others, plus what the strategy decides for a clean partition
    /// among the rest.
    DownIndirectlyConnected,
}

/// The split brain resolver's view of the cluster from one node: the
/// members, the ones unreachable from this side, the unreachability
/// records between members, and who has seen the current state.
///
/// ```
/// use std::collections::BTreeSet;
/// use troupe_cluster::downing::{Decision, DowningView};
/// use troupe_cluster::{DowningStrategy, Gossip, Member, MembershipState, UniqueAddress};
/// use troupe_core::remote::Address;
///
/// let node = |p: u16| UniqueAddress::new(Address::new("s", "127.0.0.1", p), p.into());
/// let members = (1..=5).map(|p| Member::joining(node(p), BTreeSet::new()).up(p.into()));
/// let mut gossip = Gossip::with_members(members);
/// for lost in [4, 5] {
///     gossip.reachability = gossip.reachability.unreachable(&node(1), &node(lost));
/// }
/// let view = DowningView::of(&MembershipState::new(gossip, node(1)));
/// let majority = DowningStrategy::KeepMajority { role: None };
/// assert_eq!(view.decide(&majority), Decision::DownUnreachable);
/// assert_eq!(
///     view.nodes_to_down(&majority, Decision::DownUnreachable).unwrap(),
///     [node(4), node(5)].into_iter().collect(),
/// );
/// ```
#[derive(Debug, Clone)]
pub struct DowningView {
    /// Every member, in address order.
    members: Vec<Member>,
    /// Members some observer says are unreachable (never this node).
    unreachable: BTreeSet<UniqueAddress>,
    /// Only the unreachable and terminated records between members.
    reachability: Reachability,
    /// Who has seen the current state.
    seen_by: BTreeSet<UniqueAddress>,
}

/// Which members a count includes, as Akka's `members(...)`.
#[derive(Debug, Clone, Copy)]
struct Counting {
    /// Joining and WeaklyUp members, which may already be Up on the
    /// other side of a partition.
    possibly_up: bool,
    /// Leaving out Leaving members, which may already be Exiting on the
    /// other side.
    not_possibly_exiting: bool,
}

const PLAIN: Counting = Counting {
    possibly_up: false,
    not_possibly_exiting: false,
};

impl DowningView {
    /// The view from `state`'s own node.
    pub fn of(state: &MembershipState) -> Self {
        let g = &state.gossip;
        let mut unreachable = g.reachability.all_unreachable_or_terminated();
        unreachable.remove(&state.self_node);
        unreachable.retain(|n| g.has_member(n));
        Self {
            members: g.members.iter().cloned().collect(),
            reachability: g.reachability.filter_records(|r| {
                r.status != ReachabilityStatus::Reachable
                    && g.has_member(&r.observer)
                    && g.has_member(&r.subject)
            }),
            unreachable,
            seen_by: g.seen.clone(),
        }
    }

    /// The members unreachable from this side.
    pub fn unreachable(&self) -> &BTreeSet<UniqueAddress> {
        &self.unreachable
    }

    /// The members that count, as Akka: never Down or Exiting ones;
    /// Joining and WeaklyUp ones only with `possibly_up`; Leaving ones not
    /// with `not_possibly_exiting`.
    fn counted<'a>(
        &'a self,
        how: Counting,
        role: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Member> + 'a {
        self.members
            .iter()
            .filter(move |m| match m.status {
                MemberStatus::Joining | MemberStatus::WeaklyUp => how.possibly_up,
                MemberStatus::Leaving => !how.not_possibly_exiting,
                MemberStatus::Up => true,
                MemberStatus::Exiting | MemberStatus::Down | MemberStatus::Removed => false,
            })
            .filter(move |m| role.is_none_or(|r| m.has_role(r)))
    }

    /// (all counted, reachable counted, unreachable counted).
    fn sides<'a>(
        &'a self,
        how: Counting,
        role: Option<&'a str>,
    ) -> (Vec<&'a Member>, usize, usize) {
        let all: Vec<&Member> = self.counted(how, role).collect();
        let lost = all
            .iter()
            .filter(|m| self.unreachable.contains(&m.node))
            .count();
        let kept = all.len() - lost;
        (all, kept, lost)
    }

    /// Members cut off from some members while still connected to others:
    /// a node that is both an observer and a subject of unreachability (a
    /// cycle in the unreachability graph), or both ends of a record whose
    /// subject has seen the current state (it still gets gossip, so it is
    /// not really gone). Neither happens with a clean partition or crashed
    /// nodes.
    pub fn indirectly_connected(&self) -> BTreeSet<UniqueAddress> {
        let mut out = self.observer_and_subject();
        out.extend(self.seen_though_unreachable());
        out
    }

    fn observer_and_subject(&self) -> BTreeSet<UniqueAddress> {
        let subjects = self.reachability.all_unreachable_or_terminated();
        self.reachability
            .all_observers()
            .intersection(&subjects)
            .cloned()
            .collect()
    }

    fn seen_though_unreachable(&self) -> BTreeSet<UniqueAddress> {
        self.reachability
            .records()
            .filter(|r| self.seen_by.contains(&r.subject))
            .flat_map(|r| [r.observer.clone(), r.subject.clone()])
            .collect()
    }

    /// What `strategy` decides for this side.
    pub fn decide(&self, strategy: &DowningStrategy) -> Decision {
        if self.unreachable.is_empty() {
            return Decision::None;
        }
        let indirect = !self.indirectly_connected().is_empty();
        match strategy {
            DowningStrategy::None => Decision::None,
            DowningStrategy::DownAll => Decision::DownAll,
            DowningStrategy::AutoDownUnsafe { .. } => Decision::DownUnreachable,
            DowningStrategy::StaticQuorum { quorum_size, role } => {
                let (all, kept, _) = self.sides(PLAIN, role.as_deref());
                if all.len() > quorum_size * 2 - 1 {
                    // More members than the quorum can arbitrate.
                    Decision::DownAll
                } else if indirect {
                    Decision::DownIndirectlyConnected
                } else if kept >= *quorum_size {
                    Decision::DownUnreachable
                } else {
                    Decision::DownReachable
                }
            }
            DowningStrategy::KeepMajority { role } => {
                if indirect {
                    return Decision::DownIndirectlyConnected;
                }
                let role = role.as_deref();
                match self.majority(PLAIN, PLAIN, role) {
                    // A member that joined or left during the partition
                    // could tip the balance the other way: only a decision
                    // that holds either way stands.
                    Decision::DownUnreachable => {
                        let this_side = Counting {
                            possibly_up: false,
                            not_possibly_exiting: true,
                        };
                        let other_side = Counting {
                            possibly_up: true,
                            not_possibly_exiting: false,
                        };
                        match self.majority(this_side, other_side, role) {
                            Decision::DownUnreachable => Decision::DownUnreachable,
                            _ => Decision::DownAll,
                        }
                    }
                    other => other,
                }
            }
            DowningStrategy::KeepOldest {
                down_if_alone,
                role,
            } => {
                if indirect {
                    return Decision::DownIndirectlyConnected;
                }
                let role = role.as_deref();
                match self.oldest(PLAIN, *down_if_alone, role) {
                    Decision::DownUnreachable => {
                        // Leaving members may be Exiting on the other side;
                        // with down-if-alone, Joining ones may be Up there.
                        let how = Counting {
                            possibly_up: *down_if_alone,
                            not_possibly_exiting: true,
                        };
                        match self.oldest(how, *down_if_alone, role) {
                            Decision::DownUnreachable => Decision::DownUnreachable,
                            _ => Decision::DownAll,
                        }
                    }
                    other => other,
                }
            }
        }
    }

    /// Keep-majority, counting this side's members with `this_side` and
    /// the other side's with `other_side`; a tie keeps the side with the
    /// lowest address.
    fn majority(&self, this_side: Counting, other_side: Counting, role: Option<&str>) -> Decision {
        let (all, kept, _) = self.sides(this_side, role);
        let (_, _, lost) = self.sides(other_side, role);
        let Some(lowest) = all.iter().map(|m| &m.node).min() else {
            return Decision::DownAll;
        };
        if kept == lost {
            if self.unreachable.contains(lowest) {
                Decision::DownReachable
            } else {
                Decision::DownUnreachable
            }
        } else if kept > lost {
            Decision::DownUnreachable
        } else {
            Decision::DownReachable
        }
    }

    /// Keep-oldest: the side with the oldest member survives, except that
    /// with `down_if_alone` an oldest member cut off from all the others
    /// goes (in a two-member cluster the oldest stays).
    fn oldest(&self, how: Counting, down_if_alone: bool, role: Option<&str>) -> Decision {
        let (_, kept, lost) = self.sides(how, role);
        // The oldest is never a Joining member, however they are counted;
        // Leaving ones count unless they may be Exiting on the other side.
        let among = if how.not_possibly_exiting {
            OldestAmong::Up
        } else {
            OldestAmong::UpOrLeaving
        };
        let Some(oldest) = member::oldest(&self.members, role, among) else {
            return Decision::DownAll;
        };
        if !self.unreachable.contains(&oldest.node) {
            if down_if_alone && kept == 1 && lost >= 2 {
                Decision::DownReachable
            } else {
                Decision::DownUnreachable
            }
        } else if down_if_alone && lost == 1 && kept >= 2 {
            Decision::DownUnreachable
        } else {
            Decision::DownReachable
        }
    }

    /// The members `decision` downs. Only members that are not already
    /// Down or Exiting are downed. An error (with the reason) when the
    /// indirectly connected case cannot be resolved; the caller should
    /// then down all, as Akka does.
    pub fn nodes_to_down(
        &self,
        strategy: &DowningStrategy,
        decision: Decision,
    ) -> Result<BTreeSet<UniqueAddress>, String> {
        let downable: BTreeSet<UniqueAddress> = self
            .members
            .iter()
            .filter(|m| !matches!(m.status, MemberStatus::Down | MemberStatus::Exiting))
            .map(|m| m.node.clone())
            .collect();
        Ok(match decision {
            Decision::None => BTreeSet::new(),
            Decision::DownUnreachable => {
                downable.intersection(&self.unreachable).cloned().collect()
            }
            Decision::DownReachable => downable.difference(&self.unreachable).cloned().collect(),
            Decision::DownAll => downable,
            Decision::DownIndirectlyConnected => {
                let mut out = self.indirectly_connected();
                out.extend(self.clean_partition_beside_indirect(strategy, &downable)?);
                out.retain(|n| downable.contains(n));
                out
            }
        })
    }

    /// With indirectly connected members and also a clean partition (or
    /// crashed members), the strategy's decision for the partition, taken
    /// without the observations between the indirectly connected members.
    fn clean_partition_beside_indirect(
        &self,
        strategy: &DowningStrategy,
        downable: &BTreeSet<UniqueAddress>,
    ) -> Result<BTreeSet<UniqueAddress>, String> {
        let indirect = self.indirectly_connected();
        if self.unreachable.iter().all(|n| indirect.contains(n)) {
            return Ok(BTreeSet::new());
        }
        let cycle = self.observer_and_subject();
        let seen = self.seen_though_unreachable();
        let reachability = self.reachability.filter_records(|r| {
            downable.contains(&r.observer)
                && downable.contains(&r.subject)
                && !(cycle.contains(&r.observer) && cycle.contains(&r.subject))
                && !(seen.contains(&r.observer) && seen.contains(&r.subject))
        });
        let rest = DowningView {
            members: self.members.clone(),
            unreachable: reachability.all_unreachable_or_terminated(),
            reachability,
            seen_by: self.seen_by.clone(),
        };
        match rest.decide(strategy) {
            Decision::DownIndirectlyConnected => Err(format!(
                "split brain resolver: still indirectly connected members {:?} after \
                 leaving out the observations between {:?}; downing all instead",
                rest.indirectly_connected(),
                indirect
            )),
            d => rest.nodes_to_down(strategy, d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::Gossip;
    use troupe_core::remote::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", port), port as u64)
    }

    fn up_members(n: u16) -> Vec<Member> {
        (1..=n)
            .map(|p| Member::joining(node(p), BTreeSet::new()).up(p as i32))
            .collect()
    }

    /// The view from node `me` of `members` where `me` cannot reach `lost`.
    fn view_with(members: Vec<Member>, me: u16, lost: &[u16]) -> DowningView {
        let mut g = Gossip::with_members(members);
        for l in lost {
            g.reachability = g.reachability.unreachable(&node(me), &node(*l));
        }
        g.seen_by(&node(me));
        DowningView::of(&MembershipState::new(g, node(me)))
    }

    fn view(n: u16, me: u16, lost: &[u16]) -> DowningView {
        view_with(up_members(n), me, lost)
    }

    fn set(ports: &[u16]) -> BTreeSet<UniqueAddress> {
        ports.iter().map(|p| node(*p)).collect()
    }

    fn majority() -> DowningStrategy {
        DowningStrategy::KeepMajority { role: None }
    }

    #[test]
    fn keep_majority() {
        let s = majority();
        assert_eq!(view(5, 1, &[4, 5]).decide(&s), Decision::DownUnreachable);
        assert_eq!(view(5, 4, &[1, 2, 3]).decide(&s), Decision::DownReachable);
        // 2|2: the side with the lowest address (node 1) survives.
        assert_eq!(view(4, 1, &[3, 4]).decide(&s), Decision::DownUnreachable);
        assert_eq!(view(4, 3, &[1, 2]).decide(&s), Decision::DownReachable);
        let v = view(5, 4, &[1, 2, 3]);
        assert_eq!(
            v.nodes_to_down(&s, Decision::DownReachable).unwrap(),
            set(&[4, 5])
        );
    }

    #[test]
    fn static_quorum_keep_oldest_and_down_all() {
        let q = DowningStrategy::StaticQuorum {
            quorum_size: 3,
            role: None,
        };
        assert_eq!(view(5, 1, &[4, 5]).decide(&q), Decision::DownUnreachable);
        assert_eq!(view(5, 4, &[1, 2, 3]).decide(&q), Decision::DownReachable);
        assert_eq!(view(6, 1, &[6]).decide(&q), Decision::DownAll, "too many");
        let o = DowningStrategy::KeepOldest {
            down_if_alone: true,
            role: None,
        };
        assert_eq!(view(5, 1, &[4, 5]).decide(&o), Decision::DownUnreachable);
        assert_eq!(view(5, 3, &[1, 2]).decide(&o), Decision::DownReachable);
        // The oldest alone on the other side is downed.
        assert_eq!(view(5, 2, &[1]).decide(&o), Decision::DownUnreachable);
        // The oldest alone on this side goes.
        assert_eq!(
            view(5, 1, &[2, 3, 4, 5]).decide(&o),
            Decision::DownReachable
        );
        // Two members: the oldest stays even though it is alone.
        assert_eq!(view(2, 1, &[2]).decide(&o), Decision::DownUnreachable);
        assert_eq!(
            view(5, 1, &[5]).decide(&DowningStrategy::DownAll),
            Decision::DownAll
        );
        assert_eq!(
            view(5, 1, &[5]).decide(&DowningStrategy::None),
            Decision::None
        );
        assert_eq!(view(5, 1, &[]).decide(&majority()), Decision::None);
    }

    #[test]
    fn exiting_and_down_members_do_not_count() {
        // 3 Up here (one of them Exiting), 2 there: 2 against 2, and the
        // lowest address is there.
        let mut members = up_members(5);
        members[2] = members[2].with_status(MemberStatus::Exiting);
        let v = view_with(members.clone(), 3, &[1, 2]);
        assert_eq!(v.decide(&majority()), Decision::DownReachable);
        assert_eq!(
            v.nodes_to_down(&majority(), Decision::DownReachable)
                .unwrap(),
            set(&[4, 5]),
            "the Exiting member is not downed"
        );
    }

    #[test]
    fn a_member_joining_during_the_partition_makes_keep_majority_down_all() {
        // Up: 1-5; node 6 is Joining. Partition {1, 2, 6} | {3, 4, 5}.
        let mut members = up_members(5);
        members.push(Member::joining(node(6), BTreeSet::new()));
        // Counting Up members only, {3, 4, 5} is a majority; but the other
        // side may have moved 6 Up meanwhile, which makes it 3 against 3
        // with node 1 over there: no safe majority, so all go down.
        let v = view_with(members.clone(), 3, &[1, 2, 6]);
        assert_eq!(v.decide(&majority()), Decision::DownAll);
        // The other side is a minority either way.
        let v = view_with(members.clone(), 1, &[3, 4, 5]);
        assert_eq!(v.decide(&majority()), Decision::DownReachable);
        // A Joining member that cannot tip the balance changes nothing.
        let v = view_with(members, 1, &[5, 6]);
        assert_eq!(v.decide(&majority()), Decision::DownUnreachable);
    }

    #[test]
    fn a_member_leaving_during_the_partition_makes_keep_majority_down_all() {
        // {3, 4, 5} | {1, 2} with node 4 Leaving: the other side may have
        // seen it Exiting, which leaves 2 against 2 with node 1 over there.
        let mut members = up_members(5);
        members[3] = members[3].with_status(MemberStatus::Leaving);
        let v = view_with(members, 3, &[1, 2]);
        assert_eq!(v.decide(&majority()), Decision::DownAll);
        // A Leaving member on the other side does not matter.
        let mut members = up_members(5);
        members[4] = members[4].with_status(MemberStatus::Leaving);
        let v = view_with(members, 1, &[4, 5]);
        assert_eq!(v.decide(&majority()), Decision::DownUnreachable);
        // Nor one on a side with a majority to spare.
        let mut members = up_members(6);
        members[5] = members[5].with_status(MemberStatus::Leaving);
        let v = view_with(members, 3, &[1, 2]);
        assert_eq!(v.decide(&majority()), Decision::DownUnreachable);
    }

    #[test]
    fn keep_oldest_with_a_leaving_member_downs_all_when_unsure() {
        // {1, 2, 3} | {4, 5} with down-if-alone: here the oldest (1) and
        // two others. If 2 and 3 are Leaving they may be Exiting on the
        // other side, which would leave the oldest alone here.
        let o = DowningStrategy::KeepOldest {
            down_if_alone: true,
            role: None,
        };
        let mut members = up_members(5);
        members[1] = members[1].with_status(MemberStatus::Leaving);
        members[2] = members[2].with_status(MemberStatus::Leaving);
        let v = view_with(members, 1, &[4, 5]);
        assert_eq!(v.decide(&o), Decision::DownAll);
        assert_eq!(view(5, 1, &[4, 5]).decide(&o), Decision::DownUnreachable);
    }

    #[test]
    fn indirectly_connected_members_are_downed_and_the_rest_kept() {
        // Node 1 cannot reach node 2, but both still reach everyone else:
        // a bad link, not a partition. Each is an observer of the other.
        let mut g = Gossip::with_members(up_members(5));
        g.reachability = g
            .reachability
            .unreachable(&node(1), &node(2))
            .unreachable(&node(2), &node(1));
        g.seen_by(&node(3));
        let v = DowningView::of(&MembershipState::new(g, node(3)));
        assert_eq!(v.indirectly_connected(), set(&[1, 2]));
        assert_eq!(v.decide(&majority()), Decision::DownIndirectlyConnected);
        assert_eq!(
            v.nodes_to_down(&majority(), Decision::DownIndirectlyConnected)
                .unwrap(),
            set(&[1, 2])
        );
    }

    #[test]
    fn an_unreachable_member_that_saw_the_state_is_indirectly_connected() {
        // Node 3 says 5 is unreachable, but 5 has seen the current state
        // (it still gets gossip through others).
        let mut g = Gossip::with_members(up_members(5));
        g.reachability = g.reachability.unreachable(&node(3), &node(5));
        g.seen_by(&node(1));
        g.seen_by(&node(5));
        let v = DowningView::of(&MembershipState::new(g, node(1)));
        assert_eq!(v.indirectly_connected(), set(&[3, 5]));
        assert_eq!(
            v.nodes_to_down(&majority(), Decision::DownIndirectlyConnected)
                .unwrap(),
            set(&[3, 5])
        );
    }

    #[test]
    fn indirectly_connected_plus_a_crash_downs_both() {
        // 1 and 2 cannot reach each other (a bad link) and node 7 crashed.
        let mut g = Gossip::with_members(up_members(7));
        g.reachability = g
            .reachability
            .unreachable(&node(1), &node(2))
            .unreachable(&node(2), &node(1))
            .unreachable(&node(3), &node(7));
        g.seen_by(&node(4));
        let v = DowningView::of(&MembershipState::new(g, node(4)));
        assert_eq!(v.decide(&majority()), Decision::DownIndirectlyConnected);
        assert_eq!(
            v.nodes_to_down(&majority(), Decision::DownIndirectlyConnected)
                .unwrap(),
            set(&[1, 2, 7])
        );
    }

    #[test]
    fn roles_restrict_the_count() {
        let role = |r: &str| [r.to_string()].into_iter().collect::<BTreeSet<String>>();
        // Nodes 1-2 have role "a" and are here; 3-5 have none and are lost.
        let members: Vec<Member> = (1..=5u16)
            .map(|p| {
                let roles = if p <= 2 { role("a") } else { BTreeSet::new() };
                Member::joining(node(p), roles).up(p as i32)
            })
            .collect();
        let v = view_with(members, 1, &[3, 4, 5]);
        assert_eq!(v.decide(&majority()), Decision::DownReachable);
        let by_role = DowningStrategy::KeepMajority {
            role: Some("a".into()),
        };
        assert_eq!(v.decide(&by_role), Decision::DownUnreachable);
    }
}
