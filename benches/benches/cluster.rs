//! Cluster membership figures, in one process over loopback TCP, with
//! default intervals (gossip 1 s, heartbeat 1 s, leader actions 1 s,
//! failure detector threshold 8 and acceptable pause 3 s, split brain
//! resolver keep-majority with stable-after 20 s):
//!
//! - time from start until every node sees all members Up, for 5, 10, 25
//!   and 50 nodes (the first node is the only seed, so it forms the
//!   cluster at once; the others join it);
//! - in a cluster of 5 processes (a fresh one for each of
//!   `CLUSTER_BENCH_KILLS` kills, default 5), time from `kill -9` of one
//!   until every survivor sees it unreachable, and until it is removed;
//! - gossip bytes sent per second per node in a converged 25-node cluster;
//! - cluster singleton, 3 nodes: hand-over time when the host leaves
//!   gracefully, and take-over time when it stops abruptly (failure
//!   detection, then stable-after, then removal, then take-over).
//!
//! ```sh
//! cargo bench --manifest-path benches/Cargo.toml --bench cluster
//! ```

use std::time::{Duration, Instant};
use troupe_cluster::singleton::{self, ClusterSingletonSettings};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;

struct Node {
    system: ActorSystem,
    cluster: Cluster,
}

fn start_nodes(n: usize) -> Vec<Node> {
    let systems: Vec<ActorSystem> = (0..n)
        .map(|_| {
            ActorSystem::builder("bench")
                .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bench"))
                .build()
                .expect("system")
        })
        .collect();
    let seed: Address = systems[0].remoting().unwrap().address().clone();
    systems
        .into_iter()
        .map(|system| {
            let settings = ClusterSettings {
                seed_nodes: vec![seed.clone()],
                ..ClusterSettings::default()
            };
            let cluster = Cluster::start(&system, settings).expect("cluster");
            Node { system, cluster }
        })
        .collect()
}

/// Waits until `check` holds on every node; the time it took.
async fn until_all(
    nodes: &[&Node],
    limit: Duration,
    check: impl Fn(&troupe_cluster::CurrentClusterState) -> bool,
) -> Option<Duration> {
    let start = Instant::now();
    loop {
        let mut ok = true;
        for n in nodes {
            match n.cluster.state().await {
                Ok(s) if check(&s) => {}
                _ => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            return Some(start.elapsed());
        }
        if start.elapsed() > limit {
            return None;
        }
        rt::sleep(Duration::from_millis(50)).await;
    }
}

async fn shutdown(nodes: Vec<Node>) {
    for n in nodes {
        n.system.terminate().await;
    }
}

#[path = "support/cluster_kill.rs"]
mod kill;

#[allow(clippy::print_stdout)]
fn main() {
    // The benchmark runs itself as the nodes of the failure figure.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("node") {
        kill::node(args.get(2).map_or("-", String::as_str));
        return;
    }
    // Logs only when asked for (`RUST_LOG=warn`), so the figures stay readable.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }
    rt::block_on(async {
        let mut json = Vec::new();
        // `CLUSTER_BENCH_SIZES=50` measures only some sizes.
        let sizes: Vec<usize> = std::env::var("CLUSTER_BENCH_SIZES")
            .ok()
            .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
            .unwrap_or_else(|| vec![5, 10, 25, 50]);
        for n in sizes {
            let start = Instant::now();
            let nodes = start_nodes(n);
            let refs: Vec<&Node> = nodes.iter().collect();
            let took = until_all(&refs, Duration::from_secs(120), |s| {
                s.members.len() == n && s.members.iter().all(|m| m.status == MemberStatus::Up)
            })
            .await
            .map(|_| start.elapsed());
            match took {
                Some(t) => {
                    println!(
                        "{n:>3} nodes: all members Up everywhere after {:.2} s",
                        t.as_secs_f64()
                    );
                    json.push(format!("\"converged_{n}_nodes_s\":{:.3}", t.as_secs_f64()));
                }
                None => println!("{n:>3} nodes: did not converge within 120 s"),
            }
            if n == 25 && took.is_some() {
                // Converged: let the last changes settle (the final moves
                // to Up spread as full states), then measure over 10 s.
                rt::sleep(Duration::from_secs(5)).await;
                let before: Vec<u64> = futures_collect(&nodes).await;
                let window = Duration::from_secs(10);
                rt::sleep(window).await;
                let after: Vec<u64> = futures_collect(&nodes).await;
                let per_node: f64 = after
                    .iter()
                    .zip(&before)
                    .map(|(a, b)| (a - b) as f64)
                    .sum::<f64>()
                    / n as f64
                    / window.as_secs_f64();
                println!("25 nodes converged: {per_node:.0} gossip bytes/s per node");
                json.push(format!("\"gossip_bytes_per_s_per_node_25\":{per_node:.1}"));
            }
            shutdown(nodes).await;
        }

        // `CLUSTER_BENCH_PARTS=failure,singleton` picks the other parts;
        // by default all run, unless only some sizes were asked for.
        let parts = std::env::var("CLUSTER_BENCH_PARTS").unwrap_or_else(|_| {
            if std::env::var("CLUSTER_BENCH_SIZES").is_ok() {
                String::new()
            } else {
                "failure,singleton".to_string()
            }
        });
        if parts.contains("failure") {
            let kills = std::env::var("CLUSTER_BENCH_KILLS")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(5);
            kill::failure_detection(kills, &mut json);
        }
        if !parts.contains("singleton") {
            println!(
                "{{\"framework\":\"troupe\",\"cluster\":true,{}}}",
                json.join(",")
            );
            return;
        }
        // Singleton hand-over (graceful leave of the host) and take-over
        // (abrupt stop of the host), 3 nodes, default settings.
        let mut nodes = start_nodes(3);
        for n in &nodes {
            singleton::start(
                &n.system,
                &n.cluster,
                "bench",
                || Probe,
                ClusterSingletonSettings::default(),
            )
            .expect("singleton");
        }
        let refs: Vec<&Node> = nodes.iter().collect();
        until_all(&refs, Duration::from_secs(60), |s| {
            s.members.len() == 3 && s.members.iter().all(|m| m.status == MemberStatus::Up)
        })
        .await
        .expect("3 nodes up");
        let host = wait_host(&nodes, Duration::from_secs(30))
            .await
            .expect("a host");
        rt::sleep(Duration::from_secs(3)).await;
        let leaving = nodes.remove(host);
        let t0 = Instant::now();
        leaving.cluster.leave(leaving.cluster.self_address());
        match wait_host(&nodes, Duration::from_secs(60)).await {
            Some(_) => {
                let t = t0.elapsed();
                println!(
                    "singleton hand-over on graceful leave: {:.2} s",
                    t.as_secs_f64()
                );
                json.push(format!("\"singleton_hand_over_s\":{:.3}", t.as_secs_f64()));
            }
            None => println!("singleton hand-over did not complete"),
        }
        leaving.system.terminate().await;
        // Take-over: a third node joins, then the host stops abruptly.
        let seed = nodes[0].system.remoting().unwrap().address().clone();
        let extra = ActorSystem::builder("bench")
            .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bench"))
            .build()
            .expect("system");
        let cluster = Cluster::start(
            &extra,
            ClusterSettings {
                seed_nodes: vec![seed],
                ..ClusterSettings::default()
            },
        )
        .expect("cluster");
        singleton::start(
            &extra,
            &cluster,
            "bench",
            || Probe,
            ClusterSingletonSettings::default(),
        )
        .expect("singleton");
        nodes.push(Node {
            system: extra,
            cluster,
        });
        let refs: Vec<&Node> = nodes.iter().collect();
        until_all(&refs, Duration::from_secs(60), |s| {
            s.members.len() == 3 && s.members.iter().all(|m| m.status == MemberStatus::Up)
        })
        .await
        .expect("3 nodes up again");
        rt::sleep(Duration::from_secs(5)).await;
        let host = wait_host(&nodes, Duration::from_secs(30))
            .await
            .expect("a host");
        let victim = nodes.remove(host);
        let t0 = Instant::now();
        victim.system.terminate().await;
        match wait_host(&nodes, Duration::from_secs(120)).await {
            Some(_) => {
                let t = t0.elapsed();
                println!(
                    "singleton take-over after the host stopped abruptly: {:.2} s",
                    t.as_secs_f64()
                );
                json.push(format!("\"singleton_take_over_s\":{:.3}", t.as_secs_f64()));
            }
            None => println!("singleton take-over did not complete"),
        }
        shutdown(nodes).await;
        println!(
            "{{\"framework\":\"troupe\",\"cluster\":true,{}}}",
            json.join(",")
        );
    });
}

/// The singleton instance of the benchmark.
struct Probe;
impl Actor for Probe {}

/// Waits until exactly one node hosts the singleton; its index.
async fn wait_host(nodes: &[Node], limit: Duration) -> Option<usize> {
    let start = Instant::now();
    loop {
        let hosts: Vec<usize> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| {
                n.system
                    .lookup_any("/system/singleton-bench/singleton")
                    .is_some()
            })
            .map(|(i, _)| i)
            .collect();
        if hosts.len() == 1 {
            return Some(hosts[0]);
        }
        if start.elapsed() > limit {
            return None;
        }
        rt::sleep(Duration::from_millis(20)).await;
    }
}

async fn futures_collect(nodes: &[Node]) -> Vec<u64> {
    let mut v = Vec::new();
    for n in nodes {
        v.push(n.cluster.gossip_stats().await.map(|s| s.bytes).unwrap_or(0));
    }
    v
}
