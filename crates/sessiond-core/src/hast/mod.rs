//! HAST Event v2 (seed 001): a session's timeline as task-agent events, for the `/v2` family.
//!
//! A projection, not a copy: every HAST event is computed from the stored timeline (and the
//! live bus), so a session made through any API family has the same events here.
//!
//! * **Sequence.** The durable HAST events of timeline event `seq` are numbered
//!   `seq × SLOTS + i` (`i` = 0, 1, … in the order they are made): the same on every read,
//!   strictly increasing, and resumable from any of them without a lookup. Timeline events that
//!   make no HAST event leave their numbers unused, so sequences have gaps.
//! * **Runs.** Each turn is one run. A run is named after the input that started it (its
//!   `run.queued` already carries the run's id), and every event of the run carries `run_id`.
//! * **Volatile** events (`message.delta`, `reasoning.delta`) come from the bus's volatile
//!   frames: `sequence` null, `replayable` false, never in `GET …/events`. Their `message_id` /
//!   `reasoning_id` is the one of the `message.completed` / `reasoning.completed` they lead to.
//!
//! [`project::Projection`] holds the little a projection needs to remember within a run;
//! [`read`] rebuilds it for any position by reading back to the start of the run.

pub mod project;
pub mod read;
pub mod tools;

use serde_json::{Value, json};

pub use project::{Projection, RunStart};

/// HAST events one timeline event may make (the sequence stride).
pub const SLOTS: u64 = 10;

/// `schema_version` of every envelope.
pub const SCHEMA_VERSION: u64 = 2;

/// The envelope's `source`: who an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The agent's run: its messages, tools, usage and outcome.
    Runtime,
    /// sessiond itself: runs queued, the runtime's status.
    Backplane,
    /// What people and apps put into the session: prompts, answers, notes.
    Workspace,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Runtime => "runtime",
            Source::Backplane => "backplane",
            Source::Workspace => "workspace",
        }
    }
}

/// One HAST event without the parts that are the same for the whole session.
#[derive(Debug, Clone)]
pub struct HastEvent {
    /// The envelope's `type`.
    pub kind: &'static str,
    /// `None` for volatile events.
    pub sequence: Option<u64>,
    pub event_id: String,
    pub source: Source,
    pub run_id: Option<String>,
    /// ms since the epoch.
    pub created_at: i64,
    pub data: Value,
}

/// What every event of one session's envelopes shares.
#[derive(Debug, Clone)]
pub struct Stamp {
    pub session_id: String,
    /// The envelope's `engine` (see [`engine_of`]).
    pub engine: &'static str,
}

impl HastEvent {
    /// The complete envelope.
    pub fn envelope(&self, stamp: &Stamp) -> Value {
        let mut v = json!({
            "schema_version": SCHEMA_VERSION,
            "event_id": self.event_id,
            "sequence": self.sequence,
            "replayable": self.sequence.is_some(),
            "created_at": crate::clock::rfc3339(self.created_at),
            "source": self.source.as_str(),
            "engine": stamp.engine,
            "task_id": stamp.session_id,
            "session_id": stamp.session_id,
            "type": self.kind,
            "data": self.data,
        });
        if let Some(run) = &self.run_id {
            v["run_id"] = json!(run);
        }
        v
    }

    /// One SSE frame: `id:` (durable events only), `event:` and `data:`.
    pub fn sse(&self, stamp: &Stamp) -> String {
        let data = self.envelope(stamp).to_string();
        match self.sequence {
            Some(seq) => format!("id: {seq}\nevent: {}\ndata: {data}\n\n", self.kind),
            None => format!("event: {}\ndata: {data}\n\n", self.kind),
        }
    }
}

/// The envelope's `engine` for a [`crate::engine::Engine::harness`]: the seed's `codex_cli` for
/// Codex; `claude_code`, `scripted`, `openai`, `command` and `acp` are sessiond's extension values.
pub fn engine_of(harness: &'static str) -> &'static str {
    match harness {
        "codex" => "codex_cli",
        other => other,
    }
}

/// The first timeline seq whose HAST events may come after HAST sequence `after`.
pub fn first_seq_after(after: u64) -> u64 {
    (after / SLOTS).max(1)
}
