//! Whether another sessiond process shares the database, so that a process alone on it commits
//! without notices.
//!
//! A commit notice ([`super::fanout`]) exists for the other processes' streams; a process alone
//! on its database sends them to nobody but itself, and each one costs PostgreSQL's global
//! notify queue a lock at COMMIT and wakes this process's listener. So each process's listener
//! connection holds a *shared* advisory lock on [`LOCK`] for as long as it lives, and the listener
//! asks now and then whether it can take the same lock *exclusively* (and lets it go at once):
//! PostgreSQL grants that only when no other session holds the shared one, that is when no other
//! process listens. Then the process is [`Presence::alone`] and its commits and deltas send no
//! notice.
//!
//! A process that starts takes the shared lock *before* it says `hello` on the channel, so a
//! process that found itself alone hears every later arrival; on `hello` it stops being alone,
//! waits for the commits that decided to stay quiet to finish ([`Presence::join`]), and sends
//! `resync`: every other process then reads what its live sessions missed from the database, as
//! a listener does when it reconnects. A process whose listener connection is lost (and with it
//! the lock, and its ear for `hello`) stops being alone at once and sends `resync` once it is
//! back. Nothing is lost either way: a stream may hear of a commit made while its process
//! arrived a round trip late, never not at all. A process before this rule (which holds no lock)
//! is not seen: a deployment restarts such processes rather than run them beside newer ones.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

use tokio::sync::Notify;

/// The advisory lock key every listener holds shared ("sessfout" in ASCII; the migrator's key is
/// another).
pub(crate) const LOCK: i64 = 0x7365_7373_666f_7574;

/// Takes the shared lock (the listener's connection holds it for as long as it lives).
pub(crate) const TAKE: &str = "SELECT pg_advisory_lock_shared($1)";

/// True when no other session holds the lock: the exclusive lock is taken and let go in one
/// statement (`CASE` evaluates its branches in order; a session's own shared lock does not
/// conflict with its own exclusive one).
pub(crate) const ALONE: &str =
    "SELECT CASE WHEN pg_try_advisory_lock($1) THEN pg_advisory_unlock($1) ELSE false END";

/// This process's side of the rule: whether it is alone, and the commits that decided to send no
/// notice and have not finished.
#[derive(Debug, Default)]
pub(crate) struct Presence {
    alone: AtomicBool,
    quiet: AtomicUsize,
    finished: Notify,
}

/// A commit that sends no notice, until it has finished (committed or not).
pub(crate) struct Quiet<'a>(&'a Presence);

impl Drop for Quiet<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

impl Presence {
    /// Whether this process is alone on the database now.
    pub(crate) fn alone(&self) -> bool {
        self.alone.load(SeqCst)
    }

    /// Called by a commit before it decides on its notices: `Some` (held until the COMMIT has
    /// returned) when it may send none. The count goes up before the flag is read, and
    /// [`join`](Self::join) clears the flag before it reads the count, so a commit that read
    /// "alone" is always waited for.
    pub(crate) fn quiet(&self) -> Option<Quiet<'_>> {
        self.quiet.fetch_add(1, SeqCst);
        if self.alone.load(SeqCst) {
            Some(Quiet(self))
        } else {
            self.finish();
            None
        }
    }

    fn finish(&self) {
        if self.quiet.fetch_sub(1, SeqCst) == 1 {
            self.finished.notify_waiters();
        }
    }

    /// Found alone (the exclusive lock was granted).
    pub(crate) fn set_alone(&self) {
        if !self.alone.swap(true, SeqCst) {
            tracing::debug!("no other sessiond process listens: commits send no notices");
        }
        sessiond_telemetry::metrics::METRICS.fanout_alone.set(1);
    }

    /// Stops being alone at once; whether it was.
    pub(crate) fn leave(&self) -> bool {
        let was = self.alone.swap(false, SeqCst);
        sessiond_telemetry::metrics::METRICS.fanout_alone.set(0);
        if was {
            tracing::debug!("another sessiond process may listen: commits send notices");
        }
        was
    }

    /// Stops being alone and returns once every commit that chose to send no notice has finished:
    /// a notice sent after this follows all of them.
    pub(crate) async fn join(&self) {
        self.leave();
        loop {
            let finished = self.finished.notified();
            tokio::pin!(finished);
            finished.as_mut().enable();
            if self.quiet.load(SeqCst) == 0 {
                return;
            }
            finished.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_process_not_found_alone_notifies() {
        let p = Presence::default();
        assert!(p.quiet().is_none());
        p.set_alone();
        assert!(p.quiet().is_some());
        assert!(p.leave());
        assert!(p.quiet().is_none());
        assert!(!p.leave());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn joining_waits_for_the_quiet_commits_in_flight() {
        let p = Arc::new(Presence::default());
        p.set_alone();
        let (release, held) = std::sync::mpsc::channel::<()>();
        let (started, quiet_taken) = std::sync::mpsc::channel::<()>();
        let committing = {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                let quiet = p.quiet().expect("alone");
                started.send(()).expect("send");
                held.recv().expect("recv");
                drop(quiet);
            })
        };
        quiet_taken.recv().expect("the commit began");
        let join = tokio::spawn({
            let p = Arc::clone(&p);
            async move { p.join().await }
        });
        // The join has cleared the flag (new commits notify) but waits for the quiet one.
        while p.alone() {
            tokio::task::yield_now().await;
        }
        assert!(p.quiet().is_none());
        assert!(!join.is_finished());
        release.send(()).expect("release");
        tokio::time::timeout(Duration::from_secs(30), join)
            .await
            .expect("the join returns once the quiet commit finished")
            .expect("join task");
        assert!(!p.alone());
        committing.join().expect("thread");
    }
}
