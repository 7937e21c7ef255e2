//! `GetTask`: the task of one of the agent's sessions, with at most `historyLength` messages.

use serde_json::Value;
use serde_json::value::RawValue;

use super::error::A2aResult;
use super::{Server, message, task};

pub async fn get_task(server: &Server<'_>, params: &Value) -> A2aResult<Box<RawValue>> {
    let id = params.get("id").and_then(Value::as_str).unwrap_or("");
    let history_length = message::history_length(params, "historyLength")?;
    let row = task::find(server.sessions, server.actor, server.agent, id).await?;
    Ok(task::view_raw(server.sessions, &row, history_length).await?)
}
