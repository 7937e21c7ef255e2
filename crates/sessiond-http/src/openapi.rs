//! `GET /openapi.json`: an OpenAPI 3.1 document of every route the server answers.
//!
//! Each API family contributes one table of operations ([`Op`]) and its component schemas, here,
//! beside the others; the document is built from the tables at start-up. The Sessions API's
//! request, query and response schemas are the seed's own files (`schemas/sessions/`), found by the
//! seed's file-name rule; sessiond's own routes (agents, sign-in, uploads, health) describe their
//! bodies inline. A test walks the router and fails for any registered route or method the
//! document lacks (and for any documented one that is not registered), so the two cannot drift:
//! a family that adds a route adds its row here.

use std::sync::LazyLock;

use actix_web::HttpResponse;
use rust_embed::RustEmbed;
use serde_json::{Map, Value, json};

use super::schema::SessionSchemas;

/// The agent platform API's response schemas, transcribed from seed 003 (`schemas/agentex/`).
#[derive(RustEmbed)]
#[folder = "../../schemas/agentex/"]
struct AgentexSchemas;

/// Who may call an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// No credential.
    Public,
    /// An API key or the browser session cookie with this scope (`sessions`, `sessions:read`,
    /// `files:write`); the cookie's unsafe requests must come from this server's origin.
    Scope(&'static str),
    /// The browser session cookie (or a key, for `/auth/me`).
    Signed,
    /// An upload grant's token, and nothing else.
    UploadToken,
    /// No credential: the request's GitHub or Slack signature, checked against the webhook
    /// triggers of its URL.
    WebhookSignature,
}

/// What a successful answer carries.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    /// The seed's `<stem>.response.json` (200, and 202 for the `/wait` routes).
    Seed,
    /// JSON described by an inline schema (sessiond's own routes), with this status.
    Json(u16, fn() -> Value),
    /// `text/event-stream` of the Sessions API.
    Events,
    /// `text/event-stream` of HAST Event v2 envelopes.
    HastEvents,
    /// `text/event-stream` of an AgentEx task's updates.
    TaskUpdates,
    /// The stored image's own type.
    Image,
    /// A portable archive (`application/x-tar`), streamed.
    Tar,
    /// A drive file's bytes, streamed.
    File,
    /// A JSON-RPC response (this schema), as one line of JSON, or NDJSON lines when streamed.
    Rpc(fn() -> Value),
    /// A2A's JSON-RPC response (this schema), or for its streaming methods an SSE stream of
    /// them.
    A2aRpc(fn() -> Value),
    /// No body, with this status (204).
    Empty(u16),
    /// MCP's Streamable HTTP: a JSON-RPC message as JSON or as SSE, 202 for a notification, and
    /// JSON-RPC error objects for the transport's refusals.
    Mcp,
    /// 501: an operation of a wire contract that sessiond does not carry out. Tagged
    /// `not-implemented`, so that a fuzzer can leave these out.
    NotImplemented,
}

/// One operation: a method on a path.
#[derive(Debug, Clone, Copy)]
pub struct Op {
    pub method: &'static str,
    pub path: &'static str,
    pub id: &'static str,
    pub summary: &'static str,
    pub access: Access,
    /// The request body: the seed's `<stem>.request.json` (`Seed`), an inline schema, or none.
    pub body: Body,
    pub answer: Answer,
}

#[derive(Debug, Clone, Copy)]
pub enum Body {
    None,
    Seed,
    Json(fn() -> Value),
    /// Raw bytes of any type (uploads, archives).
    Bytes,
}

const WS: &str = "/v1/ws/{workspaceSlug}";

macro_rules! op {
    ($method:literal $path:expr, $id:literal, $summary:literal, $access:expr, $body:expr, $answer:expr) => {
        Op {
            method: $method,
            path: $path,
            id: $id,
            summary: $summary,
            access: $access,
            body: $body,
            answer: $answer,
        }
    };
}

const READ: Access = Access::Scope("sessions:read");
const WRITE: Access = Access::Scope("sessions");

/// The Sessions API (seed 000): every operation, its schemas from `schemas/sessions/`.
pub static SESSIONS: LazyLock<Vec<Op>> = LazyLock::new(|| {
    let p = |rest: &str| -> &'static str { format!("{WS}/agent/sessions{rest}").leak() };
    let a = |rest: &str| -> &'static str { format!("{WS}/agents/{{agentSlug}}{rest}").leak() };
    use Answer::Seed as S;
    vec![
        op!("get" p(""), "listSessions", "List sessions (bucket, search, archived, agent, state, keyset cursor)", READ, Body::None, S),
        op!("post" p(""), "createSession", "Create a session with its first prompt", WRITE, Body::Seed, S),
        op!("get" p("/activity"), "activity", "Every agent's prioritised recent sessions and default chat", READ, Body::None, S),
        op!("post" p("/wait"), "createSessionAndWait", "Create a session and wait for its first terminal", WRITE, Body::Seed, S),
        op!("post" p("/attachments/session"), "mintUploadGrant", "Mint an upload grant for a folder of the drive", Access::Scope("files:write"), Body::Seed, S),
        op!("get" p("/{sessionId}"), "getSession", "The session's snapshot", READ, Body::None, S),
        op!("patch" p("/{sessionId}"), "setTitle", "Set a manual title", WRITE, Body::Seed, S),
        op!("delete" p("/{sessionId}"), "deleteSession", "Stop and delete a session", WRITE, Body::None, S),
        op!("get" p("/{sessionId}/history"), "history", "A page of the timeline (cursor forward, before backward)", READ, Body::None, S),
        op!("get" p("/{sessionId}/events"), "events", "The timeline as Server-Sent Events (resume with Last-Event-ID or since)", READ, Body::None, Answer::Events),
        op!("get" p("/{sessionId}/images/{storageId}"), "image", "A stored inline image", READ, Body::None, Answer::Image),
        op!("post" p("/{sessionId}/messages"), "sendMessage", "A steer or follow-up message", WRITE, Body::Seed, S),
        op!("post" p("/{sessionId}/messages/wait"), "sendMessageAndWait", "A message, waiting for its terminal", WRITE, Body::Seed, S),
        op!("post" p("/{sessionId}/note"), "addNote", "Context that starts no turn", WRITE, Body::Seed, S),
        op!("post" p("/{sessionId}/answer"), "answer", "Answer the session's question", WRITE, Body::Seed, S),
        op!("post" p("/{sessionId}/answer/wait"), "answerAndWait", "Answer, waiting for the next terminal", WRITE, Body::Seed, S),
        op!("post" p("/{sessionId}/interrupt"), "interrupt", "Stop the running turn", WRITE, Body::None, S),
        op!("post" p("/{sessionId}/fork"), "forkSession", "A new session whose conversation is this one's up to event atSeq (an extension)", WRITE,
            Body::Json(|| fork_body("atSeq")),
            Answer::Json(201, || json!({"type": "object", "required": ["session", "snapshot", "history", "forkedFrom"], "properties": {
                "session": {"type": "object"}, "snapshot": {"type": "object"}, "history": {"type": "object"},
                "forkedFrom": {"type": "object", "required": ["sessionId", "atSeq"], "properties": {
                    "sessionId": {"type": "string"}, "atSeq": {"type": "integer", "minimum": 1}}},
                "inputSeq": {"type": "integer", "description": "The seq of the first message, when one was given"},
                "delivery": {"enum": ["accepted", "queued"]}}}))),
        op!("put" p("/{sessionId}/archive"), "archive", "Archive or restore", WRITE, Body::Seed, S),
        op!("put" p("/{sessionId}/read"), "markRead", "Move the read marker", WRITE, Body::Seed, S),
        op!("post" p("/{sessionId}/sessions"), "createChild", "A child session (inherits cwd and tier)", WRITE, Body::Seed, S),
        op!("post" p("/{sessionId}/sessions/wait"), "createChildAndWait", "A child session, waiting for its terminal", WRITE, Body::Seed, S),
        op!("post" p("/{sessionId}/cwd"), "moveCwd", "Move the working directory (from the next turn)", WRITE, Body::Seed, S),
        op!("get" a("/sessions/default"), "getDefaultSession", "The agent's default session", READ, Body::None, S),
        op!("put" a("/sessions/default"), "setDefaultSession", "Point the agent's default alias at a session", WRITE, Body::Seed, S),
        op!("get" a("/sessions/default/history"), "defaultSessionHistory", "History of the agent's default session", READ, Body::None, S),
        op!("post" a("/sessions/default/messages"), "messageDefaultSession", "A message to the agent's default session (created on first use)", WRITE, Body::Seed, S),
        op!("post" a("/sessions/default/messages/wait"), "messageDefaultSessionAndWait", "A message to the default session, waiting for its terminal", WRITE, Body::Seed, S),
    ]
});

fn agent_schema() -> Value {
    json!({
        "type": "object",
        "required": ["id", "slug", "name", "anchor", "engine", "createdAt"],
        "properties": {
            "id": {"type": "string"}, "slug": {"type": "string"}, "name": {"type": "string"},
            "anchor": {"type": "string"}, "engine": {"type": "object"}, "createdAt": {"type": "number"}
        }
    })
}

fn agent_spec_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "slug": {"type": "string"}, "name": {"type": "string"}, "anchor": {"type": "string"},
            "engine": {"type": "object"}
        }
    })
}

/// Agents (sessiond's extension of the Sessions API).
pub static AGENTS: LazyLock<Vec<Op>> = LazyLock::new(|| {
    let p = |rest: &str| -> &'static str { format!("{WS}/agents{rest}").leak() };
    vec![
        op!("get" p(""), "listAgents", "The workspace's agents", READ, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["agents"], "properties": {"agents": {"type": "array", "items": agent_schema()}}}))),
        op!("post" p(""), "createAgent", "Create an agent (slug, name, anchor, engine)", WRITE, Body::Json(agent_spec_schema), Answer::Json(201, agent_schema)),
        op!("get" p("/{agentSlug}"), "getAgent", "One agent", READ, Body::None, Answer::Json(200, agent_schema)),
        op!("patch" p("/{agentSlug}"), "updateAgent", "Change an agent's name, anchor or engine", WRITE, Body::Json(agent_spec_schema), Answer::Json(200, agent_schema)),
        op!("delete" p("/{agentSlug}"), "deleteAgent", "Delete an agent that owns no sessions", WRITE, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["deleted"], "properties": {"deleted": {"const": true}}}))),
        op!("get" p("/{agentSlug}/contact"), "getAgentContact", "The agent's ACP server (acpUrl, null unless its engine is acp) and how sessiond's last calls to it went: lastContactAt (it answered), lastError and lastErrorAt (the last call that failed); epoch ms, null where there was none", READ, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["acpUrl", "lastContactAt", "lastError", "lastErrorAt"], "properties": {
                "acpUrl": {"type": ["string", "null"]}, "lastContactAt": {"type": ["number", "null"]},
                "lastError": {"type": ["string", "null"]}, "lastErrorAt": {"type": ["number", "null"]}}}))),
    ]
});

fn key_schema() -> Value {
    json!({
        "type": "object",
        "required": ["id", "name", "kind", "workspaceSlug", "scopes", "createdAt", "revoked"],
        "properties": {
            "id": {"type": "string"}, "name": {"type": "string"},
            "kind": {"enum": ["user", "app"]},
            "userId": {"type": ["string", "null"]}, "appId": {"type": ["string", "null"]},
            "workspaceSlug": {"type": "string"},
            "scopes": {"type": "array", "items": {"type": "string"}},
            "createdAt": {"type": "string"}, "lastUsedAt": {"type": ["string", "null"]},
            "expiresAt": {"type": ["string", "null"], "description": "When the key stops working by itself; null: never"},
            "expired": {"type": "boolean"},
            "revoked": {"type": "boolean"},
            "key": {"type": "string", "description": "The secret: in the create answer only"}
        }
    })
}

fn new_key_schema() -> Value {
    json!({"type": "object", "required": ["name", "scopes"], "additionalProperties": false, "properties": {
        "name": {"type": "string"},
        "scopes": {"type": "array", "items": {"enum": sessiond_core::auth::SCOPES}},
        "expiresAt": {"type": ["string", "null"], "format": "date-time", "description": "In the future; absent or null: the key never expires"}
    }})
}

fn person_schema() -> Value {
    json!({"type": "object", "required": ["userId", "email", "role"], "properties": {"userId": {"type": "string"}, "email": {"type": "string"}, "role": {"enum": ["owner", "member"]}, "created": {"type": "boolean"}}})
}

fn workspace_schema() -> Value {
    json!({"type": "object", "required": ["slug", "name", "role"], "properties": {"slug": {"type": "string"}, "name": {"type": "string"}, "createdAt": {"type": "string"}, "role": {"enum": ["owner", "member", "app"]}}})
}

/// A workspace's API keys, app keys, people and settings, managed by its owners (members: 403).
pub static KEYS: LazyLock<Vec<Op>> = LazyLock::new(|| {
    let p = |rest: &str| -> &'static str { format!("{WS}/keys{rest}").leak() };
    vec![
        op!("get" p(""), "listKeys", "The workspace's API keys with their last use (owners only; never a secret)", READ, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["keys"], "properties": {"keys": {"type": "array", "items": key_schema()}}}))),
        op!("post" p(""), "createKey", "Create a personal API key (owners only); the secret is in this answer only", WRITE,
            Body::Json(new_key_schema),
            Answer::Json(201, key_schema)),
        op!("post" format!("{WS}/apps").leak(), "createApp", "Register an app with its first key (owners only); the secret is in this answer only", WRITE,
            Body::Json(new_key_schema),
            Answer::Json(201, key_schema)),
        op!("delete" p("/{keyId}"), "revokeKey", "Revoke a key at once, for new requests and open streams (owners only)", WRITE, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["revoked"], "properties": {"revoked": {"const": true}}}))),
        op!("get" format!("{WS}/people").leak(), "listPeople", "The workspace's people and their roles (owners only)", READ, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["people"], "properties": {"people": {"type": "array", "items": person_schema()}}}))),
        op!("post" format!("{WS}/people").leak(), "addPerson", "Add a person with a role (owners only); a new address gets an account without a password", WRITE,
            Body::Json(|| json!({"type": "object", "required": ["email", "role"], "additionalProperties": false, "properties": {"email": {"type": "string"}, "role": {"enum": ["owner", "member"]}}})),
            Answer::Json(201, person_schema)),
        op!("patch" format!("{WS}/people/{{userId}}").leak(), "setPersonRole", "Change a person's role (owners only; the last owner stays: 409 last_owner)", WRITE,
            Body::Json(|| json!({"type": "object", "required": ["role"], "additionalProperties": false, "properties": {"role": {"enum": ["owner", "member"]}}})),
            Answer::Json(200, || json!({"type": "object", "required": ["userId", "role"], "properties": {"userId": {"type": "string"}, "role": {"enum": ["owner", "member"]}}}))),
        op!("delete" format!("{WS}/people/{{userId}}").leak(), "removePerson", "Remove a person and revoke their keys of the workspace (owners only)", WRITE, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["removed"], "properties": {"removed": {"const": true}}}))),
        op!("post" format!("{WS}/people/{{userId}}/password-reset").leak(), "createPasswordReset", "A one-time link for the person to choose a new password, valid 24 hours (owners only)", WRITE, Body::None,
            Answer::Json(201, || json!({"type": "object", "required": ["url", "expiresAt"], "properties": {"url": {"type": "string"}, "expiresAt": {"type": "string"}}}))),
        op!("get" format!("{WS}/usage").leak(), "usageByAgent", "What each agent spent between from and to (RFC 3339; to defaults to now; at most 366 days)", READ, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["from", "to", "agents"], "properties": {
                "from": {"type": "string"}, "to": {"type": "string"},
                "agents": {"type": "array", "items": {"type": "object", "required": ["agentId", "agentSlug", "name", "cents", "tokensIn", "tokensOut", "turns"], "properties": {
                    "agentId": {"type": "string"}, "agentSlug": {"type": "string"}, "name": {"type": "string"},
                    "cents": {"type": "number"}, "tokensIn": {"type": "number"}, "tokensOut": {"type": "number"}, "turns": {"type": "integer"}}}}}}))),
        op!("get" WS, "getWorkspace", "The workspace's name, and the caller's role in it", READ, Body::None, Answer::Json(200, workspace_schema)),
        op!("patch" WS, "renameWorkspace", "Rename the workspace (owners only; the slug stays)", WRITE,
            Body::Json(|| json!({"type": "object", "required": ["name"], "additionalProperties": false, "properties": {"name": {"type": "string"}}})),
            Answer::Json(200, workspace_schema)),
        op!("post" "/v1/workspaces", "createWorkspace", "Create a workspace, owned by its maker (a person who owns a workspace already)", WRITE,
            Body::Json(|| json!({"type": "object", "required": ["slug"], "additionalProperties": false, "properties": {"slug": {"type": "string", "pattern": "^[a-z0-9-]{1,63}$"}, "name": {"type": "string"}}})),
            Answer::Json(201, workspace_schema)),
    ]
});

fn me_schema() -> Value {
    json!({
        "type": "object",
        "required": ["workspaces"],
        "properties": {
            "user": {"type": "object", "required": ["id", "email"], "properties": {"id": {"type": "string"}, "email": {"type": "string"}}},
            "key": {"type": "object", "required": ["id", "name", "scopes"], "properties": {"id": {"type": "string"}, "name": {"type": "string"}, "scopes": {"type": "array", "items": {"type": "string"}}}},
            "workspaces": {"type": "array", "items": {"type": "object", "required": ["slug", "role"], "properties": {"slug": {"type": "string"}, "role": {"type": "string"}}}}
        }
    })
}

fn credentials_schema() -> Value {
    json!({
        "type": "object",
        "required": ["email", "password"],
        "properties": {"email": {"type": "string"}, "password": {"type": "string"}}
    })
}

/// Sign-in for the web UI.
pub static AUTH: LazyLock<Vec<Op>> = LazyLock::new(|| {
    vec![
        op!("post" "/auth/setup", "setup", "Create the first owner with the one-time setup token (this machine only)", Access::Public,
            Body::Json(|| json!({"type": "object", "required": ["token", "email", "password"], "properties": {"token": {"type": "string"}, "email": {"type": "string"}, "password": {"type": "string"}}})),
            Answer::Json(200, me_schema)),
        op!("post" "/auth/login", "login", "Sign in: an HttpOnly session cookie", Access::Public, Body::Json(credentials_schema), Answer::Json(200, me_schema)),
        op!("post" "/auth/logout", "logout", "Sign out", Access::Public, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["ok"], "properties": {"ok": {"const": true}}}))),
        op!("get" "/auth/me", "me", "Who the credential is, and its workspaces", Access::Signed, Body::None, Answer::Json(200, me_schema)),
        op!("post" "/auth/password-reset", "resetPassword", "Choose a new password with a reset link's token; the person's browser sessions end", Access::Public,
            Body::Json(|| json!({"type": "object", "required": ["token", "password"], "additionalProperties": false, "properties": {"token": {"type": "string"}, "password": {"type": "string", "minLength": 10}}})),
            Answer::Json(200, || json!({"type": "object", "required": ["ok"], "properties": {"ok": {"const": true}}}))),
        op!("get" "/auth/status", "authStatus", "Whether first-run setup is still open", Access::Public, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["setupRequired"], "properties": {"setupRequired": {"type": "boolean"}}}))),
    ]
});

/// Upload grants' write-only endpoint.
pub static UPLOADS: LazyLock<Vec<Op>> = LazyLock::new(|| {
    vec![
        op!("put" format!("{}/{{grantId}}/{{filename}}", sessiond_core::uploads::UPLOAD_PREFIX).leak(), "upload",
        "Write one new file into the grant's folder (the grant's token only)", Access::UploadToken, Body::Bytes,
        Answer::Json(201, || json!({"type": "object", "required": ["path", "name", "bytes"], "properties": {"path": {"type": "string"}, "name": {"type": "string"}, "bytes": {"type": "integer", "minimum": 0}}}))),
    ]
});

fn file_entry_schema() -> Value {
    object(
        &["name", "path", "kind", "modifiedAt"],
        json!({
            "name": {"type": "string"},
            "path": {"type": "string", "description": "Drive-relative, `/`-separated"},
            "kind": {"enum": ["file", "dir"]},
            "size": {"type": "integer", "minimum": 0, "description": "Bytes (files only)"},
            "modifiedAt": {"type": ["integer", "null"], "description": "Epoch milliseconds"},
            "type": {"type": "string", "description": "The media type guessed from the name (files only)"},
            "preview": {"enum": ["text", "markdown", "image"], "description": "How the file may be shown in place (files only; absent: download only)"}
        }),
    )
}

fn file_listing_schema() -> Value {
    object(
        &["path", "entries", "truncated"],
        json!({
            "path": {"type": "string", "description": "The folder, drive-relative (empty for the drive root)"},
            "entries": {"type": "array", "maxItems": sessiond_core::drive::browse::LIST_MAX, "items": file_entry_schema()},
            "truncated": {"type": "boolean", "description": "The folder holds more entries than were listed"}
        }),
    )
}

/// The workspace drive by path (sessiond's extension of the Sessions API).
pub static FILES: LazyLock<Vec<Op>> = LazyLock::new(|| {
    vec![
        op!("get" format!("{WS}/files").leak(), "listFiles",
            "A folder of the workspace drive (path relative to the drive; absent: its root): folders first, at most 1000 entries", READ, Body::None,
            Answer::Json(200, file_listing_schema)),
        op!("get" format!("{WS}/files/content").leak(), "readFile",
            "A drive file's bytes, as an attachment; inline=1 shows text, markdown (both as text/plain) and raster images in place", READ, Body::None,
            Answer::File),
        op!("put" format!("{WS}/files/content").leak(), "writeFile",
            "Write one new file at path (its folder must exist; an existing name is 409 exists; over limits.max_upload_bytes is 413)", Access::Scope("files:write"), Body::Bytes,
            Answer::Json(201, || json!({"type": "object", "required": ["path", "name", "bytes"], "properties": {"path": {"type": "string"}, "name": {"type": "string"}, "bytes": {"type": "integer", "minimum": 0}}}))),
    ]
});

/// The query parameters of the drive routes.
fn files_query(op_id: &str) -> Vec<Value> {
    let path = |required: bool, what: &str| json!({"name": "path", "in": "query", "required": required, "description": what, "schema": {"type": "string"}});
    match op_id {
        "listFiles" => vec![path(
            false,
            "The folder, relative to the drive (no `..`, no leading `/`, no `\\`)",
        )],
        "readFile" => vec![
            path(true, "The file, relative to the drive"),
            json!({"name": "inline", "in": "query", "required": false, "description": "1: shown in place when previewable (text as text/plain), else still an attachment", "schema": {"enum": ["0", "1", "true", "false"]}}),
        ],
        "writeFile" => vec![path(
            true,
            "The new file, relative to the drive, in an existing folder",
        )],
        _ => Vec::new(),
    }
}

/// Liveness, readiness and this document.
pub static SERVER: LazyLock<Vec<Op>> = LazyLock::new(|| {
    vec![
        op!("get" "/healthz", "healthz", "Liveness, version, whether storage takes writes, and which process answered (its runner id)", Access::Public, Body::None,
        Answer::Json(200, || json!({
            "type": "object", "required": ["status", "version", "schemaVersion", "storage", "runner"],
            "properties": {
                "status": {"enum": ["ok", "degraded"]}, "version": {"type": "string"}, "schemaVersion": {"type": "integer"},
                "storage": {"type": "object", "required": ["status"], "properties": {"status": {"enum": ["ok", "full", "unavailable"]}, "since": {"type": "number"}}},
                "runner": {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}
            }
        }))),
        op!("get" "/readyz", "readyz", "200 while the server takes work; 503 while storage refuses writes or it is shutting down", Access::Public, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["status"], "properties": {"status": {"const": "ready"}}}))),
        op!("get" "/openapi.json", "openapi", "This document", Access::Public, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["openapi", "paths"]}))),
    ]
});

fn object(required: &[&str], properties: Value) -> Value {
    json!({"type": "object", "required": required, "properties": properties})
}

fn list_of(item: Value) -> Value {
    json!({"type": "array", "items": item})
}

/// A JSON object the contract leaves open (metadata, params, state), or null.
fn open_or_null() -> Value {
    json!({"type": ["object", "null"]})
}

fn date_time() -> Value {
    json!({"type": "string", "format": "date-time"})
}

fn date_time_or_null() -> Value {
    json!({"type": ["string", "null"], "format": "date-time"})
}

fn ax_agent() -> Value {
    object(
        &[
            "id",
            "name",
            "description",
            "acp_type",
            "created_at",
            "updated_at",
        ],
        json!({
            "id": {"type": "string"}, "name": {"type": "string"}, "description": {"type": "string"},
            "acp_type": {"enum": ["sync", "async", "agentic"]}, "created_at": date_time(), "updated_at": date_time(),
            "production_deployment_id": {"type": ["string", "null"]}, "registration_metadata": open_or_null(),
            "status": {"type": ["string", "null"]}
        }),
    )
}

fn ax_register_request() -> Value {
    object(
        &["name", "acp_url", "acp_type"],
        json!({
            "name": {"type": "string"}, "description": {"type": ["string", "null"]},
            "acp_url": {"type": "string"}, "acp_type": {"enum": ["sync", "async", "agentic"]},
            "principal_context": {}, "registration_metadata": open_or_null(),
            "agent_id": {"type": ["string", "null"]},
            "agent_input_type": {"enum": ["text", "json", null]}
        }),
    )
}

/// A registration's answer: the agent and the key it was issued.
fn ax_registered() -> Value {
    let mut agent = ax_agent();
    if let Some(required) = agent["required"].as_array_mut() {
        required.push(json!("agent_api_key"));
    }
    agent["properties"]["agent_api_key"] = json!({"type": "string"});
    agent
}

fn ax_task() -> Value {
    object(
        &["id"],
        json!({
            "id": {"type": "string"}, "name": {"type": ["string", "null"]},
            "status": {"type": ["string", "null"]}, "status_reason": {"type": ["string", "null"]},
            "params": open_or_null(), "task_metadata": open_or_null(),
            "created_at": date_time_or_null(), "updated_at": date_time_or_null(),
            "agents": {"type": ["array", "null"], "items": ax_agent()}
        }),
    )
}

fn ax_deployment() -> Value {
    object(
        &[
            "id",
            "agent_id",
            "docker_image",
            "is_production",
            "status",
            "created_at",
        ],
        json!({
            "id": {"type": "string"}, "agent_id": {"type": "string"}, "docker_image": {"type": "string"},
            "is_production": {"type": "boolean"}, "status": {"type": "string"}, "created_at": date_time(),
            "promoted_at": date_time_or_null(), "registration_metadata": open_or_null()
        }),
    )
}

fn ax_deployment_spec() -> Value {
    object(
        &["docker_image"],
        json!({
            "docker_image": {"type": "string"}, "helm_release_name": {"type": ["string", "null"]},
            "sgp_deploy_id": {"type": ["string", "null"]},
            "registration_metadata": {"type": ["object", "null"], "description": "`engine`: the engine configuration this deployment carries (sessiond's engine JSON)"}
        }),
    )
}

fn ax_message() -> Value {
    object(
        &["id", "task_id", "content"],
        json!({
            "id": {"type": "string"}, "task_id": {"type": "string"},
            "content": {"type": "object", "required": ["type"], "properties": {"type": {"enum": ["text", "data", "tool_request", "tool_response", "reasoning"]}}},
            "streaming_status": {"enum": ["IN_PROGRESS", "DONE", null]},
            "created_at": date_time_or_null(), "updated_at": date_time_or_null()
        }),
    )
}

fn ax_message_spec() -> Value {
    object(
        &["task_id", "content"],
        json!({"task_id": {"type": "string"}, "content": {"type": "object"}, "streaming_status": {"type": ["string", "null"]}}),
    )
}

fn ax_event() -> Value {
    object(
        &["id", "agent_id", "sequence_id", "task_id"],
        json!({
            "id": {"type": "string"}, "agent_id": {"type": "string"}, "sequence_id": {"type": "integer"},
            "task_id": {"type": "string"}, "content": open_or_null(), "created_at": date_time_or_null()
        }),
    )
}

fn ax_state() -> Value {
    object(
        &["id", "agent_id", "task_id", "state"],
        json!({
            "id": {"type": "string"}, "agent_id": {"type": "string"}, "task_id": {"type": "string"},
            "state": {"type": "object"}, "created_at": date_time(), "updated_at": date_time_or_null()
        }),
    )
}

fn ax_span() -> Value {
    object(
        &["id", "name", "trace_id", "start_time"],
        json!({
            "id": {"type": "string"}, "name": {"type": "string"}, "trace_id": {"type": "string"},
            "start_time": date_time(), "end_time": date_time_or_null(),
            "parent_id": {"type": ["string", "null"]}, "task_id": {"type": ["string", "null"]}
        }),
    )
}

fn ax_tracker() -> Value {
    object(
        &["id", "agent_id", "task_id"],
        json!({
            "id": {"type": "string"}, "agent_id": {"type": "string"}, "task_id": {"type": "string"},
            "last_processed_event_id": {"type": ["string", "null"]},
            "status": {"type": ["string", "null"]}, "status_reason": {"type": ["string", "null"]}
        }),
    )
}

fn ax_deleted() -> Value {
    object(
        &["id", "message"],
        json!({"id": {"type": "string"}, "message": {"type": "string"}}),
    )
}

fn ax_reason() -> Value {
    json!({"type": "object", "properties": {"reason": {"type": ["string", "null"]}}})
}

fn ax_task_update() -> Value {
    json!({"type": "object", "properties": {"merge_params": open_or_null(), "task_metadata": open_or_null()}})
}

/// One `data:` of an AgentEx task's stream: `connected`, a `TaskMessageUpdate`, `task_updated` or
/// `error`.
fn ax_task_stream_item() -> Value {
    let index = json!({"type": ["integer", "null"]});
    let parent = json!({"anyOf": [ax_message(), {"type": "null"}]});
    json!({"oneOf": [
        object(&["type", "taskId"], json!({"type": {"const": "connected"}, "taskId": {"type": "string"}})),
        object(&["type", "content"], json!({"type": {"const": "start"}, "index": index, "content": {"type": "object", "required": ["type"]}, "parent_task_message": parent})),
        object(&["type", "delta"], json!({"type": {"const": "delta"}, "index": index, "delta": {"type": "object", "required": ["type"]}, "parent_task_message": parent})),
        object(&["type", "content"], json!({"type": {"const": "full"}, "index": index, "content": {"type": "object", "required": ["type"]}, "parent_task_message": parent})),
        object(&["type"], json!({"type": {"const": "done"}, "index": index, "parent_task_message": parent})),
        object(&["type", "task"], json!({"type": {"const": "task_updated"}, "task": ax_task()})),
        object(&["type", "message"], json!({"type": {"const": "error"}, "message": {"type": "string"}}))
    ]})
}

fn ax_deployment_history() -> Value {
    object(
        &[
            "id",
            "agent_id",
            "author_email",
            "author_name",
            "branch_name",
            "build_timestamp",
            "commit_hash",
            "deployment_timestamp",
        ],
        json!({
            "id": {"type": "string"}, "agent_id": {"type": "string"},
            "author_email": {"type": "string", "description": "the user's e-mail address (empty for an app or an unknown author)"},
            "author_name": {"type": "string", "description": "the user's e-mail address or the app's name (`unknown` before sessiond kept history)"},
            "branch_name": {"enum": ["created", "promoted", "deleted"], "description": "the change"},
            "commit_hash": {"type": "string", "description": "the deployment's id"},
            "build_timestamp": date_time(), "deployment_timestamp": date_time(),
            "deployment_id": {"type": "string"}, "change": {"enum": ["created", "promoted", "deleted"]},
            "docker_image": {"type": "string"}, "author_id": {"type": ["string", "null"]},
            "key_id": {"type": ["string", "null"]}
        }),
    )
}

fn ax_webhook_trigger_request() -> Value {
    json!({
        "type": "object", "required": ["agent_name", "forward_path", "name"], "additionalProperties": false,
        "properties": {
            "agent_name": {"type": "string"},
            "forward_path": {"type": "string", "description": "path segments of a-z, A-Z, 0-9, '-', '_', '.', '~' joined by '/'"},
            "name": {"type": "string", "description": "what deliveries are matched on: the repository's full_name (github), the app's api_app_id (slack)"},
            "source": {"enum": ["github", "slack"], "default": "github"},
            "secret": {"type": ["string", "null"], "minLength": 16, "description": "required for slack; made when omitted for github"},
            "base_url": {"type": ["string", "null"], "description": "the agent platform API's public URL for webhook_url (default: public_url or the bound address, with /agentex)"}
        }
    })
}

fn ax_webhook_trigger() -> Value {
    object(
        &[
            "key_id",
            "agent_name",
            "source",
            "name",
            "secret",
            "webhook_path",
        ],
        json!({
            "key_id": {"type": "string"}, "agent_name": {"type": "string"},
            "source": {"enum": ["github", "slack"]}, "name": {"type": "string"},
            "secret": {"type": "string", "description": "shown this once"},
            "webhook_path": {"type": "string"}, "webhook_url": {"type": ["string", "null"]}
        }),
    )
}

fn ax_webhook_delivery() -> Value {
    json!({
        "type": "object",
        "description": "the task the delivery started (or found, for a redelivery); Slack's url_verification: its challenge; GitHub's ping: ok",
        "properties": {
            "task_id": {"type": "string"}, "task_name": {"type": ["string", "null"]}, "created": {"type": "boolean"},
            "challenge": {"type": "string"}, "ok": {"type": "boolean"}, "event": {"type": "string"}
        }
    })
}

fn ax_rpc_request() -> Value {
    object(
        &["method", "params"],
        json!({
            "jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]},
            "method": {"enum": crate::agentex::RPC_METHODS},
            "params": {"type": "object", "description": "The method's parameters; `message/send` also takes sessiond's `if_busy` (`enqueue`, `interrupt` or `reject`: what the message does while the task's turn is running)"}
        }),
    )
}

/// A JSON-RPC 2.0 response (errors included: they are HTTP 200 too): `result` on success,
/// `error` on failure, never both.
fn ax_rpc_response() -> Value {
    let mut v = object(
        &["jsonrpc", "id"],
        json!({
            "jsonrpc": {"const": "2.0"}, "id": {"type": ["string", "integer", "null"]}, "result": {},
            "error": {"type": "object", "required": ["code", "message"], "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}}}
        }),
    );
    v["oneOf"] = json!([
        {"required": ["result"], "not": {"required": ["error"]}},
        {"required": ["error"], "not": {"required": ["result"]}}
    ]);
    v
}

fn ax_query_answer() -> Value {
    object(
        &["task_id", "query", "result"],
        json!({"task_id": {"type": "string"}, "query": {"type": "string"}, "result": {}}),
    )
}

/// A checkpoint's place: its thread (a task's id), namespace and id.
fn ax_checkpoint_ref() -> Value {
    object(
        &["thread_id", "checkpoint_ns", "checkpoint_id"],
        json!({"thread_id": {"type": "string"}, "checkpoint_ns": {"type": "string"}, "checkpoint_id": {"type": "string"}}),
    )
}

fn ax_checkpoint() -> Value {
    let mut v = ax_checkpoint_ref();
    if let Some(required) = v["required"].as_array_mut() {
        required.extend([json!("checkpoint"), json!("metadata")]);
    }
    v["properties"]["parent_checkpoint_id"] = json!({"type": ["string", "null"]});
    v["properties"]["checkpoint"] = json!({"type": "object"});
    v["properties"]["metadata"] = json!({"type": "object"});
    v
}

/// A channel's blob: `blob` is base64, null for an `empty` channel.
fn ax_checkpoint_blob() -> Value {
    object(
        &["channel", "version", "type"],
        json!({"channel": {"type": "string"}, "version": {"type": "string"}, "type": {"type": "string"}, "blob": {"type": ["string", "null"], "contentEncoding": "base64"}}),
    )
}

fn ax_checkpoint_tuple_or_null() -> Value {
    let mut v = ax_checkpoint();
    v["properties"]["blobs"] = list_of(ax_checkpoint_blob());
    v["properties"]["pending_writes"] = list_of(object(
        &["task_id", "idx", "channel"],
        json!({"task_id": {"type": "string"}, "idx": {"type": "integer"}, "channel": {"type": "string"}, "type": {"type": ["string", "null"]}, "blob": {"type": ["string", "null"], "contentEncoding": "base64"}}),
    ));
    json!({"oneOf": [v, {"type": "null"}]})
}

fn ax_checkpoint_list_request() -> Value {
    object(
        &["thread_id"],
        json!({
            "thread_id": {"type": "string"}, "checkpoint_ns": {"type": ["string", "null"]},
            "before_checkpoint_id": {"type": ["string", "null"]}, "filter_metadata": open_or_null(),
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000}
        }),
    )
}

fn ax_checkpoint_get_request() -> Value {
    object(
        &["thread_id"],
        json!({"thread_id": {"type": "string"}, "checkpoint_ns": {"type": "string"}, "checkpoint_id": {"type": ["string", "null"]}}),
    )
}

fn ax_checkpoint_put_request() -> Value {
    object(
        &["thread_id", "checkpoint_id", "checkpoint"],
        json!({
            "thread_id": {"type": "string"}, "checkpoint_ns": {"type": "string"},
            "checkpoint_id": {"type": "string"}, "parent_checkpoint_id": {"type": ["string", "null"]},
            "checkpoint": {"type": "object"}, "metadata": {"type": "object"},
            "blobs": {"type": "array", "maxItems": 1000, "items": ax_checkpoint_blob()}
        }),
    )
}

fn ax_checkpoint_writes_request() -> Value {
    object(
        &["thread_id", "checkpoint_id", "writes"],
        json!({
            "thread_id": {"type": "string"}, "checkpoint_ns": {"type": "string"},
            "checkpoint_id": {"type": "string"}, "upsert": {"type": "boolean"},
            "writes": {"type": "array", "maxItems": 1000, "items": object(
                &["task_id", "idx", "channel", "blob"],
                json!({"task_id": {"type": "string"}, "idx": {"type": "integer"}, "channel": {"type": "string"}, "type": {"type": ["string", "null"]}, "blob": {"type": "string", "contentEncoding": "base64"}, "task_path": {"type": "string"}}),
            )}
        }),
    )
}

/// The agent platform API (seed 003), at `/agentex`: the routes the official `agentex-client`
/// calls, in the credential's workspace.
pub static AGENTEX: LazyLock<Vec<Op>> = LazyLock::new(|| {
    let p = |rest: &str| -> &'static str { format!("/agentex{rest}").leak() };
    use Answer::Json as J;
    let one = |f: fn() -> Value| J(200, f);
    vec![
        op!("get" p("/agents"), "agentexListAgents", "Agents (task_id filter; order_by, order_direction; page_number from 1)", READ, Body::None, J(200, || list_of(ax_agent()))),
        op!("post" p("/agents/register-build"), "agentexRegisterBuild", "Register an agent by name (idempotent): creates or updates sessiond's agent", WRITE, Body::Json(|| json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "description": {"type": ["string", "null"]}, "registration_metadata": open_or_null()}})), one(ax_agent)),
        op!("post" p("/agents/register"), "agentexRegister", "An ACP server (an AgentEx SDK agent) registers: creates or updates its agent and issues its key; the acp_url must be allowed by [policy] acp_hosts", WRITE, Body::Json(ax_register_request), one(ax_registered)),
        op!("get" p("/agents/name/{agent_name}"), "agentexGetAgentByName", "One agent by name", READ, Body::None, one(ax_agent)),
        op!("delete" p("/agents/name/{agent_name}"), "agentexDeleteAgentByName", "Delete an agent by name (and its tasks)", WRITE, Body::None, one(ax_deleted)),
        op!("post" p("/agents/name/{agent_name}/rpc"), "agentexRpcByName", "JSON-RPC 2.0 call to an agent by name (NDJSON updates for a streamed message/send)", WRITE, Body::Json(ax_rpc_request), Answer::Rpc(ax_rpc_response)),
        op!("get" p("/agents/{agent_id}"), "agentexGetAgent", "One agent", READ, Body::None, one(ax_agent)),
        op!("delete" p("/agents/{agent_id}"), "agentexDeleteAgent", "Delete an agent (and its tasks)", WRITE, Body::None, one(ax_deleted)),
        op!("post" p("/agents/{agent_id}/rpc"), "agentexRpc", "JSON-RPC 2.0 call to an agent (NDJSON updates for a streamed message/send)", WRITE, Body::Json(ax_rpc_request), Answer::Rpc(ax_rpc_response)),
        op!("get" p("/agents/{agent_id}/deployments"), "agentexListDeployments", "An agent's deployments (engine versions)", READ, Body::None, J(200, || list_of(ax_deployment()))),
        op!("post" p("/agents/{agent_id}/deployments"), "agentexCreateDeployment", "A new engine version of the agent (checked against [policy])", WRITE, Body::Json(ax_deployment_spec), one(ax_deployment)),
        op!("get" p("/agents/{agent_id}/deployments/{deployment_id}"), "agentexGetDeployment", "One deployment", READ, Body::None, one(ax_deployment)),
        op!("delete" p("/agents/{agent_id}/deployments/{deployment_id}"), "agentexDeleteDeployment", "Delete a deployment that is not in production", WRITE, Body::None, one(ax_deleted)),
        op!("post" p("/agents/{agent_id}/deployments/{deployment_id}/promote"), "agentexPromoteDeployment", "Make the deployment the only production one; its engine becomes the agent's", WRITE, Body::None, one(ax_deployment)),
        op!("post" p("/agents/{agent_id}/deployments/{deployment_id}/rpc"), "agentexPreviewRpc", "JSON-RPC 2.0 against the deployment's engine without promoting it", WRITE, Body::Json(ax_rpc_request), Answer::Rpc(ax_rpc_response)),
        op!("get" p("/tasks"), "agentexListTasks", "Tasks (agent_id, agent_name, status, task_metadata filters; pages)", READ, Body::None, J(200, || list_of(ax_task()))),
        op!("get" p("/tasks/name/{task_name}"), "agentexGetTaskByName", "One task by name", READ, Body::None, one(ax_task)),
        op!("put" p("/tasks/name/{task_name}"), "agentexUpdateTaskByName", "Merge params, replace task_metadata", WRITE, Body::Json(ax_task_update), one(ax_task)),
        op!("delete" p("/tasks/name/{task_name}"), "agentexDeleteTaskByName", "Stop and delete a task (its session)", WRITE, Body::None, one(ax_deleted)),
        op!("get" p("/tasks/name/{task_name}/stream"), "agentexStreamTaskByName", "A task's updates as Server-Sent Events", READ, Body::None, Answer::TaskUpdates),
        op!("get" p("/tasks/{task_id}"), "agentexGetTask", "One task", READ, Body::None, one(ax_task)),
        op!("put" p("/tasks/{task_id}"), "agentexUpdateTask", "Merge params, replace task_metadata", WRITE, Body::Json(ax_task_update), one(ax_task)),
        op!("delete" p("/tasks/{task_id}"), "agentexDeleteTask", "Stop and delete a task (its session)", WRITE, Body::None, one(ax_deleted)),
        op!("get" p("/tasks/{task_id}/stream"), "agentexStreamTask", "A task's updates as Server-Sent Events", READ, Body::None, Answer::TaskUpdates),
        op!("post" p("/tasks/{task_id}/interrupt"), "agentexInterruptTask", "Stop the running turn (cooperative); the task stays open", WRITE, Body::None, one(ax_task)),
        op!("post" p("/tasks/{task_id}/cancel"), "agentexCancelTask", "Stop the turn and close the task: CANCELED", WRITE, Body::Json(ax_reason), one(ax_task)),
        op!("post" p("/tasks/{task_id}/complete"), "agentexCompleteTask", "Close the task: COMPLETED", WRITE, Body::Json(ax_reason), one(ax_task)),
        op!("post" p("/tasks/{task_id}/fail"), "agentexFailTask", "Close the task: FAILED", WRITE, Body::Json(ax_reason), one(ax_task)),
        op!("post" p("/tasks/{task_id}/terminate"), "agentexTerminateTask", "Close the task: TERMINATED", WRITE, Body::Json(ax_reason), one(ax_task)),
        op!("post" p("/tasks/{task_id}/timeout"), "agentexTimeoutTask", "Close the task: TIMED_OUT", WRITE, Body::Json(ax_reason), one(ax_task)),
        op!("get" p("/tasks/{task_id}/query/{query_name}"), "agentexQueryTask", "A named question about a task: get_status/status (its Task.status), get_state/state/current_state (its agent's state or null); another name is 400", READ, Body::None, one(ax_query_answer)),
        op!("get" p("/messages"), "agentexListMessages", "A task's messages, read from its timeline (task_id required)", READ, Body::None, J(200, || list_of(ax_message()))),
        op!("post" p("/messages"), "agentexCreateMessage", "Add a message to a task's timeline (IN_PROGRESS: an agent message its updates complete)", WRITE, Body::Json(ax_message_spec), one(ax_message)),
        op!("get" p("/messages/paginated"), "agentexPaginatedMessages", "A task's messages by cursor and direction", READ, Body::None,
            J(200, || object(&["data", "has_more"], json!({"data": list_of(ax_message()), "next_cursor": {"type": ["string", "null"]}, "has_more": {"type": "boolean"}})))),
        op!("post" p("/messages/batch"), "agentexCreateMessages", "Add messages to a task (all checked before the first is added)", WRITE,
            Body::Json(|| object(&["task_id", "contents"], json!({"task_id": {"type": "string"}, "contents": {"type": "array", "items": {"type": "object"}}}))),
            J(200, || list_of(ax_message()))),
        op!("put" p("/messages/batch"), "agentexUpdateMessages", "Revise agent messages of a task (each revision appended; all checked first, one transaction)", WRITE,
            Body::Json(|| object(&["task_id", "updates"], json!({"task_id": {"type": "string"}, "updates": {"type": "object", "additionalProperties": {"type": "object"}}}))),
            J(200, || list_of(ax_message()))),
        op!("get" p("/messages/{message_id}"), "agentexGetMessage", "One message", READ, Body::None, one(ax_message)),
        op!("put" p("/messages/{message_id}"), "agentexUpdateMessage", "Revise an agent message: its new content appended to the timeline, its id unchanged", WRITE, Body::Json(ax_message_spec), one(ax_message)),
        op!("get" p("/events"), "agentexListEvents", "A task's events after last_processed_event_id", READ, Body::None, J(200, || list_of(ax_event()))),
        op!("get" p("/events/{event_id}"), "agentexGetEvent", "One event", READ, Body::None, one(ax_event)),
        op!("get" p("/states"), "agentexListStates", "States (task_id, agent_id filters)", READ, Body::None, J(200, || list_of(ax_state()))),
        op!("post" p("/states"), "agentexCreateState", "A task's state for an agent (one per pair)", WRITE,
            Body::Json(|| object(&["agent_id", "task_id", "state"], json!({"agent_id": {"type": "string"}, "task_id": {"type": "string"}, "state": {"type": "object"}}))), one(ax_state)),
        op!("get" p("/states/{state_id}"), "agentexGetState", "One state", READ, Body::None, one(ax_state)),
        op!("put" p("/states/{state_id}"), "agentexUpdateState", "Replace a state", WRITE,
            Body::Json(|| object(&["state"], json!({"state": {"type": "object"}}))), one(ax_state)),
        op!("delete" p("/states/{state_id}"), "agentexDeleteState", "Delete a state", WRITE, Body::None, one(ax_state)),
        op!("get" p("/spans"), "agentexListSpans", "Spans (trace_id, task_id filters)", READ, Body::None, J(200, || list_of(ax_span()))),
        op!("post" p("/spans"), "agentexCreateSpan", "Record a span", WRITE,
            Body::Json(|| object(&["name", "trace_id", "start_time"], json!({"name": {"type": "string"}, "trace_id": {"type": "string"}, "start_time": date_time()}))), one(ax_span)),
        op!("get" p("/spans/{span_id}"), "agentexGetSpan", "One span", READ, Body::None, one(ax_span)),
        op!("patch" p("/spans/{span_id}"), "agentexUpdateSpan", "Change a span (end time, output…)", WRITE, Body::Json(|| json!({"type": "object"})), one(ax_span)),
        op!("get" p("/tracker"), "agentexListTrackers", "Agent-task trackers (task_id, agent_id filters)", READ, Body::None, J(200, || list_of(ax_tracker()))),
        op!("get" p("/tracker/{tracker_id}"), "agentexGetTracker", "One tracker", READ, Body::None, one(ax_tracker)),
        op!("put" p("/tracker/{tracker_id}"), "agentexUpdateTracker", "Move a tracker (last processed event, status)", WRITE,
            Body::Json(|| json!({"type": "object", "properties": {"last_processed_event_id": {"type": ["string", "null"]}, "status": {"type": ["string", "null"]}, "status_reason": {"type": ["string", "null"]}}})), one(ax_tracker)),
        op!("post" p("/checkpoints/list"), "agentexListCheckpoints", "A thread's (task's) LangGraph checkpoints, newest first (one namespace or all, before a checkpoint, metadata containment; limit ≤ 1000, default 100)", READ,
            Body::Json(ax_checkpoint_list_request), J(200, || list_of(ax_checkpoint()))),
        op!("post" p("/checkpoints/get-tuple"), "agentexGetCheckpointTuple", "A checkpoint by id, else the thread's newest in the namespace, with its blobs and pending writes; null when there is none", READ,
            Body::Json(ax_checkpoint_get_request), J(200, ax_checkpoint_tuple_or_null)),
        op!("post" p("/checkpoints/put"), "agentexPutCheckpoint", "Store a checkpoint (replacing one with its id) and its channels' blobs", WRITE,
            Body::Json(ax_checkpoint_put_request), J(200, ax_checkpoint_ref)),
        op!("post" p("/checkpoints/put-writes"), "agentexPutCheckpointWrites", "Store a checkpoint's pending writes, once per (task_id, idx) (upsert: replace)", WRITE,
            Body::Json(ax_checkpoint_writes_request), Answer::Empty(204)),
        op!("post" p("/checkpoints/delete-thread"), "agentexDeleteCheckpointThread", "Delete a thread's checkpoints, blobs and writes (the task stays)", WRITE,
            Body::Json(|| object(&["thread_id"], json!({"thread_id": {"type": "string"}}))), Answer::Empty(204)),
        op!("get" p("/deployment-history"), "agentexDeploymentHistory", "Every change to an agent's deployments (created, promoted, deleted), with who and when; agent_id or agent_name, pages", READ, Body::None, J(200, || list_of(ax_deployment_history()))),
        op!("get" p("/deployment-history/{deployment_id}"), "agentexDeploymentHistoryEntry", "One change of the deployment history", READ, Body::None, one(ax_deployment_history)),
        op!("post" p("/agent_api_keys/webhook-trigger"), "agentexWebhookTrigger", "Register a GitHub or Slack signing secret for an agent: the forward URL, and the secret shown once", WRITE, Body::Json(ax_webhook_trigger_request), one(ax_webhook_trigger)),
        op!("post" p("/agents/forward/name/{agent_name}/{path}"), "agentexWebhookDelivery", "A GitHub or Slack delivery to a webhook trigger (its signature is its credential): starts a task of the agent with the payload", Access::WebhookSignature, Body::Json(|| json!({"type": "object"})), J(200, ax_webhook_delivery)),
    ]
});

fn record_ref() -> Value {
    component("SessionRecord")
}

fn budget_schema() -> Value {
    json!({"type": "object", "required": ["cents"], "additionalProperties": false,
        "properties": {"cents": {"type": "integer", "minimum": 0, "description": "0: no cap"}}})
}

/// The Task events API (seeds 001 and 004): Session records and their HAST Event v2 streams, in
/// the credential's workspace (`X-Sessiond-Workspace` picks another of a browser user's).
pub static TASK_EVENTS: LazyLock<Vec<Op>> = LazyLock::new(|| {
    vec![
        op!("get" "/v2/sessions", "v2ListSessions", "Session records, newest first (limit, keyset cursor)", READ, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["sessions", "next_cursor"], "properties": {
                "sessions": {"type": "array", "items": record_ref()}, "next_cursor": {"type": ["string", "null"]}}}))),
        op!("post" "/v2/sessions", "v2CreateSession", "Create a session from a prompt (harness, metadata, budget, parent)", WRITE,
            Body::Json(|| json!({"type": "object", "required": ["prompt"], "additionalProperties": false, "properties": {
                "prompt": {"type": "string", "minLength": 1},
                "harness": {"enum": crate::v2::HARNESSES},
                "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
                "budget": budget_schema(),
                "parent": {"type": "object", "required": ["kind", "session_id"], "additionalProperties": false, "properties": {
                    "kind": {"enum": ["continuation", "handoff", "resume"]}, "session_id": {"type": "string"}}}}})),
            Answer::Json(201, record_ref)),
        op!("get" "/v2/sessions/{sessionId}", "v2GetSession", "The Session record", READ, Body::None, Answer::Json(200, record_ref)),
        op!("patch" "/v2/sessions/{sessionId}", "v2UpdateSession", "Change the budget, or merge metadata (null removes a key)", WRITE,
            Body::Json(|| json!({"type": "object", "additionalProperties": false, "properties": {
                "budget": budget_schema(),
                "metadata": {"type": "object", "additionalProperties": {"type": ["string", "null"]}}}})),
            Answer::Json(200, record_ref)),
        op!("post" "/v2/sessions/{sessionId}/messages", "v2SendMessage", "A message, or the answer when the session asked", WRITE,
            Body::Json(|| json!({"type": "object", "required": ["prompt"], "additionalProperties": false, "properties": {
                "prompt": {"type": "string", "minLength": 1}, "behavior": {"enum": ["steer", "follow_up"]},
                "if_busy": busy_policy()}})),
            Answer::Json(200, || json!({"type": "object", "required": ["session_id", "delivery", "sequence"], "properties": {
                "session_id": {"type": "string"}, "delivery": {"type": "string"},
                "sequence": {"type": "integer", "minimum": 0, "description": "The first HAST sequence of the message"}}}))),
        op!("post" "/v2/sessions/{sessionId}/fork", "v2ForkSession", "A new session whose conversation is this one's up to timeline event at_seq; its parent is {kind: fork, session_id, at_seq}", WRITE,
            Body::Json(|| fork_body("at_seq")),
            Answer::Json(201, record_ref)),
        op!("get" "/v2/sessions/{sessionId}/events", "v2ListEvents", "Durable HAST events with sequence > after, in order (after, limit)", READ, Body::None,
            Answer::Json(200, || json!({"type": "object", "required": ["events", "has_more"], "properties": {
                "events": {"type": "array", "items": component("HastEnvelope")}, "has_more": {"type": "boolean"}}}))),
        op!("get" "/v2/sessions/{sessionId}/events/stream", "v2StreamEvents", "HAST envelopes as Server-Sent Events (after or Last-Event-ID; snapshots=true adds session/snapshot frames)", READ, Body::None, Answer::HastEvents),
    ]
});

/// sessiond's busy policy of a message (`sessions::busy`).
fn busy_policy() -> Value {
    json!({"enum": sessiond_core::sessions::busy::BUSY_POLICIES, "default": "enqueue",
        "description": "What the message does while the session's turn is running: enqueue (delivered as its behavior says), interrupt (the turn is stopped, then this message runs), reject (409 session_busy, nothing written)"})
}

/// The Sessions API's message bodies (the seed's schemas) with the busy policy as `ifBusy`, an
/// extra field seed 000 permits.
fn with_busy_policy(schemas: &mut Map<String, Value>) {
    for (name, schema) in schemas.iter_mut() {
        if (name.ends_with("messages.request") || name.ends_with("messages_wait.request"))
            && let Some(Value::Object(props)) = schema.get_mut("properties")
        {
            props.insert("ifBusy".into(), busy_policy());
        }
    }
}

/// A fork's body: the parent's event to fork at (`field`) and a first message for the fork.
fn fork_body(field: &str) -> Value {
    json!({"type": "object", "required": [field], "additionalProperties": false, "properties": {
        field: {"type": "integer", "minimum": 1, "description": "The seq of the event the copied timeline ends with"},
        "prompt": {"type": "string", "minLength": 1, "description": "A message the fork runs at once"}}})
}

/// The Session record with sessiond's lineage extension: `parent.kind` `fork` and the fork point
/// `parent.at_seq`.
fn with_fork_lineage(mut record: Value) -> Value {
    fn add_fork(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if let Some(Value::Array(e)) = m.get_mut("enum")
                    && e.iter().any(|x| x == "resume")
                {
                    e.push(json!("fork"));
                }
                m.values_mut().for_each(add_fork);
            }
            Value::Array(a) => a.iter_mut().for_each(add_fork),
            _ => {}
        }
    }
    if let Some(kind) = record.pointer_mut("/properties/parent/properties/kind") {
        add_fork(kind);
    }
    if let Some(Value::Object(props)) = record.pointer_mut("/properties/parent/properties") {
        props.insert(
            "at_seq".into(),
            json!({"type": "integer", "minimum": 1, "description": "A fork's fork point: the parent's event its timeline was copied up to (kind fork only)"}),
        );
    }
    record
}

/// The query parameters of `usageByAgent`.
fn usage_query(op_id: &str) -> Vec<Value> {
    if op_id != "usageByAgent" {
        return Vec::new();
    }
    vec![
        json!({"name": "from", "in": "query", "required": true, "description": "Start of the window (RFC 3339)", "schema": {"type": "string", "format": "date-time"}}),
        json!({"name": "to", "in": "query", "required": false, "description": "End of the window (RFC 3339; default now)", "schema": {"type": "string", "format": "date-time"}}),
    ]
}

/// The query parameters of the Task events API's reads (the Sessions API's come from its seed).
fn task_query(op_id: &str) -> Vec<Value> {
    let q = |name: &str, schema: Value, what: &str| json!({"name": name, "in": "query", "required": false, "description": what, "schema": schema});
    let uint = || json!({"type": "integer", "minimum": 0, "maximum": super::body::MAX_SAFE});
    let limit = || json!({"type": "integer", "minimum": 1});
    match op_id {
        "v2ListSessions" => vec![
            q("limit", limit(), "Records per page"),
            q(
                "cursor",
                json!({"type": "string", "minLength": 1}),
                "`next_cursor` of the previous page",
            ),
        ],
        "v2ListEvents" => vec![
            q("after", uint(), "Events with a greater sequence"),
            q("limit", limit(), "Events per page"),
        ],
        "agentexDeploymentHistory" => vec![
            q(
                "agent_id",
                json!({"type": "string"}),
                "The agent (or agent_name; one of them)",
            ),
            q(
                "agent_name",
                json!({"type": "string"}),
                "The agent, by name",
            ),
            q(
                "limit",
                json!({"type": "integer", "minimum": 1, "maximum": super::agentex::PAGE_MAX}),
                "Rows per page (default 50)",
            ),
            q(
                "page_number",
                json!({"type": "integer", "minimum": 1}),
                "From 1",
            ),
            q(
                "order_by",
                json!({"enum": ["deployment_timestamp", "build_timestamp"]}),
                "The change's time (default) or the deployment's creation",
            ),
            q(
                "order_direction",
                json!({"enum": ["asc", "desc"]}),
                "Newest first by default",
            ),
        ],
        "agentexWebhookDelivery" => {
            let h = |name: &str, what: &str| json!({"name": name, "in": "header", "required": false, "description": what, "schema": {"type": "string"}});
            vec![
                h(
                    "X-Hub-Signature-256",
                    "GitHub: sha256= and the HMAC-SHA256 of the body, hex",
                ),
                h(
                    "X-GitHub-Event",
                    "GitHub: the event (issues, issue_comment, push, pull_request, ping, ...)",
                ),
                h(
                    "X-GitHub-Delivery",
                    "GitHub: the delivery's id (a redelivery finds the task it started)",
                ),
                h(
                    "X-Slack-Signature",
                    "Slack: v0= and the HMAC-SHA256 of v0:{timestamp}:{body}, hex",
                ),
                h(
                    "X-Slack-Request-Timestamp",
                    "Slack: seconds since the epoch, within five minutes of now",
                ),
            ]
        }
        "v2StreamEvents" => vec![
            q(
                "after",
                uint(),
                "Resume after this sequence (Last-Event-ID wins)",
            ),
            q(
                "snapshots",
                json!({"enum": ["true", "false", "1", "0"]}),
                "Add `session/snapshot` frames (the Session record when its status changes)",
            ),
        ],
        _ => Vec::new(),
    }
}

/// `x-nullable: true` (OpenAPI 2) next to a `type` becomes that type or null, everywhere in `v`.
fn widen_nullable(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.remove("x-nullable") == Some(json!(true))
                && let Some(Value::String(t)) = map.get("type").cloned()
            {
                map.insert("type".into(), json!([t, "null"]));
            }
            map.values_mut().for_each(widen_nullable);
        }
        Value::Array(items) => items.iter_mut().for_each(widen_nullable),
        _ => {}
    }
}

/// A seed schema of the Task events API, as the document carries it: `$schema` dropped, the
/// vendor enum at `enum_at` holding sessiond's engine names, OpenAPI 2's keywords in 3.1 form.
fn task_schema(text: &str, enum_at: &str, values: Vec<&str>) -> Value {
    let mut v: Value = serde_json::from_str(text).unwrap_or_else(|_| json!({}));
    if let Some(m) = v.as_object_mut() {
        m.remove("$schema");
        // A bare property name: OpenAPI 3 wants `{propertyName}`; the `type` enum says it all.
        m.remove("discriminator");
    }
    widen_nullable(&mut v);
    if let Some(e) = v.pointer_mut(enum_at) {
        *e = json!(values);
    }
    v
}

/// A schema of `schemas/agentex/` (`RunSchedule`, …), without its `$schema`.
fn agentex_schema(name: &str) -> Value {
    let mut v = AgentexSchemas::get(&format!("{name}.json"))
        .and_then(|f| serde_json::from_slice::<Value>(&f.data).ok())
        .unwrap_or_else(|| json!({}));
    if let Some(m) = v.as_object_mut() {
        m.remove("$schema");
    }
    v
}

fn run_schedule() -> Value {
    agentex_schema("RunSchedule")
}

/// The fields a schedule's create and update bodies share (`name` and `initial_input` are
/// required on create).
fn schedule_fields() -> Value {
    json!({
        "name": {"type": "string", "pattern": "^[a-z0-9]([a-z0-9-]*[a-z0-9])?$", "maxLength": 64},
        "description": {"type": ["string", "null"]},
        "cron_expression": {"type": ["string", "null"], "description": "5 fields (minute hour day-of-month month day-of-week), evaluated in `timezone`"},
        "interval_seconds": {"type": ["integer", "null"], "minimum": 1, "description": "at least the server's schedules.min_interval_seconds"},
        "timezone": {"type": ["string", "null"], "description": "an IANA time zone (default UTC)"},
        "start_at": date_time_or_null(), "end_at": date_time_or_null(),
        "paused": {"type": ["boolean", "null"]},
        "task_params": {"type": ["object", "null"]}, "task_metadata": {"type": ["object", "null"]},
        "initial_input": {
            "type": "object", "required": ["content"], "additionalProperties": false,
            "properties": {"content": {"type": "string", "minLength": 1}, "author": {"enum": ["user", "agent"]}, "type": {"const": "text"}}
        }
    })
}

fn schedule_create() -> Value {
    json!({"type": "object", "required": ["name", "initial_input"], "additionalProperties": false, "properties": schedule_fields()})
}

fn schedule_update() -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": schedule_fields()})
}

fn schedule_note() -> Value {
    json!({"type": "object", "additionalProperties": false, "properties": {"note": {"type": ["string", "null"]}}})
}

fn schedule_tick() -> Value {
    json!({"type": "object", "required": ["scheduled_time"], "additionalProperties": false, "properties": {"scheduled_time": date_time()}})
}

/// Agent run schedules, at `/agentex/agents/{agent_id}/schedules` (seed 003's `AgentsSchedules`).
pub static AGENTEX_SCHEDULES: LazyLock<Vec<Op>> = LazyLock::new(|| {
    let p = |rest: &str| -> &'static str {
        format!("/agentex/agents/{{agent_id}}/schedules{rest}").leak()
    };
    let one = Answer::Json(200, run_schedule);
    let deleted = Answer::Json(200, ax_deleted);
    vec![
        op!("get" p(""), "agentexListSchedules", "An agent's schedules, oldest first (include_live: with next run times; limit)", READ, Body::None,
            Answer::Json(200, || agentex_schema("ScheduleListResponse"))),
        op!("post" p(""), "agentexCreateSchedule", "A schedule: cron in an IANA time zone, or an interval; each tick opens a task with the initial input", WRITE, Body::Json(schedule_create), one),
        op!("get" p("/name/{name}"), "agentexGetScheduleByName", "One schedule by name", READ, Body::None, one),
        op!("patch" p("/name/{name}"), "agentexUpdateScheduleByName", "Change a schedule by name (only the fields sent)", WRITE, Body::Json(schedule_update), one),
        op!("delete" p("/name/{name}"), "agentexDeleteScheduleByName", "Delete a schedule by name (its tasks stay)", WRITE, Body::None, deleted),
        op!("post" p("/name/{name}/pause"), "agentexPauseScheduleByName", "Pause a schedule by name: no ticks until resumed", WRITE, Body::Json(schedule_note), one),
        op!("post" p("/name/{name}/resume"), "agentexResumeScheduleByName", "Resume a schedule by name: ticks again from now", WRITE, Body::Json(schedule_note), one),
        op!("post" p("/name/{name}/trigger"), "agentexTriggerScheduleByName", "Run a schedule by name now, outside its cadence", WRITE, Body::None, one),
        op!("get" p("/{schedule_id}"), "agentexGetSchedule", "One schedule", READ, Body::None, one),
        op!("patch" p("/{schedule_id}"), "agentexUpdateSchedule", "Change a schedule (only the fields sent)", WRITE, Body::Json(schedule_update), one),
        op!("delete" p("/{schedule_id}"), "agentexDeleteSchedule", "Delete a schedule (its tasks stay)", WRITE, Body::None, deleted),
        op!("post" p("/{schedule_id}/pause"), "agentexPauseSchedule", "Pause: no ticks until resumed", WRITE, Body::Json(schedule_note), one),
        op!("post" p("/{schedule_id}/resume"), "agentexResumeSchedule", "Resume: ticks again from now", WRITE, Body::Json(schedule_note), one),
        op!("post" p("/{schedule_id}/trigger"), "agentexTriggerSchedule", "Run now, outside the cadence (also while paused)", WRITE, Body::None, one),
        op!("post" p("/{schedule_id}/skip"), "agentexSkipScheduleTick", "Leave one upcoming tick out", WRITE, Body::Json(schedule_tick), one),
        op!("post" p("/{schedule_id}/unskip"), "agentexUnskipScheduleTick", "Put a skipped tick back", WRITE, Body::Json(schedule_tick), one),
    ]
});

fn webhook_schema() -> Value {
    object(
        &[
            "id",
            "url",
            "description",
            "eventTypes",
            "agent",
            "sessionId",
            "enabled",
            "createdAt",
        ],
        json!({
            "id": {"type": "string"}, "url": {"type": "string"}, "description": {"type": "string"},
            "eventTypes": {"type": "array", "items": {"enum": sessiond_core::store::outbound::EVENT_KINDS}},
            "agent": {"type": ["string", "null"]}, "sessionId": {"type": ["string", "null"]},
            "enabled": {"type": "boolean"}, "disabledAt": date_time_or_null(),
            "disabledReason": {"type": ["string", "null"]}, "failingSince": date_time_or_null(),
            "previousSecretValidUntil": date_time_or_null(),
            "createdAt": date_time(), "updatedAt": date_time(),
            "secret": {"type": "string", "pattern": "^whsec_", "description": "Only in the answers of creation and rotation"}
        }),
    )
}

fn webhook_spec_schema() -> Value {
    json!({
        "type": "object", "additionalProperties": false,
        "properties": {
            "url": {"type": "string"}, "description": {"type": "string"},
            "eventTypes": {"type": "array", "items": {"enum": sessiond_core::store::outbound::EVENT_KINDS}},
            "agent": {"type": ["string", "null"]}, "sessionId": {"type": ["string", "null"]},
            "enabled": {"type": "boolean"}
        }
    })
}

fn webhook_delivery_schema() -> Value {
    object(
        &["id", "eventType", "state", "attempts", "createdAt"],
        json!({
            "id": {"type": "string", "description": "The webhook-id every attempt carries"},
            "eventType": {"type": "string"}, "state": {"enum": ["pending", "delivered", "failed"]},
            "attempts": {"type": "integer"}, "nextAttemptAt": date_time_or_null(),
            "lastStatus": {"type": ["integer", "null"]}, "lastError": {"type": ["string", "null"]},
            "lastLatencyMs": {"type": ["integer", "null"]}, "lastAttemptAt": date_time_or_null(),
            "deliveredAt": date_time_or_null(), "createdAt": date_time(),
            "payload": {"type": "object"},
            "attemptLog": list_of(object(&["attempt", "startedAt", "latencyMs"], json!({
                "attempt": {"type": "integer"}, "startedAt": date_time(),
                "status": {"type": ["integer", "null"]}, "latencyMs": {"type": "integer"},
                "error": {"type": ["string", "null"]}
            })))
        }),
    )
}

/// Outbound webhooks: a workspace's subscriptions and their delivery logs.
pub static WEBHOOKS: LazyLock<Vec<Op>> = LazyLock::new(|| {
    let p = |rest: &str| -> &'static str { format!("{WS}/webhooks{rest}").leak() };
    vec![
        op!("get" p(""), "listWebhooks", "The workspace's webhook subscriptions", READ, Body::None,
            Answer::Json(200, || object(&["webhooks"], json!({"webhooks": list_of(webhook_schema())})))),
        op!("post" p(""), "createWebhook", "Subscribe an endpoint (url required) to events; answers its whsec_ secret, shown this once", WRITE, Body::Json(webhook_spec_schema), Answer::Json(201, webhook_schema)),
        op!("get" p("/{webhookId}"), "getWebhook", "One subscription", READ, Body::None, Answer::Json(200, webhook_schema)),
        op!("patch" p("/{webhookId}"), "updateWebhook", "Change a subscription's URL, filters or description; enable or disable it", WRITE, Body::Json(webhook_spec_schema), Answer::Json(200, webhook_schema)),
        op!("delete" p("/{webhookId}"), "deleteWebhook", "Remove a subscription with its outbox and log", WRITE, Body::None, Answer::Empty(204)),
        op!("post" p("/{webhookId}/rotate"), "rotateWebhookSecret", "A new secret, shown this once; the old one also signs for overlapMs", WRITE,
            Body::Json(|| json!({"type": "object", "additionalProperties": false, "properties": {"overlapMs": {"type": "integer", "minimum": 0}}})),
            Answer::Json(200, webhook_schema)),
        op!("get" p("/{webhookId}/deliveries"), "listWebhookDeliveries", "The delivery log, newest first (limit, before)", READ, Body::None,
            Answer::Json(200, || object(&["deliveries"], json!({"deliveries": list_of(webhook_delivery_schema()), "nextBefore": {"type": ["string", "null"]}})))),
        op!("get" p("/{webhookId}/deliveries/{deliveryId}"), "getWebhookDelivery", "One message: its payload and every attempt", READ, Body::None, Answer::Json(200, webhook_delivery_schema)),
        op!("post" p("/{webhookId}/deliveries/{deliveryId}/redeliver"), "redeliverWebhook", "Send a message again now, with the same webhook-id", WRITE, Body::None, Answer::Json(202, webhook_delivery_schema)),
    ]
});

fn import_report_schema() -> Value {
    let ids = || json!({"type": "array", "items": {"type": "string"}});
    object(
        &["imported", "unchanged", "filesWritten", "filesPresent"],
        json!({"imported": ids(), "unchanged": ids(), "filesWritten": ids(), "filesPresent": ids()}),
    )
}

/// Portable archives (sessiond's extension of the Sessions API).
pub static ARCHIVES: LazyLock<Vec<Op>> = LazyLock::new(|| {
    vec![
        op!("get" format!("{WS}/agent/sessions/{{sessionId}}/export").leak(), "exportSession",
            "One session as a portable archive (409 session_busy while a turn runs)", READ, Body::None, Answer::Tar),
        op!("get" format!("{WS}/export").leak(), "exportWorkspace",
            "Every session of the workspace at rest, or of one agent (?agent=SLUG), as one archive (owners only)", READ, Body::None, Answer::Tar),
        op!("post" format!("{WS}/import").leak(), "importArchive",
            "Import an archive (the tar file an export made, sent as it is): idempotent by its ids; a changed member, an id of another workspace or a drive path holding other bytes refuses it whole (owners only)", WRITE, Body::Bytes, Answer::Json(200, import_report_schema)),
    ]
});

fn retention_policy_schema() -> Value {
    object(
        &["enabled", "idleDays", "keepLatest", "action"],
        json!({
            "enabled": {"type": "boolean"},
            "idleDays": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 36500},
            "keepLatest": {"type": ["integer", "null"], "minimum": 1, "maximum": 1000000},
            "action": {"enum": ["delete", "archive"]}
        }),
    )
}

fn pin_schema() -> Value {
    object(&["pinned"], json!({"pinned": {"type": "boolean"}}))
}

/// Retention policies and pins (sessiond's extension of the Sessions API).
pub static RETENTION: LazyLock<Vec<Op>> = LazyLock::new(|| {
    vec![
        op!("get" format!("{WS}/retention").leak(), "getRetention", "The workspace's retention policy", READ, Body::None, Answer::Json(200, retention_policy_schema)),
        op!("put" format!("{WS}/retention").leak(), "setRetention",
            "Set the retention policy (owners only): remove sessions idle for more than idleDays, keeping the newest keepLatest of each agent; action delete, or archive (to a file) then delete; both rules null remove the policy",
            WRITE, Body::Json(|| json!({"type": "object", "properties": {
                "idleDays": {"type": ["number", "null"]}, "keepLatest": {"type": ["integer", "null"]}, "action": {"enum": ["delete", "archive"]}
            }, "additionalProperties": false})), Answer::Json(200, retention_policy_schema)),
        op!("get" format!("{WS}/retention/preview").leak(), "previewRetention", "The sessions the policy removes now (a dry run)", READ, Body::None,
            Answer::Json(200, || object(&["policy", "sessions"], json!({"policy": retention_policy_schema(), "sessions": list_of(object(&["id", "agent", "title", "updatedAt"], json!({"id": {"type": "string"}, "agent": {"type": "string"}, "title": {"type": "string"}, "updatedAt": {"type": "integer"}})))})))),
        op!("get" format!("{WS}/agent/sessions/{{sessionId}}/pin").leak(), "getPin", "Whether the session is pinned (kept from every retention policy)", READ, Body::None, Answer::Json(200, pin_schema)),
        op!("put" format!("{WS}/agent/sessions/{{sessionId}}/pin").leak(), "setPin", "Pin or unpin the session: a pinned session is never removed by retention", WRITE, Body::Json(pin_schema), Answer::Json(200, pin_schema)),
    ]
});

/// The MCP server (`/mcp`): one JSON-RPC message per POST (see `sessiond_core::mcp` for the methods).
pub static MCP: LazyLock<Vec<Op>> = LazyLock::new(|| {
    vec![
        op!("post" "/mcp", "mcpMessage", "One MCP JSON-RPC message; initialize opens an MCP session, named by the Mcp-Session-Id header every later request sends (sessions:read connects; the tools that write need sessions)", READ, Body::Json(mcp_message), Answer::Mcp),
        op!("get" "/mcp", "mcpStream", "The MCP session's notifications (resource updates), or with Last-Event-ID the rest of a lost stream", READ, Body::None, Answer::Mcp),
        op!("delete" "/mcp", "mcpEndSession", "End the MCP session named by Mcp-Session-Id", READ, Body::None, Answer::Empty(204)),
    ]
});

/// A JSON-RPC 2.0 message as MCP sends it.
fn mcp_message() -> Value {
    json!({
        "type": "object",
        "required": ["jsonrpc"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer"]},
            "method": {"type": "string"},
            "params": {"type": "object"},
            "result": {"type": "object"},
            "error": {"type": "object"},
        },
    })
}

/// A JSON-RPC response: a result or an error object.
fn mcp_answer() -> Value {
    json!({
        "type": "object",
        "required": ["jsonrpc"],
        "properties": {
            "jsonrpc": {"const": "2.0"},
            "id": {"type": ["string", "integer", "null"]},
            "result": {"type": "object"},
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "integer"}, "message": {"type": "string"}, "data": {}},
            },
        },
    })
}

/// Every family's operations, in the document's order.
/// A2A (`api/a2a.rs`): each agent an A2A server, its card and its JSON-RPC endpoint.
pub static A2A: LazyLock<Vec<Op>> = LazyLock::new(|| {
    use crate::a2a::{card_schema, cards_schema, rpc_request, rpc_response};
    vec![
        op!("get" "/a2a", "a2aCards", "The Agent Cards of the workspace's agents", READ, Body::None, Answer::Json(200, cards_schema)),
        op!("get" "/a2a/{agentSlug}/.well-known/agent-card.json", "a2aAgentCard", "An agent's A2A Agent Card", READ, Body::None, Answer::Json(200, card_schema)),
        op!("post" "/a2a/{agentSlug}", "a2aRpc", "A2A 1.0 JSON-RPC: SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, push-notification configs (reads need sessions:read, the rest sessions)", READ, Body::Json(rpc_request), Answer::A2aRpc(rpc_response)),
    ]
});

pub fn operations() -> Vec<Op> {
    [
        &*SERVER,
        &*AUTH,
        &*SESSIONS,
        &*AGENTS,
        &*WEBHOOKS,
        &*KEYS,
        &*UPLOADS,
        &*FILES,
        &*ARCHIVES,
        &*RETENTION,
        &*TASK_EVENTS,
        &*AGENTEX,
        &*AGENTEX_SCHEDULES,
        &*A2A,
        &*MCP,
    ]
    .into_iter()
    .flat_map(|ops| ops.iter().copied())
    .collect()
}

/// The seed's file-name stem of an operation (`POST_v1_ws__workspaceSlug__agent_sessions`).
fn seed_stem(op: &Op) -> String {
    format!(
        "{}{}",
        op.method.to_uppercase(),
        op.path.replace(['/', '{', '}'], "_")
    )
}

fn seed_schema(name: &str) -> Option<Value> {
    let file = SessionSchemas::get(name)?;
    let mut v: Value = serde_json::from_slice(&file.data).ok()?;
    if let Some(m) = v.as_object_mut() {
        m.remove("$schema");
    }
    Some(v)
}

/// A `text/event-stream` response whose every event fits `event` (an OpenAPI 3.1 document has no
/// `itemSchema`, so the media type's `schema` describes one event: `{event, data, id?, retry?}`
/// as an SSE parser reads it, `event` being `message` when the frame names none).
fn event_stream(description: &str, event: Value) -> Value {
    let mut schema = json!({"type": "object", "required": ["event", "data"]});
    if let (Some(out), Some(more)) = (schema.as_object_mut(), event.as_object()) {
        out.extend(more.clone());
    }
    json!({"description": description, "content": {"text/event-stream": {"schema": schema}}})
}

/// A string holding JSON that fits `schema` (an event's `data`).
fn json_text(schema: Value) -> Value {
    json!({"type": "string", "contentMediaType": "application/json", "contentSchema": schema})
}

/// The `id:` of a durable event: its sequence number.
fn seq_id() -> Value {
    json!({"type": "string", "pattern": "^[1-9][0-9]*$"})
}

fn component(name: &str) -> Value {
    json!({ "$ref": format!("#/components/schemas/{name}") })
}

fn error_response(what: &str) -> Value {
    json!({"description": what, "content": {"application/json": {"schema": component("Error")}}})
}

fn security(access: Access) -> Value {
    match access {
        Access::Public => json!([]),
        Access::Scope(_) | Access::Signed => json!([{"apiKey": []}, {"browserSession": []}]),
        Access::UploadToken => json!([{"uploadToken": []}]),
        Access::WebhookSignature => json!([]),
    }
}

fn parameters(op: &Op, stem: &str) -> Vec<Value> {
    let mut out: Vec<Value> = op
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| json!({"name": name, "in": "path", "required": true, "schema": {"type": "string", "minLength": 1}}))
        .collect();
    if let Some(q) = seed_schema(&format!("{stem}.query.json")) {
        let required: Vec<&str> = q["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(props) = q["properties"].as_object() {
            for (name, schema) in props {
                out.push(json!({
                    "name": name, "in": "query", "required": required.contains(&name.as_str()),
                    "schema": schema,
                }));
            }
        }
    }
    out
}

fn operation(op: &Op, schemas: &mut Map<String, Value>) -> Value {
    let stem = seed_stem(op);
    let mut o = json!({
        "operationId": op.id,
        "summary": op.summary,
        "security": security(op.access),
        "parameters": parameters(op, &stem),
    });
    if let Access::Scope(scope) = op.access {
        o["x-sessiond-scope"] = json!(scope);
    }
    if op.access == Access::WebhookSignature {
        o["x-sessiond-signature"] = json!(
            "X-Hub-Signature-256 (GitHub), or X-Slack-Signature with X-Slack-Request-Timestamp (Slack)"
        );
    }
    if let Some(p) = o["parameters"].as_array_mut() {
        p.extend(task_query(op.id));
        p.extend(super::session_state::openapi_params(op.id));
        p.extend(usage_query(op.id));
        p.extend(files_query(op.id));
    }
    if matches!(op.answer, Answer::Events | Answer::HastEvents)
        && let Some(p) = o["parameters"].as_array_mut()
    {
        p.push(json!({"name": "Last-Event-ID", "in": "header", "required": false, "schema": {"type": "string", "pattern": "^[0-9]+$"}}));
    }
    match op.body {
        Body::None => {}
        Body::Seed => {
            let name = format!("{stem}.request");
            if let Some(s) = seed_schema(&format!("{name}.json")) {
                schemas.insert(name.clone(), s);
                o["requestBody"] = json!({"required": true, "content": {"application/json": {"schema": component(&name)}}});
            }
        }
        Body::Json(schema) => {
            o["requestBody"] =
                json!({"required": true, "content": {"application/json": {"schema": schema()}}});
        }
        Body::Bytes => {
            o["requestBody"] = json!({"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}});
        }
    }
    let mut responses = Map::new();
    if matches!(op.answer, Answer::NotImplemented) {
        o["tags"] = json!(["not-implemented"]);
    }
    match op.answer {
        Answer::Seed => {
            let name = format!("{stem}.response");
            let schema = seed_schema(&format!("{name}.json")).map(|s| {
                let s = super::session_state::widen_response(op.id, s);
                schemas.insert(name.clone(), s);
                component(&name)
            });
            let body = json!({"description": "OK", "content": {"application/json": {"schema": schema.unwrap_or(json!({}))}}});
            if op.path.ends_with("/wait") {
                responses.insert("202".into(), json!({"description": "The deadline passed first: still pending", "content": body["content"].clone()}));
            }
            responses.insert("200".into(), body);
        }
        Answer::Json(status, schema) => {
            responses.insert(
                status.to_string(),
                json!({"description": "OK", "content": {"application/json": {"schema": schema()}}}),
            );
        }
        Answer::Events => {
            let name = format!("{stem}.response");
            let data = seed_schema(&format!("{name}.json")).map_or(json!({}), |s| {
                schemas.insert(name.clone(), s);
                component(&name)
            });
            responses.insert(
                "200".into(),
                event_stream(
                    "Server-Sent Events: `id: <seq>` and `data: {\"seq\",\"event\"}` for durable events, `data: {\"event\"}` for live progress",
                    json!({"properties": {"event": {"const": "message"}, "id": seq_id(), "data": json_text(data)}}),
                ),
            );
        }
        Answer::HastEvents => {
            responses.insert(
                "200".into(),
                event_stream(
                    "Server-Sent Events: `id: <sequence>` (durable events only), `event: <type>`, `data: <HAST envelope>`; with snapshots=true also `event: session/snapshot` frames without `id:`",
                    json!({"oneOf": [
                        {"properties": {"event": {"const": "session/snapshot"}, "data": json_text(component("SessionRecord"))}},
                        {"properties": {"event": {"type": "string", "not": {"const": "session/snapshot"}}, "id": seq_id(), "data": json_text(component("HastEnvelope"))}}
                    ]}),
                ),
            );
        }
        Answer::TaskUpdates => {
            responses.insert(
                "200".into(),
                event_stream(
                    "Server-Sent Events, each `data: <JSON>` without `event:` or `id:`: `connected` first, then the task's message updates (`start`, `delta`, `full`, `done`), `task_updated` when its status changes and `error` when it is deleted; the stream ends after a final status",
                    json!({"properties": {"event": {"const": "message"}, "data": json_text(ax_task_stream_item())}}),
                ),
            );
        }
        Answer::Tar => {
            responses.insert(
                "200".into(),
                json!({"description": "A portable archive: a tar file of the sessions' events.jsonl, session.json, record.json, usage.json and store.json, their images and attached drive files, and manifest.json (last) with every member's SHA-256", "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}),
            );
        }
        Answer::File => {
            responses.insert(
                "200".into(),
                json!({"description": "The file's bytes: its guessed type and `Content-Disposition: attachment`, or with inline=1 `inline` (text as text/plain); always `X-Content-Type-Options: nosniff` and `Content-Security-Policy: default-src 'none'; sandbox`", "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}}}),
            );
        }
        Answer::Image => {
            responses.insert(
                "200".into(),
                json!({"description": "The image, with its own type", "content": {"image/*": {"schema": {"type": "string", "format": "binary"}}}}),
            );
        }
        Answer::Rpc(schema) => {
            responses.insert(
                "200".into(),
                json!({"description": "A JSON-RPC response (errors too) as one line; a streamed `message/send` answers one `TaskMessageUpdate` per line", "content": {
                    "application/json": {"schema": schema()},
                    "application/x-ndjson": {"schema": {"type": "string"}}
                }}),
            );
            responses.insert(
                "204".into(),
                json!({"description": "A notification (`\"jsonrpc\": \"2.0\"` without `id`): carried out, no JSON-RPC response"}),
            );
        }
        Answer::A2aRpc(schema) => {
            responses.insert(
                "200".into(),
                json!({"description": "A JSON-RPC response (A2A's errors too); `SendStreamingMessage` and `SubscribeToTask` answer Server-Sent Events, `id: <seq>` and `data: <JSON-RPC response of a StreamResponse>`", "content": {
                    "application/json": {"schema": schema()},
                    "text/event-stream": {"schema": {"type": "string"}}
                }}),
            );
        }
        Answer::Empty(status) => {
            responses.insert(status.to_string(), json!({"description": "Done; no body"}));
        }
        Answer::Mcp => {
            let mut ok = event_stream(
                "A JSON-RPC response as JSON; a tool call that follows a turn answers with SSE: `id: <stream>-<n>` on every event (the first, `-0`, has empty data), `data:` one JSON-RPC message (progress notifications, then the response). GET streams carry notifications the same way",
                json!({"properties": {"event": {"const": "message"}, "id": {"type": "string", "pattern": "^[0-9]+-[0-9]+$"}, "data": {"type": "string"}}}),
            );
            ok["content"]["application/json"] = json!({"schema": mcp_answer()});
            responses.insert("200".into(), ok);
            responses.insert(
                "202".into(),
                json!({"description": "A notification or a response of the client: accepted, no body"}),
            );
            let refused = json!({"content": {"application/json": {"schema": {"anyOf": [mcp_answer(), component("Error")]}}}});
            for (status, why) in [
                (
                    "400",
                    "Malformed JSON-RPC (parse error, invalid request) or no Mcp-Session-Id: a JSON-RPC error object",
                ),
                (
                    "404",
                    "The MCP session is gone or not the caller's: initialize a new one",
                ),
                ("413", "The body is larger than limits.max_body_bytes"),
                ("415", "The body is not JSON"),
                ("429", "This process holds too many MCP sessions"),
            ] {
                let mut r = refused.clone();
                r["description"] = json!(why);
                responses.insert(status.into(), r);
            }
        }
        Answer::NotImplemented => {
            responses.insert(
                "501".into(),
                error_response(
                    "sessiond does not carry this operation out (`not_implemented`, with why)",
                ),
            );
        }
    }
    responses.insert(
        "default".into(),
        error_response("An error: `{error, message}` (seed-defined shapes such as `invalid_cwd` carry `reason`)"),
    );
    o["responses"] = Value::Object(responses);
    o
}

/// The whole document.
pub fn document() -> Value {
    let mut schemas = Map::new();
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["error"],
            "properties": {
                "error": {"type": "string", "description": "A stable code to switch on"},
                "message": {"type": "string"},
                "reason": {"type": "string", "description": "invalid_cwd: missing, not_a_directory, outside_drive or outside_agent_anchor"}
            }
        }),
    );
    schemas.insert(
        "SessionRecord".into(),
        with_fork_lineage(task_schema(
            include_str!("../../../schemas/session-record.json"),
            "/properties/harness/enum",
            crate::v2::HARNESSES.to_vec(),
        )),
    );
    schemas.insert(
        "HastEnvelope".into(),
        task_schema(
            include_str!("../../../schemas/event-stream/envelope.json"),
            "/properties/engine/enum",
            crate::v2::HARNESSES
                .iter()
                .copied()
                .map(sessiond_core::hast::engine_of)
                .chain(["pi_agent_cli"])
                .collect(),
        ),
    );
    let mut paths = Map::new();
    for op in operations() {
        let item = operation(&op, &mut schemas);
        let entry = paths.entry(op.path.to_owned()).or_insert_with(|| json!({}));
        entry[op.method] = item;
    }
    with_busy_policy(&mut schemas);
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "sessiond",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Durable agent sessions on one machine. Errors are JSON `{error, message}`; every response carries `X-Request-Id`.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer", "description": "An API key (`sessiond token create`, `sessiond app create`)"},
                "browserSession": {"type": "apiKey", "in": "cookie", "name": sessiond_core::auth::COOKIE, "description": "The web UI's session (POST /auth/login); unsafe requests must come from this server's origin"},
                "uploadToken": {"type": "http", "scheme": "bearer", "description": "An upload grant's token (POST …/attachments/session)"}
            }
        }
    })
}

static DOCUMENT: LazyLock<String> = LazyLock::new(|| document().to_string());

/// `GET /openapi.json`.
pub async fn serve() -> HttpResponse {
    HttpResponse::Ok()
        .content_type("application/json")
        .body(DOCUMENT.as_str())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use actix_web::dev::Service;
    use actix_web::{App, test as web_test};

    use super::*;

    /// Full patterns of every routed resource, read from the router's resource map (its debug
    /// form is the only enumeration actix offers): nested scopes' prefixes joined to their
    /// resources.
    fn registered_patterns(rmap_debug: &str) -> Vec<String> {
        // Tokens in order: `patterns: Single("…"), is_prefix: …`, `nodes: Some([` and `])`.
        let mut out = Vec::new();
        let mut stack: Vec<String> = Vec::new();
        let mut pending: Option<(String, bool)> = None;
        let mut rest = rmap_debug;
        loop {
            let next_pat = rest.find("patterns: Single(\"");
            let next_open = rest.find("nodes: Some([");
            let next_none = rest.find("nodes: None");
            // The end of a node list: its last map's `}` then `])` (a regex in a pattern may hold
            // `])` too, never `}])`).
            let next_close = rest.find("}])");
            let Some(pos) = [next_pat, next_open, next_none, next_close]
                .into_iter()
                .flatten()
                .min()
            else {
                break;
            };
            if Some(pos) == next_pat {
                let start = pos + "patterns: Single(\"".len();
                let end = start + rest[start..].find('"').expect("pattern end");
                let pattern = rest[start..end].to_owned();
                let prefix = rest[end..]
                    .trim_start_matches("\"),")
                    .trim_start()
                    .starts_with("is_prefix: true");
                pending = Some((pattern, prefix));
                rest = &rest[end..];
            } else if Some(pos) == next_open {
                let (p, _) = pending.take().unwrap_or_default();
                rest = &rest[pos + "nodes: Some([".len()..];
                // An empty scope: `Some([])`.
                match rest.strip_prefix("])") {
                    Some(after) => rest = after,
                    None => stack.push(p),
                }
            } else if Some(pos) == next_none {
                if let Some((p, _)) = pending.take() {
                    out.push(format!("{}{p}", stack.concat()));
                }
                rest = &rest[pos + "nodes: None".len()..];
            } else {
                stack.pop();
                rest = &rest[pos + 3..];
            }
        }
        out
    }

    #[test]
    fn the_document_covers_every_registered_route_and_nothing_else() {
        actix_web::rt::System::new().block_on(covers_every_registered_route());
    }

    async fn covers_every_registered_route() {
        let seen = std::rc::Rc::new(std::cell::RefCell::new(String::new()));
        let s = std::rc::Rc::clone(&seen);
        let app = web_test::init_service(
            App::new()
                .wrap_fn(move |req, srv| {
                    *s.borrow_mut() = format!("{:?}", req.request().resource_map());
                    srv.call(req)
                })
                .configure(crate::routes_with_ui),
        )
        .await;
        let _ = web_test::call_service(
            &app,
            web_test::TestRequest::get().uri("/healthz").to_request(),
        )
        .await;
        let patterns = registered_patterns(&seen.borrow());
        assert!(patterns.len() > 30, "{patterns:?}");
        // The web UI's pages are not an API.
        const UI: [&str; 5] = ["/", "/setup", "/login", "/reset", "/ui/{path:.*}"];
        let mut registered = BTreeSet::new();
        for pattern in patterns.iter().filter(|p| !UI.contains(&p.as_str())) {
            // A request with a method no route has: the resource answers 405 with what it allows.
            let uri = pattern.replace(['{', '}'], "");
            let res = web_test::call_service(
                &app,
                web_test::TestRequest::default()
                    .method(actix_web::http::Method::from_bytes(b"PROBE").expect("method"))
                    .uri(&uri)
                    .to_request(),
            )
            .await;
            assert_eq!(
                res.status(),
                405,
                "{pattern}: every API resource lists its methods"
            );
            let allow = res
                .headers()
                .get("allow")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            // A tail parameter's pattern (`{path:.*}`) is documented as the parameter.
            let documented = pattern.replace(":.*}", "}");
            for m in allow.split(',') {
                registered.insert((m.trim().to_lowercase(), documented.clone()));
            }
        }
        let documented: BTreeSet<(String, String)> = operations()
            .iter()
            .map(|o| (o.method.to_owned(), o.path.to_owned()))
            .collect();
        let missing: Vec<_> = registered.difference(&documented).collect();
        let stale: Vec<_> = documented.difference(&registered).collect();
        assert!(
            missing.is_empty(),
            "routes the OpenAPI document lacks (add them to a family's table in api/openapi.rs): {missing:?}"
        );
        assert!(
            stale.is_empty(),
            "documented routes that are not registered: {stale:?}"
        );
    }

    #[test]
    fn seed_schemas_are_found_for_every_seed_operation() {
        let doc = document();
        for op in SESSIONS.iter() {
            let o = &doc["paths"][op.path][op.method];
            if matches!(op.body, Body::Seed) {
                assert!(
                    o["requestBody"].is_object(),
                    "{} {}: no request schema",
                    op.method,
                    op.path
                );
            }
            if matches!(op.answer, Answer::Seed) {
                assert!(
                    o["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
                        .is_string(),
                    "{} {}: no response schema",
                    op.method,
                    op.path
                );
            }
        }
        let ids: BTreeSet<&str> = operations().iter().map(|o| o.id).collect();
        assert_eq!(ids.len(), operations().len(), "operationIds are unique");
    }
}
