//! `/agentex/states…`: one JSON state per task and agent (`agentex::records`).

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Map, Value};
use sessiond_core::store::agentex::SortKey;

use super::{ListParams, at, json_body};
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::records;
use sessiond_core::error::Result;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        at("/states", "GET, POST")
            .route(web::get().to(respond(list)))
            .route(web::post().to(respond(create))),
    )
    .service(
        at("/states/{state_id}", "GET, PUT, DELETE")
            .route(web::get().to(respond(get)))
            .route(web::put().to(respond(update)))
            .route(web::delete().to(respond(delete))),
    );
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    agent_id: String,
    task_id: String,
    state: Map<String, Value>,
}

/// `task_id` and `agent_id` are accepted and ignored: the AgentEx SDK sends them on every update
/// (older platforms required them).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    state: Map<String, Value>,
    #[serde(default, rename = "task_id")]
    _task_id: Option<String>,
    #[serde(default, rename = "agent_id")]
    _agent_id: Option<String>,
}

async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: CreateBody = json_body(&state, &req, payload).await?;
    let s =
        records::create_state(&state.sessions, &actor, &b.task_id, &b.agent_id, b.state).await?;
    Ok(HttpResponse::Ok().json(records::state_view(&s)))
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let s = records::state(&state.sessions, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(records::state_view(&s)))
}

async fn update(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: UpdateBody = json_body(&state, &req, payload).await?;
    let s = records::update_state(&state.sessions, &actor, &path, b.state).await?;
    Ok(HttpResponse::Ok().json(records::state_view(&s)))
}

async fn delete(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let s = records::delete_state(&state.sessions, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(records::state_view(&s)))
}

async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let p = ListParams::parse(&req, &[SortKey::CreatedAt, SortKey::UpdatedAt])?;
    let rows = records::states(&state.sessions, &actor, p.records()).await?;
    Ok(HttpResponse::Ok().json(rows.iter().map(records::state_view).collect::<Vec<_>>()))
}
