//! The runner: a dispatcher and a fixed pool of turn slots that execute agent turns off the HTTP
//! threads.
//!
//! * A session never runs two turns at once (invariant 7); the dispatcher owns the set of active
//!   sessions and a FIFO of sessions with work waiting for a free slot.
//! * Every turn claims its session with a new fencing generation; writes from a turn that lost it
//!   (cut off after an interrupt's grace period) are refused (invariant 8).
//! * Inputs are durable before the runner hears of them; the runner only ever reads them back from
//!   the store, so a restart re-delivers everything not yet taken, in order.

pub mod machine;
mod turn;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::clock;
use crate::config::RunnerConfig;
use crate::engine::{Engines, SessionOps};
use crate::error::Result;
use crate::metrics::METRICS;
use crate::store::claims::{ClaimedTurn, StartNow};
use crate::store::{SessionKey, Store, TurnSignal};

/// The answer a submission gets from the runner (R64).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// A turn took the input (or it joined the running turn as a steer).
    Accepted,
    /// The input is durable and the session drain will deliver it later.
    Queued,
}

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Accepted => "accepted",
            Delivery::Queued => "queued",
        }
    }
}

enum Msg {
    Deliver {
        key: SessionKey,
        follow_up: bool,
        ack: Option<oneshot::Sender<Delivery>>,
    },
    Interrupt {
        key: SessionKey,
    },
    /// Interrupt the session's turn only while it is still the turn of this generation.
    InterruptTurn {
        key: SessionKey,
        generation: u64,
    },
    ForceStop {
        pk: i64,
        generation: u64,
    },
    TurnEnded {
        pk: i64,
        outcome: turn::Outcome,
    },
    Deleted {
        pk: i64,
    },
    /// A signal another process sent for a turn this process may be running.
    Signal {
        key: SessionKey,
        signal: TurnSignal,
    },
    /// Sessions with work found by a start-up recovery that had to wait for the storage, or by
    /// the lease keeper (turns of a process that died, work no process has taken).
    Recovered {
        sessions: Vec<(SessionKey, i64)>,
    },
    Shutdown {
        done: oneshot::Sender<()>,
    },
    /// Holds a turn slot for a submission that may claim its session's turn itself
    /// ([`Runner::hold_slot`]): answered with the hold's id, or `None` when no slot is free.
    HoldSlot {
        ack: oneshot::Sender<Option<u64>>,
    },
    /// The submission holding this slot did not claim a turn with it (or went away).
    ReleaseSlot {
        id: u64,
    },
    /// The submission holding this slot claimed its session's turn: run it.
    StartClaimed {
        id: u64,
        key: SessionKey,
        turn: Box<ClaimedTurn>,
    },
}

/// Signals shared between the dispatcher and one running turn.
pub(crate) struct TurnControl {
    pub cancel: watch::Sender<bool>,
    pub steer_pending: AtomicBool,
    pub steer_notify: Notify,
    /// Set when a follow-up arrived while the turn ran: it waits in the session's queue for the
    /// next turn (the scripted engine's `/await_follow_up` waits for it).
    pub follow_up_pending: AtomicBool,
    /// The fencing generation once the turn has claimed its session (0 before).
    pub generation: AtomicU64,
    /// Text streamed (as deltas) since the turn's last durable `text` step: what the reader saw
    /// arrive and has not been stored yet. An interrupted turn writes it as its last `text` step,
    /// so the partial reply stays in the timeline whichever engine streamed it.
    pub unsaid: std::sync::Mutex<String>,
    /// When the turn last made progress (an event, a delta, a heartbeat), in milliseconds since
    /// [`TurnControl::epoch`]: what the stall guard watches.
    pub progress_ms: AtomicU64,
    /// The origin of `progress_ms`.
    pub epoch: std::time::Instant,
}

impl TurnControl {
    /// Takes the unsaid text (leaving it empty).
    pub fn take_unsaid(&self) -> String {
        std::mem::take(&mut *self.unsaid.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Records that the turn made progress now.
    pub fn progressed(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.progress_ms.store(now, Ordering::SeqCst);
    }

    /// How long the turn has gone without progress.
    pub fn idle_for(&self) -> std::time::Duration {
        let last = self.progress_ms.load(Ordering::SeqCst);
        self.epoch
            .elapsed()
            .saturating_sub(std::time::Duration::from_millis(last))
    }
}

struct Active {
    key: SessionKey,
    /// An input arrived while this turn ran; look for work again when it ends, since the input
    /// may have committed after the turn's last look at the queue.
    recheck: bool,
    control: Arc<TurnControl>,
    task: JoinHandle<()>,
}

pub(crate) struct Shared {
    pub store: Store,
    pub engines: Engines,
    pub cfg: RunnerConfig,
    /// Where the workspace drives live (engines work in the session's cwd inside its drive).
    pub data_dir: PathBuf,
    /// The sessions core, for engine tools that start or message other sessions; set once the
    /// core exists (it is built on top of the runner).
    pub sessions: OnceLock<Arc<dyn SessionOps>>,
    /// Set at shutdown: writes that wait for storage to recover give up (the next start's
    /// recovery ends what they could not).
    pub stopping: AtomicBool,
}

#[derive(Clone)]
pub struct Runner {
    tx: mpsc::UnboundedSender<Msg>,
    ack_window: Duration,
    shared: Arc<Shared>,
}

impl Runner {
    /// Recovers what a previous process left behind, then starts the dispatcher on `rt`.
    pub fn start(
        store: Store,
        engines: Engines,
        cfg: RunnerConfig,
        data_dir: PathBuf,
        rt: &tokio::runtime::Handle,
    ) -> Result<Runner> {
        Runner::start_after(store, engines, cfg, data_dir, rt, Vec::new())
    }

    /// Like [`Runner::start`], also ending at once (without waiting for their leases to expire)
    /// the turns of `dead`: runner ids of processes known to be gone (on this host, their
    /// folder's lock was free), when several processes share the database.
    pub fn start_after(
        store: Store,
        engines: Engines,
        cfg: RunnerConfig,
        data_dir: PathBuf,
        rt: &tokio::runtime::Handle,
        dead: Vec<String>,
    ) -> Result<Runner> {
        let (tx, rx) = mpsc::unbounded_channel();
        let ack_window = Duration::from_millis(cfg.ack_window_ms);
        let shared = Arc::new(Shared {
            store,
            engines,
            cfg,
            data_dir,
            sessions: OnceLock::new(),
            stopping: AtomicBool::new(false),
        });
        // On a full or failing disk the server still starts (reads work, writes answer 507): the
        // turns a previous process left running are ended in the background, as soon as the
        // store can write their terminals, and their sessions' work is scheduled then.
        let (recovered, deferred) = match rt.block_on(turn::recover(&shared, &dead, false)) {
            Ok(r) => (r, false),
            Err(e) if e.is_storage_fault() => {
                tracing::warn!(error = %e, "start-up recovery waits for the storage to write again");
                (Vec::new(), true)
            }
            Err(e) => return Err(e),
        };
        let mut dispatcher = Dispatcher {
            shared,
            tx: tx.clone(),
            active: HashMap::new(),
            held: HashSet::new(),
            next_hold: 0,
            claimed_waiting: HashMap::new(),
            ready: VecDeque::new(),
            queued: HashSet::new(),
            timers: BTreeSet::new(),
            shutdown: None,
        };
        for (key, due) in recovered {
            dispatcher.schedule(key, due);
        }
        let shared = Arc::clone(&dispatcher.shared);
        if shared.store.shared_by_processes() {
            let signals = tx.clone();
            shared.store.on_turn_signal(Box::new(move |key, signal| {
                let _ = signals.send(Msg::Signal { key, signal });
            }));
            rt.spawn(keep_leases(Arc::clone(&shared), tx.clone()));
        }
        rt.spawn(guard_open_messages(Arc::clone(&shared), tx.clone()));
        rt.spawn(dispatcher.run(rx));
        if deferred {
            let (shared, tx) = (Arc::clone(&shared), tx.clone());
            rt.spawn(async move {
                match turn::recover(&shared, &dead, true).await {
                    Ok(sessions) => {
                        let _ = tx.send(Msg::Recovered { sessions });
                    }
                    Err(e) => tracing::error!(error = %e, "start-up recovery failed"),
                }
            });
        }
        Ok(Runner {
            tx,
            ack_window,
            shared,
        })
    }

    /// The engines of the workspace agents (what they are, for the API families that say so).
    pub fn engines(&self) -> &Engines {
        &self.shared.engines
    }

    /// Gives engine tools the sessions core (`start_session`, `message_session`).
    pub fn attach_sessions(&self, sessions: Arc<dyn SessionOps>) {
        let _ = self.shared.sessions.set(sessions);
    }

    /// Tells the runner a durable input is waiting and waits (up to the ack window) for its answer.
    pub async fn deliver(&self, key: SessionKey, follow_up: bool) -> Delivery {
        let (ack, rx) = oneshot::channel();
        if self
            .tx
            .send(Msg::Deliver {
                key,
                follow_up,
                ack: Some(ack),
            })
            .is_err()
        {
            return Delivery::Queued;
        }
        match tokio::time::timeout(self.ack_window, rx).await {
            Ok(Ok(d)) => d,
            _ => Delivery::Queued,
        }
    }

    /// Holds a turn slot for one submission, when one is free: the submission's unit then claims
    /// its session's turn itself ([`StartNow`]), and the turn starts as soon as that unit
    /// commits, without a unit of its own or a round trip through the dispatcher first. The
    /// slot is given back when the [`HeldSlot`] is dropped without a turn claimed with it.
    pub async fn hold_slot(&self) -> Option<HeldSlot> {
        let (ack, rx) = oneshot::channel();
        self.tx.send(Msg::HoldSlot { ack }).ok()?;
        let id = rx.await.ok()??;
        let tx = self.tx.clone();
        let start = StartNow {
            lease: turn::lease(&self.shared),
            machines: machine::rules(),
            hand_over: Arc::new(move |key, turn| {
                let turn = Box::new(turn);
                let _ = tx.send(Msg::StartClaimed { id, key, turn });
            }),
        };
        Some(HeldSlot {
            id,
            tx: self.tx.clone(),
            start,
        })
    }

    /// Nudges the runner without waiting for an answer (e.g. a wake or a note that changes nothing).
    pub fn poke(&self, key: SessionKey) {
        let _ = self.tx.send(Msg::Deliver {
            key,
            follow_up: true,
            ack: None,
        });
    }

    /// Interrupts the session's turn, on this process or on whichever process runs it.
    pub fn interrupt(&self, key: SessionKey) {
        self.shared.store.signal_turn(&key, TurnSignal::Interrupt);
        let _ = self.tx.send(Msg::Interrupt { key });
    }

    /// Interrupts the session's turn of `generation` (a busy policy's `interrupt`): a turn that
    /// has ended meanwhile is not followed into the next one. A turn another process runs gets
    /// the interrupt signal.
    pub fn interrupt_turn(&self, key: SessionKey, generation: u64) {
        self.shared.store.signal_turn(&key, TurnSignal::Interrupt);
        let _ = self.tx.send(Msg::InterruptTurn { key, generation });
    }

    pub fn session_deleted(&self, pk: i64) {
        let _ = self.tx.send(Msg::Deleted { pk });
    }

    /// Interrupts every running turn and waits (up to the grace period) for their terminals.
    pub async fn shutdown(&self) {
        let (done, rx) = oneshot::channel();
        if self.tx.send(Msg::Shutdown { done }).is_ok() {
            let _ = rx.await;
        }
    }
}

/// A turn slot held for one submission ([`Runner::hold_slot`]).
pub struct HeldSlot {
    id: u64,
    tx: mpsc::UnboundedSender<Msg>,
    start: StartNow,
}

impl HeldSlot {
    /// What the submission's unit claims the turn with.
    pub fn start_now(&self) -> StartNow {
        self.start.clone()
    }
}

impl Drop for HeldSlot {
    /// Gives the slot back; a no-op for the dispatcher once a turn claimed with it started.
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::ReleaseSlot { id: self.id });
    }
}

struct Dispatcher {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Msg>,
    active: HashMap<i64, Active>,
    /// Slots held for submissions that may claim a turn themselves, by hold id.
    held: HashSet<u64>,
    next_hold: u64,
    /// Turns a submission claimed while this process's previous task for the session still
    /// looked for work (it finds none, since the claim took it): each starts when that task
    /// ends.
    claimed_waiting: HashMap<i64, (SessionKey, Box<ClaimedTurn>)>,
    ready: VecDeque<SessionKey>,
    queued: HashSet<i64>,
    /// `(due_ms, pk, id)`: sessions whose next input may only run later (sleep wakes).
    timers: BTreeSet<(i64, i64, String)>,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Dispatcher {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Msg>) {
        // Start what recovery queued (inputs left by a previous process) without waiting for a
        // message or a timer to come along.
        self.fill_slots();
        loop {
            let next_timer = self.timers.first().map(|(due, _, _)| *due);
            let sleep = async {
                match next_timer {
                    Some(due) => {
                        let wait = (due - clock::now_ms()).max(0) as u64;
                        tokio::time::sleep(Duration::from_millis(wait)).await
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(msg) => self.handle(msg),
                    None => break,
                },
                () = sleep => self.fire_timers(),
            }
            METRICS.turns_active.set(self.active.len() as i64);
            METRICS
                .sessions_waiting_for_slot
                .set(self.ready.len() as i64);
            if self.shutdown.is_some() && self.active.is_empty() {
                if let Some(done) = self.shutdown.take() {
                    let _ = done.send(());
                }
                break;
            }
        }
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Deliver {
                key,
                follow_up,
                ack,
            } => self.deliver(key, follow_up, ack),
            Msg::Interrupt { key } => self.interrupt(&key),
            Msg::InterruptTurn { key, generation } => {
                let current = self
                    .active
                    .get(&key.pk)
                    .map(|a| a.control.generation.load(Ordering::SeqCst));
                // A turn still claiming (generation 0 here) is a later one: the turn asked for
                // stored its generation right after its claim, before the message's transaction
                // (which saw that claim) was even answered.
                if current == Some(generation) {
                    self.interrupt(&key);
                }
            }
            Msg::Signal { key, signal } => match signal {
                TurnSignal::Interrupt => self.interrupt(&key),
                TurnSignal::Steer | TurnSignal::FollowUp => {
                    if let Some(active) = self.active.get_mut(&key.pk) {
                        active.recheck = true;
                        if signal == TurnSignal::FollowUp {
                            active
                                .control
                                .follow_up_pending
                                .store(true, Ordering::SeqCst);
                        } else {
                            active.control.steer_pending.store(true, Ordering::SeqCst);
                            active.control.steer_notify.notify_one();
                        }
                    }
                }
            },
            Msg::ForceStop { pk, generation } => self.force_stop(pk, generation),
            Msg::TurnEnded { pk, outcome } => {
                let ended = self.active.remove(&pk);
                if let Some((key, turn)) = self.claimed_waiting.remove(&pk) {
                    // The task that ended found no work: the turn claimed meanwhile runs now,
                    // and takes over what the task was to look at and an interrupt it had.
                    let interrupted = ended.as_ref().is_some_and(|a| *a.control.cancel.borrow());
                    self.start_turn(key.clone(), None, Some(turn));
                    if let Some(active) = self.active.get_mut(&pk) {
                        active.recheck = outcome.more || ended.is_some_and(|a| a.recheck);
                    }
                    if interrupted {
                        self.interrupt(&key);
                    }
                    if let Some(due) = outcome.next_due {
                        self.timers.insert((due, key.pk, key.id));
                    }
                    self.fill_slots();
                    return;
                }
                if let Some(Active {
                    key, recheck: true, ..
                }) = ended
                {
                    self.enqueue(key);
                }
                if let Some(key) = outcome.key {
                    if outcome.more {
                        self.enqueue(key.clone());
                    }
                    if let Some(due) = outcome.next_due {
                        self.timers.insert((due, key.pk, key.id));
                    }
                }
                self.fill_slots();
            }
            Msg::Deleted { pk } => {
                if let Some(active) = self.active.remove(&pk) {
                    active.task.abort();
                }
                self.claimed_waiting.remove(&pk);
                self.ready.retain(|k| k.pk != pk);
                self.queued.remove(&pk);
                self.timers.retain(|(_, p, _)| *p != pk);
                self.fill_slots();
            }
            Msg::Recovered { sessions } => {
                for (key, due) in sessions {
                    if !self.active.contains_key(&key.pk) {
                        self.schedule(key, due);
                    }
                }
                self.fill_slots();
            }
            Msg::HoldSlot { ack } => {
                let id = (self.shutdown.is_none() && self.slot_free()).then(|| {
                    self.next_hold += 1;
                    self.held.insert(self.next_hold);
                    self.next_hold
                });
                let _ = ack.send(id);
            }
            Msg::ReleaseSlot { id } => {
                if self.held.remove(&id) {
                    self.fill_slots();
                }
            }
            Msg::StartClaimed { id, key, turn } => {
                self.held.remove(&id);
                if self.active.contains_key(&key.pk) {
                    self.claimed_waiting.insert(key.pk, (key, turn));
                } else {
                    self.start_turn(key.clone(), None, Some(turn));
                    if self.shutdown.is_some() {
                        // Claimed as the process began to stop: it ends like every other turn.
                        self.interrupt(&key);
                    }
                }
            }
            Msg::Shutdown { done } => {
                self.shared.stopping.store(true, Ordering::SeqCst);
                self.ready.clear();
                self.queued.clear();
                self.timers.clear();
                for active in self.active.values() {
                    active.control.cancel.send_replace(true);
                }
                let grace = self.shared.cfg.interrupt_grace_ms;
                let tx = self.tx.clone();
                let pks: Vec<(i64, u64)> = self
                    .active
                    .iter()
                    .map(|(pk, a)| (*pk, a.control.generation.load(Ordering::SeqCst)))
                    .collect();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(grace)).await;
                    for (pk, generation) in pks {
                        let _ = tx.send(Msg::ForceStop { pk, generation });
                    }
                });
                self.shutdown = Some(done);
            }
        }
    }

    fn deliver(
        &mut self,
        key: SessionKey,
        follow_up: bool,
        ack: Option<oneshot::Sender<Delivery>>,
    ) {
        let reply = |ack: Option<oneshot::Sender<Delivery>>, d: Delivery| {
            if let Some(ack) = ack {
                let _ = ack.send(d);
            }
        };
        if self.shutdown.is_some() {
            return reply(ack, Delivery::Queued);
        }
        if let Some(active) = self.active.get_mut(&key.pk) {
            active.recheck = true;
            if follow_up {
                active
                    .control
                    .follow_up_pending
                    .store(true, Ordering::SeqCst);
                return reply(ack, Delivery::Queued);
            }
            active.control.steer_pending.store(true, Ordering::SeqCst);
            active.control.steer_notify.notify_one();
            return reply(ack, Delivery::Accepted);
        }
        if self.shared.store.shared_by_processes() {
            // Another process may be running this session's turn: the input reaches it there
            // (a process that does not run it ignores the signal).
            let signal = if follow_up {
                TurnSignal::FollowUp
            } else {
                TurnSignal::Steer
            };
            self.shared.store.signal_turn(&key, signal);
        }
        if self.slot_free() {
            self.start_turn(key, ack, None);
        } else {
            self.enqueue(key);
            reply(ack, Delivery::Queued);
        }
    }

    fn enqueue(&mut self, key: SessionKey) {
        if self.queued.insert(key.pk) {
            self.ready.push_back(key);
        }
    }

    fn schedule(&mut self, key: SessionKey, due: i64) {
        if due <= clock::now_ms() {
            self.enqueue(key);
        } else {
            self.timers.insert((due, key.pk, key.id));
        }
    }

    fn fire_timers(&mut self) {
        let now = clock::now_ms();
        while let Some((due, _, _)) = self.timers.first() {
            if *due > now {
                break;
            }
            if let Some((_, pk, id)) = self.timers.pop_first()
                && !self.active.contains_key(&pk)
            {
                self.enqueue(SessionKey { pk, id });
            }
        }
        self.fill_slots();
    }

    fn fill_slots(&mut self) {
        if self.shutdown.is_some() {
            return;
        }
        while self.slot_free() {
            let Some(key) = self.ready.pop_front() else {
                break;
            };
            self.queued.remove(&key.pk);
            if self.active.contains_key(&key.pk) {
                // It will look for more work when its turn ends.
                continue;
            }
            self.start_turn(key, None, None);
        }
    }

    /// Whether a turn may start now: the running turns and the slots held for submissions
    /// leave one of the configured workers.
    fn slot_free(&self) -> bool {
        self.active.len() + self.held.len() < self.shared.cfg.workers
    }

    /// Starts a turn task for the session: it runs `claimed`, or claims the session's next
    /// input itself.
    fn start_turn(
        &mut self,
        key: SessionKey,
        ack: Option<oneshot::Sender<Delivery>>,
        claimed: Option<Box<ClaimedTurn>>,
    ) {
        let control = Arc::new(TurnControl {
            cancel: watch::channel(false).0,
            steer_pending: AtomicBool::new(false),
            steer_notify: Notify::new(),
            follow_up_pending: AtomicBool::new(false),
            // A claimed turn's generation is known at once: an interrupt of that turn that comes
            // before its task runs finds it.
            generation: AtomicU64::new(claimed.as_ref().map_or(0, |c| c.generation)),
            unsaid: std::sync::Mutex::new(String::new()),
            progress_ms: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        });
        let pk = key.pk;
        let task = tokio::spawn(turn::run(
            Arc::clone(&self.shared),
            key.clone(),
            Arc::clone(&control),
            ack,
            self.tx.clone(),
            claimed,
        ));
        self.active.insert(
            pk,
            Active {
                key,
                recheck: false,
                control,
                task,
            },
        );
    }

    fn interrupt(&mut self, key: &SessionKey) {
        let Some(active) = self.active.get(&key.pk) else {
            return;
        };
        active.control.cancel.send_replace(true);
        let generation = active.control.generation.load(Ordering::SeqCst);
        let tx = self.tx.clone();
        let grace = self.shared.cfg.interrupt_grace_ms;
        let pk = key.pk;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(grace)).await;
            let _ = tx.send(Msg::ForceStop { pk, generation });
        });
    }

    /// Cuts off a turn that ignored its interrupt: the task is dropped and the runner writes the
    /// `interrupted` terminal itself; anything the old turn still tries to write is fenced off.
    fn force_stop(&mut self, pk: i64, generation: u64) {
        let Some(active) = self.active.get(&pk) else {
            return;
        };
        if active.control.generation.load(Ordering::SeqCst) != generation {
            return;
        }
        active.task.abort();
        let shared = Arc::clone(&self.shared);
        let tx = self.tx.clone();
        let key = active.key.clone();
        let partial = active.control.take_unsaid();
        tokio::spawn(async move {
            let outcome = turn::force_interrupted(&shared, key, generation, partial).await;
            let _ = tx.send(Msg::TurnEnded { pk, outcome });
        });
    }
}

/// Sessions whose abandoned messages one pass of [`guard_open_messages`] closes at most.
const ABANDONED_BATCH: u32 = 100;

/// The stall guard of work no turn holds: an agent that writes its messages after its turn (an
/// async ACP agent, through the agent platform API) and dies mid-message would leave that message
/// `IN_PROGRESS` forever. Every half stall timeout this closes the messages whose newest revision
/// is older than `runner.stall_timeout_ms` while no turn runs, with a `stalled` notice (checked
/// again with the session's row held, so an agent that wrote since keeps its message open). Runs
/// until the dispatcher is gone; with several processes each looks, and the first to hold a row
/// closes its messages.
async fn guard_open_messages(shared: Arc<Shared>, tx: mpsc::UnboundedSender<Msg>) {
    let stall = shared.cfg.stall_timeout_ms.max(turn::MIN_STALL_MS);
    let mut ticks = tokio::time::interval(Duration::from_millis(stall / 2));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if tx.is_closed() {
            return;
        }
        if shared.stopping.load(Ordering::SeqCst) {
            continue;
        }
        let before = clock::now_ms() - stall as i64;
        let found = match shared
            .store
            .agentex()
            .abandoned(before, ABANDONED_BATCH)
            .await
        {
            Ok(found) => found,
            Err(e) => {
                tracing::warn!(error = %e, "cannot look for agent messages left open");
                continue;
            }
        };
        for key in found {
            let why = format!(
                "stalled: the agent left its message unfinished and made no progress for {} s; \
                 the message was closed",
                stall / 1000
            );
            let id = key.id.clone();
            match shared
                .store
                .agentex()
                .close_abandoned(key, before, why)
                .await
            {
                Ok(0) => {}
                Ok(n) => {
                    tracing::warn!(session = %id, messages = n, "closed agent messages left open")
                }
                Err(e) => {
                    tracing::warn!(session = %id, error = %e, "cannot close agent messages left open")
                }
            }
        }
    }
}

/// With several processes on one database: renews the leases of this process's turns every
/// `lease_renew_ms`, ends the turns whose lease expired (their process died), and hands the
/// dispatcher the sessions with work due that no process has taken (a sleep's wake, a schedule's
/// session, inputs a busy or dead process left). Runs until the dispatcher is gone.
async fn keep_leases(shared: Arc<Shared>, tx: mpsc::UnboundedSender<Msg>) {
    let every = Duration::from_millis(shared.cfg.lease_renew_ms);
    let me = crate::ids::process_id();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if tx.is_closed() {
            return;
        }
        if let Err(e) = shared
            .store
            .turns()
            .renew_leases(me, shared.cfg.lease_ms)
            .await
        {
            tracing::warn!(error = %e, "cannot renew this process's turn leases");
            continue;
        }
        if shared.stopping.load(Ordering::SeqCst) {
            // Stopping: keep the leases of the turns still ending, take on nothing new.
            continue;
        }
        let mut sessions = match turn::recover_expired(&shared).await {
            Ok(due) => due,
            Err(e) => {
                tracing::warn!(error = %e, "cannot end the turns of a process that is gone");
                Vec::new()
            }
        };
        let now = clock::now_ms();
        match shared
            .store
            .turns()
            .unclaimed_due_sessions(now, shared.cfg.workers as u32)
            .await
        {
            Ok(found) => sessions.extend(found),
            Err(e) => tracing::warn!(error = %e, "cannot look for work no process has taken"),
        }
        if !sessions.is_empty() {
            let sessions = sessions.into_iter().map(|key| (key, now)).collect();
            if tx.send(Msg::Recovered { sessions }).is_err() {
                return;
            }
        }
    }
}
