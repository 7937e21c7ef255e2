//! End-to-end tests of the embedded web UI in headless Chromium, driven over WebDriver.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`). This target runs under libtest-mimic rather than the built-in harness so
//! that a missing browser shows where people look: each test is reported `ignored` with the
//! reason, and the summary line counts them (`0 passed; 0 failed; 13 ignored`). With `CI` set a
//! missing browser fails every test instead. Screenshots of the main screens land in
//! `target/ui-screenshots/`.

mod common;
#[path = "common/console.rs"]
mod console;
#[path = "common/fake_openai.rs"]
mod fake_openai;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use console::{DESKTOP, WAIT, browser, count, login, open_session, run, text_of, ui_errors};
use serde_json::{Value, json};
use webdriver::*;

const PHONE: (u32, u32) = (390, 844);

/// Every test of this file, by name.
const TESTS: &[(&str, fn())] = &[
    ("setup_then_logout_and_login", setup_then_logout_and_login),
    (
        "webhooks_are_managed_from_the_console",
        webhooks_are_managed_from_the_console,
    ),
    (
        "a_new_session_streams_its_reply",
        a_new_session_streams_its_reply,
    ),
    (
        "answering_an_ask_from_the_timeline",
        answering_an_ask_from_the_timeline,
    ),
    ("interrupting_a_slow_turn", interrupting_a_slow_turn),
    (
        "reloading_mid_stream_neither_duplicates_nor_loses_text",
        reloading_mid_stream_neither_duplicates_nor_loses_text,
    ),
    (
        "html_in_a_prompt_renders_as_text",
        html_in_a_prompt_renders_as_text,
    ),
    (
        "screenshots_of_the_main_screens",
        screenshots_of_the_main_screens,
    ),
    ("acting_on_a_session", acting_on_a_session),
    ("the_phone_layout_is_usable", the_phone_layout_is_usable),
    ("older_history_loads_upward", older_history_loads_upward),
    (
        "a_lost_server_is_shown_and_retried",
        a_lost_server_is_shown_and_retried,
    ),
    (
        "the_root_agent_says_what_it_is",
        the_root_agent_says_what_it_is,
    ),
];

fn main() -> std::process::ExitCode {
    run(TESTS)
}

/// From the overview (where signing in lands) to the sessions list.
fn to_sessions(b: &Browser) {
    b.find(".overview-view");
    b.exec(
        "location.hash = arguments[0];",
        &[json!(format!("#/w/{WS}/sessions"))],
    );
    b.find(".list-view");
}

/// Waits until the page's finite animations and transitions have finished (an opening
/// `<details>`, the drawer sliding in), so a screenshot shows the settled page.
fn wait_animations(b: &Browser) {
    b.wait_js(
        "animations finished",
        "return document.getAnimations().every(a => a.playState !== 'running' || a.effect?.getComputedTiming().endTime === Infinity);",
        WAIT,
    );
}

/// `chunk 1 chunk 2 … chunk n ` as the scripted engine streams it.
fn chunks(n: u32) -> String {
    (1..=n).map(|i| format!("chunk {i} ")).collect()
}

/// The durable reply rendered exactly once, with no live (streaming) copy left over.
fn assert_single_final_text(b: &Browser, expected: &str) {
    let texts = b.exec(
        "return [...document.querySelectorAll('.timeline [data-kind=text]')].map(e => e.textContent);",
        &[],
    );
    let texts: Vec<&str> = texts
        .as_array()
        .expect("texts")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(texts.len(), 1, "one durable reply expected: {texts:?}");
    assert_eq!(texts[0].trim(), expected.trim(), "rendered reply");
    // The live preview goes once the page has applied the durable text (a render after it).
    b.wait_js(
        "no live text remaining",
        "return document.querySelectorAll('[data-kind=live-text]').length === 0;",
        WAIT,
    );
    let all = text_of(b, ".timeline");
    let all = all.as_str().unwrap_or("");
    assert_eq!(
        all.matches(expected.trim()).count(),
        1,
        "the reply appears once in the timeline: {all}"
    );
}

/// A server started on an empty data dir (no owner yet) and its setup link.
struct FreshServer {
    child: Child,
    base: String,
    setup_url: String,
    _database: Option<std::sync::Arc<common::postgres::Database>>,
    _tmp: tempfile::TempDir,
}

impl FreshServer {
    fn start() -> FreshServer {
        let tmp = tempfile::tempdir().expect("tempdir");
        let data = tmp.path().join("data");
        let database = common::database_for(&data);
        let mut child = Command::new(env!("CARGO_BIN_EXE_sessiond"))
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(&data)
            .args(common::database_args(&data))
            .env("SESSIOND_LOG", "warn")
            .env_remove("SESSIOND_CONFIG")
            .env_remove("SESSIOND_DATA_DIR")
            .env_remove("SESSIOND_DATABASE_URL")
            .env_remove("SESSIOND_BIND")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sessiond");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("first line");
        let base = first
            .trim()
            .strip_prefix("sessiond listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        // The lines after the address (the data dir, …) end with the setup link.
        let mut setup_url = None;
        let mut seen = Vec::new();
        while setup_url.is_none() {
            let mut line = String::new();
            if out.read_line(&mut line).expect("read a line") == 0 {
                panic!("no setup link among {seen:?}");
            }
            setup_url = line
                .trim()
                .strip_prefix("no account yet: open ")
                .and_then(|rest| rest.split_whitespace().next())
                .map(str::to_owned);
            seen.push(line);
        }
        let setup_url = setup_url.expect("setup link");
        assert!(setup_url.contains("/setup#"), "{setup_url}");
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = out.read_to_string(&mut sink);
        });
        FreshServer {
            child,
            base,
            setup_url,
            _database: database,
            _tmp: tmp,
        }
    }
}

impl Drop for FreshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------

fn setup_then_logout_and_login() {
    let b = browser();
    let s = FreshServer::start();

    // The setup page creates the owner and signs in.
    b.goto(&s.setup_url);
    b.type_into("#setup-email", "first@example.com");
    b.type_into("#setup-password", "short");
    b.type_into("#setup-confirm", "short");
    b.click_css(".auth-form button[type=submit]");
    b.wait_js(
        "the too-short password refused",
        "return document.querySelector('.form-error:not([hidden])')?.textContent.includes('10 characters');",
        WAIT,
    );
    b.exec(
        "document.querySelector('#setup-password').value = ''; document.querySelector('#setup-confirm').value = '';",
        &[],
    );
    b.type_into("#setup-password", "a-long-password-1");
    b.type_into("#setup-confirm", "a-long-password-1");
    b.click_css(".auth-form button[type=submit]");
    to_sessions(&b);
    b.wait_js(
        "the empty state",
        "return document.querySelector('.list-wrap .empty-state:not([hidden]) h2')?.textContent === 'No sessions yet';",
        WAIT,
    );
    let path = b.exec("return location.pathname;", &[]);
    assert_eq!(path, "/", "the setup token left the address bar");
    b.screenshot("list-empty");

    // Sign out, then a wrong password, then the right one.
    b.click_css("button[aria-label='Sign out']");
    b.find("#login-email");
    assert_eq!(b.exec("return location.pathname;", &[]), "/login");
    b.screenshot("login");
    b.type_into("#login-email", "first@example.com");
    b.type_into("#login-password", "not-the-password");
    b.click_css(".auth-form button[type=submit]");
    b.wait_js(
        "the wrong password refused",
        "return document.querySelector('.form-error:not([hidden])')?.textContent === 'Wrong email or password.';",
        WAIT,
    );
    b.exec("document.querySelector('#login-password').value = '';", &[]);
    b.type_into("#login-password", "a-long-password-1");
    b.click_css(".auth-form button[type=submit]");
    b.find(".overview-view");
    let me = b.exec(
        "return document.querySelector('.user-email').textContent;",
        &[],
    );
    assert_eq!(me, "first@example.com");

    // The setup link is spent.
    b.goto(&s.setup_url);
    b.find(".overview-view");
    b.click_css("button[aria-label='Sign out']");
    b.find("#login-email");
    b.goto(&s.setup_url);
    b.wait_js(
        "the spent setup link",
        "return document.querySelector('.auth-card h1')?.textContent === 'Setup is done';",
        WAIT,
    );
    let _ = &s.base;
}

fn a_new_session_streams_its_reply() {
    let b = browser();
    let s = Server::start();
    login(&b, &s);

    b.click_css("#nav-new");
    let prompt = b.find("textarea[aria-label=Prompt]");
    b.send_keys(
        &prompt,
        &format!("/slow 100{KEY_SHIFT}{KEY_ENTER}{KEY_NULL}/stream 20"),
    );
    b.click_css(".new-view .btn-send");
    b.find(".session-view");

    // The reply arrives piece by piece before the durable text replaces it (seen in one look at
    // the page: the live text, and no durable text yet).
    let live = b.wait_js(
        "streamed text",
        "const e = document.querySelector('[data-kind=live-text]'); return e?.textContent.includes('chunk 3 ') && { live: e.textContent, durable: document.querySelectorAll('[data-kind=text]').length };",
        WAIT,
    );
    assert!(
        chunks(20).starts_with(live["live"].as_str().unwrap_or("").trim_end()),
        "{live}"
    );
    assert_eq!(live["durable"], 0, "still streaming");
    b.find("[data-kind=complete]");
    assert_single_final_text(&b, &chunks(20));
    let sent = text_of(&b, "[data-kind=prompt] .plain");
    assert_eq!(sent, "/slow 100\n/stream 20");
    let sender = text_of(&b, "[data-kind=prompt] .sender");
    assert_eq!(sender, "You");
    b.screenshot("session-streamed");
}

fn answering_an_ask_from_the_timeline() {
    let b = browser();
    let s = Server::start();
    let id = s.create_prompt("/ask Pick | alpha | beta");
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "ask");
    login(&b, &s);
    // The list shows it under Asking.
    b.wait_js(
        "the asking count",
        "return document.querySelector('#tab-asking .count')?.textContent === '1';",
        WAIT,
    );
    open_session(&b, &s, &id);
    let q = b.find(".ask-card .ask-q");
    let _ = q;
    assert_eq!(text_of(&b, ".ask-card .ask-q"), "Pick");
    b.click_css(".ask-option[data-label=beta]:not([disabled])");
    b.wait_js(
        "the reply to the answer",
        "return [...document.querySelectorAll('[data-kind=text]')].some(e => e.textContent.trim() === 'answer: beta');",
        WAIT,
    );
    assert_eq!(text_of(&b, "[data-kind=answer] .plain"), "beta");
    assert_eq!(text_of(&b, "[data-kind=answer] .sender"), "You");
    let events = s.history_all(&id);
    let answers: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"]["type"] == "answer_submitted")
        .collect();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0]["event"]["answer"], "beta");
    assert_eq!(answers[0]["event"]["sender"]["kind"], "user");
    // The answered card is closed.
    b.wait_js(
        "the closed ask card",
        "return document.querySelector('.ask-card.inactive .ask-state')?.textContent === 'Answered';",
        WAIT,
    );
}

fn interrupting_a_slow_turn() {
    let b = browser();
    let s = Server::start();
    login(&b, &s);
    let id = s.create_prompt("/slow 200\n/stream 200");
    open_session(&b, &s, &id);
    b.wait_js(
        "streamed text",
        "return document.querySelector('[data-kind=live-text]')?.textContent.includes('chunk 2 ');",
        WAIT,
    );
    b.click_css("button[aria-label='Interrupt the agent']:not([hidden])");
    b.find("[data-kind=interrupted]");
    let terminal = s.wait_terminal(&id, 1);
    assert_eq!(terminal["event"]["type"], "interrupted");
    // The page settles after the terminal: wait for the live preview to go, do not count at once.
    b.wait_js(
        "the live text gone",
        "return document.querySelectorAll('[data-kind=live-text]').length === 0;",
        WAIT,
    );
    b.wait_js(
        "the stop button gone",
        "return document.querySelector('.btn-stop').hidden;",
        WAIT,
    );
    // The text streamed before the interrupt stays, as the timeline stored it.
    let stored: String = s
        .history_all(&id)
        .iter()
        .filter(|e| e["event"]["type"] == "step" && e["event"]["step"]["type"] == "text")
        .filter_map(|e| e["event"]["step"]["text"].as_str())
        .collect();
    assert!(stored.starts_with("chunk 1 chunk 2 "), "{stored}");
    assert!(chunks(200).starts_with(&stored), "{stored}");
    let shown = text_of(&b, ".timeline [data-kind=text]");
    assert_eq!(shown.as_str().map(str::trim), Some(stored.trim()));
    // The header says what the details say.
    b.wait_js(
        "the interrupted badge",
        "return document.querySelector('.session-meta .badge')?.textContent === 'Interrupted';",
        WAIT,
    );
    // The side panel re-renders a moment after the header (it is debounced): wait for it.
    b.wait_js(
        "the details saying Interrupted",
        "const dt = [...document.querySelectorAll('.session-aside dt')].find(e => e.textContent === 'Status'); return dt && dt.nextElementSibling.textContent === 'Interrupted';",
        WAIT,
    );
    b.screenshot("session-interrupted");
    // After a reload both are still there.
    b.refresh();
    b.find("[data-kind=interrupted]");
    b.wait_js(
        "the kept text and the badge after a reload",
        "return document.querySelector('.session-meta .badge')?.textContent === 'Interrupted' && document.querySelector('.timeline [data-kind=text]')?.textContent.includes('chunk 2 ');",
        WAIT,
    );
}

/// The reserved root agent is named and described for what it is, wherever it appears.
fn the_root_agent_says_what_it_is() {
    let b = browser();
    let s = Server::start();
    let id = s.create_prompt("/reply hello from the root agent");
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");
    assert_eq!(s.detail(&id)["agent"]["name"], "Workspace agent");
    login(&b, &s);
    open_session(&b, &s, &id);
    b.find("[data-kind=complete]");
    assert_eq!(text_of(&b, ".timeline .agent-name"), "Workspace agent");
    b.wait_js(
        "the agent chip",
        "return [...document.querySelectorAll('.session-meta .chip-link')].some(e => e.textContent === 'Workspace agent');",
        WAIT,
    );
    b.goto(&s.url(&format!("/#/w/{WS}/agents")));
    b.wait_js(
        "the root agent's card",
        "const c = [...document.querySelectorAll('.agent-card')].find(e => e.querySelector('.agent-card-name')?.textContent === 'Workspace agent'); return c && c.querySelector('.agent-card-desc')?.textContent.includes('anywhere in the drive') && c.textContent.includes('whole drive');",
        WAIT,
    );
    assert_eq!(
        b.exec(
            "return document.body.textContent.includes('Drive root') || [...document.querySelectorAll('.agent-card-name')].some(e => e.textContent === 'Drive');",
            &[],
        ),
        false
    );
    b.screenshot("agents-root");
}

fn reloading_mid_stream_neither_duplicates_nor_loses_text() {
    let b = browser();
    let s = Server::start();
    login(&b, &s);
    let id = s.create_prompt("/slow 100\n/stream 40");
    open_session(&b, &s, &id);
    b.wait_js(
        "streamed text",
        "return document.querySelector('[data-kind=live-text]')?.textContent.includes('chunk 5 ');",
        WAIT,
    );
    b.refresh();
    b.find(".session-view .timeline");
    // After the reload the partial reply comes back whole (the volatile tail), then grows.
    let live = b.wait_js(
        "streamed text after the reload",
        "const e = document.querySelector('[data-kind=live-text]'); return e && e.textContent.includes('chunk 12 ') && e.textContent;",
        WAIT,
    );
    let live = live.as_str().unwrap().trim_end().to_owned();
    assert!(
        chunks(40).starts_with(&live),
        "live text after reload is a clean prefix: {live}"
    );
    for _ in 0..5 {
        let now = text_of(&b, "[data-kind=live-text]");
        if let Some(t) = now.as_str() {
            assert!(
                chunks(40).starts_with(t.trim_end()),
                "no duplicated or missing chunk: {t}"
            );
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    b.find("[data-kind=complete]");
    assert_single_final_text(&b, &chunks(40));
    let durable = s
        .history_all(&id)
        .into_iter()
        .find(|e| e["event"]["type"] == "step" && e["event"]["step"]["type"] == "text")
        .expect("durable text");
    assert_eq!(durable["event"]["step"]["text"], chunks(40));
}

fn html_in_a_prompt_renders_as_text() {
    let b = browser();
    let s = Server::start();
    login(&b, &s);
    let evil = "<img src=x onerror=alert(1)>";
    b.click_css("#nav-new");
    b.type_into("textarea[aria-label=Prompt]", evil);
    b.click_css(".new-view .btn-send");
    b.find(".session-view");
    b.find("[data-kind=complete]");
    assert_eq!(
        count(&b, ".timeline img"),
        0,
        "no img element in the timeline"
    );
    assert_eq!(text_of(&b, "[data-kind=prompt] .plain"), evil);
    let reply = text_of(&b, "[data-kind=text]");
    assert_eq!(
        reply.as_str().map(str::trim),
        Some(format!("echo: {evil}").as_str())
    );
    let visible = b.exec(
        "const e = document.querySelector('[data-kind=prompt] .plain'); const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility === 'visible';",
        &[],
    );
    assert_eq!(visible, true, "the text is visible");
    assert_eq!(b.alert_text(), None, "no script ran");
    // The list shows the title as text too.
    b.click_css("a.back");
    b.find(".session-row");
    assert_eq!(count(&b, ".session-list img"), 0);
}

/// Seeds a workspace with sessions of every kind, then screenshots the main screens.
fn screenshots_of_the_main_screens() {
    let b = browser();
    let s = Server::start();
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "research", "name": "Research"}),
    );
    assert_eq!(status, 201, "{v}");

    let rich = s.create_prompt(
        "/title Refactor the tokenizer\n/todos Read the tokenizer; Write failing tests; Split the state machine\n/tool read_file\n/reply I read `src/tokenizer.rs`: the **state machine** mixes lexing and *error recovery*. See https://example.com/guide for the approach.\n/task cargo-test 400\n/reply Tests pass. Next I will split the recovery into its own module.",
    );
    let done = s.create_prompt(
        "/title Summarise the quarterly report\n/reply Revenue grew **12%**; costs were flat.",
    );
    let asking =
        s.create_prompt("/ask Which environment should I deploy to? | staging | production");
    let sleeping = s.create_prompt("/sleep 3600000");
    let job = s.create(json!({
        "prompt": "Ship version 2.4",
        "mode": {"name": "release", "prompt": "Ship the release", "states": [
            {"name": "collect", "prompt": "/reply Collected 14 changes"},
            {"name": "draft", "prompt": "/reply Drafted the release notes"},
            {"name": "review", "prompt": "/ask Publish the notes? | yes | no", "kind": "review"},
            {"name": "publish", "prompt": "/reply Published"}
        ]}
    }));
    let job = job["session"]["sessionId"].as_str().unwrap().to_owned();
    let child = s.post(
        &s.sessions_url(&format!("/{rich}/sessions")),
        &json!({"prompt": "/title Write tokenizer tests\n/reply Added 6 tests."}),
    );
    assert_eq!(child.0, 200, "{}", child.1);
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents/research/sessions/default/messages")),
        &json!({"prompt": "/title Research chat\n/reply Hi! I am the research agent. I can search the drive, summarise documents and keep notes."}),
    );
    assert_eq!(status, 200, "{v}");
    let research = s.create(json!({
        "prompt": "/title Survey the papers on CRDTs\n/reply Found 9 relevant papers; the two most cited are summarised below.",
        "cwd": "agents/research",
    }));
    let research = research["session"]["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let running = s.create_prompt("/slow 500\n/stream 400");
    // Titles come after a first turn; name the ones still in theirs.
    for (id, title) in [
        (&asking, "Choose a deployment target"),
        (&sleeping, "Nightly backup check"),
        (&running, "Crawl the documentation site"),
    ] {
        let (status, v) = s.patch(&s.sessions_url(&format!("/{id}")), &json!({"title": title}));
        assert_eq!(status, 200, "{v}");
    }
    for id in [&rich, &done, &research] {
        assert_eq!(s.wait_terminal(id, 1)["event"]["type"], "complete");
    }
    assert_eq!(s.wait_terminal(&asking, 1)["event"]["type"], "ask");
    poll_until("the Job to ask", WAIT, || {
        (s.detail(&job)["bucket"] == "asking").then_some(())
    });

    login(&b, &s);
    b.wait_js(
        "the list with counts",
        "return document.querySelectorAll('.session-row').length >= 9 && document.querySelector('#tab-asking .count')?.textContent === '2';",
        WAIT,
    );
    assert_eq!(text_of(&b, "#tab-running .count"), "1");
    assert_eq!(text_of(&b, "#tab-scheduled .count"), "1");
    b.screenshot("list");

    // Tabs filter; search finds by title.
    b.click_css("#tab-asking");
    b.wait_js(
        "the asking tab",
        "return document.querySelectorAll('.session-row').length === 2;",
        WAIT,
    );
    b.click_css("#tab-all");
    b.type_into("input[aria-label='Search sessions']", "quarterly");
    b.wait_js(
        "the search result",
        "const rows = document.querySelectorAll('.session-row'); return rows.length === 1 && rows[0].textContent.includes('Summarise the quarterly report');",
        WAIT,
    );

    open_session(&b, &s, &rich);
    b.find("[data-kind=tool]");
    b.wait_js(
        "the rich session",
        "return document.querySelectorAll('[data-kind=text]').length === 2 && document.querySelector('.session-aside .todos') && document.querySelector('.related-list a') && document.querySelector('.session-meta .badge-done');",
        WAIT,
    );
    b.exec(
        "document.querySelector('[data-kind=tool]').open = true;",
        &[],
    );
    wait_animations(&b);
    b.screenshot("session");

    open_session(&b, &s, &job);
    b.wait_js(
        "the Job path",
        "return document.querySelectorAll('.job-path .job-step').length === 4 && document.querySelector('.ask-option:not([disabled])');",
        WAIT,
    );
    b.screenshot("session-job");

    b.goto(&s.url(&format!("/#/w/{WS}/agents/research")));
    b.wait_js(
        "the agent chat",
        "return document.querySelector('.agent-view [data-kind=text]')?.textContent.includes('research agent') && document.querySelector('.agent-aside .related-list a');",
        WAIT,
    );
    b.screenshot("agent-home");

    b.goto(&s.url(&format!("/#/w/{WS}/agents")));
    b.wait_js(
        "the agents",
        "return document.querySelectorAll('.agent-card').length === 2;",
        WAIT,
    );
    b.screenshot("agents");

    b.goto(&s.url(&format!("/#/w/{WS}/new?agent=research")));
    b.find("textarea[aria-label=Prompt]");
    assert_eq!(
        b.exec("return document.querySelector('#new-agent').value;", &[]),
        "research"
    );
    b.screenshot("new-session");

    b.set_viewport(PHONE.0, PHONE.1);
    b.goto(&s.url(&format!("/#/w/{WS}/sessions")));
    b.wait_js(
        "the phone list",
        "return document.querySelectorAll('.session-row').length >= 7;",
        WAIT,
    );
    let overflow = b.exec(
        "return document.documentElement.scrollWidth > window.innerWidth;",
        &[],
    );
    assert_eq!(overflow, false, "no horizontal scrolling at phone width");
    b.screenshot("list-phone");
    open_session(&b, &s, &rich);
    b.wait_js(
        "the phone session",
        "return document.querySelectorAll('[data-kind=text]').length === 2;",
        WAIT,
    );
    b.screenshot("session-phone");

    b.set_viewport(DESKTOP.0, DESKTOP.1);
    b.exec("localStorage.setItem('sessiond.theme', 'dark');", &[]);
    b.refresh();
    b.wait_js(
        "the dark session",
        "return document.documentElement.dataset.theme === 'dark' && document.querySelectorAll('[data-kind=text]').length === 2;",
        WAIT,
    );
    b.screenshot("session-dark");
    b.goto(&s.url(&format!("/#/w/{WS}/sessions")));
    b.wait_js(
        "the dark list",
        "return document.querySelectorAll('.session-row').length >= 9;",
        WAIT,
    );
    // Sessions that were read are no longer marked unread (the page marks them read as it shows
    // them; the list may have been fetched before that mark arrived, so wait for it to say so).
    poll_until("the viewed session read", WAIT, || {
        (s.detail(&rich)["unread"] == false).then_some(())
    });
    b.wait_js(
        "the viewed session shown as read",
        &format!(
            "const e = document.querySelector(`.session-item[data-id='{rich}']`); return e && !e.classList.contains('unread');"
        ),
        WAIT,
    );
    b.screenshot("list-dark");
    let errors = ui_errors(&b);
    assert!(errors.is_empty(), "browser console: {errors:#?}");
}

/// A 1×1 PNG.
const PNG_1X1: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn acting_on_a_session() {
    let b = browser();
    let s = Server::start();
    let id = s.create_prompt("hello");
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");
    login(&b, &s);
    open_session(&b, &s, &id);
    b.find("[data-kind=complete]");

    // A note.
    b.click_css(".composer .seg[data-kind=note]");
    b.type_into(
        ".pane .composer-input",
        &format!("remember the milk{KEY_ENTER}"),
    );
    b.wait_js(
        "the note",
        "return document.querySelector('[data-kind=note] .plain')?.textContent === 'remember the milk';",
        WAIT,
    );
    b.click_css(".composer .seg[data-kind=message]");

    // An image and a file, dropped on the composer; the file goes through the upload grant.
    b.exec(
        "const bin = atob(arguments[0]); const bytes = new Uint8Array(bin.length);
         for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
         const dt = new DataTransfer();
         dt.items.add(new File([bytes], 'dot.png', { type: 'image/png' }));
         dt.items.add(new File(['milk, eggs'], 'notes.txt', { type: 'text/plain' }));
         document.querySelector('.pane .composer-box').dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));",
        &[json!(PNG_1X1)],
    );
    b.wait_js(
        "the uploaded file and the image",
        "return document.querySelector('.chip-file.done') && document.querySelector('.chip-image');",
        WAIT,
    );
    b.exec(
        "const c = document.querySelectorAll('.pane .composer select');
         c[0].value = 'follow_up'; c[1].value = 'economy';",
        &[],
    );
    b.type_into(".pane .composer-input", "/reply got it");
    b.click_css(".pane .btn-send");
    b.wait_js(
        "the reply",
        "return [...document.querySelectorAll('[data-kind=text]')].some(e => e.textContent.trim() === 'got it');",
        WAIT,
    );
    b.wait_js(
        "the image loaded through the session cookie",
        "const img = document.querySelector('[data-kind=prompt] .msg-image img'); return img && img.complete && img.naturalWidth === 1;",
        WAIT,
    );
    assert_eq!(
        text_of(&b, "[data-kind=prompt] .file-chip .file-name"),
        "notes.txt"
    );
    let events = s.history_all(&id);
    let prompt = events
        .iter()
        .rev()
        .find(|e| e["event"]["type"] == "prompt_submitted")
        .expect("prompt");
    assert_eq!(prompt["event"]["behavior"], "follow_up");
    assert_eq!(prompt["event"]["images"].as_array().map(Vec::len), Some(1));
    assert_eq!(prompt["event"]["attachments"][0]["name"], "notes.txt");
    assert_eq!(
        prompt["event"]["attachments"][0]["path"],
        "uploads/notes.txt"
    );
    assert!(
        prompt["event"]["clientRequestId"].is_string(),
        "a clientRequestId per submission"
    );
    assert_eq!(s.detail(&id)["tier"], "economy");

    // Rename.
    b.click_css(".actions-inline button[aria-label=Rename]");
    b.exec("document.querySelector('.dialog input').value = '';", &[]);
    b.type_into(".dialog input", "Groceries");
    b.click_css(".dialog button[type=submit]");
    b.wait_js(
        "the new title",
        "return document.querySelector('.session-title')?.textContent === 'Groceries';",
        WAIT,
    );
    assert_eq!(s.detail(&id)["title"], "Groceries");

    // Moving to a missing folder says why, in words; a real folder works.
    b.click_css(".actions-inline button[aria-label='Move to another folder']");
    b.type_into(".dialog input", "no/such/folder");
    b.click_css(".dialog button[type=submit]");
    b.wait_js(
        "the reason in words",
        "return document.querySelector('.dialog .form-error:not([hidden])')?.textContent === 'That folder does not exist in the workspace drive.';",
        WAIT,
    );
    b.exec("document.querySelector('.dialog input').value = '';", &[]);
    b.type_into(".dialog input", "uploads");
    b.click_css(".dialog button[type=submit]");
    b.wait_js(
        "the moved folder",
        "return !document.querySelector('.dialog') && [...document.querySelectorAll('.session-meta .mono')].some(e => e.textContent === 'uploads');",
        WAIT,
    );
    assert_eq!(s.detail(&id)["cwd"], "uploads");

    // Archive: it leaves the list and shows in the archived view; restore brings it back.
    b.click_css(".actions-inline button[aria-label=Archive]");
    b.find(".session-meta .badge-archived");
    b.goto(&s.url(&format!("/#/w/{WS}/sessions?archived=1")));
    b.wait_js(
        "the archived view",
        "const rows = document.querySelectorAll('.session-row'); return rows.length === 1 && rows[0].textContent.includes('Groceries');",
        WAIT,
    );
    open_session(&b, &s, &id);
    b.click_css(".actions-inline button[aria-label='Restore from archive']");
    b.wait_js(
        "restored",
        "return !document.querySelector('.session-meta .badge-archived');",
        WAIT,
    );
    assert!(s.detail(&id).get("archivedAt").is_none());

    // Delete, after confirming.
    b.click_css(".actions-inline button[aria-label=Delete]");
    b.wait_js(
        "the confirmation",
        "return document.querySelector('.dialog .dialog-title')?.textContent === 'Delete this session?';",
        WAIT,
    );
    b.click_css(".dialog .btn-danger");
    b.find(".list-view");
    let (status, _) = s.get(&s.sessions_url(&format!("/{id}")));
    assert_eq!(status, 404);
    let errors = ui_errors(&b);
    assert!(errors.is_empty(), "browser console: {errors:#?}");
}

fn the_phone_layout_is_usable() {
    let b = browser();
    let s = Server::start();
    let id = s.create_prompt("/reply Hello from a small screen.");
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");
    b.set_viewport(PHONE.0, PHONE.1);
    login(&b, &s);
    // The sidebar is a drawer behind the menu button.
    let hidden = b.exec(
        "return getComputedStyle(document.querySelector('#sidebar')).visibility;",
        &[],
    );
    assert_eq!(hidden, "hidden");
    b.click_css("button[aria-label='Open menu']");
    b.wait_js(
        "the open drawer",
        "return getComputedStyle(document.querySelector('#sidebar')).visibility === 'visible' && document.querySelector('#sidebar').getBoundingClientRect().left === 0;",
        WAIT,
    );
    wait_animations(&b);
    b.screenshot("drawer-phone");
    b.click_css("#sidebar a.nav-item[href$='/agents']");
    b.find(".agents-view .agent-card");
    b.goto(&s.url(&format!("/#/w/{WS}/s/{id}")));
    b.find("[data-kind=complete]");
    // Actions live in a menu; the details panel opens over the timeline.
    b.click_css("button[aria-label='More actions']");
    b.find(".menu .menu-item");
    b.screenshot("session-menu-phone");
    b.exec("document.activeElement.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape', bubbles: true }));", &[]);
    b.wait_js(
        "the closed menu",
        "return document.querySelector('.menu').hidden;",
        WAIT,
    );
    b.click_css("button[aria-label='Show details']");
    b.wait_js(
        "the details panel",
        "const a = document.querySelector('.session-aside'); return a && a.getBoundingClientRect().width > 300;",
        WAIT,
    );
    b.screenshot("details-phone");
    b.click_css("button[aria-label='Close details']");
    b.wait_js(
        "the closed details panel",
        "return getComputedStyle(document.querySelector('.session-aside')).display === 'none';",
        WAIT,
    );
    let overflow = b.exec(
        "return document.documentElement.scrollWidth > window.innerWidth;",
        &[],
    );
    assert_eq!(overflow, false, "no horizontal scrolling at phone width");
}

fn older_history_loads_upward() {
    let b = browser();
    let s = Server::start();
    let script: Vec<String> = (1..=70).map(|i| format!("/tool step{i}")).collect();
    let id = s.create_prompt(&script.join("\n"));
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");
    login(&b, &s);
    open_session(&b, &s, &id);
    b.find("[data-kind=complete]");
    // The newest page only: the start of the session is not there yet.
    assert_eq!(count(&b, ".tl-divider"), 0);
    let first = count(&b, "[data-kind=tool]");
    assert!(first < 70, "only the newest page at first ({first} tools)");
    assert!(b.try_find(".load-older:not([hidden])").is_some());
    // Scrolling to the top loads the rest.
    b.exec("document.querySelector('.scroller').scrollTop = 0;", &[]);
    b.wait_js(
        "the whole history",
        "return document.querySelectorAll('[data-kind=tool]').length === 70 && document.querySelector('.tl-divider') && document.querySelector('.load-older').hidden;",
        WAIT,
    );
    // Every card was completed, including those whose start was on the other page.
    assert_eq!(count(&b, "[data-kind=tool].running"), 0);
    assert_eq!(count(&b, "[data-kind=prompt]"), 1);
}

fn a_lost_server_is_shown_and_retried() {
    let b = browser();
    let mut s = Server::start();
    let id = s.create_prompt("/reply still here");
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");
    login(&b, &s);
    open_session(&b, &s, &id);
    b.find("[data-kind=complete]");
    s.kill9();
    b.wait_js(
        "the reconnecting banner",
        "const e = document.querySelector('.conn-banner'); return e && !e.hidden && e.textContent.includes('Reconnecting');",
        WAIT,
    );
    b.screenshot("session-reconnecting");
    b.click_css("a.back");
    b.wait_js(
        "the list's error",
        "const e = document.querySelector('.list-view .banner-error'); return e && !e.hidden && e.textContent.includes('Cannot reach sessiond');",
        WAIT,
    );
    b.screenshot("list-server-down");
}

#[test]
fn a_failed_attempts_live_text_is_dropped_and_estimated_usage_says_so() {
    use fake_openai::*;
    let Some(b) = browser() else { return };
    let fake = FakeOpenAi::start();
    let engine = fake.engine(json!({"retryBaseMs": 300})).to_string();
    let s = Server::start_with_env(
        Some(&format!(
            "[policy]\nmodel_endpoints = [{:?}]\n",
            fake.base_url
        )),
        &[("SESSIOND_ENGINE", Some(&engine))],
    );
    fake.push(text_reply("Hello.", (5, 1, 0)));
    let id = s.create_prompt("hi");
    s.wait_terminal(&id, 1);
    login(&b, &s);
    open_session(&b, &s, &id);
    b.find("[data-kind=complete]");
    // Every state the live text goes through, from before the next turn starts.
    b.exec(
        "window.__live = []; const box = document.querySelector('.tl-live'); \
         new MutationObserver(() => window.__live.push(box.textContent)).observe(box, {childList: true, subtree: true, characterData: true});",
        &[],
    );

    // The first attempt streams and is cut short by `[DONE]`; the retry streams the answer,
    // with no usage reported.
    let Reply::Stream { chunks, .. } = truncated_reply("Half of the first try ") else {
        unreachable!()
    };
    fake.push(Reply::Stream {
        chunks,
        delay: Duration::from_millis(80),
        end: End::Done,
    });
    let Reply::Stream { chunks, .. } = text_reply_without_usage("The whole answer.") else {
        unreachable!()
    };
    fake.push(Reply::Stream {
        chunks,
        delay: Duration::from_millis(80),
        end: End::Done,
    });
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "again"}),
    );
    assert_eq!(status, 200, "{v}");
    b.wait_js(
        "the second reply",
        "return document.querySelectorAll('[data-kind=complete]').length === 2;",
        WAIT,
    );
    let states = b.exec("return window.__live;", &[]);
    let states: Vec<&str> = states
        .as_array()
        .expect("states")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        states.iter().any(|t| t.contains("Half of the")),
        "the first attempt streamed live: {states:?}"
    );
    assert!(
        states.iter().any(|t| t.contains("The whole")),
        "the retry streamed live: {states:?}"
    );
    assert!(
        states
            .iter()
            .all(|t| !(t.contains("Half") && t.contains("whole"))),
        "the void text was dropped before the retry streamed: {states:?}"
    );
    let texts = b.exec(
        "return [...document.querySelectorAll('.timeline [data-kind=text]')].map(e => e.textContent.trim());",
        &[],
    );
    assert_eq!(texts, json!(["Hello.", "The whole answer."]));
    assert_eq!(count(&b, "[data-kind=live-text]"), 0);

    // Measured usage shows plainly; the estimate says it is one and shows no made-up cost.
    let ends = b.exec(
        "return [...document.querySelectorAll('.timeline [data-kind=complete]')].map(e => e.textContent);",
        &[],
    );
    let ends: Vec<&str> = ends
        .as_array()
        .expect("ends")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        ends[0].contains("6 tokens") && !ends[0].contains("estimated"),
        "{ends:?}"
    );
    assert!(
        ends[1].contains("≈") && ends[1].contains("(estimated)"),
        "{ends:?}"
    );
    assert!(!ends[1].contains("$0.00"), "{ends:?}");
    b.find("[data-kind=usage-estimated]");
    b.screenshot("session-estimated-usage");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

/// Browser errors that point at the UI itself: script errors and CSP violations. (Failed requests
/// that a test provokes on purpose, such as a refused login, are expected.)
fn webhooks_are_managed_from_the_console() {
    let b = browser();
    let s = Server::start_with_config("[policy]\nwebhook_hosts = [\"127.0.0.1\"]\n");
    let hook = "http://127.0.0.1:9/hook";
    login(&b, &s);
    b.goto(&s.url(&format!("/#/w/{WS}/webhooks")));
    b.find(".webhooks-view");
    // A refused URL says why, in the dialog, and adds nothing.
    b.click_css("#webhook-add");
    b.type_into("#webhook-url", "http://10.0.0.1/hook");
    b.click_css("dialog .dialog-actions button[type=submit]");
    b.wait_js(
        "the refusal shown",
        "const e = document.querySelector('dialog .form-error'); return e && !e.hidden && e.textContent.includes('policy.webhook_hosts');",
        WAIT,
    );
    b.click_css("dialog .dialog-actions button[type=button]");
    // Added, its secret is shown this once.
    b.click_css("#webhook-add");
    b.type_into("#webhook-url", hook);
    b.click_css("dialog input[value='run.failed']");
    b.click_css("dialog .dialog-actions button[type=submit]");
    let secret = b.wait_js(
        "the secret shown once",
        "const e = document.querySelector('.webhook-secret'); return e && e.value.startsWith('whsec_') ? e.value : null;",
        WAIT,
    );
    b.click_css("dialog .dialog-actions button[type=submit]");
    b.wait_js(
        "the webhook listed",
        &format!("return [...document.querySelectorAll('.webhook-card')].some(c => c.querySelector('.webhook-url')?.textContent === '{hook}' && c.textContent.includes('run.failed') && c.textContent.includes('Enabled'));"),
        WAIT,
    );
    let (status, list) = s.get(&s.url(&format!("/v1/ws/{WS}/webhooks")));
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["webhooks"][0]["url"], hook);
    assert_eq!(list["webhooks"][0]["eventTypes"], json!(["run.failed"]));
    assert!(!list.to_string().contains(secret.as_str().unwrap()));
    // Disabled from its card, and its (empty) delivery log opened.
    b.click_css(".webhook-card button[data-action='Disable']");
    b.wait_js(
        "the webhook disabled",
        "return document.querySelector('.webhook-card')?.textContent.includes('Disabled');",
        WAIT,
    );
    let (_, one) = s.get(&s.url(&format!(
        "/v1/ws/{WS}/webhooks/{}",
        list["webhooks"][0]["id"].as_str().unwrap()
    )));
    assert_eq!(one["enabled"], false, "{one}");
    b.click_css(".webhook-card button[data-action='Delivery log']");
    b.wait_js(
        "the delivery log",
        "const t = document.querySelector('.delivery-log'); return t && !t.hidden && t.textContent.includes('No deliveries yet');",
        WAIT,
    );
    b.screenshot("webhooks");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}
