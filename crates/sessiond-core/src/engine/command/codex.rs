//! Codex's `exec --json` output (`codex exec --json`).
//!
//! Codex reports a thread (`thread.started` names it: the id `exec resume <id>` continues) and
//! items that start, update and complete: agent messages, reasoning summaries, shell commands,
//! file changes, MCP tool calls, web searches, a todo list, and non-fatal errors. A message or a
//! reasoning summary is recorded once, when it completes; a tool-like item starts a tool call when
//! it starts and ends it when it completes. Top-level `error` lines are often transient
//! (`Reconnecting… 1/5`), so they are recorded as warnings and fail the turn only if the run then
//! fails; `turn.failed` fails it. Codex counts cached input inside `input_tokens`; sessiond's
//! `input` is the uncached part.

use serde_json::{Value, json};

use super::{Action, Adapter, usage};
use crate::timeline::{Step, Todo, TodoStatus, ToolOutputPart};

/// The arguments that continue thread `id`; `-` makes `resume` read its prompt from stdin.
pub(super) fn resume_args(id: &str, prompt_on_stdin: bool) -> Vec<String> {
    let mut args = vec!["resume".to_owned(), id.to_owned()];
    if prompt_on_stdin {
        args.push("-".to_owned());
    }
    args
}

pub(super) struct Codex;

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn text(text: &str) -> Option<Vec<ToolOutputPart>> {
    Some(vec![ToolOutputPart::Text {
        text: text.to_owned(),
    }])
}

impl Adapter for Codex {
    fn line(&mut self, v: &Value) -> Vec<Action> {
        match str_of(v, "type") {
            "thread.started" => match str_of(v, "thread_id") {
                "" => Vec::new(),
                id => vec![Action::CliSession(id.to_owned())],
            },
            "item.started" | "item.updated" | "item.completed" => {
                let Some(item) = v.get("item") else {
                    return Vec::new();
                };
                let done = str_of(v, "type") == "item.completed";
                let started = str_of(v, "type") == "item.started";
                item_actions(item, started, done)
            }
            "turn.completed" => {
                let u = v.get("usage").cloned().unwrap_or_else(|| json!({}));
                let cached = num(&u, "cached_input_tokens");
                vec![Action::Usage {
                    usage: usage(
                        (num(&u, "input_tokens") - cached).max(0.0),
                        num(&u, "output_tokens"),
                        cached,
                        0.0,
                        0.0,
                    ),
                    context_window: 0.0,
                }]
            }
            "turn.failed" => {
                let message = v
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("the turn failed");
                vec![Action::Error(format!("codex: {message}"))]
            }
            "error" => vec![Action::Warning(format!("codex: {}", str_of(v, "message")))],
            _ => Vec::new(),
        }
    }
}

fn item_actions(item: &Value, started: bool, done: bool) -> Vec<Action> {
    let id = str_of(item, "id").to_owned();
    let status = str_of(item, "status");
    let failed = matches!(status, "failed" | "declined");
    let tool = |name: &str, input: Value, is_error: bool, output| {
        if done {
            Some(Action::Step(Step::ToolCall {
                tool_name: name.to_owned(),
                tool_call_id: id.clone(),
                input: Some(input),
                is_error,
                output,
            }))
        } else if started {
            Some(Action::Step(Step::ToolCallStart {
                tool_name: name.to_owned(),
                tool_call_id: id.clone(),
                input: Some(input),
            }))
        } else {
            None
        }
    };
    let action = match str_of(item, "type") {
        "agent_message" if done => Some(Action::Step(Step::Text {
            text: str_of(item, "text").to_owned(),
        })),
        "reasoning" if done => Some(Action::Step(Step::Reasoning {
            text: str_of(item, "text").to_owned(),
        })),
        "command_execution" => {
            let exit = item.get("exit_code").and_then(Value::as_i64);
            tool(
                "shell",
                json!({ "command": str_of(item, "command") }),
                failed || exit.is_some_and(|c| c != 0),
                text(str_of(item, "aggregated_output")),
            )
        }
        "file_change" => {
            let changes = item.get("changes").cloned().unwrap_or_else(|| json!([]));
            let summary: Vec<String> = changes
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| format!("{} {}", str_of(c, "kind"), str_of(c, "path")))
                .collect();
            tool(
                "file_change",
                json!({ "changes": changes }),
                failed,
                text(&summary.join("\n")),
            )
        }
        "mcp_tool_call" => {
            let name = format!("{}.{}", str_of(item, "server"), str_of(item, "tool"));
            let input = item.get("arguments").cloned().unwrap_or(Value::Null);
            let error = item.pointer("/error/message").and_then(Value::as_str);
            let output = match error {
                Some(message) => text(message),
                None => Some(
                    item.pointer("/result/content")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.get("text").and_then(Value::as_str))
                        .map(|t| ToolOutputPart::Text { text: t.to_owned() })
                        .collect(),
                ),
            };
            tool(&name, input, failed || error.is_some(), output)
        }
        "web_search" => tool(
            "web_search",
            json!({ "query": str_of(item, "query") }),
            false,
            None,
        ),
        "todo_list" => Some(Action::Todos(
            item.get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, t)| Todo {
                    id: format!("todo-{}", i + 1),
                    content: str_of(t, "text").to_owned(),
                    status: if t.get("completed").and_then(Value::as_bool) == Some(true) {
                        TodoStatus::Completed
                    } else {
                        TodoStatus::Pending
                    },
                })
                .collect(),
        )),
        "error" if done || started => Some(Action::Warning(format!(
            "codex: {}",
            str_of(item, "message")
        ))),
        _ => None,
    };
    action.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(fixture: &str) -> Vec<Action> {
        super::super::replay(&mut Codex, fixture)
    }

    #[test]
    fn the_recorded_stream_maps_to_steps_todos_usage() {
        let got = actions(include_str!(
            "../../../../../tests/fixtures/codex-exec.jsonl"
        ));
        let mut it = got.iter();
        assert!(
            matches!(it.next(), Some(Action::CliSession(id)) if id == "0199a213-81c0-7800-8aa1-bbab2a035a53")
        );
        assert!(
            matches!(it.next(), Some(Action::Step(Step::Reasoning { text })) if text.contains("Counting files"))
        );
        match it.next() {
            Some(Action::Todos(t)) => {
                assert_eq!(t.len(), 2);
                assert!(t.iter().all(|t| t.status == TodoStatus::Pending));
                assert_eq!(t[0].content, "List the files");
            }
            other => panic!("{other:?}"),
        }
        match it.next() {
            Some(Action::Step(Step::ToolCallStart {
                tool_name,
                tool_call_id,
                input: Some(input),
            })) => {
                assert_eq!(
                    (tool_name.as_str(), tool_call_id.as_str()),
                    ("shell", "item_2")
                );
                assert_eq!(input["command"], "bash -lc 'ls | wc -l'");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            it.next(),
            Some(Action::Step(Step::ToolCall { is_error: false, output: Some(out), .. }))
                if matches!(&out[..], [ToolOutputPart::Text { text }] if text == "3\n")
        ));
        assert!(matches!(
            it.next(),
            Some(Action::Step(Step::ToolCallStart { .. }))
        ));
        assert!(matches!(
            it.next(),
            Some(Action::Step(Step::ToolCall { is_error: true, tool_call_id, .. })) if tool_call_id == "item_3"
        ));
        assert!(
            matches!(it.next(), Some(Action::Todos(t)) if t[0].status == TodoStatus::Completed && t[1].status == TodoStatus::Pending)
        );
        assert!(matches!(
            it.next(),
            Some(Action::Step(Step::ToolCall { tool_name, output: Some(out), .. }))
                if tool_name == "file_change" && matches!(&out[..], [ToolOutputPart::Text { text }] if text == "add notes/count.txt")
        ));
        assert!(
            matches!(it.next(), Some(Action::Step(Step::Text { text })) if text.starts_with("There are 3 files"))
        );
        assert!(
            matches!(it.next(), Some(Action::Todos(t)) if t.iter().all(|t| t.status == TodoStatus::Completed))
        );
        match it.next() {
            Some(Action::Usage { usage, .. }) => {
                assert_eq!(
                    (
                        usage.input,
                        usage.cache_read,
                        usage.output,
                        usage.total_tokens
                    ),
                    (1000.0, 200.0, 345.0, 1545.0)
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(it.next().is_none());
    }

    #[test]
    fn failures_mcp_calls_and_warnings() {
        let got = actions(concat!(
            r#"{"type":"error","message":"Reconnecting... 1/5"}"#,
            "\n",
            r#"{"type":"item.completed","item":{"id":"i9","type":"mcp_tool_call","server":"fs","tool":"read","arguments":{"path":"a"},"result":null,"error":{"message":"denied"},"status":"failed"}}"#,
            "\n",
            r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#,
        ));
        assert!(matches!(&got[0], Action::Warning(m) if m == "codex: Reconnecting... 1/5"));
        assert!(matches!(
            &got[1],
            Action::Step(Step::ToolCall { tool_name, is_error: true, input: Some(input), .. })
                if tool_name == "fs.read" && input["path"] == "a"
        ));
        assert!(matches!(&got[2], Action::Error(m) if m == "codex: stream disconnected"));
    }
}
