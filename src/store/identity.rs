//! Identity rows: users, memberships, apps, API keys and browser sessions.

use rusqlite::{Connection, OptionalExtension, params};

use super::Tx;
use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct UserRow {
    pub id: String,
    pub email: String,
    pub password_hash: String,
}

pub fn user_count(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("SELECT count(*) FROM users", [], |r| r.get(0))?)
}

fn user_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<UserRow> {
    Ok(UserRow {
        id: r.get(0)?,
        email: r.get(1)?,
        password_hash: r.get(2)?,
    })
}

pub fn user_by_email(conn: &Connection, email: &str) -> Result<Option<UserRow>> {
    Ok(conn
        .prepare_cached("SELECT id, email, password_hash FROM users WHERE email = ?1")?
        .query_row([email], user_from_row)
        .optional()?)
}

pub fn user_by_id(conn: &Connection, id: &str) -> Result<Option<UserRow>> {
    Ok(conn
        .prepare_cached("SELECT id, email, password_hash FROM users WHERE id = ?1")?
        .query_row([id], user_from_row)
        .optional()?)
}

/// `(workspace id, slug, role)` of every workspace a user belongs to.
pub fn memberships(conn: &Connection, user_id: &str) -> Result<Vec<(String, String, String)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT w.id, w.slug, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
         WHERE m.user_id = ?1 ORDER BY w.slug",
    )?;
    let rows = stmt.query_map([user_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// The workspace a browser session acts in on routes without one in the path, when the request
/// names none: the oldest workspace the user owns, else the oldest they belong to.
pub fn default_workspace_slug(conn: &Connection, user_id: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached(
            "SELECT w.slug FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
             WHERE m.user_id = ?1
             ORDER BY m.role = 'owner' DESC, w.created_at, w.slug LIMIT 1",
        )?
        .query_row([user_id], |r| r.get(0))
        .optional()?)
}

pub fn is_member(conn: &Connection, user_id: &str, workspace_id: &str) -> Result<bool> {
    Ok(conn
        .prepare_cached("SELECT 1 FROM memberships WHERE user_id = ?1 AND workspace_id = ?2")?
        .exists([user_id, workspace_id])?)
}

/// An API key as verification needs it.
#[derive(Debug, Clone)]
pub struct KeyRow {
    pub id: String,
    pub secret_hash: String,
    pub name: String,
    pub user_id: Option<String>,
    pub app_id: Option<String>,
    pub workspace_id: String,
    pub workspace_slug: String,
    pub scopes: Vec<String>,
    pub created_at: i64,
    pub last_used_at: Option<i64>,
    pub revoked: bool,
    /// For a user key: whether the user is still a member of the key's workspace.
    pub member: bool,
}

const KEY_SELECT: &str =
    "SELECT k.id, k.secret_hash, k.name, k.user_id, k.app_id, k.workspace_id, w.slug,
        k.scopes, k.created_at, k.last_used_at, k.revoked_at IS NOT NULL,
        k.user_id IS NULL OR EXISTS (SELECT 1 FROM memberships m
            WHERE m.user_id = k.user_id AND m.workspace_id = k.workspace_id)
    FROM api_keys k JOIN workspaces w ON w.id = k.workspace_id";

fn key_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<KeyRow> {
    let scopes: String = r.get(7)?;
    Ok(KeyRow {
        id: r.get(0)?,
        secret_hash: r.get(1)?,
        name: r.get(2)?,
        user_id: r.get(3)?,
        app_id: r.get(4)?,
        workspace_id: r.get(5)?,
        workspace_slug: r.get(6)?,
        scopes: serde_json::from_str(&scopes).unwrap_or_default(),
        created_at: r.get(8)?,
        last_used_at: r.get(9)?,
        revoked: r.get(10)?,
        member: r.get(11)?,
    })
}

pub fn key_by_id(conn: &Connection, id: &str) -> Result<Option<KeyRow>> {
    Ok(conn
        .prepare_cached(&format!("{KEY_SELECT} WHERE k.id = ?1"))?
        .query_row([id], key_from_row)
        .optional()?)
}

/// Keys revoked at or after `since` (ms): `(id, revoked_at)`, oldest first.
pub fn keys_revoked_since(conn: &Connection, since: i64) -> Result<Vec<(String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, revoked_at FROM api_keys WHERE revoked_at >= ?1 ORDER BY revoked_at",
    )?;
    let rows = stmt.query_map([since], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn keys(conn: &Connection) -> Result<Vec<KeyRow>> {
    let mut stmt = conn.prepare(&format!("{KEY_SELECT} ORDER BY k.created_at"))?;
    let rows = stmt.query_map([], key_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// `(user id, expires_at)` of a browser session by the hash of its cookie.
pub fn browser_session(conn: &Connection, token_hash: &str) -> Result<Option<(String, i64)>> {
    Ok(conn
        .prepare_cached("SELECT user_id, expires_at FROM browser_sessions WHERE token_hash = ?1")?
        .query_row([token_hash], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

impl Tx<'_> {
    pub fn insert_user(&mut self, email: &str, password_hash: &str) -> Result<String> {
        let id = crate::ids::new_id();
        let n = self.conn.execute(
            "INSERT INTO users (id, email, password_hash, created_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (email) DO NOTHING",
            params![id, email, password_hash, self.now],
        )?;
        if n == 0 {
            return Err(Error::Conflict(
                "user_exists",
                format!("a user with email {email} already exists"),
            ));
        }
        Ok(id)
    }

    pub fn add_membership(&mut self, user_id: &str, workspace_id: &str, role: &str) -> Result<()> {
        self.conn.execute(
            "INSERT INTO memberships (user_id, workspace_id, role) VALUES (?1, ?2, ?3)
             ON CONFLICT (user_id, workspace_id) DO UPDATE SET role = excluded.role",
            params![user_id, workspace_id, role],
        )?;
        Ok(())
    }

    pub fn insert_app(
        &mut self,
        workspace_id: &str,
        name: &str,
        scopes: &[String],
    ) -> Result<String> {
        let id = crate::ids::new_id();
        self.conn.execute(
            "INSERT INTO apps (id, workspace_id, name, api_scopes, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![id, workspace_id, name, serde_json::to_string(scopes).unwrap_or_default(), self.now],
        )?;
        Ok(id)
    }

    #[allow(clippy::too_many_arguments)]
    pub fn insert_key(
        &mut self,
        id: &str,
        secret_hash: &str,
        name: &str,
        user_id: Option<&str>,
        app_id: Option<&str>,
        workspace_id: &str,
        scopes: &[String],
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO api_keys (id, secret_hash, name, user_id, app_id, workspace_id, scopes, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![id, secret_hash, name, user_id, app_id, workspace_id, serde_json::to_string(scopes).unwrap_or_default(), self.now],
        )?;
        Ok(())
    }

    pub fn revoke_key(&mut self, id: &str) -> Result<bool> {
        let n = self.conn.execute(
            "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
            params![id, self.now],
        )?;
        Ok(n == 1)
    }

    pub fn touch_key(&mut self, id: &str, at: i64) -> Result<()> {
        self.conn
            .prepare_cached("UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?2) WHERE id = ?1")?
            .execute(params![id, at])?;
        Ok(())
    }

    pub fn insert_browser_session(
        &mut self,
        token_hash: &str,
        user_id: &str,
        expires_at: i64,
    ) -> Result<()> {
        self.conn.execute(
            "DELETE FROM browser_sessions WHERE expires_at < ?1",
            [self.now],
        )?;
        self.conn.execute(
            "INSERT INTO browser_sessions (token_hash, user_id, created_at, expires_at) VALUES (?1, ?2, ?3, ?4)",
            params![token_hash, user_id, self.now, expires_at],
        )?;
        Ok(())
    }

    pub fn delete_browser_session(&mut self, token_hash: &str) -> Result<()> {
        self.conn.execute(
            "DELETE FROM browser_sessions WHERE token_hash = ?1",
            [token_hash],
        )?;
        Ok(())
    }
}
