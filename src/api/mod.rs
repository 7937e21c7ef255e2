//! The HTTP surface: routes of every API family, mapped onto thin handlers.

mod agents;
mod auth;
pub mod body;
pub mod context;
mod events;
pub mod schema;
mod sessions;
mod uploads;

use actix_web::{HttpResponse, web};
use serde_json::json;

pub use context::AppState;

/// `GET /healthz`: liveness plus what this binary is.
async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "schemaVersion": *crate::store::SCHEMA_VERSION,
    }))
}

/// JSON 404 for paths no route matches.
async fn no_route() -> crate::Result<HttpResponse> {
    Err(crate::Error::NotFound)
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/healthz", web::get().to(healthz));
    cfg.service(
        web::scope("/auth")
            .route("/setup", web::post().to(auth::setup))
            .route("/login", web::post().to(auth::login))
            .route("/logout", web::post().to(auth::logout))
            .route("/me", web::get().to(auth::me))
            .route("/status", web::get().to(auth::status)),
    );
    // Literal segments (`activity`, `attachments`, `wait`) are registered before `{sessionId}`.
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/agent/sessions")
            .route("", web::get().to(sessions::list))
            .route("", web::post().to(sessions::create))
            .route("/activity", web::get().to(sessions::activity))
            .route("/wait", web::post().to(sessions::create_wait))
            .route("/attachments/session", web::post().to(uploads::mint))
            .route("/{sessionId}", web::get().to(sessions::detail))
            .route("/{sessionId}", web::patch().to(sessions::set_title))
            .route("/{sessionId}", web::delete().to(sessions::delete))
            .route("/{sessionId}/history", web::get().to(sessions::history))
            .route("/{sessionId}/events", web::get().to(events::events))
            .route(
                "/{sessionId}/images/{storageId}",
                web::get().to(sessions::image),
            )
            .route("/{sessionId}/messages", web::post().to(sessions::message))
            .route(
                "/{sessionId}/messages/wait",
                web::post().to(sessions::message_wait),
            )
            .route("/{sessionId}/note", web::post().to(sessions::note))
            .route("/{sessionId}/answer", web::post().to(sessions::answer))
            .route(
                "/{sessionId}/answer/wait",
                web::post().to(sessions::answer_wait),
            )
            .route(
                "/{sessionId}/interrupt",
                web::post().to(sessions::interrupt),
            )
            .route("/{sessionId}/archive", web::put().to(sessions::archive))
            .route("/{sessionId}/read", web::put().to(sessions::mark_read))
            .route(
                "/{sessionId}/sessions",
                web::post().to(sessions::create_child),
            )
            .route(
                "/{sessionId}/sessions/wait",
                web::post().to(sessions::create_child_wait),
            )
            .route("/{sessionId}/cwd", web::post().to(sessions::move_cwd)),
    );
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/agents")
            .route("", web::get().to(agents::list))
            .route("", web::post().to(agents::create))
            .route("/{agentSlug}", web::get().to(agents::get))
            .route("/{agentSlug}", web::patch().to(agents::update))
            .route("/{agentSlug}", web::delete().to(agents::delete))
            .route(
                "/{agentSlug}/sessions/default",
                web::get().to(agents::get_default),
            )
            .route(
                "/{agentSlug}/sessions/default",
                web::put().to(agents::put_default),
            )
            .route(
                "/{agentSlug}/sessions/default/history",
                web::get().to(agents::default_history),
            )
            .route(
                "/{agentSlug}/sessions/default/messages",
                web::post().to(agents::default_message),
            )
            .route(
                "/{agentSlug}/sessions/default/messages/wait",
                web::post().to(agents::default_message_wait),
            ),
    );
    // Upload tokens only: no other credential is accepted on this path.
    cfg.route(
        &format!("{}/{{grantId}}/{{filename}}", crate::uploads::UPLOAD_PREFIX),
        web::put().to(uploads::put),
    );
}

/// The API plus the embedded UI at `/` and `/ui/...`; anything else is a JSON 404.
pub fn routes_with_ui(cfg: &mut web::ServiceConfig) {
    routes(cfg);
    cfg.route("/", web::get().to(crate::web::asset));
    cfg.route("/setup", web::get().to(crate::web::asset));
    cfg.route("/login", web::get().to(crate::web::asset));
    cfg.route("/ui/{path:.*}", web::get().to(crate::web::asset));
    cfg.default_service(web::route().to(no_route));
}
