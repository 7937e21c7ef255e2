//! Test harness: starts the real `sessiond` binary on an ephemeral loopback port with a temporary
//! data dir and talks HTTP/SSE to it. Responses are checked against the seed JSON Schemas in
//! `schemas/`.
//!
//! The store is SQLite (`sessiond.db` in the data dir) unless `SESSIOND_TEST_BACKEND=postgres`
//! is set: then every server gets a PostgreSQL database of its own in the test cluster
//! (`postgres.rs`) and is started with `--database URL`, and so is every CLI command a test runs
//! on its data dir ([`database_args`]). Tests about the SQLite file itself skip themselves on
//! that pass with a notice ([`skip_on_postgres`]).
#![allow(dead_code)]

pub mod backend;
pub mod postgres;

pub use backend::{Backend, backend};

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::{Duration, Instant};

use reqwest::blocking::{Client, Response};
use serde_json::{Value, json};

pub const WS: &str = "default";

/// The databases of the data dirs whose servers run on PostgreSQL, while a server holds them.
static DATABASES: LazyLock<Mutex<HashMap<PathBuf, Weak<postgres::Database>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The PostgreSQL database of a server on `data_dir`, on the PostgreSQL pass: the one a server
/// there holds already (a restart), else a new one named after the running test. `None` on the
/// SQLite pass. The database lives while the caller keeps it.
pub fn database_for(data_dir: &Path) -> Option<Arc<postgres::Database>> {
    let mut map = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(db) = map.get(data_dir).and_then(Weak::upgrade) {
        return Some(db);
    }
    if backend() == Backend::Sqlite {
        return None;
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("server")
        .rsplit("::")
        .next()
        .unwrap_or("server")
        .to_owned();
    let db = postgres::database(&test).unwrap_or_else(|| {
        panic!("SESSIOND_TEST_BACKEND=postgres: no PostgreSQL server can run here (see the notice)")
    });
    let db = Arc::new(db);
    map.retain(|_, db| db.strong_count() > 0);
    map.insert(data_dir.to_owned(), Arc::downgrade(&db));
    // A key the CLI made for an earlier database of this data dir is not in this one.
    let _ = std::fs::remove_file(data_dir.with_extension("key"));
    Some(db)
}

/// Puts the servers started on `data_dir` (on either pass) on `db`: several processes that
/// share one database and one data dir, as a deployment behind a load balancer runs them.
pub fn share_database(data_dir: &Path, db: &Arc<postgres::Database>) {
    let mut map = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
    map.retain(|_, db| db.strong_count() > 0);
    map.insert(data_dir.to_owned(), Arc::downgrade(db));
    let _ = std::fs::remove_file(data_dir.with_extension("key"));
}

/// `--database URL` for a command on `data_dir` when a server there runs on PostgreSQL; nothing
/// on SQLite. Every CLI command a test runs on a server's data dir takes these.
pub fn database_args(data_dir: &Path) -> Vec<String> {
    let map = DATABASES.lock().unwrap_or_else(|e| e.into_inner());
    match map.get(data_dir).and_then(Weak::upgrade) {
        Some(db) => vec!["--database".into(), db.url.clone()],
        None => Vec::new(),
    }
}

/// For tests about the SQLite file itself (its WAL, `backup`, a full disk under the data dir,
/// opening `sessiond.db`): on the PostgreSQL pass, says that the running test is skipped and why,
/// past the test harness's capture so that it is seen, and returns true.
pub fn skip_on_postgres(why: &str) -> bool {
    if backend() == Backend::Sqlite {
        return false;
    }
    use std::io::Write;
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let _ = writeln!(
        std::io::stderr(),
        "notice: SKIPPED on PostgreSQL: {test}: {why}"
    );
    true
}

/// A running server. Killed (SIGKILL) when dropped; `stop` sends SIGTERM and waits.
pub struct Server {
    child: Option<Child>,
    pub base: String,
    /// `http://…/metrics` of the server's metrics listener.
    pub metrics_url: String,
    pub data_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub http: Client,
    /// The owner's API key (scopes `sessions` and `files:write` on workspace `default`), sent on
    /// every request of `http`.
    pub token: String,
    extra_args: Vec<String>,
    env: Vec<(String, Option<String>)>,
    /// Where the server's stderr (its log) goes, when captured.
    log: Option<PathBuf>,
    /// The server's PostgreSQL database (the PostgreSQL pass), kept across restarts.
    database: Option<Arc<postgres::Database>>,
    /// What the server printed on stdout (its start-up lines), as it prints it.
    stdout: Arc<Mutex<String>>,
}

/// Environment every test server starts with: the plain scripted engine (the tests pin its exact
/// replies) and none of the OpenAI variables or the database URL of the outer environment.
/// `start_with_env` overrides entries (`None` removes the variable).
const BASE_ENV: [(&str, Option<&str>); 6] = [
    ("SESSIOND_ENGINE", Some("scripted")),
    ("SESSIOND_DATABASE_URL", None),
    ("OPENAI_API_KEY", None),
    ("OPENAI_BASE_URL", None),
    ("OPENAI_MODEL", None),
    ("SESSIOND_LOG", Some("warn")),
];

/// Email and password of the owner every test server is bootstrapped with.
pub const OWNER_EMAIL: &str = "owner@test.local";
pub const OWNER_PASSWORD: &str = "test-password-123";

/// Creates the owner and an API key with the CLI (once per data dir and database) and returns
/// the key.
fn bootstrap_credentials(data_dir: &Path) -> String {
    let key_file = data_dir.with_extension("key");
    if let Ok(key) = std::fs::read_to_string(&key_file) {
        return key;
    }
    // The CLI works on an existing data dir only (`serve` is the one command that creates it).
    std::fs::create_dir_all(data_dir).expect("create data dir");
    let bin = env!("CARGO_BIN_EXE_sessiond");
    let mut user = Command::new(bin)
        .args([
            "user",
            "create",
            "--email",
            OWNER_EMAIL,
            "--password-stdin",
            "--data-dir",
        ])
        .arg(data_dir)
        .args(database_args(data_dir))
        .env("SESSIOND_LOG", "warn")
        .env_remove("SESSIOND_DATABASE_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn user create");
    {
        use std::io::Write;
        let mut stdin = user.stdin.take().expect("stdin");
        writeln!(stdin, "{OWNER_PASSWORD}").expect("password");
    }
    assert!(
        user.wait().expect("user create").success(),
        "user create failed"
    );
    let out = Command::new(bin)
        .args([
            "token",
            "create",
            "--user",
            OWNER_EMAIL,
            "--scope",
            "sessions",
            "--scope",
            "files:write",
            "--name",
            "tests",
            "--data-dir",
        ])
        .arg(data_dir)
        .args(database_args(data_dir))
        .env("SESSIOND_LOG", "warn")
        .env_remove("SESSIOND_DATABASE_URL")
        .output()
        .expect("token create");
    assert!(
        out.status.success(),
        "token create failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned();
    std::fs::write(&key_file, &key).expect("remember key");
    key
}

/// A blocking client builder. sessiond's reqwest has no built-in TLS provider, so the process
/// installs the server's (ring) before any client is built: build every test client from here.
pub fn http_builder() -> reqwest::blocking::ClientBuilder {
    sessiond::tls::install_provider();
    Client::builder()
}

fn client(token: &str) -> Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("header"),
    );
    http_builder()
        .default_headers(headers)
        .timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(64)
        .build()
        .expect("http client")
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts with extra command-line arguments (e.g. `["--config", path]`).
    pub fn start_with(args: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        let mut s = Server::spawn(
            &dir,
            args.iter().map(|s| s.to_string()).collect(),
            Vec::new(),
        );
        s._tmp = Some(tmp);
        s
    }

    /// Starts with a config file containing `toml`.
    pub fn start_with_config(toml: &str) -> Server {
        Server::start_with_env(Some(toml), &[])
    }

    /// Starts with an optional config file and changes to the base environment (`None` removes
    /// a variable), e.g. `SESSIOND_ENGINE` set to an engine's JSON.
    pub fn start_with_env(toml: Option<&str>, env: &[(&str, Option<&str>)]) -> Server {
        Server::start_in_tmp(toml, env, false)
    }

    /// Like `start_with_env`, with the server's log (stderr) written to a file: see [`Server::log`].
    pub fn start_logged(toml: Option<&str>, env: &[(&str, Option<&str>)]) -> Server {
        Server::start_in_tmp(toml, env, true)
    }

    fn start_in_tmp(toml: Option<&str>, env: &[(&str, Option<&str>)], logged: bool) -> Server {
        let tmp = tempfile::tempdir().expect("tempdir");
        let mut args = Vec::new();
        if let Some(toml) = toml {
            let cfg = tmp.path().join("sessiond.toml");
            std::fs::write(&cfg, toml).expect("write config");
            args = vec!["--config".into(), cfg.display().to_string()];
        }
        let dir = tmp.path().join("data");
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect();
        let log = logged.then(|| tmp.path().join("sessiond.log"));
        let mut s = Server::spawn_logged(&dir, args, env, log);
        s._tmp = Some(tmp);
        s
    }

    /// What the server logged so far (servers started with `start_logged`).
    pub fn log(&self) -> String {
        self.log
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    /// Starts on the data dir `data_dir` (created if missing), which the caller owns.
    pub fn start_in(data_dir: &Path, args: &[&str]) -> Server {
        Server::spawn(
            data_dir,
            args.iter().map(|s| s.to_string()).collect(),
            Vec::new(),
        )
    }

    /// Like `start_in`, with changes to the base environment and the server's log (stderr)
    /// written to `log`: see [`Server::log`].
    pub fn start_logged_in(data_dir: &Path, env: &[(&str, Option<&str>)], log: &Path) -> Server {
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect();
        Server::spawn_logged(data_dir, Vec::new(), env, Some(log.to_owned()))
    }

    /// The temporary folder the server's data dir (and config file) live in.
    pub fn tmp_dir(&self) -> &Path {
        self.data_dir.parent().expect("data dir has a parent")
    }

    fn spawn(
        data_dir: &Path,
        extra_args: Vec<String>,
        env: Vec<(String, Option<String>)>,
    ) -> Server {
        Server::spawn_logged(data_dir, extra_args, env, None)
    }

    fn spawn_logged(
        data_dir: &Path,
        extra_args: Vec<String>,
        env: Vec<(String, Option<String>)>,
        log: Option<PathBuf>,
    ) -> Server {
        // Any client a test builds after starting a server has the TLS provider it needs.
        sessiond::tls::install_provider();
        let database = database_for(data_dir);
        let token = bootstrap_credentials(data_dir);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessiond"));
        cmd.arg("serve")
            .arg("--bind")
            .arg("127.0.0.1:0")
            .arg("--metrics-bind")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .args(database_args(data_dir))
            .args(&extra_args);
        let overridden = |k: &str| env.iter().any(|(e, _)| e == k);
        for (k, v) in BASE_ENV.iter().filter(|(k, _)| !overridden(k)) {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        for (k, v) in &env {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        let stderr = match &log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("log file"),
            ),
            None => Stdio::inherit(),
        };
        cmd.stdout(Stdio::piped()).stderr(stderr);
        let mut child = cmd.spawn().expect("spawn sessiond");
        let stdout = child.stdout.take().expect("stdout");
        let mut reader = BufReader::new(stdout);
        let mut metrics_url = String::new();
        let base = loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("read a start-up line");
            if let Some(url) = line.trim().strip_prefix("sessiond metrics on ") {
                metrics_url = url.to_owned();
                continue;
            }
            break line
                .trim()
                .strip_prefix("sessiond listening on ")
                .unwrap_or_else(|| panic!("unexpected start-up line: {line:?}"))
                .to_owned();
        };
        // Keep reading stdout so the child never blocks on a full pipe.
        let stdout = Arc::new(Mutex::new(String::new()));
        let printed = Arc::clone(&stdout);
        std::thread::spawn(move || {
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                printed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_str(&line);
                line.clear();
            }
        });
        Server {
            child: Some(child),
            base,
            metrics_url,
            data_dir: data_dir.to_path_buf(),
            _tmp: None,
            http: client(&token),
            token,
            extra_args,
            env,
            log,
            database,
            stdout,
        }
    }

    /// The lines the server printed on stdout after `sessiond listening on …` so far.
    pub fn stdout(&self) -> String {
        self.stdout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The `--database` URL the server runs with (the PostgreSQL pass).
    pub fn database_url(&self) -> Option<&str> {
        self.database.as_ref().map(|db| db.url.as_str())
    }

    /// SIGKILL, then start again on the same data dir (new port).
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        let mut fresh = Server::spawn_logged(
            &self.data_dir.clone(),
            self.extra_args.clone(),
            self.env.clone(),
            self.log.clone(),
        );
        self.child = fresh.child.take();
        self.base = std::mem::take(&mut fresh.base);
        self.metrics_url = std::mem::take(&mut fresh.metrics_url);
        self.stdout = Arc::clone(&fresh.stdout);
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit; returns the exit status.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().expect("running");
        unsafe_sigterm(c.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = c.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("server did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Restarts after `stop`/`kill9` on the same data dir.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the server first");
        let mut fresh = Server::spawn(
            &self.data_dir.clone(),
            self.extra_args.clone(),
            self.env.clone(),
        );
        self.child = fresh.child.take();
        self.base = std::mem::take(&mut fresh.base);
        self.metrics_url = std::mem::take(&mut fresh.metrics_url);
        self.stdout = Arc::clone(&fresh.stdout);
    }

    /// The metrics exposition (Prometheus text format).
    pub fn metrics(&self) -> String {
        let resp = reqwest::blocking::get(&self.metrics_url).expect("GET /metrics");
        assert_eq!(resp.status().as_u16(), 200);
        resp.text().expect("metrics text")
    }

    /// The value of one sample, named with its labels exactly as exposed
    /// (`sessiond_turns_active`, `sessiond_turns_total{engine="scripted",outcome="failed"}`).
    pub fn metric(&self, sample: &str) -> Option<f64> {
        self.metrics().lines().find_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            (name == sample).then(|| value.parse().ok())?
        })
    }

    /// Waits until the runner has nothing to do: no turn running, none waiting for a slot, no
    /// input stored and not yet taken. From then on nothing is written to a session unless a
    /// client writes or a sleep's wake comes due, so a test can check that something did *not*
    /// happen without waiting an arbitrary time for it.
    pub fn wait_runner_idle(&self) {
        poll_until("the runner idle", Duration::from_secs(30), || {
            let m = self.metrics();
            let value = |name: &str| {
                m.lines().find_map(|l| {
                    let (n, v) = l.rsplit_once(' ')?;
                    (n == name).then(|| v.parse::<f64>().ok())?
                })
            };
            let idle = [
                "sessiond_turns_active",
                "sessiond_sessions_waiting_for_slot",
                "sessiond_inputs_queued",
            ]
            .iter()
            .all(|name| value(name) == Some(0.0));
            idle.then_some(())
        });
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// `/v1/ws/default/agent/sessions{rest}`
    pub fn sessions_url(&self, rest: &str) -> String {
        format!("{}/v1/ws/{WS}/agent/sessions{rest}", self.base)
    }

    pub fn get(&self, url: &str) -> (u16, Value) {
        into_json(self.http.get(url).send().expect("GET"))
    }

    pub fn post(&self, url: &str, body: &Value) -> (u16, Value) {
        into_json(self.http.post(url).json(body).send().expect("POST"))
    }

    pub fn post_raw(&self, url: &str, body: impl Into<reqwest::blocking::Body>) -> (u16, Value) {
        into_json(
            self.http
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .expect("POST"),
        )
    }

    pub fn put(&self, url: &str, body: &Value) -> (u16, Value) {
        into_json(self.http.put(url).json(body).send().expect("PUT"))
    }

    pub fn patch(&self, url: &str, body: &Value) -> (u16, Value) {
        into_json(self.http.patch(url).json(body).send().expect("PATCH"))
    }

    pub fn delete(&self, url: &str) -> (u16, Value) {
        into_json(self.http.delete(url).send().expect("DELETE"))
    }

    /// Creates a session and returns the full CreateSessionResponse (asserting 200).
    pub fn create(&self, body: Value) -> Value {
        let (status, v) = self.post(&self.sessions_url(""), &body);
        assert_eq!(status, 200, "create failed: {v}");
        v
    }

    /// Creates a session from a prompt and returns its id.
    pub fn create_prompt(&self, prompt: &str) -> String {
        let v = self.create(json!({ "prompt": prompt }));
        v["session"]["sessionId"]
            .as_str()
            .expect("sessionId")
            .to_owned()
    }

    /// Creates an agent platform task named `name` for agent `agent` (a name) and cancels it;
    /// returns its id, which is its session's: a session that takes no more input.
    pub fn cancelled_task(&self, agent: &str, name: &str) -> String {
        let (status, v) = self.post(
            &self.url(&format!("/agentex/agents/name/{agent}/rpc")),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create", "params": {"name": name}}),
        );
        assert_eq!(status, 200, "{v}");
        let id = v["result"]["id"].as_str().expect("task id").to_owned();
        let (status, v) = self.post(
            &self.url(&format!("/agentex/tasks/{id}/cancel")),
            &json!({}),
        );
        assert_eq!(status, 200, "{v}");
        id
    }

    /// Every stored event of a session (walks history forward).
    pub fn history_all(&self, session_id: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (status, page) = self.get(
                &self.sessions_url(&format!("/{session_id}/history?cursor={cursor}&limit=500")),
            );
            assert_eq!(status, 200, "history failed: {page}");
            let events = page["events"].as_array().expect("events").clone();
            out.extend(events);
            match page.get("nextCursor").and_then(Value::as_u64) {
                Some(next) => cursor = next,
                None => return out,
            }
        }
    }

    /// Polls history until an event of one of `types` appears at or after `from_seq`; returns it.
    pub fn wait_for_event(
        &self,
        session_id: &str,
        types: &[&str],
        from_seq: u64,
        timeout: Duration,
    ) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let events = self.history_all(session_id);
            if let Some(e) = events.iter().find(|e| {
                e["seq"].as_u64().unwrap_or(0) >= from_seq
                    && types.contains(&e["event"]["type"].as_str().unwrap_or(""))
            }) {
                return e.clone();
            }
            if Instant::now() > deadline {
                panic!(
                    "no {types:?} event in session {session_id} after seq {from_seq}: {events:#?}"
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the next terminal event (complete, ask, interrupted, sleep) at or after `from_seq`.
    pub fn wait_terminal(&self, session_id: &str, from_seq: u64) -> Value {
        self.wait_for_event(
            session_id,
            &["complete", "ask", "interrupted", "sleep"],
            from_seq,
            Duration::from_secs(20),
        )
    }

    pub fn detail(&self, session_id: &str) -> Value {
        let (status, v) = self.get(&self.sessions_url(&format!("/{session_id}")));
        assert_eq!(status, 200, "detail failed: {v}");
        v
    }

    /// Opens the SSE stream of a session.
    pub fn sse(&self, session_id: &str, since: Option<u64>, last_event_id: Option<u64>) -> Sse {
        let mut url = self.sessions_url(&format!("/{session_id}/events"));
        if let Some(s) = since {
            url.push_str(&format!("?since={s}"));
        }
        self.sse_at(&url, last_event_id)
    }

    /// Opens an SSE stream at `url` with the owner's key.
    pub fn sse_at(&self, url: &str, last_event_id: Option<u64>) -> Sse {
        let mut req = http_builder()
            .timeout(None)
            .build()
            .expect("client")
            .get(url)
            .header("authorization", format!("Bearer {}", self.token))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().expect("SSE connect");
        Sse::new(resp)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill9();
    }
}

fn unsafe_sigterm(pid: u32) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status();
}

pub fn into_json(resp: Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let text = resp.text().unwrap_or_default();
    let v = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("non-JSON body (status {status}): {text}"))
    };
    (status, v)
}

/// One SSE message.
#[derive(Debug, Clone)]
pub struct SseFrame {
    pub id: Option<u64>,
    /// The `event:` field (the HAST type on `/v2` streams).
    pub event: Option<String>,
    pub data: Value,
}

/// A blocking SSE reader. Frames are parsed on a background thread; `next` waits with a timeout.
pub struct Sse {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    rx: std::sync::mpsc::Receiver<SseItem>,
}

#[derive(Debug)]
pub enum SseItem {
    Frame(SseFrame),
    Comment(String),
    End,
}

impl Sse {
    /// Reads the event stream of an already sent request (any credential).
    pub fn from_response(resp: Response) -> Sse {
        Sse::new(resp)
    }

    fn new(resp: Response) -> Sse {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let reader = BufReader::new(resp);
            let mut id = None;
            let mut event = None;
            let mut data = String::new();
            for line in reader.lines() {
                let Ok(line) = line else { break };
                if line.is_empty() {
                    if !data.is_empty() {
                        let v: Value = serde_json::from_str(&data).expect("SSE data is JSON");
                        let frame = SseFrame {
                            id,
                            event: event.take(),
                            data: v,
                        };
                        if tx.send(SseItem::Frame(frame)).is_err() {
                            return;
                        }
                    }
                    id = None;
                    event = None;
                    data.clear();
                } else if let Some(c) = line.strip_prefix(':') {
                    let _ = tx.send(SseItem::Comment(c.trim().to_owned()));
                } else if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse().ok();
                } else if let Some(v) = line.strip_prefix("event:") {
                    event = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            let _ = tx.send(SseItem::End);
        });
        Sse {
            status,
            headers,
            rx,
        }
    }

    /// The next data frame (skipping comments), or `None` on timeout/end.
    pub fn next_frame(&self, timeout: Duration) -> Option<SseFrame> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.rx.recv_timeout(left) {
                Ok(SseItem::Frame(f)) => return Some(f),
                Ok(SseItem::Comment(_)) => continue,
                Ok(SseItem::End) | Err(_) => return None,
            }
        }
    }

    /// The next item of any kind (frame, comment or end).
    pub fn next_item(&self, timeout: Duration) -> Option<SseItem> {
        self.rx.recv_timeout(timeout).ok()
    }

    /// Waits until the stream ends (the server closed it), skipping what it still sends; false
    /// when it is still open after `timeout`.
    pub fn ends_within(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return false;
            };
            match self.rx.recv_timeout(left) {
                Ok(SseItem::End) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return true;
                }
                Ok(_) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => return false,
            }
        }
    }

    /// Reads frames until one carries a terminal event; returns all frames read.
    pub fn until_terminal(&self, timeout: Duration) -> Vec<SseFrame> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::new();
        while let Some(f) = self.next_frame(deadline.saturating_duration_since(Instant::now())) {
            let t = f.data["event"]["type"].as_str().unwrap_or("").to_owned();
            out.push(f);
            if matches!(t.as_str(), "complete" | "ask" | "interrupted" | "sleep") {
                return out;
            }
        }
        panic!("no terminal within {timeout:?}; got {out:#?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Seed schemas

fn schema_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

static VALIDATORS: LazyLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn validator_for_value(key: &str, schema: &Value) -> &'static jsonschema::Validator {
    let mut map = VALIDATORS.lock().unwrap();
    if let Some(v) = map.get(key) {
        return v;
    }
    let v: &'static jsonschema::Validator = Box::leak(Box::new(
        jsonschema::validator_for(schema).expect("schema compiles"),
    ));
    map.insert(key.to_owned(), v);
    v
}

/// The `metadata.code` values of `system` events sessiond adds to the seed's (README, "System
/// event codes"): the seed schemas are widened by exactly these.
pub const SYSTEM_CODE_EXTENSIONS: [&str; 3] = ["usage_estimated", "partial_text_void", "forked"];

/// Adds [`SYSTEM_CODE_EXTENSIONS`] to every enum of system event codes in `schema`.
fn widen_system_codes(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            if let Some(Value::Array(values)) = map.get_mut("enum")
                && values.iter().any(|v| v == "runner_exited")
            {
                values.extend(SYSTEM_CODE_EXTENSIONS.iter().map(|c| json!(c)));
            }
            map.values_mut().for_each(widen_system_codes);
        }
        Value::Array(items) => items.iter_mut().for_each(widen_system_codes),
        _ => {}
    }
}

pub fn load_schema(rel: &str) -> Value {
    let path = schema_dir().join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut schema = serde_json::from_str(&text).expect("schema JSON");
    widen_system_codes(&mut schema);
    schema
}

/// Asserts `instance` validates against `schemas/sessions/<file>` (e.g.
/// `GET_v1_ws__workspaceSlug__agent_sessions.response.json`).
pub fn assert_schema(file: &str, instance: &Value) {
    let rel = format!("sessions/{file}");
    let schema = load_schema(&rel);
    let v = validator_for_value(&rel, &schema);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{file}: {errors:#?}\ninstance: {instance:#}"
    );
}

/// The `KnownSessionEvent` branch of the seed's event union (without the `UnknownEvent` fallback,
/// which would accept anything with a string `type`).
fn known_event_schema() -> Value {
    let history = load_schema(
        "sessions/GET_v1_ws__workspaceSlug__agent_sessions__sessionId__history.response.json",
    );
    history["properties"]["events"]["items"]["properties"]["event"]["anyOf"][0].clone()
}

/// Asserts an event is a *known* seed event variant (strict: no fallback to `UnknownEvent`).
pub fn assert_known_event(event: &Value) {
    let schema = known_event_schema();
    let v = validator_for_value("#known-event", &schema);
    let errors: Vec<String> = v.iter_errors(event).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "event is not a known seed variant: {errors:#?}\n{event:#}"
    );
}

/// `(role, content)` of chat messages (text contents; others as empty).
pub fn roles_and_contents(messages: &[Value]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or("").to_owned(),
                m["content"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

pub fn event_types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["event"]["type"].as_str().unwrap_or("?").to_owned())
        .collect()
}

pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

// ---------------------------------------------------------------------------------------------
// Generic helpers added for tests/sessions_api.rs

impl Server {
    /// GET returning the status, the headers and the raw body (for non-JSON bodies such as images).
    pub fn get_bytes(&self, url: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
        let resp = self.http.get(url).send().expect("GET");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp.bytes().expect("body").to_vec();
        (status, headers, body)
    }
}

/// True when `CI` is set: a test whose dependency is missing fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// A small tmpfs mounted for one test (root only), unmounted when dropped. `None` (with a notice)
/// when it cannot be mounted outside CI; in CI that is a failure.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Tmpfs { dir }),
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_owned(),
                    Err(e) => e.to_string(),
                };
                assert!(!in_ci(), "cannot mount a tmpfs (CI runs as root): {why}");
                eprintln!("SKIPPED: cannot mount a tmpfs (needs root): {why}");
                None
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the filesystem: writes zeros to `name` until the disk refuses more.
    pub fn fill(&self, name: &str) -> PathBuf {
        use std::io::Write;
        let path = self.dir.path().join(name);
        let mut f = std::fs::File::create(&path).expect("filler");
        let block = vec![0u8; 64 * 1024];
        loop {
            match f.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(28) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        // A partial last block: fill the remaining bytes one at a time.
        while let Ok(1..) = f.write(&[0u8]) {}
        path
    }

    /// Remounts read-only (or read-write again).
    pub fn remount(&self, read_only: bool) {
        let mode = if read_only {
            "remount,ro"
        } else {
            "remount,rw"
        };
        let st = Command::new("mount")
            .args(["-o", mode])
            .arg(self.dir.path())
            .status()
            .expect("mount");
        assert!(st.success(), "mount -o {mode} failed");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Calls `f` every 20 ms until it returns `Some`; panics with `what` after `timeout`.
pub fn poll_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Percent-encodes a query-string value (everything but RFC 3986 unreserved characters).
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Process and database helpers (robustness / CLI tests)

/// A `sessiond` command with the environment cleared of sessiond's own variables, so the outer
/// environment cannot change what a test runs.
pub fn sessiond_command() -> Command {
    sessiond::tls::install_provider();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sessiond"));
    cmd.env_remove("SESSIOND_CONFIG")
        .env_remove("SESSIOND_DATA_DIR")
        .env_remove("SESSIOND_BIND")
        .env_remove("SESSIOND_DATABASE_URL")
        .env("SESSIOND_ENGINE", "scripted")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("OPENAI_MODEL")
        .env("SESSIOND_LOG", "warn")
        .stdin(Stdio::null());
    cmd
}

/// Runs the CLI on a data dir (and its server's database), with `stdin` if given, and fails
/// unless it succeeds; returns what it printed, trimmed.
pub fn cli(data_dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::{Seek, Write};
    let mut cmd = sessiond_command();
    cmd.args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .args(database_args(data_dir));
    if let Some(input) = stdin {
        let mut f = tempfile::tempfile().expect("temp file");
        f.write_all(input.as_bytes()).expect("write stdin");
        f.rewind().expect("rewind");
        cmd.stdin(Stdio::from(f));
    }
    let out = run_bounded(cmd, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "sessiond {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned()
}

/// A second workspace `slug` with one person of `role` in it (made with the CLI on the server's
/// data dir), and that person's API key with the `sessions` scope: what isolation tests act as.
pub fn workspace_member_key(data_dir: &Path, slug: &str, role: &str) -> String {
    cli(data_dir, &["workspace", "create", slug], None);
    member_key(data_dir, slug, role)
}

/// A person of `role` added to the existing workspace `slug` (with the CLI on the server's data
/// dir, as `<role>@<slug>.test.local`), and that person's API key with the `sessions` scope.
pub fn member_key(data_dir: &Path, slug: &str, role: &str) -> String {
    let email = format!("{role}@{slug}.test.local");
    cli(
        data_dir,
        &[
            "user",
            "create",
            "--email",
            &email,
            "--password-stdin",
            "--workspace",
            slug,
            "--role",
            role,
        ],
        Some("another-password-123\n"),
    );
    cli(
        data_dir,
        &[
            "token",
            "create",
            "--user",
            &email,
            "--workspace",
            slug,
            "--name",
            slug,
            "--scope",
            "sessions",
        ],
        None,
    )
}

/// Runs `cmd` to completion, killing it (and failing) if it takes longer than `timeout`.
/// Waits for `child` to exit, killing it (and failing, naming `what`) if it runs past `timeout`.
pub fn wait_bounded(child: &mut Child, timeout: Duration, what: &str) -> std::process::ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("command did not finish within {timeout:?}: {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn run_bounded(mut cmd: Command, timeout: Duration) -> std::process::Output {
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn command");
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = out.read_to_end(&mut b);
        b
    });
    let err_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = err.read_to_end(&mut b);
        b
    });
    let status = wait_bounded(&mut child, timeout, &format!("{cmd:?}"));
    std::process::Output {
        status,
        stdout: out_t.join().unwrap_or_default(),
        stderr: err_t.join().unwrap_or_default(),
    }
}

/// Opens a sessiond database read-only (safe while the server runs: WAL readers never block it).
pub fn open_db_readonly(path: &Path) -> rusqlite::Connection {
    let conn =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    conn.busy_timeout(Duration::from_secs(10))
        .expect("busy_timeout");
    conn
}

/// `SELECT count(*) FROM <table>`.
pub fn count_rows(conn: &rusqlite::Connection, table: &str) -> i64 {
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap_or_else(|e| panic!("count {table}: {e}"))
}

/// `text` as an SQL string literal, the same for SQLite and PostgreSQL.
pub fn sql_text(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A row as the tests compare rows of either backend: each value as text (`None` for NULL),
/// integers in decimal, blobs as PostgreSQL prints them (`\x` and hex).
pub type DbRow = Vec<Option<String>>;

/// The rows of `sql` on an SQLite connection, as [`DbRow`]s.
fn sqlite_rows(conn: &rusqlite::Connection, sql: &str) -> Vec<DbRow> {
    use rusqlite::types::ValueRef;
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let columns = stmt.column_count();
    let rows = stmt
        .query_map([], |r| {
            (0..columns)
                .map(|i| {
                    Ok(match r.get_ref(i)? {
                        ValueRef::Null => None,
                        ValueRef::Integer(n) => Some(n.to_string()),
                        ValueRef::Real(x) => Some(x.to_string()),
                        ValueRef::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
                        ValueRef::Blob(b) => Some(format!("\\x{}", sessiond::secret::hex(b))),
                    })
                })
                .collect::<rusqlite::Result<DbRow>>()
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.collect::<rusqlite::Result<_>>()
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

impl Server {
    /// The rows of `sql` — a query that SQLite and PostgreSQL read alike — on this server's
    /// database, whichever backend it runs on (safe while it serves).
    pub fn db_rows(&self, sql: &str) -> Vec<DbRow> {
        match &self.database {
            Some(db) => db.rows(sql),
            None => sqlite_rows(&open_db_readonly(&self.data_dir.join("sessiond.db")), sql),
        }
    }

    /// The one value of a one-row, one-column query (see [`Server::db_rows`]).
    pub fn db_value(&self, sql: &str) -> Option<String> {
        let rows = self.db_rows(sql);
        assert_eq!(rows.len(), 1, "{sql}: {rows:?}");
        assert_eq!(rows[0].len(), 1, "{sql}: {rows:?}");
        rows[0][0].clone()
    }

    /// `SELECT count(*) FROM <table>` on this server's database.
    pub fn db_count(&self, table: &str) -> i64 {
        let sql = format!("SELECT count(*) FROM {table}");
        let n = self.db_value(&sql).unwrap_or_default();
        n.parse().unwrap_or_else(|e| panic!("{sql}: {n:?}: {e}"))
    }

    /// Runs `sql` — statements that SQLite and PostgreSQL run alike — on this server's database,
    /// for a test that changes it behind the server's back (while it is stopped).
    pub fn db_execute(&self, sql: &str) {
        match &self.database {
            Some(db) => {
                db.psql(sql);
            }
            None => {
                let conn = rusqlite::Connection::open(self.data_dir.join("sessiond.db"))
                    .unwrap_or_else(|e| panic!("open {}: {e}", self.data_dir.display()));
                conn.execute_batch(sql)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Batch event check (tests/sessions_api.rs)

/// `assert_known_event` for many events, loading the seed schema once instead of once per event.
pub fn assert_known_events<'a>(events: impl IntoIterator<Item = &'a Value>) {
    let schema = known_event_schema();
    let v = validator_for_value("#known-event", &schema);
    for event in events {
        let errors: Vec<String> = v.iter_errors(event).map(|e| e.to_string()).collect();
        assert!(
            errors.is_empty(),
            "event is not a known seed variant: {errors:#?}\n{event:#}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Checked calls shared by the API test files: each asserts the status and the seed schema.

const SCHEMA_CREATE: &str = "POST_v1_ws__workspaceSlug__agent_sessions.response.json";
const SCHEMA_CHILD: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__sessions.response.json";
const SCHEMA_DETAIL: &str = "GET_v1_ws__workspaceSlug__agent_sessions__sessionId_.response.json";
const SCHEMA_HISTORY: &str =
    "GET_v1_ws__workspaceSlug__agent_sessions__sessionId__history.response.json";

/// The session id of a `CreateSessionResponse`.
pub fn id_of(create_response: &Value) -> String {
    create_response["session"]["sessionId"]
        .as_str()
        .expect("session.sessionId")
        .to_owned()
}

/// A `HistoryPage`: the seed schema, and every event a known variant.
pub fn check_history_page(page: &Value) {
    assert_schema(SCHEMA_HISTORY, page);
    assert_known_events(
        page["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| &e["event"]),
    );
}

/// Every event of a session, walking history forward `page` events at a time, each page checked
/// with [`check_history_page`].
pub fn history_checked(s: &Server, id: &str, page: u32) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (status, body) =
            s.get(&s.sessions_url(&format!("/{id}/history?cursor={cursor}&limit={page}")));
        assert_eq!(status, 200, "{body}");
        check_history_page(&body);
        out.extend(body["events"].as_array().expect("events").iter().cloned());
        match body.get("nextCursor").and_then(Value::as_u64) {
            Some(next) => cursor = next,
            None => return out,
        }
    }
}

/// `POST …/agent/sessions`: 200, the response, its snapshot and its history page valid.
pub fn create_checked(s: &Server, body: Value) -> Value {
    let (status, v) = s.post(&s.sessions_url(""), &body);
    assert_eq!(status, 200, "create {body}: {v}");
    assert_schema(SCHEMA_CREATE, &v);
    assert_schema(SCHEMA_DETAIL, &v["snapshot"]);
    check_history_page(&v["history"]);
    v
}

/// `POST …/{parent}/sessions`: 200, the response, its snapshot and its history page valid.
pub fn create_child_checked(s: &Server, parent: &str, body: Value) -> Value {
    let (status, v) = s.post(&s.sessions_url(&format!("/{parent}/sessions")), &body);
    assert_eq!(status, 200, "child create {body}: {v}");
    assert_schema(SCHEMA_CHILD, &v);
    assert_schema(SCHEMA_DETAIL, &v["snapshot"]);
    check_history_page(&v["history"]);
    v
}

/// `GET …/{id}`: 200 and a valid `SessionDetail`.
pub fn detail_checked(s: &Server, id: &str) -> Value {
    let v = s.detail(id);
    assert_schema(SCHEMA_DETAIL, &v);
    v
}

// ---------------------------------------------------------------------------------------------
// A server on a data dir of its own making: no account, no API key (first-run setup), its stdout
// lines readable and its stderr kept.

/// A `sessiond serve` started on `data_dir` as a new user would start it: nothing bootstrapped,
/// so it prints a setup link while no account exists. SIGKILLed when dropped. On the PostgreSQL
/// pass it runs on the data dir's database ([`database_for`]: the one the test's CLI commands on
/// that data dir used, or the one of the server before it there).
pub struct FreshServer {
    child: Option<Child>,
    pub base: String,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
    _database: Option<Arc<postgres::Database>>,
}

impl FreshServer {
    pub fn start(data_dir: &Path, log: &str) -> FreshServer {
        let database = database_for(data_dir);
        let mut cmd = sessiond_command();
        cmd.arg("serve")
            .arg("--bind")
            .arg("127.0.0.1:0")
            .arg("--data-dir")
            .arg(data_dir)
            .args(database_args(data_dir))
            .env("SESSIOND_LOG", log)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn sessiond");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let log = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = stderr.read_to_end(&mut all);
            all
        });
        let mut own = FreshServer {
            child: Some(child),
            base: String::new(),
            lines,
            stderr: Some(log),
            _database: database,
        };
        let first = own.line();
        own.base = first
            .strip_prefix("sessiond listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        own
    }

    pub fn line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("a line on stdout within 30 s")
    }

    /// The next stdout line that starts with `prefix` (skipping others, such as the data dir).
    pub fn line_starting(&self, prefix: &str) -> String {
        loop {
            let line = self.line();
            if line.starts_with(prefix) {
                return line;
            }
        }
    }

    /// The token of the setup link the server printed at start (`…/setup#<token>`, on this
    /// server's own address).
    pub fn setup_token(&self) -> String {
        let line = self.line_starting("no account yet");
        line.strip_prefix("no account yet: open ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|url| url.split_once("/setup#"))
            .map(|(base, token)| {
                assert_eq!(base, self.base, "{line}");
                token.to_owned()
            })
            .unwrap_or_else(|| panic!("unexpected setup line {line:?}"))
    }

    /// SIGTERM, bounded wait; returns everything written to stderr.
    pub fn stop(&mut self) -> String {
        let mut c = self.child.take().expect("running");
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(c.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = c.kill();
                panic!("server did not stop within 30 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // The pipe is closed now: the reader ends.
        let log = self.stderr.take().expect("stderr reader").join();
        String::from_utf8_lossy(&log.expect("stderr reader")).into_owned()
    }
}

impl Drop for FreshServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Stored events as the Sessions API returns them (`{seq, event: {type, ...}, ...}`).

/// The event types that end a turn.
pub const TERMINALS: [&str; 4] = ["complete", "ask", "interrupted", "sleep"];

/// A stored event's `seq`.
pub fn seq(e: &Value) -> u64 {
    e["seq"].as_u64().expect("seq")
}

/// A stored event's `event.type` (`?` when it has none).
pub fn etype(e: &Value) -> &str {
    e["event"]["type"].as_str().unwrap_or("?")
}

/// The stored events of type `t`.
pub fn of_type<'a>(events: &'a [Value], t: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| etype(e) == t).collect()
}

/// Whether a stored event ends a turn.
pub fn is_terminal(e: &Value) -> bool {
    TERMINALS.contains(&etype(e))
}

/// Waits for the first event of one of `types` with `seq > from`. Polling reads only the events
/// after `from` and validates only the page that holds the match (whole histories are validated
/// with [`check_events`]).
pub fn wait_event(s: &Server, id: &str, types: &[&str], from: u64) -> Value {
    poll_until(
        &format!("{types:?} after seq {from} in {id}"),
        Duration::from_secs(20),
        || {
            let (status, page) =
                s.get(&s.sessions_url(&format!("/{id}/history?cursor={from}&limit=500")));
            assert_eq!(status, 200, "history {id}: {page}");
            let found = page["events"]
                .as_array()
                .expect("events")
                .iter()
                .find(|e| types.contains(&etype(e)))
                .cloned();
            if found.is_some() {
                check_history_page(&page);
            }
            found
        },
    )
}

/// The first terminal after `from`, validated.
pub fn wait_terminal(s: &Server, id: &str, from: u64) -> Value {
    let t = wait_event(s, id, &TERMINALS, from);
    assert_known_event(&t["event"]);
    t
}

/// The session's last event seq, from its (validated) detail.
pub fn last_seq(s: &Server, id: &str) -> u64 {
    detail_checked(s, id)["lastEventSeq"]
        .as_u64()
        .expect("lastEventSeq")
}

// ---------------------------------------------------------------------------------------------
// Errors and credentials.

/// An error answer: `want_status` with the error code `code`.
pub fn assert_error(status: u16, body: &Value, want_status: u16, code: &str) {
    assert_eq!(status, want_status, "unexpected status; body: {body}");
    assert_eq!(body["error"], code, "unexpected error code; body: {body}");
}

/// A 400 `invalid_request`.
pub fn assert_invalid(status: u16, body: &Value) {
    assert_error(status, body, 400, "invalid_request");
}

/// The id part of an API key (`sk_<id>_<secret>`).
pub fn key_id(key: &str) -> &str {
    &key[3..27]
}
