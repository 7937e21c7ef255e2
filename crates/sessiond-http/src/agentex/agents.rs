//! `/agentex/agents…`: list, retrieve and delete by id or name, and `register-build`. The RPC
//! routes of an agent are in `rpc`, its deployments in `deployments`.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;
use sessiond_core::store::agentex::SortKey;

use super::{ListParams, agent_by_id, agent_by_name, at, deleted, json_body, json_object_param};
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::agents::{self, RegisterBuild};
use sessiond_core::error::Result;
use sessiond_core::store::agentex::{AgentFilter, AgentKey};

pub fn routes(cfg: &mut web::ServiceConfig) {
    // Literal segments (`register-build`, `name`) come before `{agent_id}`.
    cfg.service(at("/agents", "GET").route(web::get().to(respond(list))))
        .service(
            at("/agents/register-build", "POST").route(web::post().to(respond(register_build))),
        )
        .service(
            at("/agents/register", "POST").route(web::post().to(respond(super::acp::register))),
        )
        .service(
            at("/agents/name/{agent_name}", "GET, DELETE")
                .route(web::get().to(respond(get_by_name)))
                .route(web::delete().to(respond(delete_by_name))),
        )
        .service(
            at("/agents/name/{agent_name}/rpc", "POST")
                .route(web::post().to(respond(super::rpc::by_name))),
        )
        .service(
            at("/agents/{agent_id}", "GET, DELETE")
                .route(web::get().to(respond(get)))
                .route(web::delete().to(respond(delete))),
        )
        .service(
            at("/agents/{agent_id}/rpc", "POST").route(web::post().to(respond(super::rpc::by_id))),
        );
}

/// `GET /agents`: `agent_card_metadata` filters by containment in
/// `registration_metadata.agent_card.metadata`; `task_id` keeps the agent of that task.
async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let p = ListParams::parse(
        &req,
        &[SortKey::CreatedAt, SortKey::UpdatedAt, SortKey::Name],
    )?;
    let filter = AgentFilter {
        task_id: p.query.get("task_id").map(str::to_owned),
        agent_card_metadata: json_object_param(&p.query, "agent_card_metadata")?,
        order_by: p.order_by,
        direction: p.direction,
        page: p.page,
    };
    let rows = agents::list(&state.sessions, &actor, filter).await?;
    let policy = &state.sessions.config().policy;
    let body: Vec<Value> = rows.iter().map(|a| agents::view(a, policy)).collect();
    Ok(HttpResponse::Ok().json(body))
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let agent = agent_by_id(&state, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(agents::view(&agent, &state.sessions.config().policy)))
}

async fn get_by_name(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let agent = agent_by_name(&state, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(agents::view(&agent, &state.sessions.config().policy)))
}

async fn delete(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let id = agents::delete(&state.sessions, &actor, AgentKey::Id(&path)).await?;
    Ok(deleted(&id, format!("Agent '{id}' deleted successfully")))
}

async fn delete_by_name(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let id = agents::delete(&state.sessions, &actor, AgentKey::Name(&path)).await?;
    Ok(deleted(&id, format!("Agent '{path}' deleted successfully")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterBuildBody {
    name: String,
    description: String,
    #[serde(default)]
    agent_input_type: Option<String>,
    #[serde(default)]
    registration_metadata: Option<Value>,
}

/// `POST /agents/register-build`: idempotent by name.
async fn register_build(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: RegisterBuildBody = json_body(&state, &req, payload).await?;
    let agent = agents::register_build(
        &state.sessions,
        &actor,
        RegisterBuild {
            name: b.name,
            description: b.description,
            agent_input_type: b.agent_input_type,
            registration_metadata: b.registration_metadata,
        },
    )
    .await?;
    Ok(HttpResponse::Ok().json(agents::view(&agent, &state.sessions.config().policy)))
}
