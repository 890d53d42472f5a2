//! Cluster singleton across several actor systems in one process: the
//! oldest hosts it, a graceful leave hands it over with no overlap (checked
//! through a probe shared by every instance), a crashed host is taken over
//! after it is downed and removed, and the proxy reaches it from any node.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troupe_cluster::coordinated_shutdown::Phase as ShutdownPhase;
use troupe_cluster::singleton::{self, ClusterSingletonSettings};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, Direction, RemoteSettings};
use troupe_core::rt;

const DEADLINE: Duration = Duration::from_secs(30);

/// Counts live instances across all nodes of the test.
#[derive(Default)]
struct Probe {
    alive: AtomicUsize,
    max_alive: AtomicUsize,
    started: AtomicUsize,
    recorded: std::sync::Mutex<Vec<u64>>,
    /// Instances pause after every 50th record, so that they fall behind
    /// and a hand-over finds messages still queued.
    slow_records: AtomicBool,
}

struct Tickets {
    next: u64,
    probe: Arc<Probe>,
}

/// Numbers to record, shared by every instance of the test.
#[derive(Debug, Message, Serialize, Deserialize)]
struct Record(u64);

impl Actor for Tickets {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        let now = self.probe.alive.fetch_add(1, Ordering::SeqCst) + 1;
        self.probe.max_alive.fetch_max(now, Ordering::SeqCst);
        self.probe.started.fetch_add(1, Ordering::SeqCst);
    }
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.probe.alive.fetch_sub(1, Ordering::SeqCst);
    }
}

#[derive(Debug, Message, Serialize, Deserialize)]
#[message(reply = u64)]
struct NextTicket;

/// A message whose handler never ends.
#[derive(Debug, Message, Serialize, Deserialize)]
struct Stuck;

#[handlers]
impl Tickets {
    async fn record(&mut self, m: Record, _ctx: &mut Context<Self>) {
        self.probe.recorded.lock().unwrap().push(m.0);
        if self.probe.slow_records.load(Ordering::SeqCst) && m.0 % 50 == 49 {
            // A slow consumer, not a wait for a condition.
            rt::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn stuck(&mut self, _m: Stuck, _ctx: &mut Context<Self>) {
        // Never ends by itself (a stop cancels it).
        std::future::pending::<()>().await;
    }

    async fn next_ticket(&mut self, _m: NextTicket, _ctx: &mut Context<Self>) -> u64 {
        self.next += 1;
        self.next
    }
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
}

fn settings(seeds: &[Address]) -> ClusterSettings {
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

fn singleton_settings() -> ClusterSingletonSettings {
    ClusterSingletonSettings {
        hand_over_retry_interval: Duration::from_millis(200),
        identify_interval: Duration::from_millis(200),
        ..ClusterSingletonSettings::default()
    }
}

fn nodes(n: usize, probe: &Arc<Probe>) -> Vec<Node> {
    nodes_with(n, probe, |_| {})
}

/// `n` nodes with the test's cluster settings, changed by `adjust`.
fn nodes_with(n: usize, probe: &Arc<Probe>, adjust: impl Fn(&mut ClusterSettings)) -> Vec<Node> {
    let systems: Vec<ActorSystem> = (0..n)
        .map(|_| {
            ActorSystem::builder("single")
                .remote(
                    RemoteSettings::new("127.0.0.1:0")
                        .with_secret("singleton-test")
                        .with_fault_injection(),
                )
                .build()
                .unwrap()
        })
        .collect();
    let seeds = vec![systems[0].remoting().unwrap().address().clone()];
    systems
        .into_iter()
        .map(|system| {
            system
                .register::<Tickets, NextTicket>()
                .unwrap()
                .register::<Tickets, Record>()
                .unwrap()
                .register::<Tickets, Stuck>()
                .unwrap();
            let mut cluster_settings = settings(&seeds);
            adjust(&mut cluster_settings);
            let cluster = Cluster::start(&system, cluster_settings).unwrap();
            let p = probe.clone();
            singleton::start(
                &system,
                &cluster,
                "tickets",
                move || Tickets {
                    next: 0,
                    probe: p.clone(),
                },
                singleton_settings(),
            )
            .unwrap();
            Node { system, cluster }
        })
        .collect()
}

async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < DEADLINE,
            "not within {DEADLINE:?}: {what}"
        );
        rt::sleep(Duration::from_millis(50)).await;
    }
}

async fn all_up(nodes: &[Node], n: usize) {
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
}

fn hosts(node: &Node) -> bool {
    node.system
        .lookup_any("/system/singleton-tickets/singleton")
        .is_some()
}

/// Waits until every node is Up and the oldest hosts the singleton;
/// returns the oldest's index.
async fn up_and_hosting(nodes: &[Node]) -> usize {
    all_up(nodes, nodes.len()).await;
    let first = oldest(nodes).await;
    eventually("the oldest hosts the singleton", async || {
        hosts(&nodes[first])
    })
    .await;
    first
}

/// The index of the oldest member (where the singleton belongs).
async fn oldest(nodes: &[Node]) -> usize {
    let s = nodes[0].cluster.state().await.unwrap();
    let oldest = s.oldest.expect("an oldest member");
    nodes
        .iter()
        .position(|n| n.cluster.self_node() == &oldest)
        .unwrap()
}

#[test]
fn the_oldest_hosts_it_and_a_leave_hands_it_over_without_overlap() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let mut nodes = nodes(3, &probe);
        let first = up_and_hosting(&nodes).await;
        assert_eq!(nodes.iter().filter(|n| hosts(n)).count(), 1);

        // A proxy on a younger node reaches it.
        // The proxy sits on the youngest node, so that the hand-over
        // request (from the next oldest) and the proxy's messages travel on
        // different connections: only the proxies' quiescing keeps the
        // instance from stopping with messages still on their way.
        let younger = youngest(&nodes).await;
        assert_ne!(younger, first);
        let proxy = singleton::proxy::<Tickets>(
            &nodes[younger].system,
            &nodes[younger].cluster,
            "tickets",
            singleton_settings(),
        )
        .unwrap();
        assert_eq!(proxy.ask(NextTicket).await.unwrap(), 1);
        assert_eq!(proxy.ask(NextTicket).await.unwrap(), 2);

        // The oldest leaves: the next oldest takes over, never two at once.
        let leaving_addr = nodes[first].cluster.self_address().clone();
        nodes[younger].cluster.leave(&leaving_addr);
        let leaving = nodes.remove(first);
        // The instance's name is taken when it is spawned, before its
        // `started` hook has run: wait for both.
        eventually("a new host", async || {
            nodes.iter().any(hosts) && probe.started.load(Ordering::SeqCst) >= 2
        })
        .await;
        assert_eq!(
            probe.max_alive.load(Ordering::SeqCst),
            1,
            "two instances at once"
        );
        // The proxy follows it (a fresh instance: tickets start again).
        let t = rt::timeout(DEADLINE, proxy.ask(NextTicket))
            .await
            .expect("proxy answers")
            .unwrap();
        assert!(t >= 1);
        assert_eq!(probe.max_alive.load(Ordering::SeqCst), 1);
        for n in nodes {
            n.system.shutdown().await;
        }
        leaving.system.shutdown().await;
    });
}

/// The index of the youngest Up member.
async fn youngest(nodes: &[Node]) -> usize {
    let s = nodes[0].cluster.state().await.unwrap();
    let youngest = s
        .members
        .iter()
        .filter(|m| m.status == MemberStatus::Up)
        .reduce(|a, b| if a.is_older_than(b) { b } else { a })
        .unwrap()
        .node
        .clone();
    nodes
        .iter()
        .position(|n| n.cluster.self_node() == &youngest)
        .unwrap()
}

/// Once all of `nodes` are Up and the oldest hosts the singleton, cuts the
/// host off from the others (as if it crashed); returns it, removed from
/// `nodes`.
async fn cut_off_the_host(nodes: &mut Vec<Node>) -> Node {
    all_up(nodes, nodes.len()).await;
    let first = oldest(nodes).await;
    eventually("the oldest hosts the singleton", async || {
        hosts(&nodes[first])
    })
    .await;
    let host = nodes.remove(first);
    for n in nodes.iter() {
        let f = n.system.remoting().unwrap().fault_injector().unwrap();
        f.blackhole(host.cluster.self_address(), Direction::Both);
    }
    host
}

#[test]
fn a_crashed_host_is_taken_over_after_it_is_downed() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let mut nodes = nodes(3, &probe);
        let host = cut_off_the_host(&mut nodes).await;
        let rest: BTreeSet<Address> = nodes
            .iter()
            .map(|n| n.cluster.self_address().clone())
            .collect();
        eventually("a new host among the rest", async || {
            nodes.iter().any(hosts)
                && nodes[0]
                    .cluster
                    .state()
                    .await
                    .map(|s| {
                        s.members
                            .iter()
                            .map(|m| m.node.address.clone())
                            .collect::<BTreeSet<_>>()
                            == rest
                    })
                    .unwrap_or(false)
        })
        .await;
        // The cut-off host downed itself (keep-majority: it is alone), so
        // its instance stopped too.
        eventually("the old host stopped its instance", async || !hosts(&host)).await;
        for n in nodes {
            n.system.shutdown().await;
        }
        host.system.terminate().await;
    });
}

#[test]
fn a_down_removal_margin_delays_the_take_over_so_instances_never_overlap() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    rt::block_on(async {
        let margin = Duration::from_secs(3);
        let probe = Arc::new(Probe::default());
        let mut nodes = nodes_with(3, &probe, |s| s.down_removal_margin = Some(margin));
        let host = cut_off_the_host(&mut nodes).await;
        let host_node = host.cluster.self_node().clone();
        eventually("the cut-off host is removed", async || {
            nodes[0]
                .cluster
                .state()
                .await
                .is_ok_and(|s| s.members.iter().all(|m| m.node != host_node))
        })
        .await;
        let removed = Instant::now();
        eventually("a new host among the rest", async || {
            nodes.iter().any(hosts)
        })
        .await;
        let waited = removed.elapsed();
        assert!(
            waited >= margin - Duration::from_secs(1),
            "took over {waited:?} after the removal, with a margin of {margin:?}"
        );
        eventually("the old host stopped its instance", async || !hosts(&host)).await;
        assert_eq!(
            probe.max_alive.load(Ordering::SeqCst),
            1,
            "two instances ran at once"
        );
        for n in nodes {
            n.system.shutdown().await;
        }
        host.system.terminate().await;
    });
}

#[test]
fn the_three_oldest_crash_together_and_a_single_instance_runs_again() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let nodes = nodes(7, &probe);
        up_and_hosting(&nodes).await;
        // The three oldest, together, lose contact with the other four.
        let state = nodes[0].cluster.state().await.unwrap();
        let mut by_age: Vec<_> = state.members.clone();
        by_age.sort_by(|a, b| {
            if a.is_older_than(b) {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Greater
            }
        });
        let crashed: BTreeSet<Address> =
            by_age[..3].iter().map(|m| m.node.address.clone()).collect();
        let (gone, rest): (Vec<&Node>, Vec<&Node>) = nodes
            .iter()
            .partition(|n| crashed.contains(n.cluster.self_address()));
        for a in &gone {
            for b in &rest {
                let fa = a.system.remoting().unwrap().fault_injector().unwrap();
                fa.blackhole(b.cluster.self_address(), Direction::Both);
                let fb = b.system.remoting().unwrap().fault_injector().unwrap();
                fb.blackhole(a.cluster.self_address(), Direction::Both);
            }
        }
        let survivors: BTreeSet<Address> = rest
            .iter()
            .map(|n| n.cluster.self_address().clone())
            .collect();
        eventually(
            "one instance among the survivors, none elsewhere",
            async || {
                let members_ok = rest[0]
                    .cluster
                    .state()
                    .await
                    .map(|s| {
                        s.members
                            .iter()
                            .map(|m| m.node.address.clone())
                            .collect::<BTreeSet<_>>()
                            == survivors
                    })
                    .unwrap_or(false);
                members_ok
                    && rest.iter().filter(|n| hosts(n)).count() == 1
                    && gone.iter().all(|n| !hosts(n))
                    && probe.alive.load(Ordering::SeqCst) == 1
            },
        )
        .await;
        for n in nodes {
            n.system.shutdown().await;
        }
    });
}

#[test]
fn the_proxy_loses_nothing_across_a_hand_over() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    rt::block_on(async {
        // The instance is slower than the sender: the hand-over finds
        // messages queued for it, which must be handled, not dropped.
        let probe = Arc::new(Probe {
            slow_records: AtomicBool::new(true),
            ..Probe::default()
        });
        let mut nodes = nodes(3, &probe);
        let first = up_and_hosting(&nodes).await;
        let younger = (first + 1) % 3;
        let proxy = singleton::proxy::<Tickets>(
            &nodes[younger].system,
            &nodes[younger].cluster,
            "tickets",
            ClusterSingletonSettings {
                // Room for everything sent while the slow instance drains.
                buffer_size: 100_000,
                ..singleton_settings()
            },
        )
        .unwrap();
        proxy.ask(NextTicket).await.unwrap();
        // Keep sending while the host leaves and the singleton moves.
        // until the new instance has started, and a little after.
        let sender = {
            let (proxy, probe) = (proxy.clone(), probe.clone());
            rt::spawn(async move {
                let started = Instant::now();
                let mut i = 0u64;
                let mut after_move = 0;
                while after_move < 500 {
                    proxy.tell(Record(i)).unwrap();
                    i += 1;
                    if probe.started.load(Ordering::SeqCst) >= 2 {
                        after_move += 1;
                    }
                    if i.is_multiple_of(50) {
                        rt::sleep(Duration::from_millis(2)).await;
                    }
                    assert!(started.elapsed() < DEADLINE, "the singleton never moved");
                }
                i
            })
        };
        let host_addr = nodes[first].cluster.self_address().clone();
        nodes[younger].cluster.leave(&host_addr);
        let sent = sender.await;
        let leaving = nodes.remove(first);
        eventually("every number recorded", async || {
            probe.recorded.lock().unwrap().len() as u64 >= sent
        })
        .await;
        let got = probe.recorded.lock().unwrap().clone();
        assert_eq!(
            got,
            (0..sent).collect::<Vec<u64>>(),
            "lost, duplicated or reordered"
        );
        assert!(
            probe.started.load(Ordering::SeqCst) >= 2,
            "the singleton did not move"
        );
        assert_eq!(probe.max_alive.load(Ordering::SeqCst), 1);
        for n in nodes {
            n.system.shutdown().await;
        }
        leaving.system.shutdown().await;
    });
}

#[test]
fn a_full_proxy_buffer_drops_the_oldest_and_counts_it() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let nodes = nodes(1, &probe);
        all_up(&nodes, 1).await;
        // No member has the role: the proxy never finds an instance.
        let proxy = singleton::proxy::<Tickets>(
            &nodes[0].system,
            &nodes[0].cluster,
            "tickets",
            ClusterSingletonSettings {
                role: Some("absent".into()),
                buffer_size: 10,
                ..singleton_settings()
            },
        )
        .unwrap();
        for i in 0..25 {
            proxy.tell(Record(i)).unwrap();
        }
        // Asked behind the 25 tells: each has been buffered or dropped.
        assert_eq!(proxy.dropped().await, 15);
        assert!(probe.recorded.lock().unwrap().is_empty());
        for n in nodes {
            n.system.shutdown().await;
        }
    });
}

/// An instance stuck in a handler cannot drain its queue at a hand-over:
/// after half the exit phase's timeout it is stopped, so the hand-over
/// completes, and the next host starts only once it has stopped.
#[test]
fn a_hand_over_stops_an_instance_that_does_not_drain_in_time() {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let mut nodes = nodes_with(2, &probe, |s| {
            s.coordinated_shutdown
                .phase_timeouts
                .insert(ShutdownPhase::ClusterExiting, Duration::from_secs(4));
        });
        let first = up_and_hosting(&nodes).await;
        let other = 1 - first;
        let proxy = singleton::proxy::<Tickets>(
            &nodes[other].system,
            &nodes[other].cluster,
            "tickets",
            singleton_settings(),
        )
        .unwrap();
        assert_eq!(proxy.ask(NextTicket).await.unwrap(), 1);
        // The instance is stuck from now on, with a message queued behind.
        proxy.tell(Stuck).unwrap();
        proxy.tell(Record(0)).unwrap();
        let leaving_addr = nodes[first].cluster.self_address().clone();
        let left = Instant::now();
        nodes[other].cluster.leave(&leaving_addr);
        eventually("a new host", async || {
            hosts(&nodes[other]) && probe.started.load(Ordering::SeqCst) >= 2
        })
        .await;
        assert_eq!(
            probe.max_alive.load(Ordering::SeqCst),
            1,
            "two instances at once"
        );
        // Not before the drain's limit (2 s): the stuck instance was not
        // stopped at once.
        assert!(
            left.elapsed() >= Duration::from_secs(2),
            "{:?}",
            left.elapsed()
        );
        // The proxy reaches the new instance.
        let t = rt::timeout(DEADLINE, proxy.ask(NextTicket))
            .await
            .expect("proxy answers")
            .unwrap();
        assert_eq!(t, 1);
        let leaving = nodes.remove(first);
        for n in nodes {
            n.system.shutdown().await;
        }
        leaving.system.shutdown().await;
    });
}
