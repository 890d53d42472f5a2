//! Pekko's `LeastFrequentlyUsedReplacementPolicy`: over the limit, the
//! least frequently used entities are passivated (the least recently used
//! of them first), optionally with dynamic aging.

use super::frequency_list::FrequencyList;
use super::nodes::Nodes;

#[derive(Debug)]
pub(super) struct LeastFrequentlyUsedReplacementPolicy {
    limit: usize,
    frequency: FrequencyList,
}

impl LeastFrequentlyUsedReplacementPolicy {
    pub(super) fn new(limit: usize, dynamic_aging: bool) -> Self {
        LeastFrequentlyUsedReplacementPolicy {
            limit,
            frequency: FrequencyList::new(dynamic_aging),
        }
    }

    pub(super) fn size(&self) -> usize {
        self.frequency.len()
    }

    pub(super) fn update_limit(&mut self, nodes: &mut Nodes, limit: usize, out: &mut Vec<u32>) {
        self.limit = limit;
        self.remove_excess(nodes, 0, out);
    }

    /// Makes room first, so that dynamic aging has aged the list before
    /// the new entity gets its priority. Under a limit of 0, the new
    /// entity is passivated at once.
    pub(super) fn add(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        self.remove_excess(nodes, 1, out);
        if self.limit == 0 {
            out.push(i);
        } else {
            self.frequency.insert(nodes, i);
        }
    }

    pub(super) fn touch(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        self.frequency.increase(nodes, i);
        self.remove_excess(nodes, 0, out);
    }

    pub(super) fn select(&self) -> Option<u32> {
        self.frequency.least_frequent()
    }

    pub(super) fn remove(&mut self, nodes: &mut Nodes, i: u32) {
        self.frequency.remove(nodes, i);
    }

    /// Removes the least frequent entities over the limit, counting
    /// `adding` more.
    fn remove_excess(&mut self, nodes: &mut Nodes, adding: usize, out: &mut Vec<u32>) {
        while self.frequency.len() + adding > self.limit {
            match self.frequency.remove_least_frequent(nodes) {
                Some(i) => out.push(i),
                None => break,
            }
        }
    }
}
