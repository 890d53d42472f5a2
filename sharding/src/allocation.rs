//! Shard allocation: where the coordinator puts a new shard, and which shards
//! it moves to even out the load (Pekko's `ShardAllocationStrategy`).
//!
//! The coordinator asks its [`ShardAllocationStrategy`] two questions:
//!
//! - [`allocate_shard`](ShardAllocationStrategy::allocate_shard): a region
//!   asked for the home of a shard that has none; which region gets it?
//! - [`rebalance`](ShardAllocationStrategy::rebalance): every
//!   `rebalance-interval`, which shards should be handed off now? Each of them
//!   is stopped where it is and allocated again (with `allocate_shard`) when
//!   the hand-off is done.
//!
//! Two strategies are built in, both ports of Apache Pekko's:
//!
//! - [`LeastShardAllocationStrategy`] (the default): a new shard goes to the
//!   region with the fewest shards; rebalancing moves shards from regions
//!   above the optimal count to regions below it, a limited number per round.
//! - [`ConsistentHashingShardAllocationStrategy`]: a shard goes to the node
//!   that owns its id on a consistent-hash ring of the regions' nodes, so
//!   shards with the same id of different entity types end up on the same
//!   node, and a node joining or leaving moves only the shards it gains or
//!   loses.
//!
//! Both rebalance only at a good time (as Pekko): never while a member is
//! unreachable (the hand-off could not complete) or while a member is still
//! joining (it will be Up soon, and then it should get its share too).

use std::collections::{BTreeMap, BTreeSet};
use troupe_cluster::{CurrentClusterState, Member, MemberStatus, UniqueAddress};
use troupe_core::remote::Address;

/// The id of a shard.
pub use crate::extractor::ShardId;

/// A region is identified by the node it runs on (one region per entity
/// type per node).
pub type RegionId = UniqueAddress;

/// Which shards each region hosts now (regions with no shards are present
/// with an empty `Vec`). Each region's shards are in the order they were
/// allocated to it, oldest first; the built-in strategies move the oldest
/// shards first, as Pekko's do.
pub type ShardAllocations = BTreeMap<RegionId, Vec<ShardId>>;

/// What a strategy may read about the cluster when it decides.
#[derive(Debug, Clone, Copy)]
pub struct ClusterView<'a> {
    /// The cluster as the coordinator's node sees it now.
    pub state: &'a CurrentClusterState,
    /// The node the coordinator runs on.
    pub self_node: &'a UniqueAddress,
}

impl<'a> ClusterView<'a> {
    /// A view of `state`, seen from `self_node`.
    pub fn new(state: &'a CurrentClusterState, self_node: &'a UniqueAddress) -> Self {
        ClusterView { state, self_node }
    }

    /// The member that runs on `node`, if the cluster state knows it (a
    /// region can be registered before its member shows up in this node's
    /// view, and after it was removed).
    pub fn member(&self, node: &UniqueAddress) -> Option<&'a Member> {
        self.state.members.iter().find(|m| m.node == *node)
    }

    /// True when the membership is settled enough for a rebalance (Pekko's
    /// `isAGoodTimeToRebalance`, cluster part): no member is unreachable (a
    /// hand-off needs every region to acknowledge it) and no member is
    /// Joining or WeaklyUp (it will be Up soon, and should get its share).
    pub fn is_settled(&self) -> bool {
        let unreachable: BTreeSet<&UniqueAddress> =
            self.state.unreachable.iter().map(|m| &m.node).collect();
        !self.state.members.iter().any(|m| {
            unreachable.contains(&m.node)
                || matches!(m.status, MemberStatus::Joining | MemberStatus::WeaklyUp)
        })
    }
}

/// The pluggable allocation and rebalancing logic of the shard coordinator
/// (Pekko's `ShardCoordinator.ShardAllocationStrategy`).
///
/// Unlike Pekko's, this trait is synchronous on purpose: it runs inside the
/// coordinator actor, between two messages, with the coordinator's state at
/// hand. A strategy must therefore answer at once and must not block; one
/// that needs remote information should keep it up to date itself (for
/// example from an actor that feeds it) and answer from what it has.
/// Returning `None` from `allocate_shard` is the way to say "not now": the
/// requesting region asks again after its retry interval.
///
/// The trait is object safe; the coordinator holds a
/// `Box<dyn ShardAllocationStrategy>`. One instance serves one entity type
/// (strategies may keep state, such as a cached hash ring).
pub trait ShardAllocationStrategy: Send + 'static {
    /// Where to put `shard`, first requested by region `requester`. `None`:
    /// don't allocate now (the requester retries).
    ///
    /// `current` holds the regions that may take the shard (the coordinator
    /// leaves out regions that are shutting down) with the shards they host;
    /// the answer must be one of its keys.
    fn allocate_shard(
        &mut self,
        requester: &RegionId,
        shard: &ShardId,
        current: &ShardAllocations,
        cluster: &ClusterView<'_>,
    ) -> Option<RegionId>;

    /// Which shards to move now (hand off); `in_progress` are shards being
    /// rebalanced already, and must not be in the answer. An empty answer
    /// skips this round.
    fn rebalance(
        &mut self,
        current: &ShardAllocations,
        in_progress: &BTreeSet<ShardId>,
        cluster: &ClusterView<'_>,
    ) -> BTreeSet<ShardId>;
}

/// A boxed strategy is a strategy (so code generic over strategies also
/// takes the coordinator's `Box<dyn ShardAllocationStrategy>`).
impl<S: ShardAllocationStrategy + ?Sized> ShardAllocationStrategy for Box<S> {
    fn allocate_shard(
        &mut self,
        requester: &RegionId,
        shard: &ShardId,
        current: &ShardAllocations,
        cluster: &ClusterView<'_>,
    ) -> Option<RegionId> {
        (**self).allocate_shard(requester, shard, current, cluster)
    }

    fn rebalance(
        &mut self,
        current: &ShardAllocations,
        in_progress: &BTreeSet<ShardId>,
        cluster: &ClusterView<'_>,
    ) -> BTreeSet<ShardId> {
        (**self).rebalance(current, in_progress, cluster)
    }
}

/// True for members on their way out of the cluster: allocation avoids them
/// (Pekko's `LeavingClusterStatuses`, plus Removed, which a current state
/// does not normally hold).
fn is_leaving(status: MemberStatus) -> bool {
    matches!(
        status,
        MemberStatus::Leaving | MemberStatus::Exiting | MemberStatus::Down | MemberStatus::Removed
    )
}

/// A region with a known member (Pekko's `RegionEntry`).
struct RegionEntry<'a> {
    region: &'a RegionId,
    leaving: bool,
    shards: &'a [ShardId],
}

impl RegionEntry<'_> {
    /// Pekko's `ShardSuitabilityOrdering` as a key: members that are not
    /// leaving first, then fewer shards; equal keys keep region order.
    fn suitability(&self) -> (bool, usize) {
        (self.leaving, self.shards.len())
    }
}

/// The regions of `current` whose node is a member in the cluster view, in
/// region order (Pekko's `regionEntriesFor`: a region whose member is not
/// known yet is left out of this decision).
fn region_entries<'a>(
    current: &'a ShardAllocations,
    cluster: &ClusterView<'_>,
) -> Vec<RegionEntry<'a>> {
    let members: BTreeMap<&UniqueAddress, &Member> =
        cluster.state.members.iter().map(|m| (&m.node, m)).collect();
    current
        .iter()
        .filter_map(|(region, shards)| {
            members.get(region).map(|m| RegionEntry {
                region,
                leaving: is_leaving(m.status),
                shards,
            })
        })
        .collect()
}

/// Allocates a new shard to the region with the fewest shards, and
/// rebalances from the regions with the most shards to those with the
/// fewest (Pekko's `LeastShardAllocationStrategy`, the algorithm of Akka
/// 2.6.10 and later).
///
/// **Allocation** picks, among the regions whose member is known, one whose
/// member is not Leaving, Exiting or Down, with the fewest shards; ties go to
/// the first region in address order. A leaving region is chosen only when
/// no other is known (as Pekko: better a short-lived home than none). If no
/// region's member is known yet, the answer is `None` and the requester
/// retries.
///
/// **Rebalance** does nothing while a rebalance is in progress, while no
/// region's member is known, or while the membership is not settled (see
/// [`ClusterView::is_settled`]). Otherwise, with `optimal` the number of
/// shards per region rounded up:
///
/// 1. every region above `optimal` gives up its oldest shards down to
///    `optimal`;
/// 2. if that finds nothing (every region is at or below `optimal`) but some
///    regions are at least two below it, regions at `optimal` give up their
///    oldest shard, one each, as many as there are shards missing below
///    `optimal - 1`.
///
/// Either way at most [`rebalance_limit`](Self::rebalance_limit) shards move
/// per round. Typically one or two rounds reach a distribution where the
/// fullest and emptiest regions differ by at most one shard, and then
/// nothing moves any more.
#[derive(Debug, Clone, PartialEq)]
pub struct LeastShardAllocationStrategy {
    absolute_limit: usize,
    relative_limit: f64,
}

impl LeastShardAllocationStrategy {
    /// The absolute limit of [`Default`]: 20 shards per round (the value
    /// Pekko's reference configuration recommends for this algorithm).
    pub const DEFAULT_ABSOLUTE_LIMIT: usize = 20;

    /// The relative limit of [`Default`]: a tenth of the shards per round
    /// (Pekko's `rebalance-relative-limit`).
    pub const DEFAULT_RELATIVE_LIMIT: f64 = 0.1;

    /// A strategy that moves at most `absolute_limit` shards, and at most
    /// `relative_limit` (a fraction, below 1.0) of all shards, per rebalance
    /// round, and always at least one: the limit for `n` shards is
    /// `max(1, min(floor(relative_limit * n), absolute_limit))`, exactly as
    /// Pekko computes it. So an `absolute_limit` of 0 means one shard per
    /// round, not "no absolute limit".
    pub fn new(absolute_limit: usize, relative_limit: f64) -> Self {
        LeastShardAllocationStrategy {
            absolute_limit,
            relative_limit,
        }
    }

    /// The most shards moved in one round, whatever their number.
    pub fn absolute_limit(&self) -> usize {
        self.absolute_limit
    }

    /// The most shards moved in one round, as a fraction of all shards.
    pub fn relative_limit(&self) -> f64 {
        self.relative_limit
    }

    /// The most shards moved in one round when the regions host
    /// `number_of_shards` shards in all (at least 1).
    pub fn rebalance_limit(&self, number_of_shards: usize) -> usize {
        // `as` truncates toward zero and saturates (NaN and negatives give
        // 0), as Scala's `toInt` does.
        let relative = (self.relative_limit * number_of_shards as f64) as usize;
        relative.min(self.absolute_limit).max(1)
    }
}

impl Default for LeastShardAllocationStrategy {
    /// At most 20 shards, and at most a tenth of them, per round.
    fn default() -> Self {
        LeastShardAllocationStrategy::new(
            Self::DEFAULT_ABSOLUTE_LIMIT,
            Self::DEFAULT_RELATIVE_LIMIT,
        )
    }
}

impl ShardAllocationStrategy for LeastShardAllocationStrategy {
    fn allocate_shard(
        &mut self,
        _requester: &RegionId,
        _shard: &ShardId,
        current: &ShardAllocations,
        cluster: &ClusterView<'_>,
    ) -> Option<RegionId> {
        region_entries(current, cluster)
            .iter()
            // `min_by_key` keeps the first of equals: the lowest address.
            .min_by_key(|e| e.suitability())
            .map(|e| e.region.clone())
    }

    fn rebalance(
        &mut self,
        current: &ShardAllocations,
        in_progress: &BTreeSet<ShardId>,
        cluster: &ClusterView<'_>,
    ) -> BTreeSet<ShardId> {
        if !in_progress.is_empty() {
            // One rebalance at a time.
            return BTreeSet::new();
        }
        let mut entries = region_entries(current, cluster);
        if entries.is_empty() || !cluster.is_settled() {
            return BTreeSet::new();
        }
        // Stable: equal keys stay in region order.
        entries.sort_by_key(|e| e.suitability());
        let number_of_shards: usize = entries.iter().map(|e| e.shards.len()).sum();
        if number_of_shards == 0 {
            return BTreeSet::new();
        }
        let optimal = number_of_shards.div_ceil(entries.len());
        let limit = self.rebalance_limit(number_of_shards);

        // Phase 1: regions above the optimal give up their oldest shards.
        let phase1: BTreeSet<ShardId> = entries
            .iter()
            .filter(|e| e.shards.len() > optimal)
            .flat_map(|e| &e.shards[..e.shards.len() - optimal])
            .take(limit)
            .cloned()
            .collect();
        if !phase1.is_empty() {
            return phase1;
        }

        // Phase 2: `optimal` is rounded up, so phase 1 can leave regions two
        // or more below it; regions at the optimal give one shard each.
        let below_optimal: usize = entries
            .iter()
            .map(|e| (optimal - 1).saturating_sub(e.shards.len()))
            .sum();
        if below_optimal == 0 {
            return BTreeSet::new();
        }
        entries
            .iter()
            .filter(|e| e.shards.len() >= optimal)
            .filter_map(|e| e.shards.first())
            .take(below_optimal.min(limit))
            .cloned()
            .collect()
    }
}

/// Virtual nodes per node on the consistent-hash ring (Pekko's
/// `virtualNodesFactor`).
pub const VIRTUAL_NODES_FACTOR: u64 = 10;

/// Allocates each shard to the node that owns its id on a consistent-hash
/// ring of the regions' nodes (Pekko's
/// `ConsistentHashingShardAllocationStrategy`).
///
/// This is useful when shards with the same id of different entity types
/// should, as far as possible, live on the same node. When a node joins or
/// leaves, only the shards whose owner on the ring changed are moved; the
/// others stay where they are. The ring is built from the regions'
/// addresses (not their UIDs, so a restarted node gets its old shards back),
/// each with [`VIRTUAL_NODES_FACTOR`] virtual nodes, and uses a hash that is
/// the same on every platform and in every version of Troupe.
///
/// **Allocation** gives the shard to the region of its owner; it ignores the
/// member statuses, as the coordinator only offers regions that may take
/// shards. **Rebalance** (only when the membership is settled, see
/// [`ClusterView::is_settled`]) selects the shards, not already in progress,
/// that are not on the region of their owner, visiting the regions in address
/// order and each region's shards oldest first, at most `rebalance_limit`
/// of them (0: no limit). Unlike [`LeastShardAllocationStrategy`] it does not
/// wait for a rebalance in progress to finish.
///
/// Use one instance per entity type (it caches the ring of the last call).
#[derive(Debug, Clone)]
pub struct ConsistentHashingShardAllocationStrategy {
    rebalance_limit: usize,
    /// The distinct region addresses the ring was built from, sorted.
    hashed_nodes: Vec<Address>,
    /// Ring position -> node.
    ring: BTreeMap<u64, Address>,
}

impl ConsistentHashingShardAllocationStrategy {
    /// A strategy that moves at most `rebalance_limit` shards per rebalance
    /// round; 0 means no limit.
    pub fn new(rebalance_limit: usize) -> Self {
        ConsistentHashingShardAllocationStrategy {
            rebalance_limit,
            hashed_nodes: Vec::new(),
            ring: BTreeMap::new(),
        }
    }

    /// The most shards moved in one round (0: no limit).
    pub fn rebalance_limit(&self) -> usize {
        self.rebalance_limit
    }

    /// Rebuilds the ring if the regions' addresses changed since last time.
    fn update_ring(&mut self, current: &ShardAllocations) {
        let nodes: Vec<Address> = current
            .keys()
            .map(|r| r.address.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if nodes != self.hashed_nodes {
            tracing::debug!(
                nodes = %nodes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
                "update consistent hashing nodes"
            );
            self.ring = nodes
                .iter()
                .flat_map(|node| {
                    let h = node_hash(node);
                    (1..=VIRTUAL_NODES_FACTOR).map(move |v| (virtual_node_hash(h, v), node.clone()))
                })
                .collect();
            self.hashed_nodes = nodes;
        }
    }

    /// The node that owns `shard`: the first ring position at or after the
    /// shard's hash, wrapping around.
    fn owner(&self, shard: &ShardId) -> Option<&Address> {
        let h = stable_hash(shard.as_bytes());
        self.ring
            .range(h..)
            .next()
            .or_else(|| self.ring.iter().next())
            .map(|(_, node)| node)
    }
}

/// The region of each address in `current`. Two regions share an address
/// only briefly (an old incarnation not yet removed); the one whose member
/// is known and not leaving wins, then the one whose member is known, then
/// the first in order.
fn regions_by_address<'a>(
    current: &'a ShardAllocations,
    cluster: &ClusterView<'_>,
) -> BTreeMap<&'a Address, &'a RegionId> {
    let rank = |region: &RegionId| match cluster.member(region) {
        Some(m) if !is_leaving(m.status) => 2,
        Some(_) => 1,
        None => 0,
    };
    let mut by_address: BTreeMap<&Address, &RegionId> = BTreeMap::new();
    for region in current.keys() {
        by_address
            .entry(&region.address)
            .and_modify(|chosen| {
                if rank(region) > rank(chosen) {
                    *chosen = region;
                }
            })
            .or_insert(region);
    }
    by_address
}

impl ShardAllocationStrategy for ConsistentHashingShardAllocationStrategy {
    fn allocate_shard(
        &mut self,
        _requester: &RegionId,
        shard: &ShardId,
        current: &ShardAllocations,
        cluster: &ClusterView<'_>,
    ) -> Option<RegionId> {
        self.update_ring(current);
        let owner = self.owner(shard)?;
        regions_by_address(current, cluster)
            .get(owner)
            .map(|r| (*r).clone())
    }

    fn rebalance(
        &mut self,
        current: &ShardAllocations,
        in_progress: &BTreeSet<ShardId>,
        cluster: &ClusterView<'_>,
    ) -> BTreeSet<ShardId> {
        let mut result = BTreeSet::new();
        if region_entries(current, cluster).is_empty() || !cluster.is_settled() {
            return result;
        }
        self.update_ring(current);
        let by_address = regions_by_address(current, cluster);
        for (region, shards) in current {
            for shard in shards {
                if self.rebalance_limit > 0 && result.len() >= self.rebalance_limit {
                    return result;
                }
                if in_progress.contains(shard) {
                    continue;
                }
                let Some(owner) = self.owner(shard) else {
                    return result;
                };
                if let Some(home) = by_address.get(owner) {
                    if *home != region {
                        tracing::debug!(%shard, from = %region, to = %home, "rebalance needed");
                        result.insert(shard.clone());
                    }
                }
            }
        }
        result
    }
}

/// The ring hash: FNV-1a (64 bit) followed by MurmurHash3's 64-bit
/// finaliser for a good spread. Fixed forever: changing it would move shards
/// when a coordinator of a new version takes over.
fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    fmix64(h)
}

/// MurmurHash3's 64-bit finaliser.
fn fmix64(mut k: u64) -> u64 {
    k ^= k >> 33;
    k = k.wrapping_mul(0xff51_afd7_ed55_8ccd);
    k ^= k >> 33;
    k = k.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    k ^= k >> 33;
    k
}

/// The hash of a node: of `SYSTEM@HOST:PORT`, spelled out here rather than
/// taken from `Address`'s `Display`, so that the ring does not change if the
/// display does.
fn node_hash(node: &Address) -> u64 {
    stable_hash(format!("{}@{}:{}", node.system(), node.host(), node.port()).as_bytes())
}

/// The ring position of virtual node `vnode` (1-based) of a node.
fn virtual_node_hash(node_hash: u64, vnode: u64) -> u64 {
    fmix64(node_hash ^ vnode.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // ---- fixtures -------------------------------------------------------

    fn node(host: &str, port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", host, port), 1)
    }

    fn member(node: &UniqueAddress, status: MemberStatus) -> Member {
        let up = Member::joining(node.clone(), BTreeSet::new()).up(i32::from(node.address.port()));
        match status {
            MemberStatus::Joining => Member::joining(node.clone(), BTreeSet::new()),
            MemberStatus::Up => up,
            other => up.with_status(other),
        }
    }

    fn state(members: Vec<Member>, unreachable: Vec<Member>) -> CurrentClusterState {
        let mut members = members;
        members.sort();
        CurrentClusterState {
            members,
            unreachable,
            seen_by: BTreeSet::new(),
            leader: None,
            role_leaders: Vec::new(),
            unreachable_observed_by: Vec::new(),
            oldest: None,
            oldest_per_role: Vec::new(),
        }
    }

    fn s(id: &str) -> ShardId {
        ShardId::from(id)
    }

    fn shards(ids: &[&str]) -> Vec<ShardId> {
        ids.iter().map(|id| s(id)).collect()
    }

    fn set(ids: &[&str]) -> BTreeSet<ShardId> {
        ids.iter().map(|id| s(id)).collect()
    }

    fn none() -> BTreeSet<ShardId> {
        BTreeSet::new()
    }

    /// Three Up members A, B, C (as in Pekko's spec), viewed from A.
    struct Abc {
        a: UniqueAddress,
        b: UniqueAddress,
        c: UniqueAddress,
        d: UniqueAddress,
        state: CurrentClusterState,
    }

    impl Abc {
        fn new() -> Self {
            let (a, b, c, d) = (
                node("127.0.0.1", 2552),
                node("127.0.0.2", 2552),
                node("127.0.0.3", 2552),
                node("127.0.0.4", 2552),
            );
            let members = [&a, &b, &c, &d]
                .iter()
                .map(|n| member(n, MemberStatus::Up))
                .collect();
            let state = state(members, Vec::new());
            Abc { a, b, c, d, state }
        }

        fn view(&self) -> ClusterView<'_> {
            ClusterView::new(&self.state, &self.a)
        }

        /// Pekko's `createAllocations`: shards "001".. spread over A, B, C.
        fn allocations(&self, a: usize, b: usize, c: usize) -> ShardAllocations {
            let ids: Vec<ShardId> = (1..=999).map(|n| s(&format!("{n:03}"))).collect();
            BTreeMap::from([
                (self.a.clone(), ids[..a].to_vec()),
                (self.b.clone(), ids[a..a + b].to_vec()),
                (self.c.clone(), ids[a + b..a + b + c].to_vec()),
            ])
        }
    }

    /// The allocations once `moved` were handed off and allocated again, one
    /// by one in id order (Pekko's spec helper `afterRebalance`). Checks that
    /// every allocation goes to a known region that is not leaving (when
    /// there is one) and has the fewest shards.
    fn after_rebalance(
        strategy: &mut dyn ShardAllocationStrategy,
        allocations: &ShardAllocations,
        moved: &BTreeSet<ShardId>,
        view: &ClusterView<'_>,
    ) -> ShardAllocations {
        let mut acc: ShardAllocations = allocations
            .iter()
            .map(|(r, ids)| {
                (
                    r.clone(),
                    ids.iter()
                        .filter(|id| !moved.contains(*id))
                        .cloned()
                        .collect(),
                )
            })
            .collect();
        let requester = view.self_node.clone();
        for shard in moved {
            let region = strategy
                .allocate_shard(&requester, shard, &acc, view)
                .expect("a region");
            acc.get_mut(&region)
                .expect("one of the regions")
                .push(shard.clone());
        }
        acc
    }

    fn counts(allocations: &ShardAllocations) -> Vec<usize> {
        allocations.values().map(Vec::len).collect()
    }

    fn unlimited() -> LeastShardAllocationStrategy {
        LeastShardAllocationStrategy::new(1000, 1.0)
    }

    // ---- LeastShardAllocationStrategy: Pekko's spec -----------------------

    #[test]
    fn allocate_to_region_with_least_number_of_shards() {
        let f = Abc::new();
        let allocations = f.allocations(1, 1, 0);
        assert_eq!(
            unlimited().allocate_shard(&f.a, &s("003"), &allocations, &f.view()),
            Some(f.c.clone())
        );
    }

    #[test]
    fn allocate_ties_to_the_first_region_in_address_order() {
        let f = Abc::new();
        let allocations = f.allocations(1, 0, 0);
        assert_eq!(
            unlimited().allocate_shard(&f.c, &s("002"), &allocations, &f.view()),
            Some(f.b.clone())
        );
    }

    #[test]
    fn rebalance_1_2_0() {
        let f = Abc::new();
        let mut strategy = unlimited();
        let allocations = f.allocations(1, 2, 0);
        let result = strategy.rebalance(&allocations, &none(), &f.view());
        assert_eq!(result, set(&["002"]));
        let after = after_rebalance(&mut strategy, &allocations, &result, &f.view());
        assert_eq!(counts(&after), vec![1, 1, 1]);
    }

    #[test]
    fn rebalance_2_0_0() {
        let f = Abc::new();
        let mut strategy = unlimited();
        let allocations = f.allocations(2, 0, 0);
        let result = strategy.rebalance(&allocations, &none(), &f.view());
        assert_eq!(result, set(&["001"]));
        let after = after_rebalance(&mut strategy, &allocations, &result, &f.view());
        assert_eq!(counts(&after), vec![1, 1, 0]);
    }

    #[test]
    fn no_rebalance_1_1_0() {
        let f = Abc::new();
        let allocations = f.allocations(1, 1, 0);
        assert_eq!(
            unlimited().rebalance(&allocations, &none(), &f.view()),
            none()
        );
    }

    #[test]
    fn rebalance_3_0_0() {
        let f = Abc::new();
        let mut strategy = unlimited();
        let allocations = f.allocations(3, 0, 0);
        let result = strategy.rebalance(&allocations, &none(), &f.view());
        assert_eq!(result, set(&["001", "002"]));
        let after = after_rebalance(&mut strategy, &allocations, &result, &f.view());
        assert_eq!(counts(&after), vec![1, 1, 1]);
    }

    #[test]
    fn rebalance_4_4_0() {
        let f = Abc::new();
        let mut strategy = unlimited();
        let allocations = f.allocations(4, 4, 0);
        let result = strategy.rebalance(&allocations, &none(), &f.view());
        assert_eq!(result, set(&["001", "005"]));
        let after = after_rebalance(&mut strategy, &allocations, &result, &f.view());
        assert_eq!(counts(&after), vec![3, 3, 2]);
    }

    #[test]
    fn rebalance_4_4_2_in_phase_2() {
        let f = Abc::new();
        let mut strategy = unlimited();
        let allocations = f.allocations(4, 4, 2);
        let result = strategy.rebalance(&allocations, &none(), &f.view());
        assert_eq!(result, set(&["001"]));
        let after = after_rebalance(&mut strategy, &allocations, &result, &f.view());
        assert_eq!(counts(&after), vec![3, 4, 3]);
    }

    #[test]
    fn rebalance_5_5_0_in_two_rounds() {
        let f = Abc::new();
        let mut strategy = unlimited();
        let allocations = f.allocations(5, 5, 0);
        let result1 = strategy.rebalance(&allocations, &none(), &f.view());
        assert_eq!(result1, set(&["001", "006"]));
        let allocations2 = after_rebalance(&mut strategy, &allocations, &result1, &f.view());
        assert_eq!(counts(&allocations2), vec![4, 4, 2]);
        // Phase 2 finds the difference of 2.
        let result2 = strategy.rebalance(&allocations2, &none(), &f.view());
        assert_eq!(result2, set(&["002"]));
        let allocations3 = after_rebalance(&mut strategy, &allocations2, &result2, &f.view());
        assert_eq!(counts(&allocations3), vec![3, 4, 3]);
        assert_eq!(
            strategy.rebalance(&allocations3, &none(), &f.view()),
            none()
        );
    }

    #[test]
    fn rebalance_50_0_50_in_two_rounds() {
        let f = Abc::new();
        let mut strategy = unlimited();
        let allocations = f.allocations(50, 0, 50);
        let result1 = strategy.rebalance(&allocations, &none(), &f.view());
        // 16 from each: the optimal is 34.
        let expected: BTreeSet<ShardId> = (1..=16)
            .chain(51..=66)
            .map(|n| s(&format!("{n:03}")))
            .collect();
        assert_eq!(result1, expected);
        let allocations2 = after_rebalance(&mut strategy, &allocations, &result1, &f.view());
        assert_eq!(counts(&allocations2), vec![34, 32, 34]);
        let result2 = strategy.rebalance(&allocations2, &none(), &f.view());
        assert_eq!(result2, set(&["017"]));
        let allocations3 = after_rebalance(&mut strategy, &allocations2, &result2, &f.view());
        assert_eq!(counts(&allocations3), vec![33, 33, 34]);
    }

    #[test]
    fn respect_absolute_limit() {
        let f = Abc::new();
        let mut strategy = LeastShardAllocationStrategy::new(3, 1.0);
        let allocations = f.allocations(1, 9, 0);
        let result = strategy.rebalance(&allocations, &none(), &f.view());
        assert_eq!(result, set(&["002", "003", "004"]));
        let after = after_rebalance(&mut strategy, &allocations, &result, &f.view());
        assert_eq!(counts(&after), vec![2, 6, 2]);
    }

    #[test]
    fn respect_relative_limit() {
        let f = Abc::new();
        let mut strategy = LeastShardAllocationStrategy::new(5, 0.3);
        let allocations = f.allocations(1, 9, 0);
        let result = strategy.rebalance(&allocations, &none(), &f.view());
        assert_eq!(result, set(&["002", "003", "004"]));
        let after = after_rebalance(&mut strategy, &allocations, &result, &f.view());
        assert_eq!(counts(&after), vec![2, 6, 2]);
    }

    #[test]
    fn limit_is_pekkos_formula() {
        let limit = |abs, rel, n| LeastShardAllocationStrategy::new(abs, rel).rebalance_limit(n);
        assert_eq!(limit(20, 0.1, 1000), 20);
        assert_eq!(limit(20, 0.1, 150), 15);
        assert_eq!(limit(20, 0.1, 5), 1); // never below one
        assert_eq!(limit(0, 0.1, 1000), 1); // 0 is not "unlimited"
        assert_eq!(limit(20, 0.0, 1000), 1);
        assert_eq!(limit(20, f64::NAN, 1000), 1);
        assert_eq!(limit(20, -1.0, 1000), 1);
        assert_eq!(limit(usize::MAX, 1.0, 7), 7);
        let d = LeastShardAllocationStrategy::default();
        assert_eq!((d.absolute_limit(), d.relative_limit()), (20, 0.1));
    }

    #[test]
    fn no_rebalance_while_one_is_in_progress() {
        let f = Abc::new();
        let allocations = f.allocations(10, 0, 0);
        assert_eq!(
            unlimited().rebalance(&allocations, &set(&["002", "003"]), &f.view()),
            none()
        );
    }

    #[test]
    fn no_rebalance_while_a_member_is_unreachable() {
        let f = Abc::new();
        let st = state(
            f.state.members.clone(),
            vec![member(&f.b, MemberStatus::Up)],
        );
        let view = ClusterView::new(&st, &f.b);
        let allocations = f.allocations(5, 5, 0);
        let mut strategy = unlimited();
        assert_eq!(strategy.rebalance(&allocations, &none(), &view), none());
        assert_eq!(
            strategy.rebalance(&allocations, &set(&["001", "002"]), &view),
            none()
        );
        // An unreachable member with no region blocks too (its proxy could
        // not acknowledge the hand-off).
        let st = state(
            f.state.members.clone(),
            vec![member(&f.d, MemberStatus::Up)],
        );
        let view = ClusterView::new(&st, &f.a);
        assert_eq!(strategy.rebalance(&allocations, &none(), &view), none());
    }

    #[test]
    fn no_rebalance_while_a_member_is_joining_or_weakly_up() {
        let f = Abc::new();
        let allocations = f.allocations(5, 5, 0);
        for status in [MemberStatus::Joining, MemberStatus::WeaklyUp] {
            let members = vec![
                member(&f.a, MemberStatus::Up),
                member(&f.b, status),
                member(&f.c, MemberStatus::Up),
            ];
            let st = state(members, Vec::new());
            let view = ClusterView::new(&st, &f.b);
            let mut strategy = unlimited();
            assert_eq!(strategy.rebalance(&allocations, &none(), &view), none());
            assert_eq!(
                strategy.rebalance(&allocations, &set(&["001", "002"]), &view),
                none()
            );
        }
    }

    #[test]
    fn no_rebalance_without_known_regions_or_shards() {
        let f = Abc::new();
        let mut strategy = unlimited();
        assert_eq!(
            strategy.rebalance(&BTreeMap::new(), &none(), &f.view()),
            none()
        );
        assert_eq!(
            strategy.rebalance(&f.allocations(0, 0, 0), &none(), &f.view()),
            none()
        );
        let stranger = node("10.0.0.9", 1);
        let allocations = BTreeMap::from([(stranger, shards(&["1", "2", "3"]))]);
        assert_eq!(strategy.rebalance(&allocations, &none(), &f.view()), none());
    }

    /// Pekko's "prefer least shards, latest version, non downed, leaving or
    /// exiting nodes", without the version (Troupe members have none).
    #[test]
    fn prefer_least_shards_and_members_not_leaving() {
        let f = Abc::new();
        let (leaving, exiting, down) = (
            node("127.0.0.5", 2552),
            node("127.0.0.6", 2552),
            node("127.0.0.7", 2552),
        );
        let st = state(
            vec![
                member(&f.a, MemberStatus::Up),
                member(&f.b, MemberStatus::Up),
                member(&f.c, MemberStatus::Up),
                member(&leaving, MemberStatus::Leaving),
                member(&exiting, MemberStatus::Exiting),
                member(&down, MemberStatus::Down),
            ],
            Vec::new(),
        );
        let view = ClusterView::new(&st, &f.a);
        let mut allocations: ShardAllocations = BTreeMap::from([
            (leaving.clone(), Vec::new()),
            (exiting.clone(), Vec::new()),
            (down.clone(), Vec::new()),
            (f.a.clone(), shards(&["2", "3"])),
            (f.b.clone(), Vec::new()),
            (f.c.clone(), shards(&["1"])),
        ]);
        let mut strategy = unlimited();
        let mut pick = |allocations: &ShardAllocations| {
            strategy.allocate_shard(&f.a, &s("x"), allocations, &view)
        };
        assert_eq!(pick(&allocations), Some(f.b.clone())); // fewest, Up
        allocations.remove(&f.b);
        assert_eq!(pick(&allocations), Some(f.c.clone()));
        allocations.remove(&f.c);
        assert_eq!(pick(&allocations), Some(f.a.clone())); // most, but Up
        allocations.remove(&f.a);
        // Only leaving regions: the first of them, as Pekko.
        assert_eq!(pick(&allocations), Some(leaving.clone()));
        // A region whose member is not known is never chosen.
        let unknown = BTreeMap::from([(node("10.0.0.9", 1), Vec::new())]);
        assert_eq!(pick(&unknown), None);
        assert_eq!(pick(&BTreeMap::new()), None);
    }

    /// Pekko compares two members of different statuses by "leaving" alone,
    /// so an Up region and a WeaklyUp region compare equal whatever their
    /// shard counts; here the count decides.
    #[test]
    fn weakly_up_and_up_compare_by_shard_count() {
        let f = Abc::new();
        let st = state(
            vec![
                member(&f.a, MemberStatus::Up),
                member(&f.b, MemberStatus::WeaklyUp),
            ],
            Vec::new(),
        );
        let view = ClusterView::new(&st, &f.a);
        let allocations = BTreeMap::from([
            (f.a.clone(), shards(&["1", "2"])),
            (f.b.clone(), Vec::new()),
        ]);
        assert_eq!(
            unlimited().allocate_shard(&f.a, &s("3"), &allocations, &view),
            Some(f.b.clone())
        );
    }

    #[test]
    fn a_boxed_strategy_is_a_strategy() {
        let f = Abc::new();
        let mut boxed: Box<dyn ShardAllocationStrategy> = Box::new(unlimited());
        let allocations = f.allocations(2, 0, 0);
        assert_eq!(
            boxed.rebalance(&allocations, &none(), &f.view()),
            set(&["001"])
        );
        fn generic<S: ShardAllocationStrategy>(
            mut s: S,
            a: &ShardAllocations,
            v: &ClusterView<'_>,
        ) -> Option<RegionId> {
            s.allocate_shard(v.self_node, &ShardId::from("x"), a, v)
        }
        assert_eq!(generic(boxed, &allocations, &f.view()), Some(f.b.clone()));
        let boxed: Box<dyn ShardAllocationStrategy> =
            Box::new(ConsistentHashingShardAllocationStrategy::new(0));
        assert!(generic(boxed, &allocations, &f.view()).is_some());
    }

    // ---- LeastShardAllocationStrategy: Pekko's randomized spec -------------

    /// Regions on 127.0.0.1, ports 1..=n, all Up, with `counts[i]` shards
    /// named "R{i}-{n:03}".
    fn random_scenario(counts: &[usize]) -> (CurrentClusterState, ShardAllocations) {
        let nodes: Vec<UniqueAddress> = (1..=counts.len())
            .map(|p| node("127.0.0.1", p as u16))
            .collect();
        let st = state(
            nodes.iter().map(|n| member(n, MemberStatus::Up)).collect(),
            Vec::new(),
        );
        let allocations = nodes
            .iter()
            .zip(counts)
            .map(|(n, &count)| {
                let port = n.address.port();
                let ids = (1..=count).map(|i| s(&format!("R{port}-{i:03}"))).collect();
                (n.clone(), ids)
            })
            .collect();
        (st, allocations)
    }

    /// Rebalances round after round, completing each hand-off before the
    /// next round, until the fullest and the emptiest region differ by at
    /// most one shard; fails if that takes more than `max_rounds` rounds.
    fn check_converges(
        mut strategy: LeastShardAllocationStrategy,
        counts: &[usize],
        max_rounds: usize,
    ) -> Result<(), TestCaseError> {
        let (st, mut allocations) = random_scenario(counts);
        let self_node = st.members[0].node.clone();
        let view = ClusterView::new(&st, &self_node);
        let total: usize = counts.iter().sum();
        let mut history = vec![counts.to_vec()];
        for round in 1..=max_rounds {
            let moved = strategy.rebalance(&allocations, &none(), &view);
            // Every shard moved is hosted now, so none moves twice.
            let hosted: BTreeSet<&ShardId> = allocations.values().flatten().collect();
            prop_assert!(moved.iter().all(|id| hosted.contains(id)));
            prop_assert!(moved.len() <= strategy.rebalance_limit(total));
            if !moved.is_empty() {
                // Nothing more while these are in progress.
                prop_assert_eq!(strategy.rebalance(&allocations, &moved, &view), none());
            }
            allocations = after_rebalance(&mut strategy, &allocations, &moved, &view);
            let c = counts_of(&allocations);
            history.push(c.clone());
            prop_assert_eq!(c.iter().sum::<usize>(), total);
            let (min, max) = (*c.iter().min().unwrap(), *c.iter().max().unwrap());
            if max - min <= 1 {
                // Balanced: nothing moves any more.
                prop_assert_eq!(strategy.rebalance(&allocations, &none(), &view), none());
                return Ok(());
            }
            prop_assert!(
                round < max_rounds,
                "not balanced in {} rounds: {:?}",
                max_rounds,
                history
            );
        }
        Ok(())
    }

    fn counts_of(allocations: &ShardAllocations) -> Vec<usize> {
        counts(allocations)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn converges_5_regions_5_shards(c in prop::collection::vec(0usize..5, 1..=5)) {
            check_converges(LeastShardAllocationStrategy::new(100_000, 1.0), &c, 2)?;
        }

        #[test]
        fn converges_5_regions_100_shards(c in prop::collection::vec(0usize..100, 1..=5)) {
            check_converges(LeastShardAllocationStrategy::new(100_000, 1.0), &c, 2)?;
        }

        #[test]
        fn converges_20_regions_5_shards(c in prop::collection::vec(0usize..5, 1..=20)) {
            check_converges(LeastShardAllocationStrategy::new(100_000, 1.0), &c, 2)?;
        }

        #[test]
        fn converges_20_regions_20_shards(c in prop::collection::vec(0usize..20, 1..=20)) {
            check_converges(LeastShardAllocationStrategy::new(100_000, 1.0), &c, 2)?;
        }

        #[test]
        fn converges_20_regions_200_shards(c in prop::collection::vec(0usize..200, 1..=20)) {
            check_converges(LeastShardAllocationStrategy::new(100_000, 1.0), &c, 5)?;
        }

        #[test]
        fn converges_100_regions_100_shards(c in prop::collection::vec(0usize..100, 1..=100)) {
            check_converges(LeastShardAllocationStrategy::new(100_000, 1.0), &c, 5)?;
        }

        #[test]
        fn converges_20_regions_20_shards_with_limits(
            c in prop::collection::vec(0usize..20, 1..=20),
            absolute in 6usize..=12,
            relative in 0.05f64..1.0,
        ) {
            check_converges(LeastShardAllocationStrategy::new(absolute, relative), &c, 20)?;
        }

        /// With members in every status, a new shard goes to a region that
        /// is not leaving, with the fewest shards among those, and rebalance
        /// rounds (with their hand-offs completed) never put a shard on a
        /// leaving region.
        #[test]
        fn never_allocates_to_a_leaving_region(
            regions in prop::collection::vec(
                (
                    prop::sample::select(vec![
                        MemberStatus::Up,
                        MemberStatus::Leaving,
                        MemberStatus::Exiting,
                        MemberStatus::Down,
                    ]),
                    0usize..30,
                ),
                1..=12,
            ),
            new_shards in 1usize..40,
        ) {
            let mut regions = regions;
            regions[0].0 = MemberStatus::Up; // at least one region can take shards
            let counts: Vec<usize> = regions.iter().map(|r| r.1).collect();
            let (_, mut allocations) = random_scenario(&counts);
            let members: Vec<Member> = allocations
                .keys()
                .zip(&regions)
                .map(|(n, (status, _))| member(n, *status))
                .collect();
            let leaving: BTreeSet<RegionId> = members
                .iter()
                .filter(|m| is_leaving(m.status))
                .map(|m| m.node.clone())
                .collect();
            let st = state(members, Vec::new());
            let self_node = st.members[0].node.clone();
            let view = ClusterView::new(&st, &self_node);
            let mut strategy = LeastShardAllocationStrategy::new(100_000, 1.0);

            for i in 0..new_shards {
                let shard = s(&format!("new-{i}"));
                let region = strategy
                    .allocate_shard(&self_node, &shard, &allocations, &view)
                    .expect("a region");
                prop_assert!(!leaving.contains(&region));
                let fewest = allocations
                    .iter()
                    .filter(|(r, _)| !leaving.contains(*r))
                    .map(|(_, ids)| ids.len())
                    .min()
                    .unwrap();
                prop_assert_eq!(allocations[&region].len(), fewest);
                allocations.get_mut(&region).unwrap().push(shard);
            }

            for _round in 0..5 {
                let before = allocations.clone();
                let moved = strategy.rebalance(&allocations, &none(), &view);
                allocations = after_rebalance(&mut strategy, &allocations, &moved, &view);
                for r in &leaving {
                    // Leaving regions only ever lose shards.
                    prop_assert!(allocations[r].iter().all(|id| before[r].contains(id)));
                }
            }
        }
    }

    proptest! {
        // Up to 100 000 shards per case: fewer cases.
        #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

        #[test]
        fn converges_100_regions_1000_shards(c in prop::collection::vec(0usize..1000, 1..=100)) {
            check_converges(LeastShardAllocationStrategy::new(100_000, 1.0), &c, 5)?;
        }
    }

    // ---- ConsistentHashingShardAllocationStrategy --------------------------

    fn empty_regions(nodes: &[&UniqueAddress]) -> ShardAllocations {
        nodes.iter().map(|n| ((*n).clone(), Vec::new())).collect()
    }

    fn shard_ids(n: usize) -> Vec<ShardId> {
        (0..n).map(|i| s(&i.to_string())).collect()
    }

    /// Each shard's home according to a fresh strategy.
    fn homes(
        ids: &[ShardId],
        allocations: &ShardAllocations,
        view: &ClusterView<'_>,
    ) -> BTreeMap<ShardId, RegionId> {
        let mut strategy = ConsistentHashingShardAllocationStrategy::new(0);
        ids.iter()
            .map(|id| {
                let home = strategy
                    .allocate_shard(view.self_node, id, allocations, view)
                    .expect("a home");
                (id.clone(), home)
            })
            .collect()
    }

    /// The allocations where every shard is at its home.
    fn placed(regions: &ShardAllocations, homes: &BTreeMap<ShardId, RegionId>) -> ShardAllocations {
        let mut allocations = regions.clone();
        for (id, home) in homes {
            allocations.get_mut(home).unwrap().push(id.clone());
        }
        allocations
    }

    #[test]
    fn hash_is_fixed() {
        // These values must never change: shards would move when a
        // coordinator of another version takes over. (Computed with an
        // independent implementation of FNV-1a 64 + MurmurHash3's fmix64.)
        assert_eq!(stable_hash(b""), 0xefd0_1f60_ba99_2926);
        assert_eq!(stable_hash(b"a"), 0x82a2_a958_a9be_ce5b);
        assert_eq!(stable_hash(b"shard-1"), 0xa99a_990f_d006_d40f);
        let n = Address::new("sys", "127.0.0.1", 2552);
        assert_eq!(node_hash(&n), 0xa4c8_1056_fdae_ee70);
        assert_eq!(virtual_node_hash(node_hash(&n), 1), 0x71e0_22d1_74bc_8159);
        assert_eq!(virtual_node_hash(node_hash(&n), 2), 0x49c3_7f13_d7fa_54a3);
        assert_eq!(virtual_node_hash(node_hash(&n), 10), 0x4a37_6e6e_26f5_9e55);
    }

    #[test]
    fn consistent_hashing_owners_are_fixed() {
        // As Pekko's spec pins "0" -> C, "1" -> B, "2" -> A for its hash,
        // this pins the owners for ours.
        let f = Abc::new();
        let regions = empty_regions(&[&f.a, &f.b, &f.c]);
        let ids = shards(&["0", "1", "2", "3", "10", "14"]);
        let home = homes(&ids, &regions, &f.view());
        let name = |r: &RegionId| match r {
            r if *r == f.a => 'A',
            r if *r == f.b => 'B',
            _ => 'C',
        };
        let owners: String = ids.iter().map(|id| name(&home[id])).collect();
        assert_eq!(owners, "BABCCC"); // also computed independently
    }

    #[test]
    fn consistent_hashing_allocates_to_every_region_deterministically() {
        let f = Abc::new();
        let regions = empty_regions(&[&f.a, &f.b, &f.c]);
        let ids = shard_ids(100);
        let first = homes(&ids, &regions, &f.view());
        assert_eq!(first, homes(&ids, &regions, &f.view()));
        let used: BTreeSet<&RegionId> = first.values().collect();
        assert_eq!(used, BTreeSet::from([&f.a, &f.b, &f.c]));
        // The requester and the shard counts do not matter.
        let mut strategy = ConsistentHashingShardAllocationStrategy::new(0);
        let crowded = placed(&regions, &first);
        for id in &ids {
            assert_eq!(
                strategy
                    .allocate_shard(&f.c, id, &crowded, &f.view())
                    .as_ref(),
                Some(&first[id])
            );
        }
        assert_eq!(
            strategy.allocate_shard(&f.a, &ids[0], &BTreeMap::new(), &f.view()),
            None
        );
    }

    #[test]
    fn consistent_hashing_allocates_to_mostly_same_regions_when_node_is_removed() {
        let f = Abc::new();
        let ids = shard_ids(200);
        let before = homes(&ids, &empty_regions(&[&f.a, &f.b, &f.c]), &f.view());
        let after = homes(&ids, &empty_regions(&[&f.a, &f.b]), &f.view());
        let mut moved = 0;
        for id in &ids {
            if before[id] == f.c {
                moved += 1;
            } else {
                assert_eq!(after[id], before[id], "shard {id} moved");
            }
        }
        assert!(moved > 0 && moved < ids.len());
    }

    #[test]
    fn consistent_hashing_allocates_to_mostly_same_regions_when_node_is_added() {
        let f = Abc::new();
        let ids = shard_ids(200);
        let before = homes(&ids, &empty_regions(&[&f.a, &f.b, &f.c]), &f.view());
        let after = homes(&ids, &empty_regions(&[&f.a, &f.b, &f.c, &f.d]), &f.view());
        let mut moved = 0;
        for id in &ids {
            if after[id] != before[id] {
                assert_eq!(after[id], f.d, "shard {id} moved between old nodes");
                moved += 1;
            }
        }
        assert!(moved > 0 && moved < ids.len());
    }

    #[test]
    fn consistent_hashing_no_rebalance_when_nodes_not_changed() {
        let f = Abc::new();
        let regions = empty_regions(&[&f.a, &f.b, &f.c]);
        let ids = shard_ids(50);
        let allocations = placed(&regions, &homes(&ids, &regions, &f.view()));
        let mut strategy = ConsistentHashingShardAllocationStrategy::new(0);
        assert_eq!(strategy.rebalance(&allocations, &none(), &f.view()), none());
    }

    #[test]
    fn consistent_hashing_rebalances_when_node_is_added() {
        let f = Abc::new();
        let regions = empty_regions(&[&f.a, &f.b, &f.c]);
        let ids = shard_ids(50);
        let mut allocations = placed(&regions, &homes(&ids, &regions, &f.view()));
        allocations.insert(f.d.clone(), Vec::new());
        let to_d: BTreeSet<ShardId> = homes(&ids, &allocations, &f.view())
            .into_iter()
            .filter(|(_, home)| *home == f.d)
            .map(|(id, _)| id)
            .collect();
        assert!(!to_d.is_empty());
        let mut strategy = ConsistentHashingShardAllocationStrategy::new(0);
        assert_eq!(strategy.rebalance(&allocations, &none(), &f.view()), to_d);
        // The same again (cached ring), and from a strategy that allocated
        // with the old ring before.
        assert_eq!(strategy.rebalance(&allocations, &none(), &f.view()), to_d);
        let mut warm = ConsistentHashingShardAllocationStrategy::new(0);
        let _ = warm.allocate_shard(&f.a, &ids[0], &regions, &f.view());
        assert_eq!(warm.rebalance(&allocations, &none(), &f.view()), to_d);
        // Once moved, nothing more.
        let after = after_rebalance(&mut strategy, &allocations, &to_d, &f.view());
        assert_eq!(strategy.rebalance(&after, &none(), &f.view()), none());
    }

    #[test]
    fn consistent_hashing_respects_the_limit() {
        let f = Abc::new();
        let all = [&f.a, &f.b, &f.c, &f.d];
        let ids = shard_ids(30);
        let home = homes(&ids, &empty_regions(&all), &f.view());
        let mut allocations = empty_regions(&all);
        allocations.insert(f.a.clone(), ids.clone());
        let misplaced: Vec<ShardId> = ids.iter().filter(|id| home[*id] != f.a).cloned().collect();
        assert!(misplaced.len() > 4);
        let mut strategy = ConsistentHashingShardAllocationStrategy::new(2);
        // The oldest two misplaced shards.
        let first: BTreeSet<ShardId> = misplaced[..2].iter().cloned().collect();
        assert_eq!(strategy.rebalance(&allocations, &none(), &f.view()), first);
        // Not those in progress: the next two.
        let next: BTreeSet<ShardId> = misplaced[2..4].iter().cloned().collect();
        assert_eq!(strategy.rebalance(&allocations, &first, &f.view()), next);
        // Nothing when every misplaced shard is in progress.
        let all_misplaced: BTreeSet<ShardId> = misplaced.iter().cloned().collect();
        assert_eq!(
            strategy.rebalance(&allocations, &all_misplaced, &f.view()),
            none()
        );
        // Without a limit, all of them.
        let mut unlimited = ConsistentHashingShardAllocationStrategy::new(0);
        assert_eq!(
            unlimited.rebalance(&allocations, &none(), &f.view()),
            all_misplaced
        );
    }

    #[test]
    fn consistent_hashing_no_rebalance_while_unreachable_or_joining() {
        let f = Abc::new();
        let all = [&f.a, &f.b, &f.c];
        let mut allocations = empty_regions(&all);
        allocations.insert(f.a.clone(), shard_ids(20));
        let mut strategy = ConsistentHashingShardAllocationStrategy::new(0);
        assert!(!strategy
            .rebalance(&allocations, &none(), &f.view())
            .is_empty());

        let members: Vec<Member> = all.iter().map(|n| member(n, MemberStatus::Up)).collect();
        let st = state(members.clone(), vec![member(&f.b, MemberStatus::Up)]);
        assert_eq!(
            strategy.rebalance(&allocations, &none(), &ClusterView::new(&st, &f.b)),
            none()
        );
        let mut joining = members;
        joining[1] = member(&f.b, MemberStatus::Joining);
        let st = state(joining, Vec::new());
        assert_eq!(
            strategy.rebalance(&allocations, &none(), &ClusterView::new(&st, &f.b)),
            none()
        );
    }

    #[test]
    fn consistent_hashing_ignores_the_uid_and_prefers_the_live_incarnation() {
        let f = Abc::new();
        let ids = shard_ids(60);
        let regions = empty_regions(&[&f.a, &f.b, &f.c]);
        let before = homes(&ids, &regions, &f.view());
        // B restarted: a new incarnation, same address; the old one is Down.
        let b2 = UniqueAddress::new(f.b.address.clone(), 2);
        let st = state(
            vec![
                member(&f.a, MemberStatus::Up),
                member(&f.b, MemberStatus::Down),
                member(&b2, MemberStatus::Up),
                member(&f.c, MemberStatus::Up),
            ],
            Vec::new(),
        );
        let view = ClusterView::new(&st, &f.a);
        let mut regions2 = regions.clone();
        regions2.insert(b2.clone(), Vec::new());
        let after = homes(&ids, &regions2, &view);
        for id in &ids {
            let expected = if before[id] == f.b { &b2 } else { &before[id] };
            assert_eq!(&after[id], expected);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Adding a node moves exactly the shards whose owner on the ring
        /// changed, all of them to the new node.
        #[test]
        fn consistent_hashing_moves_only_what_the_new_node_owns(
            ports in prop::collection::btree_set(1u16..5000, 1..=8),
            new_port in 5000u16..6000,
            shard_count in 1usize..200,
        ) {
            let nodes: Vec<UniqueAddress> = ports.iter().map(|p| node("10.0.0.1", *p)).collect();
            let added = node("10.0.0.1", new_port);
            let mut all = nodes.clone();
            all.push(added.clone());
            let st = state(all.iter().map(|n| member(n, MemberStatus::Up)).collect(), Vec::new());
            let view = ClusterView::new(&st, &nodes[0]);
            let ids = shard_ids(shard_count);
            let regions: ShardAllocations = nodes.iter().map(|n| (n.clone(), Vec::new())).collect();
            let before = homes(&ids, &regions, &view);
            let mut allocations = placed(&regions, &before);
            allocations.insert(added.clone(), Vec::new());
            let after = homes(&ids, &allocations, &view);
            let changed: BTreeSet<ShardId> = ids
                .iter()
                .filter(|id| after[*id] != before[*id])
                .cloned()
                .collect();
            for id in &changed {
                prop_assert_eq!(&after[id], &added);
            }
            let mut strategy = ConsistentHashingShardAllocationStrategy::new(0);
            prop_assert_eq!(strategy.rebalance(&allocations, &none(), &view), changed.clone());
            let mut limited = ConsistentHashingShardAllocationStrategy::new(3);
            let some = limited.rebalance(&allocations, &none(), &view);
            prop_assert_eq!(some.len(), changed.len().min(3));
            prop_assert!(some.is_subset(&changed));
        }
    }
}
