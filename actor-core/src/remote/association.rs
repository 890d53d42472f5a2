//! An association: everything this system keeps about one peer address —
//! the two outbound connections (control and ordinary) with their queues
//! and writer tasks, the peer's current UID, and the reliable delivery of
//! system messages (sequence numbers, acknowledgements, redelivery).

use crate::message::Message;
use crate::remote::address::{Address, RemotePath};
use crate::remote::connection::{client_handshake, Connection};
use crate::remote::lane::Lane;
use crate::remote::remote_ref::not_registered;
use crate::remote::remoting::{QuarantineCheck, RemotingShared};
use crate::remote::wire::{self, Stream, SysMsg};
use crate::rt;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Why a message was not queued for the peer.
#[derive(Debug, Clone)]
pub(crate) enum SendError {
    /// The queue to the peer is full (the message goes back to its
    /// caller, who may send it again).
    Full,
    /// It cannot be sent at all (including once this node's remoting is
    /// shut down: its queues are closed, and waiting would not help).
    NotSendable(String),
}

/// What a send to a closed queue is told.
const SHUT_DOWN: &str = "this actor system's remoting is shut down";

/// An ask that could not be sent fails with the reason.
impl From<SendError> for crate::error::AskError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Full => crate::error::AskError::MailboxFull,
            SendError::NotSendable(why) => crate::error::AskError::NotSendable(why),
        }
    }
}

/// Reliable delivery state of system messages, per peer incarnation.
#[derive(Default)]
struct SysState {
    /// The peer's UID, once a handshake has told it.
    peer_uid: Option<u64>,
    next_seq: u64,
    unacked: VecDeque<(u64, SysMsg)>,
    /// When the oldest unacknowledged message was sent, or last progress.
    waiting_since: Option<Instant>,
    /// Highest sequence number received in order from the peer.
    last_received: u64,
}

/// Everything this system keeps about one peer address.
pub(crate) struct Association {
    remoting: Arc<RemotingShared>,
    pub(crate) address: Address,
    /// This association's id as a watcher of local actors (high bit set, so
    /// it never equals an actor's uid).
    pub(crate) watcher_id: u64,
    control: Lane,
    ordinary: Lane,
    sys: Mutex<SysState>,
    /// The writer tasks, awaited at shutdown so that queued frames go out.
    writers: Mutex<Vec<rt::JoinHandle<()>>>,
}

impl Association {
    pub(crate) fn new(remoting: Arc<RemotingShared>, address: Address) -> Self {
        let settings = &remoting.settings;
        Association {
            control: Lane::new(settings.outbound_control_queue_size),
            ordinary: Lane::new(settings.outbound_queue_size),
            watcher_id: fastrand::u64(..) | (1 << 63),
            sys: Mutex::new(SysState {
                next_seq: 1,
                ..SysState::default()
            }),
            writers: Mutex::new(Vec::new()),
            remoting,
            address,
        }
    }

    pub(crate) fn remoting(&self) -> &Arc<RemotingShared> {
        &self.remoting
    }

    fn lane(&self, stream: Stream) -> &Lane {
        match stream {
            Stream::Control => &self.control,
            Stream::Ordinary => &self.ordinary,
        }
    }

    fn sys(&self) -> MutexGuard<'_, SysState> {
        self.sys.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The peer's current UID, if known.
    pub(crate) fn peer_uid(&self) -> Option<u64> {
        self.sys().peer_uid
    }

    /// Encodes a user message for the peer; with `refuse_when_full`, a
    /// full queue refuses it before it is encoded.
    fn encode_user<M: Message>(
        &self,
        to: &RemotePath,
        from: &str,
        msg: &M,
        ask: u64,
        refuse_when_full: bool,
    ) -> Result<(Stream, Vec<u8>), SendError> {
        let codec = self
            .remoting
            .system
            .registry
            .codec_of::<M>()
            .ok_or_else(|| SendError::NotSendable(not_registered::<M>()))?;
        let stream = if codec.control {
            Stream::Control
        } else {
            Stream::Ordinary
        };
        if refuse_when_full {
            self.refuse_early(stream)?;
        }
        let frame = self.encode_frame(to, from, codec.manifest, ask, |b| (codec.encode)(msg, b))?;
        Ok((stream, frame))
    }

    /// A user message frame whose payload `write` puts in place.
    #[inline]
    fn encode_frame(
        &self,
        to: &RemotePath,
        from: &str,
        manifest: &str,
        ask: u64,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
    ) -> Result<Vec<u8>, SendError> {
        if self.remoting.is_shut_down() {
            return Err(SendError::NotSendable(SHUT_DOWN.to_string()));
        }
        let frame = wire::encode_msg(&to.path, to.uid, from, manifest, ask, write)
            .map_err(|e| SendError::NotSendable(format!("`{manifest}` did not encode: {e}")))?;
        let max = self.remoting.settings.max_frame_size;
        if frame.len() - 4 > max {
            return Err(SendError::NotSendable(format!(
                "a `{manifest}` of {} bytes is larger than max_frame_size ({max} bytes)",
                frame.len() - 4
            )));
        }
        Ok(frame)
    }

    /// Queues a user message whose payload `write` puts in place (already
    /// in the wire form of `manifest`), on the ordinary connection.
    /// `direct`: the frame may be written straight to an idle connection
    /// (see `Lane::push`); else it is queued for the writer.
    #[inline]
    pub(crate) fn send_encoded(
        &self,
        to: &RemotePath,
        manifest: &'static str,
        ask: u64,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
        direct: bool,
    ) -> Result<(), SendError> {
        self.refuse_early(Stream::Ordinary)?;
        let frame = self.encode_frame(to, "", manifest, ask, write)?;
        // Not recorded as a dead letter: the caller still has the message
        // (and may keep it to send again).
        if self.enqueue_via(Stream::Ordinary, frame, direct) {
            Ok(())
        } else {
            Err(self.refusal(Stream::Ordinary))
        }
    }

    /// Queues a user message for the peer.
    pub(crate) fn send_user<M: Message>(
        &self,
        to: &RemotePath,
        from: &str,
        msg: &M,
        ask: u64,
    ) -> Result<(), SendError> {
        let (stream, frame) = self.encode_user(to, from, msg, ask, true)?;
        if self.enqueue(stream, frame) {
            return Ok(());
        }
        // Handed back to the sender (or failing its ask), as a full local
        // mailbox does: not lost, so not a dead letter.
        Err(self.refusal(stream))
    }

    /// Waits until the queue of user messages to the peer has room (or is
    /// closed).
    pub(crate) async fn wait_for_room(&self) {
        self.ordinary.wait_room().await;
    }

    /// Refuses a send to a full queue before its frame is encoded: a
    /// sender that retries at once while the queue is full (a `tell` in a
    /// loop) then spends nothing on frames that are thrown away.
    #[inline]
    fn refuse_early(&self, stream: Stream) -> Result<(), SendError> {
        let lane = self.lane(stream);
        if lane.is_full() && !lane.is_closed() {
            self.remoting.note_refused(&self.address);
            return Err(SendError::Full);
        }
        Ok(())
    }

    /// Why `stream`'s queue refused a frame: closed (remoting shut down
    /// after `encode_frame` looked, so retrying cannot help) or full.
    fn refusal(&self, stream: Stream) -> SendError {
        if self.lane(stream).is_closed() {
            SendError::NotSendable(SHUT_DOWN.to_string())
        } else {
            self.remoting.note_refused(&self.address);
            SendError::Full
        }
    }

    /// Queues a user message, waiting for room in the queue.
    pub(crate) async fn send_user_waiting<M: Message>(
        &self,
        to: &RemotePath,
        msg: &M,
        ask: u64,
    ) -> Result<(), SendError> {
        let (stream, frame) = self.encode_user(to, "", msg, ask, false)?;
        self.ensure_writer(stream);
        if self.lane(stream).send(frame).await {
            Ok(())
        } else {
            Err(SendError::NotSendable(SHUT_DOWN.to_string()))
        }
    }

    /// A frame this node could not queue and cannot hand back: lost.
    fn dropped(&self, what: &'static str) {
        let addr = &self.address;
        self.remoting
            .system
            .dead_letters
            .record(|| format!("{addr} (outbound queue full)"), what);
    }

    /// Queues an encoded frame; false if the queue is full or closed.
    pub(crate) fn enqueue(&self, stream: Stream, frame: Vec<u8>) -> bool {
        self.enqueue_via(stream, frame, true)
    }

    /// As `enqueue`; `direct`: the frame may be written straight to an
    /// idle connection (`Lane::push`), else it goes to the writer.
    #[inline]
    fn enqueue_via(&self, stream: Stream, frame: Vec<u8>, direct: bool) -> bool {
        self.ensure_writer(stream);
        if !direct || self.held(stream) {
            return self.lane(stream).queue(frame);
        }
        let faults = self.remoting.faults.as_ref();
        self.lane(stream).push(frame, || {
            faults.is_none_or(|f| f.passes_send(&self.address))
        })
    }

    /// The fault-injection switch holds `stream`'s frames in their queue.
    fn held(&self, stream: Stream) -> bool {
        stream == Stream::Ordinary
            && self
                .remoting
                .faults
                .as_ref()
                .is_some_and(|f| f.holds(&self.address))
    }

    /// Sends the reply of an ask this node answered.
    pub(crate) fn send_reply_frame(&self, frame: Vec<u8>) {
        if !self.enqueue(Stream::Ordinary, frame) {
            self.dropped("reply to a remote ask");
        }
    }

    #[inline]
    fn ensure_writer(&self, stream: Stream) {
        let lane = self.lane(stream);
        if !lane.writer_started.load(Ordering::Relaxed)
            && !lane.writer_started.swap(true, Ordering::AcqRel)
        {
            let me = self.remoting.association(&self.address);
            let writer = rt::spawn(async move { me.run_writer(stream).await });
            self.writers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(writer);
        }
    }

    /// Closes the queues: the writers end once they are drained.
    pub(crate) fn close(&self) {
        self.control.close();
        self.ordinary.close();
    }

    /// Shuts the outbound connections down: their writers end at once.
    pub(crate) fn abort_connections(&self) {
        self.control.shutdown_stream();
        self.ordinary.shutdown_stream();
    }

    /// Waits until the writers have sent what was queued before `close`
    /// and ended.
    pub(crate) async fn flushed(&self) {
        let writers = std::mem::take(&mut *self.writers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in writers {
            w.await;
        }
    }

    /// Connects (with backoff), hands over, and writes the lane's frames,
    /// reconnecting whenever the connection breaks, until shutdown.
    async fn run_writer(self: Arc<Self>, stream: Stream) {
        let settings = &self.remoting.settings;
        let mut backoff = settings.reconnect_backoff_min;
        let mut failures = 0u32;
        loop {
            if self.remoting.is_shut_down() {
                return;
            }
            match client_handshake(&self, stream).await {
                Ok((conn, peer_uid)) => {
                    if failures > 0 {
                        tracing::info!(
                            "connected to {} ({stream:?}) after {failures} failed attempts",
                            self.address
                        );
                    }
                    failures = 0;
                    backoff = settings.reconnect_backoff_min;
                    if stream == Stream::Control {
                        self.resend_unacked();
                    }
                    match self.write_frames(conn, peer_uid, stream).await {
                        Ok(()) => return,
                        Err(e) => {
                            tracing::info!("connection to {} ({stream:?}) lost: {e}", self.address)
                        }
                    }
                }
                Err(e) => {
                    failures += 1;
                    if failures == 1 {
                        tracing::warn!(
                            "cannot connect to {} ({stream:?}): {e}; retrying with backoff",
                            self.address
                        );
                    } else {
                        tracing::debug!("cannot connect to {} ({stream:?}): {e}", self.address);
                    }
                }
            }
            if self.remoting.is_shut_down() {
                return;
            }
            self.remoting.sleep_unless_shut_down(backoff).await;
            backoff = (backoff * 2).min(settings.reconnect_backoff_max);
        }
    }

    /// Writes queued frames in batches: everything waiting is written with
    /// one system call. Returns `Ok` when the queue is closed (shutdown).
    async fn write_frames(
        &self,
        mut conn: Connection,
        peer_uid: u64,
        stream: Stream,
    ) -> std::io::Result<()> {
        use futures_lite::AsyncWriteExt;
        const BATCH: usize = 64 * 1024;
        let lane = self.lane(stream);
        let faults = self.remoting.faults.as_ref();
        let mut buf = Vec::with_capacity(BATCH);
        let mut quarantine = QuarantineCheck::new(peer_uid);
        lane.attach(conn.stream.clone());
        let result = loop {
            buf.clear();
            let keep = || faults.is_none_or(|f| f.passes_send(&self.address));
            let Some(taken) = lane.next_batch(&mut buf, BATCH, keep).await else {
                let _ = conn.stream.close().await;
                break Ok(());
            };
            // Tests only: the batch keeps its places in the queue while
            // held (polled: the switch has no event to wait on).
            while self.held(stream) && !self.remoting.is_shut_down() {
                self.remoting
                    .sleep_unless_shut_down(std::time::Duration::from_millis(2))
                    .await;
            }
            if quarantine.is_quarantined(&self.remoting) {
                lane.batch_written(taken);
                break Err(std::io::Error::other("the peer was quarantined"));
            }
            let written = if buf.is_empty() {
                Ok(())
            } else {
                conn.stream.write_all(&buf).await
            };
            lane.batch_written(taken);
            if let Err(e) = written {
                break Err(e);
            }
        };
        lane.detach();
        result
    }

    /// Sends a system message reliably.
    pub(crate) fn send_sys(&self, msg: SysMsg) {
        let frame = {
            let mut st = self.sys();
            let seq = st.next_seq;
            st.next_seq += 1;
            let frame = wire::encode_sys(seq, &msg);
            st.unacked.push_back((seq, msg));
            st.waiting_since.get_or_insert_with(Instant::now);
            frame
        };
        // If the queue is full, the redelivery timer sends it later.
        let _ = self.enqueue(Stream::Control, frame);
    }

    /// The peer acknowledged every system message up to `seq`.
    pub(crate) fn ack_sys(&self, seq: u64) {
        let mut st = self.sys();
        let before = st.unacked.len();
        while st.unacked.front().is_some_and(|(s, _)| *s <= seq) {
            st.unacked.pop_front();
        }
        if st.unacked.is_empty() {
            st.waiting_since = None;
        } else if st.unacked.len() < before {
            st.waiting_since = Some(Instant::now());
        }
    }

    /// A system message from the peer: `Some(msg)` if it is the next one
    /// in order (to be acted on); an acknowledgement is sent either way.
    pub(crate) fn receive_sys(&self, seq: u64, msg: SysMsg) -> Option<SysMsg> {
        let (deliver, ack) = {
            let mut st = self.sys();
            if seq == st.last_received + 1 {
                st.last_received = seq;
                (Some(msg), seq)
            } else {
                (None, st.last_received)
            }
        };
        let _ = self.enqueue(Stream::Control, wire::encode_sys_ack(ack));
        deliver
    }

    /// Queues every unacknowledged system message again. Returns how long
    /// the oldest has waited, if any.
    pub(crate) fn resend_unacked(&self) -> Option<std::time::Duration> {
        let (frames, waited) = {
            let st = self.sys();
            let frames: Vec<Vec<u8>> = st
                .unacked
                .iter()
                .map(|(seq, msg)| wire::encode_sys(*seq, msg))
                .collect();
            (frames, st.waiting_since.map(|t| t.elapsed()))
        };
        for f in frames {
            if !self.enqueue(Stream::Control, f) {
                break;
            }
        }
        waited
    }

    /// Records the UID a handshake reported. Returns the previous UID when
    /// it differs (the peer restarted): the caller quarantines it.
    pub(crate) fn set_peer_uid(&self, uid: u64) -> Option<u64> {
        let mut st = self.sys();
        match st.peer_uid {
            Some(old) if old == uid => None,
            old => {
                st.peer_uid = Some(uid);
                old
            }
        }
    }

    /// Forgets the state of a peer incarnation that was quarantined: its
    /// pending system messages are void and a new incarnation starts
    /// counting from 1.
    pub(crate) fn reset_incarnation(&self, quarantined_uid: u64) {
        let mut st = self.sys();
        if st.peer_uid == Some(quarantined_uid) {
            st.peer_uid = None;
        }
        st.next_seq = 1;
        st.unacked.clear();
        st.waiting_since = None;
        st.last_received = 0;
        drop(st);
        // No more direct writes to the quarantined incarnation.
        self.control.detach();
        self.ordinary.detach();
    }
}
