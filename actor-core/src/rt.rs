//! The one place that names the async runtime.
//!
//! Troupe's tasks run on its own worker threads (the dispatcher, which
//! also runs actor activations); I/O, timers and sockets come from
//! async-std and the async-io reactor underneath it. Every spawn, sleep
//! and timer in the project goes through this module, so that moving to
//! another runtime is a change to this file (and the dispatcher) only.

use crate::dispatcher::{self, Job, Place};
use futures_lite::FutureExt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Handle to a spawned task; awaiting it yields the task's output (or
/// resumes the task's panic). Dropping it lets the task run on, detached.
///
/// ```
/// use troupe_core::rt;
///
/// let answer = rt::block_on(async { rt::spawn(async { 6 * 7 }).await });
/// assert_eq!(answer, 42);
/// ```
pub struct JoinHandle<T> {
    task: Option<async_task::Task<T>>,
}

impl<T> JoinHandle<T> {
    /// Cancels the task and waits until it is dropped; its output if it
    /// had already finished (`None` if it had panicked).
    pub async fn cancel(mut self) -> Option<T> {
        match self.task.take() {
            // A task that had panicked gives nothing (its panic was logged).
            Some(task) => std::panic::AssertUnwindSafe(task.cancel())
                .catch_unwind()
                .await
                .ok()
                .flatten(),
            None => None,
        }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.task.as_mut() {
            Some(task) => Pin::new(task).poll(cx),
            // Only `cancel` takes the task, and it consumes the handle.
            None => Poll::Pending,
        }
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.detach();
        }
    }
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle").finish_non_exhaustive()
    }
}

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

/// Resolves `host` (a name, or an IP address written out) and `port` to
/// socket addresses, in the order the system resolver gives them. The
/// resolver blocks, so it runs on a thread kept for blocking work, not on
/// a worker. (Connecting with a `(host, port)` pair would resolve through
/// async-std, which starts async-std's own executor threads beside the
/// workers.)
///
/// ```
/// use troupe_core::rt;
///
/// let addrs = rt::block_on(rt::resolve("127.0.0.1", 8558)).unwrap();
/// assert_eq!(addrs, vec!["127.0.0.1:8558".parse().unwrap()]);
/// ```
pub async fn resolve(host: &str, port: u16) -> std::io::Result<Vec<std::net::SocketAddr>> {
    use std::net::ToSocketAddrs;
    let host = host.to_owned();
    blocking::unblock(move || Ok((host.as_str(), port).to_socket_addrs()?.collect())).await
}

/// Spawns a task on the dispatcher's worker threads. A panic in the task
/// is logged, and resumed in whoever awaits its handle.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let future = std::panic::AssertUnwindSafe(future).catch_unwind();
    let future = async move {
        match future.await {
            Ok(out) => out,
            Err(p) => {
                tracing::error!("a task panicked: {}", crate::cell::panic_message(&*p));
                std::panic::resume_unwind(p)
            }
        }
    };
    let (runnable, task) = async_task::Builder::new()
        .propagate_panic(true)
        .spawn(move |()| future, async_task::WithInfo(schedule_task));
    // A new task goes behind the spawner's queue, not into its next slot.
    dispatcher::schedule(Job::Task(runnable), Place::Back);
    JoinHandle { task: Some(task) }
}

/// Spawns a task that nobody awaits (activations that have to wait): no
/// panic wrapper or stored output, as before the dispatcher. Activations
/// catch their handlers' panics; one escaping the task is logged by the
/// worker that ran it. The task goes behind this worker's queue as a
/// yielded task does, kept for this worker while it is alone there: it is
/// the activation that was running here, and the actors it tells wait
/// here in the next slot.
pub(crate) fn spawn_detached<F>(future: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let (runnable, task) = async_task::spawn(future, async_task::WithInfo(schedule_task));
    task.detach();
    dispatcher::schedule(Job::Task(runnable), Place::Yielded);
}

/// Where a woken task goes: a task that woke itself while it ran (a
/// yield) to the back of the queue, kept for this worker, one woken by
/// another job next.
fn schedule_task(runnable: async_task::Runnable, info: async_task::ScheduleInfo) {
    let place = if info.woken_while_running {
        Place::Yielded
    } else {
        Place::Next
    };
    dispatcher::schedule(Job::Task(runnable), place);
}

/// How many worker threads the dispatcher runs (or will run, once
/// started): `ASYNC_STD_THREAD_COUNT` when set (at least 1; the name
/// async-std's executor read, kept for the scripts and tests that set it),
/// else the available parallelism. Read once per process.
///
/// ```
/// assert!(troupe_core::rt::worker_threads() >= 1);
/// ```
pub fn worker_threads() -> usize {
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
/// and examples). Inside a task or a handler it blocks a worker thread
/// until the future completes (with one worker, for ever if the future
/// needs another task): await instead. The thread only waits meanwhile:
/// the I/O reactor is driven by the dispatcher's sleeping workers, so that
/// what it wakes runs where it woke.
pub fn block_on<F: Future>(future: F) -> F::Output {
    dispatcher::outside_jobs(|| futures_lite::future::block_on(future))
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
