//! A2A push-notification configs (migration 0020), per session (an A2A task): the URL to post
//! to and the sealed token and credentials sent with each post.

use super::Tx;
use super::sql::{Db, params};
use crate::error::{Error, Result};

/// Most configs one task may have.
pub(crate) const PER_TASK_MAX: i64 = 10;

#[derive(Debug, Clone)]
pub struct PushConfigRow {
    pub session_pk: i64,
    pub id: String,
    pub url: String,
    pub token_sealed: Option<String>,
    pub auth_scheme: Option<String>,
    pub credentials_sealed: Option<String>,
    pub created_at: i64,
}

const COLUMNS: &str =
    "session_pk, id, url, token_sealed, auth_scheme, credentials_sealed, created_at";

fn from_row(r: &super::sql::Row<'_>) -> super::sql::Result<PushConfigRow> {
    Ok(PushConfigRow {
        session_pk: r.get(0)?,
        id: r.get(1)?,
        url: r.get(2)?,
        token_sealed: r.get(3)?,
        auth_scheme: r.get(4)?,
        credentials_sealed: r.get(5)?,
        created_at: r.get(6)?,
    })
}

fn list(conn: &Db, session_pk: i64) -> Result<Vec<PushConfigRow>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM a2a_push_configs WHERE session_pk = ?1 ORDER BY created_at, id"
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![session_pk], from_row)?;
    Ok(rows.collect::<super::sql::Result<_>>()?)
}

impl Tx<'_> {
    /// Records a config, replacing one of the same id (the protocol's create is a set); 409
    /// `push_configs_full` past [`PER_TASK_MAX`].
    fn put_push_config(&mut self, c: &PushConfigRow) -> Result<()> {
        let count: i64 = self
            .conn
            .prepare_cached(
                "SELECT COUNT(*) FROM a2a_push_configs WHERE session_pk = ?1 AND id <> ?2",
            )?
            .query_row(params![c.session_pk, c.id], |r| r.get(0))?;
        if count >= PER_TASK_MAX {
            return Err(Error::Conflict(
                "push_configs_full",
                format!("a task has at most {PER_TASK_MAX} push-notification configs"),
            ));
        }
        self.conn
            .prepare_cached("DELETE FROM a2a_push_configs WHERE session_pk = ?1 AND id = ?2")?
            .execute(params![c.session_pk, c.id])?;
        self.conn
            .prepare_cached(
                "INSERT INTO a2a_push_configs (session_pk, id, url, token_sealed, auth_scheme,
                    credentials_sealed, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                c.session_pk,
                c.id,
                c.url,
                c.token_sealed,
                c.auth_scheme,
                c.credentials_sealed,
                self.now
            ])?;
        Ok(())
    }
}

/// A2A push-notification configs, in sessiond's own types.
#[derive(Clone, Copy)]
pub struct A2aPushStore<'a> {
    store: &'a super::Store,
}

impl super::Store {
    /// A2A push-notification configs of sessions.
    pub fn a2a_push(&self) -> A2aPushStore<'_> {
        A2aPushStore { store: self }
    }
}

impl A2aPushStore<'_> {
    pub async fn put(&self, c: PushConfigRow) -> Result<()> {
        self.store.write(move |tx| tx.put_push_config(&c)).await
    }

    pub async fn list(&self, session_pk: i64) -> Result<Vec<PushConfigRow>> {
        self.store.read(move |c| list(c, session_pk)).await
    }

    /// Whether a config was deleted.
    pub async fn delete(&self, session_pk: i64, id: &str) -> Result<bool> {
        let id = id.to_owned();
        self.store
            .write(move |tx| {
                Ok(tx
                    .conn
                    .prepare_cached(
                        "DELETE FROM a2a_push_configs WHERE session_pk = ?1 AND id = ?2",
                    )?
                    .execute(params![session_pk, id])?
                    > 0)
            })
            .await
    }
}
