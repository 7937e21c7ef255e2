//! `POST /checkpoints/put-writes`: stores the pending writes of a checkpoint's tasks; 204, as
//! AgentEx answers (the SDK's checkpointer reads no body).

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::context::AppState;
use crate::context::Caller;
use sessiond_core::agentex::checkpoints::{self, PutWrites};
use sessiond_core::error::Result;

pub async fn handle(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: PutWrites = json_body(&state, &req, payload).await?;
    checkpoints::put_writes(&state.sessions, &actor, b).await?;
    Ok(HttpResponse::NoContent().finish())
}
