//! The SQL layer on PostgreSQL: a pooled connection driven from a blocking thread, statements
//! translated from SQLite's placeholders, values encoded for the types the server inferred and
//! decoded from the types it returns.

use std::future::Future;

use bytes::{BufMut, BytesMut};
use tokio_postgres::types::{IsNull, Type};

use super::Fault;
use super::placeholders;
use super::{Cause, Constraint, Error, ParamList, Result, Stmt, ToSqlOutput, ValueRef};

mod connection;

pub use connection::{ConnectError, Connection, Manager, Pool, PoolError, Pooled};

/// A pooled connection, used by one blocking thread at a time. Its methods block: they are
/// called on blocking threads (never on a runtime's worker).
pub struct Session {
    conn: Pooled,
    /// What [`Session::begin`] left to send (`BEGIN`, and settings of the transaction): it goes
    /// with the next request, in the same round trip.
    begin: std::cell::Cell<Option<&'static str>>,
    /// A transaction is open ([`Session::begin`] until it ends): only then may a statement wait
    /// to be sent ([`Statement::execute_later`]), since its end sends what waits.
    in_transaction: std::cell::Cell<bool>,
    /// Statements whose answers nobody reads, waiting to go with the next request.
    later: std::cell::RefCell<Vec<Later>>,
}

/// A statement sent with the next request ([`Statement::execute_later`]).
struct Later {
    statement: tokio_postgres::Statement,
    values: Vec<super::Value>,
}

/// Statements that may wait at most; one more sends them all.
const LATER_MAX: usize = 64;

impl Session {
    pub fn new(conn: Pooled) -> Session {
        Session {
            conn,
            begin: std::cell::Cell::new(None),
            in_transaction: std::cell::Cell::new(false),
            later: std::cell::RefCell::new(Vec::new()),
        }
    }

    /// Runs `f`, a request of this session's client, to completion (see [`Connection::block_on`]).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.conn.block_on(f)
    }

    /// Runs `f` as [`Session::block_on`] does, preceded by the `BEGIN` that [`Session::begin`]
    /// left to send and the statements that wait ([`Statement::execute_later`]): all go in one
    /// round trip (the client queues a request when its future is first polled, `biased` and
    /// [`in_order`] poll them in the order written, and the server answers in order). The first
    /// failure is the outcome: after it the server refuses the rest of the transaction.
    fn request<T>(
        &self,
        f: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
    ) -> std::result::Result<T, tokio_postgres::Error> {
        let begin = self.begin.take();
        let later = self.later.take();
        if begin.is_none() && later.is_empty() {
            return self.block_on(f);
        }
        let client = self.client();
        let params: Vec<Vec<Param<'_>>> = later
            .iter()
            .map(|l| l.values.iter().map(|v| Param(v.as_ref())).collect())
            .collect();
        let refs: Vec<Vec<&(dyn tokio_postgres::types::ToSql + Sync)>> = params
            .iter()
            .map(|p| p.iter().map(|v| v as _).collect())
            .collect();
        self.block_on(async {
            let begun = async {
                match begin {
                    Some(begin) => client.batch_execute(begin).await,
                    None => Ok(()),
                }
            };
            let sent = in_order(
                later
                    .iter()
                    .zip(&refs)
                    .map(|(l, refs)| client.execute(&l.statement, refs)),
            );
            let (begun, sent, done) = tokio::join!(biased; begun, sent, f);
            // A request sent after a `BEGIN` that failed ran outside any transaction; the
            // connection is broken then, and so is what followed it.
            begun?;
            sent?;
            done
        })
    }

    /// Starts a transaction with `begin` — `BEGIN`, or `BEGIN` and `SET LOCAL` statements of the
    /// transaction's own in one simple query (`BEGIN; SET LOCAL lock_timeout = '200ms'`) — sent
    /// with the first statement that follows.
    pub fn begin(&self, begin: &'static str) {
        self.begin.set(Some(begin));
        self.in_transaction.set(true);
    }

    /// The connection, for requests run with [`Session::block_on`].
    pub fn client(&self) -> &tokio_postgres::Client {
        self.conn.client()
    }

    /// Takes the connection out of the pool and closes it: one whose transaction could not be
    /// ended must not serve anyone else.
    pub fn discard(self) {
        drop(deadpool::managed::Object::take(self.conn));
    }

    pub(super) fn prepare(&self, sql: &str, cached: bool) -> Result<Stmt<'_>> {
        let prepared = if cached {
            self.conn.prepare_cached(sql, placeholders::translate)
        } else {
            let t = placeholders::translate(sql);
            self.block_on(self.client().prepare(&t.sql))
                .map(|statement| connection::Prepared {
                    statement,
                    names: t.names.into(),
                })
        }
        .map_err(error)?;
        Ok(Stmt::postgres(Statement {
            session: self,
            statement: prepared.statement,
            names: prepared.names,
        }))
    }

    /// Sends `notices` on `channel` and commits, in one round trip: the notices are delivered if
    /// and only if the transaction commits.
    pub fn commit_notifying(&self, channel: &str, notices: &[String]) -> Result<()> {
        if notices.is_empty() {
            return self.end("COMMIT");
        }
        self.in_transaction.set(false);
        // Written in PostgreSQL's own terms: nothing to translate.
        let notify = self
            .conn
            .prepare_cached(
                "SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n",
                |sql| placeholders::Translated {
                    sql: sql.to_owned(),
                    names: Vec::new(),
                },
            )
            .map_err(error)?
            .statement;
        let client = self.client();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&channel, &notices];
        self.request(async {
            let (notified, committed) = tokio::join!(
                biased;
                client.execute(&notify, &params),
                client.batch_execute("COMMIT")
            );
            // After a failed statement the server ends the transaction with a rollback, and
            // answers the COMMIT without an error: the notice's failure is the outcome.
            notified?;
            committed
        })
        .map_err(error)
    }

    /// Rolls the transaction back.
    pub fn rollback(&self) -> Result<()> {
        // What waits to be sent was never run: nothing to take back.
        self.later.take();
        self.end("ROLLBACK")
    }

    /// Ends the transaction with `sql`; nothing to send when its `BEGIN` was not sent either
    /// (a unit of work that ran no statement, or whose statements all waited and are dropped by
    /// a rollback, [`Session::rollback`]). A commit sends the statements that wait first.
    fn end(&self, sql: &str) -> Result<()> {
        self.in_transaction.set(false);
        if self.later.borrow().is_empty() && self.begin.take().is_some() {
            return Ok(());
        }
        self.execute_batch(sql)
    }

    pub fn execute_batch(&self, sql: &str) -> Result<()> {
        self.request(self.client().batch_execute(sql))
            .map_err(error)
    }
}

/// A statement prepared on a [`Session`].
pub struct Statement<'c> {
    session: &'c Session,
    statement: tokio_postgres::Statement,
    /// Named parameters in the order of their numbers.
    names: std::sync::Arc<[String]>,
}

impl Statement<'_> {
    /// The parameters' values in the statement's order.
    fn values<'p>(&self, list: ParamList<'p>) -> Result<Vec<ToSqlOutput<'p>>> {
        let expected = self.statement.params().len();
        let values: Vec<ToSqlOutput<'p>> = match list {
            ParamList::Positional(values) => {
                if values.len() != expected {
                    return Err(Error::internal(format!(
                        "the statement takes {expected} parameters, {} were given",
                        values.len()
                    )));
                }
                values
                    .iter()
                    .map(|v| v.to_sql())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(|e| Error::internal(e.to_string()))?
            }
            ParamList::Named(values) => self
                .names
                .iter()
                .map(|name| match values.iter().find(|(n, _)| n == name) {
                    Some((_, v)) => v.to_sql().map_err(|e| Error::internal(e.to_string())),
                    None => Ok(ToSqlOutput::Borrowed(ValueRef::Null)),
                })
                .collect::<Result<_>>()?,
        };
        Ok(values)
    }

    /// Queues the statement to go with the session's next request (a read, another statement,
    /// the `COMMIT`), in the same round trip, for a caller that needs neither its count nor its
    /// failure at once: a failure is the outcome of that next request, and of the transaction.
    /// Outside a transaction, or with [`LATER_MAX`] waiting, it is sent now.
    pub(super) fn execute_later(&mut self, list: ParamList<'_>) -> Result<()> {
        if !self.session.in_transaction.get() {
            return self.execute(list).map(|_| ());
        }
        let values = self
            .values(list)?
            .into_iter()
            .map(ToSqlOutput::into_owned)
            .collect();
        let waiting = {
            let mut later = self.session.later.borrow_mut();
            later.push(Later {
                statement: self.statement.clone(),
                values,
            });
            later.len()
        };
        if waiting >= LATER_MAX {
            self.session.request(async { Ok(()) }).map_err(error)?;
        }
        Ok(())
    }

    pub(super) fn execute(&mut self, list: ParamList<'_>) -> Result<usize> {
        let values = self.values(list)?;
        let params: Vec<Param<'_>> = values.iter().map(|v| Param(v.value())).collect();
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p as _).collect();
        let n = self
            .session
            .request(self.session.client().execute(&self.statement, &refs))
            .map_err(error)?;
        Ok(n as usize)
    }

    pub(super) fn query(&mut self, list: ParamList<'_>) -> Result<Vec<tokio_postgres::Row>> {
        let values = self.values(list)?;
        let params: Vec<Param<'_>> = values.iter().map(|v| Param(v.value())).collect();
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p as _).collect();
        self.session
            .request(self.session.client().query(&self.statement, &refs))
            .map_err(error)
    }
}

/// Text for a `text` parameter. PostgreSQL's text cannot hold U+0000; requests holding it are
/// refused and events have it replaced before they get here (see [`sessiond_model::nul`]), and any other
/// text that still holds one is written with U+FFFD in its place rather than failing the write.
fn put_text(out: &mut BytesMut, t: &[u8]) {
    if !t.contains(&0) {
        return out.put_slice(t);
    }
    let mut utf8 = [0; 4];
    let replacement = sessiond_model::nul::REPLACEMENT
        .encode_utf8(&mut utf8)
        .as_bytes();
    for (i, part) in t.split(|&b| b == 0).enumerate() {
        if i > 0 {
            out.put_slice(replacement);
        }
        out.put_slice(part);
    }
}

fn is_text(ty: &Type) -> bool {
    matches!(
        *ty,
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON
    ) || ty.name() == "citext"
}

/// A value bound to a parameter of whatever type PostgreSQL inferred for it (as SQLite would take
/// it: an integer for a `boolean`, text for a `citext`, an integer for a `text`).
#[derive(Debug)]
struct Param<'a>(ValueRef<'a>);

impl tokio_postgres::types::ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let mismatch = |what: &str| format!("cannot bind {what} to a parameter of type {ty}");
        match self.0 {
            ValueRef::Null => return Ok(IsNull::Yes),
            ValueRef::Integer(i) => match *ty {
                Type::INT8 => out.put_i64(i),
                Type::INT4 => out.put_i32(i32::try_from(i)?),
                Type::INT2 => out.put_i16(i16::try_from(i)?),
                Type::BOOL => out.put_u8(u8::from(i != 0)),
                Type::FLOAT8 => out.put_f64(i as f64),
                Type::FLOAT4 => out.put_f32(i as f32),
                Type::JSONB => {
                    out.put_u8(1);
                    out.put_slice(i.to_string().as_bytes());
                }
                _ if is_text(ty) => out.put_slice(i.to_string().as_bytes()),
                _ => return Err(mismatch("an integer").into()),
            },
            ValueRef::Real(f) => match *ty {
                Type::FLOAT8 => out.put_f64(f),
                Type::FLOAT4 => out.put_f32(f as f32),
                _ if is_text(ty) => out.put_slice(f.to_string().as_bytes()),
                _ => return Err(mismatch("a real number").into()),
            },
            ValueRef::Text(t) => match *ty {
                Type::JSONB => {
                    out.put_u8(1);
                    out.put_slice(t);
                }
                Type::BYTEA => out.put_slice(t),
                // SQLite's integer affinity: text that is an integer is one.
                Type::INT8 | Type::INT4 | Type::INT2 => {
                    let i: i64 = std::str::from_utf8(t)?.trim().parse()?;
                    return Param(ValueRef::Integer(i)).to_sql(ty, out);
                }
                _ if is_text(ty) => put_text(out, t),
                _ => return Err(mismatch("text").into()),
            },
            ValueRef::Blob(b) => match *ty {
                Type::BYTEA => out.put_slice(b),
                _ if is_text(ty) => {
                    std::str::from_utf8(b)?;
                    put_text(out, b)
                }
                _ => return Err(mismatch("a blob").into()),
            },
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    tokio_postgres::types::to_sql_checked!();
}

/// A column's raw bytes, whatever its type.
struct Raw<'a>(Option<&'a [u8]>);

impl<'a> tokio_postgres::types::FromSql<'a> for Raw<'a> {
    fn from_sql(
        _: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(Some(raw)))
    }

    fn from_sql_null(
        _: &Type,
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(None))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Column `idx` of `row` as a [`ValueRef`], handed to `f`.
pub(super) fn column<T>(
    row: &tokio_postgres::Row,
    idx: usize,
    f: impl FnOnce(ValueRef<'_>) -> Result<T>,
) -> Result<T> {
    let Some(col) = row.columns().get(idx) else {
        return Err(Error::internal(format!("no column {idx}")));
    };
    let ty = col.type_();
    let Raw(raw) = row
        .try_get::<_, Raw<'_>>(idx)
        .map_err(|e| Error::internal(e.to_string()))?;
    let Some(b) = raw else {
        return f(ValueRef::Null);
    };
    let bad = || Error::internal(format!("column {idx}: malformed {ty} value"));
    let int = |n: usize| -> Result<i64> {
        let bytes = b.get(..n).ok_or_else(bad)?;
        Ok(match n {
            2 => i64::from(i16::from_be_bytes([bytes[0], bytes[1]])),
            4 => i64::from(i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
            _ => i64::from_be_bytes(bytes.try_into().map_err(|_| bad())?),
        })
    };
    let value = match *ty {
        Type::BOOL => ValueRef::Integer(i64::from(*b.first().ok_or_else(bad)? != 0)),
        Type::INT2 => ValueRef::Integer(int(2)?),
        Type::INT4 => ValueRef::Integer(int(4)?),
        Type::INT8 => ValueRef::Integer(int(8)?),
        Type::OID => ValueRef::Integer(int(4)? & 0xFFFF_FFFF),
        Type::FLOAT4 => ValueRef::Real(f64::from(f32::from_be_bytes(
            b.try_into().map_err(|_| bad())?,
        ))),
        Type::FLOAT8 => ValueRef::Real(f64::from_be_bytes(b.try_into().map_err(|_| bad())?)),
        Type::BYTEA => ValueRef::Blob(b),
        Type::JSONB => ValueRef::Text(b.get(1..).ok_or_else(bad)?),
        Type::NUMERIC => numeric(b).ok_or_else(bad)?,
        _ if is_text(ty) => ValueRef::Text(b),
        _ => {
            return Err(Error::internal(format!(
                "column {idx} has type {ty}, which the store does not read"
            )));
        }
    };
    f(value)
}

/// A binary `numeric` (what PostgreSQL's `sum` of integers returns) as an integer when it is
/// one, else as a real number.
fn numeric(b: &[u8]) -> Option<ValueRef<'static>> {
    let word = |i: usize| -> Option<u16> { Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?])) };
    let ndigits = word(0)? as usize;
    let weight = word(2)? as i16 as i32;
    let sign = word(4)?;
    if sign == 0xC000 {
        return Some(ValueRef::Null);
    }
    let mut int: i128 = 0;
    let mut real = 0f64;
    let mut fractional = false;
    for k in 0..ndigits {
        let digit = word(8 + 2 * k)? as i128;
        let power = weight - k as i32;
        real += digit as f64 * 10000f64.powi(power);
        if power >= 0 {
            int = int.checked_add(digit.checked_mul(10000i128.checked_pow(power as u32)?)?)?;
        } else if digit != 0 {
            fractional = true;
        }
    }
    let negative = sign == 0x4000;
    if fractional {
        return Some(ValueRef::Real(if negative { -real } else { real }));
    }
    let int = if negative { -int } else { int };
    i64::try_from(int).ok().map(ValueRef::Integer)
}

/// The text of a driver error: the server's own message and detail when there is one (the
/// driver's `Display` of a server error says only "db error"), else the driver's description
/// with its cause.
pub fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut out = format!("{}: {}", db.severity(), db.message());
        if let Some(detail) = db.detail() {
            out.push_str(&format!(" ({detail})"));
        }
        return out;
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(&format!(": {text}"));
        }
        source = cause.source();
    }
    out
}

/// A driver error, classified as the SQLite backend classifies its own.
pub fn error(e: tokio_postgres::Error) -> Error {
    let code = e.as_db_error().map(|db| db.code().code().to_owned());
    classify(code.as_deref(), Cause::new(describe(&e), e))
}

/// The error of a server's SQLSTATE `code` (`None`: no answer from the server).
fn classify(code: Option<&str>, detail: Cause) -> Error {
    let Some(code) = code else {
        // No answer from the server: the connection is gone or cannot be used.
        return Error::Fault(Fault::Unavailable, detail);
    };
    match code {
        "23505" => Error::Constraint(Constraint::Unique, detail),
        "23503" => Error::Constraint(Constraint::ForeignKey, detail),
        c if c.starts_with("23") => Error::Constraint(Constraint::Other, detail),
        // A lost lock race between transactions (a deadlock, a serialization failure): the
        // server rolled the transaction back, so nothing was written, and the same transaction
        // run again may well succeed (the PostgreSQL backend does so).
        "40001" | "40P01" => Error::Fault(Fault::Busy, detail),
        "53100" => Error::Fault(Fault::Full, detail),
        c if c.starts_with("08")
            || c.starts_with("57")
            || c.starts_with("53")
            || c.starts_with("58")
            || c == "25006"
            || c.starts_with("XX") =>
        {
            Error::Fault(Fault::Unavailable, detail)
        }
        _ => Error::Fault(Fault::Storage, detail),
    }
}

/// Runs `futures` together, polling them in the order given (so that each queues its request in
/// that order); the first failure, or `Ok` when all succeeded.
async fn in_order<F>(
    futures: impl Iterator<Item = F>,
) -> std::result::Result<(), tokio_postgres::Error>
where
    F: Future<Output = std::result::Result<u64, tokio_postgres::Error>>,
{
    let mut futures: Vec<Option<std::pin::Pin<Box<F>>>> =
        futures.map(|f| Some(Box::pin(f))).collect();
    let mut first_error = None;
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for slot in &mut futures {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(outcome) => {
                        *slot = None;
                        if let Err(e) = outcome
                            && first_error.is_none()
                        {
                            first_error = Some(e);
                        }
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_bytes(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend((digits.len() as u16).to_be_bytes());
        b.extend(weight.to_be_bytes());
        b.extend(sign.to_be_bytes());
        b.extend(dscale.to_be_bytes());
        for d in digits {
            b.extend(d.to_be_bytes());
        }
        b
    }

    #[test]
    fn lost_lock_races_are_busy_not_conflicts_or_faults() {
        let fault = |code: Option<&str>| match classify(code, "detail".into()) {
            Error::Fault(f, _) => Some(f),
            _ => None,
        };
        for code in ["40P01", "40001"] {
            assert_eq!(fault(Some(code)), Some(Fault::Busy), "{code}");
        }
        assert_eq!(
            classify(Some("23505"), "detail".into()).constraint(),
            Some(Constraint::Unique)
        );
        assert_eq!(fault(Some("53100")), Some(Fault::Full));
        assert_eq!(fault(Some("57P01")), Some(Fault::Unavailable));
        assert_eq!(fault(None), Some(Fault::Unavailable));
        assert_eq!(fault(Some("42P01")), Some(Fault::Storage));
    }

    #[test]
    fn text_holding_nul_is_written_with_the_replacement_character() {
        let text = |t: &[u8]| {
            let mut out = BytesMut::new();
            put_text(&mut out, t);
            String::from_utf8(out.to_vec()).expect("UTF-8")
        };
        assert_eq!(text(b"plain"), "plain");
        assert_eq!(text(b"\0a\0\0b\0"), "\u{FFFD}a\u{FFFD}\u{FFFD}b\u{FFFD}");
        assert_eq!(text(b""), "");
    }

    #[test]
    fn numeric_sums_read_as_integers() {
        // 123456789 = 1·10000² + 2345·10000 + 6789
        let b = numeric_bytes(2, 0, 0, &[1, 2345, 6789]);
        assert_eq!(numeric(&b), Some(ValueRef::Integer(123_456_789)));
        let b = numeric_bytes(0, 0x4000, 0, &[42]);
        assert_eq!(numeric(&b), Some(ValueRef::Integer(-42)));
        assert_eq!(
            numeric(&numeric_bytes(0, 0, 0, &[])),
            Some(ValueRef::Integer(0))
        );
        // 1.5 = 1 + 5000·10000⁻¹
        let b = numeric_bytes(0, 0, 1, &[1, 5000]);
        assert_eq!(numeric(&b), Some(ValueRef::Real(1.5)));
    }
}
