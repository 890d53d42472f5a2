//! The data types a replicator can carry, by a stable name: how to decode
//! a replica received from the network or the durable store, how to merge
//! it, and how to encode it. Built-in types are registered at start;
//! others with [`Replicator::register_type`](super::Replicator::register_type).

use super::crdt::ReplicatedData;
use super::{GCounter, LWWRegister, ORSet, PNCounter};
use crate::member::UniqueAddress;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::any::{Any, TypeId};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, RwLock};

/// Replicas larger than this are compressed (zlib) on the wire and on
/// disk: a large OR-set repeats its nodes' addresses in every dot, which
/// compresses about tenfold, so keys of tens of thousands of entries stay
/// within the remote frame limit.
const COMPRESS_ABOVE: usize = 16 * 1024;
/// First byte of an encoded replica: plain MessagePack or compressed.
const PLAIN: u8 = 0;
const ZLIB: u8 = 1;

/// Encodes a value: a marker byte, then MessagePack, compressed if large.
fn encode_value<T: Serialize>(value: &T) -> Vec<u8> {
    let plain = rmp_serde::to_vec(value).expect("replicated data encodes");
    if plain.len() <= COMPRESS_ABOVE {
        let mut out = Vec::with_capacity(plain.len() + 1);
        out.push(PLAIN);
        out.extend_from_slice(&plain);
        return out;
    }
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(vec![ZLIB], flate2::Compression::fast());
    z.write_all(&plain).expect("writing to a Vec");
    z.finish().expect("writing to a Vec")
}

/// Decodes what `encode_value` made (untrusted input: errors, no panics).
fn decode_value<T: DeserializeOwned>(bytes: &[u8], name: &str) -> Result<T, String> {
    let bad = |e: String| format!("a `{name}` did not decode: {e}");
    match bytes.split_first() {
        Some((&PLAIN, rest)) => rmp_serde::from_slice(rest).map_err(|e| bad(e.to_string())),
        Some((&ZLIB, rest)) => {
            use std::io::Read;
            let mut plain = Vec::new();
            // Bounded: a replica never inflates past 64 MiB.
            flate2::read::ZlibDecoder::new(rest)
                .take(64 << 20)
                .read_to_end(&mut plain)
                .map_err(|e| bad(e.to_string()))?;
            rmp_serde::from_slice(&plain).map_err(|e| bad(e.to_string()))
        }
        _ => Err(bad("unknown encoding".into())),
    }
}

/// A replica of some data type, type-erased.
pub(crate) trait Erased: Send + Sync {
    /// Merges a replica of the same type into a new value.
    fn merge_with(&self, other: &dyn Erased) -> Result<Box<dyn Erased>, String>;
    /// See [`ReplicatedData::is_covered_by`] (false for another type).
    fn covered_by(&self, other: &dyn Erased) -> bool;
    /// See [`ReplicatedData::need_pruning_from`].
    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool;
    /// See [`ReplicatedData::modified_by_nodes`].
    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress>;
    /// A copy with `removed`'s changes collapsed into `into`.
    fn pruned(&self, removed: &UniqueAddress, into: &UniqueAddress) -> Box<dyn Erased>;
    /// A copy without `removed`'s changes.
    fn cleaned(&self, removed: &UniqueAddress) -> Box<dyn Erased>;
    fn encode(&self) -> Vec<u8>;
    fn as_any(&self) -> &dyn Any;
    /// The value itself, to be taken by an update without a copy.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
    fn type_name(&self) -> &'static str;
    fn clone_box(&self) -> Box<dyn Erased>;
}

struct Typed<T> {
    value: T,
    name: &'static str,
}

impl<T: ReplicatedData + Serialize + DeserializeOwned> Erased for Typed<T> {
    fn merge_with(&self, other: &dyn Erased) -> Result<Box<dyn Erased>, String> {
        let other = other
            .as_any()
            .downcast_ref::<T>()
            .ok_or_else(|| format!("a `{}` cannot merge a `{}`", self.name, other.type_name()))?;
        Ok(erase(self.value.merge(other), self.name))
    }
    fn covered_by(&self, other: &dyn Erased) -> bool {
        other
            .as_any()
            .downcast_ref::<T>()
            .is_some_and(|other| self.value.is_covered_by(other))
    }
    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool {
        self.value.need_pruning_from(removed)
    }
    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress> {
        self.value.modified_by_nodes()
    }
    fn pruned(&self, removed: &UniqueAddress, into: &UniqueAddress) -> Box<dyn Erased> {
        let mut value = self.value.clone();
        value.prune(removed, into);
        erase(value, self.name)
    }
    fn cleaned(&self, removed: &UniqueAddress) -> Box<dyn Erased> {
        let mut value = self.value.clone();
        value.pruning_cleanup(removed);
        erase(value, self.name)
    }
    fn encode(&self) -> Vec<u8> {
        encode_value(&self.value)
    }
    fn as_any(&self) -> &dyn Any {
        &self.value
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        Box::new(self.value)
    }
    fn type_name(&self) -> &'static str {
        self.name
    }
    fn clone_box(&self) -> Box<dyn Erased> {
        Box::new(Typed {
            value: self.value.clone(),
            name: self.name,
        })
    }
}

/// Wraps a typed value.
pub(crate) fn erase<T: ReplicatedData + Serialize + DeserializeOwned>(
    value: T,
    name: &'static str,
) -> Box<dyn Erased> {
    Box::new(Typed { value, name })
}

type Decode = fn(&[u8], &'static str) -> Result<Box<dyn Erased>, String>;

fn decode<T: ReplicatedData + Serialize + DeserializeOwned>(
    bytes: &[u8],
    name: &'static str,
) -> Result<Box<dyn Erased>, String> {
    let value: T = decode_value(bytes, name)?;
    Ok(erase(value, name))
}

/// The registered data types.
#[derive(Default)]
pub(crate) struct TypeRegistry {
    by_name: RwLock<HashMap<&'static str, Decode>>,
    by_type: RwLock<HashMap<TypeId, &'static str>>,
}

impl TypeRegistry {
    pub(crate) fn with_builtins() -> Arc<Self> {
        let r = TypeRegistry::default();
        r.register::<GCounter>("GCounter");
        r.register::<PNCounter>("PNCounter");
        r.register::<ORSet<String>>("ORSet<String>");
        r.register::<ORSet<u64>>("ORSet<u64>");
        r.register::<LWWRegister<String>>("LWWRegister<String>");
        r.register::<LWWRegister<u64>>("LWWRegister<u64>");
        r.register::<super::ORMap<String, GCounter>>("ORMap<String,GCounter>");
        r.register::<super::ORMap<String, PNCounter>>("ORMap<String,PNCounter>");
        r.register::<super::ORMap<String, ORSet<String>>>("ORMap<String,ORSet<String>>");
        r.register::<super::ORMap<String, LWWRegister<String>>>(
            "ORMap<String,LWWRegister<String>>",
        );
        Arc::new(r)
    }

    pub(crate) fn register<T: ReplicatedData + Serialize + DeserializeOwned>(
        &self,
        name: &'static str,
    ) {
        self.by_name
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name, decode::<T>);
        self.by_type
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(TypeId::of::<T>(), name);
    }

    pub(crate) fn name_of<T: 'static>(&self) -> Option<&'static str> {
        self.by_type
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&TypeId::of::<T>())
            .copied()
    }

    pub(crate) fn decode(&self, name: &str, bytes: &[u8]) -> Result<Box<dyn Erased>, String> {
        let map = self.by_name.read().unwrap_or_else(|e| e.into_inner());
        let (name, d) = map
            .get_key_value(name)
            .ok_or_else(|| format!("data type `{name}` is not registered on this node"))?;
        d(bytes, name)
    }
}
