//! Identifiers: opaque, URL-safe and time-sortable (UUIDv7 text), so that ordering by id follows
//! creation order and an id leaks nothing but its creation time.

use uuid::Uuid;

/// A new session, agent, workspace or attempt id.
pub fn new_id() -> String {
    Uuid::now_v7().to_string()
}

/// True when `s` could be an id we issued; used to answer 404 early without touching storage.
pub fn looks_like_id(s: &str) -> bool {
    s.len() <= 64
        && !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}
