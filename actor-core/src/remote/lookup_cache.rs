//! A connection's cache of lookups by string (recipient paths, manifests),
//! read on every message: the entry found last is checked first, so a
//! stream of messages to one recipient, or of one type, costs a string
//! comparison rather than a hash of a long path or manifest.

use std::collections::HashMap;

/// Values by string key, with the last hit remembered. Foldhash, randomly
/// seeded per map (the peer is an authenticated member). It grows with
/// what is inserted: the recipient cache is cleared at a bound
/// (`places`), the dispatchers' is bounded by the registered manifests.
pub(crate) struct LookupCache<V> {
    /// Where each key's entry is in `slots`.
    index: HashMap<Box<str>, usize, foldhash::fast::RandomState>,
    /// Entries by place; a removed one leaves its place empty until
    /// `clear`.
    slots: Vec<Option<(Box<str>, V)>>,
    /// The place of the entry found or added last.
    last: usize,
}

impl<V> Default for LookupCache<V> {
    fn default() -> Self {
        LookupCache {
            index: HashMap::default(),
            slots: Vec::new(),
            last: 0,
        }
    }
}

impl<V> LookupCache<V> {
    /// The place of `key`'s entry.
    fn find(&mut self, key: &str) -> Option<usize> {
        if let Some(Some((k, _))) = self.slots.get(self.last) {
            if **k == *key {
                return Some(self.last);
            }
        }
        let at = *self.index.get(key)?;
        self.last = at;
        Some(at)
    }

    pub(crate) fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        let at = self.find(key)?;
        self.slots[at].as_mut().map(|(_, v)| v)
    }

    /// Adds (or replaces) `key`'s entry; returns its value.
    pub(crate) fn insert(&mut self, key: &str, value: V) -> &mut V {
        let at = match self.find(key) {
            Some(at) => at,
            None => {
                self.index.insert(key.into(), self.slots.len());
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.last = at;
        let (_, v) = self.slots[at].insert((key.into(), value));
        v
    }

    pub(crate) fn remove(&mut self, key: &str) {
        if let Some(at) = self.index.remove(key) {
            self.slots[at] = None;
        }
    }

    /// Places taken, by present and removed entries.
    pub(crate) fn places(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn clear(&mut self) {
        self.index.clear();
        self.slots.clear();
        self.last = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_last_and_before() {
        let mut c = LookupCache::default();
        *c.insert("/user/a", 1) += 10;
        c.insert("/user/b", 2);
        assert_eq!(c.get_mut("/user/a"), Some(&mut 11));
        assert_eq!(c.get_mut("/user/a"), Some(&mut 11));
        assert_eq!(c.get_mut("/user/b"), Some(&mut 2));
        assert_eq!(c.get_mut("/user/c"), None);
        // Replaced in place.
        c.insert("/user/a", 3);
        assert_eq!(c.get_mut("/user/a"), Some(&mut 3));
        assert_eq!(c.places(), 2);
    }

    #[test]
    fn a_removed_entry_is_gone_even_when_it_was_the_last_hit() {
        let mut c = LookupCache::default();
        c.insert("/user/a", 1);
        assert_eq!(c.get_mut("/user/a"), Some(&mut 1));
        c.remove("/user/a");
        assert_eq!(c.get_mut("/user/a"), None);
        assert_eq!(c.places(), 1);
        // Back, in a new place.
        c.insert("/user/a", 2);
        assert_eq!(c.get_mut("/user/a"), Some(&mut 2));
        assert_eq!(c.places(), 2);
        c.clear();
        assert_eq!(c.get_mut("/user/a"), None);
        assert_eq!(c.places(), 0);
    }
}
