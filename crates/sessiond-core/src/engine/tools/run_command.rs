//! `run_command`: a model runs a command in the session's working directory.
//!
//! Off unless both the operator (`policy.run_command` in the config file) and the agent
//! (`tools.runCommand.enabled`) turn it on. With an allow-list the command is split into words
//! and run without a shell, so only the listed programs can start (no `;`, pipes, redirections or
//! substitutions); without one it runs under `sh -c` with stderr folded into stdout.
//!
//! A command still running after `backgroundAfterMs` (or one started with `background: true`)
//! becomes a background task of the turn: its output streams as `task_output`, the model gets its
//! result as a message when it settles, and the turn does not end before its tasks have. Every
//! command runs in its own process group with a hard timeout, and is stopped with its children
//! when the turn is interrupted or ends.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::{Call, Outcome, Tool, ToolsConfig};
use crate::engine::TurnIo;
use crate::error::{Error, Result};
use crate::process::{Output, Process, ProcessSpec, describe_status};

/// `tools.runCommand` of an agent's engine.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RunCommandConfig {
    pub enabled: bool,
    /// Programs that may run (by name, or exact path); empty: any command, through `sh -c`.
    pub allow: Vec<String>,
    /// The hard limit of one command.
    pub timeout_ms: u64,
    /// After this long a command continues as a background task.
    pub background_after_ms: u64,
    /// Most output returned to the model (its head and tail are kept).
    pub max_output_bytes: usize,
}

impl Default for RunCommandConfig {
    fn default() -> Self {
        RunCommandConfig {
            enabled: false,
            allow: Vec::new(),
            timeout_ms: 10 * 60 * 1000,
            background_after_ms: 15_000,
            max_output_bytes: 32 * 1024,
        }
    }
}

impl RunCommandConfig {
    pub fn check(&self) -> Result<()> {
        if self.timeout_ms == 0 || self.timeout_ms > 24 * 3_600_000 {
            return Err(Error::invalid(
                "engine/tools/runCommand/timeoutMs: 1 ms to 24 h",
            ));
        }
        if !(1024..=16 * 1024 * 1024).contains(&self.max_output_bytes) {
            return Err(Error::invalid(
                "engine/tools/runCommand/maxOutputBytes: 1 KiB to 16 MiB",
            ));
        }
        if self.allow.iter().any(|p| p.trim().is_empty()) {
            return Err(Error::invalid(
                "engine/tools/runCommand/allow: program names cannot be empty",
            ));
        }
        Ok(())
    }
}

pub struct RunCommand;

#[async_trait]
impl Tool for RunCommand {
    fn name(&self) -> &'static str {
        "run_command"
    }

    fn description(&self) -> &'static str {
        "Run a command in the working directory and get its exit status and output. Long runs continue as background tasks."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, run in the working directory"},
                "timeoutMs": {"type": "integer", "minimum": 1, "description": "Stop it after this long"},
                "background": {"type": "boolean", "description": "Run as a background task at once; its result arrives as a message when it finishes"}
            },
            "required": ["command"]
        })
    }

    fn offered(&self, cfg: &ToolsConfig) -> bool {
        cfg.run_command.enabled
    }

    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome> {
        run(&cx.cfg.run_command, cx.io, &mut cx.turn.background, input).await
    }
}

/// Output kept for the model: the head, and a rolling tail, of at most `max` bytes in all.
struct Capture {
    max: usize,
    head: String,
    tail: std::collections::VecDeque<String>,
    tail_bytes: usize,
    dropped: usize,
}

impl Capture {
    fn new(max: usize) -> Capture {
        Capture {
            max,
            head: String::new(),
            tail: Default::default(),
            tail_bytes: 0,
            dropped: 0,
        }
    }

    fn push(&mut self, line: &str) {
        if self.head.len() + line.len() < self.max / 2 && self.tail.is_empty() {
            self.head.push_str(line);
            self.head.push('\n');
            return;
        }
        self.tail.push_back(format!("{line}\n"));
        self.tail_bytes += line.len() + 1;
        while self.tail_bytes > self.max / 2 {
            let Some(old) = self.tail.pop_front() else {
                break;
            };
            self.tail_bytes -= old.len();
            self.dropped += old.len();
        }
    }

    fn text(&self) -> String {
        let mut out = self.head.clone();
        if self.dropped > 0 {
            out.push_str(&format!(
                "[… {} bytes of output left out …]\n",
                self.dropped
            ));
        }
        for l in &self.tail {
            out.push_str(l);
        }
        out
    }
}

/// The words of a command line (quotes and backslashes as a shell reads them), or why it is
/// refused: without a shell, operators would silently become arguments.
fn split_words(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err("an unclosed ' quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c) => word.push(c),
                            None => return Err("a trailing backslash".into()),
                        },
                        Some('$' | '`') => {
                            return Err(
                                "substitutions ($, `) need a shell, which the allow-list rules out"
                                    .into(),
                            );
                        }
                        Some(c) => word.push(c),
                        None => return Err("an unclosed \" quote".into()),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                None => return Err("a trailing backslash".into()),
            },
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            ';' | '|' | '&' | '<' | '>' | '$' | '`' | '(' | ')' | '{' | '}' | '*' | '?' | '~' => {
                return Err(format!(
                    "{c:?} needs a shell, which the allow-list rules out: run one program with plain arguments"
                ));
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// The process to start for `command` under `cfg`, or why not.
fn spec_for(
    cfg: &RunCommandConfig,
    command: &str,
    cwd: &std::path::Path,
) -> std::result::Result<ProcessSpec, String> {
    let mut spec = if cfg.allow.is_empty() {
        let mut s = ProcessSpec::new("sh", cwd);
        s.args = vec!["-c".into(), format!("exec 2>&1\n{command}")];
        s
    } else {
        let words = split_words(command)?;
        let Some((program, args)) = words.split_first() else {
            return Err("the command is empty".into());
        };
        if !cfg.allow.contains(program) {
            return Err(format!(
                "{program:?} is not allowed; allowed programs: {}",
                cfg.allow.join(", ")
            ));
        }
        let mut s = ProcessSpec::new(program.clone(), cwd);
        s.args = args.to_vec();
        s
    };
    spec.max_line_bytes = 64 * 1024;
    Ok(spec)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RunIn {
    command: String,
    timeout_ms: Option<u64>,
    #[serde(default)]
    background: bool,
}

/// What a background command reports to its turn.
enum BgEvent {
    Output(String),
    Done { ok: bool, summary: String },
}

struct BgTask {
    id: String,
    command: String,
    rx: mpsc::UnboundedReceiver<BgEvent>,
}

/// The background commands of one turn. Dropping it stops them (with their process groups).
pub struct Background {
    tasks: Vec<BgTask>,
    stop: watch::Sender<bool>,
}

impl Default for Background {
    fn default() -> Self {
        Background {
            tasks: Vec::new(),
            stop: watch::channel(false).0,
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

impl Background {
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Writes what the background commands printed since the last call as `task_output`,
    /// settles the ones that finished, and returns a message for the model about each of those.
    pub async fn drain(&mut self, io: &mut dyn TurnIo) -> Result<Vec<String>> {
        let mut finished = Vec::new();
        let mut i = 0;
        while i < self.tasks.len() {
            let mut chunk = String::new();
            let mut done = None;
            loop {
                match self.tasks[i].rx.try_recv() {
                    Ok(BgEvent::Output(line)) => chunk.push_str(&line),
                    Ok(BgEvent::Done { ok, summary }) => {
                        done = Some((ok, summary));
                        break;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        done = Some((false, "the command stopped without a result".into()));
                        break;
                    }
                }
            }
            let id = self.tasks[i].id.clone();
            if !chunk.is_empty() {
                io.task_output(&id, &chunk).await?;
            }
            match done {
                Some((ok, summary)) => {
                    let task = self.tasks.remove(i);
                    let (status, detail) = if ok {
                        ("completed", json!(summary))
                    } else {
                        ("failed", json!(summary))
                    };
                    io.settle_task(&id, status, detail).await?;
                    finished.push(format!(
                        "(background task {id}, `{}`, finished: {summary})",
                        task.command
                    ));
                }
                None => i += 1,
            }
        }
        Ok(finished)
    }

    /// Waits until every background command has finished, streaming their output and keeping the
    /// turn's heartbeats going; `None` when the turn was interrupted first.
    pub async fn wait_all(&mut self, io: &mut dyn TurnIo) -> Result<Option<Vec<String>>> {
        let mut finished = Vec::new();
        while !self.tasks.is_empty() {
            finished.extend(self.drain(io).await?);
            if self.tasks.is_empty() {
                break;
            }
            if !io.pause(200).await {
                return Ok(None);
            }
            io.heartbeat_if_due().await?;
        }
        Ok(Some(finished))
    }
}

/// Resolves once `flag` turns true (or its sender is gone).
async fn stopped(flag: &mut watch::Receiver<bool>) {
    let _ = flag.wait_for(|f| *f).await;
}

/// Runs one `run_command` call.
async fn run(
    cfg: &RunCommandConfig,
    io: &mut dyn TurnIo,
    bg: &mut Background,
    input: &Value,
) -> Result<Outcome> {
    let parsed: RunIn = match serde_json::from_value(input.clone()) {
        Ok(p) => p,
        Err(e) => {
            return Ok(Outcome::error(format!(
                "invalid arguments for run_command: {e}"
            )));
        }
    };
    if parsed.command.trim().is_empty() || parsed.command.len() > 16 * 1024 {
        return Ok(Outcome::error("command: 1 to 16384 bytes"));
    }
    let drive = io.drive().clone();
    let cwd = io.cwd().map(str::to_owned);
    let base = tokio::task::spawn_blocking(move || {
        super::sandbox(&drive, cwd.as_deref()).map(|s| s.base().to_path_buf())
    })
    .await
    .unwrap_or_else(|_| Err("the working directory cannot be checked".into()));
    let base = match base {
        Ok(b) => b,
        Err(e) => return Ok(Outcome::error(e)),
    };
    let mut spec = match spec_for(cfg, &parsed.command, &base) {
        Ok(s) => s,
        Err(e) => return Ok(Outcome::error(e)),
    };
    spec.env
        .insert("SESSIOND_SESSION_ID".into(), io.session_id().to_owned());
    let mut child = match Process::spawn(&spec) {
        Ok(c) => c,
        Err(e) => return Ok(Outcome::error(format!("cannot start the command: {e}"))),
    };
    let limit = Duration::from_millis(
        parsed
            .timeout_ms
            .unwrap_or(cfg.timeout_ms)
            .clamp(1, cfg.timeout_ms),
    );
    let deadline = tokio::time::Instant::now() + limit;
    let foreground_until = if parsed.background {
        tokio::time::Instant::now()
    } else {
        tokio::time::Instant::now() + Duration::from_millis(cfg.background_after_ms)
    };
    let mut capture = Capture::new(cfg.max_output_bytes);
    let mut cancel = io.cancel_watch();
    // The foreground part: the tool call waits for the command.
    loop {
        let next = tokio::select! {
            out = child.next() => out,
            _ = tokio::time::sleep_until(foreground_until) => break,
            _ = tokio::time::sleep_until(deadline) => {
                child.kill_group().await;
                capture.push(&format!("[stopped after {} s (timeout)]", limit.as_secs()));
                return Ok(Outcome::error(capture.text()));
            }
            () = stopped(&mut cancel) => {
                child.kill_group().await;
                return Ok(Outcome::error("interrupted"));
            }
        };
        match next {
            Some(Output::Line(line)) => capture.push(&line),
            Some(Output::LineTooLong(n)) => {
                capture.push(&format!("[a line of {n} bytes left out]"))
            }
            Some(Output::Exited(status)) => {
                let mut text = capture.text();
                if !cfg.allow.is_empty() {
                    let err = child.stderr_tail();
                    if !err.trim().is_empty() {
                        text.push_str("[stderr]\n");
                        text.push_str(&err);
                    }
                }
                let summary = describe_status(status);
                return Ok(Outcome::Done {
                    text: format!("{summary}\n{text}"),
                    is_error: !status.success(),
                });
            }
            None => return Ok(Outcome::error("the command ended without a status")),
        }
    }
    // Still running: it becomes a background task of the turn.
    let label: String = parsed.command.chars().take(200).collect();
    let id = io.start_task("tool", "run_command", &label).await?;
    let so_far = capture.text();
    if !so_far.is_empty() {
        io.task_output(&id, &so_far).await?;
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let mut stop = bg.stop.subscribe();
    let max = cfg.max_output_bytes;
    let separate_stderr = !cfg.allow.is_empty();
    tokio::spawn(async move {
        let mut capture = Capture::new(max);
        loop {
            let next = tokio::select! {
                out = child.next() => out,
                _ = tokio::time::sleep_until(deadline) => {
                    child.kill_group().await;
                    let _ = tx.send(BgEvent::Done { ok: false, summary: format!("stopped after {} s (timeout)", limit.as_secs()) });
                    return;
                }
                () = stopped(&mut stop) => {
                    child.kill_group().await;
                    return;
                }
            };
            match next {
                Some(Output::Line(line)) => {
                    capture.push(&line);
                    let _ = tx.send(BgEvent::Output(format!("{line}\n")));
                }
                Some(Output::LineTooLong(n)) => {
                    let _ = tx.send(BgEvent::Output(format!("[a line of {n} bytes left out]\n")));
                }
                Some(Output::Exited(status)) => {
                    let mut tail = capture.text();
                    if separate_stderr {
                        tail.push_str(&child.stderr_tail());
                    }
                    let last: String = tail
                        .chars()
                        .rev()
                        .take(4000)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect();
                    let _ = tx.send(BgEvent::Done {
                        ok: status.success(),
                        summary: format!("{}; output ends with:\n{last}", describe_status(status)),
                    });
                    return;
                }
                None => return,
            }
        }
    });
    bg.tasks.push(BgTask {
        id: id.clone(),
        command: label,
        rx,
    });
    Ok(Outcome::ok(format!(
        "still running; it continues as background task {id}. Output so far:\n{so_far}\n\
         Its result will arrive as a message when it finishes."
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_split_like_a_shell_and_operators_are_refused() {
        assert_eq!(
            split_words(r#"cargo test -p "my crate" 'a b' c\ d"#).unwrap(),
            ["cargo", "test", "-p", "my crate", "a b", "c d"]
        );
        for bad in [
            "ls; rm -rf /",
            "cat x | sh",
            "echo $(id)",
            "a && b",
            "x > y",
            "echo `id`",
            "echo \"$HOME\"",
            "ls *",
        ] {
            assert!(split_words(bad).is_err(), "{bad}");
        }
        assert!(split_words("'open").is_err());
    }

    #[test]
    fn only_listed_programs_start_without_a_shell() {
        let cfg = RunCommandConfig {
            enabled: true,
            allow: vec!["ls".into()],
            ..Default::default()
        };
        let dir = std::path::Path::new("/tmp");
        let spec = spec_for(&cfg, "ls -la src", dir).unwrap();
        assert_eq!(spec.program, "ls");
        assert_eq!(spec.args, ["-la", "src"]);
        assert!(spec_for(&cfg, "rm -rf x", dir).is_err());
        assert!(
            spec_for(&cfg, "/bin/ls", dir).is_err(),
            "a path is not the name"
        );
        let open = RunCommandConfig::default();
        assert_eq!(spec_for(&open, "ls | wc -l", dir).unwrap().program, "sh");
    }

    #[test]
    fn capture_keeps_the_head_and_the_tail() {
        let mut c = Capture::new(100);
        for i in 0..100 {
            c.push(&format!("line {i:03}"));
        }
        let t = c.text();
        assert!(t.starts_with("line 000\n"));
        assert!(t.ends_with("line 099\n"));
        assert!(t.contains("left out"));
        assert!(t.len() < 200);
    }
}
