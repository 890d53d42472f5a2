use serde::{Deserialize, Serialize};
use troupe_core::prelude::*;
use troupe_sharding::{entity, Entity};

#[derive(Message, Serialize, Deserialize)]
struct Ping;

// Unknown option
struct A;
impl Actor for A {}
#[entity(kind = "counter")]
impl A {
    async fn ping(&mut self, _msg: Ping) {}
}

// Not a string literal (B, C)
struct B;
impl Actor for B {}
#[entity(name = counter)]
impl B {
    async fn ping(&mut self, _msg: Ping) {}
}

struct C;
impl Actor for C {}
#[entity(name = 7)]
impl C {
    async fn ping(&mut self, _msg: Ping) {}
}

// Empty
struct D;
impl Actor for D {}
#[entity(name = "")]
impl D {
    async fn ping(&mut self, _msg: Ping) {}
}

// A character outside [A-Za-z0-9_.-]
struct E;
impl Actor for E {}
#[entity(name = "shop/counter")]
impl E {
    async fn ping(&mut self, _msg: Ping) {}
}

// No value
struct F;
impl Actor for F {}
#[entity(name)]
impl F {
    async fn ping(&mut self, _msg: Ping) {}
}

// Given twice
struct G;
impl Actor for G {}
#[entity(name = "a", name = "b")]
impl G {
    async fn ping(&mut self, _msg: Ping) {}
}

// Not `key = value`
struct H;
impl Actor for H {}
#[entity("counter")]
impl H {
    async fn ping(&mut self, _msg: Ping) {}
}

// Only the attribute's error is shown: the entity is still declared.
fn main() {
    let _ = [A::TYPE_NAME, B::TYPE_NAME, C::TYPE_NAME, D::TYPE_NAME];
    let _ = [E::TYPE_NAME, F::TYPE_NAME, G::TYPE_NAME, H::TYPE_NAME];
}
