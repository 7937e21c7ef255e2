//! The `openai` engine against a fake OpenAI-compatible endpoint that really speaks HTTP and SSE:
//! streaming, reasoning, tool calls (single and parallel), ask/answer, sleep/wake, retries, cut
//! streams, interrupts, usage and cost, tiers, titles, the built-in tools and the embedded default.
//!
//! Rule ids refer to `spec/sessions-api.md`.

mod common;
#[path = "common/fake_openai.rs"]
mod fake_openai;

use std::time::{Duration, Instant};

use common::*;
use fake_openai::*;
use serde_json::{Value, json};

/// The operator's policy that lets agents name the fake as their endpoint, plus `more` lines.
fn policy(fake: &FakeOpenAi, more: &str) -> String {
    format!("[policy]\nmodel_endpoints = [{:?}]\n{more}", fake.base_url)
}

/// A server whose default engine is the fake's `openai` engine (plus `extra` settings), and
/// whose agents may use the fake too.
fn server(fake: &FakeOpenAi, extra: Value) -> Server {
    let engine = fake.engine(extra).to_string();
    Server::start_with_env(
        Some(&policy(fake, "")),
        &[("SESSIOND_ENGINE", Some(&engine))],
    )
}

fn history(s: &Server, id: &str) -> Vec<Value> {
    history_checked(s, id, 500)
}

fn events_of<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events
        .iter()
        .map(|e| &e["event"])
        .filter(|e| e["type"] == ty)
        .collect()
}

fn steps<'a>(events: &'a [Value], ty: &str) -> Vec<&'a Value> {
    events_of(events, "step")
        .into_iter()
        .map(|e| &e["step"])
        .filter(|s| s["type"] == ty)
        .collect()
}

/// Waits for the n-th terminal of the session (1-based) and returns the history then.
fn wait_terminals(s: &Server, id: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let events = s.history_all(id);
        let terminals = events
            .iter()
            .filter(|e| {
                ["complete", "ask", "interrupted", "sleep"]
                    .contains(&e["event"]["type"].as_str().unwrap_or(""))
            })
            .count();
        if terminals >= n {
            return history(s, id);
        }
        assert!(
            Instant::now() < deadline,
            "no terminal #{n} in {id}: {:#?}",
            event_types(&events)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn last_terminal(events: &[Value]) -> &Value {
    events
        .iter()
        .rev()
        .map(|e| &e["event"])
        .find(|e| {
            ["complete", "ask", "interrupted", "sleep"].contains(&e["type"].as_str().unwrap_or(""))
        })
        .expect("a terminal")
}

/// The last terminal is `complete` with status failed and an error containing `needle`.
fn assert_failed_with(events: &[Value], needle: &str) {
    let done = last_terminal(events);
    assert_eq!(done["type"], "complete", "{done}");
    assert_eq!(done["status"], "failed", "{done}");
    let error = done["error"].as_str().unwrap_or("");
    assert!(error.contains(needle), "{needle:?} not in {error:?}");
}

fn messages(seen: &Seen) -> Vec<Value> {
    seen.body["messages"].as_array().expect("messages").clone()
}

fn tool_names(seen: &Seen) -> Vec<String> {
    seen.body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn create(s: &Server, body: Value) -> String {
    id_of(&create_checked(s, body))
}

#[test]
fn a_reply_streams_as_deltas_and_is_stored_once_complete() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(Reply::Stream {
        chunks: vec![
            content_chunk("Hello "),
            content_chunk("from "),
            content_chunk("the model"),
            finish_chunk("stop"),
            usage_chunk((12, 4, 0)),
        ],
        delay: Duration::from_millis(60),
        end: End::Done,
    });
    // The stream starts once the test listens, so every delta reaches it.
    fake.hold_streams();
    let id = create(&s, json!({"prompt": "hi"}));
    let sse = s.sse(&id, Some(0), None);
    fake.release();
    let frames = sse.until_terminal(Duration::from_secs(20));
    // Invariant 6: deltas are live only; the text step is the durable record.
    let deltas: String = frames
        .iter()
        .map(|f| &f.data)
        .filter(|d| d["event"]["step"]["type"] == "text_delta")
        .filter_map(|d| d["event"]["step"]["delta"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(deltas, "Hello from the model", "every delta, in order");

    let events = history(&s, &id);
    assert!(steps(&events, "text_delta").is_empty());
    let texts = steps(&events, "text");
    assert_eq!(texts.len(), 1);
    assert_eq!(texts[0]["text"], "Hello from the model");
    let done = last_terminal(&events);
    assert_eq!(done["type"], "complete");
    assert_eq!(done["status"], "completed");
    assert_eq!(done["result"], "Hello from the model");
    let usage = events_of(&events, "usage");
    assert_eq!(usage.len(), 1, "one measured usage event, no estimate");
    assert_eq!(usage[0]["turnUsage"]["input"], 12.0);
    assert_eq!(usage[0]["turnUsage"]["output"], 4.0);
    assert_eq!(usage[0]["turnUsage"]["totalTokens"], 16.0);

    let chats = fake.chats();
    assert_eq!(chats.len(), 1);
    let req = &chats[0];
    assert_eq!(req.path, "/v1/chat/completions");
    assert_eq!(req.body["model"], "fake-model");
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.body["stream_options"]["include_usage"], true);
    assert_eq!(req.authorization, None, "no key configured, none sent");
    let m = messages(req);
    assert_eq!(m[0]["role"], "system");
    assert_eq!(m.last().expect("user")["content"], "hi");
    let tools = tool_names(req);
    for t in [
        "ask_user",
        "todo_write",
        "sleep_until",
        "read_file",
        "write_file",
        "list_dir",
        "search_files",
        "start_session",
        "message_session",
    ] {
        assert!(tools.contains(&t.to_owned()), "{t} offered: {tools:?}");
    }
}

/// A model that emits U+0000 cannot fail the turn's writes or poison the timeline's later reads
/// (PostgreSQL's text cannot hold it): it is kept as U+FFFD, on every backend alike.
#[test]
fn a_nul_in_the_models_output_is_stored_as_the_replacement_character() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(Reply::Stream {
        chunks: vec![
            content_chunk("before\u{0}"),
            content_chunk("after"),
            finish_chunk("stop"),
        ],
        delay: Duration::from_millis(0),
        end: End::Done,
    });
    let id = create(&s, json!({"prompt": "hi"}));
    wait_terminals(&s, &id, 1);
    let events = history(&s, &id);
    assert_eq!(last_terminal(&events)["type"], "complete");
    let texts = steps(&events, "text");
    assert_eq!(texts.len(), 1);
    assert_eq!(texts[0]["text"], "before\u{FFFD}after");
    assert_eq!(last_terminal(&events)["result"], "before\u{FFFD}after");
    // The session's other reads stay whole.
    let (st, v) = s.get(&s.url(&format!("/v2/sessions/{id}")));
    assert_eq!(st, 200, "{v}");
    assert_eq!(s.detail(&id)["turnStatus"], "complete");
}

#[test]
fn reasoning_is_stored_before_the_text() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(Reply::Stream {
        chunks: vec![
            reasoning_chunk("Let me think. "),
            reasoning_chunk("Two plus two."),
            content_chunk("4"),
            finish_chunk("stop"),
        ],
        delay: Duration::ZERO,
        end: End::Done,
    });
    let id = create(&s, json!({"prompt": "2+2?"}));
    let events = wait_terminals(&s, &id, 1);
    let kinds: Vec<&str> = events_of(&events, "step")
        .iter()
        .filter_map(|e| e["step"]["type"].as_str())
        .collect();
    assert_eq!(kinds, ["reasoning", "text"]);
    assert_eq!(
        steps(&events, "reasoning")[0]["text"],
        "Let me think. Two plus two."
    );
    // Without usage in the stream, the runner's estimate is recorded instead.
    assert_eq!(events_of(&events, "usage").len(), 1);
}

#[test]
fn a_tool_call_runs_and_its_result_goes_back_to_the_model() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    let todos = json!({"todos": [
        {"content": "read the code", "status": "in_progress"},
        {"content": "write the fix", "status": "pending"}
    ]});
    fake.push(tool_reply(&[("call_a", "todo_write", todos)]));
    fake.push(text_reply("Planned.", (30, 2, 0)));
    let id = create(&s, json!({"prompt": "plan it"}));
    let events = wait_terminals(&s, &id, 1);

    let start = steps(&events, "tool_call_start");
    assert_eq!(start.len(), 1);
    assert_eq!(start[0]["toolName"], "todo_write");
    assert_eq!(start[0]["toolCallId"], "call_a");
    let call = steps(&events, "tool_call");
    assert_eq!(call[0]["isError"], false);
    assert!(
        call[0]["output"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("2 items"),
        "{call:?}"
    );
    let t = events_of(&events, "todos");
    assert_eq!(t.len(), 1);
    assert_eq!(t[0]["todos"][0]["status"], "in_progress");
    assert_eq!(t[0]["todos"][1]["content"], "write the fix");
    assert_eq!(
        detail_checked(&s, &id)["todos"][0]["content"],
        "read the code"
    );
    assert_eq!(last_terminal(&events)["result"], "Planned.");

    let chats = fake.chats();
    assert_eq!(chats.len(), 2);
    let m = messages(&chats[1]);
    let n = m.len();
    assert_eq!(m[n - 2]["role"], "assistant");
    assert_eq!(m[n - 2]["tool_calls"][0]["id"], "call_a");
    assert_eq!(m[n - 2]["tool_calls"][0]["function"]["name"], "todo_write");
    assert_eq!(m[n - 1]["role"], "tool");
    assert_eq!(m[n - 1]["tool_call_id"], "call_a");
}

#[test]
fn parallel_tool_calls_each_get_a_result_and_tool_errors_are_results() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(tool_reply(&[
        (
            "w",
            "write_file",
            json!({"path": "notes/a.txt", "content": "hello drive"}),
        ),
        ("r", "read_file", json!({"path": "notes/a.txt"})),
        ("x", "read_file", json!({"path": "../../outside.txt"})),
        (
            "m",
            "message_session",
            json!({"sessionId": "nope", "prompt": "hi"}),
        ),
    ]));
    fake.push(text_reply("All done.", (40, 3, 0)));
    let id = create(&s, json!({"prompt": "work"}));
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["status"], "completed");

    let calls = steps(&events, "tool_call");
    let by_id = |i: &str| {
        calls
            .iter()
            .find(|c| c["toolCallId"] == i)
            .unwrap_or_else(|| panic!("call {i}: {calls:?}"))
    };
    assert_eq!(by_id("w")["isError"], false);
    assert_eq!(by_id("r")["isError"], false);
    assert_eq!(by_id("r")["output"][0]["text"], "hello drive");
    assert_eq!(by_id("x")["isError"], true);
    assert_eq!(by_id("m")["isError"], true);
    let written = s.data_dir.join("drive/default/notes/a.txt");
    assert_eq!(
        std::fs::read_to_string(&written).expect("written"),
        "hello drive"
    );

    // The next call carries one result per call, in the order they were made.
    let m = messages(&fake.chats()[1]);
    let results: Vec<&str> = m
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    assert_eq!(results, ["w", "r", "x", "m"]);
}

#[test]
fn path_escapes_through_every_file_tool_are_refused() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    let outside = s.tmp_dir().join("outside");
    std::fs::create_dir_all(&outside).expect("outside dir");
    std::fs::write(outside.join("secret.txt"), "top secret").expect("secret");
    let drive = s.data_dir.join("drive/default");
    std::fs::create_dir_all(&drive).expect("drive");
    std::os::unix::fs::symlink(&outside, drive.join("escape")).expect("dir link");
    std::os::unix::fs::symlink(outside.join("secret.txt"), drive.join("secret-link"))
        .expect("file link");
    let secret_abs = outside.join("secret.txt").display().to_string();

    let attempts = [
        ("read_file", json!({"path": secret_abs})),
        ("read_file", json!({"path": "../outside/secret.txt"})),
        ("read_file", json!({"path": "escape/secret.txt"})),
        ("read_file", json!({"path": "secret-link"})),
        (
            "write_file",
            json!({"path": "../../evil.txt", "content": "x"}),
        ),
        (
            "write_file",
            json!({"path": "escape/evil.txt", "content": "x"}),
        ),
        (
            "write_file",
            json!({"path": "/tmp/evil.txt", "content": "x"}),
        ),
        ("list_dir", json!({"path": ".."})),
        ("list_dir", json!({"path": "escape"})),
        ("search_files", json!({"pattern": "secret", "path": ".."})),
        (
            "search_files",
            json!({"pattern": "secret", "path": "escape"}),
        ),
    ];
    let calls: Vec<(String, &str, Value)> = attempts
        .iter()
        .enumerate()
        .map(|(i, (name, args))| (format!("c{i}"), *name, args.clone()))
        .collect();
    let borrowed: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, n, a)| (id.as_str(), *n, a.clone()))
        .collect();
    fake.push(tool_reply(&borrowed));
    fake.push(text_reply("Nothing escaped.", (10, 2, 0)));
    let id = create(&s, json!({"prompt": "try to escape"}));
    let events = wait_terminals(&s, &id, 1);
    let results = steps(&events, "tool_call");
    assert_eq!(results.len(), attempts.len());
    for r in &results {
        assert_eq!(r["isError"], true, "escape allowed: {r}");
        let text = r["output"][0]["text"].as_str().unwrap_or("");
        assert!(!text.contains("top secret"), "secret leaked: {r}");
        assert!(
            !text.contains(&*outside.display().to_string()),
            "host path leaked: {r}"
        );
    }
    let mut names: Vec<String> = std::fs::read_dir(&outside)
        .expect("outside")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    assert_eq!(names, ["secret.txt"]);
    assert!(!s.tmp_dir().join("evil.txt").exists());
    assert!(!s.data_dir.join("drive/evil.txt").exists());
}

#[test]
fn ask_user_ends_the_turn_and_the_answer_resumes_the_call() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(tool_reply(&[(
        "ask1",
        "ask_user",
        json!({"questions": [{"question": "Which colour?", "header": "Colour",
            "options": [{"label": "red"}, {"label": "blue", "description": "calm"}]}]}),
    )]));
    fake.push(text_reply("Blue it is.", (50, 4, 0)));
    let id = create(&s, json!({"prompt": "paint"}));
    let events = wait_terminals(&s, &id, 1);
    let ask = last_terminal(&events);
    assert_eq!(ask["type"], "ask");
    assert_eq!(ask["questions"][0]["question"], "Which colour?");
    assert_eq!(ask["questions"][0]["options"][1]["label"], "blue");
    assert_eq!(detail_checked(&s, &id)["turnStatus"], "ask");

    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/answer")),
        &json!({"answer": "blue"}),
    );
    assert_eq!(status, 200, "{v}");
    let events = wait_terminals(&s, &id, 2);
    let done = last_terminal(&events);
    assert_eq!(done["type"], "complete");
    assert_eq!(done["result"], "Blue it is.");
    // The answer is the ask_user call's result, in the timeline and for the model.
    let call = steps(&events, "tool_call");
    assert_eq!(call.len(), 1);
    assert_eq!(call[0]["toolCallId"], "ask1");
    assert_eq!(call[0]["output"][0]["text"], "blue");
    let chats = fake.chats();
    assert_eq!(chats.len(), 2);
    let m = messages(&chats[1]);
    let last = m.last().expect("messages");
    assert_eq!(last["role"], "tool");
    assert_eq!(last["tool_call_id"], "ask1");
    assert_eq!(last["content"], "blue");
    assert!(
        m.iter()
            .any(|m| m["role"] == "user" && m["content"] == "paint"),
        "the first prompt is still in the conversation"
    );
}

#[test]
fn sleep_until_sleeps_and_the_wake_resumes_the_call() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(tool_reply(&[("z", "sleep_until", json!({"seconds": 1}))]));
    fake.push(text_reply("Awake again.", (50, 4, 0)));
    let before = now_ms();
    let id = create(&s, json!({"prompt": "wait a second"}));
    let events = wait_terminals(&s, &id, 1);
    let sleep = last_terminal(&events);
    assert_eq!(sleep["type"], "sleep");
    let wake_at = sleep["wakeAt"].as_f64().expect("wakeAt");
    assert!(
        wake_at >= (before + 1000) as f64 && wake_at < (before + 5000) as f64,
        "{wake_at} vs {before}"
    );
    let events = wait_terminals(&s, &id, 2);
    assert_eq!(last_terminal(&events)["result"], "Awake again.");
    let m = messages(&fake.chats()[1]);
    let last = m.last().expect("messages");
    assert_eq!(last["role"], "tool");
    assert_eq!(last["tool_call_id"], "z");
    assert!(
        last["content"]
            .as_str()
            .unwrap_or("")
            .contains("sleep is over")
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[test]
fn rate_limits_are_retried_and_recorded_as_system_events() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(Reply::Status {
        code: 429,
        body: json!({"error": {"message": "slow down"}}),
        retry_after: Some(0),
    });
    fake.push(Reply::Status {
        code: 503,
        body: json!({"error": {"message": "overloaded"}}),
        retry_after: None,
    });
    fake.push(text_reply("Made it.", (10, 2, 0)));
    let id = create(&s, json!({"prompt": "go"}));
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["result"], "Made it.");
    let sys = events_of(&events, "system");
    assert_eq!(sys.len(), 2, "{sys:?}");
    assert_eq!(sys[0]["level"], "warn");
    let m0 = sys[0]["message"].as_str().unwrap_or("");
    assert!(
        m0.contains("429") && m0.contains("slow down") && m0.contains("retrying"),
        "{m0}"
    );
    assert!(sys[1]["message"].as_str().unwrap_or("").contains("503"));
    assert_eq!(fake.chats().len(), 3);
}

#[test]
fn a_refused_call_fails_the_turn_at_once_and_the_key_comes_from_a_file() {
    let fake = FakeOpenAi::start();
    let keyfile = tempfile::NamedTempFile::new().expect("key file");
    std::fs::write(keyfile.path(), "sk-test-secret-123\n").expect("key");
    let s = server(
        &fake,
        json!({"apiKeyFile": keyfile.path().display().to_string()}),
    );
    fake.push(Reply::Status {
        code: 401,
        body: json!({"error": {"message": "invalid api key"}}),
        retry_after: None,
    });
    let id = create(&s, json!({"prompt": "go"}));
    let events = wait_terminals(&s, &id, 1);
    let done = last_terminal(&events);
    assert_eq!(done["type"], "complete");
    assert_eq!(done["status"], "failed");
    let error = done["error"].as_str().unwrap_or("");
    assert!(
        error.contains("401") && error.contains("invalid api key"),
        "{error}"
    );
    assert!(!error.contains("sk-test"), "the key never appears: {error}");
    let chats = fake.chats();
    assert_eq!(chats.len(), 1, "a 401 is not retried");
    assert_eq!(
        chats[0].authorization.as_deref(),
        Some("Bearer sk-test-secret-123")
    );
    assert!(
        !events.iter().any(|e| e.to_string().contains("sk-test")),
        "the key is not in the timeline"
    );
}

/// Creates an agent with its own engine and returns the cwd its sessions use.
fn agent_with_engine(s: &Server, slug: &str, engine: Value) -> String {
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": slug, "engine": engine}),
    );
    assert_eq!(status, 201, "{v}");
    assert!(
        !v.to_string().contains("sk-"),
        "agent views never carry keys"
    );
    v["anchor"].as_str().expect("anchor").to_owned()
}

#[test]
fn a_stream_cut_mid_turn_is_retried_or_fails_cleanly() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(Reply::Stream {
        chunks: vec![content_chunk("Half a sen")],
        delay: Duration::ZERO,
        end: End::Cut,
    });
    fake.push(text_reply("A whole sentence.", (10, 3, 0)));
    let id = create(&s, json!({"prompt": "talk"}));
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["result"], "A whole sentence.");
    assert_eq!(
        steps(&events, "text").len(),
        1,
        "the cut attempt stored nothing"
    );
    // Live clients saw "Half a sen" stream in: they are told it is void before the retry.
    let sys = events_of(&events, "system");
    assert_eq!(sys[0]["metadata"]["code"], "partial_text_void", "{sys:?}");
    let retry = sys
        .iter()
        .position(|e| e["message"].as_str().unwrap_or("").contains("ended before"));
    assert!(retry.is_some_and(|r| r > 0), "{sys:?}");
    // The cut attempt cost tokens too: its usage is estimated and marked, the retry's measured.
    let usage = events_of(&events, "usage");
    assert_eq!(usage.len(), 2, "{:?}", event_types(&events));
    assert_eq!(usage[1]["lastMessageUsage"]["input"], 10.0);
    let estimated = position_of_code(&events, "usage_estimated");
    assert_eq!(estimated.len(), 1);
    assert_eq!(events[estimated[0] + 1]["event"]["type"], "usage");

    // Without retries the turn fails with the reason.
    let cwd = agent_with_engine(&s, "strict", fake.engine(json!({"maxRetries": 0})));
    fake.push(Reply::Stream {
        chunks: vec![content_chunk("Half")],
        delay: Duration::ZERO,
        end: End::Cut,
    });
    let id = create(&s, json!({"prompt": "talk", "cwd": cwd}));
    let events = wait_terminals(&s, &id, 1);
    assert_failed_with(&events, "ended before the reply was complete");
}

#[test]
fn an_interrupt_mid_stream_closes_the_connection() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(Reply::Stream {
        chunks: vec![content_chunk("Thinking "), content_chunk("out loud ")],
        delay: Duration::from_millis(20),
        end: End::Hold,
    });
    let id = create(&s, json!({"prompt": "long answer"}));
    fake.wait_chats(1, Duration::from_secs(10));
    // Both chunks are out and the fake holds the stream open: the turn is mid-stream.
    fake.wait_chunks_sent(2, Duration::from_secs(10));
    assert_eq!(fake.closed_early(), 0);
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert_eq!(status, 200, "{v}");
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["type"], "interrupted");
    poll_until(
        "the fake sees the stream closed",
        Duration::from_secs(5),
        || (fake.closed_early() == 1).then_some(()),
    );
    // The engine stopped on its own: the runner did not have to cut it off after the grace
    // period (which it would say in a `system` event).
    let notices: Vec<&Value> = events_of(&events, "system")
        .into_iter()
        .filter(|e| e["metadata"]["code"] != "usage_estimated")
        .collect();
    assert!(notices.is_empty(), "no cut-off notice: {notices:?}");
    // What streamed before the interrupt was paid for: an estimate, marked as one.
    let usage = events_of(&events, "usage");
    assert_eq!(usage.len(), 1);
    assert!(usage[0]["turnUsage"]["output"].as_f64().unwrap_or(0.0) >= 1.0);
    assert_eq!(position_of_code(&events, "usage_estimated").len(), 1);
}

/// Indexes of the `system` events with `metadata.code` = `code`.
fn position_of_code(events: &[Value], code: &str) -> Vec<usize> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["event"]["type"] == "system" && e["event"]["metadata"]["code"] == code)
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn usage_totals_and_cost_follow_the_price_table() {
    let fake = FakeOpenAi::start();
    let s = server(
        &fake,
        json!({"prices": {"fake-model": {"input": 2.0, "output": 8.0, "cacheRead": 0.5}},
               "contextWindow": 128000}),
    );
    fake.push(tool_reply(&[("t", "list_dir", json!({}))])); // usage (20, 5, 0)
    fake.push(text_reply("Counted.", (1000, 100, 400)));
    let id = create(&s, json!({"prompt": "count"}));
    let events = wait_terminals(&s, &id, 1);
    let usage = events_of(&events, "usage");
    assert_eq!(usage.len(), 2, "one usage event per model call");
    let close = |a: &Value, b: f64| (a.as_f64().expect("number") - b).abs() < 1e-9;
    let first = &usage[0]["lastMessageUsage"];
    assert!(close(&first["input"], 20.0) && close(&first["output"], 5.0));
    let turn = &usage[1]["turnUsage"];
    assert!(close(&turn["input"], 620.0), "{turn}");
    assert!(close(&turn["cacheRead"], 400.0), "{turn}");
    assert!(close(&turn["output"], 105.0), "{turn}");
    assert!(close(&turn["totalTokens"], 1125.0), "{turn}");
    assert!(close(&turn["cost"]["input"], 620.0 * 2.0 / 1e6), "{turn}");
    assert!(close(&turn["cost"]["output"], 105.0 * 8.0 / 1e6), "{turn}");
    assert!(
        close(&turn["cost"]["cacheRead"], 400.0 * 0.5 / 1e6),
        "{turn}"
    );
    assert!(close(&turn["cost"]["total"], 0.00228), "{turn}");
    assert!(close(&usage[1]["effectiveContextWindow"], 128000.0));
    assert!(
        usage[1]["contextWindowUsage"]["systemPrompt"]
            .as_f64()
            .unwrap_or(0.0)
            > 0.0
    );

    // A second turn adds to the session's totals.
    fake.push(text_reply("Again.", (100, 10, 0)));
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "again"}),
    );
    assert_eq!(status, 200, "{v}");
    wait_terminals(&s, &id, 2);
    let totals = s
        .db_value(&format!(
            "SELECT usage_totals FROM sessions WHERE id = {}",
            sql_text(&id)
        ))
        .expect("totals");
    let totals: Value = serde_json::from_str(&totals).expect("json");
    assert!(close(&totals["totalTokens"], 1235.0), "{totals}");
    assert!(
        close(
            &totals["cost"]["total"],
            0.00228 + 100.0 * 2.0 / 1e6 + 10.0 * 8.0 / 1e6
        ),
        "{totals}"
    );
}

#[test]
fn earlier_turns_and_steers_reach_the_model() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(text_reply("First answer.", (10, 2, 0)));
    let id = create(&s, json!({"prompt": "first question"}));
    wait_terminals(&s, &id, 1);

    // Second turn: its stream stays open until released, so the steer certainly lands while it
    // streams (R25).
    fake.push(Reply::Stream {
        chunks: (0..8)
            .map(|i| content_chunk(&format!("w{i} ")))
            .chain([finish_chunk("stop")])
            .collect(),
        delay: Duration::ZERO,
        end: End::UntilReleased,
    });
    fake.push(text_reply("Steered answer.", (10, 2, 0)));
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "second question"}),
    );
    assert_eq!(status, 200, "{v}");
    fake.wait_chats(2, Duration::from_secs(10));
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "actually, be brief", "behavior": "steer"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["delivery"], "accepted",
        "the steer joins the running turn"
    );
    fake.release();
    let events = wait_terminals(&s, &id, 2);
    assert_eq!(last_terminal(&events)["result"], "Steered answer.");

    let chats = fake.chats();
    assert_eq!(chats.len(), 3);
    let second = roles_and_contents(&messages(&chats[1])[1..]);
    assert_eq!(
        second,
        [
            ("user".to_owned(), "first question".to_owned()),
            ("assistant".to_owned(), "First answer.".to_owned()),
            ("user".to_owned(), "second question".to_owned()),
        ]
    );
    let third = messages(&chats[2]);
    let last = third.last().expect("messages");
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"], "actually, be brief");
}

#[test]
fn tiers_pick_models_with_router_switch_and_tier_clamped() {
    let fake = FakeOpenAi::start();
    let s = server(
        &fake,
        json!({"models": {"frontier": "big-model", "economy": "small-model"}}),
    );
    fake.push(text_reply("cheap", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "hi", "tier": "balanced"}));
    let events = wait_terminals(&s, &id, 1);
    // R19/R22: balanced is not configured; the nearest (ties go to the cheaper) runs it.
    let clamped = events_of(&events, "tier_clamped");
    assert_eq!(clamped.len(), 1);
    assert_eq!(clamped[0]["requestedTier"], "balanced");
    assert_eq!(clamped[0]["effectiveTier"], "economy");
    let switch = events_of(&events, "router_switch");
    assert_eq!(switch.len(), 1);
    assert_eq!(switch[0]["fromModel"], "fake-model");
    assert_eq!(switch[0]["toModel"], "small-model");
    assert_eq!(switch[0]["trigger"], "turn_start");
    assert_eq!(fake.chats()[0].body["model"], "small-model");

    fake.push(text_reply("smart", (1, 1, 0)));
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "think hard", "tier": "frontier"}),
    );
    assert_eq!(status, 200, "{v}");
    let events = wait_terminals(&s, &id, 2);
    let switch = events_of(&events, "router_switch");
    assert_eq!(switch.len(), 2);
    assert_eq!(switch[1]["fromModel"], "small-model");
    assert_eq!(switch[1]["toModel"], "big-model");
    assert_eq!(fake.chats()[1].body["model"], "big-model");

    // Same tier again: no switch.
    fake.push(text_reply("still smart", (1, 1, 0)));
    s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "more"}),
    );
    let events = wait_terminals(&s, &id, 3);
    assert_eq!(events_of(&events, "router_switch").len(), 2);
}

#[test]
fn the_model_writes_the_automatic_title() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(text_reply("Sure.", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "help me plan a garden"}));
    wait_terminals(&s, &id, 1);
    let d = poll_until("title generated", Duration::from_secs(10), || {
        let d = detail_checked(&s, &id);
        (d["titleStatus"] == "complete").then_some(d)
    });
    assert_eq!(d["title"], "Fake Title", "quotes are stripped");
    assert_eq!(d["titleOrigin"], "auto");
    let title_req = fake
        .all_requests()
        .into_iter()
        .find(|r| r.body["stream"] == json!(false))
        .expect("a title request");
    assert!(title_req.body.to_string().contains("plan a garden"));

    fake.set_title(None);
    fake.push(text_reply("Sure.", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "another one"}));
    wait_terminals(&s, &id, 1);
    let d = poll_until("title failed", Duration::from_secs(10), || {
        let d = detail_checked(&s, &id);
        (d["titleStatus"] == "failed").then_some(d)
    });
    assert_eq!(d["title"], "another one", "the excerpt title stays");
}

#[test]
fn session_tools_start_children_and_message_sessions_as_themselves() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    // The target of message_session runs the scripted engine, so its reply is predictable.
    let cwd = agent_with_engine(&s, "plain", json!({"kind": "scripted"}));
    let target = create(&s, json!({"prompt": "hello", "cwd": cwd}));
    wait_terminals(&s, &target, 1);

    fake.push(tool_reply(&[
        ("s", "start_session", json!({"prompt": "child work"})),
        (
            "m",
            "message_session",
            json!({"sessionId": target, "prompt": "ping"}),
        ),
    ]));
    // The parent's next call and the child's first call take these in either order.
    fake.push(text_reply("done", (1, 1, 0)));
    fake.push(text_reply("done", (1, 1, 0)));
    let parent = create(&s, json!({"prompt": "delegate"}));
    let events = wait_terminals(&s, &parent, 1);
    let calls = steps(&events, "tool_call");
    assert!(calls.iter().all(|c| c["isError"] == false), "{calls:?}");
    let started = calls
        .iter()
        .find(|c| c["toolCallId"] == "s")
        .and_then(|c| c["output"][0]["text"].as_str())
        .expect("start result");
    let child = started
        .split_whitespace()
        .nth(2)
        .expect("child id")
        .to_owned();
    let d = detail_checked(&s, &child);
    assert_eq!(d["createdBySessionId"], parent);
    let child_events = wait_terminals(&s, &child, 1);
    assert_eq!(
        events_of(&child_events, "prompt_submitted")[0]["prompt"],
        "child work"
    );

    // R7: the message is attributed to the sending session.
    let target_events = wait_terminals(&s, &target, 2);
    let ping = events_of(&target_events, "prompt_submitted")
        .into_iter()
        .find(|p| p["prompt"] == "ping")
        .expect("ping delivered");
    assert_eq!(
        ping["sender"],
        json!({"kind": "session", "sessionId": parent})
    );
    assert!(
        steps(&target_events, "text")
            .iter()
            .any(|t| t["text"] == "echo: ping")
    );
}

#[test]
fn with_nothing_configured_the_scripted_engine_says_how_to_configure_a_model() {
    let s = Server::start_with_env(None, &[("SESSIOND_ENGINE", None)]);
    let id = create(&s, json!({"prompt": "hello"}));
    let events = wait_terminals(&s, &id, 1);
    let text = steps(&events, "text")[0]["text"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    assert!(text.starts_with("echo: hello"), "{text}");
    assert!(
        text.contains("OPENAI_API_KEY") && text.contains("OPENAI_BASE_URL"),
        "{text}"
    );
}

#[test]
fn the_openai_variables_select_the_openai_engine() {
    let fake = FakeOpenAi::start();
    let s = Server::start_with_env(
        None,
        &[
            ("SESSIOND_ENGINE", None),
            ("OPENAI_BASE_URL", Some(&fake.base_url)),
            ("OPENAI_MODEL", Some("env-model")),
            ("OPENAI_API_KEY", Some("sk-env-key")),
        ],
    );
    fake.push(text_reply("From the environment.", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "hi"}));
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["result"], "From the environment.");
    let chat = &fake.chats()[0];
    assert_eq!(chat.body["model"], "env-model");
    assert_eq!(chat.authorization.as_deref(), Some("Bearer sk-env-key"));
}

#[test]
fn the_config_file_sets_the_default_engine() {
    let fake = FakeOpenAi::start();
    let toml = format!(
        "[engine]\nkind = \"openai\"\nbaseUrl = \"{}\"\nmodel = \"file-model\"\n",
        fake.base_url
    );
    let s = Server::start_with_env(Some(&toml), &[("SESSIOND_ENGINE", None)]);
    fake.push(text_reply("From the file.", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "hi"}));
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["result"], "From the file.");
    assert_eq!(fake.chats()[0].body["model"], "file-model");
}

#[test]
fn agents_cannot_send_the_servers_secrets_elsewhere() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    for (engine, key) in [
        // The server's OPENAI_API_KEY would go to a host of the caller's choosing.
        (
            json!({"kind": "openai", "baseUrl": "http://attacker.example/v1"}),
            "model_endpoints",
        ),
        // Any variable or file of the server would be sent as a "key".
        (
            json!({"kind": "openai", "apiKeyEnv": "AWS_SECRET_ACCESS_KEY"}),
            "api_key_envs",
        ),
        (
            json!({"kind": "openai", "apiKeyFile": "/etc/passwd"}),
            "api_key_files",
        ),
        (
            json!({"kind": "openai", "tools": {"runCommand": {"enabled": true}}}),
            "run_command",
        ),
    ] {
        let (status, v) = s.post(
            &s.url(&format!("/v1/ws/{WS}/agents")),
            &json!({"slug": "sneaky", "engine": engine}),
        );
        assert_eq!(status, 400, "{engine} → {v}");
        let message = v["message"].as_str().unwrap_or("");
        assert!(message.contains(&format!("policy.{key}")), "{message}");
    }
    // The listed endpoint (with a trailing slash, even) is fine.
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "fine", "engine": {"kind": "openai", "baseUrl": format!("{}/", fake.base_url)}}),
    );
    assert_eq!(status, 201, "{v}");
}

#[test]
fn bad_engine_settings_are_refused() {
    let s = Server::start();
    for engine in [
        json!({"kind": "openai", "apiKey": "sk-inline"}),
        json!({"kind": "openai", "baseUrl": "ftp://x"}),
        json!({"kind": "openai", "maxSteps": 0}),
        json!({"kind": "openai", "models": {"ultra": "x"}}),
        json!({"kind": "openai", "tools": {"disabled": ["rm_rf"]}}),
        json!({"kind": "openai", "toolChoice": "sometimes"}),
    ] {
        let (status, v) = s.post(
            &s.url(&format!("/v1/ws/{WS}/agents")),
            &json!({"slug": "bad", "engine": engine}),
        );
        assert_eq!(status, 400, "{engine} → {v}");
        assert!(!v.to_string().contains("sk-inline"), "{v}");
    }
}

/// A server whose operator allows `run_command` and whose default engine enables it with
/// `run_command` settings `rc`.
fn command_server(fake: &FakeOpenAi, rc: Value) -> Server {
    let mut settings = json!({"enabled": true});
    if let (Some(s), Some(extra)) = (settings.as_object_mut(), rc.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    let engine = fake
        .engine(json!({"tools": {"runCommand": settings}}))
        .to_string();
    Server::start_with_env(
        Some(&policy(fake, "run_command = true\n")),
        &[("SESSIOND_ENGINE", Some(&engine))],
    )
}

#[test]
fn run_command_is_off_unless_the_operator_and_the_agent_turn_it_on() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(text_reply("ok", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "hi"}));
    wait_terminals(&s, &id, 1);
    assert!(
        !tool_names(&fake.chats()[0]).contains(&"run_command".to_owned()),
        "not offered by default"
    );
    // The operator has not allowed it: no key can switch it on for an agent.
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "shell", "engine": {"kind": "openai", "tools": {"runCommand": {"enabled": true}}}}),
    );
    assert_eq!(status, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("policy.run_command"),
        "{v}"
    );

    // A model asking for a tool it was not offered gets an error result.
    fake.push(tool_reply(&[(
        "c",
        "run_command",
        json!({"command": "id"}),
    )]));
    fake.push(text_reply("fine", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "run id"}));
    let events = wait_terminals(&s, &id, 1);
    let call = steps(&events, "tool_call");
    assert_eq!(call[0]["isError"], true);
    assert!(
        call[0]["output"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("no tool named")
    );
}

#[test]
fn run_command_runs_in_the_cwd_and_reports_exit_status_and_output() {
    let fake = FakeOpenAi::start();
    let s = command_server(&fake, json!({}));
    fake.push(tool_reply(&[
        (
            "a",
            "run_command",
            json!({"command": "pwd; echo oops >&2; exit 3"}),
        ),
        (
            "b",
            "run_command",
            json!({"command": "printf 'x%.0s' $(seq 1 3)"}),
        ),
    ]));
    fake.push(text_reply("ran", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "run things"}));
    let events = wait_terminals(&s, &id, 1);
    assert!(tool_names(&fake.chats()[0]).contains(&"run_command".to_owned()));
    let calls = steps(&events, "tool_call");
    let a = calls[0]["output"][0]["text"].as_str().unwrap_or("");
    assert_eq!(calls[0]["isError"], true, "{a}");
    assert!(a.starts_with("exit code 3\n"), "{a}");
    let drive = s
        .data_dir
        .join("drive/default")
        .canonicalize()
        .expect("drive");
    assert!(
        a.contains(&*drive.display().to_string()),
        "runs in the cwd: {a}"
    );
    assert!(a.contains("oops"), "stderr is part of the output: {a}");
    let b = calls[1]["output"][0]["text"].as_str().unwrap_or("");
    assert_eq!(calls[1]["isError"], false);
    assert_eq!(b, "exit code 0\nxxx\n");
}

#[test]
fn an_allow_list_runs_listed_programs_without_a_shell() {
    let fake = FakeOpenAi::start();
    let s = command_server(&fake, json!({"allow": ["echo"]}));
    let victim = s.data_dir.join("drive/default/victim");
    std::fs::create_dir_all(&victim).expect("victim dir");
    std::fs::write(victim.join("keep.txt"), "keep").expect("victim file");
    fake.push(tool_reply(&[
        (
            "ok",
            "run_command",
            json!({"command": "echo 'hello  there'"}),
        ),
        ("no", "run_command", json!({"command": "rm -rf agents"})),
        (
            "chain",
            "run_command",
            json!({"command": "echo hi; rm -rf agents"}),
        ),
        ("subst", "run_command", json!({"command": "echo $(id)"})),
    ]));
    fake.push(text_reply("checked", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "try"}));
    let events = wait_terminals(&s, &id, 1);
    let calls = steps(&events, "tool_call");
    let out = |i: usize| {
        calls[i]["output"][0]["text"]
            .as_str()
            .unwrap_or("")
            .to_owned()
    };
    assert_eq!(calls[0]["isError"], false);
    assert_eq!(out(0), "exit code 0\nhello  there\n");
    for (i, call) in calls.iter().enumerate().skip(1) {
        assert_eq!(call["isError"], true, "{}", out(i));
    }
    assert!(out(1).contains("not allowed"), "{}", out(1));
    assert!(out(2).contains("needs a shell"), "{}", out(2));
    assert!(victim.join("keep.txt").exists(), "nothing was removed");
}

#[test]
fn a_long_command_becomes_a_background_task_and_the_model_hears_its_result() {
    let fake = FakeOpenAi::start();
    let s = command_server(&fake, json!({"backgroundAfterMs": 200}));
    fake.push(tool_reply(&[(
        "bg",
        "run_command",
        json!({"command": "echo started; sleep 1; echo finished"}),
    )]));
    fake.push(text_reply("Waiting for the build.", (1, 1, 0)));
    fake.push(text_reply("The build finished.", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "build"}));
    let events = wait_terminals(&s, &id, 1);
    let done = last_terminal(&events);
    assert_eq!(
        done["result"], "The build finished.",
        "the turn waited for its task"
    );

    let call = steps(&events, "tool_call");
    let text = call[0]["output"][0]["text"].as_str().unwrap_or("");
    assert!(
        text.contains("background task t1") && text.contains("started"),
        "{text}"
    );
    let started = events_of(&events, "task_started");
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["task"]["name"], "run_command");
    assert_eq!(started[0]["task"]["kind"], "tool");
    let output: String = events_of(&events, "task_output")
        .iter()
        .filter_map(|e| e["chunk"].as_str())
        .collect();
    assert!(
        output.contains("started") && output.contains("finished"),
        "{output}"
    );
    let settled = events_of(&events, "task_settled");
    assert_eq!(settled.len(), 1);
    assert_eq!(settled[0]["settlement"]["status"], "completed");

    let chats = fake.chats();
    assert_eq!(chats.len(), 3);
    let last = messages(&chats[2]);
    let note = last.last().expect("messages");
    assert_eq!(note["role"], "user");
    let note = note["content"].as_str().unwrap_or("");
    assert!(
        note.contains("background task t1") && note.contains("exit code 0"),
        "{note}"
    );
}

#[test]
fn an_interrupt_stops_a_running_command_and_its_children() {
    let fake = FakeOpenAi::start();
    let s = command_server(&fake, json!({}));
    fake.push(tool_reply(&[(
        "long",
        "run_command",
        json!({"command": "sleep 300 & echo $! > child.pid; wait"}),
    )]));
    let id = create(&s, json!({"prompt": "wait forever"}));
    let pid_file = s.data_dir.join("drive/default/child.pid");
    let pid = poll_until("the command started", Duration::from_secs(10), || {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
    });
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert_eq!(status, 200, "{v}");
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["type"], "interrupted");
    assert!(
        events_of(&events, "system").is_empty(),
        "stopped by the tool, not cut off: {:?}",
        event_types(&events)
    );
    poll_until("the child is gone", Duration::from_secs(5), || {
        let alive = std::path::Path::new(&format!("/proc/{pid}")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
        (!alive).then_some(())
    });
}

#[test]
fn serve_logs_which_engine_each_agent_uses_and_never_the_key() {
    use std::io::BufRead;
    let fake = FakeOpenAi::start();
    let tmp = tempfile::tempdir().expect("tempdir");
    let cfg = tmp.path().join("sessiond.toml");
    std::fs::write(
        &cfg,
        format!(
            "{}[[agents]]\nslug = \"coder\"\nengine = {{ kind = \"openai\", model = \"agent-model\", baseUrl = \"{}\" }}\n",
            policy(&fake, ""),
            fake.base_url
        ),
    )
    .expect("config");
    let data = tmp.path().join("data");
    let _database = database_for(&data);
    let mut cmd = sessiond_command();
    cmd.arg("serve")
        .args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .args(database_args(&data))
        .arg("--config")
        .arg(&cfg)
        .env("SESSIOND_LOG", "info")
        .env_remove("SESSIOND_ENGINE")
        .env("OPENAI_BASE_URL", &fake.base_url)
        .env("OPENAI_API_KEY", "sk-must-never-be-logged")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline && !lines.iter().any(|l: &String| l.contains("coder")) {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            lines.push(line);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = lines.join("\n");
    let default = lines
        .iter()
        .find(|l| l.contains("default engine"))
        .unwrap_or_else(|| panic!("no default engine line:\n{log}"));
    assert!(
        default.contains("openai") && default.contains("gpt-4o-mini"),
        "{default}"
    );
    let agent = lines
        .iter()
        .find(|l| l.contains("agent engine") && l.contains("coder"))
        .unwrap_or_else(|| panic!("no line for the agent:\n{log}"));
    assert!(
        agent.contains("openai") && agent.contains("agent-model"),
        "{agent}"
    );
    assert!(!log.contains("sk-must-never-be-logged"), "{log}");
}

#[test]
fn a_silent_endpoint_and_a_slow_turn_fail_with_the_reason() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({"idleTimeoutMs": 300, "maxRetries": 0}));
    fake.push(Reply::Stream {
        chunks: vec![content_chunk("and then")],
        delay: Duration::ZERO,
        end: End::Stall,
    });
    let id = create(&s, json!({"prompt": "stall"}));
    let events = wait_terminals(&s, &id, 1);
    let done = last_terminal(&events);
    assert_eq!(done["status"], "failed");
    assert!(
        done["error"].as_str().unwrap_or("").contains("stalled"),
        "{done}"
    );

    // The turn limit holds even while the endpoint keeps the stream alive.
    let cwd = agent_with_engine(&s, "hasty", fake.engine(json!({"turnTimeoutMs": 400})));
    fake.push(Reply::Stream {
        chunks: (0..100).map(|i| content_chunk(&format!("{i} "))).collect(),
        delay: Duration::from_millis(50),
        end: End::Done,
    });
    let id = create(&s, json!({"prompt": "go on and on", "cwd": cwd}));
    let events = wait_terminals(&s, &id, 1);
    assert_failed_with(&events, "turnTimeoutMs");
    poll_until("the stream is dropped", Duration::from_secs(5), || {
        (fake.closed_early() >= 1).then_some(())
    });
}

#[test]
fn images_and_attachments_reach_the_model() {
    use base64::Engine as _;
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    let docs = s.data_dir.join("drive/default/docs");
    std::fs::create_dir_all(&docs).expect("docs");
    std::fs::write(docs.join("brief.md"), "# Brief\nShip on Friday.\n").expect("brief");
    let png = [b"\x89PNG\r\n\x1a\n".as_slice(), b"fake pixels"].concat();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    fake.push(text_reply("Seen.", (1, 1, 0)));
    let id = create(
        &s,
        json!({"prompt": "look at these",
               "images": [{"data": b64, "mimeType": "image/png"}],
               "attachments": [{"path": "docs/brief.md", "name": "brief.md", "bytes": 24}]}),
    );
    wait_terminals(&s, &id, 1);
    let m = messages(&fake.chats()[0]);
    let user = m.last().expect("user message");
    let parts = user["content"].as_array().expect("content parts");
    let text = parts[0]["text"].as_str().unwrap_or("");
    assert!(text.starts_with("look at these"), "{text}");
    assert!(
        text.contains("Ship on Friday."),
        "small text attachments are inlined: {text}"
    );
    assert_eq!(parts[1]["type"], "image_url");
    assert_eq!(
        parts[1]["image_url"]["url"],
        format!("data:image/png;base64,{b64}")
    );

    // Later turns carry the text, not the image bytes again.
    fake.push(text_reply("Still seen.", (1, 1, 0)));
    s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "and now?"}),
    );
    wait_terminals(&s, &id, 2);
    let second = fake.chats()[1].body.to_string();
    assert!(!second.contains(&b64), "the image is not re-sent");
    assert!(second.contains("1 image(s) attached"));
}

#[test]
fn an_unreachable_endpoint_fails_the_turn_with_the_cause() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let engine = json!({"kind": "openai", "baseUrl": format!("http://127.0.0.1:{port}/v1"),
        "maxRetries": 1, "retryBaseMs": 10})
    .to_string();
    let s = Server::start_with_env(None, &[("SESSIOND_ENGINE", Some(&engine))]);
    let id = create(&s, json!({"prompt": "anyone there?"}));
    let events = wait_terminals(&s, &id, 1);
    assert_failed_with(&events, "connection failed");
    assert_failed_with(&events, "refused");
    assert_failed_with(&events, "gave up after 2 attempts");
    assert_eq!(events_of(&events, "system").len(), 1, "one retry recorded");
}

#[test]
fn session_tools_have_limits_per_turn_and_in_depth() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({"titles": false}));
    // One turn may start at most 8 sessions.
    let calls: Vec<(String, Value)> = (0..9)
        .map(|i| (format!("s{i}"), json!({"prompt": format!("child {i}")})))
        .collect();
    let calls: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, args)| (id.as_str(), "start_session", args.clone()))
        .collect();
    fake.push(tool_reply(&calls));
    for _ in 0..9 {
        fake.push(text_reply("ok", (1, 1, 0)));
    }
    let parent = create(&s, json!({"prompt": "fan out"}));
    let events = wait_terminals(&s, &parent, 1);
    let results = steps(&events, "tool_call");
    assert_eq!(results.len(), 9);
    assert!(
        results[..8].iter().all(|r| r["isError"] == false),
        "{results:?}"
    );
    assert_eq!(results[8]["isError"], true);
    assert!(
        results[8]["output"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("at most 8 sessions")
    );

    // Sessions nest at most 4 deep.
    for _ in 0..5 {
        fake.push(text_reply("ok", (1, 1, 0)));
    }
    let mut id = create(&s, json!({"prompt": "level 0"}));
    wait_terminals(&s, &id, 1);
    for level in 1..=4 {
        let child = create_child_checked(&s, &id, json!({"prompt": format!("level {level}")}));
        id = id_of(&child);
        wait_terminals(&s, &id, 1);
    }
    fake.push(tool_reply(&[(
        "deep",
        "start_session",
        json!({"prompt": "level 5"}),
    )]));
    fake.push(text_reply("too deep", (1, 1, 0)));
    s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "go deeper"}),
    );
    let events = wait_terminals(&s, &id, 2);
    assert_eq!(last_terminal(&events)["result"], "too deep");
    let r = steps(&events, "tool_call");
    assert_eq!(r[0]["isError"], true, "{r:?}");
    assert!(
        r[0]["output"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("4 deep")
    );
}

#[test]
fn a_server_that_does_not_stream_still_works() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({"reasoningEffort": "low"}));
    fake.push(Reply::Status {
        code: 200,
        body: json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "All at once."}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 3}}),
        retry_after: None,
    });
    let id = create(&s, json!({"prompt": "no streaming here"}));
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["result"], "All at once.");
    assert_eq!(events_of(&events, "usage")[0]["turnUsage"]["input"], 9.0);
    assert_eq!(fake.chats()[0].body["reasoning_effort"], "low");
}

#[test]
fn an_endless_reply_is_cut_off_at_the_size_limit() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(Reply::Stream {
        chunks: vec![content_chunk("Here it comes: ")],
        delay: Duration::ZERO,
        end: End::Flood,
    });
    let id = create(&s, json!({"prompt": "say everything"}));
    let events = wait_terminals(&s, &id, 1);
    assert_failed_with(&events, "larger than 16 MiB");
    assert_eq!(fake.chats().len(), 1, "not retried");
}

// ---------------------------------------------------------------------------------------------
// What real servers do: streams cut short by `[DONE]`, no usage, no streaming with tools, titles
// that ignore the instructions.

/// Every tool but `list_dir` switched off (a short request, one tool offered).
fn only_list_dir() -> Value {
    json!({"disabled": ["ask_user", "todo_write", "sleep_until", "start_session",
        "message_session", "read_file", "write_file", "search_files"]})
}

fn delta_text(frames: &[SseFrame]) -> String {
    frames
        .iter()
        .filter(|f| f.data["event"]["step"]["type"] == "text_delta")
        .filter_map(|f| f.data["event"]["step"]["delta"].as_str())
        .collect()
}

#[test]
fn a_stream_ended_by_done_without_a_finish_reason_is_retried_and_never_complete() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(text_reply("Hello.", (5, 1, 0)));
    let id = create(&s, json!({"prompt": "hi"}));
    let events = wait_terminals(&s, &id, 1);
    let after = events.last().and_then(|e| e["seq"].as_u64()).expect("seq");

    // The next turn's first attempt is cut short by `[DONE]`: live clients get its deltas, then
    // the notice that they are void, then the retry's deltas.
    fake.push(truncated_reply("Half of the"));
    fake.push(text_reply("The whole answer.", (10, 3, 0)));
    let sse = s.sse(&id, Some(after), None);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "again"}),
    );
    assert_eq!(status, 200, "{v}");
    let frames = sse.until_terminal(Duration::from_secs(20));
    let void = frames
        .iter()
        .position(|f| f.data["event"]["metadata"]["code"] == "partial_text_void")
        .unwrap_or_else(|| panic!("no void notice live: {frames:#?}"));
    assert_eq!(delta_text(&frames[..void]), "Half of the");
    assert_eq!(delta_text(&frames[void..]), "The whole answer.");

    let events = history(&s, &id);
    let texts: Vec<&Value> = steps(&events, "text");
    assert_eq!(texts.last().expect("text")["text"], "The whole answer.");
    assert!(
        texts
            .iter()
            .all(|t| !t["text"].as_str().unwrap_or("").contains("Half")),
        "the truncated attempt is not stored: {texts:?}"
    );
    assert_eq!(last_terminal(&events)["result"], "The whole answer.");
    let retries: Vec<&Value> = events_of(&events, "system")
        .into_iter()
        .filter(|e| {
            e["message"]
                .as_str()
                .unwrap_or("")
                .contains("without a finish reason")
        })
        .collect();
    assert_eq!(retries.len(), 1, "one retry: {retries:?}");

    // Without retries the turn fails: a truncated answer is never recorded as complete.
    let cwd = agent_with_engine(&s, "strict", fake.engine(json!({"maxRetries": 0})));
    fake.push(truncated_reply("Only a part"));
    let id = create(&s, json!({"prompt": "talk", "cwd": cwd}));
    let events = wait_terminals(&s, &id, 1);
    assert_failed_with(&events, "without a finish reason");
    assert!(steps(&events, "text").is_empty());
}

#[test]
fn usage_the_endpoint_does_not_report_is_estimated_priced_and_marked() {
    let fake = FakeOpenAi::start();
    let s = server(
        &fake,
        json!({"prices": {"fake-model": {"input": 2.0, "output": 8.0}}, "contextWindow": 8192}),
    );
    fake.push(text_reply_without_usage("Four words right here."));
    let id = create(&s, json!({"prompt": "estimate me"}));
    let events = wait_terminals(&s, &id, 1);
    let marks = position_of_code(&events, "usage_estimated");
    assert_eq!(marks.len(), 1, "{:?}", event_types(&events));
    let usage = &events[marks[0] + 1]["event"];
    assert_eq!(
        usage["type"], "usage",
        "the marker comes right before its usage event"
    );
    assert_eq!(
        events[marks[0]]["seq"].as_u64().map(|s| s + 1),
        usage_seq(&events, marks[0] + 1)
    );
    let turn = &usage["turnUsage"];
    let n = |v: &Value| v.as_f64().unwrap_or(0.0);
    // "Four words right here." is 22 characters: about 6 tokens.
    assert_eq!(n(&turn["output"]), 6.0, "{turn}");
    assert!(
        n(&turn["input"]) > 10.0,
        "the system prompt and the tools went in: {turn}"
    );
    assert!(
        (n(&turn["cost"]["total"]) - (n(&turn["input"]) * 2.0 + 6.0 * 8.0) / 1e6).abs() < 1e-12,
        "priced: {turn}"
    );
    assert_eq!(n(&usage["effectiveContextWindow"]), 8192.0);
    assert!(n(&usage["contextWindowUsage"]["systemPrompt"]) > 0.0);
    assert_eq!(
        events_of(&events, "usage").len(),
        1,
        "no second estimate by the runner"
    );

    // A measured call is not marked.
    fake.push(text_reply("Measured.", (30, 2, 0)));
    s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "and now"}),
    );
    let events = wait_terminals(&s, &id, 2);
    assert_eq!(position_of_code(&events, "usage_estimated").len(), 1);
    let last = events_of(&events, "usage").pop().expect("usage").clone();
    assert_eq!(n(&last["lastMessageUsage"]["input"]), 30.0);
}

fn usage_seq(events: &[Value], i: usize) -> Option<u64> {
    events[i]["seq"].as_u64()
}

#[test]
fn tool_choice_is_sent_with_the_tools_and_configurable() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(text_reply("ok", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "hi"}));
    wait_terminals(&s, &id, 1);
    assert_eq!(
        fake.chats()[0].body["tool_choice"],
        "auto",
        "auto by default"
    );

    let mut seen = 1;
    for (choice, sent) in [
        ("required", json!("required")),
        ("none", json!("none")),
        ("omit", Value::Null),
    ] {
        let cwd = agent_with_engine(&s, choice, fake.engine(json!({"toolChoice": choice})));
        fake.push(text_reply("ok", (1, 1, 0)));
        let id = create(&s, json!({"prompt": "hi", "cwd": cwd}));
        wait_terminals(&s, &id, 1);
        seen += 1;
        let chats = fake.wait_chats(seen, Duration::from_secs(10));
        assert_eq!(chats[seen - 1].body["tool_choice"], sent, "{choice}");
    }

    // Without tools there is no tool_choice either.
    let mut tools = only_list_dir();
    tools["disabled"]
        .as_array_mut()
        .expect("list")
        .push(json!("list_dir"));
    let cwd = agent_with_engine(&s, "toolless", fake.engine(json!({"tools": tools})));
    fake.push(text_reply("ok", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "hi", "cwd": cwd}));
    wait_terminals(&s, &id, 1);
    let last = fake.chats().pop().expect("chat");
    assert!(last.body.get("tools").is_none() && last.body.get("tool_choice").is_none());
}

#[test]
fn an_endpoint_that_cannot_stream_with_tools_is_called_without_streaming_and_remembered() {
    for refusal in [Refusal::EmptyStream, Refusal::Error] {
        let fake = FakeOpenAi::start();
        fake.refuse_streamed_tools(Some(refusal));
        let s = server(&fake, json!({"tools": only_list_dir(), "maxRetries": 4}));
        fake.push(text_reply("Answered in one piece.", (12, 4, 0)));
        let id = create(&s, json!({"prompt": "list"}));
        let events = wait_terminals(&s, &id, 1);
        assert_eq!(
            last_terminal(&events)["result"],
            "Answered in one piece.",
            "{refusal:?}: {:?}",
            event_types(&events)
        );
        let calls = fake.chat_requests();
        assert_eq!(
            calls.len(),
            2,
            "{refusal:?}: one refusal, one fallback, no retries"
        );
        assert_eq!(calls[0].body["stream"], true);
        assert_eq!(calls[1].body["stream"], false);
        assert!(calls[1].body.get("stream_options").is_none());
        assert_eq!(calls[1].body["tools"], calls[0].body["tools"]);
        let sys = events_of(&events, "system");
        assert_eq!(
            sys.len(),
            1,
            "{refusal:?}: a notice, no retry warnings: {sys:?}"
        );
        assert!(
            sys[0]["message"]
                .as_str()
                .unwrap_or("")
                .contains("without streaming")
        );
        let usage = events_of(&events, "usage");
        assert_eq!(usage[0]["lastMessageUsage"]["input"], 12.0);

        // The endpoint is remembered: the next call with tools is not streamed at all.
        fake.push(text_reply("Again in one piece.", (5, 2, 0)));
        s.post(
            &s.sessions_url(&format!("/{id}/messages")),
            &json!({"prompt": "more"}),
        );
        let events = wait_terminals(&s, &id, 2);
        assert_eq!(last_terminal(&events)["result"], "Again in one piece.");
        let calls = fake.chat_requests();
        assert_eq!(calls.len(), 3, "{refusal:?}");
        assert_eq!(calls[2].body["stream"], false);
    }
}

#[test]
fn deterministic_errors_are_never_retried() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({"maxRetries": 4}));
    fake.push(Reply::Status {
        code: 400,
        body: json!({"error": {"message": "this model does not exist"}}),
        retry_after: None,
    });
    let id = create(&s, json!({"prompt": "hi"}));
    let events = wait_terminals(&s, &id, 1);
    assert_failed_with(&events, "does not exist");
    assert_eq!(fake.chats().len(), 1, "asked once");
    assert!(events_of(&events, "system").is_empty());
}

#[test]
fn model_titles_are_cleaned_up_and_empty_replies_keep_the_excerpt() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    let title = |id: &str, status: &str| {
        poll_until("the title settles", Duration::from_secs(10), || {
            // A new session's excerpt title is already `complete`: a finished automatic title
            // is the one whose origin is `auto`.
            let d = detail_checked(&s, id);
            let settled =
                d["titleStatus"] == status && (status != "complete" || d["titleOrigin"] == "auto");
            settled.then_some(d)
        })
    };

    // A model that ignores "at most six words" and adds punctuation and a second line.
    fake.set_title(Some(
        "Title: Planning the vegetable garden for the coming spring season, with raised beds.\nIt is a nice plan.",
    ));
    fake.push(text_reply("Sure.", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "help me plan a garden"}));
    wait_terminals(&s, &id, 1);
    let d = title(&id, "complete");
    assert_eq!(
        d["title"], "Planning the vegetable garden for the coming spring season",
        "first line, no label or quotes, cut at a word, at most 60 characters, no trailing comma"
    );

    // Nothing usable: the excerpt stays and the title is marked failed.
    fake.set_title(Some("..."));
    fake.push(text_reply("Sure.", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "a second garden"}));
    wait_terminals(&s, &id, 1);
    let d = title(&id, "failed");
    assert_eq!(d["title"], "a second garden");

    // An empty reply gets no title request at all.
    let before = fake.title_requests().len();
    fake.push(Reply::Stream {
        chunks: vec![finish_chunk("stop"), usage_chunk((3, 0, 0))],
        delay: Duration::ZERO,
        end: End::Done,
    });
    let id = create(&s, json!({"prompt": "say nothing"}));
    let events = wait_terminals(&s, &id, 1);
    assert_eq!(last_terminal(&events)["status"], "completed");
    // Wait for anything the turn's end may still start: a later turn on the same server runs
    // after it, and its title request is the only new one.
    fake.push(text_reply("Sure.", (1, 1, 0)));
    let other = create(&s, json!({"prompt": "one more"}));
    wait_terminals(&s, &other, 1);
    title(&other, "failed");
    assert_eq!(
        fake.title_requests().len(),
        before + 1,
        "only the last session asked"
    );
    let d = detail_checked(&s, &id);
    assert_eq!(d["title"], "say nothing");
    assert_eq!(d["titleOrigin"], "excerpt");
}

#[test]
fn retries_and_failed_calls_are_logged_with_the_session_and_endpoint_never_the_key() {
    let fake = FakeOpenAi::start();
    let engine = fake.engine(json!({"maxRetries": 1})).to_string();
    let s = Server::start_logged(
        Some(&policy(&fake, "")),
        &[
            ("SESSIOND_ENGINE", Some(&engine)),
            ("SESSIOND_LOG", Some("warn")),
            ("OPENAI_API_KEY", Some("sk-must-never-be-logged")),
        ],
    );
    for _ in 0..2 {
        fake.push(Reply::Status {
            code: 503,
            body: json!({"error": {"message": "overloaded"}}),
            retry_after: None,
        });
    }
    let id = create(&s, json!({"prompt": "hi"}));
    let events = wait_terminals(&s, &id, 1);
    assert_failed_with(&events, "overloaded");
    let log = poll_until("the failure is logged", Duration::from_secs(10), || {
        let log = s.log();
        log.contains("no retries left").then_some(log)
    });
    let lines: Vec<&str> = log.lines().filter(|l| l.contains(&id)).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("retrying") && l.contains("WARN")),
        "{log}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains(&format!("{}/chat/completions", fake.base_url))),
        "{log}"
    );
    assert!(!log.contains("sk-must-never-be-logged"), "{log}");

    // A failed title call is logged the same way.
    fake.set_title(None);
    fake.push(text_reply("Sure.", (1, 1, 0)));
    let id = create(&s, json!({"prompt": "a title, please"}));
    wait_terminals(&s, &id, 1);
    let log = poll_until(
        "the title failure is logged",
        Duration::from_secs(10),
        || {
            let log = s.log();
            log.lines()
                .any(|l| l.contains("automatic title failed") && l.contains(&id))
                .then_some(log)
        },
    );
    let line = log
        .lines()
        .find(|l| l.contains("automatic title failed"))
        .expect("line");
    assert!(
        line.contains("WARN") && line.contains(&fake.base_url),
        "{line}"
    );
    assert!(!log.contains("sk-must-never-be-logged"), "{log}");
}

/// The request id of the HTTP request that sent the input (`X-Request-Id`, the client's own here)
/// reaches the model endpoint with the turn's calls.
#[test]
fn the_request_id_reaches_the_model_endpoint() {
    let fake = FakeOpenAi::start();
    let s = server(&fake, json!({}));
    fake.push(text_reply("hi there", (3, 2, 0)));
    let resp = s
        .http
        .post(s.sessions_url(""))
        .header("x-request-id", "client-req-42")
        .json(&json!({"prompt": "hi"}))
        .send()
        .expect("POST");
    assert_eq!(resp.headers()["x-request-id"], "client-req-42");
    let (status, v) = into_json(resp);
    assert_eq!(status, 200, "{v}");
    let chats = fake.wait_chats(1, Duration::from_secs(20));
    assert_eq!(chats[0].request_id.as_deref(), Some("client-req-42"));
}
