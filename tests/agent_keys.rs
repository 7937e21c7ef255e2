//! What an issued agent key (`x-agent-api-key`) may call, tested as the README writes it.
//!
//! The README's table "What an agent key may call" has one row per `/agentex` route with the
//! status an agent key gets for its own agent's object, another agent's of the same workspace and
//! another workspace's. This file reads that table, checks that every `/agentex` operation of
//! `/openapi.json` has a row (a new route without one fails here), and sends each row's request
//! with agent A's key: for A's object, for agent B's (same workspace) and for agent C's (another
//! workspace), and for made-up ids, which must answer exactly as C's. A refused write must leave
//! its target as it was. Every credentialed route of the other families answers an agent key 403.
//!
//! Beside it: the per-workspace `sequence_id` of AgentEx events, and references to things the
//! caller cannot see (`agent_id` of a registration, `task_id` of a state, `parent_id` of a span),
//! each answered alike for another workspace's id and a random one.

mod common;
// Only the fake's answers are used here, not its record of requests.
#[allow(dead_code)]
#[path = "common/fake_acp.rs"]
mod fake_acp;

use std::collections::BTreeSet;

use common::{Server, http_builder, new_uuid};
use reqwest::blocking::Client;
use serde_json::{Value, json};

const CONFIG: &str = "[policy]\nacp_hosts = [\"127.0.0.1\"]\n";

/// The second workspace of these tests.
const OTHER_WS: &str = "elsewhere";

// ---------------------------------------------------------------------------------------------
// The README's table

#[derive(Debug, Clone)]
struct Row {
    method: String,
    route: String,
    own: u16,
    other_agent: u16,
    other_workspace: u16,
}

/// The rows of the README's table (the one under "What an agent key may call").
fn readme_rows() -> Vec<Row> {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let section = readme
        .split("#### What an agent key may call")
        .nth(1)
        .expect("the README has the agent key section");
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in section.lines() {
        if line.starts_with("| method | route (under `/agentex`) |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`'))
            .collect();
        assert_eq!(cells.len(), 5, "a row of five cells: {line}");
        let status = |c: &str| -> u16 { c.parse().unwrap_or_else(|_| panic!("status {c:?}")) };
        rows.push(Row {
            method: cells[0].to_owned(),
            route: cells[1].to_owned(),
            own: status(cells[2]),
            other_agent: status(cells[3]),
            other_workspace: status(cells[4]),
        });
    }
    assert!(rows.len() > 50, "the table was read: {} rows", rows.len());
    rows
}

/// `(METHOD, path)` of every operation of the server's OpenAPI document.
fn operations(s: &Server) -> Vec<(String, String, Value)> {
    let (status, doc) = s.get(&s.url("/openapi.json"));
    assert_eq!(status, 200);
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                out.push((method.to_uppercase(), path.clone(), op.clone()));
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The parties and their objects

/// A client sending `Authorization: Bearer <key>`.
fn api_client(key: &str) -> Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().expect("header"),
    );
    http_builder()
        .default_headers(headers)
        .build()
        .expect("client")
}

/// A client sending only `x-agent-api-key: <key>`.
fn agent_client(key: &str) -> Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("x-agent-api-key", key.parse().expect("header"));
    http_builder()
        .default_headers(headers)
        .build()
        .expect("client")
}

fn send(c: &Client, method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = c.request(m, url);
    if let Some(b) = body {
        req = req.json(b);
    }
    let res = req.send().expect("request");
    let status = res.status().as_u16();
    let is_json = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    // An event stream that opened is not read: its status is the answer.
    if !is_json {
        return (status, Value::Null);
    }
    let text = res.text().unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A registered ACP agent, the API key of its workspace and the agent key it was issued.
struct Party {
    base: String,
    api: Client,
    id: String,
    name: String,
    agent: Client,
}

impl Party {
    fn register(s: &Server, api_key: &str, acp_url: &str) -> Party {
        let api = api_client(api_key);
        let name = format!("acp-{}", &new_uuid()[..8]);
        let (status, v) = send(
            &api,
            "POST",
            &s.url("/agentex/agents/register"),
            Some(&json!({"name": name, "acp_url": acp_url, "acp_type": "sync"})),
        );
        assert_eq!(status, 200, "{v}");
        let key = v["agent_api_key"].as_str().expect("agent key").to_owned();
        Party {
            base: s.url("/agentex"),
            api,
            id: v["id"].as_str().expect("id").to_owned(),
            name,
            agent: agent_client(&key),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with the workspace's API key, expected to succeed.
    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, v) = send(&self.api, method, &self.url(path), body.as_ref());
        assert!(
            (200..300).contains(&status),
            "{method} {path}: {status} {v}"
        );
        v
    }

    fn rpc(&self, method: &str, params: Value) -> Value {
        let v = self.call(
            "POST",
            &format!("/agents/{}/rpc", self.id),
            Some(json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})),
        );
        assert!(v.get("error").is_none_or(Value::is_null), "{v}");
        v["result"].clone()
    }

    /// A task of this agent with one agent message, a state (unless `state` is false: a task has
    /// one state per agent), a span and (with `full`) an event and a schedule.
    fn objects(&self, full: bool) -> Objects {
        self.objects_with(full, true)
    }

    fn objects_with(&self, full: bool, with_state: bool) -> Objects {
        let task_name = format!("task-{}", &new_uuid()[..8]);
        let task = self.rpc("task/create", json!({"name": task_name}));
        let task_id = task["id"].as_str().expect("task id").to_owned();
        let message = self.call(
            "POST",
            "/messages",
            Some(json!({"task_id": task_id,
                "content": {"type": "text", "author": "agent", "content": "hello"}})),
        );
        let state = if with_state {
            self.call(
                "POST",
                "/states",
                Some(json!({"task_id": task_id, "agent_id": self.id, "state": {"k": 1}})),
            )
        } else {
            json!({"id": new_uuid()})
        };
        let span = self.call(
            "POST",
            "/spans",
            Some(json!({"task_id": task_id, "name": "s", "trace_id": task_id,
                "start_time": "2026-01-01T00:00:00Z"})),
        );
        let mut o = Objects {
            agent_id: self.id.clone(),
            agent_name: self.name.clone(),
            task_id: task_id.clone(),
            task_name,
            message_id: message["id"].as_str().expect("message id").to_owned(),
            state_id: state["id"].as_str().expect("state id").to_owned(),
            span_id: span["id"].as_str().expect("span id").to_owned(),
            event_id: new_uuid(),
            schedule_id: new_uuid(),
            schedule_name: format!("sched-{}", &new_uuid()[..8]),
        };
        if full {
            let event = self.rpc(
                "event/send",
                json!({"task_id": task_id,
                    "content": {"type": "text", "author": "user", "content": "ping"}}),
            );
            o.event_id = event["id"].as_str().expect("event id").to_owned();
            let schedule = self.call(
                "POST",
                &format!("/agents/{}/schedules", self.id),
                Some(
                    json!({"name": o.schedule_name, "interval_seconds": 3600, "paused": true,
                    "initial_input": {"type": "text", "author": "user", "content": "tick"}}),
                ),
            );
            o.schedule_id = schedule["id"].as_str().expect("schedule id").to_owned();
        }
        o
    }

    /// What the owner sees of a task: its status and how many messages it has (404: gone).
    fn task_fingerprint(&self, task_id: &str) -> (u16, Value, usize) {
        let (status, task) = send(
            &self.api,
            "GET",
            &self.url(&format!("/tasks/{task_id}")),
            None,
        );
        let (_, messages) = send(
            &self.api,
            "GET",
            &self.url(&format!("/messages?task_id={task_id}")),
            None,
        );
        (
            status,
            task["status"].clone(),
            messages.as_array().map_or(0, Vec::len),
        )
    }
}

/// The ids and names a route's path and body are made of.
#[derive(Debug, Clone)]
struct Objects {
    agent_id: String,
    agent_name: String,
    task_id: String,
    task_name: String,
    message_id: String,
    state_id: String,
    span_id: String,
    event_id: String,
    schedule_id: String,
    schedule_name: String,
}

impl Objects {
    /// Ids and names nobody has.
    fn made_up() -> Objects {
        Objects {
            agent_id: new_uuid(),
            agent_name: format!("nobody-{}", &new_uuid()[..8]),
            task_id: new_uuid(),
            task_name: format!("nothing-{}", &new_uuid()[..8]),
            message_id: format!("{}.2", new_uuid()),
            state_id: new_uuid(),
            span_id: new_uuid(),
            event_id: new_uuid(),
            schedule_id: new_uuid(),
            schedule_name: format!("never-{}", &new_uuid()[..8]),
        }
    }

    /// The path (with query) and body of `method route` about these objects.
    fn request(&self, method: &str, route: &str, acp_url: &str) -> (String, Option<Value>) {
        let path = route
            .replace("{agent_id}", &self.agent_id)
            .replace("{agent_name}", &self.agent_name)
            .replace("{task_id}", &self.task_id)
            .replace("{task_name}", &self.task_name)
            .replace("{message_id}", &self.message_id)
            .replace("{state_id}", &self.state_id)
            .replace("{span_id}", &self.span_id)
            .replace("{event_id}", &self.event_id)
            .replace("{tracker_id}", &self.task_id)
            .replace("{schedule_id}", &self.schedule_id)
            .replace("{name}", &self.schedule_name)
            .replace("{deployment_id}", &new_uuid())
            .replace("{query_name}", "status");
        let task = &self.task_id;
        let text = |t: &str| json!({"type": "text", "author": "agent", "content": t});
        let query = match (method, route) {
            ("GET", "/events") => format!("?task_id={task}&agent_id={}", self.agent_id),
            ("GET", "/messages" | "/messages/paginated" | "/spans" | "/states" | "/tracker") => {
                format!("?task_id={task}")
            }
            _ => String::new(),
        };
        let body = match (method, route) {
            ("GET" | "DELETE", _) => None,
            ("POST", "/agents/register") => Some(json!({"name": self.agent_name,
                "acp_url": acp_url, "acp_type": "sync"})),
            ("POST", "/messages") => Some(json!({"task_id": task, "content": text("more")})),
            ("POST", "/messages/batch") => {
                Some(json!({"task_id": task, "contents": [text("one"), text("two")]}))
            }
            ("PUT", "/messages/batch") => Some(json!({"task_id": task,
                "updates": {self.message_id.clone(): text("revised")}})),
            ("PUT", "/messages/{message_id}") => {
                Some(json!({"task_id": task, "content": text("revised")}))
            }
            ("POST", "/spans") => Some(json!({"task_id": task, "name": "child",
                "trace_id": task, "start_time": "2026-01-01T00:00:01Z"})),
            ("PATCH", "/spans/{span_id}") => Some(json!({"end_time": "2026-01-01T00:00:02Z"})),
            ("POST", "/states") => {
                Some(json!({"task_id": task, "agent_id": self.agent_id, "state": {"k": 2}}))
            }
            ("PUT", "/states/{state_id}") => Some(json!({"state": {"k": 3}})),
            ("PUT", "/tasks/{task_id}" | "/tasks/name/{task_name}") => {
                Some(json!({"task_metadata": {"seen": true}}))
            }
            ("PUT", "/tracker/{tracker_id}") => Some(json!({"status": "processing"})),
            (
                "POST",
                "/checkpoints/list" | "/checkpoints/get-tuple" | "/checkpoints/delete-thread",
            ) => Some(json!({"thread_id": task})),
            ("POST", "/checkpoints/put") => Some(json!({"thread_id": task,
                "checkpoint_id": "1f0-0001", "checkpoint": {"v": 4}, "metadata": {}})),
            ("POST", "/checkpoints/put-writes") => Some(json!({"thread_id": task,
                "checkpoint_id": "1f0-0001", "writes": [{"task_id": "t", "idx": 0,
                "channel": "c", "blob": "eA=="}]})),
            _ => Some(json!({})),
        };
        (format!("{path}{query}"), body)
    }
}

struct World {
    s: Server,
    _fake: fake_acp::FakeAcp,
    acp_url: String,
    /// The agent whose key is used.
    a: Party,
    /// Another agent of the same workspace.
    b: Party,
    /// An agent of another workspace.
    c: Party,
}

fn world() -> World {
    let s = Server::start_with_config(CONFIG);
    let fake = fake_acp::FakeAcp::start();
    // Every turn an event starts is answered at once.
    for _ in 0..64 {
        fake.push(fake_acp::streamed("fine"));
    }
    let acp_url = fake.url.clone();
    let other_key = other_workspace_key(&s);
    World {
        a: Party::register(&s, &s.token, &acp_url),
        b: Party::register(&s, &s.token, &acp_url),
        c: Party::register(&s, &other_key, &acp_url),
        acp_url,
        _fake: fake,
        s,
    }
}

/// An API key (scope `sessions`) of a member of a second workspace.
fn other_workspace_key(s: &Server) -> String {
    common::workspace_member_key(&s.data_dir, OTHER_WS, "member")
}

// ---------------------------------------------------------------------------------------------
// The table, as written

#[test]
fn every_agentex_route_has_a_row_and_no_row_is_stale() {
    let s = Server::start();
    let documented: BTreeSet<(String, String)> = operations(&s)
        .into_iter()
        .filter_map(|(m, p, _)| p.strip_prefix("/agentex").map(|r| (m, r.to_owned())))
        .collect();
    let rows: BTreeSet<(String, String)> = readme_rows()
        .into_iter()
        .map(|r| (r.method, r.route))
        .collect();
    let missing: Vec<_> = documented.difference(&rows).collect();
    let stale: Vec<_> = rows.difference(&documented).collect();
    assert!(
        missing.is_empty(),
        "routes of /openapi.json without a row in the README's agent key table: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "rows of the README's agent key table that are no route: {stale:?}"
    );
}

#[test]
fn an_agent_key_gets_what_the_readme_table_says() {
    let w = world();
    let shared = [w.a.objects(true), w.b.objects(true), w.c.objects(true)];
    let mut failures = Vec::new();
    for row in readme_rows() {
        let reads = row.method == "GET";
        // A write gets objects of its own, so that rows do not change each other's.
        let fresh;
        let objects = if reads {
            &shared
        } else {
            let state = !(row.method == "POST" && row.route == "/states");
            fresh = [
                w.a.objects_with(false, state),
                w.b.objects_with(false, state),
                w.c.objects_with(false, state),
            ];
            &fresh
        };
        let owners = [&w.a, &w.b, &w.c];
        let expected = [row.own, row.other_agent, row.other_workspace];
        let mut answers = Vec::new();
        for (i, who) in ["own", "another agent's", "another workspace's"]
            .iter()
            .enumerate()
        {
            let before = owners[i].task_fingerprint(&objects[i].task_id);
            let (path, body) = objects[i].request(&row.method, &row.route, &w.acp_url);
            let (status, v) = send(&w.a.agent, &row.method, &w.a.url(&path), body.as_ref());
            if status != expected[i] {
                failures.push(format!(
                    "{} {} for {who} object: {status} (table: {}) {v}",
                    row.method, row.route, expected[i]
                ));
            }
            if i > 0 && !(200..300).contains(&status) && !reads {
                let after = owners[i].task_fingerprint(&objects[i].task_id);
                if after != before {
                    failures.push(format!(
                        "{} {} refused for {who} object changed it: {before:?} → {after:?}",
                        row.method, row.route
                    ));
                }
            }
            answers.push((status, v["error"].clone()));
        }
        // A made-up id answers exactly as another workspace's.
        let (path, body) = Objects::made_up().request(&row.method, &row.route, &w.acp_url);
        let (status, v) = send(&w.a.agent, &row.method, &w.a.url(&path), body.as_ref());
        if (status, v["error"].clone()) != answers[2] {
            failures.push(format!(
                "{} {}: a made-up id answers {status} {v}, another workspace's {:?}",
                row.method, row.route, answers[2]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_other_family_refuses_an_agent_key() {
    let w = world();
    let mut failures = Vec::new();
    for (method, path, op) in operations(&w.s) {
        if path.starts_with("/agentex") {
            continue;
        }
        let takes_api_key = op["security"]
            .as_array()
            .is_some_and(|s| s.iter().any(|r| r.get("apiKey").is_some()));
        if !takes_api_key {
            continue;
        }
        let url = w.s.url(
            &path
                .replace("{workspaceSlug}", "default")
                .replace("{sessionId}", &new_uuid())
                .replace("{agentSlug}", &w.a.name)
                .replace(['{', '}'], ""),
        );
        let body = (method != "GET" && method != "DELETE").then(|| json!({}));
        let (status, v) = send(&w.a.agent, &method, &url, body.as_ref());
        if status != 403 {
            failures.push(format!("{method} {path}: {status} {v}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Counters

/// `sequence_id`s of a task's events, as the agent platform lists them.
fn sequence_ids(p: &Party, task_id: &str) -> Vec<i64> {
    let events = p.call(
        "GET",
        &format!("/events?task_id={task_id}&agent_id={}", p.id),
        None,
    );
    events
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["sequence_id"].as_i64().expect("sequence_id"))
        .collect()
}

#[test]
fn event_sequence_ids_count_only_their_own_workspace() {
    let w = world();
    let send_event = |p: &Party, task: &str| -> Value {
        p.rpc(
            "event/send",
            json!({"task_id": task, "content": {"type": "text", "author": "user", "content": "e"}}),
        )
    };
    let a_task = w.a.rpc("task/create", json!({}))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let c_task = w.c.rpc("task/create", json!({}))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let first = send_event(&w.a, &a_task);
    // Meanwhile the other workspace sends three events.
    for _ in 0..3 {
        send_event(&w.c, &c_task);
    }
    let second = send_event(&w.a, &a_task);
    // And another agent of the first workspace one: that counts, it is this workspace's work.
    let b_task = w.b.rpc("task/create", json!({}))["id"]
        .as_str()
        .expect("id")
        .to_owned();
    send_event(&w.b, &b_task);
    let third = send_event(&w.a, &a_task);
    let seq = |e: &Value| e["sequence_id"].as_i64().expect("sequence_id");
    assert_eq!(
        seq(&second),
        seq(&first) + 1,
        "another workspace's events do not show in this one's sequence"
    );
    assert_eq!(seq(&third), seq(&second) + 2);
    assert_eq!(sequence_ids(&w.c, &c_task), vec![1, 2, 3]);
    assert_eq!(
        sequence_ids(&w.a, &a_task),
        vec![seq(&first), seq(&second), seq(&third)]
    );

    // The tracker still moves along the task's events, and the event list resumes after it.
    let first_id = first["id"].as_str().expect("id");
    let tracker = w.a.call(
        "PUT",
        &format!("/tracker/{a_task}"),
        Some(json!({"last_processed_event_id": first_id})),
    );
    assert_eq!(tracker["last_processed_event_id"], first_id);
    let after = w.a.call(
        "GET",
        &format!(
            "/events?task_id={a_task}&agent_id={}&last_processed_event_id={first_id}",
            w.a.id
        ),
        None,
    );
    let after: Vec<i64> = after
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["sequence_id"].as_i64().expect("sequence_id"))
        .collect();
    assert_eq!(after, vec![seq(&second), seq(&third)]);

    // A restart keeps counting where each workspace was.
    let mut w = w;
    w.s.stop();
    w.s.restart();
    let base = w.s.url("/agentex");
    w.a.base.clone_from(&base);
    w.c.base = base;
    let next = send_event(&w.a, &a_task);
    assert_eq!(seq(&next), seq(&third) + 1);
    let next = send_event(&w.c, &c_task);
    assert_eq!(seq(&next), 4);
}

// ---------------------------------------------------------------------------------------------
// References

/// Status and error code of an answer.
fn outcome((status, v): (u16, Value)) -> (u16, Value) {
    (status, v["error"].clone())
}

#[test]
fn references_to_what_the_caller_cannot_see_are_refused_alike() {
    let w = world();
    let a = w.a.objects(false);
    let c = w.c.objects(false);
    let url = |p: &str| w.a.url(p);

    // A registration naming a new agent with another workspace's agent id, or a made-up one:
    // the same 400 naming the field, and no agent is made.
    let register = |agent_id: &str, name: &str| {
        send(
            &w.a.api,
            "POST",
            &url("/agents/register"),
            Some(
                &json!({"name": name, "acp_url": w.acp_url, "acp_type": "sync",
                "agent_id": agent_id}),
            ),
        )
    };
    let (status, foreign) = register(&w.c.id, "fresh-one");
    assert_eq!(status, 400, "{foreign}");
    assert!(
        foreign["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("agent_id:")),
        "{foreign}"
    );
    let random = register(&new_uuid(), "fresh-two");
    assert_eq!(outcome(random), (400, foreign["error"].clone()));
    for name in ["fresh-one", "fresh-two"] {
        let (status, _) = send(&w.a.api, "GET", &url(&format!("/agents/name/{name}")), None);
        assert_eq!(status, 404, "no agent {name} was made");
    }
    // This workspace's other agent under a new name is a conflict, as before.
    let (status, v) = register(&w.b.id, "fresh-three");
    assert_eq!(status, 409, "{v}");

    // A state of another workspace's task, or of a made-up one: the same 400.
    let state = |task: &str| {
        outcome(send(
            &w.a.api,
            "POST",
            &url("/states"),
            Some(&json!({"task_id": task, "agent_id": w.a.id, "state": {}})),
        ))
    };
    let foreign = state(&c.task_id);
    assert_eq!(foreign.0, 400);
    assert_eq!(state(&new_uuid()), foreign);

    // A span's parent: one the caller sees must be of the same trace; one it cannot see
    // (another workspace's, another agent's for an agent key, none yet) is a forward reference,
    // all alike.
    let span = |client: &Client, parent: &str, trace: &str| {
        send(
            client,
            "POST",
            &url("/spans"),
            Some(
                &json!({"task_id": a.task_id, "name": "child", "trace_id": trace,
                "parent_id": parent, "start_time": "2026-01-01T00:00:01Z"}),
            ),
        )
    };
    let (status, v) = span(&w.a.api, &a.span_id, "another-trace");
    assert_eq!(status, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("parent_id:")),
        "{v}"
    );
    let (status, v) = span(&w.a.api, &a.span_id, &a.task_id);
    assert_eq!(status, 200, "{v}");
    let b = w.b.objects(false);
    for (client, parent) in [
        (&w.a.api, c.span_id.clone()),
        (&w.a.api, new_uuid()),
        (&w.a.agent, b.span_id.clone()),
        (&w.a.agent, c.span_id.clone()),
        (&w.a.agent, new_uuid()),
    ] {
        let (status, v) = span(client, &parent, "another-trace");
        assert_eq!(status, 200, "an unseen parent is a forward reference: {v}");
        assert_eq!(v["parent_id"], parent.as_str());
    }
    // A span is not its own parent.
    let (status, v) = send(
        &w.a.api,
        "POST",
        &url("/spans"),
        Some(&json!({"id": "self-parent", "name": "s", "trace_id": "t",
            "parent_id": "self-parent", "start_time": "2026-01-01T00:00:01Z"})),
    );
    assert_eq!(status, 400, "{v}");
}

#[test]
fn an_agent_key_registers_only_its_own_agent_again() {
    let w = world();
    let register = |name: &str| {
        send(
            &w.a.agent,
            "POST",
            &w.a.url("/agents/register"),
            Some(
                &json!({"name": name, "acp_url": w.acp_url, "acp_type": "async",
                "description": "again"}),
            ),
        )
    };
    let (status, v) = register(&w.a.name);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["id"], w.a.id.as_str());
    assert_eq!(v["acp_type"], "async");
    for name in [w.b.name.as_str(), w.c.name.as_str(), "brand-new"] {
        let (status, v) = register(name);
        assert_eq!(status, 403, "{name}: {v}");
    }
    let (status, _) = send(&w.a.api, "GET", &w.a.url("/agents/name/brand-new"), None);
    assert_eq!(status, 404);
    let (_, b) = send(
        &w.b.api,
        "GET",
        &w.b.url(&format!("/agents/{}", w.b.id)),
        None,
    );
    assert_eq!(b["acp_type"], "sync", "another agent is unchanged");
}
