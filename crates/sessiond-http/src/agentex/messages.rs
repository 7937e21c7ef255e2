//! `/agentex/messages…`: a task's messages (its timeline read as messages), by page or by
//! cursor, one by id, and the messages a client adds (`agentex::messages`).

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};
use sessiond_core::store::agentex::SortKey;

use super::{ListParams, at, json_body};
use crate::body::Query;
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::messages;
use sessiond_core::error::{Error, Result};

/// Most messages one batch adds.
const BATCH_MAX: usize = 100;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        at("/messages", "GET, POST")
            .route(web::get().to(respond(list)))
            .route(web::post().to(respond(create))),
    )
    .service(at("/messages/paginated", "GET").route(web::get().to(respond(paginated))))
    .service(
        at("/messages/batch", "POST, PUT")
            .route(web::post().to(respond(create_batch)))
            .route(web::put().to(respond(update_batch))),
    )
    .service(
        at("/messages/{message_id}", "GET, PUT")
            .route(web::get().to(respond(get)))
            .route(web::put().to(respond(update))),
    );
}

fn task_id(query: &Query) -> Result<String> {
    query
        .get("task_id")
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| Error::invalid("task_id: required"))
}

/// `GET /messages?task_id=…`: newest first unless `order_direction=asc`.
async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let p = ListParams::parse(&req, &[SortKey::CreatedAt])?;
    let task = task_id(&p.query)?;
    let kinds = messages::filter_kinds(p.query.get("filters"))?;
    let out = messages::list(&state.sessions, &actor, &task, kinds, p.direction, p.page).await?;
    Ok(HttpResponse::Ok().json(out))
}

/// `GET /messages/paginated?task_id=…&cursor=…&direction=older|newer`.
async fn paginated(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = Query::parse(&req)?;
    let task = task_id(&q)?;
    let limit = q.limit("limit", 50, super::PAGE_MAX)?;
    let newer = match q.get("direction") {
        None | Some("older") => false,
        Some("newer") => true,
        Some(_) => return Err(Error::invalid("direction: must be older or newer")),
    };
    let kinds = messages::filter_kinds(q.get("filters"))?;
    let page = messages::paginated(
        &state.sessions,
        &actor,
        &task,
        kinds,
        newer,
        q.get("cursor"),
        limit,
    )
    .await?;
    Ok(HttpResponse::Ok().json(json!({
        "data": page.data,
        "next_cursor": page.next_cursor,
        "has_more": page.has_more,
    })))
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    Ok(HttpResponse::Ok().json(messages::get(&state.sessions, &actor, &path).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    content: Value,
    task_id: String,
    /// Accepted for compatibility; a message's time is when it enters the timeline.
    #[serde(default)]
    #[allow(dead_code)]
    created_at: Option<String>,
    #[serde(default)]
    streaming_status: Option<String>,
}

/// Whether a `streaming_status` is `IN_PROGRESS` (`None`: not given).
fn in_progress(s: Option<&str>) -> Result<Option<bool>> {
    match s {
        None => Ok(None),
        Some("DONE") => Ok(Some(false)),
        Some("IN_PROGRESS") => Ok(Some(true)),
        Some(_) => Err(Error::invalid(
            "streaming_status: must be IN_PROGRESS, DONE or null",
        )),
    }
}

/// `POST /messages`: a user's text is a note for the agent, an agent's text an agent message;
/// `IN_PROGRESS` opens an agent message its later updates complete.
async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: CreateBody = json_body(&state, &req, payload).await?;
    let max = state.sessions.config().limits.max_prompt_chars;
    let out = if in_progress(b.streaming_status.as_deref())? == Some(true) {
        let text = messages::check_agent_text("content", &b.content, max)?;
        messages::open(&state.sessions, &actor, &b.task_id, text).await?
    } else {
        let m = messages::check_new("content", &b.content, max)?;
        messages::create(&state.sessions, &actor, &b.task_id, m).await?
    };
    Ok(HttpResponse::Ok().json(out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchBody {
    contents: Vec<Value>,
    task_id: String,
    #[serde(default)]
    #[allow(dead_code)]
    created_at: Option<String>,
}

/// `POST /messages/batch`: every message is checked, then all are added in one transaction.
async fn create_batch(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: BatchBody = json_body(&state, &req, payload).await?;
    if b.contents.len() > BATCH_MAX {
        return Err(Error::invalid(format!(
            "contents: at most {BATCH_MAX} messages per batch"
        )));
    }
    let max = state.sessions.config().limits.max_prompt_chars;
    let checked = b
        .contents
        .iter()
        .enumerate()
        .map(|(i, c)| messages::check_new(&format!("contents/{i}"), c, max))
        .collect::<Result<Vec<_>>>()?;
    let out =
        messages::create_batch(&state.sessions, &actor, &b.task_id, "contents", checked).await?;
    Ok(HttpResponse::Ok().json(out))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    content: Value,
    task_id: String,
    #[serde(default)]
    streaming_status: Option<String>,
}

/// `PUT /messages/{message_id}`: the agent's new content for its message (and its streaming
/// status; not given: unchanged), appended as a revision.
async fn update(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: UpdateBody = json_body(&state, &req, payload).await?;
    let in_progress = in_progress(b.streaming_status.as_deref())?;
    let max = state.sessions.config().limits.max_prompt_chars;
    let text = messages::check_agent_text("content", &b.content, max)?;
    let revision = messages::Revision {
        message_id: path.into_inner(),
        text,
        in_progress,
    };
    let mut out = messages::revise(&state.sessions, &actor, &b.task_id, vec![revision]).await?;
    Ok(HttpResponse::Ok().json(out.pop().ok_or(Error::NotFound)?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BatchUpdateBody {
    task_id: String,
    updates: serde_json::Map<String, Value>,
}

/// `PUT /messages/batch`: new content for several of a task's messages, all checked before the
/// first revision is written, all written in one transaction.
async fn update_batch(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: BatchUpdateBody = json_body(&state, &req, payload).await?;
    if b.updates.len() > BATCH_MAX {
        return Err(Error::invalid(format!(
            "updates: at most {BATCH_MAX} messages per batch"
        )));
    }
    let max = state.sessions.config().limits.max_prompt_chars;
    let revisions = b
        .updates
        .iter()
        .map(|(id, c)| {
            Ok(messages::Revision {
                message_id: id.clone(),
                text: messages::check_agent_text(&format!("updates/{id}"), c, max)?,
                in_progress: None,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let out = messages::revise(&state.sessions, &actor, &b.task_id, revisions).await?;
    Ok(HttpResponse::Ok().json(out))
}
