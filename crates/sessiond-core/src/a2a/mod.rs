//! A2A (the Agent2Agent protocol, v1.0): every agent of a workspace is an A2A server, its tasks
//! projections of the agent's sessions. The transport (the card routes, the JSON-RPC envelope,
//! SSE) is `api::a2a`; this module is the protocol over the core, one file per method, each
//! calling the same `Sessions` operations the `/v1` routes call.
//!
//! A new task is a new session; `contextId` and the task id are both the session id; a message
//! naming a task (or its context) continues that session: it answers the session's question
//! when the task is `input-required`, else it is a follow-up. `CancelTask` is the interrupt.
//! Sessions started here record `source` `a2a` (`Channel::Protocol`).

pub mod cancel_task;
pub mod card;
pub mod error;
pub mod get_task;
pub mod list_tasks;
pub mod message;
pub mod push;
pub mod push_config;
pub mod reading;
pub mod send_message;
pub mod stream;
pub mod task;
pub mod window;

use crate::secret::Sealer;
use crate::sessions::{Actor, Channel, Sessions};
use crate::store::AgentRow;

/// The protocol version the card names and the JSON-RPC binding speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The `source` of a session started over A2A (an extension of the seed's values).
pub const SOURCE: &str = "a2a";

/// The agent an A2A server is, and who is calling it.
pub struct Server<'a> {
    pub sessions: &'a Sessions,
    pub actor: &'a Actor,
    pub agent: &'a AgentRow,
    /// Seals and opens push-notification secrets.
    pub sealer: &'a Sealer,
}

/// The actor as A2A records it: its channel spoken through A2A (`Channel::Protocol`), so what
/// it creates says it came over A2A, attributed to the credential.
pub fn actor(mut actor: Actor) -> Actor {
    let via = std::mem::replace(&mut actor.channel, Channel::Cli);
    actor.channel = via.through(SOURCE);
    actor
}
