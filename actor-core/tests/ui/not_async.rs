use troupe_core::prelude::*;

#[derive(Message)]
struct Ping;

struct Pinger;
impl Actor for Pinger {}

#[handlers]
impl Pinger {
    fn ping(&mut self, _msg: Ping, _ctx: &mut Context<Self>) {}
}

fn main() {}
