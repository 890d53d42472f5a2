//! The actor system that is decoding a message, so that actor references
//! inside it can be rebuilt (a reference is only meaningful relative to a
//! system: local, or remote through that system's connections). Akka keeps
//! the same information in a dynamic variable while it deserializes.

use crate::system::SystemShared;
use serde::de::DeserializeOwned;
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    static CURRENT: RefCell<Option<Arc<SystemShared>>> = const { RefCell::new(None) };
}

/// Runs `f` with `system` as the decoding system of this thread.
pub(crate) fn with_system<R>(system: &Arc<SystemShared>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<SystemShared>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = prev);
        }
    }
    // One look at the thread's slot: nested for the same system (a
    // receiver that delivers on), it is left as it is.
    let prev = CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        match &*c {
            Some(s) if Arc::ptr_eq(s, system) => None,
            _ => Some(c.replace(system.clone())),
        }
    });
    let _restore = prev.map(Restore);
    f()
}

/// The system decoding on this thread, if any.
pub(crate) fn current() -> Option<Arc<SystemShared>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// The actor system that is decoding a message on this thread, if any:
/// for `Deserialize` implementations of types that refer to a system's
/// extension (an entity reference finds its sharding this way).
pub fn decoding_system() -> Option<crate::ActorSystem> {
    current().map(crate::ActorSystem::from_shared)
}

/// Decodes a MessagePack value (in the current decoding context).
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    rmp_serde::from_slice(bytes).map_err(|e| e.to_string())
}
