//! The fan-out control: a server of the fewest parts that answers `POST` and fans each answer
//! out to its SSE subscribers, run as a child process of the benchmark, so that a figure of
//! sessiond's can be set beside what these cores give any server doing the same work.
//!
//! It is what every fan-out server must do and nothing more: tokio with two workers (sessiond
//! runs two HTTP workers on this machine), one task per connection, a request read by its head
//! and `Content-Length`, the answer written, then one frame of about the size of sessiond's
//! note frame sent through a `broadcast` channel to one task per subscriber, each writing it to
//! its socket.
//! No storage, no HTTP framework, no authentication: whatever it costs a paced writer to share
//! the cores with 1,000 subscribers here, sessiond cannot cost less.
//!
//! `GET` (any path) opens a stream (`200`, `text/event-stream`, no chunking); `POST` (any path)
//! answers `{"seq": n}` and then sends `id: n` with a `data:` line to every stream.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;

/// Set in the child's environment: the benchmark binary runs the control instead of itself.
pub const CONTROL_ENV: &str = "SESSIOND_BENCH_FANOUT_CONTROL";

/// The first line the child prints: its address.
const LISTENING: &str = "control listening on ";

/// A running control server.
pub struct ControlProc {
    child: Child,
    /// The child's stdin: when the benchmark exits, however it exits, the pipe closes and the
    /// child ends itself.
    _lifeline: ChildStdin,
    pub addr: SocketAddr,
    pub pid: u32,
}

impl ControlProc {
    /// Starts this very binary as the control and waits for its address.
    pub fn start() -> Result<ControlProc, String> {
        let exe = std::env::current_exe().map_err(|e| format!("own binary: {e}"))?;
        let mut child = Command::new(exe)
            .env(CONTROL_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn the control: {e}"))?;
        let pid = child.id();
        let lifeline = child.stdin.take().ok_or("the control's stdin")?;
        let stdout = child.stdout.take().ok_or("the control's stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| format!("the control's first line: {e}"))?;
        let addr = line
            .trim()
            .strip_prefix(LISTENING)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| format!("the control printed {line:?}"))?;
        Ok(ControlProc {
            child,
            _lifeline: lifeline,
            addr,
            pid,
        })
    }
}

impl Drop for ControlProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child's whole life: serves until the benchmark kills it or goes away.
pub fn serve() -> ! {
    std::thread::spawn(|| {
        // Blocks until the parent's end of the pipe closes.
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let code = match rt {
        Ok(rt) => match rt.block_on(accept_loop()) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("control: {e}");
                1
            }
        },
        Err(e) => {
            eprintln!("control runtime: {e}");
            1
        }
    };
    std::process::exit(code)
}

async fn accept_loop() -> std::io::Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let mut out = std::io::stdout();
    writeln!(out, "{LISTENING}{}", listener.local_addr()?)?;
    out.flush()?;
    let (frames, _) = broadcast::channel::<Arc<[u8]>>(1024);
    let seq = Arc::new(AtomicU64::new(0));
    loop {
        let (socket, _) = listener.accept().await?;
        let _ = socket.set_nodelay(true);
        tokio::spawn(connection(socket, frames.clone(), Arc::clone(&seq)));
    }
}

/// One connection: requests one after another until a `GET` turns it into a stream.
async fn connection(
    mut socket: TcpStream,
    frames: broadcast::Sender<Arc<[u8]>>,
    seq: Arc<AtomicU64>,
) {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut tmp = [0u8; 4096];
    loop {
        let (get, request_len) = loop {
            if let Some(parsed) = request(&buf) {
                break parsed;
            }
            match socket.read(&mut tmp).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&tmp[..n]),
            }
        };
        buf.drain(..request_len);
        if get {
            return stream(socket, frames.subscribe()).await;
        }
        let n = seq.fetch_add(1, Ordering::SeqCst) + 1;
        let body = format!("{{\"seq\":{n}}}");
        let answer = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        if socket.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        // As sessiond does: the writer is answered first, then the frame goes out.
        let _ = frames.send(frame(n).into());
    }
}

/// A stream: every frame to this subscriber, until it hangs up.
async fn stream(mut socket: TcpStream, mut frames: broadcast::Receiver<Arc<[u8]>>) {
    let head =
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\n";
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    loop {
        match frames.recv().await {
            Ok(frame) => {
                if socket.write_all(&frame).await.is_err() {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// A frame of about the size of sessiond's `note_submitted` frame on the Sessions API stream.
fn frame(n: u64) -> Vec<u8> {
    format!(
        "id: {n}\nevent: event\ndata: {{\"seq\":{n},\"event\":{{\"type\":\"note_submitted\",\
         \"note\":\"fan-out note {n}\",\"createdAt\":\"2026-01-01T00:00:00.000Z\",\
         \"requestId\":\"01900000-0000-7000-8000-000000000000\"}}}}\n\n"
    )
    .into_bytes()
}

/// A whole request at the start of `buf`: whether it is a `GET`, and its length with its body.
fn request(buf: &[u8]) -> Option<(bool, usize)> {
    let head_end = buf.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    let body = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    (buf.len() >= head_end + body).then_some((head.starts_with("get "), head_end + body))
}
