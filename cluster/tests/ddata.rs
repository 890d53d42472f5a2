//! Distributed data across several actor systems in one process: majority
//! and majority-plus writes and reads, concurrent updates on both sides of a
//! partition merged after healing, subscriptions, deletion, durable keys
//! that survive a restart of every node (real redb files in a temporary
//! directory), and the one replicator of each actor system.

use std::path::PathBuf;
use std::time::{Duration, Instant};
use troupe_cluster::ddata::{
    DataError, GCounter, Key, ORSet, ReadConsistency, Replicator, ReplicatorSettings,
    WriteConsistency,
};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, Direction, RemoteSettings};
use troupe_core::rt;

const DEADLINE: Duration = Duration::from_secs(30);
const MAJORITY_W: WriteConsistency = WriteConsistency::Majority {
    timeout: Duration::from_secs(3),
};
const MAJORITY_R: ReadConsistency = ReadConsistency::Majority {
    timeout: Duration::from_secs(3),
};

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    replicator: Replicator,
}

fn cluster_settings(seeds: &[Address]) -> ClusterSettings {
    let mut s = ClusterSettings {
        seed_nodes: seeds.to_vec(),
        gossip_interval: Duration::from_millis(300),
        leader_actions_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(200),
        seed_node_timeout: Duration::from_millis(1500),
        ..ClusterSettings::default()
    };
    // Partitions in these tests must not down anyone.
    s.downing.strategy = troupe_cluster::DowningStrategy::None;
    s
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "troupe-ddata-{}-{tag}-{}",
        std::process::id(),
        fastrand_u64()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn fastrand_u64() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn start_nodes(n: usize, stores: Option<&[PathBuf]>) -> Vec<Node> {
    start_nodes_with(n, stores, |_| {})
}

fn start_nodes_with(
    n: usize,
    stores: Option<&[PathBuf]>,
    tweak: impl Fn(&mut ReplicatorSettings),
) -> Vec<Node> {
    let systems: Vec<ActorSystem> = (0..n)
        .map(|_| {
            ActorSystem::builder("ddata")
                .remote(
                    RemoteSettings::new("127.0.0.1:0")
                        .with_secret("ddata-test")
                        .with_fault_injection(),
                )
                .build()
                .unwrap()
        })
        .collect();
    let seeds = vec![systems[0].remoting().unwrap().address().clone()];
    systems
        .into_iter()
        .enumerate()
        .map(|(i, system)| {
            let cluster = Cluster::start(&system, cluster_settings(&seeds)).unwrap();
            let mut settings = ReplicatorSettings {
                gossip_interval: Duration::from_millis(200),
                ..ReplicatorSettings::default()
            };
            if let Some(stores) = stores {
                settings.durable_keys = vec!["durable-*".into()];
                settings.durable_store = stores[i].join("replicator.redb");
            }
            tweak(&mut settings);
            let replicator = Replicator::start(&system, &cluster, settings).unwrap();
            Node {
                system,
                cluster,
                replicator,
            }
        })
        .collect()
}

async fn all_up(nodes: &[Node]) {
    let start = Instant::now();
    'outer: loop {
        assert!(start.elapsed() < DEADLINE, "cluster did not form");
        for n in nodes {
            let s = n.cluster.state().await.unwrap();
            let replicas = n.replicator.replica_count().await.unwrap();
            if s.members.len() != nodes.len()
                || s.members.iter().any(|m| m.status != MemberStatus::Up)
                || replicas != nodes.len() - 1
            {
                rt::sleep(Duration::from_millis(50)).await;
                continue 'outer;
            }
        }
        return;
    }
}

/// Stops the nodes at the end of a test, abruptly, as before
/// `ActorSystem::shutdown` left the cluster gracefully: some tests need
/// their nodes to stop at once, and a graceful leave from a cut-off node
/// waits out its phase timeouts.
async fn shutdown(nodes: Vec<Node>) {
    for n in nodes {
        n.system.terminate().await;
    }
}

#[test]
fn a_majority_write_is_seen_by_a_majority_read_elsewhere() {
    rt::block_on(async {
        let nodes = start_nodes(3, None);
        all_up(&nodes).await;
        let key = Key::<GCounter>::new("hits");
        let me = nodes[0].cluster.self_node().clone();
        nodes[0]
            .replicator
            .update(&key, GCounter::new(), MAJORITY_W, move |mut c| {
                c.increment(&me, 5);
                c
            })
            .await
            .unwrap();
        let got = nodes[2]
            .replicator
            .get(&key, MAJORITY_R)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.value(), 5);
        // Unknown keys read as None; a deleted key is an error.
        assert!(nodes[1]
            .replicator
            .get(&Key::<GCounter>::new("nothing"), MAJORITY_R)
            .await
            .unwrap()
            .is_none());
        nodes[1].replicator.delete(&key, MAJORITY_W).await.unwrap();
        // A majority read overlaps the majority that took the delete (a
        // local read could come before the delete reached this node).
        let e = nodes[0].replicator.get(&key, MAJORITY_R).await.unwrap_err();
        assert!(matches!(e, DataError::Deleted(_)), "{e:?}");
        shutdown(nodes).await;
    });
}

#[test]
fn concurrent_updates_on_both_sides_of_a_partition_merge_after_healing() {
    rt::block_on(async {
        let nodes = start_nodes(3, None);
        all_up(&nodes).await;
        let key = Key::<ORSet<String>>::new("tags");
        let cut = nodes[2].cluster.self_address().clone();
        for n in &nodes[..2] {
            n.system
                .remoting()
                .unwrap()
                .fault_injector()
                .unwrap()
                .blackhole(&cut, Direction::Both);
        }
        add(&nodes[0], &key, "a").await.unwrap();
        add(&nodes[2], &key, "c").await.unwrap();
        // A majority write on the cut-off side cannot reach its consistency...
        let me = nodes[2].cluster.self_node().clone();
        let e = nodes[2]
            .replicator
            .update(
                &key,
                ORSet::new(),
                WriteConsistency::Majority {
                    timeout: Duration::from_millis(500),
                },
                move |mut s| {
                    s.add(&me, "d".to_string());
                    s
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(e, DataError::Timeout(_)), "{e:?}");
        for n in &nodes[..2] {
            n.system
                .remoting()
                .unwrap()
                .fault_injector()
                .unwrap()
                .pass_through(&cut);
        }
        // ...but everything merges once the partition heals.
        let start = Instant::now();
        loop {
            let mut done = true;
            for n in &nodes {
                let v = n
                    .replicator
                    .get(&key, ReadConsistency::Local)
                    .await
                    .unwrap();
                let elems = v.map(|s| s.elements()).unwrap_or_default();
                if elems.len() != 3 {
                    done = false;
                }
            }
            if done {
                break;
            }
            assert!(start.elapsed() < DEADLINE, "replicas did not converge");
            rt::sleep(Duration::from_millis(50)).await;
        }
        shutdown(nodes).await;
    });
}

async fn add(node: &Node, key: &Key<ORSet<String>>, tag: &'static str) -> Result<(), DataError> {
    let me = node.cluster.self_node().clone();
    node.replicator
        .update(key, ORSet::new(), WriteConsistency::Local, move |mut s| {
            s.add(&me, tag.to_string());
            s
        })
        .await
}

#[test]
fn subscribers_see_changes() {
    rt::block_on(async {
        let nodes = start_nodes(2, None);
        all_up(&nodes).await;
        let key = Key::<GCounter>::new("watched");
        let changes = nodes[1].replicator.subscribe(&key).await;
        let me = nodes[0].cluster.self_node().clone();
        nodes[0]
            .replicator
            .update(&key, GCounter::new(), MAJORITY_W, move |mut c| {
                c.increment(&me, 2);
                c
            })
            .await
            .unwrap();
        let v = rt::timeout(DEADLINE, changes.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v.value(), 2);
        shutdown(nodes).await;
    });
}

#[test]
fn durable_keys_survive_a_restart_of_every_node() {
    rt::block_on(async {
        let stores: Vec<PathBuf> = (0..3).map(|i| temp_dir(&format!("n{i}"))).collect();
        let nodes = start_nodes(3, Some(&stores));
        all_up(&nodes).await;
        let durable = Key::<ORSet<String>>::new("durable-orders");
        let volatile = Key::<ORSet<String>>::new("volatile-orders");
        for key in [&durable, &volatile] {
            let me = nodes[0].cluster.self_node().clone();
            nodes[0]
                .replicator
                .update(
                    key,
                    ORSet::new(),
                    WriteConsistency::All {
                        timeout: Duration::from_secs(3),
                    },
                    move |mut s| {
                        s.add(&me, "order-1".to_string());
                        s
                    },
                )
                .await
                .unwrap();
        }
        shutdown(nodes).await;
        // Every node restarts (new ports, new incarnations), same files.
        let nodes = start_nodes(3, Some(&stores));
        for n in &nodes {
            let v = n
                .replicator
                .get(&durable, ReadConsistency::Local)
                .await
                .unwrap()
                .unwrap();
            assert!(v.contains(&"order-1".to_string()));
            assert!(n
                .replicator
                .get(&volatile, ReadConsistency::Local)
                .await
                .unwrap()
                .is_none());
        }
        shutdown(nodes).await;
        for d in stores {
            let _ = std::fs::remove_dir_all(d);
        }
    });
}

/// Many concurrent writes of durable keys from every node, each to be
/// acknowledged by every replica: all are acknowledged (the replicas
/// commit them in groups), and every store holds every one of them when
/// reopened (the nodes stop at once, before gossip could fill a gap).
/// That nothing is acknowledged before its commit is checked with a held
/// commit in `durable.rs`'s own tests.
#[test]
fn concurrent_durable_writes_are_all_on_every_disk_once_acknowledged() {
    rt::block_on(async {
        let stores: Vec<PathBuf> = (0..3).map(|i| temp_dir(&format!("g{i}"))).collect();
        let nodes = start_nodes(3, Some(&stores));
        all_up(&nodes).await;
        const KEYS: usize = 40;
        const PER_KEY: usize = 10;
        let writes: Vec<_> = (0..KEYS * PER_KEY)
            .map(|i| {
                let replicator = nodes[i % 3].replicator.clone();
                let me = nodes[i % 3].cluster.self_node().clone();
                rt::spawn(async move {
                    let key = Key::<ORSet<String>>::new(format!("durable-k{}", i % KEYS));
                    let all = WriteConsistency::All {
                        timeout: Duration::from_secs(20),
                    };
                    replicator
                        .update(&key, ORSet::new(), all, move |mut s| {
                            s.add(&me, format!("e{i}"));
                            s
                        })
                        .await
                })
            })
            .collect();
        for w in writes {
            w.await.expect("every write acknowledged by every replica");
        }
        shutdown(nodes).await;
        for dir in &stores {
            let store =
                troupe_cluster::ddata::DurableStore::open_existing(dir.join("replicator.redb"))
                    .expect("the store is closed with its node");
            assert_eq!(store.keys().unwrap().len(), KEYS);
            for i in 0..KEYS * PER_KEY {
                let set: ORSet<String> = store
                    .get(&format!("durable-k{}", i % KEYS))
                    .unwrap()
                    .expect("every key stored");
                assert!(
                    set.contains(&format!("e{i}")),
                    "e{i} missing from {}",
                    dir.display()
                );
            }
        }
        for d in stores {
            let _ = std::fs::remove_dir_all(d);
        }
    });
}

#[test]
fn a_corrupt_store_is_a_clear_error_naming_the_file() {
    rt::block_on(async {
        let dir = temp_dir("corrupt");
        let file = dir.join("replicator.redb");
        std::fs::write(&file, b"this is not a redb file, it is garbage").unwrap();
        let system = ActorSystem::builder("ddata")
            .remote(RemoteSettings::new("127.0.0.1:0").with_secret("ddata-test"))
            .build()
            .unwrap();
        let cluster = Cluster::start(&system, ClusterSettings::default()).unwrap();
        let settings = ReplicatorSettings {
            durable_keys: vec!["x".into()],
            durable_store: file.clone(),
            ..ReplicatorSettings::default()
        };
        let e = Replicator::start(&system, &cluster, settings).unwrap_err();
        assert!(e.to_string().contains(&file.display().to_string()), "{e}");
        system.shutdown().await;
        let _ = std::fs::remove_dir_all(dir);
    });
}

#[test]
fn a_set_of_twenty_thousand_elements_replicates() {
    rt::block_on(async {
        let nodes = start_nodes(3, None);
        all_up(&nodes).await;
        let key = Key::<ORSet<String>>::new("big");
        let me = nodes[0].cluster.self_node().clone();
        nodes[0]
            .replicator
            .update(&key, ORSet::new(), MAJORITY_W, move |mut s| {
                for i in 0..20_000 {
                    s.add(&me, format!("order-{i:06}"));
                }
                s
            })
            .await
            .unwrap();
        let got = nodes[2]
            .replicator
            .get(&key, MAJORITY_R)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.len(), 20_000);
        shutdown(nodes).await;
    });
}

#[test]
fn a_node_that_left_is_pruned_from_the_data_and_its_count_kept() {
    use troupe_cluster::ddata::ReplicatedData;
    rt::block_on(async {
        let mut nodes = start_nodes_with(3, None, |s| {
            s.pruning_interval = Duration::from_millis(200);
            s.max_pruning_dissemination = Duration::from_millis(500);
        });
        all_up(&nodes).await;
        let key = Key::<GCounter>::new("visits");
        let all = WriteConsistency::All {
            timeout: Duration::from_secs(3),
        };
        for (i, n) in nodes.iter().enumerate() {
            let me = n.cluster.self_node().clone();
            n.replicator
                .update(&key, GCounter::new(), all, move |mut c| {
                    c.increment(&me, 10 * (i as u64 + 1));
                    c
                })
                .await
                .unwrap();
        }
        // The node that counted 30 leaves for good.
        let gone = nodes.pop().unwrap();
        let gone_node = gone.cluster.self_node().clone();
        gone.cluster.leave(gone.cluster.self_address());
        let start = Instant::now();
        loop {
            let mut done = true;
            for n in &nodes {
                let c = n
                    .replicator
                    .get(&key, ReadConsistency::Local)
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(c.value(), 60, "a count was lost or doubled");
                done &= !c.need_pruning_from(&gone_node);
            }
            if done {
                break;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{gone_node} was not pruned from the counter"
            );
            rt::sleep(Duration::from_millis(50)).await;
        }
        gone.system.terminate().await;
        shutdown(nodes).await;
    });
}

/// Cuts `cut` off from `from` (both directions), or heals the cut.
fn set_cut(from: &[Node], cut: &Node, blackhole: bool) {
    let addr = cut.cluster.self_address().clone();
    for n in from {
        let faults = n.system.remoting().unwrap().fault_injector().unwrap();
        if blackhole {
            faults.blackhole(&addr, Direction::Both);
        } else {
            faults.pass_through(&addr);
        }
    }
}

async fn increment(node: &Node, key: &Key<GCounter>, w: WriteConsistency) -> Result<(), DataError> {
    let me = node.cluster.self_node().clone();
    node.replicator
        .update(key, GCounter::new(), w, move |mut c| {
            c.increment(&me, 1);
            c
        })
        .await
}

#[test]
fn majority_plus_needs_a_majority_and_more_and_is_read_back_elsewhere() {
    const SHORT: Duration = Duration::from_millis(600);
    const PLUS_ONE_W: WriteConsistency = WriteConsistency::MajorityPlus {
        additional: 1,
        timeout: Duration::from_secs(3),
    };
    const PLUS_ONE_R: ReadConsistency = ReadConsistency::MajorityPlus {
        additional: 1,
        timeout: Duration::from_secs(3),
    };
    rt::block_on(async {
        // Five replicas: a majority is 3, a majority plus one is 4.
        let nodes = start_nodes(5, None);
        all_up(&nodes).await;
        let key = Key::<GCounter>::new("plus");

        // Node 4 is cut off: 4 replicas remain, enough for plus one.
        set_cut(&nodes[..4], &nodes[4], true);
        increment(&nodes[0], &key, PLUS_ONE_W).await.unwrap();
        let e = increment(&nodes[0], &key, WriteConsistency::All { timeout: SHORT })
            .await
            .unwrap_err();
        assert!(matches!(e, DataError::Timeout(_)), "{e:?}");
        // A read of plus one from another node sees both increments (the
        // timed-out write is applied locally on node 0, which is asked).
        let got = nodes[3]
            .replicator
            .get(&key, PLUS_ONE_R)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.value(), 2);

        // Node 3 is cut off too: 3 replicas remain, a majority but not
        // a majority plus one.
        set_cut(&nodes[..3], &nodes[3], true);
        increment(&nodes[1], &key, MAJORITY_W).await.unwrap();
        let e = increment(
            &nodes[1],
            &key,
            WriteConsistency::MajorityPlus {
                additional: 1,
                timeout: SHORT,
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(e, DataError::Timeout(_)), "{e:?}");
        assert!(e.to_string().contains("of the 3 other replicas"), "{e}");
        let e = nodes[2]
            .replicator
            .get(
                &key,
                ReadConsistency::MajorityPlus {
                    additional: 1,
                    timeout: SHORT,
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(e, DataError::Timeout(_)), "{e:?}");
        // Plus nothing is a plain majority.
        increment(
            &nodes[2],
            &key,
            WriteConsistency::MajorityPlus {
                additional: 0,
                timeout: Duration::from_secs(3),
            },
        )
        .await
        .unwrap();
        let got = nodes[0]
            .replicator
            .get(&key, MAJORITY_R)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.value(), 5);

        // Healed, plus `usize::MAX` is every replica: node 0's whole count
        // (5 and this write) reaches all, the formerly cut-off included.
        set_cut(&nodes[..3], &nodes[3], false);
        set_cut(&nodes[..4], &nodes[4], false);
        let every = WriteConsistency::MajorityPlus {
            additional: usize::MAX,
            timeout: Duration::from_secs(3),
        };
        let start = Instant::now();
        // The cut-off nodes' connections come back on their own time.
        while let Err(e) = increment(&nodes[0], &key, every).await {
            assert!(
                start.elapsed() < DEADLINE,
                "never reached every replica: {e}"
            );
        }
        for n in &nodes {
            let v = n
                .replicator
                .get(&key, ReadConsistency::Local)
                .await
                .unwrap()
                .unwrap();
            assert!(
                v.value() >= 6,
                "{} missed the write to all",
                n.cluster.self_node()
            );
        }
        shutdown(nodes).await;
    });
}

fn lone_system() -> (ActorSystem, Cluster) {
    let system = ActorSystem::builder("ddata")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("ddata-test"))
        .build()
        .unwrap();
    let cluster = Cluster::start(&system, ClusterSettings::default()).unwrap();
    (system, cluster)
}

#[test]
fn every_component_of_a_system_gets_its_one_replicator() {
    rt::block_on(async {
        let (system, cluster) = lone_system();
        assert!(Replicator::find(&system).is_none());
        // Components racing to get the replicator all get the same one.
        let found: Vec<Replicator> = std::thread::scope(|s| {
            let tasks: Vec<_> = (0..4)
                .map(|_| s.spawn(|| Replicator::get_or_start(&system, &cluster).unwrap()))
                .collect();
            tasks.into_iter().map(|t| t.join().unwrap()).collect()
        });
        assert!(found.windows(2).all(|w| w[0] == w[1]));
        let replicator = Replicator::find(&system).expect("started by get_or_start");
        assert_eq!(replicator, found[0]);
        // What one component writes, another reads through its own handle.
        let key = Key::<GCounter>::new("shared");
        let me = cluster.self_node().clone();
        found[1]
            .update(
                &key,
                GCounter::new(),
                WriteConsistency::Local,
                move |mut c| {
                    c.increment(&me, 3);
                    c
                },
            )
            .await
            .unwrap();
        let got = replicator
            .get(&key, ReadConsistency::Local)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.value(), 3);
        // A second replicator is a clear error that names the way out.
        let e = Replicator::start(&system, &cluster, ReplicatorSettings::default()).unwrap_err();
        assert!(e.to_string().contains("Replicator::get_or_start"), "{e}");
        assert_eq!(Replicator::find(&system), Some(replicator));
        system.shutdown().await;
        assert!(Replicator::find(&system).is_none(), "gone with its system");
    });
}

#[test]
fn get_or_start_finds_a_replicator_started_with_its_own_settings() {
    rt::block_on(async {
        let (system, cluster) = lone_system();
        let settings = ReplicatorSettings {
            majority_min_cap: 3,
            ..ReplicatorSettings::default()
        };
        let started = Replicator::start(&system, &cluster, settings).unwrap();
        let found = Replicator::get_or_start(&system, &cluster).unwrap();
        assert_eq!(found, started);
        assert_eq!(found.majority_min_cap(), 3, "not a default one");
        assert!(Replicator::start(&system, &cluster, ReplicatorSettings::default()).is_err());
        // Each actor system has its own.
        let (other, other_cluster) = lone_system();
        let theirs = Replicator::get_or_start(&other, &other_cluster).unwrap();
        assert_ne!(theirs, started);
        assert_eq!(theirs.majority_min_cap(), 0);
        other.shutdown().await;
        system.shutdown().await;
    });
}
