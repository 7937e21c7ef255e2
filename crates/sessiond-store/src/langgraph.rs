//! LangGraph checkpoints (migration 0015): what the AgentEx SDK's HTTP checkpointer keeps through
//! `/agentex/checkpoints`, laid out like LangGraph's own PostgreSQL checkpointer — checkpoints,
//! the channel blobs they name by version, and the pending writes of their tasks.
//!
//! A thread is a task, so every row is keyed by the task's session (`session_pk`) and goes with
//! it; the caller has found the task in its workspace (and, for an agent key, among its agent's
//! tasks) before it reaches here. Blobs, writes, checkpoints and metadata are stored as the client
//! sent them and read back unchanged. Not to be confused with `checkpoint.rs`, the WAL's.

use serde_json::{Map, Value};

use super::sql::{Db, OptionalExtension, Value as SqlValue, params, params_from_iter};
use super::{SessionKey, Tx};
use crate::error::{Error, Result};

/// A checkpoint as stored (its thread is the task the caller named).
#[derive(Debug, Clone)]
pub struct CheckpointRow {
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub parent_checkpoint_id: Option<String>,
    /// JSON object text.
    pub checkpoint: String,
    /// JSON object text.
    pub metadata: String,
}

/// A channel's value at a version: `kind` is LangGraph's serialization tag (`type` on the wire),
/// `blob` its bytes as the client's base64 text (none for an `empty` channel).
#[derive(Debug, Clone)]
pub struct BlobRow {
    pub channel: String,
    pub version: String,
    pub kind: String,
    pub blob: Option<String>,
}

/// A pending write of a checkpoint's task.
#[derive(Debug, Clone)]
pub struct WriteRow {
    pub task_id: String,
    pub idx: i64,
    pub channel: String,
    pub kind: Option<String>,
    pub blob: String,
    pub task_path: String,
}

/// A checkpoint with the blobs its `channel_versions` name and its pending writes.
#[derive(Debug, Clone)]
pub struct CheckpointTuple {
    pub checkpoint: CheckpointRow,
    pub blobs: Vec<BlobRow>,
    pub pending_writes: Vec<WriteRow>,
}

/// Which checkpoints of a thread a list returns (newest first).
#[derive(Debug, Clone)]
pub struct CheckpointFilter {
    /// One namespace, or every namespace of the thread.
    pub checkpoint_ns: Option<String>,
    /// Only checkpoints older than this one (ids order by time).
    pub before: Option<String>,
    /// JSON containment in the checkpoint's metadata.
    pub metadata: Option<Map<String, Value>>,
    pub limit: u32,
}

/// A checkpoint to store with the blobs of the channels it changed.
#[derive(Debug, Clone)]
pub struct NewCheckpoint {
    pub checkpoint: CheckpointRow,
    pub blobs: Vec<BlobRow>,
}

/// Writes of one checkpoint's tasks. With `upsert` a write replaces the one of its (task, idx);
/// without, the one already there stays (a task's writes are replayed as they were).
#[derive(Debug, Clone)]
pub struct NewWrites {
    pub checkpoint_ns: String,
    pub checkpoint_id: String,
    pub writes: Vec<WriteRow>,
    pub upsert: bool,
}

const CHECKPOINT_COLUMNS: &str =
    "checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata";

fn checkpoint_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<CheckpointRow> {
    Ok(CheckpointRow {
        checkpoint_ns: r.get(0)?,
        checkpoint_id: r.get(1)?,
        parent_checkpoint_id: r.get(2)?,
        checkpoint: r.get(3)?,
        metadata: r.get(4)?,
    })
}

/// The checkpoint `checkpoint_id` of a thread's namespace, or its newest without one.
fn checkpoint(
    conn: &Db,
    session_pk: i64,
    ns: &str,
    checkpoint_id: Option<&str>,
) -> Result<Option<CheckpointRow>> {
    let row = match checkpoint_id {
        Some(id) => conn
            .prepare_cached(&format!(
                "SELECT {CHECKPOINT_COLUMNS} FROM agentex_checkpoints
                 WHERE session_pk = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
            ))?
            .query_row(params![session_pk, ns, id], checkpoint_from_row)
            .optional()?,
        None => conn
            .prepare_cached(&format!(
                "SELECT {CHECKPOINT_COLUMNS} FROM agentex_checkpoints
                 WHERE session_pk = ?1 AND checkpoint_ns = ?2
                 ORDER BY checkpoint_id DESC LIMIT 1"
            ))?
            .query_row(params![session_pk, ns], checkpoint_from_row)
            .optional()?,
    };
    Ok(row)
}

/// The `(channel, version)` pairs a stored checkpoint's `channel_versions` names (versions are
/// strings; a number is read as its text, as LangGraph's PostgreSQL checkpointer does).
fn channel_versions(checkpoint: &str) -> Vec<(String, String)> {
    let Ok(Value::Object(doc)) = serde_json::from_str::<Value>(checkpoint) else {
        return Vec::new();
    };
    let Some(Value::Object(versions)) = doc.get("channel_versions") else {
        return Vec::new();
    };
    let mut pairs: Vec<(String, String)> = versions
        .iter()
        .filter_map(|(channel, v)| match v {
            Value::String(s) => Some((channel.clone(), s.clone())),
            Value::Number(n) => Some((channel.clone(), n.to_string())),
            _ => None,
        })
        .collect();
    pairs.sort();
    pairs
}

fn blobs(conn: &Db, session_pk: i64, ns: &str, pairs: &[(String, String)]) -> Result<Vec<BlobRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT channel, version, type, blob FROM agentex_checkpoint_blobs
         WHERE session_pk = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4",
    )?;
    let mut out = Vec::with_capacity(pairs.len());
    for (channel, version) in pairs {
        let found = stmt
            .query_row(params![session_pk, ns, channel, version], |r| {
                Ok(BlobRow {
                    channel: r.get(0)?,
                    version: r.get(1)?,
                    kind: r.get(2)?,
                    blob: r.get(3)?,
                })
            })
            .optional()?;
        out.extend(found);
    }
    Ok(out)
}

/// A checkpoint's pending writes in the order LangGraph replays them: by task path, task, index.
fn writes(conn: &Db, session_pk: i64, ns: &str, checkpoint_id: &str) -> Result<Vec<WriteRow>> {
    let mut stmt = conn.prepare_cached(
        "SELECT task_id, idx, channel, type, blob, task_path FROM agentex_checkpoint_writes
         WHERE session_pk = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3
         ORDER BY task_path, task_id, idx",
    )?;
    let rows = stmt.query_map(params![session_pk, ns, checkpoint_id], |r| {
        Ok(WriteRow {
            task_id: r.get(0)?,
            idx: r.get(1)?,
            channel: r.get(2)?,
            kind: r.get(3)?,
            blob: r.get(4)?,
            task_path: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

fn tuple(
    conn: &Db,
    session_pk: i64,
    ns: &str,
    checkpoint_id: Option<&str>,
) -> Result<Option<CheckpointTuple>> {
    let Some(cp) = checkpoint(conn, session_pk, ns, checkpoint_id)? else {
        return Ok(None);
    };
    let blobs = blobs(conn, session_pk, ns, &channel_versions(&cp.checkpoint))?;
    let pending_writes = writes(conn, session_pk, ns, &cp.checkpoint_id)?;
    Ok(Some(CheckpointTuple {
        checkpoint: cp,
        blobs,
        pending_writes,
    }))
}

fn list(conn: &Db, session_pk: i64, f: &CheckpointFilter) -> Result<Vec<CheckpointRow>> {
    let mut sql =
        format!("SELECT {CHECKPOINT_COLUMNS} FROM agentex_checkpoints WHERE session_pk = ?");
    let mut args = vec![SqlValue::Integer(session_pk)];
    if let Some(ns) = &f.checkpoint_ns {
        sql.push_str(" AND checkpoint_ns = ?");
        args.push(SqlValue::Text(ns.clone()));
    }
    if let Some(before) = &f.before {
        sql.push_str(" AND checkpoint_id < ?");
        args.push(SqlValue::Text(before.clone()));
    }
    if let Some(filter) = &f.metadata {
        for cond in super::listing::containment(conn.dialect(), "metadata", &[], filter, &mut args)?
        {
            sql.push_str(" AND ");
            sql.push_str(&cond);
        }
    }
    sql.push_str(" ORDER BY checkpoint_id DESC, checkpoint_ns DESC LIMIT ?");
    args.push(SqlValue::Integer(i64::from(f.limit)));
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), checkpoint_from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// Whether the task's session is still there (a write to a deleted task is a 404, not a broken
/// foreign key).
fn thread_exists(conn: &Db, session_pk: i64) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM sessions WHERE pk = ?1")?
        .exists([session_pk])?)
}

impl Tx<'_> {
    /// Stores a checkpoint (replacing the checkpoint and metadata of one with the same id, as
    /// LangGraph's checkpointer does) and its blobs (a channel's version, once stored, stays).
    fn put_checkpoint(&mut self, key: &SessionKey, c: &NewCheckpoint) -> Result<()> {
        if !thread_exists(self.conn, key.pk)? {
            return Err(Error::NotFound);
        }
        let cp = &c.checkpoint;
        let mut blob = self.conn.prepare_cached(
            "INSERT INTO agentex_checkpoint_blobs
               (session_pk, checkpoint_ns, channel, version, type, blob)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (session_pk, checkpoint_ns, channel, version) DO NOTHING",
        )?;
        for b in &c.blobs {
            blob.execute(params![
                key.pk,
                cp.checkpoint_ns,
                b.channel,
                b.version,
                b.kind,
                b.blob
            ])?;
        }
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_checkpoints
                   (session_pk, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint,
                    metadata, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
                 ON CONFLICT (session_pk, checkpoint_ns, checkpoint_id) DO UPDATE SET
                   checkpoint = excluded.checkpoint, metadata = excluded.metadata,
                   updated_at = excluded.updated_at",
            )?
            .execute(params![
                key.pk,
                cp.checkpoint_ns,
                cp.checkpoint_id,
                cp.parent_checkpoint_id,
                cp.checkpoint,
                cp.metadata,
                self.now
            ])?;
        Ok(())
    }

    fn put_checkpoint_writes(&mut self, key: &SessionKey, w: &NewWrites) -> Result<()> {
        if !thread_exists(self.conn, key.pk)? {
            return Err(Error::NotFound);
        }
        let on_conflict = if w.upsert {
            "DO UPDATE SET channel = excluded.channel, type = excluded.type,
               blob = excluded.blob, task_path = excluded.task_path"
        } else {
            "DO NOTHING"
        };
        let mut stmt = self.conn.prepare_cached(&format!(
            "INSERT INTO agentex_checkpoint_writes
               (session_pk, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, blob,
                task_path)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (session_pk, checkpoint_ns, checkpoint_id, task_id, idx) {on_conflict}"
        ))?;
        for x in &w.writes {
            stmt.execute(params![
                key.pk,
                w.checkpoint_ns,
                w.checkpoint_id,
                x.task_id,
                x.idx,
                x.channel,
                x.kind,
                x.blob,
                x.task_path
            ])?;
        }
        Ok(())
    }

    fn delete_checkpoint_thread(&mut self, key: &SessionKey) -> Result<()> {
        if !thread_exists(self.conn, key.pk)? {
            return Err(Error::NotFound);
        }
        for table in [
            "agentex_checkpoint_writes",
            "agentex_checkpoint_blobs",
            "agentex_checkpoints",
        ] {
            self.conn
                .prepare_cached(&format!("DELETE FROM {table} WHERE session_pk = ?1"))?
                .execute([key.pk])?;
        }
        Ok(())
    }
}

/// The LangGraph checkpoints of tasks, in sessiond's own types. Reads run on a pooled read-only
/// connection; each write is one whole unit of work on the writer.
#[derive(Clone, Copy)]
pub struct LanggraphStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// The LangGraph checkpoints agents keep per task (`/agentex/checkpoints`).
    pub fn langgraph(&self) -> LanggraphStore<'_> {
        LanggraphStore { store: self }
    }
}

impl LanggraphStore<'_> {
    /// A thread's checkpoint by id, or its newest in the namespace, with its blobs and pending
    /// writes.
    pub async fn tuple(
        &self,
        session_pk: i64,
        checkpoint_ns: &str,
        checkpoint_id: Option<&str>,
    ) -> Result<Option<CheckpointTuple>> {
        let (ns, id) = (checkpoint_ns.to_owned(), checkpoint_id.map(str::to_owned));
        self.store
            .read(move |c| tuple(c, session_pk, &ns, id.as_deref()))
            .await
    }

    /// A thread's checkpoints, newest first.
    pub async fn list(
        &self,
        session_pk: i64,
        filter: CheckpointFilter,
    ) -> Result<Vec<CheckpointRow>> {
        self.store.read(move |c| list(c, session_pk, &filter)).await
    }

    /// Stores a checkpoint and its blobs in one transaction (404 when the task is gone).
    pub async fn put(&self, key: SessionKey, c: NewCheckpoint) -> Result<()> {
        self.store
            .write(move |tx| tx.put_checkpoint(&key, &c))
            .await
    }

    /// Stores a checkpoint's writes in one transaction (404 when the task is gone).
    pub async fn put_writes(&self, key: SessionKey, w: NewWrites) -> Result<()> {
        self.store
            .write(move |tx| tx.put_checkpoint_writes(&key, &w))
            .await
    }

    /// Deletes a thread's checkpoints, blobs and writes, in every namespace.
    pub async fn delete_thread(&self, key: SessionKey) -> Result<()> {
        self.store
            .write(move |tx| tx.delete_checkpoint_thread(&key))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blobs_are_looked_up_by_the_checkpoints_channel_versions() {
        let cp = r#"{"v": 4, "channel_versions": {"b": "2.0", "a": 1, "c": null}}"#;
        assert_eq!(
            channel_versions(cp),
            vec![("a".into(), "1".into()), ("b".into(), "2.0".into())]
        );
        assert!(channel_versions(r#"{"v": 4}"#).is_empty());
        assert!(channel_versions("not json").is_empty());
    }
}
