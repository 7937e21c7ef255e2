//! `POST /v2/sessions/{sessionId}/fork {at_seq, prompt?}`: a new session whose conversation is
//! this one's up to timeline event `at_seq` (see `sessions::fork`). Answers 201 with the fork's
//! Session record, whose `parent` is `{kind: "fork", session_id, at_seq}`.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use crate::body;
use crate::context::AppState;
use crate::context::Caller;
use crate::fork::{at_seq, first_message};
use sessiond_core::error::Result;
use sessiond_core::sessions::ForkIn;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    at_seq: i64,
    prompt: Option<String>,
}

pub async fn fork(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limit = state.sessions.config().limits.max_body_bytes;
    let b: ForkBody = body::typed(&body::json_value(&req, payload, limit).await?)?;
    let input = ForkIn {
        at_seq: at_seq("at_seq", b.at_seq)?,
        message: first_message(&state, b.prompt)?,
    };
    let out = state.sessions.fork(&actor, &path, input).await?;
    let record = state.sessions.record(&actor, &out.session_id).await?;
    Ok(HttpResponse::Created().json(record))
}
