//! The README's shell commands, checked so that the README cannot drift from what sessiond does.
//!
//! Every command line in the README's `sh` blocks is either run as written against a real server
//! (the CLI and curl walk-through of the Quick start, and its SSE command), or is one whose effect
//! this test checks in an equivalent way: `cargo run --release -- serve` is the built binary's
//! `serve` with the same environment; `cargo install --locked` needs a current `Cargo.lock`; the
//! PostgreSQL pass of a test target is the variable the harness reads and a target `.ci/run` runs
//! on that pass; the
//! Docker and systemd commands (which cannot run here) must be the ones the `Dockerfile` and
//! `dist/sessiond.service` document, and their `user create` the walk-through's. A command line
//! this file does not know fails the test: a new README command comes with its check.
//!
//! The walk-through needs `bash`, `curl` and `jq` (`.ci/run` installs them), the webhook example
//! `openssl` too.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const README: &str = include_str!("../README.md");

/// The URL and binary path the README's commands name.
const README_URL: &str = "http://127.0.0.1:8080";
const README_BIN: &str = "target/release/sessiond";

/// The contents of the README's ```sh blocks, with the heading each one is under.
fn sh_blocks() -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut block: Option<String> = None;
    for line in README.lines() {
        match &mut block {
            Some(b) if line.trim_start().starts_with("```") => {
                out.push((heading.clone(), std::mem::take(b)));
                block = None;
            }
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
            None if line.trim_start() == "```sh" => block = Some(String::new()),
            None if line.starts_with('#') => heading = line.trim_start_matches('#').trim().into(),
            None => {}
        }
    }
    out
}

/// The commands of a block: continuation lines joined, comment lines and trailing `# …` comments
/// dropped.
fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = line.trim_end();
        if line.trim_start().starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (body, more) = match line.strip_suffix('\\') {
            Some(body) => (body, true),
            None => (line, false),
        };
        current.push_str(body.trim_start());
        current.push(' ');
        if !more {
            let command = match current.find("  #").or_else(|| current.find(" # ")) {
                Some(i) => &current[..i],
                None => current.as_str(),
            };
            out.push(command.trim().to_owned());
            current.clear();
        }
    }
    out
}

/// The demo engine's reply as the Quick start quotes it: the ```text block after the sentence
/// that introduces it.
fn quoted_reply() -> String {
    let intro = "The demo engine's reply, as `jq` prints it:";
    let after = README
        .split_once(intro)
        .unwrap_or_else(|| panic!("README: no {intro:?}"))
        .1;
    let block = after
        .split_once("```text\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .expect("README: the quoted reply's block")
        .0;
    block.to_owned()
}

/// Fails with a clear message when a tool the walk-through needs is missing.
fn require(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "the README walk-through needs {tool} on PATH");
}

/// `sessiond serve` as a new user starts it: in `cwd`, with the default data dir and engine.
struct Serve {
    child: Child,
    base: String,
    log: mpsc::Receiver<String>,
}

impl Serve {
    fn start(cwd: &Path, env: &[(&str, &str)]) -> Serve {
        let mut cmd = sessiond_command();
        cmd.current_dir(cwd)
            .env_remove("SESSIOND_ENGINE")
            .env("SESSIOND_LOG", "info")
            .env("NO_COLOR", "1")
            .args(["serve", "--bind", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn sessiond");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, log) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        let base = first
            .strip_prefix("sessiond listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Serve { child, base, log }
    }

    /// The first log line containing all of `words` (bounded wait).
    fn log_line(&self, words: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .log
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no log line with {words:?}"));
            if words.iter().all(|w| line.contains(w)) {
                return line;
            }
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `cargo run --release -- serve`, with the environment the README puts before it, is the
/// binary's `serve` with that environment: check the engine it says it runs.
fn check_serve_command(command: &str) {
    let (env_part, _) = command
        .split_once("cargo run --release -- serve")
        .expect("a serve command");
    let env: Vec<(&str, &str)> = env_part
        .split_whitespace()
        .map(|kv| kv.split_once('=').expect("VAR=value"))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let server = Serve::start(tmp.path(), &env);
    let line = server.log_line(&["default engine"]);
    let model = env
        .iter()
        .find(|(k, _)| *k == "OPENAI_MODEL")
        .map(|(_, v)| *v);
    let endpoint = env
        .iter()
        .find(|(k, _)| *k == "OPENAI_BASE_URL")
        .map(|(_, v)| *v);
    if env.is_empty() {
        assert!(line.contains("scripted"), "{command}: {line}");
    } else {
        assert!(line.contains("openai"), "{command}: {line}");
        assert!(
            line.contains(model.unwrap_or("gpt-4o-mini")),
            "{command}: {line}"
        );
        if let Some(url) = endpoint {
            assert!(line.contains(url), "{command}: {line}");
        }
    }
    assert!(tmp.path().join("sessiond-data/sessiond.db").is_file());
}

/// Runs the Quick start's CLI and curl block with bash, as written (only the URL and the path of
/// the binary are this test's), and returns its output and the `KEY` and `ID` it set.
fn run_walkthrough(cwd: &Path, base: &str, block: &str) -> (String, String, String) {
    let script = format!(
        "set -euo pipefail\n{}\nprintf '\\nKEY=%s\\nID=%s\\n' \"$KEY\" \"$ID\"\n",
        block
            .replace(README_URL, base)
            .replace(README_BIN, env!("CARGO_BIN_EXE_sessiond"))
    );
    let mut cmd = Command::new("bash");
    cmd.current_dir(cwd)
        .args(["-c", &script])
        .env_remove("SESSIOND_DATA_DIR")
        .env_remove("SESSIOND_CONFIG")
        .env_remove("SESSIOND_LOG");
    let out = run_bounded(cmd, Duration::from_secs(120));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the README walk-through failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value = |name: &str| {
        stdout
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
            .to_owned()
    };
    (stdout.clone(), value("KEY"), value("ID"))
}

/// The webhook trigger example, run as written with the walk-through's `KEY` (only the URL is
/// this test's): it registers an agent and its GitHub trigger, signs a delivery with `openssl`
/// and sends it, which must start a task.
fn run_webhook_example(cwd: &Path, base: &str, key: &str, block: &str) {
    let script = format!("set -euo pipefail\n{}", block.replace(README_URL, base));
    let mut cmd = Command::new("bash");
    cmd.current_dir(cwd).args(["-c", &script]).env("KEY", key);
    let out = run_bounded(cmd, Duration::from_secs(60));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the README's webhook example failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // curl prints each answer without a newline: the delivery's is the last JSON value.
    let answer: Value = serde_json::Deserializer::from_str(&stdout)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .last()
        .unwrap_or_else(|| panic!("no answer from the delivery: {stdout}"));
    assert_eq!(
        answer["created"], true,
        "the delivery started a task: {stdout}"
    );
    assert_eq!(
        answer["task_name"], "webhook:github:1c4e1f0a-7a51-4bd5-9b2e-2f1fa4c6b6d1",
        "{stdout}"
    );
}

/// The SSE command, run as written: it replays the timeline, then shows a message's reply as it
/// streams. Ended by this test (killing its process group), as a person ends it with Ctrl-C.
fn run_sse_command(
    command: &str,
    base: &str,
    key: &str,
    id: &str,
    http: &reqwest::blocking::Client,
) {
    let mut child = Command::new("bash")
        .args(["-c", &command.replace(README_URL, base)])
        .env("KEY", key)
        .env("ID", id)
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the SSE command");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, frames) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(data) = line.strip_prefix("data: ")
                && let Ok(v) = serde_json::from_str::<Value>(data)
                && tx.send(v).is_err()
            {
                break;
            }
        }
    });
    let next_until = |what: &str, pred: &dyn Fn(&Value) -> bool| -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let frame = frames
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {what} on the stream; saw {seen:#?}"));
            let done = pred(&frame);
            seen.push(frame);
            if done {
                return seen;
            }
        }
    };
    let is_complete = |f: &Value| f["event"]["type"] == "complete";
    let replay = next_until("replayed terminal", &is_complete);
    assert_eq!(replay[0]["seq"], 1, "since=0 replays from the start");
    assert_eq!(replay[0]["event"]["type"], "session_created");
    let resp = http
        .post(format!("{base}/v1/ws/default/agent/sessions/{id}/messages"))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(r#"{"prompt": "/stream 20"}"#)
        .send()
        .expect("send a message");
    assert_eq!(resp.status().as_u16(), 200);
    let live = next_until("the message's terminal", &is_complete);
    let streamed: String = live
        .iter()
        .filter(|f| f["event"]["step"]["type"] == "text_delta")
        .filter_map(|f| f["event"]["step"]["delta"].as_str())
        .collect();
    let all: String = (1..=20).map(|i| format!("chunk {i} ")).collect();
    assert_eq!(streamed, all, "the reply streamed in");
    let _ = Command::new("kill")
        .arg("--")
        .arg(format!("-{}", child.id()))
        .status();
    let _ = child.wait();
}

/// `SESSIOND_TEST_BACKEND=postgres cargo test --test NAME`: the harness reads that variable with
/// that value, NAME is a test target, and `.ci/run` runs it on its PostgreSQL pass (it is not one
/// of the targets the pass leaves out).
fn check_postgres_pass_command(command: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = command
        .strip_prefix("SESSIOND_TEST_BACKEND=postgres cargo test --test ")
        .expect("a PostgreSQL pass command");
    assert!(
        root.join("tests").join(format!("{target}.rs")).is_file(),
        "README: {command:?} names no test target"
    );
    let backend = std::fs::read_to_string(root.join("tests/common/backend.rs")).unwrap();
    assert!(
        backend.contains("\"SESSIOND_TEST_BACKEND\"") && backend.contains("\"postgres\""),
        "the harness does not read SESSIOND_TEST_BACKEND=postgres"
    );
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.contains("\nexport SESSIOND_TEST_BACKEND=postgres\n"),
        ".ci/run has no PostgreSQL pass"
    );
    let left_out = ci
        .lines()
        .find_map(|l| l.trim().strip_suffix(") ;;"))
        .expect("the targets .ci/run's PostgreSQL pass leaves out");
    assert!(
        !left_out.split('|').any(|name| name.trim() == target),
        "README: .ci/run's PostgreSQL pass leaves out {target}"
    );
}

/// `--locked` refuses a `Cargo.lock` that does not match `Cargo.toml`.
fn check_lock_file_is_current() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR")).args([
        "tree",
        "--locked",
        "--offline",
        "-e",
        "normal",
        "--prefix",
        "none",
    ]);
    let out = run_bounded(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "Cargo.lock is not current: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The README's command is one of the commands `file`'s header comment documents.
fn assert_documented_in(file: &str, command: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let documented = text
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .any(|l| l.trim() == command);
    assert!(
        documented,
        "README: {command:?} is not documented in {file}"
    );
}

/// For `printf … | <prefix> sessiond user create …` run in a container or as the service user:
/// the command with the binary named as in the walk-through, and the prefix checked.
fn user_create_inside(command: &str) -> Option<String> {
    let (input, rest) = command.split_once(" | ")?;
    let (prefix, cli) = rest.split_once("sessiond user create ")?;
    let cli = match prefix {
        "docker exec -i sessiond " => cli,
        "sudo -u sessiond " => {
            // The service's data dir, named as the unit names it.
            let unit = std::fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/sessiond.service"),
            )
            .expect("the unit");
            assert!(unit.contains("\nEnvironment=SESSIOND_DATA_DIR=/var/lib/sessiond\n"));
            cli.strip_suffix(" --data-dir /var/lib/sessiond")?
        }
        _ => return None,
    };
    Some(format!("{input} | {README_BIN} user create {cli}"))
}

/// The walk-through's `user create` command.
fn walkthrough_user_create(blocks: &[(String, String)]) -> String {
    blocks
        .iter()
        .flat_map(|(_, b)| commands(b))
        .find(|c| c.contains(&format!("{README_BIN} user create")))
        .expect("the walk-through creates a user")
}

/// The SDK agent walk-through's commands are how `tests/python/acp_agents` starts its real SDK
/// agents: the same environment variables, and uvicorn serving the agent's `acp` on the loopback.
fn check_sdk_agent_command(command: &str) {
    let suite = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/acp_agents/conftest.py"),
    )
    .expect("the SDK agents' suite");
    if let Some(assignments) = command.strip_prefix("export ") {
        for a in assignments.split_whitespace() {
            let name = a.split('=').next().unwrap_or_default();
            assert!(
                suite.contains(&format!("{name}=")),
                "README: the SDK agents' suite does not set {name} ({command:?})"
            );
        }
    } else if let Some(rest) = command.strip_prefix("uvicorn ") {
        assert!(
            rest.contains(":acp --host 127.0.0.1 --port "),
            "{command:?}"
        );
        assert!(
            suite.contains(
                r#""-m", "uvicorn", f"{self.module}:acp", "--host", "127.0.0.1", "--port""#
            ),
            "README: the SDK agents' suite starts its agents otherwise than {command:?}"
        );
    } else {
        panic!("README (Running AgentEx SDK agents on sessiond): no check for {command:?}");
    }
}

#[test]
fn every_readme_command_runs_as_written_or_has_its_check() {
    require("bash");
    require("curl");
    require("jq");
    require("openssl");
    let blocks = sh_blocks();
    assert!(!blocks.is_empty(), "no sh blocks in the README");
    let tmp = tempfile::tempdir().unwrap();
    let mut server: Option<Serve> = None;
    let mut walked: Option<(String, String)> = None;
    let mut ran = Vec::new();
    for (heading, block) in &blocks {
        let cmds = commands(block);
        if cmds
            .iter()
            .any(|c| c.starts_with(&format!("KEY=$({README_BIN} ")))
        {
            // The walk-through: against a server started as the Quick start starts it.
            let s = server.get_or_insert_with(|| Serve::start(tmp.path(), &[]));
            let (out, key, id) = run_walkthrough(tmp.path(), &s.base, block);
            assert!(
                out.contains("created me@example.com as owner of workspace default (user "),
                "{out}"
            );
            assert!(
                out.lines().any(|l| l == "echo: hello"),
                "the reply is printed: {out}"
            );
            let quoted = quoted_reply();
            assert!(
                out.contains(&format!("{quoted}\n")),
                "the README quotes the reply the demo engine gave:\n{quoted}\n---\n{out}"
            );
            let types: Vec<Value> = out
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter(|v| v.get("seq").is_some())
                .map(|v| v["type"].clone())
                .collect();
            for t in [
                "session_created",
                "prompt_submitted",
                "turn_started",
                "complete",
            ] {
                assert!(
                    types.contains(&Value::from(t)),
                    "history lacks {t}: {types:?}"
                );
            }
            walked = Some((key, id));
            ran.extend(cmds);
            continue;
        }
        if cmds
            .iter()
            .any(|c| c.contains("/agentex/agent_api_keys/webhook-trigger"))
        {
            let (key, _) = walked
                .as_ref()
                .expect("the webhook example comes after the walk-through");
            let s = server.as_ref().expect("a server");
            run_webhook_example(tmp.path(), &s.base, key, block);
            ran.extend(cmds);
            continue;
        }
        for command in cmds {
            if command.contains("cargo run --release -- serve") {
                check_serve_command(&command);
            } else if command.starts_with("curl -sN ") && command.contains("/events") {
                let (key, id) = walked
                    .as_ref()
                    .expect("the SSE command comes after the walk-through");
                let s = server.as_ref().expect("a server");
                run_sse_command(&command, &s.base, key, id, &http_builder().build().unwrap());
            } else if command == "cargo test" {
                // This is that suite.
            } else if command.starts_with("SESSIOND_TEST_BACKEND=postgres cargo test --test ") {
                check_postgres_pass_command(&command);
            } else if command == "cargo install --locked --path ." {
                check_lock_file_is_current();
            } else if command.starts_with("docker ") {
                assert_documented_in("Dockerfile", &command);
            } else if command.starts_with("sudo install ")
                || command.starts_with("sudo useradd ")
                || command.starts_with("sudo systemctl ")
            {
                assert_documented_in("dist/sessiond.service", &command);
            } else if heading == "Running AgentEx SDK agents on sessiond" {
                check_sdk_agent_command(&command);
            } else if let Some(inner) = user_create_inside(&command) {
                assert_eq!(
                    inner,
                    walkthrough_user_create(&blocks),
                    "README ({heading}): {command:?} is not the walk-through's user create"
                );
            } else {
                panic!("README ({heading}): no check for the command {command:?}");
            }
            ran.push(command);
        }
    }
    assert!(
        walked.is_some(),
        "the README has no CLI and curl walk-through"
    );
    assert!(
        ran.len() >= 8,
        "only {} README commands found: {ran:#?}",
        ran.len()
    );
}
