//! The runner's stall guard: a turn with no progress for `runner.stall_timeout_ms` ends failed
//! with a `system` notice coded `stalled`, and the session takes new work afterwards.

mod common;
#[allow(dead_code)]
#[path = "common/fake_acp.rs"]
mod fake_acp;

use std::time::Duration;

use common::*;
use fake_acp::*;
use serde_json::json;

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
