//! What HAST tool events say about a tool that the timeline only names: its kind, and the files a
//! writing tool changed (`file.changed`). Covers sessiond's built-in tools and the tool names of
//! the Claude Code and Codex CLIs.

use serde_json::Value;

/// The `kind` of a tool, from its name.
///
/// | kind | tools |
/// |---|---|
/// | `read` | `read_file`, `list_dir`, `Read`, `LS`, `NotebookRead` |
/// | `search` | `search_files`, `Grep`, `Glob` |
/// | `edit` | `write_file`, `Write`, `Edit`, `MultiEdit`, `NotebookEdit`, `file_change` |
/// | `command` | `run_command`, `Bash`, `BashOutput`, `KillShell`, `shell` |
/// | `web` | `WebFetch`, `WebSearch`, `web_search` |
/// | `agent` | `start_session`, `message_session`, `Task` |
/// | `plan` | `todo_write`, `TodoWrite` |
/// | `input` | `ask_user` |
/// | `wait` | `sleep_until` |
/// | `mcp` | `mcp__…` (Claude), `server.tool` (Codex) |
/// | `tool` | anything else |
pub fn kind(name: &str) -> &'static str {
    match name {
        "read_file" | "list_dir" | "Read" | "LS" | "NotebookRead" => "read",
        "search_files" | "Grep" | "Glob" => "search",
        "write_file" | "Write" | "Edit" | "MultiEdit" | "NotebookEdit" | "file_change" => "edit",
        "run_command" | "Bash" | "BashOutput" | "KillShell" | "shell" => "command",
        "WebFetch" | "WebSearch" | "web_search" => "web",
        "start_session" | "message_session" | "Task" => "agent",
        "todo_write" | "TodoWrite" => "plan",
        "ask_user" => "input",
        "sleep_until" => "wait",
        n if n.starts_with("mcp__") || n.contains('.') => "mcp",
        _ => "tool",
    }
}

/// Files a tool call changed, as `(path, operation)` with `operation` `update` (created, written
/// or edited) or `delete`, at most `max`. Paths are as the tool named them (relative to the
/// session's working directory for sessiond's tools).
pub fn changed_files(name: &str, input: Option<&Value>, max: usize) -> Vec<(String, &'static str)> {
    let Some(input) = input else {
        return Vec::new();
    };
    let field = |key: &str| input.get(key).and_then(Value::as_str).map(str::to_owned);
    let mut out: Vec<(String, &'static str)> = match name {
        "write_file" => field("path").map(|p| (p, "update")).into_iter().collect(),
        "Write" | "Edit" | "MultiEdit" => field("file_path")
            .map(|p| (p, "update"))
            .into_iter()
            .collect(),
        "NotebookEdit" => field("notebook_path")
            .map(|p| (p, "update"))
            .into_iter()
            .collect(),
        "file_change" => input
            .get("changes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let path = c.get("path").and_then(Value::as_str)?.to_owned();
                let op = match c.get("kind").and_then(Value::as_str) {
                    Some("delete") => "delete",
                    _ => "update",
                };
                Some((path, op))
            })
            .collect(),
        _ => Vec::new(),
    };
    out.retain(|(p, _)| !p.is_empty());
    out.truncate(max);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn kinds_cover_the_builtin_and_cli_tools() {
        assert_eq!(kind("write_file"), "edit");
        assert_eq!(kind("Bash"), "command");
        assert_eq!(kind("mcp__github__create_issue"), "mcp");
        assert_eq!(kind("docs.search"), "mcp");
        assert_eq!(kind("something_else"), "tool");
    }

    #[test]
    fn writing_tools_name_their_files() {
        assert_eq!(
            changed_files(
                "write_file",
                Some(&json!({"path": "a.txt", "content": "x"})),
                9
            ),
            vec![("a.txt".to_owned(), "update")]
        );
        assert_eq!(
            changed_files(
                "file_change",
                Some(
                    &json!({"changes": [{"path": "n.txt", "kind": "add"}, {"path": "o.txt", "kind": "delete"}]})
                ),
                9
            ),
            vec![
                ("n.txt".to_owned(), "update"),
                ("o.txt".to_owned(), "delete")
            ]
        );
        assert!(changed_files("read_file", Some(&json!({"path": "a.txt"})), 9).is_empty());
        let many: Vec<Value> = (0..20).map(|i| json!({"path": format!("f{i}")})).collect();
        assert_eq!(
            changed_files("file_change", Some(&json!({ "changes": many })), 9).len(),
            9
        );
    }
}
