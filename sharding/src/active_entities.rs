//! A shard's active entities: the table that the shard publishes and that
//! the hot path reads to reach an entity without passing through an actor
//! (the only record of an active entity: the shard keeps its other states
//! apart), and the record of those accesses that passivation needs.
//!
//! A shard route owns one table for its whole life. The table is open
//! while the shard is hosted here: a direct sender takes the table's read
//! lock alone (one lock per message), and the region closes the table
//! under its write lock when the shard's home changes, so every direct
//! send that found it open has queued its message by then.
//!
//! Passivation decides on accesses the shard never sees (a direct send
//! does not go through it), so the senders leave a trace:
//! - for idle passivation, each entity's stamp of the last idle-check
//!   epoch in which it got a message (written only once per epoch, so
//!   that senders of a busy entity do not fight over its cache line);
//! - for an active-entity limit, the accessed ids, in a bounded buffer
//!   that the shard replays into its replacement policy (as Caffeine
//!   does with its read buffers). The buffer is lossy: a sender that
//!   finds it locked or full leaves no trace, which may make the policy
//!   choose a slightly worse victim but never loses a message.

use crate::entity::Entity;
use crate::extractor::EntityId;
use crate::shard::{DrainTouches, EntityMap, Shard};
use std::borrow::Borrow;
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use troupe_core::ActorRef;

/// Accesses kept for the shard's replacement policy before it replays
/// them; beyond, they are dropped.
const TOUCH_BUFFER: usize = 4096;

/// The shard is asked to replay the buffer once it holds this many.
const TOUCH_DRAIN_AT: usize = TOUCH_BUFFER / 4;

/// One active entity.
pub(crate) struct ActiveEntity<E: Entity> {
    pub(crate) actor: ActorRef<E>,
    /// The idle-check epoch of its last message.
    touched: AtomicU32,
}

impl<E: Entity> ActiveEntity<E> {
    /// Its actor's name, which is its id in `Table::named`.
    fn name(&self) -> &str {
        self.actor.given_name().map_or("", |n| n)
    }
}

// Hashed and compared by the bytes of the actor's name, as `Borrow<[u8]>`
// requires (a reader looks ids up as they came from the network).
impl<E: Entity> Hash for ActiveEntity<E> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().as_bytes().hash(state)
    }
}

impl<E: Entity> PartialEq for ActiveEntity<E> {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl<E: Entity> Eq for ActiveEntity<E> {}

impl<E: Entity> Borrow<[u8]> for ActiveEntity<E> {
    fn borrow(&self) -> &[u8] {
        self.name().as_bytes()
    }
}

/// The published entities. Nearly every entity's actor is named by its id
/// and is found by that name, so that an entry is the actor and its stamp
/// (24 bytes, where a separate key would add 16: a shard can hold a
/// million entities).
struct Table<E: Entity> {
    /// Direct senders may use the table: the shard is hosted here.
    open: bool,
    /// The shard actor that lists its entities here (the latest to
    /// attach); it replays the recorded accesses.
    shard: Option<ActorRef<Shard<E>>>,
    /// Entities whose actor's given name is their id.
    named: HashSet<ActiveEntity<E>, foldhash::fast::RandomState>,
    /// The others: an id that is no actor name (the actor's name is
    /// generated).
    aliased: EntityMap<ActiveEntity<E>>,
}

impl<E: Entity> Default for Table<E> {
    fn default() -> Self {
        Table {
            open: false,
            shard: None,
            named: HashSet::default(),
            aliased: EntityMap::default(),
        }
    }
}

/// An entity id as a lookup gets it: a string (a local sender's), or the
/// bytes that came from the network, which are text only if valid UTF-8
/// (every key is: bytes that are not cannot be found).
pub(crate) trait EntityKey {
    fn bytes(&self) -> &[u8];
    fn text(&self) -> Option<&str>;
}

impl EntityKey for str {
    fn bytes(&self) -> &[u8] {
        self.as_bytes()
    }
    fn text(&self) -> Option<&str> {
        Some(self)
    }
}

impl EntityKey for [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn text(&self) -> Option<&str> {
        std::str::from_utf8(self).ok()
    }
}

impl<E: Entity> Table<E> {
    fn get(&self, id: &str) -> Option<&ActiveEntity<E>> {
        self.get_key_value(id).map(|(_, e)| e)
    }

    #[inline]
    fn get_key_value<K: EntityKey + ?Sized>(
        &self,
        id: &K,
    ) -> Option<(&EntityId, &ActiveEntity<E>)> {
        match self.named.get(id.bytes()) {
            Some(e) => e.actor.given_name().map(|n| (n, e)),
            None if self.aliased.is_empty() => None,
            None => id.text().and_then(|id| self.aliased.get_key_value(id)),
        }
    }

    fn insert(&mut self, id: EntityId, entity: ActiveEntity<E>) {
        if entity.actor.given_name().is_some_and(|n| **n == *id) {
            if !self.aliased.is_empty() {
                self.aliased.remove(&*id);
            }
            self.named.replace(entity);
        } else {
            self.named.remove(id.as_bytes());
            self.aliased.insert(id, entity);
        }
    }

    fn remove(&mut self, id: &str) -> Option<ActiveEntity<E>> {
        self.named
            .take(id.as_bytes())
            .or_else(|| self.aliased.remove(id))
    }

    fn len(&self) -> usize {
        self.named.len() + self.aliased.len()
    }

    fn iter(&self) -> impl Iterator<Item = (&EntityId, &ActiveEntity<E>)> {
        let named = self
            .named
            .iter()
            .filter_map(|e| e.actor.given_name().map(|n| (n, e)));
        named.chain(self.aliased.iter())
    }

    fn into_entries(self) -> impl Iterator<Item = (EntityId, ActorRef<E>)> {
        let named = self
            .named
            .into_iter()
            .filter_map(|e| e.actor.given_name().cloned().map(|n| (n, e.actor)));
        named.chain(self.aliased.into_iter().map(|(id, e)| (id, e.actor)))
    }
}

/// Why a direct send did not happen.
pub(crate) enum Missed<T> {
    /// The table is closed: the shard is not hosted here (now).
    Closed(T),
    /// The entity is not active, or `send` handed the item back.
    Inactive(T),
}

/// The active entities of one shard, published while it is hosted here.
pub(crate) struct ActiveEntities<E: Entity> {
    table: RwLock<Table<E>>,
    /// The current idle-check epoch (advanced by the shard).
    epoch: AtomicU32,
    /// Accessed ids, when a replacement policy wants them.
    touches: Option<Mutex<Vec<EntityId>>>,
    drain_requested: AtomicBool,
}

impl<E: Entity> ActiveEntities<E> {
    /// An empty, closed table; `record_touches` when the shard has a
    /// replacement policy that orders entities by their accesses.
    pub(crate) fn new(record_touches: bool) -> Self {
        ActiveEntities {
            table: RwLock::new(Table::default()),
            epoch: AtomicU32::new(0),
            touches: record_touches.then(|| Mutex::new(Vec::new())),
            drain_requested: AtomicBool::new(false),
        }
    }

    /// Makes `shard` (a new shard actor, before it lists any entity) the
    /// table's owner. Entities that an earlier shard actor listed and did
    /// not drain are forgotten (they are its children and stop with it).
    pub(crate) fn attach(&self, shard: ActorRef<Shard<E>>) {
        let mut table = self.write();
        if table.shard.as_ref() != Some(&shard) {
            table.named.clear();
            table.aliased.clear();
            table.shard = Some(shard);
        }
        self.drain_requested.store(false, Ordering::Relaxed);
    }

    /// Opens the table to direct senders (the shard is hosted here).
    pub(crate) fn open(&self) {
        self.write().open = true;
    }

    /// Closes the table to direct senders (the shard's home is changing).
    /// Every direct send that found it open has queued its message when
    /// this returns. The shard keeps using the table until it stops.
    pub(crate) fn close(&self) {
        self.write().open = false;
    }

    /// Runs `send` with the entity's actor and `item` if the table is open
    /// and the entity active, and records the access when it succeeds.
    #[inline]
    pub(crate) fn send<T, K: EntityKey + ?Sized>(
        &self,
        id: &K,
        item: T,
        send: impl FnOnce(&ActorRef<E>, T) -> Result<(), T>,
    ) -> Result<(), Missed<T>> {
        let table = self.read();
        if !table.open {
            return Err(Missed::Closed(item));
        }
        let Some((id, entity)) = table.get_key_value(id) else {
            return Err(Missed::Inactive(item));
        };
        send(&entity.actor, item).map_err(Missed::Inactive)?;
        self.touch(&table, id, entity);
        Ok(())
    }

    /// Like [`send`](Self::send), for the shard's own region, which knows
    /// the table is open: `Err(item)` when the entity is not active.
    pub(crate) fn send_open<T>(
        &self,
        id: &str,
        item: T,
        send: impl FnOnce(&ActorRef<E>, T) -> Result<(), T>,
    ) -> Result<(), T> {
        self.send(id, item, send).map_err(|m| match m {
            Missed::Closed(item) | Missed::Inactive(item) => item,
        })
    }

    #[inline]
    fn touch(&self, table: &Table<E>, id: &EntityId, entity: &ActiveEntity<E>) {
        let epoch = self.epoch.load(Ordering::Relaxed);
        if entity.touched.load(Ordering::Relaxed) != epoch {
            entity.touched.store(epoch, Ordering::Relaxed);
        }
        let Some(touches) = &self.touches else {
            return;
        };
        let Ok(mut buffer) = touches.try_lock() else {
            return;
        };
        if buffer.len() < TOUCH_BUFFER {
            buffer.push(id.clone());
        }
        let due = buffer.len() >= TOUCH_DRAIN_AT;
        drop(buffer);
        if due && !self.drain_requested.swap(true, Ordering::AcqRel) {
            if let Some(shard) = &table.shard {
                let _ = shard.tell(DrainTouches);
            }
        }
    }

    /// The entity's running incarnation, if it is active. Records an access
    /// (for idle passivation): the shard asks in order to deliver to it.
    pub(crate) fn get_for_delivery(&self, id: &str) -> Option<ActorRef<E>> {
        let table = self.read();
        let entity = table.get(id)?;
        let epoch = self.epoch.load(Ordering::Relaxed);
        entity.touched.store(epoch, Ordering::Relaxed);
        Some(entity.actor.clone())
    }

    /// The entity's id as the table keeps it and its running incarnation,
    /// if it is active.
    pub(crate) fn entry(&self, id: &str) -> Option<(EntityId, ActorRef<E>)> {
        self.read()
            .get_key_value(id)
            .map(|(id, e)| (id.clone(), e.actor.clone()))
    }

    /// The active entity whose actor is named `name` (an actor path's
    /// last element: the id, or a generated name).
    pub(crate) fn by_actor_name(&self, name: &str) -> Option<ActorRef<E>> {
        let table = self.read();
        if let Some(e) = table.named.get(name.as_bytes()) {
            return Some(e.actor.clone());
        }
        table
            .aliased
            .values()
            .find(|e| e.actor.name() == name)
            .map(|e| e.actor.clone())
    }

    /// Whether the entity is active.
    pub(crate) fn contains(&self, id: &str) -> bool {
        self.read().get(id).is_some()
    }

    /// The recorded accesses of entities that are still active, oldest
    /// first, and a fresh buffer.
    pub(crate) fn take_touches(&self) -> Vec<EntityId> {
        self.drain_requested.store(false, Ordering::Release);
        let Some(t) = &self.touches else {
            return Vec::new();
        };
        let mut touches = std::mem::take(&mut *t.lock().unwrap_or_else(|e| e.into_inner()));
        let table = self.read();
        touches.retain(|id| table.get(id).is_some());
        touches
    }

    /// Starts the next idle-check epoch; returns it.
    pub(crate) fn advance_epoch(&self) -> u32 {
        self.epoch.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
    }

    /// Entities whose last message came `epochs` or more epochs before
    /// `now`.
    pub(crate) fn idle_since(&self, now: u32, epochs: u32) -> Vec<EntityId> {
        self.read()
            .iter()
            .filter(|(_, e)| now.wrapping_sub(e.touched.load(Ordering::Relaxed)) >= epochs)
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Publishes a new incarnation (after its first message is queued: a
    /// direct sender comes after it).
    pub(crate) fn insert(&self, id: EntityId, actor: ActorRef<E>) {
        let touched = AtomicU32::new(self.epoch.load(Ordering::Relaxed));
        self.write().insert(id, ActiveEntity { actor, touched });
    }

    /// Unpublishes an entity; returns its incarnation if it was active.
    /// Every direct send that found it has queued its message when this
    /// returns, so whatever the shard sends the entity next comes after
    /// those.
    pub(crate) fn remove(&self, id: &str) -> Option<ActorRef<E>> {
        self.write().remove(id).map(|e| e.actor)
    }

    /// Unpublishes every entity that `by` listed (a hand-off, or `by`
    /// stopping), with the same guarantee, and closes the table; returns
    /// them. Nothing when a newer shard actor owns the table (`by`
    /// stopped after its hand-off, and the shard is back here).
    pub(crate) fn drain(&self, by: &ActorRef<Shard<E>>) -> Vec<(EntityId, ActorRef<E>)> {
        let mut table = self.write();
        if table.shard.as_ref() != Some(by) {
            return Vec::new();
        }
        table.open = false;
        let taken = Table {
            open: false,
            shard: None,
            named: std::mem::take(&mut table.named),
            aliased: std::mem::take(&mut table.aliased),
        };
        drop(table);
        taken.into_entries().collect()
    }

    /// How many entity ids are published.
    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    /// The published entity ids.
    pub(crate) fn ids(&self) -> Vec<EntityId> {
        self.read().iter().map(|(id, _)| id.clone()).collect()
    }

    fn read(&self) -> RwLockReadGuard<'_, Table<E>> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table<E>> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }
}
