//! An entity's message on its way to the region of another node, in its
//! wire form: a MessagePack array of the entity id, the shard id, the
//! message's manifest and then the message itself, as its own codec wrote
//! it. The message is written once, straight into the frame, and read in
//! place on the other side (no envelope type with a copy of its bytes).
//!
//! The receiving node's region reads it on the connection's reader (see
//! `RegionShared::receive_remote`); the entity type is the region's own.

/// The manifest of the envelope on the wire.
/// (Version 2: the message in place. Version 1 carried its bytes as a
/// MessagePack `bin` in a four-field array, which this one would misread.)
pub(crate) const MANIFEST: &str = "troupe.sharding.ShardEnvelope.v2";

/// An envelope read in place. Its ids and manifest are left as bytes: the
/// reader looks them up as they are (every key it can find is valid
/// UTF-8), and validates one only when it must make a string of it: a
/// shard new to the reader, an entity not reached directly (inactive, or
/// its shard not open here), a manifest of no registered message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ShardEnvelopeRef<'a> {
    pub(crate) entity: &'a [u8],
    pub(crate) shard: &'a [u8],
    /// The manifest of the message inside.
    pub(crate) manifest: &'a [u8],
    /// The message's own bytes.
    pub(crate) payload: &'a [u8],
}

/// One of an envelope's strings as text, or why it is not.
pub(crate) fn text<'a>(bytes: &'a [u8], what: &str) -> Result<&'a str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("the {what} of a shard envelope: {e}"))
}

/// Writes the envelope of a message for `entity` of `shard` at the end of
/// `buf`; `message` appends the message's bytes (in `manifest`'s form).
#[inline]
pub(crate) fn write(
    buf: &mut Vec<u8>,
    entity: &str,
    shard: &str,
    manifest: &str,
    message: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
) -> Result<(), String> {
    // Writing to a Vec cannot fail.
    rmp::encode::write_array_len(buf, 4).map_err(|e| e.to_string())?;
    rmp::encode::write_str(buf, entity).map_err(|e| e.to_string())?;
    rmp::encode::write_str(buf, shard).map_err(|e| e.to_string())?;
    rmp::encode::write_str(buf, manifest).map_err(|e| e.to_string())?;
    message(buf)
}

/// Reads an envelope from untrusted bytes: an error, never a panic.
#[inline]
pub(crate) fn read(bytes: &[u8]) -> Result<ShardEnvelopeRef<'_>, String> {
    let rest = match bytes.split_first() {
        // A fixarray of 4, as `write` writes it.
        Some((0x94, rest)) => rest,
        _ => {
            let mut rest = bytes;
            let len = rmp::decode::read_array_len(&mut rest)
                .map_err(|e| format!("a shard envelope: {e}"))?;
            if len != 4 {
                return Err(format!("a shard envelope of {len} fields (4 expected)"));
            }
            rest
        }
    };
    let (entity, rest) = read_str(rest, "entity id")?;
    let (shard, rest) = read_str(rest, "shard id")?;
    let (manifest, rest) = read_str(rest, "manifest")?;
    if rest.is_empty() {
        return Err("a shard envelope without its message".into());
    }
    Ok(ShardEnvelopeRef {
        entity,
        shard,
        manifest,
        payload: rest,
    })
}

/// Reads a MessagePack string's bytes (not validated: see
/// `ShardEnvelopeRef`).
#[inline]
fn read_str<'a>(bytes: &'a [u8], what: &str) -> Result<(&'a [u8], &'a [u8]), String> {
    // A fixstr (every id and manifest under 32 bytes) in line; the rest,
    // and every error, in the call below.
    if let Some((&marker, rest)) = bytes.split_first() {
        let len = usize::from(marker & 0x1f);
        if marker & 0xe0 == 0xa0 && rest.len() >= len {
            return Ok(rest.split_at(len));
        }
    }
    read_long_str(bytes, what)
}

/// `read_str` for a string that is not a whole fixstr.
#[cold]
#[inline(never)]
fn read_long_str<'a>(bytes: &'a [u8], what: &str) -> Result<(&'a [u8], &'a [u8]), String> {
    let bad = |e: &dyn std::fmt::Display| format!("the {what} of a shard envelope: {e}");
    let Some((&marker, rest)) = bytes.split_first() else {
        return Err(bad(&"missing"));
    };
    let (len, rest) = match marker {
        0xa0..=0xbf => (usize::from(marker & 0x1f), rest),
        0xd9..=0xdb => {
            let mut at = bytes;
            let len = rmp::decode::read_str_len(&mut at).map_err(|e| bad(&e))?;
            (len as usize, at)
        }
        _ => {
            return Err(bad(&format_args!(
                "a string was expected (marker {marker:#04x})"
            )))
        }
    };
    if rest.len() < len {
        return Err(bad(&format_args!(
            "{len} bytes announced, {} left",
            rest.len()
        )));
    }
    Ok(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn an_envelope_reads_back_what_was_written() {
        let mut buf = vec![9, 9];
        write(&mut buf, "e-1", "17", "bench.Body", |b| {
            b.extend_from_slice(&[0x91, 0x05]);
            Ok(())
        })
        .unwrap();
        let env = read(&buf[2..]).unwrap();
        assert_eq!(
            env,
            ShardEnvelopeRef {
                entity: b"e-1",
                shard: b"17",
                manifest: b"bench.Body",
                payload: &[0x91, 0x05],
            }
        );
    }

    #[test]
    fn long_ids_read_back() {
        // A fixstr's longest, str8, str16 (and rmp's str32 for the rest).
        let manifest = "m".repeat(31);
        let entity = "e".repeat(40);
        let shard = "s".repeat(300);
        let mut buf = Vec::new();
        write(&mut buf, &entity, &shard, &manifest, |b| {
            b.push(0xc0);
            Ok(())
        })
        .unwrap();
        let env = read(&buf).unwrap();
        assert_eq!(
            (env.entity, env.shard, env.manifest, env.payload),
            (
                entity.as_bytes(),
                shard.as_bytes(),
                manifest.as_bytes(),
                &[0xc0][..]
            )
        );
        let mut str32 = vec![0x94, 0xdb, 0, 0, 0, 1, b'e', 0xa1, b's', 0xa1, b'm', 0xc0];
        let env = read(&str32).unwrap();
        assert_eq!((env.entity, env.payload), (&b"e"[..], &[0xc0][..]));
        // A str32 whose length is cut off, and a str8 longer than what is
        // left.
        str32.truncate(2);
        assert!(read(&str32).is_err());
        assert!(read(&[0x94, 0xd9, 9, b'a']).is_err());
        // A fixstr longer than what is left.
        assert!(read(&[0x94, 0xa5, b'a']).is_err());
    }

    #[test]
    fn a_message_that_fails_to_encode_fails_the_envelope() {
        let mut buf = Vec::new();
        let r = write(&mut buf, "e", "s", "m", |_| Err("no".into()));
        assert_eq!(r, Err("no".to_string()));
    }

    #[test]
    fn bad_envelopes_are_errors() {
        assert!(read(&[]).is_err());
        // An array of 3.
        assert!(read(&[0x93, 0xa1, b'a', 0xa1, b'b', 0xa1, b'c']).is_err());
        // Four fields, no message.
        assert!(read(&[0x94, 0xa1, b'a', 0xa1, b'b', 0xa1, b'c']).is_err());
        // A field that is no string.
        assert!(read(&[0x94, 0x01, 0xa1, b'b', 0xa1, b'c', 0xc0]).is_err());
    }

    #[test]
    fn ids_are_validated_only_as_text() {
        // Read as bytes; made text (for a new shard, say), an error.
        let env = read(&[0x94, 0xa1, 0xff, 0xa1, b'b', 0xa1, b'c', 0xc0]).unwrap();
        assert_eq!(env.entity, &[0xff]);
        let e = text(env.entity, "entity id").unwrap_err();
        assert!(e.starts_with("the entity id of a shard envelope: "), "{e}");
        assert_eq!(text(env.shard, "shard id"), Ok("b"));
    }

    proptest! {
        #[test]
        fn any_bytes_read_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = read(&bytes);
        }
    }
}
