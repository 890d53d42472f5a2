//! Recycled letter memory.
//!
//! A letter is allocated on the sender's thread and freed on the actor's.
//! With glibc's malloc that pattern is slow: the freeing thread keeps the
//! memory in its own cache, so the sending thread finds its cache empty at
//! every letter and takes the slow path (with the mailbox itself, malloc
//! and free were about 60 % of the instructions of a local tell).
//!
//! The pool keeps freed letter blocks by exact layout, in magazines (a
//! chain of up to [`MAGAZINE`] blocks): each thread has one magazine per
//! size class and allocates from it and frees into it with no atomic
//! operation. A thread whose magazine is full keeps it, up to
//! [`LOCAL_MAGAZINES`] of them, and then hands it to the class's depot (an
//! actor's thread that frees what others sent); a thread whose magazine
//! is empty takes one of its own full ones, or else a full one from the
//! depot (a sender): one lock per [`MAGAZINE`] letters on each side,
//! instead of contended allocator operations on every letter. This is
//! Bonwick's magazine and depot design. The magazines a thread keeps are
//! for a sender and its receiver on one thread (the dispatcher keeps them
//! there), whose bursts of letters go through more than one magazine:
//! through the depot, the blocks of two such pairs went from core to core,
//! and two pairs on two cores told a third as fast as two processes of one
//! pair each (BENCHMARKS.md, "Kept jobs").
//!
//! Every block of a class was allocated from the global allocator with
//! exactly that class's layout, which is the layout of the letters it
//! holds: so a pooled letter is an ordinary `Box`, and a letter dropped
//! anywhere else (a dead letter, say) is simply freed to the global
//! allocator. The pool holds at most [`DEPOT_MAGAZINES`] magazines per
//! class beyond the threads' own; what does not fit is freed.

use std::alloc::{alloc, dealloc, Layout};
use std::cell::RefCell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Blocks kept per magazine.
const MAGAZINE: usize = 64;

/// Full magazines a thread keeps per class for itself before it hands
/// them to the depot: a sender that tells a burst of letters to an actor
/// on its own thread gets them back from its own magazines, so blocks do
/// not go through the depot, shared by every thread, and so to another
/// core.
const LOCAL_MAGAZINES: usize = 16;

/// Full magazines kept per class in the depot.
const DEPOT_MAGAZINES: usize = 16;

/// The alignment of pooled blocks (that of every letter that holds a
/// pointer and nothing more aligned).
const ALIGN: usize = 8;

/// The largest pooled block; larger letters use the global allocator.
const MAX_SIZE: usize = 256;

/// Classes: sizes 8, 16, …, `MAX_SIZE`.
const CLASSES: usize = MAX_SIZE / ALIGN;

/// The link written into a free block.
struct FreeBlock {
    next: *mut FreeBlock,
}

/// A chain of free blocks of one class.
struct Magazine {
    head: *mut FreeBlock,
    len: usize,
}

// SAFETY: a magazine exclusively owns the free blocks of its chain (raw
// memory with no thread affinity); moving it to another thread moves that
// ownership.
unsafe impl Send for Magazine {}

impl Magazine {
    const EMPTY: Magazine = Magazine {
        head: ptr::null_mut(),
        len: 0,
    };

    fn pop(&mut self) -> Option<NonNull<u8>> {
        let top = NonNull::new(self.head)?;
        // SAFETY: every block of the chain is a live allocation owned by
        // this magazine, with a `FreeBlock` written at its start by `push`.
        self.head = unsafe { (*top.as_ptr()).next };
        self.len -= 1;
        Some(top.cast())
    }

    /// # Safety
    /// `block` must be a block of this magazine's class that nobody else
    /// owns or uses.
    unsafe fn push(&mut self, block: NonNull<u8>) {
        let block = block.cast::<FreeBlock>();
        // SAFETY: the block is ours, at least `ALIGN`-aligned and at least
        // one pointer in size (the smallest class), so a `FreeBlock` fits.
        unsafe { block.as_ptr().write(FreeBlock { next: self.head }) };
        self.head = block.as_ptr();
        self.len += 1;
    }

    /// Frees every block to the global allocator.
    fn free_all(&mut self, layout: Layout) {
        while let Some(block) = self.pop() {
            // SAFETY: the blocks of a class were allocated with its layout.
            unsafe { dealloc(block.as_ptr(), layout) };
        }
    }
}

/// The full magazines of one class that threads handed in.
struct Depot {
    magazines: Mutex<Vec<Magazine>>,
    /// How many magazines are in `magazines` (read without the lock, so
    /// that an empty depot costs a load).
    count: AtomicUsize,
}

impl Depot {
    #[allow(clippy::declare_interior_mutable_const)]
    const NEW: Depot = Depot {
        magazines: Mutex::new(Vec::new()),
        count: AtomicUsize::new(0),
    };

    fn take(&self) -> Option<Magazine> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut magazines = self.magazines.lock().unwrap_or_else(|e| e.into_inner());
        let m = magazines.pop()?;
        self.count.store(magazines.len(), Ordering::Relaxed);
        Some(m)
    }

    fn give(&self, mut magazine: Magazine, layout: Layout) {
        {
            let mut magazines = self.magazines.lock().unwrap_or_else(|e| e.into_inner());
            if magazines.len() < DEPOT_MAGAZINES {
                magazines.push(magazine);
                self.count.store(magazines.len(), Ordering::Relaxed);
                return;
            }
        }
        magazine.free_all(layout);
    }
}

static DEPOTS: [Depot; CLASSES] = [Depot::NEW; CLASSES];

/// A thread's magazines of one class: the one it allocates from and frees
/// into, and full ones it keeps for itself (up to [`LOCAL_MAGAZINES`]).
struct Class {
    current: Magazine,
    full: Vec<Magazine>,
}

impl Class {
    const EMPTY: Class = Class {
        current: Magazine::EMPTY,
        full: Vec::new(),
    };
}

/// A thread's magazines, by class; handed to the depots when the thread
/// exits.
struct Local([Class; CLASSES]);

impl Drop for Local {
    fn drop(&mut self) {
        for (class, c) in self.0.iter_mut().enumerate() {
            let current = std::mem::replace(&mut c.current, Magazine::EMPTY);
            for m in std::iter::once(current).chain(c.full.drain(..)) {
                if m.len > 0 {
                    DEPOTS[class].give(m, class_layout(class));
                }
            }
        }
    }
}

thread_local! {
    static LOCAL: RefCell<Local> = const { RefCell::new(Local([Class::EMPTY; CLASSES])) };
}

/// The class of blocks of exactly `layout`, if it is pooled.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size();
    if layout.align() != ALIGN || size == 0 || size > MAX_SIZE || !size.is_multiple_of(ALIGN) {
        return None;
    }
    Some(size / ALIGN - 1)
}

fn class_layout(class: usize) -> Layout {
    // Cannot fail: a multiple of 8 below `MAX_SIZE`, aligned to 8.
    Layout::from_size_align((class + 1) * ALIGN, ALIGN).expect("a valid class layout")
}

/// A block of exactly `layout`: recycled if the pool has one, else from
/// the global allocator. `layout` must not be zero-sized.
pub(crate) fn allocate(layout: Layout) -> NonNull<u8> {
    if let Some(class) = class_of(layout) {
        let recycled = LOCAL.try_with(|l| {
            let mut l = l.try_borrow_mut().ok()?;
            let c = &mut l.0[class];
            if c.current.len == 0 {
                c.current = match c.full.pop() {
                    Some(m) => m,
                    None => DEPOTS[class].take()?,
                };
            }
            c.current.pop()
        });
        if let Ok(Some(block)) = recycled {
            return block;
        }
    }
    debug_assert!(layout.size() > 0);
    // SAFETY: `layout` is not zero-sized (a letter holds its queue link).
    let block = unsafe { alloc(layout) };
    NonNull::new(block).unwrap_or_else(|| std::alloc::handle_alloc_error(layout))
}

/// Gives back a block that `allocate(layout)` returned (or that the global
/// allocator returned for `layout`) and that is no longer used.
///
/// # Safety
/// `block` must have been allocated from the global allocator with exactly
/// `layout`, and nobody may use it any more (its contents are dropped or
/// moved out).
pub(crate) unsafe fn release(block: NonNull<u8>, layout: Layout) {
    if let Some(class) = class_of(layout) {
        let kept = LOCAL.try_with(|l| {
            let Ok(mut l) = l.try_borrow_mut() else {
                return false;
            };
            let c = &mut l.0[class];
            if c.current.len == MAGAZINE {
                let full = std::mem::replace(&mut c.current, Magazine::EMPTY);
                if c.full.len() < LOCAL_MAGAZINES {
                    c.full.push(full);
                } else {
                    DEPOTS[class].give(full, layout);
                }
            }
            // SAFETY: the caller gives the block up, and its layout is the
            // class's, so it belongs in this magazine.
            unsafe { c.current.push(block) };
            true
        });
        if kept == Ok(true) {
            return;
        }
    }
    // SAFETY: the caller's contract: allocated with `layout`, unused.
    unsafe { dealloc(block.as_ptr(), layout) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[repr(C)]
    struct Letterish {
        a: *mut u8,
        b: [u64; 5],
    }

    #[test]
    fn a_freed_block_is_allocated_again_on_the_same_thread() {
        let layout = Layout::new::<Letterish>();
        let a = allocate(layout);
        // SAFETY: allocated just above with `layout`, not used.
        unsafe { release(a, layout) };
        let b = allocate(layout);
        assert_eq!(a, b, "the thread's magazine gives back its last block");
        // SAFETY: as above.
        unsafe { release(b, layout) };
    }

    #[test]
    fn layouts_the_pool_does_not_keep_go_to_the_global_allocator() {
        for layout in [
            Layout::from_size_align(16, 16).unwrap(),
            Layout::from_size_align(MAX_SIZE + 8, 8).unwrap(),
            Layout::from_size_align(4, 4).unwrap(),
            // Not a whole class: a `Layout` need not be padded.
            Layout::from_size_align(12, 8).unwrap(),
        ] {
            assert_eq!(class_of(layout), None);
            let a = allocate(layout);
            // SAFETY: allocated just above with `layout`, not used.
            unsafe { release(a, layout) };
        }
        assert_eq!(class_of(Layout::new::<Letterish>()), Some(5));
    }

    /// A burst freed on the thread that allocated it stays with that
    /// thread (up to `LOCAL_MAGAZINES` full magazines), not in the depot,
    /// where another thread (on another core) would take it.
    #[test]
    fn a_burst_freed_on_its_own_thread_stays_with_that_thread() {
        // A class no other test uses, so that the depot is this test's.
        let layout = Layout::from_size_align(232, 8).unwrap();
        let burst = LOCAL_MAGAZINES * MAGAZINE;
        let blocks: Vec<NonNull<u8>> = (0..burst).map(|_| allocate(layout)).collect();
        let mine: HashSet<usize> = blocks.iter().map(|b| b.as_ptr() as usize).collect();
        for block in blocks {
            // SAFETY: allocated above with `layout`, not used.
            unsafe { release(block, layout) };
        }
        let class = class_of(layout).unwrap();
        assert_eq!(
            DEPOTS[class].count.load(Ordering::Relaxed),
            0,
            "the burst went to the depot"
        );
        // Another thread finds none of them.
        let other: Vec<usize> = std::thread::spawn(move || {
            let blocks: Vec<NonNull<u8>> = (0..MAGAZINE).map(|_| allocate(layout)).collect();
            let addrs = blocks.iter().map(|b| b.as_ptr() as usize).collect();
            for block in blocks {
                // SAFETY: allocated just above with `layout`, not used.
                unsafe { release(block, layout) };
            }
            addrs
        })
        .join()
        .unwrap();
        assert!(other.iter().all(|a| !mine.contains(a)));
        // This thread gets them back, all of them.
        let again: Vec<NonNull<u8>> = (0..burst).map(|_| allocate(layout)).collect();
        assert!(again.iter().all(|b| mine.contains(&(b.as_ptr() as usize))));
        for block in again {
            // SAFETY: as above.
            unsafe { release(block, layout) };
        }
    }

    /// A sender thread allocates, an actor's thread frees: the blocks come
    /// back to the sender through the depot, and no block is handed out
    /// while it is still in use (it would already be in `live`).
    #[test]
    fn blocks_freed_on_another_thread_come_back_through_the_depot() {
        // A class no other test uses, so that the depot is this test's.
        let layout = Layout::from_size_align(200, 8).unwrap();
        let live = std::sync::Arc::new(std::sync::Mutex::new(HashSet::new()));
        let (tx, rx) = std::sync::mpsc::sync_channel::<usize>(1024);
        let freer_live = live.clone();
        let freer = std::thread::spawn(move || {
            for addr in rx {
                assert!(freer_live.lock().unwrap().remove(&addr));
                let block = NonNull::new(addr as *mut u8).unwrap();
                // SAFETY: the sender gave the block up when it sent it.
                unsafe { block.as_ptr().write_bytes(0xA5, 200) };
                // SAFETY: as above; allocated with `layout`.
                unsafe { release(block, layout) };
            }
        });
        let mut seen = HashSet::new();
        let mut reused = 0;
        for i in 0..20_000u32 {
            let block = allocate(layout);
            let addr = block.as_ptr() as usize;
            assert!(
                live.lock().unwrap().insert(addr),
                "a block in use was handed out"
            );
            // SAFETY: a block of 200 bytes that is ours.
            unsafe { block.as_ptr().write_bytes(i as u8, 200) };
            if !seen.insert(addr) {
                reused += 1;
            }
            tx.send(addr).unwrap();
        }
        drop(tx);
        freer.join().unwrap();
        assert!(
            reused > 10_000,
            "blocks freed on the other thread were not reused: {reused}"
        );
        // The freer's thread ended: its magazine went to the depot, which
        // never holds more than its bound.
        let class = class_of(layout).unwrap();
        assert!(DEPOTS[class].count.load(Ordering::Relaxed) <= DEPOT_MAGAZINES);
    }
}
