//! `read_timeline`: a range of a session's timeline (the `/v1` history).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, args, session_id_schema};
use crate::error::{Error, Result};
use crate::mcp::Context;
use crate::sessions::HistoryQuery;

pub const TOOL: Tool = Tool {
    name: "read_timeline",
    title: "Read a timeline range",
    description: "Events of a session's timeline: those after seq `after` (oldest first; pass a page's `nextCursor` as `after` for the next), or with `before`, the page just before that seq (`before` 0: the newest page). Each event is the timeline's own JSON.",
    writes: false,
    follows_turn: false,
    input_schema: || {
        json!({
            "type": "object",
            "properties": {
                "sessionId": session_id_schema(),
                "after": { "type": "integer", "minimum": 0 },
                "before": { "type": "integer", "minimum": 0 },
                "limit": { "type": "integer", "minimum": 1, "default": 100 },
            },
            "required": ["sessionId"],
            "additionalProperties": false,
        })
    },
    output_schema: || {
        json!({
            "type": "object",
            "properties": {
                "events": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "seq": { "type": "integer" },
                            "createdAt": { "type": "integer" },
                            "event": { "type": "object", "properties": { "type": { "type": "string" } }, "required": ["type"] },
                        },
                        "required": ["seq", "createdAt", "event"],
                    },
                },
                "nextCursor": { "type": "integer" },
            },
            "required": ["events"],
        })
    },
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Args {
    session_id: String,
    after: Option<u64>,
    before: Option<u64>,
    limit: Option<u32>,
}

pub async fn call(ctx: &Context<'_>, raw: Value) -> Result<Value> {
    let a: Args = args(raw)?;
    let max = ctx.sessions.config().limits.history_page_max;
    let limit = match a.limit {
        None => 100.min(max),
        Some(n) if (1..=max).contains(&n) => n,
        Some(_) => return Err(Error::invalid(format!("limit: must be from 1 to {max}"))),
    };
    let q = match (a.after, a.before) {
        (Some(_), Some(_)) => return Err(Error::invalid("after and before cannot be combined")),
        (_, Some(before)) => HistoryQuery::Backward { before, limit },
        (after, None) => HistoryQuery::Forward {
            cursor: after.unwrap_or(0),
            limit,
        },
    };
    let page = ctx
        .sessions
        .history(&ctx.caller.actor, &a.session_id, q)
        .await?;
    let events: Vec<Value> = page
        .events
        .iter()
        .map(|e| {
            json!({
                "seq": e.seq,
                "createdAt": e.created_at,
                "event": serde_json::from_str::<Value>(&e.body).unwrap_or(Value::Null),
            })
        })
        .collect();
    let mut out = json!({ "events": events });
    if let Some(c) = page.next_cursor {
        out["nextCursor"] = json!(c);
    }
    Ok(out)
}
