//! Helpers of the process tests: real `troupe-node` processes, their
//! logs, and a small blocking HTTP client for their management routes.

#![allow(dead_code)] // each test uses a part

pub mod counters;
pub mod netns;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a test waits for anything.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The cluster secret of the test nodes.
pub const SECRET: &str = "cluster-process-test";

pub fn node_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_troupe-node"))
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Settings that make a cluster fast enough for a test and slow enough
/// for a loaded machine, as `TROUPE_*` variables.
pub const FAST_ENV: [(&str, &str); 5] = [
    ("TROUPE_GOSSIP_INTERVAL", "300ms"),
    ("TROUPE_LEADER_ACTIONS_INTERVAL", "200ms"),
    ("TROUPE_HEARTBEAT_INTERVAL", "300ms"),
    ("TROUPE_SEED_NODE_TIMEOUT", "2s"),
    ("TROUPE_DOWNING_STABLE_AFTER", "2s"),
];

/// A running `troupe-node`, killed when dropped.
pub struct Node {
    pub child: Child,
    /// Its address, `troupe://troupe@127.0.0.1:PORT`.
    pub address: String,
    pub log: PathBuf,
    /// A directory to remove when the node is dropped.
    pub scratch: Option<PathBuf>,
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.scratch {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Node {
    /// Starts `troupe-node` on remoting port `port` with `args` and `env`
    /// (besides the secret and logging); its log goes to a file named
    /// after `tag`.
    pub fn spawn(port: u16, args: &[String], env: &[(&str, &str)], tag: &str) -> Node {
        Node::spawn_at(&format!("127.0.0.1:{port}"), args, env, tag)
    }

    /// As [`spawn`](Self::spawn), with remoting on `bind` (`HOST:PORT`).
    pub fn spawn_at(bind: &str, args: &[String], env: &[(&str, &str)], tag: &str) -> Node {
        Node::spawn_with(Command::new(node_binary()), bind, args, env, tag)
    }

    /// As [`spawn_at`](Self::spawn_at), inside the network namespace
    /// `netns` (`ip netns exec` replaces itself with the node, so the
    /// child is the node).
    pub fn spawn_in_netns(
        netns: &str,
        bind: &str,
        args: &[String],
        env: &[(&str, &str)],
        tag: &str,
    ) -> Node {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", netns]).arg(node_binary());
        Node::spawn_with(command, bind, args, env, tag)
    }

    /// `command` (which runs `troupe-node`) with remoting on `bind`.
    fn spawn_with(
        mut command: Command,
        bind: &str,
        args: &[String],
        env: &[(&str, &str)],
        tag: &str,
    ) -> Node {
        let log =
            std::env::temp_dir().join(format!("troupe-node-{}-{tag}.log", std::process::id()));
        let child = command
            .args(["--bind", bind])
            .args(args)
            .env("TROUPE_SECRET", SECRET)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("troupe-node starts");
        Node {
            child,
            address: format!("troupe://troupe@{bind}"),
            log,
            scratch: None,
        }
    }

    /// A node on `port` that joins `seeds`, with [`FAST_ENV`] and its
    /// durable store in the temporary directory.
    pub fn start(port: u16, seeds: &str, tag: &str) -> Node {
        let data = std::env::temp_dir().join(format!(
            "troupe-node-{}-{tag}-{port}-data",
            std::process::id()
        ));
        let args = [
            "--seed-nodes".to_string(),
            seeds.to_string(),
            "--http".to_string(),
            format!("127.0.0.1:{}", free_port()),
            "--data-dir".to_string(),
            data.display().to_string(),
        ];
        let mut node = Node::spawn(port, &args, &FAST_ENV, tag);
        node.scratch = Some(data);
        node
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until `needle` is in the log.
    pub fn wait_for(&self, needle: &str) {
        let start = Instant::now();
        while !self.log().contains(needle) {
            assert!(
                start.elapsed() < DEADLINE,
                "{needle:?} never appeared in the log of {}:\n{}",
                self.address,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The management HTTP address, from the log line
    /// `management HTTP on http://ADDR (...)` (for `--http 127.0.0.1:0`).
    pub fn http_addr(&self) -> String {
        let needle = "troupe_node: management HTTP on http://";
        self.wait_for(needle);
        let log = self.log();
        let rest = &log[log.find(needle).unwrap() + needle.len()..];
        rest.split_whitespace().next().unwrap().to_string()
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let status = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(status.success());
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{} did not exit after SIGTERM:\n{}",
                self.address,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// One HTTP/1.1 request (`Connection: close`) to `addr`, with a form body
/// if given; `None` if the connection failed.
pub fn http(addr: &str, method: &str, path: &str, form: Option<&str>) -> Option<Answer> {
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    match form {
        Some(form) => request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{form}",
            form.len()
        )),
        None => request.push_str("\r\n"),
    }
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let text = String::from_utf8(answer).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some(Answer {
        status,
        body: body.to_string(),
    })
}

pub fn get(addr: &str, path: &str) -> Option<Answer> {
    http(addr, "GET", path, None)
}

/// `/cluster/members` of the node whose management server is at `http`,
/// once it sees exactly `count` members, all Up.
pub fn members_all_up(http: &str, count: usize) -> Result<serde_json::Value, String> {
    let answer = get(http, "/cluster/members").ok_or("no answer")?;
    let json: serde_json::Value = serde_json::from_str(&answer.body).map_err(|e| e.to_string())?;
    let members = json["members"].as_array().ok_or("no members")?;
    let up = members.iter().filter(|m| m["status"] == "Up").count();
    if members.len() == count && up == count {
        Ok(json)
    } else {
        Err(format!("{up} of {} members Up: {json}", members.len()))
    }
}

/// Repeats `f` until it returns `Some`, for at most [`DEADLINE`]; panics
/// with `what` and the last failure otherwise.
pub fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let start = Instant::now();
    loop {
        match f() {
            Ok(v) => return v,
            Err(why) => assert!(
                start.elapsed() < DEADLINE,
                "{what} did not happen within {DEADLINE:?}: {why}"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
