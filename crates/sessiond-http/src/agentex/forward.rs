//! `POST /agentex/agents/forward/name/{agent_name}/{forward_path}`: the forward ingress, where
//! GitHub and Slack deliver to a webhook trigger. No credential is asked for: the delivery's
//! signature is checked against the triggers of its URL (`agentex::webhooks::delivery`). The
//! body is bounded by the prompt limit, since it becomes a task's first message.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use super::at;
use crate::body;
use crate::context::AppState;
use crate::error::respond;
use sessiond_core::agentex::acp::Platform;
use sessiond_core::agentex::webhooks::delivery::{self, Incoming, Outcome};
use sessiond_core::agentex::webhooks::signature::{
    GITHUB_SIGNATURE, SLACK_SIGNATURE, SLACK_TIMESTAMP, SignatureHeaders,
};
use sessiond_core::error::{Error, Result};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        at("/agents/forward/name/{agent_name}/{path:.*}", "POST")
            .route(web::post().to(respond(deliver))),
    );
}

async fn deliver(
    state: web::Data<AppState>,
    platform: Option<web::Data<Platform>>,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let platform =
        platform.ok_or_else(|| Error::Internal("the agent platform is not wired".into()))?;
    let limits = &state.sessions.config().limits;
    let bytes = body::read_limited(
        &req,
        payload,
        limits.max_body_bytes.min(limits.max_prompt_chars),
    )
    .await?;
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let form = header(header::CONTENT_TYPE.as_str()).is_some_and(|t| {
        t.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("application/x-www-form-urlencoded")
    });
    let incoming = Incoming {
        agent_name: &path.0,
        path: &path.1,
        signature: SignatureHeaders {
            github: header(GITHUB_SIGNATURE),
            slack: header(SLACK_SIGNATURE),
            slack_timestamp: header(SLACK_TIMESTAMP),
        },
        github_event: header("x-github-event"),
        github_delivery: header("x-github-delivery"),
        form,
        body: &bytes,
    };
    let now = sessiond_core::clock::now_ms().div_euclid(1000);
    Ok(
        match delivery::receive(&state.sessions, &platform, incoming, now).await? {
            Outcome::Challenge(challenge) => {
                HttpResponse::Ok().json(json!({ "challenge": challenge }))
            }
            Outcome::Ping => HttpResponse::Ok().json(json!({ "ok": true, "event": "ping" })),
            Outcome::Task { task, created } => HttpResponse::Ok().json(json!({
                "task_id": task.id,
                "task_name": task.name,
                "created": created,
            })),
        },
    )
}
