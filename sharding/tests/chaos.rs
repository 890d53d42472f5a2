//! Chaos: a load generator sends numbered messages to thousands of
//! entities while nodes join, leave, are stopped abruptly and are cut off,
//! at random, for about 40 seconds (seeded; the seed is printed, and
//! `CHAOS_SEED=n` repeats the same actions). Faults come one at a time
//! (the next waits until the faulty node is removed). Afterwards:
//! - no entity got a message twice or out of order (numbers strictly rise);
//! - every message sent once the cluster was healthy again arrived;
//! - no two incarnations of one entity were alive at once on the nodes that
//!   were not cut off (a shared probe), and no send was refused;
//! - all of it while an active-entity limit passivates entities all along.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use troupe_cluster::coordinated_shutdown::Reason;
use troupe_core::rt;
use troupe_sharding::{PassivationSettings, ShardingSettings};

/// A small deterministic generator (xorshift), so that a run can be
/// replayed from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const ENTITIES: usize = 2_000;

/// Waits until `node` no longer counts `address` as a member: one fault at
/// a time, so that two unreachable nodes never face a split brain
/// resolver whose tie-break (the lowest address) could down the healthy
/// side.
async fn gone(node: &Node, address: &troupe_core::remote::Address) {
    eventually("the faulty node is removed", async || {
        node.cluster
            .state()
            .await
            .is_ok_and(|s| s.members.iter().all(|m| &m.node.address != address))
    })
    .await;
}
const CHAOS: Duration = Duration::from_secs(40);

#[test]
fn numbered_messages_survive_joins_leaves_crashes_and_partitions() {
    init_logging();
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("chaos seed: {seed} (CHAOS_SEED={seed} repeats its actions)");
    let mut rng = Rng(seed);
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        // A small active-entity limit: entities are passivated and started
        // again all the time, while their shards move.
        let settings = ShardingSettings {
            passivation: PassivationSettings::least_recently_used(400),
            ..sharding_settings()
        };
        let mut nodes = start_nodes(3, &probe, settings.clone());
        {
            let all: Vec<&Node> = nodes.iter().collect();
            all_up(&all, 3).await;
        }
        let seed_address = nodes[0].address();
        let ids: Vec<String> = (0..ENTITIES).map(|i| format!("c{i}")).collect();
        let refs: Vec<_> = ids.iter().map(|id| nodes[0].counter(id.as_str())).collect();

        // The load: from the seed node (which stays), numbered messages per
        // entity, a slice of the entities every few milliseconds.
        let stop = Arc::new(AtomicBool::new(false));
        let next_number = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let load = {
            let (stop, next_number, refused, refs) = (
                stop.clone(),
                next_number.clone(),
                refused.clone(),
                refs.clone(),
            );
            rt::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for r in &refs {
                        if r.tell(Seq(n)).is_err() {
                            refused.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    n += 1;
                    next_number.store(n, Ordering::Relaxed);
                    rt::sleep(Duration::from_millis(100)).await;
                }
            })
        };

        // The chaos.
        let started = Instant::now();
        let mut joined = 0;
        while started.elapsed() < CHAOS {
            rt::sleep(Duration::from_millis(2_000 + rng.below(2_000) as u64)).await;
            let movable = nodes.len() - 1; // never the seed
            let action = if movable < 2 {
                0
            } else if movable >= 4 {
                1 + rng.below(3)
            } else {
                rng.below(4)
            };
            match action {
                0 => {
                    eprintln!("chaos: a node joins");
                    nodes.push(start_node(
                        std::slice::from_ref(&seed_address),
                        &probe,
                        settings.clone(),
                    ));
                    joined += 1;
                }
                1 => {
                    let victim = nodes.remove(1 + rng.below(movable));
                    eprintln!("chaos: {} leaves gracefully", victim.name());
                    victim
                        .cluster
                        .coordinated_shutdown()
                        .run(Reason::Unknown)
                        .await;
                }
                2 => {
                    let victim = nodes.remove(1 + rng.below(movable));
                    eprintln!("chaos: {} stops abruptly", victim.name());
                    // Its entities die with it: they stop counting at once.
                    probe.crashed(&victim.name());
                    victim.system.terminate().await;
                    nodes[0].cluster.down(&victim.address());
                    gone(&nodes[0], &victim.address()).await;
                }
                _ => {
                    let victim = nodes.remove(1 + rng.below(movable));
                    eprintln!("chaos: {} is cut off", victim.name());
                    probe.crashed(&victim.name());
                    let others: Vec<&Node> = nodes.iter().collect();
                    cut_off(&victim, &others);
                    let address = victim.address();
                    // The split brain resolver downs it (and it downs
                    // itself); keep it running until then.
                    rt::spawn(async move {
                        let deadline = Instant::now() + Duration::from_secs(30);
                        while !victim.cluster.is_terminated() && Instant::now() < deadline {
                            rt::sleep(Duration::from_millis(100)).await;
                        }
                        victim.system.terminate().await;
                    });
                    gone(&nodes[0], &address).await;
                }
            }
        }
        eprintln!("chaos over after {joined} joins; healing");
        {
            let all: Vec<&Node> = nodes.iter().collect();
            let n = all.len();
            all_up(&all, n).await;
        }
        // Healthy again: everything sent from now on must arrive.
        let healthy_from = next_number.load(Ordering::Relaxed) + 1;
        eventually("the load sends while the cluster is healthy", async || {
            next_number.load(Ordering::Relaxed) >= healthy_from + 20
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        load.await;
        let last = next_number.load(Ordering::Relaxed) - 1;
        for r in &refs {
            r.ask_timeout(Add(0), DEADLINE).await.unwrap();
        }
        let deadline = Instant::now() + DEADLINE;
        loop {
            let missing: Vec<(String, Option<u64>)> = probe.state(|p| {
                ids.iter()
                    .filter_map(|id| {
                        let got = p.received.get(id).and_then(|v| v.last()).copied();
                        (got != Some(last)).then(|| (id.clone(), got))
                    })
                    .collect()
            });
            if missing.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} entities did not get message {last} within {DEADLINE:?} (entity, last                  received): {:?}; started on: {:?}",
                missing.len(),
                &missing[..missing.len().min(10)],
                probe.state(|p| p.started_on.get(&missing[0].0).cloned())
            );
            rt::sleep(Duration::from_millis(50)).await;
        }
        probe.state(|p| {
            for id in &ids {
                let got = &p.received[id];
                assert!(
                    got.windows(2).all(|w| w[0] < w[1]),
                    "entity {id} got a message twice or out of order: {got:?}"
                );
                for n in healthy_from..=last {
                    assert!(
                        got.contains(&n),
                        "entity {id} lost message {n} sent while healthy"
                    );
                }
            }
            assert_eq!(
                p.max_alive, 1,
                "two incarnations of one entity were alive at once"
            );
            let starts: usize = p.started_on.values().map(Vec::len).sum();
            assert!(
                starts > 2 * ENTITIES,
                "only {starts} starts of {ENTITIES} entities: the limit passivated too little"
            );
        });
        assert_eq!(refused.load(Ordering::Relaxed), 0, "no send was refused");
        shutdown_all(nodes).await;
    });
}
