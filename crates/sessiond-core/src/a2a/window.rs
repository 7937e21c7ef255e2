//! The readings of a session's newest events, kept from one task view to the next.
//!
//! A task view is the fold of the session's newest [`VIEW_EVENTS`] events. Folding them again
//! for every `SendMessage` would read and parse the whole window each time, so that a message
//! to a task costs more the longer the task has run. The timeline is append-only (a session's
//! events are only ever added after its last seq, or deleted with the session), so a window
//! read once stays true: the next view reads only the events after its last seq, appends their
//! readings and drops the oldest past the window. What a view shows is exactly what folding the
//! newest events afresh would show; this is a cache of parsed events, never a second record.
//!
//! Windows are keyed by the session's row and id (a deleted session's row number may come back
//! with another id) and kept while their texts fit in [`MAX_BYTES`], the least recently used
//! dropped first. A window is taken out of the cache while a view extends it, so two views of
//! one session at once each read for themselves, and the one that read further is kept.

use std::collections::{HashMap, VecDeque};
use std::sync::{LazyLock, Mutex};

use serde_json::value::RawValue;

use super::reading::{self, Reading};

/// How many of a session's newest events a task view reads (its history is at most these).
pub const VIEW_EVENTS: u32 = 500;
use crate::store::StoredEvent;

/// What the cache may hold of texts, in bytes, across sessions.
const MAX_BYTES: usize = 32 << 20;

/// The bytes an event costs besides its text.
const EVENT_BYTES: usize = 64;

/// One event as a task reads it, with what it adds to the task already written as JSON (a view
/// of many events copies these instead of building and serializing them again).
pub struct Read {
    pub seq: u64,
    pub created_at: i64,
    pub reading: Reading,
    /// The history `Message` it is, if any.
    pub message: Option<Box<RawValue>>,
    /// The `Artifact` it is, if any.
    pub artifact: Option<Box<RawValue>>,
}

impl Read {
    fn bytes(&self) -> usize {
        let raw = |r: &Option<Box<RawValue>>| r.as_ref().map_or(0, |r| r.get().len());
        EVENT_BYTES + self.reading.text_len() + raw(&self.message) + raw(&self.artifact)
    }
}

/// A session's newest events, read.
pub struct Window {
    session_id: String,
    last_seq: u64,
    events: VecDeque<Read>,
    bytes: usize,
}

impl Window {
    pub fn new(session_id: &str) -> Window {
        Window {
            session_id: session_id.to_owned(),
            last_seq: 0,
            events: VecDeque::new(),
            bytes: 0,
        }
    }

    /// The seq of the newest event read (0 before any).
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Adds events newer than the window (ascending), keeping the newest [`VIEW_EVENTS`].
    pub fn extend(&mut self, events: &[StoredEvent]) {
        for e in events {
            if e.seq <= self.last_seq {
                continue;
            }
            let reading = serde_json::from_str(&e.body)
                .map(|v| reading::read(&v))
                .unwrap_or(Reading::Nothing);
            let (message, artifact) = reading::rendered(&self.session_id, e.seq, &reading);
            let read = Read {
                seq: e.seq,
                created_at: e.created_at,
                reading,
                message,
                artifact,
            };
            self.bytes += read.bytes();
            self.events.push_back(read);
            self.last_seq = e.seq;
        }
        while self.events.len() > VIEW_EVENTS as usize {
            if let Some(old) = self.events.pop_front() {
                self.bytes -= old.bytes();
            }
        }
    }

    /// The events read, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &Read> {
        self.events.iter()
    }
}

struct Cache {
    windows: HashMap<i64, (Window, u64)>,
    bytes: usize,
    clock: u64,
}

static CACHE: LazyLock<Mutex<Cache>> = LazyLock::new(|| {
    Mutex::new(Cache {
        windows: HashMap::new(),
        bytes: 0,
        clock: 0,
    })
});

fn cache() -> std::sync::MutexGuard<'static, Cache> {
    // A panic while holding the lock leaves only a cache behind: still usable.
    CACHE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The window of session `pk` (named `session_id`) kept by an earlier view, taken out of the
/// cache; `None` when there is none.
pub fn take(pk: i64, session_id: &str) -> Option<Window> {
    let mut c = cache();
    let (w, _) = c.windows.remove(&pk)?;
    c.bytes -= w.bytes;
    (w.session_id == session_id).then_some(w)
}

/// Keeps `w` for the next view of session `pk`: the one that read further when another view
/// put one back meanwhile; the least recently used dropped while the cache holds too much.
pub fn put(pk: i64, w: Window) {
    let mut c = cache();
    c.clock += 1;
    let used = c.clock;
    if let Some((kept, _)) = c.windows.get(&pk)
        && kept.session_id == w.session_id
        && kept.last_seq >= w.last_seq
    {
        return;
    }
    c.bytes += w.bytes;
    if let Some((old, _)) = c.windows.insert(pk, (w, used)) {
        c.bytes -= old.bytes;
    }
    while c.bytes > MAX_BYTES {
        let Some(oldest) = c
            .windows
            .iter()
            .min_by_key(|(_, (_, u))| *u)
            .map(|(k, _)| *k)
        else {
            break;
        };
        if let Some((gone, _)) = c.windows.remove(&oldest) {
            c.bytes -= gone.bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, body: &str) -> StoredEvent {
        StoredEvent {
            seq,
            created_at: seq as i64,
            event_type: String::new(),
            body: body.to_owned(),
        }
    }

    #[test]
    fn a_window_keeps_the_newest_events_once_each() {
        let mut w = Window::new("s");
        let prompt = |seq| event(seq, r#"{"type":"prompt_submitted","prompt":"hi"}"#);
        w.extend(&[prompt(1), prompt(2)]);
        // A read that overlaps what the window holds adds only what is newer.
        w.extend(&[prompt(2), prompt(3)]);
        assert_eq!(w.events().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3]);
        let many: Vec<_> = (4..=VIEW_EVENTS as u64 + 10).map(prompt).collect();
        w.extend(&many);
        assert_eq!(w.events().count(), VIEW_EVENTS as usize);
        assert_eq!(w.events().next().map(|r| r.seq), Some(11));
        assert_eq!(w.last_seq(), VIEW_EVENTS as u64 + 10);
        let message_bytes = w
            .events()
            .map(|r| r.message.as_ref().map_or(0, |m| m.get().len()));
        assert_eq!(
            w.bytes,
            VIEW_EVENTS as usize * (EVENT_BYTES + 2) + message_bytes.sum::<usize>()
        );
        assert!(
            w.events()
                .all(|r| r.message.is_some() && r.artifact.is_none())
        );
    }

    #[test]
    fn the_cache_keeps_the_window_that_read_further_and_knows_the_session() {
        let pk = -7_001;
        let mut ahead = Window::new("a");
        ahead.extend(&[event(1, "{}"), event(2, "{}")]);
        let mut behind = Window::new("a");
        behind.extend(&[event(1, "{}")]);
        put(pk, ahead);
        put(pk, behind);
        assert_eq!(take(pk, "a").map(|w| w.last_seq()), Some(2));
        assert!(take(pk, "a").is_none(), "taken out");
        put(pk, Window::new("a"));
        assert!(take(pk, "b").is_none(), "another session on the same row");
        assert!(take(pk, "a").is_none(), "dropped with the mismatch");
    }
}
