//! The agent platform API (`/agentex/...`), acting in the credential's workspace.

mod schedules;

use actix_web::web;

pub fn routes(cfg: &mut web::ServiceConfig) {
    schedules::routes(cfg);
}
