//! The admission filter of the composite strategy (Pekko's
//! `AdmissionFilter`): whether a candidate evicted from the admission
//! window may replace the entity the main area would evict.

use super::frequency_sketch::FrequencySketch;
use crate::settings::FrequencySketchSettings;

#[derive(Debug)]
pub(super) enum AdmissionFilter {
    /// Every candidate is admitted (no filter).
    Always,
    /// A candidate is admitted when its estimated frequency is higher
    /// than the main area's victim's (TinyLFU). The sketch is recreated,
    /// empty, when the capacity changes.
    FrequencySketch {
        settings: FrequencySketchSettings,
        sketch: FrequencySketch,
    },
}

impl AdmissionFilter {
    /// The filter the settings ask for, for `capacity` active entities.
    pub(super) fn new(settings: Option<&FrequencySketchSettings>, capacity: usize) -> Self {
        match settings {
            None => AdmissionFilter::Always,
            Some(settings) => AdmissionFilter::FrequencySketch {
                sketch: sketch(settings, capacity),
                settings: settings.clone(),
            },
        }
    }

    /// The shard's limit changed.
    pub(super) fn update_capacity(&mut self, capacity: usize) {
        if let AdmissionFilter::FrequencySketch {
            settings,
            sketch: s,
        } = self
        {
            *s = sketch(settings, capacity);
        }
    }

    /// An entity was accessed.
    pub(super) fn update(&mut self, id: &str) {
        if let AdmissionFilter::FrequencySketch { sketch, .. } = self {
            sketch.increment(id);
        }
    }

    /// Whether `candidate` may replace `selected` in the main area (which
    /// is passivated otherwise).
    pub(super) fn admit(&self, candidate: &str, selected: &str) -> bool {
        match self {
            AdmissionFilter::Always => true,
            AdmissionFilter::FrequencySketch { sketch, .. } => {
                sketch.frequency(candidate) > sketch.frequency(selected)
            }
        }
    }
}

fn sketch(settings: &FrequencySketchSettings, capacity: usize) -> FrequencySketch {
    FrequencySketch::new(
        capacity,
        settings.width_multiplier,
        settings.reset_multiplier,
        settings.depth,
        settings.counter_bits,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn more_frequent_candidates_are_admitted() {
        assert!(AdmissionFilter::new(None, 10).admit("a", "b"));
        let mut f = AdmissionFilter::new(Some(&FrequencySketchSettings::default()), 10);
        f.update("a");
        f.update("b");
        assert!(!f.admit("a", "b"), "equal frequencies: the victim stays");
        f.update("a");
        assert!(f.admit("a", "b"));
        assert!(!f.admit("b", "a"));
        f.update_capacity(20);
        assert!(!f.admit("a", "b"), "a new capacity: a new, empty sketch");
    }
}
