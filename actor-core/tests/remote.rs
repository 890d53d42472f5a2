//! Remoting between actor systems in one process, over real TCP on
//! loopback (port 0): tell, ask, references inside messages, ordering,
//! authentication, bad input, restart with a new UID and quarantine,
//! remote death watch, and the fault-injection switch.

mod common;

use common::{eventually, init_logging, next, within};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::time::Duration;
use troupe_core::prelude::*;
use troupe_core::remote::{Direction, RemoteSettings};
use troupe_core::{rt, AskError, TellError};

#[derive(Message, Serialize, Deserialize, Debug, Clone)]
#[message(reply = u64)]
struct Add(u64);

#[derive(Message, Serialize, Deserialize, Debug)]
struct Record(u64);

#[derive(Message, Serialize, Deserialize, Debug)]
#[message(reply = Vec<u64>)]
struct Recorded;

/// Asks a remote actor to answer to `reply_to` (a reference travelling
/// inside a message).
#[derive(Message, Serialize, Deserialize, Debug)]
struct PingTo {
    n: u64,
    reply_to: ActorRef<Collector>,
}

#[derive(Message, Serialize, Deserialize, Debug)]
struct Pong(u64);

#[derive(Message, Serialize, Deserialize, Debug)]
#[message(reply = String)]
struct Panic;

#[derive(Message, Serialize, Deserialize, Debug)]
struct Unregistered;

/// Answers `Pong` to whoever sent it (`tell_from`).
#[derive(Message, Serialize, Deserialize, Debug)]
struct EchoSender(u64);

#[derive(Message, Serialize, Deserialize, Debug)]
struct Blob(#[serde(with = "serde_bytes")] Vec<u8>);

/// Decodes into its number, except 13, whose decoding panics (a
/// `Deserialize` implementation with a bug).
#[derive(Message, Serialize, Deserialize, Debug)]
#[message(reply = u64)]
struct Fragile(#[serde(deserialize_with = "panics_on_13")] u64);

fn panics_on_13<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = <u64 as Deserialize>::deserialize(d)?;
    assert_ne!(n, 13, "a Deserialize implementation with a bug");
    Ok(n)
}

/// Answers the length of its bytes and their sum.
#[derive(Message, Serialize, Deserialize, Debug)]
#[message(reply = (usize, u64))]
struct Digest(#[serde(with = "serde_bytes")] Vec<u8>);

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
    async fn record(&mut self, msg: Record, _ctx: &mut Context<Self>) {
        self.seen.push(msg.0);
    }
    /// The next recorded numbers, at most 10,000 (a reply must fit in a frame).
    async fn recorded(&mut self, _msg: Recorded, _ctx: &mut Context<Self>) -> Vec<u64> {
        let n = self.seen.len().min(10_000);
        self.seen.drain(..n).collect()
    }
    async fn ping_to(&mut self, msg: PingTo, _ctx: &mut Context<Self>) {
        msg.reply_to.tell(Pong(msg.n * 2)).unwrap();
    }
    async fn panic(&mut self, _msg: Panic, _ctx: &mut Context<Self>) -> String {
        panic!("boom")
    }
    async fn unregistered(&mut self, _msg: Unregistered, _ctx: &mut Context<Self>) {}
    async fn echo_sender(&mut self, msg: EchoSender, ctx: &mut Context<Self>) {
        let to = ctx
            .sender()
            .and_then(|s| s.downcast::<Collector>())
            .expect("a sender");
        to.tell(Pong(msg.0)).unwrap();
    }
    async fn blob(&mut self, _msg: Blob, _ctx: &mut Context<Self>) {}
    async fn fragile(&mut self, msg: Fragile, _ctx: &mut Context<Self>) -> u64 {
        msg.0
    }
    async fn digest(&mut self, msg: Digest, _ctx: &mut Context<Self>) -> (usize, u64) {
        (msg.0.len(), msg.0.iter().map(|&b| u64::from(b)).sum())
    }
}

struct Collector(async_channel::Sender<u64>);
impl Actor for Collector {}

#[handlers]
impl Collector {
    async fn pong(&mut self, msg: Pong, _ctx: &mut Context<Self>) {
        let _ = self.0.send(msg.0).await;
    }
}

/// Watches what it is told to watch and reports `Terminated`.
/// Holds its first message until told to go on; stops itself on
/// `StopSelf`.
struct Gate {
    gate_open: async_channel::Receiver<()>,
    gate_held: async_channel::Sender<()>,
}
impl Actor for Gate {}

#[derive(Message, Serialize, Deserialize, Debug)]
struct Hold;

#[derive(Message, Serialize, Deserialize, Debug)]
struct StopSelf;

#[handlers]
impl Gate {
    async fn hold(&mut self, _m: Hold, _ctx: &mut Context<Self>) {
        let _ = self.gate_held.send(()).await;
        let _ = self.gate_open.recv().await;
    }
    async fn stop_self(&mut self, _m: StopSelf, ctx: &mut Context<Self>) {
        ctx.stop();
    }
    async fn add(&mut self, m: Add, _ctx: &mut Context<Self>) -> u64 {
        m.0
    }
}

async fn next_unit(rx: &async_channel::Receiver<()>) {
    within("a signal", rx.recv()).await.unwrap();
}

struct Watcher(async_channel::Sender<(String, StopReason)>);
impl Actor for Watcher {}

#[derive(Message)]
struct WatchIt(AnyActorRef);

#[handlers]
impl Watcher {
    async fn watch_it(&mut self, msg: WatchIt, ctx: &mut Context<Self>) {
        ctx.watch_any(&msg.0);
    }
    async fn terminated(&mut self, t: Terminated, _ctx: &mut Context<Self>) {
        let _ = self.0.send((t.actor.to_string(), t.reason)).await;
    }
}

fn settings(bind: &str) -> RemoteSettings {
    let mut s = RemoteSettings::new(bind)
        .with_secret("test-secret")
        .with_fault_injection();
    s.reconnect_backoff_max = Duration::from_millis(200);
    s.system_message_resend_interval = Duration::from_millis(200);
    s.watch_heartbeat_interval = Duration::from_millis(200);
    s.watch_failure_detector.acceptable_heartbeat_pause = Duration::from_millis(1500);
    s.watch_failure_detector.first_heartbeat_estimate = Duration::from_millis(200);
    s.watch_failure_detector.threshold = 8.0;
    s
}

fn node_with(name: &str, remote: RemoteSettings) -> ActorSystem {
    let system = ActorSystem::builder(name).remote(remote).build().unwrap();
    system
        .register::<Counter, Add>()
        .unwrap()
        .register::<Counter, Record>()
        .unwrap()
        .register::<Counter, Recorded>()
        .unwrap()
        .register::<Counter, PingTo>()
        .unwrap()
        .register::<Counter, Panic>()
        .unwrap()
        .register::<Counter, Blob>()
        .unwrap()
        .register::<Counter, Digest>()
        .unwrap()
        .register::<Counter, Fragile>()
        .unwrap()
        .register::<Gate, Hold>()
        .unwrap()
        .register::<Gate, StopSelf>()
        .unwrap()
        .register::<Gate, Add>()
        .unwrap()
        .register::<Counter, EchoSender>()
        .unwrap()
        .register::<Collector, Pong>()
        .unwrap();
    system
}

fn node(name: &str) -> ActorSystem {
    node_with(name, settings("127.0.0.1:0"))
}

/// Writes `bytes` on a raw connection and returns all that comes back
/// until the server closes it.
fn raw_exchange(port: u16, bytes: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(common::DEADLINE)).unwrap();
    s.write_all(bytes).unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    got
}

fn path_of(system: &ActorSystem, name: &str) -> String {
    format!("{}/user/{name}", system.remoting().unwrap().address())
}

/// Spawns a `Counter` named "counter" on `host` and resolves it from `from`.
fn counter_on(host: &ActorSystem, from: &ActorSystem) -> ActorRef<Counter> {
    host.spawn_named("counter", Counter::default()).unwrap();
    from.resolve(&path_of(host, "counter")).unwrap()
}

#[test]
fn tell_ask_and_refs_inside_messages() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let counter = counter_on(&b, &a);
        assert!(counter.is_remote());
        assert_eq!(counter.to_string(), path_of(&b, "counter"));

        counter.tell(Add(2)).unwrap();
        assert_eq!(within("remote ask", counter.ask(Add(3))).await.unwrap(), 5);

        // A reference to an actor on `a` travels to `b` and is used there.
        let (tx, rx) = async_channel::unbounded();
        let collector = a.spawn(Collector(tx));
        counter
            .tell(PingTo {
                n: 21,
                reply_to: collector,
            })
            .unwrap();
        assert_eq!(next(&rx).await, 42);

        // The sender of `tell_from` reaches the remote handler, locally too.
        let (tx, rx) = async_channel::unbounded();
        let collector = a.spawn(Collector(tx));
        counter
            .tell_from(EchoSender(7), &collector.to_any())
            .unwrap();
        assert_eq!(next(&rx).await, 7);
        let local_counter = a.spawn(Counter::default());
        local_counter
            .tell_from(EchoSender(8), &collector.to_any())
            .unwrap();
        assert_eq!(next(&rx).await, 8);

        // A panicking handler answers the remote asker with an error, promptly.
        b.spawn_named("crasher", Counter::default()).unwrap();
        let crasher: ActorRef<Counter> = a.resolve(&path_of(&b, "crasher")).unwrap();
        let e = within("failed ask", crasher.ask(Panic)).await.unwrap_err();
        assert!(matches!(e, AskError::Remote(_)), "{e:?}");

        // An unregistered message is refused at the sender with a clear error.
        match counter.tell(Unregistered) {
            Err(TellError::NotSendable(_, why)) => assert!(why.contains("register"), "{why}"),
            other => panic!("expected NotSendable, got {other:?}"),
        }

        // A path of the system itself resolves locally.
        let local: ActorRef<Counter> = b.resolve(&path_of(&b, "counter")).unwrap();
        assert!(!local.is_remote());
        assert!(b.resolve::<Collector>(&path_of(&b, "counter")).is_err());

        // Once the sender's system is shut down, a send to a remote actor
        // says so (not "full", which would invite a retry).
        a.shutdown().await;
        match counter.tell(Record(9)) {
            Err(TellError::NotSendable(_, why)) => assert!(why.contains("shut down"), "{why}"),
            other => panic!("expected NotSendable, got {other:?}"),
        }
        let e = within("ask after shutdown", counter.ask(Add(1)))
            .await
            .unwrap_err();
        assert!(
            matches!(&e, AskError::NotSendable(why) if why.contains("shut down")),
            "{e:?}"
        );
        b.shutdown().await;
    });
}

#[test]
fn one_senders_messages_keep_their_order() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let counter = counter_on(&b, &a);
        const N: u64 = 100_000;
        for i in 0..N {
            counter.send(Record(i)).await.unwrap();
        }
        let mut got = Vec::new();
        while got.len() < N as usize {
            let batch = counter
                .ask_timeout(Recorded, Duration::from_secs(60))
                .await
                .unwrap();
            got.extend(batch);
        }
        assert!(
            got.iter().copied().eq(0..N),
            "messages arrived out of order"
        );
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn a_peer_with_a_wrong_secret_is_refused() {
    init_logging();
    rt::block_on(async {
        let a = node_with("a", settings("127.0.0.1:0").with_secret("wrong"));
        let b = node("b");
        let counter = counter_on(&b, &a);
        counter.tell(Add(1)).unwrap();
        let e = counter
            .ask_timeout(Add(1), Duration::from_millis(500))
            .await
            .unwrap_err();
        assert!(matches!(e, AskError::Timeout(_)), "{e:?}");
        // Nothing got through: the counter is still at zero.
        let local: ActorRef<Counter> = b.lookup("/user/counter").unwrap();
        assert_eq!(local.ask(Add(0)).await.unwrap(), 0);
        assert!(a
            .remoting()
            .unwrap()
            .peer_uid(b.remoting().unwrap().address())
            .is_none());
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn garbage_and_oversized_frames_do_not_break_other_traffic() {
    init_logging();
    rt::block_on(async {
        let mut small = settings("127.0.0.1:0");
        small.max_frame_size = 4096;
        let a = node("a");
        let b = node_with("b", small);
        let counter = counter_on(&b, &a);
        assert_eq!(within("first ask", counter.ask(Add(1))).await.unwrap(), 1);

        let port = b.remoting().unwrap().address().port();
        let before = b.remoting().unwrap().bad_input_count();
        // Garbage from raw sockets: not a preamble, a good preamble then
        // junk, and a huge length prefix.
        let junk: [&[u8]; 3] = [
            b"GET / HTTP/1.1\r\n\r\n",
            b"TRP\x01\x00\x00\x00\x05\xff\xff\xff\xff\xff",
            b"TRP\x01\xff\xff\xff\xff",
        ];
        for bytes in junk {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(bytes).unwrap();
        }
        eventually("bad input counted", || {
            b.remoting().unwrap().bad_input_count() >= before + 3
        })
        .await;

        // A frame over b's limit (a's is larger) is skipped by b; the
        // connection and the messages behind it go on.
        let before = b.remoting().unwrap().bad_input_count();
        counter.tell(Blob(vec![7; 10_000])).unwrap();
        assert_eq!(
            within("ask after garbage", counter.ask(Add(1)))
                .await
                .unwrap(),
            2
        );
        assert_eq!(b.remoting().unwrap().bad_input_count(), before + 1);

        // A message over the sender's own limit is refused at once.
        let tiny = node_with("c", {
            let mut s = settings("127.0.0.1:0");
            s.max_frame_size = 1024;
            s
        });
        let via_tiny: ActorRef<Counter> = tiny.resolve(&path_of(&b, "counter")).unwrap();
        match via_tiny.tell(Blob(vec![0; 2000])) {
            Err(TellError::NotSendable(_, why)) => assert!(why.contains("max_frame_size"), "{why}"),
            other => panic!("expected NotSendable, got {other:?}"),
        }
        tiny.shutdown().await;
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn remote_watch_delivers_terminated_when_the_actor_stops() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let target = b.spawn_named("target", Counter::default()).unwrap();
        let (tx, rx) = async_channel::unbounded();
        let watcher = a.spawn(Watcher(tx));
        let remote: ActorRef<Counter> = a.resolve(&path_of(&b, "target")).unwrap();
        watcher.tell(WatchIt(remote.to_any())).unwrap();
        within("ask", remote.ask(Add(1))).await.unwrap();
        // Whether the watch reaches b before or after the stop, the watcher
        // gets `Terminated` with `Stopped` (a watch of an actor that is
        // already gone is answered at once).
        target.stop();
        let (who, reason) = next(&rx).await;
        assert_eq!(who, path_of(&b, "target"));
        assert_eq!(reason, StopReason::Stopped);

        // Watching an actor that does not exist there: `Terminated` at once.
        let ghost: ActorRef<Counter> = a.resolve(&path_of(&b, "ghost")).unwrap();
        watcher.tell(WatchIt(ghost.to_any())).unwrap();
        let (who, _) = next(&rx).await;
        assert_eq!(who, path_of(&b, "ghost"));
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn shutdown_is_prompt_while_a_peer_cannot_be_reached() {
    init_logging();
    rt::block_on(async {
        // A port nobody listens on: the writer for it keeps reconnecting
        // with backoff, and its queued message can never be flushed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut remote = settings("127.0.0.1:0");
        remote.reconnect_backoff_min = Duration::from_secs(2);
        remote.reconnect_backoff_max = Duration::from_secs(2);
        remote.shutdown_flush_timeout = Duration::from_secs(10);
        let a = node_with("a", remote);
        let nowhere: ActorRef<Counter> = a
            .resolve(&format!("troupe://b@127.0.0.1:{port}/user/counter"))
            .unwrap();
        nowhere.tell(Record(1)).unwrap();
        // Setting the scene, not waiting for a result: a refused connection
        // takes well under this, after which the writer is in its 2 s
        // backoff (were it not yet, shutdown would only be faster).
        rt::sleep(Duration::from_millis(200)).await;
        let start = std::time::Instant::now();
        a.shutdown().await;
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "shutdown took {:?}: a writer sleeping in its backoff held it up",
            start.elapsed()
        );
    });
}

#[test]
fn a_watcher_that_stops_ends_its_remote_watches() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        b.spawn_named("target", Counter::default()).unwrap();
        let remote: ActorRef<Counter> = a.resolve(&path_of(&b, "target")).unwrap();
        let (tx, _rx) = async_channel::unbounded();
        let watchers: Vec<_> = (0..3).map(|_| a.spawn(Watcher(tx.clone()))).collect();
        for w in &watchers {
            w.tell(WatchIt(remote.to_any())).unwrap();
        }
        let ra = a.remoting().unwrap();
        eventually("three remote watches", || ra.remote_watch_count() == 3).await;
        // Watchers that stop without unwatching leave nothing behind.
        for w in &watchers {
            w.stop();
        }
        eventually("no remote watch left", || ra.remote_watch_count() == 0).await;
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn a_restarted_peer_gets_a_new_uid_and_the_old_one_is_quarantined() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b1 = node("b");
        let b_addr = b1.remoting().unwrap().address().clone();
        let old_uid = b1.remoting().unwrap().uid();
        b1.spawn_named("counter", Counter::default()).unwrap();
        let (tx, rx) = async_channel::unbounded();
        let watcher = a.spawn(Watcher(tx));
        let counter: ActorRef<Counter> = a.resolve(&path_of(&b1, "counter")).unwrap();
        watcher.tell(WatchIt(counter.to_any())).unwrap();
        assert_eq!(within("ask", counter.ask(Add(5))).await.unwrap(), 5);

        // The death-watch notification of b1's orderly shutdown is lost, as
        // if b1 had crashed.
        let ra = a.remoting().unwrap();
        let faults = ra.fault_injector().unwrap();
        faults.blackhole(&b_addr, Direction::Receive);
        b1.shutdown().await;
        faults.pass_through(&b_addr);
        // The same port, a new incarnation.
        let b2 = node_with("b", settings(&format!("127.0.0.1:{}", b_addr.port())));
        assert_ne!(b2.remoting().unwrap().uid(), old_uid);
        b2.spawn_named("counter", Counter::default()).unwrap();
        let answer = async {
            loop {
                if let Ok(v) = counter
                    .ask_timeout(Add(1), Duration::from_millis(300))
                    .await
                {
                    return v;
                }
            }
        };
        // A fresh counter answers: the new incarnation works.
        assert_eq!(within("ask to the new incarnation", answer).await, 1);
        eventually("old UID quarantined", || {
            ra.is_quarantined(&b_addr, old_uid)
        })
        .await;
        // The watcher learns that the old incarnation's actor is gone: by
        // the quarantine (NodeLost), or — if b1's last frames, written
        // while it shut down, arrive after the blackhole is lifted — by its
        // own death-watch notification (Stopped).
        let (who, reason) = next(&rx).await;
        assert_eq!(who, path_of(&b2, "counter"));
        assert!(
            matches!(reason, StopReason::NodeLost(_) | StopReason::Stopped),
            "{reason:?}"
        );
        a.shutdown().await;
        b2.shutdown().await;
    });
}

#[test]
fn blackhole_stops_traffic_and_healing_restores_it() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let counter = counter_on(&b, &a);
        assert_eq!(within("ask", counter.ask(Add(1))).await.unwrap(), 1);

        let ra = a.remoting().unwrap();
        let faults = ra.fault_injector().unwrap();
        let b_addr = b.remoting().unwrap().address().clone();
        faults.blackhole(&b_addr, Direction::Both);
        let e = counter
            .ask_timeout(Add(1), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(e, AskError::Timeout(_)), "{e:?}");
        faults.pass_through(&b_addr);
        // The message sent into the blackhole is lost (at most once); new
        // traffic flows again.
        assert_eq!(
            within("ask after healing", counter.ask(Add(1)))
                .await
                .unwrap(),
            2
        );
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn an_unreachable_node_ends_remote_watches_by_the_failure_detector() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        b.spawn_named("target", Counter::default()).unwrap();
        let (tx, rx) = async_channel::unbounded();
        let watcher = a.spawn(Watcher(tx));
        let remote: ActorRef<Counter> = a.resolve(&path_of(&b, "target")).unwrap();
        within("ask", remote.ask(Add(1))).await.unwrap();
        watcher.tell(WatchIt(remote.to_any())).unwrap();
        let b_addr = b.remoting().unwrap().address().clone();
        let b_uid = b.remoting().unwrap().uid();
        // Heartbeats flow for a while, then the link goes dark.
        rt::sleep(Duration::from_millis(600)).await;
        a.remoting()
            .unwrap()
            .fault_injector()
            .unwrap()
            .blackhole(&b_addr, Direction::Both);
        let started = std::time::Instant::now();
        let (who, reason) = next(&rx).await;
        assert_eq!(who, path_of(&b, "target"));
        assert!(matches!(reason, StopReason::NodeLost(_)), "{reason:?}");
        // Acceptable pause 1.5 s plus a few heartbeat intervals.
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
        assert!(a.remoting().unwrap().is_quarantined(&b_addr, b_uid));
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn system_messages_sent_into_a_blackhole_are_redelivered_after_healing() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let target = b.spawn_named("target", Counter::default()).unwrap();
        let remote: ActorRef<Counter> = a.resolve(&path_of(&b, "target")).unwrap();
        within("ask", remote.ask(Add(1))).await.unwrap();
        let ra = a.remoting().unwrap();
        let faults = ra.fault_injector().unwrap();
        let b_addr = b.remoting().unwrap().address().clone();
        // The watch request goes into the blackhole...
        faults.blackhole(&b_addr, Direction::Send);
        let (tx, rx) = async_channel::unbounded();
        let watcher = a.spawn(Watcher(tx));
        watcher.tell(WatchIt(remote.to_any())).unwrap();
        rt::sleep(Duration::from_millis(500)).await;
        // ...and redelivered once the link heals: whether it arrives before
        // or after the stop, the watcher learns of it (without redelivery,
        // it never would).
        faults.pass_through(&b_addr);
        target.stop();
        let (who, reason) = next(&rx).await;
        assert_eq!(who, path_of(&b, "target"));
        assert_eq!(reason, StopReason::Stopped);
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn unknown_manifests_and_wrong_versions_are_dropped_and_logged() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        // b does not register `Record`.
        let b = ActorSystem::builder("b")
            .remote(settings("127.0.0.1:0"))
            .build()
            .unwrap();
        b.register::<Counter, Add>().unwrap();
        a.register::<Counter, Add>().unwrap();
        let counter = counter_on(&b, &a);
        let rb = b.remoting().unwrap();
        let before = rb.bad_input_count();
        counter.tell(Record(1)).unwrap();
        assert_eq!(within("ask", counter.ask(Add(2))).await.unwrap(), 2);
        eventually("unknown manifest counted", || rb.bad_input_count() > before).await;

        // A peer speaking another protocol version gets our preamble back
        // and is disconnected.
        let port = rb.address().port();
        let answer = raw_exchange(port, b"TRP\x09");
        assert_eq!(answer, b"TRP\x01");
        assert_eq!(within("ask", counter.ask(Add(1))).await.unwrap(), 3);
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn the_queue_to_an_unreachable_peer_is_bounded() {
    init_logging();
    rt::block_on(async {
        let mut s = settings("127.0.0.1:0");
        s.outbound_queue_size = 10;
        let a = node_with("a", s);
        // Nothing listens there.
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        drop(free);
        let nowhere: ActorRef<Counter> = a
            .resolve(&format!("troupe://b@127.0.0.1:{port}/user/counter"))
            .unwrap();
        let before = a.dead_letter_count();
        let mut refused = 0;
        for i in 0..100 {
            if let Err(TellError::MailboxFull(_)) = nowhere.tell(Record(i)) {
                refused += 1;
            }
        }
        assert!(refused >= 89, "only {refused} refused");
        // Handed back, not lost: no dead letters (as a full local mailbox),
        // but counted.
        assert_eq!(a.dead_letter_count(), before);
        assert_eq!(a.remoting().unwrap().refused_count(), refused);
        let e = nowhere
            .ask_timeout(Add(1), Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(
            matches!(e, AskError::MailboxFull | AskError::Timeout(_)),
            "{e:?}"
        );
        a.shutdown().await;
    });
}

/// Two message types that claim one manifest.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(name = "clash.Same")]
struct ClashA;
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(name = "clash.Same")]
struct ClashB;

struct Clashing;
impl Actor for Clashing {}
#[handlers]
impl Clashing {
    async fn a(&mut self, _m: ClashA) {}
    async fn b(&mut self, _m: ClashB) {}
}

#[test]
fn a_manifest_taken_by_another_type_is_refused() {
    let system = ActorSystem::new("clash").unwrap();
    system.register::<Clashing, ClashA>().unwrap();
    // The same type again is fine (another actor type may handle it too).
    system.register::<Clashing, ClashA>().unwrap();
    match system.register::<Clashing, ClashB>() {
        Err(troupe_core::RegisterError::ManifestTaken {
            manifest,
            registered,
            refused,
        }) => {
            assert_eq!(manifest, "clash.Same");
            assert!(registered.ends_with("ClashA") && refused.ends_with("ClashB"));
        }
        other => panic!("expected ManifestTaken, got {:?}", other.map(|_| ())),
    }
    rt::block_on(system.shutdown());
}

/// Hands every `Add` on to another counter with the asker's reply channel.
struct Relay(ActorRef<Counter>);
impl Actor for Relay {}
impl Handler<Add> for Relay {
    async fn handle(&mut self, _m: Add, _ctx: &mut Context<Self>) -> u64 {
        unreachable!("the relay forwards")
    }
    async fn handle_with_reply(
        &mut self,
        msg: Add,
        reply: Option<troupe_core::Replier<u64>>,
        _ctx: &mut Context<Self>,
    ) {
        if let Err(e) = self.0.forward(msg, reply, None) {
            if let Some(r) = e.reply {
                r.fail(troupe_core::AskError::Stopped);
            }
        }
    }
}

#[test]
fn forward_keeps_the_reply_channel_across_nodes_and_hands_it_back_on_failure() {
    init_logging();
    rt::block_on(async {
        let a = node("fa");
        let b = node("fb");
        let remote = counter_on(&b, &a);
        let relay = a.spawn(Relay(remote));
        // The asker on `a` is answered by the counter on `b`, through the
        // relay that never waits.
        assert_eq!(within("forwarded ask", relay.ask(Add(4))).await.unwrap(), 4);
        assert_eq!(within("forwarded ask", relay.ask(Add(1))).await.unwrap(), 5);

        // A forward to a stopped actor hands back the message and the
        // reply channel; answering it reaches the asker.
        let local = a.spawn(Counter::default());
        local.stop();
        local.wait_for_termination().await;
        let (replier, ask) = troupe_core::Replier::<u64>::channel(common::DEADLINE);
        let e = local.forward(Add(7), Some(replier), None).unwrap_err();
        assert!(matches!(e.error, TellError::Stopped(Add(7))));
        e.reply.unwrap().send(99);
        assert_eq!(ask.await.unwrap(), 99);
        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn encoded_messages_are_delivered_by_manifest_and_bad_bytes_are_refused() {
    rt::block_on(async {
        let system = node("codec");
        let counter = system.spawn(Counter::default());
        let enc = system.encode_message(&Add(20)).unwrap();
        let (replier, reply) = troupe_core::Replier::channel(common::DEADLINE);
        system
            .deliver_encoded(&counter, enc.manifest, &enc.bytes, Some(replier), None)
            .unwrap();
        let bytes = reply.await.unwrap();
        assert_eq!(system.decode_reply::<Add>(&bytes.0).unwrap(), 20);

        let (replier, reply) = troupe_core::Replier::channel(common::DEADLINE);
        let e = system
            .deliver_encoded(&counter, enc.manifest, b"\xc1garbage", Some(replier), None)
            .unwrap_err();
        assert!(
            matches!(e, troupe_core::DeliverError::Undecodable(_)),
            "{e:?}"
        );
        assert!(reply.await.is_err(), "the asker learns that it failed");
        let e = system
            .deliver_encoded(&counter, "no.such.Manifest", &enc.bytes, None, None)
            .unwrap_err();
        assert!(matches!(e, troupe_core::DeliverError::UnknownManifest(_)));
        assert!(matches!(
            system.encode_message(&Unregistered),
            Err(troupe_core::CodecError::NotRegistered(_))
        ));
        system.shutdown().await;
    });
}

#[test]
fn messages_from_another_node_are_decoded_by_their_actor_in_order() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let counter = counter_on(&b, &a);

        // Small messages travel inside their letter, large ones beside it;
        // both decode, in the order they were sent.
        for len in [0, 1, 100, 140, 200, 5_000] {
            let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let sum = bytes.iter().map(|&b| u64::from(b)).sum();
            counter.tell(Record(len as u64)).unwrap();
            let digest = within("digest", counter.ask(Digest(bytes))).await.unwrap();
            assert_eq!(digest, (len, sum));
        }
        let seen = within("recorded", counter.ask(Recorded)).await.unwrap();
        assert_eq!(seen, vec![0, 1, 100, 140, 200, 5_000]);

        // Bytes that do not decode: the asker is told why, promptly, the
        // receiving node counts bad input, and the actor carries on.
        let bad_before = b.remoting().unwrap().bad_input_count();
        let (replier, reply) = troupe_core::Replier::channel(common::DEADLINE);
        a.send_encoded(
            &counter,
            Add::manifest(),
            |buf| {
                buf.extend_from_slice(b"\xc1garbage");
                Ok(())
            },
            Some(replier),
        )
        .unwrap();
        let e = within("undecodable ask", reply).await.unwrap_err();
        assert!(
            matches!(&e, AskError::Remote(why) if why.contains("did not decode")),
            "{e:?}"
        );
        assert_eq!(b.remoting().unwrap().bad_input_count(), bad_before + 1);
        assert_eq!(within("ask", counter.ask(Add(1))).await.unwrap(), 1);

        // A decoding that panics is a failure of the handler: the asker is
        // told, and the actor's supervisor decides (a top-level actor
        // spawned from a value stops; it is not left stuck).
        let fragile = b.spawn_named("fragile", Counter::default()).unwrap();
        let remote_fragile: ActorRef<Counter> = a.resolve(&path_of(&b, "fragile")).unwrap();
        assert_eq!(
            within("ask", remote_fragile.ask(Fragile(12)))
                .await
                .unwrap(),
            12
        );
        let e = within("ask that panics", remote_fragile.ask(Fragile(13)))
            .await
            .unwrap_err();
        assert!(matches!(e, AskError::Remote(_)), "{e:?}");
        within("the failed actor stops", fragile.wait_for_termination()).await;

        // A message queued for an actor that stops before handling it
        // tells its asker so, rather than leaving it to time out.
        let (open, gate_open) = async_channel::bounded(1);
        let (gate_held, held) = async_channel::bounded(1);
        b.spawn_named(
            "gate",
            Gate {
                gate_open,
                gate_held,
            },
        )
        .unwrap();
        let gate: ActorRef<Gate> = a.resolve(&path_of(&b, "gate")).unwrap();
        gate.tell(Hold).unwrap();
        next_unit(&held).await;
        gate.tell(StopSelf).unwrap();
        let pending = gate.ask(Add(1));
        // The reader has queued both once a later ask on the same link is
        // answered.
        assert_eq!(within("ask behind", counter.ask(Add(0))).await.unwrap(), 1);
        open.send(()).await.unwrap();
        let e = within("ask of a stopping actor", pending)
            .await
            .unwrap_err();
        assert!(
            matches!(&e, AskError::Remote(why) if why.contains("stopped before replying")),
            "{e:?}"
        );
        a.shutdown().await;
        b.shutdown().await;
    });
}

/// Registers on `system` a receiver for `test.Raw` to counters: the bytes
/// are an `Add`, handed on to the counter's mailbox; counts its calls.
fn raw_receiver(system: &ActorSystem) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let add = system.encoded_delivery::<Counter>(Add::manifest()).unwrap();
    system.register_receiver::<Counter>("test.Raw", move |m: troupe_core::InboundMessage<'_>| {
        seen.fetch_add(1, Ordering::SeqCst);
        let to = m.to.downcast::<Counter>().expect("a counter");
        add.deliver(&to, m.bytes, m.reply, m.sender)
    });
    calls
}

/// Writes `msg` in its wire form, as `send_encoded`'s `write` does.
fn encoded<M: Message>(
    system: &ActorSystem,
    msg: M,
) -> impl FnOnce(&mut Vec<u8>) -> Result<(), String> + use<M> {
    let system = system.clone();
    move |buf: &mut Vec<u8>| {
        system
            .encode_message_into(&msg, buf)
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

#[test]
fn queued_and_direct_encoded_sends_to_a_node_keep_their_order() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let counter = counter_on(&b, &a);
        let record = |n: u64| encoded(&a, Record(n));
        // Runs of each kind, with pauses that leave the connection idle
        // (where `send_encoded` writes on this thread) and without.
        let mut sent = Vec::new();
        for n in 0..2_000u64 {
            let manifest = Record::manifest();
            let queued = (n / 7) % 2 == 0;
            let result = if queued {
                a.send_encoded_queued(&counter, manifest, record(n), None)
            } else {
                a.send_encoded(&counter, manifest, record(n), None)
            };
            match result {
                Ok(()) => sent.push(n),
                Err(troupe_core::SendEncodedError::Full) => counter.wait_for_room().await,
                Err(e) => panic!("{e:?}"),
            }
            if n % 100 == 0 {
                within("ask", counter.ask(Add(0))).await.unwrap();
            }
        }
        let mut seen = Vec::new();
        while seen.len() < sent.len() {
            let more = within("recorded", counter.ask(Recorded)).await.unwrap();
            assert!(
                !more.is_empty() || seen.len() == sent.len(),
                "messages lost"
            );
            seen.extend(more);
        }
        assert_eq!(seen, sent);
        a.shutdown().await;
        b.shutdown().await;
    });
}

/// Asks `counter` on another node through `test.Seq`, whose receivers
/// answer with how many messages they took; returns the answer.
async fn seq_ask(from: &ActorSystem, counter: &ActorRef<Counter>) -> u64 {
    let (replier, reply) = troupe_core::Replier::channel(common::DEADLINE);
    from.send_encoded(counter, "test.Seq", |_| Ok(()), Some(replier))
        .unwrap();
    let bytes = within("seq ask", reply).await.unwrap().0;
    u64::from_be_bytes(bytes.try_into().expect("8 bytes"))
}

#[test]
fn a_receiver_per_connection_keeps_its_state_for_that_connection_alone() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    init_logging();
    rt::block_on(async {
        let (a, b, c) = (node("a"), node("b"), node("c"));
        let made = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = made.clone();
        // Each receiver numbers the messages it takes, without a lock.
        b.register_receiver_per_connection::<Counter, _>("test.Seq", move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut taken = 0u64;
            move |m: troupe_core::InboundMessage<'_>| {
                taken += 1;
                if let Some(r) = m.reply {
                    r.send(troupe_core::EncodedReply(taken.to_be_bytes().to_vec()));
                }
                Ok(())
            }
        });
        for n in [&a, &c] {
            n.register_receiver::<Counter>("test.Seq", |_| Ok(()));
        }
        let local = b.spawn_named("counter", Counter::default()).unwrap();
        let from_a: ActorRef<Counter> = a.resolve(&path_of(&b, "counter")).unwrap();
        let from_c: ActorRef<Counter> = c.resolve(&path_of(&b, "counter")).unwrap();
        // One receiver for a's connection: it counts on.
        for expected in 1..=3 {
            assert_eq!(seq_ask(&a, &from_a).await, expected);
        }
        assert_eq!(made.load(Ordering::SeqCst), 1);
        // c's connection has a receiver of its own.
        assert_eq!(seq_ask(&c, &from_c).await, 1);
        assert_eq!(seq_ask(&a, &from_a).await, 4);
        assert_eq!(seq_ask(&c, &from_c).await, 2);
        assert_eq!(made.load(Ordering::SeqCst), 2);
        // A local delivery has one made for it alone, every time.
        for _ in 0..2 {
            let (replier, reply) = troupe_core::Replier::channel(common::DEADLINE);
            b.send_encoded(&local, "test.Seq", |_| Ok(()), Some(replier))
                .unwrap();
            assert_eq!(within("local", reply).await.unwrap().0, 1u64.to_be_bytes());
        }
        assert_eq!(made.load(Ordering::SeqCst), 4);
        for n in [a, b, c] {
            n.shutdown().await;
        }
    });
}

#[test]
fn a_receiver_gets_encoded_bytes_on_the_reader_and_send_encoded_writes_them_in_place() {
    use std::sync::atomic::Ordering;
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let calls = raw_receiver(&b);
        raw_receiver(&a);
        let counter = counter_on(&b, &a);
        let add = |n: u64| encoded(&a, Add(n));

        // An ask: the reply comes back as the handler encoded it.
        let (replier, reply) = troupe_core::Replier::channel(common::DEADLINE);
        a.send_encoded(&counter, "test.Raw", add(5), Some(replier))
            .unwrap();
        let bytes = within("encoded ask", reply).await.unwrap();
        assert_eq!(a.decode_reply::<Add>(&bytes.0).unwrap(), 5);
        // A tell, then a plain ask behind it on the same link.
        a.send_encoded(&counter, "test.Raw", add(7), None).unwrap();
        assert_eq!(within("ask", counter.ask(Add(0))).await.unwrap(), 12);
        assert_eq!(calls.load(Ordering::SeqCst), 2);

        // To a local actor it goes through the receiver as well.
        let local = b.spawn(Counter::default());
        b.send_encoded(
            &local,
            "test.Raw",
            |buf| {
                b.encode_message_into(&Add(3), buf)
                    .map(drop)
                    .map_err(|e| e.to_string())
            },
            None,
        )
        .unwrap();
        assert_eq!(within("local ask", local.ask(Add(0))).await.unwrap(), 3);
        assert_eq!(calls.load(Ordering::SeqCst), 3);

        // Bytes that `write` could not produce: refused, and the asker told.
        let (replier, reply) = troupe_core::Replier::channel(common::DEADLINE);
        let e = a
            .send_encoded(
                &counter,
                "test.Raw",
                |_| Err("no bytes".into()),
                Some(replier),
            )
            .unwrap_err();
        assert!(
            matches!(&e, troupe_core::SendEncodedError::NotSendable(why) if why.contains("no bytes")),
            "{e:?}"
        );
        assert!(reply.await.is_err());
        // A manifest nobody receives, locally: refused by name.
        let e = b
            .send_encoded(&local, "no.such.Raw", |_| Ok(()), None)
            .unwrap_err();
        assert!(
            matches!(
                e,
                troupe_core::SendEncodedError::Refused(troupe_core::DeliverError::UnknownManifest(
                    _
                ))
            ),
            "{e:?}"
        );
        // Garbage through the receiver, remotely: the ask fails promptly and
        // the link still works.
        let (replier, reply) = troupe_core::Replier::channel(common::DEADLINE);
        a.send_encoded(
            &counter,
            "test.Raw",
            |buf| {
                buf.extend_from_slice(b"\xc1garbage");
                Ok(())
            },
            Some(replier),
        )
        .unwrap();
        assert!(within("failed ask", reply).await.is_err());
        assert_eq!(within("ask", counter.ask(Add(1))).await.unwrap(), 13);

        a.shutdown().await;
        b.shutdown().await;
    });
}

#[test]
fn interleaved_remote_tells_to_several_actors_keep_each_actor_s_order() {
    init_logging();
    rt::block_on(async {
        let a = node("a");
        let b = node("b");
        let names = ["c0", "c1", "c2"];
        for n in names {
            b.spawn_named(n, Counter::default()).unwrap();
        }
        let counters: Vec<ActorRef<Counter>> = names
            .iter()
            .map(|n| a.resolve(&path_of(&b, n)).unwrap())
            .collect();
        // Interleaved, so that frames for several actors share the
        // reader's batches (whose activations start at the batch's end).
        const N: u64 = 20_000;
        for i in 0..N {
            let c = &counters[(i % 3) as usize];
            let mut msg = Record(i);
            loop {
                match c.tell(msg) {
                    Ok(()) => break,
                    Err(TellError::MailboxFull(m)) => {
                        msg = m;
                        rt::yield_now().await;
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
        for (k, c) in counters.iter().enumerate() {
            let mut got = Vec::new();
            let start = std::time::Instant::now();
            while (got.len() as u64) < N / 3 + u64::from((k as u64) < N % 3) {
                assert!(
                    start.elapsed() < common::DEADLINE,
                    "counter {k}: {} records",
                    got.len()
                );
                got.extend(within("recorded", c.ask(Recorded)).await.unwrap());
            }
            let expected: Vec<u64> = (0..N).filter(|i| i % 3 == k as u64).collect();
            assert_eq!(got, expected, "counter {k} got its records in order");
        }
        a.shutdown().await;
        b.shutdown().await;
    });
}

/// The fault-injection switch's `hold` keeps messages to a peer in their
/// queue: once it is full, sends are refused as on a congested link;
/// `release` lets the held ones out, once each and in order.
#[test]
fn held_messages_fill_the_queue_and_go_out_in_order_when_released() {
    init_logging();
    rt::block_on(async {
        let mut s = settings("127.0.0.1:0");
        s.outbound_queue_size = 10;
        let a = node_with("a", s);
        let b = node("b");
        let counter = counter_on(&b, &a);
        // Connected (the first ask), then held.
        assert_eq!(within("ask", counter.ask(Add(1))).await.unwrap(), 1);
        let faults = a.remoting().unwrap().fault_injector().unwrap();
        faults.hold(b.remoting().unwrap().address());
        let mut accepted = 0;
        let refused = loop {
            match counter.tell(Record(accepted)) {
                Ok(()) => accepted += 1,
                Err(TellError::MailboxFull(Record(n))) => break n,
                Err(e) => panic!("{e:?}"),
            }
            assert!(accepted <= 10, "the queue of 10 took {accepted}");
        };
        assert_eq!(refused, accepted, "the refused message is handed back");
        assert!(accepted >= 1);
        // Waiting for room waits while the queue is full...
        let mut room = Box::pin(counter.wait_for_room());
        assert!(
            futures_lite::future::poll_once(&mut room).await.is_none(),
            "room while the queue is full"
        );
        // While held nothing has arrived.
        let here = b.lookup::<Counter>("/user/counter").unwrap();
        assert!(within("local ask", here.ask(Recorded))
            .await
            .unwrap()
            .is_empty());
        assert!(futures_lite::future::poll_once(&mut room).await.is_none());
        faults.release(b.remoting().unwrap().address());
        // ... and ends once the held messages have gone out.
        within("room after the release", room).await;
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while got.len() < accepted as usize {
            assert!(std::time::Instant::now() < deadline, "got only {got:?}");
            got.extend(within("recorded", here.ask(Recorded)).await.unwrap());
            rt::yield_now().await;
        }
        assert_eq!(got, (0..accepted).collect::<Vec<_>>());
        a.shutdown().await;
        b.shutdown().await;
    });
}
