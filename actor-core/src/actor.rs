//! The `Actor` and `Handler` traits.

use crate::context::Context;
use crate::message::Message;
use std::future::Future;

/// An actor: state that handles messages one at a time.
///
/// All hooks are optional. They run inside the actor, with its context, and
/// may await.
///
/// ```
/// use troupe_core::prelude::*;
///
/// struct Greeter { greeted: u32 }
///
/// impl Actor for Greeter {
///     async fn started(&mut self, ctx: &mut Context<Self>) {
///         tracing::info!("{} is ready", ctx.myself());
///     }
/// }
/// ```
pub trait Actor: Sized + Send + 'static {
    /// Runs before the first message, and again after every restart on the
    /// fresh instance.
    fn started(&mut self, ctx: &mut Context<Self>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }

    /// Runs when the actor begins to stop, while its children still run.
    fn stopping(&mut self, ctx: &mut Context<Self>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }

    /// Runs last, after every child has stopped; also runs on the failed
    /// instance before a restart.
    fn stopped(&mut self, ctx: &mut Context<Self>) -> impl Future<Output = ()> + Send {
        let _ = ctx;
        async {}
    }
}

/// Handling of one message type. Write it by hand, or let `#[handlers]`
/// write it from an `async fn` per message.
///
/// ```
/// use troupe_core::prelude::*;
///
/// #[derive(Message)]
/// #[message(reply = u64)]
/// struct Add(u64);
///
/// struct Sum(u64);
/// impl Actor for Sum {}
///
/// impl Handler<Add> for Sum {
///     async fn handle(&mut self, msg: Add, _ctx: &mut Context<Self>) -> u64 {
///         self.0 += msg.0;
///         self.0
///     }
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "actor `{Self}` does not handle `{M}`",
    label = "`{Self}` has no handler for `{M}`",
    note = "add an `async fn` taking `{M}` to a `#[handlers]` impl block of `{Self}`, or implement `Handler<{M}>`"
)]
pub trait Handler<M: Message>: Actor {
    /// Handles one message; the returned value is the reply to an `ask`.
    fn handle(&mut self, msg: M, ctx: &mut Context<Self>) -> impl Future<Output = M::Reply> + Send;
}
