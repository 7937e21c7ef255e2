//! Throughput and latency figures for sessiond's storage and HTTP paths.
//!
//! ```text
//! cargo run --release --example bench              # full run (~2-3 min on 2 cores)
//! cargo run --release --example bench -- --quick   # smaller sizes (< 30 s)
//! ```
//!
//! This is a measuring command, not a test: it prints figures, ratios and how they compare with
//! the targets, and asserts nothing about timing (it does check that the work was really done:
//! row counts, HTTP statuses, page sizes).
//!
//! 1. Durable event appends through `Store::write_one` (one append per write call, as a plain note
//!    makes it) at 1, 16 and 64 concurrent writers, each writer on its own session and all writers on
//!    one shared session, compared with raw rusqlite inserting the same number of rows into an
//!    identically shaped table in 1000-row transactions (same WAL / synchronous pragmas), and with
//!    raw inserts of the run's own shape (as many rows per transaction as there are writers, over
//!    as many sessions as the run); and the raw rate with what a gap-free `/v2` sequence would add to every event (a column and an
//!    index), against the plain raw rate.
//! 2. p50/p99 latency of `POST …/note` with 64 concurrent keep-alive HTTP clients against the real
//!    server, started in-process on a loopback port: first with the minimal client of
//!    `support/wire.rs` (the target's figure: it leaves the cores to the server), then with
//!    reqwest (as measured before it), then paced.
//! 3. p99 of a 100-event history page (`?before=` and `?cursor=`) on a session holding 1,000,000
//!    events (100,000 with `--quick`), seeded through the store writer before the server starts.
//! 4. The cost of a prompt (`prompt_submitted` appended and indexed for search, one `Store::write`
//!    job each, as `POST …/message` does) on a session that already holds 10 prompts and on one
//!    that holds 10,000 (2,000 with `--quick`), in alternating rounds of the same run: indexing a
//!    prompt must not grow with the session's history. `--prompts` runs only this section.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, params};
use serde_json::{Value, json};
use sessiond::bus::Bus;
use sessiond::config::{Config, StoreConfig};
use sessiond::store::seed::BareSession;
use sessiond::store::{self, SessionKey, Store};
use sessiond::timeline::{Event, Sender};

#[path = "support/report.rs"]
mod report;
#[path = "support/seed.rs"]
mod seed;
#[path = "support/wire.rs"]
mod wire;
use report::{flags, loadavg, thousands};

const TARGET_STORE_RATIO: f64 = 0.50;
const TARGET_NOTE_P99: Duration = Duration::from_millis(5);
const TARGET_HISTORY_P99: Duration = Duration::from_millis(2);
const WRITER_LEVELS: [usize; 3] = [1, 16, 64];
const NOTE_CLIENTS: usize = 64;
const RAW_BATCH: usize = 1000;
const PAGE: u64 = 100;

struct Opts {
    quick: bool,
    /// Appends per store run (per concurrency level and session layout).
    appends: usize,
    /// Raw baseline repetitions per level; the median is used.
    raw_reps: usize,
    /// Store runs per level and layout; the median rate is used.
    store_reps: usize,
    notes_warmup_per_client: usize,
    notes_per_client: usize,
    /// Offered rate (requests/s, all clients together) and duration of the paced note run.
    paced_rate: f64,
    paced_secs: Duration,
    history_events: u64,
    history_requests_per_kind: usize,
    /// Prompts already in the long session of section 4, and prompts timed per session.
    prompts_history: usize,
    prompts_timed: usize,
    /// Only section 4.
    prompts_only: bool,
}

impl Opts {
    fn parse() -> Opts {
        let on = flags(
            "bench",
            &[
                (
                    "--quick",
                    "smaller sizes (100,000-event history session, fewer appends and requests); finishes in well under 30 s",
                ),
                (
                    "--prompts",
                    "only the cost of a prompt on a short and on a long session (section 4)",
                ),
            ],
        );
        let (quick, prompts_only) = (on[0], on[1]);
        if quick {
            Opts {
                quick,
                appends: 6_400,
                raw_reps: 5,
                store_reps: 1,
                notes_warmup_per_client: 3,
                notes_per_client: 40,
                paced_rate: 1_000.0,
                paced_secs: Duration::from_millis(1_500),
                history_events: 100_000,
                history_requests_per_kind: 500,
                prompts_history: 2_000,
                prompts_timed: 300,
                prompts_only,
            }
        } else {
            Opts {
                quick,
                appends: 32_000,
                raw_reps: 5,
                store_reps: 3,
                notes_warmup_per_client: 10,
                notes_per_client: 250,
                paced_rate: 1_000.0,
                paced_secs: Duration::from_secs(5),
                history_events: 1_000_000,
                history_requests_per_kind: 2_000,
                prompts_history: 10_000,
                prompts_timed: 1_000,
                prompts_only,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers: percentiles, formatting, a deterministic PRNG (no extra dependency).

struct Lat {
    n: usize,
    mean: Duration,
    p50: Duration,
    p90: Duration,
    p99: Duration,
    p999: Duration,
    max: Duration,
}

impl Lat {
    fn of(mut v: Vec<Duration>) -> Lat {
        v.sort_unstable();
        let n = v.len();
        let pct = |p: f64| -> Duration {
            if n == 0 {
                return Duration::ZERO;
            }
            let rank = ((p / 100.0) * n as f64).ceil() as usize;
            v[rank.clamp(1, n) - 1]
        };
        let sum: Duration = v.iter().sum();
        Lat {
            n,
            mean: if n == 0 {
                Duration::ZERO
            } else {
                sum / n as u32
            },
            p50: pct(50.0),
            p90: pct(90.0),
            p99: pct(99.0),
            p999: pct(99.9),
            max: v.last().copied().unwrap_or_default(),
        }
    }

    fn line(&self) -> String {
        format!(
            "n={:<6} mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}",
            self.n,
            ms(self.mean),
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.p999),
            ms(self.max)
        )
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

fn rate(n: usize, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn fmt_rate(r: f64) -> String {
    format!("{}/s", thousands(r.round() as u64))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// splitmix64: enough randomness for picking page positions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

fn note_event(note: String) -> Event {
    Event::NoteSubmitted {
        note,
        sender: Sender::User {
            user_id: "bench".into(),
        },
        client_request_id: None,
        images: Vec::new(),
        attachments: Vec::new(),
    }
}

fn bench_note(i: usize) -> String {
    format!("bench note {i}: the quick brown fox jumps over the lazy dog")
}

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench: {what}: {e}");
    std::process::exit(1);
}

/// CPU seconds used so far by the whole process and by the bench's own client threads (named
/// `bench-client`); the rest is the in-process server. Linux only (`/proc`), assumes USER_HZ=100.
#[derive(Clone, Copy)]
struct Cpu {
    total: f64,
    client: f64,
}

fn stat_cpu_secs(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

fn cpu_now() -> Option<Cpu> {
    let total = stat_cpu_secs("/proc/self/stat")?;
    let mut client = 0.0;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let dir = task.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim_end().starts_with("bench-client") {
            client += stat_cpu_secs(&dir.join("stat").display().to_string()).unwrap_or(0.0);
        }
    }
    Some(Cpu { total, client })
}

// ---------------------------------------------------------------------------------------------
// 1. Store appends vs raw batched rusqlite.

/// How a raw baseline lays out its rows: how many go in one transaction, and over how many
/// sessions they are spread (round robin, each session's seqs 1, 2, 3…).
#[derive(Clone, Copy)]
struct RawShape {
    rows_per_tx: usize,
    sessions: usize,
}

/// The raw baseline of the issue's target: `RAW_BATCH`-row transactions into one session.
const RAW_BASELINE: RawShape = RawShape {
    rows_per_tx: RAW_BATCH,
    sessions: 1,
};

/// Inserts `rows` rows into a fresh WAL database in `RAW_BATCH`-row transactions with one
/// prepared statement; returns rows/s. Same table shape and pragmas as the store's `events`.
fn raw_batched(dir: &Path, rows: usize, body: &str) -> f64 {
    raw_inserts(dir, rows, body, false, RAW_BASELINE)
}

/// [`raw_batched`] with what a gap-free `/v2` (HAST) sequence would add to every append: a
/// column holding the event's first HAST sequence and an index to find an event by it.
fn raw_batched_hast(dir: &Path, rows: usize, body: &str) -> f64 {
    raw_inserts(dir, rows, body, true, RAW_BASELINE)
}

/// Raw inserts of the shape a closed loop of `writers` callers can give the store at best: at
/// most `writers` rows per commit (each caller has one append in flight), over `writers`
/// sessions (`own`) or one (`shared`). Where the rows of a commit fall in as many sessions, each
/// lands on its session's own last page of the `(session_pk, seq)` key, and the commit writes
/// every such page to the log in full: this is SQLite's own rate for that load, the ceiling of
/// any store that answers each caller after its commit.
fn raw_same_shape(dir: &Path, rows: usize, body: &str, writers: usize, shared: bool) -> f64 {
    let shape = RawShape {
        rows_per_tx: writers,
        sessions: if shared { 1 } else { writers },
    };
    raw_inserts(dir, rows, body, false, shape)
}

/// A fresh WAL database in `dir` with the raw baselines' `events` table (and, with `hast`, the
/// HAST sequence column and its index), with the store's pragmas.
fn open_raw_db(dir: &Path, hast: bool) -> Connection {
    let path = dir.join("raw.db");
    let conn = Connection::open(&path).unwrap_or_else(|e| die("open raw db", e));
    conn.busy_timeout(Duration::from_secs(10)).ok();
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
        .unwrap_or_else(|e| die("raw journal_mode", e));
    assert!(mode.eq_ignore_ascii_case("wal"), "raw db is not WAL");
    for (k, v) in [
        ("synchronous", "NORMAL"),
        ("foreign_keys", "ON"),
        ("temp_store", "MEMORY"),
        ("cache_size", "-32000"),
    ] {
        conn.pragma_update(None, k, v)
            .unwrap_or_else(|e| die("raw pragma", e));
    }
    conn.execute_batch(if hast {
        "CREATE TABLE events (
            session_pk INTEGER NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
            body TEXT NOT NULL, created_at INTEGER NOT NULL, hast_seq INTEGER NOT NULL,
            PRIMARY KEY (session_pk, seq)
         ) WITHOUT ROWID;
         CREATE INDEX events_by_hast ON events (session_pk, hast_seq);"
    } else {
        "CREATE TABLE events (
            session_pk INTEGER NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,
            body TEXT NOT NULL, created_at INTEGER NOT NULL,
            PRIMARY KEY (session_pk, seq)
         ) WITHOUT ROWID;"
    })
    .unwrap_or_else(|e| die("raw schema", e));
    conn
}

/// A raw insert's `created_at` (any fixed time: the baselines do not read it).
const RAW_NOW: i64 = 1_700_000_000_000;

fn raw_inserts(dir: &Path, rows: usize, body: &str, hast: bool, shape: RawShape) -> f64 {
    let conn = open_raw_db(dir, hast);
    let now = RAW_NOW;
    let start = Instant::now();
    let mut seqs = vec![0i64; shape.sessions.max(1)];
    let mut done = 0usize;
    while done < rows {
        let end = (done + shape.rows_per_tx.max(1)).min(rows);
        conn.execute_batch("BEGIN IMMEDIATE")
            .unwrap_or_else(|e| die("raw begin", e));
        {
            let mut stmt = conn
                .prepare_cached(if hast {
                    "INSERT INTO events (session_pk, seq, type, body, created_at, hast_seq)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
                } else {
                    "INSERT INTO events (session_pk, seq, type, body, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)"
                })
                .unwrap_or_else(|e| die("raw prepare", e));
            while done < end {
                let session = done % seqs.len();
                seqs[session] += 1;
                let (pk, seq) = (session as i64 + 1, seqs[session]);
                done += 1;
                // A note makes two HAST events (message.started, message.completed).
                let r = if hast {
                    stmt.execute(params![pk, seq, "note_submitted", body, now, 2 * seq - 1])
                } else {
                    stmt.execute(params![pk, seq, "note_submitted", body, now])
                };
                r.unwrap_or_else(|e| die("raw insert", e));
            }
        }
        conn.execute_batch("COMMIT")
            .unwrap_or_else(|e| die("raw commit", e));
    }
    let r = rate(rows, start.elapsed());
    let n: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap_or_else(|e| die("raw count", e));
    assert_eq!(n as usize, rows, "raw baseline row count");
    r
}

/// One insert for [`bare_group_commit`]'s writer: the session, and where to answer its seq.
type BareJob = (usize, tokio::sync::oneshot::Sender<i64>);

/// The least any store that answers each caller after its commit must do, with the store's own
/// plumbing and nothing else: `writers` tokio tasks each send one insert at a time over a bounded
/// channel to a writer thread, which takes what is queued, inserts it in one transaction
/// (prepared statement, pre-encoded body, seqs counted in memory), commits, and answers each
/// caller through a oneshot, as `Store::write_one` is answered. No event encoding, projection
/// row, bus frames or savepoints. Returns inserts/s.
fn bare_group_commit(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    total: usize,
    body: &str,
    writers: usize,
    shared: bool,
) -> f64 {
    let conn = open_raw_db(dir, false);
    let sessions = if shared { 1 } else { writers };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<BareJob>(4096);
    let body = body.to_owned();
    let writer = std::thread::spawn(move || {
        let mut seqs = vec![0i64; sessions];
        let mut batch: Vec<BareJob> = Vec::with_capacity(512);
        while let Some(first) = rx.blocking_recv() {
            batch.push(first);
            store::take_queued(&mut rx, &mut batch, 512);
            conn.execute_batch("BEGIN IMMEDIATE")
                .unwrap_or_else(|e| die("bare begin", e));
            let mut answers = Vec::with_capacity(batch.len());
            {
                let mut stmt = conn
                    .prepare_cached(
                        "INSERT INTO events (session_pk, seq, type, body, created_at)
                         VALUES (?1, ?2, ?3, ?4, ?5)",
                    )
                    .unwrap_or_else(|e| die("bare prepare", e));
                for (session, answer) in batch.drain(..) {
                    seqs[session] += 1;
                    let (pk, seq) = (session as i64 + 1, seqs[session]);
                    stmt.execute(params![pk, seq, "note_submitted", body, RAW_NOW])
                        .unwrap_or_else(|e| die("bare insert", e));
                    answers.push((answer, seq));
                }
            }
            conn.execute_batch("COMMIT")
                .unwrap_or_else(|e| die("bare commit", e));
            for (answer, seq) in answers {
                let _ = answer.send(seq);
            }
        }
    });
    let start = Instant::now();
    rt.block_on(async {
        let mut tasks = Vec::with_capacity(writers);
        for w in 0..writers {
            let n = total / writers + usize::from(w < total % writers);
            let (tx, session) = (tx.clone(), if shared { 0 } else { w });
            tasks.push(tokio::spawn(async move {
                for _ in 0..n {
                    let (answer, answered) = tokio::sync::oneshot::channel();
                    tx.send((session, answer))
                        .await
                        .unwrap_or_else(|e| die("bare send", e));
                    answered.await.unwrap_or_else(|e| die("bare answer", e));
                }
            }));
        }
        for t in tasks {
            t.await.unwrap_or_else(|e| die("bare writer task", e));
        }
    });
    let r = rate(total, start.elapsed());
    drop(tx);
    writer
        .join()
        .unwrap_or_else(|_| die("bare writer", "panicked"));
    r
}

struct StoreRun {
    rate: f64,
    lat: Vec<Duration>,
}

/// A read-only connection of the bench's own to a store's file, for the checks after a run.
fn raw_reader(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|e| die("open a reader", e));
    c.busy_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| die("busy timeout", e));
    c
}

fn open_bench_store(path: &Path) -> (Store, String, String) {
    let store = Store::open(path, &StoreConfig::default(), Bus::new(1024, 1024))
        .unwrap_or_else(|e| die("open store", e));
    let ws = store
        .directory()
        .ensure_workspace_blocking("bench", "Bench")
        .unwrap_or_else(|e| die("create workspace", e));
    let agent = store
        .directory()
        .agent_by_slug_blocking(&ws, "root")
        .unwrap_or_else(|e| die("root agent", e))
        .unwrap_or_else(|| die("root agent", "missing"))
        .id;
    (store, ws, agent)
}

fn insert_sessions(
    store: &Store,
    ws: &str,
    agent: &str,
    n: usize,
    user: &str,
    title: &str,
) -> Vec<SessionKey> {
    let bare = BareSession {
        workspace_id: ws.to_owned(),
        agent_id: agent.to_owned(),
        user_id: user.to_owned(),
        title: title.to_owned(),
    };
    store
        .seed()
        .sessions_blocking(vec![bare; n])
        .unwrap_or_else(|e| die("insert sessions", e))
}

/// `total` appends from `writers` tasks, one durable append per `Store::write_one` (the path of a
/// plain `POST …/note`), or per `Store::write` (a job in its own savepoint) with `savepoint`.
fn store_appends(
    rt: &tokio::runtime::Runtime,
    writers: usize,
    total: usize,
    shared: bool,
    savepoint: bool,
) -> StoreRun {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
    let db = tmp.path().join("store.db");
    let (store, ws, agent) = open_bench_store(&db);
    let keys = insert_sessions(
        &store,
        &ws,
        &agent,
        if shared { 1 } else { writers },
        "bench",
        "bench",
    );

    // Warm-up: prepares the cached statements and grows the WAL a little.
    let warm = 200usize;
    rt.block_on(async {
        for i in 0..warm {
            let key = keys[i % keys.len()].clone();
            let ev = note_event(bench_note(i));
            store
                .seed()
                .append_one(&key, ev)
                .await
                .unwrap_or_else(|e| die("warm-up append", e));
        }
    });

    let start = Instant::now();
    let lats: Vec<Duration> = rt.block_on(async {
        let mut tasks = Vec::with_capacity(writers);
        for w in 0..writers {
            let n = total / writers + usize::from(w < total % writers);
            let store = store.clone();
            let key = keys[if shared { 0 } else { w }].clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(n);
                for i in 0..n {
                    let key = key.clone();
                    let ev = note_event(bench_note(i));
                    let t = Instant::now();
                    let appended = if savepoint {
                        store.seed().append_in_savepoint(&key, ev).await
                    } else {
                        store.seed().append_one(&key, ev).await
                    };
                    appended.unwrap_or_else(|e| die("append", e));
                    lat.push(t.elapsed());
                }
                lat
            }));
        }
        let mut all = Vec::with_capacity(total);
        for t in tasks {
            all.extend(t.await.unwrap_or_else(|e| die("writer task", e)));
        }
        all
    });
    let elapsed = start.elapsed();

    // Checked on a connection of its own: what any reader of the file sees after COMMIT.
    let check = raw_reader(&db);
    let stored: i64 = check
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap_or_else(|e| die("count events", e));
    assert_eq!(stored as usize, total + warm, "store row count");
    if shared {
        // Seq allocation must be gap-free under contention.
        let max_seq: i64 = check
            .query_row("SELECT max(seq) FROM events", [], |r| r.get(0))
            .unwrap_or_else(|e| die("max seq", e));
        assert_eq!(
            max_seq as usize,
            total + warm,
            "shared session seqs are not dense"
        );
    }
    store.close();
    StoreRun {
        rate: rate(total, elapsed),
        lat: lats,
    }
}

struct AppendRow {
    writers: usize,
    raw: f64,
    /// Raw inserts of the shape of the `own` and the `shared` runs ([`raw_same_shape`]).
    raw_own: f64,
    raw_shared: f64,
    /// The same appends through [`bare_group_commit`], own sessions and one shared.
    bare_own: f64,
    bare_shared: f64,
    own: StoreRun,
    shared: StoreRun,
}

/// The same appends as `own`, each a `Store::write` job in its own savepoint: the rate and p99.
struct SavepointRun {
    rate: f64,
    p99: Duration,
}

/// Median rate of several runs, latencies pooled over all of them.
fn combine(runs: Vec<StoreRun>) -> StoreRun {
    let rate = median(runs.iter().map(|r| r.rate).collect());
    let lat = runs.into_iter().flat_map(|r| r.lat).collect();
    StoreRun { rate, lat }
}

fn section_appends(opts: &Opts, rt: &tokio::runtime::Runtime) -> Vec<AppendRow> {
    let body = serde_json::to_string(&note_event(bench_note(12345))).expect("encode");
    println!("== 1. Durable event appends: Store::write_one vs raw batched rusqlite ==");
    println!(
        "   {} appends per run; one append (INSERT events; the writer keeps the counters and \
         writes them to the session row once per batch) per Store::write_one call (no savepoint), \
         callers answered after COMMIT; 'savepoint' = the same appends as 'own', each a \
         Store::write job in its own savepoint; writers are tokio tasks on a {}-thread \
         runtime; store rate = median of {} runs, latencies pooled over them.",
        thousands(opts.appends as u64),
        rt.metrics().num_workers(),
        opts.store_reps
    );
    println!(
        "   'own' = one session per writer, 'shared' = all writers append to one session (seq \
         allocation contended). Raw = same row count, fresh WAL db, synchronous=NORMAL, \
         prepared INSERT, {RAW_BATCH} rows/tx, median of {} runs. Event body {} bytes.",
        opts.raw_reps,
        body.len()
    );
    println!();
    println!(
        "   {:>7}  {:>13}  {:>13} {:>6}  {:>13} {:>6}   {:>24}   {:>24}   {:>24}",
        "writers",
        "raw rows/s",
        "own ev/s",
        "ratio",
        "shared ev/s",
        "ratio",
        "own latency p50 / p99",
        "shared latency p50 / p99",
        "savepoint ev/s ratio p99"
    );
    let mut rows = Vec::new();
    for &writers in &WRITER_LEVELS {
        // Interleaved so that a noisy neighbour hurts all three alike.
        let (mut raws, mut owns, mut shareds, mut savepoints) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut raw_owns, mut raw_shareds) = (Vec::new(), Vec::new());
        let (mut bare_owns, mut bare_shareds) = (Vec::new(), Vec::new());
        for rep in 0..opts.raw_reps.max(opts.store_reps) {
            if rep < opts.raw_reps {
                let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
                raws.push(raw_batched(tmp.path(), opts.appends, &body));
                let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
                raw_owns.push(raw_same_shape(
                    tmp.path(),
                    opts.appends,
                    &body,
                    writers,
                    false,
                ));
                let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
                raw_shareds.push(raw_same_shape(
                    tmp.path(),
                    opts.appends,
                    &body,
                    writers,
                    true,
                ));
                for (shared, into) in [(false, &mut bare_owns), (true, &mut bare_shareds)] {
                    let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
                    into.push(bare_group_commit(
                        rt,
                        tmp.path(),
                        opts.appends,
                        &body,
                        writers,
                        shared,
                    ));
                }
            }
            if rep < opts.store_reps {
                owns.push(store_appends(rt, writers, opts.appends, false, false));
                shareds.push(store_appends(rt, writers, opts.appends, true, false));
                savepoints.push(store_appends(rt, writers, opts.appends, false, true));
            }
        }
        let raw = median(raws);
        let (raw_own, raw_shared) = (median(raw_owns), median(raw_shareds));
        let (bare_own, bare_shared) = (median(bare_owns), median(bare_shareds));
        let (own, shared) = (combine(owns), combine(shareds));
        let (own_lat, shared_lat) = (Lat::of(own.lat.clone()), Lat::of(shared.lat.clone()));
        let savepoint = combine(savepoints);
        let savepoint = SavepointRun {
            rate: savepoint.rate,
            p99: Lat::of(savepoint.lat).p99,
        };
        println!(
            "   {:>7}  {:>13}  {:>13} {:>5.1}%  {:>13} {:>5.1}%   {:>24}   {:>24}   {:>24}",
            writers,
            fmt_rate(raw),
            fmt_rate(own.rate),
            100.0 * own.rate / raw,
            fmt_rate(shared.rate),
            100.0 * shared.rate / raw,
            format!("{} / {}", ms(own_lat.p50), ms(own_lat.p99)),
            format!("{} / {}", ms(shared_lat.p50), ms(shared_lat.p99)),
            format!(
                "{} {:.1}% {}",
                fmt_rate(savepoint.rate),
                100.0 * savepoint.rate / raw,
                ms(savepoint.p99)
            ),
        );
        rows.push(AppendRow {
            writers,
            raw,
            raw_own,
            raw_shared,
            bare_own,
            bare_shared,
            own,
            shared,
        });
    }
    println!();
    println!(
        "   The same appends against raw inserts of their own shape (at most as many rows per \
         commit as there are writers, each having one append in flight, over as many sessions \
         as the run's, own, or one, shared) and against a bare group commit (the same callers, \
         channel, writer thread, transaction per batch and oneshot answers as the store, \
         inserting a pre-encoded row and nothing else), median of {} runs; ratio = store / bare.",
        opts.raw_reps
    );
    println!(
        "   {:>7}  {:>14} {:>12} {:>12} {:>6}  {:>14} {:>12} {:>12} {:>6}",
        "writers",
        "raw, own shape",
        "bare, own",
        "own ev/s",
        "ratio",
        "raw, shared",
        "bare, shared",
        "shared ev/s",
        "ratio"
    );
    for row in &rows {
        println!(
            "   {:>7}  {:>14} {:>12} {:>12} {:>5.1}%  {:>14} {:>12} {:>12} {:>5.1}%",
            row.writers,
            fmt_rate(row.raw_own),
            fmt_rate(row.bare_own),
            fmt_rate(row.own.rate),
            100.0 * row.own.rate / row.bare_own,
            fmt_rate(row.raw_shared),
            fmt_rate(row.bare_shared),
            fmt_rate(row.shared.rate),
            100.0 * row.shared.rate / row.bare_shared,
        );
    }
    // What numbering `/v2` (HAST) events without gaps would cost every append: the count of HAST
    // events so far, stored beside each event and indexed to find an event by it. sessiond
    // numbers them `seq x 10 + i` instead, which costs nothing here.
    let (mut plain, mut hast) = (Vec::new(), Vec::new());
    for _ in 0..opts.raw_reps {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
        plain.push(raw_batched(tmp.path(), opts.appends, &body));
        let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
        hast.push(raw_batched_hast(tmp.path(), opts.appends, &body));
    }
    let (plain, hast) = (median(plain), median(hast));
    println!(
        "   gap-free HAST numbering (a sequence column and its index on events), raw: {} vs {} \
         without = {:.1}% of the plain rate (median of {} runs each, interleaved)",
        fmt_rate(hast),
        fmt_rate(plain),
        100.0 * hast / plain,
        opts.raw_reps
    );
    println!();
    rows
}

// ---------------------------------------------------------------------------------------------
// Seeding the history session (before the server starts, on the server's own data dir).

struct Seeded {
    /// API key of the bench's owner account (`Authorization: Bearer`).
    api_key: String,
    session_id: String,
    pk: i64,
    events: u64,
    secs: f64,
    avg_body: f64,
    db_bytes: u64,
}

fn seed_history(cfg: &Config, events: u64) -> Seeded {
    std::fs::create_dir_all(&cfg.data_dir).unwrap_or_else(|e| die("data dir", e));
    let db = cfg.db_path();
    let store = Store::open(&db, &cfg.store, Bus::new(1024, 1024))
        .unwrap_or_else(|e| die("open seed store", e));
    // The server only serves authenticated requests: create an owner and an API key for the
    // bench (what `sessiond user create` + `sessiond token create` do).
    let seed::Owner {
        workspace: ws,
        agent,
        user,
        api_key,
    } = seed::owner(&store).unwrap_or_else(|e| die("seed workspace and credentials", e));
    let key = insert_sessions(&store, &ws, &agent, 1, &user, "history bench").remove(0);
    let start = Instant::now();
    const CHUNK: u64 = 5_000;
    let mut lo = 1u64;
    while lo <= events {
        let hi = (lo + CHUNK - 1).min(events);
        let notes = (lo..=hi)
            .map(|i| {
                // Bodies of varying length (roughly 90-250 bytes).
                let pad = "lorem ipsum ".repeat((i % 14) as usize);
                note_event(format!("seeded note {i} {pad}"))
            })
            .collect();
        store
            .seed()
            .events_blocking(&key, notes)
            .unwrap_or_else(|e| die("seed append", e));
        lo = hi + 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let (n, avg): (i64, f64) = raw_reader(&db)
        .query_row(
            "SELECT count(*), avg(length(body)) FROM events WHERE session_pk = ?1",
            [key.pk],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap_or_else(|e| die("seed count", e));
    assert_eq!(n as u64, events, "seeded event count");
    store.close();
    let db_bytes = ["", "-wal"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{}{s}", db.display())).ok())
        .map(|m| m.len())
        .sum();
    Seeded {
        api_key,
        session_id: key.id,
        pk: key.pk,
        events,
        secs,
        avg_body: avg,
        db_bytes,
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers.

/// The bench owner's API key, sent on every request once seeding has created it.
static API_KEY: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn http_client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(key) = API_KEY.get() {
        let value = format!("Bearer {key}")
            .parse()
            .unwrap_or_else(|e| die("authorization header", e));
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    sessiond::tls::client_builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1)
        .default_headers(headers)
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_else(|e| die("http client", e))
}

async fn wait_healthy(base: &str) {
    seed::wait_healthy(&http_client(), base, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| die("server", e));
}

async fn get_json(client: &reqwest::Client, url: &str) -> Value {
    let r = client.get(url).send().await.unwrap_or_else(|e| die(url, e));
    let status = r.status();
    let text = r.text().await.unwrap_or_else(|e| die(url, e));
    if !status.is_success() {
        die(url, format!("{status}: {text}"));
    }
    serde_json::from_str(&text).unwrap_or_else(|e| die(url, e))
}

// ---------------------------------------------------------------------------------------------
// 2. POST …/note latency at 64 concurrent clients.

/// One closed-loop run of the 64 note clients.
struct ClosedLoop {
    lat: Lat,
    throughput: f64,
    errors: usize,
    first_error: Option<String>,
    /// (server, client) CPU seconds during the timed run, and its wall time.
    cpu: Option<(f64, f64)>,
    wall: f64,
}

struct NoteResult {
    /// With the minimal client (the figure the target is for), then with reqwest.
    wire: ClosedLoop,
    reqwest: ClosedLoop,
    last_event_seq: u64,
    paced: Lat,
    paced_rate: f64,
    paced_errors: usize,
}

/// Which HTTP client the note runs use: a minimal keep-alive client (`support/wire.rs`, the
/// figure the target is for: it leaves the cores to the server) or reqwest (the figure as it was
/// measured before, for comparison).
#[derive(Clone, Copy, PartialEq, Eq)]
enum ClientKind {
    Wire,
    Reqwest,
}

/// Where the notes go: the URL for reqwest, the address and path for the minimal client.
struct NoteTarget {
    url: String,
    addr: std::net::SocketAddr,
    path: String,
}

/// One note client's connection.
enum NoteClient {
    Wire(wire::Wire),
    Reqwest(reqwest::Client),
}

impl NoteClient {
    async fn open(kind: ClientKind, target: &NoteTarget) -> NoteClient {
        match kind {
            ClientKind::Wire => NoteClient::Wire(
                wire::Wire::connect(target.addr, API_KEY.get().map(String::as_str))
                    .await
                    .unwrap_or_else(|e| die("note client", e)),
            ),
            ClientKind::Reqwest => NoteClient::Reqwest(http_client()),
        }
    }

    async fn post_note(&mut self, target: &NoteTarget, note: String) -> Result<(), String> {
        let body = serde_json::to_vec(&json!({ "note": note })).map_err(|e| e.to_string())?;
        match self {
            NoteClient::Wire(w) => {
                let r = w.post_json(&target.path, &body).await?;
                if r.is_success() {
                    Ok(())
                } else {
                    Err(format!("{}: {}", r.status, r.text()))
                }
            }
            NoteClient::Reqwest(client) => {
                let r = client
                    .post(&target.url)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body)
                    .send()
                    .await
                    .map_err(|e| e.to_string())?;
                let status = r.status();
                let body = r.bytes().await.map_err(|e| e.to_string())?;
                if status.is_success() {
                    Ok(())
                } else {
                    Err(format!("{status}: {}", String::from_utf8_lossy(&body)))
                }
            }
        }
    }
}

/// Closed loop: every client sends its next note as soon as the previous one is answered.
async fn notes_closed_loop(
    target: Arc<NoteTarget>,
    kind: ClientKind,
    warm: usize,
    n: usize,
) -> (
    Vec<Duration>,
    usize,
    Option<String>,
    Duration,
    Option<(f64, f64)>,
) {
    let barrier = Arc::new(tokio::sync::Barrier::new(NOTE_CLIENTS + 1));
    let done = Arc::new(tokio::sync::Barrier::new(NOTE_CLIENTS + 1));
    let mut tasks = Vec::new();
    for c in 0..NOTE_CLIENTS {
        let (target, barrier, done) =
            (Arc::clone(&target), Arc::clone(&barrier), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            // One client (one keep-alive connection) per simulated user.
            let mut client = NoteClient::open(kind, &target).await;
            for i in 0..warm {
                let _ = client
                    .post_note(&target, format!("warm-up note {c}-{i}"))
                    .await;
            }
            barrier.wait().await;
            let (mut lat, mut errors, mut first_error) = (Vec::with_capacity(n), 0, None);
            for i in 0..n {
                let t = Instant::now();
                let res = client
                    .post_note(&target, format!("note {c}-{i} from the bench"))
                    .await;
                lat.push(t.elapsed());
                if let Err(e) = res {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
            }
            done.wait().await;
            (lat, errors, first_error)
        }));
    }
    barrier.wait().await;
    let (start, cpu0) = (Instant::now(), cpu_now());
    done.wait().await;
    let (elapsed, cpu1) = (start.elapsed(), cpu_now());
    let cpu = cpu0.zip(cpu1).map(|(a, b)| {
        let client = b.client - a.client;
        (b.total - a.total - client, client)
    });
    let mut lat = Vec::new();
    let (mut errors, mut first_error) = (0, None);
    for t in tasks {
        let (l, e, f) = t.await.unwrap_or_else(|e| die("note client", e));
        lat.extend(l);
        errors += e;
        if first_error.is_none() {
            first_error = f;
        }
    }
    (lat, errors, first_error, elapsed, cpu)
}

/// Paced: the same 64 clients, each sending at a fixed interval so that the server is far from
/// saturated; shows the service latency without the queueing of the closed loop.
async fn notes_paced(
    target: Arc<NoteTarget>,
    total_rate: f64,
    dur: Duration,
) -> (Vec<Duration>, usize) {
    let period = Duration::from_secs_f64(NOTE_CLIENTS as f64 / total_rate);
    let start = tokio::time::Instant::now() + Duration::from_millis(200);
    let end = start + dur;
    let mut tasks = Vec::new();
    for c in 0..NOTE_CLIENTS {
        let target = Arc::clone(&target);
        tasks.push(tokio::spawn(async move {
            let mut client = NoteClient::open(ClientKind::Wire, &target).await;
            let _ = client
                .post_note(&target, format!("paced warm-up {c}"))
                .await;
            let first = start + period.mul_f64(c as f64 / NOTE_CLIENTS as f64);
            let mut tick = tokio::time::interval_at(first, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let (mut lat, mut errors) = (Vec::new(), 0);
            let mut i = 0;
            loop {
                if tick.tick().await >= end {
                    break;
                }
                let t = Instant::now();
                if client
                    .post_note(&target, format!("paced note {c}-{i}"))
                    .await
                    .is_err()
                {
                    errors += 1;
                }
                lat.push(t.elapsed());
                i += 1;
            }
            (lat, errors)
        }));
    }
    let mut lat = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap_or_else(|e| die("paced client", e));
        lat.extend(l);
        errors += e;
    }
    (lat, errors)
}

async fn section_notes(opts: &Opts, base: &str) -> NoteResult {
    let sessions = format!("{base}/v1/ws/default/agent/sessions");
    let client = http_client();
    let r = client
        .post(&sessions)
        .json(&json!({"prompt": "bench"}))
        .send()
        .await
        .unwrap_or_else(|e| die("create session", e));
    let status = r.status();
    let created: Value = r.json().await.unwrap_or_else(|e| die("create session", e));
    if !status.is_success() {
        die("create session", format!("{status}: {created}"));
    }
    let id = created["session"]["sessionId"]
        .as_str()
        .unwrap_or_else(|| die("create session", format!("no session id in {created}")))
        .to_owned();
    // Let the scripted turn for the prompt finish so it does not overlap the measurement.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let d = get_json(&client, &format!("{sessions}/{id}")).await;
        if d["turnStatus"].as_str() != Some("running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before_seq = get_json(&client, &format!("{sessions}/{id}")).await["lastEventSeq"]
        .as_u64()
        .unwrap_or(0);

    let addr = base
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| die("server address", base));
    let target = Arc::new(NoteTarget {
        url: format!("{sessions}/{id}/note"),
        addr,
        path: format!("/v1/ws/default/agent/sessions/{id}/note"),
    });
    let (warm, n) = (opts.notes_warmup_per_client, opts.notes_per_client);
    let mut runs = Vec::new();
    for kind in [ClientKind::Wire, ClientKind::Reqwest] {
        let (lat, errors, first_error, elapsed, cpu) =
            notes_closed_loop(Arc::clone(&target), kind, warm, n).await;
        let timed = lat.len();
        runs.push(ClosedLoop {
            lat: Lat::of(lat),
            throughput: rate(timed, elapsed),
            errors,
            first_error,
            cpu,
            wall: elapsed.as_secs_f64(),
        });
    }
    let last_event_seq = get_json(&client, &format!("{sessions}/{id}")).await["lastEventSeq"]
        .as_u64()
        .unwrap_or(0);
    let expected = before_seq + (2 * NOTE_CLIENTS * (n + warm)) as u64;
    if runs.iter().all(|r| r.errors == 0) && last_event_seq < expected {
        die(
            "notes",
            format!("session has lastEventSeq {last_event_seq}, expected at least {expected}"),
        );
    }
    let (paced, paced_errors) = notes_paced(target, opts.paced_rate, opts.paced_secs).await;
    let reqwest = runs.pop().unwrap_or_else(|| die("notes", "no reqwest run"));
    let wire = runs
        .pop()
        .unwrap_or_else(|| die("notes", "no minimal-client run"));
    NoteResult {
        wire,
        reqwest,
        last_event_seq,
        paced: Lat::of(paced),
        paced_rate: opts.paced_rate,
        paced_errors,
    }
}

// ---------------------------------------------------------------------------------------------
// 3. History page latency on a big session.

struct HistoryResult {
    before: Lat,
    cursor: Lat,
    all: Lat,
    sql_before: Lat,
    sql_cursor: Lat,
    avg_page_bytes: f64,
}

async fn section_history(opts: &Opts, base: &str, seeded: &Seeded, db: &Path) -> HistoryResult {
    let url = format!(
        "{base}/v1/ws/default/agent/sessions/{}/history",
        seeded.session_id
    );
    let client = http_client();
    let n = seeded.events;
    let mut rng = Rng(0x5EED);
    // `before` in PAGE+1..=n+1 and `cursor` in 0..=n-PAGE: every page holds exactly PAGE events.
    let mut pick = |i: usize| -> (bool, u64) {
        if i.is_multiple_of(2) {
            (true, rng.range(PAGE + 1, n + 1))
        } else {
            (false, rng.range(0, n - PAGE))
        }
    };
    let fetch = |before: bool, pos: u64| {
        let q = if before { "before" } else { "cursor" };
        client.get(format!("{url}?{q}={pos}&limit={PAGE}")).send()
    };

    // Warm-up, also checking the page shape.
    for i in 0..200 {
        let (b, pos) = pick(i);
        let r = fetch(b, pos).await.unwrap_or_else(|e| die("history", e));
        let status = r.status();
        let text = r.text().await.unwrap_or_else(|e| die("history", e));
        if !status.is_success() {
            die("history", format!("{status}: {text}"));
        }
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| die("history", e));
        let events = v["events"].as_array().map(Vec::len).unwrap_or(0);
        if events as u64 != PAGE {
            die(
                "history",
                format!("page has {events} events, expected {PAGE}"),
            );
        }
        let first = v["events"][0]["seq"].as_u64().unwrap_or(0);
        let want = if b { pos - PAGE } else { pos + 1 };
        if first != want {
            die(
                "history",
                format!("page starts at seq {first}, expected {want}"),
            );
        }
    }

    let total = opts.history_requests_per_kind * 2;
    let (mut lb, mut lc, mut la) = (Vec::new(), Vec::new(), Vec::new());
    let mut bytes = 0usize;
    for i in 0..total {
        let (b, pos) = pick(i);
        let t = Instant::now();
        let r = fetch(b, pos).await.unwrap_or_else(|e| die("history", e));
        let status = r.status();
        let body = r.bytes().await.unwrap_or_else(|e| die("history", e));
        let d = t.elapsed();
        if !status.is_success() {
            die(
                "history",
                format!("{status}: {}", String::from_utf8_lossy(&body)),
            );
        }
        bytes += body.len();
        la.push(d);
        if b { lb.push(d) } else { lc.push(d) }
    }

    // The same queries straight on a read-only connection, without HTTP, for comparison.
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|e| die("open db read-only", e));
    let (mut sb, mut sc) = (Vec::new(), Vec::new());
    for i in 0..total + 200 {
        let (b, pos) = pick(i);
        let t = Instant::now();
        // The store's own statements (`events_before` / `events_after`), on a raw connection.
        let page = if b {
            raw_page(
                &conn,
                "SELECT seq, created_at, type, body FROM events
                 WHERE session_pk = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3",
                seeded.pk,
                pos as i64,
            )
        } else {
            raw_page(
                &conn,
                "SELECT seq, created_at, type, body FROM events
                 WHERE session_pk = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                seeded.pk,
                pos as i64,
            )
        }
        .unwrap_or_else(|e| die("sql page", e));
        let d = t.elapsed();
        assert_eq!(page.len() as u64, PAGE + 1, "sql page size");
        if i >= 200 {
            if b { sb.push(d) } else { sc.push(d) }
        }
    }

    HistoryResult {
        before: Lat::of(lb),
        cursor: Lat::of(lc),
        all: Lat::of(la),
        sql_before: Lat::of(sb),
        sql_cursor: Lat::of(sc),
        avg_page_bytes: bytes as f64 / total as f64,
    }
}

// ---------------------------------------------------------------------------------------------
// 4. The cost of a prompt on a short and on a long session.

const PROMPTS_SHORT: usize = 10;
const PROMPTS_PER_SEED_JOB: usize = 250;
const PROMPT_ROUNDS: usize = 10;
const TARGET_PROMPT_GROWTH: f64 = 2.0;
const PROMPT_WORDS: [&str; 12] = [
    "billing", "cache", "deploy", "export", "gateway", "invoice", "ledger", "metrics", "parser",
    "queue", "router", "schema",
];

/// A short chat message (~100 bytes) whose words vary with `i`; `tag` makes one findable.
fn prompt_text(i: usize, tag: &str) -> String {
    let w = |k: usize| PROMPT_WORDS[(i / k) % PROMPT_WORDS.len()];
    format!(
        "{tag} please look at the {} {} and tell me what changed in the {} since release {i}",
        w(1),
        w(3),
        w(7)
    )
}

/// Appends and indexes prompts `from..from + n` in one write job, as the message path does each.
fn seed_prompts(store: &Store, key: &SessionKey, from: usize, n: usize, tag: &str) {
    let texts = (from..from + n).map(|i| prompt_text(i, if i == 0 { tag } else { "" }));
    seed::write_prompts(store, key, texts).unwrap_or_else(|e| die("seed prompts", e));
}

struct PromptResult {
    history: usize,
    seed_secs: f64,
    /// Per prompt: the job's own time inside the writer (append + index), and the whole write
    /// call (queue, job, commit, answer).
    short_job: report::Lat,
    short_call: report::Lat,
    long_job: report::Lat,
    long_call: report::Lat,
}

/// One page of a session's events by `sql` (`?1` the session, `?2` the position, `?3` the page
/// size plus one), each row read as the store reads it.
fn raw_page(
    conn: &Connection,
    sql: &str,
    pk: i64,
    pos: i64,
) -> rusqlite::Result<Vec<(i64, i64, String, String)>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let rows = stmt.query_map(rusqlite::params![pk, pos, PAGE as i64 + 1], |r| {
        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
    })?;
    rows.collect()
}

fn section_prompts(opts: &Opts, rt: &tokio::runtime::Runtime) -> PromptResult {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
    let (store, ws, agent) = open_bench_store(&tmp.path().join("store.db"));
    let keys = insert_sessions(&store, &ws, &agent, 2, "bench", "bench");
    let (short, long) = (keys[0].clone(), keys[1].clone());
    seed_prompts(&store, &short, 0, PROMPTS_SHORT, "shortfirstprompt");
    let t = Instant::now();
    let mut seeded = 0;
    while seeded < opts.prompts_history {
        let n = PROMPTS_PER_SEED_JOB.min(opts.prompts_history - seeded);
        seed_prompts(&store, &long, seeded, n, "longfirstprompt");
        seeded += n;
    }
    let seed_secs = t.elapsed().as_secs_f64();

    let mut lats: [(report::Lat, report::Lat); 2] = Default::default();
    let mut next = [PROMPTS_SHORT, opts.prompts_history];
    let per_round = opts.prompts_timed / PROMPT_ROUNDS;
    rt.block_on(async {
        for round in 0..PROMPT_ROUNDS {
            // Alternate which session goes first, so that neither always meets a warmer cache.
            for k in [round % 2, 1 - round % 2] {
                let key = if k == 0 { &short } else { &long };
                for _ in 0..per_round {
                    let i = next[k];
                    next[k] += 1;
                    let t = Instant::now();
                    let text = prompt_text(i, "");
                    let job = store
                        .seed()
                        .prompt(key, seed::prompt_event(text.clone()), text)
                        .await
                        .unwrap_or_else(|e| die("prompt", e));
                    lats[k].1.push(t.elapsed());
                    lats[k].0.push(job);
                }
            }
        }
    });
    // The work was done: every prompt is an event, and each session's first prompt (one of many
    // in the long session) is still found by search.
    let conn = Connection::open_with_flags(
        tmp.path().join("store.db"),
        OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap_or_else(|e| die("open db read-only", e));
    for (key, n, tag) in [
        (&short, next[0], "shortfirstprompt"),
        (&long, next[1], "longfirstprompt"),
    ] {
        let events: i64 = conn
            .query_row(
                "SELECT count(*) FROM events WHERE session_pk = ?1",
                [key.pk],
                |r| r.get(0),
            )
            .unwrap_or_else(|e| die("count prompts", e));
        assert_eq!(events as usize, n, "prompt events");
        let q = store::projections::SessionList {
            search: Some(tag.to_owned()),
            limit: 10,
            ..Default::default()
        };
        let found = rt
            .block_on(store.projections().list(&ws, "bench", q))
            .unwrap_or_else(|e| die("search", e));
        assert_eq!(
            found.0.iter().map(|r| r.pk).collect::<Vec<_>>(),
            [key.pk],
            "search for the first prompt of a session"
        );
    }
    store.close();
    let [
        (mut short_job, mut short_call),
        (mut long_job, mut long_call),
    ] = lats;
    for l in [
        &mut short_job,
        &mut short_call,
        &mut long_job,
        &mut long_call,
    ] {
        l.sort();
    }
    PromptResult {
        history: opts.prompts_history,
        seed_secs,
        short_job,
        short_call,
        long_job,
        long_call,
    }
}

fn print_prompts(p: &PromptResult) {
    let us = |ms: f64| format!("{:>7.1} µs", ms * 1000.0);
    println!(
        "   seeding the long session: {} prompts in {:.1} s ({} per write job)",
        thousands(p.history as u64),
        p.seed_secs,
        PROMPTS_PER_SEED_JOB
    );
    for (what, job, call) in [
        (
            format!("{PROMPTS_SHORT:>6} prompts"),
            &p.short_job,
            &p.short_call,
        ),
        (
            format!("{:>6} prompts", thousands(p.history as u64)),
            &p.long_job,
            &p.long_call,
        ),
    ] {
        println!(
            "   session with {what}: in the writer mean {} p50 {} p99 {}; write call p50 {} p99 {}  (n={})",
            us(job.mean()),
            us(job.p(50.0)),
            us(job.p(99.0)),
            us(call.p(50.0)),
            us(call.p(99.0)),
            job.n()
        );
    }
}

fn run_prompts(opts: &Opts, rt: &tokio::runtime::Runtime) -> PromptResult {
    println!(
        "== 4. A prompt (append + index for search, one Store::write job each) on a session with \
         {PROMPTS_SHORT} prompts and on one with {} ==",
        thousands(opts.prompts_history as u64)
    );
    println!(
        "   {} prompts per session in {PROMPT_ROUNDS} alternating rounds, one writer, ~100-byte \
         prompts",
        opts.prompts_timed
    );
    let t = Instant::now();
    let prompts = section_prompts(opts, rt);
    print_prompts(&prompts);
    println!("   (section took {:.1} s)", t.elapsed().as_secs_f64());
    println!();
    prompts
}

fn prompt_rows(p: &PromptResult, table: &mut Vec<(String, String, String, bool)>) {
    let growth = p.long_job.mean() / p.short_job.mean();
    table.push((
        format!(
            "prompt cost, {} vs {PROMPTS_SHORT} prompts",
            thousands(p.history as u64)
        ),
        format!(
            "{:.2}x ({:.1} vs {:.1} µs in the writer)",
            growth,
            p.long_job.mean() * 1000.0,
            p.short_job.mean() * 1000.0
        ),
        format!("<= {TARGET_PROMPT_GROWTH:.0}x"),
        growth <= TARGET_PROMPT_GROWTH,
    ));
}

fn print_table(table: &[(String, String, String, bool)]) {
    let w0 = table.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = table.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let w2 = table.iter().map(|r| r.2.len()).max().unwrap_or(0);
    println!(
        "   {:<w0$}  {:<w1$}  {:<w2$}  met",
        "figure", "value", "target"
    );
    for (a, b, c, ok) in table {
        println!(
            "   {a:<w0$}  {b:<w1$}  {c:<w2$}  {}",
            if *ok { "yes" } else { "NO" }
        );
    }
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let opts = Opts::parse();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let run_start = Instant::now();
    println!(
        "sessiond benchmark{}",
        if opts.quick { " (--quick)" } else { "" }
    );
    println!(
        "   machine: {cores} cores (available_parallelism); SQLite {}; {} build; temp dir {}",
        rusqlite::version(),
        if cfg!(debug_assertions) {
            "DEBUG (figures are meaningless; use --release)"
        } else {
            "release"
        },
        std::env::temp_dir().display()
    );
    println!(
        "   store config: synchronous=NORMAL (WAL), max_batch={}, read_connections={}",
        StoreConfig::default().max_batch,
        StoreConfig::default().read_connections
    );
    println!(
        "   load average at start: {} (1/5/15 min; above {cores} means other processes compete \
         for the cores and the figures are pessimistic)",
        loadavg()
    );
    println!("   figures are wall-clock on a possibly shared machine; nothing here is asserted.");
    println!();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("bench-client")
        .enable_all()
        .build()
        .unwrap_or_else(|e| die("tokio runtime", e));

    if opts.prompts_only {
        let prompts = run_prompts(&opts, &rt);
        let mut table = Vec::new();
        prompt_rows(&prompts, &mut table);
        print_table(&table);
        println!();
        println!(
            "total run time {:.1} s; load average at end: {}",
            run_start.elapsed().as_secs_f64(),
            loadavg()
        );
        return;
    }

    // 1. Appends.
    let t = Instant::now();
    let appends = section_appends(&opts, &rt);
    println!("   (section took {:.1} s)", t.elapsed().as_secs_f64());
    println!();

    // Seed the history session on the server's data dir, then start the server on it.
    let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| die("pick port", e));
    let cfg = Config {
        bind: format!("127.0.0.1:{port}"),
        data_dir: tmp.path().join("data"),
        ..Default::default()
    };
    println!(
        "== Seeding: {} events into one session through the store writer (5,000 appends per write job) ==",
        thousands(opts.history_events)
    );
    let seeded = seed_history(&cfg, opts.history_events);
    let _ = API_KEY.set(seeded.api_key.clone());
    println!(
        "   {} events in {:.1} s ({}), avg body {:.0} bytes, db {:.0} MiB",
        thousands(seeded.events),
        seeded.secs,
        fmt_rate(seeded.events as f64 / seeded.secs),
        seeded.avg_body,
        seeded.db_bytes as f64 / (1024.0 * 1024.0)
    );
    let raw_all = median(appends.iter().map(|r| r.raw).collect());
    let seed_rate = seeded.events as f64 / seeded.secs;
    println!(
        "   = {:.1} µs per Tx::append with thousands of appends per transaction (raw INSERT: {:.1} \
         µs per row): even perfect group commit would cap Store appends at ~{:.0}% of raw here.",
        1e6 / seed_rate,
        1e6 / raw_all,
        100.0 * seed_rate / raw_all
    );
    println!();

    let db = cfg.db_path();
    let base = format!("http://{}", cfg.bind);
    std::thread::Builder::new()
        .name("bench-server".into())
        .spawn(move || {
            if let Err(e) = sessiond::server::serve(cfg) {
                die("server", e);
            }
        })
        .unwrap_or_else(|e| die("server thread", e));
    rt.block_on(wait_healthy(&base));

    // 2. Notes.
    println!(
        "== 2. POST …/note: {NOTE_CLIENTS} concurrent clients (own keep-alive connection each), \
         one shared session, in-process server on {base} =="
    );
    println!(
        "   {} timed requests per client after {} warm-up requests each; latency = send until the \
         full response body is read; client and server share the {cores} cores.",
        opts.notes_per_client, opts.notes_warmup_per_client
    );
    let t = Instant::now();
    let notes = rt.block_on(section_notes(&opts, &base));
    for (name, run) in [
        ("minimal HTTP/1.1 clients (support/wire.rs)", &notes.wire),
        ("reqwest clients (as measured before)", &notes.reqwest),
    ] {
        println!("   {name}:");
        println!("   latency   {}", run.lat.line());
        println!(
            "   throughput {} requests ({} notes durable), errors {}",
            fmt_rate(run.throughput),
            thousands(run.lat.n as u64),
            run.errors
        );
        if let Some(e) = &run.first_error {
            println!("   first error: {e}");
        }
        if let Some((server, client)) = run.cpu {
            println!(
                "   CPU during the timed run: server {:.2} cores busy ({:.0} µs CPU per note), \
                 bench clients {:.2} cores ({:.0} µs per request)",
                server / run.wall,
                server * 1e6 / run.lat.n as f64,
                client / run.wall,
                client * 1e6 / run.lat.n as f64
            );
        }
        println!(
            "   closed loop => mean latency ~= {NOTE_CLIENTS} / throughput = {}",
            ms(Duration::from_secs_f64(
                NOTE_CLIENTS as f64 / run.throughput.max(1e-9)
            ))
        );
    }
    println!(
        "   session lastEventSeq {} after both runs; the paced run below (minimal clients) shows \
         the per-request latency when the server is not saturated:",
        notes.last_event_seq
    );
    println!(
        "   paced {} offered, {:.1} s: {} (errors {})",
        fmt_rate(notes.paced_rate),
        opts.paced_secs.as_secs_f64(),
        notes.paced.line(),
        notes.paced_errors
    );
    println!("   (section took {:.1} s)", t.elapsed().as_secs_f64());
    println!();

    // 3. History.
    println!(
        "== 3. GET …/history?limit={PAGE} on a session with {} events{}: one keep-alive client, \
         random positions ==",
        thousands(seeded.events),
        if opts.quick {
            " (--quick: 100,000 instead of 1,000,000)"
        } else {
            ""
        }
    );
    let t = Instant::now();
    let hist = rt.block_on(section_history(&opts, &base, &seeded, &db));
    println!("   before=<seq>  {}", hist.before.line());
    println!("   cursor=<seq>  {}", hist.cursor.line());
    println!("   both          {}", hist.all.line());
    println!(
        "   avg page {:.1} KiB. Same queries on a direct read-only connection (no HTTP, no pool):",
        hist.avg_page_bytes / 1024.0
    );
    println!("   sql before    {}", hist.sql_before.line());
    println!("   sql after     {}", hist.sql_cursor.line());
    println!("   (section took {:.1} s)", t.elapsed().as_secs_f64());
    println!();

    // 4. Prompts.
    let prompts = run_prompts(&opts, &rt);

    // Summary.
    println!(
        "== Summary ({cores} cores{}) ==",
        if opts.quick { ", --quick" } else { "" }
    );
    let mut table: Vec<(String, String, String, bool)> = Vec::new();
    for row in &appends {
        for (layout, run, shape, bare) in [
            ("own sessions", &row.own, row.raw_own, row.bare_own),
            (
                "shared session",
                &row.shared,
                row.raw_shared,
                row.bare_shared,
            ),
        ] {
            let ratio = run.rate / row.raw;
            table.push((
                format!("store appends, {:>2} writers, {layout}", row.writers),
                format!(
                    "{} = {:.1}% of raw {} ({:.0}% of raw of its shape; bare group commit {} = \
                     {:.1}% of raw)",
                    fmt_rate(run.rate),
                    ratio * 100.0,
                    fmt_rate(row.raw),
                    100.0 * run.rate / shape,
                    fmt_rate(bare),
                    100.0 * bare / row.raw
                ),
                format!(">= {:.0}% of raw", TARGET_STORE_RATIO * 100.0),
                ratio >= TARGET_STORE_RATIO,
            ));
        }
    }
    table.push((
        format!("POST note p99 @ {NOTE_CLIENTS} clients, closed loop"),
        format!(
            "{} (p50 {})",
            ms(notes.wire.lat.p99),
            ms(notes.wire.lat.p50)
        ),
        format!("< {}", ms(TARGET_NOTE_P99)),
        notes.wire.lat.p99 < TARGET_NOTE_P99 && notes.wire.errors == 0,
    ));
    table.push((
        "  the same with reqwest clients".to_owned(),
        format!(
            "{} (p50 {})",
            ms(notes.reqwest.lat.p99),
            ms(notes.reqwest.lat.p50)
        ),
        "(for comparison)".to_owned(),
        notes.reqwest.lat.p99 < TARGET_NOTE_P99 && notes.reqwest.errors == 0,
    ));
    let label = format!("{} events", thousands(seeded.events));
    for (what, lat) in [
        ("before", &hist.before),
        ("cursor", &hist.cursor),
        ("both", &hist.all),
    ] {
        table.push((
            format!("history page p99, {what}, {label}"),
            format!("{} (p50 {})", ms(lat.p99), ms(lat.p50)),
            format!("< {}", ms(TARGET_HISTORY_P99)),
            lat.p99 < TARGET_HISTORY_P99,
        ));
    }
    prompt_rows(&prompts, &mut table);
    print_table(&table);
    if opts.quick {
        println!(
            "   (--quick: history session has 100,000 events, not the 1,000,000 of the target)"
        );
    }
    println!();
    println!(
        "total run time {:.1} s; load average at end: {}",
        run_start.elapsed().as_secs_f64(),
        loadavg()
    );

    // The server thread runs until the process ends; remove the data dir and leave.
    drop(tmp);
    std::process::exit(0);
}
