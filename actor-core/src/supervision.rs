//! Supervision: what happens when a handler (or a lifecycle hook) panics.

use std::time::{Duration, Instant};

/// How an actor's failures are handled. Each actor has its own strategy,
/// set with [`Props::with_supervisor`](crate::Props::with_supervisor); the
/// default is to restart without limit and without backoff, as in Akka.
///
/// ```
/// use std::time::Duration;
/// use troupe_core::{Backoff, SupervisorStrategy};
///
/// // At most 3 restarts within 10 s, waiting 100 ms, 200 ms, 400 ms ...
/// // (capped at 5 s) before each one; stop if failures keep coming.
/// let strategy = SupervisorStrategy::restart()
///     .with_limit(3, Duration::from_secs(10))
///     .with_backoff(Backoff::exponential(Duration::from_millis(100), Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum SupervisorStrategy {
    /// Keep the actor and its state, drop the failed message, go on.
    Resume,
    /// Drop the failed instance, create a fresh one from the factory
    /// (children are stopped first), and go on with the next message.
    Restart(RestartPolicy),
    /// Stop the actor; watchers get `Terminated` with the failure.
    Stop,
    /// Stop the actor and fail its parent with the error, which the
    /// parent's own strategy then handles.
    Escalate,
}

impl Default for SupervisorStrategy {
    fn default() -> Self {
        SupervisorStrategy::Restart(RestartPolicy::default())
    }
}

impl SupervisorStrategy {
    /// Restart without limit and without backoff.
    pub fn restart() -> Self {
        SupervisorStrategy::Restart(RestartPolicy::default())
    }
    /// Resume.
    pub fn resume() -> Self {
        SupervisorStrategy::Resume
    }
    /// Stop.
    pub fn stop() -> Self {
        SupervisorStrategy::Stop
    }
    /// Escalate.
    pub fn escalate() -> Self {
        SupervisorStrategy::Escalate
    }

    /// Allows at most `max_restarts` restarts within `within`; one more
    /// failure inside that window stops the actor. Only for `Restart`.
    pub fn with_limit(self, max_restarts: u32, within: Duration) -> Self {
        match self {
            SupervisorStrategy::Restart(mut p) => {
                p.max_restarts = Some(max_restarts);
                p.within = within;
                SupervisorStrategy::Restart(p)
            }
            other => other,
        }
    }

    /// Waits before each restart, longer after each failure. Only for
    /// `Restart`.
    pub fn with_backoff(self, backoff: Backoff) -> Self {
        match self {
            SupervisorStrategy::Restart(mut p) => {
                p.backoff = Some(backoff);
                SupervisorStrategy::Restart(p)
            }
            other => other,
        }
    }
}

/// Limits and backoff of the restart strategy.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    /// Restarts allowed within `within`; `None` is no limit.
    pub max_restarts: Option<u32>,
    /// The window in which restarts are counted.
    pub within: Duration,
    /// Delay before each restart; `None` restarts at once.
    pub backoff: Option<Backoff>,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            max_restarts: None,
            within: Duration::from_secs(60),
            backoff: None,
        }
    }
}

/// Exponential backoff: the n-th consecutive restart waits
/// `min * 2^(n-1)`, capped at `max`, plus up to `random_factor` of that as
/// jitter. The count starts again once the actor has run for `max` without
/// failing.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    /// Delay before the first restart.
    pub min: Duration,
    /// Longest delay.
    pub max: Duration,
    /// Extra random delay, as a fraction of the delay (0.0 to 1.0).
    pub random_factor: f64,
}

impl Backoff {
    /// Backoff from `min` doubling up to `max`, with 20% jitter.
    pub fn exponential(min: Duration, max: Duration) -> Self {
        Backoff {
            min,
            max: max.max(min),
            random_factor: 0.2,
        }
    }

    /// Sets the jitter (clamped to 0.0..=1.0).
    pub fn with_random_factor(mut self, factor: f64) -> Self {
        self.random_factor = factor.clamp(0.0, 1.0);
        self
    }

    /// The delay before restart number `attempt` (1 for the first).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(31);
        let base = self.min.saturating_mul(1u32 << exp).min(self.max);
        let jitter = base.mul_f64(self.random_factor * fastrand::f64());
        base + jitter
    }
}

/// Restart bookkeeping of one actor.
#[derive(Debug, Default)]
pub(crate) struct RestartStats {
    window_start: Option<Instant>,
    in_window: u32,
    consecutive: u32,
    last_restart: Option<Instant>,
}

/// What to do about one failure under a restart policy.
pub(crate) enum RestartDecision {
    /// Restart after this delay (zero: at once).
    RestartAfter(Duration),
    /// The limit is exceeded: stop.
    LimitExceeded(u32),
}

impl RestartStats {
    pub(crate) fn decide(&mut self, policy: &RestartPolicy, now: Instant) -> RestartDecision {
        let start = *self.window_start.get_or_insert(now);
        if now.duration_since(start) > policy.within {
            self.window_start = Some(now);
            self.in_window = 0;
        }
        if let Some(max) = policy.max_restarts {
            if self.in_window >= max {
                return RestartDecision::LimitExceeded(max);
            }
        }
        self.in_window += 1;
        let delay = match &policy.backoff {
            None => Duration::ZERO,
            Some(b) => {
                let calm = self
                    .last_restart
                    .is_some_and(|t| now.duration_since(t) > b.max + b.max);
                if calm {
                    self.consecutive = 0;
                }
                self.consecutive += 1;
                b.delay(self.consecutive)
            }
        };
        self.last_restart = Some(now + delay);
        RestartDecision::RestartAfter(delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let b = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1))
            .with_random_factor(0.0);
        assert_eq!(b.delay(1), Duration::from_millis(100));
        assert_eq!(b.delay(2), Duration::from_millis(200));
        assert_eq!(b.delay(3), Duration::from_millis(400));
        assert_eq!(b.delay(5), Duration::from_secs(1));
        assert_eq!(b.delay(60), Duration::from_secs(1));
    }

    #[test]
    fn jitter_stays_within_factor() {
        let b = Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1))
            .with_random_factor(0.5);
        for _ in 0..1000 {
            let d = b.delay(1);
            assert!(
                d >= Duration::from_millis(100) && d <= Duration::from_millis(150),
                "{d:?}"
            );
        }
    }

    #[test]
    fn limit_within_window() {
        let policy = RestartPolicy {
            max_restarts: Some(2),
            within: Duration::from_secs(10),
            backoff: None,
        };
        let mut s = RestartStats::default();
        let t0 = Instant::now();
        assert!(matches!(
            s.decide(&policy, t0),
            RestartDecision::RestartAfter(_)
        ));
        assert!(matches!(
            s.decide(&policy, t0),
            RestartDecision::RestartAfter(_)
        ));
        assert!(matches!(
            s.decide(&policy, t0),
            RestartDecision::LimitExceeded(2)
        ));
        // A new window allows restarts again.
        let later = t0 + Duration::from_secs(11);
        assert!(matches!(
            s.decide(&policy, later),
            RestartDecision::RestartAfter(_)
        ));
    }
}
