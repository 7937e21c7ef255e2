//! Several sessiond processes on one PostgreSQL database and one data dir, as a deployment behind
//! a load balancer runs them: what one process writes, streams and runs, the others see, and a
//! process killed mid-turn loses nothing acknowledged and leaves nothing stuck.
//!
//! These run on both passes (they bring their own database in the test cluster); without
//! PostgreSQL they fail when `CI` is set and are skipped with a notice otherwise. Every wait is
//! on a condition (an event, a frame, a field), never on time.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const CREATE: &str = "POST_v1_ws__workspaceSlug__agent_sessions.response.json";
const DETAIL: &str = "GET_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json";
const NOTE: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__note.response.json";
const MESSAGE_WAIT_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages_wait.response.json";
const INTERRUPT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__interrupt.response.json";

/// Processes sharing one database and one data dir.
struct Deployment {
    servers: Vec<Server>,
    _db: Arc<postgres::Database>,
    _dir: tempfile::TempDir,
}

impl Deployment {
    /// `n` processes, started one after the other, with `args` (or `None` without PostgreSQL).
    fn start(n: usize, args: &[&str]) -> Option<Deployment> {
        let test = std::thread::current()
            .name()
            .unwrap_or("multi")
            .rsplit("::")
            .next()
            .unwrap_or("multi")
            .to_owned();
        let db = Arc::new(postgres::database(&test)?);
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("data");
        share_database(&data_dir, &db);
        let servers = (0..n).map(|_| Server::start_in(&data_dir, args)).collect();
        Some(Deployment {
            servers,
            _db: db,
            _dir: dir,
        })
    }
}

fn seq(e: &Value) -> u64 {
    e["seq"].as_u64().expect("seq")
}

fn etype(e: &Value) -> &str {
    e["event"]["type"].as_str().unwrap_or("")
}

fn create(s: &Server, prompt: &str) -> String {
    let v = s.create(json!({ "prompt": prompt }));
    assert_schema(CREATE, &v);
    v["session"]["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned()
}

fn runner_id(s: &Server) -> String {
    let (status, h) = s.get(&s.url("/healthz"));
    assert_eq!(status, 200, "{h}");
    h["runner"]["id"].as_str().expect("runner id").to_owned()
}

fn assert_gapless(id: &str, events: &[Value]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            seq(e),
            i as u64 + 1,
            "{id}: seqs {:?}",
            events.iter().map(seq).collect::<Vec<_>>()
        );
    }
}

/// Polls `f` until it returns `Some` (the condition), failing after `within`.
fn until<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_session_created_on_one_process_is_read_on_the_others() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let [a, b, c] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(a, "hello");
    b.wait_terminal(&id, 1);
    for s in [b, c] {
        let detail = s.detail(&id);
        assert_schema(DETAIL, &detail);
        assert_eq!(detail["id"], id.as_str());
    }
    assert_eq!(a.history_all(&id), c.history_all(&id));
    // Every process is a runner of its own.
    let ids: HashSet<String> = d.servers.iter().map(runner_id).collect();
    assert_eq!(ids.len(), 3, "{ids:?}");
}

#[test]
fn concurrent_notes_through_three_processes_are_gap_free() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let id = create(&d.servers[0], "hello");
    d.servers[0].wait_terminal(&id, 1);
    let acked: Vec<(u64, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = d
            .servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let id = id.clone();
                scope.spawn(move || {
                    (0..20)
                        .map(|n| {
                            let text = format!("note {i}-{n}");
                            let (status, v) = s.post(
                                &s.sessions_url(&format!("/{id}/note")),
                                &json!({ "note": text }),
                            );
                            assert_eq!(status, 200, "{v}");
                            assert_schema(NOTE, &v);
                            (v["seq"].as_u64().expect("seq"), text)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("notes"))
            .collect()
    });
    let events = d.servers[1].history_all(&id);
    assert_gapless(&id, &events);
    let seqs: HashSet<u64> = acked.iter().map(|(s, _)| *s).collect();
    assert_eq!(seqs.len(), 60, "two notes acknowledged at one seq");
    for (n, text) in &acked {
        let e = &events[*n as usize - 1];
        assert_eq!(etype(e), "note_submitted");
        assert_eq!(e["event"]["note"], text.as_str());
    }
}

/// A stream on A follows a turn that B runs, live: its deltas and its durable events, in order,
/// each seq once; a stream on C resumed from the middle carries on exactly.
#[test]
fn a_stream_on_one_process_sees_a_turn_run_on_another_and_resumes_on_a_third() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let [a, b, c] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(b, "hello");
    b.wait_terminal(&id, 1);
    let sse = a.sse(&id, Some(0), None);
    // The backlog, up to the first turn's terminal.
    sse.until_terminal(Duration::from_secs(20));
    // B runs a streamed turn (B received the message, so B's runner takes it).
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": "/slow 20\n/stream 20", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    let frames = sse.until_terminal(Duration::from_secs(30));
    let deltas = frames
        .iter()
        .filter(|f| f.id.is_none() && f.data["event"]["step"]["type"] == "text_delta")
        .count();
    assert!(deltas >= 1, "no live delta reached A: {frames:#?}");
    let durable: Vec<u64> = frames.iter().filter_map(|f| f.id).collect();
    let history = c.history_all(&id);
    let first = durable.first().copied().expect("durable frames");
    let expected: Vec<u64> = history.iter().map(seq).filter(|s| *s >= first).collect();
    assert_eq!(durable, expected, "A's stream skipped or repeated a seq");
    for f in &frames {
        if let Some(n) = f.id {
            assert_eq!(f.data["seq"], history[n as usize - 1]["seq"], "frame {n}");
            assert_eq!(
                f.data["event"],
                history[n as usize - 1]["event"],
                "frame {n}"
            );
        }
    }
    // Resume on C from the middle of that turn: exactly the events after it.
    let middle = durable[durable.len() / 2];
    let resumed = c.sse(&id, None, Some(middle));
    let again = resumed.until_terminal(Duration::from_secs(20));
    let again: Vec<u64> = again.iter().filter_map(|f| f.id).collect();
    let expected: Vec<u64> = history.iter().map(seq).filter(|s| *s > middle).collect();
    assert_eq!(again, expected);
}

/// `messages/wait` posted to A for a follow-up that B's runner takes when its turn ends; an
/// interrupt posted to C reaches the turn B runs, within a second.
#[test]
fn wait_and_interrupt_across_processes() {
    let Some(d) = Deployment::start(3, &[]) else {
        return;
    };
    let [a, b, c] = &d.servers[..] else {
        unreachable!()
    };
    let id = create(b, "hello");
    let first = b.wait_terminal(&id, 1);
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": "/slow 100\n/stream 20", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    let started = b.wait_for_event(&id, &["turn_started"], seq(&first), Duration::from_secs(20));
    let (status, w) = a.post(
        &a.sessions_url(&format!("/{id}/messages/wait")),
        &json!({ "prompt": "after", "behavior": "follow_up", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{w}");
    assert_schema(MESSAGE_WAIT_RESPONSE, &w);
    assert_eq!(w["terminal"]["event"]["type"], "complete", "{w}");
    let events = c.history_all(&id);
    let term = seq(&w["terminal"]);
    assert_eq!(&w["terminal"], &events[term as usize - 1]);
    assert!(term > seq(&started));

    // A long turn on B, interrupted through C.
    let (status, v) = b.post(
        &b.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": "/slow 200\n/stream 300", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{v}");
    let started = b.wait_for_event(&id, &["turn_started"], term, Duration::from_secs(20));
    let asked = Instant::now();
    let (status, v) = c.post(&c.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert_eq!(status, 200, "{v}");
    assert_schema(INTERRUPT, &v);
    let ended = a.wait_for_event(
        &id,
        &["interrupted", "complete"],
        seq(&started),
        Duration::from_secs(10),
    );
    assert_eq!(etype(&ended), "interrupted", "{ended}");
    // Within a second of the request, plus the scripted engine's step (200 ms) and the grace.
    assert!(
        asked.elapsed() < Duration::from_secs(5),
        "{:?}",
        asked.elapsed()
    );
}
