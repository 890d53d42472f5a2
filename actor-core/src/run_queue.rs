//! The run queue: actors whose activation is claimed and waiting to run.
//!
//! Spawning a task on the executor for every activation costs an
//! allocation freed on another thread, a lock of the executor's table of
//! active tasks and a queue push: about as much as handling a small
//! message. When a sender keeps many actors busy (a message to each of
//! 10,000 entities in turn, say), each message finds its actor idle and
//! pays it. So activations go into one queue instead, and a few runner
//! tasks take them one by one and run each on the runner's own poll; an
//! activation that has to wait (a handler or hook that awaits, a full
//! `throughput`) continues in a task of its own.
//!
//! At most as many runners as the executor has threads are scheduled at
//! once, so that activations run in parallel on every thread. A runner
//! takes [`TAKE`] activations per lock of the queue, so an activation that
//! blocks its thread holds up at most the few taken with it; the other
//! runners take the rest of the queue. A runner yields to the executor
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
const TAKE: usize = 8;

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
        let mut taken = Vec::with_capacity(TAKE);
        for _ in 0..RUN_BATCH / TAKE {
            {
                let mut q = lock(&RUN_QUEUE);
                if q.queue.is_empty() {
                    q.runners -= 1;
                    return Poll::Ready(());
                }
                let n = q.queue.len().min(TAKE);
                taken.extend(q.queue.drain(..n));
            }
            for cell in taken.drain(..) {
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

#[cfg(test)]
mod tests {
    use super::TAKE;
    use crate::prelude::*;
    use crate::rt;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[derive(Message)]
    struct Work(Duration);

    #[derive(Message)]
    #[message(reply = u64)]
    struct Done;

    struct Worker(Arc<AtomicU64>);
    impl Actor for Worker {}

    #[handlers]
    impl Worker {
        async fn work(&mut self, m: Work) {
            // Blocks its thread, as a careless handler would.
            std::thread::sleep(m.0);
            self.0.fetch_add(1, Ordering::Relaxed);
        }
        async fn done(&mut self, _m: Done) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    /// An activation that blocks its thread holds up no more than the few
    /// taken from the queue with it: another runner takes the rest on
    /// another thread.
    #[test]
    fn a_blocking_activation_holds_up_at_most_the_few_taken_with_it() {
        if rt::worker_threads() < 2 {
            return;
        }
        rt::block_on(async {
            let system = ActorSystem::new("run-queue").unwrap();
            let count = Arc::new(AtomicU64::new(0));
            let slow = system.spawn(Worker(count.clone()));
            let fast: Vec<_> = (0..200)
                .map(|_| system.spawn(Worker(count.clone())))
                .collect();
            for f in &fast {
                assert_eq!(f.ask(Done).await.unwrap(), 0);
            }
            slow.tell(Work(Duration::from_secs(3))).unwrap();
            let started = Instant::now();
            for f in &fast {
                f.tell(Work(Duration::ZERO)).unwrap();
            }
            let most = 200 - (TAKE as u64 - 1);
            while count.load(Ordering::Relaxed) < most {
                assert!(
                    started.elapsed() < Duration::from_secs(2),
                    "the queue waited for the blocked actor: {} of 200 ran",
                    count.load(Ordering::Relaxed)
                );
                rt::sleep(Duration::from_millis(5)).await;
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while count.load(Ordering::Relaxed) < 201 {
                assert!(Instant::now() < deadline, "the queue stalled");
                rt::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(slow.ask(Done).await.unwrap(), 201);
            system.shutdown().await;
        });
    }
}
