//! `interrupt`: stops a session's running turn (the `/v1` interrupt).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, args, session_id_schema};
use crate::error::Result;
use crate::mcp::Context;

pub const TOOL: Tool = Tool {
    name: "interrupt",
    title: "Interrupt a session",
    description: "Stops the session's running turn (recorded as `interrupt_requested`, then the turn ends `interrupted`). On an idle session only the request is recorded.",
    writes: true,
    follows_turn: false,
    input_schema: || {
        json!({
            "type": "object",
            "properties": { "sessionId": session_id_schema() },
            "required": ["sessionId"],
            "additionalProperties": false,
        })
    },
    output_schema: || {
        json!({
            "type": "object",
            "properties": {
                "sessionId": { "type": "string" },
                "interrupted": { "type": "boolean", "const": true },
            },
            "required": ["sessionId", "interrupted"],
        })
    },
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    session_id: String,
}

pub async fn call(ctx: &Context<'_>, raw: Value) -> Result<Value> {
    let a: Args = args(raw)?;
    ctx.sessions
        .interrupt(&ctx.caller.actor, &a.session_id)
        .await?;
    Ok(json!({ "sessionId": a.session_id, "interrupted": true }))
}
