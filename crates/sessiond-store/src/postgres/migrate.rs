//! The PostgreSQL schema: the files of `migrations/postgres/` (one twin per SQLite migration in
//! `migrations/`, same version number), compiled in and applied in order when sessiond starts.
//!
//! Several processes may start at once on one database. The migrator holds a session-level
//! advisory lock on its own connection while it reads the version and applies what is missing, so
//! the others wait and then find nothing to do; each migration runs in one transaction together
//! with the row that records its version, so a failure leaves the version where it was. A
//! database whose recorded version is newer than this binary's is refused before anything is
//! written.

use rust_embed::RustEmbed;
use tokio_postgres::Client;

use super::error::{PostgresError, describe};

#[derive(RustEmbed)]
#[folder = "../../migrations/postgres/"]
struct Migrations;

/// The advisory lock key migrations are applied under ("sessiond" in ASCII): one key for every
/// sessiond sharing the database.
const MIGRATION_LOCK: i64 = 0x7365_7373_696f_6e64;

/// The table that records which migrations were applied (one row per version). It is the
/// migrator's own and is not part of any migration.
pub const VERSION_TABLE: &str = "schema_migrations";

/// `(version, sql)` in ascending order; file names start with their version (`0001_init.sql`).
pub fn migrations() -> Vec<(i64, String)> {
    let mut out: Vec<(i64, String)> = Migrations::iter()
        .filter(|name| name.ends_with(".sql"))
        .filter_map(|name| {
            let version = name.split('_').next()?.parse::<i64>().ok()?;
            let file = Migrations::get(&name)?;
            Some((version, String::from_utf8_lossy(&file.data).into_owned()))
        })
        .collect();
    out.sort_by_key(|(v, _)| *v);
    out
}

/// The schema version this binary writes on PostgreSQL.
pub static SCHEMA_VERSION: std::sync::LazyLock<i64> =
    std::sync::LazyLock::new(|| migrations().last().map(|(v, _)| *v).unwrap_or(0));

/// What one migrator did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migrated {
    /// The version the database had before.
    pub from: i64,
    /// The versions this migrator applied (none when another process had already done it).
    pub applied: Vec<i64>,
}

/// The recorded version (0 for a database sessiond never migrated).
pub(crate) async fn current_version(client: &Client) -> Result<i64, PostgresError> {
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&VERSION_TABLE])
        .await
        .map_err(|e| PostgresError::Query(describe(&e)))?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let row = client
        .query_one(
            &format!("SELECT COALESCE(max(version), 0) FROM {VERSION_TABLE}"),
            &[],
        )
        .await
        .map_err(|e| PostgresError::Query(describe(&e)))?;
    Ok(row.get(0))
}

/// Applies the missing migrations under the advisory lock. `client` must be a connection of its
/// own (not a pooled one): the lock belongs to the session, and is released here or, if this
/// future is dropped half-way, when the connection closes.
pub(crate) async fn migrate(client: &mut Client) -> Result<Migrated, PostgresError> {
    let query = |e: tokio_postgres::Error| PostgresError::Query(describe(&e));
    // The migrations' `IF NOT EXISTS` notices say nothing an operator needs.
    client
        .batch_execute("SET client_min_messages = warning")
        .await
        .map_err(query)?;
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(query)?;
    let result = migrate_locked(client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    let migrated = result?;
    unlocked.map_err(query)?;
    Ok(migrated)
}

async fn migrate_locked(client: &mut Client) -> Result<Migrated, PostgresError> {
    let found = current_version(client).await?;
    let supported = *SCHEMA_VERSION;
    if found > supported {
        return Err(PostgresError::SchemaNewer { found, supported });
    }
    let mut applied = Vec::new();
    for (version, sql) in migrations() {
        if version <= found {
            continue;
        }
        let failed = |e: tokio_postgres::Error| PostgresError::Migration {
            version,
            reason: describe(&e),
        };
        let tx = client.transaction().await.map_err(failed)?;
        tx.batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (
                 version     BIGINT PRIMARY KEY,
                 applied_at  BIGINT NOT NULL
             );"
        ))
        .await
        .map_err(failed)?;
        tx.batch_execute(&sql).await.map_err(failed)?;
        tx.execute(
            &format!(
                "INSERT INTO {VERSION_TABLE} (version, applied_at) \
                 VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
            ),
            &[&version],
        )
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
        tracing::info!(version, "applied PostgreSQL migration");
        applied.push(version);
    }
    Ok(Migrated {
        from: found,
        applied,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Versions are 1, 2, 3… with none twice, and every SQLite migration has its twin here (and
    /// no twin lacks its SQLite migration): one version means one schema on both backends.
    #[test]
    fn every_sqlite_migration_has_its_postgres_twin() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../migrations");
        let names = |dir: &str| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".sql"))
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(&format!("{dir}/postgres")), names(dir));
        let versions: Vec<i64> = migrations().iter().map(|(v, _)| *v).collect();
        let expected: Vec<i64> = (1..=versions.len() as i64).collect();
        assert_eq!(versions, expected);
        assert_eq!(*SCHEMA_VERSION, *crate::SCHEMA_VERSION);
    }
}
