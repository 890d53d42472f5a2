use serde::{Deserialize, Serialize};
use troupe_core::prelude::*;
use troupe_sharding::entity;

#[derive(Message, Serialize, Deserialize)]
struct Ping;

// An entity type has one stable name, so it cannot be generic.
struct Generic<T>(T);
impl<T: Send + 'static> Actor for Generic<T> {}

#[entity]
impl<T: Send + 'static> Generic<T> {
    async fn ping(&mut self, _msg: Ping) {}
}

// The default name is the type's name, which must be a valid entity name.
struct Zähler;
impl Actor for Zähler {}

#[entity]
impl Zähler {
    async fn ping(&mut self, _msg: Ping) {}
}

// Not on a trait impl.
struct Counter;
impl Actor for Counter {}

#[entity]
impl Handler<Ping> for Counter {
    async fn handle(&mut self, _msg: Ping, _ctx: &mut Context<Self>) {}
}

// The handlers' own checks apply.
struct Pinger;
impl Actor for Pinger {}

#[entity]
impl Pinger {
    async fn ping(&self, _msg: Ping) {}
}

fn main() {}
