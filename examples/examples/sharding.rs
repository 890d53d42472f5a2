//! Cluster sharding, step by step: an entity type, `EntityRef`s, tell and
//! ask, three nodes in one process, and shards moving when a node joins.
//!
//! Run with `cargo run -p troupe-examples --example sharding`.
//!
//! Each node is an actor system with remoting on a loopback port; they
//! form one cluster, exactly as separate processes would.

#![allow(clippy::print_stdout)] // a tutorial prints what happens

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;
use troupe_sharding::{ClusterSharding, EntityId, EntityRef, ShardingSettings};

// ANCHOR: entity
/// Adds to an account's balance; replies with the new balance.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(reply = i64, name = "tutorial.Deposit")]
struct Deposit {
    amount: i64,
}

/// Asks where the account runs (the address of its node).
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(reply = String, name = "tutorial.WhereAreYou")]
struct WhereAreYou;

/// One bank account: an entity, identified by its account number.
struct Account {
    id: EntityId,
    node: String,
    balance: i64,
}

impl Actor for Account {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        println!("  account {} starts on {}", self.id, self.node);
    }
}

#[troupe_sharding::entity(name = "account")]
impl Account {
    async fn deposit(&mut self, msg: Deposit) -> i64 {
        self.balance += msg.amount;
        self.balance
    }

    async fn where_are_you(&mut self, _msg: WhereAreYou) -> String {
        self.node.clone()
    }
}
// ANCHOR_END: entity

/// One node: an actor system, its cluster membership, and sharding.
struct Node {
    system: ActorSystem,
    cluster: Cluster,
    sharding: ClusterSharding,
}

// ANCHOR: start
/// Starts a node that joins the cluster of `seed` (or forms it) and hosts
/// accounts.
fn start_node(seed: Option<&Address>) -> Node {
    let system = ActorSystem::builder("bank")
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
    let node = me.to_string();
    let sharding_settings = ShardingSettings {
        number_of_shards: 12,
        // Rebalance quickly for the tutorial (default 10 s).
        rebalance_interval: Duration::from_secs(1),
        ..ShardingSettings::default()
    };
    sharding
        .start::<Account>(
            move |id| Account {
                id,
                node: node.clone(),
                balance: 0,
            },
            sharding_settings,
        )
        .expect("the account entity type");
    Node {
        system,
        cluster,
        sharding,
    }
}
// ANCHOR_END: start

/// Waits until `n` members are Up.
async fn wait_until_up(node: &Node, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(s) = node.cluster.state().await {
            if s.members
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count()
                == n
            {
                return;
            }
        }
        assert!(Instant::now() < deadline, "the cluster did not form");
        rt::sleep(Duration::from_millis(100)).await;
    }
}

/// How many shards each node hosts.
async fn count_shards(nodes: &[&Node]) -> BTreeMap<String, usize> {
    let mut per_node = BTreeMap::new();
    for n in nodes {
        let state = n
            .sharding
            .region_state::<Account>()
            .await
            .expect("region state");
        per_node.insert(n.cluster.self_address().to_string(), state.shards.len());
    }
    per_node
}

/// Prints how many shards each node hosts.
async fn print_shards(nodes: &[&Node]) {
    for (node, shards) in count_shards(nodes).await {
        println!("  {node} hosts {shards} shards");
    }
}

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    rt::block_on(async {
        println!("1. Two nodes form a cluster.");
        let first = start_node(None);
        let seed = first.cluster.self_address().clone();
        let second = start_node(Some(&seed));
        wait_until_up(&first, 2).await;

        // ANCHOR: refs
        println!("2. Deposits to ten accounts, from the first node.");
        let accounts: Vec<EntityRef<Account>> = (1..=10)
            .map(|i| {
                first
                    .sharding
                    .entity_ref::<Account>(format!("acc-{i}"))
                    .expect("started")
            })
            .collect();
        for a in &accounts {
            a.tell(Deposit { amount: 100 }).expect("accepted"); // fire and forget
        }
        for a in &accounts {
            let balance = a.ask(Deposit { amount: 1 }).await.expect("a reply"); // request/response
            let node = a.ask(WhereAreYou).await.expect("a reply");
            println!("  {a}: balance {balance}, on {node}");
        }
        // ANCHOR_END: refs

        println!("3. The same account, reached from the second node.");
        let same = second
            .sharding
            .entity_ref::<Account>("acc-1")
            .expect("started");
        let balance = same.ask(Deposit { amount: 0 }).await.expect("a reply");
        println!("  {same}: balance {balance}");
        print_shards(&[&first, &second]).await;

        println!("4. A third node joins; the coordinator moves shards to it.");
        let third = start_node(Some(&seed));
        wait_until_up(&first, 3).await;
        // Watch the shards spread until the counts differ by one at most.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut last = BTreeMap::new();
        loop {
            rt::sleep(Duration::from_millis(250)).await;
            let per_node = count_shards(&[&first, &second, &third]).await;
            if per_node != last {
                for (node, shards) in &per_node {
                    println!("  {node} hosts {shards} shards");
                }
                println!("  ...");
                last = per_node.clone();
            }
            let (min, max) = (per_node.values().min(), per_node.values().max());
            if matches!((min, max), (Some(a), Some(b)) if *a > 0 && b - a <= 1)
                || Instant::now() > deadline
            {
                break;
            }
        }

        println!("5. Every account answers wherever it lives now.");
        for a in &accounts {
            let node = a.ask(WhereAreYou).await.expect("a reply");
            println!("  {a} is on {node}");
        }

        println!("6. The third node leaves gracefully: its shards are handed off first.");
        third
            .cluster
            .coordinated_shutdown()
            .run(troupe_cluster::coordinated_shutdown::Reason::Unknown)
            .await;
        for a in &accounts {
            let node = a.ask(WhereAreYou).await.expect("a reply");
            println!("  {a} is on {node}");
        }
        print_shards(&[&first, &second]).await;

        second.system.shutdown().await;
        first.system.shutdown().await;
        println!("Done.");
    });
}
