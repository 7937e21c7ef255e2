//! The runner's side of the session log and the input queue: what a running turn writes (each
//! write fenced by the turn's generation, with the events it held written first), automatic
//! titles, and the reads recovery and the dispatcher start from.

use serde_json::{Value, json};

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
    pub fn event_body(&self, session_pk: i64, seq: u64) -> Result<Option<String>> {
        super::event_body(self.conn, session_pk, seq)
    }

    /// The engine configuration a session's turns run with (its own pinned one, else its
    /// agent's) and its workspace's slug.
    pub(crate) fn turn_setup(&self, session_pk: i64) -> Result<Option<super::reads::TurnSetup>> {
        super::turn_setup(self.conn, session_pk)
    }
}
