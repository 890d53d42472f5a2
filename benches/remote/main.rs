//! Remote messaging benchmarks between two processes on loopback: Troupe,
//! and ractor_cluster (ractor 0.16 with its cluster feature) where it
//! builds, in one run.
//!
//! ```sh
//! cargo bench --manifest-path benches/remote/Cargo.toml
//! ```
//!
//! For each framework the driver starts a server process (this program
//! re-run as `child FRAMEWORK server`), then a client process per workload
//! (`child FRAMEWORK tell|ask ADDRESS`):
//!
//! - `tell`: 1,000,000 one-way messages with a 100-byte body from one
//!   sender to one actor, then one ask that confirms the count; messages
//!   per second;
//! - `ask`: 20,000 sequential asks with a 100-byte body (after 1,000 to
//!   warm up); round-trip p50 and p99 in µs.
//!
//! `raw-tcp` is the floor: blocking sockets, no framework, the same
//! 100-byte round trip (it has no `tell` figure).
//!
//! The frameworks are measured in rounds (`REMOTE_ROUNDS`, 3 by default),
//! in the opposite order every other round; the table shows each figure's
//! median over the rounds, and each round's ask p50 over the raw-TCP p50
//! of the same round is printed below it (this host's loopback round trip
//! drifts by 10-20 µs between runs minutes apart, more than the overhead
//! being measured).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

mod ractor_side;
mod raw_side;
#[path = "../benches/support/side_by_side.rs"]
mod side_by_side;
mod troupe_side;

use side_by_side::median;

/// Messages of the `tell` workload.
pub const TELL_N: u64 = 1_000_000;
/// Asks of the `ask` workload (after `ASK_WARMUP`).
pub const ASK_N: usize = 20_000;
/// Asks before measuring.
pub const ASK_WARMUP: usize = 1_000;
/// Size of every message body.
pub const BODY: usize = 100;

/// One measurement: named figures.
pub type Figures = Vec<(&'static str, f64)>;

/// Round-trip percentiles of sorted samples, in µs.
pub fn percentiles(mut rtts: Vec<std::time::Duration>) -> Figures {
    rtts.sort();
    let at =
        |p: f64| rtts[((rtts.len() as f64 * p) as usize).min(rtts.len() - 1)].as_secs_f64() * 1e6;
    vec![("ask_p50_us", at(0.50)), ("ask_p99_us", at(0.99))]
}

#[allow(clippy::print_stdout)]
fn child(framework: &str, role: &str, address: Option<&str>) {
    let figures = match (framework, role) {
        ("troupe", "server") => return troupe_side::serve(),
        ("ractor", "server") => return ractor_side::serve(),
        ("raw-tcp", "server") => return raw_side::serve(),
        ("raw-tcp", workload) => raw_side::client(workload, address.expect("address")),
        ("troupe", workload) => troupe_side::client(workload, address.expect("address")),
        ("ractor", workload) => ractor_side::client(workload, address.expect("address")),
        other => panic!("unknown child {other:?}"),
    };
    for (k, v) in figures {
        println!("FIGURE {k} {v}");
    }
}

fn measure(framework: &str) -> Result<Figures, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut server = Command::new(&exe)
        .args(["child", framework, "server"])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let result = (|| {
        let address = line
            .trim()
            .strip_prefix("READY ")
            .ok_or_else(|| format!("{framework} server did not start: {line:?}"))?
            .to_string();
        let mut figures = Figures::new();
        for workload in ["tell", "ask"] {
            let out = Command::new(&exe)
                .args(["child", framework, workload, &address])
                .output()
                .map_err(|e| e.to_string())?;
            if !out.status.success() {
                return Err(format!(
                    "{framework} {workload} failed: {}",
                    String::from_utf8_lossy(&out.stderr)
                        .lines()
                        .last()
                        .unwrap_or("")
                ));
            }
            for l in String::from_utf8_lossy(&out.stdout).lines() {
                let mut parts = l.split_whitespace();
                if parts.next() == Some("FIGURE") {
                    let (Some(k), Some(v)) = (parts.next(), parts.next()) else {
                        continue;
                    };
                    let key: &'static str = Box::leak(k.to_string().into_boxed_str());
                    figures.push((key, v.parse().map_err(|_| format!("bad figure {l}"))?));
                }
            }
        }
        Ok(figures)
    })();
    let _ = server.kill();
    let _ = server.wait();
    result
}

#[allow(clippy::print_stdout)]
fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    if args.first().map(String::as_str) == Some("child") {
        child(&args[1], &args[2], args.get(3).map(String::as_str));
        return;
    }
    let only: Vec<&str> = args.iter().map(String::as_str).collect();
    let columns = [
        ("tell msg/s (100 B)", "tell_msgs_per_sec"),
        ("ask p50 µs", "ask_p50_us"),
        ("ask p99 µs", "ask_p99_us"),
    ];
    let rounds: usize = std::env::var("REMOTE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(3);
    let chosen: Vec<&str> = ["troupe", "ractor", "raw-tcp"]
        .into_iter()
        .filter(|fw| only.is_empty() || only.contains(fw))
        .collect();
    // Every round's figures, per framework.
    let mut per_round: BTreeMap<&str, Vec<Figures>> = BTreeMap::new();
    for round in 0..rounds {
        let mut order = chosen.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for fw in order {
            match measure(fw) {
                Ok(f) => per_round.entry(fw).or_default().push(f),
                Err(e) => eprintln!("{e}"),
            }
        }
    }
    let figure = |figs: &Figures, key: &str| figs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    // The median of each figure over the rounds.
    let results: BTreeMap<&str, Figures> = per_round
        .iter()
        .map(|(fw, all)| {
            let keys: Vec<&'static str> = all[0].iter().map(|(k, _)| *k).collect();
            let medians = keys
                .into_iter()
                .map(|k| {
                    (
                        k,
                        median(&all.iter().filter_map(|f| figure(f, k)).collect::<Vec<_>>()),
                    )
                })
                .collect();
            (*fw, medians)
        })
        .collect();
    println!();
    print!("{:<8}", "");
    for (label, _) in columns {
        print!(" | {label:>18}");
    }
    println!();
    for (fw, figs) in &results {
        print!("{fw:<8}");
        for (_, key) in columns {
            match figs.iter().find(|(k, _)| k == &key) {
                Some((_, v)) if *v >= 1000.0 => print!(" | {v:>18.0}"),
                Some((_, v)) => print!(" | {v:>18.1}"),
                None => print!(" | {:>18}", "-"),
            }
        }
        println!();
    }
    println!("(medians of {rounds} rounds)");
    if let Some(raw) = per_round.get("raw-tcp") {
        for (fw, all) in per_round.iter().filter(|(fw, _)| **fw != "raw-tcp") {
            let over: Vec<f64> = all
                .iter()
                .zip(raw)
                .filter_map(|(f, r)| Some(figure(f, "ask_p50_us")? - figure(r, "ask_p50_us")?))
                .collect();
            let each: Vec<String> = over.iter().map(|d| format!("{d:+.1}")).collect();
            println!(
                "{fw} ask p50 over raw TCP in each round: {} µs (median {:+.1})",
                each.join(" "),
                median(&over)
            );
        }
    }
    println!();
    for (fw, figs) in &results {
        let fields: Vec<String> = figs
            .iter()
            .map(|(k, v)| format!("\"{k}\":{v:.3}"))
            .collect();
        println!(
            "{{\"framework\":\"{fw}\",\"remote\":true,{}}}",
            fields.join(",")
        );
    }
}
