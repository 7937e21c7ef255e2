//! Registered ACP servers at the HTTP edge: `POST /agents/register` with its own credential
//! rules, and which routes an issued agent key may call back.
//!
//! Registration needs a credential of the workspace. The SDK sends none of its own (its
//! `AGENT_API_KEY`, if any, is an agent key), so an API key is accepted as `Authorization:
//! Bearer` or as the password (or, alone, the user name) of `Basic`, which is what an HTTP
//! client sends for a key written into `AGENTEX_BASE_URL`'s user-info
//! (`http://key:sk_…@127.0.0.1:8080/agentex`). Without one, only a request from a loopback
//! address gets in, and only when `[policy]` `acp_register_from_loopback` is on.

use actix_web::http::Method;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine as _;

use super::json_body;
use crate::agentex::acp::{self, Platform, RegisterAgent};
use crate::agentex::agents as agent_view;
use crate::api::context::AppState;
use crate::auth::{Capability, Principal};
use crate::error::{Error, Result};
use crate::sessions::Actor;

/// The header an agent sends its issued key in (calls both ways).
pub const AGENT_KEY_HEADER: &str = "x-agent-api-key";

/// The API key of a registration request: `Bearer`, or `Basic` with the key as password.
fn api_key(req: &HttpRequest) -> Result<Option<String>> {
    let Some(value) = req.headers().get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value.to_str().map_err(|_| Error::Unauthorized)?.trim();
    if let Some(key) = value.strip_prefix("Bearer ") {
        return Ok(Some(key.trim().to_owned()));
    }
    if let Some(b64) = value.strip_prefix("Basic ") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| Error::Unauthorized)?;
        let text = String::from_utf8(decoded).map_err(|_| Error::Unauthorized)?;
        let (user, password) = text.split_once(':').unwrap_or((&text, ""));
        let key = if password.is_empty() { user } else { password };
        let key = percent_encoding::percent_decode_str(key)
            .decode_utf8()
            .map_err(|_| Error::Unauthorized)?;
        return Ok(Some(key.into_owned()));
    }
    Err(Error::Unauthorized)
}

async fn registrant(state: &AppState, req: &HttpRequest) -> Result<Actor> {
    if let Some(key) = api_key(req)? {
        let principal = Principal::Key(state.auth.key(&key).await?);
        let Principal::Key(k) = &principal else {
            return Err(Error::Unauthorized);
        };
        let slug = k.workspace_slug.clone();
        return state
            .auth
            .authorize(&principal, &slug, Capability::Sessions)
            .await;
    }
    let loopback = req.peer_addr().is_some_and(|a| a.ip().is_loopback());
    if loopback && state.sessions.config().policy.acp_register_from_loopback {
        return acp::loopback_actor(&state.sessions).await;
    }
    Err(Error::Unauthorized)
}

/// `POST /agents/register`: 200 with the agent and its `agent_api_key`.
pub async fn register(
    state: web::Data<AppState>,
    platform: Option<web::Data<Platform>>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let actor = registrant(&state, &req).await?;
    let platform =
        platform.ok_or_else(|| Error::Internal("the agent platform is not wired".into()))?;
    let body: RegisterAgent = json_body(&state, &req, payload).await?;
    let (agent, key) = acp::register(&state.sessions, platform.keys(), &actor, body).await?;
    tracing::info!(agent = %agent.id, name = %agent.slug, "an ACP server registered");
    let mut out = agent_view::view(&agent, &state.sessions.config().policy);
    out["agent_api_key"] = key.into();
    Ok(HttpResponse::Ok().json(out))
}

/// Whether an agent key may call this route: the records of its own tasks (messages, states,
/// spans, trackers, events, a task by id or name) and agents by id or name — not lists of tasks
/// or agents, not RPC, deployments or registration.
pub fn agent_may_call(method: &Method, path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/agentex/") else {
        return false;
    };
    let first = rest.split('/').next().unwrap_or_default();
    match first {
        "messages" | "states" | "spans" | "tracker" | "events" => true,
        "tasks" => rest.starts_with("tasks/") && rest.len() > "tasks/".len(),
        "agents" => {
            *method == Method::GET
                && rest.starts_with("agents/")
                && !rest.ends_with("/rpc")
                && !rest.contains("/deployments")
        }
        _ => false,
    }
}

/// The actor of a callback carrying an issued key, if the request has one and no other
/// credential (`Authorization` wins when both are sent).
pub async fn callback_actor(state: &AppState, req: &HttpRequest) -> Option<Result<Actor>> {
    if req.headers().contains_key(header::AUTHORIZATION) {
        return None;
    }
    let key = req.headers().get(AGENT_KEY_HEADER)?;
    Some(
        async {
            let key = key.to_str().map_err(|_| Error::Unauthorized)?;
            let actor = acp::callback_actor(&state.sessions, key).await?;
            if !agent_may_call(req.method(), req.path()) {
                return Err(Error::Forbidden(
                    "an agent key may only read and write its own tasks' records".into(),
                ));
            }
            Ok(actor)
        }
        .await,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_keys_reach_only_their_records() {
        let get = Method::GET;
        let post = Method::POST;
        assert!(agent_may_call(&post, "/agentex/messages"));
        assert!(agent_may_call(&post, "/agentex/messages/batch"));
        assert!(agent_may_call(&post, "/agentex/states"));
        assert!(agent_may_call(&Method::PUT, "/agentex/tracker/t1"));
        assert!(agent_may_call(&get, "/agentex/tasks/t1"));
        assert!(agent_may_call(&get, "/agentex/agents/a1"));
        assert!(!agent_may_call(&get, "/agentex/tasks"));
        assert!(!agent_may_call(&get, "/agentex/agents"));
        assert!(!agent_may_call(&post, "/agentex/agents/a1/rpc"));
        assert!(!agent_may_call(&post, "/agentex/agents/register"));
        assert!(!agent_may_call(&Method::DELETE, "/agentex/agents/a1"));
        assert!(!agent_may_call(&get, "/v1/ws/default/sessions"));
    }
}
