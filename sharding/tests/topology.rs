//! Where shards may live and how they are found, as in Pekko's multi-node
//! specs (here several actor systems in one process, on loopback):
//! proxy-only regions and role partitioning (`ClusterShardingSpec`,
//! `ClusterShardingRolePartitioningSpec`), `min-nr-of-members`
//! (`ClusterShardingMinMembersSpec`), a custom allocation strategy
//! (`ClusterShardingCustomShardAllocationSpec`), the queries
//! (`ClusterShardingGetStatsSpec`, `ClusterShardingQueriesSpec`), and a
//! full buffer while no shard can be allocated, and a full queue to the
//! node that hosts a shard.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;
use troupe_cluster::DowningStrategy;
use troupe_core::remote::Address;
use troupe_core::{rt, AskError};
use troupe_sharding::{
    ClusterView, EntityConfig, EntityRef, RegionId, ShardAllocationStrategy, ShardAllocations,
    ShardId, ShardingSettings, ShardingTellError,
};

const ASK: Duration = Duration::from_secs(10);

#[test]
fn a_proxy_only_node_hosts_nothing_and_reaches_every_entity() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = sharding_settings();
        let mut nodes = start_nodes(2, &probe, settings.clone());
        let proxy = bare_node(Some(&nodes[0].address()), |_| {});
        proxy
            .sharding
            .start_proxy::<Counter>(settings.clone())
            .unwrap();
        assert!(proxy.sharding.is_proxy_only::<Counter>().unwrap());
        assert!(!nodes[0].sharding.is_proxy_only::<Counter>().unwrap());
        nodes.push(proxy);
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 3).await;
        let hosts: BTreeSet<String> = nodes[..2].iter().map(|n| n.name()).collect();
        let proxy = &nodes[2];
        for i in 0..30 {
            let id = format!("p{i}");
            let from_proxy = proxy.counter(id.as_str());
            let at = from_proxy.ask_timeout(WhereAreYou, ASK).await.unwrap();
            assert!(hosts.contains(&at), "{id} runs on {at}, not on a host");
            assert_eq!(from_proxy.ask_timeout(Add(1), ASK).await.unwrap(), 1);
            // The same entity, reached from a hosting node.
            let from_host = nodes[i % 2].counter(id.as_str());
            assert_eq!(from_host.ask_timeout(Add(1), ASK).await.unwrap(), 2);
            assert_eq!(from_proxy.ask_timeout(Add(0), ASK).await.unwrap(), 2);
        }
        assert!(proxy.hosted_shards().await.is_empty());
        let per_node = shards_per_node(&all[..2]).await;
        assert!(
            per_node.values().all(|n| *n > 0),
            "both hosts host shards: {per_node:?}"
        );
        probe.state(|p| {
            assert!(p.started_on.values().flatten().all(|n| hosts.contains(n)));
            assert_eq!(p.max_alive, 1);
        });
        // The cluster's statistics list the two hosts' regions, not the
        // proxy (which has every role, here none).
        let stats = proxy.sharding.cluster_stats::<Counter>(ASK).await.unwrap();
        let regions: BTreeSet<String> = stats.regions.keys().cloned().collect();
        let host_addresses: BTreeSet<String> =
            nodes[..2].iter().map(|n| n.address().to_string()).collect();
        assert_eq!(regions, host_addresses, "{stats:?}");
        assert!(stats.failed.is_empty(), "{stats:?}");
        shutdown_all(nodes).await;
    });
}

#[test]
fn entities_live_only_on_members_with_the_role_and_the_others_are_proxies() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = ShardingSettings {
            role: Some("backend".into()),
            ..sharding_settings()
        };
        // The oldest member (the seed) lacks the role: the coordinator
        // must run on the oldest member that has it.
        let frontend = bare_node(None, |_| {});
        frontend.start_counter(&probe, settings.clone());
        let seed = frontend.address();
        let backend = |_: usize| {
            let n = bare_node(Some(&seed), |s| {
                s.roles.insert("backend".into());
            });
            n.start_counter(&probe, settings.clone());
            n
        };
        let nodes = vec![frontend, backend(1), backend(2)];
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 3).await;
        assert!(nodes[0].sharding.is_proxy_only::<Counter>().unwrap());
        assert!(!nodes[1].sharding.is_proxy_only::<Counter>().unwrap());
        assert!(!nodes[2].sharding.is_proxy_only::<Counter>().unwrap());
        let backends: BTreeSet<String> = nodes[1..].iter().map(|n| n.name()).collect();
        for i in 0..30 {
            let id = format!("r{i}");
            for (k, from) in nodes.iter().enumerate() {
                let c = from.counter(id.as_str());
                let at = c.ask_timeout(WhereAreYou, ASK).await.unwrap();
                assert!(backends.contains(&at), "{id} runs on {at}");
                assert_eq!(c.ask_timeout(Add(1), ASK).await.unwrap(), k as i64 + 1);
            }
        }
        assert!(nodes[0].hosted_shards().await.is_empty());
        let per_node = shards_per_node(&all[1..]).await;
        assert!(
            per_node.values().all(|n| *n > 0),
            "both backends host shards: {per_node:?}"
        );
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(nodes).await;
    });
}

#[test]
fn nothing_is_allocated_before_min_nr_of_members_regions_and_nothing_buffered_is_lost() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = ShardingSettings {
            min_nr_of_members: 3,
            // No rebalancing: the first allocation is what is checked.
            rebalance_interval: Duration::from_secs(60),
            ..sharding_settings()
        };
        let mut nodes = start_nodes(2, &probe, settings.clone());
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 2).await;
        let ids: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
        let refs: Vec<_> = ids.iter().map(|id| nodes[0].counter(id.as_str())).collect();
        for n in 0..20u64 {
            for r in &refs {
                r.tell(Seq(n)).unwrap();
            }
        }
        // Asked before the third region exists; answered once it does.
        let waiting: Vec<_> = refs
            .iter()
            .map(|r| r.ask_timeout(Add(1), Duration::from_secs(30)))
            .collect();
        let early = refs[0]
            .ask_timeout(Add(0), Duration::from_millis(800))
            .await;
        assert!(
            matches!(early, Err(AskError::Timeout(_))),
            "allocated with two members: {early:?}"
        );
        assert!(nodes[0].hosted_shards().await.is_empty());
        assert!(nodes[1].hosted_shards().await.is_empty());

        // A third member that has not started the entity type yet: the
        // cluster has three members, but only two regions (Pekko: the
        // coordinator waits for min-nr-of-members regions).
        let third = bare_node(Some(&nodes[0].address()), |_| {});
        nodes.push(third);
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 3).await;
        let early = refs[1]
            .ask_timeout(Add(0), Duration::from_millis(800))
            .await;
        assert!(
            matches!(early, Err(AskError::Timeout(_))),
            "allocated before the third region registered: {early:?}"
        );
        assert!(nodes[0].hosted_shards().await.is_empty());
        assert!(nodes[1].hosted_shards().await.is_empty());
        assert_eq!(probe.state(|p| p.started_on.len()), 0);

        nodes[2].start_counter(&probe, settings.clone());
        for ask in waiting {
            assert_eq!(ask.await.unwrap(), 1);
        }
        // Everything told before is delivered, once and in order (it was
        // sent before the asks, so it has arrived).
        let want: Vec<u64> = (0..20).collect();
        for id in &ids {
            assert_eq!(probe.received(id), want, "{id}");
        }
        let all: Vec<&Node> = nodes.iter().collect();
        let stats = nodes[0]
            .sharding
            .cluster_stats::<Counter>(Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(stats.regions.len(), 3, "{stats:?}");
        assert!(stats.failed.is_empty());
        let entities: usize = stats.regions.values().flat_map(|r| r.stats.values()).sum();
        assert_eq!(entities, ids.len());
        assert_no_shard_twice(&all).await;
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(nodes).await;
    });
}

/// What the test tells its allocation strategy.
#[derive(Default)]
struct Choice {
    /// Where new shards go (none: "not now").
    node: Mutex<Option<Address>>,
    /// Shards to move at the next rebalance.
    to_move: Mutex<BTreeSet<ShardId>>,
    /// How often the coordinator consulted the strategy on rebalancing
    /// (which it does only while no hand-off runs).
    consulted: AtomicU64,
    /// The consultation that last began a move (0: none yet).
    moved_at: AtomicU64,
}

impl Choice {
    fn choose(&self, node: Option<&Node>) {
        *self.node.lock().unwrap() = node.map(|n| n.address());
    }

    /// True once the hand-offs of the last move have ended, moved or not
    /// (the strategy was consulted again after it).
    fn move_ended(&self) -> bool {
        let moved_at = self.moved_at.load(Ordering::SeqCst);
        moved_at > 0 && self.consulted.load(Ordering::SeqCst) > moved_at
    }
}

/// Puts every shard on one chosen node; "not now" while none is chosen;
/// moves the shards it is told to move.
struct OnChosenNode {
    choice: Arc<Choice>,
}

impl ShardAllocationStrategy for OnChosenNode {
    fn allocate_shard(
        &mut self,
        _requester: &RegionId,
        _shard: &ShardId,
        current: &ShardAllocations,
        _cluster: &ClusterView<'_>,
    ) -> Option<RegionId> {
        let chosen = self.choice.node.lock().unwrap().clone()?;
        current.keys().find(|r| r.address == chosen).cloned()
    }

    fn rebalance(
        &mut self,
        _current: &ShardAllocations,
        in_progress: &BTreeSet<ShardId>,
        _cluster: &ClusterView<'_>,
    ) -> BTreeSet<ShardId> {
        let mut to_move = self.choice.to_move.lock().unwrap();
        let now: BTreeSet<ShardId> = to_move.difference(in_progress).cloned().collect();
        to_move.clear();
        let consultation = self.choice.consulted.fetch_add(1, Ordering::SeqCst) + 1;
        if !now.is_empty() {
            self.choice.moved_at.store(consultation, Ordering::SeqCst);
        }
        now
    }
}

/// The counter entity type's configuration on `node`, with the
/// chosen-allocation strategy.
fn chosen_config(node: &Node, probe: &Arc<Probe>, choice: &Arc<Choice>) -> EntityConfig<Counter> {
    let choice = choice.clone();
    counter_config(node, probe).with_allocation_strategy(move || OnChosenNode {
        choice: choice.clone(),
    })
}

/// Three nodes whose coordinator uses [`OnChosenNode`].
async fn nodes_with_chosen_allocation(
    probe: &Arc<Probe>,
    settings: ShardingSettings,
) -> (Vec<Node>, Arc<Choice>) {
    let choice = Arc::new(Choice::default());
    let start = |node: &Node| {
        node.start_counter_with(chosen_config(node, probe, &choice), settings.clone())
    };
    let first = bare_node(None, |_| {});
    start(&first);
    let seed = first.address();
    let mut nodes = vec![first];
    for _ in 0..2 {
        let n = bare_node(Some(&seed), |_| {});
        start(&n);
        nodes.push(n);
    }
    let all: Vec<&Node> = nodes.iter().collect();
    all_up(&all, 3).await;
    (nodes, choice)
}

#[test]
fn a_custom_allocation_strategy_decides_where_shards_go_and_can_delay_them() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let (nodes, choice) = nodes_with_chosen_allocation(&probe, sharding_settings()).await;
        let all: Vec<&Node> = nodes.iter().collect();

        // Every shard on the second node (not the coordinator's).
        choice.choose(Some(&nodes[1]));
        for i in 0..20 {
            let from = &nodes[i % 3];
            let at = from
                .counter(format!("c{i}"))
                .ask_timeout(WhereAreYou, ASK)
                .await
                .unwrap();
            assert_eq!(at, nodes[1].name(), "c{i}");
        }
        let homes = assert_no_shard_twice(&all).await;
        assert!(homes.values().all(|n| *n == nodes[1].name()), "{homes:?}");

        // No choice: new shards wait (the strategy answers None) ...
        choice.choose(None);
        let fresh: Vec<String> = (0..200)
            .map(|i| format!("d{i}"))
            .filter(|id| {
                let shard = nodes[0].counter(id.as_str()).shard_id().to_string();
                !homes.contains_key(&shard)
            })
            .take(3)
            .collect();
        assert!(!fresh.is_empty(), "some shard is still unallocated");
        let waiting: Vec<_> = fresh
            .iter()
            .map(|id| {
                nodes[2]
                    .counter(id.as_str())
                    .ask_timeout(WhereAreYou, Duration::from_secs(30))
            })
            .collect();
        let early = nodes[0]
            .counter(fresh[0].as_str())
            .ask_timeout(Add(1), Duration::from_millis(800))
            .await;
        assert!(matches!(early, Err(AskError::Timeout(_))), "{early:?}");
        assert_eq!(shard_homes(&all).await.len(), homes.len());
        // ... until the strategy names a home: the third node.
        choice.choose(Some(&nodes[2]));
        for ask in waiting {
            assert_eq!(ask.await.unwrap(), nodes[2].name());
        }
        assert_eq!(
            nodes[0]
                .counter(fresh[0].as_str())
                .ask_timeout(Add(0), ASK)
                .await
                .unwrap(),
            1,
            "the early ask was delivered too (after its timeout)"
        );
        let after = assert_no_shard_twice(&all).await;
        for (shard, node) in &homes {
            assert_eq!(&after[shard], node, "shard {shard} stayed where it was");
        }
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(nodes).await;
    });
}

#[test]
fn region_state_and_cluster_stats_count_entities_and_report_regions_that_do_not_answer() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = ShardingSettings {
            role: Some("shard".into()),
            ..sharding_settings()
        };
        // A controller without the role (a proxy) and three shard nodes;
        // no downing, so that a cut-off node stays a member.
        let no_downing = |s: &mut troupe_cluster::ClusterSettings| {
            s.downing.strategy = DowningStrategy::None;
        };
        let controller = bare_node(None, no_downing);
        controller.start_counter(&probe, settings.clone());
        let seed = controller.address();
        let mut nodes = vec![controller];
        for _ in 0..3 {
            let n = bare_node(Some(&seed), |s| {
                no_downing(s);
                s.roles.insert("shard".into());
            });
            n.start_counter(&probe, settings.clone());
            nodes.push(n);
        }
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 4).await;
        let shard_nodes: BTreeSet<String> =
            nodes[1..].iter().map(|n| n.address().to_string()).collect();

        // Before any entity: three regions, all empty.
        eventually("stats of three empty regions", async || {
            let stats = nodes[0]
                .sharding
                .cluster_stats::<Counter>(Duration::from_secs(5))
                .await
                .unwrap();
            stats.failed.is_empty()
                && stats.regions.keys().cloned().collect::<BTreeSet<_>>() == shard_nodes
                && stats.regions.values().all(|r| r.stats.is_empty())
        })
        .await;

        let ids: BTreeSet<String> = (0..25).map(|i| format!("q{i}")).collect();
        for id in &ids {
            nodes[0]
                .counter(id.as_str())
                .ask_timeout(Add(1), ASK)
                .await
                .unwrap();
        }
        // Region state: each entity once, in the shard its id maps to.
        let mut seen: BTreeMap<String, String> = BTreeMap::new();
        let mut per_region: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for n in &nodes {
            let state = n.sharding.region_state::<Counter>().await.unwrap();
            for shard in &state.shards {
                for e in &shard.entity_ids {
                    assert_eq!(
                        n.counter(e.as_str()).shard_id(),
                        shard.shard_id,
                        "{e} is in its own shard"
                    );
                    assert!(seen.insert(e.clone(), n.name()).is_none(), "{e} runs twice");
                }
            }
            if !state.shards.is_empty() {
                per_region.insert(n.address().to_string(), state.stats().stats);
            }
        }
        assert_eq!(seen.keys().cloned().collect::<BTreeSet<_>>(), ids);
        assert!(nodes[0].hosted_shards().await.is_empty());
        // Cluster stats, asked from any node, agree with the region states.
        for n in &nodes {
            let stats = n
                .sharding
                .cluster_stats::<Counter>(Duration::from_secs(5))
                .await
                .unwrap();
            assert!(stats.failed.is_empty(), "{stats:?}");
            assert_eq!(
                stats.regions.keys().cloned().collect::<BTreeSet<_>>(),
                shard_nodes,
                "only the regions that host shards"
            );
            let total: usize = stats.regions.values().flat_map(|r| r.stats.values()).sum();
            assert_eq!(total, ids.len());
            for (region, counts) in &per_region {
                assert_eq!(&stats.regions[region].stats, counts);
            }
        }

        // A shard node cut off from the controller: a partial result
        // within the timeout, naming it as failed.
        let cut = &nodes[3];
        nodes[0].blackhole(cut);
        let timeout = Duration::from_secs(1);
        let asked = Instant::now();
        let stats = nodes[0]
            .sharding
            .cluster_stats::<Counter>(timeout)
            .await
            .unwrap();
        let took = asked.elapsed();
        assert!(
            took < timeout + Duration::from_millis(700),
            "answered within its timeout ({took:?})"
        );
        assert_eq!(stats.failed, vec![cut.address().to_string()], "{stats:?}");
        assert_eq!(stats.regions.len(), 2, "{stats:?}");
        for (region, counts) in &stats.regions {
            assert_eq!(
                per_region.get(region).cloned().unwrap_or_default(),
                counts.stats
            );
        }
        shutdown_all(nodes).await;
    });
}

#[test]
fn a_full_buffer_refuses_tells_and_asks_send_waits_and_nothing_accepted_is_lost() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = ShardingSettings {
            buffer_size: 5,
            // No coordinator allocates while there is one member.
            min_nr_of_members: 2,
            ..sharding_settings()
        };
        let mut nodes = start_nodes(1, &probe, settings.clone());
        all_up(&[&nodes[0]], 1).await;
        let a = nodes[0].counter("a");
        let b = nodes[0].counter("b");
        // A burst: the sender sees the limit at once.
        for n in 0..3u64 {
            a.tell(Seq(n)).unwrap();
        }
        for n in 0..2u64 {
            b.tell(Seq(n)).unwrap();
        }
        match a.tell(Seq(3)) {
            Err(ShardingTellError::BufferFull(m)) => assert_eq!(m.0, 3, "handed back"),
            other => panic!("a sixth message was not refused: {other:?}"),
        }
        assert!(matches!(
            b.tell(Seq(2)),
            Err(ShardingTellError::BufferFull(_))
        ));
        assert_eq!(
            a.ask_timeout(Add(1), ASK).await,
            Err(AskError::MailboxFull),
            "an ask beyond the limit fails at once"
        );
        assert_eq!(probe.state(|p| p.started_on.len()), 0);
        // `send` waits for room in the buffer instead.
        let mut waiting = Box::pin(a.send(Seq(3)));
        assert!(
            futures_lite::future::poll_once(&mut waiting)
                .await
                .is_none(),
            "send waits while the buffer is full"
        );

        // A second member: allocation proceeds and what was accepted
        // arrives, in order; the buffer takes messages again, and the
        // waiting send goes.
        nodes.push(start_node(&[nodes[0].address()], &probe, settings.clone()));
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 2).await;
        rt::timeout(DEADLINE, waiting)
            .await
            .expect("the waiting send went within the deadline")
            .unwrap();
        assert_eq!(a.ask_timeout(Add(1), ASK).await.unwrap(), 1);
        assert_eq!(b.ask_timeout(Add(1), ASK).await.unwrap(), 1);
        assert_eq!(probe.received("a"), vec![0, 1, 2, 3]);
        assert_eq!(probe.received("b"), vec![0, 1]);
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(nodes).await;
    });
}

#[test]
fn shards_the_strategy_moves_go_where_it_says_and_wait_while_it_has_no_home_for_them() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let (nodes, choice) = nodes_with_chosen_allocation(&probe, sharding_settings()).await;
        let all: Vec<&Node> = nodes.iter().collect();
        choice.choose(Some(&nodes[1]));
        let a = nodes[0].counter("a");
        let b = nodes[2].counter("b");
        assert_ne!(a.shard_id(), b.shard_id());
        assert_eq!(
            a.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            nodes[1].name()
        );
        assert_eq!(
            b.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            nodes[1].name()
        );

        // Pekko's "rebalance specified shards": a's shard moves to the
        // third node; b's stays.
        choice.choose(Some(&nodes[2]));
        choice.to_move.lock().unwrap().insert(a.shard_id().into());
        eventually("a's shard moved to the third node", async || {
            nodes[2].hosted_shards().await.contains(a.shard_id())
        })
        .await;
        assert_eq!(
            a.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            nodes[2].name()
        );
        assert_eq!(
            b.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            nodes[1].name()
        );

        // b's shard is moved while the strategy has no home for it: its
        // messages wait (from every node) until it names one.
        choice.choose(None);
        choice.to_move.lock().unwrap().insert(b.shard_id().into());
        eventually("b's shard left the second node", async || {
            !nodes[1].hosted_shards().await.contains(b.shard_id())
        })
        .await;
        let waiting: Vec<_> = nodes
            .iter()
            .map(|n| {
                n.counter("b")
                    .ask_timeout(WhereAreYou, Duration::from_secs(30))
            })
            .collect();
        let early = b.ask_timeout(Add(1), Duration::from_millis(800)).await;
        assert!(matches!(early, Err(AskError::Timeout(_))), "{early:?}");
        assert!(!shard_homes(&all).await.contains_key(b.shard_id()));
        choice.choose(Some(&nodes[0]));
        for ask in waiting {
            assert_eq!(ask.await.unwrap(), nodes[0].name());
        }
        assert_eq!(b.ask_timeout(Add(0), ASK).await.unwrap(), 1);
        assert_no_shard_twice(&all).await;
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(nodes).await;
    });
}

/// A node joining through `seed` whose queue to each node holds only 32
/// frames; no entity type started.
fn node_with_small_queues(seed: &Node) -> Node {
    let mut remote = troupe_core::remote::RemoteSettings::new("127.0.0.1:0")
        .with_secret("sharding-test")
        .with_fault_injection();
    remote.outbound_queue_size = 32;
    let system = troupe_core::ActorSystem::builder("shard")
        .remote(remote)
        .build()
        .unwrap();
    let cluster =
        troupe_cluster::Cluster::start(&system, cluster_settings(&[seed.address()])).unwrap();
    let sharding = troupe_sharding::ClusterSharding::new(&system, &cluster).unwrap();
    Node {
        system,
        cluster,
        sharding,
    }
}

/// Times `node`'s region of counters found a queue to a node full.
fn queue_full_waits(node: &Node) -> u64 {
    node.sharding
        .routing_stats::<Counter>()
        .unwrap()
        .queue_full_waits
}

/// Three nodes with the chosen-allocation strategy and a proxy whose queues
/// are small; the proxy's counter `target` lives on the second node (the
/// old home), and the proxy's messages to that node are held (`faults`)
/// until their queue is full: `queued` messages, numbered from 0.
struct HeldProxy {
    probe: Arc<Probe>,
    nodes: Vec<Node>,
    choice: Arc<Choice>,
    proxy: Node,
    target: EntityRef<Counter>,
    shard: ShardId,
    faults: troupe_core::remote::FaultInjector,
    queued: u64,
    id: String,
}

impl HeldProxy {
    async fn start(id: &str, settings: ShardingSettings) -> Self {
        let probe = Arc::new(Probe::default());
        let (nodes, choice) = nodes_with_chosen_allocation(&probe, settings.clone()).await;
        let proxy = proxy_with_small_queues(&nodes[0], settings);
        let all: Vec<&Node> = nodes.iter().chain([&proxy]).collect();
        all_up(&all, 4).await;
        let old = &nodes[1];
        let target = proxy.counter(id);
        let shard: ShardId = target.shard_id().into();
        choice.choose(Some(old));
        assert_eq!(
            target.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            old.name()
        );
        // The proxy's messages to the old home stay in their queue until it
        // is full: the next one is refused, not accepted.
        let faults = proxy.system.remoting().unwrap().fault_injector().unwrap();
        faults.hold(&old.address());
        let mut queued = 0u64;
        fill_queue(&target, &mut queued);
        assert!(queued > 0, "nothing queued before the queue was full");
        HeldProxy {
            probe,
            nodes,
            choice,
            proxy,
            target,
            shard,
            faults,
            queued,
            id: id.to_string(),
        }
    }

    /// With the shard on the new home (the third node): sends 20 more
    /// (numbered from `next`), checks that every message arrived once and
    /// in order and that the entity had one incarnation per home, and shuts
    /// the nodes down.
    async fn ends_on_the_new_home(self, mut next: u64) {
        let (target, probe, id) = (&self.target, &self.probe, self.id.as_str());
        // The proxy's queue to the new home may still be full of what it
        // buffered: a refused message is sent again.
        send_each(&[target], [&mut next], 20, true).await;
        assert_eq!(
            target.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            self.nodes[2].name()
        );
        await_received(probe, id, next, "every message arrived").await;
        assert_eq!(
            probe.received(id),
            (0..next).collect::<Vec<_>>(),
            "once and in order ({} held in the queue to the old home)",
            self.queued
        );
        assert_eq!(probe.starts(id), 2, "one incarnation per home");
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(self.nodes.into_iter().chain([self.proxy])).await;
    }
}

/// A proxy-only node joining through `seed` whose queue to each node holds
/// only 32 frames.
fn proxy_with_small_queues(seed: &Node, settings: ShardingSettings) -> Node {
    let proxy = node_with_small_queues(seed);
    proxy.sharding.start_proxy::<Counter>(settings).unwrap();
    proxy
}

#[test]
fn messages_buffered_for_a_node_whose_queue_is_full_wait_and_all_arrive_in_order() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = sharding_settings();
        let host = start_nodes(1, &probe, settings.clone()).remove(0);
        // A proxy whose queue to each node holds a few frames: the burst
        // it buffers while the shard is allocated cannot all go at once.
        let proxy = proxy_with_small_queues(&host, settings.clone());
        all_up(&[&host, &proxy], 2).await;
        let burst = proxy.counter("burst");
        const N: u64 = 3000;
        let mut refused = 0;
        for n in 0..N {
            loop {
                match burst.tell(Seq(n)) {
                    Ok(()) => break,
                    // Refused, not accepted: the sender tries again.
                    Err(ShardingTellError::NodeQueueFull(_)) => {
                        refused += 1;
                        rt::yield_now().await;
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
        }
        await_received(&probe, "burst", N, "every message of the burst arrived").await;
        probe.state(|p| {
            let want: Vec<u64> = (0..N).collect();
            assert_eq!(
                p.received["burst"], want,
                "once and in order ({refused} sends refused and tried again)"
            );
        });
        shutdown_all([host, proxy]).await;
    });
}

/// `EntityRef::send` waits for room in a full queue to the entity's node
/// where `tell` hands the message back: it stays pending while the link is
/// held (the queue cannot drain), completes once it is released, and what
/// it sent arrives once and in order behind what filled the queue.
#[test]
fn send_waits_for_room_in_the_full_queue_to_the_entity_s_node() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = sharding_settings();
        let host = start_nodes(1, &probe, settings.clone()).remove(0);
        let proxy = proxy_with_small_queues(&host, settings);
        all_up(&[&host, &proxy], 2).await;
        let paced = proxy.counter("paced");
        // The shard's home is known: tells go straight to the host's queue.
        assert_eq!(
            paced.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            host.name()
        );
        // Held: the queue to the host fills and stays full.
        let faults = proxy.system.remoting().unwrap().fault_injector().unwrap();
        faults.hold(&host.address());
        let mut next = 0u64;
        fill_queue(&paced, &mut next);
        assert!(next > 0, "the queue took nothing");
        let first_sent = next;
        let sends = async {
            for n in first_sent..first_sent + 2000 {
                paced.send(Seq(n)).await.expect("send waits for room");
            }
        };
        let mut sends = std::pin::pin!(sends);
        for _ in 0..3 {
            assert!(
                futures_lite::future::poll_once(&mut sends).await.is_none(),
                "send completed while the queue to the host was full"
            );
            rt::yield_now().await;
        }
        faults.release(&host.address());
        let sent = rt::timeout(DEADLINE, sends).await;
        assert!(sent.is_some(), "send did not get room within {DEADLINE:?}");
        next = first_sent + 2000;
        await_received(&probe, "paced", next, "every message sent arrived").await;
        probe.state(|p| {
            let want: Vec<u64> = (0..next).collect();
            assert_eq!(p.received["paced"], want, "once and in order");
        });
        shutdown_all([host, proxy]).await;
    });
}

/// Moves `shard` to `to` through the chosen-allocation strategy (Pekko's
/// "rebalance specified shards"), running `load` until `to` hosts it.
async fn move_shard_while(choice: &Choice, shard: &str, to: &Node, mut load: impl AsyncFnMut()) {
    choice.choose(Some(to));
    choice.to_move.lock().unwrap().insert(shard.into());
    let deadline = Instant::now() + Duration::from_secs(20);
    while !to.hosted_shards().await.contains(shard) {
        assert!(
            Instant::now() < deadline,
            "shard {shard} did not move to {}",
            to.name()
        );
        load().await;
    }
    choice.to_move.lock().unwrap().clear();
}

/// A shard's table of active entities lives as long as its route: it is
/// closed when the shard leaves and opened again when the shard comes
/// back. Senders on the node it came back to reach the new incarnation
/// directly again, and no message of the whole trip is lost, duplicated
/// or reordered.
#[test]
fn a_shard_that_leaves_and_comes_back_is_reached_directly_again() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let (nodes, choice) = nodes_with_chosen_allocation(&probe, sharding_settings()).await;
        let all: Vec<&Node> = nodes.iter().collect();
        let (home, away) = (&nodes[1], &nodes[2]);
        choice.choose(Some(home));
        let a = home.counter("a");
        let mut next = 0u64;
        let mut burst = |n: u64| {
            for _ in 0..n {
                a.tell(Seq(next)).unwrap();
                next += 1;
            }
        };
        burst(50);
        assert_eq!(a.ask_timeout(WhereAreYou, ASK).await.unwrap(), home.name());

        // Away, while the home node keeps sending.
        move_shard_while(&choice, a.shard_id(), away, async || {
            burst(10);
            rt::sleep(Duration::from_millis(5)).await;
        })
        .await;
        burst(50);
        assert_eq!(a.ask_timeout(WhereAreYou, ASK).await.unwrap(), away.name());

        // And back.
        move_shard_while(&choice, a.shard_id(), home, async || {
            burst(10);
            rt::sleep(Duration::from_millis(5)).await;
        })
        .await;
        assert_eq!(a.ask_timeout(WhereAreYou, ASK).await.unwrap(), home.name());

        // The new incarnation runs: the home node's messages skip the
        // region actor again.
        let not_direct = || {
            let s = home.sharding.routing_stats::<Counter>().unwrap();
            s.via_region + s.via_shard
        };
        let before = not_direct();
        burst(1000);
        a.ask_timeout(Add(0), ASK).await.unwrap();
        let after = not_direct();
        assert!(
            after - before < 10,
            "{} of 1000 messages went through the region after the shard came back",
            after - before
        );
        assert_eq!(
            probe.received("a"),
            (0..next).collect::<Vec<_>>(),
            "every message, once, in order"
        );
        assert_eq!(probe.starts("a"), 3, "one incarnation per stay");
        assert_eq!(probe.state(|p| p.max_alive), 1);
        assert_no_shard_twice(&all).await;
        shutdown_all(nodes).await;
    });
}

/// A proxy whose queue to each node holds only 32 frames sends a steady
/// load to an entity whose shard moves back and forth between two nodes.
/// Messages the proxy buffered during a move find the queue to the new home
/// full and wait in the region (sent again every 10 ms); a move that starts
/// while they wait sends its hand-off acknowledgement behind them (whether
/// a given run hits that case depends on timing). Every message arrives
/// once and in order, and the entity never runs twice at once.
#[test]
fn a_shard_moving_while_the_queues_to_its_homes_are_full_loses_and_reorders_nothing() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = sharding_settings();
        let (nodes, choice) = nodes_with_chosen_allocation(&probe, settings.clone()).await;
        let proxy = proxy_with_small_queues(&nodes[0], settings);
        let all: Vec<&Node> = nodes.iter().chain([&proxy]).collect();
        all_up(&all, 4).await;

        let target = proxy.counter("flood");
        let shard: ShardId = target.shard_id().into();
        choice.choose(Some(&nodes[1]));
        assert_eq!(
            target.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            nodes[1].name()
        );
        let mut next = 0u64;
        let mut refused = 0u64;
        let mut send = async |n: u64, next: &mut u64| {
            for _ in 0..n {
                loop {
                    match target.tell(Seq(*next)) {
                        Ok(()) => break,
                        // Refused, not accepted: the sender tries again.
                        Err(
                            ShardingTellError::NodeQueueFull(_) | ShardingTellError::BufferFull(_),
                        ) => {
                            refused += 1;
                            rt::yield_now().await;
                        }
                        Err(e) => panic!("{e:?}"),
                    }
                }
                *next += 1;
            }
            // A steady load, not a burst that fills the buffer at once.
            rt::sleep(Duration::from_millis(5)).await;
        };
        for round in 0..4 {
            let home = &nodes[if round % 2 == 0 { 2 } else { 1 }];
            move_shard_while(&choice, &shard, home, async || send(100, &mut next).await).await;
            send(100, &mut next).await;
        }
        let sent = next;
        await_received(&probe, "flood", sent, "every message of the flood arrived").await;
        assert_eq!(
            probe.received("flood"),
            (0..sent).collect::<Vec<_>>(),
            "once and in order ({refused} sends refused and tried again)"
        );
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(nodes.into_iter().chain([proxy])).await;
    });
}

/// A region whose queue to a shard's old home is full when the hand-off
/// begins sends its acknowledgement behind the messages queued there (the
/// held acknowledgement; the coordinator hands off only once it has it).
/// The fault-injection switch makes the case certain: it holds the proxy's
/// messages to the old home until their queue is full, then the shard is
/// moved. Every message arrives once and in order, the old home's before
/// the entity stops there.
#[test]
fn a_hand_off_acknowledgement_waits_behind_the_messages_queued_to_the_old_home() {
    init_logging();
    rt::block_on(async {
        let held = HeldProxy::start("held-ack", sharding_settings()).await;
        let HeldProxy {
            nodes,
            choice,
            proxy,
            target,
            shard,
            faults,
            queued,
            ..
        } = &held;
        let (old, new) = (&nodes[1], &nodes[2]);
        let mut next = *queued;

        // The move. Once the proxy's region has the BeginHandOff, its
        // messages for the shard wait in the region (accepted) instead of
        // being refused; its acknowledgement found the queue full.
        choice.choose(Some(new));
        choice.to_move.lock().unwrap().insert(shard.clone());
        send_each(&[target], [&mut next], 1, true).await;
        for _ in 0..20 {
            target.tell(Seq(next)).unwrap();
            next += 1;
        }
        // The acknowledgement was refused by the full queue: it waits in
        // the proxy's region (which shows the hold worked).
        eventually("the acknowledgement waits", async || {
            queue_full_waits(proxy) > 0
        })
        .await;
        // The coordinator waits for it (up to the hand-off timeout, 5 s
        // here): the shard has not moved.
        assert!(old.hosted_shards().await.contains(&**shard));
        assert!(!new.hosted_shards().await.contains(&**shard));
        faults.release(&old.address());

        eventually("the shard moved to its new home", async || {
            new.hosted_shards().await.contains(&**shard)
        })
        .await;
        held.ends_on_the_new_home(next).await;
    });
}

/// A hand-off that a region does not acknowledge within `handoff-timeout`
/// is abandoned, as Pekko's is: that region may still have messages on
/// their way to the old home (its acknowledgement goes behind them), and
/// moving the shard would let its later messages reach the new home
/// before them. The fault-injection switch holds the proxy's messages to
/// the old home, its acknowledgement behind them, past the timeout: the
/// shard stays where it is, and what the proxy buffered meanwhile goes to
/// the old home behind what was held. Once the link flows again, a later
/// attempt moves the shard. Every message arrives once and in order.
#[test]
fn a_hand_off_not_acknowledged_in_time_is_abandoned_and_nothing_is_reordered() {
    init_logging();
    rt::block_on(async {
        let settings = ShardingSettings {
            handoff_timeout: Duration::from_secs(1),
            ..sharding_settings()
        };
        let held = HeldProxy::start("abandoned", settings).await;
        let HeldProxy {
            probe,
            nodes,
            choice,
            proxy,
            target,
            shard,
            faults,
            queued,
            ..
        } = &held;
        let (old, new) = (&nodes[1], &nodes[2]);
        let mut next = *queued;

        // The move begins: the proxy's acknowledgement waits behind the
        // held messages, and what it is told meanwhile waits in its region.
        choice.choose(Some(new));
        choice.to_move.lock().unwrap().insert(shard.clone());
        eventually("the acknowledgement waits", async || {
            queue_full_waits(proxy) > 0
        })
        .await;
        // Accepted while the hand-off runs (once it is abandoned, sends to
        // the full queue are refused: `send_each` stops there).
        send_each(&[target], [&mut next], 20, false).await;
        // The hand-off ends without the acknowledgement: abandoned, the
        // shard is still on the old home (moved, it would be on neither
        // or on the new one).
        eventually("the hand-off ended", async || choice.move_ended()).await;
        assert!(
            old.hosted_shards().await.contains(&**shard),
            "the shard left its old home without every acknowledgement"
        );
        assert!(!new.hosted_shards().await.contains(&**shard));

        // The link flows: the held messages, then the buffered ones, reach
        // the entity on the old home.
        faults.release(&old.address());
        send_each(&[target], [&mut next], 20, true).await;
        await_received(probe, "abandoned", next, "every message at the old home").await;
        assert_eq!(probe.starts("abandoned"), 1, "the entity never moved");

        // A later attempt, every region acknowledging, moves it. The
        // coordinator leaves a shard whose hand-off was abandoned alone for
        // a hand-off timeout, so the move is asked for again each time the
        // strategy took it and the shard stayed (no hand-off runs then, so
        // a move is never asked for twice).
        let deadline = Instant::now() + DEADLINE;
        loop {
            choice.to_move.lock().unwrap().insert(shard.clone());
            eventually("the strategy took the move", async || {
                choice.to_move.lock().unwrap().is_empty() && choice.move_ended()
            })
            .await;
            // On exactly one of the two (moved, or stayed), while sending.
            let mut on_new = false;
            eventually("the shard settled", async || {
                send_each(&[target], [&mut next], 1, true).await;
                on_new = new.hosted_shards().await.contains(&**shard);
                on_new != old.hosted_shards().await.contains(&**shard)
            })
            .await;
            if on_new {
                break;
            }
            assert!(Instant::now() < deadline, "the shard did not move");
        }
        held.ends_on_the_new_home(next).await;
    });
}

/// The old home of a moving shard passes on the messages it held for it
/// (here its own sender's, which reached its region while the entity took
/// 300 ms to stop) and then the marker that ends the flush
/// (`ShardFlushed`), which the new home waits for. When the queue from the
/// old home to the new one is full, those messages wait in the old home's
/// region and go in order as room comes, the old home's later messages and
/// the marker behind them. The fault-injection switch makes the case
/// certain (the test fails if a held message goes behind the others).
/// Both senders' messages arrive once and in order, and nothing stalls.
#[test]
fn messages_the_old_home_held_for_a_full_queue_reach_the_new_home_in_order() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = sharding_settings();
        let (nodes, choice) = nodes_with_chosen_allocation(&probe, settings.clone()).await;
        // The old home: a node whose queue to each node holds 32 frames,
        // and whose entities take 300 ms to stop when handed off, so that
        // its sender's messages reach its region during the hand-off and
        // are held there for the new home.
        let old = node_with_small_queues(&nodes[0]);
        let config = chosen_config(&old, &probe, &choice).with_stop_message(Linger(300));
        old.start_counter_with(config, settings.clone());
        let all: Vec<&Node> = nodes.iter().chain([&old]).collect();
        all_up(&all, 4).await;
        let new = &nodes[2];

        // An entity of another shard on the new home, to fill the queue.
        choice.choose(Some(new));
        let filler = old.counter("filler");
        assert_eq!(
            filler.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            new.name()
        );
        let id = (0..)
            .map(|i| format!("flushed-{i}"))
            .find(|id| old.counter(id.as_str()).shard_id() != filler.shard_id())
            .unwrap();
        choice.choose(Some(&old));
        let from_old = old.counter(id.as_str());
        let from_new = new.counter(id.as_str());
        assert_eq!(
            from_old.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            old.name()
        );
        let shard: ShardId = from_old.shard_id().into();
        // Two senders, each numbering its own messages.
        const NEW_BASE: u64 = 1_000_000;
        let (mut next_old, mut next_new) = (0u64, NEW_BASE);
        let senders = [&from_old, &from_new];
        send_each(&senders, [&mut next_old, &mut next_new], 10, true).await;

        // The old home's messages to the new one are held until the queue
        // is full.
        let faults = old.system.remoting().unwrap().fault_injector().unwrap();
        faults.hold(&new.address());
        fill_queue(&filler, &mut 0);
        let waits = || queue_full_waits(&old);
        let before = waits();

        // The move, with both sending, until the old home's flush has
        // found the queue full: its held messages and the marker behind
        // them wait in its region.
        choice.choose(Some(new));
        choice.to_move.lock().unwrap().insert(shard.clone());
        let deadline = Instant::now() + DEADLINE;
        while waits() == before {
            assert!(
                Instant::now() < deadline,
                "the old home's flush never waited"
            );
            // Once the old home knows the new one, its sender's messages
            // may be refused for the full queue (not accepted): then it
            // tries again later.
            send_each(&senders, [&mut next_old, &mut next_new], 1, false).await;
            rt::sleep(Duration::from_millis(2)).await;
        }
        assert!(new.hosted_shards().await.contains(&*shard));
        send_each(&senders, [&mut next_old, &mut next_new], 10, false).await;
        faults.release(&new.address());

        send_each(&senders, [&mut next_old, &mut next_new], 10, true).await;
        assert_eq!(
            from_new.ask_timeout(WhereAreYou, ASK).await.unwrap(),
            new.name()
        );
        let total = next_old + (next_new - NEW_BASE);
        await_received(&probe, &id, total, "every message arrived").await;
        let got = probe.received(id.as_str());
        let of_old: Vec<u64> = got.iter().copied().filter(|s| *s < NEW_BASE).collect();
        let of_new: Vec<u64> = got.iter().copied().filter(|s| *s >= NEW_BASE).collect();
        assert_eq!(
            of_old,
            (0..next_old).collect::<Vec<_>>(),
            "the old home's sender"
        );
        assert_eq!(
            of_new,
            (NEW_BASE..next_new).collect::<Vec<_>>(),
            "the new home's sender"
        );
        assert_eq!(got.len() as u64, total, "nothing twice");
        assert_eq!(probe.starts(id.as_str()), 2, "one incarnation per home");
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(nodes.into_iter().chain([old])).await;
    });
}

/// Sends `n` numbered messages from each sender in turn, numbered from its
/// counter. A message refused for a full queue to its node is not
/// accepted: with `retry` it is sent again until accepted, else the
/// sending stops there (its number is not used).
async fn send_each<const K: usize>(
    senders: &[&EntityRef<Counter>; K],
    mut next: [&mut u64; K],
    n: u64,
    retry: bool,
) {
    for _ in 0..n {
        for (to, next) in senders.iter().zip(next.iter_mut()) {
            let deadline = Instant::now() + DEADLINE;
            let mut msg = Seq(**next);
            loop {
                match to.tell(msg) {
                    Ok(()) => break,
                    Err(ShardingTellError::NodeQueueFull(_)) if !retry => return,
                    Err(ShardingTellError::NodeQueueFull(m)) => {
                        assert!(Instant::now() < deadline, "the queue stayed full");
                        msg = m;
                        rt::sleep(Duration::from_millis(1)).await;
                    }
                    Err(e) => panic!("{e:?}"),
                }
            }
            **next += 1;
        }
    }
}

/// Sends `to` numbered messages (from `next`) until the queue to its node
/// is full: the first one refused is not accepted, and not counted.
fn fill_queue(to: &EntityRef<Counter>, next: &mut u64) {
    loop {
        match to.tell(Seq(*next)) {
            Ok(()) => *next += 1,
            Err(ShardingTellError::NodeQueueFull(_)) => return,
            Err(e) => panic!("{e:?}"),
        }
    }
}

/// Waits until entity `id` has received `n` messages.
async fn await_received(probe: &Probe, id: &str, n: u64, what: &str) {
    eventually(what, async || {
        probe.state(|p| p.received.get(id).map_or(0, |v| v.len()) as u64 >= n)
    })
    .await;
}
