//! Removal of sharding's internal data from a stopped node's durable
//! store (Akka's `RemoveInternalClusterShardingData`): the coordinator's
//! state and the remembered shards and entities of some entity types.
//!
//! The keys are sharding's own keys in distributed data. Entity type names and
//! shard ids may contain `-`, so a key `shard-a-b-7-0` may be key 0 of
//! shard `b-7` of type `a`, or of shard `7` of type `a-b`. Its owner is
//! decided among the *known* types (the requested ones, and every type
//! with its own `shard-{type}-all` key in the store) for which the split
//! leaves a non-empty shard id:
//!
//! 1. a type whose `shard-{type}-all` set names that shard owns it (the
//!    coordinator records a shard there when it first allocates it, so
//!    before any of its entities is remembered); if several do, the
//!    longest type name;
//! 2. otherwise, the longest known type name (the most specific).
//!
//! A key is removed only if its owner is one of the requested types, and
//! only if it holds what sharding stores there (an `ORSet<String>`, or the
//! coordinator's `LWWRegister<String>`; a value that no longer decodes
//! still counts: removing damaged data is what this is for). Keys that
//! look like a requested type's but are not removed are reported, with
//! the reason.

use crate::internal_keys::{
    coordinator_state_key, remembered_shards_key, REMEMBERED_KEYS_PER_SHARD,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use troupe_cluster::ddata::{DurableStore, DurableStoreError, LWWRegister, ORSet};
use troupe_core::ActorPath;

/// What a removed key held.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum InternalKeyKind {
    /// The coordinator's state (`sharding-coordinator-state-{type}`).
    CoordinatorState,
    /// The set of shards with remembered entities (`shard-{type}-all`).
    RememberedShards,
    /// One of the keys of a shard's remembered entities
    /// (`shard-{type}-{shard}-{n}`).
    RememberedEntities {
        /// The shard.
        shard: String,
    },
}

/// A key that was removed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemovedKey {
    /// The key in distributed data.
    pub key: String,
    /// What it held.
    pub kind: InternalKeyKind,
    /// How many shard ids or entity ids the set held; `None` for the
    /// coordinator's state, or for a value that did not decode.
    pub ids: Option<usize>,
}

/// Why a key that looks like a requested type's was left in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeptReason {
    /// The key belongs to another entity type, whose name starts with the
    /// requested one and a `-`.
    OtherEntityType {
        /// That type.
        type_name: String,
    },
    /// The key holds a value of another data type than sharding stores
    /// there: it is not sharding's.
    NotShardingData {
        /// The registered name of the stored data type.
        stored_type: String,
    },
}

/// A key that was left in the store, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct KeptKey {
    /// The key in distributed data.
    pub key: String,
    /// Why it was kept.
    pub reason: KeptReason,
}

/// What was removed for one entity type.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemovedTypeData {
    /// The entity type.
    pub type_name: String,
    /// The keys removed, in key order (empty if the store held nothing of
    /// this type).
    pub removed: Vec<RemovedKey>,
    /// Keys that look like this type's but were kept.
    pub kept: Vec<KeptKey>,
}

/// The result of [`remove_internal_sharding_data`]: per requested entity
/// type, in the order given, the keys removed. Its `Display` is the
/// report `troupe-node remove-sharding-data` prints.
///
/// ```no_run
/// use std::path::Path;
/// use troupe_sharding::remove_internal_data::{InternalKeyKind, KeptReason};
/// use troupe_sharding::remove_internal_sharding_data;
///
/// let report = remove_internal_sharding_data(Path::new("data/ddata.redb"), &["counter"])?;
/// for t in &report.types {
///     for removed in &t.removed {
///         if let InternalKeyKind::RememberedEntities { shard } = &removed.kind {
///             let ids = removed.ids.unwrap_or(0);
///             println!("{}: forgot {ids} entities of shard {shard}", t.type_name);
///         }
///     }
///     for kept in &t.kept {
///         if let KeptReason::OtherEntityType { type_name } = &kept.reason {
///             println!("{} is left to entity type {type_name}", kept.key);
///         }
///     }
/// }
/// # Ok::<(), troupe_sharding::RemoveError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemovedShardingData {
    /// The durable store worked on.
    pub store: PathBuf,
    /// One entry per requested entity type.
    pub types: Vec<RemovedTypeData>,
}

impl RemovedShardingData {
    /// How many keys were removed, over all the types.
    ///
    /// ```no_run
    /// # use std::path::Path;
    /// # use troupe_sharding::remove_internal_sharding_data;
    /// let removed = remove_internal_sharding_data(Path::new("data/ddata.redb"), &["counter"])?;
    /// if removed.removed_keys() == 0 {
    ///     println!("nothing to remove");
    /// }
    /// # Ok::<(), troupe_sharding::RemoveError>(())
    /// ```
    pub fn removed_keys(&self) -> usize {
        self.types.iter().map(|t| t.removed.len()).sum()
    }
}

impl fmt::Display for InternalKeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InternalKeyKind::CoordinatorState => f.write_str("coordinator state"),
            InternalKeyKind::RememberedShards => f.write_str("remembered shards"),
            InternalKeyKind::RememberedEntities { shard } => {
                write!(f, "remembered entities of shard {shard}")
            }
        }
    }
}

/// `n` and `one` or `many`.
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

impl fmt::Display for RemovedKey {
    /// The key and what it held, e.g. `shard-counter-7-0 (2 remembered
    /// entities of shard 7)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = &self.key;
        match (&self.kind, self.ids) {
            (InternalKeyKind::CoordinatorState, _) => write!(f, "{key} (coordinator state)"),
            (InternalKeyKind::RememberedShards, Some(n)) => write!(
                f,
                "{key} ({})",
                count(n, "remembered shard", "remembered shards")
            ),
            (InternalKeyKind::RememberedEntities { shard }, Some(n)) => write!(
                f,
                "{key} ({} of shard {shard})",
                count(n, "remembered entity", "remembered entities")
            ),
            (kind, None) => write!(f, "{key} ({kind}, unreadable)"),
        }
    }
}

impl fmt::Display for RemovedShardingData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "removed {} of internal sharding data from {}",
            count(self.removed_keys(), "key", "keys"),
            self.store.display()
        )?;
        for t in &self.types {
            if t.removed.is_empty() {
                writeln!(f, "{}: nothing to remove", t.type_name)?;
            } else {
                writeln!(
                    f,
                    "{}: removed {}",
                    t.type_name,
                    count(t.removed.len(), "key", "keys")
                )?;
            }
            for r in &t.removed {
                writeln!(f, "  removed {r}")?;
            }
            for k in &t.kept {
                match &k.reason {
                    KeptReason::OtherEntityType { type_name } => writeln!(
                        f,
                        "  kept {} (it belongs to entity type {type_name})",
                        k.key
                    )?,
                    KeptReason::NotShardingData { stored_type } => writeln!(
                        f,
                        "  kept {} (it holds a {stored_type}, not sharding data)",
                        k.key
                    )?,
                }
            }
        }
        Ok(())
    }
}

/// Why [`remove_internal_sharding_data`] removed nothing.
///
/// ```
/// use troupe_cluster::ddata::DurableStoreError;
/// use troupe_sharding::{remove_internal_sharding_data, RemoveError};
///
/// let store = std::env::temp_dir().join("troupe-doc-no-such-store/ddata.redb");
/// match remove_internal_sharding_data(&store, &["counter"]) {
///     Err(RemoveError::Store(DurableStoreError::NotFound { .. })) => {}
///     Err(RemoveError::Store(DurableStoreError::Locked { .. })) => {
///         eprintln!("a node is running on this store: stop the cluster first")
///     }
///     other => panic!("{other:?}"),
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RemoveError {
    /// No entity type was given.
    NoEntityTypes,
    /// A given name cannot be an entity type's.
    InvalidEntityType {
        /// The name given.
        name: String,
    },
    /// The store could not be opened, read or changed (nothing was
    /// removed). [`DurableStoreError::Locked`] means that a node is
    /// running on it; [`DurableStoreError::NotFound`] that there is no
    /// store at that path.
    Store(DurableStoreError),
}

impl fmt::Display for RemoveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoveError::NoEntityTypes => f.write_str("no entity type given"),
            RemoveError::InvalidEntityType { name } => {
                write!(f, "`{name}` cannot be the name of an entity type")
            }
            RemoveError::Store(DurableStoreError::Locked { path }) => write!(
                f,
                "refusing to remove sharding data: the durable store {} is in use by a running \
                 node (it holds the store's lock); stop every node of the cluster first",
                path.display()
            ),
            RemoveError::Store(e) => write!(f, "nothing removed: {e}"),
        }
    }
}

impl std::error::Error for RemoveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RemoveError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DurableStoreError> for RemoveError {
    fn from(e: DurableStoreError) -> Self {
        RemoveError::Store(e)
    }
}

/// Removes the internal sharding data of entity types `types` from the
/// durable store at `store` (a stopped node's
/// `ReplicatorSettings::durable_store`; `DATA_DIR/ddata.redb` for
/// `troupe-node`): each type's coordinator state
/// (`sharding-coordinator-state-{type}`), its remembered shards
/// (`shard-{type}-all`) and its remembered entities
/// (`shard-{type}-{shard}-{n}`), all in one write transaction. Other
/// keys, including application data and keys of other entity types whose
/// names start with a requested one (see the [module
/// documentation](self)), are left as they are.
///
/// **Only while no node of the cluster runs**: the other nodes still hold
/// the data in memory and would bring it back, and the remembered entities
/// are lost for good (they do not restart until they get a message). A
/// node running on this store holds its lock, and then this fails with
/// [`DurableStoreError::Locked`] inside [`RemoveError::Store`], having
/// changed nothing. A store that does not exist is
/// [`DurableStoreError::NotFound`]; none is created.
///
/// ```no_run
/// use std::path::Path;
/// use troupe_sharding::remove_internal_sharding_data;
///
/// let store = Path::new("troupe-data/troupe-2552/ddata.redb");
/// match remove_internal_sharding_data(store, &["counter", "cart"]) {
///     Ok(report) => print!("{report}"),
///     Err(e) => eprintln!("{e}"),
/// }
/// ```
pub fn remove_internal_sharding_data(
    store: &Path,
    types: &[&str],
) -> Result<RemovedShardingData, RemoveError> {
    let requested = requested_types(types)?;
    let db = DurableStore::open_existing(store)?;
    let keys = db.keys()?;
    // The types with a set of remembered shards of their own, and the
    // shards in it (none if it no longer decodes).
    let mut shard_sets = BTreeMap::new();
    for key in &keys {
        let Some(type_name) = remembered_shards_type(key) else {
            continue;
        };
        match db.get::<ORSet<String>>(key) {
            Ok(Some(set)) => {
                shard_sets.insert(type_name.to_string(), set.elements());
            }
            Ok(None) => {}
            Err(DurableStoreError::Decode { .. }) => {
                shard_sets.insert(type_name.to_string(), BTreeSet::new());
            }
            // Not sharding's.
            Err(DurableStoreError::WrongType { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let plans = plan(&keys, &requested, &shard_sets);
    let mut doomed = Vec::new();
    let mut report = Vec::new();
    for plan in plans {
        let mut removed = Vec::new();
        let mut kept = plan.kept;
        for (key, kind) in plan.remove {
            let read = match kind {
                InternalKeyKind::CoordinatorState => {
                    db.get::<LWWRegister<String>>(&key).map(|v| v.map(|_| None))
                }
                _ => db
                    .get::<ORSet<String>>(&key)
                    .map(|v| v.map(|s| Some(s.len()))),
            };
            match read {
                Ok(Some(ids)) => removed.push(RemovedKey { key, kind, ids }),
                Ok(None) => {}
                Err(DurableStoreError::Decode { .. }) => removed.push(RemovedKey {
                    key,
                    kind,
                    ids: None,
                }),
                Err(DurableStoreError::WrongType { stored, .. }) => kept.push(KeptKey {
                    key,
                    reason: KeptReason::NotShardingData {
                        stored_type: stored,
                    },
                }),
                Err(e) => return Err(e.into()),
            }
        }
        kept.sort_by(|a, b| a.key.cmp(&b.key));
        doomed.extend(removed.iter().map(|r| r.key.clone()));
        report.push(RemovedTypeData {
            type_name: plan.type_name,
            removed,
            kept,
        });
    }
    if !doomed.is_empty() {
        db.remove_keys(&doomed)?;
    }
    Ok(RemovedShardingData {
        store: store.to_path_buf(),
        types: report,
    })
}

/// The requested types, checked, without repetitions, in order.
fn requested_types(types: &[&str]) -> Result<Vec<String>, RemoveError> {
    if types.is_empty() {
        return Err(RemoveError::NoEntityTypes);
    }
    let mut out: Vec<String> = Vec::new();
    for &name in types {
        // The names sharding accepts: its region is an actor named after
        // the type.
        if name.is_empty() || !ActorPath::is_valid_name(&format!("sharding-region-{name}")) {
            return Err(RemoveError::InvalidEntityType {
                name: name.to_string(),
            });
        }
        if !out.iter().any(|t| t == name) {
            out.push(name.to_string());
        }
    }
    Ok(out)
}

/// The type of a `shard-{type}-all` key.
fn remembered_shards_type(key: &str) -> Option<&str> {
    key.strip_prefix("shard-")?
        .strip_suffix("-all")
        .filter(|t| !t.is_empty())
}

/// The `{type}-{shard}` part of a `shard-{type}-{shard}-{n}` key.
fn remembered_entities_rest(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("shard-")?;
    let (rest, n) = rest.rsplit_once('-')?;
    let n: u32 = n.parse().ok().filter(|_| n.len() == 1)?;
    (n < REMEMBERED_KEYS_PER_SHARD).then_some(rest)
}

/// The removals of one requested type, before the stored values are
/// looked at.
#[derive(Debug, PartialEq, Eq)]
struct TypePlan {
    type_name: String,
    remove: Vec<(String, InternalKeyKind)>,
    kept: Vec<KeptKey>,
}

/// Which of `keys` belong to each of the `requested` types, given the
/// remembered-shards sets in the store (`shard_sets`: type -> its shards).
fn plan(
    keys: &[String],
    requested: &[String],
    shard_sets: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<TypePlan> {
    let present: BTreeSet<&str> = keys.iter().map(String::as_str).collect();
    let known: BTreeSet<&str> = requested
        .iter()
        .map(String::as_str)
        .chain(shard_sets.keys().map(String::as_str))
        .collect();
    let mut plans: Vec<TypePlan> = requested
        .iter()
        .map(|t| TypePlan {
            type_name: t.clone(),
            remove: Vec::new(),
            kept: Vec::new(),
        })
        .collect();
    let index: BTreeMap<&str, usize> = requested
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    for (i, t) in requested.iter().enumerate() {
        let keys_of_t = [
            (coordinator_state_key(t), InternalKeyKind::CoordinatorState),
            (remembered_shards_key(t), InternalKeyKind::RememberedShards),
        ];
        for (key, kind) in keys_of_t {
            if present.contains(key.as_str()) {
                plans[i].remove.push((key, kind));
            }
        }
    }
    for key in keys {
        let Some(rest) = remembered_entities_rest(key) else {
            continue;
        };
        // Every split into a known type and a non-empty shard.
        let candidates: Vec<(&str, &str)> = rest
            .match_indices('-')
            .map(|(at, _)| (&rest[..at], &rest[at + 1..]))
            .filter(|(t, s)| !t.is_empty() && !s.is_empty() && known.contains(t))
            .collect();
        let recorded = candidates
            .iter()
            .filter(|(t, s)| shard_sets.get(*t).is_some_and(|set| set.contains(*s)))
            .max_by_key(|(t, _)| t.len());
        let Some(&(owner, shard)) =
            recorded.or_else(|| candidates.iter().max_by_key(|(t, _)| t.len()))
        else {
            continue;
        };
        if let Some(&i) = index.get(owner) {
            plans[i].remove.push((
                key.clone(),
                InternalKeyKind::RememberedEntities {
                    shard: shard.to_string(),
                },
            ));
            continue;
        }
        // It stays: tell the requested types that it looked like theirs.
        for (t, _) in &candidates {
            if *t != owner {
                if let Some(&i) = index.get(t) {
                    plans[i].kept.push(KeptKey {
                        key: key.clone(),
                        reason: KeptReason::OtherEntityType {
                            type_name: owner.to_string(),
                        },
                    });
                }
            }
        }
    }
    for p in &mut plans {
        p.remove.sort_by(|a, b| a.0.cmp(&b.0));
    }
    plans
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &[&str]) -> Vec<String> {
        let mut k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
        k.sort();
        k
    }

    fn types(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    fn sets(s: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        s.iter()
            .map(|(t, shards)| {
                (
                    t.to_string(),
                    shards.iter().map(|s| s.to_string()).collect(),
                )
            })
            .collect()
    }

    /// The keys `plan` removes per type.
    fn removed(plans: &[TypePlan]) -> Vec<(String, Vec<String>)> {
        plans
            .iter()
            .map(|p| {
                (
                    p.type_name.clone(),
                    p.remove.iter().map(|(k, _)| k.clone()).collect(),
                )
            })
            .collect()
    }

    fn owned(pairs: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        pairs
            .iter()
            .map(|(t, k)| (t.to_string(), k.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_type_s_keys_and_nothing_else() {
        let store = keys(&[
            "sharding-coordinator-state-counter",
            "shard-counter-all",
            "shard-counter-7-0",
            "shard-counter-7-4",
            "shard-counter-12-2",
            // Not entity keys: n is one digit below 5.
            "shard-counter-7-5",
            "shard-counter-7-10",
            "shard-counter-7-x",
            "shard-counter-0",
            // Other types, application data.
            "sharding-coordinator-state-counters",
            "shard-cart-all",
            "shard-cart-1-0",
            "counter-42",
            "shard-counterfeit-1-0",
        ]);
        let plans = plan(&store, &types(&["counter"]), &sets(&[]));
        assert_eq!(
            removed(&plans),
            owned(&[(
                "counter",
                &[
                    "shard-counter-12-2",
                    "shard-counter-7-0",
                    "shard-counter-7-4",
                    "shard-counter-all",
                    "sharding-coordinator-state-counter",
                ]
            )])
        );
        assert!(plans[0].kept.is_empty());
        let kinds: BTreeMap<&str, &InternalKeyKind> = plans[0]
            .remove
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        assert_eq!(
            kinds["shard-counter-12-2"],
            &InternalKeyKind::RememberedEntities { shard: "12".into() }
        );
        assert_eq!(
            kinds["shard-counter-all"],
            &InternalKeyKind::RememberedShards
        );
        assert_eq!(
            kinds["sharding-coordinator-state-counter"],
            &InternalKeyKind::CoordinatorState
        );
    }

    #[test]
    fn shard_ids_with_dashes_belong_to_their_type() {
        let store = keys(&["shard-a-all", "shard-a-b-7-0", "shard-a-x-y-z-3"]);
        let plans = plan(&store, &types(&["a"]), &sets(&[("a", &[])]));
        assert_eq!(
            removed(&plans),
            owned(&[("a", &["shard-a-all", "shard-a-b-7-0", "shard-a-x-y-z-3"])])
        );
        assert_eq!(
            plans[0].remove[1].1,
            InternalKeyKind::RememberedEntities {
                shard: "b-7".into()
            }
        );
    }

    #[test]
    fn a_longer_type_with_its_own_shards_keeps_its_keys() {
        let store = keys(&[
            "shard-a-all",
            "shard-a-1-0",
            "shard-a-b-all",
            "shard-a-b-7-0",
            "sharding-coordinator-state-a-b",
        ]);
        let shard_sets = sets(&[("a", &["1"]), ("a-b", &["7"])]);
        let plans = plan(&store, &types(&["a"]), &shard_sets);
        assert_eq!(
            removed(&plans),
            owned(&[("a", &["shard-a-1-0", "shard-a-all"])])
        );
        assert_eq!(
            plans[0].kept,
            [KeptKey {
                key: "shard-a-b-7-0".into(),
                reason: KeptReason::OtherEntityType {
                    type_name: "a-b".into()
                }
            }]
        );
        // Without the set's contents (it did not decode), the longer,
        // more specific type still owns it.
        let plans = plan(&store, &types(&["a"]), &sets(&[("a", &[]), ("a-b", &[])]));
        assert_eq!(
            removed(&plans),
            owned(&[("a", &["shard-a-1-0", "shard-a-all"])])
        );
        // Both requested: each removes its own.
        let plans = plan(&store, &types(&["a", "a-b"]), &shard_sets);
        assert_eq!(
            removed(&plans),
            owned(&[
                ("a", &["shard-a-1-0", "shard-a-all"]),
                (
                    "a-b",
                    &[
                        "shard-a-b-7-0",
                        "shard-a-b-all",
                        "sharding-coordinator-state-a-b"
                    ]
                ),
            ])
        );
        assert!(plans.iter().all(|p| p.kept.is_empty()), "{plans:?}");
    }

    #[test]
    fn the_recorded_shard_decides_over_the_longer_name() {
        // Type `a` has shard `b-7`; type `a-b` exists but has no shard 7.
        let store = keys(&["shard-a-all", "shard-a-b-all", "shard-a-b-7-0"]);
        let shard_sets = sets(&[("a", &["b-7"]), ("a-b", &["9"])]);
        let plans = plan(&store, &types(&["a"]), &shard_sets);
        assert_eq!(
            removed(&plans),
            owned(&[("a", &["shard-a-all", "shard-a-b-7-0"])])
        );
        // So removing `a-b` leaves it to `a`.
        let plans = plan(&store, &types(&["a-b"]), &shard_sets);
        assert_eq!(removed(&plans), owned(&[("a-b", &["shard-a-b-all"])]));
        assert_eq!(
            plans[0].kept,
            [KeptKey {
                key: "shard-a-b-7-0".into(),
                reason: KeptReason::OtherEntityType {
                    type_name: "a".into()
                }
            }]
        );
    }

    #[test]
    fn a_requested_longer_type_without_shards_of_its_own_is_known() {
        // `a-b` has no `shard-a-b-all` (yet), but it is requested with `a`:
        // the more specific name owns the key.
        let store = keys(&["shard-a-all", "shard-a-b-7-0"]);
        let plans = plan(&store, &types(&["a", "a-b"]), &sets(&[("a", &[])]));
        assert_eq!(
            removed(&plans),
            owned(&[("a", &["shard-a-all"]), ("a-b", &["shard-a-b-7-0"])])
        );
    }

    #[test]
    fn an_unknown_longer_type_does_not_shield_a_key() {
        // Nothing says that a type `a-b` exists: the key is `a`'s.
        let store = keys(&["shard-a-b-7-0"]);
        let plans = plan(&store, &types(&["a"]), &sets(&[]));
        assert_eq!(removed(&plans), owned(&[("a", &["shard-a-b-7-0"])]));
    }

    #[test]
    fn a_shorter_type_s_keys_are_not_taken() {
        // Removing `a-b` never touches `a`'s shards, whatever their ids.
        let store = keys(&["shard-a-all", "shard-a-1-0", "shard-a-bc-1-0"]);
        let plans = plan(&store, &types(&["a-b"]), &sets(&[("a", &["1", "bc"])]));
        assert_eq!(removed(&plans), owned(&[("a-b", &[])]));
        assert!(plans[0].kept.is_empty());
    }

    #[test]
    fn entity_keys_are_recognised_exactly() {
        assert_eq!(remembered_entities_rest("shard-a-1-0"), Some("a-1"));
        assert_eq!(remembered_entities_rest("shard-a-1-4"), Some("a-1"));
        assert_eq!(remembered_entities_rest("shard-a-1-5"), None);
        assert_eq!(remembered_entities_rest("shard-a-1-04"), None);
        assert_eq!(remembered_entities_rest("shard-a-1-+1"), None);
        assert_eq!(remembered_entities_rest("shard-a-all"), None);
        assert_eq!(remembered_entities_rest("other-a-1-0"), None);
        assert_eq!(remembered_shards_type("shard-a-b-all"), Some("a-b"));
        assert_eq!(remembered_shards_type("shard--all"), None);
        assert_eq!(remembered_shards_type("shard-all"), None);
    }

    #[test]
    fn type_names_are_checked_and_deduplicated() {
        assert!(matches!(
            requested_types(&[]),
            Err(RemoveError::NoEntityTypes)
        ));
        for bad in ["", "a b", "a/b", "ä"] {
            match requested_types(&["counter", bad]) {
                Err(RemoveError::InvalidEntityType { name }) => assert_eq!(name, bad),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(
            requested_types(&["b", "a", "b"]).unwrap(),
            types(&["b", "a"])
        );
    }
}
