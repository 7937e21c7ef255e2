//! The agent platform API (`/agentex`) over raw HTTP: JSON-RPC envelopes and error objects, the
//! line format of RPC answers, HTTP errors around them, and the sessions that tasks are, checked
//! against the Sessions API's seed schemas and as `/v2` Session records. The official client
//! drives the rest (`tests/python/agentex_client`).

mod common;
#[path = "common/hast.rs"]
mod hast;

use std::io::{BufRead, BufReader};
use std::time::Duration;

use common::{Server, WS, assert_known_events, assert_schema, poll_until};
// What `hast` reads from its parent.
use common::{Sse, SseFrame, SseItem};
use serde_json::{Value, json};

fn agentex(s: &Server, path: &str) -> String {
    s.url(&format!("/agentex{path}"))
}

/// Registers an agent and returns its id.
fn register(s: &Server, name: &str) -> String {
    let (status, v) = s.post(
        &agentex(s, "/agents/register-build"),
        &json!({"name": name, "description": "test"}),
    );
    assert_eq!(status, 200, "{v}");
    v["id"].as_str().expect("id").to_owned()
}

/// A raw RPC call: status, content type and the body's text.
fn rpc_raw(s: &Server, agent_id: &str, body: &str) -> (u16, String, String) {
    let res = s
        .http
        .post(agentex(s, &format!("/agents/{agent_id}/rpc")))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .expect("POST rpc");
    let status = res.status().as_u16();
    let ct = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, ct, res.text().expect("body"))
}

/// An RPC answer that is one line of JSON (after keep-alive blank lines).
fn rpc(s: &Server, agent_id: &str, body: &Value) -> Value {
    let (status, ct, text) = rpc_raw(s, agent_id, &body.to_string());
    assert_eq!(status, 200, "{text}");
    assert!(ct.starts_with("application/json"), "{ct}");
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line of JSON: {text:?}");
    assert!(text.ends_with('\n'));
    let v: Value = serde_json::from_str(lines[0]).expect("JSON line");
    assert_one_outcome(&v);
    v
}

/// JSON-RPC 2.0: a response has `result` (success) or `error` (failure), never both.
fn assert_one_outcome(v: &Value) {
    let has = |k: &str| v.get(k).is_some();
    assert!(has("result") != has("error"), "result or error: {v}");
}

fn assert_rpc_error(v: &Value, code: i64, id: &Value) {
    assert_eq!(v["jsonrpc"], "2.0", "{v}");
    assert_eq!(&v["id"], id, "{v}");
    assert!(v.get("result").is_none(), "an error has no result: {v}");
    assert_eq!(v["error"]["code"], code, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{v}"
    );
}

#[test]
fn json_rpc_errors_have_standard_codes_and_echo_the_id() {
    let s = Server::start();
    let agent = register(&s, "rpc-errors");
    for (body, code, id) in [
        ("{not json", -32700, Value::Null),
        ("[1, 2]", -32600, Value::Null),
        ("\"task/create\"", -32600, Value::Null),
        (
            r#"{"jsonrpc": "1.0", "id": 3, "method": "task/create", "params": {}}"#,
            -32600,
            json!(3),
        ),
        (
            r#"{"id": {"nested": 1}, "method": "task/create", "params": {}}"#,
            -32600,
            Value::Null,
        ),
        (r#"{"id": "a", "params": {}}"#, -32600, json!("a")),
        (
            r#"{"id": "a", "method": "task/create", "params": {}, "extra": 1}"#,
            -32600,
            json!("a"),
        ),
        (
            r#"{"id": 7, "method": "task/delete", "params": {}}"#,
            -32601,
            json!(7),
        ),
        (r#"{"id": 8, "method": "task/create"}"#, -32602, json!(8)),
        (
            r#"{"id": 9, "method": "task/create", "params": [1]}"#,
            -32602,
            json!(9),
        ),
        (
            r#"{"id": 10, "method": "task/create", "params": {"nme": "typo"}}"#,
            -32602,
            json!(10),
        ),
        (
            r#"{"id": 11, "method": "task/create", "params": {"name": 5}}"#,
            -32602,
            json!(11),
        ),
        (
            r#"{"id": 12, "method": "task/cancel", "params": {}}"#,
            -32602,
            json!(12),
        ),
        (
            r#"{"id": 13, "method": "task/interrupt", "params": {"task_id": "01a230e0-0000-7000-8000-000000000000"}}"#,
            -32602,
            json!(13),
        ),
        (
            r#"{"id": 14, "method": "message/send", "params": {"content": {"type": "image"}}}"#,
            -32602,
            json!(14),
        ),
        (
            r#"{"id": 15, "method": "message/send", "params": {"content": {"type": "text", "author": "user", "content": ""}}}"#,
            -32602,
            json!(15),
        ),
        (
            r#"{"id": 16, "method": "event/send", "params": {"content": {"type": "text", "author": "user", "content": "x"}}}"#,
            -32602,
            json!(16),
        ),
        // U+0000 in any text is refused on every backend (PostgreSQL's text cannot hold it).
        (
            r#"{"id": 17, "method": "task/create", "params": {"name": "a\u0000b"}}"#,
            -32602,
            json!(17),
        ),
        (
            r#"{"id": 18, "method": "message/send", "params": {"content": {"type": "text", "author": "user", "content": "\u0000"}}}"#,
            -32602,
            json!(18),
        ),
    ] {
        let (status, ct, text) = rpc_raw(&s, &agent, body);
        assert_eq!(status, 200, "{body} -> {status} {text}");
        assert!(ct.starts_with("application/json"), "{body}: {ct}");
        assert_eq!(text.matches('\n').count(), 1, "{body}: one line: {text:?}");
        let v: Value = serde_json::from_str(&text).expect("JSON");
        assert_rpc_error(&v, code, &id);
        if body.contains("u0000") {
            assert!(
                text.contains("U+0000"),
                "{body}: the refusal says why: {text}"
            );
        }
    }
    // Nothing was created by any of them.
    let (_, tasks) = s.get(&agentex(&s, &format!("/tasks?agent_id={agent}")));
    assert_eq!(tasks, json!([]));
}

/// A notification (`"jsonrpc": "2.0"`, no `id`) is carried out and gets no answer: 204, no body,
/// its errors included. A request object that is broken is still answered, and the official
/// client's default body (neither `jsonrpc` nor `id`) is answered with `"id": null`.
#[test]
fn notifications_are_carried_out_and_not_answered() {
    let s = Server::start();
    let agent = register(&s, "quiet");
    let task_named = |name: &str| s.get(&agentex(&s, &format!("/tasks/name/{name}")));
    for body in [
        json!({"jsonrpc": "2.0", "method": "task/create", "params": {"name": "heard"}}),
        // Errors are not answered either.
        json!({"jsonrpc": "2.0", "method": "task/delete", "params": {}}),
        json!({"jsonrpc": "2.0", "method": "task/create", "params": [1]}),
        json!({"jsonrpc": "2.0", "method": "task/create", "params": {"nme": "typo"}}),
        json!({"jsonrpc": "2.0", "method": "task/cancel", "params": {"task_name": "nobody"}}),
    ] {
        let (status, ct, text) = rpc_raw(&s, &agent, &body.to_string());
        assert_eq!(
            (status, ct.as_str(), text.as_str()),
            (204, "", ""),
            "{body}"
        );
    }
    let (status, task) = task_named("heard");
    assert_eq!(status, 200, "the notification created its task: {task}");
    let task = task["id"].as_str().expect("id").to_owned();
    // A message sent as a notification is delivered; its turn runs with nobody waiting.
    let send = json!({"jsonrpc": "2.0", "method": "message/send", "params": {
        "task_id": task,
        "content": {"type": "text", "author": "user", "content": "/reply heard you"}}});
    let (status, _, text) = rpc_raw(&s, &agent, &send.to_string());
    assert_eq!((status, text.as_str()), (204, ""));
    poll_until("the agent's reply", Duration::from_secs(30), || {
        let (_, messages) = s.get(&agentex(&s, &format!("/messages?task_id={task}")));
        messages
            .as_array()?
            .iter()
            .any(|m| m["content"]["content"] == "heard you")
            .then_some(())
    });
    // `id: null` is a request, not a notification; so is a body without `jsonrpc`.
    for (body, name) in [
        (
            json!({"jsonrpc": "2.0", "id": null, "method": "task/create", "params": {"name": "asked"}}),
            "asked",
        ),
        (
            json!({"method": "task/create", "params": {"name": "plain"}}),
            "plain",
        ),
    ] {
        let v = rpc(&s, &agent, &body);
        assert_eq!(v["id"], Value::Null, "{v}");
        assert_eq!(v["result"]["name"], name, "{v}");
        assert_eq!(task_named(name).0, 200);
    }
    // A broken request object is answered, with `"id": null`.
    for (body, code) in [
        (r#"{"jsonrpc": "2.0", "method": 5, "params": {}}"#, -32600),
        (r#"{"jsonrpc": "2.0", "method": "task/create""#, -32700),
    ] {
        let (status, _, text) = rpc_raw(&s, &agent, body);
        assert_eq!(status, 200, "{body}");
        let v: Value = serde_json::from_str(&text).expect("JSON");
        assert_rpc_error(&v, code, &Value::Null);
    }
}

/// A streamed `message/send` whose turn fails ends with an error line: `error`, no `result`.
#[test]
fn a_failed_turn_ends_a_stream_with_an_error_line() {
    let s = Server::start();
    let agent = register(&s, "failing-lines");
    let body = json!({"id": 9, "method": "message/send", "params": {"stream": true,
        "content": {"type": "text", "author": "user", "content": "/fail the model is down"}}});
    let (status, ct, text) = rpc_raw(&s, &agent, &body.to_string());
    assert_eq!(status, 200, "{text}");
    assert!(ct.starts_with("application/x-ndjson"), "{ct}");
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    lines.iter().for_each(assert_one_outcome);
    let last = lines.last().expect("an answer");
    assert_rpc_error(last, -32000, &json!(9));
    assert_eq!(last["error"]["data"]["code"], "turn_failed", "{last}");
}

/// Every `/agentex` route that reads a body refuses one that does not say it is JSON (415, the
/// rule of every family), the RPC included, and changes nothing; a body-less call needs no type.
#[test]
fn agentex_bodies_need_a_json_content_type() {
    let s = Server::start();
    let agent = register(&s, "typed");
    let created = rpc(
        &s,
        &agent,
        &json!({"id": 1, "method": "task/create", "params": {"name": "typed-task"}}),
    );
    let task = created["result"]["id"].as_str().expect("id").to_owned();
    let send = |method: reqwest::Method, path: &str, ct: Option<&str>, body: &str| {
        let mut req = s
            .http
            .request(method, agentex(&s, path))
            .body(body.to_owned());
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        common::into_json(req.send().expect("send"))
    };
    let post = reqwest::Method::POST;
    let routes = [
        (
            post.clone(),
            format!("/agents/{agent}/rpc"),
            json!({"id": 2, "method": "task/create", "params": {"name": "untyped"}}),
        ),
        (
            post.clone(),
            "/agents/name/typed/rpc".to_owned(),
            json!({"id": 3, "method": "task/create", "params": {"name": "untyped-by-name"}}),
        ),
        (
            reqwest::Method::PUT,
            format!("/tasks/{task}"),
            json!({"task_metadata": {"changed": true}}),
        ),
        (
            post.clone(),
            "/messages".to_owned(),
            json!({"task_id": task, "content": {"type": "text", "author": "agent", "content": "x"}}),
        ),
        (
            post.clone(),
            "/agents/register-build".to_owned(),
            json!({"name": "untyped-agent", "description": "typed"}),
        ),
        // Last: the task is final afterwards.
        (
            post.clone(),
            format!("/tasks/{task}/cancel"),
            json!({"reason": "typed wrong"}),
        ),
    ];
    for (method, path, body) in &routes {
        for ct in [
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
            None,
        ] {
            let (status, v) = send(method.clone(), path, ct, &body.to_string());
            assert_eq!(status, 415, "{method} {path} as {ct:?}: {v}");
            assert_eq!(v["error"], "unsupported_media_type", "{v}");
        }
    }
    // Nothing changed.
    assert_eq!(s.get(&agentex(&s, "/tasks/name/untyped")).0, 404);
    assert_eq!(s.get(&agentex(&s, "/tasks/name/untyped-by-name")).0, 404);
    assert_eq!(s.get(&agentex(&s, "/agents/name/untyped-agent")).0, 404);
    let (_, t) = s.get(&agentex(&s, &format!("/tasks/{task}")));
    assert_eq!(t["status"], "RUNNING", "{t}");
    assert_eq!(t["task_metadata"].get("changed"), None, "{t}");
    let (_, messages) = s.get(&agentex(&s, &format!("/messages?task_id={task}")));
    assert_eq!(messages, json!([]));
    // An optional body may be left out, with or without a type; a JSON type with a body is fine.
    let (status, v) = send(post.clone(), &format!("/tasks/{task}/interrupt"), None, "");
    assert_eq!(status, 200, "{v}");
    let (status, v) = send(
        post.clone(),
        &format!("/tasks/{task}/interrupt"),
        Some("application/json"),
        "",
    );
    assert_eq!(status, 200, "{v}");
    for (method, path, body) in &routes {
        let (status, v) = send(
            method.clone(),
            path,
            Some("application/json; charset=utf-8"),
            &body.to_string(),
        );
        assert_eq!(status, 200, "{method} {path}: {v}");
    }
}

/// Get-or-create by name under contention: eight calls at once make one task, and every call
/// answers with it (on PostgreSQL the losers of the name's uniqueness rule find the winner's).
#[test]
fn concurrent_task_creates_by_name_make_one_task() {
    let s = Server::start();
    let agent = register(&s, "racing");
    let body = json!({"id": 1, "method": "task/create", "params": {"name": "the-one"}});
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| rpc(&s, &agent, &body)))
            .collect();
        calls.into_iter().map(|c| c.join().expect("call")).collect()
    });
    let ids: std::collections::BTreeSet<&str> = answers
        .iter()
        .map(|a| a["result"]["id"].as_str().unwrap_or_else(|| panic!("{a}")))
        .collect();
    assert_eq!(ids.len(), 1, "{answers:?}");
    let (_, tasks) = s.get(&agentex(&s, &format!("/tasks?agent_id={agent}")));
    assert_eq!(tasks.as_array().map(Vec::len), Some(1), "{tasks}");
}

#[test]
fn http_errors_around_the_rpc() {
    let s = Server::start();
    let agent = register(&s, "rpc-http");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "task/create", "params": {}});
    // An agent that is not there is a 404 of the route, not an RPC answer.
    let (status, v) = s.post(
        &agentex(&s, "/agents/01a230e0-0000-7000-8000-000000000000/rpc"),
        &call,
    );
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("agent_not_found"))
    );
    let (status, _) = s.post(&agentex(&s, "/agents/name/nobody/rpc"), &call);
    assert_eq!(status, 404);
    // No credential, a read-only credential.
    let anonymous = reqwest::blocking::Client::new();
    let res = anonymous
        .post(agentex(&s, &format!("/agents/{agent}/rpc")))
        .json(&call)
        .send()
        .expect("POST");
    assert_eq!(res.status().as_u16(), 401);
    let reader = common::sessiond_command()
        .args([
            "token",
            "create",
            "--user",
            common::OWNER_EMAIL,
            "--scope",
            "sessions:read",
            "--data-dir",
        ])
        .arg(&s.data_dir)
        .args(common::database_args(&s.data_dir))
        .output()
        .expect("token");
    let reader = String::from_utf8(reader.stdout)
        .expect("utf8")
        .trim()
        .to_owned();
    let res = anonymous
        .post(agentex(&s, &format!("/agents/{agent}/rpc")))
        .bearer_auth(&reader)
        .json(&call)
        .send()
        .expect("POST");
    assert_eq!(res.status().as_u16(), 403);
    let res = anonymous
        .get(agentex(&s, "/agents"))
        .bearer_auth(&reader)
        .send()
        .expect("GET");
    assert_eq!(res.status().as_u16(), 200);
    // A body over the limit.
    let big = format!(
        "{{\"method\": \"task/create\", \"params\": {{\"name\": \"{}\"}}}}",
        "x".repeat(33 * 1024 * 1024)
    );
    let (status, _, _) = rpc_raw(&s, &agent, &big);
    assert_eq!(status, 413);
    // A method the route does not have, and a route that does not exist.
    let res = s
        .http
        .get(agentex(&s, &format!("/agents/{agent}/rpc")))
        .send()
        .expect("GET");
    assert_eq!(res.status().as_u16(), 405);
    assert_eq!(res.headers()["allow"], "POST");
    let (status, v) = s.get(&agentex(&s, "/no/such/route"));
    assert_eq!((status, v["error"].as_str()), (404, Some("not_found")));
}

#[test]
fn conflicts_tell_retrying_clients_not_to() {
    let s = Server::start();
    let res = s
        .http
        .delete(agentex(&s, "/agents/name/root"))
        .send()
        .expect("DELETE");
    assert_eq!(res.status().as_u16(), 409);
    assert_eq!(res.headers()["x-should-retry"], "false");
}

/// Tasks are sessions: whatever `/agentex` did to them reads back through the Sessions API as
/// valid seed documents.
#[test]
fn tasks_are_sessions_that_satisfy_the_sessions_api_schemas() {
    let s = Server::start();
    let agent = register(&s, "schemas");
    let created = rpc(
        &s,
        &agent,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create",
            "params": {"name": "the task", "params": {"a": 1}}}),
    );
    let task = created["result"]["id"]
        .as_str()
        .expect("task id")
        .to_owned();
    assert_eq!(created["result"]["status"], "RUNNING");
    let detail = s.detail(&task);
    assert_schema(
        "GET_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json",
        &detail,
    );
    assert_eq!(detail["title"], "the task");
    assert_eq!(detail["turnStatus"], "complete", "no turn ran yet");
    assert_eq!(detail["agent"]["id"], agent);
    let answer = rpc(
        &s,
        &agent,
        &json!({"id": 2, "method": "message/send", "params": {"task_id": task,
            "content": {"type": "text", "author": "user", "content": "/tool look\n/reply done"}}}),
    );
    assert_eq!(answer["id"], 2);
    let messages = answer["result"].as_array().expect("messages");
    assert_eq!(messages.len(), 3, "{answer}");
    rpc(
        &s,
        &agent,
        &json!({"id": 3, "method": "event/send", "params": {"task_name": "the task",
            "content": {"type": "data", "author": "user", "data": {"k": "v"}}}}),
    );
    poll_until("the event's turn", Duration::from_secs(30), || {
        let h = s.history_all(&task);
        (h.iter()
            .filter(|e| e["event"]["type"] == "complete")
            .count()
            == 2)
            .then_some(())
    });
    let cancelled = rpc(
        &s,
        &agent,
        &json!({"id": 4, "method": "task/cancel", "params": {"task_id": task}}),
    );
    assert_eq!(cancelled["result"]["status"], "CANCELED");
    let history = s.history_all(&task);
    assert_known_events(history.iter().map(|e| &e["event"]));
    let prompts: Vec<&Value> = history
        .iter()
        .filter(|e| e["event"]["type"] == "prompt_submitted")
        .map(|e| &e["event"]["prompt"])
        .collect();
    assert_eq!(
        prompts,
        [&json!("/tool look\n/reply done"), &json!("{\"k\":\"v\"}")]
    );
    let (status, page) = s.get(&s.sessions_url(&format!("/{task}/history?limit=500")));
    assert_eq!(status, 200);
    assert_schema(
        "GET_v1_ws__workspaceSlug__agent_sessions__sessionId__history.response.json",
        &page,
    );
    assert_schema(
        "GET_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json",
        &s.detail(&task),
    );
    // The session list shows it too.
    let (_, list) = s.get(&s.sessions_url(""));
    assert_schema(
        "GET_v1_ws__workspaceSlug__agent_sessions.response.json",
        &list,
    );
    assert!(
        list["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .any(|x| x["id"] == task)
    );
    // The agent's default-session routes know nothing of it (tasks are not default chats).
    let (_, slug) = s.get(&agentex(&s, &format!("/agents/{agent}")));
    let (_, default) = s.get(&s.url(&format!(
        "/v1/ws/{WS}/agents/{}/sessions/default",
        slug["name"].as_str().expect("name")
    )));
    assert_eq!(default, json!({"session": null}));
}

/// `message/send` answers while the turn runs: blank keep-alive lines, then the one JSON line;
/// with `stream`, NDJSON lines of updates.
#[test]
fn rpc_answers_keep_the_connection_alive_and_stream_ndjson() {
    let s = Server::start_with_config("[stream]\nkeepalive_ms = 50\n");
    let agent = register(&s, "lines");
    let body = json!({"id": "k", "method": "message/send", "params": {
        "content": {"type": "text", "author": "user", "content": "/slow 300\n/reply one\n/reply two"}}});
    let (status, ct, text) = rpc_raw(&s, &agent, &body.to_string());
    assert_eq!(status, 200);
    assert!(ct.starts_with("application/json"));
    let blank = text.lines().take_while(|l| l.is_empty()).count();
    assert!(blank >= 1, "keep-alive lines came first: {text:?}");
    let v: Value = serde_json::from_str(&text).expect("the whole body is one JSON document");
    let replies: Vec<&Value> = v["result"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| &m["content"]["content"])
        .collect();
    assert_eq!(replies, [&json!("one"), &json!("two")]);

    let streamed = json!({"id": 5, "method": "message/send", "params": {"stream": true,
        "content": {"type": "text", "author": "user", "content": "/stream 3"}}});
    let res = s
        .http
        .post(agentex(&s, &format!("/agents/{agent}/rpc")))
        .json(&streamed)
        .send()
        .expect("POST");
    assert_eq!(res.status().as_u16(), 200);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .expect("ct")
            .starts_with("application/x-ndjson")
    );
    let mut kinds = Vec::new();
    let mut deltas = String::new();
    let mut done = Value::Null;
    for line in BufReader::new(res).lines() {
        let line = line.expect("line");
        if line.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(&line).expect("each line is JSON");
        assert_eq!((v["jsonrpc"].as_str(), &v["id"]), (Some("2.0"), &json!(5)));
        assert!(v.get("error").is_none(), "{v}");
        let u = &v["result"];
        kinds.push(u["type"].as_str().expect("type").to_owned());
        if let Some(d) = u["delta"]["text_delta"].as_str() {
            deltas.push_str(d);
        }
        if u["type"] == "done" {
            done = u["parent_task_message"].clone();
        }
    }
    assert_eq!(kinds, ["start", "delta", "delta", "delta", "done"]);
    assert_eq!(deltas, "chunk 1 chunk 2 chunk 3 ");
    assert_eq!(done["content"]["content"], deltas);
    let id = done["id"].as_str().expect("message id");
    let (status, stored) = s.get(&agentex(&s, &format!("/messages/{id}")));
    assert_eq!(status, 200);
    assert_eq!(stored, done, "the streamed message is the stored one");
}

/// The task stream is SSE: `connected` first, updates as they happen, comments as keep-alives.
#[test]
fn the_task_stream_is_server_sent_events() {
    let s = Server::start_with_config("[stream]\nkeepalive_ms = 50\n");
    let agent = register(&s, "sse");
    let created = rpc(&s, &agent, &json!({"method": "task/create", "params": {}}));
    let task = created["result"]["id"].as_str().expect("id").to_owned();
    let res = s
        .http
        .get(agentex(&s, &format!("/tasks/{task}/stream")))
        .send()
        .expect("GET");
    assert_eq!(res.status().as_u16(), 200);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    assert_eq!(res.headers()["x-accel-buffering"], "no");
    let mut lines = BufReader::new(res).lines();
    let first = lines.next().expect("line").expect("line");
    assert_eq!(
        serde_json::from_str::<Value>(first.strip_prefix("data: ").expect("data")).expect("JSON"),
        json!({"type": "connected", "taskId": task})
    );
    let mut comments = 0;
    for line in lines.by_ref() {
        let line = line.expect("line");
        if line.starts_with(':') {
            comments += 1;
            if comments == 2 {
                break;
            }
        }
    }
    assert_eq!(comments, 2, "keep-alive comments while nothing happens");
    rpc(
        &s,
        &agent,
        &json!({"method": "task/cancel", "params": {"task_id": task}}),
    );
    let mut last = Value::Null;
    for line in lines {
        let line = line.expect("line");
        if let Some(data) = line.strip_prefix("data: ") {
            last = serde_json::from_str(data).expect("JSON");
        }
    }
    assert_eq!(
        last["type"], "task_updated",
        "the stream ends on the final status"
    );
    assert_eq!(last["task"]["status"], "CANCELED");
}

/// `task/cancel` of a session that waits without a running turn (asleep, asking, a paused Job)
/// ends it at once: nothing wakes it, answers it or leaves it looking busy.
#[test]
fn cancelling_a_waiting_session_ends_it_at_once() {
    let s = Server::start();
    let (_, root) = s.get(&agentex(&s, "/agents/name/root"));
    let root = root["id"].as_str().expect("root id").to_owned();
    let job = json!({ "name": "pickjob", "prompt": "p", "states": [
        { "name": "pick", "prompt": "/ask Which? | x | y" },
        { "name": "finish", "prompt": "/reply finished" }
    ]});
    for (body, waiting) in [
        (json!({"prompt": "/sleep 600000"}), "sleep"),
        (json!({"prompt": "/ask Which? | x | y"}), "ask"),
        (json!({"prompt": "go", "mode": job}), "ask"),
    ] {
        let id = common::id_of(&s.create(body.clone()));
        let before = poll_until("the turn to pause", Duration::from_secs(30), || {
            let d = s.detail(&id);
            (d["turnStatus"] == waiting).then_some(d)
        });
        assert_ne!(before["bucket"], "done", "{body}: {before}");
        let cancelled = rpc(
            &s,
            &root,
            &json!({"method": "task/cancel", "params": {"task_id": id}}),
        );
        assert_eq!(cancelled["result"]["status"], "CANCELED", "{cancelled}");
        let d = s.detail(&id);
        assert_schema(
            "GET_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json",
            &d,
        );
        assert_eq!(
            (d["turnStatus"].as_str(), d["bucket"].as_str()),
            (Some("interrupted"), Some("done")),
            "{body}: {d}"
        );
        if let Some(m) = d.get("machine") {
            assert_eq!(m["activity"], "idle", "{d}");
        }
        let (status, v) = s.post(
            &s.sessions_url(&format!("/{id}/answer")),
            &json!({"answer": "x"}),
        );
        // A cancelled task takes no input, an answer included: the refusal says so.
        assert_eq!(
            (status, v["error"].as_str()),
            (409, Some("task_closed")),
            "{body}"
        );
        let history = s.history_all(&id);
        assert_known_events(history.iter().map(|e| &e["event"]));
    }
}

/// A task is a `/v2` Session record too, with the credential's provenance; cancelling it records
/// who stopped it, and a `/v2` handoff closes it (`COMPLETED`, no more messages).
#[test]
fn tasks_are_session_records_with_the_credentials_provenance() {
    let s = Server::start();
    let agent = register(&s, "records");
    let created = rpc(
        &s,
        &agent,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create", "params": {"name": "kept"}}),
    );
    let task = created["result"]["id"]
        .as_str()
        .expect("task id")
        .to_owned();
    let r = hast::record(&s, &task);
    assert_eq!(r["source"], "api");
    // An API key is `sd_<24-char public id>_<secret>`.
    assert_eq!(
        r["attribution"],
        json!({"type": "api_key", "id": &s.token[3..27], "user": null})
    );
    let answer = rpc(
        &s,
        &agent,
        &json!({"id": 2, "method": "message/send", "params": {"task_id": task,
            "content": {"type": "text", "author": "user", "content": "/reply hi"}}}),
    );
    assert_eq!(answer["result"][0]["content"]["content"], "hi", "{answer}");
    let r = hast::record(&s, &task);
    assert_eq!(r["status"], "completed", "{r}");
    assert!(r["last_message_at"].is_string(), "{r}");
    // Cancelling a running turn stops it, and the record says by whom.
    rpc(
        &s,
        &agent,
        &json!({"id": 21, "method": "event/send", "params": {"task_id": task,
            "content": {"type": "text", "author": "user", "content": "/slow 300\n/stream 100"}}}),
    );
    poll_until("the slow turn", Duration::from_secs(20), || {
        (hast::record(&s, &task)["status"] == "running").then_some(())
    });
    let cancelled = rpc(
        &s,
        &agent,
        &json!({"id": 3, "method": "task/cancel", "params": {"task_id": task}}),
    );
    assert_eq!(cancelled["result"]["status"], "CANCELED");
    let r = poll_until("the record's stop", Duration::from_secs(20), || {
        let r = hast::record(&s, &task);
        (r["status"] == "stopped").then_some(r)
    });
    assert!(r["stopped"]["at"].is_string(), "{r}");
    assert!(
        r["status_reason"]
            .as_str()
            .is_some_and(|m| m.starts_with("interrupted by ")),
        "{r}"
    );

    // A handoff on /v2 closes the task's session: the task is done and takes no more messages.
    let open = rpc(
        &s,
        &agent,
        &json!({"id": 4, "method": "task/create", "params": {"name": "handed"}}),
    );
    let handed = open["result"]["id"].as_str().expect("task id").to_owned();
    let next = hast::create_v2(
        &s,
        json!({"prompt": "take over", "parent": {"kind": "handoff", "session_id": handed}}),
    );
    let (status, t) = s.get(&agentex(&s, &format!("/tasks/{handed}")));
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["status"], "COMPLETED", "{t}");
    assert_eq!(
        t["status_reason"],
        format!("handed off to {}", next["id"].as_str().expect("id"))
    );
    let refused = rpc(
        &s,
        &agent,
        &json!({"id": 5, "method": "message/send", "params": {"task_id": handed,
            "content": {"type": "text", "author": "user", "content": "still there?"}}}),
    );
    assert_rpc_error(&refused, -32000, &json!(5));
    // The reason is the handoff: the code every family answers it with.
    assert_eq!(
        refused["error"]["data"]["code"], "session_closed",
        "{refused}"
    );
    let (_, listed) = s.get(&agentex(&s, "/tasks?status=COMPLETED"));
    assert!(
        listed
            .as_array()
            .expect("tasks")
            .iter()
            .any(|x| x["id"] == handed.as_str()),
        "{listed}"
    );
}

/// An agent message opened IN_PROGRESS and then updated is one message whose content is the
/// latest revision; each revision is a timeline event of its own (nothing is rewritten), and every
/// family reads the final text.
#[test]
fn updates_revise_messages_by_appending_to_the_timeline() {
    let s = Server::start();
    let agent = register(&s, "reviser");
    let created = rpc(
        &s,
        &agent,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create", "params": {"name": "rev"}}),
    );
    let task = created["result"]["id"]
        .as_str()
        .expect("task id")
        .to_owned();
    let agent_text = |t: &str| json!({"type": "text", "author": "agent", "content": t});

    // A message opened while it is being written, still without text.
    let (status, opened) = s.post(
        &agentex(&s, "/messages"),
        &json!({"task_id": task, "content": agent_text(""), "streaming_status": "IN_PROGRESS"}),
    );
    assert_eq!(status, 200, "{opened}");
    assert_eq!(opened["streaming_status"], "IN_PROGRESS");
    assert_eq!(opened["content"]["content"], "");
    let id = opened["id"].as_str().expect("id").to_owned();
    let (_, listed) = s.get(&agentex(&s, &format!("/messages?task_id={task}")));
    assert_eq!(listed, json!([opened]), "an open message is listed");
    let open_only = r#"[{"streaming_status":"IN_PROGRESS"}]"#;
    let filtered = |f: &str| {
        let url = reqwest::Url::parse_with_params(
            &agentex(&s, "/messages"),
            &[("task_id", task.as_str()), ("filters", f)],
        )
        .expect("url");
        s.get(url.as_str()).1
    };
    assert_eq!(filtered(open_only), json!([opened]));

    // Its final content and DONE; the task stream shows it whole, under the message's id.
    let res = s
        .http
        .get(agentex(&s, &format!("/tasks/{task}/stream")))
        .send()
        .expect("GET stream");
    let mut lines = BufReader::new(res).lines();
    let first = lines.next().expect("line").expect("line");
    assert!(first.contains("connected"), "{first}");
    let (status, done) = s.put(
        &agentex(&s, &format!("/messages/{id}")),
        &json!({"task_id": task, "content": agent_text("all done"), "streaming_status": "DONE"}),
    );
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["id"], id, "the id stays");
    assert_eq!(done["streaming_status"], "DONE");
    assert_eq!(done["content"]["content"], "all done");
    assert_eq!(done["created_at"], opened["created_at"]);
    let (_, one) = s.get(&agentex(&s, &format!("/messages/{id}")));
    assert_eq!(one, done);
    let update: Value = lines
        .by_ref()
        .map_while(|l| l.ok())
        .find_map(|l| {
            l.strip_prefix("data: ")
                .and_then(|d| serde_json::from_str(d).ok())
        })
        .expect("an update");
    assert_eq!(update["type"], "full", "{update}");
    assert_eq!(update["parent_task_message"], done);
    drop(lines);
    let (_, listed) = s.get(&agentex(&s, &format!("/messages?task_id={task}")));
    assert_eq!(
        listed,
        json!([done]),
        "one message, with its latest content"
    );
    let (_, page) = s.get(&agentex(&s, &format!("/messages/paginated?task_id={task}")));
    assert_eq!(page["data"], json!([done]));
    let (_, by_rpc) = s.get(&agentex(&s, &format!("/tasks/{task}")));
    assert_eq!(by_rpc["id"], task);

    // The timeline kept both: the notice that opened the message, then the agent's words.
    let history = s.history_all(&task);
    assert_known_events(history.iter().map(|e| &e["event"]));
    let said: Vec<&Value> = history
        .iter()
        .filter(|e| e["event"]["type"] == "agent_message")
        .map(|e| &e["event"]["message"])
        .collect();
    assert_eq!(said, [&json!("all done")]);
    let (status, page) = s.get(&s.sessions_url(&format!("/{task}/history?limit=500")));
    assert_eq!(status, 200);
    assert_schema(
        "GET_v1_ws__workspaceSlug__agent_sessions__sessionId__history.response.json",
        &page,
    );
    let (_, v2) = s.get(&s.url(&format!("/v2/sessions/{task}/events?limit=500")));
    let texts: Vec<&Value> = v2["events"]
        .as_array()
        .expect("v2 events")
        .iter()
        .filter(|e| e["type"] == "message.completed")
        .map(|e| &e["data"]["text"])
        .collect();
    assert_eq!(texts, [&json!("all done")], "{v2}");

    // A second revision without a status keeps DONE and supersedes the first.
    let (status, again) = s.put(
        &agentex(&s, &format!("/messages/{id}")),
        &json!({"task_id": task, "content": agent_text("all done, really")}),
    );
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (&again["content"]["content"], &again["streaming_status"]),
        (&json!("all done, really"), &json!("DONE"))
    );

    // Batch: two messages added, both revised in one call.
    let (status, added) = s.post(
        &agentex(&s, "/messages/batch"),
        &json!({"task_id": task, "contents": [agent_text("one"), agent_text("two")]}),
    );
    assert_eq!(status, 200, "{added}");
    let (a, b) = (
        added[0]["id"].as_str().expect("id").to_owned(),
        added[1]["id"].as_str().expect("id").to_owned(),
    );
    let (status, revised) = s.put(
        &agentex(&s, "/messages/batch"),
        &json!({"task_id": task, "updates": {a.clone(): agent_text("one!"), b.clone(): agent_text("two!")}}),
    );
    assert_eq!(status, 200, "{revised}");
    let mut got: Vec<(String, String)> = revised
        .as_array()
        .expect("list")
        .iter()
        .map(|m| {
            (
                m["id"].as_str().expect("id").to_owned(),
                m["content"]["content"].as_str().expect("text").to_owned(),
            )
        })
        .collect();
    got.sort();
    let mut want = vec![
        (a.clone(), "one!".to_owned()),
        (b.clone(), "two!".to_owned()),
    ];
    want.sort();
    assert_eq!(got, want);
    let (_, listed) = s.get(&agentex(
        &s,
        &format!("/messages?task_id={task}&order_direction=asc"),
    ));
    let texts: Vec<&Value> = listed
        .as_array()
        .expect("list")
        .iter()
        .map(|m| &m["content"]["content"])
        .collect();
    assert_eq!(
        texts,
        [&json!("all done, really"), &json!("one!"), &json!("two!")]
    );

    // Bad input changes nothing.
    let before = s.history_all(&task).len();
    let (_, user) = s.post(
        &agentex(&s, "/messages"),
        &json!({"task_id": task, "content": {"type": "text", "author": "user", "content": "hi"}}),
    );
    let user_id = user["id"].as_str().expect("id").to_owned();
    let before = before + 1;
    let other = rpc(
        &s,
        &agent,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "task/create", "params": {"name": "other"}}),
    );
    let other_task = other["result"]["id"].as_str().expect("id").to_owned();
    let put = |path: &str, body: Value| s.put(&agentex(&s, path), &body);
    let msg = format!("/messages/{id}");
    for (path, body, code) in [
        (
            format!("/messages/{user_id}"),
            json!({"task_id": task, "content": agent_text("x")}),
            400,
        ),
        (
            msg.clone(),
            json!({"task_id": task, "content": {"type": "text", "author": "user", "content": "x"}}),
            400,
        ),
        (
            msg.clone(),
            json!({"task_id": task, "content": {"type": "data", "author": "agent", "data": {}}}),
            400,
        ),
        (
            msg.clone(),
            json!({"task_id": task, "content": agent_text("x"), "streaming_status": "LATER"}),
            400,
        ),
        (
            msg.clone(),
            json!({"task_id": task, "content": agent_text("x"), "extra": 1}),
            400,
        ),
        (msg.clone(), json!({"content": agent_text("x")}), 400),
        (
            msg.clone(),
            json!({"task_id": other_task, "content": agent_text("x")}),
            404,
        ),
        (
            format!("/messages/{task}.99999"),
            json!({"task_id": task, "content": agent_text("x")}),
            404,
        ),
        (
            "/messages/nonsense".into(),
            json!({"task_id": task, "content": agent_text("x")}),
            404,
        ),
        (
            "/messages/batch".into(),
            json!({"task_id": task, "updates": {a.clone(): agent_text("x"), user_id.clone(): agent_text("y")}}),
            400,
        ),
        (
            "/messages/batch".into(),
            json!({"task_id": task, "updates": {a.clone(): agent_text("x"), format!("{task}.99999"): agent_text("y")}}),
            404,
        ),
        (
            "/messages/batch".into(),
            json!({"task_id": task, "updates": {a.clone(): {"author": "agent"}}}),
            400,
        ),
        (
            "/messages/batch".into(),
            json!({"task_id": task, "updates": []}),
            400,
        ),
    ] {
        let (status, v) = put(&path, body.clone());
        assert_eq!(status, code, "PUT {path} {body}: {v}");
        assert!(v["error"].is_string(), "{v}");
    }
    let (status, v) = s.post(
        &agentex(&s, "/messages"),
        &json!({"task_id": task, "content": {"type": "text", "author": "user", "content": "x"}, "streaming_status": "IN_PROGRESS"}),
    );
    assert_eq!(status, 400, "{v}");
    // A batch is added whole or not at all: the agent's first message is not kept when the
    // second, a user's, attaches a file the drive does not have.
    let (status, v) = s.post(
        &agentex(&s, "/messages/batch"),
        &json!({"task_id": task, "contents": [
            agent_text("kept?"),
            {"type": "text", "author": "user", "content": "see the file",
             "attachments": [{"file_id": "missing.txt", "name": "missing.txt", "size": 3, "type": "text/plain"}]},
        ]}),
    );
    assert_eq!(status, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("contents/1/attachments/0/path")),
        "{v}"
    );
    assert_eq!(s.history_all(&task).len(), before, "nothing was written");
    let (_, still) = s.get(&agentex(&s, &format!("/messages/{a}")));
    assert_eq!(still["content"]["content"], "one!");

    // Another workspace does not see the message at all.
    let key = common::workspace_member_key(&s.data_dir, "elsewhere", "member");
    let stranger = reqwest::blocking::Client::new();
    let res = stranger
        .put(agentex(&s, &msg))
        .bearer_auth(&key)
        .json(&json!({"task_id": task, "content": agent_text("mine now")}))
        .send()
        .expect("PUT");
    assert_eq!(res.status().as_u16(), 404);
    let res = stranger
        .put(agentex(&s, "/messages/batch"))
        .bearer_auth(&key)
        .json(&json!({"task_id": task, "updates": {a.clone(): agent_text("mine now")}}))
        .send()
        .expect("PUT");
    assert_eq!(res.status().as_u16(), 404);
    assert_eq!(s.history_all(&task).len(), before, "nothing was written");
}
