//! A recency list (Pekko's `RecencyList`): tracked entities from least to
//! most recently used, doubly linked through their slots, so that every
//! operation is O(1).

use super::nodes::{Nodes, NIL};

/// Entities in order of use, least recent first. The nodes live in a
/// [`Nodes`] arena; the list holds its two ends and its length.
#[derive(Debug)]
pub(super) struct RecencyList {
    first: u32,
    last: u32,
    len: usize,
}

impl RecencyList {
    pub(super) const fn new() -> Self {
        RecencyList {
            first: NIL,
            last: NIL,
            len: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn least_recent(&self) -> Option<u32> {
        (self.first != NIL).then_some(self.first)
    }

    pub(super) fn most_recent(&self) -> Option<u32> {
        (self.last != NIL).then_some(self.last)
    }

    /// The node used just before `i`.
    pub(super) fn less_recent(nodes: &Nodes, i: u32) -> Option<u32> {
        let prev = nodes[i].prev;
        (prev != NIL).then_some(prev)
    }

    /// The node used just after `i`.
    #[cfg(test)]
    pub(super) fn more_recent(nodes: &Nodes, i: u32) -> Option<u32> {
        let next = nodes[i].next;
        (next != NIL).then_some(next)
    }

    /// Adds `i` (in no list) as the most recent.
    pub(super) fn append(&mut self, nodes: &mut Nodes, i: u32) {
        let last = self.last;
        nodes[i].prev = last;
        nodes[i].next = NIL;
        if last == NIL {
            self.first = i;
        } else {
            nodes[last].next = i;
        }
        self.last = i;
        self.len += 1;
    }

    /// Takes `i` out of this list.
    pub(super) fn remove(&mut self, nodes: &mut Nodes, i: u32) {
        let (prev, next) = (nodes[i].prev, nodes[i].next);
        if prev == NIL {
            self.first = next;
        } else {
            nodes[prev].next = next;
        }
        if next == NIL {
            self.last = prev;
        } else {
            nodes[next].prev = prev;
        }
        nodes[i].prev = NIL;
        nodes[i].next = NIL;
        self.len -= 1;
    }

    /// Makes `i` (in this list) the most recent.
    pub(super) fn move_to_back(&mut self, nodes: &mut Nodes, i: u32) {
        if self.last != i {
            self.remove(nodes, i);
            self.append(nodes, i);
        }
    }

    /// Takes the least recent out.
    pub(super) fn remove_least_recent(&mut self, nodes: &mut Nodes) -> Option<u32> {
        let first = self.least_recent()?;
        self.remove(nodes, first);
        Some(first)
    }

    /// Takes the most recent out.
    #[cfg(test)]
    pub(super) fn remove_most_recent(&mut self, nodes: &mut Nodes) -> Option<u32> {
        let last = self.most_recent()?;
        self.remove(nodes, last);
        Some(last)
    }

    /// The nodes from least to most recent.
    #[cfg(test)]
    pub(super) fn iter<'a>(&self, nodes: &'a Nodes) -> impl Iterator<Item = u32> + 'a {
        std::iter::successors(self.least_recent(), move |&i| {
            RecencyList::more_recent(nodes, i)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extractor::EntityId;
    use crate::passivation::nodes::Area;

    /// A recency list of named entries, as Pekko's `RecencyList[String]`.
    struct Names {
        nodes: Nodes,
        list: RecencyList,
    }

    impl Names {
        fn new() -> Self {
            Names {
                nodes: Nodes::new(),
                list: RecencyList::new(),
            }
        }

        fn update(&mut self, names: &[&str]) {
            for name in names {
                match self.nodes.find(name) {
                    Some(i) => self.list.move_to_back(&mut self.nodes, i),
                    None => {
                        let i = self.nodes.add(&EntityId::from(*name), Area::Window);
                        self.list.append(&mut self.nodes, i);
                    }
                }
            }
        }

        fn remove(&mut self, names: &[&str]) {
            for name in names {
                if let Some(i) = self.nodes.find(name) {
                    self.list.remove(&mut self.nodes, i);
                    self.nodes.release(i);
                }
            }
        }

        fn remove_least_recent(&mut self, n: usize) -> Vec<String> {
            let mut out = Vec::new();
            for _ in 0..n {
                let Some(i) = self.list.remove_least_recent(&mut self.nodes) else {
                    break;
                };
                out.push(self.nodes.release(i).to_string());
            }
            out
        }

        fn remove_most_recent(&mut self, n: usize) -> Vec<String> {
            let mut out = Vec::new();
            for _ in 0..n {
                let Some(i) = self.list.remove_most_recent(&mut self.nodes) else {
                    break;
                };
                out.push(self.nodes.release(i).to_string());
            }
            out
        }

        #[track_caller]
        fn check(&self, expected: &[&str]) {
            let order: Vec<&str> = self
                .list
                .iter(&self.nodes)
                .map(|i| &**self.nodes.id(i))
                .collect();
            assert_eq!(order, expected);
            assert_eq!(self.list.len(), expected.len());
            assert_eq!(self.nodes.len(), expected.len());
            let mut backwards = Vec::new();
            let mut at = self.list.most_recent();
            while let Some(i) = at {
                backwards.push(&**self.nodes.id(i));
                at = RecencyList::less_recent(&self.nodes, i);
            }
            backwards.reverse();
            assert_eq!(backwards, expected);
        }
    }

    /// Pekko's `RecencyListSpec` ("track recency of elements"), without
    /// the parts that read a clock.
    #[test]
    fn tracks_recency() {
        let mut r = Names::new();
        r.check(&[]);
        r.update(&["a"]);
        r.check(&["a"]);
        r.update(&["b", "c"]);
        r.check(&["a", "b", "c"]);
        r.update(&["a", "c"]);
        r.check(&["b", "a", "c"]);
        r.update(&["d", "e", "f", "g"]);
        r.check(&["b", "a", "c", "d", "e", "f", "g"]);
        r.update(&["c", "f"]);
        r.check(&["b", "a", "d", "e", "g", "c", "f"]);
        r.remove(&["d", "g", "b", "f"]);
        r.check(&["a", "e", "c"]);
        r.update(&["e", "h", "i", "j"]);
        r.check(&["a", "c", "e", "h", "i", "j"]);
        assert_eq!(r.remove_least_recent(3), ["a", "c", "e"]);
        r.check(&["h", "i", "j"]);
        r.update(&["k", "l", "m", "i"]);
        r.check(&["h", "j", "k", "l", "m", "i"]);
        assert_eq!(r.remove_most_recent(3), ["i", "m", "l"]);
        r.check(&["h", "j", "k"]);
        assert_eq!(r.remove_least_recent(10), ["h", "j", "k"]);
        r.check(&[]);
        r.update(&["a", "b", "c"]);
        r.check(&["a", "b", "c"]);
        assert_eq!(r.remove_most_recent(10), ["c", "b", "a"]);
        r.check(&[]);
        assert!(r.list.is_empty());
    }
}
