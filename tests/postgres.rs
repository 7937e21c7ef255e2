//! The PostgreSQL backend's foundation against a real PostgreSQL server (`common/postgres.rs`: a
//! throwaway cluster, a database per test): the schema is the SQLite schema's twin, the migrator
//! brings a fresh database up to date exactly once even when three processes start together,
//! refuses a newer schema, and a bad URL or an unreachable server gets a clear error that shows
//! no password.
//!
//! Without PostgreSQL these tests fail when `CI` is set and print a notice otherwise.

#![cfg(feature = "postgres")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::postgres::{Database, database};
use sessiond::store::postgres::{self, PoolSettings, Postgres, PostgresError};

/// A column: name, declared type (normalised to the PostgreSQL type it must be), NOT NULL.
type Column = (String, String, bool);

/// An index: its columns (with ` DESC` where descending, or the expression), whether it is
/// unique, and its predicate (normalised) if partial.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Index {
    columns: Vec<String>,
    unique: bool,
    predicate: Option<String>,
}

/// A foreign key: its columns, the table and columns it references, what a delete does.
type ForeignKey = (Vec<String>, String, Vec<String>, String);

#[derive(Debug, Default, PartialEq, Eq)]
struct Table {
    columns: Vec<Column>,
    primary_key: Vec<String>,
    /// Unique constraints and unique indexes (constraint names differ between the engines).
    unique: BTreeSet<Index>,
    /// Other indexes, by name.
    indexes: BTreeMap<String, Index>,
    foreign_keys: BTreeSet<ForeignKey>,
}

/// `(a = 1)`, `a = 1`, `(a <> 'x'::text)`: one spelling for both engines' predicate texts.
fn normalise_predicate(p: &str) -> String {
    let mut s = p.replace("::text", "").replace("::bigint", "");
    s.retain(|c| c != '(' && c != ')');
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// An index key as both engines are compared on: a column name or an expression (normalised
/// like a predicate), ` DESC` when descending.
fn index_column(key: &str, descending: bool) -> String {
    let key = normalise_predicate(key);
    if descending {
        format!("{key} DESC")
    } else {
        key
    }
}

/// The key terms of a CREATE INDEX statement (`ON t (a, (CASE … END), b DESC)`), each without
/// its ASC/DESC.
fn index_terms(sql: &str) -> Vec<String> {
    let open = sql
        .find(" ON ")
        .and_then(|on| sql[on..].find('(').map(|p| on + p))
        .unwrap();
    let (mut depth, mut quoted, mut term, mut terms) = (0, false, String::new(), Vec::new());
    for c in sql[open + 1..].chars() {
        match c {
            '\'' => quoted = !quoted,
            '(' if !quoted => depth += 1,
            ')' if !quoted && depth == 0 => break,
            ')' if !quoted => depth -= 1,
            ',' if !quoted && depth == 0 => {
                terms.push(std::mem::take(&mut term));
                continue;
            }
            _ => {}
        }
        term.push(c);
    }
    terms.push(term);
    terms
        .into_iter()
        .map(|t| {
            let t = t.trim();
            let upper = t.to_uppercase();
            let cut = [" DESC", " ASC"]
                .iter()
                .find(|s| upper.ends_with(*s))
                .map_or(t.len(), |s| t.len() - s.len());
            t[..cut].trim().to_owned()
        })
        .collect()
}

/// The PostgreSQL type a SQLite column's declared type is expressed as (0001_init.sql's rules),
/// with the one deliberate exception: the e-mail address is case-insensitive (COLLATE NOCASE).
fn expected_pg_type(table: &str, column: &str, declared: &str) -> String {
    match (table, column, declared.to_uppercase().as_str()) {
        ("users", "email", "TEXT") => "citext".into(),
        (_, _, "INTEGER") => "bigint".into(),
        (_, _, "TEXT") => "text".into(),
        (_, _, "BLOB") => "bytea".into(),
        (_, _, other) => format!("unmapped SQLite type {other}"),
    }
}

/// The FTS5 tables (their names start with `session_search`) and the columns that key their
/// PostgreSQL twins: the session's title, and each prompt by its session and seq.
const FTS_TABLES: [(&str, &[&str]); 2] = [
    ("session_search", &["session_pk"]),
    ("session_search_prompts", &["session_pk", "seq"]),
];

/// Tables SQLite has and PostgreSQL deliberately does without: the prompt search backlog
/// (`prompt_backlog`, migration 0022), as each PostgreSQL write indexes its prompts itself.
const SQLITE_ONLY: [&str; 1] = ["prompt_backlog"];

/// Every table of a SQLite database migrated by sessiond itself, except SQLite's own and the
/// FTS5 tables with their shadow tables (returned apart: name and columns).
fn sqlite_schema(path: &Path) -> (BTreeMap<String, Table>, BTreeMap<String, Vec<String>>) {
    // The store migrates the file as it opens it; its rows are then read on a connection of the
    // test's own.
    let store =
        sessiond::store::Store::open(path, &Default::default(), sessiond::bus::Bus::new(16, 16))
            .unwrap();
    store.close();
    let conn = rusqlite::Connection::open(path).unwrap();
    let strings = |sql: &str, arg: &str| -> Vec<Vec<String>> {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        stmt.query_map([arg], |r| {
            (0..n)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        rusqlite::types::ValueRef::Null => String::new(),
                        rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                        rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                        other => format!("{other:?}"),
                    })
                })
                .collect()
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    };
    let fts_columns: BTreeMap<String, Vec<String>> = FTS_TABLES
        .iter()
        .map(|(name, _)| {
            let columns = strings("SELECT name FROM pragma_table_info(?1) ORDER BY cid", name)
                .into_iter()
                .map(|r| r[0].clone())
                .collect();
            (name.to_string(), columns)
        })
        .collect();
    let mut tables = BTreeMap::new();
    let names = strings(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' \
         AND name NOT LIKE ?1 || '%'",
        "session_search",
    );
    for name in names.into_iter().map(|r| r[0].clone()) {
        let mut t = Table::default();
        let mut pk: Vec<(i64, String)> = Vec::new();
        for c in strings(
            "SELECT name, type, \"notnull\", pk FROM pragma_table_info(?1) ORDER BY cid",
            &name,
        ) {
            let pk_position: i64 = c[3].parse().unwrap();
            // A PRIMARY KEY column is NOT NULL in PostgreSQL; SQLite lets rowid tables' text keys
            // be NULL (a historical quirk no sessiond write relies on).
            let not_null = c[2] == "1" || pk_position > 0;
            t.columns.push((
                c[0].clone(),
                expected_pg_type(&name, &c[0], &c[1]),
                not_null,
            ));
            if pk_position > 0 {
                pk.push((pk_position, c[0].clone()));
            }
        }
        pk.sort();
        t.primary_key = pk.into_iter().map(|(_, c)| c).collect();
        for ix in strings(
            "SELECT name, \"unique\", origin, partial FROM pragma_index_list(?1)",
            &name,
        ) {
            if ix[2] == "pk" {
                continue;
            }
            // CREATE INDEX text (NULL for the indexes behind UNIQUE constraints).
            let sql = strings("SELECT sql FROM sqlite_schema WHERE name = ?1", &ix[0])
                .pop()
                .and_then(|r| r.into_iter().next())
                .unwrap_or_default();
            let columns: Vec<String> = strings(
                "SELECT name, \"desc\", cid FROM pragma_index_xinfo(?1) WHERE key = 1 \
                 ORDER BY seqno",
                &ix[0],
            )
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                // cid -2: an expression, which only the CREATE INDEX text holds.
                let key = if r[2] == "-2" {
                    index_terms(&sql)[i].clone()
                } else {
                    r[0].clone()
                };
                index_column(&key, r[1] == "1")
            })
            .collect();
            let predicate = (ix[3] == "1").then(|| {
                let at = sql.to_uppercase().rfind(" WHERE ").unwrap();
                normalise_predicate(&sql[at + 7..])
            });
            let index = Index {
                columns,
                unique: ix[1] == "1",
                predicate,
            };
            if index.unique {
                t.unique.insert(index);
            } else {
                t.indexes.insert(ix[0].clone(), index);
            }
        }
        let mut fks: BTreeMap<String, ForeignKey> = BTreeMap::new();
        for fk in strings(
            "SELECT id, \"from\", \"table\", \"to\", on_delete FROM pragma_foreign_key_list(?1) \
             ORDER BY id, seq",
            &name,
        ) {
            let entry = fks
                .entry(fk[0].clone())
                .or_insert_with(|| (Vec::new(), fk[2].clone(), Vec::new(), fk[4].to_uppercase()));
            entry.0.push(fk[1].clone());
            entry.2.push(fk[3].clone());
        }
        t.foreign_keys = fks.into_values().collect();
        tables.insert(name, t);
    }
    (tables, fts_columns)
}

/// The same description of every table of the PostgreSQL database (in its current schema).
async fn pg_schema(client: &tokio_postgres::Client) -> BTreeMap<String, Table> {
    let mut tables: BTreeMap<String, Table> = BTreeMap::new();
    for r in client
        .query(
            "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull
             FROM pg_class c
             JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
             WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
             ORDER BY c.relname, a.attnum",
            &[],
        )
        .await
        .unwrap()
    {
        tables
            .entry(r.get(0))
            .or_default()
            .columns
            .push((r.get(1), r.get(2), r.get(3)));
    }
    for r in client
        .query(
            "SELECT t.relname, i.relname, x.indisprimary, x.indisunique,
                    pg_get_expr(x.indpred, x.indrelid),
                    ARRAY(SELECT pg_get_indexdef(x.indexrelid, k, true)
                                 || CASE WHEN x.indoption[k - 1] & 1 = 1 THEN ' DESC' ELSE '' END
                          FROM generate_series(1, x.indnkeyatts) k ORDER BY k),
                    am.amname
             FROM pg_index x
             JOIN pg_class t ON t.oid = x.indrelid
             JOIN pg_class i ON i.oid = x.indexrelid
             JOIN pg_am am ON am.oid = i.relam
             WHERE t.relnamespace = current_schema()::regnamespace AND t.relkind = 'r'",
            &[],
        )
        .await
        .unwrap()
    {
        let table: String = r.get(0);
        let name: String = r.get(1);
        let primary: bool = r.get(2);
        let predicate: Option<String> = r.get(4);
        let mut columns: Vec<String> = r
            .get::<_, Vec<String>>(5)
            .iter()
            .map(|c| match c.strip_suffix(" DESC") {
                Some(key) => index_column(key, true),
                None => index_column(c, false),
            })
            .collect();
        let method: String = r.get(6);
        if method != "btree" {
            columns.insert(0, format!("USING {method}"));
        }
        let t = tables.entry(table).or_default();
        let index = Index {
            columns,
            unique: r.get(3),
            predicate: predicate.as_deref().map(normalise_predicate),
        };
        if primary {
            t.primary_key = index.columns;
        } else if index.unique {
            t.unique.insert(index);
        } else {
            t.indexes.insert(name, index);
        }
    }
    for r in client
        .query(
            "SELECT t.relname,
                    ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u(n, i)
                          JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.n
                          ORDER BY u.i),
                    f.relname,
                    ARRAY(SELECT a.attname FROM unnest(k.confkey) WITH ORDINALITY u(n, i)
                          JOIN pg_attribute a ON a.attrelid = k.confrelid AND a.attnum = u.n
                          ORDER BY u.i),
                    CASE k.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'a' THEN 'NO ACTION'
                         WHEN 'r' THEN 'RESTRICT' WHEN 'n' THEN 'SET NULL'
                         WHEN 'd' THEN 'SET DEFAULT' END
             FROM pg_constraint k
             JOIN pg_class t ON t.oid = k.conrelid
             JOIN pg_class f ON f.oid = k.confrelid
             WHERE k.contype = 'f' AND t.relnamespace = current_schema()::regnamespace",
            &[],
        )
        .await
        .unwrap()
    {
        let table: String = r.get(0);
        tables.entry(table).or_default().foreign_keys.insert((
            r.get(1),
            r.get(2),
            r.get(3),
            r.get(4),
        ));
    }
    tables
}

/// A client of the test database, outside sessiond.
async fn client(db: &Database) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&db.url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", db.url));
    tokio::spawn(connection);
    client
}

fn settings() -> PoolSettings {
    PoolSettings {
        max_connections: 4,
        ..PoolSettings::default()
    }
}

/// Every SQLite table has its PostgreSQL twin with the same columns in the same order, types,
/// nullability, primary key, unique constraints, indexes and foreign keys; the FTS5 table's twin
/// holds the same columns keyed by the session, plus the tsvector under a GIN index.
#[tokio::test(flavor = "multi_thread")]
async fn the_postgres_schema_is_the_sqlite_schema() {
    let Some(db) = database("parity") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (mut sqlite, fts_columns) = sqlite_schema(&tmp.path().join("sessiond.db"));
    assert!(
        sqlite.contains_key("sessions") && sqlite.len() > 20,
        "{sqlite:?}"
    );

    let pg = Postgres::open(&db.url, &settings()).await.unwrap();
    drop(pg);
    let mut pg_tables = pg_schema(&client(&db).await).await;
    let versions = pg_tables
        .remove(postgres::VERSION_TABLE)
        .expect("version table");
    assert_eq!(versions.primary_key, ["version"]);

    for (name, key) in FTS_TABLES {
        let search = pg_tables.remove(name).expect(name);
        let search_columns: Vec<&str> = search.columns.iter().map(|c| c.0.as_str()).collect();
        let columns = &fts_columns[name];
        assert!(!columns.is_empty(), "columns of the FTS5 table {name}");
        let mut expected = key.to_vec();
        expected.extend(columns.iter().map(String::as_str));
        expected.push("document");
        assert_eq!(search_columns, expected, "columns of {name}");
        assert_eq!(search.primary_key, key, "primary key of {name}");
        assert_eq!(
            search.foreign_keys,
            BTreeSet::from([(
                vec!["session_pk".to_owned()],
                "sessions".to_owned(),
                vec!["pk".to_owned()],
                "CASCADE".to_owned()
            )]),
            "foreign keys of {name}"
        );
        assert_eq!(
            search
                .indexes
                .get(&format!("{name}_document"))
                .map(|i| &i.columns),
            Some(&vec!["USING gin".to_owned(), "document".to_owned()]),
            "indexes of {name}"
        );
    }

    for name in SQLITE_ONLY {
        assert!(sqlite.remove(name).is_some(), "{name} is SQLite's");
    }
    let sqlite_names: BTreeSet<&String> = sqlite.keys().collect();
    let pg_names: BTreeSet<&String> = pg_tables.keys().collect();
    assert_eq!(
        sqlite_names, pg_names,
        "tables of one engine only (a migration without its twin?)"
    );
    for (name, want) in std::mem::take(&mut sqlite) {
        let got = &pg_tables[&name];
        assert_eq!(got.columns, want.columns, "columns of {name}");
        assert_eq!(got.primary_key, want.primary_key, "primary key of {name}");
        assert_eq!(got.unique, want.unique, "unique constraints of {name}");
        assert_eq!(got.indexes, want.indexes, "indexes of {name}");
        assert_eq!(
            got.foreign_keys, want.foreign_keys,
            "foreign keys of {name}"
        );
    }
}

/// A fresh database gets every migration, recorded one row per version; opening it again
/// applies nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_fresh_database_is_migrated_once() {
    let Some(db) = database("fresh") else { return };
    let all: Vec<i64> = postgres::migrations().iter().map(|(v, _)| *v).collect();
    assert_eq!(all.last(), Some(&*postgres::SCHEMA_VERSION));

    let pg = Postgres::open(&db.url, &settings()).await.unwrap();
    assert_eq!(pg.migrated().from, 0);
    assert_eq!(pg.migrated().applied, all);
    assert_eq!(
        pg.schema_version().await.unwrap(),
        *postgres::SCHEMA_VERSION
    );
    drop(pg);

    let again = Postgres::open(&db.url, &settings()).await.unwrap();
    assert_eq!(again.migrated().from, *postgres::SCHEMA_VERSION);
    assert!(again.migrated().applied.is_empty());
    let recorded =
        db.psql("SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_migrations");
    let expected: Vec<String> = all.iter().map(i64::to_string).collect();
    assert_eq!(recorded, expected.join(","));
}

/// Three processes starting together on one fresh database: all open it, and between them every
/// migration is applied exactly once (a second application of 0001 would fail on its tables).
#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn concurrent_migrators_apply_each_migration_once() {
    let Some(db) = database("concurrent") else {
        return;
    };
    let open = || {
        let url = db.url.clone();
        tokio::spawn(async move { Postgres::open(&url, &settings()).await })
    };
    let (a, b, c) = tokio::join!(open(), open(), open());
    let mut applied: Vec<i64> = Vec::new();
    for opened in [a, b, c] {
        let pg = opened
            .unwrap()
            .unwrap_or_else(|e| panic!("a migrator failed: {e}"));
        applied.extend(&pg.migrated().applied);
    }
    applied.sort();
    let all: Vec<i64> = postgres::migrations().iter().map(|(v, _)| *v).collect();
    assert_eq!(applied, all);
    assert_eq!(
        db.psql("SELECT count(*), count(DISTINCT version) FROM schema_migrations"),
        format!("{0}|{0}", all.len())
    );
}

/// A database migrated by a newer sessiond is refused, with both versions in the message, and
/// left as it was.
#[tokio::test(flavor = "multi_thread")]
async fn a_newer_schema_is_refused() {
    let Some(db) = database("newer") else { return };
    drop(Postgres::open(&db.url, &settings()).await.unwrap());
    let newer = *postgres::SCHEMA_VERSION + 1;
    db.psql(&format!(
        "CREATE TABLE from_the_future (x int); \
         INSERT INTO schema_migrations VALUES ({newer}, 0)"
    ));
    let Err(e) = Postgres::open(&db.url, &settings()).await else {
        panic!("a newer schema was accepted")
    };
    assert!(
        matches!(e, PostgresError::SchemaNewer { found, supported }
            if found == newer && supported == *postgres::SCHEMA_VERSION),
        "{e:?}"
    );
    let message = e.to_string();
    assert!(
        message.contains(&format!("schema version {newer}")),
        "{message}"
    );
    assert!(
        message.contains(&format!("({})", *postgres::SCHEMA_VERSION)),
        "{message}"
    );
    assert_eq!(
        db.psql("SELECT max(version) FROM schema_migrations"),
        newer.to_string()
    );
}

/// Both URL schemes reach the server (here through its socket directory).
#[tokio::test(flavor = "multi_thread")]
async fn both_url_schemes_open_the_database() {
    let Some(db) = database("schemes") else {
        return;
    };
    let short = db.url.replacen("postgresql://", "postgres://", 1);
    assert!(short.starts_with("postgres://") && short != db.url);
    for url in [&db.url, &short] {
        let pg = Postgres::open(url, &settings()).await.unwrap();
        assert_eq!(
            pg.schema_version().await.unwrap(),
            *postgres::SCHEMA_VERSION
        );
        assert!(!pg.url().target().is_empty());
    }
}

/// A URL that names no PostgreSQL database, a server that is not there, a database that does
/// not exist: each is a typed error with a message that says what is wrong and where, and never
/// the password.
#[tokio::test(flavor = "multi_thread")]
async fn bad_urls_and_unreachable_servers_get_clear_errors() {
    let Some(db) = database("badurls") else {
        return;
    };
    let secret = "hunter2-Zq";
    // A loopback port nobody listens on: bound (so no one else takes it meanwhile) but not
    // listening, so connecting is refused.
    let reserved =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    reserved
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let closed = reserved.local_addr().unwrap().as_socket().unwrap().port();
    let missing_db = db.cluster().url("no_such_database").replacen(
        &format!("{}@", common::postgres::USER),
        &format!("{}:{secret}@", common::postgres::USER),
        1,
    );
    let cases: Vec<(String, &str)> = vec![
        (
            format!("mysql://root:{secret}@localhost/db"),
            "invalid database URL",
        ),
        ("sessiond.db".to_owned(), "invalid database URL"),
        (
            format!("postgres://app:{secret}@127.0.0.1:notaport/db"),
            "invalid database URL",
        ),
        (
            format!("postgres://app:{secret}@127.0.0.1:{closed}/db"),
            "cannot connect to PostgreSQL at app@127.0.0.1:",
        ),
        (
            format!("postgresql://app:{secret}@127.0.0.1:{closed}/db?connect_timeout=5"),
            "cannot connect to PostgreSQL at app@127.0.0.1:",
        ),
        (missing_db, "cannot connect to PostgreSQL at"),
    ];
    for (url, says) in cases {
        let e = match Postgres::open(&url, &settings()).await {
            Ok(_) => panic!("{url} opened"),
            Err(e) => e,
        };
        let message = e.to_string();
        assert!(message.contains(says), "{url}: {message}");
        assert!(
            !message.contains(secret),
            "{url}: the password shows: {message}"
        );
        assert!(!format!("{e:?}").contains(secret), "{url}: {e:?}");
    }
    let e = Postgres::open(&db.cluster().url("no_such_database"), &settings())
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("no_such_database") && e.contains("does not exist"),
        "{e}"
    );
}

/// The search documents follow their rows: written with them, recomputed on every update,
/// removed with the session; words match whatever their case and accents, the last one as a
/// prefix (how the list's `search` asks), in the title or in one prompt.
#[tokio::test(flavor = "multi_thread")]
async fn the_search_document_stays_current() {
    let Some(db) = database("search") else { return };
    drop(Postgres::open(&db.url, &settings()).await.unwrap());
    db.psql(
        "INSERT INTO workspaces VALUES ('w', 'w', 'W', 0);
         INSERT INTO agents (id, workspace_id, slug, name, created_at) VALUES ('a', 'w', 'a', 'A', 0);
         INSERT INTO sessions (id, workspace_id, agent_id, user_id, title, title_origin,
                               title_status, turn_status, bucket, created_at, updated_at)
         VALUES ('s', 'w', 'a', 'u', 'Café menu', 'user', 'final', 'idle', 'inbox', 0, 0);
         INSERT INTO session_search (session_pk, title)
         SELECT pk, title FROM sessions WHERE id = 's';",
    );
    let matches = |query: &str| {
        db.psql(&format!(
            "SELECT count(*) FROM (
                 SELECT session_pk FROM session_search
                 WHERE document @@ to_tsquery('session_search', '{query}')
                 UNION
                 SELECT session_pk FROM session_search_prompts
                 WHERE document @@ to_tsquery('session_search', '{query}')) m"
        ))
    };
    assert_eq!(matches("cafe"), "1");
    assert_eq!(matches("CAFÉ & men:*"), "1");
    assert_eq!(matches("release:*"), "0");
    db.psql(
        "INSERT INTO session_search_prompts (session_pk, seq, prompts)
         SELECT pk, 2, 'Release notes, please' FROM sessions WHERE id = 's';
         INSERT INTO session_search_prompts (session_pk, seq, prompts)
         SELECT pk, 5, 'and the café menu' FROM sessions WHERE id = 's';",
    );
    assert_eq!(matches("release & note:*"), "1");
    assert_eq!(matches("cafe"), "1", "one session, however many rows match");
    assert_eq!(matches("release & menu"), "0", "words of two rows");
    db.psql("UPDATE session_search SET title = 'Tea'");
    assert_eq!(matches("tea"), "1");
    assert_eq!(matches("cafe & men:*"), "1");
    db.psql("DELETE FROM sessions WHERE id = 's'");
    assert_eq!(db.psql("SELECT count(*) FROM session_search"), "0");
    assert_eq!(db.psql("SELECT count(*) FROM session_search_prompts"), "0");
}

/// E-mail addresses are unique whatever their case, as SQLite's COLLATE NOCASE makes them, and
/// found whatever case a login types.
#[tokio::test(flavor = "multi_thread")]
async fn email_addresses_ignore_case() {
    let Some(db) = database("email") else { return };
    drop(Postgres::open(&db.url, &settings()).await.unwrap());
    db.psql("INSERT INTO users VALUES ('u1', 'Owner@Example.com', 'h', 0)");
    let c = client(&db).await;
    let duplicate = c
        .execute(
            "INSERT INTO users VALUES ('u2', 'owner@example.COM', 'h', 0)",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(
        duplicate.code(),
        Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION)
    );
    assert_eq!(
        db.psql("SELECT id FROM users WHERE email = 'OWNER@example.com'"),
        "u1"
    );
}

/// A test that panics still stops its server and removes the cluster's directory (the cluster
/// goes with the last database, dropped while the test unwinds).
#[test]
fn a_panicking_test_leaves_no_server_behind() {
    let Some(cluster) = common::postgres::own_cluster("panicking") else {
        return;
    };
    let dir = cluster.dir().to_owned();
    let pid = cluster.server_pid().expect("the server's pid");
    let db = common::postgres::Cluster::database(&cluster, "panicking");
    drop(cluster);
    assert!(running(pid), "the server is not running");
    let outcome = std::thread::spawn(move || {
        let _db = db;
        panic!("a failing test");
    })
    .join();
    assert!(outcome.is_err());
    assert!(!dir.exists(), "{} is left behind", dir.display());
    assert!(!running(pid), "the server (pid {pid}) is still running");
}

/// Whether process `pid` runs (a zombie, which is only waiting for its parent, does not).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        Err(_) => false,
    }
}

/// A migration that fails is rolled back whole, with its version: the database is left as it was
/// and the error names the migration.
#[tokio::test(flavor = "multi_thread")]
async fn a_failing_migration_changes_nothing() {
    let Some(db) = database("failing") else {
        return;
    };
    // Someone else's table where the first migration creates one of the same name.
    db.psql("CREATE TABLE agents (x int); INSERT INTO agents VALUES (7)");
    let Err(e) = Postgres::open(&db.url, &settings()).await else {
        panic!("the migration succeeded over a conflicting table")
    };
    assert!(
        matches!(&e, PostgresError::Migration { version: 1, reason } if reason.contains("agents")),
        "{e:?}"
    );
    assert_eq!(
        db.psql(
            "SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class \
             WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'"
        ),
        "agents"
    );
    assert_eq!(db.psql("SELECT x FROM agents"), "7");
}
