//! The remoting extension of an actor system: the listener, the
//! associations with peers, quarantine, remote asks and remote watch.

use crate::actor_ref::AnyActorRef;
use crate::log_limit::LogLimit;
use crate::remote::address::Address;
use crate::remote::asks::PendingAsks;
use crate::remote::association::Association;
use crate::remote::connection::serve_inbound;
use crate::remote::fault_injection::FaultInjector;
use crate::remote::inbound::InboundHandler;
use crate::remote::remote_watch::RemoteWatch;
use crate::remote::settings::{RemoteSettings, INSECURE_DEVELOPMENT_SECRET};
use crate::remote::wire::SysMsg;
use crate::rt;
use crate::system::SystemShared;
use crate::system_message::SystemMessage;
use crate::watch::StopReason;
use event_listener::Event;
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Tells a connection whether its peer incarnation has been quarantined,
/// looking at the quarantine table only after a quarantine happened.
pub(crate) struct QuarantineCheck {
    uid: u64,
    epoch: u64,
    quarantined: bool,
}

impl QuarantineCheck {
    pub(crate) fn new(uid: u64) -> Self {
        QuarantineCheck {
            uid,
            epoch: u64::MAX,
            quarantined: false,
        }
    }

    pub(crate) fn is_quarantined(&mut self, remoting: &RemotingShared) -> bool {
        let epoch = remoting.quarantine_epoch();
        if epoch != self.epoch {
            self.epoch = epoch;
            self.quarantined = remoting.is_quarantined(self.uid);
        }
        self.quarantined
    }
}

/// Bad input from the network logged per window; the rest only counted.
const BAD_INPUT_LOG_LIMIT: u32 = 20;
const BAD_INPUT_LOG_WINDOW: Duration = Duration::from_secs(10);

/// State of remoting shared by its tasks.
pub(crate) struct RemotingShared {
    pub(crate) system: Arc<SystemShared>,
    pub(crate) settings: RemoteSettings,
    pub(crate) secret: String,
    pub(crate) address: Address,
    pub(crate) uid: u64,
    pub(crate) asks: PendingAsks,
    pub(crate) watch: RemoteWatch,
    pub(crate) faults: Option<FaultInjector>,
    associations: Mutex<HashMap<Address, Arc<Association>>>,
    /// Quarantined UIDs (random 64-bit: unique across incarnations), with
    /// their addresses for the logs.
    quarantined: Mutex<HashMap<u64, Address>>,
    /// Bumped by every quarantine, so that connections re-check their
    /// peer only when something changed (not per frame).
    quarantine_epoch: AtomicU64,
    shut_down: AtomicBool,
    shutdown_event: Event,
    inbound: Mutex<HashMap<u64, rt::TcpStream>>,
    next_conn: AtomicU64,
    bad_input: Mutex<(Instant, u32, u64)>,
    bad_input_total: AtomicU64,
    /// User messages refused because the queue to their node was full.
    refused_total: AtomicU64,
    refused_log: LogLimit,
    /// The accept loop, awaited at shutdown so that the port is free when
    /// shutdown returns.
    acceptor: Mutex<Option<rt::JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl RemotingShared {
    /// Binds the listener and starts remoting for `system`.
    pub(crate) fn start(
        system: &Arc<SystemShared>,
        settings: RemoteSettings,
    ) -> Result<Arc<Self>, String> {
        let std_listener = std::net::TcpListener::bind(&settings.bind)
            .map_err(|e| format!("cannot listen on {}: {e}", settings.bind))?;
        let local = std_listener
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        let host = match &settings.canonical_host {
            Some(h) => h.clone(),
            None => local.ip().to_string(),
        };
        let address = Address::new(system.name(), host, local.port());
        let secret = match &settings.secret {
            Some(s) => s.clone(),
            None => {
                tracing::warn!(
                    "remoting on {address} uses the insecure development secret: set a shared secret \
                     (RemoteSettings::with_secret) before running anywhere but your own machine"
                );
                INSECURE_DEVELOPMENT_SECRET.to_string()
            }
        };
        let faults = settings.fault_injection.then(|| {
            tracing::warn!("fault injection is enabled on {address} (tests only)");
            FaultInjector::default()
        });
        let shared = Arc::new(RemotingShared {
            system: system.clone(),
            uid: fastrand::u64(1..),
            address,
            secret,
            asks: PendingAsks::default(),
            watch: RemoteWatch::default(),
            faults,
            associations: Mutex::new(HashMap::new()),
            quarantined: Mutex::new(HashMap::new()),
            quarantine_epoch: AtomicU64::new(0),
            shut_down: AtomicBool::new(false),
            shutdown_event: Event::new(),
            inbound: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
            bad_input: Mutex::new((Instant::now(), 0, 0)),
            bad_input_total: AtomicU64::new(0),
            refused_total: AtomicU64::new(0),
            refused_log: LogLimit::per_second(),
            acceptor: Mutex::new(None),
            settings,
        });
        let listener = rt::TcpListener::from(std_listener);
        *lock(&shared.acceptor) = Some(rt::spawn(accept_loop(shared.clone(), listener)));
        rt::spawn(housekeeping(shared.clone()));
        tracing::info!(
            "remoting started on {} (UID {})",
            shared.address,
            shared.uid
        );
        Ok(shared)
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// The association with `address`, created on first use.
    pub(crate) fn association(self: &Arc<Self>, address: &Address) -> Arc<Association> {
        let mut map = lock(&self.associations);
        if let Some(a) = map.get(address) {
            return a.clone();
        }
        let a = Arc::new(Association::new(self.clone(), address.clone()));
        if self.is_shut_down() {
            // Nothing goes out after shutdown: a closed association that
            // is not kept (sends to it fail at once).
            a.close();
            return a;
        }
        map.insert(address.clone(), a.clone());
        a
    }

    pub(crate) fn is_quarantined(&self, uid: u64) -> bool {
        lock(&self.quarantined).contains_key(&uid)
    }

    /// The number of quarantines so far (see `QuarantineCheck`).
    pub(crate) fn quarantine_epoch(&self) -> u64 {
        self.quarantine_epoch.load(Ordering::Acquire)
    }

    /// A handshake reported `uid` for the association's peer. A different
    /// UID than before means the peer restarted: the old one is quarantined.
    pub(crate) fn peer_uid_seen(self: &Arc<Self>, assoc: &Arc<Association>, uid: u64) {
        if let Some(old) = assoc.set_peer_uid(uid) {
            self.quarantine(
                &assoc.address,
                old,
                &format!("the peer restarted (new UID {uid})"),
            );
        }
    }

    /// Quarantines `address` with `uid`: it can never talk to this system
    /// again; watchers of its actors get `Terminated`, asks to it fail.
    pub(crate) fn quarantine(self: &Arc<Self>, address: &Address, uid: u64, why: &str) {
        if lock(&self.quarantined)
            .insert(uid, address.clone())
            .is_some()
        {
            return;
        }
        self.quarantine_epoch.fetch_add(1, Ordering::AcqRel);
        tracing::warn!("association with {address} (UID {uid}) is quarantined: {why}");
        let assoc = self.association(address);
        assoc.reset_incarnation(uid);
        let reason = format!("{address} (UID {uid}) was quarantined: {why}");
        self.watch.address_terminated(address, &reason);
        self.asks.fail_peer(address, &reason);
    }

    /// A node this system watches actors on is lost without a known UID,
    /// or with one: either way its watchers learn it.
    fn node_lost(self: &Arc<Self>, address: &Address, why: &str) {
        match self.association(address).peer_uid() {
            Some(uid) => self.quarantine(address, uid, why),
            None => {
                let reason = format!("{address} is unreachable: {why}");
                tracing::warn!("{reason}");
                self.watch.address_terminated(address, &reason);
                self.asks.fail_peer(address, &reason);
            }
        }
    }

    pub(crate) fn inbound_handler(self: &Arc<Self>, assoc: Arc<Association>) -> InboundHandler {
        InboundHandler::new(self.clone(), assoc)
    }

    pub(crate) fn static_manifest(&self, manifest: &str) -> &'static str {
        self.system
            .registry
            .static_manifest(manifest)
            .unwrap_or("(unregistered remote message)")
    }

    /// Logs bad input from the network, at most `BAD_INPUT_LOG_LIMIT` lines
    /// per window; the rest are counted and summarised.
    pub(crate) fn log_bad_input(&self, what: fmt::Arguments<'_>) {
        self.bad_input_total.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.bad_input);
        let now = Instant::now();
        if now.duration_since(st.0) > BAD_INPUT_LOG_WINDOW {
            if st.2 > 0 {
                tracing::warn!(
                    "{} more bad inputs from the network were dropped without a log line",
                    st.2
                );
            }
            *st = (now, 0, 0);
        }
        if st.1 < BAD_INPUT_LOG_LIMIT {
            st.1 += 1;
            tracing::warn!("{what}");
        } else {
            st.2 += 1;
        }
    }

    pub(crate) fn track_inbound(&self, stream: rt::TcpStream) -> u64 {
        let id = self.next_conn.fetch_add(1, Ordering::Relaxed);
        lock(&self.inbound).insert(id, stream);
        if self.is_shut_down() {
            let _ = lock(&self.inbound)
                .remove(&id)
                .map(|s| s.shutdown(std::net::Shutdown::Both));
        }
        id
    }

    pub(crate) fn untrack_inbound(&self, id: u64) {
        lock(&self.inbound).remove(&id);
    }

    /// Acts on a system message from `assoc`'s peer, delivered in order.
    pub(crate) fn on_system_message(self: &Arc<Self>, assoc: &Arc<Association>, msg: SysMsg) {
        match msg {
            SysMsg::Watch { path, uid } => {
                let system = crate::system::ActorSystem::from_shared(self.system.clone());
                let target = system
                    .lookup_any(&path)
                    .filter(|r| uid == 0 || r.uid() == uid);
                let notify_assoc = assoc.clone();
                let (p, u) = (path.clone(), uid);
                let notify: crate::system_message::Notifier = Box::new(move |t| {
                    let reason = match t.reason {
                        StopReason::Stopped => "stopped".to_string(),
                        other => other.to_string(),
                    };
                    notify_assoc.send_sys(SysMsg::DeathWatchNotification {
                        path: p,
                        uid: u,
                        reason,
                    });
                });
                match target {
                    Some(t) => {
                        if let Err(SystemMessage::Watch { notify, .. }) =
                            t.send_system(SystemMessage::Watch {
                                watcher: assoc.watcher_id,
                                notify,
                            })
                        {
                            notify(crate::watch::Terminated {
                                actor: t.clone(),
                                reason: StopReason::Stopped,
                            });
                        }
                    }
                    None => {
                        // Never existed or already gone: tell at once.
                        assoc.send_sys(SysMsg::DeathWatchNotification {
                            path,
                            uid,
                            reason: "stopped".into(),
                        });
                    }
                }
            }
            SysMsg::Unwatch { path, uid } => {
                let system = crate::system::ActorSystem::from_shared(self.system.clone());
                if let Some(t) = system
                    .lookup_any(&path)
                    .filter(|r| uid == 0 || r.uid() == uid)
                {
                    let _ = t.send_system(SystemMessage::Unwatch {
                        watcher: assoc.watcher_id,
                    });
                }
            }
            SysMsg::DeathWatchNotification { path, uid, reason } => {
                self.watch.notified(&assoc.address, &path, uid, &reason);
            }
        }
    }

    /// Stops remoting: closes the listener, every connection and queue, and
    /// fails the asks still waiting.
    pub(crate) async fn shutdown(&self) {
        if self.shut_down.swap(true, Ordering::AcqRel) {
            return;
        }
        self.shutdown_event.notify(usize::MAX);
        let assocs: Vec<Arc<Association>> =
            lock(&self.associations).drain().map(|(_, a)| a).collect();
        for a in &assocs {
            a.close();
        }
        // What was queued before the shutdown still goes out, within a bound.
        // (The writers run on their own; awaiting them in turn is enough.)
        let flushed = async {
            for a in &assocs {
                a.flushed().await;
            }
        };
        if rt::timeout(self.settings.shutdown_flush_timeout, flushed)
            .await
            .is_none()
        {
            tracing::info!(
                "remoting on {}: some queued messages were not sent within the shutdown flush \
                 timeout ({:?})",
                self.address,
                self.settings.shutdown_flush_timeout
            );
            // A writer stuck on a peer that stopped reading ends now.
            for a in &assocs {
                a.abort_connections();
            }
        }
        for (_, s) in lock(&self.inbound).drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        self.asks.fail_all("the actor system shut down");
        let acceptor = lock(&self.acceptor).take();
        if let Some(a) = acceptor {
            a.await;
        }
        tracing::debug!("remoting on {} stopped", self.address);
    }

    /// Sleeps for `d`, or less if remoting shuts down meanwhile.
    pub(crate) async fn sleep_unless_shut_down(&self, d: Duration) {
        let stop = self.shutdown_event.listen();
        if self.is_shut_down() {
            return;
        }
        futures_lite::future::or(rt::sleep(d), stop).await;
    }

    /// How many bad inputs from the network were dropped so far.
    pub(crate) fn bad_input_count(&self) -> u64 {
        self.bad_input_total.load(Ordering::Relaxed)
    }

    /// Counts a user message refused because the queue to `peer` was full
    /// (handed back to its sender, or failing its ask), and logs it at most
    /// once a second: callers that ignore the refusal leave this trace.
    pub(crate) fn note_refused(&self, peer: &Address) {
        let n = self.refused_total.fetch_add(1, Ordering::Relaxed) + 1;
        if self.refused_log.allow() {
            tracing::debug!(
                "the queue of messages to {peer} is full: a message was refused ({n} so far on \
                 this node; see Remoting::refused_count)"
            );
        }
    }

    /// How many sends of user messages were refused so far because the
    /// queue to their node was full.
    pub(crate) fn refused_count(&self) -> u64 {
        self.refused_total.load(Ordering::Relaxed)
    }
}

async fn accept_loop(shared: Arc<RemotingShared>, listener: rt::TcpListener) {
    loop {
        let stop = shared.shutdown_event.listen();
        if shared.is_shut_down() {
            return;
        }
        let accepted = futures_lite::future::or(async { Some(listener.accept().await) }, async {
            stop.await;
            None
        })
        .await;
        match accepted {
            None => return,
            Some(Ok((stream, from))) => {
                rt::spawn(serve_inbound(shared.clone(), stream, from));
            }
            Some(Err(e)) => {
                tracing::warn!("accepting a connection on {} failed: {e}", shared.address);
                // Out of file descriptors and the like: do not spin.
                rt::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Periodic work: redelivery of system messages (and giving up on a peer
/// that never acknowledges), remote watch heartbeats and failure
/// detection, and forgetting asks whose askers gave up.
async fn housekeeping(shared: Arc<RemotingShared>) {
    let resend_every = shared.settings.system_message_resend_interval;
    let heartbeat_every = shared.settings.watch_heartbeat_interval;
    let tick = resend_every.min(heartbeat_every);
    let mut last_resend = Instant::now();
    let mut last_heartbeat = Instant::now();
    loop {
        let stop = shared.shutdown_event.listen();
        if shared.is_shut_down() {
            return;
        }
        let stopped = futures_lite::future::or(
            async {
                rt::sleep(tick).await;
                false
            },
            async {
                stop.await;
                true
            },
        )
        .await;
        if stopped || shared.is_shut_down() {
            return;
        }
        let now = Instant::now();
        if now.duration_since(last_heartbeat) >= heartbeat_every {
            last_heartbeat = now;
            let lost = shared.watch.tick(|a| shared.association(a));
            for (addr, phi) in lost {
                shared.node_lost(
                    &addr,
                    &format!("remote death watch failure detector (phi {phi:.1})"),
                );
            }
        }
        if now.duration_since(last_resend) >= resend_every {
            last_resend = now;
            let assocs: Vec<Arc<Association>> =
                lock(&shared.associations).values().cloned().collect();
            for a in assocs {
                if let Some(waited) = a.resend_unacked() {
                    if waited > shared.settings.give_up_system_message_after {
                        let why = format!("system messages unacknowledged for {waited:?}");
                        match a.peer_uid() {
                            Some(uid) => shared.quarantine(&a.address, uid, &why),
                            None => shared.node_lost(&a.address, &why),
                        }
                    }
                }
            }
            shared.asks.sweep(now);
        }
    }
}

/// The remoting of an actor system (see [`ActorSystem::remoting`](crate::ActorSystem::remoting)).
#[derive(Clone)]
pub struct Remoting {
    pub(crate) shared: Arc<RemotingShared>,
}

impl fmt::Debug for Remoting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remoting")
            .field("address", &self.shared.address)
            .field("uid", &self.shared.uid)
            .finish()
    }
}

impl Remoting {
    /// This system's address, with the port actually bound.
    pub fn address(&self) -> &Address {
        &self.shared.address
    }

    /// The random UID of this incarnation of the system.
    pub fn uid(&self) -> u64 {
        self.shared.uid
    }

    /// The fault-injection switch, if enabled in the settings.
    pub fn fault_injector(&self) -> Option<FaultInjector> {
        self.shared.faults.clone()
    }

    /// True if `address` with `uid` has been quarantined by this system.
    pub fn is_quarantined(&self, address: &Address, uid: u64) -> bool {
        lock(&self.shared.quarantined).get(&uid) == Some(address)
    }

    /// Quarantines a peer incarnation by hand (as Akka's
    /// `RemoteTransport.quarantine`): it can never talk to this system again.
    pub fn quarantine(&self, address: &Address, uid: u64, why: &str) {
        self.shared.quarantine(address, uid, why);
    }

    /// The UID of the peer at `address`, once a handshake has told it.
    pub fn peer_uid(&self, address: &Address) -> Option<u64> {
        let map = lock(&self.shared.associations);
        map.get(address).and_then(|a| a.peer_uid())
    }

    /// Frames, connections and messages from the network dropped so far
    /// because they were malformed, oversized, unknown or undeliverable.
    pub fn bad_input_count(&self) -> u64 {
        self.shared.bad_input_count()
    }

    /// Sends refused so far because the queue to the message's node was
    /// full: `TellError::MailboxFull` for a remote actor,
    /// `AskError::MailboxFull`, `SendEncodedError::Full`. Each refused
    /// message was handed back to its sender, or failed its ask, and is
    /// not a dead letter; a sender that retries one message counts each
    /// try. A count that grows
    /// means a peer that reads slower than this node sends, or a link that
    /// is congested; senders that wait for room (`ActorRef::send`) are not
    /// refused.
    pub fn refused_count(&self) -> u64 {
        self.shared.refused_count()
    }

    /// How many watches of remote actors local actors hold (one per pair
    /// of watcher and watched actor): for monitoring. A watcher's watches
    /// end when it unwatches, when it stops, or when the watched actor or
    /// its node goes.
    pub fn remote_watch_count(&self) -> usize {
        self.shared.watch.watch_count()
    }

    /// A reference to the actor at `path` (such as `/user/name`) on the
    /// node at `address`, typed as it is declared (see
    /// [`ActorSystem::resolve`](crate::ActorSystem::resolve)).
    pub(crate) fn remote_ref(&self, path: crate::remote::address::RemotePath) -> AnyActorRef {
        let assoc = self.shared.association(&path.address);
        AnyActorRef::from_remote(Arc::new(crate::remote::remote_ref::RemoteTarget {
            path,
            assoc,
        }))
    }
}
