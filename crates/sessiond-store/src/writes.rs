//! Everything the writer thread does to the database, as methods on [`Tx`].

use super::prompt_rows::{
    PROMPT_CLASS_ENDS, PROMPT_ROWS_JOINED, PROMPT_SEQS, prompt_row_class, prompt_run,
    prompt_search_key,
};
use super::sql::{Dialect, OptionalExtension, ToSql, params};

use super::Tx;
use crate::error::{Error, Result};
use crate::timeline::{Behavior, Event, Tier};
use sessiond_model::frame::Frame;

/// A session as the writer addresses it: the public id and the compact internal key.
/// The lease a turn is claimed with: the claiming process's runner id and how long the lease
/// lasts unless renewed.
#[derive(Debug, Clone)]
pub struct Lease {
    pub owner: String,
    pub ms: u64,
}

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

/// What put an input in the runner's queue (`pending_inputs.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueKind {
    /// A session's first prompt.
    Initial,
    Message,
    Answer,
    /// A sleep's wake (the runner's own).
    Wake,
    /// The next state of a session's machine (the runner's own).
    Machine,
}

impl QueueKind {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueKind::Initial => "initial",
            QueueKind::Message => "message",
            QueueKind::Answer => "answer",
            QueueKind::Wake => "wake",
            QueueKind::Machine => "machine",
        }
    }

    pub fn parse(s: &str) -> Option<QueueKind> {
        match s {
            "initial" => Some(QueueKind::Initial),
            "message" => Some(QueueKind::Message),
            "answer" => Some(QueueKind::Answer),
            "wake" => Some(QueueKind::Wake),
            "machine" => Some(QueueKind::Machine),
            _ => None,
        }
    }

    /// Inputs that come from outside (they are delivered and observed by `/wait`); wakes and
    /// machine states are the runner's own.
    pub(crate) fn is_external(self) -> bool {
        matches!(
            self,
            QueueKind::Initial | QueueKind::Message | QueueKind::Answer
        )
    }
}

super::sql::stored_by_name!(QueueKind: "queue kind");

/// A queued input for the runner.
#[derive(Debug, Clone)]
pub struct NewInput<'a> {
    pub seq: u64,
    pub kind: QueueKind,
    pub behavior: Behavior,
    pub tier: Option<Tier>,
    pub text: &'a str,
    pub images: Option<&'a str>,
    pub not_before: i64,
}

/// The workspace that exists from the first start.
pub const DEFAULT_WORKSPACE: &str = "default";

/// Request ids of queued inputs by `(session pk, seq)`. They serve tracing only, so they live in
/// memory (an input re-delivered after a restart runs under a new id) and the schema does not
/// change; an entry a rolled-back batch left is overwritten by the next input of that seq.
static INPUT_REQUEST_IDS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<(i64, u64), String>>,
> = std::sync::LazyLock::new(Default::default);
/// Past this many waiting inputs the ids are forgotten (their turns get new ones).
const MAX_INPUT_REQUEST_IDS: usize = 100_000;

/// Rows a multi-row append sends in one statement at most ([`Tx::append_all`]): each row count
/// is a statement of its own in a connection's cache.
const APPEND_ROWS: usize = 16;

/// An event's stored body: its JSON, with any NUL an engine's output held replaced (see
/// `crate::nul`).
fn encode_event(event: &Event) -> Result<String> {
    let encode = |e: serde_json::Error| Error::Internal(format!("cannot encode event: {e}"));
    let mut body = serde_json::to_string(event).map_err(encode)?;
    if crate::nul::escaped_in(body.as_bytes()) {
        // Only an engine's output can hold one (requests holding it are refused).
        let mut value: serde_json::Value = serde_json::from_str(&body).map_err(encode)?;
        crate::nul::replace_in(&mut value);
        body = value.to_string();
    }
    Ok(body)
}

/// The counters of a session after an event of `event_type` is appended at `seq`, as far as the
/// projection columns that follow rare events go (terminals, prompts and answers; see
/// `writer::updates_milestone`): reading a session's state never scans its history. They reach
/// the row with the counters, once per batch.
fn milestone(
    c: super::writer::Counters,
    event_type: &str,
    seq: u64,
    now: i64,
) -> super::writer::Counters {
    if crate::timeline::is_terminal_type(event_type) {
        super::writer::Counters {
            last_terminal_seq: Some(seq),
            ..c
        }
    } else if matches!(event_type, "prompt_submitted" | "answer_submitted") {
        super::writer::Counters {
            last_message_at: Some(now),
            ..c
        }
    } else {
        c
    }
}

/// A row a unit of work holds until it ends (see [`Tx::lock`]).
#[derive(Debug, Clone, Copy)]
pub enum RowLock<'a> {
    /// A session's row, by pk.
    Session(i64),
    /// An agent's row: its default session, its schedules.
    Agent(&'a str),
    Schedule(&'a str),
}

impl Tx<'_> {
    /// Finds a workspace by slug, creating it (and its `root` agent, named for what it is: the
    /// agent of the whole drive) when missing.
    pub(crate) fn ensure_workspace(&mut self, slug: &str, name: &str) -> Result<String> {
        if let Some(id) = self
            .conn
            .query_row("SELECT id FROM workspaces WHERE slug = ?1", [slug], |r| {
                r.get(0)
            })
            .optional()?
        {
            return Ok(id);
        }
        // Processes starting at once on one database may both get here: the one whose insert
        // loses waits for the other's commit and reads its workspace.
        let id = crate::ids::new_id();
        let inserted = self
            .conn
            .query_row(
                "INSERT INTO workspaces (id, slug, name, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (slug) DO NOTHING RETURNING id",
                params![id, slug, name, self.now],
                |r| r.get::<_, String>(0),
            )
            .optional()?;
        if inserted.is_none() {
            return Ok(self.conn.query_row(
                "SELECT id FROM workspaces WHERE slug = ?1",
                [slug],
                |r| r.get(0),
            )?);
        }
        self.conn.execute(
            "INSERT INTO agents (id, workspace_id, slug, name, anchor, created_at)
             VALUES (?1, ?2, 'root', 'Workspace agent', '', ?3)",
            params![crate::ids::new_id(), id, self.now],
        )?;
        Ok(id)
    }

    pub fn session_key(&self, workspace_id: &str, session_id: &str) -> Result<SessionKey> {
        super::reads::session_key(self.conn, workspace_id, session_id)
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

    pub fn insert_session(&mut self, s: &NewSession<'_>) -> Result<SessionKey> {
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

    /// Appends one durable event: next seq, projection counters, and a bus frame after COMMIT.
    pub fn append(&mut self, key: &SessionKey, event: &Event) -> Result<u64> {
        let body = encode_event(event)?;
        self.append_raw(key, event.type_name(), &body, !event.is_input())
    }

    /// Appends consecutive events of one session, as many [`Tx::append`]s would, with one
    /// `INSERT` of several rows (up to [`APPEND_ROWS`] a statement) instead of one a event: a
    /// turn's end appends its usage note, its usage and its terminal together. The last seq;
    /// `None` when `events` is empty.
    pub(crate) fn append_all(
        &mut self,
        key: &SessionKey,
        events: &[&Event],
    ) -> Result<Option<u64>> {
        let mut last = None;
        for chunk in events.chunks(APPEND_ROWS) {
            last = Some(match chunk {
                [one] => self.append(key, one)?,
                _ => self.append_rows(key, chunk)?,
            });
        }
        Ok(last)
    }

    fn append_rows(&mut self, key: &SessionKey, events: &[&Event]) -> Result<u64> {
        let bodies = events
            .iter()
            .map(|e| encode_event(e))
            .collect::<Result<Vec<_>>>()?;
        let mut c = self.counters(key.pk)?.ok_or(Error::NotFound)?;
        let seqs: Vec<i64> = (1..=events.len())
            .map(|i| (c.last_event_seq + i as u64) as i64)
            .collect();
        let types: Vec<&str> = events.iter().map(|e| e.type_name()).collect();
        // `OR FAIL` on SQLite: a statement of several rows that may abort half-way (`OR ABORT`,
        // the default) keeps a statement journal, a copy of every page it changes, to undo
        // itself. A failing append fails its job, whose savepoint, or for a job without one the
        // whole batch, is rolled back in any case; the statement need not undo itself first.
        let mut sql = String::from(match self.conn.dialect() {
            Dialect::Sqlite => {
                "INSERT OR FAIL INTO events (session_pk, seq, type, body, created_at) VALUES "
            }
            Dialect::Postgres => {
                "INSERT INTO events (session_pk, seq, type, body, created_at) VALUES "
            }
        });
        let mut args: Vec<&dyn ToSql> = Vec::with_capacity(5 * events.len());
        for i in 0..events.len() {
            let n = 5 * i;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(
                "(?{}, ?{}, ?{}, ?{}, ?{})",
                n + 1,
                n + 2,
                n + 3,
                n + 4,
                n + 5
            ));
            args.extend([
                &key.pk as &dyn ToSql,
                &seqs[i],
                &types[i],
                &bodies[i],
                &self.now,
            ]);
        }
        self.conn
            .prepare_cached(&sql)?
            .execute_later(args.as_slice())?;
        for (i, event) in events.iter().enumerate() {
            let seq = seqs[i] as u64;
            c = self.appended(key, c, types[i], &bodies[i], seq, !event.is_input())?;
        }
        Ok(c.last_event_seq)
    }

    /// Appends an already-encoded event body (`{"type":...}`).
    pub(crate) fn append_raw(
        &mut self,
        key: &SessionKey,
        event_type: &str,
        body: &str,
        output: bool,
    ) -> Result<u64> {
        // The writer keeps the counters; the session row gets them once per batch.
        let c = self.counters(key.pk)?.ok_or(Error::NotFound)?;
        let seq = c.last_event_seq + 1;
        self.conn
            .prepare_cached(
                "INSERT INTO events (session_pk, seq, type, body, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute_later(params![key.pk, seq as i64, event_type, body, self.now])?;
        self.appended(key, c, event_type, body, seq, output)?;
        Ok(seq)
    }

    /// What follows the `INSERT` of an event at `seq` (after counters `c`): the counters moved
    /// on, the webhook messages it is, and its frame for the bus after COMMIT. The new counters.
    fn appended(
        &mut self,
        key: &SessionKey,
        c: super::writer::Counters,
        event_type: &str,
        body: &str,
        seq: u64,
        output: bool,
    ) -> Result<super::writer::Counters> {
        debug_assert_eq!(
            output,
            sessiond_model::frame::settles_tail(event_type),
            "bus::settles_tail disagrees with Event::is_input for {event_type}"
        );
        let c = super::writer::Counters {
            last_event_seq: seq,
            last_output_seq: if output { seq } else { c.last_output_seq },
            ..milestone(c, event_type, seq, self.now)
        };
        self.set_counters(key.pk, c);
        self.outbox_event(key, event_type, body, seq)?;
        let data = format!("{{\"seq\":{seq},\"event\":{body}}}");
        self.publish(&key.id, Frame::durable(seq, event_type, data, self.now));
        Ok(c)
    }

    /// Indexes the prompt of the `prompt_submitted` event at `seq` for search, in a row of the
    /// session's prompt index (see [`Tx::write_prompt_index`] for how rows are kept).
    ///
    /// On SQLite the prompt goes to the search backlog after the batch's last job (see
    /// [`super::writer::QueuedPrompt`]), in the same transaction, and into the index with many
    /// others later (see `prompt_backlog`); on PostgreSQL into the index at once, in the job's
    /// own statements.
    pub(crate) fn index_prompt(&mut self, key: &SessionKey, seq: u64, prompt: &str) -> Result<()> {
        if self.conn.dialect() == Dialect::Postgres {
            return self.write_prompt_index(key, seq, prompt);
        }
        self.prompts.push(super::writer::QueuedPrompt {
            key: key.clone(),
            seq,
            text: prompt.to_owned(),
        });
        Ok(())
    }

    /// Writes a prompt's search row now (see [`Tx::index_prompt`]).
    ///
    /// A full-text index re-reads a row's whole text to change it, so a row that grew by one
    /// prompt at a time would cost its whole size for every prompt. A prompt therefore gets a
    /// row of its own, and the session's newest rows of its [`prompt_row_class`] or smaller are
    /// joined with it into one row (holding them in order, one per line) as soon as they reach
    /// that class's end ([`PROMPT_CLASS_ENDS`]; see [`prompt_run`]). Like the carry of a
    /// counter, the joined row may join the rows before it in turn. A prompt's text is thus
    /// re-indexed about twice per class it climbs (a few times its size in all), and a session's
    /// rows are mostly sealed rows of 1–2 KiB with a few smaller ones after them: a search
    /// gathers about one row per 1–2 KiB of prompts, whatever their lengths and their mix.
    ///
    /// A row is keyed by its session and the seq of its first prompt (on SQLite packed into the
    /// rowid, see [`prompt_search_key`]; on PostgreSQL the key's two columns). A prompt whose key
    /// does not fit (a session pk past 2^31 or a seq past 2^32, far beyond what one machine
    /// writes) is left out of search rather than failing the write that carries it.
    pub(super) fn write_prompt_index(
        &mut self,
        key: &SessionKey,
        seq: u64,
        prompt: &str,
    ) -> Result<()> {
        let postgres = self.conn.dialect() == Dialect::Postgres;
        // The key range of the session's rows before this prompt, in the dialect's terms.
        let (lo, row) = if postgres {
            (0, seq as i64)
        } else {
            match (prompt_search_key(key.pk, 0), prompt_search_key(key.pk, seq)) {
                (Some(lo), Some(row)) => (lo, row),
                _ => {
                    tracing::warn!(
                        session = %key.id,
                        seq,
                        "prompt not indexed for search: its key is out of range"
                    );
                    return Ok(());
                }
            }
        };
        let sql = PromptRowSql::of(postgres);
        // The row being written: its key and text. Joining it with the rows before it makes a
        // row of a higher class, which may join the rows before it in turn (the carry).
        let (mut row, mut text) = (row, prompt.to_owned());
        loop {
            // A sealed row joins nothing: no need to read the rows before it.
            if prompt_row_class(text.len()) == PROMPT_CLASS_ENDS.len() {
                break;
            }
            let newest: Vec<(i64, i64)> = self
                .conn
                .prepare_cached(sql.newest)?
                .query_map(params![key.pk, lo, row], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<super::sql::Result<_>>()?;
            let Some((first, bytes)) = prompt_run(&newest, text.len()) else {
                break;
            };
            let mut joined = String::with_capacity(bytes);
            for part in self
                .conn
                .prepare_cached(sql.texts)?
                .query_map(params![key.pk, first, row], |r| r.get::<_, String>(0))?
            {
                joined.push_str(&part?);
                joined.push('\n');
            }
            joined.push_str(&text);
            self.conn
                .prepare_cached(sql.delete)?
                .execute(params![key.pk, first, row])?;
            (row, text) = (first, joined);
        }
        self.conn
            .prepare_cached(sql.insert)?
            .execute_later(params![key.pk, row, text])?;
        Ok(())
    }

    /// Rewrites the title a session is searched by.
    fn index_title(&mut self, key: &SessionKey, title: &str) -> Result<()> {
        let sql = match self.conn.dialect() {
            Dialect::Sqlite => "UPDATE session_search SET title = ?2 WHERE rowid = ?1",
            Dialect::Postgres => "UPDATE session_search SET title = ?2 WHERE session_pk = ?1",
        };
        self.conn
            .prepare_cached(sql)?
            .execute(params![key.pk, title])?;
        Ok(())
    }

    /// Sets the turn status and the bucket (derived by [`Tx::set_turn`]).
    pub(super) fn set_turn_status(
        &mut self,
        key: &SessionKey,
        turn_status: &str,
        bucket: &str,
    ) -> Result<()> {
        let counters = self.unwritten_counters(key.pk);
        let [events, outputs, terminal, message] = super::writer::Counters::columns(counters);
        self.conn
            .prepare_cached(
                "UPDATE sessions SET turn_status = ?2, bucket = ?3, updated_at = ?4,
                    last_event_seq = COALESCE(?5, last_event_seq),
                    last_output_seq = COALESCE(?6, last_output_seq),
                    last_terminal_seq = COALESCE(?7, last_terminal_seq),
                    last_message_at = COALESCE(?8, last_message_at)
                 WHERE pk = ?1",
            )?
            .execute_later(params![
                key.pk,
                turn_status,
                bucket,
                self.now,
                events,
                outputs,
                terminal,
                message
            ])?;
        if counters.is_some() {
            self.counters_written(key.pk);
        }
        Ok(())
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
    pub fn json_column(&self, key: &SessionKey, column: JsonColumn) -> Result<Option<String>> {
        let sql = format!("SELECT {} FROM sessions WHERE pk = ?1", column.name());
        Ok(self
            .conn
            .prepare_cached(&sql)?
            .query_row([key.pk], |r| r.get(0))
            .optional()?
            .flatten())
    }

    pub fn set_tier(&mut self, key: &SessionKey, tier: Tier) -> Result<()> {
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

    pub fn set_archived(&mut self, key: &SessionKey, archived: bool) -> Result<()> {
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
    pub fn mark_read(&mut self, key: &SessionKey, user_id: &str, seq: u64) -> Result<u64> {
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

    pub fn record_client_request(
        &mut self,
        workspace_id: &str,
        client_request_id: &str,
        fingerprint: &str,
        session_id: &str,
        input_seq: u64,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO client_requests (workspace_id, client_request_id, fingerprint, session_id,
                    input_seq, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute_later(params![
                workspace_id,
                client_request_id,
                fingerprint,
                session_id,
                input_seq as i64,
                self.now
            ])?;
        Ok(())
    }

    /// Stores an inline image once per session (content-addressed).
    pub(crate) fn put_image(
        &mut self,
        key: &SessionKey,
        storage_id: &str,
        mime_type: &str,
        data: &[u8],
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO images (session_pk, storage_id, mime_type, bytes, data)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
            )?
            .execute(params![
                key.pk,
                storage_id,
                mime_type,
                data.len() as i64,
                data
            ])?;
        Ok(())
    }

    pub fn enqueue_input(&mut self, key: &SessionKey, input: &NewInput<'_>) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO pending_inputs (session_pk, seq, kind, behavior, tier, text, images, not_before)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute_later(params![
                key.pk,
                input.seq as i64,
                input.kind,
                input.behavior,
                input.tier,
                input.text,
                input.images,
                input.not_before
            ])?;
        if let Some(id) = &self.request_id {
            let mut ids = INPUT_REQUEST_IDS.lock().unwrap_or_else(|p| p.into_inner());
            if ids.len() >= MAX_INPUT_REQUEST_IDS {
                ids.clear();
            }
            ids.insert((key.pk, input.seq), id.clone());
        }
        Ok(())
    }

    /// The id of the HTTP request that stored a queued input, taken as the input is (`None` for
    /// the runner's own, and after a restart).
    pub(crate) fn input_request_id(&self, key: &SessionKey, seq: u64) -> Result<Option<String>> {
        Ok(INPUT_REQUEST_IDS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(key.pk, seq)))
    }

    /// Every queued input of a session, oldest first.
    ///
    /// On PostgreSQL the read is made without bitmap scans. A queue churns — an input in and out
    /// every turn — and until autovacuum comes by (once a minute at most) the table's index keeps
    /// an entry for every row removed. A bitmap scan, which the planner prefers for so small a
    /// table, visits each of those rows' pages on every read; a plain index scan marks the
    /// entries of dead rows as it passes them and skips them from then on (`bench_multi`, one
    /// process: 33.5 µs → 3.7 µs a read in `pg_stat_statements`, two reads a turn). The setting
    /// is the transaction's for this one statement: both `SET`s travel with the statements around
    /// them.
    pub fn pending_inputs(&self, key: &SessionKey) -> Result<Vec<PendingInput>> {
        let postgres = self.conn.dialect() == Dialect::Postgres;
        if postgres {
            self.conn
                .prepare_cached("SET LOCAL enable_bitmapscan = off")?
                .execute_later(())?;
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, kind, behavior, tier, text, not_before FROM pending_inputs
             WHERE session_pk = ?1 ORDER BY seq",
        )?;
        let rows = stmt.query_map([key.pk], PendingInput::from_row)?;
        let pending = rows.collect::<super::sql::Result<_>>()?;
        if postgres {
            self.conn
                .prepare_cached("SET LOCAL enable_bitmapscan TO DEFAULT")?
                .execute_later(())?;
        }
        Ok(pending)
    }

    pub fn remove_input(&mut self, key: &SessionKey, seq: u64) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM pending_inputs WHERE session_pk = ?1 AND seq = ?2")?
            .execute_later(params![key.pk, seq as i64])?;
        Ok(())
    }

    pub fn remove_inputs_of_kind(&mut self, key: &SessionKey, kind: QueueKind) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM pending_inputs WHERE session_pk = ?1 AND kind = ?2")?
            .execute(params![key.pk, kind])?;
        Ok(())
    }

    /// Starts a turn: bumps the fencing generation and marks the session active, in the same
    /// write the input delivered (`through_seq` and its attempt, for an input from a client) and
    /// the turn status and bucket the session shows now (when they change: see
    /// [`super::projections::shown_change`]). `None`, with nothing written, when a turn is
    /// already active.
    pub(crate) fn claim_turn(
        &mut self,
        key: &SessionKey,
        lease: &Lease,
        delivered: Option<(u64, &str)>,
        shown: Option<(super::TurnStatus, super::turn_status::Bucket)>,
    ) -> Result<Option<u64>> {
        // The claim's appends came first: the row takes their counters (see
        // `Tx::unwritten_counters`).
        macro_rules! claim {
            ($shown:literal) => {
                concat!(
                    "UPDATE sessions SET turn_generation = turn_generation + 1, turn_active = 1,
                        wake_at = NULL, turn_owner = ?2, turn_lease_until = ?3,
                        last_delivered_input_seq = max(last_delivered_input_seq, ?4),
                        delivery_attempt = COALESCE(?5, delivery_attempt),
                        last_event_seq = COALESCE(?6, last_event_seq),
                        last_output_seq = COALESCE(?7, last_output_seq),
                        last_terminal_seq = COALESCE(?8, last_terminal_seq),
                        last_message_at = COALESCE(?9, last_message_at)",
                    $shown,
                    " WHERE pk = ?1 AND turn_active = 0 RETURNING turn_generation"
                )
            };
        }
        let counters = self.unwritten_counters(key.pk);
        let [events, outputs, terminal, message] = super::writer::Counters::columns(counters);
        let (through_seq, attempt) = match delivered {
            Some((seq, attempt)) => (seq as i64, Some(attempt)),
            None => (0, None),
        };
        let lease_until = self.now + lease.ms as i64;
        let mut args: Vec<&dyn ToSql> = vec![
            &key.pk,
            &lease.owner,
            &lease_until,
            &through_seq,
            &attempt,
            &events,
            &outputs,
            &terminal,
            &message,
        ];
        let (turn, bucket) = shown.map(|(t, b)| (t.name(), b.name())).unzip();
        let sql = if shown.is_some() {
            args.extend([&turn as &dyn ToSql, &bucket, &self.now]);
            claim!(", turn_status = ?10, bucket = ?11, updated_at = ?12")
        } else {
            claim!("")
        };
        let generation: Option<i64> = self
            .conn
            .prepare_cached(sql)?
            .query_row(args.as_slice(), |r| r.get(0))
            .optional()?;
        if generation.is_some() && counters.is_some() {
            self.counters_written(key.pk);
        }
        Ok(generation.map(|g| g as u64))
    }

    /// Takes over the active turn of the process `dead_owner` (known to be gone), so that this
    /// job may end it: true when that process still holds it.
    pub(crate) fn take_turn_of(
        &mut self,
        key: &SessionKey,
        owner: &str,
        dead_owner: &str,
    ) -> Result<bool> {
        let taken = self
            .conn
            .prepare_cached(
                "UPDATE sessions SET turn_owner = ?2 WHERE pk = ?1 AND turn_active = 1
                   AND turn_owner = ?3 RETURNING pk",
            )?
            .query_row(params![key.pk, owner, dead_owner], |r| r.get::<_, i64>(0))
            .optional()?;
        Ok(taken.is_some())
    }

    /// Takes over a turn whose process is gone, so that this job may end it: true when the turn
    /// is still active and, with `expired_before`, its lease ran out before then. Two processes
    /// that find the same expired turn both ask; the session row's lock orders them and the
    /// second finds the turn ended.
    pub(crate) fn take_lost_turn(
        &mut self,
        key: &SessionKey,
        owner: &str,
        expired_before: Option<i64>,
    ) -> Result<bool> {
        let taken = match expired_before {
            None => self
                .conn
                .prepare_cached(
                    "UPDATE sessions SET turn_owner = ?2 WHERE pk = ?1 AND turn_active = 1
                     RETURNING pk",
                )?
                .query_row(params![key.pk, owner], |r| r.get::<_, i64>(0)),
            Some(before) => self
                .conn
                .prepare_cached(
                    "UPDATE sessions SET turn_owner = ?2 WHERE pk = ?1 AND turn_active = 1
                       AND (turn_lease_until IS NULL OR turn_lease_until < ?3)
                     RETURNING pk",
                )?
                .query_row(params![key.pk, owner, before], |r| r.get::<_, i64>(0)),
        }
        .optional()?;
        Ok(taken.is_some())
    }

    /// Refuses a write from a turn that no longer holds the session (fencing, invariant 8).
    pub(crate) fn check_generation(&self, key: &SessionKey, generation: u64) -> Result<()> {
        let current: Option<(i64, bool)> = self
            .conn
            .prepare_cached("SELECT turn_generation, turn_active FROM sessions WHERE pk = ?1")?
            .query_row([key.pk], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        match current {
            Some((g, true)) if g as u64 == generation => Ok(()),
            Some(_) => Err(Error::StaleTurn),
            None => Err(Error::NotFound),
        }
    }

    /// What ending a turn starts from: the turn's fence checked (as [`Tx::check_generation`])
    /// and, read in the same statement, the session's usage totals and machine projection.
    pub(crate) fn turn_ending(&self, key: &SessionKey, generation: u64) -> Result<TurnEnding> {
        // On PostgreSQL the read locks the row, so that the fence it checks holds until the
        // turn's end is written, and brings the counters the terminal's append needs.
        let postgres = self.conn.dialect() == Dialect::Postgres;
        let sql = if postgres {
            "SELECT turn_generation, turn_active, usage_totals, machine, last_event_seq,
                last_output_seq
             FROM sessions WHERE pk = ?1 FOR NO KEY UPDATE"
        } else {
            "SELECT turn_generation, turn_active, usage_totals, machine, last_event_seq,
                last_output_seq
             FROM sessions WHERE pk = ?1"
        };
        let current = self
            .conn
            .prepare_cached(sql)?
            .query_row([key.pk], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, bool>(1)?,
                    TurnEnding {
                        usage_totals: r.get(2)?,
                        machine: r.get(3)?,
                    },
                    [r.get::<_, i64>(4)? as u64, r.get::<_, i64>(5)? as u64],
                ))
            })
            .optional()?
            .map(|(g, active, ending, [events, outputs])| {
                if postgres {
                    self.locked_counters(key.pk, events, outputs);
                }
                (g, active, ending)
            });
        match current {
            Some((g, true, ending)) if g as u64 == generation => Ok(ending),
            Some(_) => Err(Error::StaleTurn),
            None => Err(Error::NotFound),
        }
    }

    /// Ends the active turn and shows where the session stands, in one write of its row: the
    /// turn released (what its engine remembers, a sleep's wake), the turn status and bucket, and
    /// the usage totals when the turn added to them. The terminal event is appended by the
    /// caller in the same job.
    pub(crate) fn end_turn(&mut self, key: &SessionKey, end: &TurnEnd<'_>) -> Result<()> {
        // The terminal was the job's last append: the row takes its counters now.
        let counters = self.unwritten_counters(key.pk);
        let [events, outputs, terminal, message] = super::writer::Counters::columns(counters);
        self.conn
            .prepare_cached(
                "UPDATE sessions SET turn_active = 0, engine_state = ?2, wake_at = ?3,
                    turn_status = ?4, bucket = ?5, updated_at = ?6,
                    usage_totals = COALESCE(?7, usage_totals),
                    last_event_seq = COALESCE(?8, last_event_seq),
                    last_output_seq = COALESCE(?9, last_output_seq),
                    last_terminal_seq = COALESCE(?10, last_terminal_seq),
                    last_message_at = COALESCE(?11, last_message_at)
                 WHERE pk = ?1",
            )?
            .execute_later(params![
                key.pk,
                end.engine_state,
                end.wake_at,
                end.turn.name(),
                super::turn_status::bucket_of(end.turn, end.machine).name(),
                self.now,
                end.usage_totals,
                events,
                outputs,
                terminal,
                message
            ])?;
        if counters.is_some() {
            self.counters_written(key.pk);
        }
        Ok(())
    }

    pub fn set_delivered(
        &mut self,
        key: &SessionKey,
        through_seq: u64,
        attempt: &str,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE sessions SET last_delivered_input_seq = max(last_delivered_input_seq, ?2),
                    delivery_attempt = ?3 WHERE pk = ?1",
            )?
            .execute(params![key.pk, through_seq as i64, attempt])?;
        Ok(())
    }

    /// What the session's engine remembers between turns (read with [`super::engine_memo`]).
    pub(crate) fn set_engine_memo(&mut self, key: &SessionKey, memo: Option<&str>) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE sessions SET engine_memo = ?2 WHERE pk = ?1")?
            .execute(params![key.pk, memo])?;
        Ok(())
    }

    /// Adds one call's usage to the session's running totals.
    pub(crate) fn add_usage(
        &mut self,
        key: &SessionKey,
        usage: &crate::timeline::Usage,
    ) -> Result<()> {
        let current: Option<String> = self
            .conn
            .prepare_cached("SELECT usage_totals FROM sessions WHERE pk = ?1")?
            .query_row([key.pk], |r| r.get(0))?;
        let doc = usage_added(current.as_deref(), usage)?;
        self.conn
            .prepare_cached("UPDATE sessions SET usage_totals = ?2 WHERE pk = ?1")?
            .execute(params![key.pk, doc])?;
        Ok(())
    }

    pub fn engine_state(&self, key: &SessionKey) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT engine_state FROM sessions WHERE pk = ?1")?
            .query_row([key.pk], |r| r.get(0))?)
    }

    /// The projection row as the runner needs it while holding the writer.
    pub(crate) fn session_row(&self, key: &SessionKey) -> Result<super::SessionRow> {
        let mut row =
            super::reads::session_row_by_pk(self.conn, key.pk, None)?.ok_or(Error::NotFound)?;
        if let Some(c) = self.pending_counters(key.pk) {
            row.last_event_seq = c.last_event_seq;
            row.last_output_seq = c.last_output_seq;
        }
        Ok(row)
    }
}

/// What [`Tx::turn_ending`] reads besides the fence.
pub(crate) struct TurnEnding {
    /// JSON `Usage`: the session's usage totals.
    pub usage_totals: Option<String>,
    /// The session's machine projection (JSON), if it has a machine.
    pub machine: Option<String>,
}

/// How [`Tx::end_turn`] leaves the session.
pub(crate) struct TurnEnd<'a> {
    pub engine_state: Option<&'a str>,
    pub wake_at: Option<i64>,
    pub turn: super::TurnStatus,
    /// The session's machine projection (JSON) now, which the bucket follows with the turn.
    pub machine: Option<&'a str>,
    /// The new usage totals (JSON `Usage`), when the turn added to them.
    pub usage_totals: Option<&'a str>,
}

/// Usage totals (JSON `Usage`, or none yet) with one call's usage added, as JSON.
pub(crate) fn usage_added(current: Option<&str>, usage: &crate::timeline::Usage) -> Result<String> {
    let mut total: crate::timeline::Usage = current
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    total.add(usage);
    serde_json::to_string(&total).map_err(|e| Error::Internal(e.to_string()))
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

#[derive(Debug, Clone)]
pub struct PendingInput {
    pub seq: u64,
    pub kind: QueueKind,
    pub behavior: Behavior,
    pub tier: Option<Tier>,
    pub text: String,
    pub not_before: i64,
}

impl PendingInput {
    fn from_row(r: &super::sql::Row<'_>) -> super::sql::Result<PendingInput> {
        Ok(PendingInput {
            seq: r.get::<_, i64>(0)? as u64,
            kind: r.get(1)?,
            behavior: r.get(2)?,
            tier: r.get(3)?,
            text: r.get(4)?,
            not_before: r.get(5)?,
        })
    }
}

impl Tx<'_> {
    /// Records that the turn started at `turn_started_seq` took input `input_seq`.
    pub(crate) fn record_input_turn(
        &mut self,
        key: &SessionKey,
        input_seq: u64,
        turn_started_seq: u64,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO input_turns (session_pk, input_seq, turn_started_seq) VALUES (?1, ?2, ?3)
                 ON CONFLICT (session_pk, input_seq) DO UPDATE SET turn_started_seq = excluded.turn_started_seq",
            )?
            .execute_later(params![key.pk, input_seq as i64, turn_started_seq as i64])?;
        Ok(())
    }
}

impl Tx<'_> {
    /// Allocates the next task id of a session (`t1`, `t2`, ...).
    pub(crate) fn next_task_id(&mut self, key: &SessionKey) -> Result<String> {
        let n: i64 = self
            .conn
            .prepare_cached(
                "UPDATE sessions SET next_task_id = next_task_id + 1 WHERE pk = ?1
                 RETURNING next_task_id - 1",
            )?
            .query_row([key.pk], |r| r.get(0))?;
        Ok(format!("t{n}"))
    }

    /// Stores a task's current `Task` document and status.
    pub(crate) fn put_task(
        &mut self,
        key: &SessionKey,
        id: &str,
        body: &str,
        status: &str,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO tasks (session_pk, id, body, status) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (session_pk, id) DO UPDATE SET body = excluded.body, status = excluded.status",
            )?
            .execute(params![key.pk, id, body, status])?;
        Ok(())
    }

    /// Tasks still marked running (e.g. left behind by a crash).
    pub(crate) fn running_tasks(&self, key: &SessionKey) -> Result<Vec<(String, String)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, body FROM tasks WHERE session_pk = ?1 AND status = 'running' ORDER BY id",
        )?;
        let rows = stmt.query_map([key.pk], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<super::sql::Result<_>>()?)
    }

    /// Sets an automatic title unless the title is manual (manual titles are final).
    pub fn set_auto_title(
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
}

impl Tx<'_> {
    pub(crate) fn insert_agent(
        &mut self,
        workspace_id: &str,
        slug: &str,
        name: &str,
        anchor: &str,
        engine: &str,
    ) -> Result<super::AgentRow> {
        let id = crate::ids::new_id();
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO agents (id, workspace_id, slug, name, anchor, engine, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (workspace_id, slug) DO NOTHING",
            )?
            .execute(params![
                id,
                workspace_id,
                slug,
                name,
                anchor,
                engine,
                self.now
            ])?;
        if inserted == 0 {
            return Err(Error::Conflict(
                "agent_exists",
                format!("an agent with slug {slug} already exists"),
            ));
        }
        super::agent_by_id(self.conn, &id)?.ok_or(Error::AgentNotFound)
    }

    pub fn update_agent(
        &mut self,
        agent_id: &str,
        name: &str,
        anchor: &str,
        engine: &str,
    ) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE agents SET name = ?2, anchor = ?3, engine = ?4 WHERE id = ?1")?
            .execute(params![agent_id, name, anchor, engine])?;
        Ok(())
    }

    /// Deletes an agent that owns no sessions (its sessions would lose their owner).
    pub fn delete_agent(&mut self, agent_id: &str) -> Result<()> {
        let sessions: i64 = self.conn.query_row(
            "SELECT count(*) FROM sessions WHERE agent_id = ?1",
            [agent_id],
            |r| r.get(0),
        )?;
        if sessions > 0 {
            return Err(Error::Conflict(
                "agent_has_sessions",
                format!("the agent still owns {sessions} sessions; delete them first"),
            ));
        }
        self.conn.execute(
            "DELETE FROM default_sessions WHERE agent_id = ?1",
            [agent_id],
        )?;
        self.conn
            .execute("DELETE FROM agents WHERE id = ?1", [agent_id])?;
        Ok(())
    }

    /// Holds a row for the rest of the transaction, so that what the unit of work reads next is
    /// what its write replaces, with other units of work waiting. A no-op on SQLite, whose one
    /// writer thread runs each unit of work alone; `SELECT … FOR NO KEY UPDATE` on PostgreSQL,
    /// where units of work of several processes run at once (the weaker lock does not wait for
    /// rows that merely refer to this one, such as a new session of the agent, so foreign-key
    /// checks cannot deadlock with it).
    pub(crate) fn lock(&self, row: RowLock<'_>) -> Result<()> {
        if self.conn.dialect() == Dialect::Sqlite {
            return Ok(());
        }
        match row {
            // Locked by reading the counters, which the unit of work that locks a session
            // usually needs next (one statement instead of two).
            RowLock::Session(pk) => {
                if !self.holds_session_lock(pk) {
                    self.counters(pk)?;
                }
            }
            RowLock::Agent(id) => {
                self.conn
                    .prepare_cached("SELECT 1 FROM agents WHERE id = ?1 FOR NO KEY UPDATE")?
                    .exists([id])?;
            }
            RowLock::Schedule(id) => {
                self.conn
                    .prepare_cached("SELECT 1 FROM schedules WHERE id = ?1 FOR NO KEY UPDATE")?
                    .exists([id])?;
            }
        }
        Ok(())
    }

    /// Points an owner's default alias at a session, or clears it.
    pub(crate) fn set_default(&mut self, agent_id: &str, session_id: Option<&str>) -> Result<()> {
        match session_id {
            Some(sid) => self
                .conn
                .prepare_cached(
                    "INSERT INTO default_sessions (agent_id, session_id) VALUES (?1, ?2)
                     ON CONFLICT (agent_id) DO UPDATE SET session_id = excluded.session_id",
                )?
                .execute(params![agent_id, sid])?,
            None => self
                .conn
                .prepare_cached("DELETE FROM default_sessions WHERE agent_id = ?1")?
                .execute([agent_id])?,
        };
        Ok(())
    }

    pub fn default_session(&self, agent_id: &str) -> Result<Option<String>> {
        super::default_session_id(self.conn, agent_id)
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

    pub fn insert_upload_grant(
        &mut self,
        id: &str,
        token_hash: &str,
        workspace_id: &str,
        prefix: &str,
        expires_at: i64,
    ) -> Result<()> {
        // Expired grants are of no use to anyone; drop them as new ones are minted.
        self.conn
            .prepare_cached("DELETE FROM upload_grants WHERE expires_at < ?1")?
            .execute([self.now - 24 * 3_600_000])?;
        self.conn
            .prepare_cached(
                "INSERT INTO upload_grants (id, token_hash, workspace_id, prefix, expires_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![id, token_hash, workspace_id, prefix, expires_at, self.now])?;
        Ok(())
    }
}

/// The statements of [`Tx::write_prompt_index`] in each dialect. Each takes the session's pk as
/// `?1` (SQLite's statements leave it unused: their rowids hold it) and a key range `?2 ..< ?3`.
struct PromptRowSql {
    /// The newest [`PROMPT_ROWS_JOINED`]` - 1` rows before the key `?3`, newest first: key and
    /// bytes. The limit is written out: SQLite plans a full-text table's query for its `LIMIT`'s
    /// value, so a bound limit would have the statement prepared again at every run.
    newest: &'static str,
    /// The text of the rows in the range, in order.
    texts: &'static str,
    delete: &'static str,
    /// A row at key `?2` with text `?3`.
    insert: &'static str,
}

const _: () = assert!(
    PROMPT_ROWS_JOINED - 1 == 7,
    "the LIMIT of `PromptRowSql::newest`"
);

impl PromptRowSql {
    fn of(postgres: bool) -> PromptRowSql {
        if postgres {
            PromptRowSql {
                newest: "SELECT seq, octet_length(prompts) FROM session_search_prompts
                         WHERE session_pk = ?1 AND seq >= ?2 AND seq < ?3
                         ORDER BY seq DESC LIMIT 7",
                texts: "SELECT prompts FROM session_search_prompts
                        WHERE session_pk = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
                delete: "DELETE FROM session_search_prompts
                         WHERE session_pk = ?1 AND seq >= ?2 AND seq < ?3",
                insert: "INSERT INTO session_search_prompts (session_pk, seq, prompts)
                         VALUES (?1, ?2, ?3)",
            }
        } else {
            PromptRowSql {
                newest: "SELECT rowid, octet_length(prompts) FROM session_search_prompts
                         WHERE rowid >= ?2 AND rowid < ?3
                         ORDER BY rowid DESC LIMIT 7",
                texts: "SELECT prompts FROM session_search_prompts
                        WHERE rowid >= ?2 AND rowid < ?3 ORDER BY rowid",
                delete: "DELETE FROM session_search_prompts
                         WHERE rowid >= ?2 AND rowid < ?3",
                insert: "INSERT INTO session_search_prompts (rowid, prompts)
                         VALUES (?2, ?3)",
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::prompt_run;

    /// The run a row of `bytes` joins among `newest` (lengths, newest first; keyed 1, 2, …).
    fn run(bytes: usize, newest: &[i64]) -> Option<(i64, usize)> {
        let rows: Vec<(i64, i64)> = newest
            .iter()
            .enumerate()
            .map(|(i, &len)| (i as i64 + 1, len))
            .collect();
        prompt_run(&rows, bytes)
    }

    #[test]
    fn a_run_is_joined_when_it_reaches_its_class_end() {
        // Two prompts of 300 bytes make a row of the next class; two of those a sealed one.
        assert_eq!(run(300, &[300]), Some((1, 601)));
        assert_eq!(run(601, &[601]), Some((1, 1203)));
        assert_eq!(run(300, &[]), None);
        // Under the end and fewer than eight: each stays a row of its own.
        assert_eq!(run(100, &[100, 100, 100]), None);
        // Eight rows of one class are joined even under its end.
        assert_eq!(run(3, &[3; 7]), Some((7, 31)));
        assert_eq!(run(3, &[3; 6]), None);
        // A sealed row joins nothing.
        assert_eq!(run(1100, &[300]), None);
    }

    #[test]
    fn a_run_takes_smaller_rows_but_never_a_larger_one() {
        // A short prompt never re-indexes the longer row before it.
        assert_eq!(run(20, &[300]), None);
        assert_eq!(run(300, &[700]), None);
        // Smaller rows count towards the end...
        assert_eq!(run(300, &[20, 300]), Some((2, 622)));
        // ...and once the run is joined, the smaller rows just before it go with it.
        assert_eq!(run(601, &[20, 700, 30, 40]), Some((4, 1395)));
        // Eight mixed rows under the end stay apart (eight is for rows of one class).
        assert_eq!(run(100, &[3; 7]), None);
        // Not past the row's bound.
        assert_eq!(run(1000, &[1000, 40, 40, 40]), Some((2, 2042)));
        assert_eq!(run(1000, &[1000, 60]), Some((1, 2001)));
    }
}
