//! The `openai` engine against a real model server: llama.cpp's own OpenAI-compatible server
//! (`xllamacpp`) with SmolLM2-135M-Instruct on the CPU, reached through a recording proxy
//! (`common/llama.rs`), so that what sessiond recorded is compared with what the server sent.
//!
//! The server and the model come from the `llama` suite's venv (`tests/python/llama/`, made on
//! first use). Without it these tests fail when `CI` is set and are reported as skipped otherwise.
//! A 135M model on two shared cores is slow: prompts are short, replies a few tokens, every wait
//! is on a condition with a generous bound, and the tests take the server one at a time.

mod common;
#[path = "common/llama.rs"]
mod llama;
#[path = "common/venv.rs"]
mod venv;

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use llama::*;
use serde_json::{Value, json};

/// Longest wait for anything the model does.
const SLOW: Duration = Duration::from_secs(300);

/// One model server at a time: each takes both cores while it generates.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A llama.cpp server, the tap in front of it and a sessiond whose default engine talks to it.
struct Rig {
    llama: Llama,
    tap: Tap,
    s: Server,
    _turn: MutexGuard<'static, ()>,
}

/// Every built-in tool but `keep` switched off.
fn tools_except(keep: &[&str]) -> Value {
    let all = [
        "ask_user",
        "todo_write",
        "sleep_until",
        "start_session",
        "message_session",
        "read_file",
        "write_file",
        "list_dir",
        "search_files",
    ];
    let disabled: Vec<&str> = all.into_iter().filter(|t| !keep.contains(t)).collect();
    json!({ "disabled": disabled })
}

fn rig(options: LlamaOptions, engine: Value) -> Option<Rig> {
    let python = llama::python()?;
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let llama = Llama::start(&python, options);
    let tap = Tap::start(&llama.addr);
    let mut e = json!({
        "kind": "openai",
        "baseUrl": tap.base_url(),
        "model": "smollm2",
        "systemPrompt": "You are a helpful assistant. Answer in one short sentence.",
        "maxTokens": 12,
        "titles": false,
        "tools": tools_except(&[]),
        "retryBaseMs": 200,
        "idleTimeoutMs": 120000,
    });
    for (k, v) in engine.as_object().expect("engine object") {
        e[k] = v.clone();
    }
    let s = Server::start_with_env(None, &[("SESSIOND_ENGINE", Some(&e.to_string()))]);
    Some(Rig {
        llama,
        tap,
        s,
        _turn: turn,
    })
}

fn create(s: &Server, prompt: &str) -> String {
    id_of(&create_checked(s, json!({ "prompt": prompt })))
}

fn message(s: &Server, id: &str, prompt: &str) {
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({ "prompt": prompt }),
    );
    assert_eq!(status, 200, "{v}");
}

/// Waits for the n-th terminal of the session, then returns its whole (schema-checked) history.
fn terminals(s: &Server, id: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + SLOW;
    loop {
        let events = s.history_all(id);
        if events.iter().filter(|e| is_terminal(e)).count() >= n {
            return history_checked(s, id, 500);
        }
        assert!(
            Instant::now() < deadline,
            "no terminal #{n}: {:?}",
            event_types(&events)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Reads the stream until the reply's first text delta.
fn wait_first_delta(sse: &Sse) {
    let deadline = Instant::now() + SLOW;
    loop {
        let frame = sse
            .next_frame(deadline.saturating_duration_since(Instant::now()))
            .expect("a text delta before the deadline");
        if frame.data["event"]["step"]["type"] == "text_delta" {
            return;
        }
    }
}

fn inner_of_type<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events
        .iter()
        .map(|e| &e["event"])
        .filter(|e| e["type"] == ty)
        .collect()
}

fn texts(events: &[Value]) -> Vec<String> {
    inner_of_type(events, "step")
        .into_iter()
        .filter(|e| e["step"]["type"] == "text")
        .filter_map(|e| e["step"]["text"].as_str().map(str::to_owned))
        .collect()
}

/// The session's turns each ended `completed` with some text.
fn assert_completed_with_text(events: &[Value]) {
    let last = events
        .iter()
        .rev()
        .find(|e| is_terminal(e))
        .expect("a terminal");
    assert_eq!(last["event"]["type"], "complete", "{last}");
    assert_eq!(last["event"]["status"], "completed", "{last}");
    assert!(
        texts(events).iter().any(|t| !t.trim().is_empty()),
        "a text reply: {:?}",
        event_types(events)
    );
}

/// `usage` as sessiond records it equals `usage` as the server reported it.
fn assert_usage_is_the_servers(recorded: &Value, reported: &Value) {
    let n = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(-1.0);
    let cached = n(reported, "/prompt_tokens_details/cached_tokens").max(0.0);
    let call = &recorded["lastMessageUsage"];
    assert_eq!(
        n(call, "/input"),
        n(reported, "/prompt_tokens") - cached,
        "{call} vs {reported}"
    );
    assert_eq!(n(call, "/cacheRead"), cached, "{call} vs {reported}");
    assert_eq!(
        n(call, "/output"),
        n(reported, "/completion_tokens"),
        "{call} vs {reported}"
    );
    assert_eq!(
        n(call, "/totalTokens"),
        n(reported, "/prompt_tokens") + n(reported, "/completion_tokens")
    );
}

#[test]
fn streamed_turns_record_the_servers_usage_and_a_follow_up_carries_the_conversation() {
    let Some(r) = rig(LlamaOptions::default(), json!({})) else {
        return;
    };
    let id = create(&r.s, "Say hello to me.");
    let events = terminals(&r.s, &id, 1);
    assert_completed_with_text(&events);
    let chats = r.tap.chats();
    assert_eq!(chats.len(), 1);
    let first = &chats[0];
    assert_eq!(first.body()["stream"], true);
    let response = first.response.as_ref().expect("a response");
    assert!(
        response
            .header("content-type")
            .unwrap_or("")
            .starts_with("text/event-stream"),
        "the reply was streamed"
    );
    assert!(response.sse_done());
    assert_eq!(
        texts(&events),
        [first.reply_text()],
        "the text stored is the text streamed"
    );
    let usage = inner_of_type(&events, "usage");
    assert_eq!(usage.len(), 1);
    assert_usage_is_the_servers(usage[0], &first.reported_usage().expect("usage reported"));
    assert!(
        inner_of_type(&events, "system").is_empty(),
        "no retries, no estimates: {:?}",
        inner_of_type(&events, "system")
    );

    message(&r.s, &id, "And now say goodbye.");
    let events = terminals(&r.s, &id, 2);
    assert_completed_with_text(&events);
    let chats = r.tap.chats();
    assert_eq!(chats.len(), 2);
    let body = chats[1].body();
    let sent = roles_and_contents(&body["messages"].as_array().expect("messages")[1..]);
    assert_eq!(
        sent,
        [
            ("user".to_owned(), "Say hello to me.".to_owned()),
            ("assistant".to_owned(), chats[0].reply_text()),
            ("user".to_owned(), "And now say goodbye.".to_owned()),
        ]
    );
    let usage = inner_of_type(&events, "usage");
    assert_usage_is_the_servers(
        usage[1],
        &chats[1].reported_usage().expect("usage reported"),
    );
}

#[test]
fn six_concurrent_sessions_all_get_their_text() {
    let Some(r) = rig(
        LlamaOptions {
            parallel: 2,
            ..LlamaOptions::default()
        },
        json!({"maxTokens": 8}),
    ) else {
        return;
    };
    let prompts = [
        "Name a colour.",
        "Name a fruit.",
        "Name an animal.",
        "Name a city.",
        "Name a tree.",
        "Name a river.",
    ];
    let ids: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|p| scope.spawn(|| create(&r.s, p)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("create"))
            .collect()
    });
    for id in &ids {
        let events = terminals(&r.s, id, 1);
        assert_completed_with_text(&events);
        let usage = inner_of_type(&events, "usage");
        assert_eq!(usage.len(), 1, "{id}: {:?}", event_types(&events));
        assert!(usage[0]["turnUsage"]["output"].as_f64().unwrap_or(0.0) >= 1.0);
    }
    let chats = r.tap.chats();
    assert_eq!(chats.len(), 6, "one call each, no retries");
    assert!(
        chats
            .iter()
            .all(|c| c.response.as_ref().is_some_and(|r| r.sse_done()))
    );
}

#[test]
fn an_interrupt_closes_the_request_and_the_server_stops_generating() {
    let max_tokens = 400;
    let Some(r) = rig(
        LlamaOptions {
            ignore_eos: true,
            ..LlamaOptions::default()
        },
        json!({ "maxTokens": max_tokens }),
    ) else {
        return;
    };
    let id = create(&r.s, "Count from one to one thousand.");
    let sse = r.s.sse(&id, Some(0), None);
    wait_first_delta(&sse);
    let (status, v) =
        r.s.post(&r.s.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert_eq!(status, 200, "{v}");
    let events = terminals(&r.s, &id, 1);
    assert_eq!(
        events
            .iter()
            .rev()
            .find(|e| is_terminal(e))
            .expect("terminal")["event"]["type"],
        "interrupted"
    );
    // sessiond closed the connection mid-reply, and the server stopped: it is idle having
    // generated far fewer tokens than it was asked for.
    let chats = r.tap.wait_chats(1, SLOW);
    assert!(chats[0].closed_by_client, "sessiond closed the request");
    let predicted = poll_until("the server is idle", SLOW, || {
        (r.llama.metric("requests_processing") == 0.0)
            .then(|| r.llama.metric("tokens_predicted_total"))
    });
    assert!(
        predicted < f64::from(max_tokens) / 2.0,
        "the server stopped early: {predicted} of {max_tokens} tokens"
    );
    // What streamed before the interrupt is kept, and its usage is an estimate marked as one.
    assert!(!texts(&events).is_empty(), "{:?}", event_types(&events));
    let marks: Vec<&Value> = inner_of_type(&events, "system")
        .into_iter()
        .filter(|e| e["metadata"]["code"] == "usage_estimated")
        .collect();
    assert_eq!(marks.len(), 1, "{:?}", event_types(&events));
}

#[test]
fn tools_are_offered_without_breaking_the_turn() {
    let Some(r) = rig(
        LlamaOptions::default(),
        json!({"tools": tools_except(&["list_dir", "todo_write"]), "maxSteps": 3}),
    ) else {
        return;
    };
    let id = create(&r.s, "Say hi.");
    let events = terminals(&r.s, &id, 1);
    // The title call after the turn may still be answering: wait until every exchange seen so far
    // has settled before judging them.
    let seen = r.tap.chats().len();
    let chats = r.tap.wait_chats(seen, Duration::from_secs(120));
    let body = chats[0].body();
    let offered: Vec<&str> = body["tools"]
        .as_array()
        .expect("tools offered")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(offered, ["todo_write", "list_dir"]);
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["stream"], true, "llama.cpp streams with tools");
    let last = events
        .iter()
        .rev()
        .find(|e| is_terminal(e))
        .expect("terminal");
    assert_eq!(last["event"]["type"], "complete");
    let failed = last["event"]["status"] == "failed";
    assert!(
        !failed
            || last["event"]["error"]
                .as_str()
                .unwrap_or("")
                .contains("maxSteps"),
        "the turn did not break: {last}"
    );
    assert!(
        inner_of_type(&events, "system")
            .iter()
            .all(|e| !e["message"].as_str().unwrap_or("").contains("retrying")),
        "no retries: {:?}",
        inner_of_type(&events, "system")
    );
    // Every reply reached its end: the HTTP body's last chunk, or the stream's `[DONE]` (sessiond
    // may hang up once it has read that, before the chunked terminator arrives).
    assert!(chats.iter().all(|c| c.response.as_ref().is_some_and(|r| {
        r.complete || String::from_utf8_lossy(&r.body).contains("data: [DONE]")
    })));
}

#[test]
fn a_killed_model_server_is_retried_until_it_is_back() {
    let Some(mut r) = rig(
        LlamaOptions {
            ignore_eos: true,
            ..LlamaOptions::default()
        },
        json!({"maxTokens": 24, "maxRetries": 10, "retryBaseMs": 250}),
    ) else {
        return;
    };
    // Killed between turns: the next turn's calls are refused until it is back.
    let id = create(&r.s, "Say hello.");
    assert_completed_with_text(&terminals(&r.s, &id, 1));
    r.llama.kill();
    message(&r.s, &id, "Say hello again.");
    poll_until("a retry is recorded", SLOW, || {
        r.s.history_all(&id)
            .iter()
            .any(|e| e["event"]["type"] == "system" && e["event"]["level"] == "warn")
            .then_some(())
    });
    r.llama.restart();
    r.tap.set_upstream(&r.llama.addr);
    let events = terminals(&r.s, &id, 2);
    assert_completed_with_text(&events);

    // Killed mid-reply: live clients are told the partial text is void, and the retry answers.
    let after = events.last().and_then(|e| e["seq"].as_u64()).expect("seq");
    let sse = r.s.sse(&id, Some(after), None);
    message(&r.s, &id, "Tell me a story.");
    wait_first_delta(&sse);
    r.llama.kill();
    let frames = poll_until("the void notice", SLOW, || {
        let f = sse.next_frame(Duration::from_millis(100))?;
        (f.data["event"]["metadata"]["code"] == "partial_text_void").then_some(f)
    });
    assert_eq!(frames.data["event"]["type"], "system");
    r.llama.restart();
    r.tap.set_upstream(&r.llama.addr);
    let events = terminals(&r.s, &id, 3);
    assert_completed_with_text(&events);
    let last_text = texts(&events).pop().expect("text");
    let answered = r
        .tap
        .chats()
        .into_iter()
        .rev()
        .find(|c| c.response.as_ref().is_some_and(|r| r.sse_done()))
        .expect("a whole reply");
    assert_eq!(
        last_text,
        answered.reply_text(),
        "only the retry's text is stored"
    );
}

#[test]
fn the_models_title_is_cleaned_up() {
    let Some(r) = rig(
        LlamaOptions::default(),
        json!({"titles": true, "maxTokens": 16}),
    ) else {
        return;
    };
    let id = create(&r.s, "Plan a small vegetable garden.");
    assert_completed_with_text(&terminals(&r.s, &id, 1));
    let d = poll_until("the title settles", SLOW, || {
        let d = detail_checked(&r.s, &id);
        (d["titleStatus"] == "complete" || d["titleStatus"] == "failed").then_some(d)
    });
    let asked = r
        .tap
        .chats()
        .into_iter()
        .find(|c| c.body()["stream"] == false)
        .expect("a title request");
    let raw = asked.reply_text();
    match sessiond::engine::title::clean(&raw) {
        Some(title) => {
            assert_eq!(d["titleStatus"], "complete");
            assert_eq!(d["title"], title.as_str(), "from {raw:?}");
            assert!(title.chars().count() <= 60);
            assert!(
                !title.ends_with(['.', ',', ';', ':', '!', '?', '"']),
                "{title}"
            );
        }
        None => {
            assert_eq!(d["titleStatus"], "failed", "from {raw:?}");
            assert_eq!(d["title"], "Plan a small vegetable garden.");
        }
    }
}

/// The `timings` llama.cpp puts on the last chunk of a stream (its own token counts, sent with
/// or without `usage`).
fn timings(exchange: &llama::Exchange) -> Value {
    exchange
        .response
        .as_ref()
        .and_then(|r| {
            r.sse()
                .into_iter()
                .filter_map(|c| c.get("timings").cloned())
                .next_back()
        })
        .unwrap_or(Value::Null)
}

#[test]
fn usage_the_server_does_not_report_is_estimated_from_the_text_priced_and_marked() {
    let Some(r) = rig(
        LlamaOptions::default(),
        json!({
            "prices": {"smollm2": {"input": 1.0, "output": 2.0}},
            "contextWindow": 2048,
            // Greedy decoding: the order-of-magnitude check below compares the estimate with
            // llama.cpp's count for one reply, which must not be a sampled run of emoji.
            "temperature": 0,
        }),
    ) else {
        return;
    };
    r.tap.set_quirks(Quirks {
        ignore_include_usage: true,
        ..Quirks::default()
    });
    let id = create(&r.s, "Say hello to me.");
    let events = terminals(&r.s, &id, 1);
    assert_completed_with_text(&events);
    let chats = r.tap.chats();
    assert_eq!(chats.len(), 1, "one call, no retries");
    assert_eq!(
        chats[0].body()["stream_options"]["include_usage"],
        true,
        "sessiond asked for usage"
    );
    assert!(chats[0].reported_usage().is_none(), "the server sent none");
    assert!(chats[0].response.as_ref().is_some_and(|r| r.sse_done()));

    // A `usage_estimated` notice, then in the same write the estimated usage event.
    let at = events
        .iter()
        .position(|e| e["event"]["metadata"]["code"] == "usage_estimated")
        .unwrap_or_else(|| panic!("no estimate marker: {:?}", event_types(&events)));
    assert_eq!(events[at]["event"]["type"], "system");
    let usage = &events[at + 1]["event"];
    assert_eq!(
        usage["type"], "usage",
        "the marker comes right before its usage"
    );
    assert_eq!(
        inner_of_type(&events, "usage").len(),
        1,
        "no second estimate"
    );
    let n = |v: &Value, p: &str| v.pointer(p).and_then(Value::as_f64).unwrap_or(-1.0);
    let reply = chats[0].reply_text();
    assert_eq!(
        n(usage, "/lastMessageUsage/output"),
        sessiond::engine::estimated_tokens(&reply) as f64,
        "the output is estimated from the text streamed: {reply:?}"
    );
    let input = n(usage, "/lastMessageUsage/input");
    assert!(input > 0.0, "{usage}");
    assert!(
        (n(usage, "/turnUsage/cost/total")
            - (input * 1.0 + n(usage, "/turnUsage/output") * 2.0) / 1e6)
            .abs()
            < 1e-12,
        "priced with the table: {usage}"
    );
    assert_eq!(n(usage, "/effectiveContextWindow"), 2048.0);
    // The estimate is of the order of llama.cpp's own count (4 bytes a token is rough).
    let t = timings(&chats[0]);
    for (estimated, counted) in [
        (input, n(&t, "/prompt_n") + n(&t, "/cache_n").max(0.0)),
        (n(usage, "/lastMessageUsage/output"), n(&t, "/predicted_n")),
    ] {
        assert!(
            counted > 0.0 && estimated >= counted / 4.0 && estimated <= counted * 4.0,
            "estimated {estimated}, llama.cpp counted {counted}: {t}"
        );
    }
}

#[test]
fn a_server_that_cannot_stream_with_tools_is_asked_without_streaming_and_remembered() {
    let Some(r) = rig(
        LlamaOptions::default(),
        json!({"tools": tools_except(&["list_dir"]), "maxSteps": 2, "maxRetries": 4}),
    ) else {
        return;
    };
    r.tap.set_quirks(Quirks {
        refuse_streamed_tools: true,
        ..Quirks::default()
    });
    let id = create(&r.s, "Say hi.");
    let events = terminals(&r.s, &id, 1);
    let last = events
        .iter()
        .rev()
        .find(|e| is_terminal(e))
        .expect("terminal");
    assert_eq!(last["event"]["type"], "complete");
    assert!(
        last["event"]["status"] == "completed"
            || last["event"]["error"]
                .as_str()
                .unwrap_or("")
                .contains("maxSteps"),
        "the turn did not break: {last}"
    );
    let chats = r.tap.chats();
    assert!(chats.len() >= 2, "{} calls", chats.len());
    assert_eq!(chats[0].body()["stream"], true);
    assert!(chats[0].body()["tools"].is_array());
    // The refusal is not retried: every later call, with the same tools, is not streamed and
    // llama.cpp answers it whole.
    for c in &chats[1..] {
        let body = c.body();
        assert_eq!(body["stream"], false, "{body}");
        assert!(body.get("stream_options").is_none());
        assert_eq!(body["tools"], chats[0].body()["tools"]);
        assert_eq!(body["tool_choice"], "auto");
        let response = c.response.as_ref().expect("a response");
        assert!(response.complete && response.start_line.contains("200"));
        assert!(response.json()["choices"].is_array(), "a whole reply");
    }
    let system = inner_of_type(&events, "system");
    assert_eq!(system.len(), 1, "one notice, no retries: {system:?}");
    assert!(
        system[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("without streaming")
    );
    // Usage is what llama.cpp reported for the whole reply.
    let usage = inner_of_type(&events, "usage");
    assert_usage_is_the_servers(usage[0], &chats[1].reported_usage().expect("usage"));
    // Text the model gave is stored as it gave it.
    let text = chats
        .iter()
        .skip(1)
        .map(|c| c.reply_text())
        .filter(|t| !t.trim().is_empty())
        .collect::<Vec<_>>();
    let stored: Vec<String> = texts(&events)
        .into_iter()
        .filter(|t| !t.trim().is_empty())
        .collect();
    assert_eq!(stored, text);

    // Remembered for the endpoint: the next turn's first call is not streamed at all.
    let before = chats.len();
    message(&r.s, &id, "Say bye.");
    terminals(&r.s, &id, 2);
    let chats = r.tap.chats();
    assert!(chats.len() > before);
    assert_eq!(chats[before].body()["stream"], false);
}
