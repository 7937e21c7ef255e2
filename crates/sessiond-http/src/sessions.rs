//! Handlers of the Sessions API (`/v1/ws/{workspaceSlug}/agent/sessions/...`). Each one parses and
//! validates, calls the sessions core, and shapes the seed's JSON.

use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::body::{self, Query};
use super::context::AppState;
use super::session_state;
use crate::context::Caller;
use sessiond_core::error::{Error, Result};
use sessiond_core::limits::check_length;
use sessiond_core::runner::Delivery;
use sessiond_core::sessions::{
    self, Actor, CreateIn, HistoryQuery, InputCommon, ListQuery, MessageIn, Submitted, WaitOutcome,
    view,
};
use sessiond_core::store::projections::Bucket;
use sessiond_core::timeline::{AttachmentRef, Behavior, Tier};

const SCHEMA_CREATE: &str = "POST_v1_ws__workspaceSlug__agent_sessions.request.json";
const SCHEMA_CHILD: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__sessions.request.json";
const SCHEMA_MESSAGE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages.request.json";
const SCHEMA_NOTE: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__note.request.json";
const SCHEMA_ANSWER: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__answer.request.json";
const SCHEMA_CREATE_WAIT: &str = "POST_v1_ws__workspaceSlug__agent_sessions_wait.request.json";
const SCHEMA_CHILD_WAIT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__sessions_wait.request.json";
const SCHEMA_MESSAGE_WAIT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages_wait.request.json";
const SCHEMA_ANSWER_WAIT: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__answer_wait.request.json";
const SCHEMA_TITLE: &str = "PATCH_v1_ws__workspaceSlug__agent_sessions__sessionId_.request.json";
const SCHEMA_ARCHIVE: &str =
    "PUT_v1_ws__workspaceSlug__agent_sessions__sessionId__archive.request.json";
const SCHEMA_READ: &str = "PUT_v1_ws__workspaceSlug__agent_sessions__sessionId__read.request.json";

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImageBody {
    data: String,
    mime_type: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AttachmentBody {
    path: String,
    name: String,
    #[serde(deserialize_with = "body::schema_integer")]
    bytes: u64,
    mime_type: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateBody {
    prompt: String,
    client_request_id: Option<String>,
    cwd: Option<String>,
    #[serde(default)]
    images: Vec<ImageBody>,
    #[serde(default)]
    attachments: Vec<AttachmentBody>,
    tier: Option<Tier>,
    behavior: Option<Behavior>,
    mode: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageBody {
    prompt: String,
    client_request_id: Option<String>,
    #[serde(default)]
    images: Vec<ImageBody>,
    #[serde(default)]
    attachments: Vec<AttachmentBody>,
    tier: Option<Tier>,
    behavior: Option<Behavior>,
    source_session_id: Option<String>,
    /// sessiond's busy policy (an extra field seed 000 permits): `enqueue`, `interrupt`, `reject`.
    if_busy: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NoteBody {
    note: String,
    client_request_id: Option<String>,
    #[serde(default)]
    images: Vec<ImageBody>,
    #[serde(default)]
    attachments: Vec<AttachmentBody>,
    source_session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct AnswerBody {
    answer: String,
    client_request_id: Option<String>,
    #[serde(default)]
    images: Vec<ImageBody>,
    #[serde(default)]
    attachments: Vec<AttachmentBody>,
    source_session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TitleBody {
    title: String,
}

#[derive(Debug, Deserialize)]
struct ArchiveBody {
    archived: bool,
}

#[derive(Debug, Deserialize)]
struct ReadBody {
    #[serde(deserialize_with = "body::schema_integer")]
    seq: u64,
}

fn json_response(body: String) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "application/json"))
        .body(body)
}

pub fn to_json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Internal(format!("cannot encode response: {e}")))
}

fn to_value<T: serde::Serialize>(v: &T) -> Result<Value> {
    serde_json::to_value(v).map_err(|e| Error::Internal(format!("cannot encode response: {e}")))
}

/// An attachment path names a file inside the workspace drive: relative, no `..`, no control
/// characters.
fn attachment_ref(i: usize, a: AttachmentBody) -> Result<AttachmentRef> {
    let bad = |why: &str| Error::invalid(format!("attachments/{i}/path: {why}"));
    let path = a.path.trim_start_matches("./");
    if path.starts_with('/') || path.starts_with('\\') || path.contains(':') {
        return Err(bad("must be relative to the workspace drive"));
    }
    if path.chars().any(char::is_control) {
        return Err(bad("contains control characters"));
    }
    if path.split(['/', '\\']).any(|seg| seg == "..") {
        return Err(bad("must stay inside the workspace drive"));
    }
    if a.name.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "attachments/{i}/name: contains control characters"
        )));
    }
    Ok(AttachmentRef {
        path: path.to_owned(),
        name: a.name,
        bytes: a.bytes,
        mime_type: a.mime_type,
    })
}

fn common(
    client_request_id: Option<String>,
    images: Vec<ImageBody>,
    attachments: Vec<AttachmentBody>,
    source_session_id: Option<String>,
    fingerprint: String,
) -> Result<InputCommon> {
    Ok(InputCommon {
        client_request_id: client_request_id.map(|id| id.to_ascii_lowercase()),
        images: images
            .into_iter()
            .map(|i| sessions::ImageIn {
                data: i.data,
                mime_type: i.mime_type,
            })
            .collect(),
        attachments: attachments
            .into_iter()
            .enumerate()
            .map(|(i, a)| attachment_ref(i, a))
            .collect::<Result<_>>()?,
        fingerprint,
        source_session_id,
    })
}

/// `CreateSessionResponse`: the session ref, its snapshot and its first history page (R27).
pub async fn created(state: &AppState, actor: &Actor, s: &Submitted) -> Result<HttpResponse> {
    let row = state.sessions.detail_row(actor, &s.key.id).await?;
    let history = state
        .sessions
        .history_of(
            row.pk,
            HistoryQuery::Forward {
                cursor: 0,
                limit: 100,
            },
        )
        .await?;
    Ok(json_response(format!(
        "{{\"session\":{},\"snapshot\":{},\"history\":{},\"dispatched\":false,\"delivery\":\"{}\"}}",
        to_json(&view::session_ref(&row))?,
        to_json(&view::detail(&row))?,
        history.to_json(),
        s.delivery.as_str()
    )))
}

fn delivery_ack(d: Delivery) -> HttpResponse {
    HttpResponse::Ok().json(json!({"ok": true, "delivery": d.as_str()}))
}

async fn create_input(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
    schema: &str,
    target: &str,
) -> Result<CreateIn> {
    let limits = &state.sessions.config().limits;
    let body::Json { value: b, raw } =
        body::json::<CreateBody>(req, payload, limits.max_body_bytes, schema).await?;
    check_length("prompt", &b.prompt, limits.max_prompt_chars)?;
    let cwd = b.cwd;
    let fp = body::fingerprint("create", target, &raw);
    Ok(CreateIn {
        prompt: b.prompt,
        agent_id: None,
        cwd,
        tier: b.tier,
        behavior: b.behavior.unwrap_or(Behavior::Steer),
        mode: b.mode,
        common: common(b.client_request_id, b.images, b.attachments, None, fp)?,
    })
}

/// Whether a submission route answers as soon as its input is recorded or waits for the turn's
/// terminal: each `X` and `X/wait` pair is one handler, instantiated twice by the route table
/// (`create::<ACK>`, `create::<WAIT>`), which differ only in their body's schema and their answer.
pub const ACK: bool = false;
/// See [`ACK`].
pub const WAIT: bool = true;

/// `POST …/agent/sessions` and `…/wait`.
pub async fn create<const WAITS: bool>(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let schema = if WAITS {
        SCHEMA_CREATE_WAIT
    } else {
        SCHEMA_CREATE
    };
    let input = create_input(&state, &req, payload, schema, "").await?;
    let s = state.sessions.create(&actor, input, None).await?;
    answer_submission::<WAITS>(&state, &actor, &s).await
}

/// `POST …/{sessionId}/sessions` and `…/wait`: a session whose parent is this one.
pub async fn create_child<const WAITS: bool>(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let parent = path.into_inner().1;
    let schema = if WAITS {
        SCHEMA_CHILD_WAIT
    } else {
        SCHEMA_CHILD
    };
    let input = create_input(&state, &req, payload, schema, &parent).await?;
    let s = state.sessions.create(&actor, input, Some(parent)).await?;
    answer_submission::<WAITS>(&state, &actor, &s).await
}

/// A new session's answer: `CreateSessionResponse`, or the `/wait` answer.
async fn answer_submission<const WAITS: bool>(
    state: &AppState,
    actor: &Actor,
    s: &Submitted,
) -> Result<HttpResponse> {
    if WAITS {
        wait_response(state, s).await
    } else {
        created(state, actor, s).await
    }
}

/// The `/wait` answer (R46, R49): 200 with the durable terminal, or 202 pending at the deadline.
pub async fn wait_response(state: &AppState, s: &Submitted) -> Result<HttpResponse> {
    match state
        .sessions
        .wait_for_terminal(&s.key, s.input_seq)
        .await?
    {
        WaitOutcome::Terminal { event, cwd } => {
            let cwd = match cwd.filter(|c| !c.is_empty()) {
                Some(c) => format!(",\"cwd\":{}", to_json(&c)?),
                None => String::new(),
            };
            Ok(json_response(format!(
                "{{\"sessionId\":{},\"inputSeq\":{}{cwd},\"terminal\":{}}}",
                to_json(&s.key.id)?,
                s.input_seq,
                view::entry_json(&event)
            )))
        }
        WaitOutcome::Pending => Ok(HttpResponse::Accepted().json(json!({
            "sessionId": s.key.id,
            "inputSeq": s.input_seq,
            "status": "pending",
        }))),
    }
}

pub async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = Query::parse(&req)?;
    let limits = &state.sessions.config().limits;
    let cursor = q.get("cursor").map(str::to_owned);
    if cursor.as_deref() == Some("") {
        return Err(Error::invalid("cursor: must not be empty"));
    }
    let search = q.get("search").map(str::to_owned);
    if let Some(s) = &search
        && s.chars().count() > 200
    {
        return Err(Error::invalid("search: longer than 200 characters"));
    }
    let bucket = match q.get("bucket") {
        None => None,
        Some(b) => Some(Bucket::parse(b).ok_or_else(|| {
            Error::invalid("bucket: must be one of asking, running, scheduled, done")
        })?),
    };
    let archived_only = match q.get("archived") {
        None | Some("exclude") => false,
        Some("only") => true,
        Some(_) => return Err(Error::invalid("archived: must be exclude or only")),
    };
    let agent_id = match q.get("agentId") {
        Some("") => return Err(Error::invalid("agentId: must not be empty")),
        other => other.map(str::to_owned),
    };
    let exclude_default = match q.get("excludeDefault") {
        None => false,
        Some("true") => true,
        Some(_) => return Err(Error::invalid("excludeDefault: must be true when present")),
    };
    let limit = q.limit("limit", 20, limits.list_page_max)?;
    let sq = session_state::state_query(&q)?;
    let list = ListQuery {
        cursor,
        limit,
        search,
        bucket,
        archived_only,
        include_archived: false,
        agent_id,
        exclude_default,
    };
    let (rows, next) = match &sq.filter {
        Some(states) => state.sessions.list_in_states(&actor, list, states).await?,
        None => {
            let (rows, next) = state.sessions.list(&actor, list).await?;
            if !sq.include {
                let sessions: Vec<_> = rows.iter().map(view::summary).collect();
                let mut body = json!({ "sessions": sessions });
                if let Some(next) = next {
                    body["nextCursor"] = json!(next);
                }
                return Ok(HttpResponse::Ok().json(body));
            }
            let mut standings = state.sessions.standings(&rows).await?;
            let rows = rows
                .into_iter()
                .filter_map(|r| {
                    let s = standings.remove(&r.pk)?;
                    Some((r, s))
                })
                .collect();
            (rows, next)
        }
    };
    let sessions: Vec<Value> = rows
        .iter()
        .map(|(row, s)| {
            let mut v = to_value(&view::summary(row))?;
            session_state::put_state(&mut v, s, false);
            Ok(v)
        })
        .collect::<Result<_>>()?;
    let mut body = json!({ "sessions": sessions });
    if let Some(next) = next {
        body["nextCursor"] = json!(next);
    }
    Ok(HttpResponse::Ok().json(body))
}

pub async fn detail(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let sq = session_state::state_query(&Query::parse(&req)?)?;
    let row = state.sessions.detail_row(&actor, &path.1).await?;
    if !sq.include {
        return Ok(json_response(to_json(&view::detail(&row))?));
    }
    let standing = state.sessions.standing(&row).await?;
    let mut v = to_value(&view::detail(&row))?;
    session_state::put_state(&mut v, &standing, true);
    Ok(HttpResponse::Ok().json(v))
}

/// Parses `cursor` / `before` / `limit` (S7); both cursors together are refused (R32).
pub fn history_query(req: &HttpRequest, max: u32) -> Result<HistoryQuery> {
    let q = Query::parse(req)?;
    let limit = q.limit("limit", 100, max)?;
    match (q.uint53("cursor")?, q.uint53("before")?) {
        (Some(_), Some(_)) => Err(Error::invalid("cursor and before cannot be combined")),
        (_, Some(before)) => Ok(HistoryQuery::Backward { before, limit }),
        (cursor, None) => Ok(HistoryQuery::Forward {
            cursor: cursor.unwrap_or(0),
            limit,
        }),
    }
}

pub async fn history(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = history_query(&req, state.sessions.config().limits.history_page_max)?;
    let page = state.sessions.history(&actor, &path.1, q).await?;
    Ok(json_response(page.to_json()))
}

/// A message body checked and turned into the core's input (shared with the default alias).
pub fn message_input(
    state: &AppState,
    b: MessageBody,
    raw: &Value,
    target: &str,
) -> Result<MessageIn> {
    check_length(
        "prompt",
        &b.prompt,
        state.sessions.config().limits.max_prompt_chars,
    )?;
    let fp = body::fingerprint("message", target, raw);
    Ok(MessageIn {
        prompt: b.prompt,
        tier: b.tier,
        behavior: b.behavior.unwrap_or(Behavior::Steer),
        common: common(
            b.client_request_id,
            b.images,
            b.attachments,
            b.source_session_id,
            fp,
        )?,
        busy: sessions::busy::parse("ifBusy", b.if_busy.as_deref())?,
    })
}

async fn submit_message(
    state: &AppState,
    actor: &Actor,
    session_id: &str,
    req: &HttpRequest,
    payload: web::Payload,
    schema: &str,
) -> Result<Submitted> {
    let limits = &state.sessions.config().limits;
    let body::Json { value: b, raw } =
        body::json::<MessageBody>(req, payload, limits.max_body_bytes, schema).await?;
    let input = message_input(state, b, &raw, session_id)?;
    state.sessions.message(actor, session_id, input).await
}

/// `POST …/{sessionId}/messages` and `…/wait`.
pub async fn message<const WAITS: bool>(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let schema = if WAITS {
        SCHEMA_MESSAGE_WAIT
    } else {
        SCHEMA_MESSAGE
    };
    let s = submit_message(&state, &actor, &path.1, &req, payload, schema).await?;
    acknowledge::<WAITS>(&state, &s).await
}

/// An input's answer: the delivery at once, or the `/wait` answer.
async fn acknowledge<const WAITS: bool>(state: &AppState, s: &Submitted) -> Result<HttpResponse> {
    if WAITS {
        wait_response(state, s).await
    } else {
        Ok(delivery_ack(s.delivery))
    }
}

pub async fn note(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let session_id = &path.1;
    let limits = &state.sessions.config().limits;
    let body::Json { value: b, raw } =
        body::json::<NoteBody>(&req, payload, limits.max_body_bytes, SCHEMA_NOTE).await?;
    let fp = body::fingerprint("note", session_id, &raw);
    let common = common(
        b.client_request_id,
        b.images,
        b.attachments,
        b.source_session_id,
        fp,
    )?;
    let seq = state
        .sessions
        .note(&actor, session_id, b.note, common)
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "seq": seq })))
}

async fn submit_answer(
    state: &AppState,
    actor: &Actor,
    session_id: &str,
    req: &HttpRequest,
    payload: web::Payload,
    schema: &str,
) -> Result<Submitted> {
    let limits = &state.sessions.config().limits;
    let body::Json { value: b, raw } =
        body::json::<AnswerBody>(req, payload, limits.max_body_bytes, schema).await?;
    check_length("answer", &b.answer, limits.max_prompt_chars)?;
    let fp = body::fingerprint("answer", session_id, &raw);
    let common = common(
        b.client_request_id,
        b.images,
        b.attachments,
        b.source_session_id,
        fp,
    )?;
    state
        .sessions
        .answer(actor, session_id, b.answer, common)
        .await
}

/// `POST …/{sessionId}/answer` and `…/wait`.
pub async fn answer<const WAITS: bool>(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let schema = if WAITS {
        SCHEMA_ANSWER_WAIT
    } else {
        SCHEMA_ANSWER
    };
    let s = submit_answer(&state, &actor, &path.1, &req, payload, schema).await?;
    acknowledge::<WAITS>(&state, &s).await
}

pub async fn interrupt(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    state.sessions.interrupt(&actor, &path.1).await?;
    Ok(HttpResponse::Ok().json(json!({ "ok": true })))
}

pub async fn set_title(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limit = state.sessions.config().limits.max_body_bytes;
    let b = body::json::<TitleBody>(&req, payload, limit, SCHEMA_TITLE)
        .await?
        .value;
    // Any string of 1 to 120 characters, as the seed's schema says (newlines and tabs included).
    let row = state.sessions.set_title(&actor, &path.1, b.title).await?;
    Ok(json_response(to_json(&view::summary(&row))?))
}

pub async fn archive(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limit = state.sessions.config().limits.max_body_bytes;
    let b = body::json::<ArchiveBody>(&req, payload, limit, SCHEMA_ARCHIVE)
        .await?
        .value;
    let row = state
        .sessions
        .set_archived(&actor, &path.1, b.archived)
        .await?;
    Ok(json_response(to_json(&view::summary(&row))?))
}

pub async fn mark_read(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limit = state.sessions.config().limits.max_body_bytes;
    let b = body::json::<ReadBody>(&req, payload, limit, SCHEMA_READ)
        .await?
        .value;
    let last = state.sessions.mark_read(&actor, &path.1, b.seq).await?;
    Ok(HttpResponse::Ok().json(json!({ "lastReadSeq": last })))
}

pub async fn delete(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    state.sessions.delete(&actor, &path.1).await?;
    Ok(HttpResponse::Ok().json(json!({ "deleted": true })))
}

pub async fn activity(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = Query::parse(&req)?;
    let limit = q.limit("limitPerAgent", 24, 100)?;
    let owners = state.sessions.activity(&actor, limit).await?;
    let owners: Vec<Value> = owners
        .iter()
        .map(|o| {
            let mut v = json!({
                "agentId": o.agent_id,
                "sessions": o.sessions.iter().map(view::summary).collect::<Vec<_>>(),
                "truncated": o.truncated,
            });
            if let Some(chat) = &o.chat {
                v["chat"] = json!(view::summary(chat));
            }
            v
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({ "owners": owners })))
}

pub async fn image(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String, String)>,
) -> Result<HttpResponse> {
    let (_, session_id, storage_id) = path.into_inner();
    let img = state
        .sessions
        .image(&actor, &session_id, &storage_id)
        .await?;
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, img.mime_type))
        .insert_header((
            header::CACHE_CONTROL,
            "private, max-age=31536000, immutable",
        ))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; sandbox",
        ))
        .body(img.data))
}

#[derive(Debug, Deserialize)]
struct CwdBody {
    cwd: String,
}

const SCHEMA_CWD: &str = "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__cwd.request.json";

/// `POST …/{sessionId}/cwd` (R66–R69): `{session:{id, cwd}}` with the canonical cwd.
pub async fn move_cwd(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let limit = state.sessions.config().limits.max_body_bytes;
    let b = body::json::<CwdBody>(&req, payload, limit, SCHEMA_CWD)
        .await?
        .value;
    let cwd = state.sessions.move_cwd(&actor, &path.1, &b.cwd).await?;
    Ok(HttpResponse::Ok().json(json!({ "session": { "id": path.1, "cwd": cwd } })))
}
