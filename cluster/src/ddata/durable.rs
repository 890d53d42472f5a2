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

    /// Stores one entry and its pruning marks (durably: the write is
    /// committed before it returns).
    pub(crate) fn store(
        &self,
        key: &str,
        type_name: &str,
        bytes: &[u8],
        pruning: &[u8],
    ) -> Result<(), String> {
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = w.open_table(TABLE).map_err(|e| self.err(e))?;
            t.insert(key, (type_name, bytes)).map_err(|e| self.err(e))?;
            let mut m = w.open_table(PRUNING).map_err(|e| self.err(e))?;
            if pruning.is_empty() {
                m.remove(key).map_err(|e| self.err(e))?;
            } else {
                m.insert(key, pruning).map_err(|e| self.err(e))?;
            }
        }
        w.commit().map_err(|e| self.err(e))
    }

    /// Removes an entry.
    pub(crate) fn remove(&self, key: &str) -> Result<(), String> {
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = w.open_table(TABLE).map_err(|e| self.err(e))?;
            t.remove(key).map_err(|e| self.err(e))?;
            let mut m = w.open_table(PRUNING).map_err(|e| self.err(e))?;
            m.remove(key).map_err(|e| self.err(e))?;
        }
        w.commit().map_err(|e| self.err(e))
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
