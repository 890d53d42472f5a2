//! Clusters of several actor systems in one process, over real TCP on
//! loopback, with the transport's fault injection for partitions.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use troupe_cluster::{Cluster, ClusterEvent, ClusterSettings, DowningStrategy, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, Direction, RemoteSettings};
use troupe_core::rt;

const DEADLINE: Duration = Duration::from_secs(30);

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

fn fast_settings(seeds: &[Address]) -> ClusterSettings {
    let mut s = ClusterSettings {
        seed_nodes: seeds.to_vec(),
        gossip_interval: Duration::from_millis(300),
        leader_actions_interval: Duration::from_millis(200),
        unreachable_nodes_reaper_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(200),
        seed_node_timeout: Duration::from_millis(1500),
        allow_weakly_up_members: Some(Duration::from_millis(1500)),
        ..ClusterSettings::default()
    };
    s.failure_detector.acceptable_heartbeat_pause = Duration::from_millis(1000);
    s.failure_detector.first_heartbeat_estimate = Duration::from_millis(200);
    s.downing.stable_after = Duration::from_millis(1500);
    s.downing.down_all_when_unstable = None;
    s
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
}

fn system() -> ActorSystem {
    ActorSystem::builder("cluster")
        .remote(
            RemoteSettings::new("127.0.0.1:0")
                .with_secret("cluster-test")
                .with_fault_injection(),
        )
        .build()
        .unwrap()
}

fn address(system: &ActorSystem) -> Address {
    system.remoting().unwrap().address().clone()
}

fn start(system: ActorSystem, settings: ClusterSettings) -> Node {
    let cluster = Cluster::start(&system, settings).unwrap();
    Node { system, cluster }
}

/// `n` systems whose first is the first seed.
fn cluster_of(n: usize, tweak: impl Fn(&mut ClusterSettings)) -> Vec<Node> {
    let systems: Vec<ActorSystem> = (0..n).map(|_| system()).collect();
    let seeds = vec![address(&systems[0])];
    systems
        .into_iter()
        .map(|s| {
            let mut settings = fast_settings(&seeds);
            tweak(&mut settings);
            start(s, settings)
        })
        .collect()
}

async fn statuses(node: &Node) -> Vec<(Address, MemberStatus)> {
    node.cluster
        .state()
        .await
        .map(|s| {
            s.members
                .iter()
                .map(|m| (m.node.address.clone(), m.status))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until every node in `nodes` sees exactly `expected` members, all
/// with `status`.
async fn await_members(nodes: &[&Node], expected: &BTreeSet<Address>, status: MemberStatus) {
    let start = Instant::now();
    loop {
        let mut ok = true;
        for n in nodes {
            let st = statuses(n).await;
            let addrs: BTreeSet<Address> = st.iter().map(|(a, _)| a.clone()).collect();
            if &addrs != expected || st.iter().any(|(_, s)| *s != status) {
                ok = false;
                if start.elapsed() > DEADLINE {
                    panic!(
                        "{} sees {st:?}, expected {expected:?} all {status}",
                        n.cluster.self_address()
                    );
                }
            }
        }
        if ok {
            return;
        }
        rt::sleep(Duration::from_millis(50)).await;
    }
}

fn all(nodes: &[Node]) -> BTreeSet<Address> {
    nodes.iter().map(|n| address(&n.system)).collect()
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
fn seed_nodes_form_a_cluster_and_everyone_is_up() {
    init_logging();
    rt::block_on(async {
        let nodes = cluster_of(3, |_| {});
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        // One leader, the same everywhere.
        let leaders: BTreeSet<_> = {
            let mut v = BTreeSet::new();
            for n in &nodes {
                v.insert(n.cluster.state().await.unwrap().leader);
            }
            v
        };
        assert_eq!(leaders.len(), 1, "{leaders:?}");
        shutdown(nodes).await;
    });
}

#[test]
fn events_start_with_a_snapshot_and_arrive_in_order() {
    init_logging();
    rt::block_on(async {
        let first = system();
        let seeds = vec![address(&first)];
        let a = start(first, fast_settings(&seeds));
        let (snapshot, events) = a.cluster.subscribe().await.unwrap();
        assert!(snapshot.members.len() <= 1);
        let b = start(system(), fast_settings(&seeds));
        let b_addr = address(&b.system);
        let mut seen = Vec::new();
        let start_t = Instant::now();
        while !seen
            .iter()
            .any(|e| matches!(e, ClusterEvent::MemberUp(m) if m.node.address == b_addr))
        {
            assert!(start_t.elapsed() < DEADLINE, "no MemberUp for b: {seen:?}");
            if let Some(Ok(e)) = rt::timeout(Duration::from_millis(200), events.recv()).await {
                seen.push(e);
            }
        }
        let joined = seen
            .iter()
            .position(|e| matches!(e, ClusterEvent::MemberJoined(m) if m.node.address == b_addr))
            .expect("MemberJoined before MemberUp");
        let up = seen
            .iter()
            .position(|e| matches!(e, ClusterEvent::MemberUp(m) if m.node.address == b_addr))
            .unwrap();
        assert!(joined < up, "{seen:?}");
        shutdown(vec![a, b]).await;
    });
}

#[test]
fn leaving_members_exit_and_are_removed_also_the_leader() {
    init_logging();
    rt::block_on(async {
        let mut nodes = cluster_of(3, |_| {});
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        let leader = nodes[0].cluster.state().await.unwrap().leader.unwrap();
        let idx = nodes
            .iter()
            .position(|n| n.cluster.self_node() == &leader)
            .unwrap();
        let leaving = nodes.remove(idx);
        nodes[0].cluster.leave(&leader.address);
        let rest: Vec<&Node> = nodes.iter().collect();
        await_members(&rest, &all(&nodes), MemberStatus::Up).await;
        // A new leader among the rest.
        let new_leader = nodes[0].cluster.state().await.unwrap().leader.unwrap();
        assert_ne!(new_leader, leader);
        // The node that left learns that it was removed, and its core stops.
        let start_t = Instant::now();
        while leaving.cluster.state().await.is_ok() {
            assert!(
                start_t.elapsed() < DEADLINE,
                "the leaving node never learnt it was removed"
            );
            rt::sleep(Duration::from_millis(50)).await;
        }
        shutdown(nodes).await;
        leaving.system.shutdown().await;
    });
}

#[test]
fn an_unreachable_member_is_downed_by_keep_majority_and_removed() {
    init_logging();
    rt::block_on(async {
        let mut nodes = cluster_of(3, |_| {});
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        // Cut the last node off from the others, both ways.
        let lost = nodes.pop().unwrap();
        let lost_addr = address(&lost.system);
        for n in &nodes {
            let faults = n.system.remoting().unwrap().fault_injector().unwrap();
            faults.blackhole(&lost_addr, Direction::Both);
        }
        let rest: Vec<&Node> = nodes.iter().collect();
        await_members(&rest, &all(&nodes), MemberStatus::Up).await;
        shutdown(nodes).await;
        lost.system.terminate().await;
    });
}

#[test]
fn a_partition_of_two_and_two_keeps_the_side_with_the_lowest_address() {
    init_logging();
    rt::block_on(async {
        let nodes = cluster_of(4, |s| {
            s.downing.strategy = DowningStrategy::KeepMajority { role: None };
        });
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        let mut sorted: Vec<&Node> = nodes.iter().collect();
        sorted.sort_by_key(|n| n.cluster.self_node().clone());
        let (low, high) = sorted.split_at(2);
        for a in low {
            for b in high {
                let fa = a.system.remoting().unwrap().fault_injector().unwrap();
                fa.blackhole(&address(&b.system), Direction::Both);
                let fb = b.system.remoting().unwrap().fault_injector().unwrap();
                fb.blackhole(&address(&a.system), Direction::Both);
            }
        }
        let low_addrs: BTreeSet<Address> = low.iter().map(|n| address(&n.system)).collect();
        await_members(low, &low_addrs, MemberStatus::Up).await;
        shutdown(nodes).await;
    });
}

#[test]
fn a_bad_link_between_two_members_downs_those_two_and_keeps_the_rest() {
    init_logging();
    rt::block_on(async {
        let nodes = cluster_of(4, |_| {});
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        // Only the link between the two lowest addresses breaks; both
        // still talk to the others. Counted as a 2|2 partition, the side
        // of the lowest address would win and the two healthy members
        // would go down; as indirectly connected members, the two at the
        // ends of the bad link go down instead (Akka's resolver).
        let mut sorted: Vec<&Node> = nodes.iter().collect();
        sorted.sort_by_key(|n| n.cluster.self_node().clone());
        let (a, b) = (sorted[0], sorted[1]);
        let fa = a.system.remoting().unwrap().fault_injector().unwrap();
        fa.blackhole(&address(&b.system), Direction::Both);
        let fb = b.system.remoting().unwrap().fault_injector().unwrap();
        fb.blackhole(&address(&a.system), Direction::Both);
        let healthy = &sorted[2..];
        let healthy_addrs: BTreeSet<Address> = healthy.iter().map(|n| address(&n.system)).collect();
        await_members(healthy, &healthy_addrs, MemberStatus::Up).await;
        shutdown(nodes).await;
    });
}

#[test]
fn a_restarted_node_rejoins_and_its_old_incarnation_is_removed() {
    init_logging();
    rt::block_on(async {
        let mut nodes = cluster_of(2, |_| {});
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        let old = nodes.pop().unwrap();
        let port = address(&old.system).port();
        let old_uid = old.cluster.self_node().uid;
        old.system.terminate().await;
        let seeds = vec![address(&nodes[0].system)];
        let again = ActorSystem::builder("cluster")
            .remote(
                RemoteSettings::new(format!("127.0.0.1:{port}"))
                    .with_secret("cluster-test")
                    .with_fault_injection(),
            )
            .build()
            .unwrap();
        nodes.push(start(again, fast_settings(&seeds)));
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        let st = nodes[0].cluster.state().await.unwrap();
        assert!(st.members.iter().all(|m| m.node.uid != old_uid));
        shutdown(nodes).await;
    });
}

#[test]
fn joining_members_wait_for_convergence_become_weakly_up_and_up_after_healing() {
    init_logging();
    rt::block_on(async {
        // No downing here: the unreachable node must stay unreachable.
        let mut nodes = cluster_of(3, |s| s.downing.strategy = DowningStrategy::None);
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        let cut = address(&nodes[2].system);
        for n in &nodes[..2] {
            n.system
                .remoting()
                .unwrap()
                .fault_injector()
                .unwrap()
                .blackhole(&cut, Direction::Both);
        }
        // Wait until the cut node is seen as unreachable.
        let start_t = Instant::now();
        while !nodes[0]
            .cluster
            .state()
            .await
            .unwrap()
            .unreachable
            .iter()
            .any(|m| m.node.address == cut)
        {
            assert!(start_t.elapsed() < DEADLINE, "never unreachable");
            rt::sleep(Duration::from_millis(50)).await;
        }
        // A new node joins: without convergence it cannot become Up...
        let seeds = vec![address(&nodes[0].system)];
        let mut settings = fast_settings(&seeds);
        settings.downing.strategy = DowningStrategy::None;
        let newcomer = start(system(), settings);
        let new_addr = address(&newcomer.system);
        let status_of = |st: Vec<(Address, MemberStatus)>| {
            st.into_iter().find(|(a, _)| *a == new_addr).map(|(_, s)| s)
        };
        let start_t = Instant::now();
        loop {
            let s = status_of(statuses(&nodes[0]).await);
            assert_ne!(s, Some(MemberStatus::Up), "Up without convergence");
            if s == Some(MemberStatus::WeaklyUp) {
                break;
            }
            assert!(start_t.elapsed() < DEADLINE, "never WeaklyUp: {s:?}");
            rt::sleep(Duration::from_millis(50)).await;
        }
        // ...and once the partition heals, it becomes Up.
        for n in &nodes[..2] {
            n.system
                .remoting()
                .unwrap()
                .fault_injector()
                .unwrap()
                .pass_through(&cut);
        }
        nodes.push(newcomer);
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        shutdown(nodes).await;
    });
}

#[test]
fn min_nr_of_members_delays_up() {
    init_logging();
    rt::block_on(async {
        let mut nodes = cluster_of(2, |s| s.min_nr_of_members = 3);
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Joining).await;
        let seeds = vec![address(&nodes[0].system)];
        let mut settings = fast_settings(&seeds);
        settings.min_nr_of_members = 3;
        nodes.push(start(system(), settings));
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        shutdown(nodes).await;
    });
}

#[test]
fn two_clusters_do_not_merge() {
    init_logging();
    rt::block_on(async {
        let a = cluster_of(2, |_| {});
        let b = cluster_of(2, |_| {});
        let (ra, rb): (Vec<&Node>, Vec<&Node>) = (a.iter().collect(), b.iter().collect());
        await_members(&ra, &all(&a), MemberStatus::Up).await;
        await_members(&rb, &all(&b), MemberStatus::Up).await;
        // A member of b asked to join a: it is already a member, so no.
        b[1].cluster.join(&address(&a[0].system));
        // Gossip keeps going for a while; neither side learns of the other.
        for _ in 0..20 {
            await_members(&ra, &all(&a), MemberStatus::Up).await;
            await_members(&rb, &all(&b), MemberStatus::Up).await;
            rt::sleep(Duration::from_millis(100)).await;
        }
        shutdown(a).await;
        shutdown(b).await;
    });
}

#[test]
fn a_running_member_that_is_downed_leaves_and_is_removed() {
    init_logging();
    rt::block_on(async {
        let mut nodes = cluster_of(3, |s| s.downing.strategy = DowningStrategy::None);
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        let downed = nodes.pop().unwrap();
        nodes[0].cluster.down(&address(&downed.system));
        let rest: Vec<&Node> = nodes.iter().collect();
        await_members(&rest, &all(&nodes), MemberStatus::Up).await;
        shutdown(nodes).await;
        downed.system.terminate().await;
    });
}

#[test]
fn a_partition_of_three_and_two_keeps_the_three_under_keep_majority() {
    init_logging();
    rt::block_on(async {
        let nodes = cluster_of(5, |_| {});
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        let (three, two) = nodes.split_at(3);
        for a in three {
            for b in two {
                let fa = a.system.remoting().unwrap().fault_injector().unwrap();
                fa.blackhole(&address(&b.system), Direction::Both);
                let fb = b.system.remoting().unwrap().fault_injector().unwrap();
                fb.blackhole(&address(&a.system), Direction::Both);
            }
        }
        let majority: BTreeSet<Address> = three.iter().map(|n| address(&n.system)).collect();
        let refs: Vec<&Node> = three.iter().collect();
        await_members(&refs, &majority, MemberStatus::Up).await;
        shutdown(nodes).await;
    });
}

#[test]
fn seed_nodes_started_in_any_order_form_one_cluster() {
    init_logging();
    rt::block_on(async {
        // Three seeds; the first one starts last.
        let systems: Vec<ActorSystem> = (0..3).map(|_| system()).collect();
        let seeds: Vec<Address> = systems.iter().map(address).collect();
        let mut systems = systems;
        let first = systems.remove(0);
        let mut nodes: Vec<Node> = systems
            .into_iter()
            .map(|s| start(s, fast_settings(&seeds)))
            .collect();
        rt::sleep(Duration::from_millis(500)).await;
        nodes.push(start(first, fast_settings(&seeds)));
        let refs: Vec<&Node> = nodes.iter().collect();
        await_members(&refs, &all(&nodes), MemberStatus::Up).await;
        shutdown(nodes).await;
    });
}
