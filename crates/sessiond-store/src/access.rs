//! Access rows changed by a workspace's owners: memberships and their roles, one-time
//! password-reset links (migration 0019), workspaces made and renamed. Every change that could
//! leave a workspace without an owner is refused in the transaction that would make it.

use super::sql::{OptionalExtension, params};
use super::{Store, Tx};
use crate::error::{Error, Result};
use crate::identity::{NewKeyRow, Role};

/// The password hash of an account made without a password: no password verifies against it,
/// so the person signs in only after choosing one through a reset link.
pub(crate) const NO_PASSWORD: &str = "!none";

/// A workspace as its settings show it.
#[derive(Debug, Clone)]
pub struct WorkspaceInfo {
    pub id: String,
    pub slug: String,
    pub name: String,
    pub created_at: i64,
}

pub struct AccessStore<'a> {
    store: &'a Store,
}

impl Store {
    pub fn access(&self) -> AccessStore<'_> {
        AccessStore { store: self }
    }
}

fn owners(tx: &Tx<'_>, workspace_id: &str) -> Result<i64> {
    Ok(tx.conn.query_row(
        "SELECT count(*) FROM memberships WHERE workspace_id = ?1 AND role = 'owner'",
        [workspace_id],
        |r| r.get(0),
    )?)
}

fn role_of(tx: &Tx<'_>, workspace_id: &str, user_id: &str) -> Result<Option<Role>> {
    let role: Option<String> = tx
        .conn
        .query_row(
            "SELECT role FROM memberships WHERE workspace_id = ?1 AND user_id = ?2",
            [workspace_id, user_id],
            |r| r.get(0),
        )
        .optional()?;
    Ok(role.as_deref().and_then(Role::parse))
}

fn last_owner() -> Error {
    Error::Conflict(
        "last_owner",
        "a workspace keeps at least one owner: make someone else an owner first".into(),
    )
}

impl AccessStore<'_> {
    /// Creates an app with its first key, in one transaction.
    pub async fn insert_app_with_key(&self, app_name: &str, key: NewKeyRow) -> Result<()> {
        let name = app_name.to_owned();
        self.store
            .write(move |tx| {
                let app = tx.insert_app(&key.workspace_id, &name, &key.scopes)?;
                tx.insert_key(
                    &key.id,
                    &key.secret_hash,
                    &key.name,
                    None,
                    Some(&app),
                    &key.workspace_id,
                    &key.scopes,
                    key.expires_at,
                )
            })
            .await
    }

    /// Makes the person with `email` a member of the workspace with `role`, creating their
    /// account (with [`NO_PASSWORD`]) when there is none. Returns their id and whether the
    /// account is new; 409 `already_member` when they belong to the workspace already.
    pub async fn add_member(
        &self,
        workspace_id: &str,
        email: &str,
        role: Role,
    ) -> Result<(String, bool)> {
        let (ws, email) = (workspace_id.to_owned(), email.to_owned());
        self.store
            .write(move |tx| {
                let existing: Option<String> = tx
                    .conn
                    .query_row("SELECT id FROM users WHERE email = ?1", [&email], |r| {
                        r.get(0)
                    })
                    .optional()?;
                let (id, created) = match existing {
                    Some(id) => (id, false),
                    None => (tx.insert_user(&email, NO_PASSWORD)?, true),
                };
                if role_of(tx, &ws, &id)?.is_some() {
                    return Err(Error::Conflict(
                        "already_member",
                        format!("{email} is already a member of this workspace"),
                    ));
                }
                tx.add_membership(&id, &ws, role.name())?;
                Ok((id, created))
            })
            .await
    }

    /// Changes a member's role; 404 when they are not a member, 409 `last_owner` when it would
    /// leave the workspace without an owner.
    pub async fn set_role(&self, workspace_id: &str, user_id: &str, role: Role) -> Result<()> {
        let (ws, user) = (workspace_id.to_owned(), user_id.to_owned());
        self.store
            .write(move |tx| {
                let now = role_of(tx, &ws, &user)?.ok_or(Error::NotFound)?;
                if now == Role::Owner && role != Role::Owner && owners(tx, &ws)? <= 1 {
                    return Err(last_owner());
                }
                tx.add_membership(&user, &ws, role.name())
            })
            .await
    }

    /// Removes a member and revokes their keys of the workspace (returned, to be forgotten at
    /// once); 404 when they are not a member, 409 `last_owner` for the last owner.
    pub async fn remove_member(&self, workspace_id: &str, user_id: &str) -> Result<Vec<String>> {
        let (ws, user) = (workspace_id.to_owned(), user_id.to_owned());
        self.store
            .write(move |tx| {
                let role = role_of(tx, &ws, &user)?.ok_or(Error::NotFound)?;
                if role == Role::Owner && owners(tx, &ws)? <= 1 {
                    return Err(last_owner());
                }
                let keys: Vec<String> = {
                    let mut stmt = tx.conn.prepare(
                        "SELECT id FROM api_keys
                         WHERE user_id = ?1 AND workspace_id = ?2 AND revoked_at IS NULL",
                    )?;
                    let rows = stmt.query_map([&user, &ws], |r| r.get(0))?;
                    rows.collect::<super::sql::Result<_>>()?
                };
                tx.conn.execute(
                    "UPDATE api_keys SET revoked_at = ?3
                     WHERE user_id = ?1 AND workspace_id = ?2 AND revoked_at IS NULL",
                    params![user, ws, tx.now],
                )?;
                tx.conn.execute(
                    "DELETE FROM memberships WHERE workspace_id = ?1 AND user_id = ?2",
                    [&ws, &user],
                )?;
                Ok(keys)
            })
            .await
    }

    /// Records a password-reset link by its token's hash, good until `expires_at` (ms).
    pub async fn add_password_reset(
        &self,
        token_hash: &str,
        user_id: &str,
        created_by: &str,
        expires_at: i64,
    ) -> Result<()> {
        let (hash, user, by) = (
            token_hash.to_owned(),
            user_id.to_owned(),
            created_by.to_owned(),
        );
        self.store
            .write(move |tx| {
                tx.conn.execute(
                    "DELETE FROM password_resets WHERE expires_at < ?1",
                    [tx.now],
                )?;
                tx.conn.execute(
                    "INSERT INTO password_resets (token_hash, user_id, created_by, created_at, expires_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![hash, user, by, tx.now, expires_at],
                )?;
                Ok(())
            })
            .await
    }

    /// Sets the password of the link's person, uses up every link of theirs and ends their
    /// browser sessions, in one transaction. `None` when the link is unknown, used or expired.
    pub async fn use_password_reset(
        &self,
        token_hash: &str,
        password_hash: &str,
    ) -> Result<Option<String>> {
        let (hash, phc) = (token_hash.to_owned(), password_hash.to_owned());
        self.store
            .write(move |tx| {
                let user: Option<String> = tx
                    .conn
                    .query_row(
                        "SELECT user_id FROM password_resets WHERE token_hash = ?1 AND expires_at >= ?2",
                        params![hash, tx.now],
                        |r| r.get(0),
                    )
                    .optional()?;
                let Some(user) = user else {
                    return Ok(None);
                };
                tx.conn.execute(
                    "UPDATE users SET password_hash = ?2 WHERE id = ?1",
                    [&user, &phc],
                )?;
                tx.conn
                    .execute("DELETE FROM password_resets WHERE user_id = ?1", [&user])?;
                tx.conn
                    .execute("DELETE FROM browser_sessions WHERE user_id = ?1", [&user])?;
                Ok(Some(user))
            })
            .await
    }

    /// Creates a workspace (with its root agent) and makes `owner` its owner; 409
    /// `workspace_exists` when the slug is taken.
    pub async fn create_workspace(&self, slug: &str, name: &str, owner: &str) -> Result<String> {
        let (slug, name, owner) = (slug.to_owned(), name.to_owned(), owner.to_owned());
        self.store
            .write(move |tx| {
                if tx.workspace_by_slug(&slug)?.is_some() {
                    return Err(Error::Conflict(
                        "workspace_exists",
                        format!("a workspace {slug} already exists"),
                    ));
                }
                let id = tx.ensure_workspace(&slug, &name)?;
                tx.add_membership(&owner, &id, Role::Owner.name())?;
                Ok(id)
            })
            .await
    }

    /// Renames a workspace (its display name; the slug stays).
    pub async fn rename_workspace(&self, workspace_id: &str, name: &str) -> Result<()> {
        let (ws, name) = (workspace_id.to_owned(), name.to_owned());
        self.store
            .write(move |tx| {
                tx.conn.execute(
                    "UPDATE workspaces SET name = ?2 WHERE id = ?1",
                    [&ws, &name],
                )?;
                Ok(())
            })
            .await
    }

    /// A workspace's name and creation time.
    pub async fn workspace(&self, workspace_id: &str) -> Result<Option<WorkspaceInfo>> {
        let ws = workspace_id.to_owned();
        self.store
            .read(move |c| {
                Ok(c.prepare_cached(
                    "SELECT id, slug, name, created_at FROM workspaces WHERE id = ?1",
                )?
                .query_row([&ws], |r| {
                    Ok(WorkspaceInfo {
                        id: r.get(0)?,
                        slug: r.get(1)?,
                        name: r.get(2)?,
                        created_at: r.get(3)?,
                    })
                })
                .optional()?)
            })
            .await
    }
}
