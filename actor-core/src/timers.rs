//! Timers (single and periodic) and the receive timeout. Each is a small
//! task that sleeps and then sends a letter to the actor; the letter checks
//! that its timer is still current before the handler runs, so a timer
//! cancelled after its letter was queued never delivers.

use crate::actor::{Actor, Handler};
use crate::actor_ref::ActorRef;
use crate::context::Context;
use crate::letter::{HandlerFuture, Hdr, Letter, Node, Opened, UserLetter};
use crate::message::Message;
use crate::rt;
use crate::watch::ReceiveTimeout;
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A running timer; dropping it cancels the task.
pub(crate) struct TimerEntry {
    generation: u64,
    periodic: bool,
    _cancel: oneshot::Sender<()>,
}

/// Sleeps for `delay` unless cancelled first; true when the time elapsed.
async fn elapsed(delay: Duration, cancel: &mut oneshot::Receiver<()>) -> bool {
    futures_lite::future::or(
        async {
            rt::sleep(delay).await;
            true
        },
        async {
            let _ = cancel.await;
            false
        },
    )
    .await
}

impl<A: Actor> Context<A> {
    /// Sends `msg` to this actor once, after `delay`. Starting a timer with
    /// a key that is in use replaces that timer.
    pub fn start_single_timer<M: Message>(
        &mut self,
        key: impl Into<String>,
        msg: M,
        delay: Duration,
    ) where
        A: Handler<M>,
    {
        let key_for_task = key.into();
        let (generation, mut cancel) = self.new_timer(key_for_task.clone(), false);
        let me = self.myself().clone();
        rt::spawn(async move {
            if elapsed(delay, &mut cancel).await {
                let _ = me
                    .local_cell()
                    .expect("timers belong to local actors")
                    .enqueue(Node::new(TimerLetter {
                        key: key_for_task,
                        generation,
                        msg,
                    }));
            }
        });
    }

    /// Sends a clone of `msg` to this actor every `interval` (the first
    /// after one `interval`) until cancelled or stopped.
    pub fn start_periodic_timer<M: Message + Clone>(
        &mut self,
        key: impl Into<String>,
        msg: M,
        interval: Duration,
    ) where
        A: Handler<M>,
    {
        let key_for_task = key.into();
        let (generation, mut cancel) = self.new_timer(key_for_task.clone(), true);
        let me = self.myself().clone();
        rt::spawn(async move {
            while elapsed(interval, &mut cancel).await {
                let letter = Node::new(TimerLetter {
                    key: key_for_task.clone(),
                    generation,
                    msg: msg.clone(),
                });
                if me
                    .local_cell()
                    .expect("timers belong to local actors")
                    .enqueue(letter)
                    .is_err()
                {
                    return;
                }
            }
        });
    }

    /// Cancels the timer with this key; its message is not delivered even
    /// if it was already queued.
    pub fn cancel_timer(&mut self, key: &str) {
        if let Some(e) = self.extras_if_any() {
            e.timers.remove(key);
        }
    }

    /// True while the timer with this key is pending (a single timer stops
    /// being active once its message is handled).
    pub fn is_timer_active(&mut self, key: &str) -> bool {
        self.extras_if_any()
            .is_some_and(|e| e.timers.contains_key(key))
    }

    fn new_timer(&mut self, key: String, periodic: bool) -> (u64, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let ext = self.extras();
        ext.next_timer_generation += 1;
        let generation = ext.next_timer_generation;
        ext.timers.insert(
            key,
            TimerEntry {
                generation,
                periodic,
                _cancel: tx,
            },
        );
        (generation, rx)
    }
}

/// The letter a timer sends.
struct TimerLetter<M> {
    key: String,
    generation: u64,
    msg: M,
}

impl<A: Handler<M>, M: Message> Letter<A> for Node<A, TimerLetter<M>> {
    fn hdr_ptr(&mut self) -> *mut Hdr<A> {
        self.hdr_mut()
    }
    fn open(self: Box<Self>) -> Opened<A> {
        Opened::User(self)
    }
    fn type_name(&self) -> &'static str {
        M::manifest()
    }
}

impl<A: Handler<M>, M: Message> UserLetter<A> for Node<A, TimerLetter<M>> {
    fn deliver<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> HandlerFuture<'a> {
        let TimerLetter {
            key,
            generation,
            msg,
        } = self.into_body();
        let current = match ctx.extras_if_any() {
            Some(e) => match e.timers.get(&key) {
                Some(t) if t.generation == generation => {
                    if !t.periodic {
                        e.timers.remove(&key);
                    }
                    true
                }
                _ => false,
            },
            None => false,
        };
        HandlerFuture::new(async move {
            if current {
                ctx.touch();
                let _ = actor.handle(msg, ctx).await;
            }
        })
    }
    fn attach_reply(&mut self, _reply: &mut dyn Any) {}
}

static NEXT_RECEIVE_TIMEOUT_ID: AtomicU64 = AtomicU64::new(1);

/// The receive timeout of one actor.
pub(crate) struct ReceiveTimeoutState {
    id: u64,
    timeout: Duration,
    pub(crate) last_activity: Instant,
    _cancel: oneshot::Sender<()>,
}

impl ReceiveTimeoutState {
    pub(crate) fn start<A: Handler<ReceiveTimeout>>(me: ActorRef<A>, timeout: Duration) -> Self {
        let id = NEXT_RECEIVE_TIMEOUT_ID.fetch_add(1, Ordering::Relaxed);
        ReceiveTimeoutState {
            id,
            timeout,
            last_activity: Instant::now(),
            _cancel: spawn_check(me, id, timeout),
        }
    }
}

/// Starts the task that checks for idleness after `wait`.
fn spawn_check<A: Handler<ReceiveTimeout>>(
    me: ActorRef<A>,
    id: u64,
    wait: Duration,
) -> oneshot::Sender<()> {
    let (tx, mut rx) = oneshot::channel();
    rt::spawn(async move {
        if elapsed(wait, &mut rx).await {
            let _ = me
                .local_cell()
                .expect("timers belong to local actors")
                .enqueue(Node::new(ReceiveTimeoutCheck { id }));
        }
    });
    tx
}

/// Sent by the check task: fire if the actor has really been idle.
struct ReceiveTimeoutCheck {
    id: u64,
}

impl<A: Handler<ReceiveTimeout>> Letter<A> for Node<A, ReceiveTimeoutCheck> {
    fn hdr_ptr(&mut self) -> *mut Hdr<A> {
        self.hdr_mut()
    }
    fn open(self: Box<Self>) -> Opened<A> {
        Opened::User(self)
    }
    fn type_name(&self) -> &'static str {
        ReceiveTimeout::manifest()
    }
}

impl<A: Handler<ReceiveTimeout>> UserLetter<A> for Node<A, ReceiveTimeoutCheck> {
    fn deliver<'a>(
        self: Box<Self>,
        actor: &'a mut A,
        ctx: &'a mut Context<A>,
    ) -> HandlerFuture<'a> {
        let me = ctx.myself().clone();
        let fire = match ctx.extras_if_any().and_then(|e| e.receive_timeout.as_mut()) {
            Some(rt) if rt.id == self.body.id => {
                let now = Instant::now();
                let idle = now.duration_since(rt.last_activity);
                if idle >= rt.timeout {
                    rt.last_activity = now;
                    rt._cancel = spawn_check(me, rt.id, rt.timeout);
                    true
                } else {
                    rt._cancel = spawn_check(me, rt.id, rt.timeout - idle);
                    false
                }
            }
            _ => false,
        };
        HandlerFuture::new(async move {
            if fire {
                actor.handle(ReceiveTimeout, ctx).await;
            }
        })
    }
    fn attach_reply(&mut self, _reply: &mut dyn Any) {}
}
