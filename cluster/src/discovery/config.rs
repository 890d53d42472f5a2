//! The `config` method: a static list of endpoints per service name.

use super::{Lookup, LookupFuture, Resolved, ResolvedTarget, ServiceDiscovery};
use std::collections::BTreeMap;
use std::time::Duration;

/// Service discovery from a fixed table of service names and their
/// endpoints (Akka's `config` method: `[discovery.config.services.NAME]`
/// with `endpoints = [{ host = "...", port = N }]`). A name not in the
/// table resolves to no targets. Port names and protocols are ignored.
///
/// ```
/// use std::time::Duration;
/// use troupe_cluster::discovery::{ConfigServiceDiscovery, Lookup, ResolvedTarget, ServiceDiscovery};
///
/// let d = ConfigServiceDiscovery::new([(
///     "shop".to_string(),
///     vec![ResolvedTarget::new("127.0.0.1", Some(8558))],
/// )]);
/// let r = troupe_core::rt::block_on(d.lookup(Lookup::new("shop"), Duration::from_secs(1))).unwrap();
/// assert_eq!(r.targets, vec![ResolvedTarget::new("127.0.0.1", Some(8558))]);
/// let r = troupe_core::rt::block_on(d.lookup(Lookup::new("other"), Duration::from_secs(1))).unwrap();
/// assert!(r.targets.is_empty());
/// ```
#[derive(Debug, Clone, Default)]
pub struct ConfigServiceDiscovery {
    services: BTreeMap<String, Vec<ResolvedTarget>>,
}

impl ConfigServiceDiscovery {
    /// Discovery from these services and their endpoints.
    pub fn new(services: impl IntoIterator<Item = (String, Vec<ResolvedTarget>)>) -> Self {
        ConfigServiceDiscovery {
            services: services.into_iter().collect(),
        }
    }

    /// The endpoints of `service_name` (none if it is not in the table).
    pub fn endpoints(&self, service_name: &str) -> &[ResolvedTarget] {
        self.services
            .get(service_name)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }
}

impl ServiceDiscovery for ConfigServiceDiscovery {
    fn method(&self) -> &str {
        "config"
    }

    fn lookup(&self, lookup: Lookup, _resolve_timeout: Duration) -> LookupFuture {
        let targets = self.endpoints(&lookup.service_name).to_vec();
        if targets.is_empty() {
            tracing::debug!(
                "config discovery: no endpoints for service {} (known: {:?})",
                lookup.service_name,
                self.services.keys().collect::<Vec<_>>()
            );
        }
        Box::pin(async move {
            Ok(Resolved {
                service_name: lookup.service_name,
                targets,
            })
        })
    }
}
