//! Cluster settings: a typed struct with Akka's defaults, loadable from a
//! TOML file and overridable by `TROUPE_*` environment variables. A bad
//! value is a clear error at start, naming the setting.

use crate::coordinated_shutdown::{CoordinatedShutdownSettings, Phase};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;
use std::time::Duration;
use troupe_core::remote::{Address, PhiAccrualSettings};

/// How a partition is resolved (Akka's split brain resolver strategies).
#[derive(Debug, Clone, PartialEq)]
pub enum DowningStrategy {
    /// No automatic downing: a human (or the HTTP API) downs unreachable
    /// members. Unsafe for sharding and singletons: logged at start.
    None,
    /// Keep the side with the majority of members (the lowest address
    /// breaks a tie); down the other.
    KeepMajority {
        /// Count only members with this role.
        role: Option<String>,
    },
    /// Keep a side with at least `quorum_size` members; down the rest.
    StaticQuorum {
        /// Members needed to survive.
        quorum_size: usize,
        /// Count only members with this role.
        role: Option<String>,
    },
    /// Keep the side with the oldest member.
    KeepOldest {
        /// Down the oldest if it is alone on its side.
        down_if_alone: bool,
        /// The oldest among members with this role.
        role: Option<String>,
    },
    /// Down every member when there is a partition.
    DownAll,
    /// Down unreachable members after a time, without regard to the other
    /// side: can split the cluster in two. Only for tests and demos.
    AutoDownUnsafe {
        /// Time a member stays unreachable before it is downed.
        after: Duration,
    },
}

/// Settings of the split brain resolver.
#[derive(Debug, Clone, PartialEq)]
pub struct DowningSettings {
    /// The strategy.
    pub strategy: DowningStrategy,
    /// How long the set of unreachable members must stay the same before
    /// the resolver acts. Default 20 s.
    pub stable_after: Duration,
    /// If reachability keeps changing for `stable_after` plus this long,
    /// every node downs all members. Default (Akka's "on") 3/4 of
    /// `stable_after`, at least 4 s: 15 s; `None` turns it off.
    pub down_all_when_unstable: Option<Duration>,
}

impl DowningSettings {
    /// Akka's `down-all-when-unstable = on` for a given `stable_after`.
    pub fn unstable_default(stable_after: Duration) -> Duration {
        (stable_after * 3 / 4).max(Duration::from_secs(4))
    }
}

/// Settings of a cluster node. `Default` gives Akka's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSettings {
    /// Nodes to join; the first may form a new cluster.
    pub seed_nodes: Vec<Address>,
    /// This node's roles.
    pub roles: BTreeSet<String>,
    /// Members needed before the leader moves any Up. Default 1.
    pub min_nr_of_members: usize,
    /// The same per role.
    pub min_nr_of_members_per_role: BTreeMap<String, usize>,
    /// Gossip interval. Default 1 s.
    pub gossip_interval: Duration,
    /// Probability of gossiping to a node that has not seen the state.
    /// Default 0.8.
    pub gossip_different_view_probability: f64,
    /// Above this many members the probability above is reduced. Default 400.
    pub reduce_gossip_different_view_probability: usize,
    /// Leader actions interval. Default 1 s.
    pub leader_actions_interval: Duration,
    /// How often the failure detector's verdicts are applied. Default
    /// 250 ms, where Akka has 1 s: φ crosses the threshold about 4.5 s after
    /// the last heartbeat answer with the default detector, and a 1 s
    /// reaper ticking in step with the heartbeats only notices at 5 s.
    pub unreachable_nodes_reaper_interval: Duration,
    /// Time the first seed waits for other seeds before forming a cluster.
    /// Default 5 s.
    pub seed_node_timeout: Duration,
    /// Retry joining after this long. Default 10 s.
    pub retry_unsuccessful_join_after: Duration,
    /// Give up and shut down after this long without joining. Default off.
    pub shutdown_after_unsuccessful_join_seed_nodes: Option<Duration>,
    /// Move joining members to WeaklyUp after this long without
    /// convergence. Default 7 s; `None` disables it.
    pub allow_weakly_up_members: Option<Duration>,
    /// Forget removed nodes after this long. Default 24 h.
    pub prune_gossip_tombstones_after: Duration,
    /// After a member was downed and removed, singletons (and later
    /// shards) it hosted start elsewhere only this much later, so that
    /// the losing side of a partition has surely stopped them first.
    /// Default `None` (off): take-over follows removal at once. Akka
    /// uses `downing.stable_after` here when it is off; set it to that
    /// for the same guarantee at the price of a slower take-over.
    pub down_removal_margin: Option<Duration>,
    /// Heartbeat interval. Default 1 s.
    pub heartbeat_interval: Duration,
    /// A first heartbeat response expected within. Default 1 s.
    pub heartbeat_expected_response_after: Duration,
    /// Each node is monitored by this many others. Default 9.
    pub monitored_by_nr_of_members: usize,
    /// The phi accrual failure detector (threshold 8, acceptable pause
    /// 3 s, min std-deviation 100 ms, 1000 samples).
    pub failure_detector: PhiAccrualSettings,
    /// Downing.
    pub downing: DowningSettings,
    /// Run the coordinated shutdown when this node is downed or removed by
    /// the others (Akka's `run-coordinated-shutdown-when-down`). Default
    /// true.
    pub run_coordinated_shutdown_when_down: bool,
    /// The coordinated shutdown's phase timeouts, whether it stops the
    /// actor system and whether `ActorSystem::shutdown` runs it
    /// (`[coordinated-shutdown]` in the file).
    pub coordinated_shutdown: CoordinatedShutdownSettings,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        let stable_after = Duration::from_secs(20);
        ClusterSettings {
            seed_nodes: Vec::new(),
            roles: BTreeSet::new(),
            min_nr_of_members: 1,
            min_nr_of_members_per_role: BTreeMap::new(),
            gossip_interval: Duration::from_secs(1),
            gossip_different_view_probability: 0.8,
            reduce_gossip_different_view_probability: 400,
            leader_actions_interval: Duration::from_secs(1),
            unreachable_nodes_reaper_interval: Duration::from_millis(250),
            seed_node_timeout: Duration::from_secs(5),
            retry_unsuccessful_join_after: Duration::from_secs(10),
            shutdown_after_unsuccessful_join_seed_nodes: None,
            allow_weakly_up_members: Some(Duration::from_secs(7)),
            down_removal_margin: None,
            prune_gossip_tombstones_after: Duration::from_secs(24 * 3600),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_expected_response_after: Duration::from_secs(1),
            monitored_by_nr_of_members: 9,
            failure_detector: PhiAccrualSettings::default(),
            downing: DowningSettings {
                strategy: DowningStrategy::KeepMajority { role: None },
                stable_after,
                down_all_when_unstable: Some(DowningSettings::unstable_default(stable_after)),
            },
            run_coordinated_shutdown_when_down: true,
            coordinated_shutdown: CoordinatedShutdownSettings::default(),
        }
    }
}

/// A setting that could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError(pub String);

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SettingsError {}

/// The TOML shape: every field optional, durations as text ("1s", "500ms").
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct SettingsFile {
    /// Cluster sharding's table, read by `troupe_sharding::ShardingSettings`.
    #[allow(dead_code)]
    sharding: Option<serde::de::IgnoredAny>,
    /// Service discovery's table, read by `discovery::DiscoverySettings`.
    #[allow(dead_code)]
    discovery: Option<serde::de::IgnoredAny>,
    /// Cluster bootstrap's table, read by `bootstrap::BootstrapSettings`.
    #[allow(dead_code)]
    bootstrap: Option<serde::de::IgnoredAny>,
    seed_nodes: Option<Vec<String>>,
    roles: Option<Vec<String>>,
    min_nr_of_members: Option<usize>,
    min_nr_of_members_per_role: Option<BTreeMap<String, usize>>,
    gossip_interval: Option<String>,
    gossip_different_view_probability: Option<f64>,
    reduce_gossip_different_view_probability: Option<usize>,
    leader_actions_interval: Option<String>,
    unreachable_nodes_reaper_interval: Option<String>,
    seed_node_timeout: Option<String>,
    retry_unsuccessful_join_after: Option<String>,
    shutdown_after_unsuccessful_join_seed_nodes: Option<String>,
    allow_weakly_up_members: Option<String>,
    down_removal_margin: Option<String>,
    prune_gossip_tombstones_after: Option<String>,
    heartbeat_interval: Option<String>,
    heartbeat_expected_response_after: Option<String>,
    monitored_by_nr_of_members: Option<usize>,
    failure_detector: Option<FailureDetectorFile>,
    downing: Option<DowningFile>,
    run_coordinated_shutdown_when_down: Option<bool>,
    coordinated_shutdown: Option<CoordinatedShutdownFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct CoordinatedShutdownFile {
    default_phase_timeout: Option<String>,
    terminate_actor_system: Option<bool>,
    run_by_actor_system_terminate: Option<bool>,
    phases: Option<BTreeMap<String, PhaseFile>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct PhaseFile {
    timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FailureDetectorFile {
    threshold: Option<f64>,
    max_sample_size: Option<usize>,
    min_std_deviation: Option<String>,
    acceptable_heartbeat_pause: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DowningFile {
    strategy: Option<String>,
    stable_after: Option<String>,
    down_all_when_unstable: Option<String>,
    quorum_size: Option<usize>,
    role: Option<String>,
    down_if_alone: Option<bool>,
    auto_down_after: Option<String>,
}

/// Reads the settings file at `path` and parses it with `parse`; errors
/// name the file.
pub(crate) fn read_settings_file<T>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<T, SettingsError>,
) -> Result<T, SettingsError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| SettingsError(format!("cannot read settings file {}: {e}", path.display())))?;
    parse(&text).map_err(|e| SettingsError(format!("{}: {e}", path.display())))
}

/// The table `key` of TOML text as `T` (unknown keys in it are errors
/// naming the table); `None` if the text has no such table.
pub(crate) fn settings_table<T: serde::de::DeserializeOwned>(
    text: &str,
    key: &str,
) -> Result<Option<T>, SettingsError> {
    let table: toml::Table =
        toml::from_str(text).map_err(|e| SettingsError(e.message().to_string()))?;
    table
        .get(key)
        .map(|value| {
            value
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| SettingsError(format!("{key}: {}", e.message())))
        })
        .transpose()
}

pub(crate) fn duration(name: &str, text: &str) -> Result<Duration, SettingsError> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        SettingsError(format!(
            "{name}: `{text}` is not a duration ({e}); write e.g. \"1s\" or \"500ms\""
        ))
    })
}

/// "off" disables an optional duration.
fn optional_duration(name: &str, text: &str) -> Result<Option<Duration>, SettingsError> {
    match text.trim() {
        "off" | "none" | "" => Ok(None),
        t => duration(name, t).map(Some),
    }
}

fn addresses(name: &str, list: &[String]) -> Result<Vec<Address>, SettingsError> {
    list.iter()
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|e| SettingsError(format!("{name}: {e}")))
        })
        .collect()
}

impl ClusterSettings {
    /// Settings from a TOML file (keys in kebab-case, as Akka's), on top of
    /// the defaults.
    pub fn from_file(path: &Path) -> Result<Self, SettingsError> {
        read_settings_file(path, Self::from_toml)
    }

    /// Settings from TOML text, on top of the defaults.
    ///
    /// ```
    /// use troupe_cluster::ClusterSettings;
    ///
    /// let s = ClusterSettings::from_toml(r#"
    ///     gossip-interval = "500ms"
    ///     roles = ["backend"]
    ///     [downing]
    ///     strategy = "keep-oldest"
    /// "#).unwrap();
    /// assert_eq!(s.gossip_interval.as_millis(), 500);
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, SettingsError> {
        let file: SettingsFile =
            toml::from_str(text).map_err(|e| SettingsError(e.message().to_string()))?;
        let mut s = ClusterSettings::default();
        s.apply(file)?;
        s.validate()?;
        Ok(s)
    }

    fn apply(&mut self, f: SettingsFile) -> Result<(), SettingsError> {
        if let Some(v) = f.seed_nodes {
            self.seed_nodes = addresses("seed-nodes", &v)?;
        }
        if let Some(v) = f.roles {
            self.roles = v.into_iter().filter(|r| !r.is_empty()).collect();
        }
        if let Some(v) = f.min_nr_of_members {
            self.min_nr_of_members = v;
        }
        if let Some(v) = f.min_nr_of_members_per_role {
            self.min_nr_of_members_per_role = v;
        }
        macro_rules! dur {
            ($field:ident, $name:literal) => {
                if let Some(v) = f.$field {
                    self.$field = duration($name, &v)?;
                }
            };
        }
        dur!(gossip_interval, "gossip-interval");
        dur!(leader_actions_interval, "leader-actions-interval");
        dur!(
            unreachable_nodes_reaper_interval,
            "unreachable-nodes-reaper-interval"
        );
        dur!(seed_node_timeout, "seed-node-timeout");
        dur!(
            retry_unsuccessful_join_after,
            "retry-unsuccessful-join-after"
        );
        dur!(
            prune_gossip_tombstones_after,
            "prune-gossip-tombstones-after"
        );
        dur!(heartbeat_interval, "heartbeat-interval");
        dur!(
            heartbeat_expected_response_after,
            "heartbeat-expected-response-after"
        );
        if let Some(v) = f.gossip_different_view_probability {
            self.gossip_different_view_probability = v;
        }
        if let Some(v) = f.reduce_gossip_different_view_probability {
            self.reduce_gossip_different_view_probability = v;
        }
        if let Some(v) = f.shutdown_after_unsuccessful_join_seed_nodes {
            self.shutdown_after_unsuccessful_join_seed_nodes =
                optional_duration("shutdown-after-unsuccessful-join-seed-nodes", &v)?;
        }
        if let Some(v) = f.allow_weakly_up_members {
            self.allow_weakly_up_members = optional_duration("allow-weakly-up-members", &v)?;
        }
        if let Some(v) = f.down_removal_margin {
            self.down_removal_margin = optional_duration("down-removal-margin", &v)?;
        }
        if let Some(v) = f.monitored_by_nr_of_members {
            self.monitored_by_nr_of_members = v;
        }
        if let Some(fd) = f.failure_detector {
            let d = &mut self.failure_detector;
            if let Some(v) = fd.threshold {
                d.threshold = v;
            }
            if let Some(v) = fd.max_sample_size {
                d.max_sample_size = v;
            }
            if let Some(v) = fd.min_std_deviation {
                d.min_std_deviation = duration("failure-detector.min-std-deviation", &v)?;
            }
            if let Some(v) = fd.acceptable_heartbeat_pause {
                d.acceptable_heartbeat_pause =
                    duration("failure-detector.acceptable-heartbeat-pause", &v)?;
            }
        }
        if let Some(v) = f.run_coordinated_shutdown_when_down {
            self.run_coordinated_shutdown_when_down = v;
        }
        if let Some(cs) = f.coordinated_shutdown {
            let c = &mut self.coordinated_shutdown;
            if let Some(v) = cs.default_phase_timeout {
                c.default_phase_timeout =
                    duration("coordinated-shutdown.default-phase-timeout", &v)?;
            }
            if let Some(v) = cs.terminate_actor_system {
                c.terminate_actor_system = v;
            }
            if let Some(v) = cs.run_by_actor_system_terminate {
                c.run_by_actor_system_terminate = v;
            }
            for (name, phase) in cs.phases.unwrap_or_default() {
                let p: Phase = name
                    .parse()
                    .map_err(|e| SettingsError(format!("coordinated-shutdown.phases: {e}")))?;
                if let Some(v) = phase.timeout {
                    let key = format!("coordinated-shutdown.phases.{name}.timeout");
                    c.phase_timeouts.insert(p, duration(&key, &v)?);
                }
            }
        }
        if let Some(d) = f.downing {
            if let Some(v) = d.stable_after {
                self.downing.stable_after = duration("downing.stable-after", &v)?;
                self.downing.down_all_when_unstable =
                    Some(DowningSettings::unstable_default(self.downing.stable_after));
            }
            if let Some(v) = d.down_all_when_unstable {
                self.downing.down_all_when_unstable = if v.trim() == "on" {
                    Some(DowningSettings::unstable_default(self.downing.stable_after))
                } else {
                    optional_duration("downing.down-all-when-unstable", &v)?
                };
            }
            if let Some(name) = d.strategy {
                let role = d.role.clone();
                self.downing.strategy = match name.as_str() {
                    "none" | "off" => DowningStrategy::None,
                    "keep-majority" => DowningStrategy::KeepMajority { role },
                    "static-quorum" => DowningStrategy::StaticQuorum {
                        quorum_size: d.quorum_size.ok_or_else(|| {
                            SettingsError("downing.quorum-size is required for static-quorum".into())
                        })?,
                        role,
                    },
                    "keep-oldest" => DowningStrategy::KeepOldest {
                        down_if_alone: d.down_if_alone.unwrap_or(true),
                        role,
                    },
                    "down-all" => DowningStrategy::DownAll,
                    "auto-down-unsafe" => DowningStrategy::AutoDownUnsafe {
                        after: duration(
                            "downing.auto-down-after",
                            d.auto_down_after.as_deref().unwrap_or("10s"),
                        )?,
                    },
                    other => {
                        return Err(SettingsError(format!(
                            "downing.strategy: unknown strategy `{other}`; use keep-majority, static-quorum, \
                             keep-oldest, down-all, none or auto-down-unsafe"
                        )))
                    }
                };
            }
        }
        Ok(())
    }

    /// Applies `TROUPE_*` environment variables: `TROUPE_GOSSIP_INTERVAL`,
    /// `TROUPE_SEED_NODES` (comma-separated), `TROUPE_ROLES`,
    /// `TROUPE_MIN_NR_OF_MEMBERS`, `TROUPE_DOWNING_STRATEGY`,
    /// `TROUPE_DOWNING_STABLE_AFTER` and every other top-level key of the
    /// file in upper snake case.
    pub fn with_env(self) -> Result<Self, SettingsError> {
        self.with_vars(std::env::vars())
    }

    /// As [`with_env`](Self::with_env), from the given variables.
    pub fn with_vars(
        mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, SettingsError> {
        let mut file = SettingsFile::default();
        let mut downing = DowningFile::default();
        let mut any_downing = false;
        for (k, v) in vars {
            let Some(key) = k.strip_prefix("TROUPE_") else {
                continue;
            };
            let list = || {
                v.split(',')
                    .map(|s| s.trim().to_string())
                    .collect::<Vec<_>>()
            };
            let num = |name: &str| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| SettingsError(format!("{k}: `{v}` is not a number (for {name})")))
            };
            match key {
                "SEED_NODES" => file.seed_nodes = Some(list()),
                "ROLES" => file.roles = Some(list()),
                "MIN_NR_OF_MEMBERS" => file.min_nr_of_members = Some(num("min-nr-of-members")?),
                "GOSSIP_INTERVAL" => file.gossip_interval = Some(v),
                "LEADER_ACTIONS_INTERVAL" => file.leader_actions_interval = Some(v),
                "SEED_NODE_TIMEOUT" => file.seed_node_timeout = Some(v),
                "RETRY_UNSUCCESSFUL_JOIN_AFTER" => file.retry_unsuccessful_join_after = Some(v),
                "SHUTDOWN_AFTER_UNSUCCESSFUL_JOIN_SEED_NODES" => {
                    file.shutdown_after_unsuccessful_join_seed_nodes = Some(v)
                }
                "ALLOW_WEAKLY_UP_MEMBERS" => file.allow_weakly_up_members = Some(v),
                "DOWN_REMOVAL_MARGIN" => file.down_removal_margin = Some(v),
                "HEARTBEAT_INTERVAL" => file.heartbeat_interval = Some(v),
                "MONITORED_BY_NR_OF_MEMBERS" => {
                    file.monitored_by_nr_of_members = Some(num("monitored-by-nr-of-members")?)
                }
                "RUN_COORDINATED_SHUTDOWN_WHEN_DOWN" => {
                    file.run_coordinated_shutdown_when_down =
                        Some(match v.trim().to_ascii_lowercase().as_str() {
                            "true" | "on" | "yes" | "1" => true,
                            "false" | "off" | "no" | "0" => false,
                            _ => {
                                return Err(SettingsError(format!(
                            "{k}: `{v}` is not on or off (for run-coordinated-shutdown-when-down)"
                        )))
                            }
                        })
                }
                "DOWNING_STRATEGY" => {
                    downing.strategy = Some(v);
                    any_downing = true;
                }
                "DOWNING_STABLE_AFTER" => {
                    downing.stable_after = Some(v);
                    any_downing = true;
                }
                "DOWNING_QUORUM_SIZE" => {
                    downing.quorum_size = Some(num("downing.quorum-size")?);
                    any_downing = true;
                }
                "DOWNING_ROLE" => {
                    downing.role = Some(v);
                    any_downing = true;
                }
                // Variables of other parts of Troupe (e.g. TROUPE_SECRET).
                _ => {}
            }
        }
        if any_downing {
            file.downing = Some(downing);
        }
        self.apply(file)?;
        self.validate()?;
        Ok(self)
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let bad = |m: String| Err(SettingsError(m));
        for (name, d) in [
            ("gossip-interval", self.gossip_interval),
            ("leader-actions-interval", self.leader_actions_interval),
            (
                "unreachable-nodes-reaper-interval",
                self.unreachable_nodes_reaper_interval,
            ),
            ("seed-node-timeout", self.seed_node_timeout),
            (
                "retry-unsuccessful-join-after",
                self.retry_unsuccessful_join_after,
            ),
            ("heartbeat-interval", self.heartbeat_interval),
        ] {
            if d.is_zero() {
                return bad(format!("{name} must be more than zero"));
            }
        }
        if !(0.0..=1.0).contains(&self.gossip_different_view_probability) {
            return bad(format!(
                "gossip-different-view-probability must be between 0 and 1, not {}",
                self.gossip_different_view_probability
            ));
        }
        if self.min_nr_of_members == 0 {
            return bad("min-nr-of-members must be at least 1".into());
        }
        if self.monitored_by_nr_of_members == 0 {
            return bad("monitored-by-nr-of-members must be at least 1".into());
        }
        if let DowningStrategy::StaticQuorum { quorum_size: 0, .. } = self.downing.strategy {
            return bad("downing.quorum-size must be at least 1".into());
        }
        self.coordinated_shutdown
            .validate()
            .map_err(SettingsError)?;
        self.failure_detector
            .validate()
            .map_err(|e| SettingsError(format!("failure-detector: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_akkas() {
        let s = ClusterSettings::default();
        assert_eq!(s.gossip_interval, Duration::from_secs(1));
        assert_eq!(s.failure_detector.threshold, 8.0);
        assert_eq!(
            s.failure_detector.acceptable_heartbeat_pause,
            Duration::from_secs(3)
        );
        assert_eq!(s.allow_weakly_up_members, Some(Duration::from_secs(7)));
        assert_eq!(
            s.downing.strategy,
            DowningStrategy::KeepMajority { role: None }
        );
        assert_eq!(s.downing.stable_after, Duration::from_secs(20));
        assert_eq!(
            s.downing.down_all_when_unstable,
            Some(Duration::from_secs(15))
        );
        assert_eq!(s.down_removal_margin, None);
        assert!(s.run_coordinated_shutdown_when_down);
        assert_eq!(
            s.coordinated_shutdown.timeout(Phase::ClusterExiting),
            Duration::from_secs(10)
        );
        s.validate().unwrap();
    }

    #[test]
    fn coordinated_shutdown_settings_from_toml() {
        let s = ClusterSettings::from_toml(
            r#"
            run-coordinated-shutdown-when-down = false
            [coordinated-shutdown]
            default-phase-timeout = "2s"
            terminate-actor-system = false
            run-by-actor-system-terminate = false
            [coordinated-shutdown.phases.cluster-exiting]
            timeout = "30s"
            "#,
        )
        .unwrap();
        assert!(!s.run_coordinated_shutdown_when_down);
        let c = &s.coordinated_shutdown;
        assert!(!c.terminate_actor_system);
        assert!(!c.run_by_actor_system_terminate);
        assert!(
            ClusterSettings::default()
                .coordinated_shutdown
                .run_by_actor_system_terminate
        );
        assert_eq!(c.timeout(Phase::ClusterLeave), Duration::from_secs(2));
        assert_eq!(c.timeout(Phase::ClusterExiting), Duration::from_secs(30));
        assert_eq!(
            c.timeout(Phase::ActorSystemTerminate),
            Duration::from_secs(10)
        );
        let e = ClusterSettings::from_toml(
            "[coordinated-shutdown.phases.cluster-exit]\ntimeout = \"1s\"",
        )
        .unwrap_err();
        assert!(e.0.contains("cluster-exit"), "{e}");
        let e = ClusterSettings::from_toml(
            "[coordinated-shutdown.phases.cluster-leave]\ntimeout = \"0s\"",
        )
        .unwrap_err();
        assert!(e.0.contains("cluster-leave"), "{e}");
        let s = ClusterSettings::default()
            .with_vars([(
                "TROUPE_RUN_COORDINATED_SHUTDOWN_WHEN_DOWN".to_string(),
                "off".to_string(),
            )])
            .unwrap();
        assert!(!s.run_coordinated_shutdown_when_down);
    }

    #[test]
    fn down_all_when_unstable_is_extra_time_after_stable_after() {
        let s = ClusterSettings::from_toml("[downing]\nstable-after = \"60s\"\n").unwrap();
        assert_eq!(
            s.downing.down_all_when_unstable,
            Some(Duration::from_secs(45))
        );
        let s = ClusterSettings::from_toml(
            "[downing]\nstable-after = \"2s\"\ndown-all-when-unstable = \"on\"\n",
        )
        .unwrap();
        assert_eq!(
            s.downing.down_all_when_unstable,
            Some(Duration::from_secs(4))
        );
        let s =
            ClusterSettings::from_toml("[downing]\ndown-all-when-unstable = \"off\"\n").unwrap();
        assert_eq!(s.downing.down_all_when_unstable, None);
    }

    #[test]
    fn the_guides_settings_file_is_valid() {
        let guide = include_str!("../../guide/src/cluster-membership.md");
        let start = guide.find("```toml\n").expect("a TOML example") + "```toml\n".len();
        let end = start + guide[start..].find("```").expect("its end");
        let s = ClusterSettings::from_toml(&guide[start..end]).unwrap();
        assert_eq!(s.min_nr_of_members, 2);
    }

    #[test]
    fn toml_and_env_override_defaults() {
        let s = ClusterSettings::from_toml(
            r#"
            seed-nodes = ["troupe://a@127.0.0.1:2552"]
            min-nr-of-members = 2
            allow-weakly-up-members = "off"
            down-removal-margin = "20s"
            [failure-detector]
            threshold = 12.0
            [downing]
            strategy = "static-quorum"
            quorum-size = 3
            [sharding]
            number-of-shards = 30
            "#,
        )
        .unwrap();
        assert_eq!(s.seed_nodes.len(), 1);
        assert_eq!(s.min_nr_of_members, 2);
        assert_eq!(s.allow_weakly_up_members, None);
        assert_eq!(s.down_removal_margin, Some(Duration::from_secs(20)));
        assert_eq!(s.failure_detector.threshold, 12.0);
        assert_eq!(
            s.downing.strategy,
            DowningStrategy::StaticQuorum {
                quorum_size: 3,
                role: None
            }
        );
        let s = s
            .with_vars([
                ("TROUPE_GOSSIP_INTERVAL".to_string(), "250ms".to_string()),
                ("TROUPE_ROLES".to_string(), "a, b".to_string()),
                ("OTHER".to_string(), "x".to_string()),
            ])
            .unwrap();
        assert_eq!(s.gossip_interval, Duration::from_millis(250));
        assert_eq!(s.roles.len(), 2);
    }

    #[test]
    fn bad_values_name_the_setting() {
        let e = ClusterSettings::from_toml("gossip-interval = \"soon\"").unwrap_err();
        assert!(e.0.contains("gossip-interval"), "{e}");
        let e = ClusterSettings::from_toml("gossip-intervall = \"1s\"").unwrap_err();
        assert!(e.0.contains("gossip-intervall"), "{e}");
        let e = ClusterSettings::from_toml("[downing]\nstrategy = \"static-quorum\"").unwrap_err();
        assert!(e.0.contains("quorum-size"), "{e}");
        let e = ClusterSettings::default()
            .with_vars([("TROUPE_MIN_NR_OF_MEMBERS".to_string(), "many".to_string())])
            .unwrap_err();
        assert!(e.0.contains("TROUPE_MIN_NR_OF_MEMBERS"), "{e}");
        let e = ClusterSettings::from_toml("seed-nodes = [\"akka://x@h:1\"]").unwrap_err();
        assert!(e.0.contains("seed-nodes"), "{e}");
    }
}
