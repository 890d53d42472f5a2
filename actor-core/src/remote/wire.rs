//! The wire format: a connection starts with a 4-byte preamble (`TRP` and
//! the protocol version), then carries frames. A frame is a 4-byte
//! big-endian length and a body: one tag byte and a MessagePack value.
//!
//! Every decoder here takes untrusted bytes: a bad frame is an error value,
//! never a panic (see the property test at the end).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Bumped on any incompatible change of the frames below.
pub(crate) const PROTOCOL_VERSION: u8 = 1;
/// What every connection starts with, in both directions.
pub(crate) const PREAMBLE: [u8; 4] = [b'T', b'R', b'P', PROTOCOL_VERSION];

const TAG_HELLO: u8 = 1;
const TAG_CHALLENGE: u8 = 2;
const TAG_AUTH: u8 = 3;
const TAG_ACCEPTED: u8 = 4;
const TAG_REFUSED: u8 = 5;
const TAG_MSG: u8 = 6;
const TAG_REPLY: u8 = 7;
const TAG_SYS: u8 = 8;
const TAG_SYS_ACK: u8 = 9;
const TAG_HEARTBEAT: u8 = 10;
const TAG_HEARTBEAT_RSP: u8 = 11;

/// Which of the two connections to a peer a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Stream {
    /// Heartbeats, system messages and messages registered as control.
    Control,
    /// Everything else.
    Ordinary,
}

/// Client -> server: who is calling, and a fresh challenge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub(crate) stream: Stream,
    pub(crate) from: String,
    pub(crate) from_uid: u64,
    pub(crate) to: String,
    #[serde(with = "serde_bytes")]
    pub(crate) nonce: Vec<u8>,
}

/// Server -> client: who answers, its proof, and its own challenge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Challenge {
    pub(crate) from: String,
    pub(crate) from_uid: u64,
    #[serde(with = "serde_bytes")]
    pub(crate) nonce: Vec<u8>,
    #[serde(with = "serde_bytes")]
    pub(crate) mac: Vec<u8>,
}

/// A user message. Borrowed from the frame buffer when decoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct UserMsg<'a> {
    /// The recipient's path in the receiving system, e.g. `/user/a`.
    pub(crate) to: &'a str,
    /// The recipient's uid, 0 for any incarnation.
    pub(crate) to_uid: u64,
    /// The sender's full path (`tell_from`), empty for none.
    pub(crate) from: &'a str,
    pub(crate) manifest: &'a str,
    /// Non-zero for an ask: the id the reply refers to.
    pub(crate) ask: u64,
    #[serde(with = "serde_bytes")]
    pub(crate) payload: &'a [u8],
}

/// The answer to an ask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum ReplyBody<'a> {
    /// The reply, encoded with the reply type's codec.
    Ok(#[serde(with = "serde_bytes")] &'a [u8]),
    /// Why there is no reply.
    Err(String),
}

/// A message for the remoting layer itself, delivered reliably and in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum SysMsg {
    /// The sender's node watches the actor at `path`.
    Watch { path: String, uid: u64 },
    /// The sender's node no longer watches it.
    Unwatch { path: String, uid: u64 },
    /// The actor the receiver's node watched has stopped.
    DeathWatchNotification {
        path: String,
        uid: u64,
        reason: String,
    },
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame<'a> {
    Hello(Hello),
    Challenge(Challenge),
    Auth(Vec<u8>),
    Accepted,
    Refused(String),
    Msg(UserMsg<'a>),
    Reply { ask: u64, body: ReplyBody<'a> },
    Sys { seq: u64, msg: SysMsg },
    SysAck { seq: u64 },
    Heartbeat,
    HeartbeatRsp { uid: u64 },
}

/// Why a frame could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError(pub(crate) String);

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn de<'a, T: Deserialize<'a>>(what: &str, bytes: &'a [u8]) -> Result<T, DecodeError> {
    rmp_serde::from_slice(bytes).map_err(|e| DecodeError(format!("bad {what} frame: {e}")))
}

/// Decodes a frame body (without its length prefix).
pub(crate) fn decode(body: &[u8]) -> Result<Frame<'_>, DecodeError> {
    let (&tag, rest) = body
        .split_first()
        .ok_or_else(|| DecodeError("empty frame".into()))?;
    Ok(match tag {
        TAG_HELLO => Frame::Hello(de("hello", rest)?),
        TAG_CHALLENGE => Frame::Challenge(de("challenge", rest)?),
        TAG_AUTH => Frame::Auth(de::<serde_bytes::ByteBuf>("auth", rest)?.into_vec()),
        TAG_ACCEPTED => Frame::Accepted,
        TAG_REFUSED => Frame::Refused(de("refused", rest)?),
        TAG_MSG => Frame::Msg(de("message", rest)?),
        TAG_REPLY => {
            let (ask, body) = de("reply", rest)?;
            Frame::Reply { ask, body }
        }
        TAG_SYS => {
            let (seq, msg) = de("system message", rest)?;
            Frame::Sys { seq, msg }
        }
        TAG_SYS_ACK => Frame::SysAck {
            seq: de("system ack", rest)?,
        },
        TAG_HEARTBEAT => Frame::Heartbeat,
        TAG_HEARTBEAT_RSP => Frame::HeartbeatRsp {
            uid: de("heartbeat response", rest)?,
        },
        other => return Err(DecodeError(format!("unknown frame tag {other}"))),
    })
}

/// Builds one frame (length prefix, tag, body) in a buffer.
pub(crate) struct FrameBuf {
    buf: Vec<u8>,
}

impl FrameBuf {
    fn start(tag: u8, capacity: usize) -> Self {
        let mut buf = Vec::with_capacity(capacity + 5);
        buf.extend_from_slice(&[0, 0, 0, 0, tag]);
        FrameBuf { buf }
    }

    /// The finished frame, length prefix filled in.
    fn finish(mut self) -> Vec<u8> {
        let len = (self.buf.len() - 4) as u32;
        self.buf[..4].copy_from_slice(&len.to_be_bytes());
        self.buf
    }

    fn with<T: Serialize + ?Sized>(tag: u8, value: &T) -> Vec<u8> {
        let mut f = FrameBuf::start(tag, 64);
        // Writing to a Vec cannot fail, and these values are plain data.
        rmp_serde::encode::write(&mut f.buf, value).expect("encoding a protocol frame");
        f.finish()
    }
}

/// The payload size a message frame's buffer starts with room for.
const SMALL_PAYLOAD: usize = 192;

/// Encodes a user message frame, writing the payload straight into the
/// frame with `write_payload` (no intermediate buffer).
pub(crate) fn encode_msg<E>(
    to: &str,
    to_uid: u64,
    from: &str,
    manifest: &str,
    ask: u64,
    write_payload: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<Vec<u8>, E> {
    // Room for the header and a small payload: most messages then need no
    // second allocation (a realloc and a copy) when their bytes go in.
    let mut f = FrameBuf::start(
        TAG_MSG,
        48 + to.len() + from.len() + manifest.len() + SMALL_PAYLOAD,
    );
    let b = &mut f.buf;
    // The same layout rmp-serde gives `UserMsg` (a struct as an array).
    rmp::encode::write_array_len(b, 6).expect("vec write");
    rmp::encode::write_str(b, to).expect("vec write");
    rmp::encode::write_uint(b, to_uid).expect("vec write");
    rmp::encode::write_str(b, from).expect("vec write");
    rmp::encode::write_str(b, manifest).expect("vec write");
    rmp::encode::write_uint(b, ask).expect("vec write");
    // bin32 header patched once the payload's length is known.
    b.push(0xc6);
    let len_at = b.len();
    b.extend_from_slice(&[0; 4]);
    write_payload(b)?;
    let payload_len = (b.len() - len_at - 4) as u32;
    b[len_at..len_at + 4].copy_from_slice(&payload_len.to_be_bytes());
    Ok(f.finish())
}

pub(crate) fn encode_hello(h: &Hello) -> Vec<u8> {
    FrameBuf::with(TAG_HELLO, h)
}
pub(crate) fn encode_challenge(c: &Challenge) -> Vec<u8> {
    FrameBuf::with(TAG_CHALLENGE, c)
}
pub(crate) fn encode_auth(mac: &[u8]) -> Vec<u8> {
    FrameBuf::with(TAG_AUTH, serde_bytes::Bytes::new(mac))
}
pub(crate) fn encode_accepted() -> Vec<u8> {
    FrameBuf::start(TAG_ACCEPTED, 0).finish()
}
pub(crate) fn encode_refused(reason: &str) -> Vec<u8> {
    FrameBuf::with(TAG_REFUSED, reason)
}
pub(crate) fn encode_reply(ask: u64, body: &ReplyBody<'_>) -> Vec<u8> {
    FrameBuf::with(TAG_REPLY, &(ask, body))
}
pub(crate) fn encode_sys(seq: u64, msg: &SysMsg) -> Vec<u8> {
    FrameBuf::with(TAG_SYS, &(seq, msg))
}
pub(crate) fn encode_sys_ack(seq: u64) -> Vec<u8> {
    FrameBuf::with(TAG_SYS_ACK, &seq)
}
pub(crate) fn encode_heartbeat() -> Vec<u8> {
    FrameBuf::start(TAG_HEARTBEAT, 0).finish()
}
pub(crate) fn encode_heartbeat_rsp(uid: u64) -> Vec<u8> {
    FrameBuf::with(TAG_HEARTBEAT_RSP, &uid)
}

/// Splits complete frames off the front of a read buffer.
///
/// Returns the body range of the next complete frame, `Ok(None)` if more
/// bytes are needed, or an error for a frame over `max` bytes.
pub(crate) fn next_frame(buf: &[u8], max: usize) -> Result<Option<(usize, usize)>, usize> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > max {
        return Err(len);
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some((4, 4 + len)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn body(frame: &[u8]) -> &[u8] {
        let (s, e) = next_frame(frame, usize::MAX).unwrap().unwrap();
        assert_eq!(e, frame.len());
        &frame[s..e]
    }

    #[test]
    fn frames_round_trip() {
        let hello = Hello {
            stream: Stream::Control,
            from: "troupe://a@h:1".into(),
            from_uid: 7,
            to: "troupe://b@h:2".into(),
            nonce: vec![1; 32],
        };
        assert_eq!(
            decode(body(&encode_hello(&hello))).unwrap(),
            Frame::Hello(hello)
        );
        let m = encode_msg::<()>("/user/x", 9, "troupe://a@h:1/user/s#2", "m::M", 3, |b| {
            b.extend_from_slice(b"abc");
            Ok(())
        })
        .unwrap();
        assert_eq!(
            decode(body(&m)).unwrap(),
            Frame::Msg(UserMsg {
                to: "/user/x",
                to_uid: 9,
                from: "troupe://a@h:1/user/s#2",
                manifest: "m::M",
                ask: 3,
                payload: b"abc"
            })
        );
        let sys = SysMsg::DeathWatchNotification {
            path: "/user/x".into(),
            uid: 1,
            reason: "stopped".into(),
        };
        assert_eq!(
            decode(body(&encode_sys(5, &sys))).unwrap(),
            Frame::Sys { seq: 5, msg: sys }
        );
        assert_eq!(
            decode(body(&encode_reply(4, &ReplyBody::Ok(b"r")))).unwrap(),
            Frame::Reply {
                ask: 4,
                body: ReplyBody::Ok(b"r")
            }
        );
        assert_eq!(
            decode(body(&encode_auth(&[9; 32]))).unwrap(),
            Frame::Auth(vec![9; 32])
        );
        assert_eq!(
            decode(body(&encode_sys_ack(8))).unwrap(),
            Frame::SysAck { seq: 8 }
        );
        assert_eq!(decode(body(&encode_heartbeat())).unwrap(), Frame::Heartbeat);
        assert_eq!(
            decode(body(&encode_heartbeat_rsp(3))).unwrap(),
            Frame::HeartbeatRsp { uid: 3 }
        );
        assert_eq!(
            decode(body(&encode_refused("no"))).unwrap(),
            Frame::Refused("no".into())
        );
        assert_eq!(decode(body(&encode_accepted())).unwrap(), Frame::Accepted);
    }

    #[test]
    fn oversized_and_partial_frames() {
        assert_eq!(next_frame(&[0, 0, 1], 10), Ok(None));
        assert_eq!(next_frame(&[0, 0, 0, 11], 10), Err(11));
        assert_eq!(next_frame(&[0, 0, 0, 2, 1], 10), Ok(None));
        assert_eq!(next_frame(&[0, 0, 0, 1, 1, 9], 10), Ok(Some((4, 5))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Random bytes never panic the frame splitter or the decoder.
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = next_frame(&bytes, 1 << 20);
            let _ = decode(&bytes);
        }

        /// Valid frames with random corruption never panic either.
        #[test]
        fn corrupted_frames_never_panic(
            flip in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut f = encode_msg::<()>("/user/a", 1, "", "x::Y", 0, |b| { b.extend_from_slice(&payload); Ok(()) }).unwrap();
            for (i, v) in flip {
                let i = i.index(f.len());
                f[i] = v;
            }
            let _ = decode(&f[4..]);
        }
    }
}
