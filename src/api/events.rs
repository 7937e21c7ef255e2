//! `GET …/events`: the session's timeline as Server-Sent Events, resumable without gaps.
//!
//! Order of operations is what makes resume gap-free (invariant 5): subscribe to the live bus
//! first, then replay the stored backlog after the client's cursor, then the volatile tail of the
//! running turn, then live frames, dropping any durable frame whose seq was already sent.
//! Durable frames carry `id: <seq>` so `EventSource` resumes with `Last-Event-ID` on its own.
//!
//! A stream ends when its client hangs up (the connection layer sees the end of the client's
//! side at once, so its descriptor and subscriber slot are freed without waiting for a write to
//! fail), when the credential it was opened with is revoked, when its session is deleted, and at
//! shutdown.

use std::time::Duration;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::stream;
use tokio::sync::{broadcast, watch};

use super::body::{Query, parse_uint53};
use super::connection::PeerClosed;
use super::context::AppState;
use crate::auth::{self, Revoked, StreamCredential};
use crate::bus::{self, Frame, Subscription};
use crate::error::Result;
use crate::metrics::METRICS;
use crate::sessions::{Actor, Channel};
use crate::store::{self, Store, StoredEvent};

/// Stored events read per backlog query.
const BACKLOG_CHUNK: u32 = 500;

enum Phase {
    Backlog,
    Tail,
    Live,
    Done,
}

struct StreamState {
    app: web::Data<AppState>,
    store: Store,
    pk: i64,
    last: u64,
    sub: Subscription,
    phase: Phase,
    keepalive: Duration,
    closed: watch::Receiver<bool>,
    /// The client hung up.
    peer: Option<PeerClosed>,
    credential: StreamCredential,
    revocations: broadcast::Receiver<Revoked>,
    /// The backlog already carried an output past the tail's start: the tail is stale.
    tail_settled: bool,
    _open: OpenStream,
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

fn durable_frame(e: &StoredEvent) -> String {
    format!(
        "id: {}\ndata: {{\"seq\":{},\"event\":{}}}\n\n",
        e.seq, e.seq, e.body
    )
}

fn live_frame(f: &Frame) -> String {
    match f.seq {
        Some(seq) => format!("id: {seq}\ndata: {}\n\n", f.data),
        None => format!("data: {}\n\n", f.data),
    }
}

/// The resume point: `Last-Event-ID` (what `EventSource` sends on reconnect) wins over `since`.
fn resume_point(req: &HttpRequest) -> Result<u64> {
    if let Some(id) = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        return parse_uint53("Last-Event-ID", id);
    }
    Ok(Query::parse(req)?.uint53("since")?.unwrap_or(0))
}

pub async fn events(
    state: web::Data<AppState>,
    actor: Actor,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let since = resume_point(&req)?;
    // Listen for revocations before the session is read, so none is missed in between.
    let revocations = state.auth.revocations();
    let credential = match &actor.channel {
        Channel::ApiKey { key_id } => StreamCredential::Key(key_id.clone()),
        Channel::Browser => req
            .cookie(auth::COOKIE)
            .map(|c| StreamCredential::Browser(crate::secret::token_hash(c.value())))
            .unwrap_or(StreamCredential::None),
        _ => StreamCredential::None,
    };
    let row = state.sessions.detail_row(&actor, &path.1).await?;
    let store = state.sessions.store().clone();
    let sub = store.bus().subscribe(&row.id)?;
    let cfg = &state.sessions.config().stream;
    let st = StreamState {
        app: state.clone(),
        closed: store.bus().closed(),
        store,
        pk: row.pk,
        last: since,
        sub,
        phase: Phase::Backlog,
        keepalive: Duration::from_millis(cfg.keepalive_ms),
        peer: req.conn_data::<PeerClosed>().cloned(),
        credential,
        revocations,
        tail_settled: false,
        _open: OpenStream::new(),
    };
    let body = stream::unfold(st, next_chunk);
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body))
}

type Chunk = std::result::Result<web::Bytes, actix_web::Error>;

/// Most bytes of live frames sent in one write.
const LIVE_BATCH_BYTES: usize = 64 * 1024;

impl StreamState {
    /// Appends a live frame unless it is a durable one already sent.
    fn push_live(&mut self, frame: &Frame, out: &mut String) {
        if let Some(seq) = frame.seq {
            if seq <= self.last {
                return;
            }
            self.last = seq;
        }
        out.push_str(&live_frame(frame));
    }

    /// Appends the live frames that are already waiting (up to [`LIVE_BATCH_BYTES`]). A stream
    /// that fell behind is ended after what it has (its client resumes by seq).
    fn drain_ready(&mut self, out: &mut String) {
        while out.len() < LIVE_BATCH_BYTES {
            match self.sub.rx.try_recv() {
                Ok(frame) => self.push_live(&frame, out),
                Err(broadcast::error::TryRecvError::Empty) => return,
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    METRICS.sse_lagged.inc();
                    self.phase = Phase::Done;
                    return;
                }
                Err(broadcast::error::TryRecvError::Closed) => {
                    self.phase = Phase::Done;
                    return;
                }
            }
        }
    }
}

async fn next_chunk(mut st: StreamState) -> Option<(Chunk, StreamState)> {
    loop {
        match st.phase {
            Phase::Done => return None,
            Phase::Backlog => {
                let (pk, after) = (st.pk, st.last);
                let events = match st
                    .store
                    .read(move |c| store::events_after(c, pk, after, BACKLOG_CHUNK))
                    .await
                {
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
                if events.is_empty() {
                    // Announce the reconnect delay once, before anything else is live.
                    if matches!(st.phase, Phase::Tail) && after == 0 {
                        return Some((Ok(web::Bytes::from_static(b"retry: 1000\n\n")), st));
                    }
                    continue;
                }
                let mut out = String::new();
                for e in &events {
                    out.push_str(&durable_frame(e));
                    if e.seq > st.sub.tail_after && bus::settles_tail(&e.event_type) {
                        st.tail_settled = true;
                    }
                }
                st.last = events.last().map(|e| e.seq).unwrap_or(st.last);
                return Some((Ok(web::Bytes::from(out)), st));
            }
            Phase::Tail => {
                st.phase = Phase::Live;
                // The tail belongs after durable output seq `tail_after`; if the backlog already
                // carried a later output, the tail was settled by it and is stale. Inputs appended
                // after `tail_after` (a note, a steer) leave it current.
                if !st.tail_settled && st.last >= st.sub.tail_after && !st.sub.tail.is_empty() {
                    let out: String = st.sub.tail.iter().map(|f| live_frame(f)).collect();
                    st.sub.tail.clear();
                    return Some((Ok(web::Bytes::from(out)), st));
                }
            }
            Phase::Live => {
                let keepalive = tokio::time::sleep(st.keepalive);
                let peer = async {
                    match &mut st.peer {
                        Some(p) => p.wait().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    msg = st.sub.rx.recv() => match msg {
                        Ok(frame) => {
                            let mut out = String::new();
                            st.push_live(&frame, &mut out);
                            // Whatever else is already waiting goes out in the same write: under
                            // fan-out, one wake-up and one write per batch, not per frame.
                            st.drain_ready(&mut out);
                            if out.is_empty() {
                                continue;
                            }
                            return Some((Ok(web::Bytes::from(out)), st));
                        }
                        // Too slow: end the stream; the client resumes from its last seq.
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            tracing::debug!(session = %st.sub.session_id(), "cut off a slow event stream");
                            METRICS.sse_lagged.inc();
                            st.phase = Phase::Done;
                        }
                        Err(broadcast::error::RecvError::Closed) => st.phase = Phase::Done,
                    },
                    () = keepalive => {
                        return Some((Ok(web::Bytes::from_static(b": keep-alive\n\n")), st));
                    }
                    _ = st.closed.changed() => st.phase = Phase::Done,
                    () = peer => st.phase = Phase::Done,
                    revoked = st.revocations.recv() => match revoked {
                        Ok(r) if st.credential.is_revoked_by(&r) => st.phase = Phase::Done,
                        Ok(_) => {}
                        // Missed some: ask about this stream's own credential.
                        Err(broadcast::error::RecvError::Lagged(_)) => {
                            if !st.app.auth.still_valid(&st.credential).await {
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
