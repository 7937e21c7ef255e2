//! Agent run schedules (`/agentex/agents/{agent_id}/schedules/...`): the 16 operations of the
//! seed's `AgentsSchedules` group, each a thin call into [`sessiond_core::schedules`].
//!
//! A schedule is addressed by id or by name under its agent (skip and unskip by id only, as in
//! the seed). Every response is the `RunSchedule` shape the official client validates:
//! single-schedule responses carry the live fields (`next_action_times`,
//! `live_data_available: true`); the list carries them when asked with `include_live=true`, and
//! `live_data_available: null` otherwise.

use std::marker::PhantomData;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{deleted, json_body};
use crate::body::Query;
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use crate::{at, no_route};
use sessiond_core::agentex::view;
use sessiond_core::clock;
use sessiond_core::error::{Error, Result};
use sessiond_core::schedules::{Creator, NewSchedule, Schedule, ScheduleChange, Schedules};
use sessiond_core::store::schedules::ScheduleRef;

/// How the initial input reaches each new task: as its first message (sessiond starts every
/// session with its first prompt, which is what `message/send` does).
const INITIAL_INPUT_METHOD: &str = "message/send";
/// Default and largest `limit` of the list.
const LIST_DEFAULT: u32 = 100;
const LIST_MAX: u32 = 1000;

pub fn routes(cfg: &mut web::ServiceConfig) {
    // `/name/{name}` comes before `/{schedule_id}/…`, so that a schedule named `pause` (or
    // `trigger`, …) is reachable by name; ids never read `name`.
    cfg.service(
        web::scope("/agents/{agent_id}/schedules")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(respond(list)))
                    .route(web::post().to(respond(create))),
            )
            .configure(addressed::<ByName>)
            .configure(addressed::<ById>)
            .service(
                at("/{schedule_id}/skip", "POST")
                    .route(web::post().to(respond(skip::<ById, true>))),
            )
            .service(
                at("/{schedule_id}/unskip", "POST")
                    .route(web::post().to(respond(skip::<ById, false>))),
            )
            .default_service(web::to(respond(no_route))),
    );
}

/// The routes of a schedule addressed by id and by name alike: itself, pause, resume, trigger.
fn addressed<A: Addressing + 'static>(cfg: &mut web::ServiceConfig) {
    let at_ = |action: &str, allow| at(&format!("{}{action}", A::SEGMENT), allow);
    cfg.service(
        at_("", "GET, PATCH, DELETE")
            .route(web::get().to(respond(get::<A>)))
            .route(web::patch().to(respond(update::<A>)))
            .route(web::delete().to(respond(delete::<A>))),
    )
    .service(at_("/pause", "POST").route(web::post().to(respond(set_paused::<A, true>))))
    .service(at_("/resume", "POST").route(web::post().to(respond(set_paused::<A, false>))))
    .service(at_("/trigger", "POST").route(web::post().to(respond(trigger::<A>))));
}

/// Whether the second path segment is a schedule's id or its name.
trait Addressing {
    /// The path segment that names the schedule.
    const SEGMENT: &'static str;
    fn target(segment: String) -> ScheduleRef;
}

struct ById;
struct ByName;

impl Addressing for ById {
    const SEGMENT: &'static str = "/{schedule_id}";
    fn target(segment: String) -> ScheduleRef {
        ScheduleRef::Id(segment)
    }
}

impl Addressing for ByName {
    const SEGMENT: &'static str = "/name/{name}";
    fn target(segment: String) -> ScheduleRef {
        ScheduleRef::Name(segment)
    }
}

/// `(agent_id, schedule id or name)`, typed by how the schedule is addressed.
struct Target<A> {
    agent_id: String,
    schedule: ScheduleRef,
    _by: PhantomData<A>,
}

impl<A: Addressing> Target<A> {
    fn of(path: web::Path<(String, String)>) -> Target<A> {
        let (agent_id, segment) = path.into_inner();
        Target {
            agent_id,
            schedule: A::target(segment),
            _by: PhantomData,
        }
    }
}

fn times(list: Vec<i64>) -> Value {
    Value::Array(list.into_iter().map(view::time).collect())
}

/// A schedule as the seed's `RunSchedule`. `live`: with the upcoming tick times.
fn view(s: &Schedule, now: i64, live: bool) -> Value {
    let r = &s.row;
    let creator = match &s.creator {
        Creator::User { user_id } => json!({
            "principal_type": "user",
            "user_id": user_id,
            "account_id": r.workspace_id,
        }),
        Creator::ServiceAccount { service_account_id } => json!({
            "principal_type": "service_account",
            "service_account_id": service_account_id,
            "account_id": r.workspace_id,
        }),
    };
    let mut v = json!({
        "id": r.id,
        "agent_id": r.agent_id,
        "name": r.name,
        "description": r.description,
        "cron_expression": r.cron_expression,
        "interval_seconds": r.interval_seconds,
        "timezone": r.timezone,
        "start_at": view::time_opt(r.start_at),
        "end_at": view::time_opt(r.end_at),
        "paused": r.paused,
        "state": if r.paused { "PAUSED" } else { "ACTIVE" },
        "task_params": s.task_params,
        "task_metadata": s.task_metadata,
        "initial_input": s.initial_input,
        "initial_input_method": INITIAL_INPUT_METHOD,
        "creator_principal": creator,
        "created_at": view::time(r.created_at),
        "updated_at": view::time(r.updated_at),
        "num_actions_taken": r.num_actions,
        "last_action_time": view::time_opt(r.last_action_at),
        "skipped_action_times": times(s.skipped_times(now)),
        "live_data_available": if live { Value::Bool(true) } else { Value::Null },
    });
    if live {
        v["next_action_times"] = times(s.next_times(now));
    }
    v
}

fn one(s: &Schedule) -> HttpResponse {
    HttpResponse::Ok().json(view(s, clock::now_ms(), true))
}

async fn create(
    state: web::Data<AppState>,
    schedules: web::Data<Schedules>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let spec: NewSchedule = json_body(&state, &req, payload).await?;
    let s = schedules.create(&actor, &path, spec).await?;
    Ok(one(&s))
}

async fn list(
    schedules: web::Data<Schedules>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = Query::parse(&req)?;
    let limit = q.limit("limit", LIST_DEFAULT, LIST_MAX)?;
    let live = match q.get("include_live") {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("true") || v == "1" => true,
        Some(v) if v.eq_ignore_ascii_case("false") || v == "0" => false,
        Some(_) => return Err(Error::invalid("include_live: must be true or false")),
    };
    let found = schedules.list(&actor, &path, limit).await?;
    let now = clock::now_ms();
    let items: Vec<Value> = found.iter().map(|s| view(s, now, live)).collect();
    Ok(HttpResponse::Ok().json(json!({ "total": items.len(), "run_schedules": items })))
}

async fn get<A: Addressing>(
    schedules: web::Data<Schedules>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    let t = Target::<A>::of(path);
    Ok(one(&schedules
        .get(&actor, &t.agent_id, &t.schedule)
        .await?))
}

async fn update<A: Addressing>(
    state: web::Data<AppState>,
    schedules: web::Data<Schedules>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let t = Target::<A>::of(path);
    let change: ScheduleChange = json_body(&state, &req, payload).await?;
    let s = schedules
        .update(&actor, &t.agent_id, &t.schedule, change)
        .await?;
    Ok(one(&s))
}

async fn delete<A: Addressing>(
    schedules: web::Data<Schedules>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    let t = Target::<A>::of(path);
    let id = schedules.delete(&actor, &t.agent_id, &t.schedule).await?;
    let what = match &t.schedule {
        ScheduleRef::Id(id) => id.clone(),
        ScheduleRef::Name(name) => name.clone(),
    };
    Ok(deleted(
        &id,
        format!("Run schedule '{what}' deleted successfully"),
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoteBody {
    #[serde(default)]
    note: Option<String>,
}

/// Pause (`PAUSE`) or resume, with an optional note.
async fn set_paused<A: Addressing, const PAUSE: bool>(
    state: web::Data<AppState>,
    schedules: web::Data<Schedules>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let t = Target::<A>::of(path);
    let b: NoteBody = json_body(&state, &req, payload).await?;
    let s = schedules
        .set_paused(&actor, &t.agent_id, &t.schedule, PAUSE, b.note)
        .await?;
    Ok(one(&s))
}

/// Trigger takes no body; one that is sent must still be a JSON object (`{}`).
async fn trigger<A: Addressing>(
    state: web::Data<AppState>,
    schedules: web::Data<Schedules>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let t = Target::<A>::of(path);
    let _: Empty = json_body(&state, &req, payload).await?;
    let s = schedules.trigger(&actor, &t.agent_id, &t.schedule).await?;
    Ok(one(&s))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SkipBody {
    scheduled_time: String,
}

/// Skip (`SKIP`) or unskip one upcoming tick.
async fn skip<A: Addressing, const SKIP: bool>(
    state: web::Data<AppState>,
    schedules: web::Data<Schedules>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let t = Target::<A>::of(path);
    let b: SkipBody = json_body(&state, &req, payload).await?;
    let s = schedules
        .skip(&actor, &t.agent_id, &t.schedule, &b.scheduled_time, SKIP)
        .await?;
    Ok(one(&s))
}
