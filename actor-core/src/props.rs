//! How to create an actor: its first instance or a factory, its name,
//! supervisor strategy and mailbox.

use crate::actor::Actor;
use crate::path::Name;
use crate::supervision::SupervisorStrategy;
use std::sync::Arc;

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

/// Makes an actor's instances: the first, and one on every restart.
pub(crate) enum Factory<A> {
    /// A closure of this actor's own.
    Owned(Box<dyn FnMut() -> A + Send>),
    /// One closure shared by many actors, given the actor's name (no
    /// allocation per actor).
    Named(NamedFactory<A>),
}

/// A factory shared by many actors: it makes an instance from the actor's
/// name.
pub type NamedFactory<A> = Arc<dyn Fn(&Arc<str>) -> A + Send + Sync>;

impl<A> Factory<A> {
    /// A new instance for the actor named `name`.
    pub(crate) fn make(&mut self, name: &Name) -> A {
        match self {
            Factory::Owned(f) => f(),
            Factory::Named(f) => match name {
                Name::Given(n) => f(n),
                Name::Generated(_) => f(&Arc::from(name.as_str())),
            },
        }
    }
}

/// Where instances come from.
pub(crate) enum Source<A> {
    /// One instance; such an actor cannot be re-created on restart.
    Value(A),
    /// A factory called for the first instance and on every restart.
    Factory(Factory<A>),
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
            source: Source::Factory(Factory::Owned(Box::new(factory))),
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
    /// let accounts: NamedFactory<Account> =
    ///     Arc::new(|name: &Arc<str>| Account { id: name.clone(), balance: 0 });
    /// let a = Props::from_named_factory(accounts.clone()).with_name("acc-1");
    /// let b = Props::from_named_factory(accounts).with_name("acc-2");
    /// # let _ = (a, b);
    /// ```
    pub fn from_named_factory(factory: NamedFactory<A>) -> Self {
        Props {
            source: Source::Factory(Factory::Named(factory)),
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
