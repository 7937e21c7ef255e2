//! Deployments are versions of an agent's engine configuration.
//!
//! A deployment carries its engine in `registration_metadata.engine` (the same object as a
//! sessiond agent's `engine`; without one it copies the agent's engine of the moment). It is
//! checked against the operator's `[policy]` when it is created and again when it is promoted
//! (`agents::check_engine`, like every agent engine). Promoting makes it the agent's only
//! production deployment and its engine the agent's; `previewRpc` runs tasks on a deployment's
//! engine without promoting it (the tasks it opens are pinned to that engine). `docker_image`,
//! `helm_release_name` and `sgp_deploy_id` are kept as labels; sessiond runs no images. A
//! deployment is `Ready` from the start, and has no `acp_url` (sessiond calls no agent server).
//! Every change (created, promoted, deleted) is recorded in the agent's deployment history by the
//! unit of work that makes it, with the actor as its author (`super::deployment_history`).

use serde_json::{Map, Value, json};

use super::view;
use crate::agents;
use crate::error::{Error, Result};
use crate::sessions::{Actor, Sessions};
use crate::store::agentex::{
    AgentexAgentRow, DeploymentRow, DeploymentSpec, Direction, Page, SortKey,
};

pub fn view(d: &DeploymentRow) -> Value {
    json!({
        "id": d.id,
        "agent_id": d.agent_id,
        "docker_image": d.docker_image,
        "is_production": d.is_production,
        "status": "Ready",
        "acp_url": null,
        "created_at": view::time(d.created_at),
        "expires_at": null,
        "helm_release_name": d.helm_release_name,
        "promoted_at": view::time_opt(d.promoted_at),
        "registration_metadata": view::document(Some(&d.registration_metadata)),
        "sgp_deploy_id": d.sgp_deploy_id,
    })
}

/// What a client sends to create a deployment.
pub struct NewDeploymentIn {
    pub docker_image: String,
    pub helm_release_name: Option<String>,
    pub registration_metadata: Option<Map<String, Value>>,
    pub sgp_deploy_id: Option<String>,
}

fn check_label(field: &str, v: &str, max: usize) -> Result<()> {
    if v.is_empty() || v.chars().count() > max || v.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{field}: 1 to {max} characters, no control characters"
        )));
    }
    Ok(())
}

pub async fn create(
    sessions: &Sessions,
    actor: &Actor,
    agent: &AgentexAgentRow,
    d: NewDeploymentIn,
) -> Result<DeploymentRow> {
    check_label("docker_image", &d.docker_image, 1024)?;
    if let Some(h) = &d.helm_release_name {
        check_label("helm_release_name", h, 256)?;
    }
    if let Some(s) = &d.sgp_deploy_id {
        check_label("sgp_deploy_id", s, 256)?;
    }
    let mut metadata = d.registration_metadata.unwrap_or_default();
    let engine = match metadata.get("engine") {
        Some(e) => e.clone(),
        None => serde_json::from_str(&agent.engine).unwrap_or_else(|_| json!({})),
    };
    let engine = agents::check_engine(&engine, &sessions.config().policy).map_err(|e| match e {
        Error::InvalidRequest(m) => Error::invalid(format!("registration_metadata/{m}")),
        other => other,
    })?;
    metadata.insert(
        "engine".into(),
        serde_json::from_str(&engine).unwrap_or_else(|_| json!({})),
    );
    let metadata = Value::Object(metadata).to_string();
    Ok(sessions
        .store()
        .agentex()
        .create_deployment(
            DeploymentSpec {
                agent_id: agent.id.clone(),
                docker_image: d.docker_image,
                helm_release_name: d.helm_release_name,
                sgp_deploy_id: d.sgp_deploy_id,
                registration_metadata: metadata,
                engine,
            },
            super::deployment_history::author(actor),
        )
        .await?)
}

pub async fn get(sessions: &Sessions, agent: &AgentexAgentRow, id: &str) -> Result<DeploymentRow> {
    sessions
        .store()
        .agentex()
        .deployment(&agent.id, id)
        .await?
        .ok_or(Error::NotFound)
}

pub async fn list(
    sessions: &Sessions,
    agent: &AgentexAgentRow,
    order_by: SortKey,
    direction: Direction,
    page: Page,
) -> Result<Vec<DeploymentRow>> {
    Ok(sessions
        .store()
        .agentex()
        .deployments(&agent.id, order_by, direction, page)
        .await?)
}

/// Deletes a deployment that is not in production (409 for the production one).
pub async fn delete(
    sessions: &Sessions,
    actor: &Actor,
    agent: &AgentexAgentRow,
    id: &str,
) -> Result<()> {
    Ok(sessions
        .store()
        .agentex()
        .delete_deployment(&agent.id, id, super::deployment_history::author(actor))
        .await?)
}

/// Makes a deployment the agent's only production deployment and its engine the agent's, in one
/// transaction, after checking the engine against the policy in force now.
pub async fn promote(
    sessions: &Sessions,
    actor: &Actor,
    agent: &AgentexAgentRow,
    id: &str,
) -> Result<DeploymentRow> {
    let d = get(sessions, agent, id).await?;
    let engine: Value = serde_json::from_str(&d.engine).unwrap_or_else(|_| json!({}));
    let engine = agents::check_engine(&engine, &sessions.config().policy)?;
    Ok(sessions
        .store()
        .agentex()
        .promote_deployment(
            &agent.id,
            &d.id,
            &engine,
            super::deployment_history::author(actor),
        )
        .await?)
}
