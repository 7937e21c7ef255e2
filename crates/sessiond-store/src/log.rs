//! Reads of the session log (the timeline and its turns) for callers that follow it from outside
//! the store, in sessiond's own types.

use std::collections::HashMap;

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

/// The input that started a turn: its seq and what kind of input it was (`initial`,
/// `message`, `answer`, `wake`, `machine`, `resume`).
pub type TurnInput = (u64, String);

impl LogReads<'_> {
    /// At most `limit` events before `before` (the newest when `None`), oldest first.
    pub async fn events_before(
        &self,
        session_pk: i64,
        before: Option<u64>,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.store
            .read(move |c| super::events_before(c, session_pk, before, limit))
            .await
    }

    /// The newest events of the given types before `before`, newest first, at most `limit`.
    pub async fn events_of_types_before(
        &self,
        session_pk: i64,
        before: u64,
        types: &'static [&'static str],
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        self.store
            .read(move |c| super::events_of_types_before(c, session_pk, before, types, limit))
            .await
    }

    /// The stored body of one event.
    pub async fn event_body(&self, session_pk: i64, seq: u64) -> Result<Option<String>> {
        self.store
            .read(move |c| super::event_body(c, session_pk, seq))
            .await
    }

    /// The input that started the turn whose `turn_started` is at `turn_seq`.
    pub async fn turn_input(&self, session_pk: i64, turn_seq: u64) -> Result<Option<TurnInput>> {
        self.store
            .read(move |c| super::record::turn_input(c, session_pk, turn_seq))
            .await
    }

    /// [`LogReads::turn_input`] of each `turn_started` among `events`, by its seq, in one read.
    pub async fn turn_inputs_of(
        &self,
        session_pk: i64,
        events: &[StoredEvent],
    ) -> Result<HashMap<u64, TurnInput>> {
        let turns: Vec<u64> = events
            .iter()
            .filter(|e| e.event_type == "turn_started")
            .map(|e| e.seq)
            .collect();
        if turns.is_empty() {
            return Ok(HashMap::new());
        }
        self.store
            .read(move |c| turn_inputs(c, session_pk, &turns))
            .await
    }

    /// At most `limit` events after `after` with the inputs of the turns started among them,
    /// in one read.
    pub async fn events_with_turn_inputs_after(
        &self,
        session_pk: i64,
        after: u64,
        limit: u32,
    ) -> Result<(Vec<StoredEvent>, HashMap<u64, TurnInput>)> {
        self.store
            .read(move |c| {
                let events = super::events_after(c, session_pk, after, limit)?;
                let turns: Vec<u64> = events
                    .iter()
                    .filter(|e| e.event_type == "turn_started")
                    .map(|e| e.seq)
                    .collect();
                Ok((turn_inputs(c, session_pk, &turns)?, events))
            })
            .await
            .map(|(inputs, events)| (events, inputs))
    }

    /// The `turn_started` seq of the turn still open just before event `seq`, if any.
    pub async fn open_turn_before(&self, session_pk: i64, seq: u64) -> Result<Option<u64>> {
        self.store
            .read(move |c| super::record::open_turn_before(c, session_pk, seq))
            .await
    }

    /// The first event of the given types of the turn that took the input at `input_seq`, once
    /// there is one, with the session's cwd as it is now.
    pub async fn terminal_of_input(
        &self,
        session_pk: i64,
        input_seq: u64,
        types: &'static [&'static str],
    ) -> Result<Option<(StoredEvent, Option<String>)>> {
        self.store
            .read(move |c| super::reads::terminal_of_input(c, session_pk, input_seq, types))
            .await
    }
}

fn turn_inputs(
    c: &super::sql::Db,
    session_pk: i64,
    turns: &[u64],
) -> Result<HashMap<u64, TurnInput>> {
    let mut out = HashMap::new();
    for &seq in turns {
        if let Some(input) = super::record::turn_input(c, session_pk, seq)? {
            out.insert(seq, input);
        }
    }
    Ok(out)
}
