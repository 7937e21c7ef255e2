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

pub use sessions::HARNESSES;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/v2/sessions")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(sessions::list))
                    .route(web::post().to(sessions::create)),
            )
            .service(
                at("/{sessionId}", "GET, PATCH")
                    .route(web::get().to(sessions::get))
                    .route(web::patch().to(sessions::patch)),
            )
            .service(at("/{sessionId}/messages", "POST").route(web::post().to(sessions::message)))
            .service(at("/{sessionId}/fork", "POST").route(web::post().to(fork::fork)))
            .service(at("/{sessionId}/events", "GET").route(web::get().to(events::list)))
            .service(at("/{sessionId}/events/stream", "GET").route(web::get().to(events::stream))),
    );
}
