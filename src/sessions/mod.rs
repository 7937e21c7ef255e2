//! The sessions core: every operation of the Sessions API as one call, shared by all API families.
//!
//! Each write is one store job that appends its events and updates the projection in the same
//! transaction (invariant 1); the runner hears of new inputs only after COMMIT.

pub mod bucket;
mod images;
pub mod projection;
mod query;
pub mod view;
mod wait;

use std::sync::Arc;

use serde_json::Value;

use crate::clock;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::runner::machine::{self, MachineState};
use crate::runner::{Delivery, Runner};
use crate::store::{self, JsonColumn, NewInput, NewSession, SessionKey, Store, Tx};
use crate::timeline::{AttachmentRef, Behavior, Event, InputKind, Sender, StoredImageRef, Tier};

pub use images::{ImageIn, hex};
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
    pub cwd: Option<String>,
    pub tier: Option<Tier>,
    pub behavior: Behavior,
    pub mode: Option<Value>,
    pub common: InputCommon,
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
fn replayed(tx: &Tx<'_>, actor: &Actor, common: &InputCommon) -> Result<Option<(SessionKey, u64)>> {
    let Some(id) = &common.client_request_id else {
        return Ok(None);
    };
    match tx.find_client_request(&actor.workspace_id, id)? {
        None => Ok(None),
        Some(found) if found.fingerprint == common.fingerprint => {
            let key = tx.session_key(&actor.workspace_id, &found.session_id)?;
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

    /// Creates a session from its first prompt (root create, or child create under `parent`).
    pub async fn create(
        &self,
        actor: &Actor,
        input: CreateIn,
        parent: Option<String>,
    ) -> Result<Submitted> {
        let images = images::decode_all(&input.common.images)?;
        let machine = input.mode.as_ref().map(machine::validate).transpose()?;
        let actor_c = actor.clone();
        let (key, seq, fresh) = self
            .store
            .write(move |tx| {
                let actor = actor_c;
                if let Some((key, seq)) = replayed(tx, &actor, &input.common)? {
                    return Ok((key, seq, false));
                }
                let agent_id: String = tx.conn().query_row(
                    "SELECT id FROM agents WHERE workspace_id = ?1 AND slug = 'root'",
                    [&actor.workspace_id],
                    |r| r.get(0),
                )?;
                let (mut cwd, mut tier) =
                    (input.cwd.clone(), input.tier.map(|t| t.as_str().to_owned()));
                let mut created_by = None;
                if let Some(parent) = &parent {
                    let pkey = tx.session_key(&actor.workspace_id, parent)?;
                    let prow = tx.session_row(&pkey)?;
                    // R53: omitted cwd and tier come from the parent.
                    cwd = cwd.or(prow.cwd);
                    tier = tier.or(prow.tier);
                    created_by = Some(pkey.id);
                }
                let definition = machine
                    .as_ref()
                    .map(|d| serde_json::to_string(d).map_err(|e| Error::Internal(e.to_string())))
                    .transpose()?;
                let id = crate::ids::new_id();
                let title = excerpt(&input.prompt);
                let key = tx.insert_session(&NewSession {
                    id: &id,
                    workspace_id: &actor.workspace_id,
                    agent_id: &agent_id,
                    user_id: &actor.user_id,
                    title: &title,
                    cwd: cwd.as_deref(),
                    created_by_session_id: created_by.as_deref(),
                    tier: tier.as_deref(),
                    mode: definition.as_deref().unwrap_or("\"agent\""),
                    requested_machine: definition.as_deref(),
                })?;
                if let Some(def) = machine {
                    let state = MachineState::new(def, &input.prompt, tx.now);
                    let doc = serde_json::to_string(&state)
                        .map_err(|e| Error::Internal(e.to_string()))?;
                    tx.set_json_column(&key, JsonColumn::MachineState, Some(&doc))?;
                    tx.set_json_column(
                        &key,
                        JsonColumn::Machine,
                        Some(&state.projection("running", None).to_string()),
                    )?;
                }
                tx.append(
                    &key,
                    &Event::SessionCreated {
                        prompt: input.prompt.clone(),
                        created_at: clock::rfc3339(tx.now),
                        client_request_id: input.common.client_request_id.clone(),
                    },
                )?;
                let seq = append_prompt(
                    tx,
                    &actor,
                    &key,
                    &input.prompt,
                    InputKind::Initial,
                    input.behavior,
                    tier.as_deref(),
                    &input.common,
                    &images,
                )?;
                Ok((key, seq, true))
            })
            .await?;
        let delivery = if fresh {
            // R24: a new session has no turn yet, so steer and follow-up start alike.
            self.runner.deliver(key.clone(), false).await
        } else {
            self.replay_delivery(&key, seq).await?
        };
        Ok(Submitted {
            key,
            input_seq: seq,
            fresh,
            delivery,
        })
    }

    /// Sends a message (steer or follow-up) to a session.
    pub async fn message(
        &self,
        actor: &Actor,
        session_id: &str,
        input: MessageIn,
    ) -> Result<Submitted> {
        let images = images::decode_all(&input.common.images)?;
        let actor_c = actor.clone();
        let session_id = session_id.to_owned();
        let follow_up = input.behavior == Behavior::FollowUp;
        let (key, seq, fresh, active) = self
            .store
            .write(move |tx| {
                let actor = actor_c;
                if let Some((key, seq)) = replayed(tx, &actor, &input.common)? {
                    return Ok((key, seq, false, false));
                }
                let key = tx.session_key(&actor.workspace_id, &session_id)?;
                let row = tx.session_row(&key)?;
                // R21/R22: an explicit tier becomes sticky; the input keeps the tier in force now.
                let tier = match input.tier {
                    Some(t) => {
                        tx.set_tier(&key, t.as_str())?;
                        Some(t.as_str().to_owned())
                    }
                    None => row.tier.clone(),
                };
                let seq = append_prompt(
                    tx,
                    &actor,
                    &key,
                    &input.prompt,
                    InputKind::Message,
                    input.behavior,
                    tier.as_deref(),
                    &input.common,
                    &images,
                )?;
                if !row.turn_active {
                    tx.set_turn_status(&key, "running")?;
                } else if input.behavior == Behavior::FollowUp {
                    projection::refresh_follow_up_queue(tx, &key)?;
                }
                Ok((key, seq, true, row.turn_active))
            })
            .await?;
        let delivery = if fresh {
            self.runner.deliver(key.clone(), follow_up && active).await
        } else {
            self.replay_delivery(&key, seq).await?
        };
        Ok(Submitted {
            key,
            input_seq: seq,
            fresh,
            delivery,
        })
    }

    /// Adds a note: durable context that starts no turn.
    pub async fn note(
        &self,
        actor: &Actor,
        session_id: &str,
        note: String,
        common: InputCommon,
    ) -> Result<u64> {
        let images = images::decode_all(&common.images)?;
        let actor = actor.clone();
        let session_id = session_id.to_owned();
        self.store
            .write(move |tx| {
                if let Some((_, seq)) = replayed(tx, &actor, &common)? {
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
        let images = images::decode_all(&common.images)?;
        let actor_c = actor.clone();
        let session_id = session_id.to_owned();
        let (key, seq, fresh) = self
            .store
            .write(move |tx| {
                let actor = actor_c;
                if let Some((key, seq)) = replayed(tx, &actor, &common)? {
                    return Ok((key, seq, false));
                }
                let key = tx.session_key(&actor.workspace_id, &session_id)?;
                let row = tx.session_row(&key)?;
                if row.turn_status != "ask" || row.turn_active {
                    return Err(Error::NotAsking);
                }
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
                tx.set_turn_status(&key, "running")?;
                remember(tx, &actor, &common, &key, seq)?;
                Ok((key, seq, true))
            })
            .await?;
        let delivery = if fresh {
            self.runner.deliver(key.clone(), false).await
        } else {
            self.replay_delivery(&key, seq).await?
        };
        Ok(Submitted {
            key,
            input_seq: seq,
            fresh,
            delivery,
        })
    }

    /// Records `interrupt_requested` and stops the running turn, if any. On an idle session only
    /// the event is recorded.
    pub async fn interrupt(&self, actor: &Actor, session_id: &str) -> Result<()> {
        let ws = actor.workspace_id.clone();
        let session_id = session_id.to_owned();
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

/// Appends `prompt_submitted`, indexes the prompt, queues it for the runner and remembers the
/// retry key — the shared tail of create and message.
#[allow(clippy::too_many_arguments)]
fn append_prompt(
    tx: &mut Tx<'_>,
    actor: &Actor,
    key: &SessionKey,
    prompt: &str,
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
    tx.index_prompt(key, prompt)?;
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
            text: prompt,
            images: None,
            not_before: 0,
        },
    )?;
    remember(tx, actor, common, key, seq)?;
    Ok(seq)
}
