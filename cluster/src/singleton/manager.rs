//! The singleton manager: one per node, hosts the instance while its node
//! is the oldest Up or Leaving member (of the role), and hands it over in
//! the `cluster-exiting` phase of the coordinated shutdown when its node
//! leaves.

use crate::cluster::Cluster;
use crate::coordinated_shutdown::Phase as ShutdownPhase;
use crate::events::{ClusterEvent, CurrentClusterState};
use crate::member::{self, Member, MemberStatus, OldestAmong, UniqueAddress};
use crate::singleton::protocol::{HandOverReply, HandOverToMe, Moving, WhereIsSingleton};
use crate::singleton::proxy::ProxyActor;
use crate::singleton::settings::ClusterSingletonSettings;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use troupe_core::prelude::*;
use troupe_core::{rt, Props};

/// Name of the manager of singleton `name` under `/system`.
pub(crate) fn manager_name(name: &str) -> String {
    format!("singleton-{name}")
}

/// Name of the instance under its manager.
pub(crate) const INSTANCE: &str = "singleton";

/// Coordinated shutdown, `cluster-exiting`: this node is leaving; `done`
/// is completed (or dropped) once no instance runs here any more.
#[derive(Debug, Message)]
pub(crate) struct SelfExiting(pub(crate) oneshot::Sender<()>);

/// The hand-over did not happen in time during the coordinated shutdown.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct ExitDeadline;

/// Periodic: retry a pending hand-over request.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct RetryHandOver;

/// The down-removal margin of a removed older member has passed.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct RemovalMarginOver;

/// An older member answered a hand-over request.
#[derive(Debug, Message)]
pub(crate) struct HandOverAnswer(UniqueAddress, HandOverReply);

/// How the instance is stopped.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// After the messages already queued for it (a hand-over, or an exit
    /// with nobody to hand over to: what proxies sent before they stopped
    /// forwarding is handled), within half the exit phase's timeout.
    Drain,
    /// Before its next message (this node is out of the cluster, or the
    /// hand-over did not come in time).
    Now,
}

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
    /// The coordinated shutdown's `cluster-exiting` phase has begun: this
    /// node no longer counts as the oldest and never hosts again (Akka's
    /// `SelfExiting`).
    self_exiting: bool,
    /// Shutdown tasks waiting until no instance runs here.
    exit_waiters: Vec<oneshot::Sender<()>>,
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
            self_exiting: false,
            exit_waiters: Vec::new(),
        }
    }

    /// The oldest Up or Leaving member of the role: the singleton's
    /// rightful host. Once this node runs its exit, it no longer counts.
    fn oldest_of(&self, members: &[Member]) -> Option<UniqueAddress> {
        let me = self.cluster.self_node();
        let candidates = members
            .iter()
            .filter(|m| !(self.self_exiting && &m.node == me));
        member::oldest(
            candidates,
            self.settings.role.as_deref(),
            OldestAmong::UpOrLeaving,
        )
        .map(|m| m.node.clone())
    }

    fn start_instance(&mut self, ctx: &mut Context<Self>) {
        if self.instance.is_some() || self.self_exiting {
            return;
        }
        let props = Props::new((self.factory)()).with_name(INSTANCE);
        match ctx.spawn_props(props) {
            Ok(r) => {
                tracing::info!("singleton {} started on {}", r, self.cluster.self_address());
                self.instance = Some(r);
                self.phase = Phase::Oldest;
            }
            // The previous instance's name is still taken while it stops.
            Err(e) => tracing::warn!("cannot start the singleton yet: {e}"),
        }
    }

    /// Stops the instance and waits for it to be gone; then the exit of
    /// this node may go on.
    async fn stop_instance(&mut self, ending: Ending) {
        // Kept in `instance` until it has terminated, so that a stop of this
        // manager meanwhile still finds it.
        if let Some(i) = self.instance.clone() {
            match ending {
                Ending::Drain => {
                    i.poison_pill();
                    // Bounded: well inside the exit phase's timeout, after
                    // which the node leaves and the next oldest takes over
                    // (two instances if this one still ran).
                    let limit = self
                        .cluster
                        .coordinated_shutdown()
                        .timeout(ShutdownPhase::ClusterExiting)
                        / 2;
                    if rt::timeout(limit, i.wait_for_termination()).await.is_none() {
                        tracing::warn!(
                            "the singleton {i} did not handle its queued messages within {limit:?}; \
                             stopping it (the rest go to dead letters)"
                        );
                        i.stop();
                    }
                }
                Ending::Now => i.stop(),
            }
            i.wait_for_termination().await;
            self.instance = None;
            tracing::info!("singleton {} stopped on {}", i, self.cluster.self_address());
        }
        for done in self.exit_waiters.drain(..) {
            let _ = done.send(());
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

    async fn on_members(&mut self, members: Vec<Member>, ctx: &mut Context<Self>) {
        self.note_removed_older(&members, ctx);
        self.members = members;
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
        let exiting = self.self_exiting || matches!(my_status, Some(MemberStatus::Exiting));
        if exiting && self.oldest.is_none() {
            self.stop_instance(Ending::Drain).await;
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
        // One deadline for all: a local ask's own timeout starts when it is
        // first polled, so awaited one after another they would add up.
        let deadline = std::time::Instant::now() + timeout;
        for a in asks {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let why = match rt::timeout(left, a).await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => e.to_string(),
                None => "no answer".to_string(),
            };
            tracing::warn!(
                "a singleton proxy did not confirm the move within {timeout:?} ({why}); \
                 what it forwards to the old instance from now on goes to dead letters"
            );
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
        self.stop_instance(Ending::Now).await;
    }
}

impl<A: Actor> Actor for SingletonManager<A> {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        // Membership changes arrive as messages: the snapshot, then every
        // event; the subscription ends when this manager stops.
        if self.cluster.subscribe_actor(ctx.myself()).is_err() {
            self.leave_cluster().await;
            return;
        }
        // The core stops when this node is downed or removed.
        ctx.watch(self.cluster.core());
        // As Akka's manager: a leaving node hands its singleton over in the
        // cluster-exiting phase, before it confirms its exit.
        let me = ctx.myself().clone();
        let task = format!("{}-exiting", ctx.myself().path().name());
        let added = self.cluster.coordinated_shutdown().add_task(
            ShutdownPhase::ClusterExiting,
            task,
            move || async move {
                let (done, wait) = oneshot::channel();
                if me.tell(SelfExiting(done)).is_ok() {
                    let _ = wait.await;
                }
            },
        );
        if let Err(e) = added {
            tracing::debug!("singleton manager started during the shutdown: {e}");
        }
    }

    async fn stopped(&mut self, _ctx: &mut Context<Self>) {
        self.stop_instance(Ending::Now).await;
    }
}

#[handlers]
impl<A: Actor> SingletonManager<A> {
    async fn snapshot(&mut self, s: CurrentClusterState, ctx: &mut Context<Self>) {
        self.on_members(s.members, ctx).await;
    }

    async fn event(&mut self, e: ClusterEvent, ctx: &mut Context<Self>) {
        let mut members = self.members.clone();
        match e {
            ClusterEvent::MemberJoined(m)
            | ClusterEvent::MemberWeaklyUp(m)
            | ClusterEvent::MemberUp(m)
            | ClusterEvent::MemberLeft(m)
            | ClusterEvent::MemberExited(m)
            | ClusterEvent::MemberDowned(m) => {
                match members.iter_mut().find(|o| o.node == m.node) {
                    Some(old) => *old = m,
                    None => members.push(m),
                }
            }
            ClusterEvent::MemberRemoved(m, _) if &m.node == self.cluster.self_node() => {
                self.leave_cluster().await;
                return;
            }
            ClusterEvent::MemberRemoved(m, _) => members.retain(|o| o.node != m.node),
            _ => return,
        }
        self.on_members(members, ctx).await;
    }

    async fn terminated(&mut self, t: Terminated, _ctx: &mut Context<Self>) {
        if t.actor == self.cluster.core().to_any() {
            self.leave_cluster().await;
        }
    }

    async fn self_exiting(&mut self, m: SelfExiting, ctx: &mut Context<Self>) {
        self.self_exiting = true;
        self.exit_waiters.push(m.0);
        if self.instance.is_some() {
            // Normally the new oldest asks for the hand-over once it sees
            // this node Exiting; if it does not in time, stop here so that
            // the exit goes on with no chance of two instances.
            let timeout = self
                .cluster
                .coordinated_shutdown()
                .timeout(ShutdownPhase::ClusterExiting);
            ctx.start_single_timer("exit-deadline", ExitDeadline, timeout * 3 / 4);
        }
        self.decide(ctx).await;
        if self.instance.is_none() {
            // Nothing to stop: lets the exit go on.
            self.stop_instance(Ending::Now).await;
        }
    }

    async fn exit_deadline(&mut self, _m: ExitDeadline, _ctx: &mut Context<Self>) {
        if self.instance.is_some() {
            tracing::warn!(
                "the singleton on {} was not handed over in time; it stops here so that this \
                 node's exit can go on",
                self.cluster.self_address()
            );
            self.stop_instance(Ending::Now).await;
        }
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
        // Waits: the answer leaves only once the instance is gone. (A
        // plain stop here would send what the proxies had already
        // forwarded to dead letters.)
        self.stop_instance(Ending::Drain).await;
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
