//! Claude Code's `stream-json` output (`claude -p --output-format stream-json --verbose`).
//!
//! The stream is the Anthropic message format wrapped in envelopes: `system/init` names the
//! conversation (`session_id`), `assistant` messages carry `text`, `thinking` and `tool_use`
//! blocks, `user` messages carry the `tool_result`s, and one `result` line ends the run with its
//! cumulative usage and cost. With `--include-partial-messages`, `stream_event` lines add live
//! text and thinking deltas. A tool result names only its `tool_use_id`, so the adapter remembers
//! each call's name and input until its result arrives. `TodoWrite` calls are also the session's
//! todo list. Usage is the `result`'s (cumulative for the run; per-message usage is not added up,
//! since a message's usage repeats on each of its blocks).

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{Action, Adapter, usage};
use crate::timeline::{Step, Todo, TodoStatus, ToolOutputPart};

/// The arguments that continue conversation `id`.
pub(super) fn resume_args(id: &str) -> [String; 2] {
    ["--resume".to_owned(), id.to_owned()]
}

#[derive(Default)]
pub(super) struct Claude {
    /// Name and input of each tool call, by `tool_use` id, until its result.
    calls: HashMap<String, (String, Value)>,
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

impl Adapter for Claude {
    fn line(&mut self, v: &Value) -> Vec<Action> {
        match str_of(v, "type").unwrap_or("") {
            "system" if str_of(v, "subtype") == Some("init") => str_of(v, "session_id")
                .map(|id| vec![Action::CliSession(id.to_owned())])
                .unwrap_or_default(),
            "assistant" => self.assistant(v),
            "user" => self.tool_results(v),
            "stream_event" => stream_delta(v).into_iter().collect(),
            "result" => result(v),
            _ => Vec::new(),
        }
    }
}

impl Claude {
    fn assistant(&mut self, v: &Value) -> Vec<Action> {
        let mut out = Vec::new();
        for block in blocks(v) {
            match str_of(block, "type").unwrap_or("") {
                "text" => {
                    let text = str_of(block, "text").unwrap_or("");
                    if !text.is_empty() {
                        out.push(Action::Step(Step::Text {
                            text: text.to_owned(),
                        }));
                    }
                }
                "thinking" => {
                    let text = str_of(block, "thinking").unwrap_or("");
                    if !text.is_empty() {
                        out.push(Action::Step(Step::Reasoning {
                            text: text.to_owned(),
                        }));
                    }
                }
                "tool_use" => {
                    let id = str_of(block, "id").unwrap_or("").to_owned();
                    let name = str_of(block, "name").unwrap_or("tool").to_owned();
                    let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                    if name == "TodoWrite"
                        && let Some(todos) = todo_list(&input)
                    {
                        out.push(Action::Todos(todos));
                    }
                    self.calls.insert(id.clone(), (name.clone(), input.clone()));
                    out.push(Action::Step(Step::ToolCallStart {
                        tool_name: name,
                        tool_call_id: id,
                        input: Some(input),
                    }));
                }
                _ => {}
            }
        }
        out
    }

    fn tool_results(&mut self, v: &Value) -> Vec<Action> {
        blocks(v)
            .filter(|b| str_of(b, "type") == Some("tool_result"))
            .map(|b| {
                let id = str_of(b, "tool_use_id").unwrap_or("").to_owned();
                let (name, input) = self
                    .calls
                    .remove(&id)
                    .map_or(("tool".to_owned(), None), |(n, i)| (n, Some(i)));
                Action::Step(Step::ToolCall {
                    tool_name: name,
                    tool_call_id: id,
                    input,
                    is_error: b.get("is_error").and_then(Value::as_bool).unwrap_or(false),
                    output: Some(tool_output(b.get("content"))),
                })
            })
            .collect()
    }
}

/// The content blocks of an `assistant` or `user` message (a plain-string content has none).
fn blocks(v: &Value) -> impl Iterator<Item = &Value> {
    v.pointer("/message/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A tool result's content: a string, or text and image blocks.
fn tool_output(content: Option<&Value>) -> Vec<ToolOutputPart> {
    match content {
        Some(Value::String(s)) => vec![ToolOutputPart::Text { text: s.clone() }],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| match str_of(p, "type") {
                Some("text") => Some(ToolOutputPart::Text {
                    text: str_of(p, "text").unwrap_or("").to_owned(),
                }),
                Some("image") => Some(ToolOutputPart::Image {
                    data: p.pointer("/source/data")?.as_str()?.to_owned(),
                    mime_type: p.pointer("/source/media_type")?.as_str()?.to_owned(),
                }),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// `TodoWrite`'s input as the session's todo list (items without an id are numbered).
fn todo_list(input: &Value) -> Option<Vec<Todo>> {
    let items = input.get("todos")?.as_array()?;
    Some(
        items
            .iter()
            .enumerate()
            .map(|(i, t)| Todo {
                id: str_of(t, "id").map_or_else(|| format!("todo-{}", i + 1), str::to_owned),
                content: str_of(t, "content").unwrap_or("").to_owned(),
                status: match str_of(t, "status") {
                    Some("in_progress") => TodoStatus::InProgress,
                    Some("completed") => TodoStatus::Completed,
                    _ => TodoStatus::Pending,
                },
            })
            .collect(),
    )
}

fn stream_delta(v: &Value) -> Option<Action> {
    let event = v.get("event")?;
    if str_of(event, "type") != Some("content_block_delta") {
        return None;
    }
    let delta = event.get("delta")?;
    match str_of(delta, "type")? {
        "text_delta" => Some(Action::Delta(Step::TextDelta {
            delta: str_of(delta, "text")?.to_owned(),
        })),
        "thinking_delta" => Some(Action::Delta(Step::ReasoningDelta {
            delta: str_of(delta, "thinking")?.to_owned(),
        })),
        _ => None,
    }
}

fn result(v: &Value) -> Vec<Action> {
    let mut out = Vec::new();
    if let Some(id) = str_of(v, "session_id") {
        out.push(Action::CliSession(id.to_owned()));
    }
    if let Some(u) = v.get("usage") {
        let context_window = v
            .get("modelUsage")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.values())
            .map(|m| num(m, "contextWindow"))
            .fold(0.0, f64::max);
        out.push(Action::Usage {
            usage: usage(
                num(u, "input_tokens"),
                num(u, "output_tokens"),
                num(u, "cache_read_input_tokens"),
                num(u, "cache_creation_input_tokens"),
                num(v, "total_cost_usd"),
            ),
            context_window,
        });
    }
    let subtype = str_of(v, "subtype").unwrap_or("success");
    let is_error = v.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    let text = str_of(v, "result").unwrap_or("").to_owned();
    if is_error || subtype != "success" {
        let errors: Vec<&str> = v
            .get("errors")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let detail = if !text.is_empty() {
            text
        } else if !errors.is_empty() {
            errors.join("; ")
        } else {
            "no detail".to_owned()
        };
        out.push(Action::Error(format!("claude: {subtype}: {detail}")));
    } else {
        out.push(Action::Result(text));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actions(fixture: &str) -> Vec<Action> {
        super::super::replay(&mut Claude::default(), fixture)
    }

    #[test]
    fn the_recorded_stream_maps_to_steps_todos_usage_and_result() {
        let got = actions(include_str!(
            "../../../../../tests/fixtures/claude-stream.jsonl"
        ));
        let mut it = got.iter();
        assert!(
            matches!(it.next(), Some(Action::CliSession(id)) if id == "9d3c7a52-5f0e-4c41-b7de-claude000001")
        );
        assert!(
            matches!(it.next(), Some(Action::Step(Step::Reasoning { text })) if text.starts_with("The user wants"))
        );
        match it.next() {
            Some(Action::Todos(t)) => {
                assert_eq!(t.len(), 2);
                assert_eq!(
                    (t[0].id.as_str(), t[0].content.as_str(), t[0].status),
                    ("todo-1", "List the files", TodoStatus::InProgress)
                );
                assert_eq!(t[1].status, TodoStatus::Pending);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(it.next(), Some(Action::Step(Step::ToolCallStart { tool_name, .. })) if tool_name == "TodoWrite")
        );
        assert!(
            matches!(it.next(), Some(Action::Step(Step::ToolCall { tool_name, is_error: false, .. })) if tool_name == "TodoWrite")
        );
        match it.next() {
            Some(Action::Step(Step::ToolCallStart {
                tool_name,
                tool_call_id,
                input: Some(input),
            })) => {
                assert_eq!(
                    (tool_name.as_str(), tool_call_id.as_str()),
                    ("Bash", "toolu_01BASH")
                );
                assert_eq!(input["command"], "ls | wc -l");
            }
            other => panic!("{other:?}"),
        }
        match it.next() {
            Some(Action::Step(Step::ToolCall {
                tool_name,
                input: Some(input),
                is_error: false,
                output: Some(out),
                ..
            })) => {
                assert_eq!(tool_name, "Bash");
                assert_eq!(input["command"], "ls | wc -l");
                assert!(matches!(&out[..], [ToolOutputPart::Text { text }] if text == "3"));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(it.next(), Some(Action::Step(Step::ToolCallStart { tool_name, .. })) if tool_name == "Read")
        );
        assert!(
            matches!(it.next(), Some(Action::Step(Step::ToolCall { tool_name, is_error: true, .. })) if tool_name == "Read")
        );
        assert!(
            matches!(it.next(), Some(Action::Delta(Step::TextDelta { delta })) if delta == "There are")
        );
        assert!(
            matches!(it.next(), Some(Action::Step(Step::Text { text })) if text == "There are 3 files in this directory.")
        );
        assert!(matches!(it.next(), Some(Action::CliSession(_))));
        match it.next() {
            Some(Action::Usage {
                usage,
                context_window,
            }) => {
                assert_eq!(
                    (
                        usage.input,
                        usage.output,
                        usage.cache_read,
                        usage.cache_write
                    ),
                    (40.0, 95.0, 3000.0, 200.0)
                );
                assert_eq!(usage.total_tokens, 3335.0);
                assert_eq!(usage.cost.total, 0.0421);
                assert_eq!(*context_window, 200000.0);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(it.next(), Some(Action::Result(text)) if text == "There are 3 files in this directory.")
        );
        assert!(it.next().is_none());
    }

    #[test]
    fn an_error_result_fails_the_run() {
        let got = actions(
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,"session_id":"s","num_turns":3}"#,
        );
        assert!(
            matches!(got.last(), Some(Action::Error(m)) if m == "claude: error_max_turns: no detail"),
            "{got:?}"
        );
        let got = actions(
            r#"{"type":"result","subtype":"success","is_error":true,"result":"Credit balance is too low"}"#,
        );
        assert!(
            matches!(got.last(), Some(Action::Error(m)) if m.contains("Credit balance is too low"))
        );
    }

    #[test]
    fn image_results_and_thinking_deltas() {
        let got = actions(concat!(
            r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"u1","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBOR"}}]}]}}"#,
            "\n",
            r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}}"#,
        ));
        match &got[0] {
            Action::Step(Step::ToolCall {
                tool_name,
                output: Some(out),
                ..
            }) => {
                assert_eq!(tool_name, "tool", "an unknown call keeps a generic name");
                assert!(
                    matches!(&out[..], [ToolOutputPart::Image { data, mime_type }] if data == "iVBOR" && mime_type == "image/png")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&got[1], Action::Delta(Step::ReasoningDelta { delta }) if delta == "hmm"));
    }
}
