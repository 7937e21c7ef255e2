//! A workspace's people (`/v1/ws/{ws}/people/...`), for its owners: add someone (an account
//! without a password is made for a new address), change a role, remove, and hand out a one-time
//! link to choose a password. The list itself is `GET /people` in [`super::keys`].

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use super::context::AppState;
use super::keys::json_body;
use crate::context::Caller;
use sessiond_core::access;
use sessiond_core::error::Result;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AddPerson {
    email: String,
    role: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetRole {
    role: String,
}

/// `POST /v1/ws/{ws}/people {email, role}` → 201 the person, `created` when the account is new.
pub async fn add(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    let b: AddPerson = json_body(&state, &req, payload).await?;
    let person = access::add_person(store, &actor.workspace_id, &b.email, &b.role).await?;
    Ok(HttpResponse::Created().json(person))
}

/// `PATCH /v1/ws/{ws}/people/{userId} {role}`.
pub async fn set_role(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    let b: SetRole = json_body(&state, &req, payload).await?;
    access::set_role(store, &actor.workspace_id, &path.1, &b.role).await?;
    Ok(HttpResponse::Ok().json(json!({ "userId": path.1, "role": b.role })))
}

/// `DELETE /v1/ws/{ws}/people/{userId}`.
pub async fn remove(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    access::remove_person(store, &state.auth, &actor.workspace_id, &path.1).await?;
    Ok(HttpResponse::Ok().json(json!({ "removed": true })))
}

/// `POST /v1/ws/{ws}/people/{userId}/password-reset` → 201 `{url, expiresAt}`: the link, shown
/// once, opens the console's page to choose a new password.
pub async fn password_reset(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    let (token, expires) = access::password_reset(store, &actor, &path.1).await?;
    let url = format!("{}/reset#{token}", state.base_url().trim_end_matches('/'));
    Ok(HttpResponse::Created().json(json!({
        "url": url,
        "expiresAt": sessiond_core::clock::rfc3339(expires),
    })))
}
