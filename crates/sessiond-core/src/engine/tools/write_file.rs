//! `write_file`: creates or replaces a text file under the working directory.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, in_sandbox, need};
use crate::error::Result;

pub struct WriteFile;

#[async_trait]
impl Tool for WriteFile {
    fn name(&self) -> &'static str {
        "write_file"
    }

    fn description(&self) -> &'static str {
        "Create or replace a text file (path relative to the working directory); missing folders are created."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"]
        })
    }

    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome> {
        Ok(in_sandbox(cx.io, "write_file", input, |sandbox, a| {
            let path = need("write_file", a.path, "path")?;
            let content = need("write_file", a.content, "content")?;
            sandbox
                .write_file(&path, &content)
                .map_err(|e| e.to_string())
        })
        .await)
    }
}
