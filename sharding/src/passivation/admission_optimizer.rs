//! The optimizer of the composite strategy's admission window (Pekko's
//! `AdmissionOptimizer`): it resizes the window to the proportion that
//! gives the best active rate (the rate of messages for entities already
//! active, the hit rate).

use crate::settings::HillClimbingSettings;

#[derive(Debug)]
pub(super) enum AdmissionOptimizer {
    /// The window keeps its size.
    None,
    /// Hill climbing.
    HillClimbing(HillClimbingAdmissionOptimizer),
}

impl AdmissionOptimizer {
    pub(super) fn new(settings: Option<&HillClimbingSettings>, limit: usize) -> Self {
        match settings {
            None => AdmissionOptimizer::None,
            Some(s) => {
                AdmissionOptimizer::HillClimbing(HillClimbingAdmissionOptimizer::new(s, limit))
            }
        }
    }

    /// A message for an active entity.
    pub(super) fn record_active(&mut self) {
        if let AdmissionOptimizer::HillClimbing(h) = self {
            h.record_active();
        }
    }

    /// A message that activated its entity.
    pub(super) fn record_passive(&mut self) {
        if let AdmissionOptimizer::HillClimbing(h) = self {
            h.record_passive();
        }
    }

    /// The shard's limit changed.
    pub(super) fn update_limit(&mut self, limit: usize) {
        if let AdmissionOptimizer::HillClimbing(h) = self {
            h.update_limit(limit);
        }
    }

    /// The change to make to the window's proportion now: positive to
    /// grow it, negative to shrink it, 0.0 for none.
    pub(super) fn calculate_adjustment(&mut self) -> f64 {
        match self {
            AdmissionOptimizer::None => 0.0,
            AdmissionOptimizer::HillClimbing(h) => h.calculate_adjustment(),
        }
    }
}

/// Pekko's `HillClimbingAdmissionOptimizer`: every `adjust-multiplier`
/// times the limit accesses, compares the active rate with the previous
/// period's; while it does not drop, steps on in the same direction
/// (starting downwards), else turns back; each step decays by
/// `step-decay`, and a change of the rate by `restart-threshold` or more
/// restarts from `initial-step`.
#[derive(Debug)]
pub(super) struct HillClimbingAdmissionOptimizer {
    adjust_multiplier: f64,
    initial_step: f64,
    restart_threshold: f64,
    step_decay: f64,
    adjust_size: f64,
    accesses: u64,
    active_accesses: u64,
    previous_active_rate: f64,
    next_step: f64,
}

impl HillClimbingAdmissionOptimizer {
    pub(super) fn new(settings: &HillClimbingSettings, limit: usize) -> Self {
        HillClimbingAdmissionOptimizer {
            adjust_multiplier: settings.adjust_multiplier,
            initial_step: settings.initial_step,
            restart_threshold: settings.restart_threshold,
            step_decay: settings.step_decay,
            adjust_size: settings.adjust_multiplier * limit as f64,
            accesses: 0,
            active_accesses: 0,
            previous_active_rate: 0.0,
            next_step: -settings.initial_step,
        }
    }

    fn record_active(&mut self) {
        self.accesses += 1;
        self.active_accesses += 1;
    }

    fn record_passive(&mut self) {
        self.accesses += 1;
    }

    fn update_limit(&mut self, limit: usize) {
        self.adjust_size = self.adjust_multiplier * limit as f64;
    }

    fn calculate_adjustment(&mut self) -> f64 {
        if (self.accesses as f64) < self.adjust_size {
            return 0.0;
        }
        let active_rate = self.active_accesses as f64 / self.accesses as f64;
        let delta = active_rate - self.previous_active_rate;
        let adjustment = if delta >= 0.0 {
            self.next_step
        } else {
            -self.next_step
        };
        let direction = if adjustment >= 0.0 { 1.0 } else { -1.0 };
        let restart = delta.abs() >= self.restart_threshold;
        self.next_step = if restart {
            self.initial_step * direction
        } else {
            adjustment * self.step_decay
        };
        self.previous_active_rate = active_rate;
        self.accesses = 0;
        self.active_accesses = 0;
        adjustment
    }
}

/// Pekko's `HillClimbingAdmissionOptimizerSpec`.
#[cfg(test)]
mod tests {
    use super::*;

    fn create(initial_step: f64, step_decay: f64) -> HillClimbingAdmissionOptimizer {
        let settings = HillClimbingSettings {
            adjust_multiplier: 2.0,
            initial_step,
            restart_threshold: 0.05,
            step_decay,
        };
        HillClimbingAdmissionOptimizer::new(&settings, 5)
    }

    #[test]
    fn starts_in_decreasing_direction() {
        let mut o = create(0.123, 0.98);
        for _ in 0..10 {
            o.record_passive();
        }
        assert_eq!(o.calculate_adjustment(), -0.123);
    }

    #[test]
    fn adjusts_only_every_adjust_size_accesses() {
        let mut o = create(0.01, 0.98);
        for i in 1..=100 {
            o.record_passive();
            let adjustment = o.calculate_adjustment();
            if i % 10 == 0 {
                assert_ne!(adjustment, 0.0, "{i}");
            } else {
                assert_eq!(adjustment, 0.0, "{i}");
            }
        }
    }

    #[test]
    fn decays_each_step_under_the_restart_threshold() {
        let (step, decay) = (0.1, 0.5);
        let mut o = create(step, decay);
        for i in 1..=100 {
            o.record_passive();
            if i % 10 == 0 {
                let expected = decay.powf(f64::from(i) / 10.0 - 1.0) * -step;
                assert_eq!(o.calculate_adjustment(), expected, "{i}");
            }
        }
    }

    #[test]
    fn restarts_over_the_restart_threshold() {
        let (step, decay) = (0.1, 0.5);
        let mut o = create(step, decay);
        for i in 1..=100 {
            // The active rate rises after 40 accesses: a restart at 60,
            // then decay again.
            if i > 40 {
                o.record_active();
            } else {
                o.record_passive();
            }
            if i % 10 == 0 {
                let shift = if i < 60 { 1.0 } else { 6.0 };
                let expected = decay.powf(f64::from(i) / 10.0 - shift) * -step;
                assert_eq!(o.calculate_adjustment(), expected, "{i}");
            }
        }
    }

    #[test]
    fn changes_direction_when_the_active_rate_drops() {
        let mut o = create(0.01, 0.98);
        for i in 1..=500 {
            // The active rate drops every 50 accesses.
            let active_rate = (10 - i / 50).max(1);
            if i % 10 < active_rate {
                o.record_active();
            } else {
                o.record_passive();
            }
            if i % 10 == 0 {
                let adjustment = o.calculate_adjustment();
                if ((i - 1) / 50) % 2 == 0 {
                    assert!(adjustment < 0.0, "{i}: {adjustment}");
                } else {
                    assert!(adjustment > 0.0, "{i}: {adjustment}");
                }
            }
        }
    }
}
