//! Retention on the real server (and on PostgreSQL with `SESSIOND_TEST_BACKEND=postgres`), with
//! short configured times: the sweeper removes idle sessions through the deletion path (every
//! family answers 404, streams end), keeps pinned sessions, default sessions and sessions whose
//! turn runs, keeps the newest `keepLatest` per agent, archives before deleting with the
//! `archive` action; the dry run (HTTP and `sessiond retention --dry-run`) lists what would go
//! and removes nothing; `/metrics` counts; bad policies and pins are refused with a 4xx that
//! changes nothing; only owners set a policy; other workspaces see none of it.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// A sweep every 100 ms, in steps of one session.
const FAST: &str = "[retention]\nsweep_interval_ms = 100\nbatch = 1\n";
/// No sweep during a test.
const NEVER: &str = "[retention]\nsweep_interval_ms = 86400000\n";
/// About 0.4 s, in days.
const SHORT_IDLE_DAYS: f64 = 0.4 / 86_400.0;

fn ws_url(s: &Server, rest: &str) -> String {
    s.url(&format!("/v1/ws/{WS}{rest}"))
}

fn set_policy(s: &Server, body: Value) -> Value {
    let (status, v) = s.put(&ws_url(s, "/retention"), &body);
    assert_eq!(status, 200, "{body}: {v}");
    v
}

fn pin(s: &Server, id: &str, pinned: bool) {
    let (status, v) = s.put(
        &s.sessions_url(&format!("/{id}/pin")),
        &json!({ "pinned": pinned }),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["pinned"], pinned);
}

fn exists(s: &Server, id: &str) -> bool {
    let (status, v) = s.get(&s.sessions_url(&format!("/{id}")));
    assert!(status == 200 || status == 404, "{status}: {v}");
    status == 200
}

fn finished(s: &Server, prompt: &str) -> String {
    let id = s.create_prompt(prompt);
    s.wait_terminal(&id, 1);
    id
}

fn wait_gone(s: &Server, id: &str) {
    poll_until(
        &format!("session {id} removed"),
        Duration::from_secs(30),
        || (!exists(s, id)).then_some(()),
    );
}

fn removed_metric(s: &Server, action: &str) -> f64 {
    s.metric(&format!(
        "sessiond_retention_sessions_removed_total{{action=\"{action}\"}}"
    ))
    .unwrap_or(0.0)
}

#[test]
fn idle_sessions_go_and_pinned_default_and_running_ones_stay() {
    let s = Server::start_with_config(FAST);
    let old = finished(&s, "/reply old one");
    let older = finished(&s, "/reply old two");
    let kept = finished(&s, "/reply pinned");
    pin(&s, &kept, true);
    let (status, v) = s.post(
        &s.url(&format!(
            "/v1/ws/{WS}/agents/root/sessions/default/messages"
        )),
        &json!({"prompt": "/reply the default chat"}),
    );
    assert_eq!(status, 200, "{v}");
    let default = v["session"]["sessionId"].as_str().unwrap().to_owned();
    s.wait_terminal(&default, 1);
    let running = s.create_prompt("/await_steer\n/reply late");
    s.wait_for_event(&running, &["turn_started"], 1, Duration::from_secs(20));
    let stream = s.sse(&old, None, None);
    let before = removed_metric(&s, "delete");

    let p = set_policy(&s, json!({"idleDays": SHORT_IDLE_DAYS}));
    assert_eq!(p["enabled"], true);
    assert_eq!(p["action"], "delete");
    wait_gone(&s, &old);
    wait_gone(&s, &older);
    assert!(
        stream.ends_within(Duration::from_secs(10)),
        "the stream ends"
    );
    // Every face sees it deleted.
    let (status, _) = s.get(&s.url(&format!("/v2/sessions/{old}")));
    assert_eq!(status, 404);
    let (status, _) = s.get(&s.sessions_url(&format!("/{old}/history")));
    assert_eq!(status, 404);

    // Sweeps go on; the pinned, the default and the running session stay through them.
    let sweeps = s.metric("sessiond_retention_sweeps_total").unwrap_or(0.0);
    poll_until("three more sweeps", Duration::from_secs(20), || {
        (s.metric("sessiond_retention_sweeps_total").unwrap_or(0.0) >= sweeps + 3.0).then_some(())
    });
    assert!(exists(&s, &kept), "pinned");
    assert!(exists(&s, &default), "the agent's default session");
    assert!(exists(&s, &running), "a running turn");
    assert!(removed_metric(&s, "delete") >= before + 2.0);

    // Once its turn ends it is at rest, and idle it goes; unpinned, the other one too.
    let (status, _) = s.post(
        &s.sessions_url(&format!("/{running}/interrupt")),
        &json!({}),
    );
    assert_eq!(status, 200);
    wait_gone(&s, &running);
    let (status, v) = s.get(&s.sessions_url(&format!("/{kept}/pin")));
    assert_eq!((status, v["pinned"].clone()), (200, json!(true)));
    pin(&s, &kept, false);
    wait_gone(&s, &kept);
    assert!(
        exists(&s, &default),
        "the agent's default session is never removed"
    );
    assert!(removed_metric(&s, "delete") >= before + 4.0);
}

#[test]
fn keep_latest_is_per_agent_and_the_dry_run_removes_nothing() {
    let s = Server::start_with_config(NEVER);
    std::fs::create_dir_all(s.data_dir.join("drive").join(WS).join("proj")).unwrap();
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "proj", "anchor": "proj"}),
    );
    assert_eq!(status, 201, "{v}");
    let r1 = finished(&s, "/reply root one");
    let r2 = finished(&s, "/reply root two");
    let r3 = finished(&s, "/reply root three");
    let p1 = s.create(json!({"prompt": "/reply proj one", "cwd": "proj"}))["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.wait_terminal(&p1, 1);
    let p2 = s.create(json!({"prompt": "/reply proj two", "cwd": "proj"}))["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.wait_terminal(&p2, 1);
    s.wait_runner_idle();

    let (status, v) = s.get(&ws_url(&s, "/retention/preview"));
    assert_eq!(status, 200);
    assert_eq!(v["policy"]["enabled"], false);
    assert_eq!(v["sessions"], json!([]));

    set_policy(&s, json!({"keepLatest": 2}));
    let (status, v) = s.get(&ws_url(&s, "/retention/preview"));
    assert_eq!(status, 200, "{v}");
    let listed: Vec<&str> = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![r1.as_str()], "only root's oldest: {v}");
    assert_eq!(v["sessions"][0]["agent"], "root");

    // Both rules: idle and beyond the newest one of each agent.
    set_policy(
        &s,
        json!({"idleDays": SHORT_IDLE_DAYS, "keepLatest": 1, "action": "archive"}),
    );
    poll_until("the sessions idle", Duration::from_secs(10), || {
        let (_, v) = s.get(&ws_url(&s, "/retention/preview"));
        (v["sessions"].as_array().unwrap().len() == 3).then_some(())
    });
    let out = cli(&s.data_dir, &["retention", "--dry-run"], None);
    for id in [&r1, &r2, &p1] {
        assert!(out.contains(id.as_str()), "{id} listed: {out}");
    }
    for id in [&r3, &p2] {
        assert!(!out.contains(id.as_str()), "{id} kept: {out}");
    }
    assert!(out.contains("3 session(s) would be removed"), "{out}");
    let out = cli(
        &s.data_dir,
        &["retention", "--dry-run", "--workspace", WS],
        None,
    );
    assert!(out.contains(&r1), "{out}");
    // Nothing was removed.
    for id in [&r1, &r2, &r3, &p1, &p2] {
        assert!(exists(&s, id), "{id}");
    }
    // `--dry-run` is required: the command never removes.
    let mut cmd = sessiond_command();
    cmd.args(["retention", "--data-dir"])
        .arg(&s.data_dir)
        .args(database_args(&s.data_dir));
    assert!(!run_bounded(cmd, Duration::from_secs(30)).status.success());

    // Off again.
    let v = set_policy(&s, json!({"idleDays": null, "keepLatest": null}));
    assert_eq!(v["enabled"], false);
    let (_, v) = s.get(&ws_url(&s, "/retention/preview"));
    assert_eq!(v["sessions"], json!([]));
}

#[test]
fn the_archive_action_writes_an_archive_that_imports_then_deletes() {
    let s = Server::start_with_config(FAST);
    let id = finished(&s, "/reply worth keeping somewhere");
    s.wait_runner_idle();
    let history = s.history_all(&id);
    let before = removed_metric(&s, "archive");
    set_policy(
        &s,
        json!({"idleDays": SHORT_IDLE_DAYS, "action": "archive"}),
    );
    wait_gone(&s, &id);
    assert!(removed_metric(&s, "archive") >= before + 1.0);
    let dir = s.data_dir.join("retention").join(WS);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the archive folder")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let archive = std::fs::read(&files[0]).unwrap();

    // The archive brings it back, elsewhere.
    let other = Server::start();
    let resp = http_builder()
        .build()
        .unwrap()
        .post(other.url(&format!("/v1/ws/{WS}/import")))
        .bearer_auth(&other.token)
        .header("content-type", "application/x-tar")
        .body(archive)
        .send()
        .unwrap();
    let (status, v) = into_json(resp);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["imported"], json!([id]));
    assert_eq!(other.history_all(&id), history);
}

#[test]
fn bad_policies_and_pins_are_refused_and_only_owners_set_a_policy() {
    let s = Server::start_with_config(NEVER);
    let id = finished(&s, "/reply here");
    set_policy(&s, json!({"idleDays": 30, "keepLatest": 5}));
    let current = s.get(&ws_url(&s, "/retention")).1;
    assert_eq!(
        current,
        json!({"enabled": true, "idleDays": 30.0, "keepLatest": 5, "action": "delete"})
    );
    for bad in [
        json!({"idleDays": -1}),
        json!({"idleDays": 0}),
        json!({"idleDays": "30"}),
        json!({"idleDays": 100000}),
        json!({"keepLatest": 0}),
        json!({"keepLatest": 1.5}),
        json!({"idleDays": 1, "action": "burn"}),
        json!({"idleDays": 1, "when": "now"}),
        json!([1, 2]),
    ] {
        let (status, v) = s.put(&ws_url(&s, "/retention"), &bad);
        assert_eq!(status, 400, "{bad}: {v}");
        assert_eq!(
            s.get(&ws_url(&s, "/retention")).1,
            current,
            "{bad} changed nothing"
        );
    }
    for bad in [
        json!({"pinned": "yes"}),
        json!({}),
        json!({"pinned": true, "x": 1}),
    ] {
        let (status, v) = s.put(&s.sessions_url(&format!("/{id}/pin")), &bad);
        assert_eq!(status, 400, "{bad}: {v}");
    }
    let (status, v) = s.get(&s.sessions_url(&format!("/{id}/pin")));
    assert_eq!((status, v), (200, json!({"pinned": false})));
    let (status, _) = s.put(
        &s.sessions_url(&format!("/{}/pin", new_uuid())),
        &json!({"pinned": true}),
    );
    assert_eq!(status, 404);

    // A member reads the policy and pins, but does not set the policy.
    let email = "member@default.test.local";
    cli(
        &s.data_dir,
        &[
            "user",
            "create",
            "--email",
            email,
            "--password-stdin",
            "--workspace",
            WS,
            "--role",
            "member",
        ],
        Some("another-password-123\n"),
    );
    let member = cli(
        &s.data_dir,
        &[
            "token",
            "create",
            "--user",
            email,
            "--workspace",
            WS,
            "--name",
            "m",
            "--scope",
            "sessions",
        ],
        None,
    );
    let client = http_builder().build().unwrap();
    let resp = client
        .put(ws_url(&s, "/retention"))
        .bearer_auth(&member)
        .json(&json!({"idleDays": 1}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 403);
    let resp = client
        .get(ws_url(&s, "/retention"))
        .bearer_auth(&member)
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(s.get(&ws_url(&s, "/retention")).1, current);

    // Another workspace sees none of it.
    let other = workspace_member_key(&s.data_dir, "other", "owner");
    for url in [
        ws_url(&s, "/retention"),
        ws_url(&s, "/retention/preview"),
        s.sessions_url(&format!("/{id}/pin")),
    ] {
        let resp = client.get(&url).bearer_auth(&other).send().unwrap();
        assert_eq!(resp.status().as_u16(), 404, "{url}");
    }
    let resp = client
        .put(s.url(&format!("/v1/ws/other/agent/sessions/{id}/pin")))
        .bearer_auth(&other)
        .json(&json!({"pinned": true}))
        .send()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let resp = client
        .get(s.url("/v1/ws/other/retention"))
        .bearer_auth(&other)
        .send()
        .unwrap();
    let (status, v) = into_json(resp);
    assert_eq!((status, v["enabled"].clone()), (200, json!(false)));
}
