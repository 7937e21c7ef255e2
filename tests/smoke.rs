mod common;

use common::*;
use serde_json::json;

#[test]
fn create_runs_a_scripted_turn() {
    let s = Server::start();
    let v = s.create(json!({"prompt": "hello"}));
    assert_schema(
        "POST_v1_ws__workspaceSlug__agent_sessions.response.json",
        &v,
    );
    let id = v["session"]["sessionId"].as_str().unwrap();
    let terminal = s.wait_terminal(id, 1);
    assert_eq!(terminal["event"]["type"], "complete");
    let events = s.history_all(id);
    for e in &events {
        assert_known_event(&e["event"]);
    }
    assert_eq!(
        event_types(&events),
        [
            "session_created",
            "prompt_submitted",
            "turn_started",
            "step",
            "system",
            "usage",
            "complete"
        ]
    );
    assert_eq!(events[3]["event"]["step"]["text"], "echo: hello");
    // The scripted engine's token counts are made up: marked as an estimate, in the same write.
    assert_eq!(events[4]["event"]["metadata"]["code"], "usage_estimated");
}
