//! Helpers for the `/v2` family: its URLs, and checks of Session records and HAST Event v2
//! envelopes against the seed schemas in `schemas/` (`schemas/session-record.json`,
//! `schemas/event-stream/`).
//!
//! The seed schemas are used as they are, with exactly two widenings:
//! * `x-nullable: true` (an OpenAPI 2 keyword a JSON Schema validator ignores) is read as
//!   "or null" — the envelope's `sequence` of volatile events;
//! * the vendor enums take sessiond's documented extension values (README, "Task events API"):
//!   `harness` also `scripted`, `openai`, `command`; the envelope's `engine` also
//!   `claude_code`, `scripted`, `openai`, `command`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Server, Sse, SseFrame, SseItem};

/// Extension values of the record's `harness` (besides the seed's `claude_code`, `codex`).
pub const HARNESS_EXTENSIONS: [&str; 4] = ["scripted", "openai", "command", "acp"];
/// Extension values of the envelope's `engine` (besides the seed's `codex_cli`, `pi_agent_cli`).
pub const ENGINE_EXTENSIONS: [&str; 5] = ["claude_code", "scripted", "openai", "command", "acp"];

/// The 24 HAST types.
pub const TYPES: [&str; 24] = [
    "runtime.status",
    "run.queued",
    "run.started",
    "run.retrying",
    "run.completed",
    "run.failed",
    "run.interrupted",
    "message.started",
    "message.delta",
    "message.completed",
    "reasoning.started",
    "reasoning.delta",
    "reasoning.completed",
    "tool.started",
    "tool.updated",
    "tool.completed",
    "plan.updated",
    "plan.completed",
    "usage.updated",
    "file.changed",
    "input.requested",
    "context.compacted",
    "warning",
    "error",
];

fn load(rel: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("schemas")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("schema JSON")
}

/// `x-nullable: true` next to a `type` becomes that type or null, everywhere in `v`.
fn widen_nullable(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("x-nullable") == Some(&json!(true))
                && let Some(Value::String(t)) = map.get("type").cloned()
            {
                map.insert("type".into(), json!([t, "null"]));
            }
            for child in map.values_mut() {
                widen_nullable(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(widen_nullable),
        _ => {}
    }
}

fn add_to_enum(schema: &mut Value, extra: &[&str]) {
    let list = schema["enum"].as_array_mut().expect("an enum");
    list.extend(extra.iter().map(|e| json!(e)));
}

fn envelope_schema() -> Value {
    let mut envelope = load("event-stream/envelope.json");
    widen_nullable(&mut envelope);
    add_to_enum(&mut envelope["properties"]["engine"], &ENGINE_EXTENSIONS);
    envelope
}

static VALIDATORS: LazyLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn validator(key: &str, make: impl FnOnce() -> Value) -> &'static jsonschema::Validator {
    let mut map = VALIDATORS.lock().unwrap();
    if let Some(v) = map.get(key) {
        return v;
    }
    let v: &'static jsonschema::Validator = Box::leak(Box::new(
        jsonschema::validator_for(&make()).expect("schema compiles"),
    ));
    map.insert(key.to_owned(), v);
    v
}

fn check(v: &jsonschema::Validator, instance: &Value, what: &str) {
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{what}: {errors:#?}\n{instance:#}");
}

/// A HAST Event v2 envelope: the full envelope schema and its type's schema.
pub fn assert_envelope(e: &Value) {
    let kind = e["type"].as_str().unwrap_or_else(|| panic!("no type: {e}"));
    assert!(TYPES.contains(&kind), "unknown type {kind}");
    check(validator("envelope", envelope_schema), e, "envelope");
    let typed = validator(kind, || {
        let mut s = load(&format!("event-stream/{kind}.json"));
        widen_nullable(&mut s);
        s["definitions"] = json!({ "api.TaskAgentEventDoc": envelope_schema() });
        s
    });
    check(typed, e, kind);
}

/// A Session record (seed 004).
pub fn assert_record(r: &Value) {
    let v = validator("record", || {
        let mut s = load("session-record.json");
        add_to_enum(&mut s["properties"]["harness"], &HARNESS_EXTENSIONS);
        s
    });
    check(v, r, "session record");
}

pub fn v2(s: &Server, rest: &str) -> String {
    s.url(&format!("/v2/sessions{rest}"))
}

/// `POST /v2/sessions`: 201 and a valid record.
pub fn create_v2(s: &Server, body: Value) -> Value {
    let (status, v) = s.post(&v2(s, ""), &body);
    assert_eq!(status, 201, "create {body}: {v}");
    assert_record(&v);
    v
}

/// `GET /v2/sessions/{id}`: 200 and a valid record.
pub fn record(s: &Server, id: &str) -> Value {
    let (status, v) = s.get(&v2(s, &format!("/{id}")));
    assert_eq!(status, 200, "record {id}: {v}");
    assert_record(&v);
    v
}

/// Every durable HAST event of a session, paging `…/events` `limit` at a time; each envelope
/// checked.
pub fn events_paged(s: &Server, id: &str, limit: u32) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut after = 0u64;
    loop {
        let (status, page) = s.get(&v2(s, &format!("/{id}/events?after={after}&limit={limit}")));
        assert_eq!(status, 200, "events: {page}");
        let events = page["events"].as_array().expect("events").clone();
        for e in &events {
            assert_envelope(e);
            let seq = e["sequence"]
                .as_u64()
                .expect("durable events have a sequence");
            assert!(seq > after, "sequence {seq} after {after}");
            after = seq;
        }
        out.extend(events.iter().cloned());
        if !page["has_more"].as_bool().expect("has_more") {
            return out;
        }
        assert!(!events.is_empty(), "has_more with an empty page");
    }
}

pub fn events(s: &Server, id: &str) -> Vec<Value> {
    events_paged(s, id, 500)
}

/// The types of a list of envelopes.
pub fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?"))
        .collect()
}

/// Polls the event list until `pred` holds; returns the events then.
pub fn wait_events(
    s: &Server,
    id: &str,
    what: &str,
    pred: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let evs = events(s, id);
        if pred(&evs) {
            return evs;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {:?}",
            types(&evs)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// How many runs of a session have ended.
pub fn runs_ended(events: &[Value]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("run.completed" | "run.failed" | "run.interrupted")
            )
        })
        .count()
}

/// Waits until `n` runs have ended.
pub fn wait_runs(s: &Server, id: &str, n: usize) -> Vec<Value> {
    wait_events(s, id, &format!("{n} ended runs"), |e| runs_ended(e) >= n)
}

/// Opens `…/events/stream{query}`.
pub fn stream(s: &Server, id: &str, query: &str, last_event_id: Option<u64>) -> Sse {
    let sse = s.sse_at(
        &v2(s, &format!("/{id}/events/stream{query}")),
        last_event_id,
    );
    assert_eq!(sse.status, 200, "stream {id}{query}");
    sse
}

/// A frame of a `/v2` stream, checked: `event:` is the type, `data:` a valid envelope, `id:`
/// the sequence (present exactly for durable events). Snapshot frames are checked as records.
pub fn check_frame(f: &SseFrame) {
    let event = f.event.as_deref().expect("every /v2 frame names its event");
    if event == "session/snapshot" {
        assert_eq!(f.id, None, "snapshots carry no id");
        assert_record(&f.data);
        return;
    }
    assert_envelope(&f.data);
    assert_eq!(f.data["type"], event, "event: is the type");
    assert_eq!(f.id, f.data["sequence"].as_u64(), "id: is the sequence");
    assert_eq!(f.data["replayable"], json!(f.id.is_some()));
}

/// Reads checked frames until `stop` holds for one (which is included).
pub fn read_until(sse: &Sse, what: &str, stop: impl Fn(&SseFrame) -> bool) -> Vec<SseFrame> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(f) = sse.next_frame(left) else {
            panic!(
                "stream ended or timed out before {what}; got {:?}",
                out.iter()
                    .map(|f: &SseFrame| f.event.clone().unwrap_or_default())
                    .collect::<Vec<_>>()
            );
        };
        check_frame(&f);
        let done = stop(&f);
        out.push(f);
        if done {
            return out;
        }
    }
}

/// Reads frames until the `n`-th run outcome arrives.
pub fn read_runs(sse: &Sse, n: usize) -> Vec<SseFrame> {
    let seen = std::cell::Cell::new(0);
    read_until(sse, &format!("{n} run outcomes"), |f| {
        if matches!(
            f.event.as_deref(),
            Some("run.completed" | "run.failed" | "run.interrupted")
        ) {
            seen.set(seen.get() + 1);
        }
        seen.get() >= n
    })
}

/// The next comment line of a stream (skipping frames), within `timeout`.
pub fn next_comment(sse: &Sse, timeout: Duration) -> Option<String> {
    let deadline = Instant::now() + timeout;
    loop {
        match sse.next_item(deadline.saturating_duration_since(Instant::now()))? {
            SseItem::Comment(c) => return Some(c),
            SseItem::Frame(_) => continue,
            SseItem::End => return None,
        }
    }
}
