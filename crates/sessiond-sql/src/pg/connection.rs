//! A PostgreSQL connection driven by the thread that uses it, and the pool that keeps them.
//!
//! tokio-postgres splits a connection in two: a `Client` that queues requests and a `Connection`
//! future that writes them to the socket and hands the answers back. Spawned on a shared runtime,
//! every statement crossed threads four times — the caller woke a runtime worker to write, the
//! worker woke again on the answer and woke the caller — and on a busy machine those wake-ups
//! cost more than the statements. Here each connection owns a small current-thread runtime, and
//! [`Connection::block_on`] polls the `Connection` future and the caller's request together on
//! the caller's own thread (as the `postgres` crate does): the caller writes, waits in
//! `epoll_wait` for the answer and reads it itself. A connection is only ever used by one thread
//! at a time (a pooled object), so nothing else needs its runtime.
//!
//! The price: nobody reads an idle connection's socket, so a connection the server closed while
//! it sat in the pool is noticed when it is next taken. [`Connection::is_usable`] lets what arrived
//! in (an end of stream, an error) be read before the connection is handed out.

use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;

use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Socket, Statement};

use crate::placeholders::Translated;

/// Statements each connection keeps prepared at most. Operations whose text varies with their
/// input (filters, lists of ids) prepare without the cache; this bounds the cache should one of
/// them use it anyway.
const MAX_CACHED_STATEMENTS: usize = 512;

/// A statement prepared on a connection, and the names of its parameters in the order of their
/// numbers (empty when they are numbered only).
#[derive(Clone)]
pub struct Prepared {
    pub statement: Statement,
    pub names: Arc<[String]>,
}

/// The `Connection` half, boxed whatever its TLS stream.
type Driver = Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send>>;

/// One connection: its client, the future that does its I/O, and the runtime that future's
/// socket is registered with.
pub struct Connection {
    client: tokio_postgres::Client,
    /// `None` once it ended: dropping it drops the request queue's receiver, so that a request
    /// sent afterwards fails as closed instead of waiting for ever.
    driver: Mutex<Option<Driver>>,
    /// Statements prepared on this connection, by their text as the caller wrote it (before its
    /// placeholders were translated: a statement run again is neither translated nor prepared).
    statements: Mutex<HashMap<String, Prepared>>,
    /// `Option` so that `Drop` can shut it down without waiting (a connection may be dropped on
    /// an async thread, where a runtime's blocking shutdown would panic).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Connection {
    /// Connects with `config` (blocking: call it on a thread that is not running async code).
    pub fn connect<T>(config: &tokio_postgres::Config, tls: T) -> Result<Connection, ConnectError>
    where
        T: MakeTlsConnect<Socket> + Send,
        T::Stream: Send + 'static,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ConnectError::Runtime(e.to_string()))?;
        let (client, connection) = runtime
            .block_on(config.connect(tls))
            .map_err(ConnectError::Postgres)?;
        Ok(Connection {
            client,
            driver: Mutex::new(Some(Box::pin(connection))),
            statements: Mutex::new(HashMap::new()),
            runtime: Some(runtime),
        })
    }

    /// The client, to build requests that [`Connection::block_on`] runs.
    pub fn client(&self) -> &tokio_postgres::Client {
        &self.client
    }

    /// Runs `f` (a request of [`Connection::client`]) to completion on this thread, doing the
    /// connection's I/O meanwhile. Must not be called from async code.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        let mut driver = self.driver.lock().unwrap_or_else(PoisonError::into_inner);
        let mut f = pin!(f);
        let Some(runtime) = &self.runtime else {
            unreachable!("the runtime is only taken when the connection is dropped")
        };
        runtime.block_on(poll_fn(|cx| {
            if let Some(d) = driver.as_mut()
                && let Poll::Ready(ended) = d.as_mut().poll(cx)
            {
                if let Err(e) = ended {
                    tracing::warn!(error = %super::describe(&e), "PostgreSQL connection closed");
                }
                // Whatever was in flight fails as closed.
                *driver = None;
            }
            f.as_mut().poll(cx)
        }))
    }

    /// Whether the connection may be handed out: it has not ended, also after reading whatever
    /// the server sent while it was idle (one non-blocking turn of its runtime).
    pub fn is_usable(&self) -> bool {
        !self.client.is_closed() && {
            self.block_on(tokio::task::yield_now());
            !self.client.is_closed()
        }
    }

    /// `sql` prepared on this connection, from the cache when it was prepared before; `translate`
    /// turns `sql` into PostgreSQL's text and names its parameters, the first time only.
    pub fn prepare_cached(
        &self,
        sql: &str,
        translate: impl FnOnce(&str) -> Translated,
    ) -> Result<Prepared, tokio_postgres::Error> {
        if let Some(p) = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(sql)
        {
            return Ok(p.clone());
        }
        let t = translate(sql);
        let prepared = Prepared {
            statement: self.block_on(self.client.prepare(&t.sql))?,
            names: t.names.into(),
        };
        let mut cache = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if cache.len() >= MAX_CACHED_STATEMENTS {
            cache.clear();
        }
        cache.insert(sql.to_owned(), prepared.clone());
        Ok(prepared)
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The socket goes first, while its runtime is still there to deregister it.
        *self
            .driver
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner) = None;
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Why a connection could not be made.
#[derive(Debug)]
pub enum ConnectError {
    /// The server's or the network's answer.
    Postgres(tokio_postgres::Error),
    /// The connection's runtime could not be started, or the thread that connects failed.
    Runtime(String),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Postgres(e) => f.write_str(&super::describe(e)),
            ConnectError::Runtime(e) => write!(f, "cannot start the connection's runtime: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Postgres(e) => Some(e),
            ConnectError::Runtime(_) => None,
        }
    }
}

/// How the pool makes a connection (the URL's settings and its TLS, captured by the store).
type Connect = dyn Fn() -> Result<Connection, ConnectError> + Send + Sync;

/// The pool's manager: makes [`Connection`]s on a blocking thread (connecting runs a runtime of
/// the connection's own, which may not start inside the pool's async code) and hands out only
/// those that have not ended.
pub struct Manager {
    connect: Arc<Connect>,
}

impl Manager {
    pub fn new(
        connect: impl Fn() -> Result<Connection, ConnectError> + Send + Sync + 'static,
    ) -> Manager {
        Manager {
            connect: Arc::new(connect),
        }
    }
}

impl deadpool::managed::Manager for Manager {
    type Type = Connection;
    type Error = ConnectError;

    async fn create(&self) -> Result<Connection, ConnectError> {
        let connect = Arc::clone(&self.connect);
        tokio::task::spawn_blocking(move || connect())
            .await
            .map_err(|e| ConnectError::Runtime(e.to_string()))?
    }

    async fn recycle(
        &self,
        conn: &mut Connection,
        _: &deadpool::managed::Metrics,
    ) -> deadpool::managed::RecycleResult<ConnectError> {
        // What the server sent while the connection was idle is read by whoever takes it
        // ([`Connection::is_usable`]): this runs inside the pool's async code, where the
        // connection's own runtime cannot run.
        if conn.client.is_closed() {
            return Err(deadpool::managed::RecycleError::message(
                "the connection is closed",
            ));
        }
        Ok(())
    }
}

/// The pool of [`Connection`]s.
pub type Pool = deadpool::managed::Pool<Manager>;
/// A connection taken from the [`Pool`].
pub type Pooled = deadpool::managed::Object<Manager>;
/// Why no connection could be taken from the [`Pool`].
pub type PoolError = deadpool::managed::PoolError<ConnectError>;
