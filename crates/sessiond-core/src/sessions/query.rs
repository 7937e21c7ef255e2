//! Read-side operations: list, detail, history, activity and images.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::{Actor, Sessions};
use crate::error::{Error, Result};
use crate::sessions::view::HistoryPage;
pub use crate::store::projections::AgentActivity;
use crate::store::projections::{Bucket, SessionList};
use crate::store::{ImageRow, SessionRow};

#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub cursor: Option<String>,
    pub limit: u32,
    pub search: Option<String>,
    pub bucket: Option<Bucket>,
    pub archived_only: bool,
    /// List archived and unarchived sessions alike.
    pub include_archived: bool,
    pub agent_id: Option<String>,
    pub exclude_default: bool,
}

#[derive(Debug, Clone, Copy)]
pub enum HistoryQuery {
    /// Events with `seq > cursor` (R30).
    Forward { cursor: u64, limit: u32 },
    /// Events with `seq < before`, or the newest page for `before = 0` (R31).
    Backward { before: u64, limit: u32 },
}

/// The list cursor is opaque to clients: base64url of `created_at:id` of the last row served.
pub(super) fn encode_cursor(row: &SessionRow) -> String {
    URL_SAFE_NO_PAD.encode(format!("{}:{}", row.created_at, row.id))
}

fn decode_cursor(cursor: &str) -> Result<(i64, String)> {
    let bad = || Error::invalid("cursor: not a cursor this server issued");
    let raw = URL_SAFE_NO_PAD.decode(cursor).map_err(|_| bad())?;
    let raw = String::from_utf8(raw).map_err(|_| bad())?;
    let (at, id) = raw.split_once(':').ok_or_else(bad)?;
    let at = at.parse::<i64>().map_err(|_| bad())?;
    if !crate::ids::looks_like_id(id) {
        return Err(bad());
    }
    Ok((at, id.to_owned()))
}

impl Sessions {
    pub async fn list(
        &self,
        actor: &Actor,
        q: ListQuery,
    ) -> Result<(Vec<SessionRow>, Option<String>)> {
        let after = q.cursor.as_deref().map(decode_cursor).transpose()?;
        let list = SessionList {
            bucket: q.bucket,
            archived_only: q.archived_only,
            include_archived: q.include_archived,
            agent_id: q.agent_id,
            exclude_default: q.exclude_default,
            search: q.search,
            after,
            limit: q.limit,
        };
        let (rows, more) = self
            .store
            .projections()
            .list(&actor.workspace_id, &actor.user_id, list)
            .await?;
        let next = if more {
            rows.last().map(encode_cursor)
        } else {
            None
        };
        Ok((rows, next))
    }

    pub async fn detail_row(&self, actor: &Actor, session_id: &str) -> Result<SessionRow> {
        if !crate::ids::looks_like_id(session_id) {
            return Err(Error::NotFound);
        }
        Ok(self
            .store
            .projections()
            .session(&actor.workspace_id, session_id, &actor.user_id)
            .await?)
    }

    pub async fn history(
        &self,
        actor: &Actor,
        session_id: &str,
        q: HistoryQuery,
    ) -> Result<HistoryPage> {
        let row = self.detail_row(actor, session_id).await?;
        self.history_of(row.pk, q).await
    }

    pub async fn history_of(&self, pk: i64, q: HistoryQuery) -> Result<HistoryPage> {
        let log = self.store.log();
        match q {
            HistoryQuery::Forward { cursor, limit } => {
                let mut events = log.events_after(pk, cursor, limit + 1).await?;
                let more = events.len() > limit as usize;
                events.truncate(limit as usize);
                let next_cursor = if more {
                    events.last().map(|e| e.seq)
                } else {
                    None
                };
                Ok(HistoryPage {
                    events,
                    next_cursor,
                })
            }
            HistoryQuery::Backward { before, limit } => {
                let before = if before == 0 { None } else { Some(before) };
                let mut events = log.events_before(pk, before, limit + 1).await?;
                let more = events.len() > limit as usize;
                if more {
                    events.remove(0);
                }
                let next_cursor = if more {
                    events.first().map(|e| e.seq)
                } else {
                    None
                };
                Ok(HistoryPage {
                    events,
                    next_cursor,
                })
            }
        }
    }

    /// Every agent of the workspace with its prioritised recent sessions and its default chat.
    pub async fn activity(
        &self,
        actor: &Actor,
        limit_per_agent: u32,
    ) -> Result<Vec<AgentActivity>> {
        Ok(self
            .store
            .projections()
            .activity(&actor.workspace_id, &actor.user_id, limit_per_agent)
            .await?)
    }

    pub async fn image(
        &self,
        actor: &Actor,
        session_id: &str,
        storage_id: &str,
    ) -> Result<ImageRow> {
        let row = self.detail_row(actor, session_id).await?;
        self.store
            .projections()
            .image(row.pk, storage_id)
            .await?
            .ok_or(Error::NotFound)
    }
}
