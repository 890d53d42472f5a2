//! The join decision (Akka's `LowestAddressJoinDecider`), as a pure
//! function of what discovery and probing have observed.
//!
//! - If any contact point reports seed nodes, join them (up to five):
//!   a cluster exists.
//! - Else keep probing until at least `required_contact_point_nr` contact
//!   points have answered, the discovered set has not changed for
//!   `stable_margin`, and (with `contact_with_all_contact_points`) every
//!   discovered contact point has answered.
//! - Then the node with the lowest remoting address among those that
//!   answered joins itself (if `new_cluster_enabled`); every other node
//!   keeps probing and joins the new cluster once its contact point
//!   reports it.
//!
//! Contact points are matched to remoting addresses through their answers
//! (`selfNode`), never guessed from ports.

use super::settings::BootstrapSettings;
use crate::discovery::ResolvedTarget;
use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, Instant};
use troupe_core::remote::Address;

/// What one contact point answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedNodesObservation {
    /// When.
    pub observed_at: Instant,
    /// The contact point.
    pub contact_point: ResolvedTarget,
    /// The remoting address of the node behind it (its `selfNode`).
    pub source_node: Address,
    /// The seed nodes it reported (empty if it is not in a cluster).
    pub seed_nodes: BTreeSet<Address>,
}

/// What the decider sees.
#[derive(Debug, Clone)]
pub struct SeedNodesInformation {
    /// Now.
    pub now: Instant,
    /// When the discovered contact points last changed.
    pub contact_points_changed_at: Instant,
    /// The discovered contact points.
    pub contact_points: BTreeSet<ResolvedTarget>,
    /// The latest answer of each contact point that answered recently.
    pub observations: Vec<SeedNodesObservation>,
}

/// Why a node keeps probing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepProbing {
    /// Fewer contact points answered than required.
    NotEnoughContactPoints {
        /// Discovered.
        discovered: usize,
        /// Answered.
        confirmed: usize,
        /// Required (`required_contact_point_nr`).
        required: usize,
    },
    /// The discovered set changed less than `stable_margin` ago.
    Unstable {
        /// How long ago.
        changed_ago: Duration,
    },
    /// These discovered contact points have not answered.
    MissingAnswers(Vec<ResolvedTarget>),
    /// Another node has the lowest address: it is to form the cluster.
    NotLowest {
        /// The lowest address.
        lowest: Address,
    },
    /// This node has the lowest address but may not form a new cluster
    /// (`new_cluster_enabled = false`).
    NewClusterDisabled,
}

impl fmt::Display for KeepProbing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeepProbing::NotEnoughContactPoints {
                discovered,
                confirmed,
                required,
            } => write!(
                f,
                "discovered {discovered} contact points, {confirmed} answered, which is less than \
                 the required {required} (required-contact-point-nr)"
            ),
            KeepProbing::Unstable { changed_ago } => write!(
                f,
                "the discovered contact points changed {changed_ago:?} ago, less than the stable margin"
            ),
            KeepProbing::MissingAnswers(missing) => {
                write!(f, "no answer yet from contact points ")?;
                for (i, m) in missing.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{m}")?;
                }
                Ok(())
            }
            KeepProbing::NotLowest { lowest } => write!(
                f,
                "no cluster found; {lowest} has the lowest address and is expected to form it"
            ),
            KeepProbing::NewClusterDisabled => f.write_str(
                "no cluster found and this node has the lowest address, but new-cluster-enabled is \
                 off: waiting for an existing cluster",
            ),
        }
    }
}

/// The decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinDecision {
    /// Not yet.
    KeepProbing(KeepProbing),
    /// Join the cluster of these seed nodes.
    JoinSeedNodes(Vec<Address>),
    /// Form a new cluster: join this node itself.
    JoinSelf,
}

/// Decides, for the node at `self_address`.
pub fn decide(
    info: &SeedNodesInformation,
    settings: &BootstrapSettings,
    self_address: &Address,
) -> JoinDecision {
    let seeds: BTreeSet<&Address> = info
        .observations
        .iter()
        .flat_map(|o| &o.seed_nodes)
        .collect();
    if !seeds.is_empty() {
        return JoinDecision::JoinSeedNodes(
            seeds
                .into_iter()
                .take(crate::management::MAX_SEED_NODES)
                .cloned()
                .collect(),
        );
    }
    let confirmed = info.observations.len();
    if confirmed < settings.required_contact_point_nr {
        return JoinDecision::KeepProbing(KeepProbing::NotEnoughContactPoints {
            discovered: info.contact_points.len(),
            confirmed,
            required: settings.required_contact_point_nr,
        });
    }
    let changed_ago = info
        .now
        .saturating_duration_since(info.contact_points_changed_at);
    if changed_ago < settings.stable_margin {
        return JoinDecision::KeepProbing(KeepProbing::Unstable { changed_ago });
    }
    if settings.contact_with_all_contact_points {
        let answered: BTreeSet<&ResolvedTarget> =
            info.observations.iter().map(|o| &o.contact_point).collect();
        let missing: Vec<ResolvedTarget> = info
            .contact_points
            .iter()
            .filter(|c| !answered.contains(c))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return JoinDecision::KeepProbing(KeepProbing::MissingAnswers(missing));
        }
    }
    let Some(lowest) = info.observations.iter().map(|o| &o.source_node).min() else {
        // Unreachable with required_contact_point_nr >= 1.
        return JoinDecision::KeepProbing(KeepProbing::NotEnoughContactPoints {
            discovered: info.contact_points.len(),
            confirmed,
            required: settings.required_contact_point_nr,
        });
    };
    if lowest != self_address {
        JoinDecision::KeepProbing(KeepProbing::NotLowest {
            lowest: lowest.clone(),
        })
    } else if !settings.new_cluster_enabled {
        JoinDecision::KeepProbing(KeepProbing::NewClusterDisabled)
    } else {
        JoinDecision::JoinSelf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(port: u16) -> Address {
        Address::new("sys", "10.0.0.1", port)
    }

    fn cp(i: u16) -> ResolvedTarget {
        ResolvedTarget::new(format!("10.0.1.{i}"), Some(8558))
    }

    /// Contact points 1..=n discovered `stable_for` ago; those in
    /// `answering` answered (contact point i is the node at port 2550+i)
    /// with the seeds given.
    fn info(n: u16, stable_for: Duration, answering: &[(u16, &[u16])]) -> SeedNodesInformation {
        let now = Instant::now() + Duration::from_secs(60);
        SeedNodesInformation {
            now,
            contact_points_changed_at: now - stable_for,
            contact_points: (1..=n).map(cp).collect(),
            observations: answering
                .iter()
                .map(|(i, seeds)| SeedNodesObservation {
                    observed_at: now,
                    contact_point: cp(*i),
                    source_node: addr(2550 + i),
                    seed_nodes: seeds.iter().map(|s| addr(*s)).collect(),
                })
                .collect(),
        }
    }

    const STABLE: Duration = Duration::from_secs(10);

    #[test]
    fn not_enough_contact_points() {
        let s = BootstrapSettings {
            required_contact_point_nr: 3,
            ..BootstrapSettings::default()
        };
        let d = decide(&info(2, STABLE, &[(1, &[]), (2, &[])]), &s, &addr(2551));
        assert_eq!(
            d,
            JoinDecision::KeepProbing(KeepProbing::NotEnoughContactPoints {
                discovered: 2,
                confirmed: 2,
                required: 3
            })
        );
        // Discovered but not answered do not count.
        let d = decide(&info(3, STABLE, &[(1, &[]), (2, &[])]), &s, &addr(2551));
        assert!(matches!(
            d,
            JoinDecision::KeepProbing(KeepProbing::NotEnoughContactPoints { confirmed: 2, .. })
        ));
    }

    #[test]
    fn unstable_set() {
        let s = BootstrapSettings::default();
        let d = decide(
            &info(2, Duration::from_secs(2), &[(1, &[]), (2, &[])]),
            &s,
            &addr(2551),
        );
        assert!(matches!(
            d,
            JoinDecision::KeepProbing(KeepProbing::Unstable { .. })
        ));
    }

    #[test]
    fn one_contact_point_silent() {
        let s = BootstrapSettings::default();
        let d = decide(&info(3, STABLE, &[(1, &[]), (3, &[])]), &s, &addr(2551));
        assert_eq!(
            d,
            JoinDecision::KeepProbing(KeepProbing::MissingAnswers(vec![cp(2)]))
        );
        // Unless contact with all is not required.
        let s = BootstrapSettings {
            contact_with_all_contact_points: false,
            ..s
        };
        let d = decide(&info(3, STABLE, &[(1, &[]), (3, &[])]), &s, &addr(2551));
        assert_eq!(d, JoinDecision::JoinSelf);
    }

    #[test]
    fn seeds_reported_are_joined_at_once() {
        let s = BootstrapSettings {
            required_contact_point_nr: 5,
            ..BootstrapSettings::default()
        };
        // Even unstable, with too few answers: a cluster exists.
        let d = decide(
            &info(3, Duration::ZERO, &[(2, &[2552, 2553]), (3, &[2552])]),
            &s,
            &addr(2551),
        );
        assert_eq!(d, JoinDecision::JoinSeedNodes(vec![addr(2552), addr(2553)]));
        // At most five.
        let many: Vec<u16> = (2560..2570).collect();
        let d = decide(&info(1, STABLE, &[(1, &many)]), &s, &addr(2551));
        assert!(matches!(d, JoinDecision::JoinSeedNodes(seeds) if seeds.len() == 5));
    }

    #[test]
    fn lowest_address_self_joins_and_others_wait() {
        let s = BootstrapSettings::default();
        let all = info(3, STABLE, &[(1, &[]), (2, &[]), (3, &[])]);
        assert_eq!(decide(&all, &s, &addr(2551)), JoinDecision::JoinSelf);
        assert_eq!(
            decide(&all, &s, &addr(2552)),
            JoinDecision::KeepProbing(KeepProbing::NotLowest { lowest: addr(2551) })
        );
        assert_eq!(
            decide(&all, &s, &addr(2553)),
            JoinDecision::KeepProbing(KeepProbing::NotLowest { lowest: addr(2551) })
        );
    }

    #[test]
    fn new_cluster_disabled_never_self_joins() {
        let s = BootstrapSettings {
            new_cluster_enabled: false,
            ..BootstrapSettings::default()
        };
        let all = info(3, STABLE, &[(1, &[]), (2, &[]), (3, &[])]);
        assert_eq!(
            decide(&all, &s, &addr(2551)),
            JoinDecision::KeepProbing(KeepProbing::NewClusterDisabled)
        );
        // Joining an existing cluster still works.
        let existing = info(3, STABLE, &[(1, &[]), (2, &[2599])]);
        assert_eq!(
            decide(&existing, &s, &addr(2551)),
            JoinDecision::JoinSeedNodes(vec![addr(2599)])
        );
    }
}
