//! Atomics used by the lock-free parts of the runtime, swapped for loom's
//! model-checked versions under `--cfg troupe_loom`.

#[cfg(troupe_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};
#[cfg(not(troupe_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicUsize, Ordering};
