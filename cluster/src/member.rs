//! Cluster members: a node's unique address, its status and roles, and the
//! orderings the protocol relies on (address order for the leader, up
//! number for age, status precedence for merging).

use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::fmt;
use troupe_core::remote::Address;

/// A node: its address and the UID of this incarnation. A restarted node
/// (same address, new UID) is a different node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct UniqueAddress {
    /// The node's remoting address.
    #[serde(with = "address_text")]
    pub address: Address,
    /// The UID of this incarnation.
    pub uid: u64,
}

impl UniqueAddress {
    /// A unique address from its parts.
    pub fn new(address: Address, uid: u64) -> Self {
        UniqueAddress { address, uid }
    }

    /// A stable 64-bit key of this node (FNV-1a of `address#uid`), used in
    /// vector clocks so that they stay small on the wire.
    pub fn clock_key(&self) -> u64 {
        fnv1a(format!("{}#{}", self.address, self.uid).bytes())
    }
}

/// FNV-1a: a hash that is the same on every node, build and platform
/// (std's hasher is not).
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Address order (host, then port, then system, then uid): the order in
/// which the leader is chosen, and the tie-break everywhere else.
impl Ord for UniqueAddress {
    fn cmp(&self, other: &Self) -> Ordering {
        self.address
            .host()
            .cmp(other.address.host())
            .then(self.address.port().cmp(&other.address.port()))
            .then(self.address.system().cmp(other.address.system()))
            .then(self.uid.cmp(&other.uid))
    }
}

impl PartialOrd for UniqueAddress {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for UniqueAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.address, self.uid)
    }
}

/// Serialises an [`Address`] as its text.
pub(crate) mod address_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use troupe_core::remote::Address;

    pub(crate) fn serialize<S: Serializer>(a: &Address, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(a)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Address, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The life cycle of a member, as in Akka.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemberStatus {
    /// Asked to join; not yet moved up by the leader.
    Joining,
    /// Joined while convergence was blocked (see `allow_weakly_up_members`).
    WeaklyUp,
    /// A full member.
    Up,
    /// Asked to leave.
    Leaving,
    /// Leaving, acknowledged by the leader; about to be removed.
    Exiting,
    /// Marked down (by a user or a downing provider); will be removed.
    Down,
    /// Gone; a removed node can never come back (its UID is tombstoned).
    Removed,
}

impl MemberStatus {
    /// Precedence when two versions of a member are merged: the later
    /// stage of the life cycle wins.
    fn precedence(self) -> u8 {
        match self {
            MemberStatus::Joining => 0,
            MemberStatus::WeaklyUp => 1,
            MemberStatus::Up => 2,
            MemberStatus::Leaving => 3,
            MemberStatus::Exiting => 4,
            MemberStatus::Down => 5,
            MemberStatus::Removed => 6,
        }
    }

    /// True if a member may move from `self` to `to`.
    pub fn can_move_to(self, to: MemberStatus) -> bool {
        use MemberStatus::*;
        match self {
            Joining => matches!(to, WeaklyUp | Up | Leaving | Down | Removed),
            WeaklyUp => matches!(to, Up | Leaving | Down | Removed),
            Up => matches!(to, Leaving | Down | Removed),
            Leaving => matches!(to, Exiting | Down | Removed),
            Exiting => matches!(to, Removed | Down),
            Down => matches!(to, Removed),
            Removed => false,
        }
    }

    /// Akka's name of the status ("Joining", "WeaklyUp", ...).
    pub fn name(self) -> &'static str {
        match self {
            MemberStatus::Joining => "Joining",
            MemberStatus::WeaklyUp => "WeaklyUp",
            MemberStatus::Up => "Up",
            MemberStatus::Leaving => "Leaving",
            MemberStatus::Exiting => "Exiting",
            MemberStatus::Down => "Down",
            MemberStatus::Removed => "Removed",
        }
    }
}

impl fmt::Display for MemberStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A member of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// Which node.
    pub node: UniqueAddress,
    /// Where it is in its life cycle.
    pub status: MemberStatus,
    /// Its roles.
    pub roles: BTreeSet<String>,
    /// Order of becoming Up: lower is older (`i32::MAX` until Up).
    pub up_number: i32,
}

impl Member {
    /// A node that asks to join.
    pub fn joining(node: UniqueAddress, roles: BTreeSet<String>) -> Self {
        Member {
            node,
            status: MemberStatus::Joining,
            roles,
            up_number: i32::MAX,
        }
    }

    /// This member with another status (the up number is kept).
    pub fn with_status(&self, status: MemberStatus) -> Self {
        Member {
            status,
            ..self.clone()
        }
    }

    /// This member moved Up with `up_number`.
    pub fn up(&self, up_number: i32) -> Self {
        Member {
            status: MemberStatus::Up,
            up_number,
            ..self.clone()
        }
    }

    /// True if the member has `role`.
    pub fn has_role(&self, role: &str) -> bool {
        self.roles.contains(role)
    }

    /// True if this member became Up before `other` (Akka's `isOlderThan`;
    /// ties are broken by address).
    pub fn is_older_than(&self, other: &Member) -> bool {
        if self.up_number == other.up_number {
            self.node < other.node
        } else {
            self.up_number < other.up_number
        }
    }

    /// Of two versions of the same member, the one further along its life
    /// cycle (the merge rule of the membership CRDT).
    pub fn highest_priority<'a>(a: &'a Member, b: &'a Member) -> &'a Member {
        match a.status.precedence().cmp(&b.status.precedence()) {
            Ordering::Less => b,
            Ordering::Greater => a,
            // Same status: the lower up number (the one that was Up first).
            Ordering::Equal => {
                if b.up_number < a.up_number {
                    b
                } else {
                    a
                }
            }
        }
    }
}

/// Which members may count as "the oldest", for [`oldest`]. Age is the
/// order of becoming Up ([`Member::is_older_than`]); members that were
/// never Up (Joining, WeaklyUp) are never the oldest, nor are Down or
/// Removed ones. Akka's components differ only in whether Leaving and
/// Exiting members still count, hence the variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OldestAmong {
    /// Up and Leaving members. A Leaving member keeps its singletons until
    /// it is Exiting, so it stays the oldest until then. Akka's
    /// `ClusterSingletonManager` and `ClusterSingletonProxy`, and the split
    /// brain resolver's keep-oldest (its `members`) use this;
    /// [`CurrentClusterState::oldest`](crate::CurrentClusterState::oldest)
    /// too.
    UpOrLeaving,
    /// Up members only: keep-oldest's second look at a partition, where a
    /// Leaving member may already be Exiting on the other side (Akka's
    /// `excludingPossiblyExiting`).
    Up,
    /// Up, Leaving and Exiting members: where a singleton may still run
    /// while its host exits (Akka's `ShardRegion` looks for the shard
    /// coordinator among these).
    UpLeavingOrExiting,
}

impl OldestAmong {
    /// True if a member with `status` may be the oldest.
    pub fn includes(self, status: MemberStatus) -> bool {
        match self {
            OldestAmong::Up => status == MemberStatus::Up,
            OldestAmong::UpOrLeaving => {
                matches!(status, MemberStatus::Up | MemberStatus::Leaving)
            }
            OldestAmong::UpLeavingOrExiting => matches!(
                status,
                MemberStatus::Up | MemberStatus::Leaving | MemberStatus::Exiting
            ),
        }
    }
}

/// The oldest of `members` (optionally only those with `role`) among the
/// statuses `among` admits: the one definition of "the oldest member"
/// that the singleton manager and proxy, the split brain resolver's
/// keep-oldest, [`CurrentClusterState`](crate::CurrentClusterState) and
/// sharding use.
///
/// ```
/// use std::collections::BTreeSet;
/// use troupe_cluster::member::{oldest, OldestAmong};
/// use troupe_cluster::{Member, MemberStatus, UniqueAddress};
/// use troupe_core::remote::Address;
///
/// let node = |p: u16| UniqueAddress::new(Address::new("s", "127.0.0.1", p), p.into());
/// let first = Member::joining(node(1), BTreeSet::new()).up(1).with_status(MemberStatus::Leaving);
/// let second = Member::joining(node(2), BTreeSet::new()).up(2);
/// let members = [first.clone(), second.clone()];
/// assert_eq!(oldest(&members, None, OldestAmong::UpOrLeaving), Some(&first));
/// assert_eq!(oldest(&members, None, OldestAmong::Up), Some(&second));
/// assert_eq!(oldest(&members, Some("backend"), OldestAmong::Up), None);
/// ```
pub fn oldest<'a>(
    members: impl IntoIterator<Item = &'a Member>,
    role: Option<&str>,
    among: OldestAmong,
) -> Option<&'a Member> {
    members
        .into_iter()
        .filter(|m| among.includes(m.status))
        .filter(|m| role.is_none_or(|r| m.has_role(r)))
        .reduce(|a, b| if b.is_older_than(a) { b } else { a })
}

/// Members are ordered (and unique) by node.
impl Ord for Member {
    fn cmp(&self, other: &Self) -> Ordering {
        self.node.cmp(&other.node)
    }
}

impl PartialOrd for Member {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: u16, uid: u64) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", host, port), uid)
    }

    #[test]
    fn address_order_is_host_then_port() {
        let mut v = vec![
            node("b", 1, 1),
            node("a", 2, 1),
            node("a", 1, 2),
            node("a", 1, 1),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                node("a", 1, 1),
                node("a", 1, 2),
                node("a", 2, 1),
                node("b", 1, 1)
            ]
        );
    }

    #[test]
    fn merge_prefers_later_stages() {
        let j = Member::joining(node("a", 1, 1), BTreeSet::new());
        let up = j.up(3);
        let down = up.with_status(MemberStatus::Down);
        assert_eq!(Member::highest_priority(&j, &up), &up);
        assert_eq!(Member::highest_priority(&down, &up), &down);
        assert_eq!(Member::highest_priority(&up, &j.up(1)).up_number, 1);
        assert!(MemberStatus::Joining.can_move_to(MemberStatus::Up));
        assert!(!MemberStatus::Removed.can_move_to(MemberStatus::Up));
        assert!(!MemberStatus::Down.can_move_to(MemberStatus::Up));
    }

    #[test]
    fn age_by_up_number_then_address() {
        let a = Member::joining(node("a", 1, 1), BTreeSet::new()).up(2);
        let b = Member::joining(node("b", 1, 1), BTreeSet::new()).up(1);
        assert!(b.is_older_than(&a));
        let c = Member::joining(node("c", 1, 1), BTreeSet::new()).up(2);
        assert!(a.is_older_than(&c));
    }

    #[test]
    fn the_oldest_depends_on_the_statuses_that_count() {
        let m = |p: u16, up: i32, status: MemberStatus, role: &str| Member {
            status,
            ..Member::joining(node("a", p, 1), [role.to_string()].into_iter().collect()).up(up)
        };
        let members = [
            m(1, 1, MemberStatus::Exiting, "x"),
            m(2, 2, MemberStatus::Leaving, "x"),
            m(3, 3, MemberStatus::Up, "y"),
            m(4, 4, MemberStatus::Up, "x"),
            m(5, 0, MemberStatus::Down, "x"),
            Member::joining(node("a", 6, 1), BTreeSet::new()),
        ];
        let port = |among, role| oldest(&members, role, among).map(|m| m.node.address.port());
        assert_eq!(port(OldestAmong::UpLeavingOrExiting, None), Some(1));
        assert_eq!(port(OldestAmong::UpOrLeaving, None), Some(2));
        assert_eq!(port(OldestAmong::Up, None), Some(3));
        assert_eq!(port(OldestAmong::Up, Some("x")), Some(4));
        assert_eq!(port(OldestAmong::UpOrLeaving, Some("z")), None);
        // Joining members are never the oldest.
        assert_eq!(oldest(&members[5..], None, OldestAmong::UpOrLeaving), None);
    }

    #[test]
    fn clock_keys_are_stable_and_distinct() {
        assert_eq!(node("a", 1, 1).clock_key(), node("a", 1, 1).clock_key());
        assert_ne!(node("a", 1, 1).clock_key(), node("a", 1, 2).clock_key());
    }
}
