//! The runner's stall guard: a turn with no progress for `runner.stall_timeout_ms` ends failed
//! with a `system` notice coded `stalled`, and the session takes new work afterwards.

mod common;
#[allow(dead_code)]
#[path = "common/fake_acp.rs"]
mod fake_acp;

use std::time::Duration;

use common::*;
use fake_acp::*;
use serde_json::{Value, json};

const CONFIG: &str = "[runner]\nstall_timeout_ms = 1000\n";

#[test]
fn a_hung_turn_ends_failed_stalled_and_the_session_runs_again() {
    let s = Server::start_with_config(CONFIG);
    let id = s.create_prompt("/reply before\n/hang");
    let end = s.wait_for_event(&id, &TERMINALS, 0, Duration::from_secs(30));
    assert_eq!(etype(&end), "complete", "{end}");
    assert_eq!(end["event"]["status"], "failed", "{end}");
    let error = end["event"]["error"].as_str().unwrap_or("");
    assert!(error.starts_with("stalled"), "{end}");

    let events = s.history_all(&id);
    let notices: Vec<_> = of_type(&events, "system")
        .into_iter()
        .filter(|e| e["event"]["metadata"]["code"] == "stalled")
        .collect();
    assert_eq!(notices.len(), 1, "{events:#?}");
    assert!(
        seq(notices[0]) < seq(&end),
        "the notice comes before the terminal"
    );
    // The text streamed before the hang stays.
    assert!(
        events
            .iter()
            .any(|e| e["event"]["step"]["text"] == "before"),
        "{events:#?}"
    );

    // The session is not left running: a new message runs a new turn.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "/reply again"}),
    );
    assert!(status == 200 || status == 202, "{status} {v}");
    let next = s.wait_for_event(&id, &TERMINALS, seq(&end) + 1, Duration::from_secs(30));
    assert_eq!(next["event"]["status"], "completed", "{next}");
}

#[test]
fn a_slow_turn_that_keeps_streaming_is_not_stalled() {
    let s = Server::start_with_config(CONFIG);
    // Six deltas 400 ms apart: 2.4 s in all, longer than the timeout, with progress throughout.
    let id = s.create_prompt("/slow 400\n/stream 6");
    let end = s.wait_for_event(&id, &TERMINALS, 0, Duration::from_secs(30));
    assert_eq!(end["event"]["status"], "completed", "{end}");
    let events = s.history_all(&id);
    assert!(
        !events
            .iter()
            .any(|e| e["event"]["metadata"]["code"] == "stalled"),
        "{events:#?}"
    );
}

#[test]
fn an_interrupt_still_ends_a_hung_turn_interrupted() {
    let s = Server::start_with_config("[runner]\nstall_timeout_ms = 60000\n");
    let id = s.create_prompt("/hang");
    s.wait_for_event(
        &id,
        &["session_created", "user_message"],
        0,
        Duration::from_secs(10),
    );
    let mut ended = None;
    for _ in 0..200 {
        let (status, _) = s.post(&s.sessions_url(&format!("/{id}/interrupt")), &json!({}));
        assert!(status < 500);
        let events = s.history_all(&id);
        if let Some(e) = events.iter().find(|e| TERMINALS.contains(&etype(e))) {
            ended = Some(e.clone());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let end = ended.expect("the hung turn ends on interrupt");
    assert_eq!(etype(&end), "interrupted", "{end}");
}

#[test]
fn an_acp_agent_that_goes_silent_mid_message_is_stalled() {
    let fake = FakeAcp::start();
    let s = Server::start_with_config(
        "[policy]\nacp_hosts = [\"127.0.0.1\"]\n[runner]\nstall_timeout_ms = 1000\n",
    );
    let slug = format!("acp-{}", &new_uuid()[..8]);
    // The engine's own idle timeout is a minute away: only the stall guard ends this turn.
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": slug, "engine": fake.engine("sync", 60_000)}),
    );
    assert_eq!(status, 201, "{v}");
    let cwd = v["anchor"].as_str().expect("anchor").to_owned();
    fake.push(Reply::Lines {
        lines: vec![delta("thinking")],
        delay: Duration::ZERO,
        end: End::Stall,
    });
    let v = s.create(json!({"prompt": "go", "cwd": cwd}));
    let id = v["session"]["sessionId"].as_str().expect("sessionId");
    let end = s.wait_for_event(id, &TERMINALS, 0, Duration::from_secs(30));
    assert_eq!(end["event"]["status"], "failed", "{end}");
    assert!(
        end["event"]["error"]
            .as_str()
            .unwrap_or("")
            .starts_with("stalled"),
        "{end}"
    );
}

/// An agent message left `IN_PROGRESS` when its session's turn stalls is closed with the turn: it
/// reads `DONE` with the content it had, so no message of a dead agent stays open forever.
#[test]
fn a_stalled_turn_closes_the_agent_messages_left_open() {
    let s = Server::start_with_config(CONFIG);
    let id = s.create_prompt("/reply first");
    let first = s.wait_for_event(&id, &TERMINALS, 0, Duration::from_secs(30));
    assert_eq!(first["event"]["status"], "completed", "{first}");

    // The agent opens a message it streams, and writes part of it.
    let text = |t: &str| json!({"type": "text", "author": "agent", "content": t});
    let (status, opened) = s.post(
        &s.url("/agentex/messages"),
        &json!({"task_id": id, "content": text(""), "streaming_status": "IN_PROGRESS"}),
    );
    assert_eq!(status, 200, "{opened}");
    let message = opened["id"].as_str().expect("message id").to_owned();
    let (status, partial) = s.put(
        &s.url(&format!("/agentex/messages/{message}")),
        &json!({"task_id": id, "content": text("half a thought")}),
    );
    assert_eq!(status, 200, "{partial}");
    assert_eq!(partial["streaming_status"], "IN_PROGRESS", "{partial}");

    // Its next turn hangs, and the stall guard ends it.
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "/hang"}),
    );
    assert!(status == 200 || status == 202, "{status} {v}");
    let end = s.wait_for_event(&id, &TERMINALS, seq(&first) + 1, Duration::from_secs(30));
    assert_eq!(end["event"]["status"], "failed", "{end}");

    let (status, closed) = s.get(&s.url(&format!("/agentex/messages/{message}")));
    assert_eq!(status, 200, "{closed}");
    assert_eq!(closed["streaming_status"], "DONE", "{closed}");
    assert_eq!(closed["content"]["content"], "half a thought", "{closed}");
    let open_only = reqwest::Url::parse_with_params(
        &s.url("/agentex/messages"),
        &[
            ("task_id", id.as_str()),
            ("filters", r#"[{"streaming_status":"IN_PROGRESS"}]"#),
        ],
    )
    .expect("url");
    let (_, open) = s.get(open_only.as_str());
    assert_eq!(open, json!([]), "no message is left open");
}

/// An async ACP agent writes its messages after its turn, through the agent platform API with
/// its key. When it dies mid-message, no turn holds the message: the runner's guard closes it
/// after the stall timeout with a `stalled` notice, the task goes on and the session takes the
/// next input.
#[test]
fn a_message_an_async_agent_left_open_is_closed_after_the_stall_timeout() {
    let fake = FakeAcp::start();
    let s = Server::start_with_config(
        "[policy]\nacp_hosts = [\"127.0.0.1\"]\n[runner]\nstall_timeout_ms = 1000\n",
    );
    // An async agent registered through the agent platform API, with the key it is issued.
    let (status, reg) = s.post(
        &s.url("/agentex/agents/register"),
        &json!({"name": format!("async-{}", &new_uuid()[..8]), "acp_url": fake.url,
            "acp_type": "async"}),
    );
    assert_eq!(status, 200, "{reg}");
    let agent_id = reg["id"].as_str().expect("agent id").to_owned();
    let key = reg["agent_api_key"].as_str().expect("agent key").to_owned();
    let accepted = || Reply::Lines {
        lines: vec![result_line(json!({"status": "processing"}))],
        delay: Duration::ZERO,
        end: End::Close,
    };
    fake.push(accepted());
    let rpc = |method: &str, params: Value| {
        let (status, v) = s.post(
            &s.url(&format!("/agentex/agents/{agent_id}/rpc")),
            &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
        );
        assert_eq!(status, 200, "{v}");
        assert!(v["error"].is_null(), "{v}");
        v["result"].clone()
    };
    let task = rpc("task/create", json!({}));
    let id = task["id"].as_str().expect("task id").to_owned();
    let created = fake.wait_requests(1, Duration::from_secs(30));
    assert_eq!(created[0].body["method"], "task/create", "{:?}", created[0]);

    // After its turn the agent, with the key it was issued, opens a message and writes part of it.
    let agent = http_builder().build().expect("client");
    let as_agent = |method: reqwest::Method, path: &str, body: Value| {
        into_json(
            agent
                .request(method, s.url(path))
                .header("x-agent-api-key", &key)
                .json(&body)
                .send()
                .expect("request"),
        )
    };
    let text = |t: &str| json!({"type": "text", "author": "agent", "content": t});
    let (status, opened) = as_agent(
        reqwest::Method::POST,
        "/agentex/messages",
        json!({"task_id": id, "content": text(""), "streaming_status": "IN_PROGRESS"}),
    );
    assert_eq!(status, 200, "{opened}");
    let message = opened["id"].as_str().expect("message id").to_owned();
    // While it keeps writing, past the stall timeout in all, the message stays open: the agent
    // paces its writes as a model streams, and the guard looks only at the newest revision.
    let mut thought = String::new();
    for word in ["half", "a", "thought"] {
        std::thread::sleep(Duration::from_millis(400));
        thought = format!("{thought} {word}").trim().to_owned();
        let (status, partial) = as_agent(
            reqwest::Method::PUT,
            &format!("/agentex/messages/{message}"),
            json!({"task_id": id, "content": text(&thought)}),
        );
        assert_eq!(status, 200, "{partial}");
        assert_eq!(partial["streaming_status"], "IN_PROGRESS", "{partial}");
    }
    let (_, m) = s.get(&s.url(&format!("/agentex/messages/{message}")));
    assert_eq!(m["streaming_status"], "IN_PROGRESS", "{m}");

    // The agent dies: nothing more comes, and the guard closes the message with what it held.
    let notice = poll_until("the stalled notice", Duration::from_secs(30), || {
        of_type(&s.history_all(&id), "system")
            .into_iter()
            .find(|e| e["event"]["metadata"]["code"] == "stalled")
            .cloned()
    });
    assert_eq!(notice["event"]["level"], "warn", "{notice}");
    let closed = poll_until("the message closed", Duration::from_secs(30), || {
        let (_, m) = s.get(&s.url(&format!("/agentex/messages/{message}")));
        (m["streaming_status"] == "DONE").then_some(m)
    });
    assert_eq!(closed["content"]["content"], "half a thought", "{closed}");
    let (_, task) = s.get(&s.url(&format!("/agentex/tasks/{id}")));
    assert_ne!(task["status"], "FAILED", "the task itself goes on: {task}");

    // The session takes the next input, which the agent is sent.
    fake.push(accepted());
    rpc(
        "event/send",
        json!({"task_id": id, "content": {"type": "text", "author": "user", "content": "next"}}),
    );
    fake.wait_requests(2, Duration::from_secs(30));
}
