//! Read-side operations: list, detail, history, activity and images.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::{Actor, Sessions};
use crate::error::{Error, Result};
use crate::sessions::view::HistoryPage;
use crate::store::{self, ImageRow, ListFilter, SessionRow};

#[derive(Debug, Clone, Default)]
pub struct ListQuery {
    pub cursor: Option<String>,
    pub limit: u32,
    pub search: Option<String>,
    pub bucket: Option<String>,
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
fn encode_cursor(row: &SessionRow) -> String {
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

/// Builds an FTS5 query from free text: every word must match, the last one as a prefix.
/// Quoting each word keeps FTS5 syntax (`AND`, `NEAR`, `*`, `"`) from being interpreted.
pub fn fts_query(search: &str) -> Option<String> {
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

impl Sessions {
    pub async fn list(
        &self,
        actor: &Actor,
        q: ListQuery,
    ) -> Result<(Vec<SessionRow>, Option<String>)> {
        let after = q.cursor.as_deref().map(decode_cursor).transpose()?;
        let filter = ListFilter {
            bucket: q.bucket,
            archived_only: q.archived_only,
            include_archived: q.include_archived,
            agent_id: q.agent_id,
            exclude_default: q.exclude_default,
            fts_query: q.search.as_deref().and_then(fts_query),
            after,
            limit: q.limit,
        };
        let ws = actor.workspace_id.clone();
        let user = actor.user_id.clone();
        let (rows, more) = self
            .store
            .read(move |c| store::list_sessions(c, &ws, &user, &filter))
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
        let ws = actor.workspace_id.clone();
        let user = actor.user_id.clone();
        let id = session_id.to_owned();
        self.store
            .read(move |c| store::session_row(c, &ws, &id, &user))
            .await
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
        self.store
            .read(move |c| match q {
                HistoryQuery::Forward { cursor, limit } => {
                    let mut events = store::events_after(c, pk, cursor, limit + 1)?;
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
                    let mut events = store::events_before(c, pk, before, limit + 1)?;
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
            })
            .await
    }

    /// Every agent of the workspace with its prioritised recent sessions and its default chat.
    pub async fn activity(
        &self,
        actor: &Actor,
        limit_per_agent: u32,
    ) -> Result<Vec<AgentActivity>> {
        let ws = actor.workspace_id.clone();
        let user = actor.user_id.clone();
        self.store
            .read(move |c| {
                let mut out = Vec::new();
                for agent in store::agents(c, &ws)? {
                    let mut sessions = store::agent_activity(c, &agent.id, &user, limit_per_agent)?;
                    let truncated = sessions.len() > limit_per_agent as usize;
                    sessions.truncate(limit_per_agent as usize);
                    let chat = match store::default_session_id(c, &agent.id)? {
                        Some(id) => store::session_row(c, &ws, &id, &user).ok(),
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

    pub async fn image(
        &self,
        actor: &Actor,
        session_id: &str,
        storage_id: &str,
    ) -> Result<ImageRow> {
        let row = self.detail_row(actor, session_id).await?;
        let storage_id = storage_id.to_owned();
        self.store
            .read(move |c| store::image(c, row.pk, &storage_id))
            .await?
            .ok_or(Error::NotFound)
    }
}

pub struct AgentActivity {
    pub agent_id: String,
    pub sessions: Vec<SessionRow>,
    pub truncated: bool,
    pub chat: Option<SessionRow>,
}

#[cfg(test)]
mod tests {
    use super::fts_query;

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
