//! `POST /auth/password-reset {token, password}`: the person holding a reset link (made by an
//! owner, `POST /v1/ws/{ws}/people/{userId}/password-reset`) chooses a new password. No other
//! credential: the link's token is it. Their browser sessions end; they sign in afresh.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::context::AppState;
use super::keys::json_body;
use sessiond_core::access;
use sessiond_core::error::Result;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reset {
    token: String,
    password: String,
}

pub async fn reset(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: Reset = json_body(&state, &req, payload).await?;
    access::complete_password_reset(state.sessions.store(), &b.token, &b.password).await?;
    Ok(HttpResponse::Ok().json(json!({ "ok": true })))
}
