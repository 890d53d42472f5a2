//! Local messaging benchmarks: Troupe, actix 0.13, kameo 0.22, ractor 0.16,
//! the same workloads in one run.
//!
//! ```sh
//! cargo bench --manifest-path benches/Cargo.toml --bench local
//! ```
//!
//! Every measurement runs in a fresh child process (this program re-run
//! with `child FRAMEWORK WORKLOAD THREADS`), so that memory figures start
//! from a clean heap and executor thread counts can differ. Workloads:
//!
//! - `spawn`: spawn 100,000 actors, then ask each once; µs per actor
//!   (spawn + first ask, with the executor on two threads and on one) and
//!   RSS growth per idle actor;
//! - `tell`: 2,000,000 tells to one counting actor, then one ask that
//!   confirms the count; messages per second;
//! - `ask`: 200,000 sequential asks; µs per round trip, with the executor
//!   on one thread and on two.
//!
//! The parent prints a table and one JSON line per framework.
//!
//! With the argument `many` (`cargo bench ... --bench local -- many`), it
//! runs the many-core workload instead, with the executor on every core
//! (`available_parallelism`), for N = 1 to that many:
//!
//! - N sender actors each tell 1,000,000 messages to a receiver of its own
//!   (yielding every 1,024, so that a sender shares its thread as a real
//!   one would), then ask it for its count; messages per second over all
//!   pairs;
//! - N pinger actors each ask a ponger of its own 100,000 times in turn;
//!   µs per round trip (wall time over the asks of one pair, the pairs
//!   running at once) and asks per second over all pairs.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

const SPAWN_N: u64 = 100_000;
const TELL_N: u64 = 2_000_000;
const ASK_N: u64 = 200_000;
/// Tells per sender in the many-core workload.
const MANY_TELLS: u64 = 1_000_000;
/// Asks per pinger in the many-core workload.
const MANY_ASKS: u64 = 100_000;
/// A sender yields to its executor after this many tells.
const MANY_YIELD_EVERY: u64 = 1024;

/// One measurement: named figures.
type Figures = Vec<(&'static str, f64)>;

#[path = "support/memory.rs"]
mod memory;

fn rss_bytes() -> f64 {
    memory::rss_bytes() as f64
}

fn spawn_figures(spawned: Duration, total: Duration, rss_before: f64, rss_after: f64) -> Figures {
    vec![
        (
            "spawn_us_per_actor",
            spawned.as_secs_f64() * 1e6 / SPAWN_N as f64,
        ),
        (
            "spawn_and_ask_us_per_actor",
            total.as_secs_f64() * 1e6 / SPAWN_N as f64,
        ),
        (
            "bytes_per_idle_actor",
            (rss_after - rss_before) / SPAWN_N as f64,
        ),
    ]
}

fn tell_figures(elapsed: Duration) -> Figures {
    vec![("tell_msgs_per_sec", TELL_N as f64 / elapsed.as_secs_f64())]
}

fn ask_figures(elapsed: Duration) -> Figures {
    vec![("ask_us", elapsed.as_secs_f64() * 1e6 / ASK_N as f64)]
}

/// The N of a many-core workload named `many{N}`.
fn many_pairs(workload: &str) -> Option<u64> {
    workload.strip_prefix("many")?.parse().ok()
}

fn many_figures(pairs: u64, tells: Duration, asks: Duration) -> Figures {
    vec![
        (
            "many_tell_msgs_per_sec",
            (pairs * MANY_TELLS) as f64 / tells.as_secs_f64(),
        ),
        ("many_ask_us", asks.as_secs_f64() * 1e6 / MANY_ASKS as f64),
        (
            "many_asks_per_sec",
            (pairs * MANY_ASKS) as f64 / asks.as_secs_f64(),
        ),
    ]
}

mod troupe {
    use super::*;
    use troupe_core::prelude::*;
    use troupe_core::rt;

    #[derive(Message)]
    struct Inc;

    #[derive(Message)]
    #[message(reply = u64)]
    struct Get;

    #[derive(Default)]
    struct Counter {
        n: u64,
    }
    impl Actor for Counter {}

    #[handlers]
    impl Counter {
        async fn inc(&mut self, _msg: Inc) {
            self.n += 1;
        }
        async fn get(&mut self, _msg: Get) -> u64 {
            self.n
        }
    }

    /// Many-core workload: tells `n` messages to its receiver, then asks
    /// for the count.
    #[derive(Message)]
    #[message(reply = u64)]
    struct Flood(u64);

    /// Many-core workload: asks the ponger `n` times in turn.
    #[derive(Message)]
    #[message(reply = ())]
    struct PingN(u64);

    struct Sender {
        to: ActorRef<Counter>,
    }
    impl Actor for Sender {}

    #[handlers]
    impl Sender {
        async fn flood(&mut self, msg: Flood) -> u64 {
            for i in 1..=msg.0 {
                self.to.tell(Inc).unwrap();
                if i % MANY_YIELD_EVERY == 0 {
                    rt::yield_now().await;
                }
            }
            self.to
                .ask_timeout(Get, Duration::from_secs(60))
                .await
                .unwrap()
        }
    }

    struct Pinger {
        to: ActorRef<Counter>,
    }
    impl Actor for Pinger {}

    #[handlers]
    impl Pinger {
        async fn ping_n(&mut self, msg: PingN) {
            for _ in 0..msg.0 {
                self.to.ask(Get).await.unwrap();
            }
        }
    }

    async fn many(system: &ActorSystem, pairs: u64) -> Figures {
        let senders: Vec<_> = (0..pairs)
            .map(|_| {
                let to = system.spawn(Counter::default());
                system.spawn(Sender { to })
            })
            .collect();
        let pingers: Vec<_> = (0..pairs)
            .map(|_| {
                let to = system.spawn(Counter::default());
                system.spawn(Pinger { to })
            })
            .collect();
        // Each pair is driven from a task of its own, as the peers' are.
        let t0 = Instant::now();
        let tasks: Vec<_> = senders
            .iter()
            .map(|s| {
                let s = s.clone();
                rt::spawn(async move {
                    s.ask_timeout(Flood(MANY_TELLS), Duration::from_secs(60))
                        .await
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), MANY_TELLS);
        }
        let tells = t0.elapsed();
        let t0 = Instant::now();
        let tasks: Vec<_> = pingers
            .iter()
            .map(|p| {
                let p = p.clone();
                rt::spawn(async move {
                    p.ask_timeout(PingN(MANY_ASKS), Duration::from_secs(60))
                        .await
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        many_figures(pairs, tells, t0.elapsed())
    }

    pub fn run(workload: &str) -> Figures {
        let workload = workload.to_string();
        // The driver runs on the executor, as the peers' drivers do.
        rt::block_on(rt::spawn(async move {
            let system = ActorSystem::new("bench").unwrap();
            let warm = system.spawn(Counter::default());
            warm.ask(Get).await.unwrap();
            if let Some(pairs) = many_pairs(&workload) {
                let figures = many(&system, pairs).await;
                system.shutdown().await;
                return figures;
            }
            let figures = match workload.as_str() {
                "spawn" => {
                    let before = rss_bytes();
                    let t0 = Instant::now();
                    let refs: Vec<_> = (0..SPAWN_N)
                        .map(|_| system.spawn(Counter::default()))
                        .collect();
                    let spawned = t0.elapsed();
                    for r in &refs {
                        r.ask(Get).await.unwrap();
                    }
                    let total = t0.elapsed();
                    let after = rss_bytes();
                    drop(refs);
                    spawn_figures(spawned, total, before, after)
                }
                "tell" => {
                    let t0 = Instant::now();
                    for _ in 0..TELL_N {
                        warm.tell(Inc).unwrap();
                    }
                    assert_eq!(
                        warm.ask_timeout(Get, Duration::from_secs(60))
                            .await
                            .unwrap(),
                        TELL_N
                    );
                    tell_figures(t0.elapsed())
                }
                "ask" => {
                    let t0 = Instant::now();
                    for _ in 0..ASK_N {
                        warm.ask(Get).await.unwrap();
                    }
                    ask_figures(t0.elapsed())
                }
                other => panic!("unknown workload {other}"),
            };
            system.shutdown().await;
            figures
        }))
    }
}

mod actix_bench {
    use super::*;
    use actix::prelude::*;

    #[derive(Default)]
    struct Counter {
        n: u64,
    }
    impl Actor for Counter {
        type Context = Context<Self>;
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Inc;

    #[derive(Message)]
    #[rtype(result = "u64")]
    struct Get;

    impl Handler<Inc> for Counter {
        type Result = ();
        fn handle(&mut self, _msg: Inc, _ctx: &mut Context<Self>) {
            self.n += 1;
        }
    }
    impl Handler<Get> for Counter {
        type Result = u64;
        fn handle(&mut self, _msg: Get, _ctx: &mut Context<Self>) -> u64 {
            self.n
        }
    }

    #[derive(Message)]
    #[rtype(result = "u64")]
    struct Flood(u64);

    #[derive(Message)]
    #[rtype(result = "()")]
    struct PingN(u64);

    struct Sender {
        to: Addr<Counter>,
    }
    impl Actor for Sender {
        type Context = Context<Self>;
    }
    impl Handler<Flood> for Sender {
        type Result = ResponseFuture<u64>;
        fn handle(&mut self, msg: Flood, _ctx: &mut Context<Self>) -> Self::Result {
            let to = self.to.clone();
            Box::pin(async move {
                for i in 1..=msg.0 {
                    to.do_send(Inc);
                    // Without this the sender holds its arbiter's thread
                    // for the whole flood.
                    if i % MANY_YIELD_EVERY == 0 {
                        tokio::task::yield_now().await;
                    }
                }
                to.send(Get).await.unwrap()
            })
        }
    }

    struct Pinger {
        to: Addr<Counter>,
    }
    impl Actor for Pinger {
        type Context = Context<Self>;
    }
    impl Handler<PingN> for Pinger {
        type Result = ResponseFuture<()>;
        fn handle(&mut self, msg: PingN, _ctx: &mut Context<Self>) -> Self::Result {
            let to = self.to.clone();
            Box::pin(async move {
                for _ in 0..msg.0 {
                    to.send(Get).await.unwrap();
                }
            })
        }
    }

    /// actix runs each arbiter on one thread: one arbiter per core, and the
    /// two actors of a pair on different arbiters.
    fn many(pairs: u64, threads: usize) -> Figures {
        let system = System::new();
        system.block_on(async move {
            let arbiters: Vec<Arbiter> = (0..threads).map(|_| Arbiter::new()).collect();
            let on = |i: usize| arbiters[i % threads].handle();
            let senders: Vec<_> = (0..pairs as usize)
                .map(|i| {
                    let to = Counter::start_in_arbiter(&on(2 * i + 1), |_| Counter::default());
                    Sender::start_in_arbiter(&on(2 * i), move |_| Sender { to })
                })
                .collect();
            let pingers: Vec<_> = (0..pairs as usize)
                .map(|i| {
                    let to = Counter::start_in_arbiter(&on(2 * i + 1), |_| Counter::default());
                    Pinger::start_in_arbiter(&on(2 * i), move |_| Pinger { to })
                })
                .collect();
            // `send` queues the message at once; the replies are awaited after.
            let t0 = Instant::now();
            let replies: Vec<_> = senders.iter().map(|s| s.send(Flood(MANY_TELLS))).collect();
            for r in replies {
                assert_eq!(r.await.unwrap(), MANY_TELLS);
            }
            let tells = t0.elapsed();
            let t0 = Instant::now();
            let replies: Vec<_> = pingers.iter().map(|p| p.send(PingN(MANY_ASKS))).collect();
            for r in replies {
                r.await.unwrap();
            }
            let asks = t0.elapsed();
            for a in &arbiters {
                a.stop();
            }
            many_figures(pairs, tells, asks)
        })
    }

    pub fn run(workload: &str, threads: usize) -> Figures {
        if let Some(pairs) = many_pairs(workload) {
            return many(pairs, threads);
        }
        let workload = workload.to_string();
        let system = System::new();
        system.block_on(async move {
            // actix runs each arbiter on one thread; "two threads" puts the
            // actor on a second arbiter.
            let other = (threads > 1).then(Arbiter::new);
            let start = |other: &Option<Arbiter>| match other {
                Some(a) => Counter::start_in_arbiter(&a.handle(), |_| Counter::default()),
                None => Counter::default().start(),
            };
            let warm = start(&other);
            warm.send(Get).await.unwrap();
            match workload.as_str() {
                "spawn" => {
                    let before = rss_bytes();
                    let t0 = Instant::now();
                    let refs: Vec<_> = (0..SPAWN_N).map(|_| start(&other)).collect();
                    let spawned = t0.elapsed();
                    for r in &refs {
                        r.send(Get).await.unwrap();
                    }
                    let total = t0.elapsed();
                    let after = rss_bytes();
                    spawn_figures(spawned, total, before, after)
                }
                "tell" => {
                    let t0 = Instant::now();
                    for _ in 0..TELL_N {
                        warm.do_send(Inc);
                    }
                    assert_eq!(warm.send(Get).await.unwrap(), TELL_N);
                    tell_figures(t0.elapsed())
                }
                "ask" => {
                    let t0 = Instant::now();
                    for _ in 0..ASK_N {
                        warm.send(Get).await.unwrap();
                    }
                    ask_figures(t0.elapsed())
                }
                other => panic!("unknown workload {other}"),
            }
        })
    }
}

fn tokio_runtime(threads: usize) -> tokio::runtime::Runtime {
    if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()
            .unwrap()
    }
}

mod kameo_bench {
    use super::*;
    use kameo::actor::Spawn;
    use kameo::mailbox;
    use kameo::message::{Context, Message};
    use kameo::Actor;

    #[derive(Actor, Default)]
    struct Counter {
        n: u64,
    }

    struct Inc;
    struct Get;

    impl Message<Inc> for Counter {
        type Reply = ();
        async fn handle(&mut self, _msg: Inc, _ctx: &mut Context<Self, Self::Reply>) {
            self.n += 1;
        }
    }
    impl Message<Get> for Counter {
        type Reply = u64;
        async fn handle(&mut self, _msg: Get, _ctx: &mut Context<Self, Self::Reply>) -> u64 {
            self.n
        }
    }

    struct Flood(u64);
    struct PingN(u64);

    #[derive(Actor)]
    struct Sender {
        to: kameo::actor::ActorRef<Counter>,
    }
    impl Message<Flood> for Sender {
        type Reply = u64;
        async fn handle(&mut self, msg: Flood, _ctx: &mut Context<Self, Self::Reply>) -> u64 {
            for i in 1..=msg.0 {
                self.to.tell(Inc).try_send().unwrap();
                if i % MANY_YIELD_EVERY == 0 {
                    tokio::task::yield_now().await;
                }
            }
            self.to.ask(Get).await.unwrap()
        }
    }

    #[derive(Actor)]
    struct Pinger {
        to: kameo::actor::ActorRef<Counter>,
    }
    impl Message<PingN> for Pinger {
        type Reply = ();
        async fn handle(&mut self, msg: PingN, _ctx: &mut Context<Self, Self::Reply>) {
            for _ in 0..msg.0 {
                self.to.ask(Get).await.unwrap();
            }
        }
    }

    async fn many(pairs: u64) -> Figures {
        let counter = || Counter::spawn_with_mailbox(Counter::default(), mailbox::unbounded());
        let senders: Vec<_> = (0..pairs)
            .map(|_| Sender::spawn_with_mailbox(Sender { to: counter() }, mailbox::unbounded()))
            .collect();
        let pingers: Vec<_> = (0..pairs)
            .map(|_| Pinger::spawn_with_mailbox(Pinger { to: counter() }, mailbox::unbounded()))
            .collect();
        let t0 = Instant::now();
        let tasks: Vec<_> = senders
            .iter()
            .map(|s| {
                let s = s.clone();
                tokio::spawn(async move { s.ask(Flood(MANY_TELLS)).await.unwrap() })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), MANY_TELLS);
        }
        let tells = t0.elapsed();
        let t0 = Instant::now();
        let tasks: Vec<_> = pingers
            .iter()
            .map(|p| {
                let p = p.clone();
                tokio::spawn(async move { p.ask(PingN(MANY_ASKS)).await.unwrap() })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        many_figures(pairs, tells, t0.elapsed())
    }

    pub fn run(workload: &str, threads: usize) -> Figures {
        if let Some(pairs) = many_pairs(workload) {
            let rt = tokio_runtime(threads);
            return rt.block_on(rt.spawn(many(pairs))).unwrap();
        }
        let workload = workload.to_string();
        let rt = tokio_runtime(threads);
        let handle = rt.spawn(async move {
            // Unbounded, like Troupe's default mailbox.
            let start = || Counter::spawn_with_mailbox(Counter::default(), mailbox::unbounded());
            let warm = start();
            warm.ask(Get).await.unwrap();
            match workload.as_str() {
                "spawn" => {
                    let before = rss_bytes();
                    let t0 = Instant::now();
                    let refs: Vec<_> = (0..SPAWN_N).map(|_| start()).collect();
                    let spawned = t0.elapsed();
                    for r in &refs {
                        r.ask(Get).await.unwrap();
                    }
                    let total = t0.elapsed();
                    let after = rss_bytes();
                    spawn_figures(spawned, total, before, after)
                }
                "tell" => {
                    let t0 = Instant::now();
                    for _ in 0..TELL_N {
                        warm.tell(Inc).try_send().unwrap();
                    }
                    assert_eq!(warm.ask(Get).await.unwrap(), TELL_N);
                    tell_figures(t0.elapsed())
                }
                "ask" => {
                    let t0 = Instant::now();
                    for _ in 0..ASK_N {
                        warm.ask(Get).await.unwrap();
                    }
                    ask_figures(t0.elapsed())
                }
                other => panic!("unknown workload {other}"),
            }
        });
        rt.block_on(handle).unwrap()
    }
}

mod ractor_bench {
    use super::*;
    use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};

    struct Counter;

    enum Msg {
        Inc,
        Get(RpcReplyPort<u64>),
    }

    impl Actor for Counter {
        type Msg = Msg;
        type State = u64;
        type Arguments = ();

        async fn pre_start(
            &self,
            _myself: ActorRef<Msg>,
            _args: (),
        ) -> Result<u64, ActorProcessingErr> {
            Ok(0)
        }

        async fn handle(
            &self,
            _myself: ActorRef<Msg>,
            msg: Msg,
            state: &mut u64,
        ) -> Result<(), ActorProcessingErr> {
            match msg {
                Msg::Inc => *state += 1,
                Msg::Get(reply) => {
                    let _ = reply.send(*state);
                }
            }
            Ok(())
        }
    }

    /// One actor type drives both halves of the many-core workload: a
    /// `Flood` sender or a `PingN` pinger, to the counter it was given.
    struct Driver;

    /// Many-core workload messages: the argument and the reply port.
    enum Drive {
        Flood(u64, RpcReplyPort<u64>),
        PingN(u64, RpcReplyPort<()>),
    }

    impl Actor for Driver {
        type Msg = Drive;
        type State = ActorRef<Msg>;
        type Arguments = ActorRef<Msg>;

        async fn pre_start(
            &self,
            _myself: ActorRef<Drive>,
            to: ActorRef<Msg>,
        ) -> Result<ActorRef<Msg>, ActorProcessingErr> {
            Ok(to)
        }

        async fn handle(
            &self,
            _myself: ActorRef<Drive>,
            msg: Drive,
            to: &mut ActorRef<Msg>,
        ) -> Result<(), ActorProcessingErr> {
            match msg {
                Drive::Flood(n, reply) => {
                    for i in 1..=n {
                        to.cast(Msg::Inc).unwrap();
                        if i % MANY_YIELD_EVERY == 0 {
                            tokio::task::yield_now().await;
                        }
                    }
                    let _ = reply.send(get(to).await);
                }
                Drive::PingN(n, reply) => {
                    for _ in 0..n {
                        get(to).await;
                    }
                    let _ = reply.send(());
                }
            }
            Ok(())
        }
    }

    async fn many(pairs: u64) -> Figures {
        let mut senders = Vec::new();
        let mut pingers = Vec::new();
        for _ in 0..pairs {
            let (to, _) = Actor::spawn(None, Counter, ()).await.unwrap();
            senders.push(Actor::spawn(None, Driver, to).await.unwrap().0);
            let (to, _) = Actor::spawn(None, Counter, ()).await.unwrap();
            pingers.push(Actor::spawn(None, Driver, to).await.unwrap().0);
        }
        let t0 = Instant::now();
        let tasks: Vec<_> = senders
            .iter()
            .map(|s| {
                let s = s.clone();
                tokio::spawn(async move { s.call(|r| Drive::Flood(MANY_TELLS, r), None).await })
            })
            .collect();
        for t in tasks {
            match t.await.unwrap().unwrap() {
                ractor::rpc::CallResult::Success(n) => assert_eq!(n, MANY_TELLS),
                _ => panic!("ractor call failed"),
            }
        }
        let tells = t0.elapsed();
        let t0 = Instant::now();
        let tasks: Vec<_> = pingers
            .iter()
            .map(|p| {
                let p = p.clone();
                tokio::spawn(async move { p.call(|r| Drive::PingN(MANY_ASKS, r), None).await })
            })
            .collect();
        for t in tasks {
            assert!(matches!(
                t.await.unwrap().unwrap(),
                ractor::rpc::CallResult::Success(())
            ));
        }
        many_figures(pairs, tells, t0.elapsed())
    }

    async fn get(r: &ActorRef<Msg>) -> u64 {
        match r.call(Msg::Get, None).await.unwrap() {
            ractor::rpc::CallResult::Success(v) => v,
            _ => panic!("ractor call failed"),
        }
    }

    pub fn run(workload: &str, threads: usize) -> Figures {
        if let Some(pairs) = many_pairs(workload) {
            let rt = tokio_runtime(threads);
            return rt.block_on(rt.spawn(many(pairs))).unwrap();
        }
        let workload = workload.to_string();
        let rt = tokio_runtime(threads);
        let handle = rt.spawn(async move {
            let (warm, _) = Actor::spawn(None, Counter, ()).await.unwrap();
            get(&warm).await;
            match workload.as_str() {
                "spawn" => {
                    let before = rss_bytes();
                    let t0 = Instant::now();
                    let mut refs = Vec::with_capacity(SPAWN_N as usize);
                    for _ in 0..SPAWN_N {
                        refs.push(Actor::spawn(None, Counter, ()).await.unwrap());
                    }
                    let spawned = t0.elapsed();
                    for (r, _) in &refs {
                        get(r).await;
                    }
                    let total = t0.elapsed();
                    let after = rss_bytes();
                    spawn_figures(spawned, total, before, after)
                }
                "tell" => {
                    let t0 = Instant::now();
                    for _ in 0..TELL_N {
                        warm.cast(Msg::Inc).unwrap();
                    }
                    assert_eq!(get(&warm).await, TELL_N);
                    tell_figures(t0.elapsed())
                }
                "ask" => {
                    let t0 = Instant::now();
                    for _ in 0..ASK_N {
                        get(&warm).await;
                    }
                    ask_figures(t0.elapsed())
                }
                other => panic!("unknown workload {other}"),
            }
        });
        rt.block_on(handle).unwrap()
    }
}

fn child(framework: &str, workload: &str, threads: usize) {
    let figures = match framework {
        "troupe" => troupe::run(workload),
        "actix" => actix_bench::run(workload, threads),
        "kameo" => kameo_bench::run(workload, threads),
        "ractor" => ractor_bench::run(workload, threads),
        other => panic!("unknown framework {other}"),
    };
    for (k, v) in figures {
        println!("FIGURE {k} {v}");
    }
}

/// Runs one measurement in a fresh process and returns its figures.
fn measure(framework: &str, workload: &str, threads: usize) -> Result<Figures, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["child", framework, workload, &threads.to_string()])
        // Troupe's dispatcher reads this one.
        .env("ASYNC_STD_THREAD_COUNT", threads.to_string())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{framework} {workload} failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut figures = Figures::new();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        if parts.next() == Some("FIGURE") {
            let (Some(k), Some(v)) = (parts.next(), parts.next()) else {
                continue;
            };
            let key: &'static str = Box::leak(k.to_string().into_boxed_str());
            figures.push((key, v.parse().map_err(|_| format!("bad figure {line}"))?));
        }
    }
    Ok(figures)
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("child") {
        let threads = args.get(3).and_then(|t| t.parse().ok()).unwrap_or(2);
        child(&args[1], &args[2], threads);
        return;
    }
    let frameworks = ["troupe", "actix", "kameo", "ractor"];
    if args.first().map(String::as_str) == Some("many") {
        let only: Vec<&str> = args[1..].iter().map(String::as_str).collect();
        many_main(&frameworks, &only);
        return;
    }
    let only: Vec<&str> = args.iter().map(String::as_str).collect();
    // (column, workload, threads, figure)
    let columns = [
        ("spawn µs/actor", "spawn", 2, "spawn_and_ask_us_per_actor"),
        (
            "spawn µs (1 thread)",
            "spawn",
            1,
            "spawn_and_ask_us_per_actor",
        ),
        ("bytes/idle actor", "spawn", 2, "bytes_per_idle_actor"),
        ("tell msg/s", "tell", 2, "tell_msgs_per_sec"),
        ("ask µs (1 thread)", "ask", 1, "ask_us"),
        ("ask µs (2 threads)", "ask", 2, "ask_us"),
    ];
    let mut results: BTreeMap<&str, Vec<(String, f64)>> = BTreeMap::new();
    for fw in frameworks {
        if !only.is_empty() && !only.contains(&fw) {
            continue;
        }
        let mut row = Vec::new();
        let mut cache: BTreeMap<(&str, usize), Result<Figures, String>> = BTreeMap::new();
        for (label, workload, threads, figure) in columns {
            let r = cache
                .entry((workload, threads))
                .or_insert_with(|| measure(fw, workload, threads));
            match r {
                Ok(figs) => {
                    if let Some((_, v)) = figs.iter().find(|(k, _)| *k == figure) {
                        row.push((label.to_string(), *v));
                    }
                }
                Err(e) => eprintln!("{e}"),
            }
        }
        results.insert(fw, row);
    }
    println!();
    print!("{:<8}", "");
    for (label, ..) in columns {
        print!(" | {label:>18}");
    }
    println!();
    for (fw, row) in &results {
        print!("{fw:<8}");
        for (label, ..) in columns {
            match row.iter().find(|(l, _)| l == label) {
                Some((_, v)) if *v >= 1000.0 => print!(" | {:>18.0}", v),
                Some((_, v)) => print!(" | {:>18.2}", v),
                None => print!(" | {:>18}", "failed"),
            }
        }
        println!();
    }
    println!();
    for (fw, row) in &results {
        let fields: Vec<String> = [
            ("spawn_us_per_actor", 0),
            ("spawn_us_per_actor_1_thread", 1),
            ("bytes_per_idle_actor", 2),
            ("tell_msgs_per_sec", 3),
            ("ask_us_1_thread", 4),
            ("ask_us_2_threads", 5),
        ]
        .iter()
        .filter_map(|(key, i)| {
            let label = columns[*i].0;
            row.iter()
                .find(|(l, _)| l == label)
                .map(|(_, v)| format!("\"{key}\":{v:.3}"))
        })
        .collect();
        println!("{{\"framework\":\"{fw}\",{}}}", fields.join(","));
    }
}

/// The many-core workload: every framework with its executor on every
/// core, for 1 to that many pairs; one table, one JSON line per
/// framework and N.
fn many_main(frameworks: &[&'static str], only: &[&str]) {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!("many-core workload, executor on {cores} threads");
    let mut rows: Vec<(&str, u64, Figures)> = Vec::new();
    for n in 1..=cores as u64 {
        for &fw in frameworks {
            if !only.is_empty() && !only.contains(&fw) {
                continue;
            }
            match measure(fw, &format!("many{n}"), cores) {
                Ok(figs) => rows.push((fw, n, figs)),
                Err(e) => eprintln!("{e}"),
            }
        }
    }
    let get =
        |figs: &Figures, k: &str| figs.iter().find(|(f, _)| *f == k).map_or(f64::NAN, |f| f.1);
    println!();
    println!(
        "{:<8} | {:>5} | {:>14} | {:>11} | {:>12}",
        "", "pairs", "tell msg/s", "ask µs", "asks/s"
    );
    for (fw, n, figs) in &rows {
        println!(
            "{fw:<8} | {n:>5} | {:>14.0} | {:>11.2} | {:>12.0}",
            get(figs, "many_tell_msgs_per_sec"),
            get(figs, "many_ask_us"),
            get(figs, "many_asks_per_sec"),
        );
    }
    println!();
    for (fw, n, figs) in &rows {
        println!(
            "{{\"framework\":\"{fw}\",\"threads\":{cores},\"pairs\":{n},\"many_tell_msgs_per_sec\":{:.0},\"many_ask_us\":{:.3},\"many_asks_per_sec\":{:.0}}}",
            get(figs, "many_tell_msgs_per_sec"),
            get(figs, "many_ask_us"),
            get(figs, "many_asks_per_sec"),
        );
    }
}
