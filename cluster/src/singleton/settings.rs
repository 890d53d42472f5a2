//! Settings of the cluster singleton and its proxy (Akka's defaults).

use std::time::Duration;

/// Settings of a singleton manager and proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSingletonSettings {
    /// Only members with this role host (and are looked at for) the singleton.
    pub role: Option<String>,
    /// How often the new oldest repeats its hand-over request. Default 1 s.
    pub hand_over_retry_interval: Duration,
    /// Messages a proxy buffers while the singleton is unknown or moving;
    /// beyond it the oldest buffered message is dropped (logged and
    /// counted). Default 1000.
    pub buffer_size: usize,
    /// How often a proxy looks for the singleton while it does not know
    /// where it is. Default 1 s.
    pub identify_interval: Duration,
}

impl Default for ClusterSingletonSettings {
    fn default() -> Self {
        ClusterSingletonSettings {
            role: None,
            hand_over_retry_interval: Duration::from_secs(1),
            buffer_size: 1000,
            identify_interval: Duration::from_secs(1),
        }
    }
}
