//! `search_files`: lines holding a literal text in the files under a folder.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, in_sandbox, need};
use crate::error::Result;

pub struct SearchFiles;

#[async_trait]
impl Tool for SearchFiles {
    fn name(&self) -> &'static str {
        "search_files"
    }

    fn description(&self) -> &'static str {
        "Find lines containing a literal, case-sensitive text in the files under a folder; glob filters file names (e.g. *.rs)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string"},
                "glob": {"type": "string"}
            },
            "required": ["pattern"]
        })
    }

    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome> {
        Ok(in_sandbox(cx.io, "search_files", input, |sandbox, a| {
            let pattern = need("search_files", a.pattern, "pattern")?;
            sandbox
                .search_files(&pattern, a.path.as_deref(), a.glob.as_deref())
                .map_err(|e| e.to_string())
        })
        .await)
    }
}
