//! `task/interrupt`: stops the task's running turn at its next step; the task stays open.

use serde_json::Value;

use super::{TaskParams, params};
use sessiond_core::agentex::tasks::{self, Target};
use sessiond_core::error::Result;
use sessiond_core::sessions::{Actor, Sessions};

pub(super) async fn call(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    raw: &Value,
) -> Result<Value> {
    let p: TaskParams = params(raw)?;
    let task = tasks::resolve(sessions, actor, target, &p.task_ref()).await?;
    let task = tasks::interrupt(sessions, actor, &task).await?;
    Ok(tasks::view(&task, true, None))
}
