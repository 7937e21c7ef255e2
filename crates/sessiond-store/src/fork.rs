//! A fork: a new session whose timeline starts as a copy of another session's timeline up to one
//! of its events, made in one unit of work.
//!
//! The copy keeps each event's seq (the fork's own `session_created` takes seq 1, as the
//! parent's did), so "event N" means the same event in both sessions, and the conversation a
//! model engine rebuilds from the fork's timeline (`projection::conversation`) is the parent's
//! up to that event and nothing after it. The parent is read, never written. After the copy the
//! fork gets a `system` notice with the code [`FORKED`] (its seq is the fork point plus one, which
//! is how the Session record finds the fork point) and, where the copy cut a finished turn short,
//! the `interrupted` terminal that closes it in the fork.

use serde_json::Value;

use super::projections::TurnStatus;
use super::row_lock::RowLock;
use super::sql::params;
use super::submit::{NewPrompt, ParentKind, SessionPlan, Submissions};
use super::{NewRecordFacts, SessionKey, Tx};
use crate::error::{Error, Result};
use crate::timeline::{Event, Level, SystemMetadata, TurnStateStatus};

/// The code of the `system` notice that marks where a fork's copied timeline ends.
pub(crate) const FORKED: &str = SystemMetadata::FORKED;

/// How many events a fork copies per read.
const PAGE: u32 = 512;

/// What a fork is made of: where it goes (agent, cwd, title: the parent's, chosen by the core)
/// and the point of the parent's timeline it starts from.
#[derive(Debug, Clone)]
pub struct ForkPlan {
    pub plan: SessionPlan,
    pub parent_id: String,
    pub at_seq: u64,
    /// A message to run in the fork at once.
    pub first: Option<NewPrompt>,
}

/// A fork made: its key and, with a first message, that message's seq.
#[derive(Debug, Clone)]
pub struct Forked {
    pub key: SessionKey,
    pub first_seq: Option<u64>,
}

impl Submissions<'_> {
    /// Makes a fork of `parent_id` at `at_seq` (see the module's doc). Refused, with nothing
    /// written, when `at_seq` is 0 or past the parent's last event (400) or inside the parent's
    /// running turn (409 `session_busy`).
    pub async fn fork(&self, f: ForkPlan) -> Result<Forked> {
        self.store.write(move |tx| tx.fork(&f)).await
    }
}

impl Tx<'_> {
    fn fork(&mut self, f: &ForkPlan) -> Result<Forked> {
        let ws = f.plan.workspace_id.clone();
        let parent = self.session_key(&ws, &f.parent_id)?;
        // Held so that no turn of the parent starts or ends between the checks and the copy.
        self.lock(RowLock::Session(parent.pk))?;
        let row = self.session_row(&parent)?;
        let last = row.last_event_seq;
        if f.at_seq == 0 || f.at_seq > last {
            return Err(Error::invalid(format!(
                "atSeq: must be an event of the session, 1 to {last}"
            )));
        }
        let open = super::record::open_turn_before(self.conn, parent.pk, f.at_seq + 1)?;
        if let Some(turn) = open
            && row.turn_active
            && super::record::open_turn_before(self.conn, parent.pk, last + 1)? == Some(turn)
        {
            return Err(Error::Conflict(
                "session_busy",
                format!(
                    "atSeq: event {} is inside the session's running turn (started at seq \
                     {turn}); fork at seq {} or earlier, or once the turn has ended",
                    f.at_seq,
                    turn.saturating_sub(1).max(1)
                ),
            ));
        }
        let first_prompt = super::events_after(self.conn, parent.pk, 0, 1)?
            .into_iter()
            .next()
            .and_then(|e| serde_json::from_str::<Value>(&e.body).ok())
            .and_then(|b| b.get("prompt").and_then(Value::as_str).map(str::to_owned))
            .unwrap_or_default();
        let key = self.insert_session_row(&f.plan, &first_prompt, None)?;
        self.set_record_facts(
            &key,
            &NewRecordFacts {
                metadata: f.plan.metadata.as_deref(),
                budget_cents: f.plan.budget_cents,
                parent_kind: Some(ParentKind::Fork.as_str()),
                parent_session_id: Some(&parent.id),
            },
        )?;
        let copied = self.copy_events(&parent, &key, f.at_seq)?;
        self.append(
            &key,
            &Event::System {
                level: Level::Info,
                message: format!("Forked from session {} at event {}.", parent.id, f.at_seq),
                metadata: SystemMetadata::code(FORKED),
            },
        )?;
        if let Some(started) = copied.open_turn {
            // The copy ends inside a turn the parent finished: in the fork it ends here.
            let mut state = match serde_json::from_str::<Event>(&started) {
                Ok(Event::TurnStarted { state }) => state,
                _ => {
                    return Err(Error::Internal(
                        "a copied turn_started is unreadable".into(),
                    ));
                }
            };
            state.status = TurnStateStatus::Interrupted;
            self.append(&key, &Event::Interrupted { state })?;
        }
        if copied.queue_pending {
            // The parent's queued follow-ups stay the parent's.
            self.append(
                &key,
                &Event::FollowUpQueue {
                    follow_up_queue: Vec::new(),
                },
            )?;
        }
        self.set_turn(&key, TurnStatus::Complete)?;
        let first_seq = match &f.first {
            Some(m) => Some(self.add_message(&ws, &key, m, true)?.seq),
            None => None,
        };
        Ok(Forked { key, first_seq })
    }

    /// Copies the parent's events 2..=`at_seq` (its `session_created` is the fork's own), the
    /// images they show and the record of which input each copied turn took.
    fn copy_events(
        &mut self,
        parent: &SessionKey,
        fork: &SessionKey,
        at_seq: u64,
    ) -> Result<Copied> {
        let mut copied = Copied::default();
        let mut after = 1;
        let mut images: Vec<String> = Vec::new();
        while after < at_seq {
            let page = super::events_after(self.conn, parent.pk, after, PAGE)?;
            let Some(last) = page.last() else { break };
            after = last.seq;
            for ev in page.into_iter().filter(|e| e.seq <= at_seq) {
                let seq = self.append_raw(
                    fork,
                    &ev.event_type,
                    &ev.body,
                    sessiond_model::frame::settles_tail(&ev.event_type),
                )?;
                if seq != ev.seq {
                    return Err(Error::Internal(format!(
                        "fork copy out of step: event {} landed at {seq}",
                        ev.seq
                    )));
                }
                let body: Value = serde_json::from_str(&ev.body).unwrap_or(Value::Null);
                match ev.event_type.as_str() {
                    "turn_started" => copied.open_turn = Some(ev.body.clone()),
                    t if crate::timeline::is_terminal_type(t) => copied.open_turn = None,
                    "follow_up_queue" => {
                        copied.queue_pending = body
                            .get("followUpQueue")
                            .and_then(Value::as_array)
                            .is_some_and(|q| !q.is_empty());
                    }
                    "prompt_submitted" => {
                        if let Some(p) = body.get("prompt").and_then(Value::as_str) {
                            self.index_prompt(fork, ev.seq, p)?;
                        }
                    }
                    _ => {}
                }
                if let Some(list) = body.get("images").and_then(Value::as_array) {
                    images.extend(
                        list.iter()
                            .filter_map(|i| i.get("storageId").and_then(Value::as_str))
                            .map(str::to_owned),
                    );
                }
            }
        }
        for storage_id in images {
            self.conn
                .prepare_cached(
                    "INSERT INTO images (session_pk, storage_id, mime_type, bytes, data)
                     SELECT ?1, storage_id, mime_type, bytes, data FROM images
                     WHERE session_pk = ?2 AND storage_id = ?3
                     ON CONFLICT DO NOTHING",
                )?
                .execute(params![fork.pk, parent.pk, storage_id])?;
        }
        self.conn
            .prepare_cached(
                "INSERT INTO input_turns (session_pk, input_seq, turn_started_seq)
                 SELECT ?1, input_seq, turn_started_seq FROM input_turns
                 WHERE session_pk = ?2 AND input_seq <= ?3 AND turn_started_seq <= ?3",
            )?
            .execute(params![fork.pk, parent.pk, at_seq as i64])?;
        Ok(copied)
    }
}

/// What the copy left open for the fork to close.
#[derive(Debug, Default)]
struct Copied {
    /// The body of a `turn_started` copied without its terminal.
    open_turn: Option<String>,
    /// The last copied `follow_up_queue` listed follow-ups (the parent's, not the fork's).
    queue_pending: bool,
}
