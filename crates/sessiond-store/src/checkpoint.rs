//! Checkpoints of the write-ahead log, on a thread of their own.
//!
//! SQLite's automatic checkpoint runs inside the COMMIT that takes the log past 1,000 pages, on
//! the committing connection: with one writer thread, every write queued behind that COMMIT
//! waited for the log to be copied into the database and for two `fsync`s (a sixth of the
//! writer's time on the turn path). Here the writer's connection takes no automatic checkpoint;
//! once the log has grown by [`BACKGROUND_FRAMES`] since the last one, the writer asks the
//! checkpointer thread, which copies the log with a connection of its own (`PASSIVE`: it never
//! waits for, or blocks, the writer or a reader).
//!
//! A checkpoint that runs beside a busy writer seldom ends with the whole log copied, and SQLite
//! starts the log over only when it has been: so when the log reaches [`WRITER_FRAMES`] the
//! writer runs one `PASSIVE` checkpoint itself, which then has little left to copy, and the next
//! transaction starts the log over. The log stays within about `WRITER_FRAMES` pages (while no
//! reader holds an old snapshot, as before), and the writer stops for a checkpoint a quarter as
//! often, each time for the tail the checkpointer had not copied yet.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

use rusqlite::Connection;

use crate::error::{Cause, Error, Result};
use crate::metrics::METRICS;

/// Growth of the log (in pages) after which the checkpointer is asked to copy it: SQLite's own
/// automatic checkpoint threshold.
pub(super) const BACKGROUND_FRAMES: c_int = 1_000;

/// Size of the log (in pages) from which the writer checkpoints itself after a commit: 64 MiB
/// of log at SQLite's 4 KiB pages.
///
/// Each of the writer's checkpoints stops every write for the tail it copies and the two `fsync`s
/// it makes (6.9 ms on average on the benchmarks' two-core machine at 4,000 pages, 7.6 ms at
/// 16,000). A commit of a busy writer dirties some 80 pages (each session's event and row pages,
/// the queue, the search index), so at 4,000 pages the writer stopped several times a second;
/// at 16,000 it stops a quarter as often, and the log's file is at most 64 MiB.
pub(super) const WRITER_FRAMES: c_int = 16_000;

thread_local! {
    /// Pages in the write-ahead log after this thread's last commit. SQLite calls its WAL hook
    /// on the committing thread, and each store's writer is a thread of its own.
    static LOG_FRAMES: Cell<c_int> = const { Cell::new(0) };
}

fn note_log_frames(_wal: &rusqlite::hooks::Wal, frames: c_int) -> rusqlite::Result<()> {
    LOG_FRAMES.with(|f| f.set(frames));
    Ok(())
}

/// The writer's side: when to ask, and the thread to ask.
pub(super) struct Checkpointer {
    wake: Option<SyncSender<()>>,
    thread: Option<JoinHandle<()>>,
    /// Log size at which the checkpointer is asked next.
    next_request: c_int,
}

impl Checkpointer {
    /// Takes the automatic checkpoints off the writer's connection and starts the thread that
    /// does them, with a connection of its own to the same file (in the writer's `synchronous`
    /// mode, which decides the checkpoint's `fsync`s).
    pub(super) fn start(writer: &Connection) -> Result<Checkpointer> {
        let path = writer
            .path()
            .filter(|p| !p.is_empty())
            .ok_or_else(|| Error::Internal("the write connection has no file".into()))?
            .to_owned();
        let synchronous: i64 = writer.pragma_query_value(None, "synchronous", |r| r.get(0))?;
        let conn = Connection::open(&path).map_err(|e| {
            Error::Storage(Cause::new(
                format!("cannot open {path} to checkpoint: {e}"),
                e,
            ))
        })?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "synchronous", synchronous)?;
        let (wake, rx) = sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("sessiond-checkpoint".into())
            .spawn(move || run(conn, rx))
            .map_err(|e| Error::Internal(format!("cannot start the checkpointer: {e}")))?;
        // Replaces SQLite's automatic checkpoint, which is itself a WAL hook.
        writer.wal_hook(Some(note_log_frames));
        LOG_FRAMES.with(|f| f.set(0));
        Ok(Checkpointer {
            wake: Some(wake),
            thread: Some(thread),
            next_request: BACKGROUND_FRAMES,
        })
    }

    /// After a commit on the writer's thread: asks the checkpointer when the log has grown
    /// enough, and checkpoints on the writer when the log is too long (see the module's doc).
    pub(super) fn after_commit(&mut self, writer: &Connection) {
        let frames = LOG_FRAMES.with(Cell::get);
        if frames < self.next_request.saturating_sub(BACKGROUND_FRAMES) {
            // The log started over.
            self.next_request = BACKGROUND_FRAMES;
        }
        if frames >= WRITER_FRAMES {
            checkpoint(writer, "writer");
            self.next_request = BACKGROUND_FRAMES;
            return;
        }
        if frames >= self.next_request {
            self.next_request = frames.saturating_add(BACKGROUND_FRAMES);
            if let Some(wake) = &self.wake {
                match wake.try_send(()) {
                    // A request already waiting covers this one.
                    Ok(()) | Err(TrySendError::Full(())) => {}
                    Err(TrySendError::Disconnected(())) => self.wake = None,
                }
            }
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.wake = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(conn: Connection, rx: Receiver<()>) {
    while rx.recv().is_ok() {
        checkpoint(&conn, "background");
    }
}

/// One `PASSIVE` checkpoint: copies what no reader still needs, waits for nobody.
fn checkpoint(conn: &Connection, by: &'static str) {
    let started = std::time::Instant::now();
    let result = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, i64>(2)?,
        ))
    });
    match result {
        Ok((busy, log, copied)) => {
            METRICS.checkpoints.with(&[by]).inc();
            tracing::debug!(
                by,
                busy = busy != 0,
                log,
                copied,
                ms = started.elapsed().as_secs_f64() * 1000.0,
                "checkpoint"
            );
        }
        Err(e) => {
            // The log keeps every committed write; the next checkpoint copies it. A lasting
            // fault (a full disk) shows in the writer's own commits and the store's health.
            METRICS.checkpoint_failures.inc();
            tracing::debug!(by, error = %e, "checkpoint failed");
        }
    }
}
