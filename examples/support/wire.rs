//! A minimal HTTP/1.1 client for load generation: one keep-alive connection, each request written
//! in one `write` from bytes built once per request, each response read by its `Content-Length`
//! or chunked framing, nothing else (no pool, no TLS, no redirects, no header map).
//!
//! The benchmarks run their clients on the same two cores as the server, so a client's own CPU
//! is taken from the server it measures: reqwest with its pool spent ~50 µs of CPU per request
//! here, more than the server spent answering it. This client spends a few microseconds, as a
//! dedicated load generator (wrk, oha) would, so closed-loop figures measure the server.

#![allow(dead_code)]

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A response: its status and body.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One keep-alive connection to a server.
pub struct Wire {
    stream: TcpStream,
    host: String,
    auth: Option<String>,
    /// Bytes read past the end of the previous response (none in practice: one request at a time).
    buf: Vec<u8>,
    req: Vec<u8>,
}

impl Wire {
    /// Connects to `addr`; `api_key` goes in every request's `Authorization` header.
    pub async fn connect(addr: SocketAddr, api_key: Option<&str>) -> Result<Wire, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("nodelay: {e}"))?;
        Ok(Wire {
            stream,
            host: addr.to_string(),
            auth: api_key.map(|k| format!("Bearer {k}")),
            buf: Vec::with_capacity(4096),
            req: Vec::with_capacity(512),
        })
    }

    /// `POST path` with a JSON body.
    pub async fn post_json(&mut self, path: &str, body: &[u8]) -> Result<Response, String> {
        self.send("POST", path, Some(body)).await
    }

    /// `GET path`.
    pub async fn get(&mut self, path: &str) -> Result<Response, String> {
        self.send("GET", path, None).await
    }

    /// Sends one request and reads its whole response.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Response, String> {
        use std::io::Write as _;
        self.req.clear();
        let _ = write!(
            self.req,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n",
            self.host
        );
        if let Some(auth) = &self.auth {
            let _ = write!(self.req, "Authorization: {auth}\r\n");
        }
        match body {
            Some(b) => {
                let _ = write!(
                    self.req,
                    "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    b.len()
                );
                self.req.extend_from_slice(b);
            }
            None => self.req.extend_from_slice(b"\r\n"),
        }
        self.stream
            .write_all(&self.req)
            .await
            .map_err(|e| format!("send: {e}"))?;
        self.read_response().await
    }

    async fn fill(&mut self) -> Result<(), String> {
        let mut tmp = [0u8; 16 * 1024];
        let n = self
            .stream
            .read(&mut tmp)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed by the server".into());
        }
        self.buf.extend_from_slice(&tmp[..n]);
        Ok(())
    }

    async fn read_response(&mut self) -> Result<Response, String> {
        let (status, head_len, framing) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut res = httparse::Response::new(&mut headers);
            match res.parse(&self.buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = res.code.unwrap_or(0);
                    let mut framing = Framing::UntilClose;
                    for h in res.headers.iter() {
                        if h.name.eq_ignore_ascii_case("content-length") {
                            let len = std::str::from_utf8(h.value)
                                .ok()
                                .and_then(|v| v.trim().parse().ok())
                                .ok_or("bad Content-Length")?;
                            framing = Framing::Length(len);
                        } else if h.name.eq_ignore_ascii_case("transfer-encoding")
                            && h.value.eq_ignore_ascii_case(b"chunked")
                        {
                            framing = Framing::Chunked;
                        }
                    }
                    // A 1xx, 204 or 304 answer has no body, whatever its headers say
                    // (RFC 9112, section 6.3).
                    if matches!(status, 100..=199 | 204 | 304) {
                        framing = Framing::Length(0);
                    }
                    break (status, n, framing);
                }
                Ok(httparse::Status::Partial) => self.fill().await?,
                Err(e) => return Err(format!("bad response head: {e}")),
            }
        };
        self.buf.drain(..head_len);
        let body = match framing {
            Framing::Length(len) => {
                while self.buf.len() < len {
                    self.fill().await?;
                }
                self.buf.drain(..len).collect()
            }
            Framing::Chunked => self.read_chunked().await?,
            Framing::UntilClose => return Err("response without a length".into()),
        };
        Ok(Response { status, body })
    }

    async fn read_chunked(&mut self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(p) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break p;
                }
                self.fill().await?;
            };
            let size = std::str::from_utf8(&self.buf[..line_end])
                .ok()
                .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok())
                .ok_or("bad chunk size")?;
            self.buf.drain(..line_end + 2);
            while self.buf.len() < size + 2 {
                self.fill().await?;
            }
            body.extend_from_slice(&self.buf[..size]);
            self.buf.drain(..size + 2);
            if size == 0 {
                return Ok(body);
            }
        }
    }
}

enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}
