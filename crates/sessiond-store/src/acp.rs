//! Registrations of ACP servers (migration 0007): the issued key's salt and hash, the principal
//! context, the registering user, and the lookups callbacks and registration need; and how the
//! last calls to an agent's ACP server went (migration 0021, `acp_contacts`).

use super::sql::{Db, OptionalExtension, params};

use super::Tx;
use crate::error::Result;

/// An agent's registration as an ACP server.
#[derive(Debug, Clone)]
pub struct AcpRegistrationRow {
    pub agent_id: String,
    pub key_salt: String,
    pub registered_by: String,
}

pub(super) fn acp_registration(conn: &Db, agent_id: &str) -> Result<Option<AcpRegistrationRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT agent_id, key_salt, registered_by FROM acp_registrations WHERE agent_id = ?1",
        )?
        .query_row([agent_id], |r| {
            Ok(AcpRegistrationRow {
                agent_id: r.get(0)?,
                key_salt: r.get(1)?,
                registered_by: r.get(2)?,
            })
        })
        .optional()?)
}

/// The agent an issued key belongs to, with its workspace.
#[derive(Debug, Clone)]
pub struct AgentKeyRow {
    pub agent_id: String,
    pub workspace_id: String,
    pub workspace_slug: String,
    pub registered_by: String,
}

pub(super) fn agent_by_key_hash(conn: &Db, key_hash: &str) -> Result<Option<AgentKeyRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT r.agent_id, a.workspace_id, w.slug, r.registered_by
             FROM acp_registrations r JOIN agents a ON a.id = r.agent_id
             JOIN workspaces w ON w.id = a.workspace_id
             WHERE r.key_hash = ?1",
        )?
        .query_row([key_hash], |r| {
            Ok(AgentKeyRow {
                agent_id: r.get(0)?,
                workspace_id: r.get(1)?,
                workspace_slug: r.get(2)?,
                registered_by: r.get(3)?,
            })
        })
        .optional()?)
}

/// The first owner of the workspace `slug` (who an unauthenticated loopback registration acts
/// as): `(workspace_id, user_id)`.
pub(super) fn workspace_owner(conn: &Db, slug: &str) -> Result<Option<(String, String)>> {
    Ok(conn
        .prepare_cached(
            "SELECT w.id, m.user_id FROM workspaces w
             JOIN memberships m ON m.workspace_id = w.id AND m.role = 'owner'
             JOIN users u ON u.id = m.user_id
             WHERE w.slug = ?1 ORDER BY u.created_at, u.id LIMIT 1",
        )?
        .query_row([slug], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

/// What a registration writes.
pub(crate) struct NewAcpRegistration<'a> {
    pub key_salt: &'a str,
    pub key_hash: &'a str,
    pub principal_context: Option<&'a str>,
    pub registered_by: &'a str,
}

impl Tx<'_> {
    /// Records (or replaces) an agent's registration as an ACP server.
    pub(super) fn put_acp_registration(
        &mut self,
        agent_id: &str,
        r: &NewAcpRegistration<'_>,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "INSERT INTO acp_registrations
                   (agent_id, key_salt, key_hash, principal_context, registered_by, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (agent_id) DO UPDATE SET key_salt = excluded.key_salt,
                   key_hash = excluded.key_hash, principal_context = excluded.principal_context,
                   registered_by = excluded.registered_by, updated_at = excluded.updated_at",
            )?
            .execute(params![
                agent_id,
                r.key_salt,
                r.key_hash,
                r.principal_context,
                r.registered_by,
                self.now
            ])?;
        Ok(())
    }
}

/// How sessiond's last calls to an agent's ACP server went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcpContactRow {
    /// When the server last answered a call (epoch ms).
    pub last_contact_at: Option<i64>,
    /// The error of the last call that failed, and when it failed.
    pub last_error: Option<String>,
    pub last_error_at: Option<i64>,
}

pub(super) fn acp_contact(conn: &Db, agent_id: &str) -> Result<Option<AcpContactRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT last_contact_at, last_error, last_error_at FROM acp_contacts WHERE agent_id = ?1",
        )?
        .query_row([agent_id], |r| {
            Ok(AcpContactRow {
                last_contact_at: r.get(0)?,
                last_error: r.get(1)?,
                last_error_at: r.get(2)?,
            })
        })
        .optional()?)
}

impl Tx<'_> {
    /// Notes a call to an agent's ACP server: answered (`error` is `None`) or failed.
    fn record_acp_contact(&mut self, agent_id: &str, error: Option<&str>) -> Result<()> {
        let sql = match error {
            None => {
                "INSERT INTO acp_contacts (agent_id, last_contact_at) VALUES (?1, ?2)
                 ON CONFLICT (agent_id) DO UPDATE SET last_contact_at = excluded.last_contact_at"
            }
            Some(_) => {
                "INSERT INTO acp_contacts (agent_id, last_error_at, last_error) VALUES (?1, ?2, ?3)
                 ON CONFLICT (agent_id) DO UPDATE SET last_error_at = excluded.last_error_at,
                   last_error = excluded.last_error"
            }
        };
        let now = self.now;
        let mut stmt = self.conn.prepare_cached(sql)?;
        match error {
            None => stmt.execute(params![agent_id, now])?,
            Some(e) => stmt.execute(params![agent_id, now, e])?,
        };
        Ok(())
    }
}

/// The workspace of a session, by its public id.
pub(super) fn session_workspace(conn: &Db, session_id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT workspace_id FROM sessions WHERE id = ?1")?
        .query_row([session_id], |r| r.get(0))
        .optional()?)
}

/// The `event/send` event that delivered the input at `seq` of a session, if it was one.
pub(super) fn event_at_seq(
    conn: &Db,
    session_pk: i64,
    seq: u64,
) -> Result<Option<super::agentex::EventRow>> {
    Ok(conn
        .prepare_cached(
            "SELECT v.sequence_id, v.id, s.id, v.agent_id, v.content, v.created_at
             FROM agentex_events v JOIN sessions s ON s.pk = v.session_pk
             WHERE v.session_pk = ?1 AND v.seq = ?2 ORDER BY v.sequence_id LIMIT 1",
        )?
        .query_row(params![session_pk, seq as i64], |r| {
            Ok(super::agentex::EventRow {
                sequence_id: r.get(0)?,
                id: r.get(1)?,
                task_id: r.get(2)?,
                agent_id: r.get(3)?,
                content: r.get(4)?,
                created_at: r.get(5)?,
            })
        })
        .optional()?)
}

impl Tx<'_> {
    /// The `event/send` event that delivered the input at `seq` of a session, if it was one.
    pub(super) fn event_at_seq(
        &self,
        session_pk: i64,
        seq: u64,
    ) -> Result<Option<super::agentex::EventRow>> {
        event_at_seq(self.conn, session_pk, seq)
    }

    /// Registers an agent as an ACP server: its agent platform registration and the issued key's
    /// salt (kept across re-registrations, so the key stays the same) and hash.
    pub(crate) fn enrol_acp_agent(&mut self, agent_id: &str, e: &AcpEnrolment) -> Result<()> {
        self.register_agent(agent_id, &e.registration.borrowed())?;
        let salt = acp_registration(self.conn, agent_id)?
            .map(|reg| reg.key_salt)
            .unwrap_or_else(|| e.fresh_salt.clone());
        let key_hash = (e.key_hash)(agent_id, &salt);
        self.put_acp_registration(
            agent_id,
            &NewAcpRegistration {
                key_salt: &salt,
                key_hash: &key_hash,
                principal_context: e.principal_context.as_deref(),
                registered_by: &e.registered_by,
            },
        )
    }
}

/// The hash of the key issued for `(agent_id, salt)`.
pub(crate) type KeyHash = std::sync::Arc<dyn Fn(&str, &str) -> String + Send + Sync>;

/// What registering an agent as an ACP server records.
#[derive(Clone)]
pub struct AcpEnrolment {
    pub registration: super::agentex::AgentRegistration,
    /// The salt of a first registration (a re-registration keeps the one it has).
    pub fresh_salt: String,
    /// The store keeps only the issued key's hash.
    pub key_hash: KeyHash,
    pub principal_context: Option<String>,
    pub registered_by: String,
}

/// An agent's directory entry as a re-registration changes it.
pub struct AgentUpdate {
    pub agent_id: String,
    pub name: String,
    pub engine: String,
}

/// The ACP servers' registrations and the lookups their callbacks need, in sessiond's own types.
#[derive(Clone, Copy)]
pub struct AcpStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// Registrations of agents served over ACP, and the lookups of their callbacks.
    pub fn acp(&self) -> AcpStore<'_> {
        AcpStore { store: self }
    }
}

impl AcpStore<'_> {
    pub async fn registration(&self, agent_id: &str) -> Result<Option<AcpRegistrationRow>> {
        let id = agent_id.to_owned();
        self.store.read(move |c| acp_registration(c, &id)).await
    }

    /// How the last calls to the agent's ACP server went (`None`: no call was made yet).
    pub async fn contact(&self, agent_id: &str) -> Result<Option<AcpContactRow>> {
        let id = agent_id.to_owned();
        self.store.read(move |c| acp_contact(c, &id)).await
    }

    /// Notes a call to the agent's ACP server: answered (`error` is `None`) or failed. An agent
    /// deleted meanwhile is not an error: there is nothing left to note it on.
    pub async fn record_contact(&self, agent_id: &str, error: Option<String>) -> Result<()> {
        let id = agent_id.to_owned();
        self.store
            .write(move |tx| {
                if super::agent_by_id(tx.conn, &id)?.is_none() {
                    return Ok(());
                }
                tx.record_acp_contact(&id, error.as_deref())
            })
            .await
    }

    /// The agent an issued key (by its hash) belongs to.
    pub async fn agent_by_key_hash(&self, key_hash: &str) -> Result<Option<AgentKeyRow>> {
        let hash = key_hash.to_owned();
        self.store.read(move |c| agent_by_key_hash(c, &hash)).await
    }

    /// The first owner of the workspace `slug`: `(workspace_id, user_id)`.
    pub async fn workspace_owner(&self, slug: &str) -> Result<Option<(String, String)>> {
        let slug = slug.to_owned();
        self.store.read(move |c| workspace_owner(c, &slug)).await
    }

    /// The task a session is and the agent it runs with, read together.
    pub async fn task_and_agent(
        &self,
        session_id: &str,
    ) -> Result<Option<(super::agentex::TaskRow, super::agentex::AgentexAgentRow)>> {
        use super::agentex::{AgentKey, TaskKey, agentex_agent, task};
        let sid = session_id.to_owned();
        self.store
            .read(move |c| {
                let Some(ws) = session_workspace(c, &sid)? else {
                    return Ok(None);
                };
                let Some(task) = task(c, &ws, TaskKey::Id(&sid))? else {
                    return Ok(None);
                };
                let agent = agentex_agent(c, &ws, AgentKey::Id(&task.agent_id))?;
                Ok(agent.map(|a| (task, a)))
            })
            .await
    }

    /// Re-registers an existing agent: its name and engine change, its registration and key are
    /// recorded, in one transaction.
    pub async fn reenrol(&self, agent: AgentUpdate, e: AcpEnrolment) -> Result<()> {
        self.store
            .write(move |tx| {
                let current = super::agent_by_id(tx.conn, &agent.agent_id)?
                    .ok_or(crate::error::Error::AgentNotFound)?;
                tx.update_agent(&agent.agent_id, &agent.name, &current.anchor, &agent.engine)?;
                tx.enrol_acp_agent(&agent.agent_id, &e)
            })
            .await
    }
}
