//! Durable keys: entries that are also kept in an embedded store (redb) on
//! local disk, written on every change and loaded at start, so that they
//! survive a restart of every node.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};

/// key -> (type name, encoded replica)
const TABLE: TableDefinition<'_, &str, (&str, &[u8])> = TableDefinition::new("ddata");
/// key -> encoded removed-node pruning marks (only keys that have some):
/// a replica restored from disk must still know what was pruned.
const PRUNING: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("ddata-pruning");

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
        w.open_table(PRUNING).map_err(|e| store.err(e))?;
        w.commit().map_err(|e| store.err(e))?;
        Ok(store)
    }

    fn err(&self, e: impl std::fmt::Display) -> String {
        format!("durable store {}: {e}", self.path.display())
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

    #[test]
    fn marks_are_stored_with_their_entry_and_removed_with_it() {
        let dir = std::env::temp_dir().join(format!(
            "troupe-durable-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
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
}
