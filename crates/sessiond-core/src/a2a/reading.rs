//! What the timeline's events mean to an A2A task: its states, the reading of one event, and
//! the `Message` and `Artifact` an event adds to the task. The vocabulary the task view
//! (`task.rs`), the window of read events (`window.rs`), the stream (`stream.rs`) and push
//! deliveries share; it depends on none of them.

use serde_json::value::RawValue;
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Submitted,
    Working,
    Completed,
    Failed,
    Canceled,
    InputRequired,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Submitted => "TASK_STATE_SUBMITTED",
            State::Working => "TASK_STATE_WORKING",
            State::Completed => "TASK_STATE_COMPLETED",
            State::Failed => "TASK_STATE_FAILED",
            State::Canceled => "TASK_STATE_CANCELED",
            State::InputRequired => "TASK_STATE_INPUT_REQUIRED",
        }
    }

    pub fn parse(name: &str) -> Option<State> {
        [
            State::Submitted,
            State::Working,
            State::Completed,
            State::Failed,
            State::Canceled,
            State::InputRequired,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// A state the task leaves only when a new message continues it.
    pub fn is_terminal(self) -> bool {
        matches!(self, State::Completed | State::Failed | State::Canceled)
    }

    /// A state a stream ends in: terminal, or waiting for the client's answer.
    pub fn ends_stream(self) -> bool {
        self.is_terminal() || self == State::InputRequired
    }
}

/// An A2A `Message` of the task.
pub fn message(task_id: &str, seq: u64, role: &str, text: &str) -> Value {
    json!({
        "messageId": format!("{task_id}-{seq}"),
        "contextId": task_id,
        "taskId": task_id,
        "role": role,
        "parts": [{ "text": text }],
    })
}

/// The artifact a turn's reply is.
pub fn reply_artifact(seq: u64, text: &str) -> Value {
    json!({
        "artifactId": format!("reply-{seq}"),
        "name": "reply",
        "parts": [{ "text": text }],
    })
}

/// What `reading` (the event `seq` of task `task_id`) adds to the task, as JSON text: its history
/// `Message` and its `Artifact`.
pub fn rendered(
    task_id: &str,
    seq: u64,
    reading: &Reading,
) -> (Option<Box<RawValue>>, Option<Box<RawValue>>) {
    let raw = |v: Value| serde_json::value::to_raw_value(&v).ok();
    match reading {
        Reading::Input(Some(text)) => (raw(message(task_id, seq, "ROLE_USER", text)), None),
        Reading::AgentText(text) => (raw(message(task_id, seq, "ROLE_AGENT", text)), None),
        Reading::Ended { text, reply, .. } => (
            text.as_ref()
                .and_then(|t| raw(message(task_id, seq, "ROLE_AGENT", t))),
            reply.as_ref().and_then(|r| raw(reply_artifact(seq, r))),
        ),
        _ => (None, None),
    }
}

/// The text an `ask` puts to the client: each question with its options.
fn question_text(event: &Value) -> String {
    let mut out = String::new();
    for q in event["questions"].as_array().into_iter().flatten() {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(q["question"].as_str().unwrap_or(""));
        for o in q["options"].as_array().into_iter().flatten() {
            out.push_str("\n- ");
            out.push_str(o["label"].as_str().unwrap_or(""));
        }
    }
    out
}

/// What one timeline event means to the task.
pub enum Reading {
    /// An input from the client side (the text, for the history).
    Input(Option<String>),
    /// A turn started or woke: the task works.
    Working,
    /// The agent said something on the way.
    AgentText(String),
    /// The turn ended: its state, the status message's text, and the reply (an artifact).
    Ended {
        state: State,
        text: Option<String>,
        reply: Option<String>,
    },
    /// The interrupt was asked for: it cancels a task waiting for input at once (no turn runs
    /// to write `interrupted`); a running turn's own terminal says when it stopped.
    InterruptRequested,
    /// Nothing the protocol shows.
    Nothing,
}

impl Reading {
    /// The bytes of text it holds.
    pub fn text_len(&self) -> usize {
        match self {
            Reading::Input(text) => text.as_ref().map_or(0, String::len),
            Reading::AgentText(text) => text.len(),
            Reading::Ended { text, reply, .. } => {
                text.as_ref().map_or(0, String::len) + reply.as_ref().map_or(0, String::len)
            }
            Reading::Working | Reading::InterruptRequested | Reading::Nothing => 0,
        }
    }
}

/// Reads a stored event's JSON.
pub fn read(event: &Value) -> Reading {
    let s = |k: &str| event.get(k).and_then(Value::as_str).map(str::to_owned);
    match event.get("type").and_then(Value::as_str).unwrap_or("") {
        "prompt_submitted" => Reading::Input(s("prompt")),
        "answer_submitted" => Reading::Input(s("answer")),
        "note_submitted" => Reading::Input(None),
        // A step (a tool call, text) is the turn at work: a stream joined mid-turn says so.
        "turn_started" | "step" => Reading::Working,
        "agent_message" => s("message").map_or(Reading::Nothing, Reading::AgentText),
        "complete" => {
            let state = match s("status").as_deref() {
                Some("failed") => State::Failed,
                Some("cancelled") => State::Canceled,
                _ => State::Completed,
            };
            let reply = s("result");
            let text = if state == State::Failed {
                s("error").or_else(|| reply.clone())
            } else {
                reply.clone()
            };
            Reading::Ended { state, text, reply }
        }
        "ask" => Reading::Ended {
            state: State::InputRequired,
            text: Some(question_text(event)),
            reply: None,
        },
        "interrupted" => Reading::Ended {
            state: State::Canceled,
            text: None,
            reply: None,
        },
        "sleep" => Reading::Working,
        "interrupt_requested" => Reading::InterruptRequested,
        _ => Reading::Nothing,
    }
}
