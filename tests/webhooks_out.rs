//! Outbound webhooks against a real receiver: `tests/python/webhooks_out/receiver.py`, run from
//! its suite's venv, verifies every delivery with the `standardwebhooks` package (the Standard
//! Webhooks reference library) and records what it got, when, and what it answered.

mod common;
#[path = "common/fake_openai.rs"]
mod fake_openai;
#[path = "common/venv.rs"]
mod venv;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{OWNER_EMAIL, Server, WS, cli, http_builder, into_json, poll_until};
use fake_openai::{End, FakeOpenAi, Reply, content_chunk, tool_reply, usage_chunk};
use serde_json::{Value, json};

/// Short times, so that retries, give-ups and disabling happen within a test.
fn config(webhooks: &str) -> String {
    config_with("", webhooks)
}

/// [`config`] with more `[policy]` lines.
fn config_with(policy: &str, webhooks: &str) -> String {
    format!(
        "[policy]\nwebhook_hosts = [\"*\", \"127.0.0.1\"]\n{policy}\
         [webhooks]\npoll_ms = 50\nbackoff_initial_ms = 200\nbackoff_max_ms = 5000\n\
         timeout_ms = 2000\n{webhooks}"
    )
}

/// The Python receiver, killed when dropped.
struct Receiver {
    child: Child,
    port: u16,
    http: reqwest::blocking::Client,
}

impl Receiver {
    fn start() -> Receiver {
        // Made once per test process: the tests run on threads of one process, and a venv is
        // made in a folder named after the process.
        static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let suite = venv::suite("webhooks_out").expect("tests/python/webhooks_out");
        let venv = VENV
            .get_or_init(|| venv::venv(&suite))
            .as_ref()
            .expect("the webhooks_out venv (standardwebhooks)");
        let mut child = Command::new(venv.join("bin/python"))
            .arg(suite.dir.join("receiver.py"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start receiver.py");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("receiver's port line");
        let port = line
            .trim()
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("receiver printed {line:?}"));
        Receiver {
            child,
            port,
            http: http_builder().build().expect("client"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn control(&self, v: Value) {
        let r = self
            .http
            .post(self.url("/_control"))
            .json(&v)
            .send()
            .expect("control");
        assert!(r.status().is_success());
    }

    fn release(&self) {
        self.http
            .post(self.url("/_release"))
            .send()
            .expect("release");
    }

    fn log(&self) -> Vec<Value> {
        let v: Value = self
            .http
            .get(self.url("/_log"))
            .send()
            .expect("log")
            .json()
            .expect("log JSON");
        v.as_array().cloned().unwrap_or_default()
    }

    /// Waits until the log has an entry `f` accepts; returns the log then.
    fn wait_for(&self, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        poll_until(what, Duration::from_secs(30), || {
            let log = self.log();
            f(&log).then_some(log)
        })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn hooks(s: &Server, rest: &str) -> String {
    s.url(&format!("/v1/ws/{WS}/webhooks{rest}"))
}

/// Subscribes `url`; answers the subscription (with its secret).
fn subscribe(s: &Server, body: Value) -> Value {
    let r = s.http.post(hooks(s, "")).json(&body).send().expect("POST");
    let cache = r
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let (status, v) = into_json(r);
    assert_eq!(status, 201, "{v}");
    assert_eq!(
        cache.as_deref(),
        Some("no-store"),
        "the secret is not cached"
    );
    assert!(v["secret"].as_str().unwrap().starts_with("whsec_"), "{v}");
    v
}

fn delivered(log: &[Value], kind: &str) -> Vec<Value> {
    log.iter()
        .filter(|e| e["type"] == kind && e["answered"] == 204)
        .cloned()
        .collect()
}

fn body_of(e: &Value) -> Value {
    serde_json::from_str(e["body"].as_str().unwrap()).unwrap()
}

/// The delivery log of a subscription, waiting until `f` accepts its newest page.
fn wait_log(s: &Server, id: &str, what: &str, f: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    poll_until(what, Duration::from_secs(30), || {
        let (status, v) = s.get(&hooks(s, &format!("/{id}/deliveries")));
        assert_eq!(status, 200, "{v}");
        let rows = v["deliveries"].as_array().cloned().unwrap_or_default();
        f(&rows).then_some(rows)
    })
}

#[test]
fn every_event_kind_is_delivered_signed_and_verified() {
    let receiver = Receiver::start();
    let s = Server::start_with_config(&config(""));
    let all = subscribe(
        &s,
        json!({"url": receiver.url("/all"), "description": "everything"}),
    );
    let failures = subscribe(
        &s,
        json!({"url": receiver.url("/failures"), "eventTypes": ["run.failed"]}),
    );
    receiver.control(json!({"secrets": [all["secret"], failures["secret"]]}));
    // The secret is shown once: never again.
    let (status, got) = s.get(&hooks(&s, &format!("/{}", all["id"].as_str().unwrap())));
    assert_eq!(status, 200);
    assert!(got.get("secret").is_none(), "{got}");
    assert_eq!(got["enabled"], true);

    let done = s.create_prompt("/reply hello");
    let failed = s.create_prompt("/fail boom");
    let asked = s.create_prompt("/ask Which? | a | b");
    let slow = s.create_prompt("/slow 20000\n/reply never");
    s.wait_terminal(&done, 0);
    s.wait_terminal(&failed, 0);
    s.wait_terminal(&asked, 0);
    s.wait_for_event(&slow, &["turn_started"], 0, Duration::from_secs(10));
    let (status, v) = s.post(&s.sessions_url(&format!("/{slow}/interrupt")), &json!({}));
    assert!(status < 300, "{v}");
    s.wait_terminal(&slow, 0);
    let (status, v) = s.delete(&s.sessions_url(&format!("/{done}")));
    assert!(status < 300, "{v}");

    let log = receiver.wait_for("every kind delivered", |log| {
        [
            "session.created",
            "run.completed",
            "run.failed",
            "input.requested",
            "run.interrupted",
            "session.deleted",
        ]
        .iter()
        .all(|k| !delivered(log, k).is_empty())
            && delivered(log, "session.created").len() >= 4
            && delivered(log, "run.failed").len() >= 2
    });
    for e in &log {
        assert_eq!(e["verified"], true, "standardwebhooks refused {e}");
        assert!(e["id"].as_str().unwrap().starts_with("msg_"), "{e}");
    }
    let completed = body_of(&delivered(&log, "run.completed")[0]);
    assert_eq!(completed["data"]["sessionId"], done.as_str());
    assert_eq!(completed["data"]["status"], "completed");
    assert_eq!(completed["data"]["result"], "hello");
    assert!(completed["timestamp"].is_string());
    let asked_body = body_of(&delivered(&log, "input.requested")[0]);
    assert_eq!(asked_body["data"]["sessionId"], asked.as_str());
    let deleted = body_of(&delivered(&log, "session.deleted")[0]);
    assert_eq!(deleted["data"]["sessionId"], done.as_str());
    // The filtered subscription got run.failed only.
    let to_failures: Vec<&Value> = log.iter().filter(|e| e["path"] == "/failures").collect();
    assert_eq!(to_failures.len(), 1, "{to_failures:?}");
    assert_eq!(to_failures[0]["type"], "run.failed");
    // Each message was attempted once, under its own id.
    let mut ids: Vec<&str> = log.iter().map(|e| e["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), log.len());

    // The delivery log says so.
    let id = all["id"].as_str().unwrap();
    let rows = wait_log(&s, id, "the log shows deliveries", |rows| {
        rows.len() + 1 >= log.len() && rows.iter().all(|r| r["state"] == "delivered")
    });
    for r in &rows {
        assert_eq!(r["attempts"], 1, "{r}");
        assert_eq!(r["lastStatus"], 204, "{r}");
        assert!(r["lastLatencyMs"].is_u64(), "{r}");
    }
    let first = rows[0]["id"].as_str().unwrap();
    let (status, one) = s.get(&hooks(&s, &format!("/{id}/deliveries/{first}")));
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["attemptLog"].as_array().unwrap().len(), 1, "{one}");
    assert!(one["payload"]["type"].is_string(), "{one}");

    // A rotation: the new secret is shown once; while the overlap lasts both secrets sign, so a
    // receiver holding either one verifies.
    let old = all["secret"].clone();
    let (status, rotated) = s.post(&hooks(&s, &format!("/{id}/rotate")), &json!({}));
    assert_eq!(status, 200, "{rotated}");
    let new = rotated["secret"].clone();
    assert_ne!(old, new);
    assert!(rotated["previousSecretValidUntil"].is_string(), "{rotated}");
    receiver.control(json!({"secrets": [old]}));
    let one_more = s.create_prompt("/reply again");
    s.wait_terminal(&one_more, 0);
    receiver.wait_for("a delivery signed with the old secret too", |log| {
        log.iter()
            .any(|e| body_of(e)["data"]["sessionId"] == one_more.as_str() && e["verified"] == true)
    });
    receiver.control(json!({"secrets": [new]}));
    let last = s.create_prompt("/reply last");
    s.wait_terminal(&last, 0);
    let log = receiver.wait_for("a delivery signed with the new secret", |log| {
        log.iter()
            .any(|e| body_of(e)["data"]["sessionId"] == last.as_str() && e["answered"] == 204)
    });
    let signed: Vec<&Value> = log
        .iter()
        .filter(|e| body_of(e)["data"]["sessionId"] == last.as_str())
        .collect();
    assert!(
        signed
            .iter()
            .all(|e| e["verified"] == true && e["signatures"] == 2)
    );
    // Without an overlap, only the newest secret signs.
    let (status, rotated) = s.post(
        &hooks(&s, &format!("/{id}/rotate")),
        &json!({"overlapMs": 0}),
    );
    assert_eq!(status, 200, "{rotated}");
    receiver.control(json!({"secrets": [rotated["secret"]]}));
    let after = s.create_prompt("/reply after");
    let log = receiver.wait_for("a delivery after the second rotation", |log| {
        log.iter()
            .any(|e| body_of(e)["data"]["sessionId"] == after.as_str() && e["answered"] == 204)
    });
    assert!(
        log.iter()
            .filter(|e| body_of(e)["data"]["sessionId"] == after.as_str())
            .all(|e| e["signatures"] == 1 && e["verified"] == true)
    );
}

#[test]
fn a_spent_budget_and_a_schedule_tick_are_delivered() {
    let receiver = Receiver::start();
    let fake = FakeOpenAi::start();
    let s = Server::start_with_config(&config_with(
        &format!("model_endpoints = [{:?}]\n", fake.base_url),
        "",
    ));
    let sub = subscribe(
        &s,
        json!({"url": receiver.url("/hook"), "eventTypes": ["budget_hit", "schedule.fired"]}),
    );
    receiver.control(json!({"secrets": [sub["secret"]]}));

    // $10,000 per million tokens: the first call (150 tokens) spends the 100-cent budget.
    let engine =
        fake.engine(json!({"prices": {"fake-model": {"input": 10000.0, "output": 10000.0}}}));
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "priced", "engine": engine}),
    );
    assert_eq!(status, 201, "{v}");
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
    let (status, r) = s.post(
        &s.url("/v2/sessions"),
        &json!({"prompt": "go", "harness": "openai", "budget": {"cents": 100}}),
    );
    assert_eq!(status, 201, "{r}");
    let spent = r["id"].as_str().unwrap().to_owned();
    let log = receiver.wait_for("budget_hit", |log| !delivered(log, "budget_hit").is_empty());
    let hit = body_of(&delivered(&log, "budget_hit")[0]);
    assert_eq!(hit["data"]["sessionId"], spent.as_str());
    assert_eq!(hit["data"]["status"], "failed");
    assert!(
        hit["data"]["error"]
            .as_str()
            .unwrap()
            .starts_with("budget_hit")
    );

    // A schedule's tick.
    let (status, agent) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "reporter", "name": "reporter"}),
    );
    assert_eq!(status, 201, "{agent}");
    let agent_id = agent["id"].as_str().unwrap();
    let (status, schedule) = s.post(
        &s.url(&format!("/agentex/agents/{agent_id}/schedules")),
        &json!({"name": "hourly", "interval_seconds": 3600, "initial_input": {"content": "/reply tick"}}),
    );
    assert_eq!(status, 200, "{schedule}");
    let schedule_id = schedule["id"].as_str().unwrap();
    let (status, v) = s.post_raw(
        &s.url(&format!(
            "/agentex/agents/{agent_id}/schedules/{schedule_id}/trigger"
        )),
        "",
    );
    assert_eq!(status, 200, "{v}");
    let log = receiver.wait_for("schedule.fired", |log| {
        !delivered(log, "schedule.fired").is_empty()
    });
    let fired = body_of(&delivered(&log, "schedule.fired")[0]);
    assert_eq!(fired["data"]["scheduleId"], schedule_id);
    assert_eq!(fired["data"]["agent"], "reporter");
    assert!(fired["data"]["sessionId"].is_string());
    assert!(log.iter().all(|e| e["verified"] == true));
}

#[test]
fn a_receiver_that_fails_gets_retries_with_growing_gaps() {
    let receiver = Receiver::start();
    let s = Server::start_with_config(&config(""));
    let sub = subscribe(
        &s,
        json!({"url": receiver.url("/hook"), "eventTypes": ["run.completed"]}),
    );
    receiver.control(json!({"secrets": [sub["secret"]], "fail": 4, "status": 503}));
    let session = s.create_prompt("/reply retried");
    let log = receiver.wait_for("five attempts, the last taken", |log| {
        log.len() >= 5 && log[4]["answered"] == 204
    });
    let id = log[0]["id"].as_str().unwrap();
    assert!(log.iter().all(|e| e["id"] == id && e["verified"] == true));
    assert!(body_of(&log[0])["data"]["sessionId"] == session.as_str());
    let at: Vec<f64> = log.iter().map(|e| e["at"].as_f64().unwrap()).collect();
    let gaps: Vec<f64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // backoff_initial_ms = 200: the n-th pause is drawn from [100, 200] × 2^(n-1) ms.
    for (n, gap) in gaps.iter().enumerate() {
        let least = 0.1 * f64::from(1u32 << n) - 0.02;
        assert!(*gap >= least, "gap {n} is {gap}s, under {least}s: {gaps:?}");
    }
    assert!(gaps[3] > gaps[0] * 2.0, "the gaps grow: {gaps:?}");

    let sub_id = sub["id"].as_str().unwrap();
    let rows = wait_log(&s, sub_id, "the message delivered", |rows| {
        rows.first().is_some_and(|r| r["state"] == "delivered")
    });
    assert_eq!(rows[0]["id"], id);
    assert_eq!(rows[0]["attempts"], 5);
    let (_, one) = s.get(&hooks(&s, &format!("/{sub_id}/deliveries/{id}")));
    let statuses: Vec<&Value> = one["attemptLog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["status"])
        .collect();
    assert_eq!(statuses, [503, 503, 503, 503, 204]);
    assert!(
        one["attemptLog"][0]["error"]
            .as_str()
            .unwrap()
            .contains("503")
    );

    // Retry-After is honoured when it asks for longer than the backoff would wait.
    receiver.control(json!({"fail": 1, "status": 429, "retryAfter": "2"}));
    let before = receiver.log().len();
    s.create_prompt("/reply later");
    let log = receiver.wait_for("the retry after Retry-After", |log| {
        log.len() >= before + 2 && log[before + 1]["answered"] == 204
    });
    let waited = log[before + 1]["at"].as_f64().unwrap() - log[before]["at"].as_f64().unwrap();
    assert!(waited >= 1.9, "Retry-After: 2 was not honoured ({waited}s)");
    // The subscription recovered: it is not failing.
    poll_until("the success recorded", Duration::from_secs(10), || {
        let (_, got) = s.get(&hooks(&s, &format!("/{sub_id}")));
        got["failingSince"].is_null().then_some(())
    });
    // The attempts are counted.
    let retrying = s.metric("sessiond_webhook_attempts_total{outcome=\"retrying\"}");
    let delivered = s.metric("sessiond_webhook_attempts_total{outcome=\"delivered\"}");
    assert_eq!((retrying, delivered), (Some(5.0), Some(2.0)));
}

#[test]
fn retries_end_and_a_failing_subscription_is_disabled_then_redelivered() {
    let receiver = Receiver::start();
    let s = Server::start_with_config(&config("retry_for_ms = 1500\ndisable_after_ms = 2000\n"));
    let sub = subscribe(
        &s,
        json!({"url": receiver.url("/hook"), "eventTypes": ["run.completed"]}),
    );
    let sub_id = sub["id"].as_str().unwrap().to_owned();
    receiver.control(json!({"secrets": [sub["secret"]], "fail": 1000, "status": 500}));
    s.create_prompt("/reply first");
    // Retried for retry_for_ms, then given up.
    let rows = wait_log(&s, &sub_id, "the message given up", |rows| {
        rows.first().is_some_and(|r| r["state"] == "failed")
    });
    let given_up = rows[0]["id"].as_str().unwrap().to_owned();
    assert!(rows[0]["attempts"].as_u64().unwrap() >= 2, "{}", rows[0]);
    assert!(rows[0]["lastError"].as_str().unwrap().contains("500"));
    let (_, got) = s.get(&hooks(&s, &format!("/{sub_id}")));
    assert!(got["failingSince"].is_string(), "{got}");
    // Failing past disable_after_ms, it is disabled and says why. The failure that disables it
    // must come after that span: the first message may have been given up well inside it, and
    // the second one's own retries may all end inside it too, so it is sent once the span, which
    // began before the give-up was seen, is surely over.
    let seen = Instant::now();
    poll_until(
        "the disable_after_ms span over",
        Duration::from_secs(5),
        || (seen.elapsed() >= Duration::from_millis(2_000)).then_some(()),
    );
    s.create_prompt("/reply second");
    let got = poll_until("the subscription disabled", Duration::from_secs(30), || {
        let (_, got) = s.get(&hooks(&s, &format!("/{sub_id}")));
        (got["enabled"] == false).then_some(got)
    });
    let reason = got["disabledReason"].as_str().unwrap();
    assert!(reason.contains("failed since"), "{got}");
    // Disabled, it gets no new messages.
    let count = receiver.log().len();
    let quiet = s.create_prompt("/reply quiet");
    s.wait_terminal(&quiet, 0);
    // Its outbox rows are written with the terminal: two messages, none for `quiet`.
    let (_, page) = s.get(&hooks(&s, &format!("/{sub_id}/deliveries")));
    assert_eq!(page["deliveries"].as_array().unwrap().len(), 2, "{page}");
    // Enabled again, with the receiver fixed, a redelivery goes out with the same webhook-id.
    receiver.control(json!({"fail": 0}));
    let (status, v) = s.patch(&hooks(&s, &format!("/{sub_id}")), &json!({"enabled": true}));
    assert_eq!((status, &v["enabled"]), (200, &json!(true)), "{v}");
    let (status, v) = s.post(
        &hooks(&s, &format!("/{sub_id}/deliveries/{given_up}/redeliver")),
        &json!({}),
    );
    assert_eq!(status, 202, "{v}");
    let log = receiver.wait_for("the redelivery taken", |log| {
        log.iter()
            .any(|e| e["id"] == given_up.as_str() && e["answered"] == 204)
    });
    assert!(log.len() > count);
    assert!(log.iter().all(|e| e["verified"] == true));
    wait_log(&s, &sub_id, "the redelivered message delivered", |rows| {
        rows.iter()
            .any(|r| r["id"] == given_up.as_str() && r["state"] == "delivered")
    });
}

#[test]
fn a_kill_between_commit_and_delivery_delivers_once_after_restart() {
    let receiver = Receiver::start();
    let mut s = Server::start_with_config(&config(""));
    let sub = subscribe(
        &s,
        json!({"url": receiver.url("/hook"), "eventTypes": ["session.created"]}),
    );
    // The first delivery is taken in but never answered: sessiond is killed while it waits.
    receiver.control(json!({"secrets": [sub["secret"]], "hang": 1}));
    let session = s.create_prompt("/reply crash");
    let log = receiver.wait_for("the hanging delivery", |log| !log.is_empty());
    let id = log[0]["id"].as_str().unwrap().to_owned();
    assert_eq!(body_of(&log[0])["data"]["sessionId"], session.as_str());
    s.kill9();
    receiver.release();
    s.restart();
    let log = receiver.wait_for("the delivery after the restart", |log| {
        log.iter().any(|e| e["answered"] == 204)
    });
    let taken: Vec<&Value> = log.iter().filter(|e| e["answered"] == 204).collect();
    assert_eq!(taken.len(), 1, "{log:?}");
    assert_eq!(taken[0]["id"], id.as_str(), "the same webhook-id");
    assert!(
        log.iter()
            .all(|e| e["id"] == id.as_str() && e["verified"] == true)
    );
    let sub_id = sub["id"].as_str().unwrap();
    let rows = wait_log(&s, sub_id, "the message delivered", |rows| {
        rows.first().is_some_and(|r| r["state"] == "delivered")
    });
    assert_eq!(rows.len(), 1);
    // Once delivered, it is not sent again: a later message is, and only it.
    let later = s.create_prompt("/reply later");
    let log = receiver.wait_for("the later message", |log| {
        log.iter()
            .any(|e| body_of(e)["data"]["sessionId"] == later.as_str() && e["answered"] == 204)
    });
    assert_eq!(
        log.iter()
            .filter(|e| e["id"] == id.as_str() && e["answered"] == 204)
            .count(),
        1
    );
}

#[test]
fn processes_sharing_a_database_send_each_message_once() {
    // Its own PostgreSQL database on both passes (several processes need one).
    let Some(db) = common::postgres::database("webhooks_out_shared") else {
        return;
    };
    let db = std::sync::Arc::new(db);
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("data");
    common::share_database(&data_dir, &db);
    let file = dir.path().join("sessiond.toml");
    std::fs::write(&file, config("")).expect("config file");
    let args = ["--config", file.to_str().unwrap()];
    let servers: Vec<Server> = (0..2).map(|_| Server::start_in(&data_dir, &args)).collect();
    let sub = subscribe(&servers[0], json!({"url": receiver.url("/hook")}));
    receiver.control(json!({"secrets": [sub["secret"]]}));
    for i in 0..10 {
        let s = &servers[i % 2];
        let id = s.create_prompt(&format!("/reply {i}"));
        s.wait_terminal(&id, 0);
    }
    // Ten sessions: ten session.created and ten run.completed, each sent by one process once.
    let log = receiver.wait_for("twenty messages", |log| {
        log.iter().filter(|e| e["answered"] == 204).count() >= 20
    });
    let mut ids: Vec<&str> = log.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 20, "{log:?}");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 20, "a message was sent twice: {log:?}");
    assert!(log.iter().all(|e| e["verified"] == true));
}

#[test]
fn a_slow_receiver_does_not_slow_turns() {
    let receiver = Receiver::start();
    let s = Server::start_with_config(&config("concurrency = 1\n"));
    let sub = subscribe(&s, json!({"url": receiver.url("/hook")}));
    receiver.control(json!({"secrets": [sub["secret"]], "delayMs": 1500}));
    let started = Instant::now();
    let mut ids = Vec::new();
    for i in 0..5 {
        let (status, v) = s.post(
            &s.sessions_url("/wait"),
            &json!({"prompt": format!("/reply turn {i}"), "clientRequestId": common::new_uuid()}),
        );
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["terminal"]["event"]["type"], "complete", "{v}");
        ids.push(v["sessionId"].as_str().unwrap().to_owned());
    }
    // Ten messages at 1.5 s each, one at a time: 15 s of receiving; the turns did not wait.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "five turns took {took:?}");
    let log = receiver.log();
    assert!(log.len() < 10, "the receiver cannot have had them all yet");
    receiver.wait_for("every message in the end", |log| {
        delivered(log, "run.completed").len() == 5
    });
}

#[test]
fn private_addresses_are_refused() {
    let s = Server::start_with_config(&config(""));
    for url in [
        "http://10.1.2.3/hook",
        "http://192.168.0.10:8080/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:9000/hook",
        "http://[fd00::1]/hook",
        "http://localhost:9000/hook",
        "http://0.0.0.0/hook",
    ] {
        let (status, v) = s.post(&hooks(&s, ""), &json!({"url": url}));
        assert_eq!(status, 400, "{url}: {v}");
        assert!(v["message"].as_str().unwrap().starts_with("url:"), "{v}");
    }
    // Listed by address, a loopback receiver is allowed.
    let (status, v) = s.post(&hooks(&s, ""), &json!({"url": "http://127.0.0.1:9/hook"}));
    assert_eq!(status, 201, "{v}");
    let (_, list) = s.get(&hooks(&s, ""));
    assert_eq!(list["webhooks"].as_array().unwrap().len(), 1, "{list}");
}

#[test]
fn the_policy_is_checked_again_at_every_delivery() {
    let receiver = Receiver::start();
    let mut s = Server::start_with_config(&config(""));
    let sub = subscribe(
        &s,
        json!({"url": receiver.url("/hook"), "eventTypes": ["run.completed"]}),
    );
    receiver.control(json!({"secrets": [sub["secret"]]}));
    // The operator stops listing the receiver's loopback address: `*` alone never reaches it.
    s.stop();
    let file = s.data_dir.parent().expect("tmp").join("sessiond.toml");
    let narrowed = config("").replace("[\"*\", \"127.0.0.1\"]", "[\"*\"]");
    std::fs::write(&file, narrowed).expect("rewrite the config file");
    s.restart();
    let session = s.create_prompt("/reply unheard");
    s.wait_terminal(&session, 0);
    let sub_id = sub["id"].as_str().unwrap();
    let rows = wait_log(&s, sub_id, "a refused attempt", |rows| {
        rows.first()
            .is_some_and(|r| r["attempts"].as_u64() >= Some(1))
    });
    let error = rows[0]["lastError"].as_str().unwrap();
    assert!(error.contains("internal address"), "{}", rows[0]);
    assert_eq!(rows[0]["lastStatus"], Value::Null);
    assert!(receiver.log().is_empty(), "nothing reached the receiver");
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = Server::start_with_config(&config(""));
    let session = s.create_prompt("/reply x");
    let ok = "http://127.0.0.1:9/hook";
    for body in [
        json!({}),
        json!({"url": 5}),
        json!({"url": "not a url"}),
        json!({"url": "ftp://127.0.0.1/x"}),
        json!({"url": "http://user:pw@127.0.0.1:9/x"}),
        json!({"url": ok, "eventTypes": ["run.exploded"]}),
        json!({"url": ok, "eventTypes": "run.failed"}),
        json!({"url": ok, "agent": "nobody"}),
        json!({"url": ok, "sessionId": "not-a-session"}),
        json!({"url": ok, "sessionId": common::new_uuid()}),
        json!({"url": ok, "description": "x".repeat(600)}),
        json!({"url": ok, "colour": "blue"}),
    ] {
        let (status, v) = s.post(&hooks(&s, ""), &body);
        assert_eq!(status, 400, "{body}: {v}");
        assert!(v["error"].is_string() && v["message"].is_string(), "{v}");
    }
    let (status, v) = s.post_raw(&hooks(&s, ""), "{not json");
    assert_eq!(status, 400, "{v}");
    let (_, list) = s.get(&hooks(&s, ""));
    assert_eq!(list["webhooks"], json!([]), "nothing was made");

    let sub = subscribe(
        &s,
        json!({"url": ok, "agent": "root", "sessionId": session, "eventTypes": ["run.failed", "run.failed"]}),
    );
    assert_eq!(sub["eventTypes"], json!(["run.failed"]));
    let id = sub["id"].as_str().unwrap();
    for body in [
        json!({"url": "http://10.0.0.1/"}),
        json!({"eventTypes": ["nope"]}),
        json!({"agent": 3}),
        json!({"enabled": "yes"}),
        json!({"secret": "whsec_abc"}),
    ] {
        let (status, v) = s.patch(&hooks(&s, &format!("/{id}")), &body);
        assert_eq!(status, 400, "{body}: {v}");
    }
    let (status, v) = s.post(
        &hooks(&s, &format!("/{id}/rotate")),
        &json!({"overlapMs": -1}),
    );
    assert_eq!(status, 400, "{v}");
    let (_, after) = s.get(&hooks(&s, &format!("/{id}")));
    let mut before = sub.clone();
    before.as_object_mut().unwrap().remove("secret");
    assert_eq!(after, before, "refused changes changed nothing");
    // Filters can be removed.
    let (status, v) = s.patch(
        &hooks(&s, &format!("/{id}")),
        &json!({"agent": null, "sessionId": null}),
    );
    assert_eq!(
        (status, &v["agent"], &v["sessionId"]),
        (200, &Value::Null, &Value::Null),
        "{v}"
    );

    // Unknown ids are 404; another workspace's subscription is not found either.
    for path in [
        "/wh_0000",
        "/nonsense",
        "/wh_0000/deliveries",
        "/wh_0000/deliveries/msg_1",
    ] {
        let (status, _) = s.get(&hooks(&s, path));
        assert_eq!(status, 404, "{path}");
    }
    let (status, _) = s.post(
        &hooks(&s, &format!("/{id}/deliveries/msg_00/redeliver")),
        &json!({}),
    );
    assert_eq!(status, 404);
    let other = common::workspace_member_key(&s.data_dir, "other", "member");
    let client = http_builder().build().unwrap();
    let (status, _) = into_json(
        client
            .get(s.url(&format!("/v1/ws/other/webhooks/{id}")))
            .bearer_auth(&other)
            .send()
            .unwrap(),
    );
    assert_eq!(status, 404);
    let (status, list) = into_json(
        client
            .get(s.url("/v1/ws/other/webhooks"))
            .bearer_auth(&other)
            .send()
            .unwrap(),
    );
    assert_eq!((status, list["webhooks"].clone()), (200, json!([])));
    // A read-only key reads but may not subscribe, change or rotate.
    let reader = cli(
        &s.data_dir,
        &[
            "token",
            "create",
            "--user",
            OWNER_EMAIL,
            "--scope",
            "sessions:read",
        ],
        None,
    );
    let (status, _) = into_json(
        client
            .get(hooks(&s, ""))
            .bearer_auth(&reader)
            .send()
            .unwrap(),
    );
    assert_eq!(status, 200);
    let (status, _) = into_json(
        client
            .post(hooks(&s, ""))
            .bearer_auth(&reader)
            .json(&json!({"url": ok}))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 403);
    let (status, _) = into_json(
        client
            .post(hooks(&s, &format!("/{id}/rotate")))
            .bearer_auth(&reader)
            .send()
            .unwrap(),
    );
    assert_eq!(status, 403);
    // Without a credential, nothing.
    let (status, _) = into_json(client.get(hooks(&s, "")).send().unwrap());
    assert_eq!(status, 401);
    let (status, _) = s.delete(&hooks(&s, &format!("/{id}")));
    assert_eq!(status, 204);
    let (status, _) = s.get(&hooks(&s, &format!("/{id}")));
    assert_eq!(status, 404);
}
