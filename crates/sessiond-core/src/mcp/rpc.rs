//! JSON-RPC 2.0 as MCP uses it: the envelope of one message, error objects, and the mapping of
//! the core's errors onto them.

use serde_json::{Value, json};

use crate::error::Error;

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP's code for a resource that does not exist (or that the caller may not see).
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// A JSON-RPC error object.
#[derive(Debug, Clone)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }

    /// A core error met outside a tool (a tool's own errors are its result, see
    /// [`crate::mcp::tools`]): the client's mistakes are invalid params, the rest internal, with
    /// sessiond's error code in `data`.
    pub fn from_error(e: &Error) -> RpcError {
        let code = match e {
            Error::NotFound | Error::AgentNotFound => RESOURCE_NOT_FOUND,
            Error::InvalidRequest(_)
            | Error::Forbidden(_)
            | Error::PayloadTooLarge { .. }
            | Error::TooManyStreams => INVALID_PARAMS,
            _ => INTERNAL_ERROR,
        };
        RpcError {
            code,
            message: shown_message(e),
            data: Some(json!({ "error": e.code() })),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut error = json!({ "code": self.code, "message": self.message });
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// What a client is told of an error: storage faults and bugs are logged, never shown.
pub fn shown_message(e: &Error) -> String {
    match e {
        Error::Storage(_) | Error::Internal(_) => {
            tracing::error!(error = %e, "mcp request failed");
            "internal error".to_owned()
        }
        other => other.to_string(),
    }
}

/// One message a client sent.
#[derive(Debug)]
pub enum Message {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
    },
    /// A response to a request of ours (sessiond sends none, so it is only acknowledged).
    Response,
}

/// Reads one message; the error is the answer to send (with the request's id when it had a
/// usable one, else `null`).
pub fn parse(raw: &Value) -> Result<Message, (Value, RpcError)> {
    let invalid = |id: Value, why: &str| Err((id, RpcError::new(INVALID_REQUEST, why)));
    let Some(obj) = raw.as_object() else {
        return invalid(
            Value::Null,
            if raw.is_array() {
                "batches are not supported: send one JSON-RPC message per request"
            } else {
                "a JSON-RPC message must be an object"
            },
        );
    };
    let id = match obj.get("id") {
        None => None,
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id.clone()),
        Some(_) => return invalid(Value::Null, "id: must be a string or a number"),
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id.unwrap_or(Value::Null), "jsonrpc: must be \"2.0\"");
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return invalid(id.unwrap_or(Value::Null), "method: must be a string"),
        None if id.is_some() && (obj.contains_key("result") || obj.contains_key("error")) => {
            return Ok(Message::Response);
        }
        None => return invalid(id.unwrap_or(Value::Null), "method: missing"),
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err((
                id.unwrap_or(Value::Null),
                RpcError::invalid_params("params: must be an object"),
            ));
        }
    };
    Ok(match id {
        Some(id) => Message::Request { id, method, params },
        None => Message::Notification { method },
    })
}

/// `{"jsonrpc":"2.0","id":…,"result":…}`.
pub fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// `{"jsonrpc":"2.0","id":…,"error":…}`.
pub fn error(id: &Value, e: &RpcError) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": e.to_json() })
}

/// A notification from the server.
pub fn notification(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": method, "params": params })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes() {
        assert!(matches!(
            parse(&json!({"jsonrpc":"2.0","id":1,"method":"ping"})),
            Ok(Message::Request { .. })
        ));
        assert!(matches!(
            parse(&json!({"jsonrpc":"2.0","method":"notifications/initialized"})),
            Ok(Message::Notification { .. })
        ));
        assert!(matches!(
            parse(&json!({"jsonrpc":"2.0","id":1,"result":{}})),
            Ok(Message::Response)
        ));
        let refused = |v: Value| parse(&v).err().map(|(_, e)| e.code);
        assert_eq!(refused(json!([])), Some(INVALID_REQUEST));
        assert_eq!(
            refused(json!({"id":1,"method":"ping"})),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            refused(json!({"jsonrpc":"2.0","id":{},"method":"ping"})),
            Some(INVALID_REQUEST)
        );
        assert_eq!(
            refused(json!({"jsonrpc":"2.0","id":1,"method":"x","params":[1]})),
            Some(INVALID_PARAMS)
        );
    }
}
