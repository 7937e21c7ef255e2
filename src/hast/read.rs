//! Reading HAST events back from the store: the projection state at any position (rebuilt from
//! the start of the run open there), and pages of durable events after a sequence.

use std::collections::HashMap;

use rusqlite::Connection;
use serde_json::Value;

use super::{HastEvent, Projection, RunStart, first_seq_after};
use crate::error::Result;
use crate::store::{self, StoredEvent};

/// Stored events read per query.
const CHUNK: u32 = 500;

/// The input that started the turn at `turn_seq`.
pub fn run_start(conn: &Connection, pk: i64, turn_seq: u64) -> Result<Option<RunStart>> {
    Ok(
        store::record::turn_input(conn, pk, turn_seq)?.map(|(input_seq, turn_type)| RunStart {
            input_seq,
            turn_type,
        }),
    )
}

/// [`run_start`] of every `turn_started` among `events`.
pub fn run_starts(
    conn: &Connection,
    pk: i64,
    events: &[StoredEvent],
) -> Result<HashMap<u64, RunStart>> {
    let mut out = HashMap::new();
    for e in events.iter().filter(|e| e.event_type == "turn_started") {
        if let Some(start) = run_start(conn, pk, e.seq)? {
            out.insert(e.seq, start);
        }
    }
    Ok(out)
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
pub fn projection_before(conn: &Connection, pk: i64, sid: &str, seq: u64) -> Result<Projection> {
    let mut projection = Projection::default();
    let Some(start) = store::record::open_turn_before(conn, pk, seq)? else {
        return Ok(projection);
    };
    let mut after = start - 1;
    loop {
        let mut events = store::events_after(conn, pk, after, CHUNK)?;
        let full = events.len() as u32 == CHUNK;
        events.retain(|e| e.seq < seq);
        let Some(last) = events.last() else { break };
        after = last.seq;
        let starts = run_starts(conn, pk, &events)?;
        apply_stored(&mut projection, sid, &events, &starts);
        if !full || after + 1 >= seq {
            break;
        }
    }
    Ok(projection)
}

/// Durable HAST events with `sequence > after`, in order, at most `limit`; and whether more
/// follow.
pub fn page(
    conn: &Connection,
    pk: i64,
    sid: &str,
    after: u64,
    limit: usize,
) -> Result<(Vec<HastEvent>, bool)> {
    let first = first_seq_after(after);
    let mut projection = projection_before(conn, pk, sid, first)?;
    let mut cursor = first - 1;
    let mut out = Vec::new();
    loop {
        let events = store::events_after(conn, pk, cursor, CHUNK)?;
        let Some(last) = events.last() else {
            return Ok((out, false));
        };
        cursor = last.seq;
        let starts = run_starts(conn, pk, &events)?;
        out.extend(
            apply_stored(&mut projection, sid, &events, &starts)
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
