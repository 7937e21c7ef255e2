//! TLS between sessiond and PostgreSQL, against a real server that takes TLS connections only
//! (`hostssl` in its pg_hba.conf, SCRAM passwords) on 127.0.0.1, with a CA and a certificate for
//! `localhost` made here with the `openssl` program: `verify-full` with the right CA serves
//! requests over TLS on every connection (the pool's and the listener's); a wrong CA or a host
//! name the certificate lacks stops the start with a message that names the cause; `require`
//! connects without a CA; `disable` is refused by the server and says why. The URL's password
//! shows nowhere: not in the log, `/healthz`, or a CLI's refusal.
//!
//! These run on both passes (they bring their own cluster); without PostgreSQL or `openssl` they
//! fail when `CI` is set and are skipped with a notice otherwise.

#![cfg(feature = "postgres")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;

/// The superuser's password over TCP: characters a URL must percent-encode, so that both the
/// written and the decoded form are looked for.
const PASSWORD: &str = "Tls s3cret!pw";
const PASSWORD_IN_URL: &str = "Tls%20s3cret%21pw";

/// The certificates made for the cluster, and the cluster.
struct Tls {
    certs: tempfile::TempDir,
    cluster: Arc<postgres::Cluster>,
}

impl Tls {
    fn ca(&self) -> PathBuf {
        self.certs.path().join("ca.pem")
    }

    /// A CA that signed nothing the server has.
    fn other_ca(&self) -> PathBuf {
        self.certs.path().join("other-ca.pem")
    }

    fn port(&self) -> u16 {
        self.cluster.tcp_port().expect("a TCP port")
    }

    /// A URL of `db` over TCP to `host`, with the password and `options`.
    fn url(&self, db: &postgres::Database, host: &str, options: &str) -> String {
        format!(
            "postgresql://{}:{PASSWORD_IN_URL}@{host}:{}/{}?{options}",
            postgres::USER,
            self.port(),
            db.name
        )
    }
}

/// The cluster the tests of this binary share, stopped when it exits.
static SHARED: Mutex<Option<Arc<Tls>>> = Mutex::new(None);

extern "C" fn stop_shared() {
    let tls = match SHARED.try_lock() {
        Ok(mut shared) => shared.take(),
        Err(_) => None,
    };
    drop(tls);
}

/// The TLS cluster, started by the first test that needs it; `None` (with a notice) when it
/// cannot run and `CI` is unset.
fn tls() -> Option<Arc<Tls>> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(tls) = &*shared {
        return Some(Arc::clone(tls));
    }
    let certs = tempfile::tempdir().expect("tempdir");
    if let Err(why) = make_certificates(certs.path()) {
        assert!(
            !in_ci(),
            "the TLS tests need the openssl program, which cannot run: {why}"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "notice: SKIPPED PostgreSQL TLS tests: {why}"
        );
        return None;
    }
    let cluster = postgres::tls_cluster(
        "postgres_tls",
        &postgres::TlsServer {
            cert: &certs.path().join("server.pem"),
            key: &certs.path().join("server.key"),
            password: PASSWORD,
        },
    )?;
    let tls = Arc::new(Tls { certs, cluster });
    *shared = Some(Arc::clone(&tls));
    // SAFETY: registers a function without arguments that only drops a value.
    unsafe { libc::atexit(stop_shared) };
    Some(tls)
}

/// A CA, a server certificate it signs for `localhost` only (no IP address), and a second CA.
fn make_certificates(dir: &Path) -> Result<(), String> {
    let openssl = |args: &[&str]| -> Result<(), String> {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run openssl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for (name, subject) in [
        ("ca", "/CN=sessiond test CA"),
        ("other-ca", "/CN=another CA"),
    ] {
        let (key, pem) = (format!("{name}.key"), format!("{name}.pem"));
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend([
            "-keyout",
            &key,
            "-out",
            &pem,
            "-days",
            "3",
            "-subj",
            subject,
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(&args)?;
    }
    let mut args = vec!["req"];
    args.extend(ec);
    args.extend([
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=localhost",
    ]);
    openssl(&args)?;
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .map_err(|e| e.to_string())?;
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "3",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ])
}

/// Runs a sessiond command on `data_dir` with `--database url` until it exits (a minute at
/// most); its exit status's success, stdout and stderr.
fn sessiond(data_dir: &Path, url: &str, args: &[&str]) -> (bool, String, String) {
    std::fs::create_dir_all(data_dir).expect("data dir");
    let child = Command::new(env!("CARGO_BIN_EXE_sessiond"))
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--database", url])
        .args(args)
        .env("SESSIOND_ENGINE", "scripted")
        .env("SESSIOND_LOG", "debug")
        .env_remove("SESSIOND_DATABASE_URL")
        .env_remove("SESSIOND_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sessiond");
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(out) => out.expect("output"),
        Err(_) => {
            // SAFETY: a signal to the child this test started, which has not been reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("sessiond {args:?} did not exit within a minute");
        }
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `serve` with `url` must not start: its message.
fn refused_start(url: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ok, stdout, stderr) = sessiond(
        &dir.path().join("data"),
        url,
        &["serve", "--bind", "127.0.0.1:0"],
    );
    assert!(!ok, "serve started with {url}:\n{stdout}\n{stderr}");
    assert_no_password(&format!("{stdout}\n{stderr}"));
    stderr
}

fn assert_no_password(text: &str) {
    for secret in [PASSWORD, PASSWORD_IN_URL, "s3cret"] {
        assert!(!text.contains(secret), "the password shows in:\n{text}");
    }
}

/// The sessiond connections to `db`, as `(with TLS, listening)` pairs: the listener's is the one
/// that holds the presence lock, which it takes once it listens.
fn connections(db: &postgres::Database) -> Vec<(bool, bool)> {
    db.psql(&format!(
        "SELECT s.ssl, EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.locktype = 'advisory' AND l.granted) \
         FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.datname = '{}' AND a.application_name = 'sessiond'",
        db.name
    ))
    .lines()
    .filter_map(|l| l.split_once('|'))
    .map(|(ssl, listen)| (ssl == "t", listen == "t"))
    .collect()
}

/// A server on `db` (whose URL the test set), with its debug log kept, that has run a turn.
struct Served {
    s: Server,
    db: Arc<postgres::Database>,
    data_dir: PathBuf,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Served {
    fn start(db: postgres::Database) -> Served {
        let db = Arc::new(db);
        let dir = tempfile::tempdir().expect("tempdir");
        let data_dir = dir.path().join("data");
        share_database(&data_dir, &db);
        let log = dir.path().join("sessiond.log");
        let s = Server::start_logged_in(&data_dir, &[("SESSIOND_LOG", Some("debug"))], &log);
        let id = s.create_prompt("hello over TLS");
        let terminal = s.wait_terminal(&id, 0);
        assert_eq!(terminal["event"]["type"], "complete", "{terminal}");
        Served {
            s,
            db,
            data_dir,
            log,
            _dir: dir,
        }
    }

    /// Its start-up lines (up to the database's), its log so far and `/healthz`: none may show
    /// the password. The pg_dump line `backup` prints instead of a copy, likewise.
    fn assert_no_password_shown(&self) -> (String, String) {
        let (status, health) = self.s.get(&self.s.url("/healthz"));
        assert_eq!(status, 200, "{health}");
        let start = poll_until("the start-up lines", Duration::from_secs(10), || {
            let out = self.s.stdout();
            out.contains("database: PostgreSQL").then_some(out)
        });
        let log = std::fs::read_to_string(&self.log).expect("log");
        assert_no_password(&format!("{start}\n{log}\n{health}"));
        let (ok, out, err) = sessiond(&self.data_dir, &self.db.url, &["backup", "copy.db"]);
        assert!(!ok && err.contains("pg_dump"), "{out}\n{err}");
        assert_no_password(&format!("{out}\n{err}"));
        (start, err)
    }
}

#[test]
fn verify_full_with_the_right_ca_serves_over_tls_and_shows_no_password() {
    let Some(tls) = tls() else { return };
    let mut db = postgres::Cluster::database(&tls.cluster, "verify_full");
    let ca = tls.ca();
    db.url = tls.url(
        &db,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", ca.display()),
    );
    let served = Served::start(db);
    // Every connection is TLS (the server takes no other over TCP), the listener's included.
    let found = poll_until(
        "the pool's and the listener's connections",
        Duration::from_secs(30),
        || {
            let c = connections(&served.db);
            (c.iter().any(|&(_, listening)| listening) && c.len() >= 2).then_some(c)
        },
    );
    assert!(found.iter().all(|&(ssl, _)| ssl), "{found:?}");

    let (start, _) = served.assert_no_password_shown();
    assert!(
        start.contains(&format!(
            "database: PostgreSQL sessiond@localhost:{}/{} (sslmode=verify-full)",
            tls.port(),
            served.db.name
        )),
        "{start}"
    );
    let log = std::fs::read_to_string(&served.log).expect("log");
    assert!(
        log.contains("localhost"),
        "the log names the database:\n{log}"
    );
    // A CLI's answer and refusal, and a 404.
    let (ok, out, err) = sessiond(&served.data_dir, &served.db.url, &["agent", "list"]);
    assert!(ok, "{out}\n{err}");
    assert_no_password(&format!("{out}\n{err}"));
    let (ok, out, err) = sessiond(
        &served.data_dir,
        &served.db.url,
        &[
            "token",
            "create",
            "--user",
            "nobody@test.local",
            "--scope",
            "sessions",
        ],
    );
    assert!(!ok, "{out}\n{err}");
    assert_no_password(&format!("{out}\n{err}"));
    let (status, missing) = served.s.get(&served.s.sessions_url("/not-a-session"));
    assert_eq!(status, 404, "{missing}");
    assert_no_password(&missing.to_string());
}

#[test]
fn verify_full_refuses_a_wrong_ca_and_a_host_name_the_certificate_lacks() {
    let Some(tls) = tls() else { return };
    let db = postgres::Cluster::database(&tls.cluster, "verify_refused");
    let other = tls.other_ca();
    let said = refused_start(&tls.url(
        &db,
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={}", other.display()),
    ));
    assert!(
        said.contains(&format!(
            "the server's certificate is not signed by a CA of sslrootcert={}",
            other.display()
        )),
        "{said}"
    );
    let said = refused_start(&tls.url(
        &db,
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={}", tls.ca().display()),
    ));
    assert!(
        said.contains("the server's certificate does not name the host 127.0.0.1"),
        "{said}"
    );
    let said = refused_start(&tls.url(
        &db,
        "localhost",
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    ));
    assert!(said.contains("sslrootcert=/nonexistent/ca.pem"), "{said}");
    // The system's CAs did not sign the test CA either.
    let said = refused_start(&tls.url(&db, "localhost", "sslmode=verify-full"));
    assert!(
        said.contains("not signed by a CA the system trusts"),
        "{said}"
    );
}

#[test]
fn verify_ca_checks_the_chain_and_not_the_host_name() {
    let Some(tls) = tls() else { return };
    let db = postgres::Cluster::database(&tls.cluster, "verify_ca");
    let dir = tempfile::tempdir().expect("tempdir");
    let url = tls.url(
        &db,
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", tls.ca().display()),
    );
    let (ok, out, err) = sessiond(&dir.path().join("data"), &url, &["agent", "list"]);
    assert!(ok, "{out}\n{err}");
    let said = refused_start(&tls.url(
        &db,
        "127.0.0.1",
        &format!("sslmode=verify-ca&sslrootcert={}", tls.other_ca().display()),
    ));
    assert!(
        said.contains("is not signed by a CA of sslrootcert="),
        "{said}"
    );
}

/// `require` without a CA; the password as a `password=` option this time, which shows nowhere
/// either.
#[test]
fn require_connects_without_a_ca() {
    let Some(tls) = tls() else { return };
    let mut db = postgres::Cluster::database(&tls.cluster, "require");
    db.url = format!(
        "postgresql://{}@127.0.0.1:{}/{}?sslmode=require&password={PASSWORD_IN_URL}",
        postgres::USER,
        tls.port(),
        db.name
    );
    let served = Served::start(db);
    let c = connections(&served.db);
    assert!(!c.is_empty() && c.iter().all(|&(ssl, _)| ssl), "{c:?}");
    let (_, backup) = served.assert_no_password_shown();
    assert!(backup.contains("?sslmode=require'"), "{backup}");
}

#[test]
fn disable_against_a_server_that_takes_only_tls_fails_clearly() {
    let Some(tls) = tls() else { return };
    let db = postgres::Cluster::database(&tls.cluster, "disable");
    let said = refused_start(&tls.url(&db, "localhost", "sslmode=disable"));
    assert!(said.contains("no encryption"), "{said}");
    assert!(
        said.contains(
            "the server may accept only TLS connections, and the URL says sslmode=disable"
        ),
        "{said}"
    );
    // `prefer` (the default) takes the TLS the server offers.
    let dir = tempfile::tempdir().expect("tempdir");
    let (ok, out, err) = sessiond(
        &dir.path().join("data"),
        &tls.url(&db, "localhost", ""),
        &["agent", "list"],
    );
    assert!(ok, "{out}\n{err}");
}
