//! The engine's port: everything an engine may do to its turn and, through the session tools, to
//! other sessions. The runner implements [`TurnIo`] and the sessions core implements
//! [`SessionOps`]; engines see only these traits, so they depend on nothing above them (no
//! runner, no store, no sessions core) and can run against any implementation.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::watch;

use crate::drive::Drive;
use crate::error::Result;
use crate::timeline::{Behavior, ContextWindowUsage, Event, ModelUsage, Step, Tier, Todo, Usage};

/// Where volatile progress goes while a reply streams (the turn's live tail).
pub trait DeltaSink: Send {
    /// Broadcasts volatile progress (a delta); never stored.
    fn delta(&mut self, step: Step);
}

/// The engine's handle on its turn: durable appends (fenced: refused once the turn has lost its
/// session), live deltas, the conversation, steering, tasks and cancellation.
#[async_trait]
pub trait TurnIo: DeltaSink + Sync {
    fn session_id(&self) -> &str;

    /// The id of the request whose input this turn runs (`X-Request-Id`); engines pass it on to
    /// what they call (a model endpoint's `X-Request-Id`, an agent CLI's `SESSIOND_REQUEST_ID`).
    fn request_id(&self) -> &str;

    /// An image of this session by its storage id: `(mime type, bytes)`.
    async fn image(&self, storage_id: &str) -> Result<Option<(String, Vec<u8>)>>;

    /// The drive of the session's workspace.
    fn drive(&self) -> &Drive;

    /// The session's working directory, relative to the drive (`None` = the drive root).
    fn cwd(&self) -> Option<&str>;

    /// The session as the tools that start or message other sessions present it.
    fn origin(&self) -> &Origin;

    /// The sessions core, for tools that start or message sessions (absent in bare runners).
    fn sessions(&self) -> Option<Arc<dyn SessionOps>>;

    /// How many sessions up the `createdBySessionId` chain goes from this one (0 for a root
    /// session), counting at most to `max`.
    async fn depth(&self, max: u32) -> Result<u32>;

    /// What the engine stored about this session at an earlier turn.
    async fn memo(&self) -> Result<Option<Value>>;

    /// Keeps `memo` for the next turns of this session.
    async fn set_memo(&mut self, memo: Value) -> Result<()>;

    /// The conversation of earlier turns, oldest first, as the messages their terminals recorded
    /// (a turn lost in a crash contributes its input), notes as user messages; whole turns only,
    /// newest first until about `budget_chars` of JSON.
    async fn conversation(&self, budget_chars: usize) -> Result<Vec<Value>>;

    /// The turn's own conversation, recorded on its terminal (and read back by
    /// [`TurnIo::conversation`] in later turns). Starts with the turn's input.
    fn messages_mut(&mut self) -> &mut Vec<Value>;

    /// The turn's reply (a Job's state result, the text a title is made from).
    fn set_reply(&mut self, text: &str);

    /// Records one model call's usage: a `usage` event with the turn's totals so far, and the
    /// session's totals. The runner then writes no estimate for this turn. `estimated` marks
    /// counts the engine made up from the text because its model reported none: a `system` event
    /// with `metadata.code` `usage_estimated` goes just before the `usage` event, in the same
    /// write.
    async fn record_usage(
        &mut self,
        call: Usage,
        by_model: Vec<ModelUsage>,
        context_window: f64,
        window_usage: ContextWindowUsage,
        estimated: bool,
    ) -> Result<()>;

    /// True once the turn has been interrupted; engines stop at their next step.
    fn is_cancelled(&self) -> bool;

    /// A receiver that turns true when the turn is interrupted (to race against I/O).
    fn cancel_watch(&self) -> watch::Receiver<bool>;

    /// True when a steer message is waiting for [`TurnIo::take_steers`].
    fn steer_waiting(&self) -> bool;

    /// True once a follow-up message arrived while this turn ran (it runs in a later turn).
    fn follow_up_waiting(&self) -> bool;

    /// Waits `ms` unless interrupted first; returns false when interrupted.
    async fn pause(&mut self, ms: u64) -> bool;

    /// Appends a durable event unless this turn has lost its session.
    async fn emit(&mut self, event: Event) -> Result<u64>;

    /// Appends a durable event with the turn's next write, at the latest its terminal: for what an
    /// engine emits right before another write or the end of its turn, it saves a round-trip to
    /// the store. A delta or a pause writes it first, so it is never seen after them; an engine
    /// that waits on anything else after emitting uses [`TurnIo::emit`].
    async fn hold(&mut self, event: Event) -> Result<()> {
        self.emit(event).await.map(|_| ())
    }

    /// Records assistant text in the turn's conversation and, until the engine measures usage,
    /// in the estimate.
    fn say(&mut self, text: &str);

    fn next_local_id(&mut self) -> u64;

    /// Replaces the session's todo list (event + snapshot field).
    async fn set_todos(&mut self, todos: Vec<Todo>) -> Result<()>;

    /// Starts a background task of this turn (`kind`: tool, subagent or scheduled) and returns
    /// its id (`t1`, `t2`, ...).
    async fn start_task(&mut self, kind: &str, name: &str, label: &str) -> Result<String>;

    /// Appends a chunk of a task's output, and a heartbeat when one is due.
    async fn task_output(&mut self, id: &str, chunk: &str) -> Result<()>;

    /// A `heartbeat` when tasks are running and one is due.
    async fn heartbeat_if_due(&mut self) -> Result<()>;

    /// A `heartbeat` naming the tasks still running.
    async fn heartbeat(&mut self) -> Result<()>;

    /// Settles a task: `completed` with `result`, `failed` with `error`, `stopped` with `reason`.
    async fn settle_task(&mut self, id: &str, status: &str, detail: Value) -> Result<()>;

    /// Takes the steer messages that arrived since the last call (oldest first), marking them
    /// delivered to this turn.
    async fn take_steers(&mut self) -> Result<Vec<String>>;
}

/// The session a turn runs for: inputs its tools send to other sessions are attributed to it
/// (R7), in its workspace, on behalf of its user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub workspace_id: String,
    pub workspace_slug: String,
    pub user_id: String,
    pub session_id: String,
}

/// A child session the `start_session` tool starts.
#[derive(Debug, Clone)]
pub struct ChildSession {
    pub prompt: String,
    /// Its working directory in the drive; `None`: the default of the sessions core.
    pub cwd: Option<String>,
    pub tier: Option<Tier>,
}

/// A message the `message_session` tool sends.
#[derive(Debug, Clone)]
pub struct SessionMessage {
    pub session_id: String,
    pub prompt: String,
    pub behavior: Behavior,
}

/// Where an input went: its session, and `accepted` (a turn took it) or `queued`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivered {
    pub session_id: String,
    pub delivery: &'static str,
}

/// What the session tools may do to the sessions of the turn's workspace, acting as `origin`.
#[async_trait]
pub trait SessionOps: Send + Sync {
    /// The longest prompt the sessions core accepts, in characters.
    fn max_prompt_chars(&self) -> usize;

    /// Starts a child session of `origin`.
    async fn start_session(&self, origin: &Origin, child: ChildSession) -> Result<Delivered>;

    /// Sends a message to another session, attributed to `origin`.
    async fn message_session(&self, origin: &Origin, message: SessionMessage) -> Result<Delivered>;
}
