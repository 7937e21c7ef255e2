//! Database URLs: `postgres://` or `postgresql://` (libpq's URI form, with its query options such
//! as `connect_timeout` or `host=/run/postgresql` for a Unix socket). Parsing is the driver's; this
//! module checks the scheme first, so that a SQLite path or another engine's URL gets a clear
//! answer, and keeps the password out of everything it prints. Connections are plain TCP or a
//! Unix socket: `sslmode=require` is refused by name (the default, `prefer`, connects without TLS).

use std::str::FromStr;

use tokio_postgres::config::Host;

use super::error::PostgresError;

/// A parsed PostgreSQL URL.
#[derive(Clone)]
pub struct DatabaseUrl {
    config: tokio_postgres::Config,
    redacted: String,
}

impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DatabaseUrl").field(&self.redacted).finish()
    }
}

impl std::fmt::Display for DatabaseUrl {
    /// The URL with its password replaced by `***`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.redacted)
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

/// The password of the URL's user-info, as written (percent-encoded or not), if any.
fn password(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

/// `url` with the password of its user-info replaced by `***`.
pub fn redact(url: &str) -> String {
    match password(url) {
        Some(p) => scrub(url, p),
        None => url.to_owned(),
    }
}

/// `text` with every occurrence of `secret` (and of its percent-decoded form) replaced by `***`.
fn scrub(text: &str, secret: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(secret).decode_utf8_lossy();
    let mut out = text.replace(secret, "***");
    if !decoded.is_empty() && decoded != secret {
        out = out.replace(decoded.as_ref(), "***");
    }
    out
}

impl DatabaseUrl {
    pub fn parse(url: &str) -> Result<DatabaseUrl, PostgresError> {
        let redacted = redact(url);
        let invalid = |reason: String| PostgresError::InvalidUrl {
            url: redacted.clone(),
            reason: match password(url) {
                Some(p) => scrub(&reason, p),
                None => reason,
            },
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
        // The driver knows the schemes in lower case only (as libpq does).
        let (_, rest) = url.split_once("://").unwrap_or_default();
        let config = tokio_postgres::Config::from_str(&format!("postgresql://{rest}"))
            .map_err(|e| invalid(super::error::describe(&e)))?;
        if config.get_hosts().is_empty() {
            return Err(invalid(
                "no host; name one (postgres://HOST/DB) or a socket directory (?host=/run/postgresql)"
                    .into(),
            ));
        }
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(invalid(
                "sslmode=require: sessiond connects to PostgreSQL without TLS for now".into(),
            ));
        }
        if config.get_dbname().is_none() {
            return Err(invalid("no database name (postgres://HOST/DB)".into()));
        }
        Ok(DatabaseUrl { config, redacted })
    }

    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// Where it points, for messages: `user@host:port/database` (no password).
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
        format!("{user}{}/{db}", hosts.join(","))
    }

    /// `text` with the URL's password (if any) replaced by `***`: for driver messages, which could
    /// quote parts of the configuration.
    pub(crate) fn scrub(&self, text: &str) -> String {
        match self.config.get_password() {
            Some(p) => match std::str::from_utf8(p) {
                Ok(p) if !p.is_empty() => text.replace(p, "***"),
                _ => text.to_owned(),
            },
            None => text.to_owned(),
        }
    }
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
    }

    /// TLS is not offered: asking for it is refused up front rather than failing at connect.
    #[test]
    fn tls_is_refused_by_name() {
        let e = DatabaseUrl::parse("postgres://db.example/sessiond?sslmode=require")
            .unwrap_err()
            .to_string();
        assert!(e.contains("without TLS"), "{e}");
        DatabaseUrl::parse("postgres://db.example/sessiond?sslmode=disable").unwrap();
    }

    #[test]
    fn a_url_needs_a_database() {
        let e = DatabaseUrl::parse("postgres://db.example")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no database name"), "{e}");
    }
}
