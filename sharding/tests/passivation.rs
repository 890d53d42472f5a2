//! Passivation: explicit (`ctx.passivate()`), idle under a real clock,
//! and an active-entity limit with its replacement policy, changed at run
//! time. Messages to a passivating entity are never lost.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use troupe_core::rt;
use troupe_sharding::{PassivationSettings, ShardingSettings};

fn with_passivation(passivation: PassivationSettings) -> ShardingSettings {
    ShardingSettings {
        passivation,
        ..sharding_settings()
    }
}

/// Live entities in the region state of `node`.
async fn live_entities(node: &Node) -> BTreeSet<String> {
    node.sharding
        .region_state::<Counter>()
        .await
        .unwrap()
        .shards
        .into_iter()
        .flat_map(|s| s.entity_ids)
        .collect()
}

#[test]
fn explicit_passivation_hands_later_messages_to_the_next_incarnation() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let node = bare_node(None, |_| {});
        // A stop message the entity takes its time with: messages sent
        // meanwhile must wait for the next incarnation.
        let config = counter_config(&node, &probe).with_stop_message(Linger(300));
        node.start_counter_with(config, with_passivation(PassivationSettings::none()));
        let c = node.counter("p-1");
        assert_eq!(c.ask(Add(1)).await.unwrap(), 1);
        for round in 0..3u64 {
            for i in 0..50 {
                c.tell(Seq(round * 100 + i)).unwrap();
            }
            c.tell(PassivateMe).unwrap();
            eventually("the passivation began", async || {
                !live_entities(&node).await.contains("p-1")
            })
            .await;
            for i in 50..100 {
                c.tell(Seq(round * 100 + i)).unwrap();
            }
            let want = round as usize + 2;
            eventually("the next incarnation started", async || {
                probe.starts("p-1") >= want
            })
            .await;
        }
        let expected: Vec<u64> = (0..300).collect();
        eventually(
            "every message reached an incarnation, in order",
            async || probe.received("p-1") == expected,
        )
        .await;
        assert_eq!(probe.starts("p-1"), 4);
        assert_eq!(probe.state(|p| p.max_alive), 1, "two incarnations at once");
        // The last incarnation started with messages, so it runs.
        assert_eq!(
            live_entities(&node).await,
            BTreeSet::from(["p-1".to_string()])
        );
        shutdown_all([node]).await;
    });
}

#[test]
fn idle_entities_are_passivated_after_the_idle_timeout_and_busy_ones_are_not() {
    init_logging();
    rt::block_on(async {
        let timeout = Duration::from_millis(600);
        let probe = Arc::new(Probe::default());
        let node = start_nodes(
            1,
            &probe,
            with_passivation(PassivationSettings::idle(timeout)),
        )
        .remove(0);
        let idle = node.counter("idle-1");
        let busy = node.counter("busy-1");
        idle.ask(Add(1)).await.unwrap();
        let last_idle_message = Instant::now();
        busy.ask(Add(1)).await.unwrap();
        // The busy one gets a message every 100 ms for four timeouts.
        let until = Instant::now() + timeout * 4;
        let mut idle_stopped_after = None;
        while Instant::now() < until {
            busy.ask(Add(1)).await.unwrap();
            if idle_stopped_after.is_none() && !probe.alive_entities().contains("idle-1") {
                idle_stopped_after = Some(last_idle_message.elapsed());
            }
            rt::sleep(Duration::from_millis(100)).await;
        }
        eventually("the idle entity is passivated", async || {
            !probe.alive_entities().contains("idle-1")
        })
        .await;
        let after = idle_stopped_after.unwrap_or_else(|| last_idle_message.elapsed());
        assert!(
            after >= timeout,
            "passivated after {after:?}, before the idle timeout {timeout:?}"
        );
        assert_eq!(probe.starts("busy-1"), 1, "the busy entity was passivated");
        assert_eq!(
            live_entities(&node).await,
            BTreeSet::from(["busy-1".to_string()]),
            "region state lists only live entities"
        );
        // A message brings the idle one back, with a fresh state.
        assert_eq!(idle.ask(Add(5)).await.unwrap(), 5);
        assert_eq!(probe.starts("idle-1"), 2);
        shutdown_all([node]).await;
    });
}

#[test]
fn an_active_entity_limit_passivates_the_least_recently_used_and_can_change_at_run_time() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = ShardingSettings {
            number_of_shards: 1,
            ..with_passivation(PassivationSettings::least_recently_used(10))
        };
        let node = start_nodes(1, &probe, settings).remove(0);
        for i in 0..50 {
            assert_eq!(node.counter(format!("e-{i}")).ask(Add(1)).await.unwrap(), 1);
        }
        let last_ten: BTreeSet<String> = (40..50).map(|i| format!("e-{i}")).collect();
        eventually("the ten most recently used entities remain", async || {
            probe.alive_entities() == last_ten
        })
        .await;
        assert_eq!(live_entities(&node).await, last_ten);

        // e-40 is used again, then a new entity comes: e-41 is now the least
        // recently used.
        assert_eq!(node.counter("e-40").ask(Add(1)).await.unwrap(), 2);
        node.counter("e-50").ask(Add(1)).await.unwrap();
        let mut expected = last_ten.clone();
        expected.remove("e-41");
        expected.insert("e-50".to_string());
        eventually("e-41 is passivated", async || {
            probe.alive_entities() == expected
        })
        .await;

        // Lowered at run time: the shard passivates down to its new share.
        node.sharding.set_active_entity_limit::<Counter>(4).unwrap();
        eventually("four entities remain", async || probe.alive_count() == 4).await;
        let kept: BTreeSet<String> = ["e-48", "e-49", "e-40", "e-50"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(probe.alive_entities(), kept);
        // Every message was delivered: each passivated entity got its one.
        for i in 0..51 {
            assert!(probe.starts(&format!("e-{i}")) >= 1);
        }
        assert!(node.sharding.set_active_entity_limit::<Counter>(0).is_err());
        shutdown_all([node]).await;
    });
}

#[test]
fn messages_racing_a_limit_passivation_are_not_lost() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = ShardingSettings {
            number_of_shards: 4,
            ..with_passivation(PassivationSettings::least_recently_used(8))
        };
        let node = start_nodes(1, &probe, settings).remove(0);
        // Many senders, many entities, a small limit: entities are
        // passivated while messages for them are on the way.
        let mut senders = Vec::new();
        for s in 0..4u64 {
            let refs: Vec<_> = (0..40)
                .map(|i| node.counter(format!("r-{s}-{i}")))
                .collect();
            senders.push(rt::spawn(async move {
                for n in 0..20u64 {
                    for r in &refs {
                        r.tell(Seq(n)).unwrap();
                    }
                    rt::sleep(Duration::from_millis(2)).await;
                }
            }));
        }
        for s in senders {
            s.await;
        }
        let expected: Vec<u64> = (0..20).collect();
        eventually("every entity got its 20 messages in order", async || {
            (0..4).all(|s| (0..40).all(|i| probe.received(&format!("r-{s}-{i}")) == expected))
        })
        .await;
        assert_eq!(probe.state(|p| p.max_alive), 1, "two incarnations at once");
        eventually("the limit holds", async || probe.alive_count() <= 8).await;
        shutdown_all([node]).await;
    });
}
