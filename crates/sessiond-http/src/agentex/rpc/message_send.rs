//! `message/send`: delivers a message and answers with the turn it causes — the agent's messages
//! of that turn (`TaskMessage[]`), or with `stream: true` one `TaskMessageUpdate` per line.

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use futures_util::stream;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{REFUSED, error, line, params, prompt, result};
use crate::context::AppState;
use sessiond_core::agentex::acp::Platform;
use sessiond_core::agentex::calls;
use sessiond_core::agentex::tasks::{Target, TaskRef};
use sessiond_core::agentex::updates::{Follower, Item};
use sessiond_core::error::Result;
use sessiond_core::sessions::Actor;
use sessiond_core::sessions::busy;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendMessageParams {
    content: Value,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    task_name: Option<String>,
    #[serde(default)]
    task_params: Option<Map<String, Value>>,
    /// sessiond's busy policy: `enqueue` (the default), `interrupt` or `reject`.
    #[serde(default)]
    if_busy: Option<String>,
}

/// Delivers the message; the follower of its turn, and whether the answer streams.
pub(super) async fn start(
    state: &AppState,
    actor: &Actor,
    target: Target<'_>,
    raw: &Value,
    platform: Option<&Platform>,
) -> Result<(Follower, bool)> {
    let p: SendMessageParams = params(raw)?;
    let mut d = prompt(state, &p.content)?;
    d.busy = busy::parse("params/if_busy", p.if_busy.as_deref())?;
    let r = TaskRef {
        id: p.task_id,
        name: p.task_name,
    };
    let follower = calls::send_message(
        &state.sessions,
        actor,
        target,
        &r,
        p.task_params,
        d,
        platform,
    )
    .await?;
    Ok((follower, p.stream.unwrap_or(false)))
}

/// The answer while the turn runs: NDJSON updates with `stream: true`, else the agent's
/// messages of the turn once it ends; blank lines keep the connection alive meanwhile.
pub(super) fn answer(follower: Follower, id: Value, streaming: bool) -> HttpResponse {
    let st = Answer {
        follower,
        id,
        streaming,
        messages: Vec::new(),
        done: false,
    };
    let content_type = if streaming {
        "application/x-ndjson"
    } else {
        "application/json"
    };
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream::unfold(st, next_line))
}

/// The answer to `message/send` while its turn runs.
struct Answer {
    follower: Follower,
    id: Value,
    streaming: bool,
    /// The agent's stored messages so far (the non-streaming answer).
    messages: Vec<Value>,
    done: bool,
}

type Chunk = std::result::Result<web::Bytes, actix_web::Error>;

async fn next_line(mut st: Answer) -> Option<(Chunk, Answer)> {
    if st.done {
        return None;
    }
    loop {
        let out = match st.follower.next().await? {
            Item::Update(update) => {
                if let Some(m) = update.get("parent_task_message")
                    && matches!(update["type"].as_str(), Some("done" | "full"))
                {
                    st.messages.push(m.clone());
                }
                if !st.streaming {
                    continue;
                }
                line(&result(&st.id, update))
            }
            Item::Keepalive => "\n".to_owned(),
            Item::StatusMayChange => continue,
            Item::TurnEnded { error: Some(e), .. } => {
                st.done = true;
                line(&error(
                    &st.id,
                    REFUSED,
                    format!("the agent's turn failed: {e}"),
                    json!({
                        "code": "turn_failed",
                        "task_id": st.follower.key().id,
                        "messages": st.messages,
                    }),
                ))
            }
            Item::TurnEnded { .. } => {
                st.done = true;
                if st.streaming {
                    return None;
                }
                line(&result(
                    &st.id,
                    Value::Array(std::mem::take(&mut st.messages)),
                ))
            }
            Item::Closed => {
                st.done = true;
                line(&error(
                    &st.id,
                    REFUSED,
                    "the task was deleted or the server is shutting down before the turn ended",
                    json!({"code": "unavailable", "task_id": st.follower.key().id}),
                ))
            }
        };
        return Some((Ok(web::Bytes::from(out)), st));
    }
}
