//! tell, ask, ordering, refs, hierarchy and lookup.

mod common;

use common::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::{rt, AskError, Props, SpawnError, TellError};

#[derive(Message)]
#[message(reply = u64)]
struct Add(u64);

#[derive(Message)]
#[message(reply = Vec<u64>)]
struct Seen;

#[derive(Message)]
struct Record(u64);

#[derive(Default)]
struct Counter {
    total: u64,
    seen: Vec<u64>,
}
impl Actor for Counter {}

#[handlers]
impl Counter {
    async fn add(&mut self, msg: Add, _ctx: &mut Context<Self>) -> u64 {
        self.total += msg.0;
        self.total
    }
    async fn record(&mut self, msg: Record) {
        self.seen.push(msg.0);
    }
    async fn seen(&mut self, _msg: Seen) -> Vec<u64> {
        std::mem::take(&mut self.seen)
    }
}

#[test]
fn tell_then_ask_sees_every_tell() {
    rt::block_on(async {
        let system = ActorSystem::new("basics").unwrap();
        let counter = system.spawn(Counter::default());
        for _ in 0..1000 {
            counter.tell(Add(1)).unwrap();
        }
        assert_eq!(within("ask", counter.ask(Add(0))).await.unwrap(), 1000);
        system.shutdown().await;
    });
}

#[test]
fn messages_from_one_sender_keep_their_order() {
    rt::block_on(async {
        let system = ActorSystem::new("order").unwrap();
        let counter = system.spawn(Counter::default());
        // Several concurrent senders; each one's messages must stay in order.
        let senders: Vec<_> = (0..4u64)
            .map(|s| {
                let c = counter.clone();
                rt::spawn(async move {
                    for i in 0..10_000u64 {
                        c.tell(Record(s * 1_000_000 + i)).unwrap();
                        if i % 1000 == 0 {
                            rt::yield_now().await;
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.await;
        }
        let seen = within("ask", counter.ask(Seen)).await.unwrap();
        assert_eq!(seen.len(), 40_000);
        for s in 0..4u64 {
            let mine: Vec<u64> = seen
                .iter()
                .copied()
                .filter(|v| v / 1_000_000 == s)
                .collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "sender {s} out of order"
            );
            assert_eq!(mine.len(), 10_000);
        }
        system.shutdown().await;
    });
}

struct Slow;
impl Actor for Slow {}

#[derive(Message)]
#[message(reply = ())]
struct Hang;

#[handlers]
impl Slow {
    async fn hang(&mut self, _msg: Hang) {
        rt::sleep(Duration::from_secs(3600)).await;
    }
}

#[test]
fn ask_timeout_is_an_error_promptly() {
    rt::block_on(async {
        let system = ActorSystem::new("timeout").unwrap();
        let slow = system.spawn(Slow);
        let start = Instant::now();
        let r = slow.ask_timeout(Hang, Duration::from_millis(50)).await;
        assert_eq!(r, Err(AskError::Timeout(Duration::from_millis(50))));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "took {:?}",
            start.elapsed()
        );
        slow.stop();
        within("shutdown", system.shutdown()).await;
    });
}

#[test]
fn ask_and_tell_to_a_stopped_actor_fail_promptly() {
    rt::block_on(async {
        let system = ActorSystem::new("stopped").unwrap();
        let counter = system.spawn(Counter::default());
        counter.stop();
        within("termination", counter.wait_for_termination()).await;
        let start = Instant::now();
        assert_eq!(counter.ask(Add(1)).await, Err(AskError::Stopped));
        assert!(start.elapsed() < Duration::from_millis(500));
        match counter.tell(Add(7)) {
            Err(TellError::Stopped(Add(7))) => {}
            other => panic!("expected Stopped, got {other:?}"),
        }
        assert!(system.dead_letter_count() >= 2);
        system.shutdown().await;
    });
}

#[test]
fn refs_compare_hash_and_print_as_paths() {
    rt::block_on(async {
        let system = ActorSystem::new("refs").unwrap();
        let a = system.spawn_named("a", Counter::default()).unwrap();
        let b = system.spawn_named("b", Counter::default()).unwrap();
        let a2 = a.clone();
        assert_eq!(a, a2);
        assert_ne!(a, b);
        let set: HashSet<_> = [a.clone(), a2, b.clone()].into_iter().collect();
        assert_eq!(set.len(), 2);
        assert_eq!(a.to_string(), "/user/a");
        assert_eq!(a.path().name(), "a");
        fn assert_send_sync<T: Send + Sync + Clone>() {}
        assert_send_sync::<ActorRef<Counter>>();
        assert_send_sync::<AnyActorRef>();
        assert_eq!(a.to_any(), a.to_any());
        system.shutdown().await;
    });
}

struct Parent;
impl Actor for Parent {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.spawn_props(Props::new(Counter::default()).with_name("kid"))
            .unwrap();
    }
}

#[derive(Message)]
#[message(reply = Result<String, SpawnError>)]
struct SpawnKid(String);

#[handlers]
impl Parent {
    async fn spawn_kid(
        &mut self,
        msg: SpawnKid,
        ctx: &mut Context<Self>,
    ) -> Result<String, SpawnError> {
        ctx.spawn_props(Props::new(Counter::default()).with_name(msg.0))
            .map(|r| r.to_string())
    }
}

#[test]
fn hierarchy_paths_unique_names_and_lookup() {
    rt::block_on(async {
        let system = ActorSystem::new("tree").unwrap();
        let parent = system.spawn_named("parent", Parent).unwrap();
        assert_eq!(
            within("spawn", parent.ask(SpawnKid("other".into())))
                .await
                .unwrap(),
            Ok("/user/parent/other".to_string())
        );
        assert_eq!(
            parent.ask(SpawnKid("kid".into())).await.unwrap(),
            Err(SpawnError::NameTaken("kid".into()))
        );
        assert!(matches!(
            parent.ask(SpawnKid("bad/name".into())).await.unwrap(),
            Err(SpawnError::InvalidName(_))
        ));
        assert!(matches!(
            system.spawn_named("parent", Parent),
            Err(SpawnError::NameTaken(_))
        ));
        let kid = system
            .lookup::<Counter>("/user/parent/kid")
            .expect("lookup by path");
        assert_eq!(kid.ask(Add(5)).await.unwrap(), 5);
        assert!(
            system.lookup::<Parent>("/user/parent/kid").is_none(),
            "wrong type"
        );
        assert!(system.lookup_any("/user/nobody").is_none());
        let any = system.lookup_any("/user/parent").unwrap();
        assert_eq!(any.downcast::<Parent>(), Some(parent.clone()));

        // A stopped child frees its name.
        kid.stop();
        kid.wait_for_termination().await;
        eventually("name freed", || {
            system.lookup_any("/user/parent/kid").is_none()
        })
        .await;
        assert_eq!(
            parent.ask(SpawnKid("kid".into())).await.unwrap(),
            Ok("/user/parent/kid".to_string())
        );
        system.shutdown().await;
    });
}

#[test]
fn invalid_system_names_are_refused() {
    assert!(ActorSystem::new("").is_err());
    assert!(ActorSystem::new("a b").is_err());
    assert!(ActorSystem::new("-x").is_err());
    assert!(ActorSystem::new("good-name_1").is_ok());
}

#[test]
fn spawn_after_shutdown_gives_a_stopped_actor() {
    rt::block_on(async {
        let system = ActorSystem::new("late").unwrap();
        system.shutdown().await;
        assert!(system.is_terminated());
        let c = system.spawn(Counter::default());
        assert!(c.is_terminated());
        assert_eq!(c.ask(Add(1)).await, Err(AskError::Stopped));
        assert!(matches!(
            system.spawn_named("x", Counter::default()),
            Err(SpawnError::ParentStopped)
        ));
    });
}

#[test]
fn shutdown_runs_the_shutdown_sequence_first_and_terminate_skips_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use troupe_core::ShutdownSequenceError;
    rt::block_on(async {
        // `shutdown`: the sequence runs while the actors still run.
        let system = ActorSystem::new("sequence").unwrap();
        let counter = system.spawn(Counter::default());
        let ran = Arc::new(AtomicUsize::new(0));
        let (r, c) = (ran.clone(), counter.clone());
        system
            .set_shutdown_sequence(move || {
                let (r, c) = (r.clone(), c.clone());
                async move {
                    // An actor still answers during the sequence.
                    assert_eq!(c.ask(Add(2)).await.unwrap(), 2);
                    r.fetch_add(1, Ordering::SeqCst);
                }
            })
            .unwrap();
        assert_eq!(
            system.set_shutdown_sequence(|| async {}),
            Err(ShutdownSequenceError::AlreadySet)
        );
        system.shutdown().await;
        assert!(system.is_terminated());
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        // Once stopped, the sequence is gone: a second call returns at once.
        system.shutdown().await;
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(counter.is_terminated());
        assert_eq!(
            system.set_shutdown_sequence(|| async {}),
            Err(ShutdownSequenceError::AlreadyTerminated)
        );

        // `terminate`: stops at once, without the sequence.
        let system = ActorSystem::new("abrupt").unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        system
            .set_shutdown_sequence(move || {
                let r = r.clone();
                async move {
                    r.fetch_add(1, Ordering::SeqCst);
                }
            })
            .unwrap();
        system.terminate().await;
        assert!(system.is_terminated());
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        // A later `shutdown` finds the system stopped.
        system.shutdown().await;
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the sequence was dropped");
    });
}
