//! The `Actor` and `Handler` traits.

use crate::context::Context;
use crate::message::Message;
use crate::replier::Replier;
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

    /// Handles one message with its reply channel (`None` for a `tell`):
    /// what the runtime calls. By default it runs [`handle`](Self::handle)
    /// and sends its value as the reply.
    ///
    /// Override it to answer later or elsewhere: keep the [`Replier`] (in
    /// the actor's state, or inside a message to another actor) and answer
    /// through it when the answer is known. `handle` is then only called
    /// by code that calls it directly.
    ///
    /// ```
    /// use std::time::Duration;
    /// use troupe_core::prelude::*;
    /// use troupe_core::Replier;
    ///
    /// #[derive(Message)]
    /// #[message(reply = u64)]
    /// struct NextTicket;
    ///
    /// #[derive(Message)]
    /// struct Open;
    ///
    /// /// Answers `NextTicket` only once the counter is open.
    /// #[derive(Default)]
    /// struct Counter { open: bool, next: u64, waiting: Vec<Replier<u64>> }
    /// impl Actor for Counter {}
    ///
    /// impl Handler<NextTicket> for Counter {
    ///     async fn handle(&mut self, _: NextTicket, _ctx: &mut Context<Self>) -> u64 {
    ///         self.next += 1;
    ///         self.next
    ///     }
    ///     async fn handle_with_reply(
    ///         &mut self,
    ///         msg: NextTicket,
    ///         reply: Option<Replier<u64>>,
    ///         ctx: &mut Context<Self>,
    ///     ) {
    ///         match reply {
    ///             Some(r) if !self.open => self.waiting.push(r),
    ///             Some(r) => r.send(self.handle(msg, ctx).await),
    ///             None => {}
    ///         }
    ///     }
    /// }
    ///
    /// #[handlers]
    /// impl Counter {
    ///     async fn open(&mut self, _: Open) {
    ///         self.open = true;
    ///         for r in std::mem::take(&mut self.waiting) {
    ///             self.next += 1;
    ///             r.send(self.next);
    ///         }
    ///     }
    /// }
    ///
    /// troupe_core::rt::block_on(async {
    ///     let system = ActorSystem::new("doc").unwrap();
    ///     let counter = system.spawn(Counter::default());
    ///     let ticket = counter.ask_timeout(NextTicket, Duration::from_secs(5));
    ///     counter.tell(Open).unwrap();
    ///     assert_eq!(ticket.await.unwrap(), 1);
    ///     system.shutdown().await;
    /// });
    /// ```
    fn handle_with_reply(
        &mut self,
        msg: M,
        reply: Option<Replier<M::Reply>>,
        ctx: &mut Context<Self>,
    ) -> impl Future<Output = ()> + Send {
        async move {
            let out = self.handle(msg, ctx).await;
            let mut reply = reply;
            if ctx.take_stashed_current() {
                // The handler stashed its message: the stashed copy answers.
                ctx.attach_reply_to_last_stashed(&mut reply);
            } else if let Some(reply) = reply {
                reply.send(out);
            }
        }
    }
}
