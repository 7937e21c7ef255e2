//! Shared pieces of the agent platform API's JSON: times and stored JSON documents.

use serde_json::Value;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::clock;
use crate::error::{Error, Result};

/// A stored time (ms since the epoch) as the contract's `date-time` string.
pub fn time(ms: i64) -> Value {
    Value::String(clock::rfc3339(ms))
}

pub fn time_opt(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, time)
}

/// A span time (µs since the epoch), RFC 3339 with microseconds.
pub fn micros_time(us: i64) -> Value {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(us.max(0) as u64);
    Value::String(humantime::format_rfc3339_micros(t).to_string())
}

/// Parses a client's `date-time` (RFC 3339; without an offset it is read as UTC, like Python's
/// naive `isoformat()`), into µs since the epoch.
pub fn parse_micros(field: &str, text: &str) -> Result<i64> {
    let parsed = OffsetDateTime::parse(text, &Rfc3339)
        .or_else(|_| OffsetDateTime::parse(&format!("{text}Z"), &Rfc3339));
    match parsed {
        Ok(t) => {
            let us = t.unix_timestamp_nanos() / 1000;
            i64::try_from(us)
                .ok()
                .filter(|us| *us >= 0)
                .ok_or_else(|| Error::invalid(format!("{field}: out of range")))
        }
        Err(_) => Err(Error::invalid(format!(
            "{field}: not an RFC 3339 date-time ({text:?})"
        ))),
    }
}

/// A stored JSON document (or null).
pub fn document(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_times_parse_with_and_without_offsets() {
        let z = parse_micros("t", "2026-01-02T03:04:05.123456Z").unwrap();
        assert_eq!(
            parse_micros("t", "2026-01-02T03:04:05.123456+00:00").unwrap(),
            z
        );
        assert_eq!(parse_micros("t", "2026-01-02T03:04:05.123456").unwrap(), z);
        assert_eq!(
            parse_micros("t", "2026-01-02T05:04:05.123456+02:00").unwrap(),
            z
        );
        assert_eq!(micros_time(z), "2026-01-02T03:04:05.123456Z");
        assert!(parse_micros("t", "yesterday").is_err());
    }
}
