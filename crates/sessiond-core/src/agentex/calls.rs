//! The agent platform's task calls that reach beyond the core: a task created for an async ACP
//! agent is announced to the agent's own server before anything else happens to it, a cancel is
//! told to it, and a message is delivered and the turn it causes followed live. The JSON-RPC
//! methods (`api/agentex/rpc/`) decode their params and call one of these.

use std::time::Duration;

use serde_json::{Map, Value};

use super::acp::Platform;
use super::agents::is_async;
use super::tasks::{self, Destination, NewTask, Prompt, Target, TaskRef};
use super::updates::{Follower, Scope};
use crate::error::{Error, Result};
use crate::sessions::{Actor, Sessions};
use crate::store::agentex::{FinalStatus, TaskRow};

/// `task/create`: the task of that name, or a new one; a new task is announced to an async ACP
/// agent, and fails with the reason when the agent does not take it.
pub async fn create_task(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    t: NewTask,
    platform: Option<&Platform>,
) -> Result<TaskRow> {
    let id = crate::ids::new_id();
    let (task, created, _) = tasks::get_or_create(sessions, actor, target, t, None, id).await?;
    if created {
        announce(sessions, actor, target, &task, platform).await?;
    }
    Ok(task)
}

/// `task/cancel`: the task's final status `CANCELED`; an async ACP agent hears of a task that
/// was open until now.
pub async fn cancel_task(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    r: &TaskRef,
    platform: Option<&Platform>,
) -> Result<TaskRow> {
    let task = tasks::resolve(sessions, actor, target, r).await?;
    let was_open = !tasks::is_final(&task);
    let task = tasks::finish(sessions, actor, &task, FinalStatus::Canceled, None, false).await?;
    if was_open && let Some(platform) = platform {
        platform.task_cancelled(target.agent, &task).await;
    }
    Ok(task)
}

/// `message/send`: delivers the message and follows the turn it causes, subscribed before the
/// message is submitted so that the whole turn is seen live. A new task of an async ACP agent is
/// created (and announced) before its first message is delivered; `task_params` apply only to a
/// task this call creates.
pub async fn send_message(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    r: &TaskRef,
    task_params: Option<Map<String, Value>>,
    d: Prompt,
    platform: Option<&Platform>,
) -> Result<Follower> {
    let keepalive = Duration::from_millis(sessions.config().stream.keepalive_ms);
    // Twice at most: a task of the new name may appear between looking and creating.
    for _ in 0..2 {
        let to = match tasks::destination(sessions, actor, target, r).await? {
            Destination::New(id) if platform.is_some() && is_async(target.agent) => {
                let t = NewTask {
                    name: r.name.clone(),
                    params: task_params.clone(),
                    task_metadata: None,
                };
                let (task, created, _) =
                    tasks::get_or_create(sessions, actor, target, t, None, id).await?;
                if created {
                    announce(sessions, actor, target, &task, platform).await?;
                }
                Destination::Existing(Box::new(task))
            }
            other => other,
        };
        let sub = sessions.store().bus().subscribe(to.session_id())?;
        let sent = tasks::send(
            sessions,
            actor,
            target,
            to,
            r.name.clone(),
            task_params.clone(),
            d.clone(),
        )
        .await?;
        if let Some((task, submitted)) = sent {
            let scope = Scope::Turn {
                input_seq: submitted.input_seq,
            };
            return Ok(Follower::start(
                sessions.store(),
                task.key(),
                scope,
                keepalive,
                sub,
            ));
        }
    }
    Err(Error::Conflict(
        "task_name_taken",
        "tasks of that name keep appearing; send the message again".into(),
    ))
}

/// Tells an async ACP agent of a task just created for it; a task the agent does not take fails
/// with the reason.
async fn announce(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    task: &TaskRow,
    platform: Option<&Platform>,
) -> Result<()> {
    let Some(platform) = platform else {
        return Ok(());
    };
    if let Err(e) = platform.task_created(target.agent, task).await {
        let reason = format!("the agent did not accept the task: {e}");
        tasks::finish(
            sessions,
            actor,
            task,
            FinalStatus::Failed,
            Some(reason),
            false,
        )
        .await?;
        return Err(e);
    }
    Ok(())
}
