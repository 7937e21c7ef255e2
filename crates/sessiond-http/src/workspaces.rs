//! Workspaces over HTTP: `POST /v1/workspaces` makes one (its maker becomes its owner; only
//! someone who owns a workspace already may), `GET /v1/ws/{ws}` shows one with the caller's role,
//! `PATCH /v1/ws/{ws}` renames it (owners only). Switching is the client's: every route names its
//! workspace.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use super::context::{AppState, credential};
use super::keys::json_body;
use crate::context::Caller;
use sessiond_core::access;
use sessiond_core::auth::Principal;
use sessiond_core::error::{Error, Result};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    slug: String,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rename {
    name: String,
}

/// `POST /v1/workspaces {slug, name?}` → 201 `{slug, name, role}`. A person's credential: their
/// browser session or a personal key with the `sessions` scope (an app's key: 403).
pub async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    // An agent's key speaks for an agent, not a person: 403 as on every route outside its own.
    if let Some(actor) = super::agent_key::callback_actor(&state.sessions, &req).await {
        actor?;
        return Err(Error::Forbidden(
            "an agent's key does not make workspaces".into(),
        ));
    }
    let user_id = match credential(&state, &req).await? {
        Principal::Browser { user_id } => user_id,
        Principal::Key(k) => match (&k.user_id, k.app_id.is_none()) {
            (Some(user), true) if k.scopes.iter().any(|s| s == "sessions") => user.clone(),
            _ => {
                return Err(Error::Forbidden(
                    "workspaces are made by a person's browser session or personal key with the \
                     sessions scope"
                        .into(),
                ));
            }
        },
    };
    let b: Create = json_body(&state, &req, payload).await?;
    let store = state.sessions.store();
    let made = access::create_workspace(
        store,
        &state.sessions.config().data_dir,
        &user_id,
        &b.slug,
        b.name.as_deref(),
    )
    .await?;
    Ok(HttpResponse::Created().json(made))
}

/// `GET /v1/ws/{ws}` → `{slug, name, createdAt, role}`.
pub async fn get(state: web::Data<AppState>, Caller(actor): Caller) -> Result<HttpResponse> {
    let view = access::workspace_view(state.sessions.store(), &actor).await?;
    Ok(HttpResponse::Ok().json(view))
}

/// `PATCH /v1/ws/{ws} {name}` (owners only).
pub async fn rename(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let store = state.sessions.store();
    access::require_owner(store, &actor).await?;
    let b: Rename = json_body(&state, &req, payload).await?;
    let name = access::check_workspace_name(&b.name)?;
    store
        .access()
        .rename_workspace(&actor.workspace_id, &name)
        .await?;
    let view = access::workspace_view(store, &actor).await?;
    Ok(HttpResponse::Ok().json(view))
}
