//! A session read as an A2A `Task`, and its timeline read as the protocol's stream updates.
//!
//! The task is the session: its `id` and its `contextId` are both the session id. Its state is
//! the session's last terminal, unless an input came after it:
//!
//! | session | `TaskState` |
//! |---|---|
//! | an input not yet taken by a turn | `TASK_STATE_SUBMITTED` |
//! | a turn running, or asleep until its wake-up | `TASK_STATE_WORKING` |
//! | `complete`, status `completed` | `TASK_STATE_COMPLETED` |
//! | `complete`, status `failed` | `TASK_STATE_FAILED` |
//! | `complete` `cancelled`, `interrupted` | `TASK_STATE_CANCELED` |
//! | `ask` | `TASK_STATE_INPUT_REQUIRED` (the question is the status message) |
//!
//! Its history is the inputs (`ROLE_USER`: prompts and answers) and the agent's messages
//! (`ROLE_AGENT`: `agent_message`, a turn's reply, a question); each turn's reply is also an
//! artifact, `reply-<seq>`. Nothing here is stored: every read derives it from the timeline (a
//! view keeps the readings of the events it read for the next, see [`window`](super::window)).

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::error::{A2aError, A2aResult};
use super::window::{self, Read, Window};
use crate::clock;
use crate::error::{Error, Result};
use crate::sessions::{Actor, HistoryQuery, Sessions};
use crate::store::{AgentRow, SessionRow};

/// How many of a session's newest events a task view reads (its history is at most these).
pub const VIEW_EVENTS: u32 = 500;

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

/// The session of `task_id`, if the actor sees it and it belongs to `agent` (anything else is
/// `TaskNotFound`, a session of another workspace or agent included).
pub async fn find(
    sessions: &Sessions,
    actor: &Actor,
    agent: &AgentRow,
    task_id: &str,
) -> A2aResult<SessionRow> {
    if task_id.is_empty() {
        return Err(A2aError::invalid_params("id: a task id is required"));
    }
    let row = sessions.detail_row(actor, task_id).await?;
    if row.agent_id != agent.id {
        return Err(A2aError::task_not_found());
    }
    Ok(row)
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

/// A `TaskStatus`.
pub fn status(task_id: &str, state: State, message: Option<(u64, &str)>, at_ms: i64) -> Value {
    let mut v = json!({ "state": state.name(), "timestamp": clock::rfc3339(at_ms) });
    if let Some((seq, text)) = message {
        v["message"] = self::message(task_id, seq, "ROLE_AGENT", text);
    }
    v
}

/// The task of a session, with at most `history_length` messages of history (all it read when
/// `None`; `0` none), from its newest [`VIEW_EVENTS`] events. The events an earlier view read
/// are not read again (see [`window`](super::window)).
pub async fn view(
    sessions: &Sessions,
    row: &SessionRow,
    history_length: Option<usize>,
) -> Result<(State, Value)> {
    with_view(sessions, row, history_length, |state, task| {
        Ok((state, serde_json::to_value(task).map_err(internal)?))
    })
    .await?
}

/// Like [`view`], the task as JSON text (what `SendMessage` and `GetTask` answer): the
/// messages and artifacts of the events are copied as the window holds them, never built again.
pub async fn view_raw(
    sessions: &Sessions,
    row: &SessionRow,
    history_length: Option<usize>,
) -> Result<Box<RawValue>> {
    with_view(sessions, row, history_length, |_, task| {
        serde_json::value::to_raw_value(task).map_err(internal)
    })
    .await?
}

fn internal(e: serde_json::Error) -> Error {
    Error::Internal(format!("a task view: {e}"))
}

/// Folds the session's window into its task and hands it to `f`; the window is kept for the
/// next view.
async fn with_view<R>(
    sessions: &Sessions,
    row: &SessionRow,
    history_length: Option<usize>,
    f: impl FnOnce(State, &TaskView<'_>) -> R,
) -> Result<R> {
    let window = match window::take(row.pk, &row.id) {
        Some(mut w) => {
            let page = sessions
                .history_of(
                    row.pk,
                    HistoryQuery::Forward {
                        cursor: w.last_seq(),
                        limit: VIEW_EVENTS,
                    },
                )
                .await?;
            if page.next_cursor.is_some() {
                // More than a window came since: the newest events afresh.
                fresh(sessions, row).await?
            } else {
                w.extend(&page.events);
                w
            }
        }
        None => fresh(sessions, row).await?,
    };
    let (state, task) = fold(row, window.events(), history_length);
    let out = f(state, &task);
    drop(task);
    window::put(row.pk, window);
    Ok(out)
}

/// A window of the session's newest events, read from the store.
async fn fresh(sessions: &Sessions, row: &SessionRow) -> Result<Window> {
    let page = sessions
        .history_of(
            row.pk,
            HistoryQuery::Backward {
                before: 0,
                limit: VIEW_EVENTS,
            },
        )
        .await?;
    let mut w = Window::new(&row.id);
    w.extend(&page.events);
    Ok(w)
}

/// An A2A `Task` as a view writes it: the messages and artifacts as the window holds them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView<'r> {
    id: &'r str,
    context_id: &'r str,
    status: Value,
    artifacts: Vec<&'r RawValue>,
    history: Vec<&'r RawValue>,
    metadata: Value,
}

/// The task from its session's newest events, read (ascending).
fn fold<'r>(
    row: &'r SessionRow,
    events: impl Iterator<Item = &'r Read>,
    history_length: Option<usize>,
) -> (State, TaskView<'r>) {
    let id = row.id.as_str();
    let mut history: Vec<&RawValue> = Vec::new();
    let mut artifacts: Vec<&RawValue> = Vec::new();
    let mut state = State::Submitted;
    let mut status_message: Option<(u64, &str)> = None;
    let mut at = row.created_at;
    for e in events {
        history.extend(e.message.as_deref());
        artifacts.extend(e.artifact.as_deref());
        match &e.reading {
            Reading::Input(_) => {
                state = State::Submitted;
                status_message = None;
                at = e.created_at;
            }
            Reading::Working => {
                state = State::Working;
                status_message = None;
                at = e.created_at;
            }
            Reading::AgentText(_) => {}
            Reading::Ended {
                state: ended, text, ..
            } => {
                state = *ended;
                status_message = text.as_deref().map(|t| (e.seq, t));
                at = e.created_at;
            }
            Reading::InterruptRequested => {
                if state == State::InputRequired {
                    state = State::Canceled;
                    status_message = None;
                    at = e.created_at;
                }
            }
            Reading::Nothing => {}
        }
    }
    // An input a turn has taken is worked on even before its `turn_started` is read.
    if state == State::Submitted && row.turn_active {
        state = State::Working;
    }
    if let Some(n) = history_length {
        let skip = history.len().saturating_sub(n);
        history.drain(..skip);
    }
    let status = status(id, state, status_message, at);
    (
        state,
        TaskView {
            id,
            context_id: id,
            status,
            artifacts,
            history,
            metadata: json!({ "sessiond": { "agent": row.agent_name, "title": row.title } }),
        },
    )
}
