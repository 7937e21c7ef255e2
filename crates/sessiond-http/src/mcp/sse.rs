//! One MCP stream as Server-Sent Events: its kept messages after a point, then each new one as it
//! is written, each with the id `<stream>-<n>` a resume names; it ends after the stream's last
//! message, when the client hangs up (the stream's messages stay for a resume), when the
//! credential it was opened with is revoked, or at shutdown.

use std::sync::Arc;
use std::time::Duration;

use actix_web::HttpResponse;
use actix_web::http::header;
use actix_web::web::{self, Bytes};
use futures_util::stream;
use tokio::sync::{broadcast, watch};

use crate::context::AppState;
use sessiond_core::auth::{Revoked, StreamCredential, StreamHold};
use sessiond_core::mcp::StreamLog;

/// The reconnection delay a client is told (the SSE `retry` field), in milliseconds.
const RETRY_MS: u64 = 1000;

struct State {
    log: Arc<StreamLog>,
    /// The newest message number sent.
    sent: u64,
    newest: watch::Receiver<(u64, bool)>,
    closed: watch::Receiver<bool>,
    keepalive: Duration,
    /// The priming event (an id with empty data) is still to be sent.
    prime: bool,
    done: bool,
    credential: StreamCredential,
    revocations: broadcast::Receiver<Revoked>,
    app: web::Data<AppState>,
    /// Keeps the credential on the list the revocation watcher checks while the stream is open.
    _hold: Option<StreamHold>,
}

type Chunk = std::result::Result<Bytes, actix_web::Error>;

/// The `200 text/event-stream` answer: messages after `after`, then live ones.
pub fn respond(
    state: &web::Data<AppState>,
    credential: StreamCredential,
    log: Arc<StreamLog>,
    after: u64,
    prime: bool,
) -> HttpResponse {
    let st = State {
        revocations: state.auth.revocations(),
        _hold: state.auth.hold_stream(&credential),
        credential,
        app: state.clone(),
        newest: log.watch(),
        log,
        sent: after,
        closed: state.sessions.store().bus().closed(),
        keepalive: Duration::from_millis(state.sessions.config().stream.keepalive_ms),
        prime,
        done: false,
    };
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(stream::unfold(st, next))
}

async fn next(mut st: State) -> Option<(Chunk, State)> {
    if st.done {
        return None;
    }
    if st.prime {
        st.prime = false;
        let id = st.log.event_id(st.sent);
        return Some((
            Ok(Bytes::from(format!(
                "id: {id}\nretry: {RETRY_MS}\ndata: \n\n"
            ))),
            st,
        ));
    }
    loop {
        let (newest, finished) = *st.newest.borrow_and_update();
        if newest > st.sent {
            let mut out = String::new();
            for (n, message) in st.log.after(st.sent) {
                out.push_str(&format!(
                    "id: {}\nevent: message\ndata: {message}\n\n",
                    st.log.event_id(n)
                ));
                st.sent = n;
            }
            // Messages the window no longer holds are skipped (the standalone stream's oldest).
            st.sent = st.sent.max(newest);
            return Some((Ok(Bytes::from(out)), st));
        }
        if finished || *st.closed.borrow() {
            return None;
        }
        tokio::select! {
            changed = st.newest.changed() => {
                if changed.is_err() {
                    st.done = true;
                }
            }
            _ = st.closed.changed() => return None,
            revoked = st.revocations.recv() => match revoked {
                Ok(r) if st.credential.is_revoked_by(&r) => return None,
                Ok(_) | Err(broadcast::error::RecvError::Closed) => {}
                // Missed some: ask about this stream's own credential.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if !st.app.auth.still_valid(&st.credential).await {
                        return None;
                    }
                }
            },
            () = tokio::time::sleep(st.keepalive) => {
                return Some((Ok(Bytes::from_static(b": keep-alive\n\n")), st));
            }
        }
    }
}
