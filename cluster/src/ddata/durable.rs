//! Durable keys: entries that are also kept in an embedded store (redb) on
//! local disk, written on every change and loaded at start, so that they
//! survive a restart of every node.
//!
//! The replicator owns its store while it runs. [`DurableStore`] also
//! opens a *stopped* node's store from another program (an operator's
//! tool), to list, read or remove keys; see
//! [`DurableStore::open_existing`].

use super::crdt::ReplicatedData;
use super::types::{Erased, TypeRegistry};
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableError};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// key -> (type name, encoded replica)
const TABLE: TableDefinition<'_, &str, (&str, &[u8])> = TableDefinition::new("ddata");
/// key -> encoded removed-node pruning marks (only keys that have some):
/// a replica restored from disk must still know what was pruned.
const PRUNING: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("ddata-pruning");

/// The durable store of a replicator: the file that keeps its durable
/// keys (`ReplicatorSettings::durable_store`).
///
/// A running replicator holds its store open and locked. Once its node
/// has stopped, [`DurableStore::open_existing`] opens the same file from
/// another program, for instance an operator's tool, to list its keys,
/// read a value, or remove keys for good. The lock works across
/// processes: while a node runs, `open_existing` fails with
/// [`DurableStoreError::Locked`] instead of touching a store in use.
///
/// # Example
///
/// A node writes a durable key and stops; a tool then reads and removes
/// it.
///
/// ```
/// use std::time::Duration;
/// use troupe_cluster::ddata::{
///     DurableStore, Key, ORSet, Replicator, ReplicatorSettings, WriteConsistency,
/// };
/// use troupe_cluster::{Cluster, ClusterSettings};
/// use troupe_core::prelude::*;
/// use troupe_core::remote::RemoteSettings;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("troupe-doc-durable-{}", std::process::id()));
/// let file = dir.join("ddata.redb");
/// // A node with durable keys `orders-*`...
/// let system = ActorSystem::builder("app")
///     .remote(RemoteSettings::new("127.0.0.1:0").with_secret("s3cret"))
///     .build()?;
/// let cluster = Cluster::start(&system, ClusterSettings::default())?;
/// let settings = ReplicatorSettings {
///     durable_keys: vec!["orders-*".into()],
///     durable_store: file.clone(),
///     ..ReplicatorSettings::default()
/// };
/// let replicator = Replicator::start(&system, &cluster, settings)?;
/// let me = cluster.self_node().clone();
/// troupe_core::rt::block_on(async {
///     let key = Key::<ORSet<String>>::new("orders-today");
///     let write = WriteConsistency::Local;
///     replicator
///         .update(&key, ORSet::new(), write, move |mut s| {
///             s.add(&me, "order-1".to_string());
///             s
///         })
///         .await
/// })?;
/// // ...is locked while it runs...
/// assert!(matches!(
///     DurableStore::open_existing(&file),
///     Err(troupe_cluster::ddata::DurableStoreError::Locked { .. })
/// ));
/// troupe_core::rt::block_on(system.shutdown());
///
/// // ...and can be opened once it has stopped.
/// let store = DurableStore::open_existing(&file)?;
/// assert_eq!(store.keys()?, ["orders-today"]);
/// let orders: ORSet<String> = store.get("orders-today")?.expect("stored");
/// assert!(orders.contains(&"order-1".to_string()));
/// assert_eq!(store.remove_keys(&["orders-today"])?, 1);
/// assert!(store.keys()?.is_empty());
/// # drop(store);
/// # let _ = std::fs::remove_dir_all(&dir);
/// # Ok(())
/// # }
/// ```
pub struct DurableStore {
    db: Database,
    path: PathBuf,
    types: Arc<TypeRegistry>,
}

impl fmt::Debug for DurableStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DurableStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Why a [`DurableStore`] could not be opened, read or changed.
///
/// Every variant that concerns the file names it; the `Display` text is a
/// complete message for an operator.
///
/// ```
/// use troupe_cluster::ddata::{DurableStore, DurableStoreError};
///
/// let missing = std::env::temp_dir().join("troupe-doc-no-such-dir/ddata.redb");
/// match DurableStore::open_existing(&missing) {
///     Err(DurableStoreError::NotFound { path }) => assert_eq!(path, missing),
///     Err(DurableStoreError::Locked { path }) => {
///         eprintln!("{} is in use: stop its node first", path.display())
///     }
///     Err(other) => eprintln!("{other}"),
///     Ok(_) => unreachable!("the file does not exist"),
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum DurableStoreError {
    /// There is no store at `path` (none is created).
    NotFound {
        /// The file that does not exist.
        path: PathBuf,
    },
    /// Another process, or another handle in this one (a running
    /// replicator), has the store open.
    Locked {
        /// The store in use.
        path: PathBuf,
    },
    /// The file is not a store this version can read: not a redb database,
    /// damaged, or of an older file format.
    Corrupt {
        /// The unreadable file.
        path: PathBuf,
        /// What redb reported.
        message: String,
    },
    /// Reading or writing the file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// [`DurableStore::get`] asked for another data type than the one
    /// stored under `key`.
    WrongType {
        /// The key read.
        key: String,
        /// The registered name of the stored type.
        stored: String,
        /// The registered name of the requested type.
        requested: String,
    },
    /// [`DurableStore::get`] asked for a data type that has no registered
    /// name (see [`DurableStore::register_type`]).
    TypeNotRegistered {
        /// The Rust name of the type.
        type_name: &'static str,
    },
    /// The value under `key` did not decode.
    Decode {
        /// The key read.
        key: String,
        /// What went wrong.
        message: String,
    },
    /// Any other failure of the store.
    Other {
        /// The file.
        path: PathBuf,
        /// What redb reported.
        message: String,
    },
}

impl fmt::Display for DurableStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DurableStoreError::NotFound { path } => {
                write!(f, "there is no durable store at {}", path.display())
            }
            DurableStoreError::Locked { path } => write!(
                f,
                "the durable store {} is in use by a running node (it holds the store's lock); \
                 stop that node first",
                path.display()
            ),
            DurableStoreError::Corrupt { path, message } => write!(
                f,
                "the durable store {} cannot be read: {message}",
                path.display()
            ),
            DurableStoreError::Io { path, source } => {
                write!(f, "durable store {}: {source}", path.display())
            }
            DurableStoreError::WrongType {
                key,
                stored,
                requested,
            } => write!(
                f,
                "durable key `{key}` holds a `{stored}`, not a `{requested}`"
            ),
            DurableStoreError::TypeNotRegistered { type_name } => write!(
                f,
                "data type `{type_name}` has no registered name (DurableStore::register_type)"
            ),
            DurableStoreError::Decode { key, message } => {
                write!(f, "durable key `{key}` did not decode: {message}")
            }
            DurableStoreError::Other { path, message } => {
                write!(f, "durable store {}: {message}", path.display())
            }
        }
    }
}

impl std::error::Error for DurableStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DurableStoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl DurableStoreError {
    /// Maps any redb error about the store at `path`.
    fn from_redb(path: &Path, e: impl Into<redb::Error>) -> Self {
        let path = path.to_path_buf();
        match e.into() {
            redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => {
                DurableStoreError::Locked { path }
            }
            redb::Error::Corrupted(message) => DurableStoreError::Corrupt { path, message },
            e @ redb::Error::UpgradeRequired(_) => DurableStoreError::Corrupt {
                path,
                message: e.to_string(),
            },
            redb::Error::Io(source) => match source.kind() {
                std::io::ErrorKind::NotFound => DurableStoreError::NotFound { path },
                // What redb reports for a file that is not a database.
                std::io::ErrorKind::InvalidData => DurableStoreError::Corrupt {
                    path,
                    message: source.to_string(),
                },
                _ => DurableStoreError::Io { path, source },
            },
            other => DurableStoreError::Other {
                path,
                message: other.to_string(),
            },
        }
    }
}

impl DurableStore {
    /// Opens (or creates) the store of a replicator; an unreadable or
    /// corrupt file is an error that names it, never silently replaced.
    pub(crate) fn open(path: &Path) -> Result<Self, String> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| {
                format!(
                    "cannot create the directory of durable store {}: {e}",
                    path.display()
                )
            })?;
        }
        let db = Database::create(path).map_err(|e| {
            format!(
                "cannot open the durable distributed-data store {}: {e} (if it is corrupt, move it away \
                 to start without the durable keys it holds)",
                path.display()
            )
        })?;
        let store = DurableStore {
            db,
            path: path.to_path_buf(),
            types: TypeRegistry::with_builtins(),
        };
        // Make sure the table exists, so that reading an empty store works.
        let w = store.db.begin_write().map_err(|e| store.err(e))?;
        w.open_table(TABLE).map_err(|e| store.err(e))?;
        w.open_table(PRUNING).map_err(|e| store.err(e))?;
        w.commit().map_err(|e| store.err(e))?;
        Ok(store)
    }

    /// Opens the existing store at `path`, typically the store of a
    /// stopped node (`ReplicatorSettings::durable_store`), to work on it
    /// from another program. Nothing is created: a missing file is
    /// [`DurableStoreError::NotFound`].
    ///
    /// The store's lock is taken for as long as the returned value lives,
    /// so a node cannot start on it meanwhile; if a node (or anything
    /// else) has it open, this fails with [`DurableStoreError::Locked`].
    /// The whole file is checked on open: a damaged one is
    /// [`DurableStoreError::Corrupt`] (and an interrupted write of a node
    /// that crashed is rolled back, as the node itself would on start).
    ///
    /// ```no_run
    /// use troupe_cluster::ddata::{DurableStore, DurableStoreError};
    ///
    /// match DurableStore::open_existing("troupe-data/troupe-2552/ddata.redb") {
    ///     Ok(store) => println!("{} keys", store.keys().unwrap().len()),
    ///     Err(e @ DurableStoreError::Locked { .. }) => eprintln!("{e}"),
    ///     Err(e) => eprintln!("cannot open it: {e}"),
    /// }
    /// ```
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, DurableStoreError> {
        let path = path.as_ref();
        let db = Database::builder()
            .set_check_integrity_on_open(true)
            .open(path)
            .map_err(|e| DurableStoreError::from_redb(path, e))?;
        Ok(DurableStore {
            db,
            path: path.to_path_buf(),
            types: TypeRegistry::with_builtins(),
        })
    }

    /// The file of this store.
    ///
    /// ```no_run
    /// # use troupe_cluster::ddata::DurableStore;
    /// let store = DurableStore::open_existing("data/ddata.redb")?;
    /// assert_eq!(store.path(), std::path::Path::new("data/ddata.redb"));
    /// # Ok::<(), troupe_cluster::ddata::DurableStoreError>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Gives data type `T` the name it is stored under, for
    /// [`DurableStore::get`]: the name given to
    /// [`Replicator::register_type`](super::Replicator::register_type) on
    /// the nodes. The built-in types are registered already.
    ///
    /// ```no_run
    /// # use troupe_cluster::ddata::{DurableStore, GCounter, ORMap};
    /// # let store = DurableStore::open_existing("data/ddata.redb")?;
    /// store.register_type::<ORMap<String, ORMap<String, GCounter>>>("Nested");
    /// let nested: Option<ORMap<String, ORMap<String, GCounter>>> = store.get("stats")?;
    /// # Ok::<(), troupe_cluster::ddata::DurableStoreError>(())
    /// ```
    pub fn register_type<T: ReplicatedData + Serialize + DeserializeOwned>(
        &self,
        name: &'static str,
    ) {
        self.types.register::<T>(name);
    }

    fn err(&self, e: impl fmt::Display) -> String {
        format!("durable store {}: {e}", self.path.display())
    }

    fn public_err(&self, e: impl Into<redb::Error>) -> DurableStoreError {
        DurableStoreError::from_redb(&self.path, e)
    }

    /// Every key in the store, in order.
    ///
    /// ```no_run
    /// # use troupe_cluster::ddata::DurableStore;
    /// let store = DurableStore::open_existing("data/ddata.redb")?;
    /// for key in store.keys()? {
    ///     println!("{key}");
    /// }
    /// # Ok::<(), troupe_cluster::ddata::DurableStoreError>(())
    /// ```
    pub fn keys(&self) -> Result<Vec<String>, DurableStoreError> {
        let r = self.db.begin_read().map_err(|e| self.public_err(e))?;
        let t = match r.open_table(TABLE) {
            Ok(t) => t,
            // A store that never held a key.
            Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.public_err(e)),
        };
        let mut keys = Vec::new();
        for item in t.iter().map_err(|e| self.public_err(e))? {
            let (k, _) = item.map_err(|e| self.public_err(e))?;
            keys.push(k.value().to_string());
        }
        Ok(keys)
    }

    /// The value stored under `key` (the replica as it was last written
    /// by its node), or `None` if there is no such key. `T` must be the
    /// stored type: a built-in one, or one given to
    /// [`DurableStore::register_type`].
    ///
    /// ```no_run
    /// # use troupe_cluster::ddata::{DurableStore, ORSet};
    /// let store = DurableStore::open_existing("data/ddata.redb")?;
    /// if let Some(shards) = store.get::<ORSet<String>>("shard-counter-all")? {
    ///     println!("{} shards remembered", shards.len());
    /// }
    /// # Ok::<(), troupe_cluster::ddata::DurableStoreError>(())
    /// ```
    pub fn get<T: ReplicatedData + Serialize + DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, DurableStoreError> {
        let requested = self
            .types
            .name_of::<T>()
            .ok_or(DurableStoreError::TypeNotRegistered {
                type_name: std::any::type_name::<T>(),
            })?;
        let r = self.db.begin_read().map_err(|e| self.public_err(e))?;
        let t = match r.open_table(TABLE) {
            Ok(t) => t,
            Err(TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(self.public_err(e)),
        };
        let Some(entry) = t.get(key).map_err(|e| self.public_err(e))? else {
            return Ok(None);
        };
        let (stored, bytes) = entry.value();
        if stored != requested {
            return Err(DurableStoreError::WrongType {
                key: key.to_string(),
                stored: stored.to_string(),
                requested: requested.to_string(),
            });
        }
        let decoded: Box<dyn Erased> =
            self.types
                .decode(stored, bytes)
                .map_err(|message| DurableStoreError::Decode {
                    key: key.to_string(),
                    message,
                })?;
        let value = decoded
            .as_any()
            .downcast_ref::<T>()
            .cloned()
            .ok_or_else(|| DurableStoreError::WrongType {
                key: key.to_string(),
                stored: stored.to_string(),
                requested: requested.to_string(),
            })?;
        Ok(Some(value))
    }

    /// Removes `keys` (with their pruning marks) in one write transaction:
    /// all of them or, if it fails, none. Keys that are not in the store
    /// are ignored. Returns how many keys were removed.
    ///
    /// ```no_run
    /// # use troupe_cluster::ddata::DurableStore;
    /// let store = DurableStore::open_existing("data/ddata.redb")?;
    /// let removed = store.remove_keys(&["orders-2023", "orders-2024"])?;
    /// println!("removed {removed} keys");
    /// # Ok::<(), troupe_cluster::ddata::DurableStoreError>(())
    /// ```
    pub fn remove_keys<S: AsRef<str>>(&self, keys: &[S]) -> Result<usize, DurableStoreError> {
        let w = self.db.begin_write().map_err(|e| self.public_err(e))?;
        let mut removed = 0;
        {
            let mut t = w.open_table(TABLE).map_err(|e| self.public_err(e))?;
            let mut marks = w.open_table(PRUNING).map_err(|e| self.public_err(e))?;
            for key in keys {
                if t.remove(key.as_ref())
                    .map_err(|e| self.public_err(e))?
                    .is_some()
                {
                    removed += 1;
                }
                marks.remove(key.as_ref()).map_err(|e| self.public_err(e))?;
            }
        }
        if removed == 0 {
            // Leaves the file as it was (not even the tables are created).
            w.abort().map_err(|e| self.public_err(e))?;
        } else {
            w.commit().map_err(|e| self.public_err(e))?;
        }
        Ok(removed)
    }

    /// Every stored entry: (key, type name, bytes, pruning marks; empty
    /// when it has none).
    pub(crate) fn load(&self) -> Result<Vec<StoredEntry>, String> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(TABLE).map_err(|e| self.err(e))?;
        let marks = r.open_table(PRUNING).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for item in t.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let (name, bytes) = v.value();
            let pruning = marks
                .get(k.value())
                .map_err(|e| self.err(e))?
                .map(|m| m.value().to_vec())
                .unwrap_or_default();
            out.push(StoredEntry {
                key: k.value().to_string(),
                type_name: name.to_string(),
                bytes: bytes.to_vec(),
                pruning,
            });
        }
        Ok(out)
    }

    /// Writes `changes` (a stored value, or `None` to remove the key) in
    /// one write transaction, durably: committed before it returns, all
    /// of them or, on an error, none.
    pub(crate) fn commit(&self, changes: &[(&str, Option<&StoredValue>)]) -> Result<(), String> {
        #[cfg(test)]
        if faults::failing(&self.path) {
            return Err(self.err("injected failure (tests)"));
        }
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = w.open_table(TABLE).map_err(|e| self.err(e))?;
            let mut m = w.open_table(PRUNING).map_err(|e| self.err(e))?;
            for (key, change) in changes {
                match change {
                    Some(v) => {
                        t.insert(*key, (v.type_name.as_str(), &v.bytes[..]))
                            .map_err(|e| self.err(e))?;
                        if v.pruning.is_empty() {
                            m.remove(*key).map_err(|e| self.err(e))?;
                        } else {
                            m.insert(*key, v.pruning.as_slice())
                                .map_err(|e| self.err(e))?;
                        }
                    }
                    None => {
                        t.remove(*key).map_err(|e| self.err(e))?;
                        m.remove(*key).map_err(|e| self.err(e))?;
                    }
                }
            }
        }
        w.commit().map_err(|e| self.err(e))
    }

    /// Stores one entry and its pruning marks (durably: the write is
    /// committed before it returns).
    #[cfg(test)]
    pub(crate) fn store(
        &self,
        key: &str,
        type_name: &str,
        bytes: &[u8],
        pruning: &[u8],
    ) -> Result<(), String> {
        let value = StoredValue {
            type_name: type_name.to_string(),
            bytes: bytes.into(),
            pruning: pruning.to_vec(),
        };
        self.commit(&[(key, Some(&value))])
    }

    /// Removes an entry.
    #[cfg(test)]
    pub(crate) fn remove(&self, key: &str) -> Result<(), String> {
        self.commit(&[(key, None)])
    }
}

/// What a durable key holds on disk: its type name, its encoded replica
/// (shared with the replicator's copy, not copied) and its pruning marks.
#[derive(Debug, Clone)]
pub(crate) struct StoredValue {
    pub(crate) type_name: String,
    pub(crate) bytes: Arc<[u8]>,
    /// MessagePack of the marks; empty for none.
    pub(crate) pruning: Vec<u8>,
}

/// Where the store thread commits its groups: the store itself, or (in
/// tests) a stand-in that fails or holds a commit on demand.
pub(crate) trait CommitGroup: Send + 'static {
    /// Writes the changes in one transaction (see [`DurableStore::commit`]).
    fn commit_group(&mut self, changes: &[(&str, Option<&StoredValue>)]) -> Result<(), String>;
}

impl CommitGroup for DurableStore {
    fn commit_group(&mut self, changes: &[(&str, Option<&StoredValue>)]) -> Result<(), String> {
        self.commit(changes)
    }
}

/// Called once with the outcome of a commit: `Err` holds a complete
/// message for the caller.
pub(crate) type Committed = Box<dyn FnOnce(Result<(), String>) + Send>;

/// The work of the store thread, in the order the replicator sent it.
enum Job {
    /// The key's new value (`None`: removed).
    Write {
        key: String,
        value: Option<StoredValue>,
    },
    /// Report whether the key's latest write sent before this one is
    /// committed (`Ok` if it was never written, or is on disk).
    Sync { key: String, done: Committed },
}

/// A group is cut at this many jobs or this many bytes of values, so that
/// one commit stays short even when writes pile up.
const MAX_GROUP_JOBS: usize = 4096;
const MAX_GROUP_BYTES: usize = 16 << 20;

/// The replicator's writer of durable keys: a thread of its own that owns
/// the store and commits writes in groups. Whatever queued while a commit
/// (and its disk sync) was under way goes into the next one, a single
/// transaction, so that the number of commits per second does not bound
/// the number of writes; the replicator's actor never waits for the disk.
///
/// Writes are fire-and-forget ([`DurableWriter::write`]); a caller that
/// must know its change is on disk sends [`DurableWriter::sync`] after
/// it, which is answered after the commit of the group holding the key's
/// latest write, with that commit's outcome. A failed commit fails every
/// write of its group (and every later `sync` of their keys until a
/// later write of the key is committed); nothing is acknowledged before
/// it is committed.
pub(crate) struct DurableWriter {
    jobs: Option<std::sync::mpsc::Sender<Job>>,
    /// Answered (or dropped) when the thread has ended and the store is
    /// closed. (In a mutex only to make the writer `Sync`.)
    ended: std::sync::Mutex<Option<oneshot::Receiver<()>>>,
    path: PathBuf,
}

impl DurableWriter {
    /// Starts the store thread on `store` (the file at `path`, for
    /// messages).
    pub(crate) fn start(store: impl CommitGroup, path: &Path) -> Result<Self, String> {
        let (jobs, queue) = std::sync::mpsc::channel();
        let (ended_tx, ended) = oneshot::channel();
        let label = path.display().to_string();
        std::thread::Builder::new()
            .name("troupe-ddata-store".into())
            .spawn(move || {
                run_store_thread(store, queue, &label);
                let _ = ended_tx.send(());
            })
            .map_err(|e| {
                format!(
                    "cannot start the thread of durable store {}: {e}",
                    path.display()
                )
            })?;
        Ok(DurableWriter {
            jobs: Some(jobs),
            ended: std::sync::Mutex::new(Some(ended)),
            path: path.to_path_buf(),
        })
    }

    /// Queues the new value of `key` (`None`: removed) for the next group.
    pub(crate) fn write(&self, key: &str, value: Option<StoredValue>) {
        if let Some(jobs) = &self.jobs {
            // A thread that ended has failed every sync; nothing to add.
            let _ = jobs.send(Job::Write {
                key: key.to_string(),
                value,
            });
        }
    }

    /// Calls `done` once the latest write of `key` queued so far is
    /// committed (at once, from the store thread, if there is none
    /// pending), with the outcome of its commit.
    pub(crate) fn sync(&self, key: &str, done: Committed) {
        let job = Job::Sync {
            key: key.to_string(),
            done,
        };
        let failed = match &self.jobs {
            Some(jobs) => jobs.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        if let Some(Job::Sync { done, .. }) = failed {
            done(Err(format!(
                "durable store {}: its writer has stopped",
                self.path.display()
            )));
        }
    }

    /// Commits what is queued, ends the thread and closes the store (its
    /// lock released) before it returns.
    pub(crate) async fn close(&mut self) {
        self.jobs = None;
        let ended = self
            .ended
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(ended) = ended {
            let _ = ended.await;
        }
    }
}

impl Drop for DurableWriter {
    /// Without [`DurableWriter::close`], the thread still commits what is
    /// queued and closes the store, on its own.
    fn drop(&mut self) {
        self.jobs = None;
    }
}

/// The store thread: commits groups until the writer is dropped, then
/// closes the store.
fn run_store_thread(
    mut store: impl CommitGroup,
    queue: std::sync::mpsc::Receiver<Job>,
    label: &str,
) {
    // Keys whose latest commit failed, with its error: a later sync of
    // such a key fails too, until a write of it is committed.
    let mut failed: HashMap<String, String> = HashMap::new();
    while let Ok(first) = queue.recv() {
        let mut group = vec![first];
        let mut bytes = 0;
        while group.len() < MAX_GROUP_JOBS && bytes < MAX_GROUP_BYTES {
            match queue.try_recv() {
                Ok(job) => {
                    if let Job::Write { value: Some(v), .. } = &job {
                        bytes += v.bytes.len();
                    }
                    group.push(job);
                }
                Err(_) => break,
            }
        }
        // The latest value of each key written in the group.
        let mut latest: HashMap<&str, Option<&StoredValue>> = HashMap::new();
        for job in &group {
            if let Job::Write { key, value } = job {
                latest.insert(key.as_str(), value.as_ref());
            }
        }
        let result = if latest.is_empty() {
            Ok(())
        } else {
            let changes: Vec<(&str, Option<&StoredValue>)> =
                latest.iter().map(|(k, v)| (*k, *v)).collect();
            store.commit_group(&changes).map_err(|e| {
                let message = format!(
                    "the commit of a group of {} durable keys failed, none of them is on disk                      (the values stay in memory and spread by gossip; a retried update writes                      them again): {e}",
                    changes.len()
                );
                tracing::error!("{label}: {message}");
                message
            })
        };
        let written: HashSet<String> = latest.keys().map(|k| k.to_string()).collect();
        match &result {
            Ok(()) => {
                for k in &written {
                    failed.remove(k);
                }
            }
            Err(e) => {
                for k in written.iter() {
                    failed.insert(k.clone(), e.clone());
                }
            }
        }
        drop(latest);
        for job in group {
            if let Job::Sync { key, done } = job {
                let outcome = if written.contains(&key) {
                    result.clone()
                } else {
                    failed.get(&key).map_or(Ok(()), |e| Err(e.clone()))
                };
                done(outcome);
            }
        }
    }
    drop(store);
}

/// A fault switch for tests: commits to the stores named here fail.
#[cfg(test)]
pub(crate) mod faults {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static FAILING: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

    /// Makes every commit to the store at `path` fail (or work again).
    pub(crate) fn fail_commits(path: &Path, fail: bool) {
        let mut failing = FAILING.lock().unwrap_or_else(|e| e.into_inner());
        if fail {
            failing.insert(path.to_path_buf());
        } else {
            failing.remove(path);
        }
    }

    pub(crate) fn failing(path: &Path) -> bool {
        FAILING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(path)
    }
}

/// One entry of the durable store.
pub(crate) struct StoredEntry {
    pub(crate) key: String,
    pub(crate) type_name: String,
    pub(crate) bytes: Vec<u8>,
    /// MessagePack of the marks as (node, state) pairs; empty for none.
    pub(crate) pruning: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddata::crdt::testing::node;
    use crate::ddata::types::erase;
    use crate::ddata::{GCounter, ORSet};

    fn temp_dir(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!(
            "troupe-durable-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ))
    }

    fn set_of(items: &[&str]) -> ORSet<String> {
        let mut s = ORSet::new();
        for i in items {
            s.add(&node(1), i.to_string());
        }
        s
    }

    /// Writes `value` under `key` as the replicator does.
    fn put<T: ReplicatedData + Serialize + DeserializeOwned>(
        store: &DurableStore,
        key: &str,
        name: &'static str,
        value: T,
        marks: &[u8],
    ) {
        store
            .store(key, name, &erase(value, name).encode(), marks)
            .unwrap();
    }

    /// A store whose commits say when they begin and wait for a token
    /// each (so that the test decides what goes into a group), and that
    /// records its group sizes.
    struct Gated {
        store: DurableStore,
        entered: std::sync::mpsc::Sender<()>,
        tokens: std::sync::mpsc::Receiver<()>,
        groups: std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
    }

    /// A gated store on a new store at `path`: its groups, the receiver of
    /// "a commit began" and the sender of tokens.
    #[allow(clippy::type_complexity)]
    fn gated(
        path: &Path,
    ) -> (
        Gated,
        std::sync::Arc<std::sync::Mutex<Vec<usize>>>,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        let (tokens, gate) = std::sync::mpsc::channel();
        let (entered, began) = std::sync::mpsc::channel();
        let groups = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let store = Gated {
            store: DurableStore::open(path).unwrap(),
            entered,
            tokens: gate,
            groups: groups.clone(),
        };
        (store, groups, began, tokens)
    }

    /// Waits until the store thread is inside a commit.
    fn wait_entered(began: &std::sync::mpsc::Receiver<()>) {
        began
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("a commit begins within 10 s");
    }

    impl CommitGroup for Gated {
        fn commit_group(&mut self, changes: &[(&str, Option<&StoredValue>)]) -> Result<(), String> {
            let _ = self.entered.send(());
            self.tokens
                .recv()
                .map_err(|_| "the test ended".to_string())?;
            self.groups.lock().unwrap().push(changes.len());
            self.store.commit(changes)
        }
    }

    fn value(n: u64) -> StoredValue {
        let mut c = GCounter::new();
        c.increment(&node(1), n);
        StoredValue {
            type_name: "GCounter".into(),
            bytes: erase(c, "GCounter").encode().into(),
            pruning: Vec::new(),
        }
    }

    type Outcomes = std::sync::mpsc::Receiver<(String, Result<(), String>)>;

    /// Sends `sync` for `key`; its outcome comes out of the returned
    /// channel's receiver.
    fn sync(
        writer: &DurableWriter,
        key: &str,
        outcomes: &std::sync::mpsc::Sender<(String, Result<(), String>)>,
    ) {
        let (tx, k) = (outcomes.clone(), key.to_string());
        writer.sync(key, Box::new(move |r| tx.send((k, r)).unwrap()));
    }

    /// The next `n` outcomes, waiting at most 10 s for each.
    fn outcomes(rx: &Outcomes, n: usize) -> Vec<(String, Result<(), String>)> {
        (0..n)
            .map(|_| {
                rx.recv_timeout(std::time::Duration::from_secs(10))
                    .expect("an outcome within 10 s")
            })
            .collect()
    }

    #[test]
    fn concurrent_writes_are_committed_in_groups_and_acknowledged_after_their_commit() {
        let dir = temp_dir("group");
        let path = dir.join("ddata.redb");
        let (store, groups, began, tokens) = gated(&path);
        let writer = std::sync::Arc::new(DurableWriter::start(store, &path).unwrap());
        let (out, acks) = std::sync::mpsc::channel();
        // The first write's commit is held: everything the writers send
        // meanwhile queues behind it.
        writer.write("first", Some(value(1)));
        sync(&writer, "first", &out);
        wait_entered(&began);
        // 8 threads, 50 keys each, every key written twice, each write
        // followed by its sync.
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let (writer, out) = (writer.clone(), out.clone());
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let key = format!("k-{t}-{i}");
                        for n in [1, 2] {
                            writer.write(&key, Some(value(n)));
                            sync(&writer, &key, &out);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(
            acks.try_recv().is_err(),
            "nothing is acknowledged before its commit"
        );
        // Two commits: the held one, then one group of the 400 writes.
        tokens.send(()).unwrap();
        tokens.send(()).unwrap();
        let got = outcomes(&acks, 801);
        assert!(got.iter().all(|(_, r)| r.is_ok()), "{got:?}");
        assert_eq!(
            *groups.lock().unwrap(),
            [1, 400],
            "one key, then 400 in one group"
        );
        // A sync with nothing pending is answered without a commit.
        sync(&writer, "k-0-0", &out);
        assert!(outcomes(&acks, 1)[0].1.is_ok());
        // Closing commits nothing more and releases the store.
        let mut writer = std::sync::Arc::into_inner(writer).expect("the threads are done");
        troupe_core::rt::block_on(writer.close());
        let store = DurableStore::open_existing(&path).expect("closed and unlocked");
        assert_eq!(store.keys().unwrap().len(), 401);
        for t in 0..8 {
            for i in 0..50 {
                let c: GCounter = store.get(&format!("k-{t}-{i}")).unwrap().unwrap();
                assert_eq!(c.value(), 2, "the latest write of the key");
            }
        }
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_failed_commit_fails_every_write_of_its_group() {
        let dir = temp_dir("fail");
        let path = dir.join("ddata.redb");
        let (store, groups, began, tokens) = gated(&path);
        let mut writer = DurableWriter::start(store, &path).unwrap();
        let (out, acks) = std::sync::mpsc::channel();
        writer.write("ok", Some(value(1)));
        sync(&writer, "ok", &out);
        wait_entered(&began);
        // Queued behind the held commit: one group of five.
        for i in 0..5 {
            writer.write(&format!("bad-{i}"), Some(value(1)));
            sync(&writer, &format!("bad-{i}"), &out);
        }
        tokens.send(()).unwrap();
        // The second group has begun, so the first commit is done. (The
        // sync of "ok" may have missed the first group and be in this one:
        // its outcome can come with the group's, not before.)
        wait_entered(&began);
        faults::fail_commits(&path, true);
        tokens.send(()).unwrap();
        let mut failed = outcomes(&acks, 6);
        let ok = failed
            .iter()
            .position(|(k, _)| k == "ok")
            .expect("ok's outcome");
        assert_eq!(failed.remove(ok), ("ok".to_string(), Ok(())));
        for (key, r) in &failed {
            let e = r.as_ref().expect_err("the group's commit failed");
            assert!(key.starts_with("bad-"));
            assert!(e.contains("group of 5 durable keys failed"), "{e}");
            assert!(e.contains("none of them is on disk"), "{e}");
            assert!(e.contains(&path.display().to_string()), "{e}");
        }
        // Until a write of it is committed, a failed key stays failed.
        sync(&writer, "bad-0", &out);
        assert!(outcomes(&acks, 1)[0].1.is_err());
        faults::fail_commits(&path, false);
        writer.write("bad-0", Some(value(2)));
        sync(&writer, "bad-0", &out);
        sync(&writer, "bad-1", &out);
        tokens.send(()).unwrap();
        let again = outcomes(&acks, 2);
        assert_eq!(again[0], ("bad-0".to_string(), Ok(())));
        assert!(again[1].1.is_err(), "bad-1 was not written again");
        assert_eq!(*groups.lock().unwrap(), [1, 5, 1]);
        drop(tokens);
        troupe_core::rt::block_on(writer.close());
        // A sync after the writer stopped fails at once, clearly.
        sync(&writer, "ok", &out);
        let (_, r) = &outcomes(&acks, 1)[0];
        assert!(
            r.as_ref().unwrap_err().contains("writer has stopped"),
            "{r:?}"
        );
        let store = DurableStore::open_existing(&path).unwrap();
        assert_eq!(store.keys().unwrap(), ["bad-0", "ok"]);
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn marks_are_stored_with_their_entry_and_removed_with_it() {
        let dir = temp_dir("marks");
        let path = dir.join("store.redb");
        let store = DurableStore::open(&path).unwrap();
        store.store("a", "GCounter", b"one", b"marks").unwrap();
        store.store("b", "GCounter", b"two", b"").unwrap();
        let mut loaded = store.load().unwrap();
        loaded.sort_by(|x, y| x.key.cmp(&y.key));
        assert_eq!(loaded[0].pruning, b"marks");
        assert!(loaded[1].pruning.is_empty());
        store.store("a", "GCounter", b"one", b"").unwrap();
        store.remove("b").unwrap();
        let loaded = store.load().unwrap();
        assert_eq!(loaded.len(), 1);
        assert!(loaded[0].pruning.is_empty(), "marks cleared");
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_missing_store_is_not_found_and_not_created() {
        let dir = temp_dir("missing");
        let path = dir.join("ddata.redb");
        match DurableStore::open_existing(&path) {
            Err(DurableStoreError::NotFound { path: p }) => assert_eq!(p, path),
            other => panic!("expected NotFound, got {other:?}"),
        }
        assert!(
            !dir.exists(),
            "neither the file nor its directory is created"
        );
        // Nor in an existing directory.
        std::fs::create_dir_all(&dir).unwrap();
        let e = DurableStore::open_existing(&path).unwrap_err();
        assert!(matches!(e, DurableStoreError::NotFound { .. }), "{e:?}");
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        assert!(!path.exists());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_store_in_use_is_locked_until_released() {
        let dir = temp_dir("locked");
        let path = dir.join("ddata.redb");
        let in_use = DurableStore::open(&path).unwrap();
        put(&in_use, "k", "GCounter", GCounter::new(), b"");
        let e = DurableStore::open_existing(&path).unwrap_err();
        match &e {
            DurableStoreError::Locked { path: p } => assert_eq!(p, &path),
            other => panic!("expected Locked, got {other:?}"),
        }
        let text = e.to_string();
        assert!(text.contains("in use by a running node"), "{text}");
        assert!(text.contains(&path.display().to_string()), "{text}");
        drop(in_use);
        let store = DurableStore::open_existing(&path).unwrap();
        assert_eq!(store.keys().unwrap(), ["k"]);
        // And the other way round: the store held here keeps a node out.
        let e = DurableStore::open(&path).expect_err("a node cannot open it");
        assert!(e.contains("already open"), "{e}");
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_file_that_is_not_a_store_is_corrupt() {
        let dir = temp_dir("corrupt");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ddata.redb");
        std::fs::write(&path, b"this is not a redb file, it is garbage").unwrap();
        match DurableStore::open_existing(&path) {
            Err(DurableStoreError::Corrupt { path: p, message }) => {
                assert_eq!(p, path);
                assert!(!message.is_empty());
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        // An empty file is not initialised as a new store either.
        std::fs::write(&path, b"").unwrap();
        let e = DurableStore::open_existing(&path).unwrap_err();
        assert!(matches!(e, DurableStoreError::Corrupt { .. }), "{e:?}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn keys_typed_reads_and_removal_in_one_transaction() {
        let dir = temp_dir("remove");
        let path = dir.join("ddata.redb");
        {
            let node_store = DurableStore::open(&path).unwrap();
            put(
                &node_store,
                "b-set",
                "ORSet<String>",
                set_of(&["x", "y"]),
                b"marks",
            );
            put(&node_store, "a-set", "ORSet<String>", set_of(&["z"]), b"");
            put(&node_store, "c-count", "GCounter", GCounter::new(), b"");
        }
        let store = DurableStore::open_existing(&path).unwrap();
        assert_eq!(store.path(), path);
        assert_eq!(store.keys().unwrap(), ["a-set", "b-set", "c-count"]);
        let b: ORSet<String> = store.get("b-set").unwrap().unwrap();
        let elements: Vec<&String> = b.iter().collect();
        assert_eq!(elements, ["x", "y"]);
        assert_eq!(store.get::<ORSet<String>>("nothing").unwrap(), None);
        match store.get::<GCounter>("b-set") {
            Err(DurableStoreError::WrongType {
                key,
                stored,
                requested,
            }) => {
                assert_eq!(key, "b-set");
                assert_eq!(stored, "ORSet<String>");
                assert_eq!(requested, "GCounter");
            }
            other => panic!("expected WrongType, got {other:?}"),
        }
        assert!(matches!(
            store.get::<ORSet<i32>>("b-set"),
            Err(DurableStoreError::TypeNotRegistered { .. })
        ));
        store.register_type::<ORSet<i32>>("ORSet<i32>");
        assert!(matches!(
            store.get::<ORSet<i32>>("b-set"),
            Err(DurableStoreError::WrongType { .. })
        ));
        // Absent keys are not counted, and removing nothing is fine.
        assert_eq!(store.remove_keys::<&str>(&[]).unwrap(), 0);
        assert_eq!(store.remove_keys(&["nothing"]).unwrap(), 0);
        assert_eq!(
            store
                .remove_keys(&[
                    "b-set".to_string(),
                    "nothing".to_string(),
                    "c-count".to_string()
                ])
                .unwrap(),
            2
        );
        assert_eq!(store.keys().unwrap(), ["a-set"]);
        drop(store);
        // Gone for good, with their pruning marks; the rest is intact.
        let node_store = DurableStore::open(&path).unwrap();
        let loaded = node_store.load().unwrap();
        assert_eq!(loaded.len(), 1);
        assert_eq!(loaded[0].key, "a-set");
        let marks = node_store.db.begin_read().unwrap();
        let marks = marks.open_table(PRUNING).unwrap();
        assert!(marks.get("b-set").unwrap().is_none(), "marks removed too");
        drop(marks);
        drop(node_store);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_value_that_does_not_decode_is_an_error_naming_its_key() {
        let dir = temp_dir("decode");
        let path = dir.join("ddata.redb");
        {
            let node_store = DurableStore::open(&path).unwrap();
            node_store
                .store("bad", "ORSet<String>", b"\x00\xc1garbage", b"")
                .unwrap();
        }
        let store = DurableStore::open_existing(&path).unwrap();
        match store.get::<ORSet<String>>("bad") {
            Err(DurableStoreError::Decode { key, .. }) => assert_eq!(key, "bad"),
            other => panic!("expected Decode, got {other:?}"),
        }
        drop(store);
        let _ = std::fs::remove_dir_all(dir);
    }
}
