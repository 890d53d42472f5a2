//! A segmented recency list (Pekko's `SegmentedRecencyList`): recency
//! lists on levels, where an entity enters the lowest ("probationary")
//! level, moves up a level each time it is used again, and is moved back
//! down when a higher ("protected") level is over its limit. Only the
//! lowest level's least recent entities are removed. Every operation is
//! O(1) (amortized over the entities demoted).

use super::nodes::Nodes;
use super::recency_list::RecencyList;

#[derive(Debug)]
pub(super) struct SegmentedRecencyList {
    segments: Vec<RecencyList>,
    limits: Vec<usize>,
    total_limit: usize,
    len: usize,
}

impl SegmentedRecencyList {
    /// A list with one level per limit, lowest first (at least one).
    pub(super) fn new(limits: Vec<usize>) -> Self {
        assert!(!limits.is_empty(), "a segmented recency list has levels");
        SegmentedRecencyList {
            segments: limits.iter().map(|_| RecencyList::new()).collect(),
            total_limit: limits.iter().sum(),
            limits,
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Entities on one level.
    #[cfg(test)]
    pub(super) fn len_of(&self, level: usize) -> usize {
        self.segments[level].len()
    }

    /// The least recent entity of the lowest level.
    pub(super) fn least_recent(&self) -> Option<u32> {
        self.segments[0].least_recent()
    }

    /// Sets the levels' limits (as many as there are levels). Nothing is
    /// removed until [`remove_least_recent_over_limit`](Self::remove_least_recent_over_limit).
    pub(super) fn update_limits(&mut self, limits: Vec<usize>) {
        debug_assert_eq!(limits.len(), self.segments.len());
        self.total_limit = limits.iter().sum();
        self.limits = limits;
    }

    /// Adds `i` (tracked in no list) to the lowest level, as its most
    /// recent.
    pub(super) fn insert(&mut self, nodes: &mut Nodes, i: u32) {
        self.append_to(nodes, 0, i);
        self.len += 1;
    }

    /// `i` (in this list) was used again: up a level, or the most recent
    /// of the highest. The level it entered demotes its excess.
    pub(super) fn promote(&mut self, nodes: &mut Nodes, i: u32) {
        let level = nodes[i].slot as usize;
        let highest = self.segments.len() - 1;
        if level == highest {
            self.segments[level].move_to_back(nodes, i);
        } else {
            self.segments[level].remove(nodes, i);
            self.append_to(nodes, level + 1, i);
            self.adjust(nodes, level + 1);
        }
    }

    /// Takes `i` (in this list) out.
    pub(super) fn remove(&mut self, nodes: &mut Nodes, i: u32) {
        self.segments[nodes[i].slot as usize].remove(nodes, i);
        self.len -= 1;
    }

    /// When over the total limit: first moves each protected level's
    /// excess down a level (highest first), then takes the lowest level's
    /// least recent entities out, into `out`, until at the limit.
    pub(super) fn remove_least_recent_over_limit(&mut self, nodes: &mut Nodes, out: &mut Vec<u32>) {
        if self.len <= self.total_limit {
            return;
        }
        for level in (1..self.segments.len()).rev() {
            self.adjust(nodes, level);
        }
        while self.len > self.total_limit {
            let Some(i) = self.segments[0].remove_least_recent(nodes) else {
                break;
            };
            self.len -= 1;
            out.push(i);
        }
    }

    /// The entities of one level, least recent first.
    #[cfg(test)]
    pub(super) fn iter_level<'a>(
        &self,
        nodes: &'a Nodes,
        level: usize,
    ) -> impl Iterator<Item = u32> + 'a {
        self.segments[level].iter(nodes)
    }

    /// Moves the least recent entities of a protected level over its limit
    /// down one level.
    fn adjust(&mut self, nodes: &mut Nodes, level: usize) {
        let excess = self.segments[level]
            .len()
            .saturating_sub(self.limits[level]);
        for _ in 0..excess {
            let Some(i) = self.segments[level].remove_least_recent(nodes) else {
                break;
            };
            self.append_to(nodes, level - 1, i);
        }
    }

    fn append_to(&mut self, nodes: &mut Nodes, level: usize, i: u32) {
        nodes[i].slot = level as u32;
        self.segments[level].append(nodes, i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extractor::EntityId;
    use crate::passivation::nodes::Area;

    /// A segmented recency list of named entries, as Pekko's
    /// `SegmentedRecencyList[String]`.
    struct Names {
        nodes: Nodes,
        list: SegmentedRecencyList,
    }

    impl Names {
        fn new(limits: &[usize]) -> Self {
            Names {
                nodes: Nodes::new(),
                list: SegmentedRecencyList::new(limits.to_vec()),
            }
        }

        fn update(&mut self, names: &[&str]) {
            for name in names {
                match self.nodes.find(name) {
                    Some(i) => self.list.promote(&mut self.nodes, i),
                    None => {
                        let i = self.nodes.add(&EntityId::from(*name), Area::Main);
                        self.list.insert(&mut self.nodes, i);
                    }
                }
            }
        }

        fn remove_least_recent_over_limit(&mut self) -> Vec<String> {
            let mut out = Vec::new();
            self.list
                .remove_least_recent_over_limit(&mut self.nodes, &mut out);
            out.into_iter()
                .map(|i| self.nodes.release(i).to_string())
                .collect()
        }

        #[track_caller]
        fn check(&self, expected: &[&[&str]]) {
            let total: usize = expected.iter().map(|s| s.len()).sum();
            assert_eq!(self.list.len(), total);
            assert_eq!(self.nodes.len(), total);
            for (level, segment) in expected.iter().enumerate() {
                let order: Vec<&str> = self
                    .list
                    .iter_level(&self.nodes, level)
                    .map(|i| &**self.nodes.id(i))
                    .collect();
                assert_eq!(&order, segment, "level {level}");
                assert_eq!(self.list.len_of(level), segment.len());
            }
        }
    }

    /// Pekko's `SegmentedRecencyListSpec`: "track recency of elements
    /// across 2 segments".
    #[test]
    fn two_segments() {
        let mut r = Names::new(&[2, 3]);
        r.check(&[&[], &[]]);
        r.update(&["a", "b", "c", "d", "e", "f"]);
        r.check(&[&["a", "b", "c", "d", "e", "f"], &[]]);
        assert_eq!(r.remove_least_recent_over_limit(), ["a"]);
        r.check(&[&["b", "c", "d", "e", "f"], &[]]);
        r.update(&["a", "b", "c", "d"]);
        r.check(&[&["e", "f", "a"], &["b", "c", "d"]]);
        assert_eq!(r.remove_least_recent_over_limit(), ["e"]);
        r.check(&[&["f", "a"], &["b", "c", "d"]]);
        r.update(&["a"]);
        r.check(&[&["f", "b"], &["c", "d", "a"]]);
        assert!(r.remove_least_recent_over_limit().is_empty());
        r.check(&[&["f", "b"], &["c", "d", "a"]]);
        r.update(&["a", "b", "c", "d", "e", "f", "g"]);
        r.check(&[&["a", "e", "b", "g"], &["c", "d", "f"]]);
        assert_eq!(r.remove_least_recent_over_limit(), ["a", "e"]);
        r.check(&[&["b", "g"], &["c", "d", "f"]]);
    }

    /// ... "across 4 segments".
    #[test]
    fn four_segments() {
        let mut r = Names::new(&[4, 3, 2, 1]);
        r.update(&["a", "b", "c", "d", "e", "f"]);
        r.check(&[&["a", "b", "c", "d", "e", "f"], &[], &[], &[]]);
        assert!(r.remove_least_recent_over_limit().is_empty());
        r.update(&["g", "h", "i", "j", "k", "l"]);
        r.check(&[
            &["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"],
            &[],
            &[],
            &[],
        ]);
        assert_eq!(r.remove_least_recent_over_limit(), ["a", "b"]);
        r.check(&[
            &["c", "d", "e", "f", "g", "h", "i", "j", "k", "l"],
            &[],
            &[],
            &[],
        ]);
        r.update(&["b", "d", "f", "h", "j", "l"]);
        r.check(&[
            &["c", "e", "g", "i", "k", "b", "d", "f"],
            &["h", "j", "l"],
            &[],
            &[],
        ]);
        r.update(&["h", "i", "j", "k", "l", "m"]);
        r.check(&[
            &["c", "e", "g", "b", "d", "f", "m"],
            &["i", "k", "h"],
            &["j", "l"],
            &[],
        ]);
        assert_eq!(r.remove_least_recent_over_limit(), ["c", "e"]);
        r.check(&[
            &["g", "b", "d", "f", "m"],
            &["i", "k", "h"],
            &["j", "l"],
            &[],
        ]);
        r.update(&["j", "k", "l", "m", "n", "o", "p"]);
        r.check(&[
            &["g", "b", "d", "f", "n", "o", "p"],
            &["i", "h", "m"],
            &["k", "j"],
            &["l"],
        ]);
        assert_eq!(r.remove_least_recent_over_limit(), ["g", "b", "d"]);
        r.check(&[&["f", "n", "o", "p"], &["i", "h", "m"], &["k", "j"], &["l"]]);
    }

    /// ... "allow protected limits to be updated".
    #[test]
    fn protected_limits_can_be_updated() {
        let mut r = Names::new(&[2, 8]);
        let all = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"];
        r.update(&all);
        r.check(&[&all, &[]]);
        r.update(&all);
        r.check(&[
            &["a", "b", "c", "d"],
            &["e", "f", "g", "h", "i", "j", "k", "l"],
        ]);
        assert_eq!(r.remove_least_recent_over_limit(), ["a", "b"]);
        r.check(&[&["c", "d"], &["e", "f", "g", "h", "i", "j", "k", "l"]]);
        r.list.update_limits(vec![1, 4]);
        assert_eq!(
            r.remove_least_recent_over_limit(),
            ["c", "d", "e", "f", "g"]
        );
        r.check(&[&["h"], &["i", "j", "k", "l"]]);
    }
}
