//! Asks to an idle local actor run its activation inline, on the asking
//! thread. These tests check that the inline path keeps an actor to one
//! activation at a time while other threads tell it, and that nested inline
//! asks stop at the depth bound and hand the rest to the dispatcher.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::rt;

#[derive(Message)]
struct Inc;

#[derive(Message)]
#[message(reply = (u64, ThreadId))]
struct Get;

/// Counts `Inc`s; flags any two handlers that overlap (which would mean
/// two activations at once).
struct Counter {
    n: u64,
    inside: Arc<AtomicBool>,
    overlaps: Arc<AtomicU64>,
}

impl Actor for Counter {}

impl Counter {
    fn enter(&self) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        // Widen the window in which an overlap would be seen.
        std::hint::spin_loop();
    }

    fn leave(&self) {
        self.inside.store(false, Ordering::SeqCst);
    }
}

#[handlers]
impl Counter {
    async fn inc(&mut self, _msg: Inc) {
        self.enter();
        self.n += 1;
        self.leave();
    }

    async fn get(&mut self, _msg: Get) -> (u64, ThreadId) {
        self.enter();
        let n = self.n;
        self.leave();
        (n, thread::current().id())
    }
}

#[test]
fn inline_asks_stay_exclusive_under_concurrent_tells() {
    const TELLERS: u64 = 2;
    const TELLS: u64 = 20_000;
    const ASKERS: usize = 2;
    const ASKS: usize = 2_000;
    let system = ActorSystem::new("inline-ask").unwrap();
    let overlaps = Arc::new(AtomicU64::new(0));
    let counter = system.spawn(Counter {
        n: 0,
        inside: Arc::new(AtomicBool::new(false)),
        overlaps: overlaps.clone(),
    });

    // Quiet: sequential asks from one thread mostly run on it (the rest
    // go through the dispatcher for fairness, or found the actor still
    // parking after one that did). After one that ran on a worker, a pause
    // lets that activation park: on a loaded host the next ask would
    // otherwise find it still ending, and so on, ask after ask.
    let me = thread::current().id();
    let inline = rt::block_on(async {
        let mut inline = 0;
        for _ in 0..320 {
            let (_, ran_on) = within("a quiet ask", counter.ask(Get)).await.unwrap();
            if ran_on == me {
                inline += 1;
            } else {
                rt::sleep(Duration::from_millis(1)).await;
            }
        }
        inline
    });
    // Usually over 300; the bound is loose so that a loaded machine (a
    // worker thread slow to park) does not fail it.
    assert!(inline > 64, "only {inline} of 320 quiet asks ran inline");

    // Busy: asker threads race teller threads for the actor.
    let tellers: Vec<_> = (0..TELLERS)
        .map(|_| {
            let c = counter.clone();
            thread::spawn(move || {
                for _ in 0..TELLS {
                    c.tell(Inc).unwrap();
                }
            })
        })
        .collect();
    let askers: Vec<_> = (0..ASKERS)
        .map(|_| {
            let c = counter.clone();
            thread::spawn(move || {
                rt::block_on(async {
                    let mut last = 0;
                    for _ in 0..ASKS {
                        let (n, _) = within("a busy ask", c.ask(Get)).await.unwrap();
                        assert!(n >= last, "count went back from {last} to {n}");
                        last = n;
                    }
                })
            })
        })
        .collect();
    for t in tellers.into_iter().chain(askers) {
        t.join().unwrap();
    }
    let total = rt::block_on(async {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let (n, _) = within("the final count", counter.ask(Get)).await.unwrap();
            if n == TELLERS * TELLS || Instant::now() > deadline {
                break n;
            }
            rt::yield_now().await;
        }
    });
    assert_eq!(total, TELLERS * TELLS);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two activations overlapped"
    );
    rt::block_on(system.shutdown());
}

#[derive(Message)]
#[message(reply = Vec<ThreadId>)]
struct Go;

#[derive(Message)]
#[message(reply = ThreadId)]
struct Where;

/// One link of a chain: handling `Go` asks the next link and returns the
/// threads that every link from here on ran on.
struct Link {
    next: Option<ActorRef<Link>>,
}

impl Actor for Link {}

#[handlers]
impl Link {
    async fn go(&mut self, _msg: Go) -> Vec<ThreadId> {
        let mut threads = vec![thread::current().id()];
        if let Some(next) = &self.next {
            threads.extend(next.ask(Go).await.unwrap());
        }
        threads
    }

    async fn where_(&mut self, _msg: Where) -> ThreadId {
        thread::current().id()
    }
}

#[test]
fn nested_asks_past_the_depth_bound_go_to_the_dispatcher() {
    const LINKS: usize = 12;
    let system = ActorSystem::new("inline-nested").unwrap();
    let mut next = None;
    let mut links = Vec::new();
    for _ in 0..LINKS {
        let link = system.spawn(Link { next: next.take() });
        next = Some(link.clone());
        links.push(link);
    }
    links.reverse();
    let head = links[0].clone();

    // Settle every link: once an ask of it ran inline on this thread, its
    // activation has parked and nothing else sends to it.
    let me = thread::current().id();
    rt::block_on(async {
        for link in &links {
            within("a link to run inline", async {
                while link.ask(Where).await.unwrap() != me {
                    rt::yield_now().await;
                }
            })
            .await;
        }
    });

    // From a fresh thread (its fairness count starts at zero), the asker
    // runs the first four links inline, nested; the fifth goes to the
    // dispatcher, and the whole chain still answers.
    let first = thread::spawn(move || {
        let me = thread::current().id();
        let threads = rt::block_on(within("the chain", head.ask(Go))).unwrap();
        (me, threads)
    });
    let (asker, threads) = first.join().unwrap();
    assert_eq!(threads.len(), LINKS);
    assert!(
        threads[..4].iter().all(|t| *t == asker),
        "the first four links ran inline: {threads:?}"
    );
    assert_ne!(threads[4], asker, "the fifth link went to the dispatcher");

    // Many rounds from several threads: every chain answers in full.
    let rounds: Vec<_> = (0..3)
        .map(|_| {
            let head = links[0].clone();
            thread::spawn(move || {
                rt::block_on(async {
                    for _ in 0..200 {
                        let threads = within("a chain", head.ask(Go)).await.unwrap();
                        assert_eq!(threads.len(), LINKS);
                    }
                })
            })
        })
        .collect();
    for r in rounds {
        r.join().unwrap();
    }
    rt::block_on(system.shutdown());
}

/// Reports where its `stopped` hook ran; counts its messages.
struct Stoppable {
    stopped_on: async_channel::Sender<ThreadId>,
    handled: Arc<AtomicU64>,
}

impl Actor for Stoppable {
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.stopped_on.try_send(thread::current().id());
    }
}

#[handlers]
impl Stoppable {
    async fn inc(&mut self, _msg: Inc) {
        self.handled.fetch_add(1, Ordering::SeqCst);
    }

    async fn where_(&mut self, _msg: Where) -> ThreadId {
        thread::current().id()
    }
}

#[test]
fn poison_pill_here_stops_an_idle_actor_on_the_calling_thread_after_its_messages() {
    rt::block_on(async {
        let system = ActorSystem::new("pill-here").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let handled = Arc::new(AtomicU64::new(0));
        let a = system.spawn(Stoppable {
            stopped_on: tx.clone(),
            handled: handled.clone(),
        });
        // An ask that ran inline leaves the actor idle (its activation
        // parked before the ask returned). The first ones may meet its
        // start, or the activation that answered the one before, still
        // running on a worker (on a loaded host, ask after ask can), so
        // an ask that did not run inline is followed by a pause in which
        // that activation can end.
        let deadline = Instant::now() + Duration::from_secs(20);
        while a.ask(Where).await.unwrap() != thread::current().id() {
            assert!(
                Instant::now() < deadline,
                "no ask to the idle actor ran inline within 20 s"
            );
            rt::sleep(Duration::from_millis(1)).await;
        }
        a.poison_pill_here();
        // Idle, and far from the fairness turn (every 32nd), so the stop
        // ran here, before the call returned.
        assert_eq!(
            rx.try_recv().ok(),
            Some(thread::current().id()),
            "the stopped hook ran inside poison_pill_here"
        );
        assert!(a.is_terminated(), "the stop ran to its end");

        // Messages queued before the pill are handled first, whoever runs
        // them.
        let handled_b = Arc::new(AtomicU64::new(0));
        let b = system.spawn(Stoppable {
            stopped_on: tx,
            handled: handled_b.clone(),
        });
        for _ in 0..100 {
            b.tell(Inc).unwrap();
        }
        b.to_any().poison_pill_here();
        within("stopped", next(&rx)).await;
        eventually("terminated", || b.is_terminated()).await;
        assert_eq!(handled_b.load(Ordering::SeqCst), 100);
        assert!(b.tell(Inc).is_err(), "a stopped actor refuses messages");
        system.shutdown().await;
    });
}
