//! The management HTTP API against real clusters on loopback: two (or
//! three) actor systems with remoting, a cluster and a management server
//! on each, and a small HTTP/1.1 client over the runtime's TCP streams.

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use troupe_cluster::management::{ManagementServer, ManagementSettings};
use troupe_cluster::{Cluster, ClusterSettings, DowningStrategy};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;

const DEADLINE: Duration = Duration::from_secs(30);

fn init_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// Akka's fast test settings; no automatic downing (members are downed
/// through the API).
fn fast_settings(seeds: &[Address], roles: &[&str]) -> ClusterSettings {
    let mut s = ClusterSettings {
        seed_nodes: seeds.to_vec(),
        roles: roles.iter().map(|r| r.to_string()).collect(),
        gossip_interval: Duration::from_millis(300),
        leader_actions_interval: Duration::from_millis(200),
        unreachable_nodes_reaper_interval: Duration::from_millis(200),
        heartbeat_interval: Duration::from_millis(200),
        seed_node_timeout: Duration::from_millis(1500),
        allow_weakly_up_members: Some(Duration::from_millis(1500)),
        ..ClusterSettings::default()
    };
    s.failure_detector.acceptable_heartbeat_pause = Duration::from_millis(1000);
    s.failure_detector.first_heartbeat_estimate = Duration::from_millis(200);
    s.downing.stable_after = Duration::from_millis(1500);
    s.downing.down_all_when_unstable = None;
    s.downing.strategy = DowningStrategy::None;
    s
}

fn system() -> ActorSystem {
    ActorSystem::builder("cluster")
        .remote(RemoteSettings::new("127.0.0.1:0").with_secret("management-test"))
        .build()
        .unwrap()
}

fn address(system: &ActorSystem) -> Address {
    system.remoting().unwrap().address().clone()
}

struct Node {
    system: ActorSystem,
    cluster: Cluster,
    http: ManagementServer,
}

impl Node {
    fn start(system: ActorSystem, settings: ClusterSettings, read_only: bool) -> Node {
        let cluster = Cluster::start(&system, settings).unwrap();
        let http = ManagementServer::start(
            cluster.clone(),
            ManagementSettings::new("127.0.0.1:0").with_read_only(read_only),
        )
        .unwrap();
        Node {
            system,
            cluster,
            http,
        }
    }

    fn address(&self) -> String {
        self.cluster.self_address().to_string()
    }

    fn addr(&self) -> SocketAddr {
        self.http.local_addr()
    }
}

/// An answer: status, head (status line and headers), body.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.head, self.body))
    }

    fn message(&self) -> String {
        self.json()["message"]
            .as_str()
            .unwrap_or_else(|| panic!("no message in {}", self.body))
            .to_string()
    }
}

/// Sends raw bytes and reads until the server closes.
async fn raw(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = rt::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    rt::timeout(DEADLINE, stream.read_to_end(&mut answer))
        .await
        .expect("the server did not close the connection")
        .unwrap();
    String::from_utf8(answer).unwrap()
}

/// One HTTP/1.1 request (`Connection: close`), with a form body if given.
async fn http(addr: SocketAddr, method: &str, path: &str, form: Option<&str>) -> Answer {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(form) = form {
        request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        ));
    } else {
        request.push_str("\r\n");
    }
    let text = raw(addr, request.as_bytes()).await;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of headers in {text:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    Answer {
        status,
        head: head.to_string(),
        body: body.to_string(),
    }
}

async fn get(addr: SocketAddr, path: &str) -> Answer {
    http(addr, "GET", path, None).await
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Polls `GET /cluster/members` on `node` until `check` accepts the JSON.
async fn await_members(node: &Node, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let start = Instant::now();
    loop {
        let answer = get(node.addr(), "/cluster/members").await;
        if answer.status == 200 {
            let json = answer.json();
            if check(&json) {
                return json;
            }
            if start.elapsed() > DEADLINE {
                panic!("{} never saw {what}: {json}", node.address());
            }
        } else if start.elapsed() > DEADLINE {
            panic!(
                "{} answers {}: {}",
                node.address(),
                answer.status,
                answer.body
            );
        }
        rt::sleep(Duration::from_millis(50)).await;
    }
}

fn all_up(n: usize) -> impl Fn(&Value) -> bool {
    move |json| {
        let members = json["members"].as_array().unwrap();
        members.len() == n && members.iter().all(|m| m["status"] == "Up")
    }
}

async fn await_status(addr: SocketAddr, path: &str, status: u16) -> Answer {
    let start = Instant::now();
    loop {
        let answer = get(addr, path).await;
        if answer.status == status {
            return answer;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "GET {path} is still {} {}",
            answer.status,
            answer.body
        );
        rt::sleep(Duration::from_millis(50)).await;
    }
}

/// Stops the nodes at the end of a test, abruptly, as before
/// `ActorSystem::shutdown` left the cluster gracefully: some tests need
/// their nodes to stop at once, and a graceful leave from a cut-off node
/// waits out its phase timeouts.
async fn shutdown(nodes: Vec<Node>) {
    for n in nodes {
        n.http.stop().await;
        n.system.terminate().await;
    }
}

#[test]
fn a_read_only_server_shows_the_members_and_refuses_changes() {
    init_logging();
    rt::block_on(async {
        let systems = [system(), system()];
        let seeds = [address(&systems[0])];
        let [s0, s1] = systems;
        let first = Node::start(s0, fast_settings(&seeds, &["a"]), true);
        let second = Node::start(s1, fast_settings(&seeds, &["a", "b"]), true);
        assert!(first.http.is_read_only());

        await_members(&first, "two Up members", all_up(2)).await;
        let json = await_members(&second, "two Up members", all_up(2)).await;

        // The document's shape and field names.
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "leader",
                "members",
                "oldest",
                "oldestPerRole",
                "selfNode",
                "unreachable"
            ]
        );
        assert_eq!(json["selfNode"], second.address());
        assert_eq!(json["unreachable"], serde_json::json!([]));
        let both = [first.address(), second.address()];
        assert!(both.contains(&json["leader"].as_str().unwrap().to_string()));
        // Both have role a, so its oldest is the oldest; only the second
        // has role b.
        let oldest = json["oldest"].as_str().unwrap().to_string();
        assert!(both.contains(&oldest), "{json}");
        assert_eq!(
            json["oldestPerRole"],
            serde_json::json!({"a": oldest, "b": second.address()})
        );
        let members = json["members"].as_array().unwrap();
        let second_json = members
            .iter()
            .find(|m| m["node"] == second.address())
            .unwrap();
        let mut keys: Vec<&str> = second_json
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        keys.sort();
        assert_eq!(keys, ["node", "nodeUid", "roles", "status"]);
        assert_eq!(
            second_json["nodeUid"],
            second.cluster.self_node().uid.to_string()
        );
        assert_eq!(second_json["status"], "Up");
        assert_eq!(second_json["roles"], serde_json::json!(["a", "b"]));

        // One member, by its encoded, plain or short address.
        for path in [
            format!("/cluster/members/{}", encode(&second.address())),
            format!("/cluster/members/{}", second.address()),
            format!(
                "/cluster/members/{}",
                second.address().trim_start_matches("troupe://")
            ),
        ] {
            let answer = get(first.addr(), &path).await;
            assert_eq!(answer.status, 200, "{path}: {}", answer.body);
            assert!(answer
                .head
                .to_ascii_lowercase()
                .contains("content-type: application/json"));
            assert_eq!(&answer.json(), second_json, "{path}");
        }

        // Unknown members and routes.
        let unknown = "troupe://cluster@127.0.0.1:1";
        let answer = get(
            first.addr(),
            &format!("/cluster/members/{}", encode(unknown)),
        )
        .await;
        assert_eq!(answer.status, 404);
        assert_eq!(answer.message(), format!("Member [{unknown}] not found"));
        let answer = get(first.addr(), "/cluster/members/not%20an%20address").await;
        assert_eq!(answer.status, 404);
        assert_eq!(get(first.addr(), "/nope").await.status, 404);
        assert_eq!(get(first.addr(), "/cluster/members/%FF").await.status, 400);
        assert_eq!(
            http(first.addr(), "PATCH", "/cluster/members", None)
                .await
                .status,
            405
        );

        // Read-only: no changes.
        let path = format!("/cluster/members/{}", encode(&second.address()));
        for (method, path, form) in [
            (
                "POST",
                "/cluster/members",
                Some(format!("address={}", encode(&first.address()))),
            ),
            ("PUT", path.as_str(), Some("operation=Leave".to_string())),
            ("PUT", path.as_str(), Some("operation=Down".to_string())),
            ("DELETE", path.as_str(), None),
        ] {
            let answer = http(first.addr(), method, path, form.as_deref()).await;
            assert_eq!(answer.status, 405, "{method} {path}: {}", answer.body);
            assert!(answer.message().contains("read-only"), "{}", answer.body);
            assert!(
                answer
                    .head
                    .to_ascii_lowercase()
                    .contains("allow: get, head"),
                "{}",
                answer.head
            );
        }

        // Health.
        let answer = get(first.addr(), "/ready").await;
        assert_eq!((answer.status, answer.body.as_str()), (200, "OK"));
        assert_eq!(get(second.addr(), "/ready").await.status, 200);
        assert_eq!(get(first.addr(), "/alive").await.status, 200);

        // Garbage and slow clients do not stop the server.
        let answer = raw(first.addr(), b"this is not HTTP\r\n\r\n").await;
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 400"),
            "{answer}"
        );
        let mut slow = rt::TcpStream::connect(first.addr()).await.unwrap();
        slow.write_all(b"GET /alive HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let started = Instant::now();
        assert_eq!(get(first.addr(), "/alive").await.status, 200);
        assert_eq!(get(first.addr(), "/cluster/members").await.status, 200);
        assert!(started.elapsed() < Duration::from_secs(5));
        let huge = format!("address={}", "x".repeat(100_000));
        let answer = http(first.addr(), "POST", "/cluster/members", Some(&huge)).await;
        assert!(matches!(answer.status, 405 | 413), "{}", answer.status);

        // Stopping closes the listener.
        let addr = first.addr();
        first.http.stop().await;
        assert!(rt::TcpStream::connect(addr).await.is_err());
        drop(slow);
        first.system.shutdown().await;
        shutdown(vec![second]).await;
    });
}

#[test]
fn a_mutable_server_joins_removes_and_downs_members() {
    init_logging();
    rt::block_on(async {
        let systems = [system(), system(), system()];
        let seeds = [address(&systems[0])];
        let [s0, s1, s2] = systems;
        let first = Node::start(s0, fast_settings(&seeds, &[]), false);
        // Not joined yet: not ready, but alive.
        let second = Node::start(s1, fast_settings(&[], &[]), false);
        let third = Node::start(s2, fast_settings(&seeds, &[]), false);
        let answer = get(second.addr(), "/ready").await;
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert_eq!(get(second.addr(), "/alive").await.status, 200);
        let json = get(second.addr(), "/cluster/members").await.json();
        assert_eq!(json["members"], serde_json::json!([]));
        assert_eq!(json["leader"], Value::Null);
        assert_eq!(json["oldest"], Value::Null);

        // Joining through the API.
        let answer = http(
            second.addr(),
            "POST",
            "/cluster/members",
            Some("nothing=here"),
        )
        .await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        let answer = http(
            second.addr(),
            "POST",
            "/cluster/members",
            Some("address=nonsense"),
        )
        .await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        assert!(answer.message().contains("troupe://"), "{}", answer.body);
        let form = format!("address={}", encode(&first.address()));
        let answer = http(second.addr(), "POST", "/cluster/members", Some(&form)).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.message(), format!("Joining {}", first.address()));
        await_members(&first, "three Up members", all_up(3)).await;
        await_members(&second, "three Up members", all_up(3)).await;
        await_status(second.addr(), "/ready", 200).await;

        // Errors.
        let second_path = format!("/cluster/members/{}", encode(&second.address()));
        let answer = http(first.addr(), "PUT", &second_path, Some("operation=Explode")).await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        let answer = http(first.addr(), "PUT", &second_path, None).await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        let unknown = format!(
            "/cluster/members/{}",
            encode("troupe://cluster@127.0.0.1:1")
        );
        let answer = http(first.addr(), "PUT", &unknown, Some("operation=Down")).await;
        assert_eq!(answer.status, 404, "{}", answer.body);
        let answer = http(first.addr(), "DELETE", &unknown, None).await;
        assert_eq!(answer.status, 404, "{}", answer.body);
        assert_eq!(http(first.addr(), "POST", "/ready", None).await.status, 405);
        // Nothing changed.
        await_members(&first, "three Up members", all_up(3)).await;

        // Leave: the second node goes away.
        let answer = http(first.addr(), "PUT", &second_path, Some("operation=Leave")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.message(), format!("Leaving {}", second.address()));
        let gone = |addr: String| {
            move |json: &Value| {
                json["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|m| m["node"] != addr)
            }
        };
        await_members(&first, "the second node removed", gone(second.address())).await;

        // Down (case-insensitive) a crashed node: the third goes away too.
        let third_address = third.address();
        third.http.stop().await;
        third.system.terminate().await;
        let json = await_members(&first, "the third node unreachable", |json| {
            json["unreachable"].as_array().unwrap().len() == 1
        })
        .await;
        assert_eq!(
            json["unreachable"],
            serde_json::json!([{"node": third_address, "observedBy": [first.address()]}])
        );
        let third_path = format!("/cluster/members/{}", encode(&third_address));
        let answer = http(first.addr(), "PUT", &third_path, Some("operation=dOWN")).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.message(), format!("Downing {third_address}"));
        let json = await_members(&first, "one member", |json| {
            json["members"].as_array().unwrap().len() == 1
        })
        .await;
        assert_eq!(json["members"][0]["node"], first.address());
        assert_eq!(get(first.addr(), &second_path).await.status, 404);

        // DELETE: the first node leaves its own cluster; it is no longer
        // ready.
        let first_path = format!("/cluster/members/{}", first.address());
        let answer = http(first.addr(), "DELETE", &first_path, None).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        assert_eq!(answer.message(), format!("Leaving {}", first.address()));
        await_status(first.addr(), "/ready", 503).await;
        assert_eq!(get(first.addr(), "/alive").await.status, 200);

        shutdown(vec![first, second]).await;
    });
}

#[test]
fn application_routes_see_the_request_and_readiness_checks_gate_ready() {
    use std::sync::atomic::{AtomicU8, Ordering};
    use std::sync::Arc;
    use troupe_cluster::management::{ExtraRoutes, HealthCheck, RouteAnswer, RouteRequest};

    init_logging();
    rt::block_on(async {
        // `/echo/{segments}`: the request as the route saw it.
        let echo: ExtraRoutes = Arc::new(|request: &RouteRequest| {
            let segments = request.segments_after("/echo")?;
            let json = serde_json::json!({
                "method": request.method,
                "path": request.path,
                "segments": segments,
                "query": request.query,
                "body": String::from_utf8_lossy(&request.body),
                "text": request.form_field("text"),
            });
            let answer: RouteAnswer = Box::pin(async move { (201, json.to_string()) });
            Some(answer)
        });
        // A second route set: tried after the first, before the cluster's.
        let shadow: ExtraRoutes = Arc::new(|request: &RouteRequest| {
            if request.path != "/cluster/members/shadowed" && request.path != "/echo-too" {
                return None;
            }
            let answer: RouteAnswer =
                Box::pin(async { (418, r#"{"message":"second"}"#.to_string()) });
            Some(answer)
        });
        // 0: ready, 1: not ready, 2: too slow, 3: panics.
        let mode = Arc::new(AtomicU8::new(1));
        let m = mode.clone();
        let check: HealthCheck = Arc::new(move || {
            let mode = m.load(Ordering::SeqCst);
            Box::pin(async move {
                match mode {
                    0 => Ok(()),
                    1 => Err("still warming up".to_string()),
                    2 => {
                        rt::sleep(Duration::from_secs(5)).await;
                        Ok(())
                    }
                    _ => panic!("a buggy check"),
                }
            })
        });
        let always: HealthCheck = Arc::new(|| Box::pin(async { Ok(()) }));
        let settings = |bind: &str| {
            ManagementSettings::new(bind)
                .with_extra_routes(echo.clone())
                .with_extra_routes(shadow.clone())
                .with_readiness_check("warm-up", check.clone())
                .with_readiness_check("always", always.clone())
                .with_health_check_timeout(Duration::from_millis(300))
        };

        // Not a member yet: both the membership and the warm-up check fail.
        let lonely_system = system();
        let lonely_cluster = Cluster::start(&lonely_system, fast_settings(&[], &[])).unwrap();
        let lonely = ManagementServer::start(lonely_cluster, settings("127.0.0.1:0")).unwrap();
        let answer = get(lonely.local_addr(), "/ready").await;
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert_eq!(
            answer.json()["failedChecks"],
            serde_json::json!([
                {"name": "cluster-membership", "message": "this node is not a member of a cluster yet"},
                {"name": "warm-up", "message": "still warming up"},
            ])
        );
        assert_eq!(
            answer.message(),
            "Not Healthy: check [cluster-membership] failed: this node is not a member of a \
             cluster yet; check [warm-up] failed: still warming up"
        );
        lonely.stop().await;
        lonely_system.shutdown().await;

        let s = system();
        let seeds = [address(&s)];
        let cluster = Cluster::start(&s, fast_settings(&seeds, &[])).unwrap();
        let server = ManagementServer::start(cluster.clone(), settings("127.0.0.1:0")).unwrap();
        let node = Node {
            system: s,
            cluster,
            http: server,
        };
        await_members(&node, "one Up member", all_up(1)).await;

        // The route sees method, path, query and body, and is served in
        // read-only mode whatever the method.
        let answer = http(
            node.addr(),
            "POST",
            "/echo/a%20b/c?text=from-query&x=1",
            Some("text=from%20body&y=2"),
        )
        .await;
        assert_eq!(answer.status, 201, "{}", answer.body);
        assert!(answer
            .head
            .to_ascii_lowercase()
            .contains("content-type: application/json"));
        assert_eq!(
            answer.json(),
            serde_json::json!({
                "method": "POST",
                "path": "/echo/a%20b/c",
                "segments": ["a b", "c"],
                "query": "text=from-query&x=1",
                "body": "text=from%20body&y=2",
                "text": "from body",
            })
        );
        let answer = get(node.addr(), "/echo").await;
        assert_eq!(answer.status, 201);
        assert_eq!(answer.json()["query"], Value::Null);
        assert_eq!(answer.json()["segments"], serde_json::json!([]));
        // Not under /echo: the next route set, then the cluster routes.
        assert_eq!(get(node.addr(), "/echo-too").await.status, 418);
        assert_eq!(
            get(node.addr(), "/cluster/members/shadowed").await.status,
            418
        );
        assert_eq!(get(node.addr(), "/cluster/members").await.status, 200);

        // Up, but the warm-up check fails: 503 naming it.
        let answer = get(node.addr(), "/ready").await;
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert_eq!(
            answer.json()["failedChecks"],
            serde_json::json!([{"name": "warm-up", "message": "still warming up"}])
        );
        // Every check passes: ready.
        mode.store(0, Ordering::SeqCst);
        let answer = get(node.addr(), "/ready").await;
        assert_eq!((answer.status, answer.body.as_str()), (200, "OK"));
        // A check that does not answer in time, or panics, fails.
        mode.store(2, Ordering::SeqCst);
        let started = Instant::now();
        let answer = get(node.addr(), "/ready").await;
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert_eq!(
            answer.json()["failedChecks"],
            serde_json::json!([{"name": "warm-up", "message": "timed out after 300ms"}])
        );
        mode.store(3, Ordering::SeqCst);
        let answer = get(node.addr(), "/ready").await;
        assert_eq!(answer.status, 503, "{}", answer.body);
        assert_eq!(answer.json()["failedChecks"][0]["name"], "warm-up");
        assert!(
            answer.json()["failedChecks"][0]["message"]
                .as_str()
                .unwrap()
                .contains("panicked"),
            "{}",
            answer.body
        );
        // The server survives it.
        mode.store(0, Ordering::SeqCst);
        assert_eq!(get(node.addr(), "/ready").await.status, 200);
        assert_eq!(get(node.addr(), "/alive").await.status, 200);

        shutdown(vec![node]).await;
    });
}

#[test]
fn liveness_and_startup_checks_gate_alive_and_startup() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use troupe_cluster::management::HealthCheck;

    init_logging();
    rt::block_on(async {
        let flag_check = |flag: &Arc<AtomicBool>, why: &'static str| -> HealthCheck {
            let flag = flag.clone();
            Arc::new(move || {
                let ok = flag.load(Ordering::SeqCst);
                Box::pin(async move {
                    if ok {
                        Ok(())
                    } else {
                        Err(why.to_string())
                    }
                })
            })
        };
        let live = Arc::new(AtomicBool::new(true));
        let started = Arc::new(AtomicBool::new(false));
        let s = system();
        let cluster = Cluster::start(&s, fast_settings(&[], &[])).unwrap();
        let server = ManagementServer::start(
            cluster,
            ManagementSettings::new("127.0.0.1:0")
                .with_liveness_check("loop", flag_check(&live, "the main loop is stuck"))
                .with_startup_check("caches", flag_check(&started, "caches are loading")),
        )
        .unwrap();
        let addr = server.local_addr();
        // Not a member: not ready, but alive; not started until the check passes.
        assert_eq!(get(addr, "/alive").await.status, 200);
        assert_eq!(get(addr, "/ready").await.status, 503);
        let answer = get(addr, "/startup").await;
        assert_eq!(answer.status, 503);
        assert_eq!(
            answer.json()["failedChecks"],
            serde_json::json!([{"name": "caches", "message": "caches are loading"}])
        );
        started.store(true, Ordering::SeqCst);
        assert_eq!(get(addr, "/startup").await.status, 200);
        live.store(false, Ordering::SeqCst);
        let answer = get(addr, "/alive").await;
        assert_eq!(answer.status, 503);
        assert_eq!(answer.json()["failedChecks"][0]["name"], "loop");
        // The contact point answers before the node has joined.
        let answer = get(addr, "/bootstrap/seed-nodes").await;
        assert_eq!(answer.status, 200);
        assert_eq!(answer.json()["seedNodes"], serde_json::json!([]));
        server.stop().await;
        s.shutdown().await;
    });
}
