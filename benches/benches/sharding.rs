//! Cluster sharding: the cost of routing through sharding, side by side
//! with direct messages to the same actors in the same run.
//!
//! ```sh
//! cargo bench --manifest-path benches/Cargo.toml --bench sharding [-- one rr ask activation]
//! ```
//!
//! One node (a one-member cluster), every shard's home known and every
//! entity alive before timing:
//! - tell throughput: 2,000,000 messages to one entity through its
//!   `EntityRef`, and the same to the same actor through its `ActorRef`;
//!   then round robin over 10,000 entities, both ways. Five rounds
//!   (`SHARDING_ROUNDS`) of 2,000,000 messages a side, each in chunks of
//!   200,000 (`SHARDING_CHUNK`) that alternate between the two sides
//!   (`support/side_by_side.rs`); it prints each side's median rate and
//!   the median of the rounds' ratios;
//! - ask round trip: sequential asks through the `EntityRef` and through
//!   the `ActorRef`, p50 and mean;
//! - activation: the first message to 1,000,000 distinct entities over
//!   1,000 shards (time per entity), and the growth of resident memory per
//!   idle entity, all bookkeeping included.

#![allow(clippy::print_stdout)]

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::RemoteSettings;
use troupe_core::rt;
use troupe_sharding::{ClusterSharding, EntityId, EntityRef, ShardingSettings};

#[derive(Message, Serialize, Deserialize)]
#[message(name = "bench.Hit")]
struct Hit;

#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64, name = "bench.Count")]
struct Count;

/// The entity: counts hits into a shared counter (so that the bench can
/// tell when all were handled) and its own.
struct Target {
    hits: u64,
    total: Arc<AtomicU64>,
}

impl Actor for Target {}

#[troupe_sharding::entity(name = "bench-target")]
impl Target {
    async fn hit(&mut self, _m: Hit) {
        self.hits += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    async fn count(&mut self, _m: Count) -> u64 {
        self.hits
    }
}

async fn wait_total(total: &AtomicU64, want: u64) {
    while total.load(Ordering::Relaxed) < want {
        rt::yield_now().await;
    }
}

/// Whether a section was asked for on the command line (`-- rr ask`);
/// all run when none was.
fn wanted(section: &str) -> bool {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    args.is_empty() || args.iter().any(|a| a == section)
}

/// Messages a side in a round of the tell figures.
const N: u64 = 2_000_000;

#[path = "support/memory.rs"]
mod memory;
use memory::{heap_in_use_bytes, rss_bytes};
#[path = "support/side_by_side.rs"]
mod side_by_side;
use side_by_side::{env_count, SideBySide, Tally};

fn main() {
    rt::block_on(async {
        let system = ActorSystem::builder("bench")
            .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bench"))
            .build()
            .expect("system");
        let me = system.remoting().unwrap().address().clone();
        let cluster = Cluster::start(
            &system,
            ClusterSettings {
                seed_nodes: vec![me],
                ..ClusterSettings::default()
            },
        )
        .expect("cluster");
        loop {
            let s = cluster.state().await.expect("state");
            if s.members.iter().any(|m| m.status == MemberStatus::Up) {
                break;
            }
            rt::sleep(Duration::from_millis(20)).await;
        }
        let sharding = ClusterSharding::new(&system, &cluster).expect("sharding");
        let total = Arc::new(AtomicU64::new(0));
        let t = total.clone();
        sharding
            .start::<Target>(
                move |_id: EntityId| Target {
                    hits: 0,
                    total: t.clone(),
                },
                ShardingSettings {
                    number_of_shards: 1000,
                    ..ShardingSettings::default()
                },
            )
            .expect("start");

        // Warm up: every shard's home known (an entity of each asked),
        // and one entity alive.
        let mut homed = std::collections::HashSet::new();
        let mut i = 0;
        while homed.len() < 1000 {
            let r: EntityRef<Target> = sharding.entity_ref(format!("warm-{i}")).unwrap();
            i += 1;
            if homed.insert(r.shard_id().to_string()) {
                r.ask(Count).await.expect("warm-up ask");
            }
        }
        let one: EntityRef<Target> = sharding.entity_ref("one").unwrap();
        one.ask(Count).await.expect("first ask");
        // The same actor type outside sharding: what a direct tell costs.
        let direct = spawn_twin(&system, &total);
        direct.ask(Count).await.expect("first ask");

        // Tell, one entity and round robin: rounds of `N` messages a side,
        // in chunks that alternate between the direct and the sharded side
        // (`support/side_by_side.rs`).
        let rounds = env_count("SHARDING_ROUNDS", 5) as usize;
        let chunk = env_count("SHARDING_CHUNK", 200_000).min(N);
        if wanted("one") {
            println!("sharding bench: tell, {N} messages a round to one entity");
            let rates = tell_side_by_side(
                &total,
                rounds,
                chunk,
                || {
                    for _ in 0..chunk {
                        direct.tell(Hit).unwrap();
                    }
                },
                || {
                    for _ in 0..chunk {
                        one.tell(Hit).unwrap();
                    }
                },
            )
            .await;
            rates.print("tell", "direct ActorRef::tell", "sharded EntityRef::tell");
        }

        // Round robin over 10,000 entities.
        const E: usize = 10_000;
        if wanted("rr") {
            let refs: Vec<EntityRef<Target>> = (0..E)
                .map(|i| sharding.entity_ref(format!("rr-{i}")).unwrap())
                .collect();
            for r in &refs {
                r.ask(Count).await.unwrap();
            }
            let twins: Vec<ActorRef<Target>> =
                (0..E).map(|_| spawn_twin(&system, &total)).collect();
            // A chunk is whole passes over the entities.
            let passes = (chunk as usize).div_ceil(E).max(1);
            let per_chunk = (passes * E) as u64;
            println!("sharding bench: tell, round robin over {E} entities, {N} messages a round");
            let rates = tell_side_by_side(
                &total,
                rounds,
                per_chunk,
                || {
                    for _ in 0..passes {
                        for a in &twins {
                            a.tell(Hit).unwrap();
                        }
                    }
                },
                || {
                    for _ in 0..passes {
                        for r in &refs {
                            r.tell(Hit).unwrap();
                        }
                    }
                },
            )
            .await;
            rates.print("round robin", "direct", "sharded");
            println!(
                "  routing so far: {:?}",
                sharding.routing_stats::<Target>().unwrap()
            );
        }

        // Ask round trip.
        const ASKS: usize = 200_000;
        if wanted("ask") {
            let mut d = Vec::with_capacity(ASKS);
            for _ in 0..ASKS {
                let t = Instant::now();
                direct.ask(Count).await.unwrap();
                d.push(t.elapsed());
            }
            let mut s = Vec::with_capacity(ASKS);
            for _ in 0..ASKS {
                let t = Instant::now();
                one.ask(Count).await.unwrap();
                s.push(t.elapsed());
            }
            let (dp50, dmean) = stats(&mut d);
            let (sp50, smean) = stats(&mut s);
            println!(
            "sharding bench: ask round trip ({ASKS} sequential)\n  direct  p50 {:>6.2} us  mean {:>6.2} us\n  sharded p50 {:>6.2} us  mean {:>6.2} us  (+{:.2} us p50)",
            dp50, dmean, sp50, smean, sp50 - dp50
        );
        }

        // Activation and memory.
        // `SHARDING_BENCH_ENTITIES` makes it smaller (for a heap profile
        // under valgrind).
        let new_count: usize = std::env::var("SHARDING_BENCH_ENTITIES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000_000);
        if wanted("activation") {
            // The baseline: the same actors spawned directly, each sent
            // its first message (what an entity costs below sharding).
            let before = rss_bytes();
            let heap_before = heap_in_use_bytes();
            let base = total.load(Ordering::Relaxed);
            let t0 = Instant::now();
            let mut plain = Vec::with_capacity(new_count);
            for _ in 0..new_count {
                let a = spawn_twin(&system, &total);
                a.tell(Hit).unwrap();
                plain.push(a);
            }
            wait_total(&total, base + new_count as u64).await;
            let per = t0.elapsed().as_secs_f64() * 1e6 / new_count as f64;
            let after = rss_bytes();
            let heap_after = heap_in_use_bytes();
            println!(
                "sharding bench: spawn + first message, {new_count} plain actors (baseline)\n  {:.2} us per actor; RSS +{:.0} bytes per idle actor (its ActorRef included), malloc'd +{:.0}",
                per,
                (after.saturating_sub(before)) as f64 / new_count as f64,
                (heap_after.saturating_sub(heap_before)) as f64 / new_count as f64,
            );
            let before = rss_bytes();
            let heap_before = heap_in_use_bytes();
            let base = total.load(Ordering::Relaxed);
            let t0 = Instant::now();
            for i in 0..new_count {
                let r: EntityRef<Target> = sharding.entity_ref(format!("new-{i}")).unwrap();
                r.tell(Hit).unwrap();
            }
            wait_total(&total, base + new_count as u64).await;
            let per = t0.elapsed().as_secs_f64() * 1e6 / new_count as f64;
            let after = rss_bytes();
            let heap_after = heap_in_use_bytes();
            println!(
            "sharding bench: first message to {new_count} new entities over 1000 shards\n  {:.2} us per entity; RSS +{:.0} bytes per idle entity, malloc'd +{:.0} ({} MB -> {} MB)",
            per,
            (after.saturating_sub(before)) as f64 / new_count as f64,
            (heap_after.saturating_sub(heap_before)) as f64 / new_count as f64,
            before / 1_000_000,
            after / 1_000_000
        );
        }
        system.terminate().await;
    });
}

/// `rounds` of `N` messages a side, in chunks of `chunk` that alternate
/// between the direct side and the sharded one (`support/side_by_side.rs`):
/// `direct` and `sharded` each tell `chunk` messages, and a chunk ends
/// when the entities have handled them all.
async fn tell_side_by_side(
    total: &AtomicU64,
    rounds: usize,
    chunk: u64,
    mut direct: impl FnMut(),
    mut sharded: impl FnMut(),
) -> SideBySide {
    let mut rates = SideBySide::default();
    for round in 0..rounds {
        let (mut d, mut s) = (Tally::default(), Tally::default());
        for c in 0..N.div_ceil(chunk) {
            for direct_turn in side_by_side::order(round, c) {
                let base = total.load(Ordering::Relaxed);
                let t0 = Instant::now();
                if direct_turn {
                    direct();
                } else {
                    sharded();
                }
                wait_total(total, base + chunk).await;
                let tally = if direct_turn { &mut d } else { &mut s };
                tally.add(chunk, t0.elapsed().as_secs_f64());
            }
        }
        rates.push(&d, &s);
    }
    rates
}

/// An actor of the same type outside sharding, for the direct figures.
fn spawn_twin(system: &ActorSystem, total: &Arc<AtomicU64>) -> ActorRef<Target> {
    system.spawn(Target {
        hits: 0,
        total: total.clone(),
    })
}

/// p50 and mean in microseconds.
fn stats(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    let p50 = v[v.len() / 2].as_secs_f64() * 1e6;
    let mean = v.iter().map(|d| d.as_secs_f64()).sum::<f64>() / v.len() as f64 * 1e6;
    (p50, mean)
}
