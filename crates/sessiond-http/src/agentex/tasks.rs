//! `/agentex/tasks…`: tasks (sessions) by id or name: list, retrieve, update, delete, the final
//! status transitions, interrupt, and the live stream of a task's updates (SSE).

use sessiond_core::store::agentex::SortKey;
use std::time::Duration;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::stream;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{ListParams, at, deleted, json_body, json_object_param};
use crate::body::Query;
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::tasks::{self, STATUSES};
use sessiond_core::agentex::updates::{Follower, Item, Scope};
use sessiond_core::error::{Error, Result};
use sessiond_core::sessions::Actor;
use sessiond_core::store::agentex::{FinalStatus, TaskFilter, TaskKey, TaskRow, TaskStatus};

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/tasks", "GET").route(web::get().to(respond(list))))
        .service(
            at("/tasks/name/{task_name}", "GET, PUT, DELETE")
                .route(web::get().to(respond(get_by_name)))
                .route(web::put().to(respond(update_by_name)))
                .route(web::delete().to(respond(delete_by_name))),
        )
        .service(
            at("/tasks/name/{task_name}/stream", "GET")
                .route(web::get().to(respond(stream_by_name))),
        )
        .service(
            at("/tasks/{task_id}", "GET, PUT, DELETE")
                .route(web::get().to(respond(get)))
                .route(web::put().to(respond(update)))
                .route(web::delete().to(respond(delete))),
        )
        .service(at("/tasks/{task_id}/stream", "GET").route(web::get().to(respond(stream_by_id))))
        .service(
            at("/tasks/{task_id}/interrupt", "POST").route(web::post().to(respond(interrupt))),
        );
    for (path, status) in [
        ("/tasks/{task_id}/cancel", FinalStatus::Canceled),
        ("/tasks/{task_id}/complete", FinalStatus::Completed),
        ("/tasks/{task_id}/fail", FinalStatus::Failed),
        ("/tasks/{task_id}/terminate", FinalStatus::Terminated),
        ("/tasks/{task_id}/timeout", FinalStatus::TimedOut),
    ] {
        cfg.service(at(path, "POST").route(web::post().to(respond(
            move |state: web::Data<AppState>,
                  Caller(actor): Caller,
                  path: web::Path<String>,
                  req: HttpRequest,
                  payload: web::Payload| async move {
                finish(state, actor, path, req, payload, status).await
            },
        ))));
    }
}

/// `relationships=agents` (the client sends a comma-separated list).
fn with_agents(query: &Query) -> Result<bool> {
    let mut agents = false;
    for r in query
        .get("relationships")
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|r| !r.is_empty())
    {
        if r != "agents" {
            return Err(Error::invalid(format!(
                "relationships: {r:?} is not one of: agents"
            )));
        }
        agents = true;
    }
    Ok(agents)
}

/// A task as the contract shows it, with its agent when asked for.
async fn task_json(
    state: &AppState,
    actor: &Actor,
    t: &TaskRow,
    with_params: bool,
    agents: bool,
) -> Result<Value> {
    let policy = &state.sessions.config().policy;
    if agents {
        let agent = tasks::agent_of(&state.sessions, actor, t).await?;
        Ok(tasks::view(t, with_params, Some((&agent, policy))))
    } else {
        Ok(tasks::view(t, with_params, None))
    }
}

/// `GET /tasks`: the lean form (no `params`); filters `agent_id`, `agent_name`, `status` and
/// `task_metadata` (containment).
async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let p = ListParams::parse(
        &req,
        &[
            SortKey::CreatedAt,
            SortKey::UpdatedAt,
            SortKey::Name,
            SortKey::Status,
        ],
    )?;
    let status = match p.query.get("status").filter(|s| !s.is_empty()) {
        None => None,
        Some("DELETED") => {
            return Err(Error::invalid(
                "status: deleted tasks are gone, so no task is DELETED",
            ));
        }
        Some(s) => Some(TaskStatus::parse(s).ok_or_else(|| {
            Error::invalid(format!("status: must be one of {}", STATUSES.join(", ")))
        })?),
    };
    let agents = with_agents(&p.query)?;
    let filter = TaskFilter {
        agent_id: p.query.get("agent_id").map(str::to_owned),
        agent_name: p.query.get("agent_name").map(str::to_owned),
        status,
        task_metadata: json_object_param(&p.query, "task_metadata")?,
        order_by: p.order_by,
        direction: p.direction,
        page: p.page,
    };
    let rows = tasks::list(&state.sessions, &actor, filter).await?;
    let mut out = Vec::with_capacity(rows.len());
    for t in &rows {
        out.push(task_json(&state, &actor, t, false, agents).await?);
    }
    Ok(HttpResponse::Ok().json(out))
}

async fn retrieve(
    state: &AppState,
    actor: &Actor,
    key: TaskKey<'_>,
    req: &HttpRequest,
) -> Result<HttpResponse> {
    let agents = with_agents(&Query::parse(req)?)?;
    let t = tasks::find(&state.sessions, actor, key).await?;
    Ok(HttpResponse::Ok().json(task_json(state, actor, &t, true, agents).await?))
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    retrieve(&state, &actor, TaskKey::Id(&path), &req).await
}

async fn get_by_name(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    retrieve(&state, &actor, TaskKey::Name(&path), &req).await
}

async fn remove(state: &AppState, actor: &Actor, key: TaskKey<'_>) -> Result<HttpResponse> {
    let t = tasks::find(&state.sessions, actor, key).await?;
    state.sessions.delete(actor, &t.id).await?;
    Ok(deleted(
        &t.id,
        format!("Task {} deleted successfully", t.id),
    ))
}

async fn delete(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    remove(&state, &actor, TaskKey::Id(&path)).await
}

async fn delete_by_name(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    remove(&state, &actor, TaskKey::Name(&path)).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateBody {
    #[serde(default)]
    merge_params: Option<Map<String, Value>>,
    #[serde(default)]
    task_metadata: Option<Map<String, Value>>,
}

async fn change(
    state: web::Data<AppState>,
    actor: Actor,
    key: TaskKey<'_>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: UpdateBody = json_body(&state, &req, payload).await?;
    let t = tasks::find(&state.sessions, &actor, key).await?;
    let t = tasks::update(&state.sessions, &actor, &t, b.merge_params, b.task_metadata).await?;
    Ok(HttpResponse::Ok().json(tasks::view(&t, true, None)))
}

async fn update(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    change(state, actor, TaskKey::Id(&path), req, payload).await
}

async fn update_by_name(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    change(state, actor, TaskKey::Name(&path), req, payload).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasonBody {
    #[serde(default)]
    reason: Option<String>,
}

fn reason(b: ReasonBody) -> Result<Option<String>> {
    if b.reason
        .as_ref()
        .is_some_and(|r| r.chars().count() > 10_000)
    {
        return Err(Error::invalid("reason: longer than 10000 characters"));
    }
    Ok(b.reason)
}

/// `POST /tasks/{id}/cancel|complete|fail|terminate|timeout`: a final status (409 when the task
/// already has one).
async fn finish(
    state: web::Data<AppState>,
    actor: Actor,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
    status: FinalStatus,
) -> Result<HttpResponse> {
    let why = reason(json_body(&state, &req, payload).await?)?;
    let t = tasks::find(&state.sessions, &actor, TaskKey::Id(&path)).await?;
    let t = tasks::finish(&state.sessions, &actor, &t, status, why, true).await?;
    // An async ACP agent hears of a cancel it did not make itself.
    if status == FinalStatus::Canceled
        && sessiond_core::agentex::confinement::confined_to(&actor).is_none()
        && let Some(platform) = req.app_data::<web::Data<sessiond_core::agentex::acp::Platform>>()
    {
        let agent = tasks::agent_of(&state.sessions, &actor, &t).await?;
        platform.task_cancelled(&agent, &t).await;
    }
    Ok(HttpResponse::Ok().json(tasks::view(&t, true, None)))
}

/// `POST /tasks/{id}/interrupt`: stops the running turn; the task stays open.
async fn interrupt(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let _why = reason(json_body(&state, &req, payload).await?)?;
    let t = tasks::find(&state.sessions, &actor, TaskKey::Id(&path)).await?;
    if let Some(s) = tasks::final_status(&t) {
        return Err(Error::Conflict(
            "task_closed",
            format!(
                "task {} is {}; there is nothing to interrupt",
                t.id,
                s.name()
            ),
        ));
    }
    let t = tasks::interrupt(&state.sessions, &actor, &t).await?;
    Ok(HttpResponse::Ok().json(tasks::view(&t, true, None)))
}

async fn stream_by_id(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    open_stream(&state, &actor, TaskKey::Id(&path)).await
}

async fn stream_by_name(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    open_stream(&state, &actor, TaskKey::Name(&path)).await
}

/// A task's live stream (SSE, one JSON object per `data:`): `connected`, then every message
/// update from now on (`start`/`delta`/`done`/`full`, inputs included), `task_updated` when the
/// task's status changes, `error` if the task goes away; it ends once the task has a final status.
async fn open_stream(state: &AppState, actor: &Actor, key: TaskKey<'_>) -> Result<HttpResponse> {
    let task = tasks::find(&state.sessions, actor, key).await?;
    let keepalive = Duration::from_millis(state.sessions.config().stream.keepalive_ms);
    let store = state.sessions.store();
    // What is stored by now is the past; the stream carries what follows it.
    let after = store.log().last_seq(task.pk).await?;
    let sub = store.bus().subscribe(&task.id)?;
    let follower = Follower::start(store, task.key(), Scope::Task { after }, keepalive, sub);
    let first = sse(&json!({"type": "connected", "taskId": task.id}));
    let st = TaskStream {
        sessions: state.sessions.clone(),
        follower,
        status: tasks::status(&task).0.to_owned(),
        pk: task.pk,
        first: Some(first),
        done: tasks::is_final(&task),
    };
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream::unfold(st, next_event)))
}

fn sse(v: &Value) -> String {
    format!("data: {v}\n\n")
}

struct TaskStream {
    sessions: sessiond_core::sessions::Sessions,
    follower: Follower,
    /// The status last reported.
    status: String,
    pk: i64,
    first: Option<String>,
    done: bool,
}

type Chunk = std::result::Result<web::Bytes, actix_web::Error>;

async fn next_event(mut st: TaskStream) -> Option<(Chunk, TaskStream)> {
    if let Some(first) = st.first.take() {
        return Some((Ok(web::Bytes::from(first)), st));
    }
    if st.done {
        return None;
    }
    loop {
        let out = match st.follower.next().await? {
            Item::Update(u) => sse(&u),
            Item::Keepalive => ": keep-alive\n\n".to_owned(),
            Item::StatusMayChange => {
                let Ok(t) = tasks::reload(&st.sessions, st.pk).await else {
                    continue;
                };
                let status = tasks::status(&t).0.to_owned();
                if status == st.status {
                    continue;
                }
                st.status = status;
                st.done = tasks::is_final(&t);
                sse(&json!({"type": "task_updated", "task": tasks::view(&t, true, None)}))
            }
            Item::TurnEnded { .. } => continue,
            Item::Closed => {
                st.done = true;
                sse(&json!({"type": "error",
                    "message": "the task was deleted or the server is shutting down"}))
            }
        };
        return Some((Ok(web::Bytes::from(out)), st));
    }
}
