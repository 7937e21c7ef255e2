//! Workspace owners managing API keys over HTTP (`/v1/ws/{ws}/keys`): a key made through the
//! route authenticates, a revoked one is refused at once (requests and open streams), members
//! get 403, other workspaces 404, bad input changes nothing. Runs on both backends.

mod common;

use std::time::Duration;

use common::{Server, http_builder, into_json, workspace_member_key};
use reqwest::blocking::Client;
use serde_json::{Value, json};

fn client(key: &str) -> Client {
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

fn keys_url(s: &Server, ws: &str, rest: &str) -> String {
    s.url(&format!("/v1/ws/{ws}/keys{rest}"))
}

fn key_ids(s: &Server) -> Vec<String> {
    let (st, v) = s.get(&keys_url(s, "default", ""));
    assert_eq!(st, 200, "{v}");
    v["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["id"].as_str().expect("id").to_owned())
        .collect()
}

#[test]
fn a_key_made_through_the_route_works_until_revoked() {
    let s = Server::start();
    let before = key_ids(&s);
    let (st, made) = s.post(
        &keys_url(&s, "default", ""),
        &json!({"name": "ci", "scopes": ["sessions:read"]}),
    );
    assert_eq!(st, 201, "{made}");
    let secret = made["key"].as_str().expect("secret in the create answer");
    let id = made["id"].as_str().expect("id").to_owned();
    assert_eq!(made["scopes"], json!(["sessions:read"]));
    assert_eq!(made["lastUsedAt"], Value::Null);

    // The listing has it, with no secret; the secret is in the create answer only.
    let (_, listed) = s.get(&keys_url(&s, "default", ""));
    let row = listed["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["id"] == id.as_str())
        .expect("listed")
        .clone();
    assert!(row.get("key").is_none(), "{row}");
    assert!(!listed.to_string().contains(secret));
    assert_eq!(key_ids(&s).len(), before.len() + 1);

    // It authenticates, within its scope only.
    let c = client(secret);
    let (st, v) = into_json(c.get(s.sessions_url("")).send().expect("GET"));
    assert_eq!(st, 200, "{v}");
    let (st, _) = into_json(
        c.post(s.sessions_url(""))
            .json(&json!({"prompt": "hi"}))
            .send()
            .expect("POST"),
    );
    assert_eq!(st, 403, "a read-only key may not create");
    let (st, listed) = s.get(&keys_url(&s, "default", ""));
    assert_eq!(st, 200);
    let used = listed["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["id"] == id.as_str())
        .expect("listed")["lastUsedAt"]
        .clone();
    // Last use is recorded in the background: wait for it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut used = used;
    while used.is_null() && std::time::Instant::now() < deadline {
        let (_, listed) = s.get(&keys_url(&s, "default", ""));
        used = listed["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .find(|k| k["id"] == id.as_str())
            .expect("listed")["lastUsedAt"]
            .clone();
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(used.is_string(), "last use recorded");

    // Revoked: the very next request is refused.
    let (st, v) = s.delete(&keys_url(&s, "default", &format!("/{id}")));
    assert_eq!(st, 200, "{v}");
    let (st, _) = into_json(c.get(s.sessions_url("")).send().expect("GET"));
    assert_eq!(st, 401);
    // Twice: a conflict, nothing changes.
    let (st, _) = s.delete(&keys_url(&s, "default", &format!("/{id}")));
    assert_eq!(st, 409);
    let (st, _) = s.delete(&keys_url(&s, "default", "/000000000000000000000000"));
    assert_eq!(st, 404);
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let s = Server::start();
    let before = key_ids(&s);
    for body in [
        json!({"name": "x", "scopes": ["admin"]}),
        json!({"name": "x", "scopes": []}),
        json!({"name": "", "scopes": ["sessions"]}),
        json!({"name": "x", "scopes": ["ws:other:sessions"]}),
        json!({"name": "x"}),
        json!({"name": "x", "scopes": ["sessions"], "extra": 1}),
        json!(["not", "an", "object"]),
    ] {
        let (st, v) = s.post(&keys_url(&s, "default", ""), &body);
        assert_eq!(st, 400, "{body} → {v}");
        assert!(v["message"].is_string() || v["error"].is_string(), "{v}");
    }
    let (st, _) = s.post_raw(&keys_url(&s, "default", ""), "{not json");
    assert_eq!(st, 400);
    assert_eq!(key_ids(&s), before);
}

#[test]
fn members_get_403_and_other_workspaces_404() {
    let s = Server::start();
    let member = client(&workspace_member_key(&s.data_dir, "team", "member"));
    for (method, rest) in [
        ("GET", ""),
        ("POST", ""),
        ("DELETE", "/000000000000000000000000"),
    ] {
        let url = keys_url(&s, "team", rest);
        let req = match method {
            "GET" => member.get(&url),
            "POST" => member
                .post(&url)
                .json(&json!({"name": "m", "scopes": ["sessions"]})),
            _ => member.delete(&url),
        };
        let (st, v) = into_json(req.send().expect("send"));
        assert_eq!(st, 403, "{method} {url}: {v}");
    }
    // The member's workspace, from the default workspace's owner: 404, and the reverse.
    let (st, _) = s.get(&keys_url(&s, "team", ""));
    assert_eq!(st, 404);
    let (st, _) = into_json(member.get(keys_url(&s, "default", "")).send().expect("GET"));
    assert_eq!(st, 404);
    // An owner of another workspace cannot revoke this workspace's keys.
    let other_owner = client(&workspace_member_key(&s.data_dir, "other", "owner"));
    let id = key_ids(&s)[0].clone();
    let (st, _) = into_json(
        other_owner
            .delete(keys_url(&s, "other", &format!("/{id}")))
            .send()
            .expect("DELETE"),
    );
    assert_eq!(st, 404);
    let (st, _) = s.get(&s.sessions_url(""));
    assert_eq!(st, 200, "the owner's key still works");
    // No credential: 401.
    let (st, _) = into_json(
        http_builder()
            .build()
            .expect("client")
            .get(keys_url(&s, "default", ""))
            .send()
            .expect("GET"),
    );
    assert_eq!(st, 401);
}

#[test]
fn revoking_a_key_ends_its_open_stream() {
    let s = Server::start();
    let session = s.create_prompt("hello");
    let (st, made) = s.post(
        &keys_url(&s, "default", ""),
        &json!({"name": "watcher", "scopes": ["sessions:read"]}),
    );
    assert_eq!(st, 201, "{made}");
    let secret = made["key"].as_str().expect("secret").to_owned();
    let id = made["id"].as_str().expect("id").to_owned();
    let resp = http_builder()
        .timeout(None)
        .build()
        .expect("client")
        .get(s.sessions_url(&format!("/{session}/events")))
        .header("authorization", format!("Bearer {secret}"))
        .header("accept", "text/event-stream")
        .send()
        .expect("SSE connect");
    assert_eq!(resp.status().as_u16(), 200);
    let sse = common::Sse::from_response(resp);
    assert!(
        !sse.ends_within(Duration::from_millis(300)),
        "the stream stays open while the key is valid"
    );
    let (st, v) = s.delete(&keys_url(&s, "default", &format!("/{id}")));
    assert_eq!(st, 200, "{v}");
    assert!(
        sse.ends_within(Duration::from_secs(5)),
        "the revoked key's stream ends"
    );
}

#[test]
fn owners_list_the_workspace_people_and_members_may_not() {
    let s = Server::start();
    let member = client(&workspace_member_key(&s.data_dir, "team", "member"));
    let (st, v) = s.get(&s.url("/v1/ws/default/people"));
    assert_eq!(st, 200, "{v}");
    let people = v["people"].as_array().expect("people");
    assert!(
        people.iter().any(|p| p["role"] == "owner"),
        "the owner is listed: {v}"
    );
    assert!(!v.to_string().contains("password"), "{v}");
    assert!(
        !v.to_string().contains("member@team"),
        "another workspace's people are not listed: {v}"
    );
    let (st, _) = into_json(member.get(s.url("/v1/ws/team/people")).send().expect("GET"));
    assert_eq!(st, 403);
    let (st, _) = s.get(&s.url("/v1/ws/team/people"));
    assert_eq!(st, 404);
}
