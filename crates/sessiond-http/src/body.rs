//! Reading requests: bounded bodies, schema-checked JSON, typed query strings and the request
//! fingerprint behind `clientRequestId` idempotency.
//!
//! Every body is bounded twice: in size (413) and in time (`limits.body_timeout_ms`, 408), so a
//! client that sends a head and then nothing, or a trickle, does not hold a connection and a
//! handler for minutes. A JSON body needs a JSON `Content-Type` (415 otherwise).

use actix_web::{HttpRequest, web};
use futures_util::StreamExt;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::context::AppState;
use super::schema;
use sessiond_core::error::{Error, Result};

/// `limits.body_timeout_ms` of the server handling `req`.
pub fn body_timeout(req: &HttpRequest) -> std::time::Duration {
    let ms = req
        .app_data::<web::Data<AppState>>()
        .map_or(30_000, |s| s.sessions.config().limits.body_timeout_ms);
    std::time::Duration::from_millis(ms)
}

/// Reads the whole body, refusing anything over `limit` bytes (413) before buffering it, and a
/// body that has not arrived within `limits.body_timeout_ms` (408).
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
    let timeout = body_timeout(req);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut body = web::BytesMut::new();
    loop {
        let chunk = match tokio::time::timeout_at(deadline, payload.next()).await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(_) => return Err(Error::RequestTimeout(timeout.as_millis() as u64)),
        };
        let chunk = chunk.map_err(|e| Error::invalid(format!("body: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(Error::PayloadTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `application/json`, or any `…+json` type, with or without parameters.
fn is_json_type(value: &str) -> bool {
    let essence = value.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence
            .rsplit_once('+')
            .is_some_and(|(_, suffix)| suffix.eq_ignore_ascii_case("json"))
}

/// Refuses a body that says it is not JSON, or says nothing about what it is (415). A request
/// without a body and without a type passes (the handler says what it is missing).
pub fn require_json(req: &HttpRequest) -> Result<()> {
    use actix_web::http::header;
    let has_body = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0")
        || req.headers().contains_key(header::TRANSFER_ENCODING);
    match req.headers().get(header::CONTENT_TYPE) {
        Some(v) if v.to_str().is_ok_and(is_json_type) => Ok(()),
        Some(_) => Err(Error::UnsupportedMediaType),
        None if has_body => Err(Error::UnsupportedMediaType),
        None => Ok(()),
    }
}

/// A JSON request body's bytes: the type checked (415), then read like [`read_limited`], and
/// refused when its text holds U+0000 ([`refuse_nul`]).
pub async fn json_bytes(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
) -> Result<web::BytesMut> {
    require_json(req)?;
    let bytes = read_limited(req, payload, limit).await?;
    refuse_nul(&bytes)?;
    Ok(bytes)
}

/// What a request holding U+0000 is told.
pub const NUL_REFUSED: &str = "text may not contain U+0000 (NUL)";

/// Refuses a JSON text whose strings hold U+0000 (see [`sessiond_core::nul`]), before anything is
/// written, on every backend alike.
pub fn refuse_nul(json: &[u8]) -> Result<()> {
    if sessiond_core::nul::escaped_in(json) {
        return Err(Error::invalid(NUL_REFUSED));
    }
    Ok(())
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
    let bytes = json_bytes(req, payload, limit).await?;
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

/// A JSON Schema `integer` as the seed schemas mean it: JSON Schema counts `1.0` as an integer
/// (a number with a zero fractional part), so a body may spell `seq` or `bytes` that way. The
/// schema check has already bounded the value.
pub fn schema_integer<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<u64, D::Error> {
    use serde::de::Error as _;
    let n = serde_json::Number::deserialize(d)?;
    if let Some(u) = n.as_u64() {
        return Ok(u);
    }
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && (0.0..=MAX_SAFE as f64).contains(&f) => Ok(f as u64),
        _ => Err(D::Error::custom(format!(
            "must be an integer from 0 to {MAX_SAFE}"
        ))),
    }
}

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
    sessiond_core::secret::hex(&h.finalize())
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
    fn integers_may_be_spelled_with_a_zero_fraction() {
        #[derive(Deserialize)]
        struct B {
            #[serde(deserialize_with = "schema_integer")]
            n: u64,
        }
        let parse = |t: &str| serde_json::from_str::<B>(t).map(|b| b.n);
        assert_eq!(parse(r#"{"n": 7}"#).unwrap(), 7);
        assert_eq!(parse(r#"{"n": 7.0}"#).unwrap(), 7);
        assert_eq!(parse(r#"{"n": 1e3}"#).unwrap(), 1000);
        assert!(parse(r#"{"n": 7.5}"#).is_err());
        assert!(parse(r#"{"n": -1}"#).is_err());
        assert!(parse(r#"{"n": "7"}"#).is_err());
    }

    #[test]
    fn json_types() {
        assert!(is_json_type("application/json"));
        assert!(is_json_type("Application/JSON; charset=utf-8"));
        assert!(is_json_type("application/merge-patch+json"));
        assert!(!is_json_type("text/plain"));
        assert!(!is_json_type("application/x-www-form-urlencoded"));
        assert!(!is_json_type("application/jsonp"));
    }

    #[test]
    fn uint53_bounds() {
        assert_eq!(parse_uint53("x", "0").unwrap(), 0);
        assert!(parse_uint53("x", "9007199254740992").is_err());
        assert!(parse_uint53("x", "-1").is_err());
        assert!(parse_uint53("x", "+1").is_err());
    }
}
