//! The seed's request schemas, compiled into the binary and checked on every request body, so that
//! what we accept is exactly what the seed allows (lengths, enums, patterns, limits).

use std::collections::HashMap;
use std::sync::LazyLock;

use jsonschema::Validator;
use rust_embed::RustEmbed;
use serde_json::Value;

use crate::error::{Error, Result};

#[derive(RustEmbed)]
#[folder = "schemas/"]
#[include = "*.request.json"]
struct Schemas;

static VALIDATORS: LazyLock<HashMap<String, Validator>> = LazyLock::new(|| {
    Schemas::iter()
        .filter_map(|name| {
            let file = Schemas::get(&name)?;
            let schema: Value = serde_json::from_slice(&file.data).ok()?;
            let validator = jsonschema::validator_for(&schema)
                .map_err(|e| tracing::error!(schema = %name, error = %e, "bad embedded schema"))
                .ok()?;
            let key = name.rsplit('/').next().unwrap_or(&name).to_owned();
            Some((key, validator))
        })
        .collect()
});

/// Validates `body` against the seed request schema `file` (e.g.
/// `POST_v1_ws__workspaceSlug__agent_sessions.request.json`). The error names the field and never
/// echoes the submitted value.
pub fn check(file: &str, body: &Value) -> Result<()> {
    let validator = VALIDATORS
        .get(file)
        .ok_or_else(|| Error::Internal(format!("missing request schema {file}")))?;
    match validator.iter_errors(body).next() {
        None => Ok(()),
        Some(err) => {
            let path = err.instance_path().to_string();
            let field = if path.is_empty() {
                "body".to_owned()
            } else {
                path.trim_start_matches('/').to_owned()
            };
            Err(Error::invalid(format!("{field}: {}", err.masked())))
        }
    }
}

/// Every embedded schema compiles (checked at start-up so a bad build fails loudly).
pub fn self_check() -> std::result::Result<(), String> {
    let expected = Schemas::iter().count();
    if VALIDATORS.len() != expected || expected == 0 {
        return Err(format!(
            "only {} of {expected} request schemas compiled",
            VALIDATORS.len()
        ));
    }
    Ok(())
}
