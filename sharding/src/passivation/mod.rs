//! Automatic passivation under an active-entity limit: the replacement
//! policies of Pekko's cluster sharding (`EntityPassivationStrategy` and
//! the lists and sketch under it), as plain data structures, one per
//! shard.
//!
//! The region's limit ([`PassivationSettings::active_entity_limit`]) is
//! shared evenly by its active shards; each shard's strategy keeps its
//! active entities within its share and says which to passivate when a new
//! one starts or the share shrinks:
//!
//! - least recently used, plainly or segmented (an entity used again moves
//!   up to a protected level, and only the lowest level's least recent
//!   entities are passivated);
//! - most recently used;
//! - least frequently used, optionally with dynamic aging;
//! - composite, as the `default-strategy` configures it (W-TinyLFU): new
//!   entities enter a small admission window (least recently used, 1% of
//!   the limit to start with, resized by a hill-climbing optimizer to the
//!   best active rate); one evicted from the window replaces the main
//!   area's victim only if a frequency sketch says it was used more often,
//!   else it is passivated; the main area is a segmented least recently
//!   used one (20% probationary, 80% protected).
//!
//! Every operation is O(1) (amortized; the sketch's are O(depth)): an
//! entity is one slot of a vector, linked into its policy's lists by index,
//! and one entry of a hash map from its id.
//!
//! Idle passivation (`idle-timeout`) is the shard's own timer, not part of
//! these structures.
//!
//! The settings of passivation are re-exported here (and at the crate's
//! root).
//!
//! [`PassivationSettings::active_entity_limit`]: crate::PassivationSettings::active_entity_limit

mod active_entities;
mod admission_filter;
mod admission_optimizer;
mod composite;
mod frequency_list;
mod frequency_sketch;
mod least_frequently_used;
mod least_recently_used;
mod limit_based;
mod most_recently_used;
mod nodes;
mod recency_list;
mod segmented_least_recently_used;
mod segmented_recency_list;
#[cfg(test)]
mod tests;

pub use crate::settings::{
    AdmissionWindowSettings, FrequencySketchSettings, HillClimbingSettings, PassivationSettings,
    PassivationStrategy, ReplacementPolicy,
};

use crate::extractor::EntityId;
use composite::CompositeEntityPassivationStrategy;
use limit_based::LimitBasedEntityPassivationStrategy;

pub(crate) use frequency_sketch::MAX_DEPTH as MAX_FREQUENCY_SKETCH_DEPTH;

/// The replacement decisions for one shard's active entities under a
/// limit.
///
/// A share of 0 is taken as 1: each shard keeps at least its most
/// recently started entity. An entity returned for passivation is no
/// longer tracked (its later `entity_terminated` is ignored); so are
/// accesses and terminations of entities it does not track.
pub(crate) trait EntityLimit: Send + 'static {
    /// The shard's share of the region's limit changed (shards came or
    /// went, or the limit was changed at run time); returns entities to
    /// passivate now.
    fn set_limit(&mut self, limit: usize) -> Vec<EntityId>;
    /// A new entity became active (its first message counts as its first
    /// access: no `entity_touched` for it); adds the entities to passivate
    /// to `victims` (with an admission filter, possibly the new one
    /// itself, as in Pekko).
    fn entity_created(&mut self, id: &EntityId, victims: &mut Vec<EntityId>);
    /// An active entity received a message.
    fn entity_touched(&mut self, id: &EntityId);
    /// An entity stopped (passivated or by itself); forget it.
    fn entity_terminated(&mut self, id: &EntityId);
    /// Entities it tracks.
    // (For tests and statistics; the shard counts its entities itself.)
    #[allow(dead_code)]
    fn active(&self) -> usize;
}

/// The policy the settings ask for with this initial per-shard limit;
/// `None` when the settings have no active-entity limit.
pub(crate) fn new_entity_limit(
    settings: &PassivationSettings,
    limit: usize,
) -> Option<Box<dyn EntityLimit>> {
    settings.active_entity_limit()?;
    let main = settings.replacement_policy()?;
    let window = settings.admission_window();
    let filter = settings.admission_filter();
    if window.is_none() && filter.is_none() {
        Some(Box::new(LimitBasedEntityPassivationStrategy::new(
            &main, limit,
        )))
    } else {
        Some(Box::new(CompositeEntityPassivationStrategy::new(
            limit,
            window.as_ref(),
            filter.as_ref(),
            &main,
        )))
    }
}
