//! LangGraph checkpoints (`/agentex/checkpoints`) and workflow queries
//! (`/agentex/tasks/{id}/query/{name}`) over HTTP, on both backends: LangGraph's checkpointer
//! contract (latest and by id, blobs by channel version, writes once per task and index, lists
//! newest first with `before`, namespaces and metadata filters, a thread deleted whole), a thread
//! as a task (another workspace's, another agent's or a random one is 404 and changes nothing),
//! and bad input refused with a 400 naming the field, writing nothing. The official client drives
//! the same routes in `tests/python/agentex_client/test_checkpoints.py`.

mod common;

use common::{Server, cli};
use serde_json::{Value, json};

/// The ACP hosts the agent-key test registers its (never called) agents on.
const CONFIG: &str = "[policy]\nacp_hosts = [\"127.0.0.1\"]\n";

fn agentex(s: &Server, path: &str) -> String {
    s.url(&format!("/agentex{path}"))
}

fn register(s: &Server, name: &str) -> String {
    let (status, v) = s.post(
        &agentex(s, "/agents/register-build"),
        &json!({"name": name, "description": "test"}),
    );
    assert_eq!(status, 200, "{v}");
    v["id"].as_str().expect("id").to_owned()
}

/// A new task of the agent, by RPC.
fn task(s: &Server, agent_id: &str) -> String {
    let (status, v) = s.post(
        &agentex(s, &format!("/agents/{agent_id}/rpc")),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create", "params": {}}),
    );
    assert_eq!(status, 200, "{v}");
    v["result"]["id"].as_str().expect("task id").to_owned()
}

fn call(c: &reqwest::blocking::Client, url: &str, body: &Value) -> (u16, Value) {
    let res = c.post(url).json(body).send().expect("POST");
    let status = res.status().as_u16();
    let text = res.text().expect("body");
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}: {text:?}"))
    };
    (status, v)
}

fn cp(s: &Server, op: &str, body: &Value) -> (u16, Value) {
    call(&s.http, &agentex(s, &format!("/checkpoints/{op}")), body)
}

fn ok(s: &Server, op: &str, body: &Value) -> Value {
    let (status, v) = cp(s, op, body);
    let want = if matches!(op, "put-writes" | "delete-thread") {
        204
    } else {
        200
    };
    assert_eq!(status, want, "{op} {body}: {v}");
    v
}

/// A checkpoint as LangGraph's checkpointer puts it: `channel_values` holds the inline values,
/// `channel_versions` names each channel's version, and the changed channels' blobs come along.
fn checkpoint(thread: &str, ns: &str, id: &str, parent: Option<&str>, step: i64) -> Value {
    json!({
        "thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": id,
        "parent_checkpoint_id": parent,
        "checkpoint": {"v": 4, "id": id, "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"counter": step},
            "channel_versions": {"messages": format!("{step:032}.0"), "counter": format!("{step:032}.0")},
            "versions_seen": {}},
        "metadata": {"source": if step == 0 { "input" } else { "loop" }, "step": step, "writes": {"node": {"n": step}}},
        "blobs": [
            {"channel": "messages", "version": format!("{step:032}.0"), "type": "msgpack", "blob": b64(&format!("messages at {step}"))},
            {"channel": "counter", "version": format!("{step:032}.0"), "type": "empty", "blob": null},
        ],
    })
}

fn b64(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn ids(list: &Value) -> Vec<&str> {
    list.as_array()
        .expect("a list")
        .iter()
        .map(|c| c["checkpoint_id"].as_str().expect("checkpoint_id"))
        .collect()
}

/// Rows of the three tables for one thread.
fn rows(s: &Server, thread: &str) -> [i64; 3] {
    ["agentex_checkpoints", "agentex_checkpoint_blobs", "agentex_checkpoint_writes"].map(|t| {
        let sql = format!(
            "SELECT count(*) FROM {t} WHERE session_pk = (SELECT pk FROM sessions WHERE id = '{thread}')"
        );
        s.db_value(&sql)
            .unwrap_or_default()
            .parse()
            .expect("a count")
    })
}

#[test]
fn checkpoints_follow_langgraphs_checkpointer_contract() {
    let s = Server::start();
    let agent = register(&s, "graph");
    let t = task(&s, &agent);
    let empty = json!({"thread_id": t});
    assert_eq!(
        ok(&s, "get-tuple", &empty),
        Value::Null,
        "no checkpoint yet"
    );
    assert_eq!(ok(&s, "list", &empty), json!([]));

    let (c1, c2, c3) = ("1f0-0001", "1f0-0002", "1f0-0003");
    let put = ok(&s, "put", &checkpoint(&t, "", c1, None, 0));
    assert_eq!(
        put,
        json!({"thread_id": t, "checkpoint_ns": "", "checkpoint_id": c1})
    );
    ok(&s, "put", &checkpoint(&t, "", c2, Some(c1), 1));
    ok(&s, "put", &checkpoint(&t, "", c3, Some(c2), 2));
    // A subgraph's namespace is a thread of its own within the task.
    ok(&s, "put", &checkpoint(&t, "sub:1", "1f0-0009", None, 0));

    // The newest of the namespace, with the blobs its channel versions name and nothing else.
    let latest = ok(&s, "get-tuple", &empty);
    assert_eq!(latest["checkpoint_id"], c3);
    assert_eq!(latest["parent_checkpoint_id"], c2);
    assert_eq!(latest["thread_id"], t);
    assert_eq!(latest["checkpoint_ns"], "");
    assert_eq!(
        latest["checkpoint"]["channel_values"],
        json!({"counter": 2})
    );
    assert_eq!(latest["metadata"]["step"], 2);
    assert_eq!(
        latest["blobs"],
        json!([
            {"channel": "counter", "version": format!("{:032}.0", 2), "type": "empty", "blob": null},
            {"channel": "messages", "version": format!("{:032}.0", 2), "type": "msgpack", "blob": b64("messages at 2")},
        ])
    );
    assert_eq!(latest["pending_writes"], json!([]));
    // By id.
    let first = ok(
        &s,
        "get-tuple",
        &json!({"thread_id": t, "checkpoint_id": c1}),
    );
    assert_eq!(first["checkpoint_id"], c1);
    assert_eq!(first["parent_checkpoint_id"], Value::Null);
    assert_eq!(first["blobs"][1]["blob"], b64("messages at 0"));
    let sub = ok(
        &s,
        "get-tuple",
        &json!({"thread_id": t, "checkpoint_ns": "sub:1"}),
    );
    assert_eq!(sub["checkpoint_id"], "1f0-0009");
    let none = json!({"thread_id": t, "checkpoint_id": "1f0-0004"});
    assert_eq!(ok(&s, "get-tuple", &none), Value::Null);

    // Lists: newest first, in one namespace or all, before a checkpoint, by metadata, limited.
    let list = |body: Value| ok(&s, "list", &body);
    let all = list(json!({"thread_id": t}));
    assert_eq!(ids(&all), ["1f0-0009", c3, c2, c1]);
    assert!(all[0].get("blobs").is_none(), "a list carries no blobs");
    assert_eq!(all[1]["metadata"]["writes"]["node"]["n"], 2);
    let root = list(json!({"thread_id": t, "checkpoint_ns": ""}));
    assert_eq!(ids(&root), [c3, c2, c1]);
    let before = list(json!({"thread_id": t, "checkpoint_ns": "", "before_checkpoint_id": c3}));
    assert_eq!(ids(&before), [c2, c1]);
    let one = list(json!({"thread_id": t, "checkpoint_ns": "", "limit": 1}));
    assert_eq!(ids(&one), [c3]);
    let loops = list(json!({"thread_id": t, "filter_metadata": {"source": "loop"}}));
    assert_eq!(ids(&loops), [c3, c2]);
    let nested = list(json!({"thread_id": t, "filter_metadata": {"writes": {"node": {"n": 1}}}}));
    assert_eq!(ids(&nested), [c2]);
    let step0 = list(json!({"thread_id": t, "filter_metadata": {"step": 0, "source": "input"}}));
    assert_eq!(ids(&step0), ["1f0-0009", c1]);
    assert_eq!(
        list(json!({"thread_id": t, "filter_metadata": {"step": 7}})),
        json!([])
    );

    // Writes: once per (task, idx); `upsert` replaces; they come back with their checkpoint,
    // ordered by task path, task and index.
    let write = |task_id: &str, idx: i64, text: &str, path: &str| json!({"task_id": task_id, "idx": idx, "channel": "messages", "type": "msgpack", "blob": b64(text), "task_path": path});
    ok(
        &s,
        "put-writes",
        &json!({"thread_id": t, "checkpoint_id": c3, "writes": [
            write("task-b", 1, "b1", "~a"), write("task-b", 0, "b0", "~a"), write("task-a", 0, "a0", "~b"),
        ]}),
    );
    ok(
        &s,
        "put-writes",
        &json!({"thread_id": t, "checkpoint_id": c3, "writes": [write("task-b", 0, "b0 again", "~a")]}),
    );
    let errors = json!({"task_id": "task-a", "idx": -1, "channel": "__error__", "type": null, "blob": b64("boom"), "task_path": "~b"});
    ok(
        &s,
        "put-writes",
        &json!({"thread_id": t, "checkpoint_id": c3, "writes": [errors], "upsert": true}),
    );
    let mut errors2 = errors.clone();
    errors2["blob"] = json!(b64("boom again"));
    ok(
        &s,
        "put-writes",
        &json!({"thread_id": t, "checkpoint_id": c3, "writes": [errors2], "upsert": true}),
    );
    let latest = ok(&s, "get-tuple", &empty);
    let writes: Vec<(String, i64, String)> = latest["pending_writes"]
        .as_array()
        .expect("writes")
        .iter()
        .map(|w| {
            (
                w["task_id"].as_str().unwrap_or_default().to_owned(),
                w["idx"].as_i64().unwrap_or(99),
                w["blob"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        writes,
        [
            ("task-b".into(), 0, b64("b0")),
            ("task-b".into(), 1, b64("b1")),
            ("task-a".into(), -1, b64("boom again")),
            ("task-a".into(), 0, b64("a0")),
        ]
    );
    assert_eq!(latest["pending_writes"][2]["type"], Value::Null);
    assert_eq!(latest["pending_writes"][2]["channel"], "__error__");
    assert_eq!(
        ok(
            &s,
            "get-tuple",
            &json!({"thread_id": t, "checkpoint_id": c2})
        )["pending_writes"],
        json!([]),
        "writes belong to their checkpoint"
    );

    // A put under an existing id replaces its checkpoint and metadata; its writes stay.
    let mut again = checkpoint(&t, "", c3, Some(c2), 2);
    again["metadata"] = json!({"source": "update", "step": 2});
    ok(&s, "put", &again);
    let latest = ok(&s, "get-tuple", &empty);
    assert_eq!(latest["metadata"], json!({"source": "update", "step": 2}));
    assert_eq!(latest["pending_writes"].as_array().map(Vec::len), Some(4));
    assert_eq!(ids(&list(json!({"thread_id": t}))).len(), 4);

    // Another task's thread is its own.
    let other = task(&s, &agent);
    assert_eq!(ok(&s, "list", &json!({"thread_id": other})), json!([]));
    ok(&s, "put", &checkpoint(&other, "", c1, None, 0));

    // delete-thread removes the thread's checkpoints, blobs and writes in every namespace, and
    // nothing of another thread; deleting the task removes its thread.
    assert_eq!(rows(&s, &t), [4, 8, 4]);
    ok(&s, "delete-thread", &empty);
    assert_eq!(rows(&s, &t), [0, 0, 0]);
    assert_eq!(ok(&s, "get-tuple", &empty), Value::Null);
    assert_eq!(ok(&s, "list", &empty), json!([]));
    ok(&s, "delete-thread", &empty);
    assert_eq!(rows(&s, &other), [1, 2, 0]);
    let (status, v) = s.delete(&agentex(&s, &format!("/tasks/{other}")));
    assert_eq!(status, 200, "{v}");
    assert_eq!(s.db_count("agentex_checkpoints"), 0);
    assert_eq!(s.db_count("agentex_checkpoint_blobs"), 0);
    let (status, v) = cp(&s, "list", &json!({"thread_id": other}));
    assert_eq!((status, v["error"].as_str()), (404, Some("not_found")));
}

/// Another workspace key's.
fn stranger(s: &Server) -> reqwest::blocking::Client {
    let key = common::workspace_member_key(&s.data_dir, "elsewhere", "owner");
    with_header("authorization", &format!("Bearer {key}"))
}

fn with_header(name: &'static str, value: &str) -> reqwest::blocking::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(name, value.parse().expect("header"));
    reqwest::blocking::Client::builder()
        .default_headers(headers)
        .build()
        .expect("client")
}

/// An ACP server's registration (never called): its id and issued key.
fn register_acp(s: &Server, name: &str) -> (String, String) {
    let (status, v) = s.post(
        &agentex(s, "/agents/register"),
        &json!({"name": name, "description": "d", "acp_url": "http://127.0.0.1:9", "acp_type": "sync"}),
    );
    assert_eq!(status, 200, "{v}");
    (
        v["id"].as_str().expect("id").to_owned(),
        v["agent_api_key"].as_str().expect("key").to_owned(),
    )
}

#[test]
fn a_thread_is_its_tasks_in_its_workspace_and_for_its_agent() {
    let s = Server::start_with_config(CONFIG);
    let (mine, key) = register_acp(&s, "mine");
    let (theirs, _) = register_acp(&s, "theirs");
    let (t_mine, t_theirs) = (task(&s, &mine), task(&s, &theirs));
    for t in [&t_mine, &t_theirs] {
        ok(&s, "put", &checkpoint(t, "", "1f0-0001", None, 0));
    }
    let write = json!({"task_id": "x", "idx": 0, "channel": "c", "blob": b64("w")});
    let bodies = |t: &str| {
        [
            ("list", json!({"thread_id": t})),
            ("get-tuple", json!({"thread_id": t})),
            ("put", checkpoint(t, "", "1f0-0002", Some("1f0-0001"), 1)),
            (
                "put-writes",
                json!({"thread_id": t, "checkpoint_id": "1f0-0001", "writes": [write]}),
            ),
            ("delete-thread", json!({"thread_id": t})),
        ]
    };
    let url = |op: &str| agentex(&s, &format!("/checkpoints/{op}"));

    // Another workspace: every operation on either thread is 404, as for a thread that does not
    // exist, and nothing changes.
    let other = stranger(&s);
    let before = (rows(&s, &t_mine), rows(&s, &t_theirs));
    let random = "01a230e0-0000-7000-8000-000000000000";
    for t in [t_mine.as_str(), t_theirs.as_str(), random, "not-an-id"] {
        for (op, body) in bodies(t) {
            let (status, v) = call(&other, &url(op), &body);
            assert_eq!(
                (status, v["error"].as_str()),
                (404, Some("not_found")),
                "{op} {t}"
            );
        }
    }
    for (op, body) in bodies(random) {
        let (status, v) = call(&s.http, &url(op), &body);
        assert_eq!(
            (status, v["error"].as_str()),
            (404, Some("not_found")),
            "{op}"
        );
    }
    assert_eq!((rows(&s, &t_mine), rows(&s, &t_theirs)), before);

    // An agent key: its own agent's tasks only.
    let agent = with_header("x-agent-api-key", &key);
    for (op, body) in bodies(&t_theirs) {
        let (status, _) = call(&agent, &url(op), &body);
        assert_eq!(status, 404, "{op} on another agent's task");
    }
    assert_eq!(rows(&s, &t_theirs), before.1);
    let (status, v) = call(&agent, &url("get-tuple"), &json!({"thread_id": t_mine}));
    assert_eq!((status, &v["checkpoint_id"]), (200, &json!("1f0-0001")));
    for (op, body) in bodies(&t_mine) {
        let (status, v) = call(&agent, &url(op), &body);
        assert!(status == 200 || status == 204, "{op}: {status} {v}");
    }
    assert_eq!(rows(&s, &t_mine), [0, 0, 0], "the last was delete-thread");
    let query = |c: &reqwest::blocking::Client, t: &str| {
        let res = c
            .get(agentex(&s, &format!("/tasks/{t}/query/get_status")))
            .send()
            .expect("GET");
        res.status().as_u16()
    };
    assert_eq!(query(&agent, &t_mine), 200);
    assert_eq!(query(&agent, &t_theirs), 404);
    assert_eq!(query(&other, &t_mine), 404);
}

#[test]
fn a_read_only_key_lists_and_reads_but_does_not_write() {
    let s = Server::start();
    let t = task(&s, &register(&s, "reader"));
    ok(&s, "put", &checkpoint(&t, "", "1f0-0001", None, 0));
    let key = cli(
        &s.data_dir,
        &[
            "token",
            "create",
            "--user",
            common::OWNER_EMAIL,
            "--workspace",
            "default",
            "--name",
            "reader",
            "--scope",
            "sessions:read",
        ],
        None,
    );
    let reader = with_header("authorization", &format!("Bearer {key}"));
    let url = |op: &str| agentex(&s, &format!("/checkpoints/{op}"));
    let (status, v) = call(&reader, &url("list"), &json!({"thread_id": t}));
    assert_eq!((status, ids(&v)), (200, vec!["1f0-0001"]));
    let (status, v) = call(&reader, &url("get-tuple"), &json!({"thread_id": t}));
    assert_eq!((status, &v["checkpoint_id"]), (200, &json!("1f0-0001")));
    for (op, body) in [
        ("put", checkpoint(&t, "", "1f0-0002", None, 1)),
        ("delete-thread", json!({"thread_id": t})),
    ] {
        let (status, v) = call(&reader, &url(op), &body);
        assert_eq!(
            (status, v["error"].as_str()),
            (403, Some("forbidden")),
            "{op}"
        );
    }
    assert_eq!(rows(&s, &t), [1, 2, 0]);
}

#[test]
fn bad_input_is_refused_by_name_and_changes_nothing() {
    let s = Server::start();
    let t = task(&s, &register(&s, "strict"));
    ok(&s, "put", &checkpoint(&t, "", "1f0-0001", None, 0));
    let before = rows(&s, &t);
    let long = "x".repeat(1025);
    let blob = |b: Value| {
        let mut c = checkpoint(&t, "", "1f0-0002", None, 1);
        c["blobs"] = json!([b]);
        c
    };
    let writes = |w: Value| json!({"thread_id": t, "checkpoint_id": "1f0-0001", "writes": [w]});
    let good_write = json!({"task_id": "a", "idx": 0, "channel": "c", "blob": b64("x")});
    let with = |field: &str, v: Value| {
        let mut w = good_write.clone();
        w[field] = v;
        writes(w)
    };
    let many_blobs = {
        let mut c = checkpoint(&t, "", "1f0-0002", None, 1);
        c["blobs"] = (0..1001)
            .map(|i| json!({"channel": format!("c{i}"), "version": "1", "type": "empty"}))
            .collect();
        c
    };
    let many_writes = json!({"thread_id": t, "checkpoint_id": "1f0-0001",
        "writes": (0..1001).map(|i| json!({"task_id": "a", "idx": i, "channel": "c", "blob": ""})).collect::<Vec<_>>()});
    let cases: Vec<(&str, Value, &str)> = vec![
        ("list", json!({}), "thread_id"),
        ("list", json!({"thread_id": t, "limit": 0}), "limit"),
        ("list", json!({"thread_id": t, "limit": 1001}), "limit"),
        ("list", json!({"thread_id": t, "limit": "ten"}), "limit"),
        (
            "list",
            json!({"thread_id": t, "filter_metadata": [1]}),
            "filter_metadata",
        ),
        (
            "list",
            json!({"thread_id": t, "filter_metadata": {"a\"b": 1}}),
            "metadata",
        ),
        (
            "list",
            json!({"thread_id": t, "before_checkpoint_id": ""}),
            "before_checkpoint_id",
        ),
        (
            "list",
            json!({"thread_id": t, "checkpoint_ns": long}),
            "checkpoint_ns",
        ),
        ("list", json!({"thread_id": t, "thread": t}), "thread"),
        ("get-tuple", json!({"thread_id": 5}), "thread_id"),
        (
            "get-tuple",
            json!({"thread_id": t, "checkpoint_ns": null}),
            "checkpoint_ns",
        ),
        (
            "get-tuple",
            json!({"thread_id": t, "checkpoint_id": "a\u{1}b"}),
            "checkpoint_id",
        ),
        (
            "put",
            json!({"thread_id": t, "checkpoint_id": "c"}),
            "checkpoint",
        ),
        (
            "put",
            json!({"thread_id": t, "checkpoint_id": "c", "checkpoint": []}),
            "checkpoint",
        ),
        (
            "put",
            json!({"thread_id": t, "checkpoint_id": "", "checkpoint": {}}),
            "checkpoint_id",
        ),
        (
            "put",
            json!({"thread_id": t, "checkpoint_id": long, "checkpoint": {}}),
            "checkpoint_id",
        ),
        (
            "put",
            json!({"thread_id": t, "checkpoint_id": "c", "checkpoint": {}, "metadata": 1}),
            "metadata",
        ),
        (
            "put",
            json!({"thread_id": t, "checkpoint_id": "c", "checkpoint": {}, "parent_checkpoint_id": ""}),
            "parent_checkpoint_id",
        ),
        (
            "put",
            blob(json!({"channel": "c", "version": "1", "type": "msgpack", "blob": "not base64!"})),
            "blobs[0]/blob",
        ),
        (
            "put",
            blob(json!({"channel": "c", "version": "1", "type": "msgpack", "blob": "aGVsbG8"})),
            "blobs[0]/blob",
        ),
        (
            "put",
            blob(json!({"channel": "", "version": "1", "type": "msgpack"})),
            "blobs[0]/channel",
        ),
        (
            "put",
            blob(json!({"channel": "c", "version": "1"})),
            "blobs[0]",
        ),
        (
            "put",
            blob(json!({"channel": "c", "version": "1", "type": "t", "extra": 1})),
            "extra",
        ),
        ("put", many_blobs, "blobs"),
        (
            "put-writes",
            json!({"thread_id": t, "checkpoint_id": "1f0-0001"}),
            "writes",
        ),
        ("put-writes", with("blob", json!(null)), "writes[0]/blob"),
        ("put-writes", with("blob", json!("&&&&")), "writes[0]/blob"),
        ("put-writes", with("idx", json!(1.5)), "writes[0]/idx"),
        (
            "put-writes",
            with("idx", json!(1_i64 << 40)),
            "writes[0]/idx",
        ),
        (
            "put-writes",
            with("task_id", json!("")),
            "writes[0]/task_id",
        ),
        (
            "put-writes",
            with("task_path", json!(long)),
            "writes[0]/task_path",
        ),
        ("put-writes", with("type", json!("")), "writes[0]/type"),
        (
            "put-writes",
            json!({"thread_id": t, "checkpoint_id": "1f0-0001", "writes": [], "upsert": "yes"}),
            "upsert",
        ),
        ("put-writes", many_writes, "writes"),
        ("delete-thread", json!({}), "thread_id"),
        ("delete-thread", json!({"thread_id": t, "all": true}), "all"),
    ];
    for (op, body, field) in cases {
        let (status, v) = cp(&s, op, &body);
        assert_eq!(status, 400, "{op} {field}: {v}");
        assert_eq!(v["error"], "invalid_request", "{op} {field}: {v}");
        let message = v["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(field),
            "{op}: {message:?} should name {field}"
        );
    }
    // Not JSON at all.
    let res = s
        .http
        .post(agentex(&s, "/checkpoints/put"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .expect("POST");
    assert_eq!(res.status().as_u16(), 400);
    assert_eq!(rows(&s, &t), before, "nothing was written");
    // The limits themselves are accepted.
    let (status, v) = cp(&s, "list", &json!({"thread_id": t, "limit": 1000}));
    assert_eq!((status, ids(&v)), (200, vec!["1f0-0001"]));
}

#[test]
fn workflow_queries_answer_a_tasks_status_and_state() {
    let s = Server::start();
    let agent = register(&s, "queried");
    let t = task(&s, &agent);
    let query = |name: &str| s.get(&agentex(&s, &format!("/tasks/{t}/query/{name}")));
    for name in ["get_status", "status"] {
        let (status, v) = query(name);
        assert_eq!(status, 200, "{v}");
        assert_eq!(v, json!({"task_id": t, "query": name, "result": "RUNNING"}));
    }
    for name in ["get_state", "state", "current_state"] {
        assert_eq!(query(name).1["result"], Value::Null, "no state yet");
    }
    let (status, v) = s.post(
        &agentex(&s, "/states"),
        &json!({"task_id": t, "agent_id": agent, "state": {"turns": 3, "plan": ["a", "b"]}}),
    );
    assert_eq!(status, 200, "{v}");
    for name in ["get_state", "state", "current_state"] {
        assert_eq!(
            query(name).1,
            json!({"task_id": t, "query": name, "result": {"turns": 3, "plan": ["a", "b"]}})
        );
    }
    let (status, v) = s.post(&agentex(&s, &format!("/tasks/{t}/cancel")), &json!({}));
    assert_eq!(status, 200, "{v}");
    assert_eq!(query("get_status").1["result"], "CANCELED");

    let (status, v) = query("get_graph_mermaid");
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("invalid_request"))
    );
    let message = v["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("\"get_graph_mermaid\"") && message.contains("get_status"),
        "{message}"
    );
    let (status, v) = query(&"q".repeat(5000));
    assert_eq!(status, 400, "{v}");
    for bad in ["01a230e0-0000-7000-8000-000000000000", "nope"] {
        let (status, v) = s.get(&agentex(&s, &format!("/tasks/{bad}/query/get_status")));
        assert_eq!((status, v["error"].as_str()), (404, Some("not_found")));
    }
    let other = stranger(&s);
    let res = other
        .get(agentex(&s, &format!("/tasks/{t}/query/get_status")))
        .send()
        .expect("GET");
    assert_eq!(res.status().as_u16(), 404);
}
