//! The dispatcher: Troupe's own worker threads, which run actor activations
//! and every task the project spawns (Akka's name for what runs actors).
//!
//! A general-purpose executor (async-std's) puts every spawned task on one
//! global queue, so the actor a sender wakes runs on whichever thread is
//! free first, usually another core: the letters, the mailbox and the
//! actor's state then cross cores for every batch of messages. With two
//! pairs of actors on two cores that made the process slower than one pair
//! on one core (BENCHMARKS.md, "The dispatcher"). Here each worker thread
//! keeps what it schedules:
//!
//! - a *next* slot, holding the job most recently woken by the job the
//!   worker is running (an actor that was just told something, a task that
//!   was just sent a reply), which the worker runs as soon as the running
//!   job ends, on the same core, and which no other worker takes;
//! - a local queue, which other workers steal from when they run out, so
//!   that work spreads when there is more of it than one thread can do;
//! - and one injection queue for what is scheduled from other threads
//!   (`block_on`, async-io's helper thread when it drives the reactor,
//!   threads of the user's own).
//!
//! A worker that finds nothing sleeps, and a sleeping worker drives the I/O
//! reactor (async-io's) meanwhile, so a socket that becomes readable wakes
//! a worker directly and its reader task runs there. The protocol that
//! keeps a job from waiting while every worker sleeps is in [`Pool`], and
//! is model-checked with loom.
//!
//! A worker *keeps* the jobs of its own that it queues (a task that
//! yields, the job a newer wake pushed out of the next slot, an activation
//! that goes behind the job its turn woke): while every job in its queue
//! is kept, it is awake and they are few ([`KEPT_AT_MOST`]), the other
//! workers leave them for [`KEPT_PATIENCE`], and then take one only if
//! the worker queued no other since (it is held up in one job) or it had
//! more than one waiting both times (more work than one thread does).
//! New tasks and the actors a
//! connection's reader hands on are not kept: any free worker takes them
//! at once. A task that yields is most often one that feeds an actor (a
//! sender that yields every so many tells), and the actor is in the next
//! slot: taken by an idle worker, the sender ran on one core and its
//! receiver on the other, which split one pair of actors over two cores at
//! a third of the speed of one (BENCHMARKS.md, "Kept jobs"). An actor that
//! used up its `throughput` goes into the next slot if its activation woke
//! no other job, else to the back: behind the sender's yielded task it
//! would let its mailbox grow by a whole turn of the sender's each time. A
//! worker takes its next slot at most [`MAX_NEXT_IN_A_ROW`] times in a row
//! and looks at the injection queue every [`INJECTED_EVERY`] jobs, so that
//! no job waits for ever behind others. A handler that blocks its thread
//! holds up the job in that thread's next slot (never block in a handler:
//! the guide's "How actors run"); everything else is taken by the other
//! workers (its kept jobs after [`KEPT_PATIENCE`]). So
//! does a handler that computes for long: the actor it told waits for the
//! end of its activation, as a task in tokio's LIFO slot does.

use crate::cell::AnyCell;
use crate::sync::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

/// Most times in a row a worker runs the job in its next slot before it
/// takes one from its queues (an actor and a task that wake each other
/// keep the slot to themselves otherwise).
const MAX_NEXT_IN_A_ROW: u32 = 16;

/// A worker looks at the injection queue first every this many jobs.
const INJECTED_EVERY: u32 = 61;

/// Jobs a worker's local queue holds; more go to the injection queue.
const LOCAL_CAPACITY: usize = 256;

/// How long other workers leave a worker's kept jobs before they look
/// again and may take one: long enough for many activations, short enough
/// that a worker that runs a long handler, or that the operating system
/// does not run, holds its kept jobs up a moment only.
// Loom has no clock: its workers sleep until woken.
#[cfg_attr(troupe_loom, allow(dead_code))]
const KEPT_PATIENCE: std::time::Duration = std::time::Duration::from_millis(1);

/// Most jobs a worker keeps in its queue: with more (an actor that tells
/// many idle actors, each pushing the last out of the next slot), they are
/// open to the other workers at once.
const KEPT_AT_MOST: usize = 2;

/// Rounds a worker looks for work (yielding its thread in between) before
/// it goes to sleep: waking a sleeping thread costs far more than a look.
const SEARCH_ROUNDS: u32 = 4;

/// Where a scheduled job goes on the worker that schedules it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Place {
    /// The worker's next slot: woken by the running job, it runs next.
    Next,
    /// The back of the worker's queue: a new task, or a batch's actor.
    Back,
    /// The back of the worker's queue, kept for this worker: a task that
    /// yielded (or an activation that continues as a task).
    Yielded,
    /// The next slot if the running job woke nothing, else the back: an
    /// activation that used up its `throughput`. Its turn is bounded by
    /// [`MAX_NEXT_IN_A_ROW`] as any next job's, but it does not go behind
    /// a sender that keeps telling it more while its mailbox grows.
    Again,
}

/// What a worker runs.
pub(crate) enum Job {
    /// A task (anything spawned through `rt`).
    Task(async_task::Runnable),
    /// An actor's claimed activation (no task: see `cell::AnyCell::run`).
    Activation(Arc<dyn AnyCell>),
}

impl Job {
    fn run(self) {
        match self {
            Job::Task(runnable) => {
                runnable.run();
            }
            Job::Activation(cell) => cell.run(),
        }
    }
}

/// The queues and the sleep protocol of the workers, apart from what a job
/// is and how a worker waits, so that loom can check them.
///
/// The protocol: a scheduler pushes its job, then (after a `SeqCst` fence)
/// reads the count of sleeping workers and wakes one if it is not zero; a
/// worker that found nothing counts itself as sleeping, then (after a fence)
/// looks at every queue once more before it waits, and stays awake if it
/// finds anything. Each side stores before it loads, so at least one of
/// them sees the other: no job is left in a queue while every worker sleeps.
pub(crate) struct Pool<J> {
    injected: Queue<J>,
    locals: Box<[Queue<Queued<J>>]>,
    workers: Box<[WorkerState]>,
    /// Workers counted as sleeping (read without the lock by schedulers).
    sleeping: AtomicUsize,
    /// Of those, the ones that sleep until woken (not for a kept job's
    /// [`KEPT_PATIENCE`]).
    untimed: AtomicUsize,
    /// The sleeping workers, most recent last.
    sleepers: Mutex<Vec<Sleeper>>,
    parkers: Box<[Parker]>,
}

impl<J> Pool<J> {
    pub(crate) fn new(workers: usize) -> Self {
        let workers = workers.max(1);
        Pool {
            injected: Queue::new(usize::MAX),
            locals: (0..workers).map(|_| Queue::new(LOCAL_CAPACITY)).collect(),
            workers: (0..workers).map(|_| WorkerState::new()).collect(),
            sleeping: AtomicUsize::new(0),
            untimed: AtomicUsize::new(0),
            sleepers: Mutex::new(Vec::with_capacity(workers)),
            parkers: (0..workers).map(|_| Parker::new()).collect(),
        }
    }

    /// Queues a job from outside the workers, and wakes one if all sleep.
    pub(crate) fn inject(&self, job: J) {
        self.injected
            .push(job)
            .unwrap_or_else(|_| unreachable!("unbounded"));
        self.wake_one();
    }

    /// Queues a job at the back of worker `w`'s queue (the injection queue
    /// when it is full) and wakes a sleeping worker to steal it, if any:
    /// a new task, or an actor a connection's reader hands on, which any
    /// free worker should take.
    pub(crate) fn push_local(&self, w: usize, job: J) {
        match self.locals[w].push(Queued { job, kept: false }) {
            Ok(()) => self.wake_one(),
            Err(queued) => self.inject(queued.job),
        }
    }

    /// Queues a job of worker `w`'s own at the back of its queue, kept for
    /// `w` (see [`KEPT_PATIENCE`]): a task that yielded on it, or a job
    /// woken by an earlier job there. While `w` keeps every job in its
    /// queue, only a worker that sleeps until woken is woken (it waits out
    /// the patience in its next sleep); else one is woken as for any job.
    pub(crate) fn push_kept(&self, w: usize, job: J) {
        let state = &self.workers[w];
        // Only `w` writes `pushes`: a load and a store do.
        let pushes = state.pushes.load(Ordering::Relaxed);
        state
            .pushes
            .store(pushes.wrapping_add(1), Ordering::Relaxed);
        state.queued_kept.fetch_add(1, Ordering::Relaxed);
        match self.locals[w].push(Queued { job, kept: true }) {
            Ok(()) if self.keeps(w).is_some() => self.wake_untimed(),
            Ok(()) => self.wake_one(),
            Err(queued) => {
                state.queued_kept.fetch_sub(1, Ordering::Relaxed);
                self.inject(queued.job)
            }
        }
    }

    /// Takes the job at the front of worker `v`'s queue.
    fn pop_local(&self, v: usize) -> Option<J> {
        let queued = self.locals[v].pop()?;
        if queued.kept {
            self.workers[v].queued_kept.fetch_sub(1, Ordering::Relaxed);
        }
        Some(queued.job)
    }

    /// Queues a job on worker `w`'s own queue from `w` itself between
    /// jobs (driving the reactor, perhaps on its way to sleep): `w` wakes
    /// if it was asleep, and no other worker is woken for it.
    fn push_own(&self, w: usize, job: J) {
        match self.locals[w].push(Queued { job, kept: false }) {
            Ok(()) => self.wake(w),
            Err(queued) => self.inject(queued.job),
        }
    }

    /// A job for worker `w`: its own queue, the injection queue, then
    /// another worker's queue, unless that worker keeps every job in it.
    /// `waited` is what `w` saw of a worker's kept jobs before it waited
    /// [`KEPT_PATIENCE`]: one of them is taken now if that worker queued
    /// none since (it is stuck in one job), or if it had more than one
    /// waiting both times (more than it runs alone). When nothing is found,
    /// the error holds the kept jobs left this time, if any.
    pub(crate) fn find(&self, w: usize, waited: Option<Left>) -> Result<J, Option<Left>> {
        if let Some(job) = self.pop_local(w) {
            return Ok(job);
        }
        if let Some(job) = self.injected.pop() {
            return Ok(job);
        }
        let n = self.locals.len();
        let mut left = None;
        for v in (1..n).map(|i| (w + i) % n) {
            if self.locals[v].is_empty() {
                continue;
            }
            if let Some(now) = self.keeps(v) {
                let overdue = waited.is_some_and(|then| {
                    then.worker == v
                        && (then.pushes == now.pushes || (then.queued > 1 && now.queued > 1))
                });
                if !overdue {
                    left = Some(now);
                    continue;
                }
            }
            if let Some(job) = self.pop_local(v) {
                return Ok(job);
            }
        }
        Err(left)
    }

    /// What worker `v` keeps, if it keeps every job in its queue: it is
    /// awake (so it looks at its own queue before it sleeps, and nothing
    /// is left behind), queued them all itself as kept, and has no more
    /// than [`KEPT_AT_MOST`].
    fn keeps(&self, v: usize) -> Option<Left> {
        let state = &self.workers[v];
        if !state.awake.load(Ordering::Relaxed) {
            return None;
        }
        let queued = self.locals[v].len();
        let kept = state.queued_kept.load(Ordering::Relaxed);
        (queued <= kept && queued <= KEPT_AT_MOST).then(|| Left {
            worker: v,
            pushes: state.pushes.load(Ordering::Relaxed),
            queued,
        })
    }

    /// Whether worker `w`, on its way to sleep, should look again: there is
    /// a job it may take now, or (unless it sleeps `timed`, for the
    /// patience) kept jobs it has not seen. A worker that found none and
    /// would sleep until woken could otherwise miss a kept job queued just
    /// before (its push woke nobody), and leave it for as long as its
    /// worker is held up.
    fn has_work(&self, w: usize, timed: bool) -> bool {
        !self.injected.is_empty()
            || !self.locals[w].is_empty()
            || (0..self.locals.len()).any(|v| {
                v != w && !self.locals[v].is_empty() && (!timed || self.keeps(v).is_none())
            })
    }

    /// Wakes a sleeping worker, if there is one. Called after a push.
    fn wake_one(&self) {
        self.wake_latest(&self.sleeping, |_| true);
    }

    /// Wakes a worker that sleeps until woken, if there is one. Called
    /// after a kept job's push: such a worker would not see the job again
    /// by itself, where one that waits out the patience will.
    fn wake_untimed(&self) {
        self.wake_latest(&self.untimed, |s| !s.timed);
    }

    /// Wakes the sleeper most recently asleep of those that `fit`, if
    /// `count` (the count of such sleepers, read without the lock after
    /// the fence of the protocol) is not zero.
    fn wake_latest(&self, count: &AtomicUsize, fit: impl Fn(&Sleeper) -> bool) {
        fence(Ordering::SeqCst);
        if count.load(Ordering::SeqCst) == 0 {
            return;
        }
        let woken = {
            let mut sleepers = lock(&self.sleepers);
            let at = sleepers.iter().rposition(fit);
            at.map(|i| self.take_sleeper(&mut sleepers, i))
        };
        if let Some(w) = woken {
            self.parkers[w].unpark();
        }
    }

    /// Takes the `i`th sleeper off the (locked) sleepers and out of the
    /// counts; its worker.
    fn take_sleeper(&self, sleepers: &mut Vec<Sleeper>, i: usize) -> usize {
        let taken = sleepers.swap_remove(i);
        self.sleeping.fetch_sub(1, Ordering::SeqCst);
        if !taken.timed {
            self.untimed.fetch_sub(1, Ordering::SeqCst);
        }
        taken.worker
    }

    /// Wakes worker `w` itself if it sleeps (a worker that schedules
    /// while it drives the reactor, on its way to sleep).
    fn wake(&self, w: usize) {
        if self.unlist(w) {
            self.parkers[w].unpark();
        }
    }

    /// Takes worker `w` off the sleepers; false if it was not on them.
    fn unlist(&self, w: usize) -> bool {
        let mut sleepers = lock(&self.sleepers);
        match sleepers.iter().position(|s| s.worker == w) {
            Some(i) => {
                self.take_sleeper(&mut sleepers, i);
                true
            }
            None => false,
        }
    }

    /// Counts worker `w` as sleeping, unless work arrived meanwhile. True
    /// when it may wait (on the token it took from its parker before this
    /// call); then, woken or not, it calls [`end_sleep`](Self::end_sleep).
    pub(crate) fn begin_sleep(&self, w: usize, timed: bool) -> bool {
        self.workers[w].awake.store(false, Ordering::Relaxed);
        {
            let mut sleepers = lock(&self.sleepers);
            sleepers.push(Sleeper { worker: w, timed });
            self.sleeping.fetch_add(1, Ordering::SeqCst);
            if !timed {
                self.untimed.fetch_add(1, Ordering::SeqCst);
            }
        }
        fence(Ordering::SeqCst);
        if self.has_work(w, timed) {
            self.unlist(w);
            self.workers[w].awake.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Worker `w` is awake: off the sleepers (its waker may have taken it
    /// off already), so that it is never on them twice.
    pub(crate) fn end_sleep(&self, w: usize) {
        self.unlist(w);
        self.workers[w].awake.store(true, Ordering::Relaxed);
    }

    /// Worker `w` is blocked inside a job (`outside_jobs`): what it keeps
    /// is for the others to take, and one is woken for it. `false` when it
    /// is back.
    fn set_blocked(&self, w: usize, blocked: bool) {
        self.workers[w].awake.store(!blocked, Ordering::Relaxed);
        if blocked && !self.locals[w].is_empty() {
            self.wake_one();
        }
    }
}

/// A job in a worker's queue, and whether that worker keeps it.
struct Queued<J> {
    job: J,
    kept: bool,
}

/// A sleeping worker, and whether it sleeps for a kept job's patience
/// (rather than until woken).
struct Sleeper {
    worker: usize,
    timed: bool,
}

/// What a worker saw of another's kept jobs, to compare after a wait.
#[derive(Clone, Copy)]
pub(crate) struct Left {
    worker: usize,
    /// That worker's count of kept jobs it queued.
    pushes: usize,
    /// The jobs in its queue.
    queued: usize,
}

/// What the other workers read of one worker, on a cache line of its own
/// (the worker writes it as it queues kept jobs and sleeps).
#[repr(align(128))]
struct WorkerState {
    /// False while it sleeps (or blocks in `outside_jobs`); an awake
    /// worker looks at its own queue before it sleeps.
    awake: AtomicBool,
    /// Kept jobs it has queued, ever (wrapping): unchanged over a wait
    /// means it is stuck in one job.
    pushes: AtomicUsize,
    /// Kept jobs in its queue now.
    queued_kept: AtomicUsize,
}

impl WorkerState {
    fn new() -> Self {
        WorkerState {
            awake: AtomicBool::new(true),
            pushes: AtomicUsize::new(0),
            queued_kept: AtomicUsize::new(0),
        }
    }
}

#[cfg(troupe_loom)]
use loom::sync::Mutex;
#[cfg(not(troupe_loom))]
use std::sync::Mutex;

fn lock<T>(m: &Mutex<T>) -> impl std::ops::DerefMut<Target = T> + '_ {
    #[cfg(not(troupe_loom))]
    return m.lock().unwrap_or_else(|e| e.into_inner());
    #[cfg(troupe_loom)]
    return m.lock().unwrap();
}

/// How a worker waits: on an event it listens to before it counts itself
/// as sleeping (so a wake-up after that is never lost). The worker's loop
/// is a future under async-io's `block_on`, which drives the reactor while
/// the worker waits, if no other thread does.
#[cfg(not(troupe_loom))]
struct Parker(event_listener::Event);

#[cfg(not(troupe_loom))]
impl Parker {
    fn new() -> Self {
        Parker(event_listener::Event::new())
    }
    fn prepare(&self) -> event_listener::EventListener {
        self.0.listen()
    }
    fn unpark(&self) {
        self.0.notify(1);
    }
}

/// Under loom: a notification that a wait consumes (one given before the
/// wait is kept for it).
#[cfg(troupe_loom)]
struct Parker(loom::sync::Notify);

#[cfg(troupe_loom)]
impl Parker {
    fn new() -> Self {
        Parker(loom::sync::Notify::new())
    }
    fn park(&self) {
        self.0.wait();
    }
    fn unpark(&self) {
        self.0.notify();
    }
}

/// A queue of jobs: a well-kept lock-free queue, or under loom a stand-in
/// with the same shape (see below).
#[cfg(not(troupe_loom))]
struct Queue<T>(concurrent_queue::ConcurrentQueue<T>);

#[cfg(not(troupe_loom))]
impl<T> Queue<T> {
    fn new(capacity: usize) -> Self {
        Queue(if capacity == usize::MAX {
            concurrent_queue::ConcurrentQueue::unbounded()
        } else {
            concurrent_queue::ConcurrentQueue::bounded(capacity)
        })
    }
    /// `Err(item)` when the queue is full.
    fn push(&self, item: T) -> Result<(), T> {
        self.0.push(item).map_err(|e| e.into_inner())
    }
    fn pop(&self) -> Option<T> {
        self.0.pop().ok()
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Under loom, a queue shaped like concurrent-queue's, made of atomics that
/// loom models: a push reserves a place with an RMW of `tail` and then
/// marks it written; a pop takes the place with a CAS of `head` and waits
/// until it is written; `is_empty` is two plain loads. Every one of them
/// only acquires or releases (concurrent-queue's are `SeqCst`, but the
/// protocol does not rely on that), and there is no lock (a loom mutex
/// orders everything), so that the fences are what orders the two sides
/// of the protocol. The items themselves sit behind a std mutex, which loom
/// does not see. A model pushes at most [`PLACES`] items into one queue.
#[cfg(troupe_loom)]
struct Queue<T> {
    head: AtomicUsize,
    tail: AtomicUsize,
    written: [loom::sync::atomic::AtomicBool; PLACES],
    items: std::sync::Mutex<[Option<T>; PLACES]>,
}

#[cfg(troupe_loom)]
const PLACES: usize = 4;

#[cfg(troupe_loom)]
impl<T> Queue<T> {
    fn new(_capacity: usize) -> Self {
        Queue {
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            written: std::array::from_fn(|_| loom::sync::atomic::AtomicBool::new(false)),
            items: std::sync::Mutex::new(std::array::from_fn(|_| None)),
        }
    }
    fn push(&self, item: T) -> Result<(), T> {
        let at = self.tail.fetch_add(1, Ordering::AcqRel);
        assert!(at < PLACES, "a model pushes at most PLACES items");
        self.items.lock().unwrap()[at] = Some(item);
        self.written[at].store(true, Ordering::Release);
        Ok(())
    }
    fn pop(&self) -> Option<T> {
        loop {
            let head = self.head.load(Ordering::Acquire);
            if head == self.tail.load(Ordering::Acquire) {
                return None;
            }
            if self
                .head
                .compare_exchange(head, head + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                while !self.written[head].load(Ordering::Acquire) {
                    loom::thread::yield_now();
                }
                return self.items.lock().unwrap()[head].take();
            }
        }
    }
    fn is_empty(&self) -> bool {
        self.head.load(Ordering::Acquire) == self.tail.load(Ordering::Acquire)
    }
    fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::Acquire).saturating_sub(head)
    }
}

// ---- The workers ----
// Under `troupe_loom` the pool holds loom objects, which only work inside a
// model: the loom build runs the model tests alone (`.ci/run`).

static POOL: LazyLock<Pool<Job>> = LazyLock::new(|| {
    let workers = crate::rt::worker_threads();
    for w in 0..workers {
        std::thread::Builder::new()
            .name(format!("troupe-worker-{w}"))
            .spawn(move || worker(w))
            .unwrap_or_else(|e| panic!("cannot start dispatcher thread {w}: {e}"));
    }
    Pool::new(workers)
});

/// What this thread is to the dispatcher.
struct Here {
    /// The worker this thread is, if it is one (none while a job on it
    /// blocks in `block_on`: see `outside_jobs`).
    worker: std::cell::Cell<Option<usize>>,
    /// Whether it is running a job now (only then is the next slot taken
    /// care of: a worker that schedules while it sleeps, driving the
    /// reactor, puts the job on its queue instead).
    running: std::cell::Cell<bool>,
    /// The next slot: the job to run when the running one ends.
    next: std::cell::Cell<Option<Job>>,
}

thread_local! {
    static HERE: Here = const {
        Here {
            worker: std::cell::Cell::new(None),
            running: std::cell::Cell::new(false),
            next: std::cell::Cell::new(None),
        }
    };
}

/// Schedules `job`: on a worker that is running a job, at `place`; from
/// anywhere else, on the injection queue.
pub(crate) fn schedule(job: Job, place: Place) {
    /// Where the scheduling thread is.
    enum At {
        Outside,
        Running(usize),
        Between(usize),
    }
    // One look at this thread's state (this is on every tell's path). The
    // job stays in `job` unless it goes to the next slot, in which case
    // `job` takes the one the slot held. A thread whose locals are being
    // destroyed is not a worker.
    let mut job = Some(job);
    let at = HERE
        .try_with(|here| match here.worker.get() {
            None => At::Outside,
            Some(w) if !here.running.get() => At::Between(w),
            Some(w) => {
                match place {
                    Place::Next => job = here.next.replace(job.take()),
                    // Into the slot if it is free; else the job stays in
                    // `job`, for the back of the queue.
                    Place::Again => match here.next.take() {
                        None => here.next.set(job.take()),
                        woken => here.next.set(woken),
                    },
                    Place::Back | Place::Yielded => {}
                }
                At::Running(w)
            }
        })
        .unwrap_or(At::Outside);
    let Some(job) = job else { return };
    let pool = &*POOL;
    match at {
        // A task that yielded, or the job the next slot held (woken by an
        // earlier job here, for this worker): kept for it if alone.
        // A new task or a batch's actor, for whichever worker is free.
        At::Running(w) if place == Place::Back => pool.push_local(w, job),
        // A task that yielded, the job the next slot held, or an activation
        // that goes behind the job its turn woke: this worker's own work.
        At::Running(w) => pool.push_kept(w, job),
        // A worker between jobs, driving the reactor: its own queue, and
        // it wakes if it was asleep. (When it is busy, polling the reactor
        // in its yield, an idle worker is not woken: the job waits behind
        // the worker's next ones, but stays where its connection's other
        // work runs. Waking one measured slower remote tells.)
        At::Between(w) => pool.push_own(w, job),
        At::Outside => pool.inject(job),
    }
}

/// Schedules the activation claimed for `cell` (its `SCHEDULED` bit set by
/// this caller): it runs next on this worker, or on any worker from
/// outside them. `Place::Again` for an activation that used up its
/// `throughput`.
pub(crate) fn schedule_activation(cell: Arc<dyn AnyCell>, place: Place) {
    schedule(Job::Activation(cell), place);
}

/// A worker thread: its loop runs under async-io's `block_on`, so that
/// the reactor is driven by a worker that sleeps (what it wakes then runs
/// on that worker, without a hand-off) and polled, without waiting, each
/// time a busy worker yields.
fn worker(w: usize) {
    HERE.with(|here| here.worker.set(Some(w)));
    loop {
        // Jobs catch their own panics; one outside them (a logger's, say)
        // must not end the worker, or what waits in its next slot would
        // wait for ever.
        let ended = std::panic::catch_unwind(|| async_io::block_on(work(w)));
        if let Err(p) = ended {
            HERE.with(|here| {
                here.running.set(false);
                if let Some(job) = here.next.take() {
                    POOL.push_local(w, job);
                }
            });
            eprintln!(
                "troupe: bug: dispatcher worker {w} panicked outside a job ({}); it goes on",
                crate::cell::panic_message(&*p)
            );
        }
    }
}

async fn work(w: usize) {
    let pool = &*POOL;
    let mut ticks: u32 = 0;
    let mut next_in_a_row: u32 = 0;
    // A job another worker kept, which this one left and then waited
    // `KEPT_PATIENCE` for.
    let mut waited: Option<Left> = None;
    loop {
        ticks = ticks.wrapping_add(1);
        let injected_first = ticks.is_multiple_of(INJECTED_EVERY);
        if injected_first {
            // `block_on` looks for I/O events (without waiting) when its
            // future yields.
            futures_lite::future::yield_now().await;
        }
        let job = HERE.with(|here| {
            // The injection queue's turn comes before the next slot too
            // (the next job stays, and runs right after).
            if injected_first {
                if let Some(job) = pool.injected.pop() {
                    return Ok(job);
                }
            }
            if next_in_a_row < MAX_NEXT_IN_A_ROW {
                if let Some(job) = here.next.take() {
                    next_in_a_row += 1;
                    return Ok(job);
                }
            } else if let Some(job) = here.next.take() {
                // Its turn is over: to the back, behind what waits (and
                // kept for this worker if nothing does).
                pool.push_kept(w, job);
            }
            next_in_a_row = 0;
            let mut found = pool.find(w, waited.take());
            let mut round = 0;
            while found.is_err() && round < SEARCH_ROUNDS {
                std::thread::yield_now();
                found = pool.find(w, None);
                round += 1;
            }
            found
        });
        match job {
            Ok(job) => run(job),
            Err(left) => {
                #[cfg(not(troupe_loom))]
                {
                    let token = pool.parkers[w].prepare();
                    if pool.begin_sleep(w, left.is_some()) {
                        match left {
                            // Woken, or the kept job has waited long
                            // enough: it is taken if it is still the same.
                            Some(left) => {
                                let waited_out = async {
                                    async_io::Timer::after(KEPT_PATIENCE).await;
                                    Some(left)
                                };
                                waited = futures_lite::future::or(
                                    async {
                                        token.await;
                                        None
                                    },
                                    waited_out,
                                )
                                .await;
                            }
                            None => token.await,
                        }
                    }
                }
                #[cfg(troupe_loom)]
                if pool.begin_sleep(w, left.is_some()) {
                    pool.parkers[w].park();
                }
                pool.end_sleep(w);
            }
        }
    }
}

/// Runs one job, as the running job of this worker. A panic that escapes
/// a job (activations and tasks catch their own) is logged; the worker
/// goes on.
fn run(job: Job) {
    HERE.with(|here| here.running.set(true));
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run())) {
        tracing::error!(
            "bug: a panic escaped a job of the dispatcher: {}",
            crate::cell::panic_message(&*p)
        );
    }
    HERE.with(|here| here.running.set(false));
}

/// Runs `f` (a `block_on`) with this thread taken for a thread outside the
/// workers: on a worker, inside a job, what it schedules meanwhile goes to
/// the injection queue, and the job waiting in its next slot to its queue,
/// so that other workers take them while this one is blocked (the future
/// `f` waits for may need them).
pub(crate) fn outside_jobs<T>(f: impl FnOnce() -> T) -> T {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(w) = self.0 {
                POOL.set_blocked(w, false);
                let _ = HERE.try_with(|here| here.worker.set(Some(w)));
            }
        }
    }
    let worker = HERE
        .try_with(|here| {
            let w = here.worker.take()?;
            if let Some(job) = here.next.take() {
                POOL.push_local(w, job);
            }
            POOL.set_blocked(w, true);
            Some(w)
        })
        .ok()
        .flatten();
    let _restore = Restore(worker);
    f()
}

#[cfg(all(test, troupe_loom))]
mod tests {
    use super::Pool;
    use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use loom::sync::Arc;

    /// A worker as `worker` runs it (no next slot, no search rounds):
    /// takes jobs and sleeps when it finds none; the one that runs the last
    /// job (by a count every job adds to) stops them all.
    fn worker(
        pool: Arc<Pool<usize>>,
        w: usize,
        jobs: usize,
        kept: bool,
        ran: Arc<[AtomicUsize; 4]>,
        stop: Arc<AtomicBool>,
    ) {
        loop {
            match pool.find(w, None) {
                Ok(j) => {
                    // Job 0 yields: job 1 is what it queues as kept.
                    if kept && j == 0 {
                        pool.push_kept(w, 1);
                    }
                    ran[j].fetch_add(1, Ordering::SeqCst);
                    if ran[3].fetch_add(1, Ordering::SeqCst) + 1 == jobs {
                        stop.store(true, Ordering::SeqCst);
                        for p in pool.parkers.iter() {
                            p.unpark();
                        }
                    }
                }
                Err(_) if stop.load(Ordering::SeqCst) => return,
                // A worker that left a kept job sleeps until woken here
                // too: loom has no clock, and the job's owner runs it.
                Err(left) => {
                    if pool.begin_sleep(w, left.is_some()) {
                        pool.parkers[w].park();
                    }
                    pool.end_sleep(w);
                }
            }
        }
    }

    /// Model-checks the sleep protocol under every interleaving:
    /// `RUSTFLAGS="--cfg troupe_loom" cargo test -p troupe-core --lib dispatcher`.
    /// Jobs are injected from outside and pushed on a worker's own queue
    /// (as a yield does) while the workers go to sleep: every job runs
    /// exactly once, and a job left while every worker sleeps is a
    /// deadlock, which loom reports. One worker with three jobs at
    /// `.ci/run`'s three preemptions; two workers (stealing) with two jobs
    /// at two, which takes seconds where three jobs take minutes. With
    /// `kept`, job 1 is not pushed from outside: whichever worker runs job
    /// 0 queues it as kept, as a task that yields does.
    fn model(workers: usize, jobs: usize, kept: bool) {
        let mut builder = loom::model::Builder::new();
        builder.max_threads = 4;
        if workers > 1 {
            builder.preemption_bound = Some(2);
        }
        builder.check(move || {
            let pool = Arc::new(Pool::new(workers));
            // Runs of jobs 0, 1 and 2, and of all of them.
            let ran: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
            let stop = Arc::new(AtomicBool::new(false));
            let threads: Vec<_> = (0..workers)
                .map(|w| {
                    let (pool, ran, stop) = (pool.clone(), ran.clone(), stop.clone());
                    loom::thread::spawn(move || worker(pool, w, jobs, kept, ran, stop))
                })
                .collect();
            pool.inject(0);
            if !kept {
                pool.push_local(workers - 1, 1);
            }
            if jobs > 2 {
                pool.inject(2);
            }
            for t in threads {
                t.join().unwrap();
            }
            for (i, n) in ran[..jobs].iter().enumerate() {
                assert_eq!(n.load(Ordering::SeqCst), 1, "job {i}");
            }
        });
    }

    #[test]
    fn loom_one_worker() {
        model(1, 3, false);
    }

    #[test]
    fn loom_two_workers() {
        model(2, 2, false);
    }

    /// A kept job (a yield) while the other worker looks for work and
    /// sleeps: it runs exactly once, and nobody sleeps with it left.
    #[test]
    fn loom_two_workers_kept_job() {
        model(2, 2, true);
    }
}
