//! The sessions core: every operation of the Sessions API as one call, shared by all API families.
//!
//! Each write is one store job that appends its events and updates the projection in the same
//! transaction (invariant 1); the runner hears of new inputs only after COMMIT.

mod images;
pub mod lineage;
mod linked;
mod query;
pub mod record;
mod session_tools;
pub mod view;
mod wait;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::agents;
use crate::clock;
use crate::config::Config;
use crate::drive::Drive;
use crate::error::{Error, Result};
use crate::projection;
use crate::runner::machine::{self, MachineState};
use crate::runner::{Delivery, Runner};
use crate::store::{self, JsonColumn, NewInput, NewSession, SessionKey, Store, Tx};
use crate::timeline::{
    AttachmentRef, Behavior, Event, InputKind, Level, Sender, StoredImageRef, Tier,
};

pub use images::ImageIn;
pub use linked::{OpenIn, Opened};
pub use query::{AgentActivity, HistoryQuery, ListQuery};
pub use wait::WaitOutcome;

/// Who is acting, in which workspace. Built by the HTTP layer from the credential.
#[derive(Debug, Clone)]
pub struct Actor {
    pub workspace_id: String,
    pub workspace_slug: String,
    /// The person the credential belongs to (owner of read markers, creator of sessions).
    pub user_id: String,
    /// The author recorded on inputs (R5, R6).
    pub sender: Sender,
    /// How the credential reached sessiond (a Session record's `source` and `attribution`).
    pub channel: Channel,
}

/// The way an actor's request came in. Recorded with what it creates, so provenance is a fact of
/// the timeline rather than a guess from the sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Channel {
    /// An API key, personal or an app's (`key_id` is the key's public id, never its secret).
    ApiKey { key_id: String },
    /// A browser session of the web UI.
    Browser,
    /// The command line, acting on the data dir directly.
    Cli,
    /// A schedule's tick.
    Schedule,
    /// The runner on behalf of a session (the session tools).
    Runner,
    /// A registered ACP server calling back with the key it was issued; it may act only on its
    /// own agent's tasks.
    Agent { agent_id: String },
    /// A request from this machine without a credential that `[policy]` lets in (an ACP server
    /// registering, `acp_register_from_loopback`).
    Loopback,
}

/// Fields shared by every input that carries media and a retry key.
#[derive(Debug, Clone, Default)]
pub struct InputCommon {
    pub client_request_id: Option<String>,
    pub images: Vec<ImageIn>,
    pub attachments: Vec<AttachmentRef>,
    /// Hash of the request as first received; a reused `clientRequestId` must match it.
    pub fingerprint: String,
    /// `sourceSessionId`: attribute the input to that session (R7).
    pub source_session_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct CreateIn {
    pub prompt: String,
    /// The agent (its id) to run the session with, in its anchor unless `cwd` names a folder inside
    /// it. `None`: the agent whose anchor holds `cwd` (the Sessions API's rule, R-agents).
    pub agent_id: Option<String>,
    pub cwd: Option<String>,
    pub tier: Option<Tier>,
    pub behavior: Behavior,
    pub mode: Option<Value>,
    pub common: InputCommon,
}

/// What a session made through the `/v2` family starts with besides its first prompt (the
/// Session record's `metadata`, `budget` and `parent`).
#[derive(Debug, Clone, Default)]
pub struct RecordIn {
    pub metadata: BTreeMap<String, String>,
    /// 0 = no cap.
    pub budget_cents: u64,
    pub parent: Option<lineage::Parent>,
}

#[derive(Debug, Clone)]
pub struct MessageIn {
    pub prompt: String,
    pub tier: Option<Tier>,
    pub behavior: Behavior,
    pub common: InputCommon,
}

/// The result of submitting an input.
#[derive(Debug, Clone)]
pub struct Submitted {
    pub key: SessionKey,
    pub input_seq: u64,
    /// False when this was a retry of an earlier request (nothing new was written).
    pub fresh: bool,
    pub delivery: Delivery,
}

#[derive(Clone)]
pub struct Sessions {
    store: Store,
    runner: Runner,
    cfg: Arc<Config>,
}

/// A short title from the first line of the prompt.
fn excerpt(prompt: &str) -> String {
    let line = prompt
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("New session");
    let words: Vec<&str> = line.split_whitespace().collect();
    let line = words.join(" ");
    const MAX: usize = 80;
    if line.chars().count() <= MAX {
        line
    } else {
        let mut t: String = line.chars().take(MAX - 1).collect();
        t.push('…');
        t
    }
}

/// Checks a `clientRequestId` inside the write: `Some` is the original result of a retry.
/// The original result of a retried `clientRequestId` (or 409 when the id came with another
/// request). Runs before any write (so a retry never resolves a parent or an alias, R50) and again
/// inside the write (so two racing requests cannot both be first).
fn replayed(
    conn: &rusqlite::Connection,
    actor: &Actor,
    common: &InputCommon,
) -> Result<Option<(SessionKey, u64)>> {
    let Some(id) = &common.client_request_id else {
        return Ok(None);
    };
    match store::client_request(conn, &actor.workspace_id, id)? {
        None => Ok(None),
        Some(found) if found.fingerprint == common.fingerprint => {
            let key = store::session_key(conn, &actor.workspace_id, &found.session_id)?;
            Ok(Some((key, found.input_seq)))
        }
        Some(_) => Err(Error::IdempotencyConflict),
    }
}

fn remember(
    tx: &mut Tx<'_>,
    actor: &Actor,
    common: &InputCommon,
    key: &SessionKey,
    seq: u64,
) -> Result<()> {
    if let Some(id) = &common.client_request_id {
        tx.record_client_request(&actor.workspace_id, id, &common.fingerprint, &key.id, seq)?;
    }
    Ok(())
}

/// The sender recorded on an input: the credential's, unless `sourceSessionId` names a session of
/// the same workspace (else 404).
fn sender_for(tx: &Tx<'_>, actor: &Actor, common: &InputCommon) -> Result<Sender> {
    match &common.source_session_id {
        Some(source) => {
            let source = tx.session_key(&actor.workspace_id, source)?;
            Ok(Sender::Session {
                session_id: source.id,
            })
        }
        None => Ok(actor.sender.clone()),
    }
}

impl Sessions {
    pub fn new(store: Store, runner: Runner, cfg: Arc<Config>) -> Sessions {
        Sessions { store, runner, cfg }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The delivery a retried submission reports: the truth about its input now.
    async fn replay_delivery(&self, key: &SessionKey, input_seq: u64) -> Result<Delivery> {
        let pk = key.pk;
        let delivered = self
            .store
            .read(move |c| Ok(store::input_turn(c, pk, input_seq)?.is_some()))
            .await?;
        Ok(if delivered {
            Delivery::Accepted
        } else {
            Delivery::Queued
        })
    }

    /// The drive of the actor's workspace.
    pub fn drive(&self, actor: &Actor) -> Drive {
        Drive::root_for(&self.cfg.data_dir, &actor.workspace_slug)
    }

    /// [`replayed`] on a read connection, before anything else about the request is resolved.
    async fn lookup_replay(
        &self,
        actor: &Actor,
        common: &InputCommon,
    ) -> Result<Option<(SessionKey, u64)>> {
        if common.client_request_id.is_none() {
            return Ok(None);
        }
        let (actor, common) = (actor.clone(), common.clone());
        self.store.read(move |c| replayed(c, &actor, &common)).await
    }

    /// Tells the runner about a fresh input (and waits for its answer), or reports where a
    /// retried one stands.
    async fn submitted(
        &self,
        key: SessionKey,
        input_seq: u64,
        fresh: bool,
        follow_up: bool,
    ) -> Result<Submitted> {
        let delivery = if fresh {
            self.runner.deliver(key.clone(), follow_up).await
        } else {
            self.replay_delivery(&key, input_seq).await?
        };
        Ok(Submitted {
            key,
            input_seq,
            fresh,
            delivery,
        })
    }

    async fn replayed_submission(&self, key: SessionKey, input_seq: u64) -> Result<Submitted> {
        let delivery = self.replay_delivery(&key, input_seq).await?;
        Ok(Submitted {
            key,
            input_seq,
            fresh: false,
            delivery,
        })
    }

    /// Attachment paths must name files inside the drive; they are stored in canonical form.
    fn check_attachments(&self, actor: &Actor, common: &mut InputCommon) -> Result<()> {
        if common.attachments.is_empty() {
            return Ok(());
        }
        let drive = self.drive(actor);
        for (i, a) in common.attachments.iter_mut().enumerate() {
            a.path = drive
                .check_file(&a.path)
                .map_err(|e| Error::invalid(format!("attachments/{i}/path: {e}")))?;
        }
        Ok(())
    }

    /// Creates a session from its first prompt (root create, or child create under `parent`).
    pub async fn create(
        &self,
        actor: &Actor,
        input: CreateIn,
        parent: Option<String>,
    ) -> Result<Submitted> {
        self.create_with(actor, input, parent, RecordIn::default())
            .await
    }

    /// [`Sessions::create`] with the record facts a `/v2` caller gives: metadata, a budget, and
    /// the session it continues, takes over or resumes (a handoff closes that one in the same
    /// transaction).
    pub async fn create_with(
        &self,
        actor: &Actor,
        mut input: CreateIn,
        parent: Option<String>,
        record: RecordIn,
    ) -> Result<Submitted> {
        if let Some((key, seq)) = self.lookup_replay(actor, &input.common).await? {
            return self.replayed_submission(key, seq).await;
        }
        let lineage = match &record.parent {
            Some(p) => Some(self.lineage_start(actor, p).await?),
            None => None,
        };
        let metadata = if record.metadata.is_empty() {
            None
        } else {
            Some(
                serde_json::to_string(&record.metadata)
                    .map_err(|e| Error::Internal(e.to_string()))?,
            )
        };
        let images = images::decode_all(&input.common.images)?;
        let machine = input.mode.as_ref().map(machine::validate).transpose()?;
        self.check_attachments(actor, &mut input.common)?;
        let drive = self.drive(actor);
        let all_agents = agents::list(&self.store, &actor.workspace_id).await?;
        let plan = match &parent {
            Some(parent) => {
                let prow = self.detail_row(actor, parent).await?;
                let anchor = all_agents
                    .iter()
                    .find(|a| a.id == prow.agent_id)
                    .map(|a| a.anchor.clone())
                    .unwrap_or_default();
                // R53: omitted cwd and tier come from the parent; a child stays with the parent's agent.
                let cwd = match &input.cwd {
                    Some(c) => Some(as_set(drive.check_cwd(c, &anchor)?)),
                    None => prow.cwd.clone(),
                };
                Plan {
                    agent_id: prow.agent_id.clone(),
                    cwd,
                    tier: input
                        .tier
                        .map(|t| t.as_str().to_owned())
                        .or(prow.tier.clone()),
                    created_by: Some(prow.id.clone()),
                    mode: None,
                    bind_default: false,
                }
            }
            None => {
                let (owner, cwd) = match &input.agent_id {
                    Some(id) => {
                        let agent = all_agents
                            .iter()
                            .find(|a| &a.id == id)
                            .ok_or(Error::AgentNotFound)?;
                        let cwd = match &input.cwd {
                            Some(c) => Some(as_set(drive.check_cwd(c, &agent.anchor)?)),
                            None => non_root_str(drive.make_dir(&agent.anchor)?),
                        };
                        (agent, cwd)
                    }
                    None => {
                        let cwd = input
                            .cwd
                            .as_deref()
                            .map(|c| drive.check_cwd(c, ""))
                            .transpose()?;
                        let owner = agents::owner_of(&all_agents, cwd.as_deref().unwrap_or(""))
                            .ok_or(Error::AgentNotFound)?;
                        (owner, cwd.map(as_set))
                    }
                };
                Plan {
                    agent_id: owner.id.clone(),
                    cwd,
                    tier: input.tier.map(|t| t.as_str().to_owned()),
                    created_by: None,
                    mode: None,
                    bind_default: false,
                }
            }
        };
        let actor_c = actor.clone();
        let (key, seq, fresh) = self
            .store
            .write(move |tx| {
                let actor = actor_c;
                if let Some((key, seq)) = replayed(tx.conn(), &actor, &input.common)? {
                    return Ok((key, seq, false));
                }
                if let Some(parent) = &plan.created_by {
                    // The parent may have been deleted since it was read.
                    tx.session_key(&actor.workspace_id, parent)?;
                }
                // So may the session this one comes from.
                let from = match (&record.parent, &lineage) {
                    (Some(p), Some(_)) => {
                        Some((p, tx.session_key(&actor.workspace_id, &p.session_id)?))
                    }
                    _ => None,
                };
                let start = RecordStart {
                    metadata: metadata.as_deref(),
                    budget_cents: record.budget_cents,
                    parent: from.as_ref().map(|(p, k)| (p.kind.as_str(), k.id.as_str())),
                    context: lineage.as_deref(),
                };
                let (key, seq) = insert_new_session(
                    tx, &actor, &plan, &input, machine, None, &images, None, &start,
                )?;
                if let Some((p, parent_key)) = &from
                    && p.kind == lineage::ParentKind::Handoff
                {
                    tx.close_session(parent_key, &key.id)?;
                }
                Ok((key, seq, true))
            })
            .await?;
        // R24: a new session has no turn yet, so steer and follow-up start alike.
        self.submitted(key, seq, fresh, false).await
    }

    /// Checks the session a new one comes from and makes what its engine is shown first.
    async fn lineage_start(&self, actor: &Actor, parent: &lineage::Parent) -> Result<String> {
        let row = self.detail_row(actor, &parent.session_id).await?;
        match parent.kind {
            lineage::ParentKind::Resume => {
                lineage::resume_context(&self.store, row.pk, &row.id).await
            }
            lineage::ParentKind::Continuation | lineage::ParentKind::Handoff => {
                let pk = row.pk;
                let facts = self
                    .store
                    .read(move |c| store::record::record_facts(c, pk))
                    .await?;
                Ok(lineage::continuation_context(
                    &row.id,
                    facts.as_ref().and_then(|f| f.last_terminal.as_ref()),
                ))
            }
        }
    }

    /// Sends a message (steer or follow-up) to a session.
    pub async fn message(
        &self,
        actor: &Actor,
        session_id: &str,
        input: MessageIn,
    ) -> Result<Submitted> {
        Ok(self
            .message_with(actor, session_id, input, |_, _, _| Ok(()))
            .await?
            .0)
    }

    /// [`Sessions::message`], with `link` writing another API family's rows about the input
    /// (given the session and the input's seq) in the input's transaction. A retried
    /// `clientRequestId` writes nothing, so `link` does not run (`None`).
    pub async fn message_with<T, F>(
        &self,
        actor: &Actor,
        session_id: &str,
        mut input: MessageIn,
        link: F,
    ) -> Result<(Submitted, Option<T>)>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>, &SessionKey, u64) -> Result<T> + Send + 'static,
    {
        if let Some((key, seq)) = self.lookup_replay(actor, &input.common).await? {
            return Ok((self.replayed_submission(key, seq).await?, None));
        }
        let images = images::decode_all(&input.common.images)?;
        self.check_attachments(actor, &mut input.common)?;
        let actor_c = actor.clone();
        let session_id = session_id.to_owned();
        let follow_up = input.behavior == Behavior::FollowUp;
        let (key, seq, active, linked) = self
            .store
            .write(move |tx| {
                let actor = actor_c;
                if let Some((key, seq)) = replayed(tx.conn(), &actor, &input.common)? {
                    return Ok((key, seq, false, None));
                }
                let key = tx.session_key(&actor.workspace_id, &session_id)?;
                let (seq, active) = add_message(tx, &actor, &key, &input, &images)?;
                let linked = link(tx, &key, seq)?;
                Ok((key, seq, active, Some(linked)))
            })
            .await?;
        let fresh = linked.is_some();
        Ok((
            self.submitted(key, seq, fresh, follow_up && active).await?,
            linked,
        ))
    }

    /// Posts to an agent's default session (R57, R62): the first message creates and binds it in
    /// one transaction (two concurrent first messages make exactly one session); later ones
    /// message it. Returns whether this call created the session.
    pub async fn default_message(
        &self,
        actor: &Actor,
        agent_slug: &str,
        mut input: MessageIn,
        agent_first_message: Option<String>,
    ) -> Result<(Submitted, bool)> {
        if let Some((key, seq)) = self.lookup_replay(actor, &input.common).await? {
            let created = self.is_initial_input(&key, seq).await?;
            return Ok((self.replayed_submission(key, seq).await?, created));
        }
        let agent = agents::get(&self.store, &actor.workspace_id, agent_slug).await?;
        let images = images::decode_all(&input.common.images)?;
        self.check_attachments(actor, &mut input.common)?;
        let anchor = self.drive(actor).make_dir(&agent.anchor)?;
        let actor_c = actor.clone();
        let follow_up = input.behavior == Behavior::FollowUp;
        let (key, seq, fresh, created, active) = self
            .store
            .write(move |tx| {
                let actor = actor_c;
                if let Some((key, seq)) = replayed(tx.conn(), &actor, &input.common)? {
                    return Ok((key, seq, false, false, false));
                }
                if let Some(sid) = tx.default_session(&agent.id)? {
                    let key = tx.session_key(&actor.workspace_id, &sid)?;
                    let (seq, active) = add_message(tx, &actor, &key, &input, &images)?;
                    return Ok((key, seq, true, false, active));
                }
                let plan = Plan {
                    agent_id: agent.id.clone(),
                    cwd: non_root_str(anchor),
                    tier: input.tier.map(|t| t.as_str().to_owned()),
                    created_by: None,
                    // R61: default sessions launch in automatic mode.
                    mode: Some("\"auto\""),
                    bind_default: true,
                };
                let create = CreateIn {
                    prompt: input.prompt.clone(),
                    agent_id: Some(agent.id.clone()),
                    cwd: None,
                    tier: input.tier,
                    behavior: input.behavior,
                    mode: None,
                    common: input.common.clone(),
                };
                let (key, seq) = insert_new_session(
                    tx,
                    &actor,
                    &plan,
                    &create,
                    None,
                    agent_first_message.as_deref(),
                    &images,
                    None,
                    &RecordStart::default(),
                )?;
                Ok((key, seq, true, true, false))
            })
            .await?;
        Ok((
            self.submitted(key, seq, fresh, follow_up && active).await?,
            created,
        ))
    }

    /// Whether `seq` is the session's first prompt (the retried call created the session).
    async fn is_initial_input(&self, key: &SessionKey, seq: u64) -> Result<bool> {
        let pk = key.pk;
        let body = self
            .store
            .read(move |c| store::event_body(c, pk, seq))
            .await?;
        Ok(body.is_some_and(|b| b.contains("\"inputKind\":\"initial\"")))
    }

    /// The agent's default session, if bound (R56: unbound is not an error).
    pub async fn default_session(
        &self,
        actor: &Actor,
        agent_slug: &str,
    ) -> Result<Option<store::SessionRow>> {
        let agent = agents::get(&self.store, &actor.workspace_id, agent_slug).await?;
        let (ws, user) = (actor.workspace_id.clone(), actor.user_id.clone());
        self.store
            .read(move |c| match store::default_session_id(c, &agent.id)? {
                Some(id) => store::session_row(c, &ws, &id, &user).map(Some),
                None => Ok(None),
            })
            .await
    }

    /// Points the alias at a session of that owner, or at nothing (R58, R59).
    pub async fn set_default_session(
        &self,
        actor: &Actor,
        agent_slug: &str,
        session_id: Option<String>,
    ) -> Result<Option<store::SessionRow>> {
        let agent = agents::get(&self.store, &actor.workspace_id, agent_slug).await?;
        let ws = actor.workspace_id.clone();
        let agent_id = agent.id.clone();
        let target = session_id.clone();
        self.store
            .write(move |tx| {
                if let Some(sid) = &target {
                    let key = tx.session_key(&ws, sid)?;
                    if tx.session_row(&key)?.agent_id != agent_id {
                        return Err(Error::NotFound);
                    }
                }
                tx.set_default(&agent_id, target.as_deref())
            })
            .await?;
        match session_id {
            Some(id) => self.detail_row(actor, &id).await.map(Some),
            None => Ok(None),
        }
    }

    /// Moves a session's working directory (R66–R69): validated on the filesystem, applied with a
    /// compare-and-swap, effective from the next turn. Returns the canonical cwd.
    pub async fn move_cwd(&self, actor: &Actor, session_id: &str, cwd: &str) -> Result<String> {
        let row = self.detail_row(actor, session_id).await?;
        let anchor = agents::list(&self.store, &actor.workspace_id)
            .await?
            .into_iter()
            .find(|a| a.id == row.agent_id)
            .map(|a| a.anchor)
            .unwrap_or_default();
        let shown = as_set(self.drive(actor).check_cwd(cwd, &anchor)?);
        let new = Some(shown.clone());
        let ws = actor.workspace_id.clone();
        let id = row.id.clone();
        let message = format!("working directory moved to {shown}; it applies from the next turn");
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                if !tx.swap_cwd(&key, row.cwd.as_deref(), new.as_deref())? {
                    return Err(Error::CwdConflict);
                }
                tx.append(
                    &key,
                    &Event::System {
                        level: Level::Info,
                        message,
                        metadata: None,
                    },
                )?;
                Ok(())
            })
            .await?;
        Ok(shown)
    }

    /// Adds a note: durable context that starts no turn.
    pub async fn note(
        &self,
        actor: &Actor,
        session_id: &str,
        note: String,
        common: InputCommon,
    ) -> Result<u64> {
        if let Some((_, seq)) = self.lookup_replay(actor, &common).await? {
            return Ok(seq);
        }
        let mut common = common;
        self.check_attachments(actor, &mut common)?;
        let images = images::decode_all(&common.images)?;
        let actor = actor.clone();
        let session_id = session_id.to_owned();
        if images.is_empty() && common.client_request_id.is_none() {
            // Nothing to remember and no image to store: the note is one write.
            return self
                .store
                .write_one(move |w| {
                    let key = w.tx().session_key(&actor.workspace_id, &session_id)?;
                    let sender = sender_for(w.tx(), &actor, &common)?;
                    let event = Event::NoteSubmitted {
                        note,
                        sender,
                        client_request_id: None,
                        images: Vec::new(),
                        attachments: common.attachments,
                    };
                    w.append(&key, &event)
                })
                .await;
        }
        self.store
            .write(move |tx| {
                if let Some((_, seq)) = replayed(tx.conn(), &actor, &common)? {
                    return Ok(seq);
                }
                let key = tx.session_key(&actor.workspace_id, &session_id)?;
                let sender = sender_for(tx, &actor, &common)?;
                let images = images::store_all(tx, &key, &images)?;
                let seq = tx.append(
                    &key,
                    &Event::NoteSubmitted {
                        note,
                        sender,
                        client_request_id: common.client_request_id.clone(),
                        images,
                        attachments: common.attachments.clone(),
                    },
                )?;
                remember(tx, &actor, &common, &key, seq)?;
                Ok(seq)
            })
            .await
    }

    /// Answers a session that is asking; 409 `not_asking` otherwise, with nothing written.
    pub async fn answer(
        &self,
        actor: &Actor,
        session_id: &str,
        answer: String,
        common: InputCommon,
    ) -> Result<Submitted> {
        Ok(self
            .answer_with(actor, session_id, answer, common, |_, _, _| Ok(()))
            .await?
            .0)
    }

    /// [`Sessions::answer`], with `link` as in [`Sessions::message_with`].
    pub async fn answer_with<T, F>(
        &self,
        actor: &Actor,
        session_id: &str,
        answer: String,
        common: InputCommon,
        link: F,
    ) -> Result<(Submitted, Option<T>)>
    where
        T: Send + 'static,
        F: FnOnce(&mut Tx<'_>, &SessionKey, u64) -> Result<T> + Send + 'static,
    {
        if let Some((key, seq)) = self.lookup_replay(actor, &common).await? {
            return Ok((self.replayed_submission(key, seq).await?, None));
        }
        let mut common = common;
        self.check_attachments(actor, &mut common)?;
        let images = images::decode_all(&common.images)?;
        let actor_c = actor.clone();
        let session_id = session_id.to_owned();
        let (key, seq, linked) = self
            .store
            .write(move |tx| {
                let actor = actor_c;
                if let Some((key, seq)) = replayed(tx.conn(), &actor, &common)? {
                    return Ok((key, seq, None));
                }
                let key = tx.session_key(&actor.workspace_id, &session_id)?;
                let row = tx.session_row(&key)?;
                if row.turn_status != "ask" || row.turn_active {
                    return Err(Error::NotAsking);
                }
                accepts_prompts(tx, &key)?;
                let sender = sender_for(tx, &actor, &common)?;
                let stored = images::store_all(tx, &key, &images)?;
                let seq = tx.append(
                    &key,
                    &Event::AnswerSubmitted {
                        answer: answer.clone(),
                        sender,
                        client_request_id: common.client_request_id.clone(),
                        images: stored,
                        attachments: common.attachments.clone(),
                    },
                )?;
                // R20: answers resume with the session's persisted tier.
                tx.enqueue_input(
                    &key,
                    &NewInput {
                        seq,
                        kind: "answer",
                        behavior: "steer",
                        tier: row.tier.as_deref(),
                        text: &answer,
                        images: None,
                        not_before: 0,
                    },
                )?;
                projection::set_turn_status(tx, &key, "running")?;
                remember(tx, &actor, &common, &key, seq)?;
                let linked = link(tx, &key, seq)?;
                Ok((key, seq, Some(linked)))
            })
            .await?;
        let fresh = linked.is_some();
        Ok((self.submitted(key, seq, fresh, false).await?, linked))
    }

    /// Records `interrupt_requested` and stops the running turn, if any. On an idle session only
    /// the event is recorded.
    pub async fn interrupt(&self, actor: &Actor, session_id: &str) -> Result<()> {
        let ws = actor.workspace_id.clone();
        let session_id = session_id.to_owned();
        let by = sender_id(&actor.sender);
        let key = self
            .store
            .write(move |tx| {
                let key = tx.session_key(&ws, &session_id)?;
                tx.append(
                    &key,
                    &Event::InterruptRequested {
                        requested_at: clock::rfc3339(tx.now),
                    },
                )?;
                tx.set_stopped(&key, &by)?;
                Ok(key)
            })
            .await?;
        self.runner.interrupt(key);
        Ok(())
    }

    pub async fn set_title(
        &self,
        actor: &Actor,
        session_id: &str,
        title: String,
    ) -> Result<store::SessionRow> {
        self.update(actor, session_id, move |tx, key| {
            tx.set_manual_title(key, &title)
        })
        .await
    }

    pub async fn set_archived(
        &self,
        actor: &Actor,
        session_id: &str,
        archived: bool,
    ) -> Result<store::SessionRow> {
        self.update(actor, session_id, move |tx, key| {
            tx.set_archived(key, archived)
        })
        .await
    }

    /// Applies a projection-only change and returns the row as the actor sees it.
    async fn update<F>(&self, actor: &Actor, session_id: &str, f: F) -> Result<store::SessionRow>
    where
        F: FnOnce(&mut Tx<'_>, &SessionKey) -> Result<()> + Send + 'static,
    {
        let ws = actor.workspace_id.clone();
        let id = session_id.to_owned();
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                f(tx, &key)
            })
            .await?;
        self.detail_row(actor, session_id).await
    }

    /// Moves the actor's read marker forward (never back, never past the last event).
    pub async fn mark_read(&self, actor: &Actor, session_id: &str, seq: u64) -> Result<u64> {
        let actor = actor.clone();
        let id = session_id.to_owned();
        self.store
            .write(move |tx| {
                let key = tx.session_key(&actor.workspace_id, &id)?;
                let last = tx.session_row(&key)?.last_event_seq;
                tx.mark_read(&key, &actor.user_id, seq.min(last))
            })
            .await
    }

    /// Stops the session's work and removes it permanently.
    pub async fn delete(&self, actor: &Actor, session_id: &str) -> Result<()> {
        let ws = actor.workspace_id.clone();
        let id = session_id.to_owned();
        let key = self
            .store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                tx.delete_session(&key)?;
                Ok(key)
            })
            .await?;
        self.runner.session_deleted(key.pk);
        self.store.bus().close_session(&key.id);
        Ok(())
    }
}

/// Where a new session goes and what it starts with.
struct Plan {
    agent_id: String,
    cwd: Option<String>,
    tier: Option<String>,
    created_by: Option<String>,
    /// `TurnMode` JSON; `None` means `"agent"` (or the machine definition when there is one).
    mode: Option<&'static str>,
    /// Bind the new session as the agent's default (first default-alias message).
    bind_default: bool,
}

/// The record facts a new session is inserted with (none for the Sessions API's own creates).
#[derive(Default)]
struct RecordStart<'a> {
    /// JSON object.
    metadata: Option<&'a str>,
    budget_cents: u64,
    /// `(kind, parent session id)`.
    parent: Option<(&'static str, &'a str)>,
    /// Shown to the engine before the first prompt (what a lineage carries over).
    context: Option<&'a str>,
}

/// A session's `source` and `attribution` from the way its creator came in.
fn provenance(actor: &Actor) -> (&'static str, Option<&'static str>, Option<&str>) {
    match &actor.channel {
        Channel::ApiKey { key_id } => ("api", Some("api_key"), Some(key_id)),
        Channel::Browser => ("react", None, Some(&actor.user_id)),
        Channel::Cli => ("cli", None, Some(&actor.user_id)),
        Channel::Schedule => ("cron", None, Some(&actor.user_id)),
        // A session started by another session's tools: programmatic, on its owner's behalf.
        Channel::Runner => ("api", None, Some(&actor.user_id)),
        // A registered agent calling back with the key it was issued.
        Channel::Agent { agent_id } => ("api", Some("api_key"), Some(agent_id)),
        Channel::Loopback => ("api", None, Some(&actor.user_id)),
    }
}

/// The id an input's author goes by.
fn sender_id(sender: &Sender) -> String {
    match sender {
        Sender::User { user_id } => user_id.clone(),
        Sender::App { app_id } => app_id.clone(),
        Sender::Session { session_id } => session_id.clone(),
        Sender::System => "system".to_owned(),
    }
}

/// A message or an answer may reach the session: it is open and within its budget.
fn accepts_prompts(tx: &Tx<'_>, key: &SessionKey) -> Result<()> {
    if tx.is_closed(key)? {
        return Err(Error::SessionClosed);
    }
    projection::budget::check(tx, key)
}

/// A cwd that comes from an agent's anchor or the default alias: the drive root is no cwd.
fn non_root_str(cwd: String) -> Option<String> {
    if cwd.is_empty() { None } else { Some(cwd) }
}

/// A cwd a client set (create, child create, `POST …/cwd`) is stored as the canonical path it is
/// answered with, the drive root spelled `.` — what the move answers is what the snapshot shows.
/// (Engines see the root as no cwd: `runner::turn::claim`.)
fn as_set(canonical: String) -> String {
    if canonical.is_empty() {
        ".".to_owned()
    } else {
        canonical
    }
}

/// Inserts a session with its `session_created`, optional `agent_message` and first
/// `prompt_submitted`; returns the key and the prompt's seq. `id` is the session's id when the
/// caller chose one (else a new one); `start` holds the record facts it starts with.
#[allow(clippy::too_many_arguments)]
fn insert_new_session(
    tx: &mut Tx<'_>,
    actor: &Actor,
    plan: &Plan,
    input: &CreateIn,
    machine: Option<machine::Definition>,
    agent_first_message: Option<&str>,
    images: &[images::Decoded],
    id: Option<&str>,
    start: &RecordStart<'_>,
) -> Result<(SessionKey, u64)> {
    let key = insert_session_row(
        tx,
        actor,
        plan,
        &excerpt(&input.prompt),
        &input.prompt,
        input.common.client_request_id.clone(),
        machine,
        id,
    )?;
    if start.metadata.is_some() || start.budget_cents > 0 || start.parent.is_some() {
        tx.set_record_facts(
            &key,
            &store::NewRecordFacts {
                metadata: start.metadata,
                budget_cents: start.budget_cents,
                parent_kind: start.parent.map(|(kind, _)| kind),
                parent_session_id: start.parent.map(|(_, id)| id),
            },
        )?;
    }
    if let Some(message) = agent_first_message.filter(|m| !m.is_empty()) {
        tx.append(
            &key,
            &Event::AgentMessage {
                message: message.to_owned(),
                created_at: clock::rfc3339(tx.now),
            },
        )?;
    }
    let seq = append_prompt(
        tx,
        actor,
        &key,
        &input.prompt,
        start.context,
        InputKind::Initial,
        input.behavior,
        plan.tier.as_deref(),
        &input.common,
        images,
    )?;
    Ok((key, seq))
}

/// Inserts a session's row (with its machine, if any, and its provenance from the credential) and
/// its `session_created` event.
#[allow(clippy::too_many_arguments)]
fn insert_session_row(
    tx: &mut Tx<'_>,
    actor: &Actor,
    plan: &Plan,
    title: &str,
    prompt: &str,
    client_request_id: Option<String>,
    machine: Option<machine::Definition>,
    id: Option<&str>,
) -> Result<SessionKey> {
    let definition = machine
        .as_ref()
        .map(|d| serde_json::to_string(d).map_err(|e| Error::Internal(e.to_string())))
        .transpose()?;
    let id = id.map_or_else(crate::ids::new_id, str::to_owned);
    let (source, attribution_type, attribution_id) = provenance(actor);
    let key = tx.insert_session(&NewSession {
        id: &id,
        workspace_id: &actor.workspace_id,
        agent_id: &plan.agent_id,
        user_id: &actor.user_id,
        title,
        cwd: plan.cwd.as_deref(),
        created_by_session_id: plan.created_by.as_deref(),
        tier: plan.tier.as_deref(),
        mode: definition.as_deref().or(plan.mode).unwrap_or("\"agent\""),
        requested_machine: definition.as_deref(),
        source,
        attribution_type,
        attribution_id,
    })?;
    if let Some(def) = machine {
        let state = MachineState::new(def, prompt, tx.now);
        let doc = serde_json::to_string(&state).map_err(|e| Error::Internal(e.to_string()))?;
        tx.set_json_column(&key, JsonColumn::MachineState, Some(&doc))?;
        tx.set_json_column(
            &key,
            JsonColumn::Machine,
            Some(&state.projection("running", None).to_string()),
        )?;
    }
    if plan.bind_default {
        tx.set_default(&plan.agent_id, Some(&id))?;
    }
    tx.append(
        &key,
        &Event::SessionCreated {
            prompt: prompt.to_owned(),
            created_at: clock::rfc3339(tx.now),
            client_request_id,
        },
    )?;
    Ok(key)
}

/// Appends a message to an existing session; returns its seq and whether a turn was running.
fn add_message(
    tx: &mut Tx<'_>,
    actor: &Actor,
    key: &SessionKey,
    input: &MessageIn,
    images: &[images::Decoded],
) -> Result<(u64, bool)> {
    accepts_prompts(tx, key)?;
    let row = tx.session_row(key)?;
    // R21/R22: an explicit tier becomes sticky; the input keeps the tier in force now.
    let tier = match input.tier {
        Some(t) => {
            tx.set_tier(key, t.as_str())?;
            Some(t.as_str().to_owned())
        }
        None => row.tier.clone(),
    };
    let seq = append_prompt(
        tx,
        actor,
        key,
        &input.prompt,
        None,
        InputKind::Message,
        input.behavior,
        tier.as_deref(),
        &input.common,
        images,
    )?;
    if !row.turn_active {
        projection::set_turn_status(tx, key, "running")?;
    } else if input.behavior == Behavior::FollowUp {
        projection::refresh_follow_up_queue(tx, key)?;
    }
    Ok((seq, row.turn_active))
}

/// Appends `prompt_submitted`, indexes the prompt, queues it for the runner (after `context`, what
/// the engine is shown first) and remembers the retry key — the shared tail of create and message.
#[allow(clippy::too_many_arguments)]
fn append_prompt(
    tx: &mut Tx<'_>,
    actor: &Actor,
    key: &SessionKey,
    prompt: &str,
    context: Option<&str>,
    kind: InputKind,
    behavior: Behavior,
    tier: Option<&str>,
    common: &InputCommon,
    images: &[images::Decoded],
) -> Result<u64> {
    let sender = sender_for(tx, actor, common)?;
    let stored: Vec<StoredImageRef> = images::store_all(tx, key, images)?;
    let seq = tx.append(
        key,
        &Event::PromptSubmitted {
            prompt: prompt.to_owned(),
            input_kind: kind,
            behavior,
            sender,
            client_request_id: common.client_request_id.clone(),
            images: stored,
            attachments: common.attachments.clone(),
        },
    )?;
    tx.index_prompt(key, seq, prompt)?;
    let text = match context {
        Some(context) => format!("{context}{prompt}"),
        None => prompt.to_owned(),
    };
    tx.enqueue_input(
        key,
        &NewInput {
            seq,
            kind: match kind {
                InputKind::Initial => "initial",
                InputKind::Message => "message",
            },
            behavior: behavior.as_str(),
            tier,
            text: &text,
            images: None,
            not_before: 0,
        },
    )?;
    remember(tx, actor, common, key, seq)?;
    Ok(seq)
}
