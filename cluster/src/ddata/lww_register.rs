//! A last-writer-wins register.

use super::crdt::ReplicatedData;
use crate::member::UniqueAddress;
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

/// A last-writer-wins register (LWW-Register): a value with the node that
/// wrote it and a timestamp. A merge keeps the value with the highest
/// timestamp; on equal timestamps, the value written by the lowest node
/// (in [`UniqueAddress`] order) wins, as in Akka.
///
/// With the [`default_clock`] the timestamps are wall-clock milliseconds,
/// so concurrent writes within the clock skew between nodes are decided by
/// the clocks, not by causality: use it where that is acceptable, or where
/// there is a single writer. A custom clock (for example a version number
/// from a database row) can be passed to [`LWWRegister::set_with_clock`].
///
/// Merge is only a true CRDT merge if one node never writes two different
/// values with the same timestamp; both built-in clocks guarantee that for
/// writes made on one replica, since they move strictly away from the
/// current timestamp.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LWWRegister<T> {
    /// The current value.
    value: T,
    /// The node that wrote `value`.
    node: UniqueAddress,
    /// When `value` was written, by the writer's clock.
    timestamp: i64,
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        // A clock before 1970 is broken; the `current + 1` below still
        // keeps the register moving forward.
        .unwrap_or(0)
}

/// The default clock: the current time in milliseconds, or `current + 1` if
/// that is later, so that a node's successive writes always win over its
/// earlier ones even within one millisecond or after a clock step back.
pub fn default_clock<T>(current: i64, _value: &T) -> i64 {
    now_ms().max(current.saturating_add(1))
}

/// A clock for first-writer-wins: it counts backwards, the minimum of
/// minus the current time in milliseconds and `current - 1`, so that the
/// earliest write has the highest timestamp.
pub fn reverse_clock<T>(current: i64, _value: &T) -> i64 {
    now_ms().saturating_neg().min(current.saturating_sub(1))
}

impl<T> LWWRegister<T> {
    /// A register holding `value`, written by `node` (the local node) at
    /// the [`default_clock`] time.
    pub fn new(node: &UniqueAddress, value: T) -> Self {
        LWWRegister::with_clock(node, value, default_clock)
    }

    /// A register holding `value`, written by `node` (the local node) at
    /// `clock(0, &value)`.
    pub fn with_clock(node: &UniqueAddress, value: T, clock: impl FnOnce(i64, &T) -> i64) -> Self {
        let timestamp = clock(0, &value);
        LWWRegister {
            value,
            node: node.clone(),
            timestamp,
        }
    }

    /// The current value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The current value, consuming the register.
    pub fn into_value(self) -> T {
        self.value
    }

    /// The node that wrote the current value.
    pub fn updated_by(&self) -> &UniqueAddress {
        &self.node
    }

    /// The timestamp of the current value.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// Writes `value` as `node` (the local node) at the [`default_clock`]
    /// time.
    pub fn set(&mut self, node: &UniqueAddress, value: T) {
        self.set_with_clock(node, value, default_clock);
    }

    /// Writes `value` as `node` (the local node) at
    /// `clock(current timestamp, &value)`. The clock should return a value
    /// beyond the current timestamp (higher for last-writer-wins), or the
    /// write may lose to the value it replaces when merged elsewhere.
    pub fn set_with_clock(
        &mut self,
        node: &UniqueAddress,
        value: T,
        clock: impl FnOnce(i64, &T) -> i64,
    ) {
        self.timestamp = clock(self.timestamp, &value);
        self.value = value;
        self.node = node.clone();
    }
}

impl<T: Clone + PartialEq + Send + Sync + 'static> ReplicatedData for LWWRegister<T> {
    fn merge(&self, other: &Self) -> Self {
        let other_wins = match other.timestamp.cmp(&self.timestamp) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            // Same time: the lower node wins, as in Akka.
            std::cmp::Ordering::Equal => other.node < self.node,
        };
        if other_wins {
            other.clone()
        } else {
            self.clone()
        }
    }
    // No pruning: the node is only a tie-break, not accumulated state.
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddata::crdt::testing::{check_laws, node, run, steps};
    use proptest::prelude::*;

    #[test]
    fn later_write_wins() {
        let (a, b) = (node(1), node(2));
        let x = LWWRegister::with_clock(&a, "x", |_, _| 10);
        let mut y = x.clone();
        y.set_with_clock(&b, "y", |t, _| t + 5);
        assert_eq!(y.timestamp(), 15);
        assert_eq!(x.merge(&y).value(), &"y");
        assert_eq!(y.merge(&x).value(), &"y");
        assert_eq!(x.merge(&y).updated_by(), &b);
    }

    #[test]
    fn ties_go_to_the_lowest_node() {
        let (a, b) = (node(1), node(2));
        assert!(a < b);
        let x = LWWRegister::with_clock(&b, "from b", |_, _| 7);
        let y = LWWRegister::with_clock(&a, "from a", |_, _| 7);
        assert_eq!(x.merge(&y).value(), &"from a");
        assert_eq!(y.merge(&x).value(), &"from a");
    }

    #[test]
    fn default_clock_moves_forward_even_past_the_wall_clock() {
        let a = node(1);
        let far_future = now_ms() + 1_000_000;
        let mut r = LWWRegister::with_clock(&a, 1, |_, _| far_future);
        r.set(&a, 2);
        assert_eq!(r.timestamp(), far_future + 1);
        let before = now_ms();
        let fresh = LWWRegister::new(&a, 0);
        assert!(fresh.timestamp() >= before);
        // A node's own later write always wins over its earlier one.
        let old = r.clone();
        r.set(&a, 3);
        assert_eq!(old.merge(&r).value(), &3);
    }

    #[test]
    fn reverse_clock_keeps_the_first_write() {
        let (a, b) = (node(1), node(2));
        let first = LWWRegister::with_clock(&b, "first", reverse_clock);
        let mut second = first.clone();
        second.set_with_clock(&a, "second", reverse_clock);
        assert!(second.timestamp() < first.timestamp());
        assert_eq!(first.merge(&second).value(), &"first");
        assert_eq!(second.merge(&first).value(), &"first");
    }

    #[test]
    fn serde_round_trip() {
        let r = LWWRegister::new(&node(1), String::from("v"));
        let json = serde_json::to_string(&r).unwrap();
        let bytes = rmp_serde::to_vec(&r).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<LWWRegister<String>>(&bytes).unwrap(),
            r
        );
        assert_eq!(
            serde_json::from_str::<LWWRegister<String>>(&json).unwrap(),
            r
        );
        assert_eq!(r.clone().into_value(), "v");
    }

    /// A register that may not have been written yet, so that replicas can
    /// start empty in the generated runs.
    #[derive(Debug, Clone, PartialEq, Default)]
    struct Maybe(Option<LWWRegister<u8>>);

    impl ReplicatedData for Maybe {
        fn merge(&self, other: &Self) -> Self {
            match (&self.0, &other.0) {
                (Some(x), Some(y)) => Maybe(Some(x.merge(y))),
                (x, y) => Maybe(x.clone().or_else(|| y.clone())),
            }
        }
    }

    proptest! {
        #[test]
        fn merge_laws_and_monotonic(s in steps((0..4u8, 0..3i64))) {
            // Small clock jumps so that equal timestamps, and therefore the
            // node tie-break, come up often.
            let replicas = run::<Maybe, (u8, i64)>(
                &s,
                |r, n, &(v, jump)| match &mut r.0 {
                    Some(reg) => reg.set_with_clock(n, v, |t, _| t + 1 + jump),
                    None => r.0 = Some(LWWRegister::with_clock(n, v, |_, _| 1 + jump)),
                },
                |before, incoming, after| {
                    // The winner is one of the inputs, at least as recent as both.
                    prop_assert!(after == before || after == incoming);
                    for side in [before, incoming] {
                        if let (Some(s), Some(m)) = (&side.0, &after.0) {
                            prop_assert!(m.timestamp() >= s.timestamp());
                        }
                        prop_assert!(side.0.is_none() || after.0.is_some());
                    }
                    Ok(())
                },
            )?;
            let [a, b, c] = &replicas;
            check_laws(a, b, c)?;
        }
    }
}
