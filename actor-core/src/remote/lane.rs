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
//! partly written has its rest queued before the lock is released. Every
//! frame is queued under that lock too, so none can slip in between a
//! direct write and the rest of its frame.

use crate::rt;
use event_listener::{Event, IntoNotification};
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
    #[inline]
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
        // `n` more, not "n in all": a listener woken earlier and not yet
        // run (a `wait_room` that will pass its wake-up on) does not use
        // up one of these places.
        self.room.notify(n.additional());
    }

    /// Queues a frame in a place already reserved.
    #[inline]
    fn enqueue_reserved(&self, frame: Vec<u8>) -> bool {
        if self.tx.try_send(frame).is_ok() {
            true
        } else {
            self.release(1);
            false
        }
    }

    /// Queues a frame, if there is room.
    #[inline]
    pub(crate) fn queue(&self, frame: Vec<u8>) -> bool {
        let _order = self.slot();
        self.queue_locked(frame)
    }

    /// As `queue`, with the slot lock held by the caller.
    #[inline]
    fn queue_locked(&self, frame: Vec<u8>) -> bool {
        self.reserve() && self.enqueue_reserved(frame)
    }

    /// Queues the unwritten rest of a directly written frame (slot lock
    /// held): it must go out, so it takes a place even beyond `capacity`.
    fn queue_rest_locked(&self, rest: Vec<u8>) -> bool {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.enqueue_reserved(rest)
    }

    /// Sends a frame: directly if the lane is idle, else through the
    /// queue. False if the queue is full or closed. `passes` is the
    /// fault-injection verdict for a direct write.
    pub(crate) fn push(&self, frame: Vec<u8>, passes: impl FnOnce() -> bool) -> bool {
        if self.in_flight.load(Ordering::Acquire) != 0 || !self.idle() {
            return self.queue(frame);
        }
        // Waits for a direct write in progress (a non-blocking write, so
        // not long): its rest, if any, must be queued first.
        let slot = self.slot();
        let stream = match &slot.stream {
            Some(s) if !slot.writer_busy && self.in_flight.load(Ordering::Acquire) == 0 => s,
            _ => return self.queue_locked(frame),
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
            Ok(n) if n > 0 => self.queue_rest_locked(frame[n..].to_vec()),
            // Nothing written yet, or a broken connection (the writer finds
            // out on its next write): queued as any other frame.
            _ => self.queue_locked(frame),
        }
    }

    /// Queues a frame, waiting for room. False once the lane is closed.
    pub(crate) async fn send(&self, frame: Vec<u8>) -> bool {
        loop {
            if self.tx.is_closed() {
                return false;
            }
            if self.reserve() {
                let _order = self.slot();
                return self.enqueue_reserved(frame);
            }
            // Listen first, then look again: a place freed in between is
            // not missed.
            let room = self.room.listen();
            if self.reserve() {
                let _order = self.slot();
                return self.enqueue_reserved(frame);
            }
            if self.tx.is_closed() {
                return false;
            }
            room.await;
        }
    }

    /// Waits until a frame would find room, or the queue is closed,
    /// without taking the room. A wake-up that finds room is passed on, so
    /// that a sender waiting in `send` does not lose it to this waiter.
    pub(crate) async fn wait_room(&self) {
        let has_room =
            || self.is_closed() || self.in_flight.load(Ordering::Acquire) < self.capacity;
        loop {
            if has_room() {
                return;
            }
            // Listen first, then look again (as `send`).
            let room = self.room.listen();
            if has_room() {
                return;
            }
            room.await;
            if has_room() {
                self.room.notify(1.additional());
                return;
            }
        }
    }

    /// True while the queue has no room: a frame pushed now would be
    /// refused (a frame pushed a moment later may find room again).
    pub(crate) fn is_full(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) >= self.capacity
    }

    /// True once the queue is closed (remoting shut down).
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
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

    /// Shuts the attached connection down (its writer's writes fail).
    pub(crate) fn shutdown_stream(&self) {
        if let Some(s) = &self.slot().stream {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
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

    /// Several threads send frames of random sizes through one lane to a
    /// slow reader, so that direct writes are often partial and race with
    /// queued frames: every frame must arrive whole.
    #[test]
    fn concurrent_senders_never_interleave_frames_on_the_wire() {
        use std::io::Read;
        const THREADS: u8 = 4;
        const PER_THREAD: usize = 200;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut counts = [0usize; THREADS as usize];
            let mut header = [0u8; 4];
            for _ in 0..THREADS as usize * PER_THREAD {
                s.read_exact(&mut header).unwrap();
                let len = u32::from_be_bytes(header) as usize;
                let mut body = vec![0u8; len];
                s.read_exact(&mut body).unwrap();
                let who = body[0];
                assert!(
                    body.iter().all(|b| *b == who),
                    "a frame of {len} bytes from sender {who} is mixed with another"
                );
                counts[who as usize] += 1;
                // A slow reader: the socket buffer fills, writes go partial.
                if fastrand::u8(..) < 16 {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            counts
        });
        let lane = std::sync::Arc::new(Lane::new(64));
        let stream = std::net::TcpStream::connect(addr).unwrap();
        rustix::net::sockopt::set_socket_send_buffer_size(&stream, 8192).unwrap();
        stream.set_nodelay(true).unwrap();
        let stream = rt::TcpStream::from(stream);
        lane.attach(stream.clone());
        let writer = {
            let lane = lane.clone();
            rt::spawn(async move {
                use futures_lite::AsyncWriteExt;
                let mut s = stream;
                let mut buf = Vec::new();
                while let Some(taken) = lane.next_batch(&mut buf, 64 * 1024, || true).await {
                    s.write_all(&buf).await.unwrap();
                    buf.clear();
                    lane.batch_written(taken);
                }
            })
        };
        let senders: Vec<_> = (0..THREADS)
            .map(|who| {
                let lane = lane.clone();
                std::thread::spawn(move || {
                    for _ in 0..PER_THREAD {
                        let len = fastrand::usize(1..6_000);
                        let mut frame = (len as u32).to_be_bytes().to_vec();
                        frame.resize(4 + len, who);
                        if !lane.push(frame.clone(), || true) {
                            assert!(rt::block_on(lane.send(frame)));
                        }
                        if fastrand::u8(..) < 32 {
                            // Let the lane go idle now and then: direct writes.
                            std::thread::sleep(Duration::from_micros(50));
                        }
                    }
                })
            })
            .collect();
        for s in senders {
            s.join().unwrap();
        }
        let counts = reader.join().unwrap();
        assert_eq!(counts, [PER_THREAD; THREADS as usize]);
        lane.close();
        rt::block_on(writer);
    }

    /// A `wait_room` waiter woken by freed room passes the wake-up on, so
    /// that a sender listening behind it is not left waiting (the test
    /// fails, after 5 s, without the pass-on).
    #[test]
    fn a_room_waiter_passes_the_wake_up_on_to_a_waiting_sender() {
        use futures_lite::future::poll_once;
        rt::block_on(async {
            let lane = std::sync::Arc::new(Lane::new(1));
            assert!(lane.push(vec![1], || true), "the one place");
            let mut room = {
                let lane = lane.clone();
                Box::pin(async move { lane.wait_room().await })
            };
            assert!(poll_once(&mut room).await.is_none(), "listening first");
            let mut send = {
                let lane = lane.clone();
                Box::pin(async move { lane.send(vec![2]).await })
            };
            assert!(poll_once(&mut send).await.is_none(), "listening second");
            // The frame was written: one place, one wake-up, to the waiter.
            lane.release(1);
            room.await;
            let sent = rt::timeout(Duration::from_secs(5), send).await;
            assert_eq!(sent, Some(true), "the sender got the place");
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
