//! Settings of the remoting layer.

use crate::error::SystemError;
use crate::remote::failure_detector::PhiAccrualSettings;
use std::time::Duration;

/// The secret used when none is configured. Fine on a laptop, never in
/// production: anyone who knows it can join the conversation.
pub const INSECURE_DEVELOPMENT_SECRET: &str = "troupe-insecure-development-secret";

/// How a system takes part in remoting: where it listens, how peers prove
/// who they are, and the limits of its queues and frames. Defaults follow
/// Akka's Artery where it has one.
///
/// ```
/// use troupe_core::remote::RemoteSettings;
///
/// let settings = RemoteSettings::new("127.0.0.1:0").with_secret("s3cret");
/// assert_eq!(settings.bind, "127.0.0.1:0");
/// ```
#[derive(Debug, Clone)]
pub struct RemoteSettings {
    /// `HOST:PORT` to listen on; port 0 lets the OS choose (read the bound
    /// address with [`Remoting::address`](crate::remote::Remoting::address)).
    pub bind: String,
    /// The host name peers use to reach this system, when it differs from
    /// the bind host (behind NAT, or when binding `0.0.0.0`).
    pub canonical_host: Option<String>,
    /// The shared cluster secret that authenticates every connection (an
    /// HMAC challenge both ways; it never crosses the wire). `None` uses
    /// [`INSECURE_DEVELOPMENT_SECRET`] and logs a warning.
    pub secret: Option<String>,
    /// Largest frame accepted or sent; bigger messages are refused with a
    /// log line. Default 256 KiB (Akka's `maximum-frame-size`).
    pub max_frame_size: usize,
    /// Ordinary messages queued per peer while it is slow or not connected;
    /// beyond it a `tell` is refused with `TellError::MailboxFull` (the
    /// message handed back) and an ask fails with `AskError::MailboxFull`.
    /// Default 100,000.
    pub outbound_queue_size: usize,
    /// Control messages (system messages, heartbeats) queued per peer.
    /// Default 20,000 (Akka's `outbound-control-queue-size`).
    pub outbound_control_queue_size: usize,
    /// Time allowed for a handshake. Default 20 s.
    pub handshake_timeout: Duration,
    /// First delay before reconnecting to a peer; it doubles up to
    /// `reconnect_backoff_max`. Default 100 ms.
    pub reconnect_backoff_min: Duration,
    /// Longest delay between reconnection attempts. Default 5 s.
    pub reconnect_backoff_max: Duration,
    /// How often unacknowledged system messages are sent again. Default 1 s.
    pub system_message_resend_interval: Duration,
    /// A peer that has not acknowledged a system message for this long is
    /// quarantined. Default 6 hours (Akka's `give-up-system-message-after`).
    pub give_up_system_message_after: Duration,
    /// Heartbeat interval of remote death watch. Default 1 s.
    pub watch_heartbeat_interval: Duration,
    /// The failure detector of remote death watch. Default threshold 10 and
    /// acceptable pause 10 s (Akka's `watch-failure-detector`).
    pub watch_failure_detector: PhiAccrualSettings,
    /// Enables the fault-injection switch ([`FaultInjector`](crate::remote::FaultInjector)),
    /// for tests. Default off.
    pub fault_injection: bool,
    /// At shutdown, how long the writers may take to send what is already
    /// queued (a last gossip, a reply) before their connections close.
    /// Default 1 s (Akka's `shutdown-flush-timeout`).
    pub shutdown_flush_timeout: Duration,
}

impl RemoteSettings {
    /// Settings that listen on `bind` (`HOST:PORT`), defaults otherwise.
    pub fn new(bind: impl Into<String>) -> Self {
        RemoteSettings {
            bind: bind.into(),
            canonical_host: None,
            secret: None,
            max_frame_size: 256 * 1024,
            outbound_queue_size: 100_000,
            outbound_control_queue_size: 20_000,
            handshake_timeout: Duration::from_secs(20),
            reconnect_backoff_min: Duration::from_millis(100),
            reconnect_backoff_max: Duration::from_secs(5),
            system_message_resend_interval: Duration::from_secs(1),
            give_up_system_message_after: Duration::from_secs(6 * 3600),
            watch_heartbeat_interval: Duration::from_secs(1),
            watch_failure_detector: PhiAccrualSettings {
                threshold: 10.0,
                acceptable_heartbeat_pause: Duration::from_secs(10),
                ..PhiAccrualSettings::default()
            },
            fault_injection: false,
            shutdown_flush_timeout: Duration::from_secs(1),
        }
    }

    /// Sets the shared secret.
    pub fn with_secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Enables the fault-injection switch.
    pub fn with_fault_injection(mut self) -> Self {
        self.fault_injection = true;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), SystemError> {
        let bad = |m: String| Err(SystemError::InvalidSetting(m));
        if self.max_frame_size < 1024 {
            return bad(format!(
                "remote max_frame_size must be at least 1024 bytes, not {}",
                self.max_frame_size
            ));
        }
        if self.outbound_queue_size == 0 || self.outbound_control_queue_size == 0 {
            return bad("remote outbound queue sizes must be at least 1".into());
        }
        if self.secret.as_deref() == Some("") {
            return bad("the remote secret must not be empty".into());
        }
        for (name, d) in [
            ("handshake_timeout", self.handshake_timeout),
            ("reconnect_backoff_min", self.reconnect_backoff_min),
            (
                "system_message_resend_interval",
                self.system_message_resend_interval,
            ),
            (
                "give_up_system_message_after",
                self.give_up_system_message_after,
            ),
            ("watch_heartbeat_interval", self.watch_heartbeat_interval),
        ] {
            if d.is_zero() {
                return bad(format!("remote {name} must be more than zero"));
            }
        }
        if self.reconnect_backoff_max < self.reconnect_backoff_min {
            return bad(
                "remote reconnect_backoff_max must not be below reconnect_backoff_min".into(),
            );
        }
        self.watch_failure_detector
            .validate()
            .map_err(|e| SystemError::InvalidSetting(format!("remote watch_failure_detector: {e}")))
    }
}
