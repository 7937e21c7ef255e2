//! `create_session`: starts a session of an agent with its first prompt (the `/v1` create), and
//! follows its first turn.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, args, wait_schema};
use crate::error::{Error, Result};
use crate::limits::check_prompt;
use crate::mcp::{Context, turn};
use crate::sessions::{CreateIn, InputCommon};
use crate::timeline::Behavior;

pub const TOOL: Tool = Tool {
    name: "create_session",
    title: "Create a session",
    description: "Starts a new session of an agent with a prompt and follows its first turn (with progress) until it ends or the server's wait deadline passes. `cwd` is a folder of the workspace drive inside the agent's anchor (default: the anchor). Returns the session id and the turn's state: `completed` with the reply, `asking` with questions (answer with answer_question), `running` if it is still going.",
    writes: true,
    follows_turn: true,
    input_schema: || {
        json!({
            "type": "object",
            "properties": {
                "agent": { "type": "string", "description": "The agent's slug or id (see list_agents)." },
                "prompt": { "type": "string", "minLength": 1 },
                "cwd": { "type": "string", "description": "Working directory, relative to the workspace drive." },
                "clientRequestId": { "type": "string", "description": "Makes a retried call return the first call's session instead of starting another." },
                "wait": wait_schema(),
            },
            "required": ["agent", "prompt"],
            "additionalProperties": false,
        })
    },
    output_schema: turn::outcome_schema,
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    agent: String,
    prompt: String,
    cwd: Option<String>,
    client_request_id: Option<String>,
    wait: Option<bool>,
}

/// The id of the agent a tool names by slug or id, in the caller's workspace.
pub async fn agent_id(ctx: &Context<'_>, key: &str) -> Result<String> {
    let agents = crate::agents::list(ctx.sessions.store(), &ctx.caller.actor.workspace_id).await?;
    agents
        .into_iter()
        .find(|a| a.slug == key || a.id == key)
        .map(|a| a.id)
        .ok_or(Error::AgentNotFound)
}

pub async fn call(ctx: &Context<'_>, raw: Value) -> Result<Value> {
    let fingerprint = super::fingerprint(TOOL.name, "", &raw);
    let a: Args = args(raw)?;
    check_prompt(
        "prompt",
        &a.prompt,
        ctx.sessions.config().limits.max_prompt_chars,
    )?;
    let agent_id = agent_id(ctx, &a.agent).await?;
    let input = CreateIn {
        prompt: a.prompt,
        agent_id: Some(agent_id),
        cwd: a.cwd,
        tier: None,
        behavior: Behavior::Steer,
        mode: None,
        common: InputCommon {
            client_request_id: super::request_id(a.client_request_id)?,
            fingerprint,
            ..InputCommon::default()
        },
    };
    let sub = ctx.sessions.create(&ctx.caller.actor, input, None).await?;
    turn::follow(ctx, &sub, a.wait.unwrap_or(true)).await
}
