//! `start_session`: the model starts a child session that works on a prompt on its own. A turn
//! starts at most [`MAX_SESSIONS_PER_TURN`], and sessions started by sessions nest at most
//! [`MAX_SESSION_DEPTH`] deep, so a model cannot fan out without bound.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, args, check_prompt};
use crate::engine::ChildSession;
use crate::error::Result;
use crate::timeline::Tier;

/// `start_session` calls one turn may make.
pub const MAX_SESSIONS_PER_TURN: u32 = 8;
/// How deep sessions started by tools may nest (a root session is at depth 0).
pub const MAX_SESSION_DEPTH: u32 = 4;

pub struct StartSession;

#[async_trait]
impl Tool for StartSession {
    fn name(&self) -> &'static str {
        "start_session"
    }

    fn description(&self) -> &'static str {
        "Start a child session that works on a prompt on its own. Returns its session id."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string"},
                "cwd": {"type": "string", "description": "Working directory in the drive; default: this session's"},
                "tier": {"type": "string", "enum": ["frontier", "balanced", "economy"]}
            },
            "required": ["prompt"]
        })
    }

    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome> {
        if cx.turn.sessions_started >= MAX_SESSIONS_PER_TURN {
            return Ok(Outcome::error(format!(
                "a turn may start at most {MAX_SESSIONS_PER_TURN} sessions"
            )));
        }
        if cx.io.depth(MAX_SESSION_DEPTH).await? >= MAX_SESSION_DEPTH {
            return Ok(Outcome::error(format!(
                "sessions started by sessions nest at most {MAX_SESSION_DEPTH} deep"
            )));
        }
        cx.turn.sessions_started += 1;
        let parsed: StartIn = match args("start_session", input) {
            Ok(a) => a,
            Err(e) => return Ok(e),
        };
        if let Err(e) = check_prompt(cx.io, &parsed.prompt) {
            return Ok(e);
        }
        let Some(sessions) = cx.io.sessions() else {
            return Ok(Outcome::error("sessions cannot be started from here"));
        };
        let created = sessions
            .start_session(
                cx.io.origin(),
                ChildSession {
                    prompt: parsed.prompt,
                    cwd: parsed.cwd,
                    tier: parsed.tier,
                },
            )
            .await;
        Ok(match created {
            Ok(s) => Outcome::ok(format!("started session {} ({})", s.session_id, s.delivery)),
            Err(e) => Outcome::error(format!("cannot start the session: {e}")),
        })
    }
}

#[derive(Deserialize)]
struct StartIn {
    prompt: String,
    cwd: Option<String>,
    tier: Option<Tier>,
}
