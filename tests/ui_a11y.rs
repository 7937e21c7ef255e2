//! Every view of the console passes axe-core (the npm package, installed by `.ci/run` under
//! `target/axe/`, or named by `SESSIOND_AXE_CORE`) with no serious or critical violation, in the
//! light and the dark theme and at phone width; and the console is operable from the keyboard
//! with a visible focus ring.
//!
//! The views hold real data made through the APIs first (a finished session, one asking, a
//! webhook, a key, a second person), so the rules see the rows, cards and dialogs people see.
//! Under libtest-mimic as `tests/ui.rs`: without Chromium, or without axe-core, the tests are
//! reported `ignored` (failed, with `CI` set). Screenshots land in `target/ui-screenshots/`.

mod common;
#[path = "common/console.rs"]
mod console;
#[path = "common/webdriver.rs"]
mod webdriver;

use std::path::PathBuf;

use common::*;
use console::*;
use serde_json::{Value, json};
use webdriver::Browser;

const TESTS: &[(&str, fn())] = &[
    (
        "every_view_has_no_serious_accessibility_violation",
        every_view_has_no_serious_accessibility_violation,
    ),
    (
        "the_signed_out_pages_have_no_serious_accessibility_violation",
        the_signed_out_pages_have_no_serious_accessibility_violation,
    ),
    (
        "the_console_is_operable_from_the_keyboard",
        the_console_is_operable_from_the_keyboard,
    ),
];

fn main() -> std::process::ExitCode {
    run_needing(TESTS, axe_missing())
}

/// Where axe-core's browser build is.
fn axe_path() -> PathBuf {
    std::env::var_os("SESSIOND_AXE_CORE").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("target/axe/node_modules/axe-core/axe.min.js")
        },
        PathBuf::from,
    )
}

fn axe_missing() -> Option<String> {
    let path = axe_path();
    (!path.is_file()).then(|| {
        format!(
            "axe-core ({}; `npm install --prefix target/axe axe-core`)",
            path.display()
        )
    })
}

/// Runs axe-core on the page as it stands and fails on any serious or critical violation,
/// naming the rule, its help and the elements. `view` names the view in the message.
fn check(b: &Browser, view: &str) {
    let loaded = b.exec("return typeof window.axe === 'object';", &[]);
    if loaded != true {
        let source = std::fs::read_to_string(axe_path()).expect("read axe-core");
        // The script runs as the body of a function: axe's build sets `window.axe`.
        b.exec(&format!("{source}\n;return true;"), &[]);
    }
    // Colours are read as they stand: a theme's change or a hover still fading is waited out.
    b.wait_js(
        "the transitions over",
        "return !document.getAnimations().some((a) => a instanceof CSSTransition && a.playState === 'running');",
        WAIT,
    );
    let found = b.exec_async(
        "const done = arguments[arguments.length - 1];
         axe.run(document, { resultTypes: ['violations'] })
           .then((r) => done(r.violations
             .filter((v) => v.impact === 'serious' || v.impact === 'critical')
             .map((v) => ({ id: v.id, impact: v.impact, help: v.help,
               nodes: v.nodes.slice(0, 5).map((n) => ({ target: n.target.join(' '),
                 summary: n.failureSummary })) }))))
           .catch((e) => done({ error: String(e) }));",
        &[],
    );
    assert!(
        found.get("error").is_none(),
        "{view}: axe-core failed: {found}"
    );
    let list = found.as_array().cloned().unwrap_or_default();
    assert!(
        list.is_empty(),
        "{view}: {} serious or critical accessibility violations:\n{}",
        list.len(),
        serde_json::to_string_pretty(&list).unwrap_or_default()
    );
}

/// Checks the view in both themes (the theme is the `data-theme` attribute the page sets).
fn check_both_themes(b: &Browser, view: &str) {
    for theme in ["light", "dark"] {
        b.exec(
            "document.documentElement.setAttribute('data-theme', arguments[0]);",
            &[json!(theme)],
        );
        check(b, &format!("{view} ({theme})"));
    }
    b.exec(
        "document.documentElement.setAttribute('data-theme', 'light');",
        &[],
    );
}

fn goto_view(b: &Browser, s: &Server, path: &str, ready: &str) {
    b.goto(&s.url(&format!("/#/w/{WS}{path}")));
    b.find(ready);
}

/// A finished session, one waiting on a question, a webhook, a second key and a member: the
/// views then show rows, cards and badges of every kind.
fn seed(s: &Server) -> (String, String) {
    let done =
        s.create_prompt("/reply Here is **the answer**, with `code`.\n/todos plan; build; ship");
    s.wait_terminal(&done, 0);
    let asking = s.create_prompt("/ask Which colour? | red | blue");
    s.wait_for_event(&asking, &["ask"], 0, WAIT);
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/webhooks")),
        &json!({"url": "http://127.0.0.1:9/in", "eventTypes": ["run.completed"]}),
    );
    assert_eq!(status, 201, "{v}");
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/keys")),
        &json!({"name": "reporting", "scopes": ["sessions:read"]}),
    );
    assert_eq!(status, 201, "{v}");
    (done, asking)
}

fn every_view_has_no_serious_accessibility_violation() {
    let b = browser();
    let s = Server::start_with_config("[policy]\nwebhook_hosts = [\"127.0.0.1\"]\n");
    let (done, asking) = seed(&s);
    login(&b, &s);
    check_both_themes(&b, "sessions list");

    for (view, path, ready) in [
        ("overview", "/overview", ".overview-view"),
        ("agents", "/agents", ".agents-view .agent-card"),
        ("agent home", "/agents/root", ".agent-view"),
        ("new session", "/new", ".new-view"),
        ("webhooks", "/webhooks", ".webhooks-view"),
        ("access: keys", "/access/keys", ".access-view"),
        ("access: people", "/access/people", ".access-view"),
        ("access: workspace", "/access/workspace", ".access-view"),
        ("failed filter", "/sessions?state=failed", ".list-view"),
        ("agent: about", "/agents/root/about", ".agent-page"),
        ("agent: schedules", "/agents/root/schedules", ".agent-page"),
        (
            "agent: deployments",
            "/agents/root/deployments",
            ".agent-page",
        ),
        ("files", "/files", ".files-view"),
    ] {
        goto_view(&b, &s, path, ready);
        check_both_themes(&b, view);
        b.screenshot(&format!("a11y-{}", view.replace([' ', ':'], "-")));
    }

    // A finished session, its details panel and the raw view of an event.
    open_session(&b, &s, &done);
    b.wait_js(
        "the reply shown",
        "return document.querySelector('.timeline')?.textContent.includes('the answer');",
        WAIT,
    );
    b.find(".session-aside .raw-events");
    b.exec("document.querySelector('.raw-events').open = true;", &[]);
    check_both_themes(&b, "session with its details");
    b.wait_js(
        "the events listed",
        "return document.querySelectorAll('.raw-list .raw-btn').length > 0;",
        WAIT,
    );
    b.exec("document.querySelector('.raw-list .raw-btn').click();", &[]);
    b.find("dialog [data-kind=raw-event] pre");
    check(&b, "raw event dialog");

    // A session asking a question: its answer card.
    open_session(&b, &s, &asking);
    b.find(".ask-options");
    check_both_themes(&b, "asking session");

    // At phone width, with the navigation opened.
    b.set_viewport(375, 812);
    goto_view(&b, &s, "/sessions", ".list-view");
    check(&b, "sessions list (375 px)");
    open_session(&b, &s, &done);
    check(&b, "session (375 px)");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

fn the_signed_out_pages_have_no_serious_accessibility_violation() {
    let b = browser();
    let s = Server::start();
    b.goto(&s.url("/login"));
    b.find("#login-email");
    check_both_themes(&b, "sign in");
    // A refused sign-in shows its error; the page with the error passes too.
    b.type_into("#login-email", OWNER_EMAIL);
    b.type_into("#login-password", "not the password");
    b.click_css(".auth-form button[type=submit]");
    b.wait_js(
        "the refusal shown",
        "const e = document.querySelector('.auth-form .form-error'); return e && !e.hidden && e.textContent;",
        WAIT,
    );
    check(&b, "sign in, refused");

    // The first-run setup page of a server with no account.
    let dir = tempfile::tempdir().expect("temp dir");
    let fresh = FreshServer::start(dir.path(), "warn");
    let token = fresh.setup_token();
    b.goto(&format!("{}/setup#{token}", fresh.base));
    b.find("#setup-email");
    check_both_themes(&b, "setup");
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}

/// WebDriver key codes.
const TAB: &str = "\u{E004}";
const ENTER: &str = "\u{E007}";

/// The element that has the focus, described, and whether the focus shows: the look of the
/// element and its nearest ancestors (outline, ring, border) differs with the focus on and off.
fn focused(b: &Browser) -> Value {
    b.exec(
        "const e = document.activeElement;
         if (!e || e === document.body) return null;
         const chain = [];
         for (let x = e; x && chain.length < 4; x = x.parentElement) chain.push(x);
         const look = () => chain.map((x) => { const s = getComputedStyle(x);
           return [s.outlineStyle, s.outlineWidth, s.outlineColor, s.boxShadow, s.borderColor].join('|'); }).join('/');
         // With transitions off, the look changes at once (CSSOM styles pass the CSP).
         const kept = chain.map((x) => x.style.transition);
         for (const x of chain) x.style.transition = 'none';
         const on = look();
         e.blur();
         const off = look();
         e.focus();
         chain.forEach((x, i) => { x.style.transition = kept[i]; });
         return { tag: e.tagName.toLowerCase(), href: e.getAttribute('href'),
           text: (e.getAttribute('aria-label') || e.textContent || '').trim().slice(0, 40),
           ring: on !== off };",
        &[],
    )
}

fn the_console_is_operable_from_the_keyboard() {
    let b = browser();
    let s = Server::start();
    let done = s.create_prompt("/reply a reply to reach");
    s.wait_terminal(&done, 0);
    login(&b, &s);

    // Tab walks the page from the top: every stop shows the focus, and the navigation's links
    // and the session's row are among the stops.
    b.exec("document.activeElement?.blur();", &[]);
    let mut stops = Vec::new();
    for _ in 0..40 {
        b.press(TAB);
        let f = focused(&b);
        if f.is_null() {
            continue;
        }
        assert_eq!(f["ring"], true, "a focus stop that does not show: {f}");
        stops.push(f);
    }
    let reached = |href: &str| stops.iter().any(|f| f["href"] == href);
    assert!(
        reached(&format!("#/w/{WS}/agents")),
        "the navigation is reached with Tab: {stops:?}"
    );

    // Enter on the focused row opens the session.
    let row = b.find(&format!("a[href='#/w/{WS}/s/{done}']"));
    b.exec("arguments[0].focus();", &[row.to_json()]);
    b.press(ENTER);
    b.find(".session-view .timeline");
    b.wait_js(
        "the reply shown",
        "return document.querySelector('.timeline')?.textContent.includes('a reply to reach');",
        WAIT,
    );
    // The composer takes the focus and shows it.
    let composer = b.find(".composer textarea");
    b.exec("arguments[0].focus();", &[composer.to_json()]);
    let f = focused(&b);
    assert_eq!(
        (&f["tag"], &f["ring"]),
        (&json!("textarea"), &json!(true)),
        "{f}"
    );
    assert!(ui_errors(&b).is_empty(), "{:?}", ui_errors(&b));
}
