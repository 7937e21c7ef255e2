//! Operations of the official client that have no counterpart in sessiond answer 501 with a
//! JSON error saying why (after the usual credential and scope check). The README lists them.

use actix_web::{HttpResponse, web};

use super::at;
use crate::error::{Error, Result};
use crate::sessions::Actor;

const CHECKPOINTS: &str = "LangGraph checkpoints are not kept by sessiond: an agent's \
    conversation and state live in its task's timeline (GET /messages, /states)";
const DEPLOYMENT_HISTORY: &str = "deployment history (the git builds of agent pods) is not kept \
    by sessiond: list an agent's engine versions with GET /agents/{agent_id}/deployments";
const WEBHOOKS: &str = "webhook triggers are not offered by sessiond: call the RPC routes with \
    an API key (`sessiond token create`) instead";
const WORKFLOW_QUERY: &str = "tasks are not Temporal workflows in sessiond; read a task's state \
    with GET /tasks/{task_id}, /messages and /states";

pub fn routes(cfg: &mut web::ServiceConfig) {
    for path in [
        "/checkpoints/list",
        "/checkpoints/delete-thread",
        "/checkpoints/get-tuple",
        "/checkpoints/put",
        "/checkpoints/put-writes",
    ] {
        cfg.service(at(path, "POST").route(web::post().to(|_: Actor| answer(CHECKPOINTS))));
    }
    cfg.service(
        at("/deployment-history", "GET")
            .route(web::get().to(|_: Actor| answer(DEPLOYMENT_HISTORY))),
    )
    .service(
        at("/deployment-history/{deployment_id}", "GET")
            .route(web::get().to(|_: Actor| answer(DEPLOYMENT_HISTORY))),
    )
    .service(
        at("/agent_api_keys/webhook-trigger", "POST")
            .route(web::post().to(|_: Actor| answer(WEBHOOKS))),
    )
    .service(
        at("/tasks/{task_id}/query/{query_name}", "GET")
            .route(web::get().to(|_: Actor| answer(WORKFLOW_QUERY))),
    );
}

pub async fn answer(why: &'static str) -> Result<HttpResponse> {
    Err(Error::NotImplemented(why.to_owned()))
}
