//! An agent's Agent Card: who the A2A server at `/a2a/{agent}` is, where its JSON-RPC endpoint
//! is, and that it takes the same bearer API key as every other route.

use serde_json::{Value, json};

use super::PROTOCOL_VERSION;
use crate::store::AgentRow;

/// The URL of an agent's A2A server (its JSON-RPC endpoint; the card is under it at
/// `.well-known/agent-card.json`).
pub fn endpoint(base_url: &str, agent: &AgentRow) -> String {
    format!("{}/a2a/{}", base_url.trim_end_matches('/'), agent.slug)
}

/// The engine kind an agent runs (`scripted`, `openai`, `command`, …), a tag of its skill.
fn engine_kind(agent: &AgentRow) -> String {
    serde_json::from_str::<Value>(&agent.engine)
        .ok()
        .and_then(|e| e.get("type").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "default".to_owned())
}

/// The card. One skill, the agent itself: every message is a turn of one of its sessions.
pub fn card(base_url: &str, agent: &AgentRow) -> Value {
    let url = endpoint(base_url, agent);
    json!({
        "name": agent.name,
        "description": format!(
            "sessiond agent {}: each task is a durable session of this agent, working in {}.",
            agent.name,
            if agent.anchor.is_empty() { "its workspace's drive" } else { agent.anchor.as_str() }
        ),
        "supportedInterfaces": [{
            "url": url,
            "protocolBinding": "JSONRPC",
            "protocolVersion": PROTOCOL_VERSION,
        }],
        "provider": { "organization": "sessiond", "url": base_url },
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {
            "streaming": true,
            "pushNotifications": true,
            "extendedAgentCard": false,
        },
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "A sessiond API key of the agent's workspace",
                }
            }
        },
        "securityRequirements": [{ "schemes": { "bearer": { "list": [] } } }],
        "defaultInputModes": ["text/plain", "application/json"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{
            "id": agent.slug,
            "name": agent.name,
            "description": format!(
                "Runs a turn of agent {} on the message; a question it asks is the task's \
                 input-required state, answered by the next message.",
                agent.name
            ),
            "tags": ["sessiond", engine_kind(agent)],
        }],
    })
}
