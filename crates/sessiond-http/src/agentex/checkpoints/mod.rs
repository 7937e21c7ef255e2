//! `/agentex/checkpoints/…`: the LangGraph checkpointer's five operations (`agentex::checkpoints`),
//! one handler module each. Every body names its thread (a task); the answers are AgentEx's.

mod delete_thread;
mod get_tuple;
mod list;
mod put;
mod put_writes;

use actix_web::web;

use super::at;
use crate::error::respond;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/checkpoints/list", "POST").route(web::post().to(respond(list::handle))))
        .service(
            at("/checkpoints/get-tuple", "POST").route(web::post().to(respond(get_tuple::handle))),
        )
        .service(at("/checkpoints/put", "POST").route(web::post().to(respond(put::handle))))
        .service(
            at("/checkpoints/put-writes", "POST")
                .route(web::post().to(respond(put_writes::handle))),
        )
        .service(
            at("/checkpoints/delete-thread", "POST")
                .route(web::post().to(respond(delete_thread::handle))),
        );
}
