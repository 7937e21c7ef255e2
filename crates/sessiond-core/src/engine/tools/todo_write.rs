//! `todo_write`: the model replaces the session's todo list (a `todos` event and the snapshot's
//! field), shown to the user.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Call, Outcome, Tool, args};
use crate::error::Result;
use crate::timeline::{Todo, TodoStatus};

pub struct TodoWrite;

#[async_trait]
impl Tool for TodoWrite {
    fn name(&self) -> &'static str {
        "todo_write"
    }

    fn description(&self) -> &'static str {
        "Replace the task's todo list (shown to the user). Keep exactly one item in_progress while working."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "todos": {
                    "type": "array", "maxItems": 100,
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "content": {"type": "string"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "completed", "failed"]}
                        },
                        "required": ["content", "status"]
                    }
                }
            },
            "required": ["todos"]
        })
    }

    async fn call(&self, cx: Call<'_>, input: &Value) -> Result<Outcome> {
        let parsed: TodosIn = match args("todo_write", input) {
            Ok(a) => a,
            Err(e) => return Ok(e),
        };
        if parsed.todos.len() > 100 {
            return Ok(Outcome::error("at most 100 todos"));
        }
        let todos: Vec<Todo> = parsed
            .todos
            .into_iter()
            .enumerate()
            .map(|(i, t)| Todo {
                id: t
                    .id
                    .filter(|id| !id.trim().is_empty())
                    .unwrap_or_else(|| format!("todo-{}", i + 1)),
                content: t.content.chars().take(500).collect(),
                status: t.status,
            })
            .collect();
        let n = todos.len();
        let done = todos
            .iter()
            .filter(|t| t.status == TodoStatus::Completed)
            .count();
        cx.io.set_todos(todos).await?;
        Ok(Outcome::ok(format!(
            "todo list updated: {n} items, {done} completed"
        )))
    }
}

#[derive(Deserialize)]
struct TodoIn {
    id: Option<String>,
    content: String,
    status: TodoStatus,
}

#[derive(Deserialize)]
struct TodosIn {
    todos: Vec<TodoIn>,
}
