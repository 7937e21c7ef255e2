//! How the SQLite backend's failures become sessiond's errors: a full disk, a storage that cannot
//! be used now (I/O, read-only, busy, locked, damaged), a lost race on a uniqueness rule, or a
//! bug. Only the store sees SQLite's result codes.

use rusqlite::ErrorCode as C;

use crate::error::Error;

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        let detail = e.to_string();
        if let rusqlite::Error::SqliteFailure(f, _) = &e
            && matches!(
                f.extended_code,
                rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                    | rusqlite::ffi::SQLITE_CONSTRAINT_PRIMARYKEY
            )
        {
            return Error::ConstraintRace(detail);
        }
        match e.sqlite_error_code() {
            Some(C::DiskFull) => Error::StorageFull(detail),
            Some(
                C::SystemIoFailure
                | C::CannotOpen
                | C::ReadOnly
                | C::PermissionDenied
                | C::DatabaseBusy
                | C::DatabaseLocked
                | C::FileLockingProtocolFailed
                | C::NoLargeFileSupport
                | C::DatabaseCorrupt
                | C::NotADatabase
                | C::OutOfMemory,
            ) => Error::StorageUnavailable(detail),
            _ => Error::Storage(detail),
        }
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
