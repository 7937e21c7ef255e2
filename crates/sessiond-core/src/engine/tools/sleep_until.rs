//! `sleep_until`: the model pauses the session until a time or for a while; the turn ends with
//! `sleep` and the wake (or an earlier message) resumes it as this call's result.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, args};
use crate::error::Result;

pub struct SleepUntil;

/// The longest sleep a tool may ask for.
const MAX_SLEEP_MS: i64 = 365 * 24 * 3_600_000;

#[async_trait]
impl Tool for SleepUntil {
    fn name(&self) -> &'static str {
        "sleep_until"
    }

    fn description(&self) -> &'static str {
        "Pause this session until a time (RFC 3339) or for a number of seconds; a new user message wakes it earlier."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "until": {"type": "string", "description": "RFC 3339 time, e.g. 2030-01-01T09:00:00Z"},
                "seconds": {"type": "number", "minimum": 1}
            }
        })
    }

    fn pauses(&self) -> bool {
        true
    }

    async fn call(&self, _cx: Call<'_>, input: &Value) -> Result<Outcome> {
        Ok(sleep_until(input))
    }
}

#[derive(Deserialize)]
struct SleepIn {
    until: Option<String>,
    seconds: Option<f64>,
}

fn sleep_until(input: &Value) -> Outcome {
    let parsed: SleepIn = match args("sleep_until", input) {
        Ok(a) => a,
        Err(e) => return e,
    };
    let now = crate::clock::now_ms();
    let wake_at = match (parsed.until.as_deref(), parsed.seconds) {
        (Some(until), _) => match humantime::parse_rfc3339_weak(until.trim()) {
            Ok(t) => t
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            Err(_) => {
                return Outcome::error(format!(
                    "until: {until:?} is not an RFC 3339 time like 2030-01-01T09:00:00Z"
                ));
            }
        },
        (None, Some(s)) if s.is_finite() && s > 0.0 => now.saturating_add((s * 1000.0) as i64),
        _ => return Outcome::error("give either until (RFC 3339) or seconds (> 0)"),
    };
    if wake_at <= now {
        return Outcome::error("that time has already passed");
    }
    if wake_at - now > MAX_SLEEP_MS {
        return Outcome::error("sleep at most 365 days");
    }
    Outcome::Sleep { wake_at }
}
