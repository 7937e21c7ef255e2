//! The generic protocol: sessiond's own JSON-lines format, for any program that wants to be an
//! agent without an adapter of its own. It is the timeline's vocabulary, one object per stdout
//! line, so a program needs no knowledge of sessiond beyond this table:
//!
//! | `type` | fields | becomes |
//! |---|---|---|
//! | `text_delta` | `delta` | live text progress (never stored) |
//! | `reasoning_delta` | `delta` | live reasoning progress (never stored) |
//! | `text` | `text` | a `text` step; the last one is the turn's reply |
//! | `reasoning` | `text` | a `reasoning` step |
//! | `tool_call_start` | `toolName`, `toolCallId`, `input?` | a `tool_call_start` step |
//! | `tool_call` | `toolName`, `toolCallId`, `input?`, `isError?`, `output?` (a string or `[{type:"text",text}` / `{type:"image",data,mimeType}]`) | a `tool_call` step |
//! | `todos` | `todos: [{id, content, status}]` (`pending`, `in_progress`, `completed`, `failed`) | the session's todo list |
//! | `usage` | `input`, `output`, `cacheRead?`, `cacheWrite?`, `cost?` (total, in USD), `model?` (accepted, not recorded) | a `usage` event with measured tokens |
//! | `system` | `message` | a `system` step |
//! | `ask` | `questions: [{question, header?, options: [{label, description?}], multiSelect?}]` | the turn ends `ask` when the program exits; the answer is the next run's prompt |
//! | `sleep` | `wakeAt` (RFC 3339) or `seconds` | the turn ends `sleep` when the program exits; at the wake (or an earlier message) it runs again |
//! | `task_started` | `taskId` (the program's own), `name`, `label?`, `kind?` (`tool`, `subagent`, `scheduled`) | a background task (`task_started`; sessiond gives it its own id) |
//! | `task_output` | `taskId`, `chunk` | `task_output` (and `heartbeat`s while tasks run) |
//! | `task_settled` | `taskId`, `status` (`completed`, `failed`, `stopped`), `detail?` | `task_settled`; tasks still running when the turn ends are settled `stopped` |
//! | `result` | `text?` | the turn's result (shown as a text step if the run wrote none) |
//! | `error` | `message` | the turn fails with `message` |
//!
//! Lines of other types are ignored, so a program may write more than this (and a later sessiond
//! may understand more). The program exits 0 when it is done; `SESSIOND_SESSION_ID` lets it keep
//! its own state per session.

use serde::Deserialize;
use serde_json::Value;

use super::{Action, Adapter, malformed, usage};
use crate::timeline::{AskQuestion, Step, Todo, ToolOutputPart};

const TYPES: [&str; 16] = [
    "text_delta",
    "reasoning_delta",
    "text",
    "reasoning",
    "tool_call_start",
    "tool_call",
    "todos",
    "usage",
    "system",
    "ask",
    "result",
    "error",
    "sleep",
    "task_started",
    "task_output",
    "task_settled",
];

#[derive(Deserialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
enum Line {
    TextDelta {
        delta: String,
    },
    ReasoningDelta {
        delta: String,
    },
    Text {
        text: String,
    },
    Reasoning {
        text: String,
    },
    ToolCallStart {
        tool_name: String,
        tool_call_id: String,
        #[serde(default)]
        input: Option<Value>,
    },
    ToolCall {
        tool_name: String,
        tool_call_id: String,
        #[serde(default)]
        input: Option<Value>,
        #[serde(default)]
        is_error: bool,
        #[serde(default)]
        output: Option<ToolOutput>,
    },
    Todos {
        todos: Vec<Todo>,
    },
    Usage {
        #[serde(default)]
        input: f64,
        #[serde(default)]
        output: f64,
        #[serde(default)]
        cache_read: f64,
        #[serde(default)]
        cache_write: f64,
        #[serde(default)]
        cost: f64,
    },
    System {
        message: String,
    },
    Ask {
        questions: Vec<AskQuestion>,
    },
    Result {
        #[serde(default)]
        text: Option<String>,
    },
    Error {
        message: String,
    },
    Sleep {
        #[serde(default)]
        wake_at: Option<String>,
        #[serde(default)]
        seconds: Option<f64>,
    },
    TaskStarted {
        task_id: String,
        name: String,
        #[serde(default)]
        label: Option<String>,
        #[serde(default)]
        kind: Option<TaskKind>,
    },
    TaskOutput {
        task_id: String,
        chunk: String,
    },
    TaskSettled {
        task_id: String,
        status: SettledAs,
        #[serde(default)]
        detail: Option<Value>,
    },
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum TaskKind {
    Tool,
    Subagent,
    Scheduled,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum SettledAs {
    Completed,
    Failed,
    Stopped,
}

/// The longest sleep a program may ask for.
const MAX_SLEEP_MS: i64 = 365 * 24 * 3_600_000;

#[derive(Deserialize)]
#[serde(untagged)]
enum ToolOutput {
    Text(String),
    Parts(Vec<ToolOutputPart>),
}

pub(super) struct Generic;

impl Adapter for Generic {
    fn line(&mut self, v: &Value) -> Vec<Action> {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
        if !TYPES.contains(&kind) {
            return Vec::new();
        }
        let line = match Line::deserialize(v) {
            Ok(line) => line,
            Err(e) => return vec![malformed(kind, e)],
        };
        let action = match line {
            Line::TextDelta { delta } => Action::Delta(Step::TextDelta { delta }),
            Line::ReasoningDelta { delta } => Action::Delta(Step::ReasoningDelta { delta }),
            Line::Text { text } => Action::Step(Step::Text { text }),
            Line::Reasoning { text } => Action::Step(Step::Reasoning { text }),
            Line::ToolCallStart {
                tool_name,
                tool_call_id,
                input,
            } => Action::Step(Step::ToolCallStart {
                tool_name,
                tool_call_id,
                input,
            }),
            Line::ToolCall {
                tool_name,
                tool_call_id,
                input,
                is_error,
                output,
            } => Action::Step(Step::ToolCall {
                tool_name,
                tool_call_id,
                input,
                is_error,
                output: output.map(|o| match o {
                    ToolOutput::Text(text) => vec![ToolOutputPart::Text { text }],
                    ToolOutput::Parts(parts) => parts,
                }),
            }),
            Line::Todos { todos } => Action::Todos(todos),
            Line::Usage {
                input,
                output,
                cache_read,
                cache_write,
                cost,
            } => Action::Usage {
                usage: usage(input, output, cache_read, cache_write, cost),
                context_window: 0.0,
            },
            Line::System { message } => Action::Step(Step::System { message }),
            Line::Ask { questions } if questions.is_empty() => {
                return vec![malformed(kind, "`questions` is empty")];
            }
            Line::Ask { questions } => Action::Ask(questions),
            Line::Result { text } => Action::Result(text.unwrap_or_default()),
            Line::Error { message } => Action::Error(message),
            Line::Sleep { wake_at, seconds } => {
                let now = crate::clock::now_ms();
                let at = match (wake_at, seconds) {
                    (Some(t), _) => humantime::parse_rfc3339_weak(t.trim())
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map(|d| d.as_millis() as i64),
                    (None, Some(s)) if s.is_finite() && s >= 0.0 => {
                        Some(now.saturating_add((s * 1000.0) as i64))
                    }
                    _ => None,
                };
                match at {
                    Some(at) => Action::Sleep(at.clamp(now, now + MAX_SLEEP_MS)),
                    None => {
                        return vec![malformed(
                            kind,
                            "give `wakeAt` (RFC 3339) or `seconds` (>= 0)",
                        )];
                    }
                }
            }
            Line::TaskStarted {
                task_id,
                name,
                label,
                kind: task_kind,
            } => Action::TaskStarted {
                label: label.unwrap_or_else(|| name.clone()),
                kind: match task_kind.unwrap_or(TaskKind::Tool) {
                    TaskKind::Tool => "tool",
                    TaskKind::Subagent => "subagent",
                    TaskKind::Scheduled => "scheduled",
                },
                id: task_id,
                name,
            },
            Line::TaskOutput { task_id, chunk } => Action::TaskOutput { id: task_id, chunk },
            Line::TaskSettled {
                task_id,
                status,
                detail,
            } => Action::TaskSettled {
                id: task_id,
                status: match status {
                    SettledAs::Completed => "completed",
                    SettledAs::Failed => "failed",
                    SettledAs::Stopped => "stopped",
                },
                detail: detail.unwrap_or(Value::Null),
            },
        };
        vec![action]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::TodoStatus;

    fn actions(fixture: &str) -> Vec<Action> {
        super::super::replay(&mut Generic, fixture)
    }

    #[test]
    fn the_recorded_stream_maps_line_by_line() {
        let got = actions(include_str!("../../../../../tests/fixtures/generic.jsonl"));
        let kinds: Vec<String> = got
            .iter()
            .map(|a| match a {
                Action::Delta(s) | Action::Step(s) => format!("{s:?}")
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_owned(),
                other => format!("{other:?}")
                    .split(['(', ' ', '{'])
                    .next()
                    .unwrap_or("")
                    .to_owned(),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "ReasoningDelta",
                "Reasoning",
                "Todos",
                "ToolCallStart",
                "ToolCall",
                "ToolCall",
                "System",
                "TextDelta",
                "Text",
                "Usage",
                "Result",
            ]
        );
        match &got[2] {
            Action::Todos(t) => {
                assert_eq!(t[0].id, "t1");
                assert_eq!(t[0].status, TodoStatus::InProgress);
            }
            other => panic!("{other:?}"),
        }
        match &got[4] {
            Action::Step(Step::ToolCall {
                output: Some(parts),
                is_error: false,
                ..
            }) => {
                assert!(matches!(&parts[..], [ToolOutputPart::Text { text }] if text == "3 files"))
            }
            other => panic!("{other:?}"),
        }
        match &got[5] {
            Action::Step(Step::ToolCall {
                output: Some(parts),
                is_error: true,
                ..
            }) => {
                assert!(
                    matches!(&parts[..], [ToolOutputPart::Text { text }] if text == "no such file")
                )
            }
            other => panic!("{other:?}"),
        }
        match &got[9] {
            Action::Usage { usage, .. } => {
                assert_eq!(
                    (
                        usage.input,
                        usage.output,
                        usage.cache_read,
                        usage.total_tokens
                    ),
                    (120.0, 30.0, 10.0, 160.0)
                );
                assert_eq!(usage.cost.total, 0.0012);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ask_error_and_malformed_lines() {
        let got = actions(concat!(
            r#"{"type":"ask","questions":[{"question":"Which colour?","options":[{"label":"red"}],"multiSelect":true}]}"#,
            "\n",
            r#"{"type":"error","message":"quota exhausted"}"#,
            "\n",
            r#"{"type":"ask","questions":[]}"#,
            "\n",
            r#"{"type":"tool_call","toolName":"x"}"#,
            "\n",
            r#"{"type":"todos","todos":[{"id":"a","content":"b","status":"someday"}]}"#,
        ));
        assert!(
            matches!(&got[0], Action::Ask(q) if q[0].question == "Which colour?" && q[0].multi_select == Some(true))
        );
        assert!(matches!(&got[1], Action::Error(m) if m == "quota exhausted"));
        for a in &got[2..] {
            assert!(
                matches!(a, Action::Step(Step::System { message }) if message.starts_with("ignored a malformed")),
                "{a:?}"
            );
        }
        assert_eq!(got.len(), 5);
    }
}
