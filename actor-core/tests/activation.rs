//! Activations: messages whose handler completes at once run on a fast path;
//! a handler or `started` hook that waits hands the actor's state over to
//! the general path mid-flight. These tests mix both.

mod common;

use common::*;
use troupe_core::prelude::*;
use troupe_core::{rt, Props, SupervisorStrategy};

#[derive(Message)]
struct Step {
    n: u32,
    /// Await (yield to the executor) before recording.
    wait: bool,
}

#[derive(Message)]
#[message(reply = Vec<String>)]
struct Seen;

#[derive(Message)]
#[message(reply = u32)]
struct Boom {
    after_await: bool,
}

#[derive(Message)]
#[message(reply = ())]
struct Forever;

#[derive(Default)]
struct Recorder {
    seen: Vec<String>,
}

impl Actor for Recorder {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        // Pending on the first poll: the hook continues on the general path.
        rt::yield_now().await;
        rt::yield_now().await;
        self.seen.push("started".into());
    }
}

#[handlers]
impl Recorder {
    async fn step(&mut self, msg: Step) {
        if msg.wait {
            rt::yield_now().await;
        }
        self.seen.push(msg.n.to_string());
    }

    async fn seen(&mut self, _msg: Seen) -> Vec<String> {
        self.seen.clone()
    }

    async fn boom(&mut self, msg: Boom) -> u32 {
        if msg.after_await {
            rt::yield_now().await;
        }
        panic!("boom");
    }

    async fn forever(&mut self, _msg: Forever) {
        std::future::pending::<()>().await;
    }
}

#[test]
fn waiting_and_immediate_handlers_keep_order_and_state() {
    rt::block_on(async {
        let system = ActorSystem::new("activation").unwrap();
        let r = system.spawn(Recorder::default());
        let mut expected = vec!["started".to_string()];
        for n in 0..2000u32 {
            r.tell(Step {
                n,
                wait: n % 7 == 3 || n % 100 < 2,
            })
            .unwrap();
            expected.push(n.to_string());
        }
        let seen = within("the record", r.ask(Seen)).await.unwrap();
        assert_eq!(seen, expected);
        system.shutdown().await;
    });
}

#[test]
fn panics_before_and_after_an_await_are_supervised() {
    rt::block_on(async {
        let system = ActorSystem::new("activation").unwrap();
        let r = system
            .spawn_props(
                Props::from_factory(Recorder::default)
                    .with_supervisor(SupervisorStrategy::restart()),
            )
            .unwrap();
        for after_await in [false, true, false, true] {
            r.tell(Step { n: 1, wait: false }).unwrap();
            let err = within("the failed ask", r.ask(Boom { after_await })).await;
            assert!(err.is_err(), "a panicking handler gives no reply");
            // Restarted from the factory: a fresh instance that ran `started`.
            let seen = within("the record", r.ask(Seen)).await.unwrap();
            assert_eq!(seen, ["started"]);
        }
        system.shutdown().await;
    });
}

#[test]
fn stop_cancels_a_handler_that_waits() {
    rt::block_on(async {
        let system = ActorSystem::new("activation").unwrap();
        let r = system.spawn(Recorder::default());
        r.tell(Step { n: 1, wait: false }).unwrap();
        r.tell(Forever).unwrap();
        // The actor is now stuck in `forever`, on the general path.
        let pending = r.ask(Seen);
        r.stop();
        within("termination", r.wait_for_termination()).await;
        assert!(pending.await.is_err(), "queued ask is dropped by the stop");
        system.shutdown().await;
    });
}

#[test]
fn many_actors_alternate_paths_under_load() {
    rt::block_on(async {
        let system = ActorSystem::new("activation").unwrap();
        let actors: Vec<_> = (0..64).map(|_| system.spawn(Recorder::default())).collect();
        for n in 0..200u32 {
            for a in &actors {
                a.tell(Step {
                    n,
                    wait: n % 3 == 0,
                })
                .unwrap();
            }
        }
        for a in &actors {
            let seen = within("the record", a.ask(Seen)).await.unwrap();
            assert_eq!(seen.len(), 201);
            assert_eq!(seen[0], "started");
            assert!(seen[1..]
                .iter()
                .enumerate()
                .all(|(i, s)| *s == i.to_string()));
        }
        system.shutdown().await;
    });
}

/// Reports its start; the first one waits (in `started`) for a go signal.
struct Starter {
    i: usize,
    started: async_channel::Sender<usize>,
    go: Option<async_channel::Receiver<()>>,
}

impl Actor for Starter {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        if let Some(go) = self.go.take() {
            let _ = go.recv().await;
        } else if self.i.is_multiple_of(2) {
            rt::yield_now().await;
        }
        let _ = self.started.send(self.i).await;
    }
}

#[test]
fn started_runs_for_actors_that_never_get_a_message() {
    rt::block_on(async {
        let system = ActorSystem::new("activation").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let (go_tx, go_rx) = async_channel::bounded(1);
        const N: usize = 300;
        let actors: Vec<_> = (0..N)
            .map(|i| {
                system.spawn(Starter {
                    i,
                    started: tx.clone(),
                    go: (i == 0).then(|| go_rx.clone()),
                })
            })
            .collect();
        // Every actor but the first starts although the first one's
        // `started` is still waiting (it must not hold up the others).
        let mut seen = vec![false; N];
        for _ in 1..N {
            seen[next(&rx).await] = true;
        }
        assert!(!seen[0] && seen[1..].iter().all(|s| *s));
        go_tx.send(()).await.unwrap();
        assert_eq!(next(&rx).await, 0);
        drop(actors);
        system.shutdown().await;
    });
}
