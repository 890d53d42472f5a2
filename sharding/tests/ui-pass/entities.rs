use serde::{Deserialize, Serialize};
use troupe_core::prelude::*;
use troupe_sharding::{entity, Entity};

#[derive(Message, Serialize, Deserialize)]
#[message(reply = u64)]
struct Increment {
    by: u64,
}

#[derive(Message, Serialize, Deserialize)]
struct Reset;

#[derive(Default)]
struct Counter {
    value: u64,
}
impl Actor for Counter {}

#[entity]
impl Counter {
    async fn increment(&mut self, msg: Increment, _ctx: &mut Context<Self>) -> u64 {
        self.value += msg.by;
        self.value
    }

    async fn reset(&mut self, _msg: Reset) {
        self.value = 0;
    }

    /// Not a handler: associated constants and types pass through.
    const START: u64 = 0;
}

struct Cart;
impl Actor for Cart {}

#[entity(name = "shop.cart-v2_x")]
impl Cart {
    async fn reset(&mut self, _msg: Reset) {}
}

// Names that differ only in punctuation do not collide.
struct CartB;
impl Actor for CartB {}

#[entity(name = "shop_cart-v2.x")]
impl CartB {
    async fn reset(&mut self, _msg: Reset) {}
}

// The same name in another module compiles (the runtime refuses it when
// both are started).
mod other {
    use super::Reset;
    use troupe_core::prelude::*;
    use troupe_sharding::entity;

    pub struct Counter;
    impl Actor for Counter {}

    #[entity]
    impl Counter {
        async fn reset(&mut self, _msg: Reset) {}
    }
}

// Handlers in a plain `#[handlers]` block next to the entity's.
#[handlers]
impl Cart {
    async fn increment(&mut self, msg: Increment) -> u64 {
        msg.by
    }
}

fn main() {
    assert_eq!(Counter::TYPE_NAME, "Counter");
    assert_eq!(Cart::TYPE_NAME, "shop.cart-v2_x");
    assert_eq!(CartB::TYPE_NAME, "shop_cart-v2.x");
    assert_eq!(other::Counter::TYPE_NAME, "Counter");
    assert_eq!(Counter::START, 0);
}
