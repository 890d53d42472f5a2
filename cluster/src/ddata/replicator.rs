//! The replicator: one actor per node (`/system/ddata-replicator`) that
//! keeps a replica of every key, applies updates, replicates them with the
//! asked consistency (local, majority, all), answers reads from other
//! replicas, spreads everything by anti-entropy gossip, notifies
//! subscribers, and keeps durable keys on disk. It follows Akka's
//! `Replicator`, with full-state replication.

use super::durable::DurableStore;
use super::types::{erase, Erased, TypeRegistry};
use super::ReplicatedData;
use crate::cluster::{Cluster, ClusterError};
use crate::member::{fnv1a, MemberStatus, UniqueAddress};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use troupe_core::prelude::*;
use troupe_core::{rt, Props};

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

/// How many replicas must have a write before it counts as done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteConsistency {
    /// This node only; gossip spreads it.
    Local,
    /// A majority of the replicas (at least `majority_min_cap`).
    Majority {
        /// Give up (the write stays local and spreads by gossip) after this.
        timeout: Duration,
    },
    /// Every replica.
    All {
        /// Give up after this.
        timeout: Duration,
    },
}

/// How many replicas a read consults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadConsistency {
    /// This node only.
    Local,
    /// A majority of the replicas (at least `majority_min_cap`).
    Majority {
        /// Give up after this.
        timeout: Duration,
    },
    /// Every replica.
    All {
        /// Give up after this.
        timeout: Duration,
    },
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
}

impl Default for ReplicatorSettings {
    fn default() -> Self {
        ReplicatorSettings {
            role: None,
            gossip_interval: Duration::from_secs(2),
            majority_min_cap: 0,
            durable_keys: Vec::new(),
            durable_store: PathBuf::from("ddata/replicator.redb"),
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
    /// Loaded from disk with a type not registered yet.
    Raw {
        type_name: String,
        bytes: Vec<u8>,
    },
}

struct Entry {
    value: Value,
    digest: u64,
}

const DELETED_DIGEST: u64 = u64::MAX;

impl Entry {
    fn new(value: Value) -> Self {
        let digest = match &value {
            Value::Data(d) => fnv1a(d.encode()),
            Value::Raw { bytes, .. } => fnv1a(bytes.iter().copied()),
            Value::Deleted => DELETED_DIGEST,
        };
        Entry { value, digest }
    }

    fn to_wire(&self) -> WireEntry {
        match &self.value {
            Value::Data(d) => WireEntry::Data {
                type_name: d.type_name().to_string(),
                bytes: d.encode(),
            },
            Value::Raw { type_name, bytes } => WireEntry::Data {
                type_name: type_name.clone(),
                bytes: bytes.clone(),
            },
            Value::Deleted => WireEntry::Deleted,
        }
    }
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
    durable: Option<DurableStore>,
}

/// A local update: the function that makes the new value.
type Apply = Box<dyn FnOnce(Option<&dyn Erased>) -> Result<Box<dyn Erased>, DataError> + Send>;

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
/// entry to/from these replicas.
pub(crate) struct Plan {
    entry: Option<WireEntry>,
    replicas: Vec<ActorRef<ReplicatorActor>>,
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

#[derive(Message)]
#[message(reply = Option<Box<dyn Erased>>)]
struct Snapshot {
    key: String,
}

#[derive(Message)]
struct Subscribe {
    key: String,
    notify: Notify,
}

#[derive(Message)]
struct Replicas(Vec<ActorRef<ReplicatorActor>>);

#[derive(Debug, Clone, Copy, Message)]
struct GossipTick;

#[derive(Debug, Clone, Copy, Message)]
#[message(reply = usize)]
struct ReplicaCount;

#[derive(Debug, Clone, Copy, Message)]
struct TypesChanged;

impl ReplicatorActor {
    fn is_durable(&self, key: &str) -> bool {
        self.settings
            .durable_keys
            .iter()
            .any(|p| match p.strip_suffix('*') {
                Some(prefix) => key.starts_with(prefix),
                None => p == key,
            })
    }

    /// Installs a new value for `key`: digest, durable store, subscribers.
    fn set(&mut self, key: &str, value: Value) {
        let entry = Entry::new(value);
        if self.is_durable(key) {
            if let Some(store) = &self.durable {
                let result = match &entry.to_wire() {
                    WireEntry::Data { type_name, bytes } => store.store(key, type_name, bytes),
                    WireEntry::Deleted => store.remove(key),
                };
                if let Err(e) = result {
                    tracing::error!("cannot store durable key `{key}`: {e}");
                }
            }
        }
        if let Value::Data(d) = &entry.value {
            if let Some(subs) = self.subscribers.get_mut(key) {
                subs.retain(|notify| notify(d.as_ref()));
            }
        }
        self.entries.insert(key.to_string(), entry);
    }

    /// Merges a replica received from elsewhere; true if it was taken in.
    fn merge_in(&mut self, key: &str, wire: WireEntry) -> bool {
        let merged = match (self.entries.get(key).map(|e| &e.value), wire) {
            (Some(Value::Deleted), _) => return true,
            (_, WireEntry::Deleted) => Value::Deleted,
            (Some(Value::Data(local)), WireEntry::Data { bytes, .. }) => {
                match local.merge_encoded(&bytes) {
                    Ok(m) => Value::Data(m),
                    Err(e) => {
                        tracing::warn!("dropped a replica of `{key}`: {e}");
                        return false;
                    }
                }
            }
            (_, WireEntry::Data { type_name, bytes }) => {
                match self.types.decode(&type_name, &bytes) {
                    Ok(d) => Value::Data(d),
                    Err(e) => {
                        tracing::warn!("dropped a replica of `{key}`: {e}");
                        return false;
                    }
                }
            }
        };
        let unchanged = match (&merged, self.entries.get(key)) {
            (
                Value::Data(m),
                Some(Entry {
                    value: Value::Data(_),
                    digest,
                }),
            ) => fnv1a(m.encode()) == *digest,
            _ => false,
        };
        if !unchanged {
            self.set(key, merged);
        }
        true
    }

    /// Decodes entries loaded from disk whose type is now known.
    fn decode_raw(&mut self) {
        let raw: Vec<(String, String, Vec<u8>)> = self
            .entries
            .iter()
            .filter_map(|(k, e)| match &e.value {
                Value::Raw { type_name, bytes } => {
                    Some((k.clone(), type_name.clone(), bytes.clone()))
                }
                _ => None,
            })
            .collect();
        for (k, t, b) in raw {
            if let Ok(d) = self.types.decode(&t, &b) {
                self.entries.insert(k, Entry::new(Value::Data(d)));
            }
        }
    }
}

impl Actor for ReplicatorActor {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.start_periodic_timer("gossip", GossipTick, self.settings.gossip_interval);
    }
}

#[handlers]
impl ReplicatorActor {
    async fn update(&mut self, u: Update, _ctx: &mut Context<Self>) -> Result<Plan, DataError> {
        let current = match self.entries.get(&u.key).map(|e| &e.value) {
            Some(Value::Deleted) => return Err(DataError::Deleted(u.key)),
            Some(Value::Data(d)) => Some(d.as_ref()),
            _ => None,
        };
        let new = (u.apply)(current)?;
        self.set(&u.key, Value::Data(new));
        Ok(Plan {
            entry: self.entries.get(&u.key).map(Entry::to_wire),
            replicas: self.replicas.clone(),
        })
    }

    async fn delete(&mut self, d: Delete, _ctx: &mut Context<Self>) -> Result<Plan, DataError> {
        self.set(&d.key, Value::Deleted);
        Ok(Plan {
            entry: Some(WireEntry::Deleted),
            replicas: self.replicas.clone(),
        })
    }

    async fn local_read(&mut self, r: LocalRead, _ctx: &mut Context<Self>) -> Plan {
        Plan {
            entry: self.entries.get(&r.key).map(Entry::to_wire),
            replicas: self.replicas.clone(),
        }
    }

    async fn merge(&mut self, m: MergeIn, _ctx: &mut Context<Self>) {
        self.merge_in(&m.key, m.entry);
    }

    async fn snapshot(&mut self, s: Snapshot, _ctx: &mut Context<Self>) -> Option<Box<dyn Erased>> {
        match self.entries.get(&s.key).map(|e| &e.value) {
            Some(Value::Data(d)) => Some(d.clone_box()),
            _ => None,
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

    async fn replicas(&mut self, r: Replicas, _ctx: &mut Context<Self>) {
        self.replicas = r.0;
    }

    async fn types_changed(&mut self, _m: TypesChanged, _ctx: &mut Context<Self>) {
        self.decode_raw();
    }

    async fn write(&mut self, w: DWrite, _ctx: &mut Context<Self>) -> bool {
        self.merge_in(&w.key, w.entry)
    }

    async fn read(&mut self, r: DRead, _ctx: &mut Context<Self>) -> Option<WireEntry> {
        self.entries.get(&r.key).map(Entry::to_wire)
    }

    async fn gossip_tick(&mut self, _t: GossipTick, _ctx: &mut Context<Self>) {
        if self.replicas.is_empty() || self.entries.is_empty() {
            return;
        }
        let to = &self.replicas[fastrand::usize(..self.replicas.len())];
        let _ = to.tell(DStatus {
            from: self.self_node.address.to_string(),
            digests: self
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), e.digest))
                .collect(),
            is_reply: false,
        });
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
            let _ = sender.tell(DStatus {
                from: self.self_node.address.to_string(),
                digests: self
                    .entries
                    .iter()
                    .map(|(k, e)| (k.clone(), e.digest))
                    .collect(),
                is_reply: true,
            });
        }
    }

    async fn gossip(&mut self, g: DGossip, _ctx: &mut Context<Self>) {
        for (k, e) in g.entries {
            self.merge_in(&k, e);
        }
    }
}

/// The distributed-data replicator of this node.
#[derive(Clone)]
pub struct Replicator {
    actor: ActorRef<ReplicatorActor>,
    types: Arc<TypeRegistry>,
    self_node: UniqueAddress,
    min_cap: usize,
}

impl fmt::Debug for Replicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Replicator")
            .field("node", &self.self_node)
            .finish()
    }
}

fn needed(total_with_self: usize, consistency_all: bool, min_cap: usize) -> usize {
    if consistency_all {
        total_with_self
    } else {
        (total_with_self / 2 + 1).max(min_cap.min(total_with_self))
    }
}

impl Replicator {
    /// Starts the replicator on this node: opens the durable store (if any
    /// durable keys are configured) and loads it.
    pub fn start(
        system: &ActorSystem,
        cluster: &Cluster,
        settings: ReplicatorSettings,
    ) -> Result<Replicator, ClusterError> {
        system
            .register_control::<ReplicatorActor, DWrite>()
            .register_control::<ReplicatorActor, DRead>()
            .register_control::<ReplicatorActor, DStatus>()
            .register::<ReplicatorActor, DGossip>();
        let types = TypeRegistry::with_builtins();
        let durable = if settings.durable_keys.is_empty() {
            None
        } else {
            Some(DurableStore::open(&settings.durable_store).map_err(ClusterError)?)
        };
        let mut entries = HashMap::new();
        if let Some(store) = &durable {
            for (key, type_name, bytes) in store.load().map_err(ClusterError)? {
                let value = match types.decode(&type_name, &bytes) {
                    Ok(d) => Value::Data(d),
                    Err(_) => Value::Raw { type_name, bytes },
                };
                entries.insert(key, Entry::new(value));
            }
            tracing::info!(
                "loaded {} durable keys from {}",
                entries.len(),
                settings.durable_store.display()
            );
        }
        let min_cap = settings.majority_min_cap;
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
            let base = match current {
                Some(c) => c.as_any().downcast_ref::<T>().cloned().ok_or_else(|| {
                    DataError::WrongType(format!("key `{key_name}` holds a `{}`", c.type_name()))
                })?,
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

    async fn replicate(
        &self,
        key: &str,
        plan: Plan,
        consistency: WriteConsistency,
    ) -> Result<(), DataError> {
        let (all, timeout) = match consistency {
            WriteConsistency::Local => return Ok(()),
            WriteConsistency::Majority { timeout } => (false, timeout),
            WriteConsistency::All { timeout } => (true, timeout),
        };
        let Some(entry) = plan.entry else {
            return Ok(());
        };
        let need = needed(plan.replicas.len() + 1, all, self.min_cap) - 1;
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
        let (all, timeout) = match consistency {
            ReadConsistency::Local => (false, None),
            ReadConsistency::Majority { timeout } => (false, Some(timeout)),
            ReadConsistency::All { timeout } => (true, Some(timeout)),
        };
        if let Some(timeout) = timeout {
            let need = needed(plan.replicas.len() + 1, all, self.min_cap) - 1;
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
            None => Ok(None),
            Some(d) => d
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

/// Keeps the replicator's list of other replicas up to date with the
/// membership: Up and WeaklyUp members (of the role), this node excluded.
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
        let mut members = snapshot.members;
        loop {
            let replicas: Vec<ActorRef<ReplicatorActor>> = members
                .iter()
                .filter(|m| matches!(m.status, MemberStatus::Up | MemberStatus::WeaklyUp))
                .filter(|m| role.as_deref().is_none_or(|r| m.has_role(r)))
                .filter(|m| &m.node != cluster.self_node())
                .filter_map(|m| {
                    system
                        .resolve(&format!("{}/system/{NAME}", m.node.address))
                        .ok()
                })
                .collect();
            if actor.tell(Replicas(replicas)).is_err() {
                return;
            }
            if events.recv().await.is_err() {
                return;
            }
            while events.try_recv().is_ok() {}
            match cluster.state().await {
                Ok(s) => members = s.members,
                Err(_) => return,
            }
        }
    });
}
