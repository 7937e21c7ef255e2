//! A session's timeline as Server-Sent Events, resumable without gaps: the machinery every API
//! family's stream shares. A family supplies a [`Render`] that turns stored events and live
//! frames into its own SSE text.
//!
//! Order of operations is what makes resume gap-free (invariant 5): subscribe to the live bus
//! first, then replay the stored backlog after the client's cursor, then the volatile tail of the
//! running turn, then live frames, dropping any durable frame whose seq was already sent. Idle
//! streams get `: keep-alive` comments.
//!
//! A stream ends when its client hangs up (the connection layer sees the end of the client's
//! side at once, so its descriptor and subscriber slot are freed without waiting for a write to
//! fail), when the credential it was opened with is revoked (an API key revoked, a browser session
//! signed out: on any process of the database, within `auth::REVOCATION_BOUND`) or expires, when
//! its session is deleted, and at shutdown.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::stream;
use tokio::sync::{broadcast, watch};
use tokio::time::{Instant, Sleep};

use super::body::{Query, parse_uint53};
use super::connection::PeerClosed;
use super::context::AppState;
use sessiond_core::auth::{self, Revoked, StreamCredential};
use sessiond_core::bus::{self, Frame, Subscription};
use sessiond_core::clock;
use sessiond_core::error::Result;
use sessiond_core::metrics::METRICS;
use sessiond_core::sessions::{Actor, Channel};
use sessiond_core::store::{Store, StoredEvent};

/// Stored events read per backlog query.
const BACKLOG_CHUNK: u32 = 500;

/// Most bytes of live frames sent in one write.
const LIVE_BATCH_BYTES: usize = 64 * 1024;

/// How one API family writes its frames.
pub trait Render: 'static {
    /// SSE text for stored events (the backlog, ascending seq). `Err` ends the stream.
    fn stored(&mut self, events: Vec<StoredEvent>) -> impl Future<Output = Result<Bytes>>;
    /// SSE text for a frame of the volatile tail or the live bus (durable frames already sent are
    /// never passed).
    fn live(&mut self, frame: Arc<Frame>) -> impl Future<Output = Result<Bytes>>;
    /// SSE text sent once, when the backlog and the tail are out and the stream turns live.
    fn went_live(&mut self) -> impl Future<Output = Result<Bytes>> {
        async { Ok(Bytes::new()) }
    }
    /// Whether the stream has said all it means to: checked before every write, so a family
    /// whose streams end with their subject (an A2A task's turn) ends after its last frame.
    fn ended(&self) -> bool {
        false
    }
}

/// The resume point: `Last-Event-ID` (what `EventSource` sends on reconnect, to the URL it first
/// opened) wins over the query parameter `param`.
pub fn resume_point(req: &HttpRequest, param: &str) -> Result<u64> {
    if let Some(id) = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        return parse_uint53("Last-Event-ID", id);
    }
    Ok(Query::parse(req)?.uint53(param)?.unwrap_or(0))
}

/// What ends a stream besides its session and the server: the client hanging up and the
/// credential it was opened with being revoked or expiring. Made before the session is read, so no
/// revocation is missed in between.
pub struct Ends {
    app: web::Data<AppState>,
    peer: Option<PeerClosed>,
    credential: StreamCredential,
    revocations: broadcast::Receiver<Revoked>,
    /// Keeps the credential on the list the revocation watcher checks while the stream is open.
    _hold: Option<auth::StreamHold>,
    /// When the credential expires by itself, once looked up (`None` inside: never).
    expires_at: Option<Option<i64>>,
}

/// The credential a stream of `actor` ends with when it is revoked or expires: its key, or its
/// browser session; any other credential does not end a stream.
pub fn credential_of(actor: &Actor, req: &HttpRequest) -> StreamCredential {
    match actor.channel.credential() {
        Channel::ApiKey { key_id } => StreamCredential::Key(key_id.clone()),
        Channel::Browser => req
            .cookie(auth::COOKIE)
            .map(|c| StreamCredential::Browser(sessiond_core::secret::token_hash(c.value())))
            .unwrap_or(StreamCredential::None),
        _ => StreamCredential::None,
    }
}

impl Ends {
    pub fn new(app: &web::Data<AppState>, actor: &Actor, req: &HttpRequest) -> Ends {
        let revocations = app.auth.revocations();
        let credential = credential_of(actor, req);
        Ends {
            app: app.clone(),
            peer: req.conn_data::<PeerClosed>().cloned(),
            _hold: app.auth.hold_stream(&credential),
            credential,
            revocations,
            expires_at: None,
        }
    }

    /// When the credential expires by itself (looked up once per stream).
    async fn expiry(&mut self) -> Option<i64> {
        if self.expires_at.is_none() {
            self.expires_at = Some(self.app.auth.expires_at(&self.credential).await);
        }
        self.expires_at.flatten()
    }
}

/// Counts the stream in `sessiond_sse_subscribers` while it exists.
struct OpenStream;

impl OpenStream {
    fn new() -> OpenStream {
        METRICS.sse_subscribers.inc();
        OpenStream
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        METRICS.sse_subscribers.dec();
    }
}

enum Phase {
    Backlog,
    Tail,
    GoLive,
    Live,
    Done,
}

struct StreamState<R> {
    store: Store,
    pk: i64,
    /// The newest timeline seq sent.
    last: u64,
    sub: Subscription,
    phase: Phase,
    keepalive: Duration,
    /// Fires `keepalive` after the last write. It is moved only when it fires (to the last
    /// write's time plus `keepalive` if something was written since), so a busy stream does not
    /// touch the timer once per frame.
    keepalive_timer: Pin<Box<Sleep>>,
    last_write: Instant,
    /// Fires when the credential expires by itself (browser sessions); made once per stream.
    expiry_timer: Option<Pin<Box<Sleep>>>,
    closed: watch::Receiver<bool>,
    /// The backlog already carried an output past the tail's start: the tail is stale.
    tail_settled: bool,
    /// The seq the client resumed after (events up to it are the client's already).
    resumed_after: u64,
    /// The stream went live once (a re-read of the backlog does not announce it again).
    live_once: bool,
    ends: Ends,
    render: R,
    _open: OpenStream,
}

/// What a stream starts from.
pub struct Opening<R> {
    pub store: Store,
    pub pk: i64,
    /// Timeline events with `seq > after` are replayed.
    pub after: u64,
    /// Made before the backlog is read.
    pub sub: Subscription,
    pub keepalive: Duration,
    pub ends: Ends,
    pub render: R,
}

/// The `200 text/event-stream` response of a stream.
pub fn respond<R: Render>(o: Opening<R>) -> HttpResponse {
    let st = StreamState {
        closed: o.store.bus().closed(),
        store: o.store,
        pk: o.pk,
        last: o.after,
        sub: o.sub,
        phase: Phase::Backlog,
        keepalive_timer: Box::pin(tokio::time::sleep(o.keepalive)),
        last_write: Instant::now(),
        expiry_timer: None,
        keepalive: o.keepalive,
        tail_settled: false,
        resumed_after: o.after,
        live_once: false,
        ends: o.ends,
        render: o.render,
        _open: OpenStream::new(),
    };
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream::unfold(st, next_chunk))
}

type Chunk = std::result::Result<Bytes, actix_web::Error>;

/// The bytes of one write: frames rendered once and shared by every subscriber go out as they
/// are (no copy) when they come alone, and are joined when several are ready at once.
#[derive(Default)]
struct Out {
    parts: Vec<Bytes>,
    len: usize,
}

impl Out {
    fn push(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.len += bytes.len();
            self.parts.push(bytes);
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn into_bytes(mut self) -> Bytes {
        if self.parts.len() == 1 {
            return self.parts.remove(0);
        }
        let mut all = Vec::with_capacity(self.len);
        for p in &self.parts {
            all.extend_from_slice(p);
        }
        Bytes::from(all)
    }
}

impl<R: Render> StreamState<R> {
    /// Appends a live frame unless it is a durable one already sent. A durable frame that skips
    /// a seq (with several processes on one database, frames of one session may reach this
    /// process out of order or not at all) sends the stream back to the backlog, which reads
    /// the skipped events and this one from the store; the live frames after it follow.
    async fn push_live(&mut self, frame: Arc<Frame>, out: &mut Out) {
        if let Some(seq) = frame.seq {
            if seq <= self.last {
                return;
            }
            if seq > self.last + 1 {
                METRICS.sse_backlog_rereads.inc();
                self.phase = Phase::Backlog;
                return;
            }
            self.last = seq;
        }
        match self.render.live(frame).await {
            Ok(bytes) => out.push(bytes),
            Err(e) => {
                tracing::warn!(error = %e, "event stream frame failed");
                self.phase = Phase::Done;
            }
        }
    }

    /// Appends the live frames that are already waiting (up to [`LIVE_BATCH_BYTES`]). A stream
    /// that fell behind is ended after what it has (its client resumes by seq).
    async fn drain_ready(&mut self, out: &mut Out) {
        while out.len < LIVE_BATCH_BYTES && matches!(self.phase, Phase::Live) {
            match self.sub.rx.try_recv() {
                Ok(frame) => self.push_live(frame, out).await,
                Err(broadcast::error::TryRecvError::Empty) => return,
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    METRICS.sse_lagged.inc();
                    self.phase = Phase::Done;
                }
                Err(broadcast::error::TryRecvError::Closed) => self.phase = Phase::Done,
            }
        }
    }

    /// The credential's own expiry as a timer, made on the first call.
    async fn expiry_timer(&mut self) {
        if self.expiry_timer.is_none() {
            let Some(at) = self.ends.expiry().await else {
                return;
            };
            let left = at.saturating_add(1).saturating_sub(clock::now_ms());
            self.expiry_timer = Some(Box::pin(tokio::time::sleep(Duration::from_millis(
                left.max(0) as u64,
            ))));
        }
    }
}

/// Is there an event that settles the volatile tail (an output) with a seq in `(after, upto]`?
/// Read newest first: the settling output is usually the last event the client has. A failed
/// read counts as settled: a tail left out loses only deltas whose durable text follows, while a
/// stale one would show a finished turn's text again.
async fn settled_between(store: &Store, pk: i64, after: u64, upto: u64) -> bool {
    let mut before = upto.saturating_add(1);
    loop {
        let events = match store
            .log()
            .events_before(pk, Some(before), BACKLOG_CHUNK)
            .await
        {
            Ok(events) => events,
            Err(e) => {
                tracing::warn!(error = %e, "event stream tail check failed; tail left out");
                return true;
            }
        };
        if events
            .iter()
            .any(|e| e.seq > after && bus::settles_tail(&e.event_type))
        {
            return true;
        }
        match events.first() {
            Some(oldest) if oldest.seq > after + 1 && events.len() as u32 == BACKLOG_CHUNK => {
                before = oldest.seq;
            }
            _ => return false,
        }
    }
}

async fn next_chunk<R: Render>(mut st: StreamState<R>) -> Option<(Chunk, StreamState<R>)> {
    loop {
        if st.render.ended() {
            return None;
        }
        match st.phase {
            Phase::Done => return None,
            Phase::Backlog => {
                let (pk, after) = (st.pk, st.last);
                let events = match st.store.log().events_after(pk, after, BACKLOG_CHUNK).await {
                    Ok(events) => events,
                    Err(e) => {
                        tracing::warn!(error = %e, "event stream backlog read failed");
                        st.phase = Phase::Done;
                        continue;
                    }
                };
                if (events.len() as u32) < BACKLOG_CHUNK {
                    st.phase = Phase::Tail;
                }
                let Some(last) = events.last().map(|e| e.seq) else {
                    // Announce the reconnect delay once, before anything else is live.
                    if matches!(st.phase, Phase::Tail) && after == 0 {
                        return Some((Ok(Bytes::from_static(b"retry: 1000\n\n")), st));
                    }
                    continue;
                };
                if events
                    .iter()
                    .any(|e| e.seq > st.sub.tail_after && bus::settles_tail(&e.event_type))
                {
                    st.tail_settled = true;
                }
                st.last = last;
                match st.render.stored(events).await {
                    Ok(out) if out.is_empty() => continue,
                    Ok(out) => return Some((Ok(out), st)),
                    Err(e) => {
                        tracing::warn!(error = %e, "event stream backlog failed");
                        st.phase = Phase::Done;
                    }
                }
            }
            Phase::Tail => {
                st.phase = Phase::GoLive;
                // The tail belongs after durable output seq `tail_after`; if the backlog already
                // carried a later output, the tail was settled by it and is stale. Inputs appended
                // after `tail_after` (a note, a steer) leave it current.
                if !st.tail_settled
                    && st.sub.tail_after < st.resumed_after
                    && !st.sub.tail.is_empty()
                {
                    // The client resumed past the tail's start, so the backlog did not read the
                    // events in between; one of them may be the output that settled the tail
                    // before this process's bus heard of it (the writer answers before it
                    // publishes; another process's frames arrive later still).
                    st.tail_settled =
                        settled_between(&st.store, st.pk, st.sub.tail_after, st.resumed_after)
                            .await;
                }
                if !st.tail_settled && st.last >= st.sub.tail_after && !st.sub.tail.is_empty() {
                    let tail = std::mem::take(&mut st.sub.tail);
                    let mut out = Out::default();
                    for frame in tail {
                        match st.render.live(frame).await {
                            Ok(bytes) => out.push(bytes),
                            Err(_) => st.phase = Phase::Done,
                        }
                    }
                    if !out.is_empty() {
                        return Some((Ok(out.into_bytes()), st));
                    }
                }
            }
            Phase::GoLive => {
                st.phase = Phase::Live;
                if std::mem::replace(&mut st.live_once, true) {
                    // Back from re-reading a skipped seq: the stream was live already.
                    continue;
                }
                // Idle from here on (the backlog and the tail were writes).
                st.last_write = Instant::now();
                match st.render.went_live().await {
                    Ok(out) if out.is_empty() => {}
                    Ok(out) => return Some((Ok(out), st)),
                    Err(_) => st.phase = Phase::Done,
                }
            }
            Phase::Live => {
                st.expiry_timer().await;
                let expiry = async {
                    match &mut st.expiry_timer {
                        Some(timer) => timer.as_mut().await,
                        None => std::future::pending().await,
                    }
                };
                let peer = async {
                    match &mut st.ends.peer {
                        Some(p) => p.wait().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    msg = st.sub.rx.recv() => match msg {
                        Ok(frame) => {
                            // The writer answered the request that made this frame before it
                            // woke the subscribers, so no answer waits behind their writes.
                            let mut out = Out::default();
                            st.push_live(frame, &mut out).await;
                            // Whatever else is already waiting goes out in the same write: under
                            // fan-out, one wake-up and one write per batch, not per frame.
                            st.drain_ready(&mut out).await;
                            if out.is_empty() {
                                continue;
                            }
                            st.last_write = Instant::now();
                            return Some((Ok(out.into_bytes()), st));
                        }
                        // Too slow: end the stream; the client resumes from its last seq.
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            tracing::debug!(session = %st.sub.session_id(), "cut off a slow event stream");
                            METRICS.sse_lagged.inc();
                            st.phase = Phase::Done;
                        }
                        Err(broadcast::error::RecvError::Closed) => st.phase = Phase::Done,
                    },
                    () = st.keepalive_timer.as_mut() => {
                        let due = st.last_write + st.keepalive;
                        let now = Instant::now();
                        if due > now {
                            // Written to since the timer was set: idle from then on.
                            st.keepalive_timer.as_mut().reset(due);
                            continue;
                        }
                        st.last_write = now;
                        st.keepalive_timer.as_mut().reset(now + st.keepalive);
                        return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st));
                    }
                    _ = st.closed.changed() => st.phase = Phase::Done,
                    () = peer => st.phase = Phase::Done,
                    () = expiry => st.phase = Phase::Done,
                    revoked = st.ends.revocations.recv() => match revoked {
                        Ok(r) if st.ends.credential.is_revoked_by(&r) => st.phase = Phase::Done,
                        Ok(_) => {}
                        // Missed some: ask about this stream's own credential.
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            if !st.ends.app.auth.still_valid(&st.ends.credential).await {
                                st.phase = Phase::Done;
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => {}
                    },
                }
            }
        }
    }
}
