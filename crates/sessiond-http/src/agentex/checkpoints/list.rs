//! `POST /checkpoints/list`: a thread's checkpoints, newest first (`limit` ≤ 1000, default 100).

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::context::AppState;
use crate::context::Caller;
use sessiond_core::agentex::checkpoints::{self, ListCheckpoints};
use sessiond_core::error::Result;

pub async fn handle(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let q: ListCheckpoints = json_body(&state, &req, payload).await?;
    let items = checkpoints::list(&state.sessions, &actor, q).await?;
    Ok(HttpResponse::Ok().json(items))
}
