//! `POST /checkpoints/put`: stores a checkpoint and the blobs of the channels it changed.

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::context::AppState;
use crate::context::Caller;
use sessiond_core::agentex::checkpoints::{self, PutCheckpoint};
use sessiond_core::error::Result;

pub async fn handle(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: PutCheckpoint = json_body(&state, &req, payload).await?;
    let at = checkpoints::put(&state.sessions, &actor, b).await?;
    Ok(HttpResponse::Ok().json(at))
}
