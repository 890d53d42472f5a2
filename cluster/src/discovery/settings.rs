//! The `[discovery]` table of the settings file, `TROUPE_DISCOVERY_*`
//! variables, and building the configured method.

use super::{
    AggregateServiceDiscovery, ConfigServiceDiscovery, DnsServiceDiscovery, ResolvedTarget,
    ServiceDiscovery,
};
use crate::settings::SettingsError;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

/// A discovery method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DiscoveryMethod {
    /// [`ConfigServiceDiscovery`]: the endpoints listed in the settings.
    Config,
    /// [`DnsServiceDiscovery`]: A/AAAA or SRV records.
    Dns,
    /// [`AggregateServiceDiscovery`] of
    /// [`aggregate_methods`](DiscoverySettings::aggregate_methods).
    Aggregate,
}

impl fmt::Display for DiscoveryMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DiscoveryMethod::Config => "config",
            DiscoveryMethod::Dns => "dns",
            DiscoveryMethod::Aggregate => "aggregate",
        })
    }
}

impl FromStr for DiscoveryMethod {
    type Err = SettingsError;

    fn from_str(s: &str) -> Result<Self, SettingsError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "config" => Ok(DiscoveryMethod::Config),
            "dns" => Ok(DiscoveryMethod::Dns),
            "aggregate" => Ok(DiscoveryMethod::Aggregate),
            other => Err(SettingsError(format!(
                "unknown discovery method `{other}`; use config, dns or aggregate"
            ))),
        }
    }
}

/// Settings of service discovery (the `[discovery]` table).
///
/// ```toml
/// [discovery]
/// method = "aggregate"            # config, dns or aggregate
///
/// [discovery.aggregate]
/// discovery-methods = ["config", "dns"]
///
/// [discovery.dns]
/// server = "10.96.0.10:53"        # default: the system's (/etc/resolv.conf)
///
/// [discovery.config.services.shop]
/// endpoints = [{ host = "10.0.0.1", port = 8558 }, { host = "10.0.0.2", port = 8558 }]
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscoverySettings {
    /// The method; `None` when discovery is not configured.
    pub method: Option<DiscoveryMethod>,
    /// The methods of `aggregate`, in order (`discovery-methods`).
    pub aggregate_methods: Vec<DiscoveryMethod>,
    /// The services of `config`, with their endpoints.
    pub services: BTreeMap<String, Vec<ResolvedTarget>>,
    /// The DNS server of `dns` (`server`); `None` for the system's.
    pub dns_server: Option<SocketAddr>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DiscoveryFile {
    method: Option<String>,
    aggregate: Option<AggregateFile>,
    dns: Option<DnsFile>,
    config: Option<ConfigFile>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct AggregateFile {
    discovery_methods: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct DnsFile {
    server: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ConfigFile {
    services: Option<BTreeMap<String, ServiceFile>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ServiceFile {
    endpoints: Vec<EndpointFile>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct EndpointFile {
    host: String,
    port: Option<u16>,
}

impl DiscoverySettings {
    /// Parses a DNS server's address: `IP:PORT`, `[IPv6]:PORT`, or an IP
    /// alone (port 53).
    ///
    /// ```
    /// use troupe_cluster::discovery::DiscoverySettings;
    ///
    /// assert_eq!(DiscoverySettings::parse_dns_server("127.0.0.1:5353").unwrap().port(), 5353);
    /// assert_eq!(DiscoverySettings::parse_dns_server("10.96.0.10").unwrap().port(), 53);
    /// assert!(DiscoverySettings::parse_dns_server("dns.local:53").is_err());
    /// ```
    pub fn parse_dns_server(text: &str) -> Result<SocketAddr, SettingsError> {
        let text = text.trim();
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(addr);
        }
        if let Ok(ip) = text.trim_matches(['[', ']']).parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, 53));
        }
        Err(SettingsError(format!(
            "`{text}` is not the address of a DNS server: write IP:PORT (e.g. 10.96.0.10:53); \
             a host name cannot be used, since it would need DNS itself"
        )))
    }

    /// Settings from the `[discovery]` table of a TOML file (other tables
    /// are ignored).
    pub fn from_file(path: &Path) -> Result<Self, SettingsError> {
        crate::settings::read_settings_file(path, Self::from_toml)
    }

    /// Settings from the `[discovery]` table of TOML text (other tables
    /// are ignored); the defaults (no discovery) without one.
    pub fn from_toml(text: &str) -> Result<Self, SettingsError> {
        let mut s = DiscoverySettings::default();
        if let Some(file) = crate::settings::settings_table::<DiscoveryFile>(text, "discovery")? {
            s.apply(file)?;
        }
        s.validate()?;
        Ok(s)
    }

    fn apply(&mut self, f: DiscoveryFile) -> Result<(), SettingsError> {
        if let Some(m) = f.method {
            self.method = Some(
                m.parse()
                    .map_err(|e: SettingsError| SettingsError(format!("discovery.method: {e}")))?,
            );
        }
        if let Some(methods) = f.aggregate.and_then(|a| a.discovery_methods) {
            self.aggregate_methods = methods
                .iter()
                .filter(|m| !m.trim().is_empty())
                .map(|m| {
                    m.parse().map_err(|e: SettingsError| {
                        SettingsError(format!("discovery.aggregate.discovery-methods: {e}"))
                    })
                })
                .collect::<Result<_, _>>()?;
        }
        if let Some(server) = f.dns.and_then(|d| d.server) {
            self.dns_server = if server.trim().is_empty() {
                None
            } else {
                Some(
                    Self::parse_dns_server(&server)
                        .map_err(|e| SettingsError(format!("discovery.dns.server: {e}")))?,
                )
            };
        }
        for (name, service) in f.config.and_then(|c| c.services).unwrap_or_default() {
            let endpoints = service
                .endpoints
                .into_iter()
                .map(|e| ResolvedTarget::new(e.host.trim(), e.port))
                .collect();
            self.services.insert(name, endpoints);
        }
        Ok(())
    }

    /// Applies `TROUPE_DISCOVERY_METHOD`, `TROUPE_DISCOVERY_DNS_SERVER` and
    /// `TROUPE_DISCOVERY_AGGREGATE_DISCOVERY_METHODS` (comma-separated).
    pub fn with_env(self) -> Result<Self, SettingsError> {
        self.with_vars(std::env::vars())
    }

    /// As [`with_env`](Self::with_env), from the given variables.
    pub fn with_vars(
        mut self,
        vars: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, SettingsError> {
        let mut file = DiscoveryFile::default();
        for (k, v) in vars {
            match k.as_str() {
                "TROUPE_DISCOVERY_METHOD" => file.method = Some(v),
                "TROUPE_DISCOVERY_DNS_SERVER" => file.dns = Some(DnsFile { server: Some(v) }),
                "TROUPE_DISCOVERY_AGGREGATE_DISCOVERY_METHODS" => {
                    file.aggregate = Some(AggregateFile {
                        discovery_methods: Some(
                            v.split(',').map(|s| s.trim().to_string()).collect(),
                        ),
                    })
                }
                _ => {}
            }
        }
        self.apply(file)
            .map_err(|e| SettingsError(format!("{e} (from a TROUPE_DISCOVERY_* variable)")))?;
        self.validate()?;
        Ok(self)
    }

    /// Checks that the method can be built: `aggregate` needs methods
    /// (and none of them `aggregate`).
    pub fn validate(&self) -> Result<(), SettingsError> {
        if self.method == Some(DiscoveryMethod::Aggregate) {
            if self.aggregate_methods.is_empty() {
                return Err(SettingsError(
                    "discovery.aggregate.discovery-methods: the aggregate method needs at least one \
                     method (e.g. [\"config\", \"dns\"])"
                        .into(),
                ));
            }
            if self.aggregate_methods.contains(&DiscoveryMethod::Aggregate) {
                return Err(SettingsError(
                    "discovery.aggregate.discovery-methods: aggregate cannot contain itself".into(),
                ));
            }
        }
        Ok(())
    }

    /// Builds the configured method; `None` if no method is configured.
    pub fn build(&self) -> Option<Arc<dyn ServiceDiscovery>> {
        let method = self.method?;
        Some(self.build_method(method))
    }

    fn build_method(&self, method: DiscoveryMethod) -> Arc<dyn ServiceDiscovery> {
        match method {
            DiscoveryMethod::Config => Arc::new(ConfigServiceDiscovery::new(self.services.clone())),
            DiscoveryMethod::Dns => Arc::new(match self.dns_server {
                Some(server) => DnsServiceDiscovery::with_server(server),
                None => DnsServiceDiscovery::system(),
            }),
            DiscoveryMethod::Aggregate => Arc::new(AggregateServiceDiscovery::new(
                self.aggregate_methods
                    .iter()
                    .filter(|m| **m != DiscoveryMethod::Aggregate)
                    .map(|m| self.build_method(*m))
                    .collect(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_and_env() {
        let s = DiscoverySettings::from_toml(
            r#"
            gossip-interval = "1s"
            [discovery]
            method = "aggregate"
            [discovery.aggregate]
            discovery-methods = ["config", "dns"]
            [discovery.dns]
            server = "127.0.0.1:5353"
            [discovery.config.services.shop]
            endpoints = [{ host = "h1", port = 1 }, { host = "h2" }]
            "#,
        )
        .unwrap();
        assert_eq!(s.method, Some(DiscoveryMethod::Aggregate));
        assert_eq!(
            s.aggregate_methods,
            vec![DiscoveryMethod::Config, DiscoveryMethod::Dns]
        );
        assert_eq!(s.dns_server, Some("127.0.0.1:5353".parse().unwrap()));
        assert_eq!(
            s.services["shop"],
            vec![
                ResolvedTarget::new("h1", Some(1)),
                ResolvedTarget::new("h2", None)
            ]
        );
        assert_eq!(s.build().unwrap().method(), "aggregate");
        let s = s
            .with_vars([
                ("TROUPE_DISCOVERY_METHOD".to_string(), "dns".to_string()),
                (
                    "TROUPE_DISCOVERY_DNS_SERVER".to_string(),
                    "10.0.0.1".to_string(),
                ),
            ])
            .unwrap();
        assert_eq!(s.method, Some(DiscoveryMethod::Dns));
        assert_eq!(s.dns_server, Some("10.0.0.1:53".parse().unwrap()));
        assert!(DiscoverySettings::default().build().is_none());
    }

    #[test]
    fn bad_values_name_the_key() {
        let e = DiscoverySettings::from_toml("[discovery]\nmethod = \"consul\"").unwrap_err();
        assert!(
            e.0.contains("discovery.method") && e.0.contains("consul"),
            "{e}"
        );
        let e = DiscoverySettings::from_toml("[discovery]\nmethods = \"dns\"").unwrap_err();
        assert!(e.0.contains("methods"), "{e}");
        let e = DiscoverySettings::from_toml("[discovery.dns]\nserver = \"ns.local\"").unwrap_err();
        assert!(e.0.contains("discovery.dns.server"), "{e}");
        let e = DiscoverySettings::from_toml("[discovery]\nmethod = \"aggregate\"").unwrap_err();
        assert!(e.0.contains("discovery-methods"), "{e}");
        let e = DiscoverySettings::default()
            .with_vars([("TROUPE_DISCOVERY_METHOD".to_string(), "x".to_string())])
            .unwrap_err();
        assert!(e.0.contains("TROUPE_DISCOVERY_"), "{e}");
    }
}
