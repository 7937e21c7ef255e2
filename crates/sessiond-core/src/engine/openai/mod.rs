//! The `openai` engine: any OpenAI-compatible `/chat/completions` endpoint (OpenAI, OpenRouter,
//! Ollama, llama.cpp server, vLLM) driven as a tool-using agent loop.
//!
//! A turn is a loop of streamed model calls. Each call sees the system prompt, the conversation of
//! earlier turns (rebuilt from their terminals, see [`TurnIo::conversation`]) and this turn's
//! messages; steer messages that arrived meanwhile are appended before every call. Text and
//! reasoning stream as volatile deltas and are stored once complete; tool calls run through the
//! [`Toolbox`] and their results go back to the model until it answers without calling a tool.
//! `ask_user` and `sleep_until` end the turn (`ask`, `sleep`) and the answer or the wake resumes it
//! as the result of that very tool call.
//!
//! Secrets never live in the configuration: the API key is read from an environment variable or
//! a file at every call (so a rotated key file is picked up), and is never logged or shown.

mod conversation;
pub mod stream;

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};

use self::stream::{CallError, RawUsage, Reply, Request};
use super::tools::{Outcome, Toolbox, ToolsConfig, TurnTools};
use super::{BoxFuture, Engine, InputKind, TurnEnd, TurnInput};
use crate::engine::TurnIo;
use crate::error::{Error, Result};
use crate::timeline::{
    ContextWindowUsage, Event, Level, ModelTransport, ModelUsage, RetryNotice, Step,
    SystemMetadata, Tier, ToolOutputPart, Usage, UsageCost,
};

/// Attachments up to this size are put into the prompt; larger ones are named by path.
const INLINE_ATTACHMENT_BYTES: u64 = 32 * 1024;

/// The model used when neither the configuration nor `OPENAI_MODEL` names one.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";
/// The endpoint used when neither the configuration nor `OPENAI_BASE_URL` names one.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Prices in US dollars per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
    pub cache_write: f64,
}

/// The `tool_choice` sent with the tools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoice {
    /// The model decides whether to call a tool.
    #[default]
    Auto,
    /// Every model call must call a tool (the turn ends only at `maxSteps` or a pausing tool).
    Required,
    /// The tools are described but not called.
    None,
    /// No `tool_choice` is sent: the server decides (some treat a missing one as `none`).
    Omit,
}

impl ToolChoice {
    fn wire(self) -> Option<&'static str> {
        match self {
            ToolChoice::Auto => Some("auto"),
            ToolChoice::Required => Some("required"),
            ToolChoice::None => Some("none"),
            ToolChoice::Omit => None,
        }
    }
}

/// The model each tier runs on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TierModels {
    pub frontier: Option<String>,
    pub balanced: Option<String>,
    pub economy: Option<String>,
}

impl TierModels {
    fn get(&self, tier: Tier) -> Option<&str> {
        match tier {
            Tier::Frontier => self.frontier.as_deref(),
            Tier::Balanced => self.balanced.as_deref(),
            Tier::Economy => self.economy.as_deref(),
        }
    }

    fn tiers(&self) -> Vec<Tier> {
        [Tier::Frontier, Tier::Balanced, Tier::Economy]
            .into_iter()
            .filter(|t| self.get(*t).is_some())
            .collect()
    }
}

/// `{"kind": "openai", ...}`: every field is optional.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct OpenAiConfig {
    /// The endpoint's base URL, up to and including `/v1` (default: `OPENAI_BASE_URL`, else
    /// OpenAI's).
    pub base_url: Option<String>,
    /// The environment variable holding the API key (default `OPENAI_API_KEY`). Endpoints that
    /// need no key (a local Ollama) work without it.
    pub api_key_env: Option<String>,
    /// A file holding the API key (takes precedence over `apiKeyEnv`).
    pub api_key_file: Option<PathBuf>,
    /// The model for sessions without a tier, and for tiers `models` does not name (default:
    /// `OPENAI_MODEL`, else [`DEFAULT_MODEL`]).
    pub model: Option<String>,
    /// Tier → model. When given, only these tiers are honoured; others are clamped to the
    /// nearest one (`tier_clamped`).
    pub models: Option<TierModels>,
    /// Model name → price per million tokens, for the cost in `usage` events.
    pub prices: BTreeMap<String, Price>,
    /// Replaces the built-in system prompt.
    pub system_prompt: Option<String>,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f64>,
    /// `minimal`, `low`, `medium` or `high`, sent as `reasoning_effort` to reasoning models.
    pub reasoning_effort: Option<String>,
    /// The model's context window in tokens, reported in `usage` events.
    pub context_window: Option<u64>,
    /// Most model calls in one turn.
    pub max_steps: u32,
    /// Longest a whole turn may run.
    pub turn_timeout_ms: u64,
    /// Longest wait for the first byte of a reply and between two streamed chunks.
    pub idle_timeout_ms: u64,
    /// Retries of a call after 429, 5xx, timeouts and dropped streams.
    pub max_retries: u32,
    /// First retry delay; it doubles with every attempt (a `Retry-After` header wins when longer).
    pub retry_base_ms: u64,
    /// About how much earlier conversation (JSON characters) is sent with each call.
    pub history_chars: usize,
    /// Ask for token usage in the stream (`stream_options.include_usage`); turn off for servers
    /// that refuse the option.
    pub stream_usage: bool,
    /// Generate the automatic title with the model after the first turn.
    pub titles: bool,
    /// The `tool_choice` sent with the tools (`auto`, `required`, `none`, or `omit` to send none).
    pub tool_choice: ToolChoice,
    pub tools: ToolsConfig,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: None,
            api_key_env: None,
            api_key_file: None,
            model: None,
            models: None,
            prices: BTreeMap::new(),
            system_prompt: None,
            max_tokens: None,
            temperature: None,
            reasoning_effort: None,
            context_window: None,
            max_steps: 50,
            turn_timeout_ms: 30 * 60 * 1000,
            idle_timeout_ms: 120_000,
            max_retries: 4,
            retry_base_ms: 1_000,
            history_chars: 400_000,
            stream_usage: true,
            titles: true,
            tool_choice: ToolChoice::Auto,
            tools: ToolsConfig::default(),
        }
    }
}

impl OpenAiConfig {
    /// The configuration the embedded default uses when `OPENAI_BASE_URL` or `OPENAI_API_KEY`
    /// is set.
    pub fn from_env() -> Option<OpenAiConfig> {
        let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.trim().is_empty());
        (set("OPENAI_BASE_URL") || set("OPENAI_API_KEY")).then(OpenAiConfig::default)
    }

    pub fn check(&self) -> Result<()> {
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(Error::invalid("engine/baseUrl: must be an http(s) URL"));
        }
        if let Some(e) = &self.reasoning_effort
            && !["minimal", "low", "medium", "high"].contains(&e.as_str())
        {
            return Err(Error::invalid(
                "engine/reasoningEffort: one of minimal, low, medium, high",
            ));
        }
        if self.max_steps == 0 {
            return Err(Error::invalid("engine/maxSteps: must be at least 1"));
        }
        self.tools.check()
    }
}

impl OpenAiConfig {
    /// What the operator's policy lets an agent's configuration do: talk to listed endpoints only,
    /// and send them only listed secrets (an agent could otherwise point the server's key at a
    /// host of its own, or make the server read any file as a "key").
    pub fn permitted(&self, policy: &crate::config::Policy) -> Result<()> {
        let refuse = |field: &str, what: &str, key: &str| {
            Err(Error::invalid(format!(
                "engine/{field}: this server does not let agents use {what} (policy.{key} in its config file)"
            )))
        };
        let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
        if let Some(url) = &self.base_url
            && !policy.model_endpoints.iter().any(|e| same(e, url))
        {
            return refuse("baseUrl", "this endpoint", "model_endpoints");
        }
        if let Some(var) = &self.api_key_env
            && var != "OPENAI_API_KEY"
            && !policy.api_key_envs.contains(var)
        {
            return refuse("apiKeyEnv", "this variable", "api_key_envs");
        }
        if let Some(file) = &self.api_key_file
            && !policy.api_key_files.contains(file)
        {
            return refuse("apiKeyFile", "this file", "api_key_files");
        }
        if self.tools.run_command.enabled && !policy.run_command {
            return refuse("tools/runCommand", "commands", "run_command");
        }
        Ok(())
    }
}

pub struct OpenAiEngine {
    cfg: OpenAiConfig,
    url: String,
    /// `url` as logs and the start-up line show it (without any user or password in it).
    endpoint: String,
    default_model: String,
    provider: Option<&'static str>,
    client: reqwest::Client,
    toolbox: Toolbox,
}

impl OpenAiEngine {
    pub fn new(cfg: OpenAiConfig) -> Result<OpenAiEngine> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let base = cfg
            .base_url
            .clone()
            .or_else(|| env("OPENAI_BASE_URL"))
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        let url = format!("{}/chat/completions", base.trim_end_matches('/'));
        let endpoint = shown_url(&url);
        let default_model = cfg
            .model
            .clone()
            .or_else(|| env("OPENAI_MODEL"))
            .unwrap_or_else(|| DEFAULT_MODEL.to_owned());
        let client = crate::tls::client_builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("sessiond/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Internal(format!("cannot build the HTTP client: {e}")))?;
        // The seed's ModelTransport names a fixed set of providers; usage is only attributed to
        // one when the endpoint is recognisably it.
        let provider = base.contains("openrouter.ai").then_some("openrouter");
        Ok(OpenAiEngine {
            toolbox: Toolbox::new(cfg.tools.clone()),
            cfg,
            url,
            endpoint,
            default_model,
            provider,
            client,
        })
    }

    fn api_key(&self) -> Result<Option<String>> {
        if let Some(path) = &self.cfg.api_key_file {
            let key = std::fs::read_to_string(path).map_err(|e| {
                Error::Internal(format!(
                    "cannot read the API key file {}: {}",
                    path.display(),
                    e.kind()
                ))
            })?;
            return Ok(Some(key.trim().to_owned()).filter(|k| !k.is_empty()));
        }
        let var = self.cfg.api_key_env.as_deref().unwrap_or("OPENAI_API_KEY");
        Ok(std::env::var(var)
            .ok()
            .map(|k| k.trim().to_owned())
            .filter(|k| !k.is_empty()))
    }

    fn model_for(&self, tier: Option<Tier>) -> String {
        tier.and_then(|t| self.cfg.models.as_ref()?.get(t).map(str::to_owned))
            .unwrap_or_else(|| self.default_model.clone())
    }

    fn system_prompt(&self, io: &dyn TurnIo) -> String {
        if let Some(p) = &self.cfg.system_prompt {
            return p.clone();
        }
        let cwd = io.cwd().map_or_else(|| "/".to_owned(), |c| format!("/{c}"));
        format!(
            "You are an agent working in a sessiond session. Your working directory is {cwd} in the \
             workspace drive; file tools take paths relative to it and cannot leave it. Work step by \
             step with the tools you have, keep the todo list current on longer tasks, ask the user \
             (ask_user) only when you cannot proceed without a decision, and finish with a short \
             answer. The current time is {}.",
            crate::clock::rfc3339(crate::clock::now_ms())
        )
    }

    fn usage_of(&self, model: &str, raw: RawUsage) -> Usage {
        let input = raw.prompt.saturating_sub(raw.cached) as f64;
        let cached = raw.cached as f64;
        let output = raw.completion as f64;
        let write = raw.cache_write as f64;
        let price = self.cfg.prices.get(model).cloned().unwrap_or_default();
        let per = |tokens: f64, usd_per_million: f64| tokens * usd_per_million / 1_000_000.0;
        let cost = UsageCost {
            input: per(input, price.input),
            output: per(output, price.output),
            cache_read: per(cached, price.cache_read),
            cache_write: per(write, price.cache_write),
            total: 0.0,
        };
        let total = cost.input + cost.output + cost.cache_read + cost.cache_write;
        Usage {
            input,
            output,
            cache_read: cached,
            cache_write: write,
            total_tokens: (raw.prompt + raw.completion) as f64,
            cost: UsageCost { total, ..cost },
        }
    }

    /// Emits `router_switch` when this turn runs on another model than the session's last turn.
    async fn note_model(&self, io: &mut dyn TurnIo, tier: Option<Tier>, model: &str) -> Result<()> {
        let memo = io.memo().await?;
        let last = memo
            .as_ref()
            .and_then(|m| m.get("model"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let from = last.clone().unwrap_or_else(|| self.default_model.clone());
        if from != model {
            let tier_name = tier.map_or("default", Tier::as_str);
            io.emit(Event::RouterSwitch {
                tier: tier_name.to_owned(),
                route: "tier".to_owned(),
                from_model: from,
                to_model: model.to_owned(),
                thinking_level: self
                    .cfg
                    .reasoning_effort
                    .clone()
                    .unwrap_or_else(|| "medium".to_owned()),
                trigger: "turn_start".to_owned(),
                rationale: format!("the {tier_name} tier runs on {model}"),
                vision_fallback: false,
            })
            .await?;
        }
        if last.as_deref() != Some(model) {
            io.set_memo(json!({ "model": model })).await?;
        }
        Ok(())
    }

    /// Keeps the name of the model that answered in the memo, beside the one asked for, when it
    /// changed (an endpoint names the same model on every call: one write per session, mostly).
    async fn note_answered(&self, io: &mut dyn TurnIo, asked: &str, answered: &str) -> Result<()> {
        let memo = io.memo().await?;
        if memo
            .as_ref()
            .and_then(|m| m.get("answered"))
            .and_then(Value::as_str)
            != Some(answered)
        {
            io.set_memo(json!({ "model": asked, "answered": answered }))
                .await?;
        }
        Ok(())
    }

    /// Calls the model, retrying what can be retried. A call whose attempt failed after deltas
    /// went out live says so first (`partial_text_void`), so live clients drop that text. An
    /// endpoint that cannot stream with tools is asked again without streaming, and remembered.
    /// Attempts that failed after the model produced part of a reply cost tokens all the same:
    /// their usage is recorded (estimated).
    async fn call_with_retries(
        &self,
        io: &mut dyn TurnIo,
        body: &Value,
        model: &str,
        system_tokens: f64,
    ) -> Result<Called> {
        let key = self.api_key()?;
        let mut body = Cow::Borrowed(body);
        if offers_tools(&body) && refuses_streamed_tools(&self.url) {
            body = Cow::Owned(unstreamed(&body));
        }
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut cancel = io.cancel_watch();
            let request_id = io.request_id().to_owned();
            let result = stream::call(
                Request {
                    client: &self.client,
                    url: &self.url,
                    api_key: key.as_deref(),
                    body: &body,
                    idle_timeout: Duration::from_millis(self.cfg.idle_timeout_ms.max(1)),
                    request_id: &request_id,
                },
                io,
                &mut cancel,
            )
            .await;
            let (message, retry_after) = match result {
                Ok(reply) => return Ok(Called::Reply(reply)),
                Err(CallError::Cancelled { partial }) => {
                    self.record_partial_usage(io, model, &body, &partial, system_tokens)
                        .await?;
                    return Ok(Called::Interrupted {
                        partial: partial.content,
                    });
                }
                Err(CallError::StreamingToolsRefused(message)) if body["stream"] == json!(true) => {
                    tracing::warn!(
                        session = %io.session_id(),
                        endpoint = %self.endpoint,
                        error = %message,
                        "the model endpoint cannot stream replies with tools; calling it without streaming"
                    );
                    remember_refuses_streamed_tools(&self.url);
                    io.emit(Event::System {
                        level: Level::Info,
                        message: format!(
                            "{message}; calls with tools to this endpoint are made without streaming"
                        ),
                        metadata: None,
                    })
                    .await?;
                    body = Cow::Owned(unstreamed(&body));
                    attempt -= 1;
                    continue;
                }
                Err(CallError::Fatal(message) | CallError::StreamingToolsRefused(message)) => {
                    tracing::warn!(
                        session = %io.session_id(),
                        endpoint = %self.endpoint,
                        error = %message,
                        "model call failed"
                    );
                    return Ok(Called::Failed(message));
                }
                Err(CallError::Retryable {
                    message,
                    retry_after,
                    streamed,
                    partial,
                }) => {
                    if streamed {
                        io.emit(Event::System {
                            level: Level::Info,
                            message: "The reply streamed so far is void: that attempt failed \
                                      and its text is not part of the answer."
                                .into(),
                            metadata: SystemMetadata::code(SystemMetadata::PARTIAL_TEXT_VOID),
                        })
                        .await?;
                    }
                    self.record_partial_usage(io, model, &body, &partial, system_tokens)
                        .await?;
                    (message, retry_after)
                }
            };
            if attempt > self.cfg.max_retries {
                tracing::warn!(
                    session = %io.session_id(),
                    endpoint = %self.endpoint,
                    attempts = attempt,
                    error = %message,
                    "model call failed; no retries left"
                );
                return Ok(Called::Failed(format!(
                    "{message} (gave up after {attempt} attempts)"
                )));
            }
            let backoff = self
                .cfg
                .retry_base_ms
                .saturating_mul(1u64 << (attempt - 1).min(16))
                .min(60_000);
            let delay = retry_after
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0)
                .max(backoff);
            tracing::warn!(
                session = %io.session_id(),
                endpoint = %self.endpoint,
                attempt,
                retry_in_ms = delay,
                error = %message,
                "model call failed; retrying"
            );
            let notice = RetryNotice {
                reason: message,
                delay_ms: delay,
                attempt: attempt + 1,
                attempts: self.cfg.max_retries + 1,
            };
            io.emit(Event::System {
                level: Level::Warn,
                message: notice.message(),
                metadata: None,
            })
            .await?;
            if !io.pause(delay).await {
                return Ok(Called::Interrupted {
                    partial: String::new(),
                });
            }
        }
    }

    fn request_body(&self, model: &str, messages: Vec<Value>) -> Value {
        let mut body = json!({
            "model": model,
            "messages": messages,
            "stream": true,
        });
        if self.cfg.stream_usage {
            body["stream_options"] = json!({ "include_usage": true });
        }
        let tools = self.toolbox.definitions();
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
            if let Some(choice) = self.cfg.tool_choice.wire() {
                body["tool_choice"] = json!(choice);
            }
        }
        if let Some(n) = self.cfg.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if let Some(t) = self.cfg.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(effort) = &self.cfg.reasoning_effort {
            body["reasoning_effort"] = json!(effort);
        }
        body
    }

    /// Rewrites the turn's opening message when it resumes a tool call (`ask_user` answered,
    /// `sleep_until` woken) so that the model sees it as that call's result.
    async fn resume(&self, io: &mut dyn TurnIo, input: &TurnInput) -> Result<()> {
        let resumed = input.resume.as_ref().and_then(|r| {
            Some((
                r.get("toolCallId")?.as_str()?.to_owned(),
                r.get("tool")?.as_str()?.to_owned(),
                r.get("input").cloned(),
            ))
        });
        let (result, id, tool, tool_input) = match (input.kind, resumed) {
            (InputKind::Answer, Some((id, tool, tool_input))) => {
                (input.text.clone(), id, tool, tool_input)
            }
            (InputKind::Wake, Some((id, tool, tool_input))) => (
                format!(
                    "It is now {}; the sleep is over.",
                    crate::clock::rfc3339(crate::clock::now_ms())
                ),
                id,
                tool,
                tool_input,
            ),
            (InputKind::Wake, None) => {
                *io.messages_mut() = vec![json!({
                    "role": "user",
                    "content": "(a scheduled wake-up: continue the task)"
                })];
                return Ok(());
            }
            _ => return Ok(()),
        };
        io.emit(Event::Step {
            step: Step::ToolCall {
                tool_name: tool,
                tool_call_id: id.clone(),
                input: tool_input,
                is_error: false,
                output: Some(vec![ToolOutputPart::Text {
                    text: result.clone(),
                }]),
            },
        })
        .await?;
        *io.messages_mut() = vec![json!({"role": "tool", "tool_call_id": id, "content": result})];
        Ok(())
    }

    /// Puts the input's media in front of the model: small text attachments inline and the
    /// others by path (in the stored message), images as `image_url` parts (returned, sent with
    /// every call of this turn only: the timeline keeps them once, not in each conversation).
    async fn attach_media(&self, io: &mut dyn TurnIo, input: &TurnInput) -> Result<Vec<Value>> {
        use base64::Engine as _;
        let mut notes = Vec::new();
        for a in &input.attachments {
            let drive = io.drive().clone();
            let path = a.path.clone();
            let inline = if a.bytes <= INLINE_ATTACHMENT_BYTES {
                tokio::task::spawn_blocking(move || {
                    super::tools::sandbox(&drive, None)
                        .ok()?
                        .read_file(&path, None, None)
                        .ok()
                })
                .await
                .ok()
                .flatten()
            } else {
                None
            };
            notes.push(match inline {
                Some(text) => format!("Attached file {} (/{}):\n{text}", a.name, a.path),
                None => format!(
                    "Attached file {} at /{} in the drive ({} bytes).",
                    a.name, a.path, a.bytes
                ),
            });
        }
        let mut parts = Vec::new();
        for image in &input.images {
            if let Some((mime, bytes)) = io.image(&image.storage_id).await? {
                let data = base64::engine::general_purpose::STANDARD.encode(bytes);
                parts.push(json!({
                    "type": "image_url",
                    "image_url": {"url": format!("data:{mime};base64,{data}")}
                }));
            }
        }
        if !parts.is_empty() {
            notes.push(format!("({} image(s) attached.)", parts.len()));
        }
        if let Some(first) = io
            .messages_mut()
            .first_mut()
            .filter(|m| m["role"] == "user")
            && !notes.is_empty()
        {
            let text = first["content"].as_str().unwrap_or("").to_owned();
            first["content"] = json!(format!("{text}\n\n{}", notes.join("\n\n")));
        }
        Ok(parts)
    }

    async fn run_turn(&self, io: &mut dyn TurnIo, input: TurnInput) -> Result<TurnEnd> {
        let model = self.model_for(input.tier);
        self.note_model(io, input.tier, &model).await?;
        self.resume(io, &input).await?;
        let image_parts = self.attach_media(io, &input).await?;
        let history = io.conversation(self.cfg.history_chars).await?;
        let system = self.system_prompt(io);
        let system_tokens = super::estimated_tokens(&system) as f64;
        let mut tools = TurnTools::default();
        for _ in 0..self.cfg.max_steps {
            for note in tools.background.drain(io).await? {
                io.messages_mut()
                    .push(json!({"role": "user", "content": note}));
            }
            io.take_steers().await?;
            if io.is_cancelled() {
                return Ok(TurnEnd::Interrupted);
            }
            let mut turn = io.messages_mut().clone();
            if let Some(first) = turn.first_mut().filter(|m| m["role"] == "user")
                && !image_parts.is_empty()
            {
                let text = first["content"].as_str().unwrap_or("").to_owned();
                let mut parts = vec![json!({"type": "text", "text": text})];
                parts.extend(image_parts.iter().cloned());
                first["content"] = Value::Array(parts);
            }
            let mut messages = vec![json!({"role": "system", "content": system})];
            messages.extend(conversation::repair(history.iter().cloned().chain(turn)));
            let body = self.request_body(&model, messages);
            let reply = match self
                .call_with_retries(io, &body, &model, system_tokens)
                .await?
            {
                Called::Reply(reply) => reply,
                Called::Failed(message) => return Ok(TurnEnd::Failed { error: message }),
                Called::Interrupted { partial } => {
                    // What the user watched stream in stays in the timeline and the conversation.
                    if !partial.is_empty() {
                        io.emit(Event::Step {
                            step: Step::Text {
                                text: partial.clone(),
                            },
                        })
                        .await?;
                        io.messages_mut()
                            .push(json!({"role": "assistant", "content": partial}));
                    }
                    return Ok(TurnEnd::Interrupted);
                }
            };
            // The reply's steps go with the write of its usage, which follows at once.
            if !reply.reasoning.is_empty() {
                io.hold(Event::Step {
                    step: Step::Reasoning {
                        text: reply.reasoning.clone(),
                    },
                })
                .await?;
            }
            if !reply.content.is_empty() {
                io.hold(Event::Step {
                    step: Step::Text {
                        text: reply.content.clone(),
                    },
                })
                .await?;
                io.set_reply(&reply.content);
            }
            io.messages_mut().push(assistant_message(&reply));
            // After the reply is stored: a call that spends the session's budget ends the turn
            // here (`budget_hit`) without losing what it answered.
            match reply.usage {
                Some(raw) => {
                    self.record_usage(
                        io,
                        &model,
                        reply.model.as_deref(),
                        raw,
                        system_tokens,
                        false,
                    )
                    .await?
                }
                None => {
                    let raw = estimate_usage(&body, &reply);
                    self.record_usage(io, &model, reply.model.as_deref(), raw, system_tokens, true)
                        .await?;
                }
            }
            if reply.tool_calls.is_empty() {
                if reply.finish_reason.as_deref() == Some("length") && reply.content.is_empty() {
                    return Ok(TurnEnd::Failed {
                        error: "the model stopped at its token limit without an answer".into(),
                    });
                }
                // Steers that came in while the model was answering still get a reply, and the
                // model hears how its background commands ended before the turn does.
                if io.steer_waiting() {
                    continue;
                }
                if !tools.background.is_empty() {
                    match tools.background.wait_all(io).await? {
                        Some(notes) => {
                            for note in notes {
                                io.messages_mut()
                                    .push(json!({"role": "user", "content": note}));
                            }
                            continue;
                        }
                        None => return Ok(TurnEnd::Interrupted),
                    }
                }
                return Ok(TurnEnd::Complete {
                    result: Some(reply.content).filter(|c| !c.is_empty()),
                });
            }
            if let Some(end) = self.run_tools(io, &mut tools, &reply.tool_calls).await? {
                return Ok(end);
            }
        }
        Ok(TurnEnd::Failed {
            error: format!(
                "the turn stopped after {} model calls (maxSteps)",
                self.cfg.max_steps
            ),
        })
    }

    /// Writes the usage of an attempt that ended early, when the model had produced something by
    /// then: the tokens were spent all the same (reported, else estimated).
    async fn record_partial_usage(
        &self,
        io: &mut dyn TurnIo,
        model: &str,
        body: &Value,
        partial: &Reply,
        system_tokens: f64,
    ) -> Result<()> {
        if partial.is_empty() {
            return Ok(());
        }
        match partial.usage {
            Some(raw) => {
                self.record_usage(
                    io,
                    model,
                    partial.model.as_deref(),
                    raw,
                    system_tokens,
                    false,
                )
                .await
            }
            None => {
                let raw = estimate_usage(body, partial);
                self.record_usage(
                    io,
                    model,
                    partial.model.as_deref(),
                    raw,
                    system_tokens,
                    true,
                )
                .await
            }
        }
    }

    /// Writes one call's usage, measured or (`estimated`) made up from the text because the
    /// endpoint reported none: priced with the price table (by the name asked for, the one the
    /// table is written with), attributed to a provider where the seed has a name for it, against
    /// the configured context window. The model that answered is the one the endpoint `reported`
    /// (else the one asked for): the usage names it, and the memo keeps it first, for the
    /// Session record and for usage events that cannot name it (see [`super::answered_model`]).
    async fn record_usage(
        &self,
        io: &mut dyn TurnIo,
        model: &str,
        reported: Option<&str>,
        raw: RawUsage,
        system_tokens: f64,
        estimated: bool,
    ) -> Result<()> {
        let answered = reported.unwrap_or(model);
        self.note_answered(io, model, answered).await?;
        let usage = self.usage_of(model, raw);
        let by_model = self
            .provider
            .map(|p| {
                vec![ModelUsage {
                    model: answered.to_owned(),
                    transport: ModelTransport {
                        provider: p.to_owned(),
                        billing: "metered".to_owned(),
                    },
                    usage: usage.clone(),
                }]
            })
            .unwrap_or_default();
        let window = ContextWindowUsage {
            system_prompt: system_tokens,
            messages: (raw.prompt as f64 - system_tokens).max(0.0),
            local_memory: 0.0,
            global_memory: 0.0,
        };
        let context = self.cfg.context_window.unwrap_or(0) as f64;
        io.record_usage(usage, by_model, context, window, estimated)
            .await
    }

    /// Runs the calls of one reply in order; a pausing tool (`ask_user`, `sleep_until`) runs
    /// last and ends the turn.
    async fn run_tools(
        &self,
        io: &mut dyn TurnIo,
        tools: &mut TurnTools,
        calls: &[stream::ToolCall],
    ) -> Result<Option<TurnEnd>> {
        let (pausing, plain): (Vec<_>, Vec<_>) =
            calls.iter().partition(|c| Toolbox::pauses(&c.name));
        for call in plain.into_iter().chain(pausing) {
            let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
            let shown_input = if args.is_object() {
                Some(args.clone())
            } else {
                None
            };
            io.emit(Event::Step {
                step: Step::ToolCallStart {
                    tool_name: call.name.clone(),
                    tool_call_id: call.id.clone(),
                    input: shown_input.clone(),
                },
            })
            .await?;
            let outcome = if args.is_object() {
                self.toolbox.call(io, tools, &call.name, &args).await?
            } else {
                Outcome::error(format!(
                    "the arguments of {} are not a JSON object",
                    call.name
                ))
            };
            let resume =
                |tool: &str| json!({"toolCallId": call.id, "tool": tool, "input": shown_input});
            match outcome {
                Outcome::Done { text, is_error } => {
                    io.emit(Event::Step {
                        step: Step::ToolCall {
                            tool_name: call.name.clone(),
                            tool_call_id: call.id.clone(),
                            input: shown_input.clone(),
                            is_error,
                            output: Some(vec![ToolOutputPart::Text { text: text.clone() }]),
                        },
                    })
                    .await?;
                    io.messages_mut()
                        .push(json!({"role": "tool", "tool_call_id": call.id, "content": text}));
                }
                Outcome::Ask(questions) => {
                    return Ok(Some(TurnEnd::Ask {
                        questions,
                        resume: resume(&call.name),
                    }));
                }
                Outcome::Sleep { wake_at } => {
                    return Ok(Some(TurnEnd::Sleep {
                        wake_at,
                        resume: resume(&call.name),
                    }));
                }
            }
            if io.is_cancelled() {
                return Ok(Some(TurnEnd::Interrupted));
            }
        }
        Ok(None)
    }

    async fn make_title(&self, prompt: &str, reply: &str) -> Result<String> {
        let model = self.model_for(Some(Tier::Economy));
        let excerpt = |s: &str| s.chars().take(2000).collect::<String>();
        let mut body = json!({
            "model": model,
            "stream": false,
            "messages": [
                {"role": "system", "content": "Write a title of at most six words for this conversation. Reply with the title only: no quotes, no punctuation at the end."},
                {"role": "user", "content": format!("User: {}\n\nAssistant: {}", excerpt(prompt), excerpt(reply))},
            ],
        });
        if let Some(n) = self.cfg.max_tokens {
            body["max_tokens"] = json!(n);
        }
        let mut req = self.client.post(&self.url).json(&body);
        if let Some(key) = self.api_key()? {
            req = req.bearer_auth(key);
        }
        // These reach the log (with the session), so they name the endpoint.
        let failed = |what: String| Error::Internal(format!("title: {} {what}", self.endpoint));
        let response = tokio::time::timeout(
            Duration::from_millis(self.cfg.idle_timeout_ms.max(1)),
            req.send(),
        )
        .await
        .map_err(|_| failed("timed out".into()))?
        .map_err(|_| failed("is unreachable".into()))?;
        if !response.status().is_success() {
            return Err(failed(format!("answered {}", response.status())));
        }
        let value: Value = response
            .json()
            .await
            .map_err(|_| failed("answered with something that is not JSON".into()))?;
        // The runner cleans the reply up (`engine::title::clean`).
        Ok(value
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned())
    }
}

/// The reply as the assistant message of the conversation.
fn assistant_message(reply: &Reply) -> Value {
    let mut message = json!({"role": "assistant", "content": reply.content});
    if !reply.tool_calls.is_empty() {
        message["tool_calls"] = reply
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                })
            })
            .collect();
    }
    message
}

/// How a model call (with its retries) ended.
enum Called {
    Reply(Reply),
    Interrupted { partial: String },
    Failed(String),
}

fn offers_tools(body: &Value) -> bool {
    body["tools"].as_array().is_some_and(|t| !t.is_empty())
}

/// The same request, answered in one piece.
fn unstreamed(body: &Value) -> Value {
    let mut body = body.clone();
    body["stream"] = json!(false);
    if let Some(b) = body.as_object_mut() {
        b.remove("stream_options");
    }
    body
}

/// Endpoints (chat-completions URLs) seen refusing to stream a reply with tools; every engine
/// that calls one of them asks without streaming when it offers tools.
fn streamed_tools_refusals() -> &'static Mutex<HashSet<String>> {
    static REFUSALS: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    REFUSALS.get_or_init(Default::default)
}

fn refuses_streamed_tools(url: &str) -> bool {
    streamed_tools_refusals()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(url)
}

fn remember_refuses_streamed_tools(url: &str) {
    streamed_tools_refusals()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(url.to_owned());
}

/// Token counts made up from the text of a call whose endpoint reported none: the messages
/// (with the usual few tokens of framing each) and the tool definitions in, the reply out.
fn estimate_usage(body: &Value, reply: &Reply) -> RawUsage {
    let mut prompt = 0;
    for m in body["messages"].as_array().into_iter().flatten() {
        prompt += 4;
        prompt += match &m["content"] {
            Value::String(text) => super::estimated_tokens(text),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .map(super::estimated_tokens)
                .sum(),
            _ => 0,
        };
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            prompt += super::estimated_tokens(&call["function"].to_string());
        }
    }
    if offers_tools(body) {
        prompt += super::estimated_tokens(&body["tools"].to_string());
    }
    let mut completion =
        super::estimated_tokens(&reply.content) + super::estimated_tokens(&reply.reasoning);
    for call in &reply.tool_calls {
        completion +=
            super::estimated_tokens(&call.name) + super::estimated_tokens(&call.arguments);
    }
    RawUsage {
        prompt,
        completion,
        cached: 0,
        cache_write: 0,
    }
}

/// A URL as logs may show it: without the user and password some put in it.
fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

impl Engine for OpenAiEngine {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn describe(&self) -> String {
        format!("model {} at {}", self.default_model, self.endpoint)
    }

    fn records_usage(&self) -> bool {
        true
    }

    fn honoured_tier(&self, requested: Tier) -> Tier {
        match &self.cfg.models {
            Some(m) => super::nearest_tier(requested, &m.tiers()),
            None => requested,
        }
    }

    fn run<'a>(
        &'a self,
        io: &'a mut dyn TurnIo,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<TurnEnd>> {
        Box::pin(async move {
            let limit = Duration::from_millis(self.cfg.turn_timeout_ms.max(1));
            match tokio::time::timeout(limit, self.run_turn(io, input)).await {
                Ok(end) => end,
                Err(_) => Ok(TurnEnd::Failed {
                    error: format!(
                        "the turn did not finish within {} s (turnTimeoutMs)",
                        limit.as_secs()
                    ),
                }),
            }
        })
    }

    fn title<'a>(
        &'a self,
        prompt: &'a str,
        reply: &'a str,
    ) -> Option<BoxFuture<'a, Result<String>>> {
        if !self.cfg.titles {
            return None;
        }
        Some(Box::pin(self.make_title(prompt, reply)))
    }
}

/// Builds the engine for `cfg` (shared by the agent configuration and the server default).
pub fn build(cfg: &OpenAiConfig) -> Result<Arc<dyn super::Engine>> {
    Ok(Arc::new(OpenAiEngine::new(cfg.clone())?))
}
