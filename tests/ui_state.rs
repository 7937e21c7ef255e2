//! The console tells a session's state truthfully: the server derives one state per session
//! (`include=state` on the Sessions API, filtered by `state=`), and the list rows, the Failed and
//! Needs attention tabs, the session header and its details all show that state; a session that
//! takes no input says why above a disabled composer (the budget can be raised from there). It
//! recovers honestly: text the server declares void stays struck with the reason until the
//! answer replaces it, and while the event stream is lost the page says the state is unknown and
//! its controls wait.
//!
//! Data is made through `/v1`, `/v2` and `/agentex`, then seen in headless Chromium (as
//! `tests/ui.rs`, under libtest-mimic: a missing browser is reported `ignored`). Screenshots land
//! in `target/ui-screenshots/`.

mod common;
#[path = "common/console.rs"]
mod console;
#[path = "common/fake_openai.rs"]
mod fake_openai;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::*;
use console::*;
use fake_openai::*;
use serde_json::{Value, json};

const TESTS: &[(&str, fn())] = &[
    (
        "every_state_reads_the_same_in_the_api_and_the_console",
        every_state_reads_the_same_in_the_api_and_the_console,
    ),
    (
        "a_spent_budget_is_raised_from_above_the_composer",
        a_spent_budget_is_raised_from_above_the_composer,
    ),
    (
        "a_lost_stream_says_the_state_is_unknown_and_keeps_the_text",
        a_lost_stream_says_the_state_is_unknown_and_keeps_the_text,
    ),
    (
        "void_text_stays_struck_until_the_answer_replaces_it",
        void_text_stays_struck_until_the_answer_replaces_it,
    ),
    (
        "the_details_show_cost_budget_lineage_task_and_raw_events",
        the_details_show_cost_budget_lineage_task_and_raw_events,
    ),
    (
        "forking_from_an_event_opens_the_fork",
        forking_from_an_event_opens_the_fork,
    ),
];

fn main() -> std::process::ExitCode {
    run(TESTS)
}

const PRICED: &str = "priced";
const LONG: Duration = Duration::from_secs(30);

/// A server whose workspace also has the agent `priced` on a fake model endpoint at $10,000 per
/// million tokens (a reply of 20 tokens costs 20 cents).
fn priced_server(fake: &FakeOpenAi) -> Server {
    let s = Server::start_with_config(&format!(
        "[policy]\nmodel_endpoints = [{:?}]\n",
        fake.base_url
    ));
    let engine =
        fake.engine(json!({"prices": {"fake-model": {"input": 10000.0, "output": 10000.0}}}));
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": PRICED, "engine": engine}),
    );
    assert_eq!(status, 201, "{v}");
    s
}

/// A session of the priced agent that spent 20 cents, with a `/v2` budget of 10: over budget.
fn over_budget_session(s: &Server, fake: &FakeOpenAi) -> String {
    fake.push(text_reply("that was costly", (10, 10, 0)));
    let (status, v) = s.post(
        &s.url(&format!(
            "/v1/ws/{WS}/agents/{PRICED}/sessions/default/messages"
        )),
        &json!({"prompt": "spend"}),
    );
    assert_eq!(status, 200, "{v}");
    let id = id_of(&v);
    assert_eq!(s.wait_terminal(&id, 1)["event"]["type"], "complete");
    let (status, r) = s.patch(
        &s.url(&format!("/v2/sessions/{id}")),
        &json!({"budget": {"cents": 10}}),
    );
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["prompting"]["code"], "budget_hit", "{r}");
    id
}

/// `GET …/agent/sessions` with `query`; the status and body.
fn list(s: &Server, query: &str) -> (u16, Value) {
    s.get(&s.sessions_url(&format!("?limit=100&{query}")))
}

/// Session id → state of a list page.
fn states_of(page: &Value) -> BTreeMap<String, String> {
    page["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap_or("").to_owned(),
                s["state"].as_str().unwrap_or("(none)").to_owned(),
            )
        })
        .collect()
}

/// Session id → the badge text of its row in the list on screen.
fn row_badges(b: &webdriver::Browser) -> BTreeMap<String, String> {
    let v = b.exec(
        "const m = {}; for (const li of document.querySelectorAll('.session-list .session-item[data-id]')) m[li.dataset.id] = li.querySelector('.row-side .badge')?.textContent ?? null; return m;",
        &[],
    );
    serde_json::from_value(v).unwrap_or_default()
}

/// Waits until the open session's header badge and its details both say `word`.
fn wait_header(b: &webdriver::Browser, word: &str) {
    let script = format!(
        "const dt = [...document.querySelectorAll('.session-aside dt')].find(e => e.textContent === 'Status'); \
         return document.querySelector('.session-meta .badge')?.textContent === {w} && dt?.nextElementSibling.textContent === {w};",
        w = json!(word)
    );
    b.wait_js(
        &format!("the header and details saying {word}"),
        &script,
        WAIT,
    );
}

// ---------------------------------------------------------------------------------------------

fn every_state_reads_the_same_in_the_api_and_the_console() {
    let fake = FakeOpenAi::start();
    let s = priced_server(&fake);

    // One session in each state, through /v1, /v2 and /agentex.
    let done = s.create_prompt("/reply all good");
    let failed = s.create_prompt("/fail the tool broke");
    let asking = s.create_prompt("/ask Pick | alpha | beta");
    let sleeping = s.create_prompt("/sleep 600000");
    for (id, terminal) in [
        (&done, "complete"),
        (&failed, "complete"),
        (&asking, "ask"),
        (&sleeping, "sleep"),
    ] {
        assert_eq!(s.wait_terminal(id, 1)["event"]["type"], terminal, "{id}");
    }
    let interrupted = s.create_prompt("/slow 200\n/stream 200");
    s.wait_for_event(&interrupted, &["turn_started"], 1, LONG);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{interrupted}/interrupt")),
        &json!({}),
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        s.wait_terminal(&interrupted, 1)["event"]["type"],
        "interrupted"
    );
    // Handed off on /v2: the first session is closed, its successor runs on.
    let handed = s.create_prompt("/reply handing off");
    s.wait_terminal(&handed, 1);
    let (status, v) = s.post(
        &s.url("/v2/sessions"),
        &json!({"prompt": "/reply taken over", "parent": {"kind": "handoff", "session_id": handed}}),
    );
    assert_eq!(status, 201, "{v}");
    let successor = v["id"].as_str().expect("id").to_owned();
    s.wait_terminal(&successor, 1);
    let over = over_budget_session(&s, &fake);
    // A task cancelled on /agentex.
    let cancelled = s.cancelled_task(PRICED, "to-cancel");
    let running = s.create_prompt("/slow 500\n/stream 2000");
    s.wait_for_event(&running, &["turn_started"], 1, LONG);

    let expected: BTreeMap<String, String> = [
        (&done, "done"),
        (&failed, "failed"),
        (&asking, "asking"),
        (&sleeping, "sleeping"),
        (&interrupted, "interrupted"),
        (&handed, "closed"),
        (&successor, "done"),
        (&over, "over_budget"),
        (&cancelled, "cancelled"),
        (&running, "running"),
    ]
    .into_iter()
    .map(|(id, st)| (id.clone(), st.to_owned()))
    .collect();

    // The API: the seed's list unchanged without `include`, the state with it.
    let (status, plain) = list(&s, "");
    assert_eq!(status, 200, "{plain}");
    assert_schema(
        "GET_v1_ws__workspaceSlug__agent_sessions.response.json",
        &plain,
    );
    assert!(
        plain["sessions"]
            .as_array()
            .expect("sessions")
            .iter()
            .all(|s| s.get("state").is_none()),
        "{plain}"
    );
    let (status, page) = list(&s, "include=state");
    assert_eq!(status, 200, "{page}");
    assert_eq!(states_of(&page), expected);
    let reason = page["sessions"]
        .as_array()
        .and_then(|a| a.iter().find(|s| s["id"] == failed.as_str()))
        .map(|s| s["stateReason"].clone());
    assert_eq!(reason, Some(json!("the tool broke")));
    let (status, page) = list(&s, "state=failed");
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        states_of(&page).into_keys().collect::<Vec<_>>(),
        vec![failed.clone()]
    );
    let (status, page) = list(&s, "state=attention");
    assert_eq!(status, 200, "{page}");
    let mut attention: Vec<String> = states_of(&page).into_keys().collect();
    let mut want = vec![asking.clone(), failed.clone(), over.clone()];
    attention.sort();
    want.sort();
    assert_eq!(attention, want);
    let (status, page) = list(&s, "state=closed,cancelled&limit=1");
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["sessions"].as_array().map(Vec::len), Some(1), "{page}");
    let cursor = page["nextCursor"].as_str().expect("a next page").to_owned();
    let (status, rest) = list(
        &s,
        &format!("state=closed,cancelled&limit=1&cursor={cursor}"),
    );
    assert_eq!(status, 200, "{rest}");
    let mut both: Vec<String> = states_of(&page)
        .into_keys()
        .chain(states_of(&rest).into_keys())
        .collect();
    both.sort();
    let mut want = vec![handed.clone(), cancelled.clone()];
    want.sort();
    assert_eq!(both, want, "the two pages hold both, once");
    assert!(rest.get("nextCursor").is_none(), "{rest}");
    // Bad filters are refused and name the parameter.
    for bad in ["state=nope", "state=failed,", "include=everything"] {
        let (status, v) = list(&s, bad);
        assert_eq!(status, 400, "{bad}: {v}");
        assert_eq!(v["error"], "invalid_request", "{bad}: {v}");
        let field = bad.split('=').next().unwrap_or("");
        assert!(
            v["message"].as_str().is_some_and(|m| m.starts_with(field)),
            "{bad}: {v}"
        );
    }
    let (status, d) = s.get(&s.sessions_url(&format!("/{handed}?include=state")));
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["state"], "closed");
    assert_eq!(d["inputClosed"]["code"], "session_closed", "{d}");
    let (_, d) = s.get(&s.sessions_url(&format!("/{cancelled}?include=state")));
    assert_eq!(d["inputClosed"]["code"], "task_closed", "{d}");
    let (_, d) = s.get(&s.sessions_url(&format!("/{done}?include=state")));
    assert!(d.get("inputClosed").is_none(), "{d}");
    let (_, d) = s.get(&s.sessions_url(&format!("/{done}")));
    assert!(
        d.get("state").is_none(),
        "the seed's detail without include: {d}"
    );
    // `/openapi.json` describes the parameters and the fields they add.
    let (status, doc) = s.get(&s.url("/openapi.json"));
    assert_eq!(status, 200);
    let list_op = &doc["paths"]["/v1/ws/{workspaceSlug}/agent/sessions"]["get"];
    let names: Vec<&str> = list_op["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(
        names.contains(&"state") && names.contains(&"include"),
        "{names:?}"
    );
    let reference = list_op["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
        .as_str()
        .expect("a response schema");
    let component = &doc["components"]["schemas"][reference.rsplit('/').next().unwrap_or("")];
    let (_, page) = list(&s, "include=state");
    let validator = jsonschema::validator_for(component).expect("the schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(&page)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    // The console: every row says the server's state.
    let b = browser();
    login(&b, &s);
    let words = |st: &str| {
        match st {
            "over_budget" => "Over budget",
            "done" => "Done",
            "failed" => "Failed",
            "asking" => "Asking",
            "sleeping" => "Sleeping",
            "interrupted" => "Interrupted",
            "closed" => "Closed",
            "cancelled" => "Cancelled",
            "running" => "Running",
            other => other,
        }
        .to_owned()
    };
    let shown: BTreeMap<String, String> = expected
        .iter()
        .map(|(id, st)| (id.clone(), words(st)))
        .collect();
    b.wait_for("every row's state", WAIT, || {
        let rows = row_badges(&b);
        (rows == shown).then_some(())
    });
    b.screenshot("states-list");

    // The Failed and Needs attention tabs filter on the server's state.
    b.click_css("#tab-failed");
    b.wait_for("only the failed session", WAIT, || {
        let rows = row_badges(&b);
        (rows.len() == 1 && rows.get(&failed).map(String::as_str) == Some("Failed")).then_some(())
    });
    assert!(
        b.exec("return location.hash;", &[])
            .as_str()
            .unwrap_or("")
            .contains("tab=failed")
    );
    b.screenshot("states-failed-tab");
    b.click_css("#tab-attention");
    b.wait_for("the sessions that need attention", WAIT, || {
        let rows = row_badges(&b);
        let mut ids: Vec<&String> = rows.keys().collect();
        ids.sort();
        let mut want = vec![&asking, &failed, &over];
        want.sort();
        (ids == want).then_some(())
    });
    b.wait_js(
        "the attention count",
        "return document.querySelector('#tab-attention .count')?.textContent === '3' && document.querySelector('#tab-failed .count')?.textContent === '1';",
        WAIT,
    );

    // The header and the details say what the row says.
    open_session(&b, &s, &failed);
    wait_header(&b, "Failed");
    b.wait_js(
        "the reason",
        "const dt = [...document.querySelectorAll('.session-aside dt')].find(e => e.textContent === 'Why'); return dt?.nextElementSibling.textContent === 'the tool broke';",
        WAIT,
    );
    assert_eq!(
        b.exec(
            "return document.querySelector('textarea[aria-label=Message]').disabled;",
            &[]
        ),
        false,
        "a failed session takes the next message"
    );
    b.screenshot("states-failed-session");

    // A closed session says why above its disabled composer, before anything is sent.
    open_session(&b, &s, &handed);
    wait_header(&b, "Closed");
    b.wait_js(
        "the closed notice over a disabled composer",
        "const n = document.querySelector('.input-closed'); return n && !n.hidden && n.dataset.code === 'session_closed' && n.textContent.includes('handed off') && document.querySelector('.composer textarea').disabled && document.querySelector('.composer .btn-send').disabled;",
        WAIT,
    );
    assert_eq!(count(&b, ".input-closed .raise-budget"), 0);
    b.screenshot("states-closed-session");
    // At a phone's width the notice stays on screen, above the composer.
    b.set_viewport(375, 812);
    b.wait_js(
        "the notice within 375 px",
        "const r = document.querySelector('.input-closed').getBoundingClientRect(); const c = document.querySelector('.composer').getBoundingClientRect(); \
         return innerWidth <= 375 && r.width > 0 && r.left >= 0 && r.right <= innerWidth && r.bottom <= c.top;",
        WAIT,
    );
    b.screenshot("states-closed-phone");
    b.set_viewport(DESKTOP.0, DESKTOP.1);

    open_session(&b, &s, &cancelled);
    wait_header(&b, "Cancelled");
    b.wait_js(
        "the task's notice",
        "const n = document.querySelector('.input-closed'); return n && !n.hidden && n.dataset.code === 'task_closed' && n.textContent.includes('CANCELED');",
        WAIT,
    );

    open_session(&b, &s, &interrupted);
    wait_header(&b, "Interrupted");
    open_session(&b, &s, &sleeping);
    wait_header(&b, "Sleeping");
    open_session(&b, &s, &running);
    wait_header(&b, "Running");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

fn a_spent_budget_is_raised_from_above_the_composer() {
    let fake = FakeOpenAi::start();
    let s = priced_server(&fake);
    let id = over_budget_session(&s, &fake);
    let b = browser();
    login(&b, &s);
    open_session(&b, &s, &id);
    wait_header(&b, "Over budget");
    b.wait_js(
        "the budget notice over a disabled composer",
        "const n = document.querySelector('.input-closed'); return n && !n.hidden && n.dataset.code === 'budget_hit' && document.querySelector('.composer textarea').disabled;",
        WAIT,
    );
    b.screenshot("states-over-budget");

    // A bad budget shows the server's error and changes nothing.
    b.click_css(".input-closed .raise-budget");
    b.find("dialog input[type=number]");
    b.exec(
        "document.querySelector('dialog input[type=number]').value = '-5';",
        &[],
    );
    b.click_css("dialog button[type=submit]");
    let error = b.wait_js(
        "the server's error in the form",
        "const e = document.querySelector('dialog .form-error'); return e && !e.hidden && e.textContent;",
        WAIT,
    );
    assert!(
        error
            .as_str()
            .is_some_and(|e| e.to_lowercase().contains("budget.cents")),
        "{error}"
    );
    let (_, r) = s.get(&s.url(&format!("/v2/sessions/{id}")));
    assert_eq!(r["budget"]["cents"], 10, "{r}");
    b.screenshot("states-budget-refused");

    // A good one opens the session again.
    b.exec(
        "document.querySelector('dialog input[type=number]').value = '500';",
        &[],
    );
    b.click_css("dialog button[type=submit]");
    b.wait_js(
        "the composer open again",
        "const n = document.querySelector('.input-closed'); return !document.querySelector('dialog') && n.hidden && !document.querySelector('.composer textarea').disabled;",
        WAIT,
    );
    wait_header(&b, "Done");
    let (_, r) = s.get(&s.url(&format!("/v2/sessions/{id}")));
    assert_eq!(r["budget"]["cents"], 500, "{r}");
    assert_eq!(r["prompting"]["enabled"], true, "{r}");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

/// A sessiond started on the data dir (and database) of `s`, at the address `s` had, so that a
/// page loaded from it reconnects. Killed when dropped.
struct SameAddress(Child);

impl SameAddress {
    fn start(s: &Server) -> SameAddress {
        let addr = s.base.trim_start_matches("http://").trim_end_matches('/');
        let mut child = Command::new(env!("CARGO_BIN_EXE_sessiond"))
            .args(["serve", "--bind", addr, "--data-dir"])
            .arg(&s.data_dir)
            .args(database_args(&s.data_dir))
            .env("SESSIOND_ENGINE", "scripted")
            .env("SESSIOND_LOG", "warn")
            .env_remove("SESSIOND_CONFIG")
            .env_remove("SESSIOND_DATA_DIR")
            .env_remove("SESSIOND_DATABASE_URL")
            .env_remove("SESSIOND_BIND")
            .env_remove("OPENAI_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn sessiond");
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut first = String::new();
        out.read_line(&mut first).expect("first line");
        assert!(
            first.contains(addr),
            "restarted at another address: {first:?}"
        );
        std::thread::spawn(move || {
            let mut sink = String::new();
            let _ = out.read_to_string(&mut sink);
        });
        SameAddress(child)
    }
}

impl Drop for SameAddress {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn a_lost_stream_says_the_state_is_unknown_and_keeps_the_text() {
    let mut s = Server::start();
    let b = browser();
    login(&b, &s);
    let id = s.create_prompt("/slow 150\n/stream 400");
    open_session(&b, &s, &id);
    b.wait_js(
        "streamed text",
        "return document.querySelector('[data-kind=live-text]')?.textContent.includes('chunk 3 ');",
        WAIT,
    );
    wait_header(&b, "Running");
    // From here on, whether the streamed text ever left the screen.
    b.exec(
        "window.__blank = false; const tl = document.querySelector('.timeline'); \
         const seen = () => [...tl.querySelectorAll('[data-kind=live-text], [data-kind=void-text], [data-kind=text]')].some(e => e.textContent.includes('chunk 1 ')); \
         new MutationObserver(() => { if (!seen()) window.__blank = true; }).observe(tl, {childList: true, subtree: true, characterData: true});",
        &[],
    );

    s.kill9();
    b.wait_js(
        "the state unknown and the controls waiting",
        "const b = document.querySelector('.conn-banner'); \
         return b && !b.hidden && b.textContent.includes('state unknown') \
           && document.querySelector('.session-meta .badge')?.textContent === 'Unknown' \
           && document.querySelector('.composer textarea').disabled \
           && document.querySelector('.btn-stop').disabled \
           && document.querySelector('button[aria-label=Rename]').disabled \
           && document.querySelector('.tl-live.stale [data-kind=live-text]')?.textContent.includes('chunk 3 ');",
        WAIT,
    );
    b.wait_js(
        "the details saying Unknown",
        "const dt = [...document.querySelectorAll('.session-aside dt')].find(e => e.textContent === 'Status'); return dt?.nextElementSibling.textContent === 'Unknown';",
        WAIT,
    );
    b.screenshot("states-stream-lost");

    // sessiond comes back where it was: the turn it left running ends `interrupted`, and the
    // text streamed before the crash stays on screen until the stored result replaces it.
    let _again = SameAddress::start(&s);
    let terminal = s.wait_terminal(&id, 1);
    assert_eq!(terminal["event"]["type"], "interrupted");
    assert!(
        s.history_all(&id)
            .iter()
            .any(|e| e["event"]["metadata"]["code"] == "runner_exited"),
        "the restart's notice is stored"
    );
    b.wait_js(
        "the page back with the server's state",
        "return document.querySelector('.conn-banner').hidden && document.querySelector('[data-kind=interrupted]') \
           && document.querySelector('.session-meta .badge')?.textContent === 'Interrupted' \
           && !document.querySelector('.composer textarea').disabled;",
        WAIT,
    );
    wait_header(&b, "Interrupted");
    let kept = b.exec(
        "return [...document.querySelectorAll('.timeline [data-kind=void-text], .timeline [data-kind=text]')].map(e => ({kind: e.dataset.kind, text: e.textContent}));",
        &[],
    );
    assert!(
        kept.as_array().is_some_and(|k| k
            .iter()
            .any(|e| e["text"].as_str().is_some_and(|t| t.contains("chunk 3 ")))),
        "the streamed text is still there, stored or struck: {kept}"
    );
    assert_eq!(
        b.exec("return window.__blank;", &[]),
        false,
        "the text never left the screen"
    );
    b.screenshot("states-stream-back");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

fn void_text_stays_struck_until_the_answer_replaces_it() {
    let fake = FakeOpenAi::start();
    let engine = fake.engine(json!({"retryBaseMs": 600})).to_string();
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
    let b = browser();
    login(&b, &s);
    open_session(&b, &s, &id);
    b.find("[data-kind=complete]");
    // Every state of the volatile part of the timeline, from before the next turn starts.
    b.exec(
        "window.__live = []; const box = document.querySelector('.tl-live'); \
         const snap = () => ({ void: box.querySelector('[data-kind=void-text] del')?.textContent ?? null, \
           reason: box.querySelector('[data-kind=void-reason]')?.textContent ?? null, \
           live: box.querySelector('[data-kind=live-text]')?.textContent ?? null }); \
         new MutationObserver(() => window.__live.push(snap())).observe(box, {childList: true, subtree: true, characterData: true});",
        &[],
    );

    // The first attempt streams and is cut short by `[DONE]`; the retry streams the answer.
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
        delay: Duration::from_millis(120),
        end: End::Done,
    });
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "again"}),
    );
    assert_eq!(status, 200, "{v}");
    b.wait_js(
        "the void text struck with the server's reason",
        "return window.__live.some(s => s.void?.includes('Half of the') && s.reason?.includes('void'));",
        WAIT,
    );
    b.screenshot("states-void-text");
    b.wait_js(
        "the second reply",
        "return document.querySelectorAll('[data-kind=complete]').length === 2;",
        WAIT,
    );
    let states = b.exec("return window.__live;", &[]);
    let states = states.as_array().expect("states");
    assert!(
        states.iter().any(|st| {
            st["void"]
                .as_str()
                .is_some_and(|t| t.contains("Half of the"))
                && st["live"].as_str().is_some_and(|t| t.contains("The whole"))
        }),
        "the void text stayed, struck, while the retry streamed: {states:?}"
    );
    assert!(
        states.iter().all(
            |st| !st["live"].as_str().is_some_and(|t| t.contains("Half")) || st["void"].is_null()
        ),
        "the void text is never live text at the same time: {states:?}"
    );
    // The durable answer replaced it.
    b.wait_js(
        "no void text left",
        "return document.querySelectorAll('[data-kind=void-text], [data-kind=live-text]').length === 0;",
        WAIT,
    );
    let texts = b.exec(
        "return [...document.querySelectorAll('.timeline [data-kind=text]')].map(e => e.textContent.trim());",
        &[],
    );
    assert_eq!(texts, json!(["Hello.", "The whole answer."]));
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

/// The text of the `dd` after the `dt` saying `label` in the panel titled `panel`.
fn panel_value(b: &webdriver::Browser, panel: &str, label: &str) -> Value {
    b.exec(
        "const p = [...document.querySelectorAll('.session-aside .panel')].find(e => e.querySelector('.panel-title')?.textContent === arguments[0]); \
         const dt = p && [...p.querySelectorAll('dt')].find(e => e.textContent === arguments[1]); return dt ? dt.nextElementSibling.textContent : null;",
        &[json!(panel), json!(label)],
    )
}

fn wait_panel_value(b: &webdriver::Browser, panel: &str, label: &str, want: &str) {
    b.wait_for(&format!("{panel} / {label} = {want}"), WAIT, || {
        (panel_value(b, panel, label).as_str() == Some(want)).then_some(())
    });
}

fn the_details_show_cost_budget_lineage_task_and_raw_events() {
    let fake = FakeOpenAi::start();
    let s = priced_server(&fake);
    // A session that spent 20 cents (/v1), with a budget and metadata set on /v2.
    fake.push(text_reply("that was costly", (10, 10, 0)));
    let (status, v) = s.post(
        &s.url(&format!(
            "/v1/ws/{WS}/agents/{PRICED}/sessions/default/messages"
        )),
        &json!({"prompt": "spend"}),
    );
    assert_eq!(status, 200, "{v}");
    let id = id_of(&v);
    s.wait_terminal(&id, 1);
    let request = new_uuid();
    fake.push(text_reply("more", (1, 1, 0)));
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "and more", "clientRequestId": request}),
    );
    assert_eq!(status, 200, "{v}");
    let input_seq = v["inputSeq"].as_u64().unwrap_or(0);
    s.wait_terminal(&id, input_seq.max(1));
    let (status, r) = s.patch(
        &s.url(&format!("/v2/sessions/{id}")),
        &json!({"budget": {"cents": 5000}, "metadata": {"ticket": "T-42"}}),
    );
    assert_eq!(status, 200, "{r}");
    // A continuation of it on /v2.
    fake.push(text_reply("continued", (1, 1, 0)));
    let (status, v) = s.post(
        &s.url("/v2/sessions"),
        &json!({"prompt": "go on", "parent": {"kind": "continuation", "session_id": id}}),
    );
    assert_eq!(status, 201, "{v}");
    let child = v["id"].as_str().expect("id").to_owned();
    s.wait_terminal(&child, 1);
    let (_, record) = s.get(&s.url(&format!("/v2/sessions/{id}")));
    let spent = record["cost"]["total"].as_u64().expect("cents");
    assert!(spent >= 20, "{record}");

    let b = browser();
    login(&b, &s);
    open_session(&b, &s, &id);
    wait_panel_value(&b, "Cost and budget", "Budget", "5000 ¢ ($50.00)Change");
    assert_eq!(
        panel_value(&b, "Cost and budget", "Cost"),
        json!(format!("{spent} ¢ (${:.2})", spent as f64 / 100.0))
    );
    let tokens = format!(
        "{} / {}",
        record["tokens"]["input"], record["tokens"]["output"]
    );
    assert_eq!(
        panel_value(&b, "Cost and budget", "Tokens in / out"),
        json!(tokens)
    );
    assert_eq!(panel_value(&b, "Metadata", "ticket"), json!("T-42"));
    assert_eq!(panel_value(&b, "Provenance", "Source"), record["source"]);
    let (_, task) = s.get(&s.url(&format!("/agentex/tasks/{id}")));
    assert_eq!(panel_value(&b, "Task", "Status"), task["status"]);
    b.screenshot("details-panels");

    // The budget changes from the details; bad input shows the server's error, changes nothing.
    b.exec(
        "[...document.querySelectorAll('.session-aside .budget-line button')].find(e => e.textContent === 'Change').click();",
        &[],
    );
    b.find("dialog input[type=number]");
    b.exec(
        "document.querySelector('dialog input[type=number]').value = '99999999999';",
        &[],
    );
    b.click_css("dialog button[type=submit]");
    b.wait_js(
        "the server's error",
        "const e = document.querySelector('dialog .form-error'); return e && !e.hidden && e.textContent.toLowerCase().includes('budget');",
        WAIT,
    );
    let (_, r) = s.get(&s.url(&format!("/v2/sessions/{id}")));
    assert_eq!(r["budget"]["cents"], 5000, "{r}");
    b.exec(
        "document.querySelector('dialog input[type=number]').value = '7000';",
        &[],
    );
    b.click_css("dialog button[type=submit]");
    wait_panel_value(&b, "Cost and budget", "Budget", "7000 ¢ ($70.00)Change");
    let (_, r) = s.get(&s.url(&format!("/v2/sessions/{id}")));
    assert_eq!(r["budget"]["cents"], 7000, "{r}");

    // Every event as the Sessions API serves it, with each input's request id.
    b.exec("document.querySelector('.raw-events').open = true;", &[]);
    b.wait_js(
        "the input's request id",
        &format!(
            "return [...document.querySelectorAll('.raw-list .raw-btn')].some(e => e.textContent.includes({}));",
            json!(request)
        ),
        WAIT,
    );
    let history = s.history_all(&id);
    let prompt = history
        .iter()
        .find(|e| e["event"]["clientRequestId"] == request.as_str())
        .expect("the stored input");
    let seq = prompt["seq"].as_u64().expect("seq");
    b.exec(
        "document.querySelector(`.raw-list .raw-btn[data-seq='${arguments[0]}']`).click();",
        &[json!(seq)],
    );
    let raw = b.wait_js(
        "the raw event",
        "return document.querySelector('dialog [data-kind=raw-event] pre')?.textContent;",
        WAIT,
    );
    let raw: Value = serde_json::from_str(raw.as_str().unwrap_or("")).expect("JSON");
    assert_eq!(raw["seq"], prompt["seq"]);
    assert_eq!(raw["event"], prompt["event"]);
    // And as the Task events API serves it: the HAST envelopes numbered seq × 10 to seq × 10 + 9.
    let hast = b.wait_js(
        "the HAST envelopes",
        "return document.querySelector('dialog [data-kind=raw-hast] pre')?.textContent;",
        WAIT,
    );
    let hast: Value = serde_json::from_str(hast.as_str().unwrap_or("")).expect("HAST JSON");
    let (status, page) = s.get(&s.url(&format!(
        "/v2/sessions/{id}/events?after={}&limit=10",
        seq * 10 - 1
    )));
    assert_eq!(status, 200, "{page}");
    let want: Vec<Value> = page["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| (seq * 10..seq * 10 + 10).contains(&e["sequence"].as_u64().unwrap_or(0)))
        .cloned()
        .collect();
    assert!(!want.is_empty(), "a prompt has a HAST envelope: {page}");
    assert_eq!(hast, Value::Array(want));
    b.screenshot("details-raw-event");
    // Its submit button forks from the event (`forking_from_an_event_opens_the_fork`): close it.
    b.click_css("dialog .dialog-actions button[type=button]");
    b.wait_js(
        "the dialog closed",
        "return !document.querySelector('dialog');",
        WAIT,
    );

    // "Copy as curl": the detail's command works as printed, with an API key.
    let command = b.exec(
        "return document.querySelector('.curls pre')?.textContent;",
        &[],
    );
    let command = command.as_str().expect("a curl command").to_owned();
    assert!(command.contains("$SESSIOND_KEY"), "{command}");
    let out = Command::new("bash")
        .arg("-c")
        .arg(&command)
        .env("SESSIOND_KEY", &s.token)
        .output()
        .expect("run curl");
    assert!(out.status.success(), "{command}: {out:?}");
    let detail: Value = serde_json::from_slice(&out.stdout).expect("JSON from curl");
    assert_eq!(detail["id"], id.as_str());
    assert_eq!(detail["state"], "done");

    // Lineage links the continuation to its parent.
    open_session(&b, &s, &child);
    b.wait_js(
        "the parent link",
        &format!(
            "const p = [...document.querySelectorAll('.session-aside .panel')].find(e => e.querySelector('.panel-title')?.textContent === 'Lineage'); \
             return p && [...p.querySelectorAll('dt')].some(e => e.textContent === 'Parent (continuation)') && p.querySelector('a')?.getAttribute('href').endsWith({});",
            json!(id)
        ),
        WAIT,
    );
    b.screenshot("details-lineage");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

/// "Fork from here" on an event of the details' list makes the fork through the API, opens it,
/// and the fork's lineage names the session and the event; the session itself is unchanged.
fn forking_from_an_event_opens_the_fork() {
    let s = Server::start();
    let id = s.create_prompt("first");
    let first = s.wait_terminal(&id, 1)["seq"].as_u64().expect("seq");
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/messages")),
        &json!({"prompt": "second"}),
    );
    assert_eq!(status, 200, "{v}");
    s.wait_terminal(&id, first + 1);
    let before = s.history_all(&id);

    let b = browser();
    login(&b, &s);
    open_session(&b, &s, &id);
    b.exec("document.querySelector('.raw-events').open = true;", &[]);
    b.wait_js(
        "the fork button of the first turn's terminal",
        &format!("return !!document.querySelector(`.raw-list .fork-btn[data-seq='{first}']`);"),
        WAIT,
    );
    b.exec(
        "document.querySelector(`.raw-list .fork-btn[data-seq='${arguments[0]}']`).click();",
        &[json!(first)],
    );
    b.find("dialog #fork-prompt");
    b.screenshot("fork-dialog");
    b.click_css("dialog button[type=submit]");
    let fork = b.wait_js(
        "the fork opened",
        &format!(
            "const m = location.hash.match(/\\/s\\/([^/?]+)/); return m && m[1] !== {} ? decodeURIComponent(m[1]) : null;",
            json!(id)
        ),
        WAIT,
    );
    let fork = fork.as_str().expect("the fork's id").to_owned();
    let (status, record) = s.get(&s.url(&format!("/v2/sessions/{fork}")));
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["parent"]["kind"], "fork", "{record}");
    assert_eq!(record["parent"]["session_id"], id.as_str(), "{record}");
    assert_eq!(record["parent"]["at_seq"], first, "{record}");
    wait_panel_value(&b, "Lineage", "Parent (fork)", &id);
    b.screenshot("fork-opened");
    // The fork's timeline is the session's up to the event (after its own `session_created`, the
    // same events at the same seqs), and the session is unchanged.
    let same = |h: &[Value]| -> Vec<(Value, Value)> {
        h.iter()
            .filter(|e| (2..=first).contains(&e["seq"].as_u64().unwrap_or(0)))
            .map(|e| (e["seq"].clone(), e["event"].clone()))
            .collect()
    };
    assert_eq!(same(&s.history_all(&fork)), same(&before));
    assert_eq!(s.history_all(&id), before);
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}
