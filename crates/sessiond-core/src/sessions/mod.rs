//! The sessions core: every operation of the Sessions API as one call, shared by all API families.
//!
//! Each write is one store job that appends its events and updates the projection in the same
//! transaction (invariant 1); the runner hears of new inputs only after COMMIT.

pub mod busy;
mod fork;
mod images;
pub mod lineage;
mod linked;
mod query;
pub mod record;
mod session_tools;
pub mod state;
mod submission;
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
use crate::runner::machine::{self, MachineState};
use crate::runner::{Delivery, Runner};
use crate::store::inputs::Retry;
use crate::store::record::WebhookFacts;
use crate::store::sessions::{Author, NewImage, NewNote, SessionChange};
use crate::store::submit::{InputLink, Linked, NewMachine, NewPrompt, SessionPlan, Submissions};
use crate::store::{self, SessionKey, Store};
use crate::timeline::{AttachmentRef, Behavior, Sender, Tier};

pub use fork::{ForkIn, ForkOut};
pub use images::ImageIn;
pub use linked::{BatchMessage, OpenIn, Opened};
pub use query::{AgentActivity, HistoryQuery, ListQuery};
use submission::Outcome;
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
    /// A signed webhook delivery (GitHub, Slack) to a trigger of the agent, acting as the
    /// trigger's creator. Its session's record says where the delivery came from.
    Webhook(Box<WebhookOrigin>),
    /// An open agent protocol (`mcp`, `a2a`) spoken with a credential, the inner channel: the
    /// session's `source` names the protocol (an extension of the seed's values), its
    /// attribution is the inner channel's, so a session started there is told apart on every
    /// family while being the same session.
    Protocol {
        protocol: &'static str,
        via: Box<Channel>,
    },
}

impl Channel {
    /// The channel of the credential itself: through an open protocol, the one it speaks with.
    pub fn credential(&self) -> &Channel {
        match self {
            Channel::Protocol { via, .. } => via.credential(),
            other => other,
        }
    }

    /// `self` spoken through the open protocol `protocol`.
    pub fn through(self, protocol: &'static str) -> Channel {
        Channel::Protocol {
            protocol,
            via: Box::new(self),
        }
    }
}

/// What a Session record shows of the webhook delivery that started it (seed 004's provenance:
/// `source` `mention`, `webhook_type`, `webhook_id`, `attribution`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookOrigin {
    /// `github.issue`, `slack.app_mention`, …; `None` for an event the seed has no name for.
    pub webhook_type: Option<&'static str>,
    /// The delivery's own id (GitHub's `X-GitHub-Delivery`, Slack's `event_id`).
    pub webhook_id: Option<String>,
    /// `github_user` or `slack_user`, with the account's id, when the delivery names one.
    pub attribution: Option<(&'static str, String)>,
    /// The GitHub account (`id`, `login`, `type`, `avatar_url`), as the record's JSON.
    pub attribution_user: Option<String>,
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
    /// What the message does when the session's turn is running (`busy`).
    pub busy: busy::BusyPolicy,
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

/// The retry a request's `clientRequestId` makes it, if it has one.
fn retry_of(actor: &Actor, common: &InputCommon) -> Option<Retry> {
    common.client_request_id.as_ref().map(|id| Retry {
        workspace_id: actor.workspace_id.clone(),
        client_request_id: id.clone(),
        fingerprint: common.fingerprint.clone(),
    })
}

/// Who an input is recorded as from (see [`Author`]).
fn author_of(actor: &Actor, common: &InputCommon) -> Author {
    Author {
        sender: actor.sender.clone(),
        source_session_id: common.source_session_id.clone(),
    }
}

/// A prompt as the store records it.
fn new_prompt(
    actor: &Actor,
    text: String,
    behavior: Behavior,
    tier: Option<Tier>,
    common: InputCommon,
    images: Vec<NewImage>,
) -> NewPrompt {
    NewPrompt {
        author: author_of(actor, &common),
        retry: retry_of(actor, &common),
        text,
        behavior,
        tier,
        images,
        attachments: common.attachments,
        when_busy: busy::BusyPolicy::Enqueue,
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

    /// The drive of the actor's workspace.
    pub fn drive(&self, actor: &Actor) -> Drive {
        Drive::root_for(&self.cfg.data_dir, &actor.workspace_slug)
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
        if let Some(replayed) = self
            .replayed(retry_of(actor, &input.common).as_ref())
            .await?
        {
            return Ok(replayed);
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
                    tier: input.tier.or(prow.tier),
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
                    tier: input.tier,
                    created_by: None,
                    mode: None,
                    bind_default: false,
                }
            }
        };
        let title = excerpt(&input.prompt);
        let machine = machine
            .map(|def| new_machine(def, &input.prompt))
            .transpose()?;
        let mut plan = session_plan(actor, plan, title, machine);
        plan.metadata = metadata;
        plan.budget_cents = record.budget_cents;
        plan.context = lineage;
        plan.parent = record.parent.map(|p| (p.kind, p.session_id));
        let first = new_prompt(
            actor,
            input.prompt,
            input.behavior,
            input.tier,
            input.common,
            images,
        );
        let retry = first.retry.clone();
        let write = async |submit: Submissions<'_>| Ok((submit.create(plan, first).await?, ()));
        // R24: a new session has no turn yet, so steer and follow-up start alike.
        let outcome = self.submit_input(retry, false, write).await?;
        Ok(outcome.into_linked().0)
    }

    /// Checks the session a new one comes from and makes what its engine is shown first.
    async fn lineage_start(&self, actor: &Actor, parent: &lineage::Parent) -> Result<String> {
        let row = self.detail_row(actor, &parent.session_id).await?;
        match parent.kind {
            lineage::ParentKind::Resume => {
                lineage::resume_context(&self.store, row.pk, &row.id).await
            }
            lineage::ParentKind::Continuation | lineage::ParentKind::Handoff => {
                let facts = self.store.projections().record_facts(row.pk).await?;
                Ok(lineage::continuation_context(
                    &row.id,
                    facts.as_ref().and_then(|f| f.last_terminal.as_ref()),
                ))
            }
            lineage::ParentKind::Fork => Err(Error::invalid(
                "parent/kind: a fork is made with the session's fork route",
            )),
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
            .message_with(actor, session_id, input, InputLink::None)
            .await?
            .0)
    }

    /// [`Sessions::message`], with `link` naming what another API family records about the
    /// input in the input's transaction. A retried `clientRequestId` writes nothing, so nothing
    /// is linked (`None`).
    pub async fn message_with(
        &self,
        actor: &Actor,
        session_id: &str,
        mut input: MessageIn,
        link: InputLink,
    ) -> Result<(Submitted, Option<Linked>)> {
        if let Some(replayed) = self
            .replayed(retry_of(actor, &input.common).as_ref())
            .await?
        {
            return Ok((replayed, None));
        }
        let images = images::decode_all(&input.common.images)?;
        self.check_attachments(actor, &mut input.common)?;
        let policy = input.busy;
        // An interrupting message runs after the turn it stops.
        let follow_up =
            input.behavior == Behavior::FollowUp || policy == busy::BusyPolicy::Interrupt;
        let mut m = new_prompt(
            actor,
            input.prompt,
            input.behavior,
            input.tier,
            input.common,
            images,
        );
        m.when_busy = policy;
        let retry = m.retry.clone();
        let write = async |submit: Submissions<'_>| {
            submit
                .message(&actor.workspace_id, session_id, m, link)
                .await
        };
        Ok(self
            .submit_input(retry, follow_up, write)
            .await?
            .into_linked())
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
        if let Some(replayed) = self
            .replayed(retry_of(actor, &input.common).as_ref())
            .await?
        {
            let created = self.is_initial_input(&replayed).await?;
            return Ok((replayed, created));
        }
        let agent = agents::get(&self.store, &actor.workspace_id, agent_slug).await?;
        let images = images::decode_all(&input.common.images)?;
        self.check_attachments(actor, &mut input.common)?;
        let anchor = self.drive(actor).make_dir(&agent.anchor)?;
        let policy = input.busy;
        let follow_up =
            input.behavior == Behavior::FollowUp || policy == busy::BusyPolicy::Interrupt;
        let plan = Plan {
            agent_id: agent.id.clone(),
            cwd: non_root_str(anchor),
            tier: input.tier,
            created_by: None,
            // R61: default sessions launch in automatic mode.
            mode: Some("\"auto\""),
            bind_default: true,
        };
        let mut plan = session_plan(actor, plan, excerpt(&input.prompt), None);
        plan.agent_first_message = agent_first_message;
        let mut m = new_prompt(
            actor,
            input.prompt,
            input.behavior,
            input.tier,
            input.common,
            images,
        );
        m.when_busy = policy;
        let retry = m.retry.clone();
        let write =
            async |submit: Submissions<'_>| Ok((submit.default_message(plan, m).await?, ()));
        match self.submit_input(retry, follow_up, write).await? {
            Outcome::Written {
                submitted, created, ..
            } => Ok((submitted, created)),
            Outcome::Replayed(replayed) => {
                let created = self.is_initial_input(&replayed).await?;
                Ok((replayed, created))
            }
        }
    }

    /// Whether a retried submission's input is its session's first prompt (the call it retries
    /// created the session).
    async fn is_initial_input(&self, s: &Submitted) -> Result<bool> {
        let body = self.store.log().event_body(s.key.pk, s.input_seq).await?;
        Ok(body.is_some_and(|b| b.contains("\"inputKind\":\"initial\"")))
    }

    /// The agent's default session, if bound (R56: unbound is not an error).
    pub async fn default_session(
        &self,
        actor: &Actor,
        agent_slug: &str,
    ) -> Result<Option<store::SessionRow>> {
        let agent = agents::get(&self.store, &actor.workspace_id, agent_slug).await?;
        Ok(self
            .store
            .directory()
            .default_session(&actor.workspace_id, &agent.id, &actor.user_id)
            .await?)
    }

    /// Points the alias at a session of that owner, or at nothing (R58, R59).
    pub async fn set_default_session(
        &self,
        actor: &Actor,
        agent_slug: &str,
        session_id: Option<String>,
    ) -> Result<Option<store::SessionRow>> {
        let agent = agents::get(&self.store, &actor.workspace_id, agent_slug).await?;
        self.store
            .directory()
            .set_default_session(&actor.workspace_id, &agent.id, session_id.as_deref())
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
        let message = format!("working directory moved to {shown}; it applies from the next turn");
        self.store
            .sessions()
            .move_cwd(
                &actor.workspace_id,
                &row.id,
                row.cwd.clone(),
                Some(shown.clone()),
                message,
            )
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
        if let Some((_, seq)) = self.recorded(retry_of(actor, &common).as_ref()).await? {
            return Ok(seq);
        }
        let mut common = common;
        self.check_attachments(actor, &mut common)?;
        let images = images::decode_all(&common.images)?;
        Ok(self
            .store
            .sessions()
            .note(NewNote {
                workspace_id: actor.workspace_id.clone(),
                session_id: session_id.to_owned(),
                note,
                author: author_of(actor, &common),
                retry: retry_of(actor, &common),
                images,
                attachments: common.attachments,
            })
            .await?)
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
            .answer_with(actor, session_id, answer, common, InputLink::None)
            .await?
            .0)
    }

    /// [`Sessions::answer`], with `link` as in [`Sessions::message_with`].
    pub async fn answer_with(
        &self,
        actor: &Actor,
        session_id: &str,
        answer: String,
        common: InputCommon,
        link: InputLink,
    ) -> Result<(Submitted, Option<Linked>)> {
        if let Some(replayed) = self.replayed(retry_of(actor, &common).as_ref()).await? {
            return Ok((replayed, None));
        }
        let mut common = common;
        self.check_attachments(actor, &mut common)?;
        let images = images::decode_all(&common.images)?;
        let a = new_prompt(actor, answer, Behavior::Steer, None, common, images);
        let retry = a.retry.clone();
        let write = async |submit: Submissions<'_>| {
            submit
                .answer(&actor.workspace_id, session_id, a, link)
                .await
        };
        Ok(self.submit_input(retry, false, write).await?.into_linked())
    }

    /// Records `interrupt_requested` and stops the running turn, if any. On an idle session only
    /// the event is recorded.
    pub async fn interrupt(&self, actor: &Actor, session_id: &str) -> Result<()> {
        let key = self
            .store
            .sessions()
            .interrupt(&actor.workspace_id, session_id, &sender_id(&actor.sender))
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
        self.update(actor, session_id, SessionChange::Title(title))
            .await
    }

    pub async fn set_archived(
        &self,
        actor: &Actor,
        session_id: &str,
        archived: bool,
    ) -> Result<store::SessionRow> {
        self.update(actor, session_id, SessionChange::Archived(archived))
            .await
    }

    /// Applies a projection-only change and returns the row as the actor sees it.
    async fn update(
        &self,
        actor: &Actor,
        session_id: &str,
        change: SessionChange,
    ) -> Result<store::SessionRow> {
        self.store
            .sessions()
            .change(&actor.workspace_id, session_id, change)
            .await?;
        self.detail_row(actor, session_id).await
    }

    /// Moves the actor's read marker forward (never back, never past the last event).
    pub async fn mark_read(&self, actor: &Actor, session_id: &str, seq: u64) -> Result<u64> {
        Ok(self
            .store
            .sessions()
            .mark_read(&actor.workspace_id, session_id, &actor.user_id, seq)
            .await?)
    }

    /// Removes a session a retention policy removes, as [`Sessions::delete`] does (the same
    /// store steps, the runner told, its streams ended), but only while the policy still removes
    /// it, checked in the deleting transaction: never once a turn was claimed, an input queued,
    /// a pin or a default pointer set, or anything changed since the candidate was read.
    /// Whether it did.
    pub async fn delete_for_retention(
        &self,
        workspace_id: &str,
        candidate: &store::retention::RetentionCandidate,
        policy: &store::retention::RetentionPolicy,
    ) -> Result<bool> {
        let Some(key) = self
            .store
            .retention()
            .delete_if_removable(workspace_id, candidate, policy)
            .await?
        else {
            return Ok(false);
        };
        self.runner.session_deleted(key.pk);
        self.store.bus().close_session(&key.id);
        Ok(true)
    }

    /// Stops the session's work and removes it permanently.
    pub async fn delete(&self, actor: &Actor, session_id: &str) -> Result<()> {
        let key = self
            .store
            .sessions()
            .delete(&actor.workspace_id, session_id)
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
    tier: Option<Tier>,
    created_by: Option<String>,
    /// `TurnMode` JSON; `None` means `"agent"` (or the machine definition when there is one).
    mode: Option<&'static str>,
    /// Bind the new session as the agent's default (first default-alias message).
    bind_default: bool,
}

/// A session's `source` and `attribution` from the way its creator came in.
fn provenance(actor: &Actor) -> (&'static str, Option<&'static str>, Option<&str>) {
    provenance_of(&actor.channel, &actor.user_id)
}

/// [`provenance`] of a channel, for the actor `user_id`.
fn provenance_of<'a>(
    channel: &'a Channel,
    user_id: &'a str,
) -> (&'static str, Option<&'static str>, Option<&'a str>) {
    match channel {
        Channel::Protocol { protocol, via } => {
            let (_, kind, id) = provenance_of(via, user_id);
            (protocol, kind, id)
        }
        Channel::ApiKey { key_id } => ("api", Some("api_key"), Some(key_id)),
        Channel::Browser => ("react", None, Some(user_id)),
        Channel::Cli => ("cli", None, Some(user_id)),
        Channel::Schedule => ("cron", None, Some(user_id)),
        // A session started by another session's tools: programmatic, on its owner's behalf.
        Channel::Runner => ("api", None, Some(user_id)),
        // A registered agent calling back with the key it was issued.
        Channel::Agent { agent_id } => ("api", Some("api_key"), Some(agent_id)),
        Channel::Loopback => ("api", None, Some(user_id)),
        // A GitHub or Slack event: the seed's trigger for sessions an account's activity
        // starts is `mention` (the event itself is `webhook_type`).
        Channel::Webhook(origin) => match &origin.attribution {
            Some((kind, id)) => ("mention", Some(*kind), Some(id)),
            None => ("mention", None, None),
        },
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

/// A new session's plan as the store takes it: where it goes, its title, its machine, and the
/// provenance of its creator's credential.
fn session_plan(
    actor: &Actor,
    plan: Plan,
    title: String,
    machine: Option<NewMachine>,
) -> SessionPlan {
    let (source, attribution_type, attribution_id) = provenance(actor);
    SessionPlan {
        workspace_id: actor.workspace_id.clone(),
        agent_id: plan.agent_id,
        user_id: actor.user_id.clone(),
        title,
        cwd: plan.cwd,
        created_by: plan.created_by,
        tier: plan.tier,
        mode: plan.mode.map(str::to_owned),
        machine,
        source,
        attribution_type,
        attribution_id: attribution_id.map(str::to_owned),
        webhook: match &actor.channel {
            Channel::Webhook(origin) => Some(WebhookFacts {
                webhook_type: origin.webhook_type.map(str::to_owned),
                webhook_id: origin.webhook_id.clone(),
                attribution_user: origin.attribution_user.clone(),
            }),
            _ => None,
        },
        bind_default: plan.bind_default,
        ..SessionPlan::default()
    }
}

/// A machine as a new session starts it (from its first prompt, now).
fn new_machine(def: machine::Definition, prompt: &str) -> Result<NewMachine> {
    let json = |v: Result<String, serde_json::Error>| v.map_err(|e| Error::Internal(e.to_string()));
    let definition = json(serde_json::to_string(&def))?;
    let state = MachineState::new(def, prompt, clock::now_ms());
    Ok(NewMachine {
        definition,
        state: json(serde_json::to_string(&state))?,
        projection: state.projection("running", None).to_string(),
    })
}
