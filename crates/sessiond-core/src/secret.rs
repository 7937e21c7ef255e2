//! Secrets: random tokens, their stored hashes, constant-time comparison, and [`Sealer`] for the
//! few secrets sessiond must use again whole.

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// A random token of `bytes` bytes (at least 16, i.e. 128 bits), URL-safe.
pub fn random_token(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes.max(16)];
    getrandom::fill(&mut buf).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
    Ok(URL_SAFE_NO_PAD.encode(buf))
}

/// What is stored in place of a token: its SHA-256, hex.
pub fn token_hash(token: &str) -> String {
    hex(&Sha256::digest(token.as_bytes()))
}

/// Lower-case hex of `bytes` (hashes, ids).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

/// Compares without an early exit, so timing says nothing about where two values differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Seals a secret that sessiond must use again whole, where a hash would not do (a webhook's
/// signing secret: HMAC verification needs it): ChaCha20-Poly1305 under a key derived from the
/// server's secret material, a fresh random nonce each time, and `context` (the row it belongs
/// to) as associated data, so a sealed value moved to another row does not open.
#[derive(Clone)]
pub struct Sealer {
    key: Arc<LessSafeKey>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

/// What every sealed value starts with (the scheme, should it ever change).
const SEALED_PREFIX: &str = "v1.";

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Sealer {
        let key = UnboundKey::new(&CHACHA20_POLY1305, key)
            .unwrap_or_else(|_| unreachable!("ChaCha20-Poly1305 takes 32-byte keys"));
        Sealer {
            key: Arc::new(LessSafeKey::new(key)),
        }
    }

    /// `v1.` and the nonce, ciphertext and tag, URL-safe base64.
    pub fn seal(&self, plaintext: &[u8], context: &str) -> Result<String> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
        let mut sealed = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(context.as_bytes()),
                &mut sealed,
            )
            .map_err(|_| Error::Internal("cannot seal a secret".into()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&sealed);
        Ok(format!("{SEALED_PREFIX}{}", URL_SAFE_NO_PAD.encode(out)))
    }

    /// The plaintext of what [`Sealer::seal`] made with this key and `context`; `None` for
    /// anything else (another key, another context, a damaged value).
    pub fn open(&self, sealed: &str, context: &str) -> Option<Vec<u8>> {
        let bytes = URL_SAFE_NO_PAD
            .decode(sealed.strip_prefix(SEALED_PREFIX)?)
            .ok()?;
        if bytes.len() < NONCE_LEN {
            return None;
        }
        let (nonce, rest) = bytes.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut rest = rest.to_vec();
        let plain = self
            .key
            .open_in_place(nonce, Aad::from(context.as_bytes()), &mut rest)
            .ok()?;
        Some(plain.to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_secrets_open_only_with_their_key_and_context() {
        let sealer = Sealer::new(&[7u8; 32]);
        let sealed = sealer.seal(b"whsec-123", "row-1").unwrap();
        assert!(sealed.starts_with("v1."));
        assert!(!sealed.contains("whsec"));
        assert_eq!(
            sealer.open(&sealed, "row-1").as_deref(),
            Some(&b"whsec-123"[..])
        );
        assert_ne!(
            sealer.seal(b"whsec-123", "row-1").unwrap(),
            sealed,
            "fresh nonces"
        );
        assert_eq!(sealer.open(&sealed, "row-2"), None);
        assert_eq!(Sealer::new(&[8u8; 32]).open(&sealed, "row-1"), None);
        let mut damaged = sealed.clone();
        damaged.pop();
        damaged.push(if sealed.ends_with('A') { 'B' } else { 'A' });
        assert_eq!(sealer.open(&damaged, "row-1"), None);
        assert_eq!(sealer.open("v1.", "row-1"), None);
        assert_eq!(sealer.open("whsec-123", "row-1"), None);
        assert_eq!(format!("{sealer:?}"), "Sealer(..)");
    }

    #[test]
    fn hex_is_lower_case_two_digits_a_byte() {
        assert_eq!(hex(&[0x00, 0x0f, 0xa5, 0xff]), "000fa5ff");
        assert_eq!(
            token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn tokens_are_long_and_distinct() {
        let a = random_token(32).unwrap();
        let b = random_token(32).unwrap();
        assert_ne!(a, b);
        assert!(a.len() >= 43);
        assert!(constant_time_eq(
            token_hash(&a).as_bytes(),
            token_hash(&a).as_bytes()
        ));
        assert!(!constant_time_eq(
            token_hash(&a).as_bytes(),
            token_hash(&b).as_bytes()
        ));
    }
}
