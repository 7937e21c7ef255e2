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
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
