//! Read queries against a workspace of 10,000, 100,000 and 1,000,000 sessions.
//!
//! ```text
//! cargo run --release --example bench_scale              # 10 k / 100 k / 1 M sessions (~5-10 min)
//! cargo run --release --example bench_scale -- --quick   # 10 k / 100 k
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
//! and the rare word `quetzal` in ten of the oldest sessions.
//!
//! For each size the real server runs in a child process on the data dir and one keep-alive
//! client measures, over HTTP, p50/p99 of: the list's first page, a keyset page from the middle
//! of the list, search for the common and for the rare word, `GET …/agent/sessions/activity`, a
//! 100-event history page, and, as the floor every figure includes, the detail of one session (a
//! primary-key lookup that does not grow). The last table gives every figure's growth against
//! the 10,000-session size of the same run.

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
const RARE: &str = "quetzal";
const RARE_COUNT: usize = 10;
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
    start.elapsed().as_secs_f64()
}

/// The server in a child process (this same executable with `--serve`), so that each size gets
/// a fresh server on the grown data dir.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(data_dir: &Path) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or_else(|e| die("pick port", e));
        let exe = std::env::current_exe().unwrap_or_else(|e| die("current exe", e));
        let log = std::fs::File::create(data_dir.with_extension("log"))
            .unwrap_or_else(|e| die("server log", e));
        let child = Command::new(exe)
            .arg("--serve")
            .arg(data_dir)
            .arg(format!("127.0.0.1:{port}"))
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

const NAMES: [&str; 8] = [
    "detail (floor)",
    "list, first page",
    "list, middle keyset page",
    "search, common word",
    "search, rare word",
    "activity",
    "history page",
    "list, asking bucket",
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
            check: |v| match sessions_len(v) {
                50 => Ok(()),
                n => Err(format!("{n} sessions, expected 50")),
            },
        },
        Query {
            name: NAMES[2],
            url: format!("{s}?limit=50&cursor={middle_cursor}"),
            check: |v| match sessions_len(v) {
                50 => Ok(()),
                n => Err(format!("{n} sessions, expected 50")),
            },
        },
        Query {
            name: NAMES[3],
            url: format!("{s}?limit=50&search={COMMON}"),
            check: |v| match sessions_len(v) {
                50 => Ok(()),
                n => Err(format!("{n} sessions, expected 50")),
            },
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
            name: NAMES[6],
            url: format!("{s}/{h}/history?before={}&limit=100", HISTORY_EVENTS / 2),
            check: |v| match v["events"].as_array().map_or(0, Vec::len) {
                100 => Ok(()),
                n => Err(format!("{n} events, expected 100")),
            },
        },
        Query {
            name: NAMES[7],
            url: format!("{s}?limit=50&bucket=asking"),
            check: |v| match sessions_len(v) {
                50 => Ok(()),
                n => Err(format!("{n} sessions, expected 50")),
            },
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

    let mut results: Vec<(usize, Vec<Lat>)> = Vec::new();
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
        let server = Server::start(&data_dir);
        let c = client(&api_key);
        let lats = rt.block_on(async {
            wait_healthy(&c, &server.base).await;
            let mut lats = Vec::new();
            for q in qs {
                let q = Query {
                    url: q.url.replacen("BASE", &server.base, 1),
                    ..q
                };
                let lat = measure(&c, &q).await;
                println!("   {:<26} {}", q.name, lat.line());
                lats.push(lat);
            }
            lats
        });
        drop(server);
        results.push((size, lats));
        seed.store = Store::open(&db, &Default::default(), Bus::new(1024, 1024))
            .unwrap_or_else(|e| die("reopen store", e));
    }
    seed.store.close();

    println!();
    println!(
        "== Growth: p50 / p99 at each size, and the ratio to {} sessions (target: within {TARGET_GROWTH}x) ==",
        thousands(sizes[0] as u64)
    );
    let (_, base) = &results[0];
    for (i, name) in NAMES.iter().enumerate() {
        let mut line = format!("   {name:<26}");
        for (size, lats) in &results {
            let l = &lats[i];
            line.push_str(&format!(
                " | {:>7}: {:>7.2} / {:>7.2} ms",
                short(*size),
                l.p(50.0),
                l.p(99.0)
            ));
            if *size != sizes[0] {
                line.push_str(&format!(
                    " ({:.2}x / {:.2}x)",
                    l.p(50.0) / base[i].p(50.0),
                    l.p(99.0) / base[i].p(99.0)
                ));
            }
        }
        println!("{line}");
    }
    if let Some((_, lats)) = results.iter().find(|(s, _)| *s == 100_000) {
        println!();
        println!(
            "   at 100,000: activity p99 {:.2} ms (target < {TARGET_ACTIVITY_P99_MS} ms), search p99 \
             common {:.2} ms / rare {:.2} ms (target < {TARGET_SEARCH_P99_MS} ms)",
            lats[5].p(99.0),
            lats[3].p(99.0),
            lats[4].p(99.0)
        );
    }
    println!("   load average at end: {}", loadavg());
}

fn short(n: usize) -> String {
    match n {
        n if n >= 1_000_000 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}
