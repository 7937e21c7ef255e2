//! In-memory fan-out of session frames to live subscribers (SSE streams, `/wait` observers).
//!
//! Durable frames are published by the store writer only after COMMIT; volatile frames (text and
//! reasoning deltas) by the runner as they happen. Each session keeps the volatile *tail* published
//! since its last durable frame, so a client that reconnects mid-turn still sees the partial text.
//! A subscriber that falls behind the channel capacity is cut off (it resumes by seq); publishing
//! never blocks, so a slow client can never stall the writer.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{broadcast, watch};

use crate::error::{Error, Result};

/// One SSE payload, serialised once for every subscriber.
#[derive(Debug)]
pub struct Frame {
    /// The durable seq, or `None` for volatile progress.
    pub seq: Option<u64>,
    /// The event `type`, so observers can spot terminals without parsing.
    pub event_type: Arc<str>,
    /// `{"seq":N,"event":{...}}` or `{"event":{...}}`.
    pub data: String,
    /// When the event was written (ms since the epoch): the commit for durable frames.
    pub created_at: i64,
    /// What other API families make of this frame, computed by the first of their subscribers
    /// and shared by the others.
    pub cache: FrameCache,
}

impl Frame {
    pub fn durable(seq: u64, event_type: &str, data: String, created_at: i64) -> Frame {
        Frame {
            seq: Some(seq),
            event_type: event_type.into(),
            data,
            created_at,
            cache: FrameCache::default(),
        }
    }

    pub fn volatile(event_type: &str, data: String, created_at: i64) -> Frame {
        Frame {
            seq: None,
            event_type: event_type.into(),
            data,
            created_at,
            cache: FrameCache::default(),
        }
    }
}

/// Values derived from one frame, one per type: a projection that a thousand subscribers need is
/// made once. The bus knows nothing of them; a projection stores, say, a
/// `tokio::sync::OnceCell` of its rendering and every subscriber of that family awaits the same
/// cell.
#[derive(Default)]
pub struct FrameCache(Mutex<Vec<Arc<dyn Any + Send + Sync>>>);

impl FrameCache {
    /// The frame's `T`, created empty by the first caller.
    pub fn slot<T: Any + Send + Sync + Default>(&self) -> Arc<T> {
        let mut slots = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for slot in slots.iter() {
            if let Ok(found) = Arc::clone(slot).downcast::<T>() {
                return found;
            }
        }
        let made = Arc::new(T::default());
        slots.push(Arc::clone(&made) as Arc<dyn Any + Send + Sync>);
        made
    }
}

impl std::fmt::Debug for FrameCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FrameCache")
    }
}

/// Bytes of volatile tail kept per session; past this the tail is dropped until the next durable
/// frame (the durable `text` still arrives, only the live preview is lost on reconnect).
const TAIL_MAX_BYTES: usize = 1 << 20;

struct Topic {
    tx: broadcast::Sender<Arc<Frame>>,
    subscribers: usize,
    tail: Vec<Arc<Frame>>,
    tail_bytes: usize,
    /// Last durable seq that settled the tail (an output of the agent); the tail continues after
    /// it. Inputs appended meanwhile (a note, a steer) do not move it.
    last_seq: u64,
}

/// Does a durable event of this type settle the volatile tail? Everything the agent writes does
/// (its durable text follows the deltas it streamed); inputs that others append while a turn
/// streams do not (invariant 6). Mirrors `timeline::Event::is_input`.
pub fn settles_tail(event_type: &str) -> bool {
    !matches!(
        event_type,
        "session_created"
            | "prompt_submitted"
            | "note_submitted"
            | "answer_submitted"
            | "interrupt_requested"
    )
}

pub struct Bus {
    topics: Mutex<HashMap<String, Topic>>,
    capacity: usize,
    max_subscribers: usize,
    closed: watch::Sender<bool>,
}

/// A live subscription plus the volatile tail that was current when it began.
pub struct Subscription {
    pub rx: broadcast::Receiver<Arc<Frame>>,
    /// Volatile frames published after durable output seq `tail_after` and not yet settled (inputs
    /// with higher seqs may have been appended since).
    pub tail: Vec<Arc<Frame>>,
    pub tail_after: u64,
    guard: SubscriberGuard,
}

struct SubscriberGuard {
    bus: Arc<Bus>,
    session_id: String,
}

impl Drop for SubscriberGuard {
    fn drop(&mut self) {
        let mut topics = self.bus.lock();
        if let Some(topic) = topics.get_mut(&self.session_id) {
            topic.subscribers = topic.subscribers.saturating_sub(1);
            if topic.subscribers == 0 && topic.tail.is_empty() {
                topics.remove(&self.session_id);
            }
        }
    }
}

impl Subscription {
    pub fn session_id(&self) -> &str {
        &self.guard.session_id
    }
}

impl Bus {
    pub fn new(capacity: usize, max_subscribers: usize) -> Arc<Bus> {
        Arc::new(Bus {
            topics: Mutex::new(HashMap::new()),
            capacity,
            max_subscribers,
            closed: watch::channel(false).0,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Topic>> {
        // A panic while holding this lock cannot leave a topic half-updated in a way that matters
        // more than losing live delivery, so keep serving.
        self.topics.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn new_topic(&self) -> Topic {
        Topic {
            tx: broadcast::channel(self.capacity).0,
            subscribers: 0,
            tail: Vec::new(),
            tail_bytes: 0,
            last_seq: 0,
        }
    }

    /// Subscribes to a session's live frames. Subscribe *before* reading the backlog, then drop
    /// duplicates by seq (invariant 5).
    pub fn subscribe(self: &Arc<Self>, session_id: &str) -> Result<Subscription> {
        let mut topics = self.lock();
        let topic = topics
            .entry(session_id.to_owned())
            .or_insert_with(|| self.new_topic());
        if topic.subscribers >= self.max_subscribers {
            return Err(Error::TooManyStreams);
        }
        topic.subscribers += 1;
        Ok(Subscription {
            rx: topic.tx.subscribe(),
            tail: topic.tail.clone(),
            tail_after: topic.last_seq,
            guard: SubscriberGuard {
                bus: Arc::clone(self),
                session_id: session_id.to_owned(),
            },
        })
    }

    /// Publishes a committed event. Called by the store writer after COMMIT, in seq order.
    pub fn publish_durable(&self, session_id: &str, frame: Frame) {
        let mut topics = self.lock();
        if let Some(topic) = topics.get_mut(session_id) {
            if settles_tail(&frame.event_type) {
                topic.last_seq = frame.seq.unwrap_or(topic.last_seq);
                topic.tail.clear();
                topic.tail_bytes = 0;
            }
            let _ = topic.tx.send(Arc::new(frame));
            if topic.subscribers == 0 && topic.tail.is_empty() {
                topics.remove(session_id);
            }
        }
    }

    /// Publishes progress that is never stored (`text_delta`, `reasoning_delta`). `after_seq` is
    /// the last durable seq the publisher knows of.
    pub fn publish_volatile(&self, session_id: &str, after_seq: u64, frame: Frame) {
        let mut topics = self.lock();
        let topic = topics
            .entry(session_id.to_owned())
            .or_insert_with(|| self.new_topic());
        if after_seq > topic.last_seq {
            topic.last_seq = after_seq;
            topic.tail.clear();
            topic.tail_bytes = 0;
        }
        let frame = Arc::new(frame);
        if topic.tail_bytes + frame.data.len() <= TAIL_MAX_BYTES {
            topic.tail_bytes += frame.data.len();
            topic.tail.push(Arc::clone(&frame));
        }
        let _ = topic.tx.send(frame);
    }

    /// Forgets a session's volatile tail (its turn ended without a durable frame after it).
    pub fn clear_tail(&self, session_id: &str) {
        let mut topics = self.lock();
        if let Some(topic) = topics.get_mut(session_id) {
            topic.tail.clear();
            topic.tail_bytes = 0;
            if topic.subscribers == 0 {
                topics.remove(session_id);
            }
        }
    }

    /// Ends every live stream of a deleted session.
    pub fn close_session(&self, session_id: &str) {
        self.lock().remove(session_id);
    }

    /// Ends every live stream (graceful shutdown).
    pub fn close_all(&self) {
        let _ = self.closed.send(true);
        self.lock().clear();
    }

    /// True once [`Bus::close_all`] has been called (the server is shutting down).
    pub fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Resolves once [`Bus::close_all`] has been called.
    pub fn closed(&self) -> watch::Receiver<bool> {
        self.closed.subscribe()
    }
}
