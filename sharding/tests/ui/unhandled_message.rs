use serde::{Deserialize, Serialize};
use troupe_core::prelude::*;
use troupe_sharding::{entity, EntityRef};

#[derive(Message, Serialize, Deserialize)]
struct Increment;

#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64)]
struct Get;

#[derive(Message, Serialize, Deserialize)]
struct Other;

struct Counter(u64);
impl Actor for Counter {}

#[entity]
impl Counter {
    async fn increment(&mut self, _msg: Increment) {
        self.0 += 1;
    }

    async fn get(&mut self, _msg: Get) -> u64 {
        self.0
    }
}

fn f(r: EntityRef<Counter>) {
    let _ = r.tell(Other);
    let _ = r.ask(Other);
}

fn main() {}
