//! The core's error type: what went wrong, with a stable code clients switch on.
//!
//! Every fallible operation in the core returns [`Error`]. It knows nothing of HTTP: the HTTP
//! layer turns it into a status, headers and a JSON body in `api::error` and nowhere else.
//!
//! Storage faults are classified where they arise (by the store, from its backend's result codes;
//! OS errors here): a full disk is `storage_full` (507), any other fault of the database or the
//! data dir `storage_unavailable` (503); both are the operator's problem and pass once it is
//! fixed, so clients may retry. A write that kept losing lock races with concurrent transactions
//! after the store's own retries is `storage_busy` (503, `Retry-After: 1`). A write that lost a
//! race on a uniqueness rule is [`Error::ConstraintRace`] (409), never a fault. Only what is left
//! (a failed query that is a bug) is `internal`.

//!
//! A fault keeps its [`Cause`] (the engine's or the OS's report) as its `source`; its text is
//! what the HTTP layer logs.

pub use sessiond_store::Cause;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("not found")]
    NotFound,
    #[error("a valid credential is required")]
    Unauthorized,
    /// A webhook delivery without a signature, with one that verifies against no trigger of its
    /// URL, or signed too long ago (401, `invalid_signature`).
    #[error("{0}")]
    SignatureRefused(String),
    #[error("agent not found")]
    AgentNotFound,
    #[error("the agent has no default session")]
    NoDefaultSession,
    #[error("clientRequestId was already used with a different request")]
    IdempotencyConflict,
    #[error("the session is not waiting for an answer")]
    NotAsking,
    /// The session's cost reached its budget; raising the budget lets it continue.
    #[error("budget_hit: the session has spent its budget of {cents} cents")]
    BudgetHit { cents: u64 },
    /// The session was closed (handed off to another one) and takes no more prompts.
    #[error("the session is closed and takes no more prompts")]
    SessionClosed,
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
    #[error("a JSON body needs Content-Type: application/json")]
    UnsupportedMediaType,
    #[error("the request body did not arrive within {0} ms")]
    RequestTimeout(u64),
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
    /// The filesystem holding the data dir is full (or over quota): writes fail until space
    /// returns.
    #[error("storage is full: {0}")]
    StorageFull(#[source] Cause),
    /// The database or the data dir cannot be used right now (I/O error, read-only, locked,
    /// damaged).
    #[error("storage is unavailable: {0}")]
    StorageUnavailable(#[source] Cause),
    /// A write kept losing lock races with concurrent transactions (a deadlock, a serialization
    /// failure: PostgreSQL rolled it back each time) after the store ran it again as many times
    /// as it does. Nothing was written; the same request may succeed at once.
    #[error("the database is busy with concurrent writes: {0}")]
    StorageBusy(#[source] Cause),
    /// A write lost a race on a uniqueness rule of the store (two creates with the same key,
    /// e.g. the same `clientRequestId` or slug, committed by another writer first). Not a fault
    /// of the storage: the caller reads what won, or answers 409.
    #[error("a concurrent write took the same key: {0}")]
    ConstraintRace(#[source] Cause),
    /// A storage operation failed in a way no operator action explains (a bug).
    #[error("storage error: {0}")]
    Storage(#[source] Cause),
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidRequest(msg.into())
    }

    /// A fault of the storage itself (full, I/O, read-only, or too busy with concurrent writes)
    /// rather than of the request: it passes when the operator fixes the machine or the load
    /// drops, so work that met it is retried, not abandoned.
    pub fn is_storage_fault(&self) -> bool {
        matches!(
            self,
            Error::StorageFull(_) | Error::StorageUnavailable(_) | Error::StorageBusy(_)
        )
    }

    /// An OS error met while writing to the data dir or the drive, with what was being done.
    pub fn from_io(context: &str, e: &std::io::Error) -> Self {
        let detail = format!("{context}: {e}");
        // The OS's error is the source; `e` is borrowed, so it is rebuilt from its code.
        let os_error = || match e.raw_os_error() {
            Some(code) => std::io::Error::from_raw_os_error(code),
            None => std::io::Error::new(e.kind(), e.to_string()),
        };
        let cause = || Cause::new(detail.clone(), os_error());
        match e.raw_os_error() {
            Some(libc::ENOSPC | libc::EDQUOT) => Error::StorageFull(cause()),
            Some(libc::EROFS | libc::EIO | libc::EACCES | libc::EPERM) => {
                Error::StorageUnavailable(cause())
            }
            _ => Error::Internal(detail),
        }
    }

    /// The stable machine-readable code clients switch on.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidRequest(_) => "invalid_request",
            Error::NotFound => "not_found",
            Error::Unauthorized => "unauthorized",
            Error::SignatureRefused(_) => "invalid_signature",
            Error::AgentNotFound => "agent_not_found",
            Error::NoDefaultSession => "no_default_session",
            Error::IdempotencyConflict => "idempotency_conflict",
            Error::NotAsking => "not_asking",
            Error::BudgetHit { .. } => "budget_hit",
            Error::SessionClosed => "session_closed",
            Error::InvalidCwd(_) => "invalid_cwd",
            Error::CwdConflict => "cwd_conflict",
            Error::Exists => "exists",
            Error::Forbidden(_) => "forbidden",
            Error::Conflict(code, _) => code,
            Error::PayloadTooLarge { .. } => "payload_too_large",
            Error::UnsupportedMediaType => "unsupported_media_type",
            Error::RequestTimeout(_) => "request_timeout",
            Error::TooManyStreams => "too_many_streams",
            Error::ShuttingDown => "unavailable",
            Error::NotImplemented(_) => "not_implemented",
            Error::AgentUnavailable(_) => "agent_unavailable",
            Error::StaleTurn => "stale_turn",
            Error::ConstraintRace(_) => "conflict",
            Error::StorageFull(_) => "storage_full",
            Error::StorageUnavailable(_) => "storage_unavailable",
            Error::StorageBusy(_) => "storage_busy",
            Error::Storage(_) | Error::Internal(_) => "internal",
        }
    }
}

/// What the store refused or met, as the core says it. One arm per store error: the store's
/// rules (a budget, a closed session) keep their codes, its faults their classes.
impl From<sessiond_store::Error> for Error {
    fn from(e: sessiond_store::Error) -> Self {
        use sessiond_store::Error as S;
        match e {
            S::InvalidRequest(m) => Error::InvalidRequest(m),
            S::NotFound => Error::NotFound,
            S::AgentNotFound => Error::AgentNotFound,
            S::IdempotencyConflict => Error::IdempotencyConflict,
            S::NotAsking => Error::NotAsking,
            S::BudgetHit { cents } => Error::BudgetHit { cents },
            S::SessionClosed => Error::SessionClosed,
            S::CwdConflict => Error::CwdConflict,
            S::Forbidden(m) => Error::Forbidden(m),
            S::Conflict(code, m) => Error::Conflict(code, m),
            S::StaleTurn => Error::StaleTurn,
            S::ShuttingDown => Error::ShuttingDown,
            S::StorageFull(m) => Error::StorageFull(m),
            S::StorageUnavailable(m) => Error::StorageUnavailable(m),
            S::StorageBusy(m) => Error::StorageBusy(m),
            S::ConstraintRace(m) => Error::ConstraintRace(m),
            S::Storage(m) => Error::Storage(m),
            S::Internal(m) => Error::Internal(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_full_disk_keeps_the_os_error_as_its_source() {
        let e = Error::from_io(
            "writing a file",
            &std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        assert!(matches!(e, Error::StorageFull(_)), "{e:?}");
        let os = e
            .source()
            .and_then(|cause| cause.source())
            .expect("the OS error");
        let os = os.downcast_ref::<std::io::Error>().expect("an io::Error");
        assert_eq!(os.raw_os_error(), Some(libc::ENOSPC));
    }

    #[test]
    fn a_store_fault_keeps_its_cause_through_the_core() {
        let store = sessiond_store::Error::StorageUnavailable(Cause::new(
            "disk I/O error",
            std::io::Error::from_raw_os_error(libc::EIO),
        ));
        let e = Error::from(store);
        assert!(matches!(e, Error::StorageUnavailable(_)), "{e:?}");
        assert_eq!(e.to_string(), "storage is unavailable: disk I/O error");
        let os = e
            .source()
            .and_then(|cause| cause.source())
            .expect("the OS error");
        assert!(os.downcast_ref::<std::io::Error>().is_some());
    }
}
