//! `GET /v2/sessions/{id}/events` (durable HAST envelopes as JSON) and `…/events/stream` (the
//! same as SSE, with the live volatile events and, on request, `session/snapshot` frames).

use std::sync::Arc;
use std::time::Duration;

use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::body::Query;
use crate::context::AppState;
use crate::context::Caller;
use crate::stream::{self, Ends, Opening, Render};
use sessiond_core::bus::Frame;
use sessiond_core::error::{Error, Result};
use sessiond_core::hast::{self, HastEvent, Projection, Stamp, read};
use sessiond_core::sessions::Sessions;
use sessiond_core::store::{SessionRow, Store, StoredEvent};

/// The envelope stamp of a session: its id and what its agent's engine is.
fn stamp(sessions: &Sessions, row: &SessionRow, agent_engine: &str) -> Stamp {
    Stamp {
        session_id: row.id.clone(),
        engine: hast::engine_of(sessions.harness_of(agent_engine)),
    }
}

async fn agent_engine(sessions: &Sessions, row: &SessionRow) -> Result<String> {
    let engine = sessions
        .store()
        .directory()
        .agent_by_id(&row.agent_id)
        .await?;
    Ok(engine.map(|a| a.engine).unwrap_or_else(|| "{}".to_owned()))
}

/// `GET …/events?after&limit`: `{"events": [...], "has_more": bool}`, durable events with
/// `sequence > after`, in order.
pub async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = Query::parse(&req)?;
    let after = q.uint53("after")?.unwrap_or(0);
    let limit = q.limit(
        "limit",
        100,
        state.sessions.config().limits.history_page_max,
    )? as usize;
    let row = state.sessions.detail_row(&actor, &path).await?;
    let stamp = stamp(
        &state.sessions,
        &row,
        &agent_engine(&state.sessions, &row).await?,
    );
    let (events, more) = read::page(state.sessions.store(), row.pk, &row.id, after, limit).await?;
    let events: Vec<Value> = events.iter().map(|e| e.envelope(&stamp)).collect();
    Ok(HttpResponse::Ok().json(json!({ "events": events, "has_more": more })))
}

/// `GET …/events/stream?after&snapshots`: HAST envelopes as SSE. `Last-Event-ID` wins over
/// `after`; `snapshots=true` adds `session/snapshot` frames (the Session record whenever its
/// status changes, and once when the stream turns live), which have no `id:`.
pub async fn stream(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let after = stream::resume_point(&req, "after")?;
    let snapshots = match Query::parse(&req)?.get("snapshots") {
        None | Some("false" | "0") => false,
        Some("true" | "1") => true,
        Some(_) => return Err(Error::invalid("snapshots: must be true or false")),
    };
    let ends = Ends::new(&state, &actor, &req);
    let row = state.sessions.detail_row(&actor, &path).await?;
    let stamp = stamp(
        &state.sessions,
        &row,
        &agent_engine(&state.sessions, &row).await?,
    );
    let store = state.sessions.store().clone();
    let sub = store.bus().subscribe(&row.id)?;
    let first = hast::first_seq_after(after);
    let projection = read::projection_before(&store, row.pk, &row.id, first).await?;
    let keepalive = Duration::from_millis(state.sessions.config().stream.keepalive_ms);
    Ok(stream::respond(Opening {
        store: store.clone(),
        pk: row.pk,
        after: first - 1,
        sub,
        keepalive,
        ends,
        render: Hast {
            store,
            sessions: state.sessions.clone(),
            pk: row.pk,
            stamp,
            after,
            projection: Arc::new(projection),
            snapshots: snapshots.then(Snapshots::default),
        },
    }))
}

/// What the first subscriber made of a durable frame, for all of them.
struct Durable {
    /// The frames, each with its sequence (a resumed stream drops those it has).
    frames: Vec<(u64, String)>,
    all: Bytes,
    after: Arc<Projection>,
}

/// The record snapshot that followed a frame (`None`: the session is gone).
type Snapshot = Option<(String, Bytes)>;

#[derive(Default)]
struct Snapshots {
    /// `status` and `session_state` of the last snapshot sent.
    last: Option<String>,
}

/// Timeline events after which a session's status may have changed.
fn may_change_status(event_type: &str) -> bool {
    matches!(
        event_type,
        "prompt_submitted"
            | "answer_submitted"
            | "turn_started"
            | "complete"
            | "ask"
            | "interrupted"
            | "sleep"
    )
}

struct Hast {
    store: Store,
    sessions: Sessions,
    pk: i64,
    stamp: Stamp,
    /// The client's resume point: events with a sequence up to it are not sent again.
    after: u64,
    projection: Arc<Projection>,
    snapshots: Option<Snapshots>,
}

/// The timeline event a bus frame carries (`{"seq":N,"event":{…}}` or `{"event":{…}}`).
fn frame_event(frame: &Frame) -> Value {
    serde_json::from_str::<Value>(&frame.data)
        .ok()
        .and_then(|mut v| v.get_mut("event").map(Value::take))
        .unwrap_or(Value::Null)
}

fn render(events: &[HastEvent], stamp: &Stamp) -> Vec<(u64, String)> {
    events
        .iter()
        .map(|e| (e.sequence.unwrap_or(0), e.sse(stamp)))
        .collect()
}

impl Hast {
    /// The record as a snapshot frame, with the state it is compared by.
    async fn snapshot(sessions: &Sessions, pk: i64) -> Result<Snapshot> {
        let row = sessions.store().projections().session_by_pk(pk).await?;
        let Some(row) = row else { return Ok(None) };
        let record = sessions.record_of(row).await?;
        let state = format!("{}/{}", record["status"], record["session_state"]);
        let frame = format!("event: session/snapshot\ndata: {record}\n\n");
        Ok(Some((state, Bytes::from(frame))))
    }

    fn send_snapshot(&mut self, snapshot: &Snapshot, out: &mut Vec<u8>) {
        let (Some(snapshots), Some((state, frame))) = (self.snapshots.as_mut(), snapshot) else {
            return;
        };
        if snapshots.last.as_ref() != Some(state) {
            snapshots.last = Some(state.clone());
            out.extend_from_slice(frame);
        }
    }
}

impl Render for Hast {
    async fn stored(&mut self, events: Vec<StoredEvent>) -> Result<Bytes> {
        let starts = read::run_starts(&self.store, self.pk, &events).await?;
        let projection = Arc::make_mut(&mut self.projection);
        read::know_model(&self.store, self.pk, projection, &events).await?;
        let hast = read::apply_stored(projection, &self.stamp.session_id, &events, &starts);
        let mut out = String::new();
        for e in hast
            .iter()
            .filter(|e| e.sequence.is_some_and(|s| s > self.after))
        {
            out.push_str(&e.sse(&self.stamp));
        }
        Ok(Bytes::from(out))
    }

    async fn live(&mut self, frame: Arc<Frame>) -> Result<Bytes> {
        let Some(seq) = frame.seq else {
            // Every subscriber makes the same event of a delta: make it once.
            let cell = frame.cache.slot::<OnceCell<Bytes>>();
            let bytes = cell
                .get_or_init(|| async {
                    self.projection
                        .volatile(
                            &self.stamp.session_id,
                            frame.created_at,
                            &frame_event(&frame),
                        )
                        .map(|e| Bytes::from(e.sse(&self.stamp)))
                        .unwrap_or_default()
                })
                .await;
            return Ok(bytes.clone());
        };
        let cell = frame.cache.slot::<OnceCell<Durable>>();
        let made = cell
            .get_or_try_init(|| async {
                let event = frame_event(&frame);
                let start = if &*frame.event_type == "turn_started" {
                    read::run_start(&self.store, self.pk, seq).await?
                } else {
                    None
                };
                let mut after = (*self.projection).clone();
                if &*frame.event_type == "usage" {
                    after.set_answered_model(read::answered_model(&self.store, self.pk).await?);
                }
                let events = after.apply(
                    &self.stamp.session_id,
                    seq,
                    frame.created_at,
                    &event,
                    start.as_ref(),
                );
                let frames = render(&events, &self.stamp);
                let all = Bytes::from(frames.iter().map(|(_, f)| f.as_str()).collect::<String>());
                Ok::<_, Error>(Durable {
                    frames,
                    all,
                    after: Arc::new(after),
                })
            })
            .await?;
        self.projection = Arc::clone(&made.after);
        let whole = made.frames.iter().all(|(s, _)| *s > self.after);
        let snapshot = if self.snapshots.is_some() && may_change_status(&frame.event_type) {
            let cell = frame.cache.slot::<OnceCell<Snapshot>>();
            cell.get_or_try_init(|| Self::snapshot(&self.sessions, self.pk))
                .await?
                .clone()
        } else {
            None
        };
        if whole && snapshot.is_none() {
            // The common case: the shared bytes as they are.
            return Ok(made.all.clone());
        }
        let mut out: Vec<u8> = Vec::new();
        for (_, f) in made.frames.iter().filter(|(s, _)| *s > self.after) {
            out.extend_from_slice(f.as_bytes());
        }
        self.send_snapshot(&snapshot, &mut out);
        Ok(Bytes::from(out))
    }

    async fn went_live(&mut self) -> Result<Bytes> {
        if self.snapshots.is_none() {
            return Ok(Bytes::new());
        }
        let snapshot = Self::snapshot(&self.sessions, self.pk).await?;
        let mut out = Vec::new();
        self.send_snapshot(&snapshot, &mut out);
        Ok(Bytes::from(out))
    }
}
