//! `POST /checkpoints/delete-thread`: deletes a thread's checkpoints, blobs and writes (the task
//! stays); 204, as AgentEx answers.

use actix_web::{HttpRequest, HttpResponse, web};

use super::super::json_body;
use crate::context::AppState;
use crate::context::Caller;
use sessiond_core::agentex::checkpoints::{self, DeleteThread};
use sessiond_core::error::Result;

pub async fn handle(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: DeleteThread = json_body(&state, &req, payload).await?;
    checkpoints::delete_thread(&state.sessions, &actor, b).await?;
    Ok(HttpResponse::NoContent().finish())
}
