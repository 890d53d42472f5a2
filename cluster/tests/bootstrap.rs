//! Cluster bootstrap on loopback: actor systems with a management server
//! each, discovering each other through the `config` method (the
//! management ports are known once the servers are bound), form exactly
//! one cluster led by the lowest address; a later node joins it; with
//! `new-cluster-enabled` off nothing forms; configured seed nodes and an
//! explicit join take precedence; the contact point answers before the
//! node has joined.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};
use troupe_cluster::bootstrap::{BootstrapSettings, BootstrapStatus, ClusterBootstrap};
use troupe_cluster::discovery::{ConfigServiceDiscovery, ResolvedTarget, ServiceDiscovery};
use troupe_cluster::management::{ManagementServer, ManagementSettings, SeedNodes};
use troupe_cluster::{Cluster, ClusterSettings, MemberStatus};
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

fn cluster_settings() -> ClusterSettings {
    ClusterSettings {
        gossip_interval: Duration::from_millis(300),
        leader_actions_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(300),
        seed_node_timeout: Duration::from_millis(1500),
        ..ClusterSettings::default()
    }
}

fn bootstrap_settings(required: usize) -> BootstrapSettings {
    let mut s = BootstrapSettings {
        service_name: Some("shop".into()),
        required_contact_point_nr: required,
        stable_margin: Duration::from_millis(1500),
        interval: Duration::from_millis(300),
        ..BootstrapSettings::default()
    };
    s.contact_point.probe_interval = Duration::from_millis(200);
    // Every contact point is on 127.0.0.1, each with its own port.
    s.contact_point.filter_on_fallback_port = false;
    s
}

struct Node {
    _system: ActorSystem,
    cluster: Cluster,
    http: ManagementServer,
    bootstrap: Option<ClusterBootstrap>,
}

fn node(settings: ClusterSettings) -> Node {
    let system = ActorSystem::builder("shop")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bootstrap-test"))
        .build()
        .unwrap();
    let cluster = Cluster::start(&system, settings).unwrap();
    let http =
        ManagementServer::start(cluster.clone(), ManagementSettings::new("127.0.0.1:0")).unwrap();
    Node {
        _system: system,
        cluster,
        http,
        bootstrap: None,
    }
}

fn discovery(nodes: &[Node]) -> Arc<dyn ServiceDiscovery> {
    discovery_on("127.0.0.1", nodes)
}

/// Discovery that names every contact point by `host`.
fn discovery_on(host: &str, nodes: &[Node]) -> Arc<dyn ServiceDiscovery> {
    Arc::new(ConfigServiceDiscovery::new([(
        "shop".to_string(),
        nodes
            .iter()
            .map(|n| ResolvedTarget::new(host, Some(n.http.local_addr().port())))
            .collect(),
    )]))
}

fn start_bootstrap(
    n: &mut Node,
    discovery: Arc<dyn ServiceDiscovery>,
    settings: BootstrapSettings,
) {
    n.bootstrap = Some(
        ClusterBootstrap::start(&n.cluster, discovery, settings, n.http.local_addr().port())
            .unwrap(),
    );
}

/// The members `n` sees Up, in address order.
fn up_members(n: &Node) -> Vec<Address> {
    rt::block_on(n.cluster.state())
        .map(|s| {
            s.members
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .map(|m| m.node.address.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < DEADLINE,
            "{what} did not happen in {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.to_string(),
    )
}

#[test]
fn nodes_form_one_cluster_led_by_the_lowest_address_and_a_later_one_joins() {
    init_logging();
    let mut nodes: Vec<Node> = (0..4).map(|_| node(cluster_settings())).collect();
    // The fourth is discovered from the start but starts bootstrapping
    // only once the cluster exists.
    let d = discovery(&nodes[..3]);
    // The contact point answers before the node has joined.
    let (status, body) = get(nodes[0].http.local_addr(), "/bootstrap/seed-nodes");
    assert_eq!(status, 200);
    let answer: SeedNodes = serde_json::from_str(&body).unwrap();
    assert_eq!(
        answer.self_node,
        nodes[0].cluster.self_address().to_string()
    );
    assert!(answer.seed_nodes.is_empty());
    for n in &mut nodes[..3] {
        start_bootstrap(n, d.clone(), bootstrap_settings(3));
    }
    let mut expected: Vec<Address> = nodes[..3]
        .iter()
        .map(|n| n.cluster.self_address().clone())
        .collect();
    expected.sort();
    for n in &nodes[..3] {
        eventually("three members Up", || up_members(n) == expected);
    }
    // Exactly one self-joined: the lowest address, which is the oldest.
    let lowest = &expected[0];
    for n in &nodes[..3] {
        let status = n.bootstrap.as_ref().unwrap().status();
        if n.cluster.self_address() == lowest {
            assert_eq!(status, BootstrapStatus::JoinedSelf);
        } else {
            assert!(
                matches!(status, BootstrapStatus::JoinedSeedNodes(_)),
                "{status:?}"
            );
        }
    }
    let state = rt::block_on(nodes[1].cluster.state()).unwrap();
    assert_eq!(state.oldest.as_ref().map(|o| &o.address), Some(lowest));
    // The contact point reports the members now.
    let (_, body) = get(nodes[1].http.local_addr(), "/bootstrap/seed-nodes");
    let answer: SeedNodes = serde_json::from_str(&body).unwrap();
    assert_eq!(answer.seed_nodes.len(), 3);
    assert!(answer.seed_nodes.iter().all(|m| m.status == "Up"));
    // A later node, with all four in discovery, joins the cluster.
    let d = discovery(&nodes);
    start_bootstrap(&mut nodes[3], d, bootstrap_settings(3));
    let mut expected: Vec<Address> = nodes
        .iter()
        .map(|n| n.cluster.self_address().clone())
        .collect();
    expected.sort();
    eventually("four members Up", || up_members(&nodes[0]) == expected);
    assert!(matches!(
        nodes[3].bootstrap.as_ref().unwrap().status(),
        BootstrapStatus::JoinedSeedNodes(_)
    ));
}

/// Contact points named by a host name: the probe resolves it (on a
/// thread for blocking work, `rt::resolve`) and tries its addresses in
/// turn (`localhost` may give `::1` first, where nothing listens).
#[test]
fn contact_points_named_by_host_name_are_resolved() {
    init_logging();
    let mut nodes: Vec<Node> = (0..2).map(|_| node(cluster_settings())).collect();
    let d = discovery_on("localhost", &nodes);
    for n in &mut nodes {
        start_bootstrap(n, d.clone(), bootstrap_settings(2));
    }
    let mut expected: Vec<Address> = nodes
        .iter()
        .map(|n| n.cluster.self_address().clone())
        .collect();
    expected.sort();
    for n in &nodes {
        eventually("two members Up", || up_members(n) == expected);
    }
}

#[test]
fn with_new_cluster_disabled_no_cluster_forms() {
    init_logging();
    let mut nodes: Vec<Node> = (0..2).map(|_| node(cluster_settings())).collect();
    let d = discovery(&nodes);
    let settings = BootstrapSettings {
        new_cluster_enabled: false,
        stable_margin: Duration::from_millis(300),
        ..bootstrap_settings(2)
    };
    for n in &mut nodes {
        start_bootstrap(n, d.clone(), settings.clone());
    }
    // Four times the stable margin and more than ten probe rounds: the
    // lowest node would have formed a cluster long before.
    std::thread::sleep(Duration::from_secs(3));
    for n in &nodes {
        assert!(rt::block_on(n.cluster.state()).unwrap().members.is_empty());
        assert_eq!(
            n.bootstrap.as_ref().unwrap().status(),
            BootstrapStatus::Running
        );
    }
    // Once one forms a cluster explicitly, the other joins it by probing.
    let first = nodes[0].cluster.self_address().clone();
    nodes[0].cluster.join(&first);
    eventually("the second joins the existing cluster", || {
        up_members(&nodes[0]).len() == 2
    });
    // Its bootstrap notices the explicit join at its next step (the join
    // itself takes effect at once).
    eventually("the first node's bootstrap gives way", || {
        nodes[0].bootstrap.as_ref().unwrap().status() == BootstrapStatus::ExplicitJoin
    });
    assert!(matches!(
        nodes[1].bootstrap.as_ref().unwrap().status(),
        BootstrapStatus::JoinedSeedNodes(_)
    ));
}

#[test]
fn configured_seed_nodes_take_precedence() {
    init_logging();
    let mut n = node(cluster_settings());
    let me = n.cluster.self_address().clone();
    let mut seeded = node(ClusterSettings {
        seed_nodes: vec![me.clone()],
        ..cluster_settings()
    });
    let d = discovery(std::slice::from_ref(&n));
    start_bootstrap(&mut seeded, d.clone(), bootstrap_settings(1));
    assert_eq!(
        seeded.bootstrap.as_ref().unwrap().status(),
        BootstrapStatus::SeedNodesConfigured
    );
    // And a node alone with required-contact-point-nr 1 forms its own (the
    // seeded node, retrying its join all along, may be in it a moment
    // later: too soon for a poll to see the cluster of one).
    start_bootstrap(&mut n, d, bootstrap_settings(1));
    // (The seeded node may join it before the first look.)
    eventually("the node forms a cluster", || up_members(&n).contains(&me));
    eventually("its bootstrap says it joined itself", || {
        n.bootstrap.as_ref().unwrap().status() == BootstrapStatus::JoinedSelf
    });
    eventually("the seeded node joins it", || up_members(&n).len() == 2);
}
