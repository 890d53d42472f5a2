//! The routes: from a request's method, path and form fields to a status
//! and a body. Nothing here knows about sockets or hyper's connections.

use super::json::{
    ClusterMember, ClusterMembers, FailedCheck, ManagementMessage, NotReady, SeedNodes,
};
use super::settings::{ExtraRoutes, HealthCheck, RouteRequest};
use crate::cluster::Cluster;
use crate::events::CurrentClusterState;
use crate::member::{Member, MemberStatus};
use futures_lite::FutureExt;
use hyper::{Method, StatusCode};
use serde::Serialize;
use std::borrow::Cow;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use troupe_core::remote::Address;
use troupe_core::rt;

const MEMBERS: &str = "/cluster/members";
const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// What to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reply {
    /// The status code.
    pub(crate) status: StatusCode,
    /// The `Content-Type`.
    pub(crate) content_type: &'static str,
    /// The methods to list in an `Allow` header (405 answers).
    pub(crate) allow: Option<&'static str>,
    /// The body.
    pub(crate) body: String,
}

impl Reply {
    pub(crate) fn json(status: StatusCode, value: &impl Serialize) -> Reply {
        match serde_json::to_string(value) {
            Ok(body) => Reply {
                status,
                content_type: JSON,
                allow: None,
                body,
            },
            Err(e) => Reply::message(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode the answer: {e}"),
            ),
        }
    }

    pub(crate) fn message(status: StatusCode, message: impl Into<String>) -> Reply {
        let body = serde_json::to_string(&ManagementMessage::new(message))
            .unwrap_or_else(|_| String::from("{\"message\":\"\"}"));
        Reply {
            status,
            content_type: JSON,
            allow: None,
            body,
        }
    }

    fn text(status: StatusCode, body: impl Into<String>) -> Reply {
        Reply {
            status,
            content_type: TEXT,
            allow: None,
            body: body.into(),
        }
    }

    fn method_not_allowed(method: &Method, path: &str, allow: &'static str) -> Reply {
        Reply {
            allow: Some(allow),
            ..Reply::message(
                StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed on {path}; allowed: {allow}"),
            )
        }
    }
}

/// The routes of one server.
pub(crate) struct Routes {
    cluster: Cluster,
    read_only: bool,
    extra: Vec<ExtraRoutes>,
    readiness_checks: Vec<(String, HealthCheck)>,
    liveness_checks: Vec<(String, HealthCheck)>,
    startup_checks: Vec<(String, HealthCheck)>,
    check_timeout: Duration,
}

/// The three kinds of health checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Ready,
    Alive,
    Startup,
}

/// The name of the built-in readiness check (Akka Management's).
const MEMBERSHIP_CHECK: &str = "cluster-membership";

/// The form fields of a request: the query string's, then the body's (a
/// body field wins over a query field of the same name).
pub(crate) struct Form(Vec<(String, String)>);

impl Form {
    /// Decodes `application/x-www-form-urlencoded` from the query string
    /// and the body.
    fn of(request: &RouteRequest) -> Form {
        Form(request.form())
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
    }
}

enum Route<'a> {
    Alive,
    Ready,
    Startup,
    BootstrapSeedNodes,
    Members,
    Member(Cow<'a, str>),
}

impl<'a> Route<'a> {
    /// The route of a (still percent-encoded) path, or why it has none.
    fn of(path: &'a str) -> Result<Option<Route<'a>>, String> {
        let trimmed = match path.trim_end_matches('/') {
            "" => "/",
            p => p,
        };
        Ok(Some(match trimmed {
            "/alive" => Route::Alive,
            "/ready" => Route::Ready,
            "/startup" => Route::Startup,
            "/bootstrap/seed-nodes" => Route::BootstrapSeedNodes,
            MEMBERS => Route::Members,
            p => match p.strip_prefix(MEMBERS).and_then(|r| r.strip_prefix('/')) {
                Some(encoded) => Route::Member(
                    percent_encoding::percent_decode_str(encoded)
                        .decode_utf8()
                        .map_err(|_| format!("the address in {path} is not UTF-8"))?,
                ),
                None => return Ok(None),
            },
        }))
    }

    fn allowed(&self, read_only: bool) -> &'static str {
        match (self, read_only) {
            (Route::Alive | Route::Ready | Route::Startup | Route::BootstrapSeedNodes, _)
            | (Route::Members | Route::Member(_), true) => "GET, HEAD",
            (Route::Members, false) => "GET, HEAD, POST",
            (Route::Member(_), false) => "GET, HEAD, PUT, DELETE",
        }
    }
}

/// The member whose address is `key`: its full address
/// (`troupe://SYSTEM@HOST:PORT`) or its `SYSTEM@HOST:PORT` part.
fn find_member<'s>(state: &'s CurrentClusterState, key: &str) -> Option<&'s Member> {
    let parsed = key.parse::<Address>().ok();
    state.members.iter().find(|m| {
        let a = &m.node.address;
        if parsed.as_ref() == Some(a) {
            return true;
        }
        let text = a.to_string();
        text == key || text.split_once("://").is_some_and(|(_, rest)| rest == key)
    })
}

impl Routes {
    pub(crate) fn new(cluster: Cluster, settings: &super::settings::ManagementSettings) -> Routes {
        Routes {
            cluster,
            read_only: settings.read_only,
            extra: settings.extra_routes.clone(),
            readiness_checks: settings.readiness_checks.clone(),
            liveness_checks: settings.liveness_checks.clone(),
            startup_checks: settings.startup_checks.clone(),
            check_timeout: settings.health_check_timeout,
        }
    }

    /// Answers one request (its path still percent-encoded).
    pub(crate) async fn handle(&self, method: &Method, request: &RouteRequest) -> Reply {
        let path = request.path.as_str();
        let form = &Form::of(request);
        if let Some(answer) = self.extra.iter().find_map(|extra| extra(request)) {
            let (status, body) = answer.await;
            return Reply {
                status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                content_type: JSON,
                allow: None,
                body,
            };
        }
        let route = match Route::of(path) {
            Ok(Some(route)) => route,
            Ok(None) => {
                return Reply::message(
                    StatusCode::NOT_FOUND,
                    format!("No route for {method} {path}"),
                );
            }
            Err(why) => return Reply::message(StatusCode::BAD_REQUEST, why),
        };
        let read = *method == Method::GET || *method == Method::HEAD;
        let write = matches!(
            (&route, method),
            (Route::Members, &Method::POST) | (Route::Member(_), &Method::PUT | &Method::DELETE)
        );
        if write && self.read_only {
            return Reply {
                allow: Some(route.allowed(true)),
                ..Reply::message(
                    StatusCode::METHOD_NOT_ALLOWED,
                    format!(
                        "{method} {path} is refused: the management HTTP API is read-only. \
                         Start the ManagementServer with `read_only: false` \
                         (ManagementSettings::with_read_only(false)) to enable POST, PUT and DELETE"
                    ),
                )
            };
        }
        if !read && !write {
            return Reply::method_not_allowed(method, path, route.allowed(self.read_only));
        }
        match route {
            Route::Alive => self.health(Health::Alive).await,
            Route::Ready => self.health(Health::Ready).await,
            Route::Startup => self.health(Health::Startup).await,
            Route::BootstrapSeedNodes => {
                self.with_state(|state| {
                    Reply::json(
                        StatusCode::OK,
                        &SeedNodes::of(self.cluster.self_node(), state),
                    )
                })
                .await
            }
            Route::Members if read => self.with_state(|s| self.members(s)).await,
            Route::Members => self.join(form),
            Route::Member(key) => {
                self.with_state(|state| match find_member(state, &key) {
                    None => {
                        Reply::message(StatusCode::NOT_FOUND, format!("Member [{key}] not found"))
                    }
                    Some(m) if read => Reply::json(StatusCode::OK, &ClusterMember::of(m)),
                    Some(m) if *method == Method::DELETE => self.leave(m),
                    Some(m) => self.put(m, form),
                })
                .await
            }
        }
    }

    async fn with_state(&self, f: impl FnOnce(&CurrentClusterState) -> Reply) -> Reply {
        match self.cluster.state().await {
            Ok(state) => f(&state),
            Err(e) => Reply::message(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("The cluster did not answer: {e}"),
            ),
        }
    }

    fn members(&self, state: &CurrentClusterState) -> Reply {
        Reply::json(
            StatusCode::OK,
            &ClusterMembers::of(self.cluster.self_node(), state),
        )
    }

    fn join(&self, form: &Form) -> Reply {
        let Some(text) = form.get("address") else {
            return Reply::message(
                StatusCode::BAD_REQUEST,
                "Missing form field `address` (the address to join, troupe://SYSTEM@HOST:PORT)",
            );
        };
        match text.parse::<Address>() {
            Ok(address) => {
                self.cluster.join(&address);
                Reply::message(StatusCode::OK, format!("Joining {address}"))
            }
            Err(e) => Reply::message(StatusCode::BAD_REQUEST, e.to_string()),
        }
    }

    fn leave(&self, member: &Member) -> Reply {
        let address = &member.node.address;
        self.cluster.leave(address);
        Reply::message(StatusCode::OK, format!("Leaving {address}"))
    }

    fn put(&self, member: &Member, form: &Form) -> Reply {
        let address = &member.node.address;
        match form.get("operation") {
            Some(op) if op.eq_ignore_ascii_case("down") => {
                self.cluster.down(address);
                Reply::message(StatusCode::OK, format!("Downing {address}"))
            }
            Some(op) if op.eq_ignore_ascii_case("leave") => self.leave(member),
            Some(op) => Reply::message(
                StatusCode::BAD_REQUEST,
                format!("Operation [{op}] is not supported; use Down or Leave"),
            ),
            None => Reply::message(
                StatusCode::BAD_REQUEST,
                "Missing form field `operation` (Down or Leave)",
            ),
        }
    }

    /// `GET /ready`, `/alive` and `/startup`: 200 `OK` if every check of
    /// the kind passes (all run at once, each within the check timeout);
    /// else 503 with [`NotReady`]. Readiness also needs this member Up or
    /// WeaklyUp (the built-in check `cluster-membership`, first).
    async fn health(&self, kind: Health) -> Reply {
        let timeout = self.check_timeout;
        let checks = match kind {
            Health::Ready => &self.readiness_checks,
            Health::Alive => &self.liveness_checks,
            Health::Startup => &self.startup_checks,
        };
        let handles: Vec<_> = checks
            .iter()
            .map(|(name, check)| {
                let (name, check) = (name.clone(), check.clone());
                rt::spawn(async move {
                    let run = AssertUnwindSafe(async move { check().await }).catch_unwind();
                    let outcome = match rt::timeout(timeout, run).await {
                        None => Err(format!("timed out after {timeout:?}")),
                        Some(Err(_)) => {
                            tracing::error!("management HTTP: health check [{name}] panicked");
                            Err("panicked (see the server's log)".to_string())
                        }
                        Some(Ok(outcome)) => outcome,
                    };
                    (name, outcome)
                })
            })
            .collect();
        let mut failed = Vec::new();
        if kind == Health::Ready {
            if let Err(message) = self.membership_check().await {
                failed.push(FailedCheck {
                    name: MEMBERSHIP_CHECK.to_string(),
                    message,
                });
            }
        }
        for handle in handles {
            let (name, outcome) = handle.await;
            if let Err(message) = outcome {
                failed.push(FailedCheck { name, message });
            }
        }
        if failed.is_empty() {
            return Reply::text(StatusCode::OK, "OK");
        }
        let not_ready = NotReady::of(failed);
        tracing::debug!(
            "management HTTP: {kind:?} check failed: {}",
            not_ready.message
        );
        Reply::json(StatusCode::SERVICE_UNAVAILABLE, &not_ready)
    }

    /// Akka Management's `cluster-membership` check: this member is Up or
    /// WeaklyUp.
    async fn membership_check(&self) -> Result<(), String> {
        let state = rt::timeout(self.check_timeout, self.cluster.state())
            .await
            .ok_or_else(|| format!("the cluster did not answer within {:?}", self.check_timeout))?
            .map_err(|e| format!("the cluster did not answer: {e}"))?;
        let me = self.cluster.self_node();
        match state.members.iter().find(|m| &m.node == me) {
            Some(m) if matches!(m.status, MemberStatus::Up | MemberStatus::WeaklyUp) => Ok(()),
            Some(m) => Err(format!("this node is {}", m.status)),
            None => Err("this node is not a member of a cluster yet".to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gossip::Gossip;
    use crate::member::UniqueAddress;
    use crate::membership::MembershipState;

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("sys", "127.0.0.1", port), port as u64)
    }

    #[test]
    fn paths_decode_and_route() {
        assert!(matches!(Route::of("/alive"), Ok(Some(Route::Alive))));
        assert!(matches!(Route::of("/ready/"), Ok(Some(Route::Ready))));
        assert!(matches!(Route::of("/startup"), Ok(Some(Route::Startup))));
        assert!(matches!(
            Route::of("/bootstrap/seed-nodes"),
            Ok(Some(Route::BootstrapSeedNodes))
        ));
        assert!(matches!(
            Route::of("/cluster/members/"),
            Ok(Some(Route::Members))
        ));
        assert!(matches!(Route::of("/cluster/membersx"), Ok(None)));
        assert!(matches!(Route::of("/"), Ok(None)));
        match Route::of("/cluster/members/troupe%3A%2F%2Fsys%40127.0.0.1%3A2552") {
            Ok(Some(Route::Member(a))) => assert_eq!(a, "troupe://sys@127.0.0.1:2552"),
            _ => panic!("not a member route"),
        }
        match Route::of("/cluster/members/troupe://sys@127.0.0.1:2552") {
            Ok(Some(Route::Member(a))) => assert_eq!(a, "troupe://sys@127.0.0.1:2552"),
            _ => panic!("not a member route"),
        }
        assert!(Route::of("/cluster/members/%FF").is_err());
    }

    #[test]
    fn members_are_found_by_full_or_short_address() {
        let members = [
            crate::member::Member::joining(node(1), Default::default()).up(1),
            crate::member::Member::joining(node(2), Default::default()),
        ];
        let state = CurrentClusterState::of(&MembershipState::new(
            Gossip::with_members(members),
            node(1),
        ));
        let found = |k: &str| find_member(&state, k).map(|m| m.node.clone());
        assert_eq!(found("troupe://sys@127.0.0.1:2"), Some(node(2)));
        assert_eq!(found("sys@127.0.0.1:1"), Some(node(1)));
        assert_eq!(found("troupe://sys@127.0.0.1:3"), None);
        assert_eq!(found("nonsense"), None);
    }

    #[test]
    fn form_fields_come_from_query_and_body() {
        let f = Form::of(
            &RouteRequest::new("PUT", "/")
                .with_query("operation=Down&x=1")
                .with_body("operation=Leave&address=troupe%3A%2F%2Fa%40b%3A1"),
        );
        assert_eq!(f.get("operation"), Some("Leave"));
        assert_eq!(f.get("x"), Some("1"));
        assert_eq!(f.get("address"), Some("troupe://a@b:1"));
        assert_eq!(f.get("missing"), None);
    }
}
