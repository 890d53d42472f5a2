//! Two processes talking over remoting.
//!
//! Start a server, which serves until it is stopped:
//!
//! ```sh
//! cargo run -p troupe-examples --example remote-ping-pong -- --port 2552
//! ```
//!
//! and, in another terminal, a client that sends 10,000 pings, checks every
//! pong, prints its round-trip figures and exits (non-zero on any failure):
//!
//! ```sh
//! cargo run -p troupe-examples --example remote-ping-pong -- --port 0 --peer troupe://troupe@127.0.0.1:2552
//! ```
//!
//! Both sides need the same secret: `--secret` or `TROUPE_SECRET` (without
//! either, a development default is used and logged as insecure).

use clap::Parser;
use serde::{Deserialize, Serialize};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::remote::RemoteSettings;
use troupe_core::rt;

/// A ping with a sequence number and a 100-byte body; the pong answers the
/// number back.
#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64, name = "ping-pong.Ping")]
struct Ping {
    n: u64,
    #[serde(with = "serde_bytes")]
    body: Vec<u8>,
}

/// Answers every ping with its number.
struct Ponger {
    served: u64,
}

impl Actor for Ponger {}

#[handlers]
impl Ponger {
    async fn ping(&mut self, msg: Ping, _ctx: &mut Context<Self>) -> u64 {
        self.served += 1;
        if self.served.is_multiple_of(10_000) {
            tracing::info!("served {} pings", self.served);
        }
        msg.n
    }
}

#[derive(Parser)]
#[command(about = "Ping-pong between two Troupe nodes over TCP")]
struct Args {
    /// Port to listen on (0: chosen by the OS).
    #[arg(long, default_value_t = 2552)]
    port: u16,
    /// Host to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The server to ping (troupe://SYSTEM@HOST:PORT); without it, serve.
    #[arg(long)]
    peer: Option<String>,
    /// The actor system's name.
    #[arg(long, default_value = "troupe")]
    system: String,
    /// The shared secret (or TROUPE_SECRET).
    #[arg(long, env = "TROUPE_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// Pings to send.
    #[arg(long, default_value_t = 10_000)]
    count: u64,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let mut remote = RemoteSettings::new(format!("{}:{}", args.host, args.port));
    remote.secret = args.secret.clone();
    let system = match ActorSystem::builder(&args.system).remote(remote).build() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    system
        .register::<Ponger, Ping>()
        .expect("message manifests are distinct");
    let address = system.remoting().expect("remoting is on").address().clone();
    match &args.peer {
        None => serve(system, &address),
        // The pinging loop runs on the executor, next to the connection's
        // reader, so that a pong wakes it without waking another thread.
        Some(peer) => match rt::block_on(rt::spawn({
            let (system, peer) = (system.clone(), peer.clone());
            async move { ping(&system, &peer, args.count).await }
        })) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ping-pong failed: {e}");
                ExitCode::FAILURE
            }
        },
    }
}

#[allow(clippy::print_stdout)] // the address is for the user (and for tests)
fn serve(system: ActorSystem, address: &troupe_core::remote::Address) -> ExitCode {
    if let Err(e) = system.spawn_named("ponger", Ponger { served: 0 }) {
        eprintln!("cannot spawn the ponger: {e}");
        return ExitCode::FAILURE;
    }
    println!("serving {address}/user/ponger");
    tracing::info!("serving on {address}; stop with Ctrl-C");
    rt::block_on(std::future::pending::<()>());
    ExitCode::SUCCESS
}

#[allow(clippy::print_stdout)] // the figures are the program's output
async fn ping(system: &ActorSystem, peer: &str, count: u64) -> Result<(), String> {
    let ponger: ActorRef<Ponger> = system
        .resolve(&format!("{peer}/user/ponger"))
        .map_err(|e| e.to_string())?;
    // The first ask also waits for the connection and handshake.
    let first = ponger
        .ask_timeout(
            Ping {
                n: 0,
                body: vec![0; 100],
            },
            Duration::from_secs(10),
        )
        .await
        .map_err(|e| format!("no answer from {peer}: {e}"))?;
    if first != 0 {
        return Err(format!("pong 0 came back as {first}"));
    }
    let mut rtts = Vec::with_capacity(count as usize);
    let started = Instant::now();
    for n in 1..=count {
        let t = Instant::now();
        let got = ponger
            .ask(Ping {
                n,
                body: vec![(n % 251) as u8; 100],
            })
            .await
            .map_err(|e| format!("ping {n}: {e}"))?;
        rtts.push(t.elapsed());
        if got != n {
            return Err(format!("ping {n} was answered with {got}"));
        }
    }
    let total = started.elapsed();
    rtts.sort();
    let pct = |p: f64| rtts[((rtts.len() as f64 * p) as usize).min(rtts.len() - 1)];
    println!(
        "{count} pings answered in {total:.2?}: round trip p50 {:.1?}, p99 {:.1?}, max {:.1?}; {:.0} pings/s",
        pct(0.50),
        pct(0.99),
        rtts[rtts.len() - 1],
        count as f64 / total.as_secs_f64()
    );
    system.shutdown().await;
    Ok(())
}
