//! Schema migrations: the files of `migrations/`, compiled in and applied in order.
//!
//! The applied version is SQLite's `user_version`. A database written by a newer sessiond is
//! refused rather than half-understood.

use rusqlite::Connection;
use rust_embed::RustEmbed;

use crate::error::{Cause, Error, Result};

#[derive(RustEmbed)]
#[folder = "../../migrations/"]
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
        return Err(Error::Storage(
            format!(
                "the database has schema version {found}, newer than this sessiond understands ({}); \
                 run a newer sessiond or restore a backup",
                *SCHEMA_VERSION
            )
            .into(),
        ));
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
        tx.execute_batch(&sql).map_err(|e| {
            Error::Storage(Cause::new(format!("migration {version} failed: {e}"), e))
        })?;
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

    /// A database whose prompts were one document per session gets one search row per prompt,
    /// taken from the prompt events, and a title index without them; search finds the same
    /// sessions by their titles and by each of their prompts.
    #[test]
    fn prompts_move_to_one_search_row_each() {
        let conn = Connection::open_in_memory().unwrap();
        for (version, sql) in migrations().iter().filter(|(v, _)| *v <= 9) {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", version).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO workspaces (id, slug, name, created_at) VALUES ('w', 'w', 'W', 0);
             INSERT INTO agents (id, workspace_id, slug, name, created_at) VALUES ('a', 'w', 'a', 'A', 0);
             INSERT INTO sessions (pk, id, workspace_id, agent_id, user_id, title, title_origin,
                 title_status, turn_status, bucket, created_at, updated_at)
             VALUES (1, 's1', 'w', 'a', 'u', 'Apple pie', 'manual', 'complete', 'complete', 'done', 0, 0),
                    (2, 's2', 'w', 'a', 'u', 'Tea', 'manual', 'complete', 'complete', 'done', 0, 0);
             INSERT INTO events (session_pk, seq, type, body, created_at) VALUES
               (1, 1, 'session_created', '{\"type\":\"session_created\"}', 0),
               (1, 2, 'prompt_submitted', '{\"type\":\"prompt_submitted\",\"prompt\":\"bake a pie\\nwith apples\"}', 0),
               (1, 3, 'note_submitted', '{\"type\":\"note_submitted\",\"note\":\"walnut\"}', 0),
               (1, 4, 'prompt_submitted', '{\"type\":\"prompt_submitted\",\"prompt\":\"and a crumble\"}', 0),
               (2, 1, 'prompt_submitted', '{\"type\":\"prompt_submitted\",\"prompt\":\"green tea\"}', 0);
             INSERT INTO session_search (rowid, title, prompts) VALUES
               (1, 'Apple pie', char(10) || 'bake a pie' || char(10) || 'with apples' || char(10) || 'and a crumble'),
               (2, 'Tea', char(10) || 'green tea');",
        )
        .unwrap();
        migrate(&conn).unwrap();
        let rows: Vec<(i64, String)> = conn
            .prepare("SELECT rowid, prompts FROM session_search_prompts ORDER BY rowid")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        let key = |pk, seq| super::super::prompt_rows::prompt_search_key(pk, seq).unwrap();
        assert_eq!(
            rows,
            [
                (key(1, 2), "bake a pie\nwith apples".to_owned()),
                (key(1, 4), "and a crumble".to_owned()),
                (key(2, 1), "green tea".to_owned()),
            ]
        );
        let titles: Vec<(i64, String)> = conn
            .prepare("SELECT rowid, * FROM session_search ORDER BY rowid")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(titles, [(1, "Apple pie".into()), (2, "Tea".into())]);
        let found = |words: &str| {
            let f = super::super::search::ListFilter {
                fts_query: Some(words.into()),
                limit: 10,
                ..Default::default()
            };
            let (rows, _) =
                super::super::search::list_sessions(&crate::sql::Db::sqlite(&conn), "w", "u", &f)
                    .unwrap();
            rows.into_iter().map(|r| r.id).collect::<Vec<_>>()
        };
        assert_eq!(found("apple"), ["s1"]);
        assert_eq!(found("crumble"), ["s1"]);
        assert_eq!(found("\"pie\" \"apples\""), ["s1"]);
        assert_eq!(found("tea"), ["s2"]);
        assert!(found("walnut").is_empty(), "notes are not prompts");
    }

    /// Both full-text indexes are rebuilt with a prefix index, their rows and rowids kept, and
    /// a prefix query finds what it found before.
    #[test]
    fn search_indexes_get_a_prefix_index_and_keep_their_rows() {
        let conn = Connection::open_in_memory().unwrap();
        for (version, sql) in migrations().iter().filter(|(v, _)| *v <= 12) {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", version).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO session_search (rowid, title) VALUES (1, 'Deploy the app'), (7, 'Tea');
             INSERT INTO session_search_prompts (rowid, prompts) VALUES
               (4294967298, 'bake a pie'), (30064771073, 'deployment notes');",
        )
        .unwrap();
        migrate(&conn).unwrap();
        let rows = |sql: &str| -> Vec<(i64, String)> {
            conn.prepare(sql)
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<std::result::Result<_, _>>()
                .unwrap()
        };
        assert_eq!(
            rows("SELECT rowid, title FROM session_search ORDER BY rowid"),
            [(1, "Deploy the app".into()), (7, "Tea".into())]
        );
        assert_eq!(
            rows(
                "SELECT rowid, prompts FROM session_search_prompts WHERE session_search_prompts MATCH '\"deplo\"*'"
            ),
            [(30064771073, "deployment notes".into())]
        );
        assert_eq!(
            rows("SELECT rowid, title FROM session_search WHERE session_search MATCH '\"deplo\"*'"),
            [(1, "Deploy the app".into())]
        );
        for table in ["session_search", "session_search_prompts"] {
            let sql: String = conn
                .query_row(
                    "SELECT sql FROM sqlite_master WHERE name = ?1",
                    [table],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(
                sql.contains("prefix = '1 2 3 4 5 6 7 8 9 10 11 12'"),
                "{sql}"
            );
        }
    }

    /// Events recorded before sequence ids were per workspace are numbered 1, 2, … within their
    /// workspace in the order they were recorded, and each workspace's counter goes on from its
    /// last one.
    #[test]
    fn agentex_event_sequence_ids_are_numbered_per_workspace() {
        let conn = Connection::open_in_memory().unwrap();
        for (version, sql) in migrations().iter().filter(|(v, _)| *v <= 13) {
            conn.execute_batch(sql).unwrap();
            conn.pragma_update(None, "user_version", version).unwrap();
        }
        conn.execute_batch(
            "INSERT INTO workspaces (id, slug, name, created_at) VALUES ('w1', 'w1', 'W1', 0),
                 ('w2', 'w2', 'W2', 0), ('w3', 'w3', 'W3', 0);
             INSERT INTO agents (id, workspace_id, slug, name, created_at)
             VALUES ('a1', 'w1', 'a', 'A', 0), ('a2', 'w2', 'a', 'A', 0);
             INSERT INTO sessions (pk, id, workspace_id, agent_id, user_id, title, title_origin,
                 title_status, turn_status, bucket, created_at, updated_at)
             VALUES (1, 's1', 'w1', 'a1', 'u', 't', 'manual', 'complete', 'complete', 'done', 0, 0),
                    (2, 's2', 'w2', 'a2', 'u', 't', 'manual', 'complete', 'complete', 'done', 0, 0),
                    (3, 's3', 'w1', 'a1', 'u', 't', 'manual', 'complete', 'complete', 'done', 0, 0);
             INSERT INTO agentex_events (sequence_id, id, session_pk, agent_id, created_at) VALUES
               (10, 'e1', 1, 'a1', 0), (11, 'e2', 2, 'a2', 0), (12, 'e3', 3, 'a1', 0),
               (13, 'e4', 2, 'a2', 0), (14, 'e5', 1, 'a1', 0);",
        )
        .unwrap();
        migrate(&conn).unwrap();
        let numbered: Vec<(String, i64)> = conn
            .prepare("SELECT id, sequence_id FROM agentex_events ORDER BY id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        let expected = [("e1", 1), ("e2", 1), ("e3", 2), ("e4", 2), ("e5", 3)];
        assert_eq!(
            numbered,
            expected.map(|(id, n)| (id.to_owned(), n)).to_vec()
        );
        let counters: Vec<(String, i64)> = conn
            .prepare("SELECT workspace_id, value FROM workspace_counters ORDER BY workspace_id")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(counters, [("w1".to_owned(), 3), ("w2".to_owned(), 2)]);
    }
}
