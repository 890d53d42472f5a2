//! The singleton proxy: finds the current instance (by asking the oldest
//! member's manager), forwards messages to it, and buffers them while the
//! instance is unknown or moving.

use crate::cluster::Cluster;
use crate::member::{self, OldestAmong};
use crate::singleton::manager::{manager_name, SingletonManager, ASK_TIMEOUT};
use crate::singleton::protocol::{Moving, WhereIsSingleton};
use crate::singleton::settings::ClusterSingletonSettings;
use std::collections::VecDeque;
use troupe_core::prelude::*;
use troupe_core::{rt, AskError, LogLimit, TellError};

/// A message on its way to the singleton: what to do with the instance.
type Delivery<A> = Box<dyn FnOnce(&ActorRef<A>) + Send>;

/// Sends to the singleton `A` wherever it runs. Clones share the proxy.
pub struct SingletonProxy<A: Actor> {
    actor: ActorRef<ProxyActor<A>>,
}

impl<A: Actor> Clone for SingletonProxy<A> {
    fn clone(&self) -> Self {
        SingletonProxy {
            actor: self.actor.clone(),
        }
    }
}

impl<A: Actor> SingletonProxy<A> {
    pub(crate) fn start(
        system: &ActorSystem,
        cluster: &Cluster,
        name: &str,
        settings: ClusterSingletonSettings,
    ) -> Result<Self, crate::cluster::ClusterError> {
        let actor = system.spawn(ProxyActor::<A> {
            cluster: cluster.clone(),
            manager: manager_name(name),
            settings,
            target: None,
            buffer: VecDeque::new(),
            dropped: 0,
            moves: 0,
            drop_log: LogLimit::per_second(),
            looking: false,
        });
        Ok(SingletonProxy { actor })
    }

    /// Sends `msg` to the singleton (buffered while it is unknown). The
    /// message type must be registered for remoting (`system.register::<A, M>()`).
    /// Fails only if the proxy has stopped (the system is shutting down);
    /// the message is then dropped.
    pub fn tell<M>(&self, msg: M) -> Result<(), TellError<()>>
    where
        M: Message,
        A: Handler<M>,
    {
        let delivery: Delivery<A> = Box::new(move |target: &ActorRef<A>| {
            if let Err(e) = target.tell(msg) {
                tracing::warn!(
                    "singleton proxy could not deliver a `{}`: {e}",
                    M::manifest()
                );
            }
        });
        self.actor
            .tell(Deliver(delivery))
            .map_err(|_| TellError::Stopped(()))
    }

    /// Asks the singleton (buffered while it is unknown); the timeout
    /// counts from when the message reaches the instance.
    pub async fn ask<M>(&self, msg: M) -> Result<M::Reply, AskError>
    where
        M: Message,
        A: Handler<M>,
    {
        let (tx, rx) = oneshot::channel();
        let delivery: Delivery<A> = Box::new(move |target: &ActorRef<A>| {
            let ask = target.ask(msg);
            rt::spawn(async move {
                let _ = tx.send(ask.await);
            });
        });
        if self.actor.tell(Deliver(delivery)).is_err() {
            return Err(AskError::Stopped);
        }
        rx.await.unwrap_or(Err(AskError::Stopped))
    }

    /// Messages dropped so far because the buffer was full.
    pub async fn dropped(&self) -> u64 {
        self.actor.ask(Dropped).await.unwrap_or(0)
    }
}

#[derive(Message)]
struct Deliver<A: Actor>(Delivery<A>);

#[derive(Debug, Clone, Copy, Message)]
struct Identify;

/// Where the instance is, as answered to the identify of `moves`.
#[derive(Debug, Message)]
struct Found {
    path: Option<String>,
    moves: u64,
}

#[derive(Debug, Clone, Copy, Message)]
#[message(reply = u64)]
struct Dropped;

pub(crate) struct ProxyActor<A: Actor> {
    cluster: Cluster,
    manager: String,
    settings: ClusterSingletonSettings,
    target: Option<ActorRef<A>>,
    buffer: VecDeque<Delivery<A>>,
    dropped: u64,
    /// `Moving` warnings handled so far: an answer to an identify sent
    /// before the last one may name the instance that is moving away.
    moves: u64,
    drop_log: LogLimit,
    looking: bool,
}

impl<A: Actor> Actor for ProxyActor<A> {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.start_periodic_timer("identify", Identify, self.settings.identify_interval);
        self.identify(ctx);
    }
}

impl<A: Actor> ProxyActor<A> {
    /// Asks the oldest member's manager where the instance is.
    fn identify(&mut self, ctx: &mut Context<Self>) {
        if self.target.is_some() || self.looking {
            return;
        }
        self.looking = true;
        let cluster = self.cluster.clone();
        let role = self.settings.role.clone();
        let manager = self.manager.clone();
        let me = ctx.myself().clone();
        let moves = self.moves;
        let system = ctx.system();
        let proxy = system
            .remoting()
            .map(|r| format!("{}{}", r.address(), me.path()))
            .unwrap_or_default();
        rt::spawn(async move {
            let found = async {
                let state = cluster.state().await.ok()?;
                // Where the managers agree the singleton runs.
                let oldest =
                    member::oldest(&state.members, role.as_deref(), OldestAmong::UpOrLeaving)?
                        .node
                        .clone();
                let path = format!("{}/system/{manager}", oldest.address);
                let mgr = system.resolve::<SingletonManager<A>>(&path).ok()?;
                mgr.ask_timeout(WhereIsSingleton { proxy }, ASK_TIMEOUT)
                    .await
                    .ok()?
            }
            .await;
            let _ = me.tell(Found { path: found, moves });
        });
    }

    fn flush(&mut self) {
        if let Some(t) = &self.target {
            while let Some(d) = self.buffer.pop_front() {
                d(t);
            }
        }
    }
}

#[handlers]
impl<A: Actor> ProxyActor<A> {
    async fn deliver(&mut self, d: Deliver<A>, ctx: &mut Context<Self>) {
        match &self.target {
            Some(t) => (d.0)(t),
            None => {
                if self.buffer.len() >= self.settings.buffer_size.max(1) {
                    self.buffer.pop_front();
                    self.dropped += 1;
                    if self.drop_log.allow() {
                        tracing::warn!(
                            "singleton not available and the proxy's buffer ({}) is full: dropped the oldest message ({} so far)",
                            self.settings.buffer_size,
                            self.dropped
                        );
                    }
                }
                self.buffer.push_back(d.0);
                self.identify(ctx);
            }
        }
    }

    async fn identify_tick(&mut self, _m: Identify, ctx: &mut Context<Self>) {
        self.identify(ctx);
    }

    async fn found(&mut self, f: Found, ctx: &mut Context<Self>) {
        self.looking = false;
        if f.moves != self.moves {
            // Asked before the instance started moving: it may name the
            // old one, which stops after what it already has. Ask again.
            self.identify(ctx);
            return;
        }
        let Some(path) = f.path else { return };
        match ctx.system().resolve::<A>(&path) {
            Ok(r) => {
                tracing::debug!("singleton proxy found {r}");
                ctx.watch(&r);
                self.target = Some(r);
                self.flush();
            }
            Err(e) => tracing::warn!("singleton proxy cannot use {path}: {e}"),
        }
    }

    async fn terminated(&mut self, t: Terminated, ctx: &mut Context<Self>) {
        if self.target.as_ref().is_some_and(|r| r.to_any() == t.actor) {
            tracing::debug!(
                "singleton {} is gone ({}); looking for the next",
                t.actor,
                t.reason
            );
            self.target = None;
            self.identify(ctx);
        }
    }

    async fn moving(&mut self, _m: Moving, ctx: &mut Context<Self>) {
        // Buffer from now on, until the next instance is found.
        self.moves += 1;
        if self.target.take().is_some() {
            tracing::debug!("the singleton is moving; buffering");
        }
        self.identify(ctx);
    }

    async fn dropped_count(&mut self, _m: Dropped, _ctx: &mut Context<Self>) -> u64 {
        self.dropped
    }
}
