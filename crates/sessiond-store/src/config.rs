//! How the store is tuned: the `[store]` section of the configuration.

use serde::Deserialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Synchronous {
    /// WAL + NORMAL: a commit survives a process crash; the last commits before a power loss may
    /// be rolled back (never corrupted).
    Normal,
    /// WAL + FULL: every commit is fsynced before it is acknowledged.
    Full,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    pub synchronous: Synchronous,
    /// Read-only connections in the query pool.
    pub read_connections: u32,
    /// Most write requests the writer folds into one transaction.
    pub max_batch: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            synchronous: Synchronous::Normal,
            read_connections: 8,
            max_batch: 512,
        }
    }
}
