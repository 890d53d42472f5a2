//! A counter actor: tell, ask and an orderly shutdown.
//!
//! Run with `cargo run -p troupe-examples --example hello`.

use troupe_core::prelude::*;

/// Adds to the counter; replies with nothing.
#[derive(Message)]
struct Increment {
    by: u64,
}

/// Asks for the current value.
#[derive(Message)]
#[message(reply = u64)]
struct Get;

/// The actor's state: just a number.
#[derive(Default)]
struct Counter {
    value: u64,
}

impl Actor for Counter {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        tracing::info!("counter {} started", ctx.myself());
    }

    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        tracing::info!("counter stopped at {}", self.value);
    }
}

#[handlers]
impl Counter {
    async fn increment(&mut self, msg: Increment, _ctx: &mut Context<Self>) {
        self.value += msg.by;
    }

    async fn get(&mut self, _msg: Get, _ctx: &mut Context<Self>) -> u64 {
        self.value
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();

    troupe_core::rt::block_on(async {
        let system = ActorSystem::new("hello")?;
        let counter = system.spawn_named("counter", Counter::default())?;

        // Fire and forget: each tell queues a message and returns at once.
        for _ in 0..10 {
            counter.tell(Increment { by: 1 })?;
        }

        // Request/response: the ask is handled after the ten tells, since
        // messages from one sender arrive in order.
        let value = counter.ask(Get).await?;
        tracing::info!("the counter says {value}");
        assert_eq!(value, 10);

        system.shutdown().await;
        Ok(())
    })
}
