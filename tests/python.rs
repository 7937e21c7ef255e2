//! Runs the Python suites: `tests/python/<suite>/` holds a pytest suite and its
//! `requirements.txt`, for the peers whose real client is Python (the official AgentEx client and
//! SDK, schema fuzzers, model servers shipped as wheels).
//!
//! This is a test target without the libtest harness, so pytest's own output — and its summary
//! line (`== 42 passed in 9.1s ==`) — reaches the `cargo test` log as it is. Each suite runs in a
//! virtual environment under `target/venvs/` (`common/venv.rs`: made on first use, reused while
//! its requirements are unchanged; header lines such as `# python >= 3.12` and `# pip --no-deps`
//! are described there). A suite without `test_*.py` files only provides a venv to Rust tests and
//! is not run here. The suites start the server themselves (`tests/python/sessiond_server.py`
//! spawns the binary named by `SESSIOND_BIN`), so they can restart it.
//!
//! Positional arguments select suites by name (`cargo test --test python -- agentex_client`);
//! `SESSIOND_PYTEST_ARGS` adds pytest arguments (`-k cancel -x`). When a suite's venv cannot be
//! made (no interpreter of the version it needs, no network for pip), the suite is reported as
//! SKIPPED in plain sight — and with `CI` set it fails instead.
//!
//! With `SESSIOND_TEST_BACKEND=postgres` the suites' servers run on PostgreSQL: this runner starts
//! a throwaway cluster (`common/postgres.rs`) and hands its programs and socket to the suites
//! (`SESSIOND_TEST_PG_BIN`, `_HOST`, `_PORT`, `_USER`), and `sessiond_server.py` makes a database
//! of its own for each server with `createdb`, dropped when the server is closed.

#[path = "common/backend.rs"]
mod backend;
#[path = "common/postgres.rs"]
mod postgres;
#[path = "common/venv.rs"]
mod venv;

use std::path::Path;
use std::process::{Command, ExitCode};

use backend::{Backend, VARIABLE, backend};
use venv::{Suite, suites, venv};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for s in suites().into_iter().filter(Suite::has_tests) {
            println!("{}: test", s.name);
        }
        return ExitCode::SUCCESS;
    }
    let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let ci = std::env::var_os("CI").is_some_and(|v| !v.is_empty());
    let extra: Vec<String> = std::env::var("SESSIOND_PYTEST_ARGS")
        .map(|v| v.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default();
    let mut failed = Vec::new();
    let mut skipped = Vec::new();
    // Suites without pytest files only provide a venv to Rust tests (see `common/venv.rs`).
    let selected: Vec<Suite> = suites()
        .into_iter()
        .filter(Suite::has_tests)
        .filter(|s| filters.is_empty() || filters.iter().any(|f| s.name.contains(f.as_str())))
        .collect();
    let cluster = match backend() {
        Backend::Sqlite => None,
        Backend::Postgres => match postgres::own_cluster("python suites") {
            Some(cluster) => Some(cluster),
            None => {
                println!(
                    "python suites: FAILED: {VARIABLE}=postgres, and no PostgreSQL can run here"
                );
                return ExitCode::FAILURE;
            }
        },
    };
    for suite in &selected {
        let venv = match venv(suite) {
            Ok(v) => v,
            Err(why) => {
                if ci {
                    println!(
                        "python suite {}: FAILED: its venv cannot be made: {why}",
                        suite.name
                    );
                    failed.push(suite.name.clone());
                } else {
                    println!(
                        "python suite {}: SKIPPED: its venv cannot be made: {why}",
                        suite.name
                    );
                    skipped.push(suite.name.clone());
                }
                continue;
            }
        };
        println!("python suite {} ({}):", suite.name, venv.display());
        let mut pytest = Command::new(venv.join("bin/python"));
        pytest
            .args(["-m", "pytest", "-p", "no:cacheprovider", "-ra"])
            .args(&extra)
            .arg(&suite.dir)
            .current_dir(ROOT)
            .env("SESSIOND_BIN", env!("CARGO_BIN_EXE_sessiond"))
            .env("PYTHONPATH", Path::new(ROOT).join("tests/python"))
            .env("PYTHONDONTWRITEBYTECODE", "1");
        if let Some(cluster) = &cluster {
            pytest
                .env("SESSIOND_TEST_PG_BIN", cluster.bin_dir())
                .env("SESSIOND_TEST_PG_HOST", cluster.socket_dir())
                .env("SESSIOND_TEST_PG_PORT", postgres::PORT.to_string())
                .env("SESSIOND_TEST_PG_USER", postgres::USER);
        }
        let status = pytest.status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                println!("python suite {}: FAILED ({s})", suite.name);
                failed.push(suite.name.clone());
            }
            Err(e) => {
                println!(
                    "python suite {}: FAILED: pytest did not start: {e}",
                    suite.name
                );
                failed.push(suite.name.clone());
            }
        }
    }
    println!(
        "python suites: {} run, {} failed, {} skipped{}",
        selected.len() - skipped.len(),
        failed.len(),
        skipped.len(),
        if skipped.is_empty() {
            String::new()
        } else {
            format!(" ({})", skipped.join(", "))
        }
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
