//! Cluster sharding: a fourth node joins a loaded three-node cluster.
//!
//! ```sh
//! cargo bench --manifest-path benches/Cargo.toml --bench sharding_rebalance
//! ```
//!
//! Three nodes in one process (loopback TCP, default sharding settings:
//! 1,000 shards, rebalance every 10 s, at most 20 shards a round), 100,000
//! entities started, then a steady load of numbered asks (20,000 a second,
//! spread over the entities, from all three nodes) while a fourth node
//! joins. Prints how long until the new node holds at least 240 shards,
//! the messages lost (asks that failed or were never answered), and the
//! p50 / p99 / max latency of the asks sent during the rebalance.

#![allow(clippy::print_stdout)]

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;
use troupe_sharding::{ClusterSharding, EntityId, EntityRef, ShardingSettings};

#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64, name = "bench.Ping")]
struct Ping(u64);

struct Item {
    seen: u64,
}
impl Actor for Item {}

#[troupe_sharding::entity(name = "bench-item")]
impl Item {
    async fn ping(&mut self, m: Ping) -> u64 {
        self.seen += 1;
        m.0
    }
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    sharding: ClusterSharding,
}

fn start(seed: Option<&Address>) -> Node {
    let system = ActorSystem::builder("rebalance")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bench"))
        .build()
        .expect("system");
    let me = system.remoting().unwrap().address().clone();
    let cluster = Cluster::start(
        &system,
        ClusterSettings {
            seed_nodes: vec![seed.unwrap_or(&me).clone()],
            ..ClusterSettings::default()
        },
    )
    .expect("cluster");
    let sharding = ClusterSharding::new(&system, &cluster).expect("sharding");
    sharding
        .start::<Item>(
            |_id: EntityId| Item { seen: 0 },
            ShardingSettings::default(),
        )
        .expect("start");
    Node {
        system,
        cluster,
        sharding,
    }
}

async fn up(node: &Node, n: usize) {
    loop {
        if let Ok(s) = node.cluster.state().await {
            if s.members
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count()
                == n
            {
                return;
            }
        }
        rt::sleep(Duration::from_millis(50)).await;
    }
}

fn main() {
    // `RUST_LOG=troupe_sharding=debug` shows each hand-off.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .try_init();
    rt::block_on(async {
        const ENTITIES: usize = 100_000;
        const RATE: u64 = 20_000;
        let first = start(None);
        let seed = first.cluster.self_address().clone();
        let others = [start(Some(&seed)), start(Some(&seed))];
        up(&first, 3).await;
        let nodes = [&first, &others[0], &others[1]];
        // Every region registered with the coordinator before the first
        // shard is allocated, so that the shards spread over the three.
        for n in nodes {
            while !n.sharding.is_registered::<Item>().await.unwrap_or(false) {
                rt::sleep(Duration::from_millis(20)).await;
            }
        }
        println!("sharding rebalance bench: starting {ENTITIES} entities on 3 nodes");
        let t0 = Instant::now();
        let refs: Vec<Vec<EntityRef<Item>>> = nodes
            .iter()
            .map(|n| {
                (0..ENTITIES)
                    .map(|i| n.sharding.entity_ref(format!("item-{i}")).unwrap())
                    .collect()
            })
            .collect();
        let mut pending = Vec::new();
        for (i, r) in refs[0].iter().enumerate() {
            pending.push(r.ask_timeout(Ping(i as u64), Duration::from_secs(60)));
            if pending.len() == 2_000 {
                for p in pending.drain(..) {
                    p.await.expect("start");
                }
            }
        }
        for p in pending.drain(..) {
            p.await.expect("start");
        }
        println!("  started in {:.1} s", t0.elapsed().as_secs_f64());

        // The load: RATE asks a second, round robin over entities and nodes.
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let answered = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let latencies = Arc::new(Mutex::new(Vec::<Duration>::new()));
        let load = {
            let (stop, sent, answered, failed, latencies) = (
                stop.clone(),
                sent.clone(),
                answered.clone(),
                failed.clone(),
                latencies.clone(),
            );
            let refs = refs.clone();
            rt::spawn(async move {
                let start = Instant::now();
                let mut n: u64 = 0;
                while !stop.load(Ordering::Relaxed) {
                    // Pace: n messages by now.
                    let due = (start.elapsed().as_secs_f64() * RATE as f64) as u64;
                    while n < due {
                        let node = (n % 3) as usize;
                        let r = &refs[node][(n as usize * 7919) % ENTITIES];
                        let ask = r.ask_timeout(Ping(n), Duration::from_secs(30));
                        let at = Instant::now();
                        sent.fetch_add(1, Ordering::Relaxed);
                        let (answered, failed, latencies) =
                            (answered.clone(), failed.clone(), latencies.clone());
                        rt::spawn(async move {
                            match ask.await {
                                Ok(_) => {
                                    answered.fetch_add(1, Ordering::Relaxed);
                                    latencies.lock().unwrap().push(at.elapsed());
                                }
                                Err(_) => {
                                    failed.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        });
                        n += 1;
                    }
                    rt::sleep(Duration::from_millis(2)).await;
                }
            })
        };

        rt::sleep(Duration::from_secs(2)).await;
        println!("  load running; a fourth node joins");
        let joined_at = Instant::now();
        let fourth = start(Some(&seed));
        let mut reached = None;
        while joined_at.elapsed() < Duration::from_secs(120) {
            let shards = fourth
                .sharding
                .region_state::<Item>()
                .await
                .map(|s| s.shards.len())
                .unwrap_or(0);
            if shards >= 240 && reached.is_none() {
                reached = Some(joined_at.elapsed());
                break;
            }
            rt::sleep(Duration::from_millis(100)).await;
        }
        rt::sleep(Duration::from_secs(2)).await;
        stop.store(true, Ordering::Relaxed);
        load.await;
        // Let the last answers arrive.
        let deadline = Instant::now() + Duration::from_secs(35);
        while answered.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed)
            < sent.load(Ordering::Relaxed)
            && Instant::now() < deadline
        {
            rt::sleep(Duration::from_millis(50)).await;
        }
        let (sent, answered, failed) = (
            sent.load(Ordering::Relaxed),
            answered.load(Ordering::Relaxed),
            failed.load(Ordering::Relaxed),
        );
        let mut l = latencies.lock().unwrap().clone();
        l.sort();
        let pct = |p: f64| l[((l.len() as f64 * p) as usize).min(l.len() - 1)].as_secs_f64() * 1e3;
        match reached {
            Some(t) => println!(
                "  the new node holds >= 240 shards after {:.1} s",
                t.as_secs_f64()
            ),
            None => println!("  the new node did NOT reach 240 shards within 120 s"),
        }
        println!(
            "  asks: {sent} sent, {answered} answered, {failed} failed, {} unanswered (lost: {})",
            sent - answered - failed,
            sent - answered
        );
        println!(
            "  latency during the rebalance: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            pct(0.5),
            pct(0.99),
            pct(1.0)
        );
        for n in [&fourth, &others[1], &others[0], &first] {
            n.system.terminate().await;
        }
    });
}
