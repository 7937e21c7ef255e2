//! Agent run schedules over raw HTTP (`/agentex/agents/{agent_id}/schedules/...`): every route,
//! the `RunSchedule` shape of the seed, bad input (a clear 4xx that changes nothing), auth and
//! workspace isolation, ticks that make sessions exactly once across SIGKILLs, and the missed-tick
//! rule across a restart. The official client drives the same routes in
//! `tests/python/agentex_schedules/`.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

use common::{Server, database_args, load_schema, poll_until, sql_text};
use serde_json::{Value, json};

/// Ticks as often as once a second, and few schedules per agent (the limit is under test).
const CONFIG: &str = "[schedules]\nmin_interval_seconds = 1\nmax_per_agent = 3\n";
const WAIT: Duration = Duration::from_secs(30);

fn validate(schema_file: &str, instance: &Value) {
    let schema = load_schema(&format!("agentex/{schema_file}"));
    let v = jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("schema compiles");
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{schema_file}: {errors:#?}\n{instance:#}"
    );
}

fn assert_schedule(v: &Value) {
    validate("RunSchedule.json", v);
}

fn assert_list(v: &Value) {
    validate("ScheduleListResponse.json", v);
    for s in v["run_schedules"].as_array().expect("run_schedules") {
        assert_schedule(s);
    }
    assert_eq!(
        v["total"].as_u64(),
        Some(v["run_schedules"].as_array().map_or(0, |a| a.len() as u64)),
        "total is the number returned"
    );
}

/// A new agent of the default workspace; returns its id.
fn new_agent(s: &Server, slug: &str) -> String {
    let (status, v) = s.post(
        &s.url("/v1/ws/default/agents"),
        &json!({"slug": slug, "name": slug}),
    );
    assert_eq!(status, 201, "{v}");
    v["id"].as_str().expect("id").to_owned()
}

fn sched(s: &Server, agent: &str, rest: &str) -> String {
    s.url(&format!("/agentex/agents/{agent}/schedules{rest}"))
}

fn create(s: &Server, agent: &str, body: Value) -> Value {
    let (status, v) = s.post(&sched(s, agent, ""), &body);
    assert_eq!(status, 200, "create: {v}");
    assert_schedule(&v);
    v
}

fn get(s: &Server, agent: &str, id: &str) -> Value {
    let (status, v) = s.get(&sched(s, agent, &format!("/{id}")));
    assert_eq!(status, 200, "{v}");
    assert_schedule(&v);
    v
}

/// Sessions of an agent (newest first) whose title says schedule `name` made them.
fn runs_of(s: &Server, agent: &str, name: &str) -> Vec<Value> {
    let (status, v) = s.get(&s.url(&format!(
        "/v1/ws/default/agent/sessions?agentId={agent}&limit=100"
    )));
    assert_eq!(status, 200, "{v}");
    v["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .filter(|x| {
            x["title"]
                .as_str()
                .is_some_and(|t| t.starts_with(&format!("{name} · ")))
        })
        .cloned()
        .collect()
}

fn error_code(v: &Value) -> &str {
    v["error"].as_str().unwrap_or("")
}

fn cli(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessiond"));
    cmd.args(args)
        .arg("--data-dir")
        .arg(dir)
        .args(database_args(dir))
        .env_remove("SESSIOND_DATABASE_URL")
        .env("SESSIOND_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().expect("spawn cli");
    if let Some(input) = stdin {
        use std::io::Write;
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    let out = child.wait_with_output().expect("cli");
    assert!(
        out.status.success(),
        "sessiond {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned()
}

fn http_as(key: &str) -> reqwest::blocking::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().expect("header"),
    );
    reqwest::blocking::Client::builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

fn status_json(r: reqwest::blocking::Response) -> (u16, Value) {
    let status = r.status().as_u16();
    let text = r.text().expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[test]
fn every_route_answers_the_seed_shape_and_does_what_it_says() {
    let s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "reporter");
    let start = "2030-03-08T00:00:00Z";
    let created = create(
        &s,
        &agent,
        json!({
            "name": "daily-report",
            "description": "The morning report",
            "cron_expression": "0 9 * * *",
            "timezone": "America/New_York",
            "start_at": start,
            "initial_input": {"content": "Write the morning report", "author": "user", "type": "text"},
            "task_params": {"depth": 2},
            "task_metadata": {"team": "ops"},
        }),
    );
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(created["agent_id"], agent);
    assert_eq!(created["state"], "ACTIVE");
    assert_eq!(created["paused"], false);
    assert_eq!(created["timezone"], "America/New_York");
    assert_eq!(created["start_at"], "2030-03-08T00:00:00.000Z");
    assert_eq!(created["live_data_available"], true);
    assert_eq!(created["num_actions_taken"], 0);
    assert_eq!(created["task_params"], json!({"depth": 2}));
    assert_eq!(created["initial_input_method"], "message/send");
    assert_eq!(created["creator_principal"]["principal_type"], "user");
    // 09:00 New York: 14:00Z before the DST change of 2030-03-10, 13:00Z after it.
    let next: Vec<&str> = created["next_action_times"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(next.len(), 10);
    assert_eq!(
        &next[..4],
        [
            "2030-03-08T14:00:00.000Z",
            "2030-03-09T14:00:00.000Z",
            "2030-03-10T13:00:00.000Z",
            "2030-03-11T13:00:00.000Z"
        ]
    );

    // Retrieve by id and by name.
    assert_eq!(get(&s, &agent, &id)["name"], "daily-report");
    let (status, by_name) = s.get(&sched(&s, &agent, "/name/daily-report"));
    assert_eq!(status, 200);
    assert_schedule(&by_name);
    assert_eq!(by_name["id"], id);

    // List: live fields only on request.
    let (status, list) = s.get(&sched(&s, &agent, ""));
    assert_eq!(status, 200);
    assert_list(&list);
    assert_eq!(list["total"], 1);
    assert_eq!(list["run_schedules"][0]["live_data_available"], Value::Null);
    assert!(list["run_schedules"][0].get("next_action_times").is_none());
    let (_, live) = s.get(&sched(&s, &agent, "?include_live=true&limit=5"));
    assert_list(&live);
    assert_eq!(live["run_schedules"][0]["live_data_available"], true);
    assert_eq!(
        live["run_schedules"][0]["next_action_times"][0],
        "2030-03-08T14:00:00.000Z"
    );

    // Skip the first tick, then take the skip back.
    let (status, skipped) = s.post(
        &sched(&s, &agent, &format!("/{id}/skip")),
        &json!({"scheduled_time": "2030-03-08T09:00:00-05:00"}),
    );
    assert_eq!(status, 200, "{skipped}");
    assert_schedule(&skipped);
    assert_eq!(
        skipped["skipped_action_times"],
        json!(["2030-03-08T14:00:00.000Z"])
    );
    assert_eq!(skipped["next_action_times"][0], "2030-03-09T14:00:00.000Z");
    let (status, unskipped) = s.post(
        &sched(&s, &agent, &format!("/{id}/unskip")),
        &json!({"scheduled_time": "2030-03-08T14:00:00Z"}),
    );
    assert_eq!(status, 200, "{unskipped}");
    assert_eq!(unskipped["skipped_action_times"], json!([]));
    assert_eq!(
        unskipped["next_action_times"][0],
        "2030-03-08T14:00:00.000Z"
    );

    // Pause and resume, by id and by name; a note is accepted, a body is optional.
    let (status, paused) = s.post(
        &sched(&s, &agent, &format!("/{id}/pause")),
        &json!({"note": "holiday"}),
    );
    assert_eq!(status, 200, "{paused}");
    assert_schedule(&paused);
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["state"], "PAUSED");
    assert_eq!(paused["next_action_times"], json!([]));
    let (status, resumed) = s.post_raw(&sched(&s, &agent, "/name/daily-report/resume"), "");
    assert_eq!(status, 200, "{resumed}");
    assert_eq!(resumed["state"], "ACTIVE");
    assert_eq!(resumed["next_action_times"][0], "2030-03-08T14:00:00.000Z");
    let (status, v) = s.post(&sched(&s, &agent, "/name/daily-report/pause"), &json!({}));
    assert_eq!((status, &v["paused"]), (200, &json!(true)));
    let (status, v) = s.post(&sched(&s, &agent, &format!("/{id}/resume")), &json!({}));
    assert_eq!((status, &v["paused"]), (200, &json!(false)));

    // Update by id (cadence) and by name (rename); setting an interval clears the cron.
    let (status, updated) = s.patch(
        &sched(&s, &agent, &format!("/{id}")),
        &json!({"cron_expression": "30 17 * * MON-FRI", "description": null}),
    );
    assert_eq!(status, 200, "{updated}");
    assert_schedule(&updated);
    assert_eq!(updated["cron_expression"], "30 17 * * MON-FRI");
    assert_eq!(updated["description"], Value::Null);
    // 2030-03-08 is a Friday: 17:30 EST is 22:30Z; the next is Monday 2030-03-11, 17:30 EDT.
    assert_eq!(updated["next_action_times"][0], "2030-03-08T22:30:00.000Z");
    assert_eq!(updated["next_action_times"][1], "2030-03-11T21:30:00.000Z");
    let (status, renamed) = s.patch(
        &sched(&s, &agent, "/name/daily-report"),
        &json!({"name": "evening-report", "interval_seconds": 3600}),
    );
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(renamed["name"], "evening-report");
    assert_eq!(renamed["cron_expression"], Value::Null);
    assert_eq!(renamed["interval_seconds"], 3600);
    let (status, _) = s.get(&sched(&s, &agent, "/name/daily-report"));
    assert_eq!(status, 404);

    // Trigger by id and by name: each makes a session named after the schedule.
    let (status, triggered) = s.post_raw(&sched(&s, &agent, &format!("/{id}/trigger")), "");
    assert_eq!(status, 200, "{triggered}");
    assert_schedule(&triggered);
    assert_eq!(triggered["num_actions_taken"], 1);
    assert!(triggered["last_action_time"].is_string());
    let (status, triggered) = s.post(
        &sched(&s, &agent, "/name/evening-report/trigger"),
        &json!({}),
    );
    assert_eq!(status, 200, "{triggered}");
    assert_eq!(triggered["num_actions_taken"], 2);
    let runs = runs_of(&s, &agent, "evening-report");
    assert_eq!(runs.len(), 2, "{runs:#?}");
    assert!(
        runs.iter()
            .all(|r| r["title"].as_str().unwrap().ends_with("(run now)"))
    );

    // Delete by name and by id.
    let second = create(
        &s,
        &agent,
        json!({"name": "second", "interval_seconds": 60, "initial_input": {"content": "x"}}),
    );
    let (status, deleted) = s.delete(&sched(&s, &agent, "/name/second"));
    assert_eq!(status, 200, "{deleted}");
    validate("DeleteResponse.json", &deleted);
    assert_eq!(deleted["id"], second["id"]);
    let (status, deleted) = s.delete(&sched(&s, &agent, &format!("/{id}")));
    assert_eq!(status, 200, "{deleted}");
    validate("DeleteResponse.json", &deleted);
    assert_eq!(deleted["id"], id);
    let (status, v) = s.get(&sched(&s, &agent, &format!("/{id}")));
    assert_eq!((status, error_code(&v)), (404, "not_found"));
    let (_, list) = s.get(&sched(&s, &agent, ""));
    assert_eq!(list["total"], 0);
    // The sessions the schedule made stay.
    assert_eq!(runs_of(&s, &agent, "evening-report").len(), 2);
}

#[test]
fn bad_input_gets_a_clear_4xx_and_changes_nothing() {
    let s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "strict");
    let good = create(
        &s,
        &agent,
        json!({"name": "kept", "interval_seconds": 600, "initial_input": {"content": "hi"}}),
    );
    let id = good["id"].as_str().unwrap().to_owned();
    let input = json!({"content": "hi"});
    let bad_creates = [
        (json!({"name": "a", "initial_input": input}), "no cadence"),
        (
            json!({"name": "a", "cron_expression": "* * * * *", "interval_seconds": 60, "initial_input": input}),
            "both cadences",
        ),
        (
            json!({"name": "a", "cron_expression": "0 9 * *", "initial_input": input}),
            "4 fields",
        ),
        (
            json!({"name": "a", "cron_expression": "0 0 9 * * *", "initial_input": input}),
            "seconds field",
        ),
        (
            json!({"name": "a", "cron_expression": "0 0 30 2 *", "initial_input": input}),
            "never matches",
        ),
        (
            json!({"name": "a", "cron_expression": "0 9 * * *", "timezone": "Mars/Base", "initial_input": input}),
            "unknown zone",
        ),
        (
            json!({"name": "a", "interval_seconds": 0, "initial_input": input}),
            "zero interval",
        ),
        (
            json!({"name": "a", "interval_seconds": 1.5, "initial_input": input}),
            "fractional interval",
        ),
        (
            json!({"name": "Bad Name", "interval_seconds": 60, "initial_input": input}),
            "bad name",
        ),
        (
            json!({"name": "a".repeat(65), "interval_seconds": 60, "initial_input": input}),
            "long name",
        ),
        (
            json!({"name": "-a", "interval_seconds": 60, "initial_input": input}),
            "leading hyphen",
        ),
        (
            json!({"name": "a", "interval_seconds": 60}),
            "no initial input",
        ),
        (
            json!({"name": "a", "interval_seconds": 60, "initial_input": {"content": "  "}}),
            "blank input",
        ),
        (
            json!({"name": "a", "interval_seconds": 60, "initial_input": {"content": "x", "author": "system"}}),
            "bad author",
        ),
        (
            json!({"name": "a", "interval_seconds": 60, "initial_input": {"content": "x", "type": "image"}}),
            "bad type",
        ),
        (
            json!({"name": "a", "interval_seconds": 60, "initial_input": input, "start_at": "next tuesday"}),
            "bad start_at",
        ),
        (
            json!({"name": "a", "interval_seconds": 60, "initial_input": input,
                   "start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}),
            "end before start",
        ),
        (
            json!({"name": "a", "interval_seconds": 60, "initial_input": input, "task_params": [1]}),
            "task_params not an object",
        ),
        (
            json!({"name": "a", "interval_seconds": 60, "initial_input": input,
                   "task_metadata": {"blob": "x".repeat(20_000)}}),
            "task_metadata too large",
        ),
        (
            json!({"name": "a", "interval_seconds": 60, "initial_input": input, "colour": "red"}),
            "unknown field",
        ),
    ];
    for (body, what) in &bad_creates {
        let (status, v) = s.post(&sched(&s, &agent, ""), body);
        assert_eq!(status, 400, "{what}: {v}");
        assert_eq!(error_code(&v), "invalid_request", "{what}: {v}");
        assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    }
    let (status, v) = s.post_raw(&sched(&s, &agent, ""), "{not json");
    assert_eq!(status, 400, "{v}");
    let (status, v) = s.post_raw(&sched(&s, &agent, ""), "[]");
    assert_eq!(status, 400, "{v}");

    // Name taken, then the per-agent limit (3).
    let (status, v) = s.post(
        &sched(&s, &agent, ""),
        &json!({"name": "kept", "interval_seconds": 60, "initial_input": input}),
    );
    assert_eq!((status, error_code(&v)), (409, "schedule_exists"), "{v}");
    for name in ["two", "three"] {
        create(
            &s,
            &agent,
            json!({"name": name, "interval_seconds": 600, "initial_input": input}),
        );
    }
    let (status, v) = s.post(
        &sched(&s, &agent, ""),
        &json!({"name": "four", "interval_seconds": 600, "initial_input": input}),
    );
    assert_eq!((status, error_code(&v)), (409, "schedule_limit"), "{v}");

    // Updates, skips and queries that cannot work.
    let one = sched(&s, &agent, &format!("/{id}"));
    let bad_updates = [
        json!({"cron_expression": "* * * * *", "interval_seconds": 60}),
        json!({"interval_seconds": null}),
        json!({"timezone": "Nowhere/Land"}),
        json!({"name": "UPPER"}),
        json!({"interval_seconds": 0}),
        json!({"paused": "yes"}),
        json!({"start_at": "2030-01-02T00:00:00Z", "end_at": "2030-01-01T00:00:00Z"}),
        json!({"surprise": 1}),
    ];
    for body in &bad_updates {
        let (status, v) = s.patch(&one, body);
        assert_eq!(status, 400, "{body}: {v}");
    }
    let (status, v) = s.patch(&one, &json!({"name": "two"}));
    assert_eq!((status, error_code(&v)), (409, "schedule_exists"), "{v}");
    for body in [
        json!({"scheduled_time": "2031-01-01T00:00:01Z"}),
        json!({"scheduled_time": "2001-01-01T00:00:00Z"}),
        json!({"scheduled_time": "soon"}),
        json!({}),
    ] {
        let (status, v) = s.post(&format!("{one}/skip"), &body);
        assert_eq!(status, 400, "{body}: {v}");
    }
    let (status, v) = s.post(&format!("{one}/pause"), &json!({"note": "n".repeat(1001)}));
    assert_eq!(status, 400, "{v}");
    let (status, v) = s.post(&format!("{one}/trigger"), &json!({"now": true}));
    assert_eq!(status, 400, "{v}");
    for q in ["?include_live=maybe", "?limit=0", "?limit=1001", "?limit=x"] {
        let (status, v) = s.get(&format!("{}{q}", sched(&s, &agent, "")));
        assert_eq!(status, 400, "{q}: {v}");
    }

    // Wrong methods and unknown schedules or agents.
    let r = s.http.put(&one).json(&json!({})).send().unwrap();
    assert_eq!(r.status().as_u16(), 405);
    assert_eq!(
        r.headers().get("allow").and_then(|v| v.to_str().ok()),
        Some("GET, PATCH, DELETE")
    );
    let (status, _) = s.get(&sched(&s, &agent, "/0190aaaa-0000-7000-8000-000000000000"));
    assert_eq!(status, 404);
    let (status, v) = s.get(&sched(&s, "0190aaaa-0000-7000-8000-000000000000", ""));
    assert_eq!((status, error_code(&v)), (404, "agent_not_found"));
    let (status, _) = s.get(&sched(&s, "not an id", ""));
    assert_eq!(status, 404);
    let (status, _) = s.get(&s.url("/agentex/nothing-here"));
    assert_eq!(status, 404);

    // Nothing above changed the schedule or made another.
    let after = get(&s, &agent, &id);
    for field in [
        "name",
        "interval_seconds",
        "paused",
        "skipped_action_times",
        "updated_at",
    ] {
        assert_eq!(after[field], good[field], "{field}");
    }
    let (_, list) = s.get(&sched(&s, &agent, ""));
    assert_eq!(list["total"], 3);
}

#[test]
fn credentials_scopes_and_workspaces_are_enforced() {
    let s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "guarded");
    let created = create(
        &s,
        &agent,
        json!({"name": "guarded", "interval_seconds": 600, "initial_input": {"content": "hi"}}),
    );
    let id = created["id"].as_str().unwrap();
    let list = sched(&s, &agent, "");

    let anonymous = reqwest::blocking::Client::new();
    let (status, v) = status_json(anonymous.get(&list).send().unwrap());
    assert_eq!((status, error_code(&v)), (401, "unauthorized"));

    let dir = s.data_dir.as_path();
    let reader = cli(
        dir,
        &[
            "token",
            "create",
            "--user",
            common::OWNER_EMAIL,
            "--scope",
            "sessions:read",
        ],
        None,
    );
    let reader = http_as(&reader);
    let (status, v) = status_json(reader.get(&list).send().unwrap());
    assert_eq!(status, 200, "a read-only key reads: {v}");
    for url in [
        format!("{list}/{id}/pause"),
        format!("{list}/{id}/trigger"),
        list.clone(),
    ] {
        let (status, v) = status_json(reader.post(&url).json(&json!({})).send().unwrap());
        assert_eq!((status, error_code(&v)), (403, "forbidden"), "{url}");
    }

    // Another workspace sees nothing of this one's agents or schedules, and this one nothing of
    // its own.
    let stranger = common::workspace_member_key(dir, "other", "owner");
    let stranger = http_as(&stranger);
    for url in [
        list.clone(),
        format!("{list}/{id}"),
        format!("{list}/name/guarded"),
    ] {
        let (status, v) = status_json(stranger.get(&url).send().unwrap());
        assert_eq!(status, 404, "{url}: {v}");
        assert!(!v.to_string().contains("guarded"), "{v}");
    }
    for url in [format!("{list}/{id}/trigger"), format!("{list}/{id}/pause")] {
        let (status, _) = status_json(stranger.post(&url).json(&json!({})).send().unwrap());
        assert_eq!(status, 404, "{url}");
    }
    let (status, _) = status_json(stranger.delete(format!("{list}/{id}")).send().unwrap());
    assert_eq!(status, 404);
    let after = get(&s, &agent, id);
    assert_eq!(after["num_actions_taken"], 0);
    assert_eq!(after["paused"], false);
}

#[test]
fn a_schedule_named_like_an_action_is_reachable_by_name() {
    let s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "naming");
    let created = create(
        &s,
        &agent,
        json!({"name": "pause", "interval_seconds": 600, "initial_input": {"content": "hi"}}),
    );
    let (status, v) = s.get(&sched(&s, &agent, "/name/pause"));
    assert_eq!((status, &v["id"]), (200, &created["id"]), "{v}");
    let (status, v) = s.post(&sched(&s, &agent, "/name/pause/pause"), &json!({}));
    assert_eq!((status, &v["paused"]), (200, &json!(true)), "{v}");
}

#[test]
fn an_interval_schedule_fires_sessions_with_its_input_as_its_creator() {
    let s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "ticker");
    let created = create(
        &s,
        &agent,
        json!({"name": "ping", "interval_seconds": 1, "initial_input": {"content": "Ping the service"},
               "task_params": {"target": "db"}, "task_metadata": {"team": "ops", "schedule_id": "mine"}}),
    );
    let id = created["id"].as_str().unwrap().to_owned();
    let session = poll_until("a tick's session", WAIT, || {
        runs_of(&s, &agent, "ping").pop()
    });
    let sid = session["id"].as_str().unwrap();
    // The session is an agent platform task named after the schedule and the tick, with the
    // schedule's params and its metadata, where the tick's own keys win.
    let (status, task) = s.get(&s.url(&format!("/agentex/tasks/{sid}")));
    assert_eq!(status, 200, "{task}");
    let meta = &task["task_metadata"];
    assert_eq!(task["params"], json!({"target": "db"}));
    assert_eq!(meta["team"], "ops");
    assert_eq!(meta["schedule_id"], id.as_str());
    assert_eq!(meta["schedule_name"], "ping");
    assert_eq!(meta["trigger_type"], "scheduled");
    let name = task["name"].as_str().unwrap();
    assert_eq!(
        name,
        format!("scheduled-run:{id}:{}", meta["fire_time"].as_str().unwrap())
    );
    let (status, by_name) = s.get(&s.url(&format!("/agentex/tasks/name/{name}")));
    assert_eq!((status, &by_name["id"]), (200, &task["id"]));
    let terminal = s.wait_terminal(sid, 0);
    assert_eq!(terminal["event"]["type"], "complete", "{terminal}");
    let events = s.history_all(sid);
    let prompt = events
        .iter()
        .find(|e| e["event"]["type"] == "prompt_submitted")
        .expect("prompt");
    assert_eq!(prompt["event"]["prompt"], "Ping the service");
    assert_eq!(prompt["event"]["sender"]["kind"], "user");
    assert_eq!(
        prompt["event"]["sender"]["userId"],
        created["creator_principal"]["user_id"]
    );
    let detail = s.detail(sid);
    assert_eq!(detail["agent"]["id"], agent);
    // Its Session record says a schedule made it, on its creator's behalf.
    let (status, record) = s.get(&s.url(&format!("/v2/sessions/{sid}")));
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["source"], "cron", "{record}");
    let title = detail["title"].as_str().unwrap();
    assert!(
        title.starts_with("ping · ") && title.ends_with(" UTC"),
        "the title names the schedule and the tick: {title}"
    );
    // The schedule counts what it fired.
    let v = poll_until("the count to include the first tick", WAIT, || {
        let v = get(&s, &agent, &id);
        (v["num_actions_taken"].as_u64() >= Some(1)).then_some(v)
    });
    assert!(v["last_action_time"].is_string());

    // Paused, it makes nothing more; a trigger still runs it.
    let (status, paused) = s.post(&sched(&s, &agent, &format!("/{id}/pause")), &json!({}));
    assert_eq!(status, 200);
    let count = paused["num_actions_taken"].as_u64().unwrap();
    let made = runs_of(&s, &agent, "ping").len();
    assert_eq!(made as u64, count, "every action made exactly one session");
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    poll_until("three paused intervals to pass", WAIT, || {
        (std::time::Instant::now() >= deadline).then_some(())
    });
    assert_eq!(runs_of(&s, &agent, "ping").len(), made);
    let (_, triggered) = s.post(&sched(&s, &agent, &format!("/{id}/trigger")), &json!({}));
    assert_eq!(triggered["num_actions_taken"].as_u64(), Some(count + 1));
    assert_eq!(runs_of(&s, &agent, "ping").len(), made + 1);
}

#[test]
fn ticks_make_exactly_one_session_each_across_sigkills() {
    let mut s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "durable");
    let created = create(
        &s,
        &agent,
        json!({"name": "beat", "interval_seconds": 1, "initial_input": {"content": "beat"}}),
    );
    let id = created["id"].as_str().unwrap().to_owned();
    for round in 1..=3 {
        let seen = runs_of(&s, &agent, "beat").len();
        poll_until("another tick", WAIT, || {
            (runs_of(&s, &agent, "beat").len() > seen).then_some(())
        });
        s.kill9_and_restart();
        let v = get(&s, &agent, &id);
        let runs = runs_of(&s, &agent, "beat");
        // Every recorded action has exactly one session, and no two sessions share a tick.
        let titles: HashSet<&str> = runs.iter().filter_map(|r| r["title"].as_str()).collect();
        assert_eq!(
            titles.len(),
            runs.len(),
            "round {round}: a tick fired twice: {titles:#?}"
        );
        assert_eq!(
            v["num_actions_taken"].as_u64(),
            Some(runs.len() as u64),
            "round {round}"
        );
    }
}

/// The tick a schedule-made session stands for, read back from its title
/// (`name · 2030-03-09 13:00:05 UTC`, maybe followed by `(catch-up)`).
fn fire_time_of(run: &Value, name: &str) -> i64 {
    let title = run["title"].as_str().expect("title");
    let label = title
        .strip_prefix(&format!("{name} · "))
        .and_then(|t| t.split(" UTC").next())
        .unwrap_or_else(|| panic!("not a tick title: {title}"));
    jiff::civil::DateTime::strptime("%Y-%m-%d %H:%M:%S", label)
        .and_then(|dt| dt.to_zoned(jiff::tz::TimeZone::UTC))
        .map(|z| z.timestamp().as_millisecond())
        .unwrap_or_else(|e| panic!("{title}: {e}"))
}

fn is_catch_up(run: &Value) -> bool {
    run["title"]
        .as_str()
        .is_some_and(|t| t.ends_with("(catch-up)"))
}

#[test]
fn ticks_missed_while_down_fold_into_one_catch_up_run_and_the_schedule_goes_on_from_now() {
    let mut s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "sleeper");
    let name = "every-second";
    let created = create(
        &s,
        &agent,
        json!({"name": name, "interval_seconds": 1, "initial_input": {"content": "tick"}}),
    );
    let id = created["id"].as_str().unwrap().to_owned();
    poll_until("the first tick", WAIT, || {
        runs_of(&s, &agent, name).first().cloned()
    });
    s.stop();
    let stopped_at = sessiond::clock::now_ms();
    // Let at least three ticks fall due while the server is down.
    poll_until("the outage to last three ticks", WAIT, || {
        (sessiond::clock::now_ms() >= stopped_at + 3500).then_some(())
    });
    let restarting_at = sessiond::clock::now_ms();
    s.restart();
    let catch_up = poll_until("the catch-up run", WAIT, || {
        // The first catch-up made after the stop (runs_of lists the newest first).
        runs_of(&s, &agent, name)
            .into_iter()
            .rev()
            .find(|r| is_catch_up(r) && r["createdAt"].as_i64() > Some(stopped_at))
    });
    // The ticks that fell due while the server was down are one run, made after the restart and
    // named after the latest of them; every later run is a tick after it.
    let fired_for = fire_time_of(&catch_up, name);
    assert!(
        fired_for >= restarting_at - 1000,
        "the catch-up stands for the latest missed tick"
    );
    let mut since_stop: Vec<Value> = runs_of(&s, &agent, name)
        .into_iter()
        .filter(|r| r["createdAt"].as_i64() > Some(stopped_at))
        .collect();
    since_stop.sort_by_key(|r| r["createdAt"].as_i64());
    assert_eq!(
        since_stop[0]["id"], catch_up["id"],
        "the first run after the restart is the catch-up: {since_stop:#?}"
    );
    assert!(
        since_stop[1..]
            .iter()
            .all(|r| fire_time_of(r, name) > fired_for),
        "no missed tick fired on its own: {since_stop:#?}"
    );
    let v = get(&s, &agent, &id);
    let next = v["next_action_times"][0].as_str().unwrap();
    let next_ms = jiff::Timestamp::from_str(next).unwrap().as_millisecond();
    assert!(
        next_ms > restarting_at,
        "it continues from now, not from the outage: {next}"
    );
}

#[test]
fn schedules_and_their_next_times_survive_a_restart() {
    let mut s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "keeper");
    let created = create(
        &s,
        &agent,
        json!({
            "name": "nine-am",
            "cron_expression": "0 9 * * *",
            "timezone": "America/New_York",
            "start_at": "2030-11-01T00:00:00Z",
            "paused": false,
            "initial_input": {"content": "Good morning", "author": "agent"},
        }),
    );
    let id = created["id"].as_str().unwrap().to_owned();
    assert_eq!(
        created["next_action_times"].as_array().unwrap()[..3],
        [
            json!("2030-11-01T13:00:00.000Z"),
            json!("2030-11-02T13:00:00.000Z"),
            json!("2030-11-03T14:00:00.000Z")
        ]
    );
    let (_, skipped) = s.post(
        &sched(&s, &agent, &format!("/{id}/skip")),
        &json!({"scheduled_time": "2030-11-02T13:00:00Z"}),
    );
    s.stop();
    s.restart();
    let after = get(&s, &agent, &id);
    for field in [
        "name",
        "cron_expression",
        "timezone",
        "start_at",
        "initial_input",
        "creator_principal",
        "created_at",
        "skipped_action_times",
        "next_action_times",
    ] {
        assert_eq!(after[field], skipped[field], "{field}");
    }
    assert_eq!(after["initial_input"]["author"], "agent");
}

#[test]
fn deleting_an_agent_deletes_its_schedules() {
    let s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "short-lived");
    create(
        &s,
        &agent,
        json!({"name": "orphan", "interval_seconds": 600, "initial_input": {"content": "x"}}),
    );
    let (status, v) = s.delete(&s.url("/v1/ws/default/agents/short-lived"));
    assert_eq!(status, 200, "{v}");
    let (status, v) = s.get(&sched(&s, &agent, ""));
    assert_eq!((status, error_code(&v)), (404, "agent_not_found"));
    // An agent of the same slug is a new agent, without the old one's schedules.
    let again = new_agent(&s, "short-lived");
    let (status, v) = s.get(&sched(&s, &again, ""));
    assert_eq!((status, &v["total"]), (200, &json!(0)), "{v}");
}

#[test]
fn a_tick_that_cannot_make_a_session_is_used_up_and_the_schedule_goes_on() {
    let mut s = Server::start_with_config(CONFIG);
    let agent = new_agent(&s, "orphaned");
    let dir = s.data_dir.clone();
    // A second person's schedule, and one of the owner who then leaves the workspace.
    let colleague = cli(
        &dir,
        &[
            "user",
            "create",
            "--email",
            "colleague@test.local",
            "--password-stdin",
            "--workspace",
            "default",
            "--role",
            "member",
        ],
        Some("colleague-password-1\n"),
    );
    assert!(!colleague.is_empty());
    let key = cli(
        &dir,
        &[
            "token",
            "create",
            "--user",
            "colleague@test.local",
            "--scope",
            "sessions",
        ],
        None,
    );
    let (status, v) = status_json(
        http_as(&key)
            .post(sched(&s, &agent, ""))
            .json(&json!({"name": "kept-going", "interval_seconds": 1,
                          "initial_input": {"content": "still here"}}))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 200, "{v}");
    let created = create(
        &s,
        &agent,
        json!({"name": "left-behind", "interval_seconds": 1, "initial_input": {"content": "hi"}}),
    );
    let id = created["id"].as_str().unwrap().to_owned();
    let owner = created["creator_principal"]["user_id"]
        .as_str()
        .unwrap()
        .to_owned();
    s.stop();
    // sessiond has no command that removes a member yet; the database is changed while it is
    // stopped, as a future one would.
    s.db_execute(&format!(
        "DELETE FROM memberships WHERE user_id = {}",
        sql_text(&owner)
    ));
    s.restart();
    let restarted_at = sessiond::clock::now_ms();
    // Read as the colleague, who still belongs to the workspace.
    let colleague = http_as(&key);
    let read = |sid: &str| {
        let (status, v) = status_json(
            colleague
                .get(sched(&s, &agent, &format!("/{sid}")))
                .send()
                .unwrap(),
        );
        assert_eq!(status, 200, "{v}");
        v
    };
    let v = poll_until("the schedule to move past its refused ticks", WAIT, || {
        let v = read(&id);
        let next = v["next_action_times"][0].as_str()?;
        let next_ms = jiff::Timestamp::from_str(next).ok()?.as_millisecond();
        (next_ms > restarted_at + 2500).then_some(v)
    });
    let made_before = v["num_actions_taken"].as_u64().unwrap();
    let (status, list) = status_json(
        colleague
            .get(s.url(&format!(
                "/v1/ws/default/agent/sessions?agentId={agent}&limit=100"
            )))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 200);
    let titled = |name: &str| {
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| {
                x["title"]
                    .as_str()
                    .is_some_and(|t| t.starts_with(&format!("{name} · ")))
            })
            .count() as u64
    };
    assert_eq!(
        titled("left-behind"),
        made_before,
        "nothing made after the owner left"
    );
    assert!(
        titled("kept-going") >= 2,
        "the other schedule kept firing: {list}"
    );
}
