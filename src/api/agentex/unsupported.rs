//! Operations of the official client that have no counterpart in sessiond answer 501 with a
//! JSON error saying why (after the usual credential and scope check). The README lists them.

use actix_web::{HttpResponse, web};

use super::at;
use crate::error::{Error, Result};
use crate::sessions::Actor;

const DEPLOYMENT_HISTORY: &str = "deployment history (the git builds of agent pods) is not kept \
    by sessiond: list an agent's engine versions with GET /agents/{agent_id}/deployments";
const WEBHOOKS: &str = "webhook triggers are not offered by sessiond: call the RPC routes with \
    an API key (`sessiond token create`) instead";

pub fn routes(cfg: &mut web::ServiceConfig) {
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
    );
}

pub async fn answer(why: &'static str) -> Result<HttpResponse> {
    Err(Error::NotImplemented(why.to_owned()))
}
