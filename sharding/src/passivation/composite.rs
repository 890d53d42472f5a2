//! Pekko's `CompositeEntityPassivationStrategy` (W-TinyLFU: Einziger,
//! Friedman and Manes, "TinyLFU: A Highly Efficient Cache Admission
//! Policy"; Einziger, Eytan, Friedman and Manes, "Adaptive Software Cache
//! Management").
//!
//! A new entity enters the admission window (a small area under its own
//! replacement policy). An entity evicted from the window is a candidate
//! for the main area: when the main area is full, the admission filter
//! decides whether the candidate replaces the entity the main area's
//! policy would evict; the loser is passivated. The window's share of the
//! limit starts at a proportion and may be adjusted by an optimizer; an
//! adjustment moves entities between the areas, never passivates.
//! Without a window, a new entity is itself the candidate.

use super::active_entities::ActiveEntities;
use super::admission_filter::AdmissionFilter;
use super::admission_optimizer::AdmissionOptimizer;
use super::nodes::{Area, Nodes};
use super::EntityLimit;
use crate::extractor::EntityId;
use crate::settings::{AdmissionWindowSettings, FrequencySketchSettings, ReplacementPolicy};

#[derive(Debug)]
pub(super) struct CompositeEntityPassivationStrategy {
    nodes: Nodes,
    /// `None`: no admission window.
    window: Option<ActiveEntities>,
    main: ActiveEntities,
    limit: usize,
    window_proportion: f64,
    minimum_window_proportion: f64,
    maximum_window_proportion: f64,
    window_limit: usize,
    main_limit: usize,
    optimizer: AdmissionOptimizer,
    filter: AdmissionFilter,
    /// Slots taken out of an area by the last operation.
    candidates: Vec<u32>,
    /// Slots to passivate.
    out: Vec<u32>,
    /// Entities to passivate that `entity_touched` could not return.
    pending: Vec<EntityId>,
}

impl CompositeEntityPassivationStrategy {
    pub(super) fn new(
        limit: usize,
        window: Option<&AdmissionWindowSettings>,
        filter: Option<&FrequencySketchSettings>,
        main: &ReplacementPolicy,
    ) -> Self {
        let limit = limit.max(1);
        let (proportion, minimum, maximum) = window.map_or((0.0, 0.0, 0.0), |w| {
            (w.proportion, w.minimum_proportion, w.maximum_proportion)
        });
        let optimizer = AdmissionOptimizer::new(window.and_then(|w| w.optimizer.as_ref()), limit);
        let mut strategy = CompositeEntityPassivationStrategy {
            nodes: Nodes::new(),
            window: window.map(|w| ActiveEntities::new(&w.policy, 0)),
            main: ActiveEntities::new(main, 0),
            limit,
            window_proportion: proportion,
            minimum_window_proportion: minimum,
            maximum_window_proportion: maximum,
            window_limit: 0,
            main_limit: 0,
            optimizer,
            filter: AdmissionFilter::new(filter, limit),
            candidates: Vec::new(),
            out: Vec::new(),
            pending: Vec::new(),
        };
        strategy.calculate_limits();
        let (nodes, out) = (&mut strategy.nodes, &mut strategy.out);
        if let Some(w) = &mut strategy.window {
            w.update_limit(nodes, strategy.window_limit, out);
        }
        strategy.main.update_limit(nodes, strategy.main_limit, out);
        strategy
    }

    /// The window's share of the limit (rounded down) and the main
    /// area's, the rest.
    fn calculate_limits(&mut self) {
        self.window_limit = (self.window_proportion * self.limit as f64) as usize;
        self.main_limit = self.limit - self.window_limit.min(self.limit);
    }

    /// The candidates taken out of the window enter the main area, or are
    /// passivated, as the admission filter decides.
    fn admit_candidates(&mut self) {
        for c in std::mem::take(&mut self.candidates) {
            if self.main.size() >= self.main_limit {
                if let Some(selected) = self.main.select() {
                    let admit = self.filter.admit(self.nodes.id(c), self.nodes.id(selected));
                    if !admit {
                        self.out.push(c);
                        continue;
                    }
                }
            }
            self.nodes[c].area = Area::Main;
            self.main.add(&mut self.nodes, c, &mut self.out);
        }
    }

    /// Resizes the window as the optimizer says, moving entities between
    /// the areas.
    fn adapt_window(&mut self) {
        let adjustment = self.optimizer.calculate_adjustment();
        if adjustment == 0.0 {
            return;
        }
        self.window_proportion = self
            .maximum_window_proportion
            .min(self.window_proportion + adjustment)
            .max(self.minimum_window_proportion);
        self.calculate_limits();
        let Some(window) = &mut self.window else {
            return;
        };
        let nodes = &mut self.nodes;
        let mut overflow = Vec::new();
        if adjustment > 0.0 {
            window.update_limit(nodes, self.window_limit, &mut overflow);
            self.main
                .update_limit(nodes, self.main_limit, &mut self.candidates);
            for i in self.candidates.drain(..) {
                nodes[i].area = Area::Window;
                window.add(nodes, i, &mut overflow);
            }
        } else {
            self.main
                .update_limit(nodes, self.main_limit, &mut overflow);
            window.update_limit(nodes, self.window_limit, &mut self.candidates);
            for i in self.candidates.drain(..) {
                nodes[i].area = Area::Main;
                self.main.add(nodes, i, &mut overflow);
            }
        }
        // The areas' sizes add up to at most the limit, so what leaves one
        // fits in the other.
        debug_assert!(
            overflow.is_empty(),
            "resizing the window passivated {overflow:?}"
        );
        self.out.extend(overflow);
    }

    /// Releases the slots to passivate into `ids`, with the pending
    /// ones (the buffers keep their capacity: no allocation per entity).
    fn passivate_into(&mut self, ids: &mut Vec<EntityId>) {
        ids.append(&mut self.pending);
        ids.extend(self.out.drain(..).map(|i| self.nodes.release(i)));
    }

    /// An access to the tracked entity in slot `i`.
    fn touch(&mut self, i: u32) {
        self.filter.update(self.nodes.id(i));
        self.optimizer.record_active();
        match (self.nodes[i].area, &mut self.window) {
            (Area::Window, Some(window)) => window.touch(&mut self.nodes, i, &mut self.out),
            _ => self.main.touch(&mut self.nodes, i, &mut self.out),
        }
        debug_assert!(self.out.is_empty(), "an access passivated {:?}", self.out);
        self.adapt_window();
    }
}

impl EntityLimit for CompositeEntityPassivationStrategy {
    fn set_limit(&mut self, limit: usize) -> Vec<EntityId> {
        let limit = limit.max(1);
        if limit != self.limit {
            self.limit = limit;
            self.calculate_limits();
            self.optimizer.update_limit(limit);
            self.filter.update_capacity(limit);
            if let Some(window) = &mut self.window {
                window.update_limit(&mut self.nodes, self.window_limit, &mut self.candidates);
            }
            self.admit_candidates();
            self.main
                .update_limit(&mut self.nodes, self.main_limit, &mut self.out);
        }
        let mut ids = Vec::new();
        self.passivate_into(&mut ids);
        ids
    }

    fn entity_created(&mut self, id: &EntityId, victims: &mut Vec<EntityId>) {
        if let Some(i) = self.nodes.find(id) {
            self.touch(i);
            return self.passivate_into(victims);
        }
        self.filter.update(id);
        self.optimizer.record_passive();
        let i = self.nodes.add(id, Area::Window);
        match &mut self.window {
            Some(window) => window.add(&mut self.nodes, i, &mut self.candidates),
            None => self.candidates.push(i),
        }
        self.admit_candidates();
        self.adapt_window();
        self.passivate_into(victims)
    }

    fn entity_touched(&mut self, id: &EntityId) {
        if let Some(i) = self.nodes.find(id) {
            self.touch(i);
            // (Nothing to return to: passivated with the next creation.)
            self.pending
                .extend(self.out.drain(..).map(|i| self.nodes.release(i)));
        }
    }

    fn entity_terminated(&mut self, id: &EntityId) {
        if let Some(i) = self.nodes.find(id) {
            match (self.nodes[i].area, &mut self.window) {
                (Area::Window, Some(window)) => window.remove(&mut self.nodes, i),
                _ => self.main.remove(&mut self.nodes, i),
            }
            self.nodes.release(i);
        }
        self.pending.retain(|p| p != id);
    }

    fn active(&self) -> usize {
        self.nodes.len()
    }
}
