//! What sessiond records about itself, for every layer: the operational metrics `/metrics` serves
//! ([`metrics`]) and the id of the HTTP request a piece of work came from ([`request_id`]).
//!
//! A leaf crate of its own so that the store, the core and the HTTP layer record into the same
//! counters and read the same request id without depending on each other: the store counts its
//! commits and checkpoints, the HTTP layer its requests, and only the server renders them.

pub mod metrics;
pub mod request_id;
