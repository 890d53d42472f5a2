//! Cluster sharding across three processes on loopback, side by side with
//! plain remote messages between the same processes, in one run.
//!
//! ```sh
//! cargo bench --manifest-path benches/Cargo.toml --bench sharding_remote
//! ```
//!
//! This process is the first node (the seed, and so the coordinator's
//! host); it starts two more nodes as child processes (this program re-run
//! as `node SEED`). Each node hosts the `sink` entity type and a plain
//! actor of the same type named `plain`. Then, from the first node:
//! - tell: 2,000,000 messages with a 100-byte body to one entity that
//!   lives on another node, and the same to that node's `plain` actor;
//!   messages per second (each chunk of a run ends with an ask that
//!   confirms its count). Twice: with `send`, which waits for room while
//!   the queue to the node is full, and with `tell` retried at once after
//!   each refusal (the sender then spins on one of the cores the receiver
//!   needs). Five rounds (`TELL_ROUNDS`), each with a plain and a sharded
//!   run of both; a run goes in chunks of 500,000 messages (`TELL_CHUNK`)
//!   and the two sides' chunks alternate, the side that goes first
//!   alternating too, so that both sides meet the same drift of the host
//!   (`support/side_by_side.rs`). It prints each side's median rate and the median of the rounds'
//!   ratios;
//! - ask: 20,000 sequential asks (after 1,000 to warm up) to that entity
//!   and to `plain`; round-trip p50 and p99;
//! - allocation: the first message to 300 entities of shards that have no
//!   home yet (the region asks the coordinator, which allocates the shard,
//!   and the owning region starts it); p50 and p99.
//!
//! Sections can be chosen (`-- tell ask alloc`; all by default), and
//! `plain` or `sharded` limits tell and ask to one side (to profile one).
//! `TELL_N=4000000` in the environment sends that many messages in each
//! tell run instead of 2,000,000 (a longer run to profile), and
//! `TELL_WAYS=send` or `TELL_WAYS=tell` runs only one of the two ways.

#![allow(clippy::print_stdout)]

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;
use troupe_sharding::{ClusterSharding, EntityId, EntityRef, ShardingSettings};

#[path = "support/side_by_side.rs"]
mod side_by_side;
use side_by_side::{env_count, SideBySide, Tally};

const TELL_N: u64 = 2_000_000;

/// Messages per tell run: `TELL_N` from the environment, or `TELL_N`.
fn tell_n() -> u64 {
    env_count("TELL_N", TELL_N)
}
const ASK_N: usize = 20_000;
const WARMUP: usize = 1_000;
const NEW_SHARDS: usize = 300;

#[derive(Message, Serialize, Deserialize)]
#[message(name = "bench.Body")]
struct Body(#[serde(with = "serde_bytes")] Vec<u8>);

#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64, name = "bench.Echo")]
struct Echo(#[serde(with = "serde_bytes")] Vec<u8>);

#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64, name = "bench.Received")]
struct Received;

#[derive(Message, Serialize, Deserialize)]
#[message(reply = String, name = "bench.Where")]
struct Where;

struct Sink {
    received: u64,
    node: String,
}
impl Actor for Sink {}

#[troupe_sharding::entity(name = "sink")]
impl Sink {
    async fn body(&mut self, _m: Body) {
        self.received += 1;
    }
    async fn echo(&mut self, m: Echo) -> u64 {
        m.0.len() as u64
    }
    /// The count since the last `Received` (each run counts its own).
    async fn received(&mut self, _m: Received) -> u64 {
        std::mem::take(&mut self.received)
    }
    async fn where_(&mut self, _m: Where) -> String {
        self.node.clone()
    }
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    sharding: ClusterSharding,
}

fn start_node(seed: Option<&str>) -> Node {
    let system = ActorSystem::builder("shardbench")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bench"))
        .build()
        .expect("system");
    let me = system.remoting().unwrap().address().clone();
    let seed: Address = match seed {
        Some(s) => s.parse().expect("seed address"),
        None => me.clone(),
    };
    let cluster = Cluster::start(
        &system,
        ClusterSettings {
            seed_nodes: vec![seed],
            ..ClusterSettings::default()
        },
    )
    .expect("cluster");
    let sharding = ClusterSharding::new(&system, &cluster).expect("sharding");
    let name = me.to_string();
    sharding
        .start::<Sink>(
            move |_id: EntityId| Sink {
                received: 0,
                node: name.clone(),
            },
            ShardingSettings::default(),
        )
        .expect("start");
    system
        .spawn_named(
            "plain",
            Sink {
                received: 0,
                node: me.to_string(),
            },
        )
        .expect("plain");
    Node {
        system,
        cluster,
        sharding,
    }
}

/// Waits until `node`'s region has registered with the coordinator: a
/// member is Up a moment before its region registers, and shards are
/// allocated only to registered regions.
async fn registered(node: &Node) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !node.sharding.is_registered::<Sink>().await.unwrap_or(false) {
        assert!(
            Instant::now() < deadline,
            "the region did not register with the coordinator within 60 s"
        );
        rt::sleep(Duration::from_millis(20)).await;
    }
}

/// A child node: runs until its standard input closes.
fn child(seed: &str) {
    let node = start_node(Some(seed));
    rt::block_on(registered(&node));
    println!("{}", node.cluster.self_address());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    rt::block_on(node.system.terminate());
}

fn p(sorted: &[Duration], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)].as_secs_f64() * 1e6
}

/// Sends `n` 100-byte bodies with `tell` (retrying at once while the queue
/// to the node is full); the messages counted by the ask that `received`
/// sends behind them go into `tally` with the time from the first send to
/// the count.
async fn tell_chunk<F>(
    n: u64,
    tell: impl Fn(Body) -> bool,
    received: impl FnOnce() -> F,
    tally: &mut Tally,
) where
    F: std::future::Future<Output = Result<u64, troupe_core::AskError>>,
{
    let body = vec![7u8; 100];
    let t0 = Instant::now();
    for _ in 0..n {
        while !tell(Body(body.clone())) {
            rt::yield_now().await;
        }
    }
    tally.add(received().await.unwrap(), t0.elapsed().as_secs_f64());
}

/// As `tell_chunk`, with `send`, which waits for room in the queue.
async fn send_chunk<F>(
    n: u64,
    send: impl AsyncFn(Body),
    received: impl FnOnce() -> F,
    tally: &mut Tally,
) where
    F: std::future::Future<Output = Result<u64, troupe_core::AskError>>,
{
    let body = vec![7u8; 100];
    let t0 = Instant::now();
    for _ in 0..n {
        send(Body(body.clone())).await;
    }
    tally.add(received().await.unwrap(), t0.elapsed().as_secs_f64());
}

/// Messages per chunk of a tell run: `TELL_CHUNK` from the environment, or
/// 500,000 (a fifth of a second at this host's rates: long enough that a
/// chunk's start and end, when the connection's queue fills and drains,
/// are a small part of it).
fn chunks() -> (u64, u64) {
    let size = env_count("TELL_CHUNK", 500_000).min(tell_n());
    (tell_n().div_ceil(size), size)
}

/// True if `section` was asked for on the command line, or none was.
fn wanted(args: &[String], section: &str) -> bool {
    let known = ["tell", "ask", "alloc"];
    let chosen: Vec<&String> = args
        .iter()
        .filter(|a| known.contains(&a.as_str()))
        .collect();
    chosen.is_empty() || chosen.iter().any(|a| *a == section)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() >= 3 && args[1] == "node" {
        return child(&args[2]);
    }
    let plain_side = !args.iter().any(|a| a == "sharded");
    let sharded_side = !args.iter().any(|a| a == "plain");
    rt::block_on(async {
        let first = start_node(None);
        let seed = first.cluster.self_address().to_string();
        let exe = std::env::current_exe().expect("own path");
        let mut children = Vec::new();
        let mut addresses = Vec::new();
        for _ in 0..2 {
            let mut c = Command::new(&exe)
                .args(["node", &seed])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("child node");
            let mut line = String::new();
            BufReader::new(c.stdout.take().unwrap())
                .read_line(&mut line)
                .expect("child address");
            addresses.push(line.trim().to_string());
            children.push(c);
        }
        loop {
            let s = first.cluster.state().await.expect("state");
            if s.members
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count()
                == 3
            {
                break;
            }
            rt::sleep(Duration::from_millis(50)).await;
        }
        registered(&first).await;
        // An entity on the second node.
        let target_node = &addresses[0];
        let mut remote_entity: Option<EntityRef<Sink>> = None;
        // Shards that have a home by now.
        let mut used = std::collections::BTreeSet::new();
        for i in 0..100 {
            let r: EntityRef<Sink> = first.sharding.entity_ref(format!("e{i}")).unwrap();
            used.insert(r.shard_id().to_string());
            let at = r
                .ask_timeout(Where, Duration::from_secs(30))
                .await
                .expect("where");
            if &at == target_node {
                remote_entity = Some(r);
                break;
            }
        }
        let entity = remote_entity.expect("an entity on the second node");
        let plain: ActorRef<Sink> = first
            .system
            .resolve(&format!("{target_node}/user/plain"))
            .expect("plain actor");
        println!("sharding remote bench: 3 processes; the target lives on {target_node}");

        // Tell: rounds of the four runs, plain and sharded side by side in
        // each, in chunks that alternate between the two sides (the host's
        // speed drifts between runs more than the two sides differ: runs
        // seconds apart gave ratios from 0.65 to 1.14 for one build;
        // chunks a fifth of a second apart meet the same host).
        let body = vec![7u8; 100];
        if wanted(&args, "tell") {
            let plain_received = || plain.ask_timeout(Received, Duration::from_secs(120));
            let sharded_received = || entity.ask_timeout(Received, Duration::from_secs(120));
            let mut send = SideBySide::default();
            let mut tell = SideBySide::default();
            let ways = std::env::var("TELL_WAYS").unwrap_or_default();
            let (with_send, with_tell) = (ways != "tell", ways != "send");
            let (n_chunks, chunk) = chunks();
            for round in 0..env_count("TELL_ROUNDS", 5) as usize {
                let (mut p, mut s) = (Tally::default(), Tally::default());
                for c in 0..n_chunks {
                    if !with_send {
                        break;
                    }
                    for plain_turn in side_by_side::order(round, c) {
                        if plain_turn && plain_side {
                            let send = async |b| plain.send(b).await.expect("send");
                            send_chunk(chunk, send, plain_received, &mut p).await;
                        } else if !plain_turn && sharded_side {
                            let send = async |b| entity.send(b).await.expect("send");
                            send_chunk(chunk, send, sharded_received, &mut s).await;
                        }
                    }
                }
                send.push(&p, &s);
                let (mut p, mut s) = (Tally::default(), Tally::default());
                for c in 0..n_chunks {
                    if !with_tell {
                        break;
                    }
                    for plain_turn in side_by_side::order(round, c) {
                        if plain_turn && plain_side {
                            let tell = |b| plain.tell(b).is_ok();
                            tell_chunk(chunk, tell, plain_received, &mut p).await;
                        } else if !plain_turn && sharded_side {
                            let tell = |b| entity.tell(b).is_ok();
                            tell_chunk(chunk, tell, sharded_received, &mut s).await;
                        }
                    }
                }
                tell.push(&p, &s);
            }
            send.print("send (100 B)", "plain remote", "sharded");
            tell.print("tell (100 B, retried at once)", "plain remote", "sharded");
        }

        // Ask.
        if wanted(&args, "ask") {
            let mut plain_rtt = Vec::with_capacity(ASK_N);
            let mut sharded_rtt = Vec::with_capacity(ASK_N);
            for i in 0..WARMUP + ASK_N {
                if !plain_side {
                    break;
                }
                let t = Instant::now();
                plain.ask(Echo(body.clone())).await.unwrap();
                if i >= WARMUP {
                    plain_rtt.push(t.elapsed());
                }
            }
            for i in 0..WARMUP + ASK_N {
                if !sharded_side {
                    break;
                }
                let t = Instant::now();
                entity.ask(Echo(body.clone())).await.unwrap();
                if i >= WARMUP {
                    sharded_rtt.push(t.elapsed());
                }
            }
            plain_rtt.sort();
            sharded_rtt.sort();
            println!(
                "  ask (100 B): plain remote p50 {:.1} us p99 {:.1} us; sharded p50 {:.1} us p99 {:.1} us (+{:.1} us p50)",
                p(&plain_rtt, 0.5),
                p(&plain_rtt, 0.99),
                p(&sharded_rtt, 0.5),
                p(&sharded_rtt, 0.99),
                p(&sharded_rtt, 0.5) - p(&plain_rtt, 0.5)
            );
        }

        // First message to entities of shards with no home yet.
        if wanted(&args, "alloc") {
            let mut alloc = Vec::with_capacity(NEW_SHARDS);
            let mut i = 0;
            while alloc.len() < NEW_SHARDS {
                let r: EntityRef<Sink> = first.sharding.entity_ref(format!("new{i}")).unwrap();
                i += 1;
                if !used.insert(r.shard_id().to_string()) {
                    continue;
                }
                let t = Instant::now();
                r.ask_timeout(Received, Duration::from_secs(30))
                    .await
                    .unwrap();
                alloc.push(t.elapsed());
            }
            alloc.sort();
            println!(
                "  first message to a new shard ({NEW_SHARDS} shards, allocation round trip): p50 {:.2} ms, p99 {:.2} ms",
                p(&alloc, 0.5) / 1e3,
                p(&alloc, 0.99) / 1e3
            );
        }
        for mut c in children {
            drop(c.stdin.take());
            let _ = c.wait();
        }
        first.system.terminate().await;
    });
}
