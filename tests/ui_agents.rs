//! The console's agent pages: an agent's About page (engine, model, status with its reason,
//! description, an ACP server's registration, its tasks), its engine edited, an agent created and
//! deleted; its schedules (next runs, create, pause, resume, run now, skip and unskip, recent runs
//! linked to their sessions); its deployments (create, promote, preview).
//!
//! Data is made through `/v1` and `/agentex`, then seen in headless Chromium; what is done in the
//! page is then checked through the same API (as `tests/ui.rs`, under libtest-mimic: a missing
//! browser is reported `ignored`). Screenshots land in `target/ui-screenshots/`.

mod common;
#[path = "common/console.rs"]
mod console;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::time::Duration;

use common::*;
use console::*;
use serde_json::{Value, json};
use webdriver::Browser;

const TESTS: &[(&str, fn())] = &[
    (
        "the_about_page_shows_the_agent_and_edits_it_through_the_policy",
        the_about_page_shows_the_agent_and_edits_it_through_the_policy,
    ),
    (
        "an_agent_is_created_and_deleted_in_the_console",
        an_agent_is_created_and_deleted_in_the_console,
    ),
    (
        "schedules_are_made_paused_run_and_skipped_in_the_console",
        schedules_are_made_paused_run_and_skipped_in_the_console,
    ),
    (
        "deployments_are_made_previewed_and_promoted_in_the_console",
        deployments_are_made_previewed_and_promoted_in_the_console,
    ),
    (
        "a_member_manages_agents_as_the_api_lets_them",
        a_member_manages_agents_as_the_api_lets_them,
    ),
];

fn main() -> std::process::ExitCode {
    run(TESTS)
}

/// Schedules may tick every second; ACP servers on this machine may be named.
const CONFIG: &str =
    "[schedules]\nmin_interval_seconds = 1\n\n[policy]\nacp_hosts = [\"127.0.0.1\"]\n";
const LONG: Duration = Duration::from_secs(30);

fn agent(s: &Server, slug: &str, engine: Value) -> Value {
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": slug, "engine": engine}),
    );
    assert_eq!(status, 201, "{v}");
    v
}

fn goto_hash(b: &Browser, hash: &str) {
    b.exec("location.hash = arguments[0];", &[json!(hash)]);
}

/// Replaces a field's value (`type_into` appends to what is there).
fn set_value(b: &Browser, css: &str, value: &str) {
    b.exec(
        "const e = document.querySelector(arguments[0]); e.value = arguments[1]; e.dispatchEvent(new Event('input', {bubbles: true}));",
        &[json!(css), json!(value)],
    );
}

/// The page fits a phone's width: nothing scrolls sideways.
fn fits_phone(b: &Browser, what: &str) {
    b.set_viewport(375, 800);
    b.wait_js(
        &format!("{what} fits 375 px"),
        "return document.documentElement.scrollWidth <= window.innerWidth;",
        WAIT,
    );
    b.screenshot(&format!("{what}-375"));
    b.set_viewport(DESKTOP.0, DESKTOP.1);
}

fn no_ui_errors(b: &Browser) {
    let errors = ui_errors(b);
    assert!(errors.is_empty(), "browser errors: {errors:#?}");
}

fn the_about_page_shows_the_agent_and_edits_it_through_the_policy() {
    let b = browser();
    let s = Server::start_with_config(CONFIG);
    agent(&s, "helper", json!({"kind": "scripted"}));
    let (status, v) = s.post(
        &s.url("/agentex/agents/register-build"),
        &json!({"name": "helper", "description": "Writes the weekly report."}),
    );
    assert_eq!(status, 200, "{v}");
    let remote = agent(
        &s,
        "remote",
        json!({"kind": "acp", "url": "http://127.0.0.1:9/", "acpType": "async"}),
    );
    assert_eq!(remote["engine"]["kind"], "acp");
    // A task of the agent, made on /agentex, listed on its page.
    let (status, task) = s.post(
        &s.url("/agentex/agents/name/helper/rpc"),
        &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create", "params": {"name": "first-task"}}),
    );
    assert_eq!(status, 200, "{task}");
    let task_id = task["result"]["id"].as_str().expect("task id").to_owned();

    login(&b, &s);
    // From the agent's home to its About page.
    goto_hash(&b, &format!("#/w/{WS}/agents/helper"));
    b.click_css("#agent-about-link");
    wait_text(&b, "the engine", "#agent-engine-kind", "scripted");
    let (_, ext) = s.get(&s.url("/agentex/agents/name/helper"));
    wait_text(
        &b,
        "the status",
        "#agent-status",
        ext["status"].as_str().unwrap_or("?"),
    );
    assert_eq!(ext["status"], "Ready");
    wait_text(
        &b,
        "the description",
        "#agent-description",
        "Writes the weekly report.",
    );
    wait_text(
        &b,
        "the task",
        &format!("#agent-tasks tr[data-task-id='{task_id}'] a"),
        "first-task",
    );
    let href = b.exec(
        "return document.querySelector(arguments[0]).getAttribute('href');",
        &[json!(format!(
            "#agent-tasks tr[data-task-id='{task_id}'] a"
        ))],
    );
    assert_eq!(href, json!(format!("#/w/{WS}/s/{task_id}")));
    assert_eq!(count(&b, "#agent-acp-url"), 0, "not an ACP server");
    wait_text(
        &b,
        "registered by register-build",
        "#agent-registration",
        "Registered",
    );
    b.screenshot("agent");

    // An engine the policy refuses: the server's error in the form, and nothing changes.
    set_value(
        &b,
        "#agent-engine",
        r#"{"kind": "command", "program": "rm"}"#,
    );
    b.click_css("#agent-save");
    wait_text(
        &b,
        "the policy's refusal",
        "#agent-engine-error",
        "policy.programs",
    );
    b.screenshot("agent-refused");
    let (_, after) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/helper")));
    assert_eq!(
        after["engine"],
        json!({"kind": "scripted"}),
        "nothing changed"
    );

    // An engine it allows, and a new name: saved, and the page shows them after a reload.
    set_value(&b, "#agent-name", "Report writer");
    set_value(
        &b,
        "#agent-engine",
        r#"{"kind": "scripted", "tiers": ["economy"]}"#,
    );
    b.click_css("#agent-save");
    poll_until("the edit saved", LONG, || {
        let (_, v) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/helper")));
        (v["name"] == "Report writer").then_some(v)
    });
    b.refresh();
    wait_text(
        &b,
        "the new name after a reload",
        ".agent-page h1",
        "Report writer",
    );
    let (_, v) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/helper")));
    assert_eq!(v["engine"]["tiers"], json!(["economy"]));

    // An ACP server's registration: nothing listens at its URL, so a turn records the error.
    goto_hash(&b, &format!("#/w/{WS}/agents/remote/about"));
    wait_text(&b, "the ACP URL", "#agent-acp-url", "http://127.0.0.1:9/");
    wait_text(&b, "the engine", "#agent-engine-kind", "acp");
    wait_text(
        &b,
        "no contact yet",
        "#agent-last-contact",
        "Never answered",
    );
    wait_text(&b, "no error yet", "#agent-last-error", "None");
    s.create(json!({"prompt": "anyone?", "cwd": "agents/remote"}));
    let contact = poll_until("the error recorded", LONG, || {
        let (_, v) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/remote/contact")));
        v["lastError"].is_string().then_some(v)
    });
    b.refresh();
    wait_text(
        &b,
        "the last error",
        "#agent-last-error",
        contact["lastError"].as_str().unwrap_or("?"),
    );
    wait_text(
        &b,
        "still no contact",
        "#agent-last-contact",
        "Never answered",
    );
    b.screenshot("agent-acp");
    fits_phone(&b, "agent");

    // Back and forward between the views keep each one.
    goto_hash(&b, &format!("#/w/{WS}/agents/remote/schedules"));
    b.find("#schedules-table");
    b.exec("history.back();", &[]);
    wait_text(
        &b,
        "back on the About page",
        "#agent-acp-url",
        "http://127.0.0.1:9/",
    );
    b.exec("history.forward();", &[]);
    b.find("#schedules-table");
    no_ui_errors(&b);
}

fn an_agent_is_created_and_deleted_in_the_console() {
    let b = browser();
    let s = Server::start_with_config(CONFIG);
    login(&b, &s);
    goto_hash(&b, &format!("#/w/{WS}/agents"));
    b.click_css("#agent-new");
    b.find("#new-agent-slug");
    b.type_into("#new-agent-slug", "made-here");
    b.type_into("#new-agent-name", "Made here");
    // The policy refuses an engine at creation too: the dialog stays open with the error.
    set_value(
        &b,
        "#new-agent-engine",
        r#"{"kind": "command", "program": "rm"}"#,
    );
    submit_dialog(&b);
    wait_text(
        &b,
        "the refusal in the dialog",
        "dialog[open] .form-error",
        "policy.programs",
    );
    let (status, _) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/made-here")));
    assert_eq!(status, 404, "nothing was made");
    set_value(&b, "#new-agent-engine", "{}");
    submit_dialog(&b);
    no_dialog(&b);
    wait_text(&b, "its About page", ".agent-page h1", "Made here");
    let (status, v) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/made-here")));
    assert_eq!(status, 200, "{v}");
    wait_text(
        &b,
        "the server's default engine",
        "#agent-engine-kind",
        "server default",
    );

    b.click_css("#agent-delete");
    submit_dialog(&b);
    no_dialog(&b);
    b.find(".agents-view");
    let (status, _) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/made-here")));
    assert_eq!(status, 404, "deleted");
    no_ui_errors(&b);
}

fn schedule(s: &Server, agent_id: &str, id: &str) -> Value {
    let (status, v) = s.get(&s.url(&format!("/agentex/agents/{agent_id}/schedules/{id}")));
    assert_eq!(status, 200, "{v}");
    v
}

fn schedules_are_made_paused_run_and_skipped_in_the_console() {
    let b = browser();
    let s = Server::start_with_config(CONFIG);
    let a = agent(&s, "cron", json!({"kind": "scripted"}));
    let agent_id = a["id"].as_str().expect("id").to_owned();
    let base = s.url(&format!("/agentex/agents/{agent_id}/schedules"));
    let (status, daily) = s.post(
        &base,
        &json!({"name": "daily", "cron_expression": "0 9 * * *", "timezone": "America/New_York",
                "initial_input": {"content": "the daily report"}}),
    );
    assert_eq!(status, 200, "{daily}");
    let daily_id = daily["id"].as_str().expect("id").to_owned();

    login(&b, &s);
    goto_hash(&b, &format!("#/w/{WS}/agents/cron/schedules"));
    wait_text(&b, "the schedule listed", "#schedules-table", "daily");
    b.screenshot("schedules");
    b.click_css(&format!(
        "tr[data-schedule-id='{daily_id}'] a.schedule-link"
    ));
    // The next five runs, as the server computes them.
    b.wait_js(
        "five next runs",
        "return document.querySelectorAll('#schedule-next li[data-time]').length === 5;",
        WAIT,
    );
    let shown = b.exec(
        "return [...document.querySelectorAll('#schedule-next li[data-time]')].map(e => e.dataset.time);",
        &[],
    );
    let next: Vec<Value> = daily["next_action_times"].as_array().expect("times")[..5].to_vec();
    assert_eq!(shown, Value::Array(next.clone()));
    wait_text(
        &b,
        "the cadence",
        "#schedule-cadence",
        "0 9 * * * (America/New_York)",
    );
    b.screenshot("schedule");

    // Skip the first, then put it back.
    b.click_css("#schedule-next li[data-time] .schedule-skip");
    poll_until("skipped per the API", LONG, || {
        let v = schedule(&s, &agent_id, &daily_id);
        (v["skipped_action_times"] == json!([next[0].clone()])).then_some(())
    });
    b.find("#schedule-skipped .schedule-unskip");
    b.click_css("#schedule-skipped .schedule-unskip");
    poll_until("unskipped per the API", LONG, || {
        let v = schedule(&s, &agent_id, &daily_id);
        (v["skipped_action_times"] == json!([])).then_some(())
    });
    b.wait_js(
        "the skipped list gone",
        "return !document.querySelector('#schedule-skipped');",
        WAIT,
    );

    // Run now: a run appears among the recent runs, linked to its session.
    b.click_css("#schedule-trigger");
    let runs = poll_until("a manual run", LONG, || {
        let (_, v) = s.get(&s.url(&format!(
            "/agentex/tasks?agent_id={agent_id}&task_metadata={}",
            query_escape(&json!({"schedule_id": daily_id}).to_string())
        )));
        v.as_array().filter(|a| a.len() == 1).cloned()
    });
    let run_id = runs[0]["id"].as_str().expect("task id").to_owned();
    let row = format!("#schedule-runs tr[data-task-id='{run_id}'] a");
    b.find(&row);
    wait_text(&b, "the run's kind", "#schedule-runs", "manual");
    b.click_css(&row);
    b.find(".session-view .timeline");
    assert!(
        b.exec("return location.hash;", &[])
            .as_str()
            .unwrap_or("")
            .ends_with(&format!("/s/{run_id}")),
        "the run opens its session"
    );
    b.exec("history.back();", &[]);
    b.find(&row);

    // A schedule made in the console, at an interval, then paused there: paused per the API, and
    // it does not fire while another one, active, goes on firing.
    goto_hash(&b, &format!("#/w/{WS}/agents/cron/schedules"));
    b.click_css("#schedule-new");
    b.find("#schedule-name");
    b.type_into("#schedule-name", "every-second");
    b.click_css("#schedule-kind-interval");
    b.type_into("#schedule-interval", "1");
    b.type_into("#schedule-message", "tick");
    submit_dialog(&b);
    no_dialog(&b);
    let made = poll_until("the schedule made", LONG, || {
        let (_, v) = s.get(&base);
        v["run_schedules"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == "every-second").cloned())
    });
    assert_eq!(made["interval_seconds"], 1);
    let every_id = made["id"].as_str().expect("id").to_owned();
    b.find("#schedule-pause");
    b.click_css("#schedule-pause");
    let paused = poll_until("paused per the API", LONG, || {
        let v = schedule(&s, &agent_id, &every_id);
        (v["state"] == "PAUSED").then_some(v)
    });
    b.find("#schedule-next-none");
    b.find("#schedule-resume");
    // A control schedule that keeps ticking: once it has fired twice, the paused one has had
    // the time to fire and has not.
    let (status, control) = s.post(
        &base,
        &json!({"name": "control", "interval_seconds": 1, "initial_input": {"content": "control"}}),
    );
    assert_eq!(status, 200, "{control}");
    let control_id = control["id"].as_str().expect("id").to_owned();
    poll_until("the control fired twice", LONG, || {
        let v = schedule(&s, &agent_id, &control_id);
        (v["num_actions_taken"].as_u64() >= Some(2)).then_some(())
    });
    let still = schedule(&s, &agent_id, &every_id);
    assert_eq!(
        still["num_actions_taken"], paused["num_actions_taken"],
        "a paused schedule does not fire"
    );
    assert_eq!(still["state"], "PAUSED");
    // Resumed in the console.
    b.click_css("#schedule-resume");
    poll_until("resumed per the API", LONG, || {
        let v = schedule(&s, &agent_id, &every_id);
        (v["state"] == "ACTIVE").then_some(())
    });
    b.find("#schedule-pause");
    fits_phone(&b, "schedule");
    no_ui_errors(&b);
}

fn deployments_are_made_previewed_and_promoted_in_the_console() {
    let b = browser();
    let s = Server::start_with_config(CONFIG);
    let a = agent(&s, "shipped", json!({"kind": "scripted"}));
    let agent_id = a["id"].as_str().expect("id").to_owned();
    let base = s.url(&format!("/agentex/agents/{agent_id}/deployments"));
    let (status, v1) = s.post(&base, &json!({"docker_image": "v1"}));
    assert_eq!(status, 200, "{v1}");

    login(&b, &s);
    goto_hash(&b, &format!("#/w/{WS}/agents/shipped/deployments"));
    wait_text(&b, "the deployment listed", "#deployments-table", "v1");

    // The policy refuses a deployment's engine: the error in the dialog, nothing made.
    b.click_css("#deployment-new");
    b.find("#deployment-label");
    b.type_into("#deployment-label", "v2");
    set_value(
        &b,
        "#deployment-engine",
        r#"{"kind": "command", "program": "rm"}"#,
    );
    submit_dialog(&b);
    wait_text(
        &b,
        "the refusal",
        "dialog[open] .form-error",
        "policy.programs",
    );
    let (_, list) = s.get(&base);
    assert_eq!(list.as_array().map(Vec::len), Some(1), "nothing made");
    set_value(
        &b,
        "#deployment-engine",
        r#"{"kind": "scripted", "tiers": ["economy"]}"#,
    );
    submit_dialog(&b);
    no_dialog(&b);
    let v2 = poll_until("the deployment made", LONG, || {
        let (_, list) = s.get(&base);
        list.as_array()
            .and_then(|a| a.iter().find(|d| d["docker_image"] == "v2").cloned())
    });
    let v2_id = v2["id"].as_str().expect("id").to_owned();
    let row = format!("#deployments-table tr[data-deployment-id='{v2_id}']");
    b.find(&row);
    b.screenshot("deployments");

    // A preview: a task on v2's engine, its reply shown, the agent's engine unchanged.
    b.click_css(&format!("{row} .deployment-preview"));
    b.find("#preview-message");
    b.type_into("#preview-message", "hello preview");
    b.click_css("#preview-run");
    b.find("#preview-task");
    b.screenshot("deployment-preview");
    let task = b
        .exec(
            "return document.querySelector('#preview-task').getAttribute('href').split('/s/')[1];",
            &[],
        )
        .as_str()
        .expect("task id")
        .to_owned();
    let (_, tasks) = s.get(&s.url(&format!("/agentex/tasks?agent_id={agent_id}")));
    assert!(
        tasks
            .as_array()
            .is_some_and(|a| a.iter().any(|t| t["id"] == task.as_str())),
        "the preview's task is the agent's: {tasks}"
    );
    let (_, now) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/shipped")));
    assert_eq!(
        now["engine"],
        json!({"kind": "scripted"}),
        "not promoted by a preview"
    );

    // Promote v2: its engine becomes the agent's.
    b.click_css(&format!("{row} .deployment-promote"));
    submit_dialog(&b);
    no_dialog(&b);
    poll_until("promoted per the API", LONG, || {
        let (_, v) = s.get(&s.url("/agentex/agents/name/shipped"));
        (v["production_deployment_id"] == v2_id.as_str()).then_some(())
    });
    b.find(&format!("{row} .deployment-production"));
    let (_, now) = s.get(&s.url(&format!("/v1/ws/{WS}/agents/shipped")));
    assert_eq!(now["engine"]["tiers"], json!(["economy"]));
    fits_phone(&b, "deployments");
    no_ui_errors(&b);
}

/// Agents, schedules and deployments are the workspace's members' to manage (the routes answer a
/// member as they answer an owner), so a member's pages have the same controls, and they work.
fn a_member_manages_agents_as_the_api_lets_them() {
    let b = browser();
    let s = Server::start_with_config(CONFIG);
    let a = agent(&s, "shared", json!({"kind": "scripted"}));
    let agent_id = a["id"].as_str().expect("id").to_owned();
    let (status, made) = s.post(
        &s.url(&format!("/agentex/agents/{agent_id}/schedules")),
        &json!({"name": "nightly", "cron_expression": "0 2 * * *", "timezone": "Europe/Berlin",
                "initial_input": {"content": "night shift"}}),
    );
    assert_eq!(status, 200, "{made}");
    let id = made["id"].as_str().expect("id").to_owned();
    cli(
        &s.data_dir,
        &[
            "user",
            "create",
            "--email",
            "member@test.local",
            "--password-stdin",
            "--workspace",
            WS,
            "--role",
            "member",
        ],
        Some("member-password-1\n"),
    );
    b.goto(&s.url("/login"));
    b.type_into("#login-email", "member@test.local");
    b.type_into("#login-password", "member-password-1");
    b.click_css(".auth-form button[type=submit]");
    b.find(".overview-view");
    assert_eq!(
        count(&b, "#sidebar a.nav-item[href$='/access/keys']"),
        0,
        "a member has no Access link"
    );

    // In the dark theme.
    b.exec("localStorage.setItem('sessiond.theme', 'dark');", &[]);
    goto_hash(&b, &format!("#/w/{WS}/agents/shared/schedules/{id}"));
    b.refresh();
    b.find("#schedule-pause");
    b.find("#agent-tab-about");
    b.screenshot("schedule-member-dark");
    b.click_css("#schedule-pause");
    poll_until("paused per the API", LONG, || {
        let (_, v) = s.get(&s.url(&format!("/agentex/agents/{agent_id}/schedules/{id}")));
        (v["state"] == "PAUSED").then_some(())
    });
    b.find("#schedule-resume");
    goto_hash(&b, &format!("#/w/{WS}/agents/shared/about"));
    b.find("#agent-save");
    b.find("#agent-delete");
    b.screenshot("agent-member-dark");
    no_ui_errors(&b);
}
