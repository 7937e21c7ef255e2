//! sessiond hosts durable agent sessions on one machine.
//!
//! Start with `ARCHITECTURE.md` for the map; each module's doc comment says what it owns.

pub mod a2a;
pub mod access;
pub mod agentex;
pub mod agents;
pub mod api;
pub mod archives;
pub mod auth;
pub mod bus;
pub mod cli;
pub mod config;
pub mod database;
pub mod drive;
pub mod engine;
pub mod error;
pub mod hast;
pub mod mcp;
pub mod outbound;
pub mod process;
pub mod projection;
pub mod retention;
pub mod runner;
pub mod schedules;
pub mod secret;
pub mod server;
pub mod sessions;
pub mod store;
pub mod tls;
pub mod uploads;

pub use error::{Error, Result};
// The vocabulary lives in its own crate; its modules keep their paths here (`crate::timeline`).
pub use sessiond_model::{clock, ids, nul, timeline};
pub use sessiond_telemetry::{metrics, request_id};
