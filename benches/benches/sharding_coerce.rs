//! Cluster sharding in coerce-rs (crate `coerce` 0.8, feature `sharding`):
//! the workloads of `sharding.rs`, side by side with coerce's own direct
//! `LocalActorRef` messages to the same actor type in the same run, so
//! that the ratios compare with Troupe's.
//!
//! ```sh
//! cargo bench --manifest-path benches/Cargo.toml --bench sharding_coerce
//! ```
//!
//! One node: a `RemoteActorSystem` built with `single_node()` (it is its
//! own leader, so the shard coordinator starts at once; no listener is
//! needed), persistence on coerce's `InMemoryStorageProvider` (shards and
//! the coordinator are persistent actors), 1,000 shards (coerce's
//! `DefaultAllocator` with `max_shards: 1000`; its default is 100), every
//! shard allocated and every entity alive before timing. Tokio runtime with
//! two workers (the size of Troupe's dispatcher on this machine),
//! the benchmark driving from `block_on` as `sharding.rs` does.
//!
//! coerce's sharded path per message (`Sharded::send`, and the tell below):
//! the message is serialised (`Message::as_bytes`), the handler name looked
//! up, an `EntityRequest` sent to the node's `ShardHost` actor, which hashes
//! the id to a shard and spawns a task that asks the `Shard` actor; the
//! shard looks up the message handler by name and the entity in its map and
//! spawns a task that deserialises the message and sends it to the entity's
//! `LocalActorRef` (for an ask, the result is serialised and sent back on a
//! oneshot). `Sharded` has no fire-and-forget method: the tell here is the
//! same `EntityRequest` without a result channel, sent with the public
//! `Sharding::notify_host` (what `Sharded::send` does minus the reply).
//! A new entity also writes a `StartEntity` event to the shard's journal.
//!
//! The activation figures (first message to 1,000,000 new entities, RSS
//! growth per idle entity) come from a second run of this binary that
//! skips the throughput phases (the same setup, all shards allocated and
//! 10,001 entities alive first): the sharded tells leave a heap of freed
//! task memory that new entities would reuse without RSS growing.
//! `COERCE_BENCH_NEW` sets the number of new entities (default 1,000,000),
//! `COERCE_BENCH_THREADS` the tokio workers (default: the cores).

#![allow(clippy::print_stdout)]

use async_trait::async_trait;
use coerce::actor::context::ActorContext;
use coerce::actor::message::{Handler, Message, MessageUnwrapErr, MessageWrapErr};
use coerce::actor::system::ActorSystem;
use coerce::actor::{
    Actor, ActorCreationErr, ActorFactory, ActorId, ActorRecipe, IntoActorId, LocalActorRef,
};
use coerce::persistent::journal::provider::inmemory::InMemoryStorageProvider;
use coerce::persistent::Persistence;
use coerce::remote::system::RemoteActorSystem;
use coerce::sharding::coordinator::allocation::DefaultAllocator;
use coerce::sharding::host::request::EntityRequest;
use coerce::sharding::{Sharded, Sharding};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tell: no payload, no reply.
struct Hit;

impl Message for Hit {
    type Result = ();

    fn as_bytes(&self) -> Result<Vec<u8>, MessageWrapErr> {
        Ok(Vec::new())
    }

    fn from_bytes(_: Vec<u8>) -> Result<Self, MessageUnwrapErr> {
        Ok(Hit)
    }

    fn read_remote_result(_: Vec<u8>) -> Result<(), MessageUnwrapErr> {
        Ok(())
    }

    fn write_remote_result(_: ()) -> Result<Vec<u8>, MessageWrapErr> {
        Ok(Vec::new())
    }
}

/// An ask: the entity's own count.
struct Count;

impl Message for Count {
    type Result = u64;

    fn as_bytes(&self) -> Result<Vec<u8>, MessageWrapErr> {
        Ok(Vec::new())
    }

    fn from_bytes(_: Vec<u8>) -> Result<Self, MessageUnwrapErr> {
        Ok(Count)
    }

    fn read_remote_result(b: Vec<u8>) -> Result<u64, MessageUnwrapErr> {
        let b: [u8; 8] = b
            .try_into()
            .map_err(|_| MessageUnwrapErr::DeserializationErr)?;
        Ok(u64::from_le_bytes(b))
    }

    fn write_remote_result(r: u64) -> Result<Vec<u8>, MessageWrapErr> {
        Ok(r.to_le_bytes().to_vec())
    }
}

/// The entity: counts hits into a shared counter (so that the bench can
/// tell when all were handled) and its own, as in `sharding.rs`.
struct Target {
    hits: u64,
    total: Arc<AtomicU64>,
}

impl Actor for Target {}

#[async_trait]
impl Handler<Hit> for Target {
    async fn handle(&mut self, _m: Hit, _ctx: &mut ActorContext) {
        self.hits += 1;
        self.total.fetch_add(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl Handler<Count> for Target {
    async fn handle(&mut self, _m: Count, _ctx: &mut ActorContext) -> u64 {
        self.hits
    }
}

/// coerce creates entities from a factory and a (serialisable) recipe.
struct TargetRecipe;

impl ActorRecipe for TargetRecipe {
    fn read_from_bytes(_: &Vec<u8>) -> Option<Self> {
        Some(TargetRecipe)
    }

    fn write_to_bytes(&self) -> Option<Vec<u8>> {
        Some(Vec::new())
    }
}

#[derive(Clone)]
struct TargetFactory {
    total: Arc<AtomicU64>,
}

#[async_trait]
impl ActorFactory for TargetFactory {
    type Actor = Target;
    type Recipe = TargetRecipe;

    async fn create(&self, _r: TargetRecipe) -> Result<Target, ActorCreationErr> {
        Ok(Target {
            hits: 0,
            total: self.total.clone(),
        })
    }
}

/// What a tell needs: the id and the recipe bytes (as `Sharding::get`
/// keeps them in a `Sharded`).
struct EntityHandle {
    id: ActorId,
    recipe: Option<Arc<Vec<u8>>>,
}

fn entity(id: impl IntoActorId) -> EntityHandle {
    EntityHandle {
        id: id.into_actor_id(),
        recipe: TargetRecipe.write_to_bytes().map(Arc::new),
    }
}

/// A sharded tell: `Sharded::send` without the result channel.
fn tell(sharding: &Sharding<TargetFactory>, e: &EntityHandle) {
    let message = Hit.as_bytes().unwrap();
    let message_type = sharding
        .system()
        .handler_name::<Target, Hit>()
        .expect("Hit handler registered");
    sharding
        .notify_host(EntityRequest {
            actor_id: e.id.clone(),
            message_type,
            message,
            recipe: e.recipe.clone(),
            result_channel: None,
        })
        .expect("notify host");
}

#[path = "support/memory.rs"]
mod memory;
use memory::rss_bytes;

async fn wait_total(total: &AtomicU64, want: u64) {
    while total.load(Ordering::Relaxed) < want {
        tokio::task::yield_now().await;
    }
}

fn main() {
    let threads: usize = std::env::var("COERCE_BENCH_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2)
        });
    let new_entities: usize = std::env::var("COERCE_BENCH_NEW")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let activation_only = std::env::var_os(ACTIVATION_ONLY).is_some();
    rt.block_on(run(new_entities, activation_only));
    if !activation_only {
        // The activation figures in a fresh process: the sharded tells
        // above leave a heap of freed task memory (about 1.6 GB for 2,000,000
        // messages in flight) that new entities would reuse unseen by RSS.
        let status = std::process::Command::new(std::env::current_exe().expect("exe"))
            .env(ACTIVATION_ONLY, "1")
            .env("COERCE_BENCH_NEW", new_entities.to_string())
            .env("COERCE_BENCH_THREADS", threads.to_string())
            .status()
            .expect("activation process");
        assert!(status.success(), "activation process: {status}");
    }
    // coerce's actors and the journal are not torn down: leave at once.
    std::process::exit(0);
}

const ACTIVATION_ONLY: &str = "COERCE_BENCH_ACTIVATION_ONLY";

async fn run(new_entities: usize, activation_only: bool) {
    let total = Arc::new(AtomicU64::new(0));
    let factory = TargetFactory {
        total: total.clone(),
    };
    let sys = ActorSystem::new().to_persistent(Persistence::from(InMemoryStorageProvider::new()));
    let f = factory.clone();
    let remote = RemoteActorSystem::builder()
        .with_actor_system(sys)
        .with_tag("bench")
        .with_id(1)
        .single_node()
        .with_actors(move |a| {
            a.with_actor(f)
                .with_handler::<Target, Hit>("bench.Hit")
                .with_handler::<Target, Count>("bench.Count")
        })
        .build()
        .await;
    let sharding = Sharding::<TargetFactory>::builder(remote.clone())
        .with_entity_type("bench-target")
        .with_allocator(DefaultAllocator { max_shards: 1000 })
        .build()
        .await;

    // Warm up: one entity alive, its shard allocated.
    let one_sharded: Sharded<Target> = sharding.get("one", Some(TargetRecipe));
    one_sharded.send(Count).await.expect("first ask");
    let one = entity("one");
    // The same actor type outside sharding: what a direct tell costs.
    let direct = spawn_twin(remote.actor_system(), &total).await;
    direct.send(Count).await.expect("first ask");

    if activation_only {
        // As in the full run: all 1,000 shards allocated and 10,001
        // entities alive before the new ones.
        for i in 0..10_000 {
            let s: Sharded<Target> = sharding.get(format!("rr-{i}"), Some(TargetRecipe));
            s.send(Count).await.unwrap();
        }
        activation(&sharding, &total, new_entities).await;
        return;
    }

    const N: u64 = 2_000_000;
    println!("coerce sharding bench: tell, {N} messages to one entity");
    let base = total.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for _ in 0..N {
        direct.notify(Hit).unwrap();
    }
    wait_total(&total, base + N).await;
    let direct_rate = N as f64 / t0.elapsed().as_secs_f64();
    let base = total.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for _ in 0..N {
        tell(&sharding, &one);
    }
    wait_total(&total, base + N).await;
    let sharded_rate = N as f64 / t0.elapsed().as_secs_f64();
    println!(
        "  direct LocalActorRef::notify {:>10.0} msg/s\n  sharded (ShardHost) tell     {:>10.0} msg/s  ({:.2}x direct)",
        direct_rate,
        sharded_rate,
        sharded_rate / direct_rate
    );

    // Round robin over 10,000 entities.
    const E: usize = 10_000;
    let refs: Vec<EntityHandle> = (0..E).map(|i| entity(format!("rr-{i}"))).collect();
    for i in 0..E {
        let s: Sharded<Target> = sharding.get(format!("rr-{i}"), Some(TargetRecipe));
        s.send(Count).await.unwrap();
    }
    let mut twins = Vec::with_capacity(E);
    for _ in 0..E {
        twins.push(spawn_twin(remote.actor_system(), &total).await);
    }
    let rounds = (N as usize) / E;
    let base = total.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for _ in 0..rounds {
        for a in &twins {
            a.notify(Hit).unwrap();
        }
    }
    wait_total(&total, base + N).await;
    let direct_rr = N as f64 / t0.elapsed().as_secs_f64();
    let base = total.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for _ in 0..rounds {
        for r in &refs {
            tell(&sharding, r);
        }
    }
    wait_total(&total, base + N).await;
    let sharded_rr = N as f64 / t0.elapsed().as_secs_f64();
    println!(
        "coerce sharding bench: tell, round robin over {E} entities\n  direct  {:>10.0} msg/s\n  sharded {:>10.0} msg/s  ({:.2}x direct)",
        direct_rr,
        sharded_rr,
        sharded_rr / direct_rr
    );

    // Ask round trip.
    const ASKS: usize = 200_000;
    let mut d = Vec::with_capacity(ASKS);
    for _ in 0..ASKS {
        let t = Instant::now();
        direct.send(Count).await.unwrap();
        d.push(t.elapsed());
    }
    let mut s = Vec::with_capacity(ASKS);
    for _ in 0..ASKS {
        let t = Instant::now();
        one_sharded.send(Count).await.unwrap();
        s.push(t.elapsed());
    }
    let (dp50, dmean) = stats(&mut d);
    let (sp50, smean) = stats(&mut s);
    println!(
        "coerce sharding bench: ask round trip ({ASKS} sequential)\n  direct  p50 {:>6.2} us  mean {:>6.2} us\n  sharded p50 {:>6.2} us  mean {:>6.2} us  (+{:.2} us p50)",
        dp50, dmean, sp50, smean, sp50 - dp50
    );
}

/// Activation and memory: the first message to `new_entities` new ones.
async fn activation(sharding: &Sharding<TargetFactory>, total: &AtomicU64, new_entities: usize) {
    let before = rss_bytes();
    let base = total.load(Ordering::Relaxed);
    let t0 = Instant::now();
    for i in 0..new_entities {
        let e = entity(format!("new-{i}"));
        tell(sharding, &e);
    }
    wait_total(total, base + new_entities as u64).await;
    let per = t0.elapsed().as_secs_f64() * 1e6 / new_entities as f64;
    let after = rss_bytes();
    println!(
        "coerce sharding bench: first message to {new_entities} new entities over 1000 shards\n  {:.2} us per entity; RSS +{:.0} bytes per idle entity ({} MB -> {} MB)",
        per,
        (after.saturating_sub(before)) as f64 / new_entities as f64,
        before / 1_000_000,
        after / 1_000_000
    );
}

/// An actor of the same type outside sharding, for the direct figures.
async fn spawn_twin(system: &ActorSystem, total: &Arc<AtomicU64>) -> LocalActorRef<Target> {
    system
        .new_anon_actor(Target {
            hits: 0,
            total: total.clone(),
        })
        .await
        .expect("spawn")
}

/// p50 and mean in microseconds.
fn stats(v: &mut [Duration]) -> (f64, f64) {
    v.sort();
    let p50 = v[v.len() / 2].as_secs_f64() * 1e6;
    let mean = v.iter().map(|d| d.as_secs_f64()).sum::<f64>() / v.len() as f64 * 1e6;
    (p50, mean)
}
