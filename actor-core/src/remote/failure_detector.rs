//! Phi accrual failure detector (Hayashibara et al., "The φ Accrual Failure
//! Detector"), following the behaviour of Akka's `PhiAccrualFailureDetector`.
//!
//! Rather than a binary verdict it reports a suspicion level
//! φ = -log10(1 - F(time since last heartbeat)), F being the CDF of a normal
//! distribution fitted to recent heartbeat intervals. A peer is available
//! while φ stays below a configurable threshold.
//!
//! Every method takes the current [`Instant`] explicitly, so callers own the
//! clock and tests can simulate time without sleeping.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Tuning knobs of a [`PhiAccrualFailureDetector`].
///
/// The [`Default`] matches Akka cluster's failure-detector defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct PhiAccrualSettings {
    /// φ at or above which the peer is considered unavailable. Lower values
    /// detect crashes faster but produce more false suspicions.
    pub threshold: f64,
    /// Number of recent heartbeat intervals kept for the mean and standard
    /// deviation estimates.
    pub max_sample_size: usize,
    /// Floor for the estimated standard deviation, so that very regular
    /// heartbeats do not make the detector hypersensitive to small jitter.
    pub min_std_deviation: Duration,
    /// Extra pause (lost or delayed heartbeats, GC, network hiccups) that is
    /// tolerated before φ starts to climb; it is added to the mean interval.
    pub acceptable_heartbeat_pause: Duration,
    /// Expected heartbeat interval, used to bootstrap the statistics before
    /// any real interval has been observed.
    pub first_heartbeat_estimate: Duration,
}

impl Default for PhiAccrualSettings {
    fn default() -> Self {
        Self {
            threshold: 8.0,
            max_sample_size: 1000,
            min_std_deviation: Duration::from_millis(100),
            acceptable_heartbeat_pause: Duration::from_secs(3),
            first_heartbeat_estimate: Duration::from_secs(1),
        }
    }
}

impl PhiAccrualSettings {
    /// Checks that every setting is in range, returning a message naming the
    /// first offending field otherwise.
    pub fn validate(&self) -> Result<(), String> {
        // Reject NaN explicitly: it would silently mark every peer unavailable.
        let problem = if self.threshold.is_nan() || self.threshold <= 0.0 {
            format!("threshold must be > 0, got {}", self.threshold)
        } else if self.max_sample_size == 0 {
            "max_sample_size must be > 0, got 0".to_string()
        } else if self.min_std_deviation.is_zero() {
            "min_std_deviation must be > 0, got 0s".to_string()
        } else if self.first_heartbeat_estimate.is_zero() {
            "first_heartbeat_estimate must be > 0, got 0s".to_string()
        } else {
            return Ok(());
        };
        Err(format!(
            "invalid phi accrual failure detector settings: {problem}"
        ))
    }
}

/// Longest interval recorded (about 8.9 years), so that the running sum of
/// squares stays far from overflowing `u128` even with huge sample sizes.
const MAX_INTERVAL_MICROS: u64 = 1 << 48;

/// Bounded ring of heartbeat intervals (in microseconds) with running sums,
/// so that appending and computing the statistics are both O(1).
#[derive(Debug, Clone)]
struct HeartbeatHistory {
    max_sample_size: usize,
    intervals: VecDeque<u64>,
    // Integer sums stay exact when old samples are subtracted again.
    sum: u128,
    sum_of_squares: u128,
}

impl HeartbeatHistory {
    fn push(&mut self, interval: Duration) {
        let micros = u64::try_from(interval.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_INTERVAL_MICROS);
        if self.intervals.len() >= self.max_sample_size {
            // Never empty here: validated settings keep max_sample_size >= 1.
            let oldest = u128::from(self.intervals.pop_front().unwrap_or_default());
            self.sum -= oldest;
            self.sum_of_squares -= oldest * oldest;
        }
        self.intervals.push_back(micros);
        self.sum += u128::from(micros);
        self.sum_of_squares += u128::from(micros) * u128::from(micros);
    }

    /// Mean interval in milliseconds; the history is never empty once seeded.
    fn mean_ms(&self) -> f64 {
        self.sum as f64 / self.intervals.len() as f64 / 1000.0
    }

    /// Population standard deviation in milliseconds.
    fn std_deviation_ms(&self) -> f64 {
        let n = self.intervals.len() as f64;
        let mean_us = self.sum as f64 / n;
        // Clamp: rounding can make the variance slightly negative.
        let variance_us = (self.sum_of_squares as f64 / n - mean_us * mean_us).max(0.0);
        variance_us.sqrt() / 1000.0
    }
}

/// Phi accrual failure detector for a single monitored peer.
///
/// Feed it with [`heartbeat`](Self::heartbeat) whenever a heartbeat arrives
/// and ask [`is_available`](Self::is_available) or [`phi`](Self::phi) when a
/// verdict is needed. A detector that has not seen any heartbeat yet reports
/// φ = 0, i.e. the peer is presumed healthy — unless a first heartbeat was
/// expected by a deadline ([`expect_first_heartbeat`](Self::expect_first_heartbeat))
/// that has passed: then it monitors from that deadline on.
#[derive(Debug, Clone)]
pub struct PhiAccrualFailureDetector {
    settings: PhiAccrualSettings,
    history: HeartbeatHistory,
    last_heartbeat: Option<Instant>,
    first_due: Option<Instant>,
}

impl PhiAccrualFailureDetector {
    /// Creates a detector that is not monitoring anything yet.
    ///
    /// # Panics
    ///
    /// Panics with the message of [`PhiAccrualSettings::validate`] if the
    /// settings are out of range; validate configuration up front to avoid it.
    pub fn new(settings: PhiAccrualSettings) -> Self {
        if let Err(message) = settings.validate() {
            panic!("{message}");
        }
        let history = Self::seeded_history(&settings);
        Self {
            settings,
            history,
            last_heartbeat: None,
            first_due: None,
        }
    }

    /// Expects the first heartbeat by `by`: if none has come then, the
    /// peer is monitored as if one had arrived at `by`, so a peer that never
    /// answers becomes suspect (Akka's expected first heartbeat). Recording
    /// a heartbeat when the first request goes out instead would put a
    /// near-zero interval into the statistics when the answer comes.
    pub fn expect_first_heartbeat(&mut self, by: Instant) {
        if self.last_heartbeat.is_none() {
            self.first_due = Some(by);
        }
    }

    /// The last heartbeat, or the missed deadline of the first one.
    fn monitored_since(&self, now: Instant) -> Option<Instant> {
        self.last_heartbeat
            .or(self.first_due.filter(|due| *due <= now))
    }

    /// Bootstrap statistics: two intervals around the estimate with a rather
    /// high deviation, so a peer that sends a single heartbeat and dies is
    /// still detected, while the unknown environment is not over-trusted.
    fn seeded_history(settings: &PhiAccrualSettings) -> HeartbeatHistory {
        let estimate = settings.first_heartbeat_estimate;
        let spread = estimate / 4;
        let mut history = HeartbeatHistory {
            max_sample_size: settings.max_sample_size,
            intervals: VecDeque::new(),
            sum: 0,
            sum_of_squares: 0,
        };
        history.push(estimate - spread);
        history.push(estimate + spread);
        history
    }

    /// Records a heartbeat that arrived at `now`.
    pub fn heartbeat(&mut self, now: Instant) {
        self.first_due = None;
        match self.last_heartbeat {
            // First heartbeat: start from the bootstrap statistics.
            None => self.history = Self::seeded_history(&self.settings),
            Some(last) => {
                // The first heartbeat after a suspected failure is not
                // recorded: the long gap would skew the statistics.
                if self.is_available(now) {
                    self.history.push(now.saturating_duration_since(last));
                }
            }
        }
        self.last_heartbeat = Some(now);
    }

    /// Suspicion level at `now`; 0.0 while no heartbeat has been received
    /// (and none was due).
    pub fn phi(&self, now: Instant) -> f64 {
        let Some(last) = self.monitored_since(now) else {
            return 0.0;
        };
        let time_diff_ms = now.saturating_duration_since(last).as_secs_f64() * 1000.0;
        let mean_ms = self.history.mean_ms()
            + self.settings.acceptable_heartbeat_pause.as_secs_f64() * 1000.0;
        let std_dev_ms = self
            .history
            .std_deviation_ms()
            .max(self.settings.min_std_deviation.as_secs_f64() * 1000.0);
        Self::phi_of(time_diff_ms, mean_ms, std_dev_ms)
    }

    /// Whether the peer is considered alive at `now` (φ below the threshold).
    pub fn is_available(&self, now: Instant) -> bool {
        self.phi(now) < self.settings.threshold
    }

    /// Whether at least one heartbeat has been received.
    pub fn is_monitoring(&self) -> bool {
        self.last_heartbeat.is_some()
    }

    /// φ for a gap of `time_diff_ms` given interval statistics, using the
    /// logistic approximation of the normal CDF that Akka uses (error about
    /// 0.00014 at ±3.16σ). `std_dev_ms` must be positive. May return
    /// `f64::INFINITY` for gaps far beyond the mean.
    pub fn phi_of(time_diff_ms: f64, mean_ms: f64, std_dev_ms: f64) -> f64 {
        let y = (time_diff_ms - mean_ms) / std_dev_ms;
        let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
        // Two algebraically equal forms of -log10(1 - CDF), each picked on
        // the side where it does not lose precision.
        if time_diff_ms > mean_ms {
            -(e / (1.0 + e)).log10()
        } else {
            -(1.0 - 1.0 / (1.0 + e)).log10()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    /// Detector with `settings`, fed `count` heartbeats one second apart;
    /// returns it with the time of the last heartbeat.
    fn regular(settings: PhiAccrualSettings, count: u32) -> (PhiAccrualFailureDetector, Instant) {
        let mut fd = PhiAccrualFailureDetector::new(settings);
        let start = Instant::now();
        for i in 0..count {
            fd.heartbeat(start + SECOND * i);
        }
        (fd, start + SECOND * (count - 1))
    }

    #[test]
    fn phi_of_matches_akka_values() {
        let diffs = [0.0, 500.0, 1000.0, 1200.0, 1400.0, 1600.0, 1700.0];
        let expected = [0.0, 0.1, 0.3, 1.6, 4.7, 10.8, 15.3];
        for (diff, phi) in diffs.into_iter().zip(expected) {
            let got = PhiAccrualFailureDetector::phi_of(diff, 1000.0, 100.0);
            assert!((got - phi).abs() <= 0.1, "phi({diff}) = {got}, want {phi}");
        }
    }

    #[test]
    fn phi_rises_with_silence() {
        let (fd, last) = regular(PhiAccrualSettings::default(), 10);
        let phis: Vec<f64> = (0..100)
            .map(|i| fd.phi(last + Duration::from_millis(100 * i)))
            .collect();
        assert!(phis.windows(2).all(|w| w[0] <= w[1]), "{phis:?}");
        assert!(phis[0] < phis[99]);
    }

    #[test]
    fn regular_heartbeats_are_available_and_silence_is_not() {
        let fresh = PhiAccrualFailureDetector::new(PhiAccrualSettings::default());
        assert!(!fresh.is_monitoring());
        assert_eq!(fresh.phi(Instant::now()), 0.0);

        let (fd, last) = regular(PhiAccrualSettings::default(), 10);
        assert!(fd.is_monitoring());
        assert!(fd.is_available(last + Duration::from_millis(500)));
        assert!(fd.is_available(last + 3 * SECOND));
        assert!(!fd.is_available(last + 10 * SECOND));
    }

    #[test]
    fn history_is_bounded() {
        let settings = PhiAccrualSettings {
            max_sample_size: 3,
            ..PhiAccrualSettings::default()
        };
        let (fd, _) = regular(settings, 50);
        let h = &fd.history;
        assert_eq!(h.intervals.len(), 3);
        // Running sums must agree with what is actually stored.
        let sum: u128 = h.intervals.iter().map(|&i| u128::from(i)).sum();
        let squares: u128 = h.intervals.iter().map(|&i| u128::from(i).pow(2)).sum();
        assert_eq!((h.sum, h.sum_of_squares), (sum, squares));
        assert!((h.mean_ms() - 1000.0).abs() < 1e-9);
    }

    #[test]
    fn acceptable_pause_delays_verdict() {
        let strict = PhiAccrualSettings {
            acceptable_heartbeat_pause: Duration::ZERO,
            ..PhiAccrualSettings::default()
        };
        let (strict, last_strict) = regular(strict, 10);
        let (lenient, last_lenient) = regular(PhiAccrualSettings::default(), 10);
        assert!(!strict.is_available(last_strict + 3 * SECOND));
        assert!(lenient.is_available(last_lenient + 3 * SECOND));
    }

    #[test]
    fn heartbeat_after_failure_is_not_recorded() {
        let (mut fd, last) = regular(PhiAccrualSettings::default(), 5);
        let samples = fd.history.intervals.len();
        fd.heartbeat(last + 60 * SECOND);
        assert_eq!(fd.history.intervals.len(), samples);
        assert!(fd.is_available(last + 60 * SECOND));
    }

    #[test]
    fn validate_rejects_bad_settings() {
        assert_eq!(PhiAccrualSettings::default().validate(), Ok(()));
        type Edit = fn(&mut PhiAccrualSettings);
        let cases: [(&str, Edit); 5] = [
            ("threshold", |s| s.threshold = 0.0),
            ("threshold", |s| s.threshold = f64::NAN),
            ("max_sample_size", |s| s.max_sample_size = 0),
            ("min_std_deviation", |s| {
                s.min_std_deviation = Duration::ZERO
            }),
            ("first_heartbeat_estimate", |s| {
                s.first_heartbeat_estimate = Duration::ZERO
            }),
        ];
        for (field, edit) in cases {
            let mut settings = PhiAccrualSettings::default();
            edit(&mut settings);
            let err = settings.validate().expect_err(field);
            assert!(err.contains(field), "{err}");
        }
    }

    #[test]
    #[should_panic(expected = "max_sample_size")]
    fn new_panics_on_invalid_settings() {
        let settings = PhiAccrualSettings {
            max_sample_size: 0,
            ..Default::default()
        };
        PhiAccrualFailureDetector::new(settings);
    }

    #[test]
    fn a_missed_first_heartbeat_starts_monitoring_at_its_deadline() {
        let mut fd = PhiAccrualFailureDetector::new(PhiAccrualSettings::default());
        let start = Instant::now();
        fd.expect_first_heartbeat(start + SECOND);
        assert_eq!(fd.phi(start + SECOND / 2), 0.0, "not due yet");
        // Never answered: suspect after the acceptable pause from the deadline.
        assert!(fd.is_available(start + SECOND * 2));
        assert!(!fd.is_available(start + SECOND * 10));
        // An answer resets it: monitoring from the answer on.
        fd.heartbeat(start + SECOND * 10);
        assert!(fd.is_available(start + SECOND * 11));
        let mut answered = PhiAccrualFailureDetector::new(PhiAccrualSettings::default());
        answered.expect_first_heartbeat(start + SECOND);
        answered.heartbeat(start + SECOND / 2);
        assert!(answered.is_available(start + SECOND * 3));
    }
}
