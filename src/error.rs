//! The one error type of sessiond and its mapping to HTTP.
//!
//! Every fallible operation in the core returns [`Error`]; the HTTP layer turns it into a status and
//! a JSON body here and nowhere else. Bodies are `{"error": "<code>", "message": "..."}` except where
//! a seed fixes the exact shape (`invalid_cwd` carries `reason`, `no_default_session` is bare).

use actix_web::http::{StatusCode, header};
use actix_web::{HttpResponse, ResponseError};
use serde_json::json;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("not found")]
    NotFound,
    #[error("a valid credential is required")]
    Unauthorized,
    #[error("agent not found")]
    AgentNotFound,
    #[error("the agent has no default session")]
    NoDefaultSession,
    #[error("clientRequestId was already used with a different request")]
    IdempotencyConflict,
    #[error("the session is not waiting for an answer")]
    NotAsking,
    #[error("invalid cwd: {0}")]
    InvalidCwd(&'static str),
    #[error("another move of the working directory won")]
    CwdConflict,
    #[error("a file with that name already exists")]
    Exists,
    #[error("{0}")]
    Forbidden(String),
    #[error("{1}")]
    Conflict(&'static str, String),
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    #[error("too many open streams for this session")]
    TooManyStreams,
    #[error("the turn no longer holds this session")]
    StaleTurn,
    #[error("the server is shutting down")]
    ShuttingDown,
    /// An agent's own server (a registered ACP server) could not take a call (502).
    #[error("{0}")]
    AgentUnavailable(String),
    /// An operation of a wire contract that sessiond answers but does not carry out (501).
    #[error("{0}")]
    NotImplemented(String),
    #[error("storage error: {0}")]
    Storage(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidRequest(msg.into())
    }

    /// The stable machine-readable code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidRequest(_) => "invalid_request",
            Error::NotFound => "not_found",
            Error::Unauthorized => "unauthorized",
            Error::AgentNotFound => "agent_not_found",
            Error::NoDefaultSession => "no_default_session",
            Error::IdempotencyConflict => "idempotency_conflict",
            Error::NotAsking => "not_asking",
            Error::InvalidCwd(_) => "invalid_cwd",
            Error::CwdConflict => "cwd_conflict",
            Error::Exists => "exists",
            Error::Forbidden(_) => "forbidden",
            Error::Conflict(code, _) => code,
            Error::PayloadTooLarge { .. } => "payload_too_large",
            Error::TooManyStreams => "too_many_streams",
            Error::ShuttingDown => "unavailable",
            Error::NotImplemented(_) => "not_implemented",
            Error::AgentUnavailable(_) => "agent_unavailable",
            Error::StaleTurn => "stale_turn",
            Error::Storage(_) | Error::Internal(_) => "internal",
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Storage(e.to_string())
    }
}

impl From<r2d2::Error> for Error {
    fn from(e: r2d2::Error) -> Self {
        Error::Storage(e.to_string())
    }
}

impl ResponseError for Error {
    fn status_code(&self) -> StatusCode {
        match self {
            Error::InvalidRequest(_) => StatusCode::BAD_REQUEST,
            Error::Unauthorized => StatusCode::UNAUTHORIZED,
            Error::Forbidden(_) => StatusCode::FORBIDDEN,
            Error::NotFound | Error::AgentNotFound | Error::NoDefaultSession => {
                StatusCode::NOT_FOUND
            }
            Error::IdempotencyConflict
            | Error::NotAsking
            | Error::CwdConflict
            | Error::StaleTurn
            | Error::Exists
            | Error::Conflict(..) => StatusCode::CONFLICT,
            Error::InvalidCwd(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Error::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Error::TooManyStreams => StatusCode::TOO_MANY_REQUESTS,
            Error::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
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
            other => json!({"error": other.code(), "message": other.to_string()}),
        };
        let mut res = HttpResponse::build(self.status_code());
        if matches!(self, Error::ShuttingDown) {
            res.insert_header((header::RETRY_AFTER, "1"));
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
