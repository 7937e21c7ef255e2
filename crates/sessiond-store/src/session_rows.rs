//! A session's row: the key the writer addresses it by, its projection columns as readers see
//! them ([`SessionRow`]), and the statements that create, change and delete it.

use super::Tx;
use super::prompt_rows::{PROMPT_SEQS, prompt_search_key};
use super::sql::{Db, Dialect, OptionalExtension, params};
use crate::error::{Error, Result};
use crate::timeline::Tier;

/// A session as the writer addresses it: the public id and the compact internal key.
#[derive(Debug, Clone)]
pub struct SessionKey {
    pub pk: i64,
    pub id: String,
}

pub struct NewSession<'a> {
    pub id: &'a str,
    pub workspace_id: &'a str,
    pub agent_id: &'a str,
    pub user_id: &'a str,
    pub title: &'a str,
    pub cwd: Option<&'a str>,
    pub created_by_session_id: Option<&'a str>,
    pub tier: Option<Tier>,
    pub mode: &'a str,
    pub requested_machine: Option<&'a str>,
    /// Where the session came from (a Session record's `source`) and who it is attributed to.
    pub source: &'a str,
    pub attribution_type: Option<&'a str>,
    pub attribution_id: Option<&'a str>,
}

impl<'a> NewSession<'a> {
    /// A session with only its place and title: no working directory, parent, tier or machine,
    /// mode `agent`, created through the API (what the benchmarks' seeding and the writer's tests
    /// insert).
    pub fn bare(
        id: &'a str,
        workspace_id: &'a str,
        agent_id: &'a str,
        user_id: &'a str,
        title: &'a str,
    ) -> NewSession<'a> {
        NewSession {
            id,
            workspace_id,
            agent_id,
            user_id,
            title,
            cwd: None,
            created_by_session_id: None,
            tier: None,
            mode: "\"agent\"",
            requested_machine: None,
            source: "api",
            attribution_type: None,
            attribution_id: None,
        }
    }
}

/// Projection columns that hold JSON documents.
#[derive(Debug, Clone, Copy)]
pub enum JsonColumn {
    Todos,
    FollowUpQueue,
    MachineState,
    Machine,
}

impl JsonColumn {
    fn name(self) -> &'static str {
        match self {
            JsonColumn::Todos => "todos",
            JsonColumn::FollowUpQueue => "follow_up_queue",
            JsonColumn::MachineState => "machine_state",
            JsonColumn::Machine => "machine",
        }
    }
}

/// A session's projection row, joined with what a reader needs (agent name, its read marker,
/// whether it is some owner's default).
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub pk: i64,
    pub id: String,
    pub workspace_id: String,
    pub agent_id: String,
    pub agent_name: String,
    pub user_id: String,
    pub title: String,
    pub title_origin: String,
    pub title_status: String,
    pub turn_status: super::TurnStatus,
    pub bucket: String,
    pub archived_at: Option<i64>,
    pub cwd: Option<String>,
    pub created_by_session_id: Option<String>,
    pub tier: Option<crate::timeline::Tier>,
    pub mode: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub last_event_seq: u64,
    pub last_output_seq: u64,
    pub last_delivered_input_seq: u64,
    pub delivery_attempt: Option<String>,
    pub todos: Option<String>,
    pub follow_up_queue: Option<String>,
    pub requested_machine: Option<String>,
    pub machine_state: Option<String>,
    pub machine: Option<String>,
    pub turn_active: bool,
    pub last_read_seq: u64,
    pub is_default: bool,
    /// The runner id of the process that runs (or last ran) the session's turn.
    pub turn_owner: Option<String>,
}

pub(crate) const SESSION_COLUMNS: &str = "s.pk, s.id, s.workspace_id, s.agent_id, a.name, s.user_id, s.title,
    s.title_origin, s.title_status, s.turn_status, s.bucket, s.archived_at, s.cwd,
    s.created_by_session_id, s.tier, s.mode, s.created_at, s.updated_at, s.last_event_seq,
    s.last_output_seq, s.last_delivered_input_seq, s.delivery_attempt, s.todos, s.follow_up_queue,
    s.requested_machine, s.machine_state, s.machine, s.turn_active,
    COALESCE((SELECT m.last_read_seq FROM read_markers m WHERE m.session_pk = s.pk AND m.user_id = :user), 0),
    EXISTS (SELECT 1 FROM default_sessions d WHERE d.session_id = s.id), s.turn_owner";

pub(crate) fn session_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<SessionRow> {
    Ok(SessionRow {
        pk: r.get(0)?,
        id: r.get(1)?,
        workspace_id: r.get(2)?,
        agent_id: r.get(3)?,
        agent_name: r.get(4)?,
        user_id: r.get(5)?,
        title: r.get(6)?,
        title_origin: r.get(7)?,
        title_status: r.get(8)?,
        turn_status: r.get(9)?,
        bucket: r.get(10)?,
        archived_at: r.get(11)?,
        cwd: r.get(12)?,
        created_by_session_id: r.get(13)?,
        tier: r.get(14)?,
        mode: r.get(15)?,
        created_at: r.get(16)?,
        updated_at: r.get(17)?,
        last_event_seq: r.get::<_, i64>(18)? as u64,
        last_output_seq: r.get::<_, i64>(19)? as u64,
        last_delivered_input_seq: r.get::<_, i64>(20)? as u64,
        delivery_attempt: r.get(21)?,
        todos: r.get(22)?,
        follow_up_queue: r.get(23)?,
        requested_machine: r.get(24)?,
        machine_state: r.get(25)?,
        machine: r.get(26)?,
        turn_active: r.get(27)?,
        last_read_seq: r.get::<_, i64>(28)? as u64,
        is_default: r.get(29)?,
        turn_owner: r.get(30)?,
    })
}

pub(crate) fn session_row(
    conn: &Db,
    workspace_id: &str,
    session_id: &str,
    user_id: &str,
) -> Result<SessionRow> {
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions s JOIN agents a ON a.id = s.agent_id
         WHERE s.id = :id AND s.workspace_id = :ws"
    );
    conn.prepare_cached(&sql)?
        .query_row(
            sessiond_sql::named_params! {":id": session_id, ":ws": workspace_id, ":user": user_id},
            session_from_row,
        )
        .optional()?
        .ok_or(Error::NotFound)
}

pub(crate) fn session_row_by_pk(
    conn: &Db,
    pk: i64,
    user_id: Option<&str>,
) -> Result<Option<SessionRow>> {
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions s JOIN agents a ON a.id = s.agent_id WHERE s.pk = :pk"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(
            sessiond_sql::named_params! {":pk": pk, ":user": user_id.unwrap_or("")},
            session_from_row,
        )
        .optional()?)
}

/// The session that started `session_id` (`created_by_session_id`), if any.
pub(crate) fn parent_session(
    conn: &Db,
    workspace_id: &str,
    session_id: &str,
) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT created_by_session_id FROM sessions WHERE id = ?1 AND workspace_id = ?2",
        )?
        .query_row(params![session_id, workspace_id], |r| r.get(0))
        .optional()?
        .flatten())
}

/// A session's key by id, within a workspace (404 otherwise).
pub(crate) fn session_key(
    conn: &Db,
    workspace_id: &str,
    session_id: &str,
) -> Result<super::SessionKey> {
    conn.prepare_cached("SELECT pk FROM sessions WHERE id = ?1 AND workspace_id = ?2")?
        .query_row([session_id, workspace_id], |r| r.get(0))
        .optional()?
        .map(|pk| super::SessionKey {
            pk,
            id: session_id.to_owned(),
        })
        .ok_or(Error::NotFound)
}

impl Tx<'_> {
    pub(crate) fn session_key(&self, workspace_id: &str, session_id: &str) -> Result<SessionKey> {
        session_key(self.conn, workspace_id, session_id)
    }

    /// [`Tx::session_key`] for a unit of work that appends to the session next. On PostgreSQL
    /// the same statement locks the session's row and reads its counters, which [`Tx::lock`]
    /// and the append would otherwise do in a statement of their own.
    pub(crate) fn session_key_to_append(
        &self,
        workspace_id: &str,
        session_id: &str,
    ) -> Result<SessionKey> {
        if self.conn.dialect() == Dialect::Sqlite {
            return self.session_key(workspace_id, session_id);
        }
        let (pk, events, outputs) = self
            .conn
            .prepare_cached(
                "SELECT pk, last_event_seq, last_output_seq FROM sessions
                 WHERE id = ?1 AND workspace_id = ?2 FOR NO KEY UPDATE",
            )?
            .query_row([session_id, workspace_id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)? as u64,
                    r.get::<_, i64>(2)? as u64,
                ))
            })
            .optional()?
            .ok_or(Error::NotFound)?;
        self.locked_counters(pk, events, outputs);
        Ok(SessionKey {
            pk,
            id: session_id.to_owned(),
        })
    }

    pub(crate) fn insert_session(&mut self, s: &NewSession<'_>) -> Result<SessionKey> {
        let pk: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO sessions (id, workspace_id, agent_id, user_id, title, title_origin,
                    title_status, turn_status, bucket, cwd, created_by_session_id, tier, mode,
                    requested_machine, created_at, updated_at, source, attribution_type,
                    attribution_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, 'excerpt', 'complete', 'running', 'running', ?6, ?7,
                    ?8, ?9, ?10, ?11, ?11, ?12, ?13, ?14)
                 RETURNING pk",
            )?
            .query_row(
                params![
                    s.id,
                    s.workspace_id,
                    s.agent_id,
                    s.user_id,
                    s.title,
                    s.cwd,
                    s.created_by_session_id,
                    s.tier,
                    s.mode,
                    s.requested_machine,
                    self.now,
                    s.source,
                    s.attribution_type,
                    s.attribution_id,
                ],
                |r| r.get(0),
            )?;
        let insert_title = match self.conn.dialect() {
            Dialect::Sqlite => "INSERT INTO session_search (rowid, title) VALUES (?1, ?2)",
            Dialect::Postgres => "INSERT INTO session_search (session_pk, title) VALUES (?1, ?2)",
        };
        self.conn
            .prepare_cached(insert_title)?
            .execute(params![pk, s.title])?;
        self.outbox_session_created(s.workspace_id, s.agent_id, s.id)?;
        Ok(SessionKey {
            pk,
            id: s.id.to_owned(),
        })
    }

    /// Writes one projection column that holds JSON (or NULL).
    pub(crate) fn set_json_column(
        &mut self,
        key: &SessionKey,
        column: JsonColumn,
        value: Option<&str>,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE sessions SET {} = ?2, updated_at = ?3 WHERE pk = ?1",
            column.name()
        );
        self.conn
            .prepare_cached(&sql)?
            .execute(params![key.pk, value, self.now])?;
        Ok(())
    }

    /// Reads one projection column that holds JSON.
    pub(crate) fn json_column(
        &self,
        key: &SessionKey,
        column: JsonColumn,
    ) -> Result<Option<String>> {
        let sql = format!("SELECT {} FROM sessions WHERE pk = ?1", column.name());
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row([key.pk], |r| r.get(0))
            .optional()?
            .flatten())
    }

    pub(crate) fn set_tier(&mut self, key: &SessionKey, tier: Tier) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE sessions SET tier = ?2 WHERE pk = ?1")?
            .execute(params![key.pk, tier])?;
        Ok(())
    }

    /// PATCH title: manual titles are final (never regenerated).
    pub(crate) fn set_manual_title(&mut self, key: &SessionKey, title: &str) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE sessions SET title = ?2, title_origin = 'manual', title_status = 'complete',
                    updated_at = ?3 WHERE pk = ?1",
            )?
            .execute(params![key.pk, title, self.now])?;
        self.index_title(key, title)
    }

    pub(crate) fn set_archived(&mut self, key: &SessionKey, archived: bool) -> Result<()> {
        // Archiving twice keeps the first archivedAt (the call is declared idempotent).
        self.conn
            .prepare_cached(
                "UPDATE sessions SET archived_at = CASE WHEN ?2 THEN COALESCE(archived_at, ?3) END,
                    updated_at = ?3 WHERE pk = ?1",
            )?
            .execute(params![key.pk, archived, self.now])?;
        Ok(())
    }

    /// Moves the read marker forward only; returns the marker after the call.
    pub(crate) fn mark_read(&mut self, key: &SessionKey, user_id: &str, seq: u64) -> Result<u64> {
        let seq = seq as i64;
        let marker: i64 = self
            .conn
            .prepare_cached(
                "INSERT INTO read_markers (session_pk, user_id, last_read_seq) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session_pk, user_id)
                 DO UPDATE SET last_read_seq = max(read_markers.last_read_seq, excluded.last_read_seq)
                 RETURNING last_read_seq",
            )?
            .query_row(params![key.pk, user_id, seq], |r| r.get(0))?;
        Ok(marker as u64)
    }

    /// Permanently removes a session, its timeline, inputs, images, markers and default binding.
    pub(crate) fn delete_session(&mut self, key: &SessionKey) -> Result<()> {
        self.outbox_session_deleted(key)?;
        let c = self.conn;
        c.execute("DELETE FROM events WHERE session_pk = ?1", [key.pk])?;
        c.execute("DELETE FROM pending_inputs WHERE session_pk = ?1", [key.pk])?;
        c.execute("DELETE FROM input_turns WHERE session_pk = ?1", [key.pk])?;
        c.execute("DELETE FROM tasks WHERE session_pk = ?1", [key.pk])?;
        c.execute("DELETE FROM images WHERE session_pk = ?1", [key.pk])?;
        c.execute("DELETE FROM read_markers WHERE session_pk = ?1", [key.pk])?;
        if c.dialect() == Dialect::Postgres {
            c.execute("DELETE FROM session_search WHERE session_pk = ?1", [key.pk])?;
            c.execute(
                "DELETE FROM session_search_prompts WHERE session_pk = ?1",
                [key.pk],
            )?;
        } else {
            c.execute("DELETE FROM session_search WHERE rowid = ?1", [key.pk])?;
        }
        if c.dialect() == Dialect::Sqlite {
            c.execute("DELETE FROM prompt_backlog WHERE session_pk = ?1", [key.pk])?;
        }
        if c.dialect() == Dialect::Sqlite
            && let Some(first) = prompt_search_key(key.pk, 0)
        {
            c.execute(
                "DELETE FROM session_search_prompts WHERE rowid BETWEEN ?1 AND ?2",
                [first, first + PROMPT_SEQS - 1],
            )?;
        }
        c.execute(
            "DELETE FROM default_sessions WHERE session_id = ?1",
            [&key.id],
        )?;
        c.execute(
            "DELETE FROM client_requests WHERE session_id = ?1",
            [&key.id],
        )?;
        c.execute("DELETE FROM sessions WHERE pk = ?1", [key.pk])?;
        self.set_counters(
            key.pk,
            super::writer::Counters {
                deleted: true,
                ..Default::default()
            },
        );
        Ok(())
    }

    /// The projection row as the runner needs it while holding the writer.
    pub(crate) fn session_row(&self, key: &SessionKey) -> Result<super::SessionRow> {
        let mut row = session_row_by_pk(self.conn, key.pk, None)?.ok_or(Error::NotFound)?;
        if let Some(c) = self.pending_counters(key.pk) {
            row.last_event_seq = c.last_event_seq;
            row.last_output_seq = c.last_output_seq;
        }
        Ok(row)
    }

    /// Sets an automatic title unless the title is manual (manual titles are final).
    pub(crate) fn set_auto_title(
        &mut self,
        key: &SessionKey,
        title: Option<&str>,
        status: &str,
    ) -> Result<bool> {
        let changed = match title {
            Some(title) => self
                .conn
                .prepare_cached(
                    "UPDATE sessions SET title = ?2, title_origin = 'auto', title_status = ?3,
                        updated_at = ?4 WHERE pk = ?1 AND title_origin <> 'manual'",
                )?
                .execute(params![key.pk, title, status, self.now])?,
            None => self
                .conn
                .prepare_cached(
                    "UPDATE sessions SET title_status = ?2, updated_at = ?3
                     WHERE pk = ?1 AND title_origin <> 'manual'",
                )?
                .execute(params![key.pk, status, self.now])?,
        };
        if changed > 0
            && let Some(title) = title
        {
            self.index_title(key, title)?;
        }
        Ok(changed > 0)
    }

    /// Pins the engine configuration a session runs with instead of its agent's.
    pub(crate) fn pin_session_engine(&mut self, key: &SessionKey, engine: &str) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE sessions SET engine = ?2 WHERE pk = ?1")?
            .execute(params![key.pk, engine])?;
        Ok(())
    }

    /// Moves a session's cwd only if it still is `expected` (compare-and-swap).
    pub(crate) fn swap_cwd(
        &mut self,
        key: &SessionKey,
        expected: Option<&str>,
        cwd: Option<&str>,
    ) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE sessions SET cwd = ?3, updated_at = ?4 WHERE pk = ?1 AND cwd IS ?2",
            )?
            .execute(params![key.pk, expected, cwd, self.now])?;
        Ok(n == 1)
    }
}
