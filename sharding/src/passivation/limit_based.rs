//! A strategy of one replacement policy over all of a shard's active
//! entities (Pekko's `LeastRecentlyUsedEntityPassivationStrategy`,
//! `SegmentedLeastRecentlyUsedEntityPassivationStrategy`,
//! `MostRecentlyUsedEntityPassivationStrategy` and
//! `LeastFrequentlyUsedEntityPassivationStrategy`, on their shared base
//! `LimitBasedEntityPassivationStrategy`).

use super::active_entities::ActiveEntities;
use super::nodes::{Area, Nodes};
use super::EntityLimit;
use crate::extractor::EntityId;
use crate::settings::ReplacementPolicy;

#[derive(Debug)]
pub(super) struct LimitBasedEntityPassivationStrategy {
    nodes: Nodes,
    active: ActiveEntities,
    limit: usize,
    /// Slots taken out by the last operation.
    out: Vec<u32>,
    /// Entities to passivate that `entity_touched` could not return.
    pending: Vec<EntityId>,
}

impl LimitBasedEntityPassivationStrategy {
    pub(super) fn new(policy: &ReplacementPolicy, limit: usize) -> Self {
        let limit = limit.max(1);
        LimitBasedEntityPassivationStrategy {
            nodes: Nodes::new(),
            active: ActiveEntities::new(policy, limit),
            limit,
            out: Vec::new(),
            pending: Vec::new(),
        }
    }

    /// Releases the slots to passivate into `ids`, with the pending
    /// ones (the buffers keep their capacity: no allocation per entity).
    fn passivate_into(&mut self, ids: &mut Vec<EntityId>) {
        ids.append(&mut self.pending);
        ids.extend(self.out.drain(..).map(|i| self.nodes.release(i)));
    }
}

impl EntityLimit for LimitBasedEntityPassivationStrategy {
    fn set_limit(&mut self, limit: usize) -> Vec<EntityId> {
        let limit = limit.max(1);
        if limit != self.limit {
            self.limit = limit;
            self.active
                .update_limit(&mut self.nodes, limit, &mut self.out);
        }
        let mut ids = Vec::new();
        self.passivate_into(&mut ids);
        ids
    }

    fn entity_created(&mut self, id: &EntityId, victims: &mut Vec<EntityId>) {
        match self.nodes.find(id) {
            Some(i) => self.active.touch(&mut self.nodes, i, &mut self.out),
            None => {
                let i = self.nodes.add(id, Area::Window);
                self.active.add(&mut self.nodes, i, &mut self.out);
            }
        }
        self.passivate_into(victims)
    }

    fn entity_touched(&mut self, id: &EntityId) {
        if let Some(i) = self.nodes.find(id) {
            self.active.touch(&mut self.nodes, i, &mut self.out);
            debug_assert!(
                self.out.is_empty(),
                "an access passivated {}",
                self.out.len()
            );
            // (Nothing to return to: passivated with the next creation.)
            self.pending
                .extend(self.out.drain(..).map(|i| self.nodes.release(i)));
        }
    }

    fn entity_terminated(&mut self, id: &EntityId) {
        if let Some(i) = self.nodes.find(id) {
            self.active.remove(&mut self.nodes, i);
            self.nodes.release(i);
        }
        self.pending.retain(|p| p != id);
    }

    fn active(&self) -> usize {
        self.nodes.len()
    }
}
