//! Coordinated shutdown: Akka's ordered shutdown sequence. Parts of the
//! system (the cluster, its singletons, sharding, the application) register
//! tasks in named [`Phase`]s; [`CoordinatedShutdown::run`] runs the phases
//! one after the other, in Akka's order, the tasks of one phase
//! concurrently. A phase ends when all its tasks have finished or when its
//! timeout has passed: then the tasks still running are logged and the
//! sequence goes on (Akka's `recover = on`), so a stuck task delays a
//! shutdown but never stops it.
//!
//! One [`CoordinatedShutdown`] belongs to each cluster extension
//! ([`Cluster::coordinated_shutdown`](crate::Cluster::coordinated_shutdown)).
//! It runs when the application asks (a SIGTERM handler, say, or
//! [`ActorSystem::shutdown`], see
//! [`CoordinatedShutdownSettings::run_by_actor_system_terminate`]), when this
//! node sees itself Exiting (someone made it leave), and when it is downed
//! or removed by the others
//! ([`ClusterSettings::run_coordinated_shutdown_when_down`](crate::ClusterSettings::run_coordinated_shutdown_when_down)).
//!
//! ```no_run
//! use troupe_cluster::coordinated_shutdown::{Phase, Reason};
//! # async fn demo(cluster: troupe_cluster::Cluster) {
//! let shutdown = cluster.coordinated_shutdown();
//! shutdown
//!     .add_task(Phase::ServiceUnbind, "stop-accepting", || async {
//!         // close the listener
//!     })
//!     .unwrap();
//! // Later, e.g. on SIGTERM: leave the cluster, hand singletons over,
//! // stop the actor system.
//! shutdown.run(Reason::ProcessExit).await;
//! # }
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::rt;
use troupe_core::ShutdownSequenceError;

/// The phases of a coordinated shutdown, in the order they run, with
/// Akka's names (their [`Display`](fmt::Display) form; parse one with
/// [`str::parse`]). The order of the enum is the order of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// `before-service-unbind`: the first phase, for the application's own
    /// tasks.
    BeforeServiceUnbind,
    /// `service-unbind`: stop accepting new requests (close listeners).
    ServiceUnbind,
    /// `service-requests-done`: wait for requests in progress.
    ServiceRequestsDone,
    /// `service-stop`: final shutdown of service endpoints.
    ServiceStop,
    /// `before-cluster-shutdown`: the application's tasks after its
    /// services stopped and before the node leaves the cluster.
    BeforeClusterShutdown,
    /// `cluster-sharding-shutdown-region`: sharding hands its shards off
    /// (not for application tasks).
    ClusterShardingShutdownRegion,
    /// `cluster-leave`: this node leaves the cluster (built in: it ends
    /// once the node is Leaving, Exiting, Down or no member).
    ClusterLeave,
    /// `cluster-exiting`: wait until the node is Exiting; singletons hand
    /// over (built in).
    ClusterExiting,
    /// `cluster-exiting-done`: this node confirms its exit to the leader,
    /// which removes it (built in).
    ClusterExitingDone,
    /// `cluster-shutdown`: the cluster extension stops (built in).
    ClusterShutdown,
    /// `before-actor-system-terminate`: the application's tasks after the
    /// cluster stopped and before the actor system stops.
    BeforeActorSystemTerminate,
    /// `actor-system-terminate`: the actor system stops (if
    /// [`CoordinatedShutdownSettings::terminate_actor_system`]).
    ActorSystemTerminate,
}

impl Phase {
    /// Every phase, in the order they run.
    pub const ALL: [Phase; 12] = [
        Phase::BeforeServiceUnbind,
        Phase::ServiceUnbind,
        Phase::ServiceRequestsDone,
        Phase::ServiceStop,
        Phase::BeforeClusterShutdown,
        Phase::ClusterShardingShutdownRegion,
        Phase::ClusterLeave,
        Phase::ClusterExiting,
        Phase::ClusterExitingDone,
        Phase::ClusterShutdown,
        Phase::BeforeActorSystemTerminate,
        Phase::ActorSystemTerminate,
    ];

    /// Akka's name of the phase (`"cluster-leave"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Phase::BeforeServiceUnbind => "before-service-unbind",
            Phase::ServiceUnbind => "service-unbind",
            Phase::ServiceRequestsDone => "service-requests-done",
            Phase::ServiceStop => "service-stop",
            Phase::BeforeClusterShutdown => "before-cluster-shutdown",
            Phase::ClusterShardingShutdownRegion => "cluster-sharding-shutdown-region",
            Phase::ClusterLeave => "cluster-leave",
            Phase::ClusterExiting => "cluster-exiting",
            Phase::ClusterExitingDone => "cluster-exiting-done",
            Phase::ClusterShutdown => "cluster-shutdown",
            Phase::BeforeActorSystemTerminate => "before-actor-system-terminate",
            Phase::ActorSystemTerminate => "actor-system-terminate",
        }
    }

    /// The phase that runs after this one (`None` after the last).
    pub fn next(self) -> Option<Phase> {
        Phase::ALL.get(self as usize + 1).copied()
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Phase {
    type Err = CoordinatedShutdownError;

    /// Parses Akka's name of a phase.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| CoordinatedShutdownError::UnknownPhase(s.to_string()))
    }
}

/// Why a coordinated shutdown runs (Akka's `Reason`s). Tasks may look at
/// it with [`CoordinatedShutdown::reason`], e.g. to skip work that makes
/// no sense once the node was downed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// No reason given.
    Unknown,
    /// The process was asked to exit (SIGTERM, Ctrl-C).
    ProcessExit,
    /// This node left the cluster: it saw itself Exiting (after
    /// `Cluster::leave`, from this node or another).
    ClusterLeaving,
    /// This node was downed or removed by the others.
    ClusterDowning,
    /// This node could not join its seed nodes in time
    /// (`shutdown_after_unsuccessful_join_seed_nodes`).
    ClusterJoinUnsuccessful,
    /// [`ActorSystem::shutdown`] was called (see
    /// [`CoordinatedShutdownSettings::run_by_actor_system_terminate`]).
    ActorSystemTerminate,
    /// The application's own reason.
    Custom(String),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Unknown => f.write_str("unknown reason"),
            Reason::ProcessExit => f.write_str("the process is exiting"),
            Reason::ClusterLeaving => f.write_str("this node left the cluster"),
            Reason::ClusterDowning => f.write_str("this node was downed or removed"),
            Reason::ClusterJoinUnsuccessful => f.write_str("joining the seed nodes failed"),
            Reason::ActorSystemTerminate => f.write_str("the actor system is shutting down"),
            Reason::Custom(why) => f.write_str(why),
        }
    }
}

/// What went wrong with a coordinated shutdown request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CoordinatedShutdownError {
    /// Not the name of a phase (see [`Phase`] for the names).
    UnknownPhase(String),
    /// The shutdown has already started (or finished) this phase, so a task
    /// added to it now would never run.
    PhaseAlreadyStarted {
        /// The phase.
        phase: Phase,
        /// The task that was refused.
        task: String,
    },
    /// Tasks need a name: it is what the log names when one is too slow.
    EmptyTaskName,
}

impl fmt::Display for CoordinatedShutdownError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CoordinatedShutdownError::UnknownPhase(name) => write!(
                f,
                "unknown coordinated shutdown phase `{name}`; the phases are {}",
                Phase::ALL.map(Phase::name).join(", ")
            ),
            CoordinatedShutdownError::PhaseAlreadyStarted { phase, task } => write!(
                f,
                "task `{task}` was not added: the coordinated shutdown has already started phase {phase}"
            ),
            CoordinatedShutdownError::EmptyTaskName => {
                f.write_str("a coordinated shutdown task needs a name")
            }
        }
    }
}

impl std::error::Error for CoordinatedShutdownError {}

/// Settings of the coordinated shutdown (Akka's defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct CoordinatedShutdownSettings {
    /// The timeout of a phase that has none in `phase_timeouts`. Default 5 s.
    pub default_phase_timeout: Duration,
    /// Phases with their own timeout. Default (Akka's):
    /// `cluster-sharding-shutdown-region`, `cluster-exiting` and
    /// `actor-system-terminate` 10 s.
    pub phase_timeouts: BTreeMap<Phase, Duration>,
    /// Stop the actor system in the last phase. Default true.
    pub terminate_actor_system: bool,
    /// [`ActorSystem::shutdown`] runs this coordinated shutdown first, so
    /// that a node shut down that way leaves the cluster gracefully (its
    /// shards and singletons handed over) instead of vanishing. Default
    /// true, as Akka's `run-by-actor-system-terminate`.
    /// [`ActorSystem::terminate`] always stops at once.
    pub run_by_actor_system_terminate: bool,
}

impl Default for CoordinatedShutdownSettings {
    fn default() -> Self {
        let ten = Duration::from_secs(10);
        CoordinatedShutdownSettings {
            default_phase_timeout: Duration::from_secs(5),
            phase_timeouts: [
                (Phase::ClusterShardingShutdownRegion, ten),
                (Phase::ClusterExiting, ten),
                (Phase::ActorSystemTerminate, ten),
            ]
            .into_iter()
            .collect(),
            terminate_actor_system: true,
            run_by_actor_system_terminate: true,
        }
    }
}

impl CoordinatedShutdownSettings {
    /// The timeout of `phase`.
    pub fn timeout(&self, phase: Phase) -> Duration {
        self.phase_timeouts
            .get(&phase)
            .copied()
            .unwrap_or(self.default_phase_timeout)
    }

    /// Checks that every timeout is more than zero.
    pub fn validate(&self) -> Result<(), String> {
        if self.default_phase_timeout.is_zero() {
            return Err("coordinated-shutdown.default-phase-timeout must be more than zero".into());
        }
        match self.phase_timeouts.iter().find(|(_, d)| d.is_zero()) {
            Some((phase, _)) => Err(format!(
                "coordinated-shutdown.phases.{phase}.timeout must be more than zero"
            )),
            None => Ok(()),
        }
    }
}

type TaskFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type Task = Box<dyn FnOnce() -> TaskFuture + Send>;

struct Entry {
    id: u64,
    name: String,
    task: Task,
}

/// The mutable part: registered tasks and how far a run has got.
struct State {
    tasks: BTreeMap<Phase, Vec<Entry>>,
    next_id: u64,
    /// The reason of the run, once one has started.
    reason: Option<Reason>,
    /// The phase the run has started last (tasks can no longer be added to
    /// it or to earlier ones).
    started: Option<Phase>,
    /// Dropped when the run has finished, which wakes every waiter.
    finished: Option<async_channel::Sender<()>>,
}

struct Inner {
    settings: CoordinatedShutdownSettings,
    state: Mutex<State>,
    finished: async_channel::Receiver<()>,
}

/// Akka's coordinated shutdown for one cluster extension: register tasks in
/// [`Phase`]s, then [`run`](Self::run) them in order. A cheap handle:
/// clones share the same sequence.
#[derive(Clone)]
pub struct CoordinatedShutdown {
    inner: Arc<Inner>,
}

impl fmt::Debug for CoordinatedShutdown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.state();
        f.debug_struct("CoordinatedShutdown")
            .field("reason", &st.reason)
            .field("started", &st.started)
            .field("finished", &st.finished.is_none())
            .finish()
    }
}

/// A task added with [`CoordinatedShutdown::add_cancellable_task`].
#[derive(Debug, Clone)]
pub struct TaskHandle {
    inner: Weak<Inner>,
    phase: Phase,
    id: u64,
}

impl TaskHandle {
    /// Removes the task unless its phase has already started. True if it
    /// was removed (it will not run).
    pub fn cancel(&self) -> bool {
        let Some(inner) = self.inner.upgrade() else {
            return false;
        };
        let mut st = lock(&inner.state);
        let Some(tasks) = st.tasks.get_mut(&self.phase) else {
            return false;
        };
        let before = tasks.len();
        tasks.retain(|e| e.id != self.id);
        before != tasks.len()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl CoordinatedShutdown {
    /// A coordinated shutdown for `system`: with
    /// `settings.terminate_actor_system`, its last phase stops the system.
    /// The cluster extension makes one (and registers its own tasks); use
    /// [`Cluster::coordinated_shutdown`](crate::Cluster::coordinated_shutdown).
    pub fn new(system: &ActorSystem, settings: CoordinatedShutdownSettings) -> Self {
        let (tx, rx) = async_channel::bounded(1);
        let terminate = settings.terminate_actor_system;
        let cs = CoordinatedShutdown {
            inner: Arc::new(Inner {
                settings,
                state: Mutex::new(State {
                    tasks: BTreeMap::new(),
                    next_id: 0,
                    reason: None,
                    started: None,
                    finished: Some(tx),
                }),
                finished: rx,
            }),
        };
        if terminate {
            let system = system.clone();
            cs.add_task(
                Phase::ActorSystemTerminate,
                "terminate-actor-system",
                // Not `shutdown`: that would wait for this very run.
                move || async move { system.terminate().await },
            )
            .expect("a new coordinated shutdown accepts tasks");
        }
        cs
    }

    /// Makes this the shutdown sequence of `system`
    /// ([`ActorSystem::set_shutdown_sequence`]): `system.shutdown()` runs it
    /// with [`Reason::ActorSystemTerminate`] and returns when it has
    /// finished. The cluster extension does this for its own coordinated
    /// shutdown when
    /// [`CoordinatedShutdownSettings::run_by_actor_system_terminate`].
    pub fn run_by_actor_system_shutdown(
        &self,
        system: &ActorSystem,
    ) -> Result<(), ShutdownSequenceError> {
        let me = self.clone();
        system.set_shutdown_sequence(move || me.run(Reason::ActorSystemTerminate))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.inner.state)
    }

    /// The settings.
    pub fn settings(&self) -> &CoordinatedShutdownSettings {
        &self.inner.settings
    }

    /// The timeout of `phase`.
    pub fn timeout(&self, phase: Phase) -> Duration {
        self.inner.settings.timeout(phase)
    }

    /// Adds a task to `phase`: `task` is called when the phase starts, and
    /// the phase waits for its future (at most the phase's timeout). Tasks
    /// of one phase run concurrently. A task may be added while a shutdown
    /// runs, to a phase that has not started yet.
    ///
    /// Fails with [`CoordinatedShutdownError::PhaseAlreadyStarted`] if the
    /// run has already started that phase, and with
    /// [`CoordinatedShutdownError::EmptyTaskName`] for an empty `name`.
    pub fn add_task<F, Fut>(
        &self,
        phase: Phase,
        name: impl Into<String>,
        task: F,
    ) -> Result<(), CoordinatedShutdownError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.add_cancellable_task(phase, name, task).map(|_| ())
    }

    /// As [`add_task`](Self::add_task), with a handle that removes the task
    /// again (for parts that may stop before the shutdown runs).
    pub fn add_cancellable_task<F, Fut>(
        &self,
        phase: Phase,
        name: impl Into<String>,
        task: F,
    ) -> Result<TaskHandle, CoordinatedShutdownError>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        if name.trim().is_empty() {
            return Err(CoordinatedShutdownError::EmptyTaskName);
        }
        let mut st = self.state();
        if st.started.is_some_and(|s| s >= phase) {
            return Err(CoordinatedShutdownError::PhaseAlreadyStarted { phase, task: name });
        }
        let id = st.next_id;
        st.next_id += 1;
        let task: Task = Box::new(move || Box::pin(task()) as TaskFuture);
        st.tasks
            .entry(phase)
            .or_default()
            .push(Entry { id, name, task });
        Ok(TaskHandle {
            inner: Arc::downgrade(&self.inner),
            phase,
            id,
        })
    }

    /// Runs the shutdown from the first phase, and returns (resolves) when
    /// every phase has run. It starts at once, whether or not the returned
    /// future is awaited. Idempotent: if a run has already started (for
    /// whatever reason), this waits for that run to finish.
    pub fn run(&self, reason: Reason) -> impl Future<Output = ()> + Send + 'static {
        self.run_from(reason, Phase::BeforeServiceUnbind)
    }

    /// As [`run`](Self::run), skipping the phases before `from` (their
    /// tasks never run).
    pub fn run_from(
        &self,
        reason: Reason,
        from: Phase,
    ) -> impl Future<Output = ()> + Send + 'static {
        self.start_from(reason, from);
        self.finished()
    }

    /// Starts the shutdown from the first phase without waiting for it
    /// (see [`run`](Self::run)). False if a run had already started.
    pub fn start(&self, reason: Reason) -> bool {
        self.start_from(reason, Phase::BeforeServiceUnbind)
    }

    fn start_from(&self, reason: Reason, from: Phase) -> bool {
        {
            let mut st = self.state();
            if st.reason.is_some() {
                return false;
            }
            tracing::info!("coordinated shutdown starts from phase {from} ({reason})");
            st.reason = Some(reason);
            // The tasks of skipped phases never run.
            st.tasks.retain(|p, _| *p >= from);
            st.started = Some(from);
        }
        let me = self.clone();
        rt::spawn(async move { me.run_phases(from).await });
        true
    }

    /// Resolves once a run has finished (whoever started it); never while
    /// none has.
    pub fn finished(&self) -> impl Future<Output = ()> + Send + 'static {
        let done = self.inner.finished.clone();
        async move { while done.recv().await.is_ok() {} }
    }

    /// The reason of the run, once one has started.
    pub fn reason(&self) -> Option<Reason> {
        self.state().reason.clone()
    }

    /// The phase the run has reached (started last), if it has started.
    pub fn current_phase(&self) -> Option<Phase> {
        self.state().started
    }

    /// True once a run has finished every phase.
    pub fn is_finished(&self) -> bool {
        self.state().finished.is_none()
    }

    async fn run_phases(&self, from: Phase) {
        for phase in Phase::ALL.into_iter().filter(|p| *p >= from) {
            let tasks = {
                let mut st = self.state();
                st.started = Some(phase);
                st.tasks.remove(&phase).unwrap_or_default()
            };
            self.run_phase(phase, tasks).await;
        }
        tracing::info!("coordinated shutdown finished");
        self.state().finished.take();
    }

    async fn run_phase(&self, phase: Phase, tasks: Vec<Entry>) {
        if tasks.is_empty() {
            return;
        }
        let timeout = self.timeout(phase);
        tracing::debug!(
            "coordinated shutdown phase {phase}: {} task(s), timeout {timeout:?}",
            tasks.len()
        );
        let deadline = Instant::now() + timeout;
        let running: Vec<(String, rt::JoinHandle<()>)> = tasks
            .into_iter()
            .map(|e| {
                let name = e.name;
                let task = e.task;
                let what = format!("{phase}/{name}");
                let handle = rt::spawn(async move {
                    use futures_lite::FutureExt;
                    // A panicking task is logged and counts as done.
                    let run = AssertUnwindSafe(async move { task().await });
                    if run.catch_unwind().await.is_err() {
                        tracing::error!("coordinated shutdown task {what} panicked");
                    }
                });
                (name, handle)
            })
            .collect();
        for (name, handle) in running {
            let left = deadline.saturating_duration_since(Instant::now());
            if rt::timeout(left, handle).await.is_none() {
                // Akka's recover = on: log it and go on; the task may still
                // finish in the background.
                tracing::warn!(
                    "coordinated shutdown phase {phase}: task `{name}` did not finish within \
                     {timeout:?}; going on"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_have_akkas_names_order_and_timeouts() {
        let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(
            names,
            [
                "before-service-unbind",
                "service-unbind",
                "service-requests-done",
                "service-stop",
                "before-cluster-shutdown",
                "cluster-sharding-shutdown-region",
                "cluster-leave",
                "cluster-exiting",
                "cluster-exiting-done",
                "cluster-shutdown",
                "before-actor-system-terminate",
                "actor-system-terminate",
            ]
        );
        for (i, p) in Phase::ALL.iter().enumerate() {
            assert_eq!(*p as usize, i);
            assert_eq!(p.to_string().parse::<Phase>().unwrap(), *p);
            assert_eq!(p.next(), Phase::ALL.get(i + 1).copied());
        }
        assert!(Phase::ClusterLeave < Phase::ClusterExiting);
        assert_eq!(
            "cluster-leaving".parse::<Phase>(),
            Err(CoordinatedShutdownError::UnknownPhase(
                "cluster-leaving".into()
            ))
        );
        let s = CoordinatedShutdownSettings::default();
        let five = Duration::from_secs(5);
        let ten = Duration::from_secs(10);
        assert_eq!(s.timeout(Phase::BeforeServiceUnbind), five);
        assert_eq!(s.timeout(Phase::ClusterShardingShutdownRegion), ten);
        assert_eq!(s.timeout(Phase::ClusterLeave), five);
        assert_eq!(s.timeout(Phase::ClusterExiting), ten);
        assert_eq!(s.timeout(Phase::ClusterExitingDone), five);
        assert_eq!(s.timeout(Phase::ActorSystemTerminate), ten);
        assert!(s.terminate_actor_system);
        s.validate().unwrap();
    }
}
