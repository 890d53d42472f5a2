//! `Context`: what an actor can do besides handling its message.

use crate::actor::{Actor, Handler};
use crate::actor_ref::{ActorRef, AnyActorRef};
use crate::cell::ActorCell;
use crate::error::SpawnError;
use crate::letter::{Envelope, Letter, Node, UserLetter};
use crate::message::Message;
use crate::props::Props;
use crate::supervision::RestartStats;
use crate::system::ActorSystem;
use crate::system_message::{Notifier, SystemMessage};
use crate::timers::{ReceiveTimeoutState, TimerEntry};
use crate::watch::{ReceiveTimeout, StopReason, Terminated};
use std::any::Any;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The actor's view of the runtime, passed to every handler and hook.
///
/// ```
/// use std::time::Duration;
/// use troupe_core::prelude::*;
///
/// #[derive(Message, Clone)]
/// struct Tick;
///
/// struct Clock { ticks: u64 }
///
/// impl Actor for Clock {
///     async fn started(&mut self, ctx: &mut Context<Self>) {
///         ctx.start_periodic_timer("tick", Tick, Duration::from_secs(1));
///     }
/// }
///
/// #[handlers]
/// impl Clock {
///     async fn tick(&mut self, _msg: Tick, ctx: &mut Context<Self>) {
///         self.ticks += 1;
///         if self.ticks == 10 {
///             ctx.stop();
///         }
///     }
/// }
/// ```
pub struct Context<A: Actor> {
    myself: ActorRef<A>,
    /// Everything an actor may never use, allocated on first use so that
    /// idle actors stay small.
    extras: Option<Box<Extras<A>>>,
}

pub(crate) struct Extras<A: Actor> {
    /// Set by `stash` while a handler runs, so that the handler's envelope
    /// hands its reply channel to the stashed copy.
    stashed_current: bool,
    stash: Vec<Box<dyn UserLetter<A>>>,
    unstash_requested: bool,
    /// Actors this one watches, by uid.
    watching: HashMap<u64, AnyActorRef>,
    /// Actors watching this one.
    watchers: Vec<(u64, Notifier)>,
    pub(crate) timers: HashMap<String, TimerEntry>,
    pub(crate) next_timer_generation: u64,
    pub(crate) receive_timeout: Option<ReceiveTimeoutState>,
    restarts: RestartStats,
    /// The sender of the message being handled, if it was sent with one.
    sender: Option<AnyActorRef>,
    /// User letters set aside while the children stop for a restart.
    pub(crate) held: Vec<Box<dyn Letter<A>>>,
}

impl<A: Actor> Default for Extras<A> {
    fn default() -> Self {
        Extras {
            stashed_current: false,
            stash: Vec::new(),
            unstash_requested: false,
            watching: HashMap::new(),
            watchers: Vec::new(),
            timers: HashMap::new(),
            next_timer_generation: 0,
            receive_timeout: None,
            restarts: RestartStats::default(),
            sender: None,
            held: Vec::new(),
        }
    }
}

impl<A: Actor> Context<A> {
    pub(crate) fn new(myself: ActorRef<A>) -> Self {
        Context {
            myself,
            extras: None,
        }
    }

    pub(crate) fn extras_if_any(&mut self) -> Option<&mut Extras<A>> {
        self.extras.as_deref_mut()
    }

    /// The letters set aside for a restart, in the order they came.
    pub(crate) fn take_held(&mut self) -> Vec<Box<dyn Letter<A>>> {
        self.extras
            .as_mut()
            .map(|e| std::mem::take(&mut e.held))
            .unwrap_or_default()
    }

    pub(crate) fn extras(&mut self) -> &mut Extras<A> {
        self.extras.get_or_insert_with(Default::default)
    }

    fn cell(&self) -> &std::sync::Arc<ActorCell<A>> {
        self.myself
            .local_cell()
            .expect("a context always belongs to a local actor")
    }

    /// The sender of the message being handled, when it was sent with
    /// [`ActorRef::tell_from`] (locally or from another node); `None`
    /// otherwise. A stashed message loses its sender.
    pub fn sender(&self) -> Option<&AnyActorRef> {
        self.extras.as_ref().and_then(|e| e.sender.as_ref())
    }

    pub(crate) fn set_sender(&mut self, sender: Option<AnyActorRef>) {
        match sender {
            Some(s) => self.extras().sender = Some(s),
            None => {
                if let Some(e) = self.extras.as_mut() {
                    e.sender = None;
                }
            }
        }
    }

    /// This actor's own reference.
    pub fn myself(&self) -> &ActorRef<A> {
        &self.myself
    }

    /// The actor system this actor lives in.
    pub fn system(&self) -> ActorSystem {
        ActorSystem::from_shared(self.cell().core.system.clone())
    }

    /// The parent (the `/user` or `/system` guardian for top-level actors).
    pub fn parent(&self) -> Option<AnyActorRef> {
        self.cell().core.parent.clone().map(AnyActorRef::from_local)
    }

    /// The children that have not terminated yet, except unlisted ones
    /// (see [`spawn_unlisted`](Self::spawn_unlisted)).
    pub fn children(&self) -> Vec<AnyActorRef> {
        self.cell().core.children()
    }

    /// The child with this name, if it is alive: a listed one, else an
    /// unlisted one that the finder set with
    /// [`find_unlisted_children_with`](Self::find_unlisted_children_with)
    /// returns.
    pub fn child(&self, name: &str) -> Option<AnyActorRef> {
        self.cell().core.child(name)
    }

    /// Spawns a child with a generated name.
    pub fn spawn<C: Actor>(&mut self, actor: C) -> Result<ActorRef<C>, SpawnError> {
        self.spawn_props(Props::new(actor))
    }

    /// Spawns a child from `props`. Fails if the name is taken among this
    /// actor's listed children or if this actor is stopping.
    pub fn spawn_props<C: Actor>(&mut self, props: Props<C>) -> Result<ActorRef<C>, SpawnError> {
        let me = self.myself.to_any();
        ActorCell::spawn(&self.cell().core.system, Some(&me), props, false)
    }

    /// Spawns a child that this actor keeps track of itself, for an actor
    /// with very many children (a cluster shard and its entities): the
    /// runtime keeps no entry for it, only a count, which saves each child
    /// 16 to 34 bytes and its spawn and stop a lock and a hash-table
    /// update in this actor's cell. In return:
    /// - its name is not checked against its siblings' (two unlisted
    ///   children may share a name, e.g. a new incarnation while the old
    ///   one is terminating);
    /// - [`children`](Self::children) does not return it, and neither
    ///   [`child`](Self::child) nor an actor path (a message or a watch
    ///   from another node) finds it unless this actor sets a finder with
    ///   [`find_unlisted_children_with`](Self::find_unlisted_children_with);
    /// - when this actor stops or restarts, the runtime does not stop it:
    ///   this actor must, in [`Actor::stopping`](crate::Actor::stopping)
    ///   (before a stop) and [`Actor::stopped`](crate::Actor::stopped)
    ///   (before a restart). The runtime still waits for every unlisted
    ///   child to terminate before this actor terminates or restarts, so
    ///   one that is never stopped (say, because that hook panicked before
    ///   it got to it) keeps this actor from terminating.
    ///
    /// It is otherwise a child: its path is under this actor, its
    /// escalated failures come here, and
    /// [`watch_children`](Self::watch_children) reports its termination.
    pub fn spawn_unlisted<C: Actor>(&mut self, props: Props<C>) -> Result<ActorRef<C>, SpawnError> {
        let me = self.myself.to_any();
        ActorCell::spawn(&self.cell().core.system, Some(&me), props, true)
    }

    /// Lets [`child`](Self::child) and actor paths find this actor's
    /// unlisted children: `find` gets a name and returns the running
    /// unlisted child of that name, if any (from the table this actor
    /// keeps them in). It is called on the thread that looks the path up,
    /// not in this actor, and is dropped when this actor stops.
    pub fn find_unlisted_children_with(
        &mut self,
        find: impl Fn(&str) -> Option<AnyActorRef> + Send + Sync + 'static,
    ) {
        self.cell()
            .core
            .set_unlisted_finder(std::sync::Arc::new(find));
    }

    /// Stops this actor once the current handler returns. Messages still
    /// queued go to dead letters.
    pub fn stop(&mut self) {
        self.myself.stop();
    }

    /// Stops a child (or any actor).
    pub fn stop_child(&mut self, child: &AnyActorRef) {
        child.stop();
    }

    /// Watches `other`: this actor gets [`Terminated`] once `other` stops,
    /// also if it has already stopped.
    pub fn watch<B: Actor>(&mut self, other: &ActorRef<B>)
    where
        A: Handler<Terminated>,
    {
        self.watch_any(&other.to_any());
    }

    /// Watches every child of this actor, present and future: this actor
    /// gets a [`Terminated`] for each child that stops, without watching
    /// each one. Nothing is kept per child, so a parent of very many
    /// short-lived children (a shard of entities, a pool) saves a watch
    /// per child. A child that is also watched with [`watch`](Self::watch)
    /// is reported once. Lasts until this actor stops; calling it again
    /// does nothing.
    ///
    /// ```
    /// use troupe_core::prelude::*;
    ///
    /// struct Worker;
    /// impl Actor for Worker {}
    ///
    /// struct Pool;
    /// impl Actor for Pool {
    ///     async fn started(&mut self, ctx: &mut Context<Self>) {
    ///         ctx.watch_children();
    ///         let _ = ctx.spawn(Worker);
    ///     }
    /// }
    ///
    /// #[handlers]
    /// impl Pool {
    ///     async fn on_terminated(&mut self, t: Terminated) {
    ///         println!("{} stopped", t.actor.path());
    ///     }
    /// }
    /// ```
    pub fn watch_children(&mut self)
    where
        A: Handler<Terminated>,
    {
        if let (Some(notice), Some(cell)) = (self.myself.child_notice(), self.myself.local_cell()) {
            cell.core.set_child_notice(notice);
        }
    }

    /// Watches an actor of unknown type.
    pub fn watch_any(&mut self, other: &AnyActorRef)
    where
        A: Handler<Terminated>,
    {
        let target = other.uid();
        if self
            .extras()
            .watching
            .insert(target, other.clone())
            .is_some()
        {
            return;
        }
        let me = self.myself.clone();
        let watcher = me.uid();
        let notify: Notifier = Box::new(move |t: Terminated| me.deliver_terminated(t));
        if let Some(remote) = other.remote() {
            match self.cell().core.system.remote.get() {
                Some(remoting) => remoting.watch.watch(remote, watcher, notify),
                None => notify(Terminated {
                    actor: other.clone(),
                    reason: StopReason::NodeLost("remoting is not enabled on this system".into()),
                }),
            }
            return;
        }
        if let Err(SystemMessage::Watch { notify, .. }) =
            other.send_system(SystemMessage::Watch { watcher, notify })
        {
            notify(Terminated {
                actor: other.clone(),
                reason: other.core().final_reason(),
            });
        }
    }

    /// Stops watching; a `Terminated` for it that is already on its way is
    /// dropped.
    pub fn unwatch(&mut self, other: &AnyActorRef) {
        if let Some(ext) = self.extras.as_mut() {
            if ext.watching.remove(&other.uid()).is_some() {
                if let Some(remote) = other.remote() {
                    if let Some(remoting) = self
                        .myself
                        .local_cell()
                        .and_then(|c| c.core.system.remote.get())
                    {
                        remoting.watch.unwatch(remote, self.myself.uid());
                    }
                    return;
                }
                let _ = other.send_system(SystemMessage::Unwatch {
                    watcher: self.myself.uid(),
                });
            }
        }
    }

    /// Stops every watch this actor holds, as it stops: the watched actors
    /// (and, for remote ones, the remote watch and the watched node) forget
    /// it instead of keeping an entry for a watcher that is gone.
    pub(crate) fn unwatch_all(&mut self) {
        let watching: Vec<AnyActorRef> = self
            .extras
            .as_ref()
            .map(|e| e.watching.values().cloned().collect())
            .unwrap_or_default();
        for other in &watching {
            self.unwatch(other);
        }
    }

    /// True when a `Terminated` for `uid` is still wanted (and forgets the
    /// watch, since each watch delivers once).
    pub(crate) fn take_watch(&mut self, uid: u64) -> bool {
        self.extras
            .as_mut()
            .is_some_and(|e| e.watching.remove(&uid).is_some())
    }

    pub(crate) fn add_watcher(&mut self, watcher: u64, notify: Notifier) {
        let ext = self.extras();
        if !ext.watchers.iter().any(|(w, _)| *w == watcher) {
            ext.watchers.push((watcher, notify));
        }
    }

    pub(crate) fn remove_watcher(&mut self, watcher: u64) {
        if let Some(ext) = self.extras.as_mut() {
            ext.watchers.retain(|(w, _)| *w != watcher);
        }
    }

    pub(crate) fn take_watchers(&mut self) -> Vec<(u64, Notifier)> {
        self.extras
            .as_mut()
            .map(|e| std::mem::take(&mut e.watchers))
            .unwrap_or_default()
    }

    /// Sets aside `msg` (the message being handled) until
    /// [`unstash_all`](Self::unstash_all). If it was asked, the reply is
    /// sent when it is handled again, and the value this handler returns is
    /// discarded.
    pub fn stash<M: Message>(&mut self, msg: M)
    where
        A: Handler<M>,
    {
        let letter: Box<dyn UserLetter<A>> = Node::new(Envelope { msg, reply: None });
        let ext = self.extras();
        ext.stash.push(letter);
        ext.stashed_current = true;
    }

    /// Number of stashed messages.
    pub fn stash_len(&self) -> usize {
        self.extras.as_ref().map_or(0, |e| e.stash.len())
    }

    /// Puts every stashed message back in front of the mailbox, in the
    /// order they were stashed; they are handled before anything newer.
    pub fn unstash_all(&mut self) {
        if self.stash_len() > 0 {
            self.extras().unstash_requested = true;
        }
    }

    /// Forgets a `stash` of an earlier message (a handler is about to run).
    pub(crate) fn clear_stashed_current(&mut self) {
        if let Some(e) = self.extras.as_mut() {
            e.stashed_current = false;
        }
    }

    /// True (once) if the running handler stashed its message.
    pub(crate) fn take_stashed_current(&mut self) -> bool {
        self.extras
            .as_mut()
            .is_some_and(|e| std::mem::take(&mut e.stashed_current))
    }

    pub(crate) fn take_unstash_request(&mut self) -> bool {
        match self.extras.as_mut() {
            Some(e) if e.unstash_requested => {
                e.unstash_requested = false;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn drain_stash(&mut self) -> Vec<Box<dyn UserLetter<A>>> {
        self.extras
            .as_mut()
            .map(|e| std::mem::take(&mut e.stash))
            .unwrap_or_default()
    }

    pub(crate) fn attach_reply_to_last_stashed(&mut self, reply: &mut dyn Any) {
        if let Some(last) = self.extras.as_mut().and_then(|e| e.stash.last_mut()) {
            last.attach_reply(reply);
        }
    }

    pub(crate) fn restart_stats(&mut self) -> &mut RestartStats {
        &mut self.extras().restarts
    }

    /// Sets (or with `None` clears) the receive timeout: after `timeout`
    /// without any message, the actor gets [`ReceiveTimeout`], and again
    /// after each further `timeout` of silence.
    pub fn set_receive_timeout(&mut self, timeout: Option<Duration>)
    where
        A: Handler<ReceiveTimeout>,
    {
        let me = self.myself.clone();
        let ext = self.extras();
        ext.receive_timeout = timeout.map(|d| ReceiveTimeoutState::start::<A>(me, d));
    }

    /// Records activity for the receive timeout.
    pub(crate) fn touch(&mut self) {
        if let Some(rt) = self
            .extras
            .as_mut()
            .and_then(|e| e.receive_timeout.as_mut())
        {
            rt.last_activity = Instant::now();
        }
    }

    /// Cancels every timer and the receive timeout.
    pub(crate) fn cancel_timers(&mut self) {
        if let Some(e) = self.extras.as_mut() {
            e.timers.clear();
            e.receive_timeout = None;
        }
    }
}
