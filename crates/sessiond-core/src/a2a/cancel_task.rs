//! `CancelTask`: the session's interrupt. A working task's turn stops and the task is answered
//! once its `interrupted` terminal is written (or the wait's deadline passes); a task waiting
//! for input is canceled at once; a completed, failed or canceled task is not cancelable.

use serde_json::Value;

use super::error::{A2aError, A2aResult, TASK_NOT_CANCELABLE};
use super::{Server, task};
use crate::store::SessionKey;

pub async fn cancel_task(server: &Server<'_>, params: &Value) -> A2aResult<Value> {
    let id = params.get("id").and_then(Value::as_str).unwrap_or("");
    let (sessions, actor) = (server.sessions, server.actor);
    let row = task::find(sessions, actor, server.agent, id).await?;
    let (state, _) = task::view(sessions, &row, Some(0)).await?;
    if state.is_terminal() {
        return Err(A2aError::new(
            TASK_NOT_CANCELABLE,
            format!("the task is {}", state.name()),
        ));
    }
    sessions.interrupt(actor, &row.id).await?;
    if row.turn_active {
        let key = SessionKey {
            pk: row.pk,
            id: row.id.clone(),
        };
        sessions
            .wait_for_terminal(&key, row.last_delivered_input_seq)
            .await?;
    }
    let row = sessions.detail_row(actor, &row.id).await?;
    let (_, task) = task::view(sessions, &row, None).await?;
    Ok(task)
}
