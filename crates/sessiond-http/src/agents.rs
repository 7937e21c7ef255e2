//! Agents and their default-session alias (`/v1/ws/{ws}/agents/...`).
//!
//! The agent CRUD routes are sessiond's own extension; the default-alias routes are the seed's
//! (R55–R63).

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::body;
use super::context::AppState;
use super::sessions::{MessageBody, created, history_query, message_input, to_json, wait_response};
use crate::context::Caller;
use sessiond_core::agents::{self, AgentSpec};
use sessiond_core::error::{Error, Result};
use sessiond_core::sessions::{HistoryQuery, view};

const SCHEMA_DEFAULT_MESSAGE: &str =
    "POST_v1_ws__workspaceSlug__agents__agentSlug__sessions_default_messages.request.json";
const SCHEMA_DEFAULT_MESSAGE_WAIT: &str =
    "POST_v1_ws__workspaceSlug__agents__agentSlug__sessions_default_messages_wait.request.json";
const SCHEMA_DEFAULT_PUT: &str =
    "PUT_v1_ws__workspaceSlug__agents__agentSlug__sessions_default.request.json";

type AgentPath = web::Path<(String, String)>;

async fn spec_body(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<AgentSpec> {
    let bytes =
        body::json_bytes(req, payload, state.sessions.config().limits.max_body_bytes).await?;
    let raw: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::invalid(format!("body: malformed JSON ({e})")))?;
    serde_path_to_error::deserialize(&raw)
        .map_err(|e| Error::invalid(format!("{}: {}", e.path(), e.inner())))
}

pub async fn list(state: web::Data<AppState>, Caller(actor): Caller) -> Result<HttpResponse> {
    let rows = agents::list(state.sessions.store(), &actor.workspace_id).await?;
    Ok(HttpResponse::Ok()
        .json(json!({ "agents": rows.iter().map(agents::view).collect::<Vec<_>>() })))
}

pub async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let spec = spec_body(&state, &req, payload).await?;
    let drive = state.sessions.drive(&actor);
    let policy = &state.sessions.config().policy;
    let row = agents::create(
        state.sessions.store(),
        &drive,
        policy,
        &actor.workspace_id,
        spec,
    )
    .await?;
    Ok(HttpResponse::Created().json(agents::view(&row)))
}

pub async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: AgentPath,
) -> Result<HttpResponse> {
    let row = agents::get(state.sessions.store(), &actor.workspace_id, &path.1).await?;
    Ok(HttpResponse::Ok().json(agents::view(&row)))
}

pub async fn update(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: AgentPath,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let spec = spec_body(&state, &req, payload).await?;
    let drive = state.sessions.drive(&actor);
    let row = agents::update(
        state.sessions.store(),
        &drive,
        &state.sessions.config().policy,
        &actor.workspace_id,
        &path.1,
        spec,
    )
    .await?;
    Ok(HttpResponse::Ok().json(agents::view(&row)))
}

pub async fn delete(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: AgentPath,
) -> Result<HttpResponse> {
    agents::delete(state.sessions.store(), &actor.workspace_id, &path.1).await?;
    Ok(HttpResponse::Ok().json(json!({ "deleted": true })))
}

/// `GET …/agents/{agentSlug}/contact`: the agent's ACP server and how the last calls to it went.
pub async fn contact(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: AgentPath,
) -> Result<HttpResponse> {
    let v = agents::contact(state.sessions.store(), &actor.workspace_id, &path.1).await?;
    Ok(HttpResponse::Ok().json(v))
}

fn session_or_null(row: Option<sessiond_core::store::SessionRow>) -> Result<HttpResponse> {
    let session = match &row {
        Some(r) => to_json(&view::detail(r))?,
        None => "null".to_owned(),
    };
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(format!("{{\"session\":{session}}}")))
}

/// `GET …/agents/{agentSlug}/sessions/default` (R56: `{session:null}` before the first message).
pub async fn get_default(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: AgentPath,
) -> Result<HttpResponse> {
    session_or_null(state.sessions.default_session(&actor, &path.1).await?)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PutDefault {
    session_id: Option<String>,
}

/// `PUT …/sessions/default` binds the alias to a session of that owner, or to nothing.
pub async fn put_default(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: AgentPath,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limit = state.sessions.config().limits.max_body_bytes;
    let b = body::json::<PutDefault>(&req, payload, limit, SCHEMA_DEFAULT_PUT)
        .await?
        .value;
    session_or_null(
        state
            .sessions
            .set_default_session(&actor, &path.1, b.session_id)
            .await?,
    )
}

/// `GET …/sessions/default/history`: 404 `{"error":"no_default_session"}` while unbound.
pub async fn default_history(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: AgentPath,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q: HistoryQuery = history_query(&req, state.sessions.config().limits.history_page_max)?;
    let row = state
        .sessions
        .default_session(&actor, &path.1)
        .await?
        .ok_or(Error::NoDefaultSession)?;
    let page = state.sessions.history_of(row.pk, q).await?;
    Ok(HttpResponse::Ok()
        .content_type("application/json")
        .body(page.to_json()))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DefaultMessageBody {
    #[serde(flatten)]
    message: MessageBody,
    agent_first_message: Option<String>,
}

/// `POST …/sessions/default/messages`: `CreateSessionResponse` when it created the default,
/// `DefaultMessageAck` when it continued it (R62). Its `/wait` twin takes the message itself as
/// its body (no `agentFirstMessage`) and answers as every `/wait` does.
pub async fn default_message<const WAITS: bool>(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: AgentPath,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limits = &state.sessions.config().limits;
    let target = format!("agent:{}", path.1);
    let (input, first_message) = if WAITS {
        let body::Json { value: b, raw } = body::json::<MessageBody>(
            &req,
            payload,
            limits.max_body_bytes,
            SCHEMA_DEFAULT_MESSAGE_WAIT,
        )
        .await?;
        (message_input(&state, b, &raw, &target)?, None)
    } else {
        let body::Json { value: b, raw } = body::json::<DefaultMessageBody>(
            &req,
            payload,
            limits.max_body_bytes,
            SCHEMA_DEFAULT_MESSAGE,
        )
        .await?;
        let input = message_input(&state, b.message, &raw, &target)?;
        (input, b.agent_first_message)
    };
    let (s, created_now) = state
        .sessions
        .default_message(&actor, &path.1, input, first_message)
        .await?;
    if WAITS {
        wait_response(&state, &s).await
    } else if created_now {
        created(&state, &actor, &s).await
    } else {
        Ok(HttpResponse::Ok().json(json!({
            "ok": true,
            "delivery": s.delivery.as_str(),
            "sessionId": s.key.id,
        })))
    }
}
