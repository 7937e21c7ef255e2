//! Database URLs: `postgres://` or `postgresql://` (libpq's URI form, with its query options such
//! as `connect_timeout` or `host=/run/postgresql` for a Unix socket). Parsing is the driver's,
//! except for the TLS options, which are sessiond's own ([`Tls`]: `sslmode` with libpq's five
//! values, `sslrootcert`); this module checks the scheme first, so that a SQLite path or another
//! engine's URL gets a clear answer, and is the one place that knows which parts of a URL are
//! secret ([`redact`], [`without_password`], [`DatabaseUrl::scrub`]).

use std::path::PathBuf;
use std::str::FromStr;

use percent_encoding::percent_decode_str;
use tokio_postgres::config::Host;

use super::error::PostgresError;

/// A parsed PostgreSQL URL.
#[derive(Clone)]
pub struct DatabaseUrl {
    config: tokio_postgres::Config,
    tls: Tls,
    redacted: String,
    secrets: Vec<String>,
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DatabaseUrl").field(&self.redacted).finish()
    }
}

impl std::fmt::Display for DatabaseUrl {
    /// The URL with its secrets replaced by `***` (see [`redact`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// libpq's `sslmode`, as sessiond applies it (see [`Tls`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plain connections only.
    Disable,
    /// TLS when the server offers it, else plain (libpq's default).
    Prefer,
    /// TLS or nothing; the certificate is not checked (unless `sslrootcert` is set).
    Require,
    /// TLS, with the server's certificate chain checked against the trusted CAs.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host connected to.
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow (plain first, TLS if the server insists) is not supported; \
                     use prefer, require, verify-ca or verify-full"
                        .into(),
                );
            }
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What the driver is told: it negotiates TLS, and sessiond's verifier does the checking.
    fn driver(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Driver;
        match self {
            SslMode::Disable => Driver::Disable,
            SslMode::Prefer => Driver::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Driver::Require,
        }
    }
}

/// Where the CAs that sign the server's certificate come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootCert {
    /// The system's trust store (what the model endpoints' HTTPS is checked against too).
    System,
    /// The PEM file of `sslrootcert=PATH` (a private CA, e.g. a managed database's bundle): only
    /// its certificates are trusted.
    File(PathBuf),
}

/// How connections use TLS.
///
/// * `disable`: never; `prefer` (the default): when the server offers it; `require`: always.
///   Neither of the last two checks the certificate (as libpq: they protect against eavesdropping,
///   not against a server in the middle) unless `sslrootcert` names a file, in which case the
///   chain is checked against it (libpq's behaviour when a root certificate file is present).
/// * `verify-ca`: always, the chain checked; `verify-full`: also the host name (or IP address) of
///   the URL against the certificate's names. Without `sslrootcert` (or with
///   `sslrootcert=system`) the chain is checked against the system's trust store — the CAs of the
///   managed services that use a public CA; libpq would read `~/.postgresql/root.crt` instead.
///
/// SCRAM authentication binds itself to the TLS channel when the server supports it
/// (`channel_binding`, the driver's). Over a Unix socket there is no TLS, whatever the mode (as
/// libpq). Client certificates (`sslcert`, `sslkey`) are not supported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub mode: SslMode,
    /// `Some` when the chain is checked.
    pub roots: Option<RootCert>,
}

impl Tls {
    /// Whether the certificate must name the host.
    pub(crate) fn checks_host_name(&self) -> bool {
        self.mode == SslMode::VerifyFull
    }
}

/// Whether `url` asks for PostgreSQL (the scheme is all that is looked at).
pub fn is_postgres_url(url: &str) -> bool {
    scheme(url).is_some_and(|s| s == "postgres" || s == "postgresql")
}

fn scheme(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once("://")?;
    Some(scheme.to_ascii_lowercase())
}

/// Query options whose value is a secret.
const SECRET_OPTIONS: [&str; 2] = ["password", "sslpassword"];

/// A URL cut into the parts that matter for its secrets, as the driver reads it (and wider where
/// a URL is ambiguous, so that nothing the driver could take for a password shows).
struct Parts<'a> {
    /// Up to and including `://`.
    scheme: &'a str,
    /// The user-info's user name, with the `:` that follows it when there is a password.
    user: &'a str,
    /// The user-info's password as written (may be empty).
    password: Option<&'a str>,
    /// From the `@` that ends the user-info (or the host when there is none) to the first `?`
    /// after it.
    rest: &'a str,
    /// The query options as written, without the `?`.
    query: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn of(url: &'a str) -> Option<Parts<'a>> {
        let start = url.find("://")? + 3;
        let (scheme, after) = url.split_at(start);
        // The driver ends the user-info at the first `@` of the whole URL; a reader of RFC 3986 at
        // the last `@` before the path. The wider of the two is treated as user-info.
        let authority_end = after.find(['/', '?']).unwrap_or(after.len());
        // (The first `@` counts only when what precedes it has a password: else it is in an
        // option's value, which is redacted as such.)
        let at = after[..authority_end]
            .rfind('@')
            .or_else(|| after.find('@').filter(|&at| after[..at].contains(':')));
        let (user, password, tail) = match at {
            Some(at) => {
                let userinfo = &after[..at];
                match userinfo.split_once(':') {
                    Some((user, password)) => {
                        (&after[..user.len() + 1], Some(password), &after[at..])
                    }
                    None => (userinfo, None, &after[at..]),
                }
            }
            None => ("", None, after),
        };
        let (rest, query) = match tail.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (tail, None),
        };
        Some(Parts {
            scheme,
            user,
            password,
            rest,
            query,
        })
    }

    /// The query options, each as `(key decoded, option as written)`.
    fn options(&self) -> impl Iterator<Item = (String, &'a str)> {
        self.query
            .unwrap_or_default()
            .split('&')
            .filter(|o| !o.is_empty())
            .map(|option| {
                let key = option.split_once('=').map_or(option, |(k, _)| k);
                (
                    percent_decode_str(key).decode_utf8_lossy().into_owned(),
                    option,
                )
            })
    }

    fn is_secret(key: &str) -> bool {
        SECRET_OPTIONS.iter().any(|s| key.eq_ignore_ascii_case(s))
    }

    /// The secrets as written and percent-decoded, longest first, none empty.
    fn secrets(&self) -> Vec<String> {
        let mut written: Vec<&str> = self.password.into_iter().collect();
        for (key, option) in self.options() {
            if Self::is_secret(&key)
                && let Some((_, value)) = option.split_once('=')
            {
                written.push(value);
            }
        }
        let mut out: Vec<String> = Vec::new();
        for secret in written {
            let decoded = percent_decode_str(secret).decode_utf8_lossy().into_owned();
            let plus_decoded = percent_decode_str(&secret.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned();
            for s in [secret.to_owned(), decoded, plus_decoded] {
                if !s.is_empty() && !out.contains(&s) {
                    out.push(s);
                }
            }
        }
        out.sort_by_key(|s| std::cmp::Reverse(s.len()));
        out
    }

    /// The URL again, with each password replaced by `password(value)` (`None`: left out).
    fn rebuild(&self, password: impl Fn(&str) -> Option<String>) -> String {
        let mut out = String::from(self.scheme);
        match self.password {
            Some(p) => match password(p) {
                Some(shown) => {
                    out.push_str(self.user);
                    out.push_str(&shown);
                }
                None => out.push_str(self.user.trim_end_matches(':')),
            },
            None => out.push_str(self.user),
        }
        out.push_str(self.rest);
        if self.query.is_some() {
            let options: Vec<String> = self
                .options()
                .filter_map(|(key, option)| {
                    if !Self::is_secret(&key) {
                        return Some(option.to_owned());
                    }
                    let (k, v) = option.split_once('=').unwrap_or((option, ""));
                    password(v).map(|shown| format!("{k}={shown}"))
                })
                .collect();
            if !options.is_empty() {
                out.push('?');
                out.push_str(&options.join("&"));
            }
        }
        out
    }
}

/// `url` with every secret in it replaced by `***`: the password of its user-info and the value
/// of a `password` or `sslpassword` option (its name in any case, percent-encoded or not). What
/// is not a URL (a path, or libpq's `key=value` form, which sessiond does not take) is shown with
/// the value of each `password=` and `sslpassword=` keyword replaced.
pub fn redact(url: &str) -> String {
    match Parts::of(url) {
        Some(parts) => parts.rebuild(|_| Some("***".into())),
        None => keywords(url).0,
    }
}

/// `url` without its secrets (for a program that reads the password from its own place, such as
/// `pg_dump` from `PGPASSWORD` or `~/.pgpass`).
pub fn without_password(url: &str) -> String {
    match Parts::of(url) {
        Some(parts) => parts.rebuild(|_| None),
        None => keywords(url).0,
    }
}

/// `text` with every secret of `url` — as written in it and percent-decoded — replaced by `***`.
pub fn scrub(url: &str, text: &str) -> String {
    let secrets = match Parts::of(url) {
        Some(parts) => parts.secrets(),
        None => keywords(url).1,
    };
    let mut out = if url.is_empty() {
        text.to_owned()
    } else {
        text.replace(url, &redact(url))
    };
    for secret in secrets {
        out = out.replace(&secret, "***");
    }
    out
}

/// libpq's `key=value` form: `text` with the value of each secret keyword replaced by `***`
/// (quoted or not, blanks around `=` allowed), and those values, longest first.
fn keywords(text: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(text.len());
    let mut secrets = Vec::new();
    let mut rest = text;
    let mut at_word_start = true;
    while !rest.is_empty() {
        let key = SECRET_OPTIONS.iter().rev().find(|k| {
            at_word_start && rest.len() >= k.len() && rest[..k.len()].eq_ignore_ascii_case(k)
        });
        if let Some(key) = key {
            let after_key = &rest[key.len()..];
            let eq = after_key.trim_start();
            if let Some(value) = eq.strip_prefix('=') {
                let value = value.trim_start();
                let len = if let Some(quoted) = value.strip_prefix('\'') {
                    let mut end = quoted.len();
                    let mut escaped = false;
                    for (i, c) in quoted.char_indices() {
                        match c {
                            '\\' if !escaped => escaped = true,
                            '\'' if !escaped => {
                                end = i + 1;
                                break;
                            }
                            _ => escaped = false,
                        }
                    }
                    1 + end
                } else {
                    value.find(char::is_whitespace).unwrap_or(value.len())
                };
                out.push_str(&rest[..rest.len() - value.len()]);
                out.push_str("***");
                let secret = value[..len].trim_matches('\'');
                if !secret.is_empty() {
                    secrets.push(secret.to_owned());
                }
                rest = &value[len..];
                at_word_start = false;
                continue;
            }
        }
        let c = rest.chars().next().unwrap_or(' ');
        at_word_start = c.is_whitespace();
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    (out, secrets)
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<DatabaseUrl, PostgresError> {
        let redacted = redact(url);
        let invalid = |reason: String| PostgresError::InvalidUrl {
            url: redacted.clone(),
            reason: scrub(url, &reason),
        };
        match scheme(url) {
            Some(s) if s == "postgres" || s == "postgresql" => {}
            Some(s) => {
                return Err(invalid(format!(
                    "the scheme is {s}://; a PostgreSQL URL starts with postgres:// or postgresql://"
                )));
            }
            None => {
                return Err(invalid(
                    "not a URL; a PostgreSQL URL starts with postgres:// or postgresql://".into(),
                ));
            }
        }
        let (driver_url, tls) = split_tls(url).map_err(invalid)?;
        let mut config = tokio_postgres::Config::from_str(&driver_url)
            .map_err(|e| invalid(super::error::describe(&e)))?;
        if config.get_hosts().is_empty() {
            return Err(invalid(
                "no host; name one (postgres://HOST/DB) or a socket directory (?host=/run/postgresql)"
                    .into(),
            ));
        }
        if config.get_dbname().is_none() {
            return Err(invalid("no database name (postgres://HOST/DB)".into()));
        }
        // libpq uses no TLS over a Unix socket, whatever the mode; the driver would refuse one
        // that requires it.
        let all_sockets = config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
        config.ssl_mode(if all_sockets {
            tokio_postgres::config::SslMode::Disable
        } else {
            tls.mode.driver()
        });
        let secrets = Parts::of(url).map(|p| p.secrets()).unwrap_or_default();
        Ok(DatabaseUrl {
            config,
            tls,
            redacted,
            secrets,
        })
    }

    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// How connections use TLS.
    pub fn tls(&self) -> &Tls {
        &self.tls
    }

    /// Where it points, for messages: `user@host:port/database` (no password), with the TLS mode
    /// when it is not the default.
    pub fn target(&self) -> String {
        let c = &self.config;
        let ports = c.get_ports();
        let hosts: Vec<String> = c
            .get_hosts()
            .iter()
            .enumerate()
            .map(|(i, h)| {
                let host = match h {
                    Host::Tcp(name) => name.clone(),
                    Host::Unix(path) => path.display().to_string(),
                };
                match ports.get(i).or(ports.first()) {
                    Some(port) => format!("{host}:{port}"),
                    None => format!("{host}:5432"),
                }
            })
            .collect();
        let user = c.get_user().map(|u| format!("{u}@")).unwrap_or_default();
        let db = c.get_dbname().unwrap_or_default();
        let tls = match self.tls.mode {
            SslMode::Prefer => String::new(),
            mode => format!(" (sslmode={})", mode.as_str()),
        };
        format!("{user}{}/{db}{tls}", hosts.join(","))
    }

    /// `text` with the URL's secrets (written or percent-decoded) replaced by `***`: for driver
    /// messages, which could quote parts of the configuration.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for secret in &self.secrets {
            out = out.replace(secret, "***");
        }
        out
    }
}

/// The URL for the driver (without the options it does not know, `sslmode` one of its three) and
/// the TLS settings the URL asks for.
fn split_tls(url: &str) -> Result<(String, Tls), String> {
    let (_, rest) = url.split_once("://").unwrap_or_default();
    let (head, query) = match rest.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (rest, None),
    };
    let mut mode = SslMode::Prefer;
    let mut root: Option<RootCert> = None;
    let mut kept: Vec<&str> = Vec::new();
    for option in query
        .unwrap_or_default()
        .split('&')
        .filter(|o| !o.is_empty())
    {
        let (key, value) = option.split_once('=').unwrap_or((option, ""));
        let key = percent_decode_str(key).decode_utf8_lossy();
        let value = percent_decode_str(value).decode_utf8_lossy();
        match key.as_ref() {
            "sslmode" => mode = SslMode::parse(&value)?,
            "sslrootcert" if value.is_empty() => {
                return Err("sslrootcert needs a value: a PEM file's path, or system".into());
            }
            "sslrootcert" if value == "system" => root = Some(RootCert::System),
            "sslrootcert" => root = Some(RootCert::File(PathBuf::from(value.as_ref()))),
            "sslcert" | "sslkey" | "sslpassword" | "sslcertmode" => {
                return Err(format!(
                    "{key}: TLS client certificates are not supported (sessiond authenticates \
                     with a user name and password)"
                ));
            }
            "sslcrl" | "sslcrldir" => {
                return Err(format!(
                    "{key}: certificate revocation lists are not supported"
                ));
            }
            _ => kept.push(option),
        }
    }
    let roots = match mode {
        SslMode::Disable => None,
        SslMode::Prefer | SslMode::Require => root.filter(|r| *r != RootCert::System),
        SslMode::VerifyCa | SslMode::VerifyFull => Some(root.unwrap_or(RootCert::System)),
    };
    kept.push(match mode.driver() {
        tokio_postgres::config::SslMode::Disable => "sslmode=disable",
        tokio_postgres::config::SslMode::Prefer => "sslmode=prefer",
        _ => "sslmode=require",
    });
    // The driver knows the schemes in lower case only (as libpq does).
    Ok((
        format!("postgresql://{head}?{}", kept.join("&")),
        Tls { mode, roots },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemes_parse() {
        for url in [
            "postgres://app@db.example:6543/sessiond",
            "postgresql://app@db.example:6543/sessiond",
            "POSTGRESQL://app@db.example:6543/sessiond",
        ] {
            let parsed = DatabaseUrl::parse(url).unwrap();
            assert_eq!(parsed.target(), "app@db.example:6543/sessiond");
            assert!(is_postgres_url(url));
        }
        assert!(!is_postgres_url("/var/lib/sessiond/sessiond.db"));
        assert!(!is_postgres_url("sqlite://sessiond.db"));
    }

    #[test]
    fn a_socket_directory_is_a_host() {
        let parsed = DatabaseUrl::parse("postgresql:///sessiond?host=/run/postgresql").unwrap();
        assert_eq!(parsed.target(), "/run/postgresql:5432/sessiond");
        let parsed = DatabaseUrl::parse("postgresql://%2Frun%2Fpostgresql/sessiond").unwrap();
        assert_eq!(parsed.target(), "/run/postgresql:5432/sessiond");
    }

    #[test]
    fn other_schemes_and_paths_are_refused_by_name() {
        for (url, says) in [
            ("mysql://root@localhost/db", "the scheme is mysql://"),
            ("/var/lib/sessiond/sessiond.db", "not a URL"),
            ("", "not a URL"),
        ] {
            let e = DatabaseUrl::parse(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url:?}: {e}");
            assert!(e.contains("postgres://"), "{url:?}: {e}");
        }
    }

    #[test]
    fn the_password_never_shows() {
        for url in [
            "postgres://app:s3cr%21t@db.example:notaport/sessiond",
            "postgres://app:s3cr%21t@db.example/sessiond?sslmode=bogus",
            "postgres://app:s3cr%21t@db.example/sessiond?nonsense=1",
            "postgres://app:s3cr%21t@db.example",
        ] {
            let e = DatabaseUrl::parse(url).unwrap_err().to_string();
            assert!(!e.contains("s3cr"), "{e}");
            assert!(e.contains("app:***@db.example"), "{e}");
        }
        let ok = DatabaseUrl::parse("postgres://app:s3cr%21t@db.example/sessiond").unwrap();
        assert_eq!(ok.to_string(), "postgres://app:***@db.example/sessiond");
        assert!(!format!("{ok:?}").contains("s3cr"));
        assert_eq!(ok.scrub("auth failed for s3cr!t"), "auth failed for ***");
        assert_eq!(ok.scrub("auth failed for s3cr%21t"), "auth failed for ***");
    }

    #[test]
    fn every_kind_of_secret_is_redacted() {
        for (url, shown, without) in [
            (
                "postgres://app:s3cr%21t@db.example:6543/sessiond",
                "postgres://app:***@db.example:6543/sessiond",
                "postgres://app@db.example:6543/sessiond",
            ),
            (
                "postgres://app:s3cr!t@db.example/sessiond?password=s3cr!t&connect_timeout=5",
                "postgres://app:***@db.example/sessiond?password=***&connect_timeout=5",
                "postgres://app@db.example/sessiond?connect_timeout=5",
            ),
            (
                "postgres://app@db.example/sessiond?PassWord=s3cr%21t",
                "postgres://app@db.example/sessiond?PassWord=***",
                "postgres://app@db.example/sessiond",
            ),
            (
                "postgres://app@db.example/sessiond?pass%77ord=s3cr%21t&sslmode=require",
                "postgres://app@db.example/sessiond?pass%77ord=***&sslmode=require",
                "postgres://app@db.example/sessiond?sslmode=require",
            ),
            (
                "postgres://app@db.example/sessiond?sslpassword=s3cr!t",
                "postgres://app@db.example/sessiond?sslpassword=***",
                "postgres://app@db.example/sessiond",
            ),
            // An `@` left unencoded in the password: the wider reading is hidden.
            (
                "postgres://app:s3c@r!t@db.example/sessiond",
                "postgres://app:***@db.example/sessiond",
                "postgres://app@db.example/sessiond",
            ),
            (
                "postgres://db.example/sessiond?password=s3c@r!t",
                "postgres://db.example/sessiond?password=***",
                "postgres://db.example/sessiond",
            ),
            // A `/` left unencoded: the driver ends the user-info at the first `@`.
            (
                "postgres://app:s3c/r!t@db.example/sessiond",
                "postgres://app:***@db.example/sessiond",
                "postgres://app@db.example/sessiond",
            ),
            (
                "postgresql:///sessiond?host=/run/postgresql",
                "postgresql:///sessiond?host=/run/postgresql",
                "postgresql:///sessiond?host=/run/postgresql",
            ),
        ] {
            assert_eq!(redact(url), shown, "{url}");
            assert_eq!(without_password(url), without, "{url}");
            let said = scrub(url, &format!("connecting to {url} failed"));
            assert!(!said.contains("s3c"), "{said}");
            assert!(said.contains(shown), "{said}");
        }
        assert_eq!(redact("/var/lib/sessiond.db"), "/var/lib/sessiond.db");
        for (conninfo, shown) in [
            (
                "host=db password=s3cret user=app",
                "host=db password=*** user=app",
            ),
            (
                "host=db PassWord = 's3c ret' user=app",
                "host=db PassWord = *** user=app",
            ),
            (
                "host=db sslpassword='it\\'s' x=1",
                "host=db sslpassword=*** x=1",
            ),
            ("mypassword=visible", "mypassword=visible"),
        ] {
            assert_eq!(redact(conninfo), shown, "{conninfo}");
            assert_eq!(without_password(conninfo), shown, "{conninfo}");
            assert_eq!(
                scrub(conninfo, &format!("{conninfo} refused")),
                format!("{shown} refused")
            );
        }
        let url = "postgres://app:s3cr%21t@db.example/x?sslpassword=k3y%20word";
        assert_eq!(
            scrub(
                url,
                "password s3cr!t, then s3cr%21t; key k3y word, k3y%20word"
            ),
            "password ***, then ***; key ***, ***"
        );
    }

    #[test]
    fn tls_modes_map_as_documented() {
        let tls = |url: &str| DatabaseUrl::parse(url).unwrap().tls().clone();
        let base = "postgres://db.example/sessiond";
        assert_eq!(
            tls(base),
            Tls {
                mode: SslMode::Prefer,
                roots: None
            }
        );
        assert_eq!(tls(&format!("{base}?sslmode=disable")).roots, None);
        assert_eq!(tls(&format!("{base}?sslmode=require")).roots, None);
        assert_eq!(
            tls(&format!("{base}?sslmode=require&sslrootcert=/ca.pem")).roots,
            Some(RootCert::File("/ca.pem".into()))
        );
        assert_eq!(
            tls(&format!("{base}?sslmode=verify-ca")).roots,
            Some(RootCert::System)
        );
        let full = tls(&format!(
            "{base}?sslrootcert=%2Fetc%2Fca.pem&sslmode=verify-full"
        ));
        assert_eq!(full.roots, Some(RootCert::File("/etc/ca.pem".into())));
        assert!(full.checks_host_name());
        assert_eq!(
            tls(&format!("{base}?sslmode=verify-full&sslrootcert=system")).roots,
            Some(RootCert::System)
        );
        let parsed = DatabaseUrl::parse(&format!("{base}?sslmode=verify-full")).unwrap();
        assert_eq!(
            parsed.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Require
        );
        assert_eq!(
            parsed.target(),
            "db.example:5432/sessiond (sslmode=verify-full)"
        );
        // No TLS over a socket, as libpq.
        let socket =
            DatabaseUrl::parse("postgres:///sessiond?host=/run/pg&sslmode=require").unwrap();
        assert_eq!(
            socket.config().get_ssl_mode(),
            tokio_postgres::config::SslMode::Disable
        );
    }

    #[test]
    fn unsupported_tls_options_are_refused_by_name() {
        for (option, says) in [
            ("sslmode=allow", "sslmode=allow"),
            ("sslmode=verify", "not one of"),
            ("sslcert=/c.pem", "client certificates"),
            ("sslkey=/k.pem", "client certificates"),
            ("sslpassword=s3cret", "client certificates"),
            ("sslcrl=/crl.pem", "revocation"),
            ("sslrootcert=", "needs a value"),
        ] {
            let e = DatabaseUrl::parse(&format!("postgres://db.example/sessiond?{option}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{option}: {e}");
            assert!(!e.contains("s3cret"), "{option}: {e}");
        }
    }

    #[test]
    fn a_url_needs_a_database() {
        let e = DatabaseUrl::parse("postgres://db.example")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no database name"), "{e}");
    }
}
