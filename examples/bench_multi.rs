//! Several processes on one PostgreSQL database against one process, beside SQLite, in one run.
//!
//! ```text
//! cargo run --release --example bench_multi [-- --quick]
//! SESSIOND_BENCH_BASELINE=<another sessiond binary> cargo run --release --example bench_multi
//! ```
//!
//! Naming deployments (`sqlite`, `postgres-1`, `postgres-3`) runs only those. With
//! `SESSIOND_BENCH_BASELINE`, every deployment runs with that binary and then with this
//! build's, each on a fresh database, and the ratios of this build to the baseline are printed.
//!
//! For each deployment — SQLite with one process, PostgreSQL with one process, PostgreSQL with
//! three processes sharing the database and the data dir — it measures:
//!
//! * **turns/s**: 64 clients (spread over the processes in turn), each on a session of its own,
//!   post `/stream 5` turns with `messages/wait` for a fixed time; completed turns per second;
//! * **SSE delivery p99**: 60 subscribers of one session (spread over the processes) while a
//!   client posts paced notes to the first process; the time from each note's POST start to each
//!   subscriber reading its frame (with three processes, two thirds of the subscribers read frames
//!   another process committed).
//!
//! PostgreSQL is a throwaway cluster made with `initdb` in a temporary directory (the harness of
//! the tests, `tests/common/postgres.rs`; its programs from `/usr/lib/postgresql/*/bin` or
//! `$SESSIOND_TEST_PG_BIN`), with `fsync` on and `synchronous_commit=off`: commits do not wait
//! for their flush, as SQLite's default `synchronous=NORMAL` in WAL mode. The figures are
//! printed, never asserted, with the machine's load average before and after, and how many of
//! the posted frames each deployment's subscribers read.

#[path = "../tests/common/postgres.rs"]
mod postgres;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{Value, json};

const EMAIL: &str = "bench@local";
const PASSWORD: &str = "bench-password-123";
const CLIENTS: usize = 64;
const SUBSCRIBERS: usize = 60;

/// The servers running now: `die` exits without running destructors, so it stops them itself.
static SERVERS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_multi: {what}: {e}");
    for pid in SERVERS.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
        if let Ok(pid) = i32::try_from(pid) {
            // SAFETY: sends a signal to a child this process started; no memory is involved.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    std::process::exit(1)
}

/// The server binary of this build's profile, built first: `cargo run --example` builds the
/// example, not the binary, and a binary left from an older build would be measured instead.
/// The binary is built with the example, as `cargo run --example` builds, so that both see the
/// same features (an example's build enables the dev-dependencies' features too): built alone,
/// it would be built again with other features, and the next `cargo run` again.
fn binary() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = std::env::current_exe().unwrap_or_else(|e| die("current exe", e));
    let release = exe.to_string_lossy().contains("/release/");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    // What `cargo run` sets for the program it runs would, seen by this build, make it build
    // again what the outer cargo built (a build script that reads CARGO_MANIFEST_DIR, ring's).
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if name.starts_with("CARGO_MANIFEST_")
            || name.starts_with("CARGO_PKG_")
            || [
                "CARGO_CRATE_NAME",
                "CARGO_BIN_NAME",
                "CARGO_PRIMARY_PACKAGE",
            ]
            .contains(&&*name)
        {
            cmd.env_remove(&*name);
        }
    }
    cmd.args([
        "build",
        "--quiet",
        "--bin",
        "sessiond",
        "--example",
        "bench_multi",
    ])
    .current_dir(root);
    if release {
        cmd.arg("--release");
    }
    let status = cmd.status().unwrap_or_else(|e| die("cargo build", e));
    if !status.success() {
        die("cargo build", status);
    }
    exe.parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("sessiond"))
        .filter(|bin| bin.exists())
        .unwrap_or_else(|| die("sessiond", "no binary beside the example's directory"))
}

fn cli(bin: &Path, data_dir: &Path, db: Option<&str>) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_remove("SESSIOND_CONFIG")
        .env_remove("SESSIOND_DATA_DIR")
        .env_remove("SESSIOND_DATABASE_URL")
        .env("SESSIOND_LOG", "warn")
        .env("SESSIOND_ENGINE", "scripted")
        .arg("--data-dir")
        .arg(data_dir);
    if let Some(url) = db {
        cmd.args(["--database", url]);
    }
    cmd
}

/// The owner and an API key, made with the CLI.
fn credentials(bin: &Path, data_dir: &Path, db: Option<&str>) -> String {
    std::fs::create_dir_all(data_dir).unwrap_or_else(|e| die("data dir", e));
    let mut user = cli(bin, data_dir, db)
        .args(["user", "create", "--email", EMAIL, "--password-stdin"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| die("user create", e));
    if let Some(mut stdin) = user.stdin.take() {
        writeln!(stdin, "{PASSWORD}").unwrap_or_else(|e| die("password", e));
    }
    if !user.wait().is_ok_and(|s| s.success()) {
        die("user create", "failed");
    }
    let out = cli(bin, data_dir, db)
        .args(["token", "create", "--user", EMAIL, "--scope", "sessions"])
        .output()
        .unwrap_or_else(|e| die("token create", e));
    if !out.status.success() {
        die("token create", String::from_utf8_lossy(&out.stderr));
    }
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

struct Proc {
    child: Child,
    base: String,
}

impl Proc {
    fn start(bin: &Path, data_dir: &Path, db: Option<&str>) -> Proc {
        let mut child = cli(bin, data_dir, db)
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| die("serve", e));
        SERVERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(child.id());
        let stdout = child.stdout.take().unwrap_or_else(|| die("stdout", "none"));
        let mut reader = BufReader::new(stdout);
        let base = loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                die("serve", "exited before it listened");
            }
            if let Some(url) = line.trim().strip_prefix("sessiond listening on ") {
                break url.to_owned();
            }
        };
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
        });
        Proc { child, base }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let id = self.child.id();
        SERVERS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|pid| *pid != id);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sessions(base: &str, rest: &str) -> String {
    format!("{base}/v1/ws/default/agent/sessions{rest}")
}

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> Value {
    let mut resp = http.post(url).json(body).send().await;
    // A pooled keep-alive connection the server closed as it was reused fails the send; a
    // request with a `clientRequestId` may be sent again (the server answers a repeat with the
    // first outcome).
    if let Err(e) = &resp
        && e.is_request()
        && body.get("clientRequestId").is_some()
    {
        eprintln!("bench_multi: {url}: {e}; sending it again");
        resp = http.post(url).json(body).send().await;
    }
    let resp = resp.unwrap_or_else(|e| die(url, e));
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        die(url, format!("{status}: {v}"));
    }
    v
}

fn uuid() -> String {
    let n = COUNTER.fetch_add(1, Ordering::SeqCst);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        (t >> 32) as u32,
        (t >> 16) as u16,
        (n >> 12) & 0xfff,
        n & 0xfff,
        (t as u64 ^ n) & 0xffff_ffff_ffff
    )
}

static COUNTER: AtomicU64 = AtomicU64::new(1);

struct Figures {
    turns_per_s: f64,
    delivery_p99_ms: f64,
    delivery_p50_ms: f64,
    /// Frames the subscribers read of those posted (notes × subscribers): a lost frame would
    /// not show in the percentiles.
    delivered: usize,
    expected: usize,
}

async fn measure(bases: &[String], key: &str, quick: bool) -> Figures {
    let http = sessiond::tls::client_builder()
        .default_headers({
            let mut h = reqwest::header::HeaderMap::new();
            let v = reqwest::header::HeaderValue::from_str(&format!("Bearer {key}"))
                .unwrap_or_else(|e| die("key", e));
            h.insert(reqwest::header::AUTHORIZATION, v);
            h
        })
        .pool_max_idle_per_host(256)
        .build()
        .unwrap_or_else(|e| die("client", e));

    // Turns per second.
    let run_for = Duration::from_secs(if quick { 3 } else { 10 });
    let done = Arc::new(AtomicU64::new(0));
    let mut ids = Vec::new();
    for i in 0..CLIENTS {
        let base = &bases[i % bases.len()];
        let v = post(
            &http,
            &sessions(base, "/wait"),
            &json!({ "prompt": "hello", "clientRequestId": uuid() }),
        )
        .await;
        ids.push(v["sessionId"].as_str().unwrap_or_default().to_owned());
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        let (http, done) = (http.clone(), Arc::clone(&done));
        let base = bases[i % bases.len()].clone();
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < run_for {
                post(
                    &http,
                    &sessions(&base, &format!("/{id}/messages/wait")),
                    &json!({ "prompt": "/stream 5", "clientRequestId": uuid() }),
                )
                .await;
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let turns_per_s = done.load(Ordering::SeqCst) as f64 / start.elapsed().as_secs_f64();

    // SSE delivery: subscribers spread over the processes, notes posted to the first.
    let v = post(
        &http,
        &sessions(&bases[0], "/wait"),
        &json!({ "prompt": "hello", "clientRequestId": uuid() }),
    )
    .await;
    let id = v["sessionId"].as_str().unwrap_or_default().to_owned();
    let last = v["terminal"]["seq"].as_u64().unwrap_or(0);
    let notes = if quick { 100 } else { 300 };
    let posted: Arc<std::sync::Mutex<Vec<(u64, Instant)>>> = Arc::default();
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<()>(SUBSCRIBERS);
    let mut readers = Vec::new();
    for i in 0..SUBSCRIBERS {
        let url = sessions(
            &bases[i % bases.len()],
            &format!("/{id}/events?since={last}"),
        );
        let (http, ready) = (http.clone(), ready_tx.clone());
        let expect = last + 1 + notes as u64;
        readers.push(tokio::spawn(async move {
            let resp = http.get(&url).send().await.unwrap_or_else(|e| die(&url, e));
            let _ = ready.send(()).await;
            let mut seen: Vec<(u64, Instant)> = Vec::new();
            let mut buf = Vec::<u8>::new();
            let mut body = resp.bytes_stream();
            while let Some(Ok(chunk)) = body.next().await {
                let at = Instant::now();
                buf.extend_from_slice(&chunk);
                while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
                    let frame: Vec<u8> = buf.drain(..end + 2).collect();
                    let text = String::from_utf8_lossy(&frame);
                    if let Some(n) = text
                        .lines()
                        .find_map(|l| l.strip_prefix("id: "))
                        .and_then(|n| n.trim().parse::<u64>().ok())
                    {
                        seen.push((n, at));
                        if n >= expect - 1 {
                            return seen;
                        }
                    }
                }
            }
            seen
        }));
    }
    drop(ready_tx);
    for _ in 0..SUBSCRIBERS {
        ready_rx.recv().await;
    }
    // Let every stream pass its backlog before timing starts.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let note_url = sessions(&bases[0], &format!("/{id}/note"));
    for n in 0..notes {
        let t = Instant::now();
        let v = post(&http, &note_url, &json!({ "note": format!("n{n}") })).await;
        if let Some(seq) = v["seq"].as_u64() {
            posted
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((seq, t));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let posted: std::collections::HashMap<u64, Instant> = posted
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .copied()
        .collect();
    let mut delays = Vec::new();
    for r in readers {
        if let Ok(Ok(seen)) = tokio::time::timeout(Duration::from_secs(30), r).await {
            for (seq, at) in seen {
                if let Some(t) = posted.get(&seq) {
                    delays.push(at.saturating_duration_since(*t).as_secs_f64() * 1000.0);
                }
            }
        }
    }
    delays.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        delays
            .get(((delays.len() as f64 * p) as usize).min(delays.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN)
    };
    Figures {
        turns_per_s,
        delivery_p99_ms: pct(0.99),
        delivery_p50_ms: pct(0.50),
        delivered: delays.len(),
        expected: posted.len() * SUBSCRIBERS,
    }
}

fn run(bin: &Path, processes: usize, db: Option<&str>, quick: bool) -> Figures {
    let dir = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
    let data_dir = dir.path().join("data");
    let key = credentials(bin, &data_dir, db);
    let procs: Vec<Proc> = (0..processes)
        .map(|_| Proc::start(bin, &data_dir, db))
        .collect();
    let bases: Vec<String> = procs.iter().map(|p| p.base.clone()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| die("runtime", e));
    let figures = rt.block_on(measure(&bases, &key, quick));
    drop(procs);
    figures
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    // `sqlite`, `postgres-1`, `postgres-3`: only the deployments named (all when none is).
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    sessiond::tls::install_provider();
    let bin = binary();
    // With `SESSIOND_BENCH_BASELINE=<another sessiond binary>`, each deployment runs with that
    // binary first and then with this build's, on fresh databases, and the ratios are printed.
    let baseline = std::env::var_os("SESSIOND_BENCH_BASELINE").map(PathBuf::from);
    let binaries: Vec<(&str, &Path)> = match &baseline {
        Some(b) => vec![("baseline", b.as_path()), ("this build", bin.as_path())],
        None => vec![("this build", bin.as_path())],
    };
    println!(
        "bench_multi: {CLIENTS} clients of /stream 5 turns; {SUBSCRIBERS} SSE subscribers of one session"
    );
    if let Some(b) = &baseline {
        println!("baseline: {}", b.display());
    }
    println!("load average before: {}", load_average());
    // Made at the first PostgreSQL deployment: `bench_multi sqlite` needs none.
    let mut cluster = None;
    let mut rows: Vec<(&str, &str, Figures)> = Vec::new();
    for (deployment, processes, postgres, short) in [
        ("SQLite, 1 process", 1, false, "sqlite"),
        ("PostgreSQL, 1 process", 1, true, "postgres-1"),
        ("PostgreSQL, 3 processes", 3, true, "postgres-3"),
    ] {
        if !named.is_empty() && !named.iter().any(|n| n == short) {
            continue;
        }
        for (i, (which, path)) in binaries.iter().enumerate() {
            let db = postgres.then(|| {
                let cluster = cluster.get_or_insert_with(|| {
                    postgres::durable_cluster("bench_multi")
                        .unwrap_or_else(|| die("PostgreSQL", "no PostgreSQL server can run here"))
                });
                postgres::Cluster::database(cluster, &format!("bench_multi_{}_{i}", rows.len()))
            });
            let figures = run(path, processes, db.as_ref().map(|d| d.url.as_str()), quick);
            rows.push((deployment, which, figures));
        }
    }
    println!("load average after: {}", load_average());
    println!(
        "{:<26} {:<11} {:>10} {:>16} {:>16} {:>16}",
        "deployment", "binary", "turns/s", "SSE p50 (ms)", "SSE p99 (ms)", "SSE delivered"
    );
    for (name, which, f) in &rows {
        println!(
            "{name:<26} {which:<11} {:>10.0} {:>16.1} {:>16.1} {:>16}",
            f.turns_per_s,
            f.delivery_p50_ms,
            f.delivery_p99_ms,
            format!("{}/{}", f.delivered, f.expected)
        );
    }
    let of = |deployment: &str, which: &str| {
        rows.iter()
            .find(|(n, w, _)| *n == deployment && *w == which)
            .map(|(_, _, f)| f)
    };
    for (which, _) in &binaries {
        let (Some(sqlite), Some(pg1), Some(pg3)) = (
            of("SQLite, 1 process", which),
            of("PostgreSQL, 1 process", which),
            of("PostgreSQL, 3 processes", which),
        ) else {
            continue;
        };
        println!(
            "{which}: PostgreSQL 3 / 1 processes: turns/s ×{:.2}, SSE p99 ×{:.2}; PostgreSQL / SQLite (1 process): turns/s ×{:.2}",
            pg3.turns_per_s / pg1.turns_per_s,
            pg3.delivery_p99_ms / pg1.delivery_p99_ms,
            pg1.turns_per_s / sqlite.turns_per_s
        );
    }
    if baseline.is_some() {
        for deployment in [
            "SQLite, 1 process",
            "PostgreSQL, 1 process",
            "PostgreSQL, 3 processes",
        ] {
            if let (Some(b), Some(t)) = (of(deployment, "baseline"), of(deployment, "this build")) {
                println!(
                    "{deployment}: this build / baseline: turns/s ×{:.2}, SSE p99 ×{:.2}",
                    t.turns_per_s / b.turns_per_s,
                    t.delivery_p99_ms / b.delivery_p99_ms
                );
            }
        }
    }
}

/// The machine's load (`/proc/loadavg`: 1, 5 and 15 minutes): the figures depend on what else
/// runs on it.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}
