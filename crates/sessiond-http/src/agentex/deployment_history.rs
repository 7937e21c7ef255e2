//! `/agentex/deployment-history…`: every change to an agent's deployments, with who and when
//! (`agentex::deployment_history`). The list names its agent by `agent_id` or `agent_name` (one
//! of them), in the credential's workspace.

use actix_web::{HttpRequest, HttpResponse, web};

use super::{ListParams, agent_by_id, agent_by_name, at};
use crate::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::deployment_history;
use sessiond_core::error::{Error, Result};
use sessiond_core::store::agentex::SortKey;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/deployment-history", "GET").route(web::get().to(respond(list))))
        .service(
            at("/deployment-history/{deployment_id}", "GET").route(web::get().to(respond(get))),
        );
}

/// `GET /deployment-history?agent_id|agent_name`: a page of the agent's changes, newest first
/// (`order_by` `deployment_timestamp` or `build_timestamp`).
async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let p = ListParams::parse(
        &req,
        &[SortKey::DeploymentTimestamp, SortKey::BuildTimestamp],
    )?;
    let given = |name: &str| p.query.get(name).filter(|v| !v.is_empty());
    let agent = match (given("agent_id"), given("agent_name")) {
        (Some(id), None) => agent_by_id(&state, &actor, id).await?,
        (None, Some(name)) => agent_by_name(&state, &actor, name).await?,
        (None, None) => {
            return Err(Error::invalid(
                "agent_id, agent_name: one of them names the agent whose history to list",
            ));
        }
        (Some(_), Some(_)) => {
            return Err(Error::invalid(
                "agent_id, agent_name: give only one of them",
            ));
        }
    };
    let rows = deployment_history::list(
        &state.sessions,
        &actor,
        &agent,
        p.order_by,
        p.direction,
        p.page,
    )
    .await?;
    Ok(HttpResponse::Ok().json(
        rows.iter()
            .map(deployment_history::view)
            .collect::<Vec<_>>(),
    ))
}

/// `GET /deployment-history/{id}`: one change (404 for another workspace's).
async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    let row = deployment_history::get(&state.sessions, &actor, &path).await?;
    Ok(HttpResponse::Ok().json(deployment_history::view(&row)))
}
