use troupe_core::prelude::*;

// No `reply = ...`: the reply type is `()`.
#[derive(Message)]
struct Count;

struct Counter(u64);
impl Actor for Counter {}

#[handlers]
impl Counter {
    async fn count(&mut self, _msg: Count) -> u64 {
        self.0
    }
}

fn main() {}
