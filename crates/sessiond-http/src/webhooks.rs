//! `/v1/ws/{ws}/webhooks`: a workspace's outbound webhook subscriptions, their secrets (shown
//! once, at creation and at each rotation) and their delivery logs (`outbound::subscriptions`).

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::Value;

use super::at;
use super::body;
use super::context::AppState;
use crate::context::Caller;
use crate::error::respond;
use sessiond_core::agentex::acp::Platform;
use sessiond_core::error::{Error, Result};
use sessiond_core::outbound::subscriptions::{self, ChangeIn, NewSubscriptionIn, SEALING_PURPOSE};
use sessiond_core::secret::Sealer;

/// Largest body a subscription's routes take.
const BODY_MAX: usize = 64 * 1024;
const LOG_PAGE_MAX: u32 = 100;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/v1/ws/{workspaceSlug}/webhooks")
            .service(
                at("", "GET, POST")
                    .route(web::get().to(respond(list)))
                    .route(web::post().to(respond(create))),
            )
            .service(
                at("/{webhookId}", "GET, PATCH, DELETE")
                    .route(web::get().to(respond(get)))
                    .route(web::patch().to(respond(change)))
                    .route(web::delete().to(respond(delete))),
            )
            .service(at("/{webhookId}/rotate", "POST").route(web::post().to(respond(rotate))))
            .service(at("/{webhookId}/deliveries", "GET").route(web::get().to(respond(deliveries))))
            .service(
                at("/{webhookId}/deliveries/{deliveryId}", "GET")
                    .route(web::get().to(respond(delivery))),
            )
            .service(
                at("/{webhookId}/deliveries/{deliveryId}/redeliver", "POST")
                    .route(web::post().to(respond(redeliver))),
            ),
    );
}

type WebhookPath = web::Path<(String, String)>;
type DeliveryPath = web::Path<(String, String, String)>;

fn sealer(platform: Option<web::Data<Platform>>) -> Result<Sealer> {
    let platform =
        platform.ok_or_else(|| Error::Internal("the server's keys are not wired".into()))?;
    Ok(platform.keys().sealer(SEALING_PURPOSE))
}

/// An answer holding a secret: no cache keeps it.
fn secret_answer(mut resp: actix_web::HttpResponseBuilder, v: Value) -> HttpResponse {
    resp.insert_header((header::CACHE_CONTROL, "no-store"))
        .json(v)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CreateBody {
    url: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    event_types: Option<Vec<String>>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    session_id: Option<String>,
}

async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    platform: Option<web::Data<Platform>>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let raw = body::json_value(&req, payload, BODY_MAX).await?;
    let b: CreateBody = body::typed(&raw)?;
    let sealer = sealer(platform)?;
    let created = subscriptions::create(
        state.sessions.store(),
        state.sessions.config(),
        &sealer,
        &actor,
        NewSubscriptionIn {
            url: b.url,
            description: b.description,
            event_types: b.event_types,
            agent: b.agent,
            session_id: b.session_id,
        },
    )
    .await?;
    Ok(secret_answer(HttpResponse::Created(), created))
}

async fn list(state: web::Data<AppState>, Caller(actor): Caller) -> Result<HttpResponse> {
    Ok(HttpResponse::Ok().json(subscriptions::list(state.sessions.store(), &actor).await?))
}

async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: WebhookPath,
) -> Result<HttpResponse> {
    let v = subscriptions::get(state.sessions.store(), &actor, &path.1).await?;
    Ok(HttpResponse::Ok().json(v))
}

/// A filter of a change: absent (unchanged), `null` (removed) or a string.
fn nullable<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ChangeBody {
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    event_types: Option<Vec<String>>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default, deserialize_with = "nullable")]
    agent: Option<Option<String>>,
    #[serde(default, deserialize_with = "nullable")]
    session_id: Option<Option<String>>,
}

async fn change(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: WebhookPath,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let raw = body::json_value(&req, payload, BODY_MAX).await?;
    let b: ChangeBody = body::typed(&raw)?;
    let c = ChangeIn {
        url: b.url,
        description: b.description,
        event_types: b.event_types,
        agent: b.agent,
        session_id: b.session_id,
        enabled: b.enabled,
    };
    let v = subscriptions::change(
        state.sessions.store(),
        state.sessions.config(),
        &actor,
        &path.1,
        c,
    )
    .await?;
    Ok(HttpResponse::Ok().json(v))
}

async fn delete(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: WebhookPath,
) -> Result<HttpResponse> {
    subscriptions::delete(state.sessions.store(), &actor, &path.1).await?;
    Ok(HttpResponse::NoContent().finish())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RotateBody {
    #[serde(default)]
    overlap_ms: Option<i64>,
}

async fn rotate(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    platform: Option<web::Data<Platform>>,
    path: WebhookPath,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    // The body is optional: an empty one asks for the default overlap.
    let bytes = body::json_bytes(&req, payload, BODY_MAX).await?;
    let b: RotateBody = if bytes.is_empty() {
        RotateBody::default()
    } else {
        let raw: Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::invalid(format!("body: malformed JSON ({e})")))?;
        body::typed(&raw)?
    };
    let sealer = sealer(platform)?;
    let v = subscriptions::rotate(
        state.sessions.store(),
        state.sessions.config(),
        &sealer,
        &actor,
        &path.1,
        b.overlap_ms,
    )
    .await?;
    Ok(secret_answer(HttpResponse::Ok(), v))
}

async fn deliveries(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: WebhookPath,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = body::Query::parse(&req)?;
    let limit = q.limit("limit", 50, LOG_PAGE_MAX)?;
    let before = q.get("before").map(str::to_owned);
    let v =
        subscriptions::deliveries(state.sessions.store(), &actor, &path.1, before, limit).await?;
    Ok(HttpResponse::Ok().json(v))
}

async fn delivery(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: DeliveryPath,
) -> Result<HttpResponse> {
    let v = subscriptions::delivery(state.sessions.store(), &actor, &path.1, &path.2).await?;
    Ok(HttpResponse::Ok().json(v))
}

async fn redeliver(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: DeliveryPath,
) -> Result<HttpResponse> {
    let v = subscriptions::redeliver(state.sessions.store(), &actor, &path.1, &path.2).await?;
    Ok(HttpResponse::Accepted().json(v))
}
