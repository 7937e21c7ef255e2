//! The one mapping of the core's [`Error`] to HTTP: status, headers and body.
//!
//! The core's errors know nothing of HTTP, and this crate cannot make actix treat them as its
//! own: handlers return the core's `Result`, and the route table registers each through
//! [`respond`], which answers an error with [`HttpError`], the table below.
//!
//! Bodies are `{"error": "<code>", "message": "..."}` except where a seed fixes the exact shape
//! (`invalid_cwd` carries `reason`, `no_default_session` is bare). Storage faults and bugs are
//! logged here, once, with their detail; the client gets a message that leaks none of it.

use actix_web::http::{StatusCode, header};
use actix_web::{Handler, HttpResponse, ResponseError};
use futures_util::TryFutureExt;
use futures_util::future::MapErr;
use serde_json::json;

use sessiond_core::error::Error;

/// The status of each core error.
pub fn status_of(e: &Error) -> StatusCode {
    match e {
        Error::InvalidRequest(_) => StatusCode::BAD_REQUEST,
        Error::Unauthorized | Error::SignatureRefused(_) => StatusCode::UNAUTHORIZED,
        Error::Forbidden(_) => StatusCode::FORBIDDEN,
        Error::NotFound | Error::AgentNotFound | Error::NoDefaultSession => StatusCode::NOT_FOUND,
        Error::IdempotencyConflict
        | Error::NotAsking
        | Error::BudgetHit { .. }
        | Error::SessionClosed
        | Error::CwdConflict
        | Error::StaleTurn
        | Error::Exists
        | Error::ConstraintRace(_)
        | Error::Conflict(..) => StatusCode::CONFLICT,
        Error::InvalidCwd(_) => StatusCode::UNPROCESSABLE_ENTITY,
        Error::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        Error::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Error::RequestTimeout(_) => StatusCode::REQUEST_TIMEOUT,
        Error::TooManyStreams => StatusCode::TOO_MANY_REQUESTS,
        Error::ShuttingDown | Error::StorageUnavailable(_) | Error::StorageBusy(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        Error::StorageFull(_) => StatusCode::INSUFFICIENT_STORAGE,
        Error::NotImplemented(_) => StatusCode::NOT_IMPLEMENTED,
        Error::AgentUnavailable(_) => StatusCode::BAD_GATEWAY,
        Error::Storage(_) | Error::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The answer to a core error: its status, the headers it asks for, and its JSON body.
pub fn response_of(e: &Error) -> HttpResponse {
    let body = match e {
        // Seed-defined bodies keep their exact shape (closed schemas).
        Error::InvalidCwd(reason) => json!({"error": "invalid_cwd", "reason": reason}),
        Error::NoDefaultSession => json!({"error": "no_default_session"}),
        Error::Storage(_) | Error::Internal(_) => {
            // Details go to the log, never to the client.
            tracing::error!(error = %e, "request failed");
            json!({"error": e.code(), "message": "internal error"})
        }
        Error::StorageFull(detail) => {
            // The store's health logs the change of state once; each refusal is detail.
            tracing::debug!(error = %detail, "write refused: storage is full");
            json!({"error": e.code(), "message": "the server's storage is full; nothing was changed, retry once space is freed"})
        }
        Error::StorageUnavailable(detail) => {
            tracing::debug!(error = %detail, "request failed: storage is unavailable");
            json!({"error": e.code(), "message": "the server's storage is unavailable; nothing was changed, retry later"})
        }
        Error::StorageBusy(detail) => {
            tracing::warn!(error = %detail, "write refused: it kept losing lock races");
            json!({"error": e.code(), "message": "the database is busy with concurrent writes; nothing was changed, retry"})
        }
        other => json!({"error": other.code(), "message": other.to_string()}),
    };
    let mut res = HttpResponse::build(status_of(e));
    match e {
        Error::ShuttingDown | Error::StorageBusy(_) => {
            res.insert_header((header::RETRY_AFTER, "1"));
        }
        // The rest of the body may still be on its way: do not read it, close instead.
        Error::RequestTimeout(_) => {
            res.insert_header((header::CONNECTION, "close"));
        }
        Error::StorageFull(_) | Error::StorageUnavailable(_) => {
            res.insert_header((header::RETRY_AFTER, "5"));
        }
        _ => {}
    }
    if matches!(e, Error::Unauthorized) {
        res.insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"sessiond\""));
    }
    if status_of(e) == StatusCode::CONFLICT {
        // The same request conflicts again: clients that retry 409s (the official AgentEx
        // client does) are told not to.
        res.insert_header(("x-should-retry", "false"));
    }
    res.json(body)
}

/// A core error as actix answers it.
#[derive(Debug)]
pub struct HttpError(pub Error);

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl From<Error> for HttpError {
    fn from(e: Error) -> HttpError {
        HttpError(e)
    }
}

impl ResponseError for HttpError {
    fn status_code(&self) -> StatusCode {
        status_of(&self.0)
    }

    fn error_response(&self) -> HttpResponse {
        response_of(&self.0)
    }
}

/// A handler as the route table registers it: the same handler, its core errors answered
/// through [`HttpError`].
pub fn respond<F>(handler: F) -> Responding<F> {
    Responding(handler)
}

/// See [`respond`].
#[derive(Clone)]
pub struct Responding<F>(F);

impl<F, Args, R> Handler<Args> for Responding<F>
where
    F: Handler<Args, Output = Result<R, Error>>,
{
    type Output = Result<R, HttpError>;
    type Future = MapErr<F::Future, fn(Error) -> HttpError>;

    fn call(&self, args: Args) -> Self::Future {
        self.0
            .call(args)
            .map_err(HttpError as fn(Error) -> HttpError)
    }
}
