//! `task/create`: the task of that name, or a new one (get-or-create by `name`); `params`, when
//! given, replace an existing task's params, `task_metadata` applies only at creation.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::params;
use sessiond_core::agentex::acp::Platform;
use sessiond_core::agentex::calls;
use sessiond_core::agentex::tasks::{self, NewTask, Target};
use sessiond_core::error::Result;
use sessiond_core::sessions::{Actor, Sessions};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateTaskParams {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    params: Option<Map<String, Value>>,
    #[serde(default)]
    task_metadata: Option<Map<String, Value>>,
}

pub(super) async fn call(
    sessions: &Sessions,
    actor: &Actor,
    target: Target<'_>,
    raw: &Value,
    platform: Option<&Platform>,
) -> Result<Value> {
    let p: CreateTaskParams = params(raw)?;
    let t = NewTask {
        name: p.name,
        params: p.params,
        task_metadata: p.task_metadata,
    };
    let task = calls::create_task(sessions, actor, target, t, platform).await?;
    Ok(tasks::view(&task, true, None))
}
