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
