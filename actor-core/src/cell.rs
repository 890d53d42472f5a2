//! The actor cell: an actor's mailbox, state and scheduling.
//!
//! An idle actor is not a task. Its cell holds the mailbox and the parked
//! state; the first message to arrive schedules an *activation* (queued on
//! the dispatcher, see `dispatcher`) that owns the state, handles up to
//! `throughput` messages, yields if more are waiting, and gives the state
//! up again when the mailbox is empty.
//! This is Akka's dispatcher design: memory per idle actor is the cell
//! alone, and a busy actor runs without a wake-up per message.
//!
//! An activation is only the cell's `Arc` (`Activation`): messages whose
//! handler completes on its first poll run on a synchronous fast path;
//! lifecycle phases and handlers or hooks that wait continue on the general
//! async path (`run_slow`), boxed only then, in a task of their own.

use crate::actor::Actor;
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::context::Context;
use crate::dead_letters::lock;
use crate::error::SpawnError;
use crate::heap_future::HeapFuture;
use crate::letter::{Letter, Node, Opened, SystemLetter};
use crate::mailbox::{Batch, Mailbox};
use crate::path::{ActorPath, AsNameKey, Name, NameKey};
use crate::props::{Factory, MailboxConfig, Props, Source, Supervision};
use crate::rt;
use crate::supervision::{RestartDecision, SupervisorStrategy};
use crate::system::SystemShared;
use crate::system_message::SystemMessage;
use crate::watch::{StopReason, Terminated};
use event_listener::Event;
use futures_lite::FutureExt;
use std::any::Any;
use std::borrow::Borrow;
use std::borrow::Cow;
use std::cell::UnsafeCell;
use std::collections::HashSet;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

/// An activation is running or about to run.
pub(crate) const SCHEDULED: u32 = 1;
/// Waiting for a restart backoff: do not schedule for messages.
pub(crate) const SUSPENDED: u32 = 2;
/// `stop` was called and the activation has not acted on it yet.
pub(crate) const STOP_REQUESTED: u32 = 4;
/// The activation has begun stopping (sticky; later stop requests are
/// no-ops).
pub(crate) const STOPPING: u32 = 32;
/// Fully stopped.
pub(crate) const TERMINATED: u32 = 8;
/// No more children may be added (the actor is stopping). Changed and read
/// only under the children lock.
const CHILDREN_CLOSED: u32 = 64;
/// Stopped because of a failure (set before the mailbox closes).
pub(crate) const FAILED: u32 = 16;
/// A child its parent keeps no entry for, only a count (see
/// `Context::spawn_unlisted`). Set at spawn.
const UNLISTED: u32 = 128;

/// The parts of a cell that do not depend on the actor's type.
pub(crate) struct CellCore {
    pub(crate) uid: u64,
    pub(crate) name: Name,
    /// Parents are always local: a plain cell pointer (16 bytes, where an
    /// `AnyActorRef` is 24).
    pub(crate) parent: Option<Arc<dyn AnyCell>>,
    pub(crate) status: AtomicU32,
    children: Mutex<Children>,
    terminated: Event,
    pub(crate) system: Arc<SystemShared>,
}

#[derive(Default)]
struct Children {
    /// Boxed so that an actor without children pays one pointer, not an
    /// empty map (48 bytes).
    map: Option<Box<ChildMap>>,
}

#[derive(Default)]
struct ChildMap {
    /// The children, found by name: a set of their cells (16 bytes an
    /// entry, where a map from name to reference takes 48; an actor such
    /// as a shard can have a million children).
    by_name: HashSet<Child, foldhash::fast::RandomState>,
    /// Set by `Context::watch_children`: tells the actor of every child
    /// that terminates (kept while the map is empty).
    notice: Option<ChildNotice>,
    /// Unlisted children that have not terminated.
    unlisted: usize,
    /// Finds an unlisted child by name, for path lookups (set by
    /// `Context::find_unlisted_children_with`).
    finder: Option<UnlistedFinder>,
    /// The parent waits for its children to terminate (it is stopping or
    /// restarting): each termination wakes it. Otherwise a child's
    /// termination costs its parent no message (a shard that passivates
    /// entities all the time would get one for each).
    awaited: bool,
}

/// A child in its parent's set: its cell, hashed and compared by its name.
struct Child(Arc<dyn AnyCell>);

impl<'a> Borrow<dyn AsNameKey + 'a> for Child {
    fn borrow(&self) -> &(dyn AsNameKey + 'a) {
        &self.0.core().name
    }
}

// As its name, as `Borrow` requires.
impl PartialEq for Child {
    fn eq(&self, other: &Self) -> bool {
        self.0.core().name == other.0.core().name
    }
}
impl Eq for Child {}

impl Hash for Child {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.core().name.hash(state)
    }
}

/// Finds an unlisted child by name (see `Context::find_unlisted_children_with`).
pub(crate) type UnlistedFinder = Arc<dyn Fn(&str) -> Option<AnyActorRef> + Send + Sync>;

/// Delivers a child's `Terminated` to its parent (holds the parent
/// weakly: the parent's own cell keeps it).
pub(crate) type ChildNotice = Arc<dyn Fn(Terminated) + Send + Sync>;

impl CellCore {
    pub(crate) fn path(&self) -> ActorPath {
        let mut names: Vec<Cow<'_, str>> = vec![self.name.as_str()];
        let mut cur = self.parent.as_ref();
        while let Some(p) = cur {
            names.push(p.core().name.as_str());
            cur = p.core().parent.as_ref();
        }
        ActorPath::from_names(names.iter().map(|n| &**n))
    }

    pub(crate) fn is_terminated(&self) -> bool {
        self.status.load(Ordering::Acquire) & TERMINATED != 0
    }

    /// The reason known to someone who looks after the actor stopped.
    pub(crate) fn final_reason(&self) -> StopReason {
        if self.status.load(Ordering::Acquire) & FAILED != 0 {
            StopReason::Failed("the actor had failed before it was watched".into())
        } else {
            StopReason::Stopped
        }
    }

    pub(crate) async fn wait_terminated(&self) {
        loop {
            if self.is_terminated() {
                return;
            }
            let listener = self.terminated.listen();
            if self.is_terminated() {
                return;
            }
            listener.await;
        }
    }

    /// Completes once `stop` has been requested (and not yet acted on).
    async fn until_stop_requested(&self) {
        loop {
            if self.status.load(Ordering::SeqCst) & STOP_REQUESTED != 0 {
                return;
            }
            let listener = self.terminated.listen();
            if self.status.load(Ordering::SeqCst) & STOP_REQUESTED != 0 {
                return;
            }
            listener.await;
        }
    }

    /// Registers a new child: a listed one (`Some`: found by name, which
    /// must be unique among the listed) or an unlisted one (`None`: only
    /// counted).
    fn register_child(&self, child: Option<Arc<dyn AnyCell>>) -> Result<(), SpawnError> {
        let mut c = lock(&self.children);
        if self.status.load(Ordering::Relaxed) & CHILDREN_CLOSED != 0 {
            return Err(SpawnError::ParentStopped);
        }
        let map = c.map.get_or_insert_with(Default::default);
        let Some(child) = child else {
            map.unlisted += 1;
            return Ok(());
        };
        let name = &child.core().name;
        if map.by_name.contains(name as &dyn AsNameKey) {
            return Err(SpawnError::NameTaken(name.to_string()));
        }
        map.by_name.insert(Child(child));
        Ok(())
    }

    /// Forgets a terminated child (`core`); returns the notice to give its
    /// `Terminated` to, if the parent watches its children, and whether
    /// the parent waits for its children (then it must be woken).
    fn remove_child(&self, child: &CellCore) -> (Option<ChildNotice>, bool) {
        let mut c = lock(&self.children);
        let Some(map) = c.map.as_mut() else {
            return (None, false);
        };
        if child.status.load(Ordering::Relaxed) & UNLISTED != 0 {
            map.unlisted = map.unlisted.saturating_sub(1);
        } else {
            let key = &child.name as &dyn AsNameKey;
            if map
                .by_name
                .get(key)
                .is_some_and(|c| c.0.core().uid == child.uid)
            {
                map.by_name.remove(key);
            }
        }
        let notice = map.notice.clone();
        let awaited = map.awaited;
        if map.by_name.is_empty()
            && map.notice.is_none()
            && map.unlisted == 0
            && map.finder.is_none()
        {
            c.map = None;
        }
        (notice, awaited)
    }

    /// From now on, `notice` gets the `Terminated` of every child.
    pub(crate) fn set_child_notice(&self, notice: ChildNotice) {
        let mut c = lock(&self.children);
        if self.status.load(Ordering::Relaxed) & CHILDREN_CLOSED == 0 {
            c.map.get_or_insert_with(Default::default).notice = Some(notice);
        }
    }

    /// From now on, `finder` finds unlisted children by name.
    pub(crate) fn set_unlisted_finder(&self, finder: UnlistedFinder) {
        let mut c = lock(&self.children);
        if self.status.load(Ordering::Relaxed) & CHILDREN_CLOSED == 0 {
            c.map.get_or_insert_with(Default::default).finder = Some(finder);
        }
    }

    /// The child named `name`: a listed one, else an unlisted one that
    /// the actor's finder knows.
    pub(crate) fn child(&self, name: &str) -> Option<AnyActorRef> {
        let finder = {
            let c = lock(&self.children);
            let map = c.map.as_ref()?;
            if let Some(child) = map.by_name.get(&NameKey::of(name) as &dyn AsNameKey) {
                return Some(AnyActorRef::from_local(child.0.clone()));
            }
            map.finder.clone()?
        };
        // Called without the lock: it is the actor's code.
        finder(name)
    }

    pub(crate) fn children(&self) -> Vec<AnyActorRef> {
        lock(&self.children)
            .map
            .as_ref()
            .map(|m| {
                m.by_name
                    .iter()
                    .map(|c| AnyActorRef::from_local(c.0.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether a child has not terminated yet; if so, from now on every
    /// child's termination wakes this actor (checked and set under the
    /// lock that the children's removal takes, so no wake-up is missed).
    fn awaiting_children(&self) -> bool {
        let mut c = lock(&self.children);
        match c.map.as_mut() {
            Some(m) => {
                // After a restart the children's terminations are no
                // longer awaited.
                m.awaited = !m.by_name.is_empty() || m.unlisted > 0;
                m.awaited
            }
            None => false,
        }
    }

    /// Refuses new children from now on and returns the current ones. A
    /// stopping actor handles no more messages, so the notice of its
    /// children's termination goes too.
    fn close_children(&self) -> Vec<AnyActorRef> {
        let mut c = lock(&self.children);
        self.status.fetch_or(CHILDREN_CLOSED, Ordering::Relaxed);
        match c.map.as_mut() {
            Some(m) => {
                // The finder may hold this actor (a cycle through its cell).
                m.finder = None;
                m.notice = None;
                m.by_name
                    .iter()
                    .map(|c| AnyActorRef::from_local(c.0.clone()))
                    .collect()
            }
            None => Vec::new(),
        }
    }
}

/// Operations on a cell of unknown actor type (parents, children, watchers).
pub(crate) trait AnyCell: Send + Sync + 'static {
    fn core(&self) -> &CellCore;
    /// Stops the actor before its next message.
    fn request_stop(self: Arc<Self>);
    /// Queues a message for the runtime; gives it back if the actor has
    /// stopped.
    fn send_system(self: Arc<Self>, msg: SystemMessage) -> Result<(), SystemMessage>;
    /// As `send_system`, running the activation it starts on this thread
    /// when the actor was idle (as `ActorCell::enqueue_ask` does).
    fn send_system_here(self: Arc<Self>, msg: SystemMessage) -> Result<(), SystemMessage>;
    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    /// The type id of the actor (for remote dispatch).
    fn actor_type(&self) -> std::any::TypeId;
    /// Runs the activation claimed for this actor (a job of the
    /// dispatcher), moving it to a task of its own if it has to wait.
    fn run(self: Arc<Self>);
    /// Starts the activation claimed for this actor: `here`, on this
    /// thread when the nesting bound allows (as an ask does), else on the
    /// dispatcher (see `deferred_activations`).
    fn start_activation(self: Arc<Self>, here: bool);
}

/// Most inline activations nested on one thread (an inline handler that
/// asks another idle actor runs it inline too, up to this depth), which
/// bounds the stack an ask can take.
const MAX_INLINE_DEPTH: u32 = 4;

/// One ask in this many that could run inline goes to the dispatcher
/// instead (the next job of this worker), so that a task that keeps asking
/// also lets the worker's other jobs have their turn.
const INLINE_FAIRNESS: u32 = 32;

/// Per-thread bookkeeping of asks run inline (see `ActorCell::enqueue_ask`).
/// Thread-local, so it adds no shared atomic state: the claim on the
/// cell's `SCHEDULED` bit is what keeps an actor to one activation.
struct InlineAsks {
    /// Inline activations currently running on this thread.
    depth: std::cell::Cell<u32>,
    /// Asks that could have run inline, for `INLINE_FAIRNESS`.
    count: std::cell::Cell<u32>,
}

thread_local! {
    static INLINE_ASKS: InlineAsks = const {
        InlineAsks {
            depth: std::cell::Cell::new(0),
            count: std::cell::Cell::new(0),
        }
    };
}

/// One level of inline activation on this thread; leaving it (also by a
/// panic) gives the level back.
struct InlineDepth;

impl InlineAsks {
    /// A level of inline activation, if this ask may run inline: the
    /// nesting bound is not reached and it is not the dispatcher's turn.
    fn enter() -> Option<InlineDepth> {
        INLINE_ASKS
            .try_with(|t| {
                let n = t.count.get().wrapping_add(1);
                t.count.set(n);
                let depth = t.depth.get();
                if depth >= MAX_INLINE_DEPTH || n % INLINE_FAIRNESS == 0 {
                    return None;
                }
                t.depth.set(depth + 1);
                Some(InlineDepth)
            })
            .ok()
            .flatten()
    }
}

impl Drop for InlineDepth {
    fn drop(&mut self) {
        let _ = INLINE_ASKS.try_with(|t| t.depth.set(t.depth.get().saturating_sub(1)));
    }
}

/// A bounded mailbox's count of waiting user messages.
pub(crate) struct Bounded {
    pub(crate) capacity: usize,
    pub(crate) len: AtomicUsize,
    pub(crate) space: Event,
}

impl Bounded {
    /// Reserves room for one message.
    pub(crate) fn try_reserve(&self) -> bool {
        let mut n = self.len.load(Ordering::Relaxed);
        loop {
            if n >= self.capacity {
                return false;
            }
            match self
                .len
                .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => n = now,
            }
        }
    }

    pub(crate) fn release(&self) {
        self.len.fetch_sub(1, Ordering::AcqRel);
        self.space.notify(1);
    }
}

/// An actor's cell.
pub(crate) struct ActorCell<A: Actor> {
    pub(crate) core: CellCore,
    mailbox: Mailbox<A>,
    pub(crate) bounded: Option<Box<Bounded>>,
    /// The actor's state. Owned by whoever holds the `SCHEDULED` bit: the
    /// spawning thread until it schedules the first activation, then the
    /// running activation; nobody while the actor is idle. `None` once
    /// terminated (dropping it breaks the cycle through `Context::myself`).
    run: UnsafeCell<Option<RunState<A>>>,
}

// SAFETY: every field but `run` is `Sync`. `run` is only read or written by
// the owner of the `SCHEDULED` status bit (see the field's comment): `spawn`
// writes it before any activation exists (the cell is created with
// `SCHEDULED` set, so `try_claim` fails until the first activation clears
// it), and an activation touches it only between claiming the bit (the
// SeqCst compare-and-swap in `try_claim`, or inheriting it from `spawn`) and
// clearing it (the SeqCst `fetch_and` in `Activation::park`). The bit admits
// one owner at a time, and the SeqCst (acquire + release) operations on it
// order one owner's accesses before the next owner's. `RunState<A>` is
// `Send`, so handing it between threads this way is sound.
unsafe impl<A: Actor> Sync for ActorCell<A> {}

/// Compile-time check of the premise of the `Sync` impl above: the run
/// state of every actor type is `Send`.
#[allow(dead_code)]
fn run_state_is_send<A: Actor>() {
    fn is_send<T: Send>() {}
    is_send::<RunState<A>>();
}

/// What the actor is doing, as far as the runtime is concerned.
enum Phase {
    /// Run `started` on the current instance.
    Start,
    /// Handle messages.
    Run,
    /// Run `stopping`, stop the children, then terminate.
    Stopping(Box<StopReason>),
    /// Run `stopped` on the failed instance and stop the children, then
    /// re-create after `delay`.
    Restarting(Nanos),
    /// Wait for every child to terminate.
    AwaitChildren(After),
    /// Waiting out a restart backoff (the cell is suspended).
    Backoff,
    /// Create a fresh instance from the factory.
    Recreate,
    /// Run `stopped`, close the mailbox, tell watchers and the parent.
    Finalize(Box<StopReason>),
    /// Terminated.
    Done,
}

/// A restart backoff in nanoseconds (8 bytes where a `Duration` takes 16,
/// so that `Phase` fits in 16 bytes).
type Nanos = u64;

fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

enum After {
    Restart(Nanos),
    Terminate(Box<StopReason>),
}

/// The actor's state while it is parked or running.
struct RunState<A: Actor> {
    actor: Option<A>,
    ctx: Context<A>,
    batch: Batch<A>,
    phase: Phase,
    /// The factory and strategy, when the actor has either (shared by the
    /// actors of one `NamedFactory`).
    supervision: Option<Arc<Supervision<A>>>,
}

impl<A: Actor> RunState<A> {
    fn factory(&self) -> Option<&Factory<A>> {
        self.supervision.as_ref().and_then(|s| s.factory.as_ref())
    }

    fn strategy(&self) -> SupervisorStrategy {
        self.supervision
            .as_ref()
            .and_then(|s| s.strategy.as_deref().cloned())
            .unwrap_or_default()
    }
}

enum Step {
    Idle,
    Yield,
    Done,
}

/// How the fast path of an activation ended.
enum Fast<A: Actor> {
    /// The mailbox is empty.
    Idle,
    /// `throughput` messages were handled: let other tasks run.
    Yield,
    /// Something needs the general path, possibly with a pending future.
    Slow(Option<Resume<A>>),
}

#[derive(Clone, Copy)]
enum ResumeKind {
    Started,
    Handler,
}

/// A hook or handler future that the fast path found pending, handed to
/// the general path. It borrows the run state inside the cell, so it keeps
/// the cell alive and is dropped before its `Arc`.
struct Resume<A: Actor> {
    /// Declared first: fields drop in order, so the future goes before the
    /// cell it borrows from.
    fut: HeapFuture<'static>,
    kind: ResumeKind,
    _cell: Arc<ActorCell<A>>,
}

impl<A: Actor> Resume<A> {
    /// # Safety
    /// `fut` may borrow only the run state of `cell` (the actor and its
    /// context), and the caller must own that state (hold `SCHEDULED`) and
    /// hand its ownership to whoever polls the `Resume`, who must not touch
    /// the run state until the `Resume` is dropped. Then the erased lifetime
    /// is sound: the run state lives inside the cell's allocation, which
    /// does not move and which `_cell` keeps alive until after `fut` is
    /// dropped, and nothing else reads or writes it meanwhile.
    unsafe fn new(cell: &Arc<ActorCell<A>>, fut: HeapFuture<'_>, kind: ResumeKind) -> Self {
        // SAFETY: only the lifetime changes; see the function's contract.
        let fut = unsafe { fut.erase() };
        Resume {
            fut,
            kind,
            _cell: cell.clone(),
        }
    }
}

/// One activation: just the cell while messages are handled on the fast
/// path (so queueing or spawning it moves a few bytes, not a large future),
/// and the boxed general path once something had to wait.
struct Activation<A: Actor> {
    /// Declared first, so dropped before `cell` (it may hold a `Resume`).
    slow: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    cell: Arc<ActorCell<A>>,
}

impl<A: Actor> Activation<A> {
    /// An activation that owns the cell's run state (the caller claimed
    /// `SCHEDULED` for it).
    fn new(cell: Arc<ActorCell<A>>) -> Self {
        Activation { slow: None, cell }
    }
}

impl<A: Actor> Future for Activation<A> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        let this = self.get_mut();
        loop {
            if let Some(slow) = this.slow.as_mut() {
                return slow.as_mut().poll(cx);
            }
            let cell = &this.cell;
            // SAFETY: this activation owns the run state (it was claimed
            // for it, or re-claimed by `park` below); the reference is not
            // used after `park` gives the state up or once the general path
            // has been handed the state.
            let outcome = match unsafe { cell.state() }.as_mut() {
                Some(st) => cell.fast(st, cx),
                None => Fast::Slow(None),
            };
            match outcome {
                Fast::Idle => {
                    if !cell.park() {
                        return Poll::Ready(());
                    }
                }
                Fast::Yield => {
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Fast::Slow(resume) => {
                    this.slow = Some(Box::pin(cell.clone().run_slow(resume)));
                }
            }
        }
    }
}

/// Polls a hook or handler future once, turning a panic into its message
/// (as `guarded` does).
fn poll_guarded(
    fut: Pin<&mut (dyn Future<Output = ()> + Send + '_)>,
    cx: &mut TaskContext<'_>,
) -> Poll<Result<(), String>> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| fut.poll(cx))) {
        Ok(Poll::Ready(())) => Poll::Ready(Ok(())),
        Ok(Poll::Pending) => Poll::Pending,
        Err(p) => Poll::Ready(Err(panic_message(&*p))),
    }
}

/// Runs a hook or handler future, turning a panic into its message.
async fn guarded<F: Future>(f: F) -> Result<F::Output, String> {
    AssertUnwindSafe(f)
        .catch_unwind()
        .await
        .map_err(|p| panic_message(&*p))
}

pub(crate) fn panic_message(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

impl<A: Actor> AnyCell for ActorCell<A> {
    fn core(&self) -> &CellCore {
        &self.core
    }

    fn request_stop(self: Arc<Self>) {
        let prev = self.core.status.load(Ordering::SeqCst);
        if prev & (STOPPING | TERMINATED) != 0 {
            return;
        }
        let prev = self.core.status.fetch_or(STOP_REQUESTED, Ordering::SeqCst);
        if prev & (STOP_REQUESTED | STOPPING | TERMINATED) == 0 {
            // Wakes a handler that is awaiting something, so that it is
            // cancelled (see `until_stop_requested`).
            self.core.terminated.notify(usize::MAX);
            self.schedule();
        }
    }

    fn send_system(self: Arc<Self>, msg: SystemMessage) -> Result<(), SystemMessage> {
        self.push_system(msg)?;
        self.schedule();
        Ok(())
    }

    fn send_system_here(self: Arc<Self>, msg: SystemMessage) -> Result<(), SystemMessage> {
        self.push_system(msg)?;
        self.schedule_here();
        Ok(())
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn actor_type(&self) -> std::any::TypeId {
        std::any::TypeId::of::<A>()
    }

    fn run(self: Arc<Self>) {
        let mut activation = Activation::new(self);
        // Wakers registered during this poll are no-ops: if the activation
        // has to wait, its own task polls it again at once (spawning
        // schedules it), which registers the real waker.
        let mut cx = TaskContext::from_waker(std::task::Waker::noop());
        let polled =
            std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut activation).poll(&mut cx)));
        match polled {
            Ok(Poll::Ready(())) => {}
            Ok(Poll::Pending) => match activation.slow {
                // It handled `throughput` messages and more wait: again
                // on this worker unless it woke another job, which goes
                // first (no task needed either way).
                None => crate::dispatcher::schedule_activation(
                    activation.cell.clone(),
                    crate::dispatcher::Place::Again,
                ),
                Some(_) => rt::spawn_detached(activation),
            },
            Err(p) => tracing::error!(
                actor = %activation.cell.core.path(),
                "bug: panic in an activation: {}",
                panic_message(&*p)
            ),
        }
    }

    fn start_activation(self: Arc<Self>, here: bool) {
        if here {
            self.start_here();
        } else {
            // One of a batch's actors (a connection's reader hands on the
            // frames it holds as one batch): behind the worker's queue,
            // where an idle worker takes it, so that the actors run while
            // the reader reads on.
            crate::dispatcher::schedule_activation(self, crate::dispatcher::Place::Back);
        }
    }
}

impl<A: Actor> ActorCell<A> {
    /// Creates the cell of a new actor, registers it with its parent (or,
    /// `unlisted`, only counts it) and schedules its start.
    pub(crate) fn spawn(
        system: &Arc<SystemShared>,
        parent: Option<&AnyActorRef>,
        props: Props<A>,
        unlisted: bool,
    ) -> Result<ActorRef<A>, SpawnError> {
        let name = match props.name {
            Some(n) if crate::path::valid_name(&n) => Name::Given(n),
            Some(n) => return Err(SpawnError::InvalidName(n.to_string())),
            None => Name::Generated(system.next_name()),
        };
        let strategy =
            (props.strategy != SupervisorStrategy::default()).then(|| Box::new(props.strategy));
        let made = |f: &Factory<A>| {
            std::panic::catch_unwind(AssertUnwindSafe(|| f.make(&name)))
                .map_err(|p| SpawnError::FactoryPanicked(panic_message(&*p)))
        };
        let (actor, supervision) = match props.source {
            Source::Value(a) => (
                a,
                strategy.map(|s| {
                    Arc::new(Supervision {
                        factory: None,
                        strategy: Some(s),
                    })
                }),
            ),
            Source::Factory(f) => (
                made(&f)?,
                Some(Arc::new(Supervision {
                    factory: Some(f),
                    strategy,
                })),
            ),
            Source::Named(nf) => {
                let supervision = nf.supervision(strategy);
                let f = supervision.factory.as_ref().expect("a named factory");
                (made(f)?, Some(supervision))
            }
        };
        let bounded = match props.mailbox {
            MailboxConfig::Unbounded => None,
            MailboxConfig::Bounded { capacity } => Some(Box::new(Bounded {
                capacity: capacity.max(1),
                len: AtomicUsize::new(0),
                space: Event::new(),
            })),
        };
        let cell = Arc::new(ActorCell {
            core: CellCore {
                uid: system.next_uid(),
                name: name.clone(),
                parent: parent.map(|p| p.local().expect("a parent is a local actor").clone()),
                status: AtomicU32::new(if unlisted {
                    SCHEDULED | UNLISTED
                } else {
                    SCHEDULED
                }),
                children: Mutex::new(Children::default()),
                terminated: Event::new(),
                system: system.clone(),
            },
            mailbox: Mailbox::new(),
            bounded,
            run: UnsafeCell::new(None),
        });
        let me = ActorRef::from_cell(cell.clone());
        if let Some(p) = parent {
            let listed = (!unlisted).then(|| cell.clone() as Arc<dyn AnyCell>);
            if let Err(e) = p.core().register_child(listed) {
                // Never scheduled and never registered: mark it terminated so
                // the cycle through its context is not created.
                cell.core.status.store(TERMINATED, Ordering::Release);
                return Err(e);
            }
        }
        // SAFETY: the cell was created with `SCHEDULED` set and no
        // activation exists yet, so this thread owns the run state.
        *unsafe { &mut *cell.run.get() } = Some(RunState {
            actor: Some(actor),
            ctx: Context::new(me.clone()),
            batch: Batch::empty(),
            phase: Phase::Start,
            supervision,
        });
        crate::dispatcher::schedule_activation(cell.clone(), crate::dispatcher::Place::Back);
        Ok(me)
    }

    /// Queues a letter and schedules the actor. Gives the letter back if
    /// the actor has stopped.
    pub(crate) fn enqueue<L>(self: &Arc<Self>, node: Box<Node<A, L>>) -> Result<(), Box<Node<A, L>>>
    where
        Node<A, L>: Letter<A> + 'static,
    {
        self.mailbox.push(node)?;
        self.schedule();
        Ok(())
    }

    /// Queues a letter: one that carries a reply takes the ask's path
    /// (`enqueue_ask`), any other the plain one (`enqueue`).
    pub(crate) fn enqueue_letter<L>(
        self: &Arc<Self>,
        node: Box<Node<A, L>>,
        has_reply: bool,
    ) -> Result<(), Box<Node<A, L>>>
    where
        Node<A, L>: Letter<A> + 'static,
    {
        if has_reply {
            self.enqueue_ask(node)
        } else {
            self.enqueue(node)
        }
    }

    /// Queues the letter of an ask. If that makes the actor runnable (it
    /// was idle), the activation runs inline, on the asking thread, rather
    /// than as a job of the dispatcher: the reply is then there when the
    /// asker first polls, with no hand-off to another thread and back. See
    /// `InlineAsks` for the bounds. Gives the letter back if the actor has
    /// stopped.
    pub(crate) fn enqueue_ask<L>(
        self: &Arc<Self>,
        node: Box<Node<A, L>>,
    ) -> Result<(), Box<Node<A, L>>>
    where
        Node<A, L>: Letter<A> + 'static,
    {
        self.mailbox.push(node)?;
        self.schedule_here();
        Ok(())
    }

    /// Queues a message of the runtime without scheduling; gives it back
    /// if the actor has stopped.
    fn push_system(&self, msg: SystemMessage) -> Result<(), SystemMessage> {
        self.mailbox
            .push(Node::new(SystemLetter(msg)))
            .map_err(|node| node.body.0)
    }

    /// Starts an activation as `schedule` does, but on this thread when
    /// the nesting bound allows (see `InlineAsks`).
    fn schedule_here(self: &Arc<Self>) {
        // The same claim as `schedule`: whoever wins it owns the run state,
        // so the actor never runs in two places at once.
        if self.try_claim() {
            // Held back while this thread has a batch open (it may hold a
            // lock that the handler needs): it runs here when the batch
            // ends.
            if crate::deferred_activations::is_open() {
                return self.defer_activation(true);
            }
            self.start_here();
        }
    }

    /// Runs the claimed activation on this thread when the nesting bound
    /// allows (see `InlineAsks`), else as the next job of this worker.
    fn start_here(self: &Arc<Self>) {
        match InlineAsks::enter() {
            Some(_depth) => self.run_inline(Activation::new(self.clone())),
            // Next on this worker (no other worker takes it from there).
            None => {
                crate::dispatcher::schedule_activation(self.clone(), crate::dispatcher::Place::Next)
            }
        }
    }

    /// Runs a claimed activation on this thread until it is idle; one that
    /// has to wait (a handler that awaits, a full `throughput`, a
    /// lifecycle phase that waits) continues as a task of its own.
    fn run_inline(self: &Arc<Self>, mut activation: Activation<A>) {
        // Wakers registered during this poll are no-ops: if the activation
        // has to wait, its task polls it again at once (spawning schedules
        // it), which registers the real waker.
        let mut cx = TaskContext::from_waker(std::task::Waker::noop());
        match std::panic::catch_unwind(AssertUnwindSafe(|| Pin::new(&mut activation).poll(&mut cx)))
        {
            Ok(Poll::Ready(())) => {}
            Ok(Poll::Pending) => rt::spawn_detached(activation),
            Err(p) => tracing::error!(
                actor = %self.core.path(),
                "bug: panic in an inline activation: {}",
                panic_message(&*p)
            ),
        }
    }

    /// Starts an activation unless one is running, the actor is suspended
    /// (and not asked to stop) or it has terminated.
    pub(crate) fn schedule(self: &Arc<Self>) {
        if self.try_claim() {
            // Held back while this thread hands on a batch of letters.
            if crate::deferred_activations::is_open() {
                return self.defer_activation(false);
            }
            crate::dispatcher::schedule_activation(self.clone(), crate::dispatcher::Place::Next);
        }
    }

    /// The claimed activation waits for the end of this thread's batch
    /// (out of line: the common path of `schedule` stays small); `here`
    /// as in `AnyCell::start_activation`.
    #[cold]
    #[inline(never)]
    fn defer_activation(self: &Arc<Self>, here: bool) {
        if let Err(cell) = crate::deferred_activations::defer(self.clone(), here) {
            cell.start_activation(here);
        }
    }

    fn try_claim(&self) -> bool {
        // SeqCst pairs with the SeqCst push in the mailbox and the SeqCst
        // clearing of SCHEDULED in `run`: either the producer sees the
        // bit cleared, or the activation sees the new letter.
        let mut s = self.core.status.load(Ordering::SeqCst);
        loop {
            if s & (SCHEDULED | TERMINATED) != 0 {
                return false;
            }
            if s & SUSPENDED != 0 && s & STOP_REQUESTED == 0 {
                return false;
            }
            match self.core.status.compare_exchange_weak(
                s,
                s | SCHEDULED,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => s = now,
            }
        }
    }

    fn wants_run(&self) -> bool {
        let s = self.core.status.load(Ordering::SeqCst);
        if s & TERMINATED != 0 {
            return false;
        }
        if s & STOP_REQUESTED != 0 {
            return true;
        }
        s & SUSPENDED == 0 && !self.mailbox.is_empty()
    }

    /// The run state, for the owner of the `SCHEDULED` bit.
    ///
    /// # Safety
    /// The caller must own the run state (hold `SCHEDULED`, see the `run`
    /// field), and no other reference obtained from this call may be alive
    /// while the returned one is used.
    #[allow(clippy::mut_from_ref)]
    unsafe fn state(&self) -> &mut Option<RunState<A>> {
        // SAFETY: exclusive access by the caller's contract.
        unsafe { &mut *self.run.get() }
    }

    /// Ends an activation that found the mailbox empty: gives up the run
    /// state, then takes it back if a letter (or stop request) arrived in
    /// the meantime. True when the activation must go on.
    fn park(&self) -> bool {
        self.core.status.fetch_and(!SCHEDULED, Ordering::SeqCst);
        self.wants_run() && self.try_claim()
    }

    /// The general (async) path of an activation, for everything but
    /// messages whose handler completes at once: lifecycle phases, handlers
    /// and hooks that wait. `resume` is a handler or `started` future that
    /// the fast path found pending.
    async fn run_slow(self: Arc<Self>, resume: Option<Resume<A>>) {
        if let Some(mut r) = resume {
            match r.kind {
                ResumeKind::Started => {
                    let result = guarded(r.fut.pinned()).await;
                    // Dropped before the run state is borrowed again.
                    drop(r);
                    // SAFETY: this activation owns the run state; the
                    // future that borrowed it is gone.
                    let Some(st) = (unsafe { self.state() }).as_mut() else {
                        return;
                    };
                    if let Err(p) = result {
                        self.fail(st, format!("panic in `started`: {p}"));
                    }
                }
                ResumeKind::Handler => {
                    let handler = async {
                        r.fut.pinned().await;
                        true
                    }
                    .or(async {
                        self.core.until_stop_requested().await;
                        false
                    });
                    let result = guarded(handler).await;
                    drop(r);
                    // SAFETY: as above.
                    let Some(st) = (unsafe { self.state() }).as_mut() else {
                        return;
                    };
                    self.after_handler(st, result);
                }
            }
        }
        loop {
            // SAFETY: this activation owns the run state (it claimed
            // `SCHEDULED`, or was handed it by the fast path); the reference
            // is not used after `park` gives the state up.
            let Some(st) = (unsafe { self.state() }).as_mut() else {
                tracing::error!(actor = %self.core.path(), "bug: activation found no actor state");
                return;
            };
            match self.step(st).await {
                Step::Yield => rt::yield_now().await,
                Step::Done => {
                    // SAFETY: as above; terminated, so no activation will
                    // ever claim the state again.
                    *unsafe { self.state() } = None;
                    return;
                }
                Step::Idle => {
                    if !self.park() {
                        return;
                    }
                }
            }
        }
    }

    /// The fast path of an activation: handles messages while the actor is
    /// running normally and every handler completes on its first poll.
    fn fast(self: &Arc<Self>, st: &mut RunState<A>, cx: &mut TaskContext<'_>) -> Fast<A> {
        let throughput = self.core.system.settings.throughput;
        let mut handled = 0usize;
        loop {
            match st.phase {
                Phase::Start => {
                    st.phase = Phase::Run;
                    let actor = st.actor.as_mut().expect("instance present at start");
                    let mut fut = HeapFuture::new(actor.started(&mut st.ctx));
                    match poll_guarded(fut.pinned(), cx) {
                        Poll::Ready(Ok(())) => {}
                        Poll::Ready(Err(p)) => {
                            drop(fut);
                            self.fail(st, format!("panic in `started`: {p}"));
                        }
                        // SAFETY: see `Resume::new`.
                        Poll::Pending => {
                            return Fast::Slow(Some(unsafe {
                                Resume::new(self, fut, ResumeKind::Started)
                            }))
                        }
                    }
                    continue;
                }
                // A stop request, like every other phase, takes the
                // general path.
                Phase::Run if self.core.status.load(Ordering::Relaxed) & STOP_REQUESTED == 0 => {}
                _ => return Fast::Slow(None),
            }
            if handled >= throughput {
                return Fast::Yield;
            }
            let Some(letter) = self.next_letter(st) else {
                return Fast::Idle;
            };
            handled += 1;
            match letter.open() {
                Opened::System(msg) => self.handle_system(st, msg),
                Opened::User(user) => {
                    if let Some(b) = &self.bounded {
                        b.release();
                    }
                    // The phase is `Run` (checked above).
                    let actor = st.actor.as_mut().expect("instance present while running");
                    let mut handler = user.deliver(actor, &mut st.ctx);
                    let result = match poll_guarded(handler.pinned(), cx) {
                        Poll::Ready(r) => r.map(|()| true),
                        // SAFETY: see `Resume::new`.
                        Poll::Pending => {
                            return Fast::Slow(Some(unsafe {
                                Resume::new(self, handler, ResumeKind::Handler)
                            }))
                        }
                    };
                    drop(handler);
                    self.after_handler(st, result);
                }
            }
        }
    }

    /// What follows a handler: unstash if asked, apply the strategy to a
    /// panic.
    fn after_handler(self: &Arc<Self>, st: &mut RunState<A>, result: Result<bool, String>) {
        if result == Ok(false) {
            tracing::debug!(actor = %self.core.path(), "handler cancelled by stop");
        }
        if st.ctx.take_unstash_request() {
            for letter in st.ctx.drain_stash().into_iter().rev() {
                st.batch.push_front(letter);
            }
        }
        if let Err(p) = result {
            self.fail(st, p);
        }
    }

    /// Handles messages and lifecycle transitions until the mailbox is
    /// empty, `throughput` messages have run, or the actor has terminated.
    async fn step(self: &Arc<Self>, st: &mut RunState<A>) -> Step {
        let throughput = self.core.system.settings.throughput;
        let mut handled = 0usize;
        loop {
            // `started` always runs before a stop takes effect, as in Akka.
            let starting = matches!(st.phase, Phase::Start);
            if !starting && self.core.status.load(Ordering::Relaxed) & STOP_REQUESTED != 0 {
                self.core.status.fetch_or(STOPPING, Ordering::SeqCst);
                self.core
                    .status
                    .fetch_and(!(STOP_REQUESTED | SUSPENDED), Ordering::SeqCst);
                match st.phase {
                    // Restarting: the failed instance is still there and
                    // the children still run, so stop as from `Run` (its
                    // `stopping` runs, then the children are stopped).
                    Phase::Run | Phase::Backoff | Phase::Recreate | Phase::Restarting(_) => {
                        st.phase = Phase::Stopping(Box::new(StopReason::Stopped));
                    }
                    Phase::AwaitChildren(After::Restart(_)) => {
                        // Children are already being stopped; end there.
                        st.actor = None;
                        st.phase =
                            Phase::AwaitChildren(After::Terminate(Box::new(StopReason::Stopped)));
                        self.core.close_children();
                    }
                    _ => {}
                }
            }
            match std::mem::replace(&mut st.phase, Phase::Run) {
                Phase::Run => {}
                Phase::Start => {
                    let actor = st.actor.as_mut().expect("instance present at start");
                    if let Err(p) = guarded(actor.started(&mut st.ctx)).await {
                        self.fail(st, format!("panic in `started`: {p}"));
                    }
                    continue;
                }
                Phase::Stopping(reason) => {
                    if let Some(actor) = st.actor.as_mut() {
                        if let Err(p) = guarded(actor.stopping(&mut st.ctx)).await {
                            tracing::warn!(actor = %self.core.path(), "panic in `stopping` (ignored): {p}");
                        }
                    }
                    st.ctx.cancel_timers();
                    for child in self.core.close_children() {
                        child.stop();
                    }
                    st.phase = Phase::AwaitChildren(After::Terminate(reason));
                    continue;
                }
                Phase::Restarting(delay) => {
                    if let Some(mut old) = st.actor.take() {
                        if let Err(p) = guarded(old.stopped(&mut st.ctx)).await {
                            tracing::warn!(actor = %self.core.path(), "panic in `stopped` before restart (ignored): {p}");
                        }
                    }
                    st.ctx.cancel_timers();
                    for child in self.core.children() {
                        child.stop();
                    }
                    st.phase = Phase::AwaitChildren(After::Restart(delay));
                    continue;
                }
                Phase::AwaitChildren(after) => {
                    if !self.core.awaiting_children() {
                        match after {
                            After::Terminate(reason) => st.phase = Phase::Finalize(reason),
                            After::Restart(0) => st.phase = Phase::Recreate,
                            After::Restart(delay) => {
                                st.phase = Phase::Backoff;
                                self.core.status.fetch_or(SUSPENDED, Ordering::SeqCst);
                                let me = self.clone();
                                rt::spawn(async move {
                                    rt::sleep(Duration::from_nanos(delay)).await;
                                    me.core.status.fetch_and(!SUSPENDED, Ordering::SeqCst);
                                    let _ = me.send_system(SystemMessage::ResumeAfterBackoff);
                                });
                                return Step::Idle;
                            }
                        }
                        continue;
                    }
                    st.phase = Phase::AwaitChildren(after);
                }
                Phase::Backoff => {
                    if self.core.status.load(Ordering::SeqCst) & SUSPENDED != 0 {
                        st.phase = Phase::Backoff;
                        return Step::Idle;
                    }
                    st.phase = Phase::Recreate;
                    continue;
                }
                Phase::Recreate => {
                    let Some(factory) = st.factory() else {
                        st.phase = Phase::Stopping(Box::new(StopReason::Failed(
                            "no factory to restart from".into(),
                        )));
                        continue;
                    };
                    let name = &self.core.name;
                    match std::panic::catch_unwind(AssertUnwindSafe(|| factory.make(name))) {
                        Ok(fresh) => {
                            st.actor = Some(fresh);
                            for letter in st.ctx.take_held().into_iter().rev() {
                                st.batch.push_front(letter);
                            }
                            st.phase = Phase::Start;
                            tracing::debug!(actor = %self.core.path(), "restarted");
                        }
                        Err(p) => {
                            st.phase = Phase::Run;
                            self.fail(
                                st,
                                format!("panic in the factory on restart: {}", panic_message(&*p)),
                            );
                        }
                    }
                    continue;
                }
                Phase::Finalize(reason) => {
                    self.finalize(st, *reason).await;
                    return Step::Done;
                }
                Phase::Done => {
                    st.phase = Phase::Done;
                    return Step::Done;
                }
            }

            // Phase is Run or AwaitChildren: take the next letter.
            if handled >= throughput {
                return Step::Yield;
            }
            let Some(letter) = self.next_letter(st) else {
                return Step::Idle;
            };
            handled += 1;
            match letter.open() {
                Opened::System(msg) => self.handle_system(st, msg),
                Opened::User(user) => {
                    if let Some(b) = &self.bounded {
                        b.release();
                    }
                    match st.phase {
                        Phase::Run => {}
                        Phase::AwaitChildren(After::Restart(_)) => {
                            st.ctx.extras().held.push(user);
                            continue;
                        }
                        _ => {
                            self.dead_letter(user.type_name());
                            continue;
                        }
                    }
                    let actor = st.actor.as_mut().expect("instance present while running");
                    let handler = user.deliver(actor, &mut st.ctx);
                    // A stop request cancels a handler that is still awaiting
                    // (at its next await point): `stop` means now.
                    let handler = async {
                        handler.await;
                        true
                    }
                    .or(async {
                        self.core.until_stop_requested().await;
                        false
                    });
                    let result = guarded(handler).await;
                    self.after_handler(st, result);
                }
            }
        }
    }

    fn handle_system(self: &Arc<Self>, st: &mut RunState<A>, msg: SystemMessage) {
        match msg {
            SystemMessage::Ignore
            | SystemMessage::ChildTerminated
            | SystemMessage::ResumeAfterBackoff => {}
            SystemMessage::PoisonPill => {
                if matches!(st.phase, Phase::Run) {
                    st.phase = Phase::Stopping(Box::new(StopReason::Stopped));
                }
            }
            SystemMessage::Watch { watcher, notify } => st.ctx.add_watcher(watcher, notify),
            SystemMessage::Unwatch { watcher } => st.ctx.remove_watcher(watcher),
            SystemMessage::ChildFailed { child, reason } => {
                if matches!(st.phase, Phase::Run) {
                    self.fail(st, format!("child {} failed: {reason}", child.path()));
                }
            }
        }
    }

    /// Applies the supervisor strategy to a failure of the running instance.
    fn fail(self: &Arc<Self>, st: &mut RunState<A>, why: String) {
        let path = self.core.path();
        // Cloned: failures are rare, and the strategy must not borrow `st`.
        let strategy = st.strategy();
        match &strategy {
            SupervisorStrategy::Resume => {
                tracing::warn!(actor = %path, "actor failed, resuming: {why}");
                st.phase = Phase::Run;
            }
            SupervisorStrategy::Stop => {
                tracing::error!(actor = %path, "actor failed, stopping: {why}");
                st.phase = Phase::Stopping(Box::new(StopReason::Failed(why)));
            }
            SupervisorStrategy::Escalate => {
                tracing::error!(actor = %path, "actor failed, escalating to its parent: {why}");
                if let Some(parent) = &self.core.parent {
                    let _ = parent.clone().send_system(SystemMessage::ChildFailed {
                        child: ActorRef::from_cell(self.clone()).to_any(),
                        reason: why.clone(),
                    });
                }
                st.phase = Phase::Stopping(Box::new(StopReason::Failed(why)));
            }
            SupervisorStrategy::Restart(policy) => {
                if st.factory().is_none() {
                    tracing::warn!(
                        actor = %path,
                        "actor failed and its strategy is restart, but it was spawned from a value and \
                         cannot be re-created (spawn it with `Props::from_factory` to allow restarts); \
                         stopping: {why}"
                    );
                    st.phase = Phase::Stopping(Box::new(StopReason::Failed(why)));
                    return;
                }
                match st.ctx.restart_stats().decide(policy, Instant::now()) {
                    RestartDecision::LimitExceeded(max) => {
                        let why = format!(
                            "{why} (more than {max} restarts within {:?})",
                            policy.within
                        );
                        tracing::error!(actor = %path, "actor failed too often, stopping: {why}");
                        st.phase = Phase::Stopping(Box::new(StopReason::Failed(why)));
                    }
                    RestartDecision::RestartAfter(delay) => {
                        tracing::warn!(actor = %path, "actor failed, restarting in {delay:?}: {why}");
                        st.phase = Phase::Restarting(nanos(delay));
                    }
                }
            }
        }
    }

    async fn finalize(self: &Arc<Self>, st: &mut RunState<A>, reason: StopReason) {
        if let Some(actor) = st.actor.as_mut() {
            if let Err(p) = guarded(actor.stopped(&mut st.ctx)).await {
                tracing::warn!(actor = %self.core.path(), "panic in `stopped` (ignored): {p}");
            }
        }
        st.actor = None;
        st.ctx.cancel_timers();
        st.ctx.unwatch_all();
        if matches!(reason, StopReason::Failed(_)) {
            self.core.status.fetch_or(FAILED, Ordering::SeqCst);
        }
        let mut rest = std::mem::replace(&mut st.batch, Batch::empty());
        rest.append(self.mailbox.close());
        let (parent_notice, parent_waits) = match &self.core.parent {
            Some(p) => p.core().remove_child(&self.core),
            None => (None, false),
        };
        self.core.status.fetch_or(TERMINATED, Ordering::SeqCst);
        self.core.terminated.notify(usize::MAX);

        let me = ActorRef::from_cell(self.clone()).to_any();
        let terminated = Terminated { actor: me, reason };
        let parent_uid = self.core.parent.as_ref().map(|p| p.core().uid);
        for (watcher, notify) in st.ctx.take_watchers() {
            // A parent that watches its children hears it from its notice.
            if parent_notice.is_none() || Some(watcher) != parent_uid {
                notify(terminated.clone());
            }
        }
        if let Some(notice) = parent_notice {
            notice(terminated.clone());
        }
        let undelivered = st.ctx.take_held().into_iter().chain(
            st.ctx
                .drain_stash()
                .into_iter()
                .map(|l| l as Box<dyn Letter<A>>),
        );
        for letter in undelivered {
            self.dead_letter(letter.type_name());
        }
        while let Some(letter) = rest.pop() {
            match letter.open() {
                Opened::System(SystemMessage::Watch { notify, .. }) => notify(terminated.clone()),
                Opened::System(_) => {}
                Opened::User(user) => {
                    if let Some(b) = &self.bounded {
                        b.release();
                    }
                    self.dead_letter(user.type_name());
                }
            }
        }
        if let Some(parent) = self.core.parent.as_ref().filter(|_| parent_waits) {
            let _ = parent.clone().send_system(SystemMessage::ChildTerminated);
        }
        tracing::debug!(actor = %self.core.path(), reason = %terminated.reason, "terminated");
        st.phase = Phase::Done;
    }

    /// The next letter: from the batch taken earlier, else a new batch of
    /// everything in the mailbox.
    fn next_letter(&self, st: &mut RunState<A>) -> Option<Box<dyn Letter<A>>> {
        if let Some(l) = st.batch.pop() {
            return Some(l);
        }
        st.batch = self.mailbox.take_all();
        st.batch.pop()
    }

    pub(crate) fn dead_letter(&self, type_name: &'static str) {
        self.core
            .system
            .dead_letters
            .record(|| self.core.path().to_string(), type_name);
    }
}

impl<A: Actor> ActorCell<A> {
    /// A reference to an actor that never ran: returned by an infallible
    /// spawn on a system that is shutting down. Everything sent to it is a
    /// dead letter.
    pub(crate) fn stillborn(system: &Arc<SystemShared>) -> ActorRef<A> {
        let cell = Arc::new(ActorCell {
            core: CellCore {
                uid: system.next_uid(),
                // Never registered with a parent, so never looked up.
                name: Name::Given("$stillborn".into()),
                parent: None,
                status: AtomicU32::new(TERMINATED | CHILDREN_CLOSED),
                children: Mutex::new(Children { map: None }),
                terminated: Event::new(),
                system: system.clone(),
            },
            mailbox: Mailbox::new(),
            bounded: None,
            run: UnsafeCell::new(None),
        });
        drop(cell.mailbox.close());
        ActorRef::from_cell(cell)
    }
}

#[cfg(test)]
mod size {
    use super::*;

    struct OneWord(#[allow(dead_code)] u64);
    impl Actor for OneWord {}

    /// An idle actor's memory is mostly its cell: with its `Arc` counts a
    /// one-word actor's cell is a 184-byte allocation (glibc's 192-byte
    /// chunk); a field more would move it to the next chunk size.
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn a_one_word_actor_s_cell_fits_its_allocation() {
        assert_eq!(std::mem::size_of::<ActorCell<OneWord>>(), 168);
        assert_eq!(std::mem::size_of::<CellCore>(), 80);
        assert_eq!(std::mem::size_of::<RunState<OneWord>>(), 72);
    }
}
