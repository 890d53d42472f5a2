//! The actor system that is decoding a message, so that actor references
//! inside it can be rebuilt (a reference is only meaningful relative to a
//! system: local, or remote through that system's connections). Akka keeps
//! the same information in a dynamic variable while it deserializes.

use crate::system::SystemShared;
use serde::de::DeserializeOwned;
use std::cell::RefCell;
use std::sync::{Arc, Weak};

/// This thread's decoding system.
struct Slot {
    /// The system of the innermost `with_system` running on this thread
    /// while `active`; otherwise the last one, kept so that setting it
    /// again writes no reference count. The system's reference count is
    /// shared by every thread that decodes for it: written for every
    /// message, by a connection's reader and by the actors it feeds on
    /// other cores, its cache line moved between them on every message.
    /// Weak: an idle worker does not keep a shut-down system alive (only
    /// its allocation, whose address then cannot be taken by another).
    system: Weak<SystemShared>,
    active: bool,
}

thread_local! {
    static CURRENT: RefCell<Slot> = const {
        RefCell::new(Slot {
            system: Weak::new(),
            active: false,
        })
    };
}

/// Runs `f` with `system` as the decoding system of this thread.
pub(crate) fn with_system<R>(system: &Arc<SystemShared>, f: impl FnOnce() -> R) -> R {
    /// What the slot held before, put back when `f` is done: whether it
    /// was active, and its system if that was another one in use (a nested
    /// call).
    struct Restore {
        was_active: bool,
        previous: Option<Weak<SystemShared>>,
    }
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.previous.take();
            CURRENT.with(|c| {
                let mut c = c.borrow_mut();
                c.active = self.was_active;
                if let Some(previous) = previous {
                    c.system = previous;
                }
            });
        }
    }
    // One look at the thread's slot: nested for the same system (a
    // receiver that delivers on), it is left as it is; the same system as
    // last time is only marked active.
    let restore = CURRENT.with(|c| {
        let mut c = c.borrow_mut();
        let same = std::ptr::eq(c.system.as_ptr(), Arc::as_ptr(system));
        if same && c.active {
            return None;
        }
        let was_active = std::mem::replace(&mut c.active, true);
        let previous = if same {
            None
        } else {
            let old = std::mem::replace(&mut c.system, Arc::downgrade(system));
            // Put back only under an active caller; else this one stays.
            was_active.then_some(old)
        };
        Some(Restore {
            was_active,
            previous,
        })
    });
    let _restore = restore;
    f()
}

/// The system decoding on this thread, if any.
pub(crate) fn current() -> Option<Arc<SystemShared>> {
    CURRENT.with(|c| {
        let c = c.borrow();
        if c.active {
            c.system.upgrade()
        } else {
            None
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ActorSystem;

    fn is_current(system: &ActorSystem) -> bool {
        current().is_some_and(|c| Arc::ptr_eq(&c, system.shared()))
    }

    #[test]
    fn the_decoding_system_is_set_only_inside_with_system_and_nests() {
        crate::rt::block_on(async {
            let a = ActorSystem::new("serde-context-a").unwrap();
            let b = ActorSystem::new("serde-context-b").unwrap();
            assert!(current().is_none());
            with_system(a.shared(), || {
                assert!(is_current(&a));
                // Nested for the same system, then for another.
                with_system(a.shared(), || assert!(is_current(&a)));
                assert!(is_current(&a));
                with_system(b.shared(), || {
                    assert!(is_current(&b));
                    with_system(a.shared(), || assert!(is_current(&a)));
                    assert!(is_current(&b));
                });
                assert!(is_current(&a));
            });
            // The last system is kept (weakly) but not current.
            assert!(current().is_none());
            assert!(decoding_system().is_none());
            with_system(b.shared(), || assert!(is_current(&b)));
            assert!(current().is_none());
            // A panic inside leaves the slot as it was.
            let caught = std::panic::catch_unwind(|| {
                with_system(a.shared(), || panic!("inside"));
            });
            assert!(caught.is_err());
            assert!(current().is_none());
            a.shutdown().await;
            b.shutdown().await;
        });
    }
}
