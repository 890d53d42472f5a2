//! How to create an actor: its first instance or a factory, its name,
//! supervisor strategy and mailbox.

use crate::actor::Actor;
use crate::supervision::SupervisorStrategy;

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

pub(crate) type Factory<A> = Box<dyn FnMut() -> A + Send>;

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
    pub(crate) name: Option<String>,
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
            source: Source::Factory(Box::new(factory)),
            name: None,
            strategy: SupervisorStrategy::default(),
            mailbox: MailboxConfig::Unbounded,
        }
    }

    /// Sets the name (unique among siblings); without one a name such as
    /// `$a1` is generated.
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
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
