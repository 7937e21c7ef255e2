//! The command line of the real binary: help and version, where `--data-dir` may go, the
//! environment, config-file validation, and what a zero-config `serve` creates.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `sessiond serve` started by a test with its own command line; SIGKILLed on drop.
struct Running {
    child: Option<Child>,
    base: String,
}

impl Running {
    /// Spawns `cmd` and waits (bounded) for the `sessiond listening on URL` line.
    fn spawn(mut cmd: Command) -> Running {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn sessiond");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep draining so the child never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sessiond printed nothing within 30 s");
            }
        };
        let base = line
            .trim()
            .strip_prefix("sessiond listening on ")
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!("unexpected first line: {line:?}")
            })
            .to_owned();
        Running {
            child: Some(child),
            base,
        }
    }

    fn healthz(&self) -> serde_json::Value {
        let resp = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap()
            .get(format!("{}/healthz", self.base))
            .send()
            .expect("GET /healthz");
        let (status, v) = into_json(resp);
        assert_eq!(status, 200, "{v}");
        v
    }

    /// SIGTERM (by pid) and a bounded wait for the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("sessiond did not stop within 30 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `cmd`, checks it answers, stops it cleanly and checks the database landed in `dir`.
fn serve_and_check_data_dir(cmd: Command, dir: &Path) {
    let mut server = Running::spawn(cmd);
    assert_eq!(server.healthz()["status"], "ok");
    assert!(
        dir.join("sessiond.db").is_file(),
        "no database in {}",
        dir.display()
    );
    assert!(server.stop().success());
}

#[test]
fn help_and_version_mention_sessiond() {
    let mut cmd = sessiond_command();
    cmd.arg("--help");
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr_of(&out));
    let help = stdout_of(&out);
    for word in ["sessiond", "serve", "backup", "--data-dir", "--config"] {
        assert!(help.contains(word), "--help lacks {word:?}:\n{help}");
    }

    let mut cmd = sessiond_command();
    cmd.args(["serve", "--help"]);
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(out.status.success());
    assert!(stdout_of(&out).contains("--bind"), "{}", stdout_of(&out));

    let mut cmd = sessiond_command();
    cmd.arg("--version");
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr_of(&out));
    let version = stdout_of(&out);
    assert!(version.contains("sessiond"), "{version}");
    assert!(version.contains(env!("CARGO_PKG_VERSION")), "{version}");
}

#[test]
fn unknown_subcommand_or_flag_fails() {
    for args in [&["frobnicate"][..], &["serve", "--no-such-flag"], &[]] {
        let mut cmd = sessiond_command();
        cmd.args(args);
        let out = run_bounded(cmd, Duration::from_secs(30));
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr_of(&out));
    }
}

/// `--data-dir` is global: it works before and after the subcommand.
#[test]
fn data_dir_flag_before_and_after_subcommand() {
    let tmp = tempfile::tempdir().unwrap();

    let before = tmp.path().join("before");
    let mut cmd = sessiond_command();
    cmd.arg("--data-dir")
        .arg(&before)
        .args(["serve", "--bind", "127.0.0.1:0"]);
    serve_and_check_data_dir(cmd, &before);

    let after = tmp.path().join("after");
    let mut cmd = sessiond_command();
    cmd.args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&after);
    serve_and_check_data_dir(cmd, &after);
}

/// `SESSIOND_DATA_DIR` selects the data dir; an explicit flag wins over it.
#[test]
fn data_dir_from_environment_and_flag_precedence() {
    let tmp = tempfile::tempdir().unwrap();
    let from_env = tmp.path().join("env");
    let mut cmd = sessiond_command();
    cmd.env("SESSIOND_DATA_DIR", &from_env)
        .args(["serve", "--bind", "127.0.0.1:0"]);
    serve_and_check_data_dir(cmd, &from_env);

    let ignored = tmp.path().join("ignored");
    let flag = tmp.path().join("flag");
    let mut cmd = sessiond_command();
    cmd.env("SESSIOND_DATA_DIR", &ignored)
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&flag);
    serve_and_check_data_dir(cmd, &flag);
    assert!(!ignored.exists(), "the environment won over the flag");
}

/// Unknown config keys (top level or nested) and unusable values fail with exit code 2 and a
/// message naming the key; nothing is created.
#[test]
fn invalid_config_fails_with_exit_2_naming_the_key() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    for (toml, key) in [
        ("bogus_key = 1\n", "bogus_key"),
        ("[runner]\nwokers = 2\n", "wokers"),
        ("[stream]\nkeepalive = 200\n", "keepalive"),
        ("[no_such_section]\nx = 1\n", "no_such_section"),
        ("[runner]\nworkers = 0\n", "runner.workers"),
        ("[runner]\nworkers = \"many\"\n", "workers"),
    ] {
        let cfg = tmp.path().join("sessiond.toml");
        std::fs::write(&cfg, toml).unwrap();
        let mut cmd = sessiond_command();
        cmd.arg("--config")
            .arg(&cfg)
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(&data);
        let out = run_bounded(cmd, Duration::from_secs(30));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{toml:?}: {stderr}");
        assert!(
            stderr.contains(key),
            "{toml:?}: stderr does not name {key}: {stderr}"
        );
        assert!(
            !data.exists(),
            "{toml:?}: data dir created despite a bad config"
        );
    }
    // A config file that does not exist is also a configuration error.
    let mut cmd = sessiond_command();
    cmd.arg("--config")
        .arg(tmp.path().join("missing.toml"))
        .args(["serve", "--bind", "127.0.0.1:0"]);
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("missing.toml"));
}

/// Zero-config `serve` creates `./sessiond-data/sessiond.db` in WAL mode.
#[test]
fn zero_config_serve_creates_data_dir_and_wal_database() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = sessiond_command();
    cmd.current_dir(tmp.path())
        .args(["serve", "--bind", "127.0.0.1:0"]);
    let dir = tmp.path().join("sessiond-data");
    assert!(!dir.exists());
    serve_and_check_data_dir(cmd, &dir);

    let conn = open_db_readonly(&dir.join("sessiond.db"));
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode.to_ascii_lowercase(), "wal");
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert!(version >= 1, "migrations not applied");
    assert_eq!(count_rows(&conn, "workspaces"), 1);
}

/// `SESSIOND_BIND` is honoured like `--bind`.
#[test]
fn bind_from_environment() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut cmd = sessiond_command();
    cmd.env("SESSIOND_BIND", "127.0.0.1:0")
        .arg("serve")
        .arg("--data-dir")
        .arg(&dir);
    serve_and_check_data_dir(cmd, &dir);
}
