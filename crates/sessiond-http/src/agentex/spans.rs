//! `/agentex/spans…`: trace spans (`agentex::records`).

use actix_web::{HttpRequest, HttpResponse, web};
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
        at("/spans", "GET, POST")
            .route(web::get().to(respond(list)))
            .route(web::post().to(respond(create))),
    )
    .service(
        at("/spans/{span_id}", "GET, PATCH")
            .route(web::get().to(respond(get)))
            .route(web::patch().to(respond(update))),
    );
}

async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: Map<String, Value> = json_body(&state, &req, payload).await?;
    let s = records::create_span(&state.sessions, &actor, b).await?;
    Ok(HttpResponse::Ok().json(records::span_view(&s)))
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let s = records::span(&state.sessions, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(records::span_view(&s)))
}

async fn update(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: Map<String, Value> = json_body(&state, &req, payload).await?;
    let s = records::update_span(&state.sessions, &actor, &path, b).await?;
    Ok(HttpResponse::Ok().json(records::span_view(&s)))
}

async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let p = ListParams::parse(&req, &[SortKey::StartTime, SortKey::EndTime, SortKey::Name])?;
    let trace_id = p.query.get("trace_id").map(str::to_owned);
    let rows = records::spans(&state.sessions, &actor, trace_id, p.records()).await?;
    Ok(HttpResponse::Ok().json(rows.iter().map(records::span_view).collect::<Vec<_>>()))
}
