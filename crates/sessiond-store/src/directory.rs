//! The directory: workspaces, their agents and each agent's default session alias, in
//! sessiond's own types.

use super::acp::AcpEnrolment;
use super::agentex::AgentRegistration;
use super::{AgentRow, SessionRow, Store, WorkspaceRow};
use crate::error::{Error, Result};

/// A new agent's directory entry (validated by the caller).
#[derive(Debug, Clone)]
pub struct NewAgent {
    pub workspace_id: String,
    pub slug: String,
    pub name: String,
    pub anchor: String,
    /// Engine configuration (JSON object).
    pub engine: String,
}

/// What another API family records about a new agent in the transaction that creates it.
#[derive(Clone)]
pub enum AgentLink {
    None,
    /// The agent platform API's registration.
    Register(AgentRegistration),
    /// A registration as an ACP server (with its issued key).
    EnrolAcp(AcpEnrolment),
}

/// An agent's directory entry as an update changes it.
#[derive(Debug, Clone)]
pub struct AgentChange {
    pub agent_id: String,
    pub name: String,
    pub anchor: String,
    pub engine: String,
}

/// Workspaces, agents and default sessions.
#[derive(Clone, Copy)]
pub struct DirectoryStore<'a> {
    store: &'a Store,
}

impl Store {
    /// The directory of workspaces and agents.
    pub fn directory(&self) -> DirectoryStore<'_> {
        DirectoryStore { store: self }
    }
}

impl DirectoryStore<'_> {
    pub async fn workspace_by_slug(&self, slug: &str) -> Result<Option<WorkspaceRow>> {
        let slug = slug.to_owned();
        self.store
            .read(move |c| super::workspace_by_slug(c, &slug))
            .await
    }

    /// [`DirectoryStore::workspace_by_slug`] outside an async runtime (start-up, the CLI).
    pub fn workspace_by_slug_blocking(&self, slug: &str) -> Result<Option<WorkspaceRow>> {
        self.store
            .read_blocking(|c| super::workspace_by_slug(c, slug))
    }

    /// Finds a workspace by slug, creating it (with its `root` agent) when missing; its id.
    pub fn ensure_workspace_blocking(&self, slug: &str, name: &str) -> Result<String> {
        let (slug, name) = (slug.to_owned(), name.to_owned());
        self.store
            .write_blocking(move |tx| tx.ensure_workspace(&slug, &name))
    }

    /// A workspace's agents, by slug.
    pub async fn agents(&self, workspace_id: &str) -> Result<Vec<AgentRow>> {
        let ws = workspace_id.to_owned();
        self.store.read(move |c| super::agents(c, &ws)).await
    }

    pub async fn agent_by_slug(&self, workspace_id: &str, slug: &str) -> Result<Option<AgentRow>> {
        let (ws, slug) = (workspace_id.to_owned(), slug.to_owned());
        self.store
            .read(move |c| super::agent_by_slug(c, &ws, &slug))
            .await
    }

    pub fn agent_by_slug_blocking(
        &self,
        workspace_id: &str,
        slug: &str,
    ) -> Result<Option<AgentRow>> {
        self.store
            .read_blocking(|c| super::agent_by_slug(c, workspace_id, slug))
    }

    pub async fn agent_by_id(&self, agent_id: &str) -> Result<Option<AgentRow>> {
        let id = agent_id.to_owned();
        self.store.read(move |c| super::agent_by_id(c, &id)).await
    }

    /// `(workspace slug, agent slug, engine)` of every agent.
    pub fn agent_engines_blocking(&self) -> Result<Vec<(String, String, String)>> {
        self.store.read_blocking(super::agent_engines)
    }

    /// Creates an agent (409 `agent_exists` when the slug is taken) with what `link` records
    /// about it, in one transaction.
    pub async fn create_agent(&self, a: NewAgent, link: AgentLink) -> Result<AgentRow> {
        self.store
            .write(move |tx| {
                let row =
                    tx.insert_agent(&a.workspace_id, &a.slug, &a.name, &a.anchor, &a.engine)?;
                match &link {
                    AgentLink::None => {}
                    AgentLink::Register(r) => tx.register_agent(&row.id, &r.borrowed())?,
                    AgentLink::EnrolAcp(e) => tx.enrol_acp_agent(&row.id, e)?,
                }
                Ok(row)
            })
            .await
    }

    pub fn create_agent_blocking(&self, a: NewAgent) -> Result<AgentRow> {
        self.store.write_blocking(move |tx| {
            tx.insert_agent(&a.workspace_id, &a.slug, &a.name, &a.anchor, &a.engine)
        })
    }

    /// Changes an agent's name, anchor and engine; the row as it now is.
    pub async fn update_agent(&self, c: AgentChange) -> Result<AgentRow> {
        self.store.write(move |tx| update_agent(tx, &c)).await
    }

    pub fn update_agent_blocking(&self, c: AgentChange) -> Result<AgentRow> {
        self.store.write_blocking(move |tx| update_agent(tx, &c))
    }

    /// Deletes an agent that owns no sessions (409 `agent_has_sessions` otherwise).
    pub async fn delete_agent(&self, agent_id: &str) -> Result<()> {
        let id = agent_id.to_owned();
        self.store.write(move |tx| tx.delete_agent(&id)).await
    }

    /// The agent's default session as `user_id` sees it, if one is bound.
    pub async fn default_session(
        &self,
        workspace_id: &str,
        agent_id: &str,
        user_id: &str,
    ) -> Result<Option<SessionRow>> {
        let (ws, agent, user) = (
            workspace_id.to_owned(),
            agent_id.to_owned(),
            user_id.to_owned(),
        );
        self.store
            .read(move |c| match super::default_session_id(c, &agent)? {
                Some(id) => super::session_row(c, &ws, &id, &user).map(Some),
                None => Ok(None),
            })
            .await
    }

    /// Points the agent's default alias at one of its sessions (404 when the session is not
    /// the agent's), or at nothing.
    pub async fn set_default_session(
        &self,
        workspace_id: &str,
        agent_id: &str,
        session_id: Option<&str>,
    ) -> Result<()> {
        let (ws, agent, target) = (
            workspace_id.to_owned(),
            agent_id.to_owned(),
            session_id.map(str::to_owned),
        );
        self.store
            .write(move |tx| {
                if let Some(sid) = &target {
                    let key = tx.session_key(&ws, sid)?;
                    if tx.session_row(&key)?.agent_id != agent {
                        return Err(Error::NotFound);
                    }
                }
                tx.set_default(&agent, target.as_deref())
            })
            .await
    }
}

fn update_agent(tx: &mut super::Tx<'_>, c: &AgentChange) -> Result<AgentRow> {
    tx.update_agent(&c.agent_id, &c.name, &c.anchor, &c.engine)?;
    super::agent_by_id(tx.conn, &c.agent_id)?.ok_or(Error::AgentNotFound)
}

impl super::Tx<'_> {
    pub fn workspace_by_slug(&self, slug: &str) -> Result<Option<WorkspaceRow>> {
        super::workspace_by_slug(self.conn, slug)
    }
}
