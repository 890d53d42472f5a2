//! The fault-injection switch of the transport, for tests: like Akka's
//! TestConductor, it blackholes or drops traffic between this system and a
//! peer, in one or both directions, or holds this system's messages to a
//! peer in their queue (a congested link), and can be switched at run
//! time. It exists only when `RemoteSettings::fault_injection` is on.

use crate::remote::address::Address;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// Which traffic a fault applies to, seen from this system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Frames this system sends to the peer.
    Send,
    /// Frames this system receives from the peer.
    Receive,
    /// Both.
    Both,
}

/// What happens to the frames of one direction.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Pass,
    Blackhole,
    /// Drops each frame with this probability.
    Drop(f64),
}

#[derive(Debug, Clone, Copy)]
struct Rule {
    send: Mode,
    receive: Mode,
    /// Messages to the peer stay in their queue (see `FaultInjector::hold`).
    hold: bool,
}

impl Rule {
    const PASS: Rule = Rule {
        send: Mode::Pass,
        receive: Mode::Pass,
        hold: false,
    };

    fn is_pass(&self) -> bool {
        self.send == Mode::Pass && self.receive == Mode::Pass && !self.hold
    }
}

/// The switch. Get it with [`Remoting::fault_injector`](crate::remote::Remoting::fault_injector).
///
/// ```
/// use troupe_core::prelude::*;
/// use troupe_core::remote::{Direction, RemoteSettings};
///
/// let system = ActorSystem::builder("a")
///     .remote(RemoteSettings::new("127.0.0.1:0").with_fault_injection())
///     .build()
///     .unwrap();
/// let faults = system.remoting().unwrap().fault_injector().unwrap();
/// let peer = "troupe://b@127.0.0.1:2552".parse().unwrap();
/// faults.blackhole(&peer, Direction::Both);
/// faults.pass_through(&peer);
/// troupe_core::rt::block_on(system.shutdown());
/// ```
///
/// Clones are handles to the same switch.
#[derive(Debug, Default, Clone)]
pub struct FaultInjector {
    inner: Arc<Rules>,
}

#[derive(Debug, Default)]
struct Rules {
    /// Fast path: no rule at all.
    any: AtomicBool,
    rules: RwLock<HashMap<Address, Rule>>,
}

impl FaultInjector {
    fn update(&self, peer: &Address, change: impl FnOnce(&mut Rule)) {
        let mut rules = self.inner.rules.write().unwrap_or_else(|e| e.into_inner());
        change(rules.entry(peer.clone()).or_insert(Rule::PASS));
        rules.retain(|_, r| !r.is_pass());
        self.inner.any.store(!rules.is_empty(), Ordering::Release);
    }

    fn set(&self, peer: &Address, direction: Direction, mode: Mode) {
        self.update(peer, |rule| {
            if matches!(direction, Direction::Send | Direction::Both) {
                rule.send = mode;
            }
            if matches!(direction, Direction::Receive | Direction::Both) {
                rule.receive = mode;
            }
        });
        tracing::warn!("fault injection: traffic with {peer} ({direction:?}) is now {mode:?}");
    }

    /// Holds the messages this system queues for `peer` on the ordinary
    /// lane from now on, unwritten, as a congested link would, until
    /// [`release`](Self::release) or [`pass_through`](Self::pass_through)
    /// (a frame already being written still goes): once the queue is full
    /// (`RemoteSettings::outbound_queue_size`), sends to the peer are
    /// refused as on a slow link. The control lane still passes
    /// (heartbeats, system messages, cluster gossip, messages registered
    /// as control), so the peer stays reachable. Held messages go out in
    /// order when released, unless the connection is lost meanwhile (as
    /// on a real link); shutting the system down writes them out.
    pub fn hold(&self, peer: &Address) {
        self.update(peer, |rule| rule.hold = true);
        tracing::warn!("fault injection: messages to {peer} are held in their queue");
    }

    /// Ends [`hold`](Self::hold): the held messages go out, in order.
    pub fn release(&self, peer: &Address) {
        self.update(peer, |rule| rule.hold = false);
        tracing::warn!("fault injection: messages to {peer} flow again");
    }

    /// Silently discards every frame between this system and `peer` in
    /// `direction` (heartbeats included), keeping the connections open.
    pub fn blackhole(&self, peer: &Address, direction: Direction) {
        self.set(peer, direction, Mode::Blackhole);
    }

    /// Drops each frame in `direction` with probability `rate` (0 to 1).
    pub fn drop_frames(&self, peer: &Address, direction: Direction, rate: f64) {
        self.set(peer, direction, Mode::Drop(rate.clamp(0.0, 1.0)));
    }

    /// Lets all traffic with `peer` through again (held messages too).
    pub fn pass_through(&self, peer: &Address) {
        self.update(peer, |rule| *rule = Rule::PASS);
        tracing::warn!("fault injection: traffic with {peer} passes");
    }

    /// True while messages to `peer` are held (see [`hold`](Self::hold)).
    pub(crate) fn holds(&self, peer: &Address) -> bool {
        self.rule(peer).is_some_and(|r| r.hold)
    }

    /// The rule for `peer`, if any (none at all: one atomic load).
    fn rule(&self, peer: &Address) -> Option<Rule> {
        if !self.inner.any.load(Ordering::Acquire) {
            return None;
        }
        let rules = self.inner.rules.read().unwrap_or_else(|e| e.into_inner());
        rules.get(peer).copied()
    }

    fn passes(&self, peer: &Address, pick: fn(&Rule) -> Mode) -> bool {
        match self.rule(peer).as_ref().map(pick) {
            None | Some(Mode::Pass) => true,
            Some(Mode::Blackhole) => false,
            Some(Mode::Drop(rate)) => fastrand::f64() >= rate,
        }
    }

    /// True if a frame to `peer` may be sent.
    pub(crate) fn passes_send(&self, peer: &Address) -> bool {
        self.passes(peer, |r| r.send)
    }

    /// True if a frame from `peer` may be received.
    pub(crate) fn passes_receive(&self, peer: &Address) -> bool {
        self.passes(peer, |r| r.receive)
    }
}
