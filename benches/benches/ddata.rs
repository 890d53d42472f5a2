//! Distributed data: majority-write latency and throughput on a 5-node
//! cluster in one process (loopback TCP, default settings).
//!
//! ```sh
//! cargo bench --manifest-path benches/Cargo.toml --bench ddata
//! ```
//!
//! - latency: 2,000 sequential majority writes (GCounter increments) from
//!   one node; p50 and p99;
//! - throughput: 16 concurrent writers on one node, 500 majority writes
//!   each, to 16 keys; writes per second.

use std::time::{Duration, Instant};
use troupe_cluster::ddata::{GCounter, Key, Replicator, ReplicatorSettings, WriteConsistency};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::RemoteSettings;
use troupe_core::rt;

const MAJORITY: WriteConsistency = WriteConsistency::Majority {
    timeout: Duration::from_secs(5),
};

#[allow(clippy::print_stdout)]
fn main() {
    rt::block_on(async {
        let systems: Vec<ActorSystem> = (0..5)
            .map(|_| {
                ActorSystem::builder("ddata")
                    .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bench"))
                    .build()
                    .expect("system")
            })
            .collect();
        let seed = systems[0].remoting().unwrap().address().clone();
        let nodes: Vec<(ActorSystem, Cluster, Replicator)> = systems
            .into_iter()
            .map(|s| {
                let c = Cluster::start(
                    &s,
                    ClusterSettings {
                        seed_nodes: vec![seed.clone()],
                        ..ClusterSettings::default()
                    },
                )
                .expect("cluster");
                let r =
                    Replicator::start(&s, &c, ReplicatorSettings::default()).expect("replicator");
                (s, c, r)
            })
            .collect();
        // Wait until every replicator knows the four others.
        let start = Instant::now();
        loop {
            let mut ready = true;
            for (_, c, r) in &nodes {
                let up = c
                    .state()
                    .await
                    .map(|s| {
                        s.members
                            .iter()
                            .filter(|m| m.status == MemberStatus::Up)
                            .count()
                    })
                    .unwrap_or(0);
                if up != 5 || r.replica_count().await.unwrap_or(0) != 4 {
                    ready = false;
                }
            }
            if ready {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "cluster did not form"
            );
            rt::sleep(Duration::from_millis(100)).await;
        }
        let (_, cluster, replicator) = &nodes[0];
        let me = cluster.self_node().clone();
        let key = Key::<GCounter>::new("latency");
        let mut lat = Vec::with_capacity(2000);
        for _ in 0..2200 {
            let me = me.clone();
            let t = Instant::now();
            replicator
                .update(&key, GCounter::new(), MAJORITY, move |mut c| {
                    c.increment(&me, 1);
                    c
                })
                .await
                .expect("majority write");
            lat.push(t.elapsed());
        }
        lat.drain(..200);
        lat.sort();
        let p =
            |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)].as_secs_f64() * 1e6;
        println!(
            "majority write latency, 5 nodes: p50 {:.0} µs, p99 {:.0} µs",
            p(0.5),
            p(0.99)
        );

        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..16 {
            let replicator = replicator.clone();
            let me = me.clone();
            tasks.push(rt::spawn(async move {
                let key = Key::<GCounter>::new(format!("throughput-{w}"));
                for _ in 0..500 {
                    let me = me.clone();
                    replicator
                        .update(&key, GCounter::new(), MAJORITY, move |mut c| {
                            c.increment(&me, 1);
                            c
                        })
                        .await
                        .expect("majority write");
                }
            }));
        }
        for t in tasks {
            t.await;
        }
        let rate = 16.0 * 500.0 / t0.elapsed().as_secs_f64();
        println!("majority write throughput, 5 nodes, 16 writers: {rate:.0} writes/s");
        println!(
            "{{\"framework\":\"troupe\",\"ddata\":true,\"majority_write_p50_us\":{:.1},\"majority_write_p99_us\":{:.1},\"majority_writes_per_s\":{rate:.1}}}",
            p(0.5),
            p(0.99)
        );
        for (s, _, _) in nodes {
            s.terminate().await;
        }
    });
}
