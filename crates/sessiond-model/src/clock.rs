//! Time as the APIs speak it: milliseconds since the Unix epoch, and RFC 3339 strings for the three
//! event fields the seed types as strings.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (the unit of every numeric timestamp sessiond emits).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// RFC 3339 with millisecond precision in UTC, e.g. `2026-11-30T03:56:26.123Z`.
pub fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}
