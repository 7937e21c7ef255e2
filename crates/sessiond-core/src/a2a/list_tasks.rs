//! `ListTasks`: the agent's sessions as tasks, newest first, a page at a time (`pageToken` is
//! the Sessions API's opaque list cursor). `contextId` narrows the list to that one session;
//! `status` keeps the tasks in that state (applied to each page, so a page may hold fewer than
//! `pageSize` tasks while more follow). `totalSize` counts the tasks of the page returned.

use serde_json::{Value, json};

use super::error::{A2aError, A2aResult};
use super::reading::State;
use super::task;
use super::{Server, message};
use crate::sessions::ListQuery;

/// The page size when the client names none.
const PAGE_DEFAULT: u32 = 50;

pub async fn list_tasks(server: &Server<'_>, params: &Value) -> A2aResult<Value> {
    let (sessions, actor) = (server.sessions, server.actor);
    let page_max = sessions.config().limits.list_page_max;
    let page_size = match params.get("pageSize") {
        None | Some(Value::Null) => PAGE_DEFAULT.min(page_max),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 && n <= page_max as u64 => n as u32,
            _ => {
                return Err(A2aError::invalid_params(format!(
                    "pageSize: from 1 to {page_max}"
                )));
            }
        },
    };
    let status = match params.get("status").and_then(Value::as_str) {
        None | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(name) => Some(State::parse(name).ok_or_else(|| {
            A2aError::invalid_params(format!("status: {name} is not a state tasks take"))
        })?),
    };
    let history_length = message::history_length(params, "historyLength")?;
    let include_artifacts = params
        .get("includeArtifacts")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let token = params
        .get("pageToken")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty());
    let (rows, next) = match params
        .get("contextId")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
    {
        Some(context) => match task::find(sessions, actor, server.agent, context).await {
            Ok(row) => (vec![row], None),
            Err(e) if e.code == super::error::TASK_NOT_FOUND => (vec![], None),
            Err(e) => return Err(e),
        },
        None => {
            let query = ListQuery {
                cursor: token.map(str::to_owned),
                limit: page_size,
                include_archived: true,
                agent_id: Some(server.agent.id.clone()),
                ..ListQuery::default()
            };
            sessions.list(actor, query).await.map_err(|e| match e {
                crate::error::Error::InvalidRequest(_) => {
                    A2aError::invalid_params("pageToken: not a token this server issued")
                }
                other => other.into(),
            })?
        }
    };
    let mut tasks = Vec::with_capacity(rows.len());
    for row in &rows {
        let (state, mut t) = task::view(sessions, row, history_length).await?;
        if status.is_some_and(|s| s != state) {
            continue;
        }
        if !include_artifacts {
            t["artifacts"] = json!([]);
        }
        tasks.push(t);
    }
    Ok(json!({
        "tasks": tasks,
        "nextPageToken": next.unwrap_or_default(),
        "pageSize": page_size,
        "totalSize": tasks.len(),
    }))
}
