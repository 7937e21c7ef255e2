//! `list_agents`: the workspace's agents (what `create_session` may start).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, args};
use crate::error::Result;
use crate::mcp::Context;

pub const TOOL: Tool = Tool {
    name: "list_agents",
    title: "List agents",
    description: "The agents of the workspace: each one's slug (what create_session takes), name and anchor folder.",
    writes: false,
    follows_turn: false,
    input_schema: || json!({ "type": "object", "properties": {}, "additionalProperties": false }),
    output_schema: || {
        json!({
            "type": "object",
            "properties": {
                "agents": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": { "type": "string" },
                            "slug": { "type": "string" },
                            "name": { "type": "string" },
                            "anchor": { "type": "string", "description": "The agent's folder in the workspace drive (its sessions' default cwd)." },
                        },
                        "required": ["id", "slug", "name", "anchor"],
                    },
                },
            },
            "required": ["agents"],
        })
    },
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {}

pub async fn call(ctx: &Context<'_>, raw: Value) -> Result<Value> {
    let Args {} = args(raw)?;
    let rows = crate::agents::list(ctx.sessions.store(), &ctx.caller.actor.workspace_id).await?;
    let agents: Vec<Value> = rows
        .iter()
        .map(|a| json!({ "id": a.id, "slug": a.slug, "name": a.name, "anchor": a.anchor }))
        .collect();
    Ok(json!({ "agents": agents }))
}
