//! # Troupe core: typed actors on async-std
//!
//! An actor is a type that implements [`Actor`] and one [`Handler`] per
//! message type it accepts. Messages declare their reply type with
//! `#[derive(Message)]`; `#[handlers]` turns an impl block of `async fn`s
//! into handlers. Actors live in an [`ActorSystem`], are reached through
//! typed [`ActorRef`]s, form a hierarchy with paths, are supervised
//! (restart, resume, stop, escalate, with backoff), can watch each other,
//! and stop in order at shutdown.
//!
//! ```
//! use troupe_core::prelude::*;
//!
//! #[derive(Message)]
//! #[message(reply = u64)]
//! struct Increment { by: u64 }
//!
//! #[derive(Default)]
//! struct Counter { value: u64 }
//! impl Actor for Counter {}
//!
//! #[handlers]
//! impl Counter {
//!     async fn increment(&mut self, msg: Increment, _ctx: &mut Context<Self>) -> u64 {
//!         self.value += msg.by;
//!         self.value
//!     }
//! }
//!
//! troupe_core::rt::block_on(async {
//!     let system = ActorSystem::new("demo").unwrap();
//!     let counter = system.spawn(Counter::default());
//!     counter.tell(Increment { by: 1 }).unwrap();
//!     assert_eq!(counter.ask(Increment { by: 1 }).await.unwrap(), 2);
//!     system.shutdown().await;
//! });
//! ```
//!
//! An idle actor is not a task: its cell holds a lock-free mailbox and its
//! parked state, and it is scheduled on the dispatcher (Troupe's worker
//! threads) only while it has messages (see the `cell` module's notes).

// Lets the derive macros' `::troupe_core` paths work inside this crate too.
#[allow(unused_extern_crates)]
extern crate self as troupe_core;

mod actor;
mod actor_ref;
mod ask_timeouts;
mod cell;
mod codec;
mod context;
mod dead_letters;
mod deferred_activations;
mod dispatcher;
mod error;
mod heap_future;
mod letter;
mod letter_pool;
mod log_limit;
mod mailbox;
mod message;
mod path;
mod props;
pub mod remote;
mod replier;
pub mod rt;
mod supervision;
mod sync;
mod system;
mod system_message;
mod timers;
mod watch;

pub use actor::{Actor, Handler};
pub use actor_ref::{ActorRef, AnyActorRef, Ask, ForwardError};
pub use codec::{
    CodecError, DeliverError, EncodedDelivery, EncodedMessage, EncodedReply, InboundMessage,
    RegisterError, SendEncodedError,
};
pub use context::Context;
pub use dead_letters::DeadLetter;
pub use deferred_activations::DeferActivations;
pub use error::{AskError, ShutdownSequenceError, SpawnError, SystemError, TellError};
pub use log_limit::LogLimit;
pub use message::Message;
pub use path::ActorPath;
pub use props::{MailboxConfig, NamedFactory, Props};
pub use replier::Replier;
pub use supervision::{Backoff, RestartPolicy, SupervisorStrategy};
pub use system::{
    ActorSystem, ActorSystemBuilder, DeadLetterSubscription, ResolveError, SystemSettings,
};
pub use troupe_macros::{handlers, Message};
pub use watch::{ReceiveTimeout, StopReason, Terminated};

#[doc(hidden)]
pub mod __private {
    pub use crate::message::{reply_from, ReplyIs};
}

/// Everything needed to write actors: `use troupe_core::prelude::*;`.
pub mod prelude {
    pub use crate::{
        handlers, Actor, ActorRef, ActorSystem, AnyActorRef, Context, Handler, Message,
        ReceiveTimeout, StopReason, Terminated,
    };
}
