//! Read queries against a workspace of 10,000, 100,000 and 1,000,000 sessions.
//!
//! ```text
//! cargo run --release --example bench_scale              # 10 k / 100 k / 1 M sessions (~5-10 min)
//! cargo run --release --example bench_scale -- --quick   # 10 k / 100 k
//! SESSIOND_BENCH_BASELINE=/tmp/base/sessiond cargo run --release --example bench_scale
//! ```
//!
//! This is a measuring command, not a test: it prints figures and how they grow, and asserts
//! nothing about timing (it does check that the work was really done: HTTP statuses, page sizes,
//! search hits).
//!
//! One data dir grows through the sizes. Sessions are created through the store's own write path
//! (`Tx::insert_session`, 5,000 per write job: the sessions row and its search row); one SQL pass
//! per size then spreads them in time (one second apart, newest last) and over the buckets (1 %
//! asking, 1 % scheduled, the rest done) and archives 2 %, as a long-lived workspace looks. All
//! sessions belong to the root agent, the worst case for its activity view. Titles are three
//! words from a small vocabulary, a unique number, the common word `deploy` in one session in four,
//! and the rare word `quetzal` in ten of the oldest sessions. Each session also gets one prompt
//! row in the search index (a direct SQL pass as well: no prompt event is written), with the word
//! `rollback` in one session in four (others than those with `deploy`). Before the first size,
//! 100 sessions get a long history of their own: 500 prompts of about 300 bytes each, every one
//! with the word `hydrant`; and 100 more get 500 prompts of mixed lengths (10 to 600 bytes, short
//! answers between longer requests), every one with the word `culvert`. Both are appended and
//! indexed through the store's write path as `POST …/message` indexes them (the rows' layout is
//! the store's, not the bench's).
//!
//! For each size the real server runs in a child process on the data dir and one keep-alive
//! client measures, over HTTP, p50/p99 of: the list's first page, a keyset page from the middle
//! of the list, search for the common and for the rare word, `GET …/agent/sessions/activity`, a
//! 100-event history page, and, as the floor every figure includes, the detail of one session (a
//! primary-key lookup that does not grow). The last table gives every figure's growth against
//! the 10,000-session size of the same run.
//!
//! With `SESSIOND_BENCH_BASELINE=<another sessiond binary>` each size is measured first with that
//! binary (`serve`) on a copy of the data dir, then with this build on the data dir itself, and
//! every table shows both. The copy is brought to the baseline's schema first: a copy of schema 22
//! loses its prompt search backlog (empty, as the seeding indexes what it writes) and becomes
//! schema 21; a baseline from before migration 0013 gets its two full-text indexes without the
//! prefix index, rebuilt from the same rows (the only difference between the two schemas), and
//! schema version 12.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::Value;
use sessiond::bus::Bus;
use sessiond::config::Config;
use sessiond::store::seed::BareSession;
use sessiond::store::{SessionKey, Store};
use sessiond::timeline::{Event, Sender};

#[path = "support/report.rs"]
mod report;
#[path = "support/seed.rs"]
mod seed;
use report::{Lat, loadavg, quick_flag, thousands};

const TARGET_ACTIVITY_P99_MS: f64 = 5.0;
const TARGET_SEARCH_P99_MS: f64 = 5.0;
const TARGET_GROWTH: f64 = 2.0;
const CHUNK: usize = 5_000;
const HISTORY_EVENTS: usize = 1_000;
const COMMON: &str = "deploy";
/// Two words, the last a prefix: `alpha` is in about one title in eight, so both are in one in
/// thirty-two.
const COMMON_PAIR: &str = "alpha deploy";
/// In the prompt row of one session in four.
const PROMPT_WORD: &str = "rollback";
const RARE: &str = "quetzal";
const RARE_COUNT: usize = 10;
/// Sessions with a long history of prompts, and their prompts: the search index keeps several
/// rows per such session, and a word in all their prompts is in every one of those rows.
const LONG_SESSIONS: usize = 100;
const LONG_PROMPTS: usize = 500;
/// In every prompt of the long histories, and nowhere else.
const LONG_WORD: &str = "hydrant";
/// In every prompt of as many long histories of mixed lengths (short answers between longer
/// requests, as in a conversation: the cycle of [`MIXED_LENGTHS`]), and nowhere else.
const MIXED_WORD: &str = "culvert";
const MIXED_LENGTHS: [usize; 9] = [300, 25, 300, 12, 600, 40, 300, 3, 150];
/// Requests per query and size (fewer when a query is slow: see `MAX_SECS_PER_QUERY`).
const REQUESTS: usize = 300;
const WARMUP: usize = 20;
const MAX_SECS_PER_QUERY: f64 = 5.0;
const WORDS: [&str; 24] = [
    "alpha", "bravo", "cobalt", "delta", "ember", "falcon", "garnet", "harbor", "indigo", "jasper",
    "kernel", "lumen", "meadow", "nimbus", "orchid", "pepper", "quartz", "raven", "saffron",
    "timber", "umber", "velvet", "willow", "yonder",
];

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_scale: {what}: {e}");
    std::process::exit(1);
}

/// Title of the `i`-th session (0-based, oldest first).
fn title(i: usize) -> String {
    let h = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let w = |s: u32| WORDS[((h >> s) % WORDS.len() as u64) as usize];
    let mut t = format!("{} {} {} {i}", w(7), w(19), w(37));
    if i.is_multiple_of(4) {
        t.push(' ');
        t.push_str(COMMON);
    }
    if i < RARE_COUNT * 1_000 && i % 1_000 == 3 {
        t.push(' ');
        t.push_str(RARE);
    }
    t
}

struct Seed {
    store: Store,
    /// The store's file, for the bench's own direct SQL.
    db: std::path::PathBuf,
    ws: String,
    agent: String,
    user: String,
    api_key: String,
    history: SessionKey,
    loaded: usize,
}

/// A connection of the bench's own to the store's file (the store's writer is idle meanwhile).
fn raw(db: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(db).unwrap_or_else(|e| die("open the database", e));
    c.busy_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| die("busy timeout", e));
    c
}

fn open_seed(db: &Path) -> Seed {
    let store = Store::open(db, &Default::default(), Bus::new(1024, 1024))
        .unwrap_or_else(|e| die("open store", e));
    let seed::Owner {
        workspace: ws,
        agent,
        user,
        api_key,
    } = seed::owner(&store).unwrap_or_else(|e| die("seed workspace and credentials", e));
    let history = store
        .seed()
        .sessions_blocking(vec![bare(&ws, &agent, &user, "history".into())])
        .unwrap_or_else(|e| die("seed history session", e))
        .remove(0);
    let notes = (0..HISTORY_EVENTS)
        .map(|i| Event::NoteSubmitted {
            note: format!("history note {i}"),
            sender: Sender::User {
                user_id: "bench".into(),
            },
            client_request_id: None,
            images: Vec::new(),
            attachments: Vec::new(),
        })
        .collect();
    store
        .seed()
        .events_blocking(&history, notes)
        .unwrap_or_else(|e| die("seed history session", e));
    let owner = (ws.as_str(), agent.as_str(), user.as_str());
    seed_long_histories(&store, db, owner, LONG_WORD, &[300]);
    seed_long_histories(&store, db, owner, MIXED_WORD, &MIXED_LENGTHS);
    Seed {
        store,
        db: db.to_path_buf(),
        ws,
        agent,
        user,
        api_key,
        history,
        loaded: 0,
    }
}

/// [`LONG_SESSIONS`] sessions of [`LONG_PROMPTS`] prompts each, their lengths the cycle of
/// `lengths`, each holding `word`; one write job per session, each prompt appended and indexed
/// as the message path does it. Prints how many search rows they hold.
fn seed_long_histories(
    store: &Store,
    db: &Path,
    (ws, agent, user): (&str, &str, &str),
    word: &str,
    lengths: &[usize],
) {
    let start = Instant::now();
    let sessions = (0..LONG_SESSIONS)
        .map(|i| bare(ws, agent, user, format!("long history {i}")))
        .collect();
    let keys = store
        .seed()
        .sessions_blocking(sessions)
        .unwrap_or_else(|e| die("seed long histories", e));
    for key in &keys {
        let texts = (0..LONG_PROMPTS).map(|j| {
            let len = lengths[j % lengths.len()];
            let mut text = if len >= 100 {
                format!("step {j}: check the {word} pressure log and report")
            } else {
                format!("{word} {j}")
            };
            let mut k = j;
            while text.len() < len {
                text.push(' ');
                text.push_str(WORDS[k % WORDS.len()]);
                k = k / 3 + 7;
            }
            text
        });
        seed::write_prompts(store, key, texts).unwrap_or_else(|e| die("seed long histories", e));
    }
    let (lo, hi) = keys.iter().fold((i64::MAX, i64::MIN), |(lo, hi), k| {
        (lo.min(k.pk), hi.max(k.pk))
    });
    let rows: i64 = raw(db)
        .query_row(
            "SELECT count(*) FROM session_search_prompts WHERE rowid >> 32 BETWEEN ?1 AND ?2",
            [lo, hi],
            |r| r.get(0),
        )
        .unwrap_or_else(|e| die("count long histories' rows", e));
    let lengths: Vec<String> = lengths.iter().map(usize::to_string).collect();
    println!(
        "   long histories with `{word}`: {LONG_SESSIONS} sessions x {LONG_PROMPTS} prompts of \
         {} bytes seeded in {:.1} s; {} search rows ({:.1} per session)",
        lengths.join(", "),
        start.elapsed().as_secs_f64(),
        thousands(rows as u64),
        rows as f64 / LONG_SESSIONS as f64
    );
}

fn bare(ws: &str, agent: &str, user: &str, title: String) -> BareSession {
    BareSession {
        workspace_id: ws.to_owned(),
        agent_id: agent.to_owned(),
        user_id: user.to_owned(),
        title,
    }
}

/// Grows the workspace to `target` sessions (besides the history session).
fn grow(seed: &mut Seed, target: usize) -> f64 {
    let start = Instant::now();
    while seed.loaded < target {
        let lo = seed.loaded;
        let hi = (lo + CHUNK).min(target);
        let batch = (lo..hi)
            .map(|i| bare(&seed.ws, &seed.agent, &seed.user, title(i)))
            .collect();
        seed.store
            .seed()
            .sessions_blocking(batch)
            .unwrap_or_else(|e| die("insert sessions", e));
        seed.loaded = hi;
    }
    // Spread in time, buckets and archive state (a documented direct SQL pass: the bench only
    // reads these sessions, no turn ever runs on them).
    let history_pk = seed.history.pk;
    raw(&seed.db)
        .execute(
                "UPDATE sessions SET
                    created_at = 1700000000000 + pk * 1000,
                    updated_at = 1700000000000 + pk * 1000,
                    turn_status = CASE pk % 100 WHEN 0 THEN 'ask' WHEN 1 THEN 'sleep' ELSE 'complete' END,
                    bucket = CASE pk % 100 WHEN 0 THEN 'asking' WHEN 1 THEN 'scheduled' ELSE 'done' END,
                    archived_at = CASE WHEN pk % 50 = 7 THEN 1700000000000 + pk * 1000 END
                 WHERE pk <> ?1",
            [history_pk],
        )
        .unwrap_or_else(|e| die("spread sessions", e));
    // One prompt row per new session, keyed as the store keys a session's first prompt row.
    raw(&seed.db)
        .execute(
            "INSERT INTO session_search_prompts (rowid, prompts)
             SELECT pk * 4294967296 + 2, 'please look at the ' || CASE pk % 4 WHEN 2 THEN 'rollback'
                 ELSE 'logs' END || ' of job ' || pk
             FROM sessions
             WHERE pk > (SELECT COALESCE(max(rowid) >> 32, 0) FROM session_search_prompts)
               AND pk <> ?1",
            [history_pk],
        )
        .unwrap_or_else(|e| die("seed prompt rows", e));
    start.elapsed().as_secs_f64()
}

/// The server in a child process (this same executable with `--serve`), so that each size gets
/// a fresh server on the grown data dir.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    /// This build's server, or with `baseline` that binary's `serve`, on `data_dir`.
    fn start(data_dir: &Path, baseline: Option<&Path>) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| die("pick port", e));
        let bind = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(data_dir.with_extension("log"))
            .unwrap_or_else(|e| die("server log", e));
        let mut cmd = match baseline {
            Some(bin) => {
                let mut cmd = Command::new(bin);
                cmd.env_remove("SESSIOND_CONFIG")
                    .env_remove("SESSIOND_DATA_DIR")
                    .env_remove("SESSIOND_BIND")
                    .env_remove("SESSIOND_DATABASE_URL")
                    .env("SESSIOND_LOG", "warn")
                    .arg("serve")
                    .arg("--bind")
                    .arg(&bind)
                    .arg("--data-dir")
                    .arg(data_dir);
                cmd
            }
            None => {
                let exe = std::env::current_exe().unwrap_or_else(|e| die("current exe", e));
                let mut cmd = Command::new(exe);
                cmd.arg("--serve").arg(data_dir).arg(&bind);
                cmd
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| die("spawn server", e));
        Server {
            child,
            base: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_child(data_dir: PathBuf, bind: String) -> ! {
    let cfg = Config {
        bind,
        data_dir,
        ..Default::default()
    };
    match sessiond::server::serve(cfg) {
        Ok(()) => std::process::exit(0),
        Err(e) => die("server", e),
    }
}

fn client(api_key: &str) -> reqwest::Client {
    seed::client(Some(api_key), Duration::from_secs(120)).unwrap_or_else(|e| die("http client", e))
}

async fn get_json(c: &reqwest::Client, url: &str) -> Value {
    let r = c.get(url).send().await.unwrap_or_else(|e| die(url, e));
    let status = r.status();
    let text = r.text().await.unwrap_or_else(|e| die(url, e));
    if !status.is_success() {
        die(url, format!("{status}: {text}"));
    }
    serde_json::from_str(&text).unwrap_or_else(|e| die(url, e))
}

async fn wait_healthy(c: &reqwest::Client, base: &str) {
    seed::wait_healthy(c, base, Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| die("server", e));
}

/// One measured query: its name and how to check an answer.
struct Query {
    name: &'static str,
    url: String,
    check: fn(&Value) -> Result<(), String>,
}

fn sessions_len(v: &Value) -> usize {
    v["sessions"].as_array().map_or(0, Vec::len)
}

/// A list or search answer that fills its page of 50 sessions.
fn full_page(v: &Value) -> Result<(), String> {
    match sessions_len(v) {
        50 => Ok(()),
        n => Err(format!("{n} sessions, expected 50")),
    }
}

async fn measure(c: &reqwest::Client, q: &Query) -> Lat {
    let first = get_json(c, &q.url).await;
    if let Err(e) = (q.check)(&first) {
        die(q.name, e);
    }
    for _ in 0..WARMUP {
        get_json(c, &q.url).await;
    }
    let mut lat = Lat::default();
    let start = Instant::now();
    for _ in 0..REQUESTS {
        let t = Instant::now();
        let r = c
            .get(&q.url)
            .send()
            .await
            .unwrap_or_else(|e| die(q.name, e));
        let ok = r.status().is_success();
        let _ = r.bytes().await.unwrap_or_else(|e| die(q.name, e));
        lat.push(t.elapsed());
        if !ok {
            die(q.name, "request failed during the timed run");
        }
        if start.elapsed().as_secs_f64() > MAX_SECS_PER_QUERY && lat.n() >= 20 {
            break;
        }
    }
    lat.sort();
    lat
}

const NAMES: [&str; 12] = [
    "detail (floor)",
    "list, first page",
    "list, middle keyset page",
    "search, common word",
    "search, rare word",
    "search, two common words",
    "search, common prompt word",
    "activity",
    "history page",
    "list, asking bucket",
    "search, long-history word",
    "search, mixed-history word",
];

fn queries(base: &str, seed: &Seed, middle_cursor: &str) -> Vec<Query> {
    let s = format!(
        "{base}/v1/ws/{}/agent/sessions",
        sessiond::store::DEFAULT_WORKSPACE
    );
    let h = &seed.history.id;
    vec![
        Query {
            name: NAMES[0],
            url: format!("{s}/{h}"),
            check: |v| match v["id"].as_str() {
                Some(_) => Ok(()),
                None => Err(format!("no id in {v}")),
            },
        },
        Query {
            name: NAMES[1],
            url: format!("{s}?limit=50"),
            check: full_page,
        },
        Query {
            name: NAMES[2],
            url: format!("{s}?limit=50&cursor={middle_cursor}"),
            check: full_page,
        },
        Query {
            name: NAMES[3],
            url: format!("{s}?limit=50&search={COMMON}"),
            check: full_page,
        },
        Query {
            name: NAMES[4],
            url: format!("{s}?limit=50&search={RARE}"),
            // Ten carry the word; one in fifty sessions is archived and left out of the list.
            check: |v| match sessions_len(v) {
                n if (RARE_COUNT - 1..=RARE_COUNT).contains(&n) => Ok(()),
                n => Err(format!("{n} sessions, expected {RARE_COUNT}")),
            },
        },
        Query {
            name: NAMES[5],
            url: format!("{s}?limit=50&search={}", COMMON_PAIR.replace(' ', "+")),
            check: full_page,
        },
        Query {
            name: NAMES[6],
            url: format!("{s}?limit=50&search={PROMPT_WORD}"),
            check: full_page,
        },
        Query {
            name: NAMES[7],
            url: format!("{s}/activity"),
            check: |v| {
                let owners = v["owners"].as_array().ok_or("no owners")?;
                let n: usize = owners
                    .iter()
                    .map(|o| o["sessions"].as_array().map_or(0, Vec::len))
                    .sum();
                let first = owners
                    .iter()
                    .find_map(|o| o["sessions"].as_array()?.first().cloned());
                match first {
                    Some(f) if n == 24 && f["bucket"] == "asking" => Ok(()),
                    _ => Err(format!("{n} activity sessions, first {first:?}")),
                }
            },
        },
        Query {
            name: NAMES[8],
            url: format!("{s}/{h}/history?before={}&limit=100", HISTORY_EVENTS / 2),
            check: |v| match v["events"].as_array().map_or(0, Vec::len) {
                100 => Ok(()),
                n => Err(format!("{n} events, expected 100")),
            },
        },
        Query {
            name: NAMES[9],
            url: format!("{s}?limit=50&bucket=asking"),
            check: full_page,
        },
        Query {
            name: NAMES[10],
            url: format!("{s}?limit=50&search={LONG_WORD}"),
            check: full_page,
        },
        Query {
            name: NAMES[11],
            url: format!("{s}?limit=50&search={MIXED_WORD}"),
            check: full_page,
        },
    ]
}

/// The cursor of the session in the middle of the list, as the server encodes it (base64url of
/// `created_at:id`); the first answer checks that the server accepts it.
fn middle_cursor(seed: &Seed) -> String {
    let half = (seed.loaded / 2) as i64;
    let (at, id): (i64, String) = raw(&seed.db)
        .query_row(
            "SELECT created_at, id FROM sessions WHERE archived_at IS NULL
             ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET ?1",
            [half],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or_else(|e| die("middle cursor", e));
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{at}:{id}"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--serve") {
        match (args.get(2), args.get(3)) {
            (Some(dir), Some(bind)) => serve_child(PathBuf::from(dir), bind.clone()),
            _ => die("--serve", "usage: --serve DATA_DIR BIND"),
        }
    }
    let quick = quick_flag(
        "bench_scale",
        "10,000 and 100,000 sessions only (no 1,000,000)",
    );
    let sizes: &[usize] = if quick {
        &[10_000, 100_000]
    } else {
        &[10_000, 100_000, 1_000_000]
    };
    println!(
        "sessiond scale benchmark{}: {} build, SQLite {}, load average at start {} (1/5/15 min)",
        if quick { " (--quick)" } else { "" },
        if cfg!(debug_assertions) {
            "DEBUG (figures are meaningless; use --release)"
        } else {
            "release"
        },
        rusqlite::version(),
        loadavg()
    );
    println!(
        "   one client, sequential keep-alive GETs; {REQUESTS} per query and size after {WARMUP} \
         warm-up (at most ~{MAX_SECS_PER_QUERY:.0} s per query); server in a child process."
    );
    let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
    let data_dir = tmp.path().join("data");
    std::fs::create_dir_all(&data_dir).unwrap_or_else(|e| die("data dir", e));
    let db = Config {
        data_dir: data_dir.clone(),
        ..Default::default()
    }
    .db_path();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| die("tokio runtime", e));

    let baseline = std::env::var_os("SESSIOND_BENCH_BASELINE").map(PathBuf::from);
    if let Some(b) = &baseline {
        println!(
            "   baseline: {} on a copy of the data dir, measured before this build at each size",
            b.display()
        );
    }
    let base_dir = tmp.path().join("baseline");
    let mut results: Vec<SizeFigures> = Vec::new();
    let mut seed = open_seed(&db);
    let api_key = seed.api_key.clone();
    for &size in sizes {
        let secs = grow(&mut seed, size);
        let cursor = middle_cursor(&seed);
        let qs = queries("BASE", &seed, &cursor);
        seed.store.close();
        let bytes: u64 = ["", "-wal"]
            .iter()
            .filter_map(|s| std::fs::metadata(format!("{}{s}", db.display())).ok())
            .map(|m| m.len())
            .sum();
        println!();
        println!(
            "== {} sessions (grown in {secs:.1} s; db {:.0} MiB; load {}) ==",
            thousands(size as u64),
            bytes as f64 / (1024.0 * 1024.0),
            loadavg()
        );
        let c = client(&api_key);
        let run = |dir: &Path, bin: Option<&Path>| {
            let server = Server::start(dir, bin);
            rt.block_on(async {
                wait_healthy(&c, &server.base).await;
                let mut lats = Vec::new();
                for q in &qs {
                    let q = Query {
                        name: q.name,
                        url: q.url.replacen("BASE", &server.base, 1),
                        check: q.check,
                    };
                    let lat = measure(&c, &q).await;
                    println!("   {:<26} {}", q.name, lat.line());
                    lats.push(lat);
                }
                lats
            })
        };
        let base = baseline.as_deref().map(|bin| {
            let secs = baseline_copy(&data_dir, &db, &base_dir);
            println!(
                "-- baseline (copy made and brought to its schema in {secs:.1} s; load {}) --",
                loadavg()
            );
            let lats = run(&base_dir, Some(bin));
            std::fs::remove_dir_all(&base_dir).unwrap_or_else(|e| die("remove baseline copy", e));
            println!("-- this build (load {}) --", loadavg());
            lats
        });
        let lats = run(&data_dir, None);
        results.push((size, lats, base));
        seed.store = Store::open(&db, &Default::default(), Bus::new(1024, 1024))
            .unwrap_or_else(|e| die("reopen store", e));
    }
    seed.store.close();

    println!();
    println!(
        "== Growth: p50 / p99 at each size, and the ratio to {} sessions (target: within {TARGET_GROWTH}x) ==",
        thousands(sizes[0] as u64)
    );
    for (i, name) in NAMES.iter().enumerate() {
        let figures = |pick: &dyn Fn(&SizeFigures) -> Option<&Lat>| {
            let first = pick(&results[0])?;
            let mut line = String::new();
            for r in &results {
                let l = pick(r)?;
                line.push_str(&format!(
                    " | {:>4}: {:>7.2} / {:>7.2} ms",
                    short(r.0),
                    l.p(50.0),
                    l.p(99.0)
                ));
                if r.0 != sizes[0] {
                    line.push_str(&format!(
                        " ({:.2}x / {:.2}x)",
                        l.p(50.0) / first.p(50.0),
                        l.p(99.0) / first.p(99.0)
                    ));
                }
            }
            Some(line)
        };
        match figures(&|r| r.2.as_ref().map(|b| &b[i])) {
            Some(base) => {
                println!("   {name:<26} baseline  {base}");
                let this = figures(&|r| Some(&r.1[i])).unwrap_or_default();
                println!("   {:<26} this build{this}", "");
            }
            None => {
                let this = figures(&|r| Some(&r.1[i])).unwrap_or_default();
                println!("   {name:<26}{this}");
            }
        }
    }
    if let Some((_, lats, base)) = results.iter().find(|r| r.0 == 100_000) {
        println!();
        println!(
            "   at 100,000: activity p99 {:.2} ms (target < {TARGET_ACTIVITY_P99_MS} ms), search p99 \
             common {:.2} ms / two words {:.2} ms / prompt word {:.2} ms / rare {:.2} ms / \
             long-history word {:.2} ms / mixed-history word {:.2} ms (target < {TARGET_SEARCH_P99_MS} ms){}",
            lats[7].p(99.0),
            lats[3].p(99.0),
            lats[5].p(99.0),
            lats[6].p(99.0),
            lats[4].p(99.0),
            lats[10].p(99.0),
            lats[11].p(99.0),
            match base {
                Some(b) => format!(
                    "; baseline common {:.2} / two words {:.2} / prompt word {:.2} / \
                     long-history word {:.2} / mixed-history word {:.2} ms",
                    b[3].p(99.0),
                    b[5].p(99.0),
                    b[6].p(99.0),
                    b[10].p(99.0),
                    b[11].p(99.0)
                ),
                None => String::new(),
            }
        );
    }
    println!("   load average at end: {}", loadavg());
}

/// One size's figures: the number of sessions, this build's figures and the baseline's (in the
/// order of [`NAMES`]).
type SizeFigures = (usize, Vec<Lat>, Option<Vec<Lat>>);

/// Copies the database (closed, so its WAL is checkpointed) to a data dir of its own for the
/// baseline binary and brings the copy to that binary's schema: a copy of schema 22 loses the
/// (empty) prompt search backlog and becomes schema 21, which any baseline since 21 opens; a
/// baseline from before migration 0013 gets both full-text indexes without the prefix index
/// (rebuilt from their own rows, as migration 0010 made them) and schema version 12. Returns the
/// seconds it took.
fn baseline_copy(data_dir: &Path, db: &Path, base_dir: &Path) -> f64 {
    let start = Instant::now();
    let _ = std::fs::remove_dir_all(base_dir);
    std::fs::create_dir_all(base_dir).unwrap_or_else(|e| die("baseline data dir", e));
    let name = db
        .strip_prefix(data_dir)
        .unwrap_or_else(|e| die("database path", e));
    let copy = base_dir.join(name);
    for suffix in ["", "-wal"] {
        let from = PathBuf::from(format!("{}{suffix}", db.display()));
        if from.exists() {
            std::fs::copy(&from, format!("{}{suffix}", copy.display()))
                .unwrap_or_else(|e| die("copy the database", e));
        }
    }
    let c = raw(&copy);
    let version: i64 = c
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap_or_else(|e| die("schema version", e));
    if version == 22 {
        // Migration 0022 only adds the prompt search backlog, which the seeding left empty
        // (`SeedStore::prompts_blocking` indexes what it wrote): a baseline of schema 21 reads
        // the copy without it, and a newer one adds it again as it opens the copy.
        let waiting: i64 = c
            .query_row("SELECT count(*) FROM prompt_backlog", [], |r| r.get(0))
            .unwrap_or_else(|e| die("the prompt search backlog", e));
        if waiting != 0 {
            die(
                "the prompt search backlog",
                format!("{waiting} prompts wait"),
            );
        }
        c.execute_batch("DROP TABLE prompt_backlog; PRAGMA user_version = 21;")
            .unwrap_or_else(|e| die("bring the copy to schema 21", e));
    }
    if version == 13 {
        c.execute_batch(
            "BEGIN;
             CREATE VIRTUAL TABLE t_old USING fts5 (title, tokenize = 'unicode61 remove_diacritics 2');
             INSERT INTO t_old (rowid, title) SELECT rowid, title FROM session_search;
             DROP TABLE session_search;
             ALTER TABLE t_old RENAME TO session_search;
             CREATE VIRTUAL TABLE p_old USING fts5 (prompts, tokenize = 'unicode61 remove_diacritics 2');
             INSERT INTO p_old (rowid, prompts) SELECT rowid, prompts FROM session_search_prompts;
             DROP TABLE session_search_prompts;
             ALTER TABLE p_old RENAME TO session_search_prompts;
             PRAGMA user_version = 12;
             COMMIT;",
        )
        .unwrap_or_else(|e| die("bring the copy to schema 12", e));
    }
    start.elapsed().as_secs_f64()
}

fn short(n: usize) -> String {
    match n {
        n if n >= 1_000_000 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}
