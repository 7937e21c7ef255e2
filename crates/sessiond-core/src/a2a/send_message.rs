//! `SendMessage` and the submission `SendStreamingMessage` shares: a message without a task
//! starts a session of the agent; one with a task continues that session, as the answer when
//! the task is `input-required`, else as a follow-up.

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::error::{A2aError, A2aResult, CONTENT_TYPE_NOT_SUPPORTED};
use super::{Server, message, push_config, task};
use crate::error::Error;
use crate::outbound::destination::{self, Purpose};
use crate::sessions::busy::BusyPolicy;
use crate::sessions::{CreateIn, InputCommon, MessageIn, Submitted};
use crate::timeline::Behavior;

/// A message taken: the session and the input's seq.
pub struct Sent {
    pub submitted: Submitted,
    pub history_length: Option<usize>,
    pub return_immediately: bool,
}

/// Output modes that include plain text (what every reply is).
fn accepts_text(configuration: &Value) -> A2aResult<()> {
    let Some(modes) = configuration.get("acceptedOutputModes") else {
        return Ok(());
    };
    let modes = modes.as_array().ok_or_else(|| {
        A2aError::invalid_params("configuration.acceptedOutputModes: must be a list")
    })?;
    let text = |m: &str| matches!(m, "text/plain" | "text/*" | "*/*" | "text");
    if modes.is_empty() || modes.iter().any(|m| m.as_str().is_some_and(text)) {
        Ok(())
    } else {
        Err(A2aError::new(
            CONTENT_TYPE_NOT_SUPPORTED,
            "configuration.acceptedOutputModes: the agent answers text/plain",
        ))
    }
}

/// Takes the message of `params` into the agent's sessions.
pub async fn submit(server: &Server<'_>, params: &Value) -> A2aResult<Sent> {
    let max = server.sessions.config().limits.max_prompt_chars;
    let incoming = message::parse(params.get("message"), max)?;
    let configuration = params.get("configuration").cloned().unwrap_or(json!({}));
    if !configuration.is_object() {
        return Err(A2aError::invalid_params("configuration: must be an object"));
    }
    accepts_text(&configuration)?;
    let history_length = message::history_length(&configuration, "historyLength")?;
    let return_immediately = configuration
        .get("returnImmediately")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    // A push config sent with the message is checked before anything is written.
    let push = configuration
        .get("taskPushNotificationConfig")
        .filter(|c| !c.is_null());
    if let Some(push) = push {
        let url = push.get("url").and_then(Value::as_str).unwrap_or("");
        destination::check(url, &server.sessions.config().policy, Purpose::A2aPush).map_err(
            |why| {
                A2aError::invalid_params(format!("configuration.taskPushNotificationConfig.{why}"))
            },
        )?;
    }
    let (sessions, actor) = (server.sessions, server.actor);
    let submitted = match &incoming.task_id {
        None => {
            sessions
                .create(
                    actor,
                    CreateIn {
                        prompt: incoming.text,
                        agent_id: Some(server.agent.id.clone()),
                        cwd: None,
                        tier: None,
                        behavior: Behavior::FollowUp,
                        mode: None,
                        common: InputCommon::default(),
                    },
                    None,
                )
                .await?
        }
        Some(id) => {
            let row = task::find(sessions, actor, server.agent, id).await?;
            let asking = row.turn_status == crate::store::TurnStatus::Ask && !row.turn_active;
            let answered = if asking {
                match sessions
                    .answer(
                        actor,
                        &row.id,
                        incoming.text.clone(),
                        InputCommon::default(),
                    )
                    .await
                {
                    Ok(sub) => Some(sub),
                    // The question was answered or withdrawn meanwhile: a message then.
                    Err(Error::NotAsking) => None,
                    Err(e) => return Err(e.into()),
                }
            } else {
                None
            };
            match answered {
                Some(sub) => sub,
                None => {
                    sessions
                        .message(
                            actor,
                            &row.id,
                            MessageIn {
                                prompt: incoming.text,
                                tier: None,
                                behavior: Behavior::FollowUp,
                                busy: BusyPolicy::Enqueue,
                                common: InputCommon::default(),
                            },
                        )
                        .await?
                }
            }
        }
    };
    if let Some(push) = push {
        // Followed from the input on, so the turn it starts is delivered.
        let row = sessions.detail_row(actor, &submitted.key.id).await?;
        push_config::put(server, &row, push, submitted.input_seq).await?;
    }
    Ok(Sent {
        submitted,
        history_length,
        return_immediately,
    })
}

/// `SendMessage`: the task once the turn the message caused has ended (or asked), or as it is
/// when `returnImmediately` is set or the wait's deadline (`runner.wait_deadline_ms`) passes.
pub async fn send_message(server: &Server<'_>, params: &Value) -> A2aResult<Box<RawValue>> {
    let sent = submit(server, params).await?;
    if !sent.return_immediately {
        server
            .sessions
            .wait_for_terminal(&sent.submitted.key, sent.submitted.input_seq)
            .await?;
    }
    let row = server
        .sessions
        .detail_row(server.actor, &sent.submitted.key.id)
        .await?;
    let task = task::view_raw(server.sessions, &row, sent.history_length).await?;
    RawValue::from_string(format!("{{\"task\":{}}}", task.get()))
        .map_err(|e| Error::Internal(format!("a task view: {e}")).into())
}
