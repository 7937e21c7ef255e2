//! Task message content both ways: what a client sends (`TaskMessageContent` params) becomes a
//! prompt, a note or an agent message; what the timeline holds reads back as `TaskMessage`s.
//!
//! | timeline event | message content |
//! |---|---|
//! | `prompt_submitted`, `note_submitted`, `answer_submitted` | `text`, author `user` (attachments: drive files, `file_id` is the path) |
//! | `agent_message`, `step` `text` | `text`, author `agent` |
//! | `ask` | `text` (markdown: the questions and their options), author `agent` |
//! | `step` `reasoning` | `reasoning` (`content: [text]`), author `agent` |
//! | `step` `tool_call_start` | `tool_request` (`arguments`: the tool input) |
//! | `step` `tool_call` | `tool_response` (`content`: the tool's text output) |
//!
//! A message's id is `<task id>.<seq>`: the task and the event it reads from, so it is the same on
//! every read and in every stream.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::view;
use crate::error::{Error, Result};
use crate::store::StoredEvent;
use crate::store::agentex::{MessageRow, Revises};
use crate::timeline::AttachmentRef;

pub fn message_id(task_id: &str, seq: u64) -> String {
    format!("{task_id}.{seq}")
}

/// `(task id, seq)` of a message id.
pub fn parse_message_id(id: &str) -> Option<(&str, u64)> {
    let (task, seq) = id.rsplit_once('.')?;
    let seq = seq.parse().ok().filter(|s| *s > 0)?;
    crate::ids::looks_like_id(task).then_some((task, seq))
}

/// A `TaskMessage` read from a stored event, if the event is a message.
pub fn message(task_id: &str, e: &StoredEvent) -> Option<Value> {
    let event: Value = serde_json::from_str(&e.body).ok()?;
    let content = content_of(&event)?;
    Some(json!({
        "id": message_id(task_id, e.seq),
        "task_id": task_id,
        "content": content,
        "streaming_status": "DONE",
        "created_at": view::time(e.created_at),
        "updated_at": view::time(e.created_at),
    }))
}

/// A revision event read as the `TaskMessage` it revises: the message's id and creation, the
/// revision's content, status and time.
pub fn revised_message(task_id: &str, e: &StoredEvent, r: &Revises) -> Option<Value> {
    let event: Value = serde_json::from_str(&e.body).ok()?;
    Some(json!({
        "id": message_id(task_id, r.message_seq),
        "task_id": task_id,
        "content": content_of(&event)?,
        "streaming_status": if r.in_progress { "IN_PROGRESS" } else { "DONE" },
        "created_at": view::time(r.message_created_at),
        "updated_at": view::time(e.created_at),
    }))
}

/// A stored message read as a `TaskMessage`: its id and creation from the event that opened it,
/// its content, status and `updated_at` from its latest revision. A revision without text is a
/// `system` notice and reads as the agent's empty text.
pub fn stored_message(task_id: &str, m: &MessageRow) -> Option<Value> {
    let event: Value = serde_json::from_str(&m.latest.body).ok()?;
    let content = match event.get("type").and_then(Value::as_str) {
        Some("system") => text("agent", ""),
        _ => content_of(&event)?,
    };
    Some(json!({
        "id": message_id(task_id, m.first.seq),
        "task_id": task_id,
        "content": content,
        "streaming_status": if m.in_progress { "IN_PROGRESS" } else { "DONE" },
        "created_at": view::time(m.first.created_at),
        "updated_at": view::time(m.latest.created_at),
    }))
}

fn text(author: &str, content: &str) -> Value {
    json!({
        "type": "text",
        "author": author,
        "content": content,
        "format": "plain",
        "style": "static",
    })
}

fn attachments(event: &Value) -> Option<Value> {
    let list = event.get("attachments")?.as_array()?;
    if list.is_empty() {
        return None;
    }
    Some(Value::Array(
        list.iter()
            .map(|a| {
                json!({
                    "file_id": a["path"],
                    "name": a["name"],
                    "size": a["bytes"],
                    "type": a.get("mimeType").and_then(Value::as_str)
                        .unwrap_or("application/octet-stream"),
                })
            })
            .collect(),
    ))
}

/// The `TaskMessageContent` an event reads as, if any.
pub fn content_of(event: &Value) -> Option<Value> {
    let s = |k: &str| event.get(k).and_then(Value::as_str);
    match s("type")? {
        "prompt_submitted" | "note_submitted" | "answer_submitted" => {
            let body = s("prompt").or_else(|| s("note")).or_else(|| s("answer"))?;
            let mut content = text("user", body);
            if let Some(a) = attachments(event) {
                content["attachments"] = a;
            }
            Some(content)
        }
        "agent_message" => Some(text("agent", s("message")?)),
        "ask" => {
            let mut md = String::new();
            for q in event.get("questions")?.as_array()? {
                if !md.is_empty() {
                    md.push_str("\n\n");
                }
                md.push_str(q.get("question").and_then(Value::as_str).unwrap_or(""));
                for o in q
                    .get("options")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    md.push_str("\n- ");
                    md.push_str(o.get("label").and_then(Value::as_str).unwrap_or(""));
                }
            }
            let mut content = text("agent", &md);
            content["format"] = json!("markdown");
            Some(content)
        }
        "step" => step_content(event.get("step")?),
        _ => None,
    }
}

fn step_content(step: &Value) -> Option<Value> {
    let s = |k: &str| step.get(k).and_then(Value::as_str);
    match s("type")? {
        "text" => Some(text("agent", s("text")?)),
        "reasoning" => Some(json!({
            "type": "reasoning",
            "author": "agent",
            "summary": [],
            "content": [s("text")?],
            "style": "static",
        })),
        "tool_call_start" => Some(json!({
            "type": "tool_request",
            "author": "agent",
            "name": s("toolName")?,
            "tool_call_id": s("toolCallId")?,
            "arguments": arguments(step.get("input")),
            "style": "static",
        })),
        "tool_call" => {
            let output: String = step
                .get("output")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n");
            Some(json!({
                "type": "tool_response",
                "author": "agent",
                "name": s("toolName")?,
                "tool_call_id": s("toolCallId")?,
                "content": output,
                "is_error": step.get("isError").and_then(Value::as_bool),
                "style": "static",
            }))
        }
        _ => None,
    }
}

/// Tool arguments are an object on the wire; other inputs are wrapped as `{"input": …}`.
fn arguments(input: Option<&Value>) -> Value {
    match input {
        Some(Value::Object(o)) => Value::Object(o.clone()),
        None | Some(Value::Null) => json!({}),
        Some(other) => json!({ "input": other }),
    }
}

/// A client's `TaskMessageContent`, checked against the contract's shapes.
#[derive(Debug, Clone)]
pub enum ContentIn {
    Text {
        author: String,
        content: String,
        attachments: Vec<AttachmentRef>,
    },
    Data {
        author: String,
        data: Map<String, Value>,
    },
    /// `reasoning`, `tool_request` or `tool_response`: valid, but not something a client can
    /// send to an agent or add to a timeline.
    Other { kind: &'static str },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AttachmentBody {
    file_id: String,
    name: String,
    size: u64,
    #[serde(rename = "type")]
    mime: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextBody {
    author: String,
    content: String,
    #[serde(default)]
    attachments: Option<Vec<AttachmentBody>>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    style: Option<String>,
    #[serde(rename = "type", default)]
    _type: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DataBody {
    author: String,
    data: Map<String, Value>,
    #[serde(default)]
    style: Option<String>,
    #[serde(rename = "type")]
    _type: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasoningBody {
    author: String,
    summary: Vec<String>,
    #[serde(default)]
    content: Option<Vec<String>>,
    #[serde(default)]
    style: Option<String>,
    #[serde(rename = "type")]
    _type: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolRequestBody {
    author: String,
    name: String,
    tool_call_id: String,
    arguments: Map<String, Value>,
    #[serde(default)]
    style: Option<String>,
    #[serde(rename = "type")]
    _type: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolResponseBody {
    author: String,
    name: String,
    tool_call_id: String,
    content: Value,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default)]
    style: Option<String>,
    #[serde(rename = "type")]
    _type: String,
}

fn check_author(field: &str, author: &str) -> Result<()> {
    if author == "user" || author == "agent" {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{field}/author: must be \"user\" or \"agent\""
        )))
    }
}

fn check_style(field: &str, style: Option<&str>) -> Result<()> {
    match style {
        None | Some("static" | "active") => Ok(()),
        Some(_) => Err(Error::invalid(format!(
            "{field}/style: must be \"static\" or \"active\""
        ))),
    }
}

/// Reads a `TaskMessageContent` (`field` names it in errors). Without `type`, content is text.
pub fn parse(field: &str, v: &Value) -> Result<ContentIn> {
    let obj = v
        .as_object()
        .ok_or_else(|| Error::invalid(format!("{field}: must be an object")))?;
    let kind = match obj.get("type") {
        None | Some(Value::Null) => "text",
        Some(Value::String(t)) => t.as_str(),
        Some(_) => return Err(Error::invalid(format!("{field}/type: must be a string"))),
    };
    match kind {
        "text" => {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("type");
            }
            let b: TextBody = super::decode_value(&v, field)?;
            check_author(field, &b.author)?;
            check_style(field, b.style.as_deref())?;
            if let Some(f) = b.format.as_deref()
                && !matches!(f, "markdown" | "plain" | "code")
            {
                return Err(Error::invalid(format!(
                    "{field}/format: must be \"markdown\", \"plain\" or \"code\""
                )));
            }
            Ok(ContentIn::Text {
                author: b.author,
                content: b.content,
                attachments: b
                    .attachments
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| AttachmentRef {
                        path: a.file_id,
                        name: a.name,
                        bytes: a.size,
                        mime_type: Some(a.mime),
                    })
                    .collect(),
            })
        }
        "data" => {
            let b: DataBody = super::decode_value(v, field)?;
            check_author(field, &b.author)?;
            check_style(field, b.style.as_deref())?;
            Ok(ContentIn::Data {
                author: b.author,
                data: b.data,
            })
        }
        "reasoning" => {
            let b: ReasoningBody = super::decode_value(v, field)?;
            check_author(field, &b.author)?;
            check_style(field, b.style.as_deref())?;
            let _ = (b.summary, b.content);
            Ok(ContentIn::Other { kind: "reasoning" })
        }
        "tool_request" => {
            let b: ToolRequestBody = super::decode_value(v, field)?;
            check_author(field, &b.author)?;
            check_style(field, b.style.as_deref())?;
            let _ = (b.name, b.tool_call_id, b.arguments);
            Ok(ContentIn::Other {
                kind: "tool_request",
            })
        }
        "tool_response" => {
            let b: ToolResponseBody = super::decode_value(v, field)?;
            check_author(field, &b.author)?;
            check_style(field, b.style.as_deref())?;
            let _ = (b.name, b.tool_call_id, b.content, b.is_error);
            Ok(ContentIn::Other {
                kind: "tool_response",
            })
        }
        other => Err(Error::invalid(format!(
            "{field}/type: {other:?} is not one of text, data, reasoning, tool_request, tool_response"
        ))),
    }
}

/// What a message or an event delivers to the agent: text as it is, data as its JSON text.
/// Other kinds, and content from the agent, are refused.
pub fn prompt(field: &str, c: ContentIn) -> Result<(String, Vec<AttachmentRef>)> {
    match c {
        ContentIn::Text {
            author,
            content,
            attachments,
        } if author == "user" => Ok((content, attachments)),
        ContentIn::Data { author, data } if author == "user" => {
            Ok((Value::Object(data).to_string(), Vec::new()))
        }
        ContentIn::Other { kind } => Err(Error::invalid(format!(
            "{field}/type: {kind} content cannot be sent to an agent; send text or data"
        ))),
        _ => Err(Error::invalid(format!(
            "{field}/author: what is sent to an agent comes from \"user\""
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(seq: u64, body: Value) -> StoredEvent {
        StoredEvent {
            seq,
            created_at: 1_700_000_000_000,
            event_type: body["type"].as_str().unwrap().to_owned(),
            body: body.to_string(),
        }
    }

    #[test]
    fn timeline_events_read_as_messages() {
        let task = "01a230e0-2fb4-74a8-96c2-a7ccc4e59a3d";
        let prompt = json!({"type": "prompt_submitted", "prompt": "hi", "inputKind": "initial",
            "behavior": "steer", "sender": {"kind": "system"},
            "attachments": [{"path": "a.txt", "name": "a.txt", "bytes": 3}]});
        let m = message(task, &stored(3, prompt)).unwrap();
        assert_eq!(m["id"], format!("{task}.3"));
        assert_eq!(m["content"]["author"], "user");
        assert_eq!(m["content"]["attachments"][0]["file_id"], "a.txt");
        assert_eq!(
            m["content"]["attachments"][0]["type"],
            "application/octet-stream"
        );
        let tool = json!({"type": "step", "step": {"type": "tool_call", "toolName": "ls",
            "toolCallId": "c1", "isError": false, "output": [{"type": "text", "text": "ok"}]}});
        let m = message(task, &stored(4, tool)).unwrap();
        assert_eq!(m["content"]["type"], "tool_response");
        assert_eq!(m["content"]["content"], "ok");
        let start = json!({"type": "step", "step": {"type": "tool_call_start",
            "toolName": "ls", "toolCallId": "c1", "input": "x"}});
        let m = message(task, &stored(5, start)).unwrap();
        assert_eq!(m["content"]["arguments"], json!({"input": "x"}));
        let system = json!({"type": "system", "level": "info", "message": "x"});
        assert!(message(task, &stored(6, system)).is_none());
        assert_eq!(parse_message_id(&format!("{task}.12")), Some((task, 12)));
        assert_eq!(parse_message_id("x.0"), None);
    }

    #[test]
    fn client_content_is_checked() {
        let c = parse("content", &json!({"author": "user", "content": "hi"})).unwrap();
        assert!(matches!(prompt("content", c), Ok((t, _)) if t == "hi"));
        let c = parse(
            "content",
            &json!({"type": "data", "author": "user", "data": {"a": 1}}),
        )
        .unwrap();
        assert_eq!(prompt("content", c).unwrap().0, r#"{"a":1}"#);
        assert!(parse("content", &json!({"author": "system", "content": "x"})).is_err());
        assert!(parse("content", &json!({"type": "image"})).is_err());
        let c = parse(
            "content",
            &json!({"type": "tool_request", "author": "agent", "name": "n",
                "tool_call_id": "c", "arguments": {}}),
        )
        .unwrap();
        assert!(prompt("content", c).is_err());
    }
}
