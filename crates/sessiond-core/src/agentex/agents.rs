//! Agents as the agent platform API shows them: sessiond's agents (`id` its id, `name` its slug)
//! with the registration `register-build` records.
//!
//! Every agent's `acp_type` is `sync` unless it is a registered ACP server (its own `sync` or
//! `async`, `agentex::acp`): a sessiond agent runs its turns itself and answers
//! `message/send` within the request, which is what the contract's `sync` agents do (and what the
//! official client's `send_message` helpers expect). sessiond also accepts the methods the
//! contract reserves for `async` agents (`event/send`, `task/cancel`) on every agent.

use serde_json::{Value, json};

use super::view;
use crate::agents::{self, AgentSpec};
use crate::config::Policy;
use crate::engine::EngineConfig;
use crate::engine::acp::{AcpConfig, AcpType};
use crate::error::{Error, Result};
use crate::sessions::{Actor, Sessions};
use crate::store::agentex::{AgentFilter, AgentKey, AgentRegistration, AgentexAgentRow};
use crate::store::directory::AgentLink;

pub const ACP_TYPE: &str = "sync";

/// The agent a request names, in the actor's workspace (404 `agent_not_found` otherwise, also for
/// another workspace's agent). A registered agent calling back with its key finds only itself:
/// every other agent answers as one that does not exist, so nothing reached through an agent
/// (its schedules, deployments, state) is there for another agent's key.
pub async fn find(
    sessions: &Sessions,
    actor: &Actor,
    key: AgentKey<'_>,
) -> Result<AgentexAgentRow> {
    if let AgentKey::Id(id) = key
        && !crate::ids::looks_like_id(id)
    {
        return Err(Error::AgentNotFound);
    }
    let agent = sessions
        .store()
        .agentex()
        .agent(&actor.workspace_id, key)
        .await?
        .ok_or(Error::AgentNotFound)?;
    match super::confinement::confined_to(actor) {
        Some(own) if own != agent.id => Err(Error::AgentNotFound),
        _ => Ok(agent),
    }
}

pub async fn list(
    sessions: &Sessions,
    actor: &Actor,
    filter: AgentFilter,
) -> Result<Vec<AgentexAgentRow>> {
    Ok(sessions
        .store()
        .agentex()
        .agents(&actor.workspace_id, filter)
        .await?)
}

/// `Ready` when the agent's engine can run here, else `Failed` with the reason.
fn health(engine: &str, policy: &Policy) -> (&'static str, Option<String>) {
    match EngineConfig::parse(engine).and_then(|c| c.map_or(Ok(()), |c| c.permitted(policy))) {
        Ok(()) => ("Ready", None),
        Err(e) => ("Failed", Some(e.to_string())),
    }
}

/// The contract's `Agent`.
pub fn view(a: &AgentexAgentRow, policy: &Policy) -> Value {
    let (status, status_reason) = health(&a.engine, policy);
    json!({
        "id": a.id,
        "name": a.slug,
        "description": a.description,
        "acp_type": acp_config(a).map_or(ACP_TYPE, |c| c.acp_type.as_str()),
        "created_at": view::time(a.created_at),
        "updated_at": view::time(a.updated_at),
        "agent_input_type": a.agent_input_type,
        "production_deployment_id": a.production_deployment_id,
        "registered_at": view::time_opt(a.registered_at),
        "registration_metadata": view::document(a.registration_metadata.as_deref()),
        "status": status,
        "status_reason": status_reason,
    })
}

/// What `register-build` sends.
pub struct RegisterBuild {
    pub name: String,
    pub description: String,
    pub agent_input_type: Option<String>,
    pub registration_metadata: Option<Value>,
}

/// Registers an agent by name: creates it (with the server's default engine, in its own anchor)
/// or, when one with that name exists, replaces its registration. Idempotent by name.
pub async fn register_build(
    sessions: &Sessions,
    actor: &Actor,
    r: RegisterBuild,
) -> Result<AgentexAgentRow> {
    if let Some(t) = &r.agent_input_type
        && t != "text"
        && t != "json"
    {
        return Err(Error::invalid(
            "agent_input_type: must be \"text\", \"json\" or null",
        ));
    }
    if r.registration_metadata
        .as_ref()
        .is_some_and(|m| !m.is_object())
    {
        return Err(Error::invalid(
            "registration_metadata: must be an object or null",
        ));
    }
    if r.description.chars().count() > 10_000 {
        return Err(Error::invalid("description: longer than 10000 characters"));
    }
    let reg = AgentRegistration {
        description: r.description,
        agent_input_type: r.agent_input_type,
        registration_metadata: r.registration_metadata.as_ref().map(Value::to_string),
    };
    let store = sessions.store();
    let agent_id = match find(sessions, actor, AgentKey::Name(&r.name)).await {
        Ok(agent) => {
            store.agentex().register(&agent.id, reg).await?;
            agent.id
        }
        Err(Error::AgentNotFound) => {
            let spec = AgentSpec {
                slug: Some(r.name.clone()),
                name: None,
                anchor: None,
                engine: None,
            };
            let first = reg.clone();
            let created = agents::create_with(
                store,
                &sessions.drive(actor),
                &sessions.config().policy,
                &actor.workspace_id,
                spec,
                AgentLink::Register(first),
            )
            .await;
            match created {
                Ok(row) => row.id,
                // Another registration of the same name won the race: register over it.
                Err(Error::Conflict("agent_exists", _)) => {
                    let agent = find(sessions, actor, AgentKey::Name(&r.name)).await?;
                    store.agentex().register(&agent.id, reg).await?;
                    agent.id
                }
                Err(Error::InvalidRequest(msg)) => {
                    return Err(Error::invalid(msg.replacen("slug:", "name:", 1)));
                }
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    find(sessions, actor, AgentKey::Id(&agent_id)).await
}

/// Deletes an agent (409 while it still has tasks, and for the workspace's root agent).
pub async fn delete(sessions: &Sessions, actor: &Actor, key: AgentKey<'_>) -> Result<String> {
    let agent = find(sessions, actor, key).await?;
    agents::delete(sessions.store(), &actor.workspace_id, &agent.slug).await?;
    Ok(agent.id)
}

/// The ACP configuration of an agent whose engine is one.
pub fn acp_config(agent: &AgentexAgentRow) -> Option<AcpConfig> {
    match EngineConfig::parse(&agent.engine) {
        Ok(Some(EngineConfig::Acp(c))) => Some(c),
        _ => None,
    }
}

/// Whether an agent is an async ACP server (it hears of its tasks' creation and cancellation).
pub fn is_async(agent: &AgentexAgentRow) -> bool {
    acp_config(agent).is_some_and(|c| c.acp_type == AcpType::Async)
}
