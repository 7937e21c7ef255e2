//! The store's operations on PostgreSQL.
//!
//! Every operation runs on a blocking thread with a pooled connection, through the same SQL layer
//! (`store::sql`) as on SQLite. The async callers' writes are committed in batches by the
//! committer threads ([`super::committer`]); a write of a blocking caller (the CLI), and every job
//! of a batch that failed, is one transaction of its own ([`PgBackend::write`]). Either way
//! (`READ COMMITTED`): the jobs run, the counters of the sessions each appended to are written to
//! their rows, COMMIT, and only then are the callers answered and the frames published — nothing
//! is acknowledged before COMMIT. There is no single writer: appends to one session are ordered by
//! the lock a job takes on the session's row when it first reads its counters
//! (`SELECT … FOR NO KEY UPDATE`), so seqs stay gap-free across every process that shares the
//! database; a lost race on a key (two creates with one `clientRequestId`) is a unique violation,
//! as on SQLite.
//!
//! The fan-out's connections are driven by a small runtime of the backend's own, so that the store
//! works the same from `serve`'s runtimes, from a CLI command without one, and from tests.

use std::sync::{Arc, Mutex};

use super::{PoolSettings, Postgres, PostgresError};
use crate::Sink;
use crate::error::{Cause, Error, Result};
use crate::health::{Health, Probe};
use crate::sql::{Db, pg::Session};
use crate::writer::{self, Tx};

pub(crate) struct PgBackend {
    db: Postgres,
    handle: tokio::runtime::Handle,
    /// The runtime that drives the pool's connections (shut down without waiting when the store
    /// goes: dropping a runtime may happen on an async thread).
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    /// Ends the listener and the relay (the store closes).
    stop: tokio::sync::watch::Sender<bool>,
    /// Queues this process's notices outside transactions (deltas, turn signals).
    notifier: std::sync::OnceLock<super::fanout::Notifier>,
    /// Where signals for this process's turns go (its runner).
    signals: Arc<std::sync::OnceLock<crate::SignalHook>>,
    /// The queue of the async callers' writes, committed in batches (see [`super::committer`]).
    committers: Arc<super::committer::Committers>,
    /// Whether another process listens for this one's commit notices (see [`super::presence`]);
    /// until the listener has found out, and without one (a CLI command), it is assumed.
    presence: Arc<super::presence::Presence>,
}

impl Drop for PgBackend {
    fn drop(&mut self) {
        self.committers.close();
        if let Some(rt) = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            rt.shutdown_background();
        }
    }
}

impl From<PostgresError> for Error {
    fn from(e: PostgresError) -> Self {
        match e {
            PostgresError::InvalidUrl { .. } | PostgresError::SchemaNewer { .. } => {
                Error::InvalidRequest(e.to_string())
            }
            PostgresError::Connect { .. } => Error::StorageUnavailable(Cause::of(e)),
            PostgresError::Migration { .. } | PostgresError::Query(_) => {
                Error::Storage(Cause::of(e))
            }
        }
    }
}

impl super::committer::Executor for PgBackend {
    fn run_batch(
        &self,
        batch: &[super::committer::Job],
    ) -> Result<Vec<(crate::Erased, writer::Published)>> {
        self.transaction_of(batch)
    }

    fn run_alone(
        &self,
        sink: &dyn crate::Sink,
        health: &Arc<Health>,
        job: &super::committer::Job,
    ) -> Result<crate::Erased> {
        self.write(sink, health, job.request_id.clone(), &job.run)
    }
}

/// The commit notices of `frames`: one per session, with its newest seq.
fn notices<'a>(
    frames: impl Iterator<Item = &'a (Arc<str>, sessiond_model::frame::Frame)>,
) -> Vec<String> {
    super::fanout::committed_notices(frames.map(|(session, frame)| (&**session, frame.seq)))
}

/// How many times a write that keeps losing lock races runs before its caller is answered
/// [`Error::StorageBusy`] (503 `storage_busy`).
pub(crate) const WRITE_ATTEMPTS: u32 = 6;

/// The wait before attempt `attempt + 1`: 5 ms doubling up to 80 ms, each drawn at random from
/// its upper half, so that transactions that collided do not collide again in step.
fn retry_backoff(attempt: u32) -> std::time::Duration {
    let ceiling = 5u64 << attempt.saturating_sub(1).min(4);
    let mut b = [0u8; 8];
    let draw = getrandom::fill(&mut b).map_or(0, |()| u64::from_le_bytes(b));
    std::time::Duration::from_millis(ceiling / 2 + draw % (ceiling / 2 + 1))
}

impl PgBackend {
    /// Connects, migrates and opens the pool. Callable from any thread, inside a runtime or not.
    pub(crate) fn open(url: &str, settings: &PoolSettings) -> Result<PgBackend> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sessiond-pg")
            .enable_all()
            .build()
            .map_err(|e| Error::Internal(format!("cannot start the PostgreSQL runtime: {e}")))?;
        let handle = runtime.handle().clone();
        // `block_on` may not run on an async thread: open from a thread of its own.
        let opened = std::thread::scope(|s| {
            s.spawn(|| handle.block_on(Postgres::open(url, settings)))
                .join()
                .map_err(|_| Error::Internal("opening PostgreSQL panicked".into()))
        })?;
        let db = match opened {
            Ok(db) => db,
            Err(e) => {
                runtime.shutdown_background();
                return Err(e.into());
            }
        };
        Ok(PgBackend {
            db,
            handle,
            runtime: Mutex::new(Some(runtime)),
            stop: tokio::sync::watch::channel(false).0,
            notifier: std::sync::OnceLock::new(),
            signals: Arc::new(std::sync::OnceLock::new()),
            committers: Arc::default(),
            presence: Arc::default(),
        })
    }

    /// Starts the fan-out between processes: what others commit and stream reaches `sink`, and
    /// what is streamed here reaches theirs (see [`super::fanout`]).
    pub(crate) fn start_fanout(&self, sink: &Arc<dyn Sink>) {
        let config = self.db.config();
        let notifier = super::fanout::notifier(
            &self.handle,
            config.clone(),
            self.db.tls(),
            self.stop.subscribe(),
        );
        let peers = super::fanout::Peers::new(notifier.clone(), Arc::clone(&self.presence));
        super::fanout::spawn_listener(
            &self.handle,
            config,
            self.db.tls(),
            Arc::clone(sink),
            Arc::clone(&self.signals),
            Arc::clone(&peers),
            self.stop.subscribe(),
        );
        sink.set_relay(Box::new(peers));
        let _ = self.notifier.set(notifier);
    }

    /// Starts the threads that commit the async callers' writes in batches: half as many as the
    /// pool has connections (the rest serve reads and the blocking callers). A batch runs its
    /// statements one after the other, each a round trip, so it is the number of batches in
    /// flight that keeps the server busy: with 64 clients on two cores, 2 committers made 0.74×
    /// the turns of a transaction per write, 4 made 1.0×, 8 made 1.28×, 12 and 16 no more
    /// (`bench_multi postgres-1`).
    pub(crate) fn start_committers(
        self: &Arc<Self>,
        sink: &Arc<dyn crate::Sink>,
        health: &Arc<Health>,
    ) -> Result<()> {
        let n = (self.db.pool().status().max_size / 2).max(1);
        let executor: Arc<dyn super::committer::Executor> = Arc::clone(self) as _;
        self.committers.start(n, &executor, sink, health)
    }

    /// Queues a write for the committers; `job.reply` hears its outcome after its COMMIT.
    pub(crate) fn submit(&self, job: super::committer::Job) {
        self.committers.submit(job);
    }

    /// Tells whichever process runs the session's turn (see [`crate::TurnSignal`]).
    pub(crate) fn signal_turn(&self, key: &crate::SessionKey, signal: crate::TurnSignal) {
        if let (Some(notifier), Some(notice)) =
            (self.notifier.get(), super::fanout::turn_notice(key, signal))
            && notifier.try_send(notice).is_err()
        {
            tracing::warn!(session = %key.id, ?signal, "the notice queue is full; a turn signal was not sent");
        }
    }

    /// Hands the signals other processes send for this process's turns to `hook` (once).
    pub(crate) fn on_turn_signal(&self, hook: crate::SignalHook) {
        let _ = self.signals.set(hook);
    }

    pub(crate) fn url(&self) -> &super::DatabaseUrl {
        self.db.url()
    }

    /// A pooled connection, waiting for one (blocking). One the server closed while it sat in
    /// the pool is noticed here (see `sql::pg::Connection::is_usable`), left out of the pool,
    /// and another taken.
    fn session(&self) -> Result<Session> {
        // Every idle connection may have been closed at once (the server restarted): one more
        // try than the pool holds reaches a fresh connection.
        for _ in 0..=self.db.pool().status().max_size {
            let conn = self.handle.block_on(self.db.client())?;
            if conn.is_usable() {
                return Ok(Session::new(conn));
            }
            drop(deadpool::managed::Object::take(conn));
        }
        Err(Error::StorageUnavailable(
            "every PostgreSQL connection taken from the pool was closed".into(),
        ))
    }

    /// Runs a read on a pooled connection (blocking).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Db<'_>) -> Result<T>) -> Result<T> {
        let session = self.session()?;
        f(&Db::postgres(&session))
    }

    /// Runs a write job as one transaction and, once it committed, publishes its frames
    /// (blocking). A transaction that lost a lock race ([`Error::StorageBusy`]: a deadlock or a
    /// serialization failure, which PostgreSQL rolled back whole) runs again from the start in a
    /// new one, up to [`WRITE_ATTEMPTS`] times with a short jittered backoff, so that the lock
    /// order of concurrent units never reaches a caller. Nothing is applied twice: a failed
    /// attempt left nothing behind, and frames are published only after the COMMIT that
    /// succeeded.
    pub(crate) fn write<T>(
        &self,
        sink: &dyn Sink,
        health: &Arc<Health>,
        request_id: Option<String>,
        f: impl Fn(&mut Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut attempt = 1;
        let result = loop {
            match self.transaction(request_id.clone(), &f) {
                Err(Error::StorageBusy(detail)) if attempt < WRITE_ATTEMPTS => {
                    crate::metrics::METRICS.write_retries.inc();
                    tracing::debug!(attempt, error = %detail, "a write lost a lock race; running it again");
                    std::thread::sleep(retry_backoff(attempt));
                    attempt += 1;
                }
                other => break other,
            }
        };
        match &result {
            Ok(_) => health.committed(),
            Err(e) => {
                if health.failed(e) {
                    self.probe(Arc::clone(health));
                }
            }
        }
        let (value, published) = result?;
        writer::publish_committed(sink, published);
        Ok(value)
    }

    fn transaction<T>(
        &self,
        request_id: Option<String>,
        f: impl FnOnce(&mut Tx<'_>) -> Result<T>,
    ) -> Result<(T, writer::Published)> {
        self.in_transaction(
            "BEGIN",
            |db| writer::run_alone(db, request_id, f),
            |(_, published)| notices(published.iter()),
        )
    }

    /// Runs the jobs of a batch one after the other in one transaction (see [`super::committer`]):
    /// each job's value and frames, or the first failure (the transaction rolled back).
    fn transaction_of(
        &self,
        batch: &[super::committer::Job],
    ) -> Result<Vec<(crate::Erased, writer::Published)>> {
        self.in_transaction(
            super::committer::BEGIN_BATCH,
            |db| {
                batch
                    .iter()
                    .map(|job| writer::run_alone(db, job.request_id.clone(), |tx| (job.run)(tx)))
                    .collect::<Result<Vec<_>>>()
            },
            |done| notices(done.iter().flat_map(|(_, published)| published.iter())),
        )
    }

    /// Runs `run` in a transaction begun with `begin` and commits it with the commit notices
    /// `notices_of` names (sent with the COMMIT: the other processes hear of the appends when,
    /// and only if, they commit), or with none while no other process listens. A failure or a
    /// panic rolls it back.
    fn in_transaction<R>(
        &self,
        begin: &'static str,
        run: impl FnOnce(&Db<'_>) -> Result<R>,
        notices_of: impl FnOnce(&R) -> Vec<String>,
    ) -> Result<R> {
        let session = self.session()?;
        session.begin(begin);
        let outcome = {
            let db = Db::postgres(&session);
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&db))) {
                Ok(Ok(done)) => {
                    // Held until the COMMIT returns: a process that arrives meanwhile hears of
                    // this commit through the resync that waits for it.
                    let quiet = self.presence.quiet();
                    let notices = match quiet {
                        Some(_) => Vec::new(),
                        None => notices_of(&done),
                    };
                    let committed = session.commit_notifying(super::fanout::CHANNEL, &notices);
                    drop(quiet);
                    committed.map(|()| done).map_err(Error::from)
                }
                Ok(Err(e)) => Err(e),
                Err(_) => {
                    tracing::error!("a write job panicked; its transaction was rolled back");
                    Err(Error::Internal("the write job failed".into()))
                }
            }
        };
        if outcome.is_err() && session.rollback().is_err() {
            // A connection whose transaction cannot be ended must not serve anyone else.
            session.discard();
        }
        outcome
    }

    /// While the store is degraded, tries a connection and a trivial statement every
    /// [`PROBE_INTERVAL`](crate::health::PROBE_INTERVAL); success turns it healthy again.
    fn probe(&self, health: Arc<Health>) {
        let pool = self.db.pool().clone();
        let handle = self.handle.clone();
        let prober = Arc::clone(&health);
        prober.spawn_prober("sessiond-pg-probe", move || {
            if pool.is_closed() {
                return Probe::Closed;
            }
            let ok = match handle.block_on(pool.get()) {
                Ok(c) => c.block_on(c.client().simple_query("SELECT 1")).is_ok(),
                Err(_) => false,
            };
            if ok {
                health.committed();
            }
            Probe::Tried
        });
    }

    /// Whether the database takes writes (not a standby, not read-only).
    pub(crate) fn check_writable(&self) -> Result<()> {
        let writable: bool = self.read(|db| {
            Ok(db.query_row(
                "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'",
                (),
                |r| r.get(0),
            )?)
        })?;
        if writable {
            Ok(())
        } else {
            Err(Error::StorageUnavailable(
                "the database is read-only".into(),
            ))
        }
    }

    /// Callers waiting for a pooled connection (a metric).
    pub(crate) fn waiting(&self) -> usize {
        self.db.pool().status().waiting
    }

    pub(crate) fn close(&self) {
        self.committers.close();
        self.stop.send_replace(true);
        self.db.pool().close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_waits_are_short_jittered_and_bounded() {
        let mut seen = std::collections::BTreeSet::new();
        for attempt in 1..WRITE_ATTEMPTS + 4 {
            let ceiling = 5u64 << (attempt - 1).min(4);
            for _ in 0..50 {
                let ms = retry_backoff(attempt).as_millis() as u64;
                assert!(
                    (ceiling / 2..=ceiling).contains(&ms),
                    "attempt {attempt}: {ms} ms"
                );
                seen.insert((attempt, ms));
            }
        }
        assert!(retry_backoff(100) <= std::time::Duration::from_millis(80));
        // Drawn, not fixed: the later attempts' waits vary.
        assert!(seen.iter().filter(|(a, _)| *a == 5).count() > 1, "{seen:?}");
    }
}
