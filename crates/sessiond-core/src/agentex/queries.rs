//! Workflow queries (`GET /tasks/{task_id}/query/{query_name}`): AgentEx asks a task's Temporal
//! workflow a named question; sessiond runs no workflows and answers the questions it knows the
//! answer to from the task itself.
//!
//! The answer is AgentEx's: `{"task_id", "query", "result"}`. The names are those the AgentEx
//! SDK's workflow templates answer (`get_status`, a string) and the plain ones:
//!
//! | query | `result` |
//! |---|---|
//! | `get_status`, `status` | the task's `Task.status` (`RUNNING`, `INTERRUPTED`, `COMPLETED`…) |
//! | `get_state`, `state`, `current_state` | the state document the task's agent keeps (`/states`), or null when it keeps none |
//!
//! Any other name is refused (400, naming it and the names there are); an unknown task is 404.

use serde_json::{Value, json};

use super::records;
use super::tasks;
use crate::error::{Error, Result};
use crate::sessions::{Actor, Sessions};
use crate::store::agentex::{Direction, Page, RecordFilter, SortKey, TaskKey, TaskRow};

/// What a query asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Query {
    Status,
    State,
}

/// Every name sessiond answers, and what it asks.
const QUERIES: [(&str, Query); 5] = [
    ("get_status", Query::Status),
    ("status", Query::Status),
    ("get_state", Query::State),
    ("state", Query::State),
    ("current_state", Query::State),
];

/// Longest query name echoed back in the refusal of an unknown one.
const ECHO_MAX: usize = 100;

fn parse(name: &str) -> Result<Query> {
    if let Some((_, q)) = QUERIES.iter().find(|(n, _)| *n == name) {
        return Ok(*q);
    }
    let names: Vec<&str> = QUERIES.iter().map(|(n, _)| *n).collect();
    let shown = if name.chars().count() <= ECHO_MAX {
        format!("{name:?}")
    } else {
        "of that name".to_owned()
    };
    Err(Error::invalid(format!(
        "query_name: no query {shown}; sessiond answers {}",
        names.join(", ")
    )))
}

/// The state document of the task's own agent, or null.
async fn state(sessions: &Sessions, actor: &Actor, task: &TaskRow) -> Result<Value> {
    let found = records::states(
        sessions,
        actor,
        RecordFilter {
            task_id: Some(task.id.clone()),
            agent_id: Some(task.agent_id.clone()),
            order_by: SortKey::CreatedAt,
            direction: Direction::Desc,
            page: Page {
                limit: 1,
                offset: 0,
            },
        },
    )
    .await?;
    Ok(found
        .first()
        .map_or(Value::Null, |s| super::view::document(Some(&s.state))))
}

/// Answers the query `name` about the task `task_id`.
pub async fn answer(
    sessions: &Sessions,
    actor: &Actor,
    task_id: &str,
    name: &str,
) -> Result<Value> {
    let task = tasks::find(sessions, actor, TaskKey::Id(task_id)).await?;
    let result = match parse(name)? {
        Query::Status => Value::from(tasks::status(&task).0),
        Query::State => state(sessions, actor, &task).await?,
    };
    Ok(json!({"task_id": task.id, "query": name, "result": result}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_queries_are_named_in_their_refusal() {
        assert_eq!(parse("get_status").unwrap(), Query::Status);
        assert_eq!(parse("current_state").unwrap(), Query::State);
        let e = parse("get_graph_mermaid").unwrap_err().to_string();
        assert!(
            e.contains("\"get_graph_mermaid\"") && e.contains("get_status"),
            "{e}"
        );
        let e = parse(&"x".repeat(ECHO_MAX + 1)).unwrap_err().to_string();
        assert!(!e.contains(&"x".repeat(ECHO_MAX)), "{e}");
    }
}
