use troupe_core::prelude::*;

#[derive(Message)]
#[message(reply = u64)]
struct Get;

struct Store;
impl Actor for Store {}

#[handlers]
impl Store {
    async fn get(&mut self, _msg: Get, _ctx: &mut Context<Self>) -> String {
        String::new()
    }
}

fn main() {}
