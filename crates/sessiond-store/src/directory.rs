//! The directory: workspaces, their agents and each agent's default session alias, in
//! sessiond's own types, and the statements that read and change them.

use super::acp::AcpEnrolment;
use super::agentex::AgentRegistration;
use super::sql::{Db, OptionalExtension, params};
use super::{SessionRow, Store, Tx};
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
        self.store.read(move |c| workspace_by_slug(c, &slug)).await
    }

    /// [`DirectoryStore::workspace_by_slug`] outside an async runtime (start-up, the CLI).
    pub fn workspace_by_slug_blocking(&self, slug: &str) -> Result<Option<WorkspaceRow>> {
        self.store.read_blocking(|c| workspace_by_slug(c, slug))
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
        self.store.read(move |c| agents(c, &ws)).await
    }

    pub async fn agent_by_slug(&self, workspace_id: &str, slug: &str) -> Result<Option<AgentRow>> {
        let (ws, slug) = (workspace_id.to_owned(), slug.to_owned());
        self.store.read(move |c| agent_by_slug(c, &ws, &slug)).await
    }

    pub fn agent_by_slug_blocking(
        &self,
        workspace_id: &str,
        slug: &str,
    ) -> Result<Option<AgentRow>> {
        self.store
            .read_blocking(|c| agent_by_slug(c, workspace_id, slug))
    }

    pub async fn agent_by_id(&self, agent_id: &str) -> Result<Option<AgentRow>> {
        let id = agent_id.to_owned();
        self.store.read(move |c| agent_by_id(c, &id)).await
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
            .read(move |c| match default_session_id(c, &agent)? {
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
    agent_by_id(tx.conn, &c.agent_id)?.ok_or(Error::AgentNotFound)
}

impl Tx<'_> {
    pub(crate) fn workspace_by_slug(&self, slug: &str) -> Result<Option<WorkspaceRow>> {
        workspace_by_slug(self.conn, slug)
    }

    /// Finds a workspace by slug, creating it (and its `root` agent, named for what it is: the
    /// agent of the whole drive) when missing.
    pub(crate) fn ensure_workspace(&mut self, slug: &str, name: &str) -> Result<String> {
        if let Some(id) = self
            .conn
            .query_row("SELECT id FROM workspaces WHERE slug = ?1", [slug], |r| {
                r.get(0)
            })
            .optional()?
        {
            return Ok(id);
        }
        // Processes starting at once on one database may both get here: the one whose insert
        // loses waits for the other's commit and reads its workspace.
        let id = crate::ids::new_id();
        let inserted = self
            .conn
            .query_row(
                "INSERT INTO workspaces (id, slug, name, created_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (slug) DO NOTHING RETURNING id",
                params![id, slug, name, self.now],
                |r| r.get::<_, String>(0),
            )
            .optional()?;
        if inserted.is_none() {
            return Ok(self.conn.query_row(
                "SELECT id FROM workspaces WHERE slug = ?1",
                [slug],
                |r| r.get(0),
            )?);
        }
        self.conn.execute(
            "INSERT INTO agents (id, workspace_id, slug, name, anchor, created_at)
             VALUES (?1, ?2, 'root', 'Workspace agent', '', ?3)",
            params![crate::ids::new_id(), id, self.now],
        )?;
        Ok(id)
    }

    pub(crate) fn insert_agent(
        &mut self,
        workspace_id: &str,
        slug: &str,
        name: &str,
        anchor: &str,
        engine: &str,
    ) -> Result<super::AgentRow> {
        let id = crate::ids::new_id();
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO agents (id, workspace_id, slug, name, anchor, engine, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (workspace_id, slug) DO NOTHING",
            )?
            .execute(params![
                id,
                workspace_id,
                slug,
                name,
                anchor,
                engine,
                self.now
            ])?;
        if inserted == 0 {
            return Err(Error::Conflict(
                "agent_exists",
                format!("an agent with slug {slug} already exists"),
            ));
        }
        agent_by_id(self.conn, &id)?.ok_or(Error::AgentNotFound)
    }

    pub(crate) fn update_agent(
        &mut self,
        agent_id: &str,
        name: &str,
        anchor: &str,
        engine: &str,
    ) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE agents SET name = ?2, anchor = ?3, engine = ?4 WHERE id = ?1")?
            .execute(params![agent_id, name, anchor, engine])?;
        Ok(())
    }

    /// Deletes an agent that owns no sessions (its sessions would lose their owner).
    pub(crate) fn delete_agent(&mut self, agent_id: &str) -> Result<()> {
        let sessions: i64 = self.conn.query_row(
            "SELECT count(*) FROM sessions WHERE agent_id = ?1",
            [agent_id],
            |r| r.get(0),
        )?;
        if sessions > 0 {
            return Err(Error::Conflict(
                "agent_has_sessions",
                format!("the agent still owns {sessions} sessions; delete them first"),
            ));
        }
        self.conn.execute(
            "DELETE FROM default_sessions WHERE agent_id = ?1",
            [agent_id],
        )?;
        self.conn
            .execute("DELETE FROM agents WHERE id = ?1", [agent_id])?;
        Ok(())
    }

    /// Points an owner's default alias at a session, or clears it.
    pub(crate) fn set_default(&mut self, agent_id: &str, session_id: Option<&str>) -> Result<()> {
        match session_id {
            Some(sid) => self
                .conn
                .prepare_cached(
                    "INSERT INTO default_sessions (agent_id, session_id) VALUES (?1, ?2)
                     ON CONFLICT (agent_id) DO UPDATE SET session_id = excluded.session_id",
                )?
                .execute(params![agent_id, sid])?,
            None => self
                .conn
                .prepare_cached("DELETE FROM default_sessions WHERE agent_id = ?1")?
                .execute([agent_id])?,
        };
        Ok(())
    }

    pub(crate) fn default_session(&self, agent_id: &str) -> Result<Option<String>> {
        default_session_id(self.conn, agent_id)
    }
}

// The directory's rows, read on any connection.

pub struct WorkspaceRow {
    pub id: String,
    pub slug: String,
}

pub fn workspace_by_slug(conn: &Db, slug: &str) -> Result<Option<WorkspaceRow>> {
    Ok(conn
        .prepare_cached("SELECT id, slug FROM workspaces WHERE slug = ?1")?
        .query_row([slug], |r| {
            Ok(WorkspaceRow {
                id: r.get(0)?,
                slug: r.get(1)?,
            })
        })
        .optional()?)
}

#[derive(Debug, Clone)]
pub struct AgentRow {
    pub id: String,
    pub slug: String,
    pub name: String,
    pub anchor: String,
    /// Engine configuration (JSON object).
    pub engine: String,
    pub created_at: i64,
}

const AGENT_COLUMNS: &str = "id, slug, name, anchor, engine, created_at";

fn agent_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<AgentRow> {
    Ok(AgentRow {
        id: r.get(0)?,
        slug: r.get(1)?,
        name: r.get(2)?,
        anchor: r.get(3)?,
        engine: r.get(4)?,
        created_at: r.get(5)?,
    })
}

pub fn agents(conn: &Db, workspace_id: &str) -> Result<Vec<AgentRow>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {AGENT_COLUMNS} FROM agents WHERE workspace_id = ?1 ORDER BY slug"
    ))?;
    let rows = stmt.query_map([workspace_id], agent_from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

pub fn agent_by_slug(conn: &Db, workspace_id: &str, slug: &str) -> Result<Option<AgentRow>> {
    Ok(conn
        .prepare_cached(&format!(
            "SELECT {AGENT_COLUMNS} FROM agents WHERE workspace_id = ?1 AND slug = ?2"
        ))?
        .query_row([workspace_id, slug], agent_from_row)
        .optional()?)
}

pub fn agent_by_id(conn: &Db, agent_id: &str) -> Result<Option<AgentRow>> {
    Ok(conn
        .prepare_cached(&format!("SELECT {AGENT_COLUMNS} FROM agents WHERE id = ?1"))?
        .query_row([agent_id], agent_from_row)
        .optional()?)
}

pub fn default_session_id(conn: &Db, agent_id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT session_id FROM default_sessions WHERE agent_id = ?1")?
        .query_row([agent_id], |r| r.get(0))
        .optional()?)
}

pub fn workspace_slug(conn: &Db, workspace_id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT slug FROM workspaces WHERE id = ?1")?
        .query_row([workspace_id], |r| r.get(0))
        .optional()?)
}

/// `(workspace slug, agent slug, engine)` of every agent.
pub(crate) fn agent_engines(conn: &Db) -> Result<Vec<(String, String, String)>> {
    let mut stmt = conn.prepare(
        "SELECT w.slug, a.slug, a.engine FROM agents a JOIN workspaces w ON w.id = a.workspace_id",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// The workspace that exists from the first start.
pub const DEFAULT_WORKSPACE: &str = "default";
