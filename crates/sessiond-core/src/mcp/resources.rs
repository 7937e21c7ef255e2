//! Sessions as MCP resources (`sessiond://sessions/{id}`): listed, read (the session as
//! `get_session` shows it, with its newest events) and subscribed to. A subscription sends
//! `notifications/resources/updated` on the MCP session's stream (`GET /mcp`) each time the
//! session's timeline gains an event, until unsubscribed or the session is deleted.

use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::rpc::{self, RpcError};
use super::{Context, StreamLog};
use crate::error::Error;
use crate::sessions::{HistoryQuery, ListQuery};

pub const SCHEME: &str = "sessiond://sessions/";
const MIME: &str = "application/json";
/// Events a resource read carries (the newest).
const READ_EVENTS: u32 = 20;

fn uri(id: &str) -> String {
    format!("{SCHEME}{id}")
}

/// The session id of a resource URI; a URI of another shape is no resource of ours.
fn session_of(params: &Value) -> Result<String, RpcError> {
    let uri = params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("uri: missing"))?;
    match uri.strip_prefix(SCHEME) {
        Some(id) if crate::ids::looks_like_id(id) => Ok(id.to_owned()),
        _ => Err(not_found(uri)),
    }
}

fn not_found(uri: &str) -> RpcError {
    RpcError {
        code: rpc::RESOURCE_NOT_FOUND,
        message: "resource not found".into(),
        data: Some(json!({ "uri": uri })),
    }
}

/// A core error about the resource `id`: a session that is not there (or not the caller's
/// workspace's) is a resource not found.
fn about(id: &str, e: Error) -> RpcError {
    match e {
        Error::NotFound => not_found(&uri(id)),
        other => RpcError::from_error(&other),
    }
}

/// `resources/list`: the caller's sessions, newest first, a page at a time.
pub async fn list(ctx: &Context<'_>, params: &Value) -> Result<Value, RpcError> {
    let cursor = params
        .get("cursor")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let limit = ctx.sessions.config().limits.list_page_max.min(100);
    let (rows, next) = ctx
        .sessions
        .list(
            &ctx.caller.actor,
            ListQuery {
                cursor,
                limit,
                ..ListQuery::default()
            },
        )
        .await
        .map_err(|e| RpcError::from_error(&e))?;
    let resources: Vec<Value> = rows
        .iter()
        .map(|r| {
            json!({
                "uri": uri(&r.id),
                "name": r.id,
                "title": r.title,
                "description": format!("{} session of {} ({})", r.turn_status.name(), r.agent_name, r.bucket),
                "mimeType": MIME,
            })
        })
        .collect();
    let mut out = json!({ "resources": resources });
    if let Some(next) = next {
        out["nextCursor"] = json!(next);
    }
    Ok(out)
}

/// `resources/templates/list`.
pub fn templates() -> Value {
    json!({
        "resourceTemplates": [{
            "uriTemplate": format!("{SCHEME}{{id}}"),
            "name": "session",
            "title": "A sessiond session",
            "description": "A session: its state, last reply, cost and newest events. Subscribe to hear of each new event.",
            "mimeType": MIME,
        }],
    })
}

/// `resources/read`.
pub async fn read(ctx: &Context<'_>, params: &Value) -> Result<Value, RpcError> {
    let id = session_of(params)?;
    let mut view = super::tools::session_view(ctx, &id)
        .await
        .map_err(|e| about(&id, e))?;
    let page = ctx
        .sessions
        .history(
            &ctx.caller.actor,
            &id,
            HistoryQuery::Backward {
                before: 0,
                limit: READ_EVENTS,
            },
        )
        .await
        .map_err(|e| about(&id, e))?;
    view["events"] = page
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
    Ok(json!({
        "contents": [{ "uri": uri(&id), "mimeType": MIME, "text": view.to_string() }],
    }))
}

/// `resources/subscribe`: from now on, each new durable event of the session is announced.
pub async fn subscribe(ctx: &Context<'_>, params: &Value) -> Result<Value, RpcError> {
    let id = session_of(params)?;
    // The caller must see the session (its workspace, not deleted).
    ctx.sessions
        .detail_row(&ctx.caller.actor, &id)
        .await
        .map_err(|e| about(&id, e))?;
    if ctx.session.is_subscribed(&id) {
        return Ok(json!({}));
    }
    if !ctx.session.may_subscribe() {
        return Err(RpcError::invalid_params(format!(
            "this MCP session holds {} subscriptions: unsubscribe from one first",
            super::registry::MAX_SUBSCRIPTIONS
        )));
    }
    let events = ctx
        .sessions
        .store()
        .bus()
        .observe(&id)
        .map_err(|e| RpcError::from_error(&e))?;
    let task = tokio::spawn(announce(events, ctx.session.standalone(), uri(&id)));
    ctx.session.add_subscription(&id, task.abort_handle());
    Ok(json!({}))
}

/// `resources/unsubscribe`.
pub fn unsubscribe(ctx: &Context<'_>, params: &Value) -> Result<Value, RpcError> {
    let id = session_of(params)?;
    ctx.session.remove_subscription(&id);
    Ok(json!({}))
}

/// Writes `notifications/resources/updated` for each durable event the bus carries; ends when
/// the session is deleted (after one last notice) or the subscription is dropped.
async fn announce(mut events: crate::bus::Subscription, out: Arc<StreamLog>, uri: String) {
    let notice = |seq: Option<u64>, event_type: &str| {
        let mut params = json!({ "uri": uri });
        if let Some(seq) = seq {
            params["_meta"] = json!({ "sessiond/seq": seq, "sessiond/type": event_type });
        }
        rpc::notification("notifications/resources/updated", params).to_string()
    };
    loop {
        match events.rx.recv().await {
            Ok(frame) if frame.seq.is_some() => {
                out.push(notice(frame.seq, &frame.event_type));
            }
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => {
                out.push(notice(None, ""));
            }
            Err(RecvError::Closed) => {
                out.push(notice(None, ""));
                return;
            }
        }
    }
}
