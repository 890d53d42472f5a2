//! Remote death watch: local actors watching actors on other nodes.
//!
//! A watch is sent to the watched actor's node as a reliable system
//! message (one per watched actor, however many local watchers); that node
//! answers with a death-watch notification when the actor stops. Meanwhile
//! this node heartbeats every node it watches actors on, over the control
//! connection, and a phi accrual failure detector decides when such a node
//! is lost: then the node is quarantined and every watcher of its actors
//! gets `Terminated` with [`StopReason::NodeLost`](crate::StopReason::NodeLost).

use crate::actor_ref::AnyActorRef;
use crate::remote::address::Address;
use crate::remote::association::Association;
use crate::remote::failure_detector::PhiAccrualFailureDetector;
use crate::remote::remote_ref::RemoteTarget;
use crate::remote::wire::{self, Stream, SysMsg};
use crate::system_message::Notifier;
use crate::watch::{StopReason, Terminated};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Watchers of one remote actor.
struct Watched {
    target: Arc<RemoteTarget>,
    watchers: Vec<(u64, Notifier)>,
}

struct Node {
    detector: PhiAccrualFailureDetector,
    /// Keyed by (path, uid).
    actors: HashMap<(String, u64), Watched>,
}

/// The remote watch state of one system.
#[derive(Default)]
pub(crate) struct RemoteWatch {
    nodes: Mutex<HashMap<Address, Node>>,
}

impl RemoteWatch {
    fn lock(&self) -> MutexGuard<'_, HashMap<Address, Node>> {
        self.nodes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Watches `target` for the local watcher `watcher`.
    pub(crate) fn watch(&self, target: &Arc<RemoteTarget>, watcher: u64, notify: Notifier) {
        let assoc = &target.assoc;
        let key = (target.path.path.clone(), target.path.uid);
        let first = {
            let mut nodes = self.lock();
            let node = nodes.entry(target.path.address.clone()).or_insert_with(|| {
                let settings = &assoc.remoting().settings;
                let mut detector =
                    PhiAccrualFailureDetector::new(settings.watch_failure_detector.clone());
                // A node that never answers is lost too.
                detector.expect_first_heartbeat(Instant::now() + settings.watch_heartbeat_interval);
                Node {
                    detector,
                    actors: HashMap::new(),
                }
            });
            let watched = node.actors.entry(key.clone()).or_insert_with(|| Watched {
                target: target.clone(),
                watchers: Vec::new(),
            });
            let first = watched.watchers.is_empty();
            if !watched.watchers.iter().any(|(w, _)| *w == watcher) {
                watched.watchers.push((watcher, notify));
            }
            first
        };
        if first {
            assoc.send_sys(SysMsg::Watch {
                path: key.0,
                uid: key.1,
            });
        }
    }

    /// Stops watching `target` for `watcher`.
    pub(crate) fn unwatch(&self, target: &RemoteTarget, watcher: u64) {
        let key = (target.path.path.clone(), target.path.uid);
        let last = {
            let mut nodes = self.lock();
            let Some(node) = nodes.get_mut(&target.path.address) else {
                return;
            };
            let Some(watched) = node.actors.get_mut(&key) else {
                return;
            };
            watched.watchers.retain(|(w, _)| *w != watcher);
            let last = watched.watchers.is_empty();
            if last {
                node.actors.remove(&key);
                if node.actors.is_empty() {
                    nodes.remove(&target.path.address);
                }
            }
            last
        };
        if last {
            target.assoc.send_sys(SysMsg::Unwatch {
                path: key.0,
                uid: key.1,
            });
        }
    }

    /// How many (remote actor, local watcher) pairs are watched.
    pub(crate) fn watch_count(&self) -> usize {
        self.lock()
            .values()
            .flat_map(|n| n.actors.values())
            .map(|w| w.watchers.len())
            .sum()
    }

    /// The watched actor `path`/`uid` on `from` has stopped.
    pub(crate) fn notified(&self, from: &Address, path: &str, uid: u64, reason: &str) {
        let watched = {
            let mut nodes = self.lock();
            let Some(node) = nodes.get_mut(from) else {
                return;
            };
            let w = node.actors.remove(&(path.to_string(), uid));
            if node.actors.is_empty() {
                nodes.remove(from);
            }
            w
        };
        if let Some(w) = watched {
            let reason = if reason == "stopped" {
                StopReason::Stopped
            } else {
                StopReason::Failed(reason.to_string())
            };
            notify_all(w, reason);
        }
    }

    /// Every watcher of an actor on `address` learns that it is lost.
    pub(crate) fn address_terminated(&self, address: &Address, why: &str) {
        let node = self.lock().remove(address);
        if let Some(node) = node {
            for (_, w) in node.actors {
                notify_all(w, StopReason::NodeLost(why.to_string()));
            }
        }
    }

    /// A heartbeat response from the peer.
    pub(crate) fn heartbeat_from(&self, assoc: &Association, _uid: u64) {
        if let Some(node) = self.lock().get_mut(&assoc.address) {
            node.detector.heartbeat(Instant::now());
        }
    }

    /// One heartbeat round: heartbeats every watched node and returns the
    /// nodes the failure detector gives up on.
    pub(crate) fn tick(
        &self,
        assoc_of: impl Fn(&Address) -> Arc<Association>,
    ) -> Vec<(Address, f64)> {
        let now = Instant::now();
        let mut lost = Vec::new();
        let addresses: Vec<Address> = {
            let nodes = self.lock();
            for (addr, node) in nodes.iter() {
                if !node.detector.is_available(now) {
                    lost.push((addr.clone(), node.detector.phi(now)));
                }
            }
            nodes.keys().cloned().collect()
        };
        for addr in addresses {
            let _ = assoc_of(&addr).enqueue(Stream::Control, wire::encode_heartbeat());
        }
        lost
    }
}

fn notify_all(w: Watched, reason: StopReason) {
    let actor = AnyActorRef::from_remote(w.target);
    for (_, notify) in w.watchers {
        notify(Terminated {
            actor: actor.clone(),
            reason: reason.clone(),
        });
    }
}
