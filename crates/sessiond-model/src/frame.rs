//! One frame of a session's live stream: a durable event or volatile progress, serialised once
//! for every subscriber, and the rule for which durable events settle the volatile tail.
//!
//! Vocabulary shared by the in-memory bus that fans frames out and the store that builds the
//! durable ones at commit: neither needs to name the other to agree on what a frame is.

use std::any::Any;
use std::sync::{Arc, Mutex};

use crate::timeline::{Event, Step};

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

impl Frame {
    /// The volatile frame of a step (`{"event":{"type":"step","step":{...}}}`).
    pub fn step(step: &Step, created_at: i64) -> Option<Frame> {
        let body = serde_json::to_string(&Event::Step { step: step.clone() }).ok()?;
        Some(Frame::volatile(
            "step",
            format!("{{\"event\":{body}}}"),
            created_at,
        ))
    }
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
