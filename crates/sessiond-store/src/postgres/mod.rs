//! The PostgreSQL backend's foundation: its URL, its connection pool and its migrator.
//!
//! [`Postgres::open`] parses a `postgres://` / `postgresql://` URL, brings the schema of
//! `migrations/postgres/` up to date (under an advisory lock, so that several processes may start
//! at once) and keeps a pool of connections; [`backend`] runs the store's operations on it.
//!
//! The driver is `tokio-postgres` with a `deadpool` pool: a small tree without compile-time query
//! checking (no database at build time) and LISTEN/NOTIFY as a stream of the connection's messages
//! (the fan-out's own connections, driven on the backend's runtime). A pooled connection is driven
//! by the blocking thread that uses it (`sql::pg::Connection`): a statement costs its round trip
//! and not four thread wake-ups besides.

pub(crate) mod backend;
pub(crate) mod committer;
pub(crate) mod error;
pub(crate) mod fanout;
mod migrate;
mod presence;
mod tls;
mod url;

use std::time::Duration;

use sessiond_sql::pg::{Connection, Manager, Pool, PoolError, Pooled};

pub use error::PostgresError;
pub use migrate::{Migrated, SCHEMA_VERSION, VERSION_TABLE, migrations};
pub use url::{
    DatabaseUrl, RootCert, SslMode, Tls, is_postgres_url, redact, scrub, without_password,
};

/// How the pool connects.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    /// Connections the pool keeps at most.
    pub max_connections: usize,
    /// How long a connection attempt may take (unless the URL sets `connect_timeout`).
    pub connect_timeout: Duration,
    /// How long a caller waits for a free connection before it is told the pool is exhausted.
    pub wait_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: 16,
            connect_timeout: Duration::from_secs(10),
            wait_timeout: Duration::from_secs(30),
        }
    }
}

/// An open, migrated PostgreSQL database.
pub struct Postgres {
    url: DatabaseUrl,
    tls: tls::Connector,
    pool: Pool,
    migrated: Migrated,
}

impl Postgres {
    /// Connects to `url`, applies the missing migrations and opens the pool. Fails with a typed
    /// error (bad URL, unreachable server, newer schema, failed migration) whose message names
    /// the target without its password.
    pub async fn open(url: &str, settings: &PoolSettings) -> Result<Postgres, PostgresError> {
        let url = DatabaseUrl::parse(url)?;
        let tls = tls::connector(url.tls()).map_err(|reason| PostgresError::Connect {
            target: url.target(),
            reason: url.scrub(&reason),
        })?;
        let mut config = url.config().clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(settings.connect_timeout);
        }
        config.application_name("sessiond");

        // The migrator's connection is its own: the advisory lock belongs to it and goes with it.
        let mut client = connect(&url, &config, &tls).await?;
        let migrated = migrate::migrate(&mut client).await?;
        drop(client);

        let manager = {
            let tls = tls.clone();
            Manager::new(move || Connection::connect(&config, tls.clone()))
        };
        let pool = Pool::builder(manager)
            .max_size(settings.max_connections)
            .runtime(deadpool::Runtime::Tokio1)
            .create_timeout(Some(settings.connect_timeout))
            .wait_timeout(Some(settings.wait_timeout))
            .build()
            .map_err(|e| PostgresError::Query(format!("cannot build the connection pool: {e}")))?;
        let this = Postgres {
            url,
            tls,
            pool,
            migrated,
        };
        // A pooled connection works (the migrator's did; this checks the pool's configuration).
        drop(this.client().await?);
        Ok(this)
    }

    /// What the migrator did at open.
    pub fn migrated(&self) -> &Migrated {
        &self.migrated
    }

    /// The connection pool.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The connection settings (for the connections outside the pool: the listener, the relay).
    pub(crate) fn config(&self) -> tokio_postgres::Config {
        let mut config = self.url.config().clone();
        config.application_name("sessiond");
        config
    }

    /// TLS as the URL asks, for the connections outside the pool.
    pub(crate) fn tls(&self) -> tls::Connector {
        self.tls.clone()
    }

    /// The URL, printable (no password).
    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// A connection from the pool (to be used on a blocking thread: see [`Connection`]).
    pub(crate) async fn client(&self) -> Result<Pooled, PostgresError> {
        self.pool.get().await.map_err(|e| {
            let reason = match &e {
                PoolError::Backend(e) => e.to_string(),
                other => other.to_string(),
            };
            PostgresError::Connect {
                target: self.url.target(),
                reason: self.url.scrub(&hint(&self.url, &e, reason)),
            }
        })
    }

    /// The schema version the database has now.
    pub async fn schema_version(&self) -> Result<i64, PostgresError> {
        // A connection of its own: the pool's are driven by blocking threads, not by async code.
        let client = connect(&self.url, &self.config(), &self.tls).await?;
        migrate::current_version(&client).await
    }
}

/// One connection outside the pool, its I/O driven by a task of its own until it closes.
async fn connect(
    url: &DatabaseUrl,
    config: &tokio_postgres::Config,
    tls: &tls::Connector,
) -> Result<tokio_postgres::Client, PostgresError> {
    let (client, connection) =
        config
            .connect(tls.clone())
            .await
            .map_err(|e| PostgresError::Connect {
                target: url.target(),
                reason: url.scrub(&with_hint(url, &e, error::describe(&e))),
            })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %error::describe(&e), "PostgreSQL connection closed");
        }
    });
    Ok(client)
}

/// A pool error's reason, with [`with_hint`] for a refusal by the server.
fn hint(url: &DatabaseUrl, e: &PoolError, reason: String) -> String {
    match e {
        PoolError::Backend(sessiond_sql::pg::ConnectError::Postgres(e)) => {
            with_hint(url, e, reason)
        }
        _ => reason,
    }
}

/// `reason`, and what sessiond's side may have to do with it: a server that refuses a plain
/// connection (pg_hba.conf's `hostssl` only) says "no encryption", which reads as a server fault.
/// A certificate the TLS check refused is said as the check says it.
fn with_hint(url: &DatabaseUrl, e: &tokio_postgres::Error, reason: String) -> String {
    if let Some(refusal) = tls::refusal_in(e) {
        return format!("the TLS handshake failed: {refusal}");
    }
    let refused =
        e.code() == Some(&tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION);
    if refused && url.tls().mode == SslMode::Disable {
        format!(
            "{reason}; the server may accept only TLS connections, and the URL says sslmode=disable"
        )
    } else {
        reason
    }
}
