//! Standard Webhooks signing: `webhook-signature: v1,<base64 HMAC-SHA256 of "id.timestamp.body">`
//! keyed by the bytes of a `whsec_<base64>` secret. During a secret rotation's overlap a delivery
//! carries one signature per live secret, space-separated, as the specification allows, so a
//! receiver holding either the old or the new secret verifies it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::hmac;

use crate::error::{Error, Result};

/// The prefix every outbound webhook secret carries.
pub const SECRET_PREFIX: &str = "whsec_";

/// A new secret: `whsec_` and the base64 of 32 random bytes (256 bits, the HMAC-SHA256 key size).
pub fn new_secret() -> Result<String> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
    Ok(format!("{SECRET_PREFIX}{}", STANDARD.encode(key)))
}

/// The HMAC key a `whsec_` secret stands for; `None` for anything that is not one.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    let b64 = secret.strip_prefix(SECRET_PREFIX)?;
    let key = STANDARD.decode(b64).ok()?;
    (!key.is_empty()).then_some(key)
}

/// One `v1,<base64>` signature of `id.timestamp.body` under `key`.
pub fn sign(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut ctx = hmac::Context::with_key(&key);
    ctx.update(id.as_bytes());
    ctx.update(b".");
    ctx.update(timestamp.to_string().as_bytes());
    ctx.update(b".");
    ctx.update(body);
    format!("v1,{}", STANDARD.encode(ctx.sign().as_ref()))
}

/// The `webhook-signature` header value: one signature per key, space-separated (the current
/// secret first, then the one being rotated out while its overlap lasts).
pub fn signature_header(keys: &[Vec<u8>], id: &str, timestamp: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|k| sign(k, id, timestamp, body))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example published with the Standard Webhooks reference libraries.
    #[test]
    fn matches_the_reference_vector() {
        let key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign(
            &key,
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn new_secrets_parse_and_differ() {
        let a = new_secret().unwrap();
        let b = new_secret().unwrap();
        assert!(a.starts_with(SECRET_PREFIX));
        assert_ne!(a, b);
        assert_eq!(secret_key(&a).unwrap().len(), 32);
    }

    #[test]
    fn rejects_what_is_not_a_secret() {
        assert!(secret_key("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_none());
        assert!(secret_key("whsec_").is_none());
        assert!(secret_key("whsec_!!!").is_none());
    }

    #[test]
    fn rotation_overlap_carries_both_signatures() {
        let old = secret_key(&new_secret().unwrap()).unwrap();
        let new = secret_key(&new_secret().unwrap()).unwrap();
        let header = signature_header(&[new.clone(), old.clone()], "msg_1", 1, b"{}");
        let parts: Vec<&str> = header.split(' ').collect();
        assert_eq!(
            parts,
            [sign(&new, "msg_1", 1, b"{}"), sign(&old, "msg_1", 1, b"{}")]
        );
    }
}
