//! `troupe-node`: a runnable cluster node.
//!
//! ```sh
//! cargo run -p troupe-examples --bin troupe-node -- --bind 127.0.0.1:2552 \
//!     --seed-nodes troupe://troupe@127.0.0.1:2552
//! ```
//!
//! It joins the cluster of its seed nodes (the first seed forms a new
//! cluster if no other answers), logs every membership change, and on
//! SIGTERM or Ctrl-C runs the coordinated shutdown: it leaves the cluster
//! gracefully (its singleton moves) and exits with status 0. It also
//! shuts down, with a failure status, when the others down it.

use clap::Parser;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use troupe_cluster::coordinated_shutdown::{Phase, Reason};
use troupe_cluster::management::{ExtraRoutes, ManagementServer, ManagementSettings, RouteAnswer};
use troupe_cluster::singleton::{self, ClusterSingletonSettings, SingletonProxy};
use troupe_cluster::{Cluster, ClusterEvent, ClusterSettings};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;

#[derive(Parser)]
#[command(name = "troupe-node", about = "A Troupe cluster node")]
struct Args {
    /// The actor system's name (the same on every node of a cluster).
    #[arg(long, default_value = "troupe")]
    system: String,
    /// Remoting address to listen on (port 0: chosen by the OS).
    #[arg(long, default_value = "127.0.0.1:2552")]
    bind: String,
    /// Management HTTP address.
    #[arg(long, default_value = "127.0.0.1:8558")]
    http: String,
    /// Seed nodes, comma-separated: troupe://SYSTEM@HOST:PORT,...
    #[arg(long, value_delimiter = ',')]
    seed_nodes: Vec<String>,
    /// This node's roles, comma-separated.
    #[arg(long, value_delimiter = ',')]
    roles: Vec<String>,
    /// The shared cluster secret (or TROUPE_SECRET).
    #[arg(long, env = "TROUPE_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// A TOML file of cluster settings (TROUPE_* variables override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Enables the mutating management routes (join, leave, down).
    #[arg(long)]
    http_mutable: bool,
}

fn settings(args: &Args) -> Result<ClusterSettings, String> {
    let base = match &args.config {
        Some(path) => ClusterSettings::from_file(path).map_err(|e| e.to_string())?,
        None => ClusterSettings::default(),
    };
    let mut s = base.with_env().map_err(|e| e.to_string())?;
    if !args.seed_nodes.is_empty() {
        s.seed_nodes = args
            .seed_nodes
            .iter()
            .filter(|a| !a.is_empty())
            .map(|a| {
                a.parse::<Address>()
                    .map_err(|e| format!("--seed-nodes: {e}"))
            })
            .collect::<Result<_, _>>()?;
    }
    if !args.roles.is_empty() {
        s.roles = args
            .roles
            .iter()
            .filter(|r| !r.is_empty())
            .cloned()
            .collect();
    }
    Ok(s)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), String> {
    let settings = settings(&args)?;
    let mut remote = RemoteSettings::new(args.bind.clone());
    remote.secret = args.secret.clone();
    let system = ActorSystem::builder(&args.system)
        .remote(remote)
        .build()
        .map_err(|e| e.to_string())?;
    let cluster = Cluster::start(&system, settings).map_err(|e| e.to_string())?;
    tracing::info!("node {} started", cluster.self_node());
    // The demo singleton: a cluster-wide ticket counter, on the oldest node.
    system
        .register::<Tickets, NextTicket>()
        .expect("message manifests are distinct");
    singleton::start(
        &system,
        &cluster,
        "tickets",
        Tickets::default,
        ClusterSingletonSettings::default(),
    )
    .map_err(|e| e.to_string())?;
    let tickets = singleton::proxy::<Tickets>(
        &system,
        &cluster,
        "tickets",
        ClusterSingletonSettings::default(),
    )
    .map_err(|e| e.to_string())?;
    let management = ManagementServer::start(
        cluster.clone(),
        ManagementSettings::new(args.http.clone())
            .with_read_only(!args.http_mutable)
            .with_extra_routes(ticket_routes(tickets)),
    )
    .map_err(|e| format!("management HTTP on {}: {e}", args.http))?;
    tracing::info!(
        "management HTTP on http://{} ({})",
        management.local_addr(),
        if args.http_mutable {
            "mutable"
        } else {
            "read-only"
        }
    );
    // The coordinated shutdown: the HTTP server stops taking requests
    // first (Akka's service-unbind), then the node leaves the cluster, its
    // singleton moves, and the actor system stops.
    let shutdown = cluster.coordinated_shutdown().clone();
    shutdown
        .add_task(
            Phase::ServiceUnbind,
            "management-http",
            move || async move { management.stop().await },
        )
        .map_err(|e| e.to_string())?;
    let terminate = signals()?;
    rt::block_on(async move {
        let (snapshot, events) = cluster.subscribe().await.map_err(|e| e.to_string())?;
        tracing::info!(
            "current members: {:?}",
            snapshot
                .members
                .iter()
                .map(|m| (m.node.address.to_string(), m.status))
                .collect::<Vec<_>>()
        );
        // Log the membership until a signal comes, or until the shutdown
        // runs by itself (this node was made to leave, or was downed or
        // removed).
        let reason = loop {
            let next = futures_lite_or(
                futures_lite_or(events.recv(), terminate.recv()),
                shutdown.finished(),
            )
            .await;
            match next {
                Either::Left(Either::Left(Ok(event))) => log_event(&event),
                // The cluster core stopped: this node was downed or
                // removed (its shutdown is already running, unless
                // run-coordinated-shutdown-when-down is off).
                Either::Left(Either::Left(Err(_))) => break Reason::ClusterDowning,
                Either::Left(Either::Right(_)) => {
                    tracing::info!("terminating: leaving the cluster (coordinated shutdown)");
                    break Reason::ProcessExit;
                }
                Either::Right(()) => break Reason::Unknown,
            }
        };
        // Idempotent: joins the run already under way, if any. Membership
        // changes are still logged meanwhile.
        futures_lite::future::or(shutdown.run(reason), async {
            while let Ok(event) = events.recv().await {
                log_event(&event);
            }
            futures_lite::future::pending::<()>().await
        })
        .await;
        // Also when the configuration keeps the system running.
        system.shutdown().await;
        match shutdown.reason() {
            Some(r @ (Reason::ClusterDowning | Reason::ClusterJoinUnsuccessful)) => {
                Err(format!("stopped: {r}"))
            }
            _ => {
                tracing::info!("left the cluster; bye");
                Ok(())
            }
        }
    })
}

/// The demo singleton: hands out numbers, one after the other, cluster-wide.
#[derive(Default)]
struct Tickets {
    next: u64,
}

impl Actor for Tickets {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        tracing::info!("the ticket singleton starts here ({})", ctx.myself());
    }
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        tracing::info!(
            "the ticket singleton stops here, after ticket {}",
            self.next
        );
    }
}

/// Asks for the next ticket.
#[derive(Message, Serialize, Deserialize)]
#[message(reply = Ticket, name = "troupe-node.NextTicket")]
struct NextTicket;

/// A ticket and the node of the singleton that issued it.
#[derive(Debug, Serialize, Deserialize)]
struct Ticket {
    ticket: u64,
    host: String,
}

#[handlers]
impl Tickets {
    async fn next_ticket(&mut self, _m: NextTicket, ctx: &mut Context<Self>) -> Ticket {
        self.next += 1;
        let host = ctx
            .system()
            .remoting()
            .map(|r| r.address().to_string())
            .unwrap_or_default();
        Ticket {
            ticket: self.next,
            host,
        }
    }
}

/// `POST /tickets`: the next ticket, from wherever the singleton runs.
fn ticket_routes(tickets: SingletonProxy<Tickets>) -> ExtraRoutes {
    Arc::new(move |method: &str, path: &str| {
        if path.trim_end_matches('/') != "/tickets" {
            return None;
        }
        if method != "POST" {
            let answer: RouteAnswer =
                Box::pin(async { (405, r#"{"message":"use POST /tickets"}"#.to_string()) });
            return Some(answer);
        }
        let tickets = tickets.clone();
        let answer: RouteAnswer = Box::pin(async move {
            match tickets.ask(NextTicket).await {
                Ok(t) => (
                    200,
                    serde_json::json!({"ticket": t.ticket, "host": t.host}).to_string(),
                ),
                Err(e) => (
                    503,
                    serde_json::json!({"message": format!("no ticket: {e}")}).to_string(),
                ),
            }
        });
        Some(answer)
    })
}

fn log_event(e: &ClusterEvent) {
    match e {
        ClusterEvent::MemberJoined(m)
        | ClusterEvent::MemberWeaklyUp(m)
        | ClusterEvent::MemberUp(m)
        | ClusterEvent::MemberLeft(m)
        | ClusterEvent::MemberExited(m)
        | ClusterEvent::MemberDowned(m) => {
            tracing::info!("member {} is {}", m.node.address, m.status)
        }
        ClusterEvent::MemberRemoved(m, prev) => {
            tracing::info!("member {} removed (was {prev})", m.node.address)
        }
        ClusterEvent::UnreachableMember(m) => {
            tracing::warn!("member {} is unreachable", m.node.address)
        }
        ClusterEvent::ReachableMember(m) => {
            tracing::info!("member {} is reachable again", m.node.address)
        }
        ClusterEvent::LeaderChanged(l) => tracing::info!(
            "leader: {}",
            l.as_ref()
                .map(|n| n.address.to_string())
                .unwrap_or_else(|| "none".into())
        ),
        ClusterEvent::RoleLeaderChanged(r, l) => tracing::info!(
            "leader of role {r}: {}",
            l.as_ref()
                .map(|n| n.address.to_string())
                .unwrap_or_else(|| "none".into())
        ),
    }
}

enum Either<L, R> {
    Left(L),
    Right(R),
}

async fn futures_lite_or<L, R>(
    l: impl std::future::Future<Output = L>,
    r: impl std::future::Future<Output = R>,
) -> Either<L, R> {
    futures_lite::future::or(async { Either::Left(l.await) }, async {
        Either::Right(r.await)
    })
    .await
}

/// SIGTERM and SIGINT as a channel.
fn signals() -> Result<async_channel::Receiver<i32>, String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])
        .map_err(|e| format!("cannot handle signals: {e}"))?;
    let (tx, rx) = async_channel::bounded(1);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for s in signals.forever() {
                let _ = tx.try_send(s);
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(rx)
}
