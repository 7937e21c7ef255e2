//! MCP sessions (`Mcp-Session-Id`) and the messages of their SSE streams, kept so that a client
//! that lost a stream resumes it with `Last-Event-ID` (the Streamable HTTP transport's
//! resumability).
//!
//! This is process-local state, like the bus's live tail: an MCP session lives in the process
//! that answered its `initialize` (behind several processes, route a session's requests to one,
//! e.g. by the `Mcp-Session-Id` header). Nothing here is a fact of a session: the timeline holds
//! those, and what a lost MCP session had subscribed to is subscribed again by a new one.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::clock;

/// Most MCP sessions one process holds; an `initialize` past it first drops idle ones.
pub const MAX_SESSIONS: usize = 4096;
/// An MCP session unused this long is dropped (its id then answers 404, and the client starts a
/// new one, as the transport says).
pub const IDLE_MS: i64 = 60 * 60 * 1000;
/// Messages a request's stream keeps for a resume, and the standalone (GET) stream's window.
pub const STREAM_CAP: usize = 10_000;
pub const STANDALONE_CAP: usize = 1000;
/// Finished request streams an MCP session keeps for a late resume.
pub const KEPT_STREAMS: usize = 64;
/// Sessions one MCP session may subscribe to at once (each holds a place on the bus).
pub const MAX_SUBSCRIPTIONS: usize = 256;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every MCP session of this process.
#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Arc<McpSession>>>,
}

impl Registry {
    /// A new MCP session for `owner` (see [`McpSession::owner`]); `None` when this process holds
    /// [`MAX_SESSIONS`] sessions in use.
    pub fn open(&self, owner: String, version: &str) -> Option<Arc<McpSession>> {
        // Unguessable, though an id alone reaches nothing: its owner must come with it.
        let id = crate::secret::random_token(16).ok()?;
        let mut map = lock(&self.sessions);
        if map.len() >= MAX_SESSIONS {
            let now = clock::now_ms();
            map.retain(|_, s| now - s.touched.load(Ordering::Relaxed) < IDLE_MS);
            if map.len() >= MAX_SESSIONS {
                return None;
            }
        }
        let session = Arc::new(McpSession {
            id,
            owner,
            version: version.to_owned(),
            touched: AtomicI64::new(clock::now_ms()),
            standalone: Arc::new(StreamLog::new(0, STANDALONE_CAP)),
            streams: Mutex::new(VecDeque::new()),
            next_stream: AtomicU64::new(1),
            subscriptions: Mutex::new(HashMap::new()),
        });
        map.insert(session.id.clone(), Arc::clone(&session));
        Some(session)
    }

    /// The session `id` if `owner` opened it (another credential's session is not found).
    pub fn get(&self, id: &str, owner: &str) -> Option<Arc<McpSession>> {
        let mut map = lock(&self.sessions);
        let found = map.get(id).cloned()?;
        let now = clock::now_ms();
        if now - found.touched.load(Ordering::Relaxed) >= IDLE_MS {
            map.remove(id);
            return None;
        }
        if found.owner != owner {
            return None;
        }
        found.touched.store(now, Ordering::Relaxed);
        Some(found)
    }

    /// Ends the session `id` of `owner` (`DELETE /mcp`); false when there is none.
    pub fn close(&self, id: &str, owner: &str) -> bool {
        let mut map = lock(&self.sessions);
        match map.get(id) {
            Some(s) if s.owner == owner => {
                map.remove(id);
                true
            }
            _ => false,
        }
    }
}

/// One MCP session: the protocol version it negotiated, its resource subscriptions and its
/// streams' messages.
pub struct McpSession {
    pub id: String,
    /// The workspace and credential that opened it: only they may use it.
    owner: String,
    pub version: String,
    touched: AtomicI64,
    /// The stream `GET /mcp` opens: server notifications outside any request.
    standalone: Arc<StreamLog>,
    streams: Mutex<VecDeque<Arc<StreamLog>>>,
    next_stream: AtomicU64,
    /// Subscribed session ids and the tasks that turn their new events into notifications.
    subscriptions: Mutex<HashMap<String, AbortHandle>>,
}

impl McpSession {
    pub fn standalone(&self) -> Arc<StreamLog> {
        Arc::clone(&self.standalone)
    }

    /// A new stream for one request's answer (an SSE response to a POST).
    pub fn new_stream(&self) -> Arc<StreamLog> {
        let number = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let log = Arc::new(StreamLog::new(number, STREAM_CAP));
        let mut streams = lock(&self.streams);
        if streams.len() >= KEPT_STREAMS
            && let Some(i) = streams.iter().position(|s| s.is_done())
        {
            streams.remove(i);
        }
        streams.push_back(Arc::clone(&log));
        log
    }

    /// The stream a `Last-Event-ID` names, if this session still has it.
    pub fn stream(&self, number: u64) -> Option<Arc<StreamLog>> {
        if number == 0 {
            return Some(self.standalone());
        }
        lock(&self.streams)
            .iter()
            .find(|s| s.number == number)
            .cloned()
    }

    /// Records a subscription's task; false (and the task is stopped) when `session_id` was
    /// subscribed already.
    pub fn add_subscription(&self, session_id: &str, task: AbortHandle) -> bool {
        let mut subs = lock(&self.subscriptions);
        if subs.contains_key(session_id) {
            task.abort();
            return false;
        }
        subs.insert(session_id.to_owned(), task);
        true
    }

    pub fn is_subscribed(&self, session_id: &str) -> bool {
        lock(&self.subscriptions).contains_key(session_id)
    }

    /// Whether another subscription fits ([`MAX_SUBSCRIPTIONS`]).
    pub fn may_subscribe(&self) -> bool {
        lock(&self.subscriptions).len() < MAX_SUBSCRIPTIONS
    }

    /// Ends a subscription; false when there was none.
    pub fn remove_subscription(&self, session_id: &str) -> bool {
        match lock(&self.subscriptions).remove(session_id) {
            Some(task) => {
                task.abort();
                true
            }
            None => false,
        }
    }
}

impl Drop for McpSession {
    fn drop(&mut self) {
        for (_, task) in lock(&self.subscriptions).drain() {
            task.abort();
        }
        self.standalone.finish();
        for s in lock(&self.streams).iter() {
            s.finish();
        }
    }
}

/// The messages of one SSE stream, numbered from 1 (`0` is the priming event a stream opens
/// with), and whether its last message has been written.
pub struct StreamLog {
    pub number: u64,
    cap: usize,
    messages: Mutex<VecDeque<(u64, Arc<str>)>>,
    /// The number of the newest message; `done` is set after the last.
    newest: watch::Sender<(u64, bool)>,
}

impl StreamLog {
    fn new(number: u64, cap: usize) -> StreamLog {
        StreamLog {
            number,
            cap,
            messages: Mutex::new(VecDeque::new()),
            newest: watch::Sender::new((0, false)),
        }
    }

    /// Appends a JSON-RPC message; returns its number.
    pub fn push(&self, message: String) -> u64 {
        let mut messages = lock(&self.messages);
        let n = messages.back().map_or(1, |(n, _)| n + 1);
        messages.push_back((n, message.into()));
        while messages.len() > self.cap {
            messages.pop_front();
        }
        drop(messages);
        self.newest.send_modify(|(newest, _)| *newest = n);
        n
    }

    /// No message follows (the request's answer was written, or the session ended).
    pub fn finish(&self) {
        self.newest.send_modify(|(_, done)| *done = true);
    }

    pub fn is_done(&self) -> bool {
        self.newest.borrow().1
    }

    /// Messages numbered above `after` that are still kept.
    pub fn after(&self, after: u64) -> Vec<(u64, Arc<str>)> {
        lock(&self.messages)
            .iter()
            .filter(|(n, _)| *n > after)
            .cloned()
            .collect()
    }

    /// Changes to the newest number and to `done`.
    pub fn watch(&self) -> watch::Receiver<(u64, bool)> {
        self.newest.subscribe()
    }

    /// The SSE event id of message `n` of this stream.
    pub fn event_id(&self, n: u64) -> String {
        format!("{}-{n}", self.number)
    }
}

/// The stream and message a `Last-Event-ID` names (`<stream>-<message>`).
pub fn parse_event_id(id: &str) -> Option<(u64, u64)> {
    let (stream, n) = id.trim().split_once('-')?;
    Some((stream.parse().ok()?, n.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_its_owners_alone() {
        let r = Registry::default();
        let s = r.open("ws/key:a".into(), "2025-11-25").expect("opened");
        assert!(r.get(&s.id, "ws/key:a").is_some());
        assert!(r.get(&s.id, "ws/key:b").is_none());
        assert!(!r.close(&s.id, "ws/key:b"));
        assert!(r.close(&s.id, "ws/key:a"));
        assert!(r.get(&s.id, "ws/key:a").is_none());
    }

    #[test]
    fn a_stream_replays_after_an_id_and_keeps_a_window() {
        let log = StreamLog::new(3, 2);
        assert_eq!(log.push("a".into()), 1);
        assert_eq!(log.push("b".into()), 2);
        assert_eq!(log.push("c".into()), 3);
        let kept: Vec<u64> = log.after(0).iter().map(|(n, _)| *n).collect();
        assert_eq!(kept, [2, 3]);
        assert_eq!(log.after(2).len(), 1);
        assert!(!log.is_done());
        log.finish();
        assert!(log.is_done());
        assert_eq!(log.event_id(3), "3-3");
        assert_eq!(parse_event_id("3-3"), Some((3, 3)));
        assert_eq!(parse_event_id("3"), None);
        assert_eq!(parse_event_id("x-1"), None);
    }

    #[test]
    fn a_session_keeps_its_streams_for_a_resume() {
        let r = Registry::default();
        let s = r.open("o".into(), "2025-11-25").expect("opened");
        let first = s.new_stream();
        assert_eq!(first.number, 1);
        assert!(s.stream(1).is_some());
        assert!(s.stream(0).is_some(), "0 is the standalone stream");
        assert!(s.stream(9).is_none());
    }
}
