//! `/a2a`: every agent as an A2A server (the protocol itself is `sessiond_core::a2a`). This file is the
//! HTTP transport: the Agent Cards, and the JSON-RPC 2.0 binding at `POST /a2a/{agentSlug}`.
//!
//! | route | answers |
//! |---|---|
//! | `GET /a2a` | `{"agents": [AgentCard…]}`: the cards of the credential's workspace |
//! | `GET /a2a/{agentSlug}/.well-known/agent-card.json` | the agent's `AgentCard` |
//! | `POST /a2a/{agentSlug}` | JSON-RPC: `SendMessage`, `SendStreamingMessage` (SSE), `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask` (SSE), the push-notification configs |
//!
//! The credential is the bearer API key every route takes (the card's `securitySchemes` says
//! so); the workspace is the key's. An unknown agent is an HTTP 404; once the agent is found
//! every answer is HTTP 200 with a JSON-RPC response (or an SSE stream of them), errors with
//! A2A's codes. Reads (`GetTask`, `ListTasks`, `SubscribeToTask`, getting and listing push
//! configs) take a `sessions:read` key; the other methods need `sessions`, and a read-only key
//! gets HTTP 403 for them.

use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};

use super::at;
use super::body;
use super::context::{self, AppState};
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::a2a::error::{
    A2aError, EXTENDED_CARD_NOT_CONFIGURED, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
    VERSION_NOT_SUPPORTED, raw, reply, response,
};
use sessiond_core::a2a::{self, Server, card, push_config};
use sessiond_core::agentex::acp::Platform;
use sessiond_core::agents;
use sessiond_core::auth::Capability;
use sessiond_core::error::{Error, Result};

/// The JSON-RPC methods served.
pub const METHODS: [&str; 11] = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
];

/// The OpenAPI schema of a card (the protocol's `AgentCard`, its main members).
pub fn card_schema() -> Value {
    json!({
        "type": "object",
        "required": ["name", "description", "supportedInterfaces", "version", "capabilities", "skills"],
        "properties": {
            "name": {"type": "string"}, "description": {"type": "string"}, "version": {"type": "string"},
            "supportedInterfaces": {"type": "array", "items": {"type": "object", "properties": {
                "url": {"type": "string"}, "protocolBinding": {"const": "JSONRPC"}, "protocolVersion": {"type": "string"}
            }}},
            "capabilities": {"type": "object"}, "securitySchemes": {"type": "object"},
            "securityRequirements": {"type": "array"}, "skills": {"type": "array"},
            "defaultInputModes": {"type": "array"}, "defaultOutputModes": {"type": "array"}
        }
    })
}

/// `GET /a2a`'s answer.
pub fn cards_schema() -> Value {
    json!({"type": "object", "required": ["agents"], "properties": {"agents": {"type": "array", "items": card_schema()}}})
}

/// A JSON-RPC 2.0 request of the A2A binding.
pub fn rpc_request() -> Value {
    json!({
        "type": "object",
        "required": ["jsonrpc", "method"],
        "properties": {
            "jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]},
            "method": {"enum": METHODS}, "params": {"type": "object"}
        }
    })
}

/// A JSON-RPC 2.0 response: `result`, or `error` with A2A's code.
pub fn rpc_response() -> Value {
    json!({
        "type": "object",
        "required": ["jsonrpc", "id"],
        "properties": {
            "jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]}, "result": {},
            "error": {"type": "object", "required": ["code", "message"], "properties": {
                "code": {"type": "integer"}, "message": {"type": "string"}, "data": {"type": "array"}
            }}
        }
    })
}

/// Methods a `sessions:read` key may call.
const READS: [&str; 5] = [
    "GetTask",
    "ListTasks",
    "SubscribeToTask",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
];

/// v0.3's method names: the card names protocol 1.0, so a client speaking 0.3 is told so.
const V0_3_METHODS: [&str; 9] = [
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/cancel",
    "tasks/resubscribe",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
];

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/a2a", "GET").route(web::get().to(respond(cards))));
    cfg.service(
        at("/a2a/{agentSlug}/.well-known/agent-card.json", "GET")
            .route(web::get().to(respond(agent_card))),
    );
    cfg.service(at("/a2a/{agentSlug}", "POST").route(web::post().to(respond(rpc))));
}

/// `GET /a2a`: every agent's card.
async fn cards(state: web::Data<AppState>, Caller(actor): Caller) -> Result<HttpResponse> {
    let base = state.base_url();
    let list = agents::list(state.sessions.store(), &actor.workspace_id).await?;
    let cards: Vec<Value> = list.iter().map(|a| card::card(&base, a)).collect();
    Ok(HttpResponse::Ok().json(json!({ "agents": cards })))
}

/// `GET /a2a/{agentSlug}/.well-known/agent-card.json`.
async fn agent_card(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let agent = agents::get(state.sessions.store(), &actor.workspace_id, &path).await?;
    Ok(HttpResponse::Ok().json(card::card(&state.base_url(), &agent)))
}

fn answer(v: &Value) -> HttpResponse {
    HttpResponse::Ok().json(v)
}

/// A JSON-RPC 2.0 request: its id, method and params (`{}` when absent).
struct Call {
    id: Value,
    method: String,
    params: Value,
}

fn envelope(bytes: &[u8]) -> std::result::Result<Call, Value> {
    let refuse = |code, message: String| response(&Value::Null, Err(A2aError::new(code, message)));
    let v: Value = serde_json::from_slice(bytes)
        .map_err(|e| refuse(PARSE_ERROR, format!("parse error: {e}")))?;
    let Value::Object(mut obj) = v else {
        return Err(refuse(
            INVALID_REQUEST,
            "the body must be a JSON-RPC request object".into(),
        ));
    };
    let id = obj.remove("id").unwrap_or(Value::Null);
    if !(id.is_null() || id.is_string() || id.is_i64() || id.is_u64()) {
        return Err(refuse(
            INVALID_REQUEST,
            "id: a string, an integer or null".into(),
        ));
    }
    let bad =
        |message: &str| response(&id, Err(A2aError::new(INVALID_REQUEST, message.to_owned())));
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(bad("jsonrpc: must be \"2.0\""));
    }
    let Some(method) = obj.get("method").and_then(Value::as_str).map(str::to_owned) else {
        return Err(bad("method: a string is required"));
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p,
        Some(_) => {
            return Err(response(
                &id,
                Err(A2aError::invalid_params("params: must be an object")),
            ));
        }
    };
    Ok(Call { id, method, params })
}

/// `A2A-Version`: absent, or 1.0 (any patch).
fn check_version(req: &HttpRequest) -> std::result::Result<(), A2aError> {
    let Some(v) = req.headers().get("a2a-version") else {
        return Ok(());
    };
    let v = v.to_str().unwrap_or("").trim();
    let mut parts = v.split('.');
    if v.is_empty() || (parts.next() == Some("1") && parts.next() == Some("0")) {
        Ok(())
    } else {
        Err(A2aError::new(
            VERSION_NOT_SUPPORTED,
            format!(
                "A2A-Version {v}: this server speaks {}",
                a2a::PROTOCOL_VERSION
            ),
        ))
    }
}

/// `POST /a2a/{agentSlug}`.
async fn rpc(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    platform: Option<web::Data<Platform>>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let platform =
        platform.ok_or_else(|| Error::Internal("the agent platform is not wired".into()))?;
    let sealer = platform
        .keys()
        .sealer(sessiond_core::a2a::push::SEALING_PURPOSE);
    let agent = agents::get(state.sessions.store(), &actor.workspace_id, &path).await?;
    let bytes =
        body::json_bytes(&req, payload, state.sessions.config().limits.max_body_bytes).await?;
    body::refuse_nul(&bytes)?;
    let call = match envelope(&bytes) {
        Ok(call) => call,
        Err(refused) => return Ok(answer(&refused)),
    };
    if let Err(e) = check_version(&req) {
        return Ok(answer(&response(&call.id, Err(e))));
    }
    if !READS.contains(&call.method.as_str()) {
        // The route let a read-only key in; a method that writes needs the `sessions` scope.
        let principal = context::credential(&state, &req).await?;
        state
            .auth
            .authorize(&principal, &actor.workspace_slug, Capability::Sessions)
            .await?;
    }
    let actor = a2a::actor(actor);
    let server = Server {
        sessions: &state.sessions,
        actor: &actor,
        agent: &agent,
        sealer: &sealer,
    };
    let outcome = match call.method.as_str() {
        "SendMessage" => a2a::send_message::send_message(&server, &call.params).await,
        "GetTask" => a2a::get_task::get_task(&server, &call.params).await,
        "ListTasks" => raw(a2a::list_tasks::list_tasks(&server, &call.params).await),
        "CancelTask" => raw(a2a::cancel_task::cancel_task(&server, &call.params).await),
        "SendStreamingMessage" => {
            return super::a2a_stream::send(&state, &server, &req, call.id, &call.params).await;
        }
        "SubscribeToTask" => {
            return super::a2a_stream::subscribe(&state, &server, &req, call.id, &call.params)
                .await;
        }
        "CreateTaskPushNotificationConfig" => raw(push_config::create(&server, &call.params).await),
        "GetTaskPushNotificationConfig" => raw(push_config::get(&server, &call.params).await),
        "ListTaskPushNotificationConfigs" => raw(push_config::list(&server, &call.params).await),
        "DeleteTaskPushNotificationConfig" => raw(push_config::delete(&server, &call.params).await),
        "GetExtendedAgentCard" => Err(A2aError::new(
            EXTENDED_CARD_NOT_CONFIGURED,
            "this agent has no extended card: its card is the same for every credential",
        )),
        m if V0_3_METHODS.contains(&m) => Err(A2aError::new(
            VERSION_NOT_SUPPORTED,
            format!("{m} is a v0.3 method; this server speaks A2A 1.0 (SendMessage, GetTask, …)"),
        )),
        m => Err(A2aError::new(
            METHOD_NOT_FOUND,
            format!("method not found: {m}"),
        )),
    };
    Ok(HttpResponse::Ok().json(reply(&call.id, outcome)))
}
