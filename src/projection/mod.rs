//! The fields of a session's row derived from its turn, its machine and its queued inputs (the
//! bucket, the follow-up queue), kept in step with the timeline in the same transaction. Both the
//! sessions core and the runner change what they derive from, so the rules live here, below both;
//! the store only writes the values. So do the other rules both apply to what the store holds:
//! a session's budget (`budget.rs`) and its conversation as its terminals recorded it
//! (`conversation.rs`).

pub mod bucket;
pub mod budget;
pub mod conversation;

use serde_json::Value;

use base64::Engine as _;

use crate::error::Result;
use crate::store::{self, JsonColumn, SessionKey, Tx};
use crate::timeline::{Event, FollowUpQueueItem, ImageData, StoredImageRef};

/// The images of a queued prompt as `FollowUpQueueItem.images` wants them: base64 data and type,
/// read back from the prompt's stored images.
fn queued_images(tx: &Tx<'_>, key: &SessionKey, seq: u64) -> Result<Option<Vec<ImageData>>> {
    let Some(body) = store::event_body(tx.conn(), key.pk, seq)? else {
        return Ok(None);
    };
    let refs: Vec<StoredImageRef> = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| serde_json::from_value(v.get("images")?.clone()).ok())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(refs.len());
    for r in refs {
        if let Some(img) = store::image(tx.conn(), key.pk, &r.storage_id)? {
            out.push(ImageData {
                data: base64::engine::general_purpose::STANDARD.encode(&img.data),
                mime_type: img.mime_type,
            });
        }
    }
    Ok((!out.is_empty()).then_some(out))
}

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

/// Recomputes `followUpQueue` from the follow-up prompts still waiting (their text and images);
/// when it changed, stores it and appends a `follow_up_queue` event.
pub fn refresh_follow_up_queue(tx: &mut Tx<'_>, key: &SessionKey) -> Result<()> {
    let mut queue: Vec<FollowUpQueueItem> = Vec::new();
    for p in tx.pending_inputs(key)? {
        if !((p.kind == "message" || p.kind == "initial") && p.behavior == "follow_up") {
            continue;
        }
        queue.push(FollowUpQueueItem {
            images: queued_images(tx, key, p.seq)?,
            message: p.text,
        });
    }
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
