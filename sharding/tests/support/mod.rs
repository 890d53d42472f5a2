//! Shared helpers of the sharding tests: a cluster of actor systems in one
//! process on loopback (port 0), a test entity that records what it gets in
//! a probe shared by every node, and waiting on conditions with deadlines.

#![allow(dead_code)]

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, Direction, RemoteSettings};
use troupe_core::rt;
use troupe_sharding::{ClusterSharding, EntityConfig, EntityId, EntityRef, ShardingSettings};

pub const DEADLINE: Duration = Duration::from_secs(40);

/// What every incarnation of every test entity reports.
#[derive(Default)]
pub struct Probe {
    inner: Mutex<ProbeState>,
}

#[derive(Default)]
pub struct ProbeState {
    /// Live incarnations per entity.
    pub alive: HashMap<String, usize>,
    /// Most live incarnations of one entity ever seen at once.
    pub max_alive: usize,
    /// Per entity, the sequence numbers received, in order.
    pub received: HashMap<String, Vec<u64>>,
    /// Per entity, the nodes where it started, in order.
    pub started_on: HashMap<String, Vec<String>>,
    /// Per entity, when each incarnation started.
    pub started_at: HashMap<String, Vec<Instant>>,
    /// Live incarnations per (entity, node), crashed nodes included.
    pub alive_on: HashMap<(String, String), usize>,
    /// Nodes treated as crashed (see [`Probe::crashed`]).
    pub crashed: HashSet<String>,
}

impl Probe {
    pub fn state<R>(&self, f: impl FnOnce(&ProbeState) -> R) -> R {
        f(&self.inner.lock().unwrap())
    }

    /// Treats `node` as crashed from now on (it was cut off from the
    /// others): its entities no longer count as alive, whether or not
    /// they stop later, so `max_alive` checks that the rest of the
    /// cluster never runs two incarnations of one entity at once.
    pub fn crashed(&self, node: &str) {
        let mut p = self.inner.lock().unwrap();
        if !p.crashed.insert(node.to_string()) {
            return;
        }
        let on_node: Vec<(String, usize)> = p
            .alive_on
            .iter()
            .filter(|((_, n), _)| n == node)
            .map(|((e, _), c)| (e.clone(), *c))
            .collect();
        for (e, c) in on_node {
            if let Some(n) = p.alive.get_mut(&e) {
                *n -= c;
            }
        }
    }

    /// Entities alive now (on nodes that did not crash).
    pub fn alive_entities(&self) -> BTreeSet<String> {
        self.state(|p| {
            p.alive
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(e, _)| e.clone())
                .collect()
        })
    }

    /// How many incarnations of entity `id` have started.
    pub fn starts(&self, id: &str) -> usize {
        self.state(|p| p.started_on.get(id).map_or(0, Vec::len))
    }

    /// Incarnations alive now (on nodes that did not crash).
    pub fn alive_count(&self) -> usize {
        self.state(|p| p.alive.values().sum())
    }

    /// The numbered messages entity `id` received.
    pub fn received(&self, id: &str) -> Vec<u64> {
        self.state(|p| p.received.get(id).cloned().unwrap_or_default())
    }
}

/// The test entity: counts, and records every numbered message.
pub struct Counter {
    pub id: EntityId,
    pub node: String,
    pub value: i64,
    pub probe: Arc<Probe>,
}

impl Actor for Counter {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        let mut p = self.probe.inner.lock().unwrap();
        *p.alive_on
            .entry((self.id.to_string(), self.node.clone()))
            .or_default() += 1;
        if !p.crashed.contains(&self.node) {
            let n = p.alive.entry(self.id.to_string()).or_default();
            *n += 1;
            let n = *n;
            p.max_alive = p.max_alive.max(n);
        }
        p.started_on
            .entry(self.id.to_string())
            .or_default()
            .push(self.node.clone());
        p.started_at
            .entry(self.id.to_string())
            .or_default()
            .push(Instant::now());
    }
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        let mut p = self.probe.inner.lock().unwrap();
        if let Some(n) = p
            .alive_on
            .get_mut(&(self.id.to_string(), self.node.clone()))
        {
            *n -= 1;
        }
        if !p.crashed.contains(&self.node) {
            if let Some(n) = p.alive.get_mut(&*self.id) {
                *n -= 1;
            }
        }
    }
}

/// Adds to the counter; replies with the new value.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(reply = i64, name = "test.Add")]
pub struct Add(pub i64);

/// A numbered message (recorded in the probe).
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "test.Seq")]
pub struct Seq(pub u64);

/// Where does the entity run? Replies with its node's address.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(reply = String, name = "test.WhereAreYou")]
pub struct WhereAreYou;

/// The path of the entity's actor (its `ctx.myself()`).
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(reply = String, name = "test.MyPath")]
pub struct MyPath;

/// A message the counter ignores (a hand-off stop message that does not
/// stop it).
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "test.Ignored")]
pub struct Ignored;

/// Asks the counter to passivate itself.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "test.PassivateMe")]
pub struct PassivateMe;

/// Stops the counter after lingering this many milliseconds (a slow stop
/// message).
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "test.Linger")]
pub struct Linger(pub u64);

/// Stops the counter (a hand-off stop message that it obeys).
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "test.StopCounter")]
pub struct StopCounter;

#[troupe_sharding::entity(name = "counter")]
impl Counter {
    async fn add(&mut self, m: Add) -> i64 {
        self.value += m.0;
        self.value
    }

    async fn seq(&mut self, m: Seq) {
        self.probe
            .inner
            .lock()
            .unwrap()
            .received
            .entry(self.id.to_string())
            .or_default()
            .push(m.0);
    }

    async fn where_are_you(&mut self, _m: WhereAreYou) -> String {
        self.node.clone()
    }

    async fn ignored(&mut self, _m: Ignored) {}

    async fn my_path(&mut self, _m: MyPath, ctx: &mut Context<Self>) -> String {
        ctx.myself().path().to_string()
    }

    async fn linger(&mut self, m: Linger, ctx: &mut Context<Self>) {
        rt::sleep(Duration::from_millis(m.0)).await;
        ctx.stop();
    }

    async fn passivate_me(&mut self, _m: PassivateMe, ctx: &mut Context<Self>) {
        troupe_sharding::EntityContext::passivate(ctx);
    }

    async fn stop_counter(&mut self, _m: StopCounter, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

pub struct Node {
    pub system: ActorSystem,
    pub cluster: Cluster,
    pub sharding: ClusterSharding,
}

impl Node {
    pub fn address(&self) -> Address {
        self.cluster.self_address().clone()
    }

    /// The node's name as the counters report it (`WhereAreYou`,
    /// `started_on`).
    pub fn name(&self) -> String {
        self.cluster.self_address().to_string()
    }

    /// Starts the counter entity type here.
    pub fn start_counter(&self, probe: &Arc<Probe>, settings: ShardingSettings) {
        self.start_counter_with(counter_config(self, probe), settings);
    }

    /// Starts the counter entity type here with `config`.
    pub fn start_counter_with(&self, config: EntityConfig<Counter>, settings: ShardingSettings) {
        self.sharding.start_entity(config, settings).unwrap();
    }

    /// A reference to counter `id`, from this node.
    pub fn counter(&self, id: impl Into<EntityId>) -> EntityRef<Counter> {
        self.sharding.entity_ref::<Counter>(id).unwrap()
    }

    /// The shards this node's region hosts.
    pub async fn hosted_shards(&self) -> BTreeSet<String> {
        self.sharding
            .region_state::<Counter>()
            .await
            .unwrap()
            .shards
            .into_iter()
            .map(|s| s.shard_id)
            .collect()
    }

    /// Blackholes all traffic between this node and `other`, both ways, on
    /// both sides.
    pub fn blackhole(&self, other: &Node) {
        let mine = self.system.remoting().unwrap().fault_injector().unwrap();
        mine.blackhole(&other.address(), Direction::Both);
        let theirs = other.system.remoting().unwrap().fault_injector().unwrap();
        theirs.blackhole(&self.address(), Direction::Both);
    }
}

/// Cuts `victim` off from every one of `others`, both ways (as if it
/// crashed, while it keeps running).
pub fn cut_off(victim: &Node, others: &[&Node]) {
    for o in others {
        victim.blackhole(o);
    }
}

/// How counters of `node` are made: reporting into `probe`.
pub fn counter_config(node: &Node, probe: &Arc<Probe>) -> EntityConfig<Counter> {
    let p = probe.clone();
    let name = node.name();
    EntityConfig::new(move |id| Counter {
        id,
        node: name.clone(),
        value: 0,
        probe: p.clone(),
    })
}

pub fn cluster_settings(seeds: &[Address]) -> ClusterSettings {
    let mut s = ClusterSettings {
        seed_nodes: seeds.to_vec(),
        gossip_interval: Duration::from_millis(300),
        leader_actions_interval: Duration::from_millis(200),
        unreachable_nodes_reaper_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(200),
        seed_node_timeout: Duration::from_millis(1500),
        ..ClusterSettings::default()
    };
    s.failure_detector.acceptable_heartbeat_pause = Duration::from_millis(1000);
    s.failure_detector.first_heartbeat_estimate = Duration::from_millis(200);
    s.downing.stable_after = Duration::from_millis(1500);
    s.downing.down_all_when_unstable = None;
    s
}

/// Fast settings for tests.
pub fn sharding_settings() -> ShardingSettings {
    ShardingSettings {
        number_of_shards: 30,
        retry_interval: Duration::from_millis(200),
        rebalance_interval: Duration::from_millis(500),
        handoff_timeout: Duration::from_secs(5),
        shard_start_timeout: Duration::from_secs(2),
        waiting_for_state_timeout: Duration::from_millis(500),
        updating_state_timeout: Duration::from_secs(2),
        ..ShardingSettings::default()
    }
}

/// A new actor system with remoting on loopback.
pub fn system() -> ActorSystem {
    ActorSystem::builder("shard")
        .remote(
            RemoteSettings::new("127.0.0.1:0")
                .with_secret("sharding-test")
                .with_fault_injection(),
        )
        .build()
        .unwrap()
}

/// A node that joins `seed` (or forms a cluster of its own when `None`)
/// with the test cluster settings changed by `tweak`, and has sharding but
/// no entity type started yet.
pub fn bare_node(seed: Option<&Address>, tweak: impl FnOnce(&mut ClusterSettings)) -> Node {
    node_with(seed, tweak, None)
}

/// A node as [`bare_node`] makes it, with its replicator started with
/// `replicator` when given.
fn node_with(
    seed: Option<&Address>,
    tweak: impl FnOnce(&mut ClusterSettings),
    replicator: Option<troupe_cluster::ddata::ReplicatorSettings>,
) -> Node {
    let system = system();
    let seeds = vec![seed
        .cloned()
        .unwrap_or_else(|| system.remoting().unwrap().address().clone())];
    let mut settings = cluster_settings(&seeds);
    tweak(&mut settings);
    let cluster = Cluster::start(&system, settings).unwrap();
    if let Some(r) = replicator {
        troupe_cluster::ddata::Replicator::start(&system, &cluster, r).unwrap();
    }
    let sharding = ClusterSharding::new(&system, &cluster).unwrap();
    Node {
        system,
        cluster,
        sharding,
    }
}

/// Starts a node that joins `seeds` and runs the counter entity.
pub fn start_node(seeds: &[Address], probe: &Arc<Probe>, settings: ShardingSettings) -> Node {
    start_node_on(system(), seeds, probe, settings, cluster_settings(seeds))
}

pub fn start_node_on(
    system: ActorSystem,
    _seeds: &[Address],
    probe: &Arc<Probe>,
    settings: ShardingSettings,
    cluster_settings: ClusterSettings,
) -> Node {
    let cluster = Cluster::start(&system, cluster_settings).unwrap();
    let sharding = ClusterSharding::new(&system, &cluster).unwrap();
    let node = Node {
        system,
        cluster,
        sharding,
    };
    node.start_counter(probe, settings);
    node
}

/// `n` nodes; the first is the seed.
pub fn start_nodes(n: usize, probe: &Arc<Probe>, settings: ShardingSettings) -> Vec<Node> {
    start_nodes_with(n, probe, settings, |_| {})
}

/// `n` nodes with the cluster settings changed by `tweak`; the first is
/// the seed (and so the oldest).
pub fn start_nodes_with(
    n: usize,
    probe: &Arc<Probe>,
    settings: ShardingSettings,
    tweak: impl Fn(&mut ClusterSettings),
) -> Vec<Node> {
    let first = bare_node(None, &tweak);
    first.start_counter(probe, settings.clone());
    let seed = first.address();
    let mut nodes = vec![first];
    for _ in 1..n {
        let node = bare_node(Some(&seed), &tweak);
        node.start_counter(probe, settings.clone());
        nodes.push(node);
    }
    nodes
}

/// A node whose replicator keeps sharding's keys (`shard-*`) in a durable
/// store at `store`, joining `seed` (or forming a cluster when `None`),
/// with the test cluster settings changed by `tweak`.
pub fn durable_node(
    seed: Option<&Address>,
    store: &std::path::Path,
    tweak: impl FnOnce(&mut ClusterSettings),
) -> Node {
    let replicator = troupe_cluster::ddata::ReplicatorSettings {
        durable_keys: vec!["shard-*".to_string()],
        durable_store: store.to_path_buf(),
        gossip_interval: Duration::from_millis(300),
        ..Default::default()
    };
    node_with(seed, tweak, Some(replicator))
}

/// A fresh directory under the system's temporary directory.
pub fn temp_dir(tag: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "troupe-sharding-{}-{tag}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Stops the nodes at the end of a test, abruptly (`terminate`): a
/// graceful `shutdown` would leave the cluster first, which waits out its
/// phase timeouts on a node that a test cut off. The tests of graceful
/// shutdown call it themselves.
pub async fn shutdown_all(nodes: impl IntoIterator<Item = Node>) {
    for n in nodes {
        n.system.terminate().await;
    }
}

pub async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < DEADLINE,
            "not within {DEADLINE:?}: {what}"
        );
        rt::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until every one of `nodes` sees exactly the members `expected`,
/// all Up.
pub async fn members_are(nodes: &[&Node], expected: &[&Node]) {
    let want: BTreeSet<Address> = expected.iter().map(|n| n.address()).collect();
    eventually(
        "the members are exactly the expected ones, all Up",
        async || {
            for node in nodes {
                let Ok(s) = node.cluster.state().await else {
                    return false;
                };
                let have: BTreeSet<Address> =
                    s.members.iter().map(|m| m.node.address.clone()).collect();
                if have != want || s.members.iter().any(|m| m.status != MemberStatus::Up) {
                    return false;
                }
            }
            true
        },
    )
    .await;
}

/// The index in `nodes` of the oldest member (where the coordinator
/// runs), as `nodes[0]` sees it.
pub async fn oldest(nodes: &[&Node]) -> usize {
    let s = nodes[0].cluster.state().await.unwrap();
    let oldest = s.oldest.expect("an oldest member");
    nodes
        .iter()
        .position(|n| *n.cluster.self_node() == oldest)
        .expect("the oldest is one of the nodes")
}

/// Which nodes host each shard, from the region state of every one of
/// `nodes`.
pub async fn shard_homes(nodes: &[&Node]) -> BTreeMap<String, Vec<String>> {
    let mut homes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in nodes {
        for s in n.hosted_shards().await {
            homes.entry(s).or_default().push(n.name());
        }
    }
    homes
}

/// Checks that no shard is hosted by two of `nodes` at once.
pub async fn assert_no_shard_twice(nodes: &[&Node]) -> BTreeMap<String, String> {
    shard_homes(nodes)
        .await
        .into_iter()
        .map(|(shard, on)| {
            assert_eq!(on.len(), 1, "shard {shard} is hosted by {on:?} at once");
            (shard, on.into_iter().next().unwrap())
        })
        .collect()
}

/// Asks `WhereAreYou` until it is answered (each try with a short
/// timeout: messages sent into a crashed node are lost).
pub async fn locate(counter: &EntityRef<Counter>) -> String {
    let start = Instant::now();
    loop {
        match counter
            .ask_timeout(WhereAreYou, Duration::from_secs(1))
            .await
        {
            Ok(node) => return node,
            Err(e) => assert!(
                start.elapsed() < DEADLINE,
                "{counter:?} never answered: {e}"
            ),
        }
    }
}

/// Waits until every one of `nodes` sees `n` members, all Up, and the
/// `Counter` region of each (where started) has registered with the
/// coordinator: a member is Up some time before its region registers, and
/// a coordinator allocates only to registered regions.
pub async fn all_up(nodes: &[&Node], n: usize) {
    eventually("all members Up", async || {
        for node in nodes {
            let Ok(s) = node.cluster.state().await else {
                return false;
            };
            if s.members.len() != n || s.members.iter().any(|m| m.status != MemberStatus::Up) {
                return false;
            }
        }
        true
    })
    .await;
    eventually("every region registered", async || {
        for node in nodes {
            if let Ok(false) = node.sharding.is_registered::<Counter>().await {
                return false;
            }
        }
        true
    })
    .await;
}

/// Shards hosted per node (by address), from each node's region state.
pub async fn shards_per_node(nodes: &[&Node]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for n in nodes {
        let s = n.sharding.region_state::<Counter>().await.unwrap();
        out.insert(n.address().to_string(), s.shards.len());
    }
    out
}

pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}
