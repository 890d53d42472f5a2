//! `remove_internal_sharding_data` on a real redb store, written by a real
//! replicator with durable keys: it refuses while the replicator holds the
//! store, removes one entity type's coordinator state and remembered
//! shards and entities once it has stopped, leaves everything else, and a
//! replicator started again on the store finds exactly what is left.

use std::path::{Path, PathBuf};
use troupe_cluster::ddata::{
    DurableStore, DurableStoreError, GCounter, Key, LWWRegister, ORSet, ReadConsistency,
    Replicator, ReplicatorSettings, WriteConsistency,
};
use troupe_cluster::{Cluster, ClusterSettings};
use troupe_core::prelude::*;
use troupe_core::remote::RemoteSettings;
use troupe_core::rt;
use troupe_sharding::remove_internal_data::{InternalKeyKind, KeptKey, KeptReason, RemovedKey};
use troupe_sharding::{remove_internal_sharding_data, RemoveError};

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        TempDir(std::env::temp_dir().join(format!(
            "troupe-remove-sharding-{tag}-{}-{nanos}",
            std::process::id()
        )))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A node with sharding's keys and the application's durable.
struct Node {
    system: ActorSystem,
    cluster: Cluster,
    replicator: Replicator,
}

fn start_node(store: &Path) -> Node {
    let system = ActorSystem::builder("removal")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("removal-test"))
        .build()
        .unwrap();
    let cluster = Cluster::start(&system, ClusterSettings::default()).unwrap();
    let settings = ReplicatorSettings {
        durable_keys: vec![
            "shard-*".into(),
            "sharding-coordinator-state-*".into(),
            "app-*".into(),
        ],
        durable_store: store.to_path_buf(),
        ..ReplicatorSettings::default()
    };
    let replicator = Replicator::start(&system, &cluster, settings).unwrap();
    Node {
        system,
        cluster,
        replicator,
    }
}

impl Node {
    async fn put_set(&self, key: &str, ids: &[&str]) {
        let me = self.cluster.self_node().clone();
        let ids: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        self.replicator
            .update(
                &Key::<ORSet<String>>::new(key),
                ORSet::new(),
                WriteConsistency::Local,
                move |mut s| {
                    for id in ids {
                        s.add(&me, id);
                    }
                    s
                },
            )
            .await
            .unwrap();
    }

    async fn put_counter(&self, key: &str) {
        let me = self.cluster.self_node().clone();
        self.replicator
            .update(
                &Key::<GCounter>::new(key),
                GCounter::new(),
                WriteConsistency::Local,
                move |mut c| {
                    c.increment(&me, 3);
                    c
                },
            )
            .await
            .unwrap();
    }

    async fn put_state(&self, key: &str) {
        let me = self.cluster.self_node().clone();
        self.replicator
            .update(
                &Key::<LWWRegister<String>>::new(key),
                LWWRegister::new(&me, String::new()),
                WriteConsistency::Local,
                move |mut r| {
                    r.set(&me, r#"{"shards":{"7":"region"}}"#.to_string());
                    r
                },
            )
            .await
            .unwrap();
    }

    async fn set(&self, key: &str) -> Option<Vec<String>> {
        self.replicator
            .get(&Key::<ORSet<String>>::new(key), ReadConsistency::Local)
            .await
            .unwrap()
            .map(|s| s.iter().cloned().collect())
    }
}

/// The keys of type `counter` that the node writes.
const COUNTER_KEYS: [&str; 5] = [
    "shard-counter-12-1",
    "shard-counter-7-0",
    "shard-counter-7-3",
    "shard-counter-all",
    "sharding-coordinator-state-counter",
];

/// Everything else in the store, which must stay.
const OTHER_KEYS: [&str; 6] = [
    "app-orders",
    "shard-counter-9-0",
    "shard-counter-x-3-0",
    "shard-counter-x-all",
    "shard-other-1-2",
    "shard-other-all",
];

async fn write_everything(node: &Node) {
    node.put_state("sharding-coordinator-state-counter").await;
    node.put_set("shard-counter-all", &["7", "12"]).await;
    node.put_set("shard-counter-7-0", &["e1", "e6"]).await;
    node.put_set("shard-counter-7-3", &["e3"]).await;
    node.put_set("shard-counter-12-1", &["e2", "e4", "e5"])
        .await;
    // Another type whose name starts with `counter-`, with its own shards.
    node.put_set("shard-counter-x-all", &["3"]).await;
    node.put_set("shard-counter-x-3-0", &["x1"]).await;
    // Another type, and the application's data.
    node.put_set("shard-other-all", &["1"]).await;
    node.put_set("shard-other-1-2", &["o1"]).await;
    node.put_counter("app-orders").await;
    // Named like a remembered-entities key of `counter`, but a counter.
    node.put_counter("shard-counter-9-0").await;
}

fn stored_keys(store: &Path) -> Vec<String> {
    DurableStore::open_existing(store).unwrap().keys().unwrap()
}

fn sorted(keys: &[&str]) -> Vec<String> {
    let mut k: Vec<String> = keys.iter().map(|s| s.to_string()).collect();
    k.sort();
    k
}

#[test]
fn removes_one_type_s_data_from_a_stopped_node_s_store_and_nothing_else() {
    let dir = TempDir::new("real");
    let store = dir.0.join("ddata.redb");
    rt::block_on(async {
        let node = start_node(&store);
        write_everything(&node).await;

        // Refused while the node runs, naming the store; nothing removed.
        let e = remove_internal_sharding_data(&store, &["counter"]).unwrap_err();
        match &e {
            RemoveError::Store(DurableStoreError::Locked { path }) => assert_eq!(path, &store),
            other => panic!("expected a locked store, got {other:?}"),
        }
        let text = e.to_string();
        assert!(text.contains("refusing"), "{text}");
        assert!(text.contains(&store.display().to_string()), "{text}");
        assert!(text.contains("stop every node"), "{text}");
        node.system.shutdown().await;
    });
    let all: Vec<&str> = COUNTER_KEYS.iter().chain(&OTHER_KEYS).copied().collect();
    assert_eq!(
        stored_keys(&store),
        sorted(&all),
        "the refused run removed nothing"
    );

    let report = remove_internal_sharding_data(&store, &["counter"]).unwrap();
    assert_eq!(report.store, store);
    assert_eq!(report.removed_keys(), 5);
    assert_eq!(report.types.len(), 1);
    let counter = &report.types[0];
    assert_eq!(counter.type_name, "counter");
    let entities = |shard: &str| InternalKeyKind::RememberedEntities {
        shard: shard.to_string(),
    };
    let expected = [
        ("shard-counter-12-1", entities("12"), Some(3)),
        ("shard-counter-7-0", entities("7"), Some(2)),
        ("shard-counter-7-3", entities("7"), Some(1)),
        (
            "shard-counter-all",
            InternalKeyKind::RememberedShards,
            Some(2),
        ),
        (
            "sharding-coordinator-state-counter",
            InternalKeyKind::CoordinatorState,
            None,
        ),
    ];
    let got: Vec<(&str, &InternalKeyKind, Option<usize>)> = counter
        .removed
        .iter()
        .map(|RemovedKey { key, kind, ids, .. }| (key.as_str(), kind, *ids))
        .collect();
    let want: Vec<(&str, &InternalKeyKind, Option<usize>)> =
        expected.iter().map(|(k, kind, n)| (*k, kind, *n)).collect();
    assert_eq!(got, want);
    let kept: Vec<(&str, &KeptReason)> = counter
        .kept
        .iter()
        .map(|KeptKey { key, reason, .. }| (key.as_str(), reason))
        .collect();
    assert_eq!(
        kept,
        [
            (
                "shard-counter-9-0",
                &KeptReason::NotShardingData {
                    stored_type: "GCounter".into()
                }
            ),
            (
                "shard-counter-x-3-0",
                &KeptReason::OtherEntityType {
                    type_name: "counter-x".into()
                }
            ),
        ]
    );
    let printed = report.to_string();
    for line in [
        "removed 5 keys of internal sharding data from",
        "counter: removed 5 keys",
        "  removed shard-counter-all (2 remembered shards)",
        "  removed shard-counter-12-1 (3 remembered entities of shard 12)",
        "  removed shard-counter-7-3 (1 remembered entity of shard 7)",
        "  kept shard-counter-9-0 (it holds a GCounter, not sharding data)",
        "  removed sharding-coordinator-state-counter (coordinator state)",
        "  kept shard-counter-x-3-0 (it belongs to entity type counter-x)",
    ] {
        assert!(printed.contains(line), "{line:?} not in:\n{printed}");
    }
    assert_eq!(stored_keys(&store), sorted(&OTHER_KEYS));

    // A node started again on the store has the rest, and not the
    // removed keys (nor does it bring them back).
    rt::block_on(async {
        let node = start_node(&store);
        for key in COUNTER_KEYS {
            if key.starts_with("shard-") {
                assert_eq!(node.set(key).await, None, "{key} is back");
            }
        }
        let state = node
            .replicator
            .get(
                &Key::<LWWRegister<String>>::new("sharding-coordinator-state-counter"),
                ReadConsistency::Local,
            )
            .await
            .unwrap();
        assert!(state.is_none(), "the coordinator state is back");
        assert_eq!(
            node.set("shard-counter-x-3-0").await,
            Some(vec!["x1".into()])
        );
        assert_eq!(node.set("shard-other-all").await, Some(vec!["1".into()]));
        let orders = node
            .replicator
            .get(&Key::<GCounter>::new("app-orders"), ReadConsistency::Local)
            .await
            .unwrap()
            .expect("application data kept");
        assert_eq!(orders.value(), 3);
        node.system.shutdown().await;
    });

    // Again: nothing left to remove, and the other types in one run.
    let report = remove_internal_sharding_data(&store, &["counter", "other", "counter"]).unwrap();
    let names: Vec<&str> = report.types.iter().map(|t| t.type_name.as_str()).collect();
    assert_eq!(names, ["counter", "other"]);
    assert!(report.types[0].removed.is_empty());
    assert_eq!(report.types[1].removed.len(), 2);
    assert!(report.to_string().contains("counter: nothing to remove"));
    assert_eq!(
        stored_keys(&store),
        sorted(&[
            "app-orders",
            "shard-counter-9-0",
            "shard-counter-x-3-0",
            "shard-counter-x-all"
        ])
    );
}

#[test]
fn a_missing_store_is_an_error_and_is_not_created() {
    let dir = TempDir::new("missing");
    let store = dir.0.join("ddata.redb");
    let e = remove_internal_sharding_data(&store, &["counter"]).unwrap_err();
    match &e {
        RemoveError::Store(DurableStoreError::NotFound { path }) => assert_eq!(path, &store),
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert!(e.to_string().contains(&store.display().to_string()), "{e}");
    assert!(!dir.0.exists(), "nothing is created");
    // Names are checked before the store is looked at.
    assert!(matches!(
        remove_internal_sharding_data(&store, &[]),
        Err(RemoveError::NoEntityTypes)
    ));
    assert!(matches!(
        remove_internal_sharding_data(&store, &["a/b"]),
        Err(RemoveError::InvalidEntityType { .. })
    ));
}

#[test]
fn damaged_data_is_removed_too() {
    let dir = TempDir::new("damaged");
    let store = dir.0.join("ddata.redb");
    rt::block_on(async {
        let node = start_node(&store);
        node.put_set("shard-broken-all", &["1"]).await;
        // Counters stored under the names of sharding's data types: what a
        // damaged or foreign value looks like to the tool.
        node.replicator.register_type::<GCounter>("ORSet<String>");
        node.put_counter("shard-broken-1-0").await;
        node.replicator
            .register_type::<GCounter>("LWWRegister<String>");
        node.put_counter("sharding-coordinator-state-broken").await;
        node.system.shutdown().await;
    });
    let db = DurableStore::open_existing(&store).unwrap();
    assert!(matches!(
        db.get::<ORSet<String>>("shard-broken-1-0"),
        Err(DurableStoreError::Decode { .. })
    ));
    drop(db);

    let report = remove_internal_sharding_data(&store, &["broken"]).unwrap();
    let removed: Vec<(&str, Option<usize>)> = report.types[0]
        .removed
        .iter()
        .map(|r| (r.key.as_str(), r.ids))
        .collect();
    assert_eq!(
        removed,
        [
            ("shard-broken-1-0", None),
            ("shard-broken-all", Some(1)),
            ("sharding-coordinator-state-broken", None),
        ]
    );
    let printed = report.to_string();
    assert!(
        printed.contains("  removed shard-broken-1-0 (remembered entities of shard 1, unreadable)"),
        "{printed}"
    );
    assert!(
        printed.contains("  removed shard-broken-all (1 remembered shard)"),
        "{printed}"
    );
    assert!(stored_keys(&store).is_empty());
}
