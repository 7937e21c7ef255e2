//! A fake ACP server (what an AgentEx SDK agent serves at `POST /api`) that really speaks HTTP/1.1,
//! scripted per test: every request takes the next scripted reply, answered as NDJSON lines. It
//! records every request (headers and JSON-RPC body) and notices when a client goes away early.

use std::collections::VecDeque;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[path = "http_request.rs"]
mod http_request;

/// How a scripted answer ends after its lines.
#[derive(Debug, Clone, PartialEq)]
pub enum End {
    /// Close the connection.
    Close,
    /// Keep the connection open, sending blank lines, until the client goes away (30 s at most).
    Hold,
    /// Keep the connection open, sending nothing, for ten seconds.
    Stall,
    /// Start a line and never end it (20 MiB of `x`).
    Flood,
}

#[derive(Debug, Clone)]
pub enum Reply {
    /// `lines` (each sent as it is, with a newline), `delay` apart.
    Lines {
        lines: Vec<String>,
        delay: Duration,
        end: End,
    },
    /// A plain HTTP status with an empty body.
    Status(u16),
}

/// One request as the fake received it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub agent_key: Option<String>,
    pub request_id: Option<String>,
    pub body: Value,
}

#[derive(Default)]
struct State {
    replies: VecDeque<Reply>,
    seen: Vec<Seen>,
    closed_early: usize,
}

#[derive(Clone)]
pub struct FakeAcp {
    pub url: String,
    state: Arc<Mutex<State>>,
}

/// One JSON-RPC response line with `result`.
pub fn result_line(result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": "x", "result": result, "error": null}).to_string()
}

/// One JSON-RPC response line with an error.
pub fn error_line(code: i64, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": "x", "result": null,
        "error": {"code": code, "message": message, "data": null}})
    .to_string()
}

/// A text delta update at index 0.
pub fn delta(text: &str) -> String {
    result_line(json!({"type": "delta", "index": 0,
        "delta": {"type": "text", "text_delta": text}, "parent_task_message": null}))
}

/// A whole text message at `index`.
pub fn full(index: i64, text: &str) -> String {
    result_line(json!({"type": "full", "index": index,
        "content": {"type": "text", "author": "agent", "content": text, "format": "markdown"}}))
}

pub fn done(index: i64) -> String {
    result_line(json!({"type": "done", "index": index}))
}

/// A streamed reply: start, one delta per word, done.
pub fn streamed(text: &str) -> Reply {
    let mut lines = vec![result_line(json!({"type": "start", "index": 0,
        "content": {"type": "text", "author": "agent", "content": ""}}))];
    lines.extend(text.split_inclusive(' ').map(delta));
    lines.push(done(0));
    Reply::Lines {
        lines,
        delay: Duration::ZERO,
        end: End::Close,
    }
}

impl FakeAcp {
    pub fn start() -> FakeAcp {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State::default()));
        http_request::serve_each(listener, Arc::clone(&state), serve);
        FakeAcp {
            url: format!("http://{addr}"),
            state,
        }
    }

    pub fn push(&self, reply: Reply) -> &Self {
        self.state.lock().expect("lock").replies.push_back(reply);
        self
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.state.lock().expect("lock").seen.clone()
    }

    pub fn closed_early(&self) -> usize {
        self.state.lock().expect("lock").closed_early
    }

    /// Waits until `n` requests have arrived.
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> Vec<Seen> {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.requests();
            if seen.len() >= n {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "expected {n} requests, saw {}",
                seen.len()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The engine JSON of an agent served by this fake.
    pub fn engine(&self, acp_type: &str, idle_timeout_ms: u64) -> Value {
        json!({"kind": "acp", "url": self.url, "acpType": acp_type, "idleTimeoutMs": idle_timeout_ms})
    }
}

fn read_request(conn: &mut TcpStream) -> Option<Seen> {
    let request = http_request::read(conn)?;
    Some(Seen {
        agent_key: request.header("x-agent-api-key"),
        request_id: request.header("x-request-id"),
        path: request.path,
        body: request.body,
    })
}

fn serve(mut conn: TcpStream, state: &Mutex<State>) {
    let Some(seen) = read_request(&mut conn) else {
        return;
    };
    let reply = {
        let mut st = state.lock().expect("lock");
        st.seen.push(seen);
        st.replies.pop_front()
    };
    let reply = reply.unwrap_or(Reply::Status(500));
    match reply {
        Reply::Status(code) => {
            let head = format!(
                "HTTP/1.1 {code} Scripted\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            let _ = conn.write_all(head.as_bytes());
        }
        Reply::Lines { lines, delay, end } => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n";
            if conn.write_all(head.as_bytes()).is_err() {
                return;
            }
            for l in lines {
                if !delay.is_zero() {
                    std::thread::sleep(delay);
                }
                if conn
                    .write_all(format!("{l}\n").as_bytes())
                    .and_then(|_| conn.flush())
                    .is_err()
                {
                    state.lock().expect("lock").closed_early += 1;
                    return;
                }
            }
            match end {
                End::Close => {}
                End::Stall => std::thread::sleep(Duration::from_secs(10)),
                End::Flood => {
                    let block = vec![b'x'; 64 * 1024];
                    let _ = conn.write_all(b"{\"jsonrpc\":\"2.0\",\"result\":\"");
                    for _ in 0..320 {
                        if conn.write_all(&block).is_err() {
                            state.lock().expect("lock").closed_early += 1;
                            return;
                        }
                    }
                }
                End::Hold => {
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(20));
                        if conn.write_all(b"\n").and_then(|_| conn.flush()).is_err() {
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
