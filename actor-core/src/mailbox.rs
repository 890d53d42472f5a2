//! The actor's mailbox: a lock-free multi-producer queue of letters.
//!
//! Producers push onto an atomic stack (one compare-and-swap, no lock, no
//! allocation beyond the letter itself). The single consumer — the actor's
//! activation — takes the whole stack with one swap and reverses it, which
//! gives the letters in the order they were pushed. Closing swaps in a
//! sentinel so that later pushes fail and hand their letter back.
//!
//! The mailbox head is one pointer, so an idle actor pays eight bytes for
//! its queue.

use crate::letter::{Hdr, Letter, Node};
use crate::sync::{AtomicPtr, Ordering};
use std::ptr;

/// Address used as the head of a closed mailbox. It is never dereferenced:
/// it only needs to differ from null and from every real node (nodes are
/// aligned to at least 8 bytes, so address 1 can never be one).
fn closed<A: 'static>() -> *mut Hdr<A> {
    ptr::without_provenance_mut(1)
}

/// The multi-producer, single-consumer queue of an actor.
pub(crate) struct Mailbox<A: 'static> {
    head: AtomicPtr<Hdr<A>>,
}

// SAFETY: the mailbox owns the letters linked from `head`; letters are
// `Send` (the `Letter` trait requires it), and every access to the links goes
// through the atomic head, so sharing the mailbox between threads only ever
// moves `Send` letters from a producer thread to the consumer thread.
unsafe impl<A: 'static> Send for Mailbox<A> {}
// SAFETY: as above; `push` is safe to call concurrently (compare-and-swap
// loop) and `take_all`/`close` take ownership of a whole chain atomically.
unsafe impl<A: 'static> Sync for Mailbox<A> {}

impl<A: 'static> Mailbox<A> {
    pub(crate) fn new() -> Self {
        Mailbox {
            head: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// Pushes a letter. Fails, giving the letter back, when the mailbox is
    /// closed.
    pub(crate) fn push<L>(&self, node: Box<Node<A, L>>) -> Result<(), Box<Node<A, L>>>
    where
        Node<A, L>: Letter<A> + 'static,
    {
        let raw: *mut Node<A, L> = Box::into_raw(node);
        // `Node` is `repr(C)` with `Hdr` as its first field, so the node's
        // address is also the address of its header.
        let hdr = raw.cast::<Hdr<A>>();
        // SAFETY: `raw` came from `Box::into_raw` just above, so it is valid
        // and unaliased until it is published by the successful CAS below.
        unsafe { (*hdr).this = raw as *mut dyn Letter<A> };
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            if head == closed() {
                // SAFETY: the node was never published; we still own it.
                return Err(unsafe { Box::from_raw(raw) });
            }
            // SAFETY: not yet published, still exclusively ours.
            unsafe { (*hdr).next = head };
            // SeqCst: the push must be ordered before the producer's later
            // load of the scheduling status (see `cell::ActorCell::enqueue`).
            match self
                .head
                .compare_exchange_weak(head, hdr, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(now) => head = now,
            }
        }
    }

    /// True when no letter is waiting (a closed mailbox counts as empty).
    pub(crate) fn is_empty(&self) -> bool {
        let head = self.head.load(Ordering::SeqCst);
        head.is_null() || head == closed()
    }

    /// Takes every waiting letter, oldest first.
    pub(crate) fn take_all(&self) -> Batch<A> {
        if self.head.load(Ordering::Relaxed).is_null() {
            return Batch::empty();
        }
        let mut head = self.head.load(Ordering::Acquire);
        loop {
            if head.is_null() || head == closed() {
                return Batch::empty();
            }
            match self.head.compare_exchange_weak(
                head,
                ptr::null_mut(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                // SAFETY: the CAS moved the whole chain out of the shared
                // head; no producer can reach these nodes any more.
                Ok(_) => return unsafe { Batch::from_stack(head) },
                Err(now) => head = now,
            }
        }
    }

    /// Closes the mailbox and returns the letters that were still waiting.
    /// Every later push fails.
    pub(crate) fn close(&self) -> Batch<A> {
        let head = self.head.swap(closed(), Ordering::AcqRel);
        if head.is_null() || head == closed() {
            Batch::empty()
        } else {
            // SAFETY: the swap moved the chain out of the shared head.
            unsafe { Batch::from_stack(head) }
        }
    }
}

impl<A: 'static> Drop for Mailbox<A> {
    fn drop(&mut self) {
        drop(self.close());
    }
}

/// Letters owned by the consumer, in delivery order. Supports putting
/// letters back at the front (unstash).
pub(crate) struct Batch<A: 'static> {
    first: *mut Hdr<A>,
}

// SAFETY: a batch exclusively owns its chain of `Send` letters.
unsafe impl<A: 'static> Send for Batch<A> {}

impl<A: 'static> Batch<A> {
    pub(crate) fn empty() -> Self {
        Batch {
            first: ptr::null_mut(),
        }
    }

    /// Reverses a chain taken from the stack (newest first) into delivery
    /// order.
    ///
    /// # Safety
    /// `top` must be the head of a chain of nodes pushed by `Mailbox::push`
    /// that nobody else can reach any more.
    unsafe fn from_stack(top: *mut Hdr<A>) -> Self {
        let mut reversed: *mut Hdr<A> = ptr::null_mut();
        let mut cur = top;
        while !cur.is_null() {
            // SAFETY: every node of the chain is valid and owned by us.
            let next = unsafe { (*cur).next };
            // SAFETY: as above.
            unsafe { (*cur).next = reversed };
            reversed = cur;
            cur = next;
        }
        Batch { first: reversed }
    }

    /// Removes the oldest letter.
    pub(crate) fn pop(&mut self) -> Option<Box<dyn Letter<A>>> {
        if self.first.is_null() {
            return None;
        }
        let hdr = self.first;
        // SAFETY: the batch owns the node; `this` was set to the fat pointer
        // of the allocation by `push`/`push_front`, and `Box::from_raw`
        // takes ownership back exactly once because the node is unlinked.
        unsafe {
            self.first = (*hdr).next;
            Some(Box::from_raw((*hdr).this))
        }
    }

    /// Puts a letter back in front of the others.
    pub(crate) fn push_front(&mut self, letter: Box<dyn Letter<A>>) {
        let raw: *mut dyn Letter<A> = Box::into_raw(letter);
        // SAFETY: `raw` is exclusively owned; its header lives in the same
        // allocation and is linked only into this batch.
        unsafe {
            let hdr = (*raw).hdr_ptr();
            (*hdr).this = raw;
            (*hdr).next = self.first;
            self.first = hdr;
        }
    }

    /// Appends all of `other` after the letters of this batch.
    pub(crate) fn append(&mut self, mut other: Batch<A>) {
        if self.first.is_null() {
            std::mem::swap(self, &mut other);
            return;
        }
        let mut last = self.first;
        // SAFETY: we own every node of both chains.
        unsafe {
            while !(*last).next.is_null() {
                last = (*last).next;
            }
            (*last).next = other.first;
        }
        other.first = ptr::null_mut();
    }
}

impl<A: 'static> Drop for Batch<A> {
    fn drop(&mut self) {
        while let Some(letter) = self.pop() {
            drop(letter);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::letter::{Hdr, Letter, Node, Opened};
    use crate::system_message::SystemMessage;

    /// A test letter whose "type name" is its sequence label.
    struct Label(&'static str);

    impl Letter<()> for Node<(), Label> {
        fn hdr_ptr(&mut self) -> *mut Hdr<()> {
            self.hdr_mut()
        }
        fn open(self: Box<Self>) -> Opened<()> {
            Opened::System(SystemMessage::Ignore)
        }
        fn type_name(&self) -> &'static str {
            self.body.0
        }
    }

    const LABELS: [&str; 8] = ["a0", "a1", "a2", "a3", "b0", "b1", "b2", "b3"];

    fn drain(batch: &mut Batch<()>, out: &mut Vec<&'static str>) {
        while let Some(l) = batch.pop() {
            out.push(l.type_name());
        }
    }

    fn check_order(seen: &[&'static str], per_producer: usize) {
        for p in ["a", "b"] {
            let mine: Vec<_> = seen.iter().filter(|s| s.starts_with(p)).collect();
            assert_eq!(mine.len(), per_producer, "{seen:?}");
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "producer {p} out of order: {seen:?}"
            );
        }
    }

    #[cfg(not(troupe_loom))]
    #[test]
    fn fifo_push_front_append_and_close() {
        let mb: Mailbox<()> = Mailbox::new();
        for l in &LABELS[..3] {
            assert!(mb.push(Node::new(Label(l))).is_ok());
        }
        let mut b = mb.take_all();
        let first = b.pop().unwrap();
        b.push_front(first);
        assert!(mb.push(Node::new(Label("a3"))).is_ok());
        b.append(mb.take_all());
        let mut seen = Vec::new();
        drain(&mut b, &mut seen);
        assert_eq!(seen, ["a0", "a1", "a2", "a3"]);
        assert!(mb.is_empty());
        assert!(mb.push(Node::new(Label("b0"))).is_ok());
        let mut rest = mb.close();
        assert!(
            mb.push(Node::new(Label("b1"))).is_err(),
            "closed mailbox refuses"
        );
        let mut seen = Vec::new();
        drain(&mut rest, &mut seen);
        assert_eq!(seen, ["b0"]);
        assert!(mb.take_all().pop().is_none());
    }

    #[cfg(not(troupe_loom))]
    #[test]
    fn concurrent_producers_keep_their_order() {
        use std::sync::Arc;
        let mb: Arc<Mailbox<()>> = Arc::new(Mailbox::new());
        const N: usize = 20_000;
        let labels: Vec<&'static str> = (0..N * 2)
            .map(|i| {
                &*Box::leak(
                    format!("{}{:08}", if i < N { "a" } else { "b" }, i % N).into_boxed_str(),
                )
            })
            .collect();
        let producers: Vec<_> = [0, N]
            .into_iter()
            .map(|off| {
                let mb = mb.clone();
                let labels = labels.clone();
                std::thread::spawn(move || {
                    for l in &labels[off..off + N] {
                        assert!(mb.push(Node::new(Label(l))).is_ok());
                    }
                })
            })
            .collect();
        let mut seen = Vec::new();
        while seen.len() < 2 * N {
            drain(&mut mb.take_all(), &mut seen);
        }
        for p in producers {
            p.join().unwrap();
        }
        check_order(&seen, N);
    }

    /// Model-checks push / take_all / close under every interleaving:
    /// `RUSTFLAGS="--cfg troupe_loom" cargo test -p troupe-core --lib mailbox`.
    #[cfg(troupe_loom)]
    #[test]
    fn loom_two_producers_one_consumer() {
        use loom::sync::Arc;
        loom::model(|| {
            let mb: Arc<Mailbox<()>> = Arc::new(Mailbox::new());
            let producers: Vec<_> = [0usize, 4]
                .into_iter()
                .map(|off| {
                    let mb = mb.clone();
                    loom::thread::spawn(move || {
                        for l in &LABELS[off..off + 2] {
                            assert!(mb.push(Node::new(Label(l))).is_ok());
                        }
                    })
                })
                .collect();
            let mut seen = Vec::new();
            drain(&mut mb.take_all(), &mut seen);
            for p in producers {
                p.join().unwrap();
            }
            drain(&mut mb.close(), &mut seen);
            check_order(&seen, 2);
        });
    }
}
