//! The command line of the real binary: help and version, where `--data-dir` and `--database`
//! may go, the environment, config-file validation, what a zero-config `serve` creates, and the
//! PostgreSQL URL's checks, precedence and redaction (against the test cluster of
//! `common/postgres.rs`, whatever `SESSIOND_TEST_BACKEND` says).

mod common;

use std::io::{BufRead, BufReader, Write};
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
    /// The stdout lines after the first (the data dir, the setup link, …).
    lines: mpsc::Receiver<String>,
}

impl Running {
    /// Spawns `cmd` and waits (bounded) for the `sessiond listening on URL` line.
    fn spawn(mut cmd: Command) -> Running {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn sessiond");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        // Every line goes to the channel, so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
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
            lines: rx,
        }
    }

    /// The next stdout line starting with `prefix`, with the prefix removed (bounded wait).
    fn line_after(&self, prefix: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no line starting with {prefix:?}"));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
    }

    fn healthz(&self) -> serde_json::Value {
        let resp = http_builder()
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
    for word in [
        "sessiond",
        "serve",
        "backup",
        "--data-dir",
        "--config",
        "--database",
    ] {
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

// ---------------------------------------------------------------------------------------------
// Where the data is

/// `serve` prints the data dir as an absolute path, also when it was given relative to the
/// current directory.
#[test]
fn serve_prints_the_absolute_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = sessiond_command();
    cmd.current_dir(tmp.path())
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir", "some/data"]);
    let mut server = Running::spawn(cmd);
    let printed = server.line_after("data dir: ");
    let expected = tmp.path().join("some/data");
    assert_eq!(Path::new(&printed), expected, "{printed}");
    assert_eq!(
        server.line_after("database: "),
        format!("SQLite {}", expected.join("sessiond.db").display())
    );
    assert!(expected.join("sessiond.db").is_file());
    assert!(server.stop().success());
}

/// Every command but `serve` refuses a data dir that is not there, naming the absolute path and
/// how to point at another one, and creates nothing.
#[test]
fn commands_other_than_serve_refuse_a_missing_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let expected = tmp.path().join("sessiond-data");
    for args in [
        &[
            "user",
            "create",
            "--email",
            "me@example.com",
            "--password-stdin",
        ][..],
        &["token", "list"],
        &[
            "token",
            "create",
            "--user",
            "me@example.com",
            "--scope",
            "sessions",
        ],
        &["agent", "list"],
        &["workspace", "create", "team"],
        &["app", "create", "--name", "ci", "--scope", "sessions"],
        &["backup", "copy.db"],
    ] {
        let mut cmd = sessiond_command();
        cmd.current_dir(tmp.path()).args(args);
        let out = run_bounded(cmd, Duration::from_secs(30));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("no data dir at {}", expected.display())),
            "{args:?}: {stderr}"
        );
        assert!(stderr.contains("--data-dir"), "{args:?}: {stderr}");
        assert!(!expected.exists(), "{args:?} created the data dir");
    }
}

/// Creates a data dir with a database (and the default workspace) the way `serve` would, by
/// running `workspace create` in an existing empty folder.
fn prepared_data_dir(tmp: &Path) -> std::path::PathBuf {
    let dir = tmp.join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let out = cli_in(&dir, &["workspace", "create", "team"], None);
    assert!(out.status.success(), "{}", stderr_of(&out));
    dir
}

/// Runs a CLI command on `data_dir` with `stdin`.
fn cli_in(data_dir: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut cmd = sessiond_command();
    cmd.args(args).arg("--data-dir").arg(data_dir);
    if let Some(input) = stdin {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(input.as_bytes()).unwrap();
        use std::io::Seek;
        f.rewind().unwrap();
        cmd.stdin(Stdio::from(f));
    }
    run_bounded(cmd, Duration::from_secs(60))
}

/// A CLI error names the data dir it looked in, so "no user" from the wrong directory is
/// recognisable.
#[test]
fn cli_errors_name_the_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = prepared_data_dir(tmp.path());
    let out = cli_in(
        &dir,
        &[
            "token",
            "create",
            "--user",
            "me@example.com",
            "--scope",
            "sessions",
        ],
        None,
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no user me@example.com")
            && stderr.contains(&format!("(data dir: {})", dir.display())),
        "{stderr}"
    );
    let out = cli_in(&dir, &["token", "revoke", "no-such-key"], None);
    assert!(
        stderr_of(&out).contains(&format!("(data dir: {})", dir.display())),
        "{}",
        stderr_of(&out)
    );
    let out = cli_in(
        &dir,
        &["user", "sign-out", "--email", "me@example.com"],
        None,
    );
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no user me@example.com"), "{stderr}");
}

/// A relative `data_dir` in a config file is taken from the file's folder, so the file pins the
/// data wherever sessiond starts; without a file it is relative to the current directory.
#[test]
fn a_relative_data_dir_in_the_config_file_is_beside_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let etc = tmp.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    let cfg = etc.join("sessiond.toml");
    std::fs::write(&cfg, "data_dir = \"state\"\n").unwrap();
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let mut cmd = sessiond_command();
    cmd.current_dir(&elsewhere)
        .arg("--config")
        .arg(&cfg)
        .args(["serve", "--bind", "127.0.0.1:0"]);
    let mut server = Running::spawn(cmd);
    assert_eq!(
        Path::new(&server.line_after("data dir: ")),
        etc.join("state")
    );
    assert!(server.stop().success());
    assert!(etc.join("state/sessiond.db").is_file());
    assert!(!elsewhere.join("state").exists());
    // The CLI finds the same data through the same file, from anywhere.
    let mut cmd = sessiond_command();
    cmd.current_dir(tmp.path())
        .arg("--config")
        .arg(&cfg)
        .args(["agent", "list"]);
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(stdout_of(&out).starts_with("root\t"), "{}", stdout_of(&out));
}

// ---------------------------------------------------------------------------------------------
// Binding

/// `--bind` takes a host name: `localhost` is resolved (and listened on).
#[test]
fn bind_resolves_host_names() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut cmd = sessiond_command();
    cmd.args(["serve", "--bind", "localhost:0", "--data-dir"])
        .arg(&dir);
    let mut server = Running::spawn(cmd);
    assert!(
        server.base.starts_with("http://127.0.0.1:") || server.base.starts_with("http://[::1]:"),
        "{}",
        server.base
    );
    assert_eq!(server.healthz()["status"], "ok");
    assert!(server.stop().success());
}

/// A port in use is reported before anything is created: no data dir, no database.
#[test]
fn a_port_in_use_fails_before_the_data_dir_is_created() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let mut cmd = sessiond_command();
    cmd.args(["serve", "--bind", &addr.to_string(), "--data-dir"])
        .arg(&dir);
    let out = run_bounded(cmd, Duration::from_secs(30));
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
    assert!(!dir.exists(), "the data dir was created: {stderr}");
    assert!(!stderr.contains("migration"), "{stderr}");
    drop(taken);
}

/// A bind value that is not HOST:PORT is a configuration error (exit 2) that says the form.
#[test]
fn a_malformed_bind_address_is_a_configuration_error() {
    let tmp = tempfile::tempdir().unwrap();
    for bind in ["localhost", "127.0.0.1:http", ":8080", "127.0.0.1:99999"] {
        let mut cmd = sessiond_command();
        cmd.args(["serve", "--bind", bind, "--data-dir"])
            .arg(tmp.path().join("data"));
        let out = run_bounded(cmd, Duration::from_secs(30));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{bind}: {stderr}");
        assert!(stderr.contains("HOST:PORT"), "{bind}: {stderr}");
    }
    assert!(!tmp.path().join("data").exists());
}

// ---------------------------------------------------------------------------------------------
// Engines, help, output

/// `SESSIOND_ENGINE` with an unknown kind or bad JSON is a configuration error that names the
/// variable once and lists the kinds; nothing is created.
#[test]
fn a_bad_sessiond_engine_names_the_variable_and_the_kinds() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    for (value, expect) in [
        ("bogus", "SESSIOND_ENGINE: unknown engine kind `bogus`"),
        (
            "{\"kind\": \"bogus\"}",
            "SESSIOND_ENGINE: unknown engine kind `bogus`",
        ),
        ("{not json", "SESSIOND_ENGINE: not JSON"),
        ("{}", "SESSIOND_ENGINE: give at least the engine's kind"),
    ] {
        let mut cmd = sessiond_command();
        cmd.env("SESSIOND_ENGINE", value)
            .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(&dir);
        let out = run_bounded(cmd, Duration::from_secs(30));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{value}: {stderr}");
        assert!(stderr.contains(expect), "{value}: {stderr}");
        assert!(
            stderr.contains(&format!("(data dir: {})", dir.display())),
            "{value}: {stderr}"
        );
        if value.contains("bogus") {
            assert!(
                stderr.contains("scripted"),
                "the kinds are listed: {stderr}"
            );
        }
        assert!(!stderr.contains("engine: engine"), "{stderr}");
        assert!(!dir.exists(), "{value}: the data dir was created");
    }
    // The same mistake in a config file's [engine] is worded the same way.
    let cfg = tmp.path().join("sessiond.toml");
    std::fs::write(&cfg, "[engine]\nkind = \"bogus\"\n").unwrap();
    let mut cmd = sessiond_command();
    cmd.arg("--config")
        .arg(&cfg)
        .args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
        .arg(&dir);
    let out = run_bounded(cmd, Duration::from_secs(30));
    let stderr = stderr_of(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("engine: unknown engine kind `bogus`"),
        "{stderr}"
    );
    assert!(!stderr.contains("engine: engine"), "{stderr}");
}

/// Every subcommand's help describes each option and shows a default once.
#[test]
fn help_describes_every_option_and_shows_defaults_once() {
    for args in [
        &["serve"][..],
        &["backup"],
        &["user", "create"],
        &["user", "sign-out"],
        &["workspace", "create"],
        &["token", "create"],
        &["token", "list"],
        &["token", "revoke"],
        &["app", "create"],
        &["agent", "create"],
        &["agent", "list"],
        &["agent", "update"],
        &["agent", "delete"],
    ] {
        let mut cmd = sessiond_command();
        cmd.args(args).arg("--help");
        let out = run_bounded(cmd, Duration::from_secs(30));
        assert!(out.status.success(), "{args:?}: {}", stderr_of(&out));
        let help = stdout_of(&out);
        for line in help.lines() {
            assert!(
                line.matches("[default:").count() <= 1,
                "{args:?}: a default shown twice: {line:?}\n{help}"
            );
        }
        // An option or argument line (`  --email <EMAIL>`, `  <SLUG>`) carries a description.
        for line in help.lines().filter(|l| {
            let t = l.trim_start();
            l.starts_with("  ")
                && (t.starts_with("--") || t.starts_with('<') || t.starts_with("-h"))
        }) {
            let words: Vec<&str> = line.split("  ").filter(|w| !w.trim().is_empty()).collect();
            assert!(
                words.len() >= 2,
                "{args:?}: no description for {line:?}\n{help}"
            );
        }
    }
    let mut cmd = sessiond_command();
    cmd.args(["user", "create", "--help"]);
    let help = stdout_of(&run_bounded(cmd, Duration::from_secs(30)));
    assert_eq!(help.matches("[default: default]").count(), 1, "{help}");
    assert!(help.contains("email address"), "{help}");
}

/// `user create` says what it created: the first person is the owner, the next a member.
#[test]
fn user_create_says_owner_or_member() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = prepared_data_dir(tmp.path());
    let out = cli_in(
        &dir,
        &[
            "user",
            "create",
            "--email",
            "First@Example.com",
            "--password-stdin",
        ],
        Some("a long password 1\n"),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    let said = stdout_of(&out);
    assert!(
        said.starts_with("created first@example.com as owner of workspace default (user "),
        "{said}"
    );
    let out = cli_in(
        &dir,
        &[
            "user",
            "create",
            "--email",
            "second@example.com",
            "--password-stdin",
            "--workspace",
            "team",
        ],
        Some("a long password 2\n"),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stdout_of(&out)
            .starts_with("created second@example.com as member of workspace team (user "),
        "{}",
        stdout_of(&out)
    );
    // An unknown role is refused by the parser (exit 2), before any password is read.
    let out = cli_in(
        &dir,
        &[
            "user",
            "create",
            "--email",
            "x@example.com",
            "--password-stdin",
            "--role",
            "admin",
        ],
        Some("a long password 3\n"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr_of(&out));
    assert!(stderr_of(&out).contains("owner"), "{}", stderr_of(&out));
}

/// Commands other than `serve` log only warnings by default: no migration lines on a fresh
/// database. `SESSIOND_LOG` still turns them on.
#[test]
fn cli_commands_print_no_info_log_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    let mut cmd = sessiond_command();
    cmd.env_remove("SESSIOND_LOG")
        .args(["workspace", "create", "team", "--data-dir"])
        .arg(&dir);
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stderr_of(&out), "", "a CLI command logged");
    assert_eq!(stdout_of(&out).trim(), "team");

    let dir2 = tmp.path().join("data2");
    std::fs::create_dir_all(&dir2).unwrap();
    let mut cmd = sessiond_command();
    cmd.env("SESSIOND_LOG", "info")
        .args(["token", "list", "--data-dir"])
        .arg(&dir2);
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(
        stderr_of(&out).contains("applied migration"),
        "{}",
        stderr_of(&out)
    );
}

/// Each start prints a new setup link, and says that the links of earlier starts stay valid: the
/// link printed before a restart creates the owner after it; then no link works, and the refusal
/// says why.
#[test]
fn a_setup_link_from_before_a_restart_still_works() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let start = || {
        let mut cmd = sessiond_command();
        cmd.args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
            .arg(&dir);
        Running::spawn(cmd)
    };
    let token_of = |server: &Running| {
        let line = server.line_after("no account yet: open ");
        assert!(line.contains("each start prints a new link"), "{line}");
        assert!(line.contains("stay valid until the owner"), "{line}");
        let url = line.split_whitespace().next().unwrap().to_owned();
        url.split_once("/setup#").unwrap().1.to_owned()
    };
    let mut first = start();
    let old = token_of(&first);
    assert!(first.stop().success());
    let mut second = start();
    let new = token_of(&second);
    assert_ne!(old, new);
    let http = http_builder().build().unwrap();
    let setup = |token: &str| {
        let resp = http
            .post(format!("{}/auth/setup", second.base))
            .json(&serde_json::json!({"token": token, "email": "me@example.com", "password": "a long password 1"}))
            .send()
            .unwrap();
        into_json(resp)
    };
    let (status, v) = setup(&old);
    assert_eq!(status, 200, "{v}");
    let (status, v) = setup(&new);
    assert_eq!(status, 403, "{v}");
    let message = v["message"].as_str().unwrap_or("");
    assert!(
        message.contains("it was used already") && message.contains("latest start"),
        "{message}"
    );
    assert!(second.stop().success());
}

// ---------------------------------------------------------------------------------------------
// The database URL (PostgreSQL; a build without it refuses every URL)

/// Against the test cluster of `common/postgres.rs`, in either pass of the suite.
#[cfg(feature = "postgres")]
mod database_url {
    use super::*;

    /// Whether sessiond has brought `db` up to its schema (it has opened it).
    fn migrated(db: &postgres::Database) -> bool {
        db.psql("SELECT to_regclass('schema_migrations') IS NOT NULL") == "t"
    }

    /// `db`'s URL with a password in it (the test cluster trusts its socket and ignores it):
    /// `S3cr!t Pw`, percent-encoded.
    const PASSWORD: &str = "S3cr!t Pw";
    const PASSWORD_ENCODED: &str = "S3cr%21t%20Pw";

    fn with_password(url: &str) -> String {
        let (user, rest) = url.split_once('@').expect("a user in the URL");
        format!("{user}:{PASSWORD_ENCODED}@{rest}")
    }

    fn assert_no_password(what: &str, text: &str) {
        for secret in [PASSWORD, PASSWORD_ENCODED, "S3cr"] {
            assert!(!text.contains(secret), "{what} shows the password:\n{text}");
        }
    }

    /// What a `sessiond serve` printed until it was listening and had named its database (then it
    /// is stopped), or until it exited.
    struct Served {
        stdout: Vec<String>,
        stderr: String,
        /// Whether it got as far as listening.
        listened: bool,
    }

    fn serve_once(mut cmd: Command) -> Served {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn sessiond");
        let stdout = child.stdout.take().expect("stdout");
        let mut stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let err = std::thread::spawn(move || {
            let mut all = String::new();
            let _ = std::io::Read::read_to_string(&mut stderr, &mut all);
            all
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut lines = Vec::new();
        let mut listened = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    listened |= line.starts_with("sessiond listening on ");
                    let named = line.starts_with("database: ");
                    lines.push(line);
                    if named {
                        break;
                    }
                }
                // It exited (stdout closed) before naming its database.
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("sessiond neither served nor exited within 60 s: {lines:?}");
                }
            }
        }
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let status = child.wait().expect("wait");
        lines.extend(rx.try_iter());
        let stderr = err.join().unwrap_or_default();
        if listened {
            assert!(status.success(), "{status}: {stderr}");
        }
        Served {
            stdout: lines,
            stderr,
            listened,
        }
    }

    /// `--database` is global like `--data-dir`: before the subcommand, between a subcommand and its
    /// action, after the action's own options, and for `serve`. Wherever it is, the store is the
    /// PostgreSQL database (migrated) and no SQLite file appears.
    #[test]
    fn the_database_flag_works_anywhere_on_the_line() {
        let tmp = tempfile::tempdir().unwrap();
        let lines: [&[&str]; 5] = [
            &["--database", "URL", "token", "list"],
            &["token", "--database", "URL", "list"],
            &["token", "list", "--database", "URL"],
            &[
                "agent",
                "list",
                "--database",
                "URL",
                "--workspace",
                "default",
            ],
            &[
                "app",
                "create",
                "--name",
                "ci",
                "--scope",
                "sessions",
                "--database",
                "URL",
            ],
        ];
        for (i, line) in lines.iter().enumerate() {
            let Some(db) = postgres::database(&format!("anywhere {i}")) else {
                return;
            };
            let dir = tmp.path().join(format!("data{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let args: Vec<&str> = line
                .iter()
                .map(|a| if *a == "URL" { db.url.as_str() } else { a })
                .collect();
            let mut cmd = sessiond_command();
            cmd.args(&args).arg("--data-dir").arg(&dir);
            let out = run_bounded(cmd, Duration::from_secs(60));
            let stderr = stderr_of(&out);
            assert!(
                migrated(&db),
                "{line:?}: the database was not opened: {stderr}"
            );
            assert!(
                !dir.join("sessiond.db").exists(),
                "{line:?}: SQLite was used"
            );
            assert!(!stderr.contains("sessiond.db"), "{line:?}: {stderr}");
        }
        // Whether serve got as far as listening is the backend's business (the PostgreSQL pass
        // tests it); where the flag stands must not change it.
        let mut listened = Vec::new();
        for (i, before) in [true, false].into_iter().enumerate() {
            let Some(db) = postgres::database(&format!("serve {i}")) else {
                return;
            };
            let dir = tmp.path().join(format!("serve{i}"));
            let mut cmd = sessiond_command();
            if before {
                cmd.args(["--database", &db.url]);
            }
            cmd.args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
                .arg(&dir);
            if !before {
                cmd.args(["--database", &db.url]);
            }
            let served = serve_once(cmd);
            assert!(
                migrated(&db),
                "serve did not open the database: {}",
                served.stderr
            );
            assert!(!dir.join("sessiond.db").exists(), "serve used SQLite");
            assert!(!served.stderr.contains("sessiond.db"), "{}", served.stderr);
            if served.listened {
                let named = served
                    .stdout
                    .iter()
                    .find_map(|l| l.strip_prefix("database: "));
                let named = named.unwrap_or_else(|| panic!("{:?}", served.stdout));
                assert!(named.starts_with("PostgreSQL sessiond@"), "{named}");
                assert!(named.ends_with(&format!("/{}", db.name)), "{named}");
            }
            listened.push(served.listened);
        }
        assert_eq!(
            listened[0], listened[1],
            "serve depended on where --database was"
        );
    }

    /// `--database` beats `SESSIOND_DATABASE_URL`, which beats the config file's `database_url`,
    /// which beats the default (SQLite in the data dir); an empty variable counts as unset.
    #[test]
    fn database_url_precedence_is_flag_then_variable_then_file_then_sqlite() {
        let (Some(flag), Some(var), Some(file)) = (
            postgres::database("precedence flag"),
            postgres::database("precedence variable"),
            postgres::database("precedence file"),
        ) else {
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = tmp.path().join("sessiond.toml");
        std::fs::write(&cfg, format!("database_url = \"{}\"\n", file.url)).unwrap();
        let run = |config: bool, variable: Option<&str>, flag: Option<&str>| {
            let mut cmd = sessiond_command();
            cmd.args(["token", "list", "--data-dir"]).arg(&dir);
            if config {
                cmd.arg("--config").arg(&cfg);
            }
            if let Some(v) = variable {
                cmd.env("SESSIOND_DATABASE_URL", v);
            }
            if let Some(f) = flag {
                cmd.args(["--database", f]);
            }
            run_bounded(cmd, Duration::from_secs(60))
        };
        let opened = || (migrated(&flag), migrated(&var), migrated(&file));
        run(true, Some(&var.url), Some(&flag.url));
        assert_eq!(opened(), (true, false, false), "the flag wins");
        run(true, Some(&var.url), None);
        assert_eq!(opened(), (true, true, false), "the variable beats the file");
        run(true, Some(""), None);
        assert_eq!(opened(), (true, true, true), "an empty variable is unset");
        assert!(!dir.join("sessiond.db").exists());
        let out = run(false, None, None);
        assert!(out.status.success(), "{}", stderr_of(&out));
        assert!(dir.join("sessiond.db").is_file(), "the default is SQLite");
    }

    /// A database URL that is not PostgreSQL's — another engine's, a SQLite file's, a path, nothing
    /// — is a configuration error (exit 2) wherever it comes from, naming where and what is
    /// accepted; nothing is created.
    #[test]
    fn a_database_url_that_is_not_postgresql_is_refused_naming_its_source() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let cfg = tmp.path().join("sessiond.toml");
        for (url, says) in [
            ("mysql://root@localhost/sessiond", "has the scheme mysql://"),
            (
                "sqlite:///var/lib/sessiond/sessiond.db",
                "has the scheme sqlite://",
            ),
            ("/var/lib/sessiond/sessiond.db", "is not a URL"),
            ("", "is not a URL"),
            ("postgres://app@db.example:notaport/sessiond", "port"),
            ("postgres://app@db.example", "no database name"),
        ] {
            for source in ["--database", "SESSIOND_DATABASE_URL", "database_url"] {
                if url.is_empty() && source == "SESSIOND_DATABASE_URL" {
                    continue;
                }
                let mut cmd = sessiond_command();
                cmd.args(["serve", "--bind", "127.0.0.1:0", "--data-dir"])
                    .arg(&dir);
                match source {
                    "--database" => {
                        cmd.args(["--database", url]);
                    }
                    "SESSIOND_DATABASE_URL" => {
                        cmd.env("SESSIOND_DATABASE_URL", url);
                    }
                    _ => {
                        std::fs::write(&cfg, format!("database_url = {url:?}\n")).unwrap();
                        cmd.arg("--config").arg(&cfg);
                    }
                }
                let out = run_bounded(cmd, Duration::from_secs(30));
                let stderr = stderr_of(&out);
                assert_eq!(out.status.code(), Some(2), "{source} {url:?}: {stderr}");
                assert!(
                    stderr.contains(&format!("{source}: ")),
                    "{source} {url:?}: {stderr}"
                );
                assert!(stderr.contains(says), "{source} {url:?}: {stderr}");
                if !url.starts_with("postgres") {
                    assert!(
                        stderr.contains("postgres:// or postgresql://")
                            && stderr.contains("SQLite needs none"),
                        "{source} {url:?}: {stderr}"
                    );
                }
                assert!(!dir.exists(), "{source} {url:?}: the data dir was created");
            }
        }
    }

    /// The database URL's password (percent-encoded or not) is never shown: not in a refusal of the
    /// URL from any source, a TOML error quoting its line, a failed connection, `backup`'s advice,
    /// `--help` with the variable set, a CLI command's output and log, or `serve`'s start-up lines
    /// and log.
    #[test]
    fn no_message_shows_the_database_password() {
        let Some(db) = postgres::database("no password shown") else {
            return;
        };
        let url = with_password(&db.url);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = tmp.path().join("sessiond.toml");
        let bad_port = format!("postgres://app:{PASSWORD_ENCODED}@db.example:notaport/sessiond");
        let unreachable = format!("postgres://app:{PASSWORD_ENCODED}@127.0.0.1:1/sessiond");
        let other = format!("mysql://app:{PASSWORD_ENCODED}@db.example/sessiond");
        let option =
            format!("postgres://app@db.example:notaport/sessiond?password={PASSWORD_ENCODED}");
        let mut seen = 0;
        let mut check = |what: &str, mut cmd: Command, expect: &str| {
            cmd.arg("--data-dir").arg(&dir);
            let out = run_bounded(cmd, Duration::from_secs(60));
            let all = format!("{}{}", stdout_of(&out), stderr_of(&out));
            assert_no_password(what, &all);
            assert!(all.contains(expect), "{what}: {all}");
            seen += 1;
        };
        for (bad, says) in [
            (&bad_port, "app:***@db.example:notaport"),
            (&unreachable, "app@127.0.0.1:1/sessiond"),
            (&other, "mysql://app:***@db.example"),
            (&option, "password=***"),
        ] {
            let mut cmd = sessiond_command();
            cmd.args(["token", "list", "--database", bad]);
            check("--database", cmd, says);
            let mut cmd = sessiond_command();
            cmd.env("SESSIOND_DATABASE_URL", bad)
                .args(["token", "list"]);
            check("SESSIOND_DATABASE_URL", cmd, says);
            std::fs::write(&cfg, format!("database_url = {bad:?}\n")).unwrap();
            let mut cmd = sessiond_command();
            cmd.arg("--config").arg(&cfg).args(["token", "list"]);
            check("database_url", cmd, says);
        }
        std::fs::write(&cfg, format!("database_url = \"{url}\nbind = 1\n")).unwrap();
        let mut cmd = sessiond_command();
        cmd.arg("--config").arg(&cfg).args(["token", "list"]);
        check("a TOML error", cmd, "invalid config file");
        let mut cmd = sessiond_command();
        cmd.args(["backup", "copy.db", "--database", &url]);
        check("backup", cmd, "pg_dump");
        let mut cmd = sessiond_command();
        cmd.env("SESSIOND_DATABASE_URL", &url).arg("--help");
        check("--help", cmd, "SESSIOND_DATABASE_URL");
        let mut cmd = sessiond_command();
        cmd.env("SESSIOND_LOG", "debug")
            .args(["token", "list", "--database", &url]);
        check("a CLI command", cmd, "");
        assert_eq!(seen, 16);
        assert!(migrated(&db), "the URL with a password was used");

        let mut cmd = sessiond_command();
        cmd.env("SESSIOND_LOG", "debug")
            .args([
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--database",
                &url,
                "--data-dir",
            ])
            .arg(&dir);
        let served = serve_once(cmd);
        assert_no_password("serve's start-up lines", &served.stdout.join("\n"));
        assert_no_password("serve's log", &served.stderr);
    }

    /// With PostgreSQL the data dir still holds the drives: the commands that write a drive folder
    /// (`workspace create`, `agent create`, `agent update`) refuse a missing one as with SQLite, the
    /// others work on the database alone and create nothing on disk. `backup` says what backs up a
    /// PostgreSQL store.
    #[test]
    fn with_postgresql_only_commands_that_write_a_drive_need_the_data_dir() {
        let Some(db) = postgres::database("data dir with postgres") else {
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("sessiond-data");
        for args in [
            &["workspace", "create", "team"][..],
            &["agent", "create", "helper"],
            &["agent", "update", "root", "--name", "Root"],
        ] {
            let mut cmd = sessiond_command();
            cmd.current_dir(tmp.path())
                .args(args)
                .args(["--database", &db.url]);
            let out = run_bounded(cmd, Duration::from_secs(30));
            let stderr = stderr_of(&out);
            assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
            assert!(
                stderr.contains(&format!("no data dir at {}", missing.display())),
                "{args:?}: {stderr}"
            );
        }
        assert!(!migrated(&db), "a refused command opened the database");
        for args in [
            &["token", "list"][..],
            &["agent", "list"],
            &["app", "create", "--name", "ci", "--scope", "sessions"],
        ] {
            let mut cmd = sessiond_command();
            cmd.current_dir(tmp.path())
                .args(args)
                .args(["--database", &db.url]);
            let out = run_bounded(cmd, Duration::from_secs(30));
            let stderr = stderr_of(&out);
            assert!(!stderr.contains("no data dir"), "{args:?}: {stderr}");
            assert!(!missing.exists(), "{args:?} created the data dir");
        }
        assert!(migrated(&db));

        let mut cmd = sessiond_command();
        cmd.current_dir(tmp.path())
            .args(["backup", "copy.db", "--database", &db.url]);
        let out = run_bounded(cmd, Duration::from_secs(30));
        let stderr = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let without_password = db.url.clone();
        assert!(
            stderr.contains(&format!(
                "pg_dump --format=custom --file=FILE '{without_password}'"
            )),
            "{stderr}"
        );
        assert!(
            stderr.contains(&missing.join("drive").display().to_string()),
            "{stderr}"
        );
        assert!(!tmp.path().join("copy.db").exists());
        assert!(!missing.exists());
    }
}

/// Runs the binary with stdout and stderr written to files; returns its exit code and both
/// files' bytes.
fn run_to_files(mut cmd: Command, dir: &Path) -> (Option<i32>, Vec<u8>, Vec<u8>) {
    let out = dir.join("stdout");
    let err = dir.join("stderr");
    cmd.stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let mut child = cmd.spawn().expect("spawn sessiond");
    let status = common::wait_bounded(&mut child, Duration::from_secs(60), &format!("{cmd:?}"));
    (
        status.code(),
        std::fs::read(&out).unwrap(),
        std::fs::read(&err).unwrap(),
    )
}

/// Output that is not a terminal holds no colour escapes (ESC, 0x1b): log lines and messages of
/// CLI commands and the server's log, written to files, with and without `NO_COLOR`.
#[test]
fn output_to_a_file_holds_no_colour_escapes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = prepared_data_dir(tmp.path());
    let runs: [(&[&str], &str, &[&str]); 5] = [
        // Log lines (migrations at `info`), then the command's result.
        (&["token", "list"], "info", &["applied migration"]),
        // A command's error, with a warning logged before it.
        (
            &[
                "token",
                "create",
                "--user",
                "nobody@example.com",
                "--scope",
                "sessions",
            ],
            "warn,nonsense=x=y",
            &[
                "SESSIOND_LOG is not a log filter",
                "no user nobody@example.com",
            ],
        ),
        // clap's own messages: an unknown flag, and help.
        (
            &["token", "list", "--no-such-flag"],
            "warn",
            &["--no-such-flag"],
        ),
        (&["token", "--help"], "warn", &["Usage"]),
        // A configuration error.
        (
            &["token", "list", "--config", "/nonexistent/sessiond.toml"],
            "warn",
            &["sessiond.toml"],
        ),
    ];
    for no_color in [None, Some("1")] {
        for (args, log, expected) in runs {
            let mut cmd = sessiond_command();
            cmd.env("SESSIOND_LOG", log).args(args).arg("--data-dir");
            if log == "info" {
                // A data dir whose database is made now: its migrations are logged.
                let fresh = tempfile::tempdir_in(tmp.path()).unwrap().keep();
                cmd.arg(fresh);
            } else {
                cmd.arg(&dir);
            }
            match no_color {
                Some(v) => cmd.env("NO_COLOR", v),
                None => cmd.env_remove("NO_COLOR"),
            };
            let (code, out, err) = run_to_files(cmd, tmp.path());
            let all = [out.as_slice(), err.as_slice()].concat();
            let text = String::from_utf8_lossy(&all);
            assert!(
                expected.iter().all(|e| text.contains(e)),
                "{args:?} (exit {code:?}) says {expected:?}: {text}"
            );
            assert!(
                !all.contains(&0x1b),
                "{args:?} with NO_COLOR={no_color:?} wrote an escape: {text:?}"
            );
        }
    }
    // The server's log, with a request logged.
    for no_color in [None, Some("1")] {
        let s = Server::start_logged(
            None,
            &[
                ("SESSIOND_LOG", Some("info,sessiond::access=debug")),
                ("NO_COLOR", no_color),
            ],
        );
        assert_eq!(s.get(&s.url("/healthz")).0, 200);
        let log = poll_until("the server's log", Duration::from_secs(10), || {
            let log = s.log();
            log.contains("/healthz").then_some(log)
        });
        assert!(
            !log.as_bytes().contains(&0x1b),
            "NO_COLOR={no_color:?}: {log:?}"
        );
    }
}
