//! Busy policies on the real server (and on PostgreSQL with `SESSIOND_TEST_BACKEND=postgres`): a
//! message to a session whose turn is running says what to do — `enqueue` (the default),
//! `interrupt` or `reject` — on each family that sends messages: `/v1` (`ifBusy`, an extra field
//! seed 000 permits), `/v2` (`if_busy`) and `/agentex` (`message/send`'s `if_busy`). The running
//! turn is the scripted engine's `/await_steer` or `/await_follow_up`, which holds it until a
//! steer (a follow-up) reaches it or it is interrupted.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);

/// A turn that runs until a steer reaches it (or it is interrupted).
const HOLD_FOR_STEER: &str = "/reply working\n/await_steer\n/reply finished";
/// A turn that runs until a follow-up is queued behind it (or it is interrupted).
const HOLD_FOR_FOLLOW_UP: &str = "/reply working\n/await_follow_up\n/reply released";

#[derive(Debug, Clone, Copy, PartialEq)]
enum Family {
    V1,
    V2,
    Agentex,
}

const FAMILIES: [Family; 3] = [Family::V1, Family::V2, Family::Agentex];

/// A session (for `/agentex`, a task of a registered agent) of `family`.
struct Target {
    family: Family,
    id: String,
    /// The agent whose RPC endpoint `/agentex` messages go to.
    agent: Option<String>,
}

fn agentex(s: &Server, path: &str) -> String {
    s.url(&format!("/agentex{path}"))
}

/// Sends an RPC request to an agent; its one JSON line (after keep-alive blank lines).
fn rpc(s: &Server, agent: &str, body: &Value) -> Value {
    let res = s
        .http
        .post(agentex(s, &format!("/agents/{agent}/rpc")))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .expect("POST rpc");
    let status = res.status().as_u16();
    let text = res.text().expect("body");
    if status == 204 {
        return Value::Null;
    }
    assert_eq!(status, 200, "{text}");
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .expect("a JSON line");
    serde_json::from_str(line).expect("JSON")
}

/// The last seq of a session's timeline.
fn last_seq(s: &Server, id: &str) -> u64 {
    s.history_all(id).last().map_or(0, seq)
}

/// A session of `family` whose turn runs `script` (running, and waiting, when this returns).
fn busy(s: &Server, family: Family, script: &str) -> Target {
    let (id, agent) = match family {
        Family::V1 => (s.create_prompt(script), None),
        Family::V2 => {
            let (status, r) = s.post(&s.url("/v2/sessions"), &json!({"prompt": script}));
            assert_eq!(status, 201, "{r}");
            (r["id"].as_str().expect("id").to_owned(), None)
        }
        Family::Agentex => {
            let (status, v) = s.post(
                &agentex(s, "/agents/register-build"),
                &json!({"name": format!("busy-{}", new_uuid()), "description": "test"}),
            );
            assert_eq!(status, 200, "{v}");
            let agent = v["id"].as_str().expect("id").to_owned();
            let task = rpc(
                s,
                &agent,
                &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create", "params": {}}),
            );
            let id = task["result"]["id"].as_str().expect("task id").to_owned();
            // A notification: delivered, nobody waits for the turn.
            let sent = rpc(
                s,
                &agent,
                &json!({"jsonrpc": "2.0", "method": "message/send", "params": {
                    "task_id": id, "content": {"type": "text", "author": "user", "content": script}}}),
            );
            assert_eq!(sent, Value::Null);
            (id, Some(agent))
        }
    };
    // The turn's "working" text: after it the turn writes nothing until it is released.
    s.wait_for_event(&id, &["step"], 1, WAIT);
    Target { family, id, agent }
}

/// Sends `prompt` with the busy policy `policy` (the field left out when `None`) and, on `/v1`
/// and `/v2`, `behavior`. `/agentex` messages are follow-ups; its request is a notification
/// (answered 204, `Value::Null`) unless `wait` is set. The status and the answer.
fn send(
    s: &Server,
    t: &Target,
    prompt: &str,
    behavior: Option<&str>,
    policy: Option<&str>,
) -> (u16, Value) {
    match t.family {
        Family::V1 => {
            let mut body = json!({ "prompt": prompt });
            if let Some(b) = behavior {
                body["behavior"] = json!(b);
            }
            if let Some(p) = policy {
                body["ifBusy"] = json!(p);
            }
            s.post(&s.sessions_url(&format!("/{}/messages", t.id)), &body)
        }
        Family::V2 => {
            let mut body = json!({ "prompt": prompt });
            if let Some(b) = behavior {
                body["behavior"] = json!(b);
            }
            if let Some(p) = policy {
                body["if_busy"] = json!(p);
            }
            s.post(&s.url(&format!("/v2/sessions/{}/messages", t.id)), &body)
        }
        Family::Agentex => {
            let mut params = json!({
                "task_id": t.id,
                "content": {"type": "text", "author": "user", "content": prompt}});
            if let Some(p) = policy {
                params["if_busy"] = json!(p);
            }
            // A request answers once its turn has run; a refusal at once.
            let id = if policy == Some("reject") || policy == Some("bogus") {
                json!(7)
            } else {
                Value::Null
            };
            let mut call = json!({"jsonrpc": "2.0", "method": "message/send", "params": params});
            if !id.is_null() {
                call["id"] = id;
            }
            (200, rpc(s, t.agent.as_deref().expect("agent"), &call))
        }
    }
}

/// The `result` of the first `complete` terminal at or after `from`.
fn completed(s: &Server, id: &str, from: u64) -> (u64, String) {
    let t = s.wait_terminal(id, from);
    assert_eq!(etype(&t), "complete", "{t}");
    (
        seq(&t),
        t["event"]["result"].as_str().unwrap_or("").to_owned(),
    )
}

#[test]
fn reject_refuses_a_message_to_a_busy_session_in_each_familys_shape() {
    let s = Server::start();
    for family in FAMILIES {
        let t = busy(&s, family, HOLD_FOR_STEER);
        let before = s.history_all(&t.id);
        let (status, v) = send(&s, &t, "/reply too soon", None, Some("reject"));
        match family {
            Family::Agentex => {
                assert_eq!(v["id"], 7, "{v}");
                assert!(v.get("result").is_none(), "{v}");
                assert_eq!(v["error"]["code"], -32000, "{v}");
                assert_eq!(v["error"]["data"]["code"], "session_busy", "{v}");
            }
            _ => {
                assert_eq!(status, 409, "{family:?}: {v}");
                assert_eq!(v["error"], "session_busy", "{family:?}: {v}");
                assert!(v["message"].as_str().unwrap().contains("running"), "{v}");
            }
        }
        assert_eq!(
            s.history_all(&t.id),
            before,
            "{family:?}: a refused message writes nothing"
        );
        // The turn goes on and ends as it would have: a steer reaches it.
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{}/messages", t.id)),
            &json!({"prompt": "carry on"}),
        );
        assert_eq!(status, 200, "{v}");
        let (end, result) = completed(&s, &t.id, seq(&before[before.len() - 1]));
        assert_eq!(result, "finished", "{family:?}");
        let all = s.history_all(&t.id);
        assert!(
            !all.iter().any(|e| e.to_string().contains("too soon")),
            "{family:?}: {all:#?}"
        );
        // Once the session is idle, `reject` takes the message like any other.
        let (status, v) = send(&s, &t, "/reply now", None, Some("reject"));
        if family == Family::Agentex {
            assert_eq!(v["error"], Value::Null, "{v}");
        } else {
            assert_eq!(status, 200, "{family:?}: {v}");
        }
        assert_eq!(completed(&s, &t.id, end + 1).1, "now", "{family:?}");
    }
}

#[test]
fn interrupt_stops_the_running_turn_then_runs_the_message() {
    let s = Server::start();
    for family in FAMILIES {
        let t = busy(&s, family, HOLD_FOR_STEER);
        let from = last_seq(&s, &t.id);
        let (status, v) = send(&s, &t, "/reply after", None, Some("interrupt"));
        if family != Family::Agentex {
            assert_eq!(status, 200, "{family:?}: {v}");
        }
        let end = s.wait_terminal(&t.id, from);
        assert_eq!(etype(&end), "interrupted", "{family:?}: {end}");
        let (_, result) = completed(&s, &t.id, seq(&end) + 1);
        assert_eq!(result, "after", "{family:?}");
        let all = s.history_all(&t.id);
        let types: Vec<&str> = all[from as usize..].iter().map(etype).collect();
        let asked = types.iter().position(|t| *t == "interrupt_requested");
        let prompt = all
            .iter()
            .position(|e| etype(e) == "prompt_submitted" && e["event"]["prompt"] == "/reply after")
            .expect("the message is recorded");
        assert!(asked.is_some(), "{family:?}: {types:?}");
        assert_eq!(
            all[prompt]["event"]["behavior"], "follow_up",
            "{family:?}: it waits behind the turn it stops"
        );
        assert!(
            prompt < seq(&end) as usize,
            "{family:?}: recorded before the interrupted terminal"
        );
        assert!(
            !all.iter().any(|e| e["event"]["step"]["text"] == "finished"),
            "{family:?}: the interrupted turn did not go on"
        );
        // On an idle session `interrupt` stops nothing: the message just runs.
        let before = last_seq(&s, &t.id);
        send(&s, &t, "/reply calm", None, Some("interrupt"));
        let (_, result) = completed(&s, &t.id, before + 1);
        assert_eq!(result, "calm", "{family:?}");
        let tail = s.history_all(&t.id);
        assert!(
            !tail[before as usize..]
                .iter()
                .any(|e| matches!(etype(e), "interrupt_requested" | "interrupted")),
            "{family:?}: {tail:#?}"
        );
    }
}

#[test]
fn enqueue_is_the_default_and_delivers_as_before() {
    let s = Server::start();
    for family in FAMILIES {
        for policy in [None, Some("enqueue")] {
            // A follow-up waits behind the running turn, which goes on to its end.
            let t = busy(&s, family, HOLD_FOR_FOLLOW_UP);
            let from = last_seq(&s, &t.id);
            let (status, v) = send(&s, &t, "/reply next", Some("follow_up"), policy);
            if family != Family::Agentex {
                assert_eq!(status, 200, "{family:?} {policy:?}: {v}");
            }
            let (end, result) = completed(&s, &t.id, from);
            assert_eq!(result, "released", "{family:?} {policy:?}");
            assert_eq!(completed(&s, &t.id, end + 1).1, "next");
            let all = s.history_all(&t.id);
            assert!(
                !all.iter()
                    .any(|e| matches!(etype(e), "interrupt_requested" | "interrupted")),
                "{family:?} {policy:?}: {all:#?}"
            );
        }
    }
    // On /v1 and /v2 a steer (their default behaviour) still reaches the running turn.
    for family in [Family::V1, Family::V2] {
        let t = busy(&s, family, HOLD_FOR_STEER);
        let from = last_seq(&s, &t.id);
        let (status, v) = send(&s, &t, "hello", None, Some("enqueue"));
        assert_eq!(status, 200, "{v}");
        let (_, result) = completed(&s, &t.id, from);
        assert_eq!(result, "finished", "{family:?}");
        let all = s.history_all(&t.id);
        assert!(
            all.iter()
                .any(|e| e["event"]["step"]["text"] == "steered: hello"),
            "{family:?}: {all:#?}"
        );
    }
}

#[test]
fn an_unknown_busy_policy_is_refused_and_writes_nothing() {
    let s = Server::start();
    for family in FAMILIES {
        let t = busy(&s, family, HOLD_FOR_STEER);
        let before = s.history_all(&t.id);
        let (status, v) = send(&s, &t, "/reply no", None, Some("bogus"));
        match family {
            Family::Agentex => {
                assert_eq!(v["error"]["code"], -32602, "{v}");
                assert!(
                    v["error"]["message"].as_str().unwrap().contains("if_busy"),
                    "{v}"
                );
            }
            _ => {
                assert_eq!(status, 400, "{family:?}: {v}");
                assert_eq!(v["error"], "invalid_request");
                assert!(
                    v["message"]
                        .as_str()
                        .unwrap()
                        .contains("enqueue, interrupt, reject"),
                    "{v}"
                );
            }
        }
        assert_eq!(s.history_all(&t.id), before, "{family:?}");
        // Not a string either.
        if family != Family::Agentex {
            let url = match family {
                Family::V1 => s.sessions_url(&format!("/{}/messages", t.id)),
                _ => s.url(&format!("/v2/sessions/{}/messages", t.id)),
            };
            let field = if family == Family::V1 {
                "ifBusy"
            } else {
                "if_busy"
            };
            let (status, v) = s.post(&url, &json!({"prompt": "x", field: 3}));
            assert_eq!(status, 400, "{v}");
        }
        assert_eq!(s.history_all(&t.id), before, "{family:?}");
        let (status, _) = s.post(&s.sessions_url(&format!("/{}/interrupt", t.id)), &json!({}));
        assert_eq!(status, 200);
        s.wait_terminal(&t.id, seq(&before[before.len() - 1]));
    }
}

#[test]
fn the_openapi_document_names_the_busy_policy_of_each_family() {
    let s = Server::start();
    let (status, doc) = s.get(&s.url("/openapi.json"));
    assert_eq!(status, 200);
    let schemas = &doc["components"]["schemas"];
    let policies = json!(["enqueue", "interrupt", "reject"]);
    for name in [
        "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages.request",
        "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages_wait.request",
    ] {
        assert_eq!(
            schemas[name]["properties"]["ifBusy"]["enum"], policies,
            "{name}"
        );
    }
    let v2 = &doc["paths"]["/v2/sessions/{sessionId}/messages"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    assert_eq!(v2["properties"]["if_busy"]["enum"], policies, "{v2}");
    let rpc = doc["paths"]["/agentex/agents/{agent_id}/rpc"]["post"].to_string();
    assert!(rpc.contains("if_busy"), "{rpc}");
}

#[test]
fn an_agents_default_session_takes_the_busy_policy_too() {
    let s = Server::start();
    let url = s.url(&format!(
        "/v1/ws/{WS}/agents/root/sessions/default/messages"
    ));
    let (status, v) = s.post(&url, &json!({"prompt": HOLD_FOR_STEER}));
    assert_eq!(status, 200, "{v}");
    let id = v["session"]["sessionId"].as_str().expect("id").to_owned();
    s.wait_for_event(&id, &["step"], 1, WAIT);
    let before = s.history_all(&id);
    let (status, v) = s.post(&url, &json!({"prompt": "/reply no", "ifBusy": "reject"}));
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"], "session_busy");
    assert_eq!(s.history_all(&id), before, "nothing written");
    let (status, v) = s.post(
        &url,
        &json!({"prompt": "/reply instead", "ifBusy": "interrupt"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["sessionId"], json!(id));
    let end = s.wait_terminal(&id, seq(&before[before.len() - 1]));
    assert_eq!(etype(&end), "interrupted", "{end}");
    assert_eq!(completed(&s, &id, seq(&end) + 1).1, "instead");
}
