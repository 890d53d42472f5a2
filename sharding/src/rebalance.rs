//! One hand-off of one shard, as the coordinator drives it (Pekko's
//! `RebalanceWorker`): every region and proxy is told `BeginHandOff` and
//! starts buffering the shard's messages; once all have acknowledged, the
//! shard's home region is told `HandOff`; it stops the entities and
//! answers `ShardStopped`.
//!
//! A hand-off that does not get every acknowledgement within
//! `handoff-timeout` is abandoned, as Pekko's is, and the shard stays
//! where it is: a region that has not acknowledged may still have
//! messages on their way to the old home (an acknowledgement goes behind
//! them), and moving the shard would let that region's later messages
//! reach the new home first. Each attempt has a number, as Pekko's has a
//! worker actor of its own, so that a late answer to an abandoned attempt
//! counts for nothing in the next.

use crate::allocation::RegionId;
use crate::extractor::ShardId;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// What the coordinator must do next for a hand-off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum HandOffProgress {
    /// Nothing yet.
    Waiting,
    /// Every region buffers: tell the home region to hand off.
    SendHandOff(RegionId),
    /// The shard has stopped (or its home is gone): it can be allocated.
    Done,
    /// The home region did not stop the shard in time: it stays there.
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for `BeginHandOffAck`s.
    Acking,
    /// `HandOff` sent; waiting for `ShardStopped`.
    Stopping,
}

/// The state of one hand-off.
#[derive(Debug)]
pub(crate) struct RebalanceWorker {
    from: RegionId,
    attempt: u64,
    pending: BTreeSet<RegionId>,
    phase: Phase,
    since: Instant,
}

impl RebalanceWorker {
    pub(crate) fn new(
        _shard: ShardId,
        from: RegionId,
        attempt: u64,
        routers: impl IntoIterator<Item = RegionId>,
    ) -> Self {
        RebalanceWorker {
            from,
            attempt,
            pending: routers.into_iter().collect(),
            phase: Phase::Acking,
            since: Instant::now(),
        }
    }

    /// The region the shard leaves.
    pub(crate) fn from(&self) -> &RegionId {
        &self.from
    }

    /// This attempt's number, which the regions' answers carry.
    pub(crate) fn attempt(&self) -> u64 {
        self.attempt
    }

    /// True if an answer carrying `attempt` is for this attempt (0: from a
    /// node that does not number attempts).
    pub(crate) fn answered_by(&self, attempt: u64) -> bool {
        attempt == self.attempt || attempt == 0
    }

    /// The regions that have not acknowledged `BeginHandOff`.
    pub(crate) fn unacknowledged(&self) -> impl Iterator<Item = &RegionId> {
        self.pending.iter()
    }

    /// True once `HandOff` has been sent.
    pub(crate) fn is_stopping(&self) -> bool {
        self.phase == Phase::Stopping
    }

    fn begin_stopping(&mut self) -> HandOffProgress {
        self.phase = Phase::Stopping;
        self.since = Instant::now();
        HandOffProgress::SendHandOff(self.from.clone())
    }

    pub(crate) fn acked(&mut self, region: &RegionId) -> HandOffProgress {
        self.pending.remove(region);
        if self.phase == Phase::Acking && self.pending.is_empty() {
            self.begin_stopping()
        } else {
            HandOffProgress::Waiting
        }
    }

    /// The home's `ShardStopped` for this attempt (which it sends only
    /// after this attempt's `HandOff`).
    pub(crate) fn stopped(&mut self, region: &RegionId) -> HandOffProgress {
        if *region == self.from && self.phase == Phase::Stopping {
            HandOffProgress::Done
        } else {
            HandOffProgress::Waiting
        }
    }

    /// A region (or its node) is gone.
    pub(crate) fn region_gone(&mut self, region: &RegionId) -> HandOffProgress {
        if *region == self.from {
            return HandOffProgress::Done;
        }
        self.acked(region)
    }

    /// True once the hand-off has failed by `now`: its acknowledgements did
    /// not all come within `timeout` (it is abandoned; the shard never
    /// stopped and stays where it is), or the shard did not stop within
    /// twice the timeout (it stays where it is too).
    pub(crate) fn is_overdue(&self, now: Instant, timeout: Duration) -> bool {
        let waited = now.duration_since(self.since);
        match self.phase {
            Phase::Acking => waited >= timeout,
            Phase::Stopping => waited >= 2 * timeout,
        }
    }
}

/// A shard that left a region which still holds messages for it (those
/// its entities had not taken when they stopped, and those that reached
/// that region during the hand-off). Its new home is announced to the
/// other regions only once those messages are there (`ShardFlushed`):
/// announced earlier, a sender's newer messages could reach the new home
/// before its older ones held at the old home. (Pekko announces at once
/// and lets the old home forward, which can reorder them.)
#[derive(Debug)]
pub(crate) struct PendingFlush {
    /// The old home, which holds the messages.
    pub(crate) from: RegionId,
    /// The new home, once allocated.
    pub(crate) home: Option<RegionId>,
    /// Since when the new home is known (or the shard stopped).
    pub(crate) since: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;
    use troupe_cluster::UniqueAddress;

    fn region(port: u16) -> RegionId {
        UniqueAddress::new(
            format!("troupe://s@127.0.0.1:{port}").parse().unwrap(),
            u64::from(port),
        )
    }

    #[test]
    fn hand_off_waits_for_every_ack_then_for_the_home() {
        let (a, b, c) = (region(1), region(2), region(3));
        let mut w =
            RebalanceWorker::new("s".into(), a.clone(), 7, [a.clone(), b.clone(), c.clone()]);
        assert_eq!(w.acked(&a), HandOffProgress::Waiting);
        assert_eq!(
            w.stopped(&a),
            HandOffProgress::Waiting,
            "no stop counts before HandOff was sent"
        );
        assert_eq!(w.acked(&b), HandOffProgress::Waiting);
        assert!(!w.is_stopping());
        assert_eq!(w.unacknowledged().collect::<Vec<_>>(), [&c]);
        assert_eq!(w.region_gone(&c), HandOffProgress::SendHandOff(a.clone()));
        assert!(w.is_stopping());
        assert_eq!(w.stopped(&b), HandOffProgress::Waiting);
        assert_eq!(w.stopped(&a), HandOffProgress::Done);
        assert_eq!(w.attempt(), 7);
        assert!(w.answered_by(7) && w.answered_by(0) && !w.answered_by(6));
    }

    #[test]
    fn a_hand_off_without_every_ack_in_time_is_abandoned() {
        let (a, b) = (region(1), region(2));
        let mut w = RebalanceWorker::new("s".into(), a.clone(), 1, [a.clone(), b.clone()]);
        let t = Duration::from_secs(1);
        let start = Instant::now();
        assert_eq!(w.acked(&a), HandOffProgress::Waiting);
        assert!(!w.is_overdue(start, t));
        assert!(
            w.is_overdue(start + 2 * t, t),
            "abandoned: HandOff is never sent without b's acknowledgement"
        );
        assert!(!w.is_stopping());
    }

    #[test]
    fn a_shard_that_does_not_stop_in_time_stays() {
        let (a, b) = (region(1), region(2));
        let mut w = RebalanceWorker::new("s".into(), a.clone(), 1, [a.clone(), b.clone()]);
        let t = Duration::from_secs(1);
        w.acked(&b);
        assert_eq!(w.acked(&a), HandOffProgress::SendHandOff(a.clone()));
        let sent = Instant::now();
        assert!(!w.is_overdue(sent + t, t));
        assert!(w.is_overdue(sent + 3 * t, t));
    }

    #[test]
    fn the_home_going_away_finishes_the_hand_off() {
        let (a, b) = (region(1), region(2));
        let mut w = RebalanceWorker::new("s".into(), a.clone(), 1, [a.clone(), b.clone()]);
        assert_eq!(w.region_gone(&a), HandOffProgress::Done);
    }
}
