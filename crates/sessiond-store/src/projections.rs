//! Queries of the sessions' projections: the list (with its search), one session's row, the
//! activity view, images, Session record facts, and the facts a turn reads about its session.

use base64::Engine as _;
use serde_json::Value;

use super::record::RecordFacts;
pub use super::turn_status::Bucket;
pub use super::turn_status::TurnStatus;
use super::turn_status::bucket_of;
use super::{ImageRow, JsonColumn, ListFilter, QueueKind, SessionKey, SessionRow, Store, Tx};
use crate::error::{Error, Result};
use crate::timeline::{Behavior, Event, FollowUpQueueItem, ImageData, StoredImageRef};

/// What a session list asks for; the store turns `search` into its own full-text query.
#[derive(Debug, Default, Clone)]
pub struct SessionList {
    pub bucket: Option<Bucket>,
    pub archived_only: bool,
    pub include_archived: bool,
    pub agent_id: Option<String>,
    pub exclude_default: bool,
    /// The user's words: every one must match, the last as a prefix.
    pub search: Option<String>,
    /// Keyset position: rows strictly older than `(created_at, id)`.
    pub after: Option<(i64, String)>,
    pub limit: u32,
}

/// An agent with its prioritised recent sessions and its default chat.
pub struct AgentActivity {
    pub agent_id: String,
    pub sessions: Vec<SessionRow>,
    pub truncated: bool,
    pub chat: Option<SessionRow>,
}

/// Builds an FTS5 query from free text: every word must match, the last one as a prefix.
/// Quoting each word keeps FTS5 syntax (`AND`, `NEAR`, `*`, `"`) from being interpreted.
pub(super) fn fts_query(search: &str) -> Option<String> {
    let words: Vec<&str> = search
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() {
        return None;
    }
    let n = words.len();
    Some(
        words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                if i + 1 == n {
                    format!("\"{w}\"*")
                } else {
                    format!("\"{w}\"")
                }
            })
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// Reads of the sessions' projections.
#[derive(Clone, Copy)]
pub struct ProjectionReads<'a> {
    store: &'a Store,
}

impl Store {
    /// Queries of the sessions' projections.
    pub fn projections(&self) -> ProjectionReads<'_> {
        ProjectionReads { store: self }
    }
}

impl ProjectionReads<'_> {
    /// One page of the workspace's sessions as `user_id` sees them, newest first, and whether
    /// more follow.
    pub async fn list(
        &self,
        workspace_id: &str,
        user_id: &str,
        q: SessionList,
    ) -> Result<(Vec<SessionRow>, bool)> {
        let filter = ListFilter {
            bucket: q.bucket.map(|b| b.name().to_owned()),
            archived_only: q.archived_only,
            include_archived: q.include_archived,
            agent_id: q.agent_id,
            exclude_default: q.exclude_default,
            fts_query: q.search.as_deref().and_then(fts_query),
            after: q.after,
            limit: q.limit,
        };
        if filter.fts_query.is_some() {
            // Search reads its own writes: the prompts still waiting for the index go in first.
            self.store.flush_prompts().await;
        }
        let (ws, user) = (workspace_id.to_owned(), user_id.to_owned());
        self.store
            .read(move |c| super::list_sessions(c, &ws, &user, &filter))
            .await
    }

    /// A session of the workspace as `user_id` sees it (404 otherwise).
    pub async fn session(
        &self,
        workspace_id: &str,
        session_id: &str,
        user_id: &str,
    ) -> Result<SessionRow> {
        let (ws, id, user) = (
            workspace_id.to_owned(),
            session_id.to_owned(),
            user_id.to_owned(),
        );
        self.store
            .read(move |c| super::session_row(c, &ws, &id, &user))
            .await
    }

    /// A session's row by its key, without a reader's marker.
    pub async fn session_by_pk(&self, pk: i64) -> Result<Option<SessionRow>> {
        self.store
            .read(move |c| super::session_row_by_pk(c, pk, None))
            .await
    }

    /// Every agent of the workspace with its prioritised recent sessions (at most
    /// `limit_per_agent`) and its default chat.
    pub async fn activity(
        &self,
        workspace_id: &str,
        user_id: &str,
        limit_per_agent: u32,
    ) -> Result<Vec<AgentActivity>> {
        let (ws, user) = (workspace_id.to_owned(), user_id.to_owned());
        self.store
            .read(move |c| {
                let mut out = Vec::new();
                for agent in super::agents(c, &ws)? {
                    let mut sessions = super::agent_activity(c, &agent.id, &user, limit_per_agent)?;
                    let truncated = sessions.len() > limit_per_agent as usize;
                    sessions.truncate(limit_per_agent as usize);
                    let chat = match super::default_session_id(c, &agent.id)? {
                        Some(id) => super::session_row(c, &ws, &id, &user).ok(),
                        None => None,
                    };
                    out.push(AgentActivity {
                        agent_id: agent.id,
                        sessions,
                        truncated,
                        chat,
                    });
                }
                Ok(out)
            })
            .await
    }

    /// A stored image of a session.
    pub async fn image(&self, session_pk: i64, storage_id: &str) -> Result<Option<ImageRow>> {
        let id = storage_id.to_owned();
        self.store
            .read(move |c| super::image(c, session_pk, &id))
            .await
    }

    /// The Session record facts of one session.
    pub async fn record_facts(&self, pk: i64) -> Result<Option<RecordFacts>> {
        self.store
            .read(move |c| super::record::record_facts(c, pk))
            .await
    }

    /// The Session record facts of several sessions, in one read.
    pub async fn record_facts_of(&self, pks: Vec<i64>) -> Result<Vec<RecordFacts>> {
        self.store
            .read(move |c| super::record::record_facts_of(c, &pks))
            .await
    }

    /// The session that started `session_id`, if any.
    pub async fn parent_session(
        &self,
        workspace_id: &str,
        session_id: &str,
    ) -> Result<Option<String>> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .read(move |c| super::parent_session(c, &ws, &id))
            .await
    }

    /// What the session's engine remembers between turns.
    pub async fn engine_memo(&self, pk: i64) -> Result<Option<String>> {
        self.store.read(move |c| super::engine_memo(c, pk)).await
    }
}

/// The images of a queued prompt as `FollowUpQueueItem.images` wants them: base64 data and type,
/// read back from the prompt's stored images.
fn queued_images(tx: &Tx<'_>, key: &SessionKey, seq: u64) -> Result<Option<Vec<ImageData>>> {
    let Some(body) = super::event_body(tx.conn, key.pk, seq)? else {
        return Ok(None);
    };
    let refs: Vec<StoredImageRef> = serde_json::from_str::<Value>(&body)
        .ok()
        .and_then(|v| serde_json::from_value(v.get("images")?.clone()).ok())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        if let Some(img) = super::image(tx.conn, key.pk, &r.storage_id)? {
            out.push(ImageData {
                data: base64::engine::general_purpose::STANDARD.encode(&img.data),
                mime_type: img.mime_type,
            });
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

/// The fields of a session's row derived from its turn, its machine and its queued inputs (the
/// bucket, the follow-up queue), kept in step with the timeline in the same transaction by
/// whichever unit of work changes what they derive from.
impl Tx<'_> {
    /// Sets the turn status and the bucket derived from it (and from the machine, when present).
    pub(crate) fn set_turn(&mut self, key: &SessionKey, turn: TurnStatus) -> Result<()> {
        let machine = self.json_column(key, JsonColumn::Machine)?;
        let bucket = bucket_of(turn, machine.as_deref());
        self.set_turn_status(key, turn.name(), bucket.name())
    }

    /// [`Tx::set_turn`] for a session whose row this job has read (and not changed since): no
    /// write when the row shows `turn` already.
    pub(crate) fn show_turn(
        &mut self,
        key: &SessionKey,
        row: &super::SessionRow,
        turn: TurnStatus,
    ) -> Result<()> {
        match shown_change(row, row.machine.as_deref(), turn) {
            Some((turn, bucket)) => self.set_turn_status(key, turn.name(), bucket.name()),
            None => Ok(()),
        }
    }

    /// Recomputes `followUpQueue` from the follow-up prompts still waiting (their text and
    /// images); when it changed, stores it and appends a `follow_up_queue` event.
    pub(crate) fn refresh_follow_up_queue(&mut self, key: &SessionKey) -> Result<()> {
        let pending = self.pending_inputs(key)?;
        let current = self.json_column(key, JsonColumn::FollowUpQueue)?;
        self.refresh_follow_up_queue_from(key, &pending, current.as_deref())
    }

    /// [`Tx::refresh_follow_up_queue`] from what this job has read already: the session's queued
    /// inputs and its stored `followUpQueue` (JSON).
    pub(crate) fn refresh_follow_up_queue_from(
        &mut self,
        key: &SessionKey,
        pending: &[super::inputs::PendingInput],
        current: Option<&str>,
    ) -> Result<()> {
        let mut queue: Vec<FollowUpQueueItem> = Vec::new();
        for p in pending {
            if !(matches!(p.kind, QueueKind::Message | QueueKind::Initial)
                && p.behavior == Behavior::FollowUp)
            {
                continue;
            }
            queue.push(FollowUpQueueItem {
                images: queued_images(self, key, p.seq)?,
                message: p.text.clone(),
            });
        }
        let current: Vec<FollowUpQueueItem> = current
            .and_then(|c| serde_json::from_str(c).ok())
            .unwrap_or_default();
        if current == queue {
            return Ok(());
        }
        let doc = serde_json::to_string(&queue).map_err(|e| Error::Internal(e.to_string()))?;
        self.set_json_column(key, JsonColumn::FollowUpQueue, Some(&doc))?;
        self.append(
            key,
            &Event::FollowUpQueue {
                follow_up_queue: queue,
            },
        )?;
        Ok(())
    }
}

/// The turn status and bucket to write so that `row` shows `turn` (with the machine projection
/// `machine`), or `None` when it shows them already: an `UPDATE` that names the bucket rewrites
/// the two indexes on it even when the value stays.
pub(crate) fn shown_change(
    row: &super::SessionRow,
    machine: Option<&str>,
    turn: TurnStatus,
) -> Option<(TurnStatus, Bucket)> {
    let bucket = bucket_of(turn, machine);
    (row.turn_status != turn || row.bucket != bucket.name()).then_some((turn, bucket))
}

#[cfg(test)]
mod tests {
    use super::{Bucket, TurnStatus, fts_query};

    #[test]
    fn machine_wins_over_turn_r12() {
        let derive = |t: &str, m| Bucket::derive(TurnStatus::parse(t).unwrap(), m).name();
        assert_eq!(derive("complete", Some("running")), "running");
        assert_eq!(derive("complete", Some("waiting")), "asking");
        assert_eq!(derive("running", Some("sleeping")), "scheduled");
        assert_eq!(derive("ask", Some("idle")), "asking");
    }

    #[test]
    fn turn_mapping() {
        let derive = |t: &str| Bucket::derive(TurnStatus::parse(t).unwrap(), None).name();
        assert_eq!(derive("running"), "running");
        assert_eq!(derive("ask"), "asking");
        assert_eq!(derive("sleep"), "scheduled");
        assert_eq!(derive("complete"), "done");
        assert_eq!(derive("interrupted"), "done");
    }

    #[test]
    fn fts_query_quotes_words() {
        assert_eq!(
            fts_query("release notes").as_deref(),
            Some("\"release\" \"notes\"*")
        );
        assert_eq!(
            fts_query("AND OR \"x"),
            Some("\"AND\" \"OR\" \"x\"*".into())
        );
        assert_eq!(fts_query("  ***  "), None);
    }
}
