//! Settings of one sharded entity type, with Akka's defaults
//! (`pekko.cluster.sharding` in Pekko's `reference.conf`), loadable from
//! the `[sharding]` table of the node's TOML settings file and overridable
//! by `TROUPE_SHARDING_*` environment variables. A bad value is an error
//! naming its key.

use crate::error::ShardingError;
use std::fmt;
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
    /// Messages a region holds (`buffer-size`): those buffered for shards
    /// whose home is not known yet or whose node's queue is full, and this
    /// node's messages on their way through the region actor. Beyond it,
    /// this node's senders are refused with an error (messages from other
    /// nodes, accepted there, are not). Default 100,000.
    pub buffer_size: usize,
    /// How long the coordinator waits for every region to acknowledge a
    /// hand-off before it abandons it (the shard stays where it is), and
    /// how long entities may take to stop before those that ignore their
    /// stop message are stopped (`handoff-timeout`). Default 60 s.
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
    /// Restart each shard's entities when the shard starts again, on
    /// another node after a rebalance or a crash, and an entity that
    /// stopped without passivating (`remember-entities`). The entities are
    /// remembered in distributed data (`remember-entities-store =
    /// "ddata"`, the only store). Automatic passivation is off while it
    /// is on (see [`effective_passivation`](Self::effective_passivation)).
    /// Default false.
    pub remember_entities: bool,
    /// With remembered entities, how long after stopping by itself
    /// (without passivating) an entity is restarted, unless a message
    /// for it comes first (`entity-restart-backoff`). Default 10 s.
    pub entity_restart_backoff: Duration,
    /// How a starting shard restarts its remembered entities
    /// (`entity-recovery-strategy`, and
    /// `[sharding.entity-recovery-constant-rate-strategy]`): all at once,
    /// or a few at a time. Default all.
    pub entity_recovery_strategy: EntityRecoveryStrategy,
    /// Automatic passivation of idle entities, or over a limit of active
    /// entities (`[sharding.passivation]`). Default: idle entities after
    /// 2 minutes.
    pub passivation: PassivationSettings,
}

/// How a starting shard restarts its remembered entities
/// (`entity-recovery-strategy`).
///
/// The keys of `[sharding.entity-recovery-constant-rate-strategy]` apply
/// to `"constant"`: in one file (or one set of variables) they may come
/// before or after `entity-recovery-strategy`; with `"all"` they are
/// ignored, with a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntityRecoveryStrategy {
    /// All at once (`"all"`, the default).
    #[default]
    All,
    /// A few at a time (`"constant"`).
    Constant {
        /// How often the next entities are restarted
        /// (`entity-recovery-constant-rate-strategy.frequency`). Default
        /// 100 ms.
        frequency: Duration,
        /// How many each time
        /// (`entity-recovery-constant-rate-strategy.number-of-entities`).
        /// Default 5.
        number_of_entities: usize,
    },
}

impl EntityRecoveryStrategy {
    /// `"constant"` with Akka's defaults: 5 entities every 100 ms.
    pub const CONSTANT: EntityRecoveryStrategy = EntityRecoveryStrategy::Constant {
        frequency: Duration::from_millis(100),
        number_of_entities: 5,
    };
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
            remember_entities: false,
            entity_restart_backoff: Duration::from_secs(10),
            entity_recovery_strategy: EntityRecoveryStrategy::All,
            passivation: PassivationSettings::default(),
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
    /// `state-store-mode` is accepted for compatibility with Akka's files
    /// and ignored (the coordinator keeps its state in distributed data),
    /// with a warning unless it is `"ddata"`. The keys of
    /// `[sharding.passivation]` are described at [`PassivationSettings`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use troupe_sharding::{EntityRecoveryStrategy, ShardingSettings};
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
    ///     remember-entities = true
    ///     remember-entities-store = "ddata"
    ///     entity-restart-backoff = "10s"
    ///     entity-recovery-strategy = "constant"
    ///
    ///     [sharding.entity-recovery-constant-rate-strategy]
    ///     frequency = "100ms"
    ///     number-of-entities = 5
    ///
    ///     [sharding.coordinator-state]
    ///     write-majority-plus = 3
    ///     read-majority-plus = 5
    ///
    ///     [sharding.least-shard-allocation-strategy]
    ///     rebalance-absolute-limit = 10
    ///     rebalance-relative-limit = 0.2
    ///
    ///     [sharding.passivation]
    ///     strategy = "default-strategy"
    ///     active-entity-limit = 50000
    /// "#).unwrap();
    /// assert_eq!(s.number_of_shards, 300);
    /// assert_eq!(s.role.as_deref(), Some("backend"));
    /// assert_eq!(s.retry_interval, Duration::from_millis(500));
    /// assert_eq!(s.rebalance_absolute_limit, 10);
    /// assert!(s.remember_entities);
    /// assert_eq!(
    ///     s.entity_recovery_strategy,
    ///     EntityRecoveryStrategy::Constant { frequency: Duration::from_millis(100), number_of_entities: 5 },
    /// );
    /// assert_eq!(s.passivation.active_entity_limit(), Some(50_000));
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
            s.apply_table(table)?;
        }
        s.validate()?;
        Ok(s)
    }

    /// Applies `TROUPE_SHARDING_*` environment variables over these
    /// settings, then [validates](Self::validate) them. Each scalar key
    /// has one, named `TROUPE_SHARDING_` and the key in upper snake case
    /// (its tables' names included):
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
    /// | `TROUPE_SHARDING_REMEMBER_ENTITIES` (`true`/`false`, `on`/`off`) | `remember-entities` |
    /// | `TROUPE_SHARDING_REMEMBER_ENTITIES_STORE` | `remember-entities-store` |
    /// | `TROUPE_SHARDING_ENTITY_RESTART_BACKOFF` | `entity-restart-backoff` |
    /// | `TROUPE_SHARDING_ENTITY_RECOVERY_STRATEGY` | `entity-recovery-strategy` |
    /// | `TROUPE_SHARDING_ENTITY_RECOVERY_CONSTANT_RATE_STRATEGY_FREQUENCY` | `entity-recovery-constant-rate-strategy.frequency` |
    /// | `TROUPE_SHARDING_ENTITY_RECOVERY_CONSTANT_RATE_STRATEGY_NUMBER_OF_ENTITIES` | `entity-recovery-constant-rate-strategy.number-of-entities` |
    /// | `TROUPE_SHARDING_PASSIVATION_STRATEGY` | `passivation.strategy` |
    /// | `TROUPE_SHARDING_PASSIVATION_IDLE_TIMEOUT` | `passivation.idle-timeout` |
    /// | `TROUPE_SHARDING_PASSIVATION_IDLE_INTERVAL` | `passivation.idle-interval` |
    /// | `TROUPE_SHARDING_PASSIVATION_ACTIVE_ENTITY_LIMIT` | `passivation.active-entity-limit` |
    /// | `TROUPE_SHARDING_PASSIVATION_REPLACEMENT_POLICY` | `passivation.replacement.policy` |
    /// | `TROUPE_SHARDING_PASSIVATION_REPLACEMENT_LEAST_RECENTLY_USED_SEGMENTED_LEVELS` | `passivation.replacement.least-recently-used.segmented.levels` |
    /// | `TROUPE_SHARDING_PASSIVATION_REPLACEMENT_LEAST_RECENTLY_USED_SEGMENTED_PROPORTIONS` (`0.2,0.8`) | `passivation.replacement.least-recently-used.segmented.proportions` |
    /// | `TROUPE_SHARDING_PASSIVATION_REPLACEMENT_LEAST_FREQUENTLY_USED_DYNAMIC_AGING` | `passivation.replacement.least-frequently-used.dynamic-aging` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_POLICY` | `passivation.admission.window.policy` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_LEAST_RECENTLY_USED_SEGMENTED_LEVELS` | `passivation.admission.window.least-recently-used.segmented.levels` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_LEAST_RECENTLY_USED_SEGMENTED_PROPORTIONS` | `passivation.admission.window.least-recently-used.segmented.proportions` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_LEAST_FREQUENTLY_USED_DYNAMIC_AGING` | `passivation.admission.window.least-frequently-used.dynamic-aging` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_PROPORTION` | `passivation.admission.window.proportion` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_MINIMUM_PROPORTION` | `passivation.admission.window.minimum-proportion` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_MAXIMUM_PROPORTION` | `passivation.admission.window.maximum-proportion` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_OPTIMIZER` | `passivation.admission.window.optimizer` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_HILL_CLIMBING_ADJUST_MULTIPLIER` | `passivation.admission.window.hill-climbing.adjust-multiplier` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_HILL_CLIMBING_INITIAL_STEP` | `passivation.admission.window.hill-climbing.initial-step` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_HILL_CLIMBING_RESTART_THRESHOLD` | `passivation.admission.window.hill-climbing.restart-threshold` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_WINDOW_HILL_CLIMBING_STEP_DECAY` | `passivation.admission.window.hill-climbing.step-decay` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_FILTER` | `passivation.admission.filter` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_FREQUENCY_SKETCH_DEPTH` | `passivation.admission.frequency-sketch.depth` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_FREQUENCY_SKETCH_COUNTER_BITS` | `passivation.admission.frequency-sketch.counter-bits` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_FREQUENCY_SKETCH_WIDTH_MULTIPLIER` | `passivation.admission.frequency-sketch.width-multiplier` |
    /// | `TROUPE_SHARDING_PASSIVATION_ADMISSION_FREQUENCY_SKETCH_RESET_MULTIPLIER` | `passivation.admission.frequency-sketch.reset-multiplier` |
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
        let mut known = Vec::new();
        for (name, text) in vars {
            let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            match KEYS.iter().position(|(key, _)| env_suffix(key) == rest) {
                Some(i) => known.push((i, name, text)),
                None => tracing::warn!(
                    variable = %name,
                    "not a sharding setting (or not supported yet); ignored"
                ),
            }
        }
        // In the order of the keys, so that a strategy is set before its
        // options.
        known.sort_by_key(|(i, _, _)| *i);
        for (i, name, text) in known {
            let (key, kind) = KEYS[i];
            let bad = |why: String| {
                ShardingError::Settings(format!("`{name}` (for `sharding.{key}`): {why}"))
            };
            let value = env_value(kind, &text).map_err(bad)?;
            self.set(key, &value).map_err(bad)?;
        }
        self.validate()?;
        Ok(self)
    }

    /// The passivation in force: [`passivation`](Self::passivation), or
    /// none while [`remember_entities`](Self::remember_entities) is on
    /// (as in Akka, remembered entities are never passivated
    /// automatically; `ClusterSharding::start` refuses a passivation
    /// strategy other than the default that is asked for together with
    /// remembered entities).
    ///
    /// ```
    /// use troupe_sharding::{PassivationSettings, ShardingSettings};
    ///
    /// let mut s = ShardingSettings::default();
    /// assert_eq!(s.effective_passivation(), PassivationSettings::default());
    /// s.remember_entities = true;
    /// s.validate().unwrap();
    /// assert_eq!(s.effective_passivation(), PassivationSettings::none());
    /// ```
    pub fn effective_passivation(&self) -> PassivationSettings {
        if self.remember_entities {
            PassivationSettings::none()
        } else {
            self.passivation.clone()
        }
    }

    /// Applies the `[sharding]` table of the file, key by key in the
    /// order of [`KEYS`] (so that a strategy is set before its options).
    fn apply_table(&mut self, table: &Table) -> Result<(), ShardingError> {
        let mut keys = Vec::new();
        collect_keys("", table, &mut keys)?;
        keys.sort_by_key(|(i, _, _)| *i);
        for (_, key, value) in keys {
            self.set(&key, value)
                .map_err(|why| ShardingError::Settings(format!("`sharding.{key}`: {why}")))?;
        }
        Ok(())
    }

    /// Sets the setting of one key of [`KEYS`] (an unknown key is an
    /// error listing the known ones). The error does not name the key.
    fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        if !KEYS.iter().any(|(k, _)| *k == key) {
            return Err(unknown_key(key));
        }
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
            "remember-entities" => self.remember_entities = boolean(v)?,
            "remember-entities-store" => match text(v)?.trim() {
                "ddata" => {}
                "eventsourced" => {
                    return Err(
                        "\"eventsourced\" is not supported: remembered entities are \
                                kept in distributed data (\"ddata\")"
                            .into(),
                    )
                }
                other => return Err(format!("expected \"ddata\", not \"{other}\"")),
            },
            "entity-restart-backoff" => self.entity_restart_backoff = duration(v)?,
            "entity-recovery-strategy" => {
                self.entity_recovery_strategy =
                    match (text(v)?.trim(), self.entity_recovery_strategy) {
                        ("all", _) => EntityRecoveryStrategy::All,
                        ("constant", EntityRecoveryStrategy::All) => {
                            EntityRecoveryStrategy::CONSTANT
                        }
                        ("constant", constant) => constant,
                        (other, _) => {
                            return Err(format!(
                                "expected \"all\" or \"constant\", not \"{other}\""
                            ))
                        }
                    }
            }
            "entity-recovery-constant-rate-strategy.frequency" => {
                let d = duration(v)?;
                match &mut self.entity_recovery_strategy {
                    EntityRecoveryStrategy::Constant { frequency, .. } => *frequency = d,
                    EntityRecoveryStrategy::All => ignored_constant_rate(key),
                }
            }
            "entity-recovery-constant-rate-strategy.number-of-entities" => {
                let n = count(v)?;
                match &mut self.entity_recovery_strategy {
                    EntityRecoveryStrategy::Constant {
                        number_of_entities, ..
                    } => *number_of_entities = n,
                    EntityRecoveryStrategy::All => ignored_constant_rate(key),
                }
            }
            _ => match key.strip_prefix("passivation.") {
                Some(key) => self.passivation.set(key, v)?,
                None => return Err(unknown_key(key)),
            },
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
            ("entity-restart-backoff", self.entity_restart_backoff),
        ] {
            if d.is_zero() {
                return bad(key, "must be longer than zero");
            }
        }
        if self.min_nr_of_members == 0 {
            return bad("min-nr-of-members", "must be at least 1");
        }
        if let EntityRecoveryStrategy::Constant {
            frequency,
            number_of_entities,
        } = self.entity_recovery_strategy
        {
            if frequency.is_zero() {
                return bad(
                    "entity-recovery-constant-rate-strategy.frequency",
                    "must be longer than zero",
                );
            }
            if number_of_entities == 0 {
                return bad(
                    "entity-recovery-constant-rate-strategy.number-of-entities",
                    "must be at least 1",
                );
            }
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
        self.passivation.validate()
    }
}

/// Automatic passivation of an entity type's entities: of those idle for a
/// while, and of the least valuable ones when a region has more active
/// entities than a limit (Akka's `passivation` settings, from the
/// `[sharding.passivation]` table).
///
/// `strategy` chooses among four:
///
/// - `"default-idle-strategy"` (the default, as in Akka): entities that
///   received no message for `idle-timeout` (2 minutes) are passivated,
///   checked every `idle-interval` (half the timeout). Only these two
///   keys may be set with it.
/// - `"default-strategy"`, Akka's recommended strategy with a limit: at
///   most `active-entity-limit` (100,000) active entities per region,
///   shared evenly by its shards, chosen by W-TinyLFU (an admission
///   window of 1% of the limit, least recently used, resized by hill
///   climbing; a frequency-sketch admission filter; a segmented least
///   recently used main area, 20% probationary and 80% protected). No idle
///   passivation unless `idle-timeout` is set. Only `active-entity-limit`,
///   `idle-timeout` and `idle-interval` may be set with it.
/// - `"custom-strategy"`: exactly what the keys say: idle passivation if
///   `idle-timeout` is set, a limit if `active-entity-limit` is set, with
///   the `replacement` policy (least recently used unless set) and, if
///   set, an admission window and filter (none by default, as in Akka's
///   `strategy-defaults`).
/// - `"none"` (or `"off"`): no automatic passivation (other keys are
///   ignored).
///
/// ```toml
/// [sharding.passivation]
/// strategy = "custom-strategy"
/// idle-timeout = "5m"                  # "off": no idle passivation
/// idle-interval = "1m"                 # "default": half the timeout
/// active-entity-limit = 100000         # per region; "off": no limit
///
/// [sharding.passivation.replacement]
/// policy = "least-recently-used"       # "most-recently-used", "least-frequently-used"
/// least-recently-used.segmented.levels = 2          # "off": not segmented
/// least-recently-used.segmented.proportions = [0.2, 0.8]  # lowest first; default: even
/// least-frequently-used.dynamic-aging = false
///
/// [sharding.passivation.admission]
/// window.policy = "least-recently-used"  # any replacement policy, or "none"
/// window.proportion = 0.01               # of the limit, to start with
/// window.minimum-proportion = 0.01       # bounds of the optimizer
/// window.maximum-proportion = 1.0
/// window.optimizer = "hill-climbing"     # or "none"
/// window.hill-climbing.adjust-multiplier = 10.0   # adjust every 10 × limit accesses
/// window.hill-climbing.initial-step = 0.0625
/// window.hill-climbing.restart-threshold = 0.05
/// window.hill-climbing.step-decay = 0.98
/// filter = "frequency-sketch"            # or "none"
/// frequency-sketch.depth = 4             # 1 to 16
/// frequency-sketch.counter-bits = 4      # 2, 4, 8, 16, 32 or 64
/// frequency-sketch.width-multiplier = 4  # a power of two
/// frequency-sketch.reset-multiplier = 10.0
/// ```
///
/// (The window's policy takes the same `least-recently-used.segmented.*`
/// and `least-frequently-used.dynamic-aging` keys as the main area's.)
///
/// In code, start from a constructor and adjust:
///
/// ```
/// use std::time::Duration;
/// use troupe_sharding::{PassivationSettings, PassivationStrategy, ReplacementPolicy};
///
/// // Akka's default: idle entities after 2 minutes.
/// let idle = PassivationSettings::default();
/// assert_eq!(idle.idle_timeout(), Some(Duration::from_secs(120)));
/// assert_eq!(idle.active_entity_limit(), None);
///
/// // W-TinyLFU over 20,000 entities per region, and idle ones after 10 minutes.
/// let s = PassivationSettings::default_strategy()
///     .with_active_entity_limit(20_000)
///     .with_idle_timeout(Duration::from_secs(600));
/// assert_eq!(s.strategy(), PassivationStrategy::Default);
/// assert_eq!(s.idle_interval(), Some(Duration::from_secs(300)));
///
/// // Segmented least recently used over 5,000.
/// let s = PassivationSettings::least_recently_used(5_000)
///     .with_replacement(ReplacementPolicy::LeastRecentlyUsed { segmented: vec![0.2, 0.8] });
/// assert_eq!(s.strategy(), PassivationStrategy::Custom);
/// assert_eq!(s.admission_window(), None);
/// s.validate().unwrap();
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct PassivationSettings {
    strategy: PassivationStrategy,
    /// `None`: the strategy's; `Some(None)`: off.
    idle_timeout: Option<Option<Duration>>,
    /// `None`: half the timeout.
    idle_interval: Option<Duration>,
    /// `None`: the strategy's; `Some(None)`: off.
    active_entity_limit: Option<Option<usize>>,
    replacement: PolicyKeys,
    window: PolicyKeys,
    window_proportion: f64,
    window_minimum_proportion: f64,
    window_maximum_proportion: f64,
    window_optimizer: bool,
    hill_climbing: HillClimbingSettings,
    filter: bool,
    frequency_sketch: FrequencySketchSettings,
}

/// Which automatic passivation (`passivation.strategy`); see
/// [`PassivationSettings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PassivationStrategy {
    /// `"default-idle-strategy"` (the default): idle entities only.
    #[default]
    DefaultIdle,
    /// `"default-strategy"`: Akka's recommended strategy, W-TinyLFU under
    /// an active-entity limit.
    Default,
    /// `"custom-strategy"`: what the other keys say.
    Custom,
    /// `"none"`: no automatic passivation.
    None,
}

impl PassivationStrategy {
    /// The name in the settings file.
    pub fn name(self) -> &'static str {
        match self {
            PassivationStrategy::DefaultIdle => "default-idle-strategy",
            PassivationStrategy::Default => "default-strategy",
            PassivationStrategy::Custom => "custom-strategy",
            PassivationStrategy::None => "none",
        }
    }
}

/// Which active entities to passivate over a limit (`policy` of
/// `passivation.replacement` and `passivation.admission.window`).
#[derive(Debug, Clone, PartialEq)]
pub enum ReplacementPolicy {
    /// `"least-recently-used"`. With two or more `segmented` proportions
    /// (of the limit, lowest level first, adding up to 1), segmented: an
    /// entity enters the lowest level and moves up one each time it is
    /// used again, a full level moves its least recent entities down one,
    /// and only the lowest level's least recent are passivated.
    LeastRecentlyUsed {
        /// The levels' proportions (`least-recently-used.segmented.*`);
        /// empty: not segmented.
        segmented: Vec<f64>,
    },
    /// `"most-recently-used"`.
    MostRecentlyUsed,
    /// `"least-frequently-used"` (the least recently used of the least
    /// frequent first).
    LeastFrequentlyUsed {
        /// Age the frequencies (`least-frequently-used.dynamic-aging`):
        /// new entities start at the priority of the last one passivated,
        /// so that entities popular long ago eventually go.
        dynamic_aging: bool,
    },
}

/// The admission window of a composite strategy
/// (`passivation.admission.window`): the area new entities enter before
/// the admission filter decides whether they replace one of the main
/// area's. The default is the `default-strategy`'s window.
#[derive(Debug, Clone, PartialEq)]
pub struct AdmissionWindowSettings {
    /// Its replacement policy (`policy`). Default least recently used.
    pub policy: ReplacementPolicy,
    /// Its initial share of the limit (`proportion`). Default 0.01.
    pub proportion: f64,
    /// The smallest share the optimizer may give it
    /// (`minimum-proportion`). Default 0.01.
    pub minimum_proportion: f64,
    /// The largest (`maximum-proportion`). Default 1.0.
    pub maximum_proportion: f64,
    /// The optimizer of its share (`optimizer = "hill-climbing"`), or
    /// none. Default hill climbing.
    pub optimizer: Option<HillClimbingSettings>,
}

impl Default for AdmissionWindowSettings {
    fn default() -> Self {
        AdmissionWindowSettings {
            policy: ReplacementPolicy::LeastRecentlyUsed {
                segmented: Vec::new(),
            },
            proportion: 0.01,
            minimum_proportion: 0.01,
            maximum_proportion: 1.0,
            optimizer: Some(HillClimbingSettings::default()),
        }
    }
}

/// The hill-climbing optimizer of the admission window
/// (`passivation.admission.window.hill-climbing`): every so many
/// accesses, it compares the active rate (of messages for entities already
/// active) with the previous period's, and keeps resizing the window in
/// the same direction while the rate does not drop.
#[derive(Debug, Clone, PartialEq)]
pub struct HillClimbingSettings {
    /// Adjust after this many times the limit accesses
    /// (`adjust-multiplier`). Default 10.0.
    pub adjust_multiplier: f64,
    /// The first change of the window's proportion (and the first after a
    /// restart) (`initial-step`). Default 0.0625.
    pub initial_step: f64,
    /// A change of the active rate by this much restarts the climb
    /// (`restart-threshold`). Default 0.05.
    pub restart_threshold: f64,
    /// Each step is this times the previous one (`step-decay`). Default
    /// 0.98.
    pub step_decay: f64,
}

impl Default for HillClimbingSettings {
    fn default() -> Self {
        HillClimbingSettings {
            adjust_multiplier: 10.0,
            initial_step: 0.0625,
            restart_threshold: 0.05,
            step_decay: 0.98,
        }
    }
}

/// The frequency-sketch admission filter
/// (`passivation.admission.frequency-sketch`): a count-min sketch of
/// small counters estimating each entity's accesses, halved periodically.
#[derive(Debug, Clone, PartialEq)]
pub struct FrequencySketchSettings {
    /// Rows, one hash function each, 1 to 16 (`depth`). Default 4.
    pub depth: usize,
    /// Bits of a counter: 2, 4, 8, 16, 32 or 64 (`counter-bits`).
    /// Default 4.
    pub counter_bits: u32,
    /// Counters per row: this times the shard's limit rounded up to a
    /// power of two; itself a power of two (`width-multiplier`). Default 4.
    pub width_multiplier: u32,
    /// Counters are halved after this times the shard's limit increments
    /// (`reset-multiplier`). Default 10.0.
    pub reset_multiplier: f64,
}

impl Default for FrequencySketchSettings {
    fn default() -> Self {
        FrequencySketchSettings {
            depth: 4,
            counter_bits: 4,
            width_multiplier: 4,
            reset_multiplier: 10.0,
        }
    }
}

/// The keys of one area's policy as the file sets them (each policy's
/// own keys are kept whichever is chosen, as in Akka).
#[derive(Debug, Clone, PartialEq)]
struct PolicyKeys {
    /// `policy`; `None` ("none") only for the window.
    policy: Option<PolicyName>,
    /// `least-recently-used.segmented.levels`; `None`: the number of
    /// proportions.
    levels: Option<usize>,
    /// `least-recently-used.segmented.proportions`.
    proportions: Vec<f64>,
    /// `least-frequently-used.dynamic-aging`.
    dynamic_aging: bool,
}

// The policies' names, as the settings spell them.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PolicyName {
    LeastRecentlyUsed,
    MostRecentlyUsed,
    LeastFrequentlyUsed,
}

/// The most levels of a segmented policy.
const MAX_LEVELS: usize = 255;

impl PolicyKeys {
    fn new(policy: Option<PolicyName>) -> Self {
        PolicyKeys {
            policy,
            levels: None,
            proportions: Vec::new(),
            dynamic_aging: false,
        }
    }

    fn from_policy(policy: &ReplacementPolicy) -> Self {
        match policy {
            ReplacementPolicy::LeastRecentlyUsed { segmented } => PolicyKeys {
                levels: (segmented.len() > 1).then_some(segmented.len()),
                proportions: segmented.clone(),
                ..PolicyKeys::new(Some(PolicyName::LeastRecentlyUsed))
            },
            ReplacementPolicy::MostRecentlyUsed => {
                PolicyKeys::new(Some(PolicyName::MostRecentlyUsed))
            }
            ReplacementPolicy::LeastFrequentlyUsed { dynamic_aging } => PolicyKeys {
                dynamic_aging: *dynamic_aging,
                ..PolicyKeys::new(Some(PolicyName::LeastFrequentlyUsed))
            },
        }
    }

    /// The policy these keys describe (`None` for no window).
    fn policy(&self) -> Option<ReplacementPolicy> {
        Some(match self.policy? {
            PolicyName::LeastRecentlyUsed => {
                let levels = self.levels.unwrap_or(self.proportions.len());
                let segmented = if levels < 2 {
                    Vec::new()
                } else if self.proportions.is_empty() {
                    vec![1.0 / levels as f64; levels]
                } else {
                    self.proportions.clone()
                };
                ReplacementPolicy::LeastRecentlyUsed { segmented }
            }
            PolicyName::MostRecentlyUsed => ReplacementPolicy::MostRecentlyUsed,
            PolicyName::LeastFrequentlyUsed => ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: self.dynamic_aging,
            },
        })
    }

    /// Sets one key (`policy`, `least-recently-used.segmented.levels`,
    /// ...).
    fn set(&mut self, key: &str, v: &Value, window: bool) -> Result<(), String> {
        match key {
            "policy" => {
                self.policy = match text(v)?.trim() {
                    "least-recently-used" => Some(PolicyName::LeastRecentlyUsed),
                    "most-recently-used" => Some(PolicyName::MostRecentlyUsed),
                    "least-frequently-used" => Some(PolicyName::LeastFrequentlyUsed),
                    "none" | "off" if window => None,
                    other => {
                        return Err(format!(
                            "expected \"least-recently-used\", \"most-recently-used\" or \
                             \"least-frequently-used\"{}, not \"{other}\"",
                            if window {
                                " (or \"none\" for no window)"
                            } else {
                                " (leave `active-entity-limit` out for no limit)"
                            }
                        ))
                    }
                }
            }
            "least-recently-used.segmented.levels" => self.levels = count_or_off(v)?,
            "least-recently-used.segmented.proportions" => self.proportions = numbers(v)?,
            "least-frequently-used.dynamic-aging" => self.dynamic_aging = boolean(v)?,
            _ => return Err("unknown key".into()),
        }
        Ok(())
    }

    /// The keys (under `prefix`) that differ from `default`'s.
    fn changed(&self, default: &PolicyKeys, prefix: &str, out: &mut Vec<String>) {
        let mut changed = |yes: bool, key: &str| {
            if yes {
                out.push(format!("{prefix}.{key}"));
            }
        };
        changed(self.policy != default.policy, "policy");
        changed(
            self.levels != default.levels,
            "least-recently-used.segmented.levels",
        );
        changed(
            self.proportions != default.proportions,
            "least-recently-used.segmented.proportions",
        );
        changed(
            self.dynamic_aging != default.dynamic_aging,
            "least-frequently-used.dynamic-aging",
        );
    }

    /// Checks the keys (under `prefix`).
    fn validate(&self, prefix: &str) -> Result<(), String> {
        let levels_key = format!("{prefix}.least-recently-used.segmented.levels");
        let proportions_key = format!("{prefix}.least-recently-used.segmented.proportions");
        if let Some(levels) = self.levels {
            if !(1..=MAX_LEVELS).contains(&levels) {
                return Err(format!(
                    "`sharding.{levels_key}`: must be between 1 and {MAX_LEVELS}, not {levels}"
                ));
            }
            if !self.proportions.is_empty() && self.proportions.len() != levels {
                return Err(format!(
                    "`sharding.{proportions_key}`: {} proportions for {levels} levels",
                    self.proportions.len()
                ));
            }
        }
        if self.proportions.len() > MAX_LEVELS {
            return Err(format!(
                "`sharding.{proportions_key}`: at most {MAX_LEVELS} levels"
            ));
        }
        if !self.proportions.is_empty() {
            if let Some(p) = self.proportions.iter().find(|p| !(**p > 0.0 && **p <= 1.0)) {
                return Err(format!(
                    "`sharding.{proportions_key}`: each must be in (0, 1], not {p}"
                ));
            }
            let sum: f64 = self.proportions.iter().sum();
            if (sum - 1.0).abs() > 1e-6 {
                return Err(format!(
                    "`sharding.{proportions_key}`: must add up to 1, not {sum}"
                ));
            }
        }
        Ok(())
    }
}

impl Default for PassivationSettings {
    /// Akka's default: `default-idle-strategy`, idle entities after 2
    /// minutes, checked every minute.
    fn default() -> Self {
        PassivationSettings {
            strategy: PassivationStrategy::DefaultIdle,
            idle_timeout: None,
            idle_interval: None,
            active_entity_limit: None,
            replacement: PolicyKeys::new(Some(PolicyName::LeastRecentlyUsed)),
            window: PolicyKeys::new(None),
            window_proportion: 0.01,
            window_minimum_proportion: 0.01,
            window_maximum_proportion: 1.0,
            window_optimizer: false,
            hill_climbing: HillClimbingSettings::default(),
            filter: false,
            frequency_sketch: FrequencySketchSettings::default(),
        }
    }
}

/// The idle timeout of `default-idle-strategy`.
const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The active-entity limit of `default-strategy`.
const DEFAULT_ACTIVE_ENTITY_LIMIT: usize = 100_000;

impl PassivationSettings {
    /// No automatic passivation (`strategy = "none"`): entities run until
    /// they stop themselves or their shard moves.
    pub fn none() -> Self {
        PassivationSettings {
            strategy: PassivationStrategy::None,
            ..PassivationSettings::default()
        }
    }

    /// `default-idle-strategy` with this idle timeout: entities that
    /// received no message for `timeout` are passivated.
    pub fn idle(timeout: Duration) -> Self {
        PassivationSettings::default().with_idle_timeout(timeout)
    }

    /// `default-strategy`: Akka's recommended strategy, W-TinyLFU over at
    /// most 100,000 active entities per region (see
    /// [`with_active_entity_limit`](Self::with_active_entity_limit)), no
    /// idle passivation (see [`with_idle_timeout`](Self::with_idle_timeout)).
    pub fn default_strategy() -> Self {
        PassivationSettings {
            strategy: PassivationStrategy::Default,
            ..PassivationSettings::default()
        }
    }

    /// `custom-strategy`: the least recently used entities over `limit`
    /// active entities per region.
    pub fn least_recently_used(limit: usize) -> Self {
        PassivationSettings::custom(
            limit,
            ReplacementPolicy::LeastRecentlyUsed {
                segmented: Vec::new(),
            },
        )
    }

    /// `custom-strategy`: the most recently used entities over `limit`
    /// active entities per region.
    pub fn most_recently_used(limit: usize) -> Self {
        PassivationSettings::custom(limit, ReplacementPolicy::MostRecentlyUsed)
    }

    /// `custom-strategy`: the least frequently used entities over `limit`
    /// active entities per region (without dynamic aging; see
    /// [`with_replacement`](Self::with_replacement)).
    pub fn least_frequently_used(limit: usize) -> Self {
        PassivationSettings::custom(
            limit,
            ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: false,
            },
        )
    }

    fn custom(limit: usize, policy: ReplacementPolicy) -> Self {
        PassivationSettings {
            strategy: PassivationStrategy::Custom,
            active_entity_limit: Some(Some(limit)),
            replacement: PolicyKeys::from_policy(&policy),
            ..PassivationSettings::default()
        }
    }

    /// Also passivates entities idle for `timeout`, checked every
    /// [`idle_interval`](Self::idle_interval). On `none`, first becomes
    /// the `custom-strategy` equivalent.
    pub fn with_idle_timeout(self, timeout: Duration) -> Self {
        let mut s = self.allowing(&[
            PassivationStrategy::DefaultIdle,
            PassivationStrategy::Default,
        ]);
        s.idle_timeout = Some(Some(timeout));
        s
    }

    /// No idle passivation.
    pub fn without_idle_timeout(mut self) -> Self {
        if self.strategy != PassivationStrategy::None {
            self.idle_timeout = Some(None);
        }
        self
    }

    /// Checks for idle entities every `interval` (by default, half the
    /// timeout). On `none`, first becomes the `custom-strategy`
    /// equivalent.
    pub fn with_idle_interval(self, interval: Duration) -> Self {
        let mut s = self.allowing(&[
            PassivationStrategy::DefaultIdle,
            PassivationStrategy::Default,
        ]);
        s.idle_interval = Some(interval);
        s
    }

    /// At most `limit` active entities per region. On
    /// `default-idle-strategy` or `none`, first becomes the
    /// `custom-strategy` equivalent (with the least recently used policy).
    pub fn with_active_entity_limit(self, limit: usize) -> Self {
        let mut s = self.allowing(&[PassivationStrategy::Default]);
        s.active_entity_limit = Some(Some(limit));
        s
    }

    /// The replacement policy of the main area (of all active entities,
    /// without admission). First becomes the `custom-strategy`
    /// equivalent.
    pub fn with_replacement(self, policy: ReplacementPolicy) -> Self {
        let mut s = self.allowing(&[]);
        s.replacement = PolicyKeys::from_policy(&policy);
        s
    }

    /// An admission window, or none. First becomes the `custom-strategy`
    /// equivalent.
    ///
    /// ```
    /// use troupe_sharding::{AdmissionWindowSettings, FrequencySketchSettings, PassivationSettings};
    ///
    /// // default-strategy with a 5% window that is not optimized.
    /// let s = PassivationSettings::default_strategy().with_admission_window(Some(
    ///     AdmissionWindowSettings { proportion: 0.05, optimizer: None, ..Default::default() },
    /// ));
    /// assert_eq!(s.admission_window().unwrap().proportion, 0.05);
    /// assert_eq!(s.admission_filter(), Some(FrequencySketchSettings::default()));
    /// assert_eq!(s.active_entity_limit(), Some(100_000));
    /// ```
    pub fn with_admission_window(self, window: Option<AdmissionWindowSettings>) -> Self {
        let mut s = self.allowing(&[]);
        let defaults = PassivationSettings::default();
        match window {
            None => {
                s.window = defaults.window;
                s.window_proportion = defaults.window_proportion;
                s.window_minimum_proportion = defaults.window_minimum_proportion;
                s.window_maximum_proportion = defaults.window_maximum_proportion;
                s.window_optimizer = false;
                s.hill_climbing = defaults.hill_climbing;
            }
            Some(w) => {
                s.window = PolicyKeys::from_policy(&w.policy);
                s.window_proportion = w.proportion;
                s.window_minimum_proportion = w.minimum_proportion;
                s.window_maximum_proportion = w.maximum_proportion;
                s.window_optimizer = w.optimizer.is_some();
                s.hill_climbing = w.optimizer.unwrap_or(defaults.hill_climbing);
            }
        }
        s
    }

    /// A frequency-sketch admission filter, or none. First becomes the
    /// `custom-strategy` equivalent.
    pub fn with_admission_filter(self, filter: Option<FrequencySketchSettings>) -> Self {
        let mut s = self.allowing(&[]);
        s.filter = filter.is_some();
        s.frequency_sketch = filter.unwrap_or_default();
        s
    }

    /// These settings, or their `custom-strategy` equivalent unless their
    /// strategy is one of `keep`.
    fn allowing(self, keep: &[PassivationStrategy]) -> Self {
        if self.strategy == PassivationStrategy::Custom || keep.contains(&self.strategy) {
            self
        } else {
            self.to_custom()
        }
    }

    /// The `custom-strategy` settings that mean the same as these.
    ///
    /// ```
    /// use troupe_sharding::{PassivationSettings, PassivationStrategy};
    ///
    /// let s = PassivationSettings::default_strategy().to_custom();
    /// assert_eq!(s.strategy(), PassivationStrategy::Custom);
    /// assert_eq!(s.active_entity_limit(), Some(100_000));
    /// assert_eq!(s.admission_window(), PassivationSettings::default_strategy().admission_window());
    /// ```
    pub fn to_custom(&self) -> Self {
        if self.strategy == PassivationStrategy::Custom {
            return self.clone();
        }
        let mut s = PassivationSettings {
            strategy: PassivationStrategy::Custom,
            idle_timeout: Some(self.idle_timeout()),
            idle_interval: self.idle_timeout().and(self.idle_interval),
            active_entity_limit: Some(self.active_entity_limit()),
            ..PassivationSettings::default()
        };
        if self.strategy == PassivationStrategy::Default {
            s.replacement = PolicyKeys::from_policy(&default_strategy_replacement());
            s = s
                .with_admission_window(Some(AdmissionWindowSettings::default()))
                .with_admission_filter(Some(FrequencySketchSettings::default()));
        }
        s
    }

    /// The strategy (`strategy`).
    pub fn strategy(&self) -> PassivationStrategy {
        self.strategy
    }

    /// Whether entities are passivated automatically at all (when idle,
    /// or over a limit).
    pub fn is_enabled(&self) -> bool {
        self.idle_timeout().is_some() || self.active_entity_limit().is_some()
    }

    /// Entities that received no message for this long are passivated;
    /// `None`: no idle passivation.
    pub fn idle_timeout(&self) -> Option<Duration> {
        match (self.strategy, self.idle_timeout) {
            (PassivationStrategy::None, _) => None,
            (_, Some(timeout)) => timeout,
            (PassivationStrategy::DefaultIdle, None) => Some(DEFAULT_IDLE_TIMEOUT),
            (_, None) => None,
        }
    }

    /// How often idle entities are looked for (with an
    /// [`idle_timeout`](Self::idle_timeout)): `idle-interval`, by default
    /// half the timeout.
    pub fn idle_interval(&self) -> Option<Duration> {
        let timeout = self.idle_timeout()?;
        Some(self.idle_interval.unwrap_or(timeout / 2))
    }

    /// The most active entities of a region (shared evenly by its active
    /// shards); `None`: no limit.
    pub fn active_entity_limit(&self) -> Option<usize> {
        match self.strategy {
            PassivationStrategy::None | PassivationStrategy::DefaultIdle => None,
            PassivationStrategy::Default => self
                .active_entity_limit
                .unwrap_or(Some(DEFAULT_ACTIVE_ENTITY_LIMIT)),
            PassivationStrategy::Custom => self.active_entity_limit.flatten(),
        }
    }

    /// The replacement policy of the main area (of all active entities
    /// without admission) under the [limit](Self::active_entity_limit);
    /// `None` without a limit.
    pub fn replacement_policy(&self) -> Option<ReplacementPolicy> {
        self.active_entity_limit()?;
        match self.strategy {
            PassivationStrategy::Default => Some(default_strategy_replacement()),
            _ => self.replacement.policy(),
        }
    }

    /// The admission window under the [limit](Self::active_entity_limit);
    /// `None` without a limit or a window.
    pub fn admission_window(&self) -> Option<AdmissionWindowSettings> {
        self.active_entity_limit()?;
        if self.strategy == PassivationStrategy::Default {
            return Some(AdmissionWindowSettings::default());
        }
        Some(AdmissionWindowSettings {
            policy: self.window.policy()?,
            proportion: self.window_proportion,
            minimum_proportion: self.window_minimum_proportion,
            maximum_proportion: self.window_maximum_proportion,
            optimizer: self.window_optimizer.then(|| self.hill_climbing.clone()),
        })
    }

    /// The admission filter of the main area under the
    /// [limit](Self::active_entity_limit); `None` without a limit or a
    /// filter.
    pub fn admission_filter(&self) -> Option<FrequencySketchSettings> {
        self.active_entity_limit()?;
        match self.strategy {
            PassivationStrategy::Default => Some(FrequencySketchSettings::default()),
            _ => self.filter.then(|| self.frequency_sketch.clone()),
        }
    }

    /// Checks the values, and that the strategy takes the keys that are
    /// set; the error names the offending key.
    pub fn validate(&self) -> Result<(), ShardingError> {
        self.check().map_err(ShardingError::Settings)
    }

    fn check(&self) -> Result<(), String> {
        let bad = |key: &str, why: &str| Err(format!("`sharding.passivation.{key}`: {why}"));
        let allowed: &[&str] = match self.strategy {
            PassivationStrategy::DefaultIdle => &["idle-timeout", "idle-interval"],
            PassivationStrategy::Default => {
                &["idle-timeout", "idle-interval", "active-entity-limit"]
            }
            PassivationStrategy::Custom | PassivationStrategy::None => &[],
        };
        if !allowed.is_empty() {
            if let Some(key) = self
                .changed()
                .into_iter()
                .find(|k| !allowed.contains(&k.as_str()))
            {
                let allowed: Vec<String> = allowed.iter().map(|k| format!("`{k}`")).collect();
                return bad(
                    &key,
                    &format!(
                        "not used by strategy \"{}\", which takes only {}; set `strategy = \
                         \"custom-strategy\"` to configure it",
                        self.strategy.name(),
                        allowed.join(", ")
                    ),
                );
            }
        }
        if self.idle_timeout == Some(Some(Duration::ZERO)) {
            return bad("idle-timeout", "must be longer than zero (or \"off\")");
        }
        if self.idle_interval == Some(Duration::ZERO) {
            return bad("idle-interval", "must be longer than zero");
        }
        if self.active_entity_limit == Some(Some(0)) {
            return bad("active-entity-limit", "must be at least 1 (or \"off\")");
        }
        self.replacement.validate("passivation.replacement")?;
        self.window.validate("passivation.admission.window")?;
        for (key, p) in [
            ("admission.window.proportion", self.window_proportion),
            (
                "admission.window.minimum-proportion",
                self.window_minimum_proportion,
            ),
            (
                "admission.window.maximum-proportion",
                self.window_maximum_proportion,
            ),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return bad(key, &format!("must be in [0, 1], not {p}"));
            }
        }
        if self.window_minimum_proportion > self.window_maximum_proportion {
            return bad(
                "admission.window.minimum-proportion",
                &format!(
                    "must not be more than `maximum-proportion` ({})",
                    self.window_maximum_proportion
                ),
            );
        }
        let h = &self.hill_climbing;
        let positive = |x: f64| x > 0.0 && x.is_finite();
        if !positive(h.adjust_multiplier) {
            return bad(
                "admission.window.hill-climbing.adjust-multiplier",
                "must be more than zero",
            );
        }
        if !(h.initial_step > 0.0 && h.initial_step <= 1.0) {
            return bad(
                "admission.window.hill-climbing.initial-step",
                "must be in (0, 1]",
            );
        }
        if !(h.restart_threshold >= 0.0 && h.restart_threshold.is_finite()) {
            return bad(
                "admission.window.hill-climbing.restart-threshold",
                "must be zero or more",
            );
        }
        if !(h.step_decay > 0.0 && h.step_decay <= 1.0) {
            return bad(
                "admission.window.hill-climbing.step-decay",
                "must be in (0, 1]",
            );
        }
        let f = &self.frequency_sketch;
        let max_depth = crate::passivation::MAX_FREQUENCY_SKETCH_DEPTH;
        if !(1..=max_depth).contains(&f.depth) {
            return bad(
                "admission.frequency-sketch.depth",
                &format!("must be between 1 and {max_depth}"),
            );
        }
        if !matches!(f.counter_bits, 2 | 4 | 8 | 16 | 32 | 64) {
            return bad(
                "admission.frequency-sketch.counter-bits",
                "must be 2, 4, 8, 16, 32 or 64",
            );
        }
        if !f.width_multiplier.is_power_of_two() {
            return bad(
                "admission.frequency-sketch.width-multiplier",
                "must be a power of two (1, 2, 4, ...)",
            );
        }
        if !positive(f.reset_multiplier) {
            return bad(
                "admission.frequency-sketch.reset-multiplier",
                "must be more than zero",
            );
        }
        Ok(())
    }

    /// The keys (under `passivation.`) set to other than their defaults.
    fn changed(&self) -> Vec<String> {
        let d = PassivationSettings::default();
        let mut out = Vec::new();
        let mut changed = |yes: bool, key: &str| {
            if yes {
                out.push(key.to_string());
            }
        };
        changed(self.idle_timeout != d.idle_timeout, "idle-timeout");
        changed(self.idle_interval != d.idle_interval, "idle-interval");
        changed(
            self.active_entity_limit != d.active_entity_limit,
            "active-entity-limit",
        );
        changed(
            self.window_proportion != d.window_proportion,
            "admission.window.proportion",
        );
        changed(
            self.window_minimum_proportion != d.window_minimum_proportion,
            "admission.window.minimum-proportion",
        );
        changed(
            self.window_maximum_proportion != d.window_maximum_proportion,
            "admission.window.maximum-proportion",
        );
        changed(
            self.window_optimizer != d.window_optimizer,
            "admission.window.optimizer",
        );
        let (h, dh) = (&self.hill_climbing, &d.hill_climbing);
        for (yes, key) in [
            (
                h.adjust_multiplier != dh.adjust_multiplier,
                "adjust-multiplier",
            ),
            (h.initial_step != dh.initial_step, "initial-step"),
            (
                h.restart_threshold != dh.restart_threshold,
                "restart-threshold",
            ),
            (h.step_decay != dh.step_decay, "step-decay"),
        ] {
            changed(yes, &format!("admission.window.hill-climbing.{key}"));
        }
        changed(self.filter != d.filter, "admission.filter");
        let (f, df) = (&self.frequency_sketch, &d.frequency_sketch);
        for (yes, key) in [
            (f.depth != df.depth, "depth"),
            (f.counter_bits != df.counter_bits, "counter-bits"),
            (
                f.width_multiplier != df.width_multiplier,
                "width-multiplier",
            ),
            (
                f.reset_multiplier != df.reset_multiplier,
                "reset-multiplier",
            ),
        ] {
            changed(yes, &format!("admission.frequency-sketch.{key}"));
        }
        self.replacement
            .changed(&d.replacement, "replacement", &mut out);
        self.window.changed(&d.window, "admission.window", &mut out);
        out
    }

    /// Sets one key of `[sharding.passivation]` (without `passivation.`).
    fn set(&mut self, key: &str, v: &Value) -> Result<(), String> {
        match key {
            "strategy" => {
                self.strategy = match text(v)?.trim() {
                    "default-idle-strategy" => PassivationStrategy::DefaultIdle,
                    "default-strategy" => PassivationStrategy::Default,
                    "custom-strategy" => PassivationStrategy::Custom,
                    "none" | "off" => PassivationStrategy::None,
                    other => {
                        return Err(format!(
                            "expected \"default-idle-strategy\", \"default-strategy\", \
                             \"custom-strategy\" or \"none\", not \"{other}\""
                        ))
                    }
                }
            }
            "idle-timeout" => {
                self.idle_timeout = Some(match v.as_str().map(str::trim) {
                    Some("off" | "none") => None,
                    _ => Some(duration(v)?),
                })
            }
            "idle-interval" => {
                self.idle_interval = match v.as_str().map(str::trim) {
                    Some("default") => None,
                    _ => Some(duration(v)?),
                }
            }
            "active-entity-limit" => self.active_entity_limit = Some(count_or_off(v)?),
            "admission.window.proportion" => self.window_proportion = fraction(v)?,
            "admission.window.minimum-proportion" => self.window_minimum_proportion = fraction(v)?,
            "admission.window.maximum-proportion" => self.window_maximum_proportion = fraction(v)?,
            "admission.window.optimizer" => {
                self.window_optimizer = match text(v)?.trim() {
                    "hill-climbing" => true,
                    "none" | "off" => false,
                    other => {
                        return Err(format!(
                            "expected \"hill-climbing\" or \"none\", not \"{other}\""
                        ))
                    }
                }
            }
            "admission.window.hill-climbing.adjust-multiplier" => {
                self.hill_climbing.adjust_multiplier = fraction(v)?
            }
            "admission.window.hill-climbing.initial-step" => {
                self.hill_climbing.initial_step = fraction(v)?
            }
            "admission.window.hill-climbing.restart-threshold" => {
                self.hill_climbing.restart_threshold = fraction(v)?
            }
            "admission.window.hill-climbing.step-decay" => {
                self.hill_climbing.step_decay = fraction(v)?
            }
            "admission.filter" => {
                self.filter = match text(v)?.trim() {
                    "frequency-sketch" => true,
                    "none" | "off" => false,
                    other => {
                        return Err(format!(
                            "expected \"frequency-sketch\" or \"none\", not \"{other}\""
                        ))
                    }
                }
            }
            "admission.frequency-sketch.depth" => self.frequency_sketch.depth = count(v)?,
            "admission.frequency-sketch.counter-bits" => {
                self.frequency_sketch.counter_bits = count(v)?
            }
            "admission.frequency-sketch.width-multiplier" => {
                self.frequency_sketch.width_multiplier = count(v)?
            }
            "admission.frequency-sketch.reset-multiplier" => {
                self.frequency_sketch.reset_multiplier = fraction(v)?
            }
            _ => {
                if let Some(key) = key.strip_prefix("replacement.") {
                    self.replacement.set(key, v, false)?
                } else if let Some(key) = key.strip_prefix("admission.window.") {
                    self.window.set(key, v, true)?
                } else {
                    return Err(unknown_key(&format!("passivation.{key}")));
                }
            }
        }
        Ok(())
    }
}

/// The main area of `default-strategy`: segmented least recently used,
/// 20% probationary and 80% protected.
fn default_strategy_replacement() -> ReplacementPolicy {
    ReplacementPolicy::LeastRecentlyUsed {
        segmented: vec![0.2, 0.8],
    }
}

impl fmt::Display for ReplacementPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplacementPolicy::LeastRecentlyUsed { segmented } if segmented.len() > 1 => {
                let levels: Vec<String> = segmented.iter().map(|p| percent(*p)).collect();
                write!(f, "segmented least recently used ({})", levels.join("/"))
            }
            ReplacementPolicy::LeastRecentlyUsed { .. } => f.write_str("least recently used"),
            ReplacementPolicy::MostRecentlyUsed => f.write_str("most recently used"),
            ReplacementPolicy::LeastFrequentlyUsed { dynamic_aging } => {
                f.write_str("least frequently used")?;
                if *dynamic_aging {
                    f.write_str(" with dynamic aging")?;
                }
                Ok(())
            }
        }
    }
}

/// A proportion as a percentage, to two decimals at most.
fn percent(p: f64) -> String {
    format!("{}%", (p * 10_000.0).round() / 100.0)
}

/// What the settings do, for logs: e.g. "idle entities after 2m, checked
/// every 1m".
impl fmt::Display for PassivationSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limit = self.active_entity_limit();
        if let (Some(limit), Some(policy)) = (limit, self.replacement_policy()) {
            write!(f, "{policy} entities over {limit} per region")?;
            if let Some(w) = self.admission_window() {
                write!(
                    f,
                    ", behind an admission window ({}, {} of the limit{})",
                    w.policy,
                    percent(w.proportion),
                    if w.optimizer.is_some() {
                        ", optimized by hill climbing"
                    } else {
                        ""
                    }
                )?;
            }
            if self.admission_filter().is_some() {
                f.write_str(", with a frequency-sketch admission filter")?;
            }
        }
        if let (Some(timeout), Some(interval)) = (self.idle_timeout(), self.idle_interval()) {
            if limit.is_some() {
                f.write_str("; and ")?;
            }
            write!(
                f,
                "idle entities after {}, checked every {}",
                humantime::format_duration(timeout),
                humantime::format_duration(interval)
            )?;
        }
        if !self.is_enabled() {
            f.write_str("disabled")?;
        }
        Ok(())
    }
}

/// What a key's value is, for reading it from an environment variable.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// A whole number.
    Count,
    /// A whole number, or text such as `off`.
    CountOrText,
    /// A number with a fraction.
    Fraction,
    /// `true` or `false`.
    Bool,
    /// Numbers, separated by commas.
    Numbers,
    /// Text, or a duration written as text.
    Text,
}

/// Every scalar key of `[sharding]`, as the file spells it (its tables'
/// names, then a dot). [`ShardingSettings::set`] sets each.
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
    ("remember-entities", Kind::Bool),
    ("remember-entities-store", Kind::Text),
    ("entity-restart-backoff", Kind::Text),
    // Before the options of the constant strategy.
    ("entity-recovery-strategy", Kind::Text),
    (
        "entity-recovery-constant-rate-strategy.frequency",
        Kind::Text,
    ),
    (
        "entity-recovery-constant-rate-strategy.number-of-entities",
        Kind::Count,
    ),
    ("passivation.strategy", Kind::Text),
    ("passivation.idle-timeout", Kind::Text),
    ("passivation.idle-interval", Kind::Text),
    ("passivation.active-entity-limit", Kind::CountOrText),
    ("passivation.replacement.policy", Kind::Text),
    (
        "passivation.replacement.least-recently-used.segmented.levels",
        Kind::CountOrText,
    ),
    (
        "passivation.replacement.least-recently-used.segmented.proportions",
        Kind::Numbers,
    ),
    (
        "passivation.replacement.least-frequently-used.dynamic-aging",
        Kind::Bool,
    ),
    ("passivation.admission.window.policy", Kind::Text),
    (
        "passivation.admission.window.least-recently-used.segmented.levels",
        Kind::CountOrText,
    ),
    (
        "passivation.admission.window.least-recently-used.segmented.proportions",
        Kind::Numbers,
    ),
    (
        "passivation.admission.window.least-frequently-used.dynamic-aging",
        Kind::Bool,
    ),
    ("passivation.admission.window.proportion", Kind::Fraction),
    (
        "passivation.admission.window.minimum-proportion",
        Kind::Fraction,
    ),
    (
        "passivation.admission.window.maximum-proportion",
        Kind::Fraction,
    ),
    ("passivation.admission.window.optimizer", Kind::Text),
    (
        "passivation.admission.window.hill-climbing.adjust-multiplier",
        Kind::Fraction,
    ),
    (
        "passivation.admission.window.hill-climbing.initial-step",
        Kind::Fraction,
    ),
    (
        "passivation.admission.window.hill-climbing.restart-threshold",
        Kind::Fraction,
    ),
    (
        "passivation.admission.window.hill-climbing.step-decay",
        Kind::Fraction,
    ),
    ("passivation.admission.filter", Kind::Text),
    ("passivation.admission.frequency-sketch.depth", Kind::Count),
    (
        "passivation.admission.frequency-sketch.counter-bits",
        Kind::Count,
    ),
    (
        "passivation.admission.frequency-sketch.width-multiplier",
        Kind::Count,
    ),
    (
        "passivation.admission.frequency-sketch.reset-multiplier",
        Kind::Fraction,
    ),
];

/// Akka's keys of features Troupe does not offer: accepted and ignored.
const IGNORED: &[&str] = &["state-store-mode"];

const ENV_PREFIX: &str = "TROUPE_SHARDING_";

/// Whether `path` (dotted, under `[sharding]`) names a table of keys.
fn is_table(path: &str) -> bool {
    KEYS.iter().any(|(key, _)| {
        key.strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('.'))
    })
}

/// The error for a key that is not one of [`KEYS`]: names the known keys
/// (and tables) of its table.
fn unknown_key(key: &str) -> String {
    let (table, start) = match key.rsplit_once('.') {
        Some((table, _)) => (format!("[sharding.{table}]"), format!("{table}.")),
        None => ("[sharding]".to_string(), String::new()),
    };
    let mut known: Vec<String> = Vec::new();
    for (k, _) in KEYS {
        if let Some(rest) = k.strip_prefix(&start) {
            let name = format!("`{}`", rest.split('.').next().unwrap_or(rest));
            if !known.contains(&name) {
                known.push(name);
            }
        }
    }
    if start.is_empty() {
        known.extend(IGNORED.iter().map(|k| format!("`{k}`")));
    }
    format!(
        "unknown key in {table}; expected one of {}",
        known.join(", ")
    )
}

/// The keys of `table` (`[sharding]` when `prefix` is empty, else
/// `[sharding.<prefix>]`) and of its tables, each with its index in
/// [`KEYS`]; the keys of [`IGNORED`] are checked and left out.
fn collect_keys<'a>(
    prefix: &str,
    table: &'a Table,
    out: &mut Vec<(usize, String, &'a Value)>,
) -> Result<(), ShardingError> {
    for (name, value) in table {
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let bad = |why: String| ShardingError::Settings(format!("`sharding.{key}`: {why}"));
        if is_table(&key) {
            let sub = value
                .as_table()
                .ok_or_else(|| bad(format!("must be a table, not {value}")))?;
            collect_keys(&key, sub, out)?;
        } else if prefix.is_empty() && IGNORED.contains(&name.as_str()) {
            ignored(name, value).map_err(bad)?;
        } else {
            match KEYS.iter().position(|(k, _)| *k == key) {
                Some(i) => out.push((i, key, value)),
                None => return Err(bad(unknown_key(&key))),
            }
        }
    }
    Ok(())
}

/// Warns that an option of the constant entity-recovery strategy is
/// ignored.
fn ignored_constant_rate(key: &str) {
    tracing::warn!(
        "`sharding.{key}` is ignored: `entity-recovery-strategy` is \"all\", not \"constant\""
    );
}

/// The environment variable of a key, without [`ENV_PREFIX`].
fn env_suffix(key: &str) -> String {
    key.to_ascii_uppercase().replace(['-', '.'], "_")
}

/// The value of a key of `kind` from an environment variable's text.
fn env_value(kind: Kind, text: &str) -> Result<Value, String> {
    let t = text.trim();
    Ok(match kind {
        Kind::Count => Value::Integer(
            t.parse()
                .map_err(|_| format!("`{text}` is not a whole number"))?,
        ),
        Kind::CountOrText => match t.parse() {
            Ok(n) => Value::Integer(n),
            Err(_) => Value::String(t.to_string()),
        },
        Kind::Fraction => Value::Float(t.parse().map_err(|_| format!("`{text}` is not a number"))?),
        Kind::Bool => Value::Boolean(match t {
            "true" | "on" | "yes" => true,
            "false" | "off" | "no" => false,
            _ => return Err(format!("`{text}` is not true or false")),
        }),
        Kind::Numbers => {
            let inner = t.trim_start_matches('[').trim_end_matches(']').trim();
            let numbers = if inner.is_empty() {
                Vec::new()
            } else {
                inner
                    .split(',')
                    .map(|n| {
                        n.trim()
                            .parse()
                            .map(Value::Float)
                            .map_err(|_| format!("`{text}` is not numbers separated by commas"))
                    })
                    .collect::<Result<_, _>>()?
            };
            Value::Array(numbers)
        }
        Kind::Text => Value::String(t.to_string()),
    })
}

/// Checks (and ignores, with a warning) a key of [`IGNORED`].
fn ignored(key: &str, v: &Value) -> Result<(), String> {
    debug_assert_eq!(key, "state-store-mode");
    match v.as_str() {
        Some("ddata") => {}
        Some(mode) => tracing::warn!(
            "`sharding.state-store-mode = \"{mode}\"` is not supported and is ignored: \
             the coordinator keeps its state in distributed data (\"ddata\")"
        ),
        None => return Err(format!("expected \"ddata\" or \"persistence\", not {v}")),
    }
    Ok(())
}

fn count<T: TryFrom<i64>>(v: &Value) -> Result<T, String> {
    let n = v
        .as_integer()
        .ok_or_else(|| format!("expected a whole number, not {v}"))?;
    T::try_from(n).map_err(|_| format!("{n} is out of range"))
}

/// A whole number, or `"off"`/`"none"` for none.
fn count_or_off(v: &Value) -> Result<Option<usize>, String> {
    match v {
        Value::String(s) if matches!(s.trim(), "off" | "none") => Ok(None),
        Value::Integer(_) => count(v).map(Some),
        _ => Err(format!("expected a whole number or \"off\", not {v}")),
    }
}

fn fraction(v: &Value) -> Result<f64, String> {
    match v {
        Value::Float(f) => Ok(*f),
        Value::Integer(n) => Ok(*n as f64),
        _ => Err(format!("expected a number, not {v}")),
    }
}

/// A list of numbers, such as `[0.2, 0.8]`.
fn numbers(v: &Value) -> Result<Vec<f64>, String> {
    let list = v
        .as_array()
        .ok_or_else(|| format!("expected a list of numbers such as [0.2, 0.8], not {v}"))?;
    list.iter().map(fraction).collect()
}

fn boolean(v: &Value) -> Result<bool, String> {
    v.as_bool()
        .ok_or_else(|| format!("expected true or false, not {v}"))
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

    fn passivation(toml: &str) -> Result<PassivationSettings, ShardingError> {
        ShardingSettings::from_toml(&format!("[sharding.passivation]\n{toml}"))
            .map(|s| s.passivation)
    }

    fn passivation_err(toml: &str) -> String {
        match passivation(toml) {
            Ok(s) => panic!("expected an error, got {s:?}"),
            Err(e) => e.to_string(),
        }
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
        // Akka's defaults.
        let s = ShardingSettings::default();
        assert!(!s.remember_entities);
        assert_eq!(s.entity_restart_backoff, Duration::from_secs(10));
        assert_eq!(s.entity_recovery_strategy, EntityRecoveryStrategy::All);
        assert_eq!(
            EntityRecoveryStrategy::CONSTANT,
            EntityRecoveryStrategy::Constant {
                frequency: Duration::from_millis(100),
                number_of_entities: 5
            }
        );
        let p = &s.passivation;
        assert_eq!(p.strategy(), PassivationStrategy::DefaultIdle);
        assert_eq!(p.idle_timeout(), Some(Duration::from_secs(120)));
        assert_eq!(p.idle_interval(), Some(Duration::from_secs(60)));
        assert_eq!(p.active_entity_limit(), None);
        assert_eq!(p.replacement_policy(), None);
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
            remember-entities = true
            remember-entities-store = "ddata"
            entity-restart-backoff = "7s"
            entity-recovery-strategy = "constant"
            state-store-mode = "ddata"
            [sharding.entity-recovery-constant-rate-strategy]
            frequency = "250ms"
            number-of-entities = 9
            [sharding.coordinator-state]
            write-majority-plus = 1
            read-majority-plus = 2
            [sharding.least-shard-allocation-strategy]
            rebalance-absolute-limit = 7
            rebalance-relative-limit = 0.5
            [sharding.passivation]
            strategy = "custom-strategy"
            idle-timeout = "5m"
            idle-interval = "30s"
            active-entity-limit = 5000
            [sharding.passivation.replacement]
            policy = "least-frequently-used"
            least-recently-used.segmented.levels = 3
            least-recently-used.segmented.proportions = [0.2, 0.3, 0.5]
            least-frequently-used.dynamic-aging = true
            [sharding.passivation.admission]
            window.policy = "least-recently-used"
            window.least-recently-used.segmented.levels = 2
            window.least-recently-used.segmented.proportions = [0.5, 0.5]
            window.least-frequently-used.dynamic-aging = true
            window.proportion = 0.05
            window.minimum-proportion = 0.02
            window.maximum-proportion = 0.5
            window.optimizer = "hill-climbing"
            window.hill-climbing.adjust-multiplier = 5
            window.hill-climbing.initial-step = 0.1
            window.hill-climbing.restart-threshold = 0.2
            window.hill-climbing.step-decay = 0.9
            filter = "frequency-sketch"
            frequency-sketch.depth = 8
            frequency-sketch.counter-bits = 8
            frequency-sketch.width-multiplier = 2
            frequency-sketch.reset-multiplier = 20.0
            "#,
        )
        .unwrap();
        let hill_climbing = HillClimbingSettings {
            adjust_multiplier: 5.0,
            initial_step: 0.1,
            restart_threshold: 0.2,
            step_decay: 0.9,
        };
        let frequency_sketch = FrequencySketchSettings {
            depth: 8,
            counter_bits: 8,
            width_multiplier: 2,
            reset_multiplier: 20.0,
        };
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
            remember_entities: true,
            entity_restart_backoff: Duration::from_secs(7),
            // (The constant strategy's table comes first in the file.)
            entity_recovery_strategy: EntityRecoveryStrategy::Constant {
                frequency: Duration::from_millis(250),
                number_of_entities: 9,
            },
            passivation: PassivationSettings {
                strategy: PassivationStrategy::Custom,
                idle_timeout: Some(Some(Duration::from_secs(300))),
                idle_interval: Some(Duration::from_secs(30)),
                active_entity_limit: Some(Some(5000)),
                replacement: PolicyKeys {
                    policy: Some(PolicyName::LeastFrequentlyUsed),
                    levels: Some(3),
                    proportions: vec![0.2, 0.3, 0.5],
                    dynamic_aging: true,
                },
                window: PolicyKeys {
                    policy: Some(PolicyName::LeastRecentlyUsed),
                    levels: Some(2),
                    proportions: vec![0.5, 0.5],
                    dynamic_aging: true,
                },
                window_proportion: 0.05,
                window_minimum_proportion: 0.02,
                window_maximum_proportion: 0.5,
                window_optimizer: true,
                hill_climbing: hill_climbing.clone(),
                filter: true,
                frequency_sketch: frequency_sketch.clone(),
            },
        };
        assert_eq!(s, expected);
        // What they mean.
        let p = &s.passivation;
        assert_eq!(p.idle_timeout(), Some(Duration::from_secs(300)));
        assert_eq!(p.idle_interval(), Some(Duration::from_secs(30)));
        assert_eq!(p.active_entity_limit(), Some(5000));
        assert_eq!(
            p.replacement_policy(),
            Some(ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: true
            })
        );
        assert_eq!(
            p.admission_window(),
            Some(AdmissionWindowSettings {
                policy: ReplacementPolicy::LeastRecentlyUsed {
                    segmented: vec![0.5, 0.5]
                },
                proportion: 0.05,
                minimum_proportion: 0.02,
                maximum_proportion: 0.5,
                optimizer: Some(hill_climbing),
            })
        );
        assert_eq!(p.admission_filter(), Some(frequency_sketch));
        // ... but remembered entities are not passivated.
        assert_eq!(s.effective_passivation(), PassivationSettings::none());
        // Akka's `role = ""`: every member; a whole relative limit.
        let s = ShardingSettings::from_toml(
            "[sharding]\nrole = \"\"\n[sharding.least-shard-allocation-strategy]\n\
             rebalance-relative-limit = 1",
        )
        .unwrap();
        assert_eq!(s.role, None);
        assert_eq!(s.rebalance_relative_limit, 1.0);
    }

    /// A value of each key that is valid and not its default.
    fn sample(key: &str, kind: Kind) -> Value {
        let text = |t: &str| Value::String(t.into());
        match key {
            "remember-entities-store" => text("ddata"),
            "entity-recovery-strategy" => text("constant"),
            "passivation.strategy" => text("custom-strategy"),
            "passivation.replacement.policy" => text("most-recently-used"),
            "passivation.admission.window.policy" => text("least-frequently-used"),
            "passivation.admission.window.optimizer" => text("hill-climbing"),
            "passivation.admission.filter" => text("frequency-sketch"),
            "passivation.admission.frequency-sketch.counter-bits" => Value::Integer(8),
            _ if key.ends_with(".proportions") => {
                Value::Array(vec![Value::Float(0.25), Value::Float(0.75)])
            }
            _ if key.ends_with("timeout")
                || key.ends_with("interval")
                || key.ends_with("backoff")
                || key.ends_with("frequency") =>
            {
                text("3s")
            }
            _ => match kind {
                Kind::Count | Kind::CountOrText => Value::Integer(2),
                Kind::Fraction => Value::Float(0.5),
                Kind::Bool => Value::Boolean(true),
                Kind::Numbers => unreachable!("{key}"),
                Kind::Text => text("r"),
            },
        }
    }

    #[test]
    fn every_key_has_a_setter_and_a_variable() {
        for &(key, kind) in KEYS {
            let value = sample(key, kind);
            // The keys of custom-strategy are set over custom-strategy.
            let mut base = ShardingSettings::default();
            if key.starts_with("entity-recovery-constant-rate-strategy.") {
                base.entity_recovery_strategy = EntityRecoveryStrategy::CONSTANT;
            }
            if key.starts_with("passivation.")
                && ![
                    "passivation.strategy",
                    "passivation.idle-timeout",
                    "passivation.idle-interval",
                ]
                .contains(&key)
            {
                base.passivation = base.passivation.to_custom();
            }
            let mut s = base.clone();
            s.set(key, &value).unwrap_or_else(|e| panic!("{key}: {e}"));
            if key == "remember-entities-store" {
                // Its only value.
                assert_eq!(s, base);
            } else {
                assert_ne!(s, base, "{key}");
            }
            s.validate().unwrap_or_else(|e| panic!("{key}: {e}"));
            let name = format!("{ENV_PREFIX}{}", env_suffix(key));
            let text = match &value {
                Value::String(t) => t.clone(),
                Value::Array(list) => list
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
                v => v.to_string(),
            };
            let from_env = base
                .with_vars([(name.clone(), text)])
                .unwrap_or_else(|e| panic!("{name}: {e}"));
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
        assert!(e.contains("`passivation`"), "{e}");
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
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nremember-entities-store = \"eventsourced\"",
        ));
        assert!(
            e.contains("`sharding.remember-entities-store`: \"eventsourced\" is not supported"),
            "{e}"
        );
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nentity-recovery-strategy = \"some\"",
        ));
        assert!(e.contains("`sharding.entity-recovery-strategy`"), "{e}");
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nentity-recovery-strategy = \"constant\"\n\
             [sharding.entity-recovery-constant-rate-strategy]\nnumber-of-entities = 0",
        ));
        assert!(
            e.contains("`sharding.entity-recovery-constant-rate-strategy.number-of-entities`"),
            "{e}"
        );
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nentity-restart-backoff = \"0s\"",
        ));
        assert!(e.contains("`sharding.entity-restart-backoff`"), "{e}");
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
        let e = err(ShardingSettings::default()
            .with_vars(vars(&[("TROUPE_SHARDING_REMEMBER_ENTITIES", "maybe")])));
        assert!(e.contains("sharding.remember-entities"), "{e}");
    }

    #[test]
    fn bad_passivation_values_name_the_key() {
        for (toml, key) in [
            ("strategy = \"lru\"", "passivation.strategy"),
            ("idle-timeout = 5", "passivation.idle-timeout"),
            ("idle-timeout = \"0s\"", "passivation.idle-timeout"),
            ("idle-interval = \"0s\"", "passivation.idle-interval"),
            (
                "strategy = \"custom-strategy\"\nactive-entity-limit = 0",
                "passivation.active-entity-limit",
            ),
            (
                "strategy = \"custom-strategy\"\nactive-entity-limit = \"lots\"",
                "passivation.active-entity-limit",
            ),
            (
                "strategy = \"custom-strategy\"\nreplacement.policy = \"none\"",
                "passivation.replacement.policy",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 replacement.least-recently-used.segmented.proportions = [0.2, 0.7]",
                "passivation.replacement.least-recently-used.segmented.proportions",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 replacement.least-recently-used.segmented.proportions = [-0.2, 1.2]",
                "passivation.replacement.least-recently-used.segmented.proportions",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 replacement.least-recently-used.segmented.levels = 3\n\
                 replacement.least-recently-used.segmented.proportions = [0.2, 0.8]",
                "passivation.replacement.least-recently-used.segmented.proportions",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 replacement.least-recently-used.segmented.levels = 0",
                "passivation.replacement.least-recently-used.segmented.levels",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 admission.window.least-recently-used.segmented.levels = 1000",
                "passivation.admission.window.least-recently-used.segmented.levels",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 replacement.least-frequently-used.dynamic-aging = \"on\"",
                "passivation.replacement.least-frequently-used.dynamic-aging",
            ),
            (
                "strategy = \"custom-strategy\"\nadmission.window.proportion = 1.5",
                "passivation.admission.window.proportion",
            ),
            (
                "strategy = \"custom-strategy\"\nadmission.window.minimum-proportion = 0.5\n\
                 admission.window.maximum-proportion = 0.25",
                "passivation.admission.window.minimum-proportion",
            ),
            (
                "strategy = \"custom-strategy\"\nadmission.window.optimizer = \"annealing\"",
                "passivation.admission.window.optimizer",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 admission.window.hill-climbing.step-decay = 1.5",
                "passivation.admission.window.hill-climbing.step-decay",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 admission.window.hill-climbing.adjust-multiplier = 0",
                "passivation.admission.window.hill-climbing.adjust-multiplier",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 admission.window.hill-climbing.initial-step = 0",
                "passivation.admission.window.hill-climbing.initial-step",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 admission.window.hill-climbing.restart-threshold = -1",
                "passivation.admission.window.hill-climbing.restart-threshold",
            ),
            (
                "strategy = \"custom-strategy\"\nadmission.filter = \"bloom\"",
                "passivation.admission.filter",
            ),
            (
                "strategy = \"custom-strategy\"\nadmission.frequency-sketch.depth = 17",
                "passivation.admission.frequency-sketch.depth",
            ),
            (
                "strategy = \"custom-strategy\"\nadmission.frequency-sketch.counter-bits = 3",
                "passivation.admission.frequency-sketch.counter-bits",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 admission.frequency-sketch.width-multiplier = 3",
                "passivation.admission.frequency-sketch.width-multiplier",
            ),
            (
                "strategy = \"custom-strategy\"\n\
                 admission.frequency-sketch.reset-multiplier = 0",
                "passivation.admission.frequency-sketch.reset-multiplier",
            ),
        ] {
            let e = passivation_err(toml);
            assert!(e.contains(&format!("`sharding.{key}`: ")), "{toml}: {e}");
        }
        // Unknown keys, at every depth, list their table's keys.
        let e = passivation_err("idle = \"1m\"");
        assert!(
            e.contains("`sharding.passivation.idle`: unknown key in [sharding.passivation]"),
            "{e}"
        );
        assert!(
            e.contains("`idle-timeout`") && e.contains("`admission`"),
            "{e}"
        );
        let e = passivation_err("replacement.least-recently-used.segments = 2");
        assert!(
            e.contains("`sharding.passivation.replacement.least-recently-used.segments`"),
            "{e}"
        );
        assert!(e.contains("`segmented`"), "{e}");
        let e = passivation_err("admission = \"none\"");
        assert!(
            e.contains("`sharding.passivation.admission`: must be a table"),
            "{e}"
        );
    }

    #[test]
    fn default_strategies_take_only_their_keys() {
        let e = passivation_err("active-entity-limit = 1000");
        assert!(
            e.contains(
                "`sharding.passivation.active-entity-limit`: not used by strategy \
                 \"default-idle-strategy\""
            ) && e.contains("custom-strategy"),
            "{e}"
        );
        let e = passivation_err("replacement.policy = \"most-recently-used\"");
        assert!(
            e.contains("`sharding.passivation.replacement.policy`"),
            "{e}"
        );
        let e =
            passivation_err("strategy = \"default-strategy\"\nadmission.window.proportion = 0.1");
        assert!(
            e.contains(
                "`sharding.passivation.admission.window.proportion`: not used by strategy \
                 \"default-strategy\""
            ) && e.contains("custom-strategy"),
            "{e}"
        );
        let e = passivation_err(
            "strategy = \"default-strategy\"\n\
             replacement.least-frequently-used.dynamic-aging = true",
        );
        assert!(
            e.contains("`sharding.passivation.replacement.least-frequently-used.dynamic-aging`"),
            "{e}"
        );
        // The keys they take.
        let p = passivation("idle-timeout = \"10m\"\nidle-interval = \"1m\"").unwrap();
        assert_eq!(p.idle_timeout(), Some(Duration::from_secs(600)));
        assert_eq!(p.idle_interval(), Some(Duration::from_secs(60)));
        let p = passivation("idle-timeout = \"off\"").unwrap();
        assert!(!p.is_enabled());
        let p = passivation(
            "strategy = \"default-strategy\"\nactive-entity-limit = 2000\nidle-timeout = \"1h\"",
        )
        .unwrap();
        assert_eq!(p.active_entity_limit(), Some(2000));
        assert_eq!(p.idle_timeout(), Some(Duration::from_secs(3600)));
        assert_eq!(p.idle_interval(), Some(Duration::from_secs(1800)));
        // Order does not matter: the strategy may come last.
        let p = passivation(
            "active-entity-limit = 30\nidle-interval = \"default\"\nstrategy = \"default-strategy\"",
        )
        .unwrap();
        assert_eq!(p.active_entity_limit(), Some(30));
        // "none" ignores the rest (a switch to turn passivation off).
        let p = passivation("strategy = \"none\"\nactive-entity-limit = 10\nidle-timeout = \"1s\"")
            .unwrap();
        assert!(!p.is_enabled());
        assert_eq!(p.replacement_policy(), None);
    }

    #[test]
    fn strategies_resolve_as_akka_does() {
        // default-strategy: W-TinyLFU over 100,000, no idle passivation.
        let p = passivation("strategy = \"default-strategy\"").unwrap();
        assert_eq!(p, PassivationSettings::default_strategy());
        assert_eq!(p.active_entity_limit(), Some(100_000));
        assert_eq!(p.idle_timeout(), None);
        assert_eq!(p.idle_interval(), None);
        assert_eq!(
            p.replacement_policy(),
            Some(ReplacementPolicy::LeastRecentlyUsed {
                segmented: vec![0.2, 0.8]
            })
        );
        let window = p.admission_window().unwrap();
        assert_eq!(window, AdmissionWindowSettings::default());
        assert_eq!(
            window.policy,
            ReplacementPolicy::LeastRecentlyUsed { segmented: vec![] }
        );
        assert_eq!(
            (
                window.proportion,
                window.minimum_proportion,
                window.maximum_proportion
            ),
            (0.01, 0.01, 1.0)
        );
        let h = window.optimizer.unwrap();
        assert_eq!(
            (
                h.adjust_multiplier,
                h.initial_step,
                h.restart_threshold,
                h.step_decay
            ),
            (10.0, 0.0625, 0.05, 0.98)
        );
        let f = p.admission_filter().unwrap();
        assert_eq!(
            (
                f.depth,
                f.counter_bits,
                f.width_multiplier,
                f.reset_multiplier
            ),
            (4, 4, 4, 10.0)
        );
        let p =
            passivation("strategy = \"default-strategy\"\nactive-entity-limit = \"off\"").unwrap();
        assert_eq!(p.active_entity_limit(), None);
        assert_eq!(p.admission_window(), None);
        // custom-strategy: only what is set; Akka's strategy-defaults (no
        // admission), least recently used by default.
        let p = passivation("strategy = \"custom-strategy\"").unwrap();
        assert!(!p.is_enabled());
        let p = passivation("strategy = \"custom-strategy\"\nidle-timeout = \"1m\"").unwrap();
        assert_eq!(p.idle_timeout(), Some(Duration::from_secs(60)));
        assert_eq!(p.active_entity_limit(), None);
        let p = passivation("strategy = \"custom-strategy\"\nactive-entity-limit = 10").unwrap();
        assert_eq!(p, PassivationSettings::least_recently_used(10));
        assert_eq!(p.idle_timeout(), None);
        assert_eq!(p.admission_window(), None);
        assert_eq!(p.admission_filter(), None);
        // Segmented levels without proportions are even; proportions
        // without levels give the levels; one level is plain.
        let p = passivation(
            "strategy = \"custom-strategy\"\nactive-entity-limit = 10\n\
             replacement.least-recently-used.segmented.levels = 4",
        )
        .unwrap();
        assert_eq!(
            p.replacement_policy(),
            Some(ReplacementPolicy::LeastRecentlyUsed {
                segmented: vec![0.25; 4]
            })
        );
        let p = passivation(
            "strategy = \"custom-strategy\"\nactive-entity-limit = 10\n\
             replacement.least-recently-used.segmented.proportions = [0.1, 0.9]",
        )
        .unwrap();
        assert_eq!(
            p.replacement_policy(),
            Some(ReplacementPolicy::LeastRecentlyUsed {
                segmented: vec![0.1, 0.9]
            })
        );
        for levels in ["1", "\"off\""] {
            let p = passivation(&format!(
                "strategy = \"custom-strategy\"\nactive-entity-limit = 10\n\
                 replacement.least-recently-used.segmented.levels = {levels}"
            ))
            .unwrap();
            assert_eq!(
                p.replacement_policy(),
                Some(ReplacementPolicy::LeastRecentlyUsed { segmented: vec![] })
            );
        }
        // A window without an optimizer, a filter without a window.
        let p = passivation(
            "strategy = \"custom-strategy\"\nactive-entity-limit = 10\n\
             admission.window.policy = \"most-recently-used\"\nadmission.window.proportion = 0.2",
        )
        .unwrap();
        let w = p.admission_window().unwrap();
        assert_eq!(w.policy, ReplacementPolicy::MostRecentlyUsed);
        assert_eq!((w.proportion, w.optimizer), (0.2, None));
        assert_eq!(p.admission_filter(), None);
        let p = passivation(
            "strategy = \"custom-strategy\"\nactive-entity-limit = 10\n\
             admission.filter = \"frequency-sketch\"",
        )
        .unwrap();
        assert_eq!(p.admission_window(), None);
        assert_eq!(
            p.admission_filter(),
            Some(FrequencySketchSettings::default())
        );
        // "off" for none.
        let p = passivation("strategy = \"off\"").unwrap();
        assert_eq!(p, PassivationSettings::none());
        assert!(!p.is_enabled());
    }

    #[test]
    fn builders_make_the_same_settings_as_the_file() {
        assert_eq!(
            PassivationSettings::idle(Duration::from_secs(30)),
            passivation("idle-timeout = \"30s\"").unwrap()
        );
        assert_eq!(
            PassivationSettings::most_recently_used(7),
            passivation(
                "strategy = \"custom-strategy\"\nactive-entity-limit = 7\n\
                 replacement.policy = \"most-recently-used\""
            )
            .unwrap()
        );
        let lfu = PassivationSettings::least_frequently_used(7).with_replacement(
            ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: true,
            },
        );
        assert_eq!(
            lfu.replacement_policy(),
            Some(ReplacementPolicy::LeastFrequentlyUsed {
                dynamic_aging: true
            })
        );
        // Modifiers the strategy does not take turn it into custom-strategy,
        // with the same meaning.
        let s = PassivationSettings::default().with_active_entity_limit(50);
        assert_eq!(s.strategy(), PassivationStrategy::Custom);
        assert_eq!(s.idle_timeout(), Some(Duration::from_secs(120)));
        assert_eq!(s.active_entity_limit(), Some(50));
        assert_eq!(
            s.replacement_policy(),
            Some(ReplacementPolicy::LeastRecentlyUsed { segmented: vec![] })
        );
        let s = PassivationSettings::none().with_idle_timeout(Duration::from_secs(5));
        assert_eq!(s.strategy(), PassivationStrategy::Custom);
        assert_eq!(s.idle_timeout(), Some(Duration::from_secs(5)));
        assert_eq!(s.active_entity_limit(), None);
        let d = PassivationSettings::default_strategy()
            .with_idle_timeout(Duration::from_secs(60))
            .with_idle_interval(Duration::from_secs(10));
        assert_eq!(d.strategy(), PassivationStrategy::Default);
        let c = d.to_custom();
        for s in [&d, &c] {
            s.validate().unwrap();
        }
        assert_eq!(c.idle_timeout(), d.idle_timeout());
        assert_eq!(c.idle_interval(), Some(Duration::from_secs(10)));
        assert_eq!(c.active_entity_limit(), d.active_entity_limit());
        assert_eq!(c.replacement_policy(), d.replacement_policy());
        assert_eq!(c.admission_window(), d.admission_window());
        assert_eq!(c.admission_filter(), d.admission_filter());
        let s = PassivationSettings::default_strategy().with_admission_filter(None);
        assert_eq!(s.admission_filter(), None);
        assert!(s.admission_window().is_some());
        let s = s.with_admission_window(None);
        assert_eq!(s.admission_window(), None);
        assert_eq!(
            s.replacement_policy(),
            Some(ReplacementPolicy::LeastRecentlyUsed {
                segmented: vec![0.2, 0.8]
            })
        );
        let s = PassivationSettings::idle(Duration::from_secs(5)).without_idle_timeout();
        assert!(!s.is_enabled());
        s.validate().unwrap();
        // Invalid values are caught by validate.
        let e = PassivationSettings::least_recently_used(0)
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`sharding.passivation.active-entity-limit`"),
            "{e}"
        );
    }

    #[test]
    fn display_says_what_is_passivated() {
        assert_eq!(
            PassivationSettings::default().to_string(),
            "idle entities after 2m, checked every 1m"
        );
        assert_eq!(PassivationSettings::none().to_string(), "disabled");
        assert_eq!(
            PassivationSettings::default_strategy().to_string(),
            "segmented least recently used (20%/80%) entities over 100000 per region, behind \
             an admission window (least recently used, 1% of the limit, optimized by hill \
             climbing), with a frequency-sketch admission filter"
        );
        assert_eq!(
            PassivationSettings::least_frequently_used(10)
                .with_idle_timeout(Duration::from_secs(90))
                .to_string(),
            "least frequently used entities over 10 per region; and idle entities after \
             1m 30s, checked every 45s"
        );
    }

    #[test]
    fn remembered_entities_are_not_passivated() {
        let s = ShardingSettings::from_toml(
            "[sharding]\nremember-entities = true\n[sharding.passivation]\n\
             strategy = \"default-strategy\"",
        )
        .unwrap();
        assert_eq!(s.passivation, PassivationSettings::default_strategy());
        assert_eq!(s.effective_passivation(), PassivationSettings::none());
        let s = ShardingSettings {
            remember_entities: false,
            ..s
        };
        assert_eq!(s.effective_passivation(), s.passivation);
    }

    #[test]
    fn constant_recovery_options_follow_the_strategy() {
        let constant = |frequency, number_of_entities| EntityRecoveryStrategy::Constant {
            frequency,
            number_of_entities,
        };
        // Variables in any order.
        let s = ShardingSettings::default()
            .with_vars(vars(&[
                (
                    "TROUPE_SHARDING_ENTITY_RECOVERY_CONSTANT_RATE_STRATEGY_NUMBER_OF_ENTITIES",
                    "20",
                ),
                ("TROUPE_SHARDING_ENTITY_RECOVERY_STRATEGY", "constant"),
                (
                    "TROUPE_SHARDING_ENTITY_RECOVERY_CONSTANT_RATE_STRATEGY_FREQUENCY",
                    "1s",
                ),
            ]))
            .unwrap();
        assert_eq!(
            s.entity_recovery_strategy,
            constant(Duration::from_secs(1), 20)
        );
        // "constant" again keeps them.
        let s = s
            .with_vars(vars(&[(
                "TROUPE_SHARDING_ENTITY_RECOVERY_STRATEGY",
                "constant",
            )]))
            .unwrap();
        assert_eq!(
            s.entity_recovery_strategy,
            constant(Duration::from_secs(1), 20)
        );
        let s = s
            .with_vars(vars(&[("TROUPE_SHARDING_ENTITY_RECOVERY_STRATEGY", "all")]))
            .unwrap();
        assert_eq!(s.entity_recovery_strategy, EntityRecoveryStrategy::All);
        // With "all" they are ignored, but checked.
        let s = ShardingSettings::from_toml(
            "[sharding.entity-recovery-constant-rate-strategy]\nfrequency = \"1s\"",
        )
        .unwrap();
        assert_eq!(s.entity_recovery_strategy, EntityRecoveryStrategy::All);
        let e = err(ShardingSettings::from_toml(
            "[sharding.entity-recovery-constant-rate-strategy]\nfrequency = 1",
        ));
        assert!(
            e.contains("`sharding.entity-recovery-constant-rate-strategy.frequency`"),
            "{e}"
        );
        let e = err(ShardingSettings::from_toml(
            "[sharding]\nentity-recovery-strategy = \"constant\"\n\
             [sharding.entity-recovery-constant-rate-strategy]\nfrequency = \"0s\"",
        ));
        assert!(
            e.contains("`sharding.entity-recovery-constant-rate-strategy.frequency`"),
            "{e}"
        );
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
            [sharding.passivation]
            strategy = "custom-strategy"
            active-entity-limit = 100
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
            ("TROUPE_SHARDING_PASSIVATION_ACTIVE_ENTITY_LIMIT", "off"),
            ("TROUPE_SHARDING_PASSIVATION_IDLE_TIMEOUT", "5m"),
            (
                "TROUPE_SHARDING_PASSIVATION_REPLACEMENT_LEAST_RECENTLY_USED_SEGMENTED_PROPORTIONS",
                "[0.2, 0.8]",
            ),
            ("TROUPE_SHARDING_REMEMBER_ENTITIES", "off"),
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
        assert_eq!(s.passivation.active_entity_limit(), None);
        assert_eq!(s.passivation.idle_timeout(), Some(Duration::from_secs(300)));
        assert_eq!(s.passivation.replacement.proportions, [0.2, 0.8]);
        // The environment may switch to a default strategy only if the
        // file's keys fit it.
        let e = err(ShardingSettings::from_toml(
            "[sharding.passivation]\nstrategy = \"custom-strategy\"\nactive-entity-limit = 100\n\
             replacement.policy = \"most-recently-used\"",
        )
        .unwrap()
        .with_vars(vars(&[(
            "TROUPE_SHARDING_PASSIVATION_STRATEGY",
            "default-strategy",
        )])));
        assert!(
            e.contains("`sharding.passivation.replacement.policy`"),
            "{e}"
        );
        let s = ShardingSettings::default()
            .with_vars(vars(&[("TROUPE_SHARDING_PASSIVATION_STRATEGY", "none")]))
            .unwrap();
        assert_eq!(s.passivation, PassivationSettings::none());
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
