//! One streamed call to `/chat/completions`: the request, the server-sent events of the reply, and
//! the accumulation of content, reasoning and (parallel) tool calls from their deltas.
//!
//! Errors are classified here because only the transport knows whether a retry can help: 429, 5xx,
//! timeouts, dropped connections and streams that end before the model finished are retryable;
//! anything else (bad request, bad key, unknown model) is not. A stream is finished only when the
//! model said why it stopped (`finish_reason`): a server that ends a running stream with `[DONE]`
//! and no reason (llama-cpp-python does when another request waits) delivered a truncated reply,
//! which is a transport fault, never a complete answer.
//!
//! Some servers cannot stream a reply when tools are offered (llama-cpp-python answers
//! `Automatic streaming tool choice is not supported`, or an empty `200`). Retrying the same
//! request would fail the same way, so that is its own outcome: the caller asks again without
//! streaming.

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::watch;

use crate::engine::DeltaSink;
use crate::timeline::Step;

/// A tool call the model asked for, assembled from its deltas.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The raw JSON text of the arguments, as the model wrote it.
    pub arguments: String,
}

/// Token counts as the endpoint reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RawUsage {
    pub prompt: u64,
    pub completion: u64,
    pub cached: u64,
    pub cache_write: u64,
}

/// What one model call produced.
#[derive(Debug, Default)]
pub struct Reply {
    pub content: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<RawUsage>,
    pub finish_reason: Option<String>,
    /// The model the endpoint says answered (its `model` field), which may name the one asked
    /// for more precisely (a dated version) or another one (a router, a server with one model).
    pub model: Option<String>,
}

impl Reply {
    /// Nothing came from the model.
    pub fn is_empty(&self) -> bool {
        self.content.is_empty() && self.reasoning.is_empty() && self.tool_calls.is_empty()
    }
}

#[derive(Debug)]
pub enum CallError {
    /// The turn was interrupted; the connection has been dropped. `partial` is what the model
    /// had produced by then.
    Cancelled {
        partial: Box<Reply>,
    },
    /// Worth another attempt, after at least the delay the server asked for.
    Retryable {
        message: String,
        retry_after: Option<Duration>,
        /// Deltas (text, reasoning) already went out live before the failure.
        streamed: bool,
        /// What the model had produced before the failure (it was paid for all the same).
        partial: Box<Reply>,
    },
    /// The endpoint cannot stream a reply when tools are offered; the same request without
    /// streaming may work.
    StreamingToolsRefused(String),
    Fatal(String),
}

pub struct Request<'a> {
    pub client: &'a reqwest::Client,
    pub url: &'a str,
    pub api_key: Option<&'a str>,
    pub body: &'a Value,
    /// Longest wait for the first byte and between two chunks.
    pub idle_timeout: Duration,
    /// Sent as `X-Request-Id`, so the endpoint's logs name the request behind the call.
    pub request_id: &'a str,
}

/// Runs one streamed call. Returns as soon as `cancel` turns true, dropping the response (which
/// closes the connection, so the endpoint stops generating).
pub async fn call(
    req: Request<'_>,
    sink: &mut dyn DeltaSink,
    cancel: &mut watch::Receiver<bool>,
) -> Result<Reply, CallError> {
    if *cancel.borrow() {
        return Err(CallError::Cancelled {
            partial: Box::default(),
        });
    }
    let streamed = req.body["stream"] == Value::Bool(true);
    let mut builder = req
        .client
        .post(req.url)
        .header("X-Request-Id", req.request_id)
        .json(req.body);
    if streamed {
        builder = builder.header("Accept", "text/event-stream");
    }
    if let Some(key) = req.api_key {
        builder = builder.bearer_auth(key);
    }
    let streamed_tools = streamed && req.body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let response = tokio::select! {
        r = tokio::time::timeout(req.idle_timeout, builder.send()) => match r {
            Err(_) => return Err(retryable("the model endpoint did not answer in time", None)),
            Ok(Err(e)) => return Err(retryable(&format!("cannot reach the model endpoint: {}", plain(&e)), None)),
            Ok(Ok(r)) => r,
        },
        _ = cancel.wait_for(|c| *c) => return Err(CallError::Cancelled { partial: Box::default() }),
    };
    let status = response.status();
    if !status.is_success() {
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|s| Duration::from_secs_f64(s.min(300.0)));
        // Only the start of an error body is ever shown.
        let body = read_capped(response, ERROR_BODY_BYTES, req.idle_timeout)
            .await
            .unwrap_or_else(|body| body);
        let message = format!(
            "the model endpoint answered {status}: {}",
            error_message(&body)
        );
        return Err(if streamed_tools && refuses_streamed_tools(&message) {
            CallError::StreamingToolsRefused(message)
        } else if status.as_u16() == 429 || status.is_server_error() || status.as_u16() == 408 {
            retryable(&message, retry_after)
        } else {
            CallError::Fatal(message)
        });
    }
    let json_reply = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if json_reply {
        // A server that ignores `stream: true` answers with the whole completion at once.
        let body = tokio::select! {
            b = read_capped(response, MAX_REPLY_BYTES, req.idle_timeout) => match b {
                Ok(body) => body,
                Err(partial) if partial.len() >= MAX_REPLY_BYTES => return Err(too_large()),
                Err(_) => return Err(retryable("the model endpoint's reply could not be read", None)),
            },
            _ = cancel.wait_for(|c| *c) => return Err(CallError::Cancelled { partial: Box::default() }),
        };
        return whole_reply(&body, sink);
    }
    let mut bytes = response.bytes_stream();
    let mut parser = SseParser::default();
    let mut acc = Accumulator::default();
    loop {
        let next = tokio::select! {
            n = tokio::time::timeout(req.idle_timeout, bytes.next()) => n,
            _ = cancel.wait_for(|c| *c) => {
                return Err(CallError::Cancelled { partial: acc.partial() });
            }
        };
        let chunk = match next {
            Err(_) => {
                return Err(acc.retryable("the model stream stalled"));
            }
            // A server that leaves out `[DONE]` after the model finished still sent a whole reply.
            Ok(None) if acc.reply.finish_reason.is_some() => return acc.finish(),
            Ok(None) if acc.events == 0 && streamed_tools => return Err(empty_stream()),
            Ok(None) => {
                return Err(acc.retryable("the model stream ended before the reply was complete"));
            }
            Ok(Some(Err(e))) => {
                return Err(acc.retryable(&format!("the model stream broke: {}", plain(&e))));
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        if parser.pending() > MAX_REPLY_BYTES {
            return Err(too_large());
        }
        for data in parser.push(&chunk) {
            let value = match data {
                Data::Done if acc.reply.finish_reason.is_some() => return acc.finish(),
                Data::Done if acc.events == 0 && streamed_tools => return Err(empty_stream()),
                Data::Done => {
                    return Err(acc.retryable(
                        "the model stream ended ([DONE]) without a finish reason: the reply is \
                         incomplete",
                    ));
                }
                Data::Json(value) => value,
            };
            if let Some(err) = value.get("error") {
                let message = err
                    .get("message")
                    .and_then(Value::as_str)
                    .or_else(|| err.as_str())
                    .unwrap_or("unknown error");
                let message = format!("the model endpoint reported an error mid-stream: {message}");
                return Err(if streamed_tools && refuses_streamed_tools(&message) {
                    CallError::StreamingToolsRefused(message)
                } else {
                    acc.retryable(&message)
                });
            }
            acc.apply(&value, sink);
            if acc.size() > MAX_REPLY_BYTES {
                return Err(too_large());
            }
        }
    }
}

/// The most a reply (text, reasoning and tool arguments, or a whole body) may hold: a model
/// endpoint cannot make sessiond buffer without bound.
const MAX_REPLY_BYTES: usize = 16 * 1024 * 1024;
/// The most of an error body that is read.
const ERROR_BODY_BYTES: usize = 64 * 1024;

fn too_large() -> CallError {
    CallError::Fatal(format!(
        "the model's reply is larger than {} MiB",
        MAX_REPLY_BYTES / (1024 * 1024)
    ))
}

/// Reads a body up to `cap` bytes; `Err` with what was read when it is longer, breaks or stalls.
async fn read_capped(
    response: reqwest::Response,
    cap: usize,
    idle: Duration,
) -> Result<String, String> {
    let mut bytes = response.bytes_stream();
    let mut body = Vec::new();
    loop {
        match tokio::time::timeout(idle, bytes.next()).await {
            Ok(Some(Ok(chunk))) => {
                body.extend_from_slice(&chunk);
                if body.len() >= cap {
                    body.truncate(cap);
                    return Err(String::from_utf8_lossy(&body).into_owned());
                }
            }
            Ok(None) => return Ok(String::from_utf8_lossy(&body).into_owned()),
            Ok(Some(Err(_))) | Err(_) => return Err(String::from_utf8_lossy(&body).into_owned()),
        }
    }
}

/// A non-streamed `chat.completion`, read as if it had streamed in one piece.
fn whole_reply(body: &str, sink: &mut dyn DeltaSink) -> Result<Reply, CallError> {
    let value: Value = serde_json::from_str(body)
        .map_err(|_| CallError::Fatal("the model endpoint answered with malformed JSON".into()))?;
    if let Some(message) = value.pointer("/error/message").and_then(Value::as_str) {
        return Err(CallError::Fatal(format!(
            "the model endpoint reported an error: {message}"
        )));
    }
    let message = value
        .pointer("/choices/0/message")
        .ok_or_else(|| CallError::Fatal("the model endpoint's reply has no message".into()))?;
    // Shaped as one streamed chunk, so that one code path reads both.
    let mut delta = message.clone();
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (i, call) in calls.iter_mut().enumerate() {
            call["index"] = serde_json::json!(i);
        }
    }
    let chunk = serde_json::json!({
        "choices": [{"delta": delta, "finish_reason": value.pointer("/choices/0/finish_reason")}],
        "usage": value.get("usage"),
        "model": value.get("model"),
    });
    let mut acc = Accumulator::default();
    acc.apply(&chunk, sink);
    acc.finish()
}

/// A failure before the model produced anything.
fn retryable(message: &str, retry_after: Option<Duration>) -> CallError {
    CallError::Retryable {
        message: message.to_owned(),
        retry_after,
        streamed: false,
        partial: Box::default(),
    }
}

/// Whether an error message says the server cannot stream while tools are offered
/// (llama-cpp-python: `Automatic streaming tool choice is not supported`; llama.cpp's server
/// before it streamed tool calls: `Cannot use tools with stream`).
fn refuses_streamed_tools(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("cannot use tools with stream")
        || (m.contains("stream")
            && m.contains("tool")
            && (m.contains("not support") || m.contains("unsupported")))
}

/// What llama-cpp-python sends when it cannot stream with tools and only its log says why.
fn empty_stream() -> CallError {
    CallError::StreamingToolsRefused(
        "the model endpoint answered a streamed request with tools with an empty stream".into(),
    )
}

/// A transport error as its kind and its root cause (`connection refused`, a TLS certificate
/// problem), without the URL reqwest's own message carries.
fn plain(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_body() || e.is_decode() {
        "connection dropped"
    } else {
        "request failed"
    };
    let mut root: &dyn std::error::Error = e;
    while let Some(next) = root.source() {
        root = next;
    }
    let cause: String = root.to_string().chars().take(200).collect();
    if std::ptr::addr_eq(root, e as &dyn std::error::Error) || cause.contains("://") {
        kind.to_owned()
    } else {
        format!("{kind} ({cause})")
    }
}

/// The `error.message` of an OpenAI-style error body, else a bounded excerpt of the body.
fn error_message(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("error"))
                .or_else(|| v.get("message"))
        })
        .and_then(Value::as_str)
        .map(str::to_owned)
        .unwrap_or_else(|| body.trim().to_owned());
    let mut out: String = message.chars().take(300).collect();
    if out.is_empty() {
        out = "no details".into();
    }
    out
}

/// The `data` of one server-sent event.
#[derive(Debug, PartialEq)]
enum Data {
    Done,
    Json(Value),
}

impl Data {
    fn parse(text: &str) -> Option<Data> {
        if text.trim() == "[DONE]" {
            return Some(Data::Done);
        }
        serde_json::from_str(text).ok().map(Data::Json)
    }
}

/// Splits a byte stream into the `data` of server-sent events, each parsed once.
#[derive(Default)]
struct SseParser {
    buf: Vec<u8>,
    /// How much of `buf` is known to hold no line end (a long line is scanned once, not once per
    /// chunk).
    scanned: usize,
    data: Vec<String>,
}

impl SseParser {
    /// Bytes held for an event that is not complete yet.
    fn pending(&self) -> usize {
        self.buf.len() + self.data.iter().map(String::len).sum::<usize>()
    }

    fn push(&mut self, bytes: &[u8]) -> Vec<Data> {
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        let mut start = 0;
        let mut from = self.scanned;
        while let Some(len) = self.buf[from..].iter().position(|b| *b == b'\n') {
            let raw = &self.buf[start..from + len];
            start = from + len + 1;
            from = start;
            let line = String::from_utf8_lossy(raw);
            let line = line.trim_end_matches('\r');
            if line.is_empty() {
                if !self.data.is_empty() {
                    out.extend(Data::parse(&self.data.join("\n")));
                    self.data.clear();
                }
            } else if let Some(rest) = line.strip_prefix("data:") {
                let rest = rest.strip_prefix(' ').unwrap_or(rest);
                // One complete document per line (the usual case, and servers that leave out
                // the blank separators) is taken at once; otherwise lines gather until a blank.
                match self.data.is_empty().then(|| Data::parse(rest)).flatten() {
                    Some(data) => out.push(data),
                    None => self.data.push(rest.to_owned()),
                }
            }
            // Comments (`:`), `event:`, `id:` and `retry:` lines carry nothing for us.
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        out
    }
}

/// The longest model name kept from an answer.
const MAX_MODEL_CHARS: usize = 200;

#[derive(Default)]
struct Accumulator {
    reply: Reply,
    /// Tool calls by their stream index.
    calls: Vec<(u64, ToolCall)>,
    /// Events (JSON documents) received.
    events: usize,
    /// Deltas sent to the sink.
    deltas: usize,
}

impl Accumulator {
    /// A failure after part of the reply came in.
    fn retryable(&mut self, message: &str) -> CallError {
        CallError::Retryable {
            message: message.to_owned(),
            retry_after: None,
            streamed: self.deltas > 0,
            partial: self.partial(),
        }
    }

    /// What came in so far.
    fn partial(&mut self) -> Box<Reply> {
        let mut reply = std::mem::take(&mut self.reply);
        reply.tool_calls = std::mem::take(&mut self.calls)
            .into_iter()
            .map(|(_, c)| c)
            .collect();
        Box::new(reply)
    }

    /// Bytes of reply gathered so far.
    fn size(&self) -> usize {
        self.reply.content.len()
            + self.reply.reasoning.len()
            + self
                .calls
                .iter()
                .map(|(_, c)| c.arguments.len() + c.name.len() + c.id.len())
                .sum::<usize>()
    }

    fn apply(&mut self, chunk: &Value, sink: &mut dyn DeltaSink) {
        self.events += 1;
        if let Some(model) = chunk
            .get("model")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|m| !m.is_empty())
            && self.reply.model.as_deref() != Some(model)
        {
            // A name, not a document: an endpoint's odd answer is cut short.
            self.reply.model = Some(model.chars().take(MAX_MODEL_CHARS).collect());
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            let n = |p: &str| usage.pointer(p).and_then(Value::as_u64).unwrap_or(0);
            self.reply.usage = Some(RawUsage {
                prompt: n("/prompt_tokens"),
                completion: n("/completion_tokens"),
                cached: n("/prompt_tokens_details/cached_tokens"),
                cache_write: n("/prompt_tokens_details/cache_write_tokens"),
            });
        }
        let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        else {
            return;
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.reply.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return;
        };
        // `reasoning_content` (DeepSeek, vLLM, llama.cpp) or `reasoning` (OpenRouter, Ollama).
        let reasoning = delta
            .get("reasoning_content")
            .or_else(|| delta.get("reasoning"))
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty());
        if let Some(r) = reasoning {
            self.reply.reasoning.push_str(r);
            self.deltas += 1;
            sink.delta(Step::ReasoningDelta {
                delta: r.to_owned(),
            });
        }
        if let Some(text) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.reply.content.push_str(text);
            self.deltas += 1;
            sink.delta(Step::TextDelta {
                delta: text.to_owned(),
            });
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let slot = match self.calls.iter_mut().position(|(i, _)| *i == index) {
                Some(p) => &mut self.calls[p].1,
                None => {
                    self.calls.push((index, ToolCall::default()));
                    let last = self.calls.len() - 1;
                    &mut self.calls[last].1
                }
            };
            if let Some(id) = call.get("id").and_then(Value::as_str) {
                slot.id.push_str(id);
            }
            if let Some(f) = call.get("function") {
                if let Some(name) = f.get("name").and_then(Value::as_str) {
                    slot.name.push_str(name);
                }
                if let Some(args) = f.get("arguments").and_then(Value::as_str) {
                    slot.arguments.push_str(args);
                }
            }
        }
    }

    fn finish(mut self) -> Result<Reply, CallError> {
        self.calls.sort_by_key(|(i, _)| *i);
        self.reply.tool_calls = self
            .calls
            .into_iter()
            .enumerate()
            .map(|(n, (_, mut c))| {
                if c.id.is_empty() {
                    // Some local servers omit ids; the conversation needs them to pair results.
                    c.id = format!("call_{n}");
                }
                c
            })
            .filter(|c| !c.name.is_empty())
            .collect();
        Ok(self.reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Vec<Step>);
    impl DeltaSink for Collect {
        fn delta(&mut self, step: Step) {
            self.0.push(step);
        }
    }

    #[test]
    fn sse_parser_joins_split_lines_and_multi_line_data() {
        let mut p = SseParser::default();
        let json = |v: Value| Data::Json(v);
        assert!(p.push(b"data: {\"a\"").is_empty());
        assert_eq!(
            p.push(b":1}\r\n\r\n"),
            vec![json(serde_json::json!({"a": 1}))]
        );
        assert_eq!(
            p.push(b": keep-alive\n\ndata: [DONE]\n\n"),
            vec![Data::Done]
        );
        assert_eq!(
            p.push(b"data: {\"x\":\ndata: 2}\n\n"),
            vec![json(serde_json::json!({"x": 2}))]
        );
        assert!(p.push(b"data: not json\n\n").is_empty());
    }

    #[test]
    fn parallel_tool_call_deltas_are_assembled_by_index() {
        let mut acc = Accumulator::default();
        let mut sink = Collect(Vec::new());
        let chunks = [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","function":{"name":"read_file","arguments":"{\"pa"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"list_dir","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"th\":\"x\"}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"model":"m-1","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}"#,
        ];
        for c in chunks {
            acc.apply(&serde_json::from_str(c).unwrap(), &mut sink);
        }
        let reply = acc.finish().unwrap();
        assert_eq!(reply.tool_calls.len(), 2);
        assert_eq!(reply.tool_calls[0].arguments, "{\"path\":\"x\"}");
        assert_eq!(reply.tool_calls[1].name, "list_dir");
        assert_eq!(reply.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(
            reply.model.as_deref(),
            Some("m-1"),
            "the chunk that named it"
        );
        assert_eq!(
            reply.usage,
            Some(RawUsage {
                prompt: 10,
                completion: 3,
                cached: 4,
                cache_write: 0
            })
        );
        assert!(sink.0.is_empty());
    }

    #[test]
    fn refusals_to_stream_with_tools_are_recognised() {
        assert!(refuses_streamed_tools(
            "the model endpoint answered 500 Internal Server Error: Automatic streaming tool choice is not supported"
        ));
        assert!(refuses_streamed_tools(
            "Streaming is unsupported when tools are given"
        ));
        assert!(refuses_streamed_tools(
            "the model endpoint answered 400 Bad Request: Cannot use tools with stream"
        ));
        assert!(!refuses_streamed_tools(
            "the model endpoint answered 503: overloaded"
        ));
        assert!(!refuses_streamed_tools(
            "tool_choice must be one of auto, none"
        ));
    }

    #[test]
    fn a_whole_completion_reads_like_a_stream() {
        let body = r#"{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Let me look.","reasoning_content":"hm","tool_calls":[{"id":"c1","type":"function","function":{"name":"list_dir","arguments":"{}"}}]}}],"usage":{"prompt_tokens":7,"completion_tokens":2}}"#;
        let mut sink = Collect(Vec::new());
        let reply = whole_reply(body, &mut sink).unwrap();
        assert_eq!(reply.content, "Let me look.");
        assert_eq!(reply.reasoning, "hm");
        assert_eq!(reply.tool_calls[0].name, "list_dir");
        assert_eq!(reply.tool_calls[0].id, "c1");
        assert_eq!(reply.usage.map(|u| u.prompt), Some(7));
        assert_eq!(reply.model, None, "the body named no model");
        assert_eq!(sink.0.len(), 2, "one reasoning and one text delta");
        let named = r#"{"model":"gpt-x-2025","choices":[{"message":{"content":"hi"}}]}"#;
        assert_eq!(
            whole_reply(named, &mut sink).unwrap().model.as_deref(),
            Some("gpt-x-2025")
        );
        assert!(whole_reply("{", &mut sink).is_err());
    }
}
