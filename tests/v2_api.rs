//! The Task events API (`/v2`): Session records (seed 004) and HAST Event v2 lists and streams
//! (seed 001), against the real server. Every record and envelope is validated against the seed
//! schemas (see `common/hast.rs` for the two documented widenings).

mod common;
#[path = "common/fake_openai.rs"]
mod fake_openai;
#[path = "common/hast.rs"]
mod hast;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::*;
use fake_openai::*;
use hast::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

fn data_of<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    &of_type(events, kind)
        .first()
        .unwrap_or_else(|| panic!("no {kind} in {:?}", types(events)))["data"]
}

/// Every run has one start, exactly one outcome, and its events carry its `run_id`.
fn check_runs(events: &[Value]) {
    let mut outcomes: HashMap<String, usize> = HashMap::new();
    let mut started: HashSet<String> = HashSet::new();
    for e in events {
        let kind = e["type"].as_str().unwrap_or("");
        if kind.starts_with("run.") {
            let run = e["run_id"]
                .as_str()
                .unwrap_or_else(|| panic!("{kind} without run_id: {e}"))
                .to_owned();
            match kind {
                "run.started" => assert!(started.insert(run), "a run started twice"),
                "run.completed" | "run.failed" | "run.interrupted" => {
                    assert!(started.contains(&run), "{kind} of a run that never started");
                    *outcomes.entry(run).or_default() += 1;
                }
                _ => {}
            }
        }
    }
    for run in &started {
        assert!(
            outcomes.get(run).copied().unwrap_or(0) <= 1,
            "run {run} ended more than once: {:?}",
            types(events)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Records

#[test]
fn a_session_created_on_v2_is_the_same_session_on_v1() {
    let s = Server::start();
    let r = create_v2(
        &s,
        json!({"prompt": "/reply hello there", "metadata": {"ticket": "T-1"}}),
    );
    let id = r["id"].as_str().expect("id").to_owned();
    assert_eq!(r["harness"], "scripted");
    assert_eq!(r["source"], "api");
    assert_eq!(
        r["attribution"],
        json!({"type": "api_key", "id": key_id(&s.token), "user": null})
    );
    assert_eq!(r["metadata"], json!({"ticket": "T-1"}));
    assert_eq!(r["prompt"], "/reply hello there");
    assert_eq!(r["budget"], json!({"cents": 0, "source": "system"}));
    assert_eq!(r["parent"]["kind"], Value::Null);

    // The Sessions API sees the same session and its turn.
    let done = s.wait_terminal(&id, 1);
    assert_eq!(done["event"]["type"], "complete");
    let detail = detail_checked(&s, &id);
    assert_eq!(detail["id"], json!(id));
    let history = history_checked(&s, &id, 100);

    let r = record(&s, &id);
    assert_eq!(r["status"], "completed");
    assert_eq!(r["exit_status"], "completed");
    assert_eq!(r["session_state"], "idle");
    assert_eq!(r["prompting"]["enabled"], true);
    assert_eq!(r["surface"]["run"], "done");
    assert!(r["tokens"]["total"].as_u64().unwrap() > 0, "{r}");
    assert!(r["last_activity_at"].is_string() && r["last_message_at"].is_string());

    let evs = events(&s, &id);
    assert_eq!(
        types(&evs),
        [
            "runtime.status",
            "message.started",
            "message.completed",
            "run.queued",
            "run.started",
            "message.started",
            "message.completed",
            "usage.updated",
            "run.completed",
        ]
    );
    check_runs(&evs);
    // One v1 event per HAST group: sequence = 10 × seq + i.
    let seqs: Vec<u64> = evs
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    let v1: Vec<u64> = history.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(
        seqs.iter().all(|s| v1.contains(&(s / 10))),
        "{seqs:?} vs {v1:?}"
    );
    let ids: HashSet<&str> = evs
        .iter()
        .map(|e| e["event_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), evs.len(), "event ids are distinct");
    assert!(
        evs.iter()
            .all(|e| e["event_id"] != json!(e["sequence"].to_string())),
        "event ids are not sequences"
    );
    assert!(
        evs.iter()
            .all(|e| e["session_id"] == json!(id) && e["task_id"] == json!(id))
    );
    assert!(evs.iter().all(|e| e["engine"] == "scripted"));
    let user = &of_type(&evs, "message.completed")[0]["data"];
    assert_eq!(user["role"], "user");
    assert_eq!(user["text"], "/reply hello there");
    let queued = &of_type(&evs, "run.queued")[0];
    let started = &of_type(&evs, "run.started")[0];
    assert_eq!(queued["run_id"], started["run_id"]);
    assert_eq!(queued["data"]["request_id"], started["data"]["request_id"]);
    assert_eq!(started["data"]["turn_type"], "initial");
    let reply = &of_type(&evs, "message.completed")[1]["data"];
    assert_eq!(reply["role"], "assistant");
    assert_eq!(reply["text"], "hello there");
    let completed = data_of(&evs, "run.completed");
    assert_eq!(completed["final_message_id"], reply["message_id"]);
    assert_eq!(completed["finish_reason"], "stop");
    assert_eq!(completed["attempts"], 1);
    // The same on every read.
    assert_eq!(events_paged(&s, &id, 2), evs);

    let (status, list) = s.get(&v2(&s, ""));
    assert_eq!(status, 200);
    assert_eq!(list["sessions"][0]["id"], json!(id));
    assert_eq!(list["next_cursor"], Value::Null);
    assert_record(&list["sessions"][0]);
}

#[test]
fn a_session_created_on_v1_reads_the_same_on_v2() {
    let s = Server::start();
    let id = id_of(&create_checked(&s, json!({"prompt": "/reply from v1"})));
    s.wait_terminal(&id, 1);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages/wait")),
        &json!({"prompt": "second", "behavior": "follow_up", "clientRequestId": new_uuid()}),
    );
    assert_eq!(status, 200, "{v}");
    let history = history_checked(&s, &id, 100);
    let r = record(&s, &id);
    assert_eq!(r["source"], "api", "v1 creates record provenance too");
    assert_eq!(r["attribution"]["id"], key_id(&s.token));
    assert_eq!(r["prompt"], "/reply from v1");
    assert_eq!(r["status"], "completed");
    let evs = events(&s, &id);
    check_runs(&evs);
    assert_eq!(runs_ended(&evs), 2);
    // Every v1 text is an assistant message.completed with the same text, in order.
    let v1_texts: Vec<&Value> = history
        .iter()
        .filter(|e| e["event"]["type"] == "step" && e["event"]["step"]["type"] == "text")
        .map(|e| &e["event"]["step"]["text"])
        .collect();
    let v2_texts: Vec<&Value> = of_type(&evs, "message.completed")
        .into_iter()
        .filter(|e| e["data"]["role"] == "assistant")
        .map(|e| &e["data"]["text"])
        .collect();
    assert_eq!(v1_texts, v2_texts);
    // The follow-up queued its own run.
    let queued = of_type(&evs, "run.queued");
    assert_eq!(queued.len(), 2);
    assert_eq!(queued[1]["data"]["turn_type"], "message");
    let starts = of_type(&evs, "run.started");
    assert_eq!(starts[1]["run_id"], queued[1]["run_id"]);
    assert_ne!(starts[0]["run_id"], starts[1]["run_id"]);
}

#[test]
fn the_list_pages_newest_first_with_a_keyset_cursor() {
    let s = Server::start();
    let mut ids: Vec<String> = (0..5)
        .map(|i| {
            id_of(&create_checked(
                &s,
                json!({"prompt": format!("/reply {i}")}),
            ))
        })
        .collect();
    ids.reverse();
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => v2(&s, &format!("?limit=2&cursor={}", query_escape(c))),
            None => v2(&s, "?limit=2"),
        };
        let (status, page) = s.get(&url);
        assert_eq!(status, 200, "{page}");
        for r in page["sessions"].as_array().unwrap() {
            assert_record(r);
            seen.push(r["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    assert_eq!(seen, ids);
    for bad in [
        "?limit=0",
        "?limit=101",
        "?limit=x",
        "?cursor=",
        "?cursor=bm9wZQ",
    ] {
        let (status, v) = s.get(&v2(&s, bad));
        assert_eq!(status, 400, "{bad}: {v}");
        assert_eq!(v["error"], "invalid_request");
    }
}

#[test]
fn patch_changes_budget_and_metadata_and_bad_patches_change_nothing() {
    let s = Server::start();
    let id = create_v2(&s, json!({"prompt": "/reply x", "metadata": {"a": "1"}}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let url = v2(&s, &format!("/{id}"));
    let (status, r) = s.patch(&url, &json!({"metadata": {"b": "2", "c": "3"}}));
    assert_eq!(status, 200, "{r}");
    assert_record(&r);
    assert_eq!(r["metadata"], json!({"a": "1", "b": "2", "c": "3"}));
    let (_, r) = s.patch(
        &url,
        &json!({"metadata": {"a": null, "c": "4"}, "budget": {"cents": 50}}),
    );
    assert_eq!(r["metadata"], json!({"b": "2", "c": "4"}));
    assert_eq!(r["budget"], json!({"cents": 50, "source": "run"}));
    let before = record(&s, &id);
    let too_many: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("k{i}"), json!("v"))).collect();
    for bad in [
        json!({"metadata": {"a": 1}}),
        json!({"metadata": {"": "x"}}),
        json!({"metadata": {"k": "v".repeat(2049)}}),
        json!({"metadata": too_many}),
        json!({"budget": {"cents": -1}}),
        json!({"budget": {"cents": 1_000_000_001u64}}),
        json!({"budget": {"dollars": 1}}),
        json!({"title": "nope"}),
        json!([]),
    ] {
        let (status, v) = s.patch(&url, &bad);
        assert_eq!(status, 400, "{bad}: {v}");
        assert_eq!(v["error"], "invalid_request");
    }
    let (status, _) = s.patch(&v2(&s, "/0190a7c2-0000-7000-8000-000000000000"), &json!({}));
    assert_eq!(status, 404);
    let after = record(&s, &id);
    assert_eq!(before["metadata"], after["metadata"]);
    assert_eq!(before["budget"], after["budget"]);
    // 0 lifts the cap.
    let (_, r) = s.patch(&url, &json!({"budget": {"cents": 0}}));
    assert_eq!(r["budget"], json!({"cents": 0, "source": "system"}));
}

#[test]
fn bad_creates_are_refused_and_change_nothing() {
    let s = Server::start();
    let parent = create_v2(&s, json!({"prompt": "/reply p"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let count = || {
        s.get(&v2(&s, "?limit=100")).1["sessions"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(count(), 1);
    for (body, code, needle) in [
        (json!({}), 400, "prompt"),
        (json!({"prompt": ""}), 400, "prompt"),
        (json!({"prompt": "   "}), 400, "prompt"),
        (json!({"prompt": 5}), 400, "prompt"),
        (json!({"prompt": "x", "harness": "vim"}), 400, "harness"),
        (json!({"prompt": "x", "harness": "codex"}), 400, "codex"),
        (
            json!({"prompt": "x", "metadata": {"k": 1}}),
            400,
            "metadata",
        ),
        (json!({"prompt": "x", "metadata": "k"}), 400, "metadata"),
        (
            json!({"prompt": "x", "budget": {"cents": -5}}),
            400,
            "budget",
        ),
        (
            json!({"prompt": "x", "budget": {"cents": 1.5}}),
            400,
            "budget",
        ),
        (
            json!({"prompt": "x", "parent": {"kind": "fork", "session_id": parent}}),
            400,
            "parent",
        ),
        (
            json!({"prompt": "x", "parent": {"kind": "continuation"}}),
            400,
            "parent",
        ),
        (json!({"prompt": "x", "cwd": "somewhere"}), 400, "cwd"),
        (
            json!({"prompt": "x", "parent": {"kind": "resume", "session_id": "0190a7c2-0000-7000-8000-000000000000"}}),
            404,
            "not found",
        ),
    ] {
        let (status, v) = s.post(&v2(&s, ""), &body);
        assert_eq!(status, code, "{body}: {v}");
        assert!(
            v["message"].as_str().unwrap_or("").contains(needle),
            "{body}: the error names {needle}: {v}"
        );
    }
    let (status, v) = s.post_raw(&v2(&s, ""), "{not json");
    assert_eq!(status, 400, "{v}");
    let (status, v) = s.post(&v2(&s, ""), &json!({"prompt": "x".repeat(200_001)}));
    assert_eq!(status, 400, "{v}");
    assert!(v["message"].as_str().unwrap().contains("prompt"), "{v}");
    assert_eq!(count(), 1, "nothing was created");
    // The parent a refused create named is untouched.
    wait_runs(&s, &parent, 1);
    let p = record(&s, &parent);
    assert_eq!(p["session_state"], "idle");
    assert_eq!(p["prompting"]["enabled"], true);
}

#[test]
fn scopes_workspaces_and_provenance() {
    let s = Server::start();
    let id = create_v2(&s, json!({"prompt": "/reply x"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.wait_terminal(&id, 1);
    let run = |args: &[&str]| {
        let mut cmd = sessiond_command();
        cmd.args(args)
            .arg("--data-dir")
            .arg(&s.data_dir)
            .args(database_args(&s.data_dir));
        let out = run_bounded(cmd, WAIT);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let read_only = run(&[
        "token",
        "create",
        "--user",
        OWNER_EMAIL,
        "--scope",
        "sessions:read",
        "--name",
        "ro",
    ]);
    let http = http_builder().build().expect("client");
    let call = |method: reqwest::Method, path: &str, key: Option<&str>, body: Option<Value>| {
        let mut req = http.request(method, s.url(path));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().expect("request").status().as_u16()
    };
    use reqwest::Method;
    let session = format!("/v2/sessions/{id}");
    let ro = Some(read_only.as_str());
    assert_eq!(call(Method::GET, "/v2/sessions", ro, None), 200);
    assert_eq!(call(Method::GET, &session, ro, None), 200);
    assert_eq!(
        call(Method::GET, &format!("{session}/events"), ro, None),
        200
    );
    let sse = http_builder()
        .build()
        .expect("client")
        .get(s.url(&format!("{session}/events/stream")))
        .bearer_auth(&read_only)
        .send()
        .unwrap();
    assert_eq!(sse.status().as_u16(), 200, "sessions:read streams");
    drop(sse);
    assert_eq!(
        call(
            Method::POST,
            "/v2/sessions",
            ro,
            Some(json!({"prompt": "x"}))
        ),
        403
    );
    assert_eq!(
        call(Method::PATCH, &session, ro, Some(json!({"metadata": {}}))),
        403
    );
    assert_eq!(
        call(
            Method::POST,
            &format!("{session}/messages"),
            ro,
            Some(json!({"prompt": "x"}))
        ),
        403
    );
    for path in [
        "/v2/sessions",
        session.as_str(),
        &format!("{session}/events"),
    ] {
        assert_eq!(call(Method::GET, path, None, None), 401, "{path}");
        assert_eq!(
            call(Method::GET, path, Some("sk_nope"), None),
            401,
            "{path}"
        );
    }
    assert_eq!(call(Method::DELETE, &session, ro, None), 405);

    // Another workspace's key does not see the session (404, never 403).
    run(&["workspace", "create", "other", "--name", "Other"]);
    {
        use std::io::{Seek, Write};
        let mut password = tempfile::tempfile().expect("temp file");
        writeln!(password, "another-password-123").expect("write");
        password.rewind().expect("rewind");
        let mut cmd = sessiond_command();
        cmd.args([
            "user",
            "create",
            "--email",
            "other@test.local",
            "--password-stdin",
        ])
        .args(["--workspace", "other", "--role", "owner", "--data-dir"])
        .arg(&s.data_dir)
        .args(database_args(&s.data_dir))
        .stdin(std::process::Stdio::from(password));
        assert!(run_bounded(cmd, WAIT).status.success());
    }
    let other = run(&[
        "token",
        "create",
        "--user",
        "other@test.local",
        "--workspace",
        "other",
        "--scope",
        "sessions",
        "--name",
        "other",
    ]);
    let other_key = other.clone();
    let other = Some(other.as_str());
    assert_eq!(call(Method::GET, &session, other, None), 404);
    assert_eq!(
        call(Method::GET, &format!("{session}/events"), other, None),
        404
    );
    assert_eq!(
        call(
            Method::PATCH,
            &session,
            other,
            Some(json!({"metadata": {}}))
        ),
        404
    );
    let (_, list) = {
        let r = http
            .get(s.url("/v2/sessions"))
            .bearer_auth(&other_key)
            .send()
            .unwrap();
        into_json(r)
    };
    assert_eq!(list["sessions"], json!([]));

    // A browser session creates in the workspace its header names, with source `react`.
    let login = http
        .post(s.url("/auth/login"))
        .json(&json!({"email": OWNER_EMAIL, "password": OWNER_PASSWORD}))
        .send()
        .unwrap();
    assert_eq!(login.status().as_u16(), 200);
    let cookie = login
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|c| c.to_str().ok())
        .find_map(|c| {
            c.split(';')
                .next()
                .filter(|kv| kv.starts_with("sessiond_session="))
        })
        .expect("session cookie")
        .to_owned();
    let browser_create = |workspace: &str| {
        let created = http
            .post(s.url("/v2/sessions"))
            .header("cookie", &cookie)
            .header("origin", &s.base)
            .header("x-sessiond-workspace", workspace)
            .json(&json!({"prompt": "/reply from the browser"}))
            .send()
            .unwrap();
        into_json(created)
    };
    let (status, r) = browser_create("default");
    assert_eq!(status, 201, "{r}");
    assert_record(&r);
    assert_eq!(r["source"], "react");
    assert_eq!(r["attribution"]["type"], Value::Null);
    let browser_id = r["id"].as_str().unwrap();
    assert_eq!(
        call(Method::GET, &format!("/v2/sessions/{browser_id}"), ro, None),
        200
    );
    assert_eq!(
        call(
            Method::GET,
            &format!("/v2/sessions/{browser_id}"),
            other,
            None
        ),
        404
    );
    // A workspace the browser's user is not a member of is not there.
    let (status, _) = browser_create("other");
    assert_eq!(status, 404);
}

// ---------------------------------------------------------------------------------------------
// Events and streams

#[test]
fn streams_resume_by_after_and_by_last_event_id_without_gaps() {
    let s = Server::start_with_config("[stream]\nkeepalive_ms = 200\n");
    let id = create_v2(
        &s,
        json!({"prompt": "/todos one; two\n/tool read_file\n/stream 3"}),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, v) = s.post(
        &v2(&s, &format!("/{id}/messages")),
        &json!({"prompt": "/reply more", "behavior": "follow_up"}),
    );
    assert_eq!(status, 200, "{v}");
    assert!(v["sequence"].as_u64().unwrap() % 10 == 0);
    let all = wait_runs(&s, &id, 2);
    check_runs(&all);

    let sse = stream(&s, &id, "?after=0", None);
    assert_eq!(sse.headers["content-type"], "text/event-stream");
    assert_eq!(sse.headers["x-accel-buffering"], "no");
    let frames = read_runs(&sse, 2);
    let durable: Vec<Value> = frames
        .iter()
        .filter(|f| f.id.is_some())
        .map(|f| f.data.clone())
        .collect();
    assert_eq!(
        durable, all,
        "the stream replays exactly what the list holds"
    );
    assert_eq!(
        next_comment(&sse, Duration::from_secs(5)).as_deref(),
        Some("keep-alive"),
        "idle streams get keep-alive comments"
    );
    drop(sse);

    for cut in [1, all.len() / 2, all.len() - 1] {
        let after = all[cut - 1]["sequence"].as_u64().unwrap();
        let expected = &all[cut..];
        let by_after = stream(&s, &id, &format!("?after={after}"), None);
        let got: Vec<Value> = read_until(&by_after, "the last event", |f| {
            f.data == all[all.len() - 1]
        })
        .into_iter()
        .filter(|f| f.id.is_some())
        .map(|f| f.data)
        .collect();
        assert_eq!(got, expected, "after={after}");
        // EventSource reconnects to the URL it opened (`after=0`) with the header: it wins.
        let by_header = stream(&s, &id, "?after=0", Some(after));
        let got: Vec<Value> = read_until(&by_header, "the last event", |f| {
            f.data == all[all.len() - 1]
        })
        .into_iter()
        .filter(|f| f.id.is_some())
        .map(|f| f.data)
        .collect();
        assert_eq!(got, expected, "Last-Event-ID {after}");
        // The list pages the same way.
        let (_, page) = s.get(&v2(&s, &format!("/{id}/events?after={after}&limit=500")));
        assert_eq!(page["events"].as_array().unwrap(), expected);
    }
    // A resume point inside one timeline event's group of HAST events.
    let group = all
        .windows(2)
        .position(|w| {
            w[0]["sequence"].as_u64().unwrap() / 10 == w[1]["sequence"].as_u64().unwrap() / 10
        })
        .expect("a timeline event with several HAST events");
    let after = all[group]["sequence"].as_u64().unwrap();
    let (_, page) = s.get(&v2(&s, &format!("/{id}/events?after={after}&limit=1")));
    assert_eq!(page["events"][0], all[group + 1]);
    assert_eq!(page["has_more"], true);

    for bad in [
        "?after=-1",
        "?after=x",
        "?after=9007199254740992",
        "?snapshots=maybe",
    ] {
        let r = s
            .http
            .get(v2(&s, &format!("/{id}/events/stream{bad}")))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 400, "{bad}");
    }
    let r = s
        .http
        .get(v2(&s, &format!("/{id}/events/stream")))
        .header("last-event-id", "evt_1")
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400, "event ids are not cursors");
    for bad in ["?after=x", "?limit=0", "?limit=501"] {
        let (status, _) = s.get(&v2(&s, &format!("/{id}/events{bad}")));
        assert_eq!(status, 400, "{bad}");
    }
}

#[test]
fn deltas_are_live_only_lead_to_their_message_and_a_reconnect_gets_the_tail() {
    let s = Server::start();
    // Slow enough that the second stream connects long before the run ends (seven more deltas,
    // 250 ms apart, after the third).
    let id = create_v2(&s, json!({"prompt": "/slow 250\n/stream 10"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = stream(&s, &id, "?after=0", None);
    // Wait for some deltas, then connect a second stream from the last durable event seen.
    let mut seen = Vec::new();
    let mut deltas = 0;
    while deltas < 3 {
        let f = first.next_frame(WAIT).expect("a frame");
        check_frame(&f);
        if f.event.as_deref() == Some("message.delta") {
            deltas += 1;
        }
        seen.push(f);
    }
    let last_durable = seen
        .iter()
        .rev()
        .find_map(|f| f.id)
        .expect("a durable frame");
    let second = stream(&s, &id, "", Some(last_durable));
    let rest = read_runs(&first, 1);
    seen.extend(rest);
    let reconnected = read_runs(&second, 1);

    for frames in [&seen, &reconnected] {
        let completed = frames
            .iter()
            .find(|f| {
                f.event.as_deref() == Some("message.completed")
                    && f.data["data"]["role"] == "assistant"
            })
            .expect("the reply");
        let text = completed.data["data"]["text"].as_str().unwrap();
        let message_id = &completed.data["data"]["message_id"];
        let streamed: String = frames
            .iter()
            .filter(|f| f.event.as_deref() == Some("message.delta"))
            .map(|f| {
                assert_eq!(f.id, None, "volatile frames carry no id");
                assert_eq!(f.data["sequence"], Value::Null);
                assert_eq!(f.data["replayable"], false);
                assert_eq!(&f.data["data"]["message_id"], message_id);
                assert_eq!(f.data["run_id"], completed.data["run_id"]);
                f.data["data"]["delta"].as_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(streamed, text, "the deltas make the message");
    }
    // The tail comes merged: one delta with the text streamed before the reconnect (at least
    // the three chunks the first stream saw), then the rest one by one.
    let reconnected_deltas: Vec<&str> = reconnected
        .iter()
        .filter(|f| f.event.as_deref() == Some("message.delta"))
        .filter_map(|f| f.data["data"]["delta"].as_str())
        .collect();
    assert!(
        reconnected_deltas
            .first()
            .is_some_and(|d| d.starts_with("chunk 1 chunk 2 chunk 3 ")),
        "the reconnect got the tail streamed before it came, then the rest: {reconnected_deltas:?}"
    );
    // Volatile events are never replayed.
    let evs = events(&s, &id);
    assert!(of_type(&evs, "message.delta").is_empty());
    let replay = stream(&s, &id, "?after=0", None);
    let frames = read_runs(&replay, 1);
    assert!(
        frames.iter().all(|f| f.id.is_some()),
        "a finished run replays no deltas"
    );
}

#[test]
fn each_run_ends_completed_failed_or_interrupted_exactly_once() {
    let s = Server::start();
    let id = create_v2(&s, json!({"prompt": "/reply fine"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_runs(&s, &id, 1);
    let message = |prompt: &str| {
        let (status, v) = s.post(
            &v2(&s, &format!("/{id}/messages")),
            &json!({"prompt": prompt}),
        );
        assert_eq!(status, 200, "{v}");
    };
    message("/fail the model broke");
    let evs = wait_runs(&s, &id, 2);
    let failed = data_of(&evs, "run.failed");
    assert_eq!(failed["code"], "run_failed");
    assert_eq!(failed["message"], "the model broke");
    assert_eq!(failed["retryable"], false);
    let r = record(&s, &id);
    assert_eq!(
        (r["status"].as_str(), r["exit_status"].as_str()),
        (Some("error"), Some("error"))
    );
    assert_eq!(r["status_reason"], "the model broke");
    assert_eq!(r["surface"]["run"], "failed");

    message("/slow 10000\n/reply never");
    wait_events(&s, &id, "the third run", |e| {
        of_type(e, "run.started").len() == 3
    });
    assert_eq!(record(&s, &id)["status"], "running");
    let (status, _) = s.post(&s.sessions_url(&format!("/{id}/interrupt")), &json!({}));
    assert_eq!(status, 200);
    let evs = wait_runs(&s, &id, 3);
    assert_eq!(data_of(&evs, "run.interrupted")["reason"], "interrupted");
    let r = record(&s, &id);
    assert_eq!(
        (r["status"].as_str(), r["exit_status"].as_str()),
        (Some("stopped"), Some("interrupted"))
    );
    assert!(r["stopped"]["at"].is_string(), "{r}");
    assert_eq!(r["stopped"]["by"], Value::Null);
    assert!(
        r["status_reason"]
            .as_str()
            .unwrap()
            .starts_with("interrupted by "),
        "{r}"
    );
    check_runs(&evs);
    let outcomes: Vec<&str> = types(&evs)
        .into_iter()
        .filter(|t| matches!(*t, "run.completed" | "run.failed" | "run.interrupted"))
        .collect();
    assert_eq!(outcomes, ["run.completed", "run.failed", "run.interrupted"]);
}

#[test]
fn an_ask_ends_its_run_and_the_answer_starts_the_next() {
    let s = Server::start();
    let id = create_v2(
        &s,
        json!({"prompt": "/ask Which colour? | red | blue\n/reply chose it"}),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let evs = wait_runs(&s, &id, 1);
    let asked = data_of(&evs, "input.requested");
    assert_eq!(asked["prompt"], "Which colour?");
    assert_eq!(asked["kind"], "question");
    assert_eq!(asked["options"][0]["options"][1]["label"], "blue");
    let done = data_of(&evs, "run.completed");
    assert_eq!(done["finish_reason"], "input_requested");
    let r = record(&s, &id);
    assert_eq!(r["status"], "completed");
    assert_eq!(r["surface"]["run"], "waiting");
    assert_eq!(r["status_reason"], "input_requested");

    // A message to an asking session is its answer.
    let (status, v) = s.post(
        &v2(&s, &format!("/{id}/messages")),
        &json!({"prompt": "red"}),
    );
    assert_eq!(status, 200, "{v}");
    let evs = wait_runs(&s, &id, 2);
    check_runs(&evs);
    let history = s.history_all(&id);
    assert!(
        history
            .iter()
            .any(|e| e["event"]["type"] == "answer_submitted")
    );
    let queued = of_type(&evs, "run.queued");
    let answer_run = queued.last().unwrap();
    assert_eq!(answer_run["data"]["turn_type"], "answer");
    let starts = of_type(&evs, "run.started");
    assert_eq!(starts[1]["run_id"], answer_run["run_id"]);
    assert_eq!(starts[1]["data"]["turn_type"], "answer");
    let last = of_type(&evs, "message.completed").last().unwrap()["data"].clone();
    assert_eq!(last["text"], "chose it");
}

#[test]
fn tools_todos_tasks_and_written_files() {
    let fake = FakeOpenAi::start();
    let s = Server::start_with_config(&format!(
        "[policy]\nmodel_endpoints = [{:?}]\n",
        fake.base_url
    ));
    let id = create_v2(
        &s,
        json!({"prompt": "/todos plan it; do it\n/tool read_file\n/task build 200"}),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let evs = wait_runs(&s, &id, 1);
    let plan = data_of(&evs, "plan.updated");
    assert_eq!(
        plan["steps"],
        json!([{"step": "plan it", "status": "pending"}, {"step": "do it", "status": "pending"}])
    );
    let started = of_type(&evs, "tool.started");
    assert_eq!(started[0]["data"]["name"], "read_file");
    assert_eq!(started[0]["data"]["kind"], "read");
    let completed = of_type(&evs, "tool.completed");
    assert_eq!(
        completed[0]["data"]["tool_call_id"],
        started[0]["data"]["tool_call_id"]
    );
    assert_eq!(completed[0]["data"]["status"], "succeeded");
    assert_eq!(completed[0]["data"]["output"], "read_file: ok");
    // The background task: started, its output, settled.
    assert_eq!(started[1]["data"]["name"], "build");
    let task = &started[1]["data"]["tool_call_id"];
    assert!(
        of_type(&evs, "tool.updated")
            .iter()
            .all(|e| &e["data"]["tool_call_id"] == task)
    );
    assert!(!of_type(&evs, "tool.updated").is_empty());
    assert_eq!(completed[1]["data"]["tool_call_id"], *task);
    assert_eq!(completed[1]["data"]["output"], "build done");

    // A model's write_file call changes a file.
    let (status, agent) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "model", "engine": fake.engine(json!({}))}),
    );
    assert_eq!(status, 201, "{agent}");
    fake.push(tool_reply(&[(
        "w1",
        "write_file",
        json!({"path": "notes.txt", "content": "hi"}),
    )]));
    fake.push(text_reply("saved", (10, 2, 0)));
    let r = create_v2(&s, json!({"prompt": "save a note", "harness": "openai"}));
    assert_eq!(r["harness"], "openai");
    let id = r["id"].as_str().unwrap();
    let evs = wait_runs(&s, id, 1);
    assert!(evs.iter().all(|e| e["engine"] == "openai"));
    let changed = data_of(&evs, "file.changed");
    assert_eq!(changed["path"], "notes.txt");
    assert_eq!(changed["operation"], "update");
    assert_eq!(data_of(&evs, "tool.completed")["kind"], "edit");
    let usage = data_of(&evs, "usage.updated");
    assert_eq!(usage["total"]["total_tokens"], 25);
    check_runs(&evs);
}

/// `usage.updated` and the record's `tokens.model` name the model the endpoint said answered
/// (the fake names itself `fake` in every chunk), not the one asked for (`fake-model`): live on
/// the stream, in the list, and in the record.
#[test]
fn usage_names_the_model_the_endpoint_reported() {
    let fake = FakeOpenAi::start();
    let s = Server::start_with_config(&format!(
        "[policy]\nmodel_endpoints = [{:?}]\n",
        fake.base_url
    ));
    let (status, agent) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "model", "engine": fake.engine(json!({}))}),
    );
    assert_eq!(status, 201, "{agent}");
    fake.hold_streams();
    fake.push(text_reply("first", (10, 2, 0)));
    let r = create_v2(&s, json!({"prompt": "hi", "harness": "openai"}));
    let id = r["id"].as_str().unwrap().to_owned();
    assert_eq!(r["tokens"]["model"], "", "no model answered yet");
    let live = stream(&s, &id, "?after=0", None);
    fake.release();
    let frames = read_runs(&live, 1);
    let usage = frames
        .iter()
        .find(|f| f.event.as_deref() == Some("usage.updated"))
        .expect("a usage.updated frame");
    assert_eq!(usage.data["data"]["model"], "fake", "{}", usage.data);
    assert_eq!(fake.chats()[0].body["model"], "fake-model");
    let evs = wait_runs(&s, &id, 1);
    assert_eq!(data_of(&evs, "usage.updated")["model"], "fake");
    assert_eq!(record(&s, &id)["tokens"]["model"], "fake");
}

#[test]
fn the_budget_ends_the_run_and_refuses_messages_until_raised() {
    let fake = FakeOpenAi::start();
    let s = Server::start_with_config(&format!(
        "[policy]\nmodel_endpoints = [{:?}]\n",
        fake.base_url
    ));
    // $10,000 per million tokens: a 150-token call costs 150 cents.
    let engine =
        fake.engine(json!({"prices": {"fake-model": {"input": 10000.0, "output": 10000.0}}}));
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "priced", "engine": engine}),
    );
    assert_eq!(status, 201, "{v}");
    // The model answers and asks for a tool; that call already spends the budget, so the answer
    // is kept, no tool runs and no second call is made.
    let Reply::Stream { mut chunks, .. } = tool_reply(&[("t1", "list_dir", json!({}))]) else {
        unreachable!("tool_reply streams")
    };
    chunks.insert(0, content_chunk("Let me look."));
    *chunks.last_mut().expect("the usage chunk") = usage_chunk((100, 50, 0));
    fake.push(Reply::Stream {
        chunks,
        delay: Duration::ZERO,
        end: End::Done,
    });
    let r = create_v2(
        &s,
        json!({"prompt": "go", "harness": "openai", "budget": {"cents": 100}}),
    );
    let id = r["id"].as_str().unwrap().to_owned();
    assert_eq!(r["budget"], json!({"cents": 100, "source": "run"}));
    let evs = wait_runs(&s, &id, 1);
    let failed = data_of(&evs, "run.failed");
    assert_eq!(failed["code"], "budget_hit");
    assert_eq!(failed["retryable"], false);
    assert_eq!(
        of_type(&evs, "message.completed").last().unwrap()["data"]["text"],
        "Let me look."
    );
    assert_eq!(fake.chats().len(), 1);
    assert!(
        of_type(&evs, "tool.started").is_empty(),
        "{:?}",
        types(&evs)
    );
    let r = record(&s, &id);
    assert_eq!(r["exit_status"], "budget_hit");
    assert_eq!(r["status"], "error");
    assert_eq!(r["cost"]["total"], 150);
    assert_eq!(r["cost"]["llm"], 150);
    assert_eq!(r["tokens"]["input"], 100);
    assert_eq!(r["tokens"]["output"], 50);
    assert_eq!(r["prompting"]["enabled"], false);

    for (url, body) in [
        (
            s.sessions_url(&format!("/{id}/messages")),
            json!({"prompt": "more"}),
        ),
        (
            v2(&s, &format!("/{id}/messages")),
            json!({"prompt": "more"}),
        ),
    ] {
        let (status, v) = s.post(&url, &body);
        assert_eq!(status, 409, "{url}: {v}");
        assert_eq!(v["error"], "budget_hit");
    }
    assert_eq!(
        s.history_all(&id)
            .iter()
            .filter(|e| e["event"]["type"] == "prompt_submitted")
            .count(),
        1
    );

    let (status, r) = s.patch(
        &v2(&s, &format!("/{id}")),
        &json!({"budget": {"cents": 1000}}),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["prompting"]["enabled"], true);
    fake.push(text_reply("done now", (100, 50, 0)));
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "more"}),
    );
    assert_eq!(status, 200, "{v}");
    let evs = wait_runs(&s, &id, 2);
    assert_eq!(of_type(&evs, "run.completed").len(), 1);
    check_runs(&evs);
    let r = record(&s, &id);
    assert_eq!(r["exit_status"], "completed");
    assert_eq!(r["cost"]["total"], 300);
}

#[test]
fn continuation_handoff_and_resume() {
    let s = Server::start();
    let parent = create_v2(&s, json!({"prompt": "/reply the answer is 42"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_runs(&s, &parent, 1);
    let reply_of = |id: &str| {
        let evs = wait_runs(&s, id, 1);
        of_type(&evs, "message.completed")
            .into_iter()
            .rev()
            .find(|e| e["data"]["role"] == "assistant")
            .map(|e| e["data"]["text"].as_str().unwrap().to_owned())
            .unwrap()
    };

    let c = create_v2(
        &s,
        json!({"prompt": "what was it?", "parent": {"kind": "continuation", "session_id": parent}}),
    );
    assert_eq!(
        c["parent"],
        json!({"kind": "continuation", "session_id": parent, "replayed_from_session_id": null})
    );
    assert_eq!(
        c["prompt"], "what was it?",
        "the record keeps the caller's prompt"
    );
    let seen = reply_of(c["id"].as_str().unwrap());
    assert!(
        seen.contains("the answer is 42") && seen.ends_with("what was it?"),
        "{seen}"
    );
    let p = record(&s, &parent);
    assert_eq!(
        p["session_state"], "idle",
        "a continuation leaves its parent open"
    );
    assert_eq!(p["prompting"]["enabled"], true);

    let h = create_v2(
        &s,
        json!({"prompt": "take over", "parent": {"kind": "handoff", "session_id": parent}}),
    );
    let hid = h["id"].as_str().unwrap();
    assert!(reply_of(hid).contains("the answer is 42"));
    let p = record(&s, &parent);
    assert_eq!(p["session_state"], "closed");
    assert_eq!(p["surface"]["session"], "closed");
    assert_eq!(p["prompting"]["enabled"], false);
    assert_eq!(p["prompting"]["blocked_reason"], "closed");
    assert!(p["prompting"]["detail"].as_str().unwrap().contains(hid));
    for url in [
        s.sessions_url(&format!("/{parent}/messages")),
        v2(&s, &format!("/{parent}/messages")),
    ] {
        let (status, v) = s.post(&url, &json!({"prompt": "still there?"}));
        assert_eq!(status, 409, "{v}");
        assert_eq!(v["error"], "session_closed");
    }

    let talk = create_v2(&s, json!({"prompt": "/reply first answer"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    wait_runs(&s, &talk, 1);
    let (status, _) = s.post(
        &s.sessions_url(&format!("/{talk}/messages/wait")),
        &json!({"prompt": "second question", "clientRequestId": new_uuid()}),
    );
    assert_eq!(status, 200);
    let r = create_v2(
        &s,
        json!({"prompt": "go on", "parent": {"kind": "resume", "session_id": talk}}),
    );
    assert_eq!(r["parent"]["replayed_from_session_id"], json!(talk));
    assert_eq!(r["parent"]["kind"], "resume");
    let seen = reply_of(r["id"].as_str().unwrap());
    for line in [
        "[user] /reply first answer",
        "[assistant] first answer",
        "[user] second question",
        "[assistant] echo: second question",
    ] {
        assert!(
            seen.contains(line),
            "the resumed session sees {line:?}: {seen}"
        );
    }
    assert_eq!(record(&s, &talk)["session_state"], "idle");
}

#[test]
fn snapshot_frames_only_when_asked() {
    let s = Server::start();
    let id = create_v2(&s, json!({"prompt": "/slow 300\n/reply a\n/reply b"}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let with = stream(&s, &id, "?after=0&snapshots=true", None);
    let without = stream(&s, &id, "?after=0", None);
    let frames = read_until(&with, "the snapshot of the finished session", |f| {
        f.event.as_deref() == Some("session/snapshot") && f.data["status"] == "completed"
    });
    assert!(
        frames
            .iter()
            .any(|f| f.event.as_deref() == Some("run.completed"))
    );
    assert_eq!(frames.last().unwrap().data["exit_status"], "completed");
    let snapshots: Vec<&SseFrame> = frames
        .iter()
        .filter(|f| f.event.as_deref() == Some("session/snapshot"))
        .collect();
    assert!(
        !snapshots.is_empty(),
        "a snapshot when the stream turns live"
    );
    assert!(snapshots.iter().all(|f| f.data["id"] == json!(id)));
    // Each snapshot is a change of status.
    let states: Vec<String> = snapshots
        .iter()
        .map(|f| format!("{}/{}", f.data["status"], f.data["session_state"]))
        .collect();
    assert!(states.windows(2).all(|w| w[0] != w[1]), "{states:?}");
    let plain = read_runs(&without, 1);
    assert!(
        plain
            .iter()
            .all(|f| f.event.as_deref() != Some("session/snapshot"))
    );
}

#[test]
fn command_agents_name_their_harness_and_codex_writes_files() {
    let cli = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .display()
        .to_string();
    let s = Server::start_with_config(&format!(
        "[policy]\nprograms = [{:?}]\n",
        format!("{cli}/fake-cli.sh")
    ));
    for (slug, protocol, fixture, harness, engine) in [
        (
            "claude",
            "claude",
            "claude-stream.jsonl",
            "claude_code",
            "claude_code",
        ),
        ("codex", "codex", "codex-exec.jsonl", "codex", "codex_cli"),
    ] {
        let (status, v) = s.post(
            &s.url(&format!("/v1/ws/{WS}/agents")),
            &json!({"slug": slug, "engine": {
                "kind": "command", "program": format!("{cli}/fake-cli.sh"), "protocol": protocol,
                "env": {"FAKE_FIXTURE": format!("{cli}/{fixture}")}
            }}),
        );
        assert_eq!(status, 201, "{v}");
        let r = create_v2(&s, json!({"prompt": "count the files", "harness": harness}));
        assert_eq!(r["harness"], harness);
        let id = r["id"].as_str().unwrap();
        let evs = wait_runs(&s, id, 1);
        check_runs(&evs);
        assert!(evs.iter().all(|e| e["engine"] == engine), "{engine}");
        if slug == "codex" {
            let changed = data_of(&evs, "file.changed");
            assert_eq!(changed["path"], "notes/count.txt");
            assert_eq!(changed["operation"], "update");
            assert!(!of_type(&evs, "reasoning.completed").is_empty());
            assert!(!of_type(&evs, "plan.updated").is_empty());
        }
    }
}
