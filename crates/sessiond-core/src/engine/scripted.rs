//! The scripted engine: deterministic turns driven by directives in the prompt, for demos and tests.
//!
//! One directive per line:
//!
//! | line | effect |
//! |---|---|
//! | `/reply TEXT` | streams TEXT as a delta, then stores it as the reply |
//! | `/stream N` | streams N deltas (`chunk 1 ` … `chunk N `), then stores their concatenation |
//! | `/slow MS` | pauses MS milliseconds before every later step and between deltas |
//! | `/ask QUESTION \| OPTION \| OPTION` | asks; after the answer the script goes on with the lines after it, or, with none left, replies `answer: <answer>` |
//! | `/sleep MS` | sleeps until now + MS; on wake the script goes on with the lines after it |
//! | `/tool NAME [INPUT]` | a `tool_call_start` and a `tool_call` step for tool NAME, its input the JSON object INPUT (else `{"script": true}`); nothing is run |
//! | `/todos A; B; C` | a `todos` event with one pending item per entry |
//! | `/fail MESSAGE` | ends the turn with `complete` status `failed` and MESSAGE as error |
//! | `/task NAME MS` | runs a background task NAME for MS milliseconds: `task_started`, `task_output` every 100 ms, `heartbeat`s, `task_settled` |
//! | `/title TEXT` | after the first turn, the automatic title is TEXT (`/title !fail` makes title generation fail) |
//! | `/await_steer` | waits (at most a minute) until a steer message reaches the turn, so a script can be steered at a known step |
//! | `/await_follow_up` | waits (at most a minute) until a follow-up message is queued behind the turn |
//! | `/hang` | waits until interrupted, making no progress (what the runner's stall guard ends) |
//! | `/recall` | replies with the conversation of earlier turns as a model engine is given it (`TurnIo::conversation`), one `[role] text` line per message |
//!
//! A prompt whose first line is not a directive is answered `echo: <prompt>`; other plain lines in
//! a script are replied as they are. A steer message that reaches a running turn is run after the
//! current step as more lines of the same script; plain steer text is acknowledged with
//! `steered: <text>`.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{BoxFuture, Engine, InputKind, TurnEnd, TurnInput};
use crate::clock;
use crate::engine::TurnIo;
use crate::error::Result;
use crate::timeline::{
    AskOption, AskQuestion, Event, Step, Tier, Todo, TodoStatus, ToolOutputPart,
};

/// How long `/await_steer` (`/await_follow_up`) waits for a steer (a follow-up) before the script
/// goes on without one.
const AWAIT_STEER_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);
/// How often `/await_steer` looks for a steer (the turn stays interruptible in between).
const AWAIT_STEER_POLL_MS: u64 = 5;

#[derive(Debug, Default)]
pub struct ScriptedEngine {
    /// The tiers this instance honours (all when empty); others are clamped to the nearest.
    pub tiers: Vec<Tier>,
    /// Plain replies also say how to configure a model (the engine nobody chose: sessiond runs
    /// it when no engine is configured and no OpenAI variables are set).
    pub hint: bool,
}

/// Appended to plain replies of the unconfigured default.
pub const MODEL_HINT: &str = "(This is sessiond's scripted demo engine. To answer with a model, \
start `sessiond serve` with OPENAI_API_KEY set (or OPENAI_BASE_URL for a local server such as \
Ollama, and OPENAI_MODEL to pick the model), or give the agent an engine; see \"Engines\" in the \
README.)";

/// How much of the earlier conversation `/recall` asks for (characters of JSON).
const RECALL_CHARS: usize = 200_000;

/// `/recall`'s reply: each message of a conversation as `[role] text` (text parts joined).
fn recall(messages: &[serde_json::Value]) -> String {
    let lines: Vec<String> = messages
        .iter()
        .map(|m| {
            let role = m.get("role").and_then(Value::as_str).unwrap_or("?");
            let text = match m.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(" "),
                _ => String::new(),
            };
            format!("[{role}] {text}")
        })
        .collect();
    if lines.is_empty() {
        "(no earlier conversation)".to_owned()
    } else {
        lines.join("\n")
    }
}

/// What survives an `ask` or a `sleep`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Continuation {
    lines: Vec<String>,
    slow_ms: u64,
}

fn is_directive(line: &str) -> bool {
    const NAMES: [&str; 14] = [
        "reply",
        "stream",
        "slow",
        "ask",
        "sleep",
        "tool",
        "todos",
        "fail",
        "task",
        "title",
        "await_steer",
        "await_follow_up",
        "hang",
        "recall",
    ];
    line.strip_prefix('/')
        .map(|rest| {
            let name = rest.split_whitespace().next().unwrap_or("");
            NAMES.contains(&name)
        })
        .unwrap_or(false)
}

/// Turns a prompt into script lines.
fn script_of(text: &str, prefix_plain: &str) -> Vec<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    match lines.first() {
        Some(first) if is_directive(first) => lines.iter().map(|l| (*l).to_owned()).collect(),
        _ => vec![format!("/reply {prefix_plain}{text}")],
    }
}

impl Engine for ScriptedEngine {
    fn name(&self) -> &'static str {
        "scripted"
    }

    fn describe(&self) -> String {
        if self.hint {
            "no model configured: set OPENAI_API_KEY or OPENAI_BASE_URL, or configure an engine"
                .into()
        } else {
            String::new()
        }
    }

    fn honoured_tier(&self, requested: Tier) -> Tier {
        super::nearest_tier(requested, &self.tiers)
    }

    fn title<'a>(
        &'a self,
        prompt: &'a str,
        _reply: &'a str,
    ) -> Option<BoxFuture<'a, Result<String>>> {
        let title = prompt
            .lines()
            .find_map(|l| l.trim().strip_prefix("/title "))?
            .trim()
            .to_owned();
        Some(Box::pin(async move {
            if title == "!fail" {
                Err(crate::Error::Internal("title generation failed".into()))
            } else {
                Ok(title)
            }
        }))
    }

    fn run<'a>(
        &'a self,
        io: &'a mut dyn TurnIo,
        input: TurnInput,
    ) -> BoxFuture<'a, Result<TurnEnd>> {
        Box::pin(async move {
            let resumed: Option<Continuation> = input
                .resume
                .clone()
                .and_then(|v| serde_json::from_value(v).ok());
            let (mut script, mut slow_ms): (VecDeque<String>, u64) = match (input.kind, resumed) {
                (InputKind::Answer, Some(c)) if c.lines.is_empty() => (
                    VecDeque::from([format!("/reply answer: {}", input.text)]),
                    c.slow_ms,
                ),
                (InputKind::Answer | InputKind::Wake, Some(c)) => (c.lines.into(), c.slow_ms),
                (InputKind::Answer, None) => (
                    VecDeque::from([format!("/reply answer: {}", input.text)]),
                    0,
                ),
                (InputKind::Wake, None) => return Ok(TurnEnd::Complete { result: None }),
                (InputKind::Prompt, _) => {
                    let mut script = script_of(&input.text, "echo: ");
                    if self.hint
                        && !is_directive(input.text.trim_start())
                        && let Some(line) = script.first_mut()
                    {
                        line.push_str("\n\n");
                        line.push_str(MODEL_HINT);
                    }
                    (script.into(), 0)
                }
            };
            let mut last_text: Option<String> = None;
            let mut first = true;
            loop {
                if !first {
                    for steer in io.take_steers().await? {
                        for (i, line) in script_of(&steer, "steered: ").into_iter().enumerate() {
                            script.insert(i, line);
                        }
                    }
                }
                let Some(line) = script.pop_front() else {
                    break;
                };
                if io.is_cancelled() {
                    return Ok(TurnEnd::Interrupted);
                }
                if !first && slow_ms > 0 && !io.pause(slow_ms).await {
                    return Ok(TurnEnd::Interrupted);
                }
                first = false;
                let (name, arg) = match line.strip_prefix('/') {
                    Some(rest) if is_directive(&line) => {
                        let mut parts = rest.splitn(2, char::is_whitespace);
                        (
                            parts.next().unwrap_or(""),
                            parts.next().unwrap_or("").trim(),
                        )
                    }
                    _ => ("reply", line.as_str()),
                };
                match name {
                    "reply" => {
                        io.delta(Step::TextDelta {
                            delta: arg.to_owned(),
                        });
                        // Every line's next step is a call on the turn: the text goes with it.
                        io.hold(Event::Step {
                            step: Step::Text {
                                text: arg.to_owned(),
                            },
                        })
                        .await?;
                        io.say(arg);
                        last_text = Some(arg.to_owned());
                    }
                    "stream" => {
                        let n: u32 = arg.parse().unwrap_or(1).min(100_000);
                        let mut text = String::new();
                        for i in 1..=n {
                            if i > 1 && slow_ms > 0 && !io.pause(slow_ms).await {
                                return Ok(TurnEnd::Interrupted);
                            }
                            if io.is_cancelled() {
                                return Ok(TurnEnd::Interrupted);
                            }
                            let delta = format!("chunk {i} ");
                            text.push_str(&delta);
                            io.delta(Step::TextDelta { delta });
                        }
                        io.hold(Event::Step {
                            step: Step::Text { text: text.clone() },
                        })
                        .await?;
                        io.say(&text);
                        last_text = Some(text);
                    }
                    "recall" => {
                        let text = recall(&io.conversation(RECALL_CHARS).await?);
                        io.delta(Step::TextDelta {
                            delta: text.clone(),
                        });
                        io.hold(Event::Step {
                            step: Step::Text { text: text.clone() },
                        })
                        .await?;
                        io.say(&text);
                        last_text = Some(text);
                    }
                    "slow" => slow_ms = arg.parse().unwrap_or(0).min(600_000),
                    "hang" => {
                        // No event, no delta, no heartbeat: only an interrupt (or the stall
                        // guard, which drops the turn) ends it.
                        let mut cancel = io.cancel_watch();
                        while !*cancel.borrow_and_update() {
                            if cancel.changed().await.is_err() {
                                break;
                            }
                        }
                        return Ok(TurnEnd::Interrupted);
                    }
                    "await_steer" | "await_follow_up" => {
                        let until = std::time::Instant::now() + AWAIT_STEER_LIMIT;
                        let steer = name == "await_steer";
                        let arrived = |io: &dyn TurnIo| {
                            if steer {
                                io.steer_waiting()
                            } else {
                                io.follow_up_waiting()
                            }
                        };
                        while !arrived(&*io) && std::time::Instant::now() < until {
                            if !io.pause(AWAIT_STEER_POLL_MS).await {
                                return Ok(TurnEnd::Interrupted);
                            }
                        }
                    }
                    "ask" => {
                        let mut parts = arg.split('|').map(str::trim);
                        let question = parts.next().unwrap_or("").to_owned();
                        let options = parts
                            .filter(|o| !o.is_empty())
                            .map(|o| AskOption {
                                label: o.to_owned(),
                                description: None,
                            })
                            .collect();
                        let resume = json!(Continuation {
                            lines: script.into(),
                            slow_ms
                        });
                        return Ok(TurnEnd::Ask {
                            questions: vec![AskQuestion {
                                question,
                                header: None,
                                options,
                                multi_select: None,
                            }],
                            resume,
                        });
                    }
                    "sleep" => {
                        let ms: i64 = arg.parse().unwrap_or(0);
                        let resume = json!(Continuation {
                            lines: script.into(),
                            slow_ms
                        });
                        return Ok(TurnEnd::Sleep {
                            wake_at: clock::now_ms() + ms.clamp(0, 365 * 24 * 3_600_000),
                            resume,
                        });
                    }
                    "tool" => {
                        let id = format!("call_{}", io.next_local_id());
                        // `/tool write_file {"path": "a.md"}`: the call as a model would make it.
                        let (arg, input) = match arg.split_once(' ') {
                            Some((name, rest)) => match serde_json::from_str::<Value>(rest) {
                                Ok(v @ Value::Object(_)) => (name, v),
                                _ => (arg, json!({ "script": true })),
                            },
                            None => (arg, json!({ "script": true })),
                        };
                        io.emit(Event::Step {
                            step: Step::ToolCallStart {
                                tool_name: arg.to_owned(),
                                tool_call_id: id.clone(),
                                input: Some(input.clone()),
                            },
                        })
                        .await?;
                        io.emit(Event::Step {
                            step: Step::ToolCall {
                                tool_name: arg.to_owned(),
                                tool_call_id: id,
                                input: Some(input),
                                is_error: false,
                                output: Some(vec![ToolOutputPart::Text {
                                    text: format!("{arg}: ok"),
                                }]),
                            },
                        })
                        .await?;
                    }
                    "todos" => {
                        let todos = arg
                            .split(';')
                            .map(str::trim)
                            .filter(|t| !t.is_empty())
                            .enumerate()
                            .map(|(i, t)| Todo {
                                id: format!("todo-{}", i + 1),
                                content: t.to_owned(),
                                status: TodoStatus::Pending,
                            })
                            .collect();
                        io.set_todos(todos).await?;
                    }
                    "task" => {
                        let mut parts = arg.split_whitespace();
                        let name = parts.next().unwrap_or("task").to_owned();
                        let ms: u64 = parts
                            .next()
                            .and_then(|m| m.parse().ok())
                            .unwrap_or(0)
                            .min(3_600_000);
                        let id = io
                            .start_task("tool", &name, &format!("{name} ({ms} ms)"))
                            .await?;
                        let ticks = (ms / 100).max(1);
                        for i in 1..=ticks {
                            if !io.pause(ms / ticks).await {
                                io.settle_task(&id, "stopped", json!("interrupted")).await?;
                                return Ok(TurnEnd::Interrupted);
                            }
                            io.task_output(&id, &format!("tick {i}/{ticks}\n")).await?;
                        }
                        io.settle_task(&id, "completed", json!(format!("{name} done")))
                            .await?;
                    }
                    "title" => {}
                    "fail" => {
                        return Ok(TurnEnd::Failed {
                            error: if arg.is_empty() {
                                "failed".into()
                            } else {
                                arg.to_owned()
                            },
                        });
                    }
                    _ => {}
                }
            }
            Ok(TurnEnd::Complete { result: last_text })
        })
    }
}
