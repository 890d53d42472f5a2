//! Errors of cluster sharding.

use std::fmt;
use troupe_core::RegisterError;

/// Why sharding could not start an entity type, or answer a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardingError {
    /// A message of the entity type could not be registered for remoting.
    Register(RegisterError),
    /// Another entity type already uses this type name on this node.
    DuplicateTypeName(&'static str),
    /// The entity type is already started (or proxied) on this node.
    AlreadyStarted(&'static str),
    /// The entity type was not started on this node (`start` or
    /// `start_proxy` first).
    NotStarted(String),
    /// A setting is invalid; names the key.
    Settings(String),
    /// The cluster or distributed data could not be used.
    Cluster(String),
    /// An actor of the sharding runtime could not be spawned.
    Spawn(String),
    /// A query did not complete in time.
    Timeout,
}

impl fmt::Display for ShardingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardingError::Register(e) => write!(f, "{e}"),
            ShardingError::DuplicateTypeName(n) => write!(
                f,
                "another entity type is already started under the name `{n}`: give one of them \
                 `#[entity(name = \"...\")]`"
            ),
            ShardingError::AlreadyStarted(n) => {
                write!(f, "entity type `{n}` is already started on this node")
            }
            ShardingError::NotStarted(n) => write!(
                f,
                "entity type `{n}` is not started on this node: call `ClusterSharding::start` or \
                 `start_proxy` first"
            ),
            ShardingError::Settings(why) => write!(f, "invalid sharding settings: {why}"),
            ShardingError::Cluster(why) => write!(f, "{why}"),
            ShardingError::Spawn(why) => write!(f, "cannot start the sharding actors: {why}"),
            ShardingError::Timeout => f.write_str("no answer in time"),
        }
    }
}

impl std::error::Error for ShardingError {}

/// Why a message to an entity was refused. The message is handed back.
pub enum ShardingTellError<M> {
    /// The region's buffer for shards whose home is not known yet is full
    /// (`buffer-size`); the message was not accepted.
    BufferFull(M),
    /// The entity type's region on this node has stopped (the node is
    /// shutting down).
    RegionStopped(M),
    /// The message cannot be sent to the node that hosts the entity (it
    /// does not encode, or is larger than the frame limit).
    NotSendable(M, String),
    /// The queue of messages to the node that hosts the entity is full:
    /// the sender is faster than the network (slow down and retry).
    NodeQueueFull(M),
}

impl<M> ShardingTellError<M> {
    /// The message that was not sent.
    pub fn into_message(self) -> M {
        match self {
            ShardingTellError::BufferFull(m)
            | ShardingTellError::RegionStopped(m)
            | ShardingTellError::NotSendable(m, _)
            | ShardingTellError::NodeQueueFull(m) => m,
        }
    }
}

impl<M> fmt::Debug for ShardingTellError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardingTellError::BufferFull(_) => f.write_str("ShardingTellError::BufferFull(..)"),
            ShardingTellError::RegionStopped(_) => {
                f.write_str("ShardingTellError::RegionStopped(..)")
            }
            ShardingTellError::NotSendable(_, why) => {
                write!(f, "ShardingTellError::NotSendable(.., {why:?})")
            }
            ShardingTellError::NodeQueueFull(_) => {
                f.write_str("ShardingTellError::NodeQueueFull(..)")
            }
        }
    }
}

impl<M> fmt::Display for ShardingTellError<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShardingTellError::BufferFull(_) => f.write_str(
                "the shard region's buffer is full (buffer-size): the message was not accepted",
            ),
            ShardingTellError::RegionStopped(_) => f.write_str("the shard region has stopped"),
            ShardingTellError::NotSendable(_, why) => {
                write!(f, "cannot send to the entity's node: {why}")
            }
            ShardingTellError::NodeQueueFull(_) => {
                f.write_str("the queue of messages to the entity's node is full")
            }
        }
    }
}

impl<M> std::error::Error for ShardingTellError<M> {}
