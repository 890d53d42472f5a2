//! Troupe's side of the remote benchmark.

use super::{percentiles, Figures, ASK_N, ASK_WARMUP, BODY, TELL_N};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::remote::RemoteSettings;
use troupe_core::rt;

#[derive(Message, Serialize, Deserialize)]
#[message(name = "bench.Body")]
struct Body(#[serde(with = "serde_bytes")] Vec<u8>);

#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64, name = "bench.Count")]
struct Count;

#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64, name = "bench.Echo")]
struct Echo(u64, #[serde(with = "serde_bytes")] Vec<u8>);

#[derive(Default)]
struct Sink {
    n: u64,
}
impl Actor for Sink {}

#[handlers]
impl Sink {
    async fn body(&mut self, _msg: Body, _ctx: &mut Context<Self>) {
        self.n += 1;
    }
    async fn count(&mut self, _msg: Count, _ctx: &mut Context<Self>) -> u64 {
        std::mem::take(&mut self.n)
    }
    async fn echo(&mut self, msg: Echo, _ctx: &mut Context<Self>) -> u64 {
        msg.0
    }
}

fn system() -> ActorSystem {
    let remote = RemoteSettings::new("127.0.0.1:0").with_secret("bench");
    let system = ActorSystem::builder("bench")
        .remote(remote)
        .build()
        .expect("system");
    system
        .register::<Sink, Body>()
        .and_then(|s| s.register::<Sink, Count>())
        .and_then(|s| s.register::<Sink, Echo>())
        .expect("message manifests are distinct");
    system
}

#[allow(clippy::print_stdout)]
pub fn serve() {
    let system = system();
    system.spawn_named("sink", Sink::default()).expect("spawn");
    println!("READY {}", system.remoting().unwrap().address());
    rt::block_on(std::future::pending::<()>());
}

pub fn client(workload: &str, address: &str) -> Figures {
    let system = system();
    let sink: ActorRef<Sink> = system
        .resolve(&format!("{address}/user/sink"))
        .expect("resolve");
    let workload = workload.to_string();
    rt::block_on(async move {
        sink.ask_timeout(Count, Duration::from_secs(10))
            .await
            .expect("connect");
        match workload.as_str() {
            "tell" => {
                let t0 = Instant::now();
                for _ in 0..TELL_N {
                    sink.send(Body(vec![7; BODY])).await.expect("send");
                }
                let n = sink
                    .ask_timeout(Count, Duration::from_secs(120))
                    .await
                    .expect("count");
                let elapsed = t0.elapsed();
                assert_eq!(n, TELL_N, "messages lost");
                vec![("tell_msgs_per_sec", TELL_N as f64 / elapsed.as_secs_f64())]
            }
            "ask" => {
                let mut rtts = Vec::with_capacity(ASK_N);
                for i in 0..(ASK_WARMUP + ASK_N) {
                    let t = Instant::now();
                    let got = sink.ask(Echo(i as u64, vec![1; BODY])).await.expect("ask");
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
