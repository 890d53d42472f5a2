use serde::{Deserialize, Serialize};
use troupe_core::prelude::*;
use troupe_sharding::entity;

// Not serialisable: an entity's messages travel between nodes.
#[derive(Message)]
struct Increment;

#[derive(Message, Serialize, Deserialize)]
#[message(reply = Total)]
struct Get;

// A reply that is serialisable but not deserialisable.
#[derive(Serialize)]
struct Total(u64);

struct Counter(u64);
impl Actor for Counter {}

#[entity]
impl Counter {
    async fn increment(&mut self, _msg: Increment) {
        self.0 += 1;
    }

    async fn get(&mut self, _msg: Get, _ctx: &mut Context<Self>) -> Total {
        Total(self.0)
    }
}

fn main() {}
