//! `HeapFuture`: a type-erased future on the heap, like
//! `Pin<Box<dyn Future>>`, whose buffer is recycled.
//!
//! Every message runs its handler as such a future. With `Box::pin` that is
//! a `malloc` and a `free` per message; here a finished future's buffer is
//! kept as the thread's spare and the next handler on the same thread that
//! fits reuses it, so a busy actor handles messages without touching the
//! allocator for them.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll};

/// Largest buffer kept as a spare (bigger ones are freed).
const MAX_SPARE: usize = 1024;

/// A raw buffer: address and the layout it was allocated with.
type Buf = (NonNull<u8>, Layout);

/// The thread's spare buffer, freed when the thread exits.
struct Spare(Cell<Option<Buf>>);

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some((ptr, layout)) = self.0.take() {
            // SAFETY: the spare was allocated with `alloc(layout)` and is
            // owned by this cell alone.
            unsafe { dealloc(ptr.as_ptr(), layout) };
        }
    }
}

thread_local! {
    static SPARE: Spare = const { Spare(Cell::new(None)) };
}

/// A buffer of at least `need`'s size and alignment (`need` is not zero
/// sized): the thread's spare if it fits, else a new allocation.
fn take_buffer(need: Layout) -> Buf {
    let spare = SPARE.try_with(|s| s.0.take()).ok().flatten();
    match spare {
        Some((ptr, layout)) if layout.size() >= need.size() && layout.align() >= need.align() => {
            (ptr, layout)
        }
        other => {
            if let Some(buf) = other {
                give_back(buf);
            }
            // SAFETY: `need` has a non-zero size.
            let ptr = unsafe { alloc(need) };
            match NonNull::new(ptr) {
                Some(ptr) => (ptr, need),
                None => handle_alloc_error(need),
            }
        }
    }
}

/// Keeps `buf` as the thread's spare (the larger of it and the current
/// one), freeing what is not kept.
fn give_back(buf: Buf) {
    let mut free = Some(buf);
    if buf.1.size() <= MAX_SPARE {
        let _ = SPARE.try_with(|s| {
            let keep = match s.0.take() {
                Some(old) if old.1.size() >= buf.1.size() => {
                    free = Some(buf);
                    old
                }
                old => {
                    free = old;
                    buf
                }
            };
            s.0.set(Some(keep));
        });
    }
    if let Some((ptr, layout)) = free {
        // SAFETY: allocated with `alloc(layout)`, and no longer used by
        // anyone (it was not kept as the spare).
        unsafe { dealloc(ptr.as_ptr(), layout) };
    }
}

/// An owned, pinned, type-erased future in a recycled heap buffer.
pub(crate) struct HeapFuture<'a> {
    /// The future, inside `buf` (or dangling for a zero-sized one).
    fut: NonNull<dyn Future<Output = ()> + Send + 'a>,
    /// The buffer; `None` for a zero-sized future.
    buf: Option<Buf>,
}

// SAFETY: the future is `Send` (required by `new`) and owned exclusively
// by this value; the buffer is plain memory.
unsafe impl Send for HeapFuture<'_> {}

impl<'a> HeapFuture<'a> {
    pub(crate) fn new<F: Future<Output = ()> + Send + 'a>(fut: F) -> Self {
        let need = Layout::new::<F>();
        if need.size() == 0 {
            let ptr = NonNull::<F>::dangling();
            // SAFETY: writing a zero-sized value through a dangling,
            // well-aligned pointer is allowed.
            unsafe { ptr.as_ptr().write(fut) };
            let fut: NonNull<dyn Future<Output = ()> + Send + 'a> = ptr;
            return HeapFuture { fut, buf: None };
        }
        let (raw, layout) = take_buffer(need);
        let ptr = raw.cast::<F>();
        // SAFETY: the buffer is at least as large and as aligned as `F`,
        // and unused: it was just allocated or taken from the spare.
        unsafe { ptr.as_ptr().write(fut) };
        let fut: NonNull<dyn Future<Output = ()> + Send + 'a> = ptr;
        HeapFuture {
            fut,
            buf: Some((raw, layout)),
        }
    }

    /// The future, pinned: it never moves out of its buffer.
    pub(crate) fn pinned(&mut self) -> Pin<&mut (dyn Future<Output = ()> + Send + 'a)> {
        // SAFETY: `fut` points to a live value owned by `self`, which is
        // only dropped in place (never moved) by `Drop`.
        unsafe { Pin::new_unchecked(self.fut.as_mut()) }
    }

    /// The same future with its lifetime erased.
    ///
    /// # Safety
    /// Whatever the future borrows must stay valid, and not be used by
    /// anyone else, until the returned value is dropped.
    pub(crate) unsafe fn erase(self) -> HeapFuture<'static> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: only the lifetime bound of the trait object changes; the
        // caller guarantees the borrows outlive the result.
        let fut = unsafe {
            std::mem::transmute::<
                NonNull<dyn Future<Output = ()> + Send + 'a>,
                NonNull<dyn Future<Output = ()> + Send + 'static>,
            >(this.fut)
        };
        HeapFuture { fut, buf: this.buf }
    }
}

impl Future for HeapFuture<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.get_mut().pinned().poll(cx)
    }
}

impl Drop for HeapFuture<'_> {
    fn drop(&mut self) {
        /// Recycles the buffer even if the future's drop panics.
        struct Recycle(Option<Buf>);
        impl Drop for Recycle {
            fn drop(&mut self) {
                if let Some(buf) = self.0.take() {
                    give_back(buf);
                }
            }
        }
        let _recycle = Recycle(self.buf.take());
        // SAFETY: the future is live and owned by `self`; it is dropped
        // exactly once, here, in place.
        unsafe { std::ptr::drop_in_place(self.fut.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its drops; holds `N` bytes so futures of different sizes
    /// can be made.
    struct Probe<const N: usize> {
        drops: Arc<AtomicUsize>,
        pad: [u8; N],
        polls: u32,
    }

    impl<const N: usize> Future for Probe<N> {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls += 1;
            std::hint::black_box(&self.pad);
            if self.polls < 2 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        }
    }

    impl<const N: usize> Drop for Probe<N> {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn probe<const N: usize>(drops: &Arc<AtomicUsize>) -> Probe<N> {
        Probe {
            drops: drops.clone(),
            pad: [7; N],
            polls: 0,
        }
    }

    #[test]
    fn futures_run_and_drop_once_and_buffers_are_reused() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Small, then larger (needs a new buffer), then small again (fits
        // the spare), then zero-sized, each polled to completion.
        let mut f = HeapFuture::new(probe::<8>(&drops));
        assert!(f.pinned().poll(&mut cx).is_pending());
        assert!(f.pinned().poll(&mut cx).is_ready());
        let first = f.buf.unwrap().0;
        drop(f);
        let mut g = HeapFuture::new(probe::<200>(&drops));
        assert!(g.pinned().poll(&mut cx).is_pending());
        drop(g); // dropped while pending
        let mut h = HeapFuture::new(probe::<8>(&drops));
        let reused = h.buf.unwrap().0;
        assert!(h.pinned().poll(&mut cx).is_pending());
        assert!(h.pinned().poll(&mut cx).is_ready());
        drop(h);
        assert_eq!(drops.load(Ordering::SeqCst), 3);
        // The spare is the larger buffer, which any small future reuses.
        assert_ne!(first, reused);
        struct Zst;
        impl Future for Zst {
            type Output = ();
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                Poll::Ready(())
            }
        }
        let mut z = HeapFuture::new(Zst);
        assert!(z.buf.is_none());
        assert!(z.pinned().poll(&mut cx).is_ready());
        drop(z);
        // Awaiting it as a future, on another thread, also works.
        let d = drops.clone();
        std::thread::spawn(move || {
            let f = HeapFuture::new(probe::<64>(&d));
            futures_lite::future::block_on(f);
        })
        .join()
        .unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 4);
    }

    #[test]
    fn a_panicking_drop_still_recycles() {
        struct Bomb(#[allow(dead_code)] [u64; 4]);
        impl Future for Bomb {
            type Output = ();
            fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
                Poll::Ready(())
            }
        }
        impl Drop for Bomb {
            fn drop(&mut self) {
                panic!("bomb");
            }
        }
        let f = HeapFuture::new(Bomb([1; 4]));
        let buf = f.buf.unwrap().0;
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(f)));
        assert!(r.is_err());
        // The buffer went back to the spare: the next future of that size
        // gets it.
        let drops = Arc::new(AtomicUsize::new(0));
        let g = HeapFuture::new(probe::<1>(&drops));
        assert_eq!(g.buf.unwrap().0, buf);
    }
}
