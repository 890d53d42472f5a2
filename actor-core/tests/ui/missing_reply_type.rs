use troupe_core::prelude::*;

#[derive(Message)]
#[message(reply)]
struct Get;

fn main() {}
