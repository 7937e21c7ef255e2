//! A fake OpenAI-compatible endpoint that really speaks HTTP/1.1 and server-sent events, scripted
//! per test: every streamed `/chat/completions` request takes the next scripted reply; title
//! requests (`"stream": false`) get the configured title. It records every request and notices
//! when a client closes a stream early.
//!
//! Two behaviours of real servers can be scripted besides plain replies: a stream that ends with
//! `[DONE]` and no finish reason ([`truncated_reply`], what llama-cpp-python sends a running stream
//! when another request waits), and refusing to stream when tools are offered
//! ([`FakeOpenAi::refuse_streamed_tools`], llama-cpp-python's `Automatic streaming tool choice is
//! not supported`); a non-streamed request with tools then takes the next scripted reply, sent as
//! one `chat.completion`.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "http_request.rs"]
mod http_request;

/// How a scripted streamed reply ends.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// `data: [DONE]`, then close.
    Done,
    /// Close the connection without `[DONE]` (a stream cut mid-turn).
    Cut,
    /// Keep the connection open (sending comments) until the client goes away.
    Hold,
    /// Keep the connection open, sending nothing, for ten seconds.
    Stall,
    /// Start a `data:` line and never end it (20 MiB of `x`).
    Flood,
    /// Keep the connection open (sending comments) until the test calls
    /// [`FakeOpenAi::release`], then `data: [DONE]`: the turn is certainly still streaming
    /// until the test says so.
    UntilReleased,
}

#[derive(Debug, Clone)]
pub enum Reply {
    /// Server-sent events: each chunk's JSON, sent `delay` apart.
    Stream {
        chunks: Vec<Value>,
        delay: Duration,
        end: End,
    },
    /// A plain HTTP error with an optional `Retry-After` (seconds).
    Status {
        code: u16,
        body: Value,
        retry_after: Option<u32>,
    },
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
    /// The `X-Request-Id` header.
    pub request_id: Option<String>,
}

/// How the fake refuses a streamed request that offers tools.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// `200` with an event stream that ends before any event (the error only reaches the
    /// server's log).
    EmptyStream,
    /// `500` with the error message in the body.
    Error,
}

/// The message llama-cpp-python gives when asked to stream with `tool_choice: "auto"`.
pub const STREAMING_TOOLS_ERROR: &str = "Automatic streaming tool choice is not supported";

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    refuse_streamed_tools: Option<Refusal>,
    seen: Vec<Seen>,
    /// Streams the client closed before the fake finished them.
    closed_early: usize,
    /// The title for `"stream": false` requests; `None` answers 500.
    title: Option<String>,
    /// Streams ending [`End::UntilReleased`] may finish, and held streams may start.
    released: bool,
    /// Streams wait for [`FakeOpenAi::release`] before their first chunk.
    hold_start: bool,
    /// Chunks written to streams so far.
    chunks_sent: usize,
}

#[derive(Clone)]
pub struct FakeOpenAi {
    pub base_url: String,
    state: Arc<Mutex<State>>,
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}

/// The role chunk, then `text` as one content delta per word.
fn word_chunks(text: &str) -> Vec<Value> {
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for w in text.split_inclusive(' ') {
        chunks.push(chunk(json!({"content": w}), None));
    }
    chunks
}

fn stream(chunks: Vec<Value>) -> Reply {
    Reply::Stream {
        chunks,
        delay: Duration::ZERO,
        end: End::Done,
    }
}

/// A text reply streamed as one delta per word, with usage.
pub fn text_reply(text: &str, usage: (u64, u64, u64)) -> Reply {
    let mut chunks = word_chunks(text);
    chunks.push(chunk(json!({}), Some("stop")));
    chunks.push(usage_chunk(usage));
    stream(chunks)
}

/// Text streamed as one delta per word that ends with `[DONE]` but no finish reason: the reply
/// was cut short.
pub fn truncated_reply(text: &str) -> Reply {
    stream(word_chunks(text))
}

/// A text reply without usage (servers that ignore `stream_options.include_usage`).
pub fn text_reply_without_usage(text: &str) -> Reply {
    let mut chunks = word_chunks(text);
    chunks.push(chunk(json!({}), Some("stop")));
    stream(chunks)
}

/// `(prompt, completion, cached)` tokens.
pub fn usage_chunk((prompt, completion, cached): (u64, u64, u64)) -> Value {
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": "fake", "choices": [],
        "usage": {
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached}
        }
    })
}

pub fn reasoning_chunk(text: &str) -> Value {
    chunk(json!({"reasoning_content": text}), None)
}

pub fn content_chunk(text: &str) -> Value {
    chunk(json!({"content": text}), None)
}

pub fn finish_chunk(reason: &str) -> Value {
    chunk(json!({}), Some(reason))
}

/// A reply that calls tools: `(id, name, arguments)`, in parallel when more than one. The
/// arguments of each call are split over two deltas, as real endpoints do.
pub fn tool_reply(calls: &[(&str, &str, Value)]) -> Reply {
    let mut chunks = Vec::new();
    for (i, (id, name, args)) in calls.iter().enumerate() {
        let text = args.to_string();
        let (a, b) = text.split_at(text.len() / 2);
        chunks.push(chunk(
            json!({"tool_calls": [{"index": i, "id": id, "type": "function",
                "function": {"name": name, "arguments": a}}]}),
            None,
        ));
        chunks.push(chunk(
            json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}),
            None,
        ));
    }
    chunks.push(chunk(json!({}), Some("tool_calls")));
    chunks.push(usage_chunk((20, 5, 0)));
    Reply::Stream {
        chunks,
        delay: Duration::ZERO,
        end: End::Done,
    }
}

impl FakeOpenAi {
    pub fn start() -> FakeOpenAi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State {
            title: Some("Fake Title".into()),
            ..State::default()
        }));
        http_request::serve_each(listener, Arc::clone(&state), serve);
        FakeOpenAi {
            base_url: format!("http://{addr}/v1"),
            state,
        }
    }

    pub fn push(&self, reply: Reply) -> &Self {
        self.state.lock().expect("lock").replies.push_back(reply);
        self
    }

    /// From now on, streamed requests that offer tools are refused this way (`None`: served).
    pub fn refuse_streamed_tools(&self, refusal: Option<Refusal>) {
        self.state.lock().expect("lock").refuse_streamed_tools = refusal;
    }

    /// Every chat request so far, streamed or not (title requests offer no tools and are left
    /// out unless streamed).
    pub fn chat_requests(&self) -> Vec<Seen> {
        self.state
            .lock()
            .expect("lock")
            .seen
            .iter()
            .filter(|s| s.body["stream"] == json!(true) || s.body.get("tools").is_some())
            .cloned()
            .collect()
    }

    /// Title requests so far.
    pub fn title_requests(&self) -> Vec<Seen> {
        self.state
            .lock()
            .expect("lock")
            .seen
            .iter()
            .filter(|s| s.body["stream"] != json!(true) && s.body.get("tools").is_none())
            .cloned()
            .collect()
    }

    pub fn set_title(&self, title: Option<&str>) {
        self.state.lock().expect("lock").title = title.map(str::to_owned);
    }

    /// Every streamed (chat) request so far.
    pub fn chats(&self) -> Vec<Seen> {
        self.state
            .lock()
            .expect("lock")
            .seen
            .iter()
            .filter(|s| s.body["stream"] == json!(true))
            .cloned()
            .collect()
    }

    pub fn all_requests(&self) -> Vec<Seen> {
        self.state.lock().expect("lock").seen.clone()
    }

    pub fn closed_early(&self) -> usize {
        self.state.lock().expect("lock").closed_early
    }

    /// Makes streams wait for [`FakeOpenAi::release`] before their first chunk (a test can then
    /// subscribe to the session's events before anything streams).
    pub fn hold_streams(&self) {
        self.state.lock().expect("lock").hold_start = true;
    }

    /// Lets held streams start and streams that end [`End::UntilReleased`] finish.
    pub fn release(&self) {
        self.state.lock().expect("lock").released = true;
    }

    /// Waits until `n` stream chunks have been written (to any stream).
    pub fn wait_chunks_sent(&self, n: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.state.lock().expect("lock").chunks_sent < n {
            assert!(Instant::now() < deadline, "expected {n} chunks sent");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until `n` chat requests have arrived.
    pub fn wait_chats(&self, n: usize, timeout: Duration) -> Vec<Seen> {
        let deadline = Instant::now() + timeout;
        loop {
            let chats = self.chats();
            if chats.len() >= n {
                return chats;
            }
            assert!(
                Instant::now() < deadline,
                "expected {n} chat requests, saw {}",
                chats.len()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The engine JSON pointing at this fake, with fast retries; `extra` fields are merged in.
    pub fn engine(&self, extra: Value) -> Value {
        let mut e = json!({
            "kind": "openai",
            "baseUrl": self.base_url,
            "model": "fake-model",
            "retryBaseMs": 10,
            "idleTimeoutMs": 5000,
        });
        if let (Some(e), Some(extra)) = (e.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                e.insert(k.clone(), v.clone());
            }
        }
        e
    }
}

fn serve(mut conn: TcpStream, state: &Mutex<State>) {
    let Some(request) = http_request::read(&mut conn) else {
        return;
    };
    let (authorization, request_id) = (
        request.header("authorization"),
        request.header("x-request-id"),
    );
    let (path, body) = (request.path, request.body);
    let streamed = body["stream"] == json!(true);
    let tools = body.get("tools").is_some();
    let reply = {
        let mut st = state.lock().expect("lock");
        st.seen.push(Seen {
            path,
            authorization,
            body,
            request_id,
        });
        let refusal = st.refuse_streamed_tools;
        if streamed
            && tools
            && let Some(refusal) = refusal
        {
            drop(st);
            match refusal {
                Refusal::EmptyStream => {
                    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
                    let _ = conn.write_all(head.as_bytes());
                    let _ = conn.shutdown(std::net::Shutdown::Both);
                }
                Refusal::Error => respond(
                    &mut conn,
                    500,
                    &json!({"error": {"message": STREAMING_TOOLS_ERROR, "type": "internal_server_error"}}),
                    None,
                ),
            }
            return;
        }
        if !streamed && tools {
            let reply = st.replies.pop_front();
            drop(st);
            match reply {
                Some(Reply::Stream { chunks, .. }) => {
                    respond(&mut conn, 200, &whole_completion(&chunks), None)
                }
                Some(Reply::Status {
                    code,
                    body,
                    retry_after,
                }) => respond(&mut conn, code, &body, retry_after),
                None => respond(
                    &mut conn,
                    500,
                    &json!({"error": {"message": "the fake has no reply scripted for this request"}}),
                    None,
                ),
            }
            return;
        }
        if streamed {
            st.replies.pop_front()
        } else {
            let title = st.title.clone();
            drop(st);
            let (code, body) = match title {
                Some(t) => (
                    200,
                    json!({"id": "x", "object": "chat.completion", "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": format!("\"{t}\"")}, "finish_reason": "stop"}
                    ]}),
                ),
                None => (500, json!({"error": {"message": "no titles today"}})),
            };
            respond(&mut conn, code, &body, None);
            return;
        }
    };
    let Some(reply) = reply else {
        respond(
            &mut conn,
            500,
            &json!({"error": {"message": "the fake has no reply scripted for this request"}}),
            None,
        );
        return;
    };
    match reply {
        Reply::Status {
            code,
            body,
            retry_after,
        } => respond(&mut conn, code, &body, retry_after),
        Reply::Stream { chunks, delay, end } => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
            if conn.write_all(head.as_bytes()).is_err() {
                return;
            }
            loop {
                let s = state.lock().expect("lock");
                if !s.hold_start || s.released {
                    break;
                }
                drop(s);
                std::thread::sleep(Duration::from_millis(10));
            }
            for c in chunks {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                let frame = format!("data: {c}\n\n");
                if conn
                    .write_all(frame.as_bytes())
                    .and_then(|_| conn.flush())
                    .is_err()
                {
                    state.lock().expect("lock").closed_early += 1;
                    return;
                }
                state.lock().expect("lock").chunks_sent += 1;
            }
            match end {
                End::Done => {
                    let _ = conn.write_all(b"data: [DONE]\n\n");
                }
                End::Cut => {}
                End::Stall => std::thread::sleep(Duration::from_secs(10)),
                End::Flood => {
                    let block = vec![b'x'; 64 * 1024];
                    let _ = conn.write_all(b"data: {\"choices\":[{\"delta\":{\"content\":\"");
                    for _ in 0..320 {
                        if conn.write_all(&block).is_err() {
                            state.lock().expect("lock").closed_early += 1;
                            return;
                        }
                    }
                }
                End::UntilReleased => {
                    let deadline = Instant::now() + Duration::from_secs(60);
                    while !state.lock().expect("lock").released && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(20));
                        if conn
                            .write_all(b": still thinking\n\n")
                            .and_then(|_| conn.flush())
                            .is_err()
                        {
                            state.lock().expect("lock").closed_early += 1;
                            return;
                        }
                    }
                    let _ = conn.write_all(b"data: [DONE]\n\n");
                }
                End::Hold => {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(20));
                        if conn
                            .write_all(b": still thinking\n\n")
                            .and_then(|_| conn.flush())
                            .is_err()
                        {
                            state.lock().expect("lock").closed_early += 1;
                            return;
                        }
                    }
                }
            }
            let _ = conn.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// A scripted stream's chunks as the one `chat.completion` a non-streamed request gets.
fn whole_completion(chunks: &[Value]) -> Value {
    let (mut content, mut reasoning, mut finish, mut usage) =
        (String::new(), String::new(), Value::Null, Value::Null);
    let mut calls: Vec<Value> = Vec::new();
    for c in chunks {
        if c.get("usage").is_some_and(Value::is_object) {
            usage = c["usage"].clone();
        }
        let choice = &c["choices"][0];
        if choice["finish_reason"].is_string() {
            finish = choice["finish_reason"].clone();
        }
        let delta = &choice["delta"];
        content.push_str(delta["content"].as_str().unwrap_or(""));
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or(""));
        for call in delta["tool_calls"].as_array().into_iter().flatten() {
            let i = call["index"].as_u64().unwrap_or(0) as usize;
            while calls.len() <= i {
                calls.push(json!({"id": "", "type": "function", "function": {"name": "", "arguments": ""}}));
            }
            let slot = &mut calls[i];
            for (field, value) in [
                ("/id", call.pointer("/id")),
                ("/function/name", call.pointer("/function/name")),
                ("/function/arguments", call.pointer("/function/arguments")),
            ] {
                if let (Some(v), Some(t)) = (value.and_then(Value::as_str), slot.pointer_mut(field))
                {
                    *t = json!(format!("{}{v}", t.as_str().unwrap_or("")));
                }
            }
        }
    }
    let mut message = json!({"role": "assistant", "content": content});
    if !reasoning.is_empty() {
        message["reasoning_content"] = json!(reasoning);
    }
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    json!({
        "id": "chatcmpl-fake", "object": "chat.completion", "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    })
}

fn respond(conn: &mut TcpStream, code: u16, body: &Value, retry_after: Option<u32>) {
    let text = body.to_string();
    let mut head = format!(
        "HTTP/1.1 {code} Fake\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        text.len()
    );
    if let Some(s) = retry_after {
        head.push_str(&format!("Retry-After: {s}\r\n"));
    }
    head.push_str("\r\n");
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(text.as_bytes());
    let _ = conn.flush();
}
