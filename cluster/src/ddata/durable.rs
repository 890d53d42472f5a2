//! Durable keys: entries that are also kept in an embedded store (redb) on
//! local disk, written on every change and loaded at start, so that they
//! survive a restart of every node.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};

/// key -> (type name, encoded replica)
const TABLE: TableDefinition<'_, &str, (&str, &[u8])> = TableDefinition::new("ddata");

/// The durable store of one replicator.
pub(crate) struct DurableStore {
    db: Database,
    path: PathBuf,
}

impl DurableStore {
    /// Opens (or creates) the store; an unreadable or corrupt file is an
    /// error that names it, never silently replaced.
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
        };
        // Make sure the table exists, so that reading an empty store works.
        let w = store.db.begin_write().map_err(|e| store.err(e))?;
        w.open_table(TABLE).map_err(|e| store.err(e))?;
        w.commit().map_err(|e| store.err(e))?;
        Ok(store)
    }

    fn err(&self, e: impl std::fmt::Display) -> String {
        format!("durable store {}: {e}", self.path.display())
    }

    /// Every stored entry: (key, type name, bytes).
    pub(crate) fn load(&self) -> Result<Vec<(String, String, Vec<u8>)>, String> {
        let r = self.db.begin_read().map_err(|e| self.err(e))?;
        let t = r.open_table(TABLE).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for item in t.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let (name, bytes) = v.value();
            out.push((k.value().to_string(), name.to_string(), bytes.to_vec()));
        }
        Ok(out)
    }

    /// Stores one entry (durably: the write is committed before it returns).
    pub(crate) fn store(&self, key: &str, type_name: &str, bytes: &[u8]) -> Result<(), String> {
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = w.open_table(TABLE).map_err(|e| self.err(e))?;
            t.insert(key, (type_name, bytes)).map_err(|e| self.err(e))?;
        }
        w.commit().map_err(|e| self.err(e))
    }

    /// Removes an entry.
    pub(crate) fn remove(&self, key: &str) -> Result<(), String> {
        let w = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut t = w.open_table(TABLE).map_err(|e| self.err(e))?;
            t.remove(key).map_err(|e| self.err(e))?;
        }
        w.commit().map_err(|e| self.err(e))
    }
}
