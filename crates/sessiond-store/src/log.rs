//! The session log: its reads (the timeline and its turns) for callers that follow it from outside
//! the store, in sessiond's own types, and the statements behind them — the appends the writer
//! makes (a batch's rows in multi-row `INSERT`s, the counters and milestones they move), the
//! events' reads by seq, and the images a timeline's inputs carry.

use std::collections::HashMap;

use super::sql::{Db, Dialect, OptionalExtension, ToSql, Value as SqlValue, params};
use super::{SessionKey, Store, Tx};
use crate::error::{Error, Result};
use crate::timeline::Event;
use sessiond_model::frame::Frame;

/// Range reads of one session's timeline, by seq (keyset, never by offset).
#[derive(Clone, Copy)]
pub struct LogReads<'a> {
    store: &'a Store,
}

impl Store {
    /// Reads of the session log.
    pub fn log(&self) -> LogReads<'_> {
        LogReads { store: self }
    }
}

impl LogReads<'_> {
    /// At most `limit` events after `after`, oldest first.
    pub async fn events_after(
        &self,
        session_pk: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.store
            .read(move |c| super::events_after(c, session_pk, after, limit))
            .await
    }

    /// The seq of the newest stored event (0 for an empty timeline).
    pub async fn last_seq(&self, session_pk: i64) -> Result<u64> {
        let last = self
            .store
            .read(move |c| super::events_before(c, session_pk, None, 1))
            .await?;
        Ok(last.last().map_or(0, |e| e.seq))
    }

    /// The seq of the `turn_started` of the turn that took the input at `input_seq`, once one did.
    pub async fn input_turn(&self, session_pk: i64, input_seq: u64) -> Result<Option<u64>> {
        self.store
            .read(move |c| super::input_turn(c, session_pk, input_seq))
            .await
    }
}

/// The input that started a turn: its seq and what kind of input it was (`initial`,
/// `message`, `answer`, `wake`, `machine`, `resume`).
pub type TurnInput = (u64, String);

impl LogReads<'_> {
    /// At most `limit` events before `before` (the newest when `None`), oldest first.
    pub async fn events_before(
        &self,
        session_pk: i64,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.store
            .read(move |c| super::events_before(c, session_pk, before, limit))
            .await
    }

    /// The newest events of the given types before `before`, newest first, at most `limit`.
    pub async fn events_of_types_before(
        &self,
        session_pk: i64,
        before: u64,
        types: &'static [&'static str],
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.store
            .read(move |c| super::events_of_types_before(c, session_pk, before, types, limit))
            .await
    }

    /// The stored body of one event.
    pub async fn event_body(&self, session_pk: i64, seq: u64) -> Result<Option<String>> {
        self.store
            .read(move |c| super::event_body(c, session_pk, seq))
            .await
    }

    /// The input that started the turn whose `turn_started` is at `turn_seq`.
    pub async fn turn_input(&self, session_pk: i64, turn_seq: u64) -> Result<Option<TurnInput>> {
        self.store
            .read(move |c| super::record::turn_input(c, session_pk, turn_seq))
            .await
    }

    /// [`LogReads::turn_input`] of each `turn_started` among `events`, by its seq, in one read.
    pub async fn turn_inputs_of(
        &self,
        session_pk: i64,
        events: &[StoredEvent],
    ) -> Result<HashMap<u64, TurnInput>> {
        let turns: Vec<u64> = events
            .iter()
            .filter(|e| e.event_type == "turn_started")
            .map(|e| e.seq)
            .collect();
        if turns.is_empty() {
            return Ok(HashMap::new());
        }
        self.store
            .read(move |c| turn_inputs(c, session_pk, &turns))
            .await
    }

    /// At most `limit` events after `after` with the inputs of the turns started among them,
    /// in one read.
    pub async fn events_with_turn_inputs_after(
        &self,
        session_pk: i64,
        after: u64,
        limit: u32,
    ) -> Result<(Vec<StoredEvent>, HashMap<u64, TurnInput>)> {
        self.store
            .read(move |c| {
                let events = super::events_after(c, session_pk, after, limit)?;
                let turns: Vec<u64> = events
                    .iter()
                    .filter(|e| e.event_type == "turn_started")
                    .map(|e| e.seq)
                    .collect();
                Ok((turn_inputs(c, session_pk, &turns)?, events))
            })
            .await
            .map(|(inputs, events)| (events, inputs))
    }

    /// The `turn_started` seq of the turn still open just before event `seq`, if any.
    pub async fn open_turn_before(&self, session_pk: i64, seq: u64) -> Result<Option<u64>> {
        self.store
            .read(move |c| super::record::open_turn_before(c, session_pk, seq))
            .await
    }

    /// The first event of the given types of the turn that took the input at `input_seq`, once
    /// there is one, with the session's cwd as it is now.
    pub async fn terminal_of_input(
        &self,
        session_pk: i64,
        input_seq: u64,
        types: &'static [&'static str],
    ) -> Result<Option<(StoredEvent, Option<String>)>> {
        self.store
            .read(move |c| terminal_of_input(c, session_pk, input_seq, types))
            .await
    }
}

fn turn_inputs(
    c: &super::sql::Db,
    session_pk: i64,
    turns: &[u64],
) -> Result<HashMap<u64, TurnInput>> {
    let mut out = HashMap::new();
    for &seq in turns {
        if let Some(input) = super::record::turn_input(c, session_pk, seq)? {
            out.insert(seq, input);
        }
    }
    Ok(out)
}

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

/// A stored event as read back: its JSON body is served untouched.
#[derive(Debug, Clone)]
pub struct StoredEvent {
    pub seq: u64,
    pub created_at: i64,
    pub event_type: String,
    pub body: String,
}

fn event_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<StoredEvent> {
    Ok(StoredEvent {
        seq: r.get::<_, i64>(0)? as u64,
        created_at: r.get(1)?,
        event_type: r.get(2)?,
        body: r.get(3)?,
    })
}

/// Events with `seq > after`, ascending, at most `limit`.
pub(crate) fn events_after(
    conn: &Db,
    session_pk: i64,
    after: u64,
    limit: u32,
) -> Result<Vec<StoredEvent>> {
    let mut stmt = conn.prepare_cached(
        "SELECT seq, created_at, type, body FROM events
         WHERE session_pk = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    )?;
    let rows = stmt.query_map(params![session_pk, after as i64, limit], event_from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// Events with `seq < before` (or the newest when `before` is `None`), returned ascending.
pub(crate) fn events_before(
    conn: &Db,
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
        .collect::<super::sql::Result<_>>()?;
    rows.reverse();
    Ok(rows)
}

/// The newest events of the given types with `seq < before`, newest first, at most `limit`
/// (model engines rebuild a conversation from them).
pub(crate) fn events_of_types_before(
    conn: &Db,
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
    let rows = stmt.query_map(super::sql::params_from_iter(args), event_from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// The first event of one of `types` in the turn that took the input at `input_seq` (at or
/// after its `turn_started`), with the session's cwd as it is now, in one statement: what a
/// `/wait` looks for, once before it waits and again each time a terminal is published.
pub(crate) fn terminal_of_input(
    conn: &Db,
    session_pk: i64,
    input_seq: u64,
    types: &[&str],
) -> Result<Option<(StoredEvent, Option<String>)>> {
    let placeholders = vec!["?"; types.len()].join(",");
    let sql = format!(
        "SELECT e.seq, e.created_at, e.type, e.body, s.cwd
         FROM input_turns i
         JOIN events e ON e.session_pk = i.session_pk AND e.seq >= i.turn_started_seq
         JOIN sessions s ON s.pk = i.session_pk
         WHERE i.session_pk = ? AND i.input_seq = ? AND e.type IN ({placeholders})
         ORDER BY e.seq LIMIT 1"
    );
    let mut args: Vec<SqlValue> = vec![
        SqlValue::Integer(session_pk),
        SqlValue::Integer(input_seq as i64),
    ];
    args.extend(types.iter().map(|t| SqlValue::Text((*t).to_owned())));
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(super::sql::params_from_iter(args), |r| {
            Ok((event_from_row(r)?, r.get::<_, Option<String>>(4)?))
        })
        .optional()?)
}

pub struct ImageRow {
    pub mime_type: String,
    pub data: Vec<u8>,
}

pub(crate) fn image(conn: &Db, session_pk: i64, storage_id: &str) -> Result<Option<ImageRow>> {
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

/// The stored body of one event.
pub(crate) fn event_body(conn: &Db, session_pk: i64, seq: u64) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT body FROM events WHERE session_pk = ?1 AND seq = ?2")?
        .query_row(params![session_pk, seq as i64], |r| r.get(0))
        .optional()?)
}

impl Tx<'_> {
    /// Appends one durable event: next seq, projection counters, and a bus frame after COMMIT.
    pub(crate) fn append(&mut self, key: &SessionKey, event: &Event) -> Result<u64> {
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
}
