//! Cluster sharding across real `troupe-node` processes: the demo entity
//! `counter` on three nodes, reached over management HTTP through any
//! node; its values survive the crash of a node (SIGKILL), a graceful
//! leave (SIGTERM), and a full restart from the durable store.

mod support;

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use support::{eventually, free_port, get, http, Node};

/// Fast failure detection and downing, and sharding settings for a test,
/// in one settings file (`--config`).
const CONFIG: &str = r#"
gossip-interval = "300ms"
leader-actions-interval = "200ms"
unreachable-nodes-reaper-interval = "200ms"
heartbeat-interval = "300ms"
seed-node-timeout = "2s"

[failure-detector]
acceptable-heartbeat-pause = "2s"

[downing]
stable-after = "2s"

[sharding]
number-of-shards = 30
retry-interval = "300ms"
rebalance-interval = "1s"
handoff-timeout = "5s"
shard-start-timeout = "2s"
waiting-for-state-timeout = "1s"
updating-state-timeout = "3s"
"#;

const COUNTERS: usize = 20;

/// A node of the test: its process and its management HTTP address.
struct Member {
    node: Node,
    http: String,
}

fn start(port: u16, seeds: &str, config: &Path, data: &Path, tag: &str) -> Member {
    let args = [
        "--seed-nodes".to_string(),
        seeds.to_string(),
        "--http".to_string(),
        "127.0.0.1:0".to_string(),
        "--config".to_string(),
        config.display().to_string(),
        "--data-dir".to_string(),
        data.display().to_string(),
    ];
    let node = Node::spawn(port, &args, &[], tag);
    let http = node.http_addr();
    Member { node, http }
}

/// `GET path` on `m` as JSON, if it answers 200.
fn get_json(m: &Member, path: &str) -> Result<Value, String> {
    match get(&m.http, path) {
        Some(a) if a.status == 200 => Ok(a.json()),
        Some(a) => Err(format!(
            "{} answers {}: {}",
            m.node.address, a.status, a.body
        )),
        None => Err(format!("{} does not answer", m.node.address)),
    }
}

/// Waits until `m` sees exactly `nodes` as Up members.
fn await_members(m: &Member, nodes: &[&Member]) {
    let want: BTreeSet<String> = nodes.iter().map(|n| n.node.address.clone()).collect();
    eventually(&format!("{} sees {want:?} Up", m.node.address), || {
        let json = get_json(m, "/cluster/members")?;
        let members = json["members"].as_array().unwrap();
        let up: BTreeSet<String> = members
            .iter()
            .filter(|m| m["status"] == "Up")
            .map(|m| m["node"].as_str().unwrap().to_string())
            .collect();
        if up == want && members.len() == want.len() {
            Ok(())
        } else {
            Err(json.to_string())
        }
    })
}

/// `POST /counters/{id}` with `add=n` through `m`: the new value and the
/// node that answered.
fn add(m: &Member, id: &str, n: i64) -> (i64, String) {
    let answer = http(
        &m.http,
        "POST",
        &format!("/counters/{id}"),
        Some(&format!("add={n}")),
    )
    .unwrap_or_else(|| panic!("{} does not answer", m.node.address));
    assert_eq!(answer.status, 200, "add {n} to {id}: {}", answer.body);
    let json = answer.json();
    assert_eq!(json["id"], id, "{json}");
    (
        json["value"].as_i64().unwrap(),
        json["node"].as_str().unwrap().to_string(),
    )
}

/// Every counter has its expected value when read through `via`
/// (retrying while its shard moves); returns the answering node per
/// counter.
fn check_values(
    via: &[&Member],
    expected: &BTreeMap<String, i64>,
    allowed: &[&Member],
) -> BTreeMap<String, String> {
    let allowed: BTreeSet<&str> = allowed.iter().map(|m| m.node.address.as_str()).collect();
    let mut answered = BTreeMap::new();
    for (i, (id, value)) in expected.iter().enumerate() {
        let m = via[i % via.len()];
        let node = eventually(&format!("GET /counters/{id} through {}", m.http), || {
            let json = get_json(m, &format!("/counters/{id}"))?;
            if json["value"].as_i64() != Some(*value) {
                panic!("counter {id} lost its value: expected {value}, got {json}");
            }
            Ok(json["node"].as_str().unwrap().to_string())
        });
        assert!(
            allowed.contains(node.as_str()),
            "{id} answered by {node}, not one of {allowed:?}"
        );
        answered.insert(id.clone(), node);
    }
    answered
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn counters_survive_a_crash_a_leave_and_a_full_restart() {
    let dir = TempDir(std::env::temp_dir().join(format!("troupe-sharding-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&dir.0);
    std::fs::create_dir_all(&dir.0).unwrap();
    let config = dir.0.join("troupe.toml");
    std::fs::write(&config, CONFIG).unwrap();
    let data: Vec<PathBuf> = (0..3).map(|i| dir.0.join(format!("n{i}"))).collect();

    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let seeds = format!("troupe://troupe@127.0.0.1:{}", ports[0]);
    let mut nodes: Vec<Member> = (0..3)
        .map(|i| start(ports[i], &seeds, &config, &data[i], &format!("s{i}")))
        .collect();
    let all: Vec<&Member> = nodes.iter().collect();
    for m in &all {
        await_members(m, &all);
        // Ready: Up, and the region registered with the coordinator.
        eventually(&format!("{} ready", m.node.address), || {
            match get(&m.http, "/ready") {
                Some(a) if a.status == 200 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
        assert_eq!(
            get_json(m, "/cluster/shards").unwrap(),
            serde_json::json!({"entityTypeKeys": ["counter"]})
        );
    }

    // Adds through every node; each counter twice, through two nodes.
    let mut expected = BTreeMap::new();
    for i in 0..COUNTERS {
        let id = format!("c{i}");
        let n = i as i64 + 10;
        let (value, node) = add(all[i % 3], &id, n);
        assert_eq!(value, n, "{id}");
        assert!(all.iter().any(|m| m.node.address == node), "{node}");
        let (value, _) = add(all[(i + 1) % 3], &id, -3);
        assert_eq!(value, n - 3, "{id}");
        expected.insert(id, n - 3);
    }
    // A bad form changes nothing.
    for form in ["add=abc", "add=1.5", "nothing=1"] {
        let answer = http(&all[1].http, "POST", "/counters/c0", Some(form)).unwrap();
        assert_eq!(answer.status, 400, "{form}: {}", answer.body);
        assert!(answer.json()["message"].as_str().unwrap().contains("add"));
    }
    // Any node reads any counter; they live on more than one node.
    let mut answering = BTreeSet::new();
    for rotation in 0..3 {
        let via: Vec<&Member> = (0..3).map(|k| all[(k + rotation) % 3]).collect();
        answering.extend(check_values(&via, &expected, &all).into_values());
    }
    assert!(answering.len() >= 2, "every counter on {answering:?}");
    // The shards spread over the three regions.
    for m in &all {
        eventually(&format!("shards on {}", m.node.address), || {
            let json = get_json(m, "/cluster/shards/counter")?;
            match json["regions"].as_array() {
                Some(shards) if !shards.is_empty() => Ok(()),
                _ => Err(json.to_string()),
            }
        });
        let state = get_json(m, "/cluster/shards/counter/state").unwrap();
        assert!(state["shards"].as_array().is_some(), "{state}");
    }
    let stats = get_json(all[0], "/cluster/shards/counter/stats?timeout=5s").unwrap();
    let regions: BTreeSet<&str> = stats["regions"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    let addresses: BTreeSet<&str> = all.iter().map(|m| m.node.address.as_str()).collect();
    assert_eq!(regions, addresses, "{stats}");
    assert_eq!(stats["failed"], serde_json::json!([]), "{stats}");
    let answer = get(&all[0].http, "/cluster/shards/nope").unwrap();
    assert_eq!(answer.status, 404, "{}", answer.body);

    // SIGKILL the youngest: the split brain resolver downs it; its counters
    // start again on the others with their values.
    let mut crashed = nodes.pop().unwrap();
    crashed.node.child.kill().unwrap();
    crashed.node.child.wait().unwrap();
    let survivors: Vec<&Member> = nodes.iter().collect();
    for m in &survivors {
        await_members(m, &survivors);
    }
    check_values(&survivors, &expected, &survivors);
    // Two nodes still take writes.
    for i in 0..5 {
        let id = format!("c{i}");
        let (value, _) = add(survivors[1], &id, 100);
        let e = expected.get_mut(&id).unwrap();
        *e += 100;
        assert_eq!(value, *e, "{id}");
    }
    check_values(&survivors, &expected, &survivors);
    drop(crashed);

    // SIGTERM the second: it hands its shards off, leaves and exits 0.
    let mut leaving = nodes.pop().unwrap();
    let status = leaving.node.terminate();
    assert!(status.success(), "{status:?}:\n{}", leaving.node.log());
    let last: Vec<&Member> = nodes.iter().collect();
    await_members(last[0], &last);
    check_values(&last, &expected, &last);

    // Stop the last one too, and start it again from its durable store:
    // a new cluster, the same values.
    let mut first = nodes.pop().unwrap();
    let status = first.node.terminate();
    assert!(status.success(), "{status:?}:\n{}", first.node.log());
    drop(first);
    let port = free_port();
    let again = start(
        port,
        &format!("troupe://troupe@127.0.0.1:{port}"),
        &config,
        &data[0],
        "s0-again",
    );
    await_members(&again, &[&again]);
    check_values(&[&again], &expected, &[&again]);
}
