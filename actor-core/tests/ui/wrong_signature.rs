use troupe_core::prelude::*;

#[derive(Message)]
struct Ping;

struct Pinger;
impl Actor for Pinger {}

#[handlers]
impl Pinger {
    async fn ping(&self, _msg: Ping) {}
}

fn main() {}
