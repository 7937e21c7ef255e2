//! Queries on read-only connections. Pagination is keyset only.

use rusqlite::{Connection, OptionalExtension, params, types::Value as SqlValue};

use crate::error::{Error, Result};

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
    pub turn_status: String,
    pub bucket: String,
    pub archived_at: Option<i64>,
    pub cwd: Option<String>,
    pub created_by_session_id: Option<String>,
    pub tier: Option<String>,
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
}

const SESSION_COLUMNS: &str = "s.pk, s.id, s.workspace_id, s.agent_id, a.name, s.user_id, s.title,
    s.title_origin, s.title_status, s.turn_status, s.bucket, s.archived_at, s.cwd,
    s.created_by_session_id, s.tier, s.mode, s.created_at, s.updated_at, s.last_event_seq,
    s.last_output_seq, s.last_delivered_input_seq, s.delivery_attempt, s.todos, s.follow_up_queue,
    s.requested_machine, s.machine_state, s.machine, s.turn_active,
    COALESCE((SELECT m.last_read_seq FROM read_markers m WHERE m.session_pk = s.pk AND m.user_id = :user), 0),
    EXISTS (SELECT 1 FROM default_sessions d WHERE d.session_id = s.id)";

fn session_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SessionRow> {
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
    })
}

pub fn session_row(
    conn: &Connection,
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
            rusqlite::named_params! {":id": session_id, ":ws": workspace_id, ":user": user_id},
            session_from_row,
        )
        .optional()?
        .ok_or(Error::NotFound)
}

pub fn session_row_by_pk(
    conn: &Connection,
    pk: i64,
    user_id: Option<&str>,
) -> Result<Option<SessionRow>> {
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions s JOIN agents a ON a.id = s.agent_id WHERE s.pk = :pk"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(
            rusqlite::named_params! {":pk": pk, ":user": user_id.unwrap_or("")},
            session_from_row,
        )
        .optional()?)
}

/// Filters of the session list (seed S9).
#[derive(Debug, Default, Clone)]
pub struct ListFilter {
    pub bucket: Option<String>,
    pub archived_only: bool,
    /// Archived and unarchived sessions alike (`archived_only` is then ignored).
    pub include_archived: bool,
    pub agent_id: Option<String>,
    pub exclude_default: bool,
    /// An FTS5 query already built from the user's words.
    pub fts_query: Option<String>,
    /// Keyset position: rows strictly older than `(created_at, id)`.
    pub after: Option<(i64, String)>,
    pub limit: u32,
}

/// One page of the list, newest first, plus whether more rows follow.
pub fn list_sessions(
    conn: &Connection,
    workspace_id: &str,
    user_id: &str,
    f: &ListFilter,
) -> Result<(Vec<SessionRow>, bool)> {
    let mut sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions s JOIN agents a ON a.id = s.agent_id
         WHERE s.workspace_id = :ws"
    );
    let mut args: Vec<(&str, SqlValue)> = vec![
        (":ws", SqlValue::Text(workspace_id.to_owned())),
        (":user", SqlValue::Text(user_id.to_owned())),
        (":limit", SqlValue::Integer(f.limit as i64 + 1)),
    ];
    if !f.include_archived {
        sql.push_str(if f.archived_only {
            " AND s.archived_at IS NOT NULL"
        } else {
            " AND s.archived_at IS NULL"
        });
    }
    if let Some(bucket) = &f.bucket {
        sql.push_str(" AND s.bucket = :bucket");
        args.push((":bucket", SqlValue::Text(bucket.clone())));
    }
    if let Some(agent) = &f.agent_id {
        sql.push_str(" AND s.agent_id = :agent");
        args.push((":agent", SqlValue::Text(agent.clone())));
    }
    if f.exclude_default {
        sql.push_str(
            " AND NOT EXISTS (SELECT 1 FROM default_sessions d WHERE d.session_id = s.id)",
        );
    }
    if let Some(q) = &f.fts_query {
        sql.push_str(
            " AND s.pk IN (SELECT rowid FROM session_search WHERE session_search MATCH :q)",
        );
        args.push((":q", SqlValue::Text(q.clone())));
    }
    if let Some((at, id)) = &f.after {
        sql.push_str(" AND (s.created_at < :at OR (s.created_at = :at AND s.id < :after_id))");
        args.push((":at", SqlValue::Integer(*at)));
        args.push((":after_id", SqlValue::Text(id.clone())));
    }
    sql.push_str(" ORDER BY s.created_at DESC, s.id DESC LIMIT :limit");
    let params: Vec<(&str, &dyn rusqlite::ToSql)> = args
        .iter()
        .map(|(k, v)| (*k, v as &dyn rusqlite::ToSql))
        .collect();
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows: Vec<SessionRow> = stmt
        .query_map(params.as_slice(), session_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    let more = rows.len() > f.limit as usize;
    rows.truncate(f.limit as usize);
    Ok((rows, more))
}

/// A stored event as read back: its JSON body is served untouched.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub seq: u64,
    pub created_at: i64,
    pub event_type: String,
    pub body: String,
}

fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<StoredEvent> {
    Ok(StoredEvent {
        seq: r.get::<_, i64>(0)? as u64,
        created_at: r.get(1)?,
        event_type: r.get(2)?,
        body: r.get(3)?,
    })
}

/// Events with `seq > after`, ascending, at most `limit`.
pub fn events_after(
    conn: &Connection,
    session_pk: i64,
    after: u64,
    limit: u32,
) -> Result<Vec<StoredEvent>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, created_at, type, body FROM events
         WHERE session_pk = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![session_pk, after as i64, limit], event_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Events with `seq < before` (or the newest when `before` is `None`), returned ascending.
pub fn events_before(
    conn: &Connection,
    session_pk: i64,
    before: Option<u64>,
    limit: u32,
) -> Result<Vec<StoredEvent>> {
    let before = before.map(|b| b as i64).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(
        "SELECT seq, created_at, type, body FROM events
         WHERE session_pk = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
    )?;
    let mut rows: Vec<StoredEvent> = stmt
        .query_map(params![session_pk, before, limit], event_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    rows.reverse();
    Ok(rows)
}

/// The newest events of the given types with `seq < before`, newest first, at most `limit`
/// (model engines rebuild a conversation from them).
pub fn events_of_types_before(
    conn: &Connection,
    session_pk: i64,
    before: u64,
    types: &[&str],
    limit: u32,
) -> Result<Vec<StoredEvent>> {
    let placeholders = vec!["?"; types.len()].join(",");
    let sql = format!(
        "SELECT seq, created_at, type, body FROM events
         WHERE session_pk = ? AND seq < ? AND type IN ({placeholders}) ORDER BY seq DESC LIMIT ?"
    );
    let mut args: Vec<SqlValue> = vec![
        SqlValue::Integer(session_pk),
        SqlValue::Integer(before.min(i64::MAX as u64) as i64),
    ];
    args.extend(types.iter().map(|t| SqlValue::Text((*t).to_owned())));
    args.push(SqlValue::Integer(i64::from(limit)));
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(rusqlite::params_from_iter(args), event_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The session that started `session_id` (`created_by_session_id`), if any.
pub fn parent_session(
    conn: &Connection,
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

/// What the session's engine remembers between turns (see migration 0002).
pub fn engine_memo(conn: &Connection, session_pk: i64) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT engine_memo FROM sessions WHERE pk = ?1")?
        .query_row([session_pk], |r| r.get(0))
        .optional()?
        .flatten())
}

/// The engine configuration a session's turns run with: the one pinned on the session (see
/// migration 0005), else its agent's.
pub fn turn_engine(conn: &Connection, session_pk: i64) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT COALESCE(s.engine, a.engine) FROM sessions s JOIN agents a ON a.id = s.agent_id
             WHERE s.pk = ?1",
        )?
        .query_row([session_pk], |r| r.get(0))
        .optional()?)
}

/// The first event of a given type at or after `from_seq` (used to find an input's terminal).
pub fn first_event_of_types(
    conn: &Connection,
    session_pk: i64,
    from_seq: u64,
    types: &[&str],
) -> Result<Option<StoredEvent>> {
    let placeholders = vec!["?"; types.len()].join(",");
    let sql = format!(
        "SELECT seq, created_at, type, body FROM events
         WHERE session_pk = ? AND seq >= ? AND type IN ({placeholders}) ORDER BY seq LIMIT 1"
    );
    let mut args: Vec<SqlValue> = vec![
        SqlValue::Integer(session_pk),
        SqlValue::Integer(from_seq as i64),
    ];
    args.extend(types.iter().map(|t| SqlValue::Text((*t).to_owned())));
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(rusqlite::params_from_iter(args), event_from_row)
        .optional()?)
}

pub struct WorkspaceRow {
    pub id: String,
    pub slug: String,
}

pub fn workspace_by_slug(conn: &Connection, slug: &str) -> Result<Option<WorkspaceRow>> {
    Ok(conn
        .prepare_cached("SELECT id, slug FROM workspaces WHERE slug = ?1")?
        .query_row([slug], |r| {
            Ok(WorkspaceRow {
                id: r.get(0)?,
                slug: r.get(1)?,
            })
        })
        .optional()?)
}

#[derive(Debug, Clone)]
pub struct AgentRow {
    pub id: String,
    pub slug: String,
    pub name: String,
    pub anchor: String,
    /// Engine configuration (JSON object).
    pub engine: String,
    pub created_at: i64,
}

const AGENT_COLUMNS: &str = "id, slug, name, anchor, engine, created_at";

fn agent_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<AgentRow> {
    Ok(AgentRow {
        id: r.get(0)?,
        slug: r.get(1)?,
        name: r.get(2)?,
        anchor: r.get(3)?,
        engine: r.get(4)?,
        created_at: r.get(5)?,
    })
}

pub fn agents(conn: &Connection, workspace_id: &str) -> Result<Vec<AgentRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents WHERE workspace_id = ?1 ORDER BY slug"
    ))?;
    let rows = stmt.query_map([workspace_id], agent_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn agent_by_slug(
    conn: &Connection,
    workspace_id: &str,
    slug: &str,
) -> Result<Option<AgentRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents WHERE workspace_id = ?1 AND slug = ?2"
        ))?
        .query_row([workspace_id, slug], agent_from_row)
        .optional()?)
}

pub fn agent_by_id(conn: &Connection, agent_id: &str) -> Result<Option<AgentRow>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = ?1"))?
        .query_row([agent_id], agent_from_row)
        .optional()?)
}

pub struct GrantRow {
    pub token_hash: String,
    pub workspace_id: String,
    pub prefix: String,
    pub expires_at: i64,
}

pub fn upload_grant(conn: &Connection, id: &str) -> Result<Option<GrantRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT token_hash, workspace_id, prefix, expires_at FROM upload_grants WHERE id = ?1",
        )?
        .query_row([id], |r| {
            Ok(GrantRow {
                token_hash: r.get(0)?,
                workspace_id: r.get(1)?,
                prefix: r.get(2)?,
                expires_at: r.get(3)?,
            })
        })
        .optional()?)
}

pub fn default_session_id(conn: &Connection, agent_id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT session_id FROM default_sessions WHERE agent_id = ?1")?
        .query_row([agent_id], |r| r.get(0))
        .optional()?)
}

/// An agent's sessions for the activity view: asking > running > scheduled > done, newest first;
/// archived sessions and the agent's default chat are left out. Returns `limit + 1` rows at most.
pub fn agent_activity(
    conn: &Connection,
    agent_id: &str,
    user_id: &str,
    limit: u32,
) -> Result<Vec<SessionRow>> {
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions s JOIN agents a ON a.id = s.agent_id
         WHERE s.agent_id = :agent AND s.archived_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM default_sessions d WHERE d.agent_id = s.agent_id AND d.session_id = s.id)
         ORDER BY CASE s.bucket WHEN 'asking' THEN 0 WHEN 'running' THEN 1 WHEN 'scheduled' THEN 2 ELSE 3 END,
                  s.created_at DESC, s.id DESC
         LIMIT :limit"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(
        rusqlite::named_params! {":agent": agent_id, ":user": user_id, ":limit": limit as i64 + 1},
        session_from_row,
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub struct ImageRow {
    pub mime_type: String,
    pub data: Vec<u8>,
}

pub fn image(conn: &Connection, session_pk: i64, storage_id: &str) -> Result<Option<ImageRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT mime_type, data FROM images WHERE session_pk = ?1 AND storage_id = ?2",
        )?
        .query_row(params![session_pk, storage_id], |r| {
            Ok(ImageRow {
                mime_type: r.get(0)?,
                data: r.get(1)?,
            })
        })
        .optional()?)
}

/// Sessions whose turn was active when the process stopped (crash recovery).
pub fn active_turn_sessions(conn: &Connection) -> Result<Vec<(i64, String)>> {
    let mut stmt = conn.prepare("SELECT pk, id FROM sessions WHERE turn_active = 1")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Sessions with queued inputs, ordered by their oldest input's due time then seq.
pub fn sessions_with_pending_inputs(conn: &Connection) -> Result<Vec<(i64, String, i64)>> {
    let mut stmt = conn.prepare(
        "SELECT p.session_pk, s.id, min(p.not_before) FROM pending_inputs p
         JOIN sessions s ON s.pk = p.session_pk GROUP BY p.session_pk ORDER BY min(p.not_before), p.session_pk",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Inputs stored and not yet taken by a turn, across all sessions (a metric).
pub fn pending_input_count(conn: &Connection) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM pending_inputs")?
        .query_row([], |r| r.get(0))?)
}

/// The `turn_started` seq of the turn that took an input, once one has.
pub fn input_turn(conn: &Connection, session_pk: i64, input_seq: u64) -> Result<Option<u64>> {
    Ok(conn
        .prepare_cached(
            "SELECT turn_started_seq FROM input_turns WHERE session_pk = ?1 AND input_seq = ?2",
        )?
        .query_row(params![session_pk, input_seq as i64], |r| {
            r.get::<_, i64>(0)
        })
        .optional()?
        .map(|s| s as u64))
}

/// A session's key by id, within a workspace (404 otherwise).
pub fn session_key(
    conn: &Connection,
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

/// The original result of a `clientRequestId`.
#[derive(Debug, Clone)]
pub struct ClientRequest {
    pub fingerprint: String,
    pub session_id: String,
    pub input_seq: u64,
}

pub fn client_request(
    conn: &Connection,
    workspace_id: &str,
    client_request_id: &str,
) -> Result<Option<ClientRequest>> {
    Ok(conn
        .prepare_cached(
            "SELECT fingerprint, session_id, input_seq FROM client_requests
             WHERE workspace_id = ?1 AND client_request_id = ?2",
        )?
        .query_row([workspace_id, client_request_id], |r| {
            Ok(ClientRequest {
                fingerprint: r.get(0)?,
                session_id: r.get(1)?,
                input_seq: r.get::<_, i64>(2)? as u64,
            })
        })
        .optional()?)
}

/// The stored body of one event.
pub fn event_body(conn: &Connection, session_pk: i64, seq: u64) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT body FROM events WHERE session_pk = ?1 AND seq = ?2")?
        .query_row(params![session_pk, seq as i64], |r| r.get(0))
        .optional()?)
}

pub fn workspace_slug(conn: &Connection, workspace_id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT slug FROM workspaces WHERE id = ?1")?
        .query_row([workspace_id], |r| r.get(0))
        .optional()?)
}

/// The id of the upload grant a token belongs to, by the token's hash.
pub fn upload_grant_by_hash(conn: &Connection, token_hash: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT id FROM upload_grants WHERE token_hash = ?1")?
        .query_row([token_hash], |r| r.get(0))
        .optional()?)
}

/// `(workspace slug, agent slug, engine)` of every agent.
pub fn agent_engines(conn: &Connection) -> Result<Vec<(String, String, String)>> {
    let mut stmt = conn.prepare(
        "SELECT w.slug, a.slug, a.engine FROM agents a JOIN workspaces w ON w.id = a.workspace_id",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
