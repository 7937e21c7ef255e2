//! The built-in tools model engines offer, and how each maps onto the timeline.
//!
//! | tool | effect |
//! |---|---|
//! | `ask_user` | ends the turn with `ask`; the answer resumes it as this call's result |
//! | `todo_write` | replaces the session's todo list (`todos` event) |
//! | `sleep_until` | ends the turn with `sleep`; the wake (or an earlier message) resumes it |
//! | `start_session` | starts a child session of this one |
//! | `message_session` | sends a message to another session, attributed to this one (R7) |
//! | `read_file`, `write_file`, `list_dir`, `search_files` | [`files`], confined to the session's cwd |
//! | `run_command` | [`shell`]: off unless the operator and the agent both enable it |
//!
//! A tool never fails a turn: bad arguments and refused operations come back to the model as
//! results marked `isError`. Only losing the session (an interrupt's cut-off) ends a call early.

pub mod files;
pub mod shell;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::drive::Drive;
use crate::error::{Error, Result};
use crate::runner::TurnIo;
use crate::sessions::{CreateIn, InputCommon, MessageIn};
use crate::timeline::{AskOption, AskQuestion, Behavior, Tier, Todo, TodoStatus};

/// Which tools an agent's model may use.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ToolsConfig {
    /// Names of built-in tools not to offer.
    pub disabled: Vec<String>,
    pub run_command: shell::RunCommandConfig,
}

impl ToolsConfig {
    pub fn check(&self) -> Result<()> {
        self.run_command.check()?;
        for name in &self.disabled {
            if !NAMES.contains(&name.as_str()) {
                return Err(Error::invalid(format!(
                    "engine/tools/disabled: unknown tool {name:?}"
                )));
            }
        }
        Ok(())
    }
}

const NAMES: [&str; 10] = [
    "ask_user",
    "todo_write",
    "sleep_until",
    "start_session",
    "message_session",
    "read_file",
    "write_file",
    "list_dir",
    "search_files",
    "run_command",
];

/// What a tool call produced.
#[derive(Debug)]
pub enum Outcome {
    /// A result for the model.
    Done { text: String, is_error: bool },
    /// End the turn with these questions.
    Ask(Vec<AskQuestion>),
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

/// `start_session` calls one turn may make: a model cannot fan out without bound.
pub const MAX_SESSIONS_PER_TURN: u32 = 8;
/// `message_session` calls one turn may make.
pub const MAX_MESSAGES_PER_TURN: u32 = 16;
/// How deep sessions started by tools may nest (a root session is at depth 0).
pub const MAX_SESSION_DEPTH: u32 = 4;

/// What the tools of one turn share: its background commands and its counters.
#[derive(Default)]
pub struct TurnTools {
    pub background: shell::Background,
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
        matches!(name, "ask_user" | "sleep_until")
    }

    fn enabled(&self, name: &str) -> bool {
        (name != "run_command" || self.cfg.run_command.enabled)
            && !self.cfg.disabled.iter().any(|d| d == name)
    }

    /// The `tools` array of a chat-completions request.
    pub fn definitions(&self) -> Vec<Value> {
        let all = [
            (
                "ask_user",
                "Ask the user one or more questions and wait for the answer. Use only when you cannot continue without a decision.",
                json!({
                    "type": "object",
                    "properties": {
                        "questions": {
                            "type": "array", "minItems": 1, "maxItems": 4,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "question": {"type": "string"},
                                    "header": {"type": "string", "description": "A short label for the question"},
                                    "options": {
                                        "type": "array",
                                        "items": {"type": "object", "properties": {
                                            "label": {"type": "string"},
                                            "description": {"type": "string"}
                                        }, "required": ["label"]}
                                    },
                                    "multiSelect": {"type": "boolean"}
                                },
                                "required": ["question"]
                            }
                        }
                    },
                    "required": ["questions"]
                }),
            ),
            (
                "todo_write",
                "Replace the task's todo list (shown to the user). Keep exactly one item in_progress while working.",
                json!({
                    "type": "object",
                    "properties": {
                        "todos": {
                            "type": "array", "maxItems": 100,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "id": {"type": "string"},
                                    "content": {"type": "string"},
                                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "failed"]}
                                },
                                "required": ["content", "status"]
                            }
                        }
                    },
                    "required": ["todos"]
                }),
            ),
            (
                "sleep_until",
                "Pause this session until a time (RFC 3339) or for a number of seconds; a new user message wakes it earlier.",
                json!({
                    "type": "object",
                    "properties": {
                        "until": {"type": "string", "description": "RFC 3339 time, e.g. 2030-01-01T09:00:00Z"},
                        "seconds": {"type": "number", "minimum": 1}
                    }
                }),
            ),
            (
                "start_session",
                "Start a child session that works on a prompt on its own. Returns its session id.",
                json!({
                    "type": "object",
                    "properties": {
                        "prompt": {"type": "string"},
                        "cwd": {"type": "string", "description": "Working directory in the drive; default: this session's"},
                        "tier": {"type": "string", "enum": ["frontier", "balanced", "economy"]}
                    },
                    "required": ["prompt"]
                }),
            ),
            (
                "message_session",
                "Send a message to another session of this workspace (it is attributed to this session).",
                json!({
                    "type": "object",
                    "properties": {
                        "sessionId": {"type": "string"},
                        "prompt": {"type": "string"},
                        "behavior": {"type": "string", "enum": ["steer", "follow_up"]}
                    },
                    "required": ["sessionId", "prompt"]
                }),
            ),
            (
                "read_file",
                "Read a text file (path relative to the working directory). Long files come in pages: pass offsetLine and limitLines.",
                json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string"},
                        "offsetLine": {"type": "integer", "minimum": 1},
                        "limitLines": {"type": "integer", "minimum": 1}
                    },
                    "required": ["path"]
                }),
            ),
            (
                "write_file",
                "Create or replace a text file (path relative to the working directory); missing folders are created.",
                json!({
                    "type": "object",
                    "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                    "required": ["path", "content"]
                }),
            ),
            (
                "list_dir",
                "List a folder (default: the working directory): folders end with '/', files show their size.",
                json!({
                    "type": "object",
                    "properties": {"path": {"type": "string"}}
                }),
            ),
            (
                "search_files",
                "Find lines containing a literal, case-sensitive text in the files under a folder; glob filters file names (e.g. *.rs).",
                json!({
                    "type": "object",
                    "properties": {
                        "pattern": {"type": "string"},
                        "path": {"type": "string"},
                        "glob": {"type": "string"}
                    },
                    "required": ["pattern"]
                }),
            ),
            (
                "run_command",
                "Run a command in the working directory and get its exit status and output. Long runs continue as background tasks.",
                shell::RunCommandConfig::definition(),
            ),
        ];
        all.into_iter()
            .filter(|(name, _, _)| self.enabled(name))
            .map(|(name, description, parameters)| {
                json!({
                    "type": "function",
                    "function": {"name": name, "description": description, "parameters": parameters}
                })
            })
            .collect()
    }

    /// Runs one call. `Err` only when the turn itself can no longer write.
    pub async fn call(
        &self,
        io: &mut TurnIo,
        turn: &mut TurnTools,
        name: &str,
        input: &Value,
    ) -> Result<Outcome> {
        if !self.enabled(name) || !NAMES.contains(&name) {
            return Ok(Outcome::error(format!("there is no tool named {name:?}")));
        }
        let outcome = match name {
            "ask_user" => ask_user(input),
            "todo_write" => todo_write(io, input).await?,
            "sleep_until" => sleep_until(input),
            "start_session" => {
                if turn.sessions_started >= MAX_SESSIONS_PER_TURN {
                    Outcome::error(format!(
                        "a turn may start at most {MAX_SESSIONS_PER_TURN} sessions"
                    ))
                } else if io.depth(MAX_SESSION_DEPTH).await? >= MAX_SESSION_DEPTH {
                    Outcome::error(format!(
                        "sessions started by sessions nest at most {MAX_SESSION_DEPTH} deep"
                    ))
                } else {
                    turn.sessions_started += 1;
                    start_session(io, input).await?
                }
            }
            "message_session" => {
                if turn.messages_sent >= MAX_MESSAGES_PER_TURN {
                    Outcome::error(format!(
                        "a turn may send at most {MAX_MESSAGES_PER_TURN} messages to sessions"
                    ))
                } else {
                    turn.messages_sent += 1;
                    message_session(io, input).await?
                }
            }
            "run_command" => {
                shell::run(&self.cfg.run_command, io, &mut turn.background, input).await?
            }
            "read_file" | "write_file" | "list_dir" | "search_files" => {
                file_tool(io, name, input).await
            }
            _ => Outcome::error(format!("there is no tool named {name:?}")),
        };
        Ok(outcome)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum OptionIn {
    Label(String),
    Full {
        label: String,
        description: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QuestionIn {
    question: String,
    header: Option<String>,
    #[serde(default)]
    options: Vec<OptionIn>,
    multi_select: Option<bool>,
}

#[derive(Deserialize)]
struct AskIn {
    questions: Vec<QuestionIn>,
}

fn ask_user(input: &Value) -> Outcome {
    let parsed: AskIn = match args("ask_user", input) {
        Ok(a) => a,
        Err(e) => return e,
    };
    if parsed.questions.is_empty() || parsed.questions.len() > 4 {
        return Outcome::error("ask_user takes 1 to 4 questions");
    }
    let mut questions = Vec::new();
    for q in parsed.questions {
        let question = q.question.trim().to_owned();
        if question.is_empty() || question.chars().count() > 2_000 {
            return Outcome::error("every question needs 1 to 2000 characters of text");
        }
        if q.options.len() > 10 {
            return Outcome::error("at most 10 options per question");
        }
        let options = q
            .options
            .into_iter()
            .map(|o| match o {
                OptionIn::Label(label) => AskOption {
                    label,
                    description: None,
                },
                OptionIn::Full { label, description } => AskOption { label, description },
            })
            .filter(|o| !o.label.trim().is_empty())
            .collect();
        questions.push(AskQuestion {
            question,
            header: q.header.filter(|h| !h.trim().is_empty()),
            options,
            multi_select: q.multi_select,
        });
    }
    Outcome::Ask(questions)
}

#[derive(Deserialize)]
struct TodoIn {
    id: Option<String>,
    content: String,
    status: TodoStatus,
}

#[derive(Deserialize)]
struct TodosIn {
    todos: Vec<TodoIn>,
}

async fn todo_write(io: &mut TurnIo, input: &Value) -> Result<Outcome> {
    let parsed: TodosIn = match args("todo_write", input) {
        Ok(a) => a,
        Err(e) => return Ok(e),
    };
    if parsed.todos.len() > 100 {
        return Ok(Outcome::error("at most 100 todos"));
    }
    let todos: Vec<Todo> = parsed
        .todos
        .into_iter()
        .enumerate()
        .map(|(i, t)| Todo {
            id: t
                .id
                .filter(|id| !id.trim().is_empty())
                .unwrap_or_else(|| format!("todo-{}", i + 1)),
            content: t.content.chars().take(500).collect(),
            status: t.status,
        })
        .collect();
    let n = todos.len();
    let done = todos
        .iter()
        .filter(|t| t.status == TodoStatus::Completed)
        .count();
    io.set_todos(todos).await?;
    Ok(Outcome::ok(format!(
        "todo list updated: {n} items, {done} completed"
    )))
}

#[derive(Deserialize)]
struct SleepIn {
    until: Option<String>,
    seconds: Option<f64>,
}

/// The longest sleep a tool may ask for.
const MAX_SLEEP_MS: i64 = 365 * 24 * 3_600_000;

fn sleep_until(input: &Value) -> Outcome {
    let parsed: SleepIn = match args("sleep_until", input) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let now = crate::clock::now_ms();
    let wake_at = match (parsed.until.as_deref(), parsed.seconds) {
        (Some(until), _) => match humantime::parse_rfc3339_weak(until.trim()) {
            Ok(t) => t
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            Err(_) => {
                return Outcome::error(format!(
                    "until: {until:?} is not an RFC 3339 time like 2030-01-01T09:00:00Z"
                ));
            }
        },
        (None, Some(s)) if s.is_finite() && s > 0.0 => now.saturating_add((s * 1000.0) as i64),
        _ => return Outcome::error("give either until (RFC 3339) or seconds (> 0)"),
    };
    if wake_at <= now {
        return Outcome::error("that time has already passed");
    }
    if wake_at - now > MAX_SLEEP_MS {
        return Outcome::error("sleep at most 365 days");
    }
    Outcome::Sleep { wake_at }
}

#[derive(Deserialize)]
struct StartIn {
    prompt: String,
    cwd: Option<String>,
    tier: Option<Tier>,
}

fn check_prompt(io: &TurnIo, prompt: &str) -> std::result::Result<(), Outcome> {
    let max = io
        .sessions()
        .map_or(200_000, |s| s.config().limits.max_prompt_chars);
    if prompt.trim().is_empty() || prompt.chars().count() > max {
        return Err(Outcome::error(format!(
            "prompt: 1 to {max} characters of text"
        )));
    }
    Ok(())
}

async fn start_session(io: &mut TurnIo, input: &Value) -> Result<Outcome> {
    let parsed: StartIn = match args("start_session", input) {
        Ok(a) => a,
        Err(e) => return Ok(e),
    };
    if let Err(e) = check_prompt(io, &parsed.prompt) {
        return Ok(e);
    }
    let Some(sessions) = io.sessions().cloned() else {
        return Ok(Outcome::error("sessions cannot be started from here"));
    };
    let actor = io.actor().clone();
    let created = sessions
        .create(
            &actor,
            CreateIn {
                prompt: parsed.prompt,
                agent_id: None,
                cwd: parsed.cwd,
                tier: parsed.tier,
                behavior: Behavior::Steer,
                mode: None,
                common: InputCommon::default(),
            },
            Some(io.session_id().to_owned()),
        )
        .await;
    Ok(match created {
        Ok(s) => Outcome::ok(format!(
            "started session {} ({})",
            s.key.id,
            s.delivery.as_str()
        )),
        Err(e) => Outcome::error(format!("cannot start the session: {e}")),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageToolIn {
    session_id: String,
    prompt: String,
    behavior: Option<Behavior>,
}

async fn message_session(io: &mut TurnIo, input: &Value) -> Result<Outcome> {
    let parsed: MessageToolIn = match args("message_session", input) {
        Ok(a) => a,
        Err(e) => return Ok(e),
    };
    if let Err(e) = check_prompt(io, &parsed.prompt) {
        return Ok(e);
    }
    if parsed.session_id == io.session_id() {
        return Ok(Outcome::error(
            "this is the current session: answer here instead of messaging it",
        ));
    }
    let Some(sessions) = io.sessions().cloned() else {
        return Ok(Outcome::error("sessions cannot be messaged from here"));
    };
    let actor = io.actor().clone();
    let sent = sessions
        .message(
            &actor,
            &parsed.session_id,
            MessageIn {
                prompt: parsed.prompt,
                tier: None,
                behavior: parsed.behavior.unwrap_or(Behavior::Steer),
                common: InputCommon {
                    source_session_id: Some(io.session_id().to_owned()),
                    ..InputCommon::default()
                },
            },
        )
        .await;
    Ok(match sent {
        Ok(s) => Outcome::ok(format!(
            "message sent to session {} ({})",
            s.key.id,
            s.delivery.as_str()
        )),
        Err(Error::NotFound) => Outcome::error(format!(
            "there is no session {} in this workspace",
            parsed.session_id
        )),
        Err(e) => Outcome::error(format!("cannot send the message: {e}")),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileIn {
    path: Option<String>,
    content: Option<String>,
    offset_line: Option<usize>,
    limit_lines: Option<usize>,
    pattern: Option<String>,
    glob: Option<String>,
}

/// A session's working directory as a sandbox, the drive folder created when missing (blocking:
/// call it off the runner's threads). Errors are text for the model.
pub(crate) fn sandbox(
    drive: &Drive,
    cwd: Option<&str>,
) -> std::result::Result<files::Sandbox, String> {
    drive.ensure().map_err(|e| e.to_string())?;
    files::Sandbox::new(drive.root(), cwd).map_err(|e| e.to_string())
}

/// The file tools block on the filesystem, so they run off the runner's threads.
async fn file_tool(io: &TurnIo, name: &str, input: &Value) -> Outcome {
    let parsed: FileIn = match args(name, input) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let drive = io.drive().clone();
    let cwd = io.cwd().map(str::to_owned);
    let name = name.to_owned();
    let run = move || -> std::result::Result<String, String> {
        let sandbox = sandbox(&drive, cwd.as_deref())?;
        let need =
            |v: Option<String>, field: &str| v.ok_or_else(|| format!("{name} needs {field}"));
        let result = match name.as_str() {
            "read_file" => {
                let path = need(parsed.path, "path")?;
                sandbox.read_file(&path, parsed.offset_line, parsed.limit_lines)
            }
            "write_file" => {
                let path = need(parsed.path, "path")?;
                let content = need(parsed.content, "content")?;
                sandbox.write_file(&path, &content)
            }
            "list_dir" => sandbox.list_dir(parsed.path.as_deref()),
            _ => {
                let pattern = need(parsed.pattern, "pattern")?;
                sandbox.search_files(&pattern, parsed.path.as_deref(), parsed.glob.as_deref())
            }
        };
        result.map_err(|e| e.to_string())
    };
    match tokio::task::spawn_blocking(run).await {
        Ok(Ok(text)) => Outcome::ok(text),
        Ok(Err(message)) => Outcome::error(message),
        Err(_) => Outcome::error("the tool stopped unexpectedly"),
    }
}
