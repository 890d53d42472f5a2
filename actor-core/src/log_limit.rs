//! A limit on how often a repeated log line is written.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Lets a repeated log line (a full buffer, a refused message) through at
/// most once per interval, however often its event happens; count the
/// events yourself and put the count in the line. Shared by reference:
/// `allow` takes `&self` and is safe to call from many threads.
///
/// ```
/// use troupe_core::LogLimit;
///
/// let limit = LogLimit::per_second();
/// let mut dropped = 0u64;
/// for _ in 0..1000 {
///     dropped += 1;
///     if limit.allow() {
///         // tracing::warn!("buffer full: {dropped} dropped so far");
///     }
/// }
/// assert!(!limit.allow()); // within the second: held back
/// ```
#[derive(Debug)]
pub struct LogLimit {
    interval_ms: u64,
    start: Instant,
    /// When a line was last let through (milliseconds since `start`);
    /// `u64::MAX` before the first.
    last_ms: AtomicU64,
}

impl LogLimit {
    /// At most one line per `interval`.
    pub fn new(interval: Duration) -> Self {
        LogLimit {
            interval_ms: interval.as_millis().try_into().unwrap_or(u64::MAX),
            start: Instant::now(),
            last_ms: AtomicU64::new(u64::MAX),
        }
    }

    /// At most one line a second.
    pub fn per_second() -> Self {
        Self::new(Duration::from_secs(1))
    }

    /// True if a line may be written now: the first call, or the first
    /// since the interval passed (one caller wins when several race).
    pub fn allow(&self) -> bool {
        let now = self.start.elapsed().as_millis() as u64;
        let last = self.last_ms.load(Ordering::Relaxed);
        (last == u64::MAX || now.saturating_sub(last) >= self.interval_ms)
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(all(test, not(troupe_loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_passes_then_one_per_interval() {
        let limit = LogLimit::new(Duration::from_millis(50));
        assert!(limit.allow());
        assert!(!limit.allow());
        let start = Instant::now();
        while !limit.allow() {
            assert!(start.elapsed() < Duration::from_secs(10), "never again");
            std::thread::yield_now();
        }
        assert!(start.elapsed() >= Duration::from_millis(49));
        assert!(!limit.allow());
    }
}
