//! Settings of the management HTTP server, its extension points
//! (application routes and readiness checks), and why it could not start.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// The answer of an application route: an HTTP status and a JSON body.
pub type RouteAnswer = Pin<Box<dyn Future<Output = (u16, String)> + Send>>;

/// Application routes served next to the cluster routes: given the
/// request, `Some` answer if the route is theirs, `None` to let the next
/// routes try. Read-only mode does not apply to them.
///
/// ```
/// use std::sync::Arc;
/// use troupe_cluster::management::{ExtraRoutes, RouteAnswer, RouteRequest};
///
/// // `POST /echo` with form field `text`: answers it back.
/// let echo: ExtraRoutes = Arc::new(|request: &RouteRequest| {
///     if request.path != "/echo" {
///         return None;
///     }
///     let answer = match (request.method.as_str(), request.form_field("text")) {
///         ("POST", Some(text)) => (200, serde_json::json!({ "text": text }).to_string()),
///         ("POST", None) => (400, r#"{"message":"missing form field `text`"}"#.to_string()),
///         _ => (405, r#"{"message":"use POST /echo"}"#.to_string()),
///     };
///     let answer: RouteAnswer = Box::pin(async move { answer });
///     Some(answer)
/// });
/// let request = RouteRequest::new("POST", "/echo").with_body("text=hello%20there");
/// let (status, body) = troupe_core::rt::block_on(echo(&request).unwrap());
/// assert_eq!((status, body.as_str()), (200, r#"{"text":"hello there"}"#));
/// assert!(echo(&RouteRequest::new("GET", "/elsewhere")).is_none());
/// ```
pub type ExtraRoutes = Arc<dyn Fn(&RouteRequest) -> Option<RouteAnswer> + Send + Sync>;

/// The outcome of a health check: `Err` says why the check fails.
pub type HealthCheckResult = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

/// A readiness check (Akka Management's health checks): called on every
/// `GET /ready`; ready when it answers `Ok(())` within the
/// [check timeout](ManagementSettings::health_check_timeout).
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use troupe_cluster::management::{HealthCheck, ManagementSettings};
///
/// let warmed_up = Arc::new(AtomicBool::new(false));
/// let flag = warmed_up.clone();
/// let check: HealthCheck = Arc::new(move || {
///     let ready = flag.load(Ordering::Relaxed);
///     Box::pin(async move {
///         if ready { Ok(()) } else { Err("the caches are still loading".to_string()) }
///     })
/// });
/// let settings = ManagementSettings::new("127.0.0.1:0").with_readiness_check("caches", check);
/// assert_eq!(settings.readiness_checks[0].0, "caches");
/// ```
pub type HealthCheck = Arc<dyn Fn() -> HealthCheckResult + Send + Sync>;

/// A request, as an application route ([`ExtraRoutes`]) sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteRequest {
    /// The method, upper case (`GET`, `POST`, ...).
    pub method: String,
    /// The path, still percent-encoded (`/counters/a%20b`), without the
    /// query string.
    pub path: String,
    /// The query string (after `?`), still encoded; `None` if there is
    /// none.
    pub query: Option<String>,
    /// The body, as received (at most 64 KiB; larger requests are refused
    /// with 413 before any route sees them).
    pub body: Vec<u8>,
}

impl RouteRequest {
    /// A request with no query and an empty body (for tests of routes).
    pub fn new(method: impl Into<String>, path: impl Into<String>) -> Self {
        RouteRequest {
            method: method.into(),
            path: path.into(),
            query: None,
            body: Vec::new(),
        }
    }

    /// This request with `query` as its query string.
    pub fn with_query(self, query: impl Into<String>) -> Self {
        RouteRequest {
            query: Some(query.into()),
            ..self
        }
    }

    /// This request with `body`.
    pub fn with_body(self, body: impl Into<Vec<u8>>) -> Self {
        RouteRequest {
            body: body.into(),
            ..self
        }
    }

    /// True for `GET` and `HEAD`.
    pub fn is_read(&self) -> bool {
        self.method == "GET" || self.method == "HEAD"
    }

    /// The form fields (`application/x-www-form-urlencoded`), decoded: the
    /// query string's, then the body's.
    pub fn form(&self) -> Vec<(String, String)> {
        let mut fields: Vec<(String, String)> = self
            .query
            .as_deref()
            .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
            .unwrap_or_default();
        fields.extend(form_urlencoded::parse(&self.body).into_owned());
        fields
    }

    /// The last value of form field `name`, trimmed (a body field wins
    /// over a query field of the same name); `None` if absent.
    pub fn form_field(&self, name: &str) -> Option<String> {
        self.form()
            .into_iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_string())
    }

    /// The path's segments after `prefix` (which must match whole
    /// segments), percent-decoded: `Some(["a b"])` for `/counters/a%20b`
    /// and prefix `/counters`, `Some([])` for `/counters/`, `None` if the
    /// path is not under the prefix or a segment is not UTF-8.
    ///
    /// ```
    /// use troupe_cluster::management::RouteRequest;
    ///
    /// let r = RouteRequest::new("GET", "/cluster/shards/my%20type/state");
    /// assert_eq!(
    ///     r.segments_after("/cluster/shards"),
    ///     Some(vec!["my type".to_string(), "state".to_string()])
    /// );
    /// assert_eq!(r.segments_after("/cluster/shard"), None);
    /// assert_eq!(RouteRequest::new("GET", "/cluster/shards/").segments_after("/cluster/shards"), Some(vec![]));
    /// ```
    pub fn segments_after(&self, prefix: &str) -> Option<Vec<String>> {
        let rest = self.path.strip_prefix(prefix.trim_end_matches('/'))?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest.split('/')
            .filter(|s| !s.is_empty())
            .map(|s| {
                percent_encoding::percent_decode_str(s)
                    .decode_utf8()
                    .ok()
                    .map(|s| s.into_owned())
            })
            .collect()
    }
}

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
    /// Application routes, tried in order before the cluster routes; the
    /// first that answers `Some` serves the request.
    pub extra_routes: Vec<ExtraRoutes>,
    /// Named readiness checks of `GET /ready`, besides this member being
    /// Up or WeaklyUp (the built-in check `cluster-membership`).
    pub readiness_checks: Vec<(String, HealthCheck)>,
    /// Named liveness checks of `GET /alive` (none by default: alive while
    /// the server answers).
    pub liveness_checks: Vec<(String, HealthCheck)>,
    /// Named startup checks of `GET /startup` (none by default: started
    /// once the server answers).
    pub startup_checks: Vec<(String, HealthCheck)>,
    /// How long a readiness check may take; one that takes longer fails
    /// (Akka Management's `health-checks.check-timeout`). Default 1 s.
    pub health_check_timeout: Duration,
}

impl fmt::Debug for ManagementSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagementSettings")
            .field("bind", &self.bind)
            .field("read_only", &self.read_only)
            .field("extra_routes", &self.extra_routes.len())
            .field(
                "readiness_checks",
                &self
                    .readiness_checks
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field(
                "liveness_checks",
                &self
                    .liveness_checks
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field(
                "startup_checks",
                &self
                    .startup_checks
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("health_check_timeout", &self.health_check_timeout)
            .finish()
    }
}

impl Default for ManagementSettings {
    fn default() -> Self {
        ManagementSettings {
            bind: "127.0.0.1:8558".into(),
            read_only: true,
            extra_routes: Vec::new(),
            readiness_checks: Vec::new(),
            liveness_checks: Vec::new(),
            startup_checks: Vec::new(),
            health_check_timeout: Duration::from_secs(1),
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

    /// These settings with more application routes (see [`ExtraRoutes`]),
    /// tried after those added before.
    pub fn with_extra_routes(mut self, routes: ExtraRoutes) -> Self {
        self.extra_routes.push(routes);
        self
    }

    /// These settings with one more readiness check named `name` (see
    /// [`HealthCheck`]): `GET /ready` answers 200 only if this member is
    /// Up or WeaklyUp and every check passes; otherwise 503 with the
    /// failing checks ([`NotReady`](super::NotReady)).
    pub fn with_readiness_check(mut self, name: impl Into<String>, check: HealthCheck) -> Self {
        self.readiness_checks.push((name.into(), check));
        self
    }

    /// These settings with one more liveness check named `name`: `GET
    /// /alive` answers 200 only if every liveness check passes; otherwise
    /// 503 with the failing checks. An orchestrator restarts a node that
    /// stays not alive, so check only what a restart can cure (a stuck
    /// loop, a poisoned resource).
    pub fn with_liveness_check(mut self, name: impl Into<String>, check: HealthCheck) -> Self {
        self.liveness_checks.push((name.into(), check));
        self
    }

    /// These settings with one more startup check named `name`: `GET
    /// /startup` answers 200 only if every startup check passes; otherwise
    /// 503 with the failing checks (for an orchestrator's startup probe,
    /// which holds the other probes back until the node has started).
    pub fn with_startup_check(mut self, name: impl Into<String>, check: HealthCheck) -> Self {
        self.startup_checks.push((name.into(), check));
        self
    }

    /// These settings with the [check timeout](Self::health_check_timeout).
    pub fn with_health_check_timeout(self, timeout: Duration) -> Self {
        ManagementSettings {
            health_check_timeout: timeout,
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
