//! Remoting between real processes: the `remote-ping-pong` example as
//! server and client, and this test process as a third node that watches
//! the server and sees it killed with SIGKILL.

use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::remote::RemoteSettings;
use troupe_core::rt;

const SECRET: &str = "process-test-secret";
const DEADLINE: Duration = Duration::from_secs(20);

/// The example's binary, brought up to date once per test run (cargo
/// builds examples for `cargo test`, but not for `--test` alone, and the
/// one on disk may be stale).
fn example_binary() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let mut dir = std::env::current_exe().expect("test binary path");
            dir.pop();
            if dir.ends_with("deps") {
                dir.pop();
            }
            let status = Command::new(env!("CARGO"))
                .args([
                    "build",
                    "-p",
                    "troupe-examples",
                    "--example",
                    "remote-ping-pong",
                ])
                .env("CARGO_TARGET_DIR", dir.parent().expect("target dir"))
                .status()
                .expect("cargo runs");
            assert!(status.success(), "building the example failed");
            dir.join("examples").join("remote-ping-pong")
        })
        .clone()
}

/// A running server and the address it printed.
struct Server {
    child: Child,
    address: String,
    stderr: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(port: u16, tag: &str) -> Server {
    let stderr =
        std::env::temp_dir().join(format!("troupe-ping-pong-{}-{tag}.log", std::process::id()));
    let mut child = Command::new(example_binary())
        .args(["--port", &port.to_string()])
        .env("TROUPE_SECRET", SECRET)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("server starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let address = line
        .trim()
        .strip_prefix("serving ")
        .and_then(|s| s.strip_suffix("/user/ponger"))
        .unwrap_or_else(|| panic!("unexpected first line from the server: {line:?}"))
        .to_string();
    Server {
        child,
        address,
        stderr,
    }
}

fn wait_for_log(path: &PathBuf, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if log.contains(needle) {
            return log;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{needle:?} never appeared in the log:\n{log}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn client_and_server_processes_ping_pong() {
    let server = start_server(0, "ok");
    let out = Command::new(example_binary())
        .args(["--port", "0", "--peer", &server.address, "--count", "2000"])
        .env("TROUPE_SECRET", SECRET)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("2000 pings answered"), "{stdout}");
}

#[test]
fn a_client_with_a_wrong_secret_is_refused_on_both_sides() {
    let server = start_server(0, "secret");
    let out = Command::new(example_binary())
        .args([
            "--port",
            "0",
            "--peer",
            &server.address,
            "--count",
            "1",
            "--secret",
            "wrong",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let client_log = String::from_utf8_lossy(&out.stderr);
    assert!(
        client_log.contains("do not share the same secret"),
        "{client_log}"
    );
    wait_for_log(&server.stderr, "do not share the same secret");
}

// This test's stand-ins for the example's types: the same manifest is all
// the wire needs.
#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64, name = "ping-pong.Ping")]
struct Ping {
    n: u64,
    #[serde(with = "serde_bytes")]
    body: Vec<u8>,
}

struct Ponger;
impl Actor for Ponger {}

#[handlers]
impl Ponger {
    async fn ping(&mut self, msg: Ping, _ctx: &mut Context<Self>) -> u64 {
        msg.n
    }
}

struct Watcher(async_channel::Sender<StopReason>);
impl Actor for Watcher {}

#[derive(Message)]
struct WatchIt(AnyActorRef);

#[handlers]
impl Watcher {
    async fn watch_it(&mut self, msg: WatchIt, ctx: &mut Context<Self>) {
        ctx.watch_any(&msg.0);
    }
    async fn terminated(&mut self, t: Terminated, _ctx: &mut Context<Self>) {
        let _ = self.0.send(t.reason).await;
    }
}

#[test]
fn kill_9_ends_watches_and_a_restart_on_the_same_port_is_a_new_incarnation() {
    let mut settings = RemoteSettings::new("127.0.0.1:0").with_secret(SECRET);
    settings.watch_heartbeat_interval = Duration::from_millis(200);
    settings.watch_failure_detector.acceptable_heartbeat_pause = Duration::from_millis(1500);
    settings.watch_failure_detector.first_heartbeat_estimate = Duration::from_millis(200);
    settings.watch_failure_detector.threshold = 8.0;
    settings.reconnect_backoff_max = Duration::from_millis(200);
    let system = ActorSystem::builder("observer")
        .remote(settings)
        .build()
        .unwrap();
    system
        .register::<Ponger, Ping>()
        .expect("message manifests are distinct");
    let mut server = start_server(0, "kill");
    let port: u16 = server.address.rsplit(':').next().unwrap().parse().unwrap();
    rt::block_on(async {
        let ponger: ActorRef<Ponger> = system
            .resolve(&format!("{}/user/ponger", server.address))
            .unwrap();
        let ping = |n| Ping {
            n,
            body: vec![1; 100],
        };
        assert_eq!(ponger.ask_timeout(ping(7), DEADLINE).await.unwrap(), 7);
        let (tx, rx) = async_channel::unbounded();
        let watcher = system.spawn(Watcher(tx));
        watcher.tell(WatchIt(ponger.to_any())).unwrap();
        // Let heartbeats flow, then kill the server without a chance to say goodbye.
        rt::sleep(Duration::from_millis(600)).await;
        let address: troupe_core::remote::Address = server.address.parse().unwrap();
        let old_uid = system
            .remoting()
            .unwrap()
            .peer_uid(&address)
            .expect("handshake done");
        server.child.kill().unwrap();
        server.child.wait().unwrap();
        let killed = Instant::now();
        let reason = rt::timeout(DEADLINE, rx.recv())
            .await
            .expect("Terminated in time")
            .unwrap();
        let took = killed.elapsed();
        assert!(matches!(reason, StopReason::NodeLost(_)), "{reason:?}");
        // Acceptable pause 1.5 s, threshold 8 at 200 ms heartbeats: a few seconds.
        assert!(took < Duration::from_secs(6), "Terminated took {took:?}");

        // A new process on the same port is a new incarnation: it works, and
        // the old UID stays quarantined.
        let restarted = start_server(port, "restarted");
        let start = Instant::now();
        let answer = loop {
            match ponger
                .ask_timeout(ping(8), Duration::from_millis(500))
                .await
            {
                Ok(v) => break v,
                Err(e) => assert!(
                    start.elapsed() < DEADLINE,
                    "new incarnation never answered: {e}"
                ),
            }
        };
        assert_eq!(answer, 8);
        let remoting = system.remoting().unwrap();
        assert!(remoting.is_quarantined(&address, old_uid));
        assert_ne!(remoting.peer_uid(&address), Some(old_uid));
        drop(restarted);
        system.shutdown().await;
    });
}
