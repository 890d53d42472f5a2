//! The `[bootstrap]` table of the settings file (Akka's
//! `management.cluster.bootstrap` keys) and `TROUPE_BOOTSTRAP_*`
//! variables.

use crate::settings::SettingsError;
use serde::Deserialize;
use std::path::Path;
use std::time::Duration;

/// How a contact point is probed (`[bootstrap.contact-point]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ContactPointSettings {
    /// The management port of a contact point that discovery found
    /// without a port (A records). Default: this node's management port.
    pub fallback_port: Option<u16>,
    /// Without a port name, when discovery gives several ports for one
    /// host, only the fallback port's are probed. Default true.
    pub filter_on_fallback_port: bool,
    /// A contact point that fails every probe for this long is dropped
    /// until the next lookup finds it again. Default 3 s.
    pub probing_failure_timeout: Duration,
    /// Interval between two probes of a contact point. Default 1 s.
    pub probe_interval: Duration,
    /// At most this fraction of the interval is added at random to each.
    /// Default 0.2.
    pub probe_interval_jitter: f64,
}

impl Default for ContactPointSettings {
    fn default() -> Self {
        ContactPointSettings {
            fallback_port: None,
            filter_on_fallback_port: true,
            probing_failure_timeout: Duration::from_secs(3),
            probe_interval: Duration::from_secs(1),
            probe_interval_jitter: 0.2,
        }
    }
}

/// Settings of cluster bootstrap, with Akka's defaults.
///
/// ```toml
/// [bootstrap]
/// service-name = "shop"                 # default: the actor system's name
/// service-namespace = "default.svc.cluster.local"
/// port-name = "management"              # with protocol: an SRV lookup
/// protocol = "tcp"
/// required-contact-point-nr = 3
/// stable-margin = "5s"
/// new-cluster-enabled = true
///
/// [bootstrap.contact-point]
/// probe-interval = "1s"
/// probing-failure-timeout = "3s"
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct BootstrapSettings {
    /// When no contact point reports a cluster, the node with the lowest
    /// address may form one. Turn off once the first cluster has formed,
    /// so that restarted nodes never form a second one. Default true.
    pub new_cluster_enabled: bool,
    /// The name looked up; default the actor system's name.
    pub service_name: Option<String>,
    /// Appended to the service name (`NAME.NAMESPACE`), if set.
    pub service_namespace: Option<String>,
    /// The exact name to look up, instead of name and namespace.
    pub effective_name: Option<String>,
    /// The port name for discovery (an SRV lookup with `protocol`).
    pub port_name: Option<String>,
    /// The protocol for discovery. Default `tcp`.
    pub protocol: Option<String>,
    /// The discovered contact points must not have changed for this long
    /// before this node may form a new cluster. Default 5 s.
    pub stable_margin: Duration,
    /// Interval between lookups. Default 1 s.
    pub interval: Duration,
    /// Random extra of each lookup interval (0.2: up to 20 %).
    pub exponential_backoff_random_factor: f64,
    /// Failed lookups back off exponentially up to this. Default 15 s.
    pub exponential_backoff_max: Duration,
    /// Contact points that must have answered before a new cluster may
    /// form. Default 2; set it to the initial number of nodes.
    pub required_contact_point_nr: usize,
    /// How long a lookup may take. Default 3 s.
    pub resolve_timeout: Duration,
    /// A new cluster forms only when every discovered contact point has
    /// answered. Default true.
    pub contact_with_all_contact_points: bool,
    /// How contact points are probed.
    pub contact_point: ContactPointSettings,
}

impl Default for BootstrapSettings {
    fn default() -> Self {
        BootstrapSettings {
            new_cluster_enabled: true,
            service_name: None,
            service_namespace: None,
            effective_name: None,
            port_name: None,
            protocol: Some("tcp".into()),
            stable_margin: Duration::from_secs(5),
            interval: Duration::from_secs(1),
            exponential_backoff_random_factor: 0.2,
            exponential_backoff_max: Duration::from_secs(15),
            required_contact_point_nr: 2,
            resolve_timeout: Duration::from_secs(3),
            contact_with_all_contact_points: true,
            contact_point: ContactPointSettings::default(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct BootstrapFile {
    new_cluster_enabled: Option<bool>,
    service_name: Option<String>,
    service_namespace: Option<String>,
    effective_name: Option<String>,
    port_name: Option<String>,
    protocol: Option<String>,
    stable_margin: Option<String>,
    interval: Option<String>,
    exponential_backoff_random_factor: Option<f64>,
    exponential_backoff_max: Option<String>,
    required_contact_point_nr: Option<usize>,
    resolve_timeout: Option<String>,
    contact_with_all_contact_points: Option<bool>,
    contact_point: Option<ContactPointFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ContactPointFile {
    fallback_port: Option<u16>,
    filter_on_fallback_port: Option<bool>,
    probing_failure_timeout: Option<String>,
    probe_interval: Option<String>,
    probe_interval_jitter: Option<f64>,
}

fn duration(name: &str, text: &str) -> Result<Duration, SettingsError> {
    crate::settings::duration(&format!("bootstrap.{name}"), text)
}

/// Empty text means "not set".
fn text(v: String) -> Option<String> {
    let v = v.trim().to_string();
    (!v.is_empty()).then_some(v)
}

impl BootstrapSettings {
    /// Settings from the `[bootstrap]` table of a TOML file (other tables
    /// are ignored).
    pub fn from_file(path: &Path) -> Result<Self, SettingsError> {
        crate::settings::read_settings_file(path, Self::from_toml)
    }

    /// Settings from the `[bootstrap]` table of TOML text, on top of the
    /// defaults.
    ///
    /// ```
    /// use std::time::Duration;
    /// use troupe_cluster::bootstrap::BootstrapSettings;
    ///
    /// let s = BootstrapSettings::from_toml(r#"
    ///     [bootstrap]
    ///     required-contact-point-nr = 5
    ///     new-cluster-enabled = false
    ///     [bootstrap.contact-point]
    ///     probe-interval = "500ms"
    /// "#).unwrap();
    /// assert_eq!(s.required_contact_point_nr, 5);
    /// assert!(!s.new_cluster_enabled);
    /// assert_eq!(s.contact_point.probe_interval, Duration::from_millis(500));
    /// assert_eq!(s.stable_margin, Duration::from_secs(5));
    /// let e = BootstrapSettings::from_toml("[bootstrap]\nstable-margin = \"soon\"").unwrap_err();
    /// assert!(e.0.contains("bootstrap.stable-margin"), "{e}");
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, SettingsError> {
        let mut s = BootstrapSettings::default();
        if let Some(file) = crate::settings::settings_table::<BootstrapFile>(text, "bootstrap")? {
            s.apply(file)?;
        }
        s.validate()?;
        Ok(s)
    }

    fn apply(&mut self, f: BootstrapFile) -> Result<(), SettingsError> {
        if let Some(v) = f.new_cluster_enabled {
            self.new_cluster_enabled = v;
        }
        if let Some(v) = f.service_name {
            self.service_name = text(v);
        }
        if let Some(v) = f.service_namespace {
            self.service_namespace = text(v);
        }
        if let Some(v) = f.effective_name {
            self.effective_name = text(v);
        }
        if let Some(v) = f.port_name {
            self.port_name = text(v);
        }
        if let Some(v) = f.protocol {
            self.protocol = text(v);
        }
        if let Some(v) = f.stable_margin {
            self.stable_margin = duration("stable-margin", &v)?;
        }
        if let Some(v) = f.interval {
            self.interval = duration("interval", &v)?;
        }
        if let Some(v) = f.exponential_backoff_random_factor {
            self.exponential_backoff_random_factor = v;
        }
        if let Some(v) = f.exponential_backoff_max {
            self.exponential_backoff_max = duration("exponential-backoff-max", &v)?;
        }
        if let Some(v) = f.required_contact_point_nr {
            self.required_contact_point_nr = v;
        }
        if let Some(v) = f.resolve_timeout {
            self.resolve_timeout = duration("resolve-timeout", &v)?;
        }
        if let Some(v) = f.contact_with_all_contact_points {
            self.contact_with_all_contact_points = v;
        }
        if let Some(c) = f.contact_point {
            let p = &mut self.contact_point;
            if let Some(v) = c.fallback_port {
                p.fallback_port = (v != 0).then_some(v);
            }
            if let Some(v) = c.filter_on_fallback_port {
                p.filter_on_fallback_port = v;
            }
            if let Some(v) = c.probing_failure_timeout {
                p.probing_failure_timeout = duration("contact-point.probing-failure-timeout", &v)?;
            }
            if let Some(v) = c.probe_interval {
                p.probe_interval = duration("contact-point.probe-interval", &v)?;
            }
            if let Some(v) = c.probe_interval_jitter {
                p.probe_interval_jitter = v;
            }
        }
        Ok(())
    }

    /// Applies `TROUPE_BOOTSTRAP_*` variables: `TROUPE_BOOTSTRAP_` and a
    /// key of the table in upper snake case (`TROUPE_BOOTSTRAP_SERVICE_NAME`,
    /// `TROUPE_BOOTSTRAP_REQUIRED_CONTACT_POINT_NR`,
    /// `TROUPE_BOOTSTRAP_NEW_CLUSTER_ENABLED`,
    /// `TROUPE_BOOTSTRAP_CONTACT_POINT_PROBE_INTERVAL`, ...).
    pub fn with_env(self) -> Result<Self, SettingsError> {
        self.with_vars(std::env::vars())
    }

    /// As [`with_env`](Self::with_env), from the given variables.
    ///
    /// ```
    /// use troupe_cluster::bootstrap::BootstrapSettings;
    ///
    /// let s = BootstrapSettings::default().with_vars([
    ///     ("TROUPE_BOOTSTRAP_SERVICE_NAME".to_string(), "shop".to_string()),
    ///     ("TROUPE_BOOTSTRAP_CONTACT_POINT_PROBE_INTERVAL".to_string(), "2s".to_string()),
    /// ]).unwrap();
    /// assert_eq!(s.service_name.as_deref(), Some("shop"));
    /// assert_eq!(s.contact_point.probe_interval.as_secs(), 2);
    /// ```
    pub fn with_vars(
        mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, SettingsError> {
        let mut f = BootstrapFile::default();
        let mut c = ContactPointFile::default();
        for (k, v) in vars {
            let Some(key) = k.strip_prefix("TROUPE_BOOTSTRAP_") else {
                continue;
            };
            let flag = |name: &str| match v.trim().to_ascii_lowercase().as_str() {
                "true" | "on" | "yes" | "1" => Ok(true),
                "false" | "off" | "no" | "0" => Ok(false),
                _ => Err(SettingsError(format!(
                    "{k}: `{v}` is not on or off (for bootstrap.{name})"
                ))),
            };
            let number = |name: &str| {
                v.trim().parse::<f64>().map_err(|_| {
                    SettingsError(format!("{k}: `{v}` is not a number (for bootstrap.{name})"))
                })
            };
            match key {
                "NEW_CLUSTER_ENABLED" => f.new_cluster_enabled = Some(flag("new-cluster-enabled")?),
                "SERVICE_NAME" => f.service_name = Some(v),
                "SERVICE_NAMESPACE" => f.service_namespace = Some(v),
                "EFFECTIVE_NAME" => f.effective_name = Some(v),
                "PORT_NAME" => f.port_name = Some(v),
                "PROTOCOL" => f.protocol = Some(v),
                "STABLE_MARGIN" => f.stable_margin = Some(v),
                "INTERVAL" => f.interval = Some(v),
                "EXPONENTIAL_BACKOFF_RANDOM_FACTOR" => {
                    f.exponential_backoff_random_factor =
                        Some(number("exponential-backoff-random-factor")?)
                }
                "EXPONENTIAL_BACKOFF_MAX" => f.exponential_backoff_max = Some(v),
                "REQUIRED_CONTACT_POINT_NR" => {
                    f.required_contact_point_nr = Some(v.trim().parse().map_err(|_| {
                        SettingsError(format!(
                            "{k}: `{v}` is not a count (for bootstrap.required-contact-point-nr)"
                        ))
                    })?)
                }
                "RESOLVE_TIMEOUT" => f.resolve_timeout = Some(v),
                "CONTACT_WITH_ALL_CONTACT_POINTS" => {
                    f.contact_with_all_contact_points =
                        Some(flag("contact-with-all-contact-points")?)
                }
                "CONTACT_POINT_FALLBACK_PORT" => {
                    c.fallback_port = Some(v.trim().parse().map_err(|_| {
                        SettingsError(format!(
                            "{k}: `{v}` is not a port (for bootstrap.contact-point.fallback-port)"
                        ))
                    })?)
                }
                "CONTACT_POINT_FILTER_ON_FALLBACK_PORT" => {
                    c.filter_on_fallback_port = Some(flag("contact-point.filter-on-fallback-port")?)
                }
                "CONTACT_POINT_PROBING_FAILURE_TIMEOUT" => c.probing_failure_timeout = Some(v),
                "CONTACT_POINT_PROBE_INTERVAL" => c.probe_interval = Some(v),
                "CONTACT_POINT_PROBE_INTERVAL_JITTER" => {
                    c.probe_interval_jitter = Some(number("contact-point.probe-interval-jitter")?)
                }
                other => {
                    return Err(SettingsError(format!(
                        "{k}: no bootstrap setting is named `{}`",
                        other.to_ascii_lowercase().replace('_', "-")
                    )))
                }
            }
        }
        f.contact_point = Some(c);
        self.apply(f)?;
        self.validate()?;
        Ok(self)
    }

    /// Checks ranges.
    pub fn validate(&self) -> Result<(), SettingsError> {
        let bad = |m: String| Err(SettingsError(m));
        for (name, d) in [
            ("interval", self.interval),
            ("exponential-backoff-max", self.exponential_backoff_max),
            ("resolve-timeout", self.resolve_timeout),
            (
                "contact-point.probing-failure-timeout",
                self.contact_point.probing_failure_timeout,
            ),
            (
                "contact-point.probe-interval",
                self.contact_point.probe_interval,
            ),
        ] {
            if d.is_zero() {
                return bad(format!("bootstrap.{name} must be more than zero"));
            }
        }
        if self.required_contact_point_nr == 0 {
            return bad("bootstrap.required-contact-point-nr must be at least 1".into());
        }
        for (name, v) in [
            (
                "exponential-backoff-random-factor",
                self.exponential_backoff_random_factor,
            ),
            (
                "contact-point.probe-interval-jitter",
                self.contact_point.probe_interval_jitter,
            ),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return bad(format!("bootstrap.{name} must be between 0 and 1, not {v}"));
            }
        }
        Ok(())
    }

    /// The name to look up: `effective-name` if set, else the service name
    /// (or `default_name`, the actor system's name) and the namespace.
    ///
    /// ```
    /// use troupe_cluster::bootstrap::BootstrapSettings;
    ///
    /// let mut s = BootstrapSettings::default();
    /// assert_eq!(s.effective_name("shop"), "shop");
    /// s.service_namespace = Some("default.svc.cluster.local".into());
    /// assert_eq!(s.effective_name("shop"), "shop.default.svc.cluster.local");
    /// ```
    pub fn effective_name(&self, default_name: &str) -> String {
        if let Some(name) = &self.effective_name {
            return name.clone();
        }
        let name = self.service_name.as_deref().unwrap_or(default_name);
        match &self.service_namespace {
            Some(ns) => format!("{name}.{ns}"),
            None => name.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_akkas() {
        let s = BootstrapSettings::default();
        assert!(s.new_cluster_enabled);
        assert_eq!(s.required_contact_point_nr, 2);
        assert_eq!(s.stable_margin, Duration::from_secs(5));
        assert_eq!(s.interval, Duration::from_secs(1));
        assert_eq!(s.exponential_backoff_max, Duration::from_secs(15));
        assert_eq!(s.contact_point.probe_interval, Duration::from_secs(1));
        assert_eq!(
            s.contact_point.probing_failure_timeout,
            Duration::from_secs(3)
        );
        assert_eq!(s.protocol.as_deref(), Some("tcp"));
        s.validate().unwrap();
    }

    #[test]
    fn bad_keys_and_values_are_named() {
        let e =
            BootstrapSettings::from_toml("[bootstrap]\nrequired-contact-points = 3").unwrap_err();
        assert!(e.0.contains("required-contact-points"), "{e}");
        let e = BootstrapSettings::from_toml("[bootstrap.contact-point]\nprobe-interval = \"0s\"")
            .unwrap_err();
        assert!(e.0.contains("contact-point.probe-interval"), "{e}");
        let e = BootstrapSettings::default()
            .with_vars([("TROUPE_BOOTSTRAP_STABLE_MARGN".into(), "1s".into())])
            .unwrap_err();
        assert!(e.0.contains("TROUPE_BOOTSTRAP_STABLE_MARGN"), "{e}");
        let e = BootstrapSettings::default()
            .with_vars([(
                "TROUPE_BOOTSTRAP_NEW_CLUSTER_ENABLED".into(),
                "maybe".into(),
            )])
            .unwrap_err();
        assert!(e.0.contains("new-cluster-enabled"), "{e}");
    }

    #[test]
    fn the_deployment_settings_are_valid() {
        use crate::discovery::{DiscoveryMethod, DiscoverySettings};
        use crate::ClusterSettings;
        let file = include_str!("../../../deploy/troupe.toml");
        let cluster = ClusterSettings::from_toml(file).unwrap();
        assert_eq!(
            cluster.shutdown_after_unsuccessful_join_seed_nodes,
            Some(Duration::from_secs(40))
        );
        let discovery = DiscoverySettings::from_toml(file).unwrap();
        assert_eq!(discovery.method, Some(DiscoveryMethod::Dns));
        let bootstrap = BootstrapSettings::from_toml(file).unwrap();
        assert_eq!(
            bootstrap.effective_name("troupe"),
            "troupe-node.default.svc.cluster.local"
        );
        assert_eq!(bootstrap.required_contact_point_nr, 3);
        // The TROUPE_* variables of the Kubernetes manifest are known
        // settings with valid values (values that Kubernetes expands are
        // given a sample).
        let manifest = include_str!("../../../deploy/kubernetes/troupe-node.yaml");
        let mut vars = Vec::new();
        let mut lines = manifest.lines().map(str::trim);
        while let Some(line) = lines.next() {
            let Some(name) = line.strip_prefix("- name: TROUPE_") else {
                continue;
            };
            let Some(value) = lines.next().and_then(|l| l.strip_prefix("value: ")) else {
                continue; // from a secret
            };
            let value = value
                .trim_matches('"')
                .replace("$(POD_NAMESPACE)", "default");
            vars.push((format!("TROUPE_{name}"), value));
        }
        assert!(vars.len() >= 5, "{vars:?}");
        let cluster = ClusterSettings::default().with_vars(vars.clone()).unwrap();
        assert!(cluster
            .shutdown_after_unsuccessful_join_seed_nodes
            .is_some());
        let discovery = DiscoverySettings::default()
            .with_vars(vars.clone())
            .unwrap();
        assert_eq!(discovery.method, Some(DiscoveryMethod::Dns));
        let bootstrap = BootstrapSettings::default().with_vars(vars).unwrap();
        assert_eq!(
            bootstrap.effective_name("troupe"),
            "troupe-node.default.svc.cluster.local"
        );
    }
}
