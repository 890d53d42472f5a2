//! TCP connections: the handshake on both sides, and the inbound reader
//! that decodes frames and hands them on. Everything read here is
//! untrusted: bad input is logged (rate limited) and dropped.

use crate::deferred_activations::DeferActivations;
use crate::remote::address::Address;
use crate::remote::association::Association;
use crate::remote::handshake;
use crate::remote::remoting::{QuarantineCheck, RemotingShared};
use crate::remote::serde_context;
use crate::remote::wire::{self, Challenge, Frame, Hello, Stream, PREAMBLE, PROTOCOL_VERSION};
use crate::rt;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use std::io;
use std::sync::Arc;

/// Largest handshake frame accepted (they are small; a peer that sends
/// more is not speaking the protocol).
const MAX_HANDSHAKE_FRAME: usize = 16 * 1024;

/// An established, authenticated connection.
pub(crate) struct Connection {
    pub(crate) stream: rt::TcpStream,
}

/// Most frames handled as one batch (see `read_frames`): bounds the delay
/// that holding back the activations they start adds to the first.
const FRAME_BATCH: usize = 32;

/// Reads length-prefixed frames from a stream into a reusable buffer.
struct FrameReader {
    stream: rt::TcpStream,
    buf: Vec<u8>,
    /// Start of unconsumed bytes.
    pos: usize,
    /// End of valid bytes.
    end: usize,
}

enum Read {
    /// A frame body at `buf[start..end]`.
    Frame(usize, usize),
    /// A frame over the limit was skipped; its length.
    Oversized(usize),
    /// The peer closed the connection.
    Closed,
}

impl FrameReader {
    fn new(stream: rt::TcpStream) -> Self {
        FrameReader {
            stream,
            buf: vec![0; 64 * 1024],
            pos: 0,
            end: 0,
        }
    }

    async fn fill(&mut self) -> io::Result<bool> {
        if self.pos > 0 && (self.end == self.buf.len() || self.pos == self.end) {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
        }
        if self.end == self.buf.len() {
            let len = self.buf.len();
            self.buf.resize(len * 2, 0);
        }
        let n = self.stream.read(&mut self.buf[self.end..]).await?;
        self.end += n;
        Ok(n > 0)
    }

    async fn read_exact(&mut self, n: usize) -> io::Result<Option<(usize, usize)>> {
        while self.end - self.pos < n {
            if !self.fill().await? {
                return Ok(None);
            }
        }
        let start = self.pos;
        self.pos += n;
        Ok(Some((start, start + n)))
    }

    /// The next frame if it is whole in the buffer already (no read).
    fn next_buffered(&mut self, max: usize) -> Option<(usize, usize)> {
        match wire::next_frame(&self.buf[self.pos..self.end], max) {
            Ok(Some((s, e))) => {
                let r = (self.pos + s, self.pos + e);
                self.pos += e;
                Some(r)
            }
            _ => None,
        }
    }

    /// The next frame. A frame over `max` is skipped without buffering it,
    /// so that the connection stays usable.
    async fn next(&mut self, max: usize) -> io::Result<Read> {
        loop {
            match wire::next_frame(&self.buf[self.pos..self.end], max) {
                Ok(Some((s, e))) => {
                    let r = Read::Frame(self.pos + s, self.pos + e);
                    self.pos += e;
                    return Ok(r);
                }
                Ok(None) => {
                    // Make room for the whole frame if it is larger than the buffer.
                    if self.end - self.pos >= 4 {
                        let b = &self.buf[self.pos..];
                        let need = 4 + u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                        if need > self.buf.len() - self.pos {
                            self.buf.copy_within(self.pos..self.end, 0);
                            self.end -= self.pos;
                            self.pos = 0;
                            if need > self.buf.len() {
                                self.buf.resize(need, 0);
                            }
                        }
                    }
                    if !self.fill().await? {
                        return Ok(Read::Closed);
                    }
                }
                Err(len) => {
                    let mut skip = 4 + len;
                    let have = self.end - self.pos;
                    let now = skip.min(have);
                    self.pos += now;
                    skip -= now;
                    while skip > 0 {
                        self.pos = 0;
                        self.end = 0;
                        if !self.fill().await? {
                            return Ok(Read::Closed);
                        }
                        let now = skip.min(self.end);
                        self.pos = now;
                        skip -= now;
                    }
                    return Ok(Read::Oversized(len));
                }
            }
        }
    }

    async fn next_handshake_frame(&mut self) -> io::Result<Option<Frame<'_>>> {
        match self.next(MAX_HANDSHAKE_FRAME).await? {
            Read::Frame(s, e) => wire::decode(&self.buf[s..e])
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.0)),
            Read::Oversized(len) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("handshake frame of {len} bytes"),
            )),
            Read::Closed => Ok(None),
        }
    }
}

fn refused(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, why)
}

fn check_preamble(got: &[u8]) -> Result<(), String> {
    if got[..3] != PREAMBLE[..3] {
        return Err("not a Troupe peer (bad preamble)".into());
    }
    if got[3] != PROTOCOL_VERSION {
        return Err(format!(
            "it speaks Troupe protocol version {}, this node speaks version {PROTOCOL_VERSION}",
            got[3]
        ));
    }
    Ok(())
}

/// Connects to the association's peer and runs the client side of the
/// handshake. Returns the connection and the peer's UID.
pub(crate) async fn client_handshake(
    assoc: &Arc<Association>,
    stream_kind: Stream,
) -> io::Result<(Connection, u64)> {
    let remoting = assoc.remoting().clone();
    let timeout = remoting.settings.handshake_timeout;
    match rt::timeout(
        timeout,
        client_handshake_inner(&remoting, assoc, stream_kind),
    )
    .await
    {
        Some(r) => r,
        None => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("handshake took longer than {timeout:?}"),
        )),
    }
}

async fn client_handshake_inner(
    remoting: &Arc<RemotingShared>,
    assoc: &Arc<Association>,
    stream_kind: Stream,
) -> io::Result<(Connection, u64)> {
    let peer = &assoc.address;
    let mut stream = rt::TcpStream::connect(peer.socket_addr()).await?;
    stream.set_nodelay(true)?;
    let nc = handshake::nonce();
    let hello = Hello {
        stream: stream_kind,
        from: remoting.address.to_string(),
        from_uid: remoting.uid,
        to: peer.to_string(),
        nonce: nc.clone(),
    };
    let mut out = PREAMBLE.to_vec();
    out.extend_from_slice(&wire::encode_hello(&hello));
    stream.write_all(&out).await?;
    let mut reader = FrameReader::new(stream.clone());
    let Some((s, e)) = reader.read_exact(4).await? else {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed during the handshake",
        ));
    };
    if let Err(why) = check_preamble(&reader.buf[s..e]) {
        tracing::error!("{peer} refused: {why}");
        return Err(refused(why));
    }
    let challenge = match reader.next_handshake_frame().await? {
        Some(Frame::Challenge(c)) => c,
        Some(Frame::Refused(why)) => {
            tracing::error!("{peer} refused the handshake: {why}");
            return Err(refused(why));
        }
        Some(other) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("unexpected {other:?}"),
            ))
        }
        None => {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "closed during the handshake",
            ))
        }
    };
    let Challenge {
        from,
        from_uid,
        nonce: ns,
        mac,
    } = challenge;
    let secret = remoting.secret.as_bytes();
    if !handshake::verify(
        &handshake::server_mac(secret, &nc, &ns, from_uid, remoting.uid),
        &mac,
    ) {
        let why = "authentication failed: the peers do not share the same secret";
        tracing::error!("handshake with {peer} failed: {why}");
        let _ = stream.write_all(&wire::encode_refused(why)).await;
        return Err(refused(why.into()));
    }
    if from != peer.to_string() {
        let why = format!("dialed {peer} but {from} answered");
        tracing::error!("handshake failed: {why}");
        let _ = stream.write_all(&wire::encode_refused(&why)).await;
        return Err(refused(why));
    }
    if remoting.is_quarantined(from_uid) {
        let why = format!("{peer} with UID {from_uid} is quarantined by this node");
        let _ = stream.write_all(&wire::encode_refused(&why)).await;
        return Err(refused(why));
    }
    let auth = handshake::client_mac(secret, &ns, &nc, remoting.uid, from_uid);
    stream.write_all(&wire::encode_auth(&auth)).await?;
    match reader.next_handshake_frame().await? {
        Some(Frame::Accepted) => {}
        Some(Frame::Refused(why)) => {
            tracing::error!("{peer} refused the handshake: {why}");
            return Err(refused(why));
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "no answer to the authentication",
            ))
        }
    }
    remoting.peer_uid_seen(assoc, from_uid);
    // Frames from the peer never come on this connection: it is ours to
    // write (the peer writes on its own outbound connections).
    Ok((Connection { stream }, from_uid))
}

/// Runs the server side of the handshake on an accepted connection, then
/// reads its frames until it closes.
pub(crate) async fn serve_inbound(
    remoting: Arc<RemotingShared>,
    stream: rt::TcpStream,
    from: std::net::SocketAddr,
) {
    let _ = stream.set_nodelay(true);
    let timeout = remoting.settings.handshake_timeout;
    let mut reader = FrameReader::new(stream.clone());
    let accepted = match rt::timeout(timeout, server_handshake(&remoting, &mut reader, from)).await
    {
        Some(Ok(a)) => a,
        Some(Err(e)) => {
            remoting.log_bad_input(format_args!("inbound connection from {from} closed: {e}"));
            return;
        }
        None => {
            remoting.log_bad_input(format_args!(
                "inbound connection from {from}: no handshake within {timeout:?}"
            ));
            return;
        }
    };
    let (assoc, peer_uid) = accepted;
    let conn_id = remoting.track_inbound(stream.clone());
    read_frames(&remoting, &assoc, peer_uid, &mut reader).await;
    remoting.untrack_inbound(conn_id);
}

async fn server_handshake(
    remoting: &Arc<RemotingShared>,
    reader: &mut FrameReader,
    from: std::net::SocketAddr,
) -> io::Result<(Arc<Association>, u64)> {
    let mut stream = reader.stream.clone();
    let Some((s, e)) = reader.read_exact(4).await? else {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed before the handshake",
        ));
    };
    let preamble = reader.buf[s..e].to_vec();
    stream.write_all(&PREAMBLE).await?;
    if let Err(why) = check_preamble(&preamble) {
        if preamble[..3] == PREAMBLE[..3] {
            tracing::error!("refused a connection from {from}: {why}");
        }
        return Err(refused(why));
    }
    let hello = match reader.next_handshake_frame().await? {
        Some(Frame::Hello(h)) => h,
        _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "no hello")),
    };
    let refuse = |why: String| async move {
        let _ = stream.write_all(&wire::encode_refused(&why)).await;
        refused(why)
    };
    if hello.to != remoting.address.to_string() {
        let why = format!("this is {}, not {}", remoting.address, hello.to);
        tracing::warn!("refused a connection from {from}: {why}");
        return Err(refuse(why).await);
    }
    let peer: Address = match hello.from.parse() {
        Ok(a) => a,
        Err(e) => return Err(refuse(format!("bad address: {e}")).await),
    };
    if remoting.is_quarantined(hello.from_uid) {
        let why = format!(
            "{peer} with UID {} is quarantined by {}; restart it to rejoin with a new UID",
            hello.from_uid, remoting.address
        );
        tracing::warn!("refused a connection: {why}");
        return Err(refuse(why).await);
    }
    let ns = handshake::nonce();
    let secret = remoting.secret.as_bytes();
    let challenge = Challenge {
        from: remoting.address.to_string(),
        from_uid: remoting.uid,
        nonce: ns.clone(),
        mac: handshake::server_mac(secret, &hello.nonce, &ns, remoting.uid, hello.from_uid),
    };
    reader
        .stream
        .write_all(&wire::encode_challenge(&challenge))
        .await?;
    match reader.next_handshake_frame().await? {
        Some(Frame::Auth(mac)) => {
            let expected =
                handshake::client_mac(secret, &ns, &hello.nonce, hello.from_uid, remoting.uid);
            if !handshake::verify(&expected, &mac) {
                let why =
                    "authentication failed: the peers do not share the same secret".to_string();
                tracing::error!("refused a connection from {peer} at {from}: {why}");
                return Err(refuse(why).await);
            }
        }
        Some(Frame::Refused(why)) => {
            tracing::error!("{peer} at {from} gave up the handshake: {why}");
            return Err(refused(why));
        }
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "no authentication",
            ))
        }
    }
    reader.stream.write_all(&wire::encode_accepted()).await?;
    let assoc = remoting.association(&peer);
    remoting.peer_uid_seen(&assoc, hello.from_uid);
    tracing::debug!(
        "accepted {:?} connection from {peer} (UID {})",
        hello.stream,
        hello.from_uid
    );
    Ok((assoc, hello.from_uid))
}

/// Reads and handles frames until the connection closes or the peer's
/// incarnation is quarantined.
async fn read_frames(
    remoting: &Arc<RemotingShared>,
    assoc: &Arc<Association>,
    peer_uid: u64,
    reader: &mut FrameReader,
) {
    let max = remoting.settings.max_frame_size;
    let mut inbound = remoting.inbound_handler(assoc.clone());
    let mut quarantine = QuarantineCheck::new(peer_uid);
    loop {
        let read = match reader.next(max).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!("inbound connection from {} failed: {e}", assoc.address);
                return;
            }
        };
        match read {
            Read::Frame(s, e) => {
                // The frames already buffered behind this one are handled
                // as one batch: the actors they wake are woken once, at
                // its end (see `deferred_activations`).
                let _batch = DeferActivations::begin();
                // Decoded for this system, set once for the batch: the
                // senders' paths and what receivers decode on the spot are
                // read in it (a nested `with_system` for this system only
                // looks). Left before the batch's actors are woken.
                let quarantined = serde_context::with_system(&remoting.system, || {
                    let mut frame = Some((s, e));
                    let mut handled = 0;
                    while let Some((s, e)) = frame {
                        if quarantine.is_quarantined(remoting) {
                            return true;
                        }
                        inbound.handle(&reader.buf[s..e]);
                        handled += 1;
                        frame = if handled < FRAME_BATCH {
                            reader.next_buffered(max)
                        } else {
                            None
                        };
                    }
                    false
                });
                if quarantined {
                    tracing::debug!(
                        "closing inbound connection of quarantined {} (UID {peer_uid})",
                        assoc.address
                    );
                    return;
                }
            }
            Read::Oversized(len) => remoting.log_bad_input(format_args!(
                "dropped a frame of {len} bytes from {}: larger than max_frame_size ({max} bytes)",
                assoc.address
            )),
            Read::Closed => {
                tracing::debug!("inbound connection from {} closed", assoc.address);
                return;
            }
        }
    }
}
