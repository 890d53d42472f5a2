use troupe_core::prelude::*;

#[derive(Message)]
struct Ping;

struct Deaf;
impl Actor for Deaf {}

fn main() {
    let system = ActorSystem::new("x").unwrap();
    let deaf = system.spawn(Deaf);
    let _ = deaf.tell(Ping);
}
