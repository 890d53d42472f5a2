//! Nodes that leave gracefully, as in Pekko's
//! `ClusterShardingGracefulShutdownSpec`,
//! `ClusterShardingGracefulShutdownOldestSpec` and
//! `ClusterShardingLeavingSpec` (here several actor systems in one
//! process, on loopback): the leaving node hands its shards off during its
//! coordinated shutdown while another node keeps sending, and every
//! message arrives once and in order; a region that hosts nothing stops at
//! once; and entities that ignore their hand-off stop message are stopped
//! after `handoff-timeout`, so that the shard moves all the same.

mod support;

use futures_lite::future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::*;
use troupe_cluster::coordinated_shutdown::{Phase, Reason};
use troupe_core::rt;
use troupe_sharding::{EntityRef, ShardingSettings};

const ASK: Duration = Duration::from_secs(10);

/// Tells `Seq(n)` to every one of `refs`, n = 0, 1, 2, ... every 5 ms,
/// until `stop`; `sent` is how many rounds have gone.
async fn send_until(refs: &[EntityRef<Counter>], sent: &AtomicU64, stop: &AtomicBool) {
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        for r in refs {
            r.tell(Seq(n)).unwrap();
        }
        n += 1;
        sent.store(n, Ordering::Release);
        rt::sleep(Duration::from_millis(5)).await;
    }
}

/// `n` nodes running the counters, all Up, the coordinator on the first;
/// their coordinated shutdown gives the regions' hand-offs 30 s.
async fn nodes_that_may_leave(
    n: usize,
    probe: &Arc<Probe>,
    settings: ShardingSettings,
) -> Vec<Node> {
    let nodes = start_nodes_with(n, probe, settings, |s| {
        s.coordinated_shutdown.phase_timeouts.insert(
            Phase::ClusterShardingShutdownRegion,
            Duration::from_secs(30),
        );
    });
    let all: Vec<&Node> = nodes.iter().collect();
    all_up(&all, n).await;
    assert_eq!(oldest(&all).await, 0, "the coordinator runs on the first");
    nodes
}

/// Stops `send_until` once it has sent 20 more rounds.
async fn stop_after_20_more(sent: &AtomicU64, stop: &AtomicBool) {
    let after = sent.load(Ordering::Acquire) + 20;
    eventually("messages flow", async || {
        sent.load(Ordering::Acquire) >= after
    })
    .await;
    stop.store(true, Ordering::Release);
}

/// Node `leaver` of three leaves through its coordinated shutdown while
/// node `sender` sends numbered messages to 30 counters without pause;
/// every message arrives once and in order, and the counters of the
/// leaving node run elsewhere afterwards.
async fn leave_while_messages_flow(leaver: usize, sender: usize, hold_the_region_phase: bool) {
    let probe = Arc::new(Probe::default());
    let mut nodes = nodes_that_may_leave(3, &probe, sharding_settings()).await;
    let ids: Vec<String> = (0..30).map(|i| format!("l{i}")).collect();
    let refs: Vec<_> = ids
        .iter()
        .map(|id| nodes[sender].counter(id.as_str()))
        .collect();
    for r in &refs {
        assert_eq!(r.ask_timeout(Add(1), ASK).await.unwrap(), 1);
    }
    let leaving_name = nodes[leaver].name();
    let mut on_leaver = Vec::new();
    for (id, r) in ids.iter().zip(&refs) {
        if r.ask_timeout(WhereAreYou, ASK).await.unwrap() == leaving_name {
            on_leaver.push(id.clone());
        }
    }
    assert!(!on_leaver.is_empty(), "the leaving node hosts entities");

    // Optionally the region's phase is held open (Pekko's
    // "postpone-actual-stop"): the hand-off must complete on its own,
    // while the node is still an Up member, not when it is removed.
    let (release, held) = async_channel::bounded::<()>(1);
    if hold_the_region_phase {
        nodes[leaver]
            .cluster
            .coordinated_shutdown()
            .add_task(
                Phase::ClusterShardingShutdownRegion,
                "postpone-actual-stop",
                move || async move {
                    let _ = held.recv().await;
                },
            )
            .unwrap();
    }

    let sent = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let send = send_until(&refs, &sent, &stop);
    let leave = async {
        // Some messages before the leave begins.
        eventually("messages flow", async || sent.load(Ordering::Acquire) >= 20).await;
        let shutdown = nodes[leaver]
            .cluster
            .coordinated_shutdown()
            .run(Reason::Unknown);
        if hold_the_region_phase {
            let rest: Vec<&Node> = nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != leaver)
                .map(|(_, n)| n)
                .collect();
            for id in &on_leaver {
                eventually("the entity was handed off", async || {
                    let at = rest[0]
                        .counter(id.as_str())
                        .ask_timeout(WhereAreYou, Duration::from_secs(2))
                        .await;
                    matches!(at, Ok(n) if n != leaving_name)
                })
                .await;
            }
            let st = rest[0].cluster.state().await.unwrap();
            assert!(
                st.members
                    .iter()
                    .any(|m| m.node.address == nodes[leaver].address()
                        && m.status == troupe_cluster::MemberStatus::Up),
                "handed off while the node is still Up"
            );
            release.send(()).await.unwrap();
        }
        shutdown.await;
        let gone = nodes.iter().enumerate().filter(|(i, _)| *i != leaver);
        let rest: Vec<&Node> = gone.map(|(_, n)| n).collect();
        members_are(&rest, &rest).await;
        // A little more traffic after the leave.
        stop_after_20_more(&sent, &stop).await;
    };
    future::zip(send, leave).await;
    let total = sent.load(Ordering::Acquire);
    let leaving = nodes.remove(leaver);
    let sender_node = if sender > leaver { sender - 1 } else { sender };
    // The last ask is answered after every earlier message from the sender.
    for id in &ids {
        let c = nodes[sender_node].counter(id.as_str());
        c.ask_timeout(Add(0), ASK).await.unwrap();
        let want: Vec<u64> = (0..total).collect();
        let got = probe.received(id);
        let missing: Vec<u64> = want.iter().filter(|n| !got.contains(n)).copied().collect();
        assert!(
            missing.is_empty(),
            "{id}: {missing:?} of {total} never arrived"
        );
        assert_eq!(got, want, "{id}: every message once, in order");
    }
    for id in &on_leaver {
        let at = nodes[0]
            .counter(id.as_str())
            .ask_timeout(WhereAreYou, ASK)
            .await
            .unwrap();
        assert_ne!(at, leaving_name);
    }
    let rest: Vec<&Node> = nodes.iter().collect();
    assert_no_shard_twice(&rest).await;
    assert_eq!(probe.state(|p| p.max_alive), 1);
    shutdown_all(nodes).await;
    leaving.system.shutdown().await;
}

#[test]
fn a_leaving_node_hands_off_while_messages_flow_and_none_is_lost_or_reordered() {
    init_logging();
    rt::block_on(leave_while_messages_flow(2, 0, true));
}

#[test]
fn the_coordinator_s_node_leaves_while_messages_flow_and_none_is_lost_or_reordered() {
    init_logging();
    rt::block_on(leave_while_messages_flow(0, 1, false));
}

#[test]
fn a_region_that_hosts_nothing_shuts_down_at_once() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = ShardingSettings {
            // No rebalancing: the newcomer stays empty.
            rebalance_interval: Duration::from_secs(60),
            ..sharding_settings()
        };
        let mut nodes = start_nodes(2, &probe, settings.clone());
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 2).await;
        for i in 0..20 {
            nodes[0]
                .counter(format!("e{i}"))
                .ask_timeout(Add(1), ASK)
                .await
                .unwrap();
        }
        let empty = start_node(&[nodes[0].address()], &probe, settings.clone());
        nodes.push(empty);
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 3).await;
        eventually("the new region registered", async || {
            nodes[2]
                .sharding
                .is_registered::<Counter>()
                .await
                .unwrap_or(false)
        })
        .await;
        assert!(nodes[2].hosted_shards().await.is_empty());

        // How long the region's phase takes: from the end of the phase
        // before it to the start of the phase after it.
        let marks: Arc<Mutex<Vec<(Phase, Instant)>>> = Arc::default();
        let shutdown = nodes[2].cluster.coordinated_shutdown();
        for phase in [Phase::BeforeClusterShutdown, Phase::ClusterLeave] {
            let marks = marks.clone();
            shutdown
                .add_task(phase, "mark", move || async move {
                    marks.lock().unwrap().push((phase, Instant::now()));
                })
                .unwrap();
        }
        shutdown.run(Reason::Unknown).await;
        let marks = marks.lock().unwrap().clone();
        assert_eq!(marks.len(), 2, "{marks:?}");
        let took = marks[1].1 - marks[0].1;
        assert!(
            took < Duration::from_secs(1),
            "the empty region took {took:?} to shut down"
        );
        let leaving = nodes.pop().unwrap();
        let rest: Vec<&Node> = nodes.iter().collect();
        members_are(&rest, &rest).await;
        for i in 0..20 {
            let v = nodes[1]
                .counter(format!("e{i}"))
                .ask_timeout(Add(0), ASK)
                .await
                .unwrap();
            assert_eq!(v, 1, "nothing moved");
        }
        shutdown_all(nodes).await;
        leaving.system.shutdown().await;
    });
}

#[test]
fn entities_that_ignore_their_stop_message_are_stopped_after_the_handoff_timeout() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let handoff_timeout = Duration::from_secs(1);
        let settings = ShardingSettings {
            handoff_timeout,
            ..sharding_settings()
        };
        let first = bare_node(None, |_| {});
        let seed = first.address();
        let mut nodes = vec![
            first,
            bare_node(Some(&seed), |_| {}),
            bare_node(Some(&seed), |_| {}),
        ];
        for n in &nodes {
            // The hand-off stop message is one the counter ignores.
            n.start_counter_with(
                counter_config(n, &probe).with_stop_message(Ignored),
                settings.clone(),
            );
        }
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 3).await;
        let ids: Vec<String> = (0..30).map(|i| format!("h{i}")).collect();
        let refs: Vec<_> = ids.iter().map(|id| nodes[0].counter(id.as_str())).collect();
        let leaving_name = nodes[2].name();
        let mut on_leaver = Vec::new();
        for (id, r) in ids.iter().zip(&refs) {
            assert_eq!(r.ask_timeout(Add(1), ASK).await.unwrap(), 1);
            r.tell(Seq(0)).unwrap();
            if r.ask_timeout(WhereAreYou, ASK).await.unwrap() == leaving_name {
                on_leaver.push(id.clone());
            }
        }
        assert!(!on_leaver.is_empty());

        let began = Instant::now();
        let shutdown = nodes[2].cluster.coordinated_shutdown().run(Reason::Unknown);
        // Messages sent during the hand-off wait for the new home.
        for r in &refs {
            r.tell(Seq(1)).unwrap();
        }
        for id in &on_leaver {
            eventually("the entity moved", async || {
                let at = nodes[0]
                    .counter(id.as_str())
                    .ask_timeout(WhereAreYou, ASK)
                    .await
                    .unwrap();
                at != leaving_name
            })
            .await;
        }
        let took = began.elapsed();
        assert!(
            took >= handoff_timeout,
            "the entities ignored the stop message, yet the hand-off took only {took:?}"
        );
        shutdown.await;
        let leaving = nodes.pop().unwrap();
        let rest: Vec<&Node> = nodes.iter().collect();
        members_are(&rest, &rest).await;
        for (id, r) in ids.iter().zip(&refs) {
            r.ask_timeout(Add(0), ASK).await.unwrap();
            assert_eq!(probe.received(id), vec![0, 1], "{id}");
        }
        probe.state(|p| {
            for id in &on_leaver {
                assert_eq!(
                    p.alive_on.get(&(id.clone(), leaving_name.clone())),
                    Some(&0),
                    "{id} was stopped on the leaving node"
                );
            }
            assert_eq!(p.max_alive, 1, "never two incarnations at once");
        });
        shutdown_all(nodes).await;
        leaving.system.shutdown().await;
    });
}

/// A node leaves gracefully while another is cut off (blackholed both
/// ways, unreachable until the split brain resolver downs it). The
/// hand-offs of the leaving node's shards begin all the same (the regions
/// that can be reached buffer those shards' messages), and past
/// `handoff-timeout` they are not abandoned: they wait for the cut-off
/// region, whose removal counts as its acknowledgement, and then move.
/// The sender's messages to the entities that were not on the cut-off
/// node arrive once and in order, and the leaving node's entities run
/// elsewhere.
#[test]
fn a_node_leaves_while_another_is_cut_off_and_none_of_the_reachable_messages_is_lost() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = ShardingSettings {
            handoff_timeout: Duration::from_secs(1),
            ..sharding_settings()
        };
        let mut nodes = nodes_that_may_leave(4, &probe, settings).await;
        let (sender, leaver, victim) = (1, 2, 3);
        let (leaving_name, victim_name) = (nodes[leaver].name(), nodes[victim].name());
        // Counters that do not live on the node to be cut off (its
        // entities' messages are lost with it, as in a crash), some of them
        // on the leaving node.
        let mut ids = Vec::new();
        let mut on_leaver = Vec::new();
        for i in 0..60 {
            let id = format!("c{i}");
            let at = nodes[sender]
                .counter(id.as_str())
                .ask_timeout(WhereAreYou, ASK)
                .await
                .unwrap();
            if at == leaving_name {
                on_leaver.push(id.clone());
            }
            if at != victim_name {
                ids.push(id);
            }
        }
        assert!(!on_leaver.is_empty(), "the leaving node hosts entities");
        let refs: Vec<_> = ids
            .iter()
            .map(|id| nodes[sender].counter(id.as_str()))
            .collect();

        let others: Vec<&Node> = (0..3).map(|i| &nodes[i]).collect();
        cut_off(&nodes[victim], &others);
        eventually("the cut-off node is unreachable", async || {
            let s = nodes[0].cluster.state().await.unwrap();
            s.unreachable
                .iter()
                .any(|m| m.node.address == nodes[victim].address())
        })
        .await;

        let sent = AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let send = send_until(&refs, &sent, &stop);
        let leave = async {
            eventually("messages flow", async || sent.load(Ordering::Acquire) >= 20).await;
            nodes[leaver]
                .cluster
                .coordinated_shutdown()
                .run(Reason::Unknown)
                .await;
            let rest: Vec<&Node> = (0..2).map(|i| &nodes[i]).collect();
            members_are(&rest, &rest).await;
            stop_after_20_more(&sent, &stop).await;
        };
        future::zip(send, leave).await;
        let total = sent.load(Ordering::Acquire);
        for id in &ids {
            nodes[sender]
                .counter(id.as_str())
                .ask_timeout(Add(0), ASK)
                .await
                .unwrap();
            let want: Vec<u64> = (0..total).collect();
            assert_eq!(
                probe.received(id),
                want,
                "{id}: every message once, in order"
            );
        }
        for id in &on_leaver {
            let at = nodes[0]
                .counter(id.as_str())
                .ask_timeout(WhereAreYou, ASK)
                .await
                .unwrap();
            assert_ne!(at, leaving_name);
        }
        let rest: Vec<&Node> = (0..2).map(|i| &nodes[i]).collect();
        assert_no_shard_twice(&rest).await;
        let victim_node = nodes.remove(victim);
        let leaving = nodes.remove(leaver);
        shutdown_all(nodes).await;
        leaving.system.shutdown().await;
        victim_node.system.terminate().await;
    });
}
