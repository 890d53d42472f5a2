//! What the dispatcher does with a task that yielded while it is the only
//! job in its worker's queue (`actor-core/src/dispatcher.rs`, kept jobs):
//! the other worker leaves it to its own worker for a moment, and takes it
//! when that worker is held up by a long handler. The worker count is read
//! once per process, so the test runs its body in a child process of this
//! test binary with `ASYNC_STD_THREAD_COUNT=2`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use troupe_core::prelude::*;
use troupe_core::rt;

mod common;

/// Set in the child process that runs the test's body.
const CHILD: &str = "TROUPE_KEPT_TASK_CHILD";

/// How long the handler holds its worker: far longer than the patience
/// other workers have with a kept task (a millisecond).
const HELD: Duration = Duration::from_secs(2);

/// Holds its worker's thread for `HELD`, as a handler that computes for
/// long does (never block in a real handler: the guide's "How actors run").
#[derive(Message)]
struct Hold;

/// Answered once the holder has started.
#[derive(Message)]
struct Get;

struct Holder {
    done: Arc<AtomicBool>,
    thread: Arc<std::sync::Mutex<Option<std::thread::ThreadId>>>,
}
impl Actor for Holder {}

#[handlers]
impl Holder {
    async fn hold(&mut self, _m: Hold) {
        *self.thread.lock().unwrap() = Some(std::thread::current().id());
        std::thread::sleep(HELD);
        self.done.store(true, Ordering::SeqCst);
    }
    async fn get(&mut self, _m: Get) {}
}

/// The body, run by `a_kept_task_behind_a_long_handler_is_taken_by_another_worker`
/// in a child process with two workers.
#[test]
#[ignore = "run in a child process with two worker threads"]
fn kept_task_child() {
    if std::env::var_os(CHILD).is_none() {
        // Run with the ignored tests, in this process: nothing to check here.
        return;
    }
    assert_eq!(rt::worker_threads(), 2, "needs ASYNC_STD_THREAD_COUNT=2");
    rt::block_on(common::within("the test", async {
        let system = ActorSystem::new("kept-task").unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let thread = Arc::new(std::sync::Mutex::new(None));
        let holder = system.spawn(Holder {
            done: done.clone(),
            thread: thread.clone(),
        });
        // Started, so that the tell below finds it idle.
        holder.ask(Get).await.unwrap();
        let task = {
            let done = done.clone();
            rt::spawn(async move {
                // The holder goes into this worker's next slot, and this
                // task, yielding, behind it: kept for this worker, which
                // then holds its thread in the handler.
                holder.tell(Hold).unwrap();
                rt::yield_now().await;
                (done.load(Ordering::SeqCst), std::thread::current().id())
            })
        };
        let (holder_done, task_thread) = task.await;
        assert!(
            !holder_done,
            "the yielded task waited for the end of the long handler on its worker"
        );
        let holder_thread = thread.lock().unwrap().expect("the holder ran");
        assert_ne!(
            task_thread, holder_thread,
            "the yielded task went on on the held worker"
        );
        common::eventually("the handler ended", || done.load(Ordering::SeqCst)).await;
        system.shutdown().await;
    }));
}

#[test]
fn a_kept_task_behind_a_long_handler_is_taken_by_another_worker() {
    common::run_in_child("kept_task_child", CHILD, 2);
}
