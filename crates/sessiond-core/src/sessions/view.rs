//! How a session looks on the wire: `SessionSummary`, `SessionDetail`, `SessionRef` and history
//! pages, shaped exactly as the seed schemas (closed objects: absent, never null).

use serde::Serialize;
use serde_json::Value;

use crate::store::{SessionRow, StoredEvent};
use crate::timeline::Tier;

#[derive(Debug, Serialize)]
pub struct AgentRef<'a> {
    pub id: &'a str,
    pub name: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary<'a> {
    pub id: &'a str,
    pub user_id: &'a str,
    pub turn_status: &'a str,
    pub bucket: &'a str,
    pub title: &'a str,
    pub title_origin: &'a str,
    pub title_status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub archived_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<&'a str>,
    pub agent: AgentRef<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_by_session_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<Value>,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_event_seq: u64,
    pub unread: bool,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionDetail<'a> {
    #[serde(flatten)]
    pub summary: SessionSummary<'a>,
    pub workspace_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<&'a str>,
    pub last_delivered_input_seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_attempt: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub todos: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_up_queue: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_machine: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_state: Option<Value>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRef<'a> {
    pub session_id: &'a str,
    pub status: &'a str,
    pub last_event_seq: u64,
    pub last_delivered_input_seq: u64,
}

fn json_column(text: &Option<String>) -> Option<Value> {
    text.as_deref().and_then(|t| serde_json::from_str(t).ok())
}

pub fn summary(row: &SessionRow) -> SessionSummary<'_> {
    SessionSummary {
        id: &row.id,
        user_id: &row.user_id,
        turn_status: row.turn_status.name(),
        bucket: &row.bucket,
        title: &row.title,
        title_origin: &row.title_origin,
        title_status: &row.title_status,
        archived_at: row.archived_at,
        cwd: row.cwd.as_deref(),
        agent: AgentRef {
            id: &row.agent_id,
            name: &row.agent_name,
        },
        created_by_session_id: row.created_by_session_id.as_deref(),
        machine: json_column(&row.machine),
        created_at: row.created_at,
        updated_at: row.updated_at,
        last_event_seq: row.last_event_seq,
        // Unread means the agent produced something the reader has not marked read.
        unread: row.last_output_seq > row.last_read_seq,
    }
}

pub fn detail(row: &SessionRow) -> SessionDetail<'_> {
    SessionDetail {
        summary: summary(row),
        workspace_id: &row.workspace_id,
        tier: row.tier.map(Tier::as_str),
        last_delivered_input_seq: row.last_delivered_input_seq,
        delivery_attempt: json_column(&row.delivery_attempt),
        todos: json_column(&row.todos),
        follow_up_queue: json_column(&row.follow_up_queue),
        requested_machine: json_column(&row.requested_machine),
        machine_state: json_column(&row.machine_state),
    }
}

pub fn session_ref(row: &SessionRow) -> SessionRef<'_> {
    SessionRef {
        session_id: &row.id,
        status: row.turn_status.name(),
        last_event_seq: row.last_event_seq,
        last_delivered_input_seq: row.last_delivered_input_seq,
    }
}

/// A page of history: stored bodies are spliced in verbatim (no re-encoding).
#[derive(Debug)]
pub struct HistoryPage {
    pub events: Vec<StoredEvent>,
    pub next_cursor: Option<u64>,
}

impl HistoryPage {
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(
            32 + self.events.iter().map(|e| e.body.len() + 48).sum::<usize>(),
        );
        out.push_str("{\"events\":[");
        for (i, e) in self.events.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_entry(&mut out, e);
        }
        out.push(']');
        if let Some(c) = self.next_cursor {
            out.push_str(",\"nextCursor\":");
            out.push_str(&c.to_string());
        }
        out.push('}');
        out
    }
}

/// One `HistoryEntry`: `{"seq":N,"event":{...},"createdAt":T}`.
pub fn push_entry(out: &mut String, e: &StoredEvent) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "{{\"seq\":{},\"event\":{},\"createdAt\":{}}}",
        e.seq, e.body, e.created_at
    );
}

pub fn entry_json(e: &StoredEvent) -> String {
    let mut out = String::new();
    push_entry(&mut out, e);
    out
}
