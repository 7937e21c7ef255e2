//! How the SQL layer's failures become sessiond's errors: a full disk, a storage that cannot be
//! used now (I/O, read-only, busy, locked, damaged), a lost race on a uniqueness rule, or a bug.
//! The layer classifies the engines' result codes; this is the one place they are mapped.

use super::sql::{self, Constraint, Fault};
use crate::error::Error;

impl From<sql::Error> for Error {
    fn from(e: sql::Error) -> Self {
        match e {
            sql::Error::NoRows => Error::Storage("the query returned no rows".into()),
            // A lost race on a key: the caller reads what won, or answers 409.
            sql::Error::Constraint(Constraint::Unique, detail) => Error::ConstraintRace(detail),
            sql::Error::Constraint(_, detail) => Error::Storage(detail),
            sql::Error::Fault(Fault::Full, detail) => Error::StorageFull(detail),
            sql::Error::Fault(Fault::Unavailable, detail) => Error::StorageUnavailable(detail),
            sql::Error::Fault(Fault::Busy, detail) => Error::StorageBusy(detail),
            sql::Error::Fault(Fault::Storage, detail) => Error::Storage(detail),
            sql::Error::Fault(Fault::Internal, detail) => Error::Internal(detail),
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
        Error::StorageUnavailable(e.to_string())
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
}
