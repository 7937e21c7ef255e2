//! `POST /checkpoints/get-tuple`: one checkpoint (by id, else the newest) with its blobs and
//! pending writes, or JSON `null`.

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::agentex::checkpoints::{self, GetTuple};
use crate::api::context::AppState;
use crate::error::Result;
use crate::sessions::Actor;

pub async fn handle(
    state: web::Data<AppState>,
    actor: Actor,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let q: GetTuple = json_body(&state, &req, payload).await?;
    let tuple = checkpoints::get_tuple(&state.sessions, &actor, q).await?;
    Ok(HttpResponse::Ok().json(tuple))
}
