//! Remembered entities: started again without any message after a
//! rebalance, after the crash of their node (the coordinator's own), after
//! a restart of the whole cluster from its durable stores (all at once or
//! at a constant rate), after a store failure, and after the shard-id
//! extractor changed. An entity that stops by itself comes back.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::*;
use troupe_cluster::DowningStrategy;
use troupe_core::rt;
use troupe_sharding::{
    EntityConfig, EntityRecoveryStrategy, HashShardIdExtractor, ShardId, ShardIdExtractor,
    ShardingSettings,
};

fn remembering() -> ShardingSettings {
    ShardingSettings {
        remember_entities: true,
        number_of_shards: 10,
        entity_restart_backoff: Duration::from_millis(300),
        ..sharding_settings()
    }
}

fn ids(prefix: &str, n: usize) -> BTreeSet<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

/// Starts every entity of `ids` with a message through `node`.
async fn touch(node: &Node, ids: &BTreeSet<String>) {
    for id in ids {
        node.counter(id.as_str()).ask(Add(1)).await.unwrap();
    }
}

#[test]
fn remembered_entities_start_again_after_a_rebalance_without_a_message() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let first = start_nodes(1, &probe, remembering()).remove(0);
        let all = ids("rb", 30);
        touch(&first, &all).await;
        assert_eq!(probe.alive_entities(), all);
        let second = start_node(&[first.address()], &probe, remembering());
        let second_name = second.name();
        eventually(
            "some entities moved to the new node and run there",
            async || {
                probe.alive_entities() == all
                    && probe.state(|p| {
                        p.started_on
                            .values()
                            .any(|on| on.last() == Some(&second_name) && on.len() == 2)
                    })
            },
        )
        .await;
        assert_eq!(probe.state(|p| p.max_alive), 1, "two incarnations at once");
        shutdown_all([first, second]).await;
    });
}

#[test]
fn remembered_entities_of_a_crashed_coordinator_node_start_elsewhere() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let mut nodes = start_nodes(3, &probe, remembering());
        let all_nodes: Vec<&Node> = nodes.iter().collect();
        all_up(&all_nodes, 3).await;
        assert_eq!(
            oldest(&all_nodes).await,
            0,
            "the coordinator runs on the first"
        );
        let all = ids("cr", 40);
        touch(&nodes[1], &all).await;
        let lost = nodes.remove(0);
        let lost_name = lost.name();
        let on_lost: BTreeSet<String> = probe.state(|p| {
            p.started_on
                .iter()
                .filter(|(_, on)| on.last() == Some(&lost_name))
                .map(|(id, _)| id.clone())
                .collect()
        });
        assert!(!on_lost.is_empty(), "the coordinator's node hosts entities");
        probe.crashed(&lost_name);
        let rest: Vec<&Node> = nodes.iter().collect();
        cut_off(&lost, &rest);
        members_are(&rest, &rest).await;
        eventually(
            "every remembered entity runs again, with no message",
            async || probe.alive_entities() == all,
        )
        .await;
        assert_eq!(probe.state(|p| p.max_alive), 1, "two incarnations at once");
        shutdown_all(nodes).await;
        lost.system.terminate().await;
    });
}

#[test]
fn remembered_entities_come_back_after_a_full_cluster_restart() {
    init_logging();
    rt::block_on(async {
        let stores = [temp_dir("full-a"), temp_dir("full-b")];
        let store = |i: usize| stores[i].join("ddata.redb");
        let probe = Arc::new(Probe::default());
        let a = durable_node(None, &store(0), |_| {});
        a.start_counter(&probe, remembering());
        let b = durable_node(Some(&a.address()), &store(1), |_| {});
        b.start_counter(&probe, remembering());
        all_up(&[&a, &b], 2).await;
        let all = ids("fr", 25);
        touch(&b, &all).await;
        shutdown_all([a, b]).await;
        assert!(probe.alive_entities().is_empty());

        // The same stores, new processes (new ports): nobody sends anything.
        let probe = Arc::new(Probe::default());
        let started = Instant::now();
        let a = durable_node(None, &store(0), |_| {});
        a.start_counter(&probe, remembering());
        let b = durable_node(Some(&a.address()), &store(1), |_| {});
        b.start_counter(&probe, remembering());
        eventually("every remembered entity runs again", async || {
            probe.alive_entities() == all
        })
        .await;
        let took = started.elapsed();
        assert!(took < Duration::from_secs(10), "recovery took {took:?}");
        shutdown_all([a, b]).await;
        for s in &stores {
            let _ = std::fs::remove_dir_all(s);
        }
    });
}

#[test]
fn constant_rate_recovery_is_paced_as_configured() {
    init_logging();
    rt::block_on(async {
        let dir = temp_dir("constant");
        let store = dir.join("ddata.redb");
        let frequency = Duration::from_millis(300);
        let settings = ShardingSettings {
            number_of_shards: 1,
            entity_recovery_strategy: EntityRecoveryStrategy::Constant {
                frequency,
                number_of_entities: 2,
            },
            ..remembering()
        };
        let probe = Arc::new(Probe::default());
        let node = durable_node(None, &store, |_| {});
        node.start_counter(&probe, settings.clone());
        let all = ids("cn", 10);
        touch(&node, &all).await;
        shutdown_all([node]).await;

        let probe = Arc::new(Probe::default());
        let node = durable_node(None, &store, |_| {});
        node.start_counter(&probe, settings);
        eventually("every remembered entity runs again", async || {
            probe.alive_entities() == all
        })
        .await;
        let mut starts: Vec<Instant> =
            probe.state(|p| p.started_at.values().flatten().copied().collect());
        starts.sort();
        assert_eq!(starts.len(), 10);
        // Five batches of two, `frequency` apart.
        let spread = starts[9] - starts[0];
        assert!(
            spread >= frequency * 4 - Duration::from_millis(50),
            "ten entities started within {spread:?}"
        );
        for batch in starts.chunks(2).collect::<Vec<_>>().windows(2) {
            let gap = batch[1][0] - batch[0][0];
            assert!(
                gap >= frequency - Duration::from_millis(50),
                "batches {gap:?} apart"
            );
        }
        shutdown_all([node]).await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_failing_remember_store_is_retried_and_waiting_messages_are_not_lost() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let write_timeout = Duration::from_millis(800);
        let settings = ShardingSettings {
            updating_state_timeout: write_timeout,
            ..remembering()
        };
        // Cut-offs here must not down anyone.
        let nodes = start_nodes_with(3, &probe, settings, |s| {
            s.downing.strategy = DowningStrategy::None;
        });
        let all_nodes: Vec<&Node> = nodes.iter().collect();
        all_up(&all_nodes, 3).await;
        // Every shard allocated, so that the homes are known.
        touch(&nodes[0], &ids("warm", 60)).await;
        let lonely = &nodes[2];
        let hosted = lonely.hosted_shards().await;
        let extractor = HashShardIdExtractor::new(10);
        let id = (0..)
            .map(|i| format!("late{i}"))
            .find(|id| hosted.contains(&*extractor.shard_id(id)))
            .unwrap();
        // The node hosting the entity's shard cannot reach a majority.
        lonely.blackhole(&nodes[0]);
        lonely.blackhole(&nodes[1]);
        let entity = lonely.counter(id.as_str());
        for n in 0..10 {
            entity.tell(Seq(n)).unwrap();
        }
        // The fault lasts two write timeouts and a retry: the write failed
        // at least once.
        rt::sleep(write_timeout * 2 + Duration::from_millis(400)).await;
        assert_eq!(probe.starts(&id), 0, "started before it was remembered");
        for other in [&nodes[0], &nodes[1]] {
            let f = lonely.system.remoting().unwrap().fault_injector().unwrap();
            f.pass_through(&other.address());
            let g = other.system.remoting().unwrap().fault_injector().unwrap();
            g.pass_through(&lonely.address());
        }
        let expected: Vec<u64> = (0..10).collect();
        eventually("the entity got every message, in order", async || {
            probe.received(&id) == expected
        })
        .await;
        assert_eq!(probe.starts(&id), 1);
        shutdown_all(nodes).await;
    });
}

/// Entity ids are numbers; the shard is the number modulo 10, plus
/// `offset`.
struct ModuloExtractor {
    offset: u64,
}

impl ShardIdExtractor for ModuloExtractor {
    fn shard_id(&self, entity: &str) -> ShardId {
        let n: u64 = entity.parse().unwrap_or(0);
        ShardId::from((n % 10 + self.offset).to_string())
    }
}

#[test]
fn remembered_entities_move_to_their_new_shard_when_the_extractor_changes() {
    init_logging();
    rt::block_on(async {
        let dir = temp_dir("extractor");
        let store = dir.join("ddata.redb");
        let run = async |offset: u64, first_time: bool| {
            let probe = Arc::new(Probe::default());
            let node = durable_node(None, &store, |_| {});
            let config: EntityConfig<Counter> =
                counter_config(&node, &probe).with_shard_id_extractor(ModuloExtractor { offset });
            node.start_counter_with(config, remembering());
            if first_time {
                for id in ["1", "11", "21"] {
                    node.counter(id).ask(Add(1)).await.unwrap();
                }
            }
            let expected_shard = (1 + offset).to_string();
            eventually("the entities run in their shard", async || {
                let state = node.sharding.region_state::<Counter>().await.unwrap();
                let mut by_shard = state
                    .shards
                    .iter()
                    .filter(|s| !s.entity_ids.is_empty())
                    .map(|s| (s.shard_id.clone(), s.entity_ids.clone()));
                by_shard.next()
                    == Some((
                        expected_shard.clone(),
                        vec!["1".to_string(), "11".to_string(), "21".to_string()],
                    ))
                    && by_shard.next().is_none()
            })
            .await;
            assert_eq!(probe.state(|p| p.max_alive), 1);
            shutdown_all([node]).await;
        };
        run(0, true).await;
        // Changed: shard 1's remembered entities belong to shard 2 now.
        run(1, false).await;
        // And they are remembered there.
        run(1, false).await;
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_remembered_entity_that_stops_by_itself_is_restarted_after_the_backoff() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let node = start_nodes(1, &probe, remembering()).remove(0);
        let c = node.counter("self-stop");
        c.ask(Add(1)).await.unwrap();
        let stopped_at = Instant::now();
        c.tell(StopCounter).unwrap();
        eventually("it runs again without a message", async || {
            probe.starts("self-stop") == 2 && probe.alive_entities().contains("self-stop")
        })
        .await;
        let after = stopped_at.elapsed();
        assert!(
            after >= Duration::from_millis(300),
            "restarted after {after:?}"
        );

        // Passivated, it is forgotten: it stays stopped.
        c.tell(PassivateMe).unwrap();
        eventually("it is passivated", async || {
            !probe.alive_entities().contains("self-stop")
        })
        .await;
        shutdown_all([node]).await;

        // Without remembering, an entity that stops by itself just ends.
        let probe = Arc::new(Probe::default());
        let node = start_nodes(1, &probe, sharding_settings()).remove(0);
        let c = node.counter("plain");
        c.ask(Add(1)).await.unwrap();
        c.tell(StopCounter).unwrap();
        eventually("it stopped", async || probe.alive_entities().is_empty()).await;
        assert_eq!(
            c.ask(Add(1)).await.unwrap(),
            1,
            "the next message starts it"
        );
        assert_eq!(probe.starts("plain"), 2);
        shutdown_all([node]).await;
    });
}

#[test]
fn messages_during_a_remembered_stop_or_a_restart_backoff_start_the_entity_at_once() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let node = bare_node(None, |_| {});
        // A slow stop: messages arrive while it passivates, then while its
        // stop is being remembered.
        let config = counter_config(&node, &probe).with_stop_message(Linger(300));
        let settings = ShardingSettings {
            entity_restart_backoff: Duration::from_secs(30),
            ..remembering()
        };
        node.start_counter_with(config, settings);
        let c = node.counter("life");
        c.ask(Add(1)).await.unwrap();
        c.tell(PassivateMe).unwrap();
        for n in 0..20 {
            c.tell(Seq(n)).unwrap();
            rt::sleep(Duration::from_millis(25)).await;
        }
        let expected: Vec<u64> = (0..20).collect();
        eventually(
            "every message reached an incarnation, in order",
            async || probe.received("life") == expected,
        )
        .await;
        eventually("it runs again", async || {
            probe.alive_entities().contains("life")
        })
        .await;
        assert_eq!(probe.state(|p| p.max_alive), 1, "two incarnations at once");

        // Stopped by itself: it would come back after 30 s, but a message
        // starts it at once.
        let starts = probe.starts("life");
        c.tell(StopCounter).unwrap();
        eventually("it stopped", async || {
            !probe.alive_entities().contains("life")
        })
        .await;
        let asked = Instant::now();
        assert_eq!(c.ask(Add(2)).await.unwrap(), 2);
        assert!(asked.elapsed() < Duration::from_secs(10));
        assert_eq!(probe.starts("life"), starts + 1);
        shutdown_all([node]).await;
    });
}

#[test]
fn an_automatic_passivation_asked_for_with_remembered_entities_is_refused() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let node = bare_node(None, |_| {});
        let settings = ShardingSettings {
            passivation: troupe_sharding::PassivationSettings::least_recently_used(100),
            ..remembering()
        };
        let err = node
            .sharding
            .start_entity(counter_config(&node, &probe), settings)
            .unwrap_err();
        match &err {
            troupe_sharding::ShardingError::Settings(why) => {
                assert!(why.contains("sharding.passivation"), "{why}");
                assert!(why.contains("remember-entities"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // The default (idle) is turned off quietly, and nothing was left
        // half-started by the refusal.
        node.start_counter(&probe, remembering());
        assert_eq!(node.counter("x").ask(Add(3)).await.unwrap(), 3);
        shutdown_all([node]).await;
    });
}
