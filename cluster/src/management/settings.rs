//! Settings of the management HTTP server, and why it could not start.

use std::fmt;

/// Settings of the management HTTP server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagementSettings {
    /// The address to listen on, `HOST:PORT` (default `127.0.0.1:8558`,
    /// Akka Management's port). Port 0 lets the OS choose; see
    /// [`ManagementServer::local_addr`](super::ManagementServer::local_addr).
    pub bind: String,
    /// When true (the default), only `GET` routes are served and `POST`,
    /// `PUT` and `DELETE` answer 405 Method Not Allowed.
    pub read_only: bool,
}

impl Default for ManagementSettings {
    fn default() -> Self {
        ManagementSettings {
            bind: "127.0.0.1:8558".into(),
            read_only: true,
        }
    }
}

impl ManagementSettings {
    /// Read-only settings listening on `bind` (`HOST:PORT`).
    pub fn new(bind: impl Into<String>) -> Self {
        ManagementSettings {
            bind: bind.into(),
            ..ManagementSettings::default()
        }
    }

    /// These settings with `read_only` set: `false` enables the routes
    /// that join, leave and down members.
    pub fn with_read_only(self, read_only: bool) -> Self {
        ManagementSettings { read_only, ..self }
    }
}

/// Why the management HTTP server could not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagementError(pub String);

impl fmt::Display for ManagementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ManagementError {}
