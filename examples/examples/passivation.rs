//! Passivation and remembered entities, step by step: idle entities
//! stopped after a timeout, an entity that passivates itself, an
//! active-entity limit that keeps memory flat under a stream of new
//! entities, and remembered entities that come back by themselves after
//! their node is killed.
//!
//! Run with `cargo run -p troupe-examples --example passivation`.

#![allow(clippy::print_stdout)] // a tutorial prints what happens

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;
use troupe_sharding::{
    ClusterSharding, EntityContext, EntityId, PassivationSettings, ShardingSettings,
};

// ANCHOR: session
/// Something happened in a session.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(name = "tutorial.Click")]
struct Click;

/// The user logged out: the session has nothing left to do.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(name = "tutorial.Logout")]
struct Logout;

/// A user's session: passivated when idle, or when it says so.
struct Session {
    id: EntityId,
    clicks: u64,
}

impl Actor for Session {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        println!("  session {} starts", self.id);
    }
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        println!("  session {} stops after {} clicks", self.id, self.clicks);
    }
}

#[troupe_sharding::entity(name = "session")]
impl Session {
    async fn click(&mut self, _msg: Click) {
        self.clicks += 1;
    }

    async fn logout(&mut self, _msg: Logout, ctx: &mut Context<Self>) {
        // Explicit passivation: the shard stops this entity; messages
        // that arrive meanwhile start the next incarnation.
        ctx.passivate();
    }
}
// ANCHOR_END: session

/// Visitors are many and short-lived: a stream of new ones.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(name = "tutorial.Visit")]
struct Visit;

/// Live visitors, counted by the entities themselves.
static LIVE_VISITORS: AtomicUsize = AtomicUsize::new(0);

/// One visitor of a web site.
struct Visitor;

impl Actor for Visitor {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        LIVE_VISITORS.fetch_add(1, Ordering::Relaxed);
    }
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        LIVE_VISITORS.fetch_sub(1, Ordering::Relaxed);
    }
}

#[troupe_sharding::entity(name = "visitor")]
impl Visitor {
    async fn visit(&mut self, _msg: Visit) {}
}

/// Turns a device on (it then keeps running: it is remembered).
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(name = "tutorial.TurnOn")]
struct TurnOn;

/// A device that must keep running wherever its shard goes.
struct Device {
    id: EntityId,
    node: String,
}

impl Actor for Device {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        println!("  device {} runs on {}", self.id, self.node);
    }
}

#[troupe_sharding::entity(name = "device")]
impl Device {
    async fn turn_on(&mut self, _msg: TurnOn) {}
}

/// One node: an actor system, its cluster membership, and sharding.
struct Node {
    system: ActorSystem,
    cluster: Cluster,
    sharding: ClusterSharding,
}

/// Starts a node that joins the cluster of `seed` (or forms it).
fn start_node(seed: Option<&Address>) -> Node {
    let system = ActorSystem::builder("site")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("tutorial"))
        .build()
        .expect("an actor system with remoting");
    let me = system.remoting().expect("remoting").address().clone();
    let settings = ClusterSettings {
        seed_nodes: vec![seed.unwrap_or(&me).clone()],
        ..ClusterSettings::default()
    };
    let cluster = Cluster::start(&system, settings).expect("the cluster extension");
    let sharding = ClusterSharding::new(&system, &cluster).expect("sharding");
    Node {
        system,
        cluster,
        sharding,
    }
}

/// Waits until `n` members are Up, as `node` sees them.
async fn wait_until_up(node: &Node, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = node.cluster.state().await {
            let up = s.members.iter().filter(|m| m.status == MemberStatus::Up);
            if up.count() == n && s.members.len() == n {
                return;
            }
        }
        assert!(Instant::now() < deadline, "the cluster did not form");
        rt::sleep(Duration::from_millis(100)).await;
    }
}

/// The resident memory of this process, in MiB (Linux; 0 elsewhere).
fn rss_mib() -> f64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

/// Devices running on `node`.
async fn devices_on(node: &Node) -> BTreeSet<String> {
    let state = node
        .sharding
        .region_state::<Device>()
        .await
        .expect("region state");
    state
        .shards
        .into_iter()
        .flat_map(|s| s.entity_ids)
        .collect()
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    rt::block_on(async {
        let first = start_node(None);
        let seed = first.cluster.self_address().clone();

        // ANCHOR: idle
        println!("1. Sessions are passivated after 2 s without a message.");
        let settings = ShardingSettings {
            passivation: PassivationSettings::idle(Duration::from_secs(2)),
            ..ShardingSettings::default()
        };
        first
            .sharding
            .start::<Session>(|id| Session { id, clicks: 0 }, settings)
            .expect("the session entity type");
        // ANCHOR_END: idle
        let busy = first
            .sharding
            .entity_ref::<Session>("busy")
            .expect("started");
        let quiet = first
            .sharding
            .entity_ref::<Session>("quiet")
            .expect("started");
        quiet.tell(Click).expect("accepted");
        for _ in 0..20 {
            busy.tell(Click).expect("accepted");
            rt::sleep(Duration::from_millis(250)).await;
        }
        println!("  (5 s later: `quiet` was passivated, `busy` still runs)");

        println!("2. A session that logs out passivates itself; a new click starts it again.");
        busy.tell(Logout).expect("accepted");
        busy.tell(Click).expect("accepted"); // waits for the next incarnation
        rt::sleep(Duration::from_millis(500)).await;

        // ANCHOR: limit
        println!("3. At most 2,000 visitors at once, whatever the stream of new ones.");
        let settings = ShardingSettings {
            number_of_shards: 100,
            // Akka's recommended strategy: a limit with W-TinyLFU.
            passivation: PassivationSettings::default_strategy().with_active_entity_limit(2_000),
            ..ShardingSettings::default()
        };
        first
            .sharding
            .start::<Visitor>(|_id| Visitor, settings)
            .expect("the visitor entity type");
        // ANCHOR_END: limit
        for batch in 1..=5 {
            for i in 0..40_000 {
                let id = format!("v-{batch}-{i}");
                let visitor = first.sharding.entity_ref::<Visitor>(id).expect("started");
                visitor.tell(Visit).expect("accepted");
            }
            // Let the batch arrive before measuring.
            let last = first
                .sharding
                .entity_ref::<Visitor>(format!("v-{batch}-39999"))
                .expect("started");
            let _ = last.ask_timeout(Visit, Duration::from_secs(30)).await;
            println!(
                "  {:>7} visitors so far: {:>5} live, RSS {:.0} MiB",
                batch * 40_000,
                LIVE_VISITORS.load(Ordering::Relaxed),
                rss_mib()
            );
        }

        // ANCHOR: remember
        println!("4. Remembered devices come back by themselves when their node is killed.");
        let second = start_node(Some(&seed));
        let third = start_node(Some(&seed));
        wait_until_up(&first, 3).await;
        for node in [&first, &second, &third] {
            let name = node.cluster.self_address().to_string();
            let settings = ShardingSettings {
                number_of_shards: 12,
                remember_entities: true,
                ..ShardingSettings::default()
            };
            node.sharding
                .start::<Device>(
                    move |id| Device {
                        id,
                        node: name.clone(),
                    },
                    settings,
                )
                .expect("the device entity type");
        }
        // ANCHOR_END: remember
        for i in 1..=8 {
            let device = first
                .sharding
                .entity_ref::<Device>(format!("dev-{i}"))
                .expect("started");
            let _ = device.ask_timeout(TurnOn, Duration::from_secs(30)).await;
        }
        let on_third = devices_on(&third).await;
        println!(
            "  the third node runs {} devices; it is killed (no leave) and downed",
            on_third.len()
        );
        let third_address = third.cluster.self_address().clone();
        third.system.terminate().await;
        first.cluster.down(&third_address);
        // Nobody sends them anything: the coordinator allocates their
        // shards again and the shards start their remembered entities.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut running = devices_on(&first).await;
            running.extend(devices_on(&second).await);
            if on_third.is_subset(&running) || Instant::now() > deadline {
                println!("  {} devices run on the two remaining nodes", running.len());
                break;
            }
            rt::sleep(Duration::from_millis(200)).await;
        }

        second.system.shutdown().await;
        first.system.shutdown().await;
        println!("Done.");
    });
}
