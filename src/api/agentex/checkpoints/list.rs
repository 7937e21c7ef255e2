//! `POST /checkpoints/list`: a thread's checkpoints, newest first (`limit` ≤ 1000, default 100).

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::agentex::checkpoints::{self, ListCheckpoints};
use crate::api::context::AppState;
use crate::error::Result;
use crate::sessions::Actor;

pub async fn handle(
    state: web::Data<AppState>,
    actor: Actor,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let q: ListCheckpoints = json_body(&state, &req, payload).await?;
    let items = checkpoints::list(&state.sessions, &actor, q).await?;
    Ok(HttpResponse::Ok().json(items))
}
