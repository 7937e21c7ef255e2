//! The writer thread: the only connection that writes, committing many requests per transaction.
//!
//! Callers hand in closures; the writer takes whatever is queued (up to `max_batch`), runs each in
//! its own savepoint, commits once, then answers every caller and publishes the committed frames to
//! the bus in commit order. Group commit is what makes many small durable appends cheap.
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
use tokio::sync::{mpsc, oneshot};

use crate::bus::{Bus, Frame};
use crate::clock;
use crate::error::{Error, Result};

/// What a job hands back: whether it succeeded (keep its savepoint) and how to answer its caller
/// once the batch's fate is known.
type Completion = Box<dyn FnOnce(Result<()>) + Send>;
type Job = Box<dyn FnOnce(&mut Tx<'_>) -> (bool, Completion) + Send>;

/// A session's event counters between flushes to its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counters {
    pub last_event_seq: u64,
    pub last_output_seq: u64,
    /// The session was deleted in this batch: nothing may be appended to it.
    pub deleted: bool,
}

/// Most sessions whose counters stay cached; past this the cache starts over (a miss only costs
/// one read of the row).
const COUNTER_CACHE_MAX: usize = 1_000_000;

/// The write transaction as a job sees it.
pub struct Tx<'c> {
    pub(crate) conn: &'c Connection,
    /// Wall-clock time of this job, in ms; one value for every row it writes.
    pub now: i64,
    published: Vec<(Arc<str>, Frame)>,
    /// Counters as committed (they match the rows).
    committed: &'c HashMap<i64, Counters>,
    /// Counters changed by earlier jobs of this batch that succeeded.
    batch: &'c HashMap<i64, Counters>,
    /// Counters changed by this job; dropped if the job fails.
    job: HashMap<i64, Counters>,
}

impl<'c> Tx<'c> {
    pub fn conn(&self) -> &Connection {
        self.conn
    }

    /// The counters of a session as this job sees them; `None` when the session does not exist.
    pub(crate) fn counters(&self, pk: i64) -> rusqlite::Result<Option<Counters>> {
        if let Some(c) = self
            .job
            .get(&pk)
            .or_else(|| self.batch.get(&pk))
            .or_else(|| self.committed.get(&pk))
        {
            return Ok((!c.deleted).then_some(*c));
        }
        use rusqlite::OptionalExtension;
        self.conn
            .prepare_cached("SELECT last_event_seq, last_output_seq FROM sessions WHERE pk = ?1")?
            .query_row([pk], |r| {
                Ok(Counters {
                    last_event_seq: r.get::<_, i64>(0)? as u64,
                    last_output_seq: r.get::<_, i64>(1)? as u64,
                    deleted: false,
                })
            })
            .optional()
    }

    pub(crate) fn set_counters(&mut self, pk: i64, c: Counters) {
        self.job.insert(pk, c);
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

pub struct WriterHandle {
    sender: Mutex<Option<mpsc::Sender<Job>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

pub fn spawn(conn: Connection, max_batch: usize, bus: Arc<Bus>) -> Result<WriterHandle> {
    let (tx, rx) = mpsc::channel::<Job>(max_batch.max(1) * 8);
    let thread = std::thread::Builder::new()
        .name("sessiond-writer".into())
        .spawn(move || run(conn, rx, max_batch, bus))
        .map_err(|e| Error::Internal(format!("cannot start writer thread: {e}")))?;
    Ok(WriterHandle {
        sender: Mutex::new(Some(tx)),
        thread: Mutex::new(Some(thread)),
    })
}

fn make_job<T, F>(f: F) -> (Job, oneshot::Receiver<Result<T>>)
where
    F: FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    let (reply, rx) = oneshot::channel();
    let job: Job = Box::new(move |tx: &mut Tx<'_>| match f(tx) {
        Ok(value) => (
            true,
            Box::new(move |committed: Result<()>| {
                let _ = reply.send(committed.map(|()| value));
            }) as Completion,
        ),
        Err(e) => (
            false,
            Box::new(move |_| {
                let _ = reply.send(Err(e));
            }) as Completion,
        ),
    });
    (job, rx)
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
        self.sender()?
            .send(job)
            .await
            .map_err(|_| Error::ShuttingDown)?;
        rx.await
            .map_err(|_| Error::Internal("write job was dropped".into()))?
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

    /// Drops the queue's sender and joins the thread once everything queued is committed.
    pub fn close(&self) {
        self.sender.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = thread.join();
        }
    }
}

/// Savepoint statements run once per job; keep them prepared.
fn exec_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn run(conn: Connection, mut rx: mpsc::Receiver<Job>, max_batch: usize, bus: Arc<Bus>) {
    let mut batch: Vec<Job> = Vec::with_capacity(max_batch);
    let mut counters: HashMap<i64, Counters> = HashMap::new();
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        // Take what is queued; when the queue runs dry, give the producers one chance to add to
        // this batch before paying for a commit.
        let mut yielded = false;
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) if !yielded => {
                    yielded = true;
                    std::thread::yield_now();
                }
                Err(_) => break,
            }
        }
        commit_batch(&conn, &mut batch, &bus, &mut counters);
    }
    tracing::debug!("writer stopped");
}

/// Writes the batch's counters into the session rows (same transaction as the events).
fn flush_counters(
    conn: &Connection,
    changed: &HashMap<i64, Counters>,
    now: i64,
) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "UPDATE sessions SET last_event_seq = ?2, last_output_seq = ?3, updated_at = max(updated_at, ?4)
         WHERE pk = ?1",
    )?;
    for (pk, c) in changed.iter().filter(|(_, c)| !c.deleted) {
        stmt.execute(rusqlite::params![
            pk,
            c.last_event_seq as i64,
            c.last_output_seq as i64,
            now
        ])?;
    }
    Ok(())
}

fn commit_batch(
    conn: &Connection,
    batch: &mut Vec<Job>,
    bus: &Bus,
    counters: &mut HashMap<i64, Counters>,
) {
    let mut completions: Vec<Completion> = Vec::with_capacity(batch.len());
    let mut published: Vec<(Arc<str>, Frame)> = Vec::new();
    let mut changed: HashMap<i64, Counters> = HashMap::new();
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let msg = format!("cannot begin transaction: {e}");
        tracing::error!("{msg}");
        for job in batch.drain(..) {
            // The job never ran; answer it without running it.
            drop(job);
        }
        return;
    }
    for job in batch.drain(..) {
        let mut tx = Tx {
            conn,
            now: clock::now_ms(),
            published: Vec::new(),
            committed: counters,
            batch: &changed,
            job: HashMap::new(),
        };
        if exec_cached(conn, "SAVEPOINT job").is_err() {
            continue;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| job(&mut tx)));
        let keep = match &outcome {
            Ok((ok, _)) => *ok,
            Err(_) => false,
        };
        if keep {
            let _ = exec_cached(conn, "RELEASE job");
            published.append(&mut tx.published);
            let job_counters = std::mem::take(&mut tx.job);
            drop(tx);
            changed.extend(job_counters);
        } else {
            let _ = exec_cached(conn, "ROLLBACK TO job");
            let _ = exec_cached(conn, "RELEASE job");
        }
        match outcome {
            Ok((_, completion)) => completions.push(completion),
            Err(_) => tracing::error!("a write job panicked; its changes were rolled back"),
        }
    }
    let committed =
        flush_counters(conn, &changed, clock::now_ms()).and_then(|()| conn.execute_batch("COMMIT"));
    match committed {
        Ok(()) => {
            if counters.len() > COUNTER_CACHE_MAX {
                counters.clear();
            }
            for (pk, c) in changed {
                if c.deleted {
                    counters.remove(&pk);
                } else {
                    counters.insert(pk, c);
                }
            }
            for (session_id, frame) in published {
                bus.publish_durable(&session_id, frame);
            }
            for completion in completions {
                completion(Ok(()));
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "commit failed; batch rolled back");
            let _ = conn.execute_batch("ROLLBACK");
            for completion in completions {
                completion(Err(Error::Storage(format!("commit failed: {e}"))));
            }
        }
    }
}
