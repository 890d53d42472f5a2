//! One outbound connection's queue of encoded frames, with a direct path.
//!
//! Frames normally go through a bounded queue to the connection's writer
//! task, which writes everything waiting with one system call. When the
//! lane is idle — nothing queued, the writer not writing, and nothing
//! written for a short while — the sender writes its frame straight to the
//! socket instead (a non-blocking write attempt). That saves a wake-up of
//! the writer task on each side of a request/response exchange, which on a
//! quiet machine is most of the round trip; a burst of sends still goes
//! through the queue and is batched.
//!
//! Ordering: a frame is written directly only while `in_flight` (frames
//! queued or being written by the writer) is zero, checked under the slot
//! lock that the writer also takes before it writes; a frame that is only
//! partly written has its rest queued before the lock is released.

use crate::rt;
use futures_lite::AsyncWrite;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A lane that has written within this long is busy: queue, to batch.
const IDLE_AFTER: Duration = Duration::from_micros(20);

/// The connection, while the writer is not using it.
#[derive(Default)]
struct Slot {
    stream: Option<rt::TcpStream>,
    writer_busy: bool,
}

pub(crate) struct Lane {
    tx: async_channel::Sender<Vec<u8>>,
    rx: async_channel::Receiver<Vec<u8>>,
    pub(crate) writer_started: AtomicBool,
    /// Frames queued or being written by the writer.
    in_flight: AtomicUsize,
    slot: Mutex<Slot>,
    epoch: Instant,
    /// Nanoseconds since `epoch` of the last write.
    last_write: AtomicU64,
}

/// Writes as much of `buf` as the socket takes now, without waiting.
fn write_now(stream: &rt::TcpStream, buf: &[u8]) -> io::Result<usize> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut s = stream;
    match Pin::new(&mut s).poll_write(&mut cx, buf) {
        Poll::Ready(r) => r,
        Poll::Pending => Ok(0),
    }
}

impl Lane {
    pub(crate) fn new(capacity: usize) -> Self {
        let (tx, rx) = async_channel::bounded(capacity);
        Lane {
            tx,
            rx,
            writer_started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            slot: Mutex::new(Slot::default()),
            epoch: Instant::now(),
            last_write: AtomicU64::new(0),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn idle(&self) -> bool {
        self.now()
            .saturating_sub(self.last_write.load(Ordering::Relaxed))
            > IDLE_AFTER.as_nanos() as u64
    }

    fn queue(&self, frame: Vec<u8>) -> bool {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if self.tx.try_send(frame).is_ok() {
            true
        } else {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            false
        }
    }

    /// Sends a frame: directly if the lane is idle, else through the
    /// queue. False if the queue is full or closed. `passes` is the
    /// fault-injection verdict for a direct write.
    pub(crate) fn push(&self, frame: Vec<u8>, passes: impl FnOnce() -> bool) -> bool {
        if self.in_flight.load(Ordering::Acquire) != 0 || !self.idle() {
            return self.queue(frame);
        }
        let Ok(slot) = self.slot.try_lock() else {
            return self.queue(frame);
        };
        let stream = match &slot.stream {
            Some(s) if !slot.writer_busy && self.in_flight.load(Ordering::Acquire) == 0 => s,
            _ => {
                drop(slot);
                return self.queue(frame);
            }
        };
        if !passes() {
            return true;
        }
        match write_now(stream, &frame) {
            Ok(n) if n == frame.len() => {
                self.last_write.store(self.now(), Ordering::Relaxed);
                true
            }
            // Partly written: the rest goes first in the (empty) queue,
            // while the slot is still locked.
            Ok(n) => self.queue(frame[n..].to_vec()),
            // A broken connection: the writer finds out on its next write.
            Err(_) => self.queue(frame),
        }
    }

    /// Queues a frame, waiting for room.
    pub(crate) async fn send(&self, frame: Vec<u8>) -> bool {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        if self.tx.send(frame).await.is_ok() {
            true
        } else {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            false
        }
    }

    /// Closes the queue: the writer ends once it is drained.
    pub(crate) fn close(&self) {
        self.tx.close();
    }

    /// The writer has (re)connected.
    pub(crate) fn attach(&self, stream: rt::TcpStream) {
        self.slot().stream = Some(stream);
    }

    /// The connection is gone: no direct writes until the next `attach`.
    pub(crate) fn detach(&self) {
        let mut slot = self.slot();
        slot.stream = None;
        slot.writer_busy = false;
    }

    /// Waits for queued frames and appends up to `max` bytes of them to
    /// `buf` (those `keep` accepts). Returns how many frames were taken, or
    /// `None` once the queue is closed and empty. The lane counts as busy
    /// until `batch_written`.
    pub(crate) async fn next_batch(
        &self,
        buf: &mut Vec<u8>,
        max: usize,
        keep: impl Fn() -> bool,
    ) -> Option<usize> {
        let first = self.rx.recv().await.ok()?;
        self.slot().writer_busy = true;
        let mut taken = 0;
        let mut next = Some(first);
        while let Some(frame) = next {
            taken += 1;
            if keep() {
                buf.extend_from_slice(&frame);
            }
            next = if buf.len() < max {
                self.rx.try_recv().ok()
            } else {
                None
            };
        }
        Some(taken)
    }

    /// The writer has written a batch of `taken` frames.
    pub(crate) fn batch_written(&self, taken: usize) {
        self.last_write.store(self.now(), Ordering::Relaxed);
        let mut slot = self.slot();
        self.in_flight.fetch_sub(taken, Ordering::AcqRel);
        slot.writer_busy = false;
    }
}
