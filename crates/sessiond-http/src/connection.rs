//! One accepted TCP connection, beneath the HTTP/1 parser: the open-files reserve, JSON bodies for
//! the errors the parser answers by itself, and prompt notice of a client that hung up.
//!
//! * **Reserve.** Every connection holds a slot; past [`set_connection_limit`] (the open-files
//!   limit minus a reserve for the database, the drive, child processes and model calls) a new
//!   connection is answered `503` JSON and closed at once, so the process never runs out of file
//!   descriptors and goes silent.
//! * **Parser errors.** Requests the HTTP/1 parser rejects before any route sees them (malformed
//!   request line, `Transfer-Encoding` or `Content-Length`, a NUL in a header, headers too large,
//!   headers too slow) are answered by the parser with an empty body. [`Conn`] follows the framing
//!   of every response it writes (heads, `Content-Length` and chunked bodies); a head that no route
//!   produced (routed responses all carry `X-Request-Id`) with an error status and no body is
//!   replaced by the same status with a `{"error","message"}` body. Bodies are never inspected.
//! * **Hang-ups.** A read that finds the end of the stream means the client closed its side;
//!   [`PeerClosed`] (in the request's connection data) tells long responses such as event streams
//!   to end now rather than at their next failed write.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use actix_web::rt::net::TcpStream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use sessiond_core::metrics::METRICS;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Connections served at once: `open_files` minus a reserve of a tenth of it (at least 64, at
/// most 1024) for everything else the process opens.
pub fn set_connection_limit(open_files: u64) -> usize {
    let open = usize::try_from(open_files).unwrap_or(usize::MAX);
    let reserve = (open / 10).clamp(64, 1024);
    let limit = open.saturating_sub(reserve).max(1);
    LIMIT.store(limit, Ordering::SeqCst);
    limit
}

/// A connection's place under the limit, given back when it closes.
pub struct Slot(());

impl Drop for Slot {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Slot {
    fn acquire() -> Option<Slot> {
        let limit = LIMIT.load(Ordering::SeqCst);
        let mut live = LIVE.load(Ordering::SeqCst);
        loop {
            if live >= limit {
                return None;
            }
            match LIVE.compare_exchange(live, live + 1, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(_) => return Some(Slot(())),
                Err(now) => live = now,
            }
        }
    }
}

/// Refused connections being answered at once; past this, one is closed without an answer (the
/// reserve must not drain into refusals).
const MAX_REFUSING: usize = 16;
static REFUSING: AtomicUsize = AtomicUsize::new(0);

/// Admits a new connection, or answers it `503` and closes it when the process is at its limit.
///
/// Nagle's algorithm is switched off: a response goes out as its head and then its body, and
/// holding the body back until the head is acknowledged meets the client's delayed ACK (~40 ms
/// on Linux) on every request whose answer takes two writes.
pub async fn admit(io: TcpStream) -> io::Result<Conn> {
    if let Err(e) = io.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    if let Some(slot) = Slot::acquire() {
        return Ok(Conn::new(io, Some(slot)));
    }
    METRICS.connections_refused.inc();
    if REFUSING.fetch_add(1, Ordering::SeqCst) < MAX_REFUSING {
        // Boxed: the refusal's read buffer would otherwise be part of this future, and so of
        // every connection's task for as long as the connection lives.
        Box::pin(refuse(io)).await;
    }
    REFUSING.fetch_sub(1, Ordering::SeqCst);
    Err(io::Error::other("connection limit reached"))
}

/// Writes the 503, ends our side, and reads what the client still sends (briefly), so that the
/// close does not reset the connection before the client has read the answer.
async fn refuse(mut io: TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body = r#"{"error":"unavailable","message":"the server is at its connection limit; retry shortly"}"#;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = async {
        io.write_all(response.as_bytes()).await?;
        io.shutdown().await?;
        let mut sink = [0u8; 4096];
        while io.read(&mut sink).await? > 0 {}
        Ok::<(), io::Error>(())
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), answer).await;
}

/// Set when the client has closed its side of the connection (the end of its stream was read),
/// or the connection is gone. A flag and a `Notify` rather than a `watch` channel: every open
/// connection carries one, and this is a fifth of the size.
#[derive(Default)]
struct Hangup {
    closed: AtomicBool,
    notify: Notify,
}

impl Hangup {
    fn set(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.notify.notify_waiters();
        }
    }
}

#[derive(Clone)]
pub struct PeerClosed(Arc<Hangup>);

impl PeerClosed {
    /// Resolves once the client has hung up (or the connection is gone).
    pub async fn wait(&mut self) {
        loop {
            // Made before the flag is read: a `notify_waiters` after this point wakes it.
            let notified = self.0.notify.notified();
            if self.0.closed.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// What the writer knows about the response bytes it is passing on.
enum Framing {
    /// At the start of a response: collecting its head.
    Head(Vec<u8>),
    /// Inside a body of known length: this many bytes to go.
    Body(u64),
    /// Inside a chunked body.
    Chunked(Chunked),
    /// Framing unknown from here on (a body that ends with the connection, an upgrade, a head
    /// too large to follow): pass everything through.
    Through,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading the size line (hex digits, maybe extensions) up to its LF.
    Size { size: u64, digits: bool, ext: bool },
    /// Inside chunk data: bytes to go.
    Data(u64),
    /// The CRLF after chunk data.
    DataEnd { seen_cr: bool },
    /// After the last (zero) chunk: trailer lines until an empty line.
    Trailer { line_len: usize },
}

struct Chunked(ChunkState);

impl Chunked {
    fn new() -> Chunked {
        Chunked(ChunkState::Size {
            size: 0,
            digits: false,
            ext: false,
        })
    }

    /// Advances over `buf`; returns how many bytes belong to this body (all of `buf` unless the
    /// body ends inside it) and whether the body is complete. `None` on framing we cannot follow.
    fn advance(&mut self, buf: &[u8]) -> Option<(usize, bool)> {
        let mut i = 0;
        while i < buf.len() {
            let b = buf[i];
            match &mut self.0 {
                ChunkState::Size { size, digits, ext } => {
                    if b == b'\n' {
                        if !*digits {
                            return None;
                        }
                        self.0 = if *size == 0 {
                            ChunkState::Trailer { line_len: 0 }
                        } else {
                            ChunkState::Data(*size)
                        };
                    } else if *ext || b == b'\r' {
                    } else if b == b';' {
                        *ext = true;
                    } else {
                        let d = (b as char).to_digit(16)? as u64;
                        *size = size.checked_mul(16)?.checked_add(d)?;
                        *digits = true;
                    }
                    i += 1;
                }
                ChunkState::Data(left) => {
                    let take = (*left).min((buf.len() - i) as u64);
                    *left -= take;
                    i += take as usize;
                    if *left == 0 {
                        self.0 = ChunkState::DataEnd { seen_cr: false };
                    }
                }
                ChunkState::DataEnd { seen_cr } => {
                    match (b, *seen_cr) {
                        (b'\r', false) => *seen_cr = true,
                        (b'\n', _) => {
                            self.0 = ChunkState::Size {
                                size: 0,
                                digits: false,
                                ext: false,
                            }
                        }
                        _ => return None,
                    }
                    i += 1;
                }
                ChunkState::Trailer { line_len } => {
                    i += 1;
                    if b == b'\n' {
                        if *line_len == 0 {
                            return Some((i, true));
                        }
                        *line_len = 0;
                    } else if b != b'\r' {
                        *line_len += 1;
                    }
                }
            }
        }
        Some((i, false))
    }
}

/// Heads larger than this are passed through unexamined.
const MAX_HEAD: usize = 64 * 1024;

/// What to do with a complete response head.
enum HeadVerdict {
    /// A routed response (or one that is fine as it is): write it, then follow this framing.
    Keep(Framing),
    /// A bodiless error from the parser: write this instead, then follow the next response.
    Replace(Vec<u8>),
}

fn judge_head(head: &[u8]) -> HeadVerdict {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut res = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = res.parse(head) else {
        return HeadVerdict::Keep(Framing::Through);
    };
    let code = res.code.unwrap_or(0);
    let find = |name: &str| {
        res.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let length = find("content-length")
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let chunked = find("transfer-encoding").is_some_and(|v| {
        String::from_utf8_lossy(v)
            .to_ascii_lowercase()
            .contains("chunked")
    });
    let routed = find(super::middleware::REQUEST_ID_HEADER).is_some();
    if code >= 400 && !routed && !chunked && length.unwrap_or(0) == 0 {
        return HeadVerdict::Replace(json_error_head(code, find("date")));
    }
    HeadVerdict::Keep(match code {
        101 => Framing::Through,
        100..=199 | 204 | 304 => Framing::Head(Vec::new()),
        _ if chunked => Framing::Chunked(Chunked::new()),
        _ => match length {
            Some(0) => Framing::Head(Vec::new()),
            Some(n) => Framing::Body(n),
            None => Framing::Through,
        },
    })
}

/// The parser's error, with a JSON body.
fn json_error_head(code: u16, date: Option<&[u8]>) -> Vec<u8> {
    let status = actix_web::http::StatusCode::from_u16(code)
        .unwrap_or(actix_web::http::StatusCode::BAD_REQUEST);
    let message = match code {
        400 => "the request is not valid HTTP/1.1 (request line, headers or body framing)",
        408 => "the request headers did not arrive in time",
        413 => "the request is too large",
        431 => "the request headers are too large",
        _ => "the request could not be read",
    };
    METRICS.http_rejected.with(&[status.as_str()]).inc();
    let body = serde_json::json!({
        "error": super::middleware::code_for_status(status),
        "message": message,
    })
    .to_string();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\nx-content-type-options: nosniff\r\ncache-control: no-store\r\n\
         {}: {}\r\n",
        status.as_str(),
        status.canonical_reason().unwrap_or("Error"),
        body.len(),
        super::middleware::REQUEST_ID_HEADER,
        sessiond_core::ids::new_id(),
    )
    .into_bytes();
    if let Some(date) = date {
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(date);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body.as_bytes());
    out
}

/// An admitted connection: the socket, the response framing it follows, and its slot.
pub struct Conn {
    io: TcpStream,
    framing: Framing,
    /// Bytes accepted from the HTTP layer and not yet on the socket (a head, as written or
    /// replaced).
    pending: Vec<u8>,
    hangup: Arc<Hangup>,
    _slot: Option<Slot>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.hangup.set();
    }
}

impl Conn {
    fn new(io: TcpStream, slot: Option<Slot>) -> Conn {
        Conn {
            io,
            framing: Framing::Head(Vec::new()),
            pending: Vec::new(),
            hangup: Arc::default(),
            _slot: slot,
        }
    }

    /// For the request's connection data (`HttpRequest::conn_data`).
    pub fn peer_closed(&self) -> PeerClosed {
        PeerClosed(Arc::clone(&self.hangup))
    }

    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.io.peer_addr().ok()
    }

    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.pending))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            if n == self.pending.len() {
                // Let the head's buffer go: a long response (an event stream) would keep it for
                // as long as it lasts.
                self.pending = Vec::new();
            } else {
                self.pending.drain(..n);
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Takes bytes of a head from `buf`; returns how many were taken.
    fn take_head(&mut self, buf: &[u8]) -> usize {
        let Framing::Head(head) = &mut self.framing else {
            return 0;
        };
        // The end of the head may straddle what was collected and `buf`.
        let start = head.len().saturating_sub(3);
        let mut taken = buf.len();
        head.extend_from_slice(buf);
        let end = head[start..]
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map(|p| start + p + 4);
        match end {
            Some(end) => {
                taken -= head.len() - end;
                head.truncate(end);
                let head = std::mem::take(head);
                match judge_head(&head) {
                    HeadVerdict::Keep(next) => {
                        self.pending.extend_from_slice(&head);
                        self.framing = next;
                    }
                    HeadVerdict::Replace(with) => {
                        self.pending.extend_from_slice(&with);
                        self.framing = Framing::Head(Vec::new());
                    }
                }
            }
            None if head.len() > MAX_HEAD => {
                let head = std::mem::take(head);
                self.pending.extend_from_slice(&head);
                self.framing = Framing::Through;
            }
            None => {}
        }
        taken
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let result = ready!(Pin::new(&mut self.io).poll_read(cx, buf));
        if result.is_ok() && room && buf.filled().len() == before {
            self.hangup.set();
        }
        Poll::Ready(result)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_pending(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        match &mut this.framing {
            Framing::Through => Pin::new(&mut this.io).poll_write(cx, buf),
            Framing::Head(_) => {
                let taken = this.take_head(buf);
                // The head is accepted; put it on the socket if it goes now (poll_flush finishes
                // it otherwise).
                if let Poll::Ready(Err(e)) = this.poll_pending(cx) {
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Ok(taken))
            }
            Framing::Body(left) => {
                let k = (*left).min(buf.len() as u64) as usize;
                let n = ready!(Pin::new(&mut this.io).poll_write(cx, &buf[..k]))?;
                if let Framing::Body(left) = &mut this.framing {
                    *left -= n as u64;
                    if *left == 0 {
                        this.framing = Framing::Head(Vec::new());
                    }
                }
                Poll::Ready(Ok(n))
            }
            Framing::Chunked(chunked) => {
                // How much of `buf` is this body, without moving the state yet: the socket may
                // take less.
                let mut probe = Chunked(chunked.0);
                let Some((k, _)) = probe.advance(buf) else {
                    this.framing = Framing::Through;
                    return Pin::new(&mut this.io).poll_write(cx, buf);
                };
                let n = ready!(Pin::new(&mut this.io).poll_write(cx, &buf[..k]))?;
                if let Framing::Chunked(chunked) = &mut this.framing {
                    match chunked.advance(&buf[..n]) {
                        Some((_, true)) => this.framing = Framing::Head(Vec::new()),
                        Some((_, false)) => {}
                        None => this.framing = Framing::Through,
                    }
                }
                Poll::Ready(Ok(n))
            }
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Framing::Head(head) = &mut this.framing
            && !head.is_empty()
        {
            // A head cut off mid-way is not ours to hold back: pass it on as it is.
            let head = std::mem::take(head);
            this.pending.extend_from_slice(&head);
            this.framing = Framing::Through;
        }
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_end_where_they_end() {
        let body = b"5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\nHTTP/1.1";
        let mut c = Chunked::new();
        assert_eq!(c.advance(&body[..7]), Some((7, false)));
        assert_eq!(c.advance(&body[7..]), Some((body.len() - 7 - 8, true)));
        assert_eq!(Chunked::new().advance(b"zz\r\n"), None);
    }

    #[test]
    fn only_bodiless_unrouted_errors_are_replaced() {
        let parser = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\ndate: x\r\n\r\n";
        match judge_head(parser) {
            HeadVerdict::Replace(with) => {
                let text = String::from_utf8(with).unwrap();
                assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
                assert!(text.contains("content-type: application/json"), "{text}");
                assert!(text.ends_with("}"), "{text}");
                let body = text.split("\r\n\r\n").nth(1).unwrap();
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                assert_eq!(v["error"], "invalid_request");
            }
            HeadVerdict::Keep(_) => panic!("not replaced"),
        }
        let routed = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nx-request-id: a\r\n\r\n";
        assert!(matches!(judge_head(routed), HeadVerdict::Keep(_)));
        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n";
        assert!(matches!(
            judge_head(ok),
            HeadVerdict::Keep(Framing::Body(12))
        ));
        let sse = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
        assert!(matches!(
            judge_head(sse),
            HeadVerdict::Keep(Framing::Chunked(_))
        ));
    }

    #[tokio::test]
    async fn a_hang_up_wakes_every_waiter_before_and_after_it() {
        let hangup = Arc::new(Hangup::default());
        let mut early = PeerClosed(Arc::clone(&hangup));
        let waiting = tokio::spawn(async move { early.wait().await });
        tokio::task::yield_now().await;
        hangup.set();
        hangup.set();
        waiting.await.unwrap();
        let mut late = PeerClosed(Arc::clone(&hangup));
        late.wait().await;
    }

    #[test]
    fn the_limit_keeps_a_reserve() {
        assert_eq!(set_connection_limit(1024), 1024 - 102);
        assert_eq!(set_connection_limit(200), 136);
        assert_eq!(set_connection_limit(100_000), 100_000 - 1024);
        set_connection_limit(u64::MAX);
    }
}
