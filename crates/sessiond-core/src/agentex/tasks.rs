//! Tasks are sessions. A task's name, params and metadata, and a final status once one is set,
//! are the `agentex_tasks` row beside the session; everything else is the session itself.
//!
//! How a task's status follows the session:
//!
//! | session | `Task.status` |
//! |---|---|
//! | a turn running or queued, or the last turn ended `complete`, `ask` or `sleep` | `RUNNING` |
//! | the last turn ended `interrupted` (`task/interrupt`, the Sessions API's interrupt, a restart) | `INTERRUPTED`; the next message resumes it |
//! | `task/cancel` or `POST /tasks/{id}/cancel` | `CANCELED`, final |
//! | `POST /tasks/{id}/complete`, `/fail`, `/terminate`, `/timeout` | `COMPLETED`, `FAILED`, `TERMINATED`, `TIMED_OUT`, final |
//! | the session was closed (handed off to another on `/v2`) | `COMPLETED`, final, the reason naming its successor |
//!
//! A final status stops the task's work for good (`Sessions::stop`: the running turn is
//! interrupted and queued inputs are dropped) and the task accepts no new messages or events:
//! `task_closed` on every family, `session_closed` for a handoff (the one rule of
//! `store::intake`, checked in the transaction that would take the input).
//! A failed turn does not fail the task: the failure is the answer to the message that caused it.
//! Deleting a task deletes its session; `DELETED` is never shown.

use serde_json::{Map, Value, json};

use super::agents as agent_view;
use super::view;
use crate::config::Policy;
use crate::error::{Error, Result};
use crate::sessions::{Actor, InputCommon, MessageIn, OpenIn, Opened, Sessions, Submitted};
use crate::store::agentex::{
    AgentKey, AgentexAgentRow, DeploymentRow, EventRow, FinalStatus, TaskFilter, TaskKey,
    TaskPatch, TaskRow,
};
use crate::store::sessions::StopLink;
use crate::store::submit::{InputLink, Linked, OpenLink};
use crate::timeline::{AttachmentRef, Behavior};

/// Every value of `Task.status`.
pub const STATUSES: [&str; 8] = [
    "CANCELED",
    "COMPLETED",
    "FAILED",
    "RUNNING",
    "INTERRUPTED",
    "TERMINATED",
    "TIMED_OUT",
    "DELETED",
];

/// Longest task name, in characters.
const NAME_MAX: usize = 256;

/// A task's status and its reason (see the module table).
pub fn status(t: &TaskRow) -> (&str, Option<String>) {
    if let Some(s) = t.final_status {
        return (s.name(), t.status_reason.clone());
    }
    if let Some(to) = &t.handed_off_to {
        return ("COMPLETED", Some(format!("handed off to {to}")));
    }
    if t.turn_status == crate::store::TurnStatus::Interrupted && !t.turn_active {
        (
            "INTERRUPTED",
            Some("the last turn was interrupted; the next message resumes the task".into()),
        )
    } else {
        ("RUNNING", None)
    }
}

pub fn is_final(t: &TaskRow) -> bool {
    final_status(t).is_some()
}

/// The task's final status, if it has one (a closed session's task is `COMPLETED`).
pub fn final_status(t: &TaskRow) -> Option<FinalStatus> {
    match (t.final_status, &t.handed_off_to) {
        (Some(s), _) => Some(s),
        (None, Some(_)) => Some(FinalStatus::Completed),
        (None, None) => None,
    }
}

/// The contract's `Task` (the list's lean form leaves `params` out); `agents` is the task's agent
/// when the request asked for `relationships=agents`.
pub fn view(t: &TaskRow, with_params: bool, agent: Option<(&AgentexAgentRow, &Policy)>) -> Value {
    let (status, reason) = status(t);
    let mut v = json!({
        "id": t.id,
        "name": t.name,
        "status": status,
        "status_reason": reason,
        "task_metadata": view::document(t.task_metadata.as_deref()),
        "created_at": view::time(t.created_at),
        "updated_at": view::time(t.updated_at),
        "cleaned_at": null,
    });
    if with_params {
        v["params"] = view::document(t.params.as_deref());
    }
    if let Some((a, policy)) = agent {
        v["agents"] = json!([agent_view::view(a, policy)]);
    }
    v
}

pub async fn find(sessions: &Sessions, actor: &Actor, key: TaskKey<'_>) -> Result<TaskRow> {
    if let TaskKey::Id(id) = key
        && !crate::ids::looks_like_id(id)
    {
        return Err(Error::NotFound);
    }
    let task = sessions
        .store()
        .agentex()
        .task(&actor.workspace_id, key)
        .await?
        .ok_or(Error::NotFound)?;
    // A registered agent calling back sees only its own tasks (others are not there for it).
    match super::confinement::confined_to(actor) {
        Some(agent) if agent != task.agent_id => Err(Error::NotFound),
        _ => Ok(task),
    }
}

pub async fn reload(sessions: &Sessions, pk: i64) -> Result<TaskRow> {
    sessions
        .store()
        .agentex()
        .task_by_pk(pk)
        .await?
        .ok_or(Error::NotFound)
}

pub async fn list(sessions: &Sessions, actor: &Actor, filter: TaskFilter) -> Result<Vec<TaskRow>> {
    Ok(sessions
        .store()
        .agentex()
        .tasks(&actor.workspace_id, filter)
        .await?)
}

/// The agent a task runs with, for `relationships=agents`.
pub async fn agent_of(sessions: &Sessions, actor: &Actor, t: &TaskRow) -> Result<AgentexAgentRow> {
    super::agents::find(sessions, actor, AgentKey::Id(&t.agent_id)).await
}

/// Where an RPC runs: the agent, and the deployment of a preview (its engine instead of the
/// agent's).
#[derive(Clone, Copy)]
pub struct Target<'a> {
    pub agent: &'a AgentexAgentRow,
    pub deployment: Option<&'a DeploymentRow>,
}

/// A task's own fields at creation.
#[derive(Debug, Default, Clone)]
pub struct NewTask {
    pub name: Option<String>,
    pub params: Option<Map<String, Value>>,
    pub task_metadata: Option<Map<String, Value>>,
}

fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.chars().count() > NAME_MAX || name.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "name: 1 to {NAME_MAX} characters, no control characters"
        )));
    }
    Ok(())
}

/// An existing task may be used by an RPC to `target`: it runs with that agent (and, for a
/// preview, on that deployment).
fn check_target(t: &TaskRow, target: Target<'_>) -> Result<()> {
    Ok(t.check_owner(&target.agent.id, target.deployment.map(|d| d.id.as_str()))?)
}

/// `task/create`: get-or-create by name. An existing task of that name is returned as it is,
/// except that `params`, when given, replace its params (`task_metadata` only applies at
/// creation). Without a name every call opens a new task, with the id `id`. `first` is a message
/// to open a new task with. Returns the task, whether this call created it, and the first
/// message's submission.
pub async fn get_or_create(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    t: NewTask,
    first: Option<MessageIn>,
    id: String,
) -> Result<(TaskRow, bool, Option<Submitted>)> {
    if let Some(name) = &t.name {
        check_name(name)?;
    }
    let params = t.params.map(|p| Value::Object(p).to_string());
    let metadata = t.task_metadata.map(|m| Value::Object(m).to_string());
    let deployment_id = target.deployment.map(|d| d.id.clone());
    let input = OpenIn {
        id,
        agent_id: target.agent.id.clone(),
        title: t.name.clone(),
        engine: target.deployment.map(|d| d.engine.clone()),
        first,
    };
    let link = || OpenLink::AgentexTask {
        name: t.name.clone(),
        params: params.clone(),
        task_metadata: metadata.clone(),
        agent_id: target.agent.id.clone(),
        deployment_id: deployment_id.clone(),
    };
    let opened = match sessions.open(actor, input.clone(), link()).await {
        // Two calls creating one name at once, where writers do not take turns (several
        // processes on PostgreSQL): the loser of the name's uniqueness rule runs again and
        // finds the winner's task, as if it had come second.
        Err(Error::ConstraintRace(_) | Error::Conflict("task_name_taken", _))
            if t.name.is_some() =>
        {
            sessions.open(actor, input, link()).await?
        }
        other => other?,
    };
    match opened {
        Opened::Found(found) => {
            let found = reload(sessions, found.pk).await?;
            Ok((found, false, None))
        }
        Opened::Created {
            task: Some(task),
            submitted,
        } => Ok((task, true, submitted)),
        Opened::Created { task: None, .. } => {
            Err(Error::Internal("a task was opened without its row".into()))
        }
    }
}

/// How an RPC names the task it is for.
#[derive(Debug, Clone, Default)]
pub struct TaskRef {
    pub id: Option<String>,
    pub name: Option<String>,
}

impl TaskRef {
    fn key(&self) -> Option<TaskKey<'_>> {
        match (&self.id, &self.name) {
            (Some(id), _) => Some(TaskKey::Id(id)),
            (None, Some(name)) => Some(TaskKey::Name(name)),
            (None, None) => None,
        }
    }
}

/// The task an RPC names, checked against its target (404 when there is none).
pub async fn resolve(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    r: &TaskRef,
) -> Result<TaskRow> {
    let key = r
        .key()
        .ok_or_else(|| Error::invalid("either task_id or task_name must be provided"))?;
    let t = find(sessions, actor, key).await?;
    if let (Some(_), Some(name)) = (&r.id, &r.name)
        && t.name.as_deref() != Some(name.as_str())
    {
        return Err(Error::invalid(format!(
            "task_id and task_name name different tasks ({} is not named {name:?})",
            t.id
        )));
    }
    check_target(&t, target)?;
    Ok(t)
}

/// A message to deliver: its text and drive attachments.
#[derive(Debug, Clone)]
pub struct Prompt {
    pub text: String,
    pub attachments: Vec<AttachmentRef>,
    /// What the message does when the task's turn is running (`message/send`'s `if_busy`).
    pub busy: crate::sessions::busy::BusyPolicy,
}

impl Prompt {
    fn message(self) -> MessageIn {
        MessageIn {
            prompt: self.text,
            tier: None,
            // Each message gets a turn of its own, after any turn already running.
            behavior: Behavior::FollowUp,
            common: InputCommon {
                attachments: self.attachments,
                ..Default::default()
            },
            busy: self.busy,
        }
    }
}

/// Where a message goes: a task that exists, or a new task with the id it will get (known
/// first, so that its turn can be followed from its start).
pub enum Destination {
    Existing(Box<TaskRow>),
    New(String),
}

impl Destination {
    pub fn session_id(&self) -> &str {
        match self {
            Destination::Existing(t) => &t.id,
            Destination::New(id) => id,
        }
    }
}

/// The task a `message/send` names, or a new one: no task named, or a name no task has. Whether
/// the task takes the message is decided where it is written (`store::intake`).
pub async fn destination(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    r: &TaskRef,
) -> Result<Destination> {
    let existing = match (&r.id, &r.name) {
        (None, None) => None,
        (None, Some(name)) => match find(sessions, actor, TaskKey::Name(name)).await {
            Ok(t) => Some(t),
            Err(Error::NotFound) => None,
            Err(e) => return Err(e),
        },
        _ => Some(resolve(sessions, actor, target, r).await?),
    };
    match existing {
        Some(t) => {
            check_target(&t, target)?;
            Ok(Destination::Existing(Box::new(t)))
        }
        None => Ok(Destination::New(crate::ids::new_id())),
    }
}

/// `message/send`: delivers a message to its destination, opening the new task with it
/// (`task_params` apply only then). A task whose agent asked a question gets the message as its
/// answer. Returns the task as it was found (or created) and the submission; `None`: a task of
/// the new task's name was created meanwhile; look for the destination again.
pub async fn send(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    to: Destination,
    name: Option<String>,
    task_params: Option<Map<String, Value>>,
    d: Prompt,
) -> Result<Option<(TaskRow, Submitted)>> {
    let task = match to {
        Destination::New(id) => {
            let t = NewTask {
                name,
                params: task_params,
                task_metadata: None,
            };
            let (task, created, submitted) =
                get_or_create(sessions, actor, target, t, Some(d.message()), id).await?;
            return match submitted {
                Some(s) if created => Ok(Some((task, s))),
                _ => Ok(None),
            };
        }
        Destination::Existing(task) => *task,
    };
    let (submitted, _) = deliver(sessions, actor, &task, d, InputLink::None).await?;
    Ok(Some((task, submitted)))
}

/// Delivers a message to a task (an answer when it is asking), with `link` recorded beside it.
async fn deliver(
    sessions: &Sessions,
    actor: &Actor,
    task: &TaskRow,
    d: Prompt,
    link: InputLink,
) -> Result<(Submitted, Linked)> {
    if task.turn_status == crate::store::TurnStatus::Ask && !task.turn_active {
        let common = InputCommon {
            attachments: d.attachments.clone(),
            ..Default::default()
        };
        match sessions
            .answer_with(actor, &task.id, d.text.clone(), common, link.clone())
            .await
        {
            Ok((s, Some(t))) => return Ok((s, t)),
            Ok((_, None)) => return Err(Error::Internal("answer without its link".into())),
            // It stopped asking meanwhile: send it as a message.
            Err(Error::NotAsking) => {}
            Err(e) => return Err(e),
        }
    }
    message(sessions, actor, task, d, link).await
}

async fn message(
    sessions: &Sessions,
    actor: &Actor,
    task: &TaskRow,
    d: Prompt,
    link: InputLink,
) -> Result<(Submitted, Linked)> {
    match sessions
        .message_with(actor, &task.id, d.message(), link)
        .await?
    {
        (s, Some(t)) => Ok((s, t)),
        (_, None) => Err(Error::Internal("message without its link".into())),
    }
}

/// `event/send`: records an event on the task and delivers its content (if any) as a message.
pub async fn send_event(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    r: &TaskRef,
    content: Option<(Value, Prompt)>,
) -> Result<EventRow> {
    let task = resolve(sessions, actor, target, r).await?;
    let agent_id = task.agent_id.clone();
    match content {
        Some((raw, d)) => {
            let link = InputLink::AgentexEvent {
                agent_id,
                content: raw.to_string(),
            };
            match deliver(sessions, actor, &task, d, link).await? {
                (_, Linked::AgentexEvent(event)) => Ok(event),
                (_, Linked::None) => Err(Error::Internal("event/send without its event".into())),
            }
        }
        None => Ok(sessions
            .store()
            .agentex()
            .record_event(task.key(), &agent_id)
            .await?),
    }
}

/// Sets a final status: the task's work stops for good (see the module doc). `strict` refuses a
/// task that already has one (409); otherwise such a task is returned as it is.
pub async fn finish(
    sessions: &Sessions,
    actor: &Actor,
    task: &TaskRow,
    status: FinalStatus,
    reason: Option<String>,
    strict: bool,
) -> Result<TaskRow> {
    if let Some(current) = final_status(task) {
        if strict {
            return Err(Error::Conflict(
                "task_closed",
                format!("task {} is already {}", task.id, current.name()),
            ));
        }
        return Ok(task.clone());
    }
    let reason = reason.filter(|r| !r.trim().is_empty()).unwrap_or_else(|| {
        format!(
            "Task {}",
            status.name().to_ascii_lowercase().replace('_', " ")
        )
    });
    sessions
        .stop(actor, &task.id, StopLink::TaskFinal { status, reason })
        .await?;
    reload(sessions, task.pk).await
}

/// `task/interrupt`: the cooperative stop of the running turn (the Sessions API's interrupt);
/// the task stays open and resumes with its next message.
pub async fn interrupt(sessions: &Sessions, actor: &Actor, task: &TaskRow) -> Result<TaskRow> {
    sessions.interrupt(actor, &task.id).await?;
    reload(sessions, task.pk).await
}

/// `PUT /tasks/{id}`: `merge_params` is merged into the params key by key; `task_metadata`
/// replaces the metadata.
pub async fn update(
    sessions: &Sessions,
    actor: &Actor,
    task: &TaskRow,
    merge_params: Option<Map<String, Value>>,
    task_metadata: Option<Map<String, Value>>,
) -> Result<TaskRow> {
    sessions
        .store()
        .agentex()
        .patch_task(
            &actor.workspace_id,
            task.pk,
            TaskPatch {
                merge_params,
                task_metadata,
            },
        )
        .await?;
    reload(sessions, task.pk).await
}
