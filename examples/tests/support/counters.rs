//! The `counter` demo of `troupe-node` over its management HTTP routes:
//! nodes started with a settings file and a data directory, membership,
//! and counters added to and read through any node.

use super::{eventually, get, http, Node};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Fast failure detection and downing, for a settings file (`--config`).
pub const FAST_CLUSTER: &str = r#"
gossip-interval = "300ms"
leader-actions-interval = "200ms"
unreachable-nodes-reaper-interval = "200ms"
heartbeat-interval = "300ms"
seed-node-timeout = "2s"

[failure-detector]
acceptable-heartbeat-pause = "2s"

[downing]
stable-after = "2s"
"#;

/// Sharding settings for a test (its `[sharding]` table comes last, so a
/// test can add keys to it).
pub const TEST_SHARDING: &str = r#"
[sharding]
number-of-shards = 30
retry-interval = "300ms"
rebalance-interval = "1s"
handoff-timeout = "5s"
shard-start-timeout = "2s"
waiting-for-state-timeout = "1s"
updating-state-timeout = "3s"
"#;

/// A fresh directory of the test, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `troupe-TAG-PID` under the system's temporary directory, empty.
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("troupe-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A node of the test: its process and its management HTTP address.
pub struct Member {
    pub node: Node,
    pub http: String,
}

pub fn start(port: u16, seeds: &str, config: &Path, data: &Path, tag: &str) -> Member {
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
pub fn get_json(m: &Member, path: &str) -> Result<Value, String> {
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
pub fn await_members(m: &Member, nodes: &[&Member]) {
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
pub fn add(m: &Member, id: &str, n: i64) -> (i64, String) {
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
pub fn check_values(
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
