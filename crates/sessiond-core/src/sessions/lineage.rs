//! Lineage: a session made from another one (a Session record's `parent`).
//!
//! * `continuation` — a new session whose model sees the parent's final result; the parent stays
//!   open.
//! * `handoff` — the same, and the parent is closed: it takes no more prompts.
//! * `resume` — a new session that replays the parent's conversation as context
//!   (`replayed_from_session_id`).
//!
//! What the new session's engine sees comes before its first prompt in the text of its first
//! input (the stored `prompt_submitted` keeps the caller's prompt), so every engine sees it: a
//! model, an agent CLI or the scripted engine alike.

use serde_json::Value;

use crate::error::Result;
use crate::projection::conversation;
use crate::store::{LastTerminal, Store};

/// How a session continues another (the store records it with the new session).
pub use crate::store::submit::ParentKind;

/// The session a new one comes from, and how.
#[derive(Debug, Clone)]
pub struct Parent {
    pub kind: ParentKind,
    pub session_id: String,
}

/// About how much of a parent's conversation a `resume` replays (characters of text).
pub const REPLAY_CHARS: usize = 200_000;

/// The parent's final result as its newest terminal left it.
fn final_result(terminal: Option<&LastTerminal>) -> String {
    let Some(t) = terminal else {
        return "(it has not finished a turn yet)".to_owned();
    };
    match (t.event_type.as_str(), t.status.as_deref()) {
        ("complete", Some("completed")) => t
            .result
            .clone()
            .filter(|r| !r.trim().is_empty())
            .unwrap_or_else(|| "(it finished without a reply)".to_owned()),
        ("complete", Some("failed")) => format!(
            "(its last turn failed: {})",
            t.error.as_deref().unwrap_or("no reason given")
        ),
        ("ask", _) => "(its last turn ended with a question to the user)".to_owned(),
        ("sleep", _) => "(it is asleep until a later time)".to_owned(),
        _ => "(its last turn was interrupted)".to_owned(),
    }
}

/// What a continuation or handoff shows its engine before the prompt.
pub fn continuation_context(parent_id: &str, terminal: Option<&LastTerminal>) -> String {
    format!(
        "This session continues session {parent_id}. Its final result:\n\n{}\n\n---\n\n",
        final_result(terminal)
    )
}

/// The text of one conversation message (`content` as a string or as typed parts).
fn message_text(m: &Value) -> String {
    match m.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// What a resume shows its engine before the prompt: the parent's conversation, the newest part
/// when it is long.
pub async fn resume_context(store: &Store, parent_pk: i64, parent_id: &str) -> Result<String> {
    let messages = conversation::before(store, parent_pk, u64::MAX, REPLAY_CHARS).await?;
    let mut lines: Vec<String> = messages
        .iter()
        .filter_map(|m| {
            let text = message_text(m);
            let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
            (!text.trim().is_empty()).then(|| format!("[{role}] {text}"))
        })
        .collect();
    let mut used: usize = lines.iter().map(|l| l.len()).sum();
    while used > REPLAY_CHARS && lines.len() > 1 {
        used -= lines.remove(0).len();
    }
    let transcript = if lines.is_empty() {
        "(it has no conversation yet)".to_owned()
    } else {
        lines.join("\n\n")
    };
    Ok(format!(
        "This session resumes the conversation of session {parent_id}:\n\n{transcript}\n\n---\n\n"
    ))
}
