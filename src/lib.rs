//! sessiond hosts durable agent sessions on one machine.
//!
//! Start with `ARCHITECTURE.md` for the map; each module's doc comment says what it owns. This
//! crate is the process: the command line (`cli`) and the wiring of the server (`server`). The
//! core is `sessiond-core`, the routes `sessiond-http`; both are re-exported here under the paths
//! the binary, the tests and the benchmarks name them by (`sessiond::sessions`, `sessiond::api`).

pub mod cli;
pub mod server;

pub use sessiond_core::{Error, Result, clock, ids, metrics, nul, request_id, timeline};
pub use sessiond_core::{
    a2a, access, agentex, agents, archives, auth, bus, config, database, drive, engine, error,
    hast, mcp, outbound, process, projection, retention, runner, schedules, secret, sessions,
    store, tls, uploads,
};
pub use sessiond_http as api;
