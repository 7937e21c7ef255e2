//! What every routed request goes through: its request id, its log span, its metrics, and JSON
//! bodies for errors the framework answers on its own (a path or query that does not decode, or
//! that holds U+0000).
//!
//! The request id is the client's `X-Request-Id` when it is a short token, else a new UUIDv7; it
//! is returned as `X-Request-Id`, names the request's log span (so JSON logs carry it), and is
//! stored with the inputs the request submits, so the turn that runs them — and the engine calls
//! that turn makes — carry it too ([`current_request_id`]).

use std::time::Instant;

use actix_web::body::{BoxBody, EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{Error, HttpResponse};
use serde_json::json;
use tracing::Instrument;

use sessiond_core::metrics::METRICS;

pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Whether the path or query holds a percent-encoded U+0000 (`%00`): refused before routing, as a
/// body holding one is ([`super::body::refuse_nul`]), so no handler sees it.
fn nul_in_uri(uri: &actix_web::http::Uri) -> bool {
    uri.path_and_query()
        .is_some_and(|pq| pq.as_str().as_bytes().windows(3).any(|w| w == b"%00"))
}

/// The id of the request being handled on this task, if any.
pub fn current_request_id() -> Option<String> {
    sessiond_core::request_id::current()
}

/// The client's id when it is a plain token (1–128 of `A-Z a-z 0-9 - _ . : /`), else a new one.
fn request_id_of(req: &ServiceRequest) -> String {
    req.headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| {
            (1..=128).contains(&v.len())
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:/".contains(&b))
        })
        .map(str::to_owned)
        .unwrap_or_else(sessiond_core::ids::new_id)
}

/// The error code for a status the framework chose (when it rejected a request without us).
pub fn code_for_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "invalid_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        408 => "request_timeout",
        411 => "length_required",
        413 => "payload_too_large",
        414 => "uri_too_long",
        415 => "unsupported_media_type",
        431 => "request_header_fields_too_large",
        503 => "unavailable",
        s if s >= 500 => "internal",
        _ => "invalid_request",
    }
}

fn is_json(res: &HttpResponse<impl MessageBody>) -> bool {
    res.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            let v = v.split(';').next().unwrap_or("").trim();
            v.eq_ignore_ascii_case("application/json") || v.ends_with("+json")
        })
}

/// The middleware itself (`App::wrap(from_fn(observe))`).
pub async fn observe(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<BoxBody>>, Error> {
    let started = Instant::now();
    let id = request_id_of(&req);
    let method = req.method().clone();
    let span =
        tracing::info_span!("request", request_id = %id, method = %method, path = %req.path());
    // (The request cannot be kept aside: routing needs it unshared.)
    let res = if nul_in_uri(req.uri()) {
        let refusal = crate::error::response_of(&sessiond_core::error::Error::invalid(
            super::body::NUL_REFUSED,
        ));
        req.into_response(refusal)
    } else {
        sessiond_core::request_id::scope(id.clone(), next.call(req).instrument(span.clone()))
            .await?
            .map_into_boxed_body()
    };
    let route = res
        .request()
        .match_pattern()
        .unwrap_or_else(|| "unmatched".to_owned());
    let status = res.status();
    // Label values stay a small set: route patterns, not paths; known methods, not any token.
    let method_label = match method.as_str() {
        m @ ("GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE" | "OPTIONS") => m,
        _ => "other",
    };
    METRICS
        .http_requests
        .with(&[&route, method_label, status.as_str()])
        .inc();
    METRICS
        .http_duration
        .with(&[&route, method_label])
        .observe_duration(started.elapsed());
    span.in_scope(|| {
        // A 501 is a deliberate answer (an operation of a wire contract sessiond does not carry
        // out), not a failure.
        if status.is_server_error() && status != StatusCode::NOT_IMPLEMENTED {
            tracing::warn!(status = status.as_u16(), route = %route, "request failed");
        }
        tracing::debug!(
            target: "sessiond::access",
            status = status.as_u16(),
            route = %route,
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "request"
        );
    });
    let id_value = HeaderValue::from_str(&id).unwrap_or_else(|_| HeaderValue::from_static("-"));
    let res = if method == Method::HEAD {
        // A HEAD answer has no body; say so in its length, so the connection layer's framing
        // stays exact.
        res.map_body(|_, _| EitherBody::right(BoxBody::new(())))
    } else if status.as_u16() >= 400 && !is_json(res.response()) {
        let (req, old) = res.into_parts();
        let body = json!({
            "error": code_for_status(status),
            "message": status.canonical_reason().unwrap_or("error").to_lowercase(),
        });
        let mut new = HttpResponse::build(status).json(body);
        for (name, value) in old.headers() {
            if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
                new.headers_mut().insert(name.clone(), value.clone());
            }
        }
        ServiceResponse::new(req, new).map_into_right_body()
    } else {
        res.map_into_left_body()
    };
    let mut res = res;
    res.headers_mut()
        .insert(HeaderName::from_static(REQUEST_ID_HEADER), id_value);
    Ok(res)
}
