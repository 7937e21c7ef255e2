//! The database URL as sessiond checks and shows it (`--database`, `SESSIOND_DATABASE_URL`,
//! `database_url`): a PostgreSQL URL that the driver accepts, checked with the rest of the
//! configuration before anything runs, and never shown with its password — not in a refusal, a
//! driver's message, the start-up lines or the log. The URL itself is `config`'s; what needs
//! the driver's parser (`store::postgres`) is here, since `config` stands below the store.

use crate::config::DatabaseUrl;

/// What a database URL that is not PostgreSQL's is told.
const NOT_POSTGRES: &str = "a database URL is PostgreSQL's (postgres:// or postgresql://); \
     SQLite needs none (without one, the database is sessiond.db in the data dir)";

impl DatabaseUrl {
    /// Whether sessiond can use it: a PostgreSQL URL the driver accepts (checked without
    /// connecting), in a build with PostgreSQL. The message never holds the password.
    pub fn check(&self) -> Result<(), String> {
        #[cfg(feature = "postgres")]
        {
            use crate::store::postgres;
            if !postgres::is_postgres_url(self.expose()) {
                return Err(match self.expose().split_once("://") {
                    Some((scheme, _)) => format!(
                        "{} has the scheme {}://; {NOT_POSTGRES}",
                        self.shown(),
                        scheme.to_ascii_lowercase()
                    ),
                    None => format!("{:?} is not a URL; {NOT_POSTGRES}", self.shown()),
                });
            }
            postgres::DatabaseUrl::parse(self.expose())
                .map(|_| ())
                .map_err(|e| self.scrub(&e.to_string()))
        }
        #[cfg(not(feature = "postgres"))]
        {
            Err(format!(
                "this sessiond was built without PostgreSQL (the cargo feature `postgres`); \
                 {NOT_POSTGRES}"
            ))
        }
    }

    /// The URL with its secrets replaced by `***`: the user-info's password and the value of a
    /// `password` or `sslpassword` option (`store::postgres::redact`, the one redaction).
    pub fn shown(&self) -> String {
        #[cfg(feature = "postgres")]
        {
            crate::store::postgres::redact(self.expose())
        }
        #[cfg(not(feature = "postgres"))]
        {
            "***".into()
        }
    }

    /// The URL without its password, to hand to another program that reads the password from
    /// its own place (`PGPASSWORD`, `~/.pgpass`).
    pub fn without_password(&self) -> String {
        #[cfg(feature = "postgres")]
        {
            crate::store::postgres::without_password(self.expose())
        }
        #[cfg(not(feature = "postgres"))]
        {
            "***".into()
        }
    }

    /// Where it points, for the start-up lines and the log: `user@host:port/database`, no
    /// password.
    pub fn target(&self) -> String {
        #[cfg(feature = "postgres")]
        if let Ok(url) = crate::store::postgres::DatabaseUrl::parse(self.expose()) {
            return url.target();
        }
        self.shown()
    }

    /// `text` (a driver's or the store's message) without the URL's secrets, written or
    /// percent-decoded.
    pub fn scrub(&self, text: &str) -> String {
        #[cfg(feature = "postgres")]
        {
            crate::store::postgres::scrub(self.expose(), text)
        }
        #[cfg(not(feature = "postgres"))]
        {
            if self.expose().is_empty() {
                text.to_owned()
            } else {
                text.replace(self.expose(), "***")
            }
        }
    }
}

/// `text` with the secrets of every URL in it replaced by `***` (a URL is a run of non-blank
/// characters with `://` in it).
pub fn hide_url_passwords(text: &str) -> String {
    #[cfg(feature = "postgres")]
    {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find(|c: char| !c.is_whitespace()) {
            out.push_str(&rest[..start]);
            rest = &rest[start..];
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let word = &rest[..end];
            if word.contains("://") {
                // Whatever precedes the scheme (a quote) stays as it is.
                out.push_str(&crate::store::postgres::redact(word));
            } else {
                out.push_str(word);
            }
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }
    #[cfg(not(feature = "postgres"))]
    text.to_owned()
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn a_database_url_is_shown_without_its_password() {
        for (url, shown, without) in [
            (
                "postgres://app:s3cr%21t@db.example:6543/sessiond",
                "postgres://app:***@db.example:6543/sessiond",
                "postgres://app@db.example:6543/sessiond",
            ),
            (
                "postgresql://app@db.example/sessiond?password=s3cr%21t&connect_timeout=5",
                "postgresql://app@db.example/sessiond?password=***&connect_timeout=5",
                "postgresql://app@db.example/sessiond?connect_timeout=5",
            ),
            (
                "postgresql:///sessiond?host=/run/postgresql",
                "postgresql:///sessiond?host=/run/postgresql",
                "postgresql:///sessiond?host=/run/postgresql",
            ),
        ] {
            let db = DatabaseUrl::new(url);
            db.check().unwrap();
            assert_eq!(db.shown(), shown);
            assert_eq!(db.without_password(), without);
            assert!(!format!("{db:?}").contains("s3cr"), "{db:?}");
            assert!(!db.target().contains("s3cr"), "{}", db.target());
            if url.contains("s3cr") {
                let said = db.scrub(&format!("{url}: password s3cr!t refused"));
                assert!(!said.contains("s3cr"), "{said}");
            }
        }
    }

    #[test]
    fn a_database_url_that_is_not_postgresql_is_refused_by_name() {
        for (url, says) in [
            ("mysql://root:pw@localhost/db", "the scheme mysql://"),
            (
                "sqlite:///var/lib/sessiond/sessiond.db",
                "the scheme sqlite://",
            ),
            ("/var/lib/sessiond/sessiond.db", "is not a URL"),
            ("", "is not a URL"),
            ("postgres://app:pw@db.example:notaport/db", "port"),
            ("postgres://app:pw@db.example", "no database name"),
        ] {
            let e = DatabaseUrl::new(url).check().unwrap_err();
            assert!(e.contains(says), "{url:?}: {e}");
            assert!(!e.contains(":pw@"), "{url:?}: {e}");
            if !url.starts_with("postgres") {
                assert!(e.contains("postgres:// or postgresql://"), "{url:?}: {e}");
                assert!(e.contains("SQLite needs none"), "{url:?}: {e}");
            }
        }
    }

    /// TOML's message quotes the line it stopped at, which may hold the URL's password.
    #[test]
    fn a_config_file_that_is_not_toml_shows_no_url_password() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sessiond.toml");
        std::fs::write(
            &path,
            "database_url = \"postgres://app:s3cret@db.example/x\n",
        )
        .unwrap();
        let e = hide_url_passwords(&Config::from_file(&path).unwrap_err());
        assert!(e.contains("postgres://app:***@db.example/x"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }
}
