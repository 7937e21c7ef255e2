//! The MCP tools: one file per tool with its definition (input and output JSON Schemas) and its
//! call. A tool's result carries its output as `structuredContent` (valid against its output
//! schema) and as JSON text; an error of the call itself (a session not found, a bad argument, a
//! read-only credential asked to write) is a result with `isError`, as MCP says, so a model can
//! read it and try again.

mod answer_question;
mod create_session;
mod get_session;
mod interrupt;
mod list_agents;
mod list_sessions;
mod read_timeline;
mod send_message;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Context;
use super::rpc::RpcError;
use crate::error::{Error, Result};

/// A tool's definition as `tools/list` shows it.
pub struct Tool {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// It writes (needs the `sessions` scope); otherwise `sessions:read` is enough.
    pub writes: bool,
    /// It submits an input and follows the turn it starts.
    pub follows_turn: bool,
    pub input_schema: fn() -> Value,
    pub output_schema: fn() -> Value,
}

/// Every tool, in the order `tools/list` shows them.
pub const TOOLS: [&Tool; 8] = [
    &list_agents::TOOL,
    &list_sessions::TOOL,
    &create_session::TOOL,
    &send_message::TOOL,
    &answer_question::TOOL,
    &interrupt::TOOL,
    &get_session::TOOL,
    &read_timeline::TOOL,
];

/// A session as `get_session` shows it (the resource's body starts from it).
pub async fn session_view(ctx: &Context<'_>, id: &str) -> Result<Value> {
    get_session::view(ctx, id).await
}

fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().copied().find(|t| t.name == name)
}

pub fn follows_turn(name: &str) -> bool {
    find(name).is_some_and(|t| t.follows_turn)
}

/// `tools/list`: the tools the credential may call (a `sessions:read` key sees only reads).
pub fn list(can_write: bool) -> Value {
    let tools: Vec<Value> = TOOLS
        .iter()
        .filter(|t| can_write || !t.writes)
        .map(|t| {
            json!({
                "name": t.name,
                "title": t.title,
                "description": t.description,
                "inputSchema": (t.input_schema)(),
                "outputSchema": (t.output_schema)(),
                "annotations": {
                    "title": t.title,
                    "readOnlyHint": !t.writes,
                    "destructiveHint": false,
                    "idempotentHint": !t.writes,
                    "openWorldHint": false,
                },
            })
        })
        .collect();
    json!({ "tools": tools })
}

/// `tools/call`.
pub async fn call(ctx: &Context<'_>, params: &Value) -> std::result::Result<Value, RpcError> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params("name: the tool to call is missing"))?;
    let tool =
        find(name).ok_or_else(|| RpcError::invalid_params(format!("unknown tool: {name}")))?;
    let args = match params.get("arguments") {
        None | Some(Value::Null) => json!({}),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => return Err(RpcError::invalid_params("arguments: must be an object")),
    };
    if tool.writes && !ctx.caller.can_write {
        return Ok(failed(&Error::Forbidden(format!(
            "{name} writes: this credential has only the sessions:read scope"
        ))));
    }
    let out = match tool.name {
        "list_agents" => list_agents::call(ctx, args).await,
        "list_sessions" => list_sessions::call(ctx, args).await,
        "create_session" => create_session::call(ctx, args).await,
        "send_message" => send_message::call(ctx, args).await,
        "answer_question" => answer_question::call(ctx, args).await,
        "interrupt" => interrupt::call(ctx, args).await,
        "get_session" => get_session::call(ctx, args).await,
        "read_timeline" => read_timeline::call(ctx, args).await,
        _ => Err(Error::Internal(format!("tool {name} has no call"))),
    };
    Ok(match out {
        Ok(structured) => json!({
            "content": [{ "type": "text", "text": structured.to_string() }],
            "structuredContent": structured,
            "isError": false,
        }),
        Err(e) => failed(&e),
    })
}

/// A tool result saying the call failed: sessiond's error code and message.
fn failed(e: &Error) -> Value {
    let message = super::rpc::shown_message(e);
    json!({
        "content": [{ "type": "text", "text": format!("{}: {message}", e.code()) }],
        "isError": true,
    })
}

/// A tool's arguments decoded into `T`, naming the argument that does not fit.
fn args<T: DeserializeOwned>(raw: Value) -> Result<T> {
    serde_path_to_error::deserialize(raw).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            Error::invalid(format!("arguments: {inner}"))
        } else {
            Error::invalid(format!("arguments.{path}: {inner}"))
        }
    })
}

/// Checks a text argument against a limit of the other families (characters).
/// A session id argument: one this server could have issued (others are not found).
fn session_id_schema() -> Value {
    json!({ "type": "string", "description": "The session's id (as create_session or list_sessions return it)." })
}

/// `wait`: whether a tool that starts a turn follows it.
fn wait_schema() -> Value {
    json!({
        "type": "boolean",
        "default": true,
        "description": "Follow the turn until it ends (reporting progress), for at most the server's wait deadline; false returns as soon as the input is recorded.",
    })
}

/// The hash a `clientRequestId` is held to: a retry must repeat the first call exactly.
fn fingerprint(tool: &str, target: &str, args: &Value) -> String {
    use sha2::{Digest, Sha256};
    let mut args = args.clone();
    if let Some(id) = args.get("clientRequestId").and_then(Value::as_str) {
        args["clientRequestId"] = Value::String(id.to_ascii_lowercase());
    }
    // Keys come out sorted (serde_json's map is ordered by key), so key order does not count.
    let mut h = Sha256::new();
    h.update(format!("mcp.{tool}").as_bytes());
    h.update([0]);
    h.update(target.as_bytes());
    h.update([0]);
    h.update(args.to_string().as_bytes());
    crate::secret::hex(&h.finalize())
}

/// A `clientRequestId` as the core keeps it (lowercase), within the other families' bounds.
fn request_id(id: Option<String>) -> Result<Option<String>> {
    match id {
        None => Ok(None),
        Some(id) if id.is_empty() || id.len() > 128 || id.chars().any(char::is_control) => Err(
            Error::invalid("clientRequestId: 1 to 128 characters, no control characters"),
        ),
        Some(id) => Ok(Some(id.to_ascii_lowercase())),
    }
}
