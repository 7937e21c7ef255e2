//! The console's Access pages and Overview in headless Chromium, against the real server: a key
//! made in the UI authenticates a request and one revoked there is refused at once; an expiring
//! key says so; people added in the UI get a password link that works; a member sees no
//! management; workspaces are made, renamed and switched; the overview shows running sessions,
//! those that need someone (asking, a stalled turn) and each agent's cost. Bad input shows the
//! server's error and changes nothing.
//! Screenshots land in `target/ui-screenshots/`.
//!
//! Like `tests/ui.rs` this target runs under libtest-mimic: without Chromium each test is
//! reported `ignored` with the reason (with `CI` set, a missing browser fails instead).

mod common;
#[path = "common/console.rs"]
mod console;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::time::Duration;

use common::*;
use console::{WAIT, browser, no_dialog, run, submit_dialog, wait_text};
use serde_json::{Value, json};
use webdriver::*;

const PHONE: (u32, u32) = (375, 812);

const TESTS: &[(&str, fn())] = &[
    (
        "a_key_made_in_the_ui_works_until_revoked_there",
        a_key_made_in_the_ui_works_until_revoked_there,
    ),
    (
        "an_app_key_with_an_expiry_and_bad_input",
        an_app_key_with_an_expiry_and_bad_input,
    ),
    (
        "a_person_added_in_the_ui_sets_a_password_and_sees_no_management",
        a_person_added_in_the_ui_sets_a_password_and_sees_no_management,
    ),
    (
        "workspaces_are_made_renamed_and_switched",
        workspaces_are_made_renamed_and_switched,
    ),
    (
        "the_overview_shows_running_asking_and_cost",
        the_overview_shows_running_asking_and_cost,
    ),
];

fn main() -> std::process::ExitCode {
    run(TESTS)
}

/// Signs in as `email`, after dropping whatever browser session the page had.
fn sign_in(b: &Browser, s: &Server, email: &str, password: &str) {
    b.goto(&s.url("/login"));
    b.cmd("DELETE", "/cookie", None);
    b.goto(&s.url("/login"));
    b.type_into("#login-email", email);
    b.type_into("#login-password", password);
    b.click_css(".auth-form button[type=submit]");
    b.find(".shell");
}

fn login(b: &Browser, s: &Server) {
    sign_in(b, s, OWNER_EMAIL, OWNER_PASSWORD);
    b.find(".overview-view");
}

fn bearer(key: &str) -> reqwest::blocking::Client {
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

fn status_with(key: &str, url: &str) -> u16 {
    bearer(key).get(url).send().expect("GET").status().as_u16()
}

fn ui_errors(b: &Browser) -> Vec<String> {
    b.console_errors()
        .into_iter()
        .filter(|m| {
            m.contains("Content Security Policy")
                || m.contains("Refused to")
                || m.contains("Uncaught")
                || m.contains("TypeError")
                || m.contains("SyntaxError")
        })
        .collect()
}

fn a_key_made_in_the_ui_works_until_revoked_there() {
    let b = browser();
    let s = Server::start();
    login(&b, &s);
    b.screenshot("overview");
    b.click_css("#sidebar a.nav-item[href$='/access/keys']");
    b.find("#keys-table tbody tr[data-key-id]");
    b.click_css("#key-new");
    b.type_into("#key-name", "made in the console");
    b.click_css("#key-scope-sessions");
    b.click_css("#key-scope-sessions-read");
    b.screenshot("access-key-new");
    submit_dialog(&b);
    // The secret, shown once.
    b.wait_js(
        "the new key's secret",
        "return document.querySelector('#new-key-secret')?.value.startsWith('sk_');",
        WAIT,
    );
    let secret = b
        .exec(
            "return document.querySelector('#new-key-secret').value;",
            &[],
        )
        .as_str()
        .expect("secret")
        .to_owned();
    b.screenshot("access-key-secret");
    submit_dialog(&b);
    no_dialog(&b);
    assert!(
        !b.exec("return document.body.innerHTML;", &[])
            .as_str()
            .unwrap_or("")
            .contains(&secret),
        "the secret is not on the page once its dialog is closed"
    );

    // It authenticates, with the scopes chosen.
    let list = s.sessions_url("");
    assert_eq!(status_with(&secret, &list), 200);
    let create = bearer(&secret)
        .post(&list)
        .json(&json!({"prompt": "hi"}))
        .send()
        .expect("POST");
    assert_eq!(create.status().as_u16(), 403, "read-only key");
    let (_, listed) = s.get(&s.url("/v1/ws/default/keys"));
    let row = listed["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["name"] == "made in the console")
        .cloned()
        .expect("the key is listed by the API");
    assert_eq!(row["scopes"], json!(["sessions:read"]));
    let id = row["id"].as_str().expect("id").to_owned();

    // Last use shows after a reload of the list.
    poll_until("last use recorded", WAIT, || {
        let (_, v) = s.get(&s.url("/v1/ws/default/keys"));
        v["keys"]
            .as_array()
            .and_then(|ks| ks.iter().find(|k| k["id"] == id.as_str()).cloned())
            .filter(|k| k["lastUsedAt"].is_string())
    });
    b.refresh();
    let row_css = format!("#keys-table tr[data-key-id='{id}']");
    b.find(&row_css);
    b.wait_js(
        "a last use",
        &format!(
            "const e = document.querySelector({}); return !!e && e.textContent !== 'Never';",
            json!(format!("{row_css} .key-last-used"))
        ),
        WAIT,
    );
    b.screenshot("access-keys");

    // Revoked in the UI: refused at once.
    b.click_css(&format!("{row_css} .key-revoke"));
    wait_text(
        &b,
        "the confirmation",
        "dialog[open] .dialog-title",
        "Revoke this key?",
    );
    b.click_css("dialog[open] .btn-danger");
    wait_text(
        &b,
        "the revoked status",
        &format!("{row_css} .key-status"),
        "Revoked",
    );
    assert_eq!(status_with(&secret, &list), 401, "refused at once");
    let errors = ui_errors(&b);
    assert!(errors.is_empty(), "browser console: {errors:#?}");
}

fn an_app_key_with_an_expiry_and_bad_input() {
    let b = browser();
    let s = Server::start();
    login(&b, &s);
    b.goto(&s.url("/#/w/default/access/keys"));
    b.find("#keys-table tbody tr[data-key-id]");
    let ids = || -> Vec<String> {
        let (_, v) = s.get(&s.url("/v1/ws/default/keys"));
        v["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|k| k["id"].as_str().expect("id").to_owned())
            .collect()
    };
    let before = ids();

    // No scope: the server's error shows in the dialog, and no key is made.
    b.click_css("#key-new");
    b.type_into("#key-name", "no scopes");
    b.click_css("#key-scope-sessions");
    submit_dialog(&b);
    wait_text(
        &b,
        "the server's error",
        "dialog[open] .form-error",
        "at least one scope",
    );
    b.screenshot("access-key-error");
    // A date in the past: refused too.
    b.click_css("#key-scope-sessions");
    b.exec(
        "const e = document.querySelector('#key-expires'); e.value = '2001-01-01'; e.dispatchEvent(new Event('input'));",
        &[],
    );
    submit_dialog(&b);
    wait_text(
        &b,
        "the expiry refused",
        "dialog[open] .form-error",
        "in the future",
    );
    assert_eq!(ids(), before, "bad input made no key");

    // An app key expiring next year.
    let next_year = b
        .exec(
            "const d = new Date(); d.setFullYear(d.getFullYear() + 1); return d.toISOString().slice(0, 10);",
            &[],
        )
        .as_str()
        .expect("date")
        .to_owned();
    b.exec(
        "const e = document.querySelector('#key-expires'); e.value = arguments[0]; document.querySelector('#key-kind').value = 'app'; document.querySelector('#key-name').value = 'ci-bot';",
        &[json!(next_year)],
    );
    submit_dialog(&b);
    b.wait_js(
        "the app key's secret",
        "return document.querySelector('#new-key-secret')?.value.startsWith('sk_');",
        WAIT,
    );
    let secret = b
        .exec(
            "return document.querySelector('#new-key-secret').value;",
            &[],
        )
        .as_str()
        .expect("secret")
        .to_owned();
    submit_dialog(&b);
    no_dialog(&b);
    let (st, me) = into_json(bearer(&secret).get(s.url("/auth/me")).send().expect("me"));
    assert_eq!(st, 200, "{me}");
    assert_eq!(me["workspaces"][0]["role"], "app");
    let (_, listed) = s.get(&s.url("/v1/ws/default/keys"));
    let row = listed["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .find(|k| k["kind"] == "app")
        .cloned()
        .expect("the app key");
    assert!(
        row["expiresAt"]
            .as_str()
            .is_some_and(|t| t.starts_with(&next_year)),
        "{row}"
    );
    wait_text(&b, "the app row", "#keys-table", "App");
}

fn a_person_added_in_the_ui_sets_a_password_and_sees_no_management() {
    let b = browser();
    let s = Server::start();
    login(&b, &s);
    b.goto(&s.url("/#/w/default/access/people"));
    b.find("#people-table tbody tr[data-user-id]");

    // Bad input first: the server's error, nobody added.
    b.type_into("#person-email", "not-an-address");
    b.click_css("#person-add button[type=submit]");
    wait_text(
        &b,
        "the server's error",
        "#person-error",
        "not an email address",
    );
    let (_, v) = s.get(&s.url("/v1/ws/default/people"));
    assert_eq!(v["people"].as_array().map(Vec::len), Some(1));

    b.exec("document.querySelector('#person-email').value = '';", &[]);
    b.type_into("#person-email", "new.member@example.com");
    b.click_css("#person-add button[type=submit]");
    b.wait_js(
        "the password link",
        "return document.querySelector('#reset-link')?.value.includes('/reset#');",
        WAIT,
    );
    let link = b
        .exec("return document.querySelector('#reset-link').value;", &[])
        .as_str()
        .expect("link")
        .to_owned();
    b.screenshot("access-person-link");
    submit_dialog(&b);
    no_dialog(&b);
    wait_text(&b, "the new row", "#people-table", "new.member@example.com");
    b.screenshot("access-people");
    let (_, v) = s.get(&s.url("/v1/ws/default/people"));
    let person = v["people"]
        .as_array()
        .expect("people")
        .iter()
        .find(|p| p["email"] == "new.member@example.com")
        .cloned()
        .expect("added");
    assert_eq!(person["role"], "member");

    // The link lets them choose a password (it is for whoever holds it, signed in or not).
    b.goto(&link);
    b.find("#reset-password");
    b.screenshot("password-reset");
    b.type_into("#reset-password", "short");
    b.type_into("#reset-confirm", "short");
    b.click_css(".auth-form button[type=submit]");
    wait_text(&b, "the server's error", "#reset-error", "10 characters");
    b.exec(
        "document.querySelector('#reset-password').value = ''; document.querySelector('#reset-confirm').value = '';",
        &[],
    );
    b.type_into("#reset-password", "member-password-1");
    b.type_into("#reset-confirm", "member-password-1");
    b.click_css(".auth-form button[type=submit]");
    b.find("#login-email");

    // Signed in as the member: no management link, and the page says why.
    sign_in(&b, &s, "new.member@example.com", "member-password-1");
    b.find(".overview-view");
    assert_eq!(
        b.exec(
            "return !!document.querySelector(\"#sidebar a.nav-item[href$='/access/keys']\");",
            &[]
        ),
        false,
        "members see no Access link"
    );
    b.goto(&s.url("/#/w/default/access/keys"));
    wait_text(
        &b,
        "the owners-only notice",
        ".access-view",
        "Only the workspace’s owners",
    );
    assert_eq!(
        b.exec("return !!document.querySelector('#key-new');", &[]),
        false
    );
    b.screenshot("access-member");

    // The owner makes them an owner in the UI; the API agrees.
    login(&b, &s);
    b.goto(&s.url("/#/w/default/access/people"));
    let sel = format!(
        "#people-table tr[data-user-id='{}'] select",
        person["userId"].as_str().expect("id")
    );
    b.find(&sel);
    b.exec(
        "const e = document.querySelector(arguments[0]); e.value = 'owner'; e.dispatchEvent(new Event('change'));",
        &[json!(sel)],
    );
    poll_until("the role changed", WAIT, || {
        let (_, v) = s.get(&s.url("/v1/ws/default/people"));
        v["people"]
            .as_array()
            .and_then(|ps| {
                ps.iter()
                    .find(|p| p["email"] == "new.member@example.com")
                    .cloned()
            })
            .filter(|p| p["role"] == "owner")
    });
    let errors = ui_errors(&b);
    assert!(errors.is_empty(), "browser console: {errors:#?}");
}

fn workspaces_are_made_renamed_and_switched() {
    let b = browser();
    let s = Server::start();
    login(&b, &s);
    b.goto(&s.url("/#/w/default/access/workspace"));
    b.find("#ws-create");
    // A bad slug: the server's error, no workspace.
    b.type_into("#ws-new-slug", "Not A Slug");
    b.click_css("#ws-create button[type=submit]");
    wait_text(&b, "the server's error", "#ws-create-error", "a-z, 0-9");
    b.exec("document.querySelector('#ws-new-slug').value = '';", &[]);
    b.type_into("#ws-new-slug", "research");
    b.type_into("#ws-new-name", "Research lab");
    b.click_css("#ws-create button[type=submit]");
    // Switched to it.
    b.wait_js(
        "the new workspace's page",
        "return location.hash.startsWith('#/w/research/access/workspace') && document.querySelector('#ws-name')?.value === 'Research lab';",
        WAIT,
    );
    b.find("#ws-select option[value=research]");
    b.exec("document.querySelector('#ws-name').value = '';", &[]);
    b.type_into("#ws-name", "Research");
    b.click_css("#ws-rename button[type=submit]");
    let login_body = json!({"email": OWNER_EMAIL, "password": OWNER_PASSWORD});
    let (st, me) = s.post(&s.url("/auth/login"), &login_body);
    assert_eq!(st, 200);
    assert!(me.to_string().contains("\"research\""), "{me}");
    // The name through the API, with a key of the new workspace.
    let key = cli(
        &s.data_dir,
        &[
            "token",
            "create",
            "--user",
            OWNER_EMAIL,
            "--workspace",
            "research",
            "--scope",
            "sessions",
        ],
        None,
    );
    poll_until("the rename", WAIT, || {
        let (_, v) = into_json(
            bearer(key.trim())
                .get(s.url("/v1/ws/research"))
                .send()
                .expect("GET"),
        );
        (v["name"] == "Research").then_some(())
    });
    b.screenshot("access-workspace");
    // Switching back with the sidebar's picker.
    b.exec(
        "const e = document.querySelector('#ws-select'); e.value = 'default'; e.dispatchEvent(new Event('change'));",
        &[],
    );
    b.wait_js(
        "the default workspace's overview",
        "return location.hash === '#/w/default/overview' && !!document.querySelector('.overview-view');",
        WAIT,
    );
}

fn the_overview_shows_running_asking_and_cost() {
    let b = browser();
    // A short stall guard, so that a turn that makes no progress ends failed soon.
    let s = Server::start_with_config("[runner]\nstall_timeout_ms = 1500\n");
    let done = s.create_prompt("/title Cost check\n/reply Done.");
    assert_eq!(s.wait_terminal(&done, 1)["event"]["type"], "complete");
    let asking = s.create_prompt("/ask Deploy now? | yes | no");
    let stalled = s.create_prompt("/hang");
    let end = s.wait_terminal(&stalled, 1);
    assert_eq!(end["event"]["status"], "failed", "{end}");
    let running = s.create_prompt("/slow 400\n/stream 400");
    // Two schedules of a new agent, one paused: only the active one is due.
    let (st, agent) = s.post(
        &s.url("/v1/ws/default/agents"),
        &json!({"slug": "reporter", "name": "Reporter"}),
    );
    assert_eq!(st, 201, "{agent}");
    let agent_id = agent["id"].as_str().expect("id").to_owned();
    for (name, paused) in [("nightly-report", false), ("paused-digest", true)] {
        let (st, v) = s.post(
            &s.url(&format!("/agentex/agents/{agent_id}/schedules")),
            &json!({
                "name": name,
                "cron_expression": "0 3 * * *",
                "timezone": "UTC",
                "initial_input": {"content": "Write the report", "author": "user", "type": "text"},
            }),
        );
        assert_eq!(st, 200, "{v}");
        if paused {
            let id = v["id"].as_str().expect("id");
            let (st, v) = s.post(
                &s.url(&format!("/agentex/agents/{agent_id}/schedules/{id}/pause")),
                &json!({}),
            );
            assert_eq!(st, 200, "{v}");
        }
    }
    login(&b, &s);
    wait_text(
        &b,
        "the due schedule",
        "#overview-schedules",
        "nightly-report",
    );
    assert_eq!(
        b.exec(
            "return document.querySelector('#overview-schedules').textContent.includes('paused-digest');",
            &[]
        ),
        false,
        "a paused schedule is not due"
    );
    b.find(&format!("#overview-attention [data-id='{asking}']"));
    // The stalled turn needs someone too, and reads failed; a finished session does not.
    b.find(&format!("#overview-attention [data-id='{stalled}']"));
    wait_text(
        &b,
        "the stalled session's state",
        &format!("#overview-attention [data-id='{stalled}']"),
        "Failed",
    );
    assert_eq!(
        b.exec(
            "return !!document.querySelector(`#overview-attention [data-id='${arguments[0]}']`);",
            &[json!(done)]
        ),
        false,
        "a finished session needs nobody"
    );
    b.find(&format!("#overview-running [data-id='{running}']"));
    // The root agent's spending, as /usage counts it.
    let from = std::time::SystemTime::now() - Duration::from_secs(24 * 3600);
    let (st, usage) = s.get(&s.url(&format!(
        "/v1/ws/default/usage?from={}",
        query_escape(&humantime::format_rfc3339_millis(from).to_string())
    )));
    assert_eq!(st, 200, "{usage}");
    let root = usage["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .find(|a| a["agentSlug"] == "root")
        .cloned()
        .expect("root agent");
    assert!(root["turns"].as_u64().unwrap_or(0) >= 1, "{root}");
    b.find("#overview-cost tr[data-agent=root] .cost-week");
    wait_text(
        &b,
        "a dollar figure",
        "#overview-cost tr[data-agent=root] .cost-week",
        "$",
    );
    b.screenshot("overview-busy");
    b.set_viewport(PHONE.0, PHONE.1);
    b.refresh();
    b.find(&format!("#overview-attention [data-id='{asking}']"));
    let overflow = b.exec(
        "return document.documentElement.scrollWidth > window.innerWidth;",
        &[],
    );
    assert_eq!(overflow, false, "no horizontal scrolling at 375 px");
    b.screenshot("overview-phone");
    b.goto(&s.url("/#/w/default/access/keys"));
    b.find("#keys-table tbody tr[data-key-id]");
    b.screenshot("access-keys-phone");
    let errors = ui_errors(&b);
    assert!(errors.is_empty(), "browser console: {errors:#?}");
    let _: Value = usage;
}
