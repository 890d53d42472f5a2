//! Cluster sharding over management HTTP: Akka Management's sharding
//! routes, and the sharding readiness check (Akka's
//! `ClusterShardingHealthCheck`), for the cluster's
//! [`ManagementServer`](troupe_cluster::management::ManagementServer).
//!
//! | route | answer |
//! | --- | --- |
//! | `GET /cluster/shards` | the entity types started on this node ([`ShardEntityTypeKeys`]) |
//! | `GET /cluster/shards/{name}` | this node's shards of type `name` and their running entity counts ([`ShardDetails`]) |
//! | `GET /cluster/shards/{name}/state` | this node's shards of type `name` and their running entity ids ([`RegionState`]) |
//! | `GET /cluster/shards/{name}/stats` | running entities per shard in every region of the cluster, and the regions that did not answer ([`ClusterStats`]); `?timeout=3s` (default 5 s) |
//!
//! A type that is not started on this node is 404, a region that does not
//! answer in time 503, both with Akka Management's `{"message": "..."}`.
//! The readiness check ([`readiness_check`], named
//! [`READINESS_CHECK_NAME`]) fails until every region of this node has
//! registered with its coordinator.
//!
//! ```no_run
//! use troupe_cluster::management::{ManagementServer, ManagementSettings};
//! use troupe_sharding::{management, ClusterSharding};
//! # fn run(sharding: ClusterSharding) -> Result<(), Box<dyn std::error::Error>> {
//! // After sharding.start(...) of the node's entity types:
//! let settings = management::with_sharding(ManagementSettings::new("127.0.0.1:8558"), &sharding);
//! let server = ManagementServer::start(sharding.cluster().clone(), settings)?;
//! // curl http://127.0.0.1:8558/cluster/shards/counter
//! # Ok(()) }
//! ```

use crate::error::ShardingError;
use crate::queries::{ClusterShardingStats, CurrentShardRegionState};
use crate::sharding::ClusterSharding;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use troupe_cluster::management::{
    ExtraRoutes, HealthCheck, ManagementMessage, ManagementSettings, RouteAnswer, RouteRequest,
};
use troupe_cluster::MemberStatus;
use troupe_core::rt;

/// The path under which the sharding routes live.
const SHARDS: &str = "/cluster/shards";

/// The name of the sharding readiness check in `/ready`'s answer.
pub const READINESS_CHECK_NAME: &str = "cluster-sharding";

/// The default timeout of `GET /cluster/shards/{name}/stats`.
const DEFAULT_STATS_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `?timeout=` a stats request may ask for.
const MAX_STATS_TIMEOUT: Duration = Duration::from_secs(60);

/// The answer to `GET /cluster/shards`.
///
/// ```json
/// {"entityTypeKeys":["counter","user"]}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardEntityTypeKeys {
    /// The entity types started (or proxied) on this node, sorted.
    pub entity_type_keys: Vec<String>,
}

/// The answer to `GET /cluster/shards/{name}` (Akka Management's
/// `ShardDetails`).
///
/// ```json
/// {"regions":[{"shardId":"7","numEntities":2},{"shardId":"12","numEntities":1}]}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardDetails {
    /// The shards of this node's region.
    pub regions: Vec<ShardRegionInfo>,
}

/// One shard of a region and its running entities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardRegionInfo {
    /// The shard's id.
    pub shard_id: String,
    /// How many of its entities are running.
    pub num_entities: usize,
}

/// The answer to `GET /cluster/shards/{name}/state`: this node's shards
/// and the ids of their running entities.
///
/// ```json
/// {"shards":[{"shardId":"7","entityIds":["a","b"]}]}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionState {
    /// The region's shards, ordered by id.
    pub shards: Vec<ShardEntityIds>,
}

/// One shard and its running entities.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShardEntityIds {
    /// The shard's id.
    pub shard_id: String,
    /// Its running entities, ordered.
    pub entity_ids: Vec<String>,
}

/// The answer to `GET /cluster/shards/{name}/stats`: running entities per
/// shard in every region of the type in the cluster (Akka's
/// `ClusterShardingStats`).
///
/// ```json
/// {"regions":{"troupe://app@10.0.0.1:2552":{"stats":{"7":2,"12":1}},
///             "troupe://app@10.0.0.2:2552":{"stats":{"3":4}}},
///  "failed":["troupe://app@10.0.0.3:2552"]}
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStats {
    /// Region (its node's address) -> its stats.
    pub regions: BTreeMap<String, RegionStats>,
    /// The regions (nodes' addresses) that did not answer in time.
    pub failed: Vec<String>,
}

/// Running entities per shard of one region.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionStats {
    /// Shard id -> number of running entities.
    pub stats: BTreeMap<String, usize>,
}

impl From<&CurrentShardRegionState> for ShardDetails {
    fn from(state: &CurrentShardRegionState) -> Self {
        ShardDetails {
            regions: state
                .shards
                .iter()
                .map(|s| ShardRegionInfo {
                    shard_id: s.shard_id.clone(),
                    num_entities: s.entity_ids.len(),
                })
                .collect(),
        }
    }
}

impl From<&CurrentShardRegionState> for RegionState {
    fn from(state: &CurrentShardRegionState) -> Self {
        RegionState {
            shards: state
                .shards
                .iter()
                .map(|s| ShardEntityIds {
                    shard_id: s.shard_id.clone(),
                    entity_ids: s.entity_ids.clone(),
                })
                .collect(),
        }
    }
}

impl From<&ClusterShardingStats> for ClusterStats {
    fn from(stats: &ClusterShardingStats) -> Self {
        ClusterStats {
            regions: stats
                .regions
                .iter()
                .map(|(node, s)| {
                    (
                        node.clone(),
                        RegionStats {
                            stats: s.stats.clone(),
                        },
                    )
                })
                .collect(),
            failed: stats.failed.clone(),
        }
    }
}

/// `settings` with the sharding routes ([`routes`]) and the sharding
/// readiness check ([`readiness_check`] with the default
/// [`ShardingHealthCheckSettings`]).
pub fn with_sharding(
    settings: ManagementSettings,
    sharding: &ClusterSharding,
) -> ManagementSettings {
    settings
        .with_extra_routes(routes(sharding))
        .with_readiness_check(
            READINESS_CHECK_NAME,
            readiness_check(sharding, ShardingHealthCheckSettings::default()),
        )
}

fn json(status: u16, value: &impl Serialize) -> (u16, String) {
    match serde_json::to_string(value) {
        Ok(body) => (status, body),
        Err(e) => message(500, format!("cannot encode the answer: {e}")),
    }
}

fn message(status: u16, text: impl Into<String>) -> (u16, String) {
    let body = serde_json::to_string(&ManagementMessage::new(text))
        .unwrap_or_else(|_| String::from("{\"message\":\"\"}"));
    (status, body)
}

fn answer(f: impl Future<Output = (u16, String)> + Send + 'static) -> Option<RouteAnswer> {
    Some(Box::pin(f))
}

/// The answer to a failed query about type `name`.
fn failure(name: &str, e: ShardingError) -> (u16, String) {
    match e {
        ShardingError::NotStarted(_) => message(
            404,
            format!("Shard region [{name}] is not started on this node"),
        ),
        ShardingError::Timeout => message(
            503,
            format!("The shard region [{name}] did not answer in time"),
        ),
        e => message(500, format!("Cannot query shard region [{name}]: {e}")),
    }
}

/// The sharding routes of `sharding` (see the [module](self)), to add with
/// [`ManagementSettings::with_extra_routes`]. Every path under
/// `/cluster/shards` is theirs: other methods than `GET` and `HEAD` are
/// 405, unknown sub-paths 404.
pub fn routes(sharding: &ClusterSharding) -> ExtraRoutes {
    let sharding = sharding.clone();
    Arc::new(move |request: &RouteRequest| {
        let segments = request.segments_after(SHARDS)?;
        if !request.is_read() {
            return answer(std::future::ready(message(
                405,
                format!(
                    "{} is not allowed on {}; allowed: GET, HEAD",
                    request.method, request.path
                ),
            )));
        }
        let sharding = sharding.clone();
        match segments.as_slice() {
            [] => {
                let keys = ShardEntityTypeKeys {
                    entity_type_keys: sharding
                        .entity_type_names()
                        .into_iter()
                        .map(str::to_string)
                        .collect(),
                };
                answer(std::future::ready(json(200, &keys)))
            }
            [name] => {
                let name = name.clone();
                answer(async move {
                    match sharding.region_state_of(&name).await {
                        Ok(state) => json(200, &ShardDetails::from(&state)),
                        Err(e) => failure(&name, e),
                    }
                })
            }
            [name, what] if what == "state" => {
                let name = name.clone();
                answer(async move {
                    match sharding.region_state_of(&name).await {
                        Ok(state) => json(200, &RegionState::from(&state)),
                        Err(e) => failure(&name, e),
                    }
                })
            }
            [name, what] if what == "stats" => {
                let name = name.clone();
                let timeout = match request.form_field("timeout") {
                    None => DEFAULT_STATS_TIMEOUT,
                    Some(text) => match humantime::parse_duration(&text) {
                        Ok(t) if !t.is_zero() && t <= MAX_STATS_TIMEOUT => t,
                        _ => {
                            return answer(std::future::ready(message(
                                400,
                                format!(
                                    "`timeout` must be a duration such as 3s or 500ms, \
                                     at most {MAX_STATS_TIMEOUT:?}, not `{text}`"
                                ),
                            )));
                        }
                    },
                };
                answer(async move {
                    match sharding.cluster_stats_of(&name, timeout).await {
                        Ok(stats) => json(200, &ClusterStats::from(&stats)),
                        Err(e) => failure(&name, e),
                    }
                })
            }
            _ => answer(std::future::ready(message(
                404,
                format!("No route for {} {}", request.method, request.path),
            ))),
        }
    })
}

/// Settings of the sharding readiness check (Akka's
/// `akka.cluster.sharding.healthcheck`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardingHealthCheckSettings {
    /// The entity types whose regions must have registered. Empty (the
    /// default) means every type started on this node when the check runs
    /// (Akka's default `names = []` checks none).
    pub names: Vec<String>,
    /// How long a region may take to say whether it has registered
    /// (`timeout`). Default 5 s.
    pub timeout: Duration,
    /// After this long since the check first ran with this member Up (or
    /// past Joining), it passes even if a region has not registered, so a
    /// coordinator that cannot start does not keep the node out of
    /// service forever (`disabled-after`). Default 10 s.
    pub disabled_after: Duration,
}

impl Default for ShardingHealthCheckSettings {
    fn default() -> Self {
        ShardingHealthCheckSettings {
            names: Vec::new(),
            timeout: Duration::from_secs(5),
            disabled_after: Duration::from_secs(10),
        }
    }
}

/// The state of one readiness check.
#[derive(Default)]
struct CheckState {
    /// Once every region has registered, the check always passes.
    registered: AtomicBool,
    /// When the check first ran with this member past Joining.
    started: Mutex<Option<Instant>>,
}

/// True if this member is past Joining and not Removed (Akka's
/// `isMemberUp` of the sharding health check).
async fn member_is_up(sharding: &ClusterSharding) -> bool {
    let cluster = sharding.cluster();
    let Ok(state) = cluster.state().await else {
        return false;
    };
    state
        .members
        .iter()
        .find(|m| &m.node == cluster.self_node())
        .is_some_and(|m| !matches!(m.status, MemberStatus::Joining | MemberStatus::Removed))
}

/// The sharding readiness check (Akka's `ClusterShardingHealthCheck`), to
/// add with [`ManagementSettings::with_readiness_check`] (named
/// [`READINESS_CHECK_NAME`]): it fails until the regions of every checked
/// entity type (see [`ShardingHealthCheckSettings::names`]) have
/// registered with their coordinator. Once they have, it passes for good;
/// and `disabled_after` after it first ran with this member Up, it passes
/// whatever the regions say.
pub fn readiness_check(
    sharding: &ClusterSharding,
    settings: ShardingHealthCheckSettings,
) -> HealthCheck {
    let sharding = sharding.clone();
    let state = Arc::new(CheckState::default());
    Arc::new(move || {
        let (sharding, settings, state) = (sharding.clone(), settings.clone(), state.clone());
        Box::pin(async move {
            if state.registered.load(Ordering::Acquire) {
                return Ok(());
            }
            let started = *state.started.lock().unwrap_or_else(|e| e.into_inner());
            match started {
                Some(at) if at.elapsed() > settings.disabled_after => return Ok(()),
                Some(_) => {}
                None => {
                    if member_is_up(&sharding).await {
                        let mut slot = state.started.lock().unwrap_or_else(|e| e.into_inner());
                        slot.get_or_insert_with(Instant::now);
                    }
                }
            }
            let names: Vec<String> = if settings.names.is_empty() {
                sharding
                    .entity_type_names()
                    .into_iter()
                    .map(str::to_string)
                    .collect()
            } else {
                settings.names.clone()
            };
            let mut waiting = Vec::new();
            for name in &names {
                match rt::timeout(settings.timeout, sharding.is_registered_of(name)).await {
                    Some(Ok(true)) => {}
                    Some(Ok(false)) => waiting.push(name.clone()),
                    Some(Err(e)) => waiting.push(format!("{name} ({e})")),
                    None => {
                        waiting.push(format!("{name} (no answer within {:?})", settings.timeout))
                    }
                }
            }
            if waiting.is_empty() {
                // Latched only once there was something to check: types
                // started after that are not waited for (as Akka's).
                if !names.is_empty() {
                    state.registered.store(true, Ordering::Release);
                }
                Ok(())
            } else {
                tracing::info!(
                    "not all shard regions have registered with their coordinator; still to \
                     register: [{}]",
                    waiting.join(", ")
                );
                Err(format!(
                    "shard regions not registered with their coordinator yet: [{}]",
                    waiting.join(", ")
                ))
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queries::{ShardRegionStats, ShardState};
    use troupe_cluster::{Cluster, ClusterSettings};
    use troupe_core::prelude::*;
    use troupe_core::remote::RemoteSettings;

    /// A one-node cluster with sharding (and no entity type).
    fn one_node() -> (ActorSystem, ClusterSharding) {
        let system = ActorSystem::builder("management")
            .remote(RemoteSettings::new("127.0.0.1:0").with_secret("management-test"))
            .build()
            .unwrap();
        let me = system.remoting().unwrap().address().clone();
        let settings = ClusterSettings {
            seed_nodes: vec![me],
            ..ClusterSettings::default()
        };
        let cluster = Cluster::start(&system, settings).unwrap();
        let sharding = ClusterSharding::new(&system, &cluster).unwrap();
        (system, sharding)
    }

    fn call(routes: &ExtraRoutes, request: RouteRequest) -> Option<(u16, serde_json::Value)> {
        let (status, body) = rt::block_on(routes(&request)?);
        Some((status, serde_json::from_str(&body).unwrap()))
    }

    #[test]
    fn the_json_has_akka_managements_shapes() {
        let state = CurrentShardRegionState {
            shards: vec![
                ShardState {
                    shard_id: "1".into(),
                    entity_ids: vec!["a".into(), "b".into()],
                },
                ShardState {
                    shard_id: "7".into(),
                    entity_ids: vec![],
                },
            ],
        };
        assert_eq!(
            serde_json::to_value(ShardDetails::from(&state)).unwrap(),
            serde_json::json!({"regions": [
                {"shardId": "1", "numEntities": 2},
                {"shardId": "7", "numEntities": 0},
            ]})
        );
        assert_eq!(
            serde_json::to_value(RegionState::from(&state)).unwrap(),
            serde_json::json!({"shards": [
                {"shardId": "1", "entityIds": ["a", "b"]},
                {"shardId": "7", "entityIds": []},
            ]})
        );
        let mut stats = ClusterShardingStats::default();
        stats.regions.insert(
            "troupe://s@h:1".into(),
            ShardRegionStats {
                stats: [("1".to_string(), 2)].into(),
            },
        );
        stats.failed.push("troupe://s@h:2".into());
        assert_eq!(
            serde_json::to_value(ClusterStats::from(&stats)).unwrap(),
            serde_json::json!({
                "regions": {"troupe://s@h:1": {"stats": {"1": 2}}},
                "failed": ["troupe://s@h:2"],
            })
        );
        let keys = ShardEntityTypeKeys {
            entity_type_keys: vec!["counter".into()],
        };
        assert_eq!(
            serde_json::to_string(&keys).unwrap(),
            r#"{"entityTypeKeys":["counter"]}"#
        );
    }

    #[test]
    fn routes_answer_under_cluster_shards_only() {
        let (system, sharding) = one_node();
        let routes = routes(&sharding);
        let get = |path: &str| call(&routes, RouteRequest::new("GET", path));
        assert_eq!(
            get("/cluster/shards"),
            Some((200, serde_json::json!({"entityTypeKeys": []})))
        );
        assert_eq!(
            get("/cluster/shards/"),
            Some((200, serde_json::json!({"entityTypeKeys": []})))
        );
        for path in [
            "/cluster/shards/counter",
            "/cluster/shards/counter/state",
            "/cluster/shards/counter/stats",
        ] {
            let (status, json) = get(path).unwrap();
            assert_eq!(status, 404, "{path}: {json}");
            assert_eq!(
                json["message"],
                "Shard region [counter] is not started on this node"
            );
        }
        assert_eq!(get("/cluster/shards/counter/other").unwrap().0, 404);
        let bad =
            RouteRequest::new("GET", "/cluster/shards/counter/stats").with_query("timeout=soon");
        assert_eq!(call(&routes, bad).unwrap().0, 400);
        let post = RouteRequest::new("POST", "/cluster/shards");
        assert_eq!(call(&routes, post).unwrap().0, 405);
        // Not theirs.
        assert!(get("/cluster/members").is_none());
        assert!(get("/cluster/shardsx").is_none());
        rt::block_on(system.shutdown());
    }

    #[test]
    fn the_readiness_check_waits_for_registration_until_disabled_after() {
        let (system, sharding) = one_node();
        rt::block_on(async {
            // No entity type started: nothing to wait for.
            let every = readiness_check(&sharding, ShardingHealthCheckSettings::default());
            assert_eq!(every().await, Ok(()));

            // A type that never registers (it is not even started) fails
            // the check until `disabled_after` past this member's Up.
            let check = readiness_check(
                &sharding,
                ShardingHealthCheckSettings {
                    names: vec!["never".into()],
                    timeout: Duration::from_secs(1),
                    disabled_after: Duration::from_millis(500),
                },
            );
            let why = check().await.unwrap_err();
            assert!(why.contains("never"), "{why}");
            let start = Instant::now();
            while !member_is_up(&sharding).await {
                assert!(start.elapsed() < Duration::from_secs(20), "never Up");
                rt::sleep(Duration::from_millis(50)).await;
            }
            // The first check with the member Up starts the clock.
            assert!(check().await.is_err());
            let clock = Instant::now();
            while check().await.is_err() {
                assert!(
                    clock.elapsed() < Duration::from_secs(5),
                    "the check was never disabled"
                );
                rt::sleep(Duration::from_millis(50)).await;
            }
            assert!(clock.elapsed() >= Duration::from_millis(450));
            assert_eq!(check().await, Ok(()));
        });
        rt::block_on(system.shutdown());
    }
}
