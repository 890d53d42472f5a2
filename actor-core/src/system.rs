//! The actor system: the root of the hierarchy, settings, dead letters and
//! orderly shutdown.

use crate::actor::Actor;
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::cell::ActorCell;
use crate::dead_letters::{lock, DeadLetter, DeadLetterOffice};
use crate::error::{SpawnError, SystemError};
use crate::props::Props;
use crate::supervision::SupervisorStrategy;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Settings of an actor system.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemSettings {
    /// Messages an actor handles per activation before it lets others run
    /// (Akka's dispatcher `throughput`). Default 100.
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
}

impl SystemShared {
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
        });
        let guardian = |name: &str| {
            let props = Props::new(Guardian)
                .with_name(name)
                .with_supervisor(SupervisorStrategy::Resume);
            ActorCell::spawn(&shared, None, props).expect("guardian names are valid")
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
        ActorCell::spawn(&self.shared, Some(&g.user.to_any()), props)
    }

    /// Spawns an actor of the runtime or of an extension under `/system`.
    /// These stop after every user actor at shutdown.
    pub fn spawn_system_actor<A: Actor>(&self, props: Props<A>) -> Result<ActorRef<A>, SpawnError> {
        let Some(g) = self.guardians() else {
            return Err(SpawnError::ParentStopped);
        };
        ActorCell::spawn(&self.shared, Some(&g.system.to_any()), props)
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

    /// Finds a live actor of type `A` by path.
    pub fn lookup<A: Actor>(&self, path: &str) -> Option<ActorRef<A>> {
        self.lookup_any(path)?.downcast()
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

    /// True once shutdown has finished.
    pub fn is_terminated(&self) -> bool {
        self.guardians().is_none()
    }

    /// Stops every actor — children before their parents, `/user` before
    /// `/system` — and returns when all have stopped. Calling it again (or
    /// concurrently) waits for the same shutdown.
    pub async fn shutdown(&self) {
        let Some(g) = self.guardians() else {
            return;
        };
        tracing::debug!("actor system `{}` shutting down", self.shared.name);
        g.user.stop();
        g.user.wait_for_termination().await;
        g.system.stop();
        g.system.wait_for_termination().await;
        lock(&self.shared.guardians).take();
        tracing::debug!("actor system `{}` terminated", self.shared.name);
    }
}

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
