//! Group commit on PostgreSQL: the writes that arrive together share one transaction.
//!
//! A write that ran as a transaction of its own paid for its `BEGIN`, its `COMMIT` and its commit
//! notice — a `pg_notify` that wakes every process's listener — on top of its statements; with
//! 64 clients, PostgreSQL spent more of its time on those than on the work. The async callers of
//! [`Store::write`](crate::Store) queue their jobs here instead of each taking a blocking thread
//! and a connection. A few committer threads each take what is queued (up to [`MAX_BATCH`] jobs),
//! run the jobs one after the other in one transaction on one connection, send one commit notice
//! per session for the lot with the `COMMIT`, and only then publish each job's frames and answer
//! its caller, in queue order — nothing is acknowledged before the COMMIT that made it durable.
//!
//! A batch has no savepoints (each would cost two statements per job): when any of its jobs
//! fails, panics, or the COMMIT does, the transaction is rolled back whole and every job of the
//! batch goes back to the head of the queue to run again, alone, in a transaction of its own —
//! the path a write took before batching, with its retries of lost lock races
//! (`PgBackend::write`) — on whichever committer is free, so that one waiting for a row holds
//! back no other. A failed job leaves nothing behind
//! that way, and the others are applied once: what the rolled-back batch did is gone. Jobs are
//! written to run again (the PostgreSQL backend already ran a job again after a lost lock race).
//!
//! The batch is capped at [`MAX_BATCH`] jobs so that its transaction stays short, its row locks
//! (each job locks the sessions it appends to until the COMMIT) are held briefly, and one slow job
//! delays few others. A batch holds the rows of several sessions, locked in the order its jobs
//! came, so two batches (of this process or another) can wait for each other; PostgreSQL would
//! find that deadlock only after `deadlock_timeout` (a second by default, and only a superuser
//! may lower it). A batch therefore waits at most [`BEGIN_BATCH`]'s `lock_timeout` for a row, then
//! fails and its jobs run alone, each holding one session's row as a write did before batching.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};

use crate::error::{Error, Result};
use crate::health::Health;
use crate::writer::Published;
use crate::{Erased, ErasedRetryable, Sink};

/// Jobs one transaction takes at most.
pub(crate) const MAX_BATCH: usize = 32;

/// How a batch's transaction begins: with a bound on the time any of its statements waits for a
/// lock (see the module's doc).
pub(crate) const BEGIN_BATCH: &str = "BEGIN; SET LOCAL lock_timeout = '200ms'";

/// What runs the batches: the PostgreSQL backend (a trait, so that this module does not name it).
pub(crate) trait Executor: Send + Sync {
    /// Runs the jobs of `batch` in one transaction and commits it: each job's value and frames,
    /// or the first failure (the transaction rolled back).
    fn run_batch(&self, batch: &[Job]) -> Result<Vec<(Erased, Published)>>;

    /// Runs `job` in a transaction of its own (with the retries of a lost lock race), publishes
    /// its frames once it committed, and answers its outcome.
    fn run_alone(&self, sink: &dyn Sink, health: &Arc<Health>, job: &Job) -> Result<Erased>;
}

/// A queued write: the job, the request it came from, and where its outcome goes.
pub(crate) struct Job {
    pub run: ErasedRetryable,
    pub request_id: Option<String>,
    pub reply: tokio::sync::oneshot::Sender<Result<Erased>>,
    /// Runs in a transaction of its own: its batch failed.
    pub alone: bool,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    /// No more jobs are taken; the committers finish what is queued and stop.
    closed: bool,
}

/// The queue the committer threads take batches from.
#[derive(Default)]
pub(crate) struct Committers {
    queue: Mutex<Queue>,
    ready: Condvar,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

impl Committers {
    /// Starts `n` committer threads for `backend`; they hold it weakly, and stop when the queue
    /// is closed.
    pub(crate) fn start(
        self: &Arc<Self>,
        n: usize,
        backend: &Arc<dyn Executor>,
        sink: &Arc<dyn Sink>,
        health: &Arc<Health>,
    ) -> Result<()> {
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        for i in 0..n {
            let (this, backend) = (Arc::clone(self), Arc::downgrade(backend));
            let (sink, health) = (Arc::clone(sink), Arc::clone(health));
            let thread = std::thread::Builder::new()
                .name(format!("sessiond-pg-commit-{i}"))
                .spawn(move || this.run(&backend, &*sink, &health))
                .map_err(|e| Error::Internal(format!("cannot start a committer: {e}")))?;
            threads.push(thread);
        }
        Ok(())
    }

    /// Queues `job`; its caller hears from the committer that runs it. A closed store answers
    /// at once.
    pub(crate) fn submit(&self, job: Job) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        if queue.closed {
            drop(queue);
            let _ = job.reply.send(Err(closed()));
            return;
        }
        queue.jobs.push_back(job);
        drop(queue);
        self.ready.notify_one();
    }

    /// Takes no more jobs, lets the committers finish what is queued and waits for them.
    pub(crate) fn close(&self) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed = true;
        self.ready.notify_all();
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for thread in threads {
            // A committer that is this thread (a store dropped by its own job's caller) is not
            // waited for.
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }

    /// The next batch, waiting for one; `None` once the queue is closed and empty. A job to run
    /// alone is a batch of its own.
    fn next_batch(&self) -> Option<Vec<Job>> {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if !queue.jobs.is_empty() {
                let n = match queue.jobs.iter().position(|j| j.alone) {
                    Some(0) => 1,
                    Some(first_alone) => first_alone.min(MAX_BATCH),
                    None => queue.jobs.len().min(MAX_BATCH),
                };
                let batch: Vec<Job> = queue.jobs.drain(..n).collect();
                let more = !queue.jobs.is_empty();
                drop(queue);
                if more {
                    // Another committer takes what is left.
                    self.ready.notify_one();
                }
                return Some(batch);
            }
            if queue.closed {
                return None;
            }
            queue = self
                .ready
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Puts the jobs of a failed batch back at the head of the queue, each to run alone: spread
    /// over the committers, a job that waits for a row holds back none of the others.
    fn requeue_alone(&self, batch: Vec<Job>) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        for mut job in batch.into_iter().rev() {
            job.alone = true;
            queue.jobs.push_front(job);
        }
        drop(queue);
        self.ready.notify_all();
    }

    fn run(&self, backend: &Weak<dyn Executor>, sink: &dyn Sink, health: &Arc<Health>) {
        while let Some(batch) = self.next_batch() {
            let Some(backend) = backend.upgrade() else {
                for job in batch {
                    let _ = job.reply.send(Err(closed()));
                }
                continue;
            };
            self.commit(&*backend, sink, health, batch);
        }
    }

    /// Runs `batch` in one transaction; after a failure, puts its jobs back to run alone.
    fn commit(
        &self,
        backend: &dyn Executor,
        sink: &dyn Sink,
        health: &Arc<Health>,
        mut batch: Vec<Job>,
    ) {
        if batch.len() == 1
            && let Some(job) = batch.pop()
        {
            let outcome = backend.run_alone(sink, health, &job);
            let _ = job.reply.send(outcome);
            return;
        }
        match backend.run_batch(&batch) {
            Ok(done) => {
                health.committed();
                crate::metrics::METRICS.commits.inc();
                crate::metrics::METRICS
                    .commit_batch_jobs
                    .observe(batch.len() as f64);
                for (job, (value, published)) in batch.into_iter().zip(done) {
                    crate::writer::publish_committed(sink, published);
                    let _ = job.reply.send(Ok(value));
                }
            }
            Err(e) => {
                crate::metrics::METRICS.batch_reruns.inc();
                tracing::debug!(jobs = batch.len(), error = %e, "a batch failed; its jobs run alone");
                self.requeue_alone(batch);
            }
        }
    }
}

fn closed() -> Error {
    Error::StorageUnavailable("the store is closed".into())
}
