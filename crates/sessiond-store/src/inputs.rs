//! The input queue: what waits for the runner (`pending_inputs`, its kinds and the writer's
//! statements on it), and its idempotency: the `clientRequestId`s a workspace's inputs came with,
//! and the result a retry of one of them gets.

use super::sql::{Db, Dialect, OptionalExtension, params};
use super::{SessionKey, Store, Tx};
use crate::error::{Error, Result};
use crate::timeline::{Behavior, Tier};

/// A retried `clientRequestId`: the request it must match (by its fingerprint) to be answered
/// with the original result.
#[derive(Debug, Clone)]
pub struct Retry {
    pub workspace_id: String,
    pub client_request_id: String,
    pub fingerprint: String,
}

fn replayed(c: &super::sql::Db, r: &Retry) -> Result<Option<(SessionKey, u64)>> {
    match super::client_request(c, &r.workspace_id, &r.client_request_id)? {
        None => Ok(None),
        Some(found) if found.fingerprint == r.fingerprint => {
            let key = super::session_key(c, &r.workspace_id, &found.session_id)?;
            Ok(Some((key, found.input_seq)))
        }
        Some(_) => Err(Error::IdempotencyConflict),
    }
}

impl Tx<'_> {
    /// The session and input seq a retried request first made, inside the write that would make
    /// them again (so two racing requests cannot both be first); 409 when the id came with
    /// another request.
    pub(crate) fn replayed(&self, r: &Retry) -> Result<Option<(SessionKey, u64)>> {
        replayed(self.conn, r)
    }
}

/// Reads of the input queue.
#[derive(Clone, Copy)]
pub struct InputReads<'a> {
    store: &'a Store,
}

impl Store {
    /// Reads of the input queue and its idempotency records.
    pub fn inputs(&self) -> InputReads<'_> {
        InputReads { store: self }
    }
}

impl InputReads<'_> {
    /// [`Tx::replayed`] on a read connection, before anything else about a request is resolved.
    pub async fn replayed(&self, r: Retry) -> Result<Option<(SessionKey, u64)>> {
        self.store.read(move |c| replayed(c, &r)).await
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
pub(crate) struct NewInput<'a> {
    pub seq: u64,
    pub kind: QueueKind,
    pub behavior: Behavior,
    pub tier: Option<Tier>,
    pub text: &'a str,
    pub images: Option<&'a str>,
    pub not_before: i64,
}

/// Request ids of queued inputs by `(session pk, seq)`. They serve tracing only, so they live in
/// memory (an input re-delivered after a restart runs under a new id) and the schema does not
/// change; an entry a rolled-back batch left is overwritten by the next input of that seq.
static INPUT_REQUEST_IDS: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<(i64, u64), String>>,
> = std::sync::LazyLock::new(Default::default);

/// Past this many waiting inputs the ids are forgotten (their turns get new ones).
const MAX_INPUT_REQUEST_IDS: usize = 100_000;

#[derive(Debug, Clone)]
pub(crate) struct PendingInput {
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

/// Sessions with queued inputs, ordered by their oldest input's due time then seq.
pub(crate) fn sessions_with_pending_inputs(conn: &Db) -> Result<Vec<(i64, String, i64)>> {
    let mut stmt = conn.prepare(
        "SELECT p.session_pk, s.id, min(p.not_before) FROM pending_inputs p
         JOIN sessions s ON s.pk = p.session_pk GROUP BY p.session_pk, s.id ORDER BY min(p.not_before), p.session_pk",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// Inputs stored and not yet taken by a turn, across all sessions (a metric).
pub(crate) fn pending_input_count(conn: &Db) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM pending_inputs")?
        .query_row([], |r| r.get(0))?)
}

/// The `turn_started` seq of the turn that took an input, once one has.
pub(crate) fn input_turn(conn: &Db, session_pk: i64, input_seq: u64) -> Result<Option<u64>> {
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

/// The original result of a `clientRequestId`.
#[derive(Debug, Clone)]
pub(crate) struct ClientRequest {
    pub fingerprint: String,
    pub session_id: String,
    pub input_seq: u64,
}

pub(crate) fn client_request(
    conn: &Db,
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

impl Tx<'_> {
    pub(crate) fn record_client_request(
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

    pub(crate) fn enqueue_input(&mut self, key: &SessionKey, input: &NewInput<'_>) -> Result<()> {
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
    pub(crate) fn pending_inputs(&self, key: &SessionKey) -> Result<Vec<PendingInput>> {
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

    pub(crate) fn remove_input(&mut self, key: &SessionKey, seq: u64) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM pending_inputs WHERE session_pk = ?1 AND seq = ?2")?
            .execute_later(params![key.pk, seq as i64])?;
        Ok(())
    }

    pub(crate) fn remove_inputs_of_kind(
        &mut self,
        key: &SessionKey,
        kind: QueueKind,
    ) -> Result<()> {
        self.conn
            .prepare_cached("DELETE FROM pending_inputs WHERE session_pk = ?1 AND kind = ?2")?
            .execute(params![key.pk, kind])?;
        Ok(())
    }

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
