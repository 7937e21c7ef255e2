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
use super::reading::{Reading, State, message};
use super::window::{self, Read, VIEW_EVENTS, Window};
use crate::clock;
use crate::error::{Error, Result};
use crate::sessions::{Actor, HistoryQuery, Sessions};
use crate::store::{AgentRow, SessionRow};

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
