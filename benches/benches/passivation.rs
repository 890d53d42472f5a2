//! Cluster sharding: passivation under an active-entity limit and
//! remembered entities.
//!
//! ```sh
//! cargo bench --manifest-path benches/Cargo.toml --bench passivation
//! cargo bench --manifest-path benches/Cargo.toml --bench passivation -- quick   # a tenth
//! cargo bench --manifest-path benches/Cargo.toml --bench passivation -- zipf    # one part:
//!                                                       # stream, zipf or remember
//! ```
//!
//! Every part runs in a fresh child process (this program run again with
//! `child PART ARGS...`), so that each resident-set figure starts from an
//! empty heap; the parent prints the tables at the end. See BENCHMARKS.md,
//! "Passivation and remembered entities".
//!
//! 1. Bounded memory: one node, 1,000 shards (every shard allocated before
//!    timing), a stream of distinct entities each sent one small message:
//!    5,000,000 under an active-entity limit of 100,000 with the least
//!    recently used policy, 2,000,000 with the default composite strategy
//!    (W-TinyLFU), 500,000 without passivation. Every 500,000 entities,
//!    once the entities sent so far have their message: the resident set,
//!    the bytes malloc'd and the live entities (`started` minus `stopped`).
//!    The rate is that of the whole stream in new entities per second: the
//!    clock stops when every entity has received its message. The sender
//!    keeps at most `WINDOW` messages unreceived, so that memory measures
//!    entities, not a queue.
//! 2. Miss rate on a Zipf trace: 1,000,000 ids, exponent 0.95, 1,000,000
//!    accesses drawn with a seeded xorshift generator (the same trace for
//!    every run), sent as tells from one sender to one node with an
//!    active-entity limit of 10,000; activations (entity starts) per
//!    access for least recently used, segmented least recently used, least
//!    frequently used and the composite strategy at 100 shards (the limit
//!    is divided over a region's shards), least recently used and composite
//!    also with the sender at most 16 messages ahead (messages to running
//!    entities then go straight to them, and the policy learns of them
//!    through the shard's lossy record of accesses), and at 1,000 shards.
//!    Beside them, the same trace replayed offline through an exact least
//!    recently used cache per shard with the same share (what the least
//!    recently used figure must be if every access reaches the policy),
//!    through one global cache of 10,000, and the compulsory misses.
//! 3. Remembered entities: three nodes in one process, each with its
//!    replicator's `shard-*` keys in a durable store in a temporary
//!    directory; after every shard is allocated (one remembered entity
//!    each), one message to each of 100,000 new ids from one node:
//!    entities started per second until all run. Then all three nodes stop
//!    and three new ones start on the same stores: time from the first new
//!    system until every remembered entity runs again, with no message.
//!
//! For diagnosis: `child remember N memory` runs the start of part 3 with
//! the replicators' data in memory only, and `PASSIVATION_BENCH_REBALANCE_MS`
//! sets the coordinator's `rebalance-interval` (default 10 s) in part 3.

#![allow(clippy::print_stdout)]

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use troupe_cluster::ddata::{Replicator, ReplicatorSettings};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;
use troupe_sharding::{
    stable_hash, ClusterSharding, EntityId, EntityRef, PassivationSettings, ReplacementPolicy,
    ShardingSettings,
};

// ---------------------------------------------------------------------------
// The entity: counts its starts, stops and messages in process-wide counters.

static STARTED: AtomicU64 = AtomicU64::new(0);
static STOPPED: AtomicU64 = AtomicU64::new(0);
static RECEIVED: AtomicU64 = AtomicU64::new(0);

#[derive(Message, Serialize, Deserialize)]
#[message(name = "bench.Touch")]
struct Touch;

/// Zero-sized: what an entity costs is the framework's.
struct Item;

impl Actor for Item {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        STARTED.fetch_add(1, Ordering::Relaxed);
    }
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        STOPPED.fetch_add(1, Ordering::Relaxed);
    }
}

#[troupe_sharding::entity(name = "bench-item")]
impl Item {
    async fn touch(&mut self, _m: Touch) {
        RECEIVED.fetch_add(1, Ordering::Relaxed);
    }
}

fn live() -> u64 {
    STARTED
        .load(Ordering::Relaxed)
        .saturating_sub(STOPPED.load(Ordering::Relaxed))
}

/// CPU time this process has used (user + system), from
/// `/proc/self/stat` (in clock ticks of 10 ms).
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which ends with the last ')').
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of the line, 12 and 13 here.
    (ticks(11) + ticks(12)) / 100.0
}

/// The peak resident set of this process (`VmHWM`), in bytes.
fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Waits until `counter` reaches `want`; false after `limit`. A short
/// wait spins; a longer one sleeps, ever longer (up to 2 ms), so that the
/// waiting thread leaves the two cores to the executor instead of waking
/// up thousands of times a second.
async fn wait_for(counter: &AtomicU64, want: u64, limit: Duration) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    let mut nap = Duration::from_micros(50);
    while counter.load(Ordering::Relaxed) < want {
        if start.elapsed() > limit {
            return false;
        }
        if spins < 64 {
            spins += 1;
            rt::yield_now().await;
        } else {
            rt::sleep(nap).await;
            nap = (nap * 2).min(Duration::from_millis(2));
        }
    }
    true
}

// ---------------------------------------------------------------------------
// Nodes.

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    sharding: ClusterSharding,
}

fn cluster_settings(seed: Address) -> ClusterSettings {
    let mut s = ClusterSettings {
        seed_nodes: vec![seed],
        gossip_interval: Duration::from_millis(300),
        leader_actions_interval: Duration::from_millis(200),
        unreachable_nodes_reaper_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(200),
        seed_node_timeout: Duration::from_millis(1500),
        ..ClusterSettings::default()
    };
    s.failure_detector.acceptable_heartbeat_pause = Duration::from_secs(3);
    s.failure_detector.first_heartbeat_estimate = Duration::from_millis(200);
    s
}

/// A node joining `seed` (or forming a cluster of its own), its
/// replicator's `shard-*` keys kept in `store` when given.
fn node(seed: Option<&Address>, store: Option<&std::path::Path>) -> Node {
    let system = ActorSystem::builder("passivation")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bench"))
        .build()
        .expect("system");
    let me = system.remoting().unwrap().address().clone();
    let cluster =
        Cluster::start(&system, cluster_settings(seed.unwrap_or(&me).clone())).expect("cluster");
    if let Some(store) = store {
        let r = ReplicatorSettings {
            durable_keys: vec!["shard-*".to_string()],
            durable_store: store.to_path_buf(),
            gossip_interval: Duration::from_millis(300),
            ..Default::default()
        };
        Replicator::start(&system, &cluster, r).expect("replicator");
    }
    let sharding = ClusterSharding::new(&system, &cluster).expect("sharding");
    Node {
        system,
        cluster,
        sharding,
    }
}

async fn all_up(nodes: &[&Node], n: usize) {
    loop {
        let mut ok = true;
        for node in nodes {
            match node.cluster.state().await {
                Ok(s) => {
                    ok &= s.members.len() == n
                        && s.members.iter().all(|m| m.status == MemberStatus::Up)
                }
                Err(_) => ok = false,
            }
        }
        if ok {
            return;
        }
        rt::sleep(Duration::from_millis(20)).await;
    }
}

/// One id per shard (`prefix` plus a number), so that a message to each
/// allocates every shard.
fn one_id_per_shard(prefix: &str, shards: u32) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for i in 0.. {
        let id = format!("{prefix}{i}");
        if seen.insert(stable_hash(id.as_bytes()) % u64::from(shards)) {
            out.push(id);
            if out.len() == shards as usize {
                break;
            }
        }
    }
    out
}

/// Allocates every shard (one message to one entity of each) and waits
/// until those entities have their message.
async fn allocate_all_shards(node: &Node, shards: u32) {
    let base = RECEIVED.load(Ordering::Relaxed);
    let ids = one_id_per_shard("warm", shards);
    for id in &ids {
        let r: EntityRef<Item> = node.sharding.entity_ref(id.as_str()).unwrap();
        r.tell(Touch).unwrap();
    }
    assert!(
        wait_for(&RECEIVED, base + ids.len() as u64, Duration::from_secs(60)).await,
        "shards not allocated in 60 s"
    );
    // Every shard now has its share of the limit (sent by the region as it
    // started each one).
    rt::sleep(Duration::from_millis(200)).await;
}

fn passivation(policy: &str, limit: usize) -> PassivationSettings {
    match policy {
        "none" => PassivationSettings::none(),
        "lru" => PassivationSettings::least_recently_used(limit),
        "slru" => PassivationSettings::least_recently_used(limit).with_replacement(
            ReplacementPolicy::LeastRecentlyUsed {
                segmented: vec![0.2, 0.8],
            },
        ),
        "lfu" => PassivationSettings::least_frequently_used(limit),
        "composite" => PassivationSettings::default_strategy().with_active_entity_limit(limit),
        other => panic!("unknown policy {other}"),
    }
}

fn one_node(settings: ShardingSettings) -> Node {
    let n = node(None, None);
    n.sharding
        .start::<Item>(|_id: EntityId| Item, settings)
        .expect("start");
    n
}

// ---------------------------------------------------------------------------
// Part 1: a stream of new entities.

/// Messages sent but not yet received, at most.
const WINDOW: u64 = 100_000;
const CHECKPOINT: u64 = 500_000;
const SHARDS: u32 = 1000;

async fn stream(policy: &str, n: u64, limit: usize) {
    let node = one_node(ShardingSettings {
        number_of_shards: SHARDS,
        passivation: passivation(policy, limit),
        ..ShardingSettings::default()
    });
    all_up(&[&node], 1).await;
    let t_alloc = Instant::now();
    allocate_all_shards(&node, SHARDS).await;
    let alloc = t_alloc.elapsed().as_secs_f64();
    let base = RECEIVED.load(Ordering::Relaxed);
    let rss0 = rss_bytes();
    println!(
        "ROW stream {policy} 0 0.00 {} {} {}",
        rss0 / 1_000_000,
        live(),
        heap_in_use_bytes() / 1_000_000
    );
    let mut refused = 0u64;
    let t0 = Instant::now();
    let cpu0 = cpu_secs();
    let mut max_live = 0;
    for i in 0..n {
        let r: EntityRef<Item> = node.sharding.entity_ref(format!("s{i}")).unwrap();
        if r.tell(Touch).is_err() {
            refused += 1;
        }
        let sent = i + 1;
        if sent % 1000 == 0 && sent > WINDOW {
            wait_for(&RECEIVED, base + sent - WINDOW, Duration::from_secs(600)).await;
            max_live = max_live.max(live());
        }
        if sent % CHECKPOINT == 0 || sent == n {
            wait_for(&RECEIVED, base + sent - refused, Duration::from_secs(600)).await;
            let now = t0.elapsed().as_secs_f64();
            max_live = max_live.max(live());
            println!(
                "ROW stream {policy} {sent} {now:.2} {} {} {}",
                rss_bytes() / 1_000_000,
                live(),
                heap_in_use_bytes() / 1_000_000
            );
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu0;
    // Passivations still under way settle.
    rt::sleep(Duration::from_millis(500)).await;
    println!(
        "RESULT stream {policy} n={n} limit={limit} secs={secs:.3} rate={:.0} rss_start_mb={} \
         rss_end_mb={} rss_peak_mb={} live_end={} max_live={max_live} refused={refused} starts={} \
         cpu_us_per_entity={:.2} allocate_shards_secs={alloc:.2}",
        n as f64 / secs,
        rss0 / 1_000_000,
        rss_bytes() / 1_000_000,
        peak_rss_bytes() / 1_000_000,
        live(),
        STARTED.load(Ordering::Relaxed),
        cpu * 1e6 / n as f64
    );
    node.system.terminate().await;
}

// ---------------------------------------------------------------------------
// Part 2: a Zipf trace.

/// xorshift64*: small, seeded, deterministic.
struct XorShift(u64);

impl XorShift {
    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// In [0, 1).
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `len` draws of ranks 0..ids with P(k) proportional to 1/(k+1)^s, by
/// inverse CDF (binary search in the cumulative weights).
fn zipf_trace(ids: usize, s: f64, len: usize, seed: u64) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(ids);
    let mut sum = 0.0;
    for k in 0..ids {
        sum += 1.0 / ((k + 1) as f64).powf(s);
        cdf.push(sum);
    }
    let mut rng = XorShift(seed);
    (0..len)
        .map(|_| {
            let u = rng.next_f64() * sum;
            cdf.partition_point(|c| *c < u).min(ids - 1) as u32
        })
        .collect()
}

fn zipf_id(rank: u32) -> String {
    format!("z{rank}")
}

/// Misses of an exact least-recently-used cache of `cap` entries per
/// shard (`shards` shards, ids placed as the bench's shard-id extractor
/// places them).
fn simulate_lru(trace: &[u32], shards: u32, cap: usize) -> u64 {
    struct Lru {
        stamp: HashMap<u32, u64>,
        order: BTreeMap<u64, u32>,
    }
    let cap = cap.max(1);
    let mut caches: HashMap<u64, Lru> = HashMap::new();
    let mut misses = 0;
    for (t, &id) in trace.iter().enumerate() {
        let shard = stable_hash(zipf_id(id).as_bytes()) % u64::from(shards);
        let c = caches.entry(shard).or_insert_with(|| Lru {
            stamp: HashMap::new(),
            order: BTreeMap::new(),
        });
        let t = t as u64;
        match c.stamp.insert(id, t) {
            Some(old) => {
                c.order.remove(&old);
            }
            None => {
                misses += 1;
                if c.stamp.len() > cap {
                    let (&oldest, &victim) = c.order.iter().next().unwrap();
                    c.order.remove(&oldest);
                    c.stamp.remove(&victim);
                }
            }
        }
        c.order.insert(t, id);
    }
    misses
}

const ZIPF_IDS: usize = 1_000_000;
const ZIPF_EXPONENT: f64 = 0.95;
const ZIPF_LIMIT: usize = 10_000;
const ZIPF_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

async fn zipf(policy: &str, shards: u32, accesses: usize, window: u64) {
    let trace = zipf_trace(ZIPF_IDS, ZIPF_EXPONENT, accesses, ZIPF_SEED);
    let node = one_node(ShardingSettings {
        number_of_shards: shards,
        passivation: passivation(policy, ZIPF_LIMIT),
        ..ShardingSettings::default()
    });
    all_up(&[&node], 1).await;
    allocate_all_shards(&node, shards).await;
    let base_received = RECEIVED.load(Ordering::Relaxed);
    let base_started = STARTED.load(Ordering::Relaxed);
    let stats0 = node.sharding.routing_stats::<Item>().unwrap();
    let t0 = Instant::now();
    let mut refused = 0u64;
    for (i, &rank) in trace.iter().enumerate() {
        let r: EntityRef<Item> = node.sharding.entity_ref(zipf_id(rank)).unwrap();
        if r.tell(Touch).is_err() {
            refused += 1;
        }
        let sent = i as u64 + 1;
        if sent.is_multiple_of(window.clamp(1, 1000)) && sent > window {
            wait_for(
                &RECEIVED,
                base_received + sent - window,
                Duration::from_secs(600),
            )
            .await;
        }
    }
    let n = accesses as u64;
    assert!(
        wait_for(
            &RECEIVED,
            base_received + n - refused,
            Duration::from_secs(600)
        )
        .await,
        "the trace was not received"
    );
    let secs = t0.elapsed().as_secs_f64();
    let activations = STARTED.load(Ordering::Relaxed) - base_started;
    let stats = node.sharding.routing_stats::<Item>().unwrap();
    println!(
        "RESULT zipf {policy} shards={shards} window={window} accesses={n} activations={activations} \
         miss={:.4} secs={secs:.2} rate={:.0} via_region={} refused={refused} live={}",
        activations as f64 / n as f64,
        n as f64 / secs,
        stats.via_region - stats0.via_region,
        live()
    );
    node.system.terminate().await;
}

/// The offline figures of the trace (no actors).
fn zipf_offline(accesses: usize) {
    let trace = zipf_trace(ZIPF_IDS, ZIPF_EXPONENT, accesses, ZIPF_SEED);
    let distinct = trace.iter().collect::<HashSet<_>>().len() as f64;
    let n = accesses as f64;
    println!("RESULT zipf-offline compulsory={:.4}", distinct / n);
    let global = simulate_lru(&trace, 1, ZIPF_LIMIT);
    println!(
        "RESULT zipf-offline global_lru={:.4} global_lru_misses={global}",
        global as f64 / n
    );
    for shards in [100u32, 1000] {
        let cap = ZIPF_LIMIT / shards as usize;
        let misses = simulate_lru(&trace, shards, cap);
        println!(
            "RESULT zipf-offline lru_{shards}={:.4} lru_{shards}_misses={misses}",
            misses as f64 / n
        );
    }
}

// ---------------------------------------------------------------------------
// Part 3: remembered entities.

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let dir =
        std::env::temp_dir().join(format!("troupe-bench-{}-{tag}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Marks the start of a phase on stderr, with the wall clock (to line it
/// up with `strace -ttt` or `perf` timestamps).
fn phase(name: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    eprintln!("PHASE {name} {now:.6}");
}

fn remembering() -> ShardingSettings {
    ShardingSettings {
        remember_entities: true,
        // The coordinator allocates (and recovers) shards once all three
        // regions are there, as a real deployment would configure it.
        min_nr_of_members: 3,
        passivation: PassivationSettings::none(),
        retry_interval: Duration::from_millis(500),
        // For diagnosis only: a shorter coordinator tick (see BENCHMARKS.md).
        rebalance_interval: std::env::var("PASSIVATION_BENCH_REBALANCE_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(Duration::from_secs(10), Duration::from_millis),
        ..ShardingSettings::default()
    }
}

/// Three nodes on `stores` (or, `durable` false, with the replicator's
/// data in memory only: for diagnosis).
async fn start_cluster(stores: &[std::path::PathBuf], durable: bool) -> Vec<Node> {
    let first = node(None, durable.then_some(stores[0].as_path()));
    first
        .sharding
        .start::<Item>(|_id: EntityId| Item, remembering())
        .expect("start");
    let seed = first.cluster.self_address().clone();
    let mut nodes = vec![first];
    for store in &stores[1..] {
        let n = node(Some(&seed), durable.then_some(store.as_path()));
        n.sharding
            .start::<Item>(|_id: EntityId| Item, remembering())
            .expect("start");
        nodes.push(n);
    }
    nodes
}

async fn shutdown_all(nodes: Vec<Node>) {
    let handles: Vec<_> = nodes
        .into_iter()
        .map(|n| rt::spawn(async move { n.system.terminate().await }))
        .collect();
    for h in handles {
        h.await;
    }
}

async fn remember(n: u64, durable: bool) {
    let dirs: Vec<_> = (0..3).map(|i| temp_dir(&format!("remember-{i}"))).collect();
    let stores: Vec<_> = dirs.iter().map(|d| d.join("ddata.redb")).collect();
    let t_cluster = Instant::now();
    let nodes = start_cluster(&stores, durable).await;
    let refs: Vec<&Node> = nodes.iter().collect();
    all_up(&refs, 3).await;
    let up = t_cluster.elapsed().as_secs_f64();
    phase("warm");
    let t_warm = Instant::now();
    allocate_all_shards(&nodes[0], SHARDS).await;
    let warm = t_warm.elapsed().as_secs_f64();
    let base = STARTED.load(Ordering::Relaxed);
    phase("start");
    let t0 = Instant::now();
    let cpu0 = cpu_secs();
    for i in 0..n {
        let r: EntityRef<Item> = nodes[0].sharding.entity_ref(format!("r{i}")).unwrap();
        r.tell(Touch).unwrap();
    }
    let sent = t0.elapsed().as_secs_f64();
    let all = wait_for(&STARTED, base + n, Duration::from_secs(120)).await;
    let secs = t0.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu0;
    let started = STARTED.load(Ordering::Relaxed) - base;
    println!(
        "RESULT remember-start n={n} started={started} all={all} secs={secs:.3} rate={:.0} \
         send_secs={sent:.3} cluster_up_secs={up:.2} allocate_shards_secs={warm:.2} \
         cpu_busy={:.0}%",
        started as f64 / secs,
        cpu * 100.0 / secs / std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
    );
    if !durable {
        shutdown_all(nodes).await;
        for d in dirs {
            let _ = std::fs::remove_dir_all(d);
        }
        return;
    }
    // Gossip spreads the writes to the third replica of each key.
    phase("gossip");
    rt::sleep(Duration::from_secs(2)).await;
    let remembered = STARTED.load(Ordering::Relaxed) - base + u64::from(SHARDS);
    phase("stop");
    let t_stop = Instant::now();
    shutdown_all(nodes).await;
    let stop = t_stop.elapsed().as_secs_f64();
    let stored: u64 = stores
        .iter()
        .map(|s| std::fs::metadata(s).map(|m| m.len()).unwrap_or(0))
        .sum();

    let base = STARTED.load(Ordering::Relaxed);
    phase("recovery");
    let t1 = Instant::now();
    let nodes = start_cluster(&stores, durable).await;
    let refs: Vec<&Node> = nodes.iter().collect();
    all_up(&refs, 3).await;
    let up = t1.elapsed().as_secs_f64();
    // Progress: when each tenth of the remembered entities ran.
    let mut marks = Vec::new();
    let mut all = true;
    for tenth in 1..=10u64 {
        let want = base + remembered * tenth / 10;
        all = wait_for(&STARTED, want, Duration::from_secs(120)).await;
        if !all {
            break;
        }
        marks.push(format!("{:.2}", t1.elapsed().as_secs_f64()));
    }
    let secs = t1.elapsed().as_secs_f64();
    phase("done");
    println!("ROW recovery-tenths {}", marks.join(" "));
    println!(
        "RESULT remember-recovery remembered={remembered} started={} all={all} secs={secs:.3} \
         cluster_up_secs={up:.2} stop_secs={stop:.2} store_bytes={stored}",
        STARTED.load(Ordering::Relaxed) - base
    );
    shutdown_all(nodes).await;
    for d in dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}

// ---------------------------------------------------------------------------
// The parent: runs the parts in child processes, prints the tables.

fn child(args: &[String]) {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .try_init();
    }
    let num = |i: usize| -> u64 { args[i].parse().expect("a number") };
    rt::block_on(async {
        match args[0].as_str() {
            "stream" => stream(&args[1], num(2), num(3) as usize).await,
            "zipf" => {
                let window = if args.len() > 4 { num(4) } else { WINDOW };
                zipf(&args[1], num(2) as u32, num(3) as usize, window).await
            }
            "zipf-offline" => zipf_offline(num(1) as usize),
            // `remember N memory`: without durable stores (diagnosis).
            "remember" => remember(num(1), args.get(2).map(String::as_str) != Some("memory")).await,
            other => panic!("unknown part {other}"),
        }
    });
}

/// Runs one part; echoes its lines and returns them.
fn run(args: &[String]) -> Vec<String> {
    eprintln!("-- {}", args.join(" "));
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .arg("child")
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut lines = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.expect("read child");
        eprintln!("   {line}");
        lines.push(line);
    }
    let status = child.wait().expect("wait child");
    assert!(status.success(), "child {args:?} failed: {status}");
    lines
}

/// `key=value` fields of a RESULT line.
fn fields(line: &str) -> HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|f| f.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn result(lines: &[String], prefix: &str) -> HashMap<String, String> {
    lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .map(|l| fields(l))
        .unwrap_or_default()
}

fn num_fmt(v: &str) -> String {
    // Thousands separators for integers.
    match v.parse::<u64>() {
        Ok(n) => {
            let s = n.to_string();
            let mut out = String::new();
            for (i, c) in s.chars().enumerate() {
                if i > 0 && (s.len() - i) % 3 == 0 {
                    out.push(',');
                }
                out.push(c);
            }
            out
        }
        Err(_) => v.to_string(),
    }
}

#[path = "support/memory.rs"]
mod memory;
use memory::{heap_in_use_bytes, rss_bytes};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        return child(&args[1..]);
    }
    let quick = args.iter().any(|a| a == "quick");
    let only: Vec<&str> = args
        .iter()
        .filter(|a| ["stream", "zipf", "remember"].contains(&a.as_str()))
        .map(String::as_str)
        .collect();
    let part = |p: &str| only.is_empty() || only.contains(&p);
    let scale = if quick { 10 } else { 1 };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let t_all = Instant::now();

    // Part 1. The composite stream is shorter, to keep the whole run
    // under three minutes on two cores; its resident set has flattened by
    // then.
    let mut streams = Vec::new();
    if part("stream") {
        for (policy, n) in [
            ("lru", 5_000_000),
            ("composite", 2_000_000),
            ("none", 500_000),
        ] {
            let n = (n / scale).to_string();
            streams.push((policy, run(&s(&["stream", policy, &n, "100000"]))));
        }
    }
    // Part 2: through the shard (the sender runs up to `WINDOW` ahead, so
    // every message goes through the region and the shard, which tells
    // the policy), and direct (at most 16 messages unreceived, so that a
    // message to a running entity goes straight to it and reaches the
    // policy through the shard's lossy record of accesses).
    let accesses = (1_000_000 / scale).to_string();
    let window = WINDOW.to_string();
    let mut zipfs = Vec::new();
    let mut offline = HashMap::new();
    if part("zipf") {
        for l in run(&s(&["zipf-offline", &accesses])) {
            for (k, v) in fields(&l) {
                offline.insert(k, v);
            }
        }
        let runs: [(&str, &str, &str); 8] = [
            ("lru", "100", &window),
            ("slru", "100", &window),
            ("lfu", "100", &window),
            ("composite", "100", &window),
            ("lru", "100", "16"),
            ("composite", "100", "16"),
            ("lru", "1000", &window),
            ("composite", "1000", &window),
        ];
        for (policy, shards, w) in runs {
            let out = run(&s(&["zipf", policy, shards, &accesses, w]));
            zipfs.push((policy, shards, result(&out, "RESULT zipf")));
        }
    }
    // Part 3.
    let mut remembered = None;
    if part("remember") {
        let n = (100_000 / scale).to_string();
        remembered = Some(run(&s(&["remember", &n])));
    }

    // Tables.
    println!(
        "\npassivation bench: {} s in all, {} cores",
        t_all.elapsed().as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    if !streams.is_empty() {
        println!(
            "\n1. A stream of new entities, one message each; one node, {SHARDS} shards, \
             active-entity limit 100,000 (none: no limit); at most {} messages unreceived\n",
            num_fmt(&WINDOW.to_string())
        );
        println!("| strategy | entities | RSS MB | malloc'd MB | live entities | elapsed s |");
        println!("|---|---:|---:|---:|---:|---:|");
        for (policy, lines) in &streams {
            for l in lines.iter().filter(|l| l.starts_with("ROW stream")) {
                let f: Vec<&str> = l.split_whitespace().collect();
                println!(
                    "| {policy} | {} | {} | {} | {} | {} |",
                    num_fmt(f[3]),
                    num_fmt(f[5]),
                    num_fmt(f[7]),
                    num_fmt(f[6]),
                    f[4]
                );
            }
        }
        println!(
            "\n| strategy | entities | time s | new entities/s | CPU µs per entity | RSS start → end (peak) MB | max live | target |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---|");
        for (policy, lines) in &streams {
            let r = result(lines, "RESULT stream");
            println!(
                "| {policy} | {} | {} | {} | {} | {} → {} ({}) | {} | {} |",
                num_fmt(&r["n"]),
                r["secs"],
                num_fmt(&r["rate"]),
                r["cpu_us_per_entity"],
                r["rss_start_mb"],
                r["rss_end_mb"],
                r["rss_peak_mb"],
                num_fmt(&r["max_live"]),
                if *policy == "none" {
                    "(comparison)"
                } else {
                    "RSS flat; >= 300,000/s"
                }
            );
        }
    }
    if !zipfs.is_empty() {
        println!(
            "\n2. Zipf trace: {} ids, exponent {ZIPF_EXPONENT}, {} accesses (seed {ZIPF_SEED:#x}); \
             one node, active-entity limit {}\n",
            num_fmt(&ZIPF_IDS.to_string()),
            num_fmt(&accesses),
            num_fmt(&ZIPF_LIMIT.to_string())
        );
        println!(
            "| policy | shards | per-shard limit | path | activations | miss rate | exact LRU offline | via region | accesses/s |"
        );
        println!("|---|---:|---:|---|---:|---:|---:|---:|---:|");
        for (policy, shards, r) in &zipfs {
            let per = ZIPF_LIMIT / shards.parse::<usize>().unwrap();
            let path = if r["window"] == "16" {
                "direct"
            } else {
                "shard"
            };
            println!(
                "| {policy} | {shards} | {per} | {path} | {} | {} | {} | {} | {} |",
                num_fmt(&r["activations"]),
                r["miss"],
                offline
                    .get(&format!("lru_{shards}"))
                    .map_or("-", String::as_str),
                num_fmt(&r["via_region"]),
                num_fmt(&r["rate"])
            );
        }
        println!(
            "\noffline: compulsory misses (distinct ids / accesses) {}; one global LRU of {} {}; \
             exact LRU per shard: 100 shards {} misses, 1000 shards {}",
            offline.get("compulsory").map_or("-", String::as_str),
            num_fmt(&ZIPF_LIMIT.to_string()),
            offline.get("global_lru").map_or("-", String::as_str),
            num_fmt(offline.get("lru_100_misses").map_or("-", String::as_str)),
            num_fmt(offline.get("lru_1000_misses").map_or("-", String::as_str)),
        );
    }
    if let Some(lines) = remembered {
        let st = result(&lines, "RESULT remember-start");
        let rc = result(&lines, "RESULT remember-recovery");
        let tenths = lines
            .iter()
            .find_map(|l| l.strip_prefix("ROW recovery-tenths "))
            .unwrap_or("-");
        println!(
            "\n3. Remembered entities: three nodes in one process, durable stores, {SHARDS} shards\n"
        );
        println!("| | entities | time s | rate | target |");
        println!("|---|---:|---:|---:|---|");
        println!(
            "| start new remembered entities (CPU {} busy) | {} | {} | {} /s | >= 20,000/s |",
            st["cpu_busy"],
            num_fmt(&st["started"]),
            st["secs"],
            num_fmt(&st["rate"])
        );
        println!(
            "| recovery after a full restart (from the first new system) | {} | {} | | <= 10 s for 100,000 |",
            num_fmt(&rc["started"]),
            rc["secs"]
        );
        println!(
            "\nrecovery: each tenth running at {tenths} s; cluster Up again after {} s.\n\
             Before: cluster Up in {} s, every shard allocated (one remembered entity each) in {} s; \
             stopping the three nodes took {} s; stores {} bytes in all",
            rc["cluster_up_secs"],
            st["cluster_up_secs"],
            st["allocate_shards_secs"],
            rc["stop_secs"],
            num_fmt(&rc["store_bytes"])
        );
    }
}
