//! Pekko's `LeastRecentlyUsedReplacementPolicy`: over the limit, the least
//! recently used entities are passivated.

use super::nodes::Nodes;
use super::recency_list::RecencyList;

#[derive(Debug)]
pub(super) struct LeastRecentlyUsedReplacementPolicy {
    limit: usize,
    recency: RecencyList,
}

impl LeastRecentlyUsedReplacementPolicy {
    pub(super) fn new(limit: usize) -> Self {
        LeastRecentlyUsedReplacementPolicy {
            limit,
            recency: RecencyList::new(),
        }
    }

    pub(super) fn size(&self) -> usize {
        self.recency.len()
    }

    pub(super) fn update_limit(&mut self, nodes: &mut Nodes, limit: usize, out: &mut Vec<u32>) {
        self.limit = limit;
        self.remove_excess(nodes, out);
    }

    pub(super) fn add(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        self.recency.append(nodes, i);
        self.remove_excess(nodes, out);
    }

    pub(super) fn touch(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        self.recency.move_to_back(nodes, i);
        self.remove_excess(nodes, out);
    }

    pub(super) fn select(&self) -> Option<u32> {
        self.recency.least_recent()
    }

    pub(super) fn remove(&mut self, nodes: &mut Nodes, i: u32) {
        self.recency.remove(nodes, i);
    }

    fn remove_excess(&mut self, nodes: &mut Nodes, out: &mut Vec<u32>) {
        while self.recency.len() > self.limit {
            match self.recency.remove_least_recent(nodes) {
                Some(i) => out.push(i),
                None => break,
            }
        }
    }
}
