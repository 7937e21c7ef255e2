//! `event/send`: an `Event` on the task; its content, if any, is delivered like a message,
//! without waiting for the turn it causes.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{params, prompt};
use crate::context::AppState;
use sessiond_core::agentex::tasks::{self, Target, TaskRef};
use sessiond_core::error::Result;
use sessiond_core::sessions::Actor;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendEventParams {
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    task_name: Option<String>,
}

pub(super) async fn call(
    state: &AppState,
    actor: &Actor,
    target: Target<'_>,
    raw: &Value,
) -> Result<Value> {
    let p: SendEventParams = params(raw)?;
    let content = match p.content {
        Some(mut c) if !c.is_null() => {
            let d = prompt(state, &c)?;
            // Stored as sent, with the `type` readers switch on.
            if c.get("type").is_none_or(Value::is_null) {
                c["type"] = json!("text");
            }
            Some((c, d))
        }
        _ => None,
    };
    let r = TaskRef {
        id: p.task_id,
        name: p.task_name,
    };
    let event = tasks::send_event(&state.sessions, actor, target, &r, content).await?;
    Ok(sessiond_core::agentex::records::event_view(&event))
}
