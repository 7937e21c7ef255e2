//! The facts a session's record (the `/v2` Session) is made of beyond its projection row:
//! provenance, metadata, budget, lineage, closing and stopping (migration 0004; a webhook
//! delivery's provenance, 0016), a task's final status, and the events the record and the HAST
//! projection look up by position.

use super::sql::{Db, Dialect, OptionalExtension, params};

use super::{SessionKey, Tx};
use crate::error::Result;

/// What the record of one session needs besides its [`super::SessionRow`].
#[derive(Debug, Clone, Default)]
pub struct RecordFacts {
    pub pk: i64,
    pub source: Option<String>,
    pub attribution_type: Option<String>,
    pub attribution_id: Option<String>,
    /// JSON object, string → string.
    pub metadata: Option<String>,
    pub budget_cents: u64,
    pub parent_kind: Option<String>,
    pub parent_session_id: Option<String>,
    /// A fork's fork point: the parent's event its copied timeline ends with.
    pub fork_seq: Option<u64>,
    pub closed_at: Option<i64>,
    pub handed_off_to: Option<String>,
    /// The task's final status and its reason (the agent platform API's cancel, complete, …).
    pub final_status: Option<super::agentex::FinalStatus>,
    pub status_reason: Option<String>,
    pub stopped_at: Option<i64>,
    pub stopped_by: Option<String>,
    /// JSON `Usage`: the sum of the session's usage events.
    pub usage_totals: Option<String>,
    /// JSON: what the engine keeps between turns (the openai engine's last `model`).
    pub engine_memo: Option<String>,
    /// The engine configuration of the session's agent (JSON).
    pub agent_engine: String,
    /// The first prompt (`session_created.prompt`).
    pub prompt: Option<String>,
    pub last_terminal: Option<LastTerminal>,
    pub last_message_at: Option<i64>,
    /// When the newest event was written.
    pub last_event_at: Option<i64>,
    /// The webhook delivery that started the session (migration 0016).
    pub webhook: WebhookFacts,
}

/// A session's webhook provenance (migration 0016): the delivery's event as the record names it
/// (`webhook_type`), its id, and the account that caused it (`attribution.user`, JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookFacts {
    pub webhook_type: Option<String>,
    pub webhook_id: Option<String>,
    pub attribution_user: Option<String>,
}

/// The newest terminal event of a session.
#[derive(Debug, Clone)]
pub struct LastTerminal {
    pub seq: u64,
    pub event_type: String,
    /// `complete.status`.
    pub status: Option<String>,
    /// `complete.error`.
    pub error: Option<String>,
    /// `complete.result`.
    pub result: Option<String>,
}

fn fact_columns(d: Dialect) -> String {
    format!(
        "s.pk, s.source, s.attribution_type, s.attribution_id, s.metadata,
         s.budget_cents, s.parent_kind, s.parent_session_id, s.closed_at, s.handed_off_to,
         s.stopped_at, s.stopped_by, s.usage_totals, s.engine_memo, a.engine,
         {}, t.seq, t.type, {}, {}, {}, s.last_message_at, l.created_at, k.status,
         k.status_reason, s.webhook_type, s.webhook_id, s.attribution_user,
         (SELECT max(e.seq) FROM events e WHERE s.parent_kind = 'fork' AND e.session_pk = s.pk
            AND e.type = 'system' AND {} = '{}')",
        d.json_text("f.body", "prompt"),
        d.json_text("t.body", "status"),
        d.json_text("t.body", "error"),
        d.json_text("t.body", "result"),
        d.json_text("e.body", "metadata.code"),
        crate::timeline::SystemMetadata::FORKED,
    )
}

const FACT_JOINS: &str = "FROM sessions s JOIN agents a ON a.id = s.agent_id
    LEFT JOIN events f ON f.session_pk = s.pk AND f.seq = 1
    LEFT JOIN events t ON t.session_pk = s.pk AND t.seq = s.last_terminal_seq
    LEFT JOIN events l ON l.session_pk = s.pk AND l.seq = s.last_event_seq
    LEFT JOIN agentex_tasks k ON k.session_pk = s.pk";

fn facts_from_row(r: &super::sql::Row<'_>) -> super::sql::Result<RecordFacts> {
    let terminal_seq: Option<i64> = r.get(16)?;
    let terminal_type: Option<String> = r.get(17)?;
    Ok(RecordFacts {
        pk: r.get(0)?,
        source: r.get(1)?,
        attribution_type: r.get(2)?,
        attribution_id: r.get(3)?,
        metadata: r.get(4)?,
        budget_cents: r.get::<_, i64>(5)?.max(0) as u64,
        parent_kind: r.get(6)?,
        parent_session_id: r.get(7)?,
        closed_at: r.get(8)?,
        handed_off_to: r.get(9)?,
        final_status: r.get(23)?,
        status_reason: r.get(24)?,
        stopped_at: r.get(10)?,
        stopped_by: r.get(11)?,
        usage_totals: r.get(12)?,
        engine_memo: r.get(13)?,
        agent_engine: r.get(14)?,
        prompt: r.get(15)?,
        last_terminal: match (terminal_seq, terminal_type) {
            (Some(seq), Some(event_type)) => Some(LastTerminal {
                seq: seq as u64,
                event_type,
                status: r.get(18)?,
                error: r.get(19)?,
                result: r.get(20)?,
            }),
            _ => None,
        },
        last_message_at: r.get(21)?,
        last_event_at: r.get(22)?,
        webhook: WebhookFacts {
            webhook_type: r.get(25)?,
            webhook_id: r.get(26)?,
            attribution_user: r.get(27)?,
        },
        // The fork's `forked` notice follows the last event it copied.
        fork_seq: r
            .get::<_, Option<i64>>(28)?
            .map(|notice| notice.saturating_sub(1).max(0) as u64),
    })
}

/// The record facts of one session.
pub fn record_facts(conn: &Db, pk: i64) -> Result<Option<RecordFacts>> {
    let columns = fact_columns(conn.dialect());
    let sql = format!("SELECT {columns} {FACT_JOINS} WHERE s.pk = ?1");
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([pk], facts_from_row)
        .optional()?)
}

/// The record facts of several sessions (one list page), in no particular order.
pub fn record_facts_of(conn: &Db, pks: &[i64]) -> Result<Vec<RecordFacts>> {
    let list = serde_json::to_string(pks)
        .map_err(|e| crate::Error::Internal(format!("cannot encode keys: {e}")))?;
    let d = conn.dialect();
    let sql = format!(
        "SELECT {} {FACT_JOINS} WHERE {}",
        fact_columns(d),
        d.in_json_integers("s.pk", "?1")
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map([list], facts_from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

/// The input that started the turn whose `turn_started` is at `turn_seq`: its seq and what kind
/// of input it was (`initial`, `message`, `answer`, `wake`, `machine`). `None` for turns started
/// before sessiond recorded the runner's own inputs.
pub fn turn_input(conn: &Db, pk: i64, turn_seq: u64) -> Result<Option<(u64, String)>> {
    let sql = format!(
        "SELECT it.input_seq, CASE e.type
                 WHEN 'prompt_submitted' THEN COALESCE({}, 'message')
                 WHEN 'answer_submitted' THEN 'answer'
                 WHEN 'sleep' THEN 'wake'
                 WHEN 'state_machine' THEN 'machine'
                 WHEN 'turn_started' THEN 'resume'
                 ELSE e.type END
             FROM input_turns it
             JOIN events e ON e.session_pk = it.session_pk AND e.seq = it.input_seq
             WHERE it.session_pk = ?1 AND it.turn_started_seq = ?2
             ORDER BY it.input_seq LIMIT 1",
        conn.dialect().json_text("e.body", "inputKind")
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![pk, turn_seq as i64], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, String>(1)?))
        })
        .optional()?)
}

/// The `turn_started` seq of the turn still open just before timeline event `seq`, if any: the
/// newest turn before it (by the index on `input_turns`, every turn has a row there) unless its
/// terminal came before `seq`. Reads no further than that turn's own events.
pub fn open_turn_before(conn: &Db, pk: i64, seq: u64) -> Result<Option<u64>> {
    let seq = seq.min(i64::MAX as u64) as i64;
    let turn: Option<i64> = conn
        .prepare_cached(
            "SELECT max(turn_started_seq) FROM input_turns
             WHERE session_pk = ?1 AND turn_started_seq < ?2",
        )?
        .query_row(params![pk, seq], |r| r.get(0))?;
    let Some(turn) = turn else {
        return Ok(None);
    };
    let ended = conn
        .prepare_cached(
            "SELECT 1 FROM events
             WHERE session_pk = ?1 AND seq > ?2 AND seq < ?3
               AND type IN ('complete', 'ask', 'interrupted', 'sleep')
             ORDER BY seq LIMIT 1",
        )?
        .query_row(params![pk, turn, seq], |_| Ok(()))
        .optional()?
        .is_some();
    Ok((!ended).then_some(turn as u64))
}

/// What the budget check needs, inside a write: `(budget_cents, usage totals JSON)`.
pub(crate) fn budget_of(conn: &Db, pk: i64) -> Result<Option<(u64, Option<String>)>> {
    Ok(conn
        .prepare_cached("SELECT budget_cents, usage_totals FROM sessions WHERE pk = ?1")?
        .query_row([pk], |r| Ok((r.get::<_, i64>(0)?.max(0) as u64, r.get(1)?)))
        .optional()?)
}

/// The facts a new session starts with besides its row.
pub struct NewRecordFacts<'a> {
    pub metadata: Option<&'a str>,
    pub budget_cents: u64,
    pub parent_kind: Option<&'a str>,
    pub parent_session_id: Option<&'a str>,
}

impl Tx<'_> {
    /// Records the webhook delivery that started a session (in the transaction that creates it).
    pub(crate) fn set_webhook_facts(&mut self, key: &SessionKey, w: &WebhookFacts) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE sessions SET webhook_type = ?2, webhook_id = ?3, attribution_user = ?4
                 WHERE pk = ?1",
            )?
            .execute(params![
                key.pk,
                w.webhook_type,
                w.webhook_id,
                w.attribution_user
            ])?;
        Ok(())
    }

    pub(crate) fn set_record_facts(
        &mut self,
        key: &SessionKey,
        f: &NewRecordFacts<'_>,
    ) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE sessions SET metadata = ?2, budget_cents = ?3, parent_kind = ?4,
                    parent_session_id = ?5 WHERE pk = ?1",
            )?
            .execute(params![
                key.pk,
                f.metadata,
                f.budget_cents.min(i64::MAX as u64) as i64,
                f.parent_kind,
                f.parent_session_id
            ])?;
        Ok(())
    }

    pub(crate) fn set_metadata(&mut self, key: &SessionKey, metadata: Option<&str>) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE sessions SET metadata = ?2, updated_at = ?3 WHERE pk = ?1")?
            .execute(params![key.pk, metadata, self.now])?;
        Ok(())
    }

    pub(crate) fn metadata(&self, key: &SessionKey) -> Result<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT metadata FROM sessions WHERE pk = ?1")?
            .query_row([key.pk], |r| r.get(0))
            .optional()?
            .flatten())
    }

    pub(crate) fn set_budget(&mut self, key: &SessionKey, cents: u64) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE sessions SET budget_cents = ?2, updated_at = ?3 WHERE pk = ?1")?
            .execute(params![key.pk, cents.min(i64::MAX as u64) as i64, self.now])?;
        Ok(())
    }

    /// Closes a session to further prompts (a handoff to `successor`); a closed session stays
    /// closed with its first successor.
    pub(crate) fn close_session(&mut self, key: &SessionKey, successor: &str) -> Result<()> {
        self.conn
            .prepare_cached(
                "UPDATE sessions SET closed_at = COALESCE(closed_at, ?2),
                    handed_off_to = COALESCE(handed_off_to, ?3), updated_at = ?2 WHERE pk = ?1",
            )?
            .execute(params![key.pk, self.now, successor])?;
        Ok(())
    }

    /// Records an interrupt request: when, and who asked.
    pub(crate) fn set_stopped(&mut self, key: &SessionKey, by: &str) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE sessions SET stopped_at = ?2, stopped_by = ?3 WHERE pk = ?1")?
            .execute(params![key.pk, self.now, by])?;
        Ok(())
    }
}

impl RecordFacts {
    /// Why the session takes no input, by the one rule every input consults
    /// ([`super::intake::closure`]).
    pub fn closure(&self) -> Option<super::intake::Closure> {
        super::intake::closure(&super::intake::IntakeFacts {
            final_status: self.final_status,
            status_reason: self.status_reason.as_deref(),
            closed: self.closed_at.is_some(),
            handed_off_to: self.handed_off_to.as_deref(),
            budget_cents: self.budget_cents,
            usage_totals: self.usage_totals.as_deref(),
        })
    }
}

pub use super::intake::{reached, spent_cents, whole_cents};

impl Tx<'_> {
    /// `Err(BudgetHit)` when the session's budget is spent, read inside the write so that a
    /// message and the usage that spends the budget cannot pass each other.
    pub(crate) fn check_budget(&self, key: &SessionKey) -> Result<()> {
        match budget_of(self.conn, key.pk)? {
            Some((cents, totals)) if reached(cents, totals.as_deref()) => {
                Err(crate::error::Error::BudgetHit { cents })
            }
            Some(_) => Ok(()),
            None => Err(crate::error::Error::NotFound),
        }
    }
}
