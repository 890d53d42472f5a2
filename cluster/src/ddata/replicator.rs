//! The replicator: one actor per node (`/system/ddata-replicator`, one per
//! actor system, kept as a system extension) that keeps a replica of every
//! key, applies updates, replicates them with the asked consistency (local,
//! majority, majority plus, all), answers reads from other
//! replicas, spreads everything by anti-entropy gossip, notifies
//! subscribers, and keeps durable keys on disk. It follows Akka's
//! `Replicator`, with full-state replication.

use super::durable::{Committed, DurableStore, DurableWriter, StoredValue};
use super::pruning::{
    add_seen, decode_marks, encode_marks, is_obsolete, merge_pruning, Pruning, PruningState,
};
use super::types::{erase, Erased, TypeRegistry};
use super::ReplicatedData;
use crate::cluster::{Cluster, ClusterError};
use crate::member::{fnv1a, MemberStatus, UniqueAddress};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use troupe_core::prelude::*;
use troupe_core::{rt, Props, Replier};

const NAME: &str = "ddata-replicator";

/// The name and type of a replicated value.
pub struct Key<T> {
    name: String,
    _t: PhantomData<fn() -> T>,
}

impl<T> Key<T> {
    /// A key named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Key {
            name: name.into(),
            _t: PhantomData,
        }
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<T> Clone for Key<T> {
    fn clone(&self) -> Self {
        Key::new(self.name.clone())
    }
}

impl<T> fmt::Debug for Key<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.name)
    }
}

/// How many replicas must have a write before it counts as done (this
/// node's included). Akka's `WriteLocal`, `WriteMajority`,
/// `WriteMajorityPlus` and `WriteAll`.
///
/// The replicas are the Up and WeaklyUp members (of the replicator's
/// role); Leaving and Exiting members are not asked, as they are about to
/// go. A write that does not reach its consistency in time is still
/// applied here and spreads by gossip.
///
/// ```
/// use std::time::Duration;
/// use troupe_cluster::ddata::WriteConsistency;
///
/// // Pekko's sharding coordinator writes its state to a majority plus 3.
/// let w = WriteConsistency::MajorityPlus { additional: 3, timeout: Duration::from_secs(5) };
/// assert_eq!(w.replicas_needed(10, 0), 9); // 10 / 2 + 1 + 3
/// assert_eq!(w.replicas_needed(5, 0), 5); // never more than all
/// assert_eq!(w.timeout(), Some(Duration::from_secs(5)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteConsistency {
    /// This node only; gossip spreads it.
    Local,
    /// A majority of the replicas (at least `majority_min_cap`).
    Majority {
        /// Give up (the write stays local and spreads by gossip) after this.
        timeout: Duration,
    },
    /// A majority of the replicas and `additional` more (Akka's
    /// `WriteMajorityPlus`): at most all of them, and at least
    /// `majority_min_cap`. Paired with [`ReadConsistency::MajorityPlus`],
    /// a read still sees the write while the membership changes by a few
    /// nodes between the two. `additional: usize::MAX` is all replicas.
    MajorityPlus {
        /// How many replicas beyond the majority.
        additional: usize,
        /// Give up (the write stays local and spreads by gossip) after this.
        timeout: Duration,
    },
    /// Every replica.
    All {
        /// Give up after this.
        timeout: Duration,
    },
}

impl WriteConsistency {
    /// How many of `number_of_nodes` replicas (this node included) must
    /// have the write, with the replicator's `majority_min_cap`. Pekko's
    /// `ReadWriteAggregator.calculateMajority` for the majorities.
    pub fn replicas_needed(&self, number_of_nodes: usize, majority_min_cap: usize) -> usize {
        match *self {
            WriteConsistency::Local => number_of_nodes.min(1),
            WriteConsistency::Majority { .. } => {
                calculate_majority(majority_min_cap, number_of_nodes, 0)
            }
            WriteConsistency::MajorityPlus { additional, .. } => {
                calculate_majority(majority_min_cap, number_of_nodes, additional)
            }
            WriteConsistency::All { .. } => number_of_nodes,
        }
    }

    /// How long the write waits for the other replicas (`None` for
    /// `Local`).
    pub fn timeout(&self) -> Option<Duration> {
        match *self {
            WriteConsistency::Local => None,
            WriteConsistency::Majority { timeout }
            | WriteConsistency::MajorityPlus { timeout, .. }
            | WriteConsistency::All { timeout } => Some(timeout),
        }
    }
}

/// How many replicas a read consults (this node's included). Akka's
/// `ReadLocal`, `ReadMajority`, `ReadMajorityPlus` and `ReadAll`.
///
/// A read with `Majority` after a write with `Majority` (or `MajorityPlus`
/// after `MajorityPlus`, or any pair whose counts add up to more than the
/// replicas) sees the write, from any node.
///
/// ```
/// use std::time::Duration;
/// use troupe_cluster::ddata::ReadConsistency;
///
/// // Pekko's sharding coordinator reads its state from a majority plus 5.
/// let r = ReadConsistency::MajorityPlus { additional: 5, timeout: Duration::from_secs(5) };
/// assert_eq!(r.replicas_needed(20, 0), 16); // 20 / 2 + 1 + 5
/// assert_eq!(ReadConsistency::Local.replicas_needed(20, 0), 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadConsistency {
    /// This node only.
    Local,
    /// A majority of the replicas (at least `majority_min_cap`).
    Majority {
        /// Give up after this.
        timeout: Duration,
    },
    /// A majority of the replicas and `additional` more (Akka's
    /// `ReadMajorityPlus`): at most all of them, and at least
    /// `majority_min_cap`. `additional: usize::MAX` is all replicas.
    MajorityPlus {
        /// How many replicas beyond the majority.
        additional: usize,
        /// Give up after this.
        timeout: Duration,
    },
    /// Every replica.
    All {
        /// Give up after this.
        timeout: Duration,
    },
}

impl ReadConsistency {
    /// How many of `number_of_nodes` replicas (this node included) must
    /// answer the read, with the replicator's `majority_min_cap`. Pekko's
    /// `ReadWriteAggregator.calculateMajority` for the majorities.
    pub fn replicas_needed(&self, number_of_nodes: usize, majority_min_cap: usize) -> usize {
        match *self {
            ReadConsistency::Local => number_of_nodes.min(1),
            ReadConsistency::Majority { .. } => {
                calculate_majority(majority_min_cap, number_of_nodes, 0)
            }
            ReadConsistency::MajorityPlus { additional, .. } => {
                calculate_majority(majority_min_cap, number_of_nodes, additional)
            }
            ReadConsistency::All { .. } => number_of_nodes,
        }
    }

    /// How long the read waits for the other replicas (`None` for
    /// `Local`).
    pub fn timeout(&self) -> Option<Duration> {
        match *self {
            ReadConsistency::Local => None,
            ReadConsistency::Majority { timeout }
            | ReadConsistency::MajorityPlus { timeout, .. }
            | ReadConsistency::All { timeout } => Some(timeout),
        }
    }
}

/// Pekko's `ReadWriteAggregator.calculateMajority`: a majority of
/// `number_of_nodes` plus `additional`, at least `min_cap`, at most all.
fn calculate_majority(min_cap: usize, number_of_nodes: usize, additional: usize) -> usize {
    let majority = number_of_nodes / 2 + 1;
    number_of_nodes.min(majority.saturating_add(additional).max(min_cap))
}

/// Why an update, delete or read did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataError {
    /// The consistency was not reached in time. For a write, the value is
    /// still applied locally and spreads by gossip.
    Timeout(String),
    /// The key was deleted; it cannot be used again.
    Deleted(String),
    /// The data type has no registered name (see `register_type`).
    TypeNotRegistered(&'static str),
    /// The value stored under the key has another type.
    WrongType(String),
    /// The replicator has stopped.
    Stopped,
    /// A durable key's change could not be committed to this node's
    /// durable store (the message says why). The change is applied in
    /// memory, and replicated as asked, but is not on this node's disk; an
    /// update that is tried again writes the whole value again.
    Store(String),
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Timeout(m) => write!(f, "consistency not reached: {m}"),
            DataError::Deleted(k) => write!(f, "key `{k}` was deleted"),
            DataError::TypeNotRegistered(t) => write!(
                f,
                "data type `{t}` is not registered: call Replicator::register_type on every node"
            ),
            DataError::WrongType(m) => f.write_str(m),
            DataError::Stopped => f.write_str("the replicator has stopped"),
            DataError::Store(m) => write!(f, "not stored durably: {m}"),
        }
    }
}

impl std::error::Error for DataError {}

/// Settings of the replicator (Akka's defaults where it has them).
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicatorSettings {
    /// Replicas only on members with this role.
    pub role: Option<String>,
    /// Anti-entropy gossip interval. Default 2 s.
    pub gossip_interval: Duration,
    /// Majority reads and writes involve at least this many replicas (or
    /// all, if fewer exist). Default 0 (a plain majority).
    pub majority_min_cap: usize,
    /// Keys also kept on disk: exact names, or prefixes ending in `*`.
    pub durable_keys: Vec<String>,
    /// The durable store file. Default `ddata/replicator.redb` (use one per
    /// node).
    pub durable_store: PathBuf,
    /// How often removed-node pruning makes progress. Default 120 s.
    pub pruning_interval: Duration,
    /// How long a removed node's last changes are given to spread before
    /// its pruning starts. Default 60 s.
    pub max_pruning_dissemination: Duration,
    /// How long a performed pruning is remembered; meanwhile a replica
    /// that still holds the removed node's changes has them dropped when
    /// merged, so they are never counted twice. Default 6 h.
    pub pruning_marker_time_to_live: Duration,
    /// The same for durable keys, which can come back from disk much
    /// later. Default 10 days.
    pub durable_pruning_marker_time_to_live: Duration,
}

impl Default for ReplicatorSettings {
    fn default() -> Self {
        ReplicatorSettings {
            role: None,
            gossip_interval: Duration::from_secs(2),
            majority_min_cap: 0,
            durable_keys: Vec::new(),
            durable_store: PathBuf::from("ddata/replicator.redb"),
            pruning_interval: Duration::from_secs(120),
            max_pruning_dissemination: Duration::from_secs(60),
            pruning_marker_time_to_live: Duration::from_secs(6 * 3600),
            durable_pruning_marker_time_to_live: Duration::from_secs(10 * 24 * 3600),
        }
    }
}

/// A key's state on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum WireEntry {
    Data {
        type_name: String,
        #[serde(with = "serde_bytes")]
        bytes: Vec<u8>,
        /// Removed-node pruning markers. Left out when there are none, so
        /// that nodes without pruning still read the entry.
        #[serde(
            default,
            with = "crate::ddata::crdt::pairs",
            skip_serializing_if = "BTreeMap::is_empty"
        )]
        pruning: Pruning,
    },
    Deleted,
}

/// A write from another replica.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(reply = bool, name = "troupe.ddata.Write")]
pub(crate) struct DWrite {
    key: String,
    entry: WireEntry,
}

/// A read from another replica.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(reply = Option<WireEntry>, name = "troupe.ddata.Read")]
pub(crate) struct DRead {
    key: String,
}

/// Anti-entropy: the sender's digests.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(name = "troupe.ddata.Status")]
pub(crate) struct DStatus {
    from: String,
    digests: Vec<(String, u64)>,
    is_reply: bool,
}

/// Anti-entropy: entries the receiver lacks or has differently.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(name = "troupe.ddata.Gossip")]
pub(crate) struct DGossip {
    entries: Vec<(String, WireEntry)>,
}

enum Value {
    Data(Box<dyn Erased>),
    Deleted,
    /// Loaded from disk with a type not registered yet (its bytes are the
    /// entry's `encoded`).
    Raw {
        type_name: String,
    },
}

struct Entry {
    value: Value,
    /// The value encoded (empty when deleted), made once per change and
    /// used for the digests, the wire and the durable store.
    encoded: Arc<[u8]>,
    pruning: Pruning,
    /// Of the value alone: tells a change of the marks from one of the data.
    data_digest: u64,
    /// Of the value and the marks: what anti-entropy compares.
    digest: u64,
}

const DELETED_DIGEST: u64 = u64::MAX;

impl Entry {
    /// An entry for `value`, which is encoded here.
    fn new(value: Value, pruning: Pruning) -> Self {
        let encoded: Arc<[u8]> = match &value {
            Value::Data(d) => d.encode().into(),
            // Raw entries are made by `Entry::encoded`.
            Value::Raw { .. } | Value::Deleted => Arc::from(&[][..]),
        };
        Entry::encoded(value, encoded, pruning)
    }

    /// An entry for `value`, already encoded as `encoded`.
    fn encoded(value: Value, encoded: Arc<[u8]>, pruning: Pruning) -> Self {
        let (data_digest, digest) = match &value {
            Value::Data(_) => {
                let data_digest = fnv1a(encoded.iter().copied());
                // The marks count in the digest: their progress must spread.
                let digest = if pruning.is_empty() {
                    data_digest
                } else {
                    fnv1a(encoded.iter().copied().chain(encode_marks(&pruning)))
                };
                (data_digest, digest)
            }
            Value::Raw { .. } => {
                let d = fnv1a(encoded.iter().copied());
                (d, d)
            }
            Value::Deleted => (DELETED_DIGEST, DELETED_DIGEST),
        };
        Entry {
            value,
            encoded,
            pruning,
            data_digest,
            digest,
        }
    }

    /// The same value with other pruning marks (no new encoding).
    fn with_pruning(self, pruning: Pruning) -> Self {
        Entry::encoded(self.value, self.encoded, pruning)
    }

    fn type_name(&self) -> Option<&str> {
        match &self.value {
            Value::Data(d) => Some(d.type_name()),
            Value::Raw { type_name } => Some(type_name),
            Value::Deleted => None,
        }
    }

    fn to_wire(&self) -> WireEntry {
        match self.type_name() {
            Some(type_name) => WireEntry::Data {
                type_name: type_name.to_string(),
                bytes: self.encoded.to_vec(),
                pruning: self.pruning.clone(),
            },
            None => WireEntry::Deleted,
        }
    }

    /// What the durable store keeps of it (`None`: a deleted key).
    fn to_stored(&self) -> Option<StoredValue> {
        self.type_name().map(|type_name| StoredValue {
            type_name: type_name.to_string(),
            bytes: self.encoded.clone(),
            pruning: encode_marks(&self.pruning),
        })
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `d` without the changes of nodes whose pruning has been performed, or
/// `None` if it holds none of them (the common case: no copy is made).
fn cleaned(d: &dyn Erased, pruning: &Pruning) -> Option<Box<dyn Erased>> {
    let mut out: Option<Box<dyn Erased>> = None;
    for (removed, state) in pruning {
        if matches!(state, PruningState::Performed { .. }) {
            let current = out.as_deref().unwrap_or(d);
            if current.need_pruning_from(removed) {
                out = Some(current.cleaned(removed));
            }
        }
    }
    out
}

type Notify = Box<dyn Fn(&dyn Erased) -> bool + Send>;

/// The replicator actor.
pub struct ReplicatorActor {
    self_node: UniqueAddress,
    settings: ReplicatorSettings,
    types: Arc<TypeRegistry>,
    entries: HashMap<String, Entry>,
    subscribers: HashMap<String, Vec<Notify>>,
    /// The other replicas.
    replicas: Vec<ActorRef<ReplicatorActor>>,
    /// The writer of the durable keys (a thread of its own).
    durable: Option<DurableWriter>,
    /// Every node with a replica, this one included (Up, WeaklyUp,
    /// Leaving and Exiting members of the role): all must see a pruning
    /// mark before it is performed.
    nodes: BTreeSet<UniqueAddress>,
    /// Every member, whatever its status.
    present: BTreeSet<UniqueAddress>,
    /// Nodes removed from the cluster, and the reachable clock when this
    /// node learnt it.
    removed: BTreeMap<UniqueAddress, Duration>,
    /// Time spent with every member reachable (Akka's
    /// `allReachableClockTime`): a removed node's changes get
    /// `max_pruning_dissemination` of it to spread before pruning starts.
    reachable_clock: Duration,
    clock_read_at: Instant,
    /// This node leads the replicas (starts pruning).
    is_leader: bool,
    /// No member is unreachable (pruning makes progress only then).
    all_reachable: bool,
}

/// A local update: the function that makes the new value.
/// It takes the current value out of its slot (no copy is made) unless it
/// fails, which leaves the slot as it was.
type Apply =
    Box<dyn FnOnce(&mut Option<Box<dyn Erased>>) -> Result<Box<dyn Erased>, DataError> + Send>;

#[derive(Message)]
#[message(reply = Result<Plan, DataError>)]
struct Update {
    key: String,
    apply: Apply,
}

#[derive(Message)]
#[message(reply = Result<Plan, DataError>)]
struct Delete {
    key: String,
}

/// What the caller must do to reach its consistency: write (or read) the
/// entry to/from these replicas, and, for a change of a durable key, wait
/// until this node has committed it.
pub(crate) struct Plan {
    entry: Option<WireEntry>,
    replicas: Vec<ActorRef<ReplicatorActor>>,
    stored: Option<oneshot::Receiver<Result<(), String>>>,
}

#[derive(Message)]
#[message(reply = Plan)]
struct LocalRead {
    key: String,
}

#[derive(Message)]
struct MergeIn {
    key: String,
    entry: WireEntry,
}

/// The local value of a key, after the reads of a `get` merged in.
#[derive(Message)]
#[message(reply = Snapshotted)]
struct Snapshot {
    key: String,
}

/// The answer to [`Snapshot`]: the key may have been deleted since the
/// `get` began (a delete merged in meanwhile), which is an error, not
/// "no value".
enum Snapshotted {
    Value(Box<dyn Erased>),
    Absent,
    Deleted,
}

#[derive(Message)]
struct Subscribe {
    key: String,
    notify: Notify,
}

/// The membership as the replicator needs it.
#[derive(Message)]
struct Members {
    replicas: Vec<ActorRef<ReplicatorActor>>,
    nodes: BTreeSet<UniqueAddress>,
    present: BTreeSet<UniqueAddress>,
    is_leader: bool,
    all_reachable: bool,
}

#[derive(Debug, Clone, Copy, Message)]
struct PruningTick;

#[derive(Debug, Clone, Copy, Message)]
struct GossipTick;

#[derive(Debug, Clone, Copy, Message)]
#[message(reply = usize)]
struct ReplicaCount;

#[derive(Debug, Clone, Copy, Message)]
struct TypesChanged;

/// Whether `key` matches one of `patterns` (exact names, or prefixes
/// ending in `*`).
fn matches_durable(patterns: &[String], key: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => p == key,
    })
}

impl ReplicatorActor {
    fn is_durable(&self, key: &str) -> bool {
        matches_durable(&self.settings.durable_keys, key)
    }

    /// Queues `entry` (with its pruning marks) for the durable store, if
    /// `key` is durable. It is committed with the next group of writes;
    /// see [`ReplicatorActor::synced`].
    fn persist(&self, key: &str, entry: &Entry) {
        if !self.is_durable(key) {
            return;
        }
        if let Some(writer) = &self.durable {
            writer.write(key, entry.to_stored());
        }
    }

    /// Calls `done` once `key`'s latest change is on disk (at once for a
    /// key that is not durable), with the outcome of its commit.
    fn synced(&self, key: &str, done: Committed) {
        match &self.durable {
            Some(writer) if self.is_durable(key) => writer.sync(key, done),
            _ => done(Ok(())),
        }
    }

    /// A receiver of `synced`'s outcome, for a change of a durable key.
    fn stored(&self, key: &str) -> Option<oneshot::Receiver<Result<(), String>>> {
        if self.durable.is_none() || !self.is_durable(key) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        self.synced(
            key,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        Some(rx)
    }

    /// Installs a new value for `key`: digest, durable store, subscribers.
    fn set(&mut self, key: &str, value: Value, pruning: Pruning) {
        self.set_entry(key, Entry::new(value, pruning));
    }

    /// Installs `entry` for `key`, as [`ReplicatorActor::set`].
    fn set_entry(&mut self, key: &str, entry: Entry) {
        self.persist(key, &entry);
        if let Value::Data(d) = &entry.value {
            if let Some(subs) = self.subscribers.get_mut(key) {
                subs.retain(|notify| notify(d.as_ref()));
            }
        }
        self.entries.insert(key.to_string(), entry);
    }

    /// Merges a replica received from elsewhere; true if it was taken in.
    /// Both sides' pruning markers merge too, and the changes of nodes
    /// whose pruning was performed are dropped from both sides first.
    fn merge_in(&mut self, key: &str, wire: WireEntry) -> bool {
        let (type_name, bytes, theirs) = match wire {
            WireEntry::Deleted => {
                if !matches!(
                    self.entries.get(key).map(|e| &e.value),
                    Some(Value::Deleted)
                ) {
                    self.set(key, Value::Deleted, Pruning::new());
                }
                return true;
            }
            WireEntry::Data {
                type_name,
                bytes,
                pruning,
            } => (type_name, bytes, pruning),
        };
        let (local, mut pruning) = match self.entries.get(key) {
            Some(Entry {
                value: Value::Deleted,
                ..
            }) => return true,
            Some(Entry {
                value: Value::Data(d),
                pruning,
                ..
            }) => (Some(d), merge_pruning(pruning, &theirs, now_ms())),
            _ => (None, merge_pruning(&Pruning::new(), &theirs, now_ms())),
        };
        // The incoming replica's bytes are its encoding as long as nothing
        // of it is cleaned away: then a replica taken as it is needs no
        // encoding of its own.
        let (incoming, mut as_received) = match self.types.decode(&type_name, &bytes) {
            Ok(d) => match cleaned(d.as_ref(), &pruning) {
                Some(c) => (c, false),
                None => (d, true),
            },
            Err(e) => {
                tracing::warn!("dropped a replica of `{key}`: {e}");
                return false;
            }
        };
        let merged = match local {
            Some(local) => {
                let cleaned_local = cleaned(local.as_ref(), &pruning);
                let local = cleaned_local.as_deref().unwrap_or(local.as_ref());
                if local.covered_by(incoming.as_ref()) {
                    // A newer state (the usual write from the replica that
                    // made the change): the merge would be the same.
                    incoming
                } else {
                    as_received = false;
                    match local.merge_with(incoming.as_ref()) {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!("dropped a replica of `{key}`: {e}");
                            return false;
                        }
                    }
                }
            }
            None => incoming,
        };
        self.drop_orphan_marks(&mut pruning);
        add_seen(&mut pruning, &self.self_node);
        let new = if as_received {
            Entry::encoded(Value::Data(merged), Arc::from(bytes), pruning)
        } else {
            Entry::new(Value::Data(merged), pruning)
        };
        match self.entries.get(key) {
            Some(old) if old.digest == new.digest => {}
            // Only the marks changed: no notification, no new value.
            Some(
                old @ Entry {
                    value: Value::Data(_),
                    ..
                },
            ) if old.data_digest == new.data_digest => self.set_pruning(key, new.pruning),
            _ => self.set_entry(key, new),
        }
        true
    }

    /// This replica's digests, for anti-entropy.
    fn status_message(&self, is_reply: bool) -> DStatus {
        DStatus {
            from: self.self_node.address.to_string(),
            digests: self
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), e.digest))
                .collect(),
            is_reply,
        }
    }

    /// One round of removed-node pruning (Akka's): the leader marks keys
    /// holding a removed node's changes; the owner of a marker every
    /// replica has seen collapses those changes into its own; expired
    /// markers go.
    fn prune_removed_nodes(&mut self) {
        self.advance_reachable_clock();
        if !self.all_reachable {
            return;
        }
        let now = now_ms();
        let me = self.self_node.clone();
        self.collect_removed_nodes();
        let ready: Vec<UniqueAddress> = self
            .removed
            .iter()
            .filter(|(_, at)| {
                self.reachable_clock.saturating_sub(**at) >= self.settings.max_pruning_dissemination
            })
            .map(|(n, _)| n.clone())
            .collect();
        // Per key: the pruned value (if pruned now) and the new markers.
        type Change = (String, Option<Box<dyn Erased>>, Pruning);
        let mut changes: Vec<Change> = Vec::new();
        for (key, entry) in &self.entries {
            let Value::Data(d) = &entry.value else {
                continue;
            };
            let mut pruning = entry.pruning.clone();
            self.drop_orphan_marks(&mut pruning);
            let ttl = self.marker_ttl(key).as_millis() as u64;
            let mut data: Option<Box<dyn Erased>> = None;
            if self.is_leader {
                for removed in &ready {
                    let mine = matches!(
                        pruning.get(removed),
                        Some(PruningState::Initialized { owner, .. }) if *owner == me
                    );
                    let done = matches!(pruning.get(removed), Some(PruningState::Performed { .. }));
                    if d.need_pruning_from(removed) && !mine && !done {
                        tracing::debug!("pruning of {removed} in `{key}` starts");
                        pruning.insert(
                            removed.clone(),
                            PruningState::Initialized {
                                owner: me.clone(),
                                seen: [me.clone()].into(),
                            },
                        );
                    }
                }
            }
            for (removed, state) in pruning.iter_mut() {
                if let PruningState::Initialized { owner, seen } = state {
                    if *owner == me && self.nodes.iter().all(|n| seen.contains(n)) {
                        let current = data.take().unwrap_or_else(|| d.clone_box());
                        data = Some(current.pruned(removed, &me));
                        tracing::debug!("pruned the changes of {removed} in `{key}`");
                        *state = PruningState::Performed {
                            obsolete_at_ms: now + ttl,
                        };
                    }
                }
            }
            pruning.retain(|_, p| !is_obsolete(p, now));
            if data.is_some() || pruning != entry.pruning {
                changes.push((key.clone(), data, pruning));
            }
        }
        for (key, data, pruning) in changes {
            match data {
                Some(d) => self.set(&key, Value::Data(d), pruning),
                None => self.set_pruning(&key, pruning),
            }
        }
        // A removed node is forgotten once no mark refers to it and no
        // data holds its changes (it is found again in data that does).
        let entries = &self.entries;
        self.removed.retain(|n, _| {
            entries.values().any(|e| {
                e.pruning.contains_key(n)
                    || matches!(&e.value, Value::Data(d) if d.need_pruning_from(n))
            })
        });
    }

    /// Moves the reachable clock on by the time since it was last read, if
    /// every member was reachable meanwhile.
    fn advance_reachable_clock(&mut self) {
        let now = Instant::now();
        if self.all_reachable {
            self.reachable_clock += now.duration_since(self.clock_read_at);
        }
        self.clock_read_at = now;
    }

    /// Nodes found in the data that are not members any more (Akka's
    /// `collectRemovedNodes`): removed ones, however long ago.
    fn collect_removed_nodes(&mut self) {
        let now = self.reachable_clock;
        let mut found = Vec::new();
        for e in self.entries.values() {
            if let Value::Data(d) = &e.value {
                for n in d.modified_by_nodes() {
                    if n != self.self_node
                        && !self.present.contains(&n)
                        && !self.removed.contains_key(&n)
                    {
                        found.push(n);
                    }
                }
            }
        }
        for n in found {
            tracing::debug!("{n} holds changes in distributed data but is gone: pruned later");
            self.removed.entry(n).or_insert(now);
        }
    }

    /// New markers for `key`, its value unchanged (no notification).
    fn set_pruning(&mut self, key: &str, pruning: Pruning) {
        if let Some(e) = self.entries.remove(key) {
            let entry = e.with_pruning(pruning);
            self.persist(key, &entry);
            self.entries.insert(key.to_string(), entry);
        }
    }

    /// Drops the marks no replica can complete any more: started by an
    /// owner that has left (or is leaving) the replicas. Otherwise such a
    /// mark, winning every merge by its owner's address, would block the
    /// pruning for ever; the leader starts a new one.
    fn drop_orphan_marks(&self, pruning: &mut Pruning) {
        if self.nodes.is_empty() {
            return;
        }
        pruning.retain(|_, p| match p {
            PruningState::Initialized { owner, .. } => self.nodes.contains(owner),
            PruningState::Performed { .. } => true,
        });
    }

    /// How long a performed pruning is remembered for `key`.
    fn marker_ttl(&self, key: &str) -> Duration {
        if self.is_durable(key) {
            self.settings.durable_pruning_marker_time_to_live
        } else {
            self.settings.pruning_marker_time_to_live
        }
    }

    /// Decodes entries loaded from disk whose type is now known.
    fn decode_raw(&mut self) {
        let raw: Vec<(String, String, Arc<[u8]>)> = self
            .entries
            .iter()
            .filter_map(|(k, e)| match &e.value {
                Value::Raw { type_name } => Some((k.clone(), type_name.clone(), e.encoded.clone())),
                _ => None,
            })
            .collect();
        for (k, t, b) in raw {
            if let Ok(d) = self.types.decode(&t, &b) {
                let pruning = self
                    .entries
                    .get(&k)
                    .map(|e| e.pruning.clone())
                    .unwrap_or_default();
                self.entries.insert(k, Entry::new(Value::Data(d), pruning));
            }
        }
    }
}

impl Actor for ReplicatorActor {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.start_periodic_timer("gossip", GossipTick, self.settings.gossip_interval);
        ctx.start_periodic_timer("pruning", PruningTick, self.settings.pruning_interval);
    }

    /// The durable writes still queued are committed, and the store is
    /// closed (its lock released) before the replicator counts as stopped.
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if let Some(writer) = &mut self.durable {
            writer.close().await;
        }
    }
}

/// A write from another replica is acknowledged once it is merged and,
/// for a durable key, committed to this node's store (`false` if that
/// failed).
impl Handler<DWrite> for ReplicatorActor {
    async fn handle(&mut self, w: DWrite, _ctx: &mut Context<Self>) -> bool {
        self.merge_in(&w.key, w.entry)
    }

    async fn handle_with_reply(
        &mut self,
        w: DWrite,
        reply: Option<Replier<bool>>,
        _ctx: &mut Context<Self>,
    ) {
        let merged = self.merge_in(&w.key, w.entry);
        let Some(reply) = reply else {
            return;
        };
        if !merged {
            return reply.send(false);
        }
        let key = w.key;
        self.synced(
            &key.clone(),
            Box::new(move |r| match r {
                Ok(()) => reply.send(true),
                Err(e) => {
                    tracing::warn!("a write of `{key}` from another replica is not stored: {e}");
                    reply.send(false)
                }
            }),
        );
    }
}

#[handlers]
impl ReplicatorActor {
    async fn update(&mut self, u: Update, _ctx: &mut Context<Self>) -> Result<Plan, DataError> {
        // The current value is lent to the update (moved out, not copied);
        // the entry gets it back if the update fails.
        let mut current = match self.entries.get_mut(&u.key) {
            Some(Entry {
                value: Value::Deleted,
                ..
            }) => return Err(DataError::Deleted(u.key)),
            Some(
                e @ Entry {
                    value: Value::Data(_),
                    ..
                },
            ) => match std::mem::replace(&mut e.value, Value::Deleted) {
                Value::Data(d) => Some(d),
                _ => unreachable!("matched as data"),
            },
            _ => None,
        };
        let new = match (u.apply)(&mut current) {
            Ok(new) => new,
            Err(e) => {
                if let (Some(d), Some(entry)) = (current, self.entries.get_mut(&u.key)) {
                    entry.value = Value::Data(d);
                }
                return Err(e);
            }
        };
        let pruning = self
            .entries
            .get(&u.key)
            .map(|e| e.pruning.clone())
            .unwrap_or_default();
        // A pruned node's changes never come back, even through an update
        // built from an old value.
        let new = cleaned(new.as_ref(), &pruning).unwrap_or(new);
        self.set(&u.key, Value::Data(new), pruning);
        Ok(Plan {
            entry: self.entries.get(&u.key).map(Entry::to_wire),
            replicas: self.replicas.clone(),
            stored: self.stored(&u.key),
        })
    }

    async fn delete(&mut self, d: Delete, _ctx: &mut Context<Self>) -> Result<Plan, DataError> {
        self.set(&d.key, Value::Deleted, Pruning::new());
        Ok(Plan {
            entry: Some(WireEntry::Deleted),
            replicas: self.replicas.clone(),
            stored: self.stored(&d.key),
        })
    }

    async fn local_read(&mut self, r: LocalRead, _ctx: &mut Context<Self>) -> Plan {
        Plan {
            entry: self.entries.get(&r.key).map(Entry::to_wire),
            replicas: self.replicas.clone(),
            stored: None,
        }
    }

    async fn merge(&mut self, m: MergeIn, _ctx: &mut Context<Self>) {
        self.merge_in(&m.key, m.entry);
    }

    async fn snapshot(&mut self, s: Snapshot, _ctx: &mut Context<Self>) -> Snapshotted {
        match self.entries.get(&s.key).map(|e| &e.value) {
            Some(Value::Data(d)) => Snapshotted::Value(d.clone_box()),
            Some(Value::Deleted) => Snapshotted::Deleted,
            Some(Value::Raw { .. }) | None => Snapshotted::Absent,
        }
    }

    async fn subscribe(&mut self, s: Subscribe, _ctx: &mut Context<Self>) {
        if let Some(Entry {
            value: Value::Data(d),
            ..
        }) = self.entries.get(&s.key)
        {
            if !(s.notify)(d.as_ref()) {
                return;
            }
        }
        self.subscribers.entry(s.key).or_default().push(s.notify);
    }

    async fn replica_count(&mut self, _q: ReplicaCount, _ctx: &mut Context<Self>) -> usize {
        self.replicas.len()
    }

    async fn members(&mut self, m: Members, _ctx: &mut Context<Self>) {
        self.replicas = m.replicas;
        self.nodes = m.nodes;
        self.present = m.present;
        self.is_leader = m.is_leader;
        self.advance_reachable_clock();
        self.all_reachable = m.all_reachable;
    }

    async fn pruning_tick(&mut self, _t: PruningTick, _ctx: &mut Context<Self>) {
        self.prune_removed_nodes();
    }

    async fn types_changed(&mut self, _m: TypesChanged, _ctx: &mut Context<Self>) {
        self.decode_raw();
    }

    async fn read(&mut self, r: DRead, _ctx: &mut Context<Self>) -> Option<WireEntry> {
        self.entries.get(&r.key).map(Entry::to_wire)
    }

    async fn gossip_tick(&mut self, _t: GossipTick, _ctx: &mut Context<Self>) {
        if self.replicas.is_empty() || self.entries.is_empty() {
            return;
        }
        let to = &self.replicas[fastrand::usize(..self.replicas.len())];
        let _ = to.tell(self.status_message(false));
    }

    async fn status(&mut self, s: DStatus, ctx: &mut Context<Self>) {
        let theirs: HashMap<&str, u64> = s.digests.iter().map(|(k, d)| (k.as_str(), *d)).collect();
        // Ours that they lack or have differently: send them.
        let entries: Vec<(String, WireEntry)> = self
            .entries
            .iter()
            .filter(|(k, e)| theirs.get(k.as_str()) != Some(&e.digest))
            .map(|(k, e)| (k.clone(), e.to_wire()))
            .collect();
        let Ok(sender) = ctx
            .system()
            .resolve::<ReplicatorActor>(&format!("{}/system/{NAME}", s.from))
        else {
            return;
        };
        if !entries.is_empty() {
            let _ = sender.tell(DGossip { entries });
        }
        // Theirs that we lack or have differently: ask for them.
        let we_differ = s
            .digests
            .iter()
            .any(|(k, d)| self.entries.get(k).map(|e| e.digest) != Some(*d));
        if we_differ && !s.is_reply {
            let _ = sender.tell(self.status_message(true));
        }
    }

    async fn gossip(&mut self, g: DGossip, _ctx: &mut Context<Self>) {
        for (k, e) in g.entries {
            self.merge_in(&k, e);
        }
    }
}

/// The distributed-data replicator of this node: a handle (cheap to clone)
/// on the replicator actor, `/system/ddata-replicator`. There is one per
/// actor system, which any component finds with [`Replicator::find`] or
/// [`Replicator::get_or_start`] (as Akka's `DistributedData` extension).
///
/// ```
/// use std::time::Duration;
/// use troupe_cluster::ddata::{GCounter, Key, ReadConsistency, Replicator, WriteConsistency};
/// use troupe_cluster::{Cluster, ClusterSettings};
/// use troupe_core::prelude::*;
/// use troupe_core::remote::RemoteSettings;
///
/// # troupe_core::rt::block_on(async {
/// let system = ActorSystem::builder("app")
///     .remote(RemoteSettings::new("127.0.0.1:0").with_secret("s3cret"))
///     .build()?;
/// let cluster = Cluster::start(&system, ClusterSettings::default())?;
/// // The system's replicator: started now, or the one already running.
/// let replicator = Replicator::get_or_start(&system, &cluster)?;
///
/// let visits = Key::<GCounter>::new("visits");
/// let me = cluster.self_node().clone();
/// let timeout = Duration::from_secs(3);
/// replicator
///     .update(&visits, GCounter::new(), WriteConsistency::Majority { timeout }, move |mut c| {
///         c.increment(&me, 1);
///         c
///     })
///     .await?;
/// let now = replicator.get(&visits, ReadConsistency::Majority { timeout }).await?;
/// assert_eq!(now.map(|c| c.value()), Some(1));
/// # system.shutdown().await;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct Replicator {
    actor: ActorRef<ReplicatorActor>,
    types: Arc<TypeRegistry>,
    self_node: UniqueAddress,
    min_cap: usize,
    durable_keys: Arc<Vec<String>>,
}

/// Two handles are equal when they reach the same replicator actor.
impl PartialEq for Replicator {
    fn eq(&self, other: &Self) -> bool {
        self.actor == other.actor
    }
}

impl Eq for Replicator {}

impl fmt::Debug for Replicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replicator")
            .field("node", &self.self_node)
            .finish()
    }
}

/// The replicator of an actor system, kept as one of its extensions. The
/// lock also makes starting one atomic: two components that start or look
/// for the replicator at the same time get the same one.
#[derive(Default)]
struct SystemReplicator(Mutex<Option<Replicator>>);

impl SystemReplicator {
    fn lock(&self) -> MutexGuard<'_, Option<Replicator>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The system's replicator, unless it has stopped.
fn running(slot: &Option<Replicator>) -> Option<&Replicator> {
    slot.as_ref().filter(|r| !r.actor.is_terminated())
}

impl Replicator {
    /// Starts the replicator of this actor system with `settings`: opens
    /// the durable store (if any durable keys are configured) and loads it.
    /// Components that need the replicator later find this one with
    /// [`Replicator::find`] or [`Replicator::get_or_start`].
    ///
    /// There is one replicator per actor system: if one is running already
    /// (started by `start` or by `get_or_start`), this is an error; use
    /// [`Replicator::get_or_start`] to share it. To choose the settings of
    /// the system's replicator, call `start` before anything calls
    /// `get_or_start`.
    pub fn start(
        system: &ActorSystem,
        cluster: &Cluster,
        settings: ReplicatorSettings,
    ) -> Result<Replicator, ClusterError> {
        let holder = system.extension_or_init(SystemReplicator::default);
        let mut slot = holder.lock();
        if let Some(r) = running(&slot) {
            return Err(ClusterError(format!(
                "a replicator is already running on actor system `{}` ({}); there is one per \
                 system: use Replicator::get_or_start (or Replicator::find) to share it",
                system.name(),
                r.self_node
            )));
        }
        let replicator = Self::spawn(system, cluster, settings)?;
        *slot = Some(replicator.clone());
        Ok(replicator)
    }

    /// The replicator of this actor system: the one already running
    /// (started by [`Replicator::start`] or an earlier `get_or_start`), or
    /// a new one with [`ReplicatorSettings::default`]. Components that keep
    /// state in distributed data (cluster sharding, for one) call this, so
    /// they share the node's replicator and its settings.
    ///
    /// ```
    /// use troupe_cluster::ddata::{Replicator, ReplicatorSettings};
    /// use troupe_cluster::{Cluster, ClusterSettings};
    /// use troupe_core::prelude::*;
    /// use troupe_core::remote::RemoteSettings;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let system = ActorSystem::builder("app")
    ///     .remote(RemoteSettings::new("127.0.0.1:0").with_secret("s3cret"))
    ///     .build()?;
    /// let cluster = Cluster::start(&system, ClusterSettings::default())?;
    /// // The application chooses the settings first...
    /// let settings = ReplicatorSettings { majority_min_cap: 3, ..ReplicatorSettings::default() };
    /// let mine = Replicator::start(&system, &cluster, settings)?;
    /// // ...and every other component gets the same replicator.
    /// let shared = Replicator::get_or_start(&system, &cluster)?;
    /// assert_eq!(mine, shared);
    /// assert!(Replicator::start(&system, &cluster, ReplicatorSettings::default()).is_err());
    /// # troupe_core::rt::block_on(system.shutdown());
    /// # Ok(())
    /// # }
    /// ```
    pub fn get_or_start(
        system: &ActorSystem,
        cluster: &Cluster,
    ) -> Result<Replicator, ClusterError> {
        let holder = system.extension_or_init(SystemReplicator::default);
        let mut slot = holder.lock();
        if let Some(r) = running(&slot) {
            return Ok(r.clone());
        }
        let replicator = Self::spawn(system, cluster, ReplicatorSettings::default())?;
        *slot = Some(replicator.clone());
        Ok(replicator)
    }

    /// The replicator running on this actor system, if one was started (by
    /// [`Replicator::start`] or [`Replicator::get_or_start`]). (Akka's
    /// `DistributedData(system).replicator`; named `find` because `get`
    /// reads a key.)
    ///
    /// ```no_run
    /// # use troupe_cluster::ddata::Replicator;
    /// # use troupe_core::prelude::*;
    /// # fn run(system: &ActorSystem) {
    /// match Replicator::find(system) {
    ///     Some(replicator) => { /* use the node's replicator */ }
    ///     None => { /* distributed data is not in use on this node */ }
    /// }
    /// # }
    /// ```
    pub fn find(system: &ActorSystem) -> Option<Replicator> {
        let holder = system.extension::<SystemReplicator>()?;
        let slot = holder.lock();
        running(&slot).cloned()
    }

    /// Whether `key` is kept in the durable store (it matches one of the
    /// settings' `durable_keys`), so that it survives a restart of every
    /// node.
    ///
    /// ```no_run
    /// # use troupe_cluster::ddata::Replicator;
    /// # fn run(replicator: &Replicator) {
    /// if !replicator.is_durable("shard-counter-all") {
    ///     eprintln!("remembered counters will not survive a full cluster restart");
    /// }
    /// # }
    /// ```
    pub fn is_durable(&self, key: &str) -> bool {
        matches_durable(&self.durable_keys, key)
    }

    /// This replicator's `majority_min_cap` (see [`ReplicatorSettings`]),
    /// for [`WriteConsistency::replicas_needed`] and
    /// [`ReadConsistency::replicas_needed`].
    pub fn majority_min_cap(&self) -> usize {
        self.min_cap
    }

    fn spawn(
        system: &ActorSystem,
        cluster: &Cluster,
        settings: ReplicatorSettings,
    ) -> Result<Replicator, ClusterError> {
        system
            .register_control::<ReplicatorActor, DWrite>()
            .and_then(|s| s.register_control::<ReplicatorActor, DRead>())
            .and_then(|s| s.register_control::<ReplicatorActor, DStatus>())
            .and_then(|s| s.register::<ReplicatorActor, DGossip>())
            .map_err(|e| ClusterError(format!("cannot register the replicator's messages: {e}")))?;
        let types = TypeRegistry::with_builtins();
        let store = if settings.durable_keys.is_empty() {
            None
        } else {
            Some(DurableStore::open(&settings.durable_store).map_err(ClusterError)?)
        };
        let mut entries = HashMap::new();
        if let Some(store) = &store {
            for stored in store.load().map_err(ClusterError)? {
                let (value, encoded) = match types.decode(&stored.type_name, &stored.bytes) {
                    Ok(d) => (Value::Data(d), None),
                    Err(_) => (
                        Value::Raw {
                            type_name: stored.type_name,
                        },
                        Some(Arc::from(stored.bytes)),
                    ),
                };
                let pruning = decode_marks(&stored.pruning).unwrap_or_else(|e| {
                    tracing::warn!(
                        "the pruning marks of durable key `{}` did not decode ({e}); \
                         loaded without them",
                        stored.key
                    );
                    Pruning::new()
                });
                let entry = match encoded {
                    Some(bytes) => Entry::encoded(value, bytes, pruning),
                    None => Entry::new(value, pruning),
                };
                entries.insert(stored.key, entry);
            }
            tracing::info!(
                "loaded {} durable keys from {}",
                entries.len(),
                settings.durable_store.display()
            );
        }
        let durable = match store {
            Some(store) => {
                Some(DurableWriter::start(store, &settings.durable_store).map_err(ClusterError)?)
            }
            None => None,
        };
        let min_cap = settings.majority_min_cap;
        let durable_keys = Arc::new(settings.durable_keys.clone());
        let role = settings.role.clone();
        let actor = system
            .spawn_system_actor(
                Props::new(ReplicatorActor {
                    self_node: cluster.self_node().clone(),
                    settings,
                    types: types.clone(),
                    entries,
                    subscribers: HashMap::new(),
                    replicas: Vec::new(),
                    durable,
                    nodes: BTreeSet::new(),
                    present: BTreeSet::new(),
                    removed: BTreeMap::new(),
                    reachable_clock: Duration::ZERO,
                    clock_read_at: Instant::now(),
                    is_leader: false,
                    all_reachable: true,
                })
                .with_name(NAME),
            )
            .map_err(|e| ClusterError(format!("cannot start the replicator: {e}")))?;
        follow_replicas(system.clone(), cluster.clone(), role, actor.clone());
        Ok(Replicator {
            actor,
            types,
            self_node: cluster.self_node().clone(),
            min_cap,
            durable_keys,
        })
    }

    /// Gives data type `T` its wire name (the same on every node).
    /// GCounter, PNCounter, ORSet and LWWRegister of `String` and `u64`,
    /// and ORMap of `String` to those, are registered already.
    pub fn register_type<T: ReplicatedData + Serialize + DeserializeOwned>(
        &self,
        name: &'static str,
    ) {
        self.types.register::<T>(name);
        let _ = self.actor.tell(TypesChanged);
    }

    fn name_of<T: 'static>(&self) -> Result<&'static str, DataError> {
        self.types
            .name_of::<T>()
            .ok_or(DataError::TypeNotRegistered(std::any::type_name::<T>()))
    }

    /// Updates `key`: `modify` gets the current local value (or `initial`)
    /// and returns the new one, which is replicated with `consistency`. If
    /// the consistency is not reached in time the error says so, and the
    /// value stays updated here and spreads by gossip.
    pub async fn update<T, F>(
        &self,
        key: &Key<T>,
        initial: T,
        consistency: WriteConsistency,
        modify: F,
    ) -> Result<(), DataError>
    where
        T: ReplicatedData + Serialize + DeserializeOwned,
        F: FnOnce(T) -> T + Send + 'static,
    {
        let name = self.name_of::<T>()?;
        let key_name = key.name.clone();
        let apply: Apply = Box::new(move |current| {
            let base = match current.take() {
                Some(c) if c.as_any().is::<T>() => *c
                    .into_any()
                    .downcast::<T>()
                    .unwrap_or_else(|_| unreachable!("checked")),
                Some(c) => {
                    let held = c.type_name();
                    *current = Some(c);
                    return Err(DataError::WrongType(format!(
                        "key `{key_name}` holds a `{held}`"
                    )));
                }
                None => initial,
            };
            Ok(erase(modify(base), name))
        });
        let plan = self
            .actor
            .ask(Update {
                key: key.name.clone(),
                apply,
            })
            .await
            .map_err(|_| DataError::Stopped)??;
        self.replicate(&key.name, plan, consistency).await
    }

    /// Deletes `key` everywhere (a tombstone: it cannot be used again).
    pub async fn delete<T>(
        &self,
        key: &Key<T>,
        consistency: WriteConsistency,
    ) -> Result<(), DataError> {
        let plan = self
            .actor
            .ask(Delete {
                key: key.name.clone(),
            })
            .await
            .map_err(|_| DataError::Stopped)??;
        self.replicate(&key.name, plan, consistency).await
    }

    /// Waits until the change of `plan` reaches `consistency` and, for a
    /// durable key, is committed to this node's store (both under way at
    /// once).
    async fn replicate(
        &self,
        key: &str,
        mut plan: Plan,
        consistency: WriteConsistency,
    ) -> Result<(), DataError> {
        let stored = plan.stored.take();
        let local = async move {
            let Some(stored) = stored else {
                return Ok(());
            };
            match stored.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(DataError::Store(e)),
                Err(_) => Err(DataError::Store(format!(
                    "the durable store stopped before the change of `{key}` was committed"
                ))),
            }
        };
        let (local, remote) =
            futures_lite::future::zip(local, self.write_to_replicas(key, plan, consistency)).await;
        local.and(remote)
    }

    /// Writes the entry of `plan` to the other replicas `consistency`
    /// needs.
    async fn write_to_replicas(
        &self,
        key: &str,
        plan: Plan,
        consistency: WriteConsistency,
    ) -> Result<(), DataError> {
        let Some(timeout) = consistency.timeout() else {
            return Ok(());
        };
        let Some(entry) = plan.entry else {
            return Ok(());
        };
        // The other replicas needed: this node has the write already.
        let need = consistency
            .replicas_needed(plan.replicas.len() + 1, self.min_cap)
            .saturating_sub(1);
        if need == 0 {
            return Ok(());
        }
        let (tx, rx) = async_channel::unbounded();
        for r in &plan.replicas {
            let (r, tx, entry, key) = (r.clone(), tx.clone(), entry.clone(), key.to_string());
            rt::spawn(async move {
                let ok = r
                    .ask_timeout(DWrite { key, entry }, timeout)
                    .await
                    .unwrap_or(false);
                let _ = tx.send(ok).await;
            });
        }
        drop(tx);
        let mut acks = 0;
        let waited = rt::timeout(timeout, async {
            while let Ok(ok) = rx.recv().await {
                if ok {
                    acks += 1;
                    if acks >= need {
                        return true;
                    }
                }
            }
            false
        })
        .await;
        match waited {
            Some(true) => Ok(()),
            _ => Err(DataError::Timeout(format!(
                "{acks} of the {need} other replicas needed acknowledged the write of `{key}` within {timeout:?}"
            ))),
        }
    }

    /// Reads `key` with `consistency`: the merge of the local replica and
    /// the replicas consulted. `None` if no replica has it.
    pub async fn get<T>(
        &self,
        key: &Key<T>,
        consistency: ReadConsistency,
    ) -> Result<Option<T>, DataError>
    where
        T: ReplicatedData + Serialize + DeserializeOwned,
    {
        let plan = self
            .actor
            .ask(LocalRead {
                key: key.name.clone(),
            })
            .await
            .map_err(|_| DataError::Stopped)?;
        if let Some(WireEntry::Deleted) = plan.entry {
            return Err(DataError::Deleted(key.name.clone()));
        }
        if let Some(timeout) = consistency.timeout() {
            // The other replicas needed: this node's replica is read anyway.
            let need = consistency
                .replicas_needed(plan.replicas.len() + 1, self.min_cap)
                .saturating_sub(1);
            if need > 0 {
                let (tx, rx) = async_channel::unbounded();
                for r in &plan.replicas {
                    let (r, tx, k) = (r.clone(), tx.clone(), key.name.clone());
                    rt::spawn(async move {
                        let got = r.ask_timeout(DRead { key: k }, timeout).await;
                        let _ = tx.send(got).await;
                    });
                }
                drop(tx);
                let mut answers = 0;
                let mut found = Vec::new();
                let done = rt::timeout(timeout, async {
                    while let Ok(got) = rx.recv().await {
                        if let Ok(entry) = got {
                            answers += 1;
                            found.extend(entry);
                            if answers >= need {
                                return true;
                            }
                        }
                    }
                    false
                })
                .await;
                // Whatever came back is merged in, even on a timeout.
                for entry in found {
                    let _ = self.actor.tell(MergeIn {
                        key: key.name.clone(),
                        entry,
                    });
                }
                if done != Some(true) {
                    return Err(DataError::Timeout(format!(
                        "{answers} of the {need} other replicas needed answered the read of `{}` within {timeout:?}",
                        key.name
                    )));
                }
            }
        }
        let snapshot = self
            .actor
            .ask(Snapshot {
                key: key.name.clone(),
            })
            .await
            .map_err(|_| DataError::Stopped)?;
        match snapshot {
            Snapshotted::Absent => Ok(None),
            Snapshotted::Deleted => Err(DataError::Deleted(key.name.clone())),
            Snapshotted::Value(d) => d
                .as_any()
                .downcast_ref::<T>()
                .cloned()
                .map(Some)
                .ok_or_else(|| {
                    DataError::WrongType(format!("key `{}` holds a `{}`", key.name, d.type_name()))
                }),
        }
    }

    /// How many other replicas this node knows (members Up or WeaklyUp, of
    /// the role).
    pub async fn replica_count(&self) -> Result<usize, DataError> {
        self.actor
            .ask(ReplicaCount)
            .await
            .map_err(|_| DataError::Stopped)
    }

    /// Every new value of `key` (the current one first, if any).
    pub async fn subscribe<T>(&self, key: &Key<T>) -> async_channel::Receiver<T>
    where
        T: ReplicatedData + Serialize + DeserializeOwned,
    {
        let (tx, rx) = async_channel::unbounded();
        let notify: Notify = Box::new(move |d: &dyn Erased| match d.as_any().downcast_ref::<T>() {
            Some(v) => tx.try_send(v.clone()).is_ok(),
            None => true,
        });
        let _ = self.actor.tell(Subscribe {
            key: key.name.clone(),
            notify,
        });
        rx
    }
}

/// Keeps the replicator's view of the membership up to date: the other
/// replicas (Up and WeaklyUp members of the role), every member, whether
/// this node leads them, and whether all are reachable. (Removed nodes are
/// found in the data: any node in it that is no longer a member.)
fn follow_replicas(
    system: ActorSystem,
    cluster: Cluster,
    role: Option<String>,
    actor: ActorRef<ReplicatorActor>,
) {
    rt::spawn(async move {
        let Ok((snapshot, events)) = cluster.subscribe().await else {
            return;
        };
        let mut state = snapshot;
        loop {
            let with_role =
                |m: &&crate::member::Member| role.as_deref().is_none_or(|r| m.has_role(r));
            let up: BTreeSet<UniqueAddress> = state
                .members
                .iter()
                .filter(|m| matches!(m.status, MemberStatus::Up | MemberStatus::WeaklyUp))
                .filter(with_role)
                .map(|m| m.node.clone())
                .collect();
            // Leaving and Exiting members still hold replicas until removed.
            let nodes: BTreeSet<UniqueAddress> = state
                .members
                .iter()
                .filter(|m| {
                    matches!(
                        m.status,
                        MemberStatus::Up
                            | MemberStatus::WeaklyUp
                            | MemberStatus::Leaving
                            | MemberStatus::Exiting
                    )
                })
                .filter(with_role)
                .map(|m| m.node.clone())
                .collect();
            let present: BTreeSet<UniqueAddress> =
                state.members.iter().map(|m| m.node.clone()).collect();
            let leader = match role.as_deref() {
                None => state.leader.clone(),
                Some(r) => state
                    .role_leaders
                    .iter()
                    .find(|(name, _)| name == r)
                    .and_then(|(_, l)| l.clone()),
            };
            let replicas: Vec<ActorRef<ReplicatorActor>> = up
                .iter()
                .filter(|n| *n != cluster.self_node())
                .filter_map(|n| system.resolve(&format!("{}/system/{NAME}", n.address)).ok())
                .collect();
            let members = Members {
                replicas,
                // As Akka: only an Up leader starts pruning.
                is_leader: leader.as_ref() == Some(cluster.self_node())
                    && up.contains(cluster.self_node()),
                all_reachable: !state.unreachable.iter().any(|m| with_role(&m)),
                nodes,
                present,
            };
            if actor.tell(members).is_err() {
                return;
            }
            if events.recv().await.is_err() {
                return;
            }
            while events.try_recv().is_ok() {}
            match cluster.state().await {
                Ok(s) => state = s,
                Err(_) => return,
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddata::GCounter;
    use troupe_core::remote::Address;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("s", "127.0.0.1", port), port.into())
    }

    /// A replica as the replicator actor keeps it, driven by hand.
    fn replica(me: u16, nodes: &[u16], removed: u16, leader: bool) -> ReplicatorActor {
        ReplicatorActor {
            self_node: node(me),
            settings: ReplicatorSettings {
                max_pruning_dissemination: Duration::ZERO,
                ..ReplicatorSettings::default()
            },
            types: TypeRegistry::with_builtins(),
            entries: HashMap::new(),
            subscribers: HashMap::new(),
            replicas: Vec::new(),
            durable: None,
            nodes: nodes.iter().map(|p| node(*p)).collect(),
            present: nodes.iter().map(|p| node(*p)).collect(),
            removed: [(node(removed), Duration::ZERO)].into(),
            reachable_clock: Duration::ZERO,
            clock_read_at: Instant::now(),
            is_leader: leader,
            all_reachable: true,
        }
    }

    fn counter(parts: &[(u16, u64)]) -> WireEntry {
        let mut c = GCounter::new();
        for (p, n) in parts {
            c.increment(&node(*p), *n);
        }
        WireEntry::Data {
            type_name: "GCounter".into(),
            bytes: erase(c, "GCounter").encode(),
            pruning: Pruning::new(),
        }
    }

    fn value(r: &ReplicatorActor) -> GCounter {
        match &r.entries["k"].value {
            Value::Data(d) => d.as_any().downcast_ref::<GCounter>().unwrap().clone(),
            _ => panic!("no counter"),
        }
    }

    /// Every replica merges every other's entry, twice over.
    fn gossip(replicas: &mut [ReplicatorActor]) {
        for _ in 0..2 {
            for i in 0..replicas.len() {
                let wire = replicas[i].entries["k"].to_wire();
                for (j, r) in replicas.iter_mut().enumerate() {
                    if i != j {
                        assert!(r.merge_in("k", wire.clone()));
                    }
                }
            }
        }
    }

    /// Pekko's `WriteAggregatorSpec` cases for `calculateMajority`.
    #[test]
    fn majority_counts_match_pekkos_calculate_majority() {
        // "calculate majority with minCap"
        let min_cap = 5;
        for (n, expected) in [
            (3, 3),
            (4, 4),
            (5, 5),
            (6, 5),
            (7, 5),
            (8, 5),
            (9, 5),
            (10, 6),
            (11, 6),
            (12, 7),
        ] {
            assert_eq!(calculate_majority(min_cap, n, 0), expected, "N = {n}");
        }
        // "calculate majority with additional"
        for (n, additional, expected) in [
            (3, 1, 3),
            (3, 2, 3),
            (4, 1, 4),
            (5, 1, 4),
            (5, 2, 5),
            (6, 1, 5),
            (7, 1, 5),
            (8, 1, 6),
            (8, 2, 7),
            (9, 1, 6),
            (10, 1, 7),
            (11, 1, 7),
            (11, 3, 9),
        ] {
            assert_eq!(
                calculate_majority(0, n, additional),
                expected,
                "N = {n}, additional = {additional}"
            );
        }
        // "calculate majority with additional and minCap"
        assert_eq!(calculate_majority(5, 9, 1), 6);
        assert_eq!(calculate_majority(7, 9, 1), 7);
        assert_eq!(calculate_majority(10, 9, 1), 9);
        // Pekko's sharding uses Int.MaxValue for "all": no overflow here.
        assert_eq!(calculate_majority(0, 7, usize::MAX), 7);
    }

    #[test]
    fn each_consistency_needs_its_count_of_replicas() {
        let t = Duration::from_secs(1);
        let counts = |w: WriteConsistency, r: ReadConsistency, n: usize, cap: usize| {
            let (w, r) = (w.replicas_needed(n, cap), r.replicas_needed(n, cap));
            assert_eq!(w, r, "reads and writes count alike");
            w
        };
        use ReadConsistency as R;
        use WriteConsistency as W;
        for n in 1..=12 {
            assert_eq!(counts(W::Local, R::Local, n, 0), 1);
            assert_eq!(
                counts(W::All { timeout: t }, R::All { timeout: t }, n, 0),
                n
            );
            assert_eq!(
                counts(W::Majority { timeout: t }, R::Majority { timeout: t }, n, 0),
                n / 2 + 1
            );
            let plus = |additional| {
                counts(
                    W::MajorityPlus {
                        additional,
                        timeout: t,
                    },
                    R::MajorityPlus {
                        additional,
                        timeout: t,
                    },
                    n,
                    0,
                )
            };
            assert_eq!(plus(0), n / 2 + 1, "plus 0 is a majority");
            assert_eq!(plus(2), (n / 2 + 3).min(n));
            assert_eq!(plus(usize::MAX), n, "plus usize::MAX is all");
            // majority_min_cap applies to both majorities, capped at all.
            assert_eq!(
                counts(W::Majority { timeout: t }, R::Majority { timeout: t }, n, 4),
                (n / 2 + 1).max(4).min(n)
            );
        }
        // Pekko's sharding coordinator: write majority plus 3, read plus 5.
        let w = W::MajorityPlus {
            additional: 3,
            timeout: t,
        };
        let r = R::MajorityPlus {
            additional: 5,
            timeout: t,
        };
        assert_eq!(w.replicas_needed(10, 0), 9);
        assert_eq!(r.replicas_needed(10, 0), 10);
        assert_eq!(w.timeout(), Some(t));
        assert_eq!(R::Local.timeout(), None);
    }

    #[test]
    fn a_removed_nodes_count_moves_to_the_owner_and_stale_copies_do_not_bring_it_back() {
        let all = [1, 2, 3];
        // Node 9 was removed; it had counted 4 (node 3 only saw 3 of it).
        let mut rs = [
            replica(1, &all, 9, true),
            replica(2, &all, 9, false),
            replica(3, &all, 9, false),
        ];
        assert!(rs[0].merge_in("k", counter(&[(1, 1), (9, 4)])));
        assert!(rs[1].merge_in("k", counter(&[(2, 2), (9, 4)])));
        assert!(rs[2].merge_in("k", counter(&[(9, 3)])));
        // The leader marks the key; until every replica has seen the
        // marker, nothing is pruned.
        rs[0].prune_removed_nodes();
        assert!(value(&rs[0]).need_pruning_from(&node(9)));
        gossip(&mut rs);
        rs[0].prune_removed_nodes();
        let pruned = value(&rs[0]);
        assert!(!pruned.need_pruning_from(&node(9)));
        assert_eq!(
            pruned.value(),
            1 + 2 + 4,
            "the removed node's count is kept"
        );
        gossip(&mut rs);
        for r in &rs {
            assert!(!value(r).need_pruning_from(&node(9)));
            assert_eq!(value(r).value(), 7);
        }
        // A stale copy with the removed node's changes (an old durable
        // replica, a late message) is cleaned before it is merged.
        assert!(rs[1].merge_in("k", counter(&[(1, 1), (9, 4)])));
        assert_eq!(value(&rs[1]).value(), 7, "counted twice");
        // The marker expires after its time to live; nothing else changes.
        rs[2].settings.pruning_marker_time_to_live = Duration::ZERO;
        assert!(!rs[2].entries["k"].pruning.is_empty());
        if let Some(PruningState::Performed { obsolete_at_ms }) = rs[2]
            .entries
            .get_mut("k")
            .unwrap()
            .pruning
            .get_mut(&node(9))
        {
            *obsolete_at_ms = 0;
        }
        rs[2].prune_removed_nodes();
        assert!(rs[2].entries["k"].pruning.is_empty());
        assert_eq!(value(&rs[2]).value(), 7);
    }

    #[test]
    fn only_the_owner_prunes_and_only_once_all_have_seen_the_marker() {
        let all = [1, 2, 3];
        let mut rs = [replica(1, &all, 9, true), replica(2, &all, 9, false)];
        for r in rs.iter_mut() {
            assert!(r.merge_in("k", counter(&[(9, 5)])));
        }
        rs[0].prune_removed_nodes();
        let wire = rs[0].entries["k"].to_wire();
        assert!(rs[1].merge_in("k", wire));
        // Node 2 is not the owner; node 3 has not seen the marker.
        rs[1].prune_removed_nodes();
        let wire = rs[1].entries["k"].to_wire();
        assert!(rs[0].merge_in("k", wire));
        rs[0].prune_removed_nodes();
        assert!(
            value(&rs[0]).need_pruning_from(&node(9)),
            "node 3 has not seen it"
        );
        assert!(value(&rs[1]).need_pruning_from(&node(9)));
    }

    #[test]
    fn a_mark_whose_owner_left_gives_way_to_the_new_leaders() {
        // Node 1 started pruning node 9, then left; node 2 leads now.
        let mut rs = [replica(2, &[2, 3], 9, true), replica(3, &[2, 3], 9, false)];
        let mut stale = counter(&[(9, 5)]);
        if let WireEntry::Data { pruning, .. } = &mut stale {
            pruning.insert(
                node(9),
                PruningState::Initialized {
                    owner: node(1),
                    seen: [node(1)].into(),
                },
            );
        }
        for r in rs.iter_mut() {
            assert!(r.merge_in("k", stale.clone()));
            assert!(
                r.entries["k"].pruning.is_empty(),
                "the departed owner's mark is dropped"
            );
        }
        rs[0].prune_removed_nodes();
        gossip(&mut rs);
        rs[0].prune_removed_nodes();
        gossip(&mut rs);
        for r in &rs {
            assert!(!value(r).need_pruning_from(&node(9)));
            assert_eq!(value(r).value(), 5);
        }
    }

    #[test]
    fn the_leader_finds_removed_nodes_in_the_data() {
        // This replicator never saw node 8 as a member (it left before).
        let mut r = replica(1, &[1], 9, true);
        r.removed.clear();
        assert!(r.merge_in("k", counter(&[(1, 1), (8, 2)])));
        r.prune_removed_nodes();
        assert!(r.removed.contains_key(&node(8)));
        // Alone, it has seen its own mark: pruned in the next round.
        r.prune_removed_nodes();
        assert!(!value(&r).need_pruning_from(&node(8)));
        assert_eq!(value(&r).value(), 3);
    }

    #[test]
    fn an_entry_without_marks_is_encoded_as_before() {
        #[derive(Deserialize)]
        enum Old {
            Data {
                #[allow(dead_code)]
                type_name: String,
                #[serde(with = "serde_bytes")]
                bytes: Vec<u8>,
            },
            #[allow(dead_code)]
            Deleted,
        }
        let wire = counter(&[(1, 1)]);
        let encoded = rmp_serde::to_vec(&wire).unwrap();
        let Old::Data { bytes, .. } = rmp_serde::from_slice::<Old>(&encoded).unwrap() else {
            panic!("not data");
        };
        assert!(!bytes.is_empty());
    }

    #[test]
    fn an_update_whose_commit_fails_is_an_error_and_the_next_one_stores_it() {
        use crate::ddata::durable::faults;
        use crate::ddata::{DurableStore, ORSet};
        use crate::ClusterSettings;
        use troupe_core::remote::RemoteSettings;

        let dir = std::env::temp_dir().join(format!(
            "troupe-replicator-fail-{}-{}",
            std::process::id(),
            now_ms()
        ));
        let file = dir.join("ddata.redb");
        let system = ActorSystem::builder("fail")
            .remote(RemoteSettings::new("127.0.0.1:0").with_secret("s"))
            .build()
            .unwrap();
        let cluster = Cluster::start(&system, ClusterSettings::default()).unwrap();
        let settings = ReplicatorSettings {
            durable_keys: vec!["orders".into()],
            durable_store: file.clone(),
            ..ReplicatorSettings::default()
        };
        let replicator = Replicator::start(&system, &cluster, settings).unwrap();
        let key = Key::<ORSet<String>>::new("orders");
        let me = cluster.self_node().clone();
        let add = |item: &'static str| {
            let me = me.clone();
            replicator.update(&key, ORSet::new(), WriteConsistency::Local, move |mut s| {
                s.add(&me, item.to_string());
                s
            })
        };
        rt::block_on(async {
            faults::fail_commits(&file, true);
            match add("a").await {
                Err(DataError::Store(m)) => {
                    assert!(m.contains("none of them is on disk"), "{m}");
                    assert!(m.contains(&file.display().to_string()), "{m}");
                    let text = DataError::Store(m).to_string();
                    assert!(text.starts_with("not stored durably"), "{text}");
                }
                other => panic!("expected a store error, got {other:?}"),
            }
            // Applied in memory all the same.
            let here = replicator.get(&key, ReadConsistency::Local).await;
            assert!(here.unwrap().unwrap().contains(&"a".to_string()));
            faults::fail_commits(&file, false);
            add("b").await.expect("stored");
            system.shutdown().await;
        });
        let store = DurableStore::open_existing(&file).unwrap();
        let orders: ORSet<String> = store.get("orders").unwrap().unwrap();
        assert_eq!(orders.elements(), ["a".to_string(), "b".to_string()].into());
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn an_update_of_another_type_fails_and_leaves_the_value() {
        use crate::ddata::ORSet;
        use crate::ClusterSettings;
        use troupe_core::remote::RemoteSettings;

        let system = ActorSystem::builder("types")
            .remote(RemoteSettings::new("127.0.0.1:0").with_secret("s"))
            .build()
            .unwrap();
        let cluster = Cluster::start(&system, ClusterSettings::default()).unwrap();
        let replicator =
            Replicator::start(&system, &cluster, ReplicatorSettings::default()).unwrap();
        let me = cluster.self_node().clone();
        rt::block_on(async {
            let set = Key::<ORSet<String>>::new("k");
            let me2 = me.clone();
            replicator
                .update(&set, ORSet::new(), WriteConsistency::Local, move |mut s| {
                    s.add(&me2, "a".to_string());
                    s
                })
                .await
                .unwrap();
            let counter = Key::<GCounter>::new("k");
            let e = replicator
                .update(
                    &counter,
                    GCounter::new(),
                    WriteConsistency::Local,
                    move |mut c| {
                        c.increment(&me, 1);
                        c
                    },
                )
                .await
                .unwrap_err();
            assert_eq!(
                e,
                DataError::WrongType("key `k` holds a `ORSet<String>`".into())
            );
            let kept = replicator.get(&set, ReadConsistency::Local).await.unwrap();
            assert_eq!(kept.unwrap().elements(), ["a".to_string()].into());
            system.shutdown().await;
        });
    }

    #[test]
    fn the_wait_before_pruning_counts_only_time_with_everyone_reachable() {
        let mut r = replica(1, &[1], 9, true);
        r.settings.max_pruning_dissemination = Duration::from_millis(500);
        assert!(r.merge_in("k", counter(&[(9, 2)])));
        let a_second_ago = || Instant::now().checked_sub(Duration::from_secs(1)).unwrap();
        // A second passes with a member unreachable: it does not count.
        r.all_reachable = false;
        r.clock_read_at = a_second_ago();
        r.prune_removed_nodes();
        r.all_reachable = true;
        r.clock_read_at = Instant::now();
        r.prune_removed_nodes();
        assert!(r.entries["k"].pruning.is_empty(), "started too early");
        // A second with everyone reachable: pruning starts.
        r.clock_read_at = a_second_ago();
        r.prune_removed_nodes();
        assert!(!r.entries["k"].pruning.is_empty());
    }
}
