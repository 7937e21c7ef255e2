//! `/agentex/agents/{agent_id}/deployments…`: an agent's engine versions, their promotion to
//! production and the preview RPC against one of them (`agentex::deployments`).

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Map, Value};
use sessiond_core::store::agentex::SortKey;

use super::{ListParams, agent_by_id, at, deleted, json_body};
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::deployments::{self, NewDeploymentIn};
use sessiond_core::error::Result;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        at("/agents/{agent_id}/deployments", "GET, POST")
            .route(web::get().to(respond(list)))
            .route(web::post().to(respond(create))),
    )
    .service(
        at(
            "/agents/{agent_id}/deployments/{deployment_id}",
            "GET, DELETE",
        )
        .route(web::get().to(respond(get)))
        .route(web::delete().to(respond(delete))),
    )
    .service(
        at(
            "/agents/{agent_id}/deployments/{deployment_id}/promote",
            "POST",
        )
        .route(web::post().to(respond(promote))),
    )
    .service(
        at("/agents/{agent_id}/deployments/{deployment_id}/rpc", "POST")
            .route(web::post().to(respond(preview_rpc))),
    );
}

type DeploymentPath = web::Path<(String, String)>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    docker_image: String,
    #[serde(default)]
    helm_release_name: Option<String>,
    #[serde(default)]
    registration_metadata: Option<Map<String, Value>>,
    #[serde(default)]
    sgp_deploy_id: Option<String>,
}

async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let agent = agent_by_id(&state, &actor, &path).await?;
    let b: CreateBody = json_body(&state, &req, payload).await?;
    let d = deployments::create(
        &state.sessions,
        &actor,
        &agent,
        NewDeploymentIn {
            docker_image: b.docker_image,
            helm_release_name: b.helm_release_name,
            registration_metadata: b.registration_metadata,
            sgp_deploy_id: b.sgp_deploy_id,
        },
    )
    .await?;
    Ok(HttpResponse::Ok().json(deployments::view(&d)))
}

async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let agent = agent_by_id(&state, &actor, &path).await?;
    let p = ListParams::parse(&req, &[SortKey::CreatedAt, SortKey::PromotedAt])?;
    let rows = deployments::list(&state.sessions, &agent, p.order_by, p.direction, p.page).await?;
    Ok(HttpResponse::Ok().json(rows.iter().map(deployments::view).collect::<Vec<_>>()))
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: DeploymentPath,
) -> Result<HttpResponse> {
    let agent = agent_by_id(&state, &actor, &path.0).await?;
    let d = deployments::get(&state.sessions, &agent, &path.1).await?;
    Ok(HttpResponse::Ok().json(deployments::view(&d)))
}

async fn delete(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: DeploymentPath,
) -> Result<HttpResponse> {
    let agent = agent_by_id(&state, &actor, &path.0).await?;
    deployments::delete(&state.sessions, &actor, &agent, &path.1).await?;
    Ok(deleted(
        &path.1,
        format!("Deployment '{}' deleted successfully", path.1),
    ))
}

async fn promote(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: DeploymentPath,
) -> Result<HttpResponse> {
    let agent = agent_by_id(&state, &actor, &path.0).await?;
    let d = deployments::promote(&state.sessions, &actor, &agent, &path.1).await?;
    Ok(HttpResponse::Ok().json(deployments::view(&d)))
}

/// `previewRpc`: the agent RPC, with the tasks it opens running on this deployment's engine.
async fn preview_rpc(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: DeploymentPath,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let found = match agent_by_id(&state, &actor, &path.0).await {
        Ok(agent) => deployments::get(&state.sessions, &agent, &path.1)
            .await
            .map(|d| (agent, d)),
        Err(e) => Err(e),
    };
    match found {
        Ok((agent, d)) => super::rpc::handle(state, actor, agent, Some(d), req, payload).await,
        Err(e) => super::rpc::unreachable_agent(e),
    }
}
