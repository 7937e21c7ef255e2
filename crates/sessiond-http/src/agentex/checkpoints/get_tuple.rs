//! `POST /checkpoints/get-tuple`: one checkpoint (by id, else the newest) with its blobs and
//! pending writes, or JSON `null`.

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::context::AppState;
use crate::context::Caller;
use sessiond_core::agentex::checkpoints::{self, GetTuple};
use sessiond_core::error::Result;

pub async fn handle(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let q: GetTuple = json_body(&state, &req, payload).await?;
    let tuple = checkpoints::get_tuple(&state.sessions, &actor, q).await?;
    Ok(HttpResponse::Ok().json(tuple))
}
