//! Cluster sharding across real `troupe-node` processes: the demo entity
//! `counter` on three nodes, reached over management HTTP through any
//! node; its values survive the crash of a node (SIGKILL), a graceful
//! leave (SIGTERM), and a full restart from the durable store.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use support::counters::{
    add, await_members, check_values, get_json, start, Member, TempDir, FAST_CLUSTER, TEST_SHARDING,
};
use support::{eventually, free_port, get, http};

const COUNTERS: usize = 20;

#[test]
fn counters_survive_a_crash_a_leave_and_a_full_restart() {
    let dir = TempDir::new("sharding");
    let config = dir.0.join("troupe.toml");
    std::fs::write(&config, format!("{FAST_CLUSTER}{TEST_SHARDING}")).unwrap();
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
