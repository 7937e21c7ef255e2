//! `read_file`: a text file under the working directory, in pages of lines for long files.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, in_sandbox, need};
use crate::error::Result;

pub struct ReadFile;

#[async_trait]
impl Tool for ReadFile {
    fn name(&self) -> &'static str {
        "read_file"
    }

    fn description(&self) -> &'static str {
        "Read a text file (path relative to the working directory). Long files come in pages: pass offsetLine and limitLines."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "offsetLine": {"type": "integer", "minimum": 1},
                "limitLines": {"type": "integer", "minimum": 1}
            },
            "required": ["path"]
        })
    }

    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome> {
        Ok(in_sandbox(cx.io, "read_file", input, |sandbox, a| {
            let path = need("read_file", a.path, "path")?;
            sandbox
                .read_file(&path, a.offset_line, a.limit_lines)
                .map_err(|e| e.to_string())
        })
        .await)
    }
}
