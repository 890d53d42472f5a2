//! The dispatcher (`actor-core/src/dispatcher.rs`): a handler that blocks
//! its thread holds up no other activation. In a process of its own (a
//! test binary of its own), since it blocks one of the dispatcher's worker
//! threads for seconds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::rt;

mod common;

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

/// An activation that blocks its thread holds up no other: another worker
/// takes the rest of the queue on another thread.
#[test]
fn a_blocking_activation_holds_up_no_other() {
    // Needs a second worker thread (the dispatcher's count:
    // `ASYNC_STD_THREAD_COUNT`, else the available parallelism).
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
        while count.load(Ordering::Relaxed) < 200 {
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "the queue waited for the blocked actor: {} of 200 ran",
                count.load(Ordering::Relaxed)
            );
            rt::sleep(Duration::from_millis(5)).await;
        }
        common::eventually("every actor ran", || count.load(Ordering::Relaxed) >= 201).await;
        assert_eq!(slow.ask(Done).await.unwrap(), 201);
        system.shutdown().await;
    });
}
