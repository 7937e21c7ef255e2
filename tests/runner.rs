//! The runner over the real binary: the full turn lifecycle.
//!
//! Delivery acknowledgements (R28, R64), steer and follow-up (R25, R26, invariant 7), ask/answer,
//! interrupts, sleep and wake, tiers (R19–R22), the `/wait` routes (R43–R51), Jobs backed by a
//! state machine (R10–R15), background tasks and heartbeats, automatic titles, crash recovery
//! (invariants 3 and 8) and concurrent idempotent creates (R29).
//!
//! Every test drives the scripted engine (see `src/engine/scripted.rs`) and is bounded by
//! timeouts.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const CREATE_RESPONSE: &str = "POST_v1_ws__workspaceSlug__agent_sessions.response.json";
const DETAIL: &str = "GET_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json";
const LIST: &str = "GET_v1_ws__workspaceSlug__agent_sessions.response.json";
const MESSAGE_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages.response.json";
const ANSWER_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__answer.response.json";
const ANSWER_REQUEST: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__answer.request.json";
const INTERRUPT_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__interrupt.response.json";
const WAIT_RESPONSE: &str = "POST_v1_ws__workspaceSlug__agent_sessions_wait.response.json";
const CHILD_WAIT_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__sessions_wait.response.json";
const MESSAGE_WAIT_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages_wait.response.json";
const ANSWER_WAIT_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__answer_wait.response.json";

// ---------------------------------------------------------------------------------------------
// Helpers

/// The text of a durable `text` step.
fn step_text(e: &Value) -> Option<&str> {
    if etype(e) == "step" && e["event"]["step"]["type"] == "text" {
        e["event"]["step"]["text"].as_str()
    } else {
        None
    }
}

fn texts(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter_map(step_text)
        .map(str::to_owned)
        .collect()
}

fn count(events: &[Value], ty: &str) -> usize {
    events.iter().filter(|e| etype(e) == ty).count()
}

/// Invariant 2: seqs are exactly 1..=N.
fn assert_gapless(id: &str, events: &[Value]) {
    let seqs: Vec<u64> = events.iter().map(seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "session {id}: seqs are not 1..=N"
    );
}

/// Invariant 7 seen on the timeline: turns never overlap. Every `turn_started` is followed by
/// exactly one terminal before the next `turn_started`, and no step happens outside a turn.
fn assert_turns_well_formed(id: &str, events: &[Value]) {
    let mut in_turn = false;
    for e in events {
        match etype(e) {
            "turn_started" => {
                assert!(
                    !in_turn,
                    "session {id}: turn_started at seq {} inside a running turn: {:?}",
                    seq(e),
                    event_types(events)
                );
                in_turn = true;
            }
            t if TERMINALS.contains(&t) => {
                assert!(
                    in_turn,
                    "session {id}: terminal {t} at seq {} outside a turn: {:?}",
                    seq(e),
                    event_types(events)
                );
                in_turn = false;
            }
            "step" | "usage" | "task_output" | "heartbeat" | "todos" => assert!(
                in_turn,
                "session {id}: {} at seq {} outside a turn: {:?}",
                etype(e),
                seq(e),
                event_types(events)
            ),
            _ => {}
        }
    }
}

/// The seq of the one `prompt_submitted` carrying `prompt`.
fn prompt_seq(events: &[Value], prompt: &str) -> u64 {
    let found: Vec<&Value> = events
        .iter()
        .filter(|e| etype(e) == "prompt_submitted" && e["event"]["prompt"] == prompt)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected exactly one prompt_submitted {prompt:?}: {:?}",
        event_types(events)
    );
    seq(found[0])
}

/// The `turn_started` events whose turn took `input` (the claim puts the input text first in the
/// turn's messages).
fn turns_taking<'a>(events: &'a [Value], input: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| {
            etype(e) == "turn_started"
                && e["event"]["state"]["agent"]["messages"][0]["content"] == input
        })
        .collect()
}

/// The first terminal at or after `from`.
fn terminal_after(events: &[Value], from: u64) -> Option<&Value> {
    events.iter().find(|e| seq(e) >= from && is_terminal(e))
}

fn url(s: &Server, id: &str, rest: &str) -> String {
    s.sessions_url(&format!("/{id}{rest}"))
}

/// POSTs a message and returns the (schema-checked) ack.
fn message(s: &Server, id: &str, body: Value) -> Value {
    let (status, v) = s.post(&url(s, id, "/messages"), &body);
    assert_eq!(status, 200, "message failed: {v}");
    assert_schema(MESSAGE_RESPONSE, &v);
    assert_eq!(v["ok"], true, "{v}");
    v
}

fn answer(s: &Server, id: &str, text: &str) -> Value {
    let (status, v) = s.post(&url(s, id, "/answer"), &json!({ "answer": text }));
    assert_eq!(status, 200, "answer failed: {v}");
    assert_schema(ANSWER_RESPONSE, &v);
    assert_eq!(v["ok"], true, "{v}");
    v
}

fn interrupt(s: &Server, id: &str) {
    let (status, v) = s.post_raw(&url(s, id, "/interrupt"), "");
    assert_eq!(status, 200, "interrupt failed: {v}");
    assert_schema(INTERRUPT_RESPONSE, &v);
    assert_eq!(v, json!({ "ok": true }));
}

/// Polls the history until `pred` holds; returns the events.
fn wait_history(
    s: &Server,
    id: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + timeout;
    loop {
        let events = s.history_all(id);
        if pred(&events) {
            return events;
        }
        if Instant::now() > deadline {
            panic!(
                "session {id}: timed out after {timeout:?} waiting for {what}: {:?}",
                event_types(&events)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits for a durable text step equal to `text`; returns the history at that point.
fn wait_text(s: &Server, id: &str, text: &str) -> Vec<Value> {
    wait_history(
        s,
        id,
        &format!("text {text:?}"),
        Duration::from_secs(20),
        |ev| ev.iter().any(|e| step_text(e) == Some(text)),
    )
}

/// Polls the detail until `pred` holds; returns it.
fn wait_detail(s: &Server, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    poll_until(what, Duration::from_secs(20), || {
        let d = s.detail(id);
        pred(&d).then_some(d)
    })
}

/// Every session of the (test's own) server, from the list.
fn all_session_ids(s: &Server) -> Vec<String> {
    let (status, v) = s.get(&s.sessions_url("?limit=100"));
    assert_eq!(status, 200, "{v}");
    assert_schema(LIST, &v);
    assert!(v.get("nextCursor").is_none(), "more than 100 sessions");
    v["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_owned())
        .collect()
}

fn phases(machine: &Value) -> Vec<String> {
    machine["orderedPath"]
        .as_array()
        .expect("orderedPath")
        .iter()
        .map(|i| i["phase"].as_str().expect("phase").to_owned())
        .collect()
}

/// `(kind, tier, text)` of a session's queued inputs, oldest first.
fn queued_inputs(s: &Server, id: &str) -> Vec<(String, Option<String>, String)> {
    s.db_rows(&format!(
        "SELECT p.kind, p.tier, p.text FROM pending_inputs p JOIN sessions s ON s.pk = p.session_pk
         WHERE s.id = {} ORDER BY p.seq",
        sql_text(id)
    ))
    .into_iter()
    .map(|row| match &row[..] {
        [Some(kind), tier, Some(text)] => (kind.clone(), tier.clone(), text.clone()),
        other => panic!("a pending input without kind or text: {other:?}"),
    })
    .collect()
}

// ---------------------------------------------------------------------------------------------
// 1. Delivery (R28, R64)

/// R28/R64: on an idle runner the initial prompt and a later message are `accepted`, and the
/// snapshot says truthfully which input was delivered (lastDeliveredInputSeq, deliveryAttempt).
#[test]
fn delivery_accepted_on_idle_runner_with_truthful_snapshot_r28_r64() {
    let s = Server::start();
    let v = s.create(json!({ "prompt": "hello" }));
    assert_schema(CREATE_RESPONSE, &v);
    assert_eq!(v["delivery"], "accepted", "{v}");
    assert_eq!(v["dispatched"], false);
    // The input is seq 2 (after session_created) and the runner took it before answering.
    assert_eq!(v["session"]["lastDeliveredInputSeq"], 2, "{v}");
    let snap = &v["snapshot"];
    assert_eq!(snap["lastDeliveredInputSeq"], 2, "{snap}");
    assert_eq!(snap["deliveryAttempt"]["kind"], "initial_prompt", "{snap}");
    assert_eq!(snap["deliveryAttempt"]["throughSeq"], 2, "{snap}");
    assert!(
        !snap["deliveryAttempt"]["attemptId"]
            .as_str()
            .unwrap_or("")
            .is_empty()
    );
    let id = id_of(&v);
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");

    let n = s.history_all(&id).len() as u64;
    let ack = message(&s, &id, json!({ "prompt": "again" }));
    assert_eq!(ack["delivery"], "accepted", "{ack}");
    assert_eq!(s.wait_terminal(&id, n + 1)["event"]["type"], "complete");
    let events = s.history_all(&id);
    let m = prompt_seq(&events, "again");
    let d = s.detail(&id);
    assert_schema(DETAIL, &d);
    assert_eq!(d["lastDeliveredInputSeq"], m, "{d}");
    assert_eq!(d["deliveryAttempt"]["kind"], "message", "{d}");
    assert_eq!(d["deliveryAttempt"]["throughSeq"], m, "{d}");
    assert_eq!(texts(&events), ["echo: hello", "echo: again"]);
}

/// R28/R64: with one worker busy, a new session and a message to an idle session are `queued`
/// (durable, not delivered: the snapshot says so), and both run, in arrival order, once the worker
/// is free.
#[test]
fn delivery_queued_while_pool_is_busy_then_runs_in_order_r28_r64() {
    let s = Server::start_with_config("[runner]\nworkers = 1\n");
    let idle = s.create_prompt("idle one");
    assert_eq!(s.wait_terminal(&idle, 1)["event"]["type"], "complete");

    let busy = s.create(json!({ "prompt": "/slow 3000\n/reply x" }));
    assert_eq!(busy["delivery"], "accepted", "{busy}");
    let busy_id = id_of(&busy);

    let second = s.create(json!({ "prompt": "second" }));
    assert_schema(CREATE_RESPONSE, &second);
    assert_eq!(second["delivery"], "queued", "{second}");
    let second_id = id_of(&second);
    assert_eq!(second["snapshot"]["lastDeliveredInputSeq"], 0, "{second}");
    assert!(
        second["snapshot"].get("deliveryAttempt").is_none(),
        "{second}"
    );
    // A queued input still counts as work: the session is running (bucket mapping).
    assert_eq!(second["snapshot"]["bucket"], "running");

    let ack = message(&s, &idle, json!({ "prompt": "later" }));
    assert_eq!(ack["delivery"], "queued", "{ack}");
    let d = s.detail(&idle);
    assert_eq!(
        d["lastDeliveredInputSeq"], 2,
        "undelivered message reported: {d}"
    );
    assert_eq!(d["deliveryAttempt"]["kind"], "initial_prompt", "{d}");
    assert_eq!(d["bucket"], "running", "{d}");

    // Nothing of the queued work ran while the only worker was busy.
    let busy_end = s.wait_terminal(&busy_id, 1);
    assert_eq!(busy_end["event"]["type"], "complete");
    let second_end = s.wait_terminal(&second_id, 1);
    assert_eq!(second_end["event"]["type"], "complete");
    let events = s.history_all(&second_id);
    assert_eq!(texts(&events), ["echo: second"]);
    let started = of_type(&events, "turn_started")[0]["createdAt"]
        .as_f64()
        .unwrap();
    assert!(
        started >= busy_end["createdAt"].as_f64().unwrap(),
        "queued session ran before the busy one ended"
    );
    let d = s.detail(&second_id);
    assert_schema(DETAIL, &d);
    assert_eq!(d["lastDeliveredInputSeq"], 2, "{d}");
    assert_eq!(d["deliveryAttempt"]["kind"], "initial_prompt", "{d}");
    assert_eq!(d["deliveryAttempt"]["throughSeq"], 2, "{d}");

    // FIFO: the message queued after `second` runs after it.
    let events = wait_text(&s, &idle, "echo: later");
    let m = prompt_seq(&events, "later");
    let t = turns_taking(&events, "later");
    assert_eq!(t.len(), 1, "{:?}", event_types(&events));
    assert!(t[0]["createdAt"].as_f64().unwrap() >= second_end["createdAt"].as_f64().unwrap());
    s.wait_terminal(&idle, m);
    let d = s.detail(&idle);
    assert_eq!(d["lastDeliveredInputSeq"], m, "{d}");
    assert_eq!(d["deliveryAttempt"]["kind"], "message", "{d}");
    assert_eq!(d["deliveryAttempt"]["throughSeq"], m, "{d}");
}

// ---------------------------------------------------------------------------------------------
// 2–4. Steer, follow-up, message to an idle session

/// R25: a steer message joins the running turn (no second turn_started) and runs right after the
/// step that was current when it arrived, before the terminal.
#[test]
fn steer_joins_running_turn_after_current_step_r25_inv7() {
    let s = Server::start();
    // The turn waits for the steer after `a` (a condition, not a time window).
    let id = s.create_prompt("/reply a\n/await_steer\n/reply b\n/reply c");
    let before = wait_text(&s, &id, "a");
    let done_before = texts(&before);
    let ack = message(&s, &id, json!({ "prompt": "hurry" }));
    assert_eq!(ack["delivery"], "accepted", "{ack}");

    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "complete", "{t}");
    let events = s.history_all(&id);
    assert_eq!(
        count(&events, "turn_started"),
        1,
        "{:?}",
        event_types(&events)
    );
    assert_turns_well_formed(&id, &events);
    let all = texts(&events);
    let pos = all
        .iter()
        .position(|t| t == "steered: hurry")
        .unwrap_or_else(|| panic!("steer never ran: {all:?}"));
    // After everything durable before the POST, at most one step later (the one in progress).
    assert!(
        pos >= done_before.len() && pos <= done_before.len() + 1,
        "steer ran at {pos}: {all:?} (before POST: {done_before:?})"
    );
    let rest: Vec<&String> = all.iter().filter(|t| *t != "steered: hurry").collect();
    assert_eq!(rest, ["a", "b", "c"]);
    let steered = events
        .iter()
        .find(|e| step_text(e) == Some("steered: hurry"))
        .unwrap();
    assert!(seq(steered) < seq(&t));

    let m = prompt_seq(&events, "hurry");
    let p = &events[m as usize - 1]["event"];
    assert_eq!(p["behavior"], "steer");
    assert_eq!(p["inputKind"], "message");
    let d = s.detail(&id);
    assert_eq!(d["lastDeliveredInputSeq"], m, "{d}");
    assert_eq!(d["deliveryAttempt"]["kind"], "message", "{d}");
    assert_eq!(d["deliveryAttempt"]["throughSeq"], m, "{d}");
}

/// R26/invariant 7: follow-ups to a running turn are queued (listed in followUpQueue in order,
/// with follow_up_queue events) and later run as separate turns in submission order.
#[test]
fn follow_ups_queue_in_order_and_run_as_separate_turns_r26_inv7() {
    let s = Server::start();
    let id = s.create_prompt("/slow 1500\n/reply a\n/reply b");
    s.wait_for_event(&id, &["turn_started"], 1, Duration::from_secs(10));
    for f in ["f1", "f2", "f3"] {
        let ack = message(&s, &id, json!({ "prompt": f, "behavior": "follow_up" }));
        assert_eq!(ack["delivery"], "queued", "{f}: {ack}");
    }
    let d = s.detail(&id);
    assert_schema(DETAIL, &d);
    assert_eq!(
        d["followUpQueue"],
        json!([{ "message": "f1" }, { "message": "f2" }, { "message": "f3" }]),
        "{d}"
    );
    assert_eq!(d["turnStatus"], "running");
    assert_eq!(d["bucket"], "running");
    let events = s.history_all(&id);
    assert!(
        !events.iter().any(is_terminal),
        "turn ended before the follow-ups were checked; make it slower"
    );

    let events = wait_text(&s, &id, "echo: f3");
    let last = events
        .iter()
        .find(|e| step_text(e) == Some("echo: f3"))
        .map(seq)
        .unwrap();
    s.wait_terminal(&id, last);
    let events = s.history_all(&id);
    assert_turns_well_formed(&id, &events);
    assert_eq!(
        texts(&events),
        ["a", "b", "echo: f1", "echo: f2", "echo: f3"]
    );
    assert_eq!(
        count(&events, "turn_started"),
        4,
        "{:?}",
        event_types(&events)
    );
    let mut previous = 0;
    for f in ["f1", "f2", "f3"] {
        let t = turns_taking(&events, f);
        assert_eq!(t.len(), 1, "{f} taken {} times", t.len());
        assert!(seq(t[0]) > previous, "{f} ran out of order");
        previous = seq(t[0]);
    }
    for e in &events {
        assert_known_event(&e["event"]);
        if etype(e) == "prompt_submitted" && e["event"]["inputKind"] == "message" {
            assert_eq!(e["event"]["behavior"], "follow_up");
        }
    }
    let lens: Vec<usize> = of_type(&events, "follow_up_queue")
        .iter()
        .map(|e| e["event"]["followUpQueue"].as_array().unwrap().len())
        .collect();
    assert_eq!(lens, [1, 2, 3, 2, 1, 0], "follow_up_queue events");
    let d = s.detail(&id);
    assert_schema(DETAIL, &d);
    assert!(
        d.get("followUpQueue").is_none() || d["followUpQueue"] == json!([]),
        "{d}"
    );
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["bucket"], "done");
}

/// A message (steer or follow-up) to an idle, completed session starts a new turn at once.
#[test]
fn message_to_idle_session_starts_a_new_turn_r25_r26() {
    let s = Server::start();
    let id = s.create_prompt("first");
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");
    assert_eq!(s.detail(&id)["bucket"], "done");

    for (i, (prompt, behavior)) in [("second", "steer"), ("third", "follow_up")]
        .into_iter()
        .enumerate()
    {
        let n = s.history_all(&id).len() as u64;
        let ack = message(&s, &id, json!({ "prompt": prompt, "behavior": behavior }));
        assert_eq!(ack["delivery"], "accepted", "{ack}");
        let t = s.wait_terminal(&id, n + 1);
        assert_eq!(t["event"]["type"], "complete");
        let events = s.history_all(&id);
        assert_eq!(count(&events, "turn_started"), i + 2);
        assert_eq!(turns_taking(&events, prompt).len(), 1);
        assert!(texts(&events).contains(&format!("echo: {prompt}")));
    }
    let events = s.history_all(&id);
    assert_turns_well_formed(&id, &events);
    assert_gapless(&id, &events);
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["bucket"], "done");
}

// ---------------------------------------------------------------------------------------------
// 5. Ask / answer

#[test]
fn ask_then_answer_resumes_and_second_answer_is_409_not_asking() {
    let s = Server::start();
    let id = s.create_prompt("/ask Pick one | a | b");
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "ask", "{t}");
    assert_known_event(&t["event"]);
    let q = &t["event"]["questions"][0];
    assert_eq!(q["question"], "Pick one");
    let labels: Vec<&str> = q["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["a", "b"]);
    let d = s.detail(&id);
    assert_schema(DETAIL, &d);
    assert_eq!(d["turnStatus"], "ask");
    assert_eq!(d["bucket"], "asking");

    let ack = answer(&s, &id, "a");
    assert_eq!(ack["delivery"], "accepted", "{ack}");
    let t2 = s.wait_terminal(&id, seq(&t) + 1);
    assert_eq!(t2["event"]["type"], "complete", "{t2}");
    let events = s.history_all(&id);
    let after: Vec<&str> = events[seq(&t) as usize..].iter().map(etype).collect();
    assert_eq!(after[0], "answer_submitted", "{after:?}");
    assert_eq!(after[1], "turn_started", "{after:?}");
    let a = &events[seq(&t) as usize];
    assert_eq!(a["event"]["answer"], "a");
    assert_eq!(a["event"]["sender"]["kind"], "user");
    assert_eq!(texts(&events), ["answer: a"]);
    assert_eq!(count(&events, "turn_started"), 2);
    assert_turns_well_formed(&id, &events);
    let d = s.detail(&id);
    assert_eq!(d["deliveryAttempt"]["kind"], "answer", "{d}");
    assert_eq!(d["deliveryAttempt"]["throughSeq"], seq(a), "{d}");
    assert_eq!(d["lastDeliveredInputSeq"], seq(a), "{d}");
    assert_eq!(d["bucket"], "done");

    // Not asking any more: 409, and nothing is written.
    let n = events.len();
    let last = d["lastEventSeq"].clone();
    let (status, v) = s.post(&url(&s, &id, "/answer"), &json!({ "answer": "b" }));
    assert_error(status, &v, 409, "not_asking");
    s.wait_runner_idle();
    assert_eq!(s.history_all(&id).len(), n);
    assert_eq!(s.detail(&id)["lastEventSeq"], last);
}

/// The answer resumes the script after the `/ask` line; an answer to a running session is 409.
#[test]
fn answer_continues_script_and_answer_while_running_is_409() {
    let s = Server::start();
    let id = s.create_prompt("/ask Deploy? | yes | no\n/reply deploying\n/reply done");
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "ask");
    answer(&s, &id, "yes");
    s.wait_terminal(&id, seq(&t) + 1);
    assert_eq!(texts(&s.history_all(&id)), ["deploying", "done"]);

    let busy = s.create_prompt("/slow 2000\n/reply x");
    s.wait_for_event(&busy, &["turn_started"], 1, Duration::from_secs(10));
    let n = s.history_all(&busy).len();
    let (status, v) = s.post(&url(&s, &busy, "/answer"), &json!({ "answer": "b" }));
    assert_error(status, &v, 409, "not_asking");
    let events = s.history_all(&busy);
    assert_eq!(count(&events, "answer_submitted"), 0);
    assert!(events.len() <= n + 1, "{:?}", event_types(&events));
}

/// Invariant 8: a question survives SIGKILL; the answer after restart resumes the script where
/// the `/ask` left it.
#[test]
fn ask_survives_kill9_and_answer_resumes_the_script_inv8() {
    let mut s = Server::start();
    let id = s.create_prompt("/ask Go on? | yes | no\n/reply resumed");
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "ask");
    s.kill9_and_restart();
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "ask", "{d}");
    assert_eq!(d["bucket"], "asking", "{d}");
    let ack = answer(&s, &id, "yes");
    assert_eq!(ack["delivery"], "accepted", "{ack}");
    let end = s.wait_terminal(&id, seq(&t) + 1);
    assert_eq!(end["event"]["type"], "complete");
    let events = s.history_all(&id);
    assert_eq!(texts(&events), ["resumed"]);
    assert_eq!(count(&events, "interrupted"), 0);
    assert_gapless(&id, &events);
    assert_turns_well_formed(&id, &events);
}

// ---------------------------------------------------------------------------------------------
// 6. Interrupt

/// An interrupt mid-stream is durable at once; the turn ends `interrupted` with no text after it,
/// and the text it had streamed is kept as its last `text` step (exactly what the stream showed).
#[test]
fn interrupt_mid_stream_ends_turn_interrupted() {
    let s = Server::start();
    let id = s.create_prompt("/slow 50\n/stream 200");
    let sse = s.sse(&id, None, None);
    // Read until the stream is visibly in progress (volatile deltas flowing).
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut deltas = 0;
    let mut shown = String::new();
    while deltas < 3 {
        let f = sse
            .next_frame(deadline.saturating_duration_since(Instant::now()))
            .expect("stream deltas");
        if f.data["event"]["step"]["type"] == "text_delta" {
            deltas += 1;
            shown.push_str(f.data["event"]["step"]["delta"].as_str().unwrap_or(""));
        }
    }
    interrupt(&s, &id);
    // Durable immediately (before the response was sent).
    let events = s.history_all(&id);
    let req = of_type(&events, "interrupt_requested");
    assert_eq!(req.len(), 1, "{:?}", event_types(&events));
    assert!(req[0]["event"]["requestedAt"].is_string());

    let frames = sse.until_terminal(Duration::from_secs(10));
    let last = frames.last().unwrap();
    assert_eq!(last.data["event"]["type"], "interrupted", "{:?}", last.data);
    for f in &frames {
        if f.data["event"]["step"]["type"] == "text_delta" {
            shown.push_str(f.data["event"]["step"]["delta"].as_str().unwrap_or(""));
        }
    }
    // The durable text arrives on the stream before the terminal.
    let kept: Vec<&SseFrame> = frames
        .iter()
        .filter(|f| f.data["event"]["step"]["type"] == "text")
        .collect();
    assert_eq!(kept.len(), 1, "{frames:?}");
    assert_eq!(kept[0].data["event"]["step"]["text"], shown.as_str());
    // Nothing after the terminal: no late delta or text.
    if let Some(f) = sse.next_frame(Duration::from_millis(500)) {
        assert_ne!(
            f.data["event"]["type"], "step",
            "step after terminal: {:?}",
            f.data
        );
    }
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "interrupted");
    assert_eq!(t["event"]["state"]["status"], "interrupted");
    let events = s.history_all(&id);
    assert!(seq(req[0]) < seq(&t));
    let all: String = (1..=200).map(|i| format!("chunk {i} ")).collect();
    assert_eq!(texts(&events), [shown.clone()], "the streamed text is kept");
    assert!(
        shown.starts_with("chunk 1 chunk 2 chunk 3 ") && all.starts_with(&shown),
        "{shown}"
    );
    let text = events
        .iter()
        .find(|e| step_text(e).is_some())
        .expect("text step");
    assert!(seq(text) < seq(&t), "the text comes before the terminal");
    assert_eq!(
        t["event"]["state"]["agent"]["messages"]
            .as_array()
            .and_then(|m| m.last())
            .map(|m| m["content"].clone()),
        Some(json!(shown)),
        "the kept text is the turn's last assistant message"
    );
    assert!(
        !events[seq(&t) as usize..]
            .iter()
            .any(|e| etype(e) == "step"),
        "step after terminal"
    );
    assert_eq!(count(&events, "interrupted"), 1);
    assert_turns_well_formed(&id, &events);
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "interrupted");
    assert_eq!(d["bucket"], "done");
}

/// A turn inside a long pause (or a long task) stops on interrupt even with a tiny grace period,
/// and gets exactly one `interrupted` terminal.
#[test]
fn interrupt_inside_long_pause_with_small_grace() {
    let s = Server::start_with_config("[runner]\ninterrupt_grace_ms = 50\n");
    let paused = s.create_prompt("/slow 60000\n/reply never");
    let task = s.create_prompt("/task long 60000");
    s.wait_for_event(&paused, &["turn_started"], 1, Duration::from_secs(10));
    s.wait_for_event(&task, &["task_started"], 1, Duration::from_secs(10));
    let started = Instant::now();
    interrupt(&s, &paused);
    interrupt(&s, &task);
    for id in [&paused, &task] {
        let t = s.wait_terminal(id, 1);
        assert_eq!(t["event"]["type"], "interrupted", "{t}");
    }
    assert!(started.elapsed() < Duration::from_secs(5));
    // Past the grace period: still exactly one terminal each.
    s.wait_runner_idle();
    for id in [&paused, &task] {
        let events = s.history_all(id);
        assert_eq!(
            count(&events, "interrupted"),
            1,
            "{:?}",
            event_types(&events)
        );
        assert!(texts(&events).is_empty());
        assert_turns_well_formed(id, &events);
        assert_gapless(id, &events);
        assert_eq!(s.detail(id)["bucket"], "done");
    }
    let events = s.history_all(&task);
    let settled = of_type(&events, "task_settled");
    assert_eq!(settled.len(), 1, "{:?}", event_types(&events));
    assert_eq!(settled[0]["event"]["settlement"]["status"], "stopped");
    assert!(seq(settled[0]) < seq(of_type(&events, "interrupted")[0]));
}

/// Interrupting an idle session answers {ok:true} and records only `interrupt_requested`.
#[test]
fn interrupt_idle_session_records_only_the_request() {
    let s = Server::start();
    let id = s.create_prompt("hi");
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");
    let before = s.history_all(&id);
    interrupt(&s, &id);
    s.wait_runner_idle();
    let after = s.history_all(&id);
    assert_eq!(after.len(), before.len() + 1, "{:?}", event_types(&after));
    assert_eq!(etype(after.last().unwrap()), "interrupt_requested");
    assert_eq!(count(&after, "turn_started"), 1);
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["bucket"], "done");
}

// ---------------------------------------------------------------------------------------------
// 7. Sleep / wake

/// A sleep terminal schedules the session; at wakeAt a wake turn continues the script without
/// any input.
#[test]
fn sleep_then_wake_turn_continues_without_input() {
    let s = Server::start();
    let id = s.create_prompt("/sleep 3000\n/reply woke");
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "sleep", "{t}");
    assert_known_event(&t["event"]);
    let wake_at = t["event"]["wakeAt"].as_f64().expect("wakeAt");
    let created = t["createdAt"].as_f64().unwrap();
    assert!(
        wake_at > created + 2000.0 && wake_at <= created + 3010.0,
        "wakeAt {wake_at} vs createdAt {created}"
    );
    let d = s.detail(&id);
    assert_schema(DETAIL, &d);
    assert_eq!(d["turnStatus"], "sleep", "{d}");
    assert_eq!(d["bucket"], "scheduled", "{d}");

    let events = wait_text(&s, &id, "woke");
    let woke = events
        .iter()
        .find(|e| step_text(e) == Some("woke"))
        .unwrap();
    let end = s.wait_terminal(&id, seq(woke));
    assert_eq!(end["event"]["type"], "complete");
    let events = s.history_all(&id);
    let after = &events[seq(&t) as usize..];
    assert!(
        !after
            .iter()
            .any(|e| matches!(etype(e), "prompt_submitted" | "answer_submitted")),
        "wake needed an input: {:?}",
        event_types(&events)
    );
    let starts = of_type(&events, "turn_started");
    assert_eq!(starts.len(), 2);
    assert!(
        starts[1]["createdAt"].as_f64().unwrap() >= wake_at,
        "woke before wakeAt"
    );
    assert_turns_well_formed(&id, &events);
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["bucket"], "done");
}

/// A message before wakeAt wakes the session early; the pending wake is dropped.
#[test]
fn message_wakes_sleeping_session_early_and_drops_the_wake() {
    let s = Server::start();
    let id = s.create_prompt("/sleep 4000\n/reply woke");
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "sleep");
    let wake_at = t["event"]["wakeAt"].as_f64().unwrap();
    let ack = message(&s, &id, json!({ "prompt": "early" }));
    assert_eq!(ack["delivery"], "accepted", "{ack}");
    let end = s.wait_terminal(&id, seq(&t) + 1);
    assert_eq!(end["event"]["type"], "complete");
    assert!(
        end["createdAt"].as_f64().unwrap() < wake_at - 1500.0,
        "the message did not run early"
    );
    let n = s.history_all(&id).len();
    // Past the old wakeAt: no second (wake) turn.
    let now_ms = end["createdAt"].as_f64().unwrap();
    // The old wake time must pass (time itself is the condition here), then the runner must
    // have nothing to do: a wrongly kept wake would have queued a turn by then.
    std::thread::sleep(Duration::from_millis(
        (wake_at - now_ms).max(0.0) as u64 + 700,
    ));
    s.wait_runner_idle();
    let events = s.history_all(&id);
    assert_eq!(
        events.len(),
        n,
        "late wake turn: {:?}",
        event_types(&events)
    );
    assert_eq!(count(&events, "turn_started"), 2);
    assert_eq!(texts(&events), ["echo: early"]);
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["bucket"], "done");
}

/// Invariant 8: a wake survives SIGKILL; the restarted server wakes the session on time.
#[test]
fn sleep_survives_kill9_and_wakes_on_time_inv8() {
    let mut s = Server::start();
    let id = s.create_prompt("/sleep 4000\n/reply woke");
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "sleep");
    let wake_at = t["event"]["wakeAt"].as_f64().unwrap();
    s.kill9_and_restart();
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "sleep", "{d}");
    assert_eq!(d["bucket"], "scheduled", "{d}");
    let events = wait_text(&s, &id, "woke");
    let starts = of_type(&events, "turn_started");
    assert_eq!(starts.len(), 2);
    let woke_at = starts[1]["createdAt"].as_f64().unwrap();
    assert!(woke_at >= wake_at, "woke before wakeAt");
    assert!(
        woke_at < wake_at + 5000.0,
        "woke late: {woke_at} vs {wake_at}"
    );
    let end = s.wait_terminal(&id, seq(starts[1]));
    assert_eq!(end["event"]["type"], "complete");
    let events = s.history_all(&id);
    assert_eq!(
        count(&events, "interrupted"),
        0,
        "{:?}",
        event_types(&events)
    );
    assert_gapless(&id, &events);
    assert_turns_well_formed(&id, &events);
}

// ---------------------------------------------------------------------------------------------
// 8. Tier (R19–R22)

#[test]
fn tier_is_sticky_frozen_per_input_and_answers_use_the_persisted_one_r20_r21_r22() {
    // R20: the answer request has no tier field.
    let schema = load_schema(&format!("sessions/{ANSWER_REQUEST}"));
    assert!(schema["properties"].get("tier").is_none());

    let s = Server::start_with_config("[runner]\nworkers = 1\n");
    let v = s.create(json!({ "prompt": "hello", "tier": "economy" }));
    assert_eq!(v["snapshot"]["tier"], "economy", "{v}");
    let id = id_of(&v);
    s.wait_terminal(&id, 1);
    assert_eq!(s.detail(&id)["tier"], "economy");

    // A message without tier keeps it; one with a tier changes it (R21).
    let n = s.history_all(&id).len() as u64;
    message(&s, &id, json!({ "prompt": "plain" }));
    s.wait_terminal(&id, n + 1);
    assert_eq!(s.detail(&id)["tier"], "economy");
    let n = s.history_all(&id).len() as u64;
    message(
        &s,
        &id,
        json!({ "prompt": "/ask Pick | a | b", "tier": "balanced" }),
    );
    let t = s.wait_terminal(&id, n + 1);
    assert_eq!(t["event"]["type"], "ask");
    assert_eq!(s.detail(&id)["tier"], "balanced");

    // Occupy the only worker so the next inputs stay queued and their frozen tiers are visible.
    let busy = s.create_prompt("/slow 3500\n/reply x");
    s.wait_for_event(&busy, &["turn_started"], 1, Duration::from_secs(10));
    let ack = answer(&s, &id, "a");
    assert_eq!(ack["delivery"], "queued", "{ack}");
    message(
        &s,
        &id,
        json!({ "prompt": "cheap", "tier": "economy", "behavior": "follow_up" }),
    );
    message(
        &s,
        &id,
        json!({ "prompt": "still cheap", "behavior": "follow_up" }),
    );
    let d = s.detail(&id);
    assert_eq!(d["tier"], "economy", "{d}");
    let queued = queued_inputs(&s, &id);
    let want = [
        ("answer", Some("balanced"), "a"),
        ("message", Some("economy"), "cheap"),
        ("message", Some("economy"), "still cheap"),
    ];
    assert_eq!(
        queued.len(),
        want.len(),
        "queued inputs: {queued:?} (did the busy turn end too soon?)"
    );
    for ((kind, tier, text), (wk, wt, wx)) in queued.iter().zip(want) {
        assert_eq!(
            (kind.as_str(), tier.as_deref(), text.as_str()),
            (wk, wt, wx)
        );
    }

    let events = wait_text(&s, &id, "echo: still cheap");
    assert_eq!(
        texts(&events),
        [
            "echo: hello",
            "echo: plain",
            "answer: a",
            "echo: cheap",
            "echo: still cheap"
        ]
    );
    let d = s.detail(&id);
    assert_eq!(d["tier"], "economy");
    assert_schema(DETAIL, &d);
}

// ---------------------------------------------------------------------------------------------
// 9. /wait routes (R43–R51)

/// R43/R46/R47: every wait route answers 200 with the durable terminal of its own input.
#[test]
fn wait_routes_return_the_terminal_of_their_own_turn_r43_r46_r47() {
    let s = Server::start();
    let crid = new_uuid();
    let (status, w) = s.post(
        &s.sessions_url("/wait"),
        &json!({ "prompt": "hello", "clientRequestId": crid }),
    );
    assert_eq!(status, 200, "{w}");
    assert_schema(WAIT_RESPONSE, &w);
    let id = w["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(w["inputSeq"], 2);
    assert_eq!(w["terminal"]["event"]["type"], "complete");
    assert_eq!(w["terminal"]["event"]["status"], "completed");
    let events = s.history_all(&id);
    let complete = of_type(&events, "complete");
    assert_eq!(complete.len(), 1);
    // R46: the exact durable marker.
    assert_eq!(&w["terminal"], complete[0]);
    assert!(
        w.get("history").is_none() && w.get("events").is_none(),
        "R48"
    );

    // messages/wait: the terminal of the message's own (new) turn.
    let (status, m) = s.post(
        &url(&s, &id, "/messages/wait"),
        &json!({ "prompt": "more", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{m}");
    assert_schema(MESSAGE_WAIT_RESPONSE, &m);
    assert_eq!(m["sessionId"], id.as_str());
    let events = s.history_all(&id);
    let input = m["inputSeq"].as_u64().unwrap();
    assert_eq!(input, prompt_seq(&events, "more"));
    let term = m["terminal"]["seq"].as_u64().unwrap();
    assert_eq!(&m["terminal"], &events[term as usize - 1]);
    assert_eq!(terminal_after(&events, input).map(seq), Some(term));
    assert!(
        events[input as usize..term as usize]
            .iter()
            .any(|e| step_text(e) == Some("echo: more"))
    );

    // ask completes a wait; answer/wait returns the resumed turn's terminal.
    let (status, a) = s.post(
        &s.sessions_url("/wait"),
        &json!({ "prompt": "/ask Sure? | yes | no", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{a}");
    assert_eq!(a["terminal"]["event"]["type"], "ask");
    let asking = a["sessionId"].as_str().unwrap().to_owned();
    let (status, r) = s.post(
        &url(&s, &asking, "/answer/wait"),
        &json!({ "answer": "yes", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{r}");
    assert_schema(ANSWER_WAIT_RESPONSE, &r);
    assert_eq!(r["terminal"]["event"]["type"], "complete");
    let events = s.history_all(&asking);
    let input = r["inputSeq"].as_u64().unwrap();
    assert_eq!(etype(&events[input as usize - 1]), "answer_submitted");
    let term = r["terminal"]["seq"].as_u64().unwrap();
    assert!(
        events[input as usize..term as usize]
            .iter()
            .any(|e| step_text(e) == Some("answer: yes"))
    );

    // Child create wait: the child's own terminal.
    let (status, c) = s.post(
        &url(&s, &id, "/sessions/wait"),
        &json!({ "prompt": "child work", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{c}");
    assert_schema(CHILD_WAIT_RESPONSE, &c);
    let child = c["sessionId"].as_str().unwrap().to_owned();
    assert_ne!(child, id);
    assert_eq!(s.detail(&child)["createdBySessionId"], id.as_str());
    let events = s.history_all(&child);
    assert_eq!(&c["terminal"], of_type(&events, "complete")[0]);
    assert_eq!(texts(&events), ["echo: child work"]);

    // R47: a failed turn is a 200 with `complete` status failed, never an HTTP error.
    let (status, f) = s.post(
        &s.sessions_url("/wait"),
        &json!({ "prompt": "/fail boom", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{f}");
    assert_schema(WAIT_RESPONSE, &f);
    assert_eq!(f["terminal"]["event"]["type"], "complete");
    assert_eq!(f["terminal"]["event"]["status"], "failed");
    assert_eq!(f["terminal"]["event"]["error"], "boom");

    // A sleep terminal completes a wait too.
    let (status, z) = s.post(
        &s.sessions_url("/wait"),
        &json!({ "prompt": "/sleep 600000", "clientRequestId": new_uuid() }),
    );
    assert_eq!(status, 200, "{z}");
    assert_eq!(z["terminal"]["event"]["type"], "sleep");
}

/// R44: wait routes require clientRequestId; without it they are 400 and write nothing.
#[test]
fn wait_routes_without_client_request_id_are_400_r44() {
    let s = Server::start();
    let id = s.create_prompt("/ask Q | a | b");
    s.wait_terminal(&id, 1);
    let n = s.history_all(&id).len();
    let cases = [
        (s.sessions_url("/wait"), json!({ "prompt": "x" })),
        (url(&s, &id, "/sessions/wait"), json!({ "prompt": "x" })),
        (url(&s, &id, "/messages/wait"), json!({ "prompt": "x" })),
        (url(&s, &id, "/answer/wait"), json!({ "answer": "a" })),
    ];
    for (u, body) in cases {
        let (status, v) = s.post(&u, &body);
        assert_error(status, &v, 400, "invalid_request");
    }
    assert_eq!(all_session_ids(&s).len(), 1);
    assert_eq!(s.history_all(&id).len(), n);
    assert_eq!(s.detail(&id)["turnStatus"], "ask");
}

/// R49/R50/R51: past the deadline the wait answers 202 pending while the turn goes on; retrying
/// the identical body observes the same input and finally returns its terminal. One session.
#[test]
fn wait_pending_then_identical_retry_returns_the_same_input_r49_r50_r51() {
    let s = Server::start_with_config("[runner]\nwait_deadline_ms = 300\n");
    let body = json!({ "prompt": "/slow 4000\n/reply x", "clientRequestId": new_uuid() });
    let started = Instant::now();
    let (status, p) = s.post(&s.sessions_url("/wait"), &body);
    let took = started.elapsed();
    assert_eq!(status, 202, "{p}");
    assert_schema(WAIT_RESPONSE, &p);
    assert_eq!(p["status"], "pending");
    assert!(
        took >= Duration::from_millis(250),
        "202 before the deadline: {took:?}"
    );
    let id = p["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(p["inputSeq"], 2);

    // Still running: the retry is pending again, for the same input.
    let (status, p2) = s.post(&s.sessions_url("/wait"), &body);
    assert_eq!(status, 202, "{p2}");
    assert_eq!(p2["sessionId"], p["sessionId"]);
    assert_eq!(p2["inputSeq"], p["inputSeq"]);

    // R51: the turn carried on without anyone waiting.
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "complete");
    let (status, w) = s.post(&s.sessions_url("/wait"), &body);
    assert_eq!(status, 200, "{w}");
    assert_schema(WAIT_RESPONSE, &w);
    assert_eq!(w["sessionId"], p["sessionId"]);
    assert_eq!(w["inputSeq"], p["inputSeq"]);
    assert_eq!(w["terminal"], t);

    assert_eq!(all_session_ids(&s), vec![id.clone()]);
    let events = s.history_all(&id);
    assert_eq!(count(&events, "session_created"), 1);
    assert_eq!(count(&events, "prompt_submitted"), 1);
    assert_eq!(count(&events, "turn_started"), 1);

    // The same on messages/wait.
    let body = json!({ "prompt": "/slow 2000\n/reply y", "clientRequestId": new_uuid() });
    let (status, p) = s.post(&url(&s, &id, "/messages/wait"), &body);
    assert_eq!(status, 202, "{p}");
    let input = p["inputSeq"].as_u64().unwrap();
    let t = s.wait_terminal(&id, input);
    let (status, w) = s.post(&url(&s, &id, "/messages/wait"), &body);
    assert_eq!(status, 200, "{w}");
    assert_eq!(w["inputSeq"], input);
    assert_eq!(w["terminal"], t);
    assert_eq!(count(&s.history_all(&id), "prompt_submitted"), 2);
}

/// A steer's wait returns the terminal of the turn it joined; a follow-up's wait the terminal of
/// its own later turn.
#[test]
fn wait_for_steer_returns_joined_turn_terminal_and_follow_up_its_own() {
    let s = Server::start();
    // The turn waits for the steer after `a`, so both messages reach it running.
    let id = s.create_prompt("/reply a\n/await_steer\n/reply b\n/reply c");
    wait_text(&s, &id, "a");
    let (steer, follow) = std::thread::scope(|scope| {
        let f = scope.spawn(|| {
            s.post(
                &url(&s, &id, "/messages/wait"),
                &json!({ "prompt": "later", "behavior": "follow_up", "clientRequestId": new_uuid() }),
            )
        });
        let st = s.post(
            &url(&s, &id, "/messages/wait"),
            &json!({ "prompt": "hurry", "clientRequestId": new_uuid() }),
        );
        (st, f.join().expect("follow-up thread"))
    });
    let events = s.history_all(&id);
    assert_turns_well_formed(&id, &events);
    let first_terminal = terminal_after(&events, 1).unwrap();

    assert_eq!(steer.0, 200, "{}", steer.1);
    assert_schema(MESSAGE_WAIT_RESPONSE, &steer.1);
    assert_eq!(steer.1["inputSeq"], prompt_seq(&events, "hurry"));
    assert_eq!(
        &steer.1["terminal"], first_terminal,
        "steer joined the first turn"
    );
    assert!(texts(&events).contains(&"steered: hurry".to_owned()));
    let steered = events
        .iter()
        .find(|e| step_text(e) == Some("steered: hurry"))
        .unwrap();
    assert!(seq(steered) < seq(first_terminal));

    assert_eq!(follow.0, 200, "{}", follow.1);
    let input = prompt_seq(&events, "later");
    assert_eq!(follow.1["inputSeq"], input);
    let t = turns_taking(&events, "later");
    assert_eq!(t.len(), 1);
    assert_eq!(
        follow.1["terminal"]["seq"].as_u64(),
        terminal_after(&events, seq(t[0])).map(seq)
    );
    assert!(follow.1["terminal"]["seq"].as_u64().unwrap() > seq(first_terminal));
}

// ---------------------------------------------------------------------------------------------
// 10. Jobs (R10–R15)

fn release_mode() -> Value {
    json!({
        "name": "release",
        "prompt": "Ship the release",
        "states": [
            { "name": "research", "prompt": "/reply researched", "kind": "agent" },
            { "name": "draft", "prompt": "/slow 4000\n/reply drafted" },
            { "name": "review", "prompt": "/reply reviewed" }
        ]
    })
}

fn machine_outcome(s: &Server, id: &str) -> Value {
    wait_detail(s, id, "machine outcome", |d| {
        d["machine"].get("outcome").is_some() && d["bucket"] != "running"
    })
}

/// R10/R12/R14/R15: a 3-state machine runs its states in order; between states the bucket is
/// `running` although a turn reported complete; the outcome closes the ordered path.
#[test]
fn machine_runs_all_states_in_order_r10_r12_r14_r15() {
    let s = Server::start();
    let v = s.create(json!({ "prompt": "go", "mode": release_mode() }));
    assert_schema(CREATE_RESPONSE, &v);
    let id = id_of(&v);
    assert_eq!(v["snapshot"]["machine"]["definitionName"], "release", "{v}");
    assert_eq!(v["snapshot"]["requestedMachine"], release_mode());

    // The first state completed; the second runs: a complete turn, but the job is running (R12).
    let events = wait_history(&s, &id, "first complete", Duration::from_secs(10), |ev| {
        count(ev, "complete") >= 1
    });
    assert_eq!(
        of_type(&events, "complete")[0]["event"]["status"],
        "completed"
    );
    let d = s.detail(&id);
    assert_schema(DETAIL, &d);
    assert!(
        d["machine"].get("outcome").is_none(),
        "draft must still run: {d}\n{:?}",
        s.history_all(&id)
            .iter()
            .map(|e| (etype(e).to_owned(), e["createdAt"].clone()))
            .collect::<Vec<_>>()
    );
    assert_eq!(d["bucket"], "running", "R12: {d}");
    let m = &d["machine"];
    assert_eq!(m["activity"], "running", "{m}");
    assert_eq!(m["currentState"], "draft", "{m}");
    assert_eq!(m["followingDefinitionState"], "review", "{m}");
    assert_eq!(m["progress"], json!({ "completed": 1, "total": 3 }));
    assert_eq!(phases(m), ["past", "current", "future"]);
    assert_eq!(m["orderedPath"][0]["kind"], "agent");
    assert_eq!(m["orderedPath"][1]["name"], "draft");
    // The list item carries the same projection (R14).
    let (_, list) = s.get(&s.sessions_url("?limit=100"));
    assert_schema(LIST, &list);
    let item = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["id"] == id.as_str())
        .unwrap();
    assert_eq!(item["machine"]["definitionName"], "release");
    // (Unless the job already finished in the meantime, on a very slow machine.)
    if item["machine"].get("outcome").is_none() {
        assert_eq!(item["bucket"], "running", "R12: {item}");
        assert_eq!(item["machine"]["activity"], "running", "{item}");
    }

    let d = machine_outcome(&s, &id);
    assert_schema(DETAIL, &d);
    let m = &d["machine"];
    assert_eq!(m["outcome"], "completed", "{m}");
    assert_eq!(m["activity"], "idle");
    assert!(m.get("currentState").is_none(), "{m}");
    assert_eq!(m["progress"], json!({ "completed": 3, "total": 3 }));
    assert_eq!(phases(m), ["past", "past", "past", "outcome"]);
    let outcome = &m["orderedPath"][3];
    assert_eq!(outcome["key"], "outcome");
    assert_eq!(outcome["index"], 3);
    assert_eq!(outcome["terminalStatus"], "completed");
    assert_eq!(d["bucket"], "done");
    assert_eq!(d["turnStatus"], "complete");
    assert_eq!(d["requestedMachine"], release_mode());
    let ms = &d["machineState"];
    assert_eq!(ms["terminal"]["status"], "completed", "{ms}");
    for (state, result) in [
        ("research", "researched"),
        ("draft", "drafted"),
        ("review", "reviewed"),
    ] {
        assert_eq!(ms["progress"]["states"][state]["status"], "completed");
        assert_eq!(ms["progress"]["states"][state]["result"], result);
    }

    let events = s.history_all(&id);
    assert_eq!(texts(&events), ["researched", "drafted", "reviewed"]);
    assert_eq!(count(&events, "turn_started"), 3);
    for prompt in [
        "/reply researched",
        "/slow 4000\n/reply drafted",
        "/reply reviewed",
    ] {
        assert_eq!(turns_taking(&events, prompt).len(), 1, "{prompt}");
    }
    assert!(count(&events, "state_machine") >= 4);
    assert_turns_well_formed(&id, &events);
    assert_gapless(&id, &events);
    for e in &events {
        assert_known_event(&e["event"]);
    }
}

/// A state that asks pauses the machine (`waiting`, bucket asking); the answer continues the same
/// state. A state that sleeps pauses it as `sleeping` (bucket scheduled, nextWakeAt).
#[test]
fn machine_ask_and_sleep_pause_the_same_state_r12_r14() {
    let s = Server::start();
    let mode = json!({ "name": "pickjob", "prompt": "p", "states": [
        { "name": "pick", "prompt": "/ask Which? | x | y" },
        { "name": "finish", "prompt": "/reply finished" }
    ]});
    let id = id_of(&s.create(json!({ "prompt": "go", "mode": mode })));
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "ask");
    let d = wait_detail(&s, &id, "machine waiting", |d| d["bucket"] != "running");
    assert_schema(DETAIL, &d);
    assert_eq!(d["bucket"], "asking", "{d}");
    assert_eq!(d["turnStatus"], "ask");
    assert_eq!(d["machine"]["activity"], "waiting");
    assert_eq!(d["machine"]["currentState"], "pick");
    assert_eq!(phases(&d["machine"]), ["current", "future"]);

    answer(&s, &id, "x");
    let d = machine_outcome(&s, &id);
    assert_schema(DETAIL, &d);
    assert_eq!(d["machine"]["outcome"], "completed");
    let events = s.history_all(&id);
    assert_eq!(texts(&events), ["answer: x", "finished"]);
    let ms = &d["machineState"];
    assert_eq!(ms["progress"]["states"]["pick"]["result"], "answer: x");
    let visited: Vec<(&str, &str)> = ms["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["state"].as_str().unwrap(), h["status"].as_str().unwrap()))
        .collect();
    assert_eq!(visited, [("pick", "completed"), ("finish", "completed")]);
    assert_turns_well_formed(&id, &events);

    let mode = json!({ "name": "napjob", "prompt": "p", "states": [
        { "name": "nap", "prompt": "/sleep 2500\n/reply rested" },
        { "name": "end", "prompt": "/reply end" }
    ]});
    let id = id_of(&s.create(json!({ "prompt": "go", "mode": mode })));
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "sleep");
    let d = s.detail(&id);
    assert_schema(DETAIL, &d);
    assert_eq!(d["bucket"], "scheduled", "{d}");
    assert_eq!(d["machine"]["activity"], "sleeping");
    assert_eq!(d["machine"]["currentState"], "nap");
    assert_eq!(
        d["machine"]["nextWakeAt"].as_f64(),
        t["event"]["wakeAt"].as_f64()
    );
    let d = machine_outcome(&s, &id);
    assert_eq!(d["machine"]["outcome"], "completed");
    assert_eq!(texts(&s.history_all(&id)), ["rested", "end"]);
}

/// R11/R12: a Job paused on a question that receives a plain message must not end up stuck: after
/// the message's turn it is either still answerable or the machine went on; either way it reaches
/// an outcome.
#[test]
fn machine_waiting_on_ask_survives_a_message() {
    let s = Server::start();
    let mode = json!({ "name": "pickjob", "prompt": "p", "states": [
        { "name": "pick", "prompt": "/ask Which? | x | y" },
        { "name": "finish", "prompt": "/reply finished" }
    ]});
    let id = id_of(&s.create(json!({ "prompt": "go", "mode": mode })));
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "ask");
    message(&s, &id, json!({ "prompt": "/reply side" }));
    let events = wait_text(&s, &id, "side");
    let side = events
        .iter()
        .find(|e| step_text(e) == Some("side"))
        .unwrap();
    s.wait_terminal(&id, seq(side));
    let d = s.detail(&id);
    if d["bucket"] == "asking" {
        // It says it is asking: then it must take the answer.
        let (status, v) = s.post(&url(&s, &id, "/answer"), &json!({ "answer": "x" }));
        assert_eq!(
            status, 200,
            "bucket asking but the answer is refused: {v}; detail {d}"
        );
    }
    let d = machine_outcome(&s, &id);
    assert_eq!(d["machine"]["outcome"], "completed", "{d}");
    assert!(texts(&s.history_all(&id)).contains(&"finished".to_owned()));
}

/// R11/R12: a message to a Job sleeping in a state must not strand it `sleeping` with a wake time
/// in the past: the state goes on (now or at its wake) and the machine reaches an outcome.
#[test]
fn machine_sleeping_survives_a_message() {
    let s = Server::start();
    let mode = json!({ "name": "napjob", "prompt": "p", "states": [
        { "name": "nap", "prompt": "/sleep 800\n/reply rested" },
        { "name": "end", "prompt": "/reply end" }
    ]});
    let id = id_of(&s.create(json!({ "prompt": "go", "mode": mode })));
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "sleep");
    let wake_at = t["event"]["wakeAt"].as_f64().unwrap();
    message(&s, &id, json!({ "prompt": "hello" }));
    let deadline = Instant::now() + Duration::from_secs(10);
    let d = loop {
        let d = s.detail(&id);
        if d["machine"].get("outcome").is_some() && d["bucket"] != "running" {
            break d;
        }
        assert!(
            Instant::now() <= deadline,
            "Job stuck 10 s after the message: {d} (wakeAt was {wake_at})"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(d["machine"]["outcome"], "completed", "{d}");
    assert!(texts(&s.history_all(&id)).contains(&"end".to_owned()));
}

/// A failed state ends the machine `failed`; an interrupt ends it `interrupted`. Later states
/// never run.
#[test]
fn machine_fail_and_interrupt_end_the_job() {
    let s = Server::start();
    let mode = json!({ "name": "failing", "prompt": "p", "states": [
        { "name": "a", "prompt": "/reply ok" },
        { "name": "b", "prompt": "/fail broke" },
        { "name": "c", "prompt": "/reply never" }
    ]});
    let failing = id_of(&s.create(json!({ "prompt": "go", "mode": mode })));
    let mode = json!({ "name": "stopped", "prompt": "p", "states": [
        { "name": "a", "prompt": "/slow 10000\n/reply slow" },
        { "name": "b", "prompt": "/reply never" }
    ]});
    let stopped = id_of(&s.create(json!({ "prompt": "go", "mode": mode })));

    let d = machine_outcome(&s, &failing);
    assert_schema(DETAIL, &d);
    let m = &d["machine"];
    assert_eq!(m["outcome"], "failed", "{m}");
    assert_eq!(phases(m), ["past", "past", "future", "outcome"]);
    assert_eq!(m["orderedPath"][3]["terminalStatus"], "failed");
    assert_eq!(m["progress"], json!({ "completed": 1, "total": 3 }));
    assert_eq!(d["bucket"], "done");
    let events = s.history_all(&failing);
    assert_eq!(texts(&events), ["ok"]);
    let last = of_type(&events, "complete");
    assert_eq!(last.len(), 2);
    assert_eq!(last[1]["event"]["status"], "failed");
    assert_eq!(last[1]["event"]["error"], "broke");
    assert_eq!(count(&events, "turn_started"), 2);

    s.wait_for_event(&stopped, &["turn_started"], 1, Duration::from_secs(10));
    interrupt(&s, &stopped);
    let d = machine_outcome(&s, &stopped);
    assert_schema(DETAIL, &d);
    let m = &d["machine"];
    assert_eq!(m["outcome"], "interrupted", "{m}");
    assert_eq!(m["activity"], "idle");
    assert_eq!(phases(m), ["past", "future", "outcome"]);
    assert_eq!(d["turnStatus"], "interrupted");
    assert_eq!(d["bucket"], "done");
    s.wait_runner_idle();
    let events = s.history_all(&stopped);
    assert!(texts(&events).is_empty(), "{:?}", texts(&events));
    assert_eq!(count(&events, "turn_started"), 1);
}

/// Bad machine definitions are 400 invalid_request and create nothing.
#[test]
fn machine_bad_definitions_are_400() {
    let s = Server::start();
    let bad = [
        json!({ "name": "m", "prompt": "p", "states": [] }),
        json!({ "name": "m", "prompt": "p", "states": [{ "name": "a" }] }),
        json!({ "name": "m", "prompt": "p", "states": [{ "name": "a", "prompt": "" }] }),
        json!({ "name": "m", "prompt": "p", "states": [
            { "name": "a", "prompt": "x" }, { "name": "a", "prompt": "y" }] }),
        json!({ "name": "m", "prompt": "p", "states": [
            { "name": "a", "prompt": "x", "next": "zz" }] }),
    ];
    for mode in bad {
        let (status, v) = s.post(
            &s.sessions_url(""),
            &json!({ "prompt": "go", "mode": mode }),
        );
        assert_error(status, &v, 400, "invalid_request");
    }
    assert!(all_session_ids(&s).is_empty());
}

// ---------------------------------------------------------------------------------------------
// 11. Tasks

fn is_task_id(s: &str) -> bool {
    s.strip_prefix('t')
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

fn is_turn_scope(s: &str) -> bool {
    s.strip_prefix("turn-")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

#[test]
fn task_runs_with_output_heartbeats_and_settles() {
    let s = Server::start_with_config("[runner]\nheartbeat_ms = 50\n");
    let id = s.create_prompt("/task build 300");
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "complete", "{t}");
    let events = s.history_all(&id);
    for e in &events {
        assert_known_event(&e["event"]);
    }
    assert_turns_well_formed(&id, &events);
    let started = of_type(&events, "task_started");
    assert_eq!(started.len(), 1);
    let task = &started[0]["event"]["task"];
    assert!(is_task_id(task["id"].as_str().unwrap()), "{task}");
    assert_eq!(task["id"], "t1");
    assert!(
        is_turn_scope(task["ownerScopeId"].as_str().unwrap()),
        "{task}"
    );
    assert_eq!(task["name"], "build");
    assert_eq!(task["status"], "running");
    let chunks: Vec<&str> = of_type(&events, "task_output")
        .iter()
        .map(|e| {
            assert_eq!(e["event"]["taskId"], "t1");
            e["event"]["chunk"].as_str().unwrap()
        })
        .collect();
    assert_eq!(chunks, ["tick 1/3\n", "tick 2/3\n", "tick 3/3\n"]);
    let beats = of_type(&events, "heartbeat");
    assert!(
        !beats.is_empty(),
        "no heartbeat: {:?}",
        event_types(&events)
    );
    let settled = of_type(&events, "task_settled");
    assert_eq!(settled.len(), 1);
    let st = &settled[0]["event"]["settlement"];
    assert_eq!(st["id"], "t1");
    assert_eq!(st["status"], "completed");
    assert_eq!(st["result"], "build done");
    for b in &beats {
        assert_eq!(b["event"]["activeTaskIds"], json!(["t1"]), "{b}");
        assert!(seq(b) > seq(started[0]) && seq(b) < seq(settled[0]));
    }
    assert!(seq(settled[0]) < seq(&t));
}

/// Invariant 8: SIGKILL during a long task; after restart the task is settled `lost` and the turn
/// ends `interrupted` after a system event with code runner_exited.
#[test]
fn kill9_during_task_settles_it_lost_and_interrupts_the_turn_inv8() {
    let mut s = Server::start();
    let id = s.create_prompt("/task long 10000");
    s.wait_for_event(&id, &["task_output"], 1, Duration::from_secs(10));
    s.kill9_and_restart();
    let t = s.wait_terminal(&id, 1);
    assert_eq!(t["event"]["type"], "interrupted", "{t}");
    let events = s.history_all(&id);
    assert_gapless(&id, &events);
    for e in &events {
        assert_known_event(&e["event"]);
    }
    let settled = of_type(&events, "task_settled");
    assert_eq!(settled.len(), 1, "{:?}", event_types(&events));
    assert_eq!(settled[0]["event"]["settlement"]["id"], "t1");
    assert_eq!(settled[0]["event"]["settlement"]["status"], "lost");
    let sys = &events[seq(&t) as usize - 2];
    assert_eq!(etype(sys), "system", "{:?}", event_types(&events));
    assert_eq!(sys["event"]["metadata"]["code"], "runner_exited");
    assert!(seq(settled[0]) < seq(sys));
    let d = s.detail(&id);
    assert_eq!(d["turnStatus"], "interrupted");
    assert_eq!(d["bucket"], "done");
}

// ---------------------------------------------------------------------------------------------
// 12. Titles

#[test]
fn titles_excerpt_auto_failed_and_manual_is_final() {
    let s = Server::start();
    let v = s.create(json!({ "prompt": "Please draft   the release notes\nwith details" }));
    let snap = &v["snapshot"];
    assert_eq!(snap["title"], "Please draft the release notes");
    assert_eq!(snap["titleOrigin"], "excerpt");
    let plain = id_of(&v);

    let auto = s.create_prompt("/title Release plan\n/reply ok");
    let fail = s.create_prompt("/title !fail\n/reply ok");
    let manual = s.create_prompt("/title Auto name\n/slow 500\n/reply ok");
    let (status, p) = s.patch(&url(&s, &manual, ""), &json!({ "title": "Mine" }));
    assert_eq!(status, 200, "{p}");
    assert_eq!(p["titleOrigin"], "manual");
    assert_eq!(p["title"], "Mine");

    let d = wait_detail(&s, &auto, "auto title", |d| d["titleOrigin"] == "auto");
    assert_schema(DETAIL, &d);
    assert_eq!(d["title"], "Release plan");
    assert_eq!(d["titleStatus"], "complete");

    let d = wait_detail(&s, &fail, "failed title", |d| d["titleStatus"] == "failed");
    assert_eq!(d["titleOrigin"], "excerpt");
    assert_eq!(d["title"], "/title !fail");

    s.wait_terminal(&manual, 1);
    s.wait_terminal(&plain, 1);
    // Give the automatic title every chance to (wrongly) land.
    std::thread::sleep(Duration::from_millis(500));
    let d = s.detail(&manual);
    assert_eq!(d["title"], "Mine", "{d}");
    assert_eq!(d["titleOrigin"], "manual");
    assert_eq!(d["titleStatus"], "complete");
    let d = s.detail(&plain);
    assert_eq!(
        d["titleOrigin"], "excerpt",
        "no engine title for a plain prompt"
    );
    assert_eq!(d["title"], "Please draft the release notes");
}

// ---------------------------------------------------------------------------------------------
// 13. Crash recovery (invariants 2, 3, 7, 8)

/// Invariant 8: inputs queued behind a turn that a crash cut off are delivered after restart, in
/// order, without any other activity to nudge the runner.
#[test]
fn kill9_redelivers_queued_follow_ups_in_order_inv8() {
    let mut s = Server::start();
    let id = s.create_prompt("/slow 300\n/stream 100");
    s.wait_for_event(&id, &["turn_started"], 1, Duration::from_secs(10));
    for f in ["f1", "f2"] {
        let ack = message(&s, &id, json!({ "prompt": f, "behavior": "follow_up" }));
        assert_eq!(ack["delivery"], "queued");
    }
    s.kill9_and_restart();
    let events = wait_history(
        &s,
        &id,
        "queued follow-ups to run after restart",
        Duration::from_secs(10),
        |ev| ev.iter().any(|e| step_text(e) == Some("echo: f2")),
    );
    let f2_turn = seq(turns_taking(&events, "f2")[0]);
    let t = s.wait_terminal(&id, f2_turn);
    let events = s.history_all(&id);
    // The cut-off turn ended with runner_exited; the follow-ups ran after it.
    let first_end = terminal_after(&events, 1).unwrap();
    assert_eq!(etype(first_end), "interrupted");
    assert_eq!(
        events[seq(first_end) as usize - 2]["event"]["metadata"]["code"],
        "runner_exited"
    );
    assert_gapless(&id, &events);
    assert_turns_well_formed(&id, &events);
    assert_eq!(texts(&events), ["echo: f1", "echo: f2"]);
    let f1 = turns_taking(&events, "f1");
    let f2 = turns_taking(&events, "f2");
    assert_eq!((f1.len(), f2.len()), (1, 1));
    assert!(seq(f1[0]) < seq(f2[0]));
    assert_eq!(t["event"]["type"], "complete");
    assert_eq!(s.detail(&id)["bucket"], "done");
}

struct Tracked {
    id: String,
    kind: usize,
    prompt: String,
    create_crid: String,
    notes: Vec<(u64, String)>,
    /// `(clientRequestId, prompt, behavior)`
    messages: Vec<(String, String, &'static str)>,
}

/// Invariants 2, 3, 7, 8: SIGKILL while turns run. Every acknowledged input is there exactly once,
/// seqs stay gapless, every turn ends (nothing stays running), queued inputs run in order.
#[test]
fn crash_with_mixed_work_loses_nothing_and_every_turn_ends_inv2_inv3_inv7_inv8() {
    let mut s = Server::start_with_config("[runner]\nworkers = 6\n");
    let mut tracked: Vec<Tracked> = Vec::new();
    for i in 0..20 {
        let kind = i % 4;
        let prompt = match kind {
            0 => format!("/slow 300\n/stream 20\n/reply slow {i}"),
            1 => format!("/ask Pick {i} | a | b"),
            2 => format!("/sleep {}\n/reply woke {i}", 3000 + 50 * i),
            _ => format!("/slow 100\n/reply r{i}a\n/reply r{i}b"),
        };
        let crid = new_uuid();
        let v = s.create(json!({ "prompt": prompt, "clientRequestId": crid }));
        tracked.push(Tracked {
            id: id_of(&v),
            kind,
            prompt,
            create_crid: crid,
            notes: Vec::new(),
            messages: Vec::new(),
        });
    }
    for (i, t) in tracked.iter_mut().enumerate() {
        let note = format!("note {i}");
        let (status, v) = s.post(
            &url(&s, &t.id, "/note"),
            &json!({ "note": note, "clientRequestId": new_uuid() }),
        );
        assert_eq!(status, 200, "{v}");
        t.notes.push((v["seq"].as_u64().unwrap(), note));
        let msgs: Vec<(String, &'static str)> = match t.kind {
            0 | 3 => vec![
                (format!("fu {i}.1"), "follow_up"),
                (format!("fu {i}.2"), "follow_up"),
            ],
            1 => vec![(format!("steer {i}"), "steer")],
            _ => Vec::new(),
        };
        for (text, behavior) in msgs {
            let crid = new_uuid();
            let ack = message(
                &s,
                &t.id,
                json!({ "prompt": text, "behavior": behavior, "clientRequestId": crid }),
            );
            assert!(ack["delivery"] == "accepted" || ack["delivery"] == "queued");
            t.messages.push((crid, text, behavior));
        }
    }
    // Crash while turns are running.
    let running = tracked
        .iter()
        .filter(|t| t.kind == 0)
        .filter(|t| {
            // The long initial turn is in flight (it lasts 6 s; the crash comes well before).
            let ev = s.history_all(&t.id);
            count(&ev, "turn_started") == 1 && !ev.iter().any(is_terminal)
        })
        .count();
    assert!(running > 0, "no turn was running at the crash");
    s.kill9_and_restart();

    // Every session settles: no bucket stays `running`, sleepers wake — or, where a slow host
    // had a sleeper's turn (its first, before it slept, or its wake) running at the crash, that
    // turn ends as recovery ends every turn the crash cut off (neither is run again).
    let deadline = Instant::now() + Duration::from_secs(40);
    for t in &tracked {
        poll_until(
            &format!("session {} (kind {}) to settle", t.id, t.kind),
            deadline.saturating_duration_since(Instant::now()),
            || {
                let d = s.detail(&t.id);
                let woke = t.kind != 2 || {
                    let events = s.history_all(&t.id);
                    let cut_off = count(&events, "turn_started") >= 1
                        && events.last().is_some_and(|e| etype(e) == "interrupted");
                    cut_off || texts(&events).iter().any(|x| x.starts_with("woke"))
                };
                (d["bucket"] != "running" && d["turnStatus"] != "running" && woke).then_some(())
            },
        );
    }

    let ids: HashSet<String> = all_session_ids(&s).into_iter().collect();
    assert_eq!(ids.len(), tracked.len(), "sessions lost or duplicated");
    let mut runner_exited = 0;
    for t in &tracked {
        assert!(ids.contains(&t.id));
        let events = s.history_all(&t.id);
        assert_gapless(&t.id, &events);
        assert_turns_well_formed(&t.id, &events);
        for e in &events {
            assert_known_event(&e["event"]);
        }
        // The create, once.
        let created = of_type(&events, "session_created");
        assert_eq!(created.len(), 1);
        assert_eq!(
            created[0]["event"]["clientRequestId"],
            t.create_crid.as_str()
        );
        assert_eq!(prompt_seq(&events, &t.prompt), 2);
        // Notes, once, at their acknowledged seq.
        for (n, text) in &t.notes {
            let e = &events[*n as usize - 1];
            assert_eq!(etype(e), "note_submitted", "{}: seq {n}", t.id);
            assert_eq!(e["event"]["note"], text.as_str());
            let dupes = events
                .iter()
                .filter(|e| e["event"]["note"] == text.as_str())
                .count();
            assert_eq!(dupes, 1, "note {text} duplicated");
        }
        // Messages, once; follow-ups each taken by exactly one turn, in submission order.
        let mut last_turn = 0;
        for (crid, text, behavior) in &t.messages {
            let found: Vec<&Value> = events
                .iter()
                .filter(|e| e["event"]["clientRequestId"] == crid.as_str())
                .collect();
            assert_eq!(
                found.len(),
                1,
                "{}: message {text} present {} times",
                t.id,
                found.len()
            );
            assert_eq!(etype(found[0]), "prompt_submitted");
            assert_eq!(found[0]["event"]["prompt"], text.as_str());
            if *behavior == "follow_up" {
                let turns = turns_taking(&events, text);
                assert_eq!(
                    turns.len(),
                    1,
                    "{}: follow-up {text} taken {} times: {:?}",
                    t.id,
                    turns.len(),
                    event_types(&events)
                );
                assert!(
                    seq(turns[0]) > last_turn,
                    "{}: follow-up {text} out of order",
                    t.id
                );
                last_turn = seq(turns[0]);
            }
        }
        let types = event_types(&events);
        for (i, ty) in types.iter().enumerate() {
            if ty == "interrupted"
                && i > 0
                && events[i - 1]["event"]["metadata"]["code"] == "runner_exited"
            {
                runner_exited += 1;
            }
        }
        let d = s.detail(&t.id);
        assert_schema(DETAIL, &d);
        assert_eq!(d["lastEventSeq"], events.len() as u64);
    }
    assert!(
        runner_exited >= running,
        "in-flight turns without runner_exited: {runner_exited} < {running}"
    );
}

// ---------------------------------------------------------------------------------------------
// 14. Concurrent idempotent creates (R29, invariant 4)

#[test]
fn concurrent_identical_creates_make_one_session_r29_inv4() {
    let s = Server::start();
    let mut ids = BTreeMap::new();
    for round in 0..5 {
        let body = json!({ "prompt": format!("twin {round}"), "clientRequestId": new_uuid() });
        let barrier = Barrier::new(2);
        let results: Vec<(u16, Value)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        s.post(&s.sessions_url(""), &body)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("thread"))
                .collect()
        });
        for (status, v) in &results {
            assert_eq!(*status, 200, "{v}");
            assert_schema(CREATE_RESPONSE, v);
        }
        let a = id_of(&results[0].1);
        assert_eq!(a, id_of(&results[1].1), "round {round}: two sessions");
        ids.insert(round, a);
    }
    let listed = all_session_ids(&s);
    assert_eq!(listed.len(), 5, "{listed:?}");
    for id in ids.values() {
        assert!(listed.contains(id));
        s.wait_terminal(id, 1);
        let events = s.history_all(id);
        assert_eq!(count(&events, "session_created"), 1);
        assert_eq!(count(&events, "prompt_submitted"), 1);
        assert_eq!(count(&events, "turn_started"), 1);
    }
}

/// A tier the engine cannot honour is clamped to the nearest one it can,
/// recorded as `tier_clamped`; the session's sticky tier stays what was asked for (R21).
#[test]
fn unsupported_tier_is_clamped_and_recorded() {
    let s = Server::start();
    let (status, body) = s.post(
        &s.url("/v1/ws/default/agents"),
        &json!({"slug": "cheap", "engine": {"kind": "scripted", "tiers": ["economy"]}}),
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = s.post(
        &s.url("/v1/ws/default/agents"),
        &json!({"slug": "bad", "engine": {"kind": "scripted", "tiers": ["ultra"]}}),
    );
    assert_eq!(status, 400, "{body}");
    let (status, created) = s.post(
        &s.url("/v1/ws/default/agents/cheap/sessions/default/messages"),
        &json!({"prompt": "/reply hi", "tier": "frontier"}),
    );
    assert_eq!(status, 200, "{created}");
    let id = created["session"]["sessionId"]
        .as_str()
        .expect("id")
        .to_owned();
    s.wait_terminal(&id, 1);
    let events = s.history_all(&id);
    let clamped: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["event"]["type"] == "tier_clamped")
        .collect();
    assert_eq!(clamped.len(), 1, "{events:#?}");
    assert_eq!(clamped[0]["event"]["requestedTier"], "frontier");
    assert_eq!(clamped[0]["event"]["effectiveTier"], "economy");
    assert_known_event(&clamped[0]["event"]);
    assert_eq!(s.detail(&id)["tier"], "frontier");
    // An engine that honours the tier records nothing.
    let plain = s.create(json!({"prompt": "/reply hi", "tier": "frontier"}));
    let pid = plain["session"]["sessionId"]
        .as_str()
        .expect("id")
        .to_owned();
    s.wait_terminal(&pid, 1);
    assert!(!event_types(&s.history_all(&pid)).contains(&"tier_clamped".to_owned()));
}
