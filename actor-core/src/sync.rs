//! Atomics used by the lock-free parts of the runtime, swapped for loom's
//! model-checked versions under `--cfg loom`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicPtr, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicPtr, Ordering};
