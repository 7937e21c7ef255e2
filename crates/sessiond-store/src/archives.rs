//! Portable archives as the store sees them: a session's stored facts read whole (its row's
//! columns, its images, which turn took which input, its background tasks), and one session
//! written back from an archive in one transaction with its ids, seqs and timestamps as they
//! were.
//!
//! A session's row is carried as its columns by name (both backends have the same columns, see
//! `migrations/postgres/0001_init.sql`), less what belongs to the server it lived on: its
//! primary key, its workspace and agent (carried by slug), and a running turn's lease.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use super::sql::{Db, OptionalExtension, Value as SqlValue, params, params_from_iter};
use super::{SessionKey, Tx};
use crate::error::{Error, Result};

/// The session row's integer columns an archive carries (`NOT NULL` ones marked `true`).
pub const INT_COLUMNS: [(&str, bool); 16] = [
    ("archived_at", false),
    ("created_at", true),
    ("updated_at", true),
    ("last_event_seq", true),
    ("last_output_seq", true),
    ("last_delivered_input_seq", true),
    ("turn_generation", true),
    ("wake_at", false),
    ("next_task_id", true),
    ("budget_cents", true),
    ("closed_at", false),
    ("stopped_at", false),
    ("last_terminal_seq", true),
    ("last_message_at", false),
    ("turn_active", true),
    // Archives made before pins existed have none: 0.
    ("pinned", false),
];

/// The session row's text columns an archive carries (`NOT NULL` ones marked `true`).
pub const TEXT_COLUMNS: [(&str, bool); 33] = [
    ("id", true),
    ("user_id", true),
    ("title", true),
    ("title_origin", true),
    ("title_status", true),
    ("turn_status", true),
    ("bucket", true),
    ("cwd", false),
    ("created_by_session_id", false),
    ("tier", false),
    ("mode", true),
    ("delivery_attempt", false),
    ("todos", false),
    ("follow_up_queue", false),
    ("requested_machine", false),
    ("machine_state", false),
    ("machine", false),
    ("engine_state", false),
    ("engine_memo", false),
    ("usage_totals", false),
    ("source", false),
    ("attribution_type", false),
    ("attribution_id", false),
    ("metadata", false),
    ("parent_kind", false),
    ("parent_session_id", false),
    ("handed_off_to", false),
    ("stopped_by", false),
    ("engine", false),
    ("webhook_type", false),
    ("webhook_id", false),
    ("attribution_user", false),
    // The runner that ran the session's last turn (the record's `runner_id`); its lease
    // (`turn_lease_until`) belongs to the server it ran on and is not carried.
    ("turn_owner", false),
];

/// The agent a session belongs to, as another server finds or makes it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortableAgent {
    pub id: String,
    pub slug: String,
    pub name: String,
}

/// One background task of a session (`tasks`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortableTask {
    pub id: String,
    pub body: String,
    pub status: String,
}

/// A session's stored facts beyond its timeline: what an archive's `store.json` holds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortableSession {
    pub agent: PortableAgent,
    /// The row's columns by name ([`INT_COLUMNS`], [`TEXT_COLUMNS`]).
    pub columns: Map<String, Json>,
    /// `[input seq, turn_started seq]`: which turn took each input.
    #[serde(default)]
    pub input_turns: Vec<[i64; 2]>,
    #[serde(default)]
    pub tasks: Vec<PortableTask>,
    /// Whether the session was its agent's default session.
    #[serde(default)]
    pub default: bool,
}

/// An inline image of a session (`images`), addressed by its storage id.
#[derive(Debug, Clone, PartialEq)]
pub struct PortableImage {
    pub storage_id: String,
    pub mime_type: String,
    pub data: Vec<u8>,
}

/// One session read for an archive.
#[derive(Debug, Clone)]
pub struct SessionSnapshot {
    pub pk: i64,
    pub stored: PortableSession,
    pub images: Vec<PortableImage>,
    /// A turn is running or an input waits for one: the session is not at rest.
    pub busy: bool,
}

/// One event to write back: as the history shows it.
#[derive(Debug, Clone)]
pub struct ImportedEvent {
    pub seq: u64,
    pub created_at: i64,
    pub event_type: String,
    pub body: String,
}

/// One session to write back from an archive.
#[derive(Debug, Clone)]
pub struct ImportedSession {
    pub stored: PortableSession,
    pub events: Vec<ImportedEvent>,
    pub images: Vec<PortableImage>,
    /// `(seq, prompt)` of each `prompt_submitted`, for search.
    pub prompts: Vec<(u64, String)>,
}

/// What importing one session did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Imported {
    Created,
    /// The workspace holds a session with this id already; nothing was written.
    AlreadyPresent,
}

/// Where a session id stands on this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdPlace {
    Free,
    ThisWorkspace,
    OtherWorkspace,
}

fn json_of(v: SqlValue) -> Json {
    match v {
        SqlValue::Null => Json::Null,
        SqlValue::Integer(i) => Json::from(i),
        SqlValue::Real(f) => Json::from(f),
        SqlValue::Text(t) => Json::String(t),
        SqlValue::Blob(_) => Json::Null,
    }
}

fn snapshot(c: &Db, workspace_id: &str, session_id: &str) -> Result<SessionSnapshot> {
    let names: Vec<&str> = INT_COLUMNS
        .iter()
        .chain(TEXT_COLUMNS.iter())
        .map(|(n, _)| *n)
        .collect();
    let cols = names
        .iter()
        .map(|n| format!("s.{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    let n_int = INT_COLUMNS.len();
    let sql = format!(
        "SELECT s.pk, a.id, a.slug, a.name,
            EXISTS (SELECT 1 FROM default_sessions d WHERE d.session_id = s.id),
            EXISTS (SELECT 1 FROM pending_inputs p WHERE p.session_pk = s.pk),
            {cols}
         FROM sessions s JOIN agents a ON a.id = s.agent_id
         WHERE s.workspace_id = ?1 AND s.id = ?2"
    );
    let found = c
        .prepare(&sql)?
        .query_row(params![workspace_id, session_id], |r| {
            let mut columns = Map::new();
            for (i, name) in names.iter().enumerate() {
                let v = if i < n_int {
                    r.get::<_, Option<i64>>(6 + i)?
                        .map_or(SqlValue::Null, SqlValue::Integer)
                } else {
                    r.get::<_, Option<String>>(6 + i)?
                        .map_or(SqlValue::Null, SqlValue::Text)
                };
                columns.insert((*name).to_owned(), json_of(v));
            }
            Ok((
                r.get::<_, i64>(0)?,
                PortableAgent {
                    id: r.get(1)?,
                    slug: r.get(2)?,
                    name: r.get(3)?,
                },
                r.get::<_, bool>(4)?,
                r.get::<_, bool>(5)?,
                columns,
            ))
        })
        .optional()?;
    let (pk, agent, default, queued, columns) = found.ok_or(Error::NotFound)?;
    let running = columns.get("turn_active").and_then(Json::as_i64) == Some(1);
    let input_turns = c
        .prepare_cached(
            "SELECT input_seq, turn_started_seq FROM input_turns WHERE session_pk = ?1
             ORDER BY input_seq",
        )?
        .query_map([pk], |r| Ok([r.get::<_, i64>(0)?, r.get::<_, i64>(1)?]))?
        .collect::<super::sql::Result<Vec<_>>>()?;
    let tasks = c
        .prepare_cached("SELECT id, body, status FROM tasks WHERE session_pk = ?1 ORDER BY id")?
        .query_map([pk], |r| {
            Ok(PortableTask {
                id: r.get(0)?,
                body: r.get(1)?,
                status: r.get(2)?,
            })
        })?
        .collect::<super::sql::Result<Vec<_>>>()?;
    let images = c
        .prepare_cached(
            "SELECT storage_id, mime_type, data FROM images WHERE session_pk = ?1
             ORDER BY storage_id",
        )?
        .query_map([pk], |r| {
            Ok(PortableImage {
                storage_id: r.get(0)?,
                mime_type: r.get(1)?,
                data: r.get(2)?,
            })
        })?
        .collect::<super::sql::Result<Vec<_>>>()?;
    Ok(SessionSnapshot {
        pk,
        stored: PortableSession {
            agent,
            columns,
            input_turns,
            tasks,
            default,
        },
        images,
        busy: running || queued,
    })
}

fn id_place(c: &Db, workspace_id: &str, session_id: &str) -> Result<IdPlace> {
    let ws: Option<String> = c
        .prepare_cached("SELECT workspace_id FROM sessions WHERE id = ?1")?
        .query_row([session_id], |r| r.get(0))
        .optional()?;
    Ok(match ws {
        None => IdPlace::Free,
        Some(w) if w == workspace_id => IdPlace::ThisWorkspace,
        Some(_) => IdPlace::OtherWorkspace,
    })
}

/// A column's value from the archive's JSON, checked against its kind.
fn column_value(name: &str, int: bool, required: bool, v: Option<&Json>) -> Result<SqlValue> {
    let bad = |why: &str| Error::invalid(format!("store.json: columns/{name}: {why}"));
    match v {
        None | Some(Json::Null) if required => Err(bad("required")),
        None | Some(Json::Null) => Ok(SqlValue::Null),
        Some(Json::Number(n)) if int => n
            .as_i64()
            .map(SqlValue::Integer)
            .ok_or_else(|| bad("not a 64-bit integer")),
        Some(Json::String(s)) if !int => Ok(SqlValue::Text(s.clone())),
        Some(_) if int => Err(bad("must be an integer")),
        Some(_) => Err(bad("must be a string")),
    }
}

impl Tx<'_> {
    fn import_session(&mut self, workspace_id: &str, s: &ImportedSession) -> Result<Imported> {
        let cols = &s.stored.columns;
        let id = cols
            .get("id")
            .and_then(Json::as_str)
            .ok_or_else(|| Error::invalid("store.json: columns/id: required"))?
            .to_owned();
        match id_place(self.conn, workspace_id, &id)? {
            IdPlace::ThisWorkspace => return Ok(Imported::AlreadyPresent),
            IdPlace::OtherWorkspace => return Err(elsewhere(&id)),
            IdPlace::Free => {}
        }
        let agent_id = self.agent_for_import(workspace_id, &s.stored.agent)?;
        let mut names = vec!["workspace_id", "agent_id"];
        let mut values = vec![
            SqlValue::Text(workspace_id.to_owned()),
            SqlValue::Text(agent_id.clone()),
        ];
        for (name, required) in INT_COLUMNS {
            names.push(name);
            // A turn cannot be running on a server that never ran it.
            values.push(if name == "turn_active" {
                SqlValue::Integer(0)
            } else if name == "pinned" {
                column_value(name, true, false, cols.get(name)).map(|v| match v {
                    SqlValue::Null => SqlValue::Integer(0),
                    v => v,
                })?
            } else {
                column_value(name, true, required, cols.get(name))?
            });
        }
        for (name, required) in TEXT_COLUMNS {
            names.push(name);
            values.push(column_value(name, false, required, cols.get(name))?);
        }
        let marks = (1..=names.len())
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO sessions ({}) VALUES ({marks}) RETURNING pk",
            names.join(", ")
        );
        let pk: i64 = self
            .conn
            .prepare(&sql)?
            .query_row(params_from_iter(values), |r| r.get(0))?;
        let key = SessionKey { pk, id: id.clone() };
        {
            let mut insert = self.conn.prepare_cached(
                "INSERT INTO events (session_pk, seq, type, body, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for e in &s.events {
                insert.execute(params![
                    pk,
                    e.seq as i64,
                    e.event_type,
                    e.body,
                    e.created_at
                ])?;
            }
        }
        for [input, turn] in &s.stored.input_turns {
            self.conn
                .prepare_cached(
                    "INSERT INTO input_turns (session_pk, input_seq, turn_started_seq)
                     VALUES (?1, ?2, ?3)",
                )?
                .execute(params![pk, input, turn])?;
        }
        for t in &s.stored.tasks {
            self.conn
                .prepare_cached(
                    "INSERT INTO tasks (session_pk, id, body, status) VALUES (?1, ?2, ?3, ?4)",
                )?
                .execute(params![pk, t.id, t.body, t.status])?;
        }
        for i in &s.images {
            self.conn
                .prepare_cached(
                    "INSERT INTO images (session_pk, storage_id, mime_type, bytes, data)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![
                    pk,
                    i.storage_id,
                    i.mime_type,
                    i.data.len() as i64,
                    i.data
                ])?;
        }
        let title = cols.get("title").and_then(Json::as_str).unwrap_or_default();
        let insert_title = match self.conn.dialect() {
            super::sql::Dialect::Sqlite => {
                "INSERT INTO session_search (rowid, title) VALUES (?1, ?2)"
            }
            super::sql::Dialect::Postgres => {
                "INSERT INTO session_search (session_pk, title) VALUES (?1, ?2)"
            }
        };
        self.conn
            .prepare_cached(insert_title)?
            .execute(params![pk, title])?;
        for (seq, prompt) in &s.prompts {
            self.index_prompt(&key, *seq, prompt)?;
        }
        if s.stored.default {
            // The agent's default session again, unless it has another one now.
            self.conn
                .prepare_cached(
                    "INSERT INTO default_sessions (agent_id, session_id) VALUES (?1, ?2)
                     ON CONFLICT (agent_id) DO NOTHING",
                )?
                .execute(params![agent_id, id])?;
        }
        Ok(Imported::Created)
    }

    /// The workspace's agent of the archived agent's slug; made (with its archived id when that
    /// id is free, the default engine and the whole drive as its anchor) when missing.
    fn agent_for_import(&mut self, workspace_id: &str, agent: &PortableAgent) -> Result<String> {
        let found: Option<String> = self
            .conn
            .prepare_cached("SELECT id FROM agents WHERE workspace_id = ?1 AND slug = ?2")?
            .query_row(params![workspace_id, agent.slug], |r| r.get(0))
            .optional()?;
        if let Some(id) = found {
            return Ok(id);
        }
        let taken = self
            .conn
            .prepare_cached("SELECT 1 FROM agents WHERE id = ?1")?
            .exists([agent.id.as_str()])?;
        let id = if taken || !crate::ids::looks_like_id(&agent.id) {
            crate::ids::new_id()
        } else {
            agent.id.clone()
        };
        self.conn
            .prepare_cached(
                "INSERT INTO agents (id, workspace_id, slug, name, anchor, created_at)
                 VALUES (?1, ?2, ?3, ?4, '', ?5)",
            )?
            .execute(params![id, workspace_id, agent.slug, agent.name, self.now])?;
        Ok(id)
    }
}

/// 409 for an archived session whose id another workspace of this server holds.
pub fn elsewhere(id: &str) -> Error {
    Error::Conflict(
        "session_exists_elsewhere",
        format!("session {id}: another workspace of this server holds a session with this id"),
    )
}

/// A session's archive facts, the import of archived sessions, retention's candidates.
#[derive(Clone, Copy)]
pub struct ArchiveStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// Portable archives' reads and writes, and retention's candidates.
    pub fn archives(&self) -> ArchiveStore<'_> {
        ArchiveStore { store: self }
    }
}

impl ArchiveStore<'_> {
    /// One session of the workspace, read for an archive (404 when it has none of that id).
    pub async fn snapshot(&self, workspace_id: &str, session_id: &str) -> Result<SessionSnapshot> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store.read(move |c| snapshot(c, &ws, &id)).await
    }

    /// The ids of the workspace's sessions (of one agent, by slug, when given), oldest first.
    pub async fn session_ids(
        &self,
        workspace_id: &str,
        agent_slug: Option<&str>,
    ) -> Result<Vec<String>> {
        let (ws, agent) = (workspace_id.to_owned(), agent_slug.map(str::to_owned));
        self.store
            .read(move |c| {
                let rows = match agent {
                    Some(slug) => c
                        .prepare_cached(
                            "SELECT s.id FROM sessions s JOIN agents a ON a.id = s.agent_id
                             WHERE s.workspace_id = ?1 AND a.slug = ?2
                             ORDER BY s.created_at, s.id",
                        )?
                        .query_map(params![ws, slug], |r| r.get::<_, String>(0))?
                        .collect::<super::sql::Result<Vec<_>>>()?,
                    None => c
                        .prepare_cached(
                            "SELECT id FROM sessions WHERE workspace_id = ?1
                             ORDER BY created_at, id",
                        )?
                        .query_map([ws], |r| r.get::<_, String>(0))?
                        .collect::<super::sql::Result<Vec<_>>>()?,
                };
                Ok(rows)
            })
            .await
    }

    /// Where each of `ids` stands on this server, in order.
    pub async fn id_places(&self, workspace_id: &str, ids: Vec<String>) -> Result<Vec<IdPlace>> {
        let ws = workspace_id.to_owned();
        self.store
            .read(move |c| ids.iter().map(|id| id_place(c, &ws, id)).collect())
            .await
    }

    /// Writes one archived session back, in one transaction: its row, events (seqs, times and
    /// bodies as archived), images, turns, tasks and search rows. A session the workspace holds
    /// already is left as it is ([`Imported::AlreadyPresent`]); one another workspace holds is
    /// a 409 and nothing is written.
    pub async fn import(&self, workspace_id: &str, session: ImportedSession) -> Result<Imported> {
        let ws = workspace_id.to_owned();
        self.store
            .write(move |tx| tx.import_session(&ws, &session))
            .await
    }
}
