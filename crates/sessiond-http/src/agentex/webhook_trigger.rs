//! `POST /agentex/agent_api_keys/webhook-trigger`: registers a GitHub or Slack signing secret for
//! an agent and answers the URL to paste into the source, with the secret, shown this once
//! (`agentex::webhooks::triggers`).

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::{at, json_body};
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::acp::Platform;
use sessiond_core::agentex::webhooks::{self, triggers};
use sessiond_core::error::{Error, Result};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        at("/agent_api_keys/webhook-trigger", "POST").route(web::post().to(respond(create))),
    );
}

/// The contract's `CreateWebhookTriggerRequest` (no `Debug`: it holds the secret).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    agent_name: String,
    forward_path: String,
    name: String,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    source: Option<String>,
}

async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    platform: Option<web::Data<Platform>>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let platform =
        platform.ok_or_else(|| Error::Internal("the agent platform is not wired".into()))?;
    let b: CreateBody = json_body(&state, &req, payload).await?;
    let sealer = platform.keys().sealer(webhooks::SEALING_PURPOSE);
    let own_base = format!("{}/agentex", state.base_url().trim_end_matches('/'));
    let created = triggers::create(
        &state.sessions,
        &sealer,
        &actor,
        triggers::NewTriggerIn {
            agent_name: b.agent_name,
            forward_path: b.forward_path,
            name: b.name,
            base_url: b.base_url,
            secret: b.secret,
            source: b.source,
        },
        own_base,
    )
    .await?;
    // The answer holds the secret: no cache keeps it.
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(created))
}
