//! ractor_cluster's side of the remote benchmark (ractor 0.16 with its
//! `cluster` feature, ractor_cluster 0.16).
//!
//! The server starts a `NodeServer` on a free loopback port with a magic
//! cookie, spawns the counting actor and joins it to a process group; the
//! client starts a second `NodeServer`, connects to the first with
//! `client_connect`, waits (with a deadline) until the session is
//! authenticated and the group holds the remote actor, then runs the
//! workload through that `RemoteActor`.
//!
//! What differs from Troupe's side:
//!
//! - `tell`: ractor's `cast` is synchronous and every mailbox on the way
//!   (the local `RemoteActor`, the `NodeSession`, the TCP writer, and the
//!   server-side actor) is unbounded, so there is no backpressure: the
//!   sending loop finishes long before the messages are on the wire, and
//!   they wait in memory. Nothing is dropped, and the clock stops only once
//!   the final call has confirmed all `TELL_N` arrived (the call travels
//!   over the same session, behind the casts), so the figure is still
//!   end-to-end delivered messages per second; what it does not show is
//!   the sender being held back.
//! - The messages are one enum (ractor's model: one message type per
//!   actor) instead of three message types; bodies travel as `Vec<u8>`
//!   through ractor's own `BytesConvertable` encoding instead of serde.

use super::{percentiles, Figures, ASK_N, ASK_WARMUP, BODY, TELL_N};
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster::{NodeServer, NodeServerMessage, NodeSessionMessage, RactorClusterMessage};
use std::io::Write;
use std::time::{Duration, Instant};

const COOKIE: &str = "bench";
const GROUP: &str = "bench.sink";

#[derive(RactorClusterMessage)]
enum SinkMsg {
    Body(Vec<u8>),
    #[rpc]
    Count(RpcReplyPort<u64>),
    #[rpc]
    Echo(u64, Vec<u8>, RpcReplyPort<u64>),
}

struct Sink;

impl Actor for Sink {
    type Msg = SinkMsg;
    type State = u64;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<SinkMsg>,
        _args: (),
    ) -> Result<u64, ActorProcessingErr> {
        ractor::pg::join(GROUP.to_string(), vec![myself.get_cell()]);
        Ok(0)
    }

    async fn handle(
        &self,
        _myself: ActorRef<SinkMsg>,
        msg: SinkMsg,
        n: &mut u64,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SinkMsg::Body(_) => *n += 1,
            SinkMsg::Count(reply) => {
                let _ = reply.send(std::mem::take(n));
            }
            SinkMsg::Echo(i, _body, reply) => {
                let _ = reply.send(i);
            }
        }
        Ok(())
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A loopback port that is free now: `NodeServer` takes a fixed port.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("local addr").port()
}

/// Starts a node server; returns its actor and port.
async fn node(name: &str) -> (ActorRef<NodeServerMessage>, u16) {
    let port = free_port();
    let server = NodeServer::new(
        port,
        COOKIE.to_string(),
        name.to_string(),
        "127.0.0.1".to_string(),
        None,
        None,
    );
    let (node, _) = Actor::spawn(None, server, ()).await.expect("node server");
    (node, port)
}

#[allow(clippy::print_stdout)]
pub fn serve() {
    runtime().block_on(async {
        let (_node, port) = node("bench_server").await;
        let _ = Actor::spawn(None, Sink, ()).await.expect("spawn sink");
        println!("READY 127.0.0.1:{port}");
        std::io::stdout().flush().expect("flush");
        std::future::pending::<()>().await;
    });
}

/// Polls `cond` every millisecond until it holds or `deadline` passes.
async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    deadline: Instant,
    mut cond: impl FnMut() -> F,
) -> T {
    loop {
        if let Some(v) = cond().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "ractor: timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn call<T: Send + 'static>(
    sink: &ActorRef<SinkMsg>,
    msg: impl FnOnce(RpcReplyPort<T>) -> SinkMsg,
    timeout: Duration,
) -> T {
    match sink.call(msg, Some(timeout)).await.expect("call") {
        CallResult::Success(v) => v,
        CallResult::Timeout => panic!("ractor call timed out"),
        CallResult::SenderError => panic!("ractor call lost its reply"),
    }
}

pub fn client(workload: &str, address: &str) -> Figures {
    let workload = workload.to_string();
    let address = address.to_string();
    runtime().block_on(async move {
        let deadline = Instant::now() + Duration::from_secs(10);
        let (node, _) = node("bench_client").await;
        ractor_cluster::client_connect(&node, address.as_str())
            .await
            .expect("connect");
        // The session authenticates, then the nodes exchange their process
        // groups; wait for both.
        wait_for("authentication", deadline, || {
            let node = node.clone();
            async move {
                let sessions = ractor::call_t!(node, NodeServerMessage::GetSessions, 1000).ok()?;
                for s in sessions.into_values() {
                    if let Ok(true) =
                        ractor::call_t!(s.actor, NodeSessionMessage::GetAuthenticationState, 1000)
                    {
                        return Some(());
                    }
                }
                None
            }
        })
        .await;
        let sink: ActorRef<SinkMsg> = wait_for("the remote sink", deadline, || async {
            ractor::pg::get_members(&GROUP.to_string())
                .into_iter()
                .find(|a| !a.get_id().is_local())
                .map(ActorRef::from)
        })
        .await;
        call(&sink, SinkMsg::Count, Duration::from_secs(10)).await;
        match workload.as_str() {
            "tell" => {
                let t0 = Instant::now();
                for _ in 0..TELL_N {
                    // No backpressure: see the module doc.
                    sink.cast(SinkMsg::Body(vec![7; BODY])).expect("cast");
                }
                let n = call(&sink, SinkMsg::Count, Duration::from_secs(120)).await;
                let elapsed = t0.elapsed();
                assert_eq!(n, TELL_N, "messages lost");
                vec![("tell_msgs_per_sec", TELL_N as f64 / elapsed.as_secs_f64())]
            }
            "ask" => {
                let mut rtts = Vec::with_capacity(ASK_N);
                for i in 0..(ASK_WARMUP + ASK_N) {
                    let t = Instant::now();
                    let got = call(
                        &sink,
                        |reply| SinkMsg::Echo(i as u64, vec![1; BODY], reply),
                        Duration::from_secs(10),
                    )
                    .await;
                    assert_eq!(got, i as u64);
                    if i >= ASK_WARMUP {
                        rtts.push(t.elapsed());
                    }
                }
                percentiles(rtts)
            }
            other => panic!("unknown workload {other}"),
        }
    })
}
