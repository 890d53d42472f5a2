//! The messages cluster nodes exchange (all on the control connection, so
//! that no ordinary traffic delays them). Their manifests are fixed names:
//! they are part of the wire protocol.

use crate::gossip::Gossip;
use crate::member::UniqueAddress;
use crate::vclock::VectorClock;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use troupe_core::Message;

/// "Are you part of a cluster?" — sent by a joining node to every seed.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(reply = InitJoinReply, name = "troupe.cluster.InitJoin")]
pub(crate) struct InitJoin {
    pub(crate) from: UniqueAddress,
}

/// The answer to [`InitJoin`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum InitJoinReply {
    /// Yes: join me.
    Ack(UniqueAddress),
    /// Not (yet) a member of a cluster.
    Nack,
}

/// Asks to join the cluster the receiver is a member of.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(reply = JoinReply, name = "troupe.cluster.Join")]
pub(crate) struct Join {
    pub(crate) node: UniqueAddress,
    pub(crate) roles: BTreeSet<String>,
}

/// The answer to [`Join`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum JoinReply {
    /// Joined: the current state, with the new member in it.
    Welcome(Box<Gossip>),
    /// Not now (e.g. an old incarnation is being removed first); try again.
    Retry(String),
    /// Never (e.g. this incarnation was removed).
    Refused(String),
}

/// The full state, pushed to a node that has not seen it.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "troupe.cluster.GossipEnvelope")]
pub(crate) struct GossipEnvelope {
    pub(crate) from: UniqueAddress,
    pub(crate) to: UniqueAddress,
    pub(crate) gossip: Box<Gossip>,
}

/// Only the version, to a node that has seen the state (the receiver
/// answers with the full state if its own is newer or concurrent).
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "troupe.cluster.GossipStatus")]
pub(crate) struct GossipStatus {
    pub(crate) from: UniqueAddress,
    pub(crate) version: VectorClock,
    /// Digest of the sender's seen set.
    pub(crate) seen_digest: u64,
}

/// A failure-detector heartbeat.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "troupe.cluster.Heartbeat")]
pub(crate) struct Heartbeat {
    pub(crate) from: UniqueAddress,
    pub(crate) seq: u64,
}

/// The answer to a [`Heartbeat`], which feeds the sender's detector.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "troupe.cluster.HeartbeatRsp")]
pub(crate) struct HeartbeatRsp {
    pub(crate) from: UniqueAddress,
    pub(crate) seq: u64,
}

/// An Exiting member confirms it has seen that it is Exiting, so the
/// leader may remove it.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "troupe.cluster.ExitingConfirmed")]
pub(crate) struct ExitingConfirmed {
    pub(crate) node: UniqueAddress,
}
