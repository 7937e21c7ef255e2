//! A real PostgreSQL server for tests: a throwaway cluster made with `initdb` in a temporary
//! directory, started with `pg_ctl -w` on a Unix socket inside that directory (no TCP port, so
//! nothing to race for), and one database per test. The TLS tests have a cluster of their own
//! that also listens on 127.0.0.1 with TLS only ([`tls_cluster`]).
//!
//! The binaries are PostgreSQL's own, found under `/usr/lib/postgresql/<version>/bin` (Debian's
//! layout; `.ci/run` installs them) or in `$SESSIOND_TEST_PG_BIN`. Without them a test fails when
//! `CI` is set; a local run prints a notice (past the test harness's capture, so it is seen) and
//! [`database`] returns `None`, so the caller returns early.
//!
//! The tests of one binary share a cluster (each with its own database, dropped with it): the first
//! that needs one starts it, and it is stopped and its directory removed when the test binary
//! exits (an `atexit` handler; a failing test unwinds and the binary still exits normally). A
//! cluster per test, or per run of overlapping tests, would cost each a second or two of `initdb`
//! and start-up. PostgreSQL refuses to run as root: as root the server runs as the `postgres` user
//! (made by Debian's package), else as `nobody`.

#![allow(dead_code)]

use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The port in the socket's name (`.s.PGSQL.<port>`); the socket lives in the cluster's own
/// directory, so every cluster can use the same one.
pub const PORT: u16 = 5432;
/// The cluster's superuser (trust authentication on its socket only).
pub const USER: &str = "sessiond";

/// One running cluster. Stopped (immediate shutdown) and removed when dropped.
pub struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// Who runs the server (`None`: the current user).
    owner: Option<(u32, u32)>,
    /// The port of its socket's name, and of its TCP listener when it has one.
    port: u16,
    /// Whether it listens on 127.0.0.1 (TLS only), besides its socket.
    tcp: bool,
}

/// What a cluster that takes TLS connections on 127.0.0.1 is started with: its certificate and
/// key (PEM), and the password its superuser then has (SCRAM over TCP; the socket stays trust).
pub struct TlsServer<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub password: &'a str,
}

/// A database of its own for one test, in a shared [`Cluster`]. Dropped with the test.
pub struct Database {
    pub name: String,
    /// `postgresql://` URL of the database, through the cluster's socket.
    pub url: String,
    cluster: Arc<Cluster>,
    /// The connection [`Database::rows`] reads on, made on first use.
    client: Mutex<Option<::postgres::Client>>,
}

impl Cluster {
    /// The directory of PostgreSQL's programs (`createdb`, `psql`, …) this cluster runs with.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    pub fn socket_dir(&self) -> PathBuf {
        self.dir.path().join("socket")
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A PostgreSQL client program (`createdb`, `psql`, …) run against this cluster.
    fn client(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        cmd.arg("-h")
            .arg(self.socket_dir())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-U")
            .arg(USER)
            .stdin(Stdio::null());
        cmd
    }

    /// A server program (`initdb`, `pg_ctl`) run as the cluster's owner.
    fn server(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.owner {
            use std::os::unix::process::CommandExt;
            cmd.uid(uid).gid(gid);
        }
        cmd.stdin(Stdio::null());
        cmd
    }

    /// The URL of database `name` through the socket (its directory percent-encoded as the host).
    pub fn url(&self, name: &str) -> String {
        let host: String = self
            .socket_dir()
            .to_string_lossy()
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("postgresql://{USER}@{host}:{}/{name}", self.port)
    }

    /// The TCP port on 127.0.0.1 of a cluster started by [`tls_cluster`].
    pub fn tcp_port(&self) -> Option<u16> {
        self.tcp.then_some(self.port)
    }

    fn start(tls: Option<&TlsServer>, durable: bool) -> Result<Cluster, String> {
        let bin = binaries()?;
        let owner = server_owner()?;
        let dir = tempfile::Builder::new()
            .prefix("sessiond-pg-")
            .tempdir()
            .map_err(|e| format!("cannot make a temp dir: {e}"))?;
        let mut cluster = Cluster {
            bin,
            dir,
            owner,
            port: PORT,
            tcp: tls.is_some(),
        };
        if let Some((uid, gid)) = owner {
            chown(cluster.dir.path(), uid, gid)?;
        }
        std::fs::create_dir(cluster.socket_dir())
            .map_err(|e| format!("cannot make the socket dir: {e}"))?;
        if let Some((uid, gid)) = owner {
            chown(&cluster.socket_dir(), uid, gid)?;
        }
        run(cluster
            .server("initdb")
            .arg("-D")
            .arg(cluster.data_dir())
            .args([
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ]))?;
        if let Some(tls) = tls {
            cluster.take_tls(tls)?;
        }
        // A TCP port is one the system had free a moment ago: should another program take it
        // first, the server is started again on another.
        let mut attempts = 0;
        loop {
            if cluster.tcp {
                cluster.port = free_port()?;
            }
            let listen = if cluster.tcp {
                "-c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file=server.crt \
                 -c ssl_key_file=server.key"
            } else {
                "-c listen_addresses=''"
            };
            // Tests need no durability; a benchmark keeps what a crash must not break (fsync,
            // full pages) and, like SQLite's synchronous=NORMAL, commits without waiting for the
            // flush.
            let durability = if durable {
                "-c synchronous_commit=off"
            } else {
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
            };
            let options = format!(
                "{listen} -k {} -p {} {durability} -c max_connections=200",
                cluster.socket_dir().display(),
                cluster.port
            );
            let started = run(cluster
                .server("pg_ctl")
                .arg("-D")
                .arg(cluster.data_dir())
                .arg("-l")
                .arg(cluster.dir.path().join("server.log"))
                .args(["-w", "-t", "120", "-s", "-o", &options, "start"]));
            match started {
                Ok(_) => break,
                Err(_)
                    if cluster.tcp && attempts < 5 && cluster.log().contains("could not bind") =>
                {
                    attempts += 1;
                }
                Err(e) => return Err(format!("{e}\nserver log:\n{}", cluster.log())),
            }
        }
        if let Some(tls) = tls {
            let sql = format!(
                "ALTER USER {USER} PASSWORD '{}'",
                tls.password.replace('\'', "''")
            );
            run(cluster.client("psql").args([
                "-X",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                "postgres",
                "-c",
                &sql,
            ]))?;
        }
        Ok(cluster)
    }

    /// Gives the cluster its certificate and key, and a pg_hba.conf that takes TCP connections
    /// with TLS only (`hostssl`, SCRAM), and socket connections as before.
    fn take_tls(&self, tls: &TlsServer) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        for (from, name) in [(tls.cert, "server.crt"), (tls.key, "server.key")] {
            let to = self.data_dir().join(name);
            std::fs::copy(from, &to).map_err(|e| format!("cannot copy {}: {e}", from.display()))?;
            // The server refuses a key that others can read.
            std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| format!("cannot chmod {}: {e}", to.display()))?;
            if let Some((uid, gid)) = self.owner {
                chown(&to, uid, gid)?;
            }
        }
        std::fs::write(
            self.data_dir().join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all all 127.0.0.1/32 scram-sha-256\n",
        )
        .map_err(|e| format!("cannot write pg_hba.conf: {e}"))
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let stopped = self
            .server("pg_ctl")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-w", "-t", "60", "-s", "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !stopped.is_ok_and(|s| s.success()) {
            let _ = writeln!(
                std::io::stderr(),
                "warning: the test PostgreSQL in {} did not stop",
                self.dir.path().display()
            );
        }
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // Its own connection first, so that nothing of it is left.
        if let Ok(client) = self.client.get_mut() {
            client.take();
        }
        // The cluster may be about to go away with it; a leftover database would go with it.
        let _ = self
            .cluster
            .client("dropdb")
            .args(["--force", "--if-exists", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Database {
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Runs SQL with `psql` (stops at the first error) and returns what it printed, unaligned and
    /// without headers.
    pub fn psql(&self, sql: &str) -> String {
        let out = self
            .cluster
            .client("psql")
            .args([
                "-X",
                "-q",
                "-A",
                "-t",
                "-v",
                "ON_ERROR_STOP=1",
                "-d",
                &self.name,
                "-c",
                sql,
            ])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql failed on {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim_end().to_owned()
    }

    /// The rows of a query (or of several, `;`-separated), each value as PostgreSQL's text for it
    /// (`None` for NULL), on a connection this database keeps: a test may read after every
    /// request without starting a program each time.
    pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        let mut client = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if client.is_none() {
            let connected = ::postgres::Client::connect(&self.url, ::postgres::NoTls)
                .unwrap_or_else(|e| panic!("cannot connect to {}: {e}", self.name));
            *client = Some(connected);
        }
        let client = client.as_mut().expect("connected");
        let messages = client
            .simple_query(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        messages
            .iter()
            .filter_map(|m| match m {
                ::postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).map(str::to_owned))
                        .collect(),
                ),
                _ => None,
            })
            .collect()
    }
}

/// A fresh, empty database named after `test`, or `None` (with a notice) when PostgreSQL is not
/// installed and `CI` is unset. With `CI` set, a missing or broken PostgreSQL fails the test.
pub fn database(test: &str) -> Option<Database> {
    let cluster = {
        let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
        match &*shared {
            Some(c) => Arc::clone(c),
            None => {
                let c = own_cluster(test)?;
                *shared = Some(Arc::clone(&c));
                // SAFETY: registers a function without arguments that only drops a value.
                unsafe { libc::atexit(stop_shared_cluster) };
                c
            }
        }
    };
    Some(Cluster::database(&cluster, test))
}

/// The cluster the tests of this binary share, from the first that needs one until it exits.
static SHARED: Mutex<Option<Arc<Cluster>>> = Mutex::new(None);

/// At exit: stops the shared cluster and removes its directory. (Should a database of it still be
/// held, or a thread hold the lock, the server is left running and says so in no way: `pgrep -a
/// postgres` finds it.)
extern "C" fn stop_shared_cluster() {
    let cluster = match SHARED.try_lock() {
        Ok(mut shared) => shared.take(),
        Err(_) => None,
    };
    drop(cluster);
}

/// A cluster of the caller's own (not shared with other tests), or `None` as for [`database`].
pub fn own_cluster(test: &str) -> Option<Arc<Cluster>> {
    started(test, Cluster::start(None, false))
}

/// Like [`own_cluster`], with the settings a crash must not break on (`fsync`,
/// `full_page_writes`): for benchmarks. Commits still return before their flush
/// (`synchronous_commit=off`), as SQLite's default `synchronous=NORMAL` does in WAL mode.
pub fn durable_cluster(test: &str) -> Option<Arc<Cluster>> {
    started(test, Cluster::start(None, true))
}

/// A cluster of the caller's own that also listens on 127.0.0.1 ([`Cluster::tcp_port`]), where
/// it takes TLS connections only; `None` as for [`database`].
pub fn tls_cluster(test: &str, tls: &TlsServer) -> Option<Arc<Cluster>> {
    started(test, Cluster::start(Some(tls), false))
}

fn started(test: &str, cluster: Result<Cluster, String>) -> Option<Arc<Cluster>> {
    match cluster {
        Ok(c) => Some(Arc::new(c)),
        Err(why) if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) => {
            panic!("the PostgreSQL tests need a PostgreSQL server, which cannot run: {why}")
        }
        Err(why) => {
            let _ = writeln!(
                std::io::stderr(),
                "notice: SKIPPED PostgreSQL test {test}: no PostgreSQL server can run here: {why}"
            );
            None
        }
    }
}

impl Cluster {
    /// A fresh, empty database in this cluster, named after `test`.
    pub fn database(cluster: &Arc<Cluster>, test: &str) -> Database {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let slug: String = test
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let name = format!("t{}_{slug}", NEXT.fetch_add(1, Ordering::Relaxed));
        if let Err(why) = run(cluster.client("createdb").arg(&name)) {
            panic!(
                "cannot create database {name}: {why}\nserver log:\n{}",
                cluster.log()
            );
        }
        Database {
            url: cluster.url(&name),
            name,
            cluster: Arc::clone(cluster),
            client: Mutex::new(None),
        }
    }

    /// The cluster's directory (data, socket, log), removed when the cluster is dropped.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's process id, from its `postmaster.pid`.
    pub fn server_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.data_dir().join("postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

/// The directory of PostgreSQL's programs: `$SESSIOND_TEST_PG_BIN`, else the newest
/// `/usr/lib/postgresql/<version>/bin` that has `initdb`.
fn binaries() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("SESSIOND_TEST_PG_BIN") {
        let dir = PathBuf::from(dir);
        return if dir.join("initdb").is_file() {
            Ok(dir)
        } else {
            Err(format!(
                "no initdb in SESSIOND_TEST_PG_BIN ({})",
                dir.display()
            ))
        };
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|e| format!("PostgreSQL is not installed (/usr/lib/postgresql: {e})"))?
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no /usr/lib/postgresql/<version>/bin/initdb".to_owned())
}

/// Who runs the server: nobody else than the current user, unless that is root.
fn server_owner() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    for name in ["postgres", "nobody"] {
        let c_name = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: a valid C string; the returned record is read at once, before any other call
        // that could overwrite it (tests start clusters under the SHARED lock).
        let pw = unsafe { libc::getpwnam(c_name.as_ptr()) };
        if !pw.is_null() {
            // SAFETY: non-null, points at libc's static passwd record.
            let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
            return Ok(Some((uid, gid)));
        }
    }
    Err("running as root and there is no `postgres` or `nobody` user to run the server".into())
}

/// A TCP port of 127.0.0.1 that nothing listened on a moment ago.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| format!("cannot chown {}: {e}", path.display()))
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} failed ({}): {}{}",
            cmd.get_program(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}
