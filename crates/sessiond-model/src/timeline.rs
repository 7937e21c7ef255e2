//! The timeline's event vocabulary, mirroring the seed's `SessionEvent` union.
//!
//! sessiond writes these typed events; it reads stored events back as raw JSON (history and streams
//! serve the stored text untouched), so event types written by a newer version, or unknown ones,
//! pass through intact (S17).

use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Sender {
    User {
        #[serde(rename = "userId")]
        user_id: String,
    },
    App {
        #[serde(rename = "appId")]
        app_id: String,
    },
    Session {
        #[serde(rename = "sessionId")]
        session_id: String,
    },
    System,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Behavior {
    Steer,
    FollowUp,
}

impl Behavior {
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Steer => "steer",
            Behavior::FollowUp => "follow_up",
        }
    }
    pub fn parse(s: &str) -> Option<Behavior> {
        match s {
            "steer" => Some(Behavior::Steer),
            "follow_up" => Some(Behavior::FollowUp),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Frontier,
    Balanced,
    Economy,
}

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Frontier => "frontier",
            Tier::Balanced => "balanced",
            Tier::Economy => "economy",
        }
    }
    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "frontier" => Some(Tier::Frontier),
            "balanced" => Some(Tier::Balanced),
            "economy" => Some(Tier::Economy),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredImageRef {
    #[serde(rename = "storageId")]
    pub storage_id: String,
    #[serde(rename = "mimeType")]
    pub mime_type: String,
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AttachmentRef {
    pub path: String,
    pub name: String,
    pub bytes: u64,
    #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AskOption {
    pub label: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AskQuestion {
    pub question: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    pub options: Vec<AskOption>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub multi_select: Option<bool>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Todo {
    pub id: String,
    pub content: String,
    pub status: TodoStatus,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
    Failed,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageData {
    pub data: String,
    #[serde(rename = "mimeType")]
    pub mime_type: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FollowUpQueueItem {
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<ImageData>>,
}

/// `TurnState.status`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TurnStateStatus {
    Running,
    WaitingForHuman,
    Sleeping,
    Interrupted,
    Completed,
    Failed,
    Cancelled,
}

/// `AgentLoopState.status`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    Running,
    Waiting,
    Completed,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentLoopState {
    pub status: AgentStatus,
    /// The turn's conversation: `{role, content}` objects.
    pub messages: Vec<Value>,
}

/// The runner's state carried by `turn_started` and the terminal events.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnState {
    pub status: TurnStateStatus,
    /// `"agent"`, `"auto"` or a machine definition.
    pub mode: Value,
    pub agent: AgentLoopState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub todos: Option<Vec<Todo>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up_queue: Option<Vec<FollowUpQueueItem>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ToolOutputPart {
    Text { text: String },
    Image { data: String, mime_type: String },
}

/// `StepEvent.step`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Step {
    TextDelta {
        delta: String,
    },
    ReasoningDelta {
        delta: String,
    },
    Text {
        text: String,
    },
    Reasoning {
        text: String,
    },
    ToolCallStart {
        tool_name: String,
        tool_call_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
    },
    ToolCall {
        tool_name: String,
        tool_call_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        input: Option<Value>,
        is_error: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        output: Option<Vec<ToolOutputPart>>,
    },
    System {
        message: String,
    },
}

impl Step {
    /// Deltas are volatile: broadcast live, never stored (invariant 6).
    pub fn is_volatile(&self) -> bool {
        matches!(self, Step::TextDelta { .. } | Step::ReasoningDelta { .. })
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UsageCost {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
    pub total: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
    pub total_tokens: f64,
    pub cost: UsageCost,
}

impl Usage {
    /// Adds `other` field by field (totals across calls or turns).
    pub fn add(&mut self, other: &Usage) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
        self.total_tokens += other.total_tokens;
        self.cost.input += other.cost.input;
        self.cost.output += other.cost.output;
        self.cost.cache_read += other.cost.cache_read;
        self.cost.cache_write += other.cost.cache_write;
        self.cost.total += other.cost.total;
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelTransport {
    pub provider: String,
    pub billing: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelUsage {
    pub model: String,
    pub transport: ModelTransport,
    pub usage: Usage,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextWindowUsage {
    pub system_prompt: f64,
    pub messages: f64,
    pub local_memory: f64,
    pub global_memory: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CompleteStatus {
    Completed,
    Failed,
    Cancelled,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    Initial,
    Message,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SystemMetadata {
    pub code: String,
}

impl SystemMetadata {
    /// The `usage` event written right after this one holds estimated counts, not a model's.
    /// An extension of the seed's codes (its `usage` event has no field for it).
    pub const USAGE_ESTIMATED: &'static str = "usage_estimated";
    /// What streamed live since the last durable event (text, reasoning) is void: the attempt
    /// that produced it failed and the call is made again. An extension of the seed's codes.
    pub const PARTIAL_TEXT_VOID: &'static str = "partial_text_void";
    /// The session is a fork: the events before this notice are its parent's up to the fork
    /// point (this notice's seq minus one). An extension of the seed's codes.
    pub const FORKED: &'static str = "forked";

    pub fn code(code: &str) -> Option<SystemMetadata> {
        Some(SystemMetadata {
            code: code.to_owned(),
        })
    }
}

/// Every event sessiond writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Event {
    SessionCreated {
        prompt: String,
        /// RFC 3339 (the seed types this one as a string).
        created_at: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
    },
    PromptSubmitted {
        prompt: String,
        input_kind: InputKind,
        behavior: Behavior,
        sender: Sender,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        images: Vec<StoredImageRef>,
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        attachments: Vec<AttachmentRef>,
    },
    NoteSubmitted {
        note: String,
        sender: Sender,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        images: Vec<StoredImageRef>,
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        attachments: Vec<AttachmentRef>,
    },
    AnswerSubmitted {
        answer: String,
        sender: Sender,
        #[serde(skip_serializing_if = "Option::is_none")]
        client_request_id: Option<String>,
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        images: Vec<StoredImageRef>,
        #[serde(skip_serializing_if = "Vec::is_empty", default)]
        attachments: Vec<AttachmentRef>,
    },
    InterruptRequested {
        requested_at: String,
    },
    AgentMessage {
        message: String,
        created_at: String,
    },
    TierClamped {
        requested_tier: Tier,
        effective_tier: Tier,
    },
    TurnStarted {
        state: TurnState,
    },
    Step {
        step: Step,
    },
    Todos {
        todos: Vec<Todo>,
    },
    TaskStarted {
        /// A seed `Task` document.
        task: Value,
    },
    TaskOutput {
        task_id: String,
        chunk: String,
    },
    TaskSettled {
        /// A seed `TaskSettlement` document.
        settlement: Value,
    },
    Heartbeat {
        timestamp: f64,
        active_task_ids: Vec<String>,
    },
    StateMachine {
        /// The full `StateMachineState` (a document patch: it replaces the previous one).
        state_machine: Value,
    },
    FollowUpQueue {
        follow_up_queue: Vec<FollowUpQueueItem>,
    },
    Usage {
        turn_usage: Usage,
        usage_by_model: Vec<ModelUsage>,
        last_message_usage: Usage,
        effective_context_window: f64,
        context_window_usage: ContextWindowUsage,
    },
    System {
        level: Level,
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        metadata: Option<SystemMetadata>,
    },
    /// A model engine moved to another model (a tier that maps elsewhere).
    RouterSwitch {
        tier: String,
        route: String,
        from_model: String,
        to_model: String,
        /// `minimal`, `low`, `medium`, `high` or `xhigh`.
        thinking_level: String,
        /// `turn_start`, `cadence`, `advisor`, `step_trigger` or `compaction`.
        trigger: String,
        rationale: String,
        vision_fallback: bool,
    },
    Complete {
        state: TurnState,
        status: CompleteStatus,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    Ask {
        state: TurnState,
        questions: Vec<AskQuestion>,
    },
    Interrupted {
        state: TurnState,
    },
    Sleep {
        state: TurnState,
        wake_at: f64,
    },
}

impl Event {
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::SessionCreated { .. } => "session_created",
            Event::PromptSubmitted { .. } => "prompt_submitted",
            Event::NoteSubmitted { .. } => "note_submitted",
            Event::AnswerSubmitted { .. } => "answer_submitted",
            Event::InterruptRequested { .. } => "interrupt_requested",
            Event::AgentMessage { .. } => "agent_message",
            Event::TierClamped { .. } => "tier_clamped",
            Event::TurnStarted { .. } => "turn_started",
            Event::Step { .. } => "step",
            Event::Todos { .. } => "todos",
            Event::TaskStarted { .. } => "task_started",
            Event::TaskOutput { .. } => "task_output",
            Event::TaskSettled { .. } => "task_settled",
            Event::Heartbeat { .. } => "heartbeat",
            Event::StateMachine { .. } => "state_machine",
            Event::FollowUpQueue { .. } => "follow_up_queue",
            Event::Usage { .. } => "usage",
            Event::System { .. } => "system",
            Event::RouterSwitch { .. } => "router_switch",
            Event::Complete { .. } => "complete",
            Event::Ask { .. } => "ask",
            Event::Interrupted { .. } => "interrupted",
            Event::Sleep { .. } => "sleep",
        }
    }

    /// Inputs come from outside the runner; everything else is the agent's output.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            Event::SessionCreated { .. }
                | Event::PromptSubmitted { .. }
                | Event::NoteSubmitted { .. }
                | Event::AnswerSubmitted { .. }
                | Event::InterruptRequested { .. }
        )
    }
}

/// The terminal types that end a turn and complete a `/wait` (R47).
pub const TERMINAL_TYPES: [&str; 4] = ["complete", "ask", "interrupted", "sleep"];

pub fn is_terminal_type(t: &str) -> bool {
    TERMINAL_TYPES.contains(&t)
}

/// A model call that failed and is tried again after a pause: the text of the `system` warning
/// an engine writes for it, and its reading back (the `/v2` family shows it as `run.retrying`).
/// The seed's `system.metadata.code` is a closed list, so the notice is recognised by its text.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNotice {
    /// Why the call failed.
    pub reason: String,
    pub delay_ms: u64,
    /// The attempt about to be made (2 for the first retry) and the most there will be.
    pub attempt: u32,
    pub attempts: u32,
}

impl RetryNotice {
    const MARK: &'static str = "; retrying in ";

    pub fn message(&self) -> String {
        format!(
            "{}{}{:.1} s (attempt {} of {})",
            self.reason,
            Self::MARK,
            self.delay_ms as f64 / 1000.0,
            self.attempt,
            self.attempts
        )
    }

    pub fn parse(message: &str) -> Option<RetryNotice> {
        let (reason, rest) = message.rsplit_once(Self::MARK)?;
        let (secs, rest) = rest.split_once(" s (attempt ")?;
        let (attempt, attempts) = rest.strip_suffix(')')?.split_once(" of ")?;
        let secs: f64 = secs.parse().ok()?;
        Some(RetryNotice {
            reason: reason.to_owned(),
            delay_ms: (secs * 1000.0).round().max(0.0) as u64,
            attempt: attempt.parse().ok()?,
            attempts: attempts.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::RetryNotice;

    #[test]
    fn retry_notices_read_back() {
        let n = RetryNotice {
            reason: "the endpoint answered 503; busy".into(),
            delay_ms: 1500,
            attempt: 2,
            attempts: 5,
        };
        assert_eq!(
            n.message(),
            "the endpoint answered 503; busy; retrying in 1.5 s (attempt 2 of 5)"
        );
        assert_eq!(RetryNotice::parse(&n.message()), Some(n));
        assert_eq!(RetryNotice::parse("working directory moved to ."), None);
        assert_eq!(
            RetryNotice::parse("x; retrying in soon s (attempt 2 of 5)"),
            None
        );
    }
}
