//! The `acp` engine: an agent whose turns are served by its own ACP server, an agent built with
//! the AgentEx SDK ("FastACP") that registered with sessiond. A turn is one JSON-RPC call to the
//! server (`rpc.rs`):
//!
//! - a `sync` agent gets `message/send` (`agent`, `task`, `content`, `stream: true`) and answers
//!   NDJSON `TaskMessageUpdate`s: `delta`s become volatile `text_delta`/`reasoning_delta` steps,
//!   each finished message (`full`, or `done` after deltas) a durable step;
//! - an `async` agent gets `event/send` (`agent`, `task`, `event`) and answers `processing` at
//!   once; the turn ends there, and what the agent writes later through the agent platform API
//!   (messages, states, spans) lands in the same session.
//!
//! A call that finds the server down, slow to answer or answering 5xx is made again with backoff
//! (each retry a `system` warning); once an answer has started, a broken answer fails the turn
//! with its reason. An interrupt closes the connection, which is how an SDK agent's handler learns
//! that its caller is gone.
//!
//! The `agent`, `task` and `event` objects, and the key the agent was issued, come from
//! [`AcpPlatform`], implemented by the agent platform API: the engine knows no store.

pub mod rpc;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{BoxFuture, Engine, InputKind, TurnEnd, TurnInput, TurnIo};
use crate::config::Policy;
use crate::error::{Error, Result};
use crate::timeline::{Event, Level, Step, ToolOutputPart};
use rpc::{CallError, Endpoint};

/// Attempts of a call that found the server unreachable (the first one included).
const ATTEMPTS: u32 = 4;

/// Which methods an agent serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AcpType {
    /// `message/send` only: the answer is the agent's reply.
    Sync,
    /// `task/create`, `event/send`, `task/cancel`: the agent writes back through the API.
    /// (`agentic` is the SDK's older name for it.)
    #[serde(alias = "agentic")]
    Async,
}

impl AcpType {
    pub fn as_str(self) -> &'static str {
        match self {
            AcpType::Sync => "sync",
            AcpType::Async => "async",
        }
    }
}

fn default_idle_timeout_ms() -> u64 {
    300_000
}

/// An `acp` engine configuration: `{"kind": "acp", "url": "http://127.0.0.1:8000",
/// "acpType": "sync"}`. Registration writes it; an operator may also write it by hand.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AcpConfig {
    /// The ACP server's base URL, as it registered; calls go to `{url}/api`.
    pub url: String,
    pub acp_type: AcpType,
    /// How long the server may take to start answering, and then between two lines.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
}

impl AcpConfig {
    /// The URL is an `http` or `https` base URL without credentials, query or fragment.
    pub fn check(&self) -> Result<()> {
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| Error::invalid(format!("engine/url: not a URL ({e})")))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(Error::invalid(
                "engine/url: must be an http:// or https:// URL with a host",
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Error::invalid("engine/url: may not carry credentials"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(Error::invalid(
                "engine/url: may not have a query or a fragment",
            ));
        }
        if !(100..=3_600_000).contains(&self.idle_timeout_ms) {
            return Err(Error::invalid(
                "engine/idleTimeoutMs: between 100 and 3600000",
            ));
        }
        Ok(())
    }

    /// The server's host (and port) is one the operator lets agents call (`policy.acp_hosts`).
    pub fn permitted(&self, policy: &Policy) -> Result<()> {
        if host_permitted(&self.url, policy) {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "engine/url: this server does not call ACP servers at {} (policy.acp_hosts in \
                 its config file)",
                authority(&self.url).unwrap_or_else(|| self.url.clone())
            )))
        }
    }
}

/// `host:port` of a URL (IPv6 hosts in brackets).
fn authority(url: &str) -> Option<String> {
    let url = reqwest::Url::parse(url).ok()?;
    let host = url.host_str()?.to_ascii_lowercase();
    Some(match url.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host,
    })
}

/// Whether `policy.acp_hosts` names the URL's host (any port) or its `host:port`.
pub fn host_permitted(url: &str, policy: &Policy) -> bool {
    crate::config::host_listed(&policy.acp_hosts, url)
}

/// What an agent is sent with a call about one of its tasks.
#[derive(Debug, Clone)]
pub struct AcpTurn {
    /// The contract's `Agent`.
    pub agent: Value,
    /// The contract's `Task`.
    pub task: Value,
    /// The contract's `Event` the turn's input is (asked for by async agents).
    pub event: Option<Value>,
    /// The key the agent was issued when it registered.
    pub api_key: Option<String>,
}

/// The platform an ACP agent registered with: it knows the agent, its tasks and its key.
#[async_trait]
pub trait AcpPlatform: Send + Sync {
    /// The objects of a turn of session `session_id` whose input is `input` (`event`: record the
    /// input as an event, or find the one it already is).
    async fn turn(&self, session_id: &str, input: &TurnInput, event: bool) -> Result<AcpTurn>;

    /// Notes how a call to agent `agent_id`'s ACP server went: it answered (`error` is `None`),
    /// or it failed with `error`. What the agent pages show as its last contact and last error.
    async fn contacted(&self, agent_id: &str, error: Option<String>);
}

/// Where the engine finds its platform once the server has wired it.
pub type PlatformSlot = Arc<OnceLock<Arc<dyn AcpPlatform>>>;

/// The HTTP client of every `acp` engine (one connection pool).
pub fn http_client() -> reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            crate::tls::client_builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default()
        })
        .clone()
}

pub struct AcpEngine {
    cfg: AcpConfig,
    platform: PlatformSlot,
    http: reqwest::Client,
}

impl AcpEngine {
    pub fn new(cfg: AcpConfig, platform: PlatformSlot) -> AcpEngine {
        AcpEngine {
            cfg,
            platform,
            http: http_client(),
        }
    }

    fn endpoint(&self, api_key: Option<String>) -> Endpoint {
        Endpoint {
            url: self.cfg.url.clone(),
            api_key,
            idle_timeout: Duration::from_millis(self.cfg.idle_timeout_ms),
        }
    }

    async fn turn(&self, io: &mut dyn TurnIo, input: TurnInput) -> Result<TurnEnd> {
        if input.kind == InputKind::Wake {
            return Ok(TurnEnd::Complete { result: None });
        }
        let Some(platform) = self.platform.get() else {
            return Ok(TurnEnd::Failed {
                error: "the acp engine is not connected to the agent platform API".into(),
            });
        };
        let async_agent = self.cfg.acp_type == AcpType::Async;
        let call = platform.turn(io.session_id(), &input, async_agent).await?;
        let agent_id = call.agent["id"].as_str().unwrap_or_default().to_owned();
        let end = self
            .call(io, &input, &call, async_agent, platform.as_ref(), &agent_id)
            .await?;
        if let TurnEnd::Failed { error } = &end {
            platform.contacted(&agent_id, Some(error.clone())).await;
        }
        Ok(end)
    }

    /// The turn's call to the agent's server and its answer. A call the server answered is noted
    /// as a contact; the caller notes the error of a turn it failed.
    async fn call(
        &self,
        io: &mut dyn TurnIo,
        input: &TurnInput,
        call: &AcpTurn,
        async_agent: bool,
        platform: &dyn AcpPlatform,
        agent_id: &str,
    ) -> Result<TurnEnd> {
        let to = self.endpoint(call.api_key.clone());
        let (method, params) = if async_agent {
            let event = call.event.clone().unwrap_or(Value::Null);
            (
                "event/send",
                json!({"agent": call.agent, "task": call.task, "event": event}),
            )
        } else {
            let content = json!({
                "type": "text",
                "author": "user",
                "content": input.text,
                "format": "plain",
            });
            (
                "message/send",
                json!({"agent": call.agent, "task": call.task, "content": content, "stream": true}),
            )
        };
        let mut cancel = io.cancel_watch();
        let mut attempt = 1;
        let mut lines = loop {
            let id = crate::ids::new_id();
            let sent = tokio::select! {
                r = rpc::send(&self.http, &to, &id, method, params.clone()) => r,
                () = interrupted(&mut cancel) => return Ok(TurnEnd::Interrupted),
            };
            match sent {
                Ok(lines) => {
                    platform.contacted(agent_id, None).await;
                    break lines;
                }
                Err(CallError::Fatal(e)) => return Ok(TurnEnd::Failed { error: e }),
                Err(CallError::Retryable(e)) if attempt >= ATTEMPTS => {
                    return Ok(TurnEnd::Failed {
                        error: format!("{e} (gave up after {attempt} attempts)"),
                    });
                }
                Err(CallError::Retryable(e)) => {
                    let delay = 500u64 << (attempt - 1);
                    io.emit(Event::System {
                        level: Level::Warn,
                        message: format!(
                            "{e}; retrying in {:.1} s (attempt {} of {ATTEMPTS})",
                            delay as f64 / 1000.0,
                            attempt + 1
                        ),
                        metadata: None,
                    })
                    .await?;
                    if !io.pause(delay).await {
                        return Ok(TurnEnd::Interrupted);
                    }
                    attempt += 1;
                }
            }
        };
        if async_agent {
            let answered = tokio::select! {
                r = lines.next() => r,
                () = interrupted(&mut cancel) => return Ok(TurnEnd::Interrupted),
            };
            return Ok(
                match answered.and_then(|l| {
                    l.ok_or_else(|| {
                        CallError::Fatal("the agent answered event/send with an empty body".into())
                    })
                    .and_then(|l| rpc::result_of(&l))
                }) {
                    Ok(_) => TurnEnd::Complete { result: None },
                    Err(e) => TurnEnd::Failed {
                        error: e.message().to_owned(),
                    },
                },
            );
        }
        let mut reply = Reply::default();
        loop {
            let next = tokio::select! {
                r = lines.next() => r,
                () = interrupted(&mut cancel) => {
                    // Dropping the answer closes the connection: the agent's handler stops.
                    drop(lines);
                    reply.flush(io).await?;
                    return Ok(TurnEnd::Interrupted);
                }
            };
            let line = match next {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    reply.flush(io).await?;
                    return Ok(TurnEnd::Failed {
                        error: e.message().to_owned(),
                    });
                }
            };
            let update = match rpc::result_of(&line) {
                Ok(u) => u,
                Err(e) => {
                    reply.flush(io).await?;
                    return Ok(TurnEnd::Failed {
                        error: e.message().to_owned(),
                    });
                }
            };
            if let Err(e) = reply.apply(io, update).await? {
                reply.flush(io).await?;
                return Ok(TurnEnd::Failed { error: e });
            }
        }
        reply.flush(io).await?;
        if let Some(text) = &reply.last_text {
            io.set_reply(text);
        }
        Ok(TurnEnd::Complete {
            result: reply.last_text,
        })
    }
}

/// Resolves once the turn is interrupted (the watch's guard is not held past it).
async fn interrupted(cancel: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = cancel.wait_for(|c| *c).await;
}

impl Engine for AcpEngine {
    fn name(&self) -> &'static str {
        "acp"
    }

    fn describe(&self) -> String {
        format!("{} agent at {}", self.cfg.acp_type.as_str(), self.cfg.url)
    }

    fn run<'a>(
        &'a self,
        io: &'a mut dyn TurnIo,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<TurnEnd>> {
        Box::pin(self.turn(io, input))
    }
}

/// A message being streamed at one `index`.
#[derive(Debug, Default)]
struct Streaming {
    /// `reasoning` when its deltas are reasoning; otherwise text.
    reasoning: bool,
    text: String,
}

/// The agent's answer to `message/send` so far: messages still streaming, by index.
#[derive(Debug, Default)]
struct Reply {
    open: Vec<(i64, Streaming)>,
    last_text: Option<String>,
}

impl Reply {
    /// Applies one `TaskMessageUpdate`; `Ok(Err(reason))` for an update that is not one.
    async fn apply(
        &mut self,
        io: &mut dyn TurnIo,
        update: Value,
    ) -> Result<std::result::Result<(), String>> {
        let index = update.get("index").and_then(Value::as_i64).unwrap_or(0);
        match update.get("type").and_then(Value::as_str) {
            Some("start") => {
                let mut s = Streaming::default();
                if let Some(c) = update.get("content") {
                    s.reasoning = c.get("type").and_then(Value::as_str) == Some("reasoning");
                    if let Some(t) = c.get("content").and_then(Value::as_str) {
                        s.text.push_str(t);
                    }
                }
                self.open.retain(|(i, _)| *i != index);
                self.open.push((index, s));
            }
            Some("delta") => {
                let Some(delta) = update.get("delta").filter(|d| !d.is_null()) else {
                    return Ok(Ok(()));
                };
                let (reasoning, text) = match delta.get("type").and_then(Value::as_str) {
                    Some("text") => (false, delta.get("text_delta")),
                    Some("reasoning_content") => (true, delta.get("content_delta")),
                    Some("reasoning_summary") => (true, delta.get("summary_delta")),
                    // Tool-call and data deltas are shown when their message is complete.
                    _ => return Ok(Ok(())),
                };
                let text = text.and_then(Value::as_str).unwrap_or_default().to_owned();
                if text.is_empty() {
                    return Ok(Ok(()));
                }
                io.delta(if reasoning {
                    Step::ReasoningDelta {
                        delta: text.clone(),
                    }
                } else {
                    Step::TextDelta {
                        delta: text.clone(),
                    }
                });
                match self.open.iter_mut().find(|(i, _)| *i == index) {
                    Some((_, s)) => s.text.push_str(&text),
                    None => self.open.push((index, Streaming { reasoning, text })),
                }
            }
            Some("full") => {
                self.open.retain(|(i, _)| *i != index);
                let Some(content) = update.get("content") else {
                    return Ok(Err("the agent sent a full message without content".into()));
                };
                match step_of(content) {
                    Ok(Some(step)) => self.emit(io, step).await?,
                    Ok(None) => {}
                    Err(e) => return Ok(Err(e)),
                }
            }
            Some("done") => {
                if let Some(pos) = self.open.iter().position(|(i, _)| *i == index) {
                    let (_, s) = self.open.remove(pos);
                    self.finish(io, s).await?;
                }
            }
            other => {
                return Ok(Err(format!(
                    "the agent sent an update of unknown type {:?}",
                    other.unwrap_or("null")
                )));
            }
        }
        Ok(Ok(()))
    }

    /// Makes the messages still streaming durable (the answer ended without their `done`).
    async fn flush(&mut self, io: &mut dyn TurnIo) -> Result<()> {
        for (_, s) in std::mem::take(&mut self.open) {
            self.finish(io, s).await?;
        }
        Ok(())
    }

    async fn finish(&mut self, io: &mut dyn TurnIo, s: Streaming) -> Result<()> {
        if s.text.is_empty() {
            return Ok(());
        }
        let step = if s.reasoning {
            Step::Reasoning { text: s.text }
        } else {
            Step::Text { text: s.text }
        };
        self.emit(io, step).await
    }

    async fn emit(&mut self, io: &mut dyn TurnIo, step: Step) -> Result<()> {
        if let Step::Text { text } = &step {
            io.say(text);
            self.last_text = Some(text.clone());
        }
        io.emit(Event::Step { step }).await?;
        Ok(())
    }
}

/// The durable step of a finished `TaskMessageContent`; `None` for an empty one.
fn step_of(content: &Value) -> std::result::Result<Option<Step>, String> {
    let text_of = |v: Option<&Value>| -> String {
        match v {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n"),
            Some(Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        }
    };
    let str_of = |k: &str| content.get(k).and_then(Value::as_str).unwrap_or_default();
    let step = match content.get("type").and_then(Value::as_str) {
        Some("text") | None => {
            let text = text_of(content.get("content"));
            if text.is_empty() {
                return Ok(None);
            }
            Step::Text { text }
        }
        Some("reasoning") => {
            let mut text = text_of(content.get("summary"));
            let body = text_of(content.get("content"));
            if !body.is_empty() {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&body);
            }
            if text.is_empty() {
                return Ok(None);
            }
            Step::Reasoning { text }
        }
        Some("data") => Step::Text {
            text: content
                .get("data")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string(),
        },
        Some("tool_request") => Step::ToolCallStart {
            tool_name: str_of("name").to_owned(),
            tool_call_id: str_of("tool_call_id").to_owned(),
            input: content.get("arguments").cloned(),
        },
        Some("tool_response") => Step::ToolCall {
            tool_name: str_of("name").to_owned(),
            tool_call_id: str_of("tool_call_id").to_owned(),
            input: None,
            is_error: false,
            output: Some(vec![ToolOutputPart::Text {
                text: text_of(content.get("content")),
            }]),
        },
        Some(other) => {
            return Err(format!(
                "the agent sent a message of unknown type {other:?}"
            ));
        }
    };
    Ok(Some(step))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_permitted_by_name_or_by_name_and_port() {
        let policy = Policy {
            acp_hosts: vec!["127.0.0.1".into(), "agents.internal:8443".into()],
            ..Default::default()
        };
        assert!(host_permitted("http://127.0.0.1:9000", &policy));
        assert!(host_permitted("http://127.0.0.1", &policy));
        assert!(host_permitted("https://AGENTS.internal:8443/x", &policy));
        assert!(!host_permitted("https://agents.internal", &policy));
        assert!(!host_permitted("http://localhost:9000", &policy));
        assert!(!host_permitted(
            "http://127.0.0.1.evil.example:9000",
            &policy
        ));
        assert!(!host_permitted("not a url", &policy));
    }

    #[test]
    fn configurations_are_checked() {
        let cfg = |url: &str| AcpConfig {
            url: url.into(),
            acp_type: AcpType::Sync,
            idle_timeout_ms: 1000,
        };
        assert!(cfg("http://127.0.0.1:8000").check().is_ok());
        assert!(cfg("ftp://127.0.0.1").check().is_err());
        assert!(cfg("http://user:pw@127.0.0.1").check().is_err());
        assert!(cfg("http://127.0.0.1/?a=1").check().is_err());
        assert!(cfg("127.0.0.1:8000").check().is_err());
    }

    #[test]
    fn contents_become_steps() {
        let step = |v: Value| step_of(&v).unwrap();
        assert!(matches!(
            step(json!({"type": "text", "author": "agent", "content": "hi"})),
            Some(Step::Text { text }) if text == "hi"
        ));
        assert!(step(json!({"type": "text", "author": "agent", "content": ""})).is_none());
        assert!(matches!(
            step(json!({"type": "reasoning", "author": "agent", "summary": ["a"], "content": ["b"]})),
            Some(Step::Reasoning { text }) if text == "a\nb"
        ));
        assert!(matches!(
            step(json!({"type": "tool_request", "author": "agent", "tool_call_id": "c", "name": "n", "arguments": {}})),
            Some(Step::ToolCallStart { tool_name, .. }) if tool_name == "n"
        ));
        assert!(step_of(&json!({"type": "video"})).is_err());
    }
}
