//! sessiond's core: sessions, their timelines and every face's domain over them, the runner and
//! its engines, the bus, and the store as the server holds it. It links no HTTP framework: the
//! routes are `sessiond-http`, the process (command line, wiring) the `sessiond` binary.
//!
//! Start with `ARCHITECTURE.md` for the map; each module's doc comment says what it owns.

pub mod a2a;
pub mod access;
pub mod agentex;
pub mod agents;
pub mod archives;
pub mod auth;
pub mod bus;
pub mod config;
pub mod database;
pub mod drive;
pub mod engine;
pub mod error;
pub mod hast;
pub mod limits;
pub mod mcp;
pub mod outbound;
pub mod process;
pub mod projection;
pub mod retention;
pub mod runner;
pub mod schedules;
pub mod secret;
pub mod sessions;
pub mod store;
pub mod tls;
pub mod uploads;

pub use error::{Error, Result};
// The vocabulary lives in its own crate; its modules keep their paths here (`crate::timeline`).
pub use sessiond_model::{clock, ids, nul, timeline};
pub use sessiond_telemetry::{metrics, request_id};
