//! Bounded mailboxes, back-pressure and dead letters.

mod common;

use common::*;
use std::time::Duration;
use troupe_core::prelude::*;
use troupe_core::{rt, AskError, MailboxConfig, Props, TellError};

#[derive(Message)]
#[message(reply = ())]
struct Wait(async_channel::Receiver<()>);

#[derive(Message)]
struct Item(u32);

#[derive(Message)]
#[message(reply = Vec<u32>)]
struct Items;

#[derive(Default)]
struct Sink {
    items: Vec<u32>,
}
impl Actor for Sink {}

#[handlers]
impl Sink {
    async fn wait(&mut self, msg: Wait) {
        let _ = msg.0.recv().await;
    }
    async fn item(&mut self, msg: Item) {
        self.items.push(msg.0);
    }
    async fn items(&mut self, _msg: Items) -> Vec<u32> {
        self.items.clone()
    }
}

#[test]
fn bounded_mailbox_refuses_when_full_and_send_waits() {
    rt::block_on(async {
        let system = ActorSystem::new("bounded").unwrap();
        let sink = system
            .spawn_props(
                Props::new(Sink::default()).with_mailbox(MailboxConfig::Bounded { capacity: 3 }),
            )
            .unwrap();
        let (gate_tx, gate_rx) = async_channel::bounded(1);
        sink.tell(Wait(gate_rx)).unwrap();
        // The Wait message is being handled once the mailbox accepts three
        // more; until then keep retrying (the handler may not have started).
        let mut accepted = 0;
        while accepted < 3 {
            match sink.tell(Item(accepted)) {
                Ok(()) => accepted += 1,
                Err(TellError::MailboxFull(_)) => rt::yield_now().await,
                Err(e) => panic!("{e}"),
            }
        }
        eventually("mailbox full", || {
            matches!(sink.tell(Item(99)), Err(TellError::MailboxFull(Item(99))))
        })
        .await;
        assert_eq!(sink.ask(Items).await, Err(AskError::MailboxFull));
        // `send` waits for room instead of failing.
        let s = sink.clone();
        let sender = rt::spawn(async move {
            for i in 3..10 {
                s.send(Item(i)).await.unwrap();
            }
        });
        gate_tx.send(()).await.unwrap();
        within("sender", sender).await;
        // The last items may still fill the mailbox: an ask is refused
        // until there is room.
        let items = within("items", async {
            loop {
                match sink.ask(Items).await {
                    Err(AskError::MailboxFull) => rt::yield_now().await,
                    other => return other,
                }
            }
        })
        .await
        .unwrap();
        assert_eq!(items, (0..10).collect::<Vec<_>>());
        system.shutdown().await;
    });
}

#[test]
fn dead_letters_are_counted_and_published() {
    rt::block_on(async {
        let system = ActorSystem::new("dead").unwrap();
        let subscription = system.subscribe_dead_letters(16);
        let sink = system.spawn_named("sink", Sink::default()).unwrap();
        sink.stop();
        sink.wait_for_termination().await;
        let before = system.dead_letter_count();
        assert!(sink.tell(Item(1)).is_err());
        assert!(sink.tell(Item(2)).is_err());
        assert_eq!(system.dead_letter_count(), before + 2);
        let d = within("dead letter", subscription.recv()).await.unwrap();
        assert_eq!(d.recipient, "/user/sink");
        assert!(d.message_type.ends_with("Item"), "{}", d.message_type);
        assert!(within("second", subscription.recv()).await.is_some());
        // Many more are only counted (and logged at a limited rate).
        for i in 0..1000 {
            let _ = sink.tell(Item(i));
        }
        assert_eq!(system.dead_letter_count(), before + 1002);
        let _ = rt::timeout(Duration::from_millis(1), subscription.recv()).await;
        system.shutdown().await;
    });
}
