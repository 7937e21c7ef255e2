//! `message_session`: the model sends a message to another session of its workspace, attributed
//! to this session (R7). A turn sends at most [`MAX_MESSAGES_PER_TURN`].

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, args, check_prompt};
use crate::engine::SessionMessage;
use crate::error::{Error, Result};
use crate::timeline::Behavior;

/// `message_session` calls one turn may make.
pub const MAX_MESSAGES_PER_TURN: u32 = 16;

pub struct MessageSession;

#[async_trait]
impl Tool for MessageSession {
    fn name(&self) -> &'static str {
        "message_session"
    }

    fn description(&self) -> &'static str {
        "Send a message to another session of this workspace (it is attributed to this session)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "sessionId": {"type": "string"},
                "prompt": {"type": "string"},
                "behavior": {"type": "string", "enum": ["steer", "follow_up"]}
            },
            "required": ["sessionId", "prompt"]
        })
    }

    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome> {
        if cx.turn.messages_sent >= MAX_MESSAGES_PER_TURN {
            return Ok(Outcome::error(format!(
                "a turn may send at most {MAX_MESSAGES_PER_TURN} messages to sessions"
            )));
        }
        cx.turn.messages_sent += 1;
        let parsed: MessageToolIn = match args("message_session", input) {
            Ok(a) => a,
            Err(e) => return Ok(e),
        };
        if let Err(e) = check_prompt(cx.io, &parsed.prompt) {
            return Ok(e);
        }
        if parsed.session_id == cx.io.session_id() {
            return Ok(Outcome::error(
                "this is the current session: answer here instead of messaging it",
            ));
        }
        let Some(sessions) = cx.io.sessions() else {
            return Ok(Outcome::error("sessions cannot be messaged from here"));
        };
        let sent = sessions
            .message_session(
                cx.io.origin(),
                SessionMessage {
                    session_id: parsed.session_id.clone(),
                    prompt: parsed.prompt,
                    behavior: parsed.behavior.unwrap_or(Behavior::Steer),
                },
            )
            .await;
        Ok(match sent {
            Ok(s) => Outcome::ok(format!(
                "message sent to session {} ({})",
                s.session_id, s.delivery
            )),
            Err(Error::NotFound) => Outcome::error(format!(
                "there is no session {} in this workspace",
                parsed.session_id
            )),
            Err(e) => Outcome::error(format!("cannot send the message: {e}")),
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageToolIn {
    session_id: String,
    prompt: String,
    behavior: Option<Behavior>,
}
