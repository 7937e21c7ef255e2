//! Agents: the owners of default sessions and of drive anchors.
//!
//! Every workspace has the reserved `root` agent, whose anchor is the whole drive. Other agents
//! get an anchor folder (by default `agents/<slug>`) that their sessions' cwd must stay inside.
//! Agents are managed through the JSON routes, the CLI and the config file; all three end here.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Policy;
use crate::drive::{self, Drive};
use crate::error::{Error, Result};
use crate::store::directory::{AgentChange, AgentLink, NewAgent};
use crate::store::{AgentRow, Store};

pub const ROOT_SLUG: &str = "root";

/// Fields of a new agent (or of a change, where `None` keeps the current value).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    pub slug: Option<String>,
    pub name: Option<String>,
    pub anchor: Option<String>,
    pub engine: Option<Value>,
}

/// Engine kinds an agent may name.
pub const ENGINE_KINDS: [&str; 4] = ["scripted", "openai", "command", "acp"];

pub(crate) fn check_slug(slug: &str) -> Result<()> {
    let ok = !slug.is_empty()
        && slug.len() <= 63
        && slug
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !slug.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            "slug: 1 to 63 characters of a-z, 0-9 and '-', not starting with '-'",
        ))
    }
}

fn check_name(name: &str) -> Result<()> {
    if name.trim().is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "name: 1 to 100 characters, no control characters",
        ));
    }
    Ok(())
}

/// A valid engine object that the operator's policy permits (`[policy]`: what an engine may run,
/// call and send is their decision, whoever holds the key that configures the agent).
pub fn check_engine(engine: &Value, policy: &Policy) -> Result<String> {
    let obj = engine
        .as_object()
        .ok_or_else(|| Error::invalid("engine: must be an object"))?;
    if let Some(kind) = obj.get("kind") {
        let kind = kind.as_str().unwrap_or_default();
        if !ENGINE_KINDS.contains(&kind) {
            return Err(Error::invalid(format!(
                "engine/kind: must be one of {}",
                ENGINE_KINDS.join(", ")
            )));
        }
    }
    let text = engine.to_string();
    if let Some(cfg) = crate::engine::EngineConfig::parse(&text)? {
        cfg.permitted(policy)?;
    }
    Ok(text)
}

/// An agent as the API shows it.
pub fn view(a: &AgentRow) -> Value {
    json!({
        "id": a.id,
        "slug": a.slug,
        "name": a.name,
        "anchor": a.anchor,
        "engine": serde_json::from_str::<Value>(&a.engine).unwrap_or_else(|_| json!({})),
        "createdAt": a.created_at,
    })
}

/// An agent's ACP server (`acpUrl`, null unless its engine is `acp`) and how sessiond's last
/// calls to it went: when it last answered one (`lastContactAt`), and the last call that failed
/// (`lastError`, `lastErrorAt`); null where there was none.
pub async fn contact(store: &Store, workspace_id: &str, slug: &str) -> Result<Value> {
    let agent = get(store, workspace_id, slug).await?;
    let url = match crate::engine::EngineConfig::parse(&agent.engine) {
        Ok(Some(crate::engine::EngineConfig::Acp(c))) => Some(c.url),
        _ => None,
    };
    let c = store.acp().contact(&agent.id).await?.unwrap_or_default();
    Ok(json!({
        "acpUrl": url,
        "lastContactAt": c.last_contact_at,
        "lastError": c.last_error,
        "lastErrorAt": c.last_error_at,
    }))
}

pub async fn list(store: &Store, workspace_id: &str) -> Result<Vec<AgentRow>> {
    Ok(store.directory().agents(workspace_id).await?)
}

pub async fn get(store: &Store, workspace_id: &str, slug: &str) -> Result<AgentRow> {
    store
        .directory()
        .agent_by_slug(workspace_id, slug)
        .await?
        .ok_or(Error::AgentNotFound)
}

pub fn create_blocking(
    store: &Store,
    drive: &Drive,
    policy: &Policy,
    workspace_id: &str,
    spec: AgentSpec,
) -> Result<AgentRow> {
    let new = prepare_new(drive, policy, workspace_id, spec)?;
    Ok(store.directory().create_agent_blocking(new)?)
}

pub async fn create(
    store: &Store,
    drive: &Drive,
    policy: &Policy,
    workspace_id: &str,
    spec: AgentSpec,
) -> Result<AgentRow> {
    create_with(store, drive, policy, workspace_id, spec, AgentLink::None).await
}

/// [`create`], with `link` naming the rows another API family records about the new agent in
/// the same transaction (its registration).
pub async fn create_with(
    store: &Store,
    drive: &Drive,
    policy: &Policy,
    workspace_id: &str,
    spec: AgentSpec,
    link: AgentLink,
) -> Result<AgentRow> {
    let new = prepare_new(drive, policy, workspace_id, spec)?;
    Ok(store.directory().create_agent(new, link).await?)
}

/// Validates a new agent and creates its anchor folder.
fn prepare_new(
    drive: &Drive,
    policy: &Policy,
    workspace_id: &str,
    spec: AgentSpec,
) -> Result<NewAgent> {
    let slug = spec.slug.ok_or_else(|| Error::invalid("slug: required"))?;
    check_slug(&slug)?;
    if slug == ROOT_SLUG {
        return Err(Error::Conflict(
            "agent_exists",
            "root is reserved for the drive-root owner".into(),
        ));
    }
    let name = spec.name.unwrap_or_else(|| slug.clone());
    check_name(&name)?;
    let anchor = anchor_folder(
        drive,
        spec.anchor.as_deref().unwrap_or(&format!("agents/{slug}")),
    )?;
    let engine = check_engine(&spec.engine.unwrap_or_else(|| json!({})), policy)?;
    Ok(NewAgent {
        workspace_id: workspace_id.to_owned(),
        slug,
        name,
        anchor,
        engine,
    })
}

fn anchor_folder(drive: &Drive, anchor: &str) -> Result<String> {
    if drive::normalise(anchor).is_none() {
        return Err(Error::invalid(
            "anchor: must be a folder inside the workspace drive",
        ));
    }
    drive
        .make_dir(anchor)
        .map_err(|_| Error::invalid("anchor: must be a folder inside the workspace drive"))
}

/// [`update`] for callers outside an async runtime (start-up).
pub fn update_blocking(
    store: &Store,
    drive: &Drive,
    policy: &Policy,
    workspace_id: &str,
    slug: &str,
    spec: AgentSpec,
) -> Result<AgentRow> {
    let current = store
        .directory()
        .agent_by_slug_blocking(workspace_id, slug)?
        .ok_or(Error::AgentNotFound)?;
    let change = prepare_update(drive, policy, &current, spec)?;
    Ok(store.directory().update_agent_blocking(change)?)
}

pub async fn update(
    store: &Store,
    drive: &Drive,
    policy: &Policy,
    workspace_id: &str,
    slug: &str,
    spec: AgentSpec,
) -> Result<AgentRow> {
    let current = get(store, workspace_id, slug).await?;
    let change = prepare_update(drive, policy, &current, spec)?;
    Ok(store.directory().update_agent(change).await?)
}

/// Validates a change to an agent; the anchor folder is created when it moves.
fn prepare_update(
    drive: &Drive,
    policy: &Policy,
    current: &AgentRow,
    spec: AgentSpec,
) -> Result<AgentChange> {
    if spec.slug.as_deref().is_some_and(|s| s != current.slug) {
        return Err(Error::invalid("slug: cannot be changed"));
    }
    let name = spec.name.unwrap_or_else(|| current.name.clone());
    check_name(&name)?;
    let anchor = match spec.anchor {
        Some(_) if current.slug == ROOT_SLUG => {
            return Err(Error::invalid(
                "anchor: the root agent always owns the whole drive",
            ));
        }
        Some(a) => anchor_folder(drive, &a)?,
        None => current.anchor.clone(),
    };
    let engine = match spec.engine {
        Some(e) => check_engine(&e, policy)?,
        None => current.engine.clone(),
    };
    Ok(AgentChange {
        agent_id: current.id.clone(),
        name,
        anchor,
        engine,
    })
}

pub async fn delete(store: &Store, workspace_id: &str, slug: &str) -> Result<()> {
    if slug == ROOT_SLUG {
        return Err(Error::Conflict(
            "agent_reserved",
            "the root agent cannot be deleted".into(),
        ));
    }
    let agent = get(store, workspace_id, slug).await?;
    Ok(store.directory().delete_agent(&agent.id).await?)
}

/// The agent owning a cwd: the one with the longest anchor containing it (root at worst).
pub fn owner_of<'a>(agents: &'a [AgentRow], cwd: &str) -> Option<&'a AgentRow> {
    agents
        .iter()
        .filter(|a| {
            a.anchor.is_empty() || cwd == a.anchor || cwd.starts_with(&format!("{}/", a.anchor))
        })
        .max_by_key(|a| a.anchor.len())
}
