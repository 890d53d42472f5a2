//! Pekko's `SegmentedLeastRecentlyUsedReplacementPolicy`: least recently
//! used, over a [`SegmentedRecencyList`] whose levels share the limit by
//! their proportions (each higher level its proportion of the limit,
//! rounded down; the lowest the rest, so that they add up to the limit).

use super::nodes::Nodes;
use super::segmented_recency_list::SegmentedRecencyList;

#[derive(Debug)]
pub(super) struct SegmentedLeastRecentlyUsedReplacementPolicy {
    proportions: Vec<f64>,
    recency: SegmentedRecencyList,
}

impl SegmentedLeastRecentlyUsedReplacementPolicy {
    /// `proportions`: of each level, lowest first (at least one).
    pub(super) fn new(limit: usize, proportions: &[f64]) -> Self {
        SegmentedLeastRecentlyUsedReplacementPolicy {
            recency: SegmentedRecencyList::new(segment_limits(proportions, limit)),
            proportions: proportions.to_vec(),
        }
    }

    pub(super) fn size(&self) -> usize {
        self.recency.len()
    }

    pub(super) fn update_limit(&mut self, nodes: &mut Nodes, limit: usize, out: &mut Vec<u32>) {
        self.recency
            .update_limits(segment_limits(&self.proportions, limit));
        self.recency.remove_least_recent_over_limit(nodes, out);
    }

    pub(super) fn add(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        self.recency.insert(nodes, i);
        self.recency.remove_least_recent_over_limit(nodes, out);
    }

    pub(super) fn touch(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        self.recency.promote(nodes, i);
        self.recency.remove_least_recent_over_limit(nodes, out);
    }

    pub(super) fn select(&self) -> Option<u32> {
        self.recency.least_recent()
    }

    pub(super) fn remove(&mut self, nodes: &mut Nodes, i: u32) {
        self.recency.remove(nodes, i);
    }
}

/// The limits of the levels: each higher level's proportion of `limit`,
/// rounded down, and the rest for the lowest.
fn segment_limits(proportions: &[f64], limit: usize) -> Vec<usize> {
    let higher: Vec<usize> = proportions[1..]
        .iter()
        .map(|p| (p * limit as f64) as usize)
        .collect();
    let lowest = limit.saturating_sub(higher.iter().sum());
    std::iter::once(lowest).chain(higher).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_level_takes_the_rest() {
        assert_eq!(segment_limits(&[0.2, 0.8], 10), [2, 8]);
        assert_eq!(segment_limits(&[0.2, 0.8], 5), [1, 4]);
        assert_eq!(segment_limits(&[0.25, 0.75], 7), [2, 5]);
        assert_eq!(segment_limits(&[0.4, 0.3, 0.3], 9), [5, 2, 2]);
        assert_eq!(segment_limits(&[1.0], 9), [9]);
        assert_eq!(segment_limits(&[0.2, 0.8], 0), [0, 0]);
    }
}
