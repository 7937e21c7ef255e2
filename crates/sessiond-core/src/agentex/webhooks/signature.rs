//! The signatures of webhook deliveries: which source signed a request, whether its signature
//! was made with a secret, and Slack's replay window. Every check of a signature runs in
//! constant time ([`crate::secret::constant_time_eq`] over the whole MAC).
//!
//! - GitHub: `X-Hub-Signature-256: sha256=<hex>`, HMAC-SHA256 of the raw body.
//! - Slack: `X-Slack-Signature: v0=<hex>`, HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{body}`,
//!   refused when the timestamp is more than five minutes from now (either way).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::error::{Error, Result};
use crate::secret;
use crate::store::webhooks::WebhookSource;

pub const GITHUB_SIGNATURE: &str = "x-hub-signature-256";
pub const SLACK_SIGNATURE: &str = "x-slack-signature";
pub const SLACK_TIMESTAMP: &str = "x-slack-request-timestamp";

/// How far a Slack request's timestamp may be from now, in seconds.
pub const SLACK_WINDOW_SECS: i64 = 5 * 60;

/// A request's signature, as its headers give it.
#[derive(Debug, Clone)]
pub struct Signed {
    pub source: WebhookSource,
    /// The MAC the header carries (`None`: not 64 hex digits, which verifies against nothing).
    mac: Option<[u8; 32]>,
    /// Slack's timestamp, part of what it signs.
    timestamp: Option<i64>,
}

/// The signature headers of a request (absent ones `None`).
pub struct SignatureHeaders<'a> {
    pub github: Option<&'a str>,
    pub slack: Option<&'a str>,
    pub slack_timestamp: Option<&'a str>,
}

fn refused(why: &str) -> Error {
    Error::SignatureRefused(why.to_owned())
}

fn decode_mac(hex: &str) -> Option<[u8; 32]> {
    let bytes = hex.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = [0u8; 32];
    for (i, pair) in bytes.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

/// The signature of a request signed by GitHub or Slack (`now` in seconds since the epoch):
/// 401 `invalid_signature` for an unsigned request and for a Slack request outside its window.
pub fn signed(h: &SignatureHeaders<'_>, now: i64) -> Result<Signed> {
    if let Some(v) = h.github {
        return Ok(Signed {
            source: WebhookSource::Github,
            mac: v.trim().strip_prefix("sha256=").and_then(decode_mac),
            timestamp: None,
        });
    }
    if let Some(v) = h.slack {
        let Some(ts) = h.slack_timestamp else {
            return Err(refused(
                "X-Slack-Request-Timestamp: required with X-Slack-Signature (it is signed too)",
            ));
        };
        let ts: i64 = ts.trim().parse().map_err(|_| {
            refused("X-Slack-Request-Timestamp: must be seconds since the Unix epoch")
        })?;
        if (now - ts).abs() > SLACK_WINDOW_SECS {
            return Err(refused(
                "X-Slack-Request-Timestamp: more than five minutes from the server's time; a \
                 delivery is taken only within five minutes of its signing",
            ));
        }
        return Ok(Signed {
            source: WebhookSource::Slack,
            mac: v.trim().strip_prefix("v0=").and_then(decode_mac),
            timestamp: Some(ts),
        });
    }
    Err(refused(
        "a webhook delivery must be signed: X-Hub-Signature-256 (GitHub) or X-Slack-Signature \
         with X-Slack-Request-Timestamp (Slack)",
    ))
}

impl Signed {
    /// Whether `body` was signed with `key` (constant time in what the MACs hold).
    pub fn verifies(&self, key: &[u8], body: &[u8]) -> bool {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        if let Some(ts) = self.timestamp {
            mac.update(format!("v0:{ts}:").as_bytes());
        }
        mac.update(body);
        let expected = mac.finalize().into_bytes();
        match &self.mac {
            Some(given) => secret::constant_time_eq(&expected, given),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hmac_hex(key: &str, msg: &str) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes()).unwrap();
        mac.update(msg.as_bytes());
        secret::hex(&mac.finalize().into_bytes())
    }

    fn headers<'a>(
        github: Option<&'a str>,
        slack: Option<&'a str>,
        ts: Option<&'a str>,
    ) -> SignatureHeaders<'a> {
        SignatureHeaders {
            github,
            slack,
            slack_timestamp: ts,
        }
    }

    #[test]
    fn github_signs_the_raw_body() {
        // GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!".
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let s = signed(&headers(Some(sig), None, None), 0).unwrap();
        assert_eq!(s.source, WebhookSource::Github);
        assert!(s.verifies(b"It's a Secret to Everybody", b"Hello, World!"));
        assert!(!s.verifies(b"It's a Secret to Everybody", b"Hello, World?"));
        assert!(!s.verifies(b"another secret", b"Hello, World!"));
        for bad in [
            "757107ea",
            "sha1=757107ea0eb2509fc211221cce984b8a37570b6d",
            "sha256=zz",
        ] {
            let s = signed(&headers(Some(bad), None, None), 0).unwrap();
            assert!(!s.verifies(b"It's a Secret to Everybody", b"Hello, World!"));
        }
    }

    #[test]
    fn slack_signs_the_timestamp_and_body_within_five_minutes() {
        let body = r#"{"type":"event_callback"}"#;
        let now = 1_700_000_000;
        let sig = format!(
            "v0={}",
            hmac_hex("slack-secret", &format!("v0:{now}:{body}"))
        );
        let ts = now.to_string();
        let s = signed(&headers(None, Some(&sig), Some(&ts)), now + 299).unwrap();
        assert_eq!(s.source, WebhookSource::Slack);
        assert!(s.verifies(b"slack-secret", body.as_bytes()));
        assert!(!s.verifies(b"slack-secret", b"{}"));
        let other = (now + 1).to_string();
        let s = signed(&headers(None, Some(&sig), Some(&other)), now).unwrap();
        assert!(
            !s.verifies(b"slack-secret", body.as_bytes()),
            "the timestamp is signed"
        );
        for at in [now + 301, now - 301] {
            let e = signed(&headers(None, Some(&sig), Some(&ts)), at).unwrap_err();
            assert_eq!(e.code(), "invalid_signature");
        }
        for ts in [None, Some("yesterday")] {
            let e = signed(&headers(None, Some(&sig), ts), now).unwrap_err();
            assert_eq!(e.code(), "invalid_signature");
        }
    }

    #[test]
    fn an_unsigned_request_is_refused() {
        let e = signed(&headers(None, None, Some("1")), 0).unwrap_err();
        assert_eq!(e.code(), "invalid_signature");
    }
}
