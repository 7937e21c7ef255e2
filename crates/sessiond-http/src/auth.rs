//! Sign-in routes for the browser: first-run setup, login, logout and who-am-I.

use actix_web::cookie::{Cookie, SameSite, time::Duration as CookieDuration};
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::body;
use super::context::{AppState, credential};
use sessiond_core::auth::{self, Principal, password};
use sessiond_core::error::{Error, Result};

#[derive(Deserialize)]
struct SetupBody {
    token: String,
    email: String,
    password: String,
}

#[derive(Deserialize)]
struct LoginBody {
    email: String,
    password: String,
}

fn session_cookie(state: &AppState, value: String, max_age_ms: i64) -> Cookie<'static> {
    let secure = state.base_url().starts_with("https://");
    Cookie::build(auth::COOKIE, value)
        .path("/")
        .http_only(true)
        .secure(secure)
        .same_site(SameSite::Lax)
        .max_age(CookieDuration::milliseconds(max_age_ms))
        .finish()
}

async fn parse<T: serde::de::DeserializeOwned>(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T> {
    let bytes = body::json_bytes(
        req,
        payload,
        64 * 1024.min(state.sessions.config().limits.max_body_bytes),
    )
    .await?;
    let raw: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| Error::invalid("body: malformed JSON"))?;
    serde_path_to_error::deserialize(&raw)
        .map_err(|e| Error::invalid(format!("{}: {}", e.path(), e.inner())))
}

fn check_email(email: &str) -> Result<String> {
    let email = email.trim().to_lowercase();
    let ok = email.len() <= 254
        && email
            .split_once('@')
            .is_some_and(|(a, d)| !a.is_empty() && d.contains('.'))
        && !email.chars().any(|c| c.is_control() || c.is_whitespace());
    if ok {
        Ok(email)
    } else {
        Err(Error::invalid("email: not an email address"))
    }
}

async fn signed_in(state: &AppState, user_id: &str, email: &str) -> Result<HttpResponse> {
    let cookie = state.auth.open_browser_session(user_id).await?;
    let who = me_body(state, user_id, email).await?;
    Ok(HttpResponse::Ok()
        .cookie(session_cookie(state, cookie, state.auth.session_ms()))
        .json(who))
}

async fn me_body(state: &AppState, user_id: &str, email: &str) -> Result<serde_json::Value> {
    let workspaces = state.auth.store().identity().memberships(user_id).await?;
    Ok(json!({
        "user": { "id": user_id, "email": email },
        "workspaces": workspaces.iter().map(|(_, slug, role)| json!({"slug": slug, "role": role})).collect::<Vec<_>>(),
    }))
}

fn setup_link_not_valid() -> Error {
    Error::Forbidden(format!(
        "this setup link is not valid: it was used already, or {} newer ones were printed since \
         (each start prints one, and the earlier ones stay valid until the owner is created); \
         open the link of sessiond's latest start",
        auth::SETUP_TOKENS_KEPT
    ))
}

/// `POST /auth/setup`: creates the first owner with the one-time token printed at start-up.
/// Accepted from loopback only.
pub async fn setup(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    if !req.peer_addr().is_some_and(|a| a.ip().is_loopback()) {
        return Err(Error::Forbidden(
            "setup is only possible from this machine".into(),
        ));
    }
    let b: SetupBody = parse(&state, &req, payload).await?;
    let email = check_email(&b.email)?;
    password::check_strength(&b.password)?;
    // Checked before the (slow) password hash; `complete_setup` decides, in one transaction.
    if !state.auth.setup_token_known(&b.token).await? {
        return Err(setup_link_not_valid());
    }
    let phc = password::hash(&b.password)?;
    let user_id = state
        .auth
        .complete_setup(&b.token, &email, &phc)
        .await?
        .ok_or_else(setup_link_not_valid)?;
    signed_in(&state, &user_id, &email).await
}

/// `POST /auth/login`: email + password → an HttpOnly session cookie. Failed attempts slow down
/// further ones (`auth::limiter`).
pub async fn login(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: LoginBody = parse(&state, &req, payload).await?;
    let email = b.email.trim().to_lowercase();
    let address = req
        .peer_addr()
        .map(|a| a.ip().to_string())
        .unwrap_or_default();
    // The attempt is counted as a failure before the password is checked (and taken back on
    // success), so parallel guesses cannot all pass the limit.
    let mark = match state.auth.logins.attempt(&email, &address).await? {
        Ok(mark) => mark,
        Err(wait) => {
            sessiond_core::metrics::METRICS.logins_throttled.inc();
            return Ok(HttpResponse::TooManyRequests()
                .insert_header((header::RETRY_AFTER, wait.to_string()))
                .json(json!({"error": "rate_limited", "message": format!("too many failed sign-ins; try again in {wait} s")})));
        }
    };
    let user = state.auth.store().identity().user_by_email(&email).await?;
    let pw = b.password;
    let (ok, user) = web::block(move || {
        // The same work whether or not the account exists.
        let phc = user
            .as_ref()
            .map(|u| u.password_hash.clone())
            .unwrap_or_else(|| password::dummy_hash().to_owned());
        (password::verify(&pw, &phc) && user.is_some(), user)
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))?;
    match user.filter(|_| ok) {
        Some(user) => {
            state.auth.logins.succeeded(&email, &address, mark).await?;
            signed_in(&state, &user.id, &user.email).await
        }
        None => Err(Error::Unauthorized),
    }
}

/// `POST /auth/logout`: ends the browser session (cross-site protected like every unsafe call).
pub async fn logout(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse> {
    if let Some(cookie) = req.cookie(auth::COOKIE) {
        super::context::check_same_origin(&req)?;
        state.auth.close_browser_session(cookie.value()).await?;
    }
    Ok(HttpResponse::Ok()
        .cookie(session_cookie(&state, String::new(), 0))
        .json(json!({"ok": true})))
}

/// `GET /auth/me`: the signed-in user and their workspaces (or the key's workspace).
pub async fn me(state: web::Data<AppState>, req: HttpRequest) -> Result<HttpResponse> {
    // An agent key alone is known but speaks for an agent, not a person: 403 as on every route
    // outside its agent's own objects (and 401 when it is no key at all).
    if let Some(actor) = super::agent_key::callback_actor(&state.sessions, &req).await {
        actor?;
    }
    match credential(&state, &req).await? {
        Principal::Browser { user_id } => {
            let user = state
                .auth
                .store()
                .identity()
                .user_by_id(&user_id)
                .await?
                .ok_or(Error::Unauthorized)?;
            Ok(HttpResponse::Ok().json(me_body(&state, &user.id, &user.email).await?))
        }
        Principal::Key(k) => Ok(HttpResponse::Ok().json(json!({
            "key": { "id": k.id, "name": k.name, "scopes": k.scopes },
            "workspaces": [{ "slug": k.workspace_slug, "role": if k.app_id.is_some() { "app" } else { "member" } }],
        }))),
    }
}

/// `GET /auth/status`: whether first-run setup is still open (for the UI; no secrets).
pub async fn status(state: web::Data<AppState>) -> Result<HttpResponse> {
    let open = state.auth.setup_pending().await?;
    Ok(HttpResponse::Ok().json(json!({ "setupRequired": open })))
}
