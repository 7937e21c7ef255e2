//! `POST /checkpoints/put`: stores a checkpoint and the blobs of the channels it changed.

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::agentex::checkpoints::{self, PutCheckpoint};
use crate::api::context::AppState;
use crate::error::Result;
use crate::sessions::Actor;

pub async fn handle(
    state: web::Data<AppState>,
    actor: Actor,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: PutCheckpoint = json_body(&state, &req, payload).await?;
    let at = checkpoints::put(&state.sessions, &actor, b).await?;
    Ok(HttpResponse::Ok().json(at))
}
