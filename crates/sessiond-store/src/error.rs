//! The store's errors: what a store operation refuses (a row that is not there, a rule of the
//! timeline it would break) and how the storage failed (a full disk, a storage that cannot be used
//! now, a lost race on a uniqueness rule, or a bug).
//!
//! The SQL layer classifies the engines' result codes; [`From<sql::Error>`] is the one place they
//! become store errors. The core maps these to its own errors; nothing here knows of HTTP.
//!
//! A fault keeps what the engine reported as its [`Cause`]: the text logs print, and the driver's
//! error as the `source` of the chain.

pub use super::sql::Cause;
use super::sql::{self, Constraint, Fault};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The request breaks a rule of the store's data (a bad cursor, a value out of range).
    #[error("{0}")]
    InvalidRequest(String),
    #[error("not found")]
    NotFound,
    #[error("agent not found")]
    AgentNotFound,
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
    #[error("another move of the working directory won")]
    CwdConflict,
    #[error("{0}")]
    Forbidden(String),
    /// A state the write cannot be made in, with the stable code clients switch on.
    #[error("{1}")]
    Conflict(&'static str, String),
    /// The turn's lease was taken over: it no longer holds the session.
    #[error("the turn no longer holds this session")]
    StaleTurn,
    /// The writer has stopped (the process is shutting down).
    #[error("the server is shutting down")]
    ShuttingDown,
    /// The filesystem holding the database is full (or over quota).
    #[error("storage is full: {0}")]
    StorageFull(#[source] Cause),
    /// The database cannot be used right now (I/O error, read-only, locked, damaged).
    #[error("storage is unavailable: {0}")]
    StorageUnavailable(#[source] Cause),
    /// A write kept losing lock races with concurrent transactions after the store ran it again
    /// as many times as it does. Nothing was written.
    #[error("the database is busy with concurrent writes: {0}")]
    StorageBusy(#[source] Cause),
    /// A write lost a race on a uniqueness rule (another writer committed the same key first):
    /// the caller reads what won, or answers 409.
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
}

impl From<sql::Error> for Error {
    fn from(e: sql::Error) -> Self {
        match e {
            sql::Error::NoRows => Error::Storage(Cause::msg("the query returned no rows")),
            // A lost race on a key: the caller reads what won, or answers 409.
            sql::Error::Constraint(Constraint::Unique, detail) => Error::ConstraintRace(detail),
            sql::Error::Constraint(_, detail) => Error::Storage(detail),
            sql::Error::Fault(Fault::Full, detail) => Error::StorageFull(detail),
            sql::Error::Fault(Fault::Unavailable, detail) => Error::StorageUnavailable(detail),
            sql::Error::Fault(Fault::Busy, detail) => Error::StorageBusy(detail),
            sql::Error::Fault(Fault::Storage, detail) => Error::Storage(detail),
            sql::Error::Fault(Fault::Internal, detail) => Error::Internal(detail.to_string()),
            caller @ sql::Error::Caller(_) => match caller.into_caller::<Error>() {
                Ok(e) => e,
                Err(other) => Error::Internal(other.to_string()),
            },
        }
    }
}

/// A row closure's own error, carried through the SQL layer (see [`sql::Error::Caller`]).
impl From<Error> for sql::Error {
    fn from(e: Error) -> Self {
        sql::Error::Caller(Box::new(e))
    }
}

/// SQLite's failures as the SQL layer classifies them, for the statements the store runs on a
/// connection directly (pragmas, the writer's own transaction control).
impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::from(sql::Error::from(e))
    }
}

impl From<r2d2::Error> for Error {
    /// The read pool gave no connection in time: the database cannot be opened or is swamped.
    fn from(e: r2d2::Error) -> Self {
        Error::StorageUnavailable(Cause::of(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unique_violation_is_a_race_not_a_fault() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE t (k TEXT PRIMARY KEY, u TEXT UNIQUE); INSERT INTO t VALUES ('a', 'x');",
        )
        .unwrap();
        let dup_key = conn
            .execute("INSERT INTO t VALUES ('a', 'y')", [])
            .unwrap_err();
        let dup_unique = conn
            .execute("INSERT INTO t VALUES ('b', 'x')", [])
            .unwrap_err();
        for e in [dup_key, dup_unique] {
            let e = Error::from(e);
            assert!(matches!(e, Error::ConstraintRace(_)), "{e:?}");
            assert!(!e.is_storage_fault());
        }
    }

    #[test]
    fn a_fault_keeps_the_engines_error_as_its_source() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        let failed = conn
            .execute("INSERT INTO missing VALUES (1)", [])
            .unwrap_err();
        let text = failed.to_string();
        let e = Error::from(failed);
        assert!(matches!(e, Error::Storage(_)), "{e:?}");
        assert!(e.to_string().contains(&text), "{e}");
        // Error → Cause → rusqlite's error, whole.
        let cause = std::error::Error::source(&e).expect("the cause");
        assert_eq!(cause.to_string(), text);
        let engine = cause.source().expect("the engine's error");
        assert!(
            engine.downcast_ref::<rusqlite::Error>().is_some(),
            "{engine:?}"
        );
    }
}
