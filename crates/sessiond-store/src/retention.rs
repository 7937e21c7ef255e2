//! Retention as the store sees it (migration 0017): a workspace's policy, a session's pin, the
//! sessions a sweep may remove now, and the removal of one of them only while it still may be.
//!
//! A session is never a candidate while it is pinned, is its agent's default session, has a turn
//! running or an input queued; and the unit that removes it checks all of that again inside its
//! transaction (with the session's row held), so a turn claimed after the sweep read its
//! candidates is never cut off.

use super::sql::{Db, OptionalExtension, params};
use super::{RowLock, SessionKey, Tx};
use crate::error::{Error, Result};

/// What a sweep does with the sessions a policy removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetentionAction {
    Delete,
    /// Written to an archive file first, then deleted.
    Archive,
}

impl RetentionAction {
    pub fn name(self) -> &'static str {
        match self {
            RetentionAction::Delete => "delete",
            RetentionAction::Archive => "archive",
        }
    }

    pub fn parse(name: &str) -> Option<RetentionAction> {
        match name {
            "delete" => Some(RetentionAction::Delete),
            "archive" => Some(RetentionAction::Archive),
            _ => None,
        }
    }
}

super::sql::from_sql_by_name!(RetentionAction: "retention action");

/// A workspace's retention policy. A rule that is `None` is off; a policy with both off is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionPolicy {
    /// Remove sessions unchanged for longer than this (milliseconds).
    pub idle_ms: Option<i64>,
    /// Keep the newest this many sessions of each agent (by last change), whatever their age.
    pub keep_latest: Option<i64>,
    pub action: RetentionAction,
}

/// A workspace that has a policy.
#[derive(Debug, Clone)]
pub struct PolicyRow {
    pub workspace_id: String,
    pub workspace_slug: String,
    pub policy: RetentionPolicy,
}

/// A session a policy removes now.
#[derive(Debug, Clone)]
pub struct RetentionCandidate {
    pub id: String,
    pub agent_slug: String,
    pub title: String,
    /// When the session last changed (its row's `updated_at`), epoch milliseconds.
    pub updated_at: i64,
    /// Its newest event when it was read: a removal finds it unchanged or leaves it.
    pub last_event_seq: u64,
}

/// Whether a session is exempt from every policy right now, and what a policy compares.
const AT_REST: &str = "s.turn_active = 0 AND s.pinned = 0
    AND NOT EXISTS (SELECT 1 FROM default_sessions d WHERE d.session_id = s.id)
    AND NOT EXISTS (SELECT 1 FROM pending_inputs p WHERE p.session_pk = s.pk)";

/// Whether at least `?3` sessions of the agent changed after `(updated_at, id)`: the session is
/// outside its agent's newest `keep_latest`. Bounded by `?3` rows however many the agent has
/// (the agent's index reads its newest first, and those are the newer ones).
const OUTSIDE_NEWEST: &str = "EXISTS (SELECT 1 FROM sessions n WHERE n.agent_id = s.agent_id
    AND (n.updated_at > s.updated_at OR (n.updated_at = s.updated_at AND n.id > s.id))
    LIMIT 1 OFFSET ?3 - 1)";

/// The keep rule of `p` as SQL (true when it is off) and its count (`?3`).
fn keep_rule(p: &RetentionPolicy) -> (&'static str, i64) {
    match p.keep_latest {
        Some(k) if k > 0 => (OUTSIDE_NEWEST, k),
        _ => ("?3 = 0", 0),
    }
}

fn policy_of(r: &super::sql::Row<'_>, at: usize) -> super::sql::Result<RetentionPolicy> {
    Ok(RetentionPolicy {
        idle_ms: r.get(at)?,
        keep_latest: r.get(at + 1)?,
        action: r.get(at + 2)?,
    })
}

fn candidates(
    c: &Db,
    workspace_id: &str,
    p: &RetentionPolicy,
    now: i64,
    limit: u32,
) -> Result<Vec<RetentionCandidate>> {
    if p.idle_ms.is_none() && p.keep_latest.is_none() {
        return Ok(Vec::new());
    }
    // A rule that is off never stops a session: the oldest time after now, no count.
    let before = p.idle_ms.map_or(i64::MAX, |ms| now.saturating_sub(ms));
    let (keep_sql, keep) = keep_rule(p);
    let sql = format!(
        "SELECT s.id, a.slug, s.title, s.updated_at, s.last_event_seq
         FROM sessions s JOIN agents a ON a.id = s.agent_id
         WHERE s.workspace_id = ?1 AND s.updated_at < ?2 AND {AT_REST} AND {keep_sql}
         ORDER BY s.updated_at, s.id
         LIMIT ?4"
    );
    let rows = c
        .prepare_cached(&sql)?
        .query_map(params![workspace_id, before, keep, i64::from(limit)], |r| {
            Ok(RetentionCandidate {
                id: r.get(0)?,
                agent_slug: r.get(1)?,
                title: r.get(2)?,
                updated_at: r.get(3)?,
                last_event_seq: r.get::<_, i64>(4)? as u64,
            })
        })?
        .collect::<super::sql::Result<Vec<_>>>()?;
    Ok(rows)
}

impl Tx<'_> {
    /// Deletes the session only while the policy still removes it: at rest, unpinned, not a
    /// default, unchanged since it was read (its row's `updated_at`, and its newest event, which
    /// an append earlier in the same batch has not written to the row yet), outside its agent's
    /// newest `keep_latest`.
    fn delete_if_removable(
        &mut self,
        workspace_id: &str,
        c: &RetentionCandidate,
        p: &RetentionPolicy,
    ) -> Result<Option<SessionKey>> {
        let (session_id, updated_at) = (c.id.as_str(), c.updated_at);
        let key = match self.session_key(workspace_id, session_id) {
            Ok(key) => key,
            Err(Error::NotFound) => return Ok(None),
            Err(e) => return Err(e),
        };
        self.lock(RowLock::Session(key.pk))?;
        let newest = self.counters(key.pk)?.map(|n| n.last_event_seq);
        if newest != Some(c.last_event_seq) {
            return Ok(None);
        }
        let (keep_sql, keep) = keep_rule(p);
        let sql = format!(
            "SELECT 1 FROM sessions s WHERE s.pk = ?1 AND s.updated_at = ?2 AND {AT_REST}
               AND {keep_sql}"
        );
        let removable = self
            .conn
            .prepare_cached(&sql)?
            .exists(params![key.pk, updated_at, keep])?;
        if !removable {
            return Ok(None);
        }
        self.delete_session(&key)?;
        // The other processes end the session's streams once this commits.
        #[cfg(feature = "postgres")]
        super::postgres::fanout::announce_deleted(self.conn, &key.id)?;
        Ok(Some(key))
    }
}

/// Retention policies, pins and what a sweep removes.
#[derive(Clone, Copy)]
pub struct RetentionStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// Retention: policies, pins, candidates, guarded removal.
    pub fn retention(&self) -> RetentionStore<'_> {
        RetentionStore { store: self }
    }
}

impl RetentionStore<'_> {
    /// The workspace's policy, if it has one.
    pub async fn policy(&self, workspace_id: &str) -> Result<Option<RetentionPolicy>> {
        let ws = workspace_id.to_owned();
        self.store
            .read(move |c| {
                Ok(c.prepare_cached(
                    "SELECT idle_ms, keep_latest, action FROM retention_policies
                     WHERE workspace_id = ?1",
                )?
                .query_row([ws], |r| policy_of(r, 0))
                .optional()?)
            })
            .await
    }

    /// Sets the workspace's policy; `None` (or both rules off) removes it.
    pub async fn set_policy(&self, workspace_id: &str, p: Option<RetentionPolicy>) -> Result<()> {
        let ws = workspace_id.to_owned();
        self.store
            .write(move |tx| {
                match p.filter(|p| p.idle_ms.is_some() || p.keep_latest.is_some()) {
                    None => {
                        tx.conn.execute(
                            "DELETE FROM retention_policies WHERE workspace_id = ?1",
                            [&ws],
                        )?;
                    }
                    Some(p) => {
                        tx.conn.execute(
                            "INSERT INTO retention_policies
                                (workspace_id, idle_ms, keep_latest, action, updated_at)
                             VALUES (?1, ?2, ?3, ?4, ?5)
                             ON CONFLICT (workspace_id) DO UPDATE SET idle_ms = excluded.idle_ms,
                                keep_latest = excluded.keep_latest, action = excluded.action,
                                updated_at = excluded.updated_at",
                            params![ws, p.idle_ms, p.keep_latest, p.action.name(), tx.now],
                        )?;
                    }
                }
                Ok(())
            })
            .await
    }

    /// Every workspace with a policy.
    pub async fn policies(&self) -> Result<Vec<PolicyRow>> {
        self.store
            .read(move |c| {
                let rows = c
                    .prepare_cached(
                        "SELECT p.workspace_id, w.slug, p.idle_ms, p.keep_latest, p.action
                         FROM retention_policies p JOIN workspaces w ON w.id = p.workspace_id
                         ORDER BY w.slug",
                    )?
                    .query_map([], |r| {
                        Ok(PolicyRow {
                            workspace_id: r.get(0)?,
                            workspace_slug: r.get(1)?,
                            policy: policy_of(r, 2)?,
                        })
                    })?
                    .collect::<super::sql::Result<Vec<_>>>()?;
                Ok(rows)
            })
            .await
    }

    /// At most `limit` sessions of the workspace that `p` removes at `now`, oldest change first.
    pub async fn candidates(
        &self,
        workspace_id: &str,
        p: &RetentionPolicy,
        now: i64,
        limit: u32,
    ) -> Result<Vec<RetentionCandidate>> {
        let (ws, p) = (workspace_id.to_owned(), p.clone());
        self.store
            .read(move |c| candidates(c, &ws, &p, now, limit))
            .await
    }

    /// Whether the session is pinned (404 when the workspace has no such session).
    pub async fn pinned(&self, workspace_id: &str, session_id: &str) -> Result<bool> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .read(move |c| {
                c.prepare_cached("SELECT pinned FROM sessions WHERE workspace_id = ?1 AND id = ?2")?
                    .query_row([ws, id], |r| r.get::<_, i64>(0))
                    .optional()?
                    .map(|p| p != 0)
                    .ok_or(Error::NotFound)
            })
            .await
    }

    /// Pins or unpins the session (404 when the workspace has no such session).
    pub async fn set_pinned(
        &self,
        workspace_id: &str,
        session_id: &str,
        pinned: bool,
    ) -> Result<()> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                tx.conn.execute(
                    "UPDATE sessions SET pinned = ?2 WHERE pk = ?1",
                    params![key.pk, i64::from(pinned)],
                )?;
                Ok(())
            })
            .await
    }

    /// Deletes the session with the deletion unit's own steps (`Tx::delete_session`, the notice
    /// to other processes), only while `p` still removes it; its key when it did.
    pub async fn delete_if_removable(
        &self,
        workspace_id: &str,
        c: &RetentionCandidate,
        p: &RetentionPolicy,
    ) -> Result<Option<SessionKey>> {
        let (ws, c, p) = (workspace_id.to_owned(), c.clone(), p.clone());
        self.store
            .write(move |tx| tx.delete_if_removable(&ws, &c, &p))
            .await
    }
}
