//! The command engine: each turn runs an agent CLI (Claude Code, Codex, or any program that speaks
//! the generic protocol) in the session's working directory and turns its JSON-lines output into
//! the session's timeline.
//!
//! Agent CLIs already are complete agents — their own model calls, tools, permissions and
//! conversation memory — so sessiond does not model them; it hosts them. A turn is one or more
//! runs of the CLI; everything specific to one CLI's output lives in a small adapter (`generic`,
//! `claude`, `codex`) that maps a parsed line to [`Action`]s, and this module applies them, so
//! the adapters stay pure functions that are tested on recorded streams.
//!
//! Decisions:
//!
//! - **Prompt.** On stdin (closed after the text) or as the last argument. An answer is sent as
//!   the prompt of the next run; a wake sends [`WAKE_PROMPT`].
//! - **Conversation.** With `resume` (the default) the CLI's own session id (Claude's
//!   `session_id`, Codex's `thread_id`) is kept in the session's engine memo as soon as the CLI
//!   names it, and the next run continues that conversation (`--resume <id>`,
//!   `exec … resume <id>`). A resumed run that fails before naming a session forgets the id, so a
//!   conversation the CLI no longer knows cannot fail every later turn.
//! - **Steering.** A CLI cannot take input while it runs, so steer messages wait for the run to
//!   end; if it ended well, the CLI runs again in the same turn (resuming its conversation) with
//!   the steer messages as the prompt. A failed run leaves them queued for the next turn.
//! - **Output that is not JSON** (a CLI's stray log lines) becomes `system` steps, at most
//!   [`MAX_NOISE_LINES`] per run; JSON lines of unknown types are ignored, so newer CLI versions
//!   do not break older sessiond versions; a known line with malformed fields becomes a `system`
//!   step naming the problem.
//! - **Ending.** An interrupt or the turn timeout stops the CLI's whole process group at once
//!   ([`crate::process`]). A non-zero exit fails the turn with the end of the CLI's stderr; an
//!   explicit error line (`error`, Claude's `is_error` result, Codex's `turn.failed`) fails it
//!   with its message.
//! - **Environment.** The child inherits the server's environment plus `env` and
//!   `SESSIOND_SESSION_ID` / `SESSIOND_INPUT_KIND` (`prompt`, `answer`, `wake`, `steer`), so a
//!   program can keep state per session. Secrets belong in the server's environment, never in the
//!   agent's JSON, which the agents API shows to every caller.

mod claude;
mod codex;
mod generic;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{BoxFuture, Engine, InputKind, TurnEnd, TurnInput};
use crate::engine::TurnIo;
use crate::error::{Error, Result};
use crate::process::{Output, Process, ProcessSpec, describe_status};
use crate::timeline::{AskQuestion, ContextWindowUsage, Event, Step, Todo, Usage};

/// The prompt of a run started by a wake (the CLI slept through a timer).
pub const WAKE_PROMPT: &str = "(scheduled wake-up) The time you asked to be woken at has come. \
                               Continue where you left off.";
/// Non-JSON stdout lines recorded per run; later ones are dropped with one notice.
pub const MAX_NOISE_LINES: usize = 20;
/// A `system` step made from a non-JSON line keeps at most this many characters.
const NOISE_CHARS: usize = 1000;
/// The end of stderr quoted in a failure.
const ERROR_TAIL_CHARS: usize = 2000;

const DEFAULT_TIMEOUT_MS: u64 = 30 * 60 * 1000;
const MIN_TIMEOUT_MS: u64 = 1000;
const MAX_TIMEOUT_MS: u64 = 24 * 60 * 60 * 1000;

/// Which output format the CLI speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// sessiond's own JSON-lines format (see `generic`).
    #[default]
    Generic,
    /// Claude Code: `claude -p --output-format stream-json --verbose`.
    Claude,
    /// Codex: `codex exec --json`.
    Codex,
}

impl Protocol {
    /// [`Engine::harness`] of a CLI speaking this protocol.
    pub fn harness(self) -> &'static str {
        match self {
            Protocol::Generic => "command",
            Protocol::Claude => "claude_code",
            Protocol::Codex => "codex",
        }
    }
}

/// How the prompt reaches the CLI.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptVia {
    #[default]
    Stdin,
    /// Appended as the last argument.
    Argv,
}

/// An agent's `engine` object with `"kind": "command"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandConfig {
    /// The CLI: a path, or a name looked up on the server's `PATH`.
    pub program: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub protocol: Protocol,
    #[serde(default)]
    pub prompt: PromptVia,
    /// Extra environment variables. The child inherits the server's environment: keep secrets
    /// (API keys) there, never here — the agents API shows this object.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The longest a turn may take (all its runs), in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Continue the CLI's own conversation across turns (`claude` and `codex`).
    #[serde(default = "default_resume")]
    pub resume: bool,
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

fn default_resume() -> bool {
    true
}

impl CommandConfig {
    /// Checks what serde cannot: sizes, NUL bytes, variable names, the timeout's range.
    pub fn validate(&self) -> Result<()> {
        let bad = |field: &str, why: &str| Err(Error::invalid(format!("engine/{field}: {why}")));
        if self.program.trim().is_empty() || self.program.len() > 4096 {
            return bad("program", "1 to 4096 characters");
        }
        if self.program.contains('\0') {
            return bad("program", "must not contain NUL");
        }
        if self.args.len() > 256
            || self
                .args
                .iter()
                .any(|a| a.len() > 65536 || a.contains('\0'))
        {
            return bad(
                "args",
                "at most 256 arguments of at most 64 KiB, without NUL",
            );
        }
        if self.env.len() > 64 {
            return bad("env", "at most 64 variables");
        }
        for (k, v) in &self.env {
            let name_ok = !k.is_empty()
                && k.len() <= 256
                && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !k.as_bytes()[0].is_ascii_digit();
            if !name_ok {
                return bad(
                    "env",
                    &format!("`{k}` is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"),
                );
            }
            // Variables that change which code a program loads or which program a name means
            // would turn an allowed program into any program.
            if k == "PATH" || k.starts_with("LD_") || k.starts_with("DYLD_") {
                return bad(
                    "env",
                    &format!("`{k}` may not be set (it changes which code runs)"),
                );
            }
            if v.len() > 65536 || v.contains('\0') {
                return bad("env", &format!("`{k}`: at most 64 KiB, without NUL"));
            }
        }
        if !(MIN_TIMEOUT_MS..=MAX_TIMEOUT_MS).contains(&self.timeout_ms) {
            return bad("timeoutMs", "from 1000 (1 s) to 86400000 (24 h)");
        }
        Ok(())
    }

    pub fn build(&self) -> CommandEngine {
        CommandEngine { cfg: self.clone() }
    }
}

/// What one output line means, independent of the CLI that wrote it.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    /// Volatile progress (`text_delta`, `reasoning_delta`).
    Delta(Step),
    /// A durable step; text is also the turn's reply.
    Step(Step),
    Todos(Vec<Todo>),
    /// Measured usage of the run (`context_window` 0 when unknown).
    Usage {
        usage: Usage,
        context_window: f64,
    },
    /// The CLI named its conversation (kept for `resume`).
    CliSession(String),
    /// Questions for a person; the turn ends `ask` when the run ends.
    Ask(Vec<AskQuestion>),
    /// The run's final result text.
    Result(String),
    /// The run failed with this message.
    Error(String),
    /// End the turn with `sleep` until this time (ms since the epoch) when the run ends.
    Sleep(i64),
    /// A background task the program started, by its own id.
    TaskStarted {
        id: String,
        kind: &'static str,
        name: String,
        label: String,
    },
    TaskOutput {
        id: String,
        chunk: String,
    },
    TaskSettled {
        id: String,
        status: &'static str,
        detail: Value,
    },
    /// A problem the CLI reported without failing (recorded as a `system` step and quoted if the
    /// run fails later without saying why).
    Warning(String),
}

/// The actions an adapter makes of a recorded output stream (its JSON lines), for tests.
#[cfg(test)]
pub(crate) fn replay(adapter: &mut dyn Adapter, fixture: &str) -> Vec<Action> {
    fixture
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|v| adapter.line(&v))
        .collect()
}

/// A CLI's output format: one parsed JSON line in, actions out.
pub(crate) trait Adapter: Send {
    fn line(&mut self, line: &Value) -> Vec<Action>;
}

fn adapter(protocol: Protocol) -> Box<dyn Adapter> {
    match protocol {
        Protocol::Generic => Box::new(generic::Generic),
        Protocol::Claude => Box::new(claude::Claude::default()),
        Protocol::Codex => Box::new(codex::Codex),
    }
}

/// A `system` step for a line the adapter could not use.
pub(crate) fn malformed(kind: &str, err: impl std::fmt::Display) -> Action {
    Action::Step(Step::System {
        message: format!("ignored a malformed `{kind}` line: {err}"),
    })
}

/// Background tasks one turn of a program may start.
const MAX_TASKS: usize = 256;

async fn unknown_task(io: &mut dyn TurnIo, run: &mut Run, id: &str) -> Result<()> {
    let message = format!("ignored a line about task `{id}`, which was not started");
    step_of_run(io, run, Step::System { message }).await
}

/// The arguments of one run: the configured ones, the protocol's resume arguments, the prompt.
fn run_args(cfg: &CommandConfig, resume: Option<&str>, prompt: &str) -> Vec<String> {
    let mut args = cfg.args.clone();
    if let Some(id) = resume {
        match cfg.protocol {
            Protocol::Generic => {}
            Protocol::Claude => args.extend(claude::resume_args(id)),
            Protocol::Codex => args.extend(codex::resume_args(id, cfg.prompt == PromptVia::Stdin)),
        }
    }
    if cfg.prompt == PromptVia::Argv {
        args.push(prompt.to_owned());
    }
    args
}

/// The engine memo: the CLI conversation a session continues.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Memo {
    protocol: Protocol,
    cli_session_id: String,
}

pub struct CommandEngine {
    cfg: CommandConfig,
}

/// The state of one run of the CLI.
#[derive(Default)]
struct Run {
    started_tools: HashSet<String>,
    had_text: bool,
    result: Option<String>,
    error: Option<String>,
    ask: Option<Vec<AskQuestion>>,
    sleep: Option<i64>,
    warning: Option<String>,
    named_session: bool,
    noise: usize,
}

/// The state of a turn across its runs.
struct Turn {
    deadline: Instant,
    /// The CLI conversation to continue.
    cli_session: Option<String>,
    last_todos: Option<Vec<Todo>>,
    /// The program's task ids → sessiond's.
    tasks: BTreeMap<String, String>,
}

impl Engine for CommandEngine {
    fn name(&self) -> &'static str {
        "command"
    }

    fn harness(&self) -> &'static str {
        self.cfg.protocol.harness()
    }

    fn describe(&self) -> String {
        let protocol = match self.cfg.protocol {
            Protocol::Generic => "generic",
            Protocol::Claude => "claude",
            Protocol::Codex => "codex",
        };
        format!("`{}` ({protocol} protocol)", self.cfg.program)
    }

    fn run<'a>(
        &'a self,
        io: &'a mut dyn TurnIo,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<TurnEnd>> {
        Box::pin(async move {
            let resumable = self.cfg.resume && self.cfg.protocol != Protocol::Generic;
            let cli_session = if resumable {
                io.memo()
                    .await?
                    .and_then(|m| serde_json::from_value::<Memo>(m).ok())
                    .filter(|m| m.protocol == self.cfg.protocol)
                    .map(|m| m.cli_session_id)
            } else {
                None
            };
            let mut turn = Turn {
                deadline: Instant::now() + Duration::from_millis(self.cfg.timeout_ms),
                cli_session,
                last_todos: None,
                tasks: BTreeMap::new(),
            };
            let (mut prompt, mut kind) = match input.kind {
                InputKind::Prompt => (input.text, "prompt"),
                InputKind::Answer => (input.text, "answer"),
                InputKind::Wake => (WAKE_PROMPT.to_owned(), "wake"),
            };
            loop {
                let end = self.run_once(io, &mut turn, &prompt, kind).await?;
                if !matches!(end, TurnEnd::Complete { .. }) || io.is_cancelled() {
                    return Ok(end);
                }
                let steers = io.take_steers().await?;
                if steers.is_empty() {
                    return Ok(end);
                }
                prompt = steers.join("\n\n");
                kind = "steer";
            }
        })
    }
}

impl CommandEngine {
    fn program_name(&self) -> &str {
        Path::new(&self.cfg.program)
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(&self.cfg.program)
    }

    fn work_dir(io: &dyn TurnIo) -> Result<PathBuf> {
        io.drive().ensure()?;
        Ok(match io.cwd().filter(|c| !c.is_empty()) {
            Some(cwd) => io.drive().root().join(cwd),
            None => io.drive().root().to_path_buf(),
        })
    }

    /// One run of the CLI: spawn, map its output, end it.
    async fn run_once(
        &self,
        io: &mut dyn TurnIo,
        turn: &mut Turn,
        prompt: &str,
        kind: &str,
    ) -> Result<TurnEnd> {
        if io.is_cancelled() {
            return Ok(TurnEnd::Interrupted);
        }
        let dir = Self::work_dir(io)?;
        if !dir.is_dir() {
            return Ok(TurnEnd::Failed {
                error: format!(
                    "the session's working directory `{}` does not exist in the drive",
                    io.cwd().unwrap_or("")
                ),
            });
        }
        let resumed_from = turn.cli_session.clone();
        let mut spec = ProcessSpec::new(self.cfg.program.clone(), dir);
        spec.args = run_args(&self.cfg, resumed_from.as_deref(), prompt);
        spec.env = self.cfg.env.clone();
        spec.env
            .insert("SESSIOND_SESSION_ID".into(), io.session_id().to_owned());
        spec.env
            .insert("SESSIOND_INPUT_KIND".into(), kind.to_owned());
        spec.env
            .insert("SESSIOND_REQUEST_ID".into(), io.request_id().to_owned());
        if self.cfg.prompt == PromptVia::Stdin {
            spec.stdin = Some(prompt.to_owned());
        }
        let mut child = match Process::spawn(&spec) {
            Ok(child) => child,
            Err(Error::Internal(error)) => return Ok(TurnEnd::Failed { error }),
            Err(e) => return Err(e),
        };
        let mut adapter = adapter(self.cfg.protocol);
        let mut run = Run::default();
        let status = loop {
            let left = turn.deadline.saturating_duration_since(Instant::now());
            let out = tokio::select! {
                out = child.next() => out,
                running = io.pause(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)) => {
                    child.kill_group().await;
                    return Ok(if running {
                        TurnEnd::Failed { error: self.timeout_message() }
                    } else {
                        TurnEnd::Interrupted
                    });
                }
            };
            match out {
                Some(Output::Line(line)) => {
                    let actions = match serde_json::from_str::<Value>(&line) {
                        Ok(v) if v.is_object() => adapter.line(&v),
                        _ => noise(&mut run, &line),
                    };
                    for action in actions {
                        self.apply(io, turn, &mut run, action).await?;
                    }
                }
                Some(Output::LineTooLong(bytes)) => {
                    let message = format!(
                        "skipped an output line of {bytes} bytes (the limit is {})",
                        spec.max_line_bytes
                    );
                    self.apply(io, turn, &mut run, Action::Step(Step::System { message }))
                        .await?;
                }
                Some(Output::Exited(status)) => break status,
                None => break child.wait().await,
            }
        };

        let failure = match run.error.take() {
            Some(error) => Some(error),
            None if !status.success() => {
                Some(self.exit_message(status, &child.stderr_tail(), run.warning.as_deref()))
            }
            None => None,
        };
        if let Some(error) = failure {
            if resumed_from.is_some() && !run.named_session {
                // The CLI did not get as far as its conversation: do not try it again.
                turn.cli_session = None;
                io.set_memo(json!({})).await?;
            }
            return Ok(TurnEnd::Failed { error });
        }
        if let Some(questions) = run.ask.take() {
            return Ok(TurnEnd::Ask {
                questions,
                resume: json!({ "engine": "command" }),
            });
        }
        if let Some(wake_at) = run.sleep.take() {
            return Ok(TurnEnd::Sleep {
                wake_at,
                resume: json!({ "engine": "command" }),
            });
        }
        Ok(TurnEnd::Complete { result: run.result })
    }

    async fn apply(
        &self,
        io: &mut dyn TurnIo,
        turn: &mut Turn,
        run: &mut Run,
        action: Action,
    ) -> Result<()> {
        match action {
            Action::Delta(step) => io.delta(step),
            Action::Step(step) => step_of_run(io, run, step).await?,
            Action::Todos(todos) => {
                if turn.last_todos.as_ref() != Some(&todos) {
                    turn.last_todos = Some(todos.clone());
                    io.set_todos(todos).await?;
                }
            }
            Action::Usage {
                usage,
                context_window,
            } => {
                io.record_usage(
                    usage,
                    Vec::new(),
                    context_window,
                    ContextWindowUsage::default(),
                    false,
                )
                .await?;
            }
            Action::CliSession(id) => {
                run.named_session = true;
                if self.cfg.resume && turn.cli_session.as_deref() != Some(id.as_str()) {
                    let memo = Memo {
                        protocol: self.cfg.protocol,
                        cli_session_id: id.clone(),
                    };
                    let memo =
                        serde_json::to_value(&memo).map_err(|e| Error::Internal(e.to_string()))?;
                    io.set_memo(memo).await?;
                    turn.cli_session = Some(id);
                }
            }
            Action::Ask(questions) => run.ask = Some(questions),
            Action::Sleep(at) => run.sleep = Some(at),
            Action::TaskStarted {
                id,
                kind,
                name,
                label,
            } => {
                if turn.tasks.contains_key(&id) || turn.tasks.len() >= MAX_TASKS {
                    let why = format!("task `{id}` was already started, or too many tasks");
                    step_of_run(io, run, Step::System { message: why }).await?;
                } else {
                    let ours = io.start_task(kind, &name, &label).await?;
                    turn.tasks.insert(id, ours);
                }
            }
            Action::TaskOutput { id, chunk } => match turn.tasks.get(&id) {
                Some(ours) => io.task_output(&ours.clone(), &chunk).await?,
                None => unknown_task(io, run, &id).await?,
            },
            Action::TaskSettled { id, status, detail } => match turn.tasks.remove(&id) {
                Some(ours) => io.settle_task(&ours, status, detail).await?,
                None => unknown_task(io, run, &id).await?,
            },
            Action::Result(text) => {
                if !run.had_text && !text.is_empty() {
                    // The reply is shown as a text step even when the CLI only reported it as
                    // its result.
                    step_of_run(io, run, Step::Text { text }).await?;
                } else {
                    run.result = Some(text);
                }
            }
            Action::Error(message) => run.error = Some(message),
            Action::Warning(message) => {
                run.warning = Some(message.clone());
                step_of_run(io, run, Step::System { message }).await?;
            }
        }
        Ok(())
    }

    fn timeout_message(&self) -> String {
        let ms = self.cfg.timeout_ms;
        let limit = if ms.is_multiple_of(1000) {
            format!("{} s", ms / 1000)
        } else {
            format!("{ms} ms")
        };
        format!(
            "`{}` did not finish within the turn timeout ({limit}) and was stopped",
            self.program_name()
        )
    }

    fn exit_message(
        &self,
        status: std::process::ExitStatus,
        stderr: &str,
        warning: Option<&str>,
    ) -> String {
        let mut message = format!(
            "`{}` failed with {}",
            self.program_name(),
            describe_status(status)
        );
        let detail = stderr.trim();
        let detail = if detail.is_empty() {
            warning.unwrap_or("").trim()
        } else {
            detail
        };
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(&last_chars(detail, ERROR_TAIL_CHARS));
        }
        message
    }
}

/// Records a step of a run: text is also the turn's reply; a tool call whose start was not
/// reported gets one first, so every call has its start.
async fn step_of_run(io: &mut dyn TurnIo, run: &mut Run, step: Step) -> Result<()> {
    match &step {
        Step::Text { text } if text.is_empty() => return Ok(()),
        Step::Text { text } => {
            let text = text.clone();
            io.emit(Event::Step { step }).await?;
            io.say(&text);
            run.had_text = true;
            run.result = Some(text);
            return Ok(());
        }
        Step::ToolCallStart { tool_call_id, .. } => {
            run.started_tools.insert(tool_call_id.clone());
        }
        Step::ToolCall {
            tool_name,
            tool_call_id,
            input,
            ..
        } if !run.started_tools.contains(tool_call_id) => {
            run.started_tools.insert(tool_call_id.clone());
            io.emit(Event::Step {
                step: Step::ToolCallStart {
                    tool_name: tool_name.clone(),
                    tool_call_id: tool_call_id.clone(),
                    input: input.clone(),
                },
            })
            .await?;
        }
        _ => {}
    }
    if step.is_volatile() {
        io.delta(step);
    } else {
        io.emit(Event::Step { step }).await?;
    }
    Ok(())
}

/// A non-JSON line: a `system` step while the run's allowance lasts.
fn noise(run: &mut Run, line: &str) -> Vec<Action> {
    let line = line.trim();
    if line.is_empty() {
        return Vec::new();
    }
    run.noise += 1;
    let message = match run.noise {
        n if n <= MAX_NOISE_LINES => line.chars().take(NOISE_CHARS).collect(),
        n if n == MAX_NOISE_LINES + 1 => {
            "further output that is not JSON is not recorded for this run".to_owned()
        }
        _ => return Vec::new(),
    };
    vec![Action::Step(Step::System { message })]
}

/// The last `n` characters of `s` (with `…` in front when cut).
fn last_chars(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        return s.to_owned();
    }
    let mut out = String::from("…");
    out.extend(s.chars().skip(count - n));
    out
}

/// A usage record's token total: every token the call read or wrote.
pub(crate) fn usage(
    input: f64,
    output: f64,
    cache_read: f64,
    cache_write: f64,
    cost: f64,
) -> Usage {
    let mut u = Usage {
        input,
        output,
        cache_read,
        cache_write,
        total_tokens: input + output + cache_read + cache_write,
        ..Usage::default()
    };
    u.cost.total = cost;
    u
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;

    fn parse(json: &str) -> Result<Option<EngineConfig>> {
        EngineConfig::parse(json)
    }

    #[test]
    fn config_defaults_and_validation() {
        let cfg = match parse(r#"{"kind":"command","program":"claude"}"#) {
            Ok(Some(EngineConfig::Command(c))) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!(cfg.protocol, Protocol::Generic);
        assert_eq!(cfg.prompt, PromptVia::Stdin);
        assert_eq!(cfg.timeout_ms, 30 * 60 * 1000);
        assert!(cfg.resume);
        assert!(cfg.args.is_empty() && cfg.env.is_empty());

        let full = r#"{"kind":"command","program":"codex","args":["exec","--json"],
            "protocol":"codex","prompt":"argv","env":{"CODEX_HOME":"/srv/codex"},
            "timeoutMs":60000,"resume":false}"#;
        assert!(matches!(parse(full), Ok(Some(EngineConfig::Command(_)))));

        for bad in [
            r#"{"kind":"command"}"#,
            r#"{"kind":"command","program":""}"#,
            r#"{"kind":"command","program":"x","protocol":"gemini"}"#,
            r#"{"kind":"command","program":"x","prompt":"file"}"#,
            r#"{"kind":"command","program":"x","timeoutMs":0}"#,
            r#"{"kind":"command","program":"x","env":{"A=B":"c"}}"#,
            r#"{"kind":"command","program":"x","env":{"1A":"c"}}"#,
            r#"{"kind":"command","program":"x","shell":true}"#,
            r#"{"kind":"command","program":"x","args":["a\u0000b"]}"#,
        ] {
            assert!(parse(bad).is_err(), "accepted {bad}");
        }
    }

    #[test]
    fn run_arguments_per_protocol() {
        let mut cfg = CommandConfig {
            program: "claude".into(),
            args: vec!["-p".into()],
            protocol: Protocol::Claude,
            prompt: PromptVia::Stdin,
            env: BTreeMap::new(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            resume: true,
        };
        assert_eq!(run_args(&cfg, None, "hi"), ["-p"]);
        assert_eq!(run_args(&cfg, Some("s1"), "hi"), ["-p", "--resume", "s1"]);
        cfg.prompt = PromptVia::Argv;
        assert_eq!(
            run_args(&cfg, Some("s1"), "hi"),
            ["-p", "--resume", "s1", "hi"]
        );

        cfg.protocol = Protocol::Codex;
        cfg.args = vec!["exec".into(), "--json".into()];
        assert_eq!(
            run_args(&cfg, Some("t1"), "hi"),
            ["exec", "--json", "resume", "t1", "hi"]
        );
        cfg.prompt = PromptVia::Stdin;
        assert_eq!(
            run_args(&cfg, Some("t1"), "hi"),
            ["exec", "--json", "resume", "t1", "-"]
        );
        assert_eq!(run_args(&cfg, None, "hi"), ["exec", "--json"]);

        cfg.protocol = Protocol::Generic;
        assert_eq!(run_args(&cfg, Some("ignored"), "hi"), ["exec", "--json"]);
    }

    #[test]
    fn noise_is_bounded_per_run() {
        let mut run = Run::default();
        assert!(noise(&mut run, "   ").is_empty());
        let mut steps = 0;
        for i in 0..100 {
            steps += noise(&mut run, &format!("log line {i}")).len();
        }
        assert_eq!(steps, MAX_NOISE_LINES + 1);
        let long = "x".repeat(5000);
        let mut run = Run::default();
        match noise(&mut run, &long).as_slice() {
            [Action::Step(Step::System { message })] => assert_eq!(message.len(), NOISE_CHARS),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn last_chars_keeps_the_end() {
        assert_eq!(last_chars("abc", 5), "abc");
        assert_eq!(last_chars("abcdef", 3), "…def");
    }
}
