//! The records a task's agent keeps beside its timeline: events (`event/send`), states (one JSON
//! document per task and agent), trace spans and the task's tracker (its agent's cursor over the
//! events). Each task has exactly one tracker, which shares the task's id.

use serde_json::{Map, Value, json};

use super::agents as agent_rows;
use super::tasks;
use super::view;
use crate::error::{Error, Result};
use crate::sessions::{Actor, Sessions};
pub use crate::store::agentex::TrackerChange;
use crate::store::agentex::{
    AgentKey, EventRow, RecordFilter, SpanRow, StateRow, TaskKey, TrackerRow,
};

pub fn event_view(e: &EventRow) -> Value {
    json!({
        "id": e.id,
        "agent_id": e.agent_id,
        "sequence_id": e.sequence_id,
        "task_id": e.task_id,
        "content": view::document(e.content.as_deref()),
        "created_at": view::time(e.created_at),
    })
}

/// A registered agent calling back with its key reaches only its own tasks' records: a record of
/// another task (or of none) is not there for it.
async fn confine(sessions: &Sessions, actor: &Actor, task_id: Option<&str>) -> Result<()> {
    if super::confinement::confined_to(actor).is_none() {
        return Ok(());
    }
    let id = task_id.ok_or(Error::NotFound)?;
    tasks::find(sessions, actor, TaskKey::Id(id))
        .await
        .map(|_| ())
}

/// A list for an agent calling back must name one of its tasks.
async fn confine_list(sessions: &Sessions, actor: &Actor, filter: &RecordFilter) -> Result<()> {
    if super::confinement::confined_to(actor).is_none() {
        return Ok(());
    }
    let id = filter
        .task_id
        .as_deref()
        .ok_or_else(|| Error::invalid("task_id: required with an agent key"))?;
    tasks::find(sessions, actor, TaskKey::Id(id))
        .await
        .map(|_| ())
}

pub async fn event(sessions: &Sessions, actor: &Actor, id: &str) -> Result<EventRow> {
    let e = sessions
        .store()
        .agentex()
        .event(&actor.workspace_id, id)
        .await?
        .ok_or(Error::NotFound)?;
    confine(sessions, actor, Some(&e.task_id)).await?;
    Ok(e)
}

/// A task's events after `last_processed_event_id` (one of its events), in `sequence_id` order.
/// The agent named must be the task's.
pub async fn events(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    agent_id: &str,
    last_processed_event_id: Option<&str>,
    limit: u32,
) -> Result<Vec<EventRow>> {
    let task = tasks::find(sessions, actor, TaskKey::Id(task_id)).await?;
    if task.agent_id != agent_id {
        return Ok(Vec::new());
    }
    let after = match last_processed_event_id {
        None => 0,
        Some(id) => {
            let e = event(sessions, actor, id).await.map_err(|_| {
                Error::invalid(format!(
                    "last_processed_event_id: {id} is not an event of this task"
                ))
            })?;
            if e.task_id != task.id {
                return Err(Error::invalid(format!(
                    "last_processed_event_id: {id} is not an event of this task"
                )));
            }
            e.sequence_id
        }
    };
    Ok(sessions
        .store()
        .agentex()
        .events(task.pk, after, limit)
        .await?)
}

pub fn state_view(s: &StateRow) -> Value {
    json!({
        "id": s.id,
        "agent_id": s.agent_id,
        "task_id": s.task_id,
        "state": view::document(Some(&s.state)),
        "created_at": view::time(s.created_at),
        "updated_at": view::time_opt(s.updated_at),
    })
}

pub async fn state(sessions: &Sessions, actor: &Actor, id: &str) -> Result<StateRow> {
    let st = sessions
        .store()
        .agentex()
        .state(&actor.workspace_id, id)
        .await?
        .ok_or(Error::NotFound)?;
    confine(sessions, actor, Some(&st.task_id)).await?;
    Ok(st)
}

/// A new state for a task and an agent of the workspace (409 when the pair has one).
pub async fn create_state(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    agent_id: &str,
    doc: Map<String, Value>,
) -> Result<StateRow> {
    let task = tasks::find(sessions, actor, TaskKey::Id(task_id))
        .await
        .map_err(|_| Error::invalid(format!("task_id: no task {task_id}")))?;
    let agent = agent_rows::find(sessions, actor, AgentKey::Id(agent_id))
        .await
        .map_err(|_| Error::invalid(format!("agent_id: no agent {agent_id}")))?;
    let doc = Value::Object(doc).to_string();
    Ok(sessions
        .store()
        .agentex()
        .create_state(task.key(), &actor.workspace_id, &agent.id, doc)
        .await?)
}

pub async fn update_state(
    sessions: &Sessions,
    actor: &Actor,
    id: &str,
    doc: Map<String, Value>,
) -> Result<StateRow> {
    if super::confinement::confined_to(actor).is_some() {
        state(sessions, actor, id).await?;
    }
    let doc = Value::Object(doc).to_string();
    Ok(sessions
        .store()
        .agentex()
        .update_state(&actor.workspace_id, id, doc)
        .await?)
}

/// Deletes a state; returns it as it was.
pub async fn delete_state(sessions: &Sessions, actor: &Actor, id: &str) -> Result<StateRow> {
    if super::confinement::confined_to(actor).is_some() {
        state(sessions, actor, id).await?;
    }
    Ok(sessions
        .store()
        .agentex()
        .delete_state(&actor.workspace_id, id)
        .await?)
}

pub async fn states(
    sessions: &Sessions,
    actor: &Actor,
    filter: RecordFilter,
) -> Result<Vec<StateRow>> {
    confine_list(sessions, actor, &filter).await?;
    Ok(sessions
        .store()
        .agentex()
        .states(&actor.workspace_id, filter)
        .await?)
}

pub fn span_view(s: &SpanRow) -> Value {
    json!({
        "id": s.id,
        "name": s.name,
        "trace_id": s.trace_id,
        "start_time": view::micros_time(s.start_time),
        "end_time": s.end_time.map_or(Value::Null, view::micros_time),
        "parent_id": s.parent_id,
        "task_id": s.task_id,
        "data": view::document(s.data.as_deref()),
        "input": view::document(s.input.as_deref()),
        "output": view::document(s.output.as_deref()),
    })
}

pub async fn span(sessions: &Sessions, actor: &Actor, id: &str) -> Result<SpanRow> {
    let span = sessions
        .store()
        .agentex()
        .span(&actor.workspace_id, id)
        .await?
        .ok_or(Error::NotFound)?;
    confine(sessions, actor, span.task_id.as_deref()).await?;
    Ok(span)
}

/// Longest span id, trace id, parent id or name.
const SPAN_TEXT_MAX: usize = 512;

fn span_text(field: &str, v: &Value) -> Result<String> {
    match v.as_str() {
        Some(s)
            if !s.is_empty()
                && s.chars().count() <= SPAN_TEXT_MAX
                && !s.chars().any(char::is_control) =>
        {
            Ok(s.to_owned())
        }
        _ => Err(Error::invalid(format!(
            "{field}: must be a string of 1 to {SPAN_TEXT_MAX} characters without control characters"
        ))),
    }
}

fn span_opt_text(field: &str, v: &Value) -> Result<Option<String>> {
    if v.is_null() {
        Ok(None)
    } else {
        span_text(field, v).map(Some)
    }
}

/// `data`, `input`, `output`: an object, a list of objects, or null.
fn span_document(field: &str, v: &Value) -> Result<Option<String>> {
    match v {
        Value::Null => Ok(None),
        Value::Object(_) => Ok(Some(v.to_string())),
        Value::Array(items) if items.iter().all(Value::is_object) => Ok(Some(v.to_string())),
        _ => Err(Error::invalid(format!(
            "{field}: must be an object, a list of objects or null"
        ))),
    }
}

fn span_time(field: &str, v: &Value) -> Result<i64> {
    match v.as_str() {
        Some(t) => view::parse_micros(field, t),
        None => Err(Error::invalid(format!(
            "{field}: must be an RFC 3339 date-time"
        ))),
    }
}

/// Applies the fields present in `body` to `span` (a create starts from an empty span).
async fn apply_span(
    sessions: &Sessions,
    actor: &Actor,
    span: &mut SpanRow,
    body: &Map<String, Value>,
) -> Result<()> {
    let (parent_before, trace_before) = (span.parent_id.clone(), span.trace_id.clone());
    for (k, v) in body {
        match k.as_str() {
            "id" => {}
            "name" => span.name = span_text("name", v)?,
            "trace_id" => span.trace_id = span_text("trace_id", v)?,
            "parent_id" => span.parent_id = span_opt_text("parent_id", v)?,
            "start_time" => span.start_time = span_time("start_time", v)?,
            "end_time" => {
                span.end_time = if v.is_null() {
                    None
                } else {
                    Some(span_time("end_time", v)?)
                }
            }
            "task_id" => {
                span.task_id = match v {
                    Value::Null => None,
                    Value::String(t) => {
                        tasks::find(sessions, actor, TaskKey::Id(t))
                            .await
                            .map_err(|_| Error::invalid(format!("task_id: no task {t}")))?;
                        Some(t.clone())
                    }
                    _ => return Err(Error::invalid("task_id: must be a string or null")),
                }
            }
            "data" => span.data = span_document("data", v)?,
            "input" => span.input = span_document("input", v)?,
            "output" => span.output = span_document("output", v)?,
            other => return Err(Error::invalid(format!("{other}: unknown field"))),
        }
    }
    if let Some(end) = span.end_time
        && end < span.start_time
    {
        return Err(Error::invalid("end_time: before start_time"));
    }
    if span.parent_id != parent_before || span.trace_id != trace_before {
        check_parent(sessions, actor, span).await?;
    }
    Ok(())
}

/// A span's parent, when the caller can see it, is of the same trace and is not the span itself.
///
/// A parent the caller cannot see (none yet, another workspace's, another agent's for an agent
/// key) is taken as a forward reference, all three alike so that nothing is learnt from the
/// answer: span ids are the workspace's own, and the official SDK writes each span when it ends
/// (`AGENTEX_TRACING_SKIP_AGENTEX_SPAN_START`, its default), so children arrive before their
/// parent.
async fn check_parent(sessions: &Sessions, actor: &Actor, child: &SpanRow) -> Result<()> {
    let Some(parent_id) = child.parent_id.as_deref() else {
        return Ok(());
    };
    if parent_id == child.id {
        return Err(Error::invalid("parent_id: a span cannot be its own parent"));
    }
    match span(sessions, actor, parent_id).await {
        Ok(parent) if parent.trace_id != child.trace_id => Err(Error::invalid(format!(
            "parent_id: span {parent_id} is of another trace ({})",
            parent.trace_id
        ))),
        Ok(_) | Err(Error::NotFound) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A new span (`id` is generated when not given; 409 when it is taken).
pub async fn create_span(
    sessions: &Sessions,
    actor: &Actor,
    body: Map<String, Value>,
) -> Result<SpanRow> {
    for required in ["name", "start_time", "trace_id"] {
        if body.get(required).is_none_or(Value::is_null) {
            return Err(Error::invalid(format!("{required}: required")));
        }
    }
    let mut span = SpanRow {
        id: match body.get("id") {
            None | Some(Value::Null) => crate::ids::new_id(),
            Some(v) => span_text("id", v)?,
        },
        ..Default::default()
    };
    apply_span(sessions, actor, &mut span, &body).await?;
    sessions
        .store()
        .agentex()
        .create_span(&actor.workspace_id, span.clone())
        .await?;
    Ok(span)
}

/// `PATCH /spans/{id}`: the fields present change (null clears an optional one).
pub async fn update_span(
    sessions: &Sessions,
    actor: &Actor,
    id: &str,
    body: Map<String, Value>,
) -> Result<SpanRow> {
    for required in ["name", "start_time", "trace_id"] {
        if body.get(required).is_some_and(Value::is_null) {
            return Err(Error::invalid(format!("{required}: cannot be null")));
        }
    }
    let mut span = span(sessions, actor, id).await?;
    apply_span(sessions, actor, &mut span, &body).await?;
    sessions
        .store()
        .agentex()
        .update_span(&actor.workspace_id, span.clone())
        .await?;
    Ok(span)
}

pub async fn spans(
    sessions: &Sessions,
    actor: &Actor,
    trace_id: Option<String>,
    filter: RecordFilter,
) -> Result<Vec<SpanRow>> {
    confine_list(sessions, actor, &filter).await?;
    Ok(sessions
        .store()
        .agentex()
        .spans(&actor.workspace_id, trace_id, filter)
        .await?)
}

pub fn tracker_view(t: &TrackerRow) -> Value {
    json!({
        "id": t.task_id,
        "agent_id": t.agent_id,
        "task_id": t.task_id,
        "created_at": view::time(t.created_at),
        "last_processed_event_id": t.last_processed_event_id,
        "status": t.status,
        "status_reason": t.status_reason,
        "updated_at": view::time_opt(t.updated_at),
    })
}

pub async fn tracker(sessions: &Sessions, actor: &Actor, id: &str) -> Result<TrackerRow> {
    if !crate::ids::looks_like_id(id) {
        return Err(Error::NotFound);
    }
    confine(sessions, actor, Some(id)).await?;
    sessions
        .store()
        .agentex()
        .tracker(&actor.workspace_id, id)
        .await?
        .ok_or(Error::NotFound)
}

/// Moves a tracker; `last_processed_event_id` must be one of the task's events.
pub async fn update_tracker(
    sessions: &Sessions,
    actor: &Actor,
    id: &str,
    change: TrackerChange,
) -> Result<TrackerRow> {
    let task = tasks::find(sessions, actor, TaskKey::Id(id)).await?;
    for (field, v) in [
        ("status", &change.status),
        ("status_reason", &change.status_reason),
    ] {
        if v.as_ref().is_some_and(|s| s.chars().count() > 10_000) {
            return Err(Error::invalid(format!(
                "{field}: longer than 10000 characters"
            )));
        }
    }
    sessions
        .store()
        .agentex()
        .update_tracker(task.key(), change)
        .await?;
    tracker(sessions, actor, id).await
}

pub async fn trackers(
    sessions: &Sessions,
    actor: &Actor,
    filter: RecordFilter,
) -> Result<Vec<TrackerRow>> {
    confine_list(sessions, actor, &filter).await?;
    Ok(sessions
        .store()
        .agentex()
        .trackers(&actor.workspace_id, filter)
        .await?)
}
