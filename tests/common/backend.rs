//! Which store the test servers use: SQLite unless `SESSIOND_TEST_BACKEND=postgres`. Shared by
//! the harness (`mod.rs`) and the Python suites' runner (`tests/python.rs`).

use std::sync::LazyLock;

/// The variable that selects the backend.
pub const VARIABLE: &str = "SESSIOND_TEST_BACKEND";

/// The store the test servers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `sessiond.db` in the data dir: `SESSIOND_TEST_BACKEND` unset.
    Sqlite,
    /// A database of the test cluster per server: `SESSIOND_TEST_BACKEND=postgres`.
    Postgres,
}

/// This run's backend; any value of `SESSIOND_TEST_BACKEND` but `postgres` is refused.
pub fn backend() -> Backend {
    static BACKEND: LazyLock<Result<Backend, String>> =
        LazyLock::new(|| match std::env::var(VARIABLE) {
            Err(std::env::VarError::NotPresent) => Ok(Backend::Sqlite),
            Ok(v) if v == "postgres" => Ok(Backend::Postgres),
            Ok(v) => Err(format!(
                "{VARIABLE}={v:?}: the tests run on SQLite with the variable unset, on \
                 PostgreSQL with {VARIABLE}=postgres"
            )),
            Err(e) => Err(format!("{VARIABLE}: {e}")),
        });
    BACKEND.clone().unwrap_or_else(|e| panic!("{e}"))
}
