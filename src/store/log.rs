//! Reads of the session log (the timeline and its turns) for callers that follow it from outside
//! the store, in sessiond's own types.

use super::{Store, StoredEvent};
use crate::error::Result;

/// Range reads of one session's timeline, by seq (keyset, never by offset).
#[derive(Clone, Copy)]
pub struct LogReads<'a> {
    store: &'a Store,
}

impl Store {
    /// Reads of the session log.
    pub fn log(&self) -> LogReads<'_> {
        LogReads { store: self }
    }
}

impl LogReads<'_> {
    /// At most `limit` events after `after`, oldest first.
    pub async fn events_after(
        &self,
        session_pk: i64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.store
            .read(move |c| super::events_after(c, session_pk, after, limit))
            .await
    }

    /// The seq of the newest stored event (0 for an empty timeline).
    pub async fn last_seq(&self, session_pk: i64) -> Result<u64> {
        let last = self
            .store
            .read(move |c| super::events_before(c, session_pk, None, 1))
            .await?;
        Ok(last.last().map_or(0, |e| e.seq))
    }

    /// The seq of the `turn_started` of the turn that took the input at `input_seq`, once one did.
    pub async fn input_turn(&self, session_pk: i64, input_seq: u64) -> Result<Option<u64>> {
        self.store
            .read(move |c| super::input_turn(c, session_pk, input_seq))
            .await
    }
}
