//! One outbound connection's queue of encoded frames, with a direct path.
//!
//! The queue is bounded by a count of frames in flight rather than by a
//! preallocated ring: a ring of 100,000 slots costs megabytes per peer up
//! front (a 50-node cluster in one process spent seconds and gigabytes
//! creating them), while the linked queue grows with what is queued.
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
use event_listener::Event;
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
    /// Frames queued or being written by the writer, at most `capacity`.
    in_flight: AtomicUsize,
    capacity: usize,
    /// Notified when frames leave the lane (or it closes): senders waiting
    /// for room try again.
    room: Event,
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
        let (tx, rx) = async_channel::unbounded();
        Lane {
            tx,
            rx,
            writer_started: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            capacity: capacity.max(1),
            room: Event::new(),
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

    /// Takes a place for one frame, if there is room.
    fn reserve(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.capacity).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back `n` places.
    fn release(&self, n: usize) {
        self.in_flight.fetch_sub(n, Ordering::AcqRel);
        self.room.notify(n);
    }

    /// Queues a frame in a place already reserved.
    fn enqueue_reserved(&self, frame: Vec<u8>) -> bool {
        if self.tx.try_send(frame).is_ok() {
            true
        } else {
            self.release(1);
            false
        }
    }

    fn queue(&self, frame: Vec<u8>) -> bool {
        self.reserve() && self.enqueue_reserved(frame)
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

    /// Queues a frame, waiting for room. False once the lane is closed.
    pub(crate) async fn send(&self, frame: Vec<u8>) -> bool {
        loop {
            if self.tx.is_closed() {
                return false;
            }
            if self.reserve() {
                return self.enqueue_reserved(frame);
            }
            // Listen first, then look again: a place freed in between is
            // not missed.
            let room = self.room.listen();
            if self.reserve() {
                return self.enqueue_reserved(frame);
            }
            if self.tx.is_closed() {
                return false;
            }
            room.await;
        }
    }

    /// Closes the queue: the writer ends once it is drained.
    pub(crate) fn close(&self) {
        self.tx.close();
        self.room.notify(usize::MAX);
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
        self.release(taken);
        slot.writer_busy = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_holds_and_a_waiting_sender_resumes_when_frames_leave() {
        rt::block_on(async {
            let lane = std::sync::Arc::new(Lane::new(2));
            // Not attached to a connection: every frame is queued.
            assert!(lane.push(vec![1], || true));
            assert!(lane.push(vec![2], || true));
            assert!(
                !lane.push(vec![3], || true),
                "a third frame fits in 2 places"
            );
            let waiting = {
                let lane = lane.clone();
                rt::spawn(async move { lane.send(vec![4]).await })
            };
            let mut buf = Vec::new();
            let taken = lane.next_batch(&mut buf, 1024, || true).await;
            assert_eq!(taken, Some(2));
            assert_eq!(buf, vec![1, 2]);
            lane.batch_written(2);
            assert!(waiting.await, "the waiting sender got a place");
            buf.clear();
            assert_eq!(lane.next_batch(&mut buf, 1024, || true).await, Some(1));
            assert_eq!(buf, vec![4]);
            lane.batch_written(1);
            // Closed: senders stop waiting, the writer sees the end.
            lane.close();
            assert!(!lane.send(vec![5]).await);
            assert_eq!(lane.next_batch(&mut buf, 1024, || true).await, None);
        });
    }

    #[test]
    fn a_sender_waiting_for_room_is_released_by_close() {
        rt::block_on(async {
            let lane = std::sync::Arc::new(Lane::new(1));
            assert!(lane.push(vec![1], || true));
            let waiting = {
                let lane = lane.clone();
                rt::spawn(async move { lane.send(vec![2]).await })
            };
            lane.close();
            assert!(!waiting.await);
        });
    }
}
