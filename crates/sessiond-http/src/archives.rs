//! Portable archives over HTTP: a session's export (`GET …/agent/sessions/{id}/export`), an
//! agent's or the whole workspace's (`GET /v1/ws/{slug}/export`, owners only), and the import of
//! an archive (`POST /v1/ws/{slug}/import`, owners only, bounded by `limits.max_archive_bytes`).
//! Exports stream as `application/x-tar`; see `sessiond_core::archives` for what an archive holds.

use std::sync::Arc;

use actix_web::http::header;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::stream;

use super::body::{self, Query};
use super::context::AppState;
use crate::context::Caller;
use sessiond_core::archives::{Archives, Export, Workspace};
use sessiond_core::error::{Error, Result};
use sessiond_core::sessions::Actor;

/// The archives of this server, with records naming engines as its runner does.
pub fn archives(state: &AppState) -> Archives {
    let sessions = state.sessions.clone();
    Archives::new(
        state.sessions.store().clone(),
        state.sessions.config().data_dir.clone(),
        Arc::new(move |engine: &str| sessions.harness_of(engine)),
    )
}

fn workspace(actor: &Actor) -> Workspace {
    Workspace {
        id: actor.workspace_id.clone(),
        slug: actor.workspace_slug.clone(),
        user_id: actor.user_id.clone(),
    }
}

/// 403 unless the actor is an owner of the workspace: whole-workspace archives read and write
/// every member's sessions.
pub async fn require_owner(state: &AppState, actor: &Actor, what: &str) -> Result<()> {
    let owner = state
        .sessions
        .store()
        .identity()
        .memberships(&actor.user_id)
        .await?
        .iter()
        .any(|(ws, _, role)| *ws == actor.workspace_id && role == "owner");
    if owner {
        Ok(())
    } else {
        Err(Error::Forbidden(format!(
            "{what} needs an owner of workspace {}",
            actor.workspace_slug
        )))
    }
}

/// The tar stream of an export, one session per chunk. A failure half-way ends the stream
/// without its manifest, which every import refuses.
fn streamed(export: Export, file_name: &str) -> HttpResponse {
    let chunks = stream::unfold(Some(export), |state| async move {
        let mut export = state?;
        match export.next_chunk().await {
            Ok(Some(chunk)) => Some((Ok::<_, actix_web::Error>(Bytes::from(chunk)), Some(export))),
            Ok(None) => None,
            Err(e) => {
                tracing::error!(error = %e, "export failed part-way; the archive ends without its manifest");
                Some((
                    Err(actix_web::error::ErrorInternalServerError(e.to_string())),
                    None,
                ))
            }
        }
    });
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "application/x-tar"))
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{file_name}\""),
        ))
        .streaming(chunks)
}

/// `GET /v1/ws/{workspaceSlug}/agent/sessions/{sessionId}/export`: one session's archive.
pub async fn export_session(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    let id = path.1.clone();
    let export = archives(&state)
        .export(&workspace(&actor), vec![id.clone()], true)
        .await?;
    Ok(streamed(export, &format!("session-{id}.tar")))
}

/// `GET /v1/ws/{workspaceSlug}/export[?agent=SLUG]`: every session of the workspace, or of one
/// agent, at rest (owners only).
pub async fn export_workspace(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    require_owner(&state, &actor, "exporting a workspace's sessions").await?;
    let q = Query::parse(&req)?;
    let agent = q.get("agent").map(str::to_owned);
    let archives = archives(&state);
    let ws = workspace(&actor);
    let ids = archives.session_ids(&ws, agent.as_deref()).await?;
    let name = match &agent {
        Some(a) => format!("{}-{a}.tar", ws.slug),
        None => format!("{}.tar", ws.slug),
    };
    let export = archives.export(&ws, ids, false).await?;
    Ok(streamed(export, &name))
}

/// `POST /v1/ws/{workspaceSlug}/import`: an archive's sessions and files written into the
/// workspace (owners only). The body is the tar file itself.
pub async fn import(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    require_owner(&state, &actor, "importing an archive").await?;
    let limit = state.sessions.config().limits.max_archive_bytes;
    let bytes = body::read_limited(&req, payload, limit).await?;
    if bytes.is_empty() {
        return Err(Error::invalid(
            "body: an archive (application/x-tar) made by an export is required",
        ));
    }
    let report = archives(&state).import(&workspace(&actor), &bytes).await?;
    Ok(HttpResponse::Ok().json(report))
}
