//! The `acp` engine against a fake ACP server that really speaks HTTP and NDJSON: what a turn
//! sends (`message/send` with the agent, the task and the content; `event/send` for async
//! agents), deltas and finished messages, and the protocol's edges — an error mid-stream, a line
//! that is not JSON, an oversized line, a slow agent, an agent that is down or answers 5xx, an
//! interrupt, and the `[policy]` host allow-list. Real SDK agents are driven by the Python suite
//! `tests/python/acp_agents`.

mod common;
#[path = "common/fake_acp.rs"]
mod fake_acp;

use std::time::{Duration, Instant};

use common::*;
use fake_acp::*;
use serde_json::{Value, json};

fn server() -> Server {
    Server::start_with_config("[policy]\nacp_hosts = [\"127.0.0.1\"]\n")
}

/// An agent served by `fake`; returns the cwd its sessions use.
fn agent(s: &Server, fake: &FakeAcp, acp_type: &str, idle_ms: u64) -> String {
    let slug = format!("acp-{}", &new_uuid()[..8]);
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": slug, "engine": fake.engine(acp_type, idle_ms)}),
    );
    assert_eq!(status, 201, "{v}");
    v["anchor"].as_str().expect("anchor").to_owned()
}

fn start(s: &Server, cwd: &str, prompt: &str) -> String {
    let v = s.create(json!({"prompt": prompt, "cwd": cwd}));
    v["session"]["sessionId"]
        .as_str()
        .expect("sessionId")
        .to_owned()
}

/// The history once the session's first turn ended.
fn finished(s: &Server, id: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let events: Vec<Value> = s
            .history_all(id)
            .into_iter()
            .map(|e| e["event"].clone())
            .collect();
        if events
            .iter()
            .any(|e| ["complete", "interrupted"].contains(&e["type"].as_str().unwrap_or("")))
        {
            return events;
        }
        assert!(Instant::now() < deadline, "no terminal: {events:#?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn terminal(events: &[Value]) -> &Value {
    events
        .iter()
        .rev()
        .find(|e| ["complete", "interrupted"].contains(&e["type"].as_str().unwrap_or("")))
        .expect("terminal")
}

fn texts(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "step" && e["step"]["type"] == "text")
        .map(|e| e["step"]["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_sync_turn_is_message_send_and_its_stream_becomes_steps() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "sync", 5000);
    fake.push(streamed("Hello from the agent."));
    let id = start(&s, &cwd, "hi there");
    let sse = s.sse(&id, None, None);
    let frames = sse.until_terminal(Duration::from_secs(30));
    let deltas: String = frames
        .iter()
        .filter(|f| f.data["type"] == "step" && f.data["step"]["type"] == "text_delta")
        .map(|f| {
            f.data["step"]["delta"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    let events = finished(&s, &id);
    assert_eq!(terminal(&events)["status"], "completed", "{events:#?}");
    assert_eq!(texts(&events), ["Hello from the agent."]);
    assert!(
        deltas.is_empty() || deltas == "Hello from the agent.",
        "the live deltas, if seen, join to the text: {deltas:?}"
    );
    let req = &fake.requests()[0];
    assert_eq!(req.path, "/api");
    let body = &req.body;
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["method"], "message/send");
    assert_eq!(
        req.request_id.as_deref(),
        body["id"].as_str(),
        "x-request-id is the JSON-RPC id"
    );
    let p = &body["params"];
    assert_eq!(p["task"]["id"], id.as_str());
    assert_eq!(p["agent"]["acp_type"], "sync");
    assert!(p["agent"]["id"].is_string() && p["agent"]["created_at"].is_string());
    assert_eq!(
        p["content"],
        json!({"type": "text", "author": "user", "content": "hi there", "format": "plain"})
    );
    assert_eq!(p["stream"], true);
    assert!(
        req.agent_key.is_none(),
        "an agent configured by hand was issued no key"
    );
}

#[test]
fn whole_messages_and_several_indexes_are_kept_in_order() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "sync", 5000);
    fake.push(Reply::Lines {
        lines: vec![
            full(0, "first"),
            delta("sec"),
            delta("ond"),
            done(0),
            full(1, "third"),
            delta("tail"),
        ],
        delay: Duration::ZERO,
        end: End::Close,
    });
    let id = start(&s, &cwd, "go");
    let events = finished(&s, &id);
    assert_eq!(terminal(&events)["status"], "completed");
    assert_eq!(
        texts(&events),
        ["first", "second", "third", "tail"],
        "an unfinished stream is kept"
    );
    assert_eq!(terminal(&events)["result"], "tail");
}

#[test]
fn an_error_mid_stream_fails_the_turn_and_keeps_what_came_before() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "sync", 5000);
    fake.push(Reply::Lines {
        lines: vec![delta("partial "), error_line(-32603, "the model fell over")],
        delay: Duration::ZERO,
        end: End::Close,
    });
    let id = start(&s, &cwd, "go");
    let events = finished(&s, &id);
    let t = terminal(&events);
    assert_eq!(t["status"], "failed");
    assert_eq!(
        t["error"],
        "the agent answered with error -32603: the model fell over"
    );
    assert_eq!(texts(&events), ["partial "]);
}

#[test]
fn garbage_and_oversized_lines_fail_the_turn_with_the_reason() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "sync", 5000);
    for (reply, reason) in [
        (
            Reply::Lines {
                lines: vec!["<html>oops</html>".into()],
                delay: Duration::ZERO,
                end: End::Close,
            },
            "not JSON",
        ),
        (
            Reply::Lines {
                lines: vec![r#"{"hello": "world"}"#.into()],
                delay: Duration::ZERO,
                end: End::Close,
            },
            "not a JSON-RPC response",
        ),
        (
            Reply::Lines {
                lines: vec![result_line(json!({"type": "banana"}))],
                delay: Duration::ZERO,
                end: End::Close,
            },
            "unknown type",
        ),
        (
            Reply::Lines {
                lines: vec![],
                delay: Duration::ZERO,
                end: End::Flood,
            },
            "longer than 8388608 bytes",
        ),
    ] {
        fake.push(reply);
        let id = start(&s, &cwd, "go");
        let events = finished(&s, &id);
        let t = terminal(&events);
        assert_eq!(t["status"], "failed", "{events:#?}");
        assert!(
            t["error"].as_str().unwrap_or_default().contains(reason),
            "{t}"
        );
    }
}

#[test]
fn a_slow_agent_times_out() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "sync", 300);
    fake.push(Reply::Lines {
        lines: vec![delta("thinking")],
        delay: Duration::ZERO,
        end: End::Stall,
    });
    let id = start(&s, &cwd, "go");
    let events = finished(&s, &id);
    let t = terminal(&events);
    assert_eq!(t["status"], "failed");
    assert_eq!(t["error"], "the agent's ACP server sent nothing for 300 ms");
    assert_eq!(texts(&events), ["thinking"]);
}

#[test]
fn unreachable_and_5xx_agents_are_retried_with_warnings() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "sync", 5000);
    fake.push(Reply::Status(503)).push(streamed("made it"));
    let id = start(&s, &cwd, "go");
    let events = finished(&s, &id);
    assert_eq!(terminal(&events)["status"], "completed");
    assert_eq!(texts(&events), ["made it"]);
    // The retry is the one warning; the runner's note that the usage is estimated (an ACP agent
    // reports none) is an `info`.
    let warnings: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "system" && e["level"] == "warn")
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "system" && e["metadata"]["code"] == "usage_estimated"),
        "{events:#?}"
    );
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(warnings[0]["level"], "warn");
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("HTTP 503")
    );

    // Nobody listens at this port.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "down", "engine": {"kind": "acp", "url": format!("http://127.0.0.1:{port}"), "acpType": "sync"}}),
    );
    assert_eq!(status, 201, "{v}");
    let id = start(&s, "agents/down", "anyone?");
    let events = finished(&s, &id);
    let t = terminal(&events);
    assert_eq!(t["status"], "failed");
    let error = t["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("cannot be reached") && error.contains("gave up after 4 attempts"),
        "{error}"
    );
    let warnings = events
        .iter()
        .filter(|e| e["type"] == "system" && e["level"] == "warn")
        .count();
    assert_eq!(warnings, 3, "{events:#?}");
}

#[test]
fn an_interrupt_closes_the_agents_stream() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "sync", 5000);
    fake.push(Reply::Lines {
        lines: vec![delta("working")],
        delay: Duration::ZERO,
        end: End::Hold,
    });
    let id = start(&s, &cwd, "go");
    fake.wait_requests(1, Duration::from_secs(10));
    s.wait_for_event(&id, &["turn_started"], 0, Duration::from_secs(10));
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert!(status < 300, "{v}");
    let events = finished(&s, &id);
    assert_eq!(terminal(&events)["type"], "interrupted");
    poll_until(
        "the fake sees the connection close",
        Duration::from_secs(10),
        || (fake.closed_early() == 1).then_some(()),
    );
}

#[test]
fn an_async_turn_is_event_send_answered_at_once() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "async", 5000);
    fake.push(Reply::Lines {
        lines: vec![result_line(json!({"status": "processing"}))],
        delay: Duration::ZERO,
        end: End::Close,
    });
    let id = start(&s, &cwd, "an event");
    let events = finished(&s, &id);
    assert_eq!(terminal(&events)["status"], "completed");
    assert!(texts(&events).is_empty());
    let body = &fake.requests()[0].body;
    assert_eq!(body["method"], "event/send");
    let event = &body["params"]["event"];
    assert_eq!(event["task_id"], id.as_str());
    assert_eq!(
        event["content"],
        json!({"type": "text", "author": "user", "content": "an event"})
    );
    assert!(event["id"].is_string() && event["sequence_id"].is_i64());
    assert_eq!(body["params"]["agent"]["acp_type"], "async");
    // The event is the task's, as /agentex lists it.
    let (status, list) = s.get(&s.url(&format!(
        "/agentex/events?task_id={id}&agent_id={}",
        event["agent_id"].as_str().unwrap_or_default()
    )));
    assert_eq!(status, 200, "{list}");
    assert_eq!(list[0]["id"], event["id"]);
}

#[test]
fn agents_may_only_name_hosts_the_policy_allows() {
    let s = server();
    for url in [
        "http://10.0.0.1:8000",
        "http://localhost:8000",
        "http://127.0.0.1.nip.io:80",
    ] {
        let (status, v) = s.post(
            &s.url(&format!("/v1/ws/{WS}/agents")),
            &json!({"slug": format!("far-{}", &new_uuid()[..6]), "engine": {"kind": "acp", "url": url, "acpType": "sync"}}),
        );
        assert_eq!(status, 400, "{url}: {v}");
        assert!(
            v["message"]
                .as_str()
                .unwrap_or_default()
                .contains("policy.acp_hosts"),
            "{v}"
        );
    }
    // Without any allowed host, none is allowed.
    let bare = Server::start();
    let (status, _) = bare.post(
        &bare.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "near", "engine": {"kind": "acp", "url": "http://127.0.0.1:9", "acpType": "sync"}}),
    );
    assert_eq!(status, 400);
    let (status, _) = bare.post(
        &bare.url("/agentex/agents/register"),
        &json!({"name": "near", "acp_url": "http://127.0.0.1:9", "acp_type": "sync"}),
    );
    assert_eq!(status, 400);
}

#[test]
fn the_last_contact_and_the_last_error_are_recorded() {
    let fake = FakeAcp::start();
    let s = server();
    let cwd = agent(&s, &fake, "sync", 5000);
    let slug = cwd.trim_start_matches("agents/").to_owned();
    let contact = |slug: &str| -> (u16, Value) {
        s.get(&s.url(&format!("/v1/ws/{WS}/agents/{slug}/contact")))
    };

    // Before any call: the server's URL, nothing else.
    let (status, before) = contact(&slug);
    assert_eq!(status, 200, "{before}");
    assert_eq!(before["acpUrl"], fake.engine("sync", 5000)["url"]);
    for field in ["lastContactAt", "lastError", "lastErrorAt"] {
        assert!(before[field].is_null(), "{field}: {before}");
    }

    // A turn it answers: a contact.
    fake.push(streamed("hello"));
    let id = start(&s, &cwd, "go");
    assert_eq!(terminal(&finished(&s, &id))["status"], "completed");
    let (_, answered) = contact(&slug);
    let contacted_at = answered["lastContactAt"].as_i64().expect("lastContactAt");
    assert!(answered["lastError"].is_null(), "{answered}");

    // A turn that fails: its error, and when (the contact stays as it was).
    fake.push(Reply::Lines {
        lines: vec![error_line(-32603, "the model fell over")],
        delay: Duration::ZERO,
        end: End::Close,
    });
    s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "again", "clientRequestId": new_uuid()}),
    );
    let failed = poll_until("the error recorded", Duration::from_secs(30), || {
        let (_, v) = contact(&slug);
        v["lastError"].is_string().then_some(v)
    });
    assert_eq!(
        failed["lastError"],
        "the agent answered with error -32603: the model fell over"
    );
    assert!(failed["lastErrorAt"].as_i64().expect("lastErrorAt") >= contacted_at);
    assert!(failed["lastContactAt"].as_i64().expect("lastContactAt") >= contacted_at);

    // An agent that is not an ACP server, and one that does not exist.
    let (status, v) = contact("root");
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"acpUrl": null, "lastContactAt": null, "lastError": null, "lastErrorAt": null})
    );
    let (status, v) = contact("nobody-here");
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("agent_not_found"))
    );
}
