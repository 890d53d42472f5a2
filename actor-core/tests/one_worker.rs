//! What the dispatcher does with an actor that used up its `throughput`
//! (`actor-core/src/dispatcher.rs`, `Place::Again`), seen where it is
//! deterministic: with one worker thread. The worker count is read once
//! per process, so the test runs its body in a child process of this test
//! binary with `ASYNC_STD_THREAD_COUNT=1`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use troupe_core::prelude::*;
use troupe_core::{rt, SystemSettings};

mod common;

/// Set in the child process that runs the test's body.
const CHILD: &str = "TROUPE_ONE_WORKER_CHILD";

/// Messages a receiver handles per activation in this test.
const THROUGHPUT: usize = 5;

/// How many `Counted` has handled.
#[derive(Message)]
struct Tick;

struct Counted {
    handled: Arc<AtomicUsize>,
    /// Told every tick, if set: then each turn of `Counted` wakes it.
    relay: Option<ActorRef<Sink>>,
}
impl Actor for Counted {}

#[handlers]
impl Counted {
    async fn tick(&mut self, _m: Tick) {
        self.handled.fetch_add(1, Ordering::SeqCst);
        if let Some(r) = &self.relay {
            r.tell(Tick).unwrap();
        }
    }
}

struct Sink(Arc<AtomicUsize>);
impl Actor for Sink {}

#[handlers]
impl Sink {
    async fn tick(&mut self, _m: Tick) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A sender, its receiver and what the receiver (and its relay) handled.
struct Pair {
    burster: ActorRef<Burster>,
    handled: Arc<AtomicUsize>,
    relayed: Option<Arc<AtomicUsize>>,
    sent: usize,
}

impl Pair {
    fn new(system: &ActorSystem, relay: bool) -> Pair {
        let handled = Arc::new(AtomicUsize::new(0));
        let relayed = relay.then(|| Arc::new(AtomicUsize::new(0)));
        let to = system.spawn(Counted {
            handled: handled.clone(),
            relay: relayed.clone().map(|r| system.spawn(Sink(r))),
        });
        let burster = system.spawn(Burster {
            to,
            handled: handled.clone(),
        });
        Pair {
            burster,
            handled,
            relayed,
            sent: 0,
        }
    }

    /// How many of a burst of `n` were handled when the sender ran again.
    /// Waits until all of it is handled, so that every burst starts with
    /// nothing left to run.
    async fn burst(&mut self, n: usize) -> usize {
        let (tx, rx) = oneshot::channel();
        self.burster.tell(Burst(n, tx)).unwrap();
        let seen = rx.await.unwrap();
        self.sent += n;
        let sent = self.sent;
        let (handled, relayed) = (&self.handled, &self.relayed);
        common::eventually("the whole burst handled", || {
            handled.load(Ordering::SeqCst) == sent
                && relayed
                    .as_ref()
                    .is_none_or(|r| r.load(Ordering::SeqCst) == sent)
        })
        .await;
        seen
    }
}

/// Tells `n` ticks, lets others run, and answers how many were handled
/// by the time it runs again. (Told, not asked: an ask from outside the
/// workers may run its handler on the asking thread.)
#[derive(Message)]
struct Burst(usize, oneshot::Sender<usize>);

struct Burster {
    to: ActorRef<Counted>,
    handled: Arc<AtomicUsize>,
}
impl Actor for Burster {}

#[handlers]
impl Burster {
    async fn burst(&mut self, m: Burst) {
        let before = self.handled.load(Ordering::SeqCst);
        for _ in 0..m.0 {
            self.to.tell(Tick).unwrap();
        }
        // Two yields: the first is taken by the activation's move from the
        // fast path to a task of its own, which polls it again at once.
        rt::yield_now().await;
        rt::yield_now().await;
        let _ = m.1.send(self.handled.load(Ordering::SeqCst) - before);
    }
}

/// The body, run by `an_actor_past_its_throughput_runs_again_unless_it_woke_another`
/// in a child process with one worker.
#[test]
#[ignore = "run in a child process with one worker thread"]
fn one_worker_child() {
    if std::env::var_os(CHILD).is_none() {
        // Run with the ignored tests, in this process: nothing to check here.
        return;
    }
    assert_eq!(rt::worker_threads(), 1, "needs ASYNC_STD_THREAD_COUNT=1");
    rt::block_on(common::within("the test", async {
        let system = ActorSystem::with_settings(
            "one-worker",
            SystemSettings {
                throughput: THROUGHPUT,
                ..SystemSettings::default()
            },
        )
        .unwrap();
        let mut pair = Pair::new(&system, false);
        // Up to 16 turns in a row (the next slot's bound), the receiver
        // runs again instead of going behind its sender's yielded task:
        // all of a burst is handled before the sender runs again.
        for n in [THROUGHPUT * 6, THROUGHPUT * 8 + 3, THROUGHPUT * 10] {
            for round in 0..20 {
                let seen = pair.burst(n).await;
                assert_eq!(seen, n, "burst of {n}, round {round}");
            }
        }
        // A longer burst: after its 16 turns the receiver gives the thread
        // up, so the sender runs before the rest is handled.
        let n = THROUGHPUT * 40;
        let seen = pair.burst(n).await;
        assert!(
            seen >= THROUGHPUT * 10 && seen < n,
            "burst of {n}: {seen} handled before the sender ran again"
        );
        // A receiver whose turn woke another actor goes behind what waits:
        // the actor it woke runs next, and the sender before its next turn.
        let mut relaying = Pair::new(&system, true);
        for round in 0..20 {
            let seen = relaying.burst(THROUGHPUT * 6).await;
            assert_eq!(seen, THROUGHPUT, "relaying, round {round}");
        }
        system.shutdown().await;
    }));
}

#[test]
fn an_actor_past_its_throughput_runs_again_before_its_sender() {
    common::run_in_child("one_worker_child", CHILD, 1);
}
