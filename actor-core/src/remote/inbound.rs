//! Handling of decoded inbound frames: user messages to local actors,
//! replies to our asks, system messages, acknowledgements and heartbeats.

use crate::actor_ref::AnyActorRef;
use crate::codec::{DeliverError, InboundMessage};
use crate::remote::association::Association;
use crate::remote::lookup_cache::LookupCache;
use crate::remote::registry::{self, DispatchError, DispatchFn, Inbound, ReceiveFn};
use crate::remote::remoting::RemotingShared;
use crate::remote::reply::RemoteReply;
use crate::remote::reply::ReplySink;
use crate::remote::serde_context;
use crate::remote::wire::{self, Frame, ReplyBody, Stream, UserMsg};
use crate::replier::Replier;
use crate::system::ActorSystem;
use std::any::TypeId;
use std::sync::Arc;

/// Looked-up recipients kept per connection (a path lookup walks the
/// hierarchy under locks; most traffic goes to few actors).
const RECIPIENT_CACHE: usize = 1024;

/// Handles the frames of one inbound connection.
pub(crate) struct InboundHandler {
    remoting: Arc<RemotingShared>,
    assoc: Arc<Association>,
    recipients: LookupCache<AnyActorRef>,
    /// Dispatch functions found so far, by manifest and actor type
    /// (registrations are never removed, so entries stay valid).
    dispatchers: LookupCache<Vec<(TypeId, Dispatch)>>,
}

/// How a message of one manifest reaches an actor of one type, for this
/// connection.
enum Dispatch {
    /// Queued for the actor, which decodes it.
    Decode(DispatchFn),
    /// Given to this connection's own receiver.
    Receive(ReceiveFn),
}

impl InboundHandler {
    pub(crate) fn new(remoting: Arc<RemotingShared>, assoc: Arc<Association>) -> Self {
        InboundHandler {
            remoting,
            assoc,
            recipients: LookupCache::default(),
            dispatchers: LookupCache::default(),
        }
    }

    /// Handles one frame. Runs with this system as the decoding system
    /// (`serde_context::with_system`, which the connection's reader sets
    /// once for each batch of frames): a sender's path and what a receiver
    /// decodes on the spot are read in it.
    pub(crate) fn handle(&mut self, body: &[u8]) {
        debug_assert!(
            serde_context::current().is_some_and(|s| Arc::ptr_eq(&s, &self.remoting.system))
        );
        let frame = match wire::decode(body) {
            Ok(f) => f,
            Err(e) => {
                self.remoting.log_bad_input(format_args!(
                    "dropped a frame from {}: {e}",
                    self.assoc.address
                ));
                return;
            }
        };
        if let Some(f) = &self.remoting.faults {
            if !f.passes_receive(&self.assoc.address) {
                return;
            }
        }
        match frame {
            Frame::Msg(m) => self.deliver(m),
            Frame::Reply { ask, body } => {
                let result = match body {
                    ReplyBody::Ok(bytes) => Ok(bytes),
                    ReplyBody::Err(why) => Err(crate::error::AskError::Remote(why)),
                };
                // No one waiting: the asker timed out.
                self.remoting.asks.complete(ask, result);
            }
            Frame::Sys { seq, msg } => {
                if let Some(msg) = self.assoc.receive_sys(seq, msg) {
                    self.remoting.on_system_message(&self.assoc, msg);
                }
            }
            Frame::SysAck { seq } => self.assoc.ack_sys(seq),
            Frame::Heartbeat => {
                let _ = self.assoc.enqueue(
                    Stream::Control,
                    wire::encode_heartbeat_rsp(self.remoting.uid),
                );
            }
            Frame::HeartbeatRsp { uid } => self.remoting.watch.heartbeat_from(&self.assoc, uid),
            Frame::Hello(_)
            | Frame::Challenge(_)
            | Frame::Auth(_)
            | Frame::Accepted
            | Frame::Refused(_) => self.remoting.log_bad_input(format_args!(
                "dropped a handshake frame from {} on an established connection",
                self.assoc.address
            )),
        }
    }

    /// Runs `f` with the local actor at `path` (of incarnation `uid`, if
    /// not 0), if there is one. Lent from the cache, not cloned: a clone
    /// would write the cell's reference count, which shares its cache line
    /// with the busy mailbox state of the actor.
    fn with_recipient<R>(
        cache: &mut LookupCache<AnyActorRef>,
        remoting: &RemotingShared,
        path: &str,
        uid: u64,
        f: impl FnOnce(&AnyActorRef) -> R,
    ) -> Option<R> {
        if let Some(r) = cache.get_mut(path) {
            if !r.is_terminated() && (uid == 0 || r.uid() == uid) {
                return Some(f(r));
            }
        }
        // Not cached, or stale: looked up again (a stale entry's place is
        // taken by the new incarnation, so a path whose actor restarts
        // does not fill the cache).
        let system = ActorSystem::from_shared(remoting.system.clone());
        let found = system
            .lookup_any(path)
            .filter(|r| uid == 0 || r.uid() == uid);
        let Some(r) = found else {
            cache.remove(path);
            return None;
        };
        if cache.places() >= RECIPIENT_CACHE && cache.get_mut(path).is_none() {
            cache.clear();
        }
        Some(f(cache.insert(path, r)))
    }

    /// Runs `f` with how a message of `manifest` reaches an actor of type
    /// `actor` (looked up once per connection, then cached; one cache
    /// lookup per message and nothing cloned).
    fn with_dispatcher<R>(
        cache: &mut LookupCache<Vec<(TypeId, Dispatch)>>,
        remoting: &RemotingShared,
        manifest: &str,
        actor: TypeId,
        f: impl FnOnce(&mut Dispatch) -> R,
    ) -> Result<R, &'static str> {
        if let Some((_, d)) = cache
            .get_mut(manifest)
            .and_then(|v| v.iter_mut().find(|(t, _)| *t == actor))
        {
            return Ok(f(d));
        }
        let d = match remoting.system.registry.dispatcher(manifest, actor)? {
            Inbound::Decode(dispatch, _) => Dispatch::Decode(dispatch),
            Inbound::Receive(make) => Dispatch::Receive(make()),
        };
        let list = match cache.get_mut(manifest) {
            Some(list) => list,
            None => cache.insert(manifest, Vec::new()),
        };
        list.push((actor, d));
        let last = list.len() - 1;
        Ok(f(&mut list[last].1))
    }

    fn deliver(&mut self, m: UserMsg<'_>) {
        let mut reply = (m.ask != 0).then(|| ReplySink::Wire {
            assoc: self.assoc.clone(),
            ask: m.ask,
        });
        let (remoting, assoc, dispatchers) = (&self.remoting, &self.assoc, &mut self.dispatchers);
        let handled =
            Self::with_recipient(&mut self.recipients, remoting, m.to, m.to_uid, |target| {
                match target.local().map(|c| c.actor_type()) {
                    Some(t) => {
                        Self::with_dispatcher(dispatchers, remoting, m.manifest, t, |dispatch| {
                            let sender = Self::sender(remoting, assoc, &m);
                            Self::dispatch(dispatch, target, &m, reply.take(), sender)
                        })
                    }
                    None => Err("the recipient is not local"),
                }
            });
        let Some(handled) = handled else {
            let manifest = self.remoting.static_manifest(m.manifest);
            let addr = &self.remoting.address;
            self.remoting
                .system
                .dead_letters
                .record(|| format!("{addr}{}", m.to), manifest);
            if let Some(r) = reply {
                r.send(ReplyBody::Err(format!(
                    "no actor at {}{}",
                    self.remoting.address, m.to
                )));
            }
            return;
        };
        let result = match handled {
            Ok(r) => r,
            Err(why) => {
                self.remoting.log_bad_input(format_args!(
                    "dropped a `{}` from {} for {}: {why}",
                    m.manifest, self.assoc.address, m.to
                ));
                if let Some(r) = reply {
                    r.send(ReplyBody::Err(format!(
                        "`{}` cannot be delivered: {why}",
                        m.manifest
                    )));
                }
                return;
            }
        };
        match result {
            Ok(()) | Err(DispatchError::Stopped) => {}
            Err(DispatchError::Undecodable(why)) => self.remoting.log_bad_input(format_args!(
                "dropped a `{}` from {} for {}: it did not decode: {why}",
                m.manifest, self.assoc.address, m.to
            )),
            Err(DispatchError::MailboxFull) => self.remoting.log_bad_input(format_args!(
                "dropped a `{}` from {} for {}: its mailbox is full",
                m.manifest, self.assoc.address, m.to
            )),
        }
    }

    /// The sender a message names, if any and usable (an unusable one is
    /// logged and left out).
    fn sender(
        remoting: &RemotingShared,
        assoc: &Association,
        m: &UserMsg<'_>,
    ) -> Option<AnyActorRef> {
        if m.from.is_empty() {
            return None;
        }
        let parsed = crate::remote::remote_ref::any_ref_from_wire(m.from);
        match parsed {
            Ok(r) => Some(r),
            Err(why) => {
                remoting.log_bad_input(format_args!(
                    "a `{}` from {} has an unusable sender ({why}); delivered without it",
                    m.manifest, assoc.address
                ));
                None
            }
        }
    }

    /// Hands a message to its recipient as `dispatch` says.
    fn dispatch(
        dispatch: &mut Dispatch,
        target: &AnyActorRef,
        m: &UserMsg<'_>,
        reply: Option<ReplySink>,
        sender: Option<AnyActorRef>,
    ) -> Result<(), DispatchError> {
        match dispatch {
            // Queued still encoded: the actor decodes it, in its system.
            Dispatch::Decode(dispatch) => dispatch(target, m.payload, reply, sender),
            // A receiver may decode on the spot (in the batch's decoding
            // context: see `handle`).
            Dispatch::Receive(receive) => {
                // The reply's bytes are already its wire form.
                let reply = reply.map(|sink| {
                    Replier::remote(RemoteReply::new(sink, registry::write_encoded_reply))
                });
                let inbound = InboundMessage {
                    to: target,
                    bytes: m.payload,
                    reply,
                    sender,
                };
                receive(inbound).map_err(|e| match e {
                    DeliverError::Stopped => DispatchError::Stopped,
                    DeliverError::MailboxFull => DispatchError::MailboxFull,
                    other => DispatchError::Undecodable(other.to_string()),
                })
            }
        }
    }
}
