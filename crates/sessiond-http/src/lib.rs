//! The HTTP surface: routes of every API family, mapped onto thin handlers.

pub(crate) mod a2a;
mod a2a_stream;
mod agent_key;
mod agentex;
mod agents;
mod apps;
mod archives;
mod auth;
pub mod body;
pub mod connection;
pub mod context;
mod error;
mod events;
mod files;
mod fork;
mod keys;
mod mcp;
pub mod middleware;
pub mod openapi;
mod password_reset;
mod people;
mod retention;
pub mod schema;
mod session_state;
mod sessions;
pub mod stream;
mod ui;
mod uploads;
mod usage;
mod v2;
mod webhooks;
mod workspaces;

use actix_web::http::header;
use actix_web::{HttpResponse, Resource, web};
use serde_json::json;

pub use context::{AppState, Caller};
pub use error::{HttpError, respond};

use sessiond_core::store::Condition;
use sessions::{ACK, WAIT};

/// `GET /healthz`: liveness (always 200 while the process answers), what this binary is, and
/// whether its storage takes writes (`status` is `degraded` while it does not).
async fn healthz(state: web::Data<AppState>) -> HttpResponse {
    let storage = state.sessions.store().health();
    let ok = storage.condition == Condition::Ok;
    let mut storage_json = json!({ "status": storage.condition.as_str() });
    if let Some(since) = storage.since_ms {
        storage_json["since"] = json!(since);
    }
    HttpResponse::Ok().json(json!({
        "status": if ok { "ok" } else { "degraded" },
        "version": env!("CARGO_PKG_VERSION"),
        "schemaVersion": *sessiond_core::store::SCHEMA_VERSION,
        "storage": storage_json,
        // Which process answered: the runner id its turns record (several may share a database).
        "runner": { "id": sessiond_core::ids::process_id() },
    }))
}

/// `GET /readyz`: 200 while this server can take work, 503 while its storage refuses writes or
/// it is shutting down — for load balancers and supervisors, which act on the status alone.
async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let storage = state.sessions.store().health();
    let why = if state.sessions.store().bus().is_closed() {
        Some("the server is shutting down")
    } else {
        match storage.condition {
            Condition::Ok => None,
            Condition::Full => Some("storage is full"),
            Condition::Unavailable => Some("storage is unavailable"),
        }
    };
    match why {
        None => HttpResponse::Ok().json(json!({ "status": "ready" })),
        Some(why) => HttpResponse::ServiceUnavailable()
            .insert_header((header::RETRY_AFTER, "5"))
            .json(json!({ "error": "not_ready", "message": why })),
    }
}

/// `GET /metrics` on the metrics listener: the Prometheus text exposition.
async fn metrics(state: web::Data<AppState>) -> HttpResponse {
    let store = state.sessions.store();
    let sampled = sessiond_core::metrics::Sampled {
        writer_queue_depth: store.writer_queue_depth() as i64,
        inputs_pending: store.turns().pending_input_count().await.ok(),
        storage_ok: store.health().condition == Condition::Ok,
    };
    HttpResponse::Ok()
        .insert_header((
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        ))
        .body(sessiond_core::metrics::METRICS.render(&sampled))
}

/// The metrics listener's only route; anything else there is a JSON 404.
pub fn metrics_routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/metrics", "GET").route(web::get().to(metrics)));
    cfg.default_service(web::route().to(respond(no_route)));
}

/// JSON 404 for paths no route matches.
async fn no_route() -> sessiond_core::Result<HttpResponse> {
    Err(sessiond_core::Error::NotFound)
}

/// A path whose other methods answer 405 with the `Allow` header listing the ones it has.
pub(crate) fn at(path: &str, allow: &'static str) -> Resource {
    web::resource(path).default_service(web::to(move || async move {
        HttpResponse::MethodNotAllowed()
            .insert_header((header::ALLOW, allow))
            .json(json!({"error": "method_not_allowed", "message": format!("allowed: {allow}")}))
    }))
}

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(at("/healthz", "GET").route(web::get().to(healthz)));
    cfg.service(at("/readyz", "GET").route(web::get().to(readyz)));
    cfg.service(at("/openapi.json", "GET").route(web::get().to(openapi::serve)));
    agentex::routes(cfg);
    a2a::routes(cfg);
    mcp::routes(cfg);
    cfg.service(
        web::scope("/auth")
            .service(at("/setup", "POST").route(web::post().to(respond(auth::setup))))
            .service(at("/login", "POST").route(web::post().to(respond(auth::login))))
            .service(at("/logout", "POST").route(web::post().to(respond(auth::logout))))
            .service(at("/me", "GET").route(web::get().to(respond(auth::me))))
            .service(at("/status", "GET").route(web::get().to(respond(auth::status))))
            .service(
                at("/password-reset", "POST").route(web::post().to(respond(password_reset::reset))),
            ),
    );
    // Literal segments (`activity`, `attachments`, `wait`) are registered before `{sessionId}`.
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/agent/sessions")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(respond(sessions::list)))
                    .route(web::post().to(respond(sessions::create::<ACK>))),
            )
            .service(at("/activity", "GET").route(web::get().to(respond(sessions::activity))))
            .service(at("/wait", "POST").route(web::post().to(respond(sessions::create::<WAIT>))))
            .service(
                at("/attachments/session", "POST").route(web::post().to(respond(uploads::mint))),
            )
            // One session's routes under a scope of their own: a request matches `{sessionId}`
            // once and then compares literal suffixes, instead of trying every
            // `/{sessionId}/...` pattern in turn (routing was a tenth of a note's HTTP work).
            .service(
                web::scope("/{sessionId}")
                    .service(
                        at("", "GET, PATCH, DELETE")
                            .route(web::get().to(respond(sessions::detail)))
                            .route(web::patch().to(respond(sessions::set_title)))
                            .route(web::delete().to(respond(sessions::delete))),
                    )
                    .service(at("/history", "GET").route(web::get().to(respond(sessions::history))))
                    .service(at("/events", "GET").route(web::get().to(respond(events::events))))
                    .service(at("/note", "POST").route(web::post().to(respond(sessions::note))))
                    .service(
                        at("/messages", "POST")
                            .route(web::post().to(respond(sessions::message::<ACK>))),
                    )
                    .service(
                        at("/messages/wait", "POST")
                            .route(web::post().to(respond(sessions::message::<WAIT>))),
                    )
                    .service(
                        at("/answer", "POST")
                            .route(web::post().to(respond(sessions::answer::<ACK>))),
                    )
                    .service(
                        at("/answer/wait", "POST")
                            .route(web::post().to(respond(sessions::answer::<WAIT>))),
                    )
                    .service(
                        at("/interrupt", "POST")
                            .route(web::post().to(respond(sessions::interrupt))),
                    )
                    .service(at("/fork", "POST").route(web::post().to(respond(fork::fork))))
                    .service(at("/archive", "PUT").route(web::put().to(respond(sessions::archive))))
                    .service(at("/read", "PUT").route(web::put().to(respond(sessions::mark_read))))
                    .service(
                        at("/sessions", "POST")
                            .route(web::post().to(respond(sessions::create_child::<ACK>))),
                    )
                    .service(
                        at("/sessions/wait", "POST")
                            .route(web::post().to(respond(sessions::create_child::<WAIT>))),
                    )
                    .service(at("/cwd", "POST").route(web::post().to(respond(sessions::move_cwd))))
                    .service(
                        at("/export", "GET")
                            .route(web::get().to(respond(archives::export_session))),
                    )
                    .service(
                        at("/pin", "GET, PUT")
                            .route(web::get().to(respond(retention::get_pin)))
                            .route(web::put().to(respond(retention::put_pin))),
                    )
                    .service(
                        at("/images/{storageId}", "GET")
                            .route(web::get().to(respond(sessions::image))),
                    ),
            ),
    );
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/agents")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(respond(agents::list)))
                    .route(web::post().to(respond(agents::create))),
            )
            .service(
                at("/{agentSlug}", "GET, PATCH, DELETE")
                    .route(web::get().to(respond(agents::get)))
                    .route(web::patch().to(respond(agents::update)))
                    .route(web::delete().to(respond(agents::delete))),
            )
            .service(
                at("/{agentSlug}/contact", "GET").route(web::get().to(respond(agents::contact))),
            )
            .service(
                at("/{agentSlug}/sessions/default", "GET, PUT")
                    .route(web::get().to(respond(agents::get_default)))
                    .route(web::put().to(respond(agents::put_default))),
            )
            .service(
                at("/{agentSlug}/sessions/default/history", "GET")
                    .route(web::get().to(respond(agents::default_history))),
            )
            .service(
                at("/{agentSlug}/sessions/default/messages", "POST")
                    .route(web::post().to(respond(agents::default_message::<ACK>))),
            )
            .service(
                at("/{agentSlug}/sessions/default/messages/wait", "POST")
                    .route(web::post().to(respond(agents::default_message::<WAIT>))),
            ),
    );
    // Whole-workspace archives (owners only).
    cfg.service(
        at("/v1/ws/{workspaceSlug}/export", "GET")
            .route(web::get().to(respond(archives::export_workspace))),
    );
    cfg.service(
        at("/v1/ws/{workspaceSlug}/import", "POST")
            .route(web::post().to(respond(archives::import))),
    );
    cfg.service(
        at("/v1/ws/{workspaceSlug}/retention", "GET, PUT")
            .route(web::get().to(respond(retention::get_policy)))
            .route(web::put().to(respond(retention::put_policy))),
    );
    cfg.service(
        at("/v1/ws/{workspaceSlug}/retention/preview", "GET")
            .route(web::get().to(respond(retention::preview))),
    );
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/keys")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(respond(keys::list)))
                    .route(web::post().to(respond(keys::create))),
            )
            .service(at("/{keyId}", "DELETE").route(web::delete().to(respond(keys::revoke)))),
    );
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/people")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(respond(keys::people)))
                    .route(web::post().to(respond(people::add))),
            )
            .service(
                at("/{userId}", "PATCH, DELETE")
                    .route(web::patch().to(respond(people::set_role)))
                    .route(web::delete().to(respond(people::remove))),
            )
            .service(
                at("/{userId}/password-reset", "POST")
                    .route(web::post().to(respond(people::password_reset))),
            ),
    );
    // The workspace drive: listings, downloads and uploads by path.
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/files")
            .service(at("", "GET").route(web::get().to(respond(files::list))))
            .service(
                at("/content", "GET, PUT")
                    .route(web::get().to(respond(files::content)))
                    .route(web::put().to(respond(files::upload))),
            ),
    );
    cfg.service(
        at("/v1/ws/{workspaceSlug}/usage", "GET").route(web::get().to(respond(usage::by_agent))),
    );
    cfg.service(
        at("/v1/ws/{workspaceSlug}/apps", "POST").route(web::post().to(respond(apps::create))),
    );
    cfg.service(
        at("/v1/ws/{workspaceSlug}", "GET, PATCH")
            .route(web::get().to(respond(workspaces::get)))
            .route(web::patch().to(respond(workspaces::rename))),
    );
    cfg.service(at("/v1/workspaces", "POST").route(web::post().to(respond(workspaces::create))));
    cfg.configure(v2::routes);
    cfg.configure(webhooks::routes);
    // Upload tokens only: no other credential is accepted on this path.
    cfg.service(
        at(
            &format!(
                "{}/{{grantId}}/{{filename}}",
                sessiond_core::uploads::UPLOAD_PREFIX
            ),
            "PUT",
        )
        .route(web::put().to(respond(uploads::put))),
    );
}

/// The API plus the embedded UI at `/` and `/ui/...`; anything else is a JSON 404.
pub fn routes_with_ui(cfg: &mut web::ServiceConfig) {
    routes(cfg);
    cfg.route("/", web::get().to(ui::asset));
    cfg.route("/setup", web::get().to(ui::asset));
    cfg.route("/login", web::get().to(ui::asset));
    cfg.route("/reset", web::get().to(ui::asset));
    cfg.route("/ui/{path:.*}", web::get().to(ui::asset));
    cfg.default_service(web::route().to(respond(no_route)));
}
