//! `troupe-node`: a runnable cluster node.
//!
//! ```sh
//! cargo run -p troupe-examples --bin troupe-node -- --bind 127.0.0.1:2552 \
//!     --seed-nodes troupe://troupe@127.0.0.1:2552
//! ```
//!
//! It joins the cluster of its seed nodes (the first seed forms a new
//! cluster if no other answers), or finds the other nodes through cluster
//! bootstrap (`--discovery config --contact-points HOST:PORT,...`, or
//! `--discovery dns --service-name NAME`, or the `[discovery]` and
//! `[bootstrap]` tables of `--config`), logs every membership change, and on
//! SIGTERM or Ctrl-C runs the coordinated shutdown: it leaves the cluster
//! gracefully (its singleton moves, its shards are handed off) and exits
//! with status 0. It also shuts down, with a failure status, when the
//! others down it.
//!
//! Besides the cluster routes, its management HTTP server serves:
//!
//! - `POST /tickets`: the next number from the demo singleton;
//! - `POST /counters/{id}` (form `add=N`) and `GET /counters/{id}`: the demo
//!   sharded entity `counter`, whose value lives in distributed data
//!   (majority writes and reads, durable under `--data-dir`), so it
//!   survives rebalancing, leaving nodes, crashes of a minority and full
//!   restarts; answers `{"id":"...","value":V,"node":"troupe://..."}`;
//! - the sharding routes (`GET /cluster/shards`, `/cluster/shards/{name}`,
//!   `/cluster/shards/{name}/state`, `/cluster/shards/{name}/stats`), and
//!   `/ready` waits for the sharding readiness check.
//!
//! `troupe-node remove-sharding-data --data-dir DIR --types counter,other`
//! does not run a node: it removes the internal sharding data of those
//! entity types (coordinator state, remembered shards and entities) from
//! the durable store of a stopped node and prints what it removed (see the
//! guide's "Removing internal sharding data" first: never while any node
//! of the cluster runs).

use clap::{Parser, Subcommand};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use troupe_cluster::bootstrap::{BootstrapSettings, ClusterBootstrap};
use troupe_cluster::coordinated_shutdown::{Phase, Reason};
use troupe_cluster::ddata::{
    Key, PNCounter, ReadConsistency, Replicator, ReplicatorSettings, WriteConsistency,
};
use troupe_cluster::discovery::{DiscoveryMethod, DiscoverySettings, ResolvedTarget};
use troupe_cluster::management::{
    ExtraRoutes, ManagementServer, ManagementSettings, RouteAnswer, RouteRequest,
};
use troupe_cluster::member::UniqueAddress;
use troupe_cluster::singleton::{self, ClusterSingletonSettings, SingletonProxy};
use troupe_cluster::{Cluster, ClusterEvent, ClusterSettings};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, RemoteSettings};
use troupe_core::rt;
use troupe_sharding::{ClusterSharding, EntityId, ShardingSettings};

#[derive(Parser)]
#[command(
    name = "troupe-node",
    about = "A Troupe cluster node",
    args_conflicts_with_subcommands = true
)]
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
    /// (without them, cluster bootstrap needs a discovery method).
    #[arg(long, value_delimiter = ',')]
    seed_nodes: Vec<String>,
    /// Cluster bootstrap's discovery method: `config` (the
    /// --contact-points) or `dns` (A records of --service-name, or SRV
    /// records with --port-name).
    #[arg(long, value_parser = ["config", "dns"])]
    discovery: Option<String>,
    /// The contact points for `--discovery config`: management HTTP
    /// addresses HOST:PORT, comma-separated.
    #[arg(long, value_delimiter = ',')]
    contact_points: Vec<String>,
    /// The service name to look up (default: the system name).
    #[arg(long)]
    service_name: Option<String>,
    /// The port name for an SRV lookup (`_PORT-NAME._tcp.SERVICE-NAME`).
    #[arg(long)]
    port_name: Option<String>,
    /// The DNS server to ask, IP:PORT (default: the system's).
    #[arg(long)]
    dns_server: Option<String>,
    /// Contact points that must answer before a new cluster forms
    /// (bootstrap's required-contact-point-nr).
    #[arg(long)]
    required_contact_points: Option<usize>,
    /// This node's roles, comma-separated.
    #[arg(long, value_delimiter = ',')]
    roles: Vec<String>,
    /// The shared cluster secret (or TROUPE_SECRET).
    #[arg(long, env = "TROUPE_SECRET", hide_env_values = true)]
    secret: Option<String>,
    /// A TOML file of cluster settings, and of sharding settings in its
    /// `[sharding]` table (TROUPE_* and TROUPE_SHARDING_* variables
    /// override it).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Enables the mutating management routes (join, leave, down).
    #[arg(long)]
    http_mutable: bool,
    /// The directory of this node's durable store (the counters' values);
    /// default `./troupe-data/SYSTEM-PORT`. One per node: two running nodes
    /// cannot share it.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Instead of running a node, a maintenance command.
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Removes internal sharding data from a stopped node's durable store.
    ///
    /// Removes the coordinator's state and the remembered shards and
    /// entities of the given entity types, and prints what it removed.
    /// Never run it while any node of the cluster runs (stop them all
    /// first); it refuses while a node uses this store.
    RemoveShardingData(RemoveShardingData),
}

#[derive(clap::Args)]
struct RemoveShardingData {
    /// The stopped node's data directory (its `--data-dir`); the store is
    /// `DATA_DIR/ddata.redb`.
    #[arg(long)]
    data_dir: PathBuf,
    /// The entity types, comma-separated (for instance `counter,other`).
    #[arg(long, value_delimiter = ',', required = true)]
    types: Vec<String>,
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

/// Service discovery and bootstrap: the `[discovery]` and `[bootstrap]`
/// tables of `--config`, then `TROUPE_DISCOVERY_*` and
/// `TROUPE_BOOTSTRAP_*` variables, then the flags.
fn bootstrap_settings(args: &Args) -> Result<(DiscoverySettings, BootstrapSettings), String> {
    let (discovery, bootstrap) = match &args.config {
        Some(path) => (
            DiscoverySettings::from_file(path).map_err(|e| e.to_string())?,
            BootstrapSettings::from_file(path).map_err(|e| e.to_string())?,
        ),
        None => (DiscoverySettings::default(), BootstrapSettings::default()),
    };
    let mut discovery = discovery.with_env().map_err(|e| e.to_string())?;
    let mut bootstrap = bootstrap.with_env().map_err(|e| e.to_string())?;
    if let Some(method) = &args.discovery {
        discovery.method = Some(method.parse().map_err(|e| format!("--discovery: {e}"))?);
    }
    if let Some(name) = &args.service_name {
        bootstrap.service_name = Some(name.clone());
    }
    if let Some(name) = &args.port_name {
        bootstrap.port_name = Some(name.clone());
    }
    if let Some(n) = args.required_contact_points {
        bootstrap.required_contact_point_nr = n;
    }
    if let Some(server) = &args.dns_server {
        discovery.dns_server = Some(
            DiscoverySettings::parse_dns_server(server)
                .map_err(|e| format!("--dns-server: {e}"))?,
        );
    }
    let contact_points: Vec<&String> = args
        .contact_points
        .iter()
        .filter(|c| !c.is_empty())
        .collect();
    if !contact_points.is_empty() {
        if discovery.method.is_none() {
            discovery.method = Some(DiscoveryMethod::Config);
        }
        let targets = contact_points
            .iter()
            .map(|c| {
                let (host, port) = c.rsplit_once(':').ok_or_else(|| {
                    format!("--contact-points: `{c}` is not HOST:PORT (a management HTTP address)")
                })?;
                let port = port
                    .parse::<u16>()
                    .map_err(|_| format!("--contact-points: `{c}` has no valid port"))?;
                Ok(ResolvedTarget::new(
                    host.trim_matches(['[', ']']),
                    Some(port),
                ))
            })
            .collect::<Result<Vec<_>, String>>()?;
        discovery
            .services
            .insert(bootstrap.effective_name(&args.system), targets);
        // The contact points listed are management endpoints, several per
        // host when nodes share one.
        bootstrap.contact_point.filter_on_fallback_port = false;
    }
    discovery.validate().map_err(|e| e.to_string())?;
    bootstrap.validate().map_err(|e| e.to_string())?;
    Ok((discovery, bootstrap))
}

/// The settings of the `counter` entity type: the `[sharding]` table of
/// `--config`, then `TROUPE_SHARDING_*` variables.
fn sharding_settings(args: &Args) -> Result<ShardingSettings, String> {
    let base = match &args.config {
        Some(path) => ShardingSettings::from_file(path).map_err(|e| e.to_string())?,
        None => ShardingSettings::default(),
    };
    base.with_env().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args = Args::parse();
    if let Some(Command::RemoveShardingData(command)) = args.command.take() {
        return remove_sharding_data(&command);
    }
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `troupe-node remove-sharding-data`: prints what it removed, per type;
/// fails (with the reason on stderr) when a node holds the store, when
/// there is none, or on any other error, having removed nothing.
#[allow(clippy::print_stdout)] // the report is the command's output
fn remove_sharding_data(command: &RemoveShardingData) -> ExitCode {
    let store = command.data_dir.join(STORE_FILE);
    let types: Vec<&str> = command
        .types
        .iter()
        .map(|t| t.trim())
        .filter(|t| !t.is_empty())
        .collect();
    match troupe_sharding::remove_internal_sharding_data(&store, &types) {
        Ok(report) => {
            print!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("troupe-node remove-sharding-data: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The node's durable store, in its data directory.
const STORE_FILE: &str = "ddata.redb";

fn run(args: Args) -> Result<(), String> {
    let settings = settings(&args)?;
    let sharding_settings = sharding_settings(&args)?;
    // ANCHOR: settings
    let (discovery_settings, bootstrap_settings) = bootstrap_settings(&args)?;
    let discovery = discovery_settings.build();
    if settings.seed_nodes.is_empty() && discovery.is_none() {
        return Err("nothing to join: configure seed nodes (--seed-nodes troupe://SYSTEM@HOST:PORT,... \
                    or seed-nodes in --config, or TROUPE_SEED_NODES) or cluster bootstrap's \
                    discovery (--discovery config --contact-points HOST:PORT,... or --discovery dns \
                    --service-name NAME, or a [discovery] table with `method` in --config, or \
                    TROUPE_DISCOVERY_METHOD)"
            .to_string());
    }
    // ANCHOR_END: settings
    let mut remote = RemoteSettings::new(args.bind.clone());
    remote.secret = args.secret.clone();
    let system = ActorSystem::builder(&args.system)
        .remote(remote)
        .build()
        .map_err(|e| e.to_string())?;
    let cluster = Cluster::start(&system, settings).map_err(|e| e.to_string())?;
    tracing::info!("node {} started", cluster.self_node());
    // Distributed data with the counters' keys and sharding's remembered
    // entities (`shard-*`) on disk, started before sharding so that
    // sharding shares this replicator.
    let data_dir = args.data_dir.clone().unwrap_or_else(|| {
        let port = cluster.self_address().port();
        PathBuf::from("troupe-data").join(format!("{}-{port}", args.system))
    });
    let replicator = Replicator::start(
        &system,
        &cluster,
        ReplicatorSettings {
            durable_keys: vec![format!("{COUNTER_KEY_PREFIX}*"), "shard-*".to_string()],
            durable_store: data_dir.join(STORE_FILE),
            ..ReplicatorSettings::default()
        },
    )
    .map_err(|e| e.to_string())?;
    tracing::info!("durable data in {}", data_dir.display());
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
    // The demo sharded entity, on every node.
    let sharding = ClusterSharding::new(&system, &cluster).map_err(|e| e.to_string())?;
    let (node, me) = (
        cluster.self_address().to_string(),
        cluster.self_node().clone(),
    );
    sharding
        .start::<Counter>(
            move |id| Counter {
                key: Key::new(format!("{COUNTER_KEY_PREFIX}{id}")),
                id,
                node: node.clone(),
                me: me.clone(),
                replicator: replicator.clone(),
                loaded: false,
            },
            sharding_settings,
        )
        .map_err(|e| e.to_string())?;
    let management = ManagementServer::start(
        cluster.clone(),
        troupe_sharding::management::with_sharding(
            ManagementSettings::new(args.http.clone())
                .with_read_only(!args.http_mutable)
                .with_extra_routes(ticket_routes(tickets))
                .with_extra_routes(counter_routes(sharding.clone())),
            &sharding,
        ),
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
    // ANCHOR: bootstrap
    // Cluster bootstrap, once the contact point (this server) answers.
    // Kept until the node exits; it stops by itself once it has joined.
    let _bootstrap = match discovery {
        Some(discovery) => Some(
            ClusterBootstrap::start(
                &cluster,
                discovery,
                bootstrap_settings,
                management.local_addr().port(),
            )
            .map_err(|e| e.to_string())?,
        ),
        None => None,
    };
    // ANCHOR_END: bootstrap
    // The coordinated shutdown: the HTTP server stops taking requests
    // first (Akka's service-unbind), then the region hands its shards off,
    // the node leaves the cluster, its singleton moves, and the actor
    // system stops.
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
        // The current members as events (Akka's InitialStateAsEvents):
        // this node may already be Up, and others with it, before this
        // subscription.
        for m in &snapshot.members {
            tracing::info!("member {} is {}", m.node.address, m.status);
        }
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
    Arc::new(move |request: &RouteRequest| {
        if request.path.trim_end_matches('/') != "/tickets" {
            return None;
        }
        if request.method != "POST" {
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

/// The prefix of the counters' keys in distributed data (one key per
/// counter: `counter-{id}`), which are durable.
const COUNTER_KEY_PREFIX: &str = "counter-";
/// How long the counter's reads and writes wait for a majority.
const COUNTER_DATA_TIMEOUT: Duration = Duration::from_secs(3);
/// How long an HTTP request waits for the counter's answer.
const COUNTER_ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The demo entity: a counter whose value lives in distributed data (a
/// PN-counter per entity, written and read with majority consistency), so
/// that a new incarnation elsewhere — after a rebalance, a leave or a crash
/// — finds it.
struct Counter {
    id: EntityId,
    /// `troupe://SYSTEM@HOST:PORT` of this node.
    node: String,
    me: UniqueAddress,
    key: Key<PNCounter>,
    replicator: Replicator,
    /// True once this incarnation has read the value from a majority.
    loaded: bool,
}

impl Actor for Counter {
    /// On a hand-off (or passivation), writes the value to a majority once
    /// more: when this node is leaving, the majority is of the members that
    /// stay, so the next incarnation's read finds it even if gossip has not
    /// carried it there yet.
    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if !self.loaded {
            return;
        }
        let written = self
            .replicator
            .update(
                &self.key,
                PNCounter::new(),
                WriteConsistency::Majority {
                    timeout: COUNTER_DATA_TIMEOUT,
                },
                |c| c,
            )
            .await;
        if let Err(e) = written {
            tracing::debug!(
                "counter {} stops without a final majority write: {e}",
                self.id
            );
        }
    }
}

/// Adds `n` (negative to subtract) to a counter; replies with its new value
/// once a majority of the nodes have the change.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(reply = Result<CounterValue, String>, name = "troupe-node.AddToCounter")]
struct AddToCounter {
    n: i64,
}

/// Asks for a counter's value.
#[derive(Debug, Message, Serialize, Deserialize)]
#[message(reply = Result<CounterValue, String>, name = "troupe-node.GetCounter")]
struct GetCounter;

/// A counter's value and the node of the incarnation that answered.
#[derive(Debug, Serialize, Deserialize)]
struct CounterValue {
    value: i64,
    node: String,
}

impl Counter {
    fn clamp(value: i128) -> i64 {
        value.clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// The value: from a majority of the replicas the first time (they have
    /// every write acknowledged by a majority, wherever it was made), from
    /// this node's replica after that (this incarnation is the only
    /// writer).
    async fn read(&mut self) -> Result<i64, String> {
        let consistency = if self.loaded {
            ReadConsistency::Local
        } else {
            ReadConsistency::Majority {
                timeout: COUNTER_DATA_TIMEOUT,
            }
        };
        let value = self
            .replicator
            .get(&self.key, consistency)
            .await
            .map_err(|e| format!("cannot read counter {}: {e}", self.id))?;
        if !self.loaded {
            tracing::debug!("counter {} loaded on {}", self.id, self.node);
        }
        self.loaded = true;
        Ok(value.map(|c| Self::clamp(c.value())).unwrap_or(0))
    }
}

#[troupe_sharding::entity(name = "counter")]
impl Counter {
    async fn add(&mut self, msg: AddToCounter) -> Result<CounterValue, String> {
        // The first message of an incarnation merges in the majority's
        // value, so that the write below starts from it.
        self.read().await?;
        let (me, n) = (self.me.clone(), msg.n);
        let seen = Arc::new(Mutex::new(None));
        let value = seen.clone();
        self.replicator
            .update(
                &self.key,
                PNCounter::new(),
                WriteConsistency::Majority {
                    timeout: COUNTER_DATA_TIMEOUT,
                },
                move |mut c| {
                    c.change(&me, n);
                    *value.lock().unwrap_or_else(|e| e.into_inner()) = Some(c.value());
                    c
                },
            )
            .await
            .map_err(|e| {
                format!(
                    "the add to counter {} is applied on {} but a majority did not confirm it: {e}",
                    self.id, self.node
                )
            })?;
        let value = seen.lock().unwrap_or_else(|e| e.into_inner()).take();
        Ok(CounterValue {
            value: Self::clamp(value.unwrap_or_default()),
            node: self.node.clone(),
        })
    }

    async fn get(&mut self, _msg: GetCounter) -> Result<CounterValue, String> {
        Ok(CounterValue {
            value: self.read().await?,
            node: self.node.clone(),
        })
    }
}

fn json_message(status: u16, message: impl Into<String>) -> (u16, String) {
    (
        status,
        serde_json::json!({ "message": message.into() }).to_string(),
    )
}

/// `POST /counters/{id}` (form `add=N`) and `GET /counters/{id}`.
fn counter_routes(sharding: ClusterSharding) -> ExtraRoutes {
    Arc::new(move |request: &RouteRequest| {
        let segments = request.segments_after("/counters")?;
        let ready = |answer: (u16, String)| -> Option<RouteAnswer> {
            Some(Box::pin(async move { answer }))
        };
        let [id] = segments.as_slice() else {
            return ready(json_message(404, "use /counters/{id}"));
        };
        let counter = match sharding.entity_ref::<Counter>(id.as_str()) {
            Ok(c) => c,
            Err(e) => return ready(json_message(503, e.to_string())),
        };
        let id = id.clone();
        let reply = match request.method.as_str() {
            "GET" | "HEAD" => counter.ask_timeout(GetCounter, COUNTER_ASK_TIMEOUT),
            "POST" => {
                let Some(text) = request.form_field("add") else {
                    return ready(json_message(
                        400,
                        "missing form field `add` (a signed integer, in a body of type \
                         application/x-www-form-urlencoded)",
                    ));
                };
                let Ok(n) = text.parse::<i64>() else {
                    return ready(json_message(
                        400,
                        format!("form field `add` must be a signed integer, not `{text}`"),
                    ));
                };
                counter.ask_timeout(AddToCounter { n }, COUNTER_ASK_TIMEOUT)
            }
            other => {
                return ready(json_message(
                    405,
                    format!("{other} is not allowed on /counters/{{id}}; use GET or POST"),
                ));
            }
        };
        Some(Box::pin(async move {
            match reply.await {
                Ok(Ok(v)) => (
                    200,
                    serde_json::json!({"id": id, "value": v.value, "node": v.node}).to_string(),
                ),
                Ok(Err(why)) => json_message(503, why),
                Err(e) => json_message(
                    503,
                    format!(
                        "sharding did not answer for counter {id} within {}s: {e}",
                        COUNTER_ASK_TIMEOUT.as_secs()
                    ),
                ),
            }
        }))
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
