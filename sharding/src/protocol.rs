//! The messages between regions and the coordinator, named as in Akka's
//! `ShardCoordinator.Internal` (an entity's own message travels in the
//! envelope of `shard_envelope.rs`).

use crate::allocation::RegionId;
use crate::extractor::ShardId;
use serde::{Deserialize, Serialize};
use troupe_core::Message;

// ---- region -> coordinator ----

/// A region that hosts shards registers (repeated every `retry-interval`
/// until acknowledged).
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.Register")]
pub(crate) struct Register {
    pub(crate) region: RegionId,
}

/// A proxy-only region registers (it hosts nothing, but must hear of
/// hand-offs).
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.RegisterProxy")]
pub(crate) struct RegisterProxy {
    pub(crate) region: RegionId,
}

/// Where is this shard? (the coordinator allocates it if it has no home)
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.GetShardHome")]
pub(crate) struct GetShardHome {
    pub(crate) shard: ShardId,
    pub(crate) region: RegionId,
}

/// The region started the shard it was told to host.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.ShardStarted")]
pub(crate) struct ShardStarted {
    pub(crate) shard: ShardId,
    pub(crate) region: RegionId,
}

/// The region buffers messages for a shard being handed off.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.BeginHandOffAck")]
pub(crate) struct BeginHandOffAck {
    pub(crate) shard: ShardId,
    pub(crate) region: RegionId,
    /// The `BeginHandOff`'s attempt: an acknowledgement of an earlier,
    /// abandoned attempt vouches for nothing in this one (0: from a node
    /// that does not number attempts, taken for the current one).
    #[serde(default)]
    pub(crate) attempt: u64,
}

/// The shard's entities have all stopped: it can move.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.ShardStopped")]
pub(crate) struct ShardStopped {
    pub(crate) shard: ShardId,
    pub(crate) region: RegionId,
    /// The region holds messages for the shard (those its entities had
    /// not taken yet, and those that came during the hand-off): the new
    /// home must get them before anything sent there directly.
    #[serde(default)]
    pub(crate) holding: bool,
    /// The attempt of the `HandOff` this answers (0: from a node that does
    /// not number attempts, taken for the current one).
    #[serde(default)]
    pub(crate) attempt: u64,
}

/// A region is shutting down: hand off all its shards.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.GracefulShutdownReq")]
pub(crate) struct GracefulShutdownReq {
    pub(crate) region: RegionId,
}

/// A region stopped (after its graceful shutdown).
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.RegionStopped")]
pub(crate) struct RegionStopped {
    pub(crate) region: RegionId,
}

// ---- coordinator -> region ----

/// Registration accepted; with every shard home known.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.RegisterAck")]
pub(crate) struct RegisterAck {
    pub(crate) homes: Vec<(ShardId, RegionId)>,
}

/// The home of a shard.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.ShardHome")]
pub(crate) struct ShardHome {
    pub(crate) shard: ShardId,
    pub(crate) region: RegionId,
}

/// Start hosting this shard.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.HostShard")]
pub(crate) struct HostShard {
    pub(crate) shard: ShardId,
    /// The shard's previous home, which holds messages for it: until they
    /// arrive (`ShardFlushed`), the messages of local senders wait.
    #[serde(default)]
    pub(crate) flush_from: Option<RegionId>,
}

/// Send the messages held for this shard to its new home, then
/// `ShardFlushed` behind them (to the home, which passes it on to the
/// coordinator).
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.FlushShard")]
pub(crate) struct FlushShard {
    pub(crate) shard: ShardId,
    pub(crate) home: RegionId,
}

/// A hand-off of this shard begins: buffer its messages.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.BeginHandOff")]
pub(crate) struct BeginHandOff {
    pub(crate) shard: ShardId,
    /// Which attempt to move the shard this is (never 0; unique to the
    /// coordinator that started it; the acknowledgement carries it back).
    #[serde(default)]
    pub(crate) attempt: u64,
}

/// Stop the shard's entities and report `ShardStopped`.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.HandOff")]
pub(crate) struct HandOff {
    pub(crate) shard: ShardId,
    /// The attempt, for the `ShardStopped` that answers.
    #[serde(default)]
    pub(crate) attempt: u64,
}

// ---- region -> region ----

/// The old home of a shard has sent every message it held for it (this
/// follows them on the same link); the new home passes it on to the
/// coordinator, which then tells the other regions the new home.
#[derive(Debug, Clone, Serialize, Deserialize, Message)]
#[message(name = "troupe.sharding.ShardFlushed")]
pub(crate) struct ShardFlushed {
    pub(crate) shard: ShardId,
    /// The old home.
    pub(crate) region: RegionId,
}
