//! The scheduler: one task on the runner's runtime that sleeps until the earliest due tick of any
//! schedule, fires what is due, and looks again.
//!
//! It keeps nothing in memory that the database does not have: the next tick of every schedule
//! is its row's `next_due_at` (the first of a partial index), and a schedule change wakes it through
//! [`Schedules`]' notifier. Ticks fire one at a time, earliest first; a tick that finds the row
//! changed under it (a pause, an edit, a delete) fires nothing and the row is read again.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{CHANGED, Fire, Schedule, Schedules};
use crate::clock;
use crate::error::{Error, Result};
use crate::store::schedules::ScheduleRow;

/// Longest single sleep: a wall clock that jumps (NTP, suspend) is noticed within this.
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// Due schedules read per query.
const BATCH: u32 = 64;
/// Waits after a storage failure, doubling up to the last.
const BACKOFF_MS: [u64; 5] = [500, 1_000, 5_000, 15_000, 30_000];

pub struct Scheduler {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// What became of one due schedule.
enum Outcome {
    Fired,
    /// Nothing to do (no longer due, or changed meanwhile: look again).
    Nothing,
    /// Storage trouble: wait before trying again.
    Retry(Error),
    Stop,
}

impl Scheduler {
    /// Starts the scheduler on `rt`.
    pub fn start(schedules: Schedules, rt: &tokio::runtime::Handle) -> Scheduler {
        let (stop, stopped) = watch::channel(false);
        let task = rt.spawn(run(schedules, stopped));
        Scheduler { stop, task }
    }

    /// Stops after the firing in progress, if any, and waits for that.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = self.task.await;
    }
}

async fn run(schedules: Schedules, mut stopped: watch::Receiver<bool>) {
    let mut failures = 0usize;
    loop {
        if *stopped.borrow() {
            break;
        }
        match fire_due(&schedules, &stopped).await {
            Ok(true) => break,
            Ok(false) => failures = 0,
            Err(e) => {
                let wait = BACKOFF_MS[failures.min(BACKOFF_MS.len() - 1)];
                failures += 1;
                tracing::error!(error = %e, retry_in_ms = wait, "scheduler: cannot fire schedules");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                    _ = stopped.changed() => break,
                }
                continue;
            }
        }
        let next = match schedules.store().schedules().next_due().await {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(error = %e, "scheduler: cannot read the next tick");
                Some(clock::now_ms() + BACKOFF_MS[1] as i64)
            }
        };
        let wait = match next {
            Some(due) => {
                Duration::from_millis((due - clock::now_ms()).max(0) as u64).min(MAX_SLEEP)
            }
            None => MAX_SLEEP,
        };
        if wait.is_zero() {
            continue;
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = schedules.wake.notified() => {}
            _ = stopped.changed() => break,
        }
    }
    tracing::debug!("scheduler stopped");
}

/// Fires every schedule due now. `Ok(true)`: stop requested.
async fn fire_due(schedules: &Schedules, stopped: &watch::Receiver<bool>) -> Result<bool> {
    // Workspace slugs of this round's firings, read once per workspace.
    let mut slugs: HashMap<String, String> = HashMap::new();
    loop {
        let now = clock::now_ms();
        let due = schedules.store().schedules().due(now, BATCH).await?;
        if due.is_empty() {
            return Ok(false);
        }
        for row in due {
            if *stopped.borrow() {
                return Ok(true);
            }
            let ws = row.workspace_id.clone();
            let slug = match slugs.get(&ws) {
                Some(slug) => slug.clone(),
                None => {
                    let slug = schedules.workspace_slug(&ws).await?;
                    slugs.insert(ws, slug.clone());
                    slug
                }
            };
            match fire_one(schedules, row, slug).await {
                Outcome::Fired | Outcome::Nothing => {}
                Outcome::Retry(e) => return Err(e),
                Outcome::Stop => return Ok(true),
            }
        }
    }
}

async fn fire_one(schedules: &Schedules, row: ScheduleRow, slug: String) -> Outcome {
    let id = row.id.clone();
    let Some(due) = row.next_due_at else {
        return Outcome::Nothing;
    };
    let now = clock::now_ms();
    let schedule = match Schedule::from_row(row.clone()) {
        Ok(s) => s,
        Err(e) => {
            // A row this binary cannot read must not be retried forever: it stops ticking.
            tracing::error!(schedule = %id, error = %e, "scheduler: schedule disabled");
            return settle(schedules, &row, None).await;
        }
    };
    let fire = plan(&schedule, due, now);
    let Fire::Tick { next, .. } = fire else {
        return Outcome::Nothing;
    };
    match schedules.fire_in(&schedule, fire, slug).await {
        Ok(session) => {
            tracing::info!(
                schedule = %id,
                session = %session,
                trigger = fire.trigger_type().name(),
                "schedule fired"
            );
            Outcome::Fired
        }
        Err(Error::Conflict(CHANGED, _)) => Outcome::Nothing,
        Err(Error::ShuttingDown) => Outcome::Stop,
        Err(e) if is_transient(&e) => Outcome::Retry(e),
        Err(e) => {
            // The tick cannot make a session (its creator left the workspace, its agent's
            // folder cannot be made): it is used up, so the schedule goes on with its next one.
            // (A schedule deleted meanwhile has no row left for this to change.)
            tracing::warn!(schedule = %id, error = %e, "schedule tick skipped: no session created");
            settle(schedules, &schedule.row, next).await
        }
    }
}

/// Whether a firing that failed with `e` is tried again (the tick stays due) rather than used up:
/// storage faults (a full disk, an unusable data dir) pass when the operator fixes them, and a bug
/// must not cost a user their tick.
fn is_transient(e: &Error) -> bool {
    e.is_storage_fault() || matches!(e, Error::Storage(_) | Error::Internal(_))
}

async fn settle(schedules: &Schedules, row: &ScheduleRow, next: Option<i64>) -> Outcome {
    match schedules.consume(row, next).await {
        Ok(()) => Outcome::Nothing,
        Err(Error::ShuttingDown) => Outcome::Stop,
        Err(e) => Outcome::Retry(e),
    }
}

/// Which tick a due schedule fires, and when it ticks next: the missed-tick rule.
///
/// The due tick fires once. If the tick after it is also past (sessiond was down, or the tick ran
/// late by more than an interval), the missed ticks are folded into one catch-up run named after
/// the latest of them, and the schedule continues with its first tick after now.
pub fn plan(s: &Schedule, due: i64, now: i64) -> Fire {
    let after_due = s.timing.next_after(due);
    let next = s.timing.next_after(now);
    match after_due {
        Some(t) if t <= now => Fire::Tick {
            due,
            fire_time: s.timing.latest_between(due, now).unwrap_or(due),
            catch_up: true,
            next,
        },
        _ => Fire::Tick {
            due,
            fire_time: due,
            catch_up: false,
            next,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::schedules::TriggerType;

    /// An interval schedule of `every` seconds anchored at 0, skipping `skipped`.
    fn every(seconds: i64, skipped: &[i64]) -> Schedule {
        Schedule::from_row(ScheduleRow {
            id: "s".into(),
            workspace_id: "w".into(),
            agent_id: "a".into(),
            name: "n".into(),
            description: None,
            cron_expression: None,
            interval_seconds: Some(seconds),
            timezone: "UTC".into(),
            anchor_at: 0,
            start_at: None,
            end_at: None,
            paused: false,
            initial_input: r#"{"content":"x"}"#.into(),
            task_params: None,
            task_metadata: None,
            creator: r#"{"principal_type":"user","user_id":"u"}"#.into(),
            skipped: serde_json::to_string(skipped).unwrap(),
            next_due_at: Some(seconds * 1000),
            num_actions: 0,
            last_action_at: None,
            created_at: 0,
            updated_at: 0,
        })
        .unwrap()
    }

    #[test]
    fn storage_faults_keep_the_tick_due_and_refusals_use_it_up() {
        for e in [
            Error::StorageFull("disk".into()),
            Error::StorageUnavailable("io".into()),
            Error::Storage("sql".into()),
            Error::Internal("bug".into()),
        ] {
            assert!(is_transient(&e), "{e:?}");
        }
        for e in [
            Error::Forbidden("creator left".into()),
            Error::NotFound,
            Error::AgentNotFound,
            Error::invalid("bad"),
        ] {
            assert!(!is_transient(&e), "{e:?}");
        }
    }

    #[test]
    fn a_due_tick_fires_as_itself_even_late_within_its_interval() {
        let s = every(10, &[]);
        let fire = plan(&s, 10_000, 10_004);
        assert_eq!(
            fire,
            Fire::Tick {
                due: 10_000,
                fire_time: 10_000,
                catch_up: false,
                next: Some(20_000)
            }
        );
        let late = plan(&s, 10_000, 19_999);
        assert_eq!(late.trigger_type(), TriggerType::Scheduled);
    }

    #[test]
    fn missed_ticks_fold_into_one_catch_up_named_after_the_latest() {
        let s = every(10, &[]);
        // Down from just after 10 s to 45 s: the ticks at 10, 20, 30 and 40 s were missed.
        assert_eq!(
            plan(&s, 10_000, 45_000),
            Fire::Tick {
                due: 10_000,
                fire_time: 40_000,
                catch_up: true,
                next: Some(50_000)
            }
        );
        // A skipped tick is not what the catch-up stands for.
        let s = every(10, &[40_000]);
        let Fire::Tick { fire_time, .. } = plan(&s, 10_000, 45_000) else {
            panic!("a tick")
        };
        assert_eq!(fire_time, 30_000);
    }
}
