//! Reading HAST events back from the store: the projection state at any position (rebuilt from
//! the start of the run open there), and pages of durable events after a sequence.

use std::collections::HashMap;

use serde_json::Value;

use super::{HastEvent, Projection, RunStart, first_seq_after};
use crate::error::Result;
use crate::store::{Store, StoredEvent, TurnInput};

/// Stored events read per query.
const CHUNK: u32 = 500;

fn as_run_start((input_seq, turn_type): TurnInput) -> RunStart {
    RunStart {
        input_seq,
        turn_type,
    }
}

fn as_run_starts(inputs: HashMap<u64, TurnInput>) -> HashMap<u64, RunStart> {
    inputs
        .into_iter()
        .map(|(seq, input)| (seq, as_run_start(input)))
        .collect()
}

/// The input that started the turn at `turn_seq`.
pub async fn run_start(store: &Store, pk: i64, turn_seq: u64) -> Result<Option<RunStart>> {
    Ok(store
        .log()
        .turn_input(pk, turn_seq)
        .await?
        .map(as_run_start))
}

/// [`run_start`] of every `turn_started` among `events`.
pub async fn run_starts(
    store: &Store,
    pk: i64,
    events: &[StoredEvent],
) -> Result<HashMap<u64, RunStart>> {
    Ok(as_run_starts(store.log().turn_inputs_of(pk, events).await?))
}

/// The model that last answered the session, as its engine's memo keeps it (empty when none did).
pub async fn answered_model(store: &Store, pk: i64) -> Result<String> {
    let memo = store.projections().engine_memo(pk).await?;
    Ok(memo
        .and_then(|m| serde_json::from_str::<Value>(&m).ok())
        .and_then(|m| crate::engine::answered_model(&m).map(str::to_owned))
        .unwrap_or_default())
}

/// Tells `projection` the session's [`answered_model`] when `events` hold a usage event (whose
/// `usage.updated` may need it).
pub async fn know_model(
    store: &Store,
    pk: i64,
    projection: &mut Projection,
    events: &[StoredEvent],
) -> Result<()> {
    if events.iter().any(|e| e.event_type == "usage") {
        projection.set_answered_model(answered_model(store, pk).await?);
    }
    Ok(())
}

/// Applies stored events to `projection`; returns their HAST events.
pub fn apply_stored(
    projection: &mut Projection,
    sid: &str,
    events: &[StoredEvent],
    starts: &HashMap<u64, RunStart>,
) -> Vec<HastEvent> {
    let mut out = Vec::new();
    for e in events {
        let Ok(event) = serde_json::from_str::<Value>(&e.body) else {
            continue;
        };
        out.extend(projection.apply(sid, e.seq, e.created_at, &event, starts.get(&e.seq)));
    }
    out
}

/// The projection as it stands just before timeline event `seq`: empty between runs, else
/// rebuilt from the `turn_started` of the run open there (so the cost is the run's length, never
/// the session's history).
pub async fn projection_before(store: &Store, pk: i64, sid: &str, seq: u64) -> Result<Projection> {
    let mut projection = Projection::default();
    let Some(start) = store.log().open_turn_before(pk, seq).await? else {
        return Ok(projection);
    };
    let mut after = start - 1;
    loop {
        let (mut events, starts) = store
            .log()
            .events_with_turn_inputs_after(pk, after, CHUNK)
            .await?;
        let full = events.len() as u32 == CHUNK;
        events.retain(|e| e.seq < seq);
        let Some(last) = events.last() else { break };
        after = last.seq;
        apply_stored(&mut projection, sid, &events, &as_run_starts(starts));
        if !full || after + 1 >= seq {
            break;
        }
    }
    Ok(projection)
}

/// Durable HAST events with `sequence > after`, in order, at most `limit`; and whether more
/// follow.
pub async fn page(
    store: &Store,
    pk: i64,
    sid: &str,
    after: u64,
    limit: usize,
) -> Result<(Vec<HastEvent>, bool)> {
    let first = first_seq_after(after);
    let mut projection = projection_before(store, pk, sid, first).await?;
    let mut cursor = first - 1;
    let mut out = Vec::new();
    loop {
        let (events, starts) = store
            .log()
            .events_with_turn_inputs_after(pk, cursor, CHUNK)
            .await?;
        let Some(last) = events.last() else {
            return Ok((out, false));
        };
        cursor = last.seq;
        know_model(store, pk, &mut projection, &events).await?;
        out.extend(
            apply_stored(&mut projection, sid, &events, &as_run_starts(starts))
                .into_iter()
                .filter(|h| h.sequence.is_some_and(|s| s > after)),
        );
        if out.len() > limit {
            out.truncate(limit);
            return Ok((out, true));
        }
        if (events.len() as u32) < CHUNK {
            return Ok((out, false));
        }
    }
}
