//! The `aggregate` method: several methods, tried in order.

use super::{DiscoveryError, Lookup, LookupFuture, ServiceDiscovery};
use std::sync::Arc;
use std::time::Duration;

/// Tries its methods in order: the answer of the first that finds any
/// target wins; one that fails or finds nothing passes the lookup on to
/// the next (Akka's `aggregate` method). Each method gets the whole
/// resolve timeout. The last method's answer is the aggregate's, even if
/// empty; if every method failed, the error lists each failure.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use troupe_cluster::discovery::*;
///
/// let empty = Arc::new(ConfigServiceDiscovery::default());
/// let static_list = Arc::new(ConfigServiceDiscovery::new([(
///     "shop".to_string(),
///     vec![ResolvedTarget::new("127.0.0.1", Some(8558))],
/// )]));
/// let d = AggregateServiceDiscovery::new(vec![empty, static_list]);
/// let r = troupe_core::rt::block_on(d.lookup(Lookup::new("shop"), Duration::from_secs(1))).unwrap();
/// assert_eq!(r.targets.len(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct AggregateServiceDiscovery {
    methods: Vec<Arc<dyn ServiceDiscovery>>,
}

impl AggregateServiceDiscovery {
    /// An aggregate of `methods`, tried in this order.
    pub fn new(methods: Vec<Arc<dyn ServiceDiscovery>>) -> Self {
        AggregateServiceDiscovery { methods }
    }
}

impl ServiceDiscovery for AggregateServiceDiscovery {
    fn method(&self) -> &str {
        "aggregate"
    }

    fn lookup(&self, lookup: Lookup, resolve_timeout: Duration) -> LookupFuture {
        let methods = self.methods.clone();
        Box::pin(async move {
            let mut failures = Vec::new();
            let count = methods.len();
            for (i, method) in methods.iter().enumerate() {
                let last = i + 1 == count;
                match method.lookup(lookup.clone(), resolve_timeout).await {
                    Ok(resolved) if !resolved.targets.is_empty() || last => return Ok(resolved),
                    Ok(_) => tracing::debug!(
                        "discovery method {} found nothing for {lookup}; trying the next",
                        method.method()
                    ),
                    Err(e) => {
                        tracing::warn!(
                            "discovery method {} failed for {lookup}: {e}{}",
                            method.method(),
                            if last { "" } else { "; trying the next" }
                        );
                        failures.push((method.method().to_string(), e));
                    }
                }
            }
            Err(DiscoveryError::AllMethodsFailed(failures))
        })
    }
}
