//! Service discovery: from a service name to the hosts (and ports) that
//! offer it, behind one trait, [`ServiceDiscovery`] (Akka Discovery's
//! `ServiceDiscovery`). Cluster bootstrap uses it to find the contact
//! points of the nodes that should form one cluster.
//!
//! | method | what it does |
//! | --- | --- |
//! | [`ConfigServiceDiscovery`] (`config`) | a static list of endpoints per service name, from the settings |
//! | [`DnsServiceDiscovery`] (`dns`) | A/AAAA records of the service name, or SRV records of `_<port-name>._<protocol>.<service-name>` when the lookup has both |
//! | [`AggregateServiceDiscovery`] (`aggregate`) | several methods in order: the first that answers with targets wins |
//!
//! [`DiscoverySettings`] reads the `[discovery]` table of a settings file
//! (and `TROUPE_DISCOVERY_*` variables) and builds the configured method.
//!
//! ```
//! use std::time::Duration;
//! use troupe_cluster::discovery::{DiscoverySettings, Lookup};
//!
//! let settings = DiscoverySettings::from_toml(r#"
//!     [discovery]
//!     method = "config"
//!     [discovery.config.services.shop]
//!     endpoints = [{ host = "10.0.0.1", port = 8558 }, { host = "10.0.0.2", port = 8558 }]
//! "#).unwrap();
//! let discovery = settings.build().unwrap();
//! let resolved = troupe_core::rt::block_on(
//!     discovery.lookup(Lookup::new("shop"), Duration::from_secs(3)),
//! ).unwrap();
//! assert_eq!(resolved.targets.len(), 2);
//! assert_eq!(resolved.targets[0].port, Some(8558));
//! ```

mod aggregate;
mod config;
mod dns;
mod resolv_conf;
mod settings;

pub use aggregate::AggregateServiceDiscovery;
pub use config::ConfigServiceDiscovery;
pub use dns::{DnsServiceDiscovery, NameServers};
pub use settings::{DiscoveryMethod, DiscoverySettings};

use std::fmt;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::time::Duration;

/// What to look up: a service name, and optionally the name of a port and
/// a protocol (both are needed for an SRV lookup).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lookup {
    /// The service name (for DNS, a domain name such as
    /// `shop.default.svc.cluster.local`).
    pub service_name: String,
    /// The port's name (`management`), or `None`.
    pub port_name: Option<String>,
    /// The protocol (`tcp`), or `None`.
    pub protocol: Option<String>,
}

impl Lookup {
    /// A lookup of `service_name` alone.
    pub fn new(service_name: impl Into<String>) -> Self {
        Lookup {
            service_name: service_name.into(),
            port_name: None,
            protocol: None,
        }
    }

    /// This lookup with a port name.
    pub fn with_port_name(self, port_name: impl Into<String>) -> Self {
        Lookup {
            port_name: Some(port_name.into()),
            ..self
        }
    }

    /// This lookup with a protocol.
    pub fn with_protocol(self, protocol: impl Into<String>) -> Self {
        Lookup {
            protocol: Some(protocol.into()),
            ..self
        }
    }

    /// The SRV name `_<port-name>._<protocol>.<service-name>` when both a
    /// port name and a protocol are set.
    ///
    /// ```
    /// use troupe_cluster::discovery::Lookup;
    ///
    /// let l = Lookup::new("shop.local").with_port_name("management").with_protocol("tcp");
    /// assert_eq!(l.srv_name().as_deref(), Some("_management._tcp.shop.local"));
    /// assert_eq!(Lookup::new("shop.local").srv_name(), None);
    /// ```
    pub fn srv_name(&self) -> Option<String> {
        match (&self.port_name, &self.protocol) {
            (Some(port), Some(protocol)) => {
                Some(format!("_{port}._{protocol}.{}", self.service_name))
            }
            _ => None,
        }
    }
}

impl fmt::Display for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.service_name)?;
        if let Some(port) = &self.port_name {
            write!(f, " port {port}")?;
        }
        if let Some(protocol) = &self.protocol {
            write!(f, " protocol {protocol}")?;
        }
        Ok(())
    }
}

/// One instance of a service: a host, and its port and IP address when
/// the method knows them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResolvedTarget {
    /// A host name or an IP address (as text).
    pub host: String,
    /// The port, if the method gives one (SRV records and the `config`
    /// method do, A records do not).
    pub port: Option<u16>,
    /// The IP address, if known.
    pub address: Option<IpAddr>,
}

impl ResolvedTarget {
    /// A target on `host`, with `port` if given.
    pub fn new(host: impl Into<String>, port: Option<u16>) -> Self {
        ResolvedTarget {
            host: host.into(),
            port,
            address: None,
        }
    }
}

impl fmt::Display for ResolvedTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bracket = self.host.contains(':') && !self.host.starts_with('[');
        match (bracket, self.port) {
            (true, Some(p)) => write!(f, "[{}]:{p}", self.host),
            (false, Some(p)) => write!(f, "{}:{p}", self.host),
            (_, None) => f.write_str(&self.host),
        }
    }
}

/// The answer to a [`Lookup`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The name that was looked up.
    pub service_name: String,
    /// The instances found, in the order the method gives them (empty if
    /// none).
    pub targets: Vec<ResolvedTarget>,
}

/// Why a lookup failed. A lookup that finds nothing is not a failure: it
/// answers an empty [`Resolved`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DiscoveryError {
    /// No answer within the resolve timeout.
    Timeout {
        /// The method that did not answer.
        method: String,
        /// The timeout.
        after: Duration,
    },
    /// The name cannot be a DNS name.
    BadName {
        /// The name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The system has no DNS server (no `nameserver` line in
    /// `/etc/resolv.conf`), and none was configured.
    NoNameServer,
    /// A DNS server answered with an error code (other than "no such
    /// name", which is an empty answer).
    DnsServer {
        /// The server.
        server: String,
        /// The name queried.
        name: String,
        /// The response code (`ServFail`, `Refused`, ...).
        code: String,
    },
    /// Talking to a DNS server failed (socket error, or an answer that
    /// is not DNS).
    Io {
        /// The server.
        server: String,
        /// What went wrong.
        reason: String,
    },
    /// Every method of an aggregate failed (each with its error).
    AllMethodsFailed(Vec<(String, DiscoveryError)>),
}

impl fmt::Display for DiscoveryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DiscoveryError::Timeout { method, after } => {
                write!(
                    f,
                    "discovery method {method} did not answer within {after:?}"
                )
            }
            DiscoveryError::BadName { name, reason } => {
                write!(f, "`{name}` is not a valid DNS name: {reason}")
            }
            DiscoveryError::NoNameServer => f.write_str(
                "no DNS server: /etc/resolv.conf has no `nameserver` line; \
                 configure one ([discovery.dns] server = \"HOST:PORT\")",
            ),
            DiscoveryError::DnsServer { server, name, code } => {
                write!(f, "DNS server {server} answered {code} for {name}")
            }
            DiscoveryError::Io { server, reason } => {
                write!(f, "cannot query DNS server {server}: {reason}")
            }
            DiscoveryError::AllMethodsFailed(failures) => {
                f.write_str("every discovery method failed: ")?;
                for (i, (method, e)) in failures.iter().enumerate() {
                    if i > 0 {
                        f.write_str("; ")?;
                    }
                    write!(f, "{method}: {e}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for DiscoveryError {}

/// The answer of [`ServiceDiscovery::lookup`], to be awaited.
pub type LookupFuture = Pin<Box<dyn Future<Output = Result<Resolved, DiscoveryError>> + Send>>;

/// A service discovery method.
///
/// Implement it to plug another source of contact points (a cloud API, a
/// registry) into cluster bootstrap.
///
/// ```
/// use std::time::Duration;
/// use troupe_cluster::discovery::{Lookup, LookupFuture, Resolved, ResolvedTarget, ServiceDiscovery};
///
/// /// Every service is on this one host.
/// #[derive(Debug)]
/// struct OneHost;
///
/// impl ServiceDiscovery for OneHost {
///     fn method(&self) -> &str {
///         "one-host"
///     }
///     fn lookup(&self, lookup: Lookup, _timeout: Duration) -> LookupFuture {
///         Box::pin(async move {
///             Ok(Resolved {
///                 service_name: lookup.service_name,
///                 targets: vec![ResolvedTarget::new("10.1.2.3", Some(8558))],
///             })
///         })
///     }
/// }
/// let found = troupe_core::rt::block_on(OneHost.lookup(Lookup::new("x"), Duration::from_secs(1)));
/// assert_eq!(found.unwrap().targets[0].host, "10.1.2.3");
/// ```
pub trait ServiceDiscovery: fmt::Debug + Send + Sync {
    /// The method's name, for logs (`config`, `dns`, ...).
    fn method(&self) -> &str;

    /// Looks `lookup` up, answering within `resolve_timeout` (a method
    /// that cannot answers [`DiscoveryError::Timeout`]).
    fn lookup(&self, lookup: Lookup, resolve_timeout: Duration) -> LookupFuture;
}
