//! Removed-node pruning markers (Akka's `PruningState`): for one key, how
//! far the collapsing of a removed node's changes into another node has
//! got.
//!
//! The protocol, run by the replicators:
//! 1. Some time after a node was removed, the leader marks every key that
//!    holds changes of that node `Initialized`, with itself as the owner.
//! 2. Each replica that merges such a key adds itself to the marker's
//!    `seen` set. The merges carry every replica's view of the removed
//!    node's changes to the owner.
//! 3. Once every member has seen the marker, the owner collapses the
//!    removed node's changes into its own (`ReplicatedData::prune`) and
//!    marks the key `Performed`.
//! 4. While the `Performed` marker lives, every replica drops the removed
//!    node's changes from what it merges (`ReplicatedData::pruning_cleanup`),
//!    so an old replica can never bring them back and count them twice.
//!    The marker is dropped after `pruning_marker_time_to_live`.

use crate::member::UniqueAddress;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The pruning of one removed node, for one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum PruningState {
    /// `owner` collapses the removed node's changes once every member is
    /// in `seen`.
    Initialized {
        owner: UniqueAddress,
        seen: BTreeSet<UniqueAddress>,
    },
    /// Done; the removed node's changes are dropped from merged replicas
    /// until `obsolete_at_ms` (milliseconds since the Unix epoch).
    Performed { obsolete_at_ms: u64 },
}

impl PruningState {
    /// Akka's merge: `Performed` wins (the later expiry); two
    /// `Initialized` of one owner join their `seen` sets; of two owners,
    /// the lower address wins.
    pub(crate) fn merge(&self, other: &PruningState) -> PruningState {
        use PruningState::*;
        match (self, other) {
            (Performed { obsolete_at_ms: a }, Performed { obsolete_at_ms: b }) => Performed {
                obsolete_at_ms: (*a).max(*b),
            },
            (Performed { .. }, _) => self.clone(),
            (_, Performed { .. }) => other.clone(),
            (Initialized { owner: a, seen: sa }, Initialized { owner: b, seen: sb }) => {
                if a == b {
                    Initialized {
                        owner: a.clone(),
                        seen: sa.union(sb).cloned().collect(),
                    }
                } else if b < a {
                    other.clone()
                } else {
                    self.clone()
                }
            }
        }
    }
}

/// The markers of one key, by removed node.
pub(crate) type Pruning = BTreeMap<UniqueAddress, PruningState>;

/// Both sides' markers, merged, without `Performed` ones that expired.
pub(crate) fn merge_pruning(a: &Pruning, b: &Pruning, now_ms: u64) -> Pruning {
    let mut out = a.clone();
    for (removed, theirs) in b {
        let merged = match out.get(removed) {
            Some(ours) => ours.merge(theirs),
            None => theirs.clone(),
        };
        out.insert(removed.clone(), merged);
    }
    out.retain(|_, p| !is_obsolete(p, now_ms));
    out
}

/// The marks as stored and digested: MessagePack of (node, state) pairs;
/// empty for none.
pub(crate) fn encode_marks(p: &Pruning) -> Vec<u8> {
    if p.is_empty() {
        return Vec::new();
    }
    rmp_serde::to_vec(&p.iter().collect::<Vec<_>>()).unwrap_or_default()
}

/// What `encode_marks` made (from disk: errors, no panics).
pub(crate) fn decode_marks(bytes: &[u8]) -> Result<Pruning, String> {
    if bytes.is_empty() {
        return Ok(Pruning::new());
    }
    rmp_serde::from_slice::<Vec<(UniqueAddress, PruningState)>>(bytes)
        .map(|pairs| pairs.into_iter().collect())
        .map_err(|e| e.to_string())
}

/// A `Performed` marker past its time.
pub(crate) fn is_obsolete(p: &PruningState, now_ms: u64) -> bool {
    matches!(p, PruningState::Performed { obsolete_at_ms } if *obsolete_at_ms <= now_ms)
}

/// Adds `me` to the `seen` set of every `Initialized` marker; true if any
/// changed.
pub(crate) fn add_seen(p: &mut Pruning, me: &UniqueAddress) -> bool {
    let mut changed = false;
    for state in p.values_mut() {
        if let PruningState::Initialized { seen, .. } = state {
            changed |= seen.insert(me.clone());
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_core::remote::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", port), port.into())
    }

    fn init(owner: u16, seen: &[u16]) -> PruningState {
        PruningState::Initialized {
            owner: node(owner),
            seen: seen.iter().map(|p| node(*p)).collect(),
        }
    }

    #[test]
    fn merge_is_a_semilattice_on_samples() {
        let samples = [
            init(1, &[]),
            init(1, &[2]),
            init(1, &[3]),
            init(2, &[1, 2]),
            PruningState::Performed { obsolete_at_ms: 5 },
            PruningState::Performed { obsolete_at_ms: 9 },
        ];
        for a in &samples {
            assert_eq!(a.merge(a), *a);
            for b in &samples {
                assert_eq!(a.merge(b), b.merge(a), "{a:?} {b:?}");
                for c in &samples {
                    assert_eq!(a.merge(b).merge(c), a.merge(&b.merge(c)));
                }
            }
        }
        assert_eq!(init(1, &[2]).merge(&init(1, &[3])), init(1, &[2, 3]));
        assert_eq!(init(2, &[3]).merge(&init(1, &[])), init(1, &[]));
    }

    #[test]
    fn expired_markers_are_dropped_and_seen_grows() {
        let a: Pruning = [(node(9), PruningState::Performed { obsolete_at_ms: 10 })].into();
        let b: Pruning = [(node(8), init(1, &[]))].into();
        let mut m = merge_pruning(&a, &b, 10);
        assert_eq!(m.len(), 1, "the expired marker is gone");
        assert!(add_seen(&mut m, &node(2)));
        assert!(!add_seen(&mut m, &node(2)));
        assert_eq!(m[&node(8)], init(1, &[2]));
        assert_eq!(decode_marks(&encode_marks(&m)).unwrap(), m);
        assert!(encode_marks(&Pruning::new()).is_empty());
    }
}
