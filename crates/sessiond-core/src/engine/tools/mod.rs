//! The built-in tools model engines offer, and how each maps onto the timeline. Each tool is one
//! file holding what the model is told about it and what a call does; [`TOOLS`] lists them all.
//!
//! | tool | effect |
//! |---|---|
//! | [`ask_user`] | ends the turn with `ask`; the answer resumes it as this call's result |
//! | [`todo_write`] | replaces the session's todo list (`todos` event) |
//! | [`sleep_until`] | ends the turn with `sleep`; the wake (or an earlier message) resumes it |
//! | [`start_session`] | starts a child session of this one |
//! | [`message_session`] | sends a message to another session, attributed to this one (R7) |
//! | [`read_file`], [`write_file`], [`list_dir`], [`search_files`] | confined to the session's cwd by the [`sandbox`] |
//! | [`run_command`] | off unless the operator and the agent both enable it |
//!
//! A tool never fails a turn: bad arguments and refused operations come back to the model as
//! results marked `isError`. Only losing the session (an interrupt's cut-off) ends a call early.

pub mod ask_user;
pub mod list_dir;
pub mod message_session;
pub mod read_file;
pub mod run_command;
pub mod sandbox;
pub mod search_files;
pub mod sleep_until;
pub mod start_session;
pub mod todo_write;
pub mod write_file;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::drive::Drive;
use crate::engine::TurnIo;
use crate::error::{Error, Result};

/// A built-in tool: what the model is told about it and what a call does.
#[async_trait]
pub trait Tool: Sync {
    /// The name the model calls it by.
    fn name(&self) -> &'static str;

    /// What the model is told the tool does.
    fn description(&self) -> &'static str;

    /// The JSON Schema of its arguments.
    fn parameters(&self) -> Value;

    /// Ends the turn (`ask`, `sleep`); such calls run after the other calls of the same reply.
    fn pauses(&self) -> bool {
        false
    }

    /// Whether `cfg` offers it at all (before `disabled` is applied).
    fn offered(&self, _cfg: &ToolsConfig) -> bool {
        true
    }

    /// Runs one call. `Err` only when the turn itself can no longer write.
    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome>;
}

/// Every built-in tool, in the order they are offered to the model.
pub const TOOLS: [&dyn Tool; 10] = [
    &ask_user::AskUser,
    &todo_write::TodoWrite,
    &sleep_until::SleepUntil,
    &start_session::StartSession,
    &message_session::MessageSession,
    &read_file::ReadFile,
    &write_file::WriteFile,
    &list_dir::ListDir,
    &search_files::SearchFiles,
    &run_command::RunCommand,
];

fn tool(name: &str) -> Option<&'static dyn Tool> {
    TOOLS.into_iter().find(|t| t.name() == name)
}

/// What a call has besides its arguments.
pub struct Call<'a> {
    pub io: &'a mut dyn TurnIo,
    pub turn: &'a mut TurnTools,
    pub cfg: &'a ToolsConfig,
}

/// Which tools an agent's model may use.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Names of built-in tools not to offer.
    pub disabled: Vec<String>,
    pub run_command: run_command::RunCommandConfig,
}

impl ToolsConfig {
    pub fn check(&self) -> Result<()> {
        self.run_command.check()?;
        for name in &self.disabled {
            if tool(name).is_none() {
                return Err(Error::invalid(format!(
                    "engine/tools/disabled: unknown tool {name:?}"
                )));
            }
        }
        Ok(())
    }
}

/// What a tool call produced.
#[derive(Debug)]
pub enum Outcome {
    /// A result for the model.
    Done { text: String, is_error: bool },
    /// End the turn with these questions.
    Ask(Vec<crate::timeline::AskQuestion>),
    /// End the turn until `wake_at` (ms since the epoch).
    Sleep { wake_at: i64 },
}

impl Outcome {
    pub fn ok(text: impl Into<String>) -> Outcome {
        Outcome::Done {
            text: text.into(),
            is_error: false,
        }
    }

    pub fn error(text: impl Into<String>) -> Outcome {
        Outcome::Done {
            text: text.into(),
            is_error: true,
        }
    }
}

pub struct Toolbox {
    cfg: ToolsConfig,
}

/// What the tools of one turn share: its background commands and its counters.
#[derive(Default)]
pub struct TurnTools {
    pub background: run_command::Background,
    sessions_started: u32,
    messages_sent: u32,
}

/// Parses a tool's arguments; a mismatch is the model's error, reported back to it.
fn args<T: for<'de> Deserialize<'de>>(
    tool: &str,
    value: &Value,
) -> std::result::Result<T, Outcome> {
    serde_json::from_value(value.clone())
        .map_err(|e| Outcome::error(format!("invalid arguments for {tool}: {e}")))
}

impl Toolbox {
    pub fn new(cfg: ToolsConfig) -> Toolbox {
        Toolbox { cfg }
    }

    /// Tools that end the turn; they run after the other calls of the same reply.
    pub fn pauses(name: &str) -> bool {
        tool(name).is_some_and(|t| t.pauses())
    }

    fn enabled(&self, tool: &dyn Tool) -> bool {
        tool.offered(&self.cfg) && !self.cfg.disabled.iter().any(|d| d == tool.name())
    }

    /// The `tools` array of a chat-completions request.
    pub fn definitions(&self) -> Vec<Value> {
        TOOLS
            .into_iter()
            .filter(|t| self.enabled(*t))
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name(),
                        "description": t.description(),
                        "parameters": t.parameters(),
                    }
                })
            })
            .collect()
    }

    /// Runs one call. `Err` only when the turn itself can no longer write.
    pub async fn call(
        &self,
        io: &mut dyn TurnIo,
        turn: &mut TurnTools,
        name: &str,
        input: &Value,
    ) -> Result<Outcome> {
        match tool(name).filter(|t| self.enabled(*t)) {
            Some(t) => {
                let cx = Call {
                    io,
                    turn,
                    cfg: &self.cfg,
                };
                t.call(cx, input).await
            }
            None => Ok(Outcome::error(format!("there is no tool named {name:?}"))),
        }
    }
}

/// The prompt of an input a session tool sends: as long as the sessions core accepts.
fn check_prompt(io: &dyn TurnIo, prompt: &str) -> std::result::Result<(), Outcome> {
    let max = io.sessions().map_or(200_000, |s| s.max_prompt_chars());
    if prompt.trim().is_empty() || prompt.chars().count() > max {
        return Err(Outcome::error(format!(
            "prompt: 1 to {max} characters of text"
        )));
    }
    Ok(())
}

/// The arguments the file tools take (each uses its own of them).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileArgs {
    path: Option<String>,
    content: Option<String>,
    offset_line: Option<usize>,
    limit_lines: Option<usize>,
    pattern: Option<String>,
    glob: Option<String>,
}

/// A required file-tool argument.
fn need(tool: &str, value: Option<String>, field: &str) -> std::result::Result<String, String> {
    value.ok_or_else(|| format!("{tool} needs {field}"))
}

/// A session's working directory as a sandbox, the drive folder created when missing (blocking:
/// call it off the runner's threads). Errors are text for the model.
pub(crate) fn sandbox(
    drive: &Drive,
    cwd: Option<&str>,
) -> std::result::Result<sandbox::Sandbox, String> {
    drive.ensure().map_err(|e| e.to_string())?;
    sandbox::Sandbox::new(drive.root(), cwd).map_err(|e| e.to_string())
}

/// Runs a file tool's operation in the session's sandbox; the file tools block on the filesystem,
/// so they run off the runner's threads.
async fn in_sandbox<F>(io: &dyn TurnIo, tool: &str, input: &Value, op: F) -> Outcome
where
    F: FnOnce(&sandbox::Sandbox, FileArgs) -> std::result::Result<String, String> + Send + 'static,
{
    let parsed: FileArgs = match args(tool, input) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let drive = io.drive().clone();
    let cwd = io.cwd().map(str::to_owned);
    let run = move || op(&sandbox(&drive, cwd.as_deref())?, parsed);
    match tokio::task::spawn_blocking(run).await {
        Ok(Ok(text)) => Outcome::ok(text),
        Ok(Err(message)) => Outcome::error(message),
        Err(_) => Outcome::error("the tool stopped unexpectedly"),
    }
}
