//! Deployment history (migration 0016): one row per change to an agent's deployments (created,
//! promoted, deleted), with who made it and when. The row is written by the unit of work that
//! makes the change ([`Tx::record_deployment_change`], called from the deployment units of
//! `store/agentex.rs`), so a change and its history commit together or not at all. A row outlives
//! its deployment; the rows of an agent go with the agent.

use super::Tx;
use super::listing::{Direction, List, Page, SortKey};
use super::sql::{Db, OptionalExtension, params};
use crate::error::Result;

/// What happened to a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentChange {
    Created,
    Promoted,
    Deleted,
}

impl DeploymentChange {
    pub fn name(self) -> &'static str {
        match self {
            DeploymentChange::Created => "created",
            DeploymentChange::Promoted => "promoted",
            DeploymentChange::Deleted => "deleted",
        }
    }
}

impl super::sql::FromSql for DeploymentChange {
    fn column_result(value: super::sql::ValueRef<'_>) -> super::sql::FromSqlResult<Self> {
        match value.as_str()? {
            "created" => Ok(DeploymentChange::Created),
            "promoted" => Ok(DeploymentChange::Promoted),
            "deleted" => Ok(DeploymentChange::Deleted),
            other => Err(super::sql::FromSqlError::Other(
                format!("unknown deployment change {other:?}").into(),
            )),
        }
    }
}

/// Who makes a change: the user or app of the credential, and the API key it used (if any).
#[derive(Debug, Clone)]
pub struct ChangeAuthor {
    pub id: String,
    /// An app's key (its name is shown), else a user (its e-mail address is shown).
    pub app: bool,
    pub key_id: Option<String>,
}

/// One change of an agent's deployments.
#[derive(Debug, Clone)]
pub struct DeploymentHistoryRow {
    pub id: String,
    pub agent_id: String,
    pub deployment_id: String,
    pub change: DeploymentChange,
    pub docker_image: String,
    /// When the deployment was created.
    pub deployment_created_at: i64,
    /// `None` for changes made before sessiond kept history.
    pub author_id: Option<String>,
    pub author_name: Option<String>,
    pub author_email: Option<String>,
    pub key_id: Option<String>,
    /// When the change was made.
    pub created_at: i64,
}

const COLUMNS: &str = "h.id, h.agent_id, h.deployment_id, h.change, h.docker_image,
    h.deployment_created_at, h.author_id, h.author_name, h.author_email, h.key_id, h.created_at";

fn from_row(r: &super::sql::Row<'_>) -> super::sql::Result<DeploymentHistoryRow> {
    Ok(DeploymentHistoryRow {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        deployment_id: r.get(2)?,
        change: r.get(3)?,
        docker_image: r.get(4)?,
        deployment_created_at: r.get(5)?,
        author_id: r.get(6)?,
        author_name: r.get(7)?,
        author_email: r.get(8)?,
        key_id: r.get(9)?,
        created_at: r.get(10)?,
    })
}

/// One row, if its agent is in `workspace_id`.
fn entry(conn: &Db, workspace_id: &str, id: &str) -> Result<Option<DeploymentHistoryRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM agentex_deployment_history h
             JOIN agents a ON a.id = h.agent_id
             WHERE h.id = ?1 AND a.workspace_id = ?2"
        ))?
        .query_row([id, workspace_id], from_row)
        .optional()?)
}

/// A page of an agent's rows: `order_by` `deployment_timestamp` (the change) or
/// `build_timestamp` (the deployment's creation).
fn page(
    conn: &Db,
    agent_id: &str,
    order_by: SortKey,
    direction: Direction,
    page: Page,
) -> Result<Vec<DeploymentHistoryRow>> {
    let select = format!("SELECT {COLUMNS} FROM agentex_deployment_history h");
    let order = match order_by {
        SortKey::BuildTimestamp => "h.deployment_created_at",
        _ => "h.created_at",
    };
    List::new(&select, "h.agent_id", agent_id).run(conn, order, "h.id", direction, page, from_row)
}

/// The deployment a change is about, as its history row keeps it (the row outlives the
/// deployment).
pub(super) struct ChangedDeployment<'a> {
    pub agent_id: &'a str,
    pub id: &'a str,
    pub docker_image: &'a str,
    pub created_at: i64,
}

impl Tx<'_> {
    /// Records a change of `d` by `author`, now (in the transaction of the change).
    pub(super) fn record_deployment_change(
        &mut self,
        d: ChangedDeployment<'_>,
        change: DeploymentChange,
        author: &ChangeAuthor,
    ) -> Result<()> {
        let (name, email): (Option<String>, Option<String>) = if author.app {
            let name = self
                .conn
                .prepare_cached("SELECT name FROM apps WHERE id = ?1")?
                .query_row([&author.id], |r| r.get(0))
                .optional()?;
            (name, None)
        } else {
            let email: Option<String> = self
                .conn
                .prepare_cached("SELECT email FROM users WHERE id = ?1")?
                .query_row([&author.id], |r| r.get(0))
                .optional()?;
            (email.clone(), email)
        };
        self.conn
            .prepare_cached(
                "INSERT INTO agentex_deployment_history (id, agent_id, deployment_id, change,
                    docker_image, deployment_created_at, author_id, author_name, author_email,
                    key_id, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            )?
            .execute(params![
                crate::ids::new_id(),
                d.agent_id,
                d.id,
                change.name(),
                d.docker_image,
                d.created_at,
                author.id,
                name,
                email,
                author.key_id,
                self.now
            ])?;
        Ok(())
    }
}

/// The deployment history of the agents of a workspace, in sessiond's own types.
#[derive(Clone, Copy)]
pub struct DeploymentHistoryStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// Every change to agents' deployments (written by the deployment units of
    /// [`super::agentex::AgentexStore`]).
    pub fn deployment_history(&self) -> DeploymentHistoryStore<'_> {
        DeploymentHistoryStore { store: self }
    }
}

impl DeploymentHistoryStore<'_> {
    /// One row by id, in the workspace (`None` for another workspace's).
    pub async fn entry(
        &self,
        workspace_id: &str,
        id: &str,
    ) -> Result<Option<DeploymentHistoryRow>> {
        let (ws, id) = (workspace_id.to_owned(), id.to_owned());
        self.store.read(move |c| entry(c, &ws, &id)).await
    }

    /// A page of one agent's changes (the caller found the agent in its workspace).
    pub async fn page(
        &self,
        agent_id: &str,
        order_by: SortKey,
        direction: Direction,
        p: Page,
    ) -> Result<Vec<DeploymentHistoryRow>> {
        let agent_id = agent_id.to_owned();
        self.store
            .read(move |c| page(c, &agent_id, order_by, direction, p))
            .await
    }
}
