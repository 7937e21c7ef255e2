//! `answer_question`: the answer to a session that is asking (the `/v1` answer); the turn it
//! resumes is followed.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, args, session_id_schema, wait_schema};
use crate::error::Result;
use crate::limits::check_length;
use crate::mcp::{Context, turn};
use crate::sessions::InputCommon;

pub const TOOL: Tool = Tool {
    name: "answer_question",
    title: "Answer a question",
    description: "Answers the question a session is asking (its state is `asking`) and follows the turn the answer resumes. A session that is not asking refuses with `not_asking`.",
    writes: true,
    follows_turn: true,
    input_schema: || {
        json!({
            "type": "object",
            "properties": {
                "sessionId": session_id_schema(),
                "answer": { "type": "string" },
                "clientRequestId": { "type": "string" },
                "wait": wait_schema(),
            },
            "required": ["sessionId", "answer"],
            "additionalProperties": false,
        })
    },
    output_schema: turn::outcome_schema,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    session_id: String,
    answer: String,
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
    check_length(
        "answer",
        &a.answer,
        ctx.sessions.config().limits.max_prompt_chars,
    )?;
    let common = InputCommon {
        client_request_id: super::request_id(a.client_request_id)?,
        fingerprint,
        ..InputCommon::default()
    };
    let sub = ctx
        .sessions
        .answer(&ctx.caller.actor, &a.session_id, a.answer, common)
        .await?;
    turn::follow(ctx, &sub, a.wait.unwrap_or(true)).await
}
