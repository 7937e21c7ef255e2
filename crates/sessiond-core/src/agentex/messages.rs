//! Task messages: a task's timeline events read as messages (`content`), listed by page or by
//! cursor, and the messages a client adds: a user's text becomes a note (context the agent sees
//! from its next turn, starting none), an agent's text an `agent_message`.

use std::collections::HashSet;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;
use serde_json::Value;

use super::content::{self, ContentIn};
use super::tasks;
use crate::error::{Error, Result};
use crate::limits;
use crate::sessions::{Actor, BatchMessage, InputCommon, Sessions};
use crate::store::agentex::{
    Direction, MessageFilter, MessageKind, MessageRow, Page, TaskKey, TaskRow,
};
use crate::store::sessions::MessageLink;

/// Most filters in one `filters` parameter.
const FILTERS_MAX: usize = 32;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterBody {
    #[serde(default)]
    content: Option<FilterContent>,
    #[serde(default)]
    streaming_status: Option<String>,
    #[serde(default)]
    exclude: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilterContent {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    author: Option<String>,
}

/// The message kinds of a content `type`.
fn kinds_of_type(t: &str) -> Result<Vec<MessageKind>> {
    use MessageKind::*;
    Ok(match t {
        "text" => vec![Prompt, Note, Answer, AgentMessage, Ask, Text],
        "reasoning" => vec![Reasoning],
        "tool_request" => vec![ToolRequest],
        "tool_response" => vec![ToolResponse],
        // Nothing in a timeline reads as data content.
        "data" => vec![],
        other => {
            return Err(Error::invalid(format!(
                "filters: content.type {other:?} is not one of text, data, reasoning, tool_request, tool_response"
            )));
        }
    })
}

fn kinds_of_author(a: &str) -> Result<Vec<MessageKind>> {
    use MessageKind::*;
    match a {
        "user" => Ok(vec![Prompt, Note, Answer]),
        "agent" => Ok(vec![
            AgentMessage,
            Ask,
            Text,
            Reasoning,
            ToolRequest,
            ToolResponse,
        ]),
        other => Err(Error::invalid(format!(
            "filters: content.author {other:?} is not one of user, agent"
        ))),
    }
}

/// The messages a `filters` parameter (a JSON list of `TaskMessageEntityFilter`) keeps:
/// inclusive filters are OR'd, exclusive ones OR'd and negated, and both groups AND'd. A filter
/// matches by content `type` and `author` and by `streaming_status` (a message is `IN_PROGRESS`
/// from when an agent opens it until a revision says `DONE`).
pub fn filter_kinds(filters: Option<&str>) -> Result<MessageFilter> {
    let Some(text) = filters.filter(|f| !f.trim().is_empty()) else {
        return Ok(MessageFilter::all());
    };
    let raw: Value = serde_json::from_str(text)
        .map_err(|e| Error::invalid(format!("filters: malformed JSON ({e})")))?;
    let list: Vec<FilterBody> = super::decode_value(&raw, "filters")?;
    if list.len() > FILTERS_MAX {
        return Err(Error::invalid(format!(
            "filters: at most {FILTERS_MAX} filters"
        )));
    }
    let every = || {
        MessageKind::ALL
            .into_iter()
            .flat_map(|k| [(k, false), (k, true)])
    };
    let mut include: Option<HashSet<(MessageKind, bool)>> = None;
    let mut exclude: HashSet<(MessageKind, bool)> = HashSet::new();
    for f in list {
        let mut kinds: HashSet<(MessageKind, bool)> = every().collect();
        if let Some(c) = &f.content {
            if let Some(t) = &c.kind {
                let of: HashSet<_> = kinds_of_type(t)?.into_iter().collect();
                kinds.retain(|(k, _)| of.contains(k));
            }
            if let Some(a) = &c.author {
                let of: HashSet<_> = kinds_of_author(a)?.into_iter().collect();
                kinds.retain(|(k, _)| of.contains(k));
            }
        }
        match f.streaming_status.as_deref() {
            None => {}
            Some("DONE") => kinds.retain(|(_, open)| !open),
            Some("IN_PROGRESS") => kinds.retain(|(_, open)| *open),
            Some(other) => {
                return Err(Error::invalid(format!(
                    "filters: streaming_status {other:?} is not one of IN_PROGRESS, DONE"
                )));
            }
        }
        if f.exclude {
            exclude.extend(kinds);
        } else {
            include.get_or_insert_with(HashSet::new).extend(kinds);
        }
    }
    let include = include.unwrap_or_else(|| every().collect());
    let keep = |open: bool| {
        MessageKind::ALL
            .into_iter()
            .filter(|k| include.contains(&(*k, open)) && !exclude.contains(&(*k, open)))
            .collect()
    };
    Ok(MessageFilter {
        done: keep(false),
        in_progress: keep(true),
    })
}

async fn task(sessions: &Sessions, actor: &Actor, task_id: &str) -> Result<TaskRow> {
    tasks::find(sessions, actor, TaskKey::Id(task_id)).await
}

/// A task's messages by page number.
pub async fn list(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    kinds: MessageFilter,
    direction: Direction,
    page: Page,
) -> Result<Vec<Value>> {
    let t = task(sessions, actor, task_id).await?;
    let events = sessions
        .store()
        .agentex()
        .messages_page(t.pk, kinds, direction, page)
        .await?;
    Ok(events
        .iter()
        .filter_map(|m| content::stored_message(&t.id, m))
        .collect())
}

/// One page of a task's messages from a cursor: `older` (the default) pages back from the newest,
/// newest first; `newer` pages forward, oldest first.
pub struct CursorPage {
    pub data: Vec<Value>,
    pub next_cursor: Option<String>,
    pub has_more: bool,
}

fn encode_cursor(seq: u64) -> String {
    URL_SAFE_NO_PAD.encode(format!("m{seq}"))
}

fn decode_cursor(c: &str) -> Result<u64> {
    URL_SAFE_NO_PAD
        .decode(c)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|s| s.strip_prefix('m').and_then(|n| n.parse().ok()))
        .ok_or_else(|| Error::invalid("cursor: not a cursor this server issued"))
}

pub async fn paginated(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    kinds: MessageFilter,
    newer: bool,
    cursor: Option<&str>,
    limit: u32,
) -> Result<CursorPage> {
    let t = task(sessions, actor, task_id).await?;
    let cursor = cursor
        .filter(|c| !c.is_empty())
        .map(decode_cursor)
        .transpose()?;
    let direction = if newer {
        Direction::Asc
    } else {
        Direction::Desc
    };
    let mut events = sessions
        .store()
        .agentex()
        .messages_from(t.pk, kinds, direction, cursor, limit + 1)
        .await?;
    let has_more = events.len() > limit as usize;
    events.truncate(limit as usize);
    let next_cursor = if has_more {
        events.last().map(|m| encode_cursor(m.first.seq))
    } else {
        None
    };
    Ok(CursorPage {
        data: events
            .iter()
            .filter_map(|m| content::stored_message(&t.id, m))
            .collect(),
        next_cursor,
        has_more,
    })
}

pub async fn get(sessions: &Sessions, actor: &Actor, id: &str) -> Result<Value> {
    let (task_id, seq) = content::parse_message_id(id).ok_or(Error::NotFound)?;
    let t = task(sessions, actor, task_id).await?;
    sessions
        .store()
        .agentex()
        .message(t.pk, seq)
        .await?
        .and_then(|m| content::stored_message(&t.id, &m))
        .ok_or(Error::NotFound)
}

/// A message a client adds, checked before anything is written.
pub struct NewMessage {
    author: String,
    text: String,
    attachments: Vec<crate::timeline::AttachmentRef>,
}

/// Checks a message to add: text content, not empty, within the prompt limit.
pub fn check_new(field: &str, raw: &Value, max_chars: usize) -> Result<NewMessage> {
    match content::parse(field, raw)? {
        ContentIn::Text {
            author,
            content,
            attachments,
        } => {
            if content.is_empty() {
                return Err(Error::invalid(format!(
                    "{field}/content: must not be empty"
                )));
            }
            limits::check_length(format_args!("{field}/content"), &content, max_chars)?;
            if author == "agent" && !attachments.is_empty() {
                return Err(Error::invalid(format!(
                    "{field}/attachments: only a user's message carries attachments"
                )));
            }
            Ok(NewMessage {
                author,
                text: content,
                attachments,
            })
        }
        ContentIn::Data { .. } => Err(Error::invalid(format!(
            "{field}/type: only text messages can be added; data reaches an agent with message/send"
        ))),
        ContentIn::Other { kind } => Err(Error::invalid(format!(
            "{field}/type: only text messages can be added ({kind} messages come from the agent's own turns)"
        ))),
    }
}

/// Adds a message to a task: a user's as a note, an agent's as an agent message.
pub async fn create(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    m: NewMessage,
) -> Result<Value> {
    let t = task(sessions, actor, task_id).await?;
    let seq = if m.author == "user" {
        let common = InputCommon {
            attachments: m.attachments,
            ..Default::default()
        };
        sessions.note(actor, &t.id, m.text, common).await?
    } else {
        sessions
            .post_agent_messages(actor, &t.id, vec![m.text], MessageLink::None)
            .await?
            .first()
            .copied()
            .ok_or(Error::Internal("no message appended".into()))?
    };
    get(sessions, actor, &content::message_id(&t.id, seq)).await
}

/// Adds a batch of checked messages to a task, in one transaction: all of them or none. The
/// messages as the task lists them, in order.
pub async fn create_batch(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    field: &str,
    batch: Vec<NewMessage>,
) -> Result<Vec<Value>> {
    let t = task(sessions, actor, task_id).await?;
    let batch = batch
        .into_iter()
        .map(|m| {
            if m.author == "user" {
                BatchMessage::Note {
                    text: m.text,
                    attachments: m.attachments,
                }
            } else {
                BatchMessage::Agent(m.text)
            }
        })
        .collect();
    let seqs = sessions.post_messages(actor, &t.id, field, batch).await?;
    let mut out = Vec::with_capacity(seqs.len());
    for seq in seqs {
        out.push(get(sessions, actor, &content::message_id(&t.id, seq)).await?);
    }
    Ok(out)
}

/// Checks an agent's text for a message it streams or revises: text content from the agent,
/// within the prompt limit; it may be empty (a message opened before its first words).
pub fn check_agent_text(field: &str, raw: &Value, max_chars: usize) -> Result<String> {
    match content::parse(field, raw)? {
        ContentIn::Text {
            author,
            content,
            attachments,
        } if author == "agent" && attachments.is_empty() => {
            limits::check_length(format_args!("{field}/content"), &content, max_chars)?;
            Ok(content)
        }
        ContentIn::Text { .. } | ContentIn::Data { .. } => Err(Error::invalid(format!(
            "{field}: only an agent's text (author \"agent\", no attachments) is streamed or \
             revised; a user's words reach the agent as they were sent"
        ))),
        ContentIn::Other { kind } => Err(Error::invalid(format!(
            "{field}/type: only text messages can be revised ({kind} messages come from the \
             agent's own turns)"
        ))),
    }
}

/// Opens an agent message that is still being written (`streaming_status` `IN_PROGRESS`); the
/// agent's revisions add its content (`revise`).
pub async fn open(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    text: String,
) -> Result<Value> {
    let t = task(sessions, actor, task_id).await?;
    let seq = sessions
        .post_agent_messages(actor, &t.id, vec![text], MessageLink::OpenInProgress)
        .await?
        .first()
        .copied()
        .ok_or(Error::Internal("no message appended".into()))?;
    get(sessions, actor, &content::message_id(&t.id, seq)).await
}

/// A revision a client asks for: the message (its id), its new text, and its streaming status
/// afterwards (`None` keeps the message's).
pub struct Revision {
    pub message_id: String,
    pub text: String,
    pub in_progress: Option<bool>,
}

/// Whether a stored message is the agent's own text (what may be revised).
fn is_agent_text(m: &MessageRow) -> bool {
    match m.first.event_type.as_str() {
        "agent_message" | "system" => true,
        "step" => serde_json::from_str::<Value>(&m.first.body)
            .ok()
            .is_some_and(|e| e["step"]["type"] == "text"),
        _ => false,
    }
}

/// Revises messages of one task in one transaction: each revision is a new event holding the
/// message's content from then on (the timeline is append-only; the message keeps its id). A
/// message of another task is not found; every revision is checked before the first is written.
pub async fn revise(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    revisions: Vec<Revision>,
) -> Result<Vec<Value>> {
    let t = task(sessions, actor, task_id).await?;
    let mut seqs = Vec::with_capacity(revisions.len());
    for r in &revisions {
        match content::parse_message_id(&r.message_id) {
            Some((of, seq)) if of == t.id => seqs.push(seq),
            _ => return Err(Error::NotFound),
        }
    }
    let found = sessions
        .store()
        .agentex()
        .messages(t.pk, seqs.clone())
        .await?;
    let mut plan = Vec::with_capacity(revisions.len());
    let mut texts = Vec::with_capacity(revisions.len());
    for (r, m) in revisions.into_iter().zip(found) {
        let m = m.ok_or(Error::NotFound)?;
        if !is_agent_text(&m) {
            return Err(Error::invalid(format!(
                "{}: only the agent's text messages can be revised; the timeline keeps what \
                 users sent and what the agent's turns did",
                r.message_id
            )));
        }
        plan.push((m.first.seq, r.in_progress.unwrap_or(m.in_progress)));
        texts.push(r.text);
    }
    sessions
        .post_agent_messages(actor, &t.id, texts, MessageLink::Revisions(plan))
        .await?;
    let mut out = Vec::with_capacity(seqs.len());
    for seq in seqs {
        out.push(get(sessions, actor, &content::message_id(&t.id, seq)).await?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use MessageKind::*;

    #[test]
    fn filters_combine_as_the_contract_says() {
        let done = |f: Option<&str>| filter_kinds(f).unwrap().done;
        assert_eq!(filter_kinds(None).unwrap(), MessageFilter::all());
        let users = done(Some(r#"[{"content": {"author": "user"}}]"#));
        assert_eq!(users, [Prompt, Note, Answer]);
        // Inclusive filters are OR'd, exclusive ones subtracted.
        let some = done(Some(
            r#"[{"content": {"type": "reasoning"}}, {"content": {"type": "tool_request"}},
                {"content": {"author": "agent", "type": "tool_request"}, "exclude": true}]"#,
        ));
        assert_eq!(some, [Reasoning]);
        let agent_text = done(Some(
            r#"[{"content": {"type": "text"}}, {"content": {"author": "user"}, "exclude": true}]"#,
        ));
        assert_eq!(agent_text, [AgentMessage, Ask, Text]);
        let open = filter_kinds(Some(r#"[{"streaming_status": "IN_PROGRESS"}]"#)).unwrap();
        assert!(open.done.is_empty());
        assert_eq!(open.in_progress, MessageKind::ALL.to_vec());
        let finished = filter_kinds(Some(
            r#"[{"streaming_status": "IN_PROGRESS", "exclude": true}]"#,
        ))
        .unwrap();
        assert_eq!(finished.done, MessageKind::ALL.to_vec());
        assert!(finished.in_progress.is_empty());
        assert!(filter_kinds(Some(r#"[{"content": {"type": "video"}}]"#)).is_err());
        assert!(filter_kinds(Some(r#"[{"content": {"data": {}}}]"#)).is_err());
        assert!(filter_kinds(Some("{")).is_err());
    }
}
