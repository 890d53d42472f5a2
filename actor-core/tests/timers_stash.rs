//! Receive timeout, timers and stash.

mod common;

use common::*;
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::rt;

#[derive(Message)]
struct Ping;

#[derive(Message, Clone)]
struct Tick(u32);

#[derive(Message)]
#[message(reply = ())]
struct StartTimers;

#[derive(Message)]
#[message(reply = ())]
struct CancelTimer(&'static str);

enum Event {
    Ping(Instant),
    Timeout(Instant),
    Tick(u32),
}

struct Sleepy {
    out: async_channel::Sender<Event>,
}

impl Actor for Sleepy {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_receive_timeout(Some(Duration::from_millis(150)));
    }
}

#[handlers]
impl Sleepy {
    async fn ping(&mut self, _msg: Ping) {
        let _ = self.out.try_send(Event::Ping(Instant::now()));
    }
    async fn timeout(&mut self, _msg: ReceiveTimeout, ctx: &mut Context<Self>) {
        let _ = self.out.try_send(Event::Timeout(Instant::now()));
        ctx.set_receive_timeout(None);
    }
    async fn start_timers(&mut self, _msg: StartTimers, ctx: &mut Context<Self>) {
        ctx.set_receive_timeout(None);
        ctx.start_single_timer("once", Tick(1), Duration::from_millis(20));
        ctx.start_periodic_timer("every", Tick(2), Duration::from_millis(10));
        ctx.start_single_timer("never", Tick(3), Duration::from_millis(300));
        assert!(ctx.is_timer_active("never"));
        ctx.cancel_timer("never");
        assert!(!ctx.is_timer_active("never"));
    }
    async fn cancel(&mut self, msg: CancelTimer, ctx: &mut Context<Self>) {
        ctx.cancel_timer(msg.0);
    }
    async fn tick(&mut self, msg: Tick) {
        let _ = self.out.try_send(Event::Tick(msg.0));
    }
}

#[test]
fn receive_timeout_fires_only_after_idle_time() {
    rt::block_on(async {
        let system = ActorSystem::new("idle").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let a = system.spawn(Sleepy { out: tx });
        // Keep it busy: a message every 30 ms for 450 ms (three timeouts'
        // worth) must keep the 150 ms timeout from firing.
        let busy_until = Instant::now() + Duration::from_millis(450);
        while Instant::now() < busy_until {
            a.tell(Ping).unwrap();
            rt::sleep(Duration::from_millis(30)).await;
        }
        let mut last_ping = None;
        let fired = loop {
            match next(&rx).await {
                Event::Ping(t) => last_ping = Some(t),
                Event::Timeout(t) => break t,
                Event::Tick(_) => unreachable!(),
            }
        };
        let last_ping = last_ping.expect("pings were handled");
        assert!(
            fired >= busy_until - Duration::from_millis(30),
            "timeout fired while messages were still coming"
        );
        assert!(
            fired.duration_since(last_ping) >= Duration::from_millis(150),
            "fired {:?} after the last message",
            fired.duration_since(last_ping)
        );
        system.shutdown().await;
    });
}

#[test]
fn single_and_periodic_timers_and_cancel() {
    rt::block_on(async {
        let system = ActorSystem::new("timers").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let a = system.spawn(Sleepy { out: tx });
        a.ask(StartTimers).await.unwrap();
        let (mut once, mut every) = (0, 0);
        while once < 1 || every < 5 {
            match next(&rx).await {
                Event::Tick(1) => once += 1,
                Event::Tick(2) => every += 1,
                Event::Tick(n) => panic!("cancelled timer {n} fired"),
                _ => {}
            }
        }
        a.ask(CancelTimer("every")).await.unwrap();
        // Drain what was queued before the cancel; then nothing more comes
        // for several periods, and the single timer never fires twice.
        while rx.try_recv().is_ok() {}
        let quiet = rt::timeout(Duration::from_millis(100), rx.recv()).await;
        assert!(quiet.is_none(), "a cancelled timer kept firing");
        assert_eq!(once, 1);
        system.shutdown().await;
    });
}

#[test]
fn timers_are_cancelled_when_the_actor_stops() {
    rt::block_on(async {
        let system = ActorSystem::new("timerstop").unwrap();
        let (tx, rx) = async_channel::unbounded();
        let a = system.spawn(Sleepy { out: tx });
        a.ask(StartTimers).await.unwrap();
        // Wait for the periodic timer to be running.
        while !matches!(next(&rx).await, Event::Tick(2)) {}
        let dead_before = system.dead_letter_count();
        a.stop();
        a.wait_for_termination().await;
        while rx.try_recv().is_ok() {}
        // The actor (and with it the sender) is gone: the channel is closed
        // with nothing more in it.
        let quiet = rt::timeout(Duration::from_millis(100), rx.recv()).await;
        assert!(!matches!(quiet, Some(Ok(_))), "a timer fired after stop");
        // The timer tasks end instead of sending to a stopped actor forever.
        assert!(system.dead_letter_count() <= dead_before + 1);
        system.shutdown().await;
    });
}

#[derive(Message)]
#[message(reply = u32)]
struct Work(u32);

#[derive(Message)]
#[message(reply = ())]
struct Open;

struct Gate {
    open: bool,
    done: Vec<u32>,
}
impl Actor for Gate {}

#[handlers]
impl Gate {
    async fn work(&mut self, msg: Work, ctx: &mut Context<Self>) -> u32 {
        if !self.open {
            ctx.stash(msg);
            return 0;
        }
        self.done.push(msg.0);
        msg.0 * 10
    }
    async fn open(&mut self, _msg: Open, ctx: &mut Context<Self>) {
        assert_eq!(ctx.stash_len(), 5);
        self.open = true;
        ctx.unstash_all();
    }
}

#[derive(Message)]
#[message(reply = Vec<u32>)]
struct Done;

#[handlers]
impl Gate {
    async fn done(&mut self, _msg: Done) -> Vec<u32> {
        self.done.clone()
    }
}

#[test]
fn stash_and_unstash_keep_order_and_replies() {
    rt::block_on(async {
        let system = ActorSystem::new("stash").unwrap();
        let gate = system.spawn(Gate {
            open: false,
            done: Vec::new(),
        });
        let asks: Vec<_> = (1..=5).map(|i| gate.ask(Work(i))).collect();
        gate.tell(Open).unwrap();
        gate.tell(Work(6)).unwrap();
        let mut replies = Vec::new();
        for a in asks {
            replies.push(within("stashed reply", a).await.unwrap());
        }
        assert_eq!(
            replies,
            vec![10, 20, 30, 40, 50],
            "asks answered after unstash"
        );
        assert_eq!(gate.ask(Done).await.unwrap(), vec![1, 2, 3, 4, 5, 6]);
        system.shutdown().await;
    });
}
