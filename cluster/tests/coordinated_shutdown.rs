//! Coordinated shutdown: the sequence on its own (phase order, concurrent
//! tasks, timeouts, idempotent runs, refused tasks), and in clusters of
//! several actor systems in one process over real TCP on loopback: a node
//! that runs it leaves gracefully and hands its singleton over, a downed
//! node runs it by itself; and actor subscriptions to cluster events.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use troupe_cluster::coordinated_shutdown::{Phase, Reason};
use troupe_cluster::singleton::{self, ClusterSingletonSettings};
use troupe_cluster::{
    Cluster, ClusterEvent, ClusterSettings, CoordinatedShutdown, CoordinatedShutdownError,
    CoordinatedShutdownSettings, CurrentClusterState, MemberStatus, SubscribeError,
};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;

const DEADLINE: Duration = Duration::from_secs(30);

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < DEADLINE,
            "not within {DEADLINE:?}: {what}"
        );
        rt::sleep(Duration::from_millis(20)).await;
    }
}

/// A shutdown sequence on a local system that is not stopped at the end.
fn local_shutdown(tweak: impl FnOnce(&mut CoordinatedShutdownSettings)) -> CoordinatedShutdown {
    let system = ActorSystem::new("cs").unwrap();
    let mut settings = CoordinatedShutdownSettings {
        terminate_actor_system: false,
        ..CoordinatedShutdownSettings::default()
    };
    tweak(&mut settings);
    CoordinatedShutdown::new(&system, settings)
}

/// What the tasks of a test did, in order.
type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, what: String) {
    log.lock().unwrap().push(what);
}

#[test]
fn phases_run_in_akkas_order_and_the_tasks_of_a_phase_run_concurrently() {
    init_logging();
    rt::block_on(async {
        let cs = local_shutdown(|_| {});
        let log: Log = Arc::default();
        // Added in reverse order: the phase decides when a task runs.
        for phase in Phase::ALL.iter().rev() {
            let l = log.clone();
            cs.add_task(*phase, format!("{phase}-task"), move || async move {
                note(&l, format!("{phase}"));
            })
            .unwrap();
        }
        // Two tasks of one phase that each wait for the other to have
        // started: they finish only if they run at the same time.
        let started = Arc::new(AtomicUsize::new(0));
        for name in ["a", "b"] {
            let (l, started) = (log.clone(), started.clone());
            cs.add_task(Phase::ServiceRequestsDone, name, move || async move {
                started.fetch_add(1, Ordering::SeqCst);
                let t0 = Instant::now();
                while started.load(Ordering::SeqCst) < 2 && t0.elapsed() < DEADLINE {
                    rt::sleep(Duration::from_millis(5)).await;
                }
                let both = started.load(Ordering::SeqCst) == 2;
                note(&l, format!("concurrent-{name}-{both}"));
            })
            .unwrap();
        }
        assert_eq!(cs.reason(), None);
        let t0 = Instant::now();
        cs.run(Reason::Custom("test".into())).await;
        assert!(
            t0.elapsed() < Duration::from_secs(4),
            "the tasks did not overlap"
        );
        assert!(cs.is_finished());
        assert_eq!(cs.reason(), Some(Reason::Custom("test".into())));
        let got = log.lock().unwrap().clone();
        let phases: Vec<String> = got
            .iter()
            .filter(|e| !e.starts_with("concurrent"))
            .cloned()
            .collect();
        let expected: Vec<String> = Phase::ALL.iter().map(|p| p.to_string()).collect();
        assert_eq!(phases, expected);
        // Both concurrent tasks saw the other, and ran within their phase.
        let pos = |e: &str| got.iter().position(|g| g.starts_with(e)).unwrap();
        for name in ["a", "b"] {
            let at = pos(&format!("concurrent-{name}"));
            assert_eq!(got[at], format!("concurrent-{name}-true"));
            assert!(pos("service-requests-done") < pos("service-stop"));
            assert!(
                at > pos("service-unbind") && at < pos("service-stop"),
                "{got:?}"
            );
        }
    });
}

#[test]
fn a_phase_that_times_out_is_logged_and_the_sequence_goes_on() {
    init_logging();
    rt::block_on(async {
        let timeout = Duration::from_millis(300);
        let cs = local_shutdown(|s| {
            s.phase_timeouts.insert(Phase::ServiceUnbind, timeout);
        });
        let log: Log = Arc::default();
        let l = log.clone();
        cs.add_task(Phase::ServiceUnbind, "stuck", || {
            futures_lite::future::pending::<()>()
        })
        .unwrap();
        cs.add_task(Phase::ServiceUnbind, "quick", move || async move {
            note(&l, "quick".into());
        })
        .unwrap();
        let l = log.clone();
        cs.add_task(Phase::ServiceStop, "later", move || async move {
            note(&l, "later".into());
        })
        .unwrap();
        // A task that panics counts as done.
        cs.add_task(Phase::ServiceStop, "panics", || async {
            panic!("a failing task");
        })
        .unwrap();
        let t0 = Instant::now();
        cs.run(Reason::Unknown).await;
        let took = t0.elapsed();
        assert!(
            took >= timeout,
            "the stuck task was not waited for ({took:?})"
        );
        assert!(took < DEADLINE);
        assert_eq!(*log.lock().unwrap(), ["quick", "later"]);
    });
}

#[test]
fn run_is_idempotent_and_every_caller_waits_for_the_same_run() {
    init_logging();
    rt::block_on(async {
        let cs = local_shutdown(|_| {});
        let runs = Arc::new(AtomicUsize::new(0));
        let (release_tx, release) = async_channel::bounded::<()>(1);
        let r = runs.clone();
        cs.add_task(Phase::BeforeServiceUnbind, "count", move || async move {
            r.fetch_add(1, Ordering::SeqCst);
            // Holds the run until the test lets it go.
            let _ = release.recv().await;
        })
        .unwrap();
        let first = cs.run(Reason::ProcessExit);
        let second = cs.run(Reason::ClusterDowning);
        eventually("the first phase runs", async || {
            runs.load(Ordering::SeqCst) == 1
        })
        .await;
        assert!(!cs.is_finished());
        assert_eq!(cs.current_phase(), Some(Phase::BeforeServiceUnbind));
        // Neither call has returned while the run goes on.
        let waiting = rt::spawn(async move {
            first.await;
            second.await;
        });
        release_tx.send(()).await.unwrap();
        rt::timeout(DEADLINE, waiting)
            .await
            .expect("both calls return");
        rt::timeout(DEADLINE, cs.finished()).await.unwrap();
        // Once done, a run returns at once and runs nothing again.
        rt::timeout(DEADLINE, cs.run(Reason::Unknown))
            .await
            .unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(cs.reason(), Some(Reason::ProcessExit));
    });
}

#[test]
fn tasks_for_unknown_or_already_started_phases_are_refused() {
    init_logging();
    rt::block_on(async {
        assert_eq!(
            "cluster-leaving".parse::<Phase>(),
            Err(CoordinatedShutdownError::UnknownPhase(
                "cluster-leaving".into()
            ))
        );
        assert_eq!(
            "cluster-exiting-done".parse::<Phase>(),
            Ok(Phase::ClusterExitingDone)
        );
        let cs = local_shutdown(|_| {});
        assert_eq!(
            cs.add_task(Phase::ServiceStop, " ", || async {}),
            Err(CoordinatedShutdownError::EmptyTaskName)
        );
        // A cancelled task does not run.
        let cancelled = Arc::new(AtomicUsize::new(0));
        let c = cancelled.clone();
        let handle = cs
            .add_cancellable_task(Phase::ServiceStop, "cancelled", move || async move {
                c.fetch_add(1, Ordering::SeqCst);
            })
            .unwrap();
        assert!(handle.cancel());
        // From inside a running phase: that phase and earlier ones are
        // closed, later ones still take tasks.
        let log: Log = Arc::default();
        let (cs2, l) = (cs.clone(), log.clone());
        cs.add_task(Phase::ServiceUnbind, "adder", move || async move {
            let late = cs2.add_task(Phase::ServiceUnbind, "same-phase", || async {});
            assert_eq!(
                late,
                Err(CoordinatedShutdownError::PhaseAlreadyStarted {
                    phase: Phase::ServiceUnbind,
                    task: "same-phase".into()
                })
            );
            let earlier = cs2.add_task(Phase::BeforeServiceUnbind, "earlier", || async {});
            assert!(matches!(
                earlier,
                Err(CoordinatedShutdownError::PhaseAlreadyStarted { .. })
            ));
            let l2 = l.clone();
            cs2.add_task(Phase::ServiceStop, "later", move || async move {
                note(&l2, "later ran".into());
            })
            .unwrap();
            note(&l, "adder ran".into());
        })
        .unwrap();
        cs.run(Reason::Unknown).await;
        assert_eq!(*log.lock().unwrap(), ["adder ran", "later ran"]);
        assert_eq!(cancelled.load(Ordering::SeqCst), 0);
        assert!(!handle.cancel());
        // After the run, every phase is closed.
        let e = cs
            .add_task(Phase::ActorSystemTerminate, "too-late", || async {})
            .unwrap_err();
        assert!(e.to_string().contains("actor-system-terminate"), "{e}");
    });
}

#[test]
fn run_from_skips_the_earlier_phases() {
    init_logging();
    rt::block_on(async {
        let cs = local_shutdown(|_| {});
        let log: Log = Arc::default();
        for phase in [Phase::ClusterLeave, Phase::ClusterExiting] {
            let l = log.clone();
            cs.add_task(
                phase,
                "t",
                move || async move { note(&l, phase.to_string()) },
            )
            .unwrap();
        }
        cs.run_from(Reason::Unknown, Phase::ClusterExiting).await;
        assert_eq!(*log.lock().unwrap(), ["cluster-exiting"]);
    });
}

// ---- clusters ---------------------------------------------------------

fn fast_settings(seeds: &[Address]) -> ClusterSettings {
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

/// Counts live singleton instances across all nodes of a test.
#[derive(Default)]
struct Probe {
    alive: AtomicUsize,
    max_alive: AtomicUsize,
    started: AtomicUsize,
}

struct Tickets {
    probe: Arc<Probe>,
}

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

struct Node {
    system: ActorSystem,
    cluster: Cluster,
}

fn system() -> ActorSystem {
    ActorSystem::builder("cs")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("cs-test"))
        .build()
        .unwrap()
}

/// A node of the cluster of `seeds`, with the singleton's manager.
fn node(system: ActorSystem, seeds: &[Address], probe: &Arc<Probe>) -> Node {
    let cluster = Cluster::start(&system, fast_settings(seeds)).unwrap();
    let p = probe.clone();
    singleton::start(
        &system,
        &cluster,
        "tickets",
        move || Tickets { probe: p.clone() },
        ClusterSingletonSettings {
            hand_over_retry_interval: Duration::from_millis(200),
            ..ClusterSingletonSettings::default()
        },
    )
    .unwrap();
    Node { system, cluster }
}

/// `n` nodes; the first is the seed.
fn nodes(n: usize, probe: &Arc<Probe>) -> Vec<Node> {
    let systems: Vec<ActorSystem> = (0..n).map(|_| system()).collect();
    let seeds = vec![systems[0].remoting().unwrap().address().clone()];
    systems
        .into_iter()
        .map(|system| node(system, &seeds, probe))
        .collect()
}

async fn all_up(nodes: &[Node]) {
    eventually("all members Up", async || {
        for node in nodes {
            let Ok(s) = node.cluster.state().await else {
                return false;
            };
            if s.members.len() != nodes.len()
                || s.members.iter().any(|m| m.status != MemberStatus::Up)
            {
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

/// Records what a subscribed actor receives, in order.
struct Listener {
    log: Arc<Mutex<Vec<Received>>>,
}

#[derive(Debug, Clone)]
enum Received {
    Snapshot(CurrentClusterState),
    Event(ClusterEvent),
}

impl Actor for Listener {}

#[handlers]
impl Listener {
    async fn snapshot(&mut self, s: CurrentClusterState, _ctx: &mut Context<Self>) {
        self.log.lock().unwrap().push(Received::Snapshot(s));
    }
    async fn event(&mut self, e: ClusterEvent, _ctx: &mut Context<Self>) {
        self.log.lock().unwrap().push(Received::Event(e));
    }
}

fn listen(node: &Node) -> (ActorRef<Listener>, Arc<Mutex<Vec<Received>>>) {
    let (listener, log) = listen_on(&node.system);
    node.cluster.subscribe_actor(&listener).unwrap();
    (listener, log)
}

/// How the oldest node is shut down in `leave_gracefully`.
#[derive(Clone, Copy, PartialEq)]
enum ShutDownBy {
    /// `CoordinatedShutdown::run`, as a SIGTERM handler does.
    CoordinatedShutdown,
    /// `ActorSystem::shutdown`, which runs the coordinated shutdown first.
    ActorSystem,
}

#[test]
fn a_node_that_runs_its_coordinated_shutdown_leaves_and_hands_its_singleton_over() {
    leave_gracefully(ShutDownBy::CoordinatedShutdown);
}

#[test]
fn an_actor_system_shutdown_runs_the_coordinated_shutdown_and_leaves_gracefully() {
    leave_gracefully(ShutDownBy::ActorSystem);
}

fn leave_gracefully(by: ShutDownBy) {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let mut nodes = nodes(3, &probe);
        all_up(&nodes).await;
        let state = nodes[0].cluster.state().await.unwrap();
        let oldest = state.oldest.clone().unwrap();
        let first = nodes
            .iter()
            .position(|n| n.cluster.self_node() == &oldest)
            .unwrap();
        eventually("the oldest hosts the singleton", async || {
            hosts(&nodes[first])
        })
        .await;
        let leaving = nodes.remove(first);
        let (_listener, seen) = listen(&nodes[0]);
        // An application task of the leaving node, in an early phase.
        let unbound = Arc::new(AtomicUsize::new(0));
        let u = unbound.clone();
        let cs = leaving.cluster.coordinated_shutdown().clone();
        cs.add_task(Phase::ServiceUnbind, "unbind", move || async move {
            u.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();

        let t0 = Instant::now();
        let system = leaving.system.clone();
        match by {
            ShutDownBy::CoordinatedShutdown => {
                rt::timeout(DEADLINE, cs.run(Reason::ProcessExit)).await
            }
            ShutDownBy::ActorSystem => rt::timeout(DEADLINE, system.shutdown()).await,
        }
        .expect("the shutdown finishes");
        tracing::info!("coordinated shutdown took {:?}", t0.elapsed());
        assert_eq!(unbound.load(Ordering::SeqCst), 1);
        let reason = match by {
            ShutDownBy::CoordinatedShutdown => Reason::ProcessExit,
            ShutDownBy::ActorSystem => Reason::ActorSystemTerminate,
        };
        assert_eq!(cs.reason(), Some(reason));
        assert!(
            cs.is_finished(),
            "shutdown returned before the sequence ended"
        );
        assert!(
            leaving.system.is_terminated(),
            "the actor system was stopped"
        );
        assert!(leaving.cluster.is_terminated());

        // The singleton moved, never two at once, and the node is removed
        // everywhere after a graceful exit.
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
        assert_eq!(probe.started.load(Ordering::SeqCst), 2);
        let gone = leaving.cluster.self_node().clone();
        for n in &nodes {
            eventually("the leaving node removed", async || {
                n.cluster
                    .state()
                    .await
                    .is_ok_and(|s| s.members.len() == 2 && s.members.iter().all(|m| m.node != gone))
            })
            .await;
        }
        eventually("MemberRemoved (was Exiting) seen", async || {
            seen.lock().unwrap().iter().any(|r| {
                matches!(r, Received::Event(ClusterEvent::MemberRemoved(m, MemberStatus::Exiting)) if m.node == gone)
            })
        })
        .await;
        // The exit went through its steps in order, after the snapshot.
        let got = seen.lock().unwrap().clone();
        assert!(matches!(got[0], Received::Snapshot(_)), "{got:?}");
        let step = |status: MemberStatus| {
            got.iter().position(|r| match r {
                Received::Event(ClusterEvent::MemberLeft(m)) => {
                    m.node == gone && status == MemberStatus::Leaving
                }
                Received::Event(ClusterEvent::MemberExited(m)) => {
                    m.node == gone && status == MemberStatus::Exiting
                }
                Received::Event(ClusterEvent::MemberRemoved(m, _)) => {
                    m.node == gone && status == MemberStatus::Removed
                }
                _ => false,
            })
        };
        let left = step(MemberStatus::Leaving).expect("MemberLeft");
        let exited = step(MemberStatus::Exiting).expect("MemberExited");
        let removed = step(MemberStatus::Removed).expect("MemberRemoved");
        assert!(left < exited && exited < removed, "{got:?}");
        for n in nodes {
            n.system.shutdown().await;
        }
    });
}

#[test]
fn a_node_downed_by_the_others_runs_its_coordinated_shutdown() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        let mut nodes = nodes(3, &probe);
        all_up(&nodes).await;
        let downed = nodes.pop().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let cs = downed.cluster.coordinated_shutdown().clone();
        cs.add_task(Phase::BeforeServiceUnbind, "app", move || async move {
            r.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        nodes[0].cluster.down(downed.cluster.self_address());
        rt::timeout(DEADLINE, cs.finished())
            .await
            .expect("the downed node shuts down");
        assert_eq!(cs.reason(), Some(Reason::ClusterDowning));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert!(downed.system.is_terminated());
        let gone = downed.cluster.self_node().clone();
        eventually("the downed node removed", async || {
            nodes[0]
                .cluster
                .state()
                .await
                .is_ok_and(|s| s.members.iter().all(|m| m.node != gone))
        })
        .await;
        // The survivors did not run theirs.
        for n in &nodes {
            assert_eq!(n.cluster.coordinated_shutdown().reason(), None);
        }
        for n in nodes {
            n.system.shutdown().await;
        }
    });
}

#[test]
fn an_actor_subscriber_gets_the_snapshot_first_and_its_subscription_ends_when_it_stops() {
    init_logging();
    rt::block_on(async {
        let probe = Arc::new(Probe::default());
        // The first node alone, then a subscriber, then a second node.
        let first = nodes(1, &probe).pop().unwrap();
        all_up(std::slice::from_ref(&first)).await;
        // The singleton manager subscribes when it starts, which can come
        // after the node is Up; it hosts the singleton once subscribed.
        eventually("the singleton runs", async || hosts(&first)).await;
        let base = first.cluster.subscription_count().await.unwrap();
        let (listener, seen) = listen(&first);
        eventually("subscribed", async || {
            first.cluster.subscription_count().await.unwrap() == base + 1
        })
        .await;
        let seeds = [first.cluster.self_address().clone()];
        let second = node(system(), &seeds, &probe);
        let joined = second.cluster.self_node().clone();
        let both = [first, second];
        all_up(&both).await;
        eventually("the second node's MemberUp", async || {
            seen.lock().unwrap().iter().any(
                |r| matches!(r, Received::Event(ClusterEvent::MemberUp(m)) if m.node == joined),
            )
        })
        .await;
        let got = seen.lock().unwrap().clone();
        let Received::Snapshot(snapshot) = &got[0] else {
            panic!("the first message is not the snapshot: {got:?}")
        };
        assert_eq!(snapshot.members.len(), 1);
        assert_eq!(&snapshot.members[0].node, both[0].cluster.self_node());
        assert!(
            got[1..].iter().all(|r| matches!(r, Received::Event(_))),
            "{got:?}"
        );
        let [first, second] = both;

        // Unsubscribing ends a subscription.
        let (other, _) = listen(&first);
        eventually("subscribed again", async || {
            first.cluster.subscription_count().await.unwrap() == base + 2
        })
        .await;
        first.cluster.unsubscribe(&other);
        eventually("unsubscribed", async || {
            first.cluster.subscription_count().await.unwrap() == base + 1
        })
        .await;

        // A subscriber that stops is dropped without an event being needed.
        listener.stop();
        listener.wait_for_termination().await;
        eventually("the stopped subscriber dropped", async || {
            first.cluster.subscription_count().await.unwrap() == base
        })
        .await;
        // A stopped actor never becomes a subscriber.
        first.cluster.subscribe_actor(&listener).unwrap();
        let count = first.cluster.subscription_count().await.unwrap();
        assert_eq!(count, base);

        // Once the cluster has stopped, subscribing is an error.
        first.system.shutdown().await;
        let (late, _) = listen_on(&second.system);
        assert_eq!(
            first.cluster.subscribe_actor(&late),
            Err(SubscribeError::ClusterStopped)
        );
        second.system.shutdown().await;
    });
}

fn listen_on(system: &ActorSystem) -> (ActorRef<Listener>, Arc<Mutex<Vec<Received>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    (system.spawn(Listener { log: log.clone() }), log)
}
