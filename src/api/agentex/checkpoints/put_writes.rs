//! `POST /checkpoints/put-writes`: stores the pending writes of a checkpoint's tasks; 204, as
//! AgentEx answers (the SDK's checkpointer reads no body).

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::agentex::checkpoints::{self, PutWrites};
use crate::api::context::AppState;
use crate::error::Result;
use crate::sessions::Actor;

pub async fn handle(
    state: web::Data<AppState>,
    actor: Actor,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: PutWrites = json_body(&state, &req, payload).await?;
    checkpoints::put_writes(&state.sessions, &actor, b).await?;
    Ok(HttpResponse::NoContent().finish())
}
