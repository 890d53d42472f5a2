//! The cluster core: one actor per node (`/system/cluster-core`) that
//! joins, gossips, runs the leader's actions, watches its neighbours with
//! the failure detector, applies the downing strategy and publishes
//! events. It follows Akka's `ClusterCoreDaemon`.

use crate::coordinated_shutdown::{CoordinatedShutdown, Reason};
use crate::downing::{Decision, DowningView};
use crate::events::{diff, ClusterEvent, CurrentClusterState};
use crate::gossip::Gossip;
use crate::heartbeat::HeartbeatRing;
use crate::member::{Member, MemberStatus, UniqueAddress};
use crate::membership::{MembershipState, UpThresholds};
use crate::protocol::*;
use crate::settings::{ClusterSettings, DowningStrategy};
use crate::vclock::ClockOrdering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use troupe_core::prelude::*;
use troupe_core::remote::{Address, PhiAccrualFailureDetector, Remoting};
use troupe_core::{AnyActorRef, Message, Props, TellError};

/// Name of the core actor under `/system`.
pub(crate) const CORE_NAME: &str = "cluster-core";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Periodic work.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) enum Tick {
    Gossip,
    Leader,
    Reap,
    Heartbeat,
    Join,
}

/// What a user (or the HTTP API) asks of the cluster.
#[derive(Debug, Clone, Message)]
pub(crate) enum UserAction {
    JoinSeeds(Vec<Address>),
    Leave(Address),
    Down(Address),
}

/// The current state, for queries.
#[derive(Debug, Clone, Copy, Message)]
#[message(reply = CurrentClusterState)]
pub(crate) struct GetState;

/// A new subscriber: gets the snapshot as the reply, then every event.
#[derive(Debug, Message)]
#[message(reply = CurrentClusterState)]
pub(crate) struct Subscribe(pub(crate) async_channel::Sender<ClusterEvent>);

/// What the core hands an actor subscriber.
pub(crate) enum Delivery {
    Snapshot(Box<CurrentClusterState>),
    Event(ClusterEvent),
}

/// Why a delivery to an actor subscriber failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeliveryFailure {
    /// The subscriber has stopped: the subscription ends.
    Stopped,
    /// Its bounded mailbox is full: this delivery is lost.
    Full,
}

impl DeliveryFailure {
    pub(crate) fn of<M>(e: TellError<M>) -> Self {
        match e {
            TellError::MailboxFull(_) => DeliveryFailure::Full,
            _ => DeliveryFailure::Stopped,
        }
    }
}

/// Sends to one actor subscriber (typed where the subscription was made).
pub(crate) type EventSink = Box<dyn Fn(Delivery) -> Result<(), DeliveryFailure> + Send>;

/// A new actor subscriber: it is sent the snapshot, then every event,
/// until it stops or unsubscribes.
#[derive(Message)]
pub(crate) struct SubscribeActor {
    pub(crate) actor: AnyActorRef,
    pub(crate) sink: EventSink,
}

/// How many subscriptions the core holds.
#[derive(Debug, Clone, Copy, Message)]
#[message(reply = usize)]
pub(crate) struct GetSubscriptionCount;

/// Ends an actor's subscription.
#[derive(Debug, Message)]
pub(crate) struct Unsubscribe(pub(crate) AnyActorRef);

/// How far this node's own exit must have got for a waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SelfExit {
    /// Leaving, Exiting, Down, or not a member.
    Leaving,
    /// Exiting, Down, or not a member.
    Exiting,
}

/// Coordinated shutdown, `cluster-leave`: this node leaves; `done` is
/// dropped (or sent) once it is Leaving or further along.
#[derive(Debug, Message)]
pub(crate) struct LeaveSelf(pub(crate) oneshot::Sender<()>);

/// Coordinated shutdown, `cluster-exiting`: `done` is dropped (or sent)
/// once this node is Exiting or further along.
#[derive(Debug, Message)]
pub(crate) struct WhenExiting(pub(crate) oneshot::Sender<()>);

/// Coordinated shutdown, `cluster-exiting-done`: the local exiting work is
/// done (singletons handed over); an Exiting node may now confirm.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct ExitingCompleted;

/// Coordinated shutdown, `cluster-shutdown`: stop, unless this node is
/// Exiting and waits to learn of its removal.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct ShutdownCluster;

/// An actor that subscribed to events.
struct ActorSubscriber {
    actor: AnyActorRef,
    sink: EventSink,
}

/// Where joining stands.
enum Joining {
    /// Not asked to join.
    Idle,
    /// Looking for a seed that is part of a cluster; the first seed forms
    /// a new cluster if no other answers within `seed_node_timeout`.
    Seeds {
        seeds: Vec<Address>,
        since: Instant,
        /// When the last `Join` went out: another only after
        /// `retry_unsuccessful_join_after`, or once it was answered `Retry`.
        join_sent: Option<Instant>,
    },
    /// A member.
    Joined,
}

pub(crate) struct ClusterCore {
    /// This node's remoting: removed members are quarantined in it.
    remoting: Remoting,
    settings: ClusterSettings,
    thresholds: UpThresholds,
    self_node: UniqueAddress,
    state: MembershipState,
    exiting_confirmed: BTreeSet<UniqueAddress>,
    subscribers: Vec<async_channel::Sender<ClusterEvent>>,
    actor_subscribers: Vec<ActorSubscriber>,
    /// Coordinated shutdown tasks waiting for this node's exit.
    exit_waiters: Vec<(SelfExit, oneshot::Sender<()>)>,
    joining: Joining,
    ring: HeartbeatRing,
    detectors: BTreeMap<UniqueAddress, PhiAccrualFailureDetector>,
    heartbeat_seq: u64,
    peers: HashMap<Address, ActorRef<ClusterCore>>,
    gossip_ticks: u64,
    /// Since when the leader has lacked convergence (for WeaklyUp).
    no_convergence_since: Option<Instant>,
    /// The split brain resolver decides no earlier than this: every change
    /// of reachability or membership pushes it `stable_after` away.
    stable_deadline: Instant,
    /// First and latest reachability change of the current instability
    /// (for down-all-when-unstable); `None` when stable.
    reachability_changes: Option<(Instant, Instant)>,
    stats: GossipStats,
    /// A local change not yet pushed to anyone.
    unpushed_change: bool,
    /// The coordinated shutdown of this cluster extension.
    shutdown: CoordinatedShutdown,
    /// This node saw itself Exiting and started the coordinated shutdown.
    exit_started: bool,
    /// The coordinated shutdown's `cluster-exiting` phase is over (its
    /// singletons handed over): an Exiting node may confirm.
    exiting_completed: bool,
}

/// Gossip sent by this node so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GossipStats {
    /// Full states sent.
    pub envelopes: u64,
    /// Version-only statuses sent.
    pub statuses: u64,
    /// Encoded bytes of both (MessagePack payloads, without framing).
    pub bytes: u64,
}

/// Asks for the gossip statistics.
#[derive(Debug, Clone, Copy, Message)]
#[message(reply = GossipStats)]
pub(crate) struct GetStats;

/// Encoded size of a message, for the statistics.
fn encoded_len<T: serde::Serialize>(m: &T) -> u64 {
    rmp_serde::to_vec(m).map(|v| v.len() as u64).unwrap_or(0)
}

impl Actor for ClusterCore {
    async fn started(&mut self, ctx: &mut Context<Self>) {
        let s = &self.settings;
        // Gossip ticks three times per interval; most ticks only gossip
        // when the state is spreading slowly (Akka's gossip speed-up).
        ctx.start_periodic_timer("gossip", Tick::Gossip, s.gossip_interval / 3);
        ctx.start_periodic_timer("leader", Tick::Leader, s.leader_actions_interval);
        ctx.start_periodic_timer("reap", Tick::Reap, s.unreachable_nodes_reaper_interval);
        ctx.start_periodic_timer("heartbeat", Tick::Heartbeat, s.heartbeat_interval);
        ctx.start_periodic_timer(
            "join",
            Tick::Join,
            Duration::from_millis(500).min(s.seed_node_timeout),
        );
        if !s.seed_nodes.is_empty() {
            let seeds = s.seed_nodes.clone();
            self.start_joining(ctx, seeds);
        }
    }
}

impl ClusterCore {
    pub(crate) fn props(
        remoting: Remoting,
        settings: ClusterSettings,
        self_node: UniqueAddress,
        shutdown: CoordinatedShutdown,
    ) -> Props<ClusterCore> {
        let thresholds = UpThresholds {
            min_nr_of_members: settings.min_nr_of_members,
            min_nr_of_members_per_role: settings.min_nr_of_members_per_role.clone(),
        };
        let core = ClusterCore {
            remoting,
            thresholds,
            state: MembershipState::new(Gossip::default(), self_node.clone()),
            self_node,
            exiting_confirmed: BTreeSet::new(),
            subscribers: Vec::new(),
            actor_subscribers: Vec::new(),
            exit_waiters: Vec::new(),
            joining: Joining::Idle,
            ring: HeartbeatRing::default(),
            detectors: BTreeMap::new(),
            heartbeat_seq: 0,
            peers: HashMap::new(),
            gossip_ticks: 0,
            no_convergence_since: None,
            stable_deadline: Instant::now(),
            reachability_changes: None,
            stats: GossipStats::default(),
            unpushed_change: false,
            shutdown,
            exit_started: false,
            exiting_completed: false,
            settings,
        };
        Props::new(core).with_name(CORE_NAME)
    }

    fn gossip(&self) -> &Gossip {
        &self.state.gossip
    }

    fn self_member(&self) -> Option<&Member> {
        self.gossip().member(&self.self_node)
    }

    fn is_member(&self) -> bool {
        self.self_member().is_some()
    }

    /// The core actor of the node at `address`.
    fn peer(&mut self, ctx: &Context<Self>, address: &Address) -> Option<ActorRef<ClusterCore>> {
        if let Some(p) = self.peers.get(address) {
            return Some(p.clone());
        }
        let path = format!("{address}/system/{CORE_NAME}");
        match ctx.system().resolve::<ClusterCore>(&path) {
            Ok(r) => {
                self.peers.insert(address.clone(), r.clone());
                Some(r)
            }
            Err(e) => {
                tracing::warn!("cannot reach the cluster core at {path}: {e}");
                None
            }
        }
    }

    fn start_joining(&mut self, ctx: &mut Context<Self>, seeds: Vec<Address>) {
        if self.is_member() {
            tracing::info!("already a member of a cluster; ignoring the request to join {seeds:?}");
            return;
        }
        tracing::info!("joining the cluster through seed nodes {seeds:?}");
        self.joining = Joining::Seeds {
            seeds,
            since: Instant::now(),
            join_sent: None,
        };
        // The first round now, not at the next join tick: a node that is
        // its only seed forms the cluster at once (as Akka does).
        self.join_round(ctx);
    }

    /// One round of the join protocol: ask every seed; join the first that
    /// is part of a cluster; the first seed forms a new cluster when no
    /// other seed answers within `seed_node_timeout`.
    fn join_round(&mut self, ctx: &mut Context<Self>) {
        let Joining::Seeds { seeds, since, .. } = &self.joining else {
            return;
        };
        let (seeds, since) = (seeds.clone(), *since);
        let me = &self.self_node.address;
        let first_seed_is_me = seeds.first() == Some(me);
        let others: Vec<Address> = seeds.iter().filter(|a| *a != me).cloned().collect();
        let timed_out = since.elapsed() >= self.settings.seed_node_timeout;
        if others.is_empty() || (first_seed_is_me && timed_out) {
            tracing::info!("no other seed node answered; {me} forms a new cluster");
            self.form_cluster(ctx);
            return;
        }
        if let Some(limit) = self.settings.shutdown_after_unsuccessful_join_seed_nodes {
            if since.elapsed() > limit {
                tracing::error!(
                    "could not join the seed nodes {seeds:?} within {limit:?}; giving up \
                     (shutdown-after-unsuccessful-join-seed-nodes)"
                );
                self.joining = Joining::Idle;
                self.shutdown.start(Reason::ClusterJoinUnsuccessful);
                ctx.stop();
                return;
            }
        }
        let from = self.self_node.clone();
        let me_ref = ctx.myself().clone();
        let timeout = self.settings.seed_node_timeout.min(Duration::from_secs(2));
        for seed in others {
            let Some(peer) = self.peer(ctx, &seed) else {
                continue;
            };
            let from = from.clone();
            let me_ref = me_ref.clone();
            troupe_core::rt::spawn(async move {
                if let Ok(InitJoinReply::Ack(node)) =
                    peer.ask_timeout(InitJoin { from }, timeout).await
                {
                    let _ = me_ref.tell(SeedAcked(node));
                }
            });
        }
    }

    fn form_cluster(&mut self, ctx: &mut Context<Self>) {
        let me = Member::joining(self.self_node.clone(), self.settings.roles.clone());
        let mut g = Gossip::with_members([me]);
        g.increment_version(&self.self_node);
        g.only_seen_by(&self.self_node);
        self.joining = Joining::Joined;
        self.update_state(g);
        // Alone, it has convergence: it moves itself Up at once rather
        // than at the next leader tick. Until then every member would be
        // Joining, and the lowest-addressed joiner would lead on a partial
        // view, which costs a 50-node start a whole extra convergence round.
        self.leader_tick(ctx);
    }

    /// Replaces the state, publishing the events between old and new.
    fn update_state(&mut self, gossip: Gossip) {
        let new = MembershipState::new(gossip, self.self_node.clone());
        let events = diff(&self.state, &new);
        self.state = new;
        self.ring = HeartbeatRing::new(&self.state, self.settings.monitored_by_nr_of_members);
        for e in &events {
            log_event(e);
            // A member removed after it was downed is never coming back:
            // quarantine its incarnation, so that remote watches of its
            // actors end and asks to it fail now, rather than when their
            // own failure detector gives up (Akka's ClusterRemoteWatcher).
            if let ClusterEvent::MemberRemoved(m, MemberStatus::Down) = e {
                if m.node != self.self_node {
                    self.remoting.quarantine(
                        &m.node.address,
                        m.node.uid,
                        "the cluster member was downed and removed",
                    );
                }
            }
        }
        self.note_for_downing(&events);
        // Subscribers' channels are unbounded: a send fails only when the
        // subscriber has gone away.
        self.subscribers
            .retain(|s| events.iter().all(|e| s.try_send(e.clone()).is_ok()));
        if !events.is_empty() {
            self.actor_subscribers.retain(|s| {
                events
                    .iter()
                    .all(|e| match (s.sink)(Delivery::Event(e.clone())) {
                        Ok(()) => true,
                        Err(DeliveryFailure::Full) => {
                            tracing::warn!(
                                "cluster event subscriber {} has a full mailbox: it misses {e:?}",
                                s.actor
                            );
                            true
                        }
                        Err(DeliveryFailure::Stopped) => false,
                    })
            });
        }
        self.wake_exit_waiters();
    }

    /// True once this node's exit has got as far as `step`.
    fn exit_reached(&self, step: SelfExit) -> bool {
        match self.self_member().map(|m| m.status) {
            None => true,
            Some(s) => match step {
                SelfExit::Leaving => matches!(
                    s,
                    MemberStatus::Leaving
                        | MemberStatus::Exiting
                        | MemberStatus::Down
                        | MemberStatus::Removed
                ),
                SelfExit::Exiting => matches!(
                    s,
                    MemberStatus::Exiting | MemberStatus::Down | MemberStatus::Removed
                ),
            },
        }
    }

    fn wake_exit_waiters(&mut self) {
        if self.exit_waiters.is_empty() {
            return;
        }
        let waiters = std::mem::take(&mut self.exit_waiters);
        for (step, done) in waiters {
            if self.exit_reached(step) {
                let _ = done.send(());
            } else {
                self.exit_waiters.push((step, done));
            }
        }
    }

    /// This node is out of the cluster (downed or removed by the others):
    /// runs the coordinated shutdown, if so configured.
    fn run_shutdown_when_down(&self) {
        if self.settings.run_coordinated_shutdown_when_down {
            self.shutdown.start(Reason::ClusterDowning);
        }
    }

    /// A local change: new version, seen only by this node.
    fn commit(&mut self, mut gossip: Gossip) {
        gossip.increment_version(&self.self_node);
        gossip.only_seen_by(&self.self_node);
        self.update_state(gossip);
        self.unpushed_change = true;
    }

    /// Sends a new local change at once to one member that has not seen it,
    /// instead of waiting for the next gossip tick: changes spread faster,
    /// at the cost of one message per change.
    fn push_change(&mut self, ctx: &mut Context<Self>) {
        if !std::mem::take(&mut self.unpushed_change) {
            return;
        }
        self.check_self_status(ctx);
        let g = self.gossip();
        let unseen: Vec<UniqueAddress> = g
            .members
            .iter()
            .filter(|m| m.node != self.self_node && !g.seen_by_node(&m.node))
            .filter(|m| g.reachability.is_reachable(&m.node))
            .map(|m| m.node.clone())
            .collect();
        if !unseen.is_empty() {
            let target = unseen[fastrand::usize(..unseen.len())].clone();
            self.gossip_to(ctx, &target);
        }
    }

    fn on_join(&mut self, j: Join) -> JoinReply {
        if !self.is_member() {
            return JoinReply::Retry(format!(
                "{} is not a member of a cluster yet",
                self.self_node
            ));
        }
        if self.gossip().tombstones.contains_key(&j.node) {
            return JoinReply::Refused(format!(
                "{} was removed from this cluster; restart it to rejoin",
                j.node
            ));
        }
        if let Some(m) = self.gossip().member(&j.node) {
            // Already joined (a retry): welcome again.
            tracing::debug!("{} is already a member ({})", m.node, m.status);
            return JoinReply::Welcome(Box::new(self.gossip().clone()));
        }
        let old = self
            .gossip()
            .members
            .iter()
            .find(|m| m.node.address == j.node.address)
            .cloned();
        if let Some(old) = old {
            // A new incarnation: the old one is downed and removed first.
            if old.status != MemberStatus::Down {
                tracing::info!(
                    "new incarnation {} of existing member {} is joining; the old one is downed and will be removed",
                    j.node,
                    old.node
                );
                let mut g = self.gossip().clone();
                g.update([old.with_status(MemberStatus::Down)]);
                // Its UID will never answer again.
                g.reachability = g.reachability.terminated(&self.self_node, &old.node);
                self.commit(g);
            }
            return JoinReply::Retry(format!("the old incarnation {} is being removed", old.node));
        }
        tracing::info!("node {} is joining, roles {:?}", j.node, j.roles);
        let mut g = self.gossip().clone();
        g.members.insert(Member::joining(j.node, j.roles));
        self.commit(g);
        JoinReply::Welcome(Box::new(self.gossip().clone()))
    }

    fn on_welcome(&mut self, gossip: Gossip) {
        if self.is_member() {
            return;
        }
        if !gossip.has_member(&self.self_node) {
            tracing::warn!("welcome without this node in it; ignored");
            return;
        }
        tracing::info!("welcomed into the cluster");
        self.joining = Joining::Joined;
        let mut g = gossip;
        g.seen_by(&self.self_node);
        self.update_state(g);
    }

    fn receive_gossip(&mut self, ctx: &mut Context<Self>, env: GossipEnvelope) {
        if env.to != self.self_node {
            tracing::debug!("gossip meant for {} ignored", env.to);
            return;
        }
        if !self.is_member() {
            if env.gossip.has_member(&self.self_node) {
                // Our welcome was lost or is late: this gossip is as good.
                self.on_welcome(*env.gossip);
            }
            return;
        }
        // As Akka: only members this node can reach may change its view
        // (a removed node's late gossip, or another cluster's, is ignored).
        if !self.gossip().has_member(&env.from) {
            tracing::debug!("gossip from non-member {} ignored", env.from);
            return;
        }
        if !self
            .gossip()
            .reachability
            .is_reachable_by(&self.self_node, &env.from)
        {
            tracing::debug!("gossip from unreachable {} ignored", env.from);
            return;
        }
        let local = self.gossip();
        let remote = *env.gossip;
        // Talk back whenever the sender does not know that this node has
        // its state (or has an older or conflicting one): that is how the
        // seen sets spread and convergence is reached (as Akka does).
        let unseen_by_me = !remote.seen_by_node(&self.self_node);
        let ordering = local.version.compare(&remote.version);
        let (mut merged, reply) = match ordering {
            ClockOrdering::Same => {
                let mut g = local.clone();
                g.seen.extend(remote.seen.iter().cloned());
                (g, unseen_by_me)
            }
            // Ours is newer: keep it and tell the sender.
            ClockOrdering::After => (local.clone(), true),
            ClockOrdering::Before => (remote, unseen_by_me),
            ClockOrdering::Concurrent => (local.merge(&remote), true),
        };
        // A version new to this node is passed on at once to one member
        // that has not seen it (as a local change is), rather than at the
        // next gossip tick: a change reaches every member in about log2(N)
        // network hops instead of as many ticks. Each node does this once
        // per version it learns, so a change costs at most one message
        // per member.
        if matches!(ordering, ClockOrdering::Before | ClockOrdering::Concurrent) {
            self.unpushed_change = true;
        }
        merged.seen_by(&self.self_node);
        let changed = merged != *self.gossip();
        if changed {
            self.update_state(merged);
        }
        if reply {
            let from = env.from.clone();
            self.gossip_to(ctx, &from);
        }
        self.check_self_status(ctx);
        if changed {
            self.welcome_joiners_on_convergence(ctx);
        }
    }

    /// The leader moves joining members Up as soon as the state converges
    /// rather than at its next leader tick: Akka waits for the tick, which
    /// adds up to `leader-actions-interval` (1 s) to every node's start
    /// and, with several rounds of joiners, to the time a new cluster takes
    /// to form.
    fn welcome_joiners_on_convergence(&mut self, ctx: &mut Context<Self>) {
        if !self.state.is_leader()
            || !self
                .gossip()
                .members
                .iter()
                .any(|m| m.status == MemberStatus::Joining)
        {
            return;
        }
        if self.state.convergence(&self.exiting_confirmed) {
            self.leader_actions_on_convergence(ctx);
        }
    }

    fn receive_status(&mut self, ctx: &mut Context<Self>, st: GossipStatus) {
        if !self.is_member() || !self.gossip().has_member(&st.from) {
            return;
        }
        if st.seen_digest != seen_digest(self.gossip()) {
            // Same version, other seen sets: exchange the state so that
            // both learn who has seen it.
            self.gossip_to(ctx, &st.from);
            return;
        }
        match self.gossip().version.compare(&st.version) {
            ClockOrdering::Same => {}
            // The sender is behind, or both changed: send ours.
            ClockOrdering::After | ClockOrdering::Concurrent => self.gossip_to(ctx, &st.from),
            // We are behind: a status makes the sender send its state.
            ClockOrdering::Before => self.status_to(ctx, &st.from),
        }
    }

    fn gossip_to(&mut self, ctx: &mut Context<Self>, node: &UniqueAddress) {
        if let Some(peer) = self.peer(ctx, &node.address) {
            let env = GossipEnvelope {
                from: self.self_node.clone(),
                to: node.clone(),
                gossip: Box::new(self.gossip().clone()),
            };
            self.stats.envelopes += 1;
            self.stats.bytes += encoded_len(&env);
            let _ = peer.tell(env);
        }
    }

    fn status_to(&mut self, ctx: &mut Context<Self>, node: &UniqueAddress) {
        if let Some(peer) = self.peer(ctx, &node.address) {
            let status = GossipStatus {
                from: self.self_node.clone(),
                version: self.gossip().version.clone(),
                seen_digest: seen_digest(self.gossip()),
            };
            self.stats.statuses += 1;
            self.stats.bytes += encoded_len(&status);
            let _ = peer.tell(status);
        }
    }

    /// One gossip round: to a random reachable member, preferring (with
    /// the configured probability) one that has not seen the state; the
    /// full state if it has not, else only the version.
    fn gossip_tick(&mut self, ctx: &mut Context<Self>) {
        self.gossip_ticks += 1;
        if !self.is_member() {
            return;
        }
        let g = self.gossip();
        let members = g.members.len();
        let seen = g.members.iter().filter(|m| g.seen_by_node(&m.node)).count();
        // Every third tick is the regular interval; the others only while
        // fewer than half have seen the state.
        let speedup = seen * 2 < members;
        if !self.gossip_ticks.is_multiple_of(3) && !speedup {
            return;
        }
        let candidates: Vec<UniqueAddress> = g
            .members
            .iter()
            .filter(|m| m.node != self.self_node)
            .filter(|m| g.reachability.is_reachable(&m.node))
            .map(|m| m.node.clone())
            .collect();
        if candidates.is_empty() {
            return;
        }
        let not_seen: Vec<&UniqueAddress> =
            candidates.iter().filter(|n| !g.seen_by_node(n)).collect();
        let mut p = self.settings.gossip_different_view_probability;
        let reduce_above = self.settings.reduce_gossip_different_view_probability;
        if members > reduce_above {
            // Akka lowers the bias in large clusters so that gossip does
            // not all go to the few laggards.
            p = (p / 2.0).max(p * reduce_above as f64 / members as f64);
        }
        let target = if !not_seen.is_empty() && fastrand::f64() < p {
            not_seen[fastrand::usize(..not_seen.len())].clone()
        } else {
            candidates[fastrand::usize(..candidates.len())].clone()
        };
        if g.seen_by_node(&target) {
            self.status_to(ctx, &target);
        } else {
            self.gossip_to(ctx, &target);
        }
    }

    fn leader_tick(&mut self, ctx: &mut Context<Self>) {
        if !self.is_member() {
            return;
        }
        self.check_self_status(ctx);
        if !self.state.is_leader() {
            self.no_convergence_since = None;
            return;
        }
        if self.state.convergence(&self.exiting_confirmed) {
            self.leader_actions_on_convergence(ctx);
        } else if let Some(after) = self.settings.allow_weakly_up_members {
            let since = *self.no_convergence_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= after {
                let mut st = self.state.clone();
                let changed = st.move_joining_to_weakly_up(&self.thresholds);
                if !changed.is_empty() {
                    for m in &changed {
                        tracing::info!(
                            "leader is moving node {} to WeaklyUp (no convergence for {after:?})",
                            m.node
                        );
                    }
                    self.commit(st.gossip);
                }
            }
        }
    }

    /// The leader's actions once every member has seen the state: joiners
    /// Up, leavers Exiting, removals, and old tombstones pruned.
    fn leader_actions_on_convergence(&mut self, ctx: &mut Context<Self>) {
        self.no_convergence_since = None;
        let mut st = self.state.clone();
        let actions =
            st.leader_actions_on_convergence(&self.thresholds, &self.exiting_confirmed, now_ms());
        let mut g = st.gossip;
        let cutoff =
            now_ms().saturating_sub(self.settings.prune_gossip_tombstones_after.as_millis() as u64);
        let before = g.tombstones.len();
        g.prune_tombstones(cutoff);
        if !actions.is_empty() || g.tombstones.len() != before {
            for m in &actions.changed {
                tracing::info!("leader is moving node {} to {}", m.node, m.status);
            }
            for m in &actions.removed {
                tracing::info!("leader is removing {} node {}", m.status, m.node);
                self.exiting_confirmed.remove(&m.node);
                self.detectors.remove(&m.node);
            }
            self.commit(g);
            // A removed Exiting node would otherwise never learn it is
            // out (nobody gossips to non-members): tell it once.
            let exited: Vec<UniqueAddress> = actions
                .removed
                .iter()
                .filter(|m| m.status == MemberStatus::Exiting && m.node != self.self_node)
                .map(|m| m.node.clone())
                .collect();
            for n in &exited {
                self.gossip_to(ctx, n);
            }
        }
    }

    /// Acts on this node's own status: an Exiting member confirms to the
    /// leader; a Down or removed one stops taking part.
    fn check_self_status(&mut self, ctx: &mut Context<Self>) {
        match self.self_member().map(|m| m.status) {
            // As Akka: the coordinated shutdown hands the singletons over
            // (cluster-exiting), then tells this core to confirm
            // (cluster-exiting-done).
            Some(MemberStatus::Exiting) if !self.exiting_completed && !self.exit_started => {
                self.exit_started = true;
                if self.shutdown.start(Reason::ClusterLeaving) {
                    tracing::info!("exiting: started the coordinated shutdown");
                }
            }
            Some(MemberStatus::Exiting) if !self.exiting_completed => {}
            Some(MemberStatus::Exiting) => {
                if let Some(leader) = self.state.leader().filter(|l| *l != self.self_node) {
                    if let Some(peer) = self.peer(ctx, &leader.address) {
                        let _ = peer.tell(ExitingConfirmed {
                            node: self.self_node.clone(),
                        });
                    }
                } else {
                    // The leader itself is exiting: confirm to itself.
                    self.exiting_confirmed.insert(self.self_node.clone());
                }
            }
            Some(MemberStatus::Down) => {
                // As Akka: tell a few members that we know, then stop taking
                // part. Without heartbeat answers this node becomes
                // unreachable, and the leader removes it.
                tracing::warn!(
                    "this node {} was marked Down; leaving the cluster",
                    self.self_node
                );
                let g = self.gossip();
                let others: Vec<UniqueAddress> = g
                    .members
                    .iter()
                    .filter(|m| m.node != self.self_node)
                    .filter(|m| g.reachability.is_reachable_by(&self.self_node, &m.node))
                    .map(|m| m.node.clone())
                    .collect();
                for n in &others {
                    self.gossip_to(ctx, n);
                }
                self.joining = Joining::Idle;
                self.run_shutdown_when_down();
                ctx.stop();
            }
            None if matches!(self.joining, Joining::Joined) => {
                tracing::info!("this node {} was removed from the cluster", self.self_node);
                self.joining = Joining::Idle;
                // After a graceful exit the shutdown already runs.
                self.run_shutdown_when_down();
                ctx.stop();
            }
            _ => {}
        }
    }

    fn heartbeat_tick(&mut self, ctx: &mut Context<Self>) {
        if !self.is_member() {
            return;
        }
        self.heartbeat_seq += 1;
        let receivers: Vec<UniqueAddress> = self.ring.receivers(&self.state).into_iter().collect();
        let now = Instant::now();
        for node in &receivers {
            if !self.detectors.contains_key(node) {
                // Monitoring starts with the first answer, or when it is
                // overdue (a node that never answers is suspected too).
                let mut d = PhiAccrualFailureDetector::new(self.settings.failure_detector.clone());
                d.expect_first_heartbeat(now + self.settings.heartbeat_expected_response_after);
                self.detectors.insert(node.clone(), d);
            }
            if let Some(peer) = self.peer(ctx, &node.address) {
                let _ = peer.tell(Heartbeat {
                    from: self.self_node.clone(),
                    seq: self.heartbeat_seq,
                });
            }
        }
        self.detectors.retain(|n, _| receivers.contains(n));
    }

    /// Applies the failure detector's verdicts to the reachability table,
    /// then the downing strategy.
    fn reap_tick(&mut self, ctx: &mut Context<Self>) {
        if !self.is_member() {
            return;
        }
        let now = Instant::now();
        let me = self.self_node.clone();
        let g = self.gossip();
        let mut reach = g.reachability.clone();
        let mut changed = false;
        for (node, d) in &self.detectors {
            let Some(m) = g.member(node) else { continue };
            let unreachable_by_me = !reach.is_reachable_by(&me, node);
            if d.is_available(now) {
                if unreachable_by_me {
                    tracing::info!("marking node {} as REACHABLE", m.node);
                    reach = reach.reachable(&me, node);
                    changed = true;
                }
            } else if !unreachable_by_me {
                tracing::warn!(
                    "marking node {} ({}) as UNREACHABLE (phi {:.1})",
                    m.node,
                    m.status,
                    d.phi(now)
                );
                reach = reach.unreachable(&me, node);
                changed = true;
            }
        }
        // Nodes this node no longer monitors (the ring moved) count as
        // reachable, as in Akka: otherwise its old mark would stay forever.
        for node in reach.all_unreachable_from(&me) {
            if !self.detectors.contains_key(&node) && g.has_member(&node) {
                reach = reach.reachable(&me, &node);
                changed = true;
            }
        }
        if changed {
            let mut g = self.gossip().clone();
            g.reachability = reach;
            self.commit(g);
        }
        self.downing_tick(ctx);
    }

    /// What the split brain resolver needs from a change (as Akka's): a
    /// member becoming unreachable, reachable, Down, Up or Exiting restarts
    /// the `stable_after` wait; reachability changes also count towards
    /// down-all-when-unstable, until every unreachable member is gone.
    fn note_for_downing(&mut self, events: &[ClusterEvent]) {
        let now = Instant::now();
        let mut restart = false;
        for e in events {
            match e {
                ClusterEvent::UnreachableMember(m)
                | ClusterEvent::ReachableMember(m)
                | ClusterEvent::MemberDowned(m)
                    if m.node != self.self_node =>
                {
                    restart = true;
                    let first = self.reachability_changes.map_or(now, |(first, _)| first);
                    self.reachability_changes = Some((first, now));
                }
                ClusterEvent::MemberUp(_) | ClusterEvent::MemberExited(_) => restart = true,
                _ => {}
            }
        }
        if restart {
            self.stable_deadline = now + self.decision_wait();
        }
        if self.reachability_changes.is_none() {
            return;
        }
        let g = self.gossip();
        let all_gone = g
            .reachability
            .all_unreachable_or_terminated()
            .iter()
            .filter(|n| **n != self.self_node)
            .all(|n| {
                g.member(n)
                    .is_none_or(|m| matches!(m.status, MemberStatus::Down | MemberStatus::Exiting))
            });
        if all_gone {
            self.reachability_changes = None;
        }
    }

    /// The split brain resolver: once reachability and membership have
    /// been stable for `stable_after`, the leader of the reachable side
    /// decides which members to down. If reachability keeps changing for
    /// `stable_after + down_all_when_unstable`, every node downs all members.
    fn downing_tick(&mut self, _ctx: &mut Context<Self>) {
        let d = &self.settings.downing;
        if d_is_none(&d.strategy) {
            return;
        }
        let now = Instant::now();
        if let Some((first, latest)) = self.reachability_changes {
            match d.down_all_when_unstable {
                // On every node, not only the leader (as Akka): when the
                // failure detectors keep flapping no side can be trusted.
                Some(extra) if now.duration_since(first) >= d.stable_after + extra => {
                    tracing::warn!(
                        "split brain resolver: reachability kept changing for {:?}; \
                         downing all members",
                        now.duration_since(first)
                    );
                    self.act_on_decision(&DowningView::of(&self.state), Decision::DownAll);
                    return;
                }
                None if now.duration_since(latest) >= d.stable_after * 2 => {
                    self.reachability_changes = None;
                }
                _ => {}
            }
        }
        if self.gossip().reachability.is_all_reachable() {
            return;
        }
        let view = DowningView::of(&self.state);
        // As Akka: the leader decides, once it is itself a full member.
        let responsible = self.state.is_leader()
            && self
                .self_member()
                .is_some_and(|m| m.status != MemberStatus::Joining);
        if !responsible || view.unreachable().is_empty() || now < self.stable_deadline {
            return;
        }
        let decision = view.decide(&self.settings.downing.strategy);
        self.act_on_decision(&view, decision);
    }

    /// Downs the members `decision` names.
    fn act_on_decision(&mut self, view: &DowningView, decision: Decision) {
        let strategy = self.settings.downing.strategy.clone();
        let nodes = view
            .nodes_to_down(&strategy, decision)
            .unwrap_or_else(|problem| {
                tracing::warn!("{problem}");
                view.nodes_to_down(&strategy, Decision::DownAll)
                    .unwrap_or_default()
            });
        if nodes.is_empty() {
            return;
        }
        let indirect = view.indirectly_connected();
        tracing::warn!(
            "split brain resolver ({strategy:?}) decided {decision:?} and downs {:?}{}; \
             {} unreachable of {} members{}",
            nodes.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            if nodes.contains(&self.self_node) {
                " including this node"
            } else {
                ""
            },
            view.unreachable().len(),
            self.gossip().members.len(),
            if indirect.is_empty() {
                String::new()
            } else {
                format!(
                    ", indirectly connected {:?}",
                    indirect.iter().map(|n| n.to_string()).collect::<Vec<_>>()
                )
            }
        );
        let mut g = self.gossip().clone();
        let downed: Vec<Member> = nodes
            .iter()
            .filter_map(|n| g.member(n))
            .map(|m| m.with_status(MemberStatus::Down))
            .collect();
        g.update(downed);
        self.commit(g);
        self.reachability_changes = None;
        self.stable_deadline = Instant::now() + self.decision_wait();
    }

    /// How long the resolver waits for stability before it decides.
    fn decision_wait(&self) -> Duration {
        match self.settings.downing.strategy {
            DowningStrategy::AutoDownUnsafe { after } => after,
            _ => self.settings.downing.stable_after,
        }
    }

    fn mark(&mut self, address: &Address, status: MemberStatus) {
        let Some(m) = self
            .gossip()
            .members
            .iter()
            .find(|m| &m.node.address == address)
            .cloned()
        else {
            tracing::info!("ignoring {status} of unknown node {address}");
            return;
        };
        if m.status == status || !m.status.can_move_to(status) {
            tracing::info!("ignoring {status} of {} which is {}", m.node, m.status);
            return;
        }
        tracing::info!("marking {} as {status}", m.node);
        let mut g = self.gossip().clone();
        g.update([m.with_status(status)]);
        self.commit(g);
    }
}

fn d_is_none(s: &DowningStrategy) -> bool {
    matches!(s, DowningStrategy::None)
}

/// A short digest of who has seen the state (FNV-1a over their clock
/// keys, in order).
fn seen_digest(g: &Gossip) -> u64 {
    crate::member::fnv1a(g.seen.iter().flat_map(|n| n.clock_key().to_le_bytes()))
}

/// A seed answered that it is part of a cluster.
#[derive(Debug, Message)]
pub(crate) struct SeedAcked(UniqueAddress);

fn log_event(e: &ClusterEvent) {
    match e {
        ClusterEvent::LeaderChanged(Some(l)) => tracing::info!("leader is now {l}"),
        ClusterEvent::LeaderChanged(None) => tracing::info!("no member can lead now"),
        ClusterEvent::UnreachableMember(m) => tracing::warn!("member {} is unreachable", m.node),
        ClusterEvent::ReachableMember(m) => tracing::info!("member {} is reachable again", m.node),
        other => tracing::debug!("cluster event {other:?}"),
    }
}

#[handlers]
impl ClusterCore {
    async fn tick(&mut self, t: Tick, ctx: &mut Context<Self>) {
        match t {
            Tick::Gossip => self.gossip_tick(ctx),
            Tick::Leader => self.leader_tick(ctx),
            Tick::Reap => self.reap_tick(ctx),
            Tick::Heartbeat => self.heartbeat_tick(ctx),
            Tick::Join => self.join_round(ctx),
        }
        self.push_change(ctx);
    }

    async fn user_action(&mut self, a: UserAction, ctx: &mut Context<Self>) {
        match a {
            UserAction::JoinSeeds(seeds) => self.start_joining(ctx, seeds),
            UserAction::Leave(addr) => self.mark(&addr, MemberStatus::Leaving),
            UserAction::Down(addr) => self.mark(&addr, MemberStatus::Down),
        }
        self.push_change(ctx);
    }

    async fn get_stats(&mut self, _q: GetStats, _ctx: &mut Context<Self>) -> GossipStats {
        self.stats
    }

    async fn get_state(&mut self, _q: GetState, _ctx: &mut Context<Self>) -> CurrentClusterState {
        CurrentClusterState::of(&self.state)
    }

    async fn subscribe(&mut self, s: Subscribe, _ctx: &mut Context<Self>) -> CurrentClusterState {
        self.subscribers.push(s.0);
        CurrentClusterState::of(&self.state)
    }

    async fn subscribe_actor(&mut self, s: SubscribeActor, ctx: &mut Context<Self>) {
        // Subscribing again starts over with a fresh snapshot.
        self.actor_subscribers.retain(|a| a.actor != s.actor);
        let snapshot = Box::new(CurrentClusterState::of(&self.state));
        match (s.sink)(Delivery::Snapshot(snapshot)) {
            Err(DeliveryFailure::Stopped) => return,
            Err(DeliveryFailure::Full) => tracing::warn!(
                "cluster event subscriber {} has a full mailbox: it misses the current state",
                s.actor
            ),
            Ok(()) => {}
        }
        ctx.watch_any(&s.actor);
        self.actor_subscribers.push(ActorSubscriber {
            actor: s.actor,
            sink: s.sink,
        });
    }

    async fn subscription_count(
        &mut self,
        _q: GetSubscriptionCount,
        _ctx: &mut Context<Self>,
    ) -> usize {
        // Channels whose receiver is gone would otherwise be counted until
        // the next event finds them closed (so the count could drop by
        // itself, later).
        self.subscribers.retain(|s| !s.is_closed());
        self.subscribers.len() + self.actor_subscribers.len()
    }

    async fn unsubscribe(&mut self, u: Unsubscribe, ctx: &mut Context<Self>) {
        let before = self.actor_subscribers.len();
        self.actor_subscribers.retain(|a| a.actor != u.0);
        if self.actor_subscribers.len() != before {
            ctx.unwatch(&u.0);
        }
    }

    async fn terminated(&mut self, t: Terminated, _ctx: &mut Context<Self>) {
        // A subscriber stopped: its subscription ends.
        self.actor_subscribers.retain(|a| a.actor != t.actor);
    }

    async fn leave_self(&mut self, l: LeaveSelf, ctx: &mut Context<Self>) {
        if self.is_member() && !self.exit_reached(SelfExit::Leaving) {
            tracing::info!(
                "coordinated shutdown: {} leaves the cluster",
                self.self_node
            );
            let me = self.self_node.address.clone();
            self.mark(&me, MemberStatus::Leaving);
            self.push_change(ctx);
        }
        self.exit_waiters.push((SelfExit::Leaving, l.0));
        self.wake_exit_waiters();
    }

    async fn when_exiting(&mut self, w: WhenExiting, _ctx: &mut Context<Self>) {
        self.exit_waiters.push((SelfExit::Exiting, w.0));
        self.wake_exit_waiters();
    }

    async fn exiting_done(&mut self, _m: ExitingCompleted, ctx: &mut Context<Self>) {
        self.exiting_completed = true;
        self.check_self_status(ctx);
    }

    async fn shutdown_cluster(&mut self, _m: ShutdownCluster, ctx: &mut Context<Self>) {
        match self.self_member().map(|m| m.status) {
            // It confirmed its exit: the leader removes it soon and tells it.
            Some(MemberStatus::Exiting) => {}
            Some(status) => {
                tracing::warn!(
                    "the cluster extension stops while this node is still {status}; the others \
                     will find it unreachable"
                );
                self.joining = Joining::Idle;
                ctx.stop();
            }
            None => {
                self.joining = Joining::Idle;
                ctx.stop();
            }
        }
    }

    async fn seed_acked(&mut self, a: SeedAcked, ctx: &mut Context<Self>) {
        if self.is_member() {
            return;
        }
        let retry_after = self.settings.retry_unsuccessful_join_after;
        let Joining::Seeds { join_sent, .. } = &mut self.joining else {
            return;
        };
        if join_sent.is_some_and(|t| t.elapsed() < retry_after) {
            return;
        }
        *join_sent = Some(Instant::now());
        let Some(peer) = self.peer(ctx, &a.0.address) else {
            return;
        };
        let join = Join {
            node: self.self_node.clone(),
            roles: self.settings.roles.clone(),
        };
        let me = ctx.myself().clone();
        let timeout = self.settings.seed_node_timeout;
        troupe_core::rt::spawn(async move {
            match peer.ask_timeout(join, timeout).await {
                Ok(JoinReply::Welcome(g)) => {
                    let _ = me.tell(Welcomed(g));
                }
                Ok(JoinReply::Retry(why)) => {
                    tracing::info!("join not accepted yet: {why}");
                    let _ = me.tell(JoinRetry);
                }
                Ok(JoinReply::Refused(why)) => tracing::error!("join refused: {why}"),
                Err(e) => tracing::debug!("join got no answer: {e}"),
            }
        });
    }

    async fn join_retry(&mut self, _r: JoinRetry, _ctx: &mut Context<Self>) {
        if let Joining::Seeds { join_sent, .. } = &mut self.joining {
            *join_sent = None;
        }
    }

    async fn welcomed(&mut self, w: Welcomed, _ctx: &mut Context<Self>) {
        self.on_welcome(*w.0);
    }

    async fn init_join(&mut self, _m: InitJoin, _ctx: &mut Context<Self>) -> InitJoinReply {
        match self.self_member() {
            Some(m)
                if matches!(
                    m.status,
                    MemberStatus::Up | MemberStatus::WeaklyUp | MemberStatus::Joining
                ) =>
            {
                InitJoinReply::Ack(self.self_node.clone())
            }
            _ => InitJoinReply::Nack,
        }
    }

    async fn join(&mut self, j: Join, ctx: &mut Context<Self>) -> JoinReply {
        let reply = self.on_join(j);
        self.push_change(ctx);
        reply
    }

    async fn gossip_envelope(&mut self, env: GossipEnvelope, ctx: &mut Context<Self>) {
        self.receive_gossip(ctx, env);
        self.push_change(ctx);
    }

    async fn gossip_status(&mut self, st: GossipStatus, ctx: &mut Context<Self>) {
        self.receive_status(ctx, st);
    }

    async fn heartbeat(&mut self, hb: Heartbeat, ctx: &mut Context<Self>) {
        if let Some(peer) = self.peer(ctx, &hb.from.address) {
            let _ = peer.tell(HeartbeatRsp {
                from: self.self_node.clone(),
                seq: hb.seq,
            });
        }
    }

    async fn heartbeat_rsp(&mut self, rsp: HeartbeatRsp, _ctx: &mut Context<Self>) {
        if let Some(d) = self.detectors.get_mut(&rsp.from) {
            d.heartbeat(Instant::now());
        }
    }

    async fn exiting_confirmed(&mut self, c: ExitingConfirmed, _ctx: &mut Context<Self>) {
        self.exiting_confirmed.insert(c.node);
    }
}

/// A join was answered "not now": the next seed answer may try again.
#[derive(Debug, Clone, Copy, Message)]
pub(crate) struct JoinRetry;

/// The reply of a join, back in the core.
#[derive(Debug, Message)]
pub(crate) struct Welcomed(Box<Gossip>);

/// Registers the protocol's messages for remoting (control connection).
pub(crate) fn register(system: &ActorSystem) -> Result<(), troupe_core::RegisterError> {
    system
        .register_control::<ClusterCore, InitJoin>()?
        .register_control::<ClusterCore, Join>()?
        .register_control::<ClusterCore, GossipEnvelope>()?
        .register_control::<ClusterCore, GossipStatus>()?
        .register_control::<ClusterCore, Heartbeat>()?
        .register_control::<ClusterCore, HeartbeatRsp>()?
        .register_control::<ClusterCore, ExitingConfirmed>()?;
    Ok(())
}
