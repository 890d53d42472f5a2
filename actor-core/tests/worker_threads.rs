//! The dispatcher's worker threads (`actor-core/src/dispatcher.rs`): where
//! an actor runs when another one tells it something, and what a task's
//! handle does (its output, its panic, cancel and detach).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use troupe_core::prelude::*;
use troupe_core::rt;

mod common;

type Seen = Arc<Mutex<Vec<(ThreadId, String)>>>;

fn note(seen: &Seen) {
    let t = std::thread::current();
    seen.lock()
        .unwrap()
        .push((t.id(), t.name().unwrap_or("").to_string()));
}

#[derive(Message)]
struct Note;

#[derive(Message)]
#[message(reply = usize)]
struct Count;

struct Recorder(Seen);
impl Actor for Recorder {}

#[handlers]
impl Recorder {
    async fn note(&mut self, _m: Note) {
        note(&self.0);
    }
    async fn count(&mut self, _m: Count) -> usize {
        self.0.lock().unwrap().len()
    }
}

#[derive(Message)]
struct Go;

struct Teller {
    to: ActorRef<Recorder>,
    seen: Seen,
}
impl Actor for Teller {}

#[handlers]
impl Teller {
    async fn go(&mut self, _m: Go) {
        note(&self.seen);
        self.to.tell(Note).unwrap();
        // Busy a while longer (without giving up the thread), so that an
        // idle worker would have the time to take what waits.
        let busy = std::time::Instant::now();
        while busy.elapsed() < std::time::Duration::from_millis(2) {
            std::hint::spin_loop();
        }
    }
    async fn count(&mut self, _m: Count) -> usize {
        self.seen.lock().unwrap().len()
    }
}

/// An idle actor told something by a running one runs next on the same
/// worker thread (its next slot, which no other worker takes), so the
/// message and the actor's state stay on one core.
///
/// Nearly every round, not every one: an ask from outside the workers
/// goes through them one time in 32, and an actor whose activation is still
/// ending after its reply takes the next message where it runs.
#[test]
fn an_actor_told_by_another_runs_next_on_its_worker() {
    rt::block_on(common::within("the test", async {
        let system = ActorSystem::new("worker-threads").unwrap();
        let (told, tellers) = (Seen::default(), Seen::default());
        let recorder = system.spawn(Recorder(told.clone()));
        let teller = system.spawn(Teller {
            to: recorder.clone(),
            seen: tellers.clone(),
        });
        const ROUNDS: usize = 200;
        for round in 1..=ROUNDS {
            // Both idle before each round.
            assert_eq!(recorder.ask(Count).await.unwrap(), round - 1);
            assert_eq!(teller.ask(Count).await.unwrap(), round - 1);
            teller.tell(Go).unwrap();
            common::eventually("the recorder ran", || told.lock().unwrap().len() == round).await;
        }
        let pairs: Vec<_> = {
            let (told, tellers) = (told.lock().unwrap(), tellers.lock().unwrap());
            tellers.iter().cloned().zip(told.iter().cloned()).collect()
        };
        for (t, _) in &pairs {
            assert!(t.1.starts_with("troupe-worker-"), "ran on {:?}", t.1);
        }
        let together = pairs.iter().filter(|(t, r)| t.0 == r.0).count();
        // (Without the next slot, the other worker takes the told actor
        // while the teller is still busy: it ran on the teller's thread in
        // 6 to 36 rounds of 200 with two workers; with it, in all 200.)
        assert!(
            together >= ROUNDS * 9 / 10,
            "the told actor ran on the teller's thread in {together} rounds of {ROUNDS}"
        );
        system.shutdown().await;
    }));
}

/// Awaiting a task's handle gives its output; a panic in the task is
/// resumed in the awaiter, and the workers go on.
#[test]
fn a_task_handle_gives_the_output_or_the_panic() {
    assert_eq!(rt::block_on(rt::spawn(async { 6 * 7 })), 42);
    let panicked = std::panic::catch_unwind(|| {
        rt::block_on(rt::spawn(async {
            panic!("the task's own panic");
        }))
    });
    let payload = panicked.expect_err("the panic reaches the awaiter");
    assert_eq!(
        payload.downcast_ref::<&str>().copied(),
        Some("the task's own panic")
    );
    // The worker that ran it goes on: as many tasks as there are workers
    // and more all finish.
    let handles: Vec<_> = (0..64).map(|i| rt::spawn(async move { i })).collect();
    let sum: i32 = rt::block_on(async {
        let mut sum = 0;
        for h in handles {
            sum += h.await;
        }
        sum
    });
    assert_eq!(sum, (0..64).sum());
}

/// Dropping a handle detaches its task (it runs on); `cancel` drops a
/// task that has not finished.
#[test]
fn a_dropped_handle_detaches_and_cancel_drops_the_task() {
    rt::block_on(common::within("the test", async {
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        drop(rt::spawn(async move {
            rt::yield_now().await;
            r.store(true, Ordering::SeqCst);
        }));
        common::eventually("the detached task ran", || ran.load(Ordering::SeqCst)).await;

        struct Dropped(Arc<AtomicBool>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = Dropped(dropped.clone());
        let pending = rt::spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        assert_eq!(pending.cancel().await, None);
        assert!(dropped.load(Ordering::SeqCst), "cancel dropped the task");
    }));
}

/// A task that blocks its worker in `block_on` (which a task should not do,
/// but may) still gets what it waits for: what it schedules meanwhile, and
/// the job waiting to run next on its worker, go where other workers take
/// them.
#[test]
fn block_on_inside_a_task_lets_the_jobs_it_waits_for_run() {
    // With one worker, the blocked one, nobody would run them.
    if rt::worker_threads() < 2 {
        return;
    }
    let out = rt::block_on(rt::spawn(async {
        let inner = rt::spawn(async { 7 });
        rt::block_on(inner) + rt::block_on(rt::spawn(async { 35 }))
    }));
    assert_eq!(out, 42);
}

/// The names of this process's threads (Linux truncates them to 15 bytes).
#[cfg(target_os = "linux")]
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim_end().to_string())
        .collect()
}

/// `rt::resolve` resolves a host name on a thread for blocking work, from
/// a task, without starting async-std's executor threads beside the
/// workers (async-std's own resolution would start them).
#[cfg(target_os = "linux")]
#[test]
fn resolving_a_host_name_starts_no_other_executor() {
    let addrs = rt::block_on(rt::spawn(rt::resolve("localhost", 8558))).unwrap();
    assert!(
        addrs
            .iter()
            .any(|a| a.ip().is_loopback() && a.port() == 8558),
        "{addrs:?}"
    );
    let err = rt::block_on(rt::resolve("no such host.invalid", 1));
    assert!(err.is_err(), "{err:?}");
    let names = thread_names();
    assert!(
        !names.iter().any(|n| n.starts_with("async-std")),
        "async-std's executor threads started: {names:?}"
    );
}
