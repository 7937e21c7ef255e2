//! `/agentex`: the agent platform API (seed 003), served so that the official `agentex-client`
//! works unmodified with `base_url=<server>/agentex`.
//!
//! Routes act in the credential's workspace (the `Actor` extractor); reads need `sessions:read`,
//! everything else `sessions`. Errors are sessiond's usual `{"error", "message"}` bodies with their
//! status (`sessiond_core::error`), except inside JSON-RPC, whose errors are JSON-RPC error objects
//! (`rpc`). This file is the route table and the helpers every handler shares: agent lookup by
//! id or name ([`agent_by_id`], [`agent_by_name`]), bounded JSON bodies ([`json_body`]) and the
//! contract's page-numbered list parameters ([`ListParams`]).

pub mod acp;
pub mod agent_keys;
mod agents;
mod checkpoints;
mod deployment_history;
mod deployments;
mod events;
mod forward;
mod messages;
mod rpc;
mod schedules;
mod spans;
mod states;
mod task_query;
mod tasks;
mod tracker;
mod webhook_trigger;

pub use rpc::METHODS as RPC_METHODS;

use actix_web::{HttpRequest, HttpResponse, web};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::at;
use super::body::{self, Query};
use super::context::AppState;
use sessiond_core::agentex;
use sessiond_core::error::{Error, Result};
use sessiond_core::sessions::Actor;
use sessiond_core::store::agentex::{
    AgentKey, AgentexAgentRow, Direction, Page, RecordFilter, SortKey,
};

/// Largest `limit` of a page-numbered list.
pub const PAGE_MAX: u32 = 1000;

pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/agentex")
            .configure(forward::routes)
            .configure(agents::routes)
            .configure(deployments::routes)
            .configure(schedules::routes)
            .configure(tasks::routes)
            .configure(task_query::routes)
            .configure(messages::routes)
            .configure(events::routes)
            .configure(states::routes)
            .configure(spans::routes)
            .configure(tracker::routes)
            .configure(checkpoints::routes)
            .configure(deployment_history::routes)
            .configure(webhook_trigger::routes),
    );
}

/// The agent of a `{agent_id}` path segment, in the actor's workspace (404 otherwise).
pub async fn agent_by_id(state: &AppState, actor: &Actor, id: &str) -> Result<AgentexAgentRow> {
    agentex::agents::find(&state.sessions, actor, AgentKey::Id(id)).await
}

/// The agent of a `{agent_name}` path segment, in the actor's workspace (404 otherwise).
pub async fn agent_by_name(state: &AppState, actor: &Actor, name: &str) -> Result<AgentexAgentRow> {
    agentex::agents::find(&state.sessions, actor, AgentKey::Name(name)).await
}

/// A JSON request body within `limits.max_body_bytes`, decoded into `T` (400 naming the field
/// that does not fit). A body must say it is JSON (415, the rule of every family:
/// [`body::json_bytes`]); an empty body reads as `{}` with or without a type, since the
/// contract's bodies are often optional (the official client sends `application/json` even then).
pub async fn json_body<T: DeserializeOwned>(
    state: &AppState,
    req: &HttpRequest,
    payload: web::Payload,
) -> Result<T> {
    let bytes =
        body::json_bytes(req, payload, state.sessions.config().limits.max_body_bytes).await?;
    let raw: Value = if bytes.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::invalid(format!("body: malformed JSON ({e})")))?
    };
    decode(&raw, "body")
}

/// Decodes a JSON value, naming the path of the first thing that does not fit.
pub fn decode<T: DeserializeOwned>(raw: &Value, what: &str) -> Result<T> {
    agentex::decode_value(raw, what)
}

/// The contract's list parameters: `limit`, `page_number` (from 1), `order_by`, `order_direction`.
pub struct ListParams {
    pub query: Query,
    pub order_by: SortKey,
    pub direction: Direction,
    pub page: Page,
}

impl ListParams {
    /// `orders` are the `order_by` values the list accepts; the first is the default.
    pub fn parse(req: &HttpRequest, orders: &[SortKey]) -> Result<ListParams> {
        let query = Query::parse(req)?;
        let limit = query.limit("limit", 50, PAGE_MAX)?;
        let page_number = match query.get("page_number") {
            None => 1,
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(Error::invalid(
                        "page_number: must be an integer from 1 (the first page)",
                    ));
                }
            },
        };
        let order_by = match query.get("order_by").filter(|v| !v.is_empty()) {
            None => orders[0],
            Some(v) => orders
                .iter()
                .copied()
                .find(|o| o.name() == v)
                .ok_or_else(|| {
                    let names: Vec<&str> = orders.iter().map(|o| o.name()).collect();
                    Error::invalid(format!("order_by: must be one of {}", names.join(", ")))
                })?,
        };
        let direction = match query.get("order_direction").map(str::to_ascii_lowercase) {
            None => Direction::Desc,
            Some(d) if d == "desc" => Direction::Desc,
            Some(d) if d == "asc" => Direction::Asc,
            Some(_) => return Err(Error::invalid("order_direction: must be asc or desc")),
        };
        Ok(ListParams {
            query,
            order_by,
            direction,
            page: Page {
                limit,
                offset: (page_number - 1).saturating_mul(u64::from(limit)),
            },
        })
    }
}

impl ListParams {
    /// The filters of a task's records: `task_id` and `agent_id`.
    pub fn records(&self) -> RecordFilter {
        RecordFilter {
            task_id: self.query.get("task_id").map(str::to_owned),
            agent_id: self.query.get("agent_id").map(str::to_owned),
            order_by: self.order_by,
            direction: self.direction,
            page: self.page,
        }
    }
}

/// A JSON object passed as a query parameter (`task_metadata`, `agent_card_metadata`).
pub fn json_object_param(
    query: &Query,
    name: &str,
) -> Result<Option<serde_json::Map<String, Value>>> {
    let Some(text) = query.get(name).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) if !map.is_empty() => Ok(Some(map)),
        Ok(Value::Object(_)) => Err(Error::invalid(format!(
            "{name}: an empty object filters nothing; omit the parameter"
        ))),
        Ok(_) => Err(Error::invalid(format!("{name}: must be a JSON object"))),
        Err(e) => Err(Error::invalid(format!("{name}: malformed JSON ({e})"))),
    }
}

/// The contract's `DeleteResponse`.
pub fn deleted(id: &str, message: String) -> HttpResponse {
    HttpResponse::Ok().json(json!({ "id": id, "message": message }))
}
