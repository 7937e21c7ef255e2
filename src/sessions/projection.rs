//! Projection fields derived from queued inputs, kept in step with the timeline in the same
//! transaction.

use crate::error::Result;
use crate::store::{JsonColumn, SessionKey, Tx};
use crate::timeline::{Event, FollowUpQueueItem};

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
