//! `send_message`: a message to a session, steering its running turn or queued as a follow-up
//! (the `/v1` message), and the turn it ends up in followed.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, args, session_id_schema, wait_schema};
use crate::error::Result;
use crate::limits::check_prompt;
use crate::mcp::{Context, turn};
use crate::sessions::busy::{self, BUSY_POLICIES};
use crate::sessions::{InputCommon, MessageIn};
use crate::timeline::Behavior;

pub const TOOL: Tool = Tool {
    name: "send_message",
    title: "Send a message",
    description: "Sends a message to a session. `behavior` `steer` (the default) joins the running turn, or starts one; `follow_up` waits for the running turn to end and runs next. `ifBusy` says what happens while a turn runs: `enqueue` (the default: as `behavior` says), `interrupt` (the turn is stopped and this message runs next) or `reject` (refused with session_busy, nothing written). Follows the turn that takes it, like create_session.",
    writes: true,
    follows_turn: true,
    input_schema: || {
        json!({
            "type": "object",
            "properties": {
                "sessionId": session_id_schema(),
                "prompt": { "type": "string", "minLength": 1 },
                "behavior": { "type": "string", "enum": ["steer", "follow_up"], "default": "steer" },
                "ifBusy": { "type": "string", "enum": BUSY_POLICIES, "default": "enqueue" },
                "clientRequestId": { "type": "string" },
                "wait": wait_schema(),
            },
            "required": ["sessionId", "prompt"],
            "additionalProperties": false,
        })
    },
    output_schema: turn::outcome_schema,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    session_id: String,
    prompt: String,
    behavior: Option<Behavior>,
    if_busy: Option<String>,
    client_request_id: Option<String>,
    wait: Option<bool>,
}

pub async fn call(ctx: &Context<'_>, raw: Value) -> Result<Value> {
    let target = raw
        .get("sessionId")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let fingerprint = super::fingerprint(TOOL.name, &target, &raw);
    let a: Args = args(raw)?;
    check_prompt(
        "prompt",
        &a.prompt,
        ctx.sessions.config().limits.max_prompt_chars,
    )?;
    let busy = busy::parse("ifBusy", a.if_busy.as_deref())?;
    let input = MessageIn {
        prompt: a.prompt,
        tier: None,
        behavior: a.behavior.unwrap_or(Behavior::Steer),
        busy,
        common: InputCommon {
            client_request_id: super::request_id(a.client_request_id)?,
            fingerprint,
            ..InputCommon::default()
        },
    };
    let sub = ctx
        .sessions
        .message(&ctx.caller.actor, &a.session_id, input)
        .await?;
    turn::follow(ctx, &sub, a.wait.unwrap_or(true)).await
}
