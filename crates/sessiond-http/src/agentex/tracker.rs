//! `/agentex/tracker…`: each task's tracker, its agent's cursor over the task's events (it shares
//! the task's id).

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use sessiond_core::store::agentex::SortKey;

use super::{ListParams, at, json_body};
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::records::{self, TrackerChange};
use sessiond_core::error::Result;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/tracker", "GET").route(web::get().to(respond(list))))
        .service(
            at("/tracker/{tracker_id}", "GET, PUT")
                .route(web::get().to(respond(get)))
                .route(web::put().to(respond(update))),
        );
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let t = records::tracker(&state.sessions, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(records::tracker_view(&t)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    #[serde(default)]
    last_processed_event_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    status_reason: Option<String>,
}

async fn update(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: UpdateBody = json_body(&state, &req, payload).await?;
    let change = TrackerChange {
        last_processed_event_id: b.last_processed_event_id,
        status: b.status,
        status_reason: b.status_reason,
    };
    let t = records::update_tracker(&state.sessions, &actor, &path, change).await?;
    Ok(HttpResponse::Ok().json(records::tracker_view(&t)))
}

async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let p = ListParams::parse(&req, &[SortKey::CreatedAt, SortKey::UpdatedAt])?;
    let rows = records::trackers(&state.sessions, &actor, p.records()).await?;
    Ok(HttpResponse::Ok().json(rows.iter().map(records::tracker_view).collect::<Vec<_>>()))
}
