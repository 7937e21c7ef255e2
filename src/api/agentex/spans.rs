//! `/agentex/spans…`: trace spans (`agentex::records`).

use crate::store::agentex::SortKey;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Map, Value};

use super::{ListParams, at, json_body};
use crate::agentex::records;
use crate::api::context::AppState;
use crate::error::Result;
use crate::sessions::Actor;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        at("/spans", "GET, POST")
            .route(web::get().to(list))
            .route(web::post().to(create)),
    )
    .service(
        at("/spans/{span_id}", "GET, PATCH")
            .route(web::get().to(get))
            .route(web::patch().to(update)),
    );
}

async fn create(
    state: web::Data<AppState>,
    actor: Actor,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: Map<String, Value> = json_body(&state, &req, payload).await?;
    let s = records::create_span(&state.sessions, &actor, b).await?;
    Ok(HttpResponse::Ok().json(records::span_view(&s)))
}

async fn get(
    state: web::Data<AppState>,
    actor: Actor,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let s = records::span(&state.sessions, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(records::span_view(&s)))
}

async fn update(
    state: web::Data<AppState>,
    actor: Actor,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: Map<String, Value> = json_body(&state, &req, payload).await?;
    let s = records::update_span(&state.sessions, &actor, &path, b).await?;
    Ok(HttpResponse::Ok().json(records::span_view(&s)))
}

async fn list(state: web::Data<AppState>, actor: Actor, req: HttpRequest) -> Result<HttpResponse> {
    let p = ListParams::parse(&req, &[SortKey::StartTime, SortKey::EndTime, SortKey::Name])?;
    let trace_id = p.query.get("trace_id").map(str::to_owned);
    let rows = records::spans(&state.sessions, &actor, trace_id, p.records()).await?;
    Ok(HttpResponse::Ok().json(rows.iter().map(records::span_view).collect::<Vec<_>>()))
}
