//! LangGraph checkpoints (`/agentex/checkpoints`): the store behind the AgentEx SDK's HTTP
//! checkpointer (`agentex.lib.adk.create_checkpointer`), which LangGraph agents compile their
//! graphs with.
//!
//! A thread is a task: `thread_id` is the id of a task the credential reaches (in its workspace
//! and, for an agent key, one of its agent's tasks), as the SDK's templates configure it
//! (`{"thread_id": task_id}`) and as AgentEx authorises it. Any other thread id is not there
//! (404), exactly like an unknown task; a task's checkpoints are deleted with it.
//!
//! LangGraph's checkpointer contract, as its PostgreSQL checkpointer keeps it: a put stores a
//! checkpoint (again under the same id: its checkpoint and metadata are replaced) and the blobs of
//! the channels it changed (a channel's version, once stored, stays); `get_tuple` answers the
//! checkpoint asked for, or the thread's newest in the namespace, with the blobs its
//! `channel_versions` name and its pending writes; `list` answers a thread's checkpoints newest
//! first (ids order by time), in one namespace or all, `before` a checkpoint, filtered by
//! metadata containment; writes are kept once per (checkpoint, task, idx) — replaced only with
//! `upsert`, which the SDK sends for LangGraph's special channels (errors, interrupts); and
//! `delete_thread` removes every checkpoint, blob and write of the thread. Blobs are base64 text
//! and come back exactly as they were sent.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::tasks;
use crate::error::{Error, Result};
use crate::sessions::{Actor, Sessions};
use crate::store::agentex::{TaskKey, TaskRow};
use crate::store::langgraph::{
    BlobRow, CheckpointFilter, CheckpointRow, CheckpointTuple, NewCheckpoint, NewWrites, WriteRow,
};

/// Longest id, namespace, channel, version, serialization type, task id or task path, in
/// characters.
pub const TEXT_MAX: usize = 1024;
/// Most blobs in one put.
pub const BLOBS_MAX: usize = 1000;
/// Most writes in one put-writes.
pub const WRITES_MAX: usize = 1000;
/// Largest `limit` of a list, and the default.
pub const LIST_MAX: u32 = 1000;
pub const LIST_DEFAULT: u32 = 100;

/// `POST /checkpoints/list`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListCheckpoints {
    pub thread_id: String,
    /// One namespace; absent or null: every namespace of the thread.
    #[serde(default)]
    pub checkpoint_ns: Option<String>,
    #[serde(default)]
    pub before_checkpoint_id: Option<String>,
    #[serde(default)]
    pub filter_metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub limit: Option<i64>,
}

/// `POST /checkpoints/get-tuple`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GetTuple {
    pub thread_id: String,
    #[serde(default)]
    pub checkpoint_ns: String,
    /// Absent or null: the newest.
    #[serde(default)]
    pub checkpoint_id: Option<String>,
}

/// A channel's blob in a put.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobIn {
    pub channel: String,
    pub version: String,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub blob: Option<String>,
}

/// `POST /checkpoints/put`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutCheckpoint {
    pub thread_id: String,
    #[serde(default)]
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    #[serde(default)]
    pub parent_checkpoint_id: Option<String>,
    pub checkpoint: Map<String, Value>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
    #[serde(default)]
    pub blobs: Vec<BlobIn>,
}

/// A pending write in a put-writes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteIn {
    pub task_id: String,
    pub idx: i64,
    pub channel: String,
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    pub blob: String,
    #[serde(default)]
    pub task_path: String,
}

/// `POST /checkpoints/put-writes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutWrites {
    pub thread_id: String,
    #[serde(default)]
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub writes: Vec<WriteIn>,
    #[serde(default)]
    pub upsert: bool,
}

/// `POST /checkpoints/delete-thread`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeleteThread {
    pub thread_id: String,
}

/// The task a thread id names, as the credential reaches it (404 otherwise).
async fn thread(sessions: &Sessions, actor: &Actor, thread_id: &str) -> Result<TaskRow> {
    tasks::find(sessions, actor, TaskKey::Id(thread_id)).await
}

/// A name or id of at most [`TEXT_MAX`] characters without control characters; `empty` says
/// whether "" is one (a namespace, a task path).
fn text(field: &str, v: &str, empty: bool) -> Result<()> {
    if (!empty && v.is_empty()) || v.chars().count() > TEXT_MAX || v.chars().any(char::is_control) {
        let least = if empty { 0 } else { 1 };
        return Err(Error::invalid(format!(
            "{field}: must be {least} to {TEXT_MAX} characters without control characters"
        )));
    }
    Ok(())
}

/// Blob bytes as standard, padded base64 (what the SDK sends), kept as text.
fn base64(field: &str, v: &str) -> Result<()> {
    base64::engine::general_purpose::STANDARD
        .decode(v)
        .map(|_| ())
        .map_err(|e| Error::invalid(format!("{field}: not standard base64 ({e})")))
}

fn doc(text: &str) -> Value {
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

fn item_view(thread_id: &str, c: &CheckpointRow) -> Value {
    json!({
        "thread_id": thread_id,
        "checkpoint_ns": c.checkpoint_ns,
        "checkpoint_id": c.checkpoint_id,
        "parent_checkpoint_id": c.parent_checkpoint_id,
        "checkpoint": doc(&c.checkpoint),
        "metadata": doc(&c.metadata),
    })
}

fn tuple_view(thread_id: &str, t: &CheckpointTuple) -> Value {
    let mut v = item_view(thread_id, &t.checkpoint);
    v["blobs"] = t
        .blobs
        .iter()
        .map(
            |b| json!({"channel": b.channel, "version": b.version, "type": b.kind, "blob": b.blob}),
        )
        .collect();
    v["pending_writes"] = t
        .pending_writes
        .iter()
        .map(|w| json!({"task_id": w.task_id, "idx": w.idx, "channel": w.channel, "type": w.kind, "blob": w.blob}))
        .collect();
    v
}

/// A thread's checkpoints, newest first (without blobs or writes, as LangGraph lists them).
pub async fn list(sessions: &Sessions, actor: &Actor, q: ListCheckpoints) -> Result<Value> {
    let limit = match q.limit {
        None => LIST_DEFAULT,
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| (1..=LIST_MAX).contains(n))
            .ok_or_else(|| Error::invalid(format!("limit: must be from 1 to {LIST_MAX}")))?,
    };
    if let Some(ns) = &q.checkpoint_ns {
        text("checkpoint_ns", ns, true)?;
    }
    if let Some(before) = &q.before_checkpoint_id {
        text("before_checkpoint_id", before, false)?;
    }
    let task = thread(sessions, actor, &q.thread_id).await?;
    let rows = sessions
        .store()
        .langgraph()
        .list(
            task.pk,
            CheckpointFilter {
                checkpoint_ns: q.checkpoint_ns,
                before: q.before_checkpoint_id,
                metadata: q.filter_metadata.filter(|m| !m.is_empty()),
                limit,
            },
        )
        .await?;
    Ok(rows.iter().map(|c| item_view(&task.id, c)).collect())
}

/// The checkpoint asked for, or the thread's newest in the namespace; JSON `null` when there is
/// none (the contract's answer, which the SDK reads as "no checkpoint yet").
pub async fn get_tuple(sessions: &Sessions, actor: &Actor, q: GetTuple) -> Result<Value> {
    text("checkpoint_ns", &q.checkpoint_ns, true)?;
    if let Some(id) = &q.checkpoint_id {
        text("checkpoint_id", id, false)?;
    }
    let task = thread(sessions, actor, &q.thread_id).await?;
    let found = sessions
        .store()
        .langgraph()
        .tuple(task.pk, &q.checkpoint_ns, q.checkpoint_id.as_deref())
        .await?;
    Ok(found.map_or(Value::Null, |t| tuple_view(&task.id, &t)))
}

/// Stores a checkpoint with its blobs; answers where it is.
pub async fn put(sessions: &Sessions, actor: &Actor, b: PutCheckpoint) -> Result<Value> {
    text("checkpoint_ns", &b.checkpoint_ns, true)?;
    text("checkpoint_id", &b.checkpoint_id, false)?;
    if let Some(parent) = &b.parent_checkpoint_id {
        text("parent_checkpoint_id", parent, false)?;
    }
    if b.blobs.len() > BLOBS_MAX {
        return Err(Error::invalid(format!(
            "blobs: at most {BLOBS_MAX} in one put"
        )));
    }
    let mut blobs = Vec::with_capacity(b.blobs.len());
    for (i, x) in b.blobs.into_iter().enumerate() {
        text(&format!("blobs[{i}]/channel"), &x.channel, false)?;
        text(&format!("blobs[{i}]/version"), &x.version, false)?;
        text(&format!("blobs[{i}]/type"), &x.kind, false)?;
        if let Some(data) = &x.blob {
            base64(&format!("blobs[{i}]/blob"), data)?;
        }
        blobs.push(BlobRow {
            channel: x.channel,
            version: x.version,
            kind: x.kind,
            blob: x.blob,
        });
    }
    let task = thread(sessions, actor, &b.thread_id).await?;
    let answer = json!({
        "thread_id": task.id,
        "checkpoint_ns": b.checkpoint_ns,
        "checkpoint_id": b.checkpoint_id,
    });
    sessions
        .store()
        .langgraph()
        .put(
            task.key(),
            NewCheckpoint {
                checkpoint: CheckpointRow {
                    checkpoint_ns: b.checkpoint_ns,
                    checkpoint_id: b.checkpoint_id,
                    parent_checkpoint_id: b.parent_checkpoint_id,
                    checkpoint: Value::Object(b.checkpoint).to_string(),
                    metadata: Value::Object(b.metadata).to_string(),
                },
                blobs,
            },
        )
        .await?;
    Ok(answer)
}

/// Stores the writes of a checkpoint's tasks.
pub async fn put_writes(sessions: &Sessions, actor: &Actor, b: PutWrites) -> Result<()> {
    text("checkpoint_ns", &b.checkpoint_ns, true)?;
    text("checkpoint_id", &b.checkpoint_id, false)?;
    if b.writes.len() > WRITES_MAX {
        return Err(Error::invalid(format!(
            "writes: at most {WRITES_MAX} in one put-writes"
        )));
    }
    let mut writes = Vec::with_capacity(b.writes.len());
    for (i, w) in b.writes.into_iter().enumerate() {
        text(&format!("writes[{i}]/task_id"), &w.task_id, false)?;
        text(&format!("writes[{i}]/channel"), &w.channel, false)?;
        text(&format!("writes[{i}]/task_path"), &w.task_path, true)?;
        if let Some(kind) = &w.kind {
            text(&format!("writes[{i}]/type"), kind, false)?;
        }
        if i32::try_from(w.idx).is_err() {
            return Err(Error::invalid(format!(
                "writes[{i}]/idx: must be a 32-bit integer"
            )));
        }
        base64(&format!("writes[{i}]/blob"), &w.blob)?;
        writes.push(WriteRow {
            task_id: w.task_id,
            idx: w.idx,
            channel: w.channel,
            kind: w.kind,
            blob: w.blob,
            task_path: w.task_path,
        });
    }
    let task = thread(sessions, actor, &b.thread_id).await?;
    Ok(sessions
        .store()
        .langgraph()
        .put_writes(
            task.key(),
            NewWrites {
                checkpoint_ns: b.checkpoint_ns,
                checkpoint_id: b.checkpoint_id,
                writes,
                upsert: b.upsert,
            },
        )
        .await?)
}

/// Deletes every checkpoint, blob and write of a thread (the task itself stays).
pub async fn delete_thread(sessions: &Sessions, actor: &Actor, b: DeleteThread) -> Result<()> {
    let task = thread(sessions, actor, &b.thread_id).await?;
    Ok(sessions
        .store()
        .langgraph()
        .delete_thread(task.key())
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_blobs_are_checked() {
        assert!(text("f", "", true).is_ok());
        assert!(text("f", "", false).is_err());
        assert!(text("f", "a\nb", true).is_err());
        assert!(text("f", &"x".repeat(TEXT_MAX), false).is_ok());
        let long = text("f", &"x".repeat(TEXT_MAX + 1), false).unwrap_err();
        assert!(long.to_string().starts_with("f: "), "{long}");
        assert!(base64("b", "aGVsbG8=").is_ok());
        assert!(base64("b", "").is_ok());
        assert!(base64("b", "aGVsbG8").is_err(), "padding is required");
        assert!(base64("b", "not base64!").is_err());
    }
}
