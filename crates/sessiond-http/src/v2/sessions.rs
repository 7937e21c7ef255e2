//! `/v2/sessions…`: create, list, read and change Session records, and message a session.

use std::collections::BTreeMap;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::json;

use crate::body::{self, Query};
use crate::context::AppState;
use crate::context::Caller;
use sessiond_core::error::{Error, Result};
use sessiond_core::hast::SLOTS;
use sessiond_core::limits;
use sessiond_core::sessions::lineage::{Parent, ParentKind};
use sessiond_core::sessions::record::{self, BUDGET_MAX_CENTS, RecordPatch};
use sessiond_core::sessions::{
    Actor, CreateIn, InputCommon, ListQuery, MessageIn, RecordIn, Submitted,
};
use sessiond_core::timeline::Behavior;

/// The seed's `harness` values and sessiond's extension values (the README lists both).
pub const HARNESSES: [&str; 6] = [
    "claude_code",
    "codex",
    "scripted",
    "openai",
    "command",
    "acp",
];

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetBody {
    cents: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParentBody {
    kind: String,
    session_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    prompt: String,
    harness: Option<String>,
    metadata: Option<BTreeMap<String, String>>,
    budget: Option<BudgetBody>,
    parent: Option<ParentBody>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchBody {
    budget: Option<BudgetBody>,
    /// Merged into the session's metadata; `null` removes a key.
    metadata: Option<BTreeMap<String, Option<String>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MessageBody {
    prompt: String,
    behavior: Option<Behavior>,
    /// sessiond's busy policy: `enqueue` (the default), `interrupt` or `reject`.
    if_busy: Option<String>,
}

/// A bounded JSON body decoded into `T` (unknown fields refused).
async fn body_of<T: serde::de::DeserializeOwned>(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T> {
    let limit = state.sessions.config().limits.max_body_bytes;
    body::typed(&body::json_value(req, payload, limit).await?)
}

fn check_prompt(state: &AppState, prompt: &str) -> Result<()> {
    let max = state.sessions.config().limits.max_prompt_chars;
    limits::check_prompt("prompt", prompt, max)
}

fn check_budget(b: &BudgetBody) -> Result<u64> {
    if b.cents > BUDGET_MAX_CENTS {
        return Err(Error::invalid(format!(
            "budget/cents: at most {BUDGET_MAX_CENTS}"
        )));
    }
    Ok(b.cents)
}

/// The agent a new session runs with: the one whose engine is `harness` (the drive-root agent
/// first, then by slug), else the parent's, else the workspace's default (the root agent).
async fn agent_for(
    state: &AppState,
    actor: &Actor,
    harness: Option<&str>,
    parent: Option<&sessiond_core::store::SessionRow>,
) -> Result<(Option<String>, Option<String>)> {
    let Some(harness) = harness else {
        return Ok(match parent {
            Some(p) => (Some(p.agent_id.clone()), p.cwd.clone()),
            None => (None, None),
        });
    };
    if !HARNESSES.contains(&harness) {
        return Err(Error::invalid(format!(
            "harness: must be one of {}",
            HARNESSES.join(", ")
        )));
    }
    let agents = sessiond_core::agents::list(state.sessions.store(), &actor.workspace_id).await?;
    let mut fitting: Vec<_> = agents
        .iter()
        .filter(|a| state.sessions.harness_of(&a.engine) == harness)
        .collect();
    fitting.sort_by_key(|a| a.slug != sessiond_core::agents::ROOT_SLUG);
    let agent = fitting.first().ok_or_else(|| {
        Error::invalid(format!(
            "harness: no agent of this workspace runs {harness}"
        ))
    })?;
    // A lineage keeps the parent's working directory when it stays with the parent's agent.
    let cwd = parent
        .filter(|p| p.agent_id == agent.id)
        .and_then(|p| p.cwd.clone());
    Ok((Some(agent.id.clone()), cwd))
}

pub async fn create(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: CreateBody = body_of(&state, &req, payload).await?;
    check_prompt(&state, &b.prompt)?;
    let metadata = b.metadata.unwrap_or_default();
    record::check_metadata("metadata", &metadata)?;
    let budget_cents = b
        .budget
        .as_ref()
        .map(check_budget)
        .transpose()?
        .unwrap_or(0);
    let parent = match b.parent {
        Some(p) => Some(Parent {
            kind: ParentKind::parse(&p.kind).ok_or_else(|| {
                Error::invalid("parent/kind: must be one of continuation, handoff, resume")
            })?,
            session_id: p.session_id,
        }),
        None => None,
    };
    let parent_row = match &parent {
        Some(p) => Some(state.sessions.detail_row(&actor, &p.session_id).await?),
        None => None,
    };
    let (agent_id, cwd) =
        agent_for(&state, &actor, b.harness.as_deref(), parent_row.as_ref()).await?;
    let input = CreateIn {
        prompt: b.prompt,
        agent_id,
        cwd,
        tier: None,
        behavior: Behavior::Steer,
        mode: None,
        common: InputCommon::default(),
    };
    let record = RecordIn {
        metadata,
        budget_cents,
        parent,
    };
    let s = state
        .sessions
        .create_with(&actor, input, None, record)
        .await?;
    let record = state.sessions.record(&actor, &s.key.id).await?;
    Ok(HttpResponse::Created().json(record))
}

pub async fn list(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
) -> Result<HttpResponse> {
    let q = Query::parse(&req)?;
    let limit = q.limit("limit", 20, state.sessions.config().limits.list_page_max)?;
    let cursor = match q.get("cursor") {
        Some("") => return Err(Error::invalid("cursor: must not be empty")),
        other => other.map(str::to_owned),
    };
    let (sessions, next) = state
        .sessions
        .records(
            &actor,
            ListQuery {
                cursor,
                limit,
                include_archived: true,
                ..ListQuery::default()
            },
        )
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "sessions": sessions, "next_cursor": next })))
}

pub async fn get(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
) -> Result<HttpResponse> {
    Ok(HttpResponse::Ok().json(state.sessions.record(&actor, &path).await?))
}

pub async fn patch(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: PatchBody = body_of(&state, &req, payload).await?;
    let budget_cents = b.budget.as_ref().map(check_budget).transpose()?;
    if let Some(m) = &b.metadata {
        let set: Vec<(&String, &String)> = m
            .iter()
            .filter_map(|(k, v)| Some((k, v.as_ref()?)))
            .collect();
        record::check_metadata("metadata", set)?;
        if let Some(k) = m.keys().find(|k| k.is_empty()) {
            return Err(Error::invalid(format!(
                "metadata/{k}: keys must not be empty"
            )));
        }
    }
    let patch = RecordPatch {
        budget_cents,
        metadata: b.metadata,
    };
    let record = state.sessions.patch_record(&actor, &path, patch).await?;
    Ok(HttpResponse::Ok().json(record))
}

/// `POST /v2/sessions/{id}/messages {prompt, behavior?}`: a message, or the answer when the
/// session's last turn asked (`input.requested`).
pub async fn message(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<String>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    let b: MessageBody = body_of(&state, &req, payload).await?;
    check_prompt(&state, &b.prompt)?;
    let busy = sessiond_core::sessions::busy::parse("if_busy", b.if_busy.as_deref())?;
    let row = state.sessions.detail_row(&actor, &path).await?;
    let asking = row.turn_status == sessiond_core::store::TurnStatus::Ask && !row.turn_active;
    let answered = if asking {
        match state
            .sessions
            .answer(&actor, &row.id, b.prompt.clone(), InputCommon::default())
            .await
        {
            Ok(s) => Some(s),
            // The question was answered or overtaken meanwhile: this is a message after all.
            Err(Error::NotAsking) => None,
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    let s: Submitted = match answered {
        Some(s) => s,
        None => {
            let input = MessageIn {
                prompt: b.prompt,
                tier: None,
                behavior: b.behavior.unwrap_or(Behavior::Steer),
                common: InputCommon::default(),
                busy,
            };
            state.sessions.message(&actor, &row.id, input).await?
        }
    };
    Ok(HttpResponse::Ok().json(json!({
        "session_id": s.key.id,
        "delivery": s.delivery.as_str(),
        // The first HAST event of the message: resume a stream with `after` one below it.
        "sequence": s.input_seq * SLOTS,
    })))
}
