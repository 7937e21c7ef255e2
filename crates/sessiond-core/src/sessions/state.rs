//! A session's state in one vocabulary: what the web console shows in list rows, the session
//! header and its details alike, and what the Sessions API's `state` filter selects by.
//!
//! The state is derived here, from the same facts the `/v2` record's lifecycle reads (the turn
//! status, the newest terminal, the task's final status) and from the one rule that decides
//! whether a session takes input (the store's intake rule); a client never guesses it.
//!
//! | state | when |
//! |---|---|
//! | `running` | a turn runs, or an input waits for one |
//! | `asking` | the last turn asked a question (`ask`) |
//! | `sleeping` | the last turn went to sleep until a wake |
//! | `done` | the last turn completed; or the task was given the final status `COMPLETED` |
//! | `failed` | the last turn failed; or the task is `FAILED` or `TIMED_OUT` |
//! | `interrupted` | the last turn was interrupted (a stop, a restart) |
//! | `cancelled` | the last turn was cancelled; or the task is `CANCELED` or `TERMINATED` |
//! | `closed` | the session was handed off to another one and takes no more input |
//! | `over_budget` | its `/v2` budget is spent; raising the budget opens it again |
//!
//! A running turn wins over everything (it is what happens now); a closing for good wins over the
//! last turn (no input can follow it, so a queued one never runs); a spent budget wins over the
//! last turn.

use std::collections::HashMap;

use crate::error::Result;
use crate::store::agentex::FinalStatus;
use crate::store::intake::Closure;
use crate::store::{RecordFacts, SessionRow};

/// One state of the vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    Running,
    Asking,
    Sleeping,
    Done,
    Failed,
    Interrupted,
    Cancelled,
    Closed,
    OverBudget,
}

impl State {
    pub const ALL: [State; 9] = [
        State::Running,
        State::Asking,
        State::Sleeping,
        State::Done,
        State::Failed,
        State::Interrupted,
        State::Cancelled,
        State::Closed,
        State::OverBudget,
    ];

    /// The states that need a person: a question, a failure, a spent budget (`attention`).
    pub const ATTENTION: [State; 3] = [State::Asking, State::Failed, State::OverBudget];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Asking => "asking",
            State::Sleeping => "sleeping",
            State::Done => "done",
            State::Failed => "failed",
            State::Interrupted => "interrupted",
            State::Cancelled => "cancelled",
            State::Closed => "closed",
            State::OverBudget => "over_budget",
        }
    }

    pub fn parse(name: &str) -> Option<State> {
        State::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// The states a `state` filter names: a comma-separated list of states, where `attention`
/// stands for [`State::ATTENTION`]. `None` when the value names no state of the vocabulary.
pub fn parse_filter(value: &str) -> Option<Vec<State>> {
    let mut states = Vec::new();
    for name in value.split(',').map(str::trim) {
        match name {
            "attention" => states.extend(State::ATTENTION),
            _ => states.push(State::parse(name)?),
        }
    }
    states.dedup();
    Some(states)
}

/// Where a session stands: its state, the reason when there is one (an error, who interrupted,
/// why it is closed), and why it takes no input when it takes none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    pub state: State,
    pub reason: Option<String>,
    pub input_closed: Option<Closure>,
}

/// The state of a task given a final status through the agent platform API.
fn final_state(status: FinalStatus) -> State {
    match status {
        FinalStatus::Completed => State::Done,
        FinalStatus::Failed | FinalStatus::TimedOut => State::Failed,
        FinalStatus::Canceled | FinalStatus::Terminated => State::Cancelled,
    }
}

/// Why a session takes no input, in words for people: the refusal's detail, without the code
/// that an API error leads with (the code travels beside it).
pub fn closed_words(c: &Closure) -> String {
    match c {
        Closure::BudgetSpent { cents } => format!(
            "the session has spent its budget of {cents} cents; raise the budget to continue"
        ),
        _ => c.detail(),
    }
}

/// The standing of one session from its projection row and its record facts.
pub fn standing(row: &SessionRow, facts: &RecordFacts) -> Standing {
    let closure = facts.closure();
    let (state, reason) = derive(row, facts, closure.as_ref());
    Standing {
        state,
        reason: reason.filter(|r| !r.is_empty()),
        input_closed: closure,
    }
}

fn derive(
    row: &SessionRow,
    facts: &RecordFacts,
    closure: Option<&Closure>,
) -> (State, Option<String>) {
    if row.turn_active {
        return (State::Running, None);
    }
    match closure {
        Some(Closure::TaskFinal { status, reason }) => {
            return (
                final_state(*status),
                Some(
                    reason
                        .clone()
                        .unwrap_or_else(|| format!("the task's status is {}", status.name())),
                ),
            );
        }
        Some(c @ Closure::HandedOff { .. }) => return (State::Closed, Some(c.detail())),
        Some(c @ Closure::BudgetSpent { .. }) => return (State::OverBudget, Some(closed_words(c))),
        None => {}
    }
    if row.turn_status == crate::store::TurnStatus::Running {
        return (State::Running, None);
    }
    let Some(t) = facts.last_terminal.as_ref() else {
        return (State::Done, None);
    };
    match (t.event_type.as_str(), t.status.as_deref()) {
        // A turn the budget stopped, the budget since raised, still failed (its error says why).
        ("complete", Some("failed")) => (State::Failed, t.error.clone()),
        ("complete", Some("cancelled")) => (State::Cancelled, None),
        ("complete", _) => (State::Done, None),
        ("ask", _) => (State::Asking, None),
        ("sleep", _) => (State::Sleeping, None),
        _ => (
            State::Interrupted,
            facts
                .stopped_by
                .as_ref()
                .map(|by| format!("interrupted by {by}")),
        ),
    }
}

impl super::Sessions {
    /// The standing of each of `rows`, by `pk` (one read of their facts).
    pub async fn standings(&self, rows: &[SessionRow]) -> Result<HashMap<i64, Standing>> {
        let pks: Vec<i64> = rows.iter().map(|r| r.pk).collect();
        let facts = self.store.projections().record_facts_of(pks).await?;
        let by_pk: HashMap<i64, RecordFacts> = facts.into_iter().map(|f| (f.pk, f)).collect();
        Ok(rows
            .iter()
            .filter_map(|row| Some((row.pk, standing(row, by_pk.get(&row.pk)?))))
            .collect())
    }

    /// The standing of one session of the actor's workspace.
    pub async fn standing(&self, row: &SessionRow) -> Result<Standing> {
        let facts = self
            .store
            .projections()
            .record_facts(row.pk)
            .await?
            .ok_or(crate::Error::NotFound)?;
        Ok(standing(row, &facts))
    }

    /// A page of the list holding only sessions in one of `states`, newest first, with their
    /// standings. The list is read in chunks and each row's state derived; a request reads at
    /// most [`STATE_SCAN_MAX`] rows, so a page may come back short (even empty) with a cursor
    /// that goes on where the reading stopped.
    pub async fn list_in_states(
        &self,
        actor: &super::Actor,
        q: super::ListQuery,
        states: &[State],
    ) -> Result<(Vec<(SessionRow, Standing)>, Option<String>)> {
        let want = q.limit as usize;
        let mut found: Vec<(SessionRow, Standing)> = Vec::new();
        let mut cursor = q.cursor.clone();
        let mut scanned = 0usize;
        loop {
            let chunk = super::ListQuery {
                cursor: cursor.clone(),
                limit: STATE_SCAN_CHUNK,
                ..q.clone()
            };
            let (rows, next) = self.list(actor, chunk).await?;
            scanned += rows.len();
            let mut standings = self.standings(&rows).await?;
            for row in rows {
                let Some(s) = standings.remove(&row.pk) else {
                    continue;
                };
                if states.contains(&s.state) {
                    if found.len() == want {
                        // One more match: the page is full and more follow it.
                        let next = found.last().map(|(r, _)| super::query::encode_cursor(r));
                        return Ok((found, next));
                    }
                    found.push((row, s));
                }
            }
            match next {
                None => return Ok((found, None)),
                Some(next) if scanned >= STATE_SCAN_MAX => return Ok((found, Some(next))),
                Some(next) => cursor = Some(next),
            }
        }
    }
}

/// Rows read per chunk of a list filtered by state.
const STATE_SCAN_CHUNK: u32 = 100;
/// Rows one list request filtered by state reads at most.
pub const STATE_SCAN_MAX: usize = 1_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_parses_back_from_its_name() {
        for s in State::ALL {
            assert_eq!(State::parse(s.as_str()), Some(s));
        }
        assert_eq!(State::parse("Failed"), None);
    }

    fn row(turn_status: &str, turn_active: bool) -> SessionRow {
        SessionRow {
            pk: 1,
            id: "s".into(),
            workspace_id: "w".into(),
            agent_id: "a".into(),
            agent_name: "A".into(),
            user_id: "u".into(),
            title: String::new(),
            title_origin: "excerpt".into(),
            title_status: "complete".into(),
            turn_status: crate::store::TurnStatus::parse(turn_status).expect("a turn status"),
            bucket: "done".into(),
            archived_at: None,
            cwd: None,
            created_by_session_id: None,
            tier: None,
            mode: String::new(),
            created_at: 0,
            updated_at: 0,
            last_event_seq: 0,
            last_output_seq: 0,
            last_delivered_input_seq: 0,
            delivery_attempt: None,
            todos: None,
            follow_up_queue: None,
            requested_machine: None,
            machine_state: None,
            machine: None,
            turn_active,
            last_read_seq: 0,
            is_default: false,
            turn_owner: None,
        }
    }

    fn ended(event_type: &str, status: Option<&str>) -> RecordFacts {
        RecordFacts {
            last_terminal: Some(crate::store::LastTerminal {
                seq: 3,
                event_type: event_type.into(),
                status: status.map(str::to_owned),
                error: Some("boom".into()),
                result: None,
            }),
            ..RecordFacts::default()
        }
    }

    #[test]
    fn a_running_turn_wins_then_a_closing_then_the_last_turn() {
        let mut closed = ended("complete", Some("failed"));
        closed.closed_at = Some(1);
        closed.handed_off_to = Some("next".into());
        // A turn that runs is what happens now, closed or not.
        assert_eq!(
            standing(&row("running", true), &closed).state,
            State::Running
        );
        // A queued input of a session closed for good never runs: closed, not running.
        let s = standing(&row("running", false), &closed);
        assert_eq!(s.state, State::Closed);
        assert!(s.reason.is_some_and(|r| r.contains("next")));
        let mut cancelled = ended("complete", Some("completed"));
        cancelled.final_status = Some(FinalStatus::Terminated);
        assert_eq!(
            standing(&row("complete", false), &cancelled).state,
            State::Cancelled
        );
        // A spent budget wins over the last turn, which completed.
        let mut spent = ended("complete", Some("completed"));
        spent.budget_cents = 10;
        spent.usage_totals = Some(
            r#"{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,
                "cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0.5}}"#
                .into(),
        );
        let s = standing(&row("complete", false), &spent);
        assert_eq!(s.state, State::OverBudget);
        assert!(s.input_closed.is_some());
        // Otherwise the last terminal says it.
        let failed = standing(&row("complete", false), &ended("complete", Some("failed")));
        assert_eq!(
            (failed.state, failed.reason.as_deref()),
            (State::Failed, Some("boom"))
        );
        for (t, st) in [
            ("ask", State::Asking),
            ("sleep", State::Sleeping),
            ("interrupted", State::Interrupted),
        ] {
            assert_eq!(standing(&row(t, false), &ended(t, None)).state, st);
        }
    }

    #[test]
    fn attention_stands_for_asking_failed_and_over_budget() {
        assert_eq!(
            parse_filter("attention"),
            Some(vec![State::Asking, State::Failed, State::OverBudget])
        );
        assert_eq!(
            parse_filter("failed,closed"),
            Some(vec![State::Failed, State::Closed])
        );
        assert_eq!(parse_filter("failed,nope"), None);
        assert_eq!(parse_filter(""), None);
    }
}
