//! Runs the Python suites: `tests/python/<suite>/` holds a pytest suite and its
//! `requirements.txt`, for the peers whose real client is Python (the official AgentEx client and
//! SDK, schema fuzzers, model servers shipped as wheels).
//!
//! This is a test target without the libtest harness, so pytest's own output — and its summary
//! line (`== 42 passed in 9.1s ==`) — reaches the `cargo test` log as it is. Each suite runs in a
//! virtual environment under `target/venvs/`, named by its interpreter and a hash of its
//! requirements (suites with the same requirements share one), made on first use and reused while
//! the requirements are unchanged.
//!
//! A suite's `requirements.txt` may start with `# python >= 3.12` to ask for a newer interpreter
//! than the default one, or with `# python == 3.12` for exactly that version (a suite whose
//! dependency tree is large and tested on one version). The suites start the server themselves (`tests/python/sessiond_server.py`
//! spawns the binary named by `SESSIOND_BIN`), so they can restart it.
//!
//! Positional arguments select suites by name (`cargo test --test python -- agentex_client`);
//! `SESSIOND_PYTEST_ARGS` adds pytest arguments (`-k cancel -x`). When a suite's venv cannot be
//! made (no interpreter of the version it needs, no network for pip), the suite is reported as
//! SKIPPED in plain sight — and with `CI` set it fails instead.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use sha2::{Digest, Sha256};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

struct Suite {
    name: String,
    dir: PathBuf,
    requirements: String,
    /// `(major, minor)` the suite needs at least.
    python: (u32, u32),
    /// Whether it needs exactly that version.
    exact: bool,
}

fn suites() -> Vec<Suite> {
    let base = Path::new(ROOT).join("tests/python");
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&base) else {
        return out;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let Ok(requirements) = std::fs::read_to_string(dir.join("requirements.txt")) else {
            continue;
        };
        let first = requirements.lines().next().unwrap_or_default();
        let (spec, exact) = match first.strip_prefix("# python ==") {
            Some(v) => (Some(v), true),
            None => (first.strip_prefix("# python >="), false),
        };
        let python = spec
            .and_then(|v| {
                let (major, minor) = v.trim().split_once('.')?;
                Some((major.parse().ok()?, minor.parse().ok()?))
            })
            .unwrap_or((3, 8));
        out.push(Suite {
            name: entry.file_name().to_string_lossy().into_owned(),
            dir,
            requirements,
            python,
            exact,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The version an interpreter reports, if it runs.
fn version_of(python: &str) -> Option<(u32, u32)> {
    let out = Command::new(python)
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    let (major, minor) = text.trim().split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// Interpreters to try, newest first: the versioned names on `PATH`, then every CPython that pyenv
/// installed (its shims answer only for the versions pyenv has selected), then `python3`.
fn candidates() -> Vec<String> {
    let mut out = vec!["python3.13".to_owned(), "python3.12".to_owned()];
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
    if let Some(Ok(entries)) = root.map(|r| std::fs::read_dir(r.join("versions"))) {
        let mut installed: Vec<((u32, u32, u32), PathBuf)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let mut parts = name.split('.').map(|p| p.parse::<u32>().ok());
                let version = (parts.next()??, parts.next()??, parts.next()??);
                Some((version, e.path().join("bin/python3")))
            })
            .collect();
        installed.sort_by_key(|b| std::cmp::Reverse(b.0));
        out.extend(installed.into_iter().map(|(_, p)| p.display().to_string()));
    }
    out.push("python3".to_owned());
    out
}

/// The first interpreter that runs and is new enough (or, `exact`, of that version).
fn interpreter(min: (u32, u32), exact: bool) -> Option<(String, (u32, u32))> {
    candidates()
        .into_iter()
        .filter_map(|p| {
            let v = version_of(&p)?;
            Some((p, v))
        })
        .find(|(_, v)| if exact { *v == min } else { *v >= min })
}

/// The suite's venv, made (or found) under `target/venvs/`.
fn venv(suite: &Suite) -> Result<PathBuf, String> {
    let (python, version) = interpreter(suite.python, suite.exact).ok_or_else(|| {
        format!(
            "no Python {} {}.{} (tried python3.13 and python3.12 on PATH, pyenv's versions, python3)",
            if suite.exact { "==" } else { ">=" },
            suite.python.0,
            suite.python.1
        )
    })?;
    let mut hash = Sha256::new();
    hash.update(suite.requirements.as_bytes());
    hash.update(format!("{}.{}", version.0, version.1).as_bytes());
    let digest = hash.finalize();
    let tag: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(ROOT).join("target"));
    let dir = target
        .join("venvs")
        .join(format!("py{}.{}-{tag}", version.0, version.1));
    if dir.join("bin/python").exists() {
        return Ok(dir);
    }
    println!(
        "python suite {}: making its venv with {python} ({}.{}) at {}",
        suite.name,
        version.0,
        version.1,
        dir.display()
    );
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let run = |cmd: &mut Command, what: &str| -> Result<(), String> {
        let status = cmd
            .status()
            .map_err(|e| format!("{what}: could not start: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("{what}: {status}"))
        }
    };
    run(
        Command::new(&python).arg("-m").arg("venv").arg(&partial),
        "python -m venv",
    )?;
    run(
        Command::new(partial.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(suite.dir.join("requirements.txt")),
        "pip install",
    )?;
    // A venv is not relocatable: its scripts name the folder it was made in. Python itself finds
    // its packages relative to the interpreter, so the suite runs through `bin/python -m`.
    std::fs::rename(&partial, &dir).map_err(|e| format!("keeping the venv: {e}"))?;
    Ok(dir)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        for s in suites() {
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
    let selected: Vec<Suite> = suites()
        .into_iter()
        .filter(|s| filters.is_empty() || filters.iter().any(|f| s.name.contains(f.as_str())))
        .collect();
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
        let status = Command::new(venv.join("bin/python"))
            .args(["-m", "pytest", "-p", "no:cacheprovider", "-ra"])
            .args(&extra)
            .arg(&suite.dir)
            .current_dir(ROOT)
            .env("SESSIOND_BIN", env!("CARGO_BIN_EXE_sessiond"))
            .env("PYTHONPATH", Path::new(ROOT).join("tests/python"))
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .status();
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
