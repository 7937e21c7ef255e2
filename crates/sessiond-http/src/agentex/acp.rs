//! Registered ACP servers at the HTTP edge: `POST /agents/register` with its own credential
//! rules, and the actor of a callback made with an issued agent key (what that key may call is
//! `agent_keys`' table).
//!
//! Registration needs a credential of the workspace. The SDK sends none of its own (its
//! `AGENT_API_KEY`, if any, is an agent key), so an API key is accepted as `Authorization:
//! Bearer` or as the password (or, alone, the user name) of `Basic`, which is what an HTTP
//! client sends for a key written into `AGENTEX_BASE_URL`'s user-info
//! (`http://key:sk_…@127.0.0.1:8080/agentex`). Without one, only a request from a loopback
//! address gets in, and only when `[policy]` `acp_register_from_loopback` is on.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use base64::Engine as _;

use super::json_body;
use crate::agent_key::callback_actor;
use crate::context::AppState;
use sessiond_core::agentex::acp::{self, Platform, RegisterAgent};
use sessiond_core::agentex::agents as agent_view;
use sessiond_core::auth::{Capability, Principal};
use sessiond_core::error::{Error, Result};
use sessiond_core::sessions::Actor;

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

/// Who registers: an API key's holder; else an agent calling with its issued key (it may only
/// register itself again, as the SDK does at every start once it has a key); else, when
/// `[policy]` allows it, the loopback owner.
async fn registrant(state: &AppState, req: &HttpRequest) -> Result<Actor> {
    if let Some(actor) = callback_actor(&state.sessions, req).await {
        return actor;
    }
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
