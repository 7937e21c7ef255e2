//! The agent platform API's model over the sessions core (seed 003, the `/agentex` family).
//!
//! Its agents are sessiond's agents (`Agent.id` is the agent's id, `name` its slug), its tasks are
//! sessions, and its task messages are the sessions' timeline events read as messages. What those
//! objects carry beyond the core (registrations, deployments and their history, task names and
//! params, events, states, spans, trackers, LangGraph checkpoints, webhook triggers) lives in the
//! `agentex_*` tables, written in the same transactions as the timeline events they belong with.
//! The HTTP handlers are in `api::agentex`.

pub mod acp;
pub mod agents;
pub mod calls;
pub mod checkpoints;
pub mod confinement;
pub mod content;
pub mod deployment_history;
pub mod deployments;
pub mod messages;
pub mod queries;
pub mod records;
pub mod tasks;
pub mod updates;
pub mod view;
pub mod webhooks;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{Error, Result};

/// Decodes a JSON value into `T`, naming the path of the first thing that does not fit
/// (`what/path: reason`).
pub fn decode_value<T: DeserializeOwned>(raw: &Value, what: &str) -> Result<T> {
    serde_path_to_error::deserialize(raw).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            Error::invalid(format!("{what}: {}", e.inner()))
        } else {
            Error::invalid(format!("{what}/{}: {}", path.replace('.', "/"), e.inner()))
        }
    })
}
