//! Passivation and remembered entities across real `troupe-node`
//! processes: the `counter` demo honours `[sharding] remember-entities`
//! (its counters start again on the survivors after a SIGKILL, with no
//! request) and `[sharding.passivation]` (an idle counter is passivated
//! and keeps its value).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use support::counters::{
    add, await_members, check_values, get_json, start, Member, TempDir, FAST_CLUSTER, TEST_SHARDING,
};
use support::{eventually, free_port};

/// The counters running on `m` (its region state).
fn running_on(m: &Member) -> Result<BTreeSet<String>, String> {
    let json = get_json(m, "/cluster/shards/counter/state")?;
    Ok(json["shards"]
        .as_array()
        .ok_or_else(|| json.to_string())?
        .iter()
        .flat_map(|s| s["entityIds"].as_array().cloned().unwrap_or_default())
        .map(|id| id.as_str().unwrap().to_string())
        .collect())
}

#[test]
fn remembered_counters_start_on_the_survivors_after_a_crash_without_a_request() {
    let dir = TempDir::new("passivation-remember");
    let config = dir.0.join("troupe.toml");
    let settings = format!("{FAST_CLUSTER}{TEST_SHARDING}remember-entities = true\n");
    std::fs::write(&config, settings).unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let seeds = format!("troupe://troupe@127.0.0.1:{}", ports[0]);
    let mut nodes: Vec<Member> = (0..3)
        .map(|i| {
            let data = dir.0.join(format!("n{i}"));
            start(ports[i], &seeds, &config, &data, &format!("r{i}"))
        })
        .collect();
    let all: Vec<&Member> = nodes.iter().collect();
    for m in &all {
        await_members(m, &all);
    }
    let mut expected = BTreeMap::new();
    for i in 0..15 {
        let id = format!("r{i}");
        let (value, _) = add(all[i % 3], &id, i as i64 + 1);
        expected.insert(id, value);
    }
    let ids: BTreeSet<String> = expected.keys().cloned().collect();
    let victim = &all[2];
    let on_victim = eventually("the youngest node runs some counters", || {
        let running = running_on(victim)?;
        if running.is_empty() {
            Err("none".to_string())
        } else {
            Ok(running)
        }
    });

    let mut crashed = nodes.pop().unwrap();
    crashed.node.child.kill().unwrap();
    crashed.node.child.wait().unwrap();
    let survivors: Vec<&Member> = nodes.iter().collect();
    for m in &survivors {
        await_members(m, &survivors);
    }
    // No request: the remembered counters start by themselves.
    eventually(
        &format!("the crashed node's counters {on_victim:?} run on the survivors"),
        || {
            let mut running = running_on(survivors[0])?;
            running.extend(running_on(survivors[1])?);
            if running == ids {
                Ok(())
            } else {
                Err(format!("{running:?}"))
            }
        },
    );
    check_values(&survivors, &expected, &survivors);
    drop(crashed);
}

#[test]
fn an_idle_counter_is_passivated_and_keeps_its_value() {
    let dir = TempDir::new("passivation-idle");
    let config = dir.0.join("troupe.toml");
    let settings = format!(
        "{FAST_CLUSTER}{TEST_SHARDING}\n[sharding.passivation]\nstrategy = \"default-idle-strategy\"\n\
         idle-timeout = \"1s\"\n"
    );
    std::fs::write(&config, settings).unwrap();
    let port = free_port();
    let seeds = format!("troupe://troupe@127.0.0.1:{port}");
    let node = start(port, &seeds, &config, &dir.0.join("n0"), "idle");
    await_members(&node, &[&node]);
    let (value, _) = add(&node, "sleepy", 7);
    assert_eq!(value, 7);
    assert!(running_on(&node).unwrap().contains("sleepy"));
    eventually("the idle counter is passivated", || {
        match running_on(&node)?.is_empty() {
            true => Ok(()),
            false => Err("still running".to_string()),
        }
    });
    let expected = BTreeMap::from([("sleepy".to_string(), 7)]);
    check_values(&[&node], &expected, &[&node]);
    assert!(
        running_on(&node).unwrap().contains("sleepy"),
        "started again"
    );
}
