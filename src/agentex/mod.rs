//! The agent platform API's model over the sessions core (seed 003, the `/agentex` family).
//!
//! Its agents are sessiond's agents (`Agent.id` is the agent's id, `name` its slug), its tasks are
//! sessions, and its task messages are the sessions' timeline events read as messages. What those
//! objects carry beyond the core (registrations, deployments, task names and params, events,
//! states, spans, trackers) lives in the `agentex_*` tables, written in the same transactions as
//! the timeline events they belong with. The HTTP handlers are in `api::agentex`.

pub mod agents;
pub mod content;
pub mod deployments;
pub mod records;
pub mod tasks;
pub mod updates;
pub mod view;
