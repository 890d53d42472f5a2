//! The entities one strategy tracks: a slot each in one vector, found by
//! id through one hash map, and linked into the strategy's lists by slot
//! index (Pekko's lists each keep a map of boxed nodes; here a strategy's
//! lists share one arena, so an entity that moves between them, from the
//! admission window to the main area, keeps its slot and map entry).

use crate::extractor::EntityId;
use hashbrown::HashTable;
use std::hash::BuildHasher;
use std::ops::{Index, IndexMut};

/// No slot: the end of a list, or of the free list.
pub(super) const NIL: u32 = u32::MAX;

/// The area of a composite strategy that holds an entity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Area {
    /// The admission window (and every entity of a single-policy strategy).
    Window,
    /// The main area, behind the admission filter.
    Main,
}

/// One tracked entity (48 bytes).
#[derive(Debug)]
pub(super) struct Node {
    /// `None` while the slot is free.
    id: Option<EntityId>,
    /// The hash of its id, so that releasing it finds its index entry
    /// without reading the id (an eviction would miss the cache twice
    /// more: the id's bytes, then a comparison with them).
    hash: u64,
    /// The previous node of the list it is in (less recent).
    pub(super) prev: u32,
    /// The next node of the list it is in (more recent); for a free slot,
    /// the next free slot.
    pub(super) next: u32,
    /// Its level (segmented recency list) or frequency bucket (frequency
    /// list).
    pub(super) slot: u32,
    /// Its accesses (frequency list).
    pub(super) accesses: u64,
    /// The area that holds it.
    pub(super) area: Area,
}

/// The arena of tracked entities and their index by id.
pub(super) struct Nodes {
    slots: Vec<Node>,
    /// The first free slot, linked through `next`.
    free: u32,
    /// The slots of the tracked entities, by the hash of their ids (4
    /// bytes an entry: the id is in the slot).
    index: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
}

impl std::fmt::Debug for Nodes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nodes")
            .field("tracked", &self.index.len())
            .field("slots", &self.slots.len())
            .finish()
    }
}

impl Nodes {
    pub(super) fn new() -> Self {
        Nodes {
            slots: Vec::new(),
            free: NIL,
            index: HashTable::new(),
            hasher: Default::default(),
        }
    }

    /// Entities tracked.
    pub(super) fn len(&self) -> usize {
        self.index.len()
    }

    /// The slot of a tracked entity.
    pub(super) fn find(&self, id: &str) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(self.hasher.hash_one(id), |&j| {
                slots[j as usize].id.as_deref() == Some(id)
            })
            .copied()
    }

    /// Tracks a new entity (not tracked yet) in `area`, linked into no
    /// list; returns its slot.
    pub(super) fn add(&mut self, id: &EntityId, area: Area) -> u32 {
        debug_assert!(self.find(id).is_none(), "{id} is already tracked");
        let hash = self.hasher.hash_one(&**id);
        let node = Node {
            id: Some(id.clone()),
            hash,
            prev: NIL,
            next: NIL,
            slot: 0,
            accesses: 1,
            area,
        };
        let i = if self.free != NIL {
            let i = self.free;
            self.free = self.slots[i as usize].next;
            self.slots[i as usize] = node;
            i
        } else {
            let i = u32::try_from(self.slots.len())
                .ok()
                .filter(|&i| i != NIL)
                .expect("more than 4 billion entities tracked by one shard");
            self.slots.push(node);
            i
        };
        let slots = &self.slots;
        self.index
            .insert_unique(hash, i, |&j| slots[j as usize].hash);
        i
    }

    /// Forgets an entity (already unlinked from its list); returns its id.
    pub(super) fn release(&mut self, i: u32) -> EntityId {
        let node = &mut self.slots[i as usize];
        let id = node.id.take().expect("a released slot is not free");
        node.prev = NIL;
        node.next = self.free;
        self.free = i;
        if let Ok(entry) = self.index.find_entry(node.hash, |&j| j == i) {
            entry.remove();
        }
        id
    }

    /// The id of a tracked entity.
    pub(super) fn id(&self, i: u32) -> &EntityId {
        self.slots[i as usize]
            .id
            .as_ref()
            .expect("the slot of a tracked entity")
    }
}

impl Index<u32> for Nodes {
    type Output = Node;

    fn index(&self, i: u32) -> &Node {
        &self.slots[i as usize]
    }
}

impl IndexMut<u32> for Nodes {
    fn index_mut(&mut self, i: u32) -> &mut Node {
        &mut self.slots[i as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_reused_and_ids_found() {
        let mut nodes = Nodes::new();
        let a = nodes.add(&EntityId::from("a"), Area::Window);
        let b = nodes.add(&EntityId::from("b"), Area::Main);
        assert_eq!((a, b), (0, 1));
        assert_eq!(nodes.find("b"), Some(b));
        assert_eq!(nodes[b].area, Area::Main);
        assert_eq!(&*nodes.release(a), "a");
        assert_eq!(nodes.find("a"), None);
        assert_eq!(nodes.len(), 1);
        let c = nodes.add(&EntityId::from("c"), Area::Window);
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(&**nodes.id(c), "c");
        assert_eq!(nodes.add(&EntityId::from("d"), Area::Window), 2);
        assert_eq!(std::mem::size_of::<Node>(), 48);
    }
}
