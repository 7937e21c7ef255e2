//! A real model server for tests and benchmarks: llama.cpp's own OpenAI-compatible HTTP server
//! (the `xllamacpp` wheel) serving SmolLM2-135M-Instruct, started by
//! `tests/python/llama/serve.py` from the `llama` suite's venv (`common/venv.rs`), and a [`Tap`]:
//! a TCP proxy between sessiond and that server which records every HTTP exchange byte for byte
//! (so a test can compare what sessiond recorded with what the server sent), can be pointed
//! at a restarted server, and can play two behaviours of other servers llama.cpp's does not
//! have ([`Quirks`]).
//!
//! Include it next to `common/venv.rs` (`#[path = "common/venv.rs"] mod venv;`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The Python of the llama suite's venv, made on first use. Without it a test fails when `CI` is
/// set; a local run prints a notice (past the test harness's capture, so it is seen) and the
/// caller returns early.
pub fn python() -> Option<PathBuf> {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv = VENV.get_or_init(|| {
        let suite = crate::venv::suite("llama").ok_or("tests/python/llama is missing")?;
        crate::venv::venv(&suite)
    });
    match venv {
        Ok(dir) => Some(dir.join("bin/python")),
        Err(why) if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) => {
            panic!(
                "the llama.cpp tests need their venv (tests/python/llama), which cannot be made: {why}"
            )
        }
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "notice: SKIPPED llama.cpp test: its venv (tests/python/llama) cannot be made: {why}"
            );
            None
        }
    }
}

/// How to start the server.
#[derive(Debug, Clone)]
pub struct LlamaOptions {
    /// Requests served at once (slots).
    pub parallel: u32,
    /// Tokens of context, all slots together.
    pub ctx: u32,
    /// Generate until `max_tokens`, whatever the model would say.
    pub ignore_eos: bool,
}

impl Default for LlamaOptions {
    fn default() -> Self {
        LlamaOptions {
            parallel: 2,
            ctx: 4096,
            ignore_eos: false,
        }
    }
}

/// One llama.cpp server process on a loopback port. Dropping it kills it.
pub struct Llama {
    child: Option<Child>,
    /// Held open: the server exits when it closes.
    _stdin: Option<ChildStdin>,
    /// `host:port`.
    pub addr: String,
    python: PathBuf,
    options: LlamaOptions,
}

impl Llama {
    /// Starts a server and waits until its model is loaded.
    pub fn start(python: &Path, options: LlamaOptions) -> Llama {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/llama/serve.py");
        let mut cmd = Command::new(python);
        cmd.arg(&script)
            .args(["--parallel", &options.parallel.to_string()])
            .args(["--ctx", &options.ctx.to_string()]);
        if options.ignore_eos {
            cmd.arg("--ignore-eos");
        }
        let log = std::env::var_os("SESSIOND_LLAMA_LOG").is_some();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if log { Stdio::inherit() } else { Stdio::null() })
            .spawn()
            .expect("start llama.cpp (tests/python/llama/serve.py)");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read the server's first line");
        let addr = line
            .trim()
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("llama.cpp did not start: {line:?}"))
            .to_owned();
        Llama {
            _stdin: child.stdin.take(),
            child: Some(child),
            addr,
            python: python.to_path_buf(),
            options,
        }
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self._stdin = None;
    }

    /// A fresh server with the same options (on another port).
    pub fn restart(&mut self) {
        self.kill();
        *self = Llama::start(&self.python.clone(), self.options.clone());
    }

    /// One of the server's Prometheus counters (`llamacpp:<name>`).
    pub fn metric(&self, name: &str) -> f64 {
        let text = reqwest::blocking::get(format!("http://{}/metrics", self.addr))
            .and_then(|r| r.text())
            .expect("metrics");
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| {
                let (key, value) = l.split_once(' ')?;
                (key == format!("llamacpp:{name}")).then(|| value.trim().parse().ok())?
            })
            .unwrap_or_else(|| panic!("no metric {name} in:\n{text}"))
    }
}

impl Drop for Llama {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One HTTP message as it crossed the tap.
#[derive(Debug, Clone)]
pub struct Message {
    pub start_line: String,
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// The whole message arrived (its last chunk, or all of its `Content-Length`).
    pub complete: bool,
}

impl Message {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The `data:` documents of a server-sent event stream (`[DONE]` left out).
    pub fn sse(&self) -> Vec<Value> {
        String::from_utf8_lossy(&self.body)
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    }

    /// The stream ended with `data: [DONE]`.
    pub fn sse_done(&self) -> bool {
        String::from_utf8_lossy(&self.body)
            .lines()
            .any(|l| l.trim() == "data: [DONE]")
    }
}

/// A request and its response (`None` when none began), on one connection.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub request: Message,
    pub response: Option<Message>,
    /// The client closed the connection while this response was still coming.
    pub closed_by_client: bool,
}

impl Exchange {
    pub fn body(&self) -> Value {
        self.request.json()
    }

    /// The usage the server reported: the `usage` of the stream's chunks or of the whole reply.
    pub fn reported_usage(&self) -> Option<Value> {
        let response = self.response.as_ref()?;
        let from_stream = response
            .sse()
            .into_iter()
            .filter_map(|c| c.get("usage").filter(|u| u.is_object()).cloned())
            .next_back();
        from_stream.or_else(|| response.json().get("usage").cloned())
    }

    /// The text of the reply (streamed deltas joined, or the whole message's content).
    pub fn reply_text(&self) -> String {
        let Some(response) = &self.response else {
            return String::new();
        };
        let streamed: String = response
            .sse()
            .iter()
            .filter_map(|c| {
                c.pointer("/choices/0/delta/content")
                    .and_then(Value::as_str)
            })
            .collect();
        if !streamed.is_empty() {
            return streamed;
        }
        response
            .json()
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    }
}

#[derive(Default)]
struct Conn {
    request: Vec<u8>,
    response: Vec<u8>,
    /// The client's side ended first.
    client_closed: bool,
    upstream_closed: bool,
}

/// Behaviours of other OpenAI-compatible servers (llama-cpp-python's) that the tap plays in
/// front of llama.cpp's. Requests are still answered by llama.cpp; the tap only changes what
/// reaches it, or answers a request it would refuse.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quirks {
    /// Requests reach llama.cpp without their `stream_options`: it then reports no usage at all,
    /// as a server that ignores `stream_options.include_usage` does. The request recorded is the
    /// one the client sent.
    pub ignore_include_usage: bool,
    /// A streamed request that offers tools is not forwarded: the tap answers it with an event
    /// stream that ends before any event (llama-cpp-python's answer to `tool_choice: "auto"`
    /// with `stream: true`, whose error only reaches its log), and closes the connection.
    pub refuse_streamed_tools: bool,
}

/// A TCP proxy that records what crosses it.
#[derive(Clone)]
pub struct Tap {
    pub addr: String,
    upstream: Arc<Mutex<String>>,
    quirks: Arc<Mutex<Quirks>>,
    conns: Arc<Mutex<Vec<Arc<Mutex<Conn>>>>>,
}

/// What the tap answers for llama-cpp-python when it refuses to stream with tools.
const EMPTY_STREAM: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";

/// The length of the first whole request in `bytes` (head and `Content-Length` body), if one
/// has arrived.
fn whole_request(bytes: &[u8]) -> Option<usize> {
    let end = find(bytes, b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&bytes[..end]);
    let len = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    (bytes.len() >= end + len).then_some(end + len)
}

/// What a whole request becomes under `quirks`: the bytes to forward, or `None` when the tap
/// answers it itself.
fn rewrite(request: &[u8], quirks: Quirks) -> Option<Vec<u8>> {
    let Some(end) = find(request, b"\r\n\r\n").map(|e| e + 4) else {
        return Some(request.to_vec());
    };
    let Ok(mut body) = serde_json::from_slice::<Value>(&request[end..]) else {
        return Some(request.to_vec());
    };
    let offers_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    if quirks.refuse_streamed_tools && body["stream"] == Value::Bool(true) && offers_tools {
        return None;
    }
    if !quirks.ignore_include_usage {
        return Some(request.to_vec());
    }
    if let Some(o) = body.as_object_mut() {
        o.remove("stream_options");
    }
    let body = body.to_string();
    let head = String::from_utf8_lossy(&request[..end - 4]);
    let mut out = String::new();
    for line in head.split("\r\n") {
        match line.split_once(':') {
            Some((k, _)) if k.trim().eq_ignore_ascii_case("content-length") => {
                out.push_str(&format!("{k}: {}", body.len()));
            }
            _ => out.push_str(line),
        }
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    Some(out.into_bytes())
}

/// The client-to-server half of a connection under quirks: whole requests are recorded as
/// sent, then forwarded as [`rewrite`] makes them, or answered by the tap.
fn pump_requests(mut from: TcpStream, mut to: TcpStream, conn: Arc<Mutex<Conn>>, quirks: Quirks) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pending = Vec::new();
    'read: loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => pending.extend_from_slice(&buf[..n]),
        }
        while let Some(len) = whole_request(&pending) {
            let request: Vec<u8> = pending.drain(..len).collect();
            conn.lock()
                .expect("lock")
                .request
                .extend_from_slice(&request);
            match rewrite(&request, quirks) {
                Some(bytes) => {
                    if to.write_all(&bytes).is_err() {
                        break 'read;
                    }
                }
                None => {
                    {
                        let mut c = conn.lock().expect("lock");
                        c.response.extend_from_slice(EMPTY_STREAM.as_bytes());
                        c.upstream_closed = true;
                    }
                    let _ = from.write_all(EMPTY_STREAM.as_bytes());
                    break 'read;
                }
            }
        }
    }
    {
        let mut c = conn.lock().expect("lock");
        if !c.upstream_closed {
            c.client_closed = true;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

fn pump(mut from: TcpStream, mut to: TcpStream, conn: Arc<Mutex<Conn>>, client_to_server: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                {
                    let mut c = conn.lock().expect("lock");
                    if client_to_server {
                        c.request.extend_from_slice(&buf[..n]);
                    } else {
                        c.response.extend_from_slice(&buf[..n]);
                    }
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    {
        let mut c = conn.lock().expect("lock");
        if client_to_server {
            if !c.upstream_closed {
                c.client_closed = true;
            }
        } else {
            c.upstream_closed = true;
        }
    }
    let _ = to.shutdown(Shutdown::Both);
    let _ = from.shutdown(Shutdown::Both);
}

impl Tap {
    pub fn start(upstream: &str) -> Tap {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind tap");
        let addr = listener.local_addr().expect("addr").to_string();
        let tap = Tap {
            addr,
            upstream: Arc::new(Mutex::new(upstream.to_owned())),
            quirks: Arc::default(),
            conns: Arc::default(),
        };
        let t = tap.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let upstream = t.upstream.lock().expect("lock").clone();
                let Ok(server) = TcpStream::connect(&upstream) else {
                    // The server is down: the client sees its connection refused at once.
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let conn = Arc::new(Mutex::new(Conn::default()));
                t.conns.lock().expect("lock").push(Arc::clone(&conn));
                let (c2, s2) = (
                    client.try_clone().expect("clone"),
                    server.try_clone().expect("clone"),
                );
                let conn2 = Arc::clone(&conn);
                let quirks = *t.quirks.lock().expect("lock");
                if quirks.ignore_include_usage || quirks.refuse_streamed_tools {
                    std::thread::spawn(move || pump_requests(client, server, conn, quirks));
                } else {
                    std::thread::spawn(move || pump(client, server, conn, true));
                }
                std::thread::spawn(move || pump(s2, c2, conn2, false));
            }
        });
        tap
    }

    /// Sends new connections to `upstream` (`host:port`) from now on.
    pub fn set_upstream(&self, upstream: &str) {
        *self.upstream.lock().expect("lock") = upstream.to_owned();
    }

    /// Plays `quirks` on connections opened from now on.
    pub fn set_quirks(&self, quirks: Quirks) {
        *self.quirks.lock().expect("lock") = quirks;
    }

    /// The base URL an `openai` engine uses to reach the server through the tap.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every exchange so far, in the order their connections opened.
    pub fn exchanges(&self) -> Vec<Exchange> {
        let conns: Vec<Arc<Mutex<Conn>>> = self.conns.lock().expect("lock").clone();
        let mut out = Vec::new();
        for conn in conns {
            let c = conn.lock().expect("lock");
            let requests = messages(&c.request);
            let responses = messages(&c.response);
            let n = requests.len();
            for (i, request) in requests.into_iter().enumerate() {
                let response = responses.get(i).cloned();
                let last = i + 1 == n;
                let closed_by_client =
                    last && c.client_closed && response.as_ref().is_none_or(|r| !r.complete);
                out.push(Exchange {
                    request,
                    response,
                    closed_by_client,
                });
            }
        }
        out
    }

    /// The chat-completions exchanges so far.
    pub fn chats(&self) -> Vec<Exchange> {
        self.exchanges()
            .into_iter()
            .filter(|e| e.request.start_line.contains("/chat/completions"))
            .collect()
    }

    /// Waits until `n` chat exchanges have a complete response (or, with `or_closed`, were
    /// closed by the client).
    pub fn wait_chats(&self, n: usize, timeout: Duration) -> Vec<Exchange> {
        let deadline = Instant::now() + timeout;
        loop {
            let chats = self.chats();
            let settled = chats
                .iter()
                .filter(|e| e.closed_by_client || e.response.as_ref().is_some_and(|r| r.complete))
                .count();
            if settled >= n {
                return chats;
            }
            assert!(
                Instant::now() < deadline,
                "expected {n} settled chat exchanges, saw {settled}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The HTTP/1.1 messages in a recorded byte stream; the last may be incomplete.
fn messages(mut bytes: &[u8]) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(end) = find(bytes, b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        bytes = &bytes[end + 4..];
        let mut lines = head.split("\r\n");
        let start_line = lines.next().unwrap_or("").to_owned();
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        let mut body = Vec::new();
        let mut complete = false;
        if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            while let Some(line_end) = find(bytes, b"\r\n") {
                let size_text = String::from_utf8_lossy(&bytes[..line_end]).into_owned();
                let Ok(size) =
                    usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                else {
                    break;
                };
                let data = &bytes[line_end + 2..];
                if size == 0 {
                    bytes = data.get(2..).unwrap_or(&[]);
                    complete = true;
                    break;
                }
                if data.len() < size + 2 {
                    body.extend_from_slice(&data[..data.len().min(size)]);
                    bytes = &[];
                    break;
                }
                body.extend_from_slice(&data[..size]);
                bytes = &data[size + 2..];
            }
        } else if let Some(len) = get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            let take = len.min(bytes.len());
            body.extend_from_slice(&bytes[..take]);
            complete = take == len;
            bytes = &bytes[take..];
        } else {
            // Until the connection closes.
            body.extend_from_slice(bytes);
            bytes = &[];
        }
        out.push(Message {
            start_line,
            headers,
            body,
            complete,
        });
        if !complete {
            break;
        }
    }
    out
}
