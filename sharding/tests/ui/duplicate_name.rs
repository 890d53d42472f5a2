use serde::{Deserialize, Serialize};
use troupe_core::prelude::*;
use troupe_sharding::entity;

#[derive(Message, Serialize, Deserialize)]
struct Ping;

struct Counter;
impl Actor for Counter {}

#[entity(name = "counter")]
impl Counter {
    async fn ping(&mut self, _msg: Ping) {}
}

struct OtherCounter;
impl Actor for OtherCounter {}

#[entity(name = "counter")]
impl OtherCounter {
    async fn ping(&mut self, _msg: Ping) {}
}

// The default name is the type's name: `Counter2` is taken twice too.
struct Counter2;
impl Actor for Counter2 {}

#[entity]
impl Counter2 {
    async fn ping(&mut self, _msg: Ping) {}
}

struct Third;
impl Actor for Third {}

#[entity(name = "Counter2")]
impl Third {
    async fn ping(&mut self, _msg: Ping) {}
}

fn main() {}
