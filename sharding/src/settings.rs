//! Settings of one sharded entity type, with Akka's defaults
//! (`pekko.cluster.sharding` in Pekko's `reference.conf`), loadable from
//! the `[sharding]` table of the node's TOML settings file and overridable
//! by `TROUPE_SHARDING_*` environment variables. A bad value is an error
//! naming its key.

use crate::error::ShardingError;
use std::path::Path;
use std::time::Duration;
use toml::{Table, Value};

/// Settings of one entity type's regions, shards and coordinator.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardingSettings {
    /// Shards of the default extractor (`number-of-shards`). Must be the
    /// same on every node, and never change while the cluster's data
    /// lives. Default 1000 (ten times the largest planned number of nodes
    /// is the rule of thumb).
    pub number_of_shards: u32,
    /// Host entities only on members with this role (`role`); other
    /// nodes use a proxy. The coordinator runs on the oldest member with
    /// the role. Default none (every member).
    pub role: Option<String>,
    /// Messages a region buffers for shards whose home is not known yet
    /// (`buffer-size`). Beyond it, messages are refused with an error.
    /// Default 100,000.
    pub buffer_size: usize,
    /// How long a hand-off may take before the coordinator gives it up and
    /// entities that ignore their stop message are stopped
    /// (`handoff-timeout`). Default 60 s.
    pub handoff_timeout: Duration,
    /// How long the coordinator waits for a region to confirm that it
    /// started a shard before asking again (`shard-start-timeout`).
    /// Default 10 s.
    pub shard_start_timeout: Duration,
    /// How often the coordinator considers rebalancing
    /// (`rebalance-interval`). A round that moved shards is followed at
    /// once by the next one while the cluster is still unbalanced.
    /// Default 10 s.
    pub rebalance_interval: Duration,
    /// How often a region repeats an unanswered registration or request
    /// for a shard's home (`retry-interval`). Default 2 s.
    pub retry_interval: Duration,
    /// Regions (of Up members with the role) that must have registered
    /// before the coordinator allocates the first shard
    /// (`min-nr-of-members`), so that the first shards spread over them.
    /// Checked only until first reached: a cluster that shrinks below it
    /// later still allocates. Default 1.
    pub min_nr_of_members: usize,
    /// The coordinator's state is written to a majority of the replicas
    /// plus this many (`coordinator-state.write-majority-plus`). Default 3.
    pub write_majority_plus: usize,
    /// ... and read from a majority plus this many
    /// (`coordinator-state.read-majority-plus`). Default 5.
    pub read_majority_plus: usize,
    /// How long the coordinator waits for its state when it starts
    /// (`waiting-for-state-timeout`). Default 2 s.
    pub waiting_for_state_timeout: Duration,
    /// How long an update of the coordinator's state may take
    /// (`updating-state-timeout`). Default 5 s.
    pub updating_state_timeout: Duration,
    /// Rebalance limits of the default least-shard strategy
    /// (`least-shard-allocation-strategy.rebalance-absolute-limit`).
    /// Default 20.
    pub rebalance_absolute_limit: usize,
    /// (`least-shard-allocation-strategy.rebalance-relative-limit`).
    /// Default 0.1.
    pub rebalance_relative_limit: f64,
}

impl Default for ShardingSettings {
    fn default() -> Self {
        ShardingSettings {
            number_of_shards: 1000,
            role: None,
            buffer_size: 100_000,
            handoff_timeout: Duration::from_secs(60),
            shard_start_timeout: Duration::from_secs(10),
            rebalance_interval: Duration::from_secs(10),
            retry_interval: Duration::from_secs(2),
            min_nr_of_members: 1,
            write_majority_plus: 3,
            read_majority_plus: 5,
            waiting_for_state_timeout: Duration::from_secs(2),
            updating_state_timeout: Duration::from_secs(5),
            rebalance_absolute_limit: 20,
            rebalance_relative_limit: 0.1,
        }
    }
}

impl ShardingSettings {
    /// Settings from the `[sharding]` table of a TOML settings file (the
    /// file the cluster's settings are read from), on top of the defaults;
    /// see [`from_toml`](Self::from_toml). The error names the file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ShardingError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ShardingError::Settings(format!("cannot read settings file {}: {e}", path.display()))
        })?;
        Self::from_toml(&text).map_err(|e| match e {
            ShardingError::Settings(why) => {
                ShardingError::Settings(format!("{}: {why}", path.display()))
            }
            other => other,
        })
    }

    /// Settings from the `[sharding]` table of TOML text, on top of the
    /// defaults, then [validated](Self::validate). Everything outside
    /// `[sharding]` (the cluster's keys, other tables) is ignored; without
    /// the table the defaults are returned.
    ///
    /// Keys are Akka's, in kebab-case; durations are text such as `"10s"`
    /// or `"500ms"`. A key that is not one of these, or a value of the
    /// wrong kind, is an error naming the key (`sharding.handoff-timeout`).
    /// `remember-entities`, `state-store-mode` and a `[sharding.passivation]`
    /// table are accepted for compatibility with Akka's files but not
    /// supported yet: they are ignored, with a warning unless they ask for
    /// what Troupe does anyway (`remember-entities = false`,
    /// `state-store-mode = "ddata"`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use troupe_sharding::ShardingSettings;
    ///
    /// let s = ShardingSettings::from_toml(r#"
    ///     seed-nodes = ["troupe://app@10.0.0.1:2552"]   # the cluster's
    ///
    ///     [sharding]
    ///     number-of-shards = 300
    ///     role = "backend"
    ///     buffer-size = 50000
    ///     handoff-timeout = "30s"
    ///     shard-start-timeout = "10s"
    ///     rebalance-interval = "5s"
    ///     retry-interval = "500ms"
    ///     min-nr-of-members = 2
    ///     waiting-for-state-timeout = "2s"
    ///     updating-state-timeout = "5s"
    ///
    ///     [sharding.coordinator-state]
    ///     write-majority-plus = 3
    ///     read-majority-plus = 5
    ///
    ///     [sharding.least-shard-allocation-strategy]
    ///     rebalance-absolute-limit = 10
    ///     rebalance-relative-limit = 0.2
    /// "#).unwrap();
    /// assert_eq!(s.number_of_shards, 300);
    /// assert_eq!(s.role.as_deref(), Some("backend"));
    /// assert_eq!(s.retry_interval, Duration::from_millis(500));
    /// assert_eq!(s.rebalance_absolute_limit, 10);
    ///
    /// let e = ShardingSettings::from_toml("[sharding]\nhandoff-timeout = \"ten\"").unwrap_err();
    /// assert!(e.to_string().contains("sharding.handoff-timeout"), "{e}");
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, ShardingError> {
        let file: Table = toml::from_str(text).map_err(|e| {
            ShardingError::Settings(format!(
                "not a valid TOML file: {}",
                e.to_string().trim_end()
            ))
        })?;
        let mut s = ShardingSettings::default();
        if let Some(table) = file.get("sharding") {
            let table = table.as_table().ok_or_else(|| {
                ShardingError::Settings(format!("`sharding` must be a table, not {table}"))
            })?;
            s.apply_table("", table)?;
        }
        s.validate()?;
        Ok(s)
    }

    /// Applies `TROUPE_SHARDING_*` environment variables over these
    /// settings, then [validates](Self::validate) them. Each scalar key
    /// has one, named `TROUPE_SHARDING_` and the key in upper snake case
    /// (a sub-table's name included):
    ///
    /// | variable | key |
    /// |---|---|
    /// | `TROUPE_SHARDING_NUMBER_OF_SHARDS` | `number-of-shards` |
    /// | `TROUPE_SHARDING_ROLE` (empty: every member) | `role` |
    /// | `TROUPE_SHARDING_BUFFER_SIZE` | `buffer-size` |
    /// | `TROUPE_SHARDING_HANDOFF_TIMEOUT` | `handoff-timeout` |
    /// | `TROUPE_SHARDING_SHARD_START_TIMEOUT` | `shard-start-timeout` |
    /// | `TROUPE_SHARDING_REBALANCE_INTERVAL` | `rebalance-interval` |
    /// | `TROUPE_SHARDING_RETRY_INTERVAL` | `retry-interval` |
    /// | `TROUPE_SHARDING_MIN_NR_OF_MEMBERS` | `min-nr-of-members` |
    /// | `TROUPE_SHARDING_WAITING_FOR_STATE_TIMEOUT` | `waiting-for-state-timeout` |
    /// | `TROUPE_SHARDING_UPDATING_STATE_TIMEOUT` | `updating-state-timeout` |
    /// | `TROUPE_SHARDING_COORDINATOR_STATE_WRITE_MAJORITY_PLUS` | `coordinator-state.write-majority-plus` |
    /// | `TROUPE_SHARDING_COORDINATOR_STATE_READ_MAJORITY_PLUS` | `coordinator-state.read-majority-plus` |
    /// | `TROUPE_SHARDING_LEAST_SHARD_ALLOCATION_STRATEGY_REBALANCE_ABSOLUTE_LIMIT` | `least-shard-allocation-strategy.rebalance-absolute-limit` |
    /// | `TROUPE_SHARDING_LEAST_SHARD_ALLOCATION_STRATEGY_REBALANCE_RELATIVE_LIMIT` | `least-shard-allocation-strategy.rebalance-relative-limit` |
    ///
    /// Use it after [`from_toml`](Self::from_toml) or
    /// [`from_file`](Self::from_file) so that the environment wins over
    /// the file. Other variables are left alone; an unknown
    /// `TROUPE_SHARDING_*` variable is ignored with a warning.
    pub fn with_env(self) -> Result<Self, ShardingError> {
        self.with_vars(std::env::vars())
    }

    /// As [`with_env`](Self::with_env), from the given variables (name,
    /// value). A bad value is an error naming the variable and its key.
    pub fn with_vars(
        mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ShardingError> {
        for (name, text) in vars {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let Some(&(key, kind)) = KEYS.iter().find(|(key, _)| env_suffix(key) == rest) else {
                tracing::warn!(
                    variable = %name,
                    "not a sharding setting (or not supported yet); ignored"
                );
                continue;
            };
            let bad = |why: String| {
                ShardingError::Settings(format!("`{name}` (for `sharding.{key}`): {why}"))
            };
            let t = text.trim();
            let value = match kind {
                Kind::Count => Value::Integer(
                    t.parse()
                        .map_err(|_| bad(format!("`{text}` is not a whole number")))?,
                ),
                Kind::Fraction => Value::Float(
                    t.parse()
                        .map_err(|_| bad(format!("`{text}` is not a number")))?,
                ),
                Kind::Text => Value::String(t.to_string()),
            };
            self.set(key, &value).map_err(bad)?;
        }
        self.validate()?;
        Ok(self)
    }

    /// Applies one table of the file: `[sharding]` when `prefix` is
    /// empty, else the sub-table `[sharding.<prefix>]`.
    fn apply_table(&mut self, prefix: &str, table: &Table) -> Result<(), ShardingError> {
        for (name, value) in table {
            let key = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            let bad = |why: String| ShardingError::Settings(format!("`sharding.{key}`: {why}"));
            if prefix.is_empty() && SUB_TABLES.contains(&name.as_str()) {
                let sub = value
                    .as_table()
                    .ok_or_else(|| bad(format!("must be a table, not {value}")))?;
                self.apply_table(name, sub)?;
            } else if prefix.is_empty() && NOT_YET.contains(&name.as_str()) {
                not_yet(name, value).map_err(bad)?;
            } else {
                self.set(&key, value).map_err(bad)?;
            }
        }
        Ok(())
    }

    /// Sets the setting of one key of [`KEYS`] (an unknown key is an
    /// error listing the known ones). The error does not name the key.
    fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        match key {
            "number-of-shards" => self.number_of_shards = count(v)?,
            "role" => {
                let role = text(v)?.trim();
                // Akka's `role = ""` (its default): every member.
                self.role = (!role.is_empty()).then(|| role.to_string());
            }
            "buffer-size" => self.buffer_size = count(v)?,
            "handoff-timeout" => self.handoff_timeout = duration(v)?,
            "shard-start-timeout" => self.shard_start_timeout = duration(v)?,
            "rebalance-interval" => self.rebalance_interval = duration(v)?,
            "retry-interval" => self.retry_interval = duration(v)?,
            "min-nr-of-members" => self.min_nr_of_members = count(v)?,
            "waiting-for-state-timeout" => self.waiting_for_state_timeout = duration(v)?,
            "updating-state-timeout" => self.updating_state_timeout = duration(v)?,
            "coordinator-state.write-majority-plus" => self.write_majority_plus = count(v)?,
            "coordinator-state.read-majority-plus" => self.read_majority_plus = count(v)?,
            "least-shard-allocation-strategy.rebalance-absolute-limit" => {
                self.rebalance_absolute_limit = count(v)?
            }
            "least-shard-allocation-strategy.rebalance-relative-limit" => {
                self.rebalance_relative_limit = fraction(v)?
            }
            _ => {
                let (table, known) = match key.split_once('.') {
                    Some((sub, _)) => {
                        let start = format!("{sub}.");
                        let known: Vec<_> = KEYS
                            .iter()
                            .filter_map(|(k, _)| k.strip_prefix(&start))
                            .map(|k| format!("`{k}`"))
                            .collect();
                        (format!("[sharding.{sub}]"), known)
                    }
                    None => {
                        let known = KEYS
                            .iter()
                            .filter(|(k, _)| !k.contains('.'))
                            .map(|(k, _)| format!("`{k}`"))
                            .chain(SUB_TABLES.iter().map(|t| format!("`{t}`")))
                            .chain(NOT_YET.iter().map(|t| format!("`{t}`")))
                            .collect();
                        ("[sharding]".to_string(), known)
                    }
                };
                return Err(format!(
                    "unknown key in {table}; expected one of {}",
                    known.join(", ")
                ));
            }
        }
        Ok(())
    }

    /// Checks the values; the error names the offending key.
    pub fn validate(&self) -> Result<(), ShardingError> {
        let bad =
            |key: &str, why: &str| Err(ShardingError::Settings(format!("`sharding.{key}`: {why}")));
        if self.number_of_shards == 0 {
            return bad("number-of-shards", "must be at least 1");
        }
        if self.buffer_size == 0 {
            return bad("buffer-size", "must be at least 1");
        }
        for (key, d) in [
            ("handoff-timeout", self.handoff_timeout),
            ("shard-start-timeout", self.shard_start_timeout),
            ("rebalance-interval", self.rebalance_interval),
            ("retry-interval", self.retry_interval),
            ("waiting-for-state-timeout", self.waiting_for_state_timeout),
            ("updating-state-timeout", self.updating_state_timeout),
        ] {
            if d.is_zero() {
                return bad(key, "must be longer than zero");
            }
        }
        if self.min_nr_of_members == 0 {
            return bad("min-nr-of-members", "must be at least 1");
        }
        if !(self.rebalance_relative_limit > 0.0 && self.rebalance_relative_limit <= 1.0) {
            return bad(
                "least-shard-allocation-strategy.rebalance-relative-limit",
                "must be in (0, 1]",
            );
        }
        if matches!(&self.role, Some(r) if r.is_empty()) {
            return bad("role", "must not be empty (leave it out for every member)");
        }
        Ok(())
    }
}

/// What a key's value is, for reading it from an environment variable.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// A whole number.
    Count,
    /// A number with a fraction.
    Fraction,
    /// Text, or a duration written as text.
    Text,
}

/// Every scalar key of `[sharding]`, as the file spells it (a sub-table's
/// name, then a dot). [`ShardingSettings::set`] sets each.
const KEYS: &[(&str, Kind)] = &[
    ("number-of-shards", Kind::Count),
    ("role", Kind::Text),
    ("buffer-size", Kind::Count),
    ("handoff-timeout", Kind::Text),
    ("shard-start-timeout", Kind::Text),
    ("rebalance-interval", Kind::Text),
    ("retry-interval", Kind::Text),
    ("min-nr-of-members", Kind::Count),
    ("waiting-for-state-timeout", Kind::Text),
    ("updating-state-timeout", Kind::Text),
    ("coordinator-state.write-majority-plus", Kind::Count),
    ("coordinator-state.read-majority-plus", Kind::Count),
    (
        "least-shard-allocation-strategy.rebalance-absolute-limit",
        Kind::Count,
    ),
    (
        "least-shard-allocation-strategy.rebalance-relative-limit",
        Kind::Fraction,
    ),
];

/// The sub-tables of `[sharding]`.
const SUB_TABLES: &[&str] = &["coordinator-state", "least-shard-allocation-strategy"];

/// Akka's keys of features Troupe does not have yet: accepted and ignored.
const NOT_YET: &[&str] = &["remember-entities", "passivation", "state-store-mode"];

const ENV_PREFIX: &str = "TROUPE_SHARDING_";

/// The environment variable of a key, without [`ENV_PREFIX`].
fn env_suffix(key: &str) -> String {
    key.to_ascii_uppercase().replace(['-', '.'], "_")
}

/// Checks (and ignores, with a warning) a key of [`NOT_YET`].
fn not_yet(key: &str, v: &Value) -> Result<(), String> {
    match key {
        "remember-entities" => match v.as_bool() {
            Some(false) => {}
            Some(true) => tracing::warn!(
                "`sharding.remember-entities = true` is not supported yet and is ignored: \
                 entities are started on demand only, not restarted after a move or a crash"
            ),
            None => return Err(format!("expected true or false, not {v}")),
        },
        "state-store-mode" => match v.as_str() {
            Some("ddata") => {}
            Some(mode) => tracing::warn!(
                "`sharding.state-store-mode = \"{mode}\"` is not supported yet and is ignored: \
                 the coordinator keeps its state in distributed data (\"ddata\")"
            ),
            None => return Err(format!("expected \"ddata\" or \"persistence\", not {v}")),
        },
        _ => {
            if !v.is_table() {
                return Err(format!("must be a table, not {v}"));
            }
            tracing::warn!(
                "`[sharding.passivation]` is not supported yet and is ignored: \
                 entities run until they stop themselves or their shard moves"
            );
        }
    }
    Ok(())
}

fn count<T: TryFrom<i64>>(v: &Value) -> Result<T, String> {
    let n = v
        .as_integer()
        .ok_or_else(|| format!("expected a whole number, not {v}"))?;
    T::try_from(n).map_err(|_| format!("{n} is out of range"))
}

fn fraction(v: &Value) -> Result<f64, String> {
    match v {
        Value::Float(f) => Ok(*f),
        Value::Integer(n) => Ok(*n as f64),
        _ => Err(format!("expected a number, not {v}")),
    }
}

fn text(v: &Value) -> Result<&str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected text in quotes, not {v}"))
}

/// A duration as the cluster's settings read it: humantime text.
fn duration(v: &Value) -> Result<Duration, String> {
    let t = v.as_str().ok_or_else(|| {
        format!("expected a duration in quotes such as \"10s\" or \"500ms\", not {v}")
    })?;
    humantime::parse_duration(t.trim())
        .map_err(|e| format!("invalid duration {v} ({e}); write e.g. \"10s\" or \"500ms\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(r: Result<ShardingSettings, ShardingError>) -> String {
        match r {
            Ok(s) => panic!("expected an error, got {s:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_without_the_table() {
        assert_eq!(
            ShardingSettings::from_toml("").unwrap(),
            ShardingSettings::default()
        );
        let other = r#"
            seed-nodes = ["troupe://a@127.0.0.1:2552"]
            gossip-interval = "1s"
            [downing]
            strategy = "keep-oldest"
            [sharding-ish]
            whatever = 1
        "#;
        assert_eq!(
            ShardingSettings::from_toml(other).unwrap(),
            ShardingSettings::default()
        );
        assert_eq!(
            ShardingSettings::from_toml("[sharding]").unwrap(),
            ShardingSettings::default()
        );
        ShardingSettings::default().validate().unwrap();
    }

    #[test]
    fn every_key_is_read() {
        let s = ShardingSettings::from_toml(
            r#"
            roles = ["backend"]
            [sharding]
            number-of-shards = 300
            role = "backend"
            buffer-size = 5000
            handoff-timeout = "30s"
            shard-start-timeout = "3s"
            rebalance-interval = "1m"
            retry-interval = "500ms"
            min-nr-of-members = 3
            waiting-for-state-timeout = "4s"
            updating-state-timeout = "6s"
            remember-entities = false
            state-store-mode = "ddata"
            [sharding.coordinator-state]
            write-majority-plus = 1
            read-majority-plus = 2
            [sharding.least-shard-allocation-strategy]
            rebalance-absolute-limit = 7
            rebalance-relative-limit = 0.5
            [sharding.passivation]
            strategy = "default-idle-strategy"
            "#,
        )
        .unwrap();
        let expected = ShardingSettings {
            number_of_shards: 300,
            role: Some("backend".into()),
            buffer_size: 5000,
            handoff_timeout: Duration::from_secs(30),
            shard_start_timeout: Duration::from_secs(3),
            rebalance_interval: Duration::from_secs(60),
            retry_interval: Duration::from_millis(500),
            min_nr_of_members: 3,
            write_majority_plus: 1,
            read_majority_plus: 2,
            waiting_for_state_timeout: Duration::from_secs(4),
            updating_state_timeout: Duration::from_secs(6),
            rebalance_absolute_limit: 7,
            rebalance_relative_limit: 0.5,
        };
        assert_eq!(s, expected);
        // Akka's `role = ""`: every member; a whole relative limit.
        let s = ShardingSettings::from_toml(
            "[sharding]\nrole = \"\"\n[sharding.least-shard-allocation-strategy]\n\
             rebalance-relative-limit = 1",
        )
        .unwrap();
        assert_eq!(s.role, None);
        assert_eq!(s.rebalance_relative_limit, 1.0);
    }

    #[test]
    fn every_key_has_a_setter_and_a_variable() {
        for &(key, kind) in KEYS {
            let value = match kind {
                Kind::Count => Value::Integer(2),
                Kind::Fraction => Value::Float(0.5),
                Kind::Text if key.ends_with("timeout") || key.ends_with("interval") => {
                    Value::String("3s".into())
                }
                Kind::Text => Value::String("r".into()),
            };
            let mut s = ShardingSettings::default();
            s.set(key, &value).unwrap_or_else(|e| panic!("{key}: {e}"));
            assert_ne!(s, ShardingSettings::default(), "{key}");
            let name = format!("{ENV_PREFIX}{}", env_suffix(key));
            let text = match &value {
                Value::String(t) => t.clone(),
                v => v.to_string(),
            };
            let from_env = ShardingSettings::default()
                .with_vars([(name.clone(), text)])
                .unwrap();
            assert_eq!(from_env, s, "{name}");
        }
    }

    #[test]
    fn bad_values_and_unknown_keys_name_the_key() {
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nhandoff-timeout = \"ten\"",
        ));
        assert!(
            e.contains("`sharding.handoff-timeout`: invalid duration \"ten\""),
            "{e}"
        );
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nnumber-of-shards = \"many\"",
        ));
        assert!(e.contains("`sharding.number-of-shards`"), "{e}");
        let e = err(ShardingSettings::from_toml("[sharding]\nbuffer-size = -1"));
        assert!(e.contains("`sharding.buffer-size`"), "{e}");
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nnumber-of-shards = 0",
        ));
        assert!(e.contains("`sharding.number-of-shards`"), "{e}");
        let e = err(ShardingSettings::from_toml(
            "[sharding.coordinator-state]\nwrite-majority-plus = \"3\"",
        ));
        assert!(
            e.contains("`sharding.coordinator-state.write-majority-plus`"),
            "{e}"
        );
        let e = err(ShardingSettings::from_toml(
            "[sharding.least-shard-allocation-strategy]\nrebalance-relative-limit = 2.0",
        ));
        assert!(e.contains("rebalance-relative-limit"), "{e}");
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nnumber-of-shard = 10",
        ));
        assert!(e.contains("`sharding.number-of-shard`: unknown key"), "{e}");
        assert!(e.contains("`number-of-shards`"), "{e}");
        let e = err(ShardingSettings::from_toml(
            "[sharding.coordinator-state]\nwrite-majority = 3",
        ));
        assert!(
            e.contains("`sharding.coordinator-state.write-majority`: unknown key"),
            "{e}"
        );
        assert!(e.contains("`write-majority-plus`"), "{e}");
        let e = err(ShardingSettings::from_toml(
            "[sharding]\ncoordinator-state = 3",
        ));
        assert!(e.contains("`sharding.coordinator-state`"), "{e}");
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nremember-entities = \"yes\"",
        ));
        assert!(e.contains("`sharding.remember-entities`"), "{e}");
        let e = err(ShardingSettings::from_toml("sharding = 1"));
        assert!(e.contains("`sharding`"), "{e}");
        let e = err(ShardingSettings::from_toml("[sharding"));
        assert!(e.contains("TOML"), "{e}");
        let e =
            err(ShardingSettings::default()
                .with_vars(vars(&[("TROUPE_SHARDING_BUFFER_SIZE", "lots")])));
        assert!(
            e.contains("TROUPE_SHARDING_BUFFER_SIZE") && e.contains("sharding.buffer-size"),
            "{e}"
        );
        let e = err(ShardingSettings::default()
            .with_vars(vars(&[("TROUPE_SHARDING_RETRY_INTERVAL", "0s")])));
        assert!(e.contains("sharding.retry-interval"), "{e}");
    }

    #[test]
    fn environment_wins_over_the_file() {
        let s = ShardingSettings::from_toml(
            r#"
            [sharding]
            number-of-shards = 300
            role = "backend"
            handoff-timeout = "30s"
            [sharding.least-shard-allocation-strategy]
            rebalance-relative-limit = 0.5
            "#,
        )
        .unwrap()
        .with_vars(vars(&[
            ("TROUPE_SHARDING_NUMBER_OF_SHARDS", " 120 "),
            ("TROUPE_SHARDING_ROLE", ""),
            ("TROUPE_SHARDING_HANDOFF_TIMEOUT", "90s"),
            ("TROUPE_SHARDING_REBALANCE_INTERVAL", "250ms"),
            (
                "TROUPE_SHARDING_LEAST_SHARD_ALLOCATION_STRATEGY_REBALANCE_RELATIVE_LIMIT",
                "0.25",
            ),
            ("TROUPE_SHARDING_NO_SUCH_KEY", "1"),
            ("TROUPE_GOSSIP_INTERVAL", "x"),
            ("PATH", "/bin"),
        ]))
        .unwrap();
        assert_eq!(s.number_of_shards, 120);
        assert_eq!(s.role, None);
        assert_eq!(s.handoff_timeout, Duration::from_secs(90));
        assert_eq!(s.rebalance_interval, Duration::from_millis(250));
        assert_eq!(s.rebalance_relative_limit, 0.25);
        assert_eq!(s.buffer_size, 100_000);
    }

    #[test]
    fn from_file_names_the_file() {
        let dir =
            std::env::temp_dir().join(format!("troupe-sharding-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("node.toml");
        std::fs::write(&path, "[sharding]\nnumber-of-shards = 64\n").unwrap();
        assert_eq!(
            ShardingSettings::from_file(&path).unwrap().number_of_shards,
            64
        );
        std::fs::write(&path, "[sharding]\nretry-interval = \"soon\"\n").unwrap();
        let e = err(ShardingSettings::from_file(&path));
        assert!(
            e.contains("node.toml") && e.contains("sharding.retry-interval"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let e = err(ShardingSettings::from_file(dir.join("missing.toml")));
        assert!(e.contains("missing.toml"), "{e}");
    }
}
