//! Whether the store can write: what `/healthz` and `/readyz` report.
//!
//! The writer records the fate of every batch: a commit clears a fault, a storage fault (disk full,
//! I/O error, read-only) sets one. While a fault is set and nothing else writes, a prober submits
//! a tiny real write (`PRAGMA user_version` rewritten to itself, which appends one WAL frame) at a
//! short interval, so the state turns healthy on its own once space returns, without waiting for
//! a client to try.
//!
//! A full filesystem is not cleared by a commit alone: a batch that failed half-way leaves the
//! write-ahead log extended by the frames it managed to write, so a smaller write (the probe, a
//! one-line step) can still commit into that slack while the next real batch fails again. The
//! store stays `full` until the data dir's filesystem has [`MIN_FREE_BYTES`] available, so
//! health does not flap between full and ok on a disk that is still full.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock;
use crate::error::Error;

/// How often a degraded store tries a probe write.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// Free space the data dir's filesystem needs before a `full` store reports ok again.
pub(crate) const MIN_FREE_BYTES: u64 = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    Ok,
    /// Writes fail because the filesystem is full.
    Full,
    /// Writes fail for another storage reason.
    Unavailable,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::Ok => "ok",
            Condition::Full => "full",
            Condition::Unavailable => "unavailable",
        }
    }
}

/// The store's condition as last observed.
#[derive(Debug, Clone)]
pub struct HealthReport {
    pub condition: Condition,
    /// When the current fault was first seen (ms since the epoch).
    pub since_ms: Option<i64>,
    /// The storage error, for the operator (the data dir's own messages; no request data).
    pub detail: Option<String>,
}

pub struct Health {
    state: Mutex<HealthReport>,
    /// The directory whose filesystem holds the database (none: free space is not checked).
    dir: Option<PathBuf>,
    /// A prober thread is running.
    probing: AtomicBool,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            state: Mutex::new(HealthReport {
                condition: Condition::Ok,
                since_ms: None,
                detail: None,
            }),
            probing: AtomicBool::new(false),
            dir: None,
        }
    }
}

impl Health {
    /// Health of a store whose database lives in `dir`.
    pub(crate) fn for_dir(dir: &Path) -> Self {
        Health {
            dir: Some(dir.to_path_buf()),
            ..Health::default()
        }
    }
    pub fn report(&self) -> HealthReport {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn is_ok(&self) -> bool {
        self.report().condition == Condition::Ok
    }

    /// A batch committed: the store writes again.
    pub(crate) fn committed(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.condition == Condition::Full && !self.has_room() {
            return;
        }
        if s.condition != Condition::Ok {
            tracing::info!("storage writes again");
            *s = HealthReport {
                condition: Condition::Ok,
                since_ms: None,
                detail: None,
            };
        }
    }

    /// A write failed; storage faults degrade the store. Returns true when a prober should start.
    pub(crate) fn failed(&self, e: &Error) -> bool {
        let condition = match e {
            Error::StorageFull(_) => Condition::Full,
            Error::StorageUnavailable(_) => Condition::Unavailable,
            _ => return false,
        };
        {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            if s.condition != condition {
                tracing::error!(error = %e, "storage degraded: writes fail until it is fixed");
                *s = HealthReport {
                    condition,
                    since_ms: s.since_ms.or(Some(clock::now_ms())),
                    detail: Some(e.to_string()),
                };
            }
        }
        !self.probing.swap(true, Ordering::SeqCst)
    }

    /// Whether the data dir's filesystem has [`MIN_FREE_BYTES`] available (true when unknown).
    fn has_room(&self) -> bool {
        self.dir
            .as_deref()
            .and_then(available_bytes)
            .is_none_or(|free| free >= MIN_FREE_BYTES)
    }

    /// The prober stopped (the store is healthy again, or closed).
    pub(crate) fn probe_stopped(&self) {
        self.probing.store(false, Ordering::SeqCst);
    }

    /// Takes the prober's role back after [`Health::probe_stopped`]; false if another prober has it.
    pub(crate) fn resume_probing(&self) -> bool {
        !self.probing.swap(true, Ordering::SeqCst)
    }
}

/// What one probe found out about the store's backend.
pub(crate) enum Probe {
    /// It tried (the probe itself records a success).
    Tried,
    /// The store closed: nothing is left to probe.
    Closed,
}

impl Health {
    /// Starts the prober: while the store is degraded, every [`PROBE_INTERVAL`], `probe` tries
    /// the backend. It stops once the store is healthy, or when `probe` finds the store closed.
    pub(crate) fn spawn_prober(
        self: &Arc<Self>,
        name: &str,
        mut probe: impl FnMut() -> Probe + Send + 'static,
    ) {
        let health = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                loop {
                    std::thread::sleep(PROBE_INTERVAL);
                    if health.is_ok() {
                        health.probe_stopped();
                        // A fault recorded between the check and the flag found the flag still
                        // set and started no prober: look once more, and carry on if it is ours
                        // to probe.
                        if health.is_ok() || !health.resume_probing() {
                            return;
                        }
                    }
                    if let Probe::Closed = probe() {
                        health.probe_stopped();
                        return;
                    }
                }
            });
        if spawned.is_err() {
            tracing::warn!("cannot start the storage prober; health turns ok with the next write");
        }
    }
}

/// Bytes available to unprivileged writers on the filesystem holding `dir`.
#[cfg(unix)]
fn available_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `path` is NUL-terminated and `st` is a valid out-pointer for one `statvfs`.
    let rc = unsafe { libc::statvfs(path.as_ptr(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled `st`.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // the field types differ between platforms
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(not(unix))]
fn available_bytes(_dir: &Path) -> Option<u64> {
    None
}
