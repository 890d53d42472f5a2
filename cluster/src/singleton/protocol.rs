//! Messages between singleton managers and proxies.

use crate::member::UniqueAddress;
use crate::singleton::manager::SingletonManager;
use serde::{Deserialize, Serialize};
use troupe_core::prelude::*;

/// The new oldest asks the previous one to hand the singleton over.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(reply = HandOverReply, name = "troupe.singleton.HandOverToMe")]
pub(crate) struct HandOverToMe {
    pub(crate) from: UniqueAddress,
}

/// The answer to [`HandOverToMe`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum HandOverReply {
    /// The instance is stopping; ask again.
    InProgress,
    /// No instance runs here any more: start yours.
    Done,
}

/// Where is the instance? (asked by proxies of the oldest's manager, which
/// remembers the proxy to warn it before a hand-over)
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(reply = Option<String>, name = "troupe.singleton.WhereIsSingleton")]
pub(crate) struct WhereIsSingleton {
    /// The proxy's full path.
    pub(crate) proxy: String,
}

/// The instance is about to move: stop forwarding to it and buffer. The
/// answer travels behind every message the proxy forwarded before, so once
/// all proxies have answered, the instance's mailbox holds everything they
/// sent it.
#[derive(Debug, Clone, Message, Serialize, Deserialize)]
#[message(name = "troupe.singleton.Moving")]
pub(crate) struct Moving;

/// Registers the managers' messages for remoting.
pub(crate) fn register<A: Actor>(system: &ActorSystem) -> Result<(), troupe_core::RegisterError> {
    system
        .register_control::<SingletonManager<A>, HandOverToMe>()?
        .register_control::<SingletonManager<A>, WhereIsSingleton>()?
        .register::<crate::singleton::proxy::ProxyActor<A>, Moving>()?;
    Ok(())
}
