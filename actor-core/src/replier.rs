//! `Replier`: the reply channel of one ask, as a value that can be handed
//! on (forwarded with the message, kept by a handler that answers later,
//! or completed by a callback) without a task per ask.

use crate::actor_ref::Ask;
use crate::error::AskError;
use crate::remote::reply::RemoteReply;
use std::fmt;
use std::time::Duration;

/// Where the reply to one ask goes: an asker in this process, an asker on
/// another node, or a callback.
///
/// Answer with [`send`](Self::send), or report a failure with
/// [`fail`](Self::fail). A `Replier` dropped without either tells the
/// asker that the actor stopped before replying ([`AskError::Stopped`]),
/// so an ask never waits for its timeout because a reply was forgotten.
///
/// A handler that answers later keeps the `Replier` it is given in
/// [`Handler::handle_with_reply`](crate::Handler::handle_with_reply); a
/// router hands it on with [`ActorRef::forward`](crate::ActorRef::forward).
///
/// ```
/// use troupe_core::{Replier, AskError};
/// use std::time::Duration;
///
/// troupe_core::rt::block_on(async {
///     let (replier, ask) = Replier::<u32>::channel(Duration::from_secs(1));
///     replier.send(7);
///     assert_eq!(ask.await, Ok(7));
///
///     let (replier, ask) = Replier::<u32>::channel(Duration::from_secs(1));
///     drop(replier);
///     assert_eq!(ask.await, Err(AskError::Stopped));
/// });
/// ```
#[must_use = "a dropped Replier answers the asker with AskError::Stopped"]
pub struct Replier<R> {
    to: ReplyTo<R>,
}

/// The kinds of reply channel.
enum ReplyTo<R> {
    /// An asker in this process.
    Local(oneshot::Sender<Result<R, AskError>>),
    /// An asker on another node: the reply is encoded and sent back.
    Remote(RemoteReply<R>),
    /// A callback (routers that translate a reply on its way back).
    Callback(Callback<R>),
}

/// The function a callback reply channel calls.
type CallbackFn<R> = Box<dyn FnOnce(Result<R, AskError>) + Send>;

/// A callback that is called exactly once: with the reply, the failure,
/// or (when dropped) `AskError::Stopped`.
struct Callback<R>(Option<CallbackFn<R>>);

impl<R> Drop for Callback<R> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f(Err(AskError::Stopped));
        }
    }
}

impl<R: Send + 'static> Replier<R> {
    /// A reply channel and the [`Ask`] that waits on it for at most
    /// `timeout`: for code that sends the request itself (a router, a
    /// message that carries its reply channel).
    pub fn channel(timeout: Duration) -> (Replier<R>, Ask<R>) {
        let (tx, rx) = oneshot::channel();
        (
            Replier {
                to: ReplyTo::Local(tx),
            },
            Ask::waiting_local(rx, timeout),
        )
    }

    /// A reply channel that calls `f` once: with the reply, with the error
    /// given to [`fail`](Self::fail), or with `AskError::Stopped` if it is
    /// dropped unanswered. `f` runs on the replying thread: keep it short.
    pub fn from_fn(f: impl FnOnce(Result<R, AskError>) + Send + 'static) -> Self {
        Replier {
            to: ReplyTo::Callback(Callback(Some(Box::new(f)))),
        }
    }

    /// A reply channel for a reply of type `S` that is turned into an `R`
    /// (or an error) on its way back to this one.
    pub fn map_from<S: Send + 'static>(
        self,
        f: impl FnOnce(S) -> Result<R, AskError> + Send + 'static,
    ) -> Replier<S> {
        Replier::from_fn(move |r: Result<S, AskError>| self.complete(r.and_then(f)))
    }
}

impl<R> Replier<R> {
    pub(crate) fn local(tx: oneshot::Sender<Result<R, AskError>>) -> Self {
        Replier {
            to: ReplyTo::Local(tx),
        }
    }

    pub(crate) fn remote(r: RemoteReply<R>) -> Self {
        Replier {
            to: ReplyTo::Remote(r),
        }
    }

    /// Answers the ask. An asker that has given up (timed out) is no
    /// error: the reply is dropped.
    pub fn send(self, reply: R) {
        self.complete(Ok(reply))
    }

    /// Tells the asker why there is no reply.
    pub fn fail(self, error: AskError) {
        self.complete(Err(error))
    }

    /// Answers with a reply or a failure.
    pub fn complete(self, result: Result<R, AskError>) {
        match self.to {
            ReplyTo::Local(tx) => {
                let _ = tx.send(result);
            }
            ReplyTo::Remote(remote) => match result {
                Ok(r) => remote.send(r),
                Err(e) => remote.fail(&e),
            },
            ReplyTo::Callback(mut cb) => {
                if let Some(f) = cb.0.take() {
                    f(result)
                }
            }
        }
    }

    /// True if the asker is on another node.
    pub fn is_remote(&self) -> bool {
        matches!(self.to, ReplyTo::Remote(_))
    }
}

impl<R> fmt::Debug for Replier<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.to {
            ReplyTo::Local(_) => "local",
            ReplyTo::Remote(_) => "remote",
            ReplyTo::Callback(_) => "callback",
        };
        write!(f, "Replier({kind})")
    }
}
