//! The runner's side of the session log and the input queue: what a running turn writes (each
//! write fenced by the turn's generation, with the events it held written first), automatic
//! titles, and the reads recovery and the dispatcher start from; and the statements on the session
//! row that hold a turn: its claim, its fence, its end, its tasks and usage.

use serde_json::{Value, json};

use super::sql::{Db, Dialect, OptionalExtension, ToSql, params};
use super::{SessionKey, Store, Tx};
use crate::error::{Error, Result};
use crate::timeline::{Event, Todo, Usage};

/// The turn a write is made as: refused (`StaleTurn`) once the session's turn generation moved
/// on, so nothing a cut-off turn does lands after its terminal.
#[derive(Debug, Clone)]
pub struct Fence {
    pub key: SessionKey,
    pub generation: u64,
}

/// What a process tells the turn another process may be running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnSignal {
    /// Stop (`POST …/interrupt`).
    Interrupt,
    /// A steer message is queued: take it at the next step.
    Steer,
    /// A follow-up is queued behind the turn.
    FollowUp,
}

/// Where a process hands the signals for its turns (set by its runner).
pub type SignalHook = Box<dyn Fn(SessionKey, TurnSignal) + Send + Sync>;

/// What a background task of a turn is (its `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    Tool,
    Subagent,
    Scheduled,
}

impl TaskKind {
    pub fn name(self) -> &'static str {
        match self {
            TaskKind::Tool => "tool",
            TaskKind::Subagent => "subagent",
            TaskKind::Scheduled => "scheduled",
        }
    }

    pub fn parse(name: &str) -> Option<TaskKind> {
        match name {
            "tool" => Some(TaskKind::Tool),
            "subagent" => Some(TaskKind::Subagent),
            "scheduled" => Some(TaskKind::Scheduled),
            _ => None,
        }
    }
}

/// How a background task of a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskEnd {
    Completed,
    Failed,
    Stopped,
}

impl TaskEnd {
    pub fn name(self) -> &'static str {
        match self {
            TaskEnd::Completed => "completed",
            TaskEnd::Failed => "failed",
            TaskEnd::Stopped => "stopped",
        }
    }

    pub fn parse(name: &str) -> Option<TaskEnd> {
        match name {
            "completed" => Some(TaskEnd::Completed),
            "failed" => Some(TaskEnd::Failed),
            "stopped" => Some(TaskEnd::Stopped),
            _ => None,
        }
    }

    /// The settlement field that carries the detail.
    fn field(self) -> &'static str {
        match self {
            TaskEnd::Completed => "result",
            TaskEnd::Failed => "error",
            TaskEnd::Stopped => "reason",
        }
    }
}

/// A step of an automatic title (a manual title is final: none of these changes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AutoTitle {
    Generating,
    Complete(String),
    Failed,
}

/// What a turn writes, and what the runner reads about the queue.
#[derive(Clone, Copy)]
pub struct TurnStore<'a> {
    pub(super) store: &'a Store,
}

impl Store {
    /// The runner's writes and the queue reads it starts from.
    pub fn turns(&self) -> TurnStore<'_> {
        TurnStore { store: self }
    }
}

/// Checks the fence and writes the held events; the seq of the last one.
fn fence(tx: &mut Tx<'_>, f: &Fence, held: &[Event]) -> Result<Option<u64>> {
    tx.check_generation(&f.key, f.generation)?;
    let mut last = None;
    for event in held {
        last = Some(tx.append(&f.key, event)?);
    }
    Ok(last)
}

/// A `(pk, id)` row as the session's key.
fn session_key_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<SessionKey> {
    Ok(SessionKey {
        pk: r.get(0)?,
        id: r.get(1)?,
    })
}

impl TurnStore<'_> {
    /// Sessions whose turn was active when the process stopped (crash recovery).
    pub async fn active_turn_sessions(&self) -> Result<Vec<SessionKey>> {
        let rows = self.store.read(super::active_turn_sessions).await?;
        Ok(rows
            .into_iter()
            .map(|(pk, id)| SessionKey { pk, id })
            .collect())
    }

    /// Sessions whose active turn the process with runner id `owner` holds.
    pub async fn turn_sessions_of(&self, owner: &str) -> Result<Vec<SessionKey>> {
        let owner = owner.to_owned();
        self.store
            .read(move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT pk, id FROM sessions WHERE turn_active = 1 AND turn_owner = ?1",
                )?;
                let rows = stmt.query_map([owner], session_key_from_row)?;
                Ok(rows.collect::<super::sql::Result<Vec<_>>>()?)
            })
            .await
    }

    /// Sessions whose turn's lease ran out before `now` (at most `limit`).
    pub async fn expired_turn_sessions(&self, now: i64, limit: u32) -> Result<Vec<SessionKey>> {
        let rows = self
            .store
            .read(move |c| super::expired_turn_sessions(c, now, limit))
            .await?;
        Ok(rows
            .into_iter()
            .map(|(pk, id)| SessionKey { pk, id })
            .collect())
    }

    /// Extends the leases of the turns `owner` runs to `ms` from now; the sessions whose turn it
    /// still holds (a turn another process ended after its lease expired is not among them).
    ///
    /// On SQLite one statement renews them all. On PostgreSQL each session's lease is renewed in
    /// a short transaction of its own, apart from the batches: one `UPDATE` of every row would
    /// wait in turn for each row a batch holds while holding those it already updated, and every
    /// write to those sessions would queue behind it (76–148 ms every two seconds with 64 turns
    /// running, `pg_stat_statements` under `bench_multi`).
    pub async fn renew_leases(&self, owner: &str, ms: u64) -> Result<Vec<i64>> {
        let owner = owner.to_owned();
        if self.store.dialect() == super::sql::Dialect::Sqlite {
            return self
                .store
                .write(move |tx| {
                    let until = tx.now + ms as i64;
                    let mut stmt = tx.conn.prepare_cached(
                        "UPDATE sessions SET turn_lease_until = ?2
                         WHERE turn_active = 1 AND turn_owner = ?1 RETURNING pk",
                    )?;
                    let rows = stmt.query_map(super::sql::params![owner, until], |r| r.get(0))?;
                    Ok(rows.collect::<super::sql::Result<Vec<i64>>>()?)
                })
                .await;
        }
        let held = self.turn_sessions_of(&owner).await?;
        let mut renewed = Vec::with_capacity(held.len());
        for key in held {
            let owner = owner.clone();
            let still = self
                .store
                .write_apart(move |tx| {
                    let until = tx.now + ms as i64;
                    let mut stmt = tx.conn.prepare_cached(
                        "UPDATE sessions SET turn_lease_until = ?3
                         WHERE pk = ?1 AND turn_active = 1 AND turn_owner = ?2 RETURNING pk",
                    )?;
                    let mut rows = stmt.query_map(
                        super::sql::params![key.pk, owner, until],
                        |r| -> super::sql::Result<i64> { r.get(0) },
                    )?;
                    Ok(rows.next().transpose()?)
                })
                .await?;
            renewed.extend(still);
        }
        Ok(renewed)
    }

    /// Sessions that no process runs and whose first queued input is due by `now`, at most
    /// `limit`: work a process with free slots may claim. On PostgreSQL the rows are read
    /// `FOR UPDATE SKIP LOCKED`, so that processes looking at once share the work out instead of
    /// all reaching for the same sessions (the claim itself stays the conditional update of
    /// `Tx::claim_turn`, which only one process wins).
    pub async fn unclaimed_due_sessions(&self, now: i64, limit: u32) -> Result<Vec<SessionKey>> {
        self.store
            .write(move |tx| {
                let lock = match tx.conn.dialect() {
                    super::sql::Dialect::Sqlite => "",
                    super::sql::Dialect::Postgres => " FOR UPDATE OF s SKIP LOCKED",
                };
                let sql = format!(
                    "SELECT s.pk, s.id FROM sessions s WHERE s.turn_active = 0 AND EXISTS (
                       SELECT 1 FROM pending_inputs p WHERE p.session_pk = s.pk AND p.not_before <= ?1)
                     ORDER BY s.pk LIMIT ?2{lock}"
                );
                let mut stmt = tx.conn.prepare_cached(&sql)?;
                let rows = stmt.query_map(super::sql::params![now, limit], session_key_from_row)?;
                Ok(rows.collect::<super::sql::Result<Vec<_>>>()?)
            })
            .await
    }

    /// Sessions with queued inputs and the time their first input may run, soonest first.
    pub async fn sessions_with_pending_inputs(&self) -> Result<Vec<(SessionKey, i64)>> {
        let rows = self.store.read(super::sessions_with_pending_inputs).await?;
        Ok(rows
            .into_iter()
            .map(|(pk, id, due)| (SessionKey { pk, id }, due))
            .collect())
    }

    /// Inputs stored and not yet taken by a turn, across all sessions (a metric).
    pub async fn pending_input_count(&self) -> Result<i64> {
        self.store.read(super::pending_input_count).await
    }

    /// Appends one durable event as the turn, after its held events; the event's seq.
    pub async fn append(&self, f: &Fence, held: Vec<Event>, event: Event) -> Result<u64> {
        let f = f.clone();
        if held.is_empty() {
            // One statement: no savepoint of its own (the turn's hot path).
            return self
                .store
                .write_one(move |w| {
                    w.tx().check_generation(&f.key, f.generation)?;
                    w.append(&f.key, &event)
                })
                .await;
        }
        self.store
            .write(move |tx| {
                fence(tx, &f, &held)?;
                tx.append(&f.key, &event)
            })
            .await
    }

    /// Writes the turn's held events; the seq of the last one.
    pub async fn write_held(&self, f: &Fence, held: Vec<Event>) -> Result<Option<u64>> {
        let f = f.clone();
        self.store.write(move |tx| fence(tx, &f, &held)).await
    }

    /// Keeps what the engine remembers for the next turns; the seq of the last held event.
    pub async fn set_memo(&self, f: &Fence, held: Vec<Event>, memo: String) -> Result<Option<u64>> {
        let f = f.clone();
        self.store
            .write(move |tx| {
                let last = fence(tx, &f, &held)?;
                tx.set_engine_memo(&f.key, Some(&memo))?;
                Ok(last)
            })
            .await
    }

    /// Appends a `usage` event (after `estimated`, the note that says it is an estimate) and adds
    /// `call` to the session's totals; the event's seq, and `BudgetHit` when this reached the
    /// session's budget.
    pub async fn record_usage(
        &self,
        f: &Fence,
        held: Vec<Event>,
        estimated: Option<Event>,
        event: Event,
        call: Usage,
    ) -> Result<(u64, Option<Error>)> {
        let f = f.clone();
        self.store
            .write(move |tx| {
                fence(tx, &f, &held)?;
                if let Some(note) = &estimated {
                    tx.append(&f.key, note)?;
                }
                tx.add_usage(&f.key, &call)?;
                let seq = tx.append(&f.key, &event)?;
                Ok((seq, tx.check_budget(&f.key).err()))
            })
            .await
    }

    /// Replaces the session's todo list: the event and the snapshot field.
    pub async fn set_todos(&self, f: &Fence, held: Vec<Event>, todos: Vec<Todo>) -> Result<u64> {
        let doc = serde_json::to_string(&todos).map_err(|e| Error::Internal(e.to_string()))?;
        let f = f.clone();
        self.store
            .write(move |tx| {
                fence(tx, &f, &held)?;
                let seq = tx.append(&f.key, &Event::Todos { todos })?;
                tx.set_json_column(&f.key, super::JsonColumn::Todos, Some(&doc))?;
                Ok(seq)
            })
            .await
    }

    /// Starts a background task of the turn; its id (`t1`, `t2`, ...) and the seq of its
    /// `task_started`.
    pub async fn start_task(
        &self,
        f: &Fence,
        held: Vec<Event>,
        kind: TaskKind,
        name: &str,
        label: &str,
    ) -> Result<(String, u64)> {
        let f = f.clone();
        let (name, label) = (name.to_owned(), label.to_owned());
        self.store
            .write(move |tx| {
                fence(tx, &f, &held)?;
                let id = tx.next_task_id(&f.key)?;
                let task = json!({
                    "id": id, "kind": kind.name(), "name": name, "label": label,
                    "ownerScopeId": format!("turn-{}", f.generation),
                    "status": "running", "startedAt": tx.now,
                });
                tx.put_task(&f.key, &id, &task.to_string(), "running")?;
                let seq = tx.append(&f.key, &Event::TaskStarted { task })?;
                Ok((id, seq))
            })
            .await
    }

    /// Settles a running task with `detail` (its result, error or reason); the seq of its
    /// `task_settled`.
    pub async fn settle_task(
        &self,
        f: &Fence,
        held: Vec<Event>,
        id: &str,
        end: TaskEnd,
        detail: Value,
    ) -> Result<u64> {
        let f = f.clone();
        let id = id.to_owned();
        self.store
            .write(move |tx| {
                fence(tx, &f, &held)?;
                let body = tx
                    .running_tasks(&f.key)?
                    .into_iter()
                    .find(|(t, _)| *t == id)
                    .map(|(_, b)| b)
                    .ok_or_else(|| Error::Internal(format!("task {id} is not running")))?;
                let mut task: Value = serde_json::from_str(&body).unwrap_or_else(|_| json!({}));
                task["status"] = json!(end.name());
                tx.put_task(&f.key, &id, &task.to_string(), end.name())?;
                let mut settlement = json!({ "id": id, "status": end.name(), "settledAt": tx.now });
                settlement[end.field()] = detail;
                tx.append(&f.key, &Event::TaskSettled { settlement })
            })
            .await
    }

    /// Takes the steer messages waiting in the queue (oldest first), marking each delivered to
    /// the turn started at `turn_started`; their texts.
    pub async fn take_steers(
        &self,
        f: &Fence,
        held: Vec<Event>,
        turn_started: u64,
    ) -> Result<Vec<String>> {
        let f = f.clone();
        self.store
            .write(move |tx| {
                fence(tx, &f, &held)?;
                let mut texts = Vec::new();
                for input in tx.pending_inputs(&f.key)? {
                    if input.kind != super::QueueKind::Message
                        || input.behavior != crate::timeline::Behavior::Steer
                    {
                        continue;
                    }
                    tx.remove_input(&f.key, input.seq)?;
                    tx.record_input_turn(&f.key, input.seq, turn_started)?;
                    let attempt = json!({
                        "attemptId": crate::ids::new_id(),
                        "throughSeq": input.seq,
                        "kind": "message",
                        "createdAt": tx.now,
                    });
                    tx.set_delivered(&f.key, input.seq, &attempt.to_string())?;
                    texts.push(input.text);
                }
                Ok(texts)
            })
            .await
    }

    /// Moves a session's automatic title on; false when its title is manual.
    pub async fn set_auto_title(&self, key: &SessionKey, step: AutoTitle) -> Result<bool> {
        let key = key.clone();
        self.store
            .write(move |tx| match &step {
                AutoTitle::Generating => tx.set_auto_title(&key, None, "generating"),
                AutoTitle::Complete(title) => tx.set_auto_title(&key, Some(title), "complete"),
                AutoTitle::Failed => tx.set_auto_title(&key, None, "failed"),
            })
            .await
    }
}

/// What claiming a turn reads beside the queue, inside the claim.
impl Tx<'_> {
    /// The stored body of one event.
    pub(crate) fn event_body(&self, session_pk: i64, seq: u64) -> Result<Option<String>> {
        super::event_body(self.conn, session_pk, seq)
    }

    /// The engine configuration a session's turns run with (its own pinned one, else its
    /// agent's) and its workspace's slug.
    pub(crate) fn turn_setup(&self, session_pk: i64) -> Result<Option<TurnSetup>> {
        super::turn_setup(self.conn, session_pk)
    }
}

/// The lease a turn is claimed with: the claiming process's runner id and how long the lease
/// lasts unless renewed.
#[derive(Debug, Clone)]
pub struct Lease {
    pub owner: String,
    pub ms: u64,
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

/// What the session's engine remembers between turns (see migration 0002).
pub(crate) fn engine_memo(conn: &Db, session_pk: i64) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT engine_memo FROM sessions WHERE pk = ?1")?
        .query_row([session_pk], |r| r.get(0))
        .optional()?
        .flatten())
}

/// What a session's turns run with, in one statement (a claim reads it): the engine
/// configuration — the one pinned on the session (see migration 0005), else its agent's — and
/// the slug of the session's workspace. `None` when the session is gone.
pub(crate) fn turn_setup(conn: &Db, session_pk: i64) -> Result<Option<TurnSetup>> {
    Ok(conn
        .prepare_cached(
            "SELECT COALESCE(s.engine, a.engine), w.slug FROM sessions s
             JOIN agents a ON a.id = s.agent_id JOIN workspaces w ON w.id = s.workspace_id
             WHERE s.pk = ?1",
        )?
        .query_row([session_pk], |r| {
            Ok(TurnSetup {
                engine_config: r.get(0)?,
                workspace_slug: r.get(1)?,
            })
        })
        .optional()?)
}

/// What [`turn_setup`] reads.
pub(crate) struct TurnSetup {
    /// `None` when neither the session nor its agent names one.
    pub engine_config: Option<String>,
    pub workspace_slug: String,
}

/// Sessions whose turn was active when the process stopped (crash recovery).
pub(crate) fn active_turn_sessions(conn: &Db) -> Result<Vec<(i64, String)>> {
    let mut stmt = conn.prepare("SELECT pk, id FROM sessions WHERE turn_active = 1")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// Sessions whose turn's lease ran out before `now`: their process died (or lost the database)
/// mid-turn. At most `limit`, oldest lease first.
pub(crate) fn expired_turn_sessions(conn: &Db, now: i64, limit: u32) -> Result<Vec<(i64, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT pk, id FROM sessions WHERE turn_active = 1
           AND (turn_lease_until IS NULL OR turn_lease_until < ?1)
         ORDER BY turn_lease_until LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![now, limit], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

impl Tx<'_> {
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

    pub(crate) fn set_delivered(
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

    pub(crate) fn engine_state(&self, key: &SessionKey) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT engine_state FROM sessions WHERE pk = ?1")?
            .query_row([key.pk], |r| r.get(0))?)
    }

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
}
