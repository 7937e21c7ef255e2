//! Makes a conversation rebuilt from stored turns acceptable to chat-completions endpoints, which
//! refuse a tool result without its call and a call without its result.
//!
//! Both happen legitimately: a turn cut off between a tool call and its result, a sleep ended early
//! by a new message (the `sleep_until` call never gets its wake), or a history window that starts
//! right after a call.

use serde_json::{Value, json};

/// What the model is told about a call whose result was never recorded.
const NO_RESULT: &str = "(no result: the turn ended before this call finished)";

pub fn repair(messages: impl Iterator<Item = Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    // Ids of the last assistant message's calls that have no result yet.
    let mut open: Vec<String> = Vec::new();
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "tool" => {
                let id = m.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                if let Some(pos) = open.iter().position(|o| o == id) {
                    open.remove(pos);
                    out.push(m);
                }
            }
            "user" | "assistant" | "system" => {
                close(&mut out, &mut open);
                if role == "assistant" {
                    open = m
                        .get("tool_calls")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
                        .collect();
                }
                out.push(m);
            }
            _ => {}
        }
    }
    close(&mut out, &mut open);
    out
}

fn close(out: &mut Vec<Value>, open: &mut Vec<String>) {
    for id in open.drain(..) {
        out.push(json!({"role": "tool", "tool_call_id": id, "content": NO_RESULT}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(v: &[Value]) -> Vec<String> {
        v.iter()
            .map(|m| {
                let r = m["role"].as_str().unwrap_or("").to_owned();
                match m.get("tool_call_id").and_then(Value::as_str) {
                    Some(id) => format!("{r}:{id}"),
                    None => r,
                }
            })
            .collect()
    }

    #[test]
    fn orphan_results_are_dropped_and_missing_results_filled_in() {
        let input = vec![
            json!({"role": "tool", "tool_call_id": "x", "content": "orphan"}),
            json!({"role": "user", "content": "hi"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "a"}, {"id": "b"}]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "ok"}),
            json!({"role": "user", "content": "next"}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}),
        ];
        let out = repair(input.into_iter());
        assert_eq!(
            roles(&out),
            [
                "user",
                "assistant",
                "tool:a",
                "tool:b",
                "user",
                "assistant",
                "tool:c"
            ]
        );
        assert_eq!(out[3]["content"], NO_RESULT);
    }

    #[test]
    fn a_result_in_the_next_turn_pairs_with_its_call() {
        let input = vec![
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "ask"}]}),
            json!({"role": "tool", "tool_call_id": "ask", "content": "yes"}),
            json!({"role": "assistant", "content": "done"}),
        ];
        assert_eq!(
            roles(&repair(input.into_iter())),
            ["assistant", "tool:ask", "assistant"]
        );
    }
}
