//! Busy policies: what a message to a session whose turn is running asks for, the same on every
//! API family (`/v1`'s `ifBusy`, `/v2`'s and `/agentex`'s `if_busy`), after LangGraph's multitask
//! strategies:
//!
//! * `enqueue` (the default) — delivered as before busy policies existed: a steer reaches the
//!   running turn between its steps, a follow-up runs after it.
//! * `interrupt` — the running turn is stopped (`interrupt_requested`, then its `interrupted`
//!   terminal) and the message runs as the next turn.
//! * `reject` — refused with 409 `session_busy` in the family's error shape; nothing is written.
//!
//! The families only parse the field; the decision is made here and in the store's unit of work
//! that records the message (`store::busy`), against the session row it holds, so a turn that
//! starts or ends at the same moment cannot slip between the check and the write.

use crate::error::{Error, Result};

pub use crate::store::busy::WhenBusy as BusyPolicy;

/// The policies' names, as every family spells them.
pub const BUSY_POLICIES: [&str; 3] = ["enqueue", "interrupt", "reject"];

/// A busy policy from a request's field (`field` names it in the error).
pub fn parse(field: &str, value: Option<&str>) -> Result<BusyPolicy> {
    match value {
        None | Some("enqueue") => Ok(BusyPolicy::Enqueue),
        Some("interrupt") => Ok(BusyPolicy::Interrupt),
        Some("reject") => Ok(BusyPolicy::Reject),
        Some(_) => Err(Error::invalid(format!(
            "{field}: must be one of {}",
            BUSY_POLICIES.join(", ")
        ))),
    }
}
