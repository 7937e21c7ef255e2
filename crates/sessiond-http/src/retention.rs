//! Retention over HTTP: a workspace's policy (`GET/PUT /v1/ws/{slug}/retention`, set by owners),
//! what it would remove now (`GET /v1/ws/{slug}/retention/preview`, the dry run) and a session's
//! pin (`GET/PUT …/agent/sessions/{id}/pin`), which keeps it from every policy.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;
use serde_json::{Value, json};

use super::archives::require_owner;
use super::body;
use super::context::AppState;
use crate::context::Caller;
use sessiond_core::error::{Error, Result};
use sessiond_core::store::retention::{RetentionAction, RetentionPolicy};

const DAY_MS: f64 = 86_400_000.0;
/// The longest idle time a policy may name (100 years).
const MAX_IDLE_DAYS: f64 = 36_500.0;
const MAX_KEEP_LATEST: i64 = 1_000_000;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyBody {
    #[serde(default)]
    idle_days: Option<f64>,
    #[serde(default)]
    keep_latest: Option<i64>,
    #[serde(default)]
    action: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PinBody {
    pinned: bool,
}

fn policy_json(p: Option<&RetentionPolicy>) -> Value {
    match p {
        None => json!({"enabled": false, "idleDays": null, "keepLatest": null, "action": "delete"}),
        Some(p) => json!({
            "enabled": true,
            "idleDays": p.idle_ms.map(|ms| ms as f64 / DAY_MS),
            "keepLatest": p.keep_latest,
            "action": p.action.name(),
        }),
    }
}

/// A policy body checked: `None` when both rules are off (the policy is removed).
fn parse_policy(raw: &Value) -> Result<Option<RetentionPolicy>> {
    if !raw.is_object() {
        return Err(Error::invalid("body: must be a JSON object"));
    }
    let b: PolicyBody = body::typed(raw)?;
    let idle_ms = match b.idle_days {
        None => None,
        Some(d) if d.is_finite() && d > 0.0 && d <= MAX_IDLE_DAYS => {
            Some(((d * DAY_MS).round() as i64).max(1))
        }
        Some(_) => {
            return Err(Error::invalid(format!(
                "idleDays: must be a number of days above 0 and at most {MAX_IDLE_DAYS}"
            )));
        }
    };
    let keep_latest = match b.keep_latest {
        None => None,
        Some(k) if (1..=MAX_KEEP_LATEST).contains(&k) => Some(k),
        Some(_) => {
            return Err(Error::invalid(format!(
                "keepLatest: must be an integer from 1 to {MAX_KEEP_LATEST}"
            )));
        }
    };
    let action = match b.action.as_deref() {
        None => RetentionAction::Delete,
        Some(a) => RetentionAction::parse(a)
            .ok_or_else(|| Error::invalid("action: must be delete or archive"))?,
    };
    Ok(
        (idle_ms.is_some() || keep_latest.is_some()).then_some(RetentionPolicy {
            idle_ms,
            keep_latest,
            action,
        }),
    )
}

/// `GET /v1/ws/{workspaceSlug}/retention`: the workspace's policy.
pub async fn get_policy(state: web::Data<AppState>, Caller(actor): Caller) -> Result<HttpResponse> {
    let p = state
        .sessions
        .store()
        .retention()
        .policy(&actor.workspace_id)
        .await?;
    Ok(HttpResponse::Ok().json(policy_json(p.as_ref())))
}

/// `PUT /v1/ws/{workspaceSlug}/retention`: sets (or, with both rules null, removes) the policy.
pub async fn put_policy(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    require_owner(&state, &actor, "setting the retention policy").await?;
    let limit = state.sessions.config().limits.max_body_bytes;
    let raw = body::json_value(&req, payload, limit).await?;
    let p = parse_policy(&raw)?;
    state
        .sessions
        .store()
        .retention()
        .set_policy(&actor.workspace_id, p.clone())
        .await?;
    Ok(HttpResponse::Ok().json(policy_json(p.as_ref())))
}

/// `GET /v1/ws/{workspaceSlug}/retention/preview`: the sessions the policy removes now (a dry
/// run: nothing is removed).
pub async fn preview(state: web::Data<AppState>, Caller(actor): Caller) -> Result<HttpResponse> {
    let store = state.sessions.store();
    let p = store.retention().policy(&actor.workspace_id).await?;
    let sessions = match &p {
        None => Vec::new(),
        Some(p) => {
            sessiond_core::retention::preview(
                store,
                &actor.workspace_id,
                p,
                sessiond_core::retention::PREVIEW_MAX,
            )
            .await?
        }
    };
    let sessions: Vec<Value> = sessions
        .iter()
        .map(|c| {
            json!({"id": c.id, "agent": c.agent_slug, "title": c.title, "updatedAt": c.updated_at})
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({"policy": policy_json(p.as_ref()), "sessions": sessions})))
}

/// `GET …/agent/sessions/{sessionId}/pin`: whether the session is pinned.
pub async fn get_pin(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
) -> Result<HttpResponse> {
    if !sessiond_core::ids::looks_like_id(&path.1) {
        return Err(Error::NotFound);
    }
    let pinned = state
        .sessions
        .store()
        .retention()
        .pinned(&actor.workspace_id, &path.1)
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "pinned": pinned })))
}

/// `PUT …/agent/sessions/{sessionId}/pin` `{pinned}`: pins (or unpins) the session; a pinned
/// session is never removed by a retention policy.
pub async fn put_pin(
    state: web::Data<AppState>,
    Caller(actor): Caller,
    path: web::Path<(String, String)>,
    req: HttpRequest,
    payload: web::Payload,
) -> Result<HttpResponse> {
    if !sessiond_core::ids::looks_like_id(&path.1) {
        return Err(Error::NotFound);
    }
    let limit = state.sessions.config().limits.max_body_bytes;
    let raw = body::json_value(&req, payload, limit).await?;
    let b: PinBody = body::typed(&raw)?;
    state
        .sessions
        .store()
        .retention()
        .set_pinned(&actor.workspace_id, &path.1, b.pinned)
        .await?;
    Ok(HttpResponse::Ok().json(json!({ "pinned": b.pinned })))
}
