//! Cluster bootstrap with real `troupe-node` processes. Each node has an
//! IP address of its own on loopback (127.A.B.N) and every node uses the
//! same ports (remoting 2552, management 8558), as pods do; nodes find
//! each other through an in-test DNS server (A records of one service
//! name) or a static list of contact points.

mod support;

#[path = "../../cluster/tests/support/dns_server.rs"]
mod dns_server;

use dns_server::{DnsServer, Zone};
use serde_json::Value;
use std::net::IpAddr;
use std::time::{Duration, Instant};
use support::{eventually, members_all_up, Node, DEADLINE, FAST_ENV};

/// The loopback IP of node `n` (1-based) of test `test`: 127.A.test.n,
/// with A from this process's id, so that parallel runs do not meet.
fn ip(test: u8, n: u8) -> String {
    let a = 100 + (std::process::id() % 100) as u8;
    format!("127.{a}.{test}.{n}")
}

fn start(test: u8, n: u8, extra: &[&str], env: &[(&str, &str)]) -> Node {
    start_with(test, n, extra, &FAST_ENV, env)
}

/// A node with `base` settings (as variables) and then `env`.
fn start_with(
    test: u8,
    n: u8,
    extra: &[&str],
    base: &[(&str, &str)],
    env: &[(&str, &str)],
) -> Node {
    let host = ip(test, n);
    let data = std::env::temp_dir().join(format!(
        "troupe-node-{}-bootstrap-{test}-{n}-data",
        std::process::id()
    ));
    let mut args = vec![
        "--http".to_string(),
        format!("{host}:8558"),
        "--data-dir".to_string(),
        data.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut all_env: Vec<(&str, &str)> = base.to_vec();
    all_env.extend_from_slice(env);
    let mut node = Node::spawn_at(
        &format!("{host}:2552"),
        &args,
        &all_env,
        &format!("bootstrap-{test}-{n}"),
    );
    node.scratch = Some(data);
    node
}

fn http(test: u8, n: u8) -> String {
    format!("{}:8558", ip(test, n))
}

/// `/cluster/members` of node `n` once it sees exactly `count` members,
/// all Up.
fn converged(test: u8, n: u8, count: usize) -> Result<Value, String> {
    members_all_up(&http(test, n), count)
}

fn dns_zone(test: u8, nodes: u8) -> Zone {
    let mut zone = Zone::default();
    zone.ips.insert(
        "troupe.test".into(),
        (1..=nodes)
            .map(|n| ip(test, n).parse::<IpAddr>().unwrap())
            .collect(),
    );
    zone
}

fn dns_args(server: &DnsServer, required: usize) -> Vec<String> {
    vec![
        "--discovery".into(),
        "dns".into(),
        "--service-name".into(),
        "troupe.test".into(),
        "--dns-server".into(),
        server.addr.to_string(),
        "--required-contact-points".into(),
        required.to_string(),
    ]
}

#[test]
fn five_processes_started_at_once_form_one_cluster_and_a_sixth_joins() {
    const TEST: u8 = 1;
    let dns = DnsServer::start(dns_zone(TEST, 5));
    let args = dns_args(&dns, 5);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let started = Instant::now();
    let nodes: Vec<Node> = (1..=5).map(|n| start(TEST, n, &args, &[])).collect();
    for n in 1..=5 {
        eventually("five members Up", || converged(TEST, n, 5));
    }
    let elapsed = started.elapsed();
    eprintln!("5 processes: one converged cluster {elapsed:?} after the start (stable margin 5 s)");
    // Exactly one node formed the cluster: the lowest address, which is
    // the oldest member; every node sees the same cluster.
    let lowest = nodes.iter().map(|n| n.address.clone()).min().unwrap();
    for node in &nodes {
        let formed = node.log().contains("joins itself");
        assert_eq!(
            formed,
            node.address == lowest,
            "{} formed a cluster: {formed}\n{}",
            node.address,
            node.log()
        );
    }
    let views: Vec<Value> = (1..=5).map(|n| converged(TEST, n, 5).unwrap()).collect();
    for view in &views {
        assert_eq!(view["oldest"], Value::String(lowest.clone()));
        assert_eq!(view["members"], views[0]["members"]);
    }
    // A sixth, started later, joins the same cluster by probing.
    dns.update(|z| *z = dns_zone(TEST, 6));
    let mut nodes = nodes;
    nodes.push(start(TEST, 6, &args, &[]));
    for n in 1..=6 {
        eventually("six members Up", || converged(TEST, n, 6));
    }
    assert!(!nodes[5].log().contains("joins itself"));
    nodes[5].wait_for("bootstrap: joining");
}

#[test]
fn with_new_cluster_disabled_nodes_wait_and_then_give_up() {
    const TEST: u8 = 2;
    let contact_points = (1..=3).map(|n| http(TEST, n)).collect::<Vec<_>>().join(",");
    let env = [
        ("TROUPE_BOOTSTRAP_NEW_CLUSTER_ENABLED", "off"),
        ("TROUPE_BOOTSTRAP_STABLE_MARGIN", "1s"),
        ("TROUPE_SHUTDOWN_AFTER_UNSUCCESSFUL_JOIN_SEED_NODES", "8s"),
    ];
    let args = ["--contact-points", contact_points.as_str()];
    let mut nodes: Vec<Node> = (1..=3).map(|n| start(TEST, n, &args, &env)).collect();
    // The lowest has got as far as it would have formed the cluster.
    let lowest = nodes.iter().map(|n| n.address.clone()).min().unwrap();
    let first = nodes.iter().find(|n| n.address == lowest).unwrap();
    first.wait_for("new-cluster-enabled is off: waiting for an existing cluster");
    // Then each gives up and exits with a failure status, never having
    // been part of a cluster.
    let start = Instant::now();
    for node in &mut nodes {
        let status = loop {
            if let Some(s) = node.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{} did not give up:\n{}",
                node.address,
                node.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(!status.success(), "{}", node.log());
        let log = node.log();
        assert!(
            log.contains("shutdown-after-unsuccessful-join-seed-nodes"),
            "{log}"
        );
        assert!(!log.contains(" is Up"), "{log}");
        assert!(!log.contains("joins itself"), "{log}");
    }
}

#[test]
fn without_seed_nodes_or_discovery_the_node_says_what_to_configure() {
    let mut node = start(3, 1, &[], &[]);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = node.child.try_wait().unwrap() {
            break s;
        }
        assert!(start.elapsed() < DEADLINE, "it kept running");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    let log = node.log();
    assert!(
        log.contains("nothing to join")
            && log.contains("--discovery")
            && log.contains("--seed-nodes"),
        "{log}"
    );
}

/// The figure of BENCHMARKS.md: time from starting N processes at once
/// (default settings: stable margin 5 s, gossip every second) to one
/// cluster of N members, all Up, as every node sees it. Run with
/// `cargo test --release -p troupe-examples --test bootstrap_processes
/// -- --ignored --nocapture time_to_one_cluster`.
#[test]
#[ignore]
fn time_to_one_cluster() {
    for (test, count) in [(10u8, 5u8), (11, 20)] {
        let dns = DnsServer::start(dns_zone(test, count));
        let args = dns_args(&dns, usize::from(count));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let started = Instant::now();
        let _nodes: Vec<Node> = (1..=count)
            .map(|n| start_with(test, n, &args, &[], &[]))
            .collect();
        let spawned = started.elapsed();
        for n in 1..=count {
            eventually("one converged cluster", || {
                converged(test, n, usize::from(count))
            });
        }
        eprintln!(
            "{count} processes: one converged cluster {:.2} s after the start \
             (spawning took {:.2} s)",
            started.elapsed().as_secs_f64(),
            spawned.as_secs_f64()
        );
    }
}
