//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::future::Future;
use std::time::{Duration, Instant};
use troupe_core::rt;

/// Generous deadline for conditions that normally hold within milliseconds;
/// it only bounds how long a failing test takes.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Awaits `fut`, failing the test if it takes longer than `DEADLINE`.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match rt::timeout(DEADLINE, fut).await {
        Some(v) => v,
        None => panic!("timed out after {DEADLINE:?} waiting for {what}"),
    }
}

/// Receives the next event, failing the test after `DEADLINE`.
pub async fn next<T>(rx: &async_channel::Receiver<T>) -> T {
    within("the next event", rx.recv())
        .await
        .expect("event channel closed")
}

/// Polls `cond` until it holds, failing the test after `DEADLINE`.
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > DEADLINE {
            panic!("condition not met within {DEADLINE:?}: {what}");
        }
        rt::sleep(Duration::from_millis(2)).await;
    }
}

/// Installs a test log subscriber once (RUST_LOG controls it).
pub fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Runs the ignored test `test` of this test binary in a child process,
/// with `ASYNC_STD_THREAD_COUNT=workers` and `marker` set (the child's
/// body checks the marker, so that the ignored test does nothing when run
/// with the others), and fails if it does not pass. The dispatcher reads
/// its worker count once per process, so a test that needs a given count
/// runs its body this way.
pub fn run_in_child(test: &str, marker: &str, workers: usize) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--ignored", "--nocapture"])
        .env("ASYNC_STD_THREAD_COUNT", workers.to_string())
        .env(marker, "1")
        .output()
        .expect("cannot run this test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the child with {workers} worker(s) failed:\n{stdout}\n{stderr}"
    );
}
