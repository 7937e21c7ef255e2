//! A minimal W3C WebDriver client over `reqwest::blocking`: starts `chromedriver` on a free port
//! and one headless Chromium session with a fresh profile.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use reqwest::blocking::Client;
use serde_json::{Value, json};

/// W3C element reference key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// WebDriver special keys.
pub const KEY_ENTER: &str = "\u{E007}";
pub const KEY_SHIFT: &str = "\u{E008}";
pub const KEY_NULL: &str = "\u{E000}";

fn chromium_bin() -> PathBuf {
    std::env::var_os("CHROMIUM_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

fn chromedriver_bin() -> PathBuf {
    std::env::var_os("CHROMEDRIVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromedriver"))
}

/// What the browser tests lack here (`/usr/bin/chromium and /usr/bin/chromedriver`), if anything.
pub fn browser_missing() -> Option<String> {
    let (chromium, driver) = (chromium_bin(), chromedriver_bin());
    let missing: Vec<String> = [chromium.as_path(), driver.as_path()]
        .into_iter()
        .filter(|p| !p.exists())
        .map(|p| p.display().to_string())
        .collect();
    (!missing.is_empty()).then(|| missing.join(" and "))
}

/// Whether the browser tests can run here.
pub fn browser_available() -> bool {
    browser_missing().is_none()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A JSON value that is a WebDriver element reference.
#[derive(Debug, Clone)]
pub struct Element(pub String);

impl Element {
    pub fn to_json(&self) -> Value {
        json!({ ELEMENT: self.0 })
    }
}

/// One chromedriver process with one browser session. Dropping it ends both.
pub struct Browser {
    driver: Child,
    http: Client,
    /// `http://127.0.0.1:<port>/session/<id>`
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium of `width`×`height` CSS pixels.
    pub fn start(width: u32, height: u32) -> Browser {
        let port = free_port();
        let driver = Command::new(chromedriver_bin())
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        sessiond::tls::install_provider();
        let http = Client::builder()
            .timeout(Duration::from_secs(90))
            .build()
            .expect("http client");
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let ready = http
                .get(format!("{base}/status"))
                .send()
                .ok()
                .and_then(|r| r.json::<Value>().ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let profile = tempfile::tempdir().expect("profile dir");
        let args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-extensions".to_owned(),
            "--force-device-scale-factor=1".to_owned(),
            "--lang=en-US".to_owned(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "pageLoadStrategy": "normal",
                    "goog:loggingPrefs": { "browser": "ALL" },
                    "goog:chromeOptions": {
                        "binary": chromium_bin().display().to_string(),
                        "args": args,
                    }
                }
            }
        });
        // A loaded machine occasionally fails Chromium's first start: try a few times.
        let mut last = String::new();
        let mut id = None;
        for _ in 0..3 {
            match http
                .post(format!("{base}/session"))
                .json(&caps)
                .send()
                .and_then(|r| r.json::<Value>())
            {
                Ok(v) => match v["value"]["sessionId"].as_str() {
                    Some(s) => {
                        id = Some(s.to_owned());
                        break;
                    }
                    None => last = v.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let id = id.unwrap_or_else(|| panic!("cannot start Chromium: {last}"));
        let b = Browser {
            driver,
            http,
            session: format!("{base}/session/{id}"),
            _profile: profile,
        };
        b.set_viewport(width, height);
        b
    }

    /// One WebDriver command; panics with the driver's message on error.
    pub fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.try_cmd(method, path, body)
            .unwrap_or_else(|e| panic!("WebDriver {method} {path}: {e}"))
    }

    pub fn try_cmd(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, String> {
        let url = format!("{}{path}", self.session);
        let req = match method {
            "GET" => self.http.get(&url),
            "DELETE" => self.http.delete(&url),
            _ => self
                .http
                .post(&url)
                .json(&body.unwrap_or_else(|| json!({}))),
        };
        let resp = req.send().map_err(|e| e.to_string())?;
        let status = resp.status();
        let v: Value = resp.json().map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(v["value"].clone())
        } else {
            Err(format!(
                "{}: {}",
                v["value"]["error"].as_str().unwrap_or("error"),
                v["value"]["message"].as_str().unwrap_or("")
            ))
        }
    }

    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    pub fn refresh(&self) {
        self.cmd("POST", "/refresh", None);
    }

    /// Resizes the window so that the page's viewport is `width`×`height`.
    pub fn set_viewport(&self, width: u32, height: u32) {
        self.cmd(
            "POST",
            "/window/rect",
            Some(json!({ "width": width, "height": height })),
        );
        let inner = self.exec("return [window.innerWidth, window.innerHeight];", &[]);
        let (iw, ih) = (
            inner[0].as_u64().unwrap_or(width as u64) as i64,
            inner[1].as_u64().unwrap_or(height as u64) as i64,
        );
        let (dw, dh) = (width as i64 - iw, height as i64 - ih);
        if dw != 0 || dh != 0 {
            self.cmd(
                "POST",
                "/window/rect",
                Some(json!({ "width": width as i64 + dw, "height": height as i64 + dh })),
            );
        }
    }

    pub fn try_find(&self, css: &str) -> Option<Element> {
        self.try_cmd(
            "POST",
            "/element",
            Some(json!({ "using": "css selector", "value": css })),
        )
        .ok()
        .and_then(|v| v[ELEMENT].as_str().map(|s| Element(s.to_owned())))
    }

    /// Waits (up to 15 s) for an element matching `css`.
    pub fn find(&self, css: &str) -> Element {
        self.wait_for(&format!("element {css}"), Duration::from_secs(15), || {
            self.try_find(css)
        })
    }

    pub fn click(&self, el: &Element) {
        self.cmd("POST", &format!("/element/{}/click", el.0), None);
    }

    /// Waits for `css`, then clicks it (retrying while it is covered or not yet interactable).
    pub fn click_css(&self, css: &str) {
        self.wait_for(&format!("clickable {css}"), Duration::from_secs(15), || {
            let el = self.try_find(css)?;
            self.try_cmd("POST", &format!("/element/{}/click", el.0), None)
                .ok()
        });
    }

    pub fn send_keys(&self, el: &Element, text: &str) {
        self.cmd(
            "POST",
            &format!("/element/{}/value", el.0),
            Some(json!({ "text": text })),
        );
    }

    /// Presses and releases one key (a WebDriver key code such as `\u{E004}`, Tab) on whatever
    /// has the focus, as a keyboard does.
    pub fn press(&self, key: &str) {
        self.cmd(
            "POST",
            "/actions",
            Some(
                json!({"actions": [{"type": "key", "id": "keyboard", "actions": [
                {"type": "keyDown", "value": key}, {"type": "keyUp", "value": key}]}]}),
            ),
        );
    }

    /// Waits for `css`, then types `text` into it.
    pub fn type_into(&self, css: &str, text: &str) {
        let el = self.find(css);
        self.send_keys(&el, text);
    }

    /// Runs a synchronous script (`return …`) with JSON arguments.
    pub fn exec(&self, script: &str, args: &[Value]) -> Value {
        self.cmd(
            "POST",
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Runs an asynchronous script with JSON arguments: it answers by calling its last argument.
    pub fn exec_async(&self, script: &str, args: &[Value]) -> Value {
        self.cmd(
            "POST",
            "/execute/async",
            Some(json!({ "script": script, "args": args })),
        )
    }

    /// Polls `f` every 50 ms until it yields `Some`; panics after `timeout`.
    pub fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut() -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = f() {
                return v;
            }
            if Instant::now() > deadline {
                let text = self
                    .try_cmd(
                        "POST",
                        "/execute/sync",
                        Some(json!({"script": "return document.body ? document.body.innerText.slice(0, 3000) : ''", "args": []})),
                    )
                    .unwrap_or_default();
                panic!("timed out after {timeout:?} waiting for {what}; page text:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the script returns something truthy (not null/false/""/0); returns it.
    pub fn wait_js(&self, what: &str, script: &str, timeout: Duration) -> Value {
        self.wait_for(what, timeout, || {
            let v = self.exec(script, &[]);
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::String(s) => !s.is_empty(),
                Value::Number(n) => n.as_f64() != Some(0.0),
                _ => true,
            };
            truthy.then_some(v)
        })
    }

    /// The text of an open `alert()`, if any.
    pub fn alert_text(&self) -> Option<String> {
        self.try_cmd("GET", "/alert/text", None)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
    }

    /// Console messages of level SEVERE since the last call (JS errors, CSP violations, failed
    /// loads), as text.
    pub fn console_errors(&self) -> Vec<String> {
        self.try_cmd("POST", "/se/log", Some(json!({ "type": "browser" })))
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e["level"] == "SEVERE")
            .map(|e| e["message"].as_str().unwrap_or_default().to_owned())
            .collect()
    }

    /// Saves a PNG screenshot as `target/ui-screenshots/<name>.png` and returns its path.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let b64 = self.cmd("GET", "/screenshot", None);
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().expect("screenshot data"))
            .expect("screenshot base64");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
        std::fs::create_dir_all(&dir).expect("screenshot dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        path
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.http.delete(&self.session).send();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
