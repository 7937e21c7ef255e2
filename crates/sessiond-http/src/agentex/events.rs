//! `/agentex/events…`: the events sent to a task (`event/send`), after a cursor, and one by id.

use actix_web::{HttpRequest, HttpResponse, web};

use super::at;
use crate::body::Query;
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::records;
use sessiond_core::error::{Error, Result};

/// Most events one list returns (the contract's maximum).
const EVENTS_MAX: u32 = 1000;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/events", "GET").route(web::get().to(respond(list))))
        .service(at("/events/{event_id}", "GET").route(web::get().to(respond(get))));
}

/// `GET /events?task_id=…&agent_id=…[&last_processed_event_id=…][&limit=…]`, in `sequence_id`
/// order.
async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = Query::parse(&req)?;
    let required = |name: &str| {
        q.get(name)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Error::invalid(format!("{name}: required")))
    };
    let (task_id, agent_id) = (required("task_id")?, required("agent_id")?);
    let limit = q.limit("limit", EVENTS_MAX, EVENTS_MAX)?;
    let after = q.get("last_processed_event_id").filter(|v| !v.is_empty());
    let rows = records::events(&state.sessions, &actor, task_id, agent_id, after, limit).await?;
    Ok(HttpResponse::Ok().json(rows.iter().map(records::event_view).collect::<Vec<_>>()))
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let e = records::event(&state.sessions, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(records::event_view(&e)))
}
