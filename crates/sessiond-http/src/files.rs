//! The workspace drive through the API: `GET /v1/ws/{ws}/files?path=` lists a folder,
//! `GET …/files/content?path=` answers a file's bytes, `PUT …/files/content?path=` writes a new
//! one (`files:write`; never replacing a file). The rules live in `drive::browse`.
//!
//! A file is always answered as data: `Content-Disposition: attachment` unless `inline=1` asks
//! for a type the console previews (text, markdown and raster images), and then text of any kind
//! (HTML, SVG and scripts included) as `text/plain`, with `nosniff` and a sandboxing CSP.

use std::io::Read;

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use futures_util::stream;
use serde::Deserialize;
use serde_json::json;

use super::context::AppState;
use super::uploads::receive;
use crate::context::Caller;
use sessiond_core::drive::browse::{Opened, Preview};
use sessiond_core::error::{Error, Result};
use sessiond_core::uploads::Target;

/// Bytes read from disk per chunk of a download.
const CHUNK: usize = 64 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileQuery {
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    inline: Option<String>,
}

fn query(req: &HttpRequest) -> Result<FileQuery> {
    web::Query::<FileQuery>::from_query(req.query_string())
        .map(web::Query::into_inner)
        .map_err(|e| Error::invalid(format!("query: {e}")))
}

fn required(q: &FileQuery) -> Result<&str> {
    q.path
        .as_deref()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| Error::invalid("path: required"))
}

/// `GET /v1/ws/{ws}/files?path=DIR`: the folder's entries (`path` absent: the drive root).
pub async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = query(&req)?;
    if q.inline.is_some() {
        return Err(Error::invalid("inline: only for files/content"));
    }
    let drive = state.sessions.drive(&actor);
    let path = q.path.unwrap_or_default();
    let listing = web::block(move || drive.list(&path))
        .await
        .map_err(|e| Error::Internal(format!("listing: {e}")))??;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(listing))
}

/// `filename="…"` (ASCII, quotes and controls replaced) and `filename*=UTF-8''…` (RFC 6266).
fn disposition(kind: &str, name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii() && !c.is_ascii_control() && c != '"' && c != '\\' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let encoded = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// The type and disposition a file is answered with.
fn presentation(opened: &Opened, inline: bool) -> (&'static str, String) {
    match (inline, opened.kind.preview) {
        (true, Some(Preview::Image)) => (opened.kind.mime, disposition("inline", &opened.name)),
        (true, Some(Preview::Text | Preview::Markdown)) => (
            "text/plain; charset=utf-8",
            disposition("inline", &opened.name),
        ),
        _ => (opened.kind.mime, disposition("attachment", &opened.name)),
    }
}

/// `GET /v1/ws/{ws}/files/content?path=FILE[&inline=1]`: the file's bytes, streamed.
pub async fn content(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = query(&req)?;
    let inline = match q.inline.as_deref() {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(_) => return Err(Error::invalid("inline: must be 1 or 0")),
    };
    let path = required(&q)?.to_owned();
    let drive = state.sessions.drive(&actor);
    let opened = web::block(move || drive.open(&path))
        .await
        .map_err(|e| Error::Internal(format!("reading: {e}")))??;
    let (mime, disposition) = presentation(&opened, inline);
    let size = opened.size;
    let chunks = stream::unfold(Some((opened.file, size)), |state| async move {
        let (mut file, left) = state?;
        if left == 0 {
            return None;
        }
        let read = web::block(move || {
            let mut buf = vec![0u8; CHUNK.min(left as usize)];
            let n = file.read(&mut buf)?;
            buf.truncate(n);
            Ok::<_, std::io::Error>((file, buf))
        })
        .await;
        match read {
            // The file shrank while it was sent: end early (the client sees a short body).
            Ok(Ok((_, buf))) if buf.is_empty() => None,
            Ok(Ok((file, buf))) => {
                let left = left.saturating_sub(buf.len() as u64);
                Some((Ok(web::Bytes::from(buf)), Some((file, left))))
            }
            Ok(Err(e)) => Some((Err(e), None)),
            Err(e) => Some((Err(std::io::Error::other(e.to_string())), None)),
        }
    });
    let mut res = HttpResponse::Ok();
    res.insert_header((header::CONTENT_TYPE, mime))
        .insert_header((header::CONTENT_DISPOSITION, disposition))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; sandbox",
        ))
        .insert_header((header::CACHE_CONTROL, "private, no-cache"));
    if let Some(ms) = opened.modified_at
        && let Some(t) = std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_millis(
            u64::try_from(ms).unwrap_or_default(),
        ))
    {
        res.insert_header((header::LAST_MODIFIED, httpdate::fmt_http_date(t)));
    }
    Ok(res.no_chunking(size).streaming(chunks))
}

/// `PUT /v1/ws/{ws}/files/content?path=DIR/NAME`: writes one new file into an existing folder
/// (`files:write`), at most `limits.max_upload_bytes`; an existing name is 409 `exists`.
pub async fn upload(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let q = query(&req)?;
    if q.inline.is_some() {
        return Err(Error::invalid("inline: only for reading a file"));
    }
    let path = required(&q)?.to_owned();
    let drive = state.sessions.drive(&actor);
    let target_drive = drive.clone();
    let (dir, name) = web::block(move || drive.new_file_target(&path))
        .await
        .map_err(|e| Error::Internal(format!("upload: {e}")))??;
    let limit = state.sessions.config().limits.max_upload_bytes;
    let target = Target {
        drive: target_drive,
        prefix: dir,
    };
    let (path, bytes) = receive(&req, payload, target, &name, limit).await?;
    Ok(HttpResponse::Created().json(json!({ "path": path, "name": name, "bytes": bytes })))
}
