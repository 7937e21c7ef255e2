//! `POST /v1/ws/{workspaceSlug}/agent/sessions/{sessionId}/fork {atSeq, prompt?}`: a new session
//! whose conversation is this one's up to event `atSeq` (see `sessions::fork`). Answers 201 with
//! the fork as a create answers (`session`, `snapshot`, `history`), plus `forkedFrom`.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::body;
use super::context::AppState;
use crate::context::Caller;
use sessiond_core::error::{Error, Result};
use sessiond_core::limits;
use sessiond_core::sessions::busy::BusyPolicy;
use sessiond_core::sessions::{ForkIn, HistoryQuery, InputCommon, MessageIn, view};
use sessiond_core::timeline::Behavior;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ForkBody {
    at_seq: i64,
    prompt: Option<String>,
}

/// The fork point as a request gives it: an event's seq, 1 or more.
pub fn at_seq(field: &str, n: i64) -> Result<u64> {
    u64::try_from(n)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| Error::invalid(format!("{field}: must be an event's seq (1 or more)")))
}

/// The message a fork runs first, checked like any prompt.
pub fn first_message(state: &AppState, prompt: Option<String>) -> Result<Option<MessageIn>> {
    let Some(prompt) = prompt else {
        return Ok(None);
    };
    let max = state.sessions.config().limits.max_prompt_chars;
    limits::check_prompt("prompt", &prompt, max)?;
    Ok(Some(MessageIn {
        prompt,
        tier: None,
        behavior: Behavior::Steer,
        common: InputCommon::default(),
        busy: BusyPolicy::Enqueue,
    }))
}

pub async fn fork(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limit = state.sessions.config().limits.max_body_bytes;
    let b: ForkBody = body::typed(&body::json_value(&req, payload, limit).await?)?;
    let at = at_seq("atSeq", b.at_seq)?;
    let input = ForkIn {
        at_seq: at,
        message: first_message(&state, b.prompt)?,
    };
    let parent = &path.1;
    let out = state.sessions.fork(&actor, parent, input).await?;
    let row = state.sessions.detail_row(&actor, &out.session_id).await?;
    let history = state
        .sessions
        .history_of(
            row.pk,
            HistoryQuery::Forward {
                cursor: 0,
                limit: 100,
            },
        )
        .await?;
    let mut answer = json!({
        "session": view::session_ref(&row),
        "snapshot": view::detail(&row),
        "history": serde_json::from_str::<serde_json::Value>(&history.to_json())
            .map_err(|e| Error::Internal(e.to_string()))?,
        "forkedFrom": {"sessionId": parent, "atSeq": at},
    });
    if let Some(s) = &out.submitted {
        answer["inputSeq"] = json!(s.input_seq);
        answer["delivery"] = json!(s.delivery.as_str());
    }
    Ok(HttpResponse::Created().json(answer))
}
