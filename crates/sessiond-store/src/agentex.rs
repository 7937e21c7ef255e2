//! The agent platform API's rows (migration 0005): agent registrations, deployments, task fields,
//! events, states, spans and trackers, and the queries that read tasks and their messages out of
//! sessions and timelines.
//!
//! Lists that the wire contract pages by number (`page_number`) use `LIMIT … OFFSET` within a
//! bounded page size; everything else reads by key.

use super::sql::{Db, Dialect, OptionalExtension, Value as SqlValue, params, params_from_iter};
use serde_json::{Map, Value};

use super::deployment_history::{ChangeAuthor, ChangedDeployment, DeploymentChange};
use super::{SessionKey, Tx};
use crate::clock;
use crate::error::{Error, Result};
use crate::timeline::{Event, Level, SystemMetadata};

pub use super::listing::{Direction, Page, SortKey};
use super::listing::{List, push_page};

// ---------------------------------------------------------------------------------------------
// Agents

/// An agent as the agent platform API sees it: sessiond's agent plus its registration.
#[derive(Debug, Clone)]
pub struct AgentexAgentRow {
    pub id: String,
    pub workspace_id: String,
    pub slug: String,
    pub name: String,
    pub engine: String,
    pub created_at: i64,
    pub description: String,
    pub agent_input_type: Option<String>,
    pub registration_metadata: Option<String>,
    pub registered_at: Option<i64>,
    pub production_deployment_id: Option<String>,
    pub updated_at: i64,
}

const AGENT_SELECT: &str = "SELECT a.id, a.workspace_id, a.slug, a.name, a.engine, a.created_at,
    COALESCE(x.description, ''), x.agent_input_type, x.registration_metadata, x.registered_at,
    x.production_deployment_id, COALESCE(x.updated_at, a.created_at)
    FROM agents a LEFT JOIN agentex_agents x ON x.agent_id = a.id";

fn agent_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<AgentexAgentRow> {
    Ok(AgentexAgentRow {
        id: r.get(0)?,
        workspace_id: r.get(1)?,
        slug: r.get(2)?,
        name: r.get(3)?,
        engine: r.get(4)?,
        created_at: r.get(5)?,
        description: r.get(6)?,
        agent_input_type: r.get(7)?,
        registration_metadata: r.get(8)?,
        registered_at: r.get(9)?,
        production_deployment_id: r.get(10)?,
        updated_at: r.get(11)?,
    })
}

/// How a request names an agent: by its id or by its unique name (sessiond's slug).
#[derive(Debug, Clone, Copy)]
pub enum AgentKey<'a> {
    Id(&'a str),
    Name(&'a str),
}

/// An agent of the workspace, by id or by name.
pub(super) fn agentex_agent(
    conn: &Db,
    workspace_id: &str,
    key: AgentKey<'_>,
) -> Result<Option<AgentexAgentRow>> {
    let (cond, value) = match key {
        AgentKey::Id(id) => ("a.id = ?2", id),
        AgentKey::Name(name) => ("a.slug = ?2", name),
    };
    Ok(conn
        .prepare_cached(&format!(
            "{AGENT_SELECT} WHERE a.workspace_id = ?1 AND {cond}"
        ))?
        .query_row([workspace_id, value], agent_from_row)
        .optional()?)
}

/// Filters and order of the agent list.
#[derive(Debug, Clone)]
pub struct AgentFilter {
    /// Only the agent of this task (session id).
    pub task_id: Option<String>,
    /// Containment filter on `registration_metadata.agent_card.metadata`.
    pub agent_card_metadata: Option<Map<String, Value>>,
    /// `created_at`, `updated_at` or `name`.
    pub order_by: SortKey,
    pub direction: Direction,
    pub page: Page,
}

pub(super) fn agentex_agents(
    conn: &Db,
    workspace_id: &str,
    f: &AgentFilter,
) -> Result<Vec<AgentexAgentRow>> {
    let mut list = List::new(AGENT_SELECT, "a.workspace_id", workspace_id);
    list.filter(
        "a.id IN (SELECT agent_id FROM sessions WHERE id = ? AND workspace_id = a.workspace_id)",
        f.task_id.as_deref(),
    );
    list.contains(
        conn.dialect(),
        "x.registration_metadata",
        &["agent_card", "metadata"],
        f.agent_card_metadata.as_ref(),
    )?;
    let order = match f.order_by {
        SortKey::UpdatedAt => "COALESCE(x.updated_at, a.created_at)",
        SortKey::Name => "a.slug",
        _ => "a.created_at",
    };
    list.run(conn, order, "a.id", f.direction, f.page, agent_from_row)
}

/// What `register-build` records about an agent.
pub struct Registration<'a> {
    pub description: &'a str,
    pub agent_input_type: Option<&'a str>,
    pub registration_metadata: Option<&'a str>,
}

impl Tx<'_> {
    /// Records (or replaces) an agent's registration; `registered_at` becomes now.
    pub(crate) fn register_agent(&mut self, agent_id: &str, r: &Registration<'_>) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_agents (agent_id, description, agent_input_type,
                    registration_metadata, registered_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?5)
                 ON CONFLICT (agent_id) DO UPDATE SET description = excluded.description,
                    agent_input_type = excluded.agent_input_type,
                    registration_metadata = excluded.registration_metadata,
                    registered_at = excluded.registered_at, updated_at = excluded.updated_at",
            )?
            .execute(params![
                agent_id,
                r.description,
                r.agent_input_type,
                r.registration_metadata,
                self.now
            ])?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Deployments

#[derive(Debug, Clone)]
pub struct DeploymentRow {
    pub id: String,
    pub agent_id: String,
    pub docker_image: String,
    pub helm_release_name: Option<String>,
    pub sgp_deploy_id: Option<String>,
    pub registration_metadata: String,
    pub engine: String,
    pub is_production: bool,
    pub promoted_at: Option<i64>,
    pub created_at: i64,
}

impl DeploymentRow {
    /// What the deployment history keeps of this deployment.
    fn changed(&self) -> ChangedDeployment<'_> {
        ChangedDeployment {
            agent_id: &self.agent_id,
            id: &self.id,
            docker_image: &self.docker_image,
            created_at: self.created_at,
        }
    }
}

const DEPLOYMENT_COLUMNS: &str = "id, agent_id, docker_image, helm_release_name, sgp_deploy_id,
    registration_metadata, engine, is_production, promoted_at, created_at";

fn deployment_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<DeploymentRow> {
    Ok(DeploymentRow {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        docker_image: r.get(2)?,
        helm_release_name: r.get(3)?,
        sgp_deploy_id: r.get(4)?,
        registration_metadata: r.get(5)?,
        engine: r.get(6)?,
        is_production: r.get(7)?,
        promoted_at: r.get(8)?,
        created_at: r.get(9)?,
    })
}

pub(super) fn deployment(
    conn: &Db,
    agent_id: &str,
    deployment_id: &str,
) -> Result<Option<DeploymentRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM agentex_deployments WHERE agent_id = ?1 AND id = ?2"
        ))?
        .query_row([agent_id, deployment_id], deployment_from_row)
        .optional()?)
}

/// `order_by`: `created_at` or `promoted_at`.
pub(super) fn deployments(
    conn: &Db,
    agent_id: &str,
    order_by: SortKey,
    direction: Direction,
    page: Page,
) -> Result<Vec<DeploymentRow>> {
    let select = format!("SELECT {DEPLOYMENT_COLUMNS} FROM agentex_deployments");
    let order = if order_by == SortKey::PromotedAt {
        "promoted_at"
    } else {
        "created_at"
    };
    List::new(&select, "agent_id", agent_id).run(
        conn,
        order,
        "id",
        direction,
        page,
        deployment_from_row,
    )
}

/// A deployment to insert.
pub(crate) struct NewDeployment<'a> {
    pub id: &'a str,
    pub agent_id: &'a str,
    pub docker_image: &'a str,
    pub helm_release_name: Option<&'a str>,
    pub sgp_deploy_id: Option<&'a str>,
    pub registration_metadata: &'a str,
    pub engine: &'a str,
}

impl Tx<'_> {
    /// Inserts a deployment and its `created` history row.
    pub(super) fn insert_deployment(
        &mut self,
        d: &NewDeployment<'_>,
        author: &ChangeAuthor,
    ) -> Result<DeploymentRow> {
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_deployments (id, agent_id, docker_image, helm_release_name,
                    sgp_deploy_id, registration_metadata, engine, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                d.id,
                d.agent_id,
                d.docker_image,
                d.helm_release_name,
                d.sgp_deploy_id,
                d.registration_metadata,
                d.engine,
                self.now
            ])?;
        let row = deployment(self.conn, d.agent_id, d.id)?.ok_or(Error::NotFound)?;
        self.record_deployment_change(row.changed(), DeploymentChange::Created, author)?;
        Ok(row)
    }

    /// Makes `deployment_id` the agent's one production deployment and its engine the agent's,
    /// with its `promoted` history row.
    pub(super) fn promote_deployment(
        &mut self,
        agent_id: &str,
        deployment_id: &str,
        engine: &str,
        author: &ChangeAuthor,
    ) -> Result<DeploymentRow> {
        let c = self.conn;
        c.prepare_cached(
            "UPDATE agentex_deployments SET is_production = 0
             WHERE agent_id = ?1 AND is_production = 1 AND id <> ?2",
        )?
        .execute([agent_id, deployment_id])?;
        let n = c
            .prepare_cached(
                "UPDATE agentex_deployments SET is_production = 1,
                    promoted_at = CASE WHEN is_production = 1 THEN promoted_at ELSE ?3 END
                 WHERE agent_id = ?1 AND id = ?2",
            )?
            .execute(params![agent_id, deployment_id, self.now])?;
        if n == 0 {
            return Err(Error::NotFound);
        }
        c.prepare_cached(
            "INSERT INTO agentex_agents (agent_id, production_deployment_id, updated_at)
             VALUES (?1, ?2, ?3)
             ON CONFLICT (agent_id) DO UPDATE SET
                production_deployment_id = excluded.production_deployment_id,
                updated_at = excluded.updated_at",
        )?
        .execute(params![agent_id, deployment_id, self.now])?;
        c.prepare_cached("UPDATE agents SET engine = ?2 WHERE id = ?1")?
            .execute([agent_id, engine])?;
        let row = deployment(c, agent_id, deployment_id)?.ok_or(Error::NotFound)?;
        self.record_deployment_change(row.changed(), DeploymentChange::Promoted, author)?;
        Ok(row)
    }

    /// Deletes a deployment that is not in production, with its `deleted` history row.
    pub(super) fn delete_deployment(
        &mut self,
        agent_id: &str,
        deployment_id: &str,
        author: &ChangeAuthor,
    ) -> Result<()> {
        let row = deployment(self.conn, agent_id, deployment_id)?.ok_or(Error::NotFound)?;
        if row.is_production {
            return Err(Error::Conflict(
                "deployment_in_production",
                "the production deployment cannot be deleted; promote another one first".into(),
            ));
        }
        self.conn
            .prepare_cached("DELETE FROM agentex_deployments WHERE id = ?1")?
            .execute([deployment_id])?;
        self.record_deployment_change(row.changed(), DeploymentChange::Deleted, author)
    }
}

// ---------------------------------------------------------------------------------------------
// Tasks

/// A session seen as a task.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub pk: i64,
    pub id: String,
    pub workspace_id: String,
    pub agent_id: String,
    pub created_at: i64,
    pub updated_at: i64,
    pub turn_status: super::TurnStatus,
    pub turn_active: bool,
    pub name: Option<String>,
    pub params: Option<String>,
    pub task_metadata: Option<String>,
    /// A final status (cancel, complete, fail, terminate, timeout), if one was set.
    pub final_status: Option<FinalStatus>,
    pub status_reason: Option<String>,
    pub deployment_id: Option<String>,
    /// The session was closed (handed off on `/v2`): the id of the session that took over.
    pub handed_off_to: Option<String>,
}

impl TaskRow {
    /// The task belongs to `agent_id` and, when a deployment's preview addresses it, runs on
    /// `deployment_id` (409 otherwise).
    pub fn check_owner(&self, agent_id: &str, deployment_id: Option<&str>) -> Result<()> {
        if self.agent_id != agent_id {
            return Err(Error::Conflict(
                "task_of_another_agent",
                format!("task {} belongs to another agent", self.id),
            ));
        }
        if let Some(d) = deployment_id
            && self.deployment_id.as_deref() != Some(d)
        {
            return Err(Error::Conflict(
                "task_of_another_deployment",
                format!(
                    "task {} does not run on deployment {d}; a preview addresses only the tasks it opened",
                    self.id
                ),
            ));
        }
        Ok(())
    }

    pub fn key(&self) -> SessionKey {
        SessionKey {
            pk: self.pk,
            id: self.id.clone(),
        }
    }
}

/// The status a task shows: its final status, else COMPLETED once its session is closed, else
/// INTERRUPTED while its last turn ended interrupted, else RUNNING. Mirrors `TaskRow`'s Rust-side
/// derivation in `agentex::tasks`.
const TASK_STATUS_SQL: &str = "COALESCE(t.status, CASE WHEN s.closed_at IS NOT NULL THEN 'COMPLETED'
    WHEN s.turn_status = 'interrupted' AND s.turn_active = 0 THEN 'INTERRUPTED' ELSE 'RUNNING' END)";

const TASK_SELECT: &str = "SELECT s.pk, s.id, s.workspace_id, s.agent_id, s.created_at,
    MAX(s.updated_at, COALESCE(t.updated_at, 0)), s.turn_status, s.turn_active, t.name, t.params,
    t.task_metadata, t.status, t.status_reason, t.deployment_id,
    CASE WHEN s.closed_at IS NOT NULL THEN COALESCE(s.handed_off_to, '') END
    FROM sessions s LEFT JOIN agentex_tasks t ON t.session_pk = s.pk";

/// A status that ends a task for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalStatus {
    Canceled,
    Completed,
    Failed,
    Terminated,
    TimedOut,
}

impl FinalStatus {
    pub const ALL: [FinalStatus; 5] = [
        FinalStatus::Canceled,
        FinalStatus::Completed,
        FinalStatus::Failed,
        FinalStatus::Terminated,
        FinalStatus::TimedOut,
    ];

    /// The contract's name (`Task.status`).
    pub fn name(self) -> &'static str {
        match self {
            FinalStatus::Canceled => "CANCELED",
            FinalStatus::Completed => "COMPLETED",
            FinalStatus::Failed => "FAILED",
            FinalStatus::Terminated => "TERMINATED",
            FinalStatus::TimedOut => "TIMED_OUT",
        }
    }

    pub fn parse(name: &str) -> Option<FinalStatus> {
        FinalStatus::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// A task's status as a list filters by it: `Task.status`, but for `DELETED`, which no task has
/// (a deleted task is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    Running,
    Interrupted,
    Final(FinalStatus),
}

impl TaskStatus {
    pub fn name(self) -> &'static str {
        match self {
            TaskStatus::Running => "RUNNING",
            TaskStatus::Interrupted => "INTERRUPTED",
            TaskStatus::Final(s) => s.name(),
        }
    }

    pub fn parse(name: &str) -> Option<TaskStatus> {
        match name {
            "RUNNING" => Some(TaskStatus::Running),
            "INTERRUPTED" => Some(TaskStatus::Interrupted),
            _ => FinalStatus::parse(name).map(TaskStatus::Final),
        }
    }
}

super::sql::from_sql_by_name!(FinalStatus: "task status");

fn task_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<TaskRow> {
    Ok(TaskRow {
        pk: r.get(0)?,
        id: r.get(1)?,
        workspace_id: r.get(2)?,
        agent_id: r.get(3)?,
        created_at: r.get(4)?,
        updated_at: r.get(5)?,
        turn_status: r.get(6)?,
        turn_active: r.get(7)?,
        name: r.get(8)?,
        params: r.get(9)?,
        task_metadata: r.get(10)?,
        final_status: r.get(11)?,
        status_reason: r.get(12)?,
        deployment_id: r.get(13)?,
        handed_off_to: r.get(14)?,
    })
}

/// How a request names a task: by id (the session id) or by its unique name.
#[derive(Debug, Clone, Copy)]
pub enum TaskKey<'a> {
    Id(&'a str),
    Name(&'a str),
}

pub(super) fn task(conn: &Db, workspace_id: &str, key: TaskKey<'_>) -> Result<Option<TaskRow>> {
    let (cond, value) = match key {
        TaskKey::Id(id) => ("s.id = ?2", id),
        TaskKey::Name(name) => ("t.name = ?2", name),
    };
    Ok(conn
        .prepare_cached(&format!(
            "{TASK_SELECT} WHERE s.workspace_id = ?1 AND {cond}"
        ))?
        .query_row([workspace_id, value], task_from_row)
        .optional()?)
}

pub(super) fn task_by_pk(conn: &Db, pk: i64) -> Result<Option<TaskRow>> {
    Ok(conn
        .prepare_cached(&format!("{TASK_SELECT} WHERE s.pk = ?1"))?
        .query_row([pk], task_from_row)
        .optional()?)
}

/// Filters and order of the task list.
#[derive(Debug, Clone)]
pub struct TaskFilter {
    pub agent_id: Option<String>,
    pub agent_name: Option<String>,
    pub status: Option<TaskStatus>,
    pub task_metadata: Option<Map<String, Value>>,
    /// `created_at`, `updated_at`, `name` or `status`.
    pub order_by: SortKey,
    pub direction: Direction,
    pub page: Page,
}

pub(super) fn tasks(conn: &Db, workspace_id: &str, f: &TaskFilter) -> Result<Vec<TaskRow>> {
    let mut list = List::new(TASK_SELECT, "s.workspace_id", workspace_id);
    list.filter("s.agent_id = ?", f.agent_id.as_deref());
    list.filter(
        "s.agent_id IN (SELECT id FROM agents WHERE workspace_id = s.workspace_id AND slug = ?)",
        f.agent_name.as_deref(),
    );
    list.filter(
        &format!("{TASK_STATUS_SQL} = ?"),
        f.status.map(TaskStatus::name),
    );
    list.contains(
        conn.dialect(),
        "t.task_metadata",
        &[],
        f.task_metadata.as_ref(),
    )?;
    let order = match f.order_by {
        SortKey::UpdatedAt => "MAX(s.updated_at, COALESCE(t.updated_at, 0))",
        SortKey::Name => "t.name",
        SortKey::Status => TASK_STATUS_SQL,
        _ => "s.created_at",
    };
    list.run(conn, order, "s.id", f.direction, f.page, task_from_row)
}

/// The task fields a write sets; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub(crate) struct TaskFields<'a> {
    pub name: Option<&'a str>,
    pub params: Option<&'a str>,
    pub task_metadata: Option<&'a str>,
    pub deployment_id: Option<&'a str>,
}

impl Tx<'_> {
    pub(crate) fn task(&self, workspace_id: &str, key: TaskKey<'_>) -> Result<Option<TaskRow>> {
        task(self.conn, workspace_id, key)
    }

    pub(crate) fn task_by_pk(&self, pk: i64) -> Result<Option<TaskRow>> {
        task_by_pk(self.conn, pk)
    }

    /// Holds a task's session row for the rest of the transaction, so that the task read next is
    /// the one the write changes (see [`Tx::lock`]).
    fn lock_task(&self, pk: i64) -> Result<()> {
        self.lock(super::RowLock::Session(pk))
    }

    /// Creates the task row of a session, or sets the given fields on it.
    pub(crate) fn put_task_fields(
        &mut self,
        key: &SessionKey,
        workspace_id: &str,
        f: &TaskFields<'_>,
    ) -> Result<()> {
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO agentex_tasks (session_pk, workspace_id, name, params, task_metadata,
                    deployment_id, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (session_pk) DO UPDATE SET
                    name = COALESCE(excluded.name, agentex_tasks.name),
                    params = COALESCE(excluded.params, agentex_tasks.params),
                    task_metadata = COALESCE(excluded.task_metadata, agentex_tasks.task_metadata),
                    deployment_id = COALESCE(excluded.deployment_id, agentex_tasks.deployment_id),
                    updated_at = excluded.updated_at",
            )?
            .execute(params![
                key.pk,
                workspace_id,
                f.name,
                f.params,
                f.task_metadata,
                f.deployment_id,
                self.now
            ]);
        match inserted {
            Ok(_) => Ok(()),
            Err(e) if e.constraint().is_some() => Err(Error::Conflict(
                "task_name_taken",
                "another task already has this name".into(),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets a task's final status (and its reason).
    pub(crate) fn set_task_final_status(
        &mut self,
        key: &SessionKey,
        workspace_id: &str,
        status: FinalStatus,
        reason: &str,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_tasks (session_pk, workspace_id, status, status_reason, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (session_pk) DO UPDATE SET status = excluded.status,
                    status_reason = excluded.status_reason, updated_at = excluded.updated_at",
            )?
            .execute(params![key.pk, workspace_id, status.name(), reason, self.now])?;
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Task messages: timeline events that read as messages

/// The kinds of timeline events that read as task messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageKind {
    Prompt,
    Note,
    Answer,
    AgentMessage,
    Ask,
    Text,
    Reasoning,
    ToolRequest,
    ToolResponse,
}

impl MessageKind {
    pub const ALL: [MessageKind; 9] = [
        MessageKind::Prompt,
        MessageKind::Note,
        MessageKind::Answer,
        MessageKind::AgentMessage,
        MessageKind::Ask,
        MessageKind::Text,
        MessageKind::Reasoning,
        MessageKind::ToolRequest,
        MessageKind::ToolResponse,
    ];

    /// `(event type, step type)` of the events of this kind.
    fn event(self) -> (&'static str, Option<&'static str>) {
        match self {
            MessageKind::Prompt => ("prompt_submitted", None),
            MessageKind::Note => ("note_submitted", None),
            MessageKind::Answer => ("answer_submitted", None),
            MessageKind::AgentMessage => ("agent_message", None),
            MessageKind::Ask => ("ask", None),
            MessageKind::Text => ("step", Some("text")),
            MessageKind::Reasoning => ("step", Some("reasoning")),
            MessageKind::ToolRequest => ("step", Some("tool_call_start")),
            MessageKind::ToolResponse => ("step", Some("tool_call")),
        }
    }
}

/// Which messages a read keeps: the kinds it keeps among complete messages and among messages
/// still in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageFilter {
    pub done: Vec<MessageKind>,
    pub in_progress: Vec<MessageKind>,
}

impl MessageFilter {
    pub fn all() -> MessageFilter {
        MessageFilter {
            done: MessageKind::ALL.to_vec(),
            in_progress: MessageKind::ALL.to_vec(),
        }
    }
}

/// Whether message `e` is in progress: its latest revision says so.
const IN_PROGRESS: &str = "COALESCE((SELECT v.in_progress FROM agentex_message_revisions v
    WHERE v.session_pk = e.session_pk AND v.message_seq = e.seq
    ORDER BY v.revision_seq DESC LIMIT 1), 0)";

/// `(condition, arguments)` selecting the messages a filter keeps.
fn filter_condition(d: Dialect, f: &MessageFilter) -> (String, Vec<SqlValue>) {
    if f.done == f.in_progress {
        return messages_condition(d, &f.done);
    }
    let (done, mut args) = messages_condition(d, &f.done);
    let (open, mut more) = messages_condition(d, &f.in_progress);
    args.append(&mut more);
    (
        format!("(({done} AND {IN_PROGRESS} = 0) OR ({open} AND {IN_PROGRESS} = 1))"),
        args,
    )
}

/// `(condition, arguments)` selecting events of the given kinds (none: a condition that is false).
fn kinds_condition(d: Dialect, kinds: &[MessageKind]) -> (String, Vec<SqlValue>) {
    let mut types = Vec::new();
    let mut steps = Vec::new();
    for k in kinds {
        match k.event() {
            (t, None) => types.push(SqlValue::Text(t.to_owned())),
            (_, Some(s)) => steps.push(SqlValue::Text(s.to_owned())),
        }
    }
    let mut parts = Vec::new();
    if !types.is_empty() {
        parts.push(format!("e.type IN ({})", vec!["?"; types.len()].join(",")));
    }
    if !steps.is_empty() {
        parts.push(format!(
            "(e.type = 'step' AND {} IN ({}))",
            d.json_text("e.body", "step.type"),
            vec!["?"; steps.len()].join(",")
        ));
    }
    if parts.is_empty() {
        return ("1 = 0".into(), Vec::new());
    }
    types.extend(steps);
    (format!("({})", parts.join(" OR ")), types)
}

/// `(condition, arguments)` selecting the messages of the given kinds: events of those kinds that
/// are not revisions of another message, and (with agent messages) the notices that opened a
/// message still without text.
fn messages_condition(d: Dialect, kinds: &[MessageKind]) -> (String, Vec<SqlValue>) {
    let (cond, args) = kinds_condition(d, kinds);
    let mut sql = format!(
        "(({cond}) AND NOT EXISTS (SELECT 1 FROM agentex_message_revisions v
            WHERE v.session_pk = e.session_pk AND v.revision_seq = e.seq
              AND v.message_seq <> e.seq))"
    );
    if kinds.contains(&MessageKind::AgentMessage) {
        sql = format!(
            "({sql} OR (e.type = 'system' AND EXISTS (SELECT 1 FROM agentex_message_revisions v
                WHERE v.session_pk = e.session_pk AND v.revision_seq = e.seq
                  AND v.message_seq = e.seq)))"
        );
    }
    (sql, args)
}

fn stored_event(r: &super::sql::Row<'_>) -> super::sql::Result<super::StoredEvent> {
    Ok(super::StoredEvent {
        seq: r.get::<_, i64>(0)? as u64,
        created_at: r.get(1)?,
        event_type: r.get(2)?,
        body: r.get(3)?,
    })
}

fn seq_value(seq: u64) -> SqlValue {
    SqlValue::Integer(seq.min(i64::MAX as u64) as i64)
}

/// A task message as stored: the event its id names and, if it was revised or opened in
/// progress, its latest revision.
#[derive(Debug, Clone)]
pub struct MessageRow {
    pub first: super::StoredEvent,
    /// The event holding the message's current content (`first` when it was never revised).
    pub latest: super::StoredEvent,
    pub in_progress: bool,
}

/// The messages of message events: each with its latest revision (one query for the page).
fn with_revisions(
    conn: &Db,
    session_pk: i64,
    events: Vec<super::StoredEvent>,
) -> Result<Vec<MessageRow>> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let marks = vec!["?"; events.len()].join(",");
    let sql = format!(
        "SELECT v.message_seq, e.seq, e.created_at, e.type, e.body, v.in_progress
         FROM agentex_message_revisions v
         JOIN events e ON e.session_pk = v.session_pk AND e.seq = v.revision_seq
         WHERE v.session_pk = ? AND v.message_seq IN ({marks})
           AND v.revision_seq = (SELECT MAX(w.revision_seq) FROM agentex_message_revisions w
               WHERE w.session_pk = v.session_pk AND w.message_seq = v.message_seq)"
    );
    let mut args = vec![SqlValue::Integer(session_pk)];
    args.extend(events.iter().map(|e| seq_value(e.seq)));
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut latest: std::collections::HashMap<u64, (super::StoredEvent, bool)> = stmt
        .query_map(params_from_iter(args), |r| {
            let message = r.get::<_, i64>(0)? as u64;
            let event = super::StoredEvent {
                seq: r.get::<_, i64>(1)? as u64,
                created_at: r.get(2)?,
                event_type: r.get(3)?,
                body: r.get(4)?,
            };
            Ok((message, (event, r.get::<_, bool>(5)?)))
        })?
        .collect::<super::sql::Result<_>>()?;
    Ok(events
        .into_iter()
        .map(|first| match latest.remove(&first.seq) {
            Some((latest, in_progress)) => MessageRow {
                first,
                latest,
                in_progress,
            },
            None => MessageRow {
                latest: first.clone(),
                first,
                in_progress: false,
            },
        })
        .collect())
}

/// The messages of a session, by page number.
pub(super) fn messages_page(
    conn: &Db,
    session_pk: i64,
    filter: &MessageFilter,
    direction: Direction,
    page: Page,
) -> Result<Vec<MessageRow>> {
    let (cond, mut kind_args) = filter_condition(conn.dialect(), filter);
    let mut sql = format!(
        "SELECT e.seq, e.created_at, e.type, e.body FROM events e
         WHERE e.session_pk = ? AND {cond} ORDER BY e.seq {}",
        direction.sql()
    );
    let mut args = vec![SqlValue::Integer(session_pk)];
    args.append(&mut kind_args);
    push_page(&mut sql, &mut args, page);
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), stored_event)?;
    let events = rows.collect::<super::sql::Result<_>>()?;
    with_revisions(conn, session_pk, events)
}

/// The messages of a session before (`Desc`) or after (`Asc`) a seq, at most `limit`.
pub(super) fn messages_from(
    conn: &Db,
    session_pk: i64,
    filter: &MessageFilter,
    direction: Direction,
    cursor: Option<u64>,
    limit: u32,
) -> Result<Vec<MessageRow>> {
    let (cond, mut kind_args) = filter_condition(conn.dialect(), filter);
    let bound = match (direction, cursor) {
        (Direction::Desc, Some(_)) => " AND e.seq < ?",
        (Direction::Asc, Some(_)) => " AND e.seq > ?",
        (_, None) => "",
    };
    let sql = format!(
        "SELECT e.seq, e.created_at, e.type, e.body FROM events e
         WHERE e.session_pk = ? AND {cond}{bound} ORDER BY e.seq {} LIMIT ?",
        direction.sql()
    );
    let mut args = vec![SqlValue::Integer(session_pk)];
    args.append(&mut kind_args);
    if let Some(c) = cursor {
        args.push(seq_value(c));
    }
    args.push(SqlValue::Integer(i64::from(limit)));
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), stored_event)?;
    let events = rows.collect::<super::sql::Result<_>>()?;
    with_revisions(conn, session_pk, events)
}

/// The message a seq names, if the event there is a message.
pub(super) fn message(conn: &Db, session_pk: i64, seq: u64) -> Result<Option<MessageRow>> {
    let (cond, kind_args) = messages_condition(conn.dialect(), &MessageKind::ALL);
    let sql = format!(
        "SELECT e.seq, e.created_at, e.type, e.body FROM events e
         WHERE e.session_pk = ? AND e.seq = ? AND {cond}"
    );
    let mut args = vec![SqlValue::Integer(session_pk), seq_value(seq)];
    args.extend(kind_args);
    let event = conn
        .prepare_cached(&sql)?
        .query_row(params_from_iter(args), stored_event)
        .optional()?;
    Ok(with_revisions(conn, session_pk, event.into_iter().collect())?.pop())
}

/// What a revision event revises: the message it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revises {
    pub message_seq: u64,
    /// When the message was opened (its first event's time).
    pub message_created_at: i64,
    pub in_progress: bool,
}

/// The message the event at `seq` revises, if it is a revision of another message.
pub(super) fn revises(conn: &Db, session_pk: i64, seq: u64) -> Result<Option<Revises>> {
    Ok(conn
        .prepare_cached(
            "SELECT v.message_seq, e.created_at, v.in_progress FROM agentex_message_revisions v
             JOIN events e ON e.session_pk = v.session_pk AND e.seq = v.message_seq
             WHERE v.session_pk = ?1 AND v.revision_seq = ?2 AND v.message_seq <> v.revision_seq",
        )?
        .query_row(params![session_pk, seq_value(seq)], |r| {
            Ok(Revises {
                message_seq: r.get::<_, i64>(0)? as u64,
                message_created_at: r.get(1)?,
                in_progress: r.get(2)?,
            })
        })
        .optional()?)
}

impl Tx<'_> {
    /// Records that the event at `revision_seq` holds message `message_seq`'s content from now
    /// on (the message itself when it opens in progress).
    pub(crate) fn revise_message(
        &mut self,
        key: &SessionKey,
        message_seq: u64,
        revision_seq: u64,
        in_progress: bool,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_message_revisions (session_pk, revision_seq, message_seq,
                    in_progress) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(params![
                key.pk,
                revision_seq.min(i64::MAX as u64) as i64,
                message_seq.min(i64::MAX as u64) as i64,
                in_progress
            ])?;
        Ok(())
    }

    /// Whether the session holds an agent message still being written whose newest revision is
    /// older than `before` (ms), while no turn runs: an agent that writes its messages after its
    /// turn (an async ACP agent) and went silent.
    fn has_abandoned_message(&self, pk: i64, before: i64) -> Result<bool> {
        let found: Option<i64> = self
            .conn
            .prepare_cached(&format!("SELECT s.pk {ABANDONED} AND s.pk = ?2 LIMIT 1"))?
            .query_row(params![before, pk], |r| r.get(0))
            .optional()?;
        Ok(found.is_some())
    }

    /// Closes every agent message of the session still being written (its latest revision
    /// `IN_PROGRESS`): each gets a last revision, the content it holds again, marked done. A
    /// turn that failed or was interrupted calls this, so an agent that died mid-message leaves
    /// no message open forever.
    pub(crate) fn close_open_messages(&mut self, key: &SessionKey) -> Result<usize> {
        let open: Vec<(u64, u64)> = self
            .conn
            .prepare_cached(
                "SELECT v.message_seq, v.revision_seq FROM agentex_message_revisions v
                 WHERE v.session_pk = ?1 AND v.in_progress = 1
                   AND v.revision_seq = (SELECT MAX(w.revision_seq)
                       FROM agentex_message_revisions w
                       WHERE w.session_pk = v.session_pk AND w.message_seq = v.message_seq)
                 ORDER BY v.message_seq",
            )?
            .query_map(params![key.pk], |r| {
                Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
            })?
            .collect::<std::result::Result<_, _>>()?;
        for &(message, latest) in &open {
            let body = super::event_body(self.conn, key.pk, latest)?;
            let event = match body.and_then(|b| serde_json::from_str::<Event>(&b).ok()) {
                Some(Event::AgentMessage { message, .. }) => Event::AgentMessage {
                    message,
                    created_at: clock::rfc3339(self.now),
                },
                Some(event @ Event::Step { .. }) => event,
                _ => Event::System {
                    level: Level::Info,
                    message: "The agent's message was closed without text: its turn ended".into(),
                    metadata: None,
                },
            };
            let revision = self.append(key, &event)?;
            self.revise_message(key, message, revision, false)?;
        }
        Ok(open.len())
    }
}

/// The sessions whose newest revision of an open agent message (`?1`: before this time, in ms)
/// came while no turn runs: `SELECT s.pk …` then this.
const ABANDONED: &str = "FROM agentex_message_revisions v
    JOIN sessions s ON s.pk = v.session_pk
    JOIN events e ON e.session_pk = v.session_pk AND e.seq = v.revision_seq
    WHERE v.in_progress = 1 AND s.turn_active = 0 AND e.created_at < ?1
      AND v.revision_seq = (SELECT MAX(w.revision_seq) FROM agentex_message_revisions w
          WHERE w.session_pk = v.session_pk AND w.message_seq = v.message_seq)";

fn abandoned_sessions(conn: &Db, before: i64, limit: u32) -> Result<Vec<SessionKey>> {
    let sql = format!("SELECT DISTINCT s.pk, s.id {ABANDONED} ORDER BY s.pk LIMIT ?2");
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![before, limit], |r| {
        Ok(SessionKey {
            pk: r.get(0)?,
            id: r.get(1)?,
        })
    })?;
    Ok(rows.collect::<super::sql::Result<Vec<_>>>()?)
}

// ---------------------------------------------------------------------------------------------
// Events

#[derive(Debug, Clone)]
pub struct EventRow {
    pub sequence_id: i64,
    pub id: String,
    pub task_id: String,
    pub agent_id: String,
    pub content: Option<String>,
    pub created_at: i64,
}

const EVENT_SELECT: &str = "SELECT v.sequence_id, v.id, s.id, v.agent_id, v.content, v.created_at
    FROM agentex_events v JOIN sessions s ON s.pk = v.session_pk";

fn event_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<EventRow> {
    Ok(EventRow {
        sequence_id: r.get(0)?,
        id: r.get(1)?,
        task_id: r.get(2)?,
        agent_id: r.get(3)?,
        content: r.get(4)?,
        created_at: r.get(5)?,
    })
}

pub(super) fn agentex_event(conn: &Db, workspace_id: &str, id: &str) -> Result<Option<EventRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "{EVENT_SELECT} WHERE v.id = ?1 AND s.workspace_id = ?2"
        ))?
        .query_row([id, workspace_id], event_from_row)
        .optional()?)
}

/// A task's events with `sequence_id > after`, ascending.
pub(super) fn agentex_events(
    conn: &Db,
    session_pk: i64,
    after: i64,
    limit: u32,
) -> Result<Vec<EventRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "{EVENT_SELECT} WHERE v.session_pk = ?1 AND v.sequence_id > ?2
         ORDER BY v.sequence_id LIMIT ?3"
    ))?;
    let rows = stmt.query_map(params![session_pk, after, limit], event_from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// A counter a workspace can see: it counts that workspace's work and nobody else's.
#[derive(Debug, Clone, Copy)]
enum WorkspaceCounter {
    /// `sequence_id` of AgentEx events.
    AgentexEvent,
}

impl WorkspaceCounter {
    fn name(self) -> &'static str {
        match self {
            WorkspaceCounter::AgentexEvent => "agentex_event",
        }
    }
}

impl Tx<'_> {
    /// The next value of a counter of the workspace that holds session `session_pk`: 1 for the
    /// first, then one more each time, never reused. The upsert locks the counter's row until
    /// this transaction ends, so concurrent writers (PostgreSQL processes) draw distinct values.
    fn next_in_workspace_of(&mut self, session_pk: i64, counter: WorkspaceCounter) -> Result<i64> {
        Ok(self
            .conn
            .prepare_cached(
                "INSERT INTO workspace_counters (workspace_id, name, value)
                 SELECT workspace_id, ?2, 1 FROM sessions WHERE pk = ?1
                 ON CONFLICT (workspace_id, name)
                 DO UPDATE SET value = workspace_counters.value + 1
                 RETURNING value",
            )?
            .query_row(params![session_pk, counter.name()], |r| r.get(0))?)
    }

    /// Records an event sent to a task; `seq` is the timeline input it delivered, if any.
    pub(crate) fn insert_agentex_event(
        &mut self,
        key: &SessionKey,
        agent_id: &str,
        seq: Option<u64>,
        content: Option<&str>,
    ) -> Result<EventRow> {
        let id = crate::ids::new_id();
        let sequence_id = self.next_in_workspace_of(key.pk, WorkspaceCounter::AgentexEvent)?;
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_events
                    (id, session_pk, agent_id, seq, content, created_at, sequence_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                id,
                key.pk,
                agent_id,
                seq.map(|s| s as i64),
                content,
                self.now,
                sequence_id
            ])?;
        Ok(EventRow {
            sequence_id,
            id,
            task_id: key.id.clone(),
            agent_id: agent_id.to_owned(),
            content: content.map(str::to_owned),
            created_at: self.now,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// States

/// Filters and order of the lists of a task's records (states, spans, trackers).
#[derive(Debug, Clone)]
pub struct RecordFilter {
    pub task_id: Option<String>,
    pub agent_id: Option<String>,
    pub order_by: SortKey,
    pub direction: Direction,
    pub page: Page,
}

#[derive(Debug, Clone)]
pub struct StateRow {
    pub id: String,
    pub task_id: String,
    pub agent_id: String,
    pub state: String,
    pub created_at: i64,
    pub updated_at: Option<i64>,
}

const STATE_SELECT: &str = "SELECT st.id, s.id, st.agent_id, st.state, st.created_at, st.updated_at
    FROM agentex_states st JOIN sessions s ON s.pk = st.session_pk";

fn state_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<StateRow> {
    Ok(StateRow {
        id: r.get(0)?,
        task_id: r.get(1)?,
        agent_id: r.get(2)?,
        state: r.get(3)?,
        created_at: r.get(4)?,
        updated_at: r.get(5)?,
    })
}

pub(super) fn state(conn: &Db, workspace_id: &str, id: &str) -> Result<Option<StateRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "{STATE_SELECT} WHERE st.id = ?1 AND s.workspace_id = ?2"
        ))?
        .query_row([id, workspace_id], state_from_row)
        .optional()?)
}

/// `order_by`: `created_at` or `updated_at`.
pub(super) fn states(conn: &Db, workspace_id: &str, f: &RecordFilter) -> Result<Vec<StateRow>> {
    let mut list = List::new(STATE_SELECT, "s.workspace_id", workspace_id);
    list.filter("s.id = ?", f.task_id.as_deref());
    list.filter("st.agent_id = ?", f.agent_id.as_deref());
    let order = if f.order_by == SortKey::UpdatedAt {
        "COALESCE(st.updated_at, st.created_at)"
    } else {
        "st.created_at"
    };
    list.run(conn, order, "st.id", f.direction, f.page, state_from_row)
}

impl Tx<'_> {
    pub(super) fn insert_state(
        &mut self,
        key: &SessionKey,
        agent_id: &str,
        state: &str,
    ) -> Result<String> {
        let id = crate::ids::new_id();
        let n = self
            .conn
            .prepare_cached(
                "INSERT INTO agentex_states (id, session_pk, agent_id, state, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (session_pk, agent_id) DO NOTHING",
            )?
            .execute(params![id, key.pk, agent_id, state, self.now])?;
        if n == 0 {
            return Err(Error::Conflict(
                "state_exists",
                "this task already has a state for this agent; update it instead".into(),
            ));
        }
        Ok(id)
    }

    /// Replaces a state's document; false when there is no such state in the workspace.
    pub(super) fn update_state(
        &mut self,
        workspace_id: &str,
        id: &str,
        state: &str,
    ) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE agentex_states SET state = ?3, updated_at = ?4 WHERE id = ?1
                 AND session_pk IN (SELECT pk FROM sessions WHERE workspace_id = ?2)",
            )?
            .execute(params![id, workspace_id, state, self.now])?;
        Ok(n > 0)
    }

    pub(super) fn delete_state(&mut self, workspace_id: &str, id: &str) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "DELETE FROM agentex_states WHERE id = ?1
                 AND session_pk IN (SELECT pk FROM sessions WHERE workspace_id = ?2)",
            )?
            .execute([id, workspace_id])?;
        Ok(n > 0)
    }

    pub(super) fn state(&self, workspace_id: &str, id: &str) -> Result<Option<StateRow>> {
        state(self.conn, workspace_id, id)
    }
}

// ---------------------------------------------------------------------------------------------
// Spans

#[derive(Debug, Clone, Default)]
pub struct SpanRow {
    pub id: String,
    pub trace_id: String,
    pub name: String,
    /// Microseconds since the Unix epoch.
    pub start_time: i64,
    pub end_time: Option<i64>,
    pub parent_id: Option<String>,
    pub task_id: Option<String>,
    pub data: Option<String>,
    pub input: Option<String>,
    pub output: Option<String>,
}

const SPAN_COLUMNS: &str =
    "id, trace_id, name, start_time, end_time, parent_id, task_id, data, input, output";

fn span_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<SpanRow> {
    Ok(SpanRow {
        id: r.get(0)?,
        trace_id: r.get(1)?,
        name: r.get(2)?,
        start_time: r.get(3)?,
        end_time: r.get(4)?,
        parent_id: r.get(5)?,
        task_id: r.get(6)?,
        data: r.get(7)?,
        input: r.get(8)?,
        output: r.get(9)?,
    })
}

pub(super) fn span(conn: &Db, workspace_id: &str, id: &str) -> Result<Option<SpanRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {SPAN_COLUMNS} FROM agentex_spans WHERE workspace_id = ?1 AND id = ?2"
        ))?
        .query_row([workspace_id, id], span_from_row)
        .optional()?)
}

/// `order_by`: `start_time`, `end_time` or `name`. Spans have no agent, so the filter's
/// `agent_id` does not apply; `trace_id` narrows to one trace.
pub(super) fn spans(
    conn: &Db,
    workspace_id: &str,
    trace_id: Option<&str>,
    f: &RecordFilter,
) -> Result<Vec<SpanRow>> {
    let select = format!("SELECT {SPAN_COLUMNS} FROM agentex_spans");
    let mut list = List::new(&select, "workspace_id", workspace_id);
    list.filter("trace_id = ?", trace_id);
    list.filter("task_id = ?", f.task_id.as_deref());
    let order = match f.order_by {
        SortKey::EndTime => "end_time",
        SortKey::Name => "name",
        _ => "start_time",
    };
    list.run(conn, order, "id", f.direction, f.page, span_from_row)
}

impl Tx<'_> {
    pub(super) fn insert_span(&mut self, workspace_id: &str, s: &SpanRow) -> Result<()> {
        let n = self
            .conn
            .prepare_cached(&format!(
                "INSERT INTO agentex_spans (workspace_id, {SPAN_COLUMNS}, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
                 ON CONFLICT (workspace_id, id) DO NOTHING"
            ))?
            .execute(params![
                workspace_id,
                s.id,
                s.trace_id,
                s.name,
                s.start_time,
                s.end_time,
                s.parent_id,
                s.task_id,
                s.data,
                s.input,
                s.output,
                self.now
            ])?;
        if n == 0 {
            return Err(Error::Conflict(
                "span_exists",
                format!("a span with id {} already exists", s.id),
            ));
        }
        Ok(())
    }

    /// Replaces every field of a span but its id.
    pub(super) fn update_span(&mut self, workspace_id: &str, s: &SpanRow) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE agentex_spans SET trace_id = ?3, name = ?4, start_time = ?5,
                    end_time = ?6, parent_id = ?7, task_id = ?8, data = ?9, input = ?10,
                    output = ?11
                 WHERE workspace_id = ?1 AND id = ?2",
            )?
            .execute(params![
                workspace_id,
                s.id,
                s.trace_id,
                s.name,
                s.start_time,
                s.end_time,
                s.parent_id,
                s.task_id,
                s.data,
                s.input,
                s.output
            ])?;
        Ok(())
    }

    pub(super) fn span(&self, workspace_id: &str, id: &str) -> Result<Option<SpanRow>> {
        span(self.conn, workspace_id, id)
    }
}

// ---------------------------------------------------------------------------------------------
// Trackers

/// A task's tracker: its agent's processing cursor over the task's events.
#[derive(Debug, Clone)]
pub struct TrackerRow {
    pub task_id: String,
    pub agent_id: String,
    pub created_at: i64,
    pub last_processed_event_id: Option<String>,
    pub status: Option<String>,
    pub status_reason: Option<String>,
    pub updated_at: Option<i64>,
}

const TRACKER_SELECT: &str = "SELECT s.id, s.agent_id, s.created_at, k.last_processed_event_id,
    k.status, k.status_reason, k.updated_at
    FROM sessions s LEFT JOIN agentex_trackers k ON k.session_pk = s.pk";

fn tracker_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<TrackerRow> {
    Ok(TrackerRow {
        task_id: r.get(0)?,
        agent_id: r.get(1)?,
        created_at: r.get(2)?,
        last_processed_event_id: r.get(3)?,
        status: r.get(4)?,
        status_reason: r.get(5)?,
        updated_at: r.get(6)?,
    })
}

pub(super) fn tracker(conn: &Db, workspace_id: &str, task_id: &str) -> Result<Option<TrackerRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "{TRACKER_SELECT} WHERE s.id = ?1 AND s.workspace_id = ?2"
        ))?
        .query_row([task_id, workspace_id], tracker_from_row)
        .optional()?)
}

/// `order_by`: `created_at` or `updated_at`.
pub(super) fn trackers(conn: &Db, workspace_id: &str, f: &RecordFilter) -> Result<Vec<TrackerRow>> {
    let mut list = List::new(TRACKER_SELECT, "s.workspace_id", workspace_id);
    list.filter("s.id = ?", f.task_id.as_deref());
    list.filter("s.agent_id = ?", f.agent_id.as_deref());
    let order = if f.order_by == SortKey::UpdatedAt {
        "COALESCE(k.updated_at, s.created_at)"
    } else {
        "s.created_at"
    };
    list.run(conn, order, "s.id", f.direction, f.page, tracker_from_row)
}

/// A tracker change; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub(crate) struct TrackerUpdate<'a> {
    pub last_processed_event_id: Option<&'a str>,
    pub status: Option<&'a str>,
    pub status_reason: Option<&'a str>,
}

impl Tx<'_> {
    pub(super) fn update_tracker(&mut self, key: &SessionKey, u: &TrackerUpdate<'_>) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_trackers (session_pk, last_processed_event_id, status,
                    status_reason, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (session_pk) DO UPDATE SET
                    last_processed_event_id = COALESCE(excluded.last_processed_event_id,
                        agentex_trackers.last_processed_event_id),
                    status = COALESCE(excluded.status, agentex_trackers.status),
                    status_reason = COALESCE(excluded.status_reason, agentex_trackers.status_reason),
                    updated_at = excluded.updated_at",
            )?
            .execute(params![
                key.pk,
                u.last_processed_event_id,
                u.status,
                u.status_reason,
                self.now
            ])?;
        Ok(())
    }

    /// The event of a task with this id, if there is one.
    pub(super) fn task_has_event(&self, key: &SessionKey, event_id: &str) -> Result<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM agentex_events WHERE session_pk = ?1 AND id = ?2")?
            .query_row(params![key.pk, event_id], |_| Ok(()))
            .optional()?
            .is_some())
    }
}

// ---------------------------------------------------------------------------------------------
// The port: the agent platform API's aggregate as async operations

/// The agent platform API's operations on the store, in sessiond's own types.
///
/// Reads run on a pooled read-only connection, writes on the writer thread; each write method is
/// one whole unit of work (one savepoint of a batch, answered after COMMIT). Operations that must
/// commit with session-log writes (a task created with its session, a message with its revision
/// marks) are the [`Tx`] methods above, which the sessions core runs inside its own transaction.
#[derive(Clone, Copy)]
pub struct AgentexStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// The agent platform API's aggregate: agents' registrations, deployments, tasks, messages,
    /// events, states, spans and trackers.
    pub fn agentex(&self) -> AgentexStore<'_> {
        AgentexStore { store: self }
    }
}

/// An owned [`AgentKey`], for work that leaves the caller's stack.
enum OwnedKey {
    Id(String),
    Name(String),
}

impl OwnedKey {
    fn agent(key: AgentKey<'_>) -> OwnedKey {
        match key {
            AgentKey::Id(v) => OwnedKey::Id(v.to_owned()),
            AgentKey::Name(v) => OwnedKey::Name(v.to_owned()),
        }
    }

    fn task(key: TaskKey<'_>) -> OwnedKey {
        match key {
            TaskKey::Id(v) => OwnedKey::Id(v.to_owned()),
            TaskKey::Name(v) => OwnedKey::Name(v.to_owned()),
        }
    }

    fn as_agent(&self) -> AgentKey<'_> {
        match self {
            OwnedKey::Id(v) => AgentKey::Id(v),
            OwnedKey::Name(v) => AgentKey::Name(v),
        }
    }

    fn as_task(&self) -> TaskKey<'_> {
        match self {
            OwnedKey::Id(v) => TaskKey::Id(v),
            OwnedKey::Name(v) => TaskKey::Name(v),
        }
    }
}

/// A registration to record, owned.
#[derive(Debug, Clone)]
pub struct AgentRegistration {
    pub description: String,
    pub agent_input_type: Option<String>,
    pub registration_metadata: Option<String>,
}

impl AgentRegistration {
    pub fn borrowed(&self) -> Registration<'_> {
        Registration {
            description: &self.description,
            agent_input_type: self.agent_input_type.as_deref(),
            registration_metadata: self.registration_metadata.as_deref(),
        }
    }
}

/// A deployment to create, owned (its id is given by the store).
#[derive(Debug, Clone)]
pub struct DeploymentSpec {
    pub agent_id: String,
    pub docker_image: String,
    pub helm_release_name: Option<String>,
    pub sgp_deploy_id: Option<String>,
    pub registration_metadata: String,
    pub engine: String,
}

/// A change to a task's params and metadata.
#[derive(Debug, Default)]
pub struct TaskPatch {
    /// Merged into the stored params key by key.
    pub merge_params: Option<Map<String, Value>>,
    /// Replaces the stored metadata.
    pub task_metadata: Option<Map<String, Value>>,
}

/// A tracker change, owned; `None` leaves a field as it is.
#[derive(Debug, Default)]
pub struct TrackerChange {
    /// Must be one of the task's events.
    pub last_processed_event_id: Option<String>,
    pub status: Option<String>,
    pub status_reason: Option<String>,
}

impl AgentexStore<'_> {
    // Agents

    pub async fn agent(
        &self,
        workspace_id: &str,
        key: AgentKey<'_>,
    ) -> Result<Option<AgentexAgentRow>> {
        let (ws, key) = (workspace_id.to_owned(), OwnedKey::agent(key));
        self.store
            .read(move |c| agentex_agent(c, &ws, key.as_agent()))
            .await
    }

    pub async fn agents(
        &self,
        workspace_id: &str,
        filter: AgentFilter,
    ) -> Result<Vec<AgentexAgentRow>> {
        let ws = workspace_id.to_owned();
        self.store
            .read(move |c| agentex_agents(c, &ws, &filter))
            .await
    }

    /// Records (or replaces) an agent's registration.
    pub async fn register(&self, agent_id: &str, r: AgentRegistration) -> Result<()> {
        let agent_id = agent_id.to_owned();
        self.store
            .write(move |tx| tx.register_agent(&agent_id, &r.borrowed()))
            .await
    }

    // Deployments

    pub async fn deployment(
        &self,
        agent_id: &str,
        deployment_id: &str,
    ) -> Result<Option<DeploymentRow>> {
        let (agent_id, id) = (agent_id.to_owned(), deployment_id.to_owned());
        self.store
            .read(move |c| deployment(c, &agent_id, &id))
            .await
    }

    pub async fn deployments(
        &self,
        agent_id: &str,
        order_by: SortKey,
        direction: Direction,
        page: Page,
    ) -> Result<Vec<DeploymentRow>> {
        let agent_id = agent_id.to_owned();
        self.store
            .read(move |c| deployments(c, &agent_id, order_by, direction, page))
            .await
    }

    /// Creates a deployment, recording the change in its history (by `author`, now).
    pub async fn create_deployment(
        &self,
        d: DeploymentSpec,
        author: ChangeAuthor,
    ) -> Result<DeploymentRow> {
        self.store
            .write(move |tx| {
                tx.insert_deployment(
                    &NewDeployment {
                        id: &crate::ids::new_id(),
                        agent_id: &d.agent_id,
                        docker_image: &d.docker_image,
                        helm_release_name: d.helm_release_name.as_deref(),
                        sgp_deploy_id: d.sgp_deploy_id.as_deref(),
                        registration_metadata: &d.registration_metadata,
                        engine: &d.engine,
                    },
                    &author,
                )
            })
            .await
    }

    /// Makes a deployment the agent's only production deployment and its engine the agent's,
    /// recording the change in its history.
    pub async fn promote_deployment(
        &self,
        agent_id: &str,
        deployment_id: &str,
        engine: &str,
        author: ChangeAuthor,
    ) -> Result<DeploymentRow> {
        let (agent_id, id, engine) = (
            agent_id.to_owned(),
            deployment_id.to_owned(),
            engine.to_owned(),
        );
        self.store
            .write(move |tx| tx.promote_deployment(&agent_id, &id, &engine, &author))
            .await
    }

    /// Deletes a deployment, recording the change in its history.
    pub async fn delete_deployment(
        &self,
        agent_id: &str,
        deployment_id: &str,
        author: ChangeAuthor,
    ) -> Result<()> {
        let (agent_id, id) = (agent_id.to_owned(), deployment_id.to_owned());
        self.store
            .write(move |tx| tx.delete_deployment(&agent_id, &id, &author))
            .await
    }

    // Tasks

    pub async fn task(&self, workspace_id: &str, key: TaskKey<'_>) -> Result<Option<TaskRow>> {
        let (ws, key) = (workspace_id.to_owned(), OwnedKey::task(key));
        self.store.read(move |c| task(c, &ws, key.as_task())).await
    }

    pub async fn task_by_pk(&self, pk: i64) -> Result<Option<TaskRow>> {
        self.store.read(move |c| task_by_pk(c, pk)).await
    }

    pub async fn tasks(&self, workspace_id: &str, filter: TaskFilter) -> Result<Vec<TaskRow>> {
        let ws = workspace_id.to_owned();
        self.store.read(move |c| tasks(c, &ws, &filter)).await
    }

    /// Merges params and replaces metadata, reading the current params in the same transaction
    /// so that concurrent merges do not lose each other's keys.
    pub async fn patch_task(&self, workspace_id: &str, pk: i64, patch: TaskPatch) -> Result<()> {
        let ws = workspace_id.to_owned();
        self.store
            .write(move |tx| {
                tx.lock_task(pk)?;
                let current = tx.task_by_pk(pk)?.ok_or(Error::NotFound)?;
                let params = patch.merge_params.map(|p| {
                    let mut merged = match current
                        .params
                        .as_deref()
                        .and_then(|s| serde_json::from_str(s).ok())
                    {
                        Some(Value::Object(m)) => m,
                        _ => Map::new(),
                    };
                    merged.extend(p);
                    Value::Object(merged).to_string()
                });
                let metadata = patch.task_metadata.map(|m| Value::Object(m).to_string());
                tx.put_task_fields(
                    &current.key(),
                    &ws,
                    &TaskFields {
                        params: params.as_deref(),
                        task_metadata: metadata.as_deref(),
                        ..Default::default()
                    },
                )
            })
            .await
    }

    // Messages

    pub async fn messages_page(
        &self,
        session_pk: i64,
        filter: MessageFilter,
        direction: Direction,
        page: Page,
    ) -> Result<Vec<MessageRow>> {
        self.store
            .read(move |c| messages_page(c, session_pk, &filter, direction, page))
            .await
    }

    pub async fn messages_from(
        &self,
        session_pk: i64,
        filter: MessageFilter,
        direction: Direction,
        cursor: Option<u64>,
        limit: u32,
    ) -> Result<Vec<MessageRow>> {
        self.store
            .read(move |c| messages_from(c, session_pk, &filter, direction, cursor, limit))
            .await
    }

    pub async fn message(&self, session_pk: i64, seq: u64) -> Result<Option<MessageRow>> {
        self.store.read(move |c| message(c, session_pk, seq)).await
    }

    /// Several messages of one task, read together (`None` where there is none).
    pub async fn messages(
        &self,
        session_pk: i64,
        seqs: Vec<u64>,
    ) -> Result<Vec<Option<MessageRow>>> {
        self.store
            .read(move |c| {
                seqs.iter()
                    .map(|s| message(c, session_pk, *s))
                    .collect::<Result<Vec<_>>>()
            })
            .await
    }

    /// Which message the event at `seq` revises, if it is a revision.
    pub async fn revises(&self, session_pk: i64, seq: u64) -> Result<Option<Revises>> {
        self.store.read(move |c| revises(c, session_pk, seq)).await
    }

    /// Sessions (at most `limit`) holding an agent message still being written whose newest
    /// revision is older than `before` (ms) while no turn runs: what an agent that writes after
    /// its turn (an async ACP agent) leaves when it dies. The runner's message guard closes them.
    pub async fn abandoned(&self, before: i64, limit: u32) -> Result<Vec<SessionKey>> {
        self.store
            .read(move |c| abandoned_sessions(c, before, limit))
            .await
    }

    /// Closes the session's open agent messages if they are still abandoned (checked again with
    /// the row held, so a turn that started or a revision written since keeps them open): a
    /// `system` notice coded `stalled` saying `why`, then each message's last revision, marked
    /// done. The number of messages closed.
    pub async fn close_abandoned(
        &self,
        key: SessionKey,
        before: i64,
        why: String,
    ) -> Result<usize> {
        self.store
            .write(move |tx| {
                tx.lock(super::RowLock::Session(key.pk))?;
                if !tx.has_abandoned_message(key.pk, before)? {
                    return Ok(0);
                }
                tx.append(
                    &key,
                    &Event::System {
                        level: Level::Warn,
                        message: why.clone(),
                        metadata: Some(SystemMetadata {
                            code: "stalled".to_owned(),
                        }),
                    },
                )?;
                tx.close_open_messages(&key)
            })
            .await
    }

    // Events

    pub async fn event(&self, workspace_id: &str, id: &str) -> Result<Option<EventRow>> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store.read(move |c| agentex_event(c, &ws, &id)).await
    }

    pub async fn events(&self, session_pk: i64, after: i64, limit: u32) -> Result<Vec<EventRow>> {
        self.store
            .read(move |c| agentex_events(c, session_pk, after, limit))
            .await
    }

    /// An event without content (nothing is delivered to the task), while the task takes input
    /// (`store::intake`).
    pub async fn record_event(&self, key: SessionKey, agent_id: &str) -> Result<EventRow> {
        let agent_id = agent_id.to_owned();
        self.store
            .write(move |tx| {
                tx.takes_input(&key)?;
                tx.insert_agentex_event(&key, &agent_id, None, None)
            })
            .await
    }

    /// The event recorded for the timeline entry at `seq` or, when there is none, a new one with
    /// `content`: an agent's message posted twice is recorded once.
    pub async fn record_event_once(
        &self,
        key: SessionKey,
        agent_id: &str,
        seq: Option<u64>,
        content: String,
    ) -> Result<EventRow> {
        let agent_id = agent_id.to_owned();
        self.store
            .write(move |tx| {
                if let Some(seq) = seq
                    && let Some(found) = tx.event_at_seq(key.pk, seq)?
                {
                    return Ok(found);
                }
                tx.insert_agentex_event(&key, &agent_id, seq, Some(&content))
            })
            .await
    }

    // States

    pub async fn state(&self, workspace_id: &str, id: &str) -> Result<Option<StateRow>> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store.read(move |c| state(c, &ws, &id)).await
    }

    pub async fn states(&self, workspace_id: &str, filter: RecordFilter) -> Result<Vec<StateRow>> {
        let ws = workspace_id.to_owned();
        self.store.read(move |c| states(c, &ws, &filter)).await
    }

    /// A new state for a task and an agent (409 when the pair has one).
    pub async fn create_state(
        &self,
        key: SessionKey,
        workspace_id: &str,
        agent_id: &str,
        state: String,
    ) -> Result<StateRow> {
        let (ws, agent_id) = (workspace_id.to_owned(), agent_id.to_owned());
        self.store
            .write(move |tx| {
                let id = tx.insert_state(&key, &agent_id, &state)?;
                tx.state(&ws, &id)?.ok_or(Error::NotFound)
            })
            .await
    }

    /// Replaces a state's document; returns the state as it is now.
    pub async fn update_state(
        &self,
        workspace_id: &str,
        id: &str,
        state: String,
    ) -> Result<StateRow> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store
            .write(move |tx| {
                if !tx.update_state(&ws, &id, &state)? {
                    return Err(Error::NotFound);
                }
                tx.state(&ws, &id)?.ok_or(Error::NotFound)
            })
            .await
    }

    /// Deletes a state; returns it as it was.
    pub async fn delete_state(&self, workspace_id: &str, id: &str) -> Result<StateRow> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store
            .write(move |tx| {
                let s = tx.state(&ws, &id)?.ok_or(Error::NotFound)?;
                tx.delete_state(&ws, &id)?;
                Ok(s)
            })
            .await
    }

    // Spans

    pub async fn span(&self, workspace_id: &str, id: &str) -> Result<Option<SpanRow>> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store.read(move |c| span(c, &ws, &id)).await
    }

    pub async fn spans(
        &self,
        workspace_id: &str,
        trace_id: Option<String>,
        filter: RecordFilter,
    ) -> Result<Vec<SpanRow>> {
        let ws = workspace_id.to_owned();
        self.store
            .read(move |c| spans(c, &ws, trace_id.as_deref(), &filter))
            .await
    }

    pub async fn create_span(&self, workspace_id: &str, s: SpanRow) -> Result<()> {
        let ws = workspace_id.to_owned();
        self.store.write(move |tx| tx.insert_span(&ws, &s)).await
    }

    /// Replaces a span that exists (404 otherwise).
    pub async fn update_span(&self, workspace_id: &str, s: SpanRow) -> Result<()> {
        let ws = workspace_id.to_owned();
        self.store
            .write(move |tx| {
                tx.span(&ws, &s.id)?.ok_or(Error::NotFound)?;
                tx.update_span(&ws, &s)
            })
            .await
    }

    // Trackers

    pub async fn tracker(&self, workspace_id: &str, task_id: &str) -> Result<Option<TrackerRow>> {
        let (ws, id) = (workspace_id.to_owned(), task_id.to_owned());
        self.store.read(move |c| tracker(c, &ws, &id)).await
    }

    pub async fn trackers(
        &self,
        workspace_id: &str,
        filter: RecordFilter,
    ) -> Result<Vec<TrackerRow>> {
        let ws = workspace_id.to_owned();
        self.store.read(move |c| trackers(c, &ws, &filter)).await
    }

    /// Moves a task's tracker; a `last_processed_event_id` that is not one of the task's events
    /// is refused (400) and changes nothing.
    pub async fn update_tracker(&self, key: SessionKey, change: TrackerChange) -> Result<()> {
        self.store
            .write(move |tx| {
                if let Some(event) = &change.last_processed_event_id
                    && !tx.task_has_event(&key, event)?
                {
                    return Err(Error::invalid(format!(
                        "last_processed_event_id: {event} is not an event of this task"
                    )));
                }
                tx.update_tracker(
                    &key,
                    &TrackerUpdate {
                        last_processed_event_id: change.last_processed_event_id.as_deref(),
                        status: change.status.as_deref(),
                        status_reason: change.status_reason.as_deref(),
                    },
                )
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_kinds_selects_nothing() {
        assert_eq!(kinds_condition(Dialect::Sqlite, &[]).0, "1 = 0");
        let (cond, args) =
            kinds_condition(Dialect::Sqlite, &[MessageKind::Prompt, MessageKind::Text]);
        assert!(cond.contains("e.type IN (?)") && cond.contains("step.type"));
        assert_eq!(args.len(), 2);
    }
}
