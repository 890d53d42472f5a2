//! The authenticated handshake.
//!
//! Client: preamble, `Hello` (who it is, whom it calls, nonce `nc`).
//! Server: preamble, `Challenge` (who it is, nonce `ns`, and
//! `HMAC(secret, "server" | nc | ns | server uid | client uid)`), or
//! `Refused`. Client: checks the server's MAC, then `Auth` with
//! `HMAC(secret, "client" | ns | nc | client uid | server uid)`. Server:
//! `Accepted` or `Refused`. Each side proves it knows the secret without
//! sending it, and the fresh nonces make a recorded handshake useless.

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Length of a handshake nonce.
pub(crate) const NONCE_LEN: usize = 32;

/// A fresh nonce from the operating system's secure random source (a
/// predictable nonce would let a recorded handshake be replayed).
pub(crate) fn nonce() -> Vec<u8> {
    let mut n = vec![0u8; NONCE_LEN];
    if let Err(e) = getrandom::fill(&mut n) {
        // No secure source: fall back, loudly, rather than refuse to run.
        tracing::error!("the OS random source failed ({e}); handshake nonces are weak");
        let mut rng = fastrand::Rng::new();
        n.iter_mut().for_each(|b| *b = rng.u8(..));
    }
    n
}

fn mac(secret: &[u8], role: &[u8], first: &[u8], second: &[u8], a: u64, b: u64) -> Vec<u8> {
    let mut m = HmacSha256::new_from_slice(secret).expect("HMAC takes keys of any length");
    m.update(role);
    m.update(first);
    m.update(second);
    m.update(&a.to_be_bytes());
    m.update(&b.to_be_bytes());
    m.finalize().into_bytes().to_vec()
}

/// The server's proof.
pub(crate) fn server_mac(
    secret: &[u8],
    nc: &[u8],
    ns: &[u8],
    server_uid: u64,
    client_uid: u64,
) -> Vec<u8> {
    mac(secret, b"server", nc, ns, server_uid, client_uid)
}

/// The client's proof.
pub(crate) fn client_mac(
    secret: &[u8],
    ns: &[u8],
    nc: &[u8],
    client_uid: u64,
    server_uid: u64,
) -> Vec<u8> {
    mac(secret, b"client", ns, nc, client_uid, server_uid)
}

/// Compares a received MAC in constant time.
pub(crate) fn verify(expected: &[u8], got: &[u8]) -> bool {
    expected.len() == got.len()
        && expected
            .iter()
            .zip(got)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_depend_on_every_input() {
        let (nc, ns) = (nonce(), nonce());
        assert_ne!(nc, ns);
        let m = server_mac(b"s", &nc, &ns, 1, 2);
        assert!(verify(&m, &server_mac(b"s", &nc, &ns, 1, 2)));
        assert!(!verify(&m, &server_mac(b"t", &nc, &ns, 1, 2)));
        assert!(!verify(&m, &server_mac(b"s", &ns, &nc, 1, 2)));
        assert!(!verify(&m, &server_mac(b"s", &nc, &ns, 2, 1)));
        assert!(!verify(&m, &client_mac(b"s", &nc, &ns, 1, 2)));
        assert!(!verify(&m, &m[..31]));
    }
}
