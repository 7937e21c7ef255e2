//! Whether a session takes input: the one rule every input of every API family consults.
//!
//! A session stops taking input in four ways, and each has one code that every family answers
//! with, in its own error shape:
//!
//! | why | code | until |
//! |---|---|---|
//! | its task has a final status (`/agentex` cancel, complete, fail, terminate, timeout) | `task_closed` | for good |
//! | it was handed off to another session (`/v2` `parent.kind: handoff`) | `session_closed` | for good |
//! | its `/v2` budget is spent | `budget_hit` | the budget is raised |
//! | it was deleted | `not_found` (the row is gone) | — |
//!
//! The rule reads the session's row and its task's row inside the transaction that takes the
//! input, after holding the session's row ([`Tx::lock`]): a closing (a final status, a handoff,
//! the usage that spends the budget, a delete) and an input that race are ordered by that row,
//! so they cannot both win. The same [`closure`] decides the `/v2` record's `prompting`, and a
//! turn claim consults it too: a session closed for good starts no more turns, so whatever its
//! own turns left queued (a sleep's wake, a machine's next state) is dropped.

use super::agentex::FinalStatus;
use super::sql::{OptionalExtension, params};
use super::{RowLock, SessionKey, TurnStatus, Tx};
use crate::error::{Error, Result};

/// Why a session takes no input now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Closure {
    /// Its task was given a final status through the agent platform API.
    TaskFinal {
        status: FinalStatus,
        reason: Option<String>,
    },
    /// It was handed off to `successor` on the Task events API.
    HandedOff { successor: String },
    /// Its budget is spent; raising the budget opens it again.
    BudgetSpent { cents: u64 },
}

/// What the rule reads about a session: its task's final status, its closing and its budget.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct IntakeFacts<'a> {
    pub final_status: Option<FinalStatus>,
    pub status_reason: Option<&'a str>,
    pub closed: bool,
    pub handed_off_to: Option<&'a str>,
    pub budget_cents: u64,
    /// JSON `Usage`: the session's usage totals.
    pub usage_totals: Option<&'a str>,
}

/// The rule: why the session takes no input, or `None` when it takes it. A final status wins
/// over a handoff (the task's status shows it), and both over the budget (they are for good).
pub(crate) fn closure(f: &IntakeFacts<'_>) -> Option<Closure> {
    if let Some(status) = f.final_status {
        return Some(Closure::TaskFinal {
            status,
            reason: f.status_reason.map(str::to_owned),
        });
    }
    if f.closed {
        return Some(Closure::HandedOff {
            successor: f.handed_off_to.unwrap_or_default().to_owned(),
        });
    }
    if reached(f.budget_cents, f.usage_totals) {
        return Some(Closure::BudgetSpent {
            cents: f.budget_cents,
        });
    }
    None
}

/// Cents spent according to a session's usage totals (JSON `Usage`).
pub fn spent_cents(usage_totals: Option<&str>) -> f64 {
    usage_totals
        .and_then(|t| serde_json::from_str::<crate::timeline::Usage>(t).ok())
        .map(|u| (u.cost.total * 100.0).max(0.0))
        .unwrap_or(0.0)
}

/// Whole cents spent: what a record reports. `spent >= budget` and `whole(spent) >= budget` agree
/// for a whole-cent budget.
pub fn whole_cents(spent: f64) -> u64 {
    spent.floor() as u64
}

/// The cap is set and reached.
pub fn reached(budget_cents: u64, usage_totals: Option<&str>) -> bool {
    budget_cents > 0 && spent_cents(usage_totals) >= budget_cents as f64
}

impl Closure {
    /// The code every family answers a refused input with.
    pub fn code(&self) -> &'static str {
        match self {
            Closure::TaskFinal { .. } => "task_closed",
            Closure::HandedOff { .. } => "session_closed",
            Closure::BudgetSpent { .. } => "budget_hit",
        }
    }

    /// For good (a final status, a handoff), rather than until the budget is raised.
    pub fn is_final(&self) -> bool {
        !matches!(self, Closure::BudgetSpent { .. })
    }

    /// What a reader is told: why, and what (if anything) opens the session again.
    pub fn detail(&self) -> String {
        match self {
            Closure::TaskFinal { status, reason } => match reason {
                Some(r) if !r.is_empty() => format!(
                    "the task is {} ({r}) and accepts no new messages or events",
                    status.name()
                ),
                _ => format!(
                    "the task is {} and accepts no new messages or events",
                    status.name()
                ),
            },
            Closure::HandedOff { successor } => {
                format!("the session was handed off to session {successor} and takes no more input")
            }
            Closure::BudgetSpent { cents } => format!(
                "budget_hit: the session has spent its budget of {cents} cents; raise budget.cents to continue"
            ),
        }
    }

    /// The refusal of an input (409 on the HTTP families, -32000 in JSON-RPC).
    pub fn error(&self) -> Error {
        match self {
            Closure::TaskFinal { .. } => Error::Conflict(self.code(), self.detail()),
            Closure::HandedOff { .. } => Error::SessionClosed,
            Closure::BudgetSpent { cents } => Error::BudgetHit { cents: *cents },
        }
    }
}

impl Tx<'_> {
    /// Holds the session's row for the rest of the transaction and reads why it takes no input
    /// (`None`: it takes it); 404 when it is gone.
    pub(crate) fn closure(&self, key: &SessionKey) -> Result<Option<Closure>> {
        // A statement of its own after the lock: on PostgreSQL a statement that waited for a
        // lock sees the newest version of the rows it locked, and of the others (the task's
        // status) what was committed when it started — a cancel it waited for would not show.
        self.lock(RowLock::Session(key.pk))?;
        let row = self
            .conn
            .prepare_cached(
                "SELECT t.status, t.status_reason, s.closed_at, s.handed_off_to, s.budget_cents,
                    s.usage_totals
                 FROM sessions s LEFT JOIN agentex_tasks t ON t.session_pk = s.pk
                 WHERE s.pk = ?1",
            )?
            .query_row(params![key.pk], |r| {
                Ok((
                    r.get::<_, Option<FinalStatus>>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<i64>>(2)?,
                    r.get::<_, Option<String>>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, Option<String>>(5)?,
                ))
            })
            .optional()?;
        let Some((final_status, reason, closed_at, successor, budget, totals)) = row else {
            return Err(Error::NotFound);
        };
        Ok(closure(&IntakeFacts {
            final_status,
            status_reason: reason.as_deref(),
            closed: closed_at.is_some(),
            handed_off_to: successor.as_deref(),
            budget_cents: budget.max(0) as u64,
            usage_totals: totals.as_deref(),
        }))
    }

    /// The check every input makes before it writes anything: the session takes input, else the
    /// refusal that names why.
    pub(crate) fn takes_input(&self, key: &SessionKey) -> Result<()> {
        match self.closure(key)? {
            Some(c) => Err(c.error()),
            None => Ok(()),
        }
    }

    /// At a turn claim, with no turn running: whether the session is closed for good, in which
    /// case what is left on its queue (a wake, a machine's next state, inputs taken before it
    /// closed) is dropped and the session, waiting for a turn, ends `interrupted`, as a stop
    /// leaves it. A running turn finishes first (it may still take the steers queued for it).
    /// A spent budget is not this: its turn starts and fails with `budget_hit`. Answers the
    /// closure it read (`None`: the session takes input), so that the claim reads it once.
    pub(crate) fn drop_work_if_closed(&mut self, key: &SessionKey) -> Result<Option<Closure>> {
        let closure = self.closure(key)?;
        if !closure.as_ref().is_some_and(Closure::is_final) {
            return Ok(closure);
        }
        let row = self.session_row(key)?;
        if row.turn_active {
            return Ok(closure);
        }
        for input in self.pending_inputs(key)? {
            self.remove_input(key, input.seq)?;
        }
        self.refresh_follow_up_queue(key)?;
        if matches!(row.turn_status, TurnStatus::Running | TurnStatus::Sleep) {
            self.set_turn(key, TurnStatus::Interrupted)?;
        }
        Ok(closure)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPENT: &str = r#"{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.05}}"#;

    #[test]
    fn an_open_session_takes_input() {
        assert_eq!(closure(&IntakeFacts::default()), None);
        let within = IntakeFacts {
            budget_cents: 6,
            usage_totals: Some(SPENT),
            ..Default::default()
        };
        assert_eq!(closure(&within), None, "5 cents spent of 6");
    }

    #[test]
    fn each_closing_has_its_code_and_a_final_status_wins() {
        let spent = IntakeFacts {
            budget_cents: 5,
            usage_totals: Some(SPENT),
            ..Default::default()
        };
        let c = closure(&spent).expect("spent");
        assert_eq!((c.code(), c.is_final()), ("budget_hit", false));
        assert!(matches!(c.error(), Error::BudgetHit { .. }));

        let handed = IntakeFacts {
            closed: true,
            handed_off_to: Some("next"),
            ..spent
        };
        let c = closure(&handed).expect("handed off");
        assert_eq!((c.code(), c.is_final()), ("session_closed", true));
        assert!(matches!(c.error(), Error::SessionClosed));
        assert!(c.detail().contains("next"));

        let cancelled = IntakeFacts {
            final_status: Some(FinalStatus::Canceled),
            status_reason: Some("Task canceled"),
            ..handed
        };
        let c = closure(&cancelled).expect("cancelled");
        assert_eq!((c.code(), c.is_final()), ("task_closed", true));
        assert!(matches!(c.error(), Error::Conflict("task_closed", _)));
        assert!(c.detail().contains("CANCELED"), "{}", c.detail());
    }
}
