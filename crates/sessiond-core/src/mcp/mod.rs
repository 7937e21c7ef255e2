//! The MCP server: sessiond's sessions as MCP tools and resources (`/mcp`, Streamable HTTP; the
//! transport is `api/mcp/`). Every tool and resource is a call of the sessions core, the same
//! calls the `/v1` routes make, acting as the request's credential with the channel
//! [`Channel::Protocol`] (provenance `source: "mcp"`): a session started here is the same session on
//! every other API family and in the UI.
//!
//! `initialize` negotiates one of [`PROTOCOL_VERSIONS`] and opens an MCP session
//! ([`registry`]); `tools/list` and `tools/call` are [`tools`]; `resources/*` are [`resources`];
//! a tool that submits an input follows its turn ([`turn`]) with progress notifications, for at
//! most the `/wait` routes' deadline.

pub mod registry;
mod resources;
pub mod rpc;
mod tools;
mod turn;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

pub use registry::{McpSession, Registry, StreamLog};
use rpc::{METHOD_NOT_FOUND, RpcError};

use crate::sessions::{Actor, Channel, Sessions};

/// The protocol revisions `initialize` agrees to, newest first: the one the official `mcp`
/// Python SDK 2.3.0 offers (`2025-11-25`) and the two before it whose Streamable HTTP transport
/// is the same. An offer of another version is answered with the newest.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The `source` of a session started over MCP (an extension of the seed's values).
pub const SOURCE: &str = "mcp";

/// The caller of a request: who acts (on [`Channel::Protocol`]) and whether the credential may write
/// (`sessions`), or only read (`sessions:read`: the tools that write are refused).
#[derive(Debug, Clone)]
pub struct Caller {
    pub actor: Actor,
    pub can_write: bool,
}

impl Caller {
    /// `actor` as authorized by its credential, acting through MCP.
    pub fn new(mut actor: Actor, can_write: bool) -> Caller {
        let via = std::mem::replace(&mut actor.channel, Channel::Cli);
        actor.channel = via.through(SOURCE);
        Caller { actor, can_write }
    }

    /// Who may use an MCP session: the workspace and the credential (key or person) that
    /// opened it.
    pub fn owner(&self) -> String {
        let credential = match self.actor.channel.credential() {
            Channel::ApiKey { key_id } => format!("key:{key_id}"),
            _ => format!("user:{}", self.actor.user_id),
        };
        format!("{}/{credential}", self.actor.workspace_id)
    }
}

/// What one request runs with.
pub struct Context<'a> {
    pub sessions: &'a Sessions,
    pub caller: &'a Caller,
    pub session: &'a Arc<McpSession>,
    /// Where `notifications/progress` go, when the request asked for them and its answer is a
    /// stream.
    pub progress: Option<Progress>,
}

/// A request's `progressToken` and the stream its notifications are written to.
pub struct Progress {
    token: Value,
    out: Arc<StreamLog>,
    count: AtomicU64,
}

impl Progress {
    pub fn new(token: Value, out: Arc<StreamLog>) -> Progress {
        Progress {
            token,
            out,
            count: AtomicU64::new(0),
        }
    }

    /// One more step of the request (the count only rises, as the protocol requires).
    pub fn step(&self, message: &str) {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let note = rpc::notification(
            "notifications/progress",
            json!({ "progressToken": self.token, "progress": n, "message": message }),
        );
        self.out.push(note.to_string());
    }
}

/// The `progressToken` of a request's `_meta`, if it has a usable one.
pub fn progress_token(params: &Value) -> Option<Value> {
    match params.pointer("/_meta/progressToken") {
        Some(t @ (Value::String(_) | Value::Number(_))) => Some(t.clone()),
        _ => None,
    }
}

/// `initialize`: the version agreed on and the result.
pub fn initialize(params: &Value) -> (&'static str, Value) {
    let offered = params.get("protocolVersion").and_then(Value::as_str);
    let version = PROTOCOL_VERSIONS
        .iter()
        .find(|v| Some(**v) == offered)
        .copied()
        .unwrap_or(PROTOCOL_VERSIONS[0]);
    let result = json!({
        "protocolVersion": version,
        "capabilities": {
            "tools": { "listChanged": false },
            "resources": { "subscribe": true, "listChanged": false },
        },
        "serverInfo": {
            "name": "sessiond",
            "title": "sessiond",
            "version": env!("CARGO_PKG_VERSION"),
        },
        "instructions": concat!(
            "Durable agent sessions. Start one with create_session, continue it with ",
            "send_message or answer_question, stop a turn with interrupt, and read it with ",
            "get_session, read_timeline or the resource sessiond://sessions/{id}. A tool that ",
            "starts a turn waits for its end for at most the server's wait deadline, then ",
            "returns the session's state (`running`): follow it by reading the session.",
        ),
    });
    (version, result)
}

/// Answers one request of an initialized MCP session.
pub async fn request(ctx: &Context<'_>, method: &str, params: &Value) -> Result<Value, RpcError> {
    match method {
        "ping" => Ok(json!({})),
        "tools/list" => Ok(tools::list(ctx.caller.can_write)),
        "tools/call" => tools::call(ctx, params).await,
        "resources/list" => resources::list(ctx, params).await,
        "resources/templates/list" => Ok(resources::templates()),
        "resources/read" => resources::read(ctx, params).await,
        "resources/subscribe" => resources::subscribe(ctx, params).await,
        "resources/unsubscribe" => resources::unsubscribe(ctx, params),
        other => Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("method not found: {other}"),
        )),
    }
}

/// Whether a request's answer may take a while (a tool that follows a turn, unless told not to
/// wait): it is then sent as an SSE stream that carries progress and can be resumed.
pub fn is_long(method: &str, params: &Value) -> bool {
    method == "tools/call"
        && params
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(tools::follows_turn)
        && params.pointer("/arguments/wait") != Some(&Value::Bool(false))
}
