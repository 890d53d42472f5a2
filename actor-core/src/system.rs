//! The actor system: the root of the hierarchy, settings, dead letters and
//! orderly shutdown.

use crate::actor::{Actor, Handler};
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::cell::ActorCell;
use crate::codec::RegisterError;
use crate::dead_letters::{lock, DeadLetter, DeadLetterOffice};
use crate::error::{ShutdownSequenceError, SpawnError, SystemError};
use crate::message::Message;
use crate::props::Props;
use crate::remote::registry::Registry;
use crate::remote::{RemotePath, RemoteSettings, Remoting, RemotingShared};
use crate::supervision::SupervisorStrategy;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Settings of an actor system.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemSettings {
    /// Messages an actor handles per turn (Akka's dispatcher
    /// `throughput`). Default 100. After a turn, an actor whose turn woke
    /// another job on its worker goes behind the worker's queue; one that
    /// woke none takes another turn at once, up to 16 turns in a row, so
    /// that it does not queue behind a sender that only fills its mailbox
    /// further (the worker's other jobs can be taken by idle workers
    /// meanwhile).
    pub throughput: usize,
    /// Timeout of [`ActorRef::ask`]. Default 5 s.
    pub ask_timeout: Duration,
    /// Dead letters logged per `dead_letter_log_window`; the rest are only
    /// counted. Default 10.
    pub dead_letter_log_limit: u32,
    /// Window of the dead-letter log limit. Default 10 s.
    pub dead_letter_log_window: Duration,
}

impl Default for SystemSettings {
    fn default() -> Self {
        SystemSettings {
            throughput: 100,
            ask_timeout: Duration::from_secs(5),
            dead_letter_log_limit: 10,
            dead_letter_log_window: Duration::from_secs(10),
        }
    }
}

impl SystemSettings {
    fn validate(&self) -> Result<(), SystemError> {
        if self.throughput == 0 {
            return Err(SystemError::InvalidSetting(
                "throughput must be at least 1".into(),
            ));
        }
        if self.ask_timeout.is_zero() {
            return Err(SystemError::InvalidSetting(
                "ask_timeout must be more than zero".into(),
            ));
        }
        Ok(())
    }
}

/// State shared by every actor of a system.
pub(crate) struct SystemShared {
    name: String,
    pub(crate) settings: SystemSettings,
    pub(crate) dead_letters: DeadLetterOffice,
    next_uid: AtomicU64,
    next_name: AtomicU64,
    /// Taken at shutdown, which breaks the guardian <-> system cycle.
    guardians: Mutex<Option<Guardians>>,
    /// Message types that can cross the wire.
    pub(crate) registry: Registry,
    /// Remoting, when enabled.
    pub(crate) remote: OnceLock<Arc<RemotingShared>>,
    /// Extensions (cluster, sharding ...), one per type.
    extensions: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// What `shutdown` runs before it stops the actors.
    shutdown_sequence: Mutex<SequenceSlot>,
}

/// The shutdown sequence, taken when termination starts (which breaks the
/// cycle through the system); none can be set after that.
#[derive(Default)]
struct SequenceSlot {
    sequence: Option<ShutdownSequence>,
    terminating: bool,
}

/// An ordered shutdown run by [`ActorSystem::shutdown`].
type ShutdownSequence = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

impl SystemShared {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn next_uid(&self) -> u64 {
        self.next_uid.fetch_add(1, Ordering::Relaxed)
    }
    pub(crate) fn next_name(&self) -> u64 {
        self.next_name.fetch_add(1, Ordering::Relaxed)
    }
}

#[derive(Clone)]
struct Guardians {
    user: ActorRef<Guardian>,
    system: ActorRef<Guardian>,
}

/// The actor at `/user` and `/system`: parent of the top-level actors.
pub(crate) struct Guardian;
impl Actor for Guardian {}

/// An actor system: create one per process (or per node), spawn top-level
/// actors on it, and shut it down at the end.
///
/// A system lives until [`shutdown`](Self::shutdown); dropping the handle
/// does not stop it. Clones are handles to the same system.
///
/// ```
/// use troupe_core::prelude::*;
///
/// troupe_core::rt::block_on(async {
///     let system = ActorSystem::new("example").unwrap();
///     // spawn actors, tell, ask ...
///     system.shutdown().await;
/// });
/// ```
#[derive(Clone)]
pub struct ActorSystem {
    shared: Arc<SystemShared>,
}

impl fmt::Debug for ActorSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ActorSystem")
            .field("name", &self.shared.name)
            .finish()
    }
}

impl ActorSystem {
    /// Creates a system with default settings. The name (ASCII letters,
    /// digits, `-`, `_`) becomes part of remote addresses later.
    pub fn new(name: &str) -> Result<Self, SystemError> {
        Self::with_settings(name, SystemSettings::default())
    }

    /// Creates a system with these settings.
    pub fn with_settings(name: &str, settings: SystemSettings) -> Result<Self, SystemError> {
        Self::builder(name).settings(settings).build()
    }

    /// A builder for a system with settings and, optionally, remoting.
    ///
    /// ```
    /// use troupe_core::prelude::*;
    /// use troupe_core::remote::RemoteSettings;
    ///
    /// let system = ActorSystem::builder("node")
    ///     .remote(RemoteSettings::new("127.0.0.1:0").with_secret("change me"))
    ///     .build()
    ///     .unwrap();
    /// let address = system.remoting().unwrap().address().clone();
    /// assert_ne!(address.port(), 0);
    /// troupe_core::rt::block_on(system.shutdown());
    /// ```
    pub fn builder(name: &str) -> ActorSystemBuilder {
        ActorSystemBuilder {
            name: name.to_string(),
            settings: SystemSettings::default(),
            remote: None,
        }
    }

    fn create(
        name: &str,
        settings: SystemSettings,
        remote: Option<RemoteSettings>,
    ) -> Result<Self, SystemError> {
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !valid {
            return Err(SystemError::InvalidName(name.to_string()));
        }
        settings.validate()?;
        let shared = Arc::new(SystemShared {
            name: name.to_string(),
            dead_letters: DeadLetterOffice::new(
                settings.dead_letter_log_limit,
                settings.dead_letter_log_window,
            ),
            settings,
            next_uid: AtomicU64::new(fastrand::u64(1..u64::MAX / 2)),
            next_name: AtomicU64::new(0),
            guardians: Mutex::new(None),
            registry: Registry::default(),
            remote: OnceLock::new(),
            extensions: Mutex::new(HashMap::new()),
            shutdown_sequence: Mutex::new(SequenceSlot::default()),
        });
        if let Some(remote) = remote {
            remote.validate()?;
            let remoting = RemotingShared::start(&shared, remote).map_err(SystemError::Remoting)?;
            let _ = shared.remote.set(remoting);
        }
        let guardian = |name: &str| {
            let props = Props::new(Guardian)
                .with_name(name)
                .with_supervisor(SupervisorStrategy::Resume);
            ActorCell::spawn(&shared, None, props, false).expect("guardian names are valid")
        };
        let guardians = Guardians {
            user: guardian("user"),
            system: guardian("system"),
        };
        *lock(&shared.guardians) = Some(guardians);
        Ok(ActorSystem { shared })
    }

    pub(crate) fn from_shared(shared: Arc<SystemShared>) -> Self {
        ActorSystem { shared }
    }

    /// The system's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The settings the system runs with.
    pub fn settings(&self) -> &SystemSettings {
        &self.shared.settings
    }

    fn guardians(&self) -> Option<Guardians> {
        lock(&self.shared.guardians).clone()
    }

    /// Spawns a top-level actor under `/user` with a generated name.
    ///
    /// If the system is already shutting down, the returned reference is
    /// to an actor that has stopped (an error is logged).
    pub fn spawn<A: Actor>(&self, actor: A) -> ActorRef<A> {
        match self.spawn_props(Props::new(actor)) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!("spawn on actor system `{}` failed: {e}", self.shared.name);
                ActorCell::stillborn(&self.shared)
            }
        }
    }

    /// Spawns a top-level actor under `/user` with this name.
    pub fn spawn_named<A: Actor>(&self, name: &str, actor: A) -> Result<ActorRef<A>, SpawnError> {
        self.spawn_props(Props::new(actor).with_name(name))
    }

    /// Spawns a top-level actor under `/user` from `props`.
    pub fn spawn_props<A: Actor>(&self, props: Props<A>) -> Result<ActorRef<A>, SpawnError> {
        let Some(g) = self.guardians() else {
            return Err(SpawnError::ParentStopped);
        };
        ActorCell::spawn(&self.shared, Some(&g.user.to_any()), props, false)
    }

    /// Spawns an actor of the runtime or of an extension under `/system`.
    /// These stop after every user actor at shutdown.
    pub fn spawn_system_actor<A: Actor>(&self, props: Props<A>) -> Result<ActorRef<A>, SpawnError> {
        let Some(g) = self.guardians() else {
            return Err(SpawnError::ParentStopped);
        };
        ActorCell::spawn(&self.shared, Some(&g.system.to_any()), props, false)
    }

    /// Finds a live actor by path, such as `/user/parent/child`.
    pub fn lookup_any(&self, path: &str) -> Option<AnyActorRef> {
        let g = self.guardians()?;
        let mut parts = path.split('/').filter(|s| !s.is_empty());
        let mut cur = match parts.next()? {
            "user" => g.user.to_any(),
            "system" => g.system.to_any(),
            _ => return None,
        };
        for name in parts {
            cur = cur.core().child(name)?;
        }
        (!cur.is_terminated()).then_some(cur)
    }

    /// The extension of type `T` registered on this system, if any.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<Arc<T>> {
        let map = self
            .shared
            .extensions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        map.get(&TypeId::of::<T>())
            .cloned()
            .and_then(|e| e.downcast::<T>().ok())
    }

    /// The extension of type `T`, registered by `init` if there is none:
    /// one instance per system, found again from anywhere that has the
    /// system (for example while a message that refers to it is decoded).
    /// `init` runs at most once per system and type, under a lock: it
    /// must not register extensions itself.
    ///
    /// ```
    /// use troupe_core::prelude::*;
    ///
    /// struct Greetings(&'static str);
    ///
    /// let system = ActorSystem::new("doc").unwrap();
    /// let g = system.extension_or_init(|| Greetings("hello"));
    /// assert_eq!(system.extension::<Greetings>().unwrap().0, g.0);
    /// # troupe_core::rt::block_on(system.shutdown());
    /// ```
    pub fn extension_or_init<T: Send + Sync + 'static>(&self, init: impl FnOnce() -> T) -> Arc<T> {
        let mut map = self
            .shared
            .extensions
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let entry = map
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Arc::new(init()) as Arc<dyn Any + Send + Sync>)
            .clone();
        entry
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("extensions are stored under their own type id"))
    }

    /// Finds a live actor of type `A` by path.
    pub fn lookup<A: Actor>(&self, path: &str) -> Option<ActorRef<A>> {
        self.lookup_any(path)?.downcast()
    }

    /// This system's remoting, if it was started with it.
    pub fn remoting(&self) -> Option<Remoting> {
        self.shared.remote.get().map(|shared| Remoting {
            shared: shared.clone(),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<SystemShared> {
        &self.shared
    }

    /// Registers message type `M`, handled by actor type `A`, for remoting:
    /// do it on every node that sends `M` or hosts an `A` that receives it
    /// from the network. Its manifest (`Message::manifest`) names it on the
    /// wire, so it must be the same on every node.
    ///
    /// Unregistered messages are refused when sent to a remote actor
    /// ([`TellError::NotSendable`](crate::TellError::NotSendable)), and are
    /// logged and dropped when they arrive.
    ///
    /// Fails if another message type already uses `M`'s manifest
    /// (registering the same type again is fine).
    pub fn register<A, M>(&self) -> Result<&Self, RegisterError>
    where
        A: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        self.shared.registry.register::<A, M>(false)?;
        Ok(self)
    }

    /// Registers `M` like [`register`](Self::register), sent on the control
    /// connection: for small, urgent messages (heartbeats, membership
    /// gossip) that must not wait behind ordinary traffic.
    pub fn register_control<A, M>(&self) -> Result<&Self, RegisterError>
    where
        A: Handler<M>,
        M: Message + Serialize + DeserializeOwned,
        M::Reply: Serialize + DeserializeOwned,
    {
        self.shared.registry.register::<A, M>(true)?;
        Ok(self)
    }

    /// A reference to the actor at a full path, local or remote:
    /// `troupe://SYSTEM@HOST:PORT/user/name` (optionally `#uid` for one
    /// incarnation). A path of this system is looked up locally (the actor
    /// must exist and be an `A`); a remote path gives a reference at once,
    /// without a round trip: messages to an actor that does not exist there
    /// become dead letters on that node.
    pub fn resolve<A: Actor>(&self, path: &str) -> Result<ActorRef<A>, ResolveError> {
        let parsed = RemotePath::parse(path).map_err(|e| ResolveError::BadPath(e.to_string()))?;
        let Some(remoting) = self.remoting() else {
            return Err(ResolveError::RemotingDisabled);
        };
        if &parsed.address == remoting.address() {
            let found = self
                .lookup_any(&parsed.path)
                .filter(|r| parsed.uid == 0 || r.uid() == parsed.uid)
                .ok_or_else(|| ResolveError::NotFound(path.to_string()))?;
            return found.downcast::<A>().ok_or_else(|| {
                ResolveError::WrongType(path.to_string(), std::any::type_name::<A>())
            });
        }
        Ok(remoting
            .remote_ref(parsed)
            .downcast::<A>()
            .expect("a remote reference takes any actor type"))
    }

    /// Number of dead letters so far.
    pub fn dead_letter_count(&self) -> u64 {
        self.shared.dead_letters.count()
    }

    /// Subscribes to dead letters from now on. At most `capacity` wait to
    /// be received; beyond that they are only counted.
    pub fn subscribe_dead_letters(&self, capacity: usize) -> DeadLetterSubscription {
        DeadLetterSubscription {
            rx: self.shared.dead_letters.subscribe(capacity),
        }
    }

    /// True once [`shutdown`](Self::shutdown) or
    /// [`terminate`](Self::terminate) has finished.
    pub fn is_terminated(&self) -> bool {
        self.guardians().is_none()
    }

    /// Shuts the system down: runs its shutdown sequence if one is set
    /// (a cluster node's coordinated shutdown, which leaves the cluster
    /// gracefully first; see
    /// [`set_shutdown_sequence`](Self::set_shutdown_sequence)), then stops
    /// every actor as [`terminate`](Self::terminate) does, and returns
    /// when all have stopped. Calling it again (or concurrently) waits for
    /// the same shutdown. On a cluster node this takes as long as leaving
    /// the cluster does (at most the sum of the coordinated shutdown's
    /// phase timeouts).
    ///
    /// Do not await it in an actor's handler (stopping that actor drops
    /// the handler's future, and the shutdown with it): spawn it with
    /// [`rt::spawn`](crate::rt::spawn). Nor in a task of the shutdown
    /// sequence itself (it would wait for the sequence it is part of, until
    /// that phase times out): such a task calls
    /// [`terminate`](Self::terminate).
    pub async fn shutdown(&self) {
        let sequence = lock(&self.shared.shutdown_sequence).sequence.clone();
        if let Some(sequence) = sequence {
            sequence().await;
        }
        self.terminate().await;
    }

    /// Sets what [`shutdown`](Self::shutdown) runs before it stops the
    /// actors: an ordered sequence that ends the node's part in whatever
    /// it belongs to (Akka's `run-by-actor-system-terminate`). The cluster
    /// extension sets its coordinated shutdown here. Every call of
    /// `shutdown` calls `sequence`, which must be idempotent (join the run
    /// already under way). [`terminate`](Self::terminate) skips it.
    ///
    /// Fails if a sequence is set already, or the system has terminated.
    ///
    /// ```
    /// use troupe_core::prelude::*;
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    ///
    /// troupe_core::rt::block_on(async {
    ///     let system = ActorSystem::new("example").unwrap();
    ///     let ran = Arc::new(AtomicUsize::new(0));
    ///     let r = ran.clone();
    ///     system
    ///         .set_shutdown_sequence(move || {
    ///             let r = r.clone();
    ///             async move {
    ///                 // e.g. stop taking requests, hand work over
    ///                 r.fetch_add(1, Ordering::SeqCst);
    ///             }
    ///         })
    ///         .unwrap();
    ///     system.shutdown().await;
    ///     assert_eq!(ran.load(Ordering::SeqCst), 1);
    ///     assert!(system.is_terminated());
    /// });
    /// ```
    pub fn set_shutdown_sequence<F, Fut>(&self, sequence: F) -> Result<(), ShutdownSequenceError>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let mut slot = lock(&self.shared.shutdown_sequence);
        // Set by `terminate` before it stops anything.
        if slot.terminating {
            return Err(ShutdownSequenceError::AlreadyTerminated);
        }
        if slot.sequence.is_some() {
            return Err(ShutdownSequenceError::AlreadySet);
        }
        slot.sequence = Some(Arc::new(move || Box::pin(sequence()) as Pin<Box<_>>));
        Ok(())
    }

    /// Stops every actor — children before their parents, `/user` before
    /// `/system` — and returns when all have stopped, without running the
    /// shutdown sequence: on a cluster node, an abrupt stop that the others
    /// see as a crash (the coordinated shutdown's last phase calls it).
    /// The shutdown sequence is dropped: a later `shutdown` does not run
    /// it. Calling it again (or concurrently) waits for the same stop.
    pub async fn terminate(&self) {
        // From here on `shutdown` stops at once too. The sequence usually
        // holds the system: dropping it breaks the cycle.
        let sequence = {
            let mut slot = lock(&self.shared.shutdown_sequence);
            slot.terminating = true;
            slot.sequence.take()
        };
        drop(sequence);
        let Some(g) = self.guardians() else {
            return;
        };
        tracing::debug!("actor system `{}` shutting down", self.shared.name);
        g.user.stop();
        g.user.wait_for_termination().await;
        g.system.stop();
        g.system.wait_for_termination().await;
        if let Some(remoting) = self.shared.remote.get() {
            remoting.shutdown().await;
        }
        lock(&self.shared.guardians).take();
        // Extensions usually hold the system: dropping them breaks the cycle.
        let extensions = std::mem::take(&mut *lock(&self.shared.extensions));
        drop(extensions);
        tracing::debug!("actor system `{}` terminated", self.shared.name);
    }
}

/// Builds an [`ActorSystem`] (see [`ActorSystem::builder`]).
#[derive(Debug)]
pub struct ActorSystemBuilder {
    name: String,
    settings: SystemSettings,
    remote: Option<RemoteSettings>,
}

impl ActorSystemBuilder {
    /// The local runtime's settings.
    pub fn settings(mut self, settings: SystemSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Enables remoting with these settings.
    pub fn remote(mut self, remote: RemoteSettings) -> Self {
        self.remote = Some(remote);
        self
    }

    /// Creates the system (binding its port if remoting is enabled).
    pub fn build(self) -> Result<ActorSystem, SystemError> {
        ActorSystem::create(&self.name, self.settings, self.remote)
    }
}

/// Why [`ActorSystem::resolve`] gave no reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// The text is not a full actor path.
    BadPath(String),
    /// Full paths need remoting enabled on this system.
    RemotingDisabled,
    /// A path of this system where no actor lives.
    NotFound(String),
    /// A path of this system whose actor is of another type.
    WrongType(String, &'static str),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::BadPath(why) => f.write_str(why),
            ResolveError::RemotingDisabled => f.write_str(
                "resolving a full actor path needs remoting enabled on this actor system",
            ),
            ResolveError::NotFound(p) => write!(f, "no actor at {p}"),
            ResolveError::WrongType(p, t) => write!(f, "the actor at {p} is not a `{t}`"),
        }
    }
}

impl std::error::Error for ResolveError {}

/// A stream of dead letters (see [`ActorSystem::subscribe_dead_letters`]).
pub struct DeadLetterSubscription {
    rx: async_channel::Receiver<DeadLetter>,
}

impl DeadLetterSubscription {
    /// Waits for the next dead letter.
    pub async fn recv(&self) -> Option<DeadLetter> {
        self.rx.recv().await.ok()
    }

    /// The next dead letter if one is waiting.
    pub fn try_recv(&self) -> Option<DeadLetter> {
        self.rx.try_recv().ok()
    }
}
