//! `POST /v1/ws/{ws}/apps`: an owner registers an app and gets its key (shown once). The app's
//! key is listed and revoked with the others under `/keys`.

use actix_web::{HttpRequest, HttpResponse, web};

use super::context::AppState;
use super::keys::{CreateKey, created, json_body};
use crate::context::Caller;
use sessiond_core::access;
use sessiond_core::error::Result;

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
    let key = access::create_app_key(
        store,
        &actor.workspace_id,
        &actor.workspace_slug,
        &spec.name,
        &spec.scopes,
        expires_at,
    )
    .await?;
    created(store, key).await
}
