//! Live fan-out between the processes that share one PostgreSQL database.
//!
//! Every write transaction that appends to a session sends, before its COMMIT, a notice on the
//! [`CHANNEL`] (unless no other process listens: see [`super::presence`]) naming the session and
//! its newest seq (`NOTIFY` is transactional: the notice is
//! delivered if and only if the transaction commits, and notices are delivered in commit order).
//! Each process listens on a connection of its own ([`spawn_listener`]); for a session that has
//! live state on this process (subscribers or a volatile tail) it reads the events it has not
//! published yet from the database, by seq, and publishes them on its local bus. The notice only
//! says *that* there is something to read: a missed notice is covered by the next one's read, and
//! a listener that reconnects reads, for every live session, what it may have missed meanwhile.
//! SSE streams re-read their backlog when a live frame skips a seq (`api/stream.rs`), so a resume
//! stays exact whichever process committed what.
//!
//! A delete sends its own notice in its transaction, and each process ends the deleted session's
//! streams as the deleting process does; a listener that reconnects ends those of the live
//! sessions it finds gone.
//!
//! Volatile deltas go through the same channel, unstored, to the processes that stream the
//! session: a process asks for a session's deltas when the session gets its first stream there
//! ([`Notice::Watch`], asked again every [`WATCH_REFRESH`] while it streams, and to every process
//! that says hello; an ask lasts [`WATCH_TTL`]). The process that streams them first relays the
//! session's tail — what a stream opened on it would have been sent — then each new delta, under
//! the bus's lock for the session, so that nothing is sent twice or skipped ([`Peers`]). A turn
//! nobody streams elsewhere relays nothing: a `/wait` or a follower of the durable timeline does
//! not ask. The deltas go to a task that sends them with `pg_notify` on a connection of its
//! own, in order, as many as are queued in one statement (one transaction, one wake-up of each
//! listener, however many deltas; a number of the process's own keeps two equal deltas two
//! notices, since PostgreSQL drops a transaction's duplicates). PostgreSQL refuses a payload of
//! 8000 bytes or more: a text or reasoning delta whose notice would be larger is split into several deltas (at character boundaries) that
//! together carry the same text; other steps that large are not relayed (subscribers on other
//! processes see the durable events that follow them). A relay that cannot keep up (its queue
//! is full, the database unreachable) drops deltas, never blocks the turn that streams them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio_postgres::AsyncMessage;

use super::presence::{self, Presence};
use super::tls::Connector;

use crate::Sink;
use crate::sql::{Db, Dialect};
use crate::timeline::Step;
use crate::turns::{SignalHook, TurnSignal};
use sessiond_model::frame::Frame;

/// The notification channel every sessiond process listens on.
pub(crate) const CHANNEL: &str = "sessiond_events";

/// The largest payload sent; PostgreSQL refuses 8000 bytes and more.
pub(crate) const MAX_PAYLOAD: usize = 7_900;

/// Events read per catch-up of one session; a larger gap is read from its newest end (a stream
/// that sees a seq skipped reads the rest from the database itself).
const CATCH_UP_EVENTS: u64 = 1_000;

/// Deltas waiting for the relay's connection before new ones are dropped.
const RELAY_QUEUE: usize = 8_192;

/// Notices the relay sends in one statement at most.
const RELAY_BATCH: usize = 256;

/// The next number for a notice sent outside a transaction ([`Notice::Delta`], [`Notice::Turn`]).
fn next_number() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// How long another process's ask for a session's deltas lasts.
const WATCH_TTL: Duration = Duration::from_secs(30);

/// How often a process asks again for the deltas of the sessions it streams (well within
/// [`WATCH_TTL`], so that one lost ask stops nothing).
const WATCH_REFRESH: Duration = Duration::from_secs(10);

/// How long a lost listener or relay connection waits before it connects again.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

/// One notice on the channel.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub(crate) enum Notice {
    /// A transaction appended to `session` up to `seq`.
    Committed {
        from: String,
        session: String,
        seq: u64,
    },
    /// A volatile step published after durable seq `after`.
    Delta {
        from: String,
        /// Distinct for every notice this process relays (see [`next_number`]).
        #[serde(default)]
        n: u64,
        session: String,
        after: u64,
        step: Step,
    },
    /// `session` was deleted (sent inside the deleting transaction): every process ends its
    /// streams, as the deleting process does.
    Deleted { from: String, session: String },
    /// A process began to listen (after taking the presence lock): a process that was alone
    /// sends notices again (see [`super::presence`]).
    Hello { from: String },
    /// `from` committed without notices while it believed itself alone, or while its listener
    /// was away: every process reads what its live sessions missed.
    Resync { from: String },
    /// `from` streams these sessions: the processes that stream their deltas relay them to it
    /// (see [`Peers`]).
    Watch { from: String, sessions: Vec<String> },
    /// A signal for the turn of `session`, wherever it runs (the process that runs it acts on
    /// it; the others ignore it).
    Turn {
        from: String,
        /// Distinct for every notice this process relays (see [`next_number`]).
        #[serde(default)]
        n: u64,
        session: String,
        pk: i64,
        signal: TurnSignal,
    },
}

/// Notices this process sends outside a transaction (deltas, turn signals), in order.
pub(crate) type Notifier = mpsc::Sender<String>;

/// Tells the other processes, inside the transaction `db` is in, that `session` is deleted: they
/// end its streams when (and only if) the delete commits. Nothing to do on SQLite, where one
/// process serves every stream.
pub(crate) fn announce_deleted(db: &Db<'_>, session: &str) -> crate::sql::Result<()> {
    if db.dialect() != Dialect::Postgres {
        return Ok(());
    }
    let notice = Notice::Deleted {
        from: crate::ids::process_id().to_owned(),
        session: session.to_owned(),
    };
    match serde_json::to_string(&notice) {
        Ok(payload) => db
            .execute("SELECT pg_notify(?1, ?2)", [CHANNEL, payload.as_str()])
            .map(|_| ()),
        Err(e) => {
            tracing::warn!(error = %e, session, "a deletion notice could not be encoded");
            Ok(())
        }
    }
}

/// The notice of a signal for a session's turn.
pub(crate) fn turn_notice(key: &crate::SessionKey, signal: TurnSignal) -> Option<String> {
    serde_json::to_string(&Notice::Turn {
        from: crate::ids::process_id().to_owned(),
        n: next_number(),
        session: key.id.clone(),
        pk: key.pk,
        signal,
    })
    .ok()
}

/// The commit notices of a transaction's frames: one per session, with its newest seq.
pub(crate) fn committed_notices<'a>(
    frames: impl IntoIterator<Item = (&'a str, Option<u64>)>,
) -> Vec<String> {
    let mut newest: Vec<(&str, u64)> = Vec::new();
    for (session, seq) in frames {
        let Some(seq) = seq else { continue };
        match newest.iter_mut().find(|(s, _)| *s == session) {
            Some((_, n)) => *n = (*n).max(seq),
            None => newest.push((session, seq)),
        }
    }
    newest
        .into_iter()
        .filter_map(|(session, seq)| {
            serde_json::to_string(&Notice::Committed {
                from: crate::ids::process_id().to_owned(),
                session: session.to_owned(),
                seq,
            })
            .ok()
        })
        .collect()
}

/// The notices of one delta: one, or several for a text that does not fit one payload.
fn delta_notices(session: &str, after: u64, step: &Step) -> Vec<String> {
    let encode = |step: Step| {
        serde_json::to_string(&Notice::Delta {
            from: crate::ids::process_id().to_owned(),
            n: next_number(),
            session: session.to_owned(),
            after,
            step,
        })
        .ok()
    };
    let Some(whole) = encode(step.clone()) else {
        return Vec::new();
    };
    if whole.len() <= MAX_PAYLOAD {
        return vec![whole];
    }
    let (text, make): (&str, fn(String) -> Step) = match step {
        Step::TextDelta { delta } => (delta, |delta| Step::TextDelta { delta }),
        Step::ReasoningDelta { delta } => (delta, |delta| Step::ReasoningDelta { delta }),
        _ => {
            tracing::debug!(session, bytes = whole.len(), "a step too large to relay");
            return Vec::new();
        }
    };
    // The envelope's size, and room for JSON escapes (at most six bytes per character).
    let envelope = whole.len() - serde_json::to_string(text).map_or(0, |t| t.len());
    let room = (MAX_PAYLOAD.saturating_sub(envelope) / 6).max(1);
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = room.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 {
            end = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (piece, tail) = rest.split_at(end);
        out.extend(encode(make(piece.to_owned())));
        rest = tail;
    }
    out
}

/// Starts the task that sends this process's notices; the sender that queues them.
pub(crate) fn notifier(
    handle: &tokio::runtime::Handle,
    config: tokio_postgres::Config,
    tls: Connector,
    stop: watch::Receiver<bool>,
) -> Notifier {
    let (tx, rx) = mpsc::channel::<String>(RELAY_QUEUE);
    handle.spawn(send_relayed(config, tls, rx, stop));
    tx
}

/// This process's side of the delta relay: which sessions other processes stream, and the queue
/// its notices go out by. The bus hands it every delta published here and every session's first
/// stream ([`crate::Relay`]).
pub(crate) struct Peers {
    notifier: Notifier,
    presence: Arc<Presence>,
    /// The sessions other processes asked for, until when.
    watched: Mutex<HashMap<String, Instant>>,
}

impl Peers {
    pub(crate) fn new(notifier: Notifier, presence: Arc<Presence>) -> Arc<Peers> {
        Arc::new(Peers {
            notifier,
            presence,
            watched: Mutex::default(),
        })
    }

    fn watched(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.watched.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues notices in order; a full queue drops them (they are volatile, or asked again).
    fn send(&self, notices: Vec<String>, what: &str) -> bool {
        for notice in notices {
            if self.notifier.try_send(notice).is_err() {
                tracing::debug!("the notice queue is behind; {what} was not sent");
                return false;
            }
        }
        true
    }

    /// Another process asked for `session`'s deltas: a first ask (or one after the last
    /// expired) is answered with the session's tail, and the deltas that follow are relayed.
    fn asked(&self, sink: &dyn Sink, session: &str) {
        sink.with_tail(session, &mut |tail| {
            let now = Instant::now();
            let before = {
                let mut watched = self.watched();
                let before = watched.insert(session.to_owned(), now + WATCH_TTL);
                set_asked(watched.len());
                before
            };
            if before.is_some_and(|until| until > now) {
                // Relayed already: the tail went with the first ask.
                return false;
            }
            let mut sent = false;
            for (after, step) in tail {
                let notices = delta_notices(session, *after, step);
                let n = notices.len() as u64;
                if !self.send(notices, "a tail's delta") {
                    break;
                }
                sent = true;
                sessiond_telemetry::metrics::METRICS
                    .fanout_deltas_relayed
                    .add(n);
            }
            sent
        });
    }

    /// Asks the other processes for the deltas of these sessions (those streamed here).
    fn ask(&self, sessions: &[String]) {
        if sessions.is_empty() || self.presence.alone() {
            return;
        }
        self.send(watch_notices(sessions), "an ask for deltas");
    }

    /// Forgets the asks that expired.
    fn sweep(&self) {
        let now = Instant::now();
        let mut watched = self.watched();
        watched.retain(|_, until| *until > now);
        set_asked(watched.len());
    }
}

fn set_asked(sessions: usize) {
    sessiond_telemetry::metrics::METRICS
        .fanout_sessions_asked
        .set(i64::try_from(sessions).unwrap_or(i64::MAX));
}

impl crate::Relay for Peers {
    fn delta(&self, session: &str, after_seq: u64, step: &Step) -> bool {
        if self.presence.alone() {
            return false;
        }
        let watched = self
            .watched()
            .get(session)
            .is_some_and(|until| *until > Instant::now());
        if !watched {
            return false;
        }
        let notices = delta_notices(session, after_seq, step);
        let n = notices.len() as u64;
        let sent = self.send(notices, "a delta");
        if sent {
            sessiond_telemetry::metrics::METRICS
                .fanout_deltas_relayed
                .add(n);
        }
        sent
    }

    fn watch(&self, session: &str) {
        self.ask(&[session.to_owned()]);
    }
}

/// The ask for these sessions' deltas, in as many notices as their ids need.
fn watch_notices(sessions: &[String]) -> Vec<String> {
    let encode = |sessions: &[String]| {
        serde_json::to_string(&Notice::Watch {
            from: crate::ids::process_id().to_owned(),
            sessions: sessions.to_vec(),
        })
        .ok()
    };
    let envelope = encode(&[]).map_or(0, |e| e.len());
    let mut out = Vec::new();
    let (mut start, mut size) = (0, envelope);
    for (i, session) in sessions.iter().enumerate() {
        // The id as a JSON string (escapes included) and its comma.
        let bytes = serde_json::to_string(session).map_or(0, |s| s.len()) + 1;
        if i > start && size + bytes > MAX_PAYLOAD {
            out.extend(encode(&sessions[start..i]));
            (start, size) = (i, envelope);
        }
        size += bytes;
    }
    if start < sessions.len() {
        out.extend(encode(&sessions[start..]));
    }
    out
}

async fn send_relayed(
    config: tokio_postgres::Config,
    tls: Connector,
    mut rx: mpsc::Receiver<String>,
    mut stop: watch::Receiver<bool>,
) {
    'connect: loop {
        if *stop.borrow() {
            return;
        }
        let client = match config.connect(tls.clone()).await {
            Ok((client, connection)) => {
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                client
            }
            Err(e) => {
                tracing::warn!(error = %super::error::describe(&e), "the delta relay cannot connect");
                tokio::select! {
                    () = tokio::time::sleep(RECONNECT_DELAY) => continue 'connect,
                    _ = stop.changed() => return,
                }
            }
        };
        // One statement for every notice queued: `unnest` yields them in order, and
        // `pg_notify` queues them in the order it is called.
        let Ok(statement) = client
            .prepare("SELECT pg_notify($1, n) FROM unnest($2::text[]) AS n")
            .await
        else {
            tokio::time::sleep(RECONNECT_DELAY).await;
            continue 'connect;
        };
        let mut batch = Vec::with_capacity(RELAY_BATCH);
        loop {
            tokio::select! {
                n = rx.recv_many(&mut batch, RELAY_BATCH) => if n == 0 { return },
                _ = stop.changed() => return,
            }
            let sent = client.execute(&statement, &[&CHANNEL, &batch]).await;
            batch.clear();
            if let Err(e) = sent {
                tracing::debug!(error = %super::error::describe(&e), "deltas were not relayed");
                if client.is_closed() {
                    continue 'connect;
                }
            }
        }
    }
}

/// Listens for the other processes' notices until `stop`, publishing what they committed and
/// streamed to this process's bus, and keeps the process's presence (see [`super::presence`])
/// and its peers' asks for deltas ([`Peers`]).
pub(crate) fn spawn_listener(
    handle: &tokio::runtime::Handle,
    config: tokio_postgres::Config,
    tls: Connector,
    sink: Arc<dyn Sink>,
    signals: Arc<OnceLock<SignalHook>>,
    peers: Arc<Peers>,
    stop: watch::Receiver<bool>,
) {
    handle.spawn(listen(config, tls, sink, signals, peers, stop));
}

/// How often a process that is not alone asks whether it is.
const PRESENCE_CHECK: Duration = Duration::from_secs(1);

async fn listen(
    config: tokio_postgres::Config,
    tls: Connector,
    sink: Arc<dyn Sink>,
    signals: Arc<OnceLock<SignalHook>>,
    peers: Arc<Peers>,
    mut stop: watch::Receiver<bool>,
) {
    let presence = &peers.presence;
    // Whether this process committed without notices that the others have not been told of.
    let mut owed = false;
    loop {
        if *stop.borrow() {
            return;
        }
        match config.connect(tls.clone()).await {
            Ok((client, mut connection)) => {
                let (tx, rx) = mpsc::unbounded_channel::<String>();
                let driver = tokio::spawn(async move {
                    loop {
                        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                if tx.send(n.payload().to_owned()).is_err() {
                                    return;
                                }
                            }
                            Some(Ok(_)) => {}
                            Some(Err(e)) => {
                                tracing::warn!(error = %super::error::describe(&e), "the event listener's connection failed");
                                return;
                            }
                            None => return,
                        }
                    }
                });
                let listener = Listener {
                    client: &client,
                    sink: &*sink,
                    signals: &signals,
                    presence,
                    peers: &peers,
                };
                let stopped = listener.serve(rx, &mut stop, &mut owed).await;
                driver.abort();
                if stopped {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %super::error::describe(&e), "the event listener cannot connect");
            }
        }
        // The presence lock went with the connection, and a process that arrives now is not
        // heard: this one notifies until it is back and has asked again.
        owed |= presence.leave();
        tokio::select! {
            () = tokio::time::sleep(RECONNECT_DELAY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// The listener on one connection.
struct Listener<'a> {
    client: &'a tokio_postgres::Client,
    sink: &'a dyn Sink,
    signals: &'a OnceLock<SignalHook>,
    presence: &'a Presence,
    peers: &'a Peers,
}

impl Listener<'_> {
    /// Listens until the connection is lost (`false`) or `stop` (`true`).
    async fn serve(
        &self,
        mut rx: mpsc::UnboundedReceiver<String>,
        stop: &mut watch::Receiver<bool>,
        owed: &mut bool,
    ) -> bool {
        if let Err(e) = self.begin().await {
            tracing::warn!(error = %super::error::describe(&e), "cannot listen for other processes' events");
            return false;
        }
        // Whatever was committed while nobody listened.
        self.catch_up_all().await;
        if *owed && self.resync().await {
            *owed = false;
        }
        let mut check = tokio::time::interval(PRESENCE_CHECK);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refresh = tokio::time::interval(WATCH_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let first = tokio::select! {
                payload = rx.recv() => payload,
                _ = check.tick(), if !self.presence.alone() => {
                    self.ask_alone().await;
                    continue;
                }
                // The first tick is at once: the asks of a listener back from a lost connection.
                _ = refresh.tick() => {
                    self.peers.sweep();
                    self.peers.ask(&self.sink.watched_sessions());
                    continue;
                }
                _ = stop.changed() => return true,
            };
            let Some(first) = first else { return false };
            let mut batch = vec![first];
            while let Ok(more) = rx.try_recv() {
                batch.push(more);
            }
            let heard = apply(self.sink, self.signals, self.peers, batch);
            // Only this task finds the process alone, so the flag cannot change before `resync`.
            if heard.hello && self.presence.alone() && !self.resync().await {
                *owed = true;
            }
            if heard.hello {
                // A process that arrived (or came back) knows of no ask of this one's (and this
                // one, alone until now, asked nobody).
                self.peers.ask(&self.sink.watched_sessions());
            }
            if heard.resync {
                self.catch_up_all().await;
            } else {
                catch_up(self.client, self.sink, heard.pending).await;
            }
        }
    }

    /// Listens, takes the presence lock, and says hello, in that order: a process alone on the
    /// database hears of this one before it could find itself alone again.
    async fn begin(&self) -> Result<(), tokio_postgres::Error> {
        self.client
            .batch_execute(&format!("LISTEN {CHANNEL}"))
            .await?;
        self.client
            .execute(presence::TAKE, &[&presence::LOCK])
            .await?;
        let hello = Notice::Hello {
            from: crate::ids::process_id().to_owned(),
        };
        self.notify(&hello).await
    }

    /// Tells the others to read what they missed, once this process's quiet commits are done;
    /// whether the notice went.
    async fn resync(&self) -> bool {
        self.presence.join().await;
        let resync = Notice::Resync {
            from: crate::ids::process_id().to_owned(),
        };
        match self.notify(&resync).await {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %super::error::describe(&e), "a resync notice was not sent");
                false
            }
        }
    }

    async fn notify(&self, notice: &Notice) -> Result<(), tokio_postgres::Error> {
        let payload = serde_json::to_string(notice).unwrap_or_default();
        self.client
            .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
            .await
            .map(|_| ())
    }

    /// Whether another process holds the presence lock; alone if none does.
    async fn ask_alone(&self) {
        match self
            .client
            .query_one(presence::ALONE, &[&presence::LOCK])
            .await
        {
            Ok(row) if row.get::<_, bool>(0) => self.presence.set_alone(),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %super::error::describe(&e), "cannot ask whether other processes listen");
            }
        }
    }

    /// Reads, for every session with live state here, what was committed past what it was sent.
    async fn catch_up_all(&self) {
        let pending = self
            .sink
            .live_topics()
            .into_iter()
            .map(|(session, _)| (session, None))
            .collect();
        catch_up(self.client, self.sink, pending).await;
    }
}

/// What a batch of notices asks of the listener.
#[derive(Debug, Default)]
struct Heard {
    /// Sessions with live state here and the newest seq another process committed to each.
    pending: HashMap<String, Option<u64>>,
    /// Another process began to listen.
    hello: bool,
    /// Another process committed without notices: every live session is read again.
    resync: bool,
}

/// Applies a batch of notices in order: deltas are published at once (the bus holds one that
/// follows a commit until that commit's frames are sent); commits are recorded and returned,
/// newest seq per session, for sessions with live state here, with the hellos and resyncs heard.
fn apply(
    sink: &dyn Sink,
    signals: &OnceLock<SignalHook>,
    peers: &Peers,
    batch: Vec<String>,
) -> Heard {
    let me = crate::ids::process_id();
    let mut heard = Heard::default();
    let pending = &mut heard.pending;
    for payload in batch {
        let notice = match serde_json::from_str::<Notice>(&payload) {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "an unreadable notice");
                continue;
            }
        };
        match notice {
            Notice::Committed { from, .. }
            | Notice::Delta { from, .. }
            | Notice::Deleted { from, .. }
            | Notice::Turn { from, .. }
            | Notice::Hello { from }
            | Notice::Resync { from }
            | Notice::Watch { from, .. }
                if from == me => {}
            Notice::Watch { sessions, .. } => {
                for session in &sessions {
                    peers.asked(sink, session);
                }
            }
            Notice::Hello { .. } => heard.hello = true,
            Notice::Resync { .. } => heard.resync = true,
            Notice::Deleted { session, .. } => {
                pending.remove(&session);
                sink.close_session(&session);
            }
            Notice::Turn {
                session,
                pk,
                signal,
                ..
            } => {
                if let Some(hook) = signals.get() {
                    hook(crate::SessionKey { pk, id: session }, signal);
                }
            }
            Notice::Committed { session, seq, .. } => {
                if sink.sent_seq(&session).is_some() {
                    sink.committed(&mut std::iter::once((session.as_str(), seq)));
                    let newest = pending.entry(session).or_insert(Some(seq));
                    *newest = (*newest).max(Some(seq));
                }
            }
            Notice::Delta {
                session,
                after,
                step,
                ..
            } => sink.publish_peer_delta(&session, after, &step),
        }
    }
    heard
}

/// The newest stored seq of each live session `pending` asks for without one, in one statement
/// (a resync asks for every live session). A session whose row is gone was deleted while nobody
/// listened: its streams end, as its notice would have ended them.
async fn newest_seqs(
    client: &tokio_postgres::Client,
    sink: &dyn Sink,
    pending: &HashMap<String, Option<u64>>,
) -> HashMap<String, u64> {
    let asked: Vec<&str> = pending
        .iter()
        .filter(|(session, upto)| upto.is_none() && sink.sent_seq(session).is_some())
        .map(|(session, _)| session.as_str())
        .collect();
    if asked.is_empty() {
        return HashMap::new();
    }
    let rows = match client
        .query(
            "SELECT id, last_event_seq FROM sessions WHERE id = ANY($1)",
            &[&asked],
        )
        .await
    {
        Ok(rows) => rows,
        Err(e) => {
            tracing::debug!(error = %super::error::describe(&e), "cannot read the sessions' last seqs");
            return HashMap::new();
        }
    };
    let newest: HashMap<String, u64> = rows
        .iter()
        .map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1) as u64))
        .collect();
    for session in asked {
        if !newest.contains_key(session) {
            sink.close_session(session);
        }
    }
    newest
}

/// Reads and publishes, for each session, the events after the last one its live state was
/// sent, up to the given seq (`None`: the newest stored).
async fn catch_up(
    client: &tokio_postgres::Client,
    sink: &dyn Sink,
    pending: HashMap<String, Option<u64>>,
) {
    let newest = newest_seqs(client, sink, &pending).await;
    for (session, upto) in pending {
        let Some(sent) = sink.sent_seq(&session) else {
            continue;
        };
        let Some(upto) = upto.or_else(|| newest.get(&session).copied()) else {
            continue;
        };
        if upto <= sent {
            continue;
        }
        // A topic that has sent nothing yet belongs to subscribers that read the backlog
        // themselves: the newest event is enough for them (a stream re-reads a skipped seq).
        let after = if sent == 0 {
            upto - 1
        } else {
            sent.max(upto.saturating_sub(CATCH_UP_EVENTS))
        };
        let rows = match client
            .query(
                "SELECT e.seq, e.created_at, e.type, e.body FROM events e
                 JOIN sessions s ON s.pk = e.session_pk
                 WHERE s.id = $1 AND e.seq > $2 AND e.seq <= $3 ORDER BY e.seq",
                &[&session, &(after as i64), &(upto as i64)],
            )
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                tracing::debug!(error = %super::error::describe(&e), "cannot read another process's events");
                continue;
            }
        };
        for row in rows {
            let seq = row.get::<_, i64>(0) as u64;
            let created_at: i64 = row.get(1);
            let event_type: String = row.get(2);
            let body: String = row.get(3);
            let data = format!("{{\"seq\":{seq},\"event\":{body}}}");
            sink.publish(&session, Frame::durable(seq, &event_type, data, created_at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_text_delta_is_split_into_notices_that_fit() {
        let text: String = "é\"x".repeat(5_000);
        let notices = delta_notices(
            "s",
            3,
            &Step::TextDelta {
                delta: text.clone(),
            },
        );
        assert!(notices.len() > 1);
        let mut joined = String::new();
        for n in &notices {
            assert!(n.len() <= MAX_PAYLOAD, "{}", n.len());
            match serde_json::from_str::<Notice>(n).unwrap() {
                Notice::Delta {
                    after: 3,
                    step: Step::TextDelta { delta },
                    ..
                } => joined.push_str(&delta),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(joined, text);
    }

    #[test]
    fn equal_deltas_make_distinct_notices() {
        // The relay sends a batch in one transaction, where PostgreSQL keeps one of equal notices.
        let step = Step::TextDelta { delta: "ab".into() };
        let (a, b) = (delta_notices("s", 3, &step), delta_notices("s", 3, &step));
        assert_eq!((a.len(), b.len()), (1, 1));
        assert_ne!(a[0], b[0]);
        let key = crate::SessionKey {
            pk: 1,
            id: "s".into(),
        };
        assert_ne!(
            turn_notice(&key, TurnSignal::Interrupt),
            turn_notice(&key, TurnSignal::Interrupt)
        );
    }

    #[test]
    fn an_ask_for_many_sessions_is_split_into_notices_that_fit() {
        let sessions: Vec<String> = (0..1_000)
            .map(|i| format!("{i:08}-0000-4000-8000-00000000000\"{i}"))
            .collect();
        let notices = watch_notices(&sessions);
        assert!(notices.len() > 1);
        let mut asked = Vec::new();
        for n in &notices {
            assert!(n.len() <= MAX_PAYLOAD, "{}", n.len());
            match serde_json::from_str::<Notice>(n).unwrap() {
                Notice::Watch { sessions, .. } => asked.extend(sessions),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(asked, sessions);
        assert!(watch_notices(&[]).is_empty());
    }

    #[test]
    fn commits_notify_each_session_once_with_its_newest_seq() {
        let notices =
            committed_notices([("a", Some(3)), ("b", Some(1)), ("a", Some(4)), ("a", None)]);
        assert_eq!(notices.len(), 2);
        assert!(
            notices[0].contains(r#""session":"a","seq":4"#),
            "{}",
            notices[0]
        );
        assert!(
            notices[1].contains(r#""session":"b","seq":1"#),
            "{}",
            notices[1]
        );
    }
}
