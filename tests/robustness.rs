//! Robustness over the real binary: SSE framing and resume (R34, invariant 5), concurrent appends
//! (invariant 2), bad input changing nothing (invariant 9), JSON 404s, graceful shutdown, crash
//! recovery (invariants 3 and 8), online backup and refusing a newer schema.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::*;
use reqwest::Method;
use serde_json::{Value, json};

const EVENTS_SCHEMA: &str =
    "GET_v1_ws__workspaceSlug__agent_sessions__sessionId__events.response.json";

// ---------------------------------------------------------------------------------------------
// Small helpers

fn frame_seq(f: &SseFrame) -> Option<u64> {
    f.data.get("seq").and_then(Value::as_u64)
}

fn is_text_delta(f: &SseFrame) -> bool {
    f.data["event"]["type"] == "step" && f.data["event"]["step"]["type"] == "text_delta"
}

fn is_durable_text(f: &SseFrame) -> bool {
    frame_seq(f).is_some()
        && f.data["event"]["type"] == "step"
        && f.data["event"]["step"]["type"] == "text"
}

fn durable_seqs(frames: &[SseFrame]) -> Vec<u64> {
    frames.iter().filter_map(frame_seq).collect()
}

fn seqs_of(events: &[Value]) -> Vec<u64> {
    events
        .iter()
        .map(|e| e["seq"].as_u64().expect("seq"))
        .collect()
}

fn last_event_seq(s: &Server, id: &str) -> u64 {
    s.detail(id)["lastEventSeq"].as_u64().expect("lastEventSeq")
}

/// Reads frames until `stop` says so; panics after `timeout`.
fn read_until(
    sse: &Sse,
    timeout: Duration,
    mut stop: impl FnMut(&[SseFrame]) -> bool,
) -> Vec<SseFrame> {
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match sse.next_frame(left) {
            Some(f) => {
                out.push(f);
                if stop(&out) {
                    return out;
                }
            }
            None => panic!("stream ended or timed out after {timeout:?}; got {out:#?}"),
        }
    }
}

/// Waits until the stream ends (skipping comments and frames); panics if it stays open.
fn wait_stream_end(sse: &Sse, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match sse.next_item(left) {
            Some(SseItem::End) => return,
            Some(_) => continue,
            None => panic!("the event stream did not end within {timeout:?}"),
        }
    }
}

fn db_path(s: &Server) -> std::path::PathBuf {
    s.data_dir.join("sessiond.db")
}

const COUNTED_TABLES: [&str; 8] = [
    "sessions",
    "events",
    "pending_inputs",
    "client_requests",
    "images",
    "read_markers",
    "input_turns",
    "default_sessions",
];

fn db_counts(s: &Server) -> BTreeMap<&'static str, i64> {
    COUNTED_TABLES.iter().map(|t| (*t, s.db_count(t))).collect()
}

/// Sends `body` verbatim as JSON with `method`.
fn send_raw(s: &Server, method: Method, url: &str, body: String) -> (u16, Value) {
    into_json(
        s.http
            .request(method, url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .expect("request"),
    )
}

// ---------------------------------------------------------------------------------------------
// 1. SSE (R34, S8, invariants 5 and 6)

/// R34/S8, invariant 5/6: SSE headers, `id: <seq>` on durable frames whose data is `{seq, event}`,
/// volatile `text_delta` frames without seq, and every frame valid against the events schema.
#[test]
fn sse_headers_and_frame_shapes_r34_inv5_inv6() {
    let s = Server::start();
    let id = s.create_prompt("hello");
    let first = s.wait_terminal(&id, 1)["seq"].as_u64().unwrap();

    let sse = s.sse(&id, Some(first), None);
    assert_eq!(sse.status, 200);
    let ct = sse.headers["content-type"].to_str().unwrap();
    assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
    assert_eq!(
        sse.headers
            .get("x-accel-buffering")
            .map(|v| v.to_str().unwrap()),
        Some("no")
    );

    // Subscribed before the message is posted, so every frame of the turn reaches us.
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "/slow 20\n/stream 5"}),
    );
    assert_eq!(st, 200, "{v}");
    let frames = sse.until_terminal(Duration::from_secs(20));

    let mut deltas = String::new();
    let mut delta_count = 0;
    let mut durable_text = None;
    for f in &frames {
        assert_schema(EVENTS_SCHEMA, &f.data);
        match frame_seq(f) {
            Some(seq) => {
                assert_eq!(
                    f.id,
                    Some(seq),
                    "durable frame id must equal its seq: {f:?}"
                );
                assert_known_event(&f.data["event"]);
                assert!(!is_text_delta(f), "a text_delta was made durable: {f:?}");
                if is_durable_text(f) {
                    durable_text = Some(f.data["event"]["step"]["text"].as_str().unwrap());
                }
            }
            None => {
                assert_eq!(f.id, None, "volatile frame carries an id: {f:?}");
                assert!(is_text_delta(f), "unexpected volatile frame {f:?}");
                assert!(
                    durable_text.is_none(),
                    "delta after the durable text: {f:?}"
                );
                delta_count += 1;
                deltas.push_str(f.data["event"]["step"]["delta"].as_str().unwrap());
            }
        }
    }
    assert_eq!(delta_count, 5, "{frames:#?}");
    let text = durable_text.expect("durable text step");
    assert_eq!(text, "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5 ");
    assert_eq!(deltas, text);

    // Durable seqs are exactly first+1 ..= terminal, in order.
    let seqs = durable_seqs(&frames);
    let terminal = *seqs.last().unwrap();
    assert_eq!(seqs, (first + 1..=terminal).collect::<Vec<_>>());

    // Invariant 6: deltas never reach history.
    let history = s.history_all(&id);
    assert!(
        history
            .iter()
            .all(|e| e["event"]["step"]["type"] != "text_delta"),
        "text_delta stored in history"
    );
}

/// R34, invariant 5: a reader that drops mid-turn and reconnects with `Last-Event-ID` (or with
/// `?since=`) at the last seq it saw gets every durable seq exactly once, with no gap.
#[test]
fn sse_resume_after_drop_is_gap_free_r34_inv5() {
    let s = Server::start();
    let id = s.create_prompt("/slow 30\n/tool probe\n/stream 40\n/tool after");

    let a = s.sse(&id, None, None);
    let part = read_until(&a, Duration::from_secs(20), |fs| {
        fs.iter().filter(|f| is_text_delta(f)).count() >= 3
    });
    drop(a);
    let seen_a = durable_seqs(&part);
    assert!(!seen_a.is_empty(), "no durable frame before the deltas");
    let last = *seen_a.last().unwrap();

    let b = s.sse(&id, None, Some(last));
    let c = s.sse(&id, Some(last), None);
    let fb = b.until_terminal(Duration::from_secs(30));
    let fc = c.until_terminal(Duration::from_secs(30));
    let n = last_event_seq(&s, &id);
    let expected: Vec<u64> = (1..=n).collect();

    for (name, frames) in [("Last-Event-ID", &fb), ("since", &fc)] {
        let mut all = seen_a.clone();
        all.extend(durable_seqs(frames));
        assert_eq!(
            all, expected,
            "resume with {name} from {last}: union of durable seqs is not 1..={n}"
        );
        let t = frames.last().unwrap();
        assert_eq!(
            frame_seq(t),
            Some(n),
            "{name}: terminal is not the last seq"
        );
    }
}

/// Invariant 5: an idle stream carries `: keep-alive` comments at the configured interval.
#[test]
fn sse_keepalive_on_idle_stream_inv5() {
    let s = Server::start_with_config("[stream]\nkeepalive_ms = 200\n");
    let id = s.create_prompt("hello");
    let last = s.wait_terminal(&id, 1)["seq"].as_u64().unwrap();
    let sse = s.sse(&id, Some(last), None);
    assert_eq!(sse.status, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut keepalives = 0;
    while keepalives < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match sse.next_item(left) {
            Some(SseItem::Comment(c)) => {
                assert_eq!(c, "keep-alive");
                keepalives += 1;
            }
            Some(SseItem::Frame(f)) => panic!("unexpected frame on an idle stream: {f:?}"),
            Some(SseItem::End) => panic!("idle stream ended"),
            None => panic!("only {keepalives} keep-alive comments within 5 s"),
        }
    }
}

/// R34: `since=N` replays only seq > N; `Last-Event-ID` wins over `since`; a cursor at the end
/// replays nothing.
#[test]
fn sse_since_replays_only_later_seqs_r34() {
    let s = Server::start();
    let id = s.create_prompt("/tool a\n/tool b\n/reply done");
    s.wait_terminal(&id, 1);
    let n = last_event_seq(&s, &id);
    assert!(n >= 8, "expected a long timeline, got {n}");

    let collect_to_end = |sse: &Sse| -> Vec<u64> {
        let frames = read_until(sse, Duration::from_secs(10), |fs| {
            fs.last().and_then(frame_seq) == Some(n)
        });
        // Nothing after the last stored event on an idle session.
        assert!(sse.next_frame(Duration::from_millis(300)).is_none());
        durable_seqs(&frames)
    };

    let sse = s.sse(&id, Some(3), None);
    assert_eq!(collect_to_end(&sse), (4..=n).collect::<Vec<_>>());

    let sse = s.sse(&id, Some(1), Some(5));
    assert_eq!(
        collect_to_end(&sse),
        (6..=n).collect::<Vec<_>>(),
        "Last-Event-ID must win over since"
    );

    let sse = s.sse(&id, Some(0), None);
    assert_eq!(collect_to_end(&sse), (1..=n).collect::<Vec<_>>());

    for cursor in [n, n + 100] {
        let sse = s.sse(&id, Some(cursor), None);
        assert_eq!(sse.status, 200);
        assert!(
            sse.next_frame(Duration::from_millis(300)).is_none(),
            "since={cursor} replayed something"
        );
    }
}

/// R34/S8: a resume point that is not a Uint53 is a 400 JSON error, not a stream from 0.
#[test]
fn sse_bad_resume_point_is_400_r34() {
    let s = Server::start();
    let id = s.create_prompt("hello");
    let url = s.sessions_url(&format!("/{id}/events"));
    for bad in ["abc", "-1", "1.5", "9007199254740992", "+3"] {
        let (st, v) = into_json(
            s.http
                .get(&url)
                .header("accept", "text/event-stream")
                .header("Last-Event-ID", bad)
                .send()
                .unwrap(),
        );
        assert_eq!(st, 400, "Last-Event-ID {bad:?}: {v}");
        assert_eq!(v["error"], "invalid_request");
        assert!(
            v["message"].as_str().unwrap().contains("Last-Event-ID"),
            "{v}"
        );
        let (st, v) = s.get(&format!("{url}?since={}", query_escape(bad)));
        assert_eq!(st, 400, "since={bad:?}: {v}");
        assert_eq!(v["error"], "invalid_request");
        assert!(v["message"].as_str().unwrap().contains("since"), "{v}");
    }
    let (st, v) = s.get(&s.sessions_url("/no-such-session/events"));
    assert_eq!(st, 404, "{v}");
    assert_eq!(v["error"], "not_found");
}

/// Deleting a session ends its open event streams.
#[test]
fn sse_delete_session_ends_stream() {
    let s = Server::start();
    let id = s.create_prompt("hello");
    let last = s.wait_terminal(&id, 1)["seq"].as_u64().unwrap();
    let sse = s.sse(&id, Some(last), None);
    assert_eq!(sse.status, 200);
    let (st, v) = s.delete(&s.sessions_url(&format!("/{id}")));
    assert_eq!(st, 200, "{v}");
    wait_stream_end(&sse, Duration::from_secs(5));
    let (st, _) = s.get(&s.sessions_url(&format!("/{id}/events")));
    assert_eq!(st, 404);
}

/// Invariant 6: a client reconnecting mid-turn first gets the volatile tail, then live deltas;
/// together they are exactly the durable text (no chunk duplicated or missing).
#[test]
fn sse_reconnect_mid_stream_gets_partial_text_tail_inv6() {
    let s = Server::start();
    // 100 chunks 30 ms apart: ~3 s of streaming, far longer than the reconnect below.
    let id = s.create_prompt("/slow 30\n/stream 100");
    // A second listener only tells the test how far the turn has streamed.
    let watcher = s.sse(&id, None, None);
    let a = s.sse(&id, None, None);
    let part = read_until(&a, Duration::from_secs(20), |fs| {
        fs.iter().filter(|f| is_text_delta(f)).count() >= 3
    });
    let seen = part.iter().filter(|f| is_text_delta(f)).count();
    drop(a);
    let last = *durable_seqs(&part).last().expect("turn_started seen");
    // More chunks are produced while this client is away; they must come back through the tail.
    read_until(&watcher, Duration::from_secs(20), |fs| {
        fs.iter().filter(|f| is_text_delta(f)).count() >= seen + 3
    });

    let b = s.sse(&id, None, Some(last));
    let frames = b.until_terminal(Duration::from_secs(30));
    let mut deltas = Vec::new();
    let mut text = None;
    for f in &frames {
        if is_text_delta(f) {
            assert!(text.is_none(), "delta after the durable text: {f:?}");
            deltas.push(
                f.data["event"]["step"]["delta"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            );
        } else if is_durable_text(f) {
            text = Some(f.data["event"]["step"]["text"].as_str().unwrap().to_owned());
        }
    }
    let text = text.expect("durable text after reconnect");
    let expected: String = (1..=100).map(|i| format!("chunk {i} ")).collect();
    assert_eq!(text, expected);
    // The tail comes as one delta of the text streamed so far (at least the three chunks read
    // before the drop), then live deltas follow one by one.
    assert!(
        deltas
            .first()
            .is_some_and(|d| d.starts_with("chunk 1 chunk 2 chunk 3 ")),
        "the tail was not replayed from the turn's first chunk: {:?}",
        deltas.first()
    );
    assert!(deltas.len() > 1, "no live delta after the tail");
    assert_eq!(deltas.concat(), text, "tail + live deltas != durable text");
}

/// Invariant 6: an input appended mid-turn (here a note) does not settle the turn's partial text.
/// A client reconnecting after it (or just before it) still gets the whole tail since the turn's
/// last durable output, so tail + live deltas are exactly the durable text.
#[test]
fn sse_tail_survives_an_input_appended_mid_stream_inv6() {
    let s = Server::start();
    let id = s.create_prompt("/slow 30\n/stream 100");
    let a = s.sse(&id, None, None);
    let part = read_until(&a, Duration::from_secs(20), |fs| {
        fs.iter().filter(|f| is_text_delta(f)).count() >= 3
    });
    let turn_started = *durable_seqs(&part).last().expect("turn_started seen");
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "mid-stream"}),
    );
    assert_eq!(st, 200, "{v}");
    let note_seq = v["seq"].as_u64().unwrap();
    assert_eq!(note_seq, turn_started + 1);
    read_until(&a, Duration::from_secs(10), |fs| {
        fs.last().and_then(frame_seq) == Some(note_seq)
    });
    drop(a);

    let expected: String = (1..=100).map(|i| format!("chunk {i} ")).collect();
    let b = s.sse(&id, None, Some(note_seq));
    let c = s.sse(&id, None, Some(turn_started));
    for (name, sse) in [("after the note", &b), ("before the note", &c)] {
        let frames = sse.until_terminal(Duration::from_secs(30));
        let mut deltas = Vec::new();
        let mut text = None;
        for f in &frames {
            if is_text_delta(f) {
                assert!(text.is_none(), "{name}: delta after the durable text");
                deltas.push(
                    f.data["event"]["step"]["delta"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                );
            } else if is_durable_text(f) {
                text = Some(f.data["event"]["step"]["text"].as_str().unwrap().to_owned());
            }
        }
        assert_eq!(text.as_deref(), Some(expected.as_str()), "{name}");
        assert!(
            deltas
                .first()
                .is_some_and(|d| d.starts_with("chunk 1 chunk 2 chunk 3 ")),
            "{name}: the tail lost the text streamed before the note: {:?}",
            deltas.first()
        );
        assert_eq!(
            deltas.concat(),
            expected,
            "{name}: tail + live != durable text"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Concurrency (invariant 2)

/// Invariant 2: 8 threads x 500 notes on one session (while a turn streams into it) all succeed
/// with unique seqs, and the timeline is exactly 1..=N.
#[test]
fn concurrent_notes_get_unique_gapless_seqs_inv2() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 500;
    let s = Server::start();
    let id = s.create_prompt("/stream 200\n/tool t\n/reply done");
    let url = s.sessions_url(&format!("/{id}/note"));

    let results: Vec<(String, u64)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (s, url) = (&s, &url);
                scope.spawn(move || {
                    let mut out = Vec::with_capacity(PER_THREAD);
                    for i in 0..PER_THREAD {
                        let note = format!("t{t}-n{i}");
                        let (st, v) = s.post(url, &json!({ "note": note }));
                        assert_eq!(st, 200, "note {note}: {v}");
                        assert_schema(
                            "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__note.response.json",
                            &v,
                        );
                        out.push((note, v["seq"].as_u64().expect("seq")));
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    assert_eq!(results.len(), THREADS * PER_THREAD);
    let unique: BTreeSet<u64> = results.iter().map(|(_, seq)| *seq).collect();
    assert_eq!(
        unique.len(),
        THREADS * PER_THREAD,
        "duplicate seqs returned"
    );

    s.wait_for_event(&id, &["complete"], 1, Duration::from_secs(30));
    let events = s.history_all(&id);
    let n = last_event_seq(&s, &id);
    assert_eq!(seqs_of(&events), (1..=n).collect::<Vec<_>>());
    let by_seq: BTreeMap<u64, &Value> = events
        .iter()
        .map(|e| (e["seq"].as_u64().unwrap(), &e["event"]))
        .collect();
    for (note, seq) in &results {
        let e = by_seq[seq];
        assert_eq!(e["type"], "note_submitted", "seq {seq}");
        assert_eq!(e["note"], note.as_str(), "seq {seq} holds another note");
    }
    let notes = events
        .iter()
        .filter(|e| e["event"]["type"] == "note_submitted")
        .count();
    assert_eq!(notes, THREADS * PER_THREAD);
}

// ---------------------------------------------------------------------------------------------
// 3. Bad input changes nothing (invariant 9)

struct Case {
    name: &'static str,
    method: Method,
    url: String,
    body: String,
    status: u16,
    /// The whole expected body, for seed-defined shapes.
    exact: Option<Value>,
    code: &'static str,
    /// A field name the `message` must mention (invalid_request only).
    field: Option<&'static str>,
}

fn case(
    name: &'static str,
    method: Method,
    url: String,
    body: impl Into<BodyText>,
    status: u16,
    code: &'static str,
    field: Option<&'static str>,
) -> Case {
    Case {
        name,
        method,
        url,
        body: body.into().0,
        status,
        exact: None,
        code,
        field,
    }
}

struct BodyText(String);
impl From<&str> for BodyText {
    fn from(s: &str) -> Self {
        BodyText(s.to_owned())
    }
}
impl From<Value> for BodyText {
    fn from(v: Value) -> Self {
        BodyText(v.to_string())
    }
}

fn run_cases(s: &Server, session_id: &str, cases: Vec<Case>) {
    let before = db_counts(s);
    let before_detail = s.detail(session_id);
    for c in cases {
        let (st, v) = send_raw(s, c.method.clone(), &c.url, c.body.clone());
        assert_eq!(st, c.status, "{}: {v}", c.name);
        assert!(v.is_object(), "{}: body is not a JSON object: {v}", c.name);
        assert_eq!(v["error"], c.code, "{}: {v}", c.name);
        if let Some(exact) = &c.exact {
            assert_eq!(&v, exact, "{}", c.name);
        }
        if let Some(field) = c.field {
            let msg = v["message"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: no message: {v}", c.name));
            assert!(
                msg.contains(field),
                "{}: message {msg:?} does not name {field}",
                c.name
            );
        }
        assert_eq!(db_counts(s), before, "{}: the database changed", c.name);
        let d = s.detail(session_id);
        for k in ["lastEventSeq", "turnStatus", "bucket", "title", "updatedAt"] {
            assert_eq!(d[k], before_detail[k], "{}: session {k} changed", c.name);
        }
        assert_eq!(d.get("tier"), before_detail.get("tier"), "{}", c.name);
        assert_eq!(d.get("archivedAt"), before_detail.get("archivedAt"));
    }
}

/// Invariant 9 ("nothing is written on any error"): every malformed or out-of-bounds request is a
/// 4xx JSON error naming the field, and no table row or session field changes.
#[test]
fn bad_input_is_refused_and_changes_nothing_inv9() {
    let s = Server::start();
    let id = s.create_prompt("hello");
    s.wait_terminal(&id, 1);
    // A used retry key, for the conflict cases.
    let crid = new_uuid();
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "first", "clientRequestId": crid}),
    );
    assert_eq!(st, 200, "{v}");

    let create = s.sessions_url("");
    let msg = s.sessions_url(&format!("/{id}/messages"));
    let note = s.sessions_url(&format!("/{id}/note"));
    let child = s.sessions_url(&format!("/{id}/sessions"));
    let answer = s.sessions_url(&format!("/{id}/answer"));
    let title = s.sessions_url(&format!("/{id}"));
    let read = s.sessions_url(&format!("/{id}/read"));
    let archive = s.sessions_url(&format!("/{id}/archive"));
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let att = |path: &str| json!({"path": path, "name": "f.txt", "bytes": 1});
    let post = Method::POST;
    let bad = "invalid_request";

    let mut cases = vec![
        case(
            "malformed JSON",
            post.clone(),
            create.clone(),
            "{\"prompt\": ",
            400,
            bad,
            Some("body"),
        ),
        case(
            "empty body",
            post.clone(),
            create.clone(),
            "",
            400,
            bad,
            Some("body"),
        ),
        case(
            "JSON array body",
            post.clone(),
            create.clone(),
            "[]",
            400,
            bad,
            Some("body"),
        ),
        case(
            "JSON string body",
            post.clone(),
            create.clone(),
            "\"hi\"",
            400,
            bad,
            Some("body"),
        ),
        case(
            "empty prompt",
            post.clone(),
            create.clone(),
            json!({"prompt": ""}),
            400,
            bad,
            Some("prompt"),
        ),
        case(
            "missing prompt",
            post.clone(),
            create.clone(),
            json!({"tier": "balanced"}),
            400,
            bad,
            Some("prompt"),
        ),
        case(
            "prompt wrong type",
            post.clone(),
            create.clone(),
            json!({"prompt": 5}),
            400,
            bad,
            Some("prompt"),
        ),
        case(
            "tier ultra",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "tier": "ultra"}),
            400,
            bad,
            Some("tier"),
        ),
        case(
            "behavior later",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "behavior": "later"}),
            400,
            bad,
            Some("behavior"),
        ),
        case(
            "clientRequestId not a uuid",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "clientRequestId": "not-a-uuid"}),
            400,
            bad,
            Some("clientRequestId"),
        ),
        case(
            "cwd control char",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "cwd": "a\u{1}b"}),
            400,
            bad,
            Some("cwd"),
        ),
        case(
            "5 images",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "images": vec![json!({"data": png, "mimeType": "image/png"}); 5]}),
            400,
            bad,
            Some("images"),
        ),
        case(
            "image not base64",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "images": [{"data": "%%%", "mimeType": "image/png"}]}),
            400,
            bad,
            Some("images/0/data"),
        ),
        case(
            "image content mismatch",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "images": [{"data": png, "mimeType": "image/jpeg"}]}),
            400,
            bad,
            Some("images/0/data"),
        ),
        case(
            "11 attachments",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "attachments": vec![att("docs/a.txt"); 11]}),
            400,
            bad,
            Some("attachments"),
        ),
        case(
            "attachment ../etc/passwd",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "attachments": [att("../etc/passwd")]}),
            400,
            bad,
            Some("attachments/0/path"),
        ),
        case(
            "attachment /etc/passwd",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "attachments": [att("/etc/passwd")]}),
            400,
            bad,
            Some("attachments/0/path"),
        ),
        case(
            "child: empty prompt",
            post.clone(),
            child.clone(),
            json!({"prompt": ""}),
            400,
            bad,
            Some("prompt"),
        ),
        case(
            "child: unknown parent",
            post.clone(),
            s.sessions_url("/no-such-session/sessions"),
            json!({"prompt": "x"}),
            404,
            "not_found",
            None,
        ),
        case(
            "message: empty prompt",
            post.clone(),
            msg.clone(),
            json!({"prompt": ""}),
            400,
            bad,
            Some("prompt"),
        ),
        case(
            "message: behavior later",
            post.clone(),
            msg.clone(),
            json!({"prompt": "x", "behavior": "later"}),
            400,
            bad,
            Some("behavior"),
        ),
        case(
            "message: attachment ../etc/passwd",
            post.clone(),
            msg.clone(),
            json!({"prompt": "x", "attachments": [att("a/../../etc/passwd")]}),
            400,
            bad,
            Some("attachments/0/path"),
        ),
        // The tier would be set first inside the write; the unknown source must roll it back.
        case(
            "message: unknown sourceSessionId",
            post.clone(),
            msg.clone(),
            json!({"prompt": "x", "tier": "frontier", "sourceSessionId": "no-such-session"}),
            404,
            "not_found",
            None,
        ),
        case(
            "message: unknown session",
            post.clone(),
            s.sessions_url("/no-such-session/messages"),
            json!({"prompt": "x"}),
            404,
            "not_found",
            None,
        ),
        case(
            "note: 16385 chars",
            post.clone(),
            note.clone(),
            json!({"note": "n".repeat(16385)}),
            400,
            bad,
            Some("note"),
        ),
        case(
            "note: empty",
            post.clone(),
            note.clone(),
            json!({"note": ""}),
            400,
            bad,
            Some("note"),
        ),
        case(
            "note: 5 images",
            post.clone(),
            note.clone(),
            json!({"note": "x", "images": vec![json!({"data": png, "mimeType": "image/png"}); 5]}),
            400,
            bad,
            Some("images"),
        ),
        case(
            "note: unknown sourceSessionId",
            post.clone(),
            note.clone(),
            json!({"note": "x", "images": [{"data": png, "mimeType": "image/png"}], "sourceSessionId": "nope"}),
            404,
            "not_found",
            None,
        ),
        case(
            "note: reused clientRequestId, other body",
            post.clone(),
            note.clone(),
            json!({"note": "second", "clientRequestId": crid}),
            409,
            "idempotency_conflict",
            None,
        ),
        case(
            "create: reused clientRequestId of a note",
            post.clone(),
            create.clone(),
            json!({"prompt": "x", "clientRequestId": crid}),
            409,
            "idempotency_conflict",
            None,
        ),
        case(
            "answer: not asking",
            post.clone(),
            answer.clone(),
            json!({"answer": "yes", "clientRequestId": new_uuid()}),
            409,
            "not_asking",
            None,
        ),
        case(
            "answer: empty",
            post.clone(),
            answer.clone(),
            json!({"answer": ""}),
            400,
            bad,
            Some("answer"),
        ),
        case(
            "title: 121 chars",
            Method::PATCH,
            title.clone(),
            json!({"title": "t".repeat(121)}),
            400,
            bad,
            Some("title"),
        ),
        case(
            "title: empty",
            Method::PATCH,
            title.clone(),
            json!({"title": ""}),
            400,
            bad,
            Some("title"),
        ),
        case(
            "read: seq -1",
            Method::PUT,
            read.clone(),
            json!({"seq": -1}),
            400,
            bad,
            Some("seq"),
        ),
        case(
            "read: seq string",
            Method::PUT,
            read.clone(),
            json!({"seq": "3"}),
            400,
            bad,
            Some("seq"),
        ),
        case(
            "archive: yes",
            Method::PUT,
            archive.clone(),
            json!({"archived": "yes"}),
            400,
            bad,
            Some("archived"),
        ),
    ];
    // U+0000 in any text: refused on every backend alike (PostgreSQL's text cannot hold it).
    let nul = "U+0000";
    cases.extend([
        case(
            "create: NUL in the prompt",
            post.clone(),
            create.clone(),
            json!({"prompt": "a\u{0}b"}),
            400,
            bad,
            Some(nul),
        ),
        case(
            "message: NUL in the prompt",
            post.clone(),
            msg.clone(),
            json!({"prompt": "\u{0}", "clientRequestId": new_uuid()}),
            400,
            bad,
            Some(nul),
        ),
        case(
            "note: NUL after an escaped backslash",
            post.clone(),
            note.clone(),
            r#"{"note": "x\\\u0000"}"#,
            400,
            bad,
            Some(nul),
        ),
        case(
            "title: NUL",
            Method::PATCH,
            title.clone(),
            json!({"title": "t\u{0}"}),
            400,
            bad,
            Some(nul),
        ),
        case(
            "child: NUL in a key",
            post.clone(),
            child.clone(),
            json!({"prompt": "x", "metadata\u{0}": 1}),
            400,
            bad,
            Some(nul),
        ),
        case(
            "NUL in a path segment",
            Method::GET,
            s.sessions_url(&format!("/{id}%00")),
            "",
            400,
            bad,
            Some(nul),
        ),
        case(
            "NUL in a query",
            Method::GET,
            s.sessions_url("?q=a%00b"),
            "",
            400,
            bad,
            Some(nul),
        ),
    ]);
    for (name, url) in [
        ("create: cwd ../x", create.clone()),
        ("child: cwd ../x", child.clone()),
    ] {
        cases.push(Case {
            name,
            method: post.clone(),
            url,
            body: json!({"prompt": "x", "cwd": "../x"}).to_string(),
            status: 422,
            exact: Some(json!({"error": "invalid_cwd", "reason": "outside_drive"})),
            code: "invalid_cwd",
            field: None,
        });
    }
    run_cases(&s, &id, cases);
}

/// Text that only looks like U+0000 — the six characters `\u0000`, a JSON `"\\u0000"` — is
/// text like any other: kept verbatim, on every backend.
#[test]
fn the_six_characters_backslash_u0000_are_kept_verbatim() {
    let s = Server::start();
    let prompt = r"print('\u0000') and C:\u0000\";
    let id = s.create_prompt(prompt);
    s.wait_terminal(&id, 1);
    let events = s.history_all(&id);
    let submitted = events
        .iter()
        .find(|e| e["event"]["type"] == "prompt_submitted")
        .expect("the prompt");
    assert_eq!(submitted["event"]["prompt"], prompt);
    assert_eq!(s.detail(&id)["title"], prompt);
}

/// Invariant 9: bodies over `limits.max_body_bytes` are 413 `payload_too_large` (with and without
/// Content-Length), prompts over `limits.max_prompt_chars` are 400; nothing is written.
#[test]
fn oversized_bodies_are_413_and_change_nothing_inv9() {
    let s = Server::start_with_config("[limits]\nmax_body_bytes = 4096\nmax_prompt_chars = 50\n");
    let id = s.create_prompt("hello");
    s.wait_terminal(&id, 1);
    let before = db_counts(&s);
    let big = json!({"prompt": "x".repeat(10 * 1024)}).to_string();
    let big_note = json!({"note": "x".repeat(10 * 1024)}).to_string();
    let create = s.sessions_url("");
    let note = s.sessions_url(&format!("/{id}/note"));

    for (name, url, body) in [("create", &create, &big), ("note", &note, &big_note)] {
        // With Content-Length.
        let (st, v) = s.post_raw(url, body.clone());
        assert_eq!(st, 413, "{name}: {v}");
        assert_eq!(v["error"], "payload_too_large", "{name}: {v}");
        // Chunked (no Content-Length): the limit holds while streaming.
        let chunked = reqwest::blocking::Body::new(std::io::Cursor::new(body.clone().into_bytes()));
        let (st, v) = s.post_raw(url, chunked);
        assert_eq!(st, 413, "{name} chunked: {v}");
        assert_eq!(v["error"], "payload_too_large", "{name} chunked: {v}");
        assert_eq!(db_counts(&s), before, "{name}: the database changed");
    }
    let (st, v) = s.post(&create, &json!({"prompt": "p".repeat(51)}));
    assert_eq!(st, 400, "{v}");
    assert_eq!(v["error"], "invalid_request");
    assert!(v["message"].as_str().unwrap().contains("prompt"), "{v}");
    assert_eq!(db_counts(&s), before);
    // Just under the limits is fine.
    let (st, v) = s.post(&create, &json!({"prompt": "p".repeat(50)}));
    assert_eq!(st, 200, "{v}");
}

// ---------------------------------------------------------------------------------------------
// 4. Routes

/// Unknown routes, workspaces and sessions answer a JSON 404; `/healthz` is JSON with status ok.
#[test]
fn unknown_routes_are_json_404_and_healthz_is_ok() {
    let s = Server::start();
    let id = s.create_prompt("hello");
    for (method, path) in [
        (Method::GET, "/nope".to_owned()),
        (Method::POST, "/nope/deeper?x=1".to_owned()),
        (Method::GET, "/v1/ws/default/agent".to_owned()),
        (Method::GET, "/v1/ws/no-such-ws/agent/sessions".to_owned()),
        (
            Method::GET,
            format!("/v1/ws/default/agent/sessions/{id}/bogus"),
        ),
        (
            Method::POST,
            format!("/v1/ws/default/agent/sessions/{id}/bogus"),
        ),
        (
            Method::GET,
            "/v1/ws/default/agent/sessions/no-such-session".to_owned(),
        ),
        (
            Method::GET,
            "/v1/ws/default/agent/sessions/no-such-session/history".to_owned(),
        ),
        (Method::GET, "/ui/no-such-file.js".to_owned()),
    ] {
        let resp = s.http.request(method.clone(), s.url(&path)).send().unwrap();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let (st, v) = into_json(resp);
        assert_eq!(st, 404, "{method} {path}: {v}");
        assert!(ct.starts_with("application/json"), "{method} {path}: {ct}");
        assert_eq!(v["error"], "not_found", "{method} {path}: {v}");
    }
    // A known path with a method it does not support is still a JSON error.
    let resp = s
        .http
        .request(Method::DELETE, s.sessions_url(""))
        .send()
        .unwrap();
    let (st, v) = into_json(resp);
    assert!((400..500).contains(&st), "DELETE sessions: {st} {v}");
    assert!(v["error"].is_string(), "{v}");

    let (st, v) = s.get(&s.url("/healthz"));
    assert_eq!(st, 200);
    assert_eq!(v["status"], "ok");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
}

// ---------------------------------------------------------------------------------------------
// 5. Graceful shutdown

/// SIGTERM with an open stream and a running turn: clean exit, the stream ends, and after restart
/// the turn ended with `interrupted` written by the shutdown itself; history is intact.
#[test]
fn sigterm_ends_streams_interrupts_turns_and_exits_cleanly() {
    let mut s = Server::start();
    let id = s.create_prompt("/slow 100\n/stream 1000");
    let sse = s.sse(&id, None, None);
    read_until(&sse, Duration::from_secs(20), |fs| {
        fs.iter().any(is_text_delta)
    });
    let before = s.history_all(&id);

    let t0 = Instant::now();
    let status = s.stop();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "shutdown took {:?}",
        t0.elapsed()
    );
    wait_stream_end(&sse, Duration::from_secs(5));

    s.restart();
    let events = s.history_all(&id);
    assert_eq!(
        seqs_of(&events),
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(&events[..before.len()], &before[..], "history changed");
    let types = event_types(&events);
    assert_eq!(
        types.last().map(String::as_str),
        Some("interrupted"),
        "{types:?}"
    );
    assert_eq!(
        types
            .iter()
            .filter(|t| TERMINALS.contains(&t.as_str()))
            .count(),
        1,
        "{types:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| e["event"]["metadata"]["code"] == "runner_exited"),
        "a graceful stop must interrupt the turn itself, not leave it to crash recovery: {types:?}"
    );
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "interrupted");
    assert_eq!(d["lastEventSeq"], events.len() as u64);

    // Sessions work normally after the restart.
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "again"}),
    );
    assert_eq!(st, 200, "{v}");
    let t = s.wait_terminal(&id, events.len() as u64 + 1);
    assert_eq!(t["event"]["type"], "complete");
}

// ---------------------------------------------------------------------------------------------
// 6. Crash recovery (invariants 3 and 8)

/// Invariants 3 and 8: after SIGKILL every acknowledged session and note is there, the in-flight
/// turn got `interrupted` preceded by a `runner_exited` system event, and new input runs.
#[test]
fn kill9_loses_nothing_acknowledged_and_interrupts_inflight_turn_inv3_inv8() {
    let mut s = Server::start();
    let long = s.create_prompt("/slow 200\n/stream 500");
    s.wait_for_event(&long, &["turn_started"], 1, Duration::from_secs(10));

    let mut sessions = vec![(long.clone(), "/slow 200\n/stream 500".to_owned())];
    for i in 0..3 {
        let prompt = format!("quick {i}");
        sessions.push((s.create_prompt(&prompt), prompt));
    }
    let mut notes = Vec::new();
    for (k, (sid, _)) in sessions.iter().enumerate() {
        for j in 0..3 {
            let text = format!("note {k}.{j}");
            let (st, v) = s.post(
                &s.sessions_url(&format!("/{sid}/note")),
                &json!({ "note": text }),
            );
            assert_eq!(st, 200, "{v}");
            notes.push((sid.clone(), v["seq"].as_u64().unwrap(), text));
        }
    }

    s.kill9_and_restart();

    for (sid, prompt) in &sessions {
        let events = s.history_all(sid);
        assert_eq!(
            seqs_of(&events),
            (1..=events.len() as u64).collect::<Vec<_>>()
        );
        assert!(
            events
                .iter()
                .any(|e| e["event"]["type"] == "prompt_submitted"
                    && e["event"]["prompt"] == prompt.as_str()),
            "prompt of {sid} lost"
        );
        // Never "running" forever: every session reaches a terminal.
        let t = s.wait_terminal(sid, 1);
        assert!(TERMINALS.contains(&t["event"]["type"].as_str().unwrap()));
    }
    for (sid, seq, text) in &notes {
        let events = s.history_all(sid);
        let e = &events[*seq as usize - 1];
        assert_eq!(e["seq"], *seq);
        assert_eq!(e["event"]["type"], "note_submitted", "{sid} seq {seq}");
        assert_eq!(e["event"]["note"], text.as_str());
        let dupes = events
            .iter()
            .filter(|e| e["event"]["note"] == text.as_str())
            .count();
        assert_eq!(dupes, 1, "note {text} duplicated");
    }

    let events = s.history_all(&long);
    let types = event_types(&events);
    let i = types
        .iter()
        .position(|t| t == "interrupted")
        .unwrap_or_else(|| panic!("no interrupted terminal: {types:?}"));
    let sys = &events[i - 1]["event"];
    assert_eq!(sys["type"], "system", "{types:?}");
    assert_eq!(sys["metadata"]["code"], "runner_exited", "{sys}");
    assert!(!types[..i].iter().any(|t| TERMINALS.contains(&t.as_str())));
    assert_eq!(s.detail(&long)["turnStatus"], "interrupted");
    for e in &events {
        assert_known_event(&e["event"]);
    }

    let after = events.len() as u64;
    let (st, v) = s.post(
        &s.sessions_url(&format!("/{long}/messages")),
        &json!({"prompt": "after restart"}),
    );
    assert_eq!(st, 200, "{v}");
    let t = s.wait_terminal(&long, after + 1);
    assert_eq!(t["event"]["type"], "complete");
    let events = s.history_all(&long);
    assert!(
        events
            .iter()
            .any(|e| e["event"]["step"]["text"] == "echo: after restart")
    );
}

/// Invariant 8 ("queued inputs are delivered again"): an input acknowledged as `queued` while the
/// only worker is busy runs to completion after a SIGKILL and restart.
#[test]
fn kill9_redelivers_input_queued_on_saturated_pool_inv8() {
    let mut s = Server::start_with_config("[runner]\nworkers = 1\n");
    let busy = s.create(json!({"prompt": "/slow 200\n/stream 500"}));
    assert_eq!(busy["delivery"], "accepted", "{busy}");
    let busy_id = busy["session"]["sessionId"].as_str().unwrap().to_owned();
    s.wait_for_event(&busy_id, &["turn_started"], 1, Duration::from_secs(10));

    let queued = s.create(json!({"prompt": "queued work"}));
    assert_eq!(queued["delivery"], "queued", "{queued}");
    let qid = queued["session"]["sessionId"].as_str().unwrap().to_owned();

    s.kill9_and_restart();

    let t = s.wait_terminal(&qid, 1);
    assert_eq!(t["event"]["type"], "complete", "{t}");
    let events = s.history_all(&qid);
    assert!(
        events
            .iter()
            .any(|e| e["event"]["step"]["text"] == "echo: queued work"),
        "{:?}",
        event_types(&events)
    );
    let t = s.wait_terminal(&busy_id, 1);
    assert_eq!(t["event"]["type"], "interrupted");
}

// ---------------------------------------------------------------------------------------------
// 7. Online backup

fn backup_cmd(data_dir: &std::path::Path, dest: &std::path::Path) -> std::process::Output {
    let mut cmd = sessiond_command();
    cmd.arg("backup").arg(dest).arg("--data-dir").arg(data_dir);
    run_bounded(cmd, Duration::from_secs(60))
}

/// `sessiond backup FILE` while the server runs: a consistent, openable copy with the same events;
/// an existing FILE is never overwritten.
#[test]
fn backup_while_serving_is_consistent_and_never_overwrites() {
    if skip_on_postgres("`sessiond backup` copies the SQLite database") {
        return;
    }
    let s = Server::start();
    let mut ids = Vec::new();
    for i in 0..3 {
        let id = s.create_prompt(&format!("/tool t{i}\n/reply r{i}"));
        for j in 0..20 {
            let (st, _) = s.post(
                &s.sessions_url(&format!("/{id}/note")),
                &json!({"note": format!("n{j}")}),
            );
            assert_eq!(st, 200);
        }
        ids.push(id);
    }
    for id in &ids {
        s.wait_terminal(id, 1);
    }
    let live = db_counts(&s);

    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("copy.db");
    let out = backup_cmd(&s.data_dir, &dest);
    assert!(
        out.status.success(),
        "backup failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let copy = open_db_readonly(&dest);
    let check: String = copy
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(check, "ok");
    assert_eq!(count_rows(&copy, "events"), live["events"]);
    assert_eq!(count_rows(&copy, "sessions"), live["sessions"]);
    let version: i64 = copy
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let live_version: i64 = open_db_readonly(&db_path(&s))
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, live_version);
    drop(copy);

    // Refuses to overwrite.
    let size = std::fs::metadata(&dest).unwrap().len();
    let out = backup_cmd(&s.data_dir, &dest);
    assert!(!out.status.success(), "backup overwrote an existing file");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("exists"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::metadata(&dest).unwrap().len(), size);

    // Taken under write load, the copy is still one snapshot: every session's events are exactly
    // 1..=last_event_seq of its row (invariants 1 and 2 hold inside the backup).
    let dest2 = tmp.path().join("under-load.db");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let written = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let url = s.sessions_url(&format!("/{}/note", ids[0]));
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && n < 5000 {
                let (st, _) = s.post(&url, &json!({"note": "load"}));
                assert_eq!(st, 200);
                n += 1;
                written.store(n, std::sync::atomic::Ordering::SeqCst);
            }
        });
        // The backup starts once the writes are under way.
        poll_until("notes written", Duration::from_secs(20), || {
            (written.load(std::sync::atomic::Ordering::SeqCst) >= 20).then_some(())
        });
        let out = backup_cmd(&s.data_dir, &dest2);
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        writer.join().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    let copy = open_db_readonly(&dest2);
    let mut stmt = copy
        .prepare(
            "SELECT s.last_event_seq, count(e.seq), coalesce(min(e.seq), 0), coalesce(max(e.seq), 0)
             FROM sessions s LEFT JOIN events e ON e.session_pk = s.pk GROUP BY s.pk",
        )
        .unwrap();
    let rows: Vec<(i64, i64, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows.len(), 3);
    for (last, count, min, max) in rows {
        assert_eq!((count, min, max), (last, 1, last), "torn snapshot");
    }
}

// ---------------------------------------------------------------------------------------------
// 8. A database from a newer sessiond

/// A database whose `user_version` is newer than the binary's schema is refused by `serve` (and
/// `backup`) with a message naming the schema version, and is left untouched.
#[test]
fn newer_schema_version_is_refused() {
    if skip_on_postgres(
        "it sets SQLite's user_version (tests/postgres.rs refuses a newer PostgreSQL schema)",
    ) {
        return;
    }
    let mut s = Server::start();
    let id = s.create_prompt("hello");
    s.wait_terminal(&id, 1);
    assert!(s.stop().success());
    let db = db_path(&s);
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.pragma_update(None, "user_version", 999).unwrap();
    }

    let mut cmd = sessiond_command();
    cmd.arg("serve")
        .arg("--bind")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(&s.data_dir);
    let out = run_bounded(cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve accepted a newer schema");
    assert!(
        stderr.contains("schema version") && stderr.contains("999"),
        "stderr: {stderr}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("listening"),
        "serve started listening"
    );

    let tmp = tempfile::tempdir().unwrap();
    let dest = tmp.path().join("b.db");
    let out = backup_cmd(&s.data_dir, &dest);
    assert!(!out.status.success(), "backup accepted a newer schema");
    assert!(String::from_utf8_lossy(&out.stderr).contains("schema version"));
    assert!(!dest.exists());

    let version: i64 = open_db_readonly(&db)
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 999, "the refused database was modified");
}

/// A known path with a method it does not have answers 405 with an `Allow` header (RFC 9110).
#[test]
fn wrong_method_is_405_with_allow() {
    let s = Server::start();
    let resp = s.http.put(s.sessions_url("")).send().expect("PUT");
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers()["allow"], "GET, POST");
    let body: serde_json::Value = resp.json().expect("json");
    assert_eq!(body["error"], "method_not_allowed");
    let resp = s.http.post(s.url("/healthz")).send().expect("POST");
    assert_eq!(resp.status().as_u16(), 405);
    assert_eq!(resp.headers()["allow"], "GET");
    // The same inside a session's own routes, and a path below a session that no route has is a
    // JSON 404, as anywhere else.
    let id = s.create_prompt("/reply ok");
    for (path, allow) in [
        ("", "GET, PATCH, DELETE"),
        ("/note", "POST"),
        ("/archive", "PUT"),
        ("/images/img_0", "GET"),
    ] {
        let resp = s
            .http
            .put(s.sessions_url(&format!("/{id}{path}")))
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .expect("PUT");
        if allow.contains("PUT") {
            assert_ne!(resp.status().as_u16(), 405, "{path}");
            continue;
        }
        assert_eq!(resp.status().as_u16(), 405, "{path}");
        assert_eq!(resp.headers()["allow"], allow, "{path}");
    }
    for path in ["/bogus", "/note/extra", "/"] {
        let (status, v) = s.get(&s.sessions_url(&format!("/{id}{path}")));
        assert_eq!(status, 404, "{path}: {v}");
        assert_eq!(v["error"], "not_found", "{path}: {v}");
    }
}

/// A second `sessiond serve` on a data dir that is being served is refused, naming the pid of
/// the one that serves it, and leaves the first server's running turn alone; the CLI keeps
/// working beside the server.
#[test]
fn a_second_server_on_the_same_data_dir_is_refused_and_ends_nothing() {
    if skip_on_postgres("on PostgreSQL several processes share a data dir (tests/multi_process.rs)")
    {
        return;
    }
    let s = Server::start();
    let id = s.create_prompt("/slow 200\n/stream 100");
    s.wait_for_event(&id, &["turn_started"], 1, Duration::from_secs(10));

    let mut cmd = sessiond_command();
    cmd.arg("serve")
        .arg("--bind")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(&s.data_dir)
        .args(database_args(&s.data_dir));
    let out = run_bounded(cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second server started");
    let pid = std::fs::read_to_string(s.data_dir.join("serve.lock")).expect("lock file");
    assert!(
        stderr.contains("another sessiond") && stderr.contains(&format!("pid {}", pid.trim())),
        "stderr: {stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening"));

    // The first server's turn was not recovered (ended) by the second one.
    let events = s.history_all(&id);
    assert!(
        !events
            .iter()
            .any(|e| e["event"]["metadata"]["code"] == "runner_exited"),
        "{events:#?}"
    );
    assert_eq!(s.detail(&id)["turnStatus"], "running");

    // The CLI works beside the running server.
    let mut cmd = sessiond_command();
    cmd.args(["token", "list", "--data-dir"])
        .arg(&s.data_dir)
        .args(database_args(&s.data_dir));
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The turn was the first server's all along: it ends when that server is told to stop it.
    let (st, v) = s.post(&s.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert_eq!(st, 200, "{v}");
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "interrupted", "{t}");
}

/// A data dir on a read-only filesystem is refused at start with a message, instead of starting,
/// printing the setup link and failing its first write.
#[test]
fn a_read_only_data_dir_is_refused_at_start() {
    let Some(fs) = Tmpfs::mount("16m") else {
        return;
    };
    let data = fs.path().join("data");
    let mut s = Server::start_in(&data, &[]);
    let id = s.create_prompt("hello");
    s.wait_terminal(&id, 1);
    assert!(s.stop().success());
    fs.remount(true);

    let mut cmd = sessiond_command();
    cmd.arg("serve")
        .arg("--bind")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(&data)
        .args(database_args(&data));
    let out = run_bounded(cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "served a read-only data dir: {stdout}"
    );
    assert!(
        stderr.contains("cannot be written") || stderr.contains("read-only"),
        "stderr: {stderr}"
    );
    assert!(
        !stdout.contains("listening") && !stdout.contains("setup"),
        "{stdout}"
    );

    fs.remount(false);
    if skip_on_postgres("its second half makes the SQLite database file read-only") {
        return;
    }
    // The database file alone read-only (the data dir writable): refused as well.
    let db = data.join("sessiond.db");
    let bind = |args: &[&str]| {
        let st = std::process::Command::new("mount")
            .args(args)
            .arg(&db)
            .arg(&db)
            .status()
            .expect("mount");
        assert!(st.success(), "mount {args:?}");
    };
    bind(&["--bind"]);
    bind(&["-o", "remount,bind,ro"]);
    let mut cmd = sessiond_command();
    cmd.arg("serve")
        .arg("--bind")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(&data);
    let out = run_bounded(cmd, Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = std::process::Command::new("umount").arg(&db).status();
    assert!(!out.status.success(), "served a read-only database");
    assert!(stderr.contains("cannot be written"), "stderr: {stderr}");

    s.restart();
    assert_eq!(s.detail(&id)["turnStatus"], "complete");
}
