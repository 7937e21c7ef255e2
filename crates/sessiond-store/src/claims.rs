//! A turn's bounds: the claim that starts it and the terminals that end it (its own, or the one
//! written for a turn that was cut off or lost with its process). Each is one unit of work on the
//! store's writer, behind [`TurnStore`].
//!
//! What these units decide from what they read (the queue, the session row, the running tasks,
//! the lease) is decided here. The one rule that is not the store's — how a session's state
//! machine moves — comes in as a [`MachineRules`] the runner implements: the store hands it the
//! stored machine and writes what it answers, inside the same transaction, without knowing what a
//! machine is. Everything else the caller decides before the transaction (the terminal event, the
//! usage estimate, the notice of a lost turn) arrives as data.

use std::sync::Arc;

use serde_json::{Value, json};

use super::intake::Closure;
use super::projections::{TurnStatus, shown_change};
use super::turns::{Fence, TurnStore};
use super::turns::{TurnEnd, usage_added};
use super::{Lease, NewInput, QueueKind, SessionKey, SessionRow, Tx};
use crate::error::{Error, Result};
use crate::timeline::{
    AgentStatus, AttachmentRef, Behavior, CompleteStatus, Event, StoredImageRef, Tier, TurnState,
    TurnStateStatus, Usage,
};

/// How the turn of a machine's state ended, from the machine's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepEnd {
    Completed,
    Failed,
    Interrupted,
    /// `ask` or `sleep`: the same state continues later.
    Paused,
}

/// A session's machine as stored: its state (`machine_state`) and its projection (`machine`),
/// both JSON.
#[derive(Debug, Clone, Copy)]
pub struct StoredMachine<'a> {
    pub state: &'a str,
    pub projection: Option<&'a str>,
}

/// A machine moved on: its new state and projection, and the prompt it runs next (at a claim,
/// the prompt of the state the turn runs; after a step, the next state's, queued as a `machine`
/// input).
#[derive(Debug, Clone)]
pub struct MachineMove {
    pub state: Value,
    pub projection: Value,
    pub prompt: Option<String>,
}

/// How a session's state machine moves, applied by the turn units to the machine they read
/// (the runner's rules; the store only stores what they answer). Each answer of `None` leaves the
/// machine as it is.
pub trait MachineRules: Send + Sync {
    /// A turn is claimed for an input of `input`: the machine moved into a running step, if this
    /// turn runs one.
    fn step_starts(
        &self,
        machine: StoredMachine<'_>,
        input: QueueKind,
        now: i64,
    ) -> Option<MachineMove>;

    /// The turn of a step ended (`wake_at`: it sleeps until then): the machine after it.
    fn step_ends(
        &self,
        machine: StoredMachine<'_>,
        end: StepEnd,
        result: Option<&str>,
        wake_at: Option<i64>,
        now: i64,
    ) -> Option<MachineMove>;

    /// Whether a step of the machine is running (a turn lost meanwhile ends it `interrupted`).
    fn step_running(&self, machine: StoredMachine<'_>) -> bool;
}

/// The runner's rules, shared by every unit that needs them.
pub type Machines = Arc<dyn MachineRules>;

/// A turn slot the runner holds free for a submission: the submission's unit then claims the
/// session's turn itself, in the transaction that records the input, when no turn is active.
/// The claim is the one a turn would otherwise make in a unit of its own right after this one
/// (same rules, same events); folding it in saves a unit on the writer and a round trip to the
/// runner before the turn starts.
#[derive(Clone)]
pub struct StartNow {
    pub lease: Lease,
    pub machines: Machines,
    /// Takes the turn once its claim is committed. Called whatever becomes of the request that
    /// submitted (see `Submissions::unit`): a claimed turn nobody runs would hold its session.
    pub hand_over: Arc<dyn Fn(SessionKey, ClaimedTurn) + Send + Sync>,
}

/// What a claim hands the turn it started.
#[derive(Debug, Clone)]
pub struct ClaimedTurn {
    pub generation: u64,
    pub kind: QueueKind,
    /// The prompt the turn runs (a machine's state's, when it runs one).
    pub text: String,
    pub tier: Option<Tier>,
    /// The working directory, relative to the drive (`None`: its root).
    pub cwd: Option<String>,
    /// `TurnMode` JSON.
    pub mode: String,
    /// What the engine stored to resume from (an answer or a wake continues the turn it paused).
    pub resume: Option<Value>,
    /// The input's seq, for inputs from outside (`/wait` observes them).
    pub input_seq: Option<u64>,
    /// The seq of the turn's `turn_started`.
    pub last_seq: u64,
    pub steers_waiting: bool,
    /// The turn runs a state of the session's machine.
    pub machine_step: bool,
    /// The engine configuration (JSON) the turn runs with.
    pub engine_config: String,
    pub workspace_id: String,
    pub workspace_slug: String,
    pub user_id: String,
    pub images: Vec<StoredImageRef>,
    pub attachments: Vec<AttachmentRef>,
    /// The session's budget is spent: the turn fails without calling the engine.
    pub budget_spent: Option<Error>,
    /// The request that sent the input (`X-Request-Id`), or a new id for the runner's own.
    pub request_id: String,
}

/// A turn's own terminal, as the runner made it.
#[derive(Debug, Clone)]
pub struct TurnTerminal {
    pub fence: Fence,
    /// Events the engine held for this write.
    pub held: Vec<Event>,
    /// Text an interrupted turn streamed and never said durably (stored as one more text step).
    pub partial: String,
    /// The runner's usage estimate for a turn whose engine recorded none: the notice that says
    /// so, the `usage` event and the usage added to the session's totals.
    pub estimate: Option<(Event, Event, Usage)>,
    /// The terminal event (`complete`, `ask`, `sleep`, `interrupted`).
    pub event: Event,
    pub status: TurnStatus,
    /// What the engine keeps to resume from (an `ask` or a `sleep`).
    pub engine_state: Option<String>,
    /// A `sleep`'s wake time: a `wake` input is queued for it.
    pub wake_at: Option<i64>,
    /// The turn ran a machine's state: how the step ended and its result.
    pub step: Option<(StepEnd, Option<String>)>,
}

/// Which turn a lost-turn terminal ends.
#[derive(Debug, Clone)]
pub enum LostTurn {
    /// The active turn, if the process with this runner id holds it (a process known to be gone).
    OwnedBy(String),
    /// The turn of this generation, cut off by this process.
    Cut(u64),
    /// Whatever turn is active (start-up recovery on a database no other process uses).
    Any,
    /// The active turn, if its lease ran out before this time (its process is gone).
    ExpiredBefore(i64),
}

/// The `interrupted` terminal of a turn that was cut off or lost.
#[derive(Debug, Clone)]
pub struct LostTerminal {
    pub key: SessionKey,
    pub turn: LostTurn,
    /// Text a cut-off turn streamed and did not store.
    pub partial: String,
    /// The notice that says why (a `system` event), before the terminal.
    pub notice: Event,
}

/// Where a session stands after a terminal: what the dispatcher should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// Another input may run now.
    pub more: bool,
    /// The earliest queued input that may only run later (a sleep's wake).
    pub next_due: Option<i64>,
}

/// A turn's state as `turn_started` and the terminals carry it.
pub fn turn_state(
    status: TurnStateStatus,
    mode: &str,
    agent_status: AgentStatus,
    messages: Vec<Value>,
    todos: Option<Vec<crate::timeline::Todo>>,
) -> TurnState {
    TurnState {
        status,
        mode: serde_json::from_str(mode).unwrap_or_else(|_| json!("agent")),
        agent: crate::timeline::AgentLoopState {
            status: agent_status,
            messages,
        },
        todos,
        follow_up_queue: None,
    }
}

impl TurnStore<'_> {
    /// Claims a turn for the session's oldest input that may run now: takes it off the queue
    /// (a message or an answer also takes a pending wake: it wakes the session early), marks it
    /// delivered, starts a step of the session's machine when the input continues one, appends
    /// `turn_started` and marks the session running. `None` when nothing may run or a turn is
    /// already active. A checked job: everything it can fail on is read before its first write.
    pub async fn claim(
        &self,
        key: &SessionKey,
        lease: Lease,
        machines: Machines,
    ) -> Result<Option<ClaimedTurn>> {
        let key = key.clone();
        self.store
            .write_checked(move |tx| claim(tx, &key, &lease, machines.as_ref(), None))
            .await
    }

    /// Writes a turn's own terminal (fenced by its generation, after its held events): the
    /// terminal event, the turn released, a sleep's wake queued, the machine moved on, the tasks
    /// still running stopped. A checked job: the fence is read before its first write.
    pub async fn finish(&self, terminal: TurnTerminal, machines: Machines) -> Result<Settled> {
        self.store
            .write_checked(move |tx| finish(tx, terminal, machines.as_ref()))
            .await
    }

    /// Writes the `interrupted` terminal of a turn that was cut off or lost; `None` when that
    /// turn already ended (by its process, or by another that found it first).
    pub async fn end_lost(
        &self,
        lost: LostTerminal,
        machines: Machines,
    ) -> Result<Option<Settled>> {
        self.store
            .write(move |tx| end_lost(tx, lost, machines.as_ref()))
            .await
    }
}

/// The claim a submission's unit makes when the runner holds a turn slot for it (`start`): the
/// same claim as [`TurnStore::claim`], in the transaction that records the input. `None` without
/// a slot, or when nothing may run now (a turn is active, or the input waits: the runner takes
/// it as it would have without the slot); its failure is the unit's, which then records
/// nothing. `read` is the session's row as the unit read it, when the unit refused a closed
/// session and nothing of it has rewritten the row since (a message's unit): the claim then
/// reads neither again.
pub(crate) fn claim_at_submission(
    tx: &mut Tx<'_>,
    key: &SessionKey,
    start: Option<&StartNow>,
    read: Option<SessionRow>,
) -> Result<Option<ClaimedTurn>> {
    match start {
        Some(s) => claim(tx, key, &s.lease, s.machines.as_ref(), read),
        None => Ok(None),
    }
}

/// How the tasks a turn leaves running end: `stopped` when the turn ended or was cut off, `lost`
/// when its process died.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unfinished {
    Stopped,
    Lost,
}

impl Unfinished {
    fn name(self) -> &'static str {
        match self {
            Unfinished::Stopped => "stopped",
            Unfinished::Lost => "lost",
        }
    }
}

/// The images and attachments an input's event carries; either is empty when absent or not as
/// sessiond writes it. The event is read into its two media fields alone: the rest of it (the
/// prompt's text) is skipped, not built into a value.
fn media_of(body: &str) -> (Vec<StoredImageRef>, Vec<AttachmentRef>) {
    #[derive(serde::Deserialize)]
    struct Media<'a> {
        #[serde(borrow, default)]
        images: Option<&'a serde_json::value::RawValue>,
        #[serde(borrow, default)]
        attachments: Option<&'a serde_json::value::RawValue>,
    }
    let Ok(media) = serde_json::from_str::<Media<'_>>(body) else {
        return Default::default();
    };
    fn field<T: serde::de::DeserializeOwned + Default>(
        raw: Option<&serde_json::value::RawValue>,
    ) -> T {
        raw.and_then(|r| serde_json::from_str(r.get()).ok())
            .unwrap_or_default()
    }
    (field(media.images), field(media.attachments))
}

fn stored_machine(row: &SessionRow) -> Option<StoredMachine<'_>> {
    Some(StoredMachine {
        state: row.machine_state.as_deref()?,
        projection: row.machine.as_deref(),
    })
}

/// Stores a machine's move: its state and projection, and a `state_machine` event.
fn save_machine(tx: &mut Tx<'_>, key: &SessionKey, m: &MachineMove) -> Result<u64> {
    tx.set_json_column(
        key,
        super::JsonColumn::MachineState,
        Some(&m.state.to_string()),
    )?;
    tx.set_json_column(
        key,
        super::JsonColumn::Machine,
        Some(&m.projection.to_string()),
    )?;
    tx.append(
        key,
        &Event::StateMachine {
            state_machine: m.state.clone(),
        },
    )
}

/// A delivery attempt of an input (`/wait` and the `/v2` record read it).
fn attempt(seq: u64, kind: QueueKind, now: i64) -> String {
    let kind = match kind {
        QueueKind::Initial => "initial_prompt",
        QueueKind::Answer => "answer",
        _ => "message",
    };
    json!({
        "attemptId": crate::ids::new_id(),
        "throughSeq": seq,
        "kind": kind,
        "createdAt": now,
    })
    .to_string()
}

fn claim(
    tx: &mut Tx<'_>,
    key: &SessionKey,
    lease: &Lease,
    machines: &dyn MachineRules,
    read: Option<SessionRow>,
) -> Result<Option<ClaimedTurn>> {
    // The queue, read once: the turn takes its oldest input that may run now, and what stays
    // queued makes the follow-up queue and tells whether steers wait.
    let mut pending = tx.pending_inputs(key)?;
    let Some(at) = pending.iter().position(|p| p.not_before <= tx.now) else {
        return Ok(None);
    };
    // A session closed for good runs no more turns, whatever is queued (`store::intake`); one
    // whose budget is spent starts its turn, which fails with `budget_hit`. A unit that hands
    // over the row it read had refused its input to a closed session (spent budget included).
    let (budget_spent, row) = match read {
        Some(row) => (None, row),
        None => {
            let closure = tx.drop_work_if_closed(key)?;
            if closure.as_ref().is_some_and(Closure::is_final) {
                return Ok(None);
            }
            (closure.map(|c| c.error()), tx.session_row(key)?)
        }
    };
    if row.turn_active {
        return Ok(None);
    }
    let input = pending.remove(at);
    let external = input.kind.is_external();
    let attempt = external.then(|| attempt(input.seq, input.kind, tx.now));
    let started = stored_machine(&row).and_then(|m| machines.step_starts(m, input.kind, tx.now));
    let machine = started.as_ref().map(|m| m.projection.to_string());
    // One write of the row, the job's last, starts the turn, marks the input delivered, shows
    // the session running and takes the counters of the events appended before it.
    let shown = shown_change(
        &row,
        machine.as_deref().or(row.machine.as_deref()),
        TurnStatus::Running,
    );
    // What the turn runs with, read before the first write (this is a checked job).
    let setup = tx.turn_setup(key.pk)?.ok_or(Error::NotFound)?;
    let request_id = tx
        .input_request_id(key, input.seq)?
        .unwrap_or_else(crate::ids::new_id);
    tx.remove_input(key, input.seq)?;
    // A message before the wake time wakes the session early.
    if input.kind != QueueKind::Wake && pending.iter().any(|p| p.kind == QueueKind::Wake) {
        tx.remove_inputs_of_kind(key, QueueKind::Wake)?;
        pending.retain(|p| p.kind != QueueKind::Wake);
    }
    let resume = match input.kind {
        QueueKind::Answer | QueueKind::Wake => tx
            .engine_state(key)?
            .and_then(|s| serde_json::from_str(&s).ok()),
        _ => None,
    };
    // Media travel on the input's event, not in the queue.
    let (images, attachments) = match external {
        true => tx
            .event_body(key.pk, input.seq)?
            .map(|b| media_of(&b))
            .unwrap_or_default(),
        false => Default::default(),
    };
    let mut text = input.text.clone();
    let machine_step = started.is_some();
    if let Some(m) = started {
        if let Some(prompt) = &m.prompt {
            text = prompt.clone();
        }
        save_machine(tx, key, &m)?;
    }
    let mut messages = Vec::new();
    if !text.is_empty() {
        messages.push(json!({"role": "user", "content": text}));
    }
    let state = turn_state(
        TurnStateStatus::Running,
        &row.mode,
        AgentStatus::Running,
        messages,
        None,
    );
    let started = tx.append(key, &Event::TurnStarted { state })?;
    // Every turn names its input (the runner's own wakes and machine steps too): that is the run
    // a turn is on `/v2`.
    tx.record_input_turn(key, input.seq, started)?;
    tx.refresh_follow_up_queue_from(key, &pending, row.follow_up_queue.as_deref())?;
    // The row was read under the job's lock (PostgreSQL) or the single writer (SQLite) with no
    // turn active, so this cannot find one.
    let delivered = attempt.as_deref().map(|a| (input.seq, a));
    let generation = tx
        .claim_turn(key, lease, delivered, shown)?
        .ok_or_else(|| Error::Internal("a turn became active during its claim".to_owned()))?;
    let steers_waiting = pending
        .iter()
        .any(|p| p.kind == QueueKind::Message && p.behavior == Behavior::Steer);
    Ok(Some(ClaimedTurn {
        generation,
        kind: input.kind,
        text,
        // The runner's own inputs (wakes, next states) run with the session's tier.
        tier: input.tier.or(row.tier),
        // A cwd set to the drive root is stored as `.`; engines see the root as no cwd.
        cwd: row.cwd.filter(|c| c != "."),
        mode: row.mode,
        resume,
        input_seq: external.then_some(input.seq),
        last_seq: started,
        steers_waiting,
        machine_step,
        // A pinned engine (a deployment preview's) wins over the agent's.
        engine_config: setup.engine_config.unwrap_or_else(|| "{}".to_owned()),
        workspace_slug: setup.workspace_slug,
        workspace_id: row.workspace_id,
        user_id: row.user_id,
        images,
        attachments,
        budget_spent,
        request_id,
    }))
}

/// The events that end a turn's loose threads, for the caller to append in this order: the text
/// an interrupted turn streamed after its last `text` step, as one more `text` step (so that what
/// the reader saw is not lost with the live preview), then one `task_settled` for every task
/// still running, which is marked settled here.
fn loose_ends(
    tx: &mut Tx<'_>,
    key: &SessionKey,
    partial: &str,
    end: Unfinished,
) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    if !partial.is_empty() {
        events.push(Event::Step {
            step: crate::timeline::Step::Text {
                text: partial.to_owned(),
            },
        });
    }
    let status = end.name();
    for (id, body) in tx.running_tasks(key)? {
        let mut task: Value = serde_json::from_str(&body).unwrap_or_else(|_| json!({}));
        task["status"] = json!(status);
        tx.put_task(key, &id, &task.to_string(), status)?;
        let mut settlement = json!({ "id": id, "status": status, "settledAt": tx.now });
        if end == Unfinished::Stopped {
            settlement["reason"] = json!("the turn ended before the task finished");
        }
        events.push(Event::TaskSettled { settlement });
    }
    Ok(events)
}

/// Queues one of the runner's own inputs (a wake, a machine's next state).
fn enqueue_internal(
    tx: &mut Tx<'_>,
    key: &SessionKey,
    seq: u64,
    kind: QueueKind,
    text: &str,
    not_before: i64,
) -> Result<()> {
    tx.enqueue_input(
        key,
        &NewInput {
            seq,
            kind,
            behavior: Behavior::Steer,
            tier: None,
            text,
            images: None,
            not_before,
        },
    )
}

/// Moves the session's machine after the turn of one of its states; queues the next state. The
/// machine's new projection (JSON) when it moved.
fn advance_machine(
    tx: &mut Tx<'_>,
    key: &SessionKey,
    machines: &dyn MachineRules,
    end: StepEnd,
    result: Option<&str>,
    wake_at: Option<i64>,
) -> Result<Option<String>> {
    let row = tx.session_row(key)?;
    let now = tx.now;
    let Some(m) =
        stored_machine(&row).and_then(|m| machines.step_ends(m, end, result, wake_at, now))
    else {
        return Ok(None);
    };
    let seq = save_machine(tx, key, &m)?;
    if let Some(prompt) = &m.prompt {
        enqueue_internal(tx, key, seq, QueueKind::Machine, prompt, 0)?;
    }
    Ok(Some(m.projection.to_string()))
}

/// After a terminal: releases the turn and shows where the session stands (see [`Tx::end_turn`];
/// `end.turn` is the status it shows unless another input may run now), and tells the
/// dispatcher what to do next.
fn settle(tx: &mut Tx<'_>, key: &SessionKey, mut end: TurnEnd<'_>) -> Result<Settled> {
    let pending = tx.pending_inputs(key)?;
    let now = tx.now;
    let more = pending.iter().any(|p| p.not_before <= now);
    let next_due = pending
        .iter()
        .filter(|p| p.not_before > now)
        .map(|p| p.not_before)
        .min();
    if more {
        end.turn = TurnStatus::Running;
    }
    tx.end_turn(key, &end)?;
    Ok(Settled { more, next_due })
}

fn finish(tx: &mut Tx<'_>, t: TurnTerminal, machines: &dyn MachineRules) -> Result<Settled> {
    let key = &t.fence.key;
    let ending = tx.turn_ending(key, t.fence.generation)?;
    // The turn's last events go in one statement: what it held back, its loose ends, its usage
    // and its terminal — in two when the messages it left open are closed before the terminal.
    let loose = loose_ends(tx, key, &t.partial, Unfinished::Stopped)?;
    let mut events: Vec<&Event> = t.held.iter().chain(&loose).collect();
    let mut usage_totals = None;
    if let Some((note, usage_event, usage)) = &t.estimate {
        usage_totals = Some(usage_added(ending.usage_totals.as_deref(), usage)?);
        events.extend([note, usage_event]);
    }
    if ends_badly(&t.event) {
        tx.append_all(key, &events)?;
        events.clear();
        tx.close_open_messages(key)?;
    }
    events.push(&t.event);
    let seq = tx
        .append_all(key, &events)?
        .ok_or_else(|| Error::Internal("a turn's terminal was not appended".to_owned()))?;
    if let Some(wake_at) = t.wake_at {
        enqueue_internal(tx, key, seq, QueueKind::Wake, "", wake_at)?;
    }
    let mut machine = ending.machine;
    if let Some((end, result)) = &t.step
        && let Some(moved) = advance_machine(tx, key, machines, *end, result.as_deref(), t.wake_at)?
    {
        machine = Some(moved);
    }
    settle(
        tx,
        key,
        TurnEnd {
            engine_state: t.engine_state.as_deref(),
            wake_at: t.wake_at,
            turn: t.status,
            machine: machine.as_deref(),
            usage_totals: usage_totals.as_deref(),
        },
    )
}

/// Whether a terminal ends its turn failed or interrupted: the agent's messages still open then
/// will not be finished by it (`Tx::close_open_messages`).
fn ends_badly(event: &Event) -> bool {
    matches!(
        event,
        Event::Interrupted { .. }
            | Event::Complete {
                status: CompleteStatus::Failed,
                ..
            }
    )
}

fn end_lost(
    tx: &mut Tx<'_>,
    lost: LostTerminal,
    machines: &dyn MachineRules,
) -> Result<Option<Settled>> {
    let key = &lost.key;
    let tasks = match &lost.turn {
        LostTurn::Cut(generation) => {
            tx.check_generation(key, *generation)?;
            Unfinished::Stopped
        }
        other => {
            let me = crate::ids::process_id();
            let taken = match other {
                LostTurn::ExpiredBefore(t) => tx.take_lost_turn(key, me, Some(*t))?,
                LostTurn::OwnedBy(owner) => tx.take_turn_of(key, me, owner)?,
                _ => tx.take_lost_turn(key, me, None)?,
            };
            if !taken {
                return Ok(None);
            }
            Unfinished::Lost
        }
    };
    let row = tx.session_row(key)?;
    let loose = loose_ends(tx, key, &lost.partial, tasks)?;
    let events: Vec<&Event> = loose.iter().chain([&lost.notice]).collect();
    tx.append_all(key, &events)?;
    tx.close_open_messages(key)?;
    let state = turn_state(
        TurnStateStatus::Interrupted,
        &row.mode,
        AgentStatus::Cancelled,
        Vec::new(),
        None,
    );
    tx.append(key, &Event::Interrupted { state })?;
    let mut machine = row.machine.clone();
    if stored_machine(&row).is_some_and(|m| machines.step_running(m))
        && let Some(moved) = advance_machine(tx, key, machines, StepEnd::Interrupted, None, None)?
    {
        machine = Some(moved);
    }
    let end = TurnEnd {
        engine_state: None,
        wake_at: None,
        turn: TurnStatus::Interrupted,
        machine: machine.as_deref(),
        usage_totals: None,
    };
    settle(tx, key, end).map(Some)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::sql::params;

    /// An input's media are read from its event as it was written, whatever else it holds; a
    /// field that is absent or not as sessiond writes it is empty, the other one kept.
    #[test]
    fn media_are_read_from_the_event_alone() {
        let body = r#"{"type":"prompt_submitted","prompt":"a \"quoted\" text","images":
            [{"storageId":"i1","mimeType":"image/png","bytes":3}],
            "attachments":[{"path":"/d/a.txt","name":"a.txt","bytes":5}]}"#;
        let (images, attachments) = media_of(body);
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].storage_id, "i1");
        assert_eq!(attachments[0].path, "/d/a.txt");
        let (images, attachments) = media_of(r#"{"prompt":"x","images":5,"attachments":[]}"#);
        assert!(images.is_empty() && attachments.is_empty());
        let (images, attachments) =
            media_of(r#"{"images":{"no":1},"attachments":[{"path":"p","name":"n","bytes":1}]}"#);
        assert!(images.is_empty());
        assert_eq!(attachments.len(), 1);
        assert_eq!(media_of("not json").0.len(), 0);
        assert_eq!(media_of(r#"{"prompt":"no media"}"#).1.len(), 0);
    }

    /// Rules for sessions without a machine.
    pub(crate) struct NoMachine;

    impl MachineRules for NoMachine {
        fn step_starts(&self, _: StoredMachine<'_>, _: QueueKind, _: i64) -> Option<MachineMove> {
            None
        }

        fn step_ends(
            &self,
            _: StoredMachine<'_>,
            _: StepEnd,
            _: Option<&str>,
            _: Option<i64>,
            _: i64,
        ) -> Option<MachineMove> {
            None
        }

        fn step_running(&self, _: StoredMachine<'_>) -> bool {
            false
        }
    }

    /// A queued input whose kind, behaviour or tier the store does not know (written by
    /// something else, or a newer sessiond) fails the claim with an error and changes nothing;
    /// a known one is claimed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_unknown_stored_queue_value_fails_the_claim_and_changes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, key) = crate::writer::tests::store_with_session(dir.path()).await;
        let queue = |kind: &'static str, behavior: &'static str, tier: Option<&'static str>| {
            let k = key.clone();
            let store = store.clone();
            async move {
                store
                    .write(move |tx| {
                        tx.conn
                            .execute("DELETE FROM pending_inputs WHERE session_pk = ?1", [k.pk])?;
                        tx.conn.execute(
                            "INSERT INTO pending_inputs
                               (session_pk, seq, kind, behavior, tier, text, images, not_before)
                             VALUES (?1, 1, ?2, ?3, ?4, 'x', NULL, 0)",
                            params![k.pk, kind, behavior, tier],
                        )?;
                        Ok(())
                    })
                    .await
                    .expect("queue an input")
            }
        };
        let lease = || Lease {
            owner: "test".into(),
            ms: 60_000,
        };
        for (kind, behavior, tier, what) in [
            ("bogus", "steer", None, "queue kind"),
            ("message", "sideways", None, "behavior"),
            ("message", "steer", Some("ultra"), "tier"),
        ] {
            queue(kind, behavior, tier).await;
            let e = store
                .turns()
                .claim(&key, lease(), Arc::new(NoMachine))
                .await
                .expect_err("an unknown value");
            assert!(e.to_string().contains(&format!("unknown {what}")), "{e}");
            let row = store.projections().session_by_pk(key.pk).await;
            assert!(
                matches!(row, Ok(Some(r)) if !r.turn_active),
                "nothing changed"
            );
        }
        queue("message", "steer", Some("economy")).await;
        let claimed = store
            .turns()
            .claim(&key, lease(), Arc::new(NoMachine))
            .await
            .expect("claim")
            .expect("a turn");
        assert_eq!(claimed.kind, QueueKind::Message);
        assert_eq!(claimed.tier, Some(Tier::Economy));
        store.close();
    }
}
