//! `get_session`: a session's status, last reply and cost (the `/v1` detail and the `/v2`
//! record's status and cost).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, args, session_id_schema};
use crate::error::Result;
use crate::mcp::{Context, turn};
use crate::sessions::HistoryQuery;

pub const TOOL: Tool = Tool {
    name: "get_session",
    title: "Get a session",
    description: "A session's status (its turn, and the record's lifecycle status), title, agent, cwd, last reply, open questions and cost so far.",
    writes: false,
    follows_turn: false,
    input_schema: || {
        json!({
            "type": "object",
            "properties": { "sessionId": session_id_schema() },
            "required": ["sessionId"],
            "additionalProperties": false,
        })
    },
    output_schema: schema,
};

/// A session as `get_session` and the session resource show it.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "sessionId": { "type": "string" },
            "title": { "type": "string" },
            "agent": {
                "type": "object",
                "properties": { "id": { "type": "string" }, "name": { "type": "string" } },
                "required": ["id", "name"],
            },
            "cwd": { "type": ["string", "null"] },
            "state": { "type": "string", "description": "The turn's state: running, completed, failed, cancelled, asking, interrupted or sleeping." },
            "turnStatus": { "type": "string" },
            "bucket": { "type": "string" },
            "status": { "type": "string", "description": "The session record's lifecycle status (as on /v2)." },
            "source": { "type": "string", "description": "Where the session was started: api, react, cli, cron, mention, mcp." },
            "reply": { "type": ["string", "null"], "description": "The agent's last final reply." },
            "questions": { "type": "array", "items": { "type": "object" } },
            "cost": {
                "type": "object",
                "properties": { "cents": { "type": "integer" } },
                "required": ["cents"],
            },
            "tokens": { "type": "object" },
            "lastEventSeq": { "type": "integer" },
            "createdAt": { "type": "integer" },
            "updatedAt": { "type": "integer" },
        },
        "required": ["sessionId", "title", "agent", "state", "turnStatus", "status", "cost", "lastEventSeq"],
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    session_id: String,
}

pub async fn call(ctx: &Context<'_>, raw: Value) -> Result<Value> {
    let a: Args = args(raw)?;
    view(ctx, &a.session_id).await
}

/// Events read back, at most, to find the last terminal.
const LOOKBACK: u32 = 200;

/// The session `id` as the caller sees it.
pub async fn view(ctx: &Context<'_>, id: &str) -> Result<Value> {
    let actor = &ctx.caller.actor;
    let row = ctx.sessions.detail_row(actor, id).await?;
    let record = ctx.sessions.record_of(row.clone()).await?;
    let page = ctx
        .sessions
        .history_of(
            row.pk,
            HistoryQuery::Backward {
                before: 0,
                limit: LOOKBACK,
            },
        )
        .await?;
    let mut out = json!({
        "sessionId": row.id,
        "title": row.title,
        "agent": { "id": row.agent_id, "name": row.agent_name },
        "cwd": row.cwd,
        "turnStatus": row.turn_status.name(),
        "bucket": row.bucket,
        "status": record["status"],
        "source": record["source"],
        "reply": null,
        "cost": { "cents": record.pointer("/cost/total").cloned().unwrap_or(json!(0)) },
        "tokens": record.get("tokens").cloned().unwrap_or(json!({})),
        "lastEventSeq": row.last_event_seq,
        "createdAt": row.created_at,
        "updatedAt": row.updated_at,
    });
    // The newest terminal says how the last turn ended; the newest `complete` with a result is
    // the last reply.
    let events: Vec<Value> = page
        .events
        .iter()
        .rev()
        .filter(|e| crate::timeline::is_terminal_type(&e.event_type))
        .filter_map(|e| serde_json::from_str::<Value>(&e.body).ok())
        .collect();
    let mut state = json!({});
    match events.first() {
        Some(last) if row.turn_status != crate::store::TurnStatus::Running => {
            turn::terminal_into(last, &mut state)
        }
        _ => state["state"] = json!(turn::state_of_row(row.turn_status)),
    }
    out["state"] = state["state"].take();
    if let Some(q) = state.get("questions") {
        out["questions"] = q.clone();
    }
    if let Some(reply) = events
        .iter()
        .find_map(|e| e.get("result").and_then(Value::as_str))
    {
        out["reply"] = json!(reply);
    }
    Ok(out)
}
