//! sessiond's SQL layer, beneath the store: one small API over both backends, shaped like rusqlite's (statements,
//! rows, `params!`, `optional()`), so that an operation is written once and runs on SQLite and on
//! PostgreSQL.
//!
//! * [`Db`] is a connection as an operation sees it: on SQLite the writer's transaction or a pooled
//!   read-only connection; on PostgreSQL a pooled connection (inside the job's transaction when it
//!   writes). Its methods block: the store runs every operation on a blocking thread.
//! * Placeholders are SQLite's (`?1`, `?`, `:name`); on PostgreSQL they become `$1…` before the
//!   statement is prepared, outside string literals, quoted names and comments.
//! * Values are dynamically typed as in SQLite ([`ValueRef`]): on PostgreSQL a parameter is encoded
//!   for the type the server inferred for it, and a column is decoded from its type, so the same
//!   Rust type reads a `BIGINT`, an `INTEGER`, a `boolean` or a `numeric` sum.
//! * SQL is written once where both engines agree (`ON CONFLICT`, `RETURNING`, `COALESCE`, window
//!   functions); where they do not (full-text search, JSON paths, `rowid`), the operation asks
//!   [`Db::dialect`] and says both.
//! * Errors are [`Error`]: no row, a constraint (by kind), or a classified engine fault ([`Fault`]),
//!   the same for both engines; a row closure's own error travels inside it ([`Error::Caller`]).
//!   Nothing of either driver's error types leaves this crate.

#[cfg(feature = "postgres")]
pub mod pg;
#[cfg(feature = "postgres")]
mod placeholders;
mod value;

use std::fmt;
use std::sync::Arc;

pub use value::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, Value, ValueRef};

/// Which SQL the connection speaks, for the statements the two engines spell differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// The text at `path` (dot-separated keys: `step.type`) of the JSON held by `column`
    /// (a string's text, a number or an object as JSON text; NULL when absent).
    pub fn json_text(self, column: &str, path: &str) -> String {
        match self {
            Dialect::Sqlite => format!("json_extract({column}, '$.{path}')"),
            Dialect::Postgres => format!("({column}::jsonb #>> '{{{}}}')", path.replace('.', ",")),
        }
    }

    /// A condition that `column` is one of the integers of the JSON array bound to `param`.
    pub fn in_json_integers(self, column: &str, param: &str) -> String {
        match self {
            Dialect::Sqlite => format!("{column} IN (SELECT value FROM json_each({param}))"),
            Dialect::Postgres => format!(
                "{column} IN (SELECT value::bigint FROM jsonb_array_elements_text({param}::jsonb) AS j(value))"
            ),
        }
    }
}

/// The kind of constraint a statement violated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Constraint {
    /// A unique index or primary key: another row holds the same key.
    Unique,
    /// A foreign key: the row referred to does not exist (any more).
    ForeignKey,
    /// A `CHECK` or `NOT NULL` rule.
    Other,
}

/// What a statement failed with.
#[derive(Debug)]
pub enum Error {
    /// `query_row` found no row (see [`OptionalExtension::optional`]).
    NoRows,
    /// A constraint was violated; the cause is the engine's.
    Constraint(Constraint, Cause),
    /// The engine failed, classified so that a caller can tell a full disk from a storage that
    /// cannot be used now or a bug; the cause is the engine's.
    Fault(Fault, Cause),
    /// An error of the caller's own, raised inside a row closure (as a row closure returns this
    /// crate's `Result`): carried back to the caller unchanged, to be taken out with
    /// [`Error::into_caller`].
    Caller(Box<dyn std::error::Error + Send + Sync>),
}

/// The kind of engine failure behind [`Error::Fault`], the same for both engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No space left for the database (SQLite's `SQLITE_FULL`, PostgreSQL's `53100`).
    Full,
    /// The storage cannot be used now: I/O, permissions, a lock held too long, a damaged file, a
    /// server that does not answer or is shutting down.
    Unavailable,
    /// A lost lock race between transactions (a deadlock, a serialization failure): nothing was
    /// written, and the same transaction run again may well succeed.
    Busy,
    /// Any other failure of the engine (a statement it refused).
    Storage,
    /// This layer's own misuse: a value of a type it cannot bind or read, a second row where one
    /// was expected. A bug, not a fault of the storage.
    Internal,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The constraint this error violated, if it is one.
    pub fn constraint(&self) -> Option<Constraint> {
        match self {
            Error::Constraint(c, _) => Some(*c),
            _ => None,
        }
    }

    /// A caller's error of type `E` carried by [`Error::Caller`]; any other error as it is.
    pub fn into_caller<E: std::error::Error + 'static>(self) -> std::result::Result<E, Error> {
        match self {
            Error::Caller(e) => match e.downcast::<E>() {
                Ok(e) => Ok(*e),
                Err(e) => Err(Error::Caller(e)),
            },
            other => Err(other),
        }
    }

    fn internal(detail: impl Into<String>) -> Error {
        Error::Fault(Fault::Internal, Cause::msg(detail))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoRows => f.write_str("the query returned no rows"),
            Error::Constraint(_, cause) | Error::Fault(_, cause) => cause.fmt(f),
            Error::Caller(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Caller(e) => Some(e.as_ref()),
            Error::Constraint(_, cause) | Error::Fault(_, cause) => Some(cause),
            Error::NoRows => None,
        }
    }
}

impl From<rusqlite::Error> for Error {
    /// SQLite's result codes, classified: only this crate sees them.
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::{ErrorCode as C, ffi};
        if let rusqlite::Error::QueryReturnedNoRows = e {
            return Error::NoRows;
        }
        if let rusqlite::Error::SqliteFailure(f, _) = &e
            && f.code == C::ConstraintViolation
        {
            let kind = match f.extended_code {
                ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                    Constraint::Unique
                }
                ffi::SQLITE_CONSTRAINT_FOREIGNKEY => Constraint::ForeignKey,
                _ => Constraint::Other,
            };
            return Error::Constraint(kind, Cause::of(e));
        }
        let fault = match e.sqlite_error_code() {
            Some(C::DiskFull) => Fault::Full,
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
            ) => Fault::Unavailable,
            _ => Fault::Storage,
        };
        Error::Fault(fault, Cause::of(e))
    }
}

/// What an engine reported, kept whole: its text, which is what logs and messages print, and the
/// driver's error itself as the [`source`](std::error::Error::source) of every error built on it,
/// so the chain from a refused request down to SQLite's result code or PostgreSQL's SQLSTATE is
/// never cut. Cheap to clone: a failed batch hands its error to every caller in it.
#[derive(Clone)]
pub struct Cause {
    text: Arc<str>,
    source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl Cause {
    /// `source`, described by `text`.
    pub fn new(
        text: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Cause {
            text: Arc::from(text.into()),
            source: Some(Arc::new(source)),
        }
    }

    /// An error, described by its own text.
    pub fn of(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Cause::new(source.to_string(), source)
    }

    /// A cause that is only a text (a rule of this layer or the store's own, not an engine's).
    pub fn msg(text: impl Into<String>) -> Self {
        Cause {
            text: Arc::from(text.into()),
            source: None,
        }
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Some(source) => write!(f, "{:?} (from {source:?})", self.text),
            None => write!(f, "{:?}", self.text),
        }
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<String> for Cause {
    fn from(text: String) -> Self {
        Cause::msg(text)
    }
}

impl From<&str> for Cause {
    fn from(text: &str) -> Self {
        Cause::msg(text)
    }
}

/// `Result<T>` → `Result<Option<T>>`, where no row is `None` (as rusqlite's extension).
pub trait OptionalExtension<T> {
    fn optional(self) -> Result<Option<T>>;
}

impl<T> OptionalExtension<T> for Result<T> {
    fn optional(self) -> Result<Option<T>> {
        match self {
            Ok(v) => Ok(Some(v)),
            Err(Error::NoRows) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// Parameters of one statement, by position or by name.
pub enum ParamList<'p> {
    Positional(&'p [&'p dyn ToSql]),
    Named(&'p [(&'p str, &'p dyn ToSql)]),
}

/// What a statement can be given as its parameters: `[]`, `()`, `[a, b]` of one type,
/// [`params!`](crate::params) / [`named_params!`](crate::named_params) lists, and
/// [`params_from_iter`].
pub trait Params {
    fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R;
}

impl Params for () {
    fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R {
        f(ParamList::Positional(&[]))
    }
}

impl Params for [&dyn ToSql; 0] {
    fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R {
        f(ParamList::Positional(&[]))
    }
}

impl Params for &[&dyn ToSql] {
    fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R {
        f(ParamList::Positional(self))
    }
}

impl Params for &[(&str, &dyn ToSql)] {
    fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R {
        f(ParamList::Named(self))
    }
}

impl<const N: usize> Params for &[(&str, &dyn ToSql); N] {
    fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R {
        f(ParamList::Named(self))
    }
}

macro_rules! array_params {
    ($($n:literal)*) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R {
                let refs: [&dyn ToSql; $n] = std::array::from_fn(|i| &self[i] as &dyn ToSql);
                f(ParamList::Positional(&refs))
            }
        }
        impl<T: ToSql> Params for &[T; $n] {
            fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R {
                let refs: [&dyn ToSql; $n] = std::array::from_fn(|i| &self[i] as &dyn ToSql);
                f(ParamList::Positional(&refs))
            }
        }
    )*};
}

array_params!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32);

/// Parameters taken from an iterator (e.g. a `Vec<Value>` built for a query of variable shape).
pub struct ParamsFromIter<I>(I);

pub fn params_from_iter<I>(iter: I) -> ParamsFromIter<I>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    ParamsFromIter(iter)
}

impl<I> Params for ParamsFromIter<I>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    fn with_list<R>(self, f: impl FnOnce(ParamList<'_>) -> R) -> R {
        let owned: Vec<I::Item> = self.0.into_iter().collect();
        let refs: Vec<&dyn ToSql> = owned.iter().map(|v| v as &dyn ToSql).collect();
        f(ParamList::Positional(&refs))
    }
}

/// Positional parameters of mixed types: `params![a, b, c]`.
#[macro_export]
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::ToSql]
    };
    ($($param:expr),+ $(,)?) => {
        &[$(&$param as &dyn $crate::ToSql),+] as &[&dyn $crate::ToSql]
    };
}

/// Named parameters: `named_params! {":id": id, ":ws": ws}`.
#[macro_export]
macro_rules! named_params {
    () => {
        &[] as &[(&str, &dyn $crate::ToSql)]
    };
    ($($name:literal: $param:expr),+ $(,)?) => {
        &[$(($name, &$param as &dyn $crate::ToSql)),+]
            as &[(&str, &dyn $crate::ToSql)]
    };
}

/// A connection as an operation sees it.
pub struct Db<'c> {
    conn: Conn<'c>,
}

enum Conn<'c> {
    Sqlite(&'c rusqlite::Connection),
    #[cfg(feature = "postgres")]
    Postgres(&'c pg::Session),
}

impl<'c> Db<'c> {
    pub fn sqlite(conn: &'c rusqlite::Connection) -> Db<'c> {
        Db {
            conn: Conn::Sqlite(conn),
        }
    }

    #[cfg(feature = "postgres")]
    pub fn postgres(session: &'c pg::Session) -> Db<'c> {
        Db {
            conn: Conn::Postgres(session),
        }
    }

    pub fn dialect(&self) -> Dialect {
        match self.conn {
            Conn::Sqlite(_) => Dialect::Sqlite,
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => Dialect::Postgres,
        }
    }

    /// The SQLite connection, for what only SQLite has (pragmas, the writer's own statements).
    pub fn as_sqlite(&self) -> Option<&'c rusqlite::Connection> {
        match self.conn {
            Conn::Sqlite(c) => Some(c),
            #[cfg(feature = "postgres")]
            Conn::Postgres(_) => None,
        }
    }

    /// A statement kept prepared on the connection for the next call with the same text.
    pub fn prepare_cached(&self, sql: &str) -> Result<Stmt<'c>> {
        match self.conn {
            Conn::Sqlite(c) => Ok(Stmt {
                inner: StmtInner::SqliteCached(c.prepare_cached(sql)?),
            }),
            #[cfg(feature = "postgres")]
            Conn::Postgres(s) => s.prepare(sql, true),
        }
    }

    /// A statement prepared for this use only (for text that varies from call to call).
    pub fn prepare(&self, sql: &str) -> Result<Stmt<'c>> {
        match self.conn {
            Conn::Sqlite(c) => Ok(Stmt {
                inner: StmtInner::Sqlite(c.prepare(sql)?),
            }),
            #[cfg(feature = "postgres")]
            Conn::Postgres(s) => s.prepare(sql, false),
        }
    }

    pub fn execute<P: Params>(&self, sql: &str, params: P) -> Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    pub fn query_row<T, P, F>(&self, sql: &str, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        self.prepare_cached(sql)?.query_row(params, f)
    }

    /// Runs statements separated by `;`, without parameters.
    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        match self.conn {
            Conn::Sqlite(c) => Ok(c.execute_batch(sql)?),
            #[cfg(feature = "postgres")]
            Conn::Postgres(s) => s.execute_batch(sql),
        }
    }
}

/// A prepared statement.
pub struct Stmt<'c> {
    inner: StmtInner<'c>,
}

enum StmtInner<'c> {
    SqliteCached(rusqlite::CachedStatement<'c>),
    Sqlite(rusqlite::Statement<'c>),
    #[cfg(feature = "postgres")]
    Postgres(pg::Statement<'c>),
}

impl<'c> Stmt<'c> {
    #[cfg(feature = "postgres")]
    fn postgres(s: pg::Statement<'c>) -> Stmt<'c> {
        Stmt {
            inner: StmtInner::Postgres(s),
        }
    }

    /// Runs the statement; the number of rows it changed.
    pub fn execute<P: Params>(&mut self, params: P) -> Result<usize> {
        match &mut self.inner {
            StmtInner::SqliteCached(s) => {
                sqlite_bind(s, params).and_then(|()| Ok(s.raw_execute()?))
            }
            StmtInner::Sqlite(s) => sqlite_bind(s, params).and_then(|()| Ok(s.raw_execute()?)),
            #[cfg(feature = "postgres")]
            StmtInner::Postgres(s) => params.with_list(|list| s.execute(list)),
        }
    }

    /// Runs the statement when its count and its failure are not needed at once: on PostgreSQL,
    /// inside a transaction, it goes with the next request in the same round trip, and its
    /// failure is that request's (and so the transaction's); on SQLite it runs now.
    pub fn execute_later<P: Params>(&mut self, params: P) -> Result<()> {
        match &mut self.inner {
            #[cfg(feature = "postgres")]
            StmtInner::Postgres(s) => params.with_list(|list| s.execute_later(list)),
            _ => self.execute(params).map(|_| ()),
        }
    }

    /// The first row, mapped by `f`; [`Error::NoRows`] without one.
    pub fn query_row<T, P, F>(&mut self, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let mut f = Some(f);
        let mut first = None;
        self.each(params, 1, |row| {
            if let Some(f) = f.take() {
                first = Some(f(row));
            }
            Ok(())
        })?;
        first.unwrap_or(Err(Error::NoRows))
    }

    /// Like [`Stmt::query_row`] for a query that must find exactly one row.
    pub fn query_one<T, P, F>(&mut self, params: P, f: F) -> Result<T>
    where
        P: Params,
        F: FnOnce(&Row<'_>) -> Result<T>,
    {
        let mut f = Some(f);
        let mut first = None;
        let mut seen = 0;
        self.each(params, 2, |row| {
            seen += 1;
            if let Some(f) = f.take() {
                first = Some(f(row));
            }
            Ok(())
        })?;
        if seen > 1 {
            return Err(Error::internal("the query returned more than one row"));
        }
        first.unwrap_or(Err(Error::NoRows))
    }

    /// Every row, mapped by `f`, in order.
    pub fn query_map<T, P, F>(
        &mut self,
        params: P,
        mut f: F,
    ) -> Result<std::vec::IntoIter<Result<T>>>
    where
        P: Params,
        F: FnMut(&Row<'_>) -> Result<T>,
    {
        let mut out = Vec::new();
        self.each(params, usize::MAX, |row| {
            out.push(f(row));
            Ok(())
        })?;
        Ok(out.into_iter())
    }

    /// Whether the query finds a row.
    pub fn exists<P: Params>(&mut self, params: P) -> Result<bool> {
        let mut found = false;
        self.each(params, 1, |_| {
            found = true;
            Ok(())
        })?;
        Ok(found)
    }

    /// Calls `f` for each of the first `limit` rows.
    fn each<P: Params>(
        &mut self,
        params: P,
        limit: usize,
        mut f: impl FnMut(&Row<'_>) -> Result<()>,
    ) -> Result<()> {
        fn sqlite_rows(
            s: &mut rusqlite::Statement<'_>,
            limit: usize,
            f: &mut dyn FnMut(&Row<'_>) -> Result<()>,
        ) -> Result<()> {
            let mut rows = s.raw_query();
            let mut n = 0;
            while n < limit {
                let Some(row) = rows.next()? else { break };
                f(&Row(RowInner::Sqlite(row)))?;
                n += 1;
            }
            Ok(())
        }
        match &mut self.inner {
            StmtInner::SqliteCached(s) => {
                sqlite_bind(s, params)?;
                sqlite_rows(s, limit, &mut f)
            }
            StmtInner::Sqlite(s) => {
                sqlite_bind(s, params)?;
                sqlite_rows(s, limit, &mut f)
            }
            #[cfg(feature = "postgres")]
            StmtInner::Postgres(s) => {
                let rows = params.with_list(|list| s.query(list))?;
                for row in rows.iter().take(limit) {
                    f(&Row(RowInner::Postgres(row)))?;
                }
                Ok(())
            }
        }
    }
}

/// Binds `params` to a SQLite statement, checking their count (positional) or names (named).
fn sqlite_bind<P: Params>(s: &mut rusqlite::Statement<'_>, params: P) -> Result<()> {
    params.with_list(|list| match list {
        ParamList::Positional(values) => {
            if values.len() != s.parameter_count() {
                return Err(Error::internal(format!(
                    "the statement takes {} parameters, {} were given",
                    s.parameter_count(),
                    values.len()
                )));
            }
            for (i, v) in values.iter().enumerate() {
                s.raw_bind_parameter(i + 1, value::Sqlite(*v))?;
            }
            Ok(())
        }
        ParamList::Named(values) => {
            s.clear_bindings();
            for (name, v) in values {
                let Some(i) = s.parameter_index(name)? else {
                    return Err(Error::internal(format!(
                        "the statement has no parameter {name}"
                    )));
                };
                s.raw_bind_parameter(i, value::Sqlite(*v))?;
            }
            Ok(())
        }
    })
}

/// One row of a result.
pub struct Row<'r>(RowInner<'r>);

enum RowInner<'r> {
    Sqlite(&'r rusqlite::Row<'r>),
    #[cfg(feature = "postgres")]
    Postgres(&'r tokio_postgres::Row),
}

/// A column, by position (from 0).
pub trait RowIndex: Copy + fmt::Display {
    fn index(self) -> usize;
}

impl RowIndex for usize {
    fn index(self) -> usize {
        self
    }
}

impl Row<'_> {
    /// Column `idx` as a `T` (as rusqlite's `Row::get`).
    pub fn get<I: RowIndex, T: FromSql>(&self, idx: I) -> Result<T> {
        let at = |e: FromSqlError| Error::internal(format!("column {idx}: {e}"));
        match &self.0 {
            RowInner::Sqlite(r) => {
                let v = r.get_ref(idx.index())?;
                T::column_result(ValueRef::from(v)).map_err(at)
            }
            #[cfg(feature = "postgres")]
            RowInner::Postgres(r) => {
                pg::column(r, idx.index(), |v| T::column_result(v).map_err(at))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct Mine(&'static str);

    impl fmt::Display for Mine {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Mine {}

    #[test]
    fn a_row_closure_error_comes_back_as_it_was() {
        let conn = rusqlite::Connection::open_in_memory().expect("in memory");
        let db = Db::sqlite(&conn);
        let e = db
            .query_row("SELECT 1", [], |_| -> Result<i64> {
                Err(Error::Caller(Box::new(Mine("refused"))))
            })
            .expect_err("the closure's error");
        assert_eq!(e.into_caller::<Mine>().expect("carried"), Mine("refused"));
        let none = db.query_row("SELECT 1 WHERE 0", [], |r| r.get::<_, i64>(0));
        assert!(matches!(none, Err(Error::NoRows)));
        assert!(none.optional().expect("no row is None").is_none());
    }

    #[derive(Debug, PartialEq)]
    enum Colour {
        Red,
    }

    impl Colour {
        fn parse(name: &str) -> Option<Colour> {
            (name == "red").then_some(Colour::Red)
        }

        fn as_str(&self) -> &'static str {
            "red"
        }
    }

    crate::stored_by_name!(Colour: "colour");

    #[test]
    fn an_enum_stored_by_name_reads_back_and_refuses_names_it_does_not_know() {
        let conn = rusqlite::Connection::open_in_memory().expect("in memory");
        let db = Db::sqlite(&conn);
        let back = db.query_row("SELECT ?1", params![Colour::Red], |r| r.get::<_, Colour>(0));
        assert_eq!(back.expect("read back"), Colour::Red);
        let unknown = db
            .query_row("SELECT 'blue'", [], |r| r.get::<_, Colour>(0))
            .expect_err("an unknown name");
        assert!(
            unknown.to_string().contains("unknown colour \"blue\""),
            "{unknown}"
        );
    }

    #[test]
    fn sqlite_failures_are_classified() {
        let conn = rusqlite::Connection::open_in_memory().expect("in memory");
        let db = Db::sqlite(&conn);
        db.execute_batch(
            "CREATE TABLE p (k TEXT PRIMARY KEY);
             CREATE TABLE c (k TEXT REFERENCES p(k), n INTEGER CHECK (n > 0));
             PRAGMA foreign_keys = ON; INSERT INTO p VALUES ('a');",
        )
        .expect("schema");
        let fail = |sql: &str| db.execute(sql, []).expect_err(sql);
        assert_eq!(
            fail("INSERT INTO p VALUES ('a')").constraint(),
            Some(Constraint::Unique)
        );
        assert_eq!(
            fail("INSERT INTO c VALUES ('b', 1)").constraint(),
            Some(Constraint::ForeignKey)
        );
        assert_eq!(
            fail("INSERT INTO c VALUES ('a', 0)").constraint(),
            Some(Constraint::Other)
        );
        assert!(matches!(
            fail("INSERT INTO nowhere VALUES (1)"),
            Error::Fault(Fault::Storage, _)
        ));
    }
}
