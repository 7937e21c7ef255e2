//! What a workspace's owners manage over HTTP besides listing keys: keys that expire, app keys,
//! people (add, role, remove, password-reset links) and workspaces (create, show, rename). Every
//! route answers a member 403 and another workspace 404, and bad input is a 4xx that changes
//! nothing. Runs on both backends.

mod common;

use std::time::Duration;

use common::{Server, http_builder, into_json, poll_until, workspace_member_key};
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

fn ws_url(s: &Server, ws: &str, rest: &str) -> String {
    s.url(&format!("/v1/ws/{ws}{rest}"))
}

fn send(c: &Client, method: &str, url: &str, body: Option<&Value>) -> (u16, Value) {
    let req = match method {
        "GET" => c.get(url),
        "POST" => c.post(url),
        "PATCH" => c.patch(url),
        "DELETE" => c.delete(url),
        other => panic!("method {other}"),
    };
    let req = match body {
        Some(b) => req.json(b),
        None => req,
    };
    into_json(req.send().expect("send"))
}

fn key_ids(s: &Server) -> Vec<String> {
    keys(s)
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| k["id"].as_str().expect("id").to_owned())
        .collect()
}

fn keys(s: &Server) -> Value {
    let (st, v) = s.get(&ws_url(s, "default", "/keys"));
    assert_eq!(st, 200, "{v}");
    v["keys"].clone()
}

fn people(s: &Server, ws: &str) -> Value {
    let (st, v) = s.get(&ws_url(s, ws, "/people"));
    assert_eq!(st, 200, "{v}");
    v["people"].clone()
}

fn rfc3339_in(ms: i64) -> String {
    let t = std::time::SystemTime::now() + Duration::from_millis(ms as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

#[test]
fn a_key_with_an_expiry_stops_working_by_itself() {
    let s = Server::start();
    let (st, made) = s.post(
        &ws_url(&s, "default", "/keys"),
        &json!({"name": "short", "scopes": ["sessions:read"], "expiresAt": rfc3339_in(2_000)}),
    );
    assert_eq!(st, 201, "{made}");
    assert!(made["expiresAt"].is_string(), "{made}");
    assert_eq!(made["expired"], false);
    let c = client(made["key"].as_str().expect("secret"));
    let (st, v) = into_json(c.get(s.sessions_url("")).send().expect("GET"));
    assert_eq!(st, 200, "works before its expiry: {v}");
    // Refused once the time has passed, though it is in the key cache.
    poll_until("the expired key refused", Duration::from_secs(10), || {
        let (st, _) = into_json(c.get(s.sessions_url("")).send().expect("GET"));
        (st == 401).then_some(())
    });
    let id = made["id"].as_str().expect("id");
    let listed = keys(&s);
    let row = listed
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["id"] == id)
        .expect("listed");
    assert_eq!(row["expired"], true, "{row}");
    assert_eq!(row["revoked"], false, "{row}");

    // A key without an expiry has none.
    let (st, made) = s.post(
        &ws_url(&s, "default", "/keys"),
        &json!({"name": "forever", "scopes": ["sessions"], "expiresAt": null}),
    );
    assert_eq!(st, 201, "{made}");
    assert_eq!(made["expiresAt"], Value::Null);
}

#[test]
fn a_bad_expiry_is_refused_and_makes_no_key() {
    let s = Server::start();
    let before = key_ids(&s);
    for expires in [
        json!("yesterday"),
        json!("2001-01-01T00:00:00Z"),
        json!(12345),
    ] {
        for route in ["/keys", "/apps"] {
            let body = json!({"name": "x", "scopes": ["sessions"], "expiresAt": expires});
            let (st, v) = s.post(&ws_url(&s, "default", route), &body);
            assert_eq!(st, 400, "{route} {body} → {v}");
            assert!(v["message"].is_string(), "{v}");
        }
    }
    assert_eq!(key_ids(&s), before);
}

#[test]
fn an_app_key_authors_as_its_app_and_is_revoked_at_once() {
    let s = Server::start();
    let (st, made) = s.post(
        &ws_url(&s, "default", "/apps"),
        &json!({"name": "deploy-bot", "scopes": ["sessions"]}),
    );
    assert_eq!(st, 201, "{made}");
    assert_eq!(made["kind"], "app", "{made}");
    assert!(made["appId"].is_string(), "{made}");
    let secret = made["key"].as_str().expect("secret").to_owned();
    let id = made["id"].as_str().expect("id").to_owned();
    let listed = keys(&s).to_string();
    assert!(
        listed.contains(&id) && !listed.contains(&secret),
        "{listed}"
    );

    let c = client(&secret);
    let (st, me) = into_json(c.get(s.url("/auth/me")).send().expect("me"));
    assert_eq!(st, 200, "{me}");
    assert_eq!(me["workspaces"][0]["role"], "app", "{me}");
    let (st, v) = send(
        &c,
        "POST",
        &s.sessions_url(""),
        Some(&json!({"prompt": "/reply hi"})),
    );
    assert_eq!(st, 200, "{v}");
    // An app's key manages nothing.
    let (st, _) = send(&c, "GET", &ws_url(&s, "default", "/keys"), None);
    assert_eq!(st, 403);

    let (st, v) = s.delete(&ws_url(&s, "default", &format!("/keys/{id}")));
    assert_eq!(st, 200, "{v}");
    let (st, _) = send(&c, "GET", &s.sessions_url(""), None);
    assert_eq!(st, 401, "revoked at once");
}

#[test]
fn owners_add_change_and_remove_people() {
    let s = Server::start();
    // A new address: an account without a password, as a member.
    let (st, p) = s.post(
        &ws_url(&s, "default", "/people"),
        &json!({"email": " New.Person@Example.com ", "role": "member"}),
    );
    assert_eq!(st, 201, "{p}");
    assert_eq!(p["email"], "new.person@example.com");
    assert_eq!(p["role"], "member");
    assert_eq!(p["created"], true);
    let user = p["userId"].as_str().expect("userId").to_owned();
    assert!(people(&s, "default").to_string().contains(&user));
    // Nobody signs in to an account without a password.
    let (st, _) = s.post(
        &s.url("/auth/login"),
        &json!({"email": "new.person@example.com", "password": "!none"}),
    );
    assert_eq!(st, 401);
    // Twice: a conflict.
    let (st, v) = s.post(
        &ws_url(&s, "default", "/people"),
        &json!({"email": "new.person@example.com", "role": "owner"}),
    );
    assert_eq!(st, 409, "{v}");

    // Someone of another workspace joins this one with their own account.
    let team_key = client(&workspace_member_key(&s.data_dir, "team", "member"));
    let (st, p) = s.post(
        &ws_url(&s, "default", "/people"),
        &json!({"email": "member@team.test.local", "role": "owner"}),
    );
    assert_eq!(st, 201, "{p}");
    assert_eq!(p["created"], false);
    let teammate = p["userId"].as_str().expect("userId").to_owned();

    // Role changes.
    let (st, v) = s.patch(
        &ws_url(&s, "default", &format!("/people/{user}")),
        &json!({"role": "owner"}),
    );
    assert_eq!(st, 200, "{v}");
    let row = |id: &str| -> Value {
        people(&s, "default")
            .as_array()
            .expect("people")
            .iter()
            .find(|p| p["userId"] == id)
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(row(&user)["role"], "owner");

    // Removal; their keys of the workspace stop at once.
    let (st, v) = s.delete(&ws_url(&s, "default", &format!("/people/{teammate}")));
    assert_eq!(st, 200, "{v}");
    assert_eq!(row(&teammate), Value::Null);
    let (st, _) = s.delete(&ws_url(&s, "default", &format!("/people/{teammate}")));
    assert_eq!(st, 404, "not a member any more");
    // They stay in their own workspace.
    let (st, _) = send(&team_key, "GET", &s.url("/v1/ws/team/agent/sessions"), None);
    assert_eq!(st, 200, "their own workspace's key still works");
}

#[test]
fn a_removed_persons_keys_are_refused_at_once() {
    let s = Server::start();
    let member_key = workspace_member_key(&s.data_dir, "team", "member");
    let member = client(&member_key);
    // The default workspace's owner is not in `team`; `team`'s owner is made by the CLI.
    let owner = client(&workspace_member_key(&s.data_dir, "team", "owner"));
    let (st, _) = send(&member, "GET", &s.url("/v1/ws/team/agent/sessions"), None);
    assert_eq!(st, 200);
    let (_, listed) = send(&owner, "GET", &s.url("/v1/ws/team/people"), None);
    let id = listed["people"]
        .as_array()
        .expect("people")
        .iter()
        .find(|p| p["email"] == "member@team.test.local")
        .expect("member listed")["userId"]
        .as_str()
        .expect("id")
        .to_owned();
    let (st, v) = send(
        &owner,
        "DELETE",
        &s.url(&format!("/v1/ws/team/people/{id}")),
        None,
    );
    assert_eq!(st, 200, "{v}");
    let (st, _) = send(&member, "GET", &s.url("/v1/ws/team/agent/sessions"), None);
    assert_eq!(st, 401, "the removed person's key is refused at once");
}

#[test]
fn the_last_owner_stays() {
    let s = Server::start();
    let me = people(&s, "default")
        .as_array()
        .expect("people")
        .iter()
        .find(|p| p["role"] == "owner")
        .expect("owner")["userId"]
        .as_str()
        .expect("id")
        .to_owned();
    let (st, v) = s.patch(
        &ws_url(&s, "default", &format!("/people/{me}")),
        &json!({"role": "member"}),
    );
    assert_eq!(st, 409, "{v}");
    assert_eq!(v["error"], "last_owner", "{v}");
    let (st, v) = s.delete(&ws_url(&s, "default", &format!("/people/{me}")));
    assert_eq!(st, 409, "{v}");
    assert!(people(&s, "default").to_string().contains(&me));
    let (st, _) = s.get(&s.sessions_url(""));
    assert_eq!(st, 200, "still the owner");
}

#[test]
fn bad_people_input_changes_nothing() {
    let s = Server::start();
    let before = people(&s, "default");
    for body in [
        json!({"email": "not-an-address", "role": "member"}),
        json!({"email": "a@b.example", "role": "admin"}),
        json!({"email": "a@b.example"}),
        json!({"email": "a@b.example", "role": "member", "extra": 1}),
        json!("a@b.example"),
    ] {
        let (st, v) = s.post(&ws_url(&s, "default", "/people"), &body);
        assert_eq!(st, 400, "{body} → {v}");
        assert!(v["message"].is_string(), "{v}");
    }
    let (st, _) = s.post_raw(&ws_url(&s, "default", "/people"), "{oops");
    assert_eq!(st, 400);
    let owner = before[0]["userId"].as_str().expect("id").to_owned();
    let (st, _) = s.patch(
        &ws_url(&s, "default", &format!("/people/{owner}")),
        &json!({"role": "boss"}),
    );
    assert_eq!(st, 400);
    for (method, rest) in [
        ("PATCH", "/people/nobody"),
        ("DELETE", "/people/nobody"),
        ("POST", "/people/nobody/password-reset"),
    ] {
        let body = (method == "PATCH").then(|| json!({"role": "member"}));
        let (st, v) = send(
            &client(&s.token),
            method,
            &ws_url(&s, "default", rest),
            body.as_ref(),
        );
        assert_eq!(st, 404, "{method} {rest}: {v}");
    }
    assert_eq!(people(&s, "default"), before);
}

#[test]
fn a_password_reset_link_sets_a_password_once() {
    let s = Server::start();
    let (st, p) = s.post(
        &ws_url(&s, "default", "/people"),
        &json!({"email": "invitee@example.com", "role": "member"}),
    );
    assert_eq!(st, 201, "{p}");
    let user = p["userId"].as_str().expect("id").to_owned();
    let (st, link) = s.post(
        &ws_url(&s, "default", &format!("/people/{user}/password-reset")),
        &json!({}),
    );
    assert_eq!(st, 201, "{link}");
    let url = link["url"].as_str().expect("url");
    let token = url.split_once("/reset#").expect("a /reset# link").1;
    assert!(link["expiresAt"].is_string());

    let anon = http_builder().build().expect("client");
    let reset = |password: &str| {
        into_json(
            anon.post(s.url("/auth/password-reset"))
                .json(&json!({"token": token, "password": password}))
                .send()
                .expect("reset"),
        )
    };
    // Too short: 400, the link still good.
    let (st, _) = reset("short");
    assert_eq!(st, 400);
    let (st, v) = reset("a-fine-new-password");
    assert_eq!(st, 200, "{v}");
    let (st, v) = s.post(
        &s.url("/auth/login"),
        &json!({"email": "invitee@example.com", "password": "a-fine-new-password"}),
    );
    assert_eq!(st, 200, "signs in with the chosen password: {v}");
    // Used up.
    let (st, _) = reset("another-new-password");
    assert_eq!(st, 403);
    let (st, _) = into_json(
        anon.post(s.url("/auth/password-reset"))
            .json(&json!({"token": "made-up", "password": "another-new-password"}))
            .send()
            .expect("reset"),
    );
    assert_eq!(st, 403);
}

#[test]
fn no_owner_takes_over_an_account_that_reaches_further() {
    let s = Server::start();
    // The member of `team` also joins `default`: the default owner does not own `team`.
    workspace_member_key(&s.data_dir, "team", "member");
    let (st, p) = s.post(
        &ws_url(&s, "default", "/people"),
        &json!({"email": "member@team.test.local", "role": "member"}),
    );
    assert_eq!(st, 201, "{p}");
    let user = p["userId"].as_str().expect("id");
    let (st, v) = s.post(
        &ws_url(&s, "default", &format!("/people/{user}/password-reset")),
        &json!({}),
    );
    assert_eq!(st, 403, "{v}");
}

#[test]
fn members_get_403_and_other_workspaces_404_on_every_access_route() {
    let s = Server::start();
    let member = client(&workspace_member_key(&s.data_dir, "team", "member"));
    let routes: [(&str, &str, Option<Value>); 7] = [
        (
            "POST",
            "/apps",
            Some(json!({"name": "m", "scopes": ["sessions"]})),
        ),
        (
            "POST",
            "/people",
            Some(json!({"email": "x@y.example", "role": "member"})),
        ),
        ("PATCH", "/people/someone", Some(json!({"role": "owner"}))),
        ("DELETE", "/people/someone", None),
        ("POST", "/people/someone/password-reset", Some(json!({}))),
        ("PATCH", "", Some(json!({"name": "Mine now"}))),
        (
            "POST",
            "/keys",
            Some(json!({"name": "m", "scopes": ["sessions"], "expiresAt": null})),
        ),
    ];
    for (method, rest, body) in &routes {
        let (st, v) = send(&member, method, &ws_url(&s, "team", rest), body.as_ref());
        assert_eq!(st, 403, "member: {method} {rest}: {v}");
        // The default workspace's owner does not see `team`; the member does not see `default`.
        let (st, v) = send(
            &client(&s.token),
            method,
            &ws_url(&s, "team", rest),
            body.as_ref(),
        );
        assert_eq!(st, 404, "other owner: {method} {rest}: {v}");
        let (st, v) = send(&member, method, &ws_url(&s, "default", rest), body.as_ref());
        assert_eq!(st, 404, "member elsewhere: {method} {rest}: {v}");
    }
    // A member may see the workspace's name and their role, and make no workspace.
    let (st, v) = send(&member, "GET", &ws_url(&s, "team", ""), None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["role"], "member");
    assert_eq!(v["name"], "team");
    let (st, v) = send(
        &member,
        "POST",
        &s.url("/v1/workspaces"),
        Some(&json!({"slug": "members-own"})),
    );
    assert_eq!(st, 403, "{v}");
    // Nothing changed.
    let (st, v) = send(&member, "GET", &ws_url(&s, "team", ""), None);
    assert_eq!((st, v["name"].clone()), (200, json!("team")));
    let (st, _) = s.get(&ws_url(&s, "members-own", ""));
    assert_eq!(st, 404);
}

#[test]
fn owners_create_and_rename_workspaces() {
    let s = Server::start();
    let (st, made) = s.post(
        &s.url("/v1/workspaces"),
        &json!({"slug": "research", "name": "Research lab"}),
    );
    assert_eq!(st, 201, "{made}");
    assert_eq!(made["role"], "owner");
    // The maker is its owner; the owner's key is bound to `default`, so they see it by browser.
    let (st, v) = s.post(
        &s.url("/auth/login"),
        &json!({"email": common::OWNER_EMAIL, "password": common::OWNER_PASSWORD}),
    );
    assert_eq!(st, 200, "{v}");
    let spaces: Vec<&str> = v["workspaces"]
        .as_array()
        .expect("workspaces")
        .iter()
        .filter_map(|w| w["slug"].as_str())
        .collect();
    assert!(spaces.contains(&"research"), "{v}");
    // Its root agent and sessions work with a key of the new workspace, made through the CLI.
    let key = common::cli(
        &s.data_dir,
        &[
            "token",
            "create",
            "--user",
            common::OWNER_EMAIL,
            "--workspace",
            "research",
            "--scope",
            "sessions",
        ],
        None,
    );
    let c = client(key.trim());
    let (st, v) = send(&c, "GET", &ws_url(&s, "research", "/agents"), None);
    assert_eq!(st, 200, "{v}");
    let (st, v) = send(&c, "GET", &ws_url(&s, "research", ""), None);
    assert_eq!((st, v["name"].clone()), (200, json!("Research lab")), "{v}");
    let (st, v) = send(
        &c,
        "PATCH",
        &ws_url(&s, "research", ""),
        Some(&json!({"name": "  Research  "})),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["name"], "Research");
    assert_eq!(v["slug"], "research");

    // Bad input, and a taken slug, change nothing.
    for body in [
        json!({"slug": "Has Spaces"}),
        json!({"slug": ""}),
        json!({"slug": "x".repeat(64)}),
        json!({"slug": "ok-slug", "name": ""}),
        json!({"slug": "ok-slug", "extra": true}),
    ] {
        let (st, v) = s.post(&s.url("/v1/workspaces"), &body);
        assert_eq!(st, 400, "{body} → {v}");
    }
    let (st, v) = s.post(&s.url("/v1/workspaces"), &json!({"slug": "research"}));
    assert_eq!(st, 409, "{v}");
    let (st, _) = s.get(&ws_url(&s, "ok-slug", ""));
    assert_eq!(st, 404);
    for body in [json!({"name": ""}), json!({"name": 5}), json!({})] {
        let (st, v) = send(&c, "PATCH", &ws_url(&s, "research", ""), Some(&body));
        assert_eq!(st, 400, "{body} → {v}");
    }
    let (_, v) = send(&c, "GET", &ws_url(&s, "research", ""), None);
    assert_eq!(v["name"], "Research");
    // An app's key makes no workspace.
    let (_, app) = s.post(
        &ws_url(&s, "default", "/apps"),
        &json!({"name": "bot", "scopes": ["sessions"]}),
    );
    let (st, _) = send(
        &client(app["key"].as_str().expect("key")),
        "POST",
        &s.url("/v1/workspaces"),
        Some(&json!({"slug": "bots-own"})),
    );
    assert_eq!(st, 403);
}

fn usage_url(s: &Server, ws: &str, from_ms_ago: u64, to: Option<&str>) -> String {
    let from = std::time::SystemTime::now() - Duration::from_millis(from_ms_ago);
    let mut url = ws_url(
        s,
        ws,
        &format!(
            "/usage?from={}",
            common::query_escape(&humantime::format_rfc3339_millis(from).to_string())
        ),
    );
    if let Some(to) = to {
        url.push_str(&format!("&to={}", common::query_escape(to)));
    }
    url
}

#[test]
fn usage_sums_each_agents_turns_in_the_window() {
    let s = Server::start();
    let (st, v) = s.get(&usage_url(&s, "default", 60_000, None));
    assert_eq!(st, 200, "{v}");
    let root = |v: &Value| -> Value {
        v["agents"]
            .as_array()
            .expect("agents")
            .iter()
            .find(|a| a["agentSlug"] == "root")
            .cloned()
            .expect("root is listed")
    };
    assert_eq!(root(&v)["turns"], 0, "{v}");
    for prompt in ["/reply one", "/reply two"] {
        let id = s.create_prompt(prompt);
        s.wait_terminal(&id, 1);
    }
    let (st, v) = s.get(&usage_url(&s, "default", 60_000, None));
    assert_eq!(st, 200, "{v}");
    let r = root(&v);
    assert_eq!(r["turns"], 2, "{v}");
    assert!(r["cents"].as_f64().is_some_and(|c| c >= 0.0), "{r}");
    // A window that ended before the turns counts none.
    let early =
        humantime::format_rfc3339_millis(std::time::SystemTime::now() - Duration::from_secs(3600))
            .to_string();
    let (st, v) = s.get(&usage_url(&s, "default", 7_200_000, Some(&early)));
    assert_eq!(st, 200, "{v}");
    assert_eq!(root(&v)["turns"], 0, "{v}");

    // Bad windows: 400.
    for url in [
        ws_url(&s, "default", "/usage"),
        ws_url(&s, "default", "/usage?from=yesterday"),
        ws_url(&s, "default", "/usage?from=2001-01-01T00:00:00Z"),
        usage_url(&s, "default", 0, Some("2001-01-01T00:00:00Z")),
        format!("{}&extra=1", usage_url(&s, "default", 60_000, None)),
    ] {
        let (st, v) = s.get(&url);
        assert_eq!(st, 400, "{url} → {v}");
    }
    // A member reads it; another workspace is 404.
    let member = client(&workspace_member_key(&s.data_dir, "team", "member"));
    let (st, v) = send(&member, "GET", &usage_url(&s, "team", 60_000, None), None);
    assert_eq!(st, 200, "{v}");
    let (st, _) = send(
        &member,
        "GET",
        &usage_url(&s, "default", 60_000, None),
        None,
    );
    assert_eq!(st, 404);
}

#[test]
fn the_cli_makes_expiring_keys_the_route_lists() {
    let s = Server::start();
    let expires = rfc3339_in(3_600_000);
    let key = common::cli(
        &s.data_dir,
        &[
            "token",
            "create",
            "--user",
            common::OWNER_EMAIL,
            "--scope",
            "sessions:read",
            "--name",
            "cli-expiring",
            "--expires",
            &expires,
        ],
        None,
    );
    let (st, _) = send(&client(&key), "GET", &s.sessions_url(""), None);
    assert_eq!(st, 200);
    let listed = keys(&s);
    let row = listed
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["name"] == "cli-expiring")
        .cloned()
        .expect("listed");
    assert!(row["expiresAt"].is_string(), "{row}");
    // A past time is refused and makes no key.
    let before = key_ids(&s);
    let mut cmd = common::sessiond_command();
    cmd.args([
        "token",
        "create",
        "--user",
        common::OWNER_EMAIL,
        "--scope",
        "sessions",
        "--expires",
        "2001-01-01T00:00:00Z",
        "--data-dir",
    ])
    .arg(&s.data_dir)
    .args(common::database_args(&s.data_dir));
    let out = common::run_bounded(cmd, Duration::from_secs(60));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--expires"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(key_ids(&s), before);
}
