//! The SSE half of `/a2a`'s JSON-RPC binding: `SendStreamingMessage` and `SubscribeToTask`
//! answer `text/event-stream`, each event's data a JSON-RPC response whose `result` is a
//! `StreamResponse` (`sessiond_core::a2a::stream`). The stream is the shared resumable one
//! (`api::stream`): events carry `id: <seq>`, so a client that lost its stream calls
//! `SubscribeToTask` with `Last-Event-ID` and gets what it missed; it ends when the turn ends or
//! asks, and, like every stream, on hang-up, revocation, deletion and shutdown.

use std::sync::Arc;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::Value;

use super::context::AppState;
use super::stream::{self, Ends, Opening, Render};
use sessiond_core::a2a::error::{A2aError, UNSUPPORTED_OPERATION, response};
use sessiond_core::a2a::stream::Updates;
use sessiond_core::a2a::{Server, send_message, task};
use sessiond_core::bus::Frame;
use sessiond_core::error::Result;
use sessiond_core::store::{SessionRow, StoredEvent};

struct A2aRender {
    id: Value,
    updates: Updates,
}

impl A2aRender {
    fn frame(&self, seq: Option<u64>, result: Value, out: &mut String) {
        if let Some(seq) = seq {
            out.push_str(&format!("id: {seq}\n"));
        }
        out.push_str(&format!("data: {}\n\n", success(&self.id, result)));
    }

    /// The `task` response, if it has not gone out yet.
    fn first(&mut self, out: &mut String) {
        if let Some(t) = self.updates.first() {
            self.frame(None, t, out);
        }
    }

    fn event(&mut self, seq: u64, created_at: i64, event: &Value, out: &mut String) {
        for r in self.updates.event(seq, created_at, event) {
            self.frame(Some(seq), r, out);
        }
    }
}

impl Render for A2aRender {
    async fn stored(&mut self, events: Vec<StoredEvent>) -> Result<Bytes> {
        let mut out = String::new();
        self.first(&mut out);
        for e in &events {
            if let Ok(event) = serde_json::from_str::<Value>(&e.body) {
                self.event(e.seq, e.created_at, &event, &mut out);
            }
        }
        Ok(Bytes::from(out))
    }

    async fn live(&mut self, f: Arc<Frame>) -> Result<Bytes> {
        let mut out = String::new();
        self.first(&mut out);
        if let Some(seq) = f.seq
            && let Ok(data) = serde_json::from_str::<Value>(&f.data)
        {
            self.event(seq, f.created_at, &data["event"], &mut out);
        }
        Ok(Bytes::from(out))
    }

    async fn went_live(&mut self) -> Result<Bytes> {
        let mut out = String::new();
        self.first(&mut out);
        Ok(Bytes::from(out))
    }

    fn ended(&self) -> bool {
        self.updates.ended()
    }
}

/// The stream of `row`'s task after timeline seq `after`, opening with `first`.
fn open(
    state: &web::Data<AppState>,
    server: &Server<'_>,
    req: &HttpRequest,
    id: Value,
    row: &SessionRow,
    after: u64,
    first: Value,
) -> HttpResponse {
    let store = state.sessions.store().clone();
    let sub = match store.bus().subscribe(&row.id) {
        Ok(sub) => sub,
        Err(e) => return refused(&id, e.into()),
    };
    let keepalive = Duration::from_millis(state.sessions.config().stream.keepalive_ms);
    stream::respond(Opening {
        store,
        pk: row.pk,
        after,
        sub,
        keepalive,
        ends: Ends::new(state, server.actor, req),
        render: A2aRender {
            id,
            updates: Updates::new(&row.id, first),
        },
    })
}

/// `SendStreamingMessage`: the message taken as `SendMessage` takes it, then its task followed
/// from the input on.
pub async fn send(
    state: &web::Data<AppState>,
    server: &Server<'_>,
    req: &HttpRequest,
    id: Value,
    params: &Value,
) -> Result<HttpResponse> {
    let sent = match send_message::submit(server, params).await {
        Ok(sent) => sent,
        Err(e) => return Ok(refused(&id, e)),
    };
    let row = match server
        .sessions
        .detail_row(server.actor, &sent.submitted.key.id)
        .await
    {
        Ok(row) => row,
        Err(e) => return Ok(refused(&id, e.into())),
    };
    let first = match task::view(server.sessions, &row, sent.history_length).await {
        Ok((_, t)) => t,
        Err(e) => return Ok(refused(&id, e.into())),
    };
    let after = sent.submitted.input_seq;
    Ok(open(state, server, req, id, &row, after, first))
}

/// `SubscribeToTask`: the task as it is, then its updates; with `Last-Event-ID`, the updates
/// after that event (a dropped stream resumed). A completed, failed or canceled task has no
/// updates to follow.
pub async fn subscribe(
    state: &web::Data<AppState>,
    server: &Server<'_>,
    req: &HttpRequest,
    id: Value,
    params: &Value,
) -> Result<HttpResponse> {
    let task_id = params.get("id").and_then(Value::as_str).unwrap_or("");
    let row = match task::find(server.sessions, server.actor, server.agent, task_id).await {
        Ok(row) => row,
        Err(e) => return Ok(refused(&id, e)),
    };
    let resume = match stream::resume_point(req, "since") {
        Ok(seq) => seq,
        Err(e) => return Ok(refused(&id, e.into())),
    };
    let (state_now, first) = match task::view(server.sessions, &row, None).await {
        Ok(v) => v,
        Err(e) => return Ok(refused(&id, e.into())),
    };
    if resume == 0 && state_now.is_terminal() {
        return Ok(refused(
            &id,
            A2aError::new(
                UNSUPPORTED_OPERATION,
                format!(
                    "the task is {}: there is nothing to follow",
                    state_now.name()
                ),
            ),
        ));
    }
    let after = if resume > 0 {
        resume
    } else {
        row.last_event_seq
    };
    Ok(open(state, server, req, id, &row, after, first))
}

/// The JSON-RPC error response of a call that failed before its stream started.
fn refused(id: &Value, e: A2aError) -> HttpResponse {
    HttpResponse::Ok().json(response(id, Err(e)))
}

/// A JSON-RPC success response (the data of each SSE event).
fn success(id: &Value, result: Value) -> Value {
    response(id, Ok(result))
}
