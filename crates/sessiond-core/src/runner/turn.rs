//! One turn: claim the session, run the engine through its [`TurnIo`] (the runner's [`Turn`]),
//! write the terminal.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use super::machine::StepEnd;
use super::{Delivery, Msg, Shared, TurnControl};
use crate::clock;
use crate::drive::Drive;
use crate::engine::{DeltaSink, Engine, InputKind, Origin, SessionOps, TurnEnd, TurnInput, TurnIo};
use crate::error::{Error, Result};
use crate::metrics::METRICS;
use crate::projection;
use crate::store::claims::{
    ClaimedTurn as Claim, LostTerminal, LostTurn, Settled, TurnTerminal, turn_state,
};
use crate::store::projections::TurnStatus;
use crate::store::turns::{AutoTitle, Fence, TaskEnd, TaskKind};
use crate::store::{self, QueueKind, SessionKey, Store};
use crate::timeline::{
    AgentStatus, CompleteStatus, ContextWindowUsage, Event, Level, ModelUsage, Step,
    SystemMetadata, Todo, TurnStateStatus, Usage,
};

/// What the dispatcher needs to know when a turn is over.
pub(crate) struct Outcome {
    pub key: Option<SessionKey>,
    /// Another input may run now.
    pub more: bool,
    /// The earliest queued input that may only run later (a sleep's wake).
    pub next_due: Option<i64>,
}

impl Outcome {
    fn idle(key: SessionKey) -> Outcome {
        Outcome {
            key: Some(key),
            more: false,
            next_due: None,
        }
    }

    /// After a terminal, what the store found queued.
    fn settled(key: SessionKey, s: Settled) -> Outcome {
        Outcome {
            key: Some(key),
            more: s.more,
            next_due: s.next_due,
        }
    }

    /// The claim met a storage fault (nothing changed): look for the session's work again later.
    fn retry_later(key: SessionKey) -> Outcome {
        Outcome {
            key: Some(key),
            more: false,
            next_due: Some(clock::now_ms() + CLAIM_RETRY.as_millis() as i64),
        }
    }
}

/// How soon a claim that met a storage fault is tried again.
const CLAIM_RETRY: Duration = Duration::from_secs(1);
/// Backoff of a terminal write that met a storage fault: from the first to the longest wait.
const PERSIST_RETRY_FIRST: Duration = Duration::from_millis(100);
const PERSIST_RETRY_MAX: Duration = Duration::from_secs(2);

/// Runs a write the runner cannot do without (a turn's terminal) until the store takes it:
/// storage faults (disk full, I/O errors) are retried with backoff, so the turn ends as soon as
/// the store can write again and the session takes work without a restart. Other errors, and
/// shutdown, end the attempts (a turn still active then is ended by the next start's recovery).
async fn persist<T, F, Fut>(shared: &Shared, session: &str, what: &str, mut write: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    /// Counts the turn in `turns_awaiting_storage` while it waits (also if the task is aborted).
    struct Waiting;
    impl Drop for Waiting {
        fn drop(&mut self) {
            METRICS.turns_awaiting_storage.dec();
        }
    }
    let mut delay = PERSIST_RETRY_FIRST;
    let mut waiting: Option<Waiting> = None;
    loop {
        match write().await {
            Err(e) if e.is_storage_fault() && !shared.stopping.load(Ordering::SeqCst) => {
                if waiting.is_none() {
                    METRICS.turns_awaiting_storage.inc();
                    waiting = Some(Waiting);
                    tracing::warn!(session, error = %e, "cannot write {what} yet; retrying until storage recovers");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(PERSIST_RETRY_MAX);
            }
            other => {
                if waiting.is_some() && other.is_ok() {
                    tracing::info!(session, "wrote {what} after storage recovered");
                }
                return other;
            }
        }
    }
}

/// Runs one turn of the session: the one `claimed` by a submission's unit, or the one this task
/// claims for the session's next input.
pub(crate) async fn run(
    shared: Arc<Shared>,
    key: SessionKey,
    control: Arc<TurnControl>,
    ack: Option<oneshot::Sender<Delivery>>,
    tx: mpsc::UnboundedSender<Msg>,
    claimed: Option<Box<Claim>>,
) {
    let pk = key.pk;
    let span = tracing::info_span!(
        "turn",
        session = %key.id,
        request_id = tracing::field::Empty
    );
    let outcome = match run_turn(&shared, key.clone(), &control, ack, claimed)
        .instrument(span)
        .await
    {
        Ok(outcome) => outcome,
        Err(Error::StaleTurn | Error::NotFound) => Outcome {
            key: None,
            more: false,
            next_due: None,
        },
        Err(e) => {
            tracing::error!(session = %key.id, error = %e, "turn failed");
            Outcome::idle(key)
        }
    };
    let _ = tx.send(Msg::TurnEnded { pk, outcome });
}

/// Everything the terminal write needs, kept so that the write can be tried again.
#[derive(Clone)]
struct Terminal {
    generation: u64,
    machine_step: bool,
    end: TurnEnd,
    mode: String,
    messages: Vec<Value>,
    usage: Usage,
    todos: Option<Vec<Todo>>,
    last_text: Option<String>,
    usage_recorded: bool,
    /// Text an interrupted turn streamed and never said durably.
    partial: String,
    /// Events the engine held for the terminal's write ([`TurnIo::hold`]).
    held: Vec<Event>,
}

async fn run_turn(
    shared: &Arc<Shared>,
    key: SessionKey,
    control: &Arc<TurnControl>,
    ack: Option<oneshot::Sender<Delivery>>,
    claimed: Option<Box<Claim>>,
) -> Result<Outcome> {
    let claim = match claimed {
        Some(claimed) => Some(*claimed),
        None => match claim(shared, &key, lease(shared)).await {
            Ok(claim) => claim,
            Err(e) if e.is_storage_fault() => {
                tracing::warn!(session = %key.id, error = %e, "cannot start a turn yet; will retry");
                return Ok(Outcome::retry_later(key));
            }
            Err(e) => return Err(e),
        },
    };
    let Some(claim) = claim else {
        if let Some(ack) = ack {
            let _ = ack.send(Delivery::Queued);
        }
        return Ok(Outcome::idle(key));
    };
    tracing::Span::current().record("request_id", claim.request_id.as_str());
    control.generation.store(claim.generation, Ordering::SeqCst);
    control
        .steer_pending
        .fetch_or(claim.steers_waiting, Ordering::SeqCst);
    if let Some(ack) = ack {
        let _ = ack.send(Delivery::Accepted);
    }
    let mut io = Turn {
        store: shared.store.clone(),
        drive: Drive::root_for(&shared.data_dir, &claim.workspace_slug),
        cwd: claim.cwd.clone(),
        origin: Origin {
            workspace_id: claim.workspace_id.clone(),
            workspace_slug: claim.workspace_slug.clone(),
            user_id: claim.user_id.clone(),
            session_id: key.id.clone(),
        },
        sessions: shared.sessions.get().cloned(),
        usage_recorded: false,
        key: key.clone(),
        generation: claim.generation,
        cancel: control.cancel.subscribe(),
        control: Arc::clone(control),
        last_seq: claim.last_seq,
        turn_started: claim.last_seq,
        mode: claim.mode.clone(),
        messages: Vec::new(),
        usage: Usage::default(),
        todos: None,
        local_ids: 0,
        active_tasks: Vec::new(),
        heartbeat_every: Duration::from_millis(shared.cfg.heartbeat_ms.max(1)),
        last_heartbeat: tokio::time::Instant::now(),
        last_text: None,
        request_id: claim.request_id.clone(),
        held: Vec::new(),
        can_hold: runtime_can_hold(),
        held_error: None,
    };
    if !claim.text.is_empty() {
        io.messages
            .push(json!({"role": "user", "content": claim.text}));
        io.usage.input += estimate_tokens(&claim.text);
    }
    let prompt = claim.text.clone();
    let initial = claim.kind == QueueKind::Initial;
    let input = TurnInput {
        kind: match claim.kind {
            QueueKind::Answer => InputKind::Answer,
            QueueKind::Wake => InputKind::Wake,
            QueueKind::Initial | QueueKind::Message | QueueKind::Machine => InputKind::Prompt,
        },
        text: claim.text,
        input_seq: claim.input_seq,
        resume: claim.resume,
        tier: claim.tier,
        cwd: claim.cwd,
        images: claim.images,
        attachments: claim.attachments,
    };
    let engine = shared.engines.for_config(&claim.engine_config);
    // From here on the session is this turn's: whatever happens, it ends with a terminal.
    METRICS.engine_calls.with(&[engine.name()]).inc();
    control.progressed();
    let stall_after = Duration::from_millis(shared.cfg.stall_timeout_ms.max(MIN_STALL_MS));
    let run = match claim.budget_spent {
        Some(spent) => Err(spent.into()),
        None => {
            let stalled = tokio::select! {
                run = run_engine(engine.as_ref(), &mut io, input) => Ok(run),
                idle = stall_guard(control, stall_after) => Err(idle),
            };
            match stalled {
                Ok(run) => run,
                // The engine future is dropped here: whatever it waited on (a model call, an
                // agent process, a hung script) is abandoned, and the turn ends failed.
                Err(idle) => stalled_end(&mut io, engine.name(), idle).await,
            }
        }
    };
    let end = match run {
        Ok(end) => end,
        Err(Error::StaleTurn) => return Err(Error::StaleTurn),
        Err(e) => TurnEnd::Failed {
            error: e.to_string(),
        },
    };
    if matches!(end, TurnEnd::Failed { .. }) {
        METRICS.engine_errors.with(&[engine.name()]).inc();
    }
    let outcome_label = match &end {
        TurnEnd::Complete { .. } => "completed",
        TurnEnd::Failed { .. } => "failed",
        TurnEnd::Ask { .. } => "ask",
        TurnEnd::Sleep { .. } => "sleep",
        TurnEnd::Interrupted => "interrupted",
    };
    io.usage_recorded |= engine.records_usage();
    let reply = io.last_text.clone().unwrap_or_default();
    let completed = matches!(end, TurnEnd::Complete { .. });
    let partial = match end {
        TurnEnd::Interrupted => io.control.take_unsaid(),
        _ => String::new(),
    };
    let Turn {
        mode,
        mut messages,
        usage,
        todos,
        last_text,
        usage_recorded,
        held,
        ..
    } = io;
    if !partial.is_empty() {
        messages.push(json!({"role": "assistant", "content": partial}));
    }
    let terminal = Terminal {
        held,
        partial,
        generation: claim.generation,
        machine_step: claim.machine_step,
        end,
        mode,
        messages,
        usage,
        todos,
        last_text,
        usage_recorded,
    };
    let written = persist(shared, &key.id, "the turn's terminal", || {
        finish(&shared.store, key.clone(), terminal.clone())
    })
    .await;
    let outcome = match written {
        Ok(outcome) => {
            METRICS
                .turns_ended
                .with(&[engine.name(), outcome_label])
                .inc();
            outcome
        }
        Err(e @ (Error::StaleTurn | Error::NotFound | Error::ShuttingDown)) => return Err(e),
        Err(e) if e.is_storage_fault() => return Err(e),
        Err(e) => {
            // The terminal itself cannot be written (it is malformed): end the turn the way
            // recovery would, so the session is never left running.
            tracing::error!(session = %key.id, error = %e, "cannot write the turn's terminal");
            return write_lost_turn(
                shared,
                key,
                Some(claim.generation),
                String::new(),
                "the turn's result could not be stored; the turn was interrupted",
                Some("terminal_failed"),
            )
            .await;
        }
    };
    // A title is made from a first exchange; an empty reply leaves the excerpt.
    if initial && completed && !reply.trim().is_empty() {
        spawn_title(shared, engine, key, prompt, reply);
    }
    Ok(outcome)
}

/// The shortest stall timeout honoured, so a misconfigured zero cannot fail every turn at once.
pub(super) const MIN_STALL_MS: u64 = 1_000;

/// Resolves once the turn has gone `after` without progress (see [`TurnControl::progressed`]:
/// an event written or held, a streamed delta, a heartbeat), with how long it went.
async fn stall_guard(control: &TurnControl, after: Duration) -> Duration {
    loop {
        let idle = control.idle_for();
        if idle >= after {
            return idle;
        }
        tokio::time::sleep(after - idle).await;
    }
}

/// The end of a turn the stall guard stopped: a `system` notice coded `stalled`, then `failed`.
async fn stalled_end(io: &mut Turn, engine: &str, idle: Duration) -> Result<TurnEnd> {
    let message = format!(
        "stalled: the {engine} engine made no progress for {} s; the turn was stopped",
        idle.as_secs()
    );
    tracing::warn!(session = %io.key.id, engine, idle_ms = idle.as_millis() as u64, "turn stalled");
    io.emit(Event::System {
        level: Level::Error,
        message: message.clone(),
        metadata: Some(SystemMetadata {
            code: "stalled".to_owned(),
        }),
    })
    .await?;
    Ok(TurnEnd::Failed { error: message })
}

/// Runs the engine on the claimed turn (the tier clamped to one it honours first).
async fn run_engine(engine: &dyn Engine, io: &mut Turn, mut input: TurnInput) -> Result<TurnEnd> {
    if let Some(requested) = input.tier {
        let effective = engine.honoured_tier(requested);
        if effective != requested {
            io.emit(Event::TierClamped {
                requested_tier: requested,
                effective_tier: effective,
            })
            .await?;
            input.tier = Some(effective);
        }
    }
    engine.run(io, input).await
}

/// Asks the engine for an automatic title after the first turn (manual titles are never touched).
fn spawn_title(
    shared: &Arc<Shared>,
    engine: Arc<dyn Engine>,
    key: SessionKey,
    prompt: String,
    reply: String,
) {
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        let Some(generate) = engine.title(&prompt, &reply) else {
            return;
        };
        if shared
            .store
            .turns()
            .set_auto_title(&key, AutoTitle::Generating)
            .await
            .is_err()
        {
            return;
        }
        let title = match tokio::time::timeout(Duration::from_secs(60), generate).await {
            Ok(Ok(t)) => crate::engine::title::clean(&t),
            Ok(Err(e)) => {
                tracing::warn!(session = %key.id, error = %e, "the automatic title failed");
                None
            }
            Err(_) => {
                tracing::warn!(session = %key.id, "the automatic title timed out");
                None
            }
        };
        let step = title.map_or(AutoTitle::Failed, AutoTitle::Complete);
        let _ = shared.store.turns().set_auto_title(&key, step).await;
    });
}

/// The lease this process claims turns with.
pub(super) fn lease(shared: &Shared) -> store::Lease {
    store::Lease {
        owner: crate::ids::process_id().to_owned(),
        ms: shared.cfg.lease_ms,
    }
}

/// Claims a turn for the session's next input (the store's unit, with the machine's rules).
async fn claim(shared: &Shared, key: &SessionKey, lease: store::Lease) -> Result<Option<Claim>> {
    Ok(shared
        .store
        .turns()
        .claim(key, lease, super::machine::rules())
        .await?)
}
/// Most streamed-but-unstored text kept for an interrupt (the volatile tail's bound).
const UNSAID_MAX_BYTES: usize = 1 << 20;

fn estimate_tokens(text: &str) -> f64 {
    crate::engine::estimated_tokens(text) as f64
}

/// Writes the turn's own terminal: the event its end makes, the runner's usage estimate when the
/// engine recorded none, the machine's step ended (all in one unit of the store).
async fn finish(store: &Store, key: SessionKey, terminal: Terminal) -> Result<Outcome> {
    let Terminal {
        generation,
        machine_step,
        end,
        mode,
        messages,
        mut usage,
        todos,
        last_text,
        usage_recorded,
        partial,
        held,
    } = terminal;
    usage.total_tokens = usage.input + usage.output;
    // Engines without a token count get the runner's estimate, marked as one.
    let estimate = (!usage_recorded && usage.total_tokens > 0.0)
        .then(|| (usage_estimated(RUNNER_ESTIMATE), usage_event(&usage), usage));
    let (status, agent_status) = match &end {
        TurnEnd::Complete { .. } => (TurnStateStatus::Completed, AgentStatus::Completed),
        TurnEnd::Failed { .. } => (TurnStateStatus::Failed, AgentStatus::Failed),
        TurnEnd::Ask { .. } => (TurnStateStatus::WaitingForHuman, AgentStatus::Waiting),
        TurnEnd::Sleep { .. } => (TurnStateStatus::Sleeping, AgentStatus::Waiting),
        TurnEnd::Interrupted => (TurnStateStatus::Interrupted, AgentStatus::Cancelled),
    };
    let step_end = match &end {
        TurnEnd::Complete { .. } => StepEnd::Completed,
        TurnEnd::Failed { .. } => StepEnd::Failed,
        TurnEnd::Interrupted => StepEnd::Interrupted,
        TurnEnd::Ask { .. } | TurnEnd::Sleep { .. } => StepEnd::Paused,
    };
    let state = turn_state(status, &mode, agent_status, messages, todos);
    let (event, turn_status, engine_state, wake_at) = match end {
        TurnEnd::Complete { result } => (
            Event::Complete {
                state,
                status: CompleteStatus::Completed,
                result,
                error: None,
            },
            TurnStatus::Complete,
            None,
            None,
        ),
        TurnEnd::Failed { error } => (
            Event::Complete {
                state,
                status: CompleteStatus::Failed,
                result: None,
                error: Some(error),
            },
            TurnStatus::Complete,
            None,
            None,
        ),
        TurnEnd::Ask { questions, resume } => (
            Event::Ask { state, questions },
            TurnStatus::Ask,
            Some(resume.to_string()),
            None,
        ),
        TurnEnd::Sleep { wake_at, resume } => (
            Event::Sleep {
                state,
                wake_at: wake_at as f64,
            },
            TurnStatus::Sleep,
            Some(resume.to_string()),
            Some(wake_at),
        ),
        TurnEnd::Interrupted => (
            Event::Interrupted { state },
            TurnStatus::Interrupted,
            None,
            None,
        ),
    };
    let terminal = TurnTerminal {
        fence: Fence {
            key: key.clone(),
            generation,
        },
        held,
        partial,
        estimate,
        event,
        status: turn_status,
        engine_state,
        wake_at,
        step: machine_step.then_some((step_end, last_text)),
    };
    let settled = store
        .turns()
        .finish(terminal, super::machine::rules())
        .await?;
    Ok(Outcome::settled(key, settled))
}

const ENGINE_ESTIMATE: &str = "The model endpoint reported no token usage: the usage that follows \
                               is estimated from the text sent and received (about 4 characters a \
                               token) and priced with the agent's price table.";
const RUNNER_ESTIMATE: &str = "This engine reports no token usage: the usage that follows is \
                               estimated from the turn's text (about 4 characters a token) and \
                               carries no cost.";

fn usage_estimated(message: &str) -> Event {
    Event::System {
        level: Level::Info,
        message: message.to_owned(),
        metadata: SystemMetadata::code(SystemMetadata::USAGE_ESTIMATED),
    }
}

fn usage_event(usage: &Usage) -> Event {
    Event::Usage {
        turn_usage: usage.clone(),
        usage_by_model: Vec::new(),
        last_message_usage: usage.clone(),
        effective_context_window: 0.0,
        context_window_usage: Default::default(),
    }
}

/// Writes the `interrupted` terminal for a turn that was cut off (`generation` given, with the
/// text it streamed and did not store) or lost in a crash, with a system event saying why.
/// Refused (and harmless) when the turn already ended.
async fn write_lost_turn(
    shared: &Shared,
    key: SessionKey,
    generation: Option<u64>,
    partial: String,
    message: &'static str,
    code: Option<&'static str>,
) -> Result<Outcome> {
    let session = key.id.clone();
    persist(shared, &session, "the turn's terminal", || {
        write_lost_terminal(
            &shared.store,
            key.clone(),
            generation.map_or(LostTurn::Any, LostTurn::Cut),
            partial.clone(),
            message,
            code,
        )
    })
    .await
}

async fn write_lost_terminal(
    store: &Store,
    key: SessionKey,
    turn: LostTurn,
    partial: String,
    message: &'static str,
    code: Option<&'static str>,
) -> Result<Outcome> {
    let lost = LostTerminal {
        key: key.clone(),
        turn,
        partial,
        notice: Event::System {
            level: Level::Warn,
            message: message.to_owned(),
            metadata: code.map(|c| SystemMetadata { code: c.to_owned() }),
        },
    };
    let settled = store
        .turns()
        .end_lost(lost, super::machine::rules())
        .await?;
    Ok(match settled {
        Some(settled) => Outcome::settled(key, settled),
        // Ended meanwhile (by its process, or by another that found it first).
        None => Outcome {
            key: None,
            more: false,
            next_due: None,
        },
    })
}

pub(crate) async fn force_interrupted(
    shared: &Shared,
    key: SessionKey,
    generation: u64,
    partial: String,
) -> Outcome {
    let fallback = Outcome::idle(key.clone());
    match write_lost_turn(
        shared,
        key,
        Some(generation),
        partial,
        "the turn did not stop within the interrupt grace period and was cut off",
        None,
    )
    .await
    {
        Ok(outcome) => outcome,
        Err(_) => fallback,
    }
}

/// Ends every turn a previous process left running and returns the sessions with queued inputs
/// (with the time their first input may run). With `wait_for_storage`, a terminal that meets a
/// storage fault is retried until the store takes it (start-up on a full disk).
pub(crate) async fn recover(
    shared: &Shared,
    dead: &[String],
    wait_for_storage: bool,
) -> Result<Vec<(SessionKey, i64)>> {
    let store = &shared.store;
    // Alone on its database, a starting process owns every turn left active; beside other
    // processes only the turns whose lease ran out or whose process is known to be gone, never
    // a live peer's.
    let mut stale: Vec<(SessionKey, LostTurn)> = Vec::new();
    if store.shared_by_processes() {
        let now = clock::now_ms();
        for owner in dead {
            for key in store.turns().turn_sessions_of(owner).await? {
                stale.push((key, LostTurn::OwnedBy(owner.clone())));
            }
        }
        for key in store
            .turns()
            .expired_turn_sessions(now, RECOVER_BATCH)
            .await?
        {
            stale.push((key, LostTurn::ExpiredBefore(now)));
        }
    } else {
        for key in store.turns().active_turn_sessions().await? {
            stale.push((key, LostTurn::Any));
        }
    }
    for (key, lost) in stale {
        tracing::warn!(session = %key.id, "ending a turn left running by a previous process");
        let end = || {
            write_lost_terminal(
                store,
                key.clone(),
                lost.clone(),
                String::new(),
                "sessiond stopped while this turn was running; the turn was interrupted",
                Some("runner_exited"),
            )
        };
        if wait_for_storage {
            persist(shared, &key.id, "a recovered turn's terminal", end).await?;
        } else {
            end().await?;
        }
    }
    Ok(store.turns().sessions_with_pending_inputs().await?)
}

/// Expired turns one pass of recovery ends at most (the next pass takes the rest).
const RECOVER_BATCH: u32 = 256;

/// Ends the turns whose lease ran out (their process died mid-turn), as start-up recovery ends
/// a previous process's turns, and returns the sessions that have work due now. Run by every
/// process that shares the database, every lease renewal; each expired turn is ended once.
pub(crate) async fn recover_expired(shared: &Shared) -> Result<Vec<SessionKey>> {
    let store = &shared.store;
    let now = clock::now_ms();
    let mut due = Vec::new();
    for key in store
        .turns()
        .expired_turn_sessions(now, RECOVER_BATCH)
        .await?
    {
        let outcome = write_lost_terminal(
            store,
            key.clone(),
            LostTurn::ExpiredBefore(now),
            String::new(),
            "the sessiond process running this turn stopped answering (its lease expired); \
             the turn was interrupted",
            Some("runner_exited"),
        )
        .await?;
        if let Some(key) = outcome.key {
            tracing::warn!(session = %key.id, "ended a turn whose process is gone (lease expired)");
            if outcome.more {
                due.push(key);
            }
        }
    }
    Ok(due)
}

/// A running turn as the runner keeps it; its engine sees it as its [`TurnIo`]: durable appends
/// (fenced), live deltas, steering, tasks and cancellation.
pub struct Turn {
    store: Store,
    drive: Drive,
    cwd: Option<String>,
    /// The session itself (tools that start or message other sessions act as it).
    origin: Origin,
    sessions: Option<Arc<dyn SessionOps>>,
    /// The engine recorded usage (measured, or its own estimate); the runner's estimate is not
    /// written.
    usage_recorded: bool,
    key: SessionKey,
    generation: u64,
    cancel: watch::Receiver<bool>,
    control: Arc<TurnControl>,
    last_seq: u64,
    turn_started: u64,
    mode: String,
    messages: Vec<Value>,
    usage: Usage,
    todos: Option<Vec<Todo>>,
    local_ids: u64,
    active_tasks: Vec<String>,
    heartbeat_every: Duration,
    last_heartbeat: tokio::time::Instant,
    last_text: Option<String>,
    request_id: String,
    /// Events the engine handed to [`TurnIo::hold`]: written with the turn's next write (at the
    /// latest its terminal), or before the next delta or pause.
    held: Vec<Event>,
    /// Whether events may be held: a delta that finds some has to write them first, without
    /// returning to its caller, which only a multi-threaded runtime allows.
    can_hold: bool,
    /// Why held events could not be written before a delta or a pause (which cannot fail): the
    /// engine's next write answers with it.
    held_error: Option<Error>,
}

impl Turn {
    /// What this turn writes as: refused (`StaleTurn`) once the turn has lost its session, so
    /// nothing a cut-off turn does lands after its terminal (invariant 8).
    fn fence(&self) -> Fence {
        Fence {
            key: self.key.clone(),
            generation: self.generation,
        }
    }

    /// The held events, to be written first by the turn's next write (or the error that kept
    /// them from being written before a delta or a pause).
    fn take_held(&mut self) -> Result<Vec<Event>> {
        if let Some(e) = self.held_error.take() {
            return Err(e);
        }
        Ok(std::mem::take(&mut self.held))
    }

    /// Writes the held events now (before a delta or a pause, which must follow them). On failure
    /// they stay held (for the terminal) and the engine's next write answers with the error.
    async fn write_held(&mut self) {
        if self.held.is_empty() || self.held_error.is_some() {
            return;
        }
        let held = self.held.clone();
        match self.store.turns().write_held(&self.fence(), held).await {
            Ok(last) => {
                self.held.clear();
                if let Some(seq) = last {
                    self.last_seq = seq;
                }
            }
            Err(e) => {
                tracing::debug!(session = %self.key.id, error = %e, "cannot write held events");
                self.held_error = Some(e.into());
            }
        }
    }
}

/// Whether a turn running here may hold events (see `Turn::can_hold`).
fn runtime_can_hold() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

impl DeltaSink for Turn {
    /// Broadcasts volatile progress (a delta); never stored, except the text of an interrupted
    /// turn (see `TurnControl::unsaid`).
    fn delta(&mut self, step: Step) {
        self.control.progressed();
        if !self.held.is_empty() && self.held_error.is_none() {
            // A delta follows what the turn has emitted: write the held events first.
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current().block_on(self.write_held())
            });
        }
        if let Step::TextDelta { delta } = &step {
            let mut unsaid = self
                .control
                .unsaid
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if unsaid.len() + delta.len() <= UNSAID_MAX_BYTES {
                unsaid.push_str(delta);
            }
        }
        self.store
            .bus()
            .publish_delta(&self.key.id, self.last_seq, &step);
    }
}

#[async_trait]
impl TurnIo for Turn {
    fn session_id(&self) -> &str {
        &self.key.id
    }

    fn request_id(&self) -> &str {
        &self.request_id
    }

    /// An image of this session by its storage id: `(mime type, bytes)`.
    async fn image(&self, storage_id: &str) -> Result<Option<(String, Vec<u8>)>> {
        let row = self
            .store
            .projections()
            .image(self.key.pk, storage_id)
            .await?;
        Ok(row.map(|r| (r.mime_type, r.data)))
    }

    /// The drive of the session's workspace.
    fn drive(&self) -> &Drive {
        &self.drive
    }

    /// The session's working directory, relative to the drive (`None` = the drive root).
    fn cwd(&self) -> Option<&str> {
        self.cwd.as_deref()
    }

    /// The session acting on its own behalf (inputs it sends are attributed to it, R7).
    fn origin(&self) -> &Origin {
        &self.origin
    }

    /// The sessions core, for tools that start or message sessions (absent in bare runners).
    fn sessions(&self) -> Option<Arc<dyn SessionOps>> {
        self.sessions.clone()
    }

    /// How many sessions up the `createdBySessionId` chain goes from this one (0 for a root
    /// session), counting at most to `max`.
    async fn depth(&self, max: u32) -> Result<u32> {
        let ws = self.origin.workspace_id.clone();
        let mut current = self.key.id.clone();
        let mut depth = 0;
        while depth < max {
            match self
                .store
                .projections()
                .parent_session(&ws, &current)
                .await?
            {
                Some(parent) => {
                    depth += 1;
                    current = parent;
                }
                None => break,
            }
        }
        Ok(depth)
    }

    /// What the engine stored about this session at an earlier turn.
    async fn memo(&self) -> Result<Option<Value>> {
        let memo = self.store.projections().engine_memo(self.key.pk).await?;
        Ok(memo.and_then(|m| serde_json::from_str(&m).ok()))
    }

    /// Keeps `memo` for the next turns of this session.
    async fn set_memo(&mut self, memo: Value) -> Result<()> {
        let held = self.take_held()?;
        let last = self
            .store
            .turns()
            .set_memo(&self.fence(), held, memo.to_string())
            .await?;
        if let Some(seq) = last {
            self.last_seq = seq;
        }
        Ok(())
    }

    /// The conversation of earlier turns, oldest first, as the messages their terminals recorded
    /// (a turn lost in a crash contributes its input), notes as user messages; whole turns only,
    /// newest first until about `budget_chars` of JSON.
    async fn conversation(&self, budget_chars: usize) -> Result<Vec<Value>> {
        projection::conversation::before(&self.store, self.key.pk, self.turn_started, budget_chars)
            .await
    }

    /// The turn's own conversation, recorded on its terminal (and read back by
    /// [`TurnIo::conversation`] in later turns). Starts with the turn's input.
    fn messages_mut(&mut self) -> &mut Vec<Value> {
        &mut self.messages
    }

    /// The turn's reply (a Job's state result, the text a title is made from).
    fn set_reply(&mut self, text: &str) {
        self.last_text = Some(text.to_owned());
    }

    /// Records one model call's usage: a `usage` event with the turn's totals so far, and the
    /// session's totals. The runner then writes no estimate for this turn.
    async fn record_usage(
        &mut self,
        call: Usage,
        by_model: Vec<ModelUsage>,
        context_window: f64,
        window_usage: ContextWindowUsage,
        estimated: bool,
    ) -> Result<()> {
        if !self.usage_recorded {
            self.usage_recorded = true;
            self.usage = Usage::default();
        }
        self.usage.add(&call);
        let event = Event::Usage {
            turn_usage: self.usage.clone(),
            usage_by_model: by_model,
            last_message_usage: call.clone(),
            effective_context_window: context_window,
            context_window_usage: window_usage,
        };
        let held = self.take_held()?;
        let note = estimated.then(|| usage_estimated(ENGINE_ESTIMATE));
        let (seq, spent) = self
            .store
            .turns()
            .record_usage(&self.fence(), held, note, event, call)
            .await?;
        self.last_seq = seq;
        // The call that reaches the session's budget ends the turn (`budget_hit`).
        spent.map_or(Ok(()), |e| Err(e.into()))
    }

    /// True once the turn has been interrupted; engines stop at their next step.
    fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// A receiver that turns true when the turn is interrupted (to race against I/O).
    fn cancel_watch(&self) -> watch::Receiver<bool> {
        self.cancel.clone()
    }

    /// True when a steer message is waiting for [`TurnIo::take_steers`].
    fn steer_waiting(&self) -> bool {
        self.control.steer_pending.load(Ordering::SeqCst)
    }

    fn follow_up_waiting(&self) -> bool {
        self.control.follow_up_pending.load(Ordering::SeqCst)
    }

    /// Waits `ms` unless interrupted first; returns false when interrupted.
    async fn pause(&mut self, ms: u64) -> bool {
        self.write_held().await;
        if self.is_cancelled() {
            return false;
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => !self.is_cancelled(),
            _ = self.cancel.changed() => false,
        }
    }

    /// Appends a durable event unless this turn has lost its session.
    async fn emit(&mut self, event: Event) -> Result<u64> {
        self.control.progressed();
        let held = self.take_held()?;
        let text = matches!(
            event,
            Event::Step {
                step: Step::Text { .. }
            }
        );
        let seq = self
            .store
            .turns()
            .append(&self.fence(), held, event)
            .await?;
        if text {
            // The streamed text is stored now (the engine's own, complete version of it).
            self.control.take_unsaid();
        }
        self.last_seq = seq;
        Ok(seq)
    }

    /// Holds the event for the turn's next write (its terminal, when nothing else follows): one
    /// round-trip to the store fewer. A delta or a pause writes held events first, so nothing
    /// the engine does later is seen before them.
    async fn hold(&mut self, event: Event) -> Result<()> {
        self.control.progressed();
        if let Some(e) = self.held_error.take() {
            return Err(e);
        }
        if !self.can_hold {
            return self.emit(event).await.map(|_| ());
        }
        if matches!(
            event,
            Event::Step {
                step: Step::Text { .. }
            }
        ) {
            // The streamed text goes with the held event (its complete version).
            self.control.take_unsaid();
        }
        self.held.push(event);
        Ok(())
    }

    /// Records assistant text in the turn's conversation and, until the engine measures usage,
    /// in the estimate.
    fn say(&mut self, text: &str) {
        if !self.usage_recorded {
            self.usage.output += estimate_tokens(text);
        }
        self.messages
            .push(json!({"role": "assistant", "content": text}));
        self.last_text = Some(text.to_owned());
    }

    fn next_local_id(&mut self) -> u64 {
        self.local_ids += 1;
        self.local_ids
    }

    /// Replaces the session's todo list (event + snapshot field).
    async fn set_todos(&mut self, todos: Vec<Todo>) -> Result<()> {
        self.todos = Some(todos.clone());
        let held = self.take_held()?;
        let seq = self
            .store
            .turns()
            .set_todos(&self.fence(), held, todos)
            .await?;
        self.last_seq = seq;
        Ok(())
    }

    /// Starts a background task of this turn (`kind`: tool, subagent or scheduled) and returns
    /// its id (`t1`, `t2`, ...).
    async fn start_task(&mut self, kind: &str, name: &str, label: &str) -> Result<String> {
        let kind = TaskKind::parse(kind)
            .ok_or_else(|| Error::Internal(format!("a task cannot be of kind {kind}")))?;
        let held = self.take_held()?;
        let (id, seq) = self
            .store
            .turns()
            .start_task(&self.fence(), held, kind, name, label)
            .await?;
        self.last_seq = seq;
        self.active_tasks.push(id.clone());
        Ok(id)
    }

    /// Appends a chunk of a task's output, and a heartbeat when one is due.
    async fn task_output(&mut self, id: &str, chunk: &str) -> Result<()> {
        self.emit(Event::TaskOutput {
            task_id: id.to_owned(),
            chunk: chunk.to_owned(),
        })
        .await?;
        if self.last_heartbeat.elapsed() >= self.heartbeat_every {
            self.heartbeat().await?;
        }
        Ok(())
    }

    /// A `heartbeat` when tasks are running and one is due.
    async fn heartbeat_if_due(&mut self) -> Result<()> {
        if !self.active_tasks.is_empty() && self.last_heartbeat.elapsed() >= self.heartbeat_every {
            self.heartbeat().await?;
        }
        Ok(())
    }

    /// A `heartbeat` naming the tasks still running.
    async fn heartbeat(&mut self) -> Result<()> {
        self.last_heartbeat = tokio::time::Instant::now();
        self.emit(Event::Heartbeat {
            timestamp: clock::now_ms() as f64,
            active_task_ids: self.active_tasks.clone(),
        })
        .await
        .map(|_| ())
    }

    /// Settles a task: `completed` with `result`, `failed` with `error`, `stopped` with `reason`.
    async fn settle_task(&mut self, id: &str, status: &str, detail: Value) -> Result<()> {
        let end = TaskEnd::parse(status)
            .ok_or_else(|| Error::Internal(format!("a task cannot end {status}")))?;
        let held = self.take_held()?;
        let seq = self
            .store
            .turns()
            .settle_task(&self.fence(), held, id, end, detail)
            .await?;
        self.last_seq = seq;
        self.active_tasks.retain(|t| t != id);
        Ok(())
    }

    /// Takes the steer messages that arrived since the last call (oldest first), marking them
    /// delivered to this turn.
    async fn take_steers(&mut self) -> Result<Vec<String>> {
        if !self.control.steer_pending.swap(false, Ordering::SeqCst) {
            return Ok(Vec::new());
        }
        let held = self.take_held()?;
        let texts = self
            .store
            .turns()
            .take_steers(&self.fence(), held, self.turn_started)
            .await?;
        for text in &texts {
            if !self.usage_recorded {
                self.usage.input += estimate_tokens(text);
            }
            self.messages.push(json!({"role": "user", "content": text}));
        }
        Ok(texts)
    }
}
