//! What the web console's browser tests share: one browser at a time, the libtest-mimic runner
//! that reports a missing Chromium as `ignored`, signing in, opening a session, reading the page,
//! and the browser errors that point at the UI itself.
//!
//! A test file includes it next to `webdriver.rs`:
//! `#[path = "common/webdriver.rs"] mod webdriver; #[path = "common/console.rs"] mod console;`
#![allow(dead_code)]

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{OWNER_EMAIL, OWNER_PASSWORD, Server, WS};
use crate::webdriver::{Browser, browser_available, browser_missing};

pub const DESKTOP: (u32, u32) = (1440, 900);
pub const WAIT: Duration = Duration::from_secs(20);

/// One browser at a time: the streaming tests are timing-sensitive and Chromium is heavy.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The browser of one test, holding the lock until it is dropped (fields drop in order).
pub struct Ui {
    browser: Browser,
    _turn: MutexGuard<'static, ()>,
}

impl std::ops::Deref for Ui {
    type Target = Browser;
    fn deref(&self) -> &Browser {
        &self.browser
    }
}

/// The browser of one test (one at a time). [`run`] has checked that Chromium is there, or that
/// `CI` is set, in which case a missing one fails here.
pub fn browser() -> Ui {
    assert!(browser_available(), "Chromium and ChromeDriver are needed");
    let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    Ui {
        browser: Browser::start(DESKTOP.0, DESKTOP.1),
        _turn: turn,
    }
}

/// Runs `tests` under libtest-mimic: without Chromium each is reported `ignored` with the
/// reason (failed, with `CI` set).
pub fn run(tests: &[(&'static str, fn())]) -> std::process::ExitCode {
    run_needing(tests, None)
}

/// [`run`] for tests that need one more thing beside the browser: `also_missing` says what is
/// missing of it, if anything, and is treated as a missing browser is.
pub fn run_needing(
    tests: &[(&'static str, fn())],
    also_missing: Option<String>,
) -> std::process::ExitCode {
    use libtest_mimic::{Arguments, Completion, Trial};
    let args = Arguments::from_args();
    let missing = browser_missing().or(also_missing);
    let in_ci = std::env::var_os("CI").is_some();
    if let Some(what) = &missing {
        if in_ci {
            eprintln!("error: browser tests need {what}; they fail in CI");
        } else {
            eprintln!(
                "notice: browser tests SKIPPED: {what} not found (.ci/run installs what they need)"
            );
        }
    }
    let trials = tests
        .iter()
        .map(|&(name, test)| match &missing {
            Some(what) if !in_ci => {
                let reason = format!("{what} not found");
                Trial::ignorable_test(name, move || Ok(Completion::ignored_with(reason)))
            }
            _ => Trial::test(name, move || {
                test();
                Ok(())
            }),
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// Signs in through the login page, which lands on the overview, and goes on to the sessions
/// list.
pub fn login(b: &Browser, s: &Server) {
    b.goto(&s.url("/login"));
    b.type_into("#login-email", OWNER_EMAIL);
    b.type_into("#login-password", OWNER_PASSWORD);
    b.click_css(".auth-form button[type=submit]");
    b.find(".overview-view");
    b.exec(
        "location.hash = arguments[0];",
        &[serde_json::json!(format!("#/w/{WS}/sessions"))],
    );
    b.find(".list-view");
}

pub fn open_session(b: &Browser, s: &Server, id: &str) {
    b.goto(&s.url(&format!("/#/w/{WS}/s/{id}")));
    b.find(".session-view .timeline");
}

/// Text of the one element matching `css` (or null).
pub fn text_of(b: &Browser, css: &str) -> Value {
    b.exec(
        "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
        &[json!(css)],
    )
}

pub fn count(b: &Browser, css: &str) -> u64 {
    b.exec(
        "return document.querySelectorAll(arguments[0]).length;",
        &[json!(css)],
    )
    .as_u64()
    .unwrap_or(0)
}

/// Browser errors that point at the UI itself: script errors and CSP violations. (Failed requests
/// that a test provokes on purpose, such as a refused request, are expected.)
pub fn ui_errors(b: &Browser) -> Vec<String> {
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

/// Waits until the element `css` holds `text`.
pub fn wait_text(b: &Browser, what: &str, css: &str, text: &str) {
    b.wait_js(
        what,
        &format!(
            "const e = document.querySelector({}); return !!e && e.textContent.includes({});",
            json!(css),
            json!(text)
        ),
        WAIT,
    );
}

/// Waits until the dialog is open and settled, then submits it with its primary button.
pub fn submit_dialog(b: &Browser) {
    b.find("dialog[open] .dialog-actions button[type=submit]");
    b.click_css("dialog[open] .dialog-actions button[type=submit]");
}

/// Waits until no dialog is open.
pub fn no_dialog(b: &Browser) {
    b.wait_js(
        "the dialog closed",
        "return !document.querySelector('dialog[open]');",
        WAIT,
    );
}
