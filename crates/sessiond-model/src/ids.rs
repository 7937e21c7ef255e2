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

/// This process among the processes that share one database (its runner id): the host name, the
/// process id and a random suffix (a pid is reused; a restarted process is a new runner). Shown in
/// `/healthz`, recorded with the turns this process runs, and the origin of its notices to the
/// other processes.
pub fn process_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let suffix = &Uuid::new_v4().simple().to_string()[..6];
        format!("{}-{}-{suffix}", host_name(), std::process::id())
    })
}

fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        .take(64)
        .collect();
    if name.is_empty() {
        "sessiond".into()
    } else {
        name
    }
}
