//! Cluster sharding across several actor systems in one process (real TCP
//! on loopback): allocation on one node and on two, tell and ask from any
//! node, rebalancing to new nodes without loss or duplicate incarnations,
//! graceful shutdown of a region, and a crashed node's shards allocated
//! again.

mod support;

use std::sync::Arc;
use std::time::Duration;
use support::*;
use troupe_core::rt;

#[test]
fn one_node_starts_entities_on_demand_and_keeps_their_state() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let nodes = start_nodes(1, &probe, sharding_settings());
        all_up(&[&nodes[0]], 1).await;
        let s = &nodes[0].sharding;
        let a = s.entity_ref::<Counter>("a").unwrap();
        let b = s.entity_ref::<Counter>("b").unwrap();
        a.tell(Add(5)).unwrap();
        assert_eq!(a.ask(Add(1)).await.unwrap(), 6);
        assert_eq!(b.ask(Add(2)).await.unwrap(), 2);
        assert_eq!(a.ask(Add(0)).await.unwrap(), 6);
        // Once the entity runs and its shard's home is known, messages go
        // straight to it: none more through the region actor.
        let before = s.routing_stats::<Counter>().unwrap();
        assert!(
            before.via_region >= 1,
            "the first message went through the region"
        );
        for _ in 0..100 {
            a.tell(Add(0)).unwrap();
        }
        assert_eq!(a.ask(Add(0)).await.unwrap(), 6);
        assert_eq!(s.routing_stats::<Counter>().unwrap(), before);
        let state = s.region_state::<Counter>().await.unwrap();
        let entities: Vec<String> = state
            .shards
            .iter()
            .flat_map(|sh| sh.entity_ids.clone())
            .collect();
        assert!(entities.contains(&"a".to_string()) && entities.contains(&"b".to_string()));
        assert_eq!(probe.state(|p| p.max_alive), 1);
        nodes[0].system.shutdown().await;
    });
}

#[test]
fn two_nodes_share_the_shards_and_reach_every_entity_from_either_side() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let nodes = start_nodes(2, &probe, sharding_settings());
        all_up(&[&nodes[0], &nodes[1]], 2).await;
        // Every entity answers from both nodes, with one shared state.
        for i in 0..40 {
            let id = format!("e{i}");
            let from0 = nodes[0]
                .sharding
                .entity_ref::<Counter>(id.as_str())
                .unwrap();
            let from1 = nodes[1]
                .sharding
                .entity_ref::<Counter>(id.as_str())
                .unwrap();
            assert_eq!(from0.ask(Add(1)).await.unwrap(), 1, "{id}");
            assert_eq!(from1.ask(Add(1)).await.unwrap(), 2, "{id}");
        }
        let per_node = shards_per_node(&[&nodes[0], &nodes[1]]).await;
        assert!(
            per_node.values().all(|n| *n > 0),
            "both nodes host shards: {per_node:?}"
        );
        assert_eq!(probe.state(|p| p.max_alive), 1);
        for n in &nodes {
            n.system.shutdown().await;
        }
    });
}

#[test]
fn new_nodes_get_shards_by_rebalancing_and_no_message_is_lost() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let settings = sharding_settings();
        let mut nodes = start_nodes(1, &probe, settings.clone());
        all_up(&[&nodes[0]], 1).await;
        let ids: Vec<String> = (0..60).map(|i| format!("r{i}")).collect();
        let refs: Vec<_> = ids
            .iter()
            .map(|id| {
                nodes[0]
                    .sharding
                    .entity_ref::<Counter>(id.as_str())
                    .unwrap()
            })
            .collect();
        for r in &refs {
            r.ask(Add(0)).await.unwrap();
        }
        // A steady stream of numbered messages while two nodes join.
        let seeds = vec![nodes[0].address()];
        let sender = {
            let refs = refs.clone();
            rt::spawn(async move {
                for n in 0..400u64 {
                    for r in &refs {
                        r.tell(Seq(n)).unwrap();
                    }
                    rt::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        nodes.push(start_node(&seeds, &probe, settings.clone()));
        nodes.push(start_node(&seeds, &probe, settings.clone()));
        sender.await;
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 3).await;
        eventually("each node hosts about a third of the shards", async || {
            let per = shards_per_node(&all).await;
            per.values().all(|n| *n >= 8)
        })
        .await;
        // Everything sent arrives, once, in order (the last message is
        // answered only after every earlier one).
        for r in &refs {
            r.ask(Add(0)).await.unwrap();
        }
        eventually("every numbered message arrived", async || {
            probe.state(|p| {
                ids.iter()
                    .all(|id| p.received.get(id).map_or(0, |v| v.len()) == 400)
            })
        })
        .await;
        probe.state(|p| {
            for id in &ids {
                let got = &p.received[id];
                let want: Vec<u64> = (0..400).collect();
                assert_eq!(got, &want, "entity {id} got its messages once and in order");
            }
            assert_eq!(p.max_alive, 1, "never two incarnations of one entity");
        });
        for n in &nodes {
            n.system.shutdown().await;
        }
    });
}

#[test]
fn a_leaving_node_hands_its_shards_off_before_it_goes() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let nodes = start_nodes(3, &probe, sharding_settings());
        let all: Vec<&Node> = nodes.iter().collect();
        all_up(&all, 3).await;
        let refs: Vec<_> = (0..30)
            .map(|i| {
                nodes[0]
                    .sharding
                    .entity_ref::<Counter>(format!("g{i}"))
                    .unwrap()
            })
            .collect();
        for r in &refs {
            assert_eq!(r.ask(Add(1)).await.unwrap(), 1);
        }
        // The youngest node leaves through the coordinated shutdown.
        let leaving = &nodes[2];
        let hosted_before = leaving
            .sharding
            .region_state::<Counter>()
            .await
            .unwrap()
            .shards
            .len();
        assert!(hosted_before > 0);
        leaving
            .cluster
            .coordinated_shutdown()
            .run(troupe_cluster::coordinated_shutdown::Reason::Unknown)
            .await;
        let rest = [&nodes[0], &nodes[1]];
        all_up(&rest, 2).await;
        eventually("its shards live on the other nodes", async || {
            shards_per_node(&rest).await.values().sum::<usize>() > 0
        })
        .await;
        // The entities answer again (restarted elsewhere; the state of
        // these test entities is in memory only, so it starts over).
        for r in &refs {
            r.ask_timeout(Add(0), Duration::from_secs(20))
                .await
                .unwrap();
        }
        assert_eq!(probe.state(|p| p.max_alive), 1);
        for n in &nodes[..2] {
            n.system.shutdown().await;
        }
    });
}

#[test]
fn a_message_sent_right_after_start_is_delivered() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let node = start_nodes(1, &probe, sharding_settings()).pop().unwrap();
        // No wait for the cluster or the region: the ask is buffered until
        // the region runs and the node is Up.
        let a = node.sharding.entity_ref::<Counter>("early").unwrap();
        assert_eq!(a.ask_timeout(Add(3), DEADLINE).await.unwrap(), 3);
        node.system.shutdown().await;
    });
}

/// A message that names its own counter.
#[derive(Debug, Clone, troupe_core::Message, serde::Serialize, serde::Deserialize)]
#[message(reply = i64, name = "test.AddTo")]
struct AddTo {
    counter: String,
    n: i64,
}

impl troupe_sharding::EntityMessage for AddTo {
    fn entity_id(&self) -> &str {
        &self.counter
    }
}

#[troupe_core::handlers]
impl Counter {
    async fn add_to(&mut self, m: AddTo) -> i64 {
        self.value += m.n;
        self.value
    }
}

#[test]
fn envelopes_and_messages_that_name_their_entity_reach_it() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let node = start_nodes(1, &probe, sharding_settings()).pop().unwrap();
        node.system.register::<Counter, AddTo>().unwrap();
        let s = &node.sharding;
        s.tell_envelope::<Counter, _>(troupe_sharding::ShardingEnvelope::new("x", Add(2)))
            .unwrap();
        s.tell_message::<Counter, _>(AddTo {
            counter: "x".into(),
            n: 3,
        })
        .unwrap();
        let v = s
            .ask_message::<Counter, _>(AddTo {
                counter: "x".into(),
                n: 0,
            })
            .await
            .unwrap();
        assert_eq!(v, 5);
        node.system.shutdown().await;
    });
}

/// Carries an entity reference to another node, which uses it there.
#[derive(troupe_core::Message, serde::Serialize, serde::Deserialize)]
#[message(reply = i64, name = "test.UseRef")]
struct UseRef(troupe_sharding::EntityRef<Counter>);

struct RefUser;
impl troupe_core::Actor for RefUser {}

#[troupe_core::handlers]
impl RefUser {
    async fn use_ref(&mut self, m: UseRef) -> i64 {
        m.0.ask(Add(10)).await.unwrap_or(-1)
    }
}

#[test]
fn an_entity_ref_travels_inside_a_message_and_works_on_the_other_node() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let nodes = start_nodes(2, &probe, sharding_settings());
        all_up(&[&nodes[0], &nodes[1]], 2).await;
        for n in &nodes {
            n.system.register::<RefUser, UseRef>().unwrap();
        }
        nodes[1].system.spawn_named("user", RefUser).unwrap();
        let user: troupe_core::ActorRef<RefUser> = nodes[0]
            .system
            .resolve(&format!("{}/user/user", nodes[1].address()))
            .unwrap();
        let r = nodes[0].counter("travelling");
        r.ask(Add(1)).await.unwrap();
        // Node 1 decodes the reference and asks the entity through its
        // own sharding: the same entity, the same state.
        assert_eq!(
            user.ask_timeout(UseRef(r.clone()), DEADLINE).await.unwrap(),
            11
        );
        assert_eq!(r.ask(Add(0)).await.unwrap(), 11);
        shutdown_all(nodes).await;
    });
}

#[test]
fn an_entity_s_own_reference_reaches_it_from_another_node() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let nodes = start_nodes(2, &probe, sharding_settings());
        all_up(&[&nodes[0], &nodes[1]], 2).await;
        let r = nodes[0].counter("by-path");
        assert_eq!(r.ask(Add(1)).await.unwrap(), 1);
        // Entities are unlisted children of their shard: their shard's
        // table resolves their paths, for a reply or a watch addressed to
        // an entity's `ctx.myself()` from another node.
        let path = r.ask(MyPath).await.unwrap();
        let home = r.ask(WhereAreYou).await.unwrap();
        let (host, other) = if home == nodes[0].address().to_string() {
            (&nodes[0], &nodes[1])
        } else {
            (&nodes[1], &nodes[0])
        };
        assert!(
            host.system.lookup_any(&path).is_some(),
            "{path} on its node"
        );
        let remote: troupe_core::ActorRef<Counter> = other
            .system
            .resolve(&format!("{}{path}", host.address()))
            .unwrap();
        assert_eq!(remote.ask_timeout(Add(10), DEADLINE).await.unwrap(), 11);
        assert_eq!(r.ask(Add(0)).await.unwrap(), 11);
        shutdown_all(nodes).await;
    });
}

#[test]
fn a_shard_envelope_with_ids_that_are_not_utf8_is_refused_and_the_region_goes_on() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let nodes = start_nodes(2, &probe, sharding_settings());
        all_up(&[&nodes[0], &nodes[1]], 2).await;
        // An entity of node 0, reached from node 1 (its shard is open on
        // node 0 and known to node 1's reader of node 0).
        let mut id = String::new();
        for i in 0.. {
            id = format!("e{i}");
            if nodes[1]
                .counter(id.as_str())
                .ask(WhereAreYou)
                .await
                .unwrap()
                == nodes[0].name()
            {
                break;
            }
        }
        let shard = nodes[1].counter(id.as_str()).shard_id().to_string();
        let region: troupe_core::ActorRef<troupe_sharding::region::Region<Counter>> = nodes[1]
            .system
            .resolve(&format!("{}/system/sharding-counter", nodes[0].address()))
            .unwrap();
        let bad_input = || nodes[0].system.remoting().unwrap().bad_input_count();
        let before = bad_input();
        // A raw envelope: its entity id, shard id, manifest, and a message.
        let raw = |entity: &[u8], shard: &[u8], manifest: &[u8]| {
            let fields = [entity.to_vec(), shard.to_vec(), manifest.to_vec()];
            move |buf: &mut Vec<u8>| {
                buf.push(0x94);
                for s in &fields {
                    buf.push(0xa0 | s.len() as u8);
                    buf.extend_from_slice(s);
                }
                buf.push(0xc0);
                Ok(())
            }
        };
        for (entity, shard, manifest, what) in [
            (&[0xff, b'e'][..], shard.as_bytes(), &b"x"[..], "entity id"),
            (id.as_bytes(), &[b's', 0xc3][..], b"x", "shard id"),
            (id.as_bytes(), shard.as_bytes(), &[b'x', 0xff], "manifest"),
        ] {
            let (replier, reply) = troupe_core::Replier::channel(Duration::from_secs(10));
            nodes[1]
                .system
                .send_encoded(
                    &region,
                    "troupe.sharding.ShardEnvelope.v2",
                    raw(entity, shard, manifest),
                    Some(replier),
                )
                .unwrap();
            match reply.await {
                Err(troupe_core::AskError::Remote(why)) => assert!(
                    why.contains(&format!("the {what} of a shard envelope")),
                    "{why}"
                ),
                other => panic!("expected a refusal for the {what}, got {other:?}"),
            }
        }
        eventually("both counted as bad input", async || {
            bad_input() >= before + 2
        })
        .await;
        // The entity and the connection are as they were.
        assert_eq!(nodes[1].counter(id.as_str()).ask(Add(5)).await.unwrap(), 5);
        assert_eq!(probe.state(|p| p.max_alive), 1);
        shutdown_all(nodes).await;
    });
}
