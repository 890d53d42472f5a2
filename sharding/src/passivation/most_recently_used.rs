//! Pekko's `MostRecentlyUsedReplacementPolicy`: over the limit, the most
//! recently used entities are passivated, except the one just activated
//! (unless there is no other: under a limit of 0).

use super::nodes::Nodes;
use super::recency_list::RecencyList;

#[derive(Debug)]
pub(super) struct MostRecentlyUsedReplacementPolicy {
    limit: usize,
    recency: RecencyList,
}

impl MostRecentlyUsedReplacementPolicy {
    pub(super) fn new(limit: usize) -> Self {
        MostRecentlyUsedReplacementPolicy {
            limit,
            recency: RecencyList::new(),
        }
    }

    pub(super) fn size(&self) -> usize {
        self.recency.len()
    }

    pub(super) fn update_limit(&mut self, nodes: &mut Nodes, limit: usize, out: &mut Vec<u32>) {
        self.limit = limit;
        self.remove_excess(nodes, false, out);
    }

    pub(super) fn add(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        self.recency.append(nodes, i);
        self.remove_excess(nodes, true, out);
    }

    pub(super) fn touch(&mut self, nodes: &mut Nodes, i: u32, out: &mut Vec<u32>) {
        self.recency.move_to_back(nodes, i);
        self.remove_excess(nodes, true, out);
    }

    pub(super) fn select(&self) -> Option<u32> {
        self.recency.most_recent()
    }

    pub(super) fn remove(&mut self, nodes: &mut Nodes, i: u32) {
        self.recency.remove(nodes, i);
    }

    /// Removes the most recent entities over the limit; with
    /// `skip_newest`, those before the most recent one while there are.
    fn remove_excess(&mut self, nodes: &mut Nodes, skip_newest: bool, out: &mut Vec<u32>) {
        while self.recency.len() > self.limit {
            let Some(newest) = self.recency.most_recent() else {
                break;
            };
            let victim = if skip_newest {
                RecencyList::less_recent(nodes, newest).unwrap_or(newest)
            } else {
                newest
            };
            self.recency.remove(nodes, victim);
            out.push(victim);
        }
    }
}
