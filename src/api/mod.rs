//! The HTTP surface: routes of every API family, mapped onto thin handlers.

mod agentex;
mod agents;
mod auth;
pub mod body;
pub mod context;
mod events;
pub mod schema;
mod sessions;
mod uploads;

use actix_web::http::header;
use actix_web::{HttpResponse, Resource, web};
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

/// A path whose other methods answer 405 with the `Allow` header listing the ones it has.
fn at(path: &str, allow: &'static str) -> Resource {
    web::resource(path).default_service(web::to(move || async move {
        HttpResponse::MethodNotAllowed()
            .insert_header((header::ALLOW, allow))
            .json(json!({"error": "method_not_allowed", "message": format!("allowed: {allow}")}))
    }))
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/healthz", "GET").route(web::get().to(healthz)));
    cfg.service(
        web::scope("/auth")
            .service(at("/setup", "POST").route(web::post().to(auth::setup)))
            .service(at("/login", "POST").route(web::post().to(auth::login)))
            .service(at("/logout", "POST").route(web::post().to(auth::logout)))
            .service(at("/me", "GET").route(web::get().to(auth::me)))
            .service(at("/status", "GET").route(web::get().to(auth::status))),
    );
    // Literal segments (`activity`, `attachments`, `wait`) are registered before `{sessionId}`.
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/agent/sessions")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(sessions::list))
                    .route(web::post().to(sessions::create)),
            )
            .service(at("/activity", "GET").route(web::get().to(sessions::activity)))
            .service(at("/wait", "POST").route(web::post().to(sessions::create_wait)))
            .service(at("/attachments/session", "POST").route(web::post().to(uploads::mint)))
            .service(
                at("/{sessionId}", "GET, PATCH, DELETE")
                    .route(web::get().to(sessions::detail))
                    .route(web::patch().to(sessions::set_title))
                    .route(web::delete().to(sessions::delete)),
            )
            .service(at("/{sessionId}/history", "GET").route(web::get().to(sessions::history)))
            .service(at("/{sessionId}/events", "GET").route(web::get().to(events::events)))
            .service(
                at("/{sessionId}/images/{storageId}", "GET").route(web::get().to(sessions::image)),
            )
            .service(at("/{sessionId}/messages", "POST").route(web::post().to(sessions::message)))
            .service(
                at("/{sessionId}/messages/wait", "POST")
                    .route(web::post().to(sessions::message_wait)),
            )
            .service(at("/{sessionId}/note", "POST").route(web::post().to(sessions::note)))
            .service(at("/{sessionId}/answer", "POST").route(web::post().to(sessions::answer)))
            .service(
                at("/{sessionId}/answer/wait", "POST").route(web::post().to(sessions::answer_wait)),
            )
            .service(
                at("/{sessionId}/interrupt", "POST").route(web::post().to(sessions::interrupt)),
            )
            .service(at("/{sessionId}/archive", "PUT").route(web::put().to(sessions::archive)))
            .service(at("/{sessionId}/read", "PUT").route(web::put().to(sessions::mark_read)))
            .service(
                at("/{sessionId}/sessions", "POST").route(web::post().to(sessions::create_child)),
            )
            .service(
                at("/{sessionId}/sessions/wait", "POST")
                    .route(web::post().to(sessions::create_child_wait)),
            )
            .service(at("/{sessionId}/cwd", "POST").route(web::post().to(sessions::move_cwd))),
    );
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/agents")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(agents::list))
                    .route(web::post().to(agents::create)),
            )
            .service(
                at("/{agentSlug}", "GET, PATCH, DELETE")
                    .route(web::get().to(agents::get))
                    .route(web::patch().to(agents::update))
                    .route(web::delete().to(agents::delete)),
            )
            .service(
                at("/{agentSlug}/sessions/default", "GET, PUT")
                    .route(web::get().to(agents::get_default))
                    .route(web::put().to(agents::put_default)),
            )
            .service(
                at("/{agentSlug}/sessions/default/history", "GET")
                    .route(web::get().to(agents::default_history)),
            )
            .service(
                at("/{agentSlug}/sessions/default/messages", "POST")
                    .route(web::post().to(agents::default_message)),
            )
            .service(
                at("/{agentSlug}/sessions/default/messages/wait", "POST")
                    .route(web::post().to(agents::default_message_wait)),
            ),
    );
    cfg.service(
        web::scope("/agentex")
            .configure(agentex::routes)
            .default_service(web::to(no_route)),
    );
    // Upload tokens only: no other credential is accepted on this path.
    cfg.service(
        at(
            &format!("{}/{{grantId}}/{{filename}}", crate::uploads::UPLOAD_PREFIX),
            "PUT",
        )
        .route(web::put().to(uploads::put)),
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
