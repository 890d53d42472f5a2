//! `troupe-node remove-sharding-data` on a real node's store: while a
//! `troupe-node` runs on the data directory the command refuses, with a
//! clear message and a failure status, and removes nothing; once the node
//! has stopped it removes the sharding data of the given entity types,
//! prints each key it removed, and leaves the rest of the store.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use support::{node_binary, Node};
use troupe_cluster::ddata::{
    DurableStore, Key, LWWRegister, ORSet, PNCounter, Replicator, ReplicatorSettings,
    WriteConsistency,
};
use troupe_cluster::{Cluster, ClusterSettings};
use troupe_core::prelude::*;
use troupe_core::remote::RemoteSettings;
use troupe_core::rt;

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The keys the test writes for the types it removes.
const REMOVED: [&str; 6] = [
    "shard-counter-3-1",
    "shard-counter-7-0",
    "shard-counter-all",
    "sharding-coordinator-state-counter",
    "shard-other-1-4",
    "shard-other-all",
];

/// The keys that must stay: a counter's value, and a type whose name
/// starts with `counter-`.
const KEPT: [&str; 3] = ["counter-c1", "shard-counter-x-5-0", "shard-counter-x-all"];

/// Writes sharding's keys into the store at `store` through a real
/// replicator (durable keys), as a node with remembered entities would.
fn seed(store: &Path) {
    rt::block_on(async {
        let system = ActorSystem::builder("seed")
            .remote(RemoteSettings::new("127.0.0.1:0").with_secret("seed"))
            .build()
            .unwrap();
        let cluster = Cluster::start(&system, ClusterSettings::default()).unwrap();
        let settings = ReplicatorSettings {
            durable_keys: vec![
                "shard-*".into(),
                "sharding-coordinator-state-*".into(),
                "counter-*".into(),
            ],
            durable_store: store.to_path_buf(),
            ..ReplicatorSettings::default()
        };
        let replicator = Replicator::start(&system, &cluster, settings).unwrap();
        let me = cluster.self_node().clone();
        let sets: [(&str, &[&str]); 7] = [
            ("shard-counter-all", &["7", "3"]),
            ("shard-counter-7-0", &["c7", "c8"]),
            ("shard-counter-3-1", &["c3"]),
            ("shard-other-all", &["1"]),
            ("shard-other-1-4", &["o1"]),
            ("shard-counter-x-all", &["5"]),
            ("shard-counter-x-5-0", &["x5"]),
        ];
        for (key, ids) in sets {
            let (me, ids) = (me.clone(), ids.to_vec());
            replicator
                .update(
                    &Key::<ORSet<String>>::new(key),
                    ORSet::new(),
                    WriteConsistency::Local,
                    move |mut s| {
                        for id in ids {
                            s.add(&me, id.to_string());
                        }
                        s
                    },
                )
                .await
                .unwrap();
        }
        let m = me.clone();
        replicator
            .update(
                &Key::<LWWRegister<String>>::new("sharding-coordinator-state-counter"),
                LWWRegister::new(&me, String::new()),
                WriteConsistency::Local,
                move |mut r| {
                    r.set(&m, "{}".to_string());
                    r
                },
            )
            .await
            .unwrap();
        replicator
            .update(
                &Key::<PNCounter>::new("counter-c1"),
                PNCounter::new(),
                WriteConsistency::Local,
                move |mut c| {
                    c.change(&me, 5);
                    c
                },
            )
            .await
            .unwrap();
        system.shutdown().await;
    });
}

fn remove(data: &Path, types: &str) -> Output {
    Command::new(node_binary())
        .args(["remove-sharding-data", "--data-dir"])
        .arg(data)
        .args(["--types", types])
        .env("NO_COLOR", "1")
        .output()
        .expect("troupe-node runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn keys(store: &Path) -> Vec<String> {
    DurableStore::open_existing(store).unwrap().keys().unwrap()
}

#[test]
fn refuses_while_the_node_runs_and_removes_once_it_has_stopped() {
    let dir = TempDir(std::env::temp_dir().join(format!(
        "troupe-remove-sharding-data-{}",
        std::process::id()
    )));
    let data = dir.0.join("node");
    let store = data.join("ddata.redb");
    seed(&store);

    // A node of its own cluster (troupe-node needs something to join).
    let port = support::free_port();
    let args = [
        "--http".to_string(),
        "127.0.0.1:0".to_string(),
        "--data-dir".to_string(),
        data.display().to_string(),
        "--seed-nodes".to_string(),
        format!("troupe://troupe@127.0.0.1:{port}"),
    ];
    let mut node = Node::spawn(port, &args, &[], "remove-sharding-data");
    // Logged once its replicator has the store open.
    node.wait_for("durable data in");

    let refused = remove(&data, "counter,other");
    let stderr = text(&refused.stderr);
    assert!(!refused.status.success(), "it ran beside a node: {stderr}");
    for needle in [
        "refusing to remove sharding data",
        "in use by a running node",
        &store.display().to_string(),
        "stop every node of the cluster",
    ] {
        assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    }
    assert!(
        text(&refused.stdout).is_empty(),
        "{}",
        text(&refused.stdout)
    );
    assert!(
        node.child.try_wait().unwrap().is_none(),
        "the node still runs:\n{}",
        node.log()
    );

    let status = node.terminate();
    assert!(status.success(), "{status}:\n{}", node.log());
    let before = keys(&store);
    for key in REMOVED.iter().chain(&KEPT) {
        assert!(
            before.contains(&key.to_string()),
            "{key} is gone after the refused run: {before:?}"
        );
    }

    let done = remove(&data, "counter,other");
    let stdout = text(&done.stdout);
    assert!(
        done.status.success(),
        "{}: {stdout}{}",
        done.status,
        text(&done.stderr)
    );
    assert!(stdout.contains("counter: removed 4 keys"), "{stdout}");
    assert!(stdout.contains("other: removed 2 keys"), "{stdout}");
    for key in REMOVED {
        assert!(
            stdout.contains(&format!("  removed {key} (")),
            "{key} not reported:\n{stdout}"
        );
    }
    assert!(
        stdout.contains("  removed shard-counter-7-0 (2 remembered entities of shard 7)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("  kept shard-counter-x-5-0 (it belongs to entity type counter-x)"),
        "{stdout}"
    );
    let after = keys(&store);
    for key in REMOVED {
        assert!(
            !after.contains(&key.to_string()),
            "{key} is left: {after:?}"
        );
    }
    for key in KEPT {
        assert!(
            after.contains(&key.to_string()),
            "{key} was removed: {after:?}"
        );
    }
    assert!(
        after
            .iter()
            .all(|k| !k.starts_with("sharding-coordinator-state-counter")
                && !k.starts_with("shard-other-")),
        "{after:?}"
    );

    // No store there: an error, and none is made.
    let empty = dir.0.join("no-node");
    let missing = remove(&empty, "counter");
    assert!(!missing.status.success());
    let stderr = text(&missing.stderr);
    assert!(stderr.contains("there is no durable store at"), "{stderr}");
    assert!(!empty.exists());
}
