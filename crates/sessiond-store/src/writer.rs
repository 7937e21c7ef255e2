//! The writer thread: the only connection that writes, committing many requests per transaction.
//!
//! Callers hand in closures; the writer takes whatever is queued (up to `max_batch`), runs each in
//! its own savepoint, commits once, then answers every caller and only then publishes the committed
//! frames to the bus in commit order (waking every subscriber is the slow part; a request's answer
//! does not wait for it). Nothing is answered or published before COMMIT. Group commit is what
//! makes many small durable appends cheap.
//!
//! A job that writes with one statement cannot fail halfway (SQLite undoes a failed statement by
//! itself), so it needs no savepoint. That is a property of the job's type, not of what it happens
//! to do: [`OneWrite`] lends a job the transaction for reads and offers writes that consume it, so
//! such a job writes at most once. A job of that type that fails or panics after its write (a bug)
//! takes its whole batch with it rather than commit half of itself.
//!
//! A savepoint costs a job more than its statements' share: SQLite copies every page the job
//! touches into the savepoint's journal first. The turn's own units (the claim that starts it and
//! the terminal that ends it, two of a turn's three jobs) make every check they can fail on
//! before their first write; after it only the storage can fail them, and a storage fault ends
//! the batch anyway. They run as *checked* jobs ([`WriterHandle::write_checked`]), without a
//! savepoint; the writer sees whether a failing job had changed a row (SQLite's count of changed
//! rows moved), and if it had (a bug), the whole batch is rolled back, as for a [`OneWrite`].
//!
//! A batch that cannot commit (disk full, I/O error) answers every caller with the classified
//! storage error and records it in the store's [`Health`]; SQLite may roll the whole transaction
//! back on such errors by itself, so a job whose statement finds the transaction gone ends the
//! batch rather than letting later jobs run outside it.
//!
//! Because this thread is the only writer, it also keeps each session's event counters
//! (`last_event_seq`, `last_output_seq`) in memory: an append only inserts its event row, and the
//! session row's counters are written once per session per batch, in the same transaction, just
//! before COMMIT. Readers therefore always see counters and events that agree.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use rusqlite::Connection;

use super::sql::{Db, Dialect, OptionalExtension};
use tokio::sync::{mpsc, oneshot};

use super::health::{Health, Probe};
use super::prompt_backlog::{Backlog, Change, Waiting};
use super::sink::Sink;
use crate::clock;
use crate::error::{Error, Result};
use crate::metrics::METRICS;
use sessiond_model::frame::Frame;

/// What a job hands back: whether it succeeded (keep its savepoint) and how to answer its caller
/// once the batch's fate is known.
type Completion = Box<dyn FnOnce(Result<()>) + Send>;
/// Given the transaction, a job runs; given `None` (the batch could not begin, or died before its
/// turn), it only yields the completion that answers its caller with the batch's error.
type RunJob = Box<dyn FnOnce(Option<&mut Tx<'_>>) -> JobOutcome + Send>;

struct Job {
    run: RunJob,
    /// The job may fail after a write, so it runs in its own savepoint; `false` for [`OneWrite`]
    /// and checked jobs.
    savepoint: bool,
}

impl Job {
    fn refuse(self, e: &Error) {
        ((self.run)(None).completion)(Err(e.clone()));
    }
}

struct JobOutcome {
    /// The job succeeded: keep its savepoint.
    keep: bool,
    /// The job is the prober's write (it changes no row, yet writes a page).
    probe: bool,
    /// The storage fault the job failed with, if any (it tells the store's health).
    fault: Option<Error>,
    completion: Completion,
}

/// A session's event counters between flushes to its row, and the milestones the batch's appends
/// reached (what `last_terminal_seq` and `last_message_at` become).
///
/// The milestones follow rare events (a terminal, a prompt, an answer) but every turn has some,
/// and each was an `UPDATE` of the session's row of its own; written with the counters, a turn
/// rewrites the row once per batch for them all. Only the `/v2` record reads them, outside the
/// writer, after the batch has committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counters {
    pub last_event_seq: u64,
    pub last_output_seq: u64,
    /// The session was deleted in this batch: nothing may be appended to it.
    pub deleted: bool,
    /// The seq of the last terminal appended since the row was last written, if any.
    pub last_terminal_seq: Option<u64>,
    /// When the last prompt or answer was appended since the row was last written, if any.
    pub last_message_at: Option<i64>,
    /// The session's row holds these already: a statement of the job that rewrote the row after
    /// its last append carried them ([`Tx::unwritten_counters`]), so the flush leaves the row
    /// alone. Any later append makes them unwritten again ([`Tx::set_counters`]).
    pub in_row: bool,
}

impl Counters {
    /// The row's counter columns as a statement binds them: last event seq, last output seq,
    /// last terminal seq and last message time, each `NULL` where the row keeps its value
    /// (`COALESCE(?, column)`).
    pub(crate) fn columns(c: Option<Counters>) -> [Option<i64>; 4] {
        match c {
            Some(c) => [
                Some(c.last_event_seq as i64),
                Some(c.last_output_seq as i64),
                c.last_terminal_seq.map(|s| s as i64),
                c.last_message_at,
            ],
            None => [None; 4],
        }
    }
}

/// Sessions whose counters the newer generation of the cache holds before it becomes the older
/// one (a miss only costs one read of the row).
const COUNTER_CACHE_GENERATION: usize = 8_192;

/// Committed counters of recently written sessions: two generations, so the cache holds at most
/// `2 × COUNTER_CACHE_GENERATION` sessions however many were ever written, and a session written
/// in the last generation is always found. An entry is the two seqs only: a committed session
/// has no milestone waiting for its row, and a deleted one leaves the cache.
#[derive(Default)]
pub(crate) struct CounterCache {
    new: HashMap<i64, [u64; 2]>,
    old: HashMap<i64, [u64; 2]>,
}

impl CounterCache {
    fn get(&self, pk: &i64) -> Option<Counters> {
        let [last_event_seq, last_output_seq] = *self.new.get(pk).or_else(|| self.old.get(pk))?;
        Some(Counters {
            last_event_seq,
            last_output_seq,
            ..Counters::default()
        })
    }

    /// Keeps `c` as committed (its milestones are in the row now).
    fn insert(&mut self, pk: i64, c: Counters) {
        if self.new.len() >= COUNTER_CACHE_GENERATION && !self.new.contains_key(&pk) {
            self.old = std::mem::take(&mut self.new);
        }
        self.new.insert(pk, [c.last_event_seq, c.last_output_seq]);
    }

    fn remove(&mut self, pk: &i64) {
        self.new.remove(pk);
        self.old.remove(pk);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.new.len() + self.old.len()
    }
}

/// The write transaction as a job sees it.
pub struct Tx<'c> {
    pub(crate) conn: &'c Db<'c>,
    /// Wall-clock time of this job, in ms; one value for every row it writes.
    pub now: i64,
    published: Vec<(Arc<str>, Frame)>,
    /// Counters as committed (they match the rows).
    committed: &'c CounterCache,
    /// Counters changed by earlier jobs of this batch that succeeded.
    batch: &'c HashMap<i64, Counters>,
    /// Counters changed by this job; dropped if the job fails.
    job: HashMap<i64, Counters>,
    /// Counters read by this job on PostgreSQL, where reading them locks the session's row for
    /// the rest of the transaction ([`Tx::counters`], [`Tx::lock`]): read once, locked once.
    locked: std::cell::RefCell<HashMap<i64, Counters>>,
    /// The HTTP request that handed in this job (`X-Request-Id`), kept with the inputs it stores.
    pub(crate) request_id: Option<String>,
    /// A [`OneWrite`] job's write succeeded: the job can no longer fail without leaving it behind.
    wrote_once: bool,
    /// Prompts this job indexes for search, written after the batch's last job (see
    /// [`QueuedPrompt`]); dropped if the job fails.
    pub(crate) prompts: Vec<QueuedPrompt>,
}

/// A prompt to index for search, recorded in the search backlog once the batch's jobs have run
/// (see `prompt_backlog`).
///
/// SQLite's full-text tables write what they hold in memory to a segment of their own at every
/// savepoint of the transaction, and every job but a [`OneWrite`] runs in one: indexing each
/// prompt inside its job made one segment (and a rewrite of the index's structure record, and
/// merge work later) per prompt. Indexed outside every savepoint, many prompts make one segment
/// together.
#[derive(Debug)]
pub(crate) struct QueuedPrompt {
    pub key: super::SessionKey,
    pub seq: u64,
    pub text: String,
}

impl<'c> Tx<'c> {
    /// The counters of a session as this job sees them; `None` when the session does not exist.
    ///
    /// On PostgreSQL the read locks the session's row (`FOR NO KEY UPDATE`) until the transaction
    /// ends: jobs of other processes that append to the same session wait, so that seqs stay
    /// gap-free and in order (SQLite's single writer needs no lock).
    pub(crate) fn counters(&self, pk: i64) -> super::sql::Result<Option<Counters>> {
        if let Some(c) = self
            .job
            .get(&pk)
            .or_else(|| self.batch.get(&pk))
            .copied()
            .or_else(|| self.committed.get(&pk))
            .or_else(|| self.locked.borrow().get(&pk).copied())
        {
            return Ok((!c.deleted).then_some(c));
        }
        let sql = match self.conn.dialect() {
            Dialect::Sqlite => "SELECT last_event_seq, last_output_seq FROM sessions WHERE pk = ?1",
            Dialect::Postgres => {
                "SELECT last_event_seq, last_output_seq FROM sessions WHERE pk = ?1 FOR NO KEY UPDATE"
            }
        };
        let read = self
            .conn
            .prepare_cached(sql)?
            .query_row([pk], |r| {
                Ok(Counters {
                    last_event_seq: r.get::<_, i64>(0)? as u64,
                    last_output_seq: r.get::<_, i64>(1)? as u64,
                    ..Counters::default()
                })
            })
            .optional()?;
        if let Some(c) = read
            && self.conn.dialect() == Dialect::Postgres
        {
            self.locked_counters(pk, c.last_event_seq, c.last_output_seq);
        }
        Ok(read)
    }

    /// Notes the counters of session `pk` as read by a statement that locked its row
    /// (PostgreSQL), unless this job has its own already.
    pub(crate) fn locked_counters(&self, pk: i64, last_event_seq: u64, last_output_seq: u64) {
        if !self.job.contains_key(&pk) {
            self.locked.borrow_mut().insert(
                pk,
                Counters {
                    last_event_seq,
                    last_output_seq,
                    ..Counters::default()
                },
            );
        }
    }

    /// Whether this transaction holds the lock of session `pk`'s row already (PostgreSQL: it
    /// read the session's counters).
    pub(crate) fn holds_session_lock(&self, pk: i64) -> bool {
        self.job.contains_key(&pk) || self.locked.borrow().contains_key(&pk)
    }

    pub(crate) fn set_counters(&mut self, pk: i64, c: Counters) {
        self.job.insert(pk, Counters { in_row: false, ..c });
    }

    /// The counters this job changed for session `pk` and the row does not hold yet, for a
    /// statement that rewrites the row after the job's last append to it (a turn's end, a
    /// message's turn status) to write with its own columns: one `UPDATE` of the row where the
    /// flush would make a second. The caller then calls [`Tx::counters_written`].
    pub(crate) fn unwritten_counters(&self, pk: i64) -> Option<Counters> {
        self.job
            .get(&pk)
            .copied()
            .filter(|c| !c.in_row && !c.deleted)
    }

    /// The row of session `pk` now holds the counters [`Tx::unwritten_counters`] gave.
    pub(crate) fn counters_written(&mut self, pk: i64) {
        if let Some(c) = self.job.get_mut(&pk) {
            c.in_row = true;
        }
    }

    /// Counters changed in this batch (not yet in the row), for reads inside a job.
    pub(crate) fn pending_counters(&self, pk: i64) -> Option<Counters> {
        self.job.get(&pk).or_else(|| self.batch.get(&pk)).copied()
    }

    /// Queues a frame for the bus; it is sent only if this job's savepoint and the batch commit.
    pub(crate) fn publish(&mut self, session_id: &str, frame: Frame) {
        self.published.push((Arc::from(session_id), frame));
    }
}

#[cfg(feature = "postgres")]
/// Frames a job queued for the bus, by session, in order.
pub(crate) type Published = Vec<(Arc<str>, Frame)>;

#[cfg(feature = "postgres")]
/// Runs one job on its own, inside a transaction the caller began and will end (the PostgreSQL
/// backend, where every job is a transaction of its own and other processes write too): no
/// counter cache, the counters of the sessions it appended to written to their rows before it
/// returns. On success, the frames to publish once the caller has committed.
pub(super) fn run_alone<T>(
    conn: &Db<'_>,
    request_id: Option<String>,
    f: impl FnOnce(&mut Tx<'_>) -> Result<T>,
) -> Result<(T, Published)> {
    let committed = CounterCache::default();
    let batch = HashMap::new();
    let mut tx = Tx {
        conn,
        now: clock::now_ms(),
        published: Vec::new(),
        committed: &committed,
        batch: &batch,
        job: HashMap::new(),
        request_id,
        wrote_once: false,
        locked: Default::default(),
        prompts: Vec::new(),
    };
    let value = f(&mut tx)?;
    for p in std::mem::take(&mut tx.prompts) {
        tx.write_prompt_index(&p.key, p.seq, &p.text)?;
    }
    flush_counters(conn, &tx.job, tx.now)?;
    Ok((value, std::mem::take(&mut tx.published)))
}

#[cfg(feature = "postgres")]
/// Publishes what a committed transaction appended: the bus learns the committed seqs first (see
/// `commit_batch`), then every frame goes out in order.
pub(super) fn publish_committed(sink: &dyn Sink, published: Published) {
    sink.committed(
        &mut published
            .iter()
            .filter_map(|(session_id, f)| Some((&**session_id, f.seq?))),
    );
    METRICS.events_appended.add(published.len() as u64);
    for (session_id, frame) in published {
        sink.publish(&session_id, frame);
    }
}

/// A job that writes at most once (one statement): it runs without a savepoint. It reads through
/// [`OneWrite::tx`] (a shared borrow, on which no write method of [`Tx`] can be called) and
/// writes with a method that consumes it.
pub struct OneWrite<'t, 'c> {
    tx: &'t mut Tx<'c>,
}

#[cfg(feature = "postgres")]
impl<'t, 'c> OneWrite<'t, 'c> {
    pub(super) fn new(tx: &'t mut Tx<'c>) -> OneWrite<'t, 'c> {
        OneWrite { tx }
    }
}

impl<'c> OneWrite<'_, 'c> {
    /// The transaction, to read (what the job reads is consistent with what it writes).
    pub fn tx(&self) -> &Tx<'c> {
        self.tx
    }

    /// Appends one durable event that is one `INSERT` (and the writer's in-memory counters): any
    /// type but a terminal, which may also queue webhook messages; a terminal is refused before
    /// anything is written.
    pub fn append(self, key: &super::SessionKey, event: &crate::timeline::Event) -> Result<u64> {
        if crate::timeline::is_terminal_type(event.type_name()) {
            return Err(Error::Internal(format!(
                "a {} event may be more than one write",
                event.type_name()
            )));
        }
        let seq = self.tx.append(key, event)?;
        self.tx.wrote_once = true;
        Ok(seq)
    }
}

pub struct WriterHandle {
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The prompts waiting for the search index.
    prompts: Arc<Waiting>,
}

/// What the writer thread shares with the rest of the store.
struct Shared {
    sink: Arc<dyn Sink>,
    health: Arc<Health>,
    /// For the prober; weak, so that closing the store still ends the writer.
    sender: mpsc::WeakSender<Job>,
}

pub fn spawn(
    conn: Connection,
    max_batch: usize,
    sink: Arc<dyn Sink>,
    health: Arc<Health>,
) -> Result<WriterHandle> {
    let (tx, rx) = mpsc::channel::<Job>(max_batch.max(1) * 8);
    let backlog = Backlog::open(&conn);
    let prompts = backlog.waiting();
    let shared = Shared {
        sink,
        health,
        sender: tx.downgrade(),
    };
    let thread = std::thread::Builder::new()
        .name("sessiond-writer".into())
        .spawn(move || run(conn, rx, max_batch, shared, backlog))
        .map_err(|e| Error::Internal(format!("cannot start writer thread: {e}")))?;
    Ok(WriterHandle {
        sender: Mutex::new(Some(tx)),
        thread: Mutex::new(Some(thread)),
        prompts,
    })
}

fn make_job<T, F>(f: F) -> (Job, oneshot::Receiver<Result<T>>)
where
    F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    make_job_with(true, f)
}

fn make_job_with<T, F>(savepoint: bool, f: F) -> (Job, oneshot::Receiver<Result<T>>)
where
    F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    let (reply, rx) = oneshot::channel();
    let request_id = crate::request_id::current();
    let run: RunJob = Box::new(move |tx: Option<&mut Tx<'_>>| {
        let Some(tx) = tx else {
            return JobOutcome {
                keep: false,
                probe: false,
                fault: None,
                completion: Box::new(move |batch: Result<()>| {
                    let e = batch
                        .err()
                        .unwrap_or_else(|| Error::Internal("write job was not run".into()));
                    let _ = reply.send(Err(e));
                }),
            };
        };
        tx.request_id = request_id;
        match f(tx) {
            Ok(value) => JobOutcome {
                keep: true,
                probe: false,
                fault: None,
                completion: Box::new(move |committed: Result<()>| {
                    let _ = reply.send(committed.map(|()| value));
                }),
            },
            Err(e) => JobOutcome {
                keep: false,
                probe: false,
                fault: e.is_storage_fault().then(|| e.clone()),
                completion: Box::new(move |_| {
                    let _ = reply.send(Err(e));
                }),
            },
        }
    });
    (Job { run, savepoint }, rx)
}

impl WriterHandle {
    fn sender(&self) -> Result<mpsc::Sender<Job>> {
        self.sender
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or(Error::ShuttingDown)
    }

    pub async fn write<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (job, rx) = make_job(f);
        self.run(job, rx).await
    }

    /// Queues `job` and waits for its answer (after its batch's COMMIT).
    async fn run<T>(&self, job: Job, rx: oneshot::Receiver<Result<T>>) -> Result<T> {
        self.sender()?
            .send(job)
            .await
            .map_err(|_| Error::ShuttingDown)?;
        rx.await
            .map_err(|_| Error::Internal("write job was dropped".into()))?
    }

    /// Like [`WriterHandle::write`] for a job that writes at most once: no savepoint.
    pub async fn write_one<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(OneWrite<'_, '_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (job, rx) = make_job_with(false, move |tx: &mut Tx<'_>| f(OneWrite { tx }));
        self.run(job, rx).await
    }

    /// Like [`WriterHandle::write`] for a job that makes every check it can fail on before its
    /// first write: no savepoint (see the module's doc). Should it fail after writing anyway, its
    /// batch is rolled back and every caller in it answered with an error.
    pub async fn write_checked<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (job, rx) = make_job_with(false, f);
        self.run(job, rx).await
    }

    pub fn write_blocking<T, F>(&self, f: F) -> Result<T>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
        T: Send + 'static,
    {
        let (job, rx) = make_job(f);
        self.sender()?
            .blocking_send(job)
            .map_err(|_| Error::ShuttingDown)?;
        rx.blocking_recv()
            .map_err(|_| Error::Internal("write job was dropped".into()))?
    }

    /// Has the prompts that wait for the search index indexed, so that a search that follows
    /// finds every prompt committed before it asked (see `prompt_backlog`). Without waiting
    /// prompts, returns at once. A write that cannot be made (a full disk) leaves the search to
    /// the prompts already indexed rather than failing it: reads work on a full disk.
    pub async fn flush_prompts(&self) {
        if !self.prompts.any() {
            return;
        }
        self.prompts.want();
        if let Err(e) = self.write(|_| Ok(())).await {
            tracing::debug!(error = %e, "the prompt search backlog was not indexed before a search");
        }
    }

    /// [`WriterHandle::flush_prompts`] for a caller outside the runtime; a write that cannot be
    /// made is its error.
    pub fn flush_prompts_blocking(&self) -> Result<()> {
        if !self.prompts.any() {
            return Ok(());
        }
        self.prompts.want();
        self.write_blocking(|_| Ok(()))
    }

    /// Write requests waiting in the writer's queue.
    pub(crate) fn queue_depth(&self) -> usize {
        self.sender
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map_or(0, |s| s.max_capacity() - s.capacity())
    }

    /// Drops the queue's sender and joins the thread once everything queued is committed.
    pub fn close(&self) {
        self.sender.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

/// Savepoint statements run once per job, BEGIN and COMMIT once per batch; keep them prepared.
fn exec_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn run(
    conn: Connection,
    mut rx: mpsc::Receiver<Job>,
    max_batch: usize,
    shared: Shared,
    mut backlog: Backlog,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(max_batch);
    let mut counters = CounterCache::default();
    // Without it SQLite checkpoints inside the writer's commits, as it would by default.
    let mut checkpointer = match super::checkpoint::Checkpointer::start(&conn) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "checkpoints stay on the writer thread");
            None
        }
    };
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        take_queued(&mut rx, &mut batch, max_batch);
        match commit_batch(
            &conn,
            &mut batch,
            &*shared.sink,
            &mut counters,
            &mut backlog,
        ) {
            Ok(wrote) => {
                if wrote {
                    shared.health.committed();
                    if let Some(c) = checkpointer.as_mut() {
                        c.after_commit(&conn);
                    }
                }
            }
            Err(e) => {
                let reason = match e {
                    Error::StorageFull(_) => "full",
                    Error::StorageUnavailable(_) => "unavailable",
                    _ => "other",
                };
                METRICS.commit_failures.with(&[reason]).inc();
                if shared.health.failed(&e) {
                    start_prober(Arc::clone(&shared.health), shared.sender.clone());
                }
            }
        }
    }
    // The checkpointer's last checkpoint ends before the writer's connection closes.
    drop(checkpointer);
    tracing::debug!("writer stopped");
}

/// Adds to `batch` (up to `max` in all) what is queued behind its first job. When the queue runs
/// dry, the producers get one chance (a yield of this thread) to add to the batch before it pays
/// for a commit. Public for the benchmark's bare group commit, which batches by the same rule.
pub fn take_queued<T>(rx: &mut mpsc::Receiver<T>, batch: &mut Vec<T>, max: usize) {
    let mut yielded = false;
    while batch.len() < max {
        match rx.try_recv() {
            Ok(job) => batch.push(job),
            Err(_) if !yielded => {
                yielded = true;
                std::thread::yield_now();
            }
            Err(_) => break,
        }
    }
}

/// While the store is degraded, submits a probe write every [`PROBE_INTERVAL`]; its commit (or
/// any other) turns the store healthy again. Stops once healthy, or when the store closes.
fn start_prober(health: Arc<Health>, sender: mpsc::WeakSender<Job>) {
    health.spawn_prober("sessiond-probe", move || {
        let Some(sender) = sender.upgrade() else {
            return Probe::Closed;
        };
        let (job, rx) = make_job(|tx: &mut Tx<'_>| match tx.conn.as_sqlite() {
            Some(conn) => rewrite_user_version(conn),
            None => Ok(()),
        });
        let run = job.run;
        let job = Job {
            run: Box::new(move |tx| JobOutcome {
                probe: true,
                ..run(tx)
            }),
            savepoint: job.savepoint,
        };
        if sender.blocking_send(job).is_err() {
            return Probe::Closed;
        }
        drop(sender);
        let _ = rx.blocking_recv();
        Probe::Tried
    });
}

/// A real write that changes nothing: `user_version` (the schema version) rewritten to itself.
/// It appends a page to the write-ahead log, so it fails exactly when other writes would.
pub(crate) fn rewrite_user_version(conn: &Connection) -> Result<()> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    conn.pragma_update(None, "user_version", version)?;
    Ok(())
}

/// Writes the batch's counters and milestones into the session rows (same transaction as the
/// events).
pub(super) fn flush_counters(
    conn: &Db<'_>,
    changed: &HashMap<i64, Counters>,
    now: i64,
) -> super::sql::Result<()> {
    let mut stmt = conn.prepare_cached(
        "UPDATE sessions SET last_event_seq = ?2, last_output_seq = ?3,
             updated_at = CASE WHEN updated_at > ?4 THEN updated_at ELSE ?4 END,
             last_terminal_seq = COALESCE(?5, last_terminal_seq),
             last_message_at = COALESCE(?6, last_message_at)
         WHERE pk = ?1",
    )?;
    for (pk, c) in changed.iter().filter(|(_, c)| !c.deleted && !c.in_row) {
        stmt.execute_later(sessiond_sql::params![
            pk,
            c.last_event_seq as i64,
            c.last_output_seq as i64,
            now,
            c.last_terminal_seq.map(|s| s as i64),
            c.last_message_at
        ])?;
    }
    Ok(())
}

/// Records the batch's prompts in the search backlog (after every job, outside their
/// savepoints: see [`QueuedPrompt`]), indexing the backlog when it is due (see
/// `prompt_backlog`). A prompt of a session a later job of the batch deleted is left out, as the
/// deletion removed the session's other search rows and waiting prompts.
fn record_prompts(
    db: &Db<'_>,
    changed: &HashMap<i64, Counters>,
    committed: &CounterCache,
    backlog: &Backlog,
    prompts: Vec<QueuedPrompt>,
) -> Result<Change> {
    let batch = HashMap::new();
    let mut tx = Tx {
        conn: db,
        now: clock::now_ms(),
        published: Vec::new(),
        committed,
        batch: &batch,
        job: HashMap::new(),
        request_id: None,
        wrote_once: false,
        locked: Default::default(),
        prompts: Vec::new(),
    };
    let kept = prompts
        .iter()
        .filter(|p| !changed.get(&p.key.pk).is_some_and(|c| c.deleted))
        .map(|p| (&p.key, p.seq, p.text.as_str()));
    backlog.take(db, kept, |key, seq, text| {
        tx.write_prompt_index(key, seq, text)
    })
}

/// Answers every job of `jobs` with `e` without running it.
fn refuse_all(jobs: impl Iterator<Item = Job>, e: &Error) {
    for job in jobs {
        job.refuse(e);
    }
}

/// Runs and commits one batch. Every caller is answered. `Ok(true)` when the commit wrote to the
/// database (a transaction whose jobs all failed commits nothing, and proves nothing about the
/// storage); the error (if any) is the storage fault the batch met, for the store's health.
fn commit_batch(
    conn: &Connection,
    batch: &mut Vec<Job>,
    sink: &dyn Sink,
    counters: &mut CounterCache,
    backlog: &mut Backlog,
) -> Result<bool> {
    let jobs_in_batch = batch.len();
    let changes_before = conn.total_changes();
    let mut probed = false;
    let mut completions: Vec<Completion> = Vec::with_capacity(batch.len());
    let mut published: Vec<(Arc<str>, Frame)> = Vec::new();
    let mut changed: HashMap<i64, Counters> = HashMap::new();
    let mut prompts: Vec<QueuedPrompt> = Vec::new();
    let db = Db::sqlite(conn);
    if let Err(e) = exec_cached(conn, "BEGIN IMMEDIATE") {
        let e = Error::from(e);
        // The store's health logs the change of state; each failure is detail.
        tracing::debug!(error = %e, "cannot begin a write transaction");
        refuse_all(batch.drain(..), &e);
        return Err(e);
    }
    // The first storage fault a job failed with: the store is degraded even if the rest commits.
    let mut fault: Option<Error> = None;
    let mut jobs = batch.drain(..);
    for job in jobs.by_ref() {
        let mut tx = Tx {
            conn: &db,
            now: clock::now_ms(),
            published: Vec::new(),
            committed: counters,
            batch: &changed,
            job: HashMap::new(),
            request_id: None,
            wrote_once: false,
            locked: Default::default(),
            prompts: Vec::new(),
        };
        if job.savepoint
            && let Err(e) = exec_cached(conn, "SAVEPOINT job")
        {
            job.refuse(&Error::from(e));
            continue;
        }
        let savepoint = job.savepoint;
        let changes_before_job = conn.total_changes();
        let outcome = catch_unwind(AssertUnwindSafe(|| (job.run)(Some(&mut tx))));
        let wrote = tx.wrote_once || conn.total_changes() != changes_before_job;
        match outcome {
            Ok(outcome) if outcome.keep => {
                probed |= outcome.probe;
                if savepoint {
                    let _ = exec_cached(conn, "RELEASE job");
                }
                published.append(&mut tx.published);
                prompts.append(&mut tx.prompts);
                let job_counters = std::mem::take(&mut tx.job);
                drop(tx);
                changed.extend(job_counters);
                completions.push(outcome.completion);
            }
            outcome => {
                if savepoint {
                    let _ = exec_cached(conn, "ROLLBACK TO job");
                    let _ = exec_cached(conn, "RELEASE job");
                } else if wrote {
                    // A job without a savepoint failed after writing: only the whole batch can
                    // take that write back.
                    tracing::error!(
                        "a job without a savepoint failed after writing; batch rolled back"
                    );
                    let e = Error::Internal("the write batch was abandoned".into());
                    let _ = conn.execute_batch("ROLLBACK");
                    if let Ok(outcome) = outcome {
                        completions.push(outcome.completion);
                    }
                    for completion in completions {
                        completion(Err(e.clone()));
                    }
                    refuse_all(jobs, &e);
                    return Err(e);
                }
                match outcome {
                    Ok(outcome) => {
                        if fault.is_none() {
                            fault = outcome.fault;
                        }
                        completions.push(outcome.completion);
                    }
                    Err(_) => {
                        tracing::error!("a write job panicked; its changes were rolled back");
                    }
                }
            }
        }
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (it may, on a full disk or an I/O error):
            // what earlier jobs did is gone, and later jobs must not run outside a transaction.
            let e = fault.take().unwrap_or_else(|| {
                Error::StorageUnavailable("the write transaction was rolled back".into())
            });
            tracing::debug!(error = %e, "write transaction lost; batch refused");
            for completion in completions {
                completion(Err(e.clone()));
            }
            refuse_all(jobs, &e);
            return Err(e);
        }
    }
    drop(jobs);
    let committed = record_prompts(&db, &changed, counters, backlog, prompts).and_then(|change| {
        flush_counters(&db, &changed, clock::now_ms())?;
        exec_cached(conn, "COMMIT")?;
        Ok(change)
    });
    match committed {
        Ok(change) => {
            // Before anyone is answered: a caller that searches next must know its prompt waits.
            backlog.committed(change);
            for (pk, c) in changed {
                if c.deleted {
                    counters.remove(&pk);
                } else {
                    counters.insert(pk, c);
                }
            }
            METRICS.commits.inc();
            METRICS.commit_batch_jobs.observe(jobs_in_batch as f64);
            METRICS.events_appended.add(published.len() as u64);
            // Answer first: a caller's answer must not wait behind every subscriber's wake-up.
            // The bus learns what is committed before anyone is answered, so that a volatile
            // frame an answered caller publishes next still follows the frames it knows of.
            sink.committed(
                &mut published
                    .iter()
                    .filter_map(|(session_id, f)| Some((&**session_id, f.seq?))),
            );
            for completion in completions {
                completion(Ok(()));
            }
            for (session_id, frame) in published {
                sink.publish(&session_id, frame);
            }
            match fault {
                Some(e) => Err(e),
                None => Ok(probed || conn.total_changes() != changes_before),
            }
        }
        Err(e) => {
            if e.is_storage_fault() {
                tracing::debug!(error = %e, "commit failed; batch rolled back");
            } else {
                tracing::error!(error = %e, "commit failed; batch rolled back");
            }
            if !conn.is_autocommit() {
                let _ = conn.execute_batch("ROLLBACK");
            }
            for completion in completions {
                completion(Err(e.clone()));
            }
            Err(e)
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::StoreConfig;
    use crate::timeline::{
        AgentLoopState, AgentStatus, CompleteStatus, Event, Sender, TurnState, TurnStateStatus,
    };
    use crate::{NewSession, SessionKey, Store};

    /// The workspace and agent of the first session of `store` (to create more beside it).
    async fn workspace_and_agent(store: &Store) -> (String, String) {
        store
            .read(|c| {
                Ok(
                    c.query_row("SELECT workspace_id, agent_id FROM sessions", [], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                    })?,
                )
            })
            .await
            .expect("session")
    }

    /// A store in `dir` with one bare session (for the store's unit tests).
    pub(crate) async fn store_with_session(dir: &std::path::Path) -> (Store, SessionKey) {
        store_publishing_to(dir, crate::sink::recorder::Recorder::new()).await
    }

    /// [`store_with_session`], publishing its commits to `sink`.
    async fn store_publishing_to(
        dir: &std::path::Path,
        sink: std::sync::Arc<dyn crate::Sink>,
    ) -> (Store, SessionKey) {
        let store =
            Store::open(&dir.join("store.db"), &StoreConfig::default(), sink).expect("open store");
        let key = store
            .write(|tx| {
                let ws = tx.ensure_workspace("w", "W")?;
                let agent: String = tx.conn.query_row(
                    "SELECT id FROM agents WHERE workspace_id = ?1",
                    [&ws],
                    |r| r.get(0),
                )?;
                let id = crate::ids::new_id();
                tx.insert_session(&NewSession::bare(&id, &ws, &agent, "u", "t"))
            })
            .await
            .expect("insert session");
        (store, key)
    }

    pub(crate) fn note(text: &str) -> Event {
        Event::NoteSubmitted {
            note: text.into(),
            sender: Sender::User {
                user_id: "u".into(),
            },
            client_request_id: None,
            images: Vec::new(),
            attachments: Vec::new(),
        }
    }

    async fn seqs(store: &Store, key: &SessionKey) -> Vec<i64> {
        let pk = key.pk;
        store
            .read(move |c| {
                let mut stmt =
                    c.prepare("SELECT seq FROM events WHERE session_pk = ?1 ORDER BY seq")?;
                let rows = stmt.query_map([pk], |r| r.get(0))?;
                Ok(rows.collect::<crate::sql::Result<Vec<i64>>>()?)
            })
            .await
            .expect("read seqs")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn single_write_jobs_keep_seqs_dense_when_some_of_them_fail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        let missing = SessionKey {
            pk: key.pk + 1_000,
            id: "missing".into(),
        };
        // Interleaved so that failing jobs share batches with succeeding ones.
        let mut tasks = Vec::new();
        for i in 0..200 {
            let store = store.clone();
            let key = if i % 3 == 0 {
                missing.clone()
            } else {
                key.clone()
            };
            tasks.push(tokio::spawn(async move {
                store
                    .write_one(move |w| w.append(&key, &note(&format!("n{i}"))))
                    .await
            }));
        }
        let mut ok = 0;
        for t in tasks {
            match t.await.expect("task") {
                Ok(_) => ok += 1,
                Err(e) => assert!(matches!(e, Error::NotFound), "{e}"),
            }
        }
        assert_eq!(ok, 133);
        assert_eq!(seqs(&store, &key).await, (1..=133).collect::<Vec<i64>>());
        store.close();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_single_write_job_that_fails_after_its_write_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        let k = key.clone();
        store
            .write_one(move |w| w.append(&k, &note("kept")))
            .await
            .expect("first note");
        let k = key.clone();
        let failed = store
            .write_one(move |w| {
                w.append(&k, &note("taken back"))?;
                Err::<(), _>(Error::invalid("the job changed its mind"))
            })
            .await;
        assert!(failed.is_err());
        let k = key.clone();
        let seq = store
            .write_one(move |w| w.append(&k, &note("after")))
            .await
            .expect("note after the failure");
        assert_eq!(seq, 2);
        assert_eq!(seqs(&store, &key).await, vec![1, 2]);
        // A terminal may queue webhook messages as well: more than one write, refused before
        // anything is written.
        let k = key.clone();
        let refused = store
            .write_one(move |w| {
                w.append(
                    &k,
                    &Event::Complete {
                        state: TurnState {
                            status: TurnStateStatus::Completed,
                            mode: serde_json::json!("agent"),
                            agent: AgentLoopState {
                                status: AgentStatus::Completed,
                                messages: Vec::new(),
                            },
                            todos: None,
                            follow_up_queue: None,
                        },
                        status: CompleteStatus::Completed,
                        result: None,
                        error: None,
                    },
                )
            })
            .await;
        assert!(matches!(refused, Err(Error::Internal(_))));
        assert_eq!(seqs(&store, &key).await, vec![1, 2]);
        store.close();
    }

    /// A checked job (no savepoint) that fails before writing leaves the rest of its batch
    /// alone; one that fails after writing takes its batch back, and every caller in it hears so.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checked_job_that_fails_after_writing_takes_its_batch_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        let k = key.clone();
        store
            .write_checked(move |tx| tx.append(&k, &note("kept")))
            .await
            .expect("first note");
        let k = key.clone();
        let refused = store
            .write_checked(move |tx| {
                tx.check_generation(&k, 99)?;
                tx.append(&k, &note("never"))
            })
            .await;
        assert!(matches!(refused, Err(Error::StaleTurn)), "{refused:?}");
        assert_eq!(seqs(&store, &key).await, vec![1]);
        // A note, a checked job that fails after its write, another note, queued together (they
        // usually share a batch; the checks below hold however the writer batches them).
        let writer = match &store.inner.backend {
            crate::Backend::Sqlite(db) => &db.writer,
            #[cfg(feature = "postgres")]
            _ => unreachable!("a SQLite store"),
        };
        let (k1, k2, k3) = (key.clone(), key.clone(), key.clone());
        let (first, bad, last) = tokio::join!(
            writer.write(move |tx| tx.append(&k1, &note("before"))),
            writer.write_checked(move |tx| {
                tx.append(&k2, &note("half"))?;
                Err::<u64, _>(Error::invalid("changed its mind after writing"))
            }),
            writer.write(move |tx| tx.append(&k3, &note("after"))),
        );
        assert!(bad.is_err());
        let kept: Vec<i64> = seqs(&store, &key).await;
        // Whatever shared the failed job's batch was refused, and nothing of it was kept; what
        // committed in a batch of its own is there, in order and without a gap.
        for (answer, _) in [(&first, "before"), (&last, "after")] {
            if let Ok(seq) = answer {
                assert!(kept.contains(&(*seq as i64)), "{seq} answered but not kept");
            }
        }
        assert_eq!(kept, (1..=kept.len() as i64).collect::<Vec<_>>());
        assert!(kept.len() <= 3, "{kept:?}");
        let k = key.clone();
        let seq = store
            .write_checked(move |tx| tx.append(&k, &note("later")))
            .await
            .expect("the writer goes on");
        assert_eq!(seq as usize, kept.len() + 1);
        store.close();
    }

    /// A session's prompts fill bounded search rows of a kilobyte or more, each keyed by its
    /// first prompt's seq; a word of the first prompt is still found after many more, and the
    /// rows leave with the session while another session's stay.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prompt_rows_stay_bounded_and_leave_with_their_session() {
        use super::super::prompt_rows::{PROMPT_CLASS_ENDS, PROMPT_ROW_BYTES};
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, gone) = store_with_session(dir.path()).await;
        let (ws, agent) = workspace_and_agent(&store).await;
        let g = gone.clone();
        let (kept, seqs) = store
            .write(move |tx| {
                let id = crate::ids::new_id();
                let kept = tx.insert_session(&NewSession::bare(&id, &ws, &agent, "u", "t"))?;
                // Prompts of about 300 bytes, a middle class's size: runs of them are joined
                // into rows of the next class, and those into sealed rows of over 1 KiB.
                let mut seqs = Vec::new();
                for i in 0..40 {
                    let word = if i == 0 { "quince" } else { "plain" };
                    let prompt = format!("{word} prompt {i:02} {}", "x".repeat(285));
                    let seq = tx.append(&g, &note(&prompt))?;
                    tx.index_prompt(&g, seq, &prompt)?;
                    seqs.push(seq);
                }
                let seq = tx.append(&kept, &note("quince"))?;
                tx.index_prompt(&kept, seq, "quince")?;
                Ok((kept, seqs))
            })
            .await
            .expect("prompts");
        store.flush_prompts().await;
        let texts: Vec<(i64, String)> = store
            .read(|c| {
                let mut stmt =
                    c.prepare("SELECT rowid, prompts FROM session_search_prompts ORDER BY rowid")?;
                let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
                Ok(rows.collect::<crate::sql::Result<Vec<_>>>()?)
            })
            .await
            .expect("prompt rows");
        let of_gone: Vec<&(i64, String)> = texts.iter().filter(|r| r.0 >> 32 == gone.pk).collect();
        // Each row is keyed by the seq of the first prompt it holds.
        let mut first_seqs = Vec::new();
        for (rowid, text) in &of_gone {
            let i: usize = text
                .split(' ')
                .nth(2)
                .and_then(|n| n.parse().ok())
                .expect("a prompt's number");
            assert_eq!((rowid & 0xffff_ffff) as u64, seqs[i], "{text:.40}");
            first_seqs.push(seqs[i]);
        }
        let sealed = PROMPT_CLASS_ENDS[PROMPT_CLASS_ENDS.len() - 1];
        let bytes: usize = of_gone.iter().map(|r| r.1.len()).sum();
        assert!(
            first_seqs.len() <= bytes / sealed + 7 + 7 + 1,
            "{} rows of {bytes} bytes",
            first_seqs.len()
        );
        assert!(first_seqs.len() < seqs.len() / 3, "{first_seqs:?}");
        assert!(texts.iter().all(|r| r.1.len() <= PROMPT_ROW_BYTES));
        let rows = |store: Store, sql: &'static str| async move {
            store.flush_prompts().await;
            store
                .read(move |c| {
                    let mut stmt = c.prepare(sql)?;
                    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                    Ok(rows.collect::<crate::sql::Result<Vec<(i64, i64, i64)>>>()?)
                })
                .await
                .expect("prompt rows")
        };
        const ALL: &str = "SELECT rowid >> 32, rowid & 4294967295, octet_length(prompts)
                           FROM session_search_prompts ORDER BY rowid";
        const QUINCE: &str = "SELECT rowid >> 32, rowid & 4294967295, octet_length(prompts)
                              FROM session_search_prompts
                              WHERE session_search_prompts MATCH 'quince' ORDER BY rowid";
        let quince: Vec<(i64, i64)> = rows(store.clone(), QUINCE)
            .await
            .into_iter()
            .map(|r| (r.0, r.1))
            .collect();
        assert_eq!(quince, [(gone.pk, first_seqs[0] as i64), (kept.pk, 1)]);
        let g = gone.clone();
        store
            .write(move |tx| tx.delete_session(&g))
            .await
            .expect("delete");
        let left: Vec<(i64, i64)> = rows(store.clone(), ALL)
            .await
            .into_iter()
            .map(|r| (r.0, r.1))
            .collect();
        assert_eq!(left, [(kept.pk, 1)]);
        store.close();
    }

    /// Many short prompts: each is its own row until runs of one size class are joined (with
    /// the carry into the next class), so the rows hold every prompt once, in order, each row
    /// within its bound, a session has a few rows per kilobyte of prompts rather than one per
    /// prompt, and a word of any prompt finds the one row that holds it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn short_prompts_are_joined_into_few_rows_that_keep_every_prompt_in_order() {
        let prompts: Vec<String> = (0..1000).map(|i| format!("w{i}")).collect();
        assert_prompt_rows(prompts, &["w0", "w499", "w998", "w999"]).await;
    }

    /// Prompts of mixed lengths, short ones between long ones as in a conversation: the short
    /// ones join the runs of the long ones, so the rows are as few as for prompts of one length.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prompts_of_mixed_lengths_are_joined_into_few_rows() {
        let lengths: [usize; 9] = [300, 25, 300, 12, 600, 40, 300, 3, 150];
        let prompts: Vec<String> = (0..600)
            .map(|i| {
                let word = format!("m{i}");
                let pad = lengths[i % lengths.len()].saturating_sub(word.len() + 1);
                format!("{word} {}", "y".repeat(pad))
            })
            .collect();
        assert_prompt_rows(prompts, &["m0", "m301", "m598", "m599"]).await;
    }

    /// Writes `prompts` to one session in jobs of seven (so that the joins span batches and
    /// jobs) and checks its search rows: every prompt once, in order, each row within its bound;
    /// at most the sealed rows the prompts fill and fifteen smaller ones after them; and each of
    /// `words` (a word of one prompt) found in exactly one row.
    async fn assert_prompt_rows(prompts: Vec<String>, words: &[&str]) {
        use super::super::prompt_rows::{PROMPT_CLASS_ENDS, PROMPT_ROW_BYTES};
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        for chunk in prompts.chunks(7) {
            let (k, chunk) = (key.clone(), chunk.to_vec());
            store
                .write(move |tx| {
                    for p in &chunk {
                        let seq = tx.append(&k, &note(p))?;
                        tx.index_prompt(&k, seq, p)?;
                    }
                    Ok(())
                })
                .await
                .expect("prompts");
        }
        store.flush_prompts().await;
        let rows: Vec<String> = store
            .read(|c| {
                let mut stmt =
                    c.prepare("SELECT prompts FROM session_search_prompts ORDER BY rowid")?;
                let rows = stmt.query_map([], |r| r.get(0))?;
                Ok(rows.collect::<crate::sql::Result<Vec<String>>>()?)
            })
            .await
            .expect("rows");
        let held: Vec<&str> = rows.iter().flat_map(|r| r.split('\n')).collect();
        assert_eq!(held, prompts, "every prompt once, in order");
        assert!(rows.iter().all(|r| r.len() <= PROMPT_ROW_BYTES));
        let sealed = PROMPT_CLASS_ENDS[PROMPT_CLASS_ENDS.len() - 1];
        let bytes: usize = prompts.iter().map(|p| p.len() + 1).sum();
        assert!(
            rows.len() <= bytes / sealed + 7 + 7 + 1,
            "{} rows of {bytes} bytes",
            rows.len()
        );
        for word in words {
            let w = (*word).to_owned();
            let found: i64 = store
                .read(move |c| {
                    Ok(c.query_row(
                        "SELECT count(*) FROM session_search_prompts
                         WHERE session_search_prompts MATCH ?1",
                        [format!("\"{w}\"")],
                        |r| r.get(0),
                    )?)
                })
                .await
                .expect("match");
            assert_eq!(found, 1, "{word}");
        }
        store.close();
    }

    /// Checkpoints run beside the writer (see `store::checkpoint`): a log that grows by more
    /// than the background threshold is copied into the database by the checkpointer thread,
    /// with no commit of the writer's doing it, and under sustained writes the log stays within
    /// the writer's bound while the database takes everything written.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_is_checkpointed_beside_the_writer_and_stays_bounded() {
        use super::super::checkpoint::{BACKGROUND_FRAMES, WRITER_FRAMES};
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        let db = dir.path().join("store.db");
        let wal = dir.path().join("store.db-wal");
        let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let page: u64 = store
            .read(|c| Ok(c.query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))?))
            .await
            .expect("page size") as u64;
        let body = "x".repeat(16 * 1024);
        // Writes jobs of 25 appends of 16 KiB (~100 pages each) until at least `bytes` are
        // written; returns what was.
        let write_until = |bytes: u64| {
            let (store, key, body) = (store.clone(), key.clone(), body.clone());
            async move {
                let mut written = 0u64;
                while written < bytes {
                    let (k, b) = (key.clone(), body.clone());
                    store
                        .write(move |tx| {
                            for _ in 0..25 {
                                tx.append(&k, &note(&b))?;
                            }
                            Ok(())
                        })
                        .await
                        .expect("append");
                    written += 25 * body.len() as u64;
                }
                written
            }
        };
        // The log past the background threshold but short of the writer's: only the
        // checkpointer can copy it.
        let db_before = size(&db);
        let written = write_until((BACKGROUND_FRAMES as u64 + 500) * page).await;
        assert!(written < WRITER_FRAMES as u64 * page / 2);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while size(&db) < db_before + written / 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no background checkpoint: database {} bytes, log {} bytes",
                size(&db),
                size(&wal)
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        // Sustained writes, three times the writer's bound: the log does not follow them.
        let more = write_until(3 * WRITER_FRAMES as u64 * page).await;
        let bound = (WRITER_FRAMES as u64 + 2 * BACKGROUND_FRAMES as u64) * (page + 24) + 32;
        assert!(
            size(&wal) <= bound,
            "log of {} bytes after {more} bytes written (bound {bound})",
            size(&wal)
        );
        assert!(size(&db) >= db_before + written + more / 2, "{}", size(&db));
        store.close();
    }

    /// Prompts are indexed after the batch's jobs (see `QueuedPrompt`), yet exactly as if inside
    /// them: a failed job's prompt is not indexed, a prompt of a session deleted later in the
    /// batch leaves no row, and prompts from many jobs of concurrent batches are all found.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn prompts_indexed_after_the_jobs_keep_the_jobs_outcome() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        let count = |store: Store, word: &'static str| async move {
            store.flush_prompts().await;
            store
                .read(move |c| {
                    Ok(c.query_row(
                        "SELECT count(*) FROM session_search_prompts
                         WHERE session_search_prompts MATCH ?1",
                        [word],
                        |r| r.get::<_, i64>(0),
                    )?)
                })
                .await
                .expect("count")
        };
        // A job that fails after indexing: its savepoint goes, and so does its prompt.
        let k = key.clone();
        let failed = store
            .write(move |tx| -> Result<()> {
                let seq = tx.append(&k, &note("walrus"))?;
                tx.index_prompt(&k, seq, "walrus")?;
                Err(Error::Conflict("refused", "refused after indexing".into()))
            })
            .await;
        assert!(matches!(failed, Err(Error::Conflict(..))), "{failed:?}");
        assert_eq!(count(store.clone(), "walrus").await, 0);
        // A session deleted after its prompt was queued: no row is left behind.
        let (ws, agent) = workspace_and_agent(&store).await;
        store
            .write(move |tx| {
                let id = crate::ids::new_id();
                let doomed = tx.insert_session(&NewSession::bare(&id, &ws, &agent, "u", "t"))?;
                let seq = tx.append(&doomed, &note("narwhal"))?;
                tx.index_prompt(&doomed, seq, "narwhal")?;
                tx.delete_session(&doomed)
            })
            .await
            .expect("index, then delete");
        assert_eq!(count(store.clone(), "narwhal").await, 0);
        // Many jobs at once (batches of several): every prompt is found, once.
        let mut set = tokio::task::JoinSet::new();
        for i in 0..64 {
            let (store, k) = (store.clone(), key.clone());
            set.spawn(async move {
                store
                    .write(move |tx| {
                        let prompt = format!("ocelot {i}");
                        let seq = tx.append(&k, &note(&prompt))?;
                        tx.index_prompt(&k, seq, &prompt)
                    })
                    .await
            });
        }
        while let Some(r) = set.join_next().await {
            r.expect("task").expect("write");
        }
        store.flush_prompts().await;
        let rows: Vec<String> = store
            .read(|c| {
                let mut stmt = c.prepare("SELECT prompts FROM session_search_prompts")?;
                let rows = stmt.query_map([], |r| r.get::<_, String>(0))?;
                Ok(rows.collect::<crate::sql::Result<Vec<String>>>()?)
            })
            .await
            .expect("rows");
        for i in 0..64 {
            let want = format!("ocelot {i}");
            let found = rows
                .iter()
                .flat_map(|r| r.split('\n'))
                .filter(|p| *p == want)
                .count();
            assert_eq!(found, 1, "{want} in {rows:?}");
        }
        store.close();
    }

    /// The writer tells its sink which seqs are committed before it answers the caller, and
    /// publishes each frame after that, in seq order: a caller that publishes a delta as soon as
    /// its output is acknowledged (the runner's turn loop) can count on the bus knowing of that
    /// output already (`bus` holds the delta back until the output's frame is sent).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sink_knows_a_commit_before_its_writer_is_answered() {
        use crate::sink::recorder::{Recorder, Told};
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = Recorder::new();
        let (store, key) = store_publishing_to(dir.path(), sink.clone()).await;
        let mut last = 0;
        for i in 0..200 {
            let k = key.clone();
            let seq = store
                .write(move |tx| {
                    tx.append(
                        &k,
                        &Event::Heartbeat {
                            timestamp: f64::from(i),
                            active_task_ids: Vec::new(),
                        },
                    )
                })
                .await
                .expect("output");
            assert!(
                sink.told().contains(&Told::Committed(key.id.clone(), seq)),
                "answered before the sink knew of seq {seq}"
            );
            assert!(seq > last);
            last = seq;
        }
        store.close();
        let published: Vec<u64> = sink
            .told()
            .into_iter()
            .filter_map(|t| match t {
                Told::Published(s, Some(seq)) if s == key.id => Some(seq),
                _ => None,
            })
            .collect();
        assert!(published.windows(2).all(|w| w[0] < w[1]), "{published:?}");
        assert_eq!(published.last(), Some(&last));
    }

    /// Events appended together (`Tx::append_all`: one `INSERT` of many rows per
    /// `APPEND_ROWS`) are stored, counted and published as the same events appended one by one.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn events_appended_together_are_stored_as_if_appended_one_by_one() {
        use crate::sink::recorder::{Recorder, Told};
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = Recorder::new();
        let (store, one_by_one) = store_publishing_to(dir.path(), sink.clone()).await;
        let (ws, agent) = workspace_and_agent(&store).await;
        let together = store
            .write(move |tx| {
                let id = crate::ids::new_id();
                tx.insert_session(&NewSession::bare(&id, &ws, &agent, "u", "t"))
            })
            .await
            .expect("second session");
        // Inputs and outputs mixed, more than one statement's rows.
        let events: Vec<Event> = (0..21)
            .map(|i| match i % 3 {
                0 => note(&format!("n{i}")),
                _ => Event::Heartbeat {
                    timestamp: f64::from(i),
                    active_task_ids: Vec::new(),
                },
            })
            .collect();
        let (k, evs) = (one_by_one.clone(), events.clone());
        store
            .write(move |tx| {
                for e in &evs {
                    tx.append(&k, e)?;
                }
                Ok(())
            })
            .await
            .expect("one by one");
        let (k, evs) = (together.clone(), events.clone());
        let last = store
            .write(move |tx| tx.append_all(&k, &evs.iter().collect::<Vec<_>>()))
            .await
            .expect("together");
        assert_eq!(last, Some(21));
        let stored = |key: SessionKey| {
            let store = store.clone();
            async move {
                store
                    .read(move |c| {
                        let mut stmt = c.prepare(
                            "SELECT seq, type, body FROM events WHERE session_pk = ?1 ORDER BY seq",
                        )?;
                        let rows = stmt.query_map([key.pk], |r| {
                            Ok((
                                r.get::<_, i64>(0)?,
                                r.get::<_, String>(1)?,
                                r.get::<_, String>(2)?,
                            ))
                        })?;
                        let events = rows.collect::<crate::sql::Result<Vec<_>>>()?;
                        let counters = c.query_row(
                            "SELECT last_event_seq, last_output_seq FROM sessions WHERE pk = ?1",
                            [key.pk],
                            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
                        )?;
                        Ok((events, counters))
                    })
                    .await
                    .expect("read back")
            }
        };
        let (a, b) = (stored(one_by_one).await, stored(together.clone()).await);
        assert_eq!(a.0.len(), 21);
        assert_eq!(a, b);
        assert_eq!(b.1, (21, 21));
        store.close();
        let published: Vec<u64> = sink
            .told()
            .into_iter()
            .filter_map(|t| match t {
                Told::Published(s, Some(seq)) if s == together.id => Some(seq),
                _ => None,
            })
            .collect();
        assert_eq!(published, (1..=21).collect::<Vec<u64>>());
    }

    /// A job's own rewrite of a session's row after its appends carries their counters (the
    /// flush then leaves the row alone); an append after that rewrite makes the flush write them
    /// again, so the row always ends with the job's last counters.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_row_rewritten_after_its_appends_ends_with_the_last_counters() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = store_with_session(dir.path()).await;
        let heartbeat = || Event::Heartbeat {
            timestamp: 1.0,
            active_task_ids: Vec::new(),
        };
        let row = |store: Store, pk: i64| async move {
            store
                .read(move |c| {
                    Ok(c.query_row(
                        "SELECT last_event_seq, last_output_seq, last_message_at FROM sessions
                         WHERE pk = ?1",
                        [pk],
                        |r| {
                            Ok((
                                r.get::<_, i64>(0)?,
                                r.get::<_, i64>(1)?,
                                r.get::<_, Option<i64>>(2)?,
                            ))
                        },
                    )?)
                })
                .await
                .expect("row")
        };
        let k = key.clone();
        store
            .write(move |tx| {
                tx.append(&k, &heartbeat())?;
                tx.append(&k, &note("a"))?;
                tx.set_turn_status(&k, "idle", "idle")
            })
            .await
            .expect("appends, then the row");
        assert_eq!(row(store.clone(), key.pk).await, (2, 1, None));
        let k = key.clone();
        store
            .write(move |tx| {
                tx.append(&k, &heartbeat())?;
                tx.set_turn_status(&k, "idle", "idle")?;
                tx.append(&k, &heartbeat())?;
                tx.append(&k, &note("b"))
            })
            .await
            .expect("an append after the row");
        assert_eq!(row(store.clone(), key.pk).await, (5, 4, None));
        store.close();
    }

    #[test]
    fn the_counter_cache_is_bounded_and_keeps_recent_sessions() {
        let mut cache = CounterCache::default();
        let c = |n| Counters {
            last_event_seq: n,
            last_output_seq: n,
            ..Counters::default()
        };
        for pk in 0..(COUNTER_CACHE_GENERATION as i64 * 5) {
            cache.insert(pk, c(pk as u64));
            assert_eq!(cache.get(&pk), Some(c(pk as u64)));
        }
        assert!(cache.len() <= 2 * COUNTER_CACHE_GENERATION);
        let last = COUNTER_CACHE_GENERATION as i64 * 5 - 1;
        for pk in (last - COUNTER_CACHE_GENERATION as i64 + 1)..=last {
            assert!(
                cache.get(&pk).is_some(),
                "session {pk} of the last generation"
            );
        }
        cache.remove(&last);
        assert!(cache.get(&last).is_none());
    }
}
