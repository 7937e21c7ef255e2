//! The fields of a session's row derived from its turn, its machine and its queued inputs (the
//! bucket, the follow-up queue), kept in step with the timeline in the same transaction. Both the
//! sessions core and the runner change what they derive from, so the rules live here, below both;
//! the store only writes the values.

pub mod bucket;

use serde_json::Value;

use crate::error::Result;
use crate::store::{JsonColumn, SessionKey, Tx};
use crate::timeline::{Event, FollowUpQueueItem};

/// Sets the turn status and the bucket derived from it (and from the machine, when present).
pub fn set_turn_status(tx: &mut Tx<'_>, key: &SessionKey, turn_status: &str) -> Result<()> {
    let machine = tx.json_column(key, JsonColumn::Machine)?;
    let activity = machine
        .as_deref()
        .and_then(|m| serde_json::from_str::<Value>(m).ok())
        .and_then(|m| m.get("activity").and_then(Value::as_str).map(str::to_owned));
    let bucket = bucket::derive(turn_status, activity.as_deref());
    tx.set_turn_status(key, turn_status, bucket)
}

/// Recomputes `followUpQueue` from the follow-up prompts still waiting; when it changed, stores it
/// and appends a `follow_up_queue` event.
pub fn refresh_follow_up_queue(tx: &mut Tx<'_>, key: &SessionKey) -> Result<()> {
    let queue: Vec<FollowUpQueueItem> = tx
        .pending_inputs(key)?
        .into_iter()
        .filter(|p| (p.kind == "message" || p.kind == "initial") && p.behavior == "follow_up")
        .map(|p| FollowUpQueueItem {
            message: p.text,
            images: None,
        })
        .collect();
    let current = tx.json_column(key, JsonColumn::FollowUpQueue)?;
    let current: Vec<FollowUpQueueItem> = current
        .as_deref()
        .and_then(|c| serde_json::from_str(c).ok())
        .unwrap_or_default();
    if current == queue {
        return Ok(());
    }
    let doc = serde_json::to_string(&queue).map_err(|e| crate::Error::Internal(e.to_string()))?;
    tx.set_json_column(key, JsonColumn::FollowUpQueue, Some(&doc))?;
    tx.append(
        key,
        &Event::FollowUpQueue {
            follow_up_queue: queue,
        },
    )?;
    Ok(())
}
