//! What the `openai` engine costs on top of the model's own stream: a plain streaming client and
//! sessiond's turns, measured in one run against the same fake OpenAI-compatible endpoint.
//!
//! ```text
//! cargo run --release --example bench_engines              # full run (~1 min on 2 cores)
//! cargo run --release --example bench_engines -- --quick   # smaller sizes (< 10 s)
//! ```
//!
//! This is a measuring command, not a test: it prints figures and ratios against a baseline
//! measured in the same run, and asserts nothing about timing. It does check that the work was
//! really done: every raw call read all the deltas and `[DONE]`, every turn ended `complete` with
//! the expected text, a subscriber saw every delta, and the endpoint answered the expected number
//! of model calls.
//!
//! Everything runs in this process, on loopback:
//!
//! - **The endpoint** is a fake written for this command (not `tests/common/fake_openai.rs`): one
//!   tokio thread, HTTP/1.1 keep-alive, chunked server-sent events written one event per `write`,
//!   replies rendered once up front and chosen from the request itself (the last message). The
//!   tests' fake starts a thread per connection and closes every connection (`Connection: close`),
//!   so each call would pay a TCP handshake and a thread start that a pooled client never pays
//!   against a real endpoint, and its single queue of scripted replies cannot serve 16 sessions
//!   at once. A text reply is [`DELTAS`] content deltas, a finish chunk, usage and `[DONE]`; a
//!   prompt containing [`TOOL_MARKER`] is answered with a `todo_write` call instead, and the call
//!   that carries its result gets the text reply.
//! - **The baseline** is a plain reqwest client (built like the engine's) that posts a chat request
//!   and reads the stream: it splits the events, parses each one's JSON and concatenates the
//!   content. It sends the very bodies sessiond sent for a session's first turn (captured by the
//!   fake in a warm-up), so both sides move the same system prompt and tool definitions.
//! - **sessiond** runs as `serve` wires it (store, runner on its own 2-thread runtime, sessions
//!   core), without the HTTP layer: its default engine is the `openai` engine pointed at the fake
//!   (`titles` off). A turn is timed from `Sessions::message` to the `complete` frame reaching a
//!   bus subscriber (what an SSE stream is fed from), and its first delta likewise. Each session
//!   takes [`TURNS_PER_SESSION`] measured messages after its first turn, so every call carries one
//!   to that many earlier turns of conversation.
//!
//! Baseline and sessiond run in alternating rounds at each concurrency level (1 and 16 clients, one
//! session per sessiond client), closed loop. CPU per turn is the whole process's (fake and client
//! included, the same on both sides), so the difference is what sessiond spends.
//!
//! **Against llama.cpp.** When the test suite's llama.cpp venv can be made (`tests/python/llama`,
//! see `tests/common/venv.rs`), a real server runs too: llama.cpp's own server (`xllamacpp`) with
//! SmolLM2-135M-Instruct on the CPU, one request at a time, greedy decoding (temperature 0) so that
//! both sides get the same reply. sessiond's turns are first turns of fresh sessions (no tools, a
//! short system prompt), timed from `Sessions::create` to the first delta and to `complete` on the
//! bus; the baseline posts the very body sessiond sent (captured once through a recording proxy
//! that the measured turns do not pass). The two alternate, one call at a time; the server's
//! prompt cache serves both the same way.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sessiond::bus::Bus;
use sessiond::config::Config;
use sessiond::engine::{EngineConfig, Engines};
use sessiond::runner::Runner;
use sessiond::sessions::{Actor, Channel, CreateIn, InputCommon, MessageIn, Sessions, WaitOutcome};
use sessiond::store::Store;
use sessiond::store::identity::{FirstRole, Role};
use sessiond::timeline::{Behavior, Sender, is_terminal_type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Barrier;
use tokio::sync::broadcast::error::RecvError;

#[path = "../tests/common/llama.rs"]
mod llama;
#[path = "support/report.rs"]
mod report;
#[path = "../tests/common/venv.rs"]
mod venv;
use report::{Lat, loadavg, quick_flag, thousands};

/// Text deltas in every streamed text reply.
const DELTAS: usize = 200;
/// Measured messages each session takes after its first turn.
const TURNS_PER_SESSION: usize = 5;
/// A prompt containing this is answered with a `todo_write` call first.
const TOOL_MARKER: &str = "[bench: call todo_write]";
const LEVELS: [usize; 2] = [1, 16];

// ---------------------------------------------------------------------------------------------
// Options.

struct Opts {
    quick: bool,
    rounds: usize,
    /// Measured requests per client and round, by level.
    per_client: [usize; 2],
    /// Unmeasured requests per client before each phase.
    warmup: usize,
    /// Measured tool turns (and raw two-call exchanges) per round, one client.
    tool_turns: usize,
    /// Measured calls per side and round against llama.cpp.
    llama_turns: usize,
}

impl Opts {
    fn parse() -> Opts {
        let quick = quick_flag(
            "bench_engines",
            "fewer rounds and requests; finishes in under 10 s",
        );
        if quick {
            Opts {
                quick,
                rounds: 2,
                per_client: [150, 15],
                warmup: 3,
                tool_turns: 40,
                llama_turns: 4,
            }
        } else {
            Opts {
                quick,
                rounds: 4,
                per_client: [1000, 100],
                warmup: 5,
                tool_turns: 200,
                llama_turns: 15,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("bench_engines: {what}: {e}");
    std::process::exit(1);
}

/// CPU seconds (user + system) this process has used, all threads, exited ones included.
fn process_cpu() -> f64 {
    // SAFETY: getrusage only writes the struct we pass.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU seconds per live thread of this process, by thread id: `(thread name, seconds)`.
fn thread_cpu() -> HashMap<String, (String, f64)> {
    // SAFETY: sysconf only reads a configuration value.
    let hz = match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        n if n > 0 => n as f64,
        _ => 100.0,
    };
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return HashMap::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let tid = e.file_name().to_string_lossy().into_owned();
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
            let (head, rest) = stat.rsplit_once(')')?;
            let name = head.split_once('(').map_or("", |(_, c)| c).to_owned();
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks: f64 = [11, 12]
                .iter()
                .filter_map(|&i| f.get(i).and_then(|v| v.parse::<f64>().ok()))
                .sum();
            Some((tid, (name, ticks / hz)))
        })
        .collect()
}

/// Process and per-thread-name CPU over a window.
struct CpuWindow {
    total: f64,
    threads: HashMap<String, (String, f64)>,
}

impl CpuWindow {
    fn start() -> CpuWindow {
        CpuWindow {
            total: process_cpu(),
            threads: thread_cpu(),
        }
    }

    /// Adds this window's CPU seconds to `into`: the process total under `""`, and per thread name
    /// (blocking-pool threads that exited meanwhile only count in the total).
    fn stop(&self, into: &mut HashMap<String, f64>) {
        *into.entry(String::new()).or_default() += process_cpu() - self.total;
        for (tid, (name, now)) in thread_cpu() {
            let before = self.threads.get(&tid).map_or(0.0, |t| t.1);
            *into.entry(name).or_default() += now - before;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fake endpoint.

/// Which reply a chat request gets (decided from its last message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A plain prompt: the text reply.
    Text,
    /// A prompt with [`TOOL_MARKER`]: the `todo_write` call.
    ToolCall,
    /// The call carrying the tool's result: the text reply.
    ToolResult,
}

#[derive(Default)]
struct FakeStats {
    /// Chat requests answered, by [`Kind`].
    served: [AtomicU64; 3],
    /// Requests answered 400 (not a streamed chat request).
    refused: AtomicU64,
    /// Request body bytes, by [`Kind`].
    body_bytes: [AtomicU64; 3],
    /// The first body of each kind, for the baseline to send.
    first_body: Mutex<[Option<Vec<u8>>; 3]>,
}

impl FakeStats {
    fn served(&self) -> [u64; 3] {
        [0, 1, 2].map(|i| self.served[i].load(Ordering::Relaxed))
    }

    fn body_bytes(&self) -> [u64; 3] {
        [0, 1, 2].map(|i| self.body_bytes[i].load(Ordering::Relaxed))
    }
}

/// The replies, rendered once as HTTP chunks (one server-sent event each).
struct Rendered {
    text: Vec<Vec<u8>>,
    tool: Vec<Vec<u8>>,
}

struct Fake {
    url: String,
    stats: Arc<FakeStats>,
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

fn usage(prompt: u64, completion: u64) -> Value {
    json!({
        "id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 0, "model": "bench",
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion}
    })
}

/// One server-sent event as one HTTP/1.1 chunk.
fn http_chunk(data: &str) -> Vec<u8> {
    let event = format!("data: {data}\n\n");
    format!("{:x}\r\n{event}\r\n", event.len()).into_bytes()
}

/// The text of delta `i` of the text reply.
fn delta_text(i: usize) -> String {
    format!("word{i} ")
}

fn expected_text() -> String {
    (0..DELTAS).map(delta_text).collect()
}

fn todo_args() -> Value {
    json!({"todos": [
        {"content": "measure the engine", "status": "in_progress"},
        {"content": "write the figures down", "status": "pending"}
    ]})
}

fn render() -> Rendered {
    let mut text = vec![http_chunk(
        &chunk(json!({"role": "assistant", "content": ""}), None).to_string(),
    )];
    for i in 0..DELTAS {
        text.push(http_chunk(
            &chunk(json!({"content": delta_text(i)}), None).to_string(),
        ));
    }
    text.push(http_chunk(&chunk(json!({}), Some("stop")).to_string()));
    text.push(http_chunk(&usage(900, DELTAS as u64).to_string()));
    text.push(http_chunk("[DONE]"));
    let args = todo_args().to_string();
    let (a, b) = args.split_at(args.len() / 2);
    let tool = vec![
        http_chunk(
            &chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_todo", "type": "function",
                    "function": {"name": "todo_write", "arguments": a}}]}),
                None,
            )
            .to_string(),
        ),
        http_chunk(
            &chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
                None,
            )
            .to_string(),
        ),
        http_chunk(&chunk(json!({}), Some("tool_calls")).to_string()),
        http_chunk(&usage(900, 30).to_string()),
        http_chunk("[DONE]"),
    ];
    Rendered { text, tool }
}

#[derive(Deserialize)]
struct ChatRequest<'a> {
    #[serde(default)]
    stream: bool,
    #[serde(borrow)]
    messages: Vec<Message<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

fn classify(body: &[u8]) -> Option<Kind> {
    let req: ChatRequest<'_> = serde_json::from_slice(body).ok()?;
    if !req.stream {
        return None;
    }
    let last = req.messages.last()?;
    Some(match last.role.as_ref() {
        "tool" => Kind::ToolResult,
        "user" if last.content.is_some_and(|c| c.get().contains(TOOL_MARKER)) => Kind::ToolCall,
        _ => Kind::Text,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &[u8]) -> Option<usize> {
    let head = std::str::from_utf8(head).ok()?;
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())?
    })
}

async fn serve_conn(mut sock: TcpStream, replies: Arc<Rendered>, stats: Arc<FakeStats>) {
    let _ = sock.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        let head_end = loop {
            if let Some(p) = find(&buf, b"\r\n\r\n") {
                break p + 4;
            }
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let Some(len) = content_length(&buf[..head_end]) else {
            return;
        };
        while buf.len() < head_end + len {
            match sock.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let body = &buf[head_end..head_end + len];
        let kind = classify(body);
        let ok = match kind {
            Some(kind) => {
                let i = kind as usize;
                stats.served[i].fetch_add(1, Ordering::Relaxed);
                stats.body_bytes[i].fetch_add(len as u64, Ordering::Relaxed);
                {
                    let mut first = stats.first_body.lock().unwrap_or_else(|e| e.into_inner());
                    if first[i].is_none() {
                        first[i] = Some(body.to_vec());
                    }
                }
                let chunks = match kind {
                    Kind::ToolCall => &replies.tool,
                    Kind::Text | Kind::ToolResult => &replies.text,
                };
                stream_reply(&mut sock, chunks).await
            }
            None => {
                stats.refused.fetch_add(1, Ordering::Relaxed);
                let body =
                    r#"{"error":{"message":"the bench endpoint only streams chat completions"}}"#;
                let head = format!(
                    "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(head.as_bytes()).await.is_ok()
            }
        };
        if !ok {
            return;
        }
        buf.drain(..head_end + len);
    }
}

async fn stream_reply(sock: &mut TcpStream, chunks: &[Vec<u8>]) -> bool {
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                transfer-encoding: chunked\r\n\r\n";
    if sock.write_all(head.as_bytes()).await.is_err() {
        return false;
    }
    for c in chunks {
        if sock.write_all(c).await.is_err() {
            return false;
        }
    }
    sock.write_all(b"0\r\n\r\n").await.is_ok()
}

impl Fake {
    fn start() -> Fake {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| die("bind the fake endpoint", e));
        std_listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| die("fake endpoint", e));
        let addr: SocketAddr = std_listener
            .local_addr()
            .unwrap_or_else(|e| die("fake endpoint", e));
        let stats = Arc::new(FakeStats::default());
        let replies = Arc::new(render());
        let st = Arc::clone(&stats);
        std::thread::Builder::new()
            .name("bench-fake".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|e| die("fake runtime", e));
                rt.block_on(async move {
                    let listener = TcpListener::from_std(std_listener)
                        .unwrap_or_else(|e| die("fake endpoint", e));
                    loop {
                        let Ok((sock, _)) = listener.accept().await else {
                            continue;
                        };
                        tokio::spawn(serve_conn(sock, Arc::clone(&replies), Arc::clone(&st)));
                    }
                });
            })
            .unwrap_or_else(|e| die("fake thread", e));
        Fake {
            url: format!("http://{addr}/v1"),
            stats,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The baseline: a plain streaming client.

/// The bodies sessiond sent for a session's first text turn and for both calls of a tool turn.
struct Bodies {
    text: Vec<u8>,
    tool_call: Vec<u8>,
    tool_result: Vec<u8>,
}

/// What one raw call read.
struct RawReply {
    first_delta: Option<Instant>,
    end: Instant,
    deltas: usize,
    text: String,
    tool_name: String,
    tool_args: String,
}

fn raw_client() -> reqwest::Client {
    // As the engine builds its own.
    sessiond::tls::client_builder()
        .connect_timeout(Duration::from_secs(10))
        .user_agent("sessiond-bench")
        .build()
        .unwrap_or_else(|e| die("http client", e))
}

async fn raw_call(http: &reqwest::Client, url: &str, body: &[u8]) -> Result<RawReply, String> {
    let response = http
        .post(url)
        .header("Content-Type", "application/json")
        .header("Accept", "text/event-stream")
        .body(body.to_vec())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("the endpoint answered {}", response.status()));
    }
    let mut stream = response.bytes_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut reply = RawReply {
        first_delta: None,
        end: Instant::now(),
        deltas: 0,
        text: String::new(),
        tool_name: String::new(),
        tool_args: String::new(),
    };
    let mut usage = false;
    loop {
        let Some(chunk) = stream.next().await else {
            return Err("the stream ended without [DONE]".into());
        };
        buf.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
        let mut start = 0;
        while let Some(nl) = buf[start..].iter().position(|b| *b == b'\n') {
            let line = &buf[start..start + nl];
            start += nl + 1;
            let Some(data) = line.strip_prefix(b"data: ") else {
                continue;
            };
            if data == b"[DONE]" {
                reply.end = Instant::now();
                if !usage {
                    return Err("no usage before [DONE]".into());
                }
                return Ok(reply);
            }
            let v: Value = serde_json::from_slice(data).map_err(|e| e.to_string())?;
            usage |= v.get("usage").is_some_and(Value::is_object);
            let Some(delta) = v.pointer("/choices/0/delta") else {
                continue;
            };
            if let Some(text) = delta
                .get("content")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            {
                reply.first_delta.get_or_insert_with(Instant::now);
                reply.deltas += 1;
                reply.text.push_str(text);
            }
            if let Some(f) = delta.pointer("/tool_calls/0/function") {
                if let Some(name) = f.get("name").and_then(Value::as_str) {
                    reply.tool_name.push_str(name);
                }
                if let Some(args) = f.get("arguments").and_then(Value::as_str) {
                    reply.tool_args.push_str(args);
                }
            }
        }
        buf.drain(..start);
    }
}

/// A raw text call, checked: all deltas, the whole text.
async fn raw_text(http: &reqwest::Client, url: &str, body: &[u8]) -> Result<RawReply, String> {
    let r = raw_call(http, url, body).await?;
    if r.deltas != DELTAS || r.text != expected_text() {
        return Err(format!(
            "read {} deltas, {} characters (expected {DELTAS})",
            r.deltas,
            r.text.len()
        ));
    }
    Ok(r)
}

/// The raw equivalent of a tool turn: the call that asks for `todo_write`, then the call that
/// carries its result and streams the text.
async fn raw_tool_exchange(
    http: &reqwest::Client,
    url: &str,
    bodies: &Bodies,
) -> Result<RawReply, String> {
    let call = raw_call(http, url, &bodies.tool_call).await?;
    let args: Value = serde_json::from_str(&call.tool_args).map_err(|e| e.to_string())?;
    if call.tool_name != "todo_write" || args != todo_args() {
        return Err(format!("unexpected tool call {:?}", call.tool_name));
    }
    raw_text(http, url, &bodies.tool_result).await
}

// ---------------------------------------------------------------------------------------------
// sessiond in-process.

struct Sessiond {
    sessions: Sessions,
    store: Store,
    runner: Runner,
    actor: Actor,
    runner_rt: tokio::runtime::Runtime,
    _tmp: tempfile::TempDir,
}

impl Sessiond {
    /// The engine JSON of the bench against the fake.
    fn fake_engine(fake: &Fake) -> Value {
        // The engine reads its key from a variable nobody sets: nothing real is ever sent.
        json!({
            "kind": "openai",
            "baseUrl": fake.url,
            "model": "bench",
            "titles": false,
            "apiKeyEnv": "SESSIOND_BENCH_NO_KEY",
        })
    }

    fn start(engine: Value) -> Sessiond {
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
        let engine = EngineConfig::parse(&engine.to_string())
            .unwrap_or_else(|e| die("engine config", e))
            .unwrap_or_else(|| die("engine config", "empty"))
            .build(&Default::default())
            .unwrap_or_else(|e| die("build engine", e));
        // As `serve` runs turns: their own runtime, two threads.
        let runner_rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sessiond-runner")
            .enable_all()
            .build()
            .unwrap_or_else(|e| die("runner runtime", e));
        let runner = Runner::start(
            store.clone(),
            Engines::new(engine, Default::default()),
            cfg.runner.clone(),
            cfg.data_dir.clone(),
            runner_rt.handle(),
        )
        .unwrap_or_else(|e| die("start runner", e));
        let sessions = Sessions::new(store.clone(), runner.clone(), Arc::new(cfg));
        runner.attach_sessions(Arc::new(sessions.clone()));
        let (user_id, ws_id) = store
            .directory()
            .workspace_by_slug_blocking("default")
            .and_then(|ws| {
                let ws = ws.ok_or(sessiond::store::Error::NotFound)?;
                // Never signed in with: any string will do for the hash.
                let (user, _) = store.identity().create_user_blocking(
                    "bench@local",
                    "unused",
                    &ws.id,
                    FirstRole::Given(Role::Owner),
                )?;
                Ok((user, ws.id))
            })
            .unwrap_or_else(|e| die("create user", e));
        let actor = Actor {
            workspace_id: ws_id,
            workspace_slug: "default".into(),
            user_id: user_id.clone(),
            sender: Sender::User { user_id },
            channel: Channel::Cli,
        };
        Sessiond {
            sessions,
            store,
            runner,
            actor,
            runner_rt,
            _tmp: tmp,
        }
    }

    fn stop(self) {
        self.runner_rt.block_on(self.runner.shutdown());
        self.store.close();
        self.runner_rt.shutdown_timeout(Duration::from_secs(2));
    }
}

/// One turn as a subscriber saw it.
struct Turn {
    first_delta: Option<Instant>,
    end: Instant,
    /// Durable events from the input to the terminal, both included.
    events: u64,
    /// Durable event types of the turn, in order (kept for one turn only).
    types: Vec<String>,
}

/// The `complete` terminal's body must be `completed` with the expected text.
fn check_complete(body: &Value) -> Result<(), String> {
    let e = &body["event"];
    let e = if e.is_object() { e } else { body };
    if e["type"] != "complete" || e["status"] != "completed" {
        return Err(format!(
            "the turn ended {} {}: {}",
            e["type"], e["status"], e["error"]
        ));
    }
    if e["result"].as_str() != Some(expected_text().as_str()) {
        return Err("the turn's result is not the streamed text".into());
    }
    Ok(())
}

/// A new session whose first turn is `prompt`, in the drive root, on the default agent.
fn first_turn(prompt: &str) -> CreateIn {
    CreateIn {
        prompt: prompt.into(),
        agent_id: None,
        cwd: None,
        tier: None,
        behavior: Behavior::Steer,
        mode: None,
        common: InputCommon::default(),
    }
}

/// Creates a session (its first turn is a plain prompt) and waits for that turn's terminal.
async fn create_session(sd: &Sessions, actor: &Actor) -> Result<(String, Duration), String> {
    let t = Instant::now();
    let s = sd
        .create(actor, first_turn("Say two hundred words."), None)
        .await
        .map_err(|e| e.to_string())?;
    match sd.wait_for_terminal(&s.key, s.input_seq).await {
        Ok(WaitOutcome::Terminal { event, .. }) => {
            let took = t.elapsed();
            let body: Value = serde_json::from_str(&event.body).map_err(|e| e.to_string())?;
            check_complete(&body)?;
            Ok((s.key.id, took))
        }
        Ok(WaitOutcome::Pending) => Err("the first turn is still running".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Sends `prompt` to a session and follows the turn on the bus until its terminal.
async fn turn(
    sd: &Sessions,
    actor: &Actor,
    session_id: &str,
    prompt: &str,
    keep_types: bool,
) -> Result<Turn, String> {
    let mut sub = sd
        .store()
        .bus()
        .subscribe(session_id)
        .map_err(|e| e.to_string())?;
    let submitted = sd
        .message(
            actor,
            session_id,
            MessageIn {
                prompt: prompt.into(),
                tier: None,
                behavior: Behavior::Steer,
                common: InputCommon::default(),
                busy: sessiond::sessions::busy::BusyPolicy::Enqueue,
            },
        )
        .await
        .map_err(|e| e.to_string())?;
    let mut first_delta = None;
    let mut deltas = 0;
    let mut types = Vec::new();
    let terminal = loop {
        match sub.rx.recv().await {
            Ok(f) if f.seq.is_none() => {
                if f.data.contains("\"text_delta\"") {
                    first_delta.get_or_insert_with(Instant::now);
                    deltas += 1;
                }
            }
            Ok(f) => {
                if is_terminal_type(&f.event_type) {
                    break f;
                }
                if keep_types && f.seq >= Some(submitted.input_seq) {
                    types.push(event_label(&f.event_type, &f.data));
                }
            }
            Err(RecvError::Lagged(n)) => return Err(format!("the subscriber lagged by {n}")),
            Err(RecvError::Closed) => return Err("the bus closed".into()),
        }
    };
    let end = Instant::now();
    let body: Value = serde_json::from_str(&terminal.data).map_err(|e| e.to_string())?;
    check_complete(&body)?;
    if deltas != DELTAS {
        return Err(format!(
            "a subscriber saw {deltas} text deltas, not {DELTAS}"
        ));
    }
    let seq = terminal.seq.unwrap_or(0);
    if keep_types {
        types.push(terminal.event_type.to_string());
    }
    Ok(Turn {
        first_delta,
        end,
        events: seq.saturating_sub(submitted.input_seq) + 1,
        types,
    })
}

/// `step:text`, `usage`, …
fn event_label(event_type: &str, data: &str) -> String {
    if event_type != "step" {
        return event_type.to_owned();
    }
    let v: Value = serde_json::from_str(data).unwrap_or(Value::Null);
    format!(
        "step:{}",
        v.pointer("/event/step/type")
            .and_then(Value::as_str)
            .unwrap_or("?")
    )
}

// ---------------------------------------------------------------------------------------------
// Phases.

/// The figures of one side (baseline or sessiond) at one level, over all rounds.
#[derive(Default)]
struct Side {
    total: Lat,
    first: Lat,
    /// Latency of the turns that created the sessions (sessiond only, not measured windows).
    create: Lat,
    /// Durable events per measured turn.
    events: Vec<u64>,
    requests: u64,
    wall: f64,
    /// CPU seconds in the measured windows: the process under `""`, then per thread name.
    cpu: HashMap<String, f64>,
    /// Model calls the fake answered during the measured windows.
    calls: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Side {
    fn error(&mut self, e: String) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e);
        }
    }

    fn rate(&self) -> f64 {
        self.requests as f64 / self.wall.max(1e-9)
    }

    /// Process CPU per measured request, ms.
    fn cpu_ms(&self) -> f64 {
        self.cpu.get("").copied().unwrap_or(0.0) * 1000.0 / self.requests.max(1) as f64
    }

    /// The busiest thread groups, as `name ms-per-request`.
    fn cpu_line(&self) -> String {
        let mut groups: Vec<(&String, &f64)> =
            self.cpu.iter().filter(|(k, _)| !k.is_empty()).collect();
        groups.sort_by(|a, b| b.1.total_cmp(a.1));
        let per = |s: f64| s * 1000.0 / self.requests.max(1) as f64;
        let top: Vec<String> = groups
            .iter()
            .filter(|(_, s)| per(**s) >= 0.005)
            .take(5)
            .map(|(k, s)| format!("{k} {:.3}", per(**s)))
            .collect();
        format!(
            "CPU per request {:.3} ms (whole process; by thread: {})",
            self.cpu_ms(),
            top.join(", ")
        )
    }

    fn errors_line(&self) -> String {
        format!(
            "errors {}{}",
            self.errors,
            self.first_error
                .as_deref()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default()
        )
    }
}

#[derive(Clone, Copy, PartialEq)]
enum What {
    Text,
    Tool,
}

/// One baseline round: `clients` clients, each `warmup` unmeasured then `n` measured calls.
async fn baseline_round(
    fake: &Fake,
    bodies: &Arc<Bodies>,
    what: What,
    clients: usize,
    warmup: usize,
    n: usize,
    side: &mut Side,
) {
    let http = raw_client();
    let url = Arc::new(format!("{}/chat/completions", fake.url));
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (http, url, bodies, barrier) = (
            http.clone(),
            Arc::clone(&url),
            Arc::clone(bodies),
            Arc::clone(&barrier),
        );
        tasks.push(tokio::spawn(async move {
            let call = async |http: &reqwest::Client| match what {
                What::Text => raw_text(http, &url, &bodies.text).await,
                What::Tool => raw_tool_exchange(http, &url, &bodies).await,
            };
            for _ in 0..warmup {
                let _ = call(&http).await;
            }
            // Warmed up; the second wait lets the measured window start before any measured call.
            barrier.wait().await;
            barrier.wait().await;
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                out.push(call(&http).await.map(|r| (t, r)));
            }
            out
        }));
    }
    barrier.wait().await;
    let calls = fake.stats.served().iter().sum::<u64>();
    let cpu = CpuWindow::start();
    barrier.wait().await;
    let t = Instant::now();
    let mut results = Vec::new();
    for task in tasks {
        results.extend(task.await.unwrap_or_else(|e| die("client task", e)));
    }
    side.wall += t.elapsed().as_secs_f64();
    cpu.stop(&mut side.cpu);
    side.calls += fake.stats.served().iter().sum::<u64>() - calls;
    for r in results {
        side.requests += 1;
        match r {
            Ok((t, r)) => {
                side.total.push(r.end - t);
                if let Some(f) = r.first_delta {
                    side.first.push(f - t);
                }
            }
            Err(e) => side.error(e),
        }
    }
}

/// One sessiond round: `clients` clients, each with its own sessions (created first, their first
/// turns timed as `create`), then `warmup` unmeasured and `n` measured messages,
/// [`TURNS_PER_SESSION`] per session.
async fn sessiond_round(
    fake: &Fake,
    sd: &Sessiond,
    what: What,
    clients: usize,
    warmup: usize,
    n: usize,
    side: &mut Side,
) {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let prompt: Arc<str> = match what {
        What::Text => "Say two hundred words.".into(),
        What::Tool => format!("Plan the work. {TOOL_MARKER}").into(),
    };
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (sessions, actor, barrier, prompt) = (
            sd.sessions.clone(),
            sd.actor.clone(),
            Arc::clone(&barrier),
            Arc::clone(&prompt),
        );
        tasks.push(tokio::spawn(async move {
            let needed = (warmup + n).div_ceil(TURNS_PER_SESSION);
            let mut ids = Vec::with_capacity(needed);
            let mut creates = Vec::with_capacity(needed);
            let mut failed = None;
            for _ in 0..needed {
                match create_session(&sessions, &actor).await {
                    Ok((id, took)) => {
                        ids.push(id);
                        creates.push(took);
                    }
                    Err(e) => failed = Some(e),
                }
            }
            let mut out = Vec::with_capacity(n);
            for i in 0..warmup {
                if let Some(id) = ids.get(i / TURNS_PER_SESSION) {
                    let _ = turn(&sessions, &actor, id, &prompt, false).await;
                }
            }
            barrier.wait().await;
            barrier.wait().await;
            for i in warmup..warmup + n {
                let Some(id) = ids.get(i / TURNS_PER_SESSION) else {
                    out.push(Err(failed
                        .clone()
                        .unwrap_or_else(|| "no session to send to".into())));
                    continue;
                };
                let t = Instant::now();
                out.push(
                    turn(&sessions, &actor, id, &prompt, false)
                        .await
                        .map(|r| (t, r)),
                );
            }
            (creates, out)
        }));
    }
    barrier.wait().await;
    let calls = fake.stats.served().iter().sum::<u64>();
    let cpu = CpuWindow::start();
    barrier.wait().await;
    let t = Instant::now();
    let mut results = Vec::new();
    for task in tasks {
        let (creates, out) = task.await.unwrap_or_else(|e| die("client task", e));
        for c in creates {
            side.create.push(c);
        }
        results.extend(out);
    }
    side.wall += t.elapsed().as_secs_f64();
    cpu.stop(&mut side.cpu);
    side.calls += fake.stats.served().iter().sum::<u64>() - calls;
    for r in results {
        side.requests += 1;
        match r {
            Ok((t, r)) => {
                side.total.push(r.end - t);
                if let Some(f) = r.first_delta {
                    side.first.push(f - t);
                }
                side.events.push(r.events);
            }
            Err(e) => side.error(e),
        }
    }
}

/// Baseline and sessiond at one level, in alternating rounds (the baseline first in even ones).
async fn compare(
    fake: &Fake,
    sd: &Sessiond,
    bodies: &Arc<Bodies>,
    opts: &Opts,
    what: What,
    clients: usize,
    per_client: usize,
) -> (Side, Side) {
    let (mut raw, mut ours) = (Side::default(), Side::default());
    for round in 0..opts.rounds {
        for baseline_now in [round % 2 == 0, round % 2 == 1] {
            if baseline_now {
                baseline_round(
                    fake,
                    bodies,
                    what,
                    clients,
                    opts.warmup,
                    per_client,
                    &mut raw,
                )
                .await;
            } else {
                sessiond_round(fake, sd, what, clients, opts.warmup, per_client, &mut ours).await;
            }
        }
    }
    for s in [&mut raw, &mut ours] {
        s.total.sort();
        s.first.sort();
        s.create.sort();
    }
    (raw, ours)
}

// ---------------------------------------------------------------------------------------------
// Against llama.cpp.

const LLAMA_PROMPT: &str = "Name three colours.";

/// A first turn of a fresh session as the bus saw it: the first delta, the end and the text.
async fn llama_turn(sd: &Sessiond) -> Result<(Option<Instant>, Instant, String), String> {
    let created = sd
        .sessions
        .create(&sd.actor, first_turn(LLAMA_PROMPT), None)
        .await
        .map_err(|e| e.to_string())?;
    let mut sub = sd
        .store
        .bus()
        .subscribe(&created.key.id)
        .map_err(|e| e.to_string())?;
    if !sub.tail.is_empty() {
        return Err("subscribed after the first delta".into());
    }
    let mut first = None;
    loop {
        match sub.rx.recv().await {
            Ok(f) if f.seq.is_none() => {
                if f.data.contains("\"text_delta\"") {
                    first.get_or_insert_with(Instant::now);
                }
            }
            Ok(f) if is_terminal_type(&f.event_type) => {
                let end = Instant::now();
                let body: Value = serde_json::from_str(&f.data).map_err(|e| e.to_string())?;
                let e = &body["event"];
                if e["type"] != "complete" || e["status"] != "completed" {
                    return Err(format!(
                        "the turn ended {} {}: {}",
                        e["type"], e["status"], e["error"]
                    ));
                }
                let text = e["result"].as_str().unwrap_or("").to_owned();
                return Ok((first, end, text));
            }
            Ok(_) => {}
            Err(RecvError::Lagged(n)) => return Err(format!("the subscriber lagged by {n}")),
            Err(RecvError::Closed) => return Err("the bus closed".into()),
        }
    }
}

/// sessiond against llama.cpp, and the same request sent straight to it; `None` when the
/// server cannot run here.
fn llama_bench(opts: &Opts, rt: &tokio::runtime::Runtime) -> Option<(Side, Side)> {
    println!("== llama.cpp: SmolLM2-135M-Instruct on the CPU, straight and through sessiond ==");
    let python = match venv::suite("llama")
        .ok_or_else(|| "tests/python/llama is missing".to_owned())
        .and_then(|s| venv::venv(&s))
    {
        Ok(dir) => dir.join("bin/python"),
        Err(why) => {
            println!("   skipped: the llama.cpp venv (tests/python/llama) cannot be made: {why}");
            println!();
            return None;
        }
    };
    let max_tokens = 32;
    let server = llama::Llama::start(
        &python,
        llama::LlamaOptions {
            parallel: 1,
            ..Default::default()
        },
    );
    let engine = |base: &str| {
        json!({
            "kind": "openai",
            "baseUrl": base,
            "model": "smollm2",
            "systemPrompt": "You are a helpful assistant. Answer briefly.",
            "maxTokens": max_tokens,
            "temperature": 0.0,
            "titles": false,
            "tools": {"disabled": ["ask_user", "todo_write", "sleep_until", "start_session",
                "message_session", "read_file", "write_file", "list_dir", "search_files"]},
            "apiKeyEnv": "SESSIOND_BENCH_NO_KEY",
        })
    };
    // The body sessiond sends, captured once through a recording proxy.
    let tap = llama::Tap::start(&server.addr);
    let capture = Sessiond::start(engine(&tap.base_url()));
    if let Err(e) = rt.block_on(llama_turn(&capture)) {
        die("llama.cpp warm-up", e);
    }
    capture.stop();
    let body = tap
        .chats()
        .first()
        .map(|c| c.request.body.clone())
        .unwrap_or_else(|| die("llama.cpp warm-up", "no request captured"));
    let url = format!("http://{}/v1", server.addr);
    let sd = Sessiond::start(engine(&url));
    let http = rt.block_on(async { raw_client() });
    let chat = format!("{url}/chat/completions");
    let (mut raw, mut ours) = (Side::default(), Side::default());
    let (mut raw_texts, mut our_texts) = (Vec::new(), Vec::new());
    for round in 0..opts.rounds.min(3) {
        for baseline_now in [round % 2 == 0, round % 2 == 1] {
            let window = CpuWindow::start();
            let t0 = Instant::now();
            for _ in 0..opts.llama_turns {
                let t = Instant::now();
                if baseline_now {
                    raw.requests += 1;
                    match rt.block_on(raw_call(&http, &chat, &body)) {
                        Ok(r) => {
                            raw.total.push(r.end - t);
                            if let Some(f) = r.first_delta {
                                raw.first.push(f - t);
                            }
                            raw_texts.push(r.text);
                        }
                        Err(e) => raw.error(e),
                    }
                } else {
                    ours.requests += 1;
                    match rt.block_on(llama_turn(&sd)) {
                        Ok((first, end, text)) => {
                            ours.total.push(end - t);
                            if let Some(f) = first {
                                ours.first.push(f - t);
                            }
                            our_texts.push(text);
                        }
                        Err(e) => ours.error(e),
                    }
                }
            }
            let side = if baseline_now { &mut raw } else { &mut ours };
            side.wall += t0.elapsed().as_secs_f64();
            window.stop(&mut side.cpu);
        }
    }
    sd.stop();
    for s in [&mut raw, &mut ours] {
        s.total.sort();
        s.first.sort();
    }
    let same = our_texts
        .iter()
        .filter(|t| raw_texts.first() == Some(*t))
        .count();
    println!(
        "   server: llama.cpp (xllamacpp) at {}, 1 slot; prompt {LLAMA_PROMPT:?}, max_tokens \
         {max_tokens}, temperature 0; request body {} B (sessiond's, sent by both sides)",
        server.addr,
        thousands(body.len() as u64)
    );
    println!(
        "   replies: {same} of {} of sessiond's turns gave the baseline's first reply ({:?})",
        our_texts.len(),
        raw_texts
            .first()
            .map(|t| t.chars().take(60).collect::<String>())
            .unwrap_or_default()
    );
    println!(
        "   1 at a time, alternating ({} measured per side):",
        raw.requests
    );
    println!(
        "     baseline, request -> [DONE]:       {}",
        raw.total.line()
    );
    println!(
        "     sessiond, create -> complete:      {}",
        ours.total.line()
    );
    println!(
        "     time to first token: baseline p50 {:.1} ms, p99 {:.1} ms; sessiond (seen on the \
         bus) p50 {:.1} ms, p99 {:.1} ms; sessiond - baseline p50 {:+.1} ms, mean {:+.1} ms",
        raw.first.p(50.0),
        raw.first.p(99.0),
        ours.first.p(50.0),
        ours.first.p(99.0),
        ours.first.p(50.0) - raw.first.p(50.0),
        ours.first.mean() - raw.first.mean()
    );
    println!(
        "     whole turn: sessiond / baseline p50 {:.3}x, mean {:.3}x; sessiond - baseline p50 \
         {:+.1} ms, mean {:+.1} ms",
        ours.total.p(50.0) / raw.total.p(50.0),
        ours.total.mean() / raw.total.mean(),
        ours.total.p(50.0) - raw.total.p(50.0),
        ours.total.mean() - raw.total.mean()
    );
    println!(
        "     CPU of this process per turn (the model server is another process): baseline \
         {:.3} ms, sessiond {:.3} ms ({:+.3} ms); baseline {}; sessiond {}",
        raw.cpu_ms(),
        ours.cpu_ms(),
        ours.cpu_ms() - raw.cpu_ms(),
        raw.errors_line(),
        ours.errors_line()
    );
    println!();
    drop(server);
    Some((raw, ours))
}

// ---------------------------------------------------------------------------------------------
// Main.

fn mean_u64(v: &[u64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<u64>() as f64 / v.len() as f64
    }
}

fn print_pair(label: &str, raw: &Side, ours: &Side, model_calls_per_turn: u64) {
    println!("   {label}");
    println!(
        "     baseline, request -> [DONE]:       {}",
        raw.total.line()
    );
    println!(
        "     sessiond, message -> complete:     {}",
        ours.total.line()
    );
    println!(
        "     first delta: baseline p50 {:.2} ms, p99 {:.2} ms; sessiond (seen on the bus) p50 \
         {:.2} ms, p99 {:.2} ms",
        raw.first.p(50.0),
        raw.first.p(99.0),
        ours.first.p(50.0),
        ours.first.p(99.0)
    );
    println!(
        "     sessiond / baseline: p50 {:.2}x, p99 {:.2}x, mean {:.2}x; overhead per turn p50 \
         {:+.2} ms, mean {:+.2} ms",
        ours.total.p(50.0) / raw.total.p(50.0),
        ours.total.p(99.0) / raw.total.p(99.0),
        ours.total.mean() / raw.total.mean(),
        ours.total.p(50.0) - raw.total.p(50.0),
        ours.total.mean() - raw.total.mean()
    );
    println!(
        "     throughput: baseline {:.0} req/s, sessiond {:.0} turns/s",
        raw.rate(),
        ours.rate()
    );
    println!("     baseline {}", raw.cpu_line());
    println!("     sessiond {}", ours.cpu_line());
    println!(
        "     CPU overhead per turn: {:+.3} ms; durable events per turn {:.1}; model calls per \
         turn {:.2} (expected {model_calls_per_turn}); baseline {}; sessiond {}",
        ours.cpu_ms() - raw.cpu_ms(),
        mean_u64(&ours.events),
        ours.calls as f64 / ours.requests.max(1) as f64,
        raw.errors_line(),
        ours.errors_line()
    );
}

fn main() {
    let opts = Opts::parse();
    let started = Instant::now();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "sessiond openai engine overhead bench ({})",
        if opts.quick { "--quick" } else { "full run" }
    );
    println!(
        "   cores: {cores}; load average at start: {} (1/5/15 min; above {cores} means other \
         processes compete for the cores)",
        loadavg()
    );
    let fake = Fake::start();
    let sd = Sessiond::start(Sessiond::fake_engine(&fake));
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .unwrap_or_else(|e| die("client runtime", e));
    println!(
        "   endpoint: in-process fake at {} (one thread, keep-alive, one write per event); a text \
         reply is {DELTAS} deltas ({} characters) + finish + usage + [DONE]",
        fake.url,
        expected_text().len()
    );
    println!(
        "   sessiond: store + runner (2 threads) + sessions core in this process, default engine \
         openai at the fake, titles off; {TURNS_PER_SESSION} measured messages per session after \
         its first turn"
    );
    println!("   figures are wall-clock on a possibly shared machine; nothing here is asserted.");
    println!();

    // Warm-up through sessiond: one text turn and one tool turn, whose request bodies the
    // baseline then sends.
    let types = client_rt.block_on(async {
        let (id, _) = create_session(&sd.sessions, &sd.actor)
            .await
            .unwrap_or_else(|e| die("first turn", e));
        let text = turn(&sd.sessions, &sd.actor, &id, "Say two hundred words.", true)
            .await
            .unwrap_or_else(|e| die("text turn", e));
        let (id, _) = create_session(&sd.sessions, &sd.actor)
            .await
            .unwrap_or_else(|e| die("first turn", e));
        let tool = turn(
            &sd.sessions,
            &sd.actor,
            &id,
            &format!("Plan the work. {TOOL_MARKER}"),
            true,
        )
        .await
        .unwrap_or_else(|e| die("tool turn", e));
        if !tool.types.iter().any(|t| t == "todos") {
            die("tool turn", "no todos event");
        }
        (text.types, tool.types)
    });
    let served = fake.stats.served();
    if served != [3, 1, 1] || fake.stats.refused.load(Ordering::Relaxed) != 0 {
        die(
            "warm-up",
            format!("the endpoint answered {served:?} (text, tool call, tool result)"),
        );
    }
    let bodies = {
        let first = fake
            .stats
            .first_body
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let get = |k: Kind| {
            first[k as usize]
                .clone()
                .unwrap_or_else(|| die("warm-up", format!("no {k:?} body")))
        };
        Arc::new(Bodies {
            text: get(Kind::Text),
            tool_call: get(Kind::ToolCall),
            tool_result: get(Kind::ToolResult),
        })
    };
    println!("== Warm-up: one text turn and one tool turn through sessiond ==");
    println!(
        "   durable events of a text turn: {} ({})",
        types.0.len(),
        types.0.join(", ")
    );
    println!(
        "   durable events of a tool turn: {} ({})",
        types.1.len(),
        types.1.join(", ")
    );
    println!(
        "   request bodies the baseline sends (sessiond's, first turn of a session): text {} B, \
         tool call {} B, tool result {} B",
        thousands(bodies.text.len() as u64),
        thousands(bodies.tool_call.len() as u64),
        thousands(bodies.tool_result.len() as u64)
    );
    println!();

    let bytes_before = fake.stats.body_bytes();
    let served_before = fake.stats.served();
    let mut rows: Vec<(String, Side, Side)> = Vec::new();
    println!(
        "== Text turns: {DELTAS} deltas, baseline and sessiond in {} alternating rounds, closed \
         loop ==",
        opts.rounds
    );
    for (i, clients) in LEVELS.into_iter().enumerate() {
        let (raw, ours) = client_rt.block_on(compare(
            &fake,
            &sd,
            &bodies,
            &opts,
            What::Text,
            clients,
            opts.per_client[i],
        ));
        print_pair(
            &format!(
                "{clients} at once ({} measured per side{}):",
                thousands(raw.requests),
                if clients > 1 {
                    ", one session per client at a time"
                } else {
                    ""
                }
            ),
            &raw,
            &ours,
            1,
        );
        if clients == 1 {
            println!(
                "     sessiond, create -> complete (first turn of a session, unmeasured \
                 windows): p50 {:.2} ms, p99 {:.2} ms (n = {})",
                ours.create.p(50.0),
                ours.create.p(99.0),
                ours.create.n()
            );
        }
        rows.push((format!("text turn, {clients} at once"), raw, ours));
    }
    println!();

    println!(
        "== Tool turn: `todo_write` call, its result, then the {DELTAS}-delta text (1 at a time) =="
    );
    let (raw, ours) = client_rt.block_on(compare(
        &fake,
        &sd,
        &bodies,
        &opts,
        What::Tool,
        1,
        opts.tool_turns,
    ));
    print_pair(
        &format!(
            "baseline = the same two calls back to back ({} measured per side):",
            raw.requests
        ),
        &raw,
        &ours,
        2,
    );
    rows.push(("tool turn, 1 at a time".into(), raw, ours));
    println!();
    let bytes: Vec<u64> = fake
        .stats
        .body_bytes()
        .iter()
        .zip(bytes_before)
        .map(|(a, b)| a - b)
        .collect();
    let served: Vec<u64> = fake
        .stats
        .served()
        .iter()
        .zip(served_before)
        .map(|(a, b)| a - b)
        .collect();
    println!(
        "   request bodies the endpoint received, mean: text {} B, tool call {} B, tool result {} \
         B (baseline and sessiond together; sessiond's grow with the conversation); refused \
         requests {}",
        thousands(bytes[0] / served[0].max(1)),
        thousands(bytes[1] / served[1].max(1)),
        thousands(bytes[2] / served[2].max(1)),
        fake.stats.refused.load(Ordering::Relaxed)
    );
    println!();

    sd.stop();
    if let Some((raw, ours)) = llama_bench(&opts, &client_rt) {
        rows.push(("llama.cpp turn, 1 at a time".into(), raw, ours));
    }
    client_rt.shutdown_timeout(Duration::from_secs(2));

    println!(
        "== Summary ({}) ==",
        if opts.quick { "--quick" } else { "full run" }
    );
    println!(
        "   {:<24} {:>11} {:>11} {:>8} {:>8} {:>10} {:>10} {:>7}",
        "", "raw p50", "ours p50", "p50 x", "p99 x", "+ms p50", "+CPU ms", "errors"
    );
    for (label, raw, ours) in &rows {
        println!(
            "   {:<24} {:>8.2} ms {:>8.2} ms {:>7.2}x {:>7.2}x {:>+10.2} {:>+10.3} {:>7}",
            label,
            raw.total.p(50.0),
            ours.total.p(50.0),
            ours.total.p(50.0) / raw.total.p(50.0),
            ours.total.p(99.0) / raw.total.p(99.0),
            ours.total.p(50.0) - raw.total.p(50.0),
            ours.cpu_ms() - raw.cpu_ms(),
            raw.errors + ours.errors
        );
    }
    println!();
    println!(
        "   cores: {cores}; load average at end: {}; total time {:.0} s",
        loadavg(),
        started.elapsed().as_secs_f64()
    );
}
