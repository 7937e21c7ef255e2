//! What can go wrong between sessiond and its PostgreSQL database, typed so that a caller can tell
//! a configuration mistake from an unreachable server or a schema it must not touch. Messages
//! never carry the URL's password.

/// An error of the PostgreSQL backend.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    /// The URL cannot name a PostgreSQL database (wrong scheme, bad port, unknown option…).
    #[error("invalid database URL {url}: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The server could not be reached or refused the connection (network, authentication,
    /// missing database).
    #[error("cannot connect to PostgreSQL at {target}: {reason}")]
    Connect { target: String, reason: String },
    /// The database was migrated by a newer sessiond; this one must not write to it.
    #[error(
        "the database has schema version {found}, newer than this sessiond understands \
         ({supported}); run a newer sessiond or restore a backup"
    )]
    SchemaNewer { found: i64, supported: i64 },
    /// A migration failed; its transaction was rolled back and the version stays where it was.
    #[error("PostgreSQL migration {version} failed: {reason}")]
    Migration { version: i64, reason: String },
    /// A statement failed outside a migration.
    #[error("PostgreSQL: {0}")]
    Query(String),
}

/// The text of a driver error (the SQL layer's, so that both say the same).
pub(crate) use sessiond_sql::pg::describe;
