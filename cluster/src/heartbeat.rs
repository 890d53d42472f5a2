//! Which nodes this node heartbeats: its successors on a ring of all
//! members ordered by a hash of their address, so that every node is
//! watched by a few others and the choice is the same on every node
//! (Akka's `HeartbeatNodeRing`).

use crate::member::UniqueAddress;
use crate::membership::MembershipState;
use std::collections::BTreeSet;

/// The ring, rebuilt whenever the membership changes.
#[derive(Debug, Clone, Default)]
pub(crate) struct HeartbeatRing {
    ring: Vec<UniqueAddress>,
    me: Option<usize>,
    monitored_by: usize,
}

impl HeartbeatRing {
    pub(crate) fn new(state: &MembershipState, monitored_by: usize) -> Self {
        let mut ring: Vec<UniqueAddress> = state
            .gossip
            .members
            .iter()
            .map(|m| m.node.clone())
            .collect();
        ring.sort_by_key(|n| (n.clock_key(), n.clone()));
        let me = ring.iter().position(|n| n == &state.self_node);
        HeartbeatRing {
            ring,
            me,
            monitored_by,
        }
    }

    /// The next `monitored_by` reachable nodes after this one on the ring,
    /// plus the unreachable ones met on the way (to notice their return).
    pub(crate) fn receivers(&self, state: &MembershipState) -> BTreeSet<UniqueAddress> {
        let mut out = BTreeSet::new();
        let Some(me) = self.me else { return out };
        let n = self.ring.len();
        let mut reachable = 0;
        for step in 1..n {
            if reachable >= self.monitored_by {
                break;
            }
            let node = &self.ring[(me + step) % n];
            if state.gossip.reachability.is_reachable(node) {
                reachable += 1;
            }
            out.insert(node.clone());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::Gossip;
    use crate::member::Member;
    use troupe_core::remote::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", port), port as u64)
    }

    #[test]
    fn every_node_is_monitored_by_n_others() {
        let members: Vec<Member> = (1..=10)
            .map(|p| Member::joining(node(p), BTreeSet::new()))
            .collect();
        let mut monitored_by = std::collections::BTreeMap::<UniqueAddress, usize>::new();
        for p in 1..=10 {
            let st = MembershipState::new(Gossip::with_members(members.clone()), node(p));
            let r = HeartbeatRing::new(&st, 3).receivers(&st);
            assert_eq!(r.len(), 3);
            assert!(!r.contains(&node(p)));
            for n in r {
                *monitored_by.entry(n).or_default() += 1;
            }
        }
        assert!(monitored_by.values().all(|c| *c == 3), "{monitored_by:?}");
    }

    #[test]
    fn unreachable_nodes_are_kept_and_skipped_over() {
        let members: Vec<Member> = (1..=5)
            .map(|p| Member::joining(node(p), BTreeSet::new()))
            .collect();
        let mut st = MembershipState::new(Gossip::with_members(members), node(1));
        let ring = HeartbeatRing::new(&st, 2);
        let before = ring.receivers(&st);
        let first = before.iter().next().unwrap().clone();
        st.gossip.reachability = st.gossip.reachability.unreachable(&node(1), &first);
        let after = ring.receivers(&st);
        assert!(after.contains(&first));
        assert_eq!(after.len(), 3);
    }
}
