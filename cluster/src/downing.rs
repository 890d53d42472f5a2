//! The split brain resolver's decision (Akka's strategies): given the
//! membership and the members this side cannot reach, which side goes
//! down. Each side's leader decides for its side; the strategies are
//! built so that both sides reach compatible decisions.

use crate::member::{Member, MemberStatus, UniqueAddress};
use crate::membership::MembershipState;
use crate::settings::DowningStrategy;
use std::collections::BTreeSet;

/// What this side does.
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
}

/// Members the strategies count: joining members do not vote.
fn counted<'a>(
    state: &'a MembershipState,
    role: Option<&'a str>,
) -> impl Iterator<Item = &'a Member> {
    state
        .gossip
        .members
        .iter()
        .filter(|m| {
            !matches!(
                m.status,
                MemberStatus::Joining | MemberStatus::WeaklyUp | MemberStatus::Down
            )
        })
        .filter(move |m| role.is_none_or(|r| m.has_role(r)))
}

/// Decides for this side, where `unreachable` are the members it cannot reach.
pub fn decide(
    strategy: &DowningStrategy,
    state: &MembershipState,
    unreachable: &BTreeSet<UniqueAddress>,
) -> Decision {
    if unreachable.is_empty() {
        return Decision::None;
    }
    fn split<'a>(
        state: &'a MembershipState,
        role: Option<&'a str>,
        unreachable: &BTreeSet<UniqueAddress>,
    ) -> (Vec<&'a Member>, Vec<&'a Member>, Vec<&'a Member>) {
        let all: Vec<&Member> = counted(state, role).collect();
        let (lost, kept) = all.iter().partition(|m| unreachable.contains(&m.node));
        (all, kept, lost)
    }
    match strategy {
        DowningStrategy::None => Decision::None,
        DowningStrategy::DownAll => Decision::DownAll,
        DowningStrategy::AutoDownUnsafe { .. } => Decision::DownUnreachable,
        DowningStrategy::KeepMajority { role } => {
            let (all, kept, lost) = split(state, role.as_deref(), unreachable);
            if kept.len() > lost.len() {
                Decision::DownUnreachable
            } else if kept.len() < lost.len() {
                Decision::DownReachable
            } else {
                // A tie: the side with the lowest address survives.
                match all.iter().map(|m| &m.node).min() {
                    Some(lowest) if unreachable.contains(lowest) => Decision::DownReachable,
                    Some(_) => Decision::DownUnreachable,
                    None => Decision::DownAll,
                }
            }
        }
        DowningStrategy::StaticQuorum { quorum_size, role } => {
            let (all, kept, _) = split(state, role.as_deref(), unreachable);
            if all.len() > quorum_size * 2 - 1 {
                // More members than the quorum can arbitrate.
                Decision::DownAll
            } else if kept.len() >= *quorum_size {
                Decision::DownUnreachable
            } else {
                Decision::DownReachable
            }
        }
        DowningStrategy::KeepOldest {
            down_if_alone,
            role,
        } => {
            let (all, kept, lost) = split(state, role.as_deref(), unreachable);
            let Some(oldest) = all
                .iter()
                .copied()
                .reduce(|a, b| if b.is_older_than(a) { b } else { a })
            else {
                return Decision::DownAll;
            };
            let oldest_here = !unreachable.contains(&oldest.node);
            match (oldest_here, *down_if_alone) {
                // Alone against at least two: the oldest goes (Akka's rule;
                // in a two-node cluster the oldest stays).
                (true, true) if kept.len() == 1 && lost.len() >= 2 => Decision::DownReachable,
                (true, _) => Decision::DownUnreachable,
                (false, true) if lost.len() == 1 && kept.len() >= 2 => Decision::DownUnreachable,
                (false, _) => Decision::DownReachable,
            }
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

    fn state(n: u16) -> MembershipState {
        let members = (1..=n).map(|p| Member::joining(node(p), BTreeSet::new()).up(p as i32));
        MembershipState::new(Gossip::with_members(members), node(1))
    }

    fn set(ports: &[u16]) -> BTreeSet<UniqueAddress> {
        ports.iter().map(|p| node(*p)).collect()
    }

    #[test]
    fn keep_majority() {
        let s = KeepMajority();
        let st = state(5);
        assert_eq!(decide(&s, &st, &set(&[4, 5])), Decision::DownUnreachable);
        assert_eq!(decide(&s, &st, &set(&[1, 2, 3])), Decision::DownReachable);
        let st = state(4);
        // 2|2: the side with the lowest address (node 1) survives.
        assert_eq!(decide(&s, &st, &set(&[3, 4])), Decision::DownUnreachable);
        assert_eq!(decide(&s, &st, &set(&[1, 2])), Decision::DownReachable);
    }

    #[allow(non_snake_case)]
    fn KeepMajority() -> DowningStrategy {
        DowningStrategy::KeepMajority { role: None }
    }

    #[test]
    fn static_quorum_keep_oldest_and_down_all() {
        let st = state(5);
        let q = DowningStrategy::StaticQuorum {
            quorum_size: 3,
            role: None,
        };
        assert_eq!(decide(&q, &st, &set(&[4, 5])), Decision::DownUnreachable);
        assert_eq!(decide(&q, &st, &set(&[1, 2, 3])), Decision::DownReachable);
        let o = DowningStrategy::KeepOldest {
            down_if_alone: true,
            role: None,
        };
        assert_eq!(decide(&o, &st, &set(&[4, 5])), Decision::DownUnreachable);
        assert_eq!(decide(&o, &st, &set(&[1, 2])), Decision::DownReachable);
        // The oldest alone on the other side is downed.
        assert_eq!(decide(&o, &st, &set(&[1])), Decision::DownUnreachable);
        assert_eq!(
            decide(&DowningStrategy::DownAll, &st, &set(&[5])),
            Decision::DownAll
        );
        assert_eq!(
            decide(&DowningStrategy::None, &st, &set(&[5])),
            Decision::None
        );
    }
}
