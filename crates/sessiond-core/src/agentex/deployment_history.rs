//! Deployment history: every change to an agent's deployments — created, promoted, deleted — with
//! who made it and when, recorded by the unit of work that made the change
//! (`store/deployment_history.rs`).
//!
//! The contract's `DeploymentHistory` describes git builds (commit, branch, author); sessiond has
//! none, so its fields carry the change:
//!
//! | field | sessiond |
//! |---|---|
//! | `id` | the history row |
//! | `commit_hash` | the deployment the change is about (also `deployment_id`) |
//! | `branch_name` | the change: `created`, `promoted` or `deleted` (also `change`) |
//! | `author_name` | the user's e-mail address, or the app's name (`unknown` for changes made before sessiond kept history) |
//! | `author_email` | the user's e-mail address (empty for an app, or unknown) |
//! | `build_timestamp` | when the deployment was created |
//! | `deployment_timestamp` | when the change was made |
//!
//! Beyond the contract's fields each row also names `docker_image`, `author_id` (the user or app)
//! and `key_id` (the API key the change was made with, or null).

use serde_json::{Value, json};

use super::view;
use crate::error::{Error, Result};
use crate::sessions::{Actor, Sessions};
use crate::store::agentex::{AgentexAgentRow, Direction, Page, SortKey};
use crate::store::deployment_history::{ChangeAuthor, DeploymentHistoryRow};
use crate::timeline::Sender;

/// The author a change by `actor` is recorded with.
pub fn author(actor: &Actor) -> ChangeAuthor {
    ChangeAuthor {
        id: actor.user_id.clone(),
        app: matches!(actor.sender, Sender::App { .. }),
        key_id: match &actor.channel {
            crate::sessions::Channel::ApiKey { key_id } => Some(key_id.clone()),
            _ => None,
        },
    }
}

/// The contract's `DeploymentHistory` (see the module table).
pub fn view(h: &DeploymentHistoryRow) -> Value {
    json!({
        "id": h.id,
        "agent_id": h.agent_id,
        "commit_hash": h.deployment_id,
        "branch_name": h.change.name(),
        "author_name": h.author_name.as_deref().unwrap_or("unknown"),
        "author_email": h.author_email.as_deref().unwrap_or(""),
        "build_timestamp": view::time(h.deployment_created_at),
        "deployment_timestamp": view::time(h.created_at),
        "deployment_id": h.deployment_id,
        "change": h.change.name(),
        "docker_image": h.docker_image,
        "author_id": h.author_id,
        "key_id": h.key_id,
    })
}

/// The history is the workspace's operators' record: an agent calling back with its key reads
/// none of it (403).
fn refuse_agent_key(actor: &Actor) -> Result<()> {
    match super::confinement::confined_to(actor) {
        Some(_) => Err(Error::Forbidden(
            "an agent key cannot read deployment history".into(),
        )),
        None => Ok(()),
    }
}

/// One row of the actor's workspace (404 for an unknown id and another workspace's alike).
pub async fn get(sessions: &Sessions, actor: &Actor, id: &str) -> Result<DeploymentHistoryRow> {
    refuse_agent_key(actor)?;
    if !crate::ids::looks_like_id(id) {
        return Err(Error::NotFound);
    }
    sessions
        .store()
        .deployment_history()
        .entry(&actor.workspace_id, id)
        .await?
        .ok_or(Error::NotFound)
}

/// A page of an agent's changes, newest first unless asked otherwise.
pub async fn list(
    sessions: &Sessions,
    actor: &Actor,
    agent: &AgentexAgentRow,
    order_by: SortKey,
    direction: Direction,
    page: Page,
) -> Result<Vec<DeploymentHistoryRow>> {
    refuse_agent_key(actor)?;
    Ok(sessions
        .store()
        .deployment_history()
        .page(&agent.id, order_by, direction, page)
        .await?)
}
