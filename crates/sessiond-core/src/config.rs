//! Configuration: embedded defaults, overridden by a TOML file, then by environment variables and
//! flags. Every key is documented in `config.example.toml`; unknown keys are refused so a typo never
//! silently falls back to a default.

use std::path::{Path, PathBuf};

use serde::Deserialize;

// The `[store]` section belongs to the store, which reads it.
pub use sessiond_store::{StoreConfig, Synchronous};

/// How long a browser sign-in lasts unless `limits.browser_session_ms` says otherwise: 7 days.
pub const DEFAULT_BROWSER_SESSION_MS: u64 = 7 * 24 * 3_600_000;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP server listens on.
    pub bind: String,
    /// Folder holding the database, the drive and everything else sessiond keeps.
    pub data_dir: PathBuf,
    /// A PostgreSQL database to keep the store in instead of `sessiond.db` in the data dir (which
    /// still holds the drives, uploads and the rest).
    pub database_url: Option<DatabaseUrl>,
    /// `text` for people, `json` for log collectors.
    pub log_format: LogFormat,
    /// The base URL clients reach this server at (upload grants hand it out as `vmBaseUrl`);
    /// defaults to `http://<bound address>`.
    pub public_url: Option<String>,
    pub store: StoreConfig,
    pub runner: RunnerConfig,
    pub limits: Limits,
    pub stream: StreamConfig,
    pub schedules: SchedulesConfig,
    pub webhooks: WebhooksConfig,
    pub retention: RetentionConfig,
    /// The engine of agents that do not choose one (`{kind = "openai", ...}`, same keys as an
    /// agent's `engine` JSON). Unset: `openai` when OPENAI_BASE_URL or OPENAI_API_KEY is set,
    /// else the scripted demo engine. `SESSIOND_ENGINE` overrides it.
    pub engine: Option<serde_json::Value>,
    pub policy: Policy,
    pub metrics: MetricsConfig,
    /// Agents to create (or bring up to date) at start-up.
    pub agents: Vec<AgentConfig>,
}

/// `/metrics` (Prometheus text format) is served on a listener of its own, never on the API's:
/// the figures cover every workspace, so no workspace credential may read them, and a scraper
/// on the operator's network needs no secret.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address of the metrics listener (e.g. `127.0.0.1:9464`); unset: no metrics listener.
    pub bind: Option<String>,
}

/// An agent declared in the config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    pub slug: String,
    pub name: Option<String>,
    pub anchor: Option<String>,
    #[serde(default = "default_workspace")]
    pub workspace: String,
    /// The agent's engine (same keys as its `engine` JSON); unset keeps what it has.
    pub engine: Option<serde_json::Value>,
}

fn default_workspace() -> String {
    "default".into()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerConfig {
    /// Turns that may run at once across all sessions.
    pub workers: usize,
    /// How long a submission waits for the runner to take its input before answering `queued`.
    pub ack_window_ms: u64,
    /// How long an interrupted turn may take to stop on its own before it is cut off.
    pub interrupt_grace_ms: u64,
    /// How long a `/wait` request observes before answering 202 pending.
    pub wait_deadline_ms: u64,
    /// Interval of `heartbeat` events while a turn has background tasks running.
    pub heartbeat_ms: u64,
    /// How long a running turn may go without progress (an event, a streamed delta, a heartbeat)
    /// before the stall guard ends it `failed` (reason `stalled`), whatever its engine.
    pub stall_timeout_ms: u64,
    /// With several processes on one database (PostgreSQL): how long a turn's lease lasts
    /// unless its process renews it. A process that dies mid-turn is noticed this long after its
    /// last renewal, and another process ends its turns.
    pub lease_ms: u64,
    /// How often a process renews the leases of its turns and looks for expired leases and for
    /// work due that no process has taken (PostgreSQL only).
    pub lease_renew_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Largest accepted request body (JSON included images are counted here).
    pub max_body_bytes: usize,
    /// Longest prompt or answer, in characters.
    pub max_prompt_chars: usize,
    /// Largest `limit` for the session list (the seed's maximum is 100).
    pub list_page_max: u32,
    /// Largest `limit` for history pages (the seed's maximum is 500).
    pub history_page_max: u32,
    /// Largest file accepted by an upload PUT.
    pub max_upload_bytes: u64,
    /// How long a minted upload grant accepts new uploads.
    pub upload_grant_ttl_ms: u64,
    /// How long a browser sign-in lasts; the streams opened with it end when it expires.
    pub browser_session_ms: u64,
    /// The first delay a throttled sign-in must wait (then twice as long, and so on).
    pub login_delay_ms: u64,
    /// The longest a JSON request body may take to arrive, and the longest an upload may pause;
    /// then the request is answered 408.
    pub body_timeout_ms: u64,
    /// Largest archive `POST /v1/ws/{slug}/import` accepts (an import holds the archive whole
    /// while it checks every member before writing anything).
    pub max_archive_bytes: usize,
}

/// What agents may do on this machine. Any credential with the `sessions` scope may configure
/// agents, so what they run, which endpoints the server talks to for them and which of its
/// secrets it sends there are the operator's decisions, made here, not an agent's. (The server's
/// default engine is the operator's own configuration and is not checked.)
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Programs the `command` engine may run, exactly as agents name them (`claude`,
    /// `/usr/local/bin/my-agent`). Empty: agents cannot use the command engine.
    pub programs: Vec<String>,
    /// Whether agents may turn on their model's `run_command` tool.
    pub run_command: bool,
    /// Model endpoints (base URLs) an agent's `openai` engine may name as `baseUrl`. Empty:
    /// agents use the default endpoint (`OPENAI_BASE_URL` or OpenAI's).
    pub model_endpoints: Vec<String>,
    /// Environment variables an agent may name as `apiKeyEnv` (besides `OPENAI_API_KEY`, which
    /// only ever goes to the endpoints above or the default one).
    pub api_key_envs: Vec<String>,
    /// Files an agent may name as `apiKeyFile`.
    pub api_key_files: Vec<std::path::PathBuf>,
    /// Hosts an `acp` engine may call: the ACP servers of agents built with the AgentEx SDK,
    /// which register themselves with the URL they listen at. An entry is a host name or IP
    /// address (any port) or `host:port`. Empty: no agent may register an ACP server.
    pub acp_hosts: Vec<String>,
    /// Whether an ACP server on this machine may register without a credential (a request from a
    /// loopback address, into the `default` workspace). Off: registration needs an API key.
    pub acp_register_from_loopback: bool,
    /// Hosts outbound webhooks may call, as `host` (any port) or `host:port`; `*` stands for
    /// every host whose addresses are public. Internal addresses (loopback, private, link-local)
    /// are called only when listed by name or address, never through `*`. Empty: no webhook
    /// subscription can be made.
    pub webhook_hosts: Vec<String>,
    /// Hosts A2A push notifications may be sent to, as `host` (any port) or `host:port`; `*`
    /// stands for every host whose addresses are public. Internal addresses (loopback, private,
    /// link-local) are called only when listed by name or address, never through `*`; the
    /// address checked is the one connected to. Empty: no push-notification config is taken.
    pub a2a_push_hosts: Vec<String>,
}

/// Whether a `[policy]` host list (`acp_hosts`, `webhook_hosts`) names the URL's host (any port)
/// or its `host:port` (IPv6 hosts in brackets). `*` is not looked at here: what it allows is the
/// caller's rule.
pub fn host_listed(entries: &[String], url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    let Some(host) = parsed.host_str().map(str::to_ascii_lowercase) else {
        return false;
    };
    let with_port = match parsed.port_or_known_default() {
        Some(port) => format!("{host}:{port}"),
        None => host.clone(),
    };
    entries.iter().any(|entry| {
        let entry = entry.trim().to_ascii_lowercase();
        entry == host || entry == with_port
    })
}

/// Outbound webhooks (`/v1/ws/{ws}/webhooks`): how deliveries are attempted and retried.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhooksConfig {
    /// How long a message is retried after it was written before it is given up (`failed`).
    pub retry_for_ms: u64,
    /// The first retry's delay; each one after doubles it (with jitter) up to `backoff_max_ms`.
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// A subscription whose deliveries have failed for this long without a success is disabled.
    pub disable_after_ms: u64,
    /// Whole-call limit of one attempt (connect, send, answer).
    pub timeout_ms: u64,
    /// Bytes of a receiver's answer read at most (the rest is dropped).
    pub max_response_bytes: usize,
    /// How often the outbox is looked at for messages written by this or another process.
    pub poll_ms: u64,
    /// Attempts in flight at once.
    pub concurrency: usize,
    /// How long a rotated-out secret still signs deliveries when a rotation names no overlap.
    pub rotation_overlap_ms: u64,
    /// Most subscriptions one workspace may have.
    pub max_per_workspace: u32,
}

impl Default for WebhooksConfig {
    fn default() -> Self {
        WebhooksConfig {
            retry_for_ms: 24 * 3_600_000,
            backoff_initial_ms: 5_000,
            backoff_max_ms: 3_600_000,
            disable_after_ms: 5 * 24 * 3_600_000,
            timeout_ms: 10_000,
            max_response_bytes: 16 * 1024,
            poll_ms: 1_000,
            concurrency: 16,
            rotation_overlap_ms: 24 * 3_600_000,
            max_per_workspace: 100,
        }
    }
}

/// Agent run schedules (`/agentex/agents/{id}/schedules`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulesConfig {
    /// Most schedules one agent may have.
    pub max_per_agent: u32,
    /// Shortest `interval_seconds` a schedule may have. (Cron expressions have minute
    /// granularity, so they tick at most once a minute.)
    pub min_interval_seconds: u32,
}

/// The retention sweeper: how often it applies the workspaces' policies (set per workspace with
/// `PUT /v1/ws/{slug}/retention`) and how much it removes per step.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Time between sweeps.
    pub sweep_interval_ms: u64,
    /// Sessions read and removed per step of a sweep (each removal is a transaction of its own).
    pub batch: u32,
    /// Where the `archive` action writes its archives, one folder per workspace. Unset:
    /// `<data dir>/retention`.
    pub archive_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Interval between `: keep-alive` comments on idle SSE streams.
    pub keepalive_ms: u64,
    /// Open SSE streams allowed per session.
    pub max_subscribers_per_session: usize,
    /// Live frames buffered per session before a slow subscriber is cut off (it resumes by seq).
    pub channel_capacity: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./sessiond-data"),
            database_url: None,
            log_format: LogFormat::Text,
            public_url: None,
            store: StoreConfig::default(),
            runner: RunnerConfig::default(),
            limits: Limits::default(),
            stream: StreamConfig::default(),
            schedules: SchedulesConfig::default(),
            webhooks: WebhooksConfig::default(),
            retention: RetentionConfig::default(),
            engine: None,
            policy: Policy::default(),
            metrics: MetricsConfig::default(),
            agents: Vec::new(),
        }
    }
}

impl Default for RunnerConfig {
    fn default() -> Self {
        RunnerConfig {
            workers: 64,
            ack_window_ms: 1000,
            interrupt_grace_ms: 5000,
            wait_deadline_ms: 30_000,
            heartbeat_ms: 5_000,
            stall_timeout_ms: 600_000,
            lease_ms: 10_000,
            lease_renew_ms: 2_000,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 32 * 1024 * 1024,
            max_prompt_chars: 200_000,
            list_page_max: 100,
            history_page_max: 500,
            max_upload_bytes: 100 * 1024 * 1024,
            upload_grant_ttl_ms: 15 * 60 * 1000,
            browser_session_ms: DEFAULT_BROWSER_SESSION_MS,
            login_delay_ms: 1000,
            body_timeout_ms: 30_000,
            max_archive_bytes: 256 * 1024 * 1024,
        }
    }
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        SchedulesConfig {
            max_per_agent: 100,
            min_interval_seconds: 60,
        }
    }
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            sweep_interval_ms: 60_000,
            batch: 100,
            archive_dir: None,
        }
    }
}

impl RetentionConfig {
    /// Where a workspace's retention archives go.
    pub fn archive_dir(&self, data_dir: &std::path::Path) -> PathBuf {
        self.archive_dir
            .clone()
            .unwrap_or_else(|| data_dir.join("retention"))
    }
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            keepalive_ms: 15_000,
            max_subscribers_per_session: 1024,
            channel_capacity: 1024,
        }
    }
}

impl Config {
    /// Reads a TOML file; every key is optional.
    pub fn from_file(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        // TOML's messages quote the line they stop at, which may hold the database URL: callers
        // show them through `database::hide_url_passwords`.
        let mut cfg: Config = toml::from_str(&text)
            .map_err(|e| format!("invalid config file {}: {e}", path.display()))?;
        // A relative `data_dir` in the file is the file's own neighbour, so a config file pins
        // its data wherever sessiond is started from.
        if cfg.data_dir.is_relative() && names_data_dir(&text) {
            let folder = path.parent().unwrap_or(Path::new("."));
            cfg.data_dir = folder.join(&cfg.data_dir);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    /// Rejects values that cannot work, with a message naming the key.
    pub fn validate(&self) -> Result<(), String> {
        if self.runner.lease_renew_ms == 0 || self.runner.lease_renew_ms * 2 > self.runner.lease_ms
        {
            return Err(
                "runner.lease_renew_ms must be at least 1 and at most half of runner.lease_ms"
                    .into(),
            );
        }
        if self.runner.workers == 0 {
            return Err("runner.workers must be at least 1".into());
        }
        if !(1..=100).contains(&self.limits.list_page_max) {
            return Err("limits.list_page_max must be between 1 and 100".into());
        }
        if !(1..=500).contains(&self.limits.history_page_max) {
            return Err("limits.history_page_max must be between 1 and 500".into());
        }
        if self.limits.max_body_bytes < 1024 {
            return Err("limits.max_body_bytes must be at least 1024".into());
        }
        if self.store.read_connections == 0 || self.store.max_batch == 0 {
            return Err("store.read_connections and store.max_batch must be at least 1".into());
        }
        if self.stream.channel_capacity < 16 || self.stream.max_subscribers_per_session == 0 {
            return Err("stream.channel_capacity must be at least 16 and stream.max_subscribers_per_session at least 1".into());
        }
        if self.limits.body_timeout_ms == 0 {
            return Err("limits.body_timeout_ms must be at least 1".into());
        }
        if self.limits.login_delay_ms == 0 {
            return Err("limits.login_delay_ms must be at least 1".into());
        }
        if self.limits.browser_session_ms < 1000 {
            return Err("limits.browser_session_ms must be at least 1000".into());
        }
        if self.stream.keepalive_ms == 0 {
            return Err("stream.keepalive_ms must be at least 1".into());
        }
        let w = &self.webhooks;
        if w.backoff_initial_ms == 0
            || w.backoff_max_ms < w.backoff_initial_ms
            || w.timeout_ms == 0
            || w.poll_ms == 0
            || w.concurrency == 0
            || w.max_response_bytes == 0
            || w.max_per_workspace == 0
        {
            return Err(
                "webhooks: backoff_initial_ms, timeout_ms, poll_ms, concurrency, \
                 max_response_bytes and max_per_workspace must be at least 1, and \
                 backoff_max_ms at least backoff_initial_ms"
                    .into(),
            );
        }
        if !(50..=86_400_000).contains(&self.retention.sweep_interval_ms) {
            return Err("retention.sweep_interval_ms must be between 50 and 86400000".into());
        }
        if !(1..=10_000).contains(&self.retention.batch) {
            return Err("retention.batch must be between 1 and 10000".into());
        }
        if !(1..=10_000).contains(&self.schedules.max_per_agent) {
            return Err("schedules.max_per_agent must be between 1 and 10000".into());
        }
        if !(1..=86_400).contains(&self.schedules.min_interval_seconds) {
            return Err("schedules.min_interval_seconds must be between 1 and 86400".into());
        }
        check_bind(&self.bind)?;
        Ok(())
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("sessiond.db")
    }
}

/// The database URL of `database_url`, `SESSIOND_DATABASE_URL` or `--database`, kept as written
/// since the store connects with it. Its `Debug` shows none of it; what may be shown of it, and
/// whether sessiond can use it, is `crate::database`'s (that needs the PostgreSQL driver's parser,
/// which lives in the store, above `config`).
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(String);

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DatabaseUrl(..)")
    }
}

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> DatabaseUrl {
        DatabaseUrl(url.into())
    }

    /// The URL as written, password included: for connecting, never for printing.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Whether a config file's text sets `data_dir` (rather than leaving the default).
fn names_data_dir(text: &str) -> bool {
    toml::from_str::<toml::Table>(text).is_ok_and(|t| t.contains_key("data_dir"))
}

/// `HOST:PORT` (a name, an IPv4 address or a bracketed IPv6 address, and a port number); the name
/// is resolved when the server binds.
fn check_bind(bind: &str) -> Result<(), String> {
    let well_formed = bind
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if well_formed {
        Ok(())
    } else {
        Err(format!(
            "bind: {bind:?} is not HOST:PORT (for example 127.0.0.1:8080, localhost:8090 or [::1]:8080)"
        ))
    }
}

/// A configuration file with every commented-out setting and table of it switched on (`# key =
/// …` and `# [table]` lines uncommented): how the tests check that `config.example.toml`
/// documents only settings that parse.
pub fn with_everything_enabled(example: &str) -> String {
    example
        .lines()
        .map(|line| match line.strip_prefix("# ") {
            Some(rest)
                if rest.starts_with('[')
                    || rest.split_once(" = ").is_some_and(|(k, _)| {
                        k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    }) =>
            {
                rest
            }
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `config.example.toml` with every commented-out setting and table switched on.
    pub(crate) fn example_with_everything_enabled() -> String {
        super::with_everything_enabled(include_str!("../../../config.example.toml"))
    }

    #[test]
    fn the_example_file_is_valid_as_shipped_and_with_every_option_enabled() {
        let shipped: Config = toml::from_str(include_str!("../../../config.example.toml")).unwrap();
        shipped.validate().unwrap();
        let text = example_with_everything_enabled();
        let all: Config = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        all.validate().unwrap();
        assert!(all.engine.is_some());
        assert!(all.agents[0].engine.is_some());
        assert!(all.database_url.is_some());
    }
}
