//! Clusters of real `troupe-node` processes: three nodes form a cluster,
//! one is killed with SIGKILL and is downed and removed by the others, one
//! leaves with SIGTERM and exits cleanly.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::{free_port, Node, DEADLINE};

#[test]
fn three_processes_form_a_cluster_survive_a_kill_and_a_leave() {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let seeds = format!("troupe://troupe@127.0.0.1:{}", ports[0]);
    let nodes: Vec<Node> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| Node::start(*p, &seeds, &format!("n{i}")))
        .collect();
    for n in &nodes {
        for other in &nodes {
            n.wait_for(&format!("member {} is Up", other.address));
        }
    }
    let mut nodes = nodes;
    // SIGKILL the last one: the others mark it unreachable, the split
    // brain resolver (keep-majority) downs it, the leader removes it.
    let mut killed = nodes.pop().unwrap();
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    for n in &nodes {
        n.wait_for(&format!("member {} is unreachable", killed.address));
        n.wait_for(&format!("member {} removed (was Down)", killed.address));
    }
    // SIGTERM the second: it leaves and exits 0; the first sees it removed.
    let mut leaving = nodes.pop().unwrap();
    let pid = leaving.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(status.success());
    let start = Instant::now();
    let exit = loop {
        if let Some(s) = leaving.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the leaving node did not exit:\n{}",
            leaving.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "exit status {exit:?}:\n{}", leaving.log());
    nodes[0].wait_for(&format!("member {} removed (was Exiting)", leaving.address));
}
