//! Whether the store can write: what `/healthz` and `/readyz` report.
//!
//! The writer records the fate of every batch: a commit clears a fault, a storage fault (disk full,
//! I/O error, read-only) sets one. While a fault is set and nothing else writes, a prober submits
//! a tiny real write (`PRAGMA user_version` rewritten to itself, which appends one WAL frame) at a
//! short interval, so the state turns healthy on its own once space returns, without waiting for
//! a client to try.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::clock;
use crate::error::Error;

/// How often a degraded store tries a probe write.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);

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
        }
    }
}

impl Health {
    pub fn report(&self) -> HealthReport {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn is_ok(&self) -> bool {
        self.report().condition == Condition::Ok
    }

    /// A batch committed: the store writes again.
    pub(crate) fn committed(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
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

    /// The prober stopped (the store is healthy again, or closed).
    pub(crate) fn probe_stopped(&self) {
        self.probing.store(false, Ordering::SeqCst);
    }

    /// Takes the prober's role back after [`Health::probe_stopped`]; false if another prober has it.
    pub(crate) fn resume_probing(&self) -> bool {
        !self.probing.swap(true, Ordering::SeqCst)
    }
}
