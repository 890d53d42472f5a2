//! The run queue: actors whose activation is claimed and waiting to run.
//!
//! Spawning a task on the executor for every activation costs an
//! allocation freed on another thread, a lock of the executor's table of
//! active tasks and a queue push: about as much as handling a small
//! message. When a sender keeps many actors busy (a message to each of
//! 10,000 entities in turn, say), each message finds its actor idle and
//! pays it. So activations go into one queue instead, and a few runner
//! tasks take them and run each on the runner's own poll. An activation
//! that handled `throughput` messages goes back to the end of the queue;
//! one that has to wait (a handler or hook that awaits) continues in a task
//! of its own.
//!
//! At most as many runners as the executor has threads are counted at
//! once, so that activations run in parallel on every thread. The queue is
//! lock-free (a segmented queue whose two ends sit on cache lines of their
//! own), so a sender and busy runners taking its activations do not pass a
//! lock's cache line back and forth for every message: with a mutex, a
//! sender that kept runners just busy enough spent a fifth of its time on
//! that line (BENCHMARKS.md, "Round robin: two regimes"). When the runners
//! keep up and end between two messages, the next message still starts a
//! runner (the count's line and a task spawn). A push that has reserved
//! its place and not yet written it can make a runner spin (yielding its
//! thread) until it has: a few instructions, unless the pushing thread is
//! descheduled in between. A runner takes
//! one activation at a time, so one whose handler blocks its thread holds
//! up no other (the other runners take the rest of the queue; never block
//! in a handler all the same, the guide's "How actors run"). A runner
//! yields to the executor after [`RUN_BATCH`] activations, so that other
//! tasks (I/O, timers) keep their turn.

use crate::cell::AnyCell;
use crate::rt;
use crate::sync::{fence, AtomicUsize, Ordering};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context as TaskContext, Poll};

/// Most activations one runner runs before it yields.
const RUN_BATCH: usize = 64;

// Under `troupe_loom` this holds loom objects, which only work inside a
// model: the loom build runs the model tests alone (`.ci/run`).
static RUN_QUEUE: LazyLock<RunQueue<Arc<dyn AnyCell>>> =
    LazyLock::new(|| RunQueue::new(rt::worker_threads()));

/// Schedules the activation claimed for `cell` (its `SCHEDULED` bit set
/// by this caller).
pub(crate) fn enqueue(cell: Arc<dyn AnyCell>) {
    if RUN_QUEUE.push(cell) {
        rt::spawn_detached(Runner);
    }
}

/// Items waiting to run and the count of runners taking them, apart from
/// what an item is and how a runner starts, so that loom can check the
/// protocol: every pushed item is taken by a counted runner, and at most
/// `max_runners` are counted at once.
///
/// The protocol is a store-then-load on each side: a push adds its item,
/// then reads the count (and starts a runner if there is room); a runner
/// that found the queue empty lowers the count, then looks at the queue
/// again. The fences order each store before its load, so that a runner
/// the push saw counted looks at the queue after the item is in it: the
/// push either finds room and starts a runner, or every runner it counted
/// looks again before it ends (and stays, or finds room for another, if
/// the item is still there). The fences do not rely on the queue's own
/// orderings.
pub(crate) struct RunQueue<T> {
    queue: Queue<T>,
    /// Runners started and not yet ended.
    runners: AtomicUsize,
    max_runners: usize,
}

impl<T> RunQueue<T> {
    pub(crate) fn new(max_runners: usize) -> Self {
        RunQueue {
            queue: Queue::new(),
            runners: AtomicUsize::new(0),
            max_runners: max_runners.max(1),
        }
    }

    /// Queues `item`. True when the caller has to start a runner (already
    /// counted).
    pub(crate) fn push(&self, item: T) -> bool {
        self.queue.push(item);
        fence(Ordering::SeqCst);
        self.claim_runner()
    }

    /// The next item for a counted runner. `None` when the queue is empty:
    /// the runner is then no longer counted and has to end.
    pub(crate) fn next(&self) -> Option<T> {
        loop {
            if let Some(item) = self.queue.pop() {
                return Some(item);
            }
            if !self.retire() {
                return None;
            }
        }
    }

    /// Ends a counted runner. True when items wait and there is room: the
    /// runner is counted again and goes on (at worst one runner more than
    /// needed, which finds nothing and ends).
    pub(crate) fn retire(&self) -> bool {
        let was = self.runners.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(was > 0, "a runner retired twice");
        fence(Ordering::SeqCst);
        !self.queue.is_empty() && self.claim_runner()
    }

    /// Counts one more runner, unless `max_runners` are counted.
    fn claim_runner(&self) -> bool {
        let mut n = self.runners.load(Ordering::SeqCst);
        while n < self.max_runners {
            match self
                .runners
                .compare_exchange_weak(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
        false
    }
}

/// The queue itself: a well-kept lock-free queue, or under loom a
/// stand-in with the same shape (see below).
#[cfg(not(troupe_loom))]
struct Queue<T>(concurrent_queue::ConcurrentQueue<T>);

#[cfg(not(troupe_loom))]
impl<T> Queue<T> {
    fn new() -> Self {
        Queue(concurrent_queue::ConcurrentQueue::unbounded())
    }
    fn push(&self, item: T) {
        // An unbounded queue refuses only once closed, and this one never is.
        if self.0.push(item).is_err() {
            unreachable!("the run queue is never closed");
        }
    }
    fn pop(&self) -> Option<T> {
        self.0.pop().ok()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Under loom, a queue shaped like concurrent-queue's, made of atomics
/// that loom models: a push reserves a place with an RMW of `tail` and
/// then marks it written; a pop takes the place with a CAS of `head` and
/// waits until it is written; `is_empty` is two plain loads. Every one
/// of them only acquires or releases (concurrent-queue's tail and head
/// RMWs are `SeqCst`, but we do not rely on that), and there is no lock
/// (a loom mutex orders everything), so that the fences are what orders
/// the two sides of the protocol: the model fails without either. The items themselves sit behind a std mutex,
/// which loom does not see: the atomics carry the ordering. A model
/// pushes at most [`PLACES`] items.
#[cfg(troupe_loom)]
struct Queue<T> {
    head: AtomicUsize,
    tail: AtomicUsize,
    written: [loom::sync::atomic::AtomicBool; PLACES],
    items: std::sync::Mutex<[Option<T>; PLACES]>,
}

#[cfg(troupe_loom)]
const PLACES: usize = 4;

#[cfg(troupe_loom)]
impl<T> Queue<T> {
    fn new() -> Self {
        Queue {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            written: std::array::from_fn(|_| loom::sync::atomic::AtomicBool::new(false)),
            items: std::sync::Mutex::new(std::array::from_fn(|_| None)),
        }
    }
    fn push(&self, item: T) {
        let at = self.tail.fetch_add(1, Ordering::AcqRel);
        assert!(at < PLACES, "a model pushes at most PLACES items");
        self.items.lock().unwrap()[at] = Some(item);
        self.written[at].store(true, Ordering::Release);
    }
    fn pop(&self) -> Option<T> {
        loop {
            let head = self.head.load(Ordering::Acquire);
            if head == self.tail.load(Ordering::Acquire) {
                return None;
            }
            if self
                .head
                .compare_exchange(head, head + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                while !self.written[head].load(Ordering::Acquire) {
                    loom::thread::yield_now();
                }
                return self.items.lock().unwrap()[head].take();
            }
        }
    }
    fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Acquire)
    }
}

/// A task that runs queued activations (see the module's documentation).
struct Runner;

impl Future for Runner {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        let counted = Counted;
        for _ in 0..RUN_BATCH {
            let Some(cell) = RUN_QUEUE.next() else {
                std::mem::forget(counted);
                return Poll::Ready(());
            };
            let run = AssertUnwindSafe(|| cell.clone().run_in(cx));
            if let Err(p) = std::panic::catch_unwind(run) {
                tracing::error!(
                    actor = %cell.core().path(),
                    "bug: panic in an activation: {}",
                    crate::cell::panic_message(&*p)
                );
            }
        }
        // Still counted as a runner: it comes back after the executor's
        // other tasks.
        cx.waker().wake_by_ref();
        std::mem::forget(counted);
        Poll::Pending
    }
}

/// The runner's place in the count while it polls. Should the runner
/// itself panic (outside an activation, which is caught), it gives its
/// place to a new runner if activations wait, so that no claimed actor is
/// left without one.
struct Counted;

impl Drop for Counted {
    fn drop(&mut self) {
        if RUN_QUEUE.retire() {
            rt::spawn_detached(Runner);
        }
    }
}

#[cfg(all(test, troupe_loom))]
mod tests {
    use super::RunQueue;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;

    /// Runs a counted runner to its end, as `Runner` does.
    fn runner(q: Arc<RunQueue<usize>>, ran: Arc<[AtomicUsize; 3]>) {
        while let Some(i) = q.next() {
            assert!(q.runners.load(Ordering::SeqCst) <= q.max_runners);
            ran[i].fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Starts a runner thread when `push` says to.
    fn push(
        q: &Arc<RunQueue<usize>>,
        ran: &Arc<[AtomicUsize; 3]>,
        i: usize,
    ) -> Option<loom::thread::JoinHandle<()>> {
        let (q2, ran) = (q.clone(), ran.clone());
        q.push(i)
            .then(|| loom::thread::spawn(move || runner(q2, ran)))
    }

    /// Model-checks the counting protocol under every interleaving:
    /// `RUSTFLAGS="--cfg troupe_loom" cargo test -p troupe-core --lib run_queue`.
    /// A runner takes a first item while a second sender and the first
    /// push one each (each starting a runner when told to); afterwards
    /// every item ran exactly once, none is left in the queue and no
    /// runner is counted.
    fn model(max: usize) {
        let mut builder = loom::model::Builder::new();
        // Main, the second sender and up to three runners.
        builder.max_threads = 5;
        if max > 1 {
            // Two runners at once take minutes at three preemptions
            // (`.ci/run`'s bound) and seconds at two; one runner, checked
            // at three, covers the orderings with more preemptions.
            builder.preemption_bound = Some(2);
        }
        builder.check(move || {
            let q = Arc::new(RunQueue::new(max));
            let ran: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
            let first = push(&q, &ran, 0).expect("the first push starts a runner");
            let sender = {
                let (q, ran) = (q.clone(), ran.clone());
                loom::thread::spawn(move || push(&q, &ran, 1).map(|r| r.join().unwrap()))
            };
            let last = push(&q, &ran, 2);
            first.join().unwrap();
            sender.join().unwrap();
            if let Some(r) = last {
                r.join().unwrap();
            }
            for (i, n) in ran.iter().enumerate() {
                assert_eq!(n.load(Ordering::SeqCst), 1, "item {i}");
            }
            assert!(q.queue.is_empty(), "an item was left without a runner");
            assert_eq!(q.runners.load(Ordering::SeqCst), 0);
        });
    }

    #[test]
    fn loom_one_runner_at_most() {
        model(1);
    }

    #[test]
    fn loom_two_runners_at_most() {
        model(2);
    }
}
