//! What every sessiond process of one database must see alike, checked over HTTP against the real
//! server: the sign-in throttle's counts, the one-time setup links, and revocation of API keys and
//! browser sessions within `auth::REVOCATION_BOUND` (1 s), open event streams included.
//!
//! The tests speak to "the processes of one database" through [`Processes`] (and
//! [`FreshProcesses`] before any account exists). A SQLite database is served by one process at a
//! time, so there the next process is the same data dir served again after a restart: what one
//! process stored is all the next one has, which is exactly what a second process of a shared
//! database has. A revocation made elsewhere is made by the CLI, a second process writing the same
//! database while the server runs. With several processes serving one PostgreSQL database at once,
//! `next` moves on to the next of them, `all` lists them, and the same tests check the property
//! among live processes.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use reqwest::blocking::{Client, RequestBuilder};
use serde_json::{Value, json};

/// `auth::REVOCATION_BOUND`: how soon a revocation made anywhere applies everywhere.
const BOUND: Duration = Duration::from_secs(1);
const COOKIE: &str = "sessiond_session";
/// The sign-in throttle's first delay lengthened from 1 s to a minute: the delay runs from the
/// last failure, and on a loaded machine a 1 s window could pass between two attempts.
const LOGIN_DELAY_MINUTE: &str = "[limits]\nlogin_delay_ms = 60000\n";
const MEMBER_EMAIL: &str = "member@test.local";
const MEMBER_PASSWORD: &str = "member-password-456";

// ---------------------------------------------------------------------------------------------
// The processes of one database

/// The processes serving one database, with an owner account and its API key.
struct Processes {
    current: Server,
}

impl Processes {
    fn start(config: &str) -> Processes {
        Processes {
            current: Server::start_with_config(config),
        }
    }

    /// The process requests go to now.
    fn now(&self) -> &Server {
        &self.current
    }

    /// Moves on to the next process of the database (on SQLite: the data dir served again).
    fn next(&mut self) -> &Server {
        assert!(self.current.stop().success(), "the server stopped cleanly");
        self.current.restart();
        &self.current
    }

    /// Every process serving the database at this moment (one on SQLite).
    fn all(&self) -> Vec<&Server> {
        vec![&self.current]
    }

    fn data_dir(&self) -> &Path {
        &self.current.data_dir
    }
}

/// The processes of a database that has no account yet, each printing its setup link at start.
struct FreshProcesses {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    current: FreshServer,
}

impl FreshProcesses {
    fn start() -> FreshProcesses {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("data");
        let current = FreshServer::start(&dir, "warn");
        FreshProcesses {
            _tmp: tmp,
            dir,
            current,
        }
    }

    fn now(&self) -> &FreshServer {
        &self.current
    }

    /// Moves on to the next process (on SQLite: the data dir served again).
    fn next(&mut self) -> &FreshServer {
        self.current.stop();
        self.current = FreshServer::start(&self.dir, "warn");
        &self.current
    }

    fn all(&self) -> Vec<&FreshServer> {
        vec![&self.current]
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

struct Resp {
    status: u16,
    retry_after: Option<u64>,
    cookie: Option<String>,
    body: Value,
}

fn client() -> Client {
    http_builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

fn send(rb: RequestBuilder) -> Resp {
    let r = rb.send().expect("request");
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok()?.parse().ok());
    let cookie = r.headers().get_all("set-cookie").iter().find_map(|v| {
        v.to_str()
            .ok()?
            .split(';')
            .next()?
            .trim()
            .strip_prefix(&format!("{COOKIE}="))
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
    });
    let body = r.json().unwrap_or(Value::Null);
    Resp {
        status,
        retry_after,
        cookie,
        body,
    }
}

/// A sign-in attempt from loopback address `address` (`127.0.0.N`), as a client elsewhere.
fn login_from(base: &str, address: &str, email: &str, password: &str) -> Resp {
    let c = http_builder()
        .timeout(Duration::from_secs(30))
        .local_address(address.parse::<std::net::IpAddr>().expect("address"))
        .build()
        .expect("client");
    send(
        c.post(format!("{base}/auth/login"))
            .json(&json!({"email": email, "password": password})),
    )
}

fn sign_in(base: &str, email: &str, password: &str) -> String {
    let r = login_from(base, "127.0.0.1", email, password);
    assert_eq!(r.status, 200, "sign-in of {email}: {}", r.body);
    r.cookie.expect("a session cookie")
}

fn setup(base: &str, token: &str, email: &str) -> Resp {
    send(client().post(format!("{base}/auth/setup")).json(&json!({
        "token": token, "email": email, "password": "first-owner-password"
    })))
}

fn setup_required(base: &str) -> bool {
    let r = send(client().get(format!("{base}/auth/status")));
    assert_eq!(r.status, 200);
    r.body["setupRequired"]
        .as_bool()
        .expect("setupRequired is a boolean")
}

enum Cred<'a> {
    Key(&'a str),
    Cookie(&'a str),
}

impl Cred<'_> {
    fn apply(&self, rb: RequestBuilder) -> RequestBuilder {
        match self {
            Cred::Key(k) => rb.bearer_auth(k),
            Cred::Cookie(c) => rb.header("cookie", format!("{COOKIE}={c}")),
        }
    }
}

fn list_status(s: &Server, cred: &Cred) -> u16 {
    let url = s.url(&format!("/v1/ws/{WS}/agent/sessions"));
    send(cred.apply(client().get(url))).status
}

/// An open event stream, its backlog read.
fn stream(s: &Server, path: &str, cred: &Cred) -> Sse {
    let c = http_builder().build().expect("client");
    let resp = cred
        .apply(c.get(s.url(path)))
        .header("accept", "text/event-stream")
        .send()
        .expect("SSE");
    assert_eq!(resp.status().as_u16(), 200, "{path}");
    let sse = Sse::from_response(resp);
    assert!(
        sse.next_frame(Duration::from_secs(10)).is_some(),
        "the backlog of {path}"
    );
    sse
}

/// The Sessions API's and the Task events API's streams of one session.
fn streams_of(s: &Server, id: &str, cred: &Cred) -> [Sse; 2] {
    [
        stream(s, &format!("/v1/ws/{WS}/agent/sessions/{id}/events"), cred),
        stream(s, &format!("/v2/sessions/{id}/events/stream?after=0"), cred),
    ]
}

/// Waits until every stream has ended, at most until `deadline`; false if one is still open.
fn all_end_by(streams: &[Sse], deadline: Instant) -> bool {
    streams
        .iter()
        .all(|s| s.ends_within(deadline.saturating_duration_since(Instant::now())))
}

// ---------------------------------------------------------------------------------------------
// Sign-in throttling

/// Failures counted by one process hold on the next: one address's guesses at one account, the
/// account's failures from many addresses (added up across processes), and the address the owner
/// signed in from, which the account's delay spares.
#[test]
fn sign_in_failures_count_on_every_process() {
    let mut p = Processes::start(LOGIN_DELAY_MINUTE);
    let wrong = "a-wrong-guess-000";
    let base = p.now().base.clone();
    let home = "127.0.0.2";
    assert_eq!(
        login_from(&base, home, OWNER_EMAIL, OWNER_PASSWORD).status,
        200
    );
    let guesser = "127.0.0.3";
    for i in 0..5 {
        let r = login_from(&base, guesser, OWNER_EMAIL, wrong);
        assert_eq!(r.status, 401, "guess {i}: {}", r.body);
    }

    // Another process: the guessing address waits, even with the right password.
    let base = p.next().base.clone();
    for password in [wrong, OWNER_PASSWORD] {
        let r = login_from(&base, guesser, OWNER_EMAIL, password);
        assert_eq!(r.status, 429, "the guesser on the next process: {}", r.body);
        assert_eq!(r.body["error"], "rate_limited");
        let wait = r.retry_after.expect("Retry-After");
        assert!((1..=60).contains(&wait), "a delay, not a lock: {wait} s");
    }
    // Four more failures from elsewhere: nine for the account.
    for i in 1..=4 {
        let r = login_from(&base, &format!("127.0.1.{i}"), OWNER_EMAIL, wrong);
        assert_eq!(r.status, 401, "{}", r.body);
    }

    // A third process: the tenth failure is checked, then the account makes new addresses wait,
    // but not the one its owner signed in from on the first process.
    let base = p.next().base.clone();
    assert_eq!(
        login_from(&base, "127.0.1.5", OWNER_EMAIL, wrong).status,
        401,
        "the tenth failure"
    );
    let r = login_from(&base, "127.0.2.1", OWNER_EMAIL, OWNER_PASSWORD);
    assert_eq!(
        r.status, 429,
        "a new address after ten failures: {}",
        r.body
    );
    let r = login_from(&base, home, OWNER_EMAIL, OWNER_PASSWORD);
    assert_eq!(r.status, 200, "the owner's own address: {}", r.body);
}

/// Parallel guesses spread over every process are checked one after another: no more of them
/// reach the password check than one address has free failures.
#[test]
fn parallel_guesses_through_every_process_stay_within_the_free_ones() {
    let p = Processes::start(LOGIN_DELAY_MINUTE);
    let bases: Vec<String> = p.all().iter().map(|s| s.base.clone()).collect();
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let guesses: Vec<_> = (0..30)
            .map(|i| {
                let base = bases[i % bases.len()].clone();
                scope.spawn(move || {
                    login_from(&base, "127.0.0.5", OWNER_EMAIL, &format!("guess-{i:04}")).status
                })
            })
            .collect();
        guesses
            .into_iter()
            .map(|h| h.join().expect("guess"))
            .collect()
    });
    let checked = statuses.iter().filter(|&&st| st == 401).count();
    let held = statuses.iter().filter(|&&st| st == 429).count();
    assert_eq!(checked + held, 30, "{statuses:?}");
    assert!(
        checked <= 5,
        "{checked} guesses reached the password check (5 are free): {statuses:?}"
    );
    for base in &bases {
        let r = login_from(base, "127.0.0.5", OWNER_EMAIL, OWNER_PASSWORD);
        assert_eq!(r.status, 429, "{}", r.body);
    }
}

// ---------------------------------------------------------------------------------------------
// The one-time setup link

/// A setup link printed by one process works on the next (after a restart too), the link the
/// next one printed is just as good, and whichever is used first creates the owner: after that
/// every link is refused everywhere.
#[test]
fn a_setup_link_works_on_every_process_once() {
    let mut p = FreshProcesses::start();
    let first = p.now().setup_token();
    assert!(setup_required(&p.now().base));
    let second = p.next().setup_token();
    assert_ne!(first, second, "each start prints a new link");
    let base = p.now().base.clone();
    assert!(setup_required(&base));
    let r = setup(&base, "not-a-setup-token", "first@test.local");
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(setup_required(&base), "a wrong token uses up nothing");

    // The link the first process printed, used on the second.
    let r = setup(&base, &first, "first@test.local");
    assert_eq!(r.status, 200, "the earlier link: {}", r.body);
    assert!(r.cookie.is_some(), "signed in after setup");
    assert!(!setup_required(&base));
    let r = setup(&base, &second, "second@test.local");
    assert_eq!(r.status, 403, "the later link after setup: {}", r.body);
    let message = r.body["message"].as_str().unwrap_or_default();
    assert!(message.contains("latest start"), "{message}");

    // The next process has an owner and no setup.
    let base = p.next().base.clone();
    assert!(!setup_required(&base));
    for token in [&first, &second] {
        assert_eq!(setup(&base, token, "third@test.local").status, 403);
    }
    assert_eq!(
        login_from(
            &base,
            "127.0.0.1",
            "first@test.local",
            "first-owner-password"
        )
        .status,
        200
    );
    assert_eq!(
        login_from(
            &base,
            "127.0.0.1",
            "second@test.local",
            "first-owner-password"
        )
        .status,
        401
    );
}

/// Concurrent setups with the links of two processes, spread over every process: exactly one
/// creates an owner.
#[test]
fn concurrent_setups_create_one_owner() {
    let mut p = FreshProcesses::start();
    let first = p.now().setup_token();
    let second = p.next().setup_token();
    let bases: Vec<String> = p.all().iter().map(|s| s.base.clone()).collect();
    let tokens = [first, second];
    let results: Vec<(String, u16)> = std::thread::scope(|scope| {
        let tries: Vec<_> = (0..8)
            .map(|i| {
                let base = bases[i % bases.len()].clone();
                let token = tokens[i % 2].clone();
                scope.spawn(move || {
                    let email = format!("owner{i}@test.local");
                    let status = setup(&base, &token, &email).status;
                    (email, status)
                })
            })
            .collect();
        tries
            .into_iter()
            .map(|h| h.join().expect("setup"))
            .collect()
    });
    let created: Vec<&String> = results
        .iter()
        .filter(|(_, st)| *st == 200)
        .map(|(e, _)| e)
        .collect();
    assert_eq!(created.len(), 1, "{results:?}");
    assert!(
        results.iter().all(|(_, st)| matches!(st, 200 | 403)),
        "{results:?}"
    );
    let base = &bases[0];
    assert!(!setup_required(base));
    for (email, _) in &results {
        let r = login_from(base, "127.0.0.1", email, "first-owner-password");
        let expected = if email == created[0] { 200 } else { 401 };
        assert_eq!(r.status, expected, "{email}: {}", r.body);
    }
}

// ---------------------------------------------------------------------------------------------
// Revocation

/// A key revoked elsewhere (the CLI) is refused by every process within the bound, and the event
/// streams opened with it on every process end within it; another key's streams stay open.
#[test]
fn a_key_revoked_elsewhere_stops_everywhere_within_the_bound() {
    let p = Processes::start("");
    let dir = p.data_dir().to_path_buf();
    let key = cli(
        &dir,
        &[
            "token",
            "create",
            "--user",
            OWNER_EMAIL,
            "--scope",
            "sessions",
            "--name",
            "to revoke",
        ],
        None,
    );
    let id = p.now().create_prompt("hello");
    let mut revoked_streams = Vec::new();
    let mut other_streams = Vec::new();
    for s in p.all() {
        // Used (so cached by the process) before it is revoked.
        assert_eq!(list_status(s, &Cred::Key(&key)), 200);
        revoked_streams.extend(streams_of(s, &id, &Cred::Key(&key)));
        other_streams.extend(streams_of(s, &id, &Cred::Key(&s.token)));
    }
    let key_id = key
        .strip_prefix("sk_")
        .and_then(|k| k.get(..24))
        .expect("key id");
    cli(&dir, &["token", "revoke", key_id], None);
    let revoked = Instant::now();

    for s in p.all() {
        loop {
            let sent = revoked.elapsed();
            if list_status(s, &Cred::Key(&key)) == 401 {
                break;
            }
            assert!(
                sent < BOUND,
                "a request sent {sent:?} after the revocation was served"
            );
        }
    }
    assert!(
        all_end_by(&revoked_streams, revoked + BOUND),
        "a stream of the revoked key is open {BOUND:?} after the revocation"
    );
    for s in p.all() {
        assert_eq!(
            list_status(s, &Cred::Key(&key)),
            401,
            "and it stays refused"
        );
    }
    for s in &other_streams {
        assert!(
            !s.ends_within(Duration::from_millis(300)),
            "another key's stream ended"
        );
    }
}

/// A person signed out elsewhere (`sessiond user sign-out`, another process) is refused by every
/// process at once, and their browser session's streams end within the bound; another person's
/// browser session and its streams are untouched.
#[test]
fn a_browser_session_ended_elsewhere_stops_everywhere_within_the_bound() {
    let p = Processes::start("");
    let dir = p.data_dir().to_path_buf();
    cli(
        &dir,
        &[
            "user",
            "create",
            "--email",
            MEMBER_EMAIL,
            "--password-stdin",
            "--role",
            "member",
        ],
        Some(&format!("{MEMBER_PASSWORD}\n")),
    );
    let id = p.now().create_prompt("hello");
    let base = p.now().base.clone();
    let owner = sign_in(&base, OWNER_EMAIL, OWNER_PASSWORD);
    let member = sign_in(&base, MEMBER_EMAIL, MEMBER_PASSWORD);
    let mut ended = Vec::new();
    let mut others = Vec::new();
    for s in p.all() {
        ended.extend(streams_of(s, &id, &Cred::Cookie(&owner)));
        others.extend(streams_of(s, &id, &Cred::Cookie(&member)));
    }
    let out = cli(&dir, &["user", "sign-out", "--email", OWNER_EMAIL], None);
    let signed_out = Instant::now();
    assert_eq!(out, format!("ended 1 browser session of {OWNER_EMAIL}"));

    for s in p.all() {
        assert_eq!(list_status(s, &Cred::Cookie(&owner)), 401);
        assert_eq!(list_status(s, &Cred::Cookie(&member)), 200);
    }
    assert!(
        all_end_by(&ended, signed_out + BOUND),
        "a stream of the ended browser session is open {BOUND:?} after it ended"
    );
    for s in &others {
        assert!(
            !s.ends_within(Duration::from_millis(300)),
            "another person's stream ended"
        );
    }
    let out = cli(&dir, &["user", "sign-out", "--email", OWNER_EMAIL], None);
    assert_eq!(out, format!("ended 0 browser sessions of {OWNER_EMAIL}"));
}

// ---------------------------------------------------------------------------------------------
// The same store operations on PostgreSQL, where two processes' transactions really run at once

/// Two stores opened on one PostgreSQL database stand for two processes (each has its own pool
/// of connections, so its own transactions): parallel sign-in attempts and setups through both
/// are judged one after another, and the credentials and counters the watcher and the prune read
/// are the same rows. (`sessiond serve` cannot select PostgreSQL yet; these check the store
/// operations the servers above use.)
#[cfg(feature = "postgres")]
mod on_postgresql {
    use std::sync::Arc;

    use sessiond::auth::limiter::LoginLimiter;
    use sessiond::store::Store;
    use sessiond::store::identity::FirstRole;
    use sessiond::store::logins::{LoginCounts, LoginJudge, LoginWindows, SignIn};

    use super::common::postgres::database;

    fn open(url: &str) -> Store {
        Store::open_postgres(url, &Default::default(), sessiond::bus::Bus::new(16, 16))
            .expect("open the PostgreSQL store")
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .expect("runtime")
    }

    #[test]
    fn parallel_attempts_through_two_processes_stay_within_the_free_ones() {
        let Some(db) = database("sign_in_parallel") else {
            return;
        };
        let delay = std::time::Duration::from_secs(60);
        let limiters = [
            Arc::new(LoginLimiter::with_base_delay(open(&db.url), delay)),
            Arc::new(LoginLimiter::with_base_delay(open(&db.url), delay)),
        ];
        let passed = runtime().block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for i in 0..40 {
                let l = Arc::clone(&limiters[i % 2]);
                set.spawn(async move { l.attempt("a@test.local", "10.0.0.1").await });
            }
            let mut passed = 0;
            while let Some(r) = set.join_next().await {
                passed += usize::from(r.expect("task").expect("attempt").is_ok());
            }
            passed
        });
        assert_eq!(passed, 5, "attempts that reached the password check");
        assert_eq!(
            db.psql("SELECT kind || '=' || failures FROM login_failures ORDER BY kind"),
            "account=5\naccount_address=5\naddress=5"
        );
    }

    #[test]
    fn concurrent_setups_through_two_processes_create_one_owner() {
        let Some(db) = database("setup_once") else {
            return;
        };
        let stores = [open(&db.url), open(&db.url)];
        stores[0]
            .directory()
            .ensure_workspace_blocking("default", "Default")
            .expect("workspace");
        for (store, token) in stores.iter().zip(["token-a", "token-b"]) {
            assert!(store.logins().add_setup_token_blocking(token, 10).unwrap());
        }
        let outcomes = runtime().block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for i in 0..8 {
                let store = stores[i % 2].clone();
                let token = ["token-a", "token-b"][(i / 2) % 2];
                set.spawn(async move {
                    store
                        .logins()
                        .complete_setup(token, &format!("owner{i}@test.local"), "phc")
                        .await
                });
            }
            let mut outcomes = Vec::new();
            while let Some(r) = set.join_next().await {
                outcomes.push(r.expect("task"));
            }
            outcomes
        });
        let created = outcomes.iter().filter(|o| matches!(o, Ok(Some(_)))).count();
        assert_eq!(created, 1, "{outcomes:?}");
        for o in &outcomes {
            assert!(
                matches!(o, Ok(_) | Err(sessiond::store::Error::Forbidden(_))),
                "a setup failed otherwise than refused: {o:?}"
            );
        }
        assert_eq!(db.psql("SELECT count(*) FROM users"), "1");
        assert_eq!(db.psql("SELECT count(*) FROM setup_tokens"), "0");
    }

    #[test]
    fn credentials_and_counters_are_the_same_rows_for_every_process() {
        let Some(db) = database("credentials") else {
            return;
        };
        let (a, b) = (open(&db.url), open(&db.url));
        let ws = a
            .directory()
            .ensure_workspace_blocking("default", "Default")
            .unwrap();
        let (user, _) = a
            .identity()
            .create_user_blocking("u@test.local", "phc", &ws, FirstRole::OwnerIfFirst)
            .unwrap();
        let mut keys = Vec::new();
        for i in 0..70 {
            let (_, row) = sessiond::auth::mint_key("k", &ws, &["sessions".into()], None).unwrap();
            keys.push(row.id.clone());
            a.identity().insert_user_key_blocking(&user, row).unwrap();
            if i % 3 == 0 {
                assert!(a.identity().revoke_key_blocking(&keys[i]).unwrap());
            }
        }
        let rt = runtime();
        let (valid, browsers) = rt.block_on(async {
            a.identity()
                .open_browser_session("signed-in", &user, i64::MAX)
                .await
                .unwrap();
            b.identity()
                .valid_credentials(
                    keys.clone(),
                    vec!["signed-in".into(), "never".into()],
                    sessiond::clock::now_ms(),
                )
                .await
                .unwrap()
        });
        let expected: std::collections::HashSet<String> = keys
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 != 0)
            .map(|(_, k)| k.clone())
            .collect();
        assert_eq!(valid, expected);
        assert_eq!(browsers, ["signed-in".to_owned()].into());

        // Counters written through one process are read, and pruned, through the other.
        const WINDOWS: LoginWindows = LoginWindows {
            failures_ms: 60_000,
            trust_ms: 120_000,
        };
        let t0 = 1_700_000_000_000;
        let counts = |store: &Store, now: i64| {
            let (tx, rx) = std::sync::mpsc::channel();
            let judge: LoginJudge = std::sync::Arc::new(move |c: &LoginCounts| {
                let _ = tx.send(*c);
                None
            });
            let who = SignIn {
                account: "a".into(),
                address: "1".into(),
                now,
            };
            rt.block_on(store.logins().attempt(who, WINDOWS, judge))
                .unwrap();
            rx.recv().unwrap()
        };
        assert_eq!(counts(&a, t0), LoginCounts::default());
        assert_eq!(counts(&b, t0 + 1).account.map(|f| f.count), Some(1));
        let gone = rt
            .block_on(b.logins().prune(t0 + 1 + WINDOWS.failures_ms, WINDOWS))
            .unwrap();
        assert_eq!(gone, 3);
        assert_eq!(db.psql("SELECT count(*) FROM login_failures"), "0");
    }
}
