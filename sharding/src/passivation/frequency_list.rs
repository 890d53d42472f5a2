//! A frequency list (Pekko's `FrequencyList`): tracked entities grouped
//! in buckets of equal priority (their accesses), buckets linked from
//! least to most frequent, entities of a bucket in order of use. Every
//! operation is O(1), except that with dynamic aging an access may have
//! to skip over the buckets between an entity's old and new priority.
//!
//! With dynamic aging (Arlitt et al., "Evaluating content management
//! techniques for Web proxy caches"), the list has an age: the priority of
//! the last entity removed as the least frequent. A new entity's priority
//! is 1 plus the age, and an access sets it to its accesses plus the age,
//! so that entities popular long ago are eventually passivated.

use super::nodes::{Nodes, NIL};
use super::recency_list::RecencyList;

/// The entities of one priority.
#[derive(Debug)]
struct Bucket {
    priority: u64,
    nodes: RecencyList,
    /// The bucket of the next lower priority.
    less: u32,
    /// The bucket of the next higher priority; for a free bucket, the next
    /// free one.
    more: u32,
}

#[derive(Debug)]
pub(super) struct FrequencyList {
    buckets: Vec<Bucket>,
    free: u32,
    least: u32,
    most: u32,
    len: usize,
    dynamic_aging: bool,
    age: u64,
}

impl FrequencyList {
    pub(super) fn new(dynamic_aging: bool) -> Self {
        FrequencyList {
            buckets: Vec::new(),
            free: NIL,
            least: NIL,
            most: NIL,
            len: 0,
            dynamic_aging,
            age: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The least recently used of the least frequent entities.
    pub(super) fn least_frequent(&self) -> Option<u32> {
        if self.least == NIL {
            None
        } else {
            self.buckets[self.least as usize].nodes.least_recent()
        }
    }

    /// Adds `i` (in no list), with one access.
    pub(super) fn insert(&mut self, nodes: &mut Nodes, i: u32) {
        nodes[i].accesses = 1;
        let priority = 1 + self.age;
        let bucket = match self.least {
            least if least != NIL && self.buckets[least as usize].priority < priority => {
                self.find_or_insert_after(least, priority)
            }
            least if least != NIL && self.buckets[least as usize].priority == priority => least,
            _ => self.insert_bucket(NIL, priority),
        };
        self.add_to(nodes, bucket, i);
        self.len += 1;
    }

    /// `i` (in this list) was accessed again.
    pub(super) fn increase(&mut self, nodes: &mut Nodes, i: u32) {
        let accesses = nodes[i].accesses.saturating_add(1);
        nodes[i].accesses = accesses;
        let priority = if self.dynamic_aging {
            accesses.saturating_add(self.age)
        } else {
            accesses
        };
        let current = nodes[i].slot;
        if priority <= self.buckets[current as usize].priority {
            // Saturated: the most recent of its bucket.
            self.buckets[current as usize].nodes.move_to_back(nodes, i);
            return;
        }
        let bucket = self.find_or_insert_after(current, priority);
        self.remove_from(nodes, i);
        self.add_to(nodes, bucket, i);
    }

    /// Takes `i` (in this list) out.
    pub(super) fn remove(&mut self, nodes: &mut Nodes, i: u32) {
        self.remove_from(nodes, i);
        self.len -= 1;
    }

    /// Takes the least frequent entity out (with dynamic aging, its
    /// priority becomes the age).
    pub(super) fn remove_least_frequent(&mut self, nodes: &mut Nodes) -> Option<u32> {
        let i = self.least_frequent()?;
        if self.dynamic_aging {
            self.age = self.buckets[nodes[i].slot as usize].priority;
        }
        self.remove(nodes, i);
        Some(i)
    }

    /// The entities from least to most frequent (the least recent first
    /// within a priority).
    #[cfg(test)]
    pub(super) fn iter<'a>(&'a self, nodes: &'a Nodes) -> impl Iterator<Item = u32> + 'a {
        std::iter::successors((self.least != NIL).then_some(self.least), move |&b| {
            let more = self.buckets[b as usize].more;
            (more != NIL).then_some(more)
        })
        .flat_map(move |b| self.buckets[b as usize].nodes.iter(nodes))
    }

    /// The bucket of `priority`, found or inserted after `start` (a bucket
    /// of a lower priority), skipping the buckets of lower priorities.
    fn find_or_insert_after(&mut self, start: u32, priority: u64) -> u32 {
        let mut at = start;
        loop {
            let more = self.buckets[at as usize].more;
            if more == NIL {
                break;
            }
            let p = self.buckets[more as usize].priority;
            if p == priority {
                return more;
            }
            if p > priority {
                break;
            }
            at = more;
        }
        self.insert_bucket(at, priority)
    }

    /// A new, empty bucket after `less` (first when `NIL`).
    fn insert_bucket(&mut self, less: u32, priority: u64) -> u32 {
        let more = if less == NIL {
            self.least
        } else {
            self.buckets[less as usize].more
        };
        let bucket = Bucket {
            priority,
            nodes: RecencyList::new(),
            less,
            more,
        };
        let b = if self.free != NIL {
            let b = self.free;
            self.free = self.buckets[b as usize].more;
            self.buckets[b as usize] = bucket;
            b
        } else {
            self.buckets.push(bucket);
            (self.buckets.len() - 1) as u32
        };
        if less == NIL {
            self.least = b;
        } else {
            self.buckets[less as usize].more = b;
        }
        if more == NIL {
            self.most = b;
        } else {
            self.buckets[more as usize].less = b;
        }
        b
    }

    fn add_to(&mut self, nodes: &mut Nodes, bucket: u32, i: u32) {
        nodes[i].slot = bucket;
        self.buckets[bucket as usize].nodes.append(nodes, i);
    }

    /// Takes `i` out of its bucket, and an emptied bucket out of the list.
    fn remove_from(&mut self, nodes: &mut Nodes, i: u32) {
        let b = nodes[i].slot;
        let bucket = &mut self.buckets[b as usize];
        bucket.nodes.remove(nodes, i);
        if !bucket.nodes.is_empty() {
            return;
        }
        let (less, more) = (bucket.less, bucket.more);
        if less == NIL {
            self.least = more;
        } else {
            self.buckets[less as usize].more = more;
        }
        if more == NIL {
            self.most = less;
        } else {
            self.buckets[more as usize].less = less;
        }
        let bucket = &mut self.buckets[b as usize];
        bucket.less = NIL;
        bucket.more = self.free;
        self.free = b;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::extractor::EntityId;
    use crate::passivation::nodes::Area;

    /// A frequency list of named entries, as Pekko's
    /// `FrequencyList[String]`.
    struct Names {
        nodes: Nodes,
        list: FrequencyList,
    }

    impl Names {
        fn new(dynamic_aging: bool) -> Self {
            Names {
                nodes: Nodes::new(),
                list: FrequencyList::new(dynamic_aging),
            }
        }

        fn update(&mut self, names: &[&str]) -> &mut Self {
            for name in names {
                match self.nodes.find(name) {
                    Some(i) => self.list.increase(&mut self.nodes, i),
                    None => {
                        let i = self.nodes.add(&EntityId::from(*name), Area::Main);
                        self.list.insert(&mut self.nodes, i);
                    }
                }
            }
            self
        }

        fn remove(&mut self, names: &[&str]) {
            for name in names {
                if let Some(i) = self.nodes.find(name) {
                    self.list.remove(&mut self.nodes, i);
                    self.nodes.release(i);
                }
            }
        }

        fn remove_least_frequent(&mut self, n: usize) -> Vec<String> {
            let mut out = Vec::new();
            for _ in 0..n {
                let Some(i) = self.list.remove_least_frequent(&mut self.nodes) else {
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
            // The most frequent end is linked too.
            let most = self.list.most;
            let last = (most != NIL)
                .then(|| self.list.buckets[most as usize].nodes.most_recent())
                .flatten();
            assert_eq!(last.map(|i| &**self.nodes.id(i)), expected.last().copied());
        }
    }

    /// Pekko's `FrequencyListSpec`: "track frequency of elements" (the
    /// removals this crate uses).
    #[test]
    fn tracks_frequency() {
        let mut f = Names::new(false);
        f.check(&[]);
        f.update(&["a"]);
        f.check(&["a"]);
        f.update(&["b", "c"]);
        f.check(&["a", "b", "c"]);
        f.update(&["a", "c"]);
        f.check(&["b", "a", "c"]);
        f.update(&["d", "e", "f", "g"]);
        f.check(&["b", "d", "e", "f", "g", "a", "c"]);
        f.update(&["c", "f"]);
        f.check(&["b", "d", "e", "g", "a", "f", "c"]);
        f.remove(&["d", "g", "b", "f"]);
        f.check(&["e", "a", "c"]);
        f.update(&["e", "h", "i"]);
        f.check(&["h", "i", "a", "e", "c"]);
        assert_eq!(f.remove_least_frequent(3), ["h", "i", "a"]);
        f.check(&["e", "c"]);
        f.update(&["j", "k", "l", "m"]);
        f.check(&["j", "k", "l", "m", "e", "c"]);
        f.update(&["n", "o", "p", "e", "o", "l"]);
        f.check(&["j", "k", "m", "n", "p", "o", "l", "c", "e"]);
    }

    /// ... "support dynamic aging with least frequently used eviction".
    #[test]
    fn dynamic_aging() {
        let mut regular = Names::new(false);
        let mut aging = Names::new(true);
        for _ in 0..10 {
            regular.update(&["a", "b", "c"]);
            aging.update(&["a", "b", "c"]);
        }
        regular.check(&["a", "b", "c"]);
        aging.check(&["a", "b", "c"]);
        // age = 0
        regular.update(&["x", "y", "z"]);
        regular.check(&["x", "y", "z", "a", "b", "c"]);
        aging.update(&["x", "y", "z"]);
        aging.check(&["x", "y", "z", "a", "b", "c"]);
        assert_eq!(regular.remove_least_frequent(1), ["x"]);
        regular.check(&["y", "z", "a", "b", "c"]);
        assert_eq!(aging.remove_least_frequent(1), ["x"]);
        aging.check(&["y", "z", "a", "b", "c"]);
        // age = 1
        regular.update(&["x", "y", "z", "z"]);
        regular.check(&["x", "y", "z", "a", "b", "c"]);
        aging.update(&["x", "y", "z", "z"]);
        aging.check(&["x", "y", "z", "a", "b", "c"]);
        assert_eq!(regular.remove_least_frequent(2), ["x", "y"]);
        regular.check(&["z", "a", "b", "c"]);
        assert_eq!(aging.remove_least_frequent(2), ["x", "y"]);
        aging.check(&["z", "a", "b", "c"]);
        // age = 3
        regular.update(&["x", "y", "z"]);
        regular.check(&["x", "y", "z", "a", "b", "c"]);
        aging.update(&["x", "y", "z"]);
        aging.check(&["x", "y", "z", "a", "b", "c"]);
        assert_eq!(regular.remove_least_frequent(3), ["x", "y", "z"]);
        regular.check(&["a", "b", "c"]);
        assert_eq!(aging.remove_least_frequent(3), ["x", "y", "z"]);
        aging.check(&["a", "b", "c"]);
        // age = 7
        regular.update(&["x", "y", "y", "z", "z", "z"]);
        regular.check(&["x", "y", "z", "a", "b", "c"]);
        aging.update(&["x", "y", "y", "z", "z", "z"]);
        aging.check(&["x", "y", "a", "b", "c", "z"]);
        assert_eq!(regular.remove_least_frequent(2), ["x", "y"]);
        regular.check(&["z", "a", "b", "c"]);
        assert_eq!(aging.remove_least_frequent(2), ["x", "y"]);
        aging.check(&["a", "b", "c", "z"]);
        // age = 9
        regular.update(&["x", "y", "z"]);
        regular.check(&["x", "y", "z", "a", "b", "c"]);
        aging.update(&["x", "y", "z"]);
        aging.check(&["a", "b", "c", "x", "y", "z"]);
        assert_eq!(regular.remove_least_frequent(3), ["x", "y", "z"]);
        regular.check(&["a", "b", "c"]);
        assert_eq!(aging.remove_least_frequent(3), ["a", "b", "c"]);
        aging.check(&["x", "y", "z"]);
        assert_eq!(aging.list.age, 10);
    }
}
