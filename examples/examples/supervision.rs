//! A worker that crashes on bad input and is restarted with exponential
//! backoff, with fresh state each time; a watcher hears when it finally
//! gives up.
//!
//! Run with `cargo run -p troupe-examples --example supervision`.

use std::time::Duration;
use troupe_core::prelude::*;
use troupe_core::{Backoff, Props, SupervisorStrategy};

/// A job: parse this text as a number and add it.
#[derive(Message)]
#[message(reply = u64)]
struct Job(String);

/// Sums numbers; panics on text that is not a number.
struct Worker {
    sum: u64,
}

impl Actor for Worker {
    async fn started(&mut self, _ctx: &mut Context<Self>) {
        tracing::info!("worker started with sum {}", self.sum);
    }
}

#[handlers]
impl Worker {
    async fn job(&mut self, job: Job, _ctx: &mut Context<Self>) -> u64 {
        let n: u64 = job.0.parse().expect("a job must be a number");
        self.sum += n;
        self.sum
    }
}

/// Watches the worker and reports its end.
struct Overseer {
    done: async_channel::Sender<StopReason>,
}

impl Actor for Overseer {}

#[derive(Message)]
struct Watch(ActorRef<Worker>);

#[handlers]
impl Overseer {
    async fn watch(&mut self, msg: Watch, ctx: &mut Context<Self>) {
        ctx.watch(&msg.0);
    }

    async fn terminated(&mut self, t: Terminated, _ctx: &mut Context<Self>) {
        tracing::info!("{} terminated: {}", t.actor, t.reason);
        let _ = self.done.try_send(t.reason);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    troupe_core::rt::block_on(async {
        let system = ActorSystem::new("supervision")?;

        // Restart from the factory (fresh state), waiting 100 ms, 200 ms,
        // 400 ms ... between restarts; more than 3 failures within 10 s
        // stop the worker for good.
        let strategy = SupervisorStrategy::restart()
            .with_limit(3, Duration::from_secs(10))
            .with_backoff(Backoff::exponential(
                Duration::from_millis(100),
                Duration::from_secs(2),
            ));
        let worker = system.spawn_props(
            Props::from_factory(|| Worker { sum: 0 })
                .with_name("worker")
                .with_supervisor(strategy),
        )?;

        let (done_tx, done_rx) = async_channel::bounded(1);
        let overseer = system.spawn(Overseer { done: done_tx });
        overseer.tell(Watch(worker.clone()))?;

        tracing::info!("sum = {}", worker.ask(Job("40".into())).await?);
        tracing::info!("sum = {}", worker.ask(Job("2".into())).await?);

        // A bad job: the handler panics, the ask fails, the worker restarts.
        let failed = worker.ask(Job("forty-two".into())).await;
        tracing::info!("bad job: {failed:?}");
        // Messages sent during the backoff wait; the new instance starts at 0.
        tracing::info!("sum after restart = {}", worker.ask(Job("1".into())).await?);

        // Three more failures in a row exceed the limit.
        for _ in 0..3 {
            let _ = worker.tell(Job("oops".into()));
        }
        let reason = done_rx.recv().await?;
        tracing::info!("the overseer saw the worker stop: {reason}");

        system.shutdown().await;
        Ok(())
    })
}
