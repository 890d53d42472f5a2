use troupe_core::prelude::*;

struct Ping;

struct Pinger;
impl Actor for Pinger {}

#[handlers]
impl Pinger {
    async fn ping(&mut self, _msg: Ping) {}
}

fn main() {}
