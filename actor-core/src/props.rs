//! How to create an actor: its first instance or a factory, its name,
//! supervisor strategy and mailbox.

use crate::actor::Actor;
use crate::path::Name;
use crate::supervision::SupervisorStrategy;
use std::sync::{Arc, Mutex};

/// The mailbox an actor gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MailboxConfig {
    /// No limit (the default).
    #[default]
    Unbounded,
    /// At most `capacity` user messages waiting; `tell` fails with
    /// `TellError::MailboxFull` beyond that and `send` waits for room.
    /// Messages of the runtime itself (stop, watch, ...) are never refused.
    Bounded {
        /// Most messages waiting.
        capacity: usize,
    },
}

/// A closure that makes an instance from the actor's name.
type MakeNamed<A> = Arc<dyn Fn(&Arc<str>) -> A + Send + Sync>;

/// Makes an actor's instances: the first, and one on every restart.
pub(crate) enum Factory<A> {
    /// A closure of this actor's own. Behind a lock only so that the
    /// actor's supervision can be shared between threads: the actor's own
    /// activation is its only caller, so the lock is never contended.
    Owned(Mutex<Box<dyn FnMut() -> A + Send>>),
    /// One closure shared by many actors, given the actor's name.
    Named(MakeNamed<A>),
}

impl<A> Factory<A> {
    /// A new instance for the actor named `name`.
    pub(crate) fn make(&self, name: &Name) -> A {
        match self {
            Factory::Owned(f) => (f.lock().unwrap_or_else(|e| e.into_inner()))(),
            Factory::Named(f) => match name {
                Name::Given(n) => f(n),
                Name::Generated(_) => f(&Arc::from(name.as_str())),
            },
        }
    }
}

/// What an actor's cell keeps of its props after the spawn: the factory
/// that a restart calls and the supervisor strategy. Fixed at spawn, so
/// that the actors of one [`NamedFactory`] with the default strategy share
/// one (an entity type's million entities pay a pointer each for it).
pub(crate) struct Supervision<A> {
    /// `None` for an actor spawned from a value (it cannot be re-created).
    pub(crate) factory: Option<Factory<A>>,
    /// `None` is the default strategy (restart, no limit, no backoff).
    pub(crate) strategy: Option<Box<SupervisorStrategy>>,
}

/// A factory shared by many actors: it makes an instance from the actor's
/// name, for the first incarnation and on every restart. Cloning it is
/// cheap (a reference count), and actors spawned from clones of one
/// factory with the default supervisor strategy share what their cells
/// keep of it, so that each pays one pointer.
///
/// ```
/// use std::sync::Arc;
/// use troupe_core::prelude::*;
/// use troupe_core::{NamedFactory, Props};
///
/// struct Account { id: Arc<str>, balance: u64 }
/// impl Actor for Account {}
///
/// let accounts = NamedFactory::new(|name: &Arc<str>| Account { id: name.clone(), balance: 0 });
/// let a = Props::from_named_factory(accounts.clone()).with_name("acc-1");
/// let b = Props::from_named_factory(accounts).with_name("acc-2");
/// # let _ = (a, b);
/// ```
pub struct NamedFactory<A> {
    make: MakeNamed<A>,
    /// `make` with the default strategy, as the actors keep it.
    shared: Arc<Supervision<A>>,
}

impl<A> Clone for NamedFactory<A> {
    fn clone(&self) -> Self {
        NamedFactory {
            make: self.make.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<A> std::fmt::Debug for NamedFactory<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NamedFactory")
    }
}

impl<A: 'static> NamedFactory<A> {
    /// A factory that makes an instance from the actor's name.
    pub fn new(make: impl Fn(&Arc<str>) -> A + Send + Sync + 'static) -> Self {
        let make: MakeNamed<A> = Arc::new(make);
        NamedFactory {
            shared: Arc::new(Supervision {
                factory: Some(Factory::Named(make.clone())),
                strategy: None,
            }),
            make,
        }
    }

    /// Calls the factory, as a spawn named `name` would.
    pub fn make(&self, name: &Arc<str>) -> A {
        (self.make)(name)
    }

    /// What an actor spawned from this factory keeps: the shared block
    /// for the default strategy, a block of its own otherwise.
    pub(crate) fn supervision(
        &self,
        strategy: Option<Box<SupervisorStrategy>>,
    ) -> Arc<Supervision<A>> {
        match strategy {
            None => self.shared.clone(),
            Some(s) => Arc::new(Supervision {
                factory: Some(Factory::Named(self.make.clone())),
                strategy: Some(s),
            }),
        }
    }
}

/// Where instances come from.
pub(crate) enum Source<A> {
    /// One instance; such an actor cannot be re-created on restart.
    Value(A),
    /// A factory of the actor's own, called for the first instance and on
    /// every restart.
    Factory(Factory<A>),
    /// A factory shared with other actors, called with the actor's name.
    Named(NamedFactory<A>),
}

/// Everything needed to spawn an actor.
///
/// ```
/// use troupe_core::prelude::*;
/// use troupe_core::{MailboxConfig, Props, SupervisorStrategy};
///
/// #[derive(Default)]
/// struct Worker { done: u64 }
/// impl Actor for Worker {}
///
/// let props = Props::from_factory(Worker::default)
///     .with_name("worker-1")
///     .with_supervisor(SupervisorStrategy::restart())
///     .with_mailbox(MailboxConfig::Bounded { capacity: 1000 });
/// # let _ = props;
/// ```
pub struct Props<A: Actor> {
    pub(crate) source: Source<A>,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) strategy: SupervisorStrategy,
    pub(crate) mailbox: MailboxConfig,
}

impl<A: Actor> Props<A> {
    /// Spawns this instance. It cannot be re-created, so a restart
    /// strategy stops it instead (with a warning); use
    /// [`Props::from_factory`] for restarts.
    pub fn new(actor: A) -> Self {
        Props {
            source: Source::Value(actor),
            name: None,
            strategy: SupervisorStrategy::default(),
            mailbox: MailboxConfig::Unbounded,
        }
    }

    /// Spawns an instance made by `factory`, which is called again on every
    /// restart so that each incarnation starts with fresh state.
    pub fn from_factory(factory: impl FnMut() -> A + Send + 'static) -> Self {
        Props {
            source: Source::Factory(Factory::Owned(Mutex::new(Box::new(factory)))),
            name: None,
            strategy: SupervisorStrategy::default(),
            mailbox: MailboxConfig::Unbounded,
        }
    }

    /// Spawns an instance that `factory` makes from the actor's name,
    /// called again on every restart. One factory can serve any number of
    /// actors, where [`Props::from_factory`] costs each actor a closure of
    /// its own: for many actors named by a key (cluster sharding names
    /// each entity by its id). The factory gets the name the actor keeps
    /// (the `Arc` given to [`Props::with_name`]: an instance that keeps a
    /// clone of it costs no allocation), or the generated name.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use troupe_core::prelude::*;
    /// use troupe_core::{NamedFactory, Props};
    ///
    /// struct Account { id: Arc<str>, balance: u64 }
    /// impl Actor for Account {}
    ///
    /// let accounts = NamedFactory::new(|name: &Arc<str>| Account { id: name.clone(), balance: 0 });
    /// let a = Props::from_named_factory(accounts.clone()).with_name("acc-1");
    /// let b = Props::from_named_factory(accounts).with_name("acc-2");
    /// # let _ = (a, b);
    /// ```
    pub fn from_named_factory(factory: NamedFactory<A>) -> Self {
        Props {
            source: Source::Named(factory),
            name: None,
            strategy: SupervisorStrategy::default(),
            mailbox: MailboxConfig::Unbounded,
        }
    }

    /// Sets the name (unique among siblings); without one a name such as
    /// `$a1` is generated. An `Arc<str>` is kept as it is (the actor
    /// shares it rather than copying it).
    pub fn with_name(mut self, name: impl Into<Arc<str>>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Sets the supervisor strategy.
    pub fn with_supervisor(mut self, strategy: SupervisorStrategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Sets the mailbox.
    pub fn with_mailbox(mut self, mailbox: MailboxConfig) -> Self {
        self.mailbox = mailbox;
        self
    }
}
