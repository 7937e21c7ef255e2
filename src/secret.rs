//! Secrets: random tokens, their stored hashes and constant-time comparison.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
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

#[cfg(test)]
mod tests {
    use super::*;

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
