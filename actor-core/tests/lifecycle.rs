//! Hooks, stop vs poison pill, death watch, orderly shutdown.

mod common;

use common::*;
use std::time::Duration;
use troupe_core::prelude::*;
use troupe_core::{rt, Props, SpawnError};

type Log = async_channel::Sender<String>;

#[derive(Message)]
struct Note(u32);

#[derive(Message)]
#[message(reply = ())]
struct Block;

/// Logs its lifecycle and notes; spawns `kids` children of its own kind.
struct Node {
    name: &'static str,
    kids: u32,
    log: Log,
}

impl Actor for Node {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        for i in 0..self.kids {
            ctx.spawn_props(
                Props::new(Node {
                    name: if i == 0 { "kid-0" } else { "kid-1" },
                    kids: 0,
                    log: self.log.clone(),
                })
                .with_name(format!("kid-{i}")),
            )
            .unwrap();
        }
        let _ = self.log.try_send(format!("{} started", self.name));
    }
    async fn stopping(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.log.try_send(format!("{} stopping", self.name));
    }
    async fn stopped(&mut self, ctx: &mut Context<Self>) {
        assert!(
            ctx.children().is_empty(),
            "children stop before their parent"
        );
        let _ = self.log.try_send(format!("{} stopped", self.name));
    }
}

#[handlers]
impl Node {
    async fn note(&mut self, msg: Note) {
        let _ = self.log.try_send(format!("{} note {}", self.name, msg.0));
    }
    async fn block(&mut self, _msg: Block) {
        rt::sleep(Duration::from_secs(3600)).await;
    }
}

async fn collect_until(rx: &async_channel::Receiver<String>, last: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let e = next(rx).await;
        let done = e == last;
        seen.push(e);
        if done {
            return seen;
        }
    }
}

#[test]
fn hooks_run_in_order_and_children_stop_first() {
    rt::block_on(async {
        let system = ActorSystem::new("hooks").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let parent = system.spawn(Node {
            name: "parent",
            kids: 2,
            log: tx,
        });
        collect_until(&rx, "parent started").await;
        parent.stop();
        let events = collect_until(&rx, "parent stopped").await;
        let pos = |s: &str| {
            events
                .iter()
                .position(|e| e == s)
                .unwrap_or_else(|| panic!("{s} missing in {events:?}"))
        };
        assert!(pos("parent stopping") < pos("kid-0 stopped"));
        assert!(pos("kid-0 stopped") < pos("parent stopped"));
        assert!(pos("kid-1 stopped") < pos("parent stopped"));
        system.shutdown().await;
    });
}

#[test]
fn poison_pill_handles_queued_messages_first_and_stop_does_not() {
    rt::block_on(async {
        let system = ActorSystem::new("pill").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let a = system.spawn(Node {
            name: "a",
            kids: 0,
            log: tx.clone(),
        });
        collect_until(&rx, "a started").await;
        for i in 0..5 {
            a.tell(Note(i)).unwrap();
        }
        a.poison_pill();
        let events = collect_until(&rx, "a stopped").await;
        let notes = events.iter().filter(|e| e.contains("note")).count();
        assert_eq!(notes, 5, "{events:?}");

        // Stop now: a handler blocked in an await is cancelled, and the
        // messages behind it become dead letters.
        let b = system.spawn(Node {
            name: "b",
            kids: 0,
            log: tx,
        });
        collect_until(&rx, "b started").await;
        b.tell(Block).unwrap();
        let before = system.dead_letter_count();
        for i in 0..5 {
            b.tell(Note(i)).unwrap();
        }
        b.stop();
        let events = collect_until(&rx, "b stopped").await;
        assert!(!events.iter().any(|e| e.contains("note")), "{events:?}");
        eventually("dead letters counted", || {
            system.dead_letter_count() >= before + 5
        })
        .await;
        system.shutdown().await;
    });
}

struct Watcher {
    out: async_channel::Sender<Terminated>,
}
impl Actor for Watcher {}

#[derive(Message)]
#[message(reply = ())]
struct WatchIt(AnyActorRef);

#[derive(Message)]
#[message(reply = ())]
struct UnwatchIt(AnyActorRef);

#[handlers]
impl Watcher {
    async fn watch_it(&mut self, msg: WatchIt, ctx: &mut Context<Self>) {
        ctx.watch_any(&msg.0);
    }
    async fn unwatch_it(&mut self, msg: UnwatchIt, ctx: &mut Context<Self>) {
        ctx.unwatch(&msg.0);
    }
    async fn terminated(&mut self, t: Terminated) {
        let _ = self.out.try_send(t);
    }
}

#[derive(Message)]
struct Explode;

struct Fragile;
impl Actor for Fragile {}
#[handlers]
impl Fragile {
    async fn explode(&mut self, _msg: Explode) {
        panic!("fragile actor exploded (expected by the test)");
    }
}

#[test]
fn watch_delivers_terminated_for_stop_crash_and_already_stopped() {
    rt::block_on(async {
        let system = ActorSystem::new("watch").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let watcher = system.spawn(Watcher { out: tx });

        // Normal stop.
        let (ltx, _lrx) = async_channel::unbounded();
        let a = system.spawn(Node {
            name: "a",
            kids: 0,
            log: ltx,
        });
        watcher.ask(WatchIt(a.to_any())).await.unwrap();
        a.stop();
        let t = next(&rx).await;
        assert_eq!(t.actor, a.to_any());
        assert_eq!(t.reason, StopReason::Stopped);

        // Crash (spawned from a value: the restart strategy stops it).
        let f = system.spawn(Fragile);
        watcher.ask(WatchIt(f.to_any())).await.unwrap();
        f.tell(Explode).unwrap();
        let t = next(&rx).await;
        assert_eq!(t.actor, f.to_any());
        assert!(
            matches!(t.reason, StopReason::Failed(ref m) if m.contains("exploded")),
            "{:?}",
            t.reason
        );

        // Already stopped when watched.
        watcher.ask(WatchIt(a.to_any())).await.unwrap();
        let t = next(&rx).await;
        assert_eq!(t.actor, a.to_any());
        system.shutdown().await;
    });
}

#[test]
fn unwatch_drops_the_notification() {
    rt::block_on(async {
        let system = ActorSystem::new("unwatch").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let watcher = system.spawn(Watcher { out: tx });
        let f1 = system.spawn(Fragile);
        let f2 = system.spawn(Fragile);
        watcher.ask(WatchIt(f1.to_any())).await.unwrap();
        watcher.ask(WatchIt(f2.to_any())).await.unwrap();
        watcher.ask(UnwatchIt(f1.to_any())).await.unwrap();
        f1.stop();
        f1.wait_for_termination().await;
        f2.stop();
        // Only f2's arrives; f1's (if any was on its way) was dropped.
        let t = next(&rx).await;
        assert_eq!(t.actor, f2.to_any());
        watcher.ask(UnwatchIt(f2.to_any())).await.unwrap();
        assert!(rx.try_recv().is_err());
        system.shutdown().await;
    });
}

#[test]
fn shutdown_with_thousands_of_actors_returns() {
    rt::block_on(async {
        let system = ActorSystem::new("many").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let mut refs = Vec::new();
        for i in 0..2_000 {
            refs.push(system.spawn(Node {
                name: "n",
                kids: if i % 10 == 0 { 2 } else { 0 },
                log: tx.clone(),
            }));
        }
        drop(tx);
        within("shutdown", system.shutdown()).await;
        assert!(refs.iter().all(|r| r.is_terminated()));
        assert!(system.is_terminated());
        // Every actor (2,000 plus 400 children) logged its stop.
        let mut stopped = 0;
        while let Ok(e) = rx.try_recv() {
            if e.ends_with("stopped") {
                stopped += 1;
            }
        }
        assert_eq!(stopped, 2_400);
    });
}

/// A parent that watches its children as a whole (and one of them also
/// one by one).
struct Parent {
    out: async_channel::Sender<Terminated>,
}

impl Actor for Parent {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.watch_children();
    }
}

#[derive(Message)]
#[message(reply = ActorRef<Fragile>)]
struct SpawnFragile {
    also_watch: bool,
}

#[handlers]
impl Parent {
    async fn spawn_fragile(
        &mut self,
        msg: SpawnFragile,
        ctx: &mut Context<Self>,
    ) -> ActorRef<Fragile> {
        let child = ctx.spawn(Fragile).unwrap();
        if msg.also_watch {
            ctx.watch(&child);
        }
        child
    }
    async fn terminated(&mut self, t: Terminated) {
        let _ = self.out.try_send(t);
    }
}

#[test]
fn watch_children_reports_every_child_once_without_watching_each() {
    rt::block_on(async {
        let system = ActorSystem::new("watch-children").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let parent = system.spawn(Parent { out: tx });
        let stopped = parent
            .ask(SpawnFragile { also_watch: false })
            .await
            .unwrap();
        let crashed = parent
            .ask(SpawnFragile { also_watch: false })
            .await
            .unwrap();
        let watched = parent.ask(SpawnFragile { also_watch: true }).await.unwrap();

        stopped.stop();
        let t = next(&rx).await;
        assert_eq!(t.actor, stopped.to_any());
        assert_eq!(t.reason, StopReason::Stopped);

        crashed.tell(Explode).unwrap();
        let t = next(&rx).await;
        assert_eq!(t.actor, crashed.to_any());
        assert!(matches!(t.reason, StopReason::Failed(_)), "{:?}", t.reason);

        // Watched as well: one Terminated, not two. A child spawned after
        // it and stopped after it shows that nothing else was on its way.
        watched.stop();
        let t = next(&rx).await;
        assert_eq!(t.actor, watched.to_any());
        let last = parent
            .ask(SpawnFragile { also_watch: false })
            .await
            .unwrap();
        last.stop();
        let t = next(&rx).await;
        assert_eq!(
            t.actor,
            last.to_any(),
            "a second Terminated for a watched child"
        );
        assert!(rx.is_empty());
        system.shutdown().await;
    });
}

/// Keeps its unlisted children itself (as a cluster shard keeps its
/// entities) and stops them in `stopping`.
struct Keeper {
    log: Log,
    kids: Vec<ActorRef<Node>>,
    terminations: async_channel::Sender<Terminated>,
}

#[derive(Message)]
#[message(reply = Result<ActorRef<Node>, SpawnError>)]
struct SpawnUnlisted(&'static str);

#[derive(Message)]
#[message(reply = (usize, bool))]
struct Listing(&'static str);

/// Lets paths find the kids (the last one spawned of a name).
#[derive(Message)]
#[message(reply = ())]
struct SetFinder(std::sync::Arc<std::sync::Mutex<Vec<ActorRef<Node>>>>);

impl Actor for Keeper {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.watch_children();
    }
    async fn stopping(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.log.try_send("keeper stopping".into());
        for kid in &self.kids {
            kid.stop();
        }
    }
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        let _ = self.log.try_send("keeper stopped".into());
    }
}

#[handlers]
impl Keeper {
    async fn spawn_unlisted(
        &mut self,
        msg: SpawnUnlisted,
        ctx: &mut Context<Self>,
    ) -> Result<ActorRef<Node>, SpawnError> {
        let kid = ctx.spawn_unlisted(
            Props::new(Node {
                name: msg.0,
                kids: 0,
                log: self.log.clone(),
            })
            .with_name(msg.0),
        )?;
        self.kids.push(kid.clone());
        Ok(kid)
    }
    async fn listing(&mut self, msg: Listing, ctx: &mut Context<Self>) -> (usize, bool) {
        (ctx.children().len(), ctx.child(msg.0).is_some())
    }
    async fn set_finder(&mut self, msg: SetFinder, ctx: &mut Context<Self>) {
        let kids = msg.0;
        *kids.lock().unwrap() = self.kids.clone();
        ctx.find_unlisted_children_with(move |name| {
            kids.lock()
                .unwrap()
                .iter()
                .rev()
                .find(|k| k.name() == name && !k.is_terminated())
                .map(|k| k.to_any())
        });
    }
    async fn terminated(&mut self, t: Terminated) {
        let _ = self.terminations.try_send(t);
    }
}

#[test]
fn unlisted_children_are_counted_not_listed_and_their_parent_terminates_after_them() {
    init_logging();
    rt::block_on(async {
        let system = ActorSystem::new("unlisted").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let (terminations, terminated) = async_channel::unbounded();
        let keeper = system.spawn(Keeper {
            log: tx,
            kids: Vec::new(),
            terminations,
        });
        // Two unlisted children may share a name; neither is listed.
        let first = keeper.ask(SpawnUnlisted("kid")).await.unwrap().unwrap();
        let second = keeper.ask(SpawnUnlisted("kid")).await.unwrap().unwrap();
        assert_ne!(first.uid(), second.uid());
        assert_eq!(first.path(), second.path());
        assert!(
            first.path().to_string().ends_with("/kid"),
            "{}",
            first.path()
        );
        assert_eq!(keeper.ask(Listing("kid")).await.unwrap(), (0, false));
        let path = first.path().to_string();
        assert!(system.lookup_any(&path).is_none(), "no finder: not found");
        // With a finder, `child` and paths find it (the finder picks the
        // newer one); `children` still lists none.
        let kids = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        keeper.ask(SetFinder(kids)).await.unwrap();
        assert_eq!(keeper.ask(Listing("kid")).await.unwrap(), (0, true));
        assert_eq!(system.lookup_any(&path), Some(second.to_any()));
        collect_until(&rx, "kid started").await;
        collect_until(&rx, "kid started").await;
        // Its termination is reported like a listed child's.
        first.stop();
        let t = next(&terminated).await;
        assert_eq!(t.actor, first.to_any());
        collect_until(&rx, "kid stopped").await;
        // The parent stops the other one in `stopping`, and the runtime
        // waits for it before the parent terminates.
        keeper.stop();
        let events = collect_until(&rx, "keeper stopped").await;
        let pos = |s: &str| {
            events
                .iter()
                .position(|e| e == s)
                .unwrap_or_else(|| panic!("{s} missing in {events:?}"))
        };
        assert!(pos("keeper stopping") < pos("kid stopped"), "{events:?}");
        assert!(pos("kid stopped") < pos("keeper stopped"), "{events:?}");
        assert!(second.is_terminated());
        keeper.wait_for_termination().await;
        // A stopped parent takes no more children.
        assert!(keeper.ask(SpawnUnlisted("late")).await.is_err());
        system.shutdown().await;
    });
}
