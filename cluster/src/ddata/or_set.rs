//! An observed-remove set with add-wins semantics, and the version vector
//! it is built on.

use super::crdt::{pairs, ReplicatedData};
use crate::member::UniqueAddress;
use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::ser::SerializeTuple;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;

/// A node in a version vector, shared: the vectors of a set (its history
/// and every element's dot) hold the same few nodes, so copying or
/// merging them copies no address.
type Node = Arc<UniqueAddress>;

/// The source of new versions for this process.
///
/// As in Akka, versions come from one process-wide counter rather than from
/// `vector[node] + 1`: a node's versions then increase across every data
/// value it touches, so a dot it issues is never one that another replica
/// has already seen. That matters when a value is thrown away and started
/// afresh (an [`ORMap`](super::ORMap) key removed and added again): with
/// per-vector counting the fresh set's first dot would repeat an old one
/// and be wrongly taken as already removed elsewhere. A restarted node has a
/// new [`UniqueAddress`] uid, so restarting the counter at zero is safe.
static VERSIONS: AtomicU64 = AtomicU64::new(0);

/// A version for `node` in a vector where it is at `current`: the next
/// process-wide version, or `current + 1` if that is higher (a state pruned
/// into this node may carry versions from elsewhere).
fn next_version(current: u64) -> u64 {
    let next = VERSIONS.fetch_add(1, AtomicOrdering::Relaxed) + 1;
    if next > current {
        next
    } else {
        // Keep later versions above this one too.
        VERSIONS.fetch_max(current + 1, AtomicOrdering::Relaxed);
        current + 1
    }
}

/// A version vector: for each node, the highest version of its changes
/// that this state has seen. Nodes missing from the vector are at 0.
///
/// It is a [`ReplicatedData`] itself (merge takes the highest version per
/// node), and [`ORSet`] uses it both for its history and for the *dots*
/// that tag each element.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct VersionVector {
    /// Version per node; never holds a zero version.
    #[serde(with = "shared_pairs")]
    versions: BTreeMap<Node, u64>,
}

/// A map of shared nodes as a sequence of (node, value) pairs: the same
/// encoding as `pairs` of the nodes themselves.
mod shared_pairs {
    use super::Node;
    use crate::member::UniqueAddress;
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::BTreeMap;
    use std::sync::Arc;

    pub(super) fn serialize<S: Serializer>(
        map: &BTreeMap<Node, u64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter().map(|(n, v)| (&**n, v)))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<Node, u64>, D::Error> {
        let pairs = Vec::<(UniqueAddress, u64)>::deserialize(d)?;
        Ok(pairs.into_iter().map(|(n, v)| (Arc::new(n), v)).collect())
    }
}

impl VersionVector {
    /// The empty vector: every node at 0.
    pub fn new() -> Self {
        VersionVector::default()
    }

    /// A vector with one node at `version`.
    pub fn single(node: &UniqueAddress, version: u64) -> Self {
        Self::single_shared(&Arc::new(node.clone()), version)
    }

    fn single_shared(node: &Node, version: u64) -> Self {
        let mut vv = VersionVector::new();
        if version > 0 {
            vv.versions.insert(node.clone(), version);
        }
        vv
    }

    /// This vector's own copy of `node`, if it has one (to share it).
    fn shared(&self, node: &UniqueAddress) -> Option<&Node> {
        self.versions.get_key_value(node).map(|(n, _)| n)
    }

    /// Whether every node is at 0.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// The version of `node` (0 if absent).
    pub fn version_at(&self, node: &UniqueAddress) -> u64 {
        self.versions.get(node).copied().unwrap_or(0)
    }

    /// The nodes and their versions, in node order.
    pub fn iter(&self) -> impl Iterator<Item = (&UniqueAddress, u64)> + '_ {
        self.versions.iter().map(|(node, &v)| (&**node, v))
    }

    /// Moves `node` to a new, higher version and returns it. As in Akka,
    /// versions come from one process-wide counter, so a node's versions
    /// increase across all the data it changes: they are never reused, but
    /// they are not consecutive either.
    pub fn increment(&mut self, node: &UniqueAddress) -> u64 {
        let version = next_version(self.version_at(node));
        match self.versions.get_mut(node) {
            Some(v) => *v = version,
            None => {
                self.versions.insert(Arc::new(node.clone()), version);
            }
        }
        version
    }

    /// The causal order of two vectors: `Some(Less)` if `self` happened
    /// before `other`, `Some(Equal)` if they are the same, `Some(Greater)`
    /// if after, and `None` if they are concurrent.
    pub fn compare(&self, other: &VersionVector) -> Option<Ordering> {
        let mut less = false;
        let mut greater = false;
        let nodes = self.versions.keys().chain(other.versions.keys());
        for node in nodes.map(|n| &**n) {
            match self.version_at(node).cmp(&other.version_at(node)) {
                Ordering::Less => less = true,
                Ordering::Greater => greater = true,
                Ordering::Equal => {}
            }
        }
        match (less, greater) {
            (false, false) => Some(Ordering::Equal),
            (true, false) => Some(Ordering::Less),
            (false, true) => Some(Ordering::Greater),
            (true, true) => None,
        }
    }
}

impl ReplicatedData for VersionVector {
    fn merge(&self, other: &Self) -> Self {
        let mut versions = self.versions.clone();
        for (node, &theirs) in &other.versions {
            let ours = versions.entry(node.clone()).or_insert(0);
            *ours = (*ours).max(theirs);
        }
        VersionVector { versions }
    }

    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress> {
        self.versions.keys().map(|n| (**n).clone()).collect()
    }

    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool {
        self.versions.contains_key(removed)
    }

    fn prune(&mut self, removed: &UniqueAddress, into: &UniqueAddress) {
        // `into` moves past everything it had, standing in for the removed
        // node's history from now on.
        if self.versions.remove(removed).is_some() {
            self.increment(into);
        }
    }

    fn pruning_cleanup(&mut self, removed: &UniqueAddress) {
        self.versions.remove(removed);
    }
}

/// An observed-remove set (OR-Set) where a concurrent add wins over a
/// remove, implemented without tombstones as Akka's `ORSet` (the "optimised
/// OR-Set" of Bieniusa et al., after Riak's `riak_dt_orswot`).
///
/// The set keeps a version vector of all the adds it has seen, and tags each
/// present element with the *dot* of the add(s) that put it there. A remove
/// simply drops the element. When one replica has an element and the other
/// has not, the dot tells why: if the other replica's vector has seen the
/// dot, it removed the element since, and the element goes; otherwise the
/// other replica has not seen the add yet, and the element stays.
///
/// # Encoding
///
/// In human-readable formats (JSON) a set is its elements with their dots
/// and its version vector, every node written out. In compact formats
/// (MessagePack, as distributed data sends and stores it) each node is
/// written once, in a table, and the dots refer to it by number: a set's
/// elements share a few nodes, so that is most of its size (and of the
/// time to encode and decode it). Both forms of the older encoding, every
/// node written out, are still read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ORSet<T> {
    /// Each present element with its dot (the adds that put it there).
    /// Dots are never empty and never above `vvector`.
    elements: BTreeMap<T, VersionVector>,
    /// Every add this state has seen.
    vvector: VersionVector,
}

impl<T> Default for ORSet<T> {
    fn default() -> Self {
        ORSet {
            elements: BTreeMap::new(),
            vvector: VersionVector::new(),
        }
    }
}

impl<T: Ord + Clone> ORSet<T> {
    /// An empty set.
    pub fn new() -> Self {
        ORSet::default()
    }

    /// Whether `elem` is in the set.
    pub fn contains(&self, elem: &T) -> bool {
        self.elements.contains_key(elem)
    }

    /// The elements, in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.elements.keys()
    }

    /// A copy of the elements.
    pub fn elements(&self) -> BTreeSet<T> {
        self.elements.keys().cloned().collect()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    /// Whether the set has no elements.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// The version vector of all the adds this state has seen.
    pub fn version_vector(&self) -> &VersionVector {
        &self.vvector
    }

    /// The dot of `elem`: the adds that put it in the set (one per node at
    /// most; several only after concurrent adds).
    pub fn dot(&self, elem: &T) -> Option<&VersionVector> {
        self.elements.get(elem)
    }

    /// Adds `elem` as `node` (the local node). Adding an element that is
    /// already present renews its dot, so that the add wins over removes
    /// made concurrently elsewhere.
    pub fn add(&mut self, node: &UniqueAddress, elem: T) {
        let version = self.vvector.increment(node);
        let shared = self.vvector.shared(node).expect("just incremented").clone();
        self.elements
            .insert(elem, VersionVector::single_shared(&shared, version));
    }

    /// Removes `elem`, returning whether it was present. It stays removed
    /// after merges, unless another replica adds it concurrently (add
    /// wins). `node` is unused, as in Akka; it is kept so that all the
    /// mutators look alike and so that delta support can be added later.
    pub fn remove(&mut self, node: &UniqueAddress, elem: &T) -> bool {
        let _ = node;
        // No tombstone: the version vector remembers the add was seen.
        self.elements.remove(elem).is_some()
    }

    /// Removes every element, keeping the history; the same as removing
    /// each one. `node` is unused, as for [`ORSet::remove`].
    pub fn clear(&mut self, node: &UniqueAddress) {
        let _ = node;
        self.elements.clear();
    }

    /// The merged dot of an element: the dots both sides share, plus each
    /// side's own dots that the other side has not seen (the ones it has
    /// seen but no longer has were removed there). `None` means removed.
    fn merge_dots(
        ours: Option<&VersionVector>,
        our_vv: &VersionVector,
        theirs: Option<&VersionVector>,
        their_vv: &VersionVector,
    ) -> Option<VersionVector> {
        let empty = VersionVector::new();
        let (ours, theirs) = (ours.unwrap_or(&empty), theirs.unwrap_or(&empty));
        let mut merged = VersionVector::new();
        for (node, &v) in &ours.versions {
            if theirs.version_at(node) == v || their_vv.version_at(node) < v {
                merged.versions.insert(node.clone(), v);
            }
        }
        for (node, &v) in &theirs.versions {
            if our_vv.version_at(node) >= v {
                continue; // seen by ours
            }
            // A node appears once per dot, but keep the higher to be safe.
            let entry = merged.versions.entry(node.clone()).or_insert(0);
            *entry = (*entry).max(v);
        }
        (!merged.is_empty()).then_some(merged)
    }
}

impl<T: Ord + Clone + Send + Sync + 'static> ReplicatedData for ORSet<T> {
    /// `other` has seen every add `self` has (its vector is not behind),
    /// and each of its elements' adds is either one `self` has not seen or
    /// one `self` has for that element too (nothing `self` removed comes
    /// back): then the merge keeps exactly `other`'s elements and dots.
    fn is_covered_by(&self, other: &Self) -> bool {
        let vv_covered = self
            .vvector
            .versions
            .iter()
            .all(|(node, &v)| other.vvector.version_at(node) >= v);
        if !vv_covered {
            return false;
        }
        // Both element maps in order, side by side.
        let mut ours = self.elements.iter().peekable();
        other.elements.iter().all(|(elem, dot)| {
            while ours.next_if(|(e, _)| *e < elem).is_some() {}
            let mine = ours.next_if(|(e, _)| *e == elem).map(|(_, d)| d);
            dot.versions.iter().all(|(node, &v)| {
                v > self.vvector.version_at(node) || mine.is_some_and(|d| d.version_at(node) == v)
            })
        })
    }

    fn merge(&self, other: &Self) -> Self {
        let mut elements = BTreeMap::new();
        for (elem, dot) in &self.elements {
            let theirs = other.elements.get(elem);
            if let Some(d) = Self::merge_dots(Some(dot), &self.vvector, theirs, &other.vvector) {
                elements.insert(elem.clone(), d);
            }
        }
        for (elem, dot) in &other.elements {
            if self.elements.contains_key(elem) {
                continue; // done above
            }
            if let Some(d) = Self::merge_dots(None, &self.vvector, Some(dot), &other.vvector) {
                elements.insert(elem.clone(), d);
            }
        }
        ORSet {
            elements,
            vvector: self.vvector.merge(&other.vvector),
        }
    }

    fn modified_by_nodes(&self) -> BTreeSet<UniqueAddress> {
        self.vvector.modified_by_nodes()
    }

    fn need_pruning_from(&self, removed: &UniqueAddress) -> bool {
        self.vvector.need_pruning_from(removed)
    }

    fn prune(&mut self, removed: &UniqueAddress, into: &UniqueAddress) {
        let touched: Vec<T> = self
            .elements
            .iter()
            .filter(|(_, dot)| dot.need_pruning_from(removed))
            .map(|(elem, _)| elem.clone())
            .collect();
        self.vvector.prune(removed, into);
        // Re-add the elements the removed node had a hand in, so that their
        // dots name `into` instead, with versions above the new vector.
        for elem in touched {
            self.add(into, elem);
        }
    }

    fn pruning_cleanup(&mut self, removed: &UniqueAddress) {
        self.vvector.pruning_cleanup(removed);
        // An element whose dot named only the removed node is dropped here
        // (Akka keeps it with an empty dot, which the next merge drops
        // anyway); the pruned state this is merged with next re-adds it
        // under `into`.
        self.elements.retain(|_, dot| {
            dot.pruning_cleanup(removed);
            !dot.is_empty()
        });
    }
}

/// The first field of the compact encoding, which older encodings do
/// not have (theirs starts with the elements).
const COMPACT: u8 = 1;

/// An element's dot in the compact encoding: (node number, version)
/// pairs.
struct CompactDot<'a> {
    dot: &'a VersionVector,
    nodes: &'a [&'a Node],
}

/// The number of `node` in the (sorted) node table.
fn node_number(nodes: &[&Node], node: &Node) -> u32 {
    let i = nodes
        .binary_search_by(|n| {
            if Arc::ptr_eq(n, node) {
                Ordering::Equal
            } else {
                n.as_ref().cmp(node.as_ref())
            }
        })
        .expect("every node of a dot is in the table");
    i as u32
}

impl Serialize for CompactDot<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.dot
                .versions
                .iter()
                .map(|(n, v)| (node_number(self.nodes, n), v)),
        )
    }
}

/// The human-readable encoding (and the older compact one): every node
/// written out.
#[derive(Serialize)]
#[serde(rename = "ORSet")]
struct PlainRef<'a, T: Serialize> {
    #[serde(serialize_with = "pairs::serialize")]
    elements: &'a BTreeMap<T, VersionVector>,
    vvector: &'a VersionVector,
}

#[derive(Deserialize)]
#[serde(rename = "ORSet", bound(deserialize = "T: Deserialize<'de> + Ord"))]
struct Plain<T> {
    #[serde(with = "pairs")]
    elements: BTreeMap<T, VersionVector>,
    vvector: VersionVector,
}

impl<T: Serialize> Serialize for ORSet<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            return PlainRef {
                elements: &self.elements,
                vvector: &self.vvector,
            }
            .serialize(s);
        }
        // The node table: the history's nodes (every dot's node is one of
        // them), and any other a dot holds, sorted.
        let mut nodes: Vec<&Node> = self.vvector.versions.keys().collect();
        let strays: BTreeSet<&Node> = self
            .elements
            .values()
            .flat_map(|dot| dot.versions.keys())
            .filter(|n| !self.vvector.versions.contains_key(n.as_ref()))
            .collect();
        if !strays.is_empty() {
            nodes.extend(strays);
            nodes.sort();
        }
        let nodes = &nodes[..];
        let mut t = s.serialize_tuple(4)?;
        t.serialize_element(&COMPACT)?;
        t.serialize_element(&Table(nodes))?;
        t.serialize_element(&Elements {
            elements: &self.elements,
            nodes,
        })?;
        t.serialize_element(&CompactDot {
            dot: &self.vvector,
            nodes,
        })?;
        t.end()
    }
}

/// The node table, as a sequence of nodes.
struct Table<'a>(&'a [&'a Node]);

impl Serialize for Table<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|n| n.as_ref()))
    }
}

/// The elements with their dots, compact.
struct Elements<'a, T> {
    elements: &'a BTreeMap<T, VersionVector>,
    nodes: &'a [&'a Node],
}

impl<T: Serialize> Serialize for Elements<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.elements.iter().map(|(e, dot)| {
            (
                e,
                CompactDot {
                    dot,
                    nodes: self.nodes,
                },
            )
        }))
    }
}

impl<'de, T: Deserialize<'de> + Ord> Deserialize<'de> for ORSet<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            let plain = Plain::<T>::deserialize(d)?;
            return Ok(ORSet::from_parts(plain.elements, plain.vvector));
        }
        d.deserialize_seq(ORSetVisitor(PhantomData))
    }
}

impl<T: Ord> ORSet<T> {
    /// A set from decoded parts, its dots sharing the history's nodes.
    fn from_parts(mut elements: BTreeMap<T, VersionVector>, vvector: VersionVector) -> Self {
        for dot in elements.values_mut() {
            if dot
                .versions
                .keys()
                .all(|n| vvector.shared(n).is_some_and(|s| Arc::ptr_eq(s, n)))
            {
                continue;
            }
            dot.versions = std::mem::take(&mut dot.versions)
                .into_iter()
                .map(|(n, v)| (vvector.shared(&n).cloned().unwrap_or(n), v))
                .collect();
        }
        ORSet { elements, vvector }
    }
}

struct ORSetVisitor<T>(PhantomData<fn() -> T>);

/// The first field of a compact set: the `COMPACT` mark, or (the older
/// encoding) the elements with their dots.
enum First<T> {
    Compact(u64),
    Plain(BTreeMap<T, VersionVector>),
}

struct FirstSeed<T>(PhantomData<fn() -> T>);

impl<'de, T: Deserialize<'de> + Ord> DeserializeSeed<'de> for FirstSeed<T> {
    type Value = First<T>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<First<T>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: Deserialize<'de> + Ord> Visitor<'de> for FirstSeed<T> {
    type Value = First<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the compact OR-set mark or the elements of an OR-set")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<First<T>, E> {
        Ok(First::Compact(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<First<T>, A::Error> {
        let mut elements = BTreeMap::new();
        while let Some((e, dot)) = seq.next_element::<(T, VersionVector)>()? {
            elements.insert(e, dot);
        }
        Ok(First::Plain(elements))
    }
}

/// Decodes compact (node number, version) pairs into a vector of the
/// table's nodes.
struct DotSeed<'a>(&'a [Node]);

impl<'de> DeserializeSeed<'de> for DotSeed<'_> {
    type Value = VersionVector;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<VersionVector, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for DotSeed<'_> {
    type Value = VersionVector;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(node number, version) pairs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<VersionVector, A::Error> {
        let mut versions = BTreeMap::new();
        while let Some((i, v)) = seq.next_element::<(u32, u64)>()? {
            let node = self.0.get(i as usize).ok_or_else(|| {
                de::Error::custom(format!(
                    "an OR-set dot names node {i} of a table of {}",
                    self.0.len()
                ))
            })?;
            versions.insert(node.clone(), v);
        }
        Ok(VersionVector { versions })
    }
}

/// Decodes the compact elements: (element, dot) pairs, in order.
struct ElementsSeed<'a, T> {
    nodes: &'a [Node],
    _t: PhantomData<fn() -> T>,
}

impl<'de, T: Deserialize<'de> + Ord> DeserializeSeed<'de> for ElementsSeed<'_, T> {
    type Value = BTreeMap<T, VersionVector>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de> + Ord> Visitor<'de> for ElementsSeed<'_, T> {
    type Value = BTreeMap<T, VersionVector>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the elements of an OR-set with their dots")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut pairs = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(pair) = seq.next_element_seed(ElementSeed {
            nodes: self.nodes,
            _t: PhantomData,
        })? {
            pairs.push(pair);
        }
        // In order already: built in one pass.
        Ok(pairs.into_iter().collect())
    }
}

/// One (element, dot) pair of the compact encoding.
struct ElementSeed<'a, T> {
    nodes: &'a [Node],
    _t: PhantomData<fn() -> T>,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for ElementSeed<'_, T> {
    type Value = (T, VersionVector);

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_tuple(2, self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for ElementSeed<'_, T> {
    type Value = (T, VersionVector);

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an element and its dot")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let missing = || de::Error::custom("an OR-set element without its dot");
        let elem = seq.next_element()?.ok_or_else(missing)?;
        let dot = seq
            .next_element_seed(DotSeed(self.nodes))?
            .ok_or_else(missing)?;
        Ok((elem, dot))
    }
}

impl<'de, T: Deserialize<'de> + Ord> Visitor<'de> for ORSetVisitor<T> {
    type Value = ORSet<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an OR-set")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ORSet<T>, A::Error> {
        let missing = || de::Error::custom("an OR-set with fields missing");
        match seq
            .next_element_seed(FirstSeed(PhantomData))?
            .ok_or_else(missing)?
        {
            First::Plain(elements) => {
                let vvector: VersionVector = seq.next_element()?.ok_or_else(missing)?;
                Ok(ORSet::from_parts(elements, vvector))
            }
            First::Compact(mark) if mark == u64::from(COMPACT) => {
                let nodes: Vec<Node> = seq
                    .next_element::<Vec<UniqueAddress>>()?
                    .ok_or_else(missing)?
                    .into_iter()
                    .map(Arc::new)
                    .collect();
                let elements = seq
                    .next_element_seed(ElementsSeed {
                        nodes: &nodes,
                        _t: PhantomData,
                    })?
                    .ok_or_else(missing)?;
                let vvector = seq
                    .next_element_seed(DotSeed(&nodes))?
                    .ok_or_else(missing)?;
                Ok(ORSet { elements, vvector })
            }
            First::Compact(mark) => Err(de::Error::custom(format!(
                "an OR-set in an unknown encoding ({mark})"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddata::crdt::testing::{check_laws, node, run, steps};
    use proptest::prelude::*;

    fn set_of(items: &[u8]) -> BTreeSet<u8> {
        items.iter().copied().collect()
    }

    #[test]
    fn add_remove_contains() {
        let a = node(1);
        let mut s = ORSet::new();
        assert!(s.is_empty());
        s.add(&a, 1u8);
        s.add(&a, 2);
        assert!(s.contains(&1));
        assert_eq!(s.len(), 2);
        assert!(s.remove(&a, &1));
        assert!(!s.remove(&a, &1));
        assert_eq!(s.elements(), set_of(&[2]));
        s.clear(&a);
        assert!(s.is_empty());
        assert!(s.version_vector().version_at(&a) > 0);
    }

    #[test]
    fn concurrent_add_and_remove_add_wins() {
        let (a, b) = (node(1), node(2));
        let mut x = ORSet::new();
        x.add(&a, "e");
        let mut y = x.clone();
        // `a` removes while `b`, concurrently, adds the same element again.
        x.remove(&a, &"e");
        y.add(&b, "e");
        assert!(x.merge(&y).contains(&"e"));
        assert!(y.merge(&x).contains(&"e"));
    }

    #[test]
    fn remove_of_a_seen_add_sticks() {
        let (a, b) = (node(1), node(2));
        let mut x = ORSet::new();
        x.add(&a, "e");
        x.add(&a, "f");
        let mut y = ORSet::new().merge(&x);
        y.remove(&b, &"e");
        // x still has "e", but y has seen its add and removed it since.
        let m = x.merge(&y);
        assert_eq!(m.iter().copied().collect::<Vec<_>>(), vec!["f"]);
        assert_eq!(y.merge(&x), m);
    }

    #[test]
    fn remove_then_re_add() {
        let (a, b) = (node(1), node(2));
        let mut x = ORSet::new();
        x.add(&a, 7u8);
        let y = x.clone();
        x.remove(&a, &7);
        x.add(&a, 7);
        assert!(x.merge(&y).contains(&7));
        x.remove(&a, &7);
        assert!(!x.merge(&y).contains(&7));
        // Re-added by another node that had seen the remove.
        let mut z = y.merge(&x);
        assert!(!z.contains(&7));
        z.add(&b, 7);
        assert!(z.merge(&x).contains(&7));
        assert!(x.merge(&z).contains(&7));
    }

    #[test]
    fn concurrent_adds_of_one_element_keep_both_dots() {
        let (a, b, c) = (node(1), node(2), node(3));
        let mut x = ORSet::new();
        let mut y = ORSet::new();
        x.add(&a, 1u8);
        y.add(&b, 1u8);
        let m = x.merge(&y);
        // Removing after seeing only one of the adds leaves the other.
        let mut z = ORSet::new().merge(&x);
        z.remove(&c, &1);
        assert!(m.merge(&z).contains(&1));
        let mut w = m.clone();
        w.remove(&c, &1);
        assert!(!w.merge(&x).merge(&y).contains(&1));
    }

    #[test]
    fn clear_removes_only_what_was_seen() {
        let (a, b) = (node(1), node(2));
        let mut x = ORSet::new();
        x.add(&a, 1u8);
        let mut y = x.clone();
        y.add(&b, 2);
        x.clear(&a);
        assert_eq!(x.merge(&y).elements(), set_of(&[2]));
    }

    #[test]
    fn version_vector_order() {
        let (a, b) = (node(1), node(2));
        let mut x = VersionVector::new();
        assert_eq!(x.compare(&VersionVector::new()), Some(Ordering::Equal));
        x.increment(&a);
        let mut y = x.clone();
        y.increment(&b);
        assert_eq!(x.compare(&y), Some(Ordering::Less));
        assert_eq!(y.compare(&x), Some(Ordering::Greater));
        x.increment(&a);
        assert_eq!(x.compare(&y), None);
        let m = x.merge(&y);
        assert_eq!(m.compare(&x), Some(Ordering::Greater));
        assert_eq!(m.version_at(&a), x.version_at(&a));
        assert_eq!(m.iter().count(), 2);
        assert_eq!(VersionVector::single(&a, 0), VersionVector::new());
    }

    #[test]
    fn prune_renames_the_removed_node() {
        let (a, b, gone) = (node(1), node(2), node(3));
        let mut s = ORSet::new();
        s.add(&a, 1u8);
        s.add(&gone, 2);
        s.add(&gone, 3);
        s.remove(&a, &3);
        let stale = s.clone();
        assert!(s.need_pruning_from(&gone));
        s.prune(&gone, &b);
        assert!(!s.need_pruning_from(&gone));
        assert_eq!(s.elements(), set_of(&[1, 2]));
        assert_eq!(s.modified_by_nodes(), [a, b].into_iter().collect());
        // A replica that learns of the pruning cleans up, then merges.
        let mut cleaned = stale;
        cleaned.pruning_cleanup(&gone);
        assert!(!cleaned.need_pruning_from(&gone));
        assert_eq!(cleaned.merge(&s).elements(), set_of(&[1, 2]));
        assert_eq!(s.merge(&cleaned), cleaned.merge(&s));
    }

    #[test]
    fn serde_round_trip() {
        let mut s = ORSet::new();
        s.add(&node(1), (1u8, String::from("a")));
        s.add(&node(2), (2u8, String::from("b")));
        s.remove(&node(2), &(1u8, String::from("a")));
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            serde_json::from_str::<ORSet<(u8, String)>>(&json).unwrap(),
            s
        );
        let bytes = rmp_serde::to_vec(&s).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<ORSet<(u8, String)>>(&bytes).unwrap(),
            s
        );
    }

    /// The encoding of `s` before the compact one (every node written
    /// out), as MessagePack.
    fn plain_bytes<T: Serialize>(s: &ORSet<T>) -> Vec<u8> {
        rmp_serde::to_vec(&PlainRef {
            elements: &s.elements,
            vvector: &s.vvector,
        })
        .unwrap()
    }

    fn hundred_ids() -> ORSet<String> {
        let mut s = ORSet::new();
        for i in 0..100 {
            s.add(&node(i % 3), format!("entity-{i}"));
        }
        s.remove(&node(1), &"entity-7".to_string());
        s
    }

    #[test]
    fn the_compact_encoding_writes_each_node_once_and_reads_back() {
        let s = hundred_ids();
        let compact = rmp_serde::to_vec(&s).unwrap();
        let plain = plain_bytes(&s);
        assert!(
            compact.len() * 2 < plain.len(),
            "{} bytes compact, {} plain",
            compact.len(),
            plain.len()
        );
        let back: ORSet<String> = rmp_serde::from_slice(&compact).unwrap();
        assert_eq!(back, s);
        // The same bytes again (digests compare encodings).
        assert_eq!(rmp_serde::to_vec(&back).unwrap(), compact);
        // Decoded dots share the table's nodes.
        let table = back.vvector.shared(&node(1)).unwrap();
        let dot = back.dot(&"entity-1".to_string()).unwrap();
        assert!(Arc::ptr_eq(dot.shared(&node(1)).unwrap(), table));
        // An empty set too.
        let empty: ORSet<String> = ORSet::new();
        let bytes = rmp_serde::to_vec(&empty).unwrap();
        assert_eq!(
            rmp_serde::from_slice::<ORSet<String>>(&bytes).unwrap(),
            empty
        );
    }

    #[test]
    fn the_older_encoding_is_still_read() {
        let s = hundred_ids();
        let back: ORSet<String> = rmp_serde::from_slice(&plain_bytes(&s)).unwrap();
        assert_eq!(back, s);
        let table = back.vvector.shared(&node(2)).unwrap();
        let dot = back.dot(&"entity-2".to_string()).unwrap();
        assert!(
            Arc::ptr_eq(dot.shared(&node(2)).unwrap(), table),
            "shared after decoding"
        );
        let empty: ORSet<String> = ORSet::new();
        let old: ORSet<String> = rmp_serde::from_slice(&plain_bytes(&empty)).unwrap();
        assert_eq!(old, empty);
        // A dot whose node is not in the history (never made by this
        // type's operations, but valid to encode).
        let mut odd = s.clone();
        odd.elements
            .insert("stray".to_string(), VersionVector::single(&node(9), 5));
        let bytes = rmp_serde::to_vec(&odd).unwrap();
        assert_eq!(rmp_serde::from_slice::<ORSet<String>>(&bytes).unwrap(), odd);
    }

    #[test]
    fn a_compact_set_naming_a_node_it_lacks_is_an_error() {
        // Mark, a table of one node, an element whose dot names node 3.
        let bad = (
            COMPACT,
            vec![node(1)],
            vec![("e".to_string(), vec![(3u32, 1u64)])],
            vec![(0u32, 1u64)],
        );
        let bytes = rmp_serde::to_vec(&bad).unwrap();
        let e = rmp_serde::from_slice::<ORSet<String>>(&bytes).unwrap_err();
        assert!(e.to_string().contains("node 3 of a table of 1"), "{e}");
        let unknown = (7u8, Vec::<UniqueAddress>::new(), (), ());
        let e = rmp_serde::from_slice::<ORSet<String>>(&rmp_serde::to_vec(&unknown).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("unknown encoding (7)"), "{e}");
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u8),
        Remove(u8),
        Clear,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..5u8).prop_map(Op::Add),
            3 => (0..5u8).prop_map(Op::Remove),
            1 => Just(Op::Clear),
        ]
    }

    proptest! {
        #[test]
        fn merge_laws_and_add_wins(s in steps(op())) {
            let replicas = run::<ORSet<u8>, Op>(
                &s,
                |set, n, op| match op {
                    Op::Add(e) => set.add(n, *e),
                    Op::Remove(e) => {
                        set.remove(n, e);
                    }
                    Op::Clear => set.clear(n),
                },
                |before, incoming, after| {
                    // An add one side has and the other has not seen survives.
                    for (x, y) in [(before, incoming), (incoming, before)] {
                        for (e, dot) in &x.elements {
                            if dot.compare(&y.vvector) != Some(Ordering::Less)
                                && dot.compare(&y.vvector) != Some(Ordering::Equal)
                            {
                                prop_assert!(after.contains(e), "lost add of {}", e);
                            }
                        }
                    }
                    // Nothing appears from nowhere.
                    for e in after.iter() {
                        prop_assert!(before.contains(e) || incoming.contains(e));
                    }
                    prop_assert_eq!(&after.vvector, &before.vvector.merge(&incoming.vvector));
                    Ok(())
                },
            )?;
            let [a, b, c] = &replicas;
            check_laws(a, b, c)?;
            // Covered exactly when the merge is the other state.
            for (x, y) in [(a, b), (b, a), (a, c), (c, a), (b, c), (c, b)] {
                let merged = x.merge(y);
                prop_assert_eq!(x.is_covered_by(y), &merged == y, "{:?} into {:?}", x, y);
                prop_assert!(x.is_covered_by(&merged));
            }
            // Replicas that exchange everything agree.
            let all = a.merge(b).merge(c);
            prop_assert_eq!(c.merge(b).merge(a), all);
        }
    }

    fn apply(set: &mut ORSet<u8>, n: &UniqueAddress, op: &Op) {
        match op {
            Op::Add(e) => set.add(n, *e),
            Op::Remove(e) => {
                set.remove(n, e);
            }
            Op::Clear => set.clear(n),
        }
    }

    proptest! {
        #[test]
        fn prune_keeps_the_elements(s in steps(op())) {
            let [a, b, c] = run::<ORSet<u8>, Op>(&s, apply, |_, _, _| Ok(()))?;
            let (gone, into) = (node(0), node(1));
            let mut pruned = b.clone();
            pruned.prune(&gone, &into);
            prop_assert!(!pruned.need_pruning_from(&gone));
            prop_assert_eq!(pruned.elements(), b.elements());
            let mut cleaned = a.clone();
            cleaned.pruning_cleanup(&gone);
            let m = cleaned.merge(&pruned);
            prop_assert!(!m.need_pruning_from(&gone));
            prop_assert_eq!(&m, &pruned.merge(&cleaned));
            // Once the others have cleaned up, merging is a lattice again.
            let mut cleaned_c = c.clone();
            cleaned_c.pruning_cleanup(&gone);
            check_laws(&cleaned, &pruned, &cleaned_c)?;
        }
    }
}
