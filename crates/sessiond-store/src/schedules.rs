//! Agent run schedules and the record of which tick made which session.
//!
//! The rows hold what the schedules core decided (cadence text, JSON documents, the next tick);
//! nothing here interprets a cron expression or a time zone.

use super::sql::{Db, OptionalExtension, params};

use super::{SessionKey, Tx};
use crate::error::{Error, Result};

/// A schedule as stored. JSON columns are kept as text; `schedules` parses them.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRow {
    pub id: String,
    pub workspace_id: String,
    pub agent_id: String,
    pub name: String,
    pub description: Option<String>,
    pub cron_expression: Option<String>,
    pub interval_seconds: Option<i64>,
    pub timezone: String,
    pub anchor_at: i64,
    pub start_at: Option<i64>,
    pub end_at: Option<i64>,
    pub paused: bool,
    pub initial_input: String,
    pub task_params: Option<String>,
    pub task_metadata: Option<String>,
    pub creator: String,
    /// JSON array of ms.
    pub skipped: String,
    pub next_due_at: Option<i64>,
    pub num_actions: i64,
    pub last_action_at: Option<i64>,
    pub created_at: i64,
    pub updated_at: i64,
}

const COLUMNS: &str = "id, workspace_id, agent_id, name, description, cron_expression,
    interval_seconds, timezone, anchor_at, start_at, end_at, paused, initial_input, task_params,
    task_metadata, creator, skipped, next_due_at, num_actions, last_action_at, created_at,
    updated_at";

fn from_row(r: &super::sql::Row<'_>) -> super::sql::Result<ScheduleRow> {
    Ok(ScheduleRow {
        id: r.get(0)?,
        workspace_id: r.get(1)?,
        agent_id: r.get(2)?,
        name: r.get(3)?,
        description: r.get(4)?,
        cron_expression: r.get(5)?,
        interval_seconds: r.get(6)?,
        timezone: r.get(7)?,
        anchor_at: r.get(8)?,
        start_at: r.get(9)?,
        end_at: r.get(10)?,
        paused: r.get(11)?,
        initial_input: r.get(12)?,
        task_params: r.get(13)?,
        task_metadata: r.get(14)?,
        creator: r.get(15)?,
        skipped: r.get(16)?,
        next_due_at: r.get(17)?,
        num_actions: r.get(18)?,
        last_action_at: r.get(19)?,
        created_at: r.get(20)?,
        updated_at: r.get(21)?,
    })
}

/// A row's values in [`COLUMNS`] order (`?1` … `?22`).
fn values(s: &ScheduleRow) -> [&dyn super::sql::ToSql; 22] {
    [
        &s.id,
        &s.workspace_id,
        &s.agent_id,
        &s.name,
        &s.description,
        &s.cron_expression,
        &s.interval_seconds,
        &s.timezone,
        &s.anchor_at,
        &s.start_at,
        &s.end_at,
        &s.paused,
        &s.initial_input,
        &s.task_params,
        &s.task_metadata,
        &s.creator,
        &s.skipped,
        &s.next_due_at,
        &s.num_actions,
        &s.last_action_at,
        &s.created_at,
        &s.updated_at,
    ]
}

/// How a schedule is addressed under its agent: by id or by its (unique per agent) name.
#[derive(Debug, Clone)]
pub enum ScheduleRef {
    Id(String),
    Name(String),
}

/// The schedule `r` names under `agent_id` in `workspace_id`, if any.
pub(super) fn schedule(
    conn: &Db,
    workspace_id: &str,
    agent_id: &str,
    r: &ScheduleRef,
) -> Result<Option<ScheduleRow>> {
    let (column, value) = match r {
        ScheduleRef::Id(id) => ("id", id),
        ScheduleRef::Name(name) => ("name", name),
    };
    let sql = format!(
        "SELECT {COLUMNS} FROM schedules WHERE {column} = ?1 AND agent_id = ?2 AND workspace_id = ?3"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![value, agent_id, workspace_id], from_row)
        .optional()?)
}

/// The schedule with this id, wherever it is (the scheduler's view).
pub(super) fn schedule_by_id(conn: &Db, id: &str) -> Result<Option<ScheduleRow>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {COLUMNS} FROM schedules WHERE id = ?1"))?
        .query_row([id], from_row)
        .optional()?)
}

/// An agent's schedules, oldest first, at most `limit`.
pub(super) fn schedules_of_agent(
    conn: &Db,
    workspace_id: &str,
    agent_id: &str,
    limit: u32,
) -> Result<Vec<ScheduleRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM schedules WHERE agent_id = ?1 AND workspace_id = ?2
         ORDER BY created_at, id LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![agent_id, workspace_id, limit], from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

pub(super) fn count_schedules(conn: &Db, agent_id: &str) -> Result<u64> {
    let n: i64 = conn
        .prepare_cached("SELECT count(*) FROM schedules WHERE agent_id = ?1")?
        .query_row([agent_id], |r| r.get(0))?;
    Ok(n as u64)
}

/// The earliest tick any schedule is waiting for.
pub(super) fn next_schedule_due(conn: &Db) -> Result<Option<i64>> {
    Ok(conn
        .prepare_cached(
            "SELECT next_due_at FROM schedules WHERE next_due_at IS NOT NULL
             ORDER BY next_due_at LIMIT 1",
        )?
        .query_row([], |r| r.get(0))
        .optional()?)
}

/// Schedules whose tick is due at `now`, earliest first, at most `limit`.
pub(super) fn due_schedules(conn: &Db, now: i64, limit: u32) -> Result<Vec<ScheduleRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM schedules WHERE next_due_at IS NOT NULL AND next_due_at <= ?1
         ORDER BY next_due_at, id LIMIT ?2"
    ))?;
    let rows = stmt.query_map(params![now, limit], from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// Whether an app still exists in a workspace (an app-created schedule fires only while it does).
pub(super) fn app_exists(conn: &Db, app_id: &str, workspace_id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM apps WHERE id = ?1 AND workspace_id = ?2")?
        .query_row([app_id, workspace_id], |_| Ok(()))
        .optional()?
        .is_some())
}

/// What made a schedule fire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerType {
    /// A tick of its cadence.
    Scheduled,
    /// Missed ticks, folded into one.
    CatchUp,
    /// A trigger: an extra run now, outside the cadence.
    Manual,
}

impl TriggerType {
    /// The name the contract and the stored row give it.
    pub fn name(self) -> &'static str {
        match self {
            TriggerType::Scheduled => "scheduled",
            TriggerType::CatchUp => "catch_up",
            TriggerType::Manual => "manual",
        }
    }
}

/// The tick that created a session (the session is the row's key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRunRow {
    pub schedule_id: String,
    /// The tick's nominal time (for a manual run, when it was triggered).
    pub fire_time: i64,
    pub trigger_type: TriggerType,
}

fn name_taken(name: &str) -> Error {
    Error::Conflict(
        "schedule_exists",
        format!("a schedule named {name} already exists for this agent"),
    )
}

fn is_unique_violation(e: &super::sql::Error) -> bool {
    e.constraint() == Some(super::sql::Constraint::Unique)
}

impl Tx<'_> {
    /// Inserts a schedule; a name already used under the agent is a 409.
    pub(super) fn insert_schedule(&mut self, s: &ScheduleRow) -> Result<()> {
        let sql = format!(
            "INSERT INTO schedules ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10,
                ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22)"
        );
        self.conn
            .prepare_cached(&sql)?
            .execute(values(s).as_slice())
            .map_err(|e| match e.constraint() {
                Some(super::sql::Constraint::Unique) => name_taken(&s.name),
                // The agent was deleted since it was looked up.
                Some(super::sql::Constraint::ForeignKey) => Error::AgentNotFound,
                _ => e.into(),
            })?;
        Ok(())
    }

    /// Writes every mutable field of a schedule back (its id, workspace, agent, creator and
    /// creation stay); a rename onto a name already used under the agent is a 409.
    pub(super) fn update_schedule(&mut self, s: &ScheduleRow) -> Result<()> {
        let v = values(s);
        // Every parameter is used: PostgreSQL cannot type one that is not.
        let mutable = [
            v[0], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14],
            v[16], v[17], v[18], v[19], v[21],
        ];
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE schedules SET name = ?2, description = ?3, cron_expression = ?4,
                    interval_seconds = ?5, timezone = ?6, anchor_at = ?7, start_at = ?8,
                    end_at = ?9, paused = ?10, initial_input = ?11, task_params = ?12,
                    task_metadata = ?13, skipped = ?14, next_due_at = ?15, num_actions = ?16,
                    last_action_at = ?17, updated_at = ?18
                 WHERE id = ?1",
            )?
            .execute(mutable.as_slice())
            .map_err(|e| {
                if is_unique_violation(&e) {
                    name_taken(&s.name)
                } else {
                    Error::from(e)
                }
            })?;
        if changed == 0 {
            return Err(Error::NotFound);
        }
        Ok(())
    }

    /// Writes what a firing changes (the next tick, the skips left, the count and the last
    /// firing), and nothing else: the row's other columns and indexes stay untouched.
    pub(crate) fn record_schedule_action(&mut self, s: &ScheduleRow) -> Result<()> {
        let changed = self
            .conn
            .prepare_cached(
                "UPDATE schedules SET next_due_at = ?2, skipped = ?3, num_actions = ?4,
                    last_action_at = ?5 WHERE id = ?1",
            )?
            .execute(params![
                s.id,
                s.next_due_at,
                s.skipped,
                s.num_actions,
                s.last_action_at
            ])?;
        if changed == 0 {
            return Err(Error::NotFound);
        }
        Ok(())
    }

    pub(super) fn delete_schedule(&mut self, id: &str) -> Result<()> {
        let n = self
            .conn
            .prepare_cached("DELETE FROM schedules WHERE id = ?1")?
            .execute([id])?;
        if n == 0 {
            return Err(Error::NotFound);
        }
        Ok(())
    }

    /// Remembers that a tick of a schedule created the session `key`; a second session for one
    /// tick of the cadence is refused by the table's unique index.
    pub(crate) fn record_schedule_run(
        &mut self,
        key: &SessionKey,
        run: &ScheduleRunRow,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO schedule_runs (session_pk, schedule_id, fire_time, trigger_type,
                    created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                key.pk,
                run.schedule_id,
                run.fire_time,
                run.trigger_type.name(),
                self.now
            ])?;
        self.outbox_schedule_fired(key, &run.schedule_id, run.fire_time)?;
        Ok(())
    }
}

impl Tx<'_> {
    /// Holds a schedule's row for the rest of the transaction, so that the row read next is the
    /// one the write replaces (see [`Tx::lock`]).
    fn lock_schedule(&self, id: &str) -> Result<()> {
        self.lock(super::RowLock::Schedule(id))
    }

    /// Holds an agent's schedules for the rest of the transaction (the per-agent limit is a
    /// count, then an insert): the agent's row is locked.
    fn lock_agent_schedules(&self, agent_id: &str) -> Result<()> {
        self.lock(super::RowLock::Agent(agent_id))
    }

    /// The schedule with this id, held until the transaction ends: a tick fires only from the
    /// row it was computed from, exactly once.
    pub(crate) fn schedule_for_update(&mut self, id: &str) -> Result<Option<ScheduleRow>> {
        self.lock_schedule(id)?;
        schedule_by_id(self.conn, id)
    }

    /// Whether a user still belongs to a workspace (a user-created schedule fires only then).
    pub(crate) fn is_member(&self, user_id: &str, workspace_id: &str) -> Result<bool> {
        super::identity::is_member(self.conn, user_id, workspace_id)
    }

    /// Whether an app still exists in a workspace (an app-created schedule fires only then).
    pub(crate) fn app_exists(&self, app_id: &str, workspace_id: &str) -> Result<bool> {
        app_exists(self.conn, app_id, workspace_id)
    }
}

/// Agent run schedules in sessiond's own types. Each write method is one unit of work on the
/// writer (answered after COMMIT); its checks (the per-agent limit, "unchanged since read") hold
/// the rows they read through the `lock_*` hooks. A tick's firing, which opens a session, is the
/// sessions core's transaction with the [`Tx`] methods above.
#[derive(Clone, Copy)]
pub struct ScheduleStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// Agent run schedules.
    pub fn schedules(&self) -> ScheduleStore<'_> {
        ScheduleStore { store: self }
    }
}

impl ScheduleStore<'_> {
    /// The schedule `r` names under `agent_id` in `workspace_id`, if any.
    pub async fn get(
        &self,
        workspace_id: &str,
        agent_id: &str,
        r: &ScheduleRef,
    ) -> Result<Option<ScheduleRow>> {
        let (ws, agent, r) = (workspace_id.to_owned(), agent_id.to_owned(), r.clone());
        self.store.read(move |c| schedule(c, &ws, &agent, &r)).await
    }

    /// The schedule with this id, wherever it is (the scheduler's view).
    pub async fn by_id(&self, id: &str) -> Result<Option<ScheduleRow>> {
        let id = id.to_owned();
        self.store.read(move |c| schedule_by_id(c, &id)).await
    }

    /// An agent's schedules, oldest first, at most `limit`.
    pub async fn of_agent(
        &self,
        workspace_id: &str,
        agent_id: &str,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>> {
        let (ws, agent) = (workspace_id.to_owned(), agent_id.to_owned());
        self.store
            .read(move |c| schedules_of_agent(c, &ws, &agent, limit))
            .await
    }

    /// The earliest tick any schedule is waiting for.
    pub async fn next_due(&self) -> Result<Option<i64>> {
        self.store.read(next_schedule_due).await
    }

    /// Schedules due at `now`, earliest first, at most `limit`.
    pub async fn due(&self, now: i64, limit: u32) -> Result<Vec<ScheduleRow>> {
        self.store.read(move |c| due_schedules(c, now, limit)).await
    }

    /// Inserts a schedule unless its agent has `max_per_agent` already (`Ok(false)`, nothing
    /// written): the count and the insert are one transaction.
    pub async fn insert_within(&self, s: ScheduleRow, max_per_agent: u64) -> Result<bool> {
        self.store
            .write(move |tx| {
                tx.lock_agent_schedules(&s.agent_id)?;
                if count_schedules(tx.conn, &s.agent_id)? >= max_per_agent {
                    return Ok(false);
                }
                tx.insert_schedule(&s)?;
                Ok(true)
            })
            .await
    }

    /// Replaces a schedule's definition with `new` only if its row is still `expected` (else
    /// `Ok(false)`, nothing written).
    pub async fn replace_if_unchanged(
        &self,
        expected: ScheduleRow,
        new: ScheduleRow,
    ) -> Result<bool> {
        self.store
            .write(move |tx| {
                tx.lock_schedule(&expected.id)?;
                if schedule_by_id(tx.conn, &expected.id)?.as_ref() != Some(&expected) {
                    return Ok(false);
                }
                tx.update_schedule(&new)?;
                Ok(true)
            })
            .await
    }

    /// Moves a schedule past a tick without a session, only if its row is still `expected`:
    /// `moved` computes the new row from the expected one and the transaction's time.
    pub async fn advance_if_unchanged<F>(&self, expected: ScheduleRow, moved: F) -> Result<bool>
    where
        F: FnOnce(ScheduleRow, i64) -> ScheduleRow + Clone + Send + 'static,
    {
        self.store
            .write(move |tx| {
                tx.lock_schedule(&expected.id)?;
                if schedule_by_id(tx.conn, &expected.id)?.as_ref() != Some(&expected) {
                    return Ok(false);
                }
                let row = moved(expected, tx.now);
                tx.record_schedule_action(&row)?;
                Ok(true)
            })
            .await
    }

    pub async fn delete(&self, id: &str) -> Result<()> {
        let id = id.to_owned();
        self.store.write(move |tx| tx.delete_schedule(&id)).await
    }

    /// The slug of a workspace (a firing's actor needs it for the workspace's drive).
    pub async fn workspace_slug(&self, workspace_id: &str) -> Result<Option<String>> {
        let ws = workspace_id.to_owned();
        self.store
            .read(move |c| super::workspace_slug(c, &ws))
            .await
    }
}
