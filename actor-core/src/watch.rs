//! Death watch: `Terminated` and the reason an actor stopped.

use crate::actor_ref::AnyActorRef;
use crate::message::Message;
use std::fmt;

/// Why an actor stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// It was stopped (by itself, its parent, `stop`, a poison pill or the
    /// system shutting down).
    Stopped,
    /// It failed: a panic its supervisor strategy answered with stop, a
    /// restart limit that was exceeded, or an escalated failure.
    Failed(String),
    /// Its node was lost (remote death watch: the node was found
    /// unreachable, restarted, or quarantined); the actor may or may not
    /// still run there, but it can no longer be reached from here.
    NodeLost(String),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Stopped => f.write_str("stopped"),
            StopReason::Failed(why) => write!(f, "failed: {why}"),
            StopReason::NodeLost(why) => write!(f, "its node was lost: {why}"),
        }
    }
}

/// Sent to every watcher of an actor once that actor has stopped, for any
/// reason, also when it had already stopped at the time of `watch`.
///
/// Watching needs a handler for it:
///
/// ```
/// use troupe_core::prelude::*;
///
/// struct Watcher;
/// impl Actor for Watcher {}
///
/// #[handlers]
/// impl Watcher {
///     async fn on_terminated(&mut self, t: Terminated, _ctx: &mut Context<Self>) {
///         tracing::info!("{} is gone: {}", t.actor, t.reason);
///     }
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Terminated {
    /// The actor that stopped.
    pub actor: AnyActorRef,
    /// Why it stopped.
    pub reason: StopReason,
}

impl Message for Terminated {
    type Reply = ();
    fn manifest() -> &'static str {
        "troupe::Terminated"
    }
}

/// Delivered to an actor that set a receive timeout and received nothing
/// for that long (see [`Context::set_receive_timeout`](crate::Context::set_receive_timeout)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveTimeout;

impl Message for ReceiveTimeout {
    type Reply = ();
    fn manifest() -> &'static str {
        "troupe::ReceiveTimeout"
    }
}
