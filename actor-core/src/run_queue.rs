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
//! At most as many runners as the executor has threads are scheduled at
//! once, so that activations run in parallel on every thread. A runner
//! takes [`TAKE`] activations per lock of the queue, so a handler that
//! blocks its thread holds up at most the few taken with it (the other
//! runners take the rest of the queue). Those few are not taken back: a
//! handler that blocks its thread until another actor has run can wait
//! for ever if that actor was taken with it, one more reason never to
//! block in a handler (the guide's "How actors run"). A runner yields to the executor
//! after [`RUN_BATCH`] activations, so that other tasks (I/O, timers) keep
//! their turn.

use crate::cell::AnyCell;
use crate::dead_letters::lock;
use crate::rt;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

/// Most activations one runner runs before it yields.
const RUN_BATCH: usize = 64;

/// Activations a runner takes from the queue at a time: one lock for
/// several, and at most this many wait behind one that blocks its thread.
pub(crate) const TAKE: usize = 8;

struct RunQueue {
    queue: VecDeque<Arc<dyn AnyCell>>,
    /// Runners scheduled or running.
    runners: usize,
}

static RUN_QUEUE: Mutex<RunQueue> = Mutex::new(RunQueue {
    queue: VecDeque::new(),
    runners: 0,
});

/// Schedules the activation claimed for `cell` (its `SCHEDULED` bit set
/// by this caller).
pub(crate) fn enqueue(cell: Arc<dyn AnyCell>) {
    let mut q = lock(&RUN_QUEUE);
    q.queue.push_back(cell);
    if q.runners < rt::worker_threads() {
        q.runners += 1;
        drop(q);
        rt::spawn_detached(Runner);
    }
}

/// A task that runs queued activations (see the module's documentation).
struct Runner;

impl Future for Runner {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        let mut taken = Taken(VecDeque::with_capacity(TAKE));
        for _ in 0..RUN_BATCH / TAKE {
            {
                let mut q = lock(&RUN_QUEUE);
                if q.queue.is_empty() {
                    q.runners -= 1;
                    return Poll::Ready(());
                }
                let n = q.queue.len().min(TAKE);
                taken.0.extend(q.queue.drain(..n));
            }
            while let Some(cell) = taken.0.pop_front() {
                let run = AssertUnwindSafe(|| cell.clone().run_in(cx));
                if let Err(p) = std::panic::catch_unwind(run) {
                    tracing::error!(
                        actor = %cell.core().path(),
                        "bug: panic in an activation: {}",
                        crate::cell::panic_message(&*p)
                    );
                }
            }
        }
        // Still counted as a runner: it comes back after the executor's
        // other tasks.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Activations a runner has taken and not run yet. Should the runner
/// itself panic (outside an activation, which is caught), they go back to
/// the queue with the runner's place, so that no claimed actor is left
/// without an activation.
struct Taken(VecDeque<Arc<dyn AnyCell>>);

impl Drop for Taken {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let mut q = lock(&RUN_QUEUE);
        while let Some(cell) = self.0.pop_back() {
            q.queue.push_front(cell);
        }
        let respawn = !q.queue.is_empty();
        if !respawn {
            q.runners -= 1;
        }
        drop(q);
        if respawn {
            rt::spawn_detached(Runner);
        }
    }
}
