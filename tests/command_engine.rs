//! Integration tests of the command engine: agents whose engine is an agent CLI, run per turn in
//! the session's working directory.
//!
//! The CLI is `tests/fixtures/fake-cli.sh`, which records its arguments, stdin and environment in
//! its working directory and replays recorded streams shaped like Claude Code's `stream-json`,
//! Codex's `exec --json` and sessiond's generic protocol. Every history page is validated against
//! the seed schema and every event against the known seed variants. Rule ids refer to
//! `spec/sessions-api.md`.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

const MESSAGE_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__messages.response.json";
const ANSWER_RESPONSE: &str =
    "POST_v1_ws__workspaceSlug__agent_sessions__sessionId__answer.response.json";
const WAIT: Duration = Duration::from_secs(20);

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// The operator's permission for the fake CLI (and a missing program) to run (`[policy]`).
fn policy_config() -> String {
    format!(
        "[policy]\nprograms = [{:?}, \"/nonexistent/agent-cli\"]\n",
        fixture("fake-cli.sh")
    )
}

/// A server whose operator lets agents run the fake CLI.
fn server() -> Server {
    Server::start_with_config(&policy_config())
}

/// Creates agent `slug` (anchor `agents/<slug>`) whose engine runs the fake CLI.
fn command_agent(s: &Server, slug: &str, engine: Value) -> Value {
    let mut engine = engine;
    engine["kind"] = json!("command");
    engine["program"] = json!(fixture("fake-cli.sh"));
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({ "slug": slug, "engine": engine }),
    );
    assert_eq!(status, 201, "create agent: {v}");
    assert_eq!(v["engine"], engine, "the engine is stored as given");
    v
}

/// The agent's folder in the drive: the sessions' cwd, where the fake CLI writes its records.
fn agent_dir(s: &Server, slug: &str) -> PathBuf {
    s.data_dir.join("drive").join(WS).join("agents").join(slug)
}

fn start(s: &Server, slug: &str, prompt: &str) -> String {
    let v = create_checked(
        s,
        json!({ "prompt": prompt, "cwd": format!("agents/{slug}") }),
    );
    id_of(&v)
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn args_of(dir: &Path, run: u32) -> Vec<String> {
    read(dir, &format!("run-{run}.args"))
        .lines()
        .map(str::to_owned)
        .collect()
}

fn history(s: &Server, id: &str) -> Vec<Value> {
    history_checked(s, id, 7)
}

/// The step events (`event.step`) after `from`.
fn steps(events: &[Value], from: u64) -> Vec<Value> {
    events
        .iter()
        .filter(|e| seq(e) > from && etype(e) == "step")
        .map(|e| e["event"]["step"].clone())
        .collect()
}

fn step_types(steps: &[Value]) -> Vec<&str> {
    steps
        .iter()
        .map(|s| s["type"].as_str().unwrap_or("?"))
        .collect()
}

fn of_type_after<'a>(events: &'a [Value], from: u64, t: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| seq(e) > from && etype(e) == t)
        .collect()
}

fn wait_terminal(s: &Server, id: &str, from: u64) -> Value {
    s.wait_for_event(id, &["complete", "ask", "interrupted", "sleep"], from, WAIT)
}

fn message(s: &Server, id: &str, body: Value) -> Value {
    let (status, v) = s.post(&s.sessions_url(&format!("/{id}/messages")), &body);
    assert_eq!(status, 200, "message: {v}");
    assert_schema(MESSAGE_RESPONSE, &v);
    v
}

/// A process that is gone (or a zombie nobody reaped yet).
fn gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('Z') || state.starts_with('X')
        }
    }
}

fn assert_gone_soon(what: &str, pid: &str) {
    poll_until(
        &format!("{what} (pid {pid}) to end"),
        Duration::from_secs(5),
        || gone(pid).then_some(()),
    );
}

const CLAUDE_ARGS: [&str; 4] = ["-p", "--output-format", "stream-json", "--verbose"];

#[test]
fn claude_stream_becomes_the_timeline_and_later_turns_resume_its_session() {
    let s = server();
    command_agent(
        &s,
        "claude",
        json!({
            "protocol": "claude",
            "args": CLAUDE_ARGS,
            "env": {
                "FAKE_FIXTURE": fixture("claude-stream.jsonl"),
                "FAKE_FIXTURE_2": fixture("claude-resumed.jsonl"),
                "FAKE_FIXTURE_3": fixture("claude-resumed.jsonl"),
            },
        }),
    );
    let dir = agent_dir(&s, "claude");
    let id = start(&s, "claude", "How many files are here?\nCount them all.");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(etype(&t), "complete", "{t:#}");
    assert_eq!(t["event"]["status"], "completed", "{t:#}");
    assert_eq!(t["event"]["result"], "There are 3 files in this directory.");

    // The prompt arrived on stdin, in the session's cwd (the agent's anchor in the drive), with
    // exactly the configured arguments: nothing to resume yet.
    assert_eq!(
        read(&dir, "run-1.stdin"),
        "How many files are here?\nCount them all."
    );
    assert_eq!(args_of(&dir, 1), CLAUDE_ARGS);
    let env = read(&dir, "run-1.env");
    assert!(
        env.contains(&format!("SESSIOND_SESSION_ID={id}\n")),
        "{env}"
    );
    assert!(env.contains("SESSIOND_INPUT_KIND=prompt\n"), "{env}");

    let events = history(&s, &id);
    let st = steps(&events, 0);
    let kinds = step_types(&st);
    assert_eq!(
        kinds,
        [
            "reasoning",
            "tool_call_start",
            "tool_call",
            "tool_call_start",
            "tool_call",
            "tool_call_start",
            "tool_call",
            "text"
        ],
        "{st:#?}"
    );
    assert!(
        st[0]["text"]
            .as_str()
            .unwrap_or("")
            .starts_with("The user wants")
    );
    assert_eq!(st[1]["toolName"], "TodoWrite");
    assert_eq!(st[3]["toolName"], "Bash");
    assert_eq!(st[3]["toolCallId"], "toolu_01BASH");
    assert_eq!(st[3]["input"]["command"], "ls | wc -l");
    assert_eq!(
        st[4],
        json!({
            "type": "tool_call", "toolName": "Bash", "toolCallId": "toolu_01BASH",
            "input": {"command": "ls | wc -l", "description": "Count the files in the directory"},
            "isError": false, "output": [{"type": "text", "text": "3"}]
        })
    );
    assert_eq!(st[6]["toolName"], "Read");
    assert_eq!(st[6]["isError"], true);
    assert_eq!(
        st[6]["output"][0]["text"],
        "<tool_use_error>File does not exist.</tool_use_error>"
    );
    assert_eq!(st[7]["text"], "There are 3 files in this directory.");
    // Deltas are volatile (invariant 6): never in history.
    assert!(
        !events
            .iter()
            .any(|e| e["event"]["step"]["type"] == "text_delta")
    );

    // TodoWrite is the session's todo list.
    let todos = of_type_after(&events, 0, "todos");
    assert_eq!(todos.len(), 1);
    assert_eq!(
        todos[0]["event"]["todos"],
        json!([
            {"id": "todo-1", "content": "List the files", "status": "in_progress"},
            {"id": "todo-2", "content": "Report the count", "status": "pending"}
        ])
    );
    assert_eq!(detail_checked(&s, &id)["todos"], todos[0]["event"]["todos"]);

    // The result's measured usage and cost, once (no estimate besides it).
    let usage = of_type_after(&events, 0, "usage");
    assert_eq!(usage.len(), 1, "{usage:#?}");
    let u = &usage[0]["event"];
    assert_eq!(u["turnUsage"]["input"], 40.0);
    assert_eq!(u["turnUsage"]["output"], 95.0);
    assert_eq!(u["turnUsage"]["cacheRead"], 3000.0);
    assert_eq!(u["turnUsage"]["cacheWrite"], 200.0);
    assert_eq!(u["turnUsage"]["totalTokens"], 3335.0);
    assert_eq!(u["turnUsage"]["cost"]["total"], 0.0421);
    assert_eq!(u["effectiveContextWindow"], 200000.0);
    assert_eq!(u["usageByModel"], json!([]));

    // The reply is the turn's conversation on its terminal.
    let messages = t["event"]["state"]["agent"]["messages"]
        .as_array()
        .expect("messages");
    assert_eq!(
        messages.last(),
        Some(&json!({"role": "assistant", "content": "There are 3 files in this directory."}))
    );

    // Turn 2 continues the CLI's session; the resumed CLI names a new one (as Claude Code does),
    // which turn 3 continues.
    for (run, resumed, reply) in [
        (
            2,
            "9d3c7a52-5f0e-4c41-b7de-claude000001",
            "Still 3 files, as before.",
        ),
        (
            3,
            "9d3c7a52-5f0e-4c41-b7de-claude000002",
            "Still 3 files, as before.",
        ),
    ] {
        let from = last_seq(&s, &id);
        message(&s, &id, json!({ "prompt": format!("and now? ({run})") }));
        let t = wait_terminal(&s, &id, from + 1);
        assert_eq!(t["event"]["status"], "completed", "{t:#}");
        assert_eq!(t["event"]["result"], reply);
        let mut want: Vec<String> = CLAUDE_ARGS.iter().map(|a| a.to_string()).collect();
        want.extend(["--resume".to_owned(), resumed.to_owned()]);
        assert_eq!(args_of(&dir, run), want, "run {run}");
        assert_eq!(
            read(&dir, &format!("run-{run}.stdin")),
            format!("and now? ({run})")
        );
    }
    history(&s, &id);
}

#[test]
fn a_conversation_the_cli_no_longer_knows_is_not_resumed_again() {
    let s = server();
    command_agent(
        &s,
        "forgetful",
        json!({
            "protocol": "claude",
            "args": CLAUDE_ARGS,
            "env": {
                "FAKE_FIXTURE": fixture("claude-stream.jsonl"),
                "FAKE_FIXTURE_2": "/dev/null",
                "FAKE_STDERR_2": "No conversation found with session ID: 9d3c7a52-5f0e-4c41-b7de-claude000001",
                "FAKE_EXIT_2": "1",
            },
        }),
    );
    let dir = agent_dir(&s, "forgetful");
    let id = start(&s, "forgetful", "count the files");
    assert_eq!(wait_terminal(&s, &id, 0)["event"]["status"], "completed");

    // Run 2 resumes and fails before the CLI names a session: the turn fails with the reason...
    let from = last_seq(&s, &id);
    message(&s, &id, json!({ "prompt": "again" }));
    let t = wait_terminal(&s, &id, from + 1);
    assert_eq!(t["event"]["status"], "failed", "{t:#}");
    assert!(
        t["event"]["error"].as_str().unwrap_or("").ends_with(
            "No conversation found with session ID: 9d3c7a52-5f0e-4c41-b7de-claude000001"
        ),
        "{t:#}"
    );
    assert_eq!(
        args_of(&dir, 2)[4..],
        ["--resume", "9d3c7a52-5f0e-4c41-b7de-claude000001"]
    );

    // ...and run 3 starts a fresh conversation instead of failing the same way forever.
    let from = last_seq(&s, &id);
    message(&s, &id, json!({ "prompt": "once more" }));
    let t = wait_terminal(&s, &id, from + 1);
    assert_eq!(t["event"]["status"], "completed", "{t:#}");
    assert_eq!(args_of(&dir, 3), CLAUDE_ARGS);
}

#[test]
fn codex_exec_stream_becomes_the_timeline_and_the_thread_resumes() {
    let s = server();
    let args = ["exec", "--json", "--skip-git-repo-check"];
    command_agent(
        &s,
        "codex",
        json!({
            "protocol": "codex",
            "args": args,
            "env": {
                "FAKE_FIXTURE": fixture("codex-exec.jsonl"),
                "FAKE_FIXTURE_2": fixture("codex-resumed.jsonl"),
            },
        }),
    );
    let dir = agent_dir(&s, "codex");
    let id = start(&s, "codex", "count the files");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(t["event"]["status"], "completed", "{t:#}");
    assert_eq!(
        t["event"]["result"],
        "There are 3 files; I saved the count to notes/count.txt."
    );
    assert_eq!(args_of(&dir, 1), args);
    assert_eq!(read(&dir, "run-1.stdin"), "count the files");

    let events = history(&s, &id);
    let st = steps(&events, 0);
    let kinds = step_types(&st);
    assert_eq!(
        kinds,
        [
            "reasoning",
            "tool_call_start",
            "tool_call",
            "tool_call_start",
            "tool_call",
            "tool_call_start",
            "tool_call",
            "text"
        ],
        "{st:#?}"
    );
    assert!(
        st[0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("Counting files")
    );
    assert_eq!(
        st[2],
        json!({
            "type": "tool_call", "toolName": "shell", "toolCallId": "item_2",
            "input": {"command": "bash -lc 'ls | wc -l'"},
            "isError": false, "output": [{"type": "text", "text": "3\n"}]
        })
    );
    assert_eq!(st[4]["isError"], true, "exit code 1 is an error");
    assert_eq!(
        st[4]["output"][0]["text"],
        "cat: missing.txt: No such file or directory\n"
    );
    // A file change is only reported completed; its start is recorded with it.
    assert_eq!(st[5]["toolName"], "file_change");
    assert_eq!(st[5]["toolCallId"], st[6]["toolCallId"]);
    assert_eq!(st[6]["output"][0]["text"], "add notes/count.txt");

    // Each change of the todo list, in order.
    let todos: Vec<&Value> = of_type_after(&events, 0, "todos")
        .iter()
        .map(|e| &e["event"]["todos"])
        .collect();
    assert_eq!(todos.len(), 3, "{todos:#?}");
    assert_eq!(
        todos[0][0],
        json!({"id": "todo-1", "content": "List the files", "status": "pending"})
    );
    assert_eq!(todos[1][0]["status"], "completed");
    assert_eq!(todos[1][1]["status"], "pending");
    assert_eq!(todos[2][1]["status"], "completed");

    // Codex counts cached input inside input_tokens; sessiond's input is the uncached part.
    let usage = of_type_after(&events, 0, "usage");
    assert_eq!(usage.len(), 1);
    let u = &usage[0]["event"]["turnUsage"];
    assert_eq!(
        (u["input"].as_f64(), u["cacheRead"].as_f64()),
        (Some(1000.0), Some(200.0))
    );
    assert_eq!(u["output"], 345.0);

    // The next turn resumes the thread, its prompt read from stdin (`-`).
    let from = last_seq(&s, &id);
    message(&s, &id, json!({ "prompt": "is it still 3?" }));
    let t = wait_terminal(&s, &id, from + 1);
    assert_eq!(t["event"]["result"], "The count is still 3.");
    let mut want: Vec<&str> = args.to_vec();
    want.extend(["resume", "0199a213-81c0-7800-8aa1-bbab2a035a53", "-"]);
    assert_eq!(args_of(&dir, 2), want);
    assert_eq!(read(&dir, "run-2.stdin"), "is it still 3?");
}

#[test]
fn generic_protocol_maps_each_line_type_and_takes_the_prompt_as_the_last_argument() {
    let s = server();
    command_agent(
        &s,
        "generic",
        json!({
            "prompt": "argv",
            "args": ["--mode", "agent"],
            "env": { "FAKE_FIXTURE": fixture("generic.jsonl") },
        }),
    );
    let dir = agent_dir(&s, "generic");
    let id = start(&s, "generic", "count the files");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(t["event"]["status"], "completed", "{t:#}");
    assert_eq!(t["event"]["result"], "There are 3 files.");
    assert_eq!(args_of(&dir, 1), ["--mode", "agent", "count the files"]);
    assert_eq!(
        read(&dir, "run-1.stdin"),
        "",
        "argv prompts leave stdin empty"
    );

    let events = history(&s, &id);
    let st = steps(&events, 0);
    assert_eq!(
        st,
        [
            json!({"type": "reasoning", "text": "Thinking about the files."}),
            json!({"type": "system", "message": "this line is not JSON: a log message the program printed"}),
            json!({"type": "tool_call_start", "toolName": "count_files", "toolCallId": "call-1", "input": {"dir": "."}}),
            json!({"type": "tool_call", "toolName": "count_files", "toolCallId": "call-1", "input": {"dir": "."},
                   "isError": false, "output": [{"type": "text", "text": "3 files"}]}),
            json!({"type": "tool_call_start", "toolName": "read_file", "toolCallId": "call-2", "input": {"path": "missing.txt"}}),
            json!({"type": "tool_call", "toolName": "read_file", "toolCallId": "call-2", "input": {"path": "missing.txt"},
                   "isError": true, "output": [{"type": "text", "text": "no such file"}]}),
            json!({"type": "system", "message": "indexing finished"}),
            json!({"type": "text", "text": "There are 3 files."}),
        ]
    );
    let todos = of_type_after(&events, 0, "todos");
    assert_eq!(
        todos[0]["event"]["todos"],
        json!([{"id": "t1", "content": "Count files", "status": "in_progress"}])
    );
    let usage = of_type_after(&events, 0, "usage");
    assert_eq!(usage.len(), 1);
    let u = &usage[0]["event"]["turnUsage"];
    assert_eq!(
        (
            u["input"].as_f64(),
            u["output"].as_f64(),
            u["cacheRead"].as_f64()
        ),
        (Some(120.0), Some(30.0), Some(10.0))
    );
    assert_eq!(u["cost"]["total"], 0.0012);
    // The unknown line type left no trace.
    assert!(
        !serde_json::to_string(&events)
            .unwrap()
            .contains("future_type")
    );
}

#[test]
fn ask_ends_the_turn_and_the_answer_is_the_next_runs_prompt() {
    let s = server();
    command_agent(
        &s,
        "asker",
        json!({ "env": {
            "FAKE_FIXTURE": fixture("generic-ask.jsonl"),
            "FAKE_FIXTURE_2": fixture("generic-answer.jsonl"),
        }}),
    );
    let dir = agent_dir(&s, "asker");
    let id = start(&s, "asker", "draw the chart");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(etype(&t), "ask", "{t:#}");
    assert_eq!(
        t["event"]["questions"],
        json!([{
            "question": "Which colour should the chart use?",
            "header": "Colour",
            "options": [{"label": "red"}, {"label": "blue", "description": "the house colour"}]
        }])
    );
    assert_eq!(t["event"]["state"]["status"], "waiting_for_human");
    let d = detail_checked(&s, &id);
    assert_eq!(d["bucket"], "asking", "{d:#}");

    let from = seq(&t);
    let (status, v) = s.post(
        &s.sessions_url(&format!("/{id}/answer")),
        &json!({"answer": "blue"}),
    );
    assert_eq!(status, 200, "{v}");
    assert_schema(ANSWER_RESPONSE, &v);
    let t = wait_terminal(&s, &id, from + 1);
    assert_eq!(t["event"]["status"], "completed", "{t:#}");
    assert_eq!(
        t["event"]["result"],
        "Drawing the chart in the colour you chose."
    );
    assert_eq!(
        read(&dir, "run-2.stdin"),
        "blue",
        "the answer is the prompt"
    );
    assert!(read(&dir, "run-2.env").contains("SESSIOND_INPUT_KIND=answer\n"));
    // The result was the run's only reply, so it is shown as a text step too.
    let events = history(&s, &id);
    let st = steps(&events, from);
    assert_eq!(
        st,
        [json!({"type": "text", "text": "Drawing the chart in the colour you chose."})]
    );
}

#[test]
fn interrupt_stops_the_whole_process_group_at_once_r47() {
    let s = server();
    command_agent(
        &s,
        "sleeper",
        json!({ "env": {
            "FAKE_FIXTURE": fixture("generic-ask.jsonl"),
            "FAKE_BACKGROUND": "1",
            "FAKE_SLEEP": "120",
        }}),
    );
    let dir = agent_dir(&s, "sleeper");
    let id = start(&s, "sleeper", "work for a long time");
    // The CLI is running: its first line is in the timeline.
    s.wait_for_event(&id, &["step"], 0, WAIT);
    let leader = read(&dir, "leader.pid").trim().to_owned();
    let bg = read(&dir, "bg.pid").trim().to_owned();
    assert!(!gone(&leader) && !gone(&bg), "the CLI and its child run");

    let from = last_seq(&s, &id);
    let (status, v) = s.post_raw(&s.sessions_url(&format!("/{id}/interrupt")), "");
    assert_eq!(status, 200, "{v}");
    let t = wait_terminal(&s, &id, from + 1);
    assert_eq!(etype(&t), "interrupted", "{t:#}");
    assert_gone_soon("the CLI", &leader);
    assert_gone_soon("the CLI's background child", &bg);
    // The engine stopped it itself: the runner did not have to cut the turn off.
    let events = history(&s, &id);
    assert!(
        !events.iter().any(|e| e["event"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("grace period")),
        "{events:#?}"
    );
    // The ask the CLI printed before it was stopped does not outlive the interrupt.
    assert!(of_type_after(&events, 0, "ask").is_empty());
}

#[test]
fn a_failing_cli_fails_the_turn_with_its_stderr_tail() {
    let s = server();
    command_agent(
        &s,
        "broken",
        json!({
            "protocol": "claude",
            "args": CLAUDE_ARGS,
            "env": {
                "FAKE_STDERR": "Error: the model is overloaded (529), try again later",
                "FAKE_EXIT": "3",
            },
        }),
    );
    let id = start(&s, "broken", "hello");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(etype(&t), "complete", "{t:#}");
    assert_eq!(t["event"]["status"], "failed", "{t:#}");
    assert_eq!(
        t["event"]["error"],
        "`fake-cli.sh` failed with exit code 3: Error: the model is overloaded (529), try again later"
    );
    assert_eq!(t["event"]["state"]["status"], "failed");
    let d = detail_checked(&s, &id);
    assert_eq!(d["turnStatus"], "complete");
    history(&s, &id);
}

#[test]
fn the_turn_timeout_stops_the_cli_and_fails_the_turn() {
    let s = server();
    command_agent(
        &s,
        "slow",
        json!({
            "timeoutMs": 1500,
            "env": { "FAKE_BACKGROUND": "1", "FAKE_SLEEP": "120" },
        }),
    );
    let dir = agent_dir(&s, "slow");
    let started = Instant::now();
    let id = start(&s, "slow", "take forever");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(t["event"]["status"], "failed", "{t:#}");
    assert_eq!(
        t["event"]["error"],
        "`fake-cli.sh` did not finish within the turn timeout (1500 ms) and was stopped"
    );
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1500), "{took:?}");
    assert_gone_soon("the CLI", read(&dir, "leader.pid").trim());
    assert_gone_soon("the CLI's background child", read(&dir, "bg.pid").trim());
}

#[test]
fn a_steer_during_a_run_runs_the_cli_again_in_the_same_turn_r25() {
    let s = server();
    command_agent(
        &s,
        "steered",
        json!({
            "protocol": "claude",
            "args": CLAUDE_ARGS,
            "env": {
                "FAKE_FIXTURE": fixture("claude-stream.jsonl"),
                "FAKE_SLEEP_1": "3",
                "FAKE_FIXTURE_2": fixture("claude-resumed.jsonl"),
            },
        }),
    );
    let dir = agent_dir(&s, "steered");
    let id = start(&s, "steered", "count the files");
    // Run 1 has printed its stream and sleeps before exiting.
    s.wait_for_event(&id, &["usage"], 0, WAIT);
    let ack = message(
        &s,
        &id,
        json!({ "prompt": "include hidden files too", "behavior": "steer" }),
    );
    assert_eq!(
        ack["delivery"], "accepted",
        "the steer joined the running turn: {ack}"
    );
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(t["event"]["status"], "completed", "{t:#}");
    assert_eq!(t["event"]["result"], "Still 3 files, as before.");

    // One turn, two runs: the second resumes the CLI session with the steer as its prompt.
    let events = history(&s, &id);
    assert_eq!(of_type_after(&events, 0, "turn_started").len(), 1);
    assert_eq!(of_type_after(&events, 0, "complete").len(), 1);
    assert_eq!(read(&dir, "run-2.stdin"), "include hidden files too");
    assert!(read(&dir, "run-2.env").contains("SESSIOND_INPUT_KIND=steer\n"));
    let args = args_of(&dir, 2);
    assert_eq!(
        &args[args.len() - 2..],
        ["--resume", "9d3c7a52-5f0e-4c41-b7de-claude000001"]
    );
    // Both runs' measured usage is the turn's (no estimate mixed in).
    let usage = of_type_after(&events, 0, "usage");
    assert_eq!(usage.len(), 2);
    assert_eq!(usage[1]["event"]["turnUsage"]["input"], 40.0 + 8.0);
    assert_eq!(usage[1]["event"]["turnUsage"]["output"], 95.0 + 12.0);
    assert_eq!(
        usage[1]["event"]["turnUsage"]["cost"]["total"],
        0.0421 + 0.0033
    );
    // The steer is in the turn's conversation, before the second reply.
    let messages = t["event"]["state"]["agent"]["messages"]
        .as_array()
        .expect("messages");
    let texts: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        texts,
        [
            "count the files",
            "There are 3 files in this directory.",
            "include hidden files too",
            "Still 3 files, as before."
        ]
    );
}

#[test]
fn command_engine_configs_are_validated_and_a_missing_program_fails_the_turn() {
    let s = server();
    let url = s.url(&format!("/v1/ws/{WS}/agents"));
    for (i, engine) in [
        json!({"kind": "command"}),
        json!({"kind": "command", "program": ""}),
        json!({"kind": "command", "program": "claude", "protocol": "gemini"}),
        json!({"kind": "command", "program": "claude", "prompt": "file"}),
        json!({"kind": "command", "program": "claude", "timeoutMs": 10}),
        json!({"kind": "command", "program": "claude", "env": {"NOT-A-NAME": "x"}}),
        json!({"kind": "command", "program": "claude", "env": {"LD_PRELOAD": "/tmp/x.so"}}),
        json!({"kind": "command", "program": "claude", "env": {"PATH": "/tmp"}}),
        json!({"kind": "command", "program": "claude", "shell": "bash"}),
        json!({"kind": "command", "program": "claude", "args": "-p"}),
    ]
    .into_iter()
    .enumerate()
    {
        let (status, v) = s.post(&url, &json!({"slug": format!("bad-{i}"), "engine": engine}));
        assert_eq!(status, 400, "{engine} was accepted: {v}");
        assert_eq!(v["error"], "invalid_request", "{v}");
        assert!(
            v["message"].as_str().unwrap_or("").starts_with("engine"),
            "{v}"
        );
    }

    let (status, v) = s.post(
        &url,
        &json!({"slug": "missing", "engine": {"kind": "command", "program": "/nonexistent/agent-cli"}}),
    );
    assert_eq!(status, 201, "{v}");
    let id = start(&s, "missing", "hello");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(t["event"]["status"], "failed", "{t:#}");
    let error = t["event"]["error"].as_str().unwrap_or("");
    assert!(
        error.starts_with("cannot start `/nonexistent/agent-cli`: ")
            && error.contains("No such file or directory"),
        "{error}"
    );
}

#[test]
fn only_programs_the_operator_lists_can_run() {
    // Without `[policy] programs`, no credential can make the server run a program.
    let s = Server::start();
    let (status, v) = s.post(
        &s.url(&format!("/v1/ws/{WS}/agents")),
        &json!({"slug": "cli", "engine": {"kind": "command", "program": fixture("fake-cli.sh")}}),
    );
    assert_eq!(status, 400, "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap_or("")
            .contains("policy.programs"),
        "{v}"
    );
    assert_eq!(s.get(&s.url(&format!("/v1/ws/{WS}/agents/cli"))).0, 404);

    // An agent stored while the program was allowed stops running when the operator withdraws
    // it: its turns fail with the reason instead of running anything.
    let mut s = server();
    command_agent(&s, "cli", json!({"protocol": "generic"}));
    s.stop();
    std::fs::write(s.tmp_dir().join("sessiond.toml"), "").expect("rewrite config");
    s.restart();
    let id = start(&s, "cli", "hello");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(t["event"]["status"], "failed", "{t:#}");
    let error = t["event"]["error"].as_str().unwrap_or("");
    assert!(error.contains("policy.programs"), "{error}");
    assert!(
        !agent_dir(&s, "cli").join("run-1.stdin").exists(),
        "the program did not run"
    );
}

#[test]
fn programs_left_running_by_a_killed_server_are_stopped_at_the_next_start() {
    let mut s = server();
    command_agent(
        &s,
        "orphan",
        json!({"env": { "FAKE_BACKGROUND": "1", "FAKE_SLEEP": "120" }}),
    );
    let dir = agent_dir(&s, "orphan");
    let id = start(&s, "orphan", "work for a long time");
    let bg = poll_until("the CLI started its child", Duration::from_secs(10), || {
        std::fs::read_to_string(dir.join("bg.pid"))
            .ok()
            .filter(|p| !p.trim().is_empty())
    });
    let leader = read(&dir, "leader.pid");
    // kill -9: sessiond cannot stop its children itself.
    s.kill9();
    assert!(!gone(leader.trim()), "the CLI outlived the killed server");
    s.kill9_and_restart();
    assert_gone_soon("the orphaned CLI", leader.trim());
    assert_gone_soon("the orphaned CLI's child", bg.trim());
    // The turn itself was ended by recovery (R47: a terminal for every turn).
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(t["event"]["type"], "interrupted", "{t:#}");
    let records = s.data_dir.join("run/children");
    assert_eq!(
        std::fs::read_dir(&records).map(|d| d.count()).unwrap_or(0),
        0,
        "no stale records"
    );
}

#[test]
fn generic_programs_run_background_tasks_and_sleep() {
    let s = server();
    command_agent(
        &s,
        "worker",
        json!({
            "env": {
                "FAKE_FIXTURE_1": fixture("generic-tasks.jsonl"),
                "FAKE_FIXTURE_2": fixture("generic-woken.jsonl"),
            },
        }),
    );
    let dir = agent_dir(&s, "worker");
    let id = start(&s, "worker", "build it");
    let t = wait_terminal(&s, &id, 0);
    assert_eq!(etype(&t), "sleep", "{t:#}");
    let events = history(&s, &id);
    let started = of_type_after(&events, 0, "task_started");
    assert_eq!(started.len(), 1);
    let task = &started[0]["event"]["task"];
    assert_eq!(task["id"], "t1", "sessiond gives the task its own id");
    assert_eq!(task["name"], "cargo build");
    assert_eq!(task["label"], "building the project");
    assert_eq!(task["kind"], "tool");
    let output = of_type_after(&events, 0, "task_output");
    assert_eq!(output.len(), 1);
    assert_eq!(output[0]["event"]["chunk"], "compiling sessiond\n");
    let settled = of_type_after(&events, 0, "task_settled");
    assert_eq!(settled[0]["event"]["settlement"]["result"], "built in 1 s");
    assert_eq!(settled[0]["event"]["settlement"]["status"], "completed");
    assert!(
        steps(&events, 0)
            .iter()
            .any(|s| s["message"].as_str().unwrap_or("").contains("task `nope`")),
        "a line about an unknown task is reported, not fatal"
    );

    // The wake runs the program again, told why.
    let t = wait_terminal(&s, &id, seq(&t) + 1);
    assert_eq!(t["event"]["status"], "completed", "{t:#}");
    assert_eq!(t["event"]["result"], "Awake: all good.");
    assert!(read(&dir, "run-2.env").contains("SESSIOND_INPUT_KIND=wake"));
}
