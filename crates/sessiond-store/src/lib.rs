//! sessiond's storage: the port every other layer uses (handles per aggregate, in sessiond's own
//! types) and the backends behind it: SQLite (one writer thread with group commit, a pool of
//! read-only connections) and PostgreSQL.
//!
//! This crate is the only place that speaks SQL or names rusqlite: `sql`, the reads, the writes
//! and the writer are private modules, so no caller can name a connection, a transaction or a
//! statement. What the store commits it publishes through [`Sink`], a port it defines (the
//! server's bus implements it); its failures are its own [`Error`]. Callers reach it through
//! handles — [`Store::log`], [`Store::projections`], [`Store::submit`], [`Store::sessions`],
//! [`Store::inputs`], [`Store::turns`], [`Store::directory`], [`Store::identity`],
//! [`Store::logins`], [`Store::agentex`], [`Store::schedules`], [`Store::acp`] (and
//! [`Store::seed`] for the benchmarks) — whose write methods are each one whole unit of work, so
//! that another backend can stand behind the same calls (see `Backend`).
//!
//! * Writes go through `Store::write`: the closure runs on the writer thread inside a savepoint of
//!   a batch transaction; the caller is answered only after COMMIT (invariant 3). A failing closure
//!   rolls back its own savepoint and leaves the rest of the batch intact. `Store::write_one`
//!   takes a job that writes at most once ([`OneWrite`]), which needs no savepoint. A job is
//!   `Clone`: PostgreSQL, which commits the writes queued together in one transaction too (on
//!   a few committer threads, without savepoints), runs a copy of it again, alone, when its batch
//!   failed or its transaction lost a lock race.
//! * Reads go through `Store::read` on a blocking thread with a pooled read-only connection.
//! * Keyset pagination only; nothing here uses OFFSET.
//! * `read`, `write` and their `_blocking` and `write_one` forms are private to the store: every
//!   caller outside it names a unit of work by a handle's method (`tests/architecture.rs`).

pub mod a2a_push;
pub mod access;
pub mod acp;
pub mod agentex;
pub mod archives;
pub mod busy;
mod checkpoint;
pub mod claims;
mod config;
pub mod deployment_history;
pub mod directory;
pub mod error;
pub mod fork;
pub mod health;
pub mod identity;
pub mod inputs;
pub mod intake;
pub mod langgraph;
mod listing;
mod log;
pub mod logins;
mod migrate;
pub mod outbound;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod projections;
mod prompt_backlog;
mod prompt_rows;
pub mod record;
pub mod retention;
mod row_lock;
pub mod schedules;
mod search;
pub mod seed;
mod session_rows;
pub mod sessions;
mod sink;
mod sql;
pub mod submit;
mod turn_status;
pub mod turns;
pub mod usage;
pub mod webhooks;
mod writer;

use std::path::Path;
use std::sync::Arc;

use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags};

// The vocabulary and the telemetry keep the paths the store's modules name them by.
use sessiond_model::{clock, ids, nul, timeline};
use sessiond_telemetry::{metrics, request_id};

pub use config::{StoreConfig, Synchronous};
pub use error::{Cause, Error, Result};
pub use health::{Condition, HealthReport};
pub use log::{LogReads, TurnInput};
pub use migrate::SCHEMA_VERSION;
pub use record::{LastTerminal, NewRecordFacts, RecordFacts};
pub use sink::{Relay, Sink, TailSteps};
pub use turn_status::TurnStatus;
pub use turns::{SignalHook, TurnSignal};
pub use writer::take_queued;

// The rows and keys the store's callers hold: the queries and writes behind them stay inside.
pub use directory::{AgentRow, DEFAULT_WORKSPACE};
pub use inputs::QueueKind;
pub use log::{ImageRow, StoredEvent};
pub use session_rows::{SessionKey, SessionRow};
pub use turns::Lease;

// The store's own operations on a connection, for its handles (private: `super::` in them).
use directory::{
    WorkspaceRow, agent_by_id, agent_engines, agents, default_session_id, workspace_by_slug,
    workspace_slug,
};
use identity::{GrantRow, upload_grant, upload_grant_by_hash};
use inputs::{
    NewInput, client_request, input_turn, pending_input_count, sessions_with_pending_inputs,
};
use log::{event_body, events_after, events_before, events_of_types_before, image};
use row_lock::RowLock;
use search::{ListFilter, agent_activity, list_sessions};
use session_rows::{
    JsonColumn, NewSession, parent_session, session_key, session_row, session_row_by_pk,
};
use turns::{active_turn_sessions, engine_memo, expired_turn_sessions, turn_setup};
use writer::{OneWrite, Tx};

type Pool = r2d2::Pool<SqliteConnectionManager>;

// `read` and `write` are called with a hundred different closures. Erasing each closure and its
// result behind one boxed type means the blocking pool's task machinery and the writer's reply
// path are compiled once instead of once per call site (a tenth of the crate's generated code),
// for two small allocations per operation.
type Erased = Box<dyn std::any::Any + Send>;
type ErasedRead = Box<dyn FnOnce(&sql::Db<'_>) -> Result<Erased> + Send>;
type ErasedWrite = Box<dyn for<'a, 'b> FnOnce(&'a mut Tx<'b>) -> Result<Erased> + Send>;
/// A write job that may run more than once (PostgreSQL runs a job again in a new transaction
/// when it lost a lock race): each run calls a fresh copy of the caller's job.
#[cfg(feature = "postgres")]
type ErasedRetryable = Box<dyn for<'a, 'b> Fn(&'a mut Tx<'b>) -> Result<Erased> + Send>;

/// `f` as an [`ErasedWrite`] (see above).
fn erase<T, F>(f: F) -> ErasedWrite
where
    F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    Box::new(move |tx| f(tx).map(|v| Box::new(v) as Erased))
}

fn unerase<T: 'static>(value: Erased) -> Result<T> {
    value
        .downcast::<T>()
        .map(|v| *v)
        .map_err(|_| Error::Internal("a store operation returned another type".into()))
}

#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    /// Where PostgreSQL's writes publish their commits (SQLite's writer thread holds its own).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    sink: Arc<dyn Sink>,
    health: Arc<health::Health>,
}

/// The database behind the store's handles. Every handle method reaches it through
/// [`Store::read`] and [`Store::write`] (private to the store), so a second backend is one more
/// variant here and one more arm there: nothing outside the store, no `Sessions` or `Runner`,
/// is generic over it.
enum Backend {
    /// The embedded default: one writer thread with group commit, a pool of read-only
    /// connections, WAL.
    Sqlite(Sqlite),
    /// A PostgreSQL database that several processes may share: a pool of connections, each write
    /// a transaction of its own.
    #[cfg(feature = "postgres")]
    Postgres(Arc<postgres::backend::PgBackend>),
}

struct Sqlite {
    writer: writer::WriterHandle,
    readers: Pool,
}

/// Pragmas every connection gets. `busy_timeout` comes first so that the others wait instead of
/// failing while another process (e.g. `sessiond backup`) holds a lock.
fn apply_common_pragmas(conn: &Connection) -> rusqlite::Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

/// Opens the write connection: WAL, the configured `synchronous`, migrations applied.
fn open_write_connection(path: &Path, cfg: &StoreConfig) -> Result<Connection> {
    let conn = Connection::open(path).map_err(|e| {
        Error::Storage(Cause::new(
            format!("cannot open {}: {e}", path.display()),
            e,
        ))
    })?;
    apply_common_pragmas(&conn)?;
    let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::Storage(
            format!("cannot enable WAL (journal_mode is {mode})").into(),
        ));
    }
    let sync = match cfg.synchronous {
        Synchronous::Normal => "NORMAL",
        Synchronous::Full => "FULL",
    };
    conn.pragma_update(None, "synchronous", sync)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -32_000)?;
    // The writer runs every write statement of every API family: room for all of them, so that
    // none is prepared again because others pushed it out.
    conn.set_prepared_statement_cache_capacity(256);
    migrate::migrate(&conn)?;
    Ok(conn)
}

impl Store {
    /// Opens (creating if needed) the database at `path`, applies migrations and starts the writer.
    pub fn open(path: &Path, cfg: &StoreConfig, sink: Arc<dyn Sink>) -> Result<Store> {
        let conn = open_write_connection(path, cfg)?;
        let manager = SqliteConnectionManager::file(path)
            .with_flags(
                OpenFlags::SQLITE_OPEN_READ_ONLY
                    | OpenFlags::SQLITE_OPEN_URI
                    | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )
            .with_init(|c| {
                apply_common_pragmas(c)?;
                c.set_prepared_statement_cache_capacity(64);
                Ok(())
            });
        let readers = r2d2::Pool::builder()
            .max_size(cfg.read_connections)
            .min_idle(Some(1))
            .build(manager)?;
        let health = Arc::new(match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => health::Health::for_dir(dir),
            _ => health::Health::for_dir(Path::new(".")),
        });
        let writer = writer::spawn(conn, cfg.max_batch, Arc::clone(&sink), Arc::clone(&health))?;
        Ok(Store {
            inner: Arc::new(Inner {
                backend: Backend::Sqlite(Sqlite { writer, readers }),
                sink,
                health,
            }),
        })
    }

    /// Opens the PostgreSQL database at `url` (migrating it under an advisory lock, so that
    /// several processes may start at once) and serves the store's operations from it. Callable
    /// with or without a current tokio runtime.
    #[cfg(feature = "postgres")]
    pub fn open_postgres(url: &str, cfg: &StoreConfig, sink: Arc<dyn Sink>) -> Result<Store> {
        let settings = postgres::PoolSettings {
            max_connections: (cfg.read_connections as usize).max(4) * 4,
            ..postgres::PoolSettings::default()
        };
        let backend = Arc::new(postgres::backend::PgBackend::open(url, &settings)?);
        backend.start_fanout(&sink);
        let health = Arc::new(health::Health::default());
        backend.start_committers(&sink, &health)?;
        tracing::debug!(database = %backend.url(), "PostgreSQL store open");
        Ok(Store {
            inner: Arc::new(Inner {
                backend: Backend::Postgres(backend),
                sink,
                health,
            }),
        })
    }

    /// Without the `postgres` feature, a PostgreSQL URL is refused.
    #[cfg(not(feature = "postgres"))]
    pub fn open_postgres(_url: &str, _cfg: &StoreConfig, _sink: Arc<dyn Sink>) -> Result<Store> {
        Err(Error::invalid(
            "this sessiond was built without PostgreSQL support (the `postgres` feature)",
        ))
    }

    /// Which SQL the database speaks.
    pub(crate) fn dialect(&self) -> sql::Dialect {
        match &self.inner.backend {
            Backend::Sqlite(_) => sql::Dialect::Sqlite,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => sql::Dialect::Postgres,
        }
    }

    /// Whether other processes may share this database (PostgreSQL): turns hold leases, and
    /// start-up recovery ends only turns whose lease expired.
    pub fn shared_by_processes(&self) -> bool {
        self.dialect() == sql::Dialect::Postgres
    }

    /// Tells the process that runs the session's turn, if another process does (a no-op
    /// alone on SQLite, where this process runs every turn).
    pub fn signal_turn(&self, key: &SessionKey, signal: TurnSignal) {
        #[cfg(feature = "postgres")]
        if let Backend::Postgres(pg) = &self.inner.backend {
            pg.signal_turn(key, signal);
        }
        #[cfg(not(feature = "postgres"))]
        let _ = (key, signal);
    }

    /// Where the signals other processes send for this process's turns go (once).
    pub fn on_turn_signal(&self, hook: SignalHook) {
        #[cfg(feature = "postgres")]
        if let Backend::Postgres(pg) = &self.inner.backend {
            pg.on_turn_signal(hook);
        }
        #[cfg(not(feature = "postgres"))]
        let _ = hook;
    }

    /// Write requests waiting for the writer thread, or for a connection (a metric).
    pub fn writer_queue_depth(&self) -> usize {
        match &self.inner.backend {
            Backend::Sqlite(db) => db.writer.queue_depth(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.waiting(),
        }
    }

    /// Whether writes currently succeed (what `/healthz` and `/readyz` report).
    pub fn health(&self) -> HealthReport {
        self.inner.health.report()
    }

    /// Proves the database can be written: a real (empty) change, committed. `serve` refuses to
    /// start on a read-only database or data dir instead of failing its first write.
    pub fn check_writable(&self) -> Result<()> {
        #[cfg(feature = "postgres")]
        if let Backend::Postgres(pg) = &self.inner.backend {
            return pg.check_writable();
        }
        self.write_blocking(|tx| {
            let Some(conn) = tx.conn.as_sqlite() else {
                return Ok(());
            };
            if conn.is_readonly(rusqlite::MAIN_DB)? {
                return Err(Error::StorageUnavailable(
                    "the database is read-only".into(),
                ));
            }
            writer::rewrite_user_version(conn)
        })
    }

    /// Runs `f` inside a write transaction; resolves after COMMIT. On SQLite `f` runs once, on
    /// the writer thread inside the current batch; on PostgreSQL on a committer thread, inside
    /// a batch's transaction, and again (a fresh clone of `f`, in a transaction of its own) when
    /// that batch failed or the transaction lost a lock race and was rolled back — which is why a
    /// job must be `Clone`: what it captures is its input, never a channel or a handle it
    /// consumes.
    async fn write<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Clone + Send + 'static,
        T: Send + 'static,
    {
        match &self.inner.backend {
            Backend::Sqlite(db) => unerase(db.writer.write(erase(f)).await?),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                let job: ErasedRetryable =
                    Box::new(move |tx| (f.clone())(tx).map(|v| Box::new(v) as Erased));
                unerase(committed(pg, job).await?)
            }
        }
    }

    /// Like [`Store::write`] for a job that writes at most once ([`OneWrite`]): it cannot fail
    /// halfway, so it runs without a savepoint of its own.
    async fn write_one<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(OneWrite<'_, '_>) -> Result<T> + Clone + Send + 'static,
        T: Send + 'static,
    {
        match &self.inner.backend {
            Backend::Sqlite(db) => db.writer.write_one(f).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                let job: ErasedRetryable = Box::new(move |tx| {
                    (f.clone())(OneWrite::new(tx)).map(|v| Box::new(v) as Erased)
                });
                unerase(committed(pg, job).await?)
            }
        }
    }

    /// Like [`Store::write`] for a job that makes every check it can fail on before its first
    /// write, so that it runs without a savepoint on SQLite (see `writer`'s doc). On PostgreSQL,
    /// where a batch has no savepoints, this is [`Store::write`].
    async fn write_checked<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Clone + Send + 'static,
        T: Send + 'static,
    {
        match &self.inner.backend {
            Backend::Sqlite(db) => unerase(db.writer.write_checked(erase(f)).await?),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => self.write(f).await,
        }
    }

    /// Like [`Store::write`], in a transaction of its own that no other write joins. On PostgreSQL
    /// a job that may wait for a row another transaction holds goes this way: in a batch it would
    /// hold the rows of the batch's other jobs while it waits, and every write to those sessions
    /// would wait behind it. On SQLite, where the single writer holds no row, [`Store::write`].
    async fn write_apart<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Clone + Send + 'static,
        T: Send + 'static,
    {
        match &self.inner.backend {
            Backend::Sqlite(_) => self.write(f).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => {
                let store = self.clone();
                blocking(move || store.write_blocking(f)).await
            }
        }
    }

    /// Like [`Store::write`], for callers outside an async runtime (CLI, tests).
    fn write_blocking<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Clone + Send + 'static,
        T: Send + 'static,
    {
        match &self.inner.backend {
            Backend::Sqlite(db) => db.writer.write_blocking(f),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                pg.write(&*self.inner.sink, &self.inner.health, None, move |tx| {
                    (f.clone())(tx)
                })
            }
        }
    }

    /// Has the prompts that wait for the search index indexed (SQLite; see `prompt_backlog`).
    pub(crate) async fn flush_prompts(&self) {
        match &self.inner.backend {
            Backend::Sqlite(db) => db.writer.flush_prompts().await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => {}
        }
    }

    /// [`Store::flush_prompts`] for a caller outside the runtime (the benchmarks' seeding); a
    /// write that cannot be made is its error.
    pub(crate) fn flush_prompts_blocking(&self) -> Result<()> {
        match &self.inner.backend {
            Backend::Sqlite(db) => db.writer.flush_prompts_blocking(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Ok(()),
        }
    }

    /// Runs a query on a pooled connection, off the async threads.
    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&sql::Db<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let job: ErasedRead = Box::new(move |c| f(c).map(|v| Box::new(v) as Erased));
        unerase(self.read_erased(job).await?)
    }

    async fn read_erased(&self, f: ErasedRead) -> Result<Erased> {
        match &self.inner.backend {
            Backend::Sqlite(db) => {
                let pool = db.readers.clone();
                blocking(move || {
                    let conn = pool.get()?;
                    f(&sql::Db::sqlite(&conn))
                })
                .await
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                let pg = Arc::clone(pg);
                blocking(move || pg.read(f)).await
            }
        }
    }

    /// Synchronous read for non-async callers.
    fn read_blocking<T>(&self, f: impl FnOnce(&sql::Db<'_>) -> Result<T>) -> Result<T> {
        match &self.inner.backend {
            Backend::Sqlite(db) => {
                let conn = db.readers.get()?;
                f(&sql::Db::sqlite(&conn))
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.read(f),
        }
    }

    /// Stops accepting writes, lets the writer finish what it has and waits for it.
    pub fn close(&self) {
        match &self.inner.backend {
            Backend::Sqlite(db) => db.writer.close(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.close(),
        }
    }
}

/// Hands `run` to the PostgreSQL committers (see `postgres::committer`) and waits for its outcome,
/// which comes after its COMMIT.
#[cfg(feature = "postgres")]
async fn committed(pg: &postgres::backend::PgBackend, run: ErasedRetryable) -> Result<Erased> {
    let (reply, outcome) = tokio::sync::oneshot::channel();
    pg.submit(postgres::committer::Job {
        run,
        request_id: crate::request_id::current(),
        reply,
        alone: false,
    });
    outcome
        .await
        .map_err(|_| Error::Internal("the PostgreSQL committer stopped".into()))?
}

/// Runs `f` on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Internal(format!("store task failed: {e}")))?
}

/// `VACUUM INTO` from a separate connection: readers and the running server's writer are not
/// blocked, and the copy is a single consistent snapshot.
pub fn backup(db_path: &Path, dest: &Path) -> Result<()> {
    if !db_path.exists() {
        return Err(Error::invalid(format!(
            "no database at {}",
            db_path.display()
        )));
    }
    if dest.exists() {
        return Err(Error::invalid(format!("{} already exists", dest.display())));
    }
    let conn =
        Connection::open_with_flags(db_path, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(|e| {
            Error::Storage(Cause::new(
                format!("cannot open {}: {e}", db_path.display()),
                e,
            ))
        })?;
    apply_common_pragmas(&conn)?;
    migrate::check_version(&conn)?;
    let dest = dest
        .to_str()
        .ok_or_else(|| Error::invalid("backup path must be valid UTF-8"))?;
    conn.execute("VACUUM INTO ?1", [dest])?;
    Ok(())
}
