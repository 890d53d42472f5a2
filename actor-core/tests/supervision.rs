//! Supervision: restart with fresh state, backoff, limits, resume, stop,
//! escalate.

mod common;

use common::*;
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::{rt, Backoff, Props, SupervisorStrategy};

#[derive(Message)]
#[message(reply = u64)]
struct Bump;

#[derive(Message)]
struct Crash;

/// Counts bumps; reports every start to the test.
struct Worker {
    count: u64,
    events: async_channel::Sender<(&'static str, Instant)>,
}

impl Actor for Worker {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.events.try_send(("started", Instant::now()));
    }
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.events.try_send(("stopped", Instant::now()));
    }
}

#[handlers]
impl Worker {
    async fn bump(&mut self, _msg: Bump) -> u64 {
        self.count += 1;
        self.count
    }
    async fn crash(&mut self, _msg: Crash) {
        panic!("boom (expected by the test)");
    }
}

fn worker_props(tx: async_channel::Sender<(&'static str, Instant)>) -> Props<Worker> {
    Props::from_factory(move || Worker {
        count: 0,
        events: tx.clone(),
    })
}

struct Watcher {
    target: AnyActorRef,
    out: async_channel::Sender<Terminated>,
}
impl Actor for Watcher {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        let t = self.target.clone();
        ctx.watch_any(&t);
    }
}
/// Answered once the watcher has started, i.e. once its watch is queued
/// at the target.
#[derive(Message)]
struct Ready;

#[handlers]
impl Watcher {
    async fn terminated(&mut self, t: Terminated) {
        let _ = self.out.try_send(t);
    }
    async fn ready(&mut self, _m: Ready) {}
}

#[test]
fn panic_restarts_with_fresh_state() {
    init_logging();
    rt::block_on(async {
        let system = ActorSystem::new("restart").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let w = system.spawn_props(worker_props(tx)).unwrap();
        assert_eq!(next(&rx).await.0, "started");
        assert_eq!(w.ask(Bump).await.unwrap(), 1);
        assert_eq!(w.ask(Bump).await.unwrap(), 2);
        w.tell(Crash).unwrap();
        assert_eq!(next(&rx).await.0, "stopped", "old instance's hook runs");
        assert_eq!(next(&rx).await.0, "started", "new instance's hook runs");
        assert_eq!(w.ask(Bump).await.unwrap(), 1, "state is fresh");
        assert!(!w.is_terminated());
        system.shutdown().await;
    });
}

#[test]
fn messages_queued_behind_a_crash_are_kept() {
    rt::block_on(async {
        let system = ActorSystem::new("keep").unwrap();
        let (tx, _rx) = async_channel::unbounded();
        let w = system.spawn_props(worker_props(tx)).unwrap();
        w.tell(Crash).unwrap();
        for _ in 0..10 {
            w.tell(Bump).unwrap();
        }
        assert_eq!(within("ask", w.ask(Bump)).await.unwrap(), 11);
        system.shutdown().await;
    });
}

#[test]
fn backoff_delays_grow_within_bounds() {
    rt::block_on(async {
        let system = ActorSystem::new("backoff").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let min = Duration::from_millis(100);
        let backoff = Backoff::exponential(min, Duration::from_secs(2)).with_random_factor(0.0);
        let w = system
            .spawn_props(
                worker_props(tx)
                    .with_supervisor(SupervisorStrategy::restart().with_backoff(backoff)),
            )
            .unwrap();
        assert_eq!(next(&rx).await.0, "started");
        let mut delays = Vec::new();
        for _ in 0..3 {
            w.tell(Crash).unwrap();
            let (e, stopped_at) = next(&rx).await;
            assert_eq!(e, "stopped");
            let (e, started_at) = next(&rx).await;
            assert_eq!(e, "started");
            delays.push(started_at - stopped_at);
        }
        // 100 ms, 200 ms, 400 ms; allow scheduling slack above, none below.
        for (i, d) in delays.iter().enumerate() {
            let expected = min * (1 << i);
            assert!(
                *d >= expected,
                "restart {i} after {d:?}, expected at least {expected:?}"
            );
            assert!(
                *d < expected + Duration::from_millis(500),
                "restart {i} after {d:?}, expected about {expected:?}"
            );
        }
        // Messages sent during a backoff wait and are handled after it.
        w.tell(Crash).unwrap();
        assert_eq!(within("ask after backoff", w.ask(Bump)).await.unwrap(), 1);
        system.shutdown().await;
    });
}

#[test]
fn restart_limit_exceeded_stops_and_notifies_watchers() {
    rt::block_on(async {
        let system = ActorSystem::new("limit").unwrap();
        let (tx, _rx) = async_channel::unbounded();
        let strategy = SupervisorStrategy::restart().with_limit(2, Duration::from_secs(60));
        let w = system
            .spawn_props(worker_props(tx).with_supervisor(strategy))
            .unwrap();
        let (ttx, trx) = async_channel::unbounded();
        let watcher = system.spawn(Watcher {
            target: w.to_any(),
            out: ttx,
        });
        // Make sure the watch is registered before the crashes.
        watcher.ask(Ready).await.unwrap();
        assert_eq!(w.ask(Bump).await.unwrap(), 1);
        for _ in 0..3 {
            let _ = w.tell(Crash);
        }
        let t = next(&trx).await;
        assert_eq!(t.actor, w.to_any());
        match t.reason {
            StopReason::Failed(why) => assert!(why.contains("more than 2 restarts"), "{why}"),
            other => panic!("expected a failure, got {other:?}"),
        }
        assert!(w.is_terminated());
        system.shutdown().await;
    });
}

#[test]
fn resume_keeps_state() {
    rt::block_on(async {
        let system = ActorSystem::new("resume").unwrap();
        let (tx, _rx) = async_channel::unbounded();
        let w = system
            .spawn_props(worker_props(tx).with_supervisor(SupervisorStrategy::resume()))
            .unwrap();
        assert_eq!(w.ask(Bump).await.unwrap(), 1);
        w.tell(Crash).unwrap();
        assert_eq!(w.ask(Bump).await.unwrap(), 2);
        system.shutdown().await;
    });
}

#[test]
fn stop_strategy_stops_with_the_failure() {
    rt::block_on(async {
        let system = ActorSystem::new("stopstrat").unwrap();
        let (tx, _rx) = async_channel::unbounded();
        let w = system
            .spawn_props(worker_props(tx).with_supervisor(SupervisorStrategy::stop()))
            .unwrap();
        let (ttx, trx) = async_channel::unbounded();
        let watcher = system.spawn(Watcher {
            target: w.to_any(),
            out: ttx,
        });
        watcher.ask(Ready).await.unwrap();
        assert_eq!(w.ask(Bump).await.unwrap(), 1);
        w.tell(Crash).unwrap();
        let t = next(&trx).await;
        assert!(
            matches!(t.reason, StopReason::Failed(ref m) if m.contains("boom")),
            "{:?}",
            t.reason
        );
        system.shutdown().await;
    });
}

#[test]
fn a_value_spawned_actor_cannot_restart_and_stops() {
    rt::block_on(async {
        let system = ActorSystem::new("value").unwrap();
        let (tx, _rx) = async_channel::unbounded();
        let w = system.spawn(Worker {
            count: 0,
            events: tx,
        });
        w.tell(Crash).unwrap();
        within("termination", w.wait_for_termination()).await;
        system.shutdown().await;
    });
}

/// A parent whose child escalates; the parent restarts (fresh state) and so
/// re-creates its child.
struct Boss {
    generation: u64,
    events: async_channel::Sender<u64>,
}
impl Actor for Boss {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        let (tx, _rx) = async_channel::unbounded();
        ctx.spawn_props(
            worker_props(tx)
                .with_name("worker")
                .with_supervisor(SupervisorStrategy::escalate()),
        )
        .unwrap();
        let _ = self.events.try_send(self.generation);
    }
}

#[test]
fn escalate_fails_the_parent() {
    rt::block_on(async {
        let system = ActorSystem::new("escalate").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let mut generation = 0;
        let boss = system
            .spawn_props(Props::from_factory(move || {
                generation += 1;
                Boss {
                    generation,
                    events: tx.clone(),
                }
            }))
            .unwrap();
        assert_eq!(next(&rx).await, 1);
        let worker = system.lookup::<Worker>("/user/$0/worker").or_else(|| {
            system
                .lookup_any(&format!("{}/worker", boss.path()))
                .and_then(|a| a.downcast())
        });
        let worker = worker.expect("child exists");
        worker.tell(Crash).unwrap();
        assert_eq!(next(&rx).await, 2, "parent restarted from its factory");
        within("old child stopped", worker.wait_for_termination()).await;
        eventually("new child", || {
            system
                .lookup_any(&format!("{}/worker", boss.path()))
                .is_some_and(|w| w.uid() != worker.uid())
        })
        .await;
        system.shutdown().await;
    });
}

#[test]
fn a_panic_does_not_disturb_other_actors() {
    rt::block_on(async {
        let system = ActorSystem::new("isolation").unwrap();
        let (tx, _rx) = async_channel::unbounded();
        let victim = system
            .spawn_props(worker_props(tx.clone()).with_supervisor(SupervisorStrategy::stop()))
            .unwrap();
        let bystander = system.spawn_props(worker_props(tx)).unwrap();
        for _ in 0..100 {
            let _ = victim.tell(Crash);
            bystander.tell(Bump).unwrap();
        }
        assert_eq!(bystander.ask(Bump).await.unwrap(), 101);
        system.shutdown().await;
    });
}

/// An actor of a named factory: made from its name.
struct Named {
    name: std::sync::Arc<str>,
    count: u64,
}
impl Actor for Named {}

#[derive(Message)]
#[message(reply = (String, u64))]
struct WhoAmI;

#[handlers]
impl Named {
    async fn who(&mut self, _msg: WhoAmI) -> (String, u64) {
        self.count += 1;
        (self.name.to_string(), self.count)
    }
    async fn crash(&mut self, _msg: Crash) {
        panic!("boom (expected by the test)");
    }
}

#[test]
fn a_named_factory_serves_many_actors_and_restarts_each_from_its_name() {
    init_logging();
    rt::block_on(async {
        let system = ActorSystem::new("named-factory").unwrap();
        let made = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let m = made.clone();
        let factory = troupe_core::NamedFactory::new(move |name: &std::sync::Arc<str>| {
            m.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Named {
                name: name.clone(),
                count: 0,
            }
        });
        let name: std::sync::Arc<str> = "acc-1".into();
        let a = system
            .spawn_props(Props::from_named_factory(factory.clone()).with_name(name.clone()))
            .unwrap();
        let b = system
            .spawn_props(Props::from_named_factory(factory.clone()).with_name("acc-2"))
            .unwrap();
        let c = system
            .spawn_props(Props::from_named_factory(factory))
            .unwrap();
        assert_eq!(a.ask(WhoAmI).await.unwrap(), ("acc-1".to_string(), 1));
        assert_eq!(a.ask(WhoAmI).await.unwrap(), ("acc-1".to_string(), 2));
        assert_eq!(b.ask(WhoAmI).await.unwrap(), ("acc-2".to_string(), 1));
        let (generated, _) = c.ask(WhoAmI).await.unwrap();
        assert_eq!(
            generated,
            c.name(),
            "an unnamed actor's factory gets its generated name"
        );
        // A restart makes a fresh instance from the same name.
        a.tell(Crash).unwrap();
        assert_eq!(
            within("ask after the restart", a.ask(WhoAmI))
                .await
                .unwrap(),
            ("acc-1".to_string(), 1)
        );
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 4);
        assert_eq!(&*a.name(), "acc-1");
        system.shutdown().await;
    });
}

/// Spawns a worker child at start; `StopThenCrash` stops itself and then
/// panics in the same handler.
struct Foreman {
    events: async_channel::Sender<(&'static str, Instant)>,
    child: async_channel::Sender<ActorRef<Worker>>,
}

#[derive(Message)]
struct StopThenCrash;

impl Actor for Foreman {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        let child = ctx
            .spawn_props(worker_props(self.events.clone()).with_name("worker"))
            .unwrap();
        let _ = self.child.try_send(child);
    }
}

#[handlers]
impl Foreman {
    async fn stop_then_crash(&mut self, _msg: StopThenCrash, ctx: &mut Context<Self>) {
        ctx.stop();
        panic!("boom after stop (expected by the test)");
    }
}

#[test]
fn a_stop_requested_before_a_failure_stops_the_children_and_ends_the_actor() {
    init_logging();
    rt::block_on(async {
        let system = ActorSystem::new("stop-then-crash").unwrap();
        let (events, _events_rx) = async_channel::unbounded();
        let (child_tx, child_rx) = async_channel::unbounded();
        let foreman = system
            .spawn_props(Props::from_factory(move || Foreman {
                events: events.clone(),
                child: child_tx.clone(),
            }))
            .unwrap();
        let child = next(&child_rx).await;
        foreman.tell(StopThenCrash).unwrap();
        // The stop wins over the restart: the child is stopped and the
        // actor terminates (it used to wait for its running child forever).
        within("the foreman to terminate", foreman.wait_for_termination()).await;
        assert!(child.is_terminated());
        assert!(child_rx.is_empty(), "the foreman was not restarted");
        system.shutdown().await;
    });
}
