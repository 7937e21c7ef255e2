//! `/mcp`: the MCP server's Streamable HTTP transport (the protocol is `sessiond_core::mcp`).
//!
//! `POST` carries one JSON-RPC message. `initialize` opens an MCP session, named by the
//! `Mcp-Session-Id` header of its answer, which every later request sends; a request is answered
//! with JSON, except a tool call that follows a turn, answered with an SSE stream (its progress
//! notifications, then its result) whose events have ids, so a client that lost it resumes it
//! with `GET` and `Last-Event-ID`. `GET` without `Last-Event-ID` is the session's own stream of
//! resource notifications; `DELETE` ends the session.
//!
//! The credential is checked as on every route (`Authorization: Bearer`, or the browser
//! session); `sessions:read` is enough to connect, and the tools that write then refuse. An MCP
//! session belongs to the workspace and credential that opened it: any other sees 404. Malformed
//! JSON-RPC (and bodies the transport refuses: too large, not JSON) is answered with a JSON-RPC
//! error object and a 4xx status, never a 5xx.

mod sse;

use std::sync::Arc;

use actix_web::http::{StatusCode, header};
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::Value;

use super::body;
use super::context::{self, AppState};
use crate::error::respond;
use sessiond_core::auth::{Capability, StreamCredential};
use sessiond_core::error::{Error, Result};
use sessiond_core::mcp::rpc::{self, Message, RpcError};
use sessiond_core::mcp::{self as protocol, Caller, Context, McpSession, Progress};

const SESSION_HEADER: &str = "mcp-session-id";
const VERSION_HEADER: &str = "mcp-protocol-version";

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        super::at("/mcp", "GET, POST, DELETE")
            .route(web::post().to(respond(post)))
            .route(web::get().to(respond(get)))
            .route(web::delete().to(respond(delete))),
    );
}

/// The request's actor, with whether its credential may write. HTTP errors (401, 403, 404) are
/// the transport's, as on every route.
async fn caller(state: &AppState, req: &HttpRequest) -> Result<Caller> {
    // An agent's key speaks for its agent on the agent platform's task routes only: 403 here,
    // as on every other route outside them.
    if let Some(actor) = super::agent_key::callback_actor(&state.sessions, req).await {
        actor?;
        return Err(Error::Forbidden(
            "an agent's key acts only on its own agent's tasks, not over MCP".into(),
        ));
    }
    let principal = context::credential(state, req).await?;
    let slug = context::workspace_of(state, req, &principal).await?;
    let actor = state
        .auth
        .authorize(&principal, &slug, Capability::SessionsRead)
        .await?;
    let can_write = state
        .auth
        .authorize(&principal, &slug, Capability::Sessions)
        .await
        .is_ok();
    Ok(Caller::new(actor, can_write))
}

/// The credential a stream ends with when it is revoked.
fn stream_credential(req: &HttpRequest, caller: &Caller) -> StreamCredential {
    super::stream::credential_of(&caller.actor, req)
}

/// A JSON-RPC error as an HTTP answer.
fn rpc_error(status: StatusCode, id: &Value, e: &RpcError) -> HttpResponse {
    HttpResponse::build(status).json(rpc::error(id, e))
}

/// A request the transport refuses: its status and JSON-RPC error (answered with `id: null`).
struct Refused(StatusCode, RpcError);

impl Refused {
    fn answer(self) -> HttpResponse {
        rpc_error(self.0, &Value::Null, &self.1)
    }
}

/// The MCP session a request names (400 without the header, 404 for a session that is gone or
/// not the caller's, as the transport says).
fn session_of(
    state: &AppState,
    req: &HttpRequest,
    caller: &Caller,
) -> std::result::Result<Arc<McpSession>, Refused> {
    let Some(id) = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(Refused(
            StatusCode::BAD_REQUEST,
            RpcError::new(
                rpc::INVALID_REQUEST,
                "Mcp-Session-Id: missing (send initialize first)",
            ),
        ));
    };
    state.mcp.get(id.trim(), &caller.owner()).ok_or_else(|| {
        Refused(
            StatusCode::NOT_FOUND,
            RpcError::new(
                rpc::INVALID_REQUEST,
                "MCP session not found: initialize a new one",
            ),
        )
    })
}

/// A request's `MCP-Protocol-Version`, when sent, must be one this server speaks.
fn check_version(req: &HttpRequest) -> std::result::Result<(), Refused> {
    match req.headers().get(VERSION_HEADER).map(|v| v.to_str()) {
        None => Ok(()),
        Some(Ok(v)) if protocol::PROTOCOL_VERSIONS.contains(&v.trim()) => Ok(()),
        Some(_) => Err(Refused(
            StatusCode::BAD_REQUEST,
            RpcError::new(
                rpc::INVALID_REQUEST,
                format!(
                    "MCP-Protocol-Version: unsupported; this server speaks {}",
                    protocol::PROTOCOL_VERSIONS.join(", ")
                ),
            ),
        )),
    }
}

/// Whether the client takes an SSE answer.
fn accepts_sse(req: &HttpRequest) -> bool {
    req.headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream") || v.contains("*/*"))
}

/// `POST /mcp`: one JSON-RPC message.
pub async fn post(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let caller = caller(&state, &req).await?;
    let limit = state.sessions.config().limits.max_body_bytes;
    let bytes = match body::json_bytes(&req, payload, limit).await {
        Ok(b) => b,
        Err(e) => {
            let code = match e {
                Error::InvalidRequest(_) => rpc::PARSE_ERROR,
                _ => rpc::INVALID_REQUEST,
            };
            let status = crate::error::status_of(&e);
            return Ok(rpc_error(
                status,
                &Value::Null,
                &RpcError::new(code, e.to_string()),
            ));
        }
    };
    let raw: Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(e) => {
            return Ok(rpc_error(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                &RpcError::new(rpc::PARSE_ERROR, format!("malformed JSON: {e}")),
            ));
        }
    };
    let (id, method, params) = match rpc::parse(&raw) {
        Err((id, e)) => return Ok(rpc_error(StatusCode::BAD_REQUEST, &id, &e)),
        Ok(Message::Notification { .. } | Message::Response) => {
            // Notifications (`initialized`, `cancelled`, ...) and answers need no reply; a
            // session named must still be the caller's.
            if req.headers().contains_key(SESSION_HEADER)
                && let Err(refused) = session_of(&state, &req, &caller)
            {
                return Ok(refused.answer());
            }
            return Ok(HttpResponse::Accepted().finish());
        }
        Ok(Message::Request { id, method, params }) => (id, method, params),
    };
    if method == "initialize" {
        let (version, result) = protocol::initialize(&params);
        let Some(session) = state.mcp.open(caller.owner(), version) else {
            return Ok(rpc_error(
                StatusCode::TOO_MANY_REQUESTS,
                &id,
                &RpcError::new(
                    rpc::INVALID_REQUEST,
                    "this server holds too many MCP sessions; retry later",
                ),
            ));
        };
        return Ok(HttpResponse::Ok()
            .insert_header((SESSION_HEADER, session.id.clone()))
            .json(rpc::result(&id, result)));
    }
    let session = match session_of(&state, &req, &caller) {
        Ok(s) => s,
        Err(refused) => return Ok(refused.answer()),
    };
    if let Err(refused) = check_version(&req) {
        return Ok(refused.answer());
    }
    if protocol::is_long(&method, &params) && accepts_sse(&req) {
        let credential = stream_credential(&req, &caller);
        return Ok(stream_answer(
            state, credential, caller, session, id, method, params,
        ));
    }
    let ctx = Context {
        sessions: &state.sessions,
        caller: &caller,
        session: &session,
        progress: None,
    };
    let answer = match protocol::request(&ctx, &method, &params).await {
        Ok(result) => rpc::result(&id, result),
        Err(e) => rpc::error(&id, &e),
    };
    Ok(HttpResponse::Ok().json(answer))
}

/// Answers a long request on a stream of its own: the request runs apart from the connection,
/// so a client that loses the stream finds everything on it when it resumes.
fn stream_answer(
    state: web::Data<AppState>,
    credential: StreamCredential,
    caller: Caller,
    session: Arc<McpSession>,
    id: Value,
    method: String,
    params: Value,
) -> HttpResponse {
    let log = session.new_stream();
    let progress = protocol::progress_token(&params).map(|t| Progress::new(t, Arc::clone(&log)));
    let out = Arc::clone(&log);
    let st = state.clone();
    actix_web::rt::spawn(async move {
        let ctx = Context {
            sessions: &st.sessions,
            caller: &caller,
            session: &session,
            progress,
        };
        let answer = match protocol::request(&ctx, &method, &params).await {
            Ok(result) => rpc::result(&id, result),
            Err(e) => rpc::error(&id, &e),
        };
        out.push(answer.to_string());
        out.finish();
    });
    sse::respond(&state, credential, log, 0, true)
}

/// `GET /mcp`: with `Last-Event-ID`, the rest of the stream it names; without, the session's
/// stream of notifications from now on.
pub async fn get(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse> {
    let caller = caller(&state, &req).await?;
    let session = match session_of(&state, &req, &caller) {
        Ok(s) => s,
        Err(refused) => return Ok(refused.answer()),
    };
    if let Err(refused) = check_version(&req) {
        return Ok(refused.answer());
    }
    if !accepts_sse(&req) {
        return Ok(HttpResponse::NotAcceptable().json(serde_json::json!({
            "error": "not_acceptable",
            "message": "GET /mcp answers text/event-stream only",
        })));
    }
    let resume = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match resume {
        Some(last) => {
            let Some((number, after)) = sessiond_core::mcp::registry::parse_event_id(&last) else {
                return Err(Error::invalid(
                    "Last-Event-ID: not an event id of this server",
                ));
            };
            let log = session.stream(number).ok_or(Error::NotFound)?;
            Ok(sse::respond(
                &state,
                stream_credential(&req, &caller),
                log,
                after,
                false,
            ))
        }
        None => {
            let log = session.standalone();
            let newest = log.watch().borrow().0;
            Ok(sse::respond(
                &state,
                stream_credential(&req, &caller),
                log,
                newest,
                true,
            ))
        }
    }
}

/// `DELETE /mcp`: ends the MCP session (its subscriptions stop; its streams end).
pub async fn delete(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse> {
    let caller = caller(&state, &req).await?;
    let id = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Error::invalid("Mcp-Session-Id: missing"))?;
    if state.mcp.close(id.trim(), &caller.owner()) {
        Ok(HttpResponse::NoContent().finish())
    } else {
        Err(Error::NotFound)
    }
}
