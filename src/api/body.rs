//! Reading requests: bounded bodies, schema-checked JSON, typed query strings and the request
//! fingerprint behind `clientRequestId` idempotency.

use actix_web::{HttpRequest, web};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::schema;
use crate::error::{Error, Result};

/// Reads the whole body, refusing anything over `limit` bytes (413) before buffering it.
pub async fn read_limited(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::BytesMut> {
    if let Some(len) = req
        .headers()
        .get(actix_web::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        && len > limit
    {
        return Err(Error::PayloadTooLarge { limit });
    }
    let mut body = web::BytesMut::new();
    while let Some(chunk) = payload.next().await {
        let chunk = chunk.map_err(|e| Error::invalid(format!("body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(Error::PayloadTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A JSON body checked against its seed schema, decoded into `T`; the raw value is kept for the
/// fingerprint.
pub struct Json<T> {
    pub value: T,
    pub raw: Value,
}

pub async fn json<T: DeserializeOwned>(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
    schema_file: &str,
) -> Result<Json<T>> {
    let raw = json_value(req, payload, limit).await?;
    schema::check(schema_file, &raw)?;
    let value = typed(&raw)?;
    Ok(Json { value, raw })
}

/// A bounded body that must be JSON (bodies no seed schema describes; their type checks them).
pub async fn json_value(req: &HttpRequest, payload: web::Payload, limit: usize) -> Result<Value> {
    let bytes = read_limited(req, payload, limit).await?;
    if bytes.is_empty() {
        return Err(Error::invalid("body: a JSON object is required"));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| Error::invalid(format!("body: malformed JSON ({e})")))
}

/// Decodes a JSON value into `T`; the error names the failing field.
pub fn typed<T: DeserializeOwned>(raw: &Value) -> Result<T> {
    serde_path_to_error::deserialize(raw)
        .map_err(|e| Error::invalid(format!("{}: {}", e.path(), e.inner())))
}

/// Query parameters as `(name, value)` pairs; a repeated name keeps its last value.
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(req: &HttpRequest) -> Result<Query> {
        serde_urlencoded::from_str::<Vec<(String, String)>>(req.query_string())
            .map(Query)
            .map_err(|_| Error::invalid("query: malformed query string"))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A `Uint53` parameter (0 ..= 2^53-1).
    pub fn uint53(&self, name: &str) -> Result<Option<u64>> {
        self.get(name).map(|v| parse_uint53(name, v)).transpose()
    }

    /// An integer `limit` within `1..=max`, `default` when absent.
    pub fn limit(&self, name: &str, default: u32, max: u32) -> Result<u32> {
        match self.get(name) {
            None => Ok(default.min(max)),
            Some(v) => match v.parse::<u32>() {
                Ok(n) if (1..=max).contains(&n) => Ok(n),
                _ => Err(Error::invalid(format!(
                    "{name}: must be an integer from 1 to {max}"
                ))),
            },
        }
    }
}

pub const MAX_SAFE: u64 = (1 << 53) - 1;

pub fn parse_uint53(name: &str, v: &str) -> Result<u64> {
    match v.parse::<u64>() {
        Ok(n) if n <= MAX_SAFE && !v.starts_with('+') => Ok(n),
        _ => Err(Error::invalid(format!(
            "{name}: must be an integer from 0 to {MAX_SAFE}"
        ))),
    }
}

/// Key order and whitespace do not make two requests different.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                canonical(&map[*k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// What makes a retry "the same request": the operation, its target and its body.
/// `clientRequestId` is matched case-insensitively (it is stored lowercased), so its case is not
/// part of the fingerprint either.
pub fn fingerprint(operation: &str, target: &str, body: &Value) -> String {
    let mut text = String::new();
    match body.get("clientRequestId").and_then(Value::as_str) {
        Some(id) if id.bytes().any(|b| b.is_ascii_uppercase()) => {
            let mut body = body.clone();
            body["clientRequestId"] = Value::String(id.to_ascii_lowercase());
            canonical(&body, &mut text);
        }
        _ => canonical(body, &mut text),
    }
    let mut h = Sha256::new();
    h.update(operation.as_bytes());
    h.update([0]);
    h.update(target.as_bytes());
    h.update([0]);
    h.update(text.as_bytes());
    crate::secret::hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprint_ignores_key_order() {
        let a = json!({"prompt": "x", "tier": "economy"});
        let b: Value = serde_json::from_str(r#"{"tier":"economy","prompt":"x"}"#).unwrap();
        assert_eq!(fingerprint("create", "", &a), fingerprint("create", "", &b));
        assert_ne!(
            fingerprint("create", "", &a),
            fingerprint("message", "", &a)
        );
    }

    #[test]
    fn fingerprint_ignores_client_request_id_case() {
        let a = json!({"prompt": "x", "clientRequestId": "4b27f182-b3e8-47c4-9fb8-5a488243ab92"});
        let b = json!({"prompt": "x", "clientRequestId": "4B27F182-B3E8-47C4-9FB8-5A488243AB92"});
        assert_eq!(fingerprint("create", "", &a), fingerprint("create", "", &b));
    }

    #[test]
    fn uint53_bounds() {
        assert_eq!(parse_uint53("x", "0").unwrap(), 0);
        assert!(parse_uint53("x", "9007199254740992").is_err());
        assert!(parse_uint53("x", "-1").is_err());
        assert!(parse_uint53("x", "+1").is_err());
    }
}
