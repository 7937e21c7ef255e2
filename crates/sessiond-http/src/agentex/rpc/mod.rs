//! The agent RPC routes: JSON-RPC 2.0 over `POST /agents/{agent_id}/rpc`,
//! `/agents/name/{agent_name}/rpc` and a deployment's preview `…/deployments/{id}/rpc`.
//!
//! | method | result |
//! |---|---|
//! | `task/create` | `Task` (get-or-create by `name`) |
//! | `message/send` | `TaskMessage[]`: the agent's messages of the turn the message caused; with `stream: true`, one `TaskMessageUpdate` per line (NDJSON) |
//! | `event/send` | `Event` (its content, if any, is delivered like a message, without waiting) |
//! | `task/cancel` | `Task`, `CANCELED` |
//! | `task/interrupt` | `Task` (the turn stops at its next step) |
//!
//! Once the agent named by the path exists, every answer is HTTP 200 with a JSON-RPC 2.0
//! response: a success has `result` and no `error`, an error has `error` and no `result`. Errors
//! are error objects with the standard codes (-32700 parse error, -32600 invalid request, -32601
//! unknown method, -32602 invalid params, -32603 internal error) or -32000 for what the task's
//! state refuses (a final task, a failed turn), `data.code` carrying sessiond's error code, and
//! the request's `id` echoed. `message/send` answers while the turn runs: blank lines keep the
//! connection alive (clients skip them) until the answer's line. Every line is compact JSON with
//! U+2028, U+2029 and U+0085 escaped, since line readers split on them.
//!
//! This file holds the envelope, the error objects and the dispatch; each method is a file of
//! its own that decodes its params and calls one domain function (`agentex::calls`,
//! `agentex::tasks`).
//!
//! A notification (`"jsonrpc": "2.0"` and no `id` member) is carried out and answered `204 No
//! Content` with no body, its errors included, as JSON-RPC 2.0 says a server must not reply to
//! one (HTTP transports of JSON-RPC answer 204; the official client reads an empty 204 without
//! failing). A request object the server cannot make sense of (a parse error, an invalid request)
//! is still answered, since it cannot be known to be a notification. A body without `jsonrpc` is
//! what the official client and the SDK send by default, with no `id` either, and they read the
//! answer's `result`: it is not a JSON-RPC 2.0 notification and is answered with `"id": null`.

mod event_send;
mod message_send;
mod task_cancel;
mod task_create;
mod task_interrupt;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{agent_by_id, agent_by_name};
use crate::body;
use crate::context::AppState;
use crate::context::Caller;
use sessiond_core::agentex::acp::Platform;
use sessiond_core::agentex::content;
use sessiond_core::agentex::tasks::{Prompt, Target, TaskRef};
use sessiond_core::error::{Error, Result};
use sessiond_core::limits;
use sessiond_core::sessions::Actor;
use sessiond_core::sessions::busy::BusyPolicy;
use sessiond_core::store::agentex::{AgentexAgentRow, DeploymentRow};

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
/// Implementation-defined server error: the task's state refuses the call.
const REFUSED: i64 = -32000;

pub const METHODS: [&str; 5] = [
    "task/create",
    "message/send",
    "event/send",
    "task/cancel",
    "task/interrupt",
];

pub async fn by_id(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    match agent_by_id(&state, &actor, &path).await {
        Ok(agent) => handle(state, actor, agent, None, req, payload).await,
        Err(e) => unreachable_agent(e),
    }
}

pub async fn by_name(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    match agent_by_name(&state, &actor, &path).await {
        Ok(agent) => handle(state, actor, agent, None, req, payload).await,
        Err(e) => unreachable_agent(e),
    }
}

/// An agent that is not there is the route's 404; failing to look it up is still an RPC answer
/// (before the request was read, so without its id).
pub fn unreachable_agent(e: Error) -> Result<HttpResponse> {
    match e {
        Error::Storage(_)
        | Error::StorageFull(_)
        | Error::StorageUnavailable(_)
        | Error::Internal(_) => Ok(answer(&from_error(&Value::Null, &e))),
        other => Err(other),
    }
}

/// One line of the answer: compact JSON, with the characters line readers split on escaped.
pub fn line(v: &Value) -> String {
    let mut s = v.to_string();
    if s.contains(['\u{2028}', '\u{2029}', '\u{85}']) {
        s = s
            .replace('\u{2028}', "\\u2028")
            .replace('\u{2029}', "\\u2029")
            .replace('\u{85}', "\\u0085");
    }
    s.push('\n');
    s
}

fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error response: `error` and no `result` member (JSON-RPC 2.0: it must not exist).
fn error(id: &Value, code: i64, message: impl Into<String>, data: Value) -> Value {
    let mut error = json!({"code": code, "message": message.into()});
    // `data` may be omitted; an empty one says nothing.
    if !data.is_null() {
        error["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// A core error as a JSON-RPC error object.
fn from_error(id: &Value, e: &Error) -> Value {
    let code = match e {
        Error::InvalidRequest(_) | Error::NotFound | Error::AgentNotFound => INVALID_PARAMS,
        Error::Conflict(..)
        | Error::NotAsking
        | Error::BudgetHit { .. }
        | Error::SessionClosed
        | Error::IdempotencyConflict
        | Error::TooManyStreams
        | Error::ShuttingDown
        | Error::StaleTurn => REFUSED,
        _ => INTERNAL_ERROR,
    };
    let message = match e {
        Error::NotFound => "task not found".to_owned(),
        Error::Storage(_) | Error::Internal(_) => {
            tracing::error!(error = %e, "agent rpc failed");
            "internal error".to_owned()
        }
        // The detail (a path, SQLite's words) stays in the log, as on every other route.
        Error::StorageFull(detail) => {
            tracing::debug!(error = %detail, "agent rpc refused: storage is full");
            "the server's storage is full; retry once space is freed".to_owned()
        }
        Error::StorageUnavailable(detail) => {
            tracing::debug!(error = %detail, "agent rpc failed: storage is unavailable");
            "the server's storage is unavailable; retry later".to_owned()
        }
        other => other.to_string(),
    };
    error(id, code, message, json!({"code": e.code()}))
}

fn answer(v: &Value) -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(line(v))
}

/// A request object that passed the envelope checks.
struct Call {
    id: Value,
    method: String,
    params: Option<Value>,
    /// `"jsonrpc": "2.0"` without an `id` member: carried out, never answered.
    notification: bool,
}

/// A JSON-RPC 2.0 request object, or the error response it deserves (always sent: a body that is
/// not a valid request object cannot be known to be a notification).
fn envelope(bytes: &[u8]) -> std::result::Result<Call, Value> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| {
        error(
            &Value::Null,
            PARSE_ERROR,
            format!("parse error: {e}"),
            Value::Null,
        )
    })?;
    let Value::Object(mut obj) = v else {
        return Err(error(
            &Value::Null,
            INVALID_REQUEST,
            "invalid request: the body must be a JSON-RPC request object",
            Value::Null,
        ));
    };
    let id_member = obj.remove("id");
    let has_id = id_member.is_some();
    let id = id_member.unwrap_or(Value::Null);
    if !(id.is_null() || id.is_string() || id.is_i64() || id.is_u64()) {
        return Err(error(
            &Value::Null,
            INVALID_REQUEST,
            "invalid request: id must be a string, an integer or null",
            Value::Null,
        ));
    }
    let versioned = match obj.remove("jsonrpc") {
        None => false,
        Some(Value::String(v)) if v == "2.0" => true,
        Some(_) => {
            return Err(error(
                &id,
                INVALID_REQUEST,
                "invalid request: jsonrpc must be \"2.0\"",
                Value::Null,
            ));
        }
    };
    let method = match obj.remove("method") {
        Some(Value::String(m)) => m,
        _ => {
            return Err(error(
                &id,
                INVALID_REQUEST,
                "invalid request: method must be a string",
                Value::Null,
            ));
        }
    };
    if let Some(extra) = obj.keys().find(|k| *k != "params") {
        return Err(error(
            &id,
            INVALID_REQUEST,
            format!("invalid request: unknown member {extra:?}"),
            Value::Null,
        ));
    }
    Ok(Call {
        id,
        method,
        params: obj.remove("params"),
        notification: versioned && !has_id,
    })
}

/// The call's method and params checked: its params, or the error response (which a
/// notification does not get).
fn checked_params(call: &Call) -> std::result::Result<&Value, Value> {
    let id = &call.id;
    if !METHODS.contains(&call.method.as_str()) {
        return Err(error(
            id,
            METHOD_NOT_FOUND,
            format!(
                "method not found: {:?} is not one of {}",
                call.method,
                METHODS.join(", ")
            ),
            Value::Null,
        ));
    }
    match &call.params {
        Some(p @ Value::Object(_)) => Ok(p),
        Some(_) => Err(error(
            id,
            INVALID_PARAMS,
            "invalid params: params must be an object",
            Value::Null,
        )),
        None => Err(error(
            id,
            INVALID_PARAMS,
            "invalid params: params is required",
            Value::Null,
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskParams {
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    task_name: Option<String>,
}

impl TaskParams {
    fn task_ref(self) -> TaskRef {
        TaskRef {
            id: self.task_id,
            name: self.task_name,
        }
    }
}

fn params<T: serde::de::DeserializeOwned>(v: &Value) -> Result<T> {
    sessiond_core::agentex::decode_value(v, "params")
}

/// What a message or an event delivers, from its `content`.
fn prompt(state: &AppState, content: &Value) -> Result<Prompt> {
    let parsed = content::parse("params/content", content)?;
    let (text, attachments) = content::prompt("params/content", parsed)?;
    if text.is_empty() {
        return Err(Error::invalid("params/content: the message is empty"));
    }
    let max = state.sessions.config().limits.max_prompt_chars;
    limits::check_length("params/content", &text, max)?;
    Ok(Prompt {
        text,
        attachments,
        busy: BusyPolicy::Enqueue,
    })
}

/// Runs one call against an agent (and, for a preview, a deployment's engine). The body must be
/// JSON (415, as on every route), checked before anything is read.
pub async fn handle(
    state: web::Data<AppState>,
    actor: Actor,
    agent: AgentexAgentRow,
    deployment: Option<DeploymentRow>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    body::require_json(&req)?;
    let bytes =
        body::read_limited(&req, payload, state.sessions.config().limits.max_body_bytes).await?;
    let call = match envelope(&bytes) {
        Ok(call) => call,
        Err(response) => return Ok(answer(&response)),
    };
    let id = call.id.clone();
    let params = match checked_params(&call) {
        Ok(params) => params,
        Err(_) if call.notification => return Ok(unanswered()),
        Err(response) => return Ok(answer(&response)),
    };
    let target = Target {
        agent: &agent,
        deployment: deployment.as_ref(),
    };
    if let Err(e) = body::refuse_nul(&bytes) {
        return Ok(reply(&call, from_error(&id, &e)));
    }
    let platform = req.app_data::<web::Data<Platform>>().cloned();
    let platform = platform.as_ref().map(|p| p.get_ref());
    let (sessions, state) = (&state.sessions, state.get_ref());
    let answered = match call.method.as_str() {
        "message/send" => {
            return Ok(
                match message_send::start(state, &actor, target, params, platform).await {
                    // The message is delivered; nobody waits for the turn it causes.
                    Ok(_) if call.notification => unanswered(),
                    Ok((follower, streaming)) => message_send::answer(follower, id, streaming),
                    Err(e) => reply(&call, from_error(&id, &e)),
                },
            );
        }
        "task/create" => task_create::call(sessions, &actor, target, params, platform).await,
        "task/cancel" => task_cancel::call(sessions, &actor, target, params, platform).await,
        "task/interrupt" => task_interrupt::call(sessions, &actor, target, params).await,
        "event/send" => event_send::call(state, &actor, target, params).await,
        other => Err(Error::Internal(format!("no handler for {other}"))),
    };
    let response = match answered {
        Ok(v) => result(&id, v),
        Err(e) => from_error(&id, &e),
    };
    Ok(reply(&call, response))
}

/// `response`, unless the call was a notification.
fn reply(call: &Call, response: Value) -> HttpResponse {
    if call.notification {
        unanswered()
    } else {
        answer(&response)
    }
}

/// What a notification gets: no JSON-RPC response at all.
fn unanswered() -> HttpResponse {
    HttpResponse::NoContent().finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_escape_what_line_readers_split_on() {
        let l = line(&json!({"t": "a\u{2028}b\u{2029}c\u{85}d\ne"}));
        assert_eq!(l, "{\"t\":\"a\\u2028b\\u2029c\\u0085d\\ne\"}\n");
        assert_eq!(l.lines().count(), 1);
    }

    /// The error response a body gets: from the envelope, else from its method and params.
    fn refusal(body: &str) -> Value {
        match envelope(body.as_bytes()) {
            Err(response) => response,
            Ok(call) => checked_params(&call).expect_err("an error"),
        }
    }

    #[test]
    fn envelope_errors_have_the_standard_codes() {
        let code = |body: &str| refusal(body)["error"]["code"].clone();
        assert_eq!(code("{"), json!(PARSE_ERROR));
        assert_eq!(code("[1]"), json!(INVALID_REQUEST));
        assert_eq!(
            code(r#"{"id": 1, "jsonrpc": "1.0", "method": "task/create", "params": {}}"#),
            json!(INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"id": {}, "method": "task/create", "params": {}}"#),
            json!(INVALID_REQUEST)
        );
        assert_eq!(
            code(r#"{"id": 1, "method": "task/delete", "params": {}}"#),
            json!(METHOD_NOT_FOUND)
        );
        assert_eq!(
            code(r#"{"id": 1, "method": "task/create"}"#),
            json!(INVALID_PARAMS)
        );
        let err = refusal(r#"{"id": "x", "method": "nope", "params": {}}"#);
        assert_eq!(err["id"], "x");
        // An error response has no `result` member, and no empty `data`.
        assert!(err.get("result").is_none(), "{err}");
        assert!(err["error"].get("data").is_none(), "{err}");
        let ok = envelope(br#"{"id": 7, "jsonrpc": "2.0", "method": "task/create", "params": {}}"#)
            .expect("a request");
        assert!(!ok.notification);
        assert!(checked_params(&ok).is_ok());
        let ok = result(&json!(7), json!({"id": "t"}));
        assert!(ok.get("error").is_none(), "{ok}");
    }

    #[test]
    fn only_a_versioned_request_without_an_id_is_a_notification() {
        let notification = |body: &str| envelope(body.as_bytes()).expect("a request").notification;
        assert!(notification(
            r#"{"jsonrpc": "2.0", "method": "task/create", "params": {}}"#
        ));
        assert!(!notification(
            r#"{"jsonrpc": "2.0", "id": null, "method": "task/create", "params": {}}"#
        ));
        assert!(!notification(
            r#"{"jsonrpc": "2.0", "id": 0, "method": "task/create", "params": {}}"#
        ));
        // The official client's default body: no `jsonrpc`, no `id`; it reads the answer.
        assert!(!notification(r#"{"method": "task/create", "params": {}}"#));
    }
}
