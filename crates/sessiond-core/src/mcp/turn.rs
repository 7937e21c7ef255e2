//! Following the turn an input starts, for a tool that submitted it: progress notifications for
//! the events the turn writes, and its outcome when it ends — or, once the `/wait` routes'
//! deadline (`runner.wait_deadline_ms`) has passed, the session's state (`running`), so a tool
//! call never blocks for a whole long turn.

use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::Context;
use crate::error::Result;
use crate::sessions::{Submitted, WaitOutcome};

/// The outcome a turn-starting tool returns.
pub async fn follow(ctx: &Context<'_>, sub: &Submitted, wait: bool) -> Result<Value> {
    let mut out = json!({
        "sessionId": sub.key.id,
        "inputSeq": sub.input_seq,
        "delivery": sub.delivery.as_str(),
    });
    if !wait {
        let row = ctx
            .sessions
            .detail_row(&ctx.caller.actor, &sub.key.id)
            .await?;
        out["state"] = json!(state_of_row(row.turn_status));
        return Ok(out);
    }
    // Subscribed before the wait reads the store, so no event of the turn goes unreported.
    let mut events = match &ctx.progress {
        Some(_) => ctx.sessions.store().bus().observe(&sub.key.id).ok(),
        None => None,
    };
    if let Some(p) = &ctx.progress {
        // The first step: the input is recorded (and whether a turn took it at once).
        p.step(&format!(
            "input {} {}",
            sub.input_seq,
            sub.delivery.as_str()
        ));
    }
    let wait = ctx.sessions.wait_for_terminal(&sub.key, sub.input_seq);
    tokio::pin!(wait);
    let outcome = loop {
        let Some(sub) = events.as_mut() else {
            break wait.await?;
        };
        tokio::select! {
            done = &mut wait => break done?,
            frame = sub.rx.recv() => match frame {
                Ok(frame) if frame.seq.is_some() => {
                    if let Some(p) = &ctx.progress {
                        p.step(&frame.event_type);
                    }
                }
                Ok(_) | Err(RecvError::Lagged(_)) => {}
                Err(RecvError::Closed) => events = None,
            },
        }
    };
    match outcome {
        WaitOutcome::Terminal { event, .. } => {
            let body: Value = serde_json::from_str(&event.body).unwrap_or(Value::Null);
            out["terminalSeq"] = json!(event.seq);
            terminal_into(&body, &mut out);
        }
        WaitOutcome::Pending => out["state"] = json!("running"),
    }
    Ok(out)
}

/// A terminal event's state and what it says (the reply, the questions, the error).
pub fn terminal_into(event: &Value, out: &mut Value) {
    let state = match event.get("type").and_then(Value::as_str) {
        Some("complete") => match event.get("status").and_then(Value::as_str) {
            Some("failed") => "failed",
            Some("cancelled") => "cancelled",
            _ => "completed",
        },
        Some("ask") => "asking",
        Some("interrupted") => "interrupted",
        Some("sleep") => "sleeping",
        _ => "running",
    };
    out["state"] = json!(state);
    if let Some(reply) = event.get("result").and_then(Value::as_str) {
        out["reply"] = json!(reply);
    }
    if let Some(error) = event.get("error").and_then(Value::as_str) {
        out["error"] = json!(error);
    }
    if let Some(questions) = event.get("questions").filter(|q| q.is_array()) {
        out["questions"] = questions.clone();
    }
}

/// A session's state from its turn status (`running`, `asking`, `completed`, …) where no
/// terminal of the caller's own input is at hand.
pub fn state_of_row(turn_status: crate::store::TurnStatus) -> &'static str {
    use crate::store::TurnStatus as T;
    match turn_status {
        T::Running => "running",
        T::Ask => "asking",
        T::Sleep => "sleeping",
        T::Complete => "completed",
        T::Interrupted => "interrupted",
    }
}

/// The output schema of every tool that starts a turn.
pub fn outcome_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "sessionId": { "type": "string" },
            "inputSeq": { "type": "integer", "description": "The input's seq on the session's timeline." },
            "delivery": { "type": "string", "enum": ["accepted", "queued"], "description": "Whether a turn took the input at once or it waits behind the running one." },
            "state": {
                "type": "string",
                "description": "Where the turn is: `running` when the wait deadline passed first (read the session to follow it), else the terminal it reached. Without `wait`, the session's turn status.",
            },
            "terminalSeq": { "type": "integer", "description": "The seq of the terminal event that ended the turn." },
            "reply": { "type": "string", "description": "The agent's final reply." },
            "error": { "type": "string" },
            "questions": {
                "type": "array",
                "description": "What the agent asks (state `asking`): answer with answer_question.",
                "items": {
                    "type": "object",
                    "properties": {
                        "question": { "type": "string" },
                        "header": { "type": "string" },
                        "options": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "label": { "type": "string" },
                                    "description": { "type": "string" },
                                },
                                "required": ["label"],
                            },
                        },
                        "multiSelect": { "type": "boolean" },
                    },
                    "required": ["question"],
                },
            },
        },
        "required": ["sessionId", "inputSeq", "delivery", "state"],
    })
}
