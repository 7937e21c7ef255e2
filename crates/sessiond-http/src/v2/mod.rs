//! The Task events API (`/v2`): the same sessions as Session records (seed 004) with their
//! timeline as HAST Event v2 (seed 001) — a list and a resumable SSE stream.
//!
//! Paths carry no workspace: a request acts in its credential's (see [`super::context`]). Reads
//! and streams need `sessions:read`, writes `sessions`.

mod events;
mod fork;
mod sessions;

use actix_web::web;

use super::at;

use crate::error::respond;
pub use sessions::HARNESSES;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/v2/sessions")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(respond(sessions::list)))
                    .route(web::post().to(respond(sessions::create))),
            )
            .service(
                at("/{sessionId}", "GET, PATCH")
                    .route(web::get().to(respond(sessions::get)))
                    .route(web::patch().to(respond(sessions::patch))),
            )
            .service(
                at("/{sessionId}/messages", "POST")
                    .route(web::post().to(respond(sessions::message))),
            )
            .service(at("/{sessionId}/fork", "POST").route(web::post().to(respond(fork::fork))))
            .service(at("/{sessionId}/events", "GET").route(web::get().to(respond(events::list))))
            .service(
                at("/{sessionId}/events/stream", "GET")
                    .route(web::get().to(respond(events::stream))),
            ),
    );
}
