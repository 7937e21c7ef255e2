//! `GET /tasks/{task_id}/query/{query_name}`: a named question about a task, answered from what
//! sessiond knows of it (`agentex::queries` lists the names).

use actix_web::{HttpResponse, web};

use super::at;
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::queries;
use sessiond_core::error::Result;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        at("/tasks/{task_id}/query/{query_name}", "GET").route(web::get().to(respond(handle))),
    );
}

async fn handle(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    let (task_id, name) = path.into_inner();
    let answer = queries::answer(&state.sessions, &actor, &task_id, &name).await?;
    Ok(HttpResponse::Ok().json(answer))
}
