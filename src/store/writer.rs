//! The writer thread: the only connection that writes, committing many requests per transaction.
//!
//! Callers hand in closures; the writer takes whatever is queued (up to `max_batch`), runs each in
//! its own savepoint, commits once, then answers every caller and publishes the committed frames to
//! the bus in commit order. Group commit is what makes many small durable appends cheap.

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

/// The write transaction as a job sees it.
pub struct Tx<'c> {
    pub(crate) conn: &'c Connection,
    /// Wall-clock time of this job, in ms; one value for every row it writes.
    pub now: i64,
    published: Vec<(Arc<str>, Frame)>,
}

impl<'c> Tx<'c> {
    pub fn conn(&self) -> &Connection {
        self.conn
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

fn run(conn: Connection, mut rx: mpsc::Receiver<Job>, max_batch: usize, bus: Arc<Bus>) {
    let mut batch: Vec<Job> = Vec::with_capacity(max_batch);
    while let Some(first) = rx.blocking_recv() {
        batch.push(first);
        while batch.len() < max_batch {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        commit_batch(&conn, &mut batch, &bus);
    }
    tracing::debug!("writer stopped");
}

fn commit_batch(conn: &Connection, batch: &mut Vec<Job>, bus: &Bus) {
    let mut completions: Vec<Completion> = Vec::with_capacity(batch.len());
    let mut published: Vec<(Arc<str>, Frame)> = Vec::new();
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
        };
        if conn.execute_batch("SAVEPOINT job").is_err() {
            continue;
        }
        let outcome = catch_unwind(AssertUnwindSafe(|| job(&mut tx)));
        let keep = match &outcome {
            Ok((ok, _)) => *ok,
            Err(_) => false,
        };
        if keep {
            let _ = conn.execute_batch("RELEASE job");
            published.append(&mut tx.published);
        } else {
            let _ = conn.execute_batch("ROLLBACK TO job; RELEASE job");
        }
        match outcome {
            Ok((_, completion)) => completions.push(completion),
            Err(_) => tracing::error!("a write job panicked; its changes were rolled back"),
        }
    }
    match conn.execute_batch("COMMIT") {
        Ok(()) => {
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
