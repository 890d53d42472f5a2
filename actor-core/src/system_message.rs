//! Messages for the runtime itself, queued in the same mailbox as user
//! messages so that they keep their order with them.

use crate::actor_ref::AnyActorRef;
use crate::watch::Terminated;

/// Called once to deliver `Terminated` to a watcher.
pub(crate) type Notifier = Box<dyn FnOnce(Terminated) + Send>;

pub(crate) enum SystemMessage {
    /// Nothing to do.
    Ignore,
    /// Stop once the messages queued before this one are handled.
    PoisonPill,
    /// `watcher` wants `Terminated` when this actor stops.
    Watch { watcher: u64, notify: Notifier },
    /// `watcher` no longer wants `Terminated`.
    Unwatch { watcher: u64 },
    /// A child has terminated (its name is already free).
    ChildTerminated,
    /// A child failed and its strategy escalated the failure to us.
    ChildFailed { child: AnyActorRef, reason: String },
    /// The backoff before a restart has elapsed (this letter only makes
    /// the mailbox non-empty so that the actor runs again).
    ResumeAfterBackoff,
}

impl SystemMessage {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            SystemMessage::Ignore => "Ignore",
            SystemMessage::PoisonPill => "PoisonPill",
            SystemMessage::Watch { .. } => "Watch",
            SystemMessage::Unwatch { .. } => "Unwatch",
            SystemMessage::ChildTerminated => "ChildTerminated",
            SystemMessage::ChildFailed { .. } => "ChildFailed",
            SystemMessage::ResumeAfterBackoff => "ResumeAfterBackoff",
        }
    }
}
