//! The seed's request schemas, compiled into the binary and checked on every request body, so that
//! what we accept is exactly what the seed allows (lengths, enums, patterns, limits).
//!
//! Validation uses `boon` (JSON Schema 2020-12, the draft of the seed schemas): a small validator
//! that keeps the release build light. The tests check responses with an independent
//! implementation (`jsonschema`), so one validator's quirk cannot hide in both directions.

use std::collections::HashMap;
use std::sync::LazyLock;

use boon::{Compiler, ErrorKind, SchemaIndex, Schemas, ValidationError};
use rust_embed::RustEmbed;
use serde_json::Value;

use sessiond_core::error::{Error, Result};

/// The Sessions API's seed schemas (`schemas/sessions/`): the request schemas checked on every body
/// (here) and the responses the OpenAPI document describes. One embed, so the bytes are in the
/// binary once.
#[derive(RustEmbed)]
#[folder = "../../schemas/sessions/"]
pub(crate) struct SessionSchemas;

/// The names of the embedded request schemas (`*.request.json`).
fn request_schemas() -> impl Iterator<Item = std::borrow::Cow<'static, str>> {
    SessionSchemas::iter().filter(|name| name.ends_with(".request.json"))
}

/// Every request schema, compiled once, by file name.
struct Compiled {
    schemas: Schemas,
    by_file: HashMap<String, SchemaIndex>,
}

static COMPILED: LazyLock<Compiled> = LazyLock::new(|| {
    let mut compiler = Compiler::new();
    let url = |name: &str| format!("sessiond:///schemas/{name}");
    // Every file is a resource first, so that a `$ref` between them resolves.
    let mut names = Vec::new();
    for name in request_schemas() {
        let parsed =
            SessionSchemas::get(&name).and_then(|f| serde_json::from_slice::<Value>(&f.data).ok());
        match parsed {
            Some(doc) => match compiler.add_resource(&url(&name), doc) {
                Ok(()) => names.push(name),
                Err(e) => tracing::error!(schema = %name, error = %e, "bad embedded schema"),
            },
            None => tracing::error!(schema = %name, "embedded schema is not JSON"),
        }
    }
    let mut schemas = Schemas::new();
    let mut by_file = HashMap::new();
    for name in names {
        match compiler.compile(&url(&name), &mut schemas) {
            Ok(index) => {
                let key = name.rsplit('/').next().unwrap_or(&name).to_owned();
                by_file.insert(key, index);
            }
            Err(e) => tracing::error!(schema = %name, error = %e, "bad embedded schema"),
        }
    }
    Compiled { schemas, by_file }
});

/// Validates `body` against the seed request schema `file` (e.g.
/// `POST_v1_ws__workspaceSlug__agent_sessions.request.json`). The error names the field and never
/// echoes the submitted value.
pub fn check(file: &str, body: &Value) -> Result<()> {
    let compiled = &*COMPILED;
    let index = compiled
        .by_file
        .get(file)
        .ok_or_else(|| Error::Internal(format!("missing request schema {file}")))?;
    match compiled.schemas.validate(body, *index) {
        Ok(()) => Ok(()),
        Err(err) => {
            let leaf = most_specific(&err);
            let path = leaf.instance_location.to_string();
            let field = if path.is_empty() {
                "body".to_owned()
            } else {
                path.trim_start_matches('/').to_owned()
            };
            Err(Error::invalid(format!("{field}: {}", masked(&leaf.kind))))
        }
    }
}

/// The error to report: down the first failing branch to the keyword that failed, but not into the
/// alternatives of `anyOf`/`oneOf` (which of them the body meant is a guess).
fn most_specific<'a, 's, 'v>(err: &'a ValidationError<'s, 'v>) -> &'a ValidationError<'s, 'v> {
    let mut at = err;
    loop {
        if matches!(at.kind, ErrorKind::AnyOf | ErrorKind::OneOf(_)) {
            return at;
        }
        match at.causes.first() {
            Some(cause) => at = cause,
            None => return at,
        }
    }
}

/// What is wrong, in words that name fields, limits and allowed values from the schema but never
/// the submitted value (which may be large or secret).
fn masked(kind: &ErrorKind<'_, '_>) -> String {
    let quoted = |names: &[&str]| {
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match kind {
        ErrorKind::Type { got, want } => {
            let want: Vec<String> = want.iter().map(|t| t.to_string()).collect();
            format!("must be {}, not {got}", want.join(" or "))
        }
        ErrorKind::Enum { want } => {
            let want: Vec<String> = want.iter().map(Value::to_string).collect();
            format!("must be one of {}", want.join(", "))
        }
        ErrorKind::Const { want } => format!("must be {want}"),
        ErrorKind::Format { want, .. } => format!("is not a valid {want}"),
        ErrorKind::MinProperties { want, .. } => format!("needs at least {want} fields"),
        ErrorKind::MaxProperties { want, .. } => format!("may have at most {want} fields"),
        ErrorKind::AdditionalProperties { got } => {
            let names: Vec<&str> = got.iter().map(|c| c.as_ref()).collect();
            format!("unknown field {}", quoted(&names))
        }
        ErrorKind::Required { want } => format!("missing required field {}", quoted(want)),
        ErrorKind::Dependency { prop, missing }
        | ErrorKind::DependentRequired { prop, missing } => {
            format!("\"{prop}\" also needs {}", quoted(missing))
        }
        ErrorKind::PropertyName { prop } => format!("field name \"{prop}\" is not allowed"),
        ErrorKind::MinItems { want, .. } => format!("needs at least {want} items"),
        ErrorKind::MaxItems { want, .. } => format!("may have at most {want} items"),
        ErrorKind::UniqueItems { .. } => "items must be unique".into(),
        ErrorKind::MinLength { want, .. } => format!("must be at least {want} characters long"),
        ErrorKind::MaxLength { want, .. } => format!("must be at most {want} characters long"),
        ErrorKind::Pattern { want, .. } => format!("does not match the pattern {want}"),
        ErrorKind::Minimum { want, .. } => format!("must be at least {want}"),
        ErrorKind::Maximum { want, .. } => format!("must be at most {want}"),
        ErrorKind::ExclusiveMinimum { want, .. } => format!("must be greater than {want}"),
        ErrorKind::ExclusiveMaximum { want, .. } => format!("must be less than {want}"),
        ErrorKind::MultipleOf { want, .. } => format!("must be a multiple of {want}"),
        ErrorKind::FalseSchema => "is not allowed here".into(),
        ErrorKind::AnyOf => "matches none of the allowed forms".into(),
        ErrorKind::OneOf(_) => "must match exactly one of the allowed forms".into(),
        ErrorKind::Not => "has a form that is not allowed".into(),
        _ => "is not valid".into(),
    }
}

/// Every embedded schema compiles (checked at start-up so a bad build fails loudly).
pub fn self_check() -> std::result::Result<(), String> {
    let expected = request_schemas().count();
    let compiled = COMPILED.by_file.len();
    if compiled != expected || expected == 0 {
        return Err(format!(
            "only {compiled} of {expected} request schemas compiled"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CREATE: &str = "POST_v1_ws__workspaceSlug__agent_sessions.request.json";

    fn message(body: Value) -> String {
        match check(CREATE, &body) {
            Err(Error::InvalidRequest(m)) => m,
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn every_request_schema_compiles() {
        self_check().unwrap();
    }

    #[test]
    fn errors_name_the_field_and_never_echo_the_value() {
        assert!(check(CREATE, &json!({"prompt": "hello"})).is_ok());
        let secret = "sk-very-secret-value";
        for (body, field) in [
            (json!({"prompt": 5}), "prompt: must be string"),
            (json!({"prompt": ""}), "prompt: must be at least 1"),
            (
                json!({"tier": "balanced"}),
                "body: missing required field \"prompt\"",
            ),
            (json!({"prompt": "x", "tier": secret}), "tier: "),
            (
                json!({"prompt": "x", "clientRequestId": secret}),
                "clientRequestId: ",
            ),
            (
                json!({"prompt": "x", "cwd": format!("{secret}\u{1}")}),
                "cwd: ",
            ),
            (json!([secret]), "body: must be object"),
        ] {
            let m = message(body.clone());
            assert!(m.starts_with(field), "{body}: {m}");
            assert!(!m.contains(secret), "{body}: the value is echoed: {m}");
        }
    }
}
