//! Deployment history and webhook triggers of the agent platform API, over HTTP against a real
//! server on both backends: every deployment change recorded with who and when; triggers
//! registered with their secret shown once and kept sealed; GitHub and Slack deliveries signed
//! as the sources sign them, starting tasks with the seed's provenance, and every unsigned,
//! wrongly signed, stale or oversize delivery refused with nothing written; each workspace
//! seeing only its own.

mod common;
// Only the fake's sync replies are used here.
#[allow(dead_code)]
#[path = "common/fake_acp.rs"]
mod fake_acp;
#[path = "common/hast.rs"]
mod hast;

use std::time::Duration;

use common::{OWNER_EMAIL, Server, WS, cli, http_builder, into_json, poll_until};
// What `hast` reads from its parent.
use common::{Sse, SseFrame, SseItem};
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

/// Small prompts (so an oversize delivery is small too) and loopback ACP servers.
const CONFIG: &str = "[limits]\nmax_prompt_chars = 4096\n[policy]\nacp_hosts = [\"127.0.0.1\"]\n";

fn ax(s: &Server, path: &str) -> String {
    s.url(&format!("/agentex{path}"))
}

/// A new agent of the workspace of `http`; returns its id.
fn agent_as(s: &Server, http: &reqwest::blocking::Client, name: &str) -> String {
    let (status, v) = into_json(
        http.post(ax(s, "/agents/register-build"))
            .json(&json!({"name": name, "description": "webhook tests"}))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 200, "{v}");
    v["id"].as_str().expect("id").to_owned()
}

fn agent(s: &Server, name: &str) -> String {
    agent_as(s, &s.http, name)
}

fn hmac_hex(key: &str, parts: &[&[u8]]) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes()).unwrap();
    for p in parts {
        mac.update(p);
    }
    sessiond::secret::hex(&mac.finalize().into_bytes())
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A client without any credential (what GitHub and Slack are).
fn anonymous() -> reqwest::blocking::Client {
    http_builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A GitHub delivery: `X-Hub-Signature-256` over the body with `secret` (none: unsigned).
fn github(
    url: &str,
    secret: Option<&str>,
    event: &str,
    delivery: &str,
    body: &str,
) -> (u16, Value) {
    let mut req = anonymous()
        .post(url)
        .header("content-type", "application/json")
        .header("x-github-event", event)
        .header("x-github-delivery", delivery)
        .body(body.to_owned());
    if let Some(secret) = secret {
        let sig = format!("sha256={}", hmac_hex(secret, &[body.as_bytes()]));
        req = req.header("x-hub-signature-256", sig);
    }
    into_json(req.send().unwrap())
}

/// A Slack delivery: `X-Slack-Signature` v0 over `v0:{ts}:{body}` with `secret`.
fn slack(url: &str, secret: Option<&str>, ts: i64, body: &str) -> (u16, Value) {
    let mut req = anonymous()
        .post(url)
        .header("content-type", "application/json")
        .header("x-slack-request-timestamp", ts.to_string())
        .body(body.to_owned());
    if let Some(secret) = secret {
        let base = format!("v0:{ts}:");
        let sig = format!(
            "v0={}",
            hmac_hex(secret, &[base.as_bytes(), body.as_bytes()])
        );
        req = req.header("x-slack-signature", sig);
    }
    into_json(req.send().unwrap())
}

fn trigger_as(s: &Server, http: &reqwest::blocking::Client, body: Value) -> (u16, Value) {
    into_json(
        http.post(ax(s, "/agent_api_keys/webhook-trigger"))
            .json(&body)
            .send()
            .unwrap(),
    )
}

fn trigger(s: &Server, body: Value) -> Value {
    let (status, v) = trigger_as(s, &s.http, body);
    assert_eq!(status, 200, "{v}");
    v
}

/// Rows a delivery could write.
fn written(s: &Server) -> (i64, i64, i64) {
    (
        s.db_count("sessions"),
        s.db_count("agentex_tasks"),
        s.db_count("events"),
    )
}

fn issue_payload(repo: &str, title: &str) -> String {
    json!({
        "action": "opened",
        "issue": {"number": 7, "title": title},
        "repository": {"full_name": repo},
        "sender": {"login": "octocat", "id": 583231, "type": "User",
                   "avatar_url": "https://avatars.githubusercontent.com/u/583231"}
    })
    .to_string()
}

/// The key and HTTP client of a second workspace's owner.
fn other_workspace(s: &Server) -> reqwest::blocking::Client {
    let dir = s.data_dir.as_path();
    let key = common::workspace_member_key(dir, "other", "owner");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {key}").parse().unwrap(),
    );
    http_builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn deploy(s: &Server, agent: &str, image: &str) -> String {
    let (status, v) = s.post(
        &ax(s, &format!("/agents/{agent}/deployments")),
        &json!({"docker_image": image}),
    );
    assert_eq!(status, 200, "{v}");
    v["id"].as_str().unwrap().to_owned()
}

#[test]
fn deployment_changes_are_recorded_with_who_and_when() {
    let s = Server::start_with_config(CONFIG);
    let a = agent(&s, "historian");
    let started = chrono_now_ms();
    let d1 = deploy(&s, &a, "registry.local/historian:v1");
    let d2 = deploy(&s, &a, "registry.local/historian:v2");
    for (d, what) in [(&d1, "promote"), (&d2, "promote")] {
        let (status, v) = s.post(
            &ax(&s, &format!("/agents/{a}/deployments/{d}/{what}")),
            &json!({}),
        );
        assert_eq!(status, 200, "{v}");
    }
    let (status, v) = s.delete(&ax(&s, &format!("/agents/{a}/deployments/{d1}")));
    assert_eq!(status, 200, "{v}");
    // A refused change (the production deployment) records nothing.
    let (status, _) = s.delete(&ax(&s, &format!("/agents/{a}/deployments/{d2}")));
    assert_eq!(status, 409);

    let (status, rows) = s.get(&ax(&s, &format!("/deployment-history?agent_id={a}")));
    assert_eq!(status, 200, "{rows}");
    let rows = rows.as_array().unwrap().clone();
    let changes: Vec<(String, String)> = rows
        .iter()
        .map(|r| {
            (
                r["branch_name"].as_str().unwrap().to_owned(),
                r["commit_hash"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected = [
        ("deleted", &d1),
        ("promoted", &d2),
        ("promoted", &d1),
        ("created", &d2),
        ("created", &d1),
    ];
    assert_eq!(
        changes,
        expected
            .iter()
            .map(|(c, d)| ((*c).to_owned(), (*d).clone()))
            .collect::<Vec<_>>(),
        "newest first"
    );
    let key_id = s.token.split('_').nth(1).unwrap().to_owned();
    for r in &rows {
        assert_eq!(r["agent_id"], a.as_str());
        assert_eq!(r["author_email"], OWNER_EMAIL, "{r}");
        assert_eq!(r["author_name"], OWNER_EMAIL, "{r}");
        assert_eq!(
            r["key_id"],
            key_id.as_str(),
            "made with the owner's key: {r}"
        );
        assert_eq!(r["change"], r["branch_name"]);
        assert_eq!(r["deployment_id"], r["commit_hash"]);
        for t in ["deployment_timestamp", "build_timestamp"] {
            let at = rfc3339_ms(r[t].as_str().unwrap());
            assert!(
                at >= started - 1000 && at <= chrono_now_ms() + 1000,
                "{t}: {r}"
            );
        }
        let built = rfc3339_ms(r["build_timestamp"].as_str().unwrap());
        assert!(
            rfc3339_ms(r["deployment_timestamp"].as_str().unwrap()) >= built,
            "{r}"
        );
    }
    assert_eq!(rows[0]["docker_image"], "registry.local/historian:v1");

    // One row by id; the other orders and pages; by name.
    let one = &rows[2];
    let (status, v) = s.get(&ax(
        &s,
        &format!("/deployment-history/{}", one["id"].as_str().unwrap()),
    ));
    assert_eq!((status, &v), (200, one));
    let (_, asc) = s.get(&ax(
        &s,
        "/deployment-history?agent_name=historian&order_direction=asc&limit=2&page_number=2",
    ));
    let asc: Vec<&str> = asc
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["branch_name"].as_str().unwrap())
        .collect();
    assert_eq!(asc, ["promoted", "promoted"]);
    let (status, _) = s.get(&ax(
        &s,
        &format!("/deployment-history?agent_id={a}&order_by=build_timestamp"),
    ));
    assert_eq!(status, 200);

    // Bad input is named; unknown ids are 404.
    for (query, field) in [
        ("", "agent_id"),
        (&*format!("?agent_id={a}&agent_name=historian"), "agent_id"),
        (&*format!("?agent_id={a}&order_by=created_at"), "order_by"),
        (&*format!("?agent_id={a}&limit=0"), "limit"),
        (&*format!("?agent_id={a}&page_number=0"), "page_number"),
        (
            &*format!("?agent_id={a}&order_direction=up"),
            "order_direction",
        ),
    ] {
        let (status, v) = s.get(&ax(&s, &format!("/deployment-history{query}")));
        assert_eq!(status, 400, "{query}: {v}");
        assert!(
            v["message"].as_str().unwrap().starts_with(field),
            "{query}: {v}"
        );
    }
    let (status, v) = s.get(&ax(&s, "/deployment-history?agent_name=nobody"));
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("agent_not_found"))
    );
    for id in [common::new_uuid(), "not an id".to_owned()] {
        let (status, _) = s.get(&ax(
            &s,
            &format!("/deployment-history/{}", common::query_escape(&id)),
        ));
        assert_eq!(status, 404, "{id}");
    }
    // The agent's history goes with it (the agent has no tasks, so it can be deleted).
    let (status, v) = s.delete(&ax(&s, &format!("/agents/{a}")));
    assert_eq!(status, 200, "{v}");
    assert_eq!(s.db_count("agentex_deployment_history"), 0);
}

fn chrono_now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn rfc3339_ms(text: &str) -> i64 {
    let t = humantime::parse_rfc3339(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[test]
fn a_trigger_is_registered_once_with_its_secret_shown_once_and_sealed() {
    let s = Server::start_logged(Some(CONFIG), &[("SESSIOND_LOG", Some("debug"))]);
    agent(&s, "triage");
    let v = trigger(
        &s,
        json!({"agent_name": "triage", "name": "acme/widgets", "forward_path": "/github/issues"}),
    );
    let secret = v["secret"].as_str().unwrap().to_owned();
    assert_eq!(secret.len(), 64, "a made secret: {v}");
    assert_eq!(v["source"], "github");
    assert_eq!(v["agent_name"], "triage");
    assert_eq!(v["name"], "acme/widgets");
    assert_eq!(
        v["webhook_path"],
        "/agents/forward/name/triage/github/issues"
    );
    assert_eq!(
        v["webhook_url"],
        format!(
            "{}/agentex/agents/forward/name/triage/github/issues",
            s.base
        )
    );
    let id = v["key_id"].as_str().unwrap();
    let stored = s.db_value(&format!(
        "SELECT secret_sealed FROM agentex_webhook_triggers WHERE id = '{id}'"
    ));
    let stored = stored.unwrap();
    assert!(
        stored.starts_with("v1.") && !stored.contains(&secret),
        "sealed: {stored}"
    );

    // A second trigger of the same source and name is refused; another name, or Slack, is not.
    let (status, e) = trigger_as(
        &s,
        &s.http,
        json!({"agent_name": "triage", "name": "acme/widgets", "forward_path": "other"}),
    );
    assert_eq!(
        (status, e["error"].as_str()),
        (409, Some("webhook_trigger_exists")),
        "{e}"
    );
    let given = "a-slack-signing-secret-0123456789";
    let v = trigger(
        &s,
        json!({"agent_name": "triage", "name": "A0SLACK", "forward_path": "slack", "source": "slack",
               "secret": given, "base_url": "https://hooks.example/agentex/"}),
    );
    assert_eq!(v["secret"], given);
    assert_eq!(
        v["webhook_url"],
        "https://hooks.example/agentex/agents/forward/name/triage/slack"
    );
    assert_eq!(s.db_count("agentex_webhook_triggers"), 2);
    let log = s.log();
    assert!(log.contains("a webhook trigger was registered"), "{log}");
    assert!(
        !log.contains(&secret) && !log.contains(given),
        "secrets are never logged"
    );
}

#[test]
fn bad_trigger_requests_are_refused_naming_the_field_and_change_nothing() {
    let s = Server::start_with_config(CONFIG);
    agent(&s, "picky");
    let ok = json!({"agent_name": "picky", "name": "acme/widgets", "forward_path": "gh"});
    let with = |k: &str, v: Value| {
        let mut b = ok.clone();
        b[k] = v;
        b
    };
    let without = |k: &str| {
        let mut b = ok.clone();
        b.as_object_mut().unwrap().remove(k);
        b
    };
    for (body, field) in [
        (with("source", json!("external")), "source"),
        (with("source", json!("internal")), "source"),
        (with("source", json!("slack")), "secret"),
        (with("secret", json!("short")), "secret"),
        (with("forward_path", json!("")), "forward_path"),
        (with("forward_path", json!("../admin")), "forward_path"),
        (with("forward_path", json!("a b")), "forward_path"),
        (with("name", json!("")), "name"),
        (with("base_url", json!("ftp://x")), "base_url"),
        (with("colour", json!("red")), "body"),
        (without("name"), "body"),
        (without("agent_name"), "body"),
    ] {
        let (status, v) = trigger_as(&s, &s.http, body.clone());
        assert_eq!(status, 400, "{body}: {v}");
        let message = v["message"].as_str().unwrap();
        assert!(message.starts_with(field), "{body}: {v}");
        assert!(!message.contains("short"), "the secret is not echoed: {v}");
    }
    let (status, v) = trigger_as(&s, &s.http, with("agent_name", json!("nobody")));
    assert_eq!(
        (status, v["error"].as_str()),
        (404, Some("agent_not_found"))
    );
    // A read-only key may not register one.
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
        anonymous()
            .post(ax(&s, "/agent_api_keys/webhook-trigger"))
            .bearer_auth(reader)
            .json(&ok)
            .send()
            .unwrap(),
    );
    assert_eq!(status, 403);
    let (status, _) = into_json(
        anonymous()
            .post(ax(&s, "/agent_api_keys/webhook-trigger"))
            .json(&ok)
            .send()
            .unwrap(),
    );
    assert_eq!(status, 401);
    assert_eq!(s.db_count("agentex_webhook_triggers"), 0);
}

#[test]
fn a_signed_github_delivery_starts_a_task_with_its_provenance() {
    let s = Server::start_with_config(CONFIG);
    agent(&s, "triage");
    let t = trigger(
        &s,
        json!({"agent_name": "triage", "name": "acme/widgets", "forward_path": "github/issues"}),
    );
    let url = t["webhook_url"].as_str().unwrap();
    let secret = t["secret"].as_str().unwrap();

    // GitHub's ping when the webhook is made: verified, nothing started.
    let before = written(&s);
    let ping =
        json!({"zen": "Keep it logically awesome.", "repository": {"full_name": "acme/widgets"}})
            .to_string();
    let (status, v) = github(url, Some(secret), "ping", "d-ping", &ping);
    assert_eq!((status, &v), (200, &json!({"ok": true, "event": "ping"})));
    assert_eq!(written(&s), before);

    let body = issue_payload("acme/widgets", "It broke");
    let delivery = common::new_uuid();
    let (status, v) = github(url, Some(secret), "issues", &delivery, &body);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["created"], true);
    let task = v["task_id"].as_str().unwrap().to_owned();
    assert_eq!(v["task_name"], format!("webhook:github:{delivery}"));

    let record = hast::record(&s, &task);
    assert_eq!(record["source"], "mention");
    assert_eq!(record["webhook_type"], "github.issue");
    assert_eq!(record["webhook_id"], delivery.as_str());
    assert_eq!(
        record["attribution"],
        json!({"type": "github_user", "id": "octocat", "user": {
            "id": 583231, "login": "octocat", "type": "User",
            "avatar_url": "https://avatars.githubusercontent.com/u/583231"}})
    );
    assert_eq!(
        record["prompt"],
        body.as_str(),
        "the payload is the first message"
    );

    let (status, t2) = s.get(&ax(&s, &format!("/tasks/{task}")));
    assert_eq!(status, 200, "{t2}");
    assert_eq!(t2["params"]["webhook"]["event"], "issues");
    assert_eq!(t2["params"]["webhook"]["source"], "github");
    assert_eq!(t2["params"]["webhook"]["trigger_id"], t["key_id"]);
    assert_eq!(t2["params"]["webhook"]["delivery_id"], delivery.as_str());
    // The agent (the scripted engine) answers the delivery like any task's message.
    poll_until("the agent's answer", Duration::from_secs(30), || {
        let (_, msgs) = s.get(&ax(&s, &format!("/messages?task_id={task}")));
        msgs.as_array()?
            .iter()
            .find(|m| m["content"]["author"] == "agent")
            .cloned()
    });

    // A redelivery (same delivery id) finds the task it started.
    let before = written(&s);
    let (status, again) = github(url, Some(secret), "issues", &delivery, &body);
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        (again["task_id"].as_str(), &again["created"]),
        (Some(task.as_str()), &json!(false))
    );
    assert_eq!(written(&s).0, before.0, "no second session");

    // A comment on a pull request, from a form delivery, is its own task.
    let comment = json!({"action": "created", "issue": {"number": 8, "pull_request": {"url": "u"}},
        "comment": {"body": "@triage look"}, "repository": {"full_name": "acme/widgets"},
        "sender": {"login": "hubot", "id": 2, "type": "Bot", "avatar_url": "https://a/2"}})
    .to_string();
    let form = format!("payload={}", common::query_escape(&comment));
    let sig = format!("sha256={}", hmac_hex(secret, &[form.as_bytes()]));
    let (status, v) = into_json(
        anonymous()
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("x-github-event", "issue_comment")
            .header("x-github-delivery", "form-delivery-1")
            .header("x-hub-signature-256", sig)
            .body(form)
            .send()
            .unwrap(),
    );
    assert_eq!((status, &v["created"]), (200, &json!(true)), "{v}");
    let record = hast::record(&s, v["task_id"].as_str().unwrap());
    assert_eq!(record["webhook_type"], "github.pull_request_comment");
    assert_eq!(record["attribution"]["user"]["type"], "Bot");
    let prompt: Value = serde_json::from_str(record["prompt"].as_str().unwrap()).unwrap();
    assert_eq!(
        prompt["comment"]["body"], "@triage look",
        "the form's payload, as JSON"
    );
}

#[test]
fn a_signed_slack_delivery_answers_the_challenge_and_starts_a_task() {
    let s = Server::start_with_config(CONFIG);
    agent(&s, "helper");
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let t = trigger(
        &s,
        json!({"agent_name": "helper", "name": "A0HELPER", "forward_path": "slack/events",
               "source": "slack", "secret": secret}),
    );
    let url = t["webhook_url"].as_str().unwrap();
    let before = written(&s);
    let challenge = json!({"token": "t", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}).to_string();
    // Unsigned, the challenge is not answered.
    let (status, v) = slack(url, None, now_secs(), &challenge);
    assert_eq!(
        (status, v["error"].as_str()),
        (401, Some("invalid_signature")),
        "{v}"
    );
    let (status, v) = slack(url, Some(secret), now_secs(), &challenge);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"})
    );
    assert_eq!(written(&s), before);

    let event = json!({"token": "t", "team_id": "T1", "api_app_id": "A0HELPER", "type": "event_callback",
        "event_id": "Ev0PV52K21", "event": {"type": "app_mention", "user": "U061F7AUR", "text": "<@U0LAN0Z89> is it up?", "channel": "C0LAN2Q65"}})
    .to_string();
    let (status, v) = slack(url, Some(secret), now_secs() - 200, &event);
    assert_eq!((status, &v["created"]), (200, &json!(true)), "{v}");
    assert_eq!(v["task_name"], "webhook:slack:Ev0PV52K21");
    let record = hast::record(&s, v["task_id"].as_str().unwrap());
    assert_eq!(record["source"], "mention");
    assert_eq!(record["webhook_type"], "slack.app_mention");
    assert_eq!(record["webhook_id"], "Ev0PV52K21");
    assert_eq!(
        record["attribution"],
        json!({"type": "slack_user", "id": "U061F7AUR", "user": null})
    );
    // Slack retries an event it thinks was not taken: the same task.
    let (status, again) = slack(url, Some(secret), now_secs(), &event);
    assert_eq!(
        (status, &again["task_id"], &again["created"]),
        (200, &v["task_id"], &json!(false))
    );
    // Another app's event, signed with this secret, is not this trigger's.
    let stranger = event.replace("A0HELPER", "A0OTHER");
    let (status, _) = slack(url, Some(secret), now_secs(), &stranger);
    assert_eq!(status, 401);
}

#[test]
fn unsigned_wrong_stale_and_oversize_deliveries_are_refused_and_write_nothing() {
    let s = Server::start_with_config(CONFIG);
    agent(&s, "guarded");
    let t = trigger(
        &s,
        json!({"agent_name": "guarded", "name": "acme/widgets", "forward_path": "gh"}),
    );
    let url = t["webhook_url"].as_str().unwrap().to_owned();
    let secret = t["secret"].as_str().unwrap().to_owned();
    let slack_secret = "0123456789abcdef0123456789abcdef";
    let st = trigger(
        &s,
        json!({"agent_name": "guarded", "name": "A0G", "forward_path": "sl", "source": "slack", "secret": slack_secret}),
    );
    let slack_url = st["webhook_url"].as_str().unwrap().to_owned();
    let body = issue_payload("acme/widgets", "hello");
    let slack_body = json!({"api_app_id": "A0G", "type": "event_callback", "event_id": "Ev1",
        "event": {"type": "message", "user": "U1", "text": "hi"}})
    .to_string();
    let before = written(&s);

    let mut refusals: Vec<(&str, u16, Value)> = Vec::new();
    let (st1, v) = github(&url, None, "issues", "d1", &body);
    refusals.push(("unsigned", st1, v));
    let (st1, v) = github(&url, Some("not-the-secret-at-all"), "issues", "d2", &body);
    refusals.push(("wrong secret", st1, v.clone()));
    let wrong = v;
    let sig = format!("sha256={}", hmac_hex(&secret, &[body.as_bytes()]));
    let tampered = body.replace("hello", "HELLO");
    let (st1, v) = into_json(
        anonymous()
            .post(&url)
            .header("x-github-event", "issues")
            .header("x-hub-signature-256", &sig)
            .body(tampered)
            .send()
            .unwrap(),
    );
    refusals.push(("tampered body", st1, v));
    // Unknown agents, other paths and other repositories answer exactly as a wrong signature.
    for (what, other) in [
        ("unknown agent", url.replace("/guarded/", "/nobody/")),
        ("unknown path", format!("{url}/more")),
    ] {
        let (st1, v) = github(&other, Some(&secret), "issues", "d3", &body);
        assert_eq!((st1, &v), (401, &wrong), "{what}");
    }
    let (st1, v) = github(
        &url,
        Some(&secret),
        "issues",
        "d4",
        &issue_payload("acme/other", "x"),
    );
    assert_eq!((st1, &v), (401, &wrong), "another repository");
    let (st1, v) = slack(
        &slack_url,
        Some(slack_secret),
        now_secs() - 301,
        &slack_body,
    );
    refusals.push(("stale", st1, v));
    let (st1, v) = slack(
        &slack_url,
        Some(slack_secret),
        now_secs() + 400,
        &slack_body,
    );
    refusals.push(("from the future", st1, v));
    let (st1, v) = slack(
        &slack_url,
        Some("0123456789abcdef0123456789abcdeX"),
        now_secs(),
        &slack_body,
    );
    refusals.push(("wrong slack secret", st1, v));
    // A GitHub signature on the Slack URL is checked as GitHub's: no GitHub trigger there.
    let (st1, v) = github(&slack_url, Some(slack_secret), "issues", "d5", &slack_body);
    refusals.push(("the other source", st1, v));
    for (what, status, v) in &refusals {
        assert_eq!(*status, 401, "{what}: {v}");
        assert_eq!(v["error"], "invalid_signature", "{what}: {v}");
    }

    // Oversize: refused before anything is looked at (413), signed or not.
    let big =
        json!({"repository": {"full_name": "acme/widgets"}, "pad": "x".repeat(5000)}).to_string();
    let (status, v) = github(&url, Some(&secret), "issues", "d6", &big);
    assert_eq!(
        (status, v["error"].as_str()),
        (413, Some("payload_too_large")),
        "{v}"
    );
    // Not a payload at all, signed: 400.
    let (status, v) = github(&url, Some(&secret), "issues", "d7", "[1, 2]");
    assert_eq!(status, 400, "{v}");
    // Only POST.
    let status = anonymous().get(&url).send().unwrap().status().as_u16();
    assert_eq!(status, 405);
    assert_eq!(
        written(&s),
        before,
        "nothing written by any refused delivery"
    );
}

#[test]
fn history_and_triggers_stay_in_their_workspace() {
    let s = Server::start_with_config(CONFIG);
    let a = agent(&s, "shared-name");
    let d = deploy(&s, &a, "registry.local/a:1");
    let (_, rows) = s.get(&ax(&s, &format!("/deployment-history?agent_id={a}")));
    let row_id = rows[0]["id"].as_str().unwrap().to_owned();
    let mine = trigger(
        &s,
        json!({"agent_name": "shared-name", "name": "acme/widgets", "forward_path": "gh"}),
    );

    let other = other_workspace(&s);
    // The other workspace sees nothing of this one's history, agents or triggers.
    for url in [
        ax(&s, &format!("/deployment-history/{row_id}")),
        ax(&s, &format!("/deployment-history?agent_id={a}")),
        ax(&s, "/deployment-history?agent_name=shared-name"),
    ] {
        let (status, v) = into_json(other.get(&url).send().unwrap());
        assert_eq!(status, 404, "{url}: {v}");
        assert!(!v.to_string().contains(&d), "{v}");
    }
    let (status, _) = trigger_as(
        &s,
        &other,
        json!({"agent_name": "shared-name", "name": "acme/widgets", "forward_path": "gh"}),
    );
    assert_eq!(
        status, 404,
        "the other workspace has no agent of that name yet"
    );

    // Its own agent of the same name, with a trigger of the same URL and name.
    let b = agent_as(&s, &other, "shared-name");
    let theirs = {
        let (status, v) = trigger_as(
            &s,
            &other,
            json!({"agent_name": "shared-name", "name": "acme/widgets", "forward_path": "gh"}),
        );
        assert_eq!(status, 200, "{v}");
        v
    };
    assert_eq!(theirs["webhook_url"], mine["webhook_url"]);
    let url = mine["webhook_url"].as_str().unwrap();
    let (status, v) = github(
        url,
        mine["secret"].as_str(),
        "issues",
        "iso-1",
        &issue_payload("acme/widgets", "mine"),
    );
    assert_eq!(status, 200, "{v}");
    let my_task = v["task_id"].as_str().unwrap().to_owned();
    let (status, v) = github(
        url,
        theirs["secret"].as_str(),
        "issues",
        "iso-1",
        &issue_payload("acme/widgets", "theirs"),
    );
    assert_eq!(
        (status, &v["created"]),
        (200, &json!(true)),
        "the same delivery id is another workspace's task: {v}"
    );
    let their_task = v["task_id"].as_str().unwrap().to_owned();
    assert_ne!(my_task, their_task);

    let (status, t) = s.get(&ax(&s, &format!("/tasks/{my_task}")));
    assert_eq!(status, 200);
    let (_, agents) = s.get(&ax(&s, &format!("/tasks/{my_task}?relationships=agents")));
    assert_eq!(agents["agents"][0]["id"], a.as_str(), "{t}");
    let (status, _) = s.get(&ax(&s, &format!("/tasks/{their_task}")));
    assert_eq!(
        status, 404,
        "another workspace's task answers as a random id"
    );
    let (status, v) = into_json(
        other
            .get(ax(&s, &format!("/tasks/{their_task}?relationships=agents")))
            .send()
            .unwrap(),
    );
    assert_eq!((status, &v["agents"][0]["id"]), (200, &json!(b)));
    let (status, _) = into_json(
        other
            .get(ax(&s, &format!("/tasks/{my_task}")))
            .send()
            .unwrap(),
    );
    assert_eq!(status, 404);
}

#[test]
fn agent_keys_are_refused_and_an_acp_agent_gets_the_delivery_as_its_turn() {
    let fake = fake_acp::FakeAcp::start();
    let s = Server::start_with_config(CONFIG);
    let (status, reg) = s.post(
        &ax(&s, "/agents/register"),
        &json!({"name": "sdk-agent", "acp_url": fake.url, "acp_type": "sync"}),
    );
    assert_eq!(status, 200, "{reg}");
    let agent_id = reg["id"].as_str().unwrap().to_owned();
    let key = reg["agent_api_key"].as_str().unwrap().to_owned();
    deploy(&s, &agent_id, "registry.local/sdk:1");

    // The agent's own key reaches none of the management routes.
    let as_agent = |req: reqwest::blocking::RequestBuilder| {
        into_json(req.header("x-agent-api-key", &key).send().unwrap())
    };
    let (_, rows) = s.get(&ax(&s, &format!("/deployment-history?agent_id={agent_id}")));
    let row = rows[0]["id"].as_str().unwrap().to_owned();
    for (what, (status, v)) in [
        ("list", as_agent(anonymous().get(ax(&s, &format!("/deployment-history?agent_id={agent_id}"))))),
        ("retrieve", as_agent(anonymous().get(ax(&s, &format!("/deployment-history/{row}"))))),
        ("trigger", as_agent(anonymous().post(ax(&s, "/agent_api_keys/webhook-trigger")).json(
            &json!({"agent_name": "sdk-agent", "name": "acme/widgets", "forward_path": "gh"})))),
    ] {
        assert_eq!((status, v["error"].as_str()), (403, Some("forbidden")), "{what}: {v}");
    }
    assert_eq!(s.db_count("agentex_webhook_triggers"), 0);

    let t = trigger(
        &s,
        json!({"agent_name": "sdk-agent", "name": "acme/widgets", "forward_path": "gh"}),
    );
    fake.push(fake_acp::streamed("Looking into it."));
    let body = issue_payload("acme/widgets", "ACP please");
    let (status, v) = github(
        t["webhook_url"].as_str().unwrap(),
        t["secret"].as_str(),
        "issues",
        "acp-1",
        &body,
    );
    assert_eq!(status, 200, "{v}");
    let seen = fake.wait_requests(1, Duration::from_secs(30));
    let call = &seen[0].body;
    assert_eq!(call["method"], "message/send", "{call}");
    assert_eq!(call["params"]["task"]["id"], v["task_id"]);
    assert_eq!(call["params"]["content"]["content"], body.as_str());
    assert_eq!(seen[0].agent_key.as_deref(), Some(key.as_str()));
}

#[test]
fn the_ingress_needs_no_credential_and_ignores_one() {
    // A delivery signed right is taken whatever credential it carries (or none), and the
    // workspace is the trigger's, not the credential's.
    let s = Server::start_with_config(CONFIG);
    agent(&s, "plain");
    let t = trigger(
        &s,
        json!({"agent_name": "plain", "name": "o/r", "forward_path": "p"}),
    );
    let body = issue_payload("o/r", "x");
    let sig = format!(
        "sha256={}",
        hmac_hex(t["secret"].as_str().unwrap(), &[body.as_bytes()])
    );
    let (status, v) = into_json(
        s.http
            .post(t["webhook_url"].as_str().unwrap())
            .header("x-github-event", "issues")
            .header("x-hub-signature-256", sig)
            .body(body)
            .send()
            .unwrap(),
    );
    assert_eq!((status, &v["created"]), (200, &json!(true)), "{v}");
    let (status, _) = s.get(&s.url(&format!(
        "/v1/ws/{WS}/agent/sessions/{}",
        v["task_id"].as_str().unwrap()
    )));
    assert_eq!(status, 200);
}

#[test]
fn deployments_made_before_the_history_get_their_rows() {
    let mut s = Server::start_with_config(CONFIG);
    let a = agent(&s, "veteran");
    let old = deploy(&s, &a, "registry.local/veteran:1");
    let live = deploy(&s, &a, "registry.local/veteran:2");
    let (status, promoted) = s.post(
        &ax(&s, &format!("/agents/{a}/deployments/{live}/promote")),
        &json!({}),
    );
    assert_eq!(status, 200, "{promoted}");
    // The database as it was before migration 0016, which the restart applies again: every
    // migration from 0016 on is undone, the newest first (a new migration adds its undo here).
    s.stop();
    let undo = "DROP TABLE acp_contacts; DROP TABLE a2a_push_configs; DROP TABLE password_resets; ALTER TABLE api_keys DROP COLUMN expires_at; \
                DROP TABLE webhook_attempts; DROP TABLE webhook_deliveries; \
                DROP TABLE webhook_subscriptions; \
                DROP TABLE retention_policies; ALTER TABLE sessions DROP COLUMN pinned; \
                DROP TABLE agentex_deployment_history; DROP TABLE agentex_webhook_triggers; \
                ALTER TABLE sessions DROP COLUMN webhook_type; \
                ALTER TABLE sessions DROP COLUMN webhook_id; \
                ALTER TABLE sessions DROP COLUMN attribution_user;";
    match s.database_url() {
        Some(_) => s.db_execute(&format!(
            "{undo} DELETE FROM schema_migrations WHERE version >= 16;"
        )),
        // The prompt search backlog (0022) is SQLite's alone.
        None => s.db_execute(&format!(
            "DROP TABLE prompt_backlog; {undo} PRAGMA user_version = 15;"
        )),
    }
    s.restart();
    let (status, rows) = s.get(&ax(
        &s,
        &format!("/deployment-history?agent_id={a}&order_direction=asc"),
    ));
    assert_eq!(status, 200, "{rows}");
    let rows = rows.as_array().unwrap();
    let mut seen: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["branch_name"].as_str().unwrap(),
                r["commit_hash"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen.pop(),
        Some(("promoted", live.as_str())),
        "the promotion came last"
    );
    // Two deployments made within one millisecond have no order of their own.
    seen.sort();
    let mut created = [("created", old.as_str()), ("created", live.as_str())];
    created.sort();
    assert_eq!(seen, created);
    for r in rows {
        assert_eq!(
            (&r["author_name"], &r["author_email"], &r["author_id"]),
            (&json!("unknown"), &json!(""), &Value::Null),
            "{r}"
        );
    }
    assert_eq!(rows[2]["deployment_timestamp"], promoted["promoted_at"]);
    let (status, one) = s.get(&ax(
        &s,
        &format!("/deployment-history/{}", rows[2]["id"].as_str().unwrap()),
    ));
    assert_eq!((status, &one), (200, &rows[2]));
}
