//! A fake OpenAI-compatible endpoint that really speaks HTTP/1.1 and server-sent events, scripted
//! per test: every streamed `/chat/completions` request takes the next scripted reply; title
//! requests (`"stream": false`) get the configured title. It records every request and notices
//! when a client closes a stream early.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

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

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
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

/// A text reply streamed as one delta per word, with usage.
pub fn text_reply(text: &str, usage: (u64, u64, u64)) -> Reply {
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    for w in words {
        chunks.push(chunk(json!({"content": w}), None));
    }
    chunks.push(chunk(json!({}), Some("stop")));
    chunks.push(usage_chunk(usage));
    Reply::Stream {
        chunks,
        delay: Duration::ZERO,
        end: End::Done,
    }
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
        let st = Arc::clone(&state);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let st = Arc::clone(&st);
                std::thread::spawn(move || serve(conn, &st));
            }
        });
        FakeOpenAi {
            base_url: format!("http://{addr}/v1"),
            state,
        }
    }

    pub fn push(&self, reply: Reply) -> &Self {
        self.state.lock().expect("lock").replies.push_back(reply);
        self
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

type Head = (String, Option<String>, Value, Option<String>);

fn read_request(conn: &mut TcpStream) -> Option<Head> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut length = 0usize;
    let mut auth = None;
    let mut request_id = None;
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            match k.to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().ok()?,
                "authorization" => auth = Some(v.trim().to_owned()),
                "x-request-id" => request_id = Some(v.trim().to_owned()),
                _ => {}
            }
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some((
        path,
        auth,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
        request_id,
    ))
}

fn serve(mut conn: TcpStream, state: &Mutex<State>) {
    let Some((path, authorization, body, request_id)) = read_request(&mut conn) else {
        return;
    };
    let streamed = body["stream"] == json!(true);
    let reply = {
        let mut st = state.lock().expect("lock");
        st.seen.push(Seen {
            path,
            authorization,
            body,
            request_id,
        });
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
