//! The HTTP layer around the routes: requests the HTTP/1 parser rejects are answered with JSON
//! bodies like every other error; JSON bodies need a JSON type (415) and must arrive in time
//! (408); at its open-files limit the server answers 503 instead of going silent; an event
//! stream whose client hung up frees its slot at once.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// Sends `bytes` on a fresh connection and reads everything the server sends until it closes
/// (or 20 s pass).
fn raw(s: &Server, bytes: &[u8]) -> String {
    let addr = s.base.trim_start_matches("http://");
    let mut conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    conn.write_all(bytes).expect("write");
    let mut out = Vec::new();
    let _ = conn.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// One raw response: status, headers (lowercased names), body.
type RawResponse = (u16, Vec<(String, String)>, String);

/// The responses in `text`, in order.
fn responses(text: &str) -> Vec<RawResponse> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some((head, after)) = rest.split_once("\r\n\r\n") {
        let mut lines = head.lines();
        let status: u16 = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {head:?}"));
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(after.len());
        let len = len.min(after.len());
        out.push((status, headers, after[..len].to_owned()));
        rest = &after[len..];
    }
    out
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// One response, which must be a JSON error `{error, message}` with `status`.
fn assert_json_error(what: &str, text: &str, status: u16) -> Value {
    let all = responses(text);
    let (st, headers, body) = all
        .last()
        .unwrap_or_else(|| panic!("{what}: no response: {text:?}"));
    assert_eq!(*st, status, "{what}: {text}");
    assert!(
        header(headers, "content-type").is_some_and(|v| v.starts_with("application/json")),
        "{what}: {text}"
    );
    assert!(header(headers, "x-request-id").is_some(), "{what}: {text}");
    let v: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{what}: body not JSON ({e}): {text}"));
    assert!(
        v["error"].is_string() && v["message"].is_string(),
        "{what}: {v}"
    );
    v
}

#[test]
fn requests_the_parser_rejects_get_json_errors() {
    let s = Server::start();
    let big_header = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(200 * 1024)
    );
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "NUL in a header",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Bad: a\x00b\r\n\r\n".to_vec(),
            400,
        ),
        (
            "Content-Length and Transfer-Encoding",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            400,
        ),
        (
            "a Content-Length that is no number",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n".to_vec(),
            400,
        ),
        (
            "two different Content-Lengths",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n".to_vec(),
            400,
        ),
        (
            "a Transfer-Encoding that is not chunked last",
            b"POST /healthz HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n".to_vec(),
            400,
        ),
        (
            "a malformed chunk size",
            b"POST /auth/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n".to_vec(),
            400,
        ),
        ("a request line that is not HTTP", b"GARBAGE / NONSENSE\r\n\r\n".to_vec(), 400),
        ("headers too large", big_header.into_bytes(), 431),
        // Headers that never finish: answered when the head timeout passes.
        (
            "headers that never end",
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n".to_vec(),
            408,
        ),
    ];
    for (what, bytes, status) in cases {
        let text = raw(&s, &bytes);
        assert_json_error(what, &text, status);
    }
    // After a good response on the same connection (pipelined), the parser's error is JSON too,
    // and the good response is untouched.
    let text = raw(
        &s,
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /x HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    );
    let all = responses(&text);
    assert_eq!(all.len(), 2, "{text}");
    assert_eq!(all[0].0, 200, "{text}");
    let health: Value = serde_json::from_str(&all[0].2).expect("healthz JSON");
    assert_eq!(health["status"], "ok");
    assert_json_error("after a pipelined request", &text, 400);
    // HEAD answers carry no body and keep the connection's framing exact.
    let text = raw(
        &s,
        b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    let all = responses(&text);
    assert_eq!(all.len(), 2, "{text}");
    assert_eq!(all[1].0, 200, "{text}");
    // The server is fine afterwards, and counted what it refused.
    let (st, _) = s.get(&s.url("/healthz"));
    assert_eq!(st, 200);
    assert!(
        s.metric("sessiond_http_rejected_total{status=\"400\"}")
            .is_some_and(|n| n >= 7.0)
    );
}

#[test]
fn json_bodies_need_a_json_content_type() {
    let s = Server::start();
    let url = s.sessions_url("");
    let before = s.get(&url).1["sessions"].as_array().map(Vec::len);
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let mut req = s.http.post(&url).body(r#"{"prompt":"hello"}"#);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        let (st, v) = into_json(req.send().expect("POST"));
        assert_eq!(st, 415, "{ct:?}: {v}");
        assert_eq!(v["error"], "unsupported_media_type", "{ct:?}: {v}");
    }
    assert_eq!(
        s.get(&url).1["sessions"].as_array().map(Vec::len),
        before,
        "a refused body created a session"
    );
    for ct in ["application/json", "application/json; charset=utf-8"] {
        let (st, v) = into_json(
            s.http
                .post(&url)
                .header("content-type", ct)
                .body(r#"{"prompt":"hello"}"#)
                .send()
                .expect("POST"),
        );
        assert_eq!(st, 200, "{ct}: {v}");
    }
    // Sign-in and agents read JSON too.
    let (st, v) = into_json(
        s.http
            .post(s.url("/auth/login"))
            .header("content-type", "text/plain")
            .body(r#"{"email":"a@b.c","password":"x"}"#)
            .send()
            .expect("POST"),
    );
    assert_eq!(st, 415, "{v}");
    let (st, v) = into_json(
        s.http
            .post(s.url("/v1/ws/default/agents"))
            .header("content-type", "text/plain")
            .body(r#"{"slug":"x"}"#)
            .send()
            .expect("POST"),
    );
    assert_eq!(st, 415, "{v}");
}

#[test]
fn a_body_that_never_completes_is_answered_408() {
    let s = Server::start_with_config("[limits]\nbody_timeout_ms = 1000\n");
    let addr = s.base.trim_start_matches("http://").to_owned();
    let text = raw(
        &s,
        format!(
            "POST /v1/ws/default/agent/sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"prompt\":",
            s.token
        )
        .as_bytes(),
    );
    let v = assert_json_error("a body cut short", &text, 408);
    assert_eq!(v["error"], "request_timeout", "{v}");
    let (st, list) = s.get(&s.sessions_url(""));
    assert_eq!(st, 200);
    assert_eq!(list["sessions"].as_array().map(Vec::len), Some(0), "{list}");
}

/// A server process started by a test; killed when dropped (also when the test fails).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `sessiond serve` on `data_dir` under an open-files limit of `soft`:`hard`.
fn serve_with_open_files(data_dir: &std::path::Path, soft: u64, hard: u64) -> (Killed, String) {
    let mut cmd = std::process::Command::new("prlimit");
    cmd.arg(format!("--nofile={soft}:{hard}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_sessiond"))
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .args(common::database_args(data_dir))
        .env_remove("SESSIOND_DATABASE_URL")
        .env("SESSIOND_ENGINE", "scripted")
        .env("SESSIOND_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = Killed(cmd.spawn().expect("spawn prlimit sessiond"));
    let mut reader = BufReader::new(child.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    reader.read_line(&mut line).expect("first line");
    let base = line
        .trim()
        .strip_prefix("sessiond listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    std::thread::spawn(move || {
        let mut sink = String::new();
        let _ = reader.read_to_string(&mut sink);
    });
    (child, base)
}

fn soft_open_files_limit(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    line.split_whitespace()
        .nth(3)
        .expect("soft")
        .parse()
        .expect("number")
}

#[test]
fn at_the_open_files_limit_new_connections_get_503_and_the_server_keeps_answering() {
    let mut first = Server::start();
    let token = first.token.clone();
    let id = first.create_prompt("hello");
    first.wait_terminal(&id, 1);
    assert!(first.stop().success());

    // The soft limit is raised as far as the hard limit allows.
    let (child, _) = serve_with_open_files(&first.data_dir, 200, 300);
    assert_eq!(soft_open_files_limit(child.0.id()), 300);
    drop(child);

    // 256 descriptors: 192 connections, the rest kept in reserve.
    let (child, base) = serve_with_open_files(&first.data_dir, 256, 256);
    let addr = base.trim_start_matches("http://").to_owned();
    let events = format!("/v1/ws/default/agent/sessions/{id}/events");
    let open_stream = || -> (TcpStream, String) {
        let mut c = TcpStream::connect(&addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        write!(
            c,
            "GET {events} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
        )
        .expect("write");
        let mut buf = [0u8; 2048];
        let n = c.read(&mut buf).unwrap_or(0);
        (c, String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let mut open = Vec::new();
    let mut refused = None;
    for i in 0..300 {
        let (c, head) = open_stream();
        if head.starts_with("HTTP/1.1 200") {
            open.push(c);
            continue;
        }
        refused = Some((i, c, head));
        break;
    }
    let (at, mut c, head) = refused.expect("no connection was refused at the limit");
    assert!(at > 100, "refused after only {at} streams");
    let mut rest = String::new();
    let _ = c.read_to_string(&mut rest);
    let text = head + &rest;
    let v = assert_json_error_without_request_id(&text, 503);
    assert_eq!(v["error"], "unavailable", "{v}");
    // Closing streams makes room again.
    open.truncate(open.len() - 10);
    let client = reqwest::blocking::Client::new();
    let ok = poll_until("a request answered again", Duration::from_secs(10), || {
        client
            .get(format!("{base}/healthz"))
            .send()
            .ok()
            .filter(|r| r.status().as_u16() == 200)
    });
    assert_eq!(ok.status().as_u16(), 200);
    drop(open);
    drop(child);
}

/// The 503 of a refused connection is written before any route: JSON, no request id.
fn assert_json_error_without_request_id(text: &str, status: u16) -> Value {
    let all = responses(text);
    let (st, headers, body) = all
        .last()
        .unwrap_or_else(|| panic!("no response: {text:?}"));
    assert_eq!(*st, status, "{text}");
    assert!(
        header(headers, "content-type").is_some_and(|v| v.starts_with("application/json")),
        "{text}"
    );
    serde_json::from_str(body).unwrap_or_else(|e| panic!("body not JSON ({e}): {text}"))
}

/// Streams whose clients hung up give their descriptor and subscriber slot back at once, not at
/// their next keep-alive.
#[test]
fn event_streams_of_clients_that_hung_up_are_freed_promptly() {
    let s = Server::start();
    let id = s.create_prompt("hello");
    s.wait_terminal(&id, 1);
    let addr = s.base.trim_start_matches("http://").to_owned();
    let streams: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut c = TcpStream::connect(&addr).expect("connect");
            write!(
                c,
                "GET /v1/ws/default/agent/sessions/{id}/events HTTP/1.1\r\nHost: {addr}\r\n\
                 Authorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
                s.token
            )
            .expect("write");
            let mut head = [0u8; 12];
            c.read_exact(&mut head).expect("response");
            assert_eq!(&head, b"HTTP/1.1 200");
            c
        })
        .collect();
    poll_until("20 open streams", Duration::from_secs(10), || {
        (s.metric("sessiond_sse_subscribers") == Some(20.0)).then_some(())
    });
    // The clients hang up (their sockets close).
    drop(streams);
    // Keep-alives come every 15 s; the streams must be gone well before one is due.
    poll_until("the streams freed", Duration::from_secs(5), || {
        (s.metric("sessiond_sse_subscribers") == Some(0.0)).then_some(())
    });
    // The session takes new streams, and writes still reach them.
    let sse = s.sse(&id, None, None);
    let (st, _) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "x"}),
    );
    assert_eq!(st, 200);
    let frames = {
        let mut got = Vec::new();
        while let Some(f) = sse.next_frame(Duration::from_secs(10)) {
            let note = f.data["event"]["type"] == "note_submitted";
            got.push(f);
            if note {
                break;
            }
        }
        got
    };
    assert!(frames.iter().any(|f| f.data["event"]["note"] == "x"));
}

/// JSON logs carry the request id (the client's `X-Request-Id`, or a new one) that the response
/// returns, on the request's own lines and on the turn it started.
#[test]
fn json_logs_carry_the_request_id_of_the_response() {
    let mut first = Server::start();
    let token = first.token.clone();
    assert!(first.stop().success());
    let config = first.tmp_dir().join("json-logs.toml");
    std::fs::write(&config, "log_format = \"json\"\n").expect("config");
    let mut child = Killed(
        std::process::Command::new(env!("CARGO_BIN_EXE_sessiond"))
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(&first.data_dir)
            .args(common::database_args(&first.data_dir))
            .env_remove("SESSIOND_DATABASE_URL")
            .arg("--config")
            .arg(&config)
            .env("SESSIOND_ENGINE", "scripted")
            .env("SESSIOND_LOG", "info,sessiond::access=debug")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let mut out = BufReader::new(child.0.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("first line");
    let base = line
        .trim()
        .strip_prefix("sessiond listening on ")
        .expect("listening")
        .to_owned();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let err = BufReader::new(child.0.stderr.take().expect("stderr"));
    std::thread::spawn(move || {
        for l in err.lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                return;
            }
        }
    });
    let http = reqwest::blocking::Client::new();
    let resp = http
        .post(format!("{base}/v1/ws/default/agent/sessions"))
        .header("authorization", format!("Bearer {token}"))
        .header("x-request-id", "trace-me-7")
        .json(&json!({"prompt": "hello"}))
        .send()
        .expect("POST");
    assert_eq!(resp.headers()["x-request-id"], "trace-me-7");
    assert_eq!(resp.status().as_u16(), 200);
    let generated = http.get(format!("{base}/healthz")).send().expect("GET");
    let generated = generated.headers()["x-request-id"]
        .to_str()
        .expect("id")
        .to_owned();
    let (mut request_line, mut generated_line) = (false, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !(request_line && generated_line) {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let l = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no log line with the request ids (request {request_line}, healthz {generated_line})"));
        let Ok(v) = serde_json::from_str::<Value>(&l) else {
            panic!("a log line that is not JSON: {l}");
        };
        let ids: Vec<&str> = v["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(std::iter::once(&v["span"]))
            .filter_map(|s| s["request_id"].as_str())
            .collect();
        request_line |= ids.contains(&"trace-me-7");
        generated_line |= ids.contains(&generated.as_str());
    }
    drop(child);
}

/// Requests are counted under their route's pattern, never their path (label values stay a
/// small set however many sessions there are), for the routes of one session as for the rest.
#[test]
fn requests_are_counted_under_their_route_pattern() {
    let s = Server::start();
    let id = s.create_prompt("/reply ok");
    let (st, _) = s.post(
        &s.sessions_url(&format!("/{id}/note")),
        &json!({"note": "n"}),
    );
    assert_eq!(st, 200);
    let (st, _) = s.get(&s.sessions_url(&format!("/{id}")));
    assert_eq!(st, 200);
    let (st, _) = s.get(&s.sessions_url(&format!("/{id}/bogus")));
    assert_eq!(st, 404);
    let sessions = "/v1/ws/{workspaceSlug}/agent/sessions";
    for (route, method, status) in [
        (format!("{sessions}/{{sessionId}}/note"), "POST", "200"),
        (format!("{sessions}/{{sessionId}}"), "GET", "200"),
        (sessions.to_owned(), "POST", "200"),
    ] {
        let sample = format!(
            "sessiond_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}}"
        );
        assert_eq!(s.metric(&sample), Some(1.0), "{sample}");
    }
    let text = s.metrics();
    assert!(!text.contains(&id), "a session id in a label: {text}");
}
