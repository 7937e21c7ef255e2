//! `list_dir`: the entries of a folder under the working directory.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, in_sandbox};
use crate::error::Result;

pub struct ListDir;

#[async_trait]
impl Tool for ListDir {
    fn name(&self) -> &'static str {
        "list_dir"
    }

    fn description(&self) -> &'static str {
        "List a folder (default: the working directory): folders end with '/', files show their size."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {"path": {"type": "string"}}
        })
    }

    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome> {
        Ok(in_sandbox(cx.io, "list_dir", input, |sandbox, a| {
            sandbox
                .list_dir(a.path.as_deref())
                .map_err(|e| e.to_string())
        })
        .await)
    }
}
