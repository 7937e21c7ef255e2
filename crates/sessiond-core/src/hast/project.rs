//! The mapping from timeline events to HAST events (the table in the README), and the state it
//! keeps within a run.

use std::collections::HashMap;

use serde_json::{Value, json};

use super::{HastEvent, SLOTS, Source, tools};
use crate::clock;
use crate::projection::budget;
use crate::timeline::{RetryNotice, SystemMetadata};

/// The input a turn started from: it names the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunStart {
    pub input_seq: u64,
    /// `initial`, `message`, `answer`, `wake` or `machine`.
    pub turn_type: String,
}

/// The open run, as far as the projection needs it.
#[derive(Debug, Clone)]
struct Run {
    /// The seq of the input that started it (its `run_id` and `request_id` carry it).
    n: u64,
    /// Assistant messages and reasoning blocks numbered so far (a retried model call skips a
    /// number, so deltas of the abandoned attempt never join the retry's message).
    messages: u32,
    reasonings: u32,
    /// The highest model-call attempt seen.
    attempts: u32,
    last_message: Option<String>,
    /// Background tasks started in the run: id → (kind, name).
    tasks: HashMap<String, (String, String)>,
    /// `metadata.code` of the newest `system` event (why an interrupted run stopped).
    notice_code: Option<String>,
}

impl Run {
    fn new(n: u64) -> Run {
        Run {
            n,
            messages: 0,
            reasonings: 0,
            attempts: 1,
            last_message: None,
            tasks: HashMap::new(),
            notice_code: None,
        }
    }
}

/// What the projection remembers between timeline events: the run that is open, if any; and
/// what the caller told it of the session.
#[derive(Debug, Clone, Default)]
pub struct Projection {
    run: Option<Run>,
    /// The model that last answered the session (looked up by the caller:
    /// [`super::read::answered_model`]), named by `usage.updated` when its usage event names
    /// none (the seed's `usageByModel` only has room for a few providers).
    answered: String,
}

fn run_id(sid: &str, n: u64) -> String {
    format!("run_{sid}_{n}")
}

fn request_id(sid: &str, seq: u64) -> String {
    format!("req_{sid}_{seq}")
}

fn message_id(sid: &str, run: u64, k: u32) -> String {
    format!("msg_{sid}_{run}_{k}")
}

fn reasoning_id(sid: &str, run: u64, k: u32) -> String {
    format!("rsn_{sid}_{run}_{k}")
}

fn plan_id(sid: &str) -> String {
    format!("plan_{sid}")
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// HAST token counts from a timeline `Usage`.
fn token_counts(u: &Value) -> Value {
    let n = |key: &str| {
        u.get(key)
            .and_then(Value::as_f64)
            .unwrap_or(0.0)
            .max(0.0)
            .round() as u64
    };
    json!({
        "input_tokens": n("input"),
        "output_tokens": n("output"),
        "cache_read_tokens": n("cacheRead"),
        "cache_write_tokens": n("cacheWrite"),
        "reasoning_tokens": 0,
        "total_tokens": n("totalTokens"),
    })
}

fn cents(u: &Value) -> f64 {
    u.pointer("/cost/total")
        .and_then(Value::as_f64)
        .unwrap_or(0.0)
        * 100.0
}

/// The text parts of a tool's output, joined.
fn output_text(step: &Value) -> Option<String> {
    let parts = step.get("output")?.as_array()?;
    let text: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// The HAST events of one timeline event, numbered as they are pushed.
struct Out<'a> {
    sid: &'a str,
    seq: u64,
    created_at: i64,
    events: Vec<HastEvent>,
}

impl Out<'_> {
    fn push(&mut self, kind: &'static str, source: Source, run: Option<String>, data: Value) {
        let i = self.events.len() as u64;
        if i >= SLOTS {
            // The mapping never makes this many; dropping keeps the numbering sound if it did.
            tracing::warn!(
                kind,
                seq = self.seq,
                "a timeline event made too many HAST events"
            );
            return;
        }
        let sequence = self.seq * SLOTS + i;
        self.events.push(HastEvent {
            kind,
            sequence: Some(sequence),
            event_id: format!("evt_{}_{sequence}", self.sid),
            source,
            run_id: run,
            created_at: self.created_at,
            data,
        });
    }

    /// `message.started` and `message.completed`.
    fn message(
        &mut self,
        source: Source,
        run: Option<String>,
        id: &str,
        role: &str,
        text: &str,
        kind: Option<&str>,
    ) {
        self.push(
            "message.started",
            source,
            run.clone(),
            json!({"message_id": id, "role": role}),
        );
        let mut done = json!({"message_id": id, "role": role, "text": text});
        if let Some(kind) = kind {
            done["kind"] = json!(kind);
        }
        self.push("message.completed", source, run, done);
    }
}

impl Projection {
    /// Sets the model `usage.updated` names when its usage event names none.
    pub fn set_answered_model(&mut self, model: String) {
        self.answered = model;
    }

    /// The HAST events of timeline event `seq` (its stored JSON `event`), in order. `start` is the
    /// input of a `turn_started` (looked up by the caller: [`super::read::run_start`]).
    pub fn apply(
        &mut self,
        sid: &str,
        seq: u64,
        created_at: i64,
        event: &Value,
        start: Option<&RunStart>,
    ) -> Vec<HastEvent> {
        let mut out = Out {
            sid,
            seq,
            created_at,
            events: Vec::new(),
        };
        let run = self.run.as_ref().map(|r| run_id(sid, r.n));
        match str_of(event, "type") {
            "session_created" => out.push(
                "runtime.status",
                Source::Backplane,
                None,
                json!({"status": "ready"}),
            ),
            "prompt_submitted" => {
                let kind = str_of(event, "inputKind");
                let queued = kind == "initial" || str_of(event, "behavior") == "follow_up";
                let id = format!("msg_{sid}_{seq}");
                // A steer joins the open run; with none open it starts its own.
                let own = match (queued, &run) {
                    (false, Some(open)) => Some(open.clone()),
                    _ => Some(run_id(sid, seq)),
                };
                out.message(
                    Source::Workspace,
                    own.clone(),
                    &id,
                    "user",
                    str_of(event, "prompt"),
                    Some(kind),
                );
                if queued {
                    out.push(
                        "run.queued",
                        Source::Backplane,
                        own,
                        json!({"request_id": request_id(sid, seq), "turn_type": kind}),
                    );
                }
            }
            "answer_submitted" => {
                let id = format!("msg_{sid}_{seq}");
                let own = Some(run_id(sid, seq));
                out.message(
                    Source::Workspace,
                    own.clone(),
                    &id,
                    "user",
                    str_of(event, "answer"),
                    Some("answer"),
                );
                out.push(
                    "run.queued",
                    Source::Backplane,
                    own,
                    json!({"request_id": request_id(sid, seq), "turn_type": "answer"}),
                );
            }
            "note_submitted" => {
                let id = format!("msg_{sid}_{seq}");
                out.message(
                    Source::Workspace,
                    run,
                    &id,
                    "user",
                    str_of(event, "note"),
                    Some("note"),
                );
            }
            "agent_message" => {
                let id = format!("msg_{sid}_{seq}");
                out.message(
                    Source::Runtime,
                    None,
                    &id,
                    "assistant",
                    str_of(event, "message"),
                    None,
                );
            }
            "tier_clamped" => out.push(
                "warning",
                Source::Backplane,
                run,
                json!({
                    "scope": "model",
                    "code": "tier_clamped",
                    "message": format!(
                        "the {} tier was asked for; this engine runs the turn at {}",
                        str_of(event, "requestedTier"),
                        str_of(event, "effectiveTier")
                    ),
                    "retryable": false,
                }),
            ),
            "turn_started" => {
                let (n, turn_type) = match start {
                    Some(s) => (s.input_seq, s.turn_type.as_str()),
                    None => (seq, "resume"),
                };
                self.run = Some(Run::new(n));
                out.push(
                    "run.started",
                    Source::Runtime,
                    Some(run_id(sid, n)),
                    json!({"request_id": request_id(sid, n), "turn_type": turn_type}),
                );
            }
            "step" => self.step(&mut out, event.get("step").unwrap_or(&Value::Null), run),
            "todos" => {
                let todos = event
                    .get("todos")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let steps: Vec<Value> = todos
                    .iter()
                    .map(|t| {
                        let status = match str_of(t, "status") {
                            "in_progress" => "in_progress",
                            "completed" | "failed" => "completed",
                            _ => "pending",
                        };
                        json!({"step": str_of(t, "content"), "status": status})
                    })
                    .collect();
                let all_done = !todos.is_empty()
                    && todos
                        .iter()
                        .all(|t| matches!(str_of(t, "status"), "completed" | "failed"));
                out.push(
                    "plan.updated",
                    Source::Runtime,
                    run.clone(),
                    json!({"plan_id": plan_id(sid), "steps": steps}),
                );
                if all_done {
                    out.push(
                        "plan.completed",
                        Source::Runtime,
                        run,
                        json!({"plan_id": plan_id(sid)}),
                    );
                }
            }
            "task_started" => {
                let task = event.get("task").unwrap_or(&Value::Null);
                let (id, kind, name) = (
                    str_of(task, "id"),
                    str_of(task, "kind"),
                    str_of(task, "name"),
                );
                if let Some(r) = self.run.as_mut() {
                    r.tasks
                        .insert(id.to_owned(), (kind.to_owned(), name.to_owned()));
                }
                out.push(
                    "tool.started",
                    Source::Runtime,
                    run,
                    json!({
                        "tool_call_id": format!("task_{id}"),
                        "kind": kind,
                        "name": name,
                        "input": {"label": str_of(task, "label")},
                    }),
                );
            }
            "task_output" => out.push(
                "tool.updated",
                Source::Runtime,
                run,
                json!({
                    "tool_call_id": format!("task_{}", str_of(event, "taskId")),
                    "channel": "stdout",
                    "delta": str_of(event, "chunk"),
                }),
            ),
            "task_settled" => {
                let s = event.get("settlement").unwrap_or(&Value::Null);
                let id = str_of(s, "id");
                let (kind, name) = self
                    .run
                    .as_ref()
                    .and_then(|r| r.tasks.get(id).cloned())
                    .unwrap_or_else(|| ("tool".to_owned(), "task".to_owned()));
                let status = str_of(s, "status");
                let mut data = json!({
                    "tool_call_id": format!("task_{id}"),
                    "kind": kind,
                    "name": name,
                    "status": match status {
                        "completed" => "succeeded",
                        "failed" => "failed",
                        _ => "interrupted",
                    },
                    "is_error": status != "completed",
                });
                if let Some(detail) = ["result", "error", "reason"].iter().find_map(|k| s.get(*k)) {
                    data["output"] = detail.clone();
                }
                out.push("tool.completed", Source::Runtime, run, data);
            }
            "usage" => {
                let turn = event.get("turnUsage").unwrap_or(&Value::Null);
                let last = event.get("lastMessageUsage").unwrap_or(&Value::Null);
                let model = event
                    .pointer("/usageByModel/0/model")
                    .and_then(Value::as_str)
                    .unwrap_or(&self.answered);
                let window = event
                    .get("effectiveContextWindow")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    .max(0.0) as u64;
                out.push(
                    "usage.updated",
                    Source::Runtime,
                    run,
                    json!({
                        "model": model,
                        "context_window": window,
                        "total": token_counts(turn),
                        "last": token_counts(last),
                        "cost": {"total_cents": cents(turn), "last_cents": cents(last)},
                    }),
                );
            }
            "system" => self.system(&mut out, event, run),
            "memory" => out.push(
                "context.compacted",
                Source::Runtime,
                run,
                json!({"reason": event.get("message").and_then(Value::as_str).unwrap_or("memory")}),
            ),
            "complete" | "ask" | "interrupted" | "sleep" => self.terminal(&mut out, event),
            // heartbeat, state_machine, follow_up_queue, router_switch, interrupt_requested, and
            // types a newer sessiond may write: nothing a HAST client reads.
            _ => {}
        }
        out.events
    }

    fn step(&mut self, out: &mut Out<'_>, step: &Value, run: Option<String>) {
        let sid = out.sid;
        match str_of(step, "type") {
            "text" => {
                let Some(r) = self.run.as_mut() else {
                    let id = format!("msg_{sid}_{}", out.seq);
                    out.message(
                        Source::Runtime,
                        None,
                        &id,
                        "assistant",
                        str_of(step, "text"),
                        None,
                    );
                    return;
                };
                r.messages += 1;
                let id = message_id(sid, r.n, r.messages);
                r.last_message = Some(id.clone());
                out.message(
                    Source::Runtime,
                    run,
                    &id,
                    "assistant",
                    str_of(step, "text"),
                    None,
                );
            }
            "reasoning" => {
                let id = match self.run.as_mut() {
                    Some(r) => {
                        r.reasonings += 1;
                        reasoning_id(sid, r.n, r.reasonings)
                    }
                    None => format!("rsn_{sid}_{}", out.seq),
                };
                out.push(
                    "reasoning.started",
                    Source::Runtime,
                    run.clone(),
                    json!({"reasoning_id": id}),
                );
                out.push(
                    "reasoning.completed",
                    Source::Runtime,
                    run,
                    json!({"reasoning_id": id, "text": str_of(step, "text")}),
                );
            }
            "tool_call_start" => {
                let name = str_of(step, "toolName");
                let mut data = json!({
                    "tool_call_id": str_of(step, "toolCallId"),
                    "kind": tools::kind(name),
                    "name": name,
                });
                if let Some(input) = step.get("input") {
                    data["input"] = input.clone();
                }
                out.push("tool.started", Source::Runtime, run, data);
            }
            "tool_call" => {
                let name = str_of(step, "toolName");
                let is_error = step
                    .get("isError")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                let mut data = json!({
                    "tool_call_id": str_of(step, "toolCallId"),
                    "kind": tools::kind(name),
                    "name": name,
                    "status": if is_error { "failed" } else { "succeeded" },
                    "is_error": is_error,
                });
                if let Some(input) = step.get("input") {
                    data["input"] = input.clone();
                }
                if let Some(text) = output_text(step) {
                    data["output"] = json!(text);
                }
                out.push("tool.completed", Source::Runtime, run.clone(), data);
                if !is_error {
                    let max = (SLOTS as usize).saturating_sub(1);
                    for (path, operation) in tools::changed_files(name, step.get("input"), max) {
                        out.push(
                            "file.changed",
                            Source::Runtime,
                            run.clone(),
                            json!({
                                "path": path,
                                "operation": operation,
                                "tool_call_id": str_of(step, "toolCallId"),
                            }),
                        );
                    }
                }
            }
            "system" => out.push(
                "warning",
                Source::Runtime,
                run,
                json!({
                    "scope": "engine",
                    "code": "engine_notice",
                    "message": str_of(step, "message"),
                    "retryable": false,
                }),
            ),
            _ => {}
        }
    }

    fn system(&mut self, out: &mut Out<'_>, event: &Value, run: Option<String>) {
        let message = str_of(event, "message");
        let code = event.pointer("/metadata/code").and_then(Value::as_str);
        // The marker of an estimated `usage` event: /v2's usage has no place for it, and it is
        // no warning.
        if code == Some(SystemMetadata::USAGE_ESTIMATED) {
            return;
        }
        if let Some(r) = self.run.as_mut() {
            r.notice_code = code.map(str::to_owned);
        }
        let level = str_of(event, "level");
        if level == "warn"
            && let Some(notice) = RetryNotice::parse(message)
        {
            if let Some(r) = self.run.as_mut() {
                r.attempts = r.attempts.max(notice.attempt);
                // The abandoned attempt's deltas lead nowhere; the retry streams new ids.
                r.messages += 1;
                r.reasonings += 1;
            }
            out.push(
                "run.retrying",
                Source::Runtime,
                run,
                json!({
                    "attempt": notice.attempt.max(1),
                    "code": "model_call_failed",
                    "message": notice.reason,
                    "duration_ms": notice.delay_ms,
                }),
            );
            return;
        }
        let kind = match level {
            "error" => "error",
            "warn" | "info" => "warning",
            _ => return,
        };
        out.push(
            kind,
            Source::Runtime,
            run,
            json!({
                "scope": "runtime",
                "code": code.unwrap_or(if kind == "error" { "error" } else { "notice" }),
                "message": message,
                "retryable": false,
            }),
        );
    }

    fn terminal(&mut self, out: &mut Out<'_>, event: &Value) {
        let sid = out.sid;
        let r = self.run.take().unwrap_or_else(|| Run::new(out.seq));
        let run = Some(run_id(sid, r.n));
        let final_message = r.last_message.clone().unwrap_or_default();
        let completed = |finish_reason: &str| {
            json!({
                "final_message_id": final_message,
                "finish_reason": finish_reason,
                "attempts": r.attempts,
            })
        };
        match str_of(event, "type") {
            "complete" => match str_of(event, "status") {
                "failed" => {
                    let error = str_of(event, "error");
                    let code = if budget::is_budget_failure(error) {
                        "budget_hit"
                    } else {
                        "run_failed"
                    };
                    out.push(
                        "run.failed",
                        Source::Runtime,
                        run,
                        json!({
                            "code": code,
                            "message": error,
                            "retryable": false,
                            "attempts": r.attempts,
                        }),
                    );
                }
                "cancelled" => out.push(
                    "run.interrupted",
                    Source::Runtime,
                    run,
                    json!({"reason": "cancelled"}),
                ),
                _ => out.push("run.completed", Source::Runtime, run, completed("stop")),
            },
            "ask" => {
                let questions = event
                    .get("questions")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let prompt = questions
                    .iter()
                    .map(|q| str_of(q, "question"))
                    .collect::<Vec<_>>()
                    .join("\n");
                out.push(
                    "input.requested",
                    Source::Runtime,
                    run.clone(),
                    json!({
                        "request_id": request_id(sid, out.seq),
                        "kind": "question",
                        "prompt": prompt,
                        "options": questions,
                    }),
                );
                out.push(
                    "run.completed",
                    Source::Runtime,
                    run,
                    completed("input_requested"),
                );
            }
            "sleep" => {
                let mut data = completed("sleep");
                if let Some(at) = event.get("wakeAt").and_then(Value::as_f64) {
                    data["wake_at"] = json!(clock::rfc3339(at as i64));
                }
                out.push("run.completed", Source::Runtime, run, data);
            }
            _ => {
                let reason = match r.notice_code.as_deref() {
                    Some("runner_exited") => "runner_exited",
                    _ => "interrupted",
                };
                out.push(
                    "run.interrupted",
                    Source::Runtime,
                    run,
                    json!({"reason": reason}),
                );
            }
        }
    }

    /// The HAST event of a volatile frame's `event` (a text or reasoning delta of the open run).
    pub fn volatile(&self, sid: &str, created_at: i64, event: &Value) -> Option<HastEvent> {
        let r = self.run.as_ref()?;
        let step = event.get("step")?;
        let delta = step.get("delta").and_then(Value::as_str)?;
        let (kind, data) = match str_of(step, "type") {
            "text_delta" => (
                "message.delta",
                json!({
                    "message_id": message_id(sid, r.n, r.messages + 1),
                    "role": "assistant",
                    "delta": delta,
                }),
            ),
            "reasoning_delta" => (
                "reasoning.delta",
                json!({"reasoning_id": reasoning_id(sid, r.n, r.reasonings + 1), "delta": delta}),
            ),
            _ => return None,
        };
        Some(HastEvent {
            kind,
            sequence: None,
            event_id: format!("evt_{sid}_{}", crate::ids::new_id()),
            source: Source::Runtime,
            run_id: Some(run_id(sid, r.n)),
            created_at,
            data,
        })
    }

    /// Whether a run is open (events between runs carry no `run_id`).
    pub fn in_run(&self) -> bool {
        self.run.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_of(p: &mut Projection, events: &[(u64, Value)]) -> Vec<HastEvent> {
        let start = RunStart {
            input_seq: 2,
            turn_type: "initial".into(),
        };
        events
            .iter()
            .flat_map(|(seq, e)| {
                let s = (e["type"] == "turn_started").then_some(&start);
                p.apply("s", *seq, 0, e, s)
            })
            .collect()
    }

    #[test]
    fn a_turn_is_one_run_and_its_deltas_name_the_message_they_make() {
        let mut p = Projection::default();
        let out = run_of(
            &mut p,
            &[
                (1, json!({"type": "session_created", "prompt": "hi"})),
                (
                    2,
                    json!({"type": "prompt_submitted", "prompt": "hi", "inputKind": "initial", "behavior": "steer"}),
                ),
                (3, json!({"type": "turn_started"})),
            ],
        );
        let kinds: Vec<&str> = out.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                "runtime.status",
                "message.started",
                "message.completed",
                "run.queued",
                "run.started"
            ]
        );
        let seqs: Vec<u64> = out.iter().map(|e| e.sequence.unwrap()).collect();
        assert_eq!(seqs, [10, 20, 21, 22, 30]);
        assert_eq!(out[3].run_id, out[4].run_id);
        let delta = json!({"type": "step", "step": {"type": "text_delta", "delta": "he"}});
        let d1 = p.volatile("s", 0, &delta).unwrap();
        // A retried call abandons what it streamed: the retry's deltas name a new message.
        let retry = RetryNotice {
            reason: "503".into(),
            delay_ms: 10,
            attempt: 2,
            attempts: 3,
        };
        let out = run_of(
            &mut p,
            &[(
                4,
                json!({"type": "system", "level": "warn", "message": retry.message()}),
            )],
        );
        assert_eq!(out[0].kind, "run.retrying");
        assert_eq!(out[0].data["attempt"], 2);
        let d2 = p.volatile("s", 0, &delta).unwrap();
        assert_ne!(d1.data["message_id"], d2.data["message_id"]);
        let out = run_of(
            &mut p,
            &[
                (
                    5,
                    json!({"type": "step", "step": {"type": "text", "text": "hello"}}),
                ),
                (
                    6,
                    json!({"type": "complete", "status": "completed", "result": "hello"}),
                ),
            ],
        );
        assert_eq!(out[1].data["message_id"], d2.data["message_id"]);
        assert_eq!(out[2].kind, "run.completed");
        assert_eq!(out[2].data["final_message_id"], d2.data["message_id"]);
        assert_eq!(out[2].data["attempts"], 2);
        assert!(p.volatile("s", 0, &delta).is_none(), "no run is open");
    }

    #[test]
    fn no_timeline_event_outgrows_its_slots() {
        let mut p = Projection::default();
        let changes: Vec<Value> = (0..50)
            .map(|i| json!({"path": format!("f{i}"), "kind": "update"}))
            .collect();
        let out = run_of(
            &mut p,
            &[(
                7,
                json!({"type": "step", "step": {
                    "type": "tool_call", "toolName": "file_change", "toolCallId": "c",
                    "input": {"changes": changes}, "isError": false
                }}),
            )],
        );
        assert_eq!(out.len() as u64, SLOTS);
        assert_eq!(out.last().unwrap().sequence, Some(7 * SLOTS + SLOTS - 1));
    }

    #[test]
    fn outcomes_name_their_reason() {
        let mut p = Projection::default();
        let budget = crate::Error::BudgetHit { cents: 5 }.to_string();
        let out = run_of(
            &mut p,
            &[
                (3, json!({"type": "turn_started"})),
                (
                    4,
                    json!({"type": "complete", "status": "failed", "error": budget}),
                ),
                (5, json!({"type": "turn_started"})),
                (
                    6,
                    json!({"type": "system", "level": "warn", "message": "stopped", "metadata": {"code": "runner_exited"}}),
                ),
                (7, json!({"type": "interrupted"})),
                (8, json!({"type": "turn_started"})),
                (
                    9,
                    json!({"type": "ask", "questions": [{"question": "why?", "options": []}]}),
                ),
            ],
        );
        let by_kind = |k: &str| out.iter().find(|e| e.kind == k).unwrap().data.clone();
        assert_eq!(by_kind("run.failed")["code"], "budget_hit");
        assert_eq!(by_kind("run.interrupted")["reason"], "runner_exited");
        assert_eq!(by_kind("input.requested")["prompt"], "why?");
        assert_eq!(by_kind("run.completed")["finish_reason"], "input_requested");
    }
}
