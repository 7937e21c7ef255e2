//! The store as the server holds it: the port of `sessiond-store` (its handles, rows and errors,
//! re-exported here under the paths the core names them by) paired with the bus its commits are
//! published to.
//!
//! The store crate knows no bus: it publishes through its own [`Sink`] port, which [`Bus`]
//! implements. The core needs both the store and the bus wherever it follows a session live, so
//! [`Store`] carries the two together; every store operation is reached through it as through
//! the port itself.

use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use crate::bus::Bus;

#[cfg(feature = "postgres")]
pub use sessiond_store::postgres;
pub use sessiond_store::{
    AgentRow, Condition, DEFAULT_WORKSPACE, Error, HealthReport, ImageRow, LastTerminal, Lease,
    LogReads, NewRecordFacts, QueueKind, RecordFacts, Relay, Result, SCHEMA_VERSION, SessionKey,
    SessionRow, SignalHook, Sink, StoreConfig, StoredEvent, Synchronous, TurnInput, TurnSignal,
    TurnStatus, a2a_push, access, acp, agentex, archives, backup, busy, claims, deployment_history,
    directory, error, fork, health, identity, inputs, intake, langgraph, logins, outbound,
    projections, record, retention, schedules, seed, sessions, submit, take_queued, turns, usage,
    webhooks,
};

/// The store's port and the bus it publishes to.
#[derive(Clone)]
pub struct Store {
    port: sessiond_store::Store,
    bus: Arc<Bus>,
}

impl Store {
    /// Opens (creating if needed) the SQLite database at `path`; commits are published on `bus`.
    pub fn open(path: &Path, cfg: &StoreConfig, bus: Arc<Bus>) -> Result<Store> {
        let port = sessiond_store::Store::open(path, cfg, Arc::clone(&bus) as Arc<dyn Sink>)?;
        Ok(Store { port, bus })
    }

    /// Opens the PostgreSQL database at `url`; what any process commits is published on `bus`.
    pub fn open_postgres(url: &str, cfg: &StoreConfig, bus: Arc<Bus>) -> Result<Store> {
        let port =
            sessiond_store::Store::open_postgres(url, cfg, Arc::clone(&bus) as Arc<dyn Sink>)?;
        Ok(Store { port, bus })
    }

    /// The live fan-out of every session's frames.
    pub fn bus(&self) -> &Arc<Bus> {
        &self.bus
    }
}

/// Every handle of the port (`store.log()`, `store.sessions()`, …) is called on the pair.
impl Deref for Store {
    type Target = sessiond_store::Store;

    fn deref(&self) -> &sessiond_store::Store {
        &self.port
    }
}
