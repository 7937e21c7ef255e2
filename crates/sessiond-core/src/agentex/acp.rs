//! Agents built with the AgentEx SDK, as the agent platform sees them: ACP servers that register
//! themselves (`POST /agents/register`), get a key, have their turns served by the `acp` engine,
//! and call the API back with that key.
//!
//! - **Registration** creates (or, by name, updates) an ordinary agent whose engine is
//!   `{"kind": "acp", "url": <acp_url>, "acpType": <acp_type>}`, so `[policy]` `acp_hosts` decides
//!   which servers may register at all (a refused URL changes nothing). Nothing calls the agent
//!   during its registration: the SDK opens its port only once registration succeeded.
//! - **Keys.** The issued key is `HMAC-SHA256(secret, agent id, salt)`: only its hash and the
//!   salt are stored, and sessiond derives the key again to send it to the agent with every call
//!   (`x-agent-api-key`, which the SDK checks). The secret is a file of the data dir
//!   ([`KEY_FILE`], mode 0600), made on first start. A re-registration keeps the salt, so an
//!   agent's key survives its restarts and serves all its replicas.
//! - **Out-of-turn calls.** `task/create` and `task/cancel` of an async agent's task are sent to
//!   the agent when they happen (not as turns): `task/create` before the RPC answers, since the
//!   SDK answers it only once its handler ran; `task/cancel` after the task is final.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::Sha256;

use super::agents::{self as agent_view, acp_config};
use super::confinement::confined_to;
use super::{records, tasks};
use crate::agents;
use crate::engine::TurnInput;
use crate::engine::acp::{self as engine, AcpConfig, AcpPlatform, AcpTurn, AcpType};
use crate::error::{Error, Result};
use crate::secret;
use crate::sessions::{Actor, Sessions};
use crate::store::acp::{AcpEnrolment, AgentUpdate};
use crate::store::agentex::{AgentKey, AgentRegistration, AgentexAgentRow, EventRow, TaskRow};
use crate::store::directory::AgentLink;

/// The secret issued keys are derived from, in the data dir.
pub const KEY_FILE: &str = "acp-agent-keys.secret";

/// Derives the keys issued to registered agents.
#[derive(Clone)]
pub struct AgentKeys {
    secret: Arc<Vec<u8>>,
}

impl AgentKeys {
    /// Reads the data dir's secret, making it first if there is none.
    pub fn load_or_create(data_dir: &Path) -> std::result::Result<AgentKeys, String> {
        let path = data_dir.join(KEY_FILE);
        match std::fs::read(&path) {
            Ok(bytes) if bytes.len() >= 32 => {
                return Ok(AgentKeys {
                    secret: Arc::new(bytes),
                });
            }
            Ok(_) => return Err(format!("{} is too short to be a secret", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
        // Written whole under a name of its own, then linked into place: a process starting at
        // the same time (on a data dir every process mounts) reads either no file or the whole
        // secret, and of two made at once the first link wins and both use it.
        let token = secret::random_token(32).map_err(|e| e.to_string())?;
        let tmp = data_dir.join(format!("{KEY_FILE}.{}.tmp", crate::ids::new_id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let written = options
            .open(&tmp)
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, token.as_bytes())?;
                f.sync_all()
            })
            .and_then(|()| std::fs::hard_link(&tmp, &path));
        let _ = std::fs::remove_file(&tmp);
        match written {
            Ok(()) => Ok(AgentKeys {
                secret: Arc::new(token.into_bytes()),
            }),
            // Another process made it meanwhile: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Self::load_or_create(data_dir)
            }
            Err(e) => Err(format!("cannot write {}: {e}", path.display())),
        }
    }

    /// A [`secret::Sealer`] for `purpose`, keyed by `HMAC-SHA256(secret, purpose)`: secrets sealed
    /// for one purpose do not open for another, and none opens without the data dir's secret.
    pub fn sealer(&self, purpose: &str) -> secret::Sealer {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(b"sessiond sealing key\n");
        mac.update(purpose.as_bytes());
        secret::Sealer::new(&mac.finalize().into_bytes().into())
    }

    /// The key of `agent_id` with `salt`.
    pub fn key(&self, agent_id: &str, salt: &str) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(agent_id.as_bytes());
        mac.update(b"\n");
        mac.update(salt.as_bytes());
        let digest = mac.finalize().into_bytes();
        use base64::Engine as _;
        format!(
            "agx_{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
        )
    }
}

/// What the SDK sends to `POST /agents/register`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterAgent {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    pub acp_url: String,
    pub acp_type: String,
    #[serde(default)]
    pub principal_context: Option<Value>,
    #[serde(default)]
    pub registration_metadata: Option<Value>,
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default)]
    pub agent_input_type: Option<String>,
}

/// The `acp` engine configuration a registration asks for, checked against `[policy]`.
fn engine_of(r: &RegisterAgent, sessions: &Sessions) -> Result<String> {
    let acp_type = match r.acp_type.as_str() {
        "sync" => AcpType::Sync,
        "async" | "agentic" => AcpType::Async,
        other => {
            return Err(Error::invalid(format!(
                "acp_type: must be \"sync\", \"async\" or \"agentic\", not {other:?}"
            )));
        }
    };
    let engine = json!({"kind": "acp", "url": r.acp_url, "acpType": acp_type.as_str()});
    let as_acp_url = |e: Error| match e {
        Error::InvalidRequest(m) => Error::invalid(m.replacen("engine/url", "acp_url", 1)),
        other => other,
    };
    let cfg = AcpConfig {
        url: r.acp_url.clone(),
        acp_type,
        idle_timeout_ms: 300_000,
    };
    cfg.check().map_err(as_acp_url)?;
    cfg.permitted(&sessions.config().policy)
        .map_err(as_acp_url)?;
    agents::check_engine(&engine, &sessions.config().policy).map_err(as_acp_url)
}

/// Registers an ACP server: its agent by name (created, or updated with the new URL, type and
/// registration), and its key. Returns the agent and the key.
pub async fn register(
    sessions: &Sessions,
    keys: &AgentKeys,
    actor: &Actor,
    r: RegisterAgent,
) -> Result<(AgentexAgentRow, String)> {
    let engine = engine_of(&r, sessions)?;
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
        .is_some_and(|m| !m.is_object() && !m.is_null())
    {
        return Err(Error::invalid(
            "registration_metadata: must be an object or null",
        ));
    }
    let description = r
        .description
        .clone()
        .unwrap_or_else(|| format!("Agent {}", r.name));
    if description.chars().count() > 10_000 {
        return Err(Error::invalid("description: longer than 10000 characters"));
    }
    let principal = match &r.principal_context {
        Some(Value::Null) | None => None,
        Some(v) if v.to_string().len() > 64 * 1024 => {
            return Err(Error::invalid("principal_context: larger than 64 KiB"));
        }
        Some(v) => Some(v.to_string()),
    };
    let metadata = r
        .registration_metadata
        .as_ref()
        .filter(|m| !m.is_null())
        .map(Value::to_string);
    let existing = match agent_view::find(sessions, actor, AgentKey::Name(&r.name)).await {
        Ok(a) => Some(a),
        Err(Error::AgentNotFound) => None,
        Err(e) => return Err(e),
    };
    if confined_to(actor).is_some() && existing.is_none() {
        return Err(Error::Forbidden(
            "an agent key registers only its own agent again (by its name)".into(),
        ));
    }
    match (&r.agent_id, &existing) {
        (Some(id), Some(found)) if *id != found.id => {
            return Err(Error::Conflict(
                "agent_exists",
                format!("agent_id: the agent named {:?} has another id", r.name),
            ));
        }
        // A new name with an id: the id must be an agent of this workspace (it then has another
        // name: a conflict). Another workspace's id answers exactly as a made-up one.
        (Some(id), None) => {
            return match agent_view::find(sessions, actor, AgentKey::Id(id)).await {
                Ok(other) => Err(Error::Conflict(
                    "agent_exists",
                    format!(
                        "agent_id: {id} is the agent named {:?}, not {:?}",
                        other.slug, r.name
                    ),
                )),
                Err(Error::AgentNotFound) => Err(Error::invalid(format!(
                    "agent_id: no agent {id} in this workspace (leave it out to register a new agent)"
                ))),
                Err(e) => Err(e),
            };
        }
        _ => {}
    }
    if r.name == agents::ROOT_SLUG {
        return Err(Error::Conflict(
            "agent_reserved",
            "name: root is reserved for the drive-root owner".into(),
        ));
    }
    let keys_for_hash = keys.clone();
    let enrolment = AcpEnrolment {
        registration: AgentRegistration {
            description,
            agent_input_type: r.agent_input_type.clone(),
            registration_metadata: metadata,
        },
        fresh_salt: secret::random_token(16)?,
        key_hash: std::sync::Arc::new(move |agent_id, salt| {
            secret::token_hash(&keys_for_hash.key(agent_id, salt))
        }),
        principal_context: principal,
        registered_by: actor.user_id.clone(),
    };
    let store = sessions.store();
    let agent_id = match existing {
        Some(agent) => {
            let update = AgentUpdate {
                agent_id: agent.id.clone(),
                name: agent.name.clone(),
                engine: engine.clone(),
            };
            store.acp().reenrol(update, enrolment).await?;
            agent.id
        }
        None => {
            let spec = agents::AgentSpec {
                slug: Some(r.name.clone()),
                name: None,
                anchor: None,
                engine: Some(serde_json::from_str(&engine).unwrap_or(Value::Null)),
            };
            let created = agents::create_with(
                store,
                &sessions.drive(actor),
                &sessions.config().policy,
                &actor.workspace_id,
                spec,
                AgentLink::EnrolAcp(enrolment),
            )
            .await;
            match created {
                Ok(row) => row.id,
                Err(Error::InvalidRequest(msg)) => {
                    return Err(Error::invalid(msg.replacen("slug:", "name:", 1)));
                }
                // A concurrent registration of the same name won: the agent retries.
                Err(e) => return Err(e),
            }
        }
    };
    let agent = agent_view::find(sessions, actor, AgentKey::Id(&agent_id)).await?;
    let salt = store
        .acp()
        .registration(&agent_id)
        .await?
        .ok_or(Error::AgentNotFound)?
        .key_salt;
    Ok((agent, keys.key(&agent_id, &salt)))
}

/// The agent platform as the `acp` engine sees it.
pub struct Platform {
    sessions: Sessions,
    keys: AgentKeys,
}

impl Platform {
    pub fn new(sessions: Sessions, keys: AgentKeys) -> Platform {
        Platform { sessions, keys }
    }

    /// What the keys issued to registering agents are derived with.
    pub fn keys(&self) -> &AgentKeys {
        &self.keys
    }

    /// The key issued to an agent, if it registered.
    async fn api_key(&self, agent_id: &str) -> Result<Option<String>> {
        let reg = self.sessions.store().acp().registration(agent_id).await?;
        Ok(reg.map(|r| self.keys.key(&r.agent_id, &r.key_salt)))
    }

    async fn endpoint(
        &self,
        agent: &AgentexAgentRow,
        cfg: &AcpConfig,
    ) -> Result<engine::rpc::Endpoint> {
        Ok(engine::rpc::Endpoint {
            url: cfg.url.clone(),
            api_key: self.api_key(&agent.id).await?,
            idle_timeout: std::time::Duration::from_millis(cfg.idle_timeout_ms),
        })
    }

    /// Sends `task/create` to an async agent whose task was just created, and waits for its
    /// handler (the SDK answers once it ran). Sync agents are not told.
    pub async fn task_created(&self, agent: &AgentexAgentRow, task: &TaskRow) -> Result<()> {
        let Some(cfg) = acp_config(agent).filter(|c| c.acp_type == AcpType::Async) else {
            return Ok(());
        };
        let policy = &self.sessions.config().policy;
        cfg.permitted(policy)?;
        let params = json!({
            "agent": agent_view::view(agent, policy),
            "task": tasks::view(task, true, None),
            "params": super::view::document(task.params.as_deref()),
        });
        let to = self.endpoint(agent, &cfg).await?;
        let answered = engine::rpc::call(&engine::http_client(), &to, "task/create", params).await;
        let error = answered.as_ref().err().map(|e| e.message().to_owned());
        self.contacted(&agent.id, error).await;
        answered
            .map(|_| ())
            .map_err(|e| Error::AgentUnavailable(e.message().to_owned()))
    }

    /// Sends `task/cancel` to an async agent whose task was cancelled. Its failure is only
    /// logged: the task is cancelled in sessiond whatever the agent answers.
    pub async fn task_cancelled(&self, agent: &AgentexAgentRow, task: &TaskRow) {
        let Some(cfg) = acp_config(agent).filter(|c| c.acp_type == AcpType::Async) else {
            return;
        };
        let policy = &self.sessions.config().policy;
        if cfg.permitted(policy).is_err() {
            return;
        }
        let params = json!({
            "agent": agent_view::view(agent, policy),
            "task": tasks::view(task, true, None),
        });
        let to = match self.endpoint(agent, &cfg).await {
            Ok(to) => to,
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e, "task/cancel not sent to the agent");
                return;
            }
        };
        let answered = engine::rpc::call(&engine::http_client(), &to, "task/cancel", params).await;
        if let Err(e) = &answered {
            tracing::warn!(task = %task.id, error = %e.message(), "the agent did not take task/cancel");
        }
        let error = answered.err().map(|e| e.message().to_owned());
        self.contacted(&agent.id, error).await;
    }
}

#[async_trait]
impl AcpPlatform for Platform {
    async fn contacted(&self, agent_id: &str, error: Option<String>) {
        // The error as the agent pages show it: its first 1000 characters.
        let error = error.map(|e| e.chars().take(1000).collect::<String>());
        if let Err(e) = self
            .sessions
            .store()
            .acp()
            .record_contact(agent_id, error)
            .await
        {
            tracing::warn!(agent = %agent_id, error = %e, "the agent's last contact was not recorded");
        }
    }

    async fn turn(&self, session_id: &str, input: &TurnInput, event: bool) -> Result<AcpTurn> {
        let found = self
            .sessions
            .store()
            .acp()
            .task_and_agent(session_id)
            .await?;
        let (task, agent) = found.ok_or(Error::NotFound)?;
        let policy = &self.sessions.config().policy;
        let event = if event {
            Some(records::event_view(&self.event_of(&task, input).await?))
        } else {
            None
        };
        Ok(AcpTurn {
            agent: agent_view::view(&agent, policy),
            task: tasks::view(&task, true, None),
            event,
            api_key: self.api_key(&agent.id).await?,
        })
    }
}

impl Platform {
    /// The event a turn's input is: the `event/send` that delivered it, else (a message from
    /// another API family) a new event recording it, so the agent sees every input as an event.
    async fn event_of(&self, task: &TaskRow, input: &TurnInput) -> Result<EventRow> {
        let content = json!({"type": "text", "author": "user", "content": input.text}).to_string();
        Ok(self
            .sessions
            .store()
            .agentex()
            .record_event_once(task.key(), &task.agent_id, input.input_seq, content)
            .await?)
    }
}

/// The actor of a callback made with an issued key: the agent, in its workspace, acting as the
/// user it registered on. 401 for a key that was never issued (or whose agent is gone).
pub async fn callback_actor(sessions: &Sessions, key: &str) -> Result<Actor> {
    let hash = secret::token_hash(key.trim());
    let row = sessions
        .store()
        .acp()
        .agent_by_key_hash(&hash)
        .await?
        .ok_or(Error::Unauthorized)?;
    Ok(Actor {
        workspace_id: row.workspace_id,
        workspace_slug: row.workspace_slug,
        user_id: row.registered_by.clone(),
        sender: crate::timeline::Sender::User {
            user_id: row.registered_by,
        },
        channel: crate::sessions::Channel::Agent {
            agent_id: row.agent_id,
        },
    })
}

/// The actor of an unauthenticated registration from loopback (when `[policy]` allows it): the
/// owner of the `default` workspace.
pub async fn loopback_actor(sessions: &Sessions) -> Result<Actor> {
    let (workspace_id, user_id) = sessions
        .store()
        .acp()
        .workspace_owner("default")
        .await?
        .ok_or(Error::Unauthorized)?;
    Ok(Actor {
        workspace_id,
        workspace_slug: "default".into(),
        user_id: user_id.clone(),
        sender: crate::timeline::Sender::User { user_id },
        channel: crate::sessions::Channel::Loopback,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Processes starting together on one data dir all end up with the same whole secret.
    #[test]
    fn concurrent_starts_share_one_secret() {
        let dir = tempfile::tempdir().unwrap();
        let secrets: Vec<Vec<u8>> = std::thread::scope(|s| {
            let starts: Vec<_> = (0..8)
                .map(|_| s.spawn(|| AgentKeys::load_or_create(dir.path()).unwrap()))
                .collect();
            starts
                .into_iter()
                .map(|h| h.join().unwrap().secret.to_vec())
                .collect()
        });
        assert!(secrets[0].len() >= 32);
        assert!(secrets.iter().all(|s| *s == secrets[0]));
        let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(files.len(), 1, "temporary files left: {files:?}");
    }
}
