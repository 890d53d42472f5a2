//! Errors of the actor runtime.

use std::fmt;
use std::time::Duration;

/// Why a `tell` was refused. The message is handed back.
pub enum TellError<M> {
    /// The actor has stopped; the message was recorded as a dead letter.
    Stopped(M),
    /// The actor's bounded mailbox is full, or for a remote actor the
    /// queue to its node is (see `ActorRef::send` to wait for room instead).
    MailboxFull(M),
    /// The actor is remote and the message cannot be sent there: its type
    /// is not registered (`ActorSystem::register`), it does not encode, it
    /// is larger than the frame limit, the node is quarantined, or this
    /// system's remoting is shut down.
    NotSendable(M, String),
}

impl<M> TellError<M> {
    /// The message that was not delivered.
    pub fn into_message(self) -> M {
        match self {
            TellError::Stopped(m) | TellError::MailboxFull(m) | TellError::NotSendable(m, _) => m,
        }
    }
}

impl<M> fmt::Debug for TellError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TellError::Stopped(_) => f.write_str("TellError::Stopped(..)"),
            TellError::MailboxFull(_) => f.write_str("TellError::MailboxFull(..)"),
            TellError::NotSendable(_, why) => write!(f, "TellError::NotSendable(.., {why:?})"),
        }
    }
}

impl<M> fmt::Display for TellError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TellError::Stopped(_) => {
                f.write_str("the actor has stopped; the message went to dead letters")
            }
            TellError::MailboxFull(_) => {
                f.write_str("the actor's bounded mailbox (or the queue to its node) is full")
            }
            TellError::NotSendable(_, why) => write!(f, "cannot send to the remote actor: {why}"),
        }
    }
}

impl<M> std::error::Error for TellError<M> {}

/// Why an `ask` returned no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskError {
    /// No reply came within the timeout.
    Timeout(Duration),
    /// The actor stopped (or was already stopped, or failed while handling
    /// the message) before replying.
    Stopped,
    /// The actor's bounded mailbox (or the queue to its node) is full.
    MailboxFull,
    /// The actor is remote and the message cannot be sent there (see
    /// [`TellError::NotSendable`]).
    NotSendable(String),
    /// The actor is remote and its node was lost (quarantined or
    /// unreachable) before it replied, or it could not reply.
    Remote(String),
}

impl fmt::Display for AskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskError::Timeout(d) => write!(f, "no reply within {d:?}"),
            AskError::Stopped => f.write_str("the actor stopped before replying"),
            AskError::MailboxFull => {
                f.write_str("the actor's bounded mailbox (or the queue to its node) is full")
            }
            AskError::NotSendable(why) => write!(f, "cannot send to the remote actor: {why}"),
            AskError::Remote(why) => write!(f, "remote ask failed: {why}"),
        }
    }
}

impl std::error::Error for AskError {}

/// Why an actor could not be spawned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnError {
    /// A sibling already has this name.
    NameTaken(String),
    /// The name is empty, starts with `$` (reserved for generated names) or
    /// holds a character that is not allowed in a path.
    InvalidName(String),
    /// The parent is stopping or stopped (or the system is shutting down).
    ParentStopped,
    /// The factory panicked while creating the actor.
    FactoryPanicked(String),
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::NameTaken(n) => write!(f, "an actor named `{n}` already exists under this parent"),
            SpawnError::InvalidName(n) => write!(
                f,
                "invalid actor name `{n}`: use letters, digits and -_.*+:@&=,!~'; and do not start with `$`"
            ),
            SpawnError::ParentStopped => f.write_str("the parent actor is stopping or the system is shutting down"),
            SpawnError::FactoryPanicked(m) => write!(f, "the actor factory panicked: {m}"),
        }
    }
}

impl std::error::Error for SpawnError {}

/// Why an actor system could not be created.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SystemError {
    /// The system name is not valid.
    InvalidName(String),
    /// A setting is out of range.
    InvalidSetting(String),
    /// Remoting could not start (e.g. the port could not be bound).
    Remoting(String),
}

impl fmt::Display for SystemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SystemError::InvalidName(n) => write!(
                f,
                "invalid actor system name `{n}`: use ASCII letters, digits, `-` and `_`, starting with a letter or digit"
            ),
            SystemError::InvalidSetting(m) => write!(f, "invalid setting: {m}"),
            SystemError::Remoting(m) => write!(f, "remoting could not start: {m}"),
        }
    }
}

impl std::error::Error for SystemError {}

/// Why [`ActorSystem::set_shutdown_sequence`](crate::ActorSystem::set_shutdown_sequence)
/// refused a sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShutdownSequenceError {
    /// The system has a shutdown sequence already.
    AlreadySet,
    /// The system has terminated.
    AlreadyTerminated,
}

impl fmt::Display for ShutdownSequenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShutdownSequenceError::AlreadySet => {
                f.write_str("the actor system has a shutdown sequence already")
            }
            ShutdownSequenceError::AlreadyTerminated => {
                f.write_str("the actor system has terminated")
            }
        }
    }
}

impl std::error::Error for ShutdownSequenceError {}
