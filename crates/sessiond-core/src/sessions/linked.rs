//! Operations that other API families build on, with their own rows written in the same
//! transaction as the session's events: opening a session that waits for its first message,
//! stopping a session for good, and posting agent messages written outside the runner (with the
//! caller's rows about them, such as a message revision).
//!
//! The agent platform API (`/agentex`) opens its tasks this way: a task exists before its first
//! message, is found by name in the same transaction that would create it (so two racing
//! get-or-creates make one session), and may run with a pinned engine configuration.

use super::{
    Actor, InputCommon, MessageIn, Plan, Sessions, Submitted, agents, excerpt, images, new_prompt,
    non_root_str, sender_id, session_plan,
};
use crate::error::{Error, Result};
use crate::runner::machine::MachineState;
use crate::store::agentex::TaskRow;
use crate::store::sessions::{IdleMachine, MessageLink, PostedMessage, StopLink, StopPlan};
use crate::store::submit::{Open, OpenLink, Opening};

/// A message of a batch [`Sessions::post_messages`] adds: a note from the caller (with the
/// drive files it attaches) or the agent's own text.
pub enum BatchMessage {
    Note {
        text: String,
        attachments: Vec<crate::timeline::AttachmentRef>,
    },
    Agent(String),
}

/// A session to open for an agent.
#[derive(Debug, Clone)]
pub struct OpenIn {
    /// The id the new session gets (`ids::new_id()`), chosen by the caller so that it can
    /// subscribe to the session's live frames before the first message is submitted.
    pub id: String,
    /// The agent (its id); the session works in the agent's anchor.
    pub agent_id: String,
    /// A title that stays (a task's name); `None`: the first message's excerpt, or "New task".
    pub title: Option<String>,
    /// An engine configuration (JSON) the session runs with instead of its agent's.
    pub engine: Option<String>,
    /// The first message; `None` opens the session waiting for one.
    pub first: Option<MessageIn>,
}

/// What [`Sessions::open`] did.
pub enum Opened {
    /// A task of that name existed; nothing but its params was written.
    Found(TaskRow),
    /// A new session, the task it is (for the agent platform API) and the first message's
    /// submission.
    Created {
        task: Option<TaskRow>,
        submitted: Option<Submitted>,
    },
}

impl Sessions {
    /// Opens a session for an agent with `link`, another API family's record of it, in one
    /// transaction (a named agent platform task is found instead when it exists). A session
    /// opened without a first message has `turnStatus` `complete` (no turn ran) until one
    /// arrives.
    pub async fn open(&self, actor: &Actor, mut input: OpenIn, link: OpenLink) -> Result<Opened> {
        let agent = agents::list(&self.store, &actor.workspace_id)
            .await?
            .into_iter()
            .find(|a| a.id == input.agent_id)
            .ok_or(Error::AgentNotFound)?;
        let images = match &mut input.first {
            Some(first) => {
                self.check_attachments(actor, &mut first.common)?;
                images::decode_all(&first.common.images)?
            }
            None => Vec::new(),
        };
        let anchor = self.drive(actor).make_dir(&agent.anchor)?;
        let plan = Plan {
            agent_id: agent.id.clone(),
            cwd: non_root_str(anchor),
            tier: input.first.as_ref().and_then(|f| f.tier),
            created_by: None,
            mode: None,
            bind_default: false,
        };
        let title = match &input.first {
            Some(first) => excerpt(&first.prompt),
            None => input.title.clone().unwrap_or_else(|| "New task".to_owned()),
        };
        let mut plan = session_plan(actor, plan, title, None);
        plan.id = Some(input.id.clone());
        let first = input.first.take().map(|first| {
            new_prompt(
                actor,
                first.prompt,
                first.behavior,
                first.tier,
                first.common,
                images,
            )
        });
        let opening = Opening {
            plan,
            first,
            manual_title: input.title,
            engine: input.engine,
        };
        match self.store.submit().open(opening, link).await? {
            Open::Found(found) => Ok(Opened::Found(found)),
            Open::Created {
                key,
                task,
                first_seq,
            } => {
                let submitted = match first_seq {
                    Some(seq) => Some(self.delivered(key, seq).await),
                    None => None,
                };
                Ok(Opened::Created { task, submitted })
            }
        }
    }

    /// Stops a session's work for good: records `interrupt_requested`, drops every queued input
    /// (messages, answers, wakes, machine steps) and interrupts the running turn, which ends
    /// `interrupted`. A session that was waiting (queued, asking or sleeping) without a running
    /// turn ends `interrupted` at once, and a paused Job's machine goes idle. Who stopped it is
    /// recorded like an interrupt's. `link` writes the caller's record of the stop in the same
    /// transaction.
    pub async fn stop(&self, actor: &Actor, session_id: &str, link: StopLink) -> Result<()> {
        let by = sender_id(&actor.sender);
        // The machine a stop idles is read first and applied only while unchanged; it changes
        // only at a turn's start and end, so a second read settles it.
        for _ in 0..8 {
            let row = self.detail_row(actor, session_id).await?;
            let machine = row
                .machine_state
                .as_deref()
                .and_then(|m| serde_json::from_str::<MachineState>(m).ok())
                .filter(|m| !m.is_finished());
            let idle = match machine {
                Some(m) => Some(IdleMachine {
                    projection: m.projection("idle", None).to_string(),
                    state: serde_json::to_value(&m).map_err(|e| Error::Internal(e.to_string()))?,
                }),
                None => None,
            };
            let plan = StopPlan {
                machine_read: row.machine_state,
                idle,
            };
            let stopped = self
                .store
                .sessions()
                .stop(&actor.workspace_id, session_id, &by, plan, link.clone())
                .await?;
            if let Some(key) = stopped {
                self.runner.interrupt(key);
                return Ok(());
            }
        }
        Err(Error::Internal(
            "the session's machine kept moving while it was being stopped".into(),
        ))
    }

    /// Adds a batch of notes and agent messages to a session in one transaction: every note's
    /// attachments are checked first (an error names `{field}/{i}/attachments/…`), and a refusal
    /// of any message leaves the session as it was.
    pub async fn post_messages(
        &self,
        actor: &Actor,
        session_id: &str,
        field: &str,
        messages: Vec<BatchMessage>,
    ) -> Result<Vec<u64>> {
        let mut posted = Vec::with_capacity(messages.len());
        for (i, m) in messages.into_iter().enumerate() {
            posted.push(match m {
                BatchMessage::Note { text, attachments } => {
                    let mut common = InputCommon {
                        attachments,
                        ..Default::default()
                    };
                    self.check_attachments(actor, &mut common)
                        .map_err(|e| Error::invalid(format!("{field}/{i}/{e}")))?;
                    PostedMessage::Note {
                        note: text,
                        author: super::author_of(actor, &common),
                        attachments: common.attachments,
                    }
                }
                BatchMessage::Agent(text) => PostedMessage::Agent(text),
            });
        }
        Ok(self
            .store
            .sessions()
            .post_messages(&actor.workspace_id, session_id, posted)
            .await?)
    }

    /// Appends agent messages written outside the runner, in one transaction, with what `link`
    /// records about them; their seqs, in order.
    pub async fn post_agent_messages(
        &self,
        actor: &Actor,
        session_id: &str,
        messages: Vec<String>,
        link: MessageLink,
    ) -> Result<Vec<u64>> {
        Ok(self
            .store
            .sessions()
            .post_agent_messages(&actor.workspace_id, session_id, messages, link)
            .await?)
    }
}
