//! The singleton manager: one per node, hosts the instance while its node
//! is the oldest Up member (of the role), and hands it over.

use crate::cluster::Cluster;
use crate::events::CurrentClusterState;
use crate::member::{Member, MemberStatus, UniqueAddress};
use crate::singleton::protocol::{HandOverReply, HandOverToMe, Moving, WhereIsSingleton};
use crate::singleton::proxy::ProxyActor;
use crate::singleton::settings::ClusterSingletonSettings;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::{rt, Props};

/// Name of the manager of singleton `name` under `/system`.
pub(crate) fn manager_name(name: &str) -> String {
    format!("singleton-{name}")
}

/// Name of the instance under its manager.
pub(crate) const INSTANCE: &str = "singleton";

/// The membership as the manager needs it.
#[derive(Debug, Message)]
pub(crate) struct Membership(pub(crate) Box<CurrentClusterState>);

/// The cluster core stopped (this node was downed or removed).
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct ClusterGone;

/// Periodic: retry a pending hand-over request.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct RetryHandOver;

/// The down-removal margin of a removed older member has passed.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct RemovalMarginOver;

/// An older member answered a hand-over request.
#[derive(Debug, Message)]
pub(crate) struct HandOverAnswer(UniqueAddress, HandOverReply);

/// Where the manager stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Not the oldest: no instance here.
    Younger,
    /// The oldest, waiting until every older member still in the cluster
    /// has handed over (answered Done) or is removed.
    TakingOver { pending: BTreeSet<UniqueAddress> },
    /// The oldest, hosting the instance.
    Oldest,
    /// Was the oldest; the instance is stopping for a hand-over.
    HandingOver,
    /// Out of the cluster: never host again.
    Gone,
}

/// Hosts the singleton instance while this node is the oldest.
pub struct SingletonManager<A: Actor> {
    cluster: Cluster,
    factory: Box<dyn FnMut() -> A + Send>,
    settings: ClusterSingletonSettings,
    phase: Phase,
    instance: Option<ActorRef<A>>,
    /// The oldest as last seen (to know whom to take over from).
    oldest: Option<UniqueAddress>,
    members: Vec<Member>,
    /// Proxies that found the instance here (full paths), warned before a
    /// hand-over.
    proxies: BTreeSet<String>,
    /// Older members removed without having exited (downed), until their
    /// down-removal margin ends: an instance may still run on the losing
    /// side of a partition until then.
    removed_older: BTreeMap<UniqueAddress, Instant>,
}

impl<A: Actor> SingletonManager<A> {
    pub(crate) fn new(
        cluster: Cluster,
        factory: Box<dyn FnMut() -> A + Send>,
        settings: ClusterSingletonSettings,
    ) -> Self {
        SingletonManager {
            cluster,
            factory,
            settings,
            phase: Phase::Younger,
            instance: None,
            oldest: None,
            members: Vec::new(),
            proxies: BTreeSet::new(),
            removed_older: BTreeMap::new(),
        }
    }

    /// The oldest Up member of the role: the singleton's rightful host.
    fn oldest_of(&self, members: &[Member]) -> Option<UniqueAddress> {
        members
            .iter()
            .filter(|m| m.status == MemberStatus::Up)
            .filter(|m| self.settings.role.as_deref().is_none_or(|r| m.has_role(r)))
            .reduce(|a, b| if b.is_older_than(a) { b } else { a })
            .map(|m| m.node.clone())
    }

    fn start_instance(&mut self, ctx: &mut Context<Self>) {
        if self.instance.is_some() {
            return;
        }
        let props = Props::new((self.factory)()).with_name(INSTANCE);
        match ctx.spawn_props(props) {
            Ok(r) => {
                tracing::info!("singleton {} started on {}", r, self.cluster.self_address());
                // Hosting holds back this node's Exiting confirmation
                // until the instance has been handed over or stopped.
                self.cluster.exit_blockers().fetch_add(1, Ordering::AcqRel);
                self.instance = Some(r);
                self.phase = Phase::Oldest;
            }
            // The previous instance's name is still taken while it stops.
            Err(e) => tracing::warn!("cannot start the singleton yet: {e}"),
        }
    }

    /// Stops the instance and waits for it to be gone.
    async fn stop_instance(&mut self) {
        if let Some(i) = self.instance.take() {
            i.stop();
            i.wait_for_termination().await;
            tracing::info!("singleton {} stopped on {}", i, self.cluster.self_address());
            self.cluster.exit_blockers().fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Members older than this node (of the role) that are still in the
    /// cluster: each may host, or be about to host, an instance.
    fn older_members(&self, me: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        let Some(mine) = self.members.iter().find(|m| &m.node == me) else {
            return BTreeSet::new();
        };
        self.members
            .iter()
            .filter(|m| &m.node != me && m.status != MemberStatus::Removed)
            .filter(|m| self.settings.role.as_deref().is_none_or(|r| m.has_role(r)))
            .filter(|m| m.is_older_than(mine))
            .map(|m| m.node.clone())
            .collect()
    }

    /// Notes the older members that left without exiting, when a
    /// down-removal margin is configured.
    fn note_removed_older(&mut self, new_members: &[Member], ctx: &mut Context<Self>) {
        let Some(margin) = self.cluster.down_removal_margin() else {
            return;
        };
        let me = self.cluster.self_node();
        let Some(mine) = new_members.iter().find(|m| &m.node == me) else {
            return;
        };
        let gone: Vec<UniqueAddress> = self
            .members
            .iter()
            .filter(|m| !matches!(m.status, MemberStatus::Exiting | MemberStatus::Removed))
            .filter(|m| m.is_older_than(mine))
            .filter(|m| self.settings.role.as_deref().is_none_or(|r| m.has_role(r)))
            .filter(|m| !new_members.iter().any(|n| n.node == m.node))
            .map(|m| m.node.clone())
            .collect();
        for node in gone {
            tracing::info!(
                "{node} was removed without exiting; the singleton starts elsewhere only \
                 after the down-removal margin ({margin:?})"
            );
            self.removed_older.insert(node, Instant::now() + margin);
            ctx.start_single_timer("removal-margin", RemovalMarginOver, margin);
        }
    }

    /// True while a removed older member's margin has not passed.
    fn margin_pending(&mut self, ctx: &mut Context<Self>) -> bool {
        let now = Instant::now();
        self.removed_older.retain(|_, until| *until > now);
        if let Some(next) = self.removed_older.values().min() {
            ctx.start_single_timer("removal-margin", RemovalMarginOver, *next - now);
            return true;
        }
        false
    }

    /// Starts the instance unless a removal margin still runs (then the
    /// margin's timer comes back here).
    fn take_over(&mut self, ctx: &mut Context<Self>) {
        if self.margin_pending(ctx) {
            self.phase = Phase::TakingOver {
                pending: BTreeSet::new(),
            };
            return;
        }
        ctx.cancel_timer("hand-over");
        self.start_instance(ctx);
    }

    async fn on_membership(&mut self, state: CurrentClusterState, ctx: &mut Context<Self>) {
        self.note_removed_older(&state.members, ctx);
        self.members = state.members.clone();
        self.decide(ctx).await;
    }

    /// What the manager does given the membership it knows.
    async fn decide(&mut self, ctx: &mut Context<Self>) {
        let me = self.cluster.self_node().clone();
        let my_status = self.members.iter().find(|m| m.node == me).map(|m| m.status);
        if matches!(
            my_status,
            Some(MemberStatus::Down) | Some(MemberStatus::Removed)
        ) {
            self.leave_cluster().await;
            return;
        }
        self.oldest = self.oldest_of(&self.members);
        if self.phase == Phase::Gone {
            return;
        }
        let i_am_oldest = self.oldest.as_ref() == Some(&me);
        // Leaving with nobody to hand over to: stop, so that the exit can go on.
        if matches!(my_status, Some(MemberStatus::Exiting)) && self.oldest.is_none() {
            self.stop_instance().await;
            self.phase = Phase::Younger;
            return;
        }
        match (&mut self.phase, i_am_oldest) {
            (Phase::Younger, true) => {
                let pending = self.older_members(&me);
                if pending.is_empty() {
                    self.take_over(ctx);
                } else {
                    tracing::info!(
                        "{me} is the oldest now; asking {pending:?} to hand the singleton over"
                    );
                    self.phase = Phase::TakingOver { pending };
                    self.request_hand_over(ctx);
                    ctx.start_periodic_timer(
                        "hand-over",
                        RetryHandOver,
                        self.settings.hand_over_retry_interval,
                    );
                }
            }
            (Phase::TakingOver { pending }, true) => {
                let members: BTreeSet<UniqueAddress> = self
                    .members
                    .iter()
                    .filter(|m| m.status != MemberStatus::Removed)
                    .map(|m| m.node.clone())
                    .collect();
                pending.retain(|n| members.contains(n));
                if pending.is_empty() {
                    tracing::info!(
                        "every previous singleton host handed over or was removed; taking over"
                    );
                    self.take_over(ctx);
                }
            }
            (Phase::TakingOver { .. }, false) => {
                ctx.cancel_timer("hand-over");
                self.phase = Phase::Younger;
            }
            // Still the oldest: make sure the instance runs.
            (Phase::Oldest, true) => self.start_instance(ctx),
            // No longer the oldest (this node is leaving): the new oldest
            // asks for the hand-over; until then the instance runs.
            _ => {}
        }
    }

    fn request_hand_over(&mut self, ctx: &mut Context<Self>) {
        let Phase::TakingOver { pending } = &self.phase else {
            return;
        };
        let me = ctx.myself().clone();
        let from = self.cluster.self_node().clone();
        let timeout = self.settings.hand_over_retry_interval;
        let name = ctx.myself().path().name().to_string();
        for older in pending.clone() {
            let path = format!("{}/system/{name}", older.address);
            let Ok(prev) = ctx.system().resolve::<SingletonManager<A>>(&path) else {
                continue;
            };
            let (me, from) = (me.clone(), from.clone());
            rt::spawn(async move {
                if let Ok(answer) = prev.ask_timeout(HandOverToMe { from }, timeout).await {
                    let _ = me.tell(HandOverAnswer(older, answer));
                }
            });
        }
    }

    /// Tells every known proxy that the instance moves, waiting (bounded)
    /// for their answers.
    async fn quiesce_proxies(&mut self, ctx: &mut Context<Self>) {
        let timeout = self.settings.hand_over_retry_interval;
        let mut asks = Vec::new();
        for path in std::mem::take(&mut self.proxies) {
            match ctx.system().resolve::<ProxyActor<A>>(&path) {
                Ok(p) => asks.push(p.ask_timeout(Moving, timeout)),
                Err(e) => tracing::debug!("cannot reach singleton proxy {path}: {e}"),
            }
        }
        for a in asks {
            if let Err(e) = a.await {
                tracing::debug!("a singleton proxy did not confirm the move: {e}");
            }
        }
    }

    async fn leave_cluster(&mut self) {
        if self.phase != Phase::Gone {
            tracing::info!(
                "{} left the cluster: its singleton manager stops hosting",
                self.cluster.self_address()
            );
        }
        self.phase = Phase::Gone;
        self.stop_instance().await;
    }
}

impl<A: Actor> Actor for SingletonManager<A> {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        // Membership changes arrive as messages: a task follows the
        // cluster's events and sends the state after each.
        let cluster = self.cluster.clone();
        let me = ctx.myself().clone();
        rt::spawn(async move {
            let Ok((snapshot, events)) = cluster.subscribe().await else {
                let _ = me.tell(ClusterGone);
                return;
            };
            let _ = me.tell(Membership(Box::new(snapshot)));
            while events.recv().await.is_ok() {
                // Coalesce a burst of events into one state.
                while events.try_recv().is_ok() {}
                // A busy core is not a gone one: retry until it answers or stops.
                let state = loop {
                    match cluster.state().await {
                        Ok(s) => break Some(s),
                        Err(troupe_core::AskError::Timeout(_)) => continue,
                        Err(_) => break None,
                    }
                };
                match state {
                    Some(s) => {
                        if me.tell(Membership(Box::new(s))).is_err() {
                            return;
                        }
                    }
                    None => break,
                }
            }
            let _ = me.tell(ClusterGone);
        });
    }

    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.stop_instance().await;
    }
}

#[handlers]
impl<A: Actor> SingletonManager<A> {
    async fn membership(&mut self, m: Membership, ctx: &mut Context<Self>) {
        self.on_membership(*m.0, ctx).await;
    }

    async fn cluster_gone(&mut self, _m: ClusterGone, _ctx: &mut Context<Self>) {
        self.leave_cluster().await;
    }

    async fn retry(&mut self, _m: RetryHandOver, ctx: &mut Context<Self>) {
        self.request_hand_over(ctx);
    }

    async fn removal_margin_over(&mut self, _m: RemovalMarginOver, ctx: &mut Context<Self>) {
        self.decide(ctx).await;
    }

    async fn hand_over_answer(&mut self, a: HandOverAnswer, ctx: &mut Context<Self>) {
        let Phase::TakingOver { pending } = &mut self.phase else {
            return;
        };
        if a.1 == HandOverReply::Done {
            pending.remove(&a.0);
            if pending.is_empty() {
                self.take_over(ctx);
            }
        }
    }

    async fn hand_over_to_me(
        &mut self,
        req: HandOverToMe,
        ctx: &mut Context<Self>,
    ) -> HandOverReply {
        if self.oldest.as_ref() != Some(&req.from) {
            // Not (yet) the oldest in our view: it must wait.
            return HandOverReply::InProgress;
        }
        tracing::info!("handing the singleton over to {}", req.from);
        self.phase = Phase::HandingOver;
        // First every proxy stops forwarding (its answer arrives behind
        // what it already sent), then the instance handles what is queued
        // and stops: nothing sent through a proxy is lost.
        self.quiesce_proxies(ctx).await;
        if let Some(i) = &self.instance {
            i.poison_pill();
        }
        // Waits: the answer leaves only once the instance is gone.
        self.stop_instance().await;
        self.phase = Phase::Younger;
        HandOverReply::Done
    }

    async fn where_is(&mut self, q: WhereIsSingleton, ctx: &mut Context<Self>) -> Option<String> {
        // While handing over, the instance is not to be used any more.
        if self.phase == Phase::HandingOver {
            return None;
        }
        let instance = self.instance.as_ref()?;
        let remoting = ctx.system().remoting()?;
        self.proxies.insert(q.proxy);
        Some(format!("{}{}", remoting.address(), instance.path()))
    }
}

/// How long a proxy waits for a manager's answer.
pub(crate) const ASK_TIMEOUT: Duration = Duration::from_secs(2);
