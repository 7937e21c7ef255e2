//! The upload grant mint (`POST …/agent/sessions/attachments/session`) and the token-authenticated
//! upload endpoint (`PUT /files/{grantId}/{filename}`), and the body-to-file copy both it and
//! `PUT …/files/content` use.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::json;

use super::body;
use super::context::AppState;
use crate::context::Caller;
use sessiond_core::error::{Error, Result};
use sessiond_core::uploads::{self, Target, Upload};

const SCHEMA_MINT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions_attachments_session.request.json";

#[derive(Deserialize)]
struct MintBody {
    cwd: Option<String>,
}

pub async fn mint(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limit = state.sessions.config().limits.max_body_bytes;
    let b = body::json::<MintBody>(&req, payload, limit, SCHEMA_MINT)
        .await?
        .value;
    let cfg = state.sessions.config();
    let grant = uploads::mint(
        state.sessions.store(),
        &state.sessions.drive(&actor),
        &actor,
        b.cwd.as_deref(),
        &state.base_url(),
        cfg.limits.upload_grant_ttl_ms,
    )
    .await?;
    Ok(HttpResponse::Ok().json(grant))
}

fn bearer(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Writes one new file into the grant's folder. Only the grant's token is accepted here.
pub async fn put(
    state: web::Data<AppState>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let grant_id = req
        .match_info()
        .get("grantId")
        .unwrap_or_default()
        .to_owned();
    // The name is decoded here, from the raw path, so that an encoded separator (%2F) is seen
    // and refused rather than silently routed.
    let raw_name = req.path().rsplit('/').next().unwrap_or_default();
    let name = percent_encoding::percent_decode_str(raw_name)
        .decode_utf8()
        .map_err(|_| Error::invalid("filename: not valid UTF-8"))?
        .into_owned();
    let cfg = state.sessions.config();
    let target = uploads::authorise(
        state.sessions.store(),
        &cfg.data_dir,
        &grant_id,
        bearer(&req),
    )
    .await?;
    let (path, bytes) = receive(&req, payload, target, &name, cfg.limits.max_upload_bytes).await?;
    Ok(HttpResponse::Created().json(json!({ "path": path, "name": name, "bytes": bytes })))
}

/// Streams a request's body into a new file `name` of `target`'s folder: 413 when the declared
/// or the received length is over `limit` (nothing is left behind), 408 when the body pauses
/// longer than the body timeout, `exists` when the name is taken. Answers the drive path and
/// the bytes written.
pub(super) async fn receive(
    req: &HttpRequest,
    mut payload: web::Payload,
    target: Target,
    name: &str,
    limit: u64,
) -> Result<(String, u64)> {
    if let Some(len) = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        && len > limit
    {
        return Err(Error::PayloadTooLarge {
            limit: limit as usize,
        });
    }
    let mut upload = Upload::begin(target, name, limit)?;
    // An upload may take long; a pause longer than the body timeout ends it.
    let pause = body::body_timeout(req);
    loop {
        let chunk = match tokio::time::timeout(pause, payload.next()).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(_) => return Err(Error::RequestTimeout(pause.as_millis() as u64)),
        };
        let chunk = chunk.map_err(|e| Error::invalid(format!("body: {e}")))?;
        upload.write(&chunk)?;
    }
    upload.finish()
}
