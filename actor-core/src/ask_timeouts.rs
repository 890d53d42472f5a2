//! Deadlines of pending asks.
//!
//! Registering an `async-io` timer per ask costs a system call (the reactor
//! is notified of every new timer), which would dominate a local ask. Asks
//! instead register here: an ordered map of deadlines, rounded up to a
//! 10 ms tick, served by one driver task that sleeps until the earliest
//! one. Since ask timeouts are mostly equal, a new deadline is almost never
//! earlier than the one the driver sleeps towards, so registering is a lock
//! and a map insert, and an answered ask removes its entry the same way.

use crate::dead_letters::lock;
use crate::rt;
use event_listener::Event;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

/// Granularity of ask deadlines.
const TICK: Duration = Duration::from_millis(10);

struct Wheel {
    base: Instant,
    state: Mutex<State>,
    /// Wakes the driver when an earlier deadline arrives.
    earlier: Event,
    next_id: AtomicU64,
}

#[derive(Default)]
struct State {
    /// Waiting asks by (tick, id).
    waiting: BTreeMap<(u64, u64), Waker>,
    /// The tick the driver sleeps until (`None`: it waits for work).
    target: Option<u64>,
    driver_started: bool,
}

fn wheel() -> &'static Wheel {
    static WHEEL: OnceLock<Wheel> = OnceLock::new();
    WHEEL.get_or_init(|| Wheel {
        base: Instant::now(),
        state: Mutex::new(State::default()),
        earlier: Event::new(),
        next_id: AtomicU64::new(0),
    })
}

/// A registered deadline; dropping it deregisters.
pub(crate) struct Registration {
    key: (u64, u64),
}

impl Wheel {
    /// The first tick at or after `at`: a deadline is never served early.
    fn tick_of(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.base);
        since.as_nanos().div_ceil(TICK.as_nanos()) as u64
    }

    /// The last tick at or before `at`: every deadline of this tick or an
    /// earlier one has passed.
    fn ticks_passed(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.base);
        (since.as_nanos() / TICK.as_nanos()) as u64
    }

    fn instant_of(&self, tick: u64) -> Instant {
        self.base + Duration::from_millis(tick * TICK.as_millis() as u64)
    }
}

/// Wakes `waker` at (or up to one tick after) `deadline`.
pub(crate) fn register(deadline: Instant, waker: &Waker) -> Registration {
    let w = wheel();
    let key = (
        w.tick_of(deadline),
        w.next_id.fetch_add(1, Ordering::Relaxed),
    );
    let mut st = lock(&w.state);
    st.waiting.insert(key, waker.clone());
    if !st.driver_started {
        st.driver_started = true;
        rt::spawn(drive());
    } else if st.target.is_none_or(|t| key.0 < t) {
        w.earlier.notify(1);
    }
    Registration { key }
}

impl Registration {
    /// Replaces the waker if the task polling the ask has changed.
    pub(crate) fn update(&self, waker: &Waker) {
        let mut st = lock(&wheel().state);
        if let Some(w) = st.waiting.get_mut(&self.key) {
            if !w.will_wake(waker) {
                *w = waker.clone();
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        lock(&wheel().state).waiting.remove(&self.key);
    }
}

/// The driver: wakes expired asks, then sleeps until the next deadline or
/// until an earlier one is registered.
async fn drive() {
    let w = wheel();
    loop {
        let listener = w.earlier.listen();
        let (expired, next) = {
            let mut st = lock(&w.state);
            let now = w.ticks_passed(Instant::now());
            let later = st.waiting.split_off(&(now + 1, 0));
            let expired = std::mem::replace(&mut st.waiting, later);
            let next = st.waiting.keys().next().map(|k| k.0);
            st.target = next;
            (expired, next)
        };
        for (_, waker) in expired {
            waker.wake();
        }
        match next {
            Some(tick) => {
                futures_lite::future::or(
                    async {
                        rt::timer_at(w.instant_of(tick)).await;
                    },
                    listener,
                )
                .await
            }
            None => listener.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_fire_in_order_and_dropped_ones_do_not() {
        rt::block_on(async {
            let fired = std::sync::Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for (i, ms) in [(0u32, 60u64), (1, 20), (2, 40)] {
                let fired = fired.clone();
                tasks.push(rt::spawn(async move {
                    let deadline = Instant::now() + Duration::from_millis(ms);
                    let mut reg = None;
                    futures_lite::future::poll_fn(|cx| {
                        if Instant::now() >= deadline {
                            return std::task::Poll::Ready(());
                        }
                        reg.get_or_insert_with(|| register(deadline, cx.waker()));
                        std::task::Poll::Pending
                    })
                    .await;
                    lock(&fired).push(i);
                }));
            }
            for t in tasks {
                t.await;
            }
            assert_eq!(*lock(&fired), vec![1, 2, 0]);
            // A dropped registration leaves nothing behind.
            let far = Instant::now() + Duration::from_secs(3600);
            let key = register(far, Waker::noop()).key;
            assert!(!lock(&wheel().state).waiting.contains_key(&key));
        });
    }
}
