//! Schema migrations: the files of `migrations/`, compiled in and applied in order.
//!
//! The applied version is SQLite's `user_version`. A database written by a newer sessiond is
//! refused rather than half-understood.

use rusqlite::Connection;
use rust_embed::RustEmbed;

use crate::error::{Error, Result};

#[derive(RustEmbed)]
#[folder = "migrations/"]
struct Migrations;

/// `(version, sql)` in ascending order; file names start with their version (`0001_init.sql`).
/// Only the folder's own `.sql` files are SQLite's; subfolders belong to other backends.
fn migrations() -> Vec<(i64, String)> {
    let mut out: Vec<(i64, String)> = Migrations::iter()
        .filter(|name| !name.contains('/') && name.ends_with(".sql"))
        .filter_map(|name| {
            let version = name.split('_').next()?.parse::<i64>().ok()?;
            let file = Migrations::get(&name)?;
            Some((version, String::from_utf8_lossy(&file.data).into_owned()))
        })
        .collect();
    out.sort_by_key(|(v, _)| *v);
    out
}

/// The schema version this binary writes.
pub static SCHEMA_VERSION: std::sync::LazyLock<i64> =
    std::sync::LazyLock::new(|| migrations().last().map(|(v, _)| *v).unwrap_or(0));

fn current_version(conn: &Connection) -> Result<i64> {
    Ok(conn.pragma_query_value(None, "user_version", |r| r.get(0))?)
}

pub fn check_version(conn: &Connection) -> Result<i64> {
    let found = current_version(conn)?;
    if found > *SCHEMA_VERSION {
        return Err(Error::Storage(format!(
            "the database has schema version {found}, newer than this sessiond understands ({}); \
             run a newer sessiond or restore a backup",
            *SCHEMA_VERSION
        )));
    }
    Ok(found)
}

pub fn migrate(conn: &Connection) -> Result<()> {
    let found = check_version(conn)?;
    for (version, sql) in migrations() {
        if version <= found {
            continue;
        }
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(&sql)
            .map_err(|e| Error::Storage(format!("migration {version} failed: {e}")))?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
        tracing::info!(version, "applied migration");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Versions are 1, 2, 3… with none twice: two files of one version (from branches that each
    /// added one) would leave databases that applied one of them without the other.
    #[test]
    fn migration_versions_are_unique_and_contiguous() {
        let versions: Vec<i64> = migrations().iter().map(|(v, _)| *v).collect();
        let expected: Vec<i64> = (1..=versions.len() as i64).collect();
        assert_eq!(versions, expected, "migration files: {:?}", {
            let mut names: Vec<String> = Migrations::iter().map(|n| n.into_owned()).collect();
            names.sort();
            names
        });
    }

    /// A database from before the root agent's rename gets the new name; a name someone chose
    /// stays.
    #[test]
    fn the_root_agent_named_drive_is_renamed() {
        let conn = Connection::open_in_memory().unwrap();
        let all = migrations();
        for (version, sql) in all.iter().filter(|(v, _)| *v <= 2) {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", version).unwrap();
        }
        for (ws, name) in [("w1", "Drive"), ("w2", "Everything")] {
            conn.execute(
                "INSERT INTO workspaces (id, slug, name, created_at) VALUES (?1, ?1, ?1, 0)",
                [ws],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO agents (id, workspace_id, slug, name, anchor, created_at)
                 VALUES (?1 || '-root', ?1, 'root', ?2, '', 0)",
                [ws, name],
            )
            .unwrap();
        }
        migrate(&conn).unwrap();
        let names: Vec<String> = conn
            .prepare("SELECT name FROM agents ORDER BY workspace_id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(names, ["Workspace agent", "Everything"]);
    }
}
