//! Activations started while a thread hands on a batch of letters (a
//! connection's reader going through the frames it has already buffered)
//! are queued together when the batch ends, not one by one as each letter
//! arrives.
//!
//! Without this, an actor that keeps up with its sender goes idle between
//! two letters of one batch, and each letter then schedules an activation
//! and wakes a worker thread: under load a wake (a futex or eventfd write
//! and a context switch) per message, which costs more than handling it. With
//! it, an actor is woken at most once per batch and takes its letters
//! together. A batch is only what the reader already holds, bounded in
//! frames, so the delay it adds is the time to decode that many frames.
//!
//! An actor with a bounded mailbox does not drain it during a batch: one
//! batch can bring it up to `FRAME_BATCH` (32) letters (more than that
//! are refused as for any full mailbox, and logged).
//!
//! The same batch serves code that sends while it holds a lock (see
//! [`DeferActivations`]): an ask that would run its actor inline, on the
//! asking thread, runs it when the batch ends instead, after the lock is
//! released, so a handler that needs the same lock cannot deadlock.

use crate::cell::AnyCell;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

thread_local! {
    /// A batch is open on this thread: the one check every `schedule`
    /// makes (a plain load), so that threads without one pay nothing more.
    static OPEN: Cell<bool> = const { Cell::new(false) };
    static DEFERRED: RefCell<Deferred> = const {
        RefCell::new(Deferred {
            active: false,
            cells: Vec::new(),
        })
    };
}

struct Deferred {
    /// A batch is open on this thread.
    active: bool,
    /// Actors whose activation was claimed during the batch; with whether
    /// it would have run on this thread (an ask's inline activation).
    cells: Vec<(Arc<dyn AnyCell>, bool)>,
}

/// A batch of sends on this thread: while it lives, the activations that
/// those sends would start are held back, and when it is dropped they
/// start (each actor once): on the dispatcher's workers, or on this thread
/// for an ask that would have run its actor inline.
///
/// For code that sends messages while it holds a lock, such as a router
/// that reads its routing table under a read lock: an inline ask runs the
/// receiving actor's handler on the asking thread, and a handler that
/// needs the same lock could deadlock with a writer waiting for it. Open a
/// batch before taking the lock and drop it after releasing the lock.
///
/// Never hold one across an `.await`: the task could move to another
/// thread.
///
/// ```
/// use std::sync::RwLock;
/// use troupe_core::prelude::*;
/// use troupe_core::DeferActivations;
///
/// #[derive(Message)]
/// #[message(reply = u32)]
/// struct Get;
///
/// #[derive(Default)]
/// struct Store(u32);
/// impl Actor for Store {}
///
/// #[handlers]
/// impl Store {
///     async fn get(&mut self, _m: Get) -> u32 {
///         self.0
///     }
/// }
///
/// # troupe_core::rt::block_on(async {
/// let system = ActorSystem::new("docs").unwrap();
/// let routes = RwLock::new(vec![system.spawn(Store(7))]);
/// let asked = {
///     let _batch = DeferActivations::begin();
///     let routes = routes.read().unwrap();
///     routes[0].ask(Get)
///     // The lock is released here, then the batch starts the actor.
/// };
/// assert_eq!(asked.await.unwrap(), 7);
/// # system.shutdown().await;
/// # });
/// ```
pub struct DeferActivations(());

impl DeferActivations {
    /// Opens a batch on this thread; `None` if one is open already (the
    /// outer one starts the activations when it ends).
    #[inline]
    pub fn begin() -> Option<Self> {
        DEFERRED
            .try_with(|d| {
                let mut d = d.try_borrow_mut().ok()?;
                if d.active {
                    return None;
                }
                d.active = true;
                OPEN.with(|o| o.set(true));
                Some(DeferActivations(()))
            })
            .ok()
            .flatten()
    }
}

impl Drop for DeferActivations {
    fn drop(&mut self) {
        let _ = OPEN.try_with(|o| o.set(false));
        let cells = DEFERRED.try_with(|d| {
            let mut d = d.borrow_mut();
            d.active = false;
            std::mem::take(&mut d.cells)
        });
        let Ok(mut cells) = cells else { return };
        for (cell, here) in cells.drain(..) {
            cell.start_activation(here);
        }
        // Keep the vector's room for the next batch.
        let _ = DEFERRED.try_with(|d| {
            if let Ok(mut d) = d.try_borrow_mut() {
                if d.cells.capacity() < cells.capacity() {
                    d.cells = cells;
                }
            }
        });
    }
}

/// True while a batch is open on this thread.
pub(crate) fn is_open() -> bool {
    OPEN.try_with(Cell::get).unwrap_or(false)
}

/// Holds back the activation of `cell` (claimed for it) if a batch is open
/// on this thread; gives it back otherwise. `here`: it would have run on
/// this thread (an inline ask), and runs here when the batch ends.
pub(crate) fn defer(cell: Arc<dyn AnyCell>, here: bool) -> Result<(), Arc<dyn AnyCell>> {
    let mut cell = Some(cell);
    let deferred = DEFERRED.try_with(|d| match d.try_borrow_mut() {
        Ok(mut d) if d.active => {
            d.cells.extend(cell.take().map(|c| (c, here)));
            true
        }
        _ => false,
    });
    match (deferred, cell) {
        (Ok(true), _) => Ok(()),
        (_, Some(cell)) => Err(cell),
        (_, None) => unreachable!("a cell is only taken when it is deferred"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;
    use crate::rt;

    #[derive(Message)]
    struct Tick;

    #[derive(Message)]
    #[message(reply = u32)]
    struct Ticks;

    #[derive(Default)]
    struct Counter(u32);
    impl Actor for Counter {}

    #[handlers]
    impl Counter {
        async fn tick(&mut self, _m: Tick) {
            self.0 += 1;
        }
        async fn ticks(&mut self, _m: Ticks) -> u32 {
            self.0
        }
    }

    fn held_back() -> usize {
        DEFERRED.with(|d| d.borrow().cells.len())
    }

    #[test]
    fn a_batch_starts_one_activation_per_actor_at_its_end() {
        rt::block_on(async {
            let system = ActorSystem::new("deferred").unwrap();
            let a = system.spawn(Counter::default());
            let b = system.spawn(Counter::default());
            // Both must be idle for their letters to start activations: the
            // activations that answered the previous asks may still be
            // ending on other threads, so try until a round found both idle.
            let mut ticks = 0;
            let mut both_held = false;
            for _ in 0..1000 {
                assert_eq!(a.ask(Ticks).await.unwrap(), ticks);
                assert_eq!(b.ask(Ticks).await.unwrap(), ticks);
                rt::yield_now().await;
                let held = {
                    let batch = DeferActivations::begin().expect("no batch open yet");
                    assert!(DeferActivations::begin().is_none(), "batches do not nest");
                    for _ in 0..3 {
                        a.tell(Tick).unwrap();
                        b.tell(Tick).unwrap();
                    }
                    // Six letters, at most two activations held back.
                    let held = held_back();
                    drop(batch);
                    held
                };
                assert!(held <= 2);
                assert_eq!(held_back(), 0);
                ticks += 3;
                if held == 2 {
                    both_held = true;
                    break;
                }
            }
            assert!(both_held, "no round held back one activation per actor");
            assert_eq!(a.ask(Ticks).await.unwrap(), ticks);
            assert_eq!(b.ask(Ticks).await.unwrap(), ticks);
            // Outside a batch nothing is held back.
            a.tell(Tick).unwrap();
            assert_eq!(held_back(), 0);
            assert_eq!(a.ask(Ticks).await.unwrap(), ticks + 1);
            system.shutdown().await;
        });
    }

    /// An ask that would run its idle actor on the asking thread waits for
    /// the end of the batch (the asker may hold a lock the handler needs).
    #[test]
    fn an_inline_ask_in_a_batch_runs_when_the_batch_ends() {
        rt::block_on(async {
            let system = ActorSystem::new("deferred-ask").unwrap();
            let a = system.spawn(Counter::default());
            let lock = std::sync::RwLock::new(());
            // The actor must be idle for its ask to start an activation:
            // the activation that answered the previous ask may still be
            // ending on another thread, so try until one found it idle.
            let mut deferred = false;
            for _ in 0..1000 {
                assert_eq!(a.ask(Ticks).await.unwrap(), 0);
                rt::yield_now().await;
                let (asked, held) = {
                    let _batch = DeferActivations::begin().expect("no batch open yet");
                    let _read = lock.read().unwrap();
                    let asked = a.ask(Ticks);
                    (asked, held_back())
                };
                assert!(held <= 1);
                assert_eq!(held_back(), 0);
                assert_eq!(asked.await.unwrap(), 0);
                if held == 1 {
                    deferred = true;
                    break;
                }
            }
            assert!(deferred, "the ask's activation never waited for the batch");
            system.shutdown().await;
        });
    }
}
