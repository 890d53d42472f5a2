//! The JSON documents of the management API, with Akka Management's field
//! names (camelCase). They deserialize too, for clients of the API.

use crate::events::CurrentClusterState;
use crate::member::{Member, UniqueAddress};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The answer to `GET /cluster/members`: this node's view of the cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMembers {
    /// The address of the node that answered.
    pub self_node: String,
    /// Every member, in address order.
    pub members: Vec<ClusterMember>,
    /// Members that some node cannot reach.
    pub unreachable: Vec<ClusterUnreachableMember>,
    /// The leader's address; `null` when no member can lead.
    pub leader: Option<String>,
    /// The address of the oldest Up (or Leaving) member; `null` if none.
    pub oldest: Option<String>,
    /// For each role that has one, the oldest Up (or Leaving) member with
    /// that role.
    pub oldest_per_role: BTreeMap<String, String>,
}

/// One member, as in `GET /cluster/members/{address}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMember {
    /// Its address, `troupe://SYSTEM@HOST:PORT`.
    pub node: String,
    /// The UID of its incarnation, as a decimal string (JSON numbers lose
    /// precision above 2^53).
    pub node_uid: String,
    /// Its status: `Joining`, `WeaklyUp`, `Up`, `Leaving`, `Exiting`,
    /// `Down` or `Removed`.
    pub status: String,
    /// Its roles, sorted.
    pub roles: Vec<String>,
}

/// A member that some node cannot reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUnreachableMember {
    /// Its address.
    pub node: String,
    /// The addresses of the nodes that report it unreachable.
    pub observed_by: Vec<String>,
}

/// A message: the answer to a command, or why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagementMessage {
    /// What happened.
    pub message: String,
}

impl ManagementMessage {
    /// A message with this text.
    pub fn new(message: impl Into<String>) -> Self {
        ManagementMessage {
            message: message.into(),
        }
    }
}

impl ClusterMember {
    /// The JSON form of `member`.
    pub fn of(member: &Member) -> Self {
        ClusterMember {
            node: member.node.address.to_string(),
            node_uid: member.node.uid.to_string(),
            status: member.status.name().to_string(),
            roles: member.roles.iter().cloned().collect(),
        }
    }
}

impl ClusterMembers {
    /// The JSON form of `state` as seen by `self_node`.
    pub fn of(self_node: &UniqueAddress, state: &CurrentClusterState) -> Self {
        let text = |n: &UniqueAddress| n.address.to_string();
        ClusterMembers {
            self_node: text(self_node),
            members: state.members.iter().map(ClusterMember::of).collect(),
            unreachable: state
                .unreachable_observed_by
                .iter()
                .map(|(node, observers)| ClusterUnreachableMember {
                    node: text(node),
                    observed_by: observers.iter().map(text).collect(),
                })
                .collect(),
            leader: state.leader.as_ref().map(text),
            oldest: state.oldest.as_ref().map(text),
            oldest_per_role: state
                .oldest_per_role
                .iter()
                .filter_map(|(role, oldest)| oldest.as_ref().map(|o| (role.clone(), text(o))))
                .collect(),
        }
    }
}

/// The answer to `GET /ready` when this node is not ready (status 503):
/// why, and every check that failed.
///
/// ```json
/// {"message":"Not Healthy: check [sharding] failed: ...",
///  "failedChecks":[{"name":"sharding","message":"..."}]}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotReady {
    /// `Not Healthy: ` and the failures, in one line.
    pub message: String,
    /// The failing checks, in the order they were registered;
    /// `cluster-membership` (this member is not Up or WeaklyUp) first.
    pub failed_checks: Vec<FailedCheck>,
}

/// One failing readiness check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedCheck {
    /// The check's name.
    pub name: String,
    /// Why it fails (or that it timed out or panicked).
    pub message: String,
}

impl NotReady {
    /// The answer for these failures.
    pub fn of(failed_checks: Vec<FailedCheck>) -> Self {
        let message = format!(
            "Not Healthy: {}",
            failed_checks
                .iter()
                .map(|c| format!("check [{}] failed: {}", c.name, c.message))
                .collect::<Vec<_>>()
                .join("; ")
        );
        NotReady {
            message,
            failed_checks,
        }
    }
}

/// The answer to `GET /bootstrap/seed-nodes` (a contact point of cluster
/// bootstrap): the node that answered, and up to five members it sees as
/// Up, WeaklyUp or Joining and reachable, which a joining node may use as
/// seed nodes. Empty while the node is not part of a cluster.
///
/// ```json
/// {"selfNode":"troupe://shop@10.0.0.1:2552",
///  "seedNodes":[{"node":"troupe://shop@10.0.0.1:2552","nodeUid":"8312...","status":"Up","roles":[]}]}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeedNodes {
    /// The remoting address of the node that answered.
    pub self_node: String,
    /// Members to join through, in address order.
    pub seed_nodes: Vec<ClusterMember>,
}

/// How many seed nodes a contact point reports at most (Akka's).
pub(crate) const MAX_SEED_NODES: usize = 5;

impl SeedNodes {
    /// The answer of `self_node` for `state`.
    pub fn of(self_node: &UniqueAddress, state: &CurrentClusterState) -> Self {
        use crate::member::MemberStatus;
        let unreachable: std::collections::BTreeSet<&UniqueAddress> =
            state.unreachable.iter().map(|m| &m.node).collect();
        SeedNodes {
            self_node: self_node.address.to_string(),
            seed_nodes: state
                .members
                .iter()
                .filter(|m| {
                    matches!(
                        m.status,
                        MemberStatus::Up | MemberStatus::WeaklyUp | MemberStatus::Joining
                    ) && !unreachable.contains(&m.node)
                })
                .take(MAX_SEED_NODES)
                .map(ClusterMember::of)
                .collect(),
        }
    }
}
