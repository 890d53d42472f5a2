//! The active entities of one area under its replacement policy (Pekko's
//! `ActiveEntities`): the single area of a limit-based strategy, or the
//! admission window or main area of a composite one.
//!
//! The area works on slots of the strategy's [`Nodes`]: an operation that
//! pushes slots to `out` has taken them out of the area (the strategy
//! then passivates them, or moves them to its other area).

use super::least_frequently_used::LeastFrequentlyUsedReplacementPolicy;
use super::least_recently_used::LeastRecentlyUsedReplacementPolicy;
use super::most_recently_used::MostRecentlyUsedReplacementPolicy;
use super::nodes::Nodes;
use super::segmented_least_recently_used::SegmentedLeastRecentlyUsedReplacementPolicy;
use crate::settings::ReplacementPolicy;

// The policies' names, as the settings spell them.
#[allow(clippy::enum_variant_names)]
#[derive(Debug)]
pub(super) enum ActiveEntities {
    LeastRecentlyUsed(LeastRecentlyUsedReplacementPolicy),
    SegmentedLeastRecentlyUsed(SegmentedLeastRecentlyUsedReplacementPolicy),
    MostRecentlyUsed(MostRecentlyUsedReplacementPolicy),
    LeastFrequentlyUsed(LeastFrequentlyUsedReplacementPolicy),
}

/// Calls the same method on whichever policy the area has.
macro_rules! each {
    ($self:expr, $p:ident => $e:expr) => {
        match $self {
            ActiveEntities::LeastRecentlyUsed($p) => $e,
            ActiveEntities::SegmentedLeastRecentlyUsed($p) => $e,
            ActiveEntities::MostRecentlyUsed($p) => $e,
            ActiveEntities::LeastFrequentlyUsed($p) => $e,
        }
    };
}

impl ActiveEntities {
    /// An empty area under `policy` and `limit`. A segmented policy of one
    /// level is the plain one.
    pub(super) fn new(policy: &ReplacementPolicy, limit: usize) -> Self {
        match policy {
            ReplacementPolicy::LeastRecentlyUsed { segmented } if segmented.len() > 1 => {
                ActiveEntities::SegmentedLeastRecentlyUsed(
                    SegmentedLeastRecentlyUsedReplacementPolicy::new(limit, segmented),
                )
            }
            ReplacementPolicy::LeastRecentlyUsed { .. } => {
                ActiveEntities::LeastRecentlyUsed(LeastRecentlyUsedReplacementPolicy::new(limit))
            }
            ReplacementPolicy::MostRecentlyUsed => {
                ActiveEntities::MostRecentlyUsed(MostRecentlyUsedReplacementPolicy::new(limit))
            }
            ReplacementPolicy::LeastFrequentlyUsed { dynamic_aging } => {
                ActiveEntities::LeastFrequentlyUsed(LeastFrequentlyUsedReplacementPolicy::new(
                    limit,
                    *dynamic_aging,
                ))
            }
        }
    }

    /// Entities in the area.
    pub(super) fn size(&self) -> usize {
        each!(self, p => p.size())
    }

    /// A new limit: the excess goes to `out`.
    pub(super) fn update_limit(&mut self, nodes: &mut Nodes, limit: usize, out: &mut Vec<u32>) {
        each!(self, p => p.update_limit(nodes, limit, out))
    }

    /// `i`, in no area, enters this one (Pekko's `update` of an entity it
    /// does not have); the excess goes to `out` (possibly `i` itself).
    pub(super) fn add(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        each!(self, p => p.add(nodes, i, out))
    }

    /// `i`, in this area, was accessed (Pekko's `update` of an entity it
    /// has); the excess goes to `out` (none while the area is within its
    /// limit, as it is after every other operation).
    pub(super) fn touch(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        each!(self, p => p.touch(nodes, i, out))
    }

    /// The entity the policy would passivate next.
    pub(super) fn select(&self) -> Option<u32> {
        each!(self, p => p.select())
    }

    /// `i`, in this area, leaves it.
    pub(super) fn remove(&mut self, nodes: &mut Nodes, i: u32) {
        each!(self, p => p.remove(nodes, i))
    }
}
