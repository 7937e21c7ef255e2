//! Submitting inputs: a session created with its first events and its search row, a message, an
//! answer, a post to an agent's default session. Each is one store method doing the whole unit
//! of work — the idempotency check and record, the events, the search row, the queue and the
//! derived projection fields — in one transaction. The caller (the sessions core) has decided
//! everything that does not depend on what the transaction reads: where the session goes, its
//! title, its machine, what the engine is shown first.

use super::claims::{ClaimedTurn, StartNow, claim_at_submission};
use super::inputs::Retry;
use super::projections::TurnStatus;
use super::sessions::{Author, NewImage};
use super::{NewInput, NewRecordFacts, NewSession, SessionKey, SessionRow, Store, Tx};
use crate::clock;
use crate::error::{Error, Result};
use crate::timeline::{AttachmentRef, Behavior, Event, InputKind, Tier};

/// How a session continues another (a Session record's `parent.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentKind {
    Continuation,
    /// Closes the parent in the transaction that creates its successor.
    Handoff,
    Resume,
    /// A copy of the parent's timeline up to one of its events (`store::fork`); made only by the
    /// fork routes, never named in a create.
    Fork,
}

impl ParentKind {
    pub fn parse(s: &str) -> Option<ParentKind> {
        match s {
            "continuation" => Some(ParentKind::Continuation),
            "handoff" => Some(ParentKind::Handoff),
            "resume" => Some(ParentKind::Resume),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ParentKind::Continuation => "continuation",
            ParentKind::Handoff => "handoff",
            ParentKind::Resume => "resume",
            ParentKind::Fork => "fork",
        }
    }
}

/// A prompt as submitted (a first prompt or a message).
#[derive(Debug, Clone)]
pub struct NewPrompt {
    pub text: String,
    pub behavior: Behavior,
    /// An explicit tier: a message's becomes the session's (R21/R22).
    pub tier: Option<Tier>,
    pub author: Author,
    pub retry: Option<Retry>,
    pub images: Vec<NewImage>,
    pub attachments: Vec<AttachmentRef>,
    /// What a message does when the session's turn is running (`store::busy`).
    pub when_busy: super::busy::WhenBusy,
}

/// A session's machine as it starts: its state and the projection of it, JSON.
#[derive(Debug, Clone)]
pub struct NewMachine {
    pub definition: String,
    pub state: String,
    pub projection: String,
}

/// Where a new session goes and what it starts with.
#[derive(Debug, Clone, Default)]
pub struct SessionPlan {
    /// The session's id when the caller chose one (else a new one).
    pub id: Option<String>,
    pub workspace_id: String,
    pub agent_id: String,
    pub user_id: String,
    pub title: String,
    pub cwd: Option<String>,
    /// The session whose tools made this one; checked again in the write (it may be gone).
    pub created_by: Option<String>,
    pub tier: Option<Tier>,
    /// `TurnMode` JSON; `None` is `"agent"` (or the machine's definition when there is one).
    pub mode: Option<String>,
    pub machine: Option<NewMachine>,
    /// Provenance from the creator's credential: `source`, `attribution.type`, `.id`.
    pub source: &'static str,
    pub attribution_type: Option<&'static str>,
    pub attribution_id: Option<String>,
    /// The webhook delivery that started the session, if one did (the record's `webhook_type`,
    /// `webhook_id` and `attribution.user`).
    pub webhook: Option<super::record::WebhookFacts>,
    /// Bind the new session as the agent's default (a first default-alias message).
    pub bind_default: bool,
    /// Record facts: metadata (JSON object), a budget (0: none), the session it comes from.
    pub metadata: Option<String>,
    pub budget_cents: u64,
    pub parent: Option<(ParentKind, String)>,
    /// Shown to the engine before the first prompt (what a lineage carries over).
    pub context: Option<String>,
    /// An `agent_message` before the first prompt (an agent's greeting).
    pub agent_first_message: Option<String>,
}

/// A session another API family opens, with its record of it (see [`Submissions::open`]).
pub struct Opening {
    pub plan: SessionPlan,
    /// The first message; `None` opens the session waiting for one (`turnStatus` `complete`).
    pub first: Option<NewPrompt>,
    /// A title that stays (a task's name).
    pub manual_title: Option<String>,
    /// An engine configuration (JSON) the session runs with instead of its agent's.
    pub engine: Option<String>,
}

/// Who a schedule runs as: checked to still belong to the workspace when a run opens.
#[derive(Debug, Clone)]
pub enum ScheduleCreator {
    User(String),
    ServiceAccount(String),
}

/// The schedule as a run moves it on, from the row as the transaction reads it and the
/// transaction's time; an error refuses the run (nothing is created). Shared, so that a unit of
/// work run again (PostgreSQL, after a lost lock race) moves the schedule from what it reads then.
pub type ScheduleAdvance = std::sync::Arc<
    dyn Fn(super::schedules::ScheduleRow, i64) -> Result<super::schedules::ScheduleRow>
        + Send
        + Sync,
>;

/// What another API family records about a session it opens, in the same transaction.
#[derive(Clone)]
pub enum OpenLink {
    /// An agent platform task. With a `name`, a task of that name is found instead of created
    /// (refused when it is another agent's or deployment's; its params replaced when given).
    AgentexTask {
        name: Option<String>,
        params: Option<String>,
        task_metadata: Option<String>,
        agent_id: String,
        deployment_id: Option<String>,
    },
    /// A schedule's run: the task it opens and the record of the run, while its creator still
    /// belongs to the workspace.
    ScheduleRun {
        schedule_id: String,
        creator: ScheduleCreator,
        advance: ScheduleAdvance,
        task_name: String,
        task_params: Option<String>,
        task_metadata: String,
        run: super::schedules::ScheduleRunRow,
    },
}

/// What [`Submissions::open`] did.
pub enum Open {
    /// A task of that name existed (as it was before its params were replaced).
    Found(super::agentex::TaskRow),
    /// A new session, the task it is (for the agent platform API) and its first message's seq.
    Created {
        key: SessionKey,
        task: Option<super::agentex::TaskRow>,
        first_seq: Option<u64>,
    },
}

/// What a submission did: the session, the input's seq, and whether it was written now (false
/// for a retried `clientRequestId`).
#[derive(Debug, Clone)]
pub struct Submission {
    pub key: SessionKey,
    pub seq: u64,
    pub fresh: bool,
    /// A turn was running when the input arrived.
    pub active: bool,
    /// The input made the session (a default-alias post that created it).
    pub created: bool,
    /// The generation of the running turn this input asked to stop (busy policy `interrupt`).
    pub stops: Option<u64>,
    /// This unit claimed the session's turn and handed it to the runner (see [`StartNow`]).
    pub started: bool,
    /// The turn claimed, on its way from the unit to [`StartNow::hand_over`].
    claimed: Option<ClaimedTurn>,
}

impl Submission {
    fn replayed(key: SessionKey, seq: u64) -> Submission {
        Submission {
            fresh: false,
            ..Submission::added(key, seq, false, None, None)
        }
    }

    /// An input written now to the session it made, with the turn its unit claimed.
    fn created(key: SessionKey, seq: u64, claimed: Option<ClaimedTurn>) -> Submission {
        Submission {
            created: true,
            ..Submission::added(key, seq, false, None, claimed)
        }
    }

    /// An input written now to an existing session: whether a turn was `active`, the turn it
    /// `stops`, the turn its unit claimed.
    fn added(
        key: SessionKey,
        seq: u64,
        active: bool,
        stops: Option<u64>,
        claimed: Option<ClaimedTurn>,
    ) -> Submission {
        Submission {
            key,
            seq,
            fresh: true,
            active,
            created: false,
            stops,
            started: false,
            claimed,
        }
    }
}

/// A unit's answer that carries a [`Submission`] (with what a family linked, or alone).
trait Submits {
    fn submission(&mut self) -> &mut Submission;
}

impl Submits for Submission {
    fn submission(&mut self) -> &mut Submission {
        self
    }
}

impl<T> Submits for (Submission, T) {
    fn submission(&mut self) -> &mut Submission {
        &mut self.0
    }
}

/// What another API family records about an input in the input's transaction.
#[derive(Debug, Clone)]
pub enum InputLink {
    None,
    /// The agent platform API's `event/send`: an event of `agent_id` with the content it
    /// delivered.
    AgentexEvent {
        agent_id: String,
        content: String,
    },
}

/// What an [`InputLink`] recorded.
#[derive(Debug, Clone)]
pub enum Linked {
    None,
    AgentexEvent(super::agentex::EventRow),
}

impl Tx<'_> {
    /// After an input to a session whose row still shows what it showed before: the turn
    /// claimed with `start`, when no turn is `active` (the claim's one `UPDATE` of the row shows
    /// the session running: the input's own would be a second); or, when none could be claimed,
    /// the session shown running for the runner to claim later. Without `start` the input's
    /// unit has shown it already. `read` is the row as the input's unit read it, handed to the
    /// claim (see [`AddedMessage::unchanged`]). When the claim finds nothing to run, the row is
    /// read again to show the session running (rarely: the input just queued may run), rather
    /// than a copy of it kept for that case on every message.
    fn start_or_show(
        &mut self,
        key: &SessionKey,
        start: Option<&StartNow>,
        active: bool,
        read: Option<SessionRow>,
    ) -> Result<Option<ClaimedTurn>> {
        if start.is_none() || active {
            return Ok(None);
        }
        if let Some(claimed) = claim_at_submission(self, key, start, read)? {
            return Ok(Some(claimed));
        }
        let row = self.session_row(key)?;
        self.show_turn(key, &row, TurnStatus::Running)?;
        Ok(None)
    }

    fn link_input(&mut self, key: &SessionKey, seq: u64, link: &InputLink) -> Result<Linked> {
        match link {
            InputLink::None => Ok(Linked::None),
            InputLink::AgentexEvent { agent_id, content } => Ok(Linked::AgentexEvent(
                self.insert_agentex_event(key, agent_id, Some(seq), Some(content))?,
            )),
        }
    }

    /// Inserts a session's row (with its machine, if any) and its `session_created` event.
    pub(crate) fn insert_session_row(
        &mut self,
        plan: &SessionPlan,
        prompt: &str,
        client_request_id: Option<String>,
    ) -> Result<SessionKey> {
        let id = plan.id.clone().unwrap_or_else(crate::ids::new_id);
        let definition = plan.machine.as_ref().map(|m| m.definition.as_str());
        let key = self.insert_session(&NewSession {
            id: &id,
            workspace_id: &plan.workspace_id,
            agent_id: &plan.agent_id,
            user_id: &plan.user_id,
            title: &plan.title,
            cwd: plan.cwd.as_deref(),
            created_by_session_id: plan.created_by.as_deref(),
            tier: plan.tier,
            mode: definition.or(plan.mode.as_deref()).unwrap_or("\"agent\""),
            requested_machine: definition,
            source: plan.source,
            attribution_type: plan.attribution_type,
            attribution_id: plan.attribution_id.as_deref(),
        })?;
        if let Some(w) = &plan.webhook {
            self.set_webhook_facts(&key, w)?;
        }
        if let Some(m) = &plan.machine {
            self.set_json_column(&key, super::JsonColumn::MachineState, Some(&m.state))?;
            self.set_json_column(&key, super::JsonColumn::Machine, Some(&m.projection))?;
        }
        if plan.bind_default {
            self.set_default(&plan.agent_id, Some(&id))?;
        }
        self.append(
            &key,
            &Event::SessionCreated {
                prompt: prompt.to_owned(),
                created_at: clock::rfc3339(self.now),
                client_request_id,
            },
        )?;
        Ok(key)
    }

    /// Inserts a session with its `session_created`, optional `agent_message` and first
    /// `prompt_submitted`; the key and the prompt's seq.
    pub(crate) fn insert_new_session(
        &mut self,
        plan: &SessionPlan,
        first: &NewPrompt,
    ) -> Result<(SessionKey, u64)> {
        let key = self.insert_session_row(
            plan,
            &first.text,
            first.retry.as_ref().map(|r| r.client_request_id.clone()),
        )?;
        if plan.metadata.is_some() || plan.budget_cents > 0 || plan.parent.is_some() {
            self.set_record_facts(
                &key,
                &NewRecordFacts {
                    metadata: plan.metadata.as_deref(),
                    budget_cents: plan.budget_cents,
                    parent_kind: plan.parent.as_ref().map(|(kind, _)| kind.as_str()),
                    parent_session_id: plan.parent.as_ref().map(|(_, id)| id.as_str()),
                },
            )?;
        }
        if let Some(message) = plan.agent_first_message.as_ref().filter(|m| !m.is_empty()) {
            self.append(
                &key,
                &Event::AgentMessage {
                    message: message.clone(),
                    created_at: clock::rfc3339(self.now),
                },
            )?;
        }
        let seq = self.append_prompt(
            &plan.workspace_id,
            &key,
            first,
            plan.context.as_deref(),
            InputKind::Initial,
            plan.tier,
        )?;
        Ok((key, seq))
    }

    /// Appends a message to an existing session ([`AddedMessage`]). With `show`, a session with
    /// no turn running is shown running (the runner claims its turn next); without, the caller
    /// claims the turn or shows it ([`Tx::start_or_show`]).
    pub(crate) fn add_message(
        &mut self,
        workspace_id: &str,
        key: &SessionKey,
        m: &NewPrompt,
        show: bool,
    ) -> Result<AddedMessage> {
        self.takes_input(key)?;
        let mut row = self.session_row(key)?;
        let (instead, stops) = self.when_busy(key, &row, m.when_busy)?;
        let instead = instead.map(|behavior| NewPrompt {
            behavior,
            ..m.clone()
        });
        let m = instead.as_ref().unwrap_or(m);
        // R21/R22: an explicit tier becomes sticky; the input keeps the tier in force now.
        if let Some(t) = m.tier {
            self.set_tier(key, t)?;
            row.tier = Some(t);
        }
        let tier = row.tier;
        let seq = self.append_prompt(workspace_id, key, m, None, InputKind::Message, tier)?;
        let active = row.turn_active;
        if !active {
            if show {
                self.show_turn(key, &row, TurnStatus::Running)?;
            }
        } else if m.behavior == Behavior::FollowUp {
            self.refresh_follow_up_queue(key)?;
        }
        Ok(AddedMessage {
            seq,
            active,
            stops,
            unchanged: (!active && !show).then_some(row),
        })
    }

    /// Appends `prompt_submitted`, indexes the prompt, queues it for the runner (after
    /// `context`, what the engine is shown first) and remembers the retry key.
    fn append_prompt(
        &mut self,
        workspace_id: &str,
        key: &SessionKey,
        p: &NewPrompt,
        context: Option<&str>,
        kind: InputKind,
        tier: Option<Tier>,
    ) -> Result<u64> {
        let sender = self.sender_of(workspace_id, &p.author)?;
        let stored = self.store_images(key, &p.images)?;
        let seq = self.append(
            key,
            &Event::PromptSubmitted {
                prompt: p.text.clone(),
                input_kind: kind,
                behavior: p.behavior,
                sender,
                client_request_id: p.retry.as_ref().map(|r| r.client_request_id.clone()),
                images: stored,
                attachments: p.attachments.clone(),
            },
        )?;
        self.index_prompt(key, seq, &p.text)?;
        let text = match context {
            Some(context) => format!("{context}{}", p.text),
            None => p.text.clone(),
        };
        self.enqueue_input(
            key,
            &NewInput {
                seq,
                kind: match kind {
                    InputKind::Initial => super::QueueKind::Initial,
                    InputKind::Message => super::QueueKind::Message,
                },
                behavior: p.behavior,
                tier,
                text: &text,
                images: None,
                not_before: 0,
            },
        )?;
        self.remember(p.retry.as_ref(), key, seq)?;
        Ok(seq)
    }
}

/// What [`Tx::add_message`] did.
pub(crate) struct AddedMessage {
    pub seq: u64,
    /// A turn was running.
    pub active: bool,
    /// The generation of the running turn the message asked to stop.
    pub stops: Option<u64>,
    /// The session's row as the message read it, when nothing of the message has rewritten it
    /// but the tier, which the row then carries (no turn running, and not shown running): what
    /// a claim in the same unit would read again.
    pub unchanged: Option<SessionRow>,
}

/// Submissions of inputs, each one unit of work.
#[derive(Clone)]
pub struct Submissions<'a> {
    pub(super) store: &'a Store,
    /// A free turn slot: a fresh input to a session with no turn active starts its turn in the
    /// same unit.
    start: Option<StartNow>,
}

impl Store {
    /// Submitting inputs: creates, messages, answers, default-alias posts.
    pub fn submit(&self) -> Submissions<'_> {
        Submissions {
            store: self,
            start: None,
        }
    }
}

impl Submissions<'_> {
    /// The same submissions, each of which claims its session's turn when it may start now
    /// (`create`, `message`, `default_message`, `answer`; [`Submission::started`]).
    pub fn starting(self, start: Option<StartNow>) -> Self {
        Submissions { start, ..self }
    }

    /// Runs a submission's unit. With a turn slot held, the unit runs in a task of its own, so
    /// that a turn it claimed reaches the runner once committed even if the request that
    /// submitted is dropped meanwhile (a client that went away).
    async fn unit<T, F>(&self, job: F) -> Result<T>
    where
        F: FnOnce(&mut Tx<'_>) -> Result<T> + Clone + Send + 'static,
        T: Submits + Send + 'static,
    {
        let Some(start) = self.start.clone() else {
            return self.store.write(job).await;
        };
        let store = self.store.clone();
        // The request's id and span are the task's: the new task carries them on, so that the
        // input keeps the id and what the unit logs stays in the request's span.
        let request_id = crate::request_id::current();
        let unit = tracing::Instrument::in_current_span(async move {
            let mut done = store.write(job).await?;
            let sub = done.submission();
            if let Some(turn) = sub.claimed.take() {
                sub.started = true;
                (start.hand_over)(sub.key.clone(), turn);
            }
            Ok(done)
        });
        tokio::spawn(async move {
            match request_id {
                Some(id) => crate::request_id::scope(id, unit).await,
                None => unit.await,
            }
        })
        .await
        .map_err(|e| Error::Internal(format!("a submission's unit did not finish: {e}")))?
    }
}

impl Submissions<'_> {
    /// Creates a session from its first prompt; a handoff closes the session it comes from in
    /// the same transaction.
    pub async fn create(&self, plan: SessionPlan, first: NewPrompt) -> Result<Submission> {
        let start = self.start.clone();
        self.unit(move |tx| {
            if let Some(r) = &first.retry
                && let Some((key, seq)) = tx.replayed(r)?
            {
                return Ok(Submission::replayed(key, seq));
            }
            if let Some(parent) = &plan.created_by {
                // The parent may have been deleted since it was read.
                tx.session_key(&plan.workspace_id, parent)?;
            }
            // So may the session this one comes from.
            let from = match &plan.parent {
                Some((kind, id)) => Some((*kind, tx.session_key(&plan.workspace_id, id)?)),
                None => None,
            };
            let (key, seq) = tx.insert_new_session(&plan, &first)?;
            if let Some((ParentKind::Handoff, parent_key)) = &from {
                tx.close_session(parent_key, &key.id)?;
            }
            let claimed = claim_at_submission(tx, &key, start.as_ref(), None)?;
            Ok(Submission::created(key, seq, claimed))
        })
        .await
    }

    /// Sends a message (steer or follow-up) to a session, with what `link` records beside it
    /// (`None` for a retry, which writes nothing).
    pub async fn message(
        &self,
        workspace_id: &str,
        session_id: &str,
        m: NewPrompt,
        link: InputLink,
    ) -> Result<(Submission, Option<Linked>)> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        let start = self.start.clone();
        self.unit(move |tx| {
            if let Some(r) = &m.retry
                && let Some((key, seq)) = tx.replayed(r)?
            {
                return Ok((Submission::replayed(key, seq), None));
            }
            let key = tx.session_key_to_append(&ws, &id)?;
            let added = tx.add_message(&ws, &key, &m, start.is_none())?;
            let linked = tx.link_input(&key, added.seq, &link)?;
            let claimed = tx.start_or_show(&key, start.as_ref(), added.active, added.unchanged)?;
            Ok((
                Submission::added(key, added.seq, added.active, added.stops, claimed),
                Some(linked),
            ))
        })
        .await
    }

    /// Posts to an agent's default session: the first message creates and binds it (with
    /// `plan`) in one transaction, so two concurrent first messages make exactly one session;
    /// later ones message it.
    pub async fn default_message(&self, plan: SessionPlan, m: NewPrompt) -> Result<Submission> {
        let start = self.start.clone();
        self.unit(move |tx| {
            if let Some(r) = &m.retry
                && let Some((key, seq)) = tx.replayed(r)?
            {
                return Ok(Submission::replayed(key, seq));
            }
            // Concurrent first messages (other processes, on PostgreSQL) wait here, then
            // find the default the first one bound.
            tx.lock(super::RowLock::Agent(&plan.agent_id))?;
            if let Some(sid) = tx.default_session(&plan.agent_id)? {
                let key = tx.session_key_to_append(&plan.workspace_id, &sid)?;
                let added = tx.add_message(&plan.workspace_id, &key, &m, start.is_none())?;
                let claimed =
                    tx.start_or_show(&key, start.as_ref(), added.active, added.unchanged)?;
                return Ok(Submission::added(
                    key,
                    added.seq,
                    added.active,
                    added.stops,
                    claimed,
                ));
            }
            let (key, seq) = tx.insert_new_session(&plan, &m)?;
            let claimed = claim_at_submission(tx, &key, start.as_ref(), None)?;
            Ok(Submission::created(key, seq, claimed))
        })
        .await
    }

    /// Answers a session that is asking (409 `not_asking` otherwise, with nothing written),
    /// with what `link` records beside it.
    pub async fn answer(
        &self,
        workspace_id: &str,
        session_id: &str,
        a: NewPrompt,
        link: InputLink,
    ) -> Result<(Submission, Option<Linked>)> {
        let (ws, id) = (workspace_id.to_owned(), session_id.to_owned());
        let start = self.start.clone();
        self.unit(move |tx| {
            if let Some(r) = &a.retry
                && let Some((key, seq)) = tx.replayed(r)?
            {
                return Ok((Submission::replayed(key, seq), None));
            }
            let key = tx.session_key_to_append(&ws, &id)?;
            // A session that takes no input says why, asking or not.
            tx.takes_input(&key)?;
            let row = tx.session_row(&key)?;
            if row.turn_status != TurnStatus::Ask || row.turn_active {
                return Err(Error::NotAsking);
            }
            let sender = tx.sender_of(&ws, &a.author)?;
            let stored = tx.store_images(&key, &a.images)?;
            let seq = tx.append(
                &key,
                &Event::AnswerSubmitted {
                    answer: a.text.clone(),
                    sender,
                    client_request_id: a.retry.as_ref().map(|r| r.client_request_id.clone()),
                    images: stored,
                    attachments: a.attachments.clone(),
                },
            )?;
            // R20: answers resume with the session's persisted tier.
            tx.enqueue_input(
                &key,
                &NewInput {
                    seq,
                    kind: super::QueueKind::Answer,
                    behavior: Behavior::Steer,
                    tier: row.tier,
                    text: &a.text,
                    images: None,
                    not_before: 0,
                },
            )?;
            if start.is_none() {
                tx.set_turn(&key, TurnStatus::Running)?;
            }
            tx.remember(a.retry.as_ref(), &key, seq)?;
            let linked = tx.link_input(&key, seq, &link)?;
            let claimed = tx.start_or_show(&key, start.as_ref(), false, None)?;
            Ok((
                Submission::added(key, seq, false, None, claimed),
                Some(linked),
            ))
        })
        .await
    }

    /// Opens a session for another API family with its record of it (`link`), in one
    /// transaction: two racing get-or-creates of one task name make one session, and a refused
    /// check creates nothing.
    pub async fn open(&self, o: Opening, link: OpenLink) -> Result<Open> {
        self.store
            .write(move |tx| {
                let ws = o.plan.workspace_id.clone();
                if let OpenLink::AgentexTask {
                    name: Some(name),
                    params,
                    agent_id,
                    deployment_id,
                    ..
                } = &link
                    && let Some(found) = tx.task(&ws, super::agentex::TaskKey::Name(name))?
                {
                    // Checked before anything is written: a refused call changes nothing.
                    found.check_owner(agent_id, deployment_id.as_deref())?;
                    if let Some(p) = params {
                        tx.put_task_fields(
                            &found.key(),
                            &ws,
                            &super::agentex::TaskFields {
                                params: Some(p),
                                ..Default::default()
                            },
                        )?;
                    }
                    return Ok(Open::Found(found));
                }
                let (key, first_seq) = match &o.first {
                    Some(first) => {
                        let (key, seq) = tx.insert_new_session(&o.plan, first)?;
                        (key, Some(seq))
                    }
                    None => {
                        let key = tx.insert_session_row(&o.plan, "", None)?;
                        tx.set_turn(&key, TurnStatus::Complete)?;
                        (key, None)
                    }
                };
                if let Some(title) = &o.manual_title {
                    tx.set_manual_title(&key, title)?;
                }
                if let Some(engine) = &o.engine {
                    tx.pin_session_engine(&key, engine)?;
                }
                let task = match link {
                    OpenLink::AgentexTask {
                        name,
                        params,
                        task_metadata,
                        deployment_id,
                        ..
                    } => {
                        tx.put_task_fields(
                            &key,
                            &ws,
                            &super::agentex::TaskFields {
                                name: name.as_deref(),
                                params: params.as_deref(),
                                task_metadata: task_metadata.as_deref(),
                                deployment_id: deployment_id.as_deref(),
                            },
                        )?;
                        Some(tx.task_by_pk(key.pk)?.ok_or(Error::NotFound)?)
                    }
                    OpenLink::ScheduleRun {
                        schedule_id,
                        creator,
                        advance,
                        task_name,
                        task_params,
                        task_metadata,
                        run,
                    } => {
                        let active = match &creator {
                            ScheduleCreator::User(user) => tx.is_member(user, &ws)?,
                            ScheduleCreator::ServiceAccount(app) => tx.app_exists(app, &ws)?,
                        };
                        if !active {
                            return Err(Error::Forbidden(
                                "the schedule's creator no longer belongs to its workspace".into(),
                            ));
                        }
                        let Some(current) = tx.schedule_for_update(&schedule_id)? else {
                            return Err(Error::NotFound);
                        };
                        let moved = advance(current, tx.now)?;
                        tx.record_schedule_action(&moved)?;
                        tx.put_task_fields(
                            &key,
                            &ws,
                            &super::agentex::TaskFields {
                                name: Some(&task_name),
                                params: task_params.as_deref(),
                                task_metadata: Some(&task_metadata),
                                deployment_id: None,
                            },
                        )?;
                        tx.record_schedule_run(&key, &run)?;
                        None
                    }
                };
                Ok(Open::Created {
                    key,
                    task,
                    first_seq,
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Lease;
    use crate::claims::tests::NoMachine;

    /// A store with one session, the session's workspace, and a turn slot whose claimed turns
    /// arrive on the receiver.
    async fn with_slot(
        dir: &std::path::Path,
    ) -> (
        crate::Store,
        SessionKey,
        String,
        StartNow,
        tokio::sync::mpsc::UnboundedReceiver<(i64, ClaimedTurn)>,
    ) {
        let (store, key) = crate::writer::tests::store_with_session(dir).await;
        let ws = store
            .projections()
            .session_by_pk(key.pk)
            .await
            .expect("read")
            .expect("the session")
            .workspace_id;
        let (handed, taken) = tokio::sync::mpsc::unbounded_channel();
        let start = StartNow {
            lease: Lease {
                owner: "test".into(),
                ms: 60_000,
            },
            machines: Arc::new(NoMachine),
            hand_over: Arc::new(move |key: SessionKey, turn: ClaimedTurn| {
                let _ = handed.send((key.pk, turn));
            }),
        };
        (store, key, ws, start, taken)
    }

    /// A person's message of `text`.
    fn prompt(text: &str) -> NewPrompt {
        NewPrompt {
            text: text.to_owned(),
            behavior: Behavior::Steer,
            tier: None,
            author: crate::sessions::Author {
                sender: crate::timeline::Sender::User {
                    user_id: "u".into(),
                },
                source_session_id: None,
            },
            retry: None,
            images: Vec::new(),
            attachments: Vec::new(),
            when_busy: Default::default(),
        }
    }

    /// A message submitted with a turn slot held claims its idle session's turn in its own unit
    /// and hands it over once committed: the turn takes that very input with the id of the
    /// request that sent it, and the row shows it running. A message to the session while that
    /// turn runs claims nothing.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_submission_with_a_slot_starts_an_idle_sessions_turn_in_its_own_unit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key, ws, start, mut taken) = with_slot(dir.path()).await;
        let submit = || store.submit().starting(Some(start.clone()));
        // Sent by a request whose id the turn carries on (to the engine's calls).
        let (first, _) = crate::request_id::scope(
            "req-1".to_owned(),
            submit().message(&ws, &key.id, prompt("one"), InputLink::None),
        )
        .await
        .expect("first message");
        assert!(
            first.started,
            "the idle session's turn started with the message"
        );
        let (pk, turn) = taken.try_recv().expect("the claimed turn was handed over");
        assert_eq!(pk, key.pk);
        assert_eq!(turn.input_seq, Some(first.seq), "the turn took this input");
        assert_eq!(turn.text, "one");
        assert_eq!(turn.request_id, "req-1", "the turn keeps the request's id");
        assert_eq!(
            turn.last_seq,
            first.seq + 1,
            "turn_started follows the prompt"
        );
        let row = store.projections().session_by_pk(key.pk).await;
        assert!(
            matches!(row, Ok(Some(r)) if r.turn_active && r.turn_status == TurnStatus::Running),
            "the turn is active, and the session shows it running"
        );

        let (second, _) = submit()
            .message(&ws, &key.id, prompt("two"), InputLink::None)
            .await
            .expect("second message");
        assert!(
            second.active && !second.started,
            "a running turn is not claimed again"
        );
        assert!(taken.try_recv().is_err(), "nothing more was handed over");
        store.close();
    }

    /// A message that sets a tier and claims its idle session's turn in the same unit: the claim
    /// takes the row the message read, with the new tier, so the turn runs with it and the row
    /// keeps it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_claim_in_the_messages_unit_sees_the_tier_the_message_set() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key, ws, start, mut taken) = with_slot(dir.path()).await;
        let economy = NewPrompt {
            tier: Some(Tier::Economy),
            ..prompt("cheap")
        };
        let (first, _) = store
            .submit()
            .starting(Some(start.clone()))
            .message(&ws, &key.id, economy, InputLink::None)
            .await
            .expect("message with a tier");
        assert!(first.started);
        let (_, turn) = taken.try_recv().expect("the claimed turn was handed over");
        assert_eq!(
            turn.tier,
            Some(Tier::Economy),
            "the turn runs with the new tier"
        );
        let row = store.projections().session_by_pk(key.pk).await;
        assert!(
            matches!(&row, Ok(Some(r)) if r.turn_active && r.tier == Some(Tier::Economy)),
            "the row keeps the tier and shows the turn: {row:?}"
        );
        store.close();
    }

    /// A claimed turn reaches the runner even when the request that submitted it is dropped
    /// before its unit commits (a client that went away): nobody else would ever run it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_turn_claimed_for_a_dropped_request_is_still_handed_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key, ws, start, mut taken) = with_slot(dir.path()).await;
        let submit = store.submit().starting(Some(start));
        {
            // Polled once (the unit is then on its way to the writer), and dropped.
            let mut request =
                std::pin::pin!(submit.message(&ws, &key.id, prompt("gone"), InputLink::None));
            let first = std::future::poll_fn(|cx| {
                std::task::Poll::Ready(std::future::Future::poll(request.as_mut(), cx))
            })
            .await;
            assert!(
                first.is_pending(),
                "the request was dropped before its answer"
            );
        }
        let (pk, turn) = tokio::time::timeout(std::time::Duration::from_secs(30), taken.recv())
            .await
            .expect("handed over within 30 s")
            .expect("a turn");
        assert_eq!(pk, key.pk);
        assert_eq!(
            turn.text, "gone",
            "the turn took the dropped request's input"
        );
        store.close();
    }
}
