//! A workspace's webhook subscriptions: what a member sends checked (URL against `[policy]`,
//! event types, filters), the signing secret made here, sealed before it is stored and shown
//! once, its rotation with an overlap, and the delivery log with redelivery.

use serde_json::{Value, json};

use super::{destination, signature};
use crate::clock::rfc3339;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::secret::Sealer;
use crate::sessions::Actor;
use crate::store::Store;
use crate::store::outbound::{
    AttemptRow, DeliveryRow, EVENT_KINDS, NewSubscription, SubscriptionChange, SubscriptionRow,
};

/// What the subscriptions' secrets are sealed for (a key of their own, see `AgentKeys::sealer`).
pub const SEALING_PURPOSE: &str = "outbound webhook secrets";

const DESCRIPTION_MAX_CHARS: usize = 512;
/// Longest overlap a rotation may ask for: a week.
const OVERLAP_MAX_MS: i64 = 7 * 24 * 3_600_000;

/// What a member sends to make a subscription (`POST /v1/ws/{ws}/webhooks`).
pub struct NewSubscriptionIn {
    pub url: String,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub agent: Option<String>,
    pub session_id: Option<String>,
}

/// What a member sends to change one (`PATCH`); the filters' inner `None` removes them.
#[derive(Default)]
pub struct ChangeIn {
    pub url: Option<String>,
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    pub agent: Option<Option<String>>,
    pub session_id: Option<Option<String>>,
    pub enabled: Option<bool>,
}

fn event_kinds(given: Vec<String>) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for k in given {
        if !EVENT_KINDS.contains(&k.as_str()) {
            return Err(Error::invalid(format!(
                "eventTypes: unknown event type {k:?} (known: {})",
                EVENT_KINDS.join(", ")
            )));
        }
        if !out.contains(&k) {
            out.push(k);
        }
    }
    Ok(out)
}

fn description(d: String) -> Result<String> {
    if d.chars().count() > DESCRIPTION_MAX_CHARS || d.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "description: at most {DESCRIPTION_MAX_CHARS} characters, no control characters"
        )));
    }
    Ok(d)
}

/// The URL, checked against the policy and, for a name, what it resolves to now (it is checked
/// again at every delivery).
async fn url(raw: &str, cfg: &Config) -> Result<String> {
    let d = destination::check(raw, &cfg.policy, destination::Purpose::Webhook)?;
    if !d.listed {
        destination::resolve(&d).await?;
    }
    Ok(d.url.to_string())
}

async fn agent_id(store: &Store, actor: &Actor, slug: &str) -> Result<String> {
    match crate::agents::get(store, &actor.workspace_id, slug).await {
        Ok(a) => Ok(a.id),
        Err(Error::NotFound | Error::AgentNotFound) => Err(Error::invalid(format!(
            "agent: the workspace has no agent {slug:?}"
        ))),
        Err(e) => Err(e),
    }
}

async fn session_id(store: &Store, actor: &Actor, id: &str) -> Result<String> {
    let missing = || Error::invalid(format!("sessionId: the workspace has no session {id:?}"));
    if !crate::ids::looks_like_id(id) {
        return Err(missing());
    }
    match store
        .outbound()
        .check_session(&actor.workspace_id, id)
        .await
    {
        Ok(()) => Ok(id.to_owned()),
        Err(crate::store::Error::NotFound) => Err(missing()),
        Err(e) => Err(e.into()),
    }
}

/// A subscription as members see it (never its secret).
pub fn view(s: &SubscriptionRow) -> Value {
    let now = crate::clock::now_ms();
    json!({
        "id": s.id,
        "url": s.url,
        "description": s.description,
        "eventTypes": s.event_kinds,
        "agent": s.agent_slug,
        "sessionId": s.session_id,
        "enabled": s.disabled_at.is_none(),
        "disabledAt": s.disabled_at.map(rfc3339),
        "disabledReason": s.disabled_reason,
        "failingSince": s.failing_since.map(rfc3339),
        "previousSecretValidUntil": s.previous_secret_until.filter(|&u| u > now).map(rfc3339),
        "createdAt": rfc3339(s.created_at),
        "updatedAt": rfc3339(s.updated_at),
    })
}

/// Makes a subscription and answers its view with the secret, the only time it is shown.
pub async fn create(
    store: &Store,
    cfg: &Config,
    sealer: &Sealer,
    actor: &Actor,
    input: NewSubscriptionIn,
) -> Result<Value> {
    let url = url(&input.url, cfg).await?;
    let description = description(input.description.unwrap_or_default())?;
    let event_kinds = event_kinds(input.event_types.unwrap_or_default())?;
    let agent_id = match input.agent {
        Some(slug) => Some(agent_id(store, actor, &slug).await?),
        None => None,
    };
    let session_id = match input.session_id {
        Some(id) => Some(session_id(store, actor, &id).await?),
        None => None,
    };
    let id = format!("wh_{}", crate::ids::new_id().replace('-', ""));
    let secret = signature::new_secret()?;
    let secret_sealed = sealer.seal(secret.as_bytes(), &id)?;
    store
        .outbound()
        .create(
            NewSubscription {
                id: id.clone(),
                workspace_id: actor.workspace_id.clone(),
                url,
                description,
                event_kinds,
                agent_id,
                session_id,
                secret_sealed,
                created_by: actor.user_id.clone(),
            },
            cfg.webhooks.max_per_workspace,
        )
        .await?;
    let row = store.outbound().get(&actor.workspace_id, &id).await?;
    let mut v = view(&row);
    v["secret"] = json!(secret);
    Ok(v)
}

/// A subscription id as sessiond makes them, else 404 without a read.
fn known(id: &str) -> Result<()> {
    let ok = id.len() <= 64
        && id
            .strip_prefix("wh_")
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit()));
    if ok { Ok(()) } else { Err(Error::NotFound) }
}

pub async fn list(store: &Store, actor: &Actor) -> Result<Value> {
    let rows = store.outbound().list(&actor.workspace_id).await?;
    Ok(json!({ "webhooks": rows.iter().map(view).collect::<Vec<_>>() }))
}

pub async fn get(store: &Store, actor: &Actor, id: &str) -> Result<Value> {
    known(id)?;
    Ok(view(&store.outbound().get(&actor.workspace_id, id).await?))
}

pub async fn change(
    store: &Store,
    cfg: &Config,
    actor: &Actor,
    id: &str,
    c: ChangeIn,
) -> Result<Value> {
    known(id)?;
    store.outbound().get(&actor.workspace_id, id).await?;
    let mut change = SubscriptionChange {
        enabled: c.enabled,
        ..SubscriptionChange::default()
    };
    if let Some(u) = c.url {
        change.url = Some(url(&u, cfg).await?);
    }
    if let Some(d) = c.description {
        change.description = Some(description(d)?);
    }
    if let Some(k) = c.event_types {
        change.event_kinds = Some(event_kinds(k)?);
    }
    change.agent_id = match c.agent {
        Some(Some(slug)) => Some(Some(agent_id(store, actor, &slug).await?)),
        Some(None) => Some(None),
        None => None,
    };
    change.session_id = match c.session_id {
        Some(Some(sid)) => Some(Some(session_id(store, actor, &sid).await?)),
        Some(None) => Some(None),
        None => None,
    };
    let row = store
        .outbound()
        .update(&actor.workspace_id, id, change)
        .await?;
    Ok(view(&row))
}

pub async fn delete(store: &Store, actor: &Actor, id: &str) -> Result<()> {
    known(id)?;
    Ok(store.outbound().delete(&actor.workspace_id, id).await?)
}

/// A new secret, shown this once; the one it replaces keeps signing (beside the new one) for
/// `overlap_ms` (default `webhooks.rotation_overlap_ms`), so receivers can switch without
/// missing a delivery.
pub async fn rotate(
    store: &Store,
    cfg: &Config,
    sealer: &Sealer,
    actor: &Actor,
    id: &str,
    overlap_ms: Option<i64>,
) -> Result<Value> {
    known(id)?;
    let overlap = overlap_ms.unwrap_or(cfg.webhooks.rotation_overlap_ms as i64);
    if !(0..=OVERLAP_MAX_MS).contains(&overlap) {
        return Err(Error::invalid(format!(
            "overlapMs: between 0 and {OVERLAP_MAX_MS} (a week)"
        )));
    }
    let row = store.outbound().get(&actor.workspace_id, id).await?;
    let secret = signature::new_secret()?;
    let sealed = sealer.seal(secret.as_bytes(), id)?;
    let until = crate::clock::now_ms() + overlap;
    let previous = (overlap > 0).then_some(row.secret_sealed);
    store
        .outbound()
        .rotate(&actor.workspace_id, id, sealed, previous, until)
        .await?;
    let row = store.outbound().get(&actor.workspace_id, id).await?;
    let mut v = view(&row);
    v["secret"] = json!(secret);
    Ok(v)
}

fn delivery_view(d: &DeliveryRow) -> Value {
    json!({
        "id": d.id,
        "eventType": d.event_type,
        "state": d.state,
        "attempts": d.attempts,
        "nextAttemptAt": (d.state == "pending").then(|| rfc3339(d.next_attempt_at)),
        "lastStatus": d.last_status,
        "lastError": d.last_error,
        "lastLatencyMs": d.last_latency_ms,
        "lastAttemptAt": d.last_attempt_at.map(rfc3339),
        "deliveredAt": d.delivered_at.map(rfc3339),
        "createdAt": rfc3339(d.created_at),
    })
}

fn attempt_view(a: &AttemptRow) -> Value {
    json!({
        "attempt": a.attempt,
        "startedAt": rfc3339(a.started_at),
        "status": a.status,
        "latencyMs": a.latency_ms,
        "error": a.error,
    })
}

/// A subscription's delivery log, newest first, a page of `limit` before `before`.
pub async fn deliveries(
    store: &Store,
    actor: &Actor,
    id: &str,
    before: Option<String>,
    limit: u32,
) -> Result<Value> {
    known(id)?;
    let rows = store
        .outbound()
        .deliveries(&actor.workspace_id, id, before, limit)
        .await?;
    let next = (rows.len() as u32 == limit)
        .then(|| rows.last().map(|d| d.id.clone()))
        .flatten();
    Ok(json!({
        "deliveries": rows.iter().map(delivery_view).collect::<Vec<_>>(),
        "nextBefore": next,
    }))
}

/// One message with its payload and every attempt.
pub async fn delivery(store: &Store, actor: &Actor, id: &str, delivery_id: &str) -> Result<Value> {
    known(id)?;
    let (d, attempts) = store
        .outbound()
        .delivery(&actor.workspace_id, id, delivery_id)
        .await?;
    let mut v = delivery_view(&d);
    v["payload"] = serde_json::from_str(&d.payload).unwrap_or(Value::Null);
    v["attemptLog"] = json!(attempts.iter().map(attempt_view).collect::<Vec<_>>());
    Ok(v)
}

/// Queues a message again now, with its `webhook-id` unchanged (receivers deduplicate by it).
pub async fn redeliver(store: &Store, actor: &Actor, id: &str, delivery_id: &str) -> Result<Value> {
    known(id)?;
    store
        .outbound()
        .redeliver(&actor.workspace_id, id, delivery_id)
        .await?;
    delivery(store, actor, id, delivery_id).await
}
