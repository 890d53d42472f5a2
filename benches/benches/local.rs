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
//!   (spawn + first ask) and RSS growth per idle actor;
//! - `tell`: 2,000,000 tells to one counting actor, then one ask that
//!   confirms the count; messages per second;
//! - `ask`: 200,000 sequential asks; µs per round trip, with the executor
//!   on one thread and on two.
//!
//! The parent prints a table and one JSON line per framework.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

const SPAWN_N: u64 = 100_000;
const TELL_N: u64 = 2_000_000;
const ASK_N: u64 = 200_000;

/// One measurement: named figures.
type Figures = Vec<(&'static str, f64)>;

fn rss_bytes() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0.0);
    pages * 4096.0
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

    pub fn run(workload: &str) -> Figures {
        let workload = workload.to_string();
        // The driver runs on the executor, as the peers' drivers do.
        rt::block_on(rt::spawn(async move {
            let system = ActorSystem::new("bench").unwrap();
            let warm = system.spawn(Counter::default());
            warm.ask(Get).await.unwrap();
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

    pub fn run(workload: &str, threads: usize) -> Figures {
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

    pub fn run(workload: &str, threads: usize) -> Figures {
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

    async fn get(r: &ActorRef<Msg>) -> u64 {
        match r.call(Msg::Get, None).await.unwrap() {
            ractor::rpc::CallResult::Success(v) => v,
            _ => panic!("ractor call failed"),
        }
    }

    pub fn run(workload: &str, threads: usize) -> Figures {
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
        .env("ASYNC_GLOBAL_EXECUTOR_THREADS", threads.to_string())
        // async-std 1.13 reads this one.
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
    let only: Vec<&str> = args.iter().map(String::as_str).collect();
    let frameworks = ["troupe", "actix", "kameo", "ractor"];
    // (column, workload, threads, figure)
    let columns = [
        ("spawn µs/actor", "spawn", 2, "spawn_and_ask_us_per_actor"),
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
            ("bytes_per_idle_actor", 1),
            ("tell_msgs_per_sec", 2),
            ("ask_us_1_thread", 3),
            ("ask_us_2_threads", 4),
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
