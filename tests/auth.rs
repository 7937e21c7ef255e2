//! Identity and access against the real binary: the credential × route matrix of every
//! workspace-scoped route, sender derivation (R5–R8), workspace isolation (invariant 10), browser
//! login / logout / rate limiting, first-run setup, API keys and security headers.
//!
//! Every refusal is followed by a check that nothing changed (the owner's view of the sessions,
//! agents and default alias, plus row counts read straight from the database).

mod common;

use std::collections::BTreeSet;
use std::io::{Seek, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD};
use common::*;
use reqwest::Method;
use reqwest::blocking::{Client, RequestBuilder};
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

const CLI_TIMEOUT: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(20);
const MEMBER_EMAIL: &str = "member@test.local";
const MEMBER_PASSWORD: &str = "member-password-456";
const STRANGER_EMAIL: &str = "stranger@test.local";
const STRANGER_PASSWORD: &str = "stranger-password-789";
const OTHER_WS: &str = "other";
const COOKIE: &str = "sessiond_session";

// ---------------------------------------------------------------------------------------------
// HTTP plumbing

/// A client that sends no credential unless told to (one pool for the whole file).
fn plain_client() -> Client {
    static CLIENT: LazyLock<Client> = LazyLock::new(|| {
        http_builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("http client")
    });
    CLIENT.clone()
}

#[derive(Debug)]
struct Resp {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| {
            panic!(
                "non-JSON body (status {}): {:?}",
                self.status,
                truncate(&self.text)
            )
        })
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    }
}

fn truncate(s: &str) -> String {
    s.chars().take(300).collect()
}

/// Sends; an event stream's body is not read (the response is dropped, closing the stream).
fn send(rb: RequestBuilder) -> Resp {
    let resp = rb.send().expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let streaming = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let text = if streaming {
        String::new()
    } else {
        resp.text().unwrap_or_default()
    };
    Resp {
        status,
        headers,
        text,
    }
}

/// Which credential a request carries.
#[derive(Debug, Clone)]
enum Cred {
    Anonymous,
    /// A raw `Authorization` header value.
    Authorization(String),
    /// The browser cookie with optional `Origin`, `Referer` and `Sec-Fetch-Site`.
    Cookie {
        value: String,
        origin: Option<String>,
        referer: Option<String>,
        fetch_site: Option<&'static str>,
    },
}

impl Cred {
    fn key(key: &str) -> Cred {
        Cred::Authorization(format!("Bearer {key}"))
    }

    fn cookie(value: &str, origin: Option<&str>) -> Cred {
        Cred::Cookie {
            value: value.to_owned(),
            origin: origin.map(str::to_owned),
            referer: None,
            fetch_site: None,
        }
    }

    fn apply(&self, mut rb: RequestBuilder) -> RequestBuilder {
        match self {
            Cred::Anonymous => rb,
            Cred::Authorization(v) => rb.header("authorization", v.as_str()),
            Cred::Cookie {
                value,
                origin,
                referer,
                fetch_site,
            } => {
                rb = rb.header("cookie", format!("{COOKIE}={value}"));
                if let Some(o) = origin {
                    rb = rb.header("origin", o.as_str());
                }
                if let Some(r) = referer {
                    rb = rb.header("referer", r.as_str());
                }
                if let Some(f) = fetch_site {
                    rb = rb.header("sec-fetch-site", *f);
                }
                rb
            }
        }
    }
}

fn get_as(base: &str, path: &str, cred: &Cred) -> Resp {
    send(cred.apply(plain_client().get(format!("{base}{path}"))))
}

fn post_as(base: &str, path: &str, body: &Value, cred: &Cred) -> Resp {
    send(cred.apply(plain_client().post(format!("{base}{path}")).json(body)))
}

fn assert_security_headers(h: &HeaderMap, what: &str) {
    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    assert_eq!(get("x-content-type-options"), "nosniff", "{what}: {h:?}");
    assert!(!get("referrer-policy").is_empty(), "{what}: {h:?}");
    assert_eq!(get("x-frame-options"), "DENY", "{what}: {h:?}");
    assert!(!get("content-security-policy").is_empty(), "{what}: {h:?}");
}

// ---------------------------------------------------------------------------------------------
// The CLI

fn cli_output(data_dir: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
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
    run_bounded(cmd, CLI_TIMEOUT)
}

fn cli(data_dir: &Path, args: &[&str]) -> String {
    cli_stdin(data_dir, args, None)
}

fn cli_stdin(data_dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = cli_output(data_dir, args, stdin);
    assert!(
        out.status.success(),
        "sessiond {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned()
}

/// Creates a person; returns their id.
fn create_user(dir: &Path, email: &str, password: &str, ws: &str, role: &str) -> String {
    let said = cli_stdin(
        dir,
        &[
            "user",
            "create",
            "--email",
            email,
            "--password-stdin",
            "--workspace",
            ws,
            "--role",
            role,
        ],
        Some(&format!("{password}\n")),
    );
    // `created EMAIL as ROLE of workspace WS (user ID)`
    said.rsplit_once("(user ")
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("user create said {said:?}"))
        .to_owned()
}

fn create_key(dir: &Path, email: &str, ws: &str, scopes: &[&str], name: &str) -> String {
    let mut args = vec![
        "token",
        "create",
        "--user",
        email,
        "--workspace",
        ws,
        "--name",
        name,
    ];
    for s in scopes {
        args.extend(["--scope", s]);
    }
    let key = cli(dir, &args);
    assert!(key.starts_with("sk_"), "not a key: {key:?}");
    key
}

fn create_app(dir: &Path, ws: &str, name: &str, scopes: &[&str]) -> String {
    let mut args = vec!["app", "create", "--workspace", ws, "--name", name];
    for s in scopes {
        args.extend(["--scope", s]);
    }
    let key = cli(dir, &args);
    assert!(key.starts_with("sk_"), "not a key: {key:?}");
    key
}

fn key_secret(key: &str) -> &str {
    &key[28..]
}

/// One line of `sessiond token list`, split on tabs.
fn token_list(dir: &Path) -> Vec<Vec<String>> {
    cli(dir, &["token", "list"])
        .lines()
        .map(|l| l.split('\t').map(str::to_owned).collect())
        .collect()
}

fn listed_key(dir: &Path, id: &str) -> Vec<String> {
    token_list(dir)
        .into_iter()
        .find(|cols| cols.first().map(String::as_str) == Some(id))
        .unwrap_or_else(|| panic!("key {id} not in token list"))
}

/// The app id behind an app key (the list shows the owner as `app:<id>`).
fn app_id_of(dir: &Path, key: &str) -> String {
    let cols = listed_key(dir, key_id(key));
    cols.iter()
        .find_map(|c| c.strip_prefix("app:"))
        .unwrap_or_else(|| panic!("no app owner in {cols:?}"))
        .to_owned()
}

// ---------------------------------------------------------------------------------------------
// Browser sign-in

fn login(base: &str, email: &str, password: &str) -> Resp {
    post_as(
        base,
        "/auth/login",
        &json!({"email": email, "password": password}),
        &Cred::Anonymous,
    )
}

/// A sign-in attempt from another loopback address (`127.0.0.N`), as a client elsewhere.
/// Sign-in throttling tests lengthen the first delay from 1 s to a minute: the delay runs from
/// the last failure, and on a loaded machine the next attempt (after an argon2 check) can take
/// longer than a second to arrive, which would make a 1 s window a race.
const LOGIN_DELAY_MINUTE: &str = "[limits]\nlogin_delay_ms = 60000\n";

fn login_from(base: &str, address: &str, email: &str, password: &str) -> Resp {
    let client = Client::builder()
        .timeout(Duration::from_secs(30))
        .local_address(address.parse::<std::net::IpAddr>().expect("address"))
        .build()
        .expect("http client");
    send(
        client
            .post(format!("{base}/auth/login"))
            .json(&json!({"email": email, "password": password})),
    )
}

/// The session cookie's value from a response's `Set-Cookie`.
fn cookie_value(r: &Resp) -> String {
    r.set_cookies()
        .iter()
        .find_map(|c| {
            c.split(';')
                .next()
                .and_then(|kv| kv.trim().strip_prefix(&format!("{COOKIE}=")))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no {COOKIE} cookie in {:?}", r.headers))
}

fn login_cookie(base: &str, email: &str, password: &str) -> String {
    let r = login(base, email, password);
    assert_eq!(r.status, 200, "login {email}: {}", r.text);
    let c = cookie_value(&r);
    assert!(!c.is_empty());
    c
}

/// The server's own origin (`http://127.0.0.1:PORT`).
fn origin(s: &Server) -> String {
    s.base.clone()
}

// ---------------------------------------------------------------------------------------------
// Routes

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum R {
    List,
    Create,
    CreateWait,
    Activity,
    Mint,
    Detail,
    Title,
    Delete,
    History,
    Events,
    Image,
    Message,
    MessageWait,
    Note,
    Answer,
    AnswerWait,
    Interrupt,
    Archive,
    Read,
    Child,
    ChildWait,
    Cwd,
    AgentsList,
    AgentCreate,
    AgentGet,
    AgentPatch,
    AgentDelete,
    DefaultGet,
    DefaultPut,
    DefaultHistory,
    DefaultMessage,
    DefaultMessageWait,
}

/// Every route of `src/api/mod.rs` under `/v1/ws/{workspaceSlug}`.
const ROUTES: [R; 32] = [
    R::List,
    R::Create,
    R::CreateWait,
    R::Activity,
    R::Mint,
    R::Detail,
    R::Title,
    R::Delete,
    R::History,
    R::Events,
    R::Image,
    R::Message,
    R::MessageWait,
    R::Note,
    R::Answer,
    R::AnswerWait,
    R::Interrupt,
    R::Archive,
    R::Read,
    R::Child,
    R::ChildWait,
    R::Cwd,
    R::AgentsList,
    R::AgentCreate,
    R::AgentGet,
    R::AgentPatch,
    R::AgentDelete,
    R::DefaultGet,
    R::DefaultPut,
    R::DefaultHistory,
    R::DefaultMessage,
    R::DefaultMessageWait,
];

/// Routes that address one session by id (through the Sessions API path).
const SESSION_ID_ROUTES: [R; 17] = [
    R::Detail,
    R::Title,
    R::Delete,
    R::History,
    R::Events,
    R::Image,
    R::Message,
    R::MessageWait,
    R::Note,
    R::Answer,
    R::AnswerWait,
    R::Interrupt,
    R::Archive,
    R::Read,
    R::Child,
    R::ChildWait,
    R::Cwd,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Read,
    Write,
    Files,
}

/// What the request addresses.
#[derive(Debug, Clone)]
struct Targets {
    /// An idle session.
    session: String,
    /// A session waiting for an answer.
    asking: String,
    image_session: String,
    image_id: String,
    /// An agent without sessions (get / patch / delete).
    agent: String,
    /// An agent whose default session is bound.
    default_agent: String,
    default_session: String,
}

fn spec(r: R, t: &Targets, n: usize) -> (Method, String, Option<Value>) {
    let ss = |rest: &str| format!("/agent/sessions{rest}");
    let s = &t.session;
    let a = &t.asking;
    let dflt = |rest: &str| format!("/agents/{}/sessions/default{rest}", t.default_agent);
    let prompt = |what: &str| json!({"prompt": format!("matrix {what} {n}")});
    // The `/wait` routes require a clientRequestId.
    let waiting =
        |what: &str| json!({"prompt": format!("matrix {what} {n}"), "clientRequestId": new_uuid()});
    match r {
        R::List => (Method::GET, ss(""), None),
        R::Create => (Method::POST, ss(""), Some(prompt("create"))),
        R::CreateWait => (Method::POST, ss("/wait"), Some(waiting("create wait"))),
        R::Activity => (Method::GET, ss("/activity"), None),
        R::Mint => (Method::POST, ss("/attachments/session"), Some(json!({}))),
        R::Detail => (Method::GET, ss(&format!("/{s}")), None),
        R::Title => (
            Method::PATCH,
            ss(&format!("/{s}")),
            Some(json!({"title": format!("renamed {n}")})),
        ),
        R::Delete => (Method::DELETE, ss(&format!("/{s}")), None),
        R::History => (Method::GET, ss(&format!("/{s}/history")), None),
        R::Events => (Method::GET, ss(&format!("/{s}/events")), None),
        R::Image => (
            Method::GET,
            ss(&format!("/{}/images/{}", t.image_session, t.image_id)),
            None,
        ),
        R::Message => (
            Method::POST,
            ss(&format!("/{s}/messages")),
            Some(prompt("message")),
        ),
        R::MessageWait => (
            Method::POST,
            ss(&format!("/{s}/messages/wait")),
            Some(waiting("message wait")),
        ),
        R::Note => (
            Method::POST,
            ss(&format!("/{s}/note")),
            Some(json!({"note": format!("matrix note {n}")})),
        ),
        R::Answer => (
            Method::POST,
            ss(&format!("/{a}/answer")),
            Some(json!({"answer": "Yes"})),
        ),
        R::AnswerWait => (
            Method::POST,
            ss(&format!("/{a}/answer/wait")),
            Some(json!({"answer": "Yes", "clientRequestId": new_uuid()})),
        ),
        R::Interrupt => (Method::POST, ss(&format!("/{s}/interrupt")), None),
        R::Archive => (
            Method::PUT,
            ss(&format!("/{s}/archive")),
            Some(json!({"archived": true})),
        ),
        R::Read => (
            Method::PUT,
            ss(&format!("/{s}/read")),
            Some(json!({"seq": 1_000_000})),
        ),
        R::Child => (
            Method::POST,
            ss(&format!("/{s}/sessions")),
            Some(prompt("child")),
        ),
        R::ChildWait => (
            Method::POST,
            ss(&format!("/{s}/sessions/wait")),
            Some(waiting("child wait")),
        ),
        R::Cwd => (
            Method::POST,
            ss(&format!("/{s}/cwd")),
            Some(json!({"cwd": "."})),
        ),
        R::AgentsList => (Method::GET, "/agents".into(), None),
        R::AgentCreate => (
            Method::POST,
            "/agents".into(),
            Some(json!({"slug": format!("matrix-agent-{n}")})),
        ),
        R::AgentGet => (Method::GET, format!("/agents/{}", t.agent), None),
        R::AgentPatch => (
            Method::PATCH,
            format!("/agents/{}", t.agent),
            Some(json!({"name": format!("Renamed {n}")})),
        ),
        R::AgentDelete => (Method::DELETE, format!("/agents/{}", t.agent), None),
        R::DefaultGet => (Method::GET, dflt(""), None),
        R::DefaultPut => (
            Method::PUT,
            dflt(""),
            Some(json!({"sessionId": t.default_session})),
        ),
        R::DefaultHistory => (Method::GET, dflt("/history"), None),
        R::DefaultMessage => (Method::POST, dflt("/messages"), Some(prompt("default"))),
        R::DefaultMessageWait => (
            Method::POST,
            dflt("/messages/wait"),
            Some(waiting("default wait")),
        ),
    }
}

fn need(r: R) -> Need {
    if r == R::Mint {
        Need::Files
    } else if spec_method(r) == Method::GET {
        Need::Read
    } else {
        Need::Write
    }
}

fn spec_method(r: R) -> Method {
    let t = Targets {
        session: "s".into(),
        asking: "a".into(),
        image_session: "i".into(),
        image_id: "x".into(),
        agent: "g".into(),
        default_agent: "d".into(),
        default_session: "ds".into(),
    };
    spec(r, &t, 0).0
}

fn is_unsafe(r: R) -> bool {
    spec_method(r) != Method::GET
}

fn call(base: &str, ws: &str, r: R, t: &Targets, n: usize, cred: &Cred) -> Resp {
    let (method, path, body) = spec(r, t, n);
    let mut rb = plain_client().request(method, format!("{base}/v1/ws/{ws}{path}"));
    if let Some(b) = body {
        rb = rb.json(&b);
    }
    send(cred.apply(rb))
}

// ---------------------------------------------------------------------------------------------
// Fixtures (made with the owner's key)

fn session_id_of(v: &Value) -> String {
    v["session"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| panic!("no sessionId in {v}"))
        .to_owned()
}

/// Waits until the session is quiet: no turn running and the automatic title settled.
fn settle(s: &Server, id: &str) {
    poll_until(&format!("session {id} to settle"), WAIT, || {
        let d = s.detail(id);
        let busy = d["turnStatus"] == "running"
            || d["titleStatus"] == "generating"
            || d["titleStatus"] == "pending";
        (!busy).then_some(())
    });
}

fn new_session(s: &Server, prompt: &str) -> String {
    s.create_prompt(prompt)
}

fn new_asking_session(s: &Server) -> String {
    let id = s.create_prompt("/ask Proceed? | Yes | No");
    let e = s.wait_terminal(&id, 0);
    assert_eq!(e["event"]["type"], "ask", "{e}");
    id
}

fn agents_path(ws: &str, rest: &str) -> String {
    format!("/v1/ws/{ws}/agents{rest}")
}

fn new_agent(s: &Server, slug: &str) -> String {
    let (status, v) = s.post(&s.url(&agents_path(WS, "")), &json!({ "slug": slug }));
    assert_eq!(status, 201, "create agent {slug}: {v}");
    slug.to_owned()
}

/// A session with an inline image; returns (session id, storage id).
fn new_image_session(s: &Server) -> (String, String) {
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(b"matrix image");
    let v = s.create(json!({
        "prompt": "look at this",
        "images": [{"data": B64.encode(&png), "mimeType": "image/png"}],
    }));
    let id = session_id_of(&v);
    let storage = s
        .history_all(&id)
        .iter()
        .find_map(|e| {
            e["event"]["images"][0]["storageId"]
                .as_str()
                .map(str::to_owned)
        })
        .expect("storageId");
    (id, storage)
}

fn shared_targets(s: &Server) -> Targets {
    let session = new_session(s, "matrix target");
    let asking = new_asking_session(s);
    let (image_session, image_id) = new_image_session(s);
    let agent = new_agent(s, "matrix-target");
    let default_agent = new_agent(s, "matrix-default");
    let (status, v) = s.post(
        &s.url(&agents_path(
            WS,
            "/matrix-default/sessions/default/messages",
        )),
        &json!({"prompt": "first default message"}),
    );
    assert_eq!(status, 200, "default message: {v}");
    let default_session = session_id_of(&v);
    for id in [&session, &image_session, &default_session] {
        s.wait_terminal(id, 0);
        settle(s, id);
    }
    settle(s, &asking);
    Targets {
        session,
        asking,
        image_session,
        image_id,
        agent,
        default_agent,
        default_session,
    }
}

/// Fresh targets for an allowed call that changes what it addresses.
fn fresh_targets(s: &Server, r: R, shared: &Targets, n: usize) -> Targets {
    let mut t = shared.clone();
    match r {
        R::Title
        | R::Delete
        | R::Message
        | R::MessageWait
        | R::Note
        | R::Interrupt
        | R::Archive
        | R::Read
        | R::Child
        | R::ChildWait
        | R::Cwd => t.session = new_session(s, &format!("fresh target {n}")),
        R::Answer | R::AnswerWait => t.asking = new_asking_session(s),
        R::AgentPatch | R::AgentDelete => t.agent = new_agent(s, &format!("fresh-agent-{n}")),
        _ => {}
    }
    t
}

// ---------------------------------------------------------------------------------------------
// "Nothing changed"

const COUNTED_TABLES: [&str; 16] = [
    "workspaces",
    "agents",
    "sessions",
    "events",
    "pending_inputs",
    "client_requests",
    "read_markers",
    "default_sessions",
    "images",
    "input_turns",
    "tasks",
    "upload_grants",
    "users",
    "memberships",
    "apps",
    "api_keys",
];

/// The rows a refused request must not change, as `(name, one SQL expression)`: the row counts
/// and the changeable columns of sessions, agents, read markers, default sessions and keys. In
/// SQL that SQLite and PostgreSQL read alike, so that one query reads them all on either backend.
fn db_state_terms() -> Vec<(String, String)> {
    let mut terms: Vec<(String, String)> = COUNTED_TABLES
        .iter()
        .map(|t| (t.to_string(), format!("(SELECT count(*) FROM {t})")))
        .collect();
    for (name, agg) in [
        (
            "sessionsUpdated",
            "string_agg(id || ':' || updated_at || ':' || last_event_seq || ':' || title || ':' || coalesce(CAST(archived_at AS TEXT), '') || ':' || coalesce(cwd, ''), ',' ORDER BY id) FROM sessions",
        ),
        (
            "agentRows",
            "string_agg(id || ':' || slug || ':' || name || ':' || anchor || ':' || engine, ',' ORDER BY id) FROM agents",
        ),
        (
            "readMarkers",
            "string_agg(session_pk || ':' || user_id || ':' || last_read_seq, ',' ORDER BY session_pk, user_id) FROM read_markers",
        ),
        (
            "defaults",
            "string_agg(agent_id || ':' || session_id, ',' ORDER BY agent_id) FROM default_sessions",
        ),
        (
            "revoked",
            "string_agg(id, ',' ORDER BY id) FROM api_keys WHERE revoked_at IS NOT NULL",
        ),
    ] {
        terms.push((name.into(), format!("(SELECT {agg})")));
    }
    terms
}

fn db_state(s: &Server) -> Value {
    static QUERY: std::sync::LazyLock<(Vec<String>, String)> = std::sync::LazyLock::new(|| {
        let terms = db_state_terms();
        let sql = terms
            .iter()
            .map(|(_, t)| t.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        (
            terms.into_iter().map(|(n, _)| n).collect(),
            format!("SELECT {sql}"),
        )
    });
    let (names, sql) = &*QUERY;
    let rows = s.db_rows(sql);
    let row = rows.first().unwrap_or_else(|| panic!("{sql}: no row"));
    let out: serde_json::Map<String, Value> = names
        .iter()
        .zip(row)
        .map(|(name, value)| (name.clone(), json!(value.clone().unwrap_or_default())))
        .collect();
    Value::Object(out)
}

/// Every session summary of a workspace as its owner sees it (archived or not).
fn all_summaries(s: &Server, ws: &str, key: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for archived in ["exclude", "only"] {
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/v1/ws/{ws}/agent/sessions?limit=100&archived={archived}");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={}", query_escape(c)));
            }
            let r = get_as(&s.base, &path, &Cred::key(key));
            assert_eq!(r.status, 200, "list {path}: {}", r.text);
            let v = r.json();
            out.extend(v["sessions"].as_array().expect("sessions").iter().cloned());
            match v["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
    }
    out
}

/// The owner's view of everything the matrix could touch, plus database row counts.
fn snapshot(s: &Server, t: &Targets) -> Value {
    let owner = Cred::key(&s.token);
    let read = |path: String| {
        let r = get_as(&s.base, &path, &owner);
        json!({"status": r.status, "body": r.text})
    };
    let detail = |id: &str| read(format!("/v1/ws/{WS}/agent/sessions/{id}"));
    json!({
        "sessions": all_summaries(s, WS, &s.token),
        "details": [
            detail(&t.session),
            detail(&t.asking),
            detail(&t.image_session),
            detail(&t.default_session),
        ],
        "agents": read(agents_path(WS, "")),
        "default": read(agents_path(WS, &format!("/{}/sessions/default", t.default_agent))),
        "db": db_state(s),
    })
}

/// The first differing leaf of two JSON values, for a readable failure.
fn first_diff(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                first_diff(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}/{k}"),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_diff(p, q, &format!("{path}/{i}"))),
        _ if a == b => None,
        _ => Some(format!(
            "{path}: {} -> {}",
            truncate(&a.to_string()),
            truncate(&b.to_string())
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The matrix

/// Expected outcome of a credential on a route: `Some(status)` refused, `None` allowed.
type Expect = fn(R) -> Option<u16>;

struct Case {
    name: &'static str,
    cred: Cred,
    expect: Expect,
}

fn error_code(status: u16) -> &'static str {
    match status {
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        _ => "?",
    }
}

/// Everyone the matrix needs, made with the CLI and the login route.
struct People {
    owner_cookie: String,
    member_key: String,
    app_key: String,
    read_only_key: String,
    files_only_key: String,
    sessions_only_key: String,
    revoked_key: String,
    other_ws_key: String,
    stranger_cookie: String,
    logged_out_cookie: String,
    upload_token: String,
}

fn make_people(s: &Server) -> People {
    let dir = s.data_dir.as_path();
    cli(dir, &["workspace", "create", OTHER_WS]);
    create_user(dir, MEMBER_EMAIL, MEMBER_PASSWORD, WS, "member");
    create_user(dir, STRANGER_EMAIL, STRANGER_PASSWORD, OTHER_WS, "member");
    let member_key = create_key(
        dir,
        MEMBER_EMAIL,
        WS,
        &["sessions", "files:write"],
        "member key",
    );
    let app_key = create_app(dir, WS, "matrix-app", &["sessions", "files:write"]);
    let read_only_key = create_key(dir, OWNER_EMAIL, WS, &["sessions:read"], "read only");
    let files_only_key = create_key(dir, OWNER_EMAIL, WS, &["files:write"], "files only");
    let sessions_only_key = create_key(dir, OWNER_EMAIL, WS, &["sessions"], "sessions only");
    let other_ws_key = create_key(
        dir,
        STRANGER_EMAIL,
        OTHER_WS,
        &["sessions", "files:write"],
        "other ws",
    );

    // A key that worked (and is cached by the server) and is then revoked by another process:
    // refused within the cache time.
    let revoked_key = create_key(
        dir,
        OWNER_EMAIL,
        WS,
        &["sessions", "files:write"],
        "revoked",
    );
    let list = format!("/v1/ws/{WS}/agent/sessions");
    assert_eq!(get_as(&s.base, &list, &Cred::key(&revoked_key)).status, 200);
    cli(dir, &["token", "revoke", key_id(&revoked_key)]);
    poll_until(
        "the revoked key to be refused",
        Duration::from_secs(6),
        || (get_as(&s.base, &list, &Cred::key(&revoked_key)).status == 401).then_some(()),
    );

    let owner_cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    let stranger_cookie = login_cookie(&s.base, STRANGER_EMAIL, STRANGER_PASSWORD);
    let logged_out_cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    let r = send(
        Cred::cookie(&logged_out_cookie, Some(&origin(s)))
            .apply(plain_client().post(s.url("/auth/logout"))),
    );
    assert_eq!(r.status, 200, "logout: {}", r.text);

    let (status, grant) = s.post(
        &s.sessions_url("/attachments/session"),
        &json!({"cwd": "."}),
    );
    assert_eq!(status, 200, "mint: {grant}");
    let upload_token = grant["uploadToken"].as_str().expect("token").to_owned();

    People {
        owner_cookie,
        member_key,
        app_key,
        read_only_key,
        files_only_key,
        sessions_only_key,
        revoked_key,
        other_ws_key,
        stranger_cookie,
        logged_out_cookie,
        upload_token,
    }
}

fn cases(s: &Server, p: &People) -> Vec<Case> {
    let same = origin(s);
    let host = s.base.trim_start_matches("http://").to_owned();
    let port = host.rsplit(':').next().unwrap_or("0").to_owned();
    let fake_secret = format!(
        "sk_{}_{}",
        key_id(&s.token),
        URL_SAFE_NO_PAD.encode([7u8; 32])
    );
    let cookie = |origin: Option<String>, referer: Option<String>, fetch: Option<&'static str>| {
        Cred::Cookie {
            value: p.owner_cookie.clone(),
            origin,
            referer,
            fetch_site: fetch,
        }
    };
    let refused_401: Expect = |_| Some(401);
    let refused_404: Expect = |_| Some(404);
    let allowed: Expect = |_| None;
    let unsafe_403: Expect = |r| is_unsafe(r).then_some(403);
    vec![
        // ---- refused: no valid credential (401)
        Case {
            name: "no credential",
            cred: Cred::Anonymous,
            expect: refused_401,
        },
        Case {
            name: "garbage bearer",
            cred: Cred::key("garbage"),
            expect: refused_401,
        },
        Case {
            name: "empty bearer",
            cred: Cred::Authorization("Bearer ".into()),
            expect: refused_401,
        },
        Case {
            name: "basic scheme",
            cred: Cred::Authorization("Basic b3duZXI6cGFzc3dvcmQ=".into()),
            expect: refused_401,
        },
        Case {
            name: "real key id with a wrong secret",
            cred: Cred::key(&fake_secret),
            expect: refused_401,
        },
        Case {
            name: "owner key without the Bearer scheme",
            cred: Cred::Authorization(s.token.clone()),
            expect: refused_401,
        },
        Case {
            name: "upload token as a bearer",
            cred: Cred::key(&p.upload_token),
            expect: refused_401,
        },
        Case {
            name: "revoked key",
            cred: Cred::key(&p.revoked_key),
            expect: refused_401,
        },
        Case {
            name: "logged-out cookie",
            cred: Cred::cookie(&p.logged_out_cookie, Some(&same)),
            expect: refused_401,
        },
        Case {
            name: "forged cookie",
            cred: Cred::cookie(&URL_SAFE_NO_PAD.encode([9u8; 32]), Some(&same)),
            expect: refused_401,
        },
        // ---- refused: workspace not visible (404)
        Case {
            name: "key of another workspace",
            cred: Cred::key(&p.other_ws_key),
            expect: refused_404,
        },
        Case {
            name: "cookie of a user outside the workspace",
            cred: Cred::cookie(&p.stranger_cookie, Some(&same)),
            expect: refused_404,
        },
        // ---- capabilities (403)
        Case {
            name: "read-only key",
            cred: Cred::key(&p.read_only_key),
            expect: |r| (need(r) != Need::Read).then_some(403),
        },
        Case {
            name: "files:write-only key",
            cred: Cred::key(&p.files_only_key),
            expect: |r| (need(r) != Need::Files).then_some(403),
        },
        Case {
            name: "sessions-only key",
            cred: Cred::key(&p.sessions_only_key),
            expect: |r| (need(r) == Need::Files).then_some(403),
        },
        // ---- cross-site protection of the cookie (403 on unsafe methods)
        Case {
            name: "cookie without Origin or Referer",
            cred: cookie(None, None, None),
            expect: unsafe_403,
        },
        Case {
            name: "cookie with a foreign Origin",
            cred: cookie(Some("https://evil.example".into()), None, None),
            expect: unsafe_403,
        },
        Case {
            name: "cookie with Origin null",
            cred: cookie(Some("null".into()), None, None),
            expect: unsafe_403,
        },
        Case {
            name: "cookie with Origin on another port",
            cred: cookie(
                Some(format!(
                    "http://127.0.0.1:{}",
                    port.parse::<u32>().unwrap_or(1) + 1
                )),
                None,
                None,
            ),
            expect: unsafe_403,
        },
        Case {
            name: "cookie with the same host and port over another scheme",
            cred: cookie(Some(format!("https://{host}")), None, None),
            expect: unsafe_403,
        },
        Case {
            name: "cookie with a Referer of the same host and port over another scheme",
            cred: cookie(None, Some(format!("https://{host}/ui/")), None),
            expect: unsafe_403,
        },
        Case {
            name: "cookie with Origin host as a prefix",
            cred: cookie(Some(format!("http://{host}.evil.example")), None, None),
            expect: unsafe_403,
        },
        Case {
            name: "cookie with a foreign Referer",
            cred: cookie(None, Some(format!("https://evil.example/{host}/")), None),
            expect: unsafe_403,
        },
        Case {
            name: "cookie with same Origin but Sec-Fetch-Site cross-site",
            cred: cookie(Some(same.clone()), None, Some("cross-site")),
            expect: unsafe_403,
        },
        // ---- allowed
        Case {
            name: "owner key",
            cred: Cred::key(&s.token),
            expect: allowed,
        },
        Case {
            name: "member's personal key",
            cred: Cred::key(&p.member_key),
            expect: allowed,
        },
        Case {
            name: "app key",
            cred: Cred::key(&p.app_key),
            expect: allowed,
        },
        Case {
            name: "cookie with same Origin",
            cred: cookie(Some(same.clone()), None, Some("same-origin")),
            expect: allowed,
        },
        Case {
            name: "cookie with same-origin Referer",
            cred: cookie(None, Some(format!("{same}/ui/app")), None),
            expect: allowed,
        },
    ]
}

/// One server; every route × every credential. Refusals must leave everything as it was.
#[test]
fn auth_matrix_every_route_every_credential() {
    let s = Server::start();
    let people = make_people(&s);
    let targets = shared_targets(&s);
    let cases = cases(&s, &people);
    let baseline = snapshot(&s, &targets);
    let mut failures = Vec::new();

    // Phase 1: refusals, all against the same quiet fixtures.
    let mut refusals = 0;
    for case in &cases {
        for (i, &r) in ROUTES.iter().enumerate() {
            let Some(want) = (case.expect)(r) else {
                continue;
            };
            refusals += 1;
            let resp = call(&s.base, WS, r, &targets, 90_000 + i, &case.cred);
            let label = format!("{:?} × {}", r, case.name);
            assert_security_headers(&resp.headers, &label);
            if resp.status != want {
                failures.push(format!(
                    "{label}: want {want}, got {} {}",
                    resp.status,
                    truncate(&resp.text)
                ));
            } else {
                let code = serde_json::from_str::<Value>(&resp.text)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_owned));
                if code.as_deref() != Some(error_code(want)) {
                    failures.push(format!(
                        "{label}: body should be {{error:{}}}, got {}",
                        error_code(want),
                        truncate(&resp.text)
                    ));
                }
                if want == 401
                    && !resp
                        .header("www-authenticate")
                        .is_some_and(|v| v.starts_with("Bearer"))
                {
                    failures.push(format!("{label}: 401 without WWW-Authenticate: Bearer"));
                }
            }
            // The database after every refusal (cheap) ...
            if let Some(d) = first_diff(&baseline["db"], &db_state(&s), "/db") {
                failures.push(format!("{label}: a refused request changed state: {d}"));
                // Stop here: every later comparison would differ too.
                assert_no_failures(&failures);
            }
        }
        // ... and the owner's view through the API after every credential.
        let now = snapshot(&s, &targets);
        if let Some(d) = first_diff(&baseline, &now, "") {
            failures.push(format!(
                "{}: a refused request changed what the owner sees: {d}",
                case.name
            ));
            assert_no_failures(&failures);
        }
    }
    assert!(refusals > 300, "only {refusals} refusals exercised");

    // Phase 2: allowed calls, each on fresh targets where it changes them.
    let mut n = 0;
    for case in &cases {
        for &r in &ROUTES {
            if (case.expect)(r).is_some() {
                continue;
            }
            n += 1;
            let t = fresh_targets(&s, r, &targets, n);
            let resp = call(&s.base, WS, r, &t, n, &case.cred);
            assert_security_headers(&resp.headers, &format!("{r:?}"));
            if !(200..300).contains(&resp.status) {
                failures.push(format!(
                    "{:?} × {} should be allowed, got {} {}",
                    r,
                    case.name,
                    resp.status,
                    truncate(&resp.text)
                ));
            }
        }
    }
    assert!(n > 150, "only {n} allowed calls exercised");
    assert_no_failures(&failures);
}

fn assert_no_failures(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} matrix failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The routes that need no credential, and the upload PUT that takes only its own token.
#[test]
fn only_the_public_surface_is_reachable_without_a_credential() {
    let s = Server::start();
    let anon = Cred::Anonymous;
    for path in [
        "/healthz",
        "/",
        "/setup",
        "/login",
        "/ui/app.css",
        "/auth/status",
    ] {
        let r = get_as(&s.base, path, &anon);
        assert_eq!(r.status, 200, "{path}: {}", truncate(&r.text));
    }
    let r = get_as(&s.base, "/auth/me", &anon);
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(r.header("www-authenticate").is_some());
    assert_eq!(r.json()["error"], "unauthorized");
    // Unknown workspaces answer like any unauthenticated request: nothing about existence.
    let r = get_as(&s.base, "/v1/ws/nope/agent/sessions", &anon);
    assert_eq!(r.status, 401, "{}", r.text);

    // The upload endpoint: only the grant's token, never an API key.
    let (status, grant) = s.post(
        &s.sessions_url("/attachments/session"),
        &json!({"cwd": "."}),
    );
    assert_eq!(status, 200, "{grant}");
    let url = s.url(&format!(
        "{}/hello.txt",
        grant["uploadPath"].as_str().unwrap()
    ));
    let put = |cred: &Cred, name: &str| {
        send(
            cred.apply(
                plain_client()
                    .put(url.replace("hello.txt", name))
                    .body("hello"),
            ),
        )
    };
    let r = put(&Cred::key(&s.token), "a.txt");
    assert_eq!(r.status, 401, "an API key on the upload PUT: {}", r.text);
    let r = put(&Cred::Anonymous, "b.txt");
    assert_eq!(r.status, 401, "{}", r.text);
    let cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    let r = put(&Cred::cookie(&cookie, Some(&origin(&s))), "c.txt");
    assert_eq!(r.status, 401, "a cookie on the upload PUT: {}", r.text);
    let r = put(&Cred::key(grant["uploadToken"].as_str().unwrap()), "d.txt");
    assert_eq!(r.status, 201, "{}", r.text);
    let uploads = s.data_dir.join("drive").join(WS).join("uploads");
    let names: BTreeSet<String> = std::fs::read_dir(&uploads)
        .expect("uploads folder")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    assert_eq!(names, BTreeSet::from(["d.txt".to_owned()]));
}

// ---------------------------------------------------------------------------------------------
// Sender derivation (R5–R8)

fn history_as(s: &Server, id: &str) -> Vec<Value> {
    s.history_all(id)
}

fn last_input_sender(s: &Server, id: &str, kind: &str) -> Value {
    history_as(s, id)
        .iter()
        .rev()
        .find(|e| e["event"]["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in {id}"))["event"]["sender"]
        .clone()
}

#[test]
fn the_sender_is_derived_from_the_credential_r5_r6_r7_r8() {
    let s = Server::start();
    let dir = s.data_dir.as_path();
    cli(dir, &["workspace", "create", OTHER_WS]);
    let member_id = create_user(dir, MEMBER_EMAIL, MEMBER_PASSWORD, WS, "member");
    create_user(dir, STRANGER_EMAIL, STRANGER_PASSWORD, OTHER_WS, "member");
    let member_key = create_key(dir, MEMBER_EMAIL, WS, &["sessions"], "member");
    let app_key = create_app(dir, WS, "sender-app", &["sessions"]);
    let app_id = app_id_of(dir, &app_key);
    let other_key = create_key(dir, STRANGER_EMAIL, OTHER_WS, &["sessions"], "other");
    let cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    let me = get_as(&s.base, "/auth/me", &Cred::cookie(&cookie, None)).json();
    let owner_id = me["user"]["id"].as_str().expect("owner id").to_owned();
    assert_ne!(owner_id, member_id);

    let id = s.create_prompt("sender target");
    s.wait_terminal(&id, 0);
    let source = s.create_prompt("the source session");
    let same_origin = Cred::cookie(&cookie, Some(&origin(&s)));
    let msg = |cred: &Cred, body: Value| {
        post_as(
            &s.base,
            &format!("/v1/ws/{WS}/agent/sessions/{id}/messages"),
            &body,
            cred,
        )
    };

    // The creator of a session is recorded as its credential's author too.
    let r = post_as(
        &s.base,
        &format!("/v1/ws/{WS}/agent/sessions"),
        &json!({"prompt": "made by the app", "sender": {"kind": "system"}, "sourceSessionId": source}),
        &Cred::key(&app_key),
    );
    assert!(
        r.status == 200 || r.status == 400,
        "create with authorship fields: {} {}",
        r.status,
        r.text
    );
    if r.status == 200 {
        let created = session_id_of(&r.json());
        assert_eq!(
            last_input_sender(&s, &created, "prompt_submitted"),
            json!({"kind": "app", "appId": app_id}),
            "R7: create takes no sourceSessionId; R5: no body field claims authorship"
        );
    }

    let cases: Vec<(&str, Cred, Value, Value)> = vec![
        (
            "personal key",
            Cred::key(&member_key),
            json!({"prompt": "from the member"}),
            json!({"kind": "user", "userId": member_id}),
        ),
        (
            "app key",
            Cred::key(&app_key),
            json!({"prompt": "from the app"}),
            json!({"kind": "app", "appId": app_id}),
        ),
        (
            "browser cookie",
            same_origin.clone(),
            json!({"prompt": "from the browser"}),
            json!({"kind": "user", "userId": owner_id}),
        ),
        (
            "a body claiming system authorship",
            Cred::key(&member_key),
            json!({"prompt": "I am the system", "sender": {"kind": "system"}}),
            json!({"kind": "user", "userId": member_id}),
        ),
        (
            "a body claiming another user",
            Cred::key(&app_key),
            json!({"prompt": "I am the owner", "sender": {"kind": "user", "userId": owner_id}, "userId": owner_id, "appId": "forged"}),
            json!({"kind": "app", "appId": app_id}),
        ),
        (
            "sourceSessionId of the same workspace",
            Cred::key(&member_key),
            json!({"prompt": "relayed", "sourceSessionId": source}),
            json!({"kind": "session", "sessionId": source}),
        ),
    ];
    for (what, cred, body, want) in cases {
        let r = msg(&cred, body);
        assert_eq!(r.status, 200, "{what}: {}", r.text);
        let got = last_input_sender(&s, &id, "prompt_submitted");
        assert_eq!(got, want, "{what}");
        s.wait_terminal(&id, s.detail(&id)["lastEventSeq"].as_u64().unwrap_or(0));
    }

    // Notes and answers too.
    let r = post_as(
        &s.base,
        &format!("/v1/ws/{WS}/agent/sessions/{id}/note"),
        &json!({"note": "an app note", "sender": {"kind": "system"}}),
        &Cred::key(&app_key),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        last_input_sender(&s, &id, "note_submitted"),
        json!({"kind": "app", "appId": app_id})
    );
    let r = post_as(
        &s.base,
        &format!("/v1/ws/{WS}/agent/sessions/{id}/note"),
        &json!({"note": "relayed note", "sourceSessionId": source}),
        &same_origin,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        last_input_sender(&s, &id, "note_submitted"),
        json!({"kind": "session", "sessionId": source})
    );
    let asking = new_asking_session(&s);
    let r = post_as(
        &s.base,
        &format!("/v1/ws/{WS}/agent/sessions/{asking}/answer"),
        &json!({"answer": "Yes", "sender": {"kind": "app", "appId": "forged"}}),
        &Cred::key(&member_key),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        last_input_sender(&s, &asking, "answer_submitted"),
        json!({"kind": "user", "userId": member_id})
    );

    // The default alias reuses the message shape, sourceSessionId included.
    let r = post_as(
        &s.base,
        &agents_path(WS, "/root/sessions/default/messages"),
        &json!({"prompt": "via the alias", "sourceSessionId": source}),
        &Cred::key(&app_key),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let dflt = r.json()["session"]["sessionId"]
        .as_str()
        .or(r.json()["sessionId"].as_str())
        .expect("default session id")
        .to_owned();
    assert_eq!(
        last_input_sender(&s, &dflt, "prompt_submitted"),
        json!({"kind": "session", "sessionId": source})
    );

    // R7: a source session of another workspace (or none at all) is 404 and writes nothing.
    let foreign = post_as(
        &s.base,
        &format!("/v1/ws/{OTHER_WS}/agent/sessions"),
        &json!({"prompt": "foreign source"}),
        &Cred::key(&other_key),
    );
    assert_eq!(foreign.status, 200, "{}", foreign.text);
    let foreign = session_id_of(&foreign.json());
    settle(&s, &id);
    settle(&s, &dflt);
    // A session that is still waiting for its answer.
    let asking = new_asking_session(&s);
    let before = (
        s.detail(&id),
        s.detail(&dflt),
        s.detail(&asking),
        db_state(&s),
    );
    for source in [foreign.as_str(), "nonexistent-session"] {
        let attempts: Vec<(String, Value)> = vec![
            (
                format!("/v1/ws/{WS}/agent/sessions/{id}/messages"),
                json!({"prompt": "spoofed", "sourceSessionId": source}),
            ),
            (
                format!("/v1/ws/{WS}/agent/sessions/{id}/messages/wait"),
                json!({"prompt": "spoofed", "sourceSessionId": source, "clientRequestId": new_uuid()}),
            ),
            (
                format!("/v1/ws/{WS}/agent/sessions/{id}/note"),
                json!({"note": "spoofed", "sourceSessionId": source}),
            ),
            (
                format!("/v1/ws/{WS}/agent/sessions/{asking}/answer"),
                json!({"answer": "No", "sourceSessionId": source}),
            ),
            (
                format!("/v1/ws/{WS}/agent/sessions/{asking}/answer/wait"),
                json!({"answer": "No", "sourceSessionId": source, "clientRequestId": new_uuid()}),
            ),
            (
                agents_path(WS, "/root/sessions/default/messages"),
                json!({"prompt": "spoofed", "sourceSessionId": source}),
            ),
            (
                agents_path(WS, "/root/sessions/default/messages/wait"),
                json!({"prompt": "spoofed", "sourceSessionId": source, "clientRequestId": new_uuid()}),
            ),
        ];
        for (path, body) in attempts {
            for cred in [Cred::key(&member_key), same_origin.clone()] {
                let r = post_as(&s.base, &path, &body, &cred);
                assert_eq!(r.status, 404, "{path} source {source}: {}", r.text);
                assert_eq!(r.json()["error"], "not_found", "{}", r.text);
            }
        }
    }
    let after = (
        s.detail(&id),
        s.detail(&dflt),
        s.detail(&asking),
        db_state(&s),
    );
    assert_eq!(before, after, "a refused sourceSessionId wrote something");
    // The foreign session saw nothing either.
    let r = get_as(
        &s.base,
        &format!("/v1/ws/{OTHER_WS}/agent/sessions/{foreign}/history"),
        &Cred::key(&other_key),
    );
    assert_eq!(r.status, 200);
    assert!(!r.text.contains("spoofed"), "{}", r.text);
}

// ---------------------------------------------------------------------------------------------
// Workspace isolation (invariant 10)

#[test]
fn workspaces_are_isolated_404_and_nothing_leaks_invariant_10() {
    let s = Server::start();
    let dir = s.data_dir.as_path();
    cli(dir, &["workspace", "create", OTHER_WS]);
    create_user(dir, STRANGER_EMAIL, STRANGER_PASSWORD, OTHER_WS, "member");
    let other_key = create_key(
        dir,
        STRANGER_EMAIL,
        OTHER_WS,
        &["sessions", "files:write"],
        "other",
    );
    let other = Cred::key(&other_key);
    let owner_cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    const WORD: &str = "zanzibarquokka";
    let crid = new_uuid();
    let o_create = |body: Value| {
        let r = post_as(
            &s.base,
            &format!("/v1/ws/{OTHER_WS}/agent/sessions"),
            &body,
            &other,
        );
        assert_eq!(r.status, 200, "{}", r.text);
        session_id_of(&r.json())
    };
    let o_wait = |id: &str, want: &str| {
        poll_until(&format!("{id} to reach {want}"), WAIT, || {
            let r = get_as(
                &s.base,
                &format!("/v1/ws/{OTHER_WS}/agent/sessions/{id}/history"),
                &other,
            );
            let v = r.json();
            let found = v["events"]
                .as_array()
                .is_some_and(|es| es.iter().any(|e| e["event"]["type"] == want));
            found.then_some(())
        });
    };
    let o_session =
        o_create(json!({"prompt": format!("secret {WORD} plans"), "clientRequestId": crid}));
    let o_asking = o_create(json!({"prompt": "/ask Secret question? | Yes | No"}));
    let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
    png.extend_from_slice(b"secret picture");
    let o_image = o_create(json!({
        "prompt": "secret image",
        "images": [{"data": B64.encode(&png), "mimeType": "image/png"}],
    }));
    o_wait(&o_session, "complete");
    o_wait(&o_asking, "ask");
    o_wait(&o_image, "complete");
    let image_id = get_as(
        &s.base,
        &format!("/v1/ws/{OTHER_WS}/agent/sessions/{o_image}/history"),
        &other,
    )
    .json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|e| {
            e["event"]["images"][0]["storageId"]
                .as_str()
                .map(str::to_owned)
        })
        .expect("storage id");
    let r = post_as(
        &s.base,
        &agents_path(OTHER_WS, ""),
        &json!({"slug": "secret-agent"}),
        &other,
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let r = post_as(
        &s.base,
        &agents_path(OTHER_WS, "/secret-agent/sessions/default/messages"),
        &json!({"prompt": format!("default {WORD}")}),
        &other,
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let o_default = session_id_of(&r.json());
    o_wait(&o_default, "complete");
    let other_root_agent = get_as(&s.base, &agents_path(OTHER_WS, "/root"), &other).json()["id"]
        .as_str()
        .expect("agent id")
        .to_owned();

    // Something of our own in `default`.
    let own = s.create_prompt("our own session");
    s.wait_terminal(&own, 0);
    for id in [&o_session, &o_image, &o_default] {
        poll_until("other's titles to settle", WAIT, || {
            let v = get_as(
                &s.base,
                &format!("/v1/ws/{OTHER_WS}/agent/sessions/{id}"),
                &other,
            )
            .json();
            (v["titleStatus"] != "generating" && v["titleStatus"] != "pending").then_some(())
        });
    }
    settle(&s, &own);

    let other_ids = [&o_session, &o_asking, &o_image, &o_default];
    let other_view = || {
        let mut v = Vec::new();
        for id in other_ids {
            v.push(
                get_as(
                    &s.base,
                    &format!("/v1/ws/{OTHER_WS}/agent/sessions/{id}"),
                    &other,
                )
                .text,
            );
            v.push(
                get_as(
                    &s.base,
                    &format!("/v1/ws/{OTHER_WS}/agent/sessions/{id}/history"),
                    &other,
                )
                .text,
            );
        }
        v.push(get_as(&s.base, &agents_path(OTHER_WS, ""), &other).text);
        (v, db_state(&s))
    };
    let before = other_view();

    // Every id-addressed route, through the default workspace, with the default's owner key and
    // the owner's browser cookie: 404.
    let t = Targets {
        session: o_session.clone(),
        asking: o_asking.clone(),
        image_session: o_image.clone(),
        image_id: image_id.clone(),
        agent: "secret-agent".into(),
        default_agent: "secret-agent".into(),
        default_session: o_default.clone(),
    };
    let creds = [
        Cred::key(&s.token),
        Cred::cookie(&owner_cookie, Some(&origin(&s))),
    ];
    let mut failures = Vec::new();
    let routes: Vec<R> = SESSION_ID_ROUTES
        .iter()
        .copied()
        .chain([
            R::AgentGet,
            R::AgentPatch,
            R::AgentDelete,
            R::DefaultGet,
            R::DefaultPut,
            R::DefaultHistory,
            R::DefaultMessage,
            R::DefaultMessageWait,
        ])
        .collect();
    for cred in &creds {
        for (i, &r) in routes.iter().enumerate() {
            let resp = call(&s.base, WS, r, &t, i, cred);
            if resp.status != 404 {
                failures.push(format!("{r:?} via {cred:?}: {} {}", resp.status, resp.text));
            }
            for id in other_ids {
                if resp.text.contains(id.as_str()) {
                    failures.push(format!("{r:?}: the 404 body names {id}"));
                }
            }
        }
        // Our own session, another workspace's image.
        let r = get_as(
            &s.base,
            &format!("/v1/ws/{WS}/agent/sessions/{own}/images/{image_id}"),
            cred,
        );
        if r.status != 404 {
            failures.push(format!(
                "foreign image through an own session: {}",
                r.status
            ));
        }
        // Binding our default alias to their session.
        let r = send(
            cred.apply(
                plain_client()
                    .put(s.url(&agents_path(WS, "/root/sessions/default")))
                    .json(&json!({"sessionId": o_session})),
            ),
        );
        if r.status != 404 {
            failures.push(format!(
                "default alias bound to a foreign session: {} {}",
                r.status, r.text
            ));
        }
        // And their workspace path directly: not visible.
        let r = get_as(
            &s.base,
            &format!("/v1/ws/{OTHER_WS}/agent/sessions/{o_session}"),
            cred,
        );
        if r.status != 404 {
            failures.push(format!("other workspace path: {} {}", r.status, r.text));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(
        before,
        other_view(),
        "a refused request changed the other workspace"
    );

    // Never listed, searched, in activity or in the agent list.
    let listed: Vec<Value> = all_summaries(&s, WS, &s.token);
    let listed_text = serde_json::to_string(&listed).unwrap();
    assert!(listed_text.contains(&own));
    let mut texts = vec![listed_text];
    for path in [
        format!("/v1/ws/{WS}/agent/sessions?search={WORD}"),
        format!("/v1/ws/{WS}/agent/sessions?search=secret"),
        format!("/v1/ws/{WS}/agent/sessions?agentId={other_root_agent}"),
        format!("/v1/ws/{WS}/agent/sessions/activity"),
        format!("/v1/ws/{WS}/agent/sessions/activity?limitPerAgent=100"),
        agents_path(WS, ""),
        agents_path(WS, "/root/sessions/default"),
        "/auth/me".to_owned(),
    ] {
        for cred in &creds {
            let r = get_as(&s.base, &path, cred);
            assert_eq!(r.status, 200, "{path}: {}", r.text);
            texts.push(r.text);
        }
    }
    let r = get_as(
        &s.base,
        &format!("/v1/ws/{WS}/agent/sessions?search={WORD}"),
        &Cred::key(&s.token),
    );
    assert_eq!(r.json()["sessions"], json!([]), "search leaks: {}", r.text);
    for text in &texts {
        for id in other_ids {
            assert!(!text.contains(id.as_str()), "{id} leaked into {text}");
        }
        assert!(!text.contains(WORD), "prompt text leaked into {text}");
        assert!(!text.contains("secret-agent"), "agent leaked into {text}");
        assert!(!text.contains(&other_root_agent), "agent id leaked: {text}");
    }

    // The event stream of their session, through our path: 404, no stream.
    for cred in &creds {
        let r = send(
            cred.apply(
                http_builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .unwrap()
                    .get(s.sessions_url(&format!("/{o_session}/events")))
                    .header("accept", "text/event-stream"),
            ),
        );
        assert_eq!(r.status, 404, "SSE across workspaces");
        assert!(!r.text.contains("data:"), "{}", r.text);
    }

    // clientRequestId is per workspace: the same id in `default` makes a new session of ours
    // and never replays theirs.
    let v = s.create(json!({"prompt": format!("secret {WORD} plans"), "clientRequestId": crid}));
    let mine = session_id_of(&v);
    assert_ne!(mine, o_session, "a replay across workspaces");
    assert!(!v.to_string().contains(&o_session));
    assert_eq!(v["snapshot"]["workspaceId"], s.detail(&own)["workspaceId"]);
}

// ---------------------------------------------------------------------------------------------
// Browser login

fn cookie_attributes(set_cookie: &str) -> Vec<String> {
    set_cookie
        .split(';')
        .skip(1)
        .map(|a| a.trim().to_ascii_lowercase())
        .collect()
}

#[test]
fn login_logout_cookie_attributes_and_rate_limit() {
    let s = Server::start_with_config(LOGIN_DELAY_MINUTE);
    let dir = s.data_dir.as_path();
    create_user(dir, MEMBER_EMAIL, MEMBER_PASSWORD, WS, "member");
    let wrong = "definitely-wrong-password-1";

    // Failures: the same answer whether or not the account exists.
    let r1 = login(&s.base, OWNER_EMAIL, wrong);
    assert_eq!(r1.status, 401, "{}", r1.text);
    let r2 = login(&s.base, "nobody@test.local", wrong);
    assert_eq!(r2.status, 401, "{}", r2.text);
    assert_eq!(
        r1.json(),
        r2.json(),
        "the body reveals whether the account exists"
    );
    assert_eq!(r1.json()["error"], "unauthorized");
    assert!(r1.set_cookies().is_empty() && r2.set_cookies().is_empty());
    assert_security_headers(&r1.headers, "failed login");
    // Malformed bodies are 400, never a session.
    let r = post_as(
        &s.base,
        "/auth/login",
        &json!({"email": OWNER_EMAIL}),
        &Cred::Anonymous,
    );
    assert_eq!(r.status, 400, "{}", r.text);

    // Success: an HttpOnly, SameSite=Lax session cookie for the whole site.
    let ok = login(&s.base, &OWNER_EMAIL.to_uppercase(), OWNER_PASSWORD);
    assert_eq!(ok.status, 200, "{}", ok.text);
    let set = ok.set_cookies();
    assert_eq!(set.len(), 1, "{set:?}");
    let attrs = cookie_attributes(&set[0]);
    assert!(attrs.contains(&"httponly".to_owned()), "{set:?}");
    assert!(attrs.contains(&"samesite=lax".to_owned()), "{set:?}");
    assert!(attrs.contains(&"path=/".to_owned()), "{set:?}");
    let cookie = cookie_value(&ok);
    assert!(
        URL_SAFE_NO_PAD
            .decode(&cookie)
            .map(|b| b.len())
            .unwrap_or(0)
            >= 16,
        "cookie value is not >= 128 random bits: {cookie}"
    );
    for text in [&ok.text, &set[0], &r1.text, &r2.text] {
        assert!(!text.contains(OWNER_PASSWORD), "password echoed: {text}");
        assert!(!text.contains(wrong), "password echoed: {text}");
    }
    let body = ok.json();
    assert_eq!(body["user"]["email"], OWNER_EMAIL);

    // Who am I: the user and their workspaces.
    let me = get_as(&s.base, "/auth/me", &Cred::cookie(&cookie, None));
    assert_eq!(me.status, 200, "{}", me.text);
    let me = me.json();
    assert_eq!(me["user"]["email"], OWNER_EMAIL);
    assert!(me["user"]["id"].as_str().is_some_and(|i| !i.is_empty()));
    assert_eq!(
        me["workspaces"],
        json!([{"slug": WS, "role": "owner"}]),
        "{me}"
    );
    assert!(!me.to_string().contains("password"), "{me}");
    let r = get_as(
        &s.base,
        &format!("/v1/ws/{WS}/agent/sessions"),
        &Cred::cookie(&cookie, None),
    );
    assert_eq!(r.status, 200, "{}", r.text);

    // Logout needs the same-origin proof too; then clears the cookie and ends the session.
    let logout = |cred: &Cred| send(cred.apply(plain_client().post(s.url("/auth/logout"))));
    let r = logout(&Cred::cookie(&cookie, None));
    assert_eq!(r.status, 403, "cross-site logout: {}", r.text);
    assert_eq!(
        get_as(&s.base, "/auth/me", &Cred::cookie(&cookie, None)).status,
        200
    );
    let r = logout(&Cred::cookie(&cookie, Some(&origin(&s))));
    assert_eq!(r.status, 200, "{}", r.text);
    let cleared = r.set_cookies();
    assert_eq!(cleared.len(), 1, "{cleared:?}");
    assert!(
        cleared[0].starts_with(&format!("{COOKIE}=;")),
        "{cleared:?}"
    );
    assert!(
        cookie_attributes(&cleared[0]).contains(&"max-age=0".to_owned()),
        "{cleared:?}"
    );
    let r = get_as(&s.base, "/auth/me", &Cred::cookie(&cookie, None));
    assert_eq!(r.status, 401, "old cookie after logout: {}", r.text);
    let r = get_as(
        &s.base,
        &format!("/v1/ws/{WS}/agent/sessions"),
        &Cred::cookie(&cookie, None),
    );
    assert_eq!(r.status, 401, "{}", r.text);

    // Throttling (auth::limiter): one address guessing one account has 5 free failures, then
    // must wait; spellings of the same account count for the same account.
    let upper = OWNER_EMAIL.to_uppercase();
    let padded = format!("  {OWNER_EMAIL} ");
    let guesser = "127.0.0.3";
    for i in 0..5 {
        let email = [OWNER_EMAIL, upper.as_str(), padded.as_str()][i % 3];
        let r = login_from(&s.base, guesser, email, wrong);
        assert_eq!(r.status, 401, "failure {i}: {}", r.text);
    }
    let r = login_from(&s.base, guesser, OWNER_EMAIL, wrong);
    assert_eq!(r.status, 429, "6th failure: {}", r.text);
    assert_eq!(r.json()["error"], "rate_limited");
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After seconds");
    assert!(
        (1..=60).contains(&retry),
        "a first delay, not a lock: {retry} s"
    );
    let r = login_from(&s.base, guesser, OWNER_EMAIL, OWNER_PASSWORD);
    assert_eq!(r.status, 429, "the guessing address waits too: {}", r.text);
    assert!(r.set_cookies().is_empty());
    // Wrong passwords from one address lock nobody out elsewhere: the owner signs in from
    // another address, and other accounts are unaffected.
    let r = login_from(&s.base, "127.0.0.4", OWNER_EMAIL, OWNER_PASSWORD);
    assert_eq!(r.status, 200, "the owner from another address: {}", r.text);
    let r = login(&s.base, MEMBER_EMAIL, MEMBER_PASSWORD);
    assert_eq!(r.status, 200, "another account: {}", r.text);
}

/// Failures from many addresses slow the account down for addresses it never signed in from,
/// but not for the one its owner uses.
#[test]
fn a_distributed_guess_slows_the_account_but_not_its_owner() {
    let s = Server::start_with_config(LOGIN_DELAY_MINUTE);
    let home = "127.0.0.2";
    assert_eq!(
        login_from(&s.base, home, OWNER_EMAIL, OWNER_PASSWORD).status,
        200
    );
    for i in 0..10 {
        let attacker = format!("127.0.1.{}", 10 + i / 2);
        let r = login_from(&s.base, &attacker, OWNER_EMAIL, "a-wrong-guess-000");
        assert_eq!(r.status, 401, "guess {i} from {attacker}: {}", r.text);
    }
    let r = login_from(&s.base, "127.0.2.1", OWNER_EMAIL, OWNER_PASSWORD);
    assert_eq!(r.status, 429, "a new address waits: {}", r.text);
    let retry: u64 = r
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After seconds");
    assert!((1..=60).contains(&retry), "a delay, not a lock: {retry} s");
    let r = login_from(&s.base, home, OWNER_EMAIL, OWNER_PASSWORD);
    assert_eq!(r.status, 200, "the owner's own address: {}", r.text);
}

/// The limit holds under concurrency: parallel guesses cannot all slip past the check before
/// any failure is counted.
#[test]
fn concurrent_login_failures_stay_within_the_account_limit() {
    let s = Server::start_with_config(LOGIN_DELAY_MINUTE);
    let base = s.base.clone();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..30)
            .map(|i| {
                let base = base.clone();
                scope
                    .spawn(move || login(&base, OWNER_EMAIL, &format!("wrong-guess-{i:04}")).status)
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    let verified = statuses.iter().filter(|&&st| st == 401).count();
    let limited = statuses.iter().filter(|&&st| st == 429).count();
    assert_eq!(verified + limited, 30, "{statuses:?}");
    assert!(
        verified <= 5,
        "{verified} password guesses from one address were checked for one account (5 are free): {statuses:?}"
    );
    assert_eq!(login(&base, OWNER_EMAIL, OWNER_PASSWORD).status, 429);
}

#[test]
fn login_failures_are_rate_limited_per_address() {
    let s = Server::start();
    let wrong = "wrong-password-for-all";
    let mut last = 0;
    let mut n = 0;
    // Distinct accounts so only the per-address limit can apply.
    while n < 150 {
        last = login(&s.base, &format!("nobody{n}@test.local"), wrong).status;
        n += 1;
        if last == 429 {
            break;
        }
        assert_eq!(last, 401);
    }
    assert_eq!(last, 429, "no per-address limit after {n} failures");
    assert!(
        n > 11,
        "limited after only {n} failures of distinct accounts"
    );
    let r = login(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(r.header("retry-after").is_some());
}

#[test]
fn first_run_setup_with_the_one_time_token() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    let srv = FreshServer::start(&dir, "warn");
    let token = srv.setup_token();
    assert!(
        URL_SAFE_NO_PAD.decode(&token).map(|b| b.len()).unwrap_or(0) >= 16,
        "setup token {token:?} is not >= 128 bits"
    );
    let base = srv.base.as_str();
    let status = || get_as(base, "/auth/status", &Cred::Anonymous).json()["setupRequired"].clone();
    assert_eq!(status(), json!(true));
    let email = "first@test.local";
    let password = "first-owner-password";
    let setup = |token: &str| {
        post_as(
            base,
            "/auth/setup",
            &json!({"token": token, "email": email, "password": password}),
            &Cred::Anonymous,
        )
    };
    let r = setup("wrong-token");
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(r.json()["error"], "forbidden");
    assert_eq!(
        status(),
        json!(true),
        "a wrong token must not consume setup"
    );
    // Nothing can be logged into yet.
    assert_eq!(login(base, email, password).status, 401);
    // A refused setup (weak password, bad email) does not use up the token.
    for body in [
        json!({"token": token, "email": email, "password": "short"}),
        json!({"token": token, "email": "not-an-email", "password": password}),
    ] {
        let r = post_as(base, "/auth/setup", &body, &Cred::Anonymous);
        assert_eq!(r.status, 400, "{}", r.text);
    }
    assert_eq!(status(), json!(true));

    let r = setup(&token);
    assert_eq!(r.status, 200, "{}", r.text);
    let cookie = cookie_value(&r);
    let set = r.set_cookies();
    let attrs = cookie_attributes(&set[0]);
    assert!(attrs.contains(&"httponly".to_owned()), "{set:?}");
    assert!(attrs.contains(&"samesite=lax".to_owned()), "{set:?}");
    assert!(!r.text.contains(password) && !set[0].contains(password));
    let me = get_as(base, "/auth/me", &Cred::cookie(&cookie, None)).json();
    assert_eq!(me["user"]["email"], email, "{me}");
    assert_eq!(
        me["workspaces"],
        json!([{"slug": WS, "role": "owner"}]),
        "{me}"
    );
    let r = get_as(
        base,
        &format!("/v1/ws/{WS}/agent/sessions"),
        &Cred::cookie(&cookie, None),
    );
    assert_eq!(r.status, 200, "{}", r.text);

    // The token is single-use, and setup is closed.
    let r = setup(&token);
    assert_eq!(r.status, 403, "reused token: {}", r.text);
    let r = post_as(
        base,
        "/auth/setup",
        &json!({"token": token, "email": "second@test.local", "password": password}),
        &Cred::Anonymous,
    );
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(status(), json!(false));
    assert_eq!(login(base, "second@test.local", password).status, 401);
    assert_eq!(login(base, email, password).status, 200);
}

#[test]
fn a_server_with_an_account_offers_no_setup() {
    let s = Server::start();
    let r = get_as(&s.base, "/auth/status", &Cred::Anonymous);
    assert_eq!(r.json()["setupRequired"], json!(false), "{}", r.text);
    let r = post_as(
        &s.base,
        "/auth/setup",
        &json!({"token": "", "email": "x@test.local", "password": "long-enough-password"}),
        &Cred::Anonymous,
    );
    assert_eq!(r.status, 403, "{}", r.text);
}

#[test]
fn the_log_never_contains_keys_or_passwords() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).expect("data dir");
    // The CLI below and the server share it (the PostgreSQL pass).
    let _database = database_for(&dir);
    create_user(&dir, OWNER_EMAIL, OWNER_PASSWORD, WS, "owner");
    let key = create_key(
        &dir,
        OWNER_EMAIL,
        WS,
        &["sessions", "files:write"],
        "log test",
    );
    let app_key = create_app(&dir, WS, "log-app", &["sessions"]);
    let mut srv = FreshServer::start(&dir, "debug");
    let base = srv.base.clone();
    let wrong_password = "wrong-password-xyzzy-42";
    let bad_key = format!("sk_{}_{}", key_id(&key), "BADSECRETbadsecret0123456789");
    let garbage_key = "sk_garbage_key_value_plugh";

    for _ in 0..12 {
        login(&base, OWNER_EMAIL, wrong_password);
    }
    login(&base, "nobody@test.local", wrong_password);
    let r = post_as(
        &base,
        "/auth/login",
        &json!({"email": 5, "password": wrong_password}),
        &Cred::Anonymous,
    );
    assert_eq!(r.status, 400);
    let list = format!("/v1/ws/{WS}/agent/sessions");
    for k in [bad_key.as_str(), garbage_key] {
        assert_eq!(get_as(&base, &list, &Cred::key(k)).status, 401);
    }
    assert_eq!(get_as(&base, &list, &Cred::key(&key)).status, 200);
    assert_eq!(get_as(&base, &list, &Cred::key(&app_key)).status, 200);
    let r = post_as(&base, &list, &json!({"prompt": "log me"}), &Cred::key(&key));
    assert_eq!(r.status, 200, "{}", r.text);
    let r = post_as(
        &base,
        &format!("{list}/attachments/session"),
        &json!({}),
        &Cred::key(&key),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let upload_token = r.json()["uploadToken"].as_str().unwrap().to_owned();
    let r = send(
        plain_client()
            .put(format!(
                "{base}{}/x.txt",
                r.json()["uploadPath"].as_str().unwrap()
            ))
            .header("authorization", format!("Bearer {upload_token}"))
            .body("x"),
    );
    assert_eq!(r.status, 201, "{}", r.text);
    let r = post_as(
        &base,
        "/auth/setup",
        &json!({"token": "guess", "email": "a@test.local", "password": wrong_password}),
        &Cred::Anonymous,
    );
    assert_eq!(r.status, 403);

    // The owner is locked out by now; a successful login of another account.
    create_user(&dir, MEMBER_EMAIL, MEMBER_PASSWORD, WS, "member");
    let cookie = login_cookie(&base, MEMBER_EMAIL, MEMBER_PASSWORD);
    assert_eq!(
        get_as(&base, &list, &Cred::cookie(&cookie, None)).status,
        200
    );
    let log = srv.stop();
    for (what, secret) in [
        ("owner password", OWNER_PASSWORD),
        ("member password", MEMBER_PASSWORD),
        ("wrong password", wrong_password),
        ("key", key.as_str()),
        ("key secret", key_secret(&key)),
        ("app key secret", key_secret(&app_key)),
        ("bad key secret", key_secret(&bad_key)),
        ("garbage key", garbage_key),
        ("upload token", upload_token.as_str()),
        ("cookie", cookie.as_str()),
    ] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(secret)).collect();
        assert!(
            lines.is_empty(),
            "the {what} appears in the server's stderr:\n{}",
            lines.join("\n")
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Keys

#[test]
fn keys_are_listed_without_secrets_random_and_revocable() {
    let s = Server::start();
    let dir = s.data_dir.as_path();
    let before_use = listed_key(dir, key_id(&s.token));
    let key = create_key(dir, OWNER_EMAIL, WS, &["sessions:read"], "reporting");
    let second = create_key(dir, OWNER_EMAIL, WS, &["sessions:read"], "reporting");
    assert_ne!(key, second);

    // Listed: id, name, created time; never the secret.
    let listing = cli(dir, &["token", "list"]);
    for k in [&s.token, &key, &second] {
        assert!(!listing.contains(key_secret(k)), "secret in {listing}");
        assert!(!listing.contains(k.as_str()), "key in {listing}");
    }
    let cols = listed_key(dir, key_id(&key));
    assert_eq!(cols[1], "reporting", "{cols:?}");
    let created = cols
        .iter()
        .find_map(|c| c.strip_prefix("created "))
        .unwrap_or_else(|| panic!("no created time in {cols:?}"));
    assert!(
        created.len() >= 20 && created.contains('T') && created.ends_with('Z'),
        "{created}"
    );
    assert!(cols.iter().any(|c| c == "last used never"), "{cols:?}");
    assert!(cols.iter().any(|c| c == "active"), "{cols:?}");
    assert!(cols.iter().any(|c| c == "sessions:read"), "{cols:?}");
    assert!(before_use.len() >= 8, "{before_use:?}");

    // Randomness: the secret part is >= 128 bits (here base64url of 32 bytes).
    for k in [&s.token, &key, &second] {
        let raw = URL_SAFE_NO_PAD
            .decode(key_secret(k))
            .unwrap_or_else(|e| panic!("secret of {k} is not base64url: {e}"));
        assert!(raw.len() >= 16, "{} bytes", raw.len());
        assert!(key_id(k).bytes().all(|b| b.is_ascii_hexdigit()));
    }
    // Only a hash is stored.
    let hash = s
        .db_value(&format!(
            "SELECT secret_hash FROM api_keys WHERE id = {}",
            sql_text(key_id(&key))
        ))
        .expect("key row");
    assert!(!hash.contains(key_secret(&key)));
    if !skip_on_postgres("the part that reads the bytes of sessiond.db and its WAL") {
        for name in ["sessiond.db", "sessiond.db-wal"] {
            let bytes = std::fs::read(s.data_dir.join(name)).unwrap_or_default();
            let text = String::from_utf8_lossy(&bytes);
            assert!(!text.contains(key_secret(&key)), "secret stored in {name}");
            assert!(!text.contains(OWNER_PASSWORD), "password stored in {name}");
        }
    }

    // After use, last used is set.
    let list = format!("/v1/ws/{WS}/agent/sessions");
    assert_eq!(get_as(&s.base, &list, &Cred::key(&key)).status, 200);
    poll_until("last used to be recorded", Duration::from_secs(10), || {
        let cols = listed_key(dir, key_id(&key));
        cols.iter()
            .any(|c| c.starts_with("last used ") && c != "last used never")
            .then_some(())
    });
    let cols = listed_key(dir, key_id(&second));
    assert!(cols.iter().any(|c| c == "last used never"), "{cols:?}");

    // Revocation by another process: refused within the key cache's 100 ms (measured closely
    // by `revocation_takes_effect_at_once_and_ends_open_streams`; here with a loose bound).
    assert_eq!(get_as(&s.base, &list, &Cred::key(&second)).status, 200);
    cli(dir, &["token", "revoke", key_id(&second)]);
    let revoked_at = Instant::now();
    poll_until("the revocation to apply", Duration::from_secs(10), || {
        (get_as(&s.base, &list, &Cred::key(&second)).status == 401).then_some(())
    });
    let took = revoked_at.elapsed();
    assert!(
        took < Duration::from_millis(3500),
        "revocation took {took:?}"
    );
    // And it stays refused.
    let r = get_as(&s.base, &list, &Cred::key(&second));
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(r.header("www-authenticate").is_some());
    let cols = listed_key(dir, key_id(&second));
    assert!(cols.iter().any(|c| c == "revoked"), "{cols:?}");
    // The other key is unaffected; revoking twice is an error.
    assert_eq!(get_as(&s.base, &list, &Cred::key(&key)).status, 200);
    let out = cli_output(dir, &["token", "revoke", key_id(&second)], None);
    assert!(!out.status.success());
}

// ---------------------------------------------------------------------------------------------
// Security headers

fn csp_directive<'a>(csp: &'a str, name: &str) -> Option<&'a str> {
    csp.split(';')
        .map(str::trim)
        .find(|d| d.split_whitespace().next() == Some(name))
}

#[test]
fn security_headers_on_api_errors_and_ui() {
    let s = Server::start();
    let key = Cred::key(&s.token);
    let id = s.create_prompt("headers");
    for (what, r) in [
        (
            "API list",
            get_as(&s.base, &format!("/v1/ws/{WS}/agent/sessions"), &key),
        ),
        (
            "API detail",
            get_as(&s.base, &format!("/v1/ws/{WS}/agent/sessions/{id}"), &key),
        ),
        (
            "unknown session",
            get_as(&s.base, &format!("/v1/ws/{WS}/agent/sessions/nope"), &key),
        ),
        (
            "unknown path",
            get_as(&s.base, "/no/such/path", &Cred::Anonymous),
        ),
        (
            "401",
            get_as(
                &s.base,
                &format!("/v1/ws/{WS}/agent/sessions"),
                &Cred::Anonymous,
            ),
        ),
        ("healthz", get_as(&s.base, "/healthz", &Cred::Anonymous)),
        (
            "auth status",
            get_as(&s.base, "/auth/status", &Cred::Anonymous),
        ),
        ("UI", get_as(&s.base, "/", &Cred::Anonymous)),
        ("UI asset", get_as(&s.base, "/ui/app.css", &Cred::Anonymous)),
    ] {
        assert_security_headers(&r.headers, what);
        if what == "unknown session" || what == "unknown path" {
            assert_eq!(r.status, 404, "{what}");
        }
    }
    let r = get_as(&s.base, "/", &Cred::Anonymous);
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .unwrap_or("")
            .starts_with("text/html"),
        "{:?}",
        r.headers
    );
    let csp = r.header("content-security-policy").expect("CSP");
    let script = csp_directive(csp, "script-src")
        .or_else(|| csp_directive(csp, "default-src"))
        .unwrap_or_else(|| panic!("no script policy in {csp}"));
    assert!(script.contains("'self'"), "{csp}");
    assert!(!script.contains("'unsafe-inline'"), "{csp}");
    assert!(!script.contains("'unsafe-eval'"), "{csp}");
    assert!(!script.contains('*'), "{csp}");
    assert!(
        csp_directive(csp, "frame-ancestors").is_some_and(|d| d.contains("'none'")),
        "{csp}"
    );
    // API responses are not documents.
    let r = get_as(&s.base, &format!("/v1/ws/{WS}/agent/sessions"), &key);
    let csp = r.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'"), "{csp}");
}

/// Revoking a key (here with the CLI, another process) refuses it on the next request and ends
/// the event streams opened with it (on both API families); signing out ends the browser session's streams.
#[test]
fn revocation_takes_effect_at_once_and_ends_open_streams() {
    let s = Server::start();
    let dir = s.data_dir.as_path();
    let key = create_key(dir, OWNER_EMAIL, WS, &["sessions"], "to revoke");
    let id = new_session(&s, "hello");
    let events = format!("/v1/ws/{WS}/agent/sessions/{id}/events");
    let hast = format!("/v2/sessions/{id}/events/stream?after=0");
    let stream_at = |path: &str, cred: &Cred| {
        let client = Client::builder().timeout(None).build().expect("client");
        let resp = cred
            .apply(client.get(s.url(path)))
            .header("accept", "text/event-stream")
            .send()
            .expect("SSE");
        assert_eq!(resp.status().as_u16(), 200);
        Sse::from_response(resp)
    };
    let stream_as = |cred: &Cred| stream_at(&events, cred);
    let stream = stream_as(&Cred::key(&key));
    assert!(
        stream.next_frame(Duration::from_secs(10)).is_some(),
        "backlog"
    );
    // The Task events API's stream of the same session, with the same key.
    let hast_stream = stream_at(&hast, &Cred::key(&key));
    assert!(
        hast_stream.next_frame(Duration::from_secs(10)).is_some(),
        "backlog"
    );
    let other = stream_as(&Cred::key(&s.token));

    // The key works and is cached by the server; then another process revokes it.
    let list = format!("/v1/ws/{WS}/agent/sessions");
    assert_eq!(get_as(&s.base, &list, &Cred::key(&key)).status, 200);
    cli(dir, &["token", "revoke", key_id(&key)]);
    let revoked = Instant::now();
    // Writes with the key stop at once: the first request after the revocation's cache time
    // (100 ms) is refused, and nothing the key sent after that was stored.
    let mut accepted_late = 0;
    loop {
        let sent = revoked.elapsed();
        let r = post_as(
            &s.base,
            &format!("/v1/ws/{WS}/agent/sessions/{id}/note"),
            &json!({"note": "after revoke"}),
            &Cred::key(&key),
        );
        if r.status == 401 {
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text);
        if sent > Duration::from_millis(150) {
            accepted_late += 1;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(5),
            "the revoked key still works"
        );
    }
    assert_eq!(
        accepted_late, 0,
        "writes sent more than 150 ms after the revocation were accepted"
    );
    // The stream opened with it ends; one of another key does not.
    assert!(
        stream.ends_within(Duration::from_secs(3)),
        "the revoked key's stream is still open"
    );
    assert!(
        hast_stream.ends_within(Duration::from_secs(3)),
        "the revoked key's /v2 stream is still open"
    );
    assert!(
        !other.ends_within(Duration::from_millis(300)),
        "another key's stream ended"
    );

    // Signing out ends the browser session's streams.
    let cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    let browser = stream_as(&Cred::cookie(&cookie, None));
    assert!(
        browser.next_frame(Duration::from_secs(10)).is_some(),
        "backlog"
    );
    let r = send(
        Cred::cookie(&cookie, Some(&origin(&s))).apply(plain_client().post(s.url("/auth/logout"))),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        browser.ends_within(Duration::from_secs(3)),
        "the signed-out session's stream is still open"
    );
}

/// Behind a TLS proxy (`public_url` is https), the cookie's unsafe requests must come from the
/// https origin: a plain-http page of the same host is cross-site.
#[test]
fn the_origin_check_compares_the_scheme_of_the_public_url() {
    let s = Server::start_with_config("public_url = \"https://sessions.example.test\"\n");
    let host = s.base.trim_start_matches("http://").to_owned();
    let cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    let id = new_session(&s, "hello");
    let note = format!("/v1/ws/{WS}/agent/sessions/{id}/note");
    let with_origin = |origin: &str| {
        post_as(
            &s.base,
            &note,
            &json!({"note": "n"}),
            &Cred::cookie(&cookie, Some(origin)),
        )
        .status
    };
    assert_eq!(with_origin("https://sessions.example.test"), 200);
    assert_eq!(with_origin(&format!("https://{host}")), 200);
    assert_eq!(with_origin(&format!("http://{host}")), 403);
    assert_eq!(with_origin("http://sessions.example.test"), 403);
}

/// A browser session's event streams end within a second of its end: when it is signed out, and
/// when it expires (`limits.browser_session_ms`), like the streams of a revoked API key.
#[test]
fn browser_session_streams_end_when_it_is_signed_out_or_expires() {
    const LIFETIME: Duration = Duration::from_secs(5);
    let s = Server::start_with_config(&format!(
        "[limits]\nbrowser_session_ms = {}\n",
        LIFETIME.as_millis()
    ));
    let id = new_session(&s, "hello");
    let events = format!("/v1/ws/{WS}/agent/sessions/{id}/events");
    let stream_as = |cookie: &str| {
        let client = Client::builder().timeout(None).build().expect("client");
        let resp = Cred::cookie(cookie, None)
            .apply(client.get(s.url(&events)))
            .header("accept", "text/event-stream")
            .send()
            .expect("SSE");
        assert_eq!(resp.status().as_u16(), 200);
        let sse = Sse::from_response(resp);
        assert!(sse.next_frame(Duration::from_secs(10)).is_some(), "backlog");
        sse
    };

    // Expiry: the session was made no later than the login's answer, so it has expired by
    // `LIFETIME` after it; its stream ends within a second of that.
    let cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    let expired_by = Instant::now() + LIFETIME;
    let expiring = stream_as(&cookie);
    assert!(
        !expiring.ends_within(Duration::from_secs(1)),
        "the stream ended long before its session expired"
    );
    let deadline = expired_by + Duration::from_secs(1);
    assert!(
        expiring.ends_within(deadline.saturating_duration_since(Instant::now())),
        "the expired session's stream is still open a second after its expiry"
    );
    let list = format!("/v1/ws/{WS}/agent/sessions");
    assert_eq!(
        get_as(&s.base, &list, &Cred::cookie(&cookie, None)).status,
        401
    );

    // Sign-out: its stream ends within a second; another session's stream stays open.
    let cookie = login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD);
    let signed_out = stream_as(&cookie);
    let other = stream_as(&login_cookie(&s.base, OWNER_EMAIL, OWNER_PASSWORD));
    let r = send(
        Cred::cookie(&cookie, Some(&origin(&s))).apply(plain_client().post(s.url("/auth/logout"))),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        signed_out.ends_within(Duration::from_secs(1)),
        "the signed-out session's stream is still open"
    );
    assert!(
        !other.ends_within(Duration::from_millis(300)),
        "another browser session's stream ended"
    );
}
