//! The one place that names the async runtime.
//!
//! Troupe runs on async-std (itself built on smol's `async-executor` and
//! `async-io`). Every spawn, sleep and timer in the project goes through this
//! module, so that moving to smol is a change to this file only.

use std::future::Future;
use std::time::{Duration, Instant};

/// Handle to a spawned task; awaiting it yields the task's output. Dropping
/// it lets the task run on, detached.
pub type JoinHandle<T> = async_std::task::JoinHandle<T>;

/// A timer that completes at a deadline. Creating one is cheap; it registers
/// with the reactor when first polled.
pub type Timer = async_io::Timer;

/// An async TCP stream (clones share the socket).
pub type TcpStream = async_std::net::TcpStream;

/// An async TCP listener; build one from a bound `std::net::TcpListener`
/// with `From`.
pub type TcpListener = async_std::net::TcpListener;

/// An async UDP socket (for DNS queries); build one with `bind`, or from a
/// bound `std::net::UdpSocket` with `From`.
pub type UdpSocket = async_std::net::UdpSocket;

/// Spawns a task on the shared executor.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    async_std::task::spawn(future)
}

/// Spawns a task that nobody awaits, straight on the executor underneath
/// async-std: no join handle, no async-std task id or task-locals wrapper
/// (so `async_std::task::current()` is not available inside it). Used for
/// the run queue's runners and for activations that have to wait, where
/// the per-task overhead is on the hot path.
pub(crate) fn spawn_detached<F>(future: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    // async-std configures the shared executor (thread count from
    // `ASYNC_STD_THREAD_COUNT`, thread names) the first time it spawns; make
    // sure that happens before anything reaches the executor directly.
    static RUNTIME_STARTED: std::sync::Once = std::sync::Once::new();
    RUNTIME_STARTED.call_once(|| drop(async_std::task::spawn(async {})));
    async_global_executor::spawn(future).detach();
}

/// How many threads run the executor's tasks: `ASYNC_STD_THREAD_COUNT`
/// when set (at least 1, as the executor takes it), else the available
/// parallelism.
pub(crate) fn worker_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| {
        std::env::var("ASYNC_STD_THREAD_COUNT")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .map(|n| n.max(1))
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    })
}

/// Runs a future to completion on the current thread (for `main`, tests
/// and examples).
pub fn block_on<F: Future>(future: F) -> F::Output {
    async_std::task::block_on(future)
}

/// Waits for `duration`.
pub async fn sleep(duration: Duration) {
    async_io::Timer::after(duration).await;
}

/// A timer firing after `duration`.
pub fn timer_after(duration: Duration) -> Timer {
    async_io::Timer::after(duration)
}

/// A timer firing at `deadline`.
pub fn timer_at(deadline: Instant) -> Timer {
    async_io::Timer::at(deadline)
}

/// Lets other tasks run before continuing.
pub async fn yield_now() {
    futures_lite::future::yield_now().await;
}

/// Runs `future`, giving up after `duration`.
pub async fn timeout<F: Future>(duration: Duration, future: F) -> Option<F::Output> {
    futures_lite::future::or(async { Some(future.await) }, async {
        sleep(duration).await;
        None
    })
    .await
}
