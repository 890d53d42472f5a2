//! Settings of the management HTTP server, and why it could not start.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// The answer of an application route: an HTTP status and a JSON body.
pub type RouteAnswer = Pin<Box<dyn Future<Output = (u16, String)> + Send>>;

/// Application routes served next to the cluster routes: given the method
/// and the path, `Some` answer if the route is theirs. Read-only mode does
/// not apply to them.
pub type ExtraRoutes = Arc<dyn Fn(&str, &str) -> Option<RouteAnswer> + Send + Sync>;

/// Settings of the management HTTP server.
#[derive(Clone)]
pub struct ManagementSettings {
    /// The address to listen on, `HOST:PORT` (default `127.0.0.1:8558`,
    /// Akka Management's port). Port 0 lets the OS choose; see
    /// [`ManagementServer::local_addr`](super::ManagementServer::local_addr).
    pub bind: String,
    /// When true (the default), only `GET` routes are served and `POST`,
    /// `PUT` and `DELETE` answer 405 Method Not Allowed.
    pub read_only: bool,
    /// Application routes, tried before the cluster routes.
    pub extra_routes: Option<ExtraRoutes>,
}

impl fmt::Debug for ManagementSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagementSettings")
            .field("bind", &self.bind)
            .field("read_only", &self.read_only)
            .field("extra_routes", &self.extra_routes.is_some())
            .finish()
    }
}

impl Default for ManagementSettings {
    fn default() -> Self {
        ManagementSettings {
            bind: "127.0.0.1:8558".into(),
            read_only: true,
            extra_routes: None,
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

    /// These settings with application routes (see [`ExtraRoutes`]).
    pub fn with_extra_routes(self, routes: ExtraRoutes) -> Self {
        ManagementSettings {
            extra_routes: Some(routes),
            ..self
        }
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
