//! One JSON-RPC 2.0 call to an ACP server (`POST {url}/api`), and the NDJSON lines of its answer.
//!
//! The AgentEx SDK's FastACP servers answer `message/send` with one JSON-RPC response per line
//! (`application/x-ndjson`), each carrying a `TaskMessageUpdate`; every other method with one
//! JSON-RPC response. Lines are read with a cap ([`MAX_LINE`]) and an idle timeout, so a server
//! that sends an endless line or stops talking cannot hold a turn.

use std::time::Duration;

use serde_json::{Value, json};

/// Longest answer line accepted from an agent (a `full` message with its whole content).
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// Why a call failed, and whether trying again may help.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The server could not be reached, timed out before answering, or answered 5xx / 429: the
    /// call may be made again (nothing was received).
    Retryable(String),
    /// The answer was received and is an error, or is not a JSON-RPC answer.
    Fatal(String),
}

impl CallError {
    pub fn message(&self) -> &str {
        match self {
            CallError::Retryable(m) | CallError::Fatal(m) => m,
        }
    }
}

/// Where and how to call an agent.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The ACP server's base URL; calls go to `{url}/api`.
    pub url: String,
    /// The key the agent was issued at registration, sent as `x-agent-api-key`.
    pub api_key: Option<String>,
    /// How long to wait for the answer to start (and, for a stream, for each next line).
    pub idle_timeout: Duration,
}

/// The JSON-RPC request object of a call.
pub fn request(id: &str, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// Starts a call: sends the request and waits for the answer's status line. `request_id` goes out
/// as `x-request-id` (the SDK puts it in its logs) and as the JSON-RPC id.
pub async fn send(
    http: &reqwest::Client,
    to: &Endpoint,
    request_id: &str,
    method: &str,
    params: Value,
) -> Result<Lines, CallError> {
    let url = format!("{}/api", to.url.trim_end_matches('/'));
    let mut req = http
        .post(&url)
        .header("x-request-id", request_id)
        .json(&request(request_id, method, params));
    if let Some(key) = &to.api_key {
        req = req.header("x-agent-api-key", key);
    }
    let sent = tokio::time::timeout(to.idle_timeout, req.send()).await;
    let resp = match sent {
        Err(_) => {
            return Err(CallError::Retryable(format!(
                "the agent's ACP server at {} did not answer {method} within {} ms",
                to.url,
                to.idle_timeout.as_millis()
            )));
        }
        Ok(Err(e)) => {
            return Err(CallError::Retryable(format!(
                "the agent's ACP server at {} cannot be reached: {}",
                to.url,
                describe(&e)
            )));
        }
        Ok(Ok(resp)) => resp,
    };
    let status = resp.status();
    if status.is_server_error() || status.as_u16() == 429 {
        return Err(CallError::Retryable(format!(
            "the agent's ACP server answered {method} with HTTP {status}"
        )));
    }
    if !status.is_success() {
        return Err(CallError::Fatal(format!(
            "the agent's ACP server answered {method} with HTTP {status}"
        )));
    }
    Ok(Lines {
        resp,
        buf: Vec::new(),
        scanned: 0,
        idle_timeout: to.idle_timeout,
        ended: false,
    })
}

/// The reason in a transport error, without the URL reqwest repeats (it is said already).
fn describe(e: &reqwest::Error) -> String {
    let mut out = if e.is_connect() {
        "connection refused or failed".to_owned()
    } else if e.is_timeout() {
        "timed out".to_owned()
    } else {
        "transport error".to_owned()
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out = format!("{out}: {s}");
        source = s.source();
    }
    out
}

/// The lines of an answer, each at most [`MAX_LINE`] bytes.
pub struct Lines {
    resp: reqwest::Response,
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no newline.
    scanned: usize,
    idle_timeout: Duration,
    ended: bool,
}

impl Lines {
    /// The next non-blank line, `Ok(None)` at the end of the answer.
    pub async fn next(&mut self) -> Result<Option<String>, CallError> {
        loop {
            // Only bytes not looked at yet are searched, so a long line costs linear time.
            if let Some(at) = self.buf[self.scanned..].iter().position(|b| *b == b'\n') {
                let pos = self.scanned + at;
                let rest = self.buf.split_off(pos + 1);
                let line = std::mem::replace(&mut self.buf, rest);
                self.scanned = 0;
                match Self::text(&line[..pos])? {
                    Some(l) => return Ok(Some(l)),
                    None => continue,
                }
            }
            self.scanned = self.buf.len();
            if self.buf.len() > MAX_LINE {
                return Err(CallError::Fatal(format!(
                    "the agent's ACP server sent a line longer than {MAX_LINE} bytes"
                )));
            }
            if self.ended {
                let last = std::mem::take(&mut self.buf);
                return Self::text(&last);
            }
            match tokio::time::timeout(self.idle_timeout, self.resp.chunk()).await {
                Err(_) => {
                    return Err(CallError::Fatal(format!(
                        "the agent's ACP server sent nothing for {} ms",
                        self.idle_timeout.as_millis()
                    )));
                }
                Ok(Ok(None)) => self.ended = true,
                Ok(Err(e)) => {
                    return Err(CallError::Fatal(format!(
                        "the agent's answer broke off: {}",
                        describe(&e)
                    )));
                }
                Ok(Ok(Some(chunk))) => self.buf.extend_from_slice(&chunk),
            }
        }
    }

    fn text(bytes: &[u8]) -> Result<Option<String>, CallError> {
        let s = std::str::from_utf8(bytes).map_err(|_| {
            CallError::Fatal("the agent's ACP server sent a line that is not UTF-8".into())
        })?;
        let s = s.trim();
        Ok((!s.is_empty()).then(|| s.to_owned()))
    }
}

/// The `result` of one JSON-RPC response line, or the error it carries.
pub fn result_of(line: &str) -> Result<Value, CallError> {
    let v: Value = serde_json::from_str(line).map_err(|e| {
        CallError::Fatal(format!(
            "the agent's ACP server sent a line that is not JSON ({e}): {}",
            excerpt(line)
        ))
    })?;
    let Value::Object(mut obj) = v else {
        return Err(CallError::Fatal(format!(
            "the agent's ACP server sent a line that is not a JSON-RPC response: {}",
            excerpt(line)
        )));
    };
    match obj.remove("error") {
        None | Some(Value::Null) => {}
        Some(err) => {
            let code = err.get("code").and_then(Value::as_i64);
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message");
            return Err(CallError::Fatal(match code {
                Some(c) => format!("the agent answered with error {c}: {message}"),
                None => format!("the agent answered with an error: {message}"),
            }));
        }
    }
    if !obj.contains_key("result") && !obj.contains_key("jsonrpc") {
        return Err(CallError::Fatal(format!(
            "the agent's ACP server sent a line that is not a JSON-RPC response: {}",
            excerpt(line)
        )));
    }
    Ok(obj.remove("result").unwrap_or(Value::Null))
}

/// The start of a line, for error messages.
fn excerpt(line: &str) -> String {
    let mut s: String = line.chars().take(200).collect();
    if s.len() < line.len() {
        s.push('…');
    }
    s
}

/// Makes a call that answers once (every method but `message/send`) and returns its `result`.
pub async fn call(
    http: &reqwest::Client,
    to: &Endpoint,
    method: &str,
    params: Value,
) -> Result<Value, CallError> {
    let id = crate::ids::new_id();
    let mut lines = send(http, to, &id, method, params).await?;
    match lines.next().await? {
        Some(line) => result_of(&line),
        None => Err(CallError::Fatal(format!(
            "the agent's ACP server answered {method} with an empty body"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_and_errors_of_lines() {
        assert_eq!(
            result_of(
                r#"{"jsonrpc":"2.0","id":"1","result":{"status":"processing"},"error":null}"#
            )
            .unwrap(),
            json!({"status": "processing"})
        );
        assert_eq!(
            result_of(r#"{"jsonrpc":"2.0","id":"1","result":null}"#).unwrap(),
            Value::Null
        );
        let e = result_of(
            r#"{"jsonrpc":"2.0","id":"1","error":{"code":-32601,"message":"Method x not found"}}"#,
        )
        .unwrap_err();
        assert_eq!(
            e,
            CallError::Fatal("the agent answered with error -32601: Method x not found".into())
        );
        assert!(matches!(result_of("not json"), Err(CallError::Fatal(_))));
        assert!(matches!(result_of("[1]"), Err(CallError::Fatal(_))));
        assert!(matches!(result_of(r#"{"a":1}"#), Err(CallError::Fatal(_))));
    }
}
