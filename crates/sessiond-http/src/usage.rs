//! `GET /v1/ws/{ws}/usage?from=&to=`: what each agent of the workspace spent in a window (the
//! console's overview asks for today and the last seven days in the viewer's own time zone, so
//! the window's ends are the client's). At most 366 days; `to` defaults to now.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::context::AppState;
use crate::context::Caller;
use sessiond_core::error::{Error, Result};

const MAX_WINDOW_MS: i64 = 366 * 24 * 60 * 60 * 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Window {
    from: String,
    #[serde(default)]
    to: Option<String>,
}

fn time(field: &str, text: &str) -> Result<i64> {
    Ok(sessiond_core::agentex::view::parse_micros(field, text)? / 1000)
}

pub async fn by_agent(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = web::Query::<Window>::from_query(req.query_string())
        .map_err(|e| Error::invalid(format!("query: {e}")))?;
    let from = time("from", &q.from)?;
    let to = match &q.to {
        Some(t) => time("to", t)?,
        None => sessiond_core::clock::now_ms(),
    };
    if to <= from {
        return Err(Error::invalid("to: must be after from"));
    }
    if to - from > MAX_WINDOW_MS {
        return Err(Error::invalid("from: the window is at most 366 days"));
    }
    let store = state.sessions.store();
    let spend = store.spend_by_agent(&actor.workspace_id, from, to).await?;
    let agents = store.directory().agents(&actor.workspace_id).await?;
    let rows: Vec<_> = agents
        .iter()
        .map(|a| {
            let s = spend.get(&a.id).cloned().unwrap_or_default();
            json!({
                "agentId": a.id,
                "agentSlug": a.slug,
                "name": a.name,
                "cents": s.cents,
                "tokensIn": s.tokens_in,
                "tokensOut": s.tokens_out,
                "turns": s.turns,
            })
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({
        "from": sessiond_core::clock::rfc3339(from),
        "to": sessiond_core::clock::rfc3339(to),
        "agents": rows,
    })))
}
