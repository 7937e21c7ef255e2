//! The one mapping of the core's [`Error`] to HTTP: status, headers and body.
//!
//! Bodies are `{"error": "<code>", "message": "..."}` except where a seed fixes the exact shape
//! (`invalid_cwd` carries `reason`, `no_default_session` is bare). Storage faults and bugs are
//! logged here, once, with their detail; the client gets a message that leaks none of it.

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

use crate::error::Error;

impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        match self {
            Error::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Error::Unauthorized | Error::SignatureRefused(_) => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::NotFound | Error::AgentNotFound | Error::NoDefaultSession => {
                StatusCode::NOT_FOUND
            }
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

    fn error_response(&self) -> HttpResponse {
        let body = match self {
            // Seed-defined bodies keep their exact shape (closed schemas).
            Error::InvalidCwd(reason) => json!({"error": "invalid_cwd", "reason": reason}),
            Error::NoDefaultSession => json!({"error": "no_default_session"}),
            Error::Storage(detail) | Error::Internal(detail) => {
                // Details go to the log, never to the client.
                tracing::error!(error = %detail, "request failed");
                json!({"error": self.code(), "message": "internal error"})
            }
            Error::StorageFull(detail) => {
                // The store's health logs the change of state once; each refusal is detail.
                tracing::debug!(error = %detail, "write refused: storage is full");
                json!({"error": self.code(), "message": "the server's storage is full; nothing was changed, retry once space is freed"})
            }
            Error::StorageUnavailable(detail) => {
                tracing::debug!(error = %detail, "request failed: storage is unavailable");
                json!({"error": self.code(), "message": "the server's storage is unavailable; nothing was changed, retry later"})
            }
            Error::StorageBusy(detail) => {
                tracing::warn!(error = %detail, "write refused: it kept losing lock races");
                json!({"error": self.code(), "message": "the database is busy with concurrent writes; nothing was changed, retry"})
            }
            other => json!({"error": other.code(), "message": other.to_string()}),
        };
        let mut res = HttpResponse::build(self.status_code());
        match self {
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
        if matches!(self, Error::Unauthorized) {
            res.insert_header((header::WWW_AUTHENTICATE, "Bearer realm=\"sessiond\""));
        }
        if self.status_code() == StatusCode::CONFLICT {
            // The same request conflicts again: clients that retry 409s (the official AgentEx
            // client does) are told not to.
            res.insert_header(("x-should-retry", "false"));
        }
        res.json(body)
    }
}
