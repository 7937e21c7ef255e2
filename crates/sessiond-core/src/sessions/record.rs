//! The Session record (seed 004): one session as the `/v2` family shows it, in `GET
//! /v2/sessions/{id}`, the list, and the event stream's `session/snapshot` frames alike.
//!
//! Everything is derived from the projection row, the facts of migration 0004 (with a webhook
//! delivery's provenance, migration 0016) and the newest terminal event; nothing here is stored
//! twice. How sessiond's states map onto the record's lifecycle fields (where the seed leaves them
//! open):
//!
//! | sessiond | `status` | `exit_status` | `session_state` | `surface.run` |
//! |---|---|---|---|---|
//! | a turn is running | `running` | null | `running` | `working` |
//! | an input waits for a turn | `scheduled` | null | `running` | `scheduled` |
//! | last turn completed | `completed` | `completed` | `idle` | `done` |
//! | last turn asked (`ask`) | `completed` | `completed` | `idle` | `waiting` |
//! | last turn failed | `error` | `error` (`budget_hit` when the budget stopped it) | `idle` | `failed` |
//! | last turn cancelled | `cancelled` | `cancelled` | `idle` | `cancelled` |
//! | last turn interrupted | `stopped` | `interrupted` | `idle` | `stopped` |
//! | asleep until a wake | `scheduled` | null | `idle` | `scheduled` |
//!
//! A session closed for good (handed off, or its task given a final status) has `session_state`
//! `closed` whatever its last turn did; `prompting` says whether it takes input and why not.

use serde_json::{Value, json};

use crate::clock;
use crate::projection::budget;
use crate::store::{RecordFacts, SessionRow};
use crate::timeline::Usage;

fn time(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |ms| json!(clock::rfc3339(ms)))
}

struct Lifecycle {
    status: &'static str,
    exit_status: Option<&'static str>,
    status_reason: Option<String>,
    session_state: &'static str,
    run: &'static str,
    stopped: bool,
}

fn lifecycle(row: &SessionRow, facts: &RecordFacts) -> Lifecycle {
    let idle = |status, exit, reason, run| Lifecycle {
        status,
        exit_status: exit,
        status_reason: reason,
        session_state: "idle",
        run,
        stopped: false,
    };
    let mut l = if row.turn_active {
        Lifecycle {
            status: "running",
            exit_status: None,
            status_reason: None,
            session_state: "running",
            run: "working",
            stopped: false,
        }
    } else if row.turn_status == crate::store::TurnStatus::Running {
        Lifecycle {
            status: "scheduled",
            exit_status: None,
            status_reason: None,
            session_state: "running",
            run: "scheduled",
            stopped: false,
        }
    } else {
        match facts.last_terminal.as_ref() {
            None => idle("scheduled", None, None, "scheduled"),
            Some(t) => match (t.event_type.as_str(), t.status.as_deref()) {
                ("complete", Some("failed")) => {
                    let error = t.error.clone().unwrap_or_default();
                    let exit = if budget::is_budget_failure(&error) {
                        "budget_hit"
                    } else {
                        "error"
                    };
                    idle("error", Some(exit), Some(error), "failed")
                }
                ("complete", Some("cancelled")) => {
                    idle("cancelled", Some("cancelled"), None, "cancelled")
                }
                ("complete", _) => idle("completed", Some("completed"), None, "done"),
                ("ask", _) => idle(
                    "completed",
                    Some("completed"),
                    Some("input_requested".to_owned()),
                    "waiting",
                ),
                ("sleep", _) => idle("scheduled", None, Some("sleeping".to_owned()), "scheduled"),
                _ => {
                    // The stopper's id has no integer field to go in (`stopped.by`).
                    let reason = match &facts.stopped_by {
                        Some(by) => format!("interrupted by {by}"),
                        None => "interrupted".to_owned(),
                    };
                    let mut l = idle("stopped", Some("interrupted"), Some(reason), "stopped");
                    l.stopped = true;
                    l
                }
            },
        }
    };
    if facts.closure().is_some_and(|c| c.is_final()) {
        l.session_state = "closed";
    }
    l
}

/// `prompting`: whether the session takes input, by the rule every input consults
/// (`store::intake`). A closing for good is the seed's `closed`; a spent budget has no
/// `blocked_reason` of the seed's. `code` (not in the seed, whose object is open) is the code an
/// input is refused with on every family.
fn prompting(facts: &RecordFacts) -> Value {
    match facts.closure() {
        None => json!({
            "enabled": true,
            "blocked_reason": null,
            "detail": null,
            "surface_name": null,
            "code": null,
        }),
        Some(c) => json!({
            "enabled": false,
            "blocked_reason": if c.is_final() { Some("closed") } else { None },
            "detail": c.detail(),
            "surface_name": null,
            "code": c.code(),
        }),
    }
}

fn tokens(totals: &Usage, memo: Option<&str>) -> Value {
    let model = memo
        .and_then(|m| serde_json::from_str::<Value>(m).ok())
        .and_then(|m| crate::engine::answered_model(&m).map(str::to_owned))
        .unwrap_or_default();
    let n = |v: f64| v.max(0.0).round() as u64;
    json!({
        "input": n(totals.input),
        "output": n(totals.output),
        "cache_read": n(totals.cache_read),
        "cache_creation": n(totals.cache_write),
        "total": n(totals.total_tokens),
        "model": model,
    })
}

/// The record's `parent`. A fork (an extension of the seed's kinds) also says where it forked:
/// `at_seq`, the parent's event its timeline was copied up to.
fn parent(kind: Option<&str>, id: Option<&str>, fork_seq: Option<u64>) -> Value {
    let mut parent = json!({
        "kind": kind,
        "session_id": id,
        "replayed_from_session_id": if kind == Some("resume") { id } else { None },
    });
    if kind == Some("fork") {
        parent["at_seq"] = json!(fork_seq);
    }
    parent
}

/// The Session record of `row`; `harness` is what its agent's engine is (see
/// [`crate::engine::Engine::harness`]).
pub fn record(row: &SessionRow, facts: &RecordFacts, harness: &str) -> Value {
    let l = lifecycle(row, facts);
    let totals: Usage = facts
        .usage_totals
        .as_deref()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    let spent = budget::spent_cents(facts.usage_totals.as_deref());
    let cents = budget::whole_cents(spent);
    let metadata: Value = facts
        .metadata
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let (parent_kind, parent_id) = match (&facts.parent_kind, &facts.parent_session_id) {
        (Some(kind), Some(id)) => (Some(kind.as_str()), Some(id.as_str())),
        // A Sessions API child session: started by that session, with no lineage kind.
        _ => (None, row.created_by_session_id.as_deref()),
    };
    json!({
        "id": row.id,
        "created_at": clock::rfc3339(row.created_at),
        "updated_at": clock::rfc3339(row.updated_at),
        "harness": harness,
        "source": facts.source.as_deref().unwrap_or("api"),
        "status": l.status,
        "status_reason": l.status_reason,
        "exit_status": l.exit_status,
        "session_state": l.session_state,
        "surface": {
            "session": match l.session_state {
                "closed" => "closed",
                _ if row.turn_status == crate::store::TurnStatus::Sleep && !row.turn_active => "sleeping",
                _ => "alive",
            },
            "run": l.run,
            "status": row.bucket,
        },
        "prompting": prompting(facts),
        "stopped": {
            "at": if l.stopped { time(facts.stopped_at) } else { Value::Null },
            "by": null,
            "by_user": null,
        },
        "prompt": facts.prompt,
        "metadata": metadata,
        "tokens": tokens(&totals, facts.engine_memo.as_deref()),
        "cost": {"llm": cents, "total": cents, "fee": 0, "sandbox_cpu": 0, "sandbox_memory": 0},
        "budget": {
            "cents": facts.budget_cents,
            "source": if facts.budget_cents > 0 { "run" } else { "system" },
        },
        "parent": parent(parent_kind, parent_id, facts.fork_seq),
        "attribution": {
            "type": facts.attribution_type,
            "id": facts.attribution_id,
            "user": facts
                .webhook
                .attribution_user
                .as_deref()
                .and_then(|u| serde_json::from_str::<Value>(u).ok())
                .unwrap_or(Value::Null),
        },
        "last_activity_at": time(facts.last_event_at),
        "last_message_at": time(facts.last_message_at),
        "live_summary": row.title,
        "config_id": row.agent_id,
        "config_override": null,
        "context_repository": null,
        "default_resolution": null,
        "client_version": null,
        "output_prs": null,
        "sandbox_id": null,
        "session_key": null,
        "webhook_id": facts.webhook.webhook_id,
        "webhook_type": facts.webhook.webhook_type,
        // Not in the seed's record (which allows other members): the runner id of the sessiond
        // process that runs, or last ran, the session's turn (`/healthz` names each process's).
        "runner_id": row.turn_owner,
    })
}

/// Most keys a session's metadata holds, and the longest key and value (characters).
pub const METADATA_MAX_KEYS: usize = 64;
pub const METADATA_MAX_KEY_CHARS: usize = 128;
pub const METADATA_MAX_VALUE_CHARS: usize = 2048;
/// The largest budget a session takes, in cents (ten million dollars).
pub const BUDGET_MAX_CENTS: u64 = 1_000_000_000;

/// Checks a metadata map against the limits (`field` names it in the error).
pub fn check_metadata<'a>(
    field: &str,
    entries: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> crate::Result<()> {
    let entries: Vec<_> = entries.into_iter().collect();
    let n = entries.len();
    check_metadata_entries(field, entries)?;
    if n > METADATA_MAX_KEYS {
        return Err(crate::Error::invalid(format!(
            "{field}: at most {METADATA_MAX_KEYS} keys"
        )));
    }
    Ok(())
}

/// Each key and value of a record's metadata within its bounds.
fn check_metadata_entries<'a>(
    field: &str,
    entries: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> crate::Result<()> {
    for (k, v) in entries {
        if k.is_empty() || k.chars().count() > METADATA_MAX_KEY_CHARS {
            return Err(crate::Error::invalid(format!(
                "{field}: keys must be 1 to {METADATA_MAX_KEY_CHARS} characters"
            )));
        }
        if v.chars().count() > METADATA_MAX_VALUE_CHARS {
            return Err(crate::Error::invalid(format!(
                "{field}/{k}: longer than {METADATA_MAX_VALUE_CHARS} characters"
            )));
        }
    }
    Ok(())
}

/// A change to a record: `metadata` is merged (a `None` value removes the key).
#[derive(Debug, Clone, Default)]
pub struct RecordPatch {
    pub budget_cents: Option<u64>,
    pub metadata: Option<std::collections::BTreeMap<String, Option<String>>>,
}

impl super::Sessions {
    /// [`crate::engine::Engine::harness`] of an agent's engine JSON.
    pub fn harness_of(&self, engine_json: &str) -> &'static str {
        self.runner.engines().harness(engine_json)
    }

    /// The Session record of one session of the actor's workspace.
    pub async fn record(&self, actor: &super::Actor, session_id: &str) -> crate::Result<Value> {
        let row = self.detail_row(actor, session_id).await?;
        self.record_of(row).await
    }

    /// The record of a row the caller already read.
    pub async fn record_of(&self, row: SessionRow) -> crate::Result<Value> {
        let facts = self
            .store
            .projections()
            .record_facts(row.pk)
            .await?
            .ok_or(crate::Error::NotFound)?;
        Ok(record(&row, &facts, self.harness_of(&facts.agent_engine)))
    }

    /// A page of records, newest first, and the cursor of the next page.
    pub async fn records(
        &self,
        actor: &super::Actor,
        q: super::ListQuery,
    ) -> crate::Result<(Vec<Value>, Option<String>)> {
        let (rows, next) = self.list(actor, q).await?;
        let pks: Vec<i64> = rows.iter().map(|r| r.pk).collect();
        let facts = self.store.projections().record_facts_of(pks).await?;
        let mut by_pk: std::collections::HashMap<i64, RecordFacts> =
            facts.into_iter().map(|f| (f.pk, f)).collect();
        let records = rows
            .iter()
            .filter_map(|row| {
                let facts = by_pk.remove(&row.pk)?;
                Some(record(row, &facts, self.harness_of(&facts.agent_engine)))
            })
            .collect();
        Ok((records, next))
    }

    /// Applies a PATCH to a record: a new budget (0 lifts the cap) and metadata changes.
    pub async fn patch_record(
        &self,
        actor: &super::Actor,
        session_id: &str,
        patch: RecordPatch,
    ) -> crate::Result<Value> {
        let row = self.detail_row(actor, session_id).await?;
        if let Some(changes) = &patch.metadata {
            // Each entry as it will be stored; the count is checked on the merged map.
            let set: Vec<(&String, &String)> = changes
                .iter()
                .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
                .collect();
            check_metadata_entries("metadata", set)?;
        }
        self.store
            .sessions()
            .patch_record(
                &row.workspace_id,
                &row.id,
                patch.budget_cents,
                patch.metadata,
                METADATA_MAX_KEYS,
            )
            .await?;
        self.record(actor, session_id).await
    }
}
