//! The plumbing of the tests' fake HTTP servers (the fake model endpoint, the fake ACP server):
//! the accept loop, and one HTTP/1.1 request read off a socket (its path, headers and JSON body).

use std::io::{BufRead, BufReader, Read};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use serde_json::Value;

pub struct Request {
    pub path: String,
    /// Header names lower-cased, values trimmed, in the order sent.
    headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
}

impl Request {
    /// The first value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

/// Reads the request head and its `Content-Length` body; `None` when the client sent no whole request.
pub fn read(conn: &mut TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(conn.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_owned();
    let mut length = 0usize;
    let mut headers = Vec::new();
    loop {
        let mut h = String::new();
        reader.read_line(&mut h).ok()?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let (k, v) = (k.to_ascii_lowercase(), v.trim().to_owned());
            if k == "content-length" {
                length = v.parse().ok()?;
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        path,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

/// Serves every connection `listener` accepts on its own thread with `serve`, for the life of the
/// test process.
pub fn serve_each<S: Send + Sync + 'static>(
    listener: TcpListener,
    state: Arc<S>,
    serve: fn(TcpStream, &S),
) {
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let st = Arc::clone(&state);
            std::thread::spawn(move || serve(conn, &st));
        }
    });
}
