//! A2A's error objects: the JSON-RPC codes of the protocol (-32001 … -32009 for its own errors,
//! the JSON-RPC 2.0 ones for the envelope) and how the core's errors read as them. Every error
//! carries a `google.rpc.ErrorInfo` detail, as the protocol's JSON-RPC binding does, whose
//! `metadata.code` is sessiond's own stable error code.

use serde_json::{Value, json};

use crate::error::Error;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
pub const TASK_NOT_FOUND: i64 = -32001;
pub const TASK_NOT_CANCELABLE: i64 = -32002;
pub const PUSH_NOT_SUPPORTED: i64 = -32003;
pub const UNSUPPORTED_OPERATION: i64 = -32004;
pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
pub const VERSION_NOT_SUPPORTED: i64 = -32009;

const ERROR_INFO_TYPE: &str = "type.googleapis.com/google.rpc.ErrorInfo";
const DOMAIN: &str = "a2a-protocol.org";

/// One A2A error: its code, a message for people, and sessiond's code when the core made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct A2aError {
    pub code: i64,
    pub message: String,
    pub sessiond_code: Option<&'static str>,
}

pub type A2aResult<T> = std::result::Result<T, A2aError>;

/// The JSON-RPC 2.0 response object of a call: the body of a plain answer, or the data of one
/// event of a stream.
pub fn response(id: &Value, outcome: A2aResult<Value>) -> Value {
    match outcome {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": e.object() }),
    }
}

/// A JSON-RPC 2.0 response whose result is JSON text already: what a call answers over plain
/// HTTP, written without building its result again.
#[derive(serde::Serialize)]
pub struct Reply<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Box<serde_json::value::RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Value>,
}

/// The [`Reply`] of a call.
pub fn reply(id: &Value, outcome: A2aResult<Box<serde_json::value::RawValue>>) -> Reply<'_> {
    let (result, error) = match outcome {
        Ok(result) => (Some(result), None),
        Err(e) => (None, Some(e.object())),
    };
    Reply {
        jsonrpc: "2.0",
        id,
        result,
        error,
    }
}

/// A result built as a `Value`, as JSON text for a [`Reply`].
pub fn raw(outcome: A2aResult<Value>) -> A2aResult<Box<serde_json::value::RawValue>> {
    let v = outcome?;
    serde_json::value::to_raw_value(&v)
        .map_err(|e| crate::error::Error::Internal(format!("a JSON-RPC result: {e}")).into())
}

impl A2aError {
    pub fn new(code: i64, message: impl Into<String>) -> A2aError {
        A2aError {
            code,
            message: message.into(),
            sessiond_code: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> A2aError {
        A2aError::new(INVALID_PARAMS, message)
    }

    pub fn task_not_found() -> A2aError {
        A2aError::new(TASK_NOT_FOUND, "task not found")
    }

    /// The protocol's reason string for the code (`ErrorInfo.reason`).
    fn reason(&self) -> &'static str {
        match self.code {
            PARSE_ERROR => "PARSE_ERROR",
            INVALID_REQUEST => "INVALID_REQUEST",
            METHOD_NOT_FOUND => "METHOD_NOT_FOUND",
            INVALID_PARAMS => "INVALID_PARAMS",
            TASK_NOT_FOUND => "TASK_NOT_FOUND",
            TASK_NOT_CANCELABLE => "TASK_NOT_CANCELABLE",
            PUSH_NOT_SUPPORTED => "PUSH_NOTIFICATION_NOT_SUPPORTED",
            UNSUPPORTED_OPERATION => "UNSUPPORTED_OPERATION",
            CONTENT_TYPE_NOT_SUPPORTED => "CONTENT_TYPE_NOT_SUPPORTED",
            EXTENDED_CARD_NOT_CONFIGURED => "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            VERSION_NOT_SUPPORTED => "VERSION_NOT_SUPPORTED",
            _ => "INTERNAL_ERROR",
        }
    }

    /// The JSON-RPC `error` member.
    pub fn object(&self) -> Value {
        let mut metadata = json!({});
        if let Some(code) = self.sessiond_code {
            metadata["code"] = json!(code);
        }
        json!({
            "code": self.code,
            "message": self.message,
            "data": [{
                "@type": ERROR_INFO_TYPE,
                "reason": self.reason(),
                "domain": DOMAIN,
                "metadata": metadata,
            }],
        })
    }
}

impl From<crate::store::Error> for A2aError {
    fn from(e: crate::store::Error) -> A2aError {
        A2aError::from(Error::from(e))
    }
}

impl From<Error> for A2aError {
    /// A session the credential cannot see is a task that does not exist; what a session's state
    /// refuses (closed, out of budget, not asking) is an operation the task does not support
    /// now; a storage fault is an internal error whose message says what to do.
    fn from(e: Error) -> A2aError {
        let code = match &e {
            Error::NotFound => TASK_NOT_FOUND,
            Error::InvalidRequest(_)
            | Error::InvalidCwd(_)
            | Error::IdempotencyConflict
            | Error::PayloadTooLarge { .. } => INVALID_PARAMS,
            Error::NotAsking
            | Error::BudgetHit { .. }
            | Error::SessionClosed
            | Error::Conflict(..)
            | Error::ConstraintRace(_)
            | Error::CwdConflict
            | Error::Forbidden(_)
            | Error::TooManyStreams
            | Error::ShuttingDown => UNSUPPORTED_OPERATION,
            _ => INTERNAL_ERROR,
        };
        // A storage fault's detail (a path, the database's words) stays in the log.
        let message = match &e {
            Error::NotFound => "task not found".to_owned(),
            Error::Storage(_) | Error::Internal(_) => {
                tracing::error!(error = %e, "a2a call failed");
                "internal error".to_owned()
            }
            Error::StorageFull(detail) | Error::StorageUnavailable(detail) => {
                tracing::debug!(error = %detail, "a2a call refused by storage");
                "the server's storage cannot take writes now; retry later".to_owned()
            }
            other => other.to_string(),
        };
        A2aError {
            code,
            message,
            sessiond_code: Some(e.code()),
        }
    }
}
