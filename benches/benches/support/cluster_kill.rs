//! Failure detection with real processes: five cluster nodes, each a child
//! process of the benchmark (`cluster node SEED`), report their membership
//! events on stdout with wall-clock times; one is killed with SIGKILL, and
//! the figure is the time from the kill until the last survivor reports
//! it unreachable (and, the first time, removed).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use troupe_cluster::{Cluster, ClusterEvent, ClusterSettings, MemberStatus};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;

const NODES: usize = 5;

fn epoch_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The child: a cluster node that joins `seed` (`-`: it is the seed) and
/// prints `READY <address>`, then `<time> up|unreachable|removed <address>`
/// for each such event.
#[allow(clippy::print_stdout)]
pub fn node(seed: &str) {
    rt::block_on(async {
        let system = ActorSystem::builder("bench")
            .remote(RemoteSettings::new("127.0.0.1:0").with_secret("bench"))
            .build()
            .expect("system");
        let me = system.remoting().expect("remoting").address().clone();
        let seed: Address = if seed == "-" {
            me.clone()
        } else {
            seed.parse().expect("seed address")
        };
        let settings = ClusterSettings {
            seed_nodes: vec![seed],
            ..ClusterSettings::default()
        };
        let cluster = Cluster::start(&system, settings).expect("cluster");
        let (snapshot, events) = cluster.subscribe().await.expect("subscribe");
        println!("READY {me}");
        for m in snapshot
            .members
            .iter()
            .filter(|m| m.status == MemberStatus::Up)
        {
            println!("{} up {}", epoch_secs(), m.node.address);
        }
        while let Ok(event) = events.recv().await {
            let (what, m) = match &event {
                ClusterEvent::MemberUp(m) => ("up", m),
                ClusterEvent::UnreachableMember(m) => ("unreachable", m),
                ClusterEvent::MemberRemoved(m, _) => ("removed", m),
                _ => continue,
            };
            println!("{} {what} {}", epoch_secs(), m.node.address);
        }
    });
}

/// Resident set size of process `pid` in KiB (Linux), if readable.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// A child node and what it reported so far.
struct Proc {
    child: Child,
    address: String,
    lines: mpsc::Receiver<String>,
    /// (event, address) -> time of the first report.
    seen: BTreeMap<(String, String), f64>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn start(seed: &str) -> Proc {
        let exe = std::env::current_exe().expect("own executable");
        let mut child = Command::new(exe)
            .args(["node", seed])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn a node");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let ready = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the node did not start");
        let address = ready
            .strip_prefix("READY ")
            .unwrap_or_else(|| panic!("unexpected first line {ready:?}"))
            .to_string();
        Proc {
            child,
            address,
            lines,
            seen: BTreeMap::new(),
        }
    }

    fn pump(&mut self) {
        while let Ok(line) = self.lines.try_recv() {
            let mut parts = line.splitn(3, ' ');
            let (Some(t), Some(what), Some(who)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if let Ok(t) = t.parse::<f64>() {
                self.seen
                    .entry((what.to_string(), who.to_string()))
                    .or_insert(t);
            }
        }
    }

    fn reported(&self, what: &str, who: &str) -> Option<f64> {
        self.seen.get(&(what.to_string(), who.to_string())).copied()
    }
}

/// Waits until `done` holds for every process (pumping their reports).
fn until(procs: &mut [Proc], limit: Duration, done: impl Fn(&Proc) -> bool) -> bool {
    let start = Instant::now();
    loop {
        for p in procs.iter_mut() {
            p.pump();
        }
        if procs.iter().all(&done) {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The figure: `kills` fresh 5-process clusters, one node killed in each.
#[allow(clippy::print_stdout)]
pub fn failure_detection(kills: usize, json: &mut Vec<String>) {
    let mut detected = Vec::new();
    for trial in 0..kills {
        let mut procs = vec![Proc::start("-")];
        let seed = procs[0].address.clone();
        procs.extend((1..NODES).map(|_| Proc::start(&seed)));
        let all: BTreeSet<String> = procs.iter().map(|p| p.address.clone()).collect();
        let up = until(&mut procs, Duration::from_secs(60), |p| {
            all.iter().all(|a| p.reported("up", a).is_some())
        });
        assert!(up, "the {NODES} processes did not all come Up");
        if trial == 0 {
            // Memory of a node process in a converged 5-node cluster.
            let rss: Vec<u64> = procs.iter().filter_map(|p| rss_kib(p.child.id())).collect();
            if !rss.is_empty() {
                let avg = rss.iter().sum::<u64>() / rss.len() as u64;
                println!("resident memory per node process, 5-node cluster: {avg} KiB");
                json.push(format!("\"node_rss_kib\":{avg}"));
            }
        }
        // Let the failure detectors learn the heartbeat rhythm, and kill at a
        // different moment of the heartbeat cycle each time.
        std::thread::sleep(Duration::from_millis(5000 + 173 * trial as u64));
        let mut victim = procs.pop().expect("a victim");
        let killed = epoch_secs();
        victim.child.kill().expect("kill -9");
        let _ = victim.child.wait();
        let who = victim.address.clone();
        let last = |procs: &[Proc], what: &str| {
            procs
                .iter()
                .filter_map(|p| p.reported(what, &who))
                .fold(f64::MIN, f64::max)
                - killed
        };
        if until(&mut procs, Duration::from_secs(60), |p| {
            p.reported("unreachable", &who).is_some()
        }) {
            let t = last(&procs, "unreachable");
            println!(
                "5 processes, one killed (SIGKILL): unreachable on all survivors after {t:.2} s"
            );
            detected.push(t);
        } else {
            println!("failure detection did not complete");
        }
        if trial == 0 {
            if until(&mut procs, Duration::from_secs(120), |p| {
                p.reported("removed", &who).is_some()
            }) {
                let t = last(&procs, "removed");
                println!("… removed after {t:.2} s");
                json.push(format!("\"removed_after_s\":{t:.3}"));
            } else {
                println!("removal did not complete");
            }
        }
    }
    if !detected.is_empty() {
        detected.sort_by(f64::total_cmp);
        let (min, max) = (detected[0], detected[detected.len() - 1]);
        let median = detected[detected.len() / 2];
        println!(
            "unreachable on all survivors over {} kills: min {min:.2} s, median {median:.2} s, max {max:.2} s",
            detected.len()
        );
        json.push(format!(
            "\"unreachable_after_s_median\":{median:.3},\"unreachable_after_s_max\":{max:.3}"
        ));
    }
}
