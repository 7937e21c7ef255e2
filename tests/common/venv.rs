//! The virtual environments of the Python suites (`tests/python/<suite>/requirements.txt`), shared
//! by the `python` test target, which runs the suites' pytest files, and by Rust tests that run a
//! Python peer themselves (`tests/llama.rs` starts llama.cpp's server from its suite's venv).
//!
//! A venv lives under `target/venvs/`, named by its interpreter and a hash of its requirements
//! (suites with the same requirements share one), is made on first use and reused while the
//! requirements are unchanged. A `requirements.txt` may start with header comments:
//!
//! - `# python >= 3.12` asks for a newer interpreter than the default one, `# python == 3.12` for
//!   exactly that version (a suite whose dependency tree is large and tested on one version);
//! - `# pip --no-deps` installs exactly the pinned list and nothing it depends on (for wheels whose
//!   declared dependencies the suite does not use and which would have to be built from source).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

pub struct Suite {
    pub name: String,
    pub dir: PathBuf,
    pub requirements: String,
    /// `(major, minor)` the suite needs at least.
    pub python: (u32, u32),
    /// Whether it needs exactly that version.
    pub exact: bool,
    /// Install without the packages' dependencies.
    pub no_deps: bool,
}

impl Suite {
    fn read(dir: PathBuf) -> Option<Suite> {
        let requirements = std::fs::read_to_string(dir.join("requirements.txt")).ok()?;
        let mut python = (3, 8);
        let mut exact = false;
        let mut no_deps = false;
        for line in requirements.lines().take_while(|l| l.starts_with('#')) {
            let (spec, is_exact) = match line.strip_prefix("# python ==") {
                Some(v) => (Some(v), true),
                None => (line.strip_prefix("# python >="), false),
            };
            if let Some(v) = spec
                && let Some((major, minor)) = v.trim().split_once('.')
                && let (Ok(major), Ok(minor)) = (major.parse(), minor.parse())
            {
                python = (major, minor);
                exact = is_exact;
            }
            if line.trim() == "# pip --no-deps" {
                no_deps = true;
            }
        }
        Some(Suite {
            name: dir.file_name()?.to_string_lossy().into_owned(),
            dir,
            requirements,
            python,
            exact,
            no_deps,
        })
    }

    /// Whether the suite holds pytest files (a suite may only provide a venv for Rust tests).
    pub fn has_tests(&self) -> bool {
        std::fs::read_dir(&self.dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("test_") && name.ends_with(".py")
            })
        })
    }
}

/// Every suite under `tests/python/`, by name.
pub fn suites() -> Vec<Suite> {
    let base = Path::new(ROOT).join("tests/python");
    let mut out: Vec<Suite> = std::fs::read_dir(&base)
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| Suite::read(e.path()))
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The suite named `name`.
pub fn suite(name: &str) -> Option<Suite> {
    Suite::read(Path::new(ROOT).join("tests/python").join(name))
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

/// The suite's venv, made (or found) under `target/venvs/`. Run its packages through
/// `<venv>/bin/python -m …`: a venv is not relocatable, but Python finds its packages relative to
/// the interpreter.
pub fn venv(suite: &Suite) -> Result<PathBuf, String> {
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
    // Each maker builds in a folder of its own, so two test processes never share a half-made
    // venv; the first to finish keeps its venv, the other's is dropped.
    let partial = dir.with_extension(format!("partial-{}", std::process::id()));
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
    let mut pip = Command::new(partial.join("bin/python"));
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    if suite.no_deps {
        pip.arg("--no-deps");
    }
    run(
        pip.arg("-r").arg(suite.dir.join("requirements.txt")),
        "pip install",
    )?;
    if std::fs::rename(&partial, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&partial);
        if !dir.join("bin/python").exists() {
            return Err("keeping the venv failed".into());
        }
    }
    Ok(dir)
}
