//! `list_sessions`: the caller's view of the workspace's sessions, newest first, optionally
//! searched and filtered (the `/v1` list).

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, args};
use crate::error::{Error, Result};
use crate::mcp::Context;
use crate::sessions::{ListQuery, view};
use crate::store::projections::Bucket;

pub const TOOL: Tool = Tool {
    name: "list_sessions",
    title: "List or search sessions",
    description: "Sessions of the workspace, newest first. `search` matches titles and prompts; `bucket` keeps those asking, running, scheduled or done; `agent` keeps one agent's. Pass `cursor` from a page's `nextCursor` for the next page.",
    writes: false,
    follows_turn: false,
    input_schema: || {
        json!({
            "type": "object",
            "properties": {
                "search": { "type": "string", "maxLength": 200 },
                "bucket": { "type": "string", "enum": ["asking", "running", "scheduled", "done"] },
                "agent": { "type": "string", "description": "An agent's slug or id." },
                "cursor": { "type": "string" },
                "limit": { "type": "integer", "minimum": 1, "default": 20 },
            },
            "additionalProperties": false,
        })
    },
    output_schema: || {
        json!({
            "type": "object",
            "properties": {
                "sessions": { "type": "array", "items": summary_schema() },
                "nextCursor": { "type": "string" },
            },
            "required": ["sessions"],
        })
    },
};

/// A session as lists show it.
pub fn summary_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": { "type": "string" },
            "title": { "type": "string" },
            "turnStatus": { "type": "string" },
            "bucket": { "type": "string" },
            "cwd": { "type": ["string", "null"] },
            "agent": {
                "type": "object",
                "properties": { "id": { "type": "string" }, "name": { "type": "string" } },
                "required": ["id", "name"],
            },
            "createdAt": { "type": "integer" },
            "updatedAt": { "type": "integer" },
            "lastEventSeq": { "type": "integer" },
        },
        "required": ["id", "title", "turnStatus", "bucket", "agent", "createdAt", "lastEventSeq"],
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    search: Option<String>,
    bucket: Option<String>,
    agent: Option<String>,
    cursor: Option<String>,
    limit: Option<u32>,
}

pub async fn call(ctx: &Context<'_>, raw: Value) -> Result<Value> {
    let a: Args = args(raw)?;
    let limits = &ctx.sessions.config().limits;
    if let Some(s) = &a.search {
        crate::limits::check_length("search", s, 200)?;
    }
    let bucket = match a.bucket.as_deref() {
        None => None,
        Some(b) => Some(Bucket::parse(b).ok_or_else(|| {
            Error::invalid("bucket: must be one of asking, running, scheduled, done")
        })?),
    };
    let agent_id = match a.agent.as_deref() {
        None => None,
        Some(key) => Some(super::create_session::agent_id(ctx, key).await?),
    };
    let limit = match a.limit {
        None => 20,
        Some(n) if (1..=limits.list_page_max).contains(&n) => n,
        Some(_) => {
            return Err(Error::invalid(format!(
                "limit: must be from 1 to {}",
                limits.list_page_max
            )));
        }
    };
    let (rows, next) = ctx
        .sessions
        .list(
            &ctx.caller.actor,
            ListQuery {
                cursor: a.cursor.filter(|c| !c.is_empty()),
                limit,
                search: a.search,
                bucket,
                agent_id,
                ..ListQuery::default()
            },
        )
        .await?;
    let sessions = rows
        .iter()
        .map(|r| serde_json::to_value(view::summary(r)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| Error::Internal(format!("cannot encode a session: {e}")))?;
    let mut out = json!({ "sessions": sessions });
    if let Some(next) = next {
        out["nextCursor"] = json!(next);
    }
    Ok(out)
}
