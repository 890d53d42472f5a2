//! Remoting: location-transparent actor references over TCP.
//!
//! Start a system with remoting through [`ActorSystem::builder`](crate::ActorSystem::builder)
//! and [`RemoteSettings`]; register every message type that crosses the
//! wire with [`ActorSystem::register`](crate::ActorSystem::register) on
//! each node; reach actors on other nodes with
//! [`ActorSystem::resolve`](crate::ActorSystem::resolve). `tell`, `ask`,
//! `watch` and references inside messages then work as they do locally.
//!
//! Per peer there are two TCP connections from each side: control
//! (system messages and heartbeats, so that they are never stuck behind a
//! large message) and ordinary. Frames are length-prefixed MessagePack;
//! connections start with an HMAC-authenticated handshake on a shared
//! secret; system messages (remote watch) are delivered reliably; a peer
//! that restarts, or cannot be reached by the death-watch failure detector,
//! is quarantined by its UID.

mod address;
mod asks;
pub(crate) mod association;
mod connection;
pub mod failure_detector;
mod fault_injection;
mod handshake;
mod inbound;
mod lane;
mod lookup_cache;
pub(crate) mod registry;
pub(crate) mod remote_ref;
mod remote_watch;
mod remoting;
pub(crate) mod reply;
pub(crate) mod serde_context;
mod settings;
pub(crate) mod undecoded;
pub(crate) mod wire;

pub(crate) use address::RemotePath;
pub use address::{Address, AddressError};
pub use failure_detector::{PhiAccrualFailureDetector, PhiAccrualSettings};
pub use fault_injection::{Direction, FaultInjector};
pub(crate) use remote_ref::RemoteTarget;
pub use remoting::Remoting;
pub(crate) use remoting::RemotingShared;
pub use serde_context::decoding_system;
pub use settings::{RemoteSettings, INSECURE_DEVELOPMENT_SECRET};
