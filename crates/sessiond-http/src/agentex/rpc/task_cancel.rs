//! `task/cancel`: the task's final status `CANCELED` (an async ACP agent hears of it).

use serde_json::Value;

use super::{TaskParams, params};
use sessiond_core::agentex::acp::Platform;
use sessiond_core::agentex::calls;
use sessiond_core::agentex::tasks::{self, Target};
use sessiond_core::error::Result;
use sessiond_core::sessions::{Actor, Sessions};

pub(super) async fn call(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    raw: &Value,
    platform: Option<&Platform>,
) -> Result<Value> {
    let p: TaskParams = params(raw)?;
    let task = calls::cancel_task(sessions, actor, target, &p.task_ref(), platform).await?;
    Ok(tasks::view(&task, true, None))
}
