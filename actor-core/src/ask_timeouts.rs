//! Deadlines of pending asks.
//!
//! Registering an `async-io` timer per ask costs a system call (the reactor
//! is notified of every new timer), which would dominate a local ask. Asks
//! instead register here, served by one driver task that sleeps until the
//! earliest deadline. Deadlines are rounded up to a 10 ms tick and kept in
//! one bucket per tick; a registration is a slot in a slab that knows its
//! place in its bucket, so registering and deregistering are a lock, one
//! lookup among the few ticks pending (not among all pending asks) and a
//! push or swap-remove, with no allocation once the slab and the buckets
//! have grown. Since ask timeouts are mostly equal, a new deadline is almost
//! never earlier than the one the driver sleeps towards.

use crate::dead_letters::lock;
use crate::rt;
use event_listener::Event;
use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::task::Waker;
use std::time::{Duration, Instant};

/// Granularity of ask deadlines.
const TICK: Duration = Duration::from_millis(10);
/// `TICK` in nanoseconds; it divides a second, so that ticks are computed
/// with 64-bit arithmetic (no 128-bit division per ask).
const TICK_NANOS: u64 = TICK.as_nanos() as u64;
const TICKS_PER_SEC: u64 = 1_000_000_000 / TICK_NANOS;
const _: () = assert!(TICKS_PER_SEC * TICK_NANOS == 1_000_000_000);

/// `Slot::pos` of a deadline the driver has already fired.
const FIRED: u32 = u32::MAX;

struct Wheel {
    base: Instant,
    state: Mutex<State>,
    /// Wakes the driver when an earlier deadline arrives.
    earlier: Event,
}

#[derive(Default)]
struct State {
    /// One slot per live registration (free ones are listed in `free`).
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// The bucket of the tick most recently registered, kept out of
    /// `buckets`: asks made close together share a tick, so registering and
    /// deregistering mostly find their bucket here without a search.
    hot: Option<(u64, Vec<u32>)>,
    /// Slots waiting for each other tick. Buckets emptied by answered asks
    /// stay until the driver passes or skips them.
    buckets: BTreeMap<u64, Vec<u32>>,
    /// The tick the driver sleeps until (`None`: it waits for work).
    target: Option<u64>,
    driver_started: bool,
}

struct Slot {
    tick: u64,
    /// Index in `buckets[tick]`, or `FIRED`.
    pos: u32,
    waker: Option<Waker>,
}

impl State {
    /// The bucket of `tick`, made the hot one.
    fn hot_bucket(&mut self, tick: u64) -> &mut Vec<u32> {
        if self.hot.as_ref().is_none_or(|(t, _)| *t != tick) {
            let bucket = self.buckets.remove(&tick).unwrap_or_default();
            if let Some((t, old)) = self.hot.replace((tick, bucket)) {
                self.buckets.insert(t, old);
            }
        }
        &mut self.hot.as_mut().expect("hot bucket just set").1
    }

    /// The bucket of `tick`, if it exists.
    fn bucket(&mut self, tick: u64) -> Option<&mut Vec<u32>> {
        match &mut self.hot {
            Some((t, b)) if *t == tick => Some(b),
            _ => self.buckets.get_mut(&tick),
        }
    }
}

fn wheel() -> &'static Wheel {
    static WHEEL: OnceLock<Wheel> = OnceLock::new();
    WHEEL.get_or_init(|| Wheel {
        base: Instant::now(),
        state: Mutex::new(State::default()),
        earlier: Event::new(),
    })
}

/// A registered deadline; dropping it deregisters.
pub(crate) struct Registration {
    slot: u32,
}

impl Wheel {
    /// The first tick at or after `at`: a deadline is never served early.
    fn tick_of(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.base);
        since.as_secs() * TICKS_PER_SEC + u64::from(since.subsec_nanos()).div_ceil(TICK_NANOS)
    }

    /// The last tick at or before `at`: every deadline of this tick or an
    /// earlier one has passed.
    fn ticks_passed(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.base);
        since.as_secs() * TICKS_PER_SEC + u64::from(since.subsec_nanos()) / TICK_NANOS
    }

    fn instant_of(&self, tick: u64) -> Instant {
        self.base + Duration::from_nanos(tick * TICK_NANOS)
    }
}

/// Wakes `waker` at (or up to one tick after) `deadline`.
pub(crate) fn register(deadline: Instant, waker: &Waker) -> Registration {
    let w = wheel();
    let tick = w.tick_of(deadline);
    let waker = waker.clone();
    let mut guard = lock(&w.state);
    let st = &mut *guard;
    let slot = Slot {
        tick,
        pos: 0,
        waker: Some(waker),
    };
    let index = match st.free.pop() {
        Some(i) => {
            st.slots[i as usize] = slot;
            i
        }
        None => {
            st.slots.push(slot);
            (st.slots.len() - 1) as u32
        }
    };
    let bucket = st.hot_bucket(tick);
    let pos = bucket.len() as u32;
    bucket.push(index);
    st.slots[index as usize].pos = pos;
    if !st.driver_started {
        st.driver_started = true;
        rt::spawn(drive());
    } else if st.target.is_none_or(|t| tick < t) {
        w.earlier.notify(1);
    }
    Registration { slot: index }
}

impl Registration {
    /// Replaces the waker if the task polling the ask has changed.
    pub(crate) fn update(&self, waker: &Waker) {
        let mut st = lock(&wheel().state);
        if let Some(w) = st.slots[self.slot as usize].waker.as_mut() {
            if !w.will_wake(waker) {
                *w = waker.clone();
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let waker = {
            let mut guard = lock(&wheel().state);
            let st = &mut *guard;
            let slot = &mut st.slots[self.slot as usize];
            let waker = slot.waker.take();
            let (tick, pos) = (slot.tick, slot.pos);
            if pos != FIRED {
                let bucket = st.bucket(tick).expect("a waiting slot's bucket exists");
                bucket.swap_remove(pos as usize);
                if let Some(&moved) = bucket.get(pos as usize) {
                    st.slots[moved as usize].pos = pos;
                }
            }
            st.free.push(self.slot);
            waker
        };
        // Dropped outside the lock (a waker's drop may run arbitrary code).
        drop(waker);
    }
}

/// The driver: wakes expired asks, then sleeps until the next deadline or
/// until an earlier one is registered.
async fn drive() {
    let w = wheel();
    let mut wake = Vec::new();
    loop {
        let listener = w.earlier.listen();
        let next = {
            let mut guard = lock(&w.state);
            let st = &mut *guard;
            let now = w.ticks_passed(Instant::now());
            if let Some((t, b)) = st.hot.take() {
                st.buckets.insert(t, b);
            }
            let later = st.buckets.split_off(&(now + 1));
            let expired = std::mem::replace(&mut st.buckets, later);
            for index in expired.into_values().flatten() {
                let slot = &mut st.slots[index as usize];
                slot.pos = FIRED;
                if let Some(waker) = slot.waker.take() {
                    wake.push(waker);
                }
            }
            // Buckets emptied by answered asks are not worth a wake-up.
            while st
                .buckets
                .first_key_value()
                .is_some_and(|(_, b)| b.is_empty())
            {
                st.buckets.pop_first();
            }
            let next = st.buckets.keys().next().copied();
            st.target = next;
            next
        };
        for waker in wake.drain(..) {
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
            // A dropped registration leaves nothing behind but an empty
            // bucket and a free slot.
            let far = Instant::now() + Duration::from_secs(3600);
            let tick = wheel().tick_of(far);
            let a = register(far, Waker::noop());
            let b = register(far, Waker::noop());
            let c = register(far, Waker::noop());
            drop(a);
            {
                let mut st = lock(&wheel().state);
                let bucket = st
                    .bucket(tick)
                    .expect("bucket of live registrations")
                    .clone();
                assert_eq!(bucket.len(), 2);
                for (pos, &i) in bucket.iter().enumerate() {
                    assert_eq!(st.slots[i as usize].pos as usize, pos);
                }
            }
            drop(c);
            drop(b);
            let mut st = lock(&wheel().state);
            // (The driver may have dropped the emptied bucket meanwhile.)
            assert!(st.bucket(tick).is_none_or(|b| b.is_empty()));
            assert!(st.slots.iter().all(|s| s.waker.is_none() || s.tick != tick));
        });
    }
}
