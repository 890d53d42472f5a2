//! Clusters of real `troupe-node` processes: three nodes form a cluster,
//! one is killed with SIGKILL and is downed and removed by the others, one
//! leaves with SIGTERM and exits cleanly.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

fn node_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_troupe-node"))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Node {
    child: Child,
    address: String,
    log: PathBuf,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Node {
    fn start(port: u16, seeds: &str, tag: &str) -> Node {
        let log =
            std::env::temp_dir().join(format!("troupe-node-{}-{tag}.log", std::process::id()));
        let child = Command::new(node_binary())
            .args([
                "--bind",
                &format!("127.0.0.1:{port}"),
                "--seed-nodes",
                seeds,
            ])
            .args(["--http", &format!("127.0.0.1:{}", free_port())])
            .env("TROUPE_SECRET", "cluster-process-test")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            // Fast enough for a test, slow enough for a loaded machine.
            .env("TROUPE_GOSSIP_INTERVAL", "300ms")
            .env("TROUPE_LEADER_ACTIONS_INTERVAL", "200ms")
            .env("TROUPE_HEARTBEAT_INTERVAL", "300ms")
            .env("TROUPE_SEED_NODE_TIMEOUT", "2s")
            .env("TROUPE_DOWNING_STABLE_AFTER", "2s")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("troupe-node starts");
        Node {
            child,
            address: format!("troupe://troupe@127.0.0.1:{port}"),
            log,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_for(&self, needle: &str) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            assert!(
                start.elapsed() < DEADLINE,
                "{needle:?} never appeared in the log of {}:\n{}",
                self.address,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

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
