//! The session log's writes that the sessions core makes as one unit each: an interrupt, a
//! note, a projection-only change, a read marker, a move of the working directory, a delete.
//! Each method is the whole transaction; the caller has decided everything that does not
//! depend on what the transaction reads.

use std::collections::BTreeMap;

use super::inputs::Retry;
use super::{SessionKey, Store, TurnStatus, Tx};
use crate::clock;
use crate::error::{Error, Result};
use crate::timeline::{AttachmentRef, Event, Level, Sender, StoredImageRef};

/// Who an input is recorded as from: the credential's sender, unless `source_session_id` names
/// a session of the same workspace (else 404), which it is then attributed to (R7).
#[derive(Debug, Clone)]
pub struct Author {
    pub sender: Sender,
    pub source_session_id: Option<String>,
}

/// An image an input carries, decoded and checked; stored once per session under its id.
#[derive(Debug, Clone)]
pub struct NewImage {
    pub storage_id: String,
    pub mime_type: String,
    pub bytes: Vec<u8>,
}

/// A change of a session's projection alone (no event).
#[derive(Debug, Clone)]
pub enum SessionChange {
    /// A manual title, which automatic titles never replace.
    Title(String),
    Archived(bool),
}

/// What the agent platform API records about agent messages posted outside the runner, in
/// their transaction.
#[derive(Debug, Clone)]
pub enum MessageLink {
    None,
    /// The one message is still being written (`streaming_status` `IN_PROGRESS`).
    OpenInProgress,
    /// Each posted message revises a stored one: `(the message's seq, still in progress)`, in
    /// the order of the posted texts.
    Revisions(Vec<(u64, bool)>),
}

/// A paused Job's machine as a stop leaves it: idle (nothing will wake or answer it).
#[derive(Debug, Clone)]
pub struct IdleMachine {
    /// The machine's projection, idle (JSON).
    pub projection: String,
    /// The machine's state as the `state_machine` event carries it.
    pub state: serde_json::Value,
}

/// What stopping a session for good does to its machine, from the machine state the caller
/// read: applied only while the session still holds exactly that state (else nothing is written
/// and the caller reads again).
#[derive(Debug, Clone)]
pub struct StopPlan {
    /// The machine state as read (JSON as stored), `None` for a session without one.
    pub machine_read: Option<String>,
    /// The machine idle, when it was paused (not finished).
    pub idle: Option<IdleMachine>,
}

/// What another API family records about a stop in its transaction.
#[derive(Debug, Clone)]
pub enum StopLink {
    None,
    /// The agent platform API's final status of the task, with a system event saying it.
    TaskFinal {
        status: super::agentex::FinalStatus,
        reason: String,
    },
}

/// A note: durable context that starts no turn.
#[derive(Debug, Clone)]
pub struct NewNote {
    pub workspace_id: String,
    pub session_id: String,
    pub note: String,
    pub author: Author,
    pub retry: Option<Retry>,
    pub images: Vec<NewImage>,
    pub attachments: Vec<AttachmentRef>,
}

/// One message of a batch added to a session from outside the runner: a person's or an app's
/// note, or the agent's own text.
#[derive(Debug, Clone)]
pub enum PostedMessage {
    Note {
        note: String,
        author: Author,
        attachments: Vec<AttachmentRef>,
    },
    Agent(String),
}

impl Tx<'_> {
    /// The sender an input is recorded with (see [`Author`]).
    pub(crate) fn sender_of(&self, workspace_id: &str, author: &Author) -> Result<Sender> {
        match &author.source_session_id {
            Some(source) => Ok(Sender::Session {
                session_id: self.session_key(workspace_id, source)?.id,
            }),
            None => Ok(author.sender.clone()),
        }
    }

    /// Stores an input's images with the session; the references its event carries.
    pub(crate) fn store_images(
        &mut self,
        key: &SessionKey,
        images: &[NewImage],
    ) -> Result<Vec<StoredImageRef>> {
        images
            .iter()
            .map(|img| {
                self.put_image(key, &img.storage_id, &img.mime_type, &img.bytes)?;
                Ok(StoredImageRef {
                    storage_id: img.storage_id.clone(),
                    mime_type: img.mime_type.clone(),
                    bytes: img.bytes.len() as u64,
                })
            })
            .collect()
    }

    /// Remembers a request's `clientRequestId` with the input it made.
    pub(crate) fn remember(
        &mut self,
        retry: Option<&Retry>,
        key: &SessionKey,
        seq: u64,
    ) -> Result<()> {
        if let Some(r) = retry {
            self.record_client_request(
                &r.workspace_id,
                &r.client_request_id,
                &r.fingerprint,
                &key.id,
                seq,
            )?;
        }
        Ok(())
    }
}

/// The sessions core's single-unit writes.
#[derive(Clone, Copy)]
pub struct SessionWrites<'a> {
    store: &'a Store,
}

impl Store {
    /// Writes of the sessions core that are one unit each.
    pub fn sessions(&self) -> SessionWrites<'_> {
        SessionWrites { store: self }
    }
}

impl SessionWrites<'_> {
    /// Records `interrupt_requested` and who asked; the session's key (for the runner).
    pub async fn interrupt(
        &self,
        workspace_id: &str,
        session_id: &str,
        by: &str,
    ) -> Result<SessionKey> {
        let (ws, id, by) = (
            workspace_id.to_owned(),
            session_id.to_owned(),
            by.to_owned(),
        );
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                tx.append(
                    &key,
                    &Event::InterruptRequested {
                        requested_at: clock::rfc3339(tx.now),
                    },
                )?;
                tx.set_stopped(&key, &by)?;
                Ok(key)
            })
            .await
    }

    /// Applies a projection-only change.
    pub async fn change(
        &self,
        workspace_id: &str,
        session_id: &str,
        change: SessionChange,
    ) -> Result<()> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                match &change {
                    SessionChange::Title(title) => tx.set_manual_title(&key, title),
                    SessionChange::Archived(archived) => tx.set_archived(&key, *archived),
                }
            })
            .await
    }

    /// Moves `user_id`'s read marker forward to `seq` (never back, never past the last event);
    /// the marker now.
    pub async fn mark_read(
        &self,
        workspace_id: &str,
        session_id: &str,
        user_id: &str,
        seq: u64,
    ) -> Result<u64> {
        let (ws, id, user) = (
            workspace_id.to_owned(),
            session_id.to_owned(),
            user_id.to_owned(),
        );
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                let last = tx.session_row(&key)?.last_event_seq;
                tx.mark_read(&key, &user, seq.min(last))
            })
            .await
    }

    /// Removes a session and everything it holds; its key (for the runner and the bus).
    pub async fn delete(&self, workspace_id: &str, session_id: &str) -> Result<SessionKey> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                tx.delete_session(&key)?;
                // The other processes end the session's streams once this commits.
                #[cfg(feature = "postgres")]
                super::postgres::fanout::announce_deleted(tx.conn, &key.id)?;
                Ok(key)
            })
            .await
    }

    /// Moves the working directory from `expected` to `cwd` with a compare-and-swap (409
    /// `cwd_conflict` when another move won) and says so in the timeline.
    pub async fn move_cwd(
        &self,
        workspace_id: &str,
        session_id: &str,
        expected: Option<String>,
        cwd: Option<String>,
        message: String,
    ) -> Result<()> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                if !tx.swap_cwd(&key, expected.as_deref(), cwd.as_deref())? {
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
            .await
    }

    /// Adds a note; its seq. A retried `clientRequestId` answers the first note's seq.
    pub async fn note(&self, n: NewNote) -> Result<u64> {
        if n.images.is_empty() && n.retry.is_none() {
            // Nothing to remember and no image to store: the note is one write.
            return self
                .store
                .write_one(move |w| {
                    let key = w
                        .tx()
                        .session_key_to_append(&n.workspace_id, &n.session_id)?;
                    w.tx().takes_input(&key)?;
                    let sender = w.tx().sender_of(&n.workspace_id, &n.author)?;
                    let event = Event::NoteSubmitted {
                        note: n.note,
                        sender,
                        client_request_id: None,
                        images: Vec::new(),
                        attachments: n.attachments,
                    };
                    w.append(&key, &event)
                })
                .await;
        }
        self.store
            .write(move |tx| {
                if let Some(r) = &n.retry
                    && let Some((_, seq)) = tx.replayed(r)?
                {
                    return Ok(seq);
                }
                let key = tx.session_key_to_append(&n.workspace_id, &n.session_id)?;
                tx.takes_input(&key)?;
                let sender = tx.sender_of(&n.workspace_id, &n.author)?;
                let images = tx.store_images(&key, &n.images)?;
                let seq = tx.append(
                    &key,
                    &Event::NoteSubmitted {
                        note: n.note,
                        sender,
                        client_request_id: n.retry.as_ref().map(|r| r.client_request_id.clone()),
                        images,
                        attachments: n.attachments,
                    },
                )?;
                tx.remember(n.retry.as_ref(), &key, seq)?;
                Ok(seq)
            })
            .await
    }

    /// Appends a batch of notes and agent messages in one transaction: all of them or, when one
    /// is refused (the session takes no input, an author's source session is missing), none.
    /// Their seqs, in order.
    pub async fn post_messages(
        &self,
        workspace_id: &str,
        session_id: &str,
        messages: Vec<PostedMessage>,
    ) -> Result<Vec<u64>> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                if messages
                    .iter()
                    .any(|m| matches!(m, PostedMessage::Note { .. }))
                {
                    tx.takes_input(&key)?;
                }
                let mut seqs = Vec::with_capacity(messages.len());
                for m in messages {
                    let event = match m {
                        PostedMessage::Note {
                            note,
                            author,
                            attachments,
                        } => Event::NoteSubmitted {
                            note,
                            sender: tx.sender_of(&ws, &author)?,
                            client_request_id: None,
                            images: Vec::new(),
                            attachments,
                        },
                        PostedMessage::Agent(message) => Event::AgentMessage {
                            message,
                            created_at: clock::rfc3339(tx.now),
                        },
                    };
                    seqs.push(tx.append(&key, &event)?);
                }
                Ok(seqs)
            })
            .await
    }

    /// Appends agent messages written outside the runner in one transaction, with what `link`
    /// records about them; their seqs, in order. A message without text yet (an agent that
    /// opens a message it streams, or clears one) is a `system` notice: an `agent_message`
    /// always has words.
    pub async fn post_agent_messages(
        &self,
        workspace_id: &str,
        session_id: &str,
        messages: Vec<String>,
        link: MessageLink,
    ) -> Result<Vec<u64>> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                let mut seqs = Vec::with_capacity(messages.len());
                for message in messages {
                    let event = if message.is_empty() {
                        Event::System {
                            level: Level::Info,
                            message: "The agent is writing a message without text so far".into(),
                            metadata: None,
                        }
                    } else {
                        Event::AgentMessage {
                            message,
                            created_at: clock::rfc3339(tx.now),
                        }
                    };
                    seqs.push(tx.append(&key, &event)?);
                }
                match &link {
                    MessageLink::None => {}
                    MessageLink::OpenInProgress => {
                        for &seq in &seqs {
                            tx.revise_message(&key, seq, seq, true)?;
                        }
                    }
                    MessageLink::Revisions(plan) => {
                        for ((message, in_progress), revision) in plan.iter().zip(&seqs) {
                            tx.revise_message(&key, *message, *revision, *in_progress)?;
                        }
                    }
                }
                Ok(seqs)
            })
            .await
    }

    /// Changes a Session record: a new budget (0 lifts the cap) and metadata changes merged
    /// into what it has (a `None` value removes the key), at most `max_keys` keys afterwards.
    pub async fn patch_record(
        &self,
        workspace_id: &str,
        session_id: &str,
        budget_cents: Option<u64>,
        metadata: Option<BTreeMap<String, Option<String>>>,
        max_keys: usize,
    ) -> Result<()> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                if let Some(cents) = budget_cents {
                    tx.set_budget(&key, cents)?;
                }
                if let Some(changes) = metadata {
                    let mut current: BTreeMap<String, String> = tx
                        .metadata(&key)?
                        .and_then(|m| serde_json::from_str(&m).ok())
                        .unwrap_or_default();
                    for (k, v) in changes {
                        match v {
                            Some(v) => current.insert(k, v),
                            None => current.remove(&k),
                        };
                    }
                    if current.len() > max_keys {
                        return Err(Error::invalid(format!("metadata: at most {max_keys} keys")));
                    }
                    let doc = if current.is_empty() {
                        None
                    } else {
                        Some(
                            serde_json::to_string(&current)
                                .map_err(|e| Error::Internal(e.to_string()))?,
                        )
                    };
                    tx.set_metadata(&key, doc.as_deref())?;
                }
                Ok(())
            })
            .await
    }

    /// Stops a session's work for good: records `interrupt_requested` and who stopped it, drops
    /// every queued input, and — when no turn runs — ends a waiting session `interrupted` and
    /// idles a paused Job's machine (`plan`), with what `link` records; the session's key, or
    /// `None` (nothing written) when the machine moved since `plan` was read.
    pub async fn stop(
        &self,
        workspace_id: &str,
        session_id: &str,
        by: &str,
        plan: StopPlan,
        link: StopLink,
    ) -> Result<Option<SessionKey>> {
        let (ws, id, by) = (
            workspace_id.to_owned(),
            session_id.to_owned(),
            by.to_owned(),
        );
        self.store
            .write(move |tx| {
                let key = tx.session_key(&ws, &id)?;
                // Ordered with the inputs that race it by the session's row (`store::intake`).
                tx.lock(super::RowLock::Session(key.pk))?;
                let row = tx.session_row(&key)?;
                if !row.turn_active && row.machine_state != plan.machine_read {
                    return Ok(None);
                }
                tx.append(
                    &key,
                    &Event::InterruptRequested {
                        requested_at: clock::rfc3339(tx.now),
                    },
                )?;
                tx.set_stopped(&key, &by)?;
                for input in tx.pending_inputs(&key)? {
                    tx.remove_input(&key, input.seq)?;
                }
                tx.refresh_follow_up_queue(&key)?;
                if !row.turn_active {
                    if let Some(m) = &plan.idle {
                        tx.set_json_column(&key, super::JsonColumn::Machine, Some(&m.projection))?;
                        tx.append(
                            &key,
                            &Event::StateMachine {
                                state_machine: m.state.clone(),
                            },
                        )?;
                    }
                    if matches!(
                        row.turn_status,
                        TurnStatus::Running | TurnStatus::Ask | TurnStatus::Sleep
                    ) {
                        tx.set_turn(&key, TurnStatus::Interrupted)?;
                    }
                }
                match &link {
                    StopLink::None => {}
                    StopLink::TaskFinal { status, reason } => {
                        tx.set_task_final_status(&key, &ws, *status, reason)?;
                        // The seed's system codes are a closed set, so the status is said in
                        // the message.
                        tx.append(
                            &key,
                            &Event::System {
                                level: Level::Info,
                                message: format!("task {}: {reason}", status.name()),
                                metadata: None,
                            },
                        )?;
                    }
                }
                Ok(Some(key))
            })
            .await
    }
}
