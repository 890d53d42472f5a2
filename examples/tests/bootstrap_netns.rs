//! Cluster bootstrap as on a real network: five `troupe-node` "pods",
//! each in a network namespace of its own with its own IP address on a
//! bridge, all on the same remoting port (2552) and management port
//! (8558), find each other through the A records of one service name
//! and form one cluster; a pod whose process is killed and started again
//! on the same IP joins that cluster again.
//!
//! Needs root and iproute2 (as on the CI machine); elsewhere the test
//! says why it skipped and passes.

mod support;

#[path = "../../cluster/tests/support/dns_server.rs"]
mod dns_server;

use dns_server::{DnsServer, Zone};
use serde_json::Value;
use std::net::IpAddr;
use support::netns::PodNetwork;
use support::{eventually, members_all_up, Node, FAST_ENV};

const PODS: u8 = 5;

/// The management address of pod `n`.
fn http(net: &PodNetwork, n: u8) -> String {
    format!("{}:8558", net.pod_ip(n))
}

/// Starts pod `n`'s node, which bootstraps through DNS; `incarnation`
/// only names its log.
fn start_pod(net: &PodNetwork, dns: &DnsServer, n: u8, incarnation: u8) -> Node {
    let pod_ip = net.pod_ip(n);
    let data =
        std::env::temp_dir().join(format!("troupe-node-{}-netns-{n}-data", std::process::id()));
    let args: Vec<String> = [
        "--http",
        &format!("{pod_ip}:8558"),
        "--data-dir",
        &data.display().to_string(),
        "--discovery",
        "dns",
        "--service-name",
        "troupe.pods.test",
        "--dns-server",
        &dns.addr.to_string(),
        "--required-contact-points",
        &PODS.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut node = Node::spawn_in_netns(
        net.netns(n),
        &format!("{pod_ip}:2552"),
        &args,
        &FAST_ENV,
        &format!("netns-{n}-{incarnation}"),
    );
    // The durable store is the pod's (an emptyDir volume): a restarted
    // process finds it; it goes when the test ends.
    node.scratch = Some(data);
    node
}

/// Pod `n`'s `/cluster/members` once it sees exactly `count` members, all
/// Up.
fn converged(net: &PodNetwork, n: u8, count: usize) -> Result<Value, String> {
    members_all_up(&http(net, n), count)
}

/// The UID of the member at `address` in a `/cluster/members` view.
fn uid_of(view: &Value, address: &str) -> Option<String> {
    view["members"]
        .as_array()?
        .iter()
        .find(|m| m["node"] == address)
        .and_then(|m| m["nodeUid"].as_str().map(str::to_string))
}

#[test]
fn five_pods_form_one_cluster_and_a_restarted_pod_joins_it_again() {
    let net = match PodNetwork::create(PODS) {
        Ok(net) => net,
        Err(why) => {
            eprintln!(
                "SKIPPED five_pods_form_one_cluster_and_a_restarted_pod_joins_it_again: \
                 network namespaces cannot be made here ({why}); it needs root and iproute2"
            );
            return;
        }
    };
    let mut zone = Zone::default();
    zone.ips.insert(
        "troupe.pods.test".into(),
        (1..=PODS).map(|n| IpAddr::V4(net.pod_ip(n))).collect(),
    );
    let dns = DnsServer::start_on(IpAddr::V4(net.host_ip()), zone);

    let mut pods: Vec<Node> = (1..=PODS).map(|n| start_pod(&net, &dns, n, 1)).collect();
    let views: Vec<Value> = (1..=PODS)
        .map(|n| eventually("five members Up", || converged(&net, n, 5)))
        .collect();
    // One cluster, formed by the pod with the lowest address, which every
    // pod sees as the oldest member.
    let lowest = pods.iter().map(|p| p.address.clone()).min().unwrap();
    for pod in &pods {
        assert_eq!(
            pod.log().contains("joins itself"),
            pod.address == lowest,
            "{}:\n{}",
            pod.address,
            pod.log()
        );
    }
    for view in &views {
        assert_eq!(view["oldest"], Value::String(lowest.clone()));
        assert_eq!(view["members"], views[0]["members"]);
    }

    // Pod 3's process dies; the orchestrator starts a new one in the same
    // pod, with the same IP and ports. The old incarnation is downed and
    // removed, and the new one joins the same cluster.
    const RESTARTED: u8 = 3;
    let address = pods[usize::from(RESTARTED) - 1].address.clone();
    let old_uid = uid_of(&views[0], &address).expect("pod 3 is a member");
    let old = &mut pods[usize::from(RESTARTED) - 1];
    old.child.kill().unwrap();
    old.child.wait().unwrap();
    pods.push(start_pod(&net, &dns, RESTARTED, 2));
    for n in 1..=PODS {
        eventually("the restarted pod is a member again", || {
            let view = converged(&net, n, 5)?;
            match uid_of(&view, &address) {
                Some(uid) if uid != old_uid => Ok(()),
                _ => Err(format!("still the old incarnation: {view}")),
            }
        });
    }
    let restarted = pods.last().unwrap();
    assert!(
        !restarted.log().contains("joins itself"),
        "{}",
        restarted.log()
    );
}
