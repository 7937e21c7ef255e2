//! A session's conversation as its timeline recorded it: what model engines send with every call
//! (the earlier turns of their own session) and what a `resume` session replays of its parent.

use serde_json::{Value, json};

use crate::error::Result;
use crate::store::Store;

/// The conversation of the turns before seq `before`, oldest first, as the messages their
/// terminals recorded (a turn lost in a crash contributes its input), notes as user messages;
/// whole turns only, newest first until about `budget_chars` of JSON.
pub async fn before(
    store: &Store,
    pk: i64,
    before: u64,
    budget_chars: usize,
) -> Result<Vec<Value>> {
    const TYPES: [&str; 6] = [
        "turn_started",
        "complete",
        "ask",
        "interrupted",
        "sleep",
        "note_submitted",
    ];
    let mut before = before;
    let mut chunks: Vec<Vec<Value>> = Vec::new();
    let mut used = 0usize;
    let mut terminal: Option<Vec<Value>> = None;
    'pages: loop {
        let page = store
            .log()
            .events_of_types_before(pk, before, &TYPES, 256)
            .await?;
        let Some(last) = page.last() else { break };
        before = last.seq;
        for ev in page {
            let body: Value = serde_json::from_str(&ev.body).unwrap_or(Value::Null);
            let messages = || {
                body.pointer("/state/agent/messages")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default()
            };
            let chunk = match ev.event_type.as_str() {
                "note_submitted" => {
                    let note = body.get("note").and_then(Value::as_str).unwrap_or("");
                    vec![json!({"role": "user", "content": format!("(note) {note}")})]
                }
                "turn_started" => match terminal.take() {
                    Some(m) if !m.is_empty() => m,
                    _ => messages(),
                },
                _ => {
                    terminal = Some(messages());
                    continue;
                }
            };
            used += chunk.iter().map(|m| m.to_string().len()).sum::<usize>();
            if used > budget_chars && !chunks.is_empty() {
                break 'pages;
            }
            chunks.push(chunk);
        }
    }
    chunks.reverse();
    Ok(chunks.into_iter().flatten().collect())
}
