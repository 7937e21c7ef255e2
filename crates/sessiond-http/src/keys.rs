//! A workspace's API keys (`/v1/ws/{ws}/keys`), for its owners: list with last use, create (the
//! secret in this answer only, an optional expiry), revoke at once. The logic is
//! [`sessiond_core::access`]'s.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::body;
use super::context::AppState;
use crate::context::Caller;
use sessiond_core::access;
use sessiond_core::error::{Error, Result};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct CreateKey {
    pub name: String,
    pub scopes: Vec<String>,
    /// RFC 3339; the key works until then. Absent or null: it never expires.
    #[serde(default)]
    pub expires_at: Option<String>,
}

/// A JSON body of an access route, read within the body limit; malformed JSON and fields of the
/// wrong shape are 400 naming the field.
pub(super) async fn json_body<T: serde::de::DeserializeOwned>(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T> {
    let bytes =
        body::json_bytes(req, payload, state.sessions.config().limits.max_body_bytes).await?;
    let raw: Value = serde_json::from_slice(&bytes)
        .map_err(|e| Error::invalid(format!("body: malformed JSON ({e})")))?;
    serde_path_to_error::deserialize(&raw)
        .map_err(|e| Error::invalid(format!("{}: {}", e.path(), e.inner())))
}

/// The key as listed plus its secret (the create answer only).
pub(super) async fn created(
    store: &sessiond_core::store::Store,
    key: sessiond_core::auth::NewKey,
) -> Result<HttpResponse> {
    let row = store
        .identity()
        .key_by_id(&key.id)
        .await?
        .ok_or_else(|| Error::Internal("new key not found".into()))?;
    let mut view = access::key_view(&row);
    if let Some(m) = view.as_object_mut() {
        m.insert("key".into(), Value::String(key.key));
    }
    Ok(HttpResponse::Created().json(view))
}

/// `GET /v1/ws/{ws}/keys`.
pub async fn list(state: web::Data<AppState>, Caller(actor): Caller) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    let keys = access::list_keys(store, &actor.workspace_id).await?;
    Ok(HttpResponse::Ok()
        .json(json!({ "keys": keys.iter().map(access::key_view).collect::<Vec<_>>() })))
}

/// `POST /v1/ws/{ws}/keys`: a personal key of the caller's.
pub async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    let spec: CreateKey = json_body(&state, &req, payload).await?;
    let expires_at = spec
        .expires_at
        .as_deref()
        .map(access::parse_expiry)
        .transpose()?;
    let key = access::create_user_key(
        store,
        &actor.user_id,
        &actor.workspace_id,
        &actor.workspace_slug,
        &spec.name,
        &spec.scopes,
        expires_at,
    )
    .await?;
    created(store, key).await
}

/// `DELETE /v1/ws/{ws}/keys/{keyId}`.
pub async fn revoke(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    access::revoke_key(store, &state.auth, &actor.workspace_id, &path.1).await?;
    Ok(HttpResponse::Ok().json(json!({ "revoked": true })))
}

/// `GET /v1/ws/{ws}/people`: the workspace's members and their roles (owners only).
pub async fn people(state: web::Data<AppState>, Caller(actor): Caller) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    let people = access::list_people(store, &actor.workspace_id).await?;
    Ok(HttpResponse::Ok().json(json!({ "people": people })))
}
